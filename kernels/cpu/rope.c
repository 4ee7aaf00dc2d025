/* Rotary position embedding exactly as Hugging Face transformers computes it
 * (modeling_rope_utils.py: _compute_default/_linear_scaling/_dynamic_ntk/_llama3/_yarn/
 * _longrope parameters; LlamaRotaryEmbedding.forward; apply_rotary_pos_emb with rotate_half).
 *
 * transformers builds inv_freq as a float32 tensor, so every step below that torch performs on
 * float32 tensors is done here in float (each operation rounded to float32, python scalars
 * cast to float32 first; `scalar / tensor` is reciprocal(tensor) * scalar, as torch's
 * __rtruediv__), and every step it performs on python floats is done in double:
 *   default   inv[i] = 1 / base^(2i/d)              base^(...) of float32 operands
 *   linear    inv[i] = default / factor
 *   dynamic   at seq_len > max_position_embeddings, base = theta * ((factor * seq_len / max)
 *             - (factor - 1))^(d/(d-2)), in float32 (seq_len is a tensor in HF's forward-time
 *             update), then the default formula
 *   llama3    wavelen = 2*pi / inv; low-frequency band divided by factor, medium band smoothed
 *   yarn      blend of inv/factor and inv by a linear ramp between the correction dims of
 *             beta_fast/beta_slow (floor/ceil, "truncate" = true, the HF default); attention
 *             factor from get_mscale(factor[, mscale]) / get_mscale(factor, mscale_all_dim)
 *   longrope  inv[i] = 1 / (ext[i] * base^(2i/d)) with ext = short_factor (inv_freq) or
 *             long_factor (inv_freq_long), each factor rounded to float32; attention factor
 *             in double: attention_factor, else sqrt(1 + ln(factor) / ln(original)) (1 when
 *             factor <= 1), factor defaulting to max_position_embeddings / original. At apply
 *             time the long table serves seq_len > original (longrope_frequency_update)
 * At apply time: freqs = float(pos) * inv (float32), cos/sin of that (float32 results), times
 * attention_scaling; q' = q * cos + rotate_half(q) * sin without fused multiply-adds.
 * Interleaved (rope->interleaved: GPT-J, DeepSeek's rope_interleave): pair i is dims (2i, 2i + 1)
 * instead of (i, i + rotary_dim / 2), with the same cos / sin and the same products and sums,
 * so the values are those of rotate_half on the de-interleaved dims (transformers' DeepSeek V3
 * apply_rotary_pos_emb_interleave, V2's complex product of consecutive pairs), left in place
 * rather than permuted: q.k is the same, since q and k are permuted alike. */
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>

static const char *const supported_kinds = "default, linear, dynamic, llama3, yarn, longrope";

/* base ** (i2 / dim) as torch evaluates `base ** (arange(0, dim, 2).float() / dim)`: the
 * exponent is a float32 quotient, the power of float32 operands is rounded to float32. */
static float pow_f32(float base, int64_t i2, int64_t dim)
{
    float e = (float)i2 / (float)dim;
    return (float)pow((double)base, (double)e);
}

static void default_inv_freq(float base, int64_t dim, float *inv)
{
    for (int64_t i = 0; i < dim / 2; i++)
        inv[i] = 1.0f / pow_f32(base, 2 * i, dim);
}

void lh_cpu_rope_dynamic_inv_freq(const lh_rope *rope, int64_t seq_len, float *inv)
{
    const int64_t dim = rope->rotary_dim;
    const double factor = rope->scaling.factor;
    float a = (float)factor * (float)seq_len;
    a = a / (float)rope->max_position_embeddings;
    a = a - (float)(factor - 1.0);
    /* tensor ** python float: std::pow(float, double) rounded to float */
    a = (float)pow((double)a, (double)dim / (double)(dim - 2));
    float base = (float)rope->theta * a;
    default_inv_freq(base, dim, inv);
}

static void llama3_inv_freq(const lh_rope_scaling *sc, int64_t dim, float *inv)
{
    const float factor = (float)sc->factor;
    const double old_ctx = (double)sc->original_max_position_embeddings;
    const float low_wl = (float)(old_ctx / sc->low_freq_factor);
    const float high_wl = (float)(old_ctx / sc->high_freq_factor);
    const float two_pi = (float)(2.0 * M_PI);
    const float low_f = (float)sc->low_freq_factor;
    const float band = (float)(sc->high_freq_factor - sc->low_freq_factor);
    for (int64_t i = 0; i < dim / 2; i++) {
        float f = inv[i];
        /* python scalar / tensor is reciprocal(tensor) * scalar in torch */
        float wavelen = (1.0f / f) * two_pi;
        float v = wavelen > low_wl ? f / factor : f;
        float smooth = ((1.0f / wavelen) * (float)old_ctx - low_f) / band;
        float smoothed = (1.0f - smooth) * v / factor + smooth * v;
        bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
        inv[i] = medium ? smoothed : v;
    }
}

static double yarn_get_mscale(double scale, double mscale)
{
    if (scale <= 1.0)
        return 1.0;
    return 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double num_rotations, int64_t dim, double base, double max_pos)
{
    return ((double)dim * log(max_pos / (num_rotations * 2.0 * M_PI))) / (2.0 * log(base));
}

/* The length longrope switches tables at: original_max_position_embeddings, or
 * max_position_embeddings when the scaling does not give it (transformers' default). */
static int64_t longrope_original(const lh_rope_scaling *sc, int64_t max_pos)
{
    return sc->original_max_position_embeddings > 0 ? sc->original_max_position_embeddings
                                                    : max_pos;
}

/* 1.0 / (ext_factors * base ** (arange(0, dim, 2).float() / dim)), all float32 tensors */
static void longrope_inv_freq(float base, int64_t dim, const double *ext, float *inv)
{
    for (int64_t i = 0; i < dim / 2; i++)
        inv[i] = 1.0f / ((float)ext[i] * pow_f32(base, 2 * i, dim));
}

/* The attention factor, on python floats. */
static double longrope_attention(const lh_rope_scaling *sc, int64_t max_pos)
{
    if (sc->attention_factor > 0)
        return sc->attention_factor;
    const double orig = (double)longrope_original(sc, max_pos);
    const double factor = sc->factor > 0 ? sc->factor : (double)max_pos / orig;
    if (factor <= 1.0)
        return 1.0;
    return sqrt(1.0 + log(factor) / log(orig));
}

/* Returns the attention factor. */
static double yarn_inv_freq(const lh_rope_scaling *sc, double theta, int64_t dim, int64_t max_pos,
                            float *inv)
{
    double factor = sc->factor;
    const double orig = sc->original_max_position_embeddings > 0
                            ? (double)sc->original_max_position_embeddings
                            : (double)max_pos;
    if (!(factor > 0)) /* absent: derived from the two lengths (transformers >= 4.57) */
        factor = (double)max_pos / orig;
    double att;
    if (sc->attention_factor > 0)
        att = sc->attention_factor;
    else if (sc->mscale != 0 && sc->mscale_all_dim != 0)
        att = yarn_get_mscale(factor, sc->mscale) / yarn_get_mscale(factor, sc->mscale_all_dim);
    else
        att = yarn_get_mscale(factor, 1.0);
    const double beta_fast = sc->beta_fast != 0 ? sc->beta_fast : 32.0;
    const double beta_slow = sc->beta_slow != 0 ? sc->beta_slow : 1.0;

    /* find_correction_range with truncate = True */
    double low = floor(yarn_correction_dim(beta_fast, dim, theta, orig));
    double high = ceil(yarn_correction_dim(beta_slow, dim, theta, orig));
    if (low < 0)
        low = 0;
    if (high > (double)(dim - 1))
        high = (double)(dim - 1);
    if (low == high)
        high += 0.001; /* linear_ramp_factor's guard against a zero-width ramp */

    const float fbase = (float)theta, ffactor = (float)factor;
    const float flow = (float)low, frange = (float)(high - low);
    for (int64_t i = 0; i < dim / 2; i++) {
        float pos = pow_f32(fbase, 2 * i, dim);
        float extrap = 1.0f / pos;
        float interp = 1.0f / (ffactor * pos);
        float ramp = ((float)i - flow) / frange;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float ef = 1.0f - ramp; /* inv_freq_extrapolation_factor */
        inv[i] = interp * (1.0f - ef) + extrap * ef;
    }
    return att;
}

LH_EXPORT lh_status lh_k_rope_init(lh_rope *rope, int64_t rotary_dim, double theta,
                                   const lh_rope_scaling *scaling, int64_t max_position_embeddings)
{
    if (!rope)
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_rope_init: rope is NULL");
    memset(rope, 0, sizeof *rope);
    if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > (1 << 20))
        return lh_kerr(NULL, LH_E_USAGE,
                       "lh_k_rope_init: rotary_dim %lld must be even and in [2, 1048576]",
                       (long long)rotary_dim);
    if (!(theta > 1.0) || !isfinite(theta))
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_rope_init: rope_theta %g must be finite and > 1",
                       theta);
    if (max_position_embeddings < 0)
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_rope_init: max_position_embeddings %lld is negative",
                       (long long)max_position_embeddings);

    const char *kind = scaling && scaling->kind ? scaling->kind : "default";
    const char *canon = NULL;
    if (!strcmp(kind, "default"))
        canon = "default";
    else if (!strcmp(kind, "linear"))
        canon = "linear";
    else if (!strcmp(kind, "dynamic"))
        canon = "dynamic";
    else if (!strcmp(kind, "llama3"))
        canon = "llama3";
    else if (!strcmp(kind, "yarn"))
        canon = "yarn";
    else if (!strcmp(kind, "longrope"))
        canon = "longrope";
    else
        return lh_kerr(NULL, LH_E_UNSUPPORTED,
                       "lh_k_rope_init: rope_scaling kind '%s' is not supported (supported: %s)",
                       kind, supported_kinds);

    lh_rope_scaling sc;
    memset(&sc, 0, sizeof sc);
    if (scaling)
        sc = *scaling;
    sc.kind = canon; /* a static string: the caller's may not outlive the table */
    /* the factor arrays are copied below, for the same reason */
    if (sc.n_factors < 0 || sc.n_factors > (1 << 20) ||
        (sc.n_factors > 0 && (!sc.short_factor || !sc.long_factor)))
        return lh_kerr(NULL, LH_E_USAGE,
                       "lh_k_rope_init: rope_scaling has n_factors %lld with short_factor %s and "
                       "long_factor %s (n_factors in [0, 2^20], both arrays set when > 0)",
                       (long long)sc.n_factors, sc.short_factor ? "set" : "NULL",
                       sc.long_factor ? "set" : "NULL");
    if (sc.n_factors == 0)
        sc.short_factor = sc.long_factor = NULL;

    const bool needs_factor = strcmp(canon, "default") != 0 && strcmp(canon, "yarn") != 0 &&
                              strcmp(canon, "longrope") != 0;
    if (needs_factor && (!(sc.factor > 0) || !isfinite(sc.factor)))
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_rope_init: rope_scaling '%s' needs factor > 0 (got %g)",
                       canon, sc.factor);
    if (!strcmp(canon, "dynamic") && (max_position_embeddings <= 0 || rotary_dim <= 2))
        return lh_kerr(NULL, LH_E_USAGE,
                       "lh_k_rope_init: rope_scaling 'dynamic' needs max_position_embeddings > 0 and "
                       "rotary_dim > 2 (got %lld, %lld)",
                       (long long)max_position_embeddings, (long long)rotary_dim);
    if (!strcmp(canon, "llama3")) {
        if (sc.original_max_position_embeddings <= 0 || !(sc.low_freq_factor > 0) ||
            !(sc.high_freq_factor > sc.low_freq_factor))
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'llama3' needs original_max_position_embeddings "
                           "> 0 and 0 < low_freq_factor < high_freq_factor (got %lld, %g, %g)",
                           (long long)sc.original_max_position_embeddings, sc.low_freq_factor,
                           sc.high_freq_factor);
    }
    if (!strcmp(canon, "yarn")) {
        if (sc.original_max_position_embeddings <= 0 && max_position_embeddings <= 0)
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'yarn' needs original_max_position_embeddings "
                           "or max_position_embeddings");
        if (!(sc.factor > 0) && (sc.original_max_position_embeddings <= 0 || max_position_embeddings <= 0))
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'yarn' needs factor > 0, or both "
                           "original_max_position_embeddings and max_position_embeddings to derive it");
        if (!isfinite(sc.factor) || sc.factor < 0 || sc.beta_fast < 0 || sc.beta_slow < 0 ||
            sc.attention_factor < 0)
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'yarn' has a negative or non-finite parameter "
                           "(factor %g, beta_fast %g, beta_slow %g, attention_factor %g)",
                           sc.factor, sc.beta_fast, sc.beta_slow, sc.attention_factor);
    }

    const bool longrope = !strcmp(canon, "longrope");
    if (longrope) {
        if (!sc.short_factor || !sc.long_factor || sc.n_factors != rotary_dim / 2)
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'longrope' needs short_factor and "
                           "long_factor of n_factors = rotary_dim / 2 entries each (n_factors "
                           "%lld, rotary_dim %lld, short_factor %s, long_factor %s)",
                           (long long)sc.n_factors, (long long)rotary_dim,
                           sc.short_factor ? "set" : "NULL", sc.long_factor ? "set" : "NULL");
        for (int64_t i = 0; i < sc.n_factors; i++)
            if (!(sc.short_factor[i] > 0) || !isfinite(sc.short_factor[i]) ||
                !(sc.long_factor[i] > 0) || !isfinite(sc.long_factor[i]))
                return lh_kerr(NULL, LH_E_USAGE,
                               "lh_k_rope_init: rope_scaling 'longrope': short_factor[%lld] = %g "
                               "and long_factor[%lld] = %g must be finite and > 0",
                               (long long)i, sc.short_factor[i], (long long)i,
                               sc.long_factor[i]);
        const int64_t orig = longrope_original(&sc, max_position_embeddings);
        if (orig <= 0)
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'longrope' needs "
                           "original_max_position_embeddings or max_position_embeddings");
        if (!isfinite(sc.factor) || sc.factor < 0 || !isfinite(sc.attention_factor) ||
            sc.attention_factor < 0)
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'longrope' has a negative or non-finite "
                           "parameter (factor %g, attention_factor %g)",
                           sc.factor, sc.attention_factor);
        const double att = longrope_attention(&sc, max_position_embeddings);
        if (!isfinite(att))
            return lh_kerr(NULL, LH_E_USAGE,
                           "lh_k_rope_init: rope_scaling 'longrope': the attention factor "
                           "sqrt(1 + ln(factor) / ln(original_max_position_embeddings)) is not "
                           "finite (original_max_position_embeddings %lld); give "
                           "attention_factor",
                           (long long)orig);
    }

    float *inv = malloc((size_t)(rotary_dim / 2) * sizeof(float));
    float *inv_long = longrope ? malloc((size_t)(rotary_dim / 2) * sizeof(float)) : NULL;
    double *factors =
        sc.n_factors > 0 ? malloc((size_t)(2 * sc.n_factors) * sizeof(double)) : NULL;
    if (!inv || (longrope && !inv_long) || (sc.n_factors > 0 && !factors)) {
        free(inv);
        free(inv_long);
        free(factors);
        return lh_kerr(NULL, LH_E_NOMEM, "lh_k_rope_init: out of memory");
    }
    if (factors) {
        memcpy(factors, sc.short_factor, (size_t)sc.n_factors * sizeof(double));
        memcpy(factors + sc.n_factors, sc.long_factor, (size_t)sc.n_factors * sizeof(double));
        sc.short_factor = factors;
        sc.long_factor = factors + sc.n_factors;
    }
    double att = 1.0;
    if (longrope) {
        /* the short table at init (seq_len None), the long one as HF computes it on first use
         * (seq_len = original + 1) */
        longrope_inv_freq((float)theta, rotary_dim, sc.short_factor, inv);
        longrope_inv_freq((float)theta, rotary_dim, sc.long_factor, inv_long);
        att = longrope_attention(&sc, max_position_embeddings);
    } else if (!strcmp(canon, "yarn")) {
        att = yarn_inv_freq(&sc, theta, rotary_dim, max_position_embeddings, inv);
    } else {
        /* dynamic at init: seq_len = max_position_embeddings, so base = theta */
        default_inv_freq((float)theta, rotary_dim, inv);
        if (!strcmp(canon, "linear")) {
            const float f = (float)sc.factor;
            for (int64_t i = 0; i < rotary_dim / 2; i++)
                inv[i] = inv[i] / f;
        } else if (!strcmp(canon, "llama3")) {
            llama3_inv_freq(&sc, rotary_dim, inv);
        }
    }
    rope->rotary_dim = rotary_dim;
    rope->theta = theta;
    rope->scaling = sc;
    rope->max_position_embeddings = max_position_embeddings;
    rope->attention_scaling = (float)att;
    rope->interleaved = false; /* rotate_half, transformers' default: the caller opts in */
    rope->inv_freq = inv;
    rope->inv_freq_long = inv_long;
    rope->factors = factors;
    return LH_OK;
}

LH_EXPORT void lh_k_rope_free(lh_rope *rope)
{
    if (!rope)
        return;
    free(rope->inv_freq);
    free(rope->inv_freq_long);
    free(rope->factors);
    rope->inv_freq = rope->inv_freq_long = NULL;
    rope->factors = NULL;
    rope->scaling.short_factor = rope->scaling.long_factor = NULL;
    rope->scaling.n_factors = 0;
}

/* ---- apply ------------------------------------------------------------------------------ */

bool lh_cpu_rope_is_dynamic(const lh_rope *rope, int64_t seq_len)
{
    return !strcmp(rope->scaling.kind ? rope->scaling.kind : "default", "dynamic") &&
           seq_len > rope->max_position_embeddings;
}

const float *lh_cpu_rope_inv(const lh_rope *rope, int64_t seq_len, float *buf)
{
    /* longrope: HF's longrope_frequency_update (seq_len > original: the long factors) */
    if (rope->inv_freq_long)
        return seq_len > longrope_original(&rope->scaling, rope->max_position_embeddings)
                   ? rope->inv_freq_long
                   : rope->inv_freq;
    if (!lh_cpu_rope_is_dynamic(rope, seq_len))
        return rope->inv_freq;
    lh_cpu_rope_dynamic_inv_freq(rope, seq_len, buf);
    return buf;
}

void lh_cpu_rope_cos_sin(const lh_rope *rope, const float *inv, int32_t pos, float *c, float *s)
{
    const int64_t half = rope->rotary_dim / 2;
    const float p = (float)pos, att = rope->attention_scaling;
    for (int64_t i = 0; i < half; i++) {
        const float f = p * inv[i];
        c[i] = (float)cos((double)f) * att;
        s[i] = (float)sin((double)f) * att;
    }
}

void lh_cpu_rope_heads(const lh_cpu_ops *ops, const lh_rope *rope, float *x, int64_t n_heads,
                       int64_t D, const float *c, const float *s)
{
    const int64_t half = rope->rotary_dim / 2;
    if (rope->interleaved) {
        for (int64_t h = 0; h < n_heads; h++)
            ops->rope_rot_pairs(x + h * D, c, s, half);
        return;
    }
    for (int64_t h = 0; h < n_heads; h++)
        ops->rope_rot(x + h * D, x + h * D + half, c, s, half);
}

struct rope_job {
    const lh_cpu_ops *ops;
    const lh_rope *rope;
    float *x;
    const int32_t *pos;
    const float *inv;
    int64_t H, D;
    float *scratch;
    size_t stride;
};

static void rope_token(int64_t t, int tid, void *user)
{
    const struct rope_job *j = user;
    float *c = j->scratch + (size_t)tid * j->stride, *s = c + j->rope->rotary_dim / 2;
    lh_cpu_rope_cos_sin(j->rope, j->inv, j->pos[t], c, s);
    lh_cpu_rope_heads(j->ops, j->rope, j->x + t * j->H * j->D, j->H, j->D, c, s);
}

lh_status lh_cpu_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x, const int32_t *positions,
                            int64_t seq_len)
{
    const int64_t T = x->shape[0];
    if (T == 0 || x->shape[1] == 0)
        return LH_OK;
    const int64_t half = rope->rotary_dim / 2;
    float *dyn = NULL;
    if (lh_cpu_rope_is_dynamic(rope, seq_len)) {
        dyn = malloc((size_t)half * sizeof(float));
        if (!dyn)
            return lh_kerr(ctx, LH_E_NOMEM, "lh_k_rope_apply: out of memory");
    }
    const float *inv = lh_cpu_rope_inv(rope, seq_len, dyn);
    float *scratch = lh_cpu_scratch(ctx, (size_t)(2 * half));
    if (!scratch) {
        free(dyn);
        return lh_kerr(ctx, LH_E_NOMEM, "lh_k_rope_apply: out of memory");
    }
    struct rope_job j = {ctx->ops, rope, x->data, positions, inv, x->shape[1], x->shape[2],
                         scratch, lh_cpu_scratch_stride(ctx)};
    lh_cpu_parallel(ctx, T, rope_token, &j);
    free(dyn);
    return LH_OK;
}
