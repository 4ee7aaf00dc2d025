/* Kernel library: attention over a contiguous KV cache against a double-precision reference of
 * HF eager attention: scores = q . k * scale, positions p > q_pos (causal) and, with a sliding
 * window w > 0, p <= q_pos - w (Mistral: HF masks q_pos - p >= w) get zero weight; softmax;
 * weighted sum of v. Query head h reads kv head h / (H / KVH) (GQA; MHA and MQA as the
 * extremes). Cases: T = 1 decode and T > 1 prefill with the queries at the end of the cache.
 *
 * Tolerance: |out - ref| <= 2e-5 * max|v| + 1e-6 (scores are O(1) here: |q|, |k| <= 1 and
 * scale = 1/sqrt(D)). Threads 1 and 2 give bit-identical results (one task per (t, h)).
 * Attention-logit soft-capping (Gemma 2: score = cap * tanh(score / cap) after the scale,
 * before the mask and the softmax) against the capped reference on inputs where the cap
 * matters (q scaled by 12: raw scores up to ~+-15, caps 2, 3.5, 5), for both entry points. */
#include "ktest.h"

struct attn_case {
    const char *name;
    int64_t T, H, KVH, D, Dv, S, window;
};

static const struct attn_case Cases[] = {
    {"decode GQA 8/2", 1, 8, 2, 64, 64, 37, 0},
    {"decode MQA 6/1, D 33", 1, 6, 1, 33, 33, 100, 0},
    {"prefill at the end of the cache, MHA 4/4", 5, 4, 4, 16, 16, 20, 0},
    {"prefill from 0 (S == T), GQA 4/2, D 7", 9, 4, 2, 7, 7, 9, 0},
    {"prefill sliding window 4", 7, 4, 2, 32, 32, 30, 4},
    {"decode sliding window 16", 1, 4, 1, 128, 128, 300, 16},
    {"window 1 (self only)", 3, 2, 1, 8, 8, 10, 1},
    {"window larger than the cache", 4, 2, 2, 5, 5, 6, 1000},
    {"D 1", 3, 3, 3, 1, 1, 5, 0},
    {"v head dim differs (D 24, Dv 16)", 4, 4, 2, 24, 16, 12, 0},
    {"long decode", 1, 4, 2, 64, 64, 2000, 0},
};
#define N_CASES (sizeof Cases / sizeof Cases[0])

static void attention_vs_reference(lh_k_isa isa)
{
    lh_kctx *c2 = kt_ctx(2, isa), *c1 = kt_ctx(1, isa), *cs = kt_ctx(2, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cs);
    kt_seed(1001);
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const struct attn_case *c = &Cases[ci];
        const int64_t nq = c->T * c->H * c->D, nk = c->S * c->KVH * c->D, nv = c->S * c->KVH * c->Dv;
        const int64_t no = c->T * c->H * c->Dv;
        float *q = malloc((size_t)nq * sizeof(float)), *k = malloc((size_t)nk * sizeof(float));
        float *v = malloc((size_t)nv * sizeof(float)), *o = malloc((size_t)no * sizeof(float));
        float *o1 = malloc((size_t)no * sizeof(float)), *os = malloc((size_t)no * sizeof(float));
        double *ref = malloc((size_t)no * sizeof(double));
        for (int64_t i = 0; i < nq; i++)
            q[i] = kt_uniform();
        for (int64_t i = 0; i < nk; i++)
            k[i] = kt_uniform();
        double vmax = 0;
        for (int64_t i = 0; i < nv; i++) {
            v[i] = kt_uniform() * 2.0f;
            vmax = fmax(vmax, fabs(v[i]));
        }
        int32_t *qpos = malloc((size_t)c->T * sizeof(int32_t));
        for (int64_t t = 0; t < c->T; t++)
            qpos[t] = (int32_t)(c->S - c->T + t); /* the queries are the last T cache positions */
        const float scale = 1.0f / sqrtf((float)c->D);
        lh_tensor tq = kt_t3(LH_DTYPE_F32, q, c->T, c->H, c->D);
        lh_tensor tk = kt_t3(LH_DTYPE_F32, k, c->S, c->KVH, c->D);
        lh_tensor tv = kt_t3(LH_DTYPE_F32, v, c->S, c->KVH, c->Dv);
        lh_tensor to = kt_t3(LH_DTYPE_F32, o, c->T, c->H, c->Dv);
        lh_tensor to1 = kt_t3(LH_DTYPE_F32, o1, c->T, c->H, c->Dv);
        lh_tensor tos = kt_t3(LH_DTYPE_F32, os, c->T, c->H, c->Dv);
        CU_ASSERT_EQUAL(lh_k_attention(c2, &tq, &tk, &tv, qpos, scale, 0.0f, c->window, &to),
                        LH_OK);
        CU_ASSERT_EQUAL(lh_k_attention(c1, &tq, &tk, &tv, qpos, scale, 0.0f, c->window, &to1),
                        LH_OK);
        CU_ASSERT_EQUAL(lh_k_attention(cs, &tq, &tk, &tv, qpos, scale, 0.0f, c->window, &tos),
                        LH_OK);
        kt_attn_ref(q, k, v, qpos, c->T, c->H, c->KVH, c->D, c->Dv, c->S, scale, c->window, 0,
                    ref);
        kt_cmp cmp = {0}, cmps = {0};
        for (int64_t i = 0; i < no; i++) {
            kt_check(&cmp, (long)i, o[i], ref[i], 2e-5 * vmax + 1e-6);
            kt_check(&cmps, (long)i, o[i], os[i], 2e-5 * vmax + 1e-6); /* vs the scalar path */
        }
        char what[128];
        snprintf(what, sizeof what, "%s attention %s", lh_k_isa_name(isa), c->name);
        KT_REPORT(cmp, what);
        KT_REPORT(cmps, what);
        CU_ASSERT_EQUAL(memcmp(o, o1, (size_t)no * sizeof(float)), 0);
        if (c->window == 1) /* only the token itself is visible: out = v exactly */
            for (int64_t t = 0; t < c->T; t++)
                for (int64_t h = 0; h < c->H; h++)
                    CU_ASSERT_EQUAL(memcmp(o + (t * c->H + h) * c->Dv,
                                           v + ((int64_t)qpos[t] * c->KVH + h / (c->H / c->KVH)) * c->Dv,
                                           (size_t)c->Dv * sizeof(float)),
                                    0);
        free(q);
        free(k);
        free(v);
        free(o);
        free(o1);
        free(os);
        free(ref);
        free(qpos);
    }
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(cs);
}
KT_ISA_TESTS(attention_vs_reference)

static const float SoftCaps[3] = {2.0f, 3.5f, 5.0f};

static void attention_softcap_vs_reference(lh_k_isa isa)
{
    lh_kctx *c2 = kt_ctx(2, isa), *c1 = kt_ctx(1, isa), *cs = kt_ctx(2, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cs);
    kt_seed(1003);
    double worst = 0, effect = 0;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const struct attn_case *c = &Cases[ci];
        const int64_t nq = c->T * c->H * c->D, nk = c->S * c->KVH * c->D, nv = c->S * c->KVH * c->Dv;
        const int64_t no = c->T * c->H * c->Dv;
        float *q = malloc((size_t)nq * sizeof(float)), *k = malloc((size_t)nk * sizeof(float));
        float *v = malloc((size_t)nv * sizeof(float)), *o = malloc((size_t)no * sizeof(float));
        float *o1 = malloc((size_t)no * sizeof(float)), *os = malloc((size_t)no * sizeof(float));
        double *ref = malloc((size_t)no * sizeof(double));
        double *ref0 = malloc((size_t)no * sizeof(double));
        int32_t *qpos = malloc((size_t)c->T * sizeof(int32_t));
        for (int64_t i = 0; i < nq; i++)
            q[i] = kt_uniform() * 12.0f;
        for (int64_t i = 0; i < nk; i++)
            k[i] = kt_uniform();
        double vmax = 0;
        for (int64_t i = 0; i < nv; i++) {
            v[i] = kt_uniform() * 2.0f;
            vmax = fmax(vmax, fabs(v[i]));
        }
        for (int64_t t = 0; t < c->T; t++)
            qpos[t] = (int32_t)(c->S - c->T + t);
        const float scale = 1.0f / sqrtf((float)c->D);
        lh_tensor tq = kt_t3(LH_DTYPE_F32, q, c->T, c->H, c->D);
        lh_tensor tk = kt_t3(LH_DTYPE_F32, k, c->S, c->KVH, c->D);
        lh_tensor tv = kt_t3(LH_DTYPE_F32, v, c->S, c->KVH, c->Dv);
        lh_tensor to = kt_t3(LH_DTYPE_F32, o, c->T, c->H, c->Dv);
        lh_tensor to1 = kt_t3(LH_DTYPE_F32, o1, c->T, c->H, c->Dv);
        lh_tensor tos = kt_t3(LH_DTYPE_F32, os, c->T, c->H, c->Dv);
        kt_attn_ref(q, k, v, qpos, c->T, c->H, c->KVH, c->D, c->Dv, c->S, scale, c->window, 0,
                    ref0);
        for (int cj = 0; cj < 3; cj++) {
            const float cap = SoftCaps[cj];
            CU_ASSERT_EQUAL(lh_k_attention(c2, &tq, &tk, &tv, qpos, scale, cap, c->window, &to),
                            LH_OK);
            CU_ASSERT_EQUAL(lh_k_attention(c1, &tq, &tk, &tv, qpos, scale, cap, c->window, &to1),
                            LH_OK);
            CU_ASSERT_EQUAL(lh_k_attention(cs, &tq, &tk, &tv, qpos, scale, cap, c->window, &tos),
                            LH_OK);
            kt_attn_ref_capped(q, k, v, qpos, c->T, c->H, c->KVH, c->D, c->Dv, c->S, scale,
                               c->window, 0, cap, ref);
            kt_cmp cmp = {0}, cmps = {0};
            for (int64_t i = 0; i < no; i++) {
                kt_check(&cmp, (long)i, o[i], ref[i], 2e-5 * vmax + 1e-6);
                kt_check(&cmps, (long)i, o[i], os[i], 2e-5 * vmax + 1e-6);
                worst = fmax(worst, fabs(o[i] - ref[i]) / vmax);
                effect = fmax(effect, fabs(ref[i] - ref0[i]) / vmax);
            }
            char what[160];
            snprintf(what, sizeof what, "%s attention softcap %g %s", lh_k_isa_name(isa),
                     (double)cap, c->name);
            KT_REPORT(cmp, what);
            KT_REPORT(cmps, what);
            CU_ASSERT_EQUAL(memcmp(o, o1, (size_t)no * sizeof(float)), 0);
        }
        free(q);
        free(k);
        free(v);
        free(o);
        free(o1);
        free(os);
        free(ref);
        free(ref0);
        free(qpos);
    }
    printf("\n    %s: worst |out - ref| / max|v| = %.3g; the cap moves the output by up to %.3g "
           "max|v|", lh_k_isa_name(isa), worst, effect);
    CU_ASSERT_TRUE(effect > 0.1); /* inputs where the cap matters */
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(cs);
}
KT_ISA_TESTS(attention_softcap_vs_reference)

/* Soft-capping by hand: raw scores 100 and 0 (D 1, scale 1) become 2 tanh(50) = 2 and 0 with
 * cap 2, so the weights are e^2 / (1 + e^2) and 1 / (1 + e^2) instead of (almost) 1 and 0; the
 * cap comes before the mask, so a masked position stays masked however it scores. */
static void test_attention_softcap_by_hand(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float q[1] = {1.0f}, k[3] = {100.0f, 0.0f, 0.0f}, v[3] = {1.0f, 0.0f, 0.5f}, o[1];
    int32_t pos = 1, kpos[3] = {0, 1, -1};
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 1, 1, 1), to = kt_t3(LH_DTYPE_F32, o, 1, 1, 1);
    lh_tensor tk = kt_t3(LH_DTYPE_F32, k, 2, 1, 1), tv = kt_t3(LH_DTYPE_F32, v, 2, 1, 1);
    lh_tensor rk = kt_t3(LH_DTYPE_F32, k, 3, 1, 1), rv = kt_t3(LH_DTYPE_F32, v, 3, 1, 1);
    const double e2 = exp(2.0), want = e2 / (1.0 + e2);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 2.0f, 0, &to), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], want, 1e-6);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 0.0f, 0, &to), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], 1.0, 1e-6); /* uncapped: e^-100 is nothing */
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 2.0f, 1, &to), LH_OK);
    CU_ASSERT_EQUAL(o[0], 0.0f); /* window 1: only position 1 (v 0) */
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &rk, &rv, &pos, kpos, 1.0f, 2.0f, 0, 0,
                                             &to),
                    LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], want, 1e-6); /* the empty slot (v 0.5) stays out */
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &rk, &rv, &pos, kpos, 1.0f, 2.0f, 1, 0,
                                             &to),
                    LH_OK);
    CU_ASSERT_EQUAL(o[0], 0.0f);
    lh_k_ctx_free(ctx);
}

/* The sliding window follows HF/Mistral exactly: with window w, position q_pos - w is masked
 * and q_pos - w + 1 is visible. Checked with one-hot values. */
static void test_attention_window_boundary(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const int64_t S = 10, D = 1;
    float q[1] = {0}, k[10], v[10], o[1];
    for (int i = 0; i < 10; i++) {
        k[i] = 0;                        /* equal scores: uniform weights over visible positions */
        v[i] = (float)(1 << i);          /* which positions contributed is readable from the sum */
    }
    int32_t pos = 9;
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 1, 1, D), tk = kt_t3(LH_DTYPE_F32, k, S, 1, D);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, v, S, 1, D), to = kt_t3(LH_DTYPE_F32, o, 1, 1, D);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 0.0f, 3, &to), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], (128 + 256 + 512) / 3.0, 1e-3); /* positions 7, 8, 9 */
    pos = 5; /* causal: nothing after the query */
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 0.0f, 0, &to), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], 63 / 6.0, 1e-4); /* positions 0..5 */
    /* <= 0: none */
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 0.0f, -1, &to), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], 63 / 6.0, 1e-4);
    lh_k_ctx_free(ctx);
}

static void test_attention_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float q[2 * 4 * 8] = {0}, k[6 * 2 * 8] = {0}, v[6 * 2 * 8] = {0}, o[2 * 4 * 8];
    int32_t pos[2] = {4, 5};
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 2, 4, 8), tk = kt_t3(LH_DTYPE_F32, k, 6, 2, 8);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, v, 6, 2, 8), to = kt_t3(LH_DTYPE_F32, o, 2, 4, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0.0f, 0, &to), LH_OK);
    CU_ASSERT_EQUAL(lh_k_attention(NULL, &tq, &tk, &tv, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, NULL, &tk, &tv, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, NULL, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    /* 4 query heads over 3 kv heads */
    lh_tensor k3 = kt_t3(LH_DTYPE_F32, k, 4, 3, 8), v3 = kt_t3(LH_DTYPE_F32, v, 4, 3, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &k3, &v3, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "not a multiple of the 3 kv heads"));
    /* head_dim mismatch, v shape, out shape */
    lh_tensor k7 = kt_t3(LH_DTYPE_F32, k, 6, 2, 7);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &k7, &tv, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q [2, 4, 8] and k [6, 2, 7]"));
    lh_tensor v5 = kt_t3(LH_DTYPE_F32, v, 5, 2, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &v5, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    lh_tensor o3 = kt_t3(LH_DTYPE_F32, o, 2, 3, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0.0f, 0, &o3), LH_E_USAGE);
    /* positions outside the cache */
    pos[1] = 6;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q_pos[1] = 6 is outside the cache [0, 6)"));
    pos[1] = -1;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    pos[1] = 5;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, NAN, 0.0f, 0, &to), LH_E_USAGE);
    /* dtype, rank, device, overlap */
    lh_tensor kb = tk;
    kb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &kb, &tv, pos, 0.3f, 0.0f, 0, &to), LH_E_UNSUPPORTED);
    lh_tensor q2 = kt_t2(LH_DTYPE_F32, q, 2, 32);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &q2, &tk, &tv, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    lh_tensor vc = tv;
    vc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &vc, pos, 0.3f, 0.0f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_attention: v is on cuda:0, but the context is on cpu"));
    lh_tensor oq = kt_t3(LH_DTYPE_F32, q, 2, 4, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0.0f, 0, &oq), LH_E_USAGE);
    /* softcap: finite and >= 0 (0: none) */
    const float bad_caps[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, bad_caps[i], 0, &to),
                        LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_attention: softcap "));
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "must be finite and >= 0 (0: none)"));
    }
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 50.0f, 0, &to), LH_OK);
    lh_k_ctx_free(ctx);
}

/* ---- lh_k_attention_positions: keys at arbitrary positions (ring buffer) --------------------- */

static bool pos_visible(int64_t kp, int64_t qp, int64_t window, int64_t sinks)
{
    if (kp < 0 || kp > qp)
        return false;
    return kp < sinks || window <= 0 || kp > qp - window;
}

/* Double precision, slot order; a query that sees nothing gets zeros; softcap > 0 caps the
 * scores (before the softmax). */
static void pos_ref(const float *q, const float *k, const float *v, const int32_t *qpos,
                    const int32_t *kpos, int64_t T, int64_t H, int64_t KVH, int64_t D, int64_t Dv,
                    int64_t S, float scale, int64_t window, int64_t sinks, double softcap,
                    double *out)
{
    double *sc = malloc((size_t)(S > 0 ? S : 1) * sizeof(double));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / (H / KVH);
            double m = -INFINITY, sum = 0;
            for (int64_t s = 0; s < S; s++) {
                sc[s] = -INFINITY;
                if (!pos_visible(kpos[s], qpos[t], window, sinks))
                    continue;
                double d = 0;
                for (int64_t j = 0; j < D; j++)
                    d += (double)q[(t * H + h) * D + j] * k[(s * KVH + kvh) * D + j];
                sc[s] = d * scale;
                if (softcap > 0)
                    sc[s] = tanh(sc[s] / softcap) * softcap;
                m = fmax(m, sc[s]);
            }
            for (int64_t s = 0; s < S; s++)
                sum += sc[s] == -INFINITY ? 0 : exp(sc[s] - m);
            for (int64_t j = 0; j < Dv; j++) {
                double o = 0;
                for (int64_t s = 0; s < S; s++)
                    if (sc[s] != -INFINITY)
                        o += exp(sc[s] - m) / sum * v[(s * KVH + kvh) * Dv + j];
                out[(t * H + h) * Dv + j] = o;
            }
        }
    free(sc);
}

struct pos_case {
    const char *name;
    int64_t T, H, KVH, D, Dv, S, window, sinks;
    int64_t next; /* tokens written so far into the ring of S slots (positions 0..next-1) */
};

static const struct pos_case PosCases[] = {
    {"ring full, wrapped, window S, decode", 1, 4, 2, 16, 16, 8, 8, 0, 21},
    {"ring wrapped, window 5, sinks 2, prefill 3", 3, 4, 1, 8, 8, 10, 5, 2, 27},
    {"ring partly empty (k_pos -1), no window", 4, 2, 2, 12, 12, 16, 0, 0, 9},
    {"window 1: self only", 2, 2, 1, 8, 8, 6, 1, 0, 14},
    {"sinks cover all, Dv differs", 2, 6, 3, 24, 16, 12, 3, 100, 30},
    {"long ring (> one CUDA chunk), GQA 8/2", 2, 8, 2, 64, 64, 100, 64, 4, 333},
};

/* Slot s holds the latest position p < next with p % S == s (empty: -1); sinks, when asked
 * for, keep positions 0..sinks-1 in their own slots (the first min(sinks, S) slots). Queries
 * are the last T positions written. Slot order is shuffled so that it differs from position
 * order. */
static void ring_positions(const struct pos_case *c, int32_t *kpos, int32_t *qpos)
{
    for (int64_t s = 0; s < c->S; s++)
        kpos[s] = -1;
    const int64_t ns = c->sinks < c->S ? c->sinks : 0;
    for (int64_t p = 0; p < c->next; p++) {
        if (p < ns)
            kpos[p] = (int32_t)p;
        else
            kpos[ns + (p - ns) % (c->S - ns)] = (int32_t)p;
    }
    for (int64_t s = c->S - 1; s > 0; s--) { /* Fisher-Yates with the test generator */
        int64_t r = (int64_t)(kt_u64() % (uint64_t)(s + 1));
        int32_t tmp = kpos[s];
        kpos[s] = kpos[r];
        kpos[r] = tmp;
    }
    for (int64_t t = 0; t < c->T; t++)
        qpos[t] = (int32_t)(c->next - c->T + t);
}

/* softcap 0: the plain kernel; > 0: q scaled by 12 and the scores capped (the reference
 * too) */
static void positions_vs_reference(lh_k_isa isa, float softcap)
{
    lh_kctx *c2 = kt_ctx(2, isa), *c1 = kt_ctx(1, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    kt_seed(softcap > 0 ? 2003 : 2002);
    for (size_t ci = 0; ci < sizeof PosCases / sizeof *PosCases; ci++) {
        const struct pos_case *c = &PosCases[ci];
        const int64_t nq = c->T * c->H * c->D, nk = c->S * c->KVH * c->D, nv = c->S * c->KVH * c->Dv;
        const int64_t no = c->T * c->H * c->Dv;
        float *q = malloc((size_t)nq * sizeof(float)), *k = malloc((size_t)nk * sizeof(float));
        float *v = malloc((size_t)nv * sizeof(float)), *o = malloc((size_t)no * sizeof(float));
        float *o1 = malloc((size_t)no * sizeof(float));
        double *ref = malloc((size_t)no * sizeof(double));
        int32_t *kpos = malloc((size_t)c->S * sizeof(int32_t));
        int32_t *qpos = malloc((size_t)c->T * sizeof(int32_t));
        for (int64_t i = 0; i < nq; i++)
            q[i] = kt_uniform() * (softcap > 0 ? 12.0f : 1.0f);
        for (int64_t i = 0; i < nk; i++)
            k[i] = kt_uniform();
        double vmax = 0;
        for (int64_t i = 0; i < nv; i++) {
            v[i] = kt_uniform() * 2.0f;
            vmax = fmax(vmax, fabs(v[i]));
        }
        ring_positions(c, kpos, qpos);
        for (int64_t s = 0; s < c->S; s++) /* empty slots hold garbage that must not leak */
            if (kpos[s] < 0)
                for (int64_t j = 0; j < c->KVH * c->Dv; j++)
                    v[s * c->KVH * c->Dv + j] = NAN;
        const float scale = 1.0f / sqrtf((float)c->D);
        lh_tensor tq = kt_t3(LH_DTYPE_F32, q, c->T, c->H, c->D);
        lh_tensor tk = kt_t3(LH_DTYPE_F32, k, c->S, c->KVH, c->D);
        lh_tensor tv = kt_t3(LH_DTYPE_F32, v, c->S, c->KVH, c->Dv);
        lh_tensor to = kt_t3(LH_DTYPE_F32, o, c->T, c->H, c->Dv);
        lh_tensor to1 = kt_t3(LH_DTYPE_F32, o1, c->T, c->H, c->Dv);
        CU_ASSERT_EQUAL(lh_k_attention_positions(c2, &tq, &tk, &tv, qpos, kpos, scale, softcap,
                                                 c->window, c->sinks, &to), LH_OK);
        CU_ASSERT_EQUAL(lh_k_attention_positions(c1, &tq, &tk, &tv, qpos, kpos, scale, softcap,
                                                 c->window, c->sinks, &to1), LH_OK);
        pos_ref(q, k, v, qpos, kpos, c->T, c->H, c->KVH, c->D, c->Dv, c->S, scale, c->window,
                c->sinks, softcap, ref);
        kt_cmp cmp = {0};
        for (int64_t i = 0; i < no; i++)
            kt_check(&cmp, (long)i, o[i], ref[i], 2e-5 * vmax + 1e-6);
        char what[160];
        snprintf(what, sizeof what, "%s attention_positions softcap %g %s", lh_k_isa_name(isa),
                 (double)softcap, c->name);
        KT_REPORT(cmp, what);
        CU_ASSERT_EQUAL(memcmp(o, o1, (size_t)no * sizeof(float)), 0);
        free(q);
        free(k);
        free(v);
        free(o);
        free(o1);
        free(ref);
        free(kpos);
        free(qpos);
    }
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c1);
}

static void attention_positions_vs_reference(lh_k_isa isa)
{
    positions_vs_reference(isa, 0.0f);
}
KT_ISA_TESTS(attention_positions_vs_reference)

static void attention_positions_softcap(lh_k_isa isa)
{
    for (int cj = 0; cj < 3; cj++)
        positions_vs_reference(isa, SoftCaps[cj]);
}
KT_ISA_TESTS(attention_positions_softcap)

/* Contiguous positions 0..S-1 in slot order: the same bits as lh_k_attention (same
 * operations in the same order). */
static void test_attention_positions_matches_contiguous(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(77);
    enum { T = 3, H = 4, KVH = 2, D = 16, S = 20 };
    static float q[T * H * D], k[S * KVH * D], v[S * KVH * D], a[T * H * D], b[T * H * D];
    for (int i = 0; i < T * H * D; i++)
        q[i] = kt_uniform();
    for (int i = 0; i < S * KVH * D; i++) {
        k[i] = kt_uniform();
        v[i] = kt_uniform();
    }
    int32_t kpos[S], qpos[T] = {17, 18, 19};
    for (int s = 0; s < S; s++)
        kpos[s] = s;
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, T, H, D), tk = kt_t3(LH_DTYPE_F32, k, S, KVH, D);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, v, S, KVH, D);
    lh_tensor ta = kt_t3(LH_DTYPE_F32, a, T, H, D), tb = kt_t3(LH_DTYPE_F32, b, T, H, D);
    for (int64_t w = 0; w <= 6; w += 6)
        for (float cap = 0.0f; cap <= 0.5f; cap += 0.25f) { /* 0: none; the scores reach ~1 */
            CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, qpos, 0.25f, cap, w, &ta), LH_OK);
            CU_ASSERT_EQUAL(
                lh_k_attention_positions(ctx, &tq, &tk, &tv, qpos, kpos, 0.25f, cap, w, 0, &tb),
                LH_OK);
            CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
        }
    lh_k_ctx_free(ctx);
}

/* Visibility boundaries with one-hot values; a query that sees nothing gets zeros. */
static void test_attention_positions_visibility(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const int64_t S = 8;
    float q[1] = {0}, k[8] = {0}, v[8], o[1];
    for (int i = 0; i < 8; i++)
        v[i] = (float)(1 << i); /* slot i contributes 2^i */
    /* slots hold positions out of order; slot 6 is empty */
    int32_t kpos[8] = {10, 3, 0, 11, 1, 9, -1, 12};
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 1, 1, 1), tk = kt_t3(LH_DTYPE_F32, k, S, 1, 1);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, v, S, 1, 1), to = kt_t3(LH_DTYPE_F32, o, 1, 1, 1);
    int32_t qp = 11;
    /* no window: positions <= 11: slots 0, 1, 2, 3, 4, 5 */
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, &qp, kpos, 1.0f, 0.0f, 0, 0, &to),
                    LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], (1 + 2 + 4 + 8 + 16 + 32) / 6.0, 1e-4);
    /* window 3: positions 9, 10, 11 (slots 5, 0, 3) */
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, &qp, kpos, 1.0f, 0.0f, 3, 0, &to),
                    LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], (32 + 1 + 8) / 3.0, 1e-4);
    /* window 3 + 2 sinks: also positions 0 and 1 (slots 2, 4) */
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, &qp, kpos, 1.0f, 0.0f, 3, 2, &to),
                    LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], (32 + 1 + 8 + 4 + 16) / 5.0, 1e-4);
    /* negative window: none */
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, &qp, kpos, 1.0f, 0.0f, -4, 0, &to),
                    LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], 63 / 6.0, 1e-4);
    /* position 2 sees positions 0 and 1 (slots 2 and 4) */
    qp = 2;
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, &qp, kpos, 1.0f, 0.0f, 0, 0, &to),
                    LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], (4 + 16) / 2.0, 1e-4);
    /* a query that sees nothing (window 1 at a position no slot holds): zeros */
    qp = 5;
    o[0] = 123.0f;
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, &qp, kpos, 1.0f, 0.0f, 1, 0, &to),
                    LH_OK);
    CU_ASSERT_EQUAL(o[0], 0.0f);
    /* every slot empty, and S == 0: zeros */
    int32_t empty[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    o[0] = 123.0f;
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, &qp, empty, 1.0f, 0.0f, 0, 0, &to),
                    LH_OK);
    CU_ASSERT_EQUAL(o[0], 0.0f);
    lh_tensor k0 = kt_t3(LH_DTYPE_F32, k, 0, 1, 1), v0 = kt_t3(LH_DTYPE_F32, v, 0, 1, 1);
    o[0] = 123.0f;
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &k0, &v0, &qp, NULL, 1.0f, 0.0f, 0, 0, &to),
                    LH_OK);
    CU_ASSERT_EQUAL(o[0], 0.0f);
    lh_k_ctx_free(ctx);
}

static void test_attention_positions_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float q[2 * 4 * 8] = {0}, k[6 * 2 * 8] = {0}, v[6 * 2 * 8] = {0}, o[2 * 4 * 8];
    int32_t pos[2] = {4, 5}, kpos[6] = {0, 1, 2, 3, 4, 5};
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 2, 4, 8), tk = kt_t3(LH_DTYPE_F32, k, 6, 2, 8);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, v, 6, 2, 8), to = kt_t3(LH_DTYPE_F32, o, 2, 4, 8);
#define AP(c, Q, K, V, QP, KP, SC, W, NS, O)                                                     \
    lh_k_attention_positions(c, Q, K, V, QP, KP, SC, 0.0f, W, NS, O)
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_OK);
    CU_ASSERT_EQUAL(AP(NULL, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_attention_positions: ctx is NULL"));
    CU_ASSERT_EQUAL(AP(ctx, NULL, &tk, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(AP(ctx, &tq, NULL, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, NULL, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, NULL), LH_E_USAGE);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, NULL, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q_pos is NULL"));
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, NULL, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "k_pos is NULL"));
    /* 4 query heads over 3 kv heads */
    lh_tensor k3 = kt_t3(LH_DTYPE_F32, k, 4, 3, 8), v3 = kt_t3(LH_DTYPE_F32, v, 4, 3, 8);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &k3, &v3, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "not a multiple of the 3 kv heads"));
    /* head_dim mismatch, v shape, out shape */
    lh_tensor k7 = kt_t3(LH_DTYPE_F32, k, 6, 2, 7);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &k7, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q [2, 4, 8] and k [6, 2, 7]"));
    lh_tensor v5 = kt_t3(LH_DTYPE_F32, v, 5, 2, 8);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &v5, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    lh_tensor o3 = kt_t3(LH_DTYPE_F32, o, 2, 3, 8);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, &o3), LH_E_USAGE);
    /* values: negative query position, NaN scale, negative n_sinks */
    pos[1] = -1;
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q_pos[1] = -1 is negative"));
    pos[1] = 5;
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, NAN, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, -1, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "n_sinks -1 is negative"));
    /* positions beyond the ring size are fine (a ring holds any positions) */
    pos[1] = 1000;
    kpos[0] = 999;
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_OK);
    /* dtype, rank, device, overlap */
    lh_tensor kb = tk;
    kb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(AP(ctx, &tq, &kb, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_E_UNSUPPORTED);
    lh_tensor q2 = kt_t2(LH_DTYPE_F32, q, 2, 32);
    CU_ASSERT_EQUAL(AP(ctx, &q2, &tk, &tv, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    lh_tensor vc = tv;
    vc.device = kt_cuda();
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &vc, pos, kpos, 0.3f, 0, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_attention_positions: v is on cuda:0, but the context is on cpu"));
    lh_tensor oq = kt_t3(LH_DTYPE_F32, q, 2, 4, 8);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, &oq), LH_E_USAGE);
    lh_tensor ov = kt_t3(LH_DTYPE_F32, v, 2, 4, 8);
    CU_ASSERT_EQUAL(AP(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 0, 0, &ov), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "out overlaps q, k or v"));
    /* softcap: finite and >= 0 (0: none) */
    const float bad_caps[3] = {-2.5f, NAN, -INFINITY};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, bad_caps[i],
                                                 0, 0, &to),
                        LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_attention_positions: softcap "));
    }
    CU_ASSERT_EQUAL(lh_k_attention_positions(ctx, &tq, &tk, &tv, pos, kpos, 0.3f, 4.0f, 0, 0, &to),
                    LH_OK);
#undef AP
    lh_k_ctx_free(ctx);
}

static CU_TestInfo attention_tests[] = {
    {"attention vs HF-eager reference, GQA, windows [scalar]", attention_vs_reference_scalar},
    {"attention vs HF-eager reference, GQA, windows [avx2]", attention_vs_reference_avx2},
    {"attention vs HF-eager reference, GQA, windows [avx512]", attention_vs_reference_avx512},
    {"attention sliding-window boundary (Mistral semantics)", test_attention_window_boundary},
    {"attention argument errors", test_attention_errors},
    {"attention softcap vs capped reference [scalar]", attention_softcap_vs_reference_scalar},
    {"attention softcap vs capped reference [avx2]", attention_softcap_vs_reference_avx2},
    {"attention softcap vs capped reference [avx512]", attention_softcap_vs_reference_avx512},
    {"attention softcap by hand, before the mask", test_attention_softcap_by_hand},
    {"attention_positions ring vs reference [scalar]", attention_positions_vs_reference_scalar},
    {"attention_positions ring vs reference [avx2]", attention_positions_vs_reference_avx2},
    {"attention_positions ring vs reference [avx512]", attention_positions_vs_reference_avx512},
    {"attention_positions softcap vs reference [scalar]", attention_positions_softcap_scalar},
    {"attention_positions softcap vs reference [avx2]", attention_positions_softcap_avx2},
    {"attention_positions softcap vs reference [avx512]", attention_positions_softcap_avx512},
    {"attention_positions contiguous == lh_k_attention", test_attention_positions_matches_contiguous},
    {"attention_positions visibility, sinks, empty, no key -> zeros", test_attention_positions_visibility},
    {"attention_positions argument errors", test_attention_positions_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: attention", NULL, NULL, NULL, NULL, attention_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
