/* The one validator of the run config: one function per cross-key rule, run in the order of
 * `validation_rules` (add a rule there). Each error is LH_E_CONFIG naming the key(s) and where
 * each value came from. The rules that need the attention backend's capabilities are in
 * api/attn_needs.c (lh_run_config_validate_with). See run_config.h. */
#include "run_config.h"

#include "config/model_config.h"
#include "config/run_config_keys.h"
#include "core/err.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef lh_status (*rc_rule_fn)(const lh_run_config *rc, lh_err *err);

#define ORIGIN(rc, o) lh_value_origin_str((rc), (o), obuf, sizeof obuf)

static lh_status rule_model_impl(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if ((unsigned)rc->model_impl_mode > LH_IMPL_REQUIRE)
        return lh_err_set(err, LH_E_CONFIG, "model_impl.mode=%d (from %s) is not one of off, "
                          "auto, require", (int)rc->model_impl_mode,
                          ORIGIN(rc, rc->model_impl_origin));
    /* mode off with a target is fine: the target is ignored. */
    if (rc->model_impl_mode != LH_IMPL_OFF &&
        (!rc->model_impl_target || !*rc->model_impl_target))
        return lh_err_set(err, LH_E_CONFIG, "model_impl.mode=%s (from %s) needs model_impl.target",
                          lh_rc_impl_mode_name(rc->model_impl_mode), ORIGIN(rc, rc->model_impl_origin));
    return LH_OK;
}

static lh_status rule_dtype(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if (rc->dtype != LH_DTYPE_INVALID && rc->dtype != LH_DTYPE_F32 &&
        rc->dtype != LH_DTYPE_BF16 && rc->dtype != LH_DTYPE_F16)
        return lh_err_set(err, LH_E_CONFIG,
                          "dtype=%s (from %s) is not a weight dtype (auto, float32, bfloat16, "
                          "float16); use quant for quantized weights",
                          lh_dtype_name(rc->dtype), ORIGIN(rc, rc->dtype_origin));
    return LH_OK;
}

static lh_status rule_sizes(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024], obuf2[1024];
    if (rc->max_seq_len < 0)
        return lh_err_set(err, LH_E_CONFIG, "max_seq_len=%lld (from %s) must be > 0",
                          (long long)rc->max_seq_len, ORIGIN(rc, rc->max_seq_len_origin));
    /* positions travel as int32 (lh_attention.h) */
    if (rc->max_seq_len > INT32_MAX)
        return lh_err_set(err, LH_E_CONFIG, "max_seq_len=%lld (from %s) must be at most %d",
                          (long long)rc->max_seq_len, ORIGIN(rc, rc->max_seq_len_origin),
                          INT32_MAX);
    if (rc->max_batch_size <= 0)
        return lh_err_set(err, LH_E_CONFIG, "max_batch_size=%lld (from %s) must be > 0",
                          (long long)rc->max_batch_size, ORIGIN(rc, rc->max_batch_size_origin));
    int64_t tokens;
    if (__builtin_mul_overflow(rc->max_seq_len, rc->max_batch_size, &tokens))
        return lh_err_set(err, LH_E_CONFIG,
                          "max_seq_len=%lld (from %s) * max_batch_size=%lld (from %s) overflows "
                          "a 64-bit token count",
                          (long long)rc->max_seq_len, ORIGIN(rc, rc->max_seq_len_origin),
                          (long long)rc->max_batch_size,
                          lh_value_origin_str(rc, rc->max_batch_size_origin, obuf2,
                                              sizeof obuf2));
    return LH_OK;
}

static lh_status check_group(const lh_run_config *rc, const char *what, int64_t group,
                             lh_value_origin o, lh_err *err)
{
    char obuf[1024];
    if (group <= 0 || group % 2 != 0)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s=%lld (from %s) must be a positive even number for int4 (two 4-bit "
                          "values share a byte)",
                          what, (long long)group, ORIGIN(rc, o));
    return LH_OK;
}

static lh_status rule_quant(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    const lh_quant_config *q = &rc->quant;
    if ((unsigned)q->scheme > LH_QUANT_INT4)
        return lh_err_set(err, LH_E_CONFIG, "quant.scheme=%d (from %s) is not one of none, fp8, "
                          "int8, int4", (int)q->scheme, ORIGIN(rc, q->origin));
    lh_status st;
    if (q->scheme == LH_QUANT_INT4 &&
        (st = check_group(rc, "quant.group_size", q->group_size, q->origin, err)))
        return st;
    for (size_t i = 0; i < q->n_rules; i++) {
        const lh_quant_rule *r = &q->rules[i];
        char what[64];
        if (!r->pattern || !*r->pattern)
            return lh_err_set(err, LH_E_CONFIG, "quant.rules[%zu].pattern (from %s) is empty",
                              i, ORIGIN(rc, r->origin));
        if ((unsigned)r->scheme > LH_QUANT_INT4)
            return lh_err_set(err, LH_E_CONFIG,
                              "quant.rules[%zu].scheme=%d (from %s) is not one of none, fp8, "
                              "int8, int4", i, (int)r->scheme, ORIGIN(rc, r->origin));
        /* a rule whose scheme is none is fine: it keeps the matched layers unquantized */
        snprintf(what, sizeof what, "quant.rules[%zu].group_size", i);
        if (r->scheme == LH_QUANT_INT4 && (st = check_group(rc, what, r->group_size, r->origin,
                                                            err)))
            return st;
    }
    for (size_t i = 0; i < q->n_exclude; i++)
        if (!q->exclude_modules[i] || !*q->exclude_modules[i])
            return lh_err_set(err, LH_E_CONFIG,
                              "quant.exclude_modules[%zu] (from %s) is an empty pattern", i,
                              ORIGIN(rc, q->origin));
    return LH_OK;
}

static bool kv_dtype_valid(lh_dtype dt)
{
    for (size_t i = 0; i < lh_rc_n_kv_dtypes; i++)
        if (dt == lh_rc_kv_dtype_values[i])
            return true;
    return false;
}

static lh_status rule_kv_cache(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024], obuf2[1024];
    const lh_kv_cache_config *kv = &rc->kv_cache;
    if (kv->block_size <= 0)
        return lh_err_set(err, LH_E_CONFIG, "kv_cache.block_size=%lld (from %s) must be > 0",
                          (long long)kv->block_size, ORIGIN(rc, kv->block_size_origin));
    if (kv->layout != 0 && kv->layout != 1)
        return lh_err_set(err, LH_E_CONFIG,
                          "kv_cache.layout=%d (from %s) is not 0 (NHD) or 1 (HND)", kv->layout,
                          ORIGIN(rc, kv->layout_origin));
    const struct {
        const char *key;
        lh_dtype dt;
        lh_value_origin o;
    } dts[] = {{"k_dtype", kv->k_dtype, kv->k_dtype_origin},
               {"v_dtype", kv->v_dtype, kv->v_dtype_origin}};
    for (size_t i = 0; i < N_OF(dts); i++)
        if (!kv_dtype_valid(dts[i].dt))
            return lh_err_set(err, LH_E_CONFIG,
                              "kv_cache.%s=%s (from %s) is not a KV cache dtype (auto, float32, "
                              "bfloat16, float16, fp8)",
                              dts[i].key, lh_dtype_name(dts[i].dt), ORIGIN(rc, dts[i].o));
    if (kv->max_tokens < 0)
        return lh_err_set(err, LH_E_CONFIG, "kv_cache.max_tokens=%lld (from %s) must be > 0",
                          (long long)kv->max_tokens, ORIGIN(rc, kv->max_tokens_origin));
    /* 0 is unset; the negation also refuses NaN */
    if (!(kv->memory_fraction >= 0.0 && kv->memory_fraction <= 1.0))
        return lh_err_set(err, LH_E_CONFIG,
                          "kv_cache.memory_fraction=%g (from %s) must be in (0, 1]",
                          kv->memory_fraction, ORIGIN(rc, kv->memory_fraction_origin));
    if (kv->max_tokens > 0 && kv->memory_fraction > 0.0)
        return lh_err_set(err, LH_E_CONFIG,
                          "kv_cache.max_tokens=%lld (from %s) and kv_cache.memory_fraction=%g "
                          "(from %s) are mutually exclusive: both size the KV pool; give one",
                          (long long)kv->max_tokens, ORIGIN(rc, kv->max_tokens_origin),
                          kv->memory_fraction,
                          lh_value_origin_str(rc, kv->memory_fraction_origin, obuf2,
                                              sizeof obuf2));
    return LH_OK;
}

/* beam_width, sparse_attention and speculative, each on its own (API users can build any
 * struct). */
static lh_status rule_decoding(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if (rc->beam_width < 1)
        return lh_err_set(err, LH_E_CONFIG, "beam_width=%lld (from %s) must be >= 1",
                          (long long)rc->beam_width, ORIGIN(rc, rc->beam_width_origin));
    const lh_sparse_config *sp = &rc->sparse;
    if (sp->enabled && sp->top_k < 1)
        return lh_err_set(err, LH_E_CONFIG, "sparse_attention.top_k=%lld (from %s) must be >= 1",
                          (long long)sp->top_k, ORIGIN(rc, sp->origin));
    if (sp->enabled && sp->local_blocks < 1)
        return lh_err_set(err, LH_E_CONFIG,
                          "sparse_attention.local_blocks=%lld (from %s) must be >= 1",
                          (long long)sp->local_blocks, ORIGIN(rc, sp->origin));
    const lh_speculative_config *sd = &rc->speculative;
    if (sd->mode && !*sd->mode)
        return lh_err_set(err, LH_E_CONFIG,
                          "speculative.mode (from %s) is empty; name a mode (e.g. eagle3, mtp, "
                          "draft_model) or leave speculative out",
                          ORIGIN(rc, sd->origin));
    if (sd->mode && sd->num_tokens < 1)
        return lh_err_set(err, LH_E_CONFIG, "speculative.num_tokens=%lld (from %s) must be >= 1",
                          (long long)sd->num_tokens, ORIGIN(rc, sd->origin));
    return LH_OK;
}

/* DESIGN §9: mixed-precision KV needs no sparse attention, a single beam and no speculative
 * decoding (the backend capability is checked with the facts, below). */
static lh_status rule_mixed_kv(const lh_run_config *rc, lh_err *err)
{
    const lh_kv_cache_config *kv = &rc->kv_cache;
    if (!lh_kv_cache_mixed(kv))
        return LH_OK;
    char what[160], obuf[1024];
    const char *why = NULL;
    lh_value_origin o = {0};
    if (rc->sparse.enabled) {
        snprintf(what, sizeof what, "sparse_attention");
        o = rc->sparse.origin;
        why = "mixed-precision KV supports dense attention only";
    } else if (rc->beam_width > 1) {
        snprintf(what, sizeof what, "beam_width=%lld", (long long)rc->beam_width);
        o = rc->beam_width_origin;
        why = "mixed-precision KV supports a single beam only";
    } else if (rc->speculative.mode) {
        snprintf(what, sizeof what, "speculative.mode=%.100s", rc->speculative.mode);
        o = rc->speculative.origin;
        why = "mixed-precision KV does not support speculative decoding";
    }
    if (!why)
        return LH_OK;
    char from[2200];
    return lh_err_set(err, LH_E_CONFIG,
                      "kv_cache.k_dtype=%s / v_dtype=%s (mixed-precision KV, %s) cannot be "
                      "combined with %s (from %s): %s; give one kv_cache.dtype for keys and "
                      "values, or drop %s",
                      lh_rc_kv_dtype_str(kv->k_dtype), lh_rc_kv_dtype_str(kv->v_dtype),
                      lh_rc_kv_dtypes_from(rc, from, sizeof from), what, ORIGIN(rc, o), why,
                      rc->sparse.enabled ? "sparse_attention"
                      : rc->beam_width > 1 ? "beam_width"
                                           : "speculative");
}

/* Only what a struct filled by hand can get wrong: the parsers produce nothing else.
 * cuda_graphs with device cpu is no error: it is simply unused. */
lh_status lh_run_config_validate_device(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if (rc->device_auto)
        return LH_OK;
    if (rc->device.kind != LH_DEVICE_CPU && rc->device.kind != LH_DEVICE_CUDA)
        return lh_err_set(err, LH_E_CONFIG, "device kind %d (from %s) is neither cpu nor cuda; "
                          "expected " LH_RC_DEVICE_FORMS, (int)rc->device.kind,
                          ORIGIN(rc, rc->device_origin));
    if (rc->device.kind == LH_DEVICE_CUDA && rc->device.index < 0)
        return lh_err_set(err, LH_E_CONFIG, "device cuda:%d (from %s): a CUDA device ordinal is "
                          ">= 0", rc->device.index, ORIGIN(rc, rc->device_origin));
    return LH_OK;
}

static const rc_rule_fn validation_rules[] = {
    rule_model_impl, rule_dtype, rule_sizes, rule_quant, rule_kv_cache, rule_decoding,
    rule_mixed_kv, lh_run_config_validate_device,
};

lh_status lh_run_config_validate(const lh_run_config *rc, lh_err *err)
{
    if (!rc)
        return lh_err_set(err, LH_E_USAGE, "lh_run_config_validate: rc is NULL");
    for (size_t i = 0; i < N_OF(validation_rules); i++) {
        lh_status st = validation_rules[i](rc, err);
        if (st)
            return st;
    }
    return LH_OK;
}
