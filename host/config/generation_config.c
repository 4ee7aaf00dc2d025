/* generation_config.json (see generation_config.h). */
#include "config/generation_config.h"

#include "core/err.h"
#include "core/fileio.h"
#include "core/json_kind.h"
#include "core/strutil.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LH_MAX_GENCONFIG_BYTES ((size_t)16 << 20)

void lh_generation_config_defaults(lh_generation_config *g)
{
    *g = (lh_generation_config){.do_sample = false, .temperature = 1.0f, .top_k = 50,
                                .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f};
}

void lh_generation_config_free(lh_generation_config *g)
{
    if (!g)
        return;
    free(g->eos_ids);
    g->eos_ids = NULL;
    g->n_eos = 0;
}

/* a number key: 0 absent/null, 1 read, else the error status */
static lh_status get_number(const json_t *root, const char *src, const char *key, double lo,
                            bool lo_open, double hi, const char *range, float *out, lh_err *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_number(v))
        return lh_err_set(err, LH_E_CONFIG, "%s: %s must be a number, got %s", src, key,
                          lh_json_kind(v));
    double x = json_number_value(v);
    if (!isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi)
        return lh_err_set(err, LH_E_CONFIG, "%s: %s=%g must be %s", src, key, x, range);
    *out = (float)x;
    return LH_OK;
}

static lh_status get_id(const json_t *v, const char *src, const char *what, int32_t *out,
                        lh_err *err)
{
    if (!json_is_integer(v))
        return lh_err_set(err, LH_E_CONFIG, "%s: %s must be an integer token id, got %s", src,
                          what, lh_json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT32_MAX)
        return lh_err_set(err, LH_E_CONFIG, "%s: %s=%lld is not a token id (0 to %d)", src, what,
                          (long long)x, INT32_MAX);
    *out = (int32_t)x;
    return LH_OK;
}

static lh_status parse_eos(const json_t *root, const char *src, lh_generation_config *g,
                           lh_err *err);

static lh_status parse_fields(const json_t *root, const char *src, lh_generation_config *g,
                              lh_err *err)
{
    const json_t *v = json_object_get(root, "do_sample");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return lh_err_set(err, LH_E_CONFIG, "%s: do_sample must be true or false, got %s",
                              src, lh_json_kind(v));
        g->do_sample = json_is_true(v);
    }
    lh_status st;
    if ((st = get_number(root, src, "temperature", 0, false, HUGE_VAL, "a finite number >= 0",
                         &g->temperature, err)))
        return st;
    if ((st = get_number(root, src, "top_p", 0, false, 1, "in [0, 1]", &g->top_p, err)))
        return st;
    if ((st = get_number(root, src, "min_p", 0, false, 1, "in [0, 1]", &g->min_p, err)))
        return st;
    if ((st = get_number(root, src, "repetition_penalty", 0, true, HUGE_VAL,
                         "a finite number > 0", &g->repetition_penalty, err)))
        return st;
    v = json_object_get(root, "top_k");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v))
            return lh_err_set(err, LH_E_CONFIG, "%s: top_k must be an integer, got %s", src,
                              lh_json_kind(v));
        if (json_integer_value(v) < 0)
            return lh_err_set(err, LH_E_CONFIG, "%s: top_k=%lld must be >= 0", src,
                              (long long)json_integer_value(v));
        g->top_k = (int64_t)json_integer_value(v);
    }
    return parse_eos(root, src, g, err);
}

static lh_status parse_eos(const json_t *root, const char *src, lh_generation_config *g,
                           lh_err *err)
{
    lh_status st;
    const json_t *v = json_object_get(root, "eos_token_id");
    if (v && !json_is_null(v)) {
        size_t n = json_is_array(v) ? json_array_size(v) : 1;
        if (!json_is_array(v) && !json_is_integer(v))
            return lh_err_set(err, LH_E_CONFIG, "%s: eos_token_id must be an integer or a list "
                              "of integers, got %s", src, lh_json_kind(v));
        g->eos_ids = malloc((n ? n : 1) * sizeof *g->eos_ids);
        if (!g->eos_ids)
            return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", src);
        for (size_t i = 0; i < n; i++) {
            char what[64];
            snprintf(what, sizeof what, json_is_array(v) ? "eos_token_id[%zu]" : "eos_token_id",
                     i);
            if ((st = get_id(json_is_array(v) ? json_array_get(v, i) : v, src, what,
                             &g->eos_ids[i], err)))
                return st;
            g->n_eos = (int64_t)i + 1;
        }
    }
    return LH_OK;
}

lh_status lh_generation_config_parse(const char *text, size_t len, const char *source,
                                     lh_generation_config *g, lh_err *err)
{
    lh_generation_config_defaults(g);
    g->present = true;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) { /* a byte order mark is not JSON */
        text += 3;
        len -= 3;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return lh_err_set(err, LH_E_CONFIG, "%s:%d:%d: JSON syntax error: %s", source,
                          jerr.line > 0 ? jerr.line : 1, jerr.column > 0 ? jerr.column : 1,
                          jerr.text);
    lh_status st = LH_OK;
    if (!json_is_object(root))
        st = lh_err_set(err, LH_E_CONFIG, "%s: the top level must be a JSON object, got %s",
                        source, lh_json_kind(root));
    else
        st = parse_fields(root, source, g, err);
    json_decref(root);
    if (st != LH_OK)
        lh_generation_config_free(g);
    return st;
}

lh_status lh_generation_config_load(const char *model_dir, lh_generation_config *g,
                                    lh_err *err)
{
    lh_generation_config_defaults(g);
    char *path = lh_asprintf("%s/generation_config.json", model_dir ? model_dir : ".");
    if (!path)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        free(path);
        return LH_OK;
    }
    char *text = NULL;
    size_t len = 0;
    lh_status st = lh_read_text_file(path, "generation config", LH_MAX_GENCONFIG_BYTES,
                                     LH_E_CONFIG, &text, &len, err);
    if (st == LH_OK)
        st = lh_generation_config_parse(text, len, path, g, err);
    free(text);
    free(path);
    return st;
}

lh_status lh_generation_config_from_model(const json_t *model_root, const char *source,
                                          lh_generation_config *g, lh_err *err)
{
    lh_generation_config_defaults(g);
    if (!json_is_object(model_root))
        return LH_OK;
    lh_status st = parse_eos(model_root, source, g, err);
    if (st != LH_OK)
        lh_generation_config_free(g);
    return st;
}
