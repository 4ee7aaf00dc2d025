/* Kernel library: RoPE tables and rotation against the Hugging Face formulas
 * (transformers/modeling_rope_utils.py and LlamaRotaryEmbedding / apply_rotary_pos_emb),
 * re-derived here in double precision:
 *   default  inv[i] = 1 / theta^(2i/d)
 *   linear   inv[i] / factor
 *   dynamic  theta' = theta * ((factor * L / max) - (factor - 1))^(d / (d - 2)) when L > max
 *   llama3   wavelen = 2 pi / inv: < high_wl kept, > low_wl divided by factor, in between
 *            (1 - s) inv / factor + s inv with s = (old / wavelen - low) / (high - low)
 *   yarn     ramp between floor(corr(beta_fast)) and ceil(corr(beta_slow)) (clamped to
 *            [0, d - 1]) blends inv / factor (ramp 1) and inv (ramp 0); attention factor
 *            0.1 ln(factor) + 1, or get_mscale(f, mscale) / get_mscale(f, mscale_all_dim)
 * Tolerances: inv_freq within 2e-6 relative of the double formulas (HF builds it in float32).
 * Rotation: HF takes freqs = pos * inv_freq in float32, so the reference uses that float32
 * angle with double cos/sin and double products: |err| <= 1e-6 * att * (|x_lo| + |x_hi|) + 1e-30.
 * The rotation has no reductions and no fused multiply-adds, so every ISA and thread count
 * must give bit-identical results. */
#include "ktest.h"

#define PI 3.14159265358979323846

static double ref_default(double theta, int64_t d, int64_t i)
{
    return 1.0 / pow(theta, (double)(2 * i) / (double)d);
}

static void check_inv(const lh_rope *r, const double *ref, const char *what)
{
    kt_cmp c = {0};
    for (int64_t i = 0; i < r->rotary_dim / 2; i++)
        kt_check(&c, (long)i, r->inv_freq[i], ref[i], 2e-6 * fabs(ref[i]));
    KT_REPORT(c, what);
}

static lh_rope_scaling scaling_of(const char *kind)
{
    lh_rope_scaling s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    return s;
}

static void test_rope_default_and_linear(void)
{
    const int64_t dims[] = {2, 6, 64, 128};
    for (int di = 0; di < 4; di++) {
        const int64_t d = dims[di];
        double ref[64];
        lh_rope r;
        CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, d, 10000.0, NULL, 2048), LH_OK);
        for (int64_t i = 0; i < d / 2; i++)
            ref[i] = ref_default(10000.0, d, i);
        check_inv(&r, ref, "default");
        CU_ASSERT_EQUAL(r.inv_freq[0], 1.0f);
        CU_ASSERT_EQUAL(r.attention_scaling, 1.0f);
        CU_ASSERT_STRING_EQUAL(r.scaling.kind, "default");
        lh_k_rope_free(&r);

        lh_rope_scaling s = scaling_of("default");
        CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, d, 1e6, &s, 2048), LH_OK);
        for (int64_t i = 0; i < d / 2; i++)
            ref[i] = ref_default(1e6, d, i);
        check_inv(&r, ref, "default theta 1e6");
        lh_k_rope_free(&r);

        s = scaling_of("linear");
        s.factor = 4.0;
        CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, d, 10000.0, &s, 2048), LH_OK);
        for (int64_t i = 0; i < d / 2; i++)
            ref[i] = ref_default(10000.0, d, i) / 4.0;
        check_inv(&r, ref, "linear");
        CU_ASSERT_EQUAL(r.inv_freq[0], 0.25f);
        lh_k_rope_free(&r);
        lh_k_rope_free(&r); /* idempotent */
    }
}

static void test_rope_llama3(void)
{
    /* Llama 3.1: factor 8, low 1, high 4, original 8192, theta 500000, head_dim 128 */
    lh_rope_scaling s = scaling_of("llama3");
    s.factor = 8.0;
    s.low_freq_factor = 1.0;
    s.high_freq_factor = 4.0;
    s.original_max_position_embeddings = 8192;
    lh_rope r;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 128, 500000.0, &s, 131072), LH_OK);
    double ref[64];
    const double low_wl = 8192.0 / 1.0, high_wl = 8192.0 / 4.0;
    int n_high = 0, n_low = 0, n_mid = 0;
    for (int64_t i = 0; i < 64; i++) {
        double inv = ref_default(500000.0, 128, i), wl = 2 * PI / inv;
        if (wl < high_wl) {
            ref[i] = inv;
            n_high++;
        } else if (wl > low_wl) {
            ref[i] = inv / 8.0;
            n_low++;
        } else {
            double sm = (8192.0 / wl - 1.0) / (4.0 - 1.0);
            ref[i] = (1 - sm) * inv / 8.0 + sm * inv;
            n_mid++;
        }
    }
    CU_ASSERT_TRUE(n_high > 0 && n_low > 0 && n_mid > 0); /* all three bands exercised */
    check_inv(&r, ref, "llama3");
    CU_ASSERT_EQUAL(r.inv_freq[0], 1.0f);
    CU_ASSERT_EQUAL(r.attention_scaling, 1.0f);
    lh_k_rope_free(&r);
}

/* The HF yarn table in double. */
static double ref_yarn(int64_t d, double theta, double factor, int64_t orig, double beta_fast,
                       double beta_slow, double *ref)
{
    double cd_fast = (double)d * log((double)orig / (beta_fast * 2 * PI)) / (2 * log(theta));
    double cd_slow = (double)d * log((double)orig / (beta_slow * 2 * PI)) / (2 * log(theta));
    double low = fmax(floor(cd_fast), 0), high = fmin(ceil(cd_slow), (double)(d - 1));
    if (low == high)
        high += 0.001;
    for (int64_t i = 0; i < d / 2; i++) {
        double pos = pow(theta, (double)(2 * i) / (double)d);
        double ramp = fmin(fmax(((double)i - low) / (high - low), 0), 1);
        double ef = 1 - ramp;
        ref[i] = 1 / (factor * pos) * (1 - ef) + 1 / pos * ef;
    }
    return low * 1000 + high; /* for the caller's sanity checks */
}

static void test_rope_yarn(void)
{
    double ref[64];
    lh_rope r;
    /* factor 4, original 4096, beta_fast 32, beta_slow 1 (Qwen-style, d 128, theta 1e4) */
    lh_rope_scaling s = scaling_of("yarn");
    s.factor = 4.0;
    s.original_max_position_embeddings = 4096;
    s.beta_fast = 32;
    s.beta_slow = 1;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 128, 10000.0, &s, 16384), LH_OK);
    double lh = ref_yarn(128, 10000.0, 4.0, 4096, 32, 1, ref);
    CU_ASSERT_DOUBLE_EQUAL(lh, 20 * 1000 + 46, 1e-9); /* ramp from dim 20 to 46 */
    check_inv(&r, ref, "yarn");
    CU_ASSERT_EQUAL(r.inv_freq[0], 1.0f);                                   /* extrapolated */
    CU_ASSERT_DOUBLE_EQUAL(r.inv_freq[63], ref_default(1e4, 128, 63) / 4, 1e-6 * ref[63]); /* interp */
    CU_ASSERT_EQUAL(r.attention_scaling, (float)(0.1 * log(4.0) + 1.0));
    lh_k_rope_free(&r);

    /* beta_fast / beta_slow absent: defaults 32 / 1 give the same table */
    lh_rope_scaling s2 = scaling_of("yarn");
    s2.factor = 4.0;
    s2.original_max_position_embeddings = 4096;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 128, 10000.0, &s2, 16384), LH_OK);
    check_inv(&r, ref, "yarn default betas");
    lh_k_rope_free(&r);

    /* factor absent: derived as max_position_embeddings / original */
    s2.factor = 0;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 128, 10000.0, &s2, 16384), LH_OK);
    check_inv(&r, ref, "yarn derived factor");
    lh_k_rope_free(&r);

    /* DeepSeek-style mscale / mscale_all_dim, other betas, d 64, theta 1e4, factor 40 */
    lh_rope_scaling s3 = scaling_of("yarn");
    s3.factor = 40.0;
    s3.original_max_position_embeddings = 4096;
    s3.beta_fast = 32;
    s3.beta_slow = 1;
    s3.mscale = 0.707;
    s3.mscale_all_dim = 1.0;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 64, 10000.0, &s3, 163840), LH_OK);
    ref_yarn(64, 10000.0, 40.0, 4096, 32, 1, ref);
    check_inv(&r, ref, "yarn mscale");
    double att = (0.1 * 0.707 * log(40.0) + 1.0) / (0.1 * 1.0 * log(40.0) + 1.0);
    CU_ASSERT_EQUAL(r.attention_scaling, (float)att);
    CU_ASSERT_TRUE(r.attention_scaling < 1.0f);
    lh_k_rope_free(&r);

    /* equal mscale and mscale_all_dim: factor 1 (DeepSeek-V3 config) */
    s3.mscale_all_dim = 0.707;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 64, 10000.0, &s3, 163840), LH_OK);
    CU_ASSERT_EQUAL(r.attention_scaling, 1.0f);
    lh_k_rope_free(&r);

    /* an explicit attention_factor wins */
    s3.attention_factor = 0.5;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 64, 10000.0, &s3, 163840), LH_OK);
    CU_ASSERT_EQUAL(r.attention_scaling, 0.5f);
    lh_k_rope_free(&r);

    /* no original length: max_position_embeddings is the original; narrow head (low > high
     * clamps) */
    lh_rope_scaling s4 = scaling_of("yarn");
    s4.factor = 2.0;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s4, 2048), LH_OK);
    ref_yarn(8, 10000.0, 2.0, 2048, 32, 1, ref);
    check_inv(&r, ref, "yarn d 8");
    lh_k_rope_free(&r);
}

/* Reference rotation of x [T, H, D] with HF's float32 angle. */
static void rope_ref(const float *x, int64_t T, int64_t H, int64_t D, int64_t rd, const float *inv,
                     float att, const int32_t *pos, double *out)
{
    const int64_t half = rd / 2;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *v = x + (t * H + h) * D;
            double *o = out + (t * H + h) * D;
            for (int64_t i = 0; i < D; i++)
                o[i] = v[i];
            for (int64_t i = 0; i < half; i++) {
                float ang = (float)pos[t] * inv[i];
                double c = cos((double)ang) * att, s = sin((double)ang) * att;
                o[i] = (double)v[i] * c - (double)v[i + half] * s;
                o[i + half] = (double)v[i + half] * c + (double)v[i] * s;
            }
        }
}

struct rope_case {
    const char *name;
    lh_rope_scaling s;
    int64_t rd, D, max_pos;
    double theta;
};

static void rope_apply_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *ctx1 = kt_ctx(1, isa), *cs = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cs);
    kt_seed(808);
    struct rope_case cases[6];
    memset(cases, 0, sizeof cases);
    cases[0] = (struct rope_case){"default", scaling_of("default"), 64, 64, 4096, 10000.0};
    cases[1] = (struct rope_case){"linear", scaling_of("linear"), 6, 6, 4096, 10000.0};
    cases[1].s.factor = 2.0;
    cases[2] = (struct rope_case){"llama3", scaling_of("llama3"), 128, 128, 131072, 500000.0};
    cases[2].s.factor = 8;
    cases[2].s.low_freq_factor = 1;
    cases[2].s.high_freq_factor = 4;
    cases[2].s.original_max_position_embeddings = 8192;
    cases[3] = (struct rope_case){"yarn", scaling_of("yarn"), 64, 64, 16384, 10000.0};
    cases[3].s.factor = 4;
    cases[3].s.original_max_position_embeddings = 4096;
    cases[4] = (struct rope_case){"yarn mscale", scaling_of("yarn"), 32, 32, 163840, 10000.0};
    cases[4].s.factor = 40;
    cases[4].s.original_max_position_embeddings = 4096;
    cases[4].s.mscale = 0.707;
    cases[4].s.mscale_all_dim = 1.0;
    cases[5] = (struct rope_case){"partial rotary", scaling_of("default"), 48, 80, 4096, 10000.0};

    const int32_t pos[7] = {0, 1, 2, 17, 500, 4095, 70000};
    const int64_t T = 7, H = 3;
    for (int ci = 0; ci < 6; ci++) {
        const struct rope_case *rc = &cases[ci];
        lh_rope r;
        CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, rc->rd, rc->theta, &rc->s, rc->max_pos), LH_OK);
        const int64_t D = rc->D, n = T * H * D;
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        float *y1 = malloc((size_t)n * sizeof(float)), *ys = malloc((size_t)n * sizeof(float));
        double *ref = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++)
            x[i] = kt_uniform() * 2.0f;
        memcpy(y, x, (size_t)n * sizeof(float));
        memcpy(y1, x, (size_t)n * sizeof(float));
        memcpy(ys, x, (size_t)n * sizeof(float));
        lh_tensor t = kt_t3(LH_DTYPE_F32, y, T, H, D), t1 = kt_t3(LH_DTYPE_F32, y1, T, H, D);
        lh_tensor ts = kt_t3(LH_DTYPE_F32, ys, T, H, D);
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, pos, 70001), LH_OK);
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx1, &r, &t1, pos, 70001), LH_OK);
        CU_ASSERT_EQUAL(lh_k_rope_apply(cs, &r, &ts, pos, 70001), LH_OK);
        rope_ref(x, T, H, D, rc->rd, r.inv_freq, r.attention_scaling, pos, ref);
        kt_cmp c = {0};
        const int64_t half = rc->rd / 2;
        for (int64_t th = 0; th < T * H; th++)
            for (int64_t i = 0; i < D; i++) {
                const float *v = x + th * D;
                double mag = i < rc->rd ? fabs(v[i % half]) + fabs(v[i % half + half]) : 0;
                kt_check(&c, (long)(th * D + i), y[th * D + i], ref[th * D + i],
                         1e-6 * r.attention_scaling * mag + 1e-30);
            }
        char what[96];
        snprintf(what, sizeof what, "%s rope %s", lh_k_isa_name(isa), rc->name);
        KT_REPORT(c, what);
        /* position 0 is the identity times the attention scaling, exactly */
        for (int64_t i = 0; i < rc->rd; i++)
            CU_ASSERT_EQUAL(y[i], x[i] * r.attention_scaling);
        /* threads and ISAs agree bit for bit */
        CU_ASSERT_EQUAL(memcmp(y, y1, (size_t)n * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(y, ys, (size_t)n * sizeof(float)), 0);
        free(x);
        free(y);
        free(y1);
        free(ys);
        free(ref);
        lh_k_rope_free(&r);
    }
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(ctx1);
    lh_k_ctx_free(cs);
}
KT_ISA_TESTS(rope_apply_vs_reference)

/* Dynamic NTK: at or below max_position_embeddings the table is the default one; above it the
 * base grows with seq_len as in HF's forward-time update. */
static void rope_dynamic(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(909);
    const int64_t d = 32, max_pos = 64, T = 4, H = 2, n = T * H * d;
    const double factor = 2.0, theta = 10000.0;
    lh_rope_scaling s = scaling_of("dynamic");
    s.factor = factor;
    lh_rope dyn, def;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&dyn, d, theta, &s, max_pos), LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&def, d, theta, NULL, max_pos), LH_OK);
    CU_ASSERT_EQUAL(memcmp(dyn.inv_freq, def.inv_freq, (size_t)(d / 2) * sizeof(float)), 0);

    float x[4 * 2 * 32], a[4 * 2 * 32], b[4 * 2 * 32];
    for (int64_t i = 0; i < n; i++)
        x[i] = kt_uniform();
    /* below / at the original length: identical to default */
    int32_t pos_lo[4] = {0, 10, 40, 63};
    memcpy(a, x, sizeof x);
    memcpy(b, x, sizeof x);
    lh_tensor ta = kt_t3(LH_DTYPE_F32, a, T, H, d), tb = kt_t3(LH_DTYPE_F32, b, T, H, d);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &dyn, &ta, pos_lo, 64), LH_OK);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &def, &tb, pos_lo, 64), LH_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);

    /* above: theta' = theta * ((f L / max) - (f - 1))^(d / (d - 2)) with L = seq_len */
    int32_t pos_hi[4] = {0, 64, 150, 199};
    const int64_t L = 200;
    double base = theta * pow(factor * (double)L / (double)max_pos - (factor - 1), (double)d / (double)(d - 2));
    memcpy(a, x, sizeof x);
    memcpy(b, x, sizeof x);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &dyn, &ta, pos_hi, L), LH_OK);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &def, &tb, pos_hi, L), LH_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof a), 0); /* the frequencies did change */
    kt_cmp c = {0};
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < d / 2; i++) {
                const float *v = x + (t * H + h) * d;
                double inv = 1.0 / pow(base, (double)(2 * i) / (double)d);
                double ang = (double)pos_hi[t] * inv;
                double lo = v[i] * cos(ang) - v[i + d / 2] * sin(ang);
                double hi = v[i + d / 2] * cos(ang) + v[i] * sin(ang);
                /* float32 inv_freq and angle: |d angle| <= pos * inv * 4e-7 + 1e-7 */
                double tol = (fabs(v[i]) + fabs(v[i + d / 2])) * ((double)pos_hi[t] * inv * 4e-7 + 2e-7);
                kt_check(&c, (long)i, a[(t * H + h) * d + i], lo, tol);
                kt_check(&c, (long)i, a[(t * H + h) * d + i + d / 2], hi, tol);
            }
    KT_REPORT(c, "rope dynamic above the original length");
    lh_k_rope_free(&dyn);
    lh_k_rope_free(&def);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(rope_dynamic)

static void test_rope_errors(void)
{
    lh_rope r;
    lh_rope_scaling s = scaling_of("longrope");
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 10000.0, &s, 4096), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "'longrope'"));
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "default, linear, dynamic, llama3, yarn"));
    CU_ASSERT_PTR_NULL(r.inv_freq);
    lh_k_rope_free(&r);
    s = scaling_of("su");
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 10000.0, &s, 4096), LH_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(lh_k_rope_init(NULL, 64, 10000.0, NULL, 4096), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 63, 10000.0, NULL, 4096), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "rotary_dim 63"));
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 0, 10000.0, NULL, 4096), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 0.5, NULL, 4096), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, NAN, NULL, 4096), LH_E_USAGE);
    s = scaling_of("linear");
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 10000.0, &s, 4096), LH_E_USAGE); /* factor missing */
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "factor"));
    s = scaling_of("llama3");
    s.factor = 8;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 10000.0, &s, 4096), LH_E_USAGE); /* no original, bands */
    s = scaling_of("dynamic");
    s.factor = 2;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 10000.0, &s, 0), LH_E_USAGE);
    s = scaling_of("yarn");
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 10000.0, &s, 4096), LH_E_USAGE); /* no factor */

    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, NULL, 4096), LH_OK);
    float x[2 * 2 * 8] = {0};
    int32_t pos[2] = {0, 1};
    lh_tensor t = kt_t3(LH_DTYPE_F32, x, 2, 2, 8);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, pos, 2), LH_OK);
    CU_ASSERT_EQUAL(lh_k_rope_apply(NULL, &r, &t, pos, 2), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, NULL, &t, pos, 2), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, NULL, pos, 2), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, NULL, 2), LH_E_USAGE);
    lh_tensor t2 = kt_t2(LH_DTYPE_F32, x, 4, 8);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t2, pos, 2), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_rope_apply: x must have 3 dims"));
    lh_tensor t6 = kt_t3(LH_DTYPE_F32, x, 2, 2, 6);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t6, pos, 2), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "head_dim 6 < rotary_dim 8"));
    pos[1] = -3;
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, pos, 2), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "positions[1] = -3"));
    pos[1] = 1;
    lh_tensor tb = t;
    tb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &tb, pos, 2), LH_E_UNSUPPORTED);
    lh_tensor tc = t;
    tc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &tc, pos, 2), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "cuda:0"));
    lh_k_rope_free(&r);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, pos, 2), LH_E_USAGE); /* freed table */
    s = scaling_of("dynamic");
    s.factor = 2;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s, 4), LH_OK);
    pos[1] = 9;
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, pos, 5), LH_E_USAGE); /* seq_len < max pos + 1 */
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "seq_len"));
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, pos, 10), LH_OK);
    lh_k_rope_free(&r);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo rope_tests[] = {
    {"rope default and linear tables vs HF formulas", test_rope_default_and_linear},
    {"rope llama3 table (factor 8, low 1, high 4, original 8192, theta 5e5)", test_rope_llama3},
    {"rope yarn tables (factor 4/40, mscale, attention factor, defaults)", test_rope_yarn},
    {"rope apply, all kinds, partial rotary, ISAs/threads identical [scalar]", rope_apply_vs_reference_scalar},
    {"rope apply, all kinds, partial rotary, ISAs/threads identical [avx2]", rope_apply_vs_reference_avx2},
    {"rope apply, all kinds, partial rotary, ISAs/threads identical [avx512]", rope_apply_vs_reference_avx512},
    {"rope dynamic below and above the original length [scalar]", rope_dynamic_scalar},
    {"rope dynamic below and above the original length [avx2]", rope_dynamic_avx2},
    {"rope dynamic below and above the original length [avx512]", rope_dynamic_avx512},
    {"rope errors (unknown kind, parameters, shapes, device)", test_rope_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: rope", NULL, NULL, NULL, NULL, rope_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
