/* Shared by the runtime tests that compare logits with a fixture's reference.json: its prompts,
 * and the max |difference| of two logit arrays (NaN counts as infinitely far). */
#ifndef LH_TEST_RT_PROMPTS_H
#define LH_TEST_RT_PROMPTS_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct rt_prompts {
    size_t n;
    int32_t *ids[8];
    int64_t lens[8];
} rt_prompts;

/* The "prompts" of reference.json at `path` (at most 8); false when there are none. */
static inline bool rt_load_prompts(const char *path, rt_prompts *p)
{
    memset(p, 0, sizeof *p);
    json_t *ref = json_load_file(path, 0, NULL);
    const json_t *arr = json_object_get(ref, "prompts");
    for (size_t i = 0; i < json_array_size(arr) && i < 8; i++) {
        const json_t *pr = json_array_get(arr, i);
        p->lens[i] = (int64_t)json_array_size(pr);
        p->ids[i] = malloc((size_t)(p->lens[i] ? p->lens[i] : 1) * sizeof(int32_t));
        for (int64_t k = 0; p->ids[i] && k < p->lens[i]; k++)
            p->ids[i][k] = (int32_t)json_integer_value(json_array_get(pr, (size_t)k));
        p->n++;
    }
    json_decref(ref);
    return p->n > 0;
}

static inline void rt_free_prompts(rt_prompts *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->ids[i]);
}

static inline double rt_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

#endif
