/* Shared helpers for the kernel tests: a deterministic generator, contexts per ISA (skipped,
 * never passed, where the CPU lacks the ISA), tensor views and tolerance checks. */
#ifndef LH_KTEST_H
#define LH_KTEST_H

#include "lh_kernels.h"
#include "runner.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64*: deterministic, so a failure reproduces. Each test reseeds. */
static uint64_t kt_state = 0x243f6a8885a308d3ull;
static inline void kt_seed(uint64_t s)
{
    kt_state = s ? s : 1;
}
static inline uint64_t kt_u64(void)
{
    kt_state ^= kt_state >> 12;
    kt_state ^= kt_state << 25;
    kt_state ^= kt_state >> 27;
    return kt_state * 2685821657736338717ull;
}
/* uniform in [-1, 1) */
static inline float kt_uniform(void)
{
    return (float)((double)(kt_u64() >> 40) / 8388608.0 - 1.0);
}
static inline float kt_range(float lo, float hi)
{
    return lo + (hi - lo) * (kt_uniform() * 0.5f + 0.5f);
}

static inline lh_device kt_cpu(void)
{
    lh_device d = {LH_DEVICE_CPU, 0};
    return d;
}

static inline lh_device kt_cuda(void)
{
    lh_device d = {LH_DEVICE_CUDA, 0};
    return d;
}

#define KT_N_ISAS 4
static const lh_k_isa kt_isas[KT_N_ISAS] = {LH_K_ISA_SCALAR, LH_K_ISA_AVX2, LH_K_ISA_AVX512,
                                           LH_K_ISA_AMX};

/* A context with n threads running `isa`; NULL when this CPU lacks the ISA. */
static inline lh_kctx *kt_ctx(int threads, lh_k_isa isa)
{
    lh_kctx *ctx = lh_k_ctx_create(threads, kt_cpu());
    if (!ctx) {
        fprintf(stderr, "lh_k_ctx_create failed: %s\n", lh_k_last_error(NULL));
        return NULL;
    }
    if (lh_k_ctx_set_isa(ctx, isa) != LH_OK) {
        lh_k_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

static inline bool kt_isa_supported(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(1, isa);
    lh_k_ctx_free(ctx);
    return ctx != NULL;
}

/* Whether key position p is visible to a query at qp: causal, sliding window (> 0) and chunked
 * attention (> 0, Llama 4: same chunk only). */
static inline bool kt_visible(int64_t p, int64_t qp, int64_t window, int64_t chunk)
{
    if (p > qp)
        return false;
    if (window > 0 && qp - p >= window)
        return false;
    if (chunk > 0 && p / chunk != qp / chunk)
        return false;
    return true;
}

/* Double-precision attention: q [T, H, D], k [S, KVH, D], v [S, KVH, Dv] f32, query t at
 * position qpos[t]; out [T, H, Dv]. softcap > 0: every score becomes softcap * tanh(score /
 * softcap) before the mask and the softmax (transformers' eager Gemma 2 attention). */
static inline void kt_attn_ref_capped(const float *q, const float *k, const float *v,
                                      const int32_t *qpos, int64_t T, int64_t H, int64_t KVH,
                                      int64_t D, int64_t Dv, int64_t S, float scale,
                                      int64_t window, int64_t chunk, double softcap, double *out)
{
    double *sc = malloc((size_t)(S > 0 ? S : 1) * sizeof(double));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / (H / KVH);
            double m = -INFINITY;
            for (int64_t p = 0; p < S; p++) {
                if (!kt_visible(p, qpos[t], window, chunk)) {
                    sc[p] = -INFINITY;
                    continue;
                }
                double s = 0;
                for (int64_t d = 0; d < D; d++)
                    s += (double)q[(t * H + h) * D + d] * k[(p * KVH + kvh) * D + d];
                sc[p] = s * scale;
                if (softcap > 0)
                    sc[p] = tanh(sc[p] / softcap) * softcap;
                m = fmax(m, sc[p]);
            }
            double sum = 0;
            for (int64_t p = 0; p < S; p++)
                sum += sc[p] == -INFINITY ? 0 : exp(sc[p] - m);
            for (int64_t d = 0; d < Dv; d++) {
                double o = 0;
                for (int64_t p = 0; p < S; p++)
                    if (sc[p] != -INFINITY)
                        o += exp(sc[p] - m) / sum * v[(p * KVH + kvh) * Dv + d];
                out[(t * H + h) * Dv + d] = o;
            }
        }
    free(sc);
}

static inline void kt_attn_ref(const float *q, const float *k, const float *v,
                               const int32_t *qpos, int64_t T, int64_t H, int64_t KVH, int64_t D,
                               int64_t Dv, int64_t S, float scale, int64_t window, int64_t chunk,
                               double *out)
{
    kt_attn_ref_capped(q, k, v, qpos, T, H, KVH, D, Dv, S, scale, window, chunk, 0.0, out);
}

/* Defines name_scalar, name_avx2, name_avx512 test functions that call body(isa), each
 * reported as skipped where the CPU lacks the ISA. */
#define KT_ISA_TESTS(body)                                                                        \
    static void body##_scalar(void) { body(LH_K_ISA_SCALAR); }                                    \
    KT_VEC_TESTS(body)

/* The same, for tests that compare a vector ISA against the scalar path (no scalar variant). */
#define KT_VEC_TESTS(body)                                                                        \
    static void body##_avx2(void)                                                                 \
    {                                                                                             \
        if (!kt_isa_supported(LH_K_ISA_AVX2)) {                                                   \
            LH_TEST_SKIP("AVX2+FMA+F16C not available (CPU or build)");                                         \
            return;                                                                               \
        }                                                                                         \
        body(LH_K_ISA_AVX2);                                                                      \
    }                                                                                             \
    static void body##_avx512(void)                                                               \
    {                                                                                             \
        if (!kt_isa_supported(LH_K_ISA_AVX512)) {                                                 \
            LH_TEST_SKIP("AVX-512F not available (CPU or build)");                                              \
            return;                                                                               \
        }                                                                                         \
        body(LH_K_ISA_AVX512);                                                                    \
    }

static inline lh_tensor kt_t1(lh_dtype dt, void *data, int64_t a)
{
    int64_t s[1] = {a};
    return lh_tensor_cpu(dt, data, 1, s);
}
static inline lh_tensor kt_t2(lh_dtype dt, void *data, int64_t a, int64_t b)
{
    int64_t s[2] = {a, b};
    return lh_tensor_cpu(dt, data, 2, s);
}
static inline lh_tensor kt_t3(lh_dtype dt, void *data, int64_t a, int64_t b, int64_t c)
{
    int64_t s[3] = {a, b, c};
    return lh_tensor_cpu(dt, data, 3, s);
}

static inline const char *kt_dt_name(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 ? "f32" : dt == LH_DTYPE_BF16 ? "bf16" : "f16";
}

/* Rounds v to the weight dtype and back (so references use the very values the kernel sees). */
static inline float kt_round_to(lh_dtype dt, float v)
{
    if (dt == LH_DTYPE_BF16)
        return lh_k_bf16_to_f32(lh_k_f32_to_bf16(v));
    if (dt == LH_DTYPE_F16)
        return lh_k_f16_to_f32(lh_k_f32_to_f16(v));
    return v;
}

/* Fills a weight buffer of dtype dt with values; ref[i] receives the f32 value stored. */
static inline void kt_fill_w(lh_dtype dt, void *buf, float *ref, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) {
        float v = kt_uniform() * scale;
        if (dt == LH_DTYPE_F32)
            ((float *)buf)[i] = v;
        else if (dt == LH_DTYPE_BF16)
            ((uint16_t *)buf)[i] = lh_k_f32_to_bf16(v);
        else
            ((uint16_t *)buf)[i] = lh_k_f32_to_f16(v);
        ref[i] = kt_round_to(dt, v);
    }
}

static inline size_t kt_esize(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 ? 4 : 2;
}

/* Counts of failed element checks, reported once per case (not one CU assert per element). */
typedef struct kt_cmp {
    long bad;
    double worst; /* largest err / tol */
    long worst_i;
} kt_cmp;

static inline void kt_check(kt_cmp *c, long i, double got, double want, double tol)
{
    double err = fabs(got - want);
    bool ok = err <= tol || (isnan(got) && isnan(want)) || (isinf(want) && got == want);
    if (!ok)
        c->bad++;
    double r = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
    if (isnan(r) && !ok)
        r = INFINITY;
    if (r > c->worst || (!ok && c->bad == 1)) {
        if (r > c->worst)
            c->worst = r;
        c->worst_i = i;
    }
}

/* Reports and asserts a comparison; `what` describes the case. */
#define KT_REPORT(c, what)                                                                        \
    do {                                                                                          \
        if ((c).bad)                                                                              \
            printf("\n    FAIL %s: %ld element(s) out of tolerance (worst err/tol %.3g at %ld)",   \
                   (what), (c).bad, (c).worst, (c).worst_i);                                      \
        CU_ASSERT_EQUAL((c).bad, 0);                                                              \
    } while (0)

static inline bool kt_contains(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

/* call returns st and the message of the context `ctx` (in scope) contains msg. */
#define EXPECT_ERR(call, st, msg)                                                                 \
    do {                                                                                          \
        CU_ASSERT_EQUAL((call), (st));                                                            \
        if (!kt_contains(lh_k_last_error(ctx), (msg))) {                                          \
            printf("\n    want \"%s\"\n    got  \"%s\"", (msg), lh_k_last_error(ctx));            \
            CU_FAIL("message");                                                                   \
        }                                                                                         \
    } while (0)

#endif
