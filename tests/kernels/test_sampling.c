/* Sampling kernels (lh_kernels.h "sampling"): each warper against a straightforward reference
 * written from transformers' definitions, argument checks, greedy == argmax, and the
 * counter-based generator: determinism across thread counts and batch composition, seeds that
 * differ, and the empirical frequencies of 200k draws against the distribution (chi-square). */
#include "ktest.h"

#include <float.h>

#define V 97
#define M 6

static lh_sampling_params params(float t, int64_t k, float p, float minp, float pen)
{
    lh_sampling_params s = {.struct_size = sizeof s, .temperature = t, .top_k = k, .top_p = p,
                            .min_p = minp, .repetition_penalty = pen};
    return s;
}

/* random logits; with `ties`, quantized to quarters so that equal values are common */
static void fill(float *x, int64_t n, bool ties)
{
    for (int64_t i = 0; i < n; i++) {
        float v = kt_range(-4.0f, 4.0f);
        x[i] = ties ? roundf(v * 4.0f) / 4.0f : v;
    }
}

/* ---- the reference: transformers' processors, one after the other, in plain loops -------- */

static int cmp_ref_desc(const void *a, const void *b, const float *w)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (w[i] != w[j])
        return w[i] > w[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

/* insertion sort (small n), descending by w then ascending id */
static void sort_desc(int32_t *idx, int64_t n, const float *w)
{
    for (int64_t i = 1; i < n; i++) {
        int32_t v = idx[i];
        int64_t j = i - 1;
        while (j >= 0 && cmp_ref_desc(&idx[j], &v, w) > 0) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}

static void ref_probs(const lh_sampling_params *p, const float *x, const int32_t *hist,
                      int64_t hn, float *out)
{
    float w[V];
    memcpy(w, x, sizeof w);
    if (p->repetition_penalty != 1.0f)
        for (int64_t h = 0; h < hn; h++) {
            float l = x[hist[h]]; /* gather from the original, scatter: duplicates once */
            w[hist[h]] = l < 0 ? l * p->repetition_penalty : l / p->repetition_penalty;
        }
    if (p->temperature == 0.0f) {
        int64_t b = 0;
        for (int64_t i = 0; i < V; i++)
            if (w[i] > w[b])
                b = i;
        for (int64_t i = 0; i < V; i++)
            out[i] = i == b ? 1.0f : 0.0f;
        return;
    }
    for (int64_t i = 0; i < V; i++)
        w[i] = w[i] / p->temperature;
    int32_t idx[V];
    if (p->top_k > 0 && p->top_k < V) { /* scores < topk(scores, k).values[-1] are removed */
        for (int32_t i = 0; i < V; i++)
            idx[i] = i;
        sort_desc(idx, V, w);
        float kth = w[idx[p->top_k - 1]];
        for (int64_t i = 0; i < V; i++)
            if (w[i] < kth)
                w[i] = -INFINITY;
    }
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        mx = fmaxf(mx, w[i]);
    if (p->top_p < 1.0f) { /* ascending cumsum of the softmax; remove where <= 1 - p */
        int64_t n = 0;
        for (int32_t i = 0; i < V; i++)
            if (w[i] > -INFINITY)
                idx[n++] = i;
        sort_desc(idx, n, w);
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += exp((double)w[idx[i]] - mx);
        double cum = 0;
        for (int64_t i = n - 1; i >= 1; i--) {
            cum += exp((double)w[idx[i]] - mx) / s;
            if (cum <= 1.0 - (double)p->top_p)
                w[idx[i]] = -INFINITY;
            else
                break;
        }
    }
    if (p->min_p > 0.0f) { /* probs < min_p * max prob are removed */
        double s = 0;
        for (int64_t i = 0; i < V; i++)
            if (w[i] > -INFINITY)
                s += exp((double)w[i] - mx);
        double top = 1.0 / s;
        for (int64_t i = 0; i < V; i++)
            if (w[i] > -INFINITY && exp((double)w[i] - mx) / s < (double)p->min_p * top)
                w[i] = -INFINITY;
    }
    double s = 0;
    for (int64_t i = 0; i < V; i++)
        if (w[i] > -INFINITY)
            s += exp((double)w[i] - mx);
    for (int64_t i = 0; i < V; i++)
        out[i] = w[i] > -INFINITY ? (float)(exp((double)w[i] - mx) / s) : 0.0f;
}

/* the kernel's probs for M random rows against the reference: same support, values 1e-6 */
static void check_against_ref(lh_sampling_params p, bool ties, uint64_t seed)
{
    kt_seed(seed);
    lh_kctx *ctx = kt_ctx(3, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    static float x[M * V], probs[M * V], want[V];
    int32_t hist[M][12];
    const int32_t *hp[M];
    int64_t hl[M];
    fill(x, M * V, ties);
    for (int r = 0; r < M; r++) {
        hl[r] = r * 2; /* row 0: no history; repeats likely in the others */
        for (int h = 0; h < hl[r]; h++)
            hist[r][h] = (int32_t)(kt_u64() % 20);
        hp[r] = hist[r];
    }
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, M, V), tp = kt_t2(LH_DTYPE_F32, probs, M, V);
    CU_ASSERT_EQUAL_FATAL(lh_k_sampling_probs(ctx, &p, &tx, hp, hl, &tp), LH_OK);
    int bad_support = 0;
    double worst = 0, sum_err = 0;
    for (int r = 0; r < M; r++) {
        ref_probs(&p, x + r * V, hist[r], hl[r], want);
        double sum = 0;
        for (int i = 0; i < V; i++) {
            bad_support += (want[i] == 0.0f) != (probs[r * V + i] == 0.0f);
            worst = fmax(worst, fabs((double)want[i] - probs[r * V + i]));
            sum += probs[r * V + i];
        }
        sum_err = fmax(sum_err, fabs(sum - 1.0));
    }
    CU_ASSERT_EQUAL(bad_support, 0);
    CU_ASSERT(worst <= 1e-6);
    CU_ASSERT(sum_err <= 1e-5);
    if (bad_support || worst > 1e-6)
        fprintf(stderr, "T=%g k=%lld p=%g minp=%g pen=%g ties=%d: support mismatches %d, worst "
                "%g\n", (double)p.temperature, (long long)p.top_k, (double)p.top_p,
                (double)p.min_p, (double)p.repetition_penalty, ties, bad_support, worst);
    lh_k_ctx_free(ctx);
}

static void test_repetition_penalty(void)
{
    check_against_ref(params(1.0f, 0, 1.0f, 0.0f, 1.3f), false, 11);
    check_against_ref(params(1.0f, 0, 1.0f, 0.0f, 0.7f), true, 12);
}

/* CTRL: positive logits divided, negative multiplied, each id once however often repeated */
static void test_repetition_penalty_values(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[4] = {2.0f, -2.0f, 0.0f, 1.0f}, pr[4];
    int32_t hist[5] = {0, 1, 0, 0, 2};
    const int32_t *hp[1] = {hist};
    int64_t hl[1] = {5};
    lh_sampling_params p = params(1.0f, 0, 1.0f, 0.0f, 2.0f);
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, 1, 4), tp = kt_t2(LH_DTYPE_F32, pr, 1, 4);
    CU_ASSERT_EQUAL_FATAL(lh_k_sampling_probs(ctx, &p, &tx, hp, hl, &tp), LH_OK);
    /* penalized logits 1, -4, 0, 1 */
    double e[4] = {exp(1.0), exp(-4.0), 1.0, exp(1.0)}, s = e[0] + e[1] + e[2] + e[3];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_DOUBLE_EQUAL(pr[i], e[i] / s, 1e-6);
    /* greedy with a penalty: 0 (2 -> 1) ties with 3 (1): the first wins */
    p.temperature = 0.0f;
    int32_t id = -1;
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, hp, hl, 0, NULL, NULL, &id), LH_OK);
    CU_ASSERT_EQUAL(id, 0);
    lh_k_ctx_free(ctx);
}

static void test_temperature(void)
{
    check_against_ref(params(0.7f, 0, 1.0f, 0.0f, 1.0f), false, 21);
    check_against_ref(params(2.5f, 0, 1.0f, 0.0f, 1.0f), true, 22);
}

static void test_top_k(void)
{
    for (int64_t k = 1; k <= V + 3; k += 7) {
        check_against_ref(params(1.0f, k, 1.0f, 0.0f, 1.0f), false, 30 + (uint64_t)k);
        check_against_ref(params(1.0f, k, 1.0f, 0.0f, 1.0f), true, 60 + (uint64_t)k);
    }
}

/* ties at the boundary are all kept: {3, 2, 2, 2, 1} with k = 2 keeps 4 tokens */
static void test_top_k_ties_kept(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[5] = {2.0f, 3.0f, 2.0f, 1.0f, 2.0f}, pr[5];
    lh_sampling_params p = params(1.0f, 2, 1.0f, 0.0f, 1.0f);
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, 1, 5), tp = kt_t2(LH_DTYPE_F32, pr, 1, 5);
    CU_ASSERT_EQUAL_FATAL(lh_k_sampling_probs(ctx, &p, &tx, NULL, NULL, &tp), LH_OK);
    CU_ASSERT(pr[0] > 0 && pr[1] > 0 && pr[2] > 0 && pr[4] > 0);
    CU_ASSERT_EQUAL(pr[3], 0.0f);
    lh_k_ctx_free(ctx);
}

static void test_top_p(void)
{
    const float ps[] = {0.0f, 0.05f, 0.3f, 0.5f, 0.9f, 0.99f, 1.0f}; /* 0: the top token only */
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        check_against_ref(params(1.0f, 0, ps[i], 0.0f, 1.0f), false, 100 + i);
        check_against_ref(params(1.0f, 0, ps[i], 0.0f, 1.0f), true, 200 + i);
    }
}

/* probabilities 0.5, 0.25, 0.125, 0.125: p = 0.7 and 0.74 keep two (0.75 reaches them), p = 0.8
 * three; a tiny p keeps the most likely one */
static void test_top_p_prefix(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[4] = {logf(0.125f), logf(0.5f), logf(0.125f), logf(0.25f)}, pr[4];
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, 1, 4), tp = kt_t2(LH_DTYPE_F32, pr, 1, 4);
    const float p_in[4] = {0.7f, 0.74f, 0.8f, 1e-6f};
    const int keep[4] = {2, 2, 3, 1};
    for (int c = 0; c < 4; c++) {
        lh_sampling_params p = params(1.0f, 0, p_in[c], 0.0f, 1.0f);
        CU_ASSERT_EQUAL_FATAL(lh_k_sampling_probs(ctx, &p, &tx, NULL, NULL, &tp), LH_OK);
        int n = 0;
        for (int i = 0; i < 4; i++)
            n += pr[i] > 0;
        CU_ASSERT_EQUAL(n, keep[c]);
        CU_ASSERT(pr[1] > 0);
    }
    lh_k_ctx_free(ctx);
}

static void test_min_p(void)
{
    const float ms[] = {0.01f, 0.1f, 0.5f, 1.0f};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) {
        check_against_ref(params(1.0f, 0, 1.0f, ms[i], 1.0f), false, 300 + i);
        check_against_ref(params(0.8f, 0, 1.0f, ms[i], 1.0f), true, 400 + i);
    }
}

static void test_all_together(void)
{
    check_against_ref(params(0.8f, 40, 0.9f, 0.05f, 1.2f), false, 501);
    check_against_ref(params(1.3f, 10, 0.7f, 0.02f, 1.1f), true, 502);
    check_against_ref(params(0.0f, 10, 0.7f, 0.02f, 1.1f), true, 503); /* greedy */
}

static void test_greedy_is_argmax(void)
{
    kt_seed(7);
    lh_kctx *ctx = kt_ctx(4, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    static float x[64 * V];
    fill(x, 64 * V, true); /* many ties: the first index wins in both */
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, 64, V);
    int32_t a[64], b[64];
    lh_sampling_params p = params(0.0f, 5, 0.5f, 0.1f, 1.0f);
    CU_ASSERT_EQUAL_FATAL(lh_k_argmax(ctx, &tx, a), LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 99, NULL, NULL, b), LH_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    lh_k_ctx_free(ctx);
}

static void expect_usage(lh_kctx *ctx, lh_sampling_params p, const char *needle)
{
    float x[4] = {0}, pr[4];
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, 1, 4), tp = kt_t2(LH_DTYPE_F32, pr, 1, 4);
    CU_ASSERT_EQUAL(lh_k_sampling_check(ctx, &p), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), needle));
    CU_ASSERT_EQUAL(lh_k_sampling_probs(ctx, &p, &tx, NULL, NULL, &tp), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), needle));
    CU_ASSERT_EQUAL(lh_k_sampling_check(NULL, &p), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(NULL), needle));
}

static void test_bad_params(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    expect_usage(ctx, params(-0.1f, 0, 1, 0, 1), "temperature");
    expect_usage(ctx, params(NAN, 0, 1, 0, 1), "temperature");
    expect_usage(ctx, params(INFINITY, 0, 1, 0, 1), "temperature");
    expect_usage(ctx, params(1, -1, 1, 0, 1), "top_k");
    expect_usage(ctx, params(1, 0, -0.01f, 0, 1), "top_p");
    expect_usage(ctx, params(1, 0, 1.01f, 0, 1), "top_p");
    expect_usage(ctx, params(1, 0, NAN, 0, 1), "top_p");
    expect_usage(ctx, params(1, 0, 1, -0.01f, 1), "min_p");
    expect_usage(ctx, params(1, 0, 1, 1.5f, 1), "min_p");
    expect_usage(ctx, params(1, 0, 1, NAN, 1), "min_p");
    expect_usage(ctx, params(1, 0, 1, 0, 0.0f), "repetition_penalty");
    expect_usage(ctx, params(1, 0, 1, 0, -1.0f), "repetition_penalty");
    expect_usage(ctx, params(1, 0, 1, 0, NAN), "repetition_penalty");
    lh_sampling_params p = params(1, 0, 1, 0, 1);
    p.struct_size = 4;
    expect_usage(ctx, p, "struct_size");
    CU_ASSERT_EQUAL(lh_k_sampling_check(ctx, NULL), LH_E_USAGE);
    lh_k_ctx_free(ctx);
}

static void test_bad_inputs(void)
{
    lh_kctx *ctx = kt_ctx(2, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[2 * 4] = {0, 1, 2, 3, 0, 1, NAN, 3};
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, 2, 4);
    uint64_t st[2] = {0, 1}, sp[2] = {0, 0};
    int32_t out[2];
    lh_sampling_params p = params(1, 0, 1, 0, 1);
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, st, sp, out), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), "logits[1][2] is NaN"));
    p.temperature = 0; /* greedy refuses NaN too */
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, st, sp, out), LH_E_USAGE);
    x[6] = INFINITY;
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, st, sp, out), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), "+inf"));
    /* -inf is a masked token; a row of nothing but -inf cannot be sampled */
    for (int i = 4; i < 8; i++)
        x[i] = -INFINITY;
    p.temperature = 1;
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, st, sp, out), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), "row 1"));
    x[5] = 0.5f;
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, st, sp, out), LH_OK);
    CU_ASSERT_EQUAL(out[1], 1);
    /* history ids outside the vocabulary, and stream/step required when sampling */
    int32_t h[1] = {4};
    const int32_t *hp[2] = {h, h};
    int64_t hl[2] = {1, 0};
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, hp, hl, 1, st, sp, out), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), "history[0][0]"));
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, NULL, sp, out), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, st, sp, NULL), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_sample(NULL, &p, &tx, NULL, NULL, 1, st, sp, out), LH_E_USAGE);
    /* a tiny temperature overflowing a finite logit is refused, not NaN */
    x[5] = 3e38f;
    p.temperature = 1e-3f;
    CU_ASSERT_EQUAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 1, st, sp, out), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), "temperature"));
    lh_k_ctx_free(ctx);
}

static void test_rng(void)
{
    /* a pure function, in [0, 1), streams and steps and seeds all matter */
    CU_ASSERT_EQUAL(lh_k_rng_uniform(1, 2, 3), lh_k_rng_uniform(1, 2, 3));
    CU_ASSERT_NOT_EQUAL(lh_k_rng_uniform(1, 2, 3), lh_k_rng_uniform(2, 2, 3));
    CU_ASSERT_NOT_EQUAL(lh_k_rng_uniform(1, 2, 3), lh_k_rng_uniform(1, 3, 3));
    CU_ASSERT_NOT_EQUAL(lh_k_rng_uniform(1, 2, 3), lh_k_rng_uniform(1, 2, 4));
    CU_ASSERT_NOT_EQUAL(lh_k_rng_uniform(1ull << 32, 0, 0), lh_k_rng_uniform(0, 0, 0));
    double mean = 0, lo = 1, hi = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        double u = lh_k_rng_uniform(42, i % 7, i);
        CU_ASSERT_FATAL(u >= 0.0 && u < 1.0);
        mean += u;
        lo = fmin(lo, u);
        hi = fmax(hi, u);
    }
    mean /= 100000;
    CU_ASSERT(fabs(mean - 0.5) < 0.005); /* sd of the mean: 0.0009 */
    CU_ASSERT(lo < 1e-3 && hi > 1 - 1e-3);
}

/* same seed, same draws: whatever the thread count, the rows' order or the rows beside them;
 * another seed gives other draws */
static void test_determinism(void)
{
    kt_seed(9);
    enum { R = 64 };
    static float x[R * V], y[R * V];
    fill(x, R * V, false);
    uint64_t st[R], sp[R], st2[R], sp2[R];
    for (int r = 0; r < R; r++) {
        st[r] = (uint64_t)r;
        sp[r] = 5;
    }
    lh_sampling_params p = params(1.1f, 30, 0.95f, 0.01f, 1.0f);
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, R, V), ty = kt_t2(LH_DTYPE_F32, y, R, V);
    int32_t a[R], b[R], c[R], d[R];
    lh_kctx *c1 = kt_ctx(1, LH_K_ISA_SCALAR), *c8 = kt_ctx(8, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c8);
    CU_ASSERT_EQUAL_FATAL(lh_k_sample(c1, &p, &tx, NULL, NULL, 1234, st, sp, a), LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_k_sample(c8, &p, &tx, NULL, NULL, 1234, st, sp, b), LH_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    /* reversed rows (each keeping its stream and step) */
    for (int r = 0; r < R; r++) {
        memcpy(y + r * V, x + (R - 1 - r) * V, V * sizeof *x);
        st2[r] = st[R - 1 - r];
        sp2[r] = sp[R - 1 - r];
    }
    CU_ASSERT_EQUAL_FATAL(lh_k_sample(c8, &p, &ty, NULL, NULL, 1234, st2, sp2, c), LH_OK);
    int same = 0;
    for (int r = 0; r < R; r++)
        same += c[r] == a[R - 1 - r];
    CU_ASSERT_EQUAL(same, R);
    /* one row alone */
    lh_tensor t1 = kt_t2(LH_DTYPE_F32, x + 17 * V, 1, V);
    int32_t one = -1;
    CU_ASSERT_EQUAL_FATAL(lh_k_sample(c1, &p, &t1, NULL, NULL, 1234, st + 17, sp + 17, &one),
                          LH_OK);
    CU_ASSERT_EQUAL(one, a[17]);
    /* another seed */
    CU_ASSERT_EQUAL_FATAL(lh_k_sample(c8, &p, &tx, NULL, NULL, 1235, st, sp, d), LH_OK);
    int differ = 0;
    for (int r = 0; r < R; r++)
        differ += a[r] != d[r];
    CU_ASSERT(differ >= R / 4);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c8);
}

/* 200k draws from a known distribution (temperature 0.9, top-k 6 of 8) against the expected
 * counts: chi-square with 5 degrees of freedom below 25.7 (p = 1e-4; the draws are
 * deterministic, so this either always passes or never). */
static void test_frequencies(void)
{
    enum { W = 8, R = 2000, CALLS = 100 };
    const float base[W] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -3.0f, 0.7f};
    static float x[R * W];
    for (int r = 0; r < R; r++)
        memcpy(x + r * W, base, sizeof base);
    lh_sampling_params p = params(0.9f, 6, 1.0f, 0.0f, 1.0f);
    lh_kctx *ctx = kt_ctx(4, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float pr[W];
    lh_tensor t1 = kt_t2(LH_DTYPE_F32, x, 1, W), tp = kt_t2(LH_DTYPE_F32, pr, 1, W);
    CU_ASSERT_EQUAL_FATAL(lh_k_sampling_probs(ctx, &p, &t1, NULL, NULL, &tp), LH_OK);
    CU_ASSERT_EQUAL(pr[6], 0.0f); /* the two least likely are out */
    CU_ASSERT_EQUAL(pr[2], 0.0f);
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, R, W);
    static uint64_t st[R], sp[R];
    static int32_t out[R];
    long counts[W] = {0};
    for (int c = 0; c < CALLS; c++) {
        for (int r = 0; r < R; r++) {
            st[r] = (uint64_t)r;
            sp[r] = (uint64_t)c;
        }
        CU_ASSERT_EQUAL_FATAL(lh_k_sample(ctx, &p, &tx, NULL, NULL, 77, st, sp, out), LH_OK);
        for (int r = 0; r < R; r++)
            counts[out[r]]++;
    }
    double chi2 = 0;
    int dof = -1;
    for (int i = 0; i < W; i++) {
        if (pr[i] == 0.0f) {
            CU_ASSERT_EQUAL(counts[i], 0);
            continue;
        }
        double e = (double)R * CALLS * pr[i];
        chi2 += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
        dof++;
    }
    CU_ASSERT_EQUAL(dof, 5);
    CU_ASSERT(chi2 < 25.7);
    if (chi2 >= 25.7)
        fprintf(stderr, "chi-square %g with %d dof\n", chi2, dof);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo sampling_tests[] = {
    {"repetition penalty vs reference", test_repetition_penalty},
    {"repetition penalty values (CTRL, once per id)", test_repetition_penalty_values},
    {"temperature vs reference", test_temperature},
    {"top-k vs reference (with ties)", test_top_k},
    {"top-k keeps ties at the boundary", test_top_k_ties_kept},
    {"top-p vs reference (with ties)", test_top_p},
    {"top-p keeps the smallest prefix reaching p", test_top_p_prefix},
    {"min-p vs reference", test_min_p},
    {"all warpers together vs reference", test_all_together},
    {"temperature 0 is argmax", test_greedy_is_argmax},
    {"bad parameters are usage errors naming them", test_bad_params},
    {"NaN, +inf, empty rows, bad history", test_bad_inputs},
    {"counter-based generator", test_rng},
    {"same seed same draws (threads, batch), other seeds differ", test_determinism},
    {"empirical frequencies of 200k draws (chi-square)", test_frequencies},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"sampling", NULL, NULL, NULL, NULL, sampling_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
