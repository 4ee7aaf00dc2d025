/* Mixture-of-experts kernels (lh_k_moe_route, lh_k_scatter_add_rows) against a reference
 * written from lh_kernels.h's definition in this file: every routing option (softmax and
 * sigmoid scores, a correction bias used only for the choice, group-limited selection with
 * either group score, renormalization with and without an epsilon, a routed scaling factor),
 * ties going to the lowest index, rows and threads independent; the scatter's order and
 * arithmetic; every error. */
#include "ktest.h"

/* The definition, one row: scores in f32 with libm's expf and a sequential sum (the kernel's
 * vector exp and lane-wise sum round differently, so weights are compared within (E + 4)
 * 2^-23 relative, ids exactly). */
static void ref_route(const float *lg, const float *bias, int64_t E, const lh_k_moe_route_params *p,
                      int32_t *ids, float *w)
{
    float score[LH_K_MOE_MAX_EXPERTS], choice[LH_K_MOE_MAX_EXPERTS];
    bool ok[LH_K_MOE_MAX_EXPERTS];
    if (p->scoring == LH_K_MOE_SOFTMAX) {
        float m = lg[0], s = 0;
        for (int64_t e = 1; e < E; e++)
            m = lg[e] > m ? lg[e] : m;
        for (int64_t e = 0; e < E; e++)
            s += (score[e] = expf(lg[e] - m));
        for (int64_t e = 0; e < E; e++)
            score[e] *= 1.0f / s;
    } else {
        for (int64_t e = 0; e < E; e++)
            score[e] = 1.0f / (1.0f + expf(-lg[e]));
    }
    for (int64_t e = 0; e < E; e++) {
        choice[e] = score[e] + (bias ? bias[e] : 0.0f);
        ok[e] = true;
    }
    if (p->n_group > 1) {
        const int64_t G = p->n_group, per = E / G;
        float gs[LH_K_MOE_MAX_EXPERTS];
        for (int64_t g = 0; g < G; g++) {
            /* sort the group's choices descending (insertion), take 1 or 2 */
            float v[LH_K_MOE_MAX_EXPERTS];
            for (int64_t i = 0; i < per; i++) {
                int64_t j = i;
                while (j > 0 && v[j - 1] < choice[g * per + i]) {
                    v[j] = v[j - 1];
                    j--;
                }
                v[j] = choice[g * per + i];
            }
            gs[g] = p->group_score == LH_K_MOE_GROUP_TOP2_SUM ? v[0] + v[1] : v[0];
        }
        bool gsel[LH_K_MOE_MAX_EXPERTS] = {false};
        for (int64_t t = 0; t < p->topk_group; t++) {
            int64_t b = -1;
            for (int64_t g = 0; g < G; g++)
                if (!gsel[g] && (b < 0 || gs[g] > gs[b]))
                    b = g;
            gsel[b] = true;
        }
        for (int64_t e = 0; e < E; e++)
            ok[e] = gsel[e / per];
    }
    float sum = 0;
    for (int64_t t = 0; t < p->top_k; t++) {
        int64_t b = -1;
        for (int64_t e = 0; e < E; e++)
            if (ok[e] && (b < 0 || choice[e] > choice[b]))
                b = e;
        ok[b] = false;
        ids[t] = (int32_t)b;
        w[t] = score[b];
        sum += w[t];
    }
    for (int64_t t = 0; t < p->top_k; t++) {
        if (p->renormalize)
            w[t] = w[t] / (sum + p->renorm_eps);
        if (p->scale != 1.0f)
            w[t] *= p->scale;
    }
}

typedef struct route_case {
    const char *what;
    int64_t E;
    bool bias;
    lh_k_moe_route_params p;
} route_case;

static const route_case cases[] = {
    {"Mixtral: softmax, top-2 of 8, renormalized", 8, false,
     {.top_k = 2, .scoring = LH_K_MOE_SOFTMAX, .renormalize = true, .scale = 1.0f}},
    {"Qwen2-MoE: softmax, top-4 of 60, not renormalized", 60, false,
     {.top_k = 4, .scoring = LH_K_MOE_SOFTMAX, .scale = 1.0f}},
    {"DeepSeek-V2: softmax, groups (max), scaled", 64, false,
     {.top_k = 6, .scoring = LH_K_MOE_SOFTMAX, .n_group = 8, .topk_group = 3,
      .group_score = LH_K_MOE_GROUP_MAX, .scale = 16.0f}},
    {"DeepSeek-V3: sigmoid, bias, groups (top-2 sum), renormalized + eps, scaled", 256, true,
     {.top_k = 8, .scoring = LH_K_MOE_SIGMOID, .n_group = 8, .topk_group = 4,
      .group_score = LH_K_MOE_GROUP_TOP2_SUM, .renormalize = true, .renorm_eps = 1e-20f,
      .scale = 2.5f}},
    {"every expert chosen (top_k = E)", 5, true,
     {.top_k = 5, .scoring = LH_K_MOE_SIGMOID, .renormalize = true, .scale = 1.0f}},
};

static void test_route_reference(void)
{
    const int64_t T = 37;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const route_case *rc = &cases[c];
        const int64_t E = rc->E, K = rc->p.top_k;
        kt_seed(77 + c);
        float *lg = malloc((size_t)(T * E) * sizeof *lg), bias[LH_K_MOE_MAX_EXPERTS];
        for (int64_t i = 0; i < T * E; i++)
            lg[i] = 4.0f * kt_uniform();
        for (int64_t e = 0; e < E; e++)
            bias[e] = 0.2f * kt_uniform();
        int32_t *ids[2], *rid = malloc((size_t)(T * K) * sizeof *rid);
        float *w[2], *rw = malloc((size_t)(T * K) * sizeof *rw);
        for (int64_t t = 0; t < T; t++)
            ref_route(lg + t * E, rc->bias ? bias : NULL, E, &rc->p, rid + t * K, rw + t * K);
        for (int th = 0; th < 2; th++) {
            lh_kctx *ctx = kt_ctx(th + 1, LH_K_ISA_SCALAR + 2 * th);
            if (!ctx)
                ctx = kt_ctx(th + 1, LH_K_ISA_SCALAR);
            CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
            ids[th] = malloc((size_t)(T * K) * sizeof **ids);
            w[th] = malloc((size_t)(T * K) * sizeof **w);
            lh_tensor lt = kt_t2(LH_DTYPE_F32, lg, T, E), bt = kt_t1(LH_DTYPE_F32, bias, E);
            CU_ASSERT_EQUAL(lh_k_moe_route(ctx, &lt, rc->bias ? &bt : NULL, &rc->p, ids[th], w[th]),
                            LH_OK);
            int64_t bad_id = 0, bad_w = 0;
            for (int64_t i = 0; i < T * K; i++) {
                bad_id += ids[th][i] != rid[i];
                bad_w += fabsf(w[th][i] - rw[i]) > (float)(E + 4) * 0x1p-23f * fabsf(rw[i]) + 1e-30f;
            }
            if (bad_id || bad_w)
                printf("\n    %s (%d threads): %lld ids, %lld weights differ", rc->what, th + 1,
                       (long long)bad_id, (long long)bad_w);
            CU_ASSERT_EQUAL(bad_id, 0);
            CU_ASSERT_EQUAL(bad_w, 0);
            lh_k_ctx_free(ctx);
        }
        /* rows and threads independent (and the vector softmax is lh_k_softmax's) */
        CU_ASSERT_EQUAL(memcmp(ids[0], ids[1], (size_t)(T * K) * sizeof **ids), 0);
        if (rc->p.renormalize && rc->p.scale == 1.0f) {
            for (int64_t t = 0; t < T; t++) {
                float s = 0;
                for (int64_t j = 0; j < K; j++)
                    s += w[0][t * K + j];
                CU_ASSERT(fabsf(s - 1.0f) < 1e-5f);
            }
        }
        for (int th = 0; th < 2; th++) {
            free(ids[th]);
            free(w[th]);
        }
        free(rid);
        free(rw);
        free(lg);
    }
}

/* Equal logits: the lowest expert index wins, groups too. */
static void test_route_ties(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float lg[8] = {1, 3, 3, 0, 3, 1, 1, 3};
    int32_t ids[3];
    float w[3];
    lh_tensor lt = kt_t2(LH_DTYPE_F32, lg, 1, 8);
    lh_k_moe_route_params p = {.top_k = 3, .scoring = LH_K_MOE_SOFTMAX, .scale = 1.0f};
    CU_ASSERT_EQUAL_FATAL(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_OK);
    CU_ASSERT(ids[0] == 1 && ids[1] == 2 && ids[2] == 4);
    CU_ASSERT(w[0] == w[1] && w[1] == w[2]);
    /* groups of 2: {1,3} {3,0} {3,1} {1,3} all score 3 by max: groups 0 and 1 win */
    p.n_group = 4;
    p.topk_group = 2;
    p.group_score = LH_K_MOE_GROUP_MAX;
    CU_ASSERT_EQUAL_FATAL(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_OK);
    CU_ASSERT(ids[0] == 1 && ids[1] == 2 && ids[2] == 0);
    /* a bias moves the choice, not the weight */
    float bias[8] = {0, 0, 0, 0, 0, 0, 5, 0};
    lh_tensor bt = kt_t1(LH_DTYPE_F32, bias, 8);
    p.n_group = 0;
    p.top_k = 1;
    CU_ASSERT_EQUAL_FATAL(lh_k_moe_route(ctx, &lt, &bt, &p, ids, w), LH_OK);
    CU_ASSERT_EQUAL(ids[0], 6);
    CU_ASSERT(w[0] < 0.1f); /* softmax(1 among 3s), not the biased choice */
    lh_k_ctx_free(ctx);
}

static void test_route_errors(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float lg[3 * 8] = {0};
    int32_t ids[24];
    float w[24];
    lh_tensor lt = kt_t2(LH_DTYPE_F32, lg, 3, 8);
    lh_k_moe_route_params p = {.top_k = 2, .scoring = LH_K_MOE_SOFTMAX, .scale = 1.0f};
    lg[2 * 8 + 5] = NAN;
    lg[1 * 8 + 0] = INFINITY;
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_E_USAGE,
               "lh_k_moe_route: row 1 of logits [3, 8] holds inf or NaN (2 such rows)");
    lg[2 * 8 + 5] = lg[1 * 8 + 0] = 0;
    p.top_k = 9;
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_E_USAGE,
               "lh_k_moe_route: top_k 9 must be in [1, 8]");
    p.top_k = 2;
    p.n_group = 3;
    p.topk_group = 1;
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_E_USAGE,
               "n_group 3 does not divide the 8 experts");
    p.n_group = 4;
    p.topk_group = 5;
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_E_USAGE,
               "topk_group 5 must be in [1, n_group 4]");
    p.topk_group = 1;
    p.top_k = 3;
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_E_USAGE,
               "top_k 3 exceeds the 2 experts of topk_group 1 groups");
    p.top_k = 2;
    p.n_group = 0;
    p.scale = NAN;
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_E_USAGE, "must be finite and >= 0");
    p.scale = 1.0f;
    p.scoring = (lh_k_moe_scoring)7;
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, ids, w), LH_E_USAGE,
               "scoring 7 is not a lh_k_moe_scoring");
    p.scoring = LH_K_MOE_SOFTMAX;
    float b[4] = {0};
    lh_tensor bt = kt_t1(LH_DTYPE_F32, b, 4);
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, &bt, &p, ids, w), LH_E_USAGE,
               "lh_k_moe_route: bias [4] must be [8] for logits [3, 8]");
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, NULL, ids, w), LH_E_USAGE, "params is NULL");
    EXPECT_ERR(lh_k_moe_route(ctx, &lt, NULL, &p, NULL, w), LH_E_USAGE, "ids or weights is NULL");
    uint16_t h[24] = {0};
    lh_tensor l16 = kt_t2(LH_DTYPE_BF16, h, 3, 8);
    EXPECT_ERR(lh_k_moe_route(ctx, &l16, NULL, &p, ids, w), LH_E_UNSUPPORTED,
               "lh_k_moe_route: logits [3, 8] has dtype bf16; supported: f32");
    lh_k_ctx_free(ctx);
}

/* dst[rows[i]] += scales[i] * src[i], in i order, one product and one sum per element. */
static void test_scatter_add(void)
{
    const int64_t n = 9, R = 4, D = 300; /* more columns than one task */
    float *src = malloc((size_t)(n * D) * sizeof *src), *dst[2], *ref;
    const int64_t rows[9] = {2, 0, 2, 3, 2, 1, 0, 3, 2};
    float sc[9];
    kt_seed(5);
    for (int64_t i = 0; i < n * D; i++)
        src[i] = kt_uniform();
    for (int i = 0; i < 9; i++)
        sc[i] = kt_uniform();
    ref = malloc((size_t)(R * D) * sizeof *ref);
    for (int s = 0; s < 2; s++) { /* with scales, then without */
        for (int64_t i = 0; i < R * D; i++)
            ref[i] = 0.25f * (float)(i % 7);
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < D; c++) {
                volatile float prod = s ? src[i * D + c] : sc[i] * src[i * D + c];
                ref[rows[i] * D + c] = ref[rows[i] * D + c] + prod;
            }
        for (int th = 0; th < 2; th++) {
            lh_kctx *ctx = kt_ctx(th + 1, LH_K_ISA_SCALAR);
            CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
            dst[th] = malloc((size_t)(R * D) * sizeof **dst);
            for (int64_t i = 0; i < R * D; i++)
                dst[th][i] = 0.25f * (float)(i % 7);
            lh_tensor st = kt_t2(LH_DTYPE_F32, src, n, D), dt = kt_t2(LH_DTYPE_F32, dst[th], R, D);
            CU_ASSERT_EQUAL(lh_k_scatter_add_rows(ctx, &st, rows, s ? NULL : sc, &dt), LH_OK);
            CU_ASSERT_EQUAL(memcmp(dst[th], ref, (size_t)(R * D) * sizeof *ref), 0);
            free(dst[th]);
            lh_k_ctx_free(ctx);
        }
    }
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    float d2[4 * 300];
    lh_tensor st = kt_t2(LH_DTYPE_F32, src, n, D), dt = kt_t2(LH_DTYPE_F32, d2, R, D);
    const int64_t badrows[9] = {0, 1, 2, 3, 4, 0, 0, 0, 0};
    EXPECT_ERR(lh_k_scatter_add_rows(ctx, &st, badrows, NULL, &dt), LH_E_USAGE,
               "lh_k_scatter_add_rows: rows[4] = 4 is outside dst [4, 300]");
    EXPECT_ERR(lh_k_scatter_add_rows(ctx, &st, NULL, NULL, &dt), LH_E_USAGE, "rows is NULL (n 9)");
    lh_tensor dn = kt_t2(LH_DTYPE_F32, d2, 3, 299);
    EXPECT_ERR(lh_k_scatter_add_rows(ctx, &st, rows, NULL, &dn), LH_E_USAGE,
               "dst [3, 299] and src [9, 300] disagree on the row width");
    lh_tensor so = kt_t2(LH_DTYPE_F32, src, 4, 300);
    lh_tensor dov = kt_t2(LH_DTYPE_F32, src + 300, 4, 300);
    EXPECT_ERR(lh_k_scatter_add_rows(ctx, &so, rows, NULL, &dov), LH_E_USAGE, "dst overlaps src");
    /* empty: nothing happens */
    lh_tensor s0 = kt_t2(LH_DTYPE_F32, src, 0, 300);
    CU_ASSERT_EQUAL(lh_k_scatter_add_rows(ctx, &s0, NULL, NULL, &dt), LH_OK);
    lh_k_ctx_free(ctx);
    free(ref);
    free(src);
}

static CU_TestInfo moe_tests[] = {
    {"route == the definition: every option, 1 and 2 threads", test_route_reference},
    {"route: ties to the lowest index, groups, bias only for the choice", test_route_ties},
    {"route: every error", test_route_errors},
    {"scatter_add_rows: order, arithmetic, errors", test_scatter_add},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"moe kernels", NULL, NULL, NULL, NULL, moe_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
