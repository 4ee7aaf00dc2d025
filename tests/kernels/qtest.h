/* Shared by the kernel tests of ggml's block types (test_qmatmul.c, test_qembedding.c,
 * test_qmatmul_int8.c): the eight types' facts, random blocks with sane scales, the committed
 * extreme-scale fixtures (tests/fixtures/quant, see its README) and a bitwise comparison. */
#ifndef LH_QTEST_H
#define LH_QTEST_H

#include "ktest.h"

#include <errno.h>

typedef struct qtype {
    lh_dtype dt;
    const char *file; /* tests/fixtures/quant/<file>.bin / .f32 */
    int64_t block_elems, block_bytes;
    int n_scales;
    int scale_off[2];    /* byte offsets of the block's f16 scales */
    int64_t fixture_rows; /* the fixture's rows (its README's table) */
} qtype;

static const qtype qtypes[] = {
    {LH_DTYPE_Q4_0, "Q4_0", 32, 18, 1, {0, 0}, 5},     {LH_DTYPE_Q4_1, "Q4_1", 32, 20, 2, {0, 2}, 5},
    {LH_DTYPE_Q5_0, "Q5_0", 32, 22, 1, {0, 0}, 5},     {LH_DTYPE_Q5_1, "Q5_1", 32, 24, 2, {0, 2}, 5},
    {LH_DTYPE_Q8_0, "Q8_0", 32, 34, 1, {0, 0}, 5},     {LH_DTYPE_Q4_K, "Q4_K", 256, 144, 2, {0, 2}, 4},
    {LH_DTYPE_Q5_K, "Q5_K", 256, 176, 2, {0, 2}, 4},   {LH_DTYPE_Q6_K, "Q6_K", 256, 210, 1, {208, 0}, 4},
};
#define N_QTYPES (sizeof qtypes / sizeof qtypes[0])

/* rows x K elements of random blocks of q: random bytes, then every f16 scale replaced by a
 * small one (|d| in [1e-3, 1e-1], random sign), so no value is inf or NaN. */
static inline uint8_t *qt_random_blocks(const qtype *q, int64_t rows, int64_t K)
{
    const int64_t nblocks = rows * (K / q->block_elems);
    uint8_t *b = malloc((size_t)(nblocks * q->block_bytes) + 1);
    for (int64_t i = 0; i < nblocks; i++) {
        uint8_t *blk = b + i * q->block_bytes;
        for (int64_t k = 0; k < q->block_bytes; k++)
            blk[k] = (uint8_t)(kt_u64() >> 56);
        for (int s = 0; s < q->n_scales; s++) {
            float d = kt_range(1e-3f, 1e-1f) * ((kt_u64() >> 63) ? -1.0f : 1.0f);
            uint16_t h = lh_k_f32_to_f16(d);
            blk[q->scale_off[s]] = (uint8_t)(h & 0xff);
            blk[q->scale_off[s] + 1] = (uint8_t)(h >> 8);
        }
    }
    return b;
}

/* The whole of tests/fixtures/quant/<name>.<ext> (malloc'ed), or NULL with a message. */
static inline void *qt_read_fixture(const char *name, const char *ext, size_t *size)
{
    const char *dir = getenv("LH_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/quant/%s.%s", dir ? dir : "tests/fixtures", name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("\n    cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

/* Whether got and want hold the same floats bit for bit (any NaN matching any NaN: IEEE
 * leaves payloads open); prints the first difference under `what`. */
static inline bool qt_same_bits(const char *what, const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t g, w;
        memcpy(&g, &got[i], 4);
        memcpy(&w, &want[i], 4);
        if (g != w && !(isnan(got[i]) && isnan(want[i]))) {
            printf("\n    %s: element %lld: got 0x%08x (%.9g), want 0x%08x (%.9g)", what,
                   (long long)i, (unsigned)g, (double)got[i], (unsigned)w, (double)want[i]);
            return false;
        }
    }
    return true;
}

#endif
