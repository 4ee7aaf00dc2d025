/* What a run needs of its attention backend (one table, read by the validator to refuse and
 * by explain to show every check), and the whole validator: the run config's own rules
 * (config/run_config_validate.c) then these capability rules. See attn_needs.h. */
#include "api/attn_needs.h"

#include "config/model_config.h"
#include "config/run_config_keys.h"
#include "core/err.h"

#include "lh_plugin.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Writes the reason; a text that does not fit ends in "...". */
__attribute__((format(printf, 3, 4))) static void because(char *buf, size_t n, const char *fmt,
                                                           ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (len >= 0 && (size_t)len >= n && n > 4)
        memcpy(buf + n - 4, "...", 4);
}

static const char *model_where(const char *model_path)
{
    return model_path ? model_path : "the model's config.json";
}

typedef bool (*need_fn)(const lh_run_config *rc, const lh_model_geometry *geo,
                        const char *model_path, char *why, size_t n);

static bool need_sliding_window(const lh_run_config *rc, const lh_model_geometry *geo,
                                const char *model_path, char *why, size_t n)
{
    (void)rc;
    if (!geo || geo->sliding_window <= 0)
        return false;
    because(why, n, "sliding_window=%lld in %s", (long long)geo->sliding_window,
            model_where(model_path));
    return true;
}

static bool need_chunked(const lh_run_config *rc, const lh_model_geometry *geo,
                         const char *model_path, char *why, size_t n)
{
    (void)rc;
    if (!geo || geo->attention_chunk_size <= 0)
        return false;
    because(why, n, "attention_chunk_size=%lld in %s", (long long)geo->attention_chunk_size,
            model_where(model_path));
    return true;
}

static bool need_mla(const lh_run_config *rc, const lh_model_geometry *geo,
                     const char *model_path, char *why, size_t n)
{
    (void)rc;
    if (!geo || !geo->has_mla)
        return false;
    because(why, n, "kv_lora_rank=%lld in %s (multi-head latent attention)",
            (long long)geo->kv_lora_rank, model_where(model_path));
    return true;
}

static bool need_fp8_kv(const lh_run_config *rc, const lh_model_geometry *geo,
                        const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    const lh_kv_cache_config *kv = &rc->kv_cache;
    bool k = kv->k_dtype == LH_DTYPE_FP8_E4M3, v = kv->v_dtype == LH_DTYPE_FP8_E4M3;
    if (!k && !v)
        return false;
    char from[2200];
    if (k && v)
        because(why, n, "kv_cache.k_dtype/v_dtype=%s (%s)", lh_dtype_name(kv->k_dtype),
                lh_rc_kv_dtypes_from(rc, from, sizeof from));
    else
        because(why, n, "kv_cache.%s=%s (from %s)", k ? "k_dtype" : "v_dtype",
                lh_dtype_name(LH_DTYPE_FP8_E4M3),
                lh_value_origin_str(rc, k ? kv->k_dtype_origin : kv->v_dtype_origin, from,
                                    sizeof from));
    return true;
}

static bool need_sparse(const lh_run_config *rc, const lh_model_geometry *geo,
                        const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    if (!rc->sparse.enabled)
        return false;
    char from[1024];
    because(why, n, "sparse_attention=%s, top_k=%lld (from %s)", lh_rc_sparse_algorithms[0],
            (long long)rc->sparse.top_k, lh_value_origin_str(rc, rc->sparse.origin, from,
                                                             sizeof from));
    return true;
}

static bool need_mixed_kv(const lh_run_config *rc, const lh_model_geometry *geo,
                          const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    if (!lh_kv_cache_mixed(&rc->kv_cache))
        return false;
    char from[2200];
    because(why, n, "kv_cache.k_dtype=%s / v_dtype=%s (%s)", lh_rc_kv_dtype_str(rc->kv_cache.k_dtype),
            lh_rc_kv_dtype_str(rc->kv_cache.v_dtype), lh_rc_kv_dtypes_from(rc, from, sizeof from));
    return true;
}

/* KV settings only the host's block pool honours: a backend with its own cache (vanilla:
 * contiguous f32) would ignore them, so they need LH_ATTN_CAP_PAGED_KV rather than being
 * dropped silently. */
static bool need_paged_kv(const lh_run_config *rc, const lh_model_geometry *geo,
                          const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    const lh_kv_cache_config *kv = &rc->kv_cache;
    char from[1024];
    const char *key = NULL;
    lh_value_origin o = {0};
    char val[64] = "";
    if (kv->k_dtype != LH_DTYPE_INVALID && kv->k_dtype != LH_DTYPE_F32) {
        key = "kv_cache.k_dtype";
        o = kv->k_dtype_origin;
        snprintf(val, sizeof val, "%s", lh_rc_kv_dtype_str(kv->k_dtype));
    } else if (kv->v_dtype != LH_DTYPE_INVALID && kv->v_dtype != LH_DTYPE_F32) {
        key = "kv_cache.v_dtype";
        o = kv->v_dtype_origin;
        snprintf(val, sizeof val, "%s", lh_rc_kv_dtype_str(kv->v_dtype));
    } else if (kv->layout != 0) {
        key = "kv_cache.layout";
        o = kv->layout_origin;
        snprintf(val, sizeof val, "HND");
    } else if (kv->max_tokens > 0) {
        key = "kv_cache.max_tokens";
        o = kv->max_tokens_origin;
        snprintf(val, sizeof val, "%lld", (long long)kv->max_tokens);
    } else if (kv->memory_fraction > 0) {
        key = "kv_cache.memory_fraction";
        o = kv->memory_fraction_origin;
        snprintf(val, sizeof val, "%g", kv->memory_fraction);
    } else if (kv->block_size_origin.kind != LH_ORIGIN_DEFAULT) {
        key = "kv_cache.block_size";
        o = kv->block_size_origin;
        snprintf(val, sizeof val, "%lld", (long long)kv->block_size);
    }
    if (!key)
        return false;
    because(why, n, "%s=%s (from %s) configures the paged KV pool", key, val,
            lh_value_origin_str(rc, o, from, sizeof from));
    return true;
}

static const struct {
    const char *capability;
    uint64_t bit;
    need_fn needed;
} attn_need_rules[] = {
    {"sliding_window", LH_ATTN_CAP_SLIDING_WINDOW, need_sliding_window},
    {"chunked", LH_ATTN_CAP_CHUNKED, need_chunked},
    {"mla", LH_ATTN_CAP_MLA, need_mla},
    {"fp8_kv", LH_ATTN_CAP_FP8_KV, need_fp8_kv},
    {"sparse", LH_ATTN_CAP_SPARSE, need_sparse},
    {"mixed_kv", LH_ATTN_CAP_MIXED_KV, need_mixed_kv},
    {"paged_kv", LH_ATTN_CAP_PAGED_KV, need_paged_kv},
};
_Static_assert(N_OF(attn_need_rules) <= LH_ATTN_MAX_NEEDS, "raise LH_ATTN_MAX_NEEDS");

size_t lh_attn_needs(const lh_run_config *rc, const lh_model_geometry *geo, const char *model_path,
                     lh_attn_need out[LH_ATTN_MAX_NEEDS])
{
    if (!rc || !out)
        return 0;
    for (size_t i = 0; i < N_OF(attn_need_rules); i++) {
        lh_attn_need *o = &out[i];
        memset(o, 0, sizeof *o);
        o->capability = attn_need_rules[i].capability;
        o->bit = attn_need_rules[i].bit;
        o->needed = attn_need_rules[i].needed(rc, geo, model_path, o->because, sizeof o->because);
        if (!o->needed)
            o->because[0] = '\0';
    }
    return N_OF(attn_need_rules);
}

lh_status lh_run_config_validate_with(const lh_run_config *rc, const lh_validation_facts *facts,
                                      lh_err *err)
{
    lh_status st = lh_run_config_validate(rc, err); /* the rc-only rules first */
    if (st)
        return st;
    if (!facts || !facts->attn_backend)
        return LH_OK;
    lh_attn_need needs[LH_ATTN_MAX_NEEDS];
    size_t n = lh_attn_needs(rc, facts->geo, facts->model_path, needs);
    /* every missing capability in one message, so one round of fixes is enough */
    char missing[1400] = "";
    size_t used = 0, n_missing = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (!needs[i].needed || (facts->attn_caps & needs[i].bit))
            continue;
        if (!n_missing)
            first = i;
        int w = snprintf(missing + used, sizeof missing - used, "%s%s (because %s)",
                         n_missing ? "; " : "", needs[i].capability, needs[i].because);
        n_missing++;
        if (w > 0)
            used += (size_t)w < sizeof missing - used ? (size_t)w : sizeof missing - used - 1;
    }
    if (n_missing == 1)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "attention backend '%s' does not support %s, which this run needs "
                          "(because %s); see `llmhost backends`",
                          facts->attn_backend, needs[first].capability, needs[first].because);
    if (n_missing > 1)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "attention backend '%s' lacks %zu capabilities this run needs: %s; see "
                          "`llmhost backends`", facts->attn_backend, n_missing, missing);
    return LH_OK;
}
