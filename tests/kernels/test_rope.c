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
 *   longrope against values printed by transformers itself (see test_rope_longrope): the
 *            short / long tables, the attention factor and the rotation, partial rotary
 * Tolerances: inv_freq within 2e-6 relative of the double formulas (HF builds it in float32).
 * Rotation: HF takes freqs = pos * inv_freq in float32, so the reference uses that float32
 * angle with double cos/sin and double products: |err| <= 1e-6 * att * (|x_lo| + |x_hi|) + 1e-30.
 * The rotation has no reductions and no fused multiply-adds, so every ISA and thread count
 * must give bit-identical results.
 * Interleaved pairs (rope.interleaved, GPT-J / DeepSeek: dims (2i, 2i + 1) rotate by frequency
 * i; transformers' DeepSeek V3 apply_rotary_pos_emb_interleave, V2's complex product of
 * consecutive pairs): against the pair formula in double, a' = a c - b s, b' = b c + a s, with
 * the same tolerance; and bit for bit the rotate_half result on the de-interleaved dims put
 * back in place (both layouts round alike), for every scaling kind, partial rotary and pair
 * counts that leave every ISA a tail; lh_k_rope_init leaves interleaved false. */
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

/* ---- longrope (Phi-3) ---------------------------------------------------------------------- */

/* Reference values printed once by tools/gen_longrope_ref.py with transformers 5.24.0 / torch
 * 2.15 (CPU): Phi3RotaryEmbedding and apply_rotary_pos_emb for a Phi3Config with hidden_size
 * 64, 4 heads (head_dim 16), partial_rotary_factor 0.5 (rotary_dim 8: 4 factors), rope_theta
 * 1e4, max_position_embeddings 32, top-level original_max_position_embeddings 8, rope_scaling
 * {"type": "longrope", short_factor LR_SHORT, long_factor LR_LONG} (no factor, no
 * attention_factor: factor 32 / 8 = 4, attention_scaling sqrt(1 + ln 4 / ln 8)). LR_X is
 * x [4 tokens, 2 heads, 16] = torch.manual_seed(0) randn; each LR_Y_* is x's first T rows
 * rotated at that case's positions (transformers picks the table from max(position_ids) + 1):
 *   short     positions {0, 1, 5, 7}   seq_len 8 (= original: short factors)
 *   boundary  positions {2, 8}         seq_len 9 (long)
 *   long      positions {0, 9, 20, 31} seq_len 32 (long)
 * The same script gave attention_scaling 1.1547005383792517 for factor 2,
 * 0.75 for attention_factor 0.75 and 1 for factor 1. */
static const double LR_SHORT[4] = {1.0, 1.125, 1.5, 2.75};
static const double LR_LONG[4] = {1.5, 3.25, 9.0, 21.5};
static const float LR_X[128] = {
    -1.12583983f, -1.1523602f, -0.250578582f, -0.433878809f,
    0.848710358f, 0.692009151f, -0.31601277f, -2.11521935f,
    0.322274923f, -1.26333475f, 0.349983186f, 0.30813393f,
    0.119841509f, 1.2376579f, 1.11677718f, -0.247278154f,
    -1.35265374f, -1.6959312f, 0.566650629f, 0.793508351f,
    0.598839462f, -1.55509508f, -0.34136039f, 1.85300612f,
    0.750189483f, -0.585497558f, -0.173396751f, 0.183477938f,
    1.38936615f, 1.58633423f, 0.946298361f, -0.843676746f,
    -0.613583088f, 0.0315927416f, -0.492676973f, 0.248414755f,
    0.439695835f, 0.112411186f, 0.64079237f, 0.441156268f,
    -0.102309652f, 0.792443991f, -0.289667696f, 0.0525074862f,
    0.522860467f, 2.30220532f, -1.46889389f, -1.58668876f,
    -0.673089921f, 0.872831225f, 1.05535746f, 0.17784372f,
    -0.230335474f, -0.391754389f, 0.543294728f, -0.395157546f,
    -0.446217179f, 0.7440207f, 1.52097952f, 3.41050267f,
    -1.53118432f, -1.23413503f, 1.81972528f, -0.551528692f,
    -0.56924808f, 0.919971406f, 1.11081612f, 1.28987408f,
    -1.47817397f, 2.56723285f, -0.473119795f, 0.335550755f,
    -1.62932599f, -0.549743652f, -0.479834259f, -0.499681532f,
    -1.06698036f, 1.11493957f, -0.140671432f, 0.805753589f,
    -0.0933482349f, 0.687050223f, -0.838315368f, 0.00089182175f,
    0.84189409f, -0.400034159f, 1.03946197f, 0.358153105f,
    -0.246000946f, 2.30251646f, -1.88168919f, -0.0497270226f,
    -1.04497862f, -0.956500828f, 0.0335318595f, 0.710086584f,
    1.64586699f, -1.36016893f, 0.344565421f, 0.519867718f,
    -2.6133225f, -1.69647443f, -0.228241786f, 0.279955f,
    0.246926397f, 0.0768870041f, 0.338005811f, 0.454401761f,
    0.456940144f, -0.865371346f, 0.781307936f, -0.926789403f,
    -0.218833685f, -2.43506527f, -0.0729147568f, -0.0339864083f,
    0.962518275f, 0.349168241f, -0.921461999f, -0.056194786f,
    -0.622698486f, -0.463722169f, 1.92178237f, -0.402545542f,
    0.123902477f, 1.16478348f, 0.92337352f, 1.38729525f,
};
static const float LR_INV_SHORT[4] = {
    1.0f, 0.088888891f, 0.00666666683f, 0.000363636354f,
};
static const float LR_INV_LONG[4] = {
    0.666666687f, 0.0307692308f, 0.00111111114f, 4.65116282e-05f,
};
static const float LR_ATT = 1.29099445f;
static const float LR_Y_SHORT[128] = {
    -1.45345294f, -1.48769057f, -0.323495537f, -0.560135126f,
    1.09568036f, 0.893379927f, -0.407970726f, -2.73073626f,
    0.322274923f, -1.26333475f, 0.349983186f, 0.30813393f,
    0.119841509f, 1.2376579f, 1.11677718f, -0.247278154f,
    -1.74626839f, -2.18943763f, 0.731542766f, 1.0244149f,
    0.773098409f, -2.00761914f, -0.440694362f, 2.3922205f,
    0.750189483f, -0.585497558f, -0.173396751f, 0.183477938f,
    1.38936615f, 1.58633423f, 0.946298361f, -0.843676746f,
    -0.905647635f, 0.0277422555f, -0.641544104f, 0.32049492f,
    -0.359856516f, 0.14816992f, 0.823000669f, 0.569646895f,
    -0.102309652f, 0.792443991f, -0.289667696f, 0.0525074862f,
    0.522860467f, 2.30220532f, -1.46889389f, -1.58668876f,
    -0.219277233f, 1.16726804f, 1.35775435f, 0.229780734f,
    -0.891865969f, -0.403726041f, 0.710457861f, -0.510062635f,
    -0.446217179f, 0.7440207f, 1.52097952f, 3.41050267f,
    -1.53118432f, -1.23413503f, 1.81972528f, -0.551528692f,
    -2.03839111f, -0.352702618f, 1.45361686f, 1.66442978f,
    0.16339308f, 3.502949f, -0.562662601f, 0.436221093f,
    -1.62932599f, -0.549743652f, -0.479834259f, -0.499681532f,
    -1.06698036f, 1.11493957f, -0.140671432f, 0.805753589f,
    1.00805151f, 1.02285528f, -1.12638223f, 0.000310656091f,
    0.423868865f, -0.0849075019f, 1.30512547f, 0.462374985f,
    -0.246000946f, 2.30251646f, -1.88168919f, -0.0497270226f,
    -1.04497862f, -0.956500828f, 0.0335318595f, 0.710086584f,
    3.81842661f, -0.150369763f, 0.458093494f, 0.67022413f,
    -1.14753556f, -2.80312848f, -0.27358678f, 0.36312753f,
    0.246926397f, 0.0768870041f, 0.338005811f, 0.454401761f,
    0.456940144f, -0.865371346f, 0.781307936f, -0.926789403f,
    -1.02936244f, -2.8172183f, -0.038535431f, -0.0436914563f,
    0.751195908f, -1.46596324f, -1.19269848f, -0.0726586059f,
    -0.622698486f, -0.463722169f, 1.92178237f, -0.402545542f,
    0.123902477f, 1.16478348f, 0.92337352f, 1.38729525f,
};
static const float LR_Y_BOUNDARY[64] = {
    -1.40683985f, -1.53981698f, -0.322588176f, -0.559881091f,
    -1.15492082f, 0.800196409f, -0.408688635f, -2.73078847f,
    0.322274923f, -1.26333475f, 0.349983186f, 0.30813393f,
    0.119841509f, 1.2376579f, 1.11677718f, -0.247278154f,
    -1.16219151f, -2.06182528f, 0.732520342f, 1.02419233f,
    -1.51540267f, -2.13846827f, -0.439067632f, 2.39231586f,
    0.750189483f, -0.585497558f, -0.173396751f, 0.183477938f,
    1.38936615f, 1.58633423f, 0.946298361f, -0.843676746f,
    0.000816732645f, 0.00419389457f, -0.643371403f, 0.320490092f,
    0.974522233f, 0.150686339f, 0.821573079f, 0.569649577f,
    -0.102309652f, 0.792443991f, -0.289667696f, 0.0525074862f,
    0.522860467f, 2.30220532f, -1.46889389f, -1.58668876f,
    -0.74741441f, 1.21609378f, 1.3561722f, 0.229785055f,
    0.53374064f, -0.21592918f, 0.71347332f, -0.510060728f,
    -0.446217179f, 0.7440207f, 1.52097952f, 3.41050267f,
    -1.53118432f, -1.23413503f, 1.81972528f, -0.551528692f,
};
static const float LR_Y_LONG[128] = {
    -1.45345294f, -1.48769057f, -0.323495537f, -0.560135126f,
    1.09568036f, 0.893379927f, -0.407970726f, -2.73073626f,
    0.322274923f, -1.26333475f, 0.349983186f, 0.30813393f,
    0.119841509f, 1.2376579f, 1.11677718f, -0.247278154f,
    -1.74626839f, -2.18943763f, 0.731542766f, 1.0244149f,
    0.773098409f, -2.00761914f, -0.440694362f, 2.3922205f,
    0.750189483f, -0.585497558f, -0.173396751f, 0.183477938f,
    1.38936615f, 1.58633423f, 0.946298361f, -0.843676746f,
    -0.601973176f, -0.000443864614f, -0.644283831f, 0.320463598f,
    0.76636976f, 0.150744021f, 0.820857584f, 0.569664478f,
    -0.102309652f, 0.792443991f, -0.289667696f, 0.0525074862f,
    0.522860467f, 2.30220532f, -1.46889389f, -1.58668876f,
    -0.917432547f, 1.22216117f, 1.35537863f, 0.229808778f,
    -0.0427183956f, -0.178414583f, 0.714979708f, -0.510050058f,
    -0.446217179f, 0.7440207f, 1.52097952f, 3.41050267f,
    -1.53118432f, -1.23413503f, 1.81972528f, -0.551528692f,
    0.795137703f, -0.943444967f, 1.4472754f, 1.6648165f,
    -1.88400936f, 3.39189672f, -0.578778923f, 0.434742987f,
    -1.62932599f, -0.549743652f, -0.479834259f, -0.499681532f,
    -1.06698036f, 1.11493957f, -0.140671432f, 0.805753589f,
    -0.841014147f, 1.02239084f, -1.11181164f, 0.000721221382f,
    0.698947549f, 0.0903268158f, 1.31756008f, 0.462374508f,
    -0.246000946f, 2.30251646f, -1.88168919f, -0.0497270226f,
    -1.04497862f, -0.956500828f, 0.0335318595f, 0.710086584f,
    2.75385809f, 0.770462513f, 0.45471558f, 0.670624495f,
    2.88331127f, -2.69935703f, -0.279165149f, 0.362387687f,
    0.246926397f, 0.0768870041f, 0.338005811f, 0.454401761f,
    0.456940144f, -0.865371346f, 0.781307936f, -0.926789403f,
    -1.13621461f, -2.18643522f, -0.0531096272f, -0.0437716171f,
    -0.576973677f, -2.30331683f, -1.19213843f, -0.072610341f,
    -0.622698486f, -0.463722169f, 1.92178237f, -0.402545542f,
    0.123902477f, 1.16478348f, 0.92337352f, 1.38729525f,
};

static lh_rope_scaling longrope_scaling(void)
{
    lh_rope_scaling s = scaling_of("longrope");
    s.short_factor = LR_SHORT;
    s.long_factor = LR_LONG;
    s.n_factors = 4;
    s.original_max_position_embeddings = 8;
    return s;
}

/* Tables, attention factor and rotation (rotary dims 1e-6 relative to the operands'
 * magnitude, passthrough dims exact) against transformers; every ISA and thread count the
 * same bits. */
static void rope_longrope(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *c1 = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    /* the caller's arrays need not outlive the table: init copies them */
    double sf[4], lf[4];
    memcpy(sf, LR_SHORT, sizeof sf);
    memcpy(lf, LR_LONG, sizeof lf);
    lh_rope_scaling s = longrope_scaling();
    s.short_factor = sf;
    s.long_factor = lf;
    lh_rope r;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_OK);
    memset(sf, 0, sizeof sf);
    memset(lf, 0, sizeof lf);
    CU_ASSERT_STRING_EQUAL(r.scaling.kind, "longrope");
    CU_ASSERT_EQUAL(r.scaling.n_factors, 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.inv_freq_long);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.factors);
    CU_ASSERT_PTR_EQUAL(r.scaling.short_factor, r.factors);
    CU_ASSERT_PTR_EQUAL(r.scaling.long_factor, r.factors + 4);
    CU_ASSERT_EQUAL(memcmp(r.scaling.short_factor, LR_SHORT, sizeof LR_SHORT), 0);
    CU_ASSERT_EQUAL(memcmp(r.scaling.long_factor, LR_LONG, sizeof LR_LONG), 0);
    kt_cmp ci = {0};
    for (int i = 0; i < 4; i++) {
        kt_check(&ci, i, r.inv_freq[i], LR_INV_SHORT[i], 1e-6 * LR_INV_SHORT[i]);
        kt_check(&ci, 4 + i, r.inv_freq_long[i], LR_INV_LONG[i], 1e-6 * LR_INV_LONG[i]);
    }
    KT_REPORT(ci, "longrope short and long tables vs transformers");
    CU_ASSERT_EQUAL(r.attention_scaling, LR_ATT);
    CU_ASSERT_EQUAL(r.attention_scaling, (float)sqrt(1.0 + log(4.0) / log(8.0)));

    static const int32_t pos_short[4] = {0, 1, 5, 7}, pos_bound[2] = {2, 8};
    static const int32_t pos_long[4] = {0, 9, 20, 31};
    const struct {
        const char *name;
        const int32_t *pos;
        int64_t T, seq_len;
        const float *want;
    } cases[3] = {{"short", pos_short, 4, 8, LR_Y_SHORT},
                  {"boundary", pos_bound, 2, 9, LR_Y_BOUNDARY},
                  {"long", pos_long, 4, 32, LR_Y_LONG}};
    const int64_t H = 2, D = 16, rd = 8, half = 4;
    for (int k = 0; k < 3; k++) {
        const int64_t T = cases[k].T, n = T * H * D;
        float y[4 * 2 * 16], y1[4 * 2 * 16];
        memcpy(y, LR_X, (size_t)n * sizeof(float));
        memcpy(y1, LR_X, (size_t)n * sizeof(float));
        lh_tensor t = kt_t3(LH_DTYPE_F32, y, T, H, D), t1 = kt_t3(LH_DTYPE_F32, y1, T, H, D);
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, cases[k].pos, cases[k].seq_len), LH_OK);
        CU_ASSERT_EQUAL(lh_k_rope_apply(c1, &r, &t1, cases[k].pos, cases[k].seq_len), LH_OK);
        kt_cmp c = {0};
        int pass_bad = 0;
        for (int64_t th = 0; th < T * H; th++)
            for (int64_t i = 0; i < D; i++) {
                const float *x = LR_X + th * D;
                const int64_t e = th * D + i;
                if (i >= rd) { /* passthrough: untouched, bit for bit */
                    pass_bad += y[e] != x[i];
                    continue;
                }
                const double mag = fabs(x[i % half]) + fabs(x[i % half + half]);
                kt_check(&c, (long)e, y[e], cases[k].want[e], 1e-6 * LR_ATT * mag);
            }
        char what[96];
        snprintf(what, sizeof what, "%s longrope %s vs transformers", lh_k_isa_name(isa),
                 cases[k].name);
        KT_REPORT(c, what);
        CU_ASSERT_EQUAL(pass_bad, 0);
        CU_ASSERT_EQUAL(memcmp(y, y1, (size_t)n * sizeof(float)), 0);
    }
    /* the table follows seq_len alone: positions {2, 8} under seq_len 8 would be short */
    {
        float a[2 * 2 * 16], b[2 * 2 * 16];
        memcpy(a, LR_X, sizeof a);
        memcpy(b, LR_X, sizeof b);
        lh_tensor ta = kt_t3(LH_DTYPE_F32, a, 2, H, D), tb = kt_t3(LH_DTYPE_F32, b, 2, H, D);
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &ta, pos_bound, 9), LH_OK);
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &tb, pos_bound, 1000), LH_OK);
        CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0); /* any seq_len > 8: the long table */
    }
    lh_k_rope_free(&r);
    CU_ASSERT_PTR_NULL(r.inv_freq_long);
    CU_ASSERT_PTR_NULL(r.factors);
    lh_k_rope_free(&r); /* idempotent */
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(c1);
}
KT_ISA_TESTS(rope_longrope)

/* How transformers derives the attention factor, and the original length's default. */
static void test_rope_longrope_params(void)
{
    lh_rope r;
    lh_rope_scaling s = longrope_scaling();
    s.factor = 2.0; /* given: wins over max / original */
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_OK);
    CU_ASSERT_EQUAL(r.attention_scaling, (float)1.1547005383792517);
    lh_k_rope_free(&r);
    s.attention_factor = 0.75; /* given: wins over everything */
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_OK);
    CU_ASSERT_EQUAL(r.attention_scaling, 0.75f);
    lh_k_rope_free(&r);
    s.attention_factor = 0;
    s.factor = 1.0; /* factor <= 1: 1 */
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_OK);
    CU_ASSERT_EQUAL(r.attention_scaling, 1.0f);
    lh_k_rope_free(&r);
    s.factor = 0;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s, 8), LH_OK); /* 8 / 8 = 1 */
    CU_ASSERT_EQUAL(r.attention_scaling, 1.0f);
    lh_k_rope_free(&r);
    /* Phi-3-mini-128k's geometry: 131072 / 4096 = 32, 32 factors (head_dim 96, 64 in Phi-4-mini
     * with partial_rotary_factor 0.75: 48) */
    double f48[24];
    for (int i = 0; i < 24; i++)
        f48[i] = 1.0 + i;
    lh_rope_scaling p = scaling_of("longrope");
    p.short_factor = p.long_factor = f48;
    p.n_factors = 24;
    p.original_max_position_embeddings = 4096;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 48, 10000.0, &p, 131072), LH_OK);
    CU_ASSERT_EQUAL(r.attention_scaling, (float)sqrt(1.0 + log(32.0) / log(4096.0)));
    lh_k_rope_free(&r);

    /* no original length: max_position_embeddings is the original (factor 1, and the long
     * table from seq_len 33 on) */
    s = longrope_scaling();
    s.original_max_position_embeddings = 0;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_OK);
    CU_ASSERT_EQUAL(r.attention_scaling, 1.0f);
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const int32_t pos[2] = {2, 8};
    float a[2 * 2 * 16], b[2 * 2 * 16], c[2 * 2 * 16];
    memcpy(a, LR_X, sizeof a);
    memcpy(b, LR_X, sizeof b);
    memcpy(c, LR_X, sizeof c);
    lh_tensor ta = kt_t3(LH_DTYPE_F32, a, 2, 2, 16), tb = kt_t3(LH_DTYPE_F32, b, 2, 2, 16);
    lh_tensor tc = kt_t3(LH_DTYPE_F32, c, 2, 2, 16);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &ta, pos, 9), LH_OK);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &tb, pos, 32), LH_OK);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &tc, pos, 33), LH_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);    /* both short */
    CU_ASSERT_NOT_EQUAL(memcmp(a, c, sizeof a), 0); /* 33 > 32: long */
    lh_k_rope_free(&r);
    lh_k_ctx_free(ctx);
}

static void test_rope_longrope_errors(void)
{
    lh_rope r;
    lh_rope_scaling s = longrope_scaling();
    /* n_factors must be rotary_dim / 2 */
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 16, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "n_factors 4"));
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "rotary_dim 16"));
    CU_ASSERT_PTR_NULL(r.inv_freq);
    CU_ASSERT_PTR_NULL(r.inv_freq_long);
    CU_ASSERT_PTR_NULL(r.factors);
    s.n_factors = 3;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "n_factors 3, rotary_dim 8"));
    s.n_factors = 0; /* no factors at all */
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "short_factor NULL"));
    s.n_factors = -1;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "n_factors -1"));
    /* NULL arrays */
    s = longrope_scaling();
    s.short_factor = NULL;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "short_factor NULL"));
    s = longrope_scaling();
    s.long_factor = NULL;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "long_factor NULL"));
    /* factors must be finite and > 0 */
    double bad[4] = {1.0, 2.0, 0.0, 4.0};
    s = longrope_scaling();
    s.long_factor = bad;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "long_factor[2] = 0"));
    bad[2] = NAN;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    bad[2] = -3.0;
    s.long_factor = LR_LONG;
    s.short_factor = bad;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "short_factor[2] = -3"));
    /* neither length */
    s = longrope_scaling();
    s.original_max_position_embeddings = 0;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 0), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "original_max_position_embeddings"));
    /* negative parameters; an original length of 1 makes ln(original) 0 */
    s = longrope_scaling();
    s.attention_factor = -1;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    s.attention_factor = 0;
    s.factor = -2;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    s.factor = 0;
    s.original_max_position_embeddings = 1;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "not finite"));
    s.attention_factor = 1.5; /* given: fine */
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &s, 32), LH_OK);
    lh_k_rope_free(&r);
    /* other kinds: factors without arrays are refused; with arrays they are only carried */
    lh_rope_scaling d = scaling_of("default");
    d.n_factors = 4;
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 8, 10000.0, &d, 32), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "n_factors 4"));
    d.short_factor = LR_SHORT;
    d.long_factor = LR_LONG;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, 8, 10000.0, &d, 32), LH_OK);
    CU_ASSERT_PTR_NULL(r.inv_freq_long);
    CU_ASSERT_EQUAL(memcmp(r.scaling.long_factor, LR_LONG, sizeof LR_LONG), 0);
    lh_rope def;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&def, 8, 10000.0, NULL, 32), LH_OK);
    CU_ASSERT_EQUAL(memcmp(r.inv_freq, def.inv_freq, 4 * sizeof(float)), 0);
    lh_k_rope_free(&def);
    lh_k_rope_free(&r);
}

/* ---- interleaved pairs ---------------------------------------------------------------------- */

/* Reference rotation of x [T, H, D] in interleaved pairs with HF's float32 angle. */
static void rope_ref_pairs(const float *x, int64_t T, int64_t H, int64_t D, int64_t rd,
                           const float *inv, float att, const int32_t *pos, double *out)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *v = x + (t * H + h) * D;
            double *o = out + (t * H + h) * D;
            for (int64_t i = 0; i < D; i++)
                o[i] = v[i];
            for (int64_t i = 0; i < rd / 2; i++) {
                float ang = (float)pos[t] * inv[i];
                double c = cos((double)ang) * att, s = sin((double)ang) * att;
                double a = v[2 * i], b = v[2 * i + 1];
                o[2 * i] = a * c - b * s;
                o[2 * i + 1] = b * c + a * s;
            }
        }
}

/* Moves the rotary dims of every head between the interleaved order (a0 b0 a1 b1 ..) and the
 * rotate_half one (a0 a1 .. b0 b1 ..); the passthrough dims stay. */
static void pairs_to_halves(const float *src, float *dst, int64_t rows, int64_t D, int64_t rd,
                            bool back)
{
    const int64_t half = rd / 2;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = src + r * D;
        float *y = dst + r * D;
        memcpy(y, x, (size_t)D * sizeof(float));
        for (int64_t i = 0; i < half; i++) {
            if (back) {
                y[2 * i] = x[i];
                y[2 * i + 1] = x[half + i];
            } else {
                y[i] = x[2 * i];
                y[half + i] = x[2 * i + 1];
            }
        }
    }
}

static void rope_interleaved(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *ctx1 = kt_ctx(1, isa), *cs = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cs);
    kt_seed(4711);
    enum { N_CASES = 9 };
    struct rope_case cases[N_CASES];
    memset(cases, 0, sizeof cases);
    cases[0] = (struct rope_case){"default", scaling_of("default"), 64, 64, 4096, 10000.0};
    cases[1] = (struct rope_case){"linear, 3 pairs", scaling_of("linear"), 6, 6, 4096, 10000.0};
    cases[1].s.factor = 2.0;
    cases[2] = (struct rope_case){"llama3", scaling_of("llama3"), 128, 128, 131072, 500000.0};
    cases[2].s.factor = 8;
    cases[2].s.low_freq_factor = 1;
    cases[2].s.high_freq_factor = 4;
    cases[2].s.original_max_position_embeddings = 8192;
    cases[3] = (struct rope_case){"yarn", scaling_of("yarn"), 64, 64, 16384, 10000.0};
    cases[3].s.factor = 4;
    cases[3].s.original_max_position_embeddings = 4096;
    /* DeepSeek V2 / V3: qk_rope_head_dim 64, yarn factor 40, mscale 0.707 / mscale_all_dim 1 */
    cases[4] = (struct rope_case){"yarn mscale (DeepSeek)", scaling_of("yarn"), 64, 64, 163840,
                                  10000.0};
    cases[4].s.factor = 40;
    cases[4].s.original_max_position_embeddings = 4096;
    cases[4].s.mscale = 0.707;
    cases[4].s.mscale_all_dim = 1.0;
    cases[5] = (struct rope_case){"partial rotary", scaling_of("default"), 48, 80, 4096, 10000.0};
    /* 13 pairs: AVX-512 8 + 5 masked, AVX2 3 x 4 + 1 scalar */
    cases[6] = (struct rope_case){"partial rotary yarn, 13 pairs", scaling_of("yarn"), 26, 40,
                                  16384, 10000.0};
    cases[6].s.factor = 4;
    cases[6].s.original_max_position_embeddings = 4096;
    cases[7] = (struct rope_case){"dynamic", scaling_of("dynamic"), 32, 32, 64, 10000.0};
    cases[7].s.factor = 2;
    cases[8] = (struct rope_case){"longrope partial rotary", longrope_scaling(), 8, 16, 32,
                                  10000.0};

    const int32_t pos[7] = {0, 1, 2, 17, 500, 4095, 70000};
    const int64_t T = 7, H = 3, seq_len = 70001;
    for (int ci = 0; ci < N_CASES; ci++) {
        const struct rope_case *rc = &cases[ci];
        lh_rope r;
        r.interleaved = true; /* init must clear it */
        CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&r, rc->rd, rc->theta, &rc->s, rc->max_pos), LH_OK);
        CU_ASSERT_FALSE(r.interleaved);
        const int64_t D = rc->D, n = T * H * D;
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        float *y1 = malloc((size_t)n * sizeof(float)), *ys = malloc((size_t)n * sizeof(float));
        float *yh = malloc((size_t)n * sizeof(float)), *yb = malloc((size_t)n * sizeof(float));
        double *ref = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++)
            x[i] = kt_uniform() * 2.0f;
        memcpy(y, x, (size_t)n * sizeof(float));
        memcpy(y1, x, (size_t)n * sizeof(float));
        memcpy(ys, x, (size_t)n * sizeof(float));
        lh_tensor t = kt_t3(LH_DTYPE_F32, y, T, H, D), t1 = kt_t3(LH_DTYPE_F32, y1, T, H, D);
        lh_tensor ts = kt_t3(LH_DTYPE_F32, ys, T, H, D), th = kt_t3(LH_DTYPE_F32, yh, T, H, D);
        r.interleaved = true;
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &t, pos, seq_len), LH_OK);
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx1, &r, &t1, pos, seq_len), LH_OK);
        CU_ASSERT_EQUAL(lh_k_rope_apply(cs, &r, &ts, pos, seq_len), LH_OK);
        char what[120];
        snprintf(what, sizeof what, "%s interleaved rope %s", lh_k_isa_name(isa), rc->name);
        /* the pair formula in double (dynamic's table at this seq_len is the rotate_half
         * test's business: here it is checked through the permutation below) */
        if (strcmp(rc->name, "dynamic") != 0) {
            const float *inv = r.inv_freq_long ? r.inv_freq_long : r.inv_freq; /* seq_len > 8 */
            rope_ref_pairs(x, T, H, D, rc->rd, inv, r.attention_scaling, pos, ref);
            kt_cmp c = {0};
            int pass_bad = 0;
            for (int64_t row = 0; row < T * H; row++)
                for (int64_t i = 0; i < D; i++) {
                    const float *v = x + row * D;
                    const int64_t e = row * D + i;
                    if (i >= rc->rd) {
                        pass_bad += y[e] != v[i];
                        continue;
                    }
                    const double mag = fabs(v[i & ~(int64_t)1]) + fabs(v[i | 1]);
                    kt_check(&c, (long)e, y[e], ref[e], 1e-6 * r.attention_scaling * mag + 1e-30);
                }
            KT_REPORT(c, what);
            CU_ASSERT_EQUAL(pass_bad, 0);
        }
        /* position 0 is the identity times the attention scaling, exactly */
        for (int64_t i = 0; i < rc->rd; i++)
            CU_ASSERT_EQUAL(y[i], x[i] * r.attention_scaling);
        /* threads and ISAs agree bit for bit */
        CU_ASSERT_EQUAL(memcmp(y, y1, (size_t)n * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(y, ys, (size_t)n * sizeof(float)), 0);
        /* rotate_half on the de-interleaved dims, put back in place: the very same bits */
        pairs_to_halves(x, yh, T * H, D, rc->rd, false);
        r.interleaved = false;
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &r, &th, pos, seq_len), LH_OK);
        pairs_to_halves(yh, yb, T * H, D, rc->rd, true);
        bool same = memcmp(y, yb, (size_t)n * sizeof(float)) == 0;
        if (!same)
            printf("\n    FAIL %s: differs from rotate_half on the de-interleaved dims", what);
        CU_ASSERT_TRUE(same);
        free(x);
        free(y);
        free(y1);
        free(ys);
        free(yh);
        free(yb);
        free(ref);
        lh_k_rope_free(&r);
    }
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(ctx1);
    lh_k_ctx_free(cs);
}
KT_ISA_TESTS(rope_interleaved)

static void test_rope_errors(void)
{
    lh_rope r;
    lh_rope_scaling s = scaling_of("su"); /* Phi-3's legacy name: its plugin maps it */
    CU_ASSERT_EQUAL(lh_k_rope_init(&r, 64, 10000.0, &s, 4096), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "'su'"));
    CU_ASSERT_TRUE(
        kt_contains(lh_k_last_error(NULL), "default, linear, dynamic, llama3, yarn, longrope"));
    CU_ASSERT_PTR_NULL(r.inv_freq);
    lh_k_rope_free(&r);
    s = scaling_of("LongRoPE"); /* names are exact */
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
    {"rope longrope vs transformers (Phi-3, partial rotary, short/long) [scalar]", rope_longrope_scalar},
    {"rope longrope vs transformers (Phi-3, partial rotary, short/long) [avx2]", rope_longrope_avx2},
    {"rope longrope vs transformers (Phi-3, partial rotary, short/long) [avx512]", rope_longrope_avx512},
    {"rope interleaved pairs vs reference, == rotate_half permuted, all kinds [scalar]",
     rope_interleaved_scalar},
    {"rope interleaved pairs vs reference, == rotate_half permuted, all kinds [avx2]",
     rope_interleaved_avx2},
    {"rope interleaved pairs vs reference, == rotate_half permuted, all kinds [avx512]",
     rope_interleaved_avx512},
    {"rope longrope attention factor and original-length defaults", test_rope_longrope_params},
    {"rope longrope errors (n_factors, NULL arrays, bad factors, lengths)", test_rope_longrope_errors},
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
