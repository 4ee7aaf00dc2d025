/* Public sampling entry points (lh_kernels.h "sampling"): argument checks, then the kernel
 * for the context's device (cpu/sampling.c or cuda/sampling.cu). */
#include "dispatch_checks.h"
#include "cpu/sampling.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>

static lh_status check_params(lh_kctx *ctx, const char *fn, const lh_sampling_params *p)
{
    if (!p)
        return lh_kerr(ctx, LH_E_USAGE, "%s: params is NULL", fn);
    if (p->struct_size < sizeof *p)
        return lh_kerr(ctx, LH_E_USAGE, "%s: params.struct_size %u is smaller than this "
                       "library's %zu; set it to sizeof(lh_sampling_params)", fn,
                       p->struct_size, sizeof *p);
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return lh_kerr(ctx, LH_E_USAGE, "%s: temperature = %g must be a finite number >= 0 (0: "
                       "greedy)", fn, (double)p->temperature);
    if (p->top_k < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: top_k = %" PRId64 " must be >= 0 (0: off)", fn,
                       p->top_k);
    /* transformers' range: 0 keeps only the most likely token */
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return lh_kerr(ctx, LH_E_USAGE, "%s: top_p = %g is outside [0, 1] (1: off)", fn,
                       (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return lh_kerr(ctx, LH_E_USAGE, "%s: min_p = %g is outside [0, 1] (0: off)", fn,
                       (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return lh_kerr(ctx, LH_E_USAGE, "%s: repetition_penalty = %g must be a finite number > 0 "
                       "(1: off)", fn, (double)p->repetition_penalty);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_sampling_check(lh_kctx *ctx, const lh_sampling_params *params)
{
    static const char fn[] = "lh_k_sampling_check";
    if (ctx)
        LH_KD_CHECK(lh_kd_begin(ctx, fn));
    return check_params(ctx, fn, params);
}

static lh_status run(lh_kctx *ctx, const char *fn, const lh_sampling_params *params,
                     const lh_tensor *logits, const int32_t *const *history,
                     const int64_t *history_len, uint64_t seed, const uint64_t *stream,
                     const uint64_t *step, int32_t *out, lh_tensor *probs)
{
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(check_params(ctx, fn, params));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "logits", logits, 2, 2, LH_KD_F32));
    const int64_t M = logits->shape[0], V = logits->shape[1];
    if (probs) {
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "probs", probs, 2, 2, LH_KD_F32));
        if (!lh_kd_same_shape(logits, probs))
            return lh_kerr(ctx, LH_E_USAGE, "%s: probs %s must have the shape of logits %s", fn,
                           LH_KD_SH(probs), LH_KD_SH(logits));
        if (lh_kd_overlaps(logits, probs))
            return lh_kerr(ctx, LH_E_USAGE, "%s: probs overlaps logits", fn);
    }
    if (M == 0)
        return LH_OK;
    if (V == 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: logits %s has an empty vocabulary", fn,
                       LH_KD_SH(logits));
    if (V > INT32_MAX)
        return lh_kerr(ctx, LH_E_USAGE, "%s: logits %s: a vocabulary beyond int32 ids", fn,
                       LH_KD_SH(logits));
    if (!probs && !out)
        return lh_kerr(ctx, LH_E_USAGE, "%s: out is NULL", fn);
    if (out && params->temperature != 0.0f && (!stream || !step))
        return lh_kerr(ctx, LH_E_USAGE, "%s: stream and step are required when sampling "
                       "(temperature %g)", fn, (double)params->temperature);
    if (history_len)
        for (int64_t r = 0; r < M; r++) {
            if (history_len[r] < 0)
                return lh_kerr(ctx, LH_E_USAGE, "%s: history_len[%" PRId64 "] = %" PRId64
                               " is negative", fn, r, history_len[r]);
            if (history_len[r] > 0 && (!history || !history[r]))
                return lh_kerr(ctx, LH_E_USAGE, "%s: history[%" PRId64 "] is NULL (history_len "
                               "%" PRId64 ")", fn, r, history_len[r]);
            for (int64_t h = 0; h < history_len[r]; h++)
                if (history[r][h] < 0 || history[r][h] >= V)
                    return lh_kerr(ctx, LH_E_USAGE, "%s: history[%" PRId64 "][%" PRId64 "] = %"
                                   PRId32 " is outside the vocabulary [0, %" PRId64 ")", fn, r,
                                   h, history[r][h], V);
        }
    lh_sample_job j = {.params = params, .logits = logits->data, .M = M, .V = V,
                       .history = history, .history_len = history_len, .seed = seed,
                       .stream = stream, .step = step, .out = out,
                       .probs = probs ? probs->data : NULL};
    int64_t row = 0, id = 0;
    int code = 0;
    lh_status st = LH_KD_ON_DEVICE(ctx, LH_CUDA(sample)(ctx, &j, &row, &code, &id),
                                   lh_cpu_sample(ctx, &j, &row, &code, &id));
    if (st == LH_E_USAGE && code == LH_SAMPLE_BAD_LOGIT) {
        const float *bad = (const float *)logits->data + row * V + id;
        float v = 0.0f;
        if (ctx->cuda && LH_CUDA(copy)(ctx, &v, false, bad, true, sizeof v) != LH_OK)
            return LH_E_INTERNAL; /* the message says why the device failed */
        if (!ctx->cuda)
            v = *bad;
        return lh_kerr(ctx, LH_E_USAGE, "%s: logits[%" PRId64 "][%" PRId64 "] is %s; sampling "
                       "needs finite logits (or -inf for a masked token)", fn, row, id,
                       isnan(v) ? "NaN" : "+inf");
    }
    if (st == LH_E_USAGE && code == LH_SAMPLE_OVERFLOW)
        return lh_kerr(ctx, LH_E_USAGE, "%s: row %" PRId64 ": a logit divided by temperature %g "
                       "overflows to +inf; use a larger temperature (or 0 for greedy)", fn, row,
                       (double)params->temperature);
    if (st == LH_E_USAGE && code == LH_SAMPLE_NO_FINITE)
        return lh_kerr(ctx, LH_E_USAGE, "%s: row %" PRId64 " of logits %s has no finite logit "
                       "to sample from", fn, row, LH_KD_SH(logits));
    return st;
}

LH_EXPORT lh_status lh_k_sampling_probs(lh_kctx *ctx, const lh_sampling_params *params,
                                        const lh_tensor *logits, const int32_t *const *history,
                                        const int64_t *history_len, lh_tensor *probs)
{
    static const char fn[] = "lh_k_sampling_probs";
    if (!probs) {
        LH_KD_CHECK(lh_kd_begin(ctx, fn));
        return lh_kerr(ctx, LH_E_USAGE, "%s: probs is NULL", fn);
    }
    return run(ctx, fn, params, logits, history, history_len, 0, NULL, NULL, NULL, probs);
}

LH_EXPORT lh_status lh_k_sample(lh_kctx *ctx, const lh_sampling_params *params,
                                const lh_tensor *logits, const int32_t *const *history,
                                const int64_t *history_len, uint64_t seed,
                                const uint64_t *stream, const uint64_t *step, int32_t *out)
{
    return run(ctx, "lh_k_sample", params, logits, history, history_len, seed, stream, step,
               out, NULL);
}
