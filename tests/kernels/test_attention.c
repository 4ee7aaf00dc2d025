/* Kernel library: attention over a contiguous KV cache against a double-precision reference of
 * HF eager attention: scores = q . k * scale, positions p > q_pos (causal) and, with a sliding
 * window w > 0, p <= q_pos - w (Mistral: HF masks q_pos - p >= w) get zero weight; softmax;
 * weighted sum of v. Query head h reads kv head h / (H / KVH) (GQA; MHA and MQA as the
 * extremes). Cases: T = 1 decode and T > 1 prefill with the queries at the end of the cache.
 *
 * Tolerance: |out - ref| <= 2e-5 * max|v| + 1e-6 (scores are O(1) here: |q|, |k| <= 1 and
 * scale = 1/sqrt(D)). Threads 1 and 2 give bit-identical results (one task per (t, h)). */
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
        CU_ASSERT_EQUAL(lh_k_attention(c2, &tq, &tk, &tv, qpos, scale, c->window, &to), LH_OK);
        CU_ASSERT_EQUAL(lh_k_attention(c1, &tq, &tk, &tv, qpos, scale, c->window, &to1), LH_OK);
        CU_ASSERT_EQUAL(lh_k_attention(cs, &tq, &tk, &tv, qpos, scale, c->window, &tos), LH_OK);
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
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 3, &to), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], (128 + 256 + 512) / 3.0, 1e-3); /* positions 7, 8, 9 */
    pos = 5; /* causal: nothing after the query */
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, 0, &to), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(o[0], 63 / 6.0, 1e-4); /* positions 0..5 */
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, &pos, 1.0f, -1, &to), LH_OK); /* <= 0: none */
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
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0, &to), LH_OK);
    CU_ASSERT_EQUAL(lh_k_attention(NULL, &tq, &tk, &tv, pos, 0.3f, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, NULL, &tk, &tv, pos, 0.3f, 0, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, NULL, 0.3f, 0, &to), LH_E_USAGE);
    /* 4 query heads over 3 kv heads */
    lh_tensor k3 = kt_t3(LH_DTYPE_F32, k, 4, 3, 8), v3 = kt_t3(LH_DTYPE_F32, v, 4, 3, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &k3, &v3, pos, 0.3f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "not a multiple of the 3 kv heads"));
    /* head_dim mismatch, v shape, out shape */
    lh_tensor k7 = kt_t3(LH_DTYPE_F32, k, 6, 2, 7);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &k7, &tv, pos, 0.3f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q [2, 4, 8] and k [6, 2, 7]"));
    lh_tensor v5 = kt_t3(LH_DTYPE_F32, v, 5, 2, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &v5, pos, 0.3f, 0, &to), LH_E_USAGE);
    lh_tensor o3 = kt_t3(LH_DTYPE_F32, o, 2, 3, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0, &o3), LH_E_USAGE);
    /* positions outside the cache */
    pos[1] = 6;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q_pos[1] = 6 is outside the cache [0, 6)"));
    pos[1] = -1;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0, &to), LH_E_USAGE);
    pos[1] = 5;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, NAN, 0, &to), LH_E_USAGE);
    /* dtype, rank, device, overlap */
    lh_tensor kb = tk;
    kb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &kb, &tv, pos, 0.3f, 0, &to), LH_E_UNSUPPORTED);
    lh_tensor q2 = kt_t2(LH_DTYPE_F32, q, 2, 32);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &q2, &tk, &tv, pos, 0.3f, 0, &to), LH_E_USAGE);
    lh_tensor vc = tv;
    vc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &vc, pos, 0.3f, 0, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_attention: v is on cuda:0, but the context is on cpu"));
    lh_tensor oq = kt_t3(LH_DTYPE_F32, q, 2, 4, 8);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.3f, 0, &oq), LH_E_USAGE);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo attention_tests[] = {
    {"attention vs HF-eager reference, GQA, windows [scalar]", attention_vs_reference_scalar},
    {"attention vs HF-eager reference, GQA, windows [avx2]", attention_vs_reference_avx2},
    {"attention vs HF-eager reference, GQA, windows [avx512]", attention_vs_reference_avx512},
    {"attention sliding-window boundary (Mistral semantics)", test_attention_window_boundary},
    {"attention argument errors", test_attention_errors},
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
