/* Multi-head latent attention (MLA, DeepSeek-V2/V3) in the attention backends, driven through
 * their ops over a host KV cache manager (host/runtime/kv_cache.h, a latent pool: one latent
 * [rope key | compressed KV] per token, the pool's v aliasing its k): "paged" (its sources
 * compiled in; the absorbed form) against a double-precision reference computed here, and
 * against "vanilla" (the oracle, the built-in plugin looked up through the host's registry;
 * it expands each latent through kv_b into per-head keys and values).
 *
 * The reference (check_seq): the latent each sequence's positions hold in the pool, read back
 * through its block table and decoded (f32 / bf16 / f16 / fp8 e4m3 x the block's scale, as
 * the kernels decode it), expanded in double through kv_b (decoded exactly from its f32 /
 * bf16 / f16 storage): per head k = [W_UK c | k_rope] and v = W_UV c, the query's rope dims
 * rotated in double (angle float(pos) * inv_freq[i] in float32, as transformers and the
 * kernels compute it, then cos / sin and the products in double; rotate_half or interleaved
 * pairs), scores q.k * scale (soft-capped when asked), causal / sliding-window / chunked
 * masks, softmax, sum of P v, all in double.
 * Separately, the pool itself: its compressed part equals the latent given (f32: exactly;
 * bf16 within 2^-8 |x|, f16 2^-11 |x|, fp8 2^-4 |x| + 2^-9 scale, the kernels' documented
 * rounding), its rope part the given rope key rotated at its position (f32 within
 * 2^-21 (|x_i| + |x_j|) of the double rotation: float products without FMA), for every cached
 * position at every check, so later writes and other sequences never clobber earlier tokens.
 *
 * Tolerances (out: [T, H, v_head_dim] f32; vmax: the largest |expanded value| of the
 * sequence):
 *   paged vs reference    |out - ref| <= TOL_REF * vmax + TOL_ABS, TOL_REF 1e-5. Paged
 *                         computes everything in f32: the absorbed query W_UK^T q_nope (sums
 *                         of nope products), its dot products with the latent (lora + rope
 *                         terms), the f32 softmax and the latent-weighted sum, then W_UV; the
 *                         same products as the expanded form summed in another order, each
 *                         sum off by a few ulps of its absolute sum. With the data below
 *                         (scores of standard deviation ~2, |v| ~ 1) that is ~1e-6 x vmax;
 *                         because the reference runs on the pool's own decoded values, the
 *                         same bound holds for bf16 and fp8 pools (the quantization error is
 *                         not part of what is compared).
 *   vanilla vs reference  the same bound (f32 pools only: vanilla caches f32 and refuses
 *                         other KV dtypes, so for f32 pools it sees exactly the pool's values;
 *                         its rotation of the rope key is bit for bit the fused one).
 *   paged vs vanilla      |out_p - out_v| <= TOL_REF * vmax + TOL_ABS as well (both within
 *                         it of the reference).
 *   the pool              the quantization bounds above, exact for f32 latents; the rope key
 *                         within 2^-21 (|x_i| + |x_j|) x attention_scaling of the double
 *                         rotation (f32: a few roundings of products of that size).
 * The worst errors are printed per test. Measured (x86-64, AVX2/AVX-512 kernels): paged vs
 * reference 3.4e-7 (small geometry) and 5.0e-7 (DeepSeek-sized) x vmax, vanilla vs reference
 * 5.4e-7, paged vs vanilla 5.5e-7, all 20x inside TOL_REF; pool errors up to 0.996 of their
 * (exact rounding) bounds, f32 rope keys 1.2e-7 (|x_i| + |x_j|) (bound 4.8e-7). The test's
 * sensitivity was checked by mutating a copy of paged.c: no rotation, scale x 1.001, a
 * dropped soft-cap or window, or a query offset by one dim each fail it. Run time 5-10 s on
 * 2 cores (-O2), ~11 s under ASan + UBSan.
 *
 * Two tests guard bugs this suite found and that are fixed: "sliding window over MLA"
 * (vanilla's MLA path attended to the whole context) and "kv_b of another shape" (neither
 * backend checked kv_b's shape, so a smaller one was read out of bounds).
 *
 * Cases: scripted multi-step runs (two prefills; then a decode, a chunked prefill continuing a
 * sequence and a new prefill in one step; a step with a multi-token continuation next to
 * decodes; 190 decode steps, one sequence past 256 tokens where the kernel splits decode
 * contexts; a slot released and reused by a new sequence next to a decode and an idle
 * sequence (n_new 0); a new sequence in a fourth slot; all blocks free at the end), for block sizes 1, 16, 64 x layouts NHD, HND x KV dtypes f32, bf16, fp8 e4m3
 * x kv_b f32, bf16 x RoPE rotate_half and interleaved, geometry H 4, nope 16, rope 8, lora 32,
 * v 24; a DeepSeek-sized one (H 16, nope 128, rope 64, lora 512, v 128, short contexts) in
 * four settings (one with yarn scaling, attention_scaling != 1); extras: no RoPE table, no
 * rope dims at all (qk_rope_head_dim 0), an f16 pool and f16 kv_b, 1 thread, soft-capping,
 * chunked attention (paged only: vanilla has no chunked mode), sliding window (its own test:
 * vanilla's MLA path must honour it too). Errors: forwards without kv_b, without or with a
 * too-small workspace, from a host whose forward args predate kv_b, wrong or NULL q / kv_c /
 * k_rope / out (LH_E_USAGE with the message, err NULL too; nothing written to the pool; the
 * same step then runs and is right; paged's forward repeated for one step is bit for bit the
 * same), an empty step, kv_b of another shape or dtype, and create-time refusals (mixed-precision KV with MLA:
 * LH_E_UNSUPPORTED naming multi-head latent attention; an inconsistent MLA geometry;
 * lh_kv_plan_compute of a latent pool with another v_dtype). */
#include "api/attn_select.h"
#include "api/host_internal.h"
#include "lh_kernels.h"
#include "lh_plugin.h"
#include "llmhost.h"
#include "paged.h"
#include "rt_host.h"
#include "runner.h"
#include "runtime/kv_cache.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_REF 1e-5
#define TOL_ABS 1e-7
#define MAX_SEQS 4
#define MAX_LEN 320

static lh_host *host;
static const lh_attn_ops *vanilla_ops; /* the built-in plugin's, through the registry */

/* ---- data ------------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

typedef struct mla_dims {
    const char *name;
    int64_t H, nope, rope, lora, vd;
} mla_dims;

static const mla_dims small_dims = {"H 4, nope 16, rope 8, lora 32, v 24", 4, 16, 8, 32, 24};
static const mla_dims wide_dims = {"H 16, nope 128, rope 64, lora 512, v 128", 16, 128, 64,
                                   512, 128};

enum { ROPE_NONE, ROPE_HALF, ROPE_INTERLEAVED, ROPE_YARN_INTERLEAVED };

typedef struct mk_config {
    int64_t block_size;
    lh_kv_layout layout;
    lh_dtype kv_dtype;
    lh_dtype w_dtype; /* kv_b */
    int rope;         /* ROPE_* */
    int64_t window, chunk;
    float softcap;
    int threads;
    bool vanilla; /* also run vanilla (f32 pools) */
} mk_config;

static const mk_config mk_default = {.block_size = 16, .layout = LH_KV_NHD,
                                     .kv_dtype = LH_DTYPE_F32, .w_dtype = LH_DTYPE_F32,
                                     .rope = ROPE_HALF, .threads = 2, .vanilla = true};

/* What the test knows of one slot: the latents it was given and, for the reference, the
 * pool's latents it expanded last time (re-expanded only where the pool changed). */
typedef struct slot_hist {
    float *c, *kr;   /* [MAX_LEN, lora], [MAX_LEN, rope]: as given */
    float *lat;      /* [MAX_LEN, W]: the pool's values at the last expansion */
    double *kx, *vx; /* [MAX_LEN, H, nope], [MAX_LEN, H, vd] */
    int64_t n_exp;   /* positions of lat / kx / vx that are valid */
} slot_hist;

typedef struct mk {
    mla_dims d;
    mk_config cfg;
    lh_attn_geometry g;
    lh_kctx *kctx;
    lh_kv_cache *cache;
    lh_attn_layer *paged, *van;
    lh_rope rope;
    bool has_rope;
    void *w;     /* kv_b storage, w_dtype */
    double *wd;  /* kv_b decoded */
    lh_tensor kv_b;
    int64_t len[MAX_SEQS];
    slot_hist hist[MAX_SEQS];
    bool check;
    double worst_ref, worst_van_ref, worst_pv, worst_pool;
    double worst_rot; /* f32 pools: |stored rope key - double rotation| / (|x_i| + |x_j|) */
    long bad, bad_van, bad_pool;
} mk;

static double decode_w(lh_dtype dt, const void *w, int64_t i)
{
    switch (dt) {
    case LH_DTYPE_F32: return ((const float *)w)[i];
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)w)[i]);
    default: return lh_k_f16_to_f32(((const uint16_t *)w)[i]);
    }
}

static const char *dt_str(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_F16: return "f16";
    default: return "fp8";
    }
}

static const char *rope_str(int r)
{
    static const char *const names[] = {"no RoPE", "rotate_half", "interleaved",
                                        "yarn interleaved"};
    return names[r];
}

static lh_attn_geometry mla_geometry(const mla_dims *d, const mk_config *c)
{
    const int64_t D = d->nope + d->rope;
    return (lh_attn_geometry){
        .struct_size = sizeof(lh_attn_geometry), .layer_index = 5, .num_heads = d->H,
        .num_kv_heads = d->H, .head_dim = D, .sliding_window = c->window,
        .scale = (float)(3.0 / sqrt((double)D)), .max_seq_len = MAX_LEN, .max_seqs = MAX_SEQS,
        .attention_chunk_size = c->chunk, .kv_block_size = c->block_size,
        .kv_dtype = c->kv_dtype, .kv_layout = (int32_t)c->layout, .kv_v_dtype = c->kv_dtype,
        .mla = true, .has_q_lora_rank = true, .q_lora_rank = 48, .kv_lora_rank = d->lora,
        .qk_nope_head_dim = d->nope, .qk_rope_head_dim = d->rope, .v_head_dim = d->vd,
        .logit_softcap = c->softcap};
}

static bool mk_open(mk *m, const mla_dims *d, const mk_config *cfg)
{
    memset(m, 0, sizeof *m);
    m->d = *d;
    m->cfg = *cfg;
    m->check = true;
    m->g = mla_geometry(d, cfg);
    const int64_t W = d->rope + d->lora;
    m->kctx = lh_k_ctx_create(cfg->threads, (lh_device){LH_DEVICE_CPU, 0});
    if (!m->kctx)
        return false;
    const lh_kv_cache_config kc = {.block_size = cfg->block_size, .k_dtype = cfg->kv_dtype,
                                   .layout = (int)cfg->layout};
    lh_kv_plan plan;
    lh_err err = {0};
    lh_status st = lh_kv_plan_compute(&kc, 1, 1, W, false, true, MAX_LEN, MAX_SEQS, NULL, &plan,
                                      &err);
    if (st == LH_OK)
        st = lh_kv_cache_create(&plan, m->kctx, &m->cache, &err);
    if (st != LH_OK) {
        printf("\n    KV cache: %s", err.msg);
        return false;
    }
    lh_error cerr = {0};
    if (paged_ops.create(&m->g, &m->paged, &cerr) != LH_OK) {
        printf("\n    paged create: %s", cerr.msg);
        return false;
    }
    if (cfg->vanilla) {
        lh_attn_geometry vg = m->g;
        vg.kv_dtype = vg.kv_v_dtype = LH_DTYPE_F32;
        if (vanilla_ops->create(&vg, &m->van, &cerr) != LH_OK) {
            printf("\n    vanilla create: %s", cerr.msg);
            return false;
        }
    }
    if (cfg->rope != ROPE_NONE && d->rope > 0) {
        lh_rope_scaling yarn = {.kind = "yarn", .factor = 40, .original_max_position_embeddings =
                                4096, .beta_fast = 32, .beta_slow = 1, .mscale = 1.0,
                                .mscale_all_dim = 0};
        lh_rope_scaling plain = {.kind = "default"};
        st = lh_k_rope_init(&m->rope, d->rope, 10000.0,
                            cfg->rope == ROPE_YARN_INTERLEAVED ? &yarn : &plain,
                            cfg->rope == ROPE_YARN_INTERLEAVED ? 163840 : 4096);
        if (st != LH_OK) {
            printf("\n    rope: %s", lh_k_last_error(NULL));
            return false;
        }
        m->rope.interleaved = cfg->rope != ROPE_HALF;
        m->has_rope = true;
    }
    /* kv_b ~ U(-1, 1) sqrt(3 / lora): expanded keys and values of variance 1/3, like the
     * latent's rope dims */
    const int64_t rows = d->H * (d->nope + d->vd), n = rows * d->lora;
    const size_t esz = cfg->w_dtype == LH_DTYPE_F32 ? 4 : 2;
    m->w = malloc((size_t)n * esz);
    m->wd = malloc((size_t)n * sizeof *m->wd);
    const double ws = sqrt(3.0 / (double)d->lora);
    for (int64_t i = 0; i < n; i++) {
        const float x = (float)(urand() * ws);
        if (cfg->w_dtype == LH_DTYPE_F32)
            ((float *)m->w)[i] = x;
        else if (cfg->w_dtype == LH_DTYPE_BF16)
            ((uint16_t *)m->w)[i] = lh_k_f32_to_bf16(x);
        else
            ((uint16_t *)m->w)[i] = lh_k_f32_to_f16(x);
        m->wd[i] = decode_w(cfg->w_dtype, m->w, i);
    }
    int64_t wshape[2] = {rows, d->lora};
    m->kv_b = lh_tensor_cpu(cfg->w_dtype, m->w, 2, wshape);
    for (int s = 0; s < MAX_SEQS; s++) {
        slot_hist *h = &m->hist[s];
        h->c = malloc((size_t)(MAX_LEN * d->lora) * sizeof(float));
        h->kr = malloc((size_t)(MAX_LEN * d->rope + 1) * sizeof(float));
        h->lat = malloc((size_t)(MAX_LEN * W) * sizeof(float));
        h->kx = malloc((size_t)(MAX_LEN * d->H * d->nope) * sizeof(double));
        h->vx = malloc((size_t)(MAX_LEN * d->H * d->vd) * sizeof(double));
    }
    return true;
}

static void mk_close(mk *m)
{
    paged_ops.destroy(m->paged);
    if (m->van)
        vanilla_ops->destroy(m->van);
    lh_kv_cache_free(m->cache);
    lh_k_ctx_free(m->kctx);
    if (m->has_rope)
        lh_k_rope_free(&m->rope);
    free(m->w);
    free(m->wd);
    for (int s = 0; s < MAX_SEQS; s++) {
        free(m->hist[s].c);
        free(m->hist[s].kr);
        free(m->hist[s].lat);
        free(m->hist[s].kx);
        free(m->hist[s].vx);
    }
}

/* ---- the reference --------------------------------------------------------------------- */

/* Element d of the latent the pool holds for a sequence's position pos (kv_heads 1), and the
 * fp8 scale of its block (0 for other dtypes). */
static float pool_get(const mk *m, const int32_t *table, const lh_kv_pages *kv, int64_t pos,
                      int64_t d, float *scale)
{
    const int64_t bs = m->cfg.block_size, W = m->d.rope + m->d.lora;
    const int64_t phys = table[pos / bs], off = pos % bs;
    /* NHD [block][token][head][dim] and HND [block][head][token][dim] agree for one head */
    const int64_t idx = (phys * bs + off) * W + d;
    *scale = 0;
    switch (m->cfg.kv_dtype) {
    case LH_DTYPE_F32: return ((const float *)kv->k.data)[idx];
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)kv->k.data)[idx]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)kv->k.data)[idx]);
    default:
        *scale = ((const float *)kv->k_scale.data)[phys];
        return lh_k_fp8_e4m3_to_f32(((const uint8_t *)kv->k.data)[idx]) * *scale;
    }
}

/* x [rope] rotated at pos in double (angles as float(pos) * inv_freq in float32) */
static void rotate_ref(const mk *m, const double *x, double *y, int32_t pos)
{
    const int64_t R = m->d.rope;
    if (!m->has_rope) {
        memcpy(y, x, (size_t)R * sizeof *y);
        return;
    }
    const int64_t half = m->rope.rotary_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        const float f = (float)pos * m->rope.inv_freq[i];
        const double c = cos((double)f) * m->rope.attention_scaling;
        const double s = sin((double)f) * m->rope.attention_scaling;
        const int64_t a = m->rope.interleaved ? 2 * i : i;
        const int64_t b = m->rope.interleaved ? 2 * i + 1 : i + half;
        y[a] = x[a] * c - x[b] * s;
        y[b] = x[b] * c + x[a] * s;
    }
}

static bool visible(const mk *m, int64_t p, int64_t qp)
{
    const int64_t w = m->cfg.window, c = m->cfg.chunk;
    return p <= qp && !(w > 0 && qp - p >= w) && !(c > 0 && p / c != qp / c);
}

/* Quantization bound of the pool's dtype for a value x (exact value; e: error of the f32
 * value that was stored), per the kernels' contract. */
static double pool_tol(const mk *m, double x, double e, float scale)
{
    const double ax = fabs(x) + e;
    switch (m->cfg.kv_dtype) {
    case LH_DTYPE_F32: return e;
    case LH_DTYPE_BF16: return ldexp(ax, -8) + e;
    case LH_DTYPE_F16: return ldexp(ax, -11) + ldexp(1.0, -25) + e;
    default: return ldexp(ax, -4) + ldexp((double)scale, -9) * 1.0001 + e + 1e-7 * scale;
    }
}

/* Checks out [n, H, vd] (paged) and, when given, van [n, H, vd] of the sequence in `slot`
 * (its n new tokens q0 [n, H, D] at pos) against the reference on the pool's latents. */
static void check_seq(mk *m, int64_t slot, const float *q0, const int32_t *pos, int64_t n,
                      const float *out, const float *van, const char *what)
{
    const int64_t H = m->d.H, nope = m->d.nope, R = m->d.rope, L = m->d.lora, vd = m->d.vd;
    const int64_t D = nope + R, W = R + L, S = m->len[slot], rows = nope + vd;
    slot_hist *hs = &m->hist[slot];
    int64_t n_table;
    const int32_t *table = lh_kv_cache_table(m->cache, slot, &n_table);
    const lh_kv_pages *kv = lh_kv_cache_layer(m->cache, 0);
    CU_ASSERT_FATAL(table != NULL && n_table * m->cfg.block_size >= S);
    long bad_pool = 0, bad = 0, bad_van = 0;
    double *xr = malloc((size_t)(R + 1) * sizeof(double)), *yr = malloc((size_t)(R + 1) * sizeof(double));
    float *lat = malloc((size_t)W * sizeof(float));
    /* the pool, position by position: what it holds vs what was given; re-expanded where it
     * changed since the last check (fp8 blocks re-encode when their scale grows) */
    for (int64_t p = 0; p < S; p++) {
        float scale = 0;
        for (int64_t i = 0; i < W; i++)
            lat[i] = pool_get(m, table, kv, p, i, &scale);
        for (int64_t i = 0; i < R; i++)
            xr[i] = hs->kr[p * R + i];
        rotate_ref(m, xr, yr, (int32_t)p);
        const int64_t half = m->has_rope ? R / 2 : 0;
        for (int64_t i = 0; i < W; i++) {
            double want, e = 0;
            if (i < R) {
                want = yr[i];
                if (m->has_rope) { /* the pair partner's magnitude enters the float products */
                    const int64_t j = m->rope.interleaved ? (i ^ 1) : (i < half ? i + half : i - half);
                    e = ldexp(fabs(xr[i]) + fabs(xr[j]), -21) * m->rope.attention_scaling;
                }
            } else {
                want = hs->c[p * L + i - R];
            }
            const double err = fabs((double)lat[i] - want), bound = pool_tol(m, want, e, scale);
            if (!(err <= bound))
                bad_pool++;
            if (bound > 0)
                m->worst_pool = fmax(m->worst_pool, err / bound);
            if (e > 0 && m->cfg.kv_dtype == LH_DTYPE_F32)
                m->worst_rot = fmax(m->worst_rot, err / ldexp(e, 21));
        }
        if (p < hs->n_exp && memcmp(lat, hs->lat + p * W, (size_t)W * sizeof(float)) == 0)
            continue;
        memcpy(hs->lat + p * W, lat, (size_t)W * sizeof(float));
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < rows; j++) {
                const double *wr = m->wd + (h * rows + j) * L;
                double acc = 0;
                for (int64_t l = 0; l < L; l++)
                    acc += wr[l] * (double)lat[R + l];
                if (j < nope)
                    hs->kx[(p * H + h) * nope + j] = acc;
                else
                    hs->vx[(p * H + h) * vd + j - nope] = acc;
            }
    }
    hs->n_exp = S;
    double vmax = 0;
    for (int64_t i = 0; i < S * H * vd; i++)
        vmax = fmax(vmax, fabs(hs->vx[i]));
    const double tol = TOL_REF * vmax + TOL_ABS;
    double *sc = malloc((size_t)S * sizeof(double));
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *qh = q0 + (t * H + h) * D;
            for (int64_t i = 0; i < R; i++)
                xr[i] = qh[nope + i];
            rotate_ref(m, xr, yr, pos[t]);
            double mx = -INFINITY, sum = 0;
            for (int64_t p = 0; p < S; p++) {
                sc[p] = -INFINITY;
                if (!visible(m, p, pos[t]))
                    continue;
                double s = 0;
                for (int64_t j = 0; j < nope; j++)
                    s += (double)qh[j] * hs->kx[(p * H + h) * nope + j];
                for (int64_t i = 0; i < R; i++)
                    s += yr[i] * (double)hs->lat[p * W + i];
                s *= (double)m->g.scale;
                if (m->g.logit_softcap > 0)
                    s = tanh(s / m->g.logit_softcap) * m->g.logit_softcap;
                sc[p] = s;
                mx = fmax(mx, s);
            }
            for (int64_t p = 0; p < S; p++)
                if (sc[p] != -INFINITY)
                    sum += exp(sc[p] - mx);
            for (int64_t e = 0; e < vd; e++) {
                double o = 0;
                for (int64_t p = 0; p < S; p++)
                    if (sc[p] != -INFINITY)
                        o += exp(sc[p] - mx) / sum * hs->vx[(p * H + h) * vd + e];
                const int64_t i = (t * H + h) * vd + e;
                const double err = fabs((double)out[i] - o);
                if (!(err <= tol))
                    bad++;
                m->worst_ref = fmax(m->worst_ref, err / vmax);
                if (van) {
                    const double ev = fabs((double)van[i] - o), epv = fabs((double)out[i] - van[i]);
                    if (!(ev <= tol) || !(epv <= tol))
                        bad_van++;
                    m->worst_van_ref = fmax(m->worst_van_ref, ev / vmax);
                    m->worst_pv = fmax(m->worst_pv, epv / vmax);
                }
            }
        }
    if (bad_pool)
        printf("\n    FAIL %s: slot %lld (%lld tokens): %ld pool values differ from the latent "
               "given", what, (long long)slot, (long long)S, bad_pool);
    if (bad)
        printf("\n    FAIL %s: slot %lld, %lld tokens over %lld: %ld paged values out of "
               "tolerance", what, (long long)slot, (long long)n, (long long)S, bad);
    if (bad_van)
        printf("\n    FAIL %s: slot %lld, %lld tokens over %lld: %ld vanilla values off the "
               "reference or paged", what, (long long)slot, (long long)n, (long long)S, bad_van);
    m->bad += bad;
    m->bad_van += bad_van;
    m->bad_pool += bad_pool;
    free(sc);
    free(xr);
    free(yr);
    free(lat);
}

/* ---- steps ----------------------------------------------------------------------------- */

typedef struct mk_io {
    int64_t T, n_seqs;
    int64_t start[MAX_SEQS], nn[MAX_SEQS], ctx[MAX_SEQS], slot[MAX_SEQS], n_tab[MAX_SEQS];
    const int32_t *tabs[MAX_SEQS];
    int32_t *pos;
    float *q, *c, *kr;          /* inputs as generated (never handed to a backend) */
    float *qw, *cw, *krw, *out; /* working copies, paged's output */
    float *vout;                /* vanilla's output */
    void *ws;
    size_t ws_bytes;
    lh_attn_step st;
} mk_io;

static void io_free(mk_io *io)
{
    free(io->pos);
    free(io->q);
    free(io->c);
    free(io->kr);
    free(io->qw);
    free(io->cw);
    free(io->krw);
    free(io->out);
    free(io->vout);
    free(io->ws);
}

/* Builds a step of seqs[i] = {slot, n_new} with random inputs and reserves its blocks. */
static lh_status io_build(mk *m, mk_io *io, const int64_t (*seqs)[2], int64_t n_seqs, char *msg,
                          size_t msg_size)
{
    memset(io, 0, sizeof *io);
    const int64_t H = m->d.H, D = m->d.nope + m->d.rope, L = m->d.lora, R = m->d.rope;
    io->n_seqs = n_seqs;
    for (int64_t i = 0; i < n_seqs; i++) {
        io->slot[i] = seqs[i][0];
        io->nn[i] = seqs[i][1];
        io->ctx[i] = m->len[io->slot[i]];
        io->start[i] = io->T;
        io->T += io->nn[i];
    }
    const int64_t T = io->T;
    io->pos = malloc((size_t)(T + 1) * sizeof *io->pos);
    io->q = malloc((size_t)(T * H * D + 1) * sizeof(float));
    io->qw = malloc((size_t)(T * H * D + 1) * sizeof(float));
    io->c = malloc((size_t)(T * L + 1) * sizeof(float));
    io->cw = malloc((size_t)(T * L + 1) * sizeof(float));
    io->kr = malloc((size_t)(T * R + 1) * sizeof(float));
    io->krw = malloc((size_t)(T * R + 1) * sizeof(float));
    io->out = malloc((size_t)(T * H * m->d.vd + 1) * sizeof(float));
    io->vout = malloc((size_t)(T * H * m->d.vd + 1) * sizeof(float));
    for (int64_t i = 0; i < n_seqs; i++)
        for (int64_t t = 0; t < io->nn[i]; t++)
            io->pos[io->start[i] + t] = (int32_t)(io->ctx[i] + t);
    for (int64_t i = 0; i < T * H * D; i++)
        io->q[i] = (float)(2.0 * urand());
    for (int64_t i = 0; i < T * L; i++)
        io->c[i] = (float)urand();
    for (int64_t i = 0; i < T * R; i++)
        io->kr[i] = (float)urand();
    /* exactly the bytes the contract asks for: ASan sees any overrun */
    io->ws_bytes = lh_attn_mla_workspace_bytes(&m->g, T);
    if (T > 0 && posix_memalign(&io->ws, 256, io->ws_bytes) != 0)
        io->ws = NULL;
    int64_t after[MAX_SEQS];
    for (int64_t i = 0; i < n_seqs; i++)
        after[i] = io->ctx[i] + io->nn[i];
    lh_err err = {0};
    lh_status rc = lh_kv_cache_reserve(m->cache, io->slot, after, n_seqs, &err);
    if (rc != LH_OK)
        snprintf(msg, msg_size, "%.480s", err.msg);
    for (int64_t i = 0; rc == LH_OK && i < n_seqs; i++)
        io->tabs[i] = lh_kv_cache_table(m->cache, io->slot[i], &io->n_tab[i]);
    io->st = (lh_attn_step){.struct_size = sizeof io->st, .n_tokens = T, .n_seqs = n_seqs,
                            .positions = io->pos, .token_start = io->start, .n_new = io->nn,
                            .ctx_len = io->ctx, .slot = io->slot, .block_tables = io->tabs,
                            .n_blocks = io->n_tab};
    return rc;
}

static lh_attn_forward_args io_args(const mk *m, const mk_io *io)
{
    return (lh_attn_forward_args){.struct_size = sizeof(lh_attn_forward_args),
                                  .kv = lh_kv_cache_layer(m->cache, 0),
                                  .rope = m->has_rope ? &m->rope : NULL, .kv_b = &m->kv_b,
                                  .workspace = io->ws, .workspace_bytes = io->ws_bytes};
}

/* One forward of `ops` on `layer` with fresh copies of the inputs into out. */
static lh_status io_forward(const mk *m, mk_io *io, const lh_attn_ops *ops, lh_attn_layer *layer,
                            const lh_attn_forward_args *args, float *out, lh_error *err)
{
    const int64_t T = io->T, H = m->d.H, D = m->d.nope + m->d.rope;
    memcpy(io->qw, io->q, (size_t)(T * H * D) * sizeof(float));
    memcpy(io->cw, io->c, (size_t)(T * m->d.lora) * sizeof(float));
    memcpy(io->krw, io->kr, (size_t)(T * m->d.rope) * sizeof(float));
    int64_t qs[3] = {T, H, D}, cs[3] = {T, 1, m->d.lora}, rs[3] = {T, 1, m->d.rope};
    int64_t os[3] = {T, H, m->d.vd};
    lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, io->qw, 3, qs);
    lh_tensor tc = lh_tensor_cpu(LH_DTYPE_F32, io->cw, 3, cs);
    lh_tensor tr = lh_tensor_cpu(LH_DTYPE_F32, io->krw, 3, rs);
    lh_tensor to = lh_tensor_cpu(LH_DTYPE_F32, out, 3, os);
    lh_status rc = ops->prepare ? ops->prepare(layer, &io->st, err) : LH_OK;
    if (rc == LH_OK)
        rc = ops->forward(layer, m->kctx, &io->st, args, &tq, &tc, &tr, &to, err);
    return rc;
}

/* One step through paged (and vanilla), then the checks. */
static lh_status mk_step(mk *m, const int64_t (*seqs)[2], int64_t n_seqs, const char *what,
                         char *msg, size_t msg_size)
{
    mk_io io;
    lh_status rc = io_build(m, &io, seqs, n_seqs, msg, msg_size);
    const lh_attn_forward_args args = io_args(m, &io);
    lh_error aerr = {0};
    if (rc == LH_OK)
        rc = io_forward(m, &io, &paged_ops, m->paged, &args, io.out, &aerr);
    if (rc == LH_OK && m->van)
        rc = io_forward(m, &io, vanilla_ops, m->van, &args, io.vout, &aerr);
    if (aerr.code != LH_OK)
        snprintf(msg, msg_size, "%.480s", aerr.msg);
    const int64_t H = m->d.H, D = m->d.nope + m->d.rope, L = m->d.lora, R = m->d.rope;
    for (int64_t i = 0; rc == LH_OK && i < n_seqs; i++) {
        slot_hist *h = &m->hist[io.slot[i]];
        memcpy(h->c + io.ctx[i] * L, io.c + io.start[i] * L, (size_t)(io.nn[i] * L) * sizeof(float));
        memcpy(h->kr + io.ctx[i] * R, io.kr + io.start[i] * R, (size_t)(io.nn[i] * R) * sizeof(float));
        m->len[io.slot[i]] += io.nn[i];
    }
    for (int64_t i = 0; rc == LH_OK && m->check && i < n_seqs; i++)
        if (io.nn[i] > 0)
            check_seq(m, io.slot[i], io.q + io.start[i] * H * D, io.pos + io.start[i], io.nn[i],
                      io.out + io.start[i] * H * m->d.vd,
                      m->van ? io.vout + io.start[i] * H * m->d.vd : NULL, what);
    io_free(&io);
    return rc;
}

static void mk_release(mk *m, int64_t slot)
{
    lh_kv_cache_release(m->cache, slot);
    if (m->van && vanilla_ops->release)
        vanilla_ops->release(m->van, slot);
    m->len[slot] = 0;
    m->hist[slot].n_exp = 0;
}

typedef struct worst {
    double ref, van_ref, pv, pool, rot;
    int runs, van_runs;
} worst;

static void worst_add(worst *w, const mk *m)
{
    w->ref = fmax(w->ref, m->worst_ref);
    w->van_ref = fmax(w->van_ref, m->worst_van_ref);
    w->pv = fmax(w->pv, m->worst_pv);
    w->pool = fmax(w->pool, m->worst_pool);
    w->rot = fmax(w->rot, m->worst_rot);
    w->runs++;
    w->van_runs += m->van != NULL;
}

static void worst_print(const worst *w)
{
    printf("\n    %d runs (%d with vanilla); worst / vmax: paged vs ref %.3g, vanilla vs ref %.3g, "
           "paged vs vanilla %.3g (tolerance %.0e); pool vs given: worst error / its bound %.3g, "
           "f32 rope key vs double rotation %.3g (|x_i| + |x_j|) (bound 2^-21 = 4.8e-7)",
           w->runs, w->van_runs, w->ref, w->van_ref, w->pv, TOL_REF, w->pool, w->rot);
}

/* The scripted run of the small geometry: prefill two; decode + chunked prefill + a new
 * prefill; a multi-token continuation next to decodes; 190 decodes (slot 2 past 256 tokens:
 * split decode contexts); slot 1 released and reused next to a decode; a fourth slot. */
static void run_script(mk *m, const char *what, int decodes)
{
    char msg[512] = "";
    const int64_t s1[][2] = {{0, 37}, {1, 5}};
    const int64_t s2[][2] = {{0, 1}, {1, 20}, {2, 70}};
    const int64_t s3[][2] = {{2, 3}, {0, 1}, {1, 1}};
    lh_status st;
    if ((st = mk_step(m, s1, 2, what, msg, sizeof msg)) != LH_OK ||
        (st = mk_step(m, s2, 3, what, msg, sizeof msg)) != LH_OK ||
        (st = mk_step(m, s3, 3, what, msg, sizeof msg)) != LH_OK) {
        printf("\n    %s: %s", what, msg);
        CU_FAIL("prefill steps");
        return;
    }
    for (int i = 0; i < decodes; i++) {
        const int64_t sd[][2] = {{0, 1}, {1, 1}, {2, 1}};
        m->check = i % 24 == 0 || i >= decodes - 2;
        if ((st = mk_step(m, sd, 3, what, msg, sizeof msg)) != LH_OK) {
            printf("\n    %s: %s", what, msg);
            CU_FAIL("decode step");
            return;
        }
    }
    m->check = true;
    mk_release(m, 1);
    const int64_t s4[][2] = {{1, 50}, {0, 0}, {2, 1}}; /* slot 0 idles: n_new 0 */
    const int64_t s5[][2] = {{1, 1}, {0, 1}, {3, 9}};
    if ((st = mk_step(m, s4, 3, what, msg, sizeof msg)) != LH_OK ||
        (st = mk_step(m, s5, 3, what, msg, sizeof msg)) != LH_OK) {
        printf("\n    %s: %s", what, msg);
        CU_FAIL("steps after a release");
        return;
    }
    for (int64_t s = 0; s < MAX_SEQS; s++)
        mk_release(m, s);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(m->cache), lh_kv_cache_plan(m->cache)->num_blocks);
}

/* The same script, short, for the DeepSeek-sized geometry. */
static void run_script_wide(mk *m, const char *what)
{
    char msg[512] = "";
    const int64_t w1[][2] = {{0, 19}, {1, 6}};
    const int64_t w2[][2] = {{0, 1}, {1, 11}, {2, 24}};
    const int64_t w3[][2] = {{2, 2}, {0, 1}, {1, 1}};
    const int64_t wd[][2] = {{0, 1}, {1, 1}, {2, 1}};
    const int64_t w4[][2] = {{1, 13}, {2, 1}};
    const int64_t w5[][2] = {{1, 1}, {0, 1}, {3, 5}};
    lh_status st = LH_OK;
    const int64_t (*steps[])[2] = {w1, w2, w3, wd, wd, wd, NULL, w4, w5};
    const int64_t ns[] = {2, 3, 3, 3, 3, 3, 0, 2, 3};
    for (size_t i = 0; i < sizeof ns / sizeof *ns && st == LH_OK; i++) {
        if (!steps[i]) {
            mk_release(m, 1);
            continue;
        }
        if ((st = mk_step(m, steps[i], ns[i], what, msg, sizeof msg)) != LH_OK) {
            printf("\n    %s: %s", what, msg);
            CU_FAIL("wide step");
        }
    }
    for (int64_t s = 0; s < MAX_SEQS; s++)
        mk_release(m, s);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(m->cache), lh_kv_cache_plan(m->cache)->num_blocks);
}

static void describe(const mla_dims *d, const mk_config *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s; KV %s, block %lld, %s, kv_b %s, %s%s%s%s, %d thread%s", d->name,
             dt_str(c->kv_dtype), (long long)c->block_size, c->layout == LH_KV_HND ? "HND" : "NHD",
             dt_str(c->w_dtype), rope_str(c->rope), c->window ? ", window" : "",
             c->chunk ? ", chunked" : "", c->softcap > 0 ? ", softcap" : "", c->threads,
             c->threads == 1 ? "" : "s");
}

static void expect_clean(const mk *m)
{
    CU_ASSERT_EQUAL(m->bad_pool, 0);
    CU_ASSERT_EQUAL(m->bad, 0);
    CU_ASSERT_EQUAL(m->bad_van, 0);
}

/* ---- tests ----------------------------------------------------------------------------- */

static void test_scripted_small(void)
{
    static const lh_dtype kvd[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_FP8_E4M3};
    static const lh_dtype wdt[2] = {LH_DTYPE_F32, LH_DTYPE_BF16};
    static const int64_t sizes[3] = {1, 16, 64};
    worst w = {0};
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 3; si++)
            for (int li = 0; li < 2; li++)
                for (int wi = 0; wi < 2; wi++)
                    for (int ri = 0; ri < 2; ri++) {
                        mk_config c = mk_default;
                        c.kv_dtype = kvd[di];
                        c.block_size = sizes[si];
                        c.layout = li ? LH_KV_HND : LH_KV_NHD;
                        c.w_dtype = wdt[wi];
                        c.rope = ri ? ROPE_INTERLEAVED : ROPE_HALF;
                        c.vanilla = kvd[di] == LH_DTYPE_F32;
                        char what[200];
                        describe(&small_dims, &c, what, sizeof what);
                        mk m;
                        CU_ASSERT_FATAL(mk_open(&m, &small_dims, &c));
                        run_script(&m, what, 190);
                        expect_clean(&m);
                        worst_add(&w, &m);
                        mk_close(&m);
                    }
    worst_print(&w);
}

static void test_scripted_wide(void)
{
    mk_config cs[4];
    for (int i = 0; i < 4; i++)
        cs[i] = mk_default;
    /* f32: both backends */
    cs[1].layout = LH_KV_HND, cs[1].block_size = 1, cs[1].w_dtype = LH_DTYPE_BF16,
    cs[1].rope = ROPE_YARN_INTERLEAVED;
    cs[2].kv_dtype = LH_DTYPE_BF16, cs[2].layout = LH_KV_HND, cs[2].block_size = 64,
    cs[2].w_dtype = LH_DTYPE_BF16, cs[2].rope = ROPE_INTERLEAVED, cs[2].vanilla = false;
    cs[3].kv_dtype = LH_DTYPE_FP8_E4M3, cs[3].block_size = 1, cs[3].w_dtype = LH_DTYPE_BF16,
    cs[3].rope = ROPE_INTERLEAVED, cs[3].vanilla = false;
    worst w = {0};
    for (int i = 0; i < 4; i++) {
        char what[200];
        describe(&wide_dims, &cs[i], what, sizeof what);
        mk m;
        CU_ASSERT_FATAL(mk_open(&m, &wide_dims, &cs[i]));
        if (i == 1)
            CU_ASSERT(fabs(m.rope.attention_scaling - 1.0f) > 0.1f); /* yarn scales cos, sin */
        run_script_wide(&m, what);
        expect_clean(&m);
        worst_add(&w, &m);
        mk_close(&m);
    }
    worst_print(&w);
}

/* No RoPE table, no rope dims, f16 pool and f16 kv_b, one thread, soft-capping, chunked. */
static void test_extras(void)
{
    static const mla_dims norope = {"H 2, nope 8, rope 0, lora 16, v 8", 2, 8, 0, 16, 8};
    struct {
        const mla_dims *d;
        mk_config c;
    } runs[6];
    for (int i = 0; i < 6; i++)
        runs[i].d = &small_dims, runs[i].c = mk_default;
    runs[0].c.rope = ROPE_NONE;
    runs[1].d = &norope, runs[1].c.rope = ROPE_NONE, runs[1].c.block_size = 1;
    runs[2].c.kv_dtype = LH_DTYPE_F16, runs[2].c.w_dtype = LH_DTYPE_F16, runs[2].c.vanilla = false,
    runs[2].c.layout = LH_KV_HND;
    runs[3].c.w_dtype = LH_DTYPE_F16, runs[3].c.threads = 1, runs[3].c.rope = ROPE_INTERLEAVED;
    runs[4].c.softcap = 0.7f, runs[4].c.kv_dtype = LH_DTYPE_FP8_E4M3, runs[4].c.vanilla = false;
    runs[5].c.chunk = 32, runs[5].c.vanilla = false, runs[5].c.block_size = 1; /* no chunked mode in vanilla */
    worst w = {0};
    for (int i = 0; i < 6; i++) {
        char what[200];
        describe(runs[i].d, &runs[i].c, what, sizeof what);
        mk m;
        CU_ASSERT_FATAL(mk_open(&m, runs[i].d, &runs[i].c));
        run_script(&m, what, 60);
        expect_clean(&m);
        worst_add(&w, &m);
        mk_close(&m);
    }
    /* soft-capping with vanilla too (f32) */
    mk_config c = mk_default;
    c.softcap = 0.7f;
    char what[200];
    describe(&small_dims, &c, what, sizeof what);
    mk m;
    CU_ASSERT_FATAL(mk_open(&m, &small_dims, &c));
    run_script(&m, what, 60);
    expect_clean(&m);
    worst_add(&w, &m);
    mk_close(&m);
    worst_print(&w);
}

/* Sliding window over MLA: the geometry passes create_attention for both built-in backends
 * (both declare sliding_window and mla), so both must honour it. */
static void test_sliding_window(void)
{
    mk_config c = mk_default;
    c.window = 24;
    char what[200];
    describe(&small_dims, &c, what, sizeof what);
    mk m;
    CU_ASSERT_FATAL(mk_open(&m, &small_dims, &c));
    run_script(&m, what, 40);
    printf("\n    paged vs ref %.3g (%ld bad), vanilla vs ref %.3g (%ld bad, vanilla's MLA path "
           "must apply the window)", m.worst_ref, m.bad, m.worst_van_ref, m.bad_van);
    expect_clean(&m);
    mk_close(&m);
}

/* ---- errors ---------------------------------------------------------------------------- */

static bool pool_untouched(const mk *m)
{
    const lh_kv_plan *p = lh_kv_cache_plan(m->cache);
    const lh_kv_pages *kv = lh_kv_cache_layer(m->cache, 0);
    const size_t bytes = (size_t)(p->block_size * p->head_dim) * lh_k_dtype_bits(p->k_dtype) / 8;
    int64_t n;
    const int32_t *t = lh_kv_cache_table(m->cache, 0, &n);
    const unsigned char *b = (const unsigned char *)kv->k.data + (size_t)t[0] * bytes;
    for (size_t i = 0; i < bytes; i++)
        if (b[i])
            return false;
    return true;
}

/* Runs both backends on io with args; expects `want` and, unless NULL, `sub` in the message. */
static void expect_refusal(const mk *m, mk_io *io, const lh_attn_forward_args *args,
                           lh_tensor *q, lh_tensor *c, const lh_tensor *r, lh_tensor *o,
                           lh_status want, const char *sub, const char *what)
{
    const lh_attn_ops *ops[2] = {&paged_ops, vanilla_ops};
    lh_attn_layer *layers[2] = {m->paged, m->van};
    for (int b = 0; b < 2; b++) {
        lh_error err = {0};
        CU_ASSERT_EQUAL_FATAL(ops[b]->prepare(layers[b], &io->st, &err), LH_OK);
        lh_status st = ops[b]->forward(layers[b], m->kctx, &io->st, args, q, c, r, o, &err);
        const bool ok = st == want && err.code == want && (!sub || strstr(err.msg, sub));
        if (!ok)
            printf("\n    FAIL %s (%s): status %d, \"%s\"", what, b ? "vanilla" : "paged",
                   (int)st, err.msg);
        CU_ASSERT(ok);
        /* err may be NULL */
        CU_ASSERT_EQUAL(ops[b]->forward(layers[b], m->kctx, &io->st, args, q, c, r, o, NULL),
                        want);
    }
}

static void test_forward_errors(void)
{
    mk m;
    CU_ASSERT_FATAL(mk_open(&m, &small_dims, &mk_default));
    char msg[512] = "";
    const int64_t seqs[][2] = {{0, 5}};
    mk_io io;
    CU_ASSERT_EQUAL_FATAL(io_build(&m, &io, seqs, 1, msg, sizeof msg), LH_OK);
    const int64_t T = io.T, H = m.d.H, D = m.d.nope + m.d.rope, L = m.d.lora, R = m.d.rope;
    const int64_t vd = m.d.vd;
    memcpy(io.qw, io.q, (size_t)(T * H * D) * sizeof(float));
    memcpy(io.cw, io.c, (size_t)(T * L) * sizeof(float));
    memcpy(io.krw, io.kr, (size_t)(T * R) * sizeof(float));
    /* buffers big enough for every wrong shape below */
    float *big = calloc((size_t)((T + 1) * (H + 1) * (D + L + vd + 2)), sizeof(float));
    int64_t qs[3] = {T, H, D}, cs[3] = {T, 1, L}, rs[3] = {T, 1, R}, os[3] = {T, H, vd};
    lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, io.qw, 3, qs);
    lh_tensor tc = lh_tensor_cpu(LH_DTYPE_F32, io.cw, 3, cs);
    lh_tensor tr = lh_tensor_cpu(LH_DTYPE_F32, io.krw, 3, rs);
    lh_tensor to = lh_tensor_cpu(LH_DTYPE_F32, io.out, 3, os);
    const lh_attn_forward_args good = io_args(&m, &io);
    char need[64];
    snprintf(need, sizeof need, "workspace of %zu bytes", io.ws_bytes);
    lh_attn_forward_args a = good;
    a.kv_b = NULL;
    expect_refusal(&m, &io, &a, &tq, &tc, &tr, &to, LH_E_USAGE, "an MLA forward needs kv_b",
                   "no kv_b");
    a = good;
    a.workspace = NULL;
    expect_refusal(&m, &io, &a, &tq, &tc, &tr, &to, LH_E_USAGE, need, "no workspace");
    a = good;
    a.workspace_bytes = io.ws_bytes - 1;
    expect_refusal(&m, &io, &a, &tq, &tc, &tr, &to, LH_E_USAGE, need, "workspace 1 byte short");
    a = good;
    a.struct_size = (uint32_t)offsetof(lh_attn_forward_args, kv_b); /* an ABI 3.2 host */
    expect_refusal(&m, &io, &a, &tq, &tc, &tr, &to, LH_E_USAGE, "needs kv_b", "old args");
    /* wrong shapes, one tensor at a time */
    const char *shape_msg = "MLA q, kv_c, k_rope and out must be [5, 4, 24], [5, 1, 32], "
                            "[5, 1, 8] and [5, 4, 24]";
    struct {
        const char *what;
        int which; /* 0 q, 1 kv_c, 2 k_rope, 3 out */
        int ndim;
        int64_t s0, s1, s2;
    } bad[] = {
        {"q head dim nope only", 0, 3, T, H, m.d.nope},
        {"q with one head too many", 0, 3, T, H + 1, D},
        {"q with a token too few", 0, 3, T - 1, H, D},
        {"q of 2 dims", 0, 2, T, H * D, 1},
        {"kv_c with the rope dims", 1, 3, T, 1, L + R},
        {"kv_c per head", 1, 3, T, H, L},
        {"k_rope one dim short", 2, 3, T, 1, R - 1},
        {"k_rope per head", 2, 3, T, H, R},
        {"out of qk head dim", 3, 3, T, H, D + 1},
        {"out of one head", 3, 3, T, 1, vd},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t s[3] = {bad[i].s0, bad[i].s1, bad[i].s2};
        lh_tensor x = lh_tensor_cpu(LH_DTYPE_F32, big, bad[i].ndim, s);
        lh_tensor *q = bad[i].which == 0 ? &x : &tq, *c = bad[i].which == 1 ? &x : &tc;
        const lh_tensor *r = bad[i].which == 2 ? &x : &tr;
        lh_tensor *o = bad[i].which == 3 ? &x : &to;
        expect_refusal(&m, &io, &good, q, c, r, o, LH_E_USAGE, shape_msg, bad[i].what);
    }
    /* NULL tensors */
    expect_refusal(&m, &io, &good, &tq, NULL, &tr, &to, LH_E_USAGE, shape_msg, "NULL kv_c");
    expect_refusal(&m, &io, &good, &tq, &tc, NULL, &to, LH_E_USAGE, shape_msg, "NULL k_rope");
    /* nothing reached the pool, and the same step then runs and is right */
    CU_ASSERT(pool_untouched(&m));
    lh_error err = {0};
    CU_ASSERT_EQUAL(io_forward(&m, &io, &paged_ops, m.paged, &good, io.out, &err), LH_OK);
    CU_ASSERT_EQUAL(io_forward(&m, &io, vanilla_ops, m.van, &good, io.vout, &err), LH_OK);
    memcpy(m.hist[0].c, io.c, (size_t)(T * L) * sizeof(float));
    memcpy(m.hist[0].kr, io.kr, (size_t)(T * R) * sizeof(float));
    m.len[0] = T;
    check_seq(&m, 0, io.q, io.pos, T, io.out, io.vout, "after the refusals");
    expect_clean(&m);
    /* paged's forward may run twice for one step (a CUDA graph's dry run, then the capture):
     * the second leaves the same output and the same pool, bit for bit */
    const lh_kv_plan *plan = lh_kv_cache_plan(m.cache);
    const size_t blk = (size_t)(plan->block_size * plan->head_dim) * lh_k_dtype_bits(plan->k_dtype) / 8;
    int64_t n_tab;
    const unsigned char *b0 = (const unsigned char *)lh_kv_cache_layer(m.cache, 0)->k.data +
                              (size_t)lh_kv_cache_table(m.cache, 0, &n_tab)[0] * blk;
    unsigned char *pool_before = malloc(blk);
    float *out_before = malloc((size_t)(T * H * vd) * sizeof(float));
    memcpy(pool_before, b0, blk);
    memcpy(out_before, io.out, (size_t)(T * H * vd) * sizeof(float));
    CU_ASSERT_EQUAL(io_forward(&m, &io, &paged_ops, m.paged, &good, io.out, &err), LH_OK);
    CU_ASSERT_EQUAL(memcmp(out_before, io.out, (size_t)(T * H * vd) * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(pool_before, b0, blk), 0);
    free(pool_before);
    free(out_before);
    io_free(&io);
    /* an empty step: nothing to do, no workspace needed */
    const int64_t none[][2] = {{0, 0}};
    CU_ASSERT_EQUAL(io_build(&m, &io, none, 1, msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(io.ws_bytes, 0);
    const lh_attn_forward_args empty = io_args(&m, &io);
    CU_ASSERT_EQUAL(io_forward(&m, &io, &paged_ops, m.paged, &empty, io.out, &err), LH_OK);
    CU_ASSERT_EQUAL(io_forward(&m, &io, vanilla_ops, m.van, &empty, io.vout, &err), LH_OK);
    io_free(&io);
    free(big);
    mk_close(&m);
}

/* kv_b must be [H * (nope + v), lora] f32 / bf16 / f16: the backends read it through views
 * sized by the geometry, so one of another shape (here transposed, same element count) or
 * dtype must be refused, never read. */
static void test_kv_b_checked(void)
{
    mk m;
    CU_ASSERT_FATAL(mk_open(&m, &small_dims, &mk_default));
    char msg[512] = "";
    const int64_t seqs[][2] = {{0, 3}};
    mk_io io;
    CU_ASSERT_EQUAL_FATAL(io_build(&m, &io, seqs, 1, msg, sizeof msg), LH_OK);
    const int64_t T = io.T, H = m.d.H, D = m.d.nope + m.d.rope, L = m.d.lora, R = m.d.rope;
    const int64_t rows = H * (m.d.nope + m.d.vd);
    int64_t qs[3] = {T, H, D}, cs[3] = {T, 1, L}, rs[3] = {T, 1, R}, os[3] = {T, H, m.d.vd};
    memcpy(io.qw, io.q, (size_t)(T * H * D) * sizeof(float));
    memcpy(io.cw, io.c, (size_t)(T * L) * sizeof(float));
    memcpy(io.krw, io.kr, (size_t)(T * R) * sizeof(float));
    lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, io.qw, 3, qs);
    lh_tensor tc = lh_tensor_cpu(LH_DTYPE_F32, io.cw, 3, cs);
    lh_tensor tr = lh_tensor_cpu(LH_DTYPE_F32, io.krw, 3, rs);
    lh_tensor to = lh_tensor_cpu(LH_DTYPE_F32, io.out, 3, os);
    int64_t tshape[2] = {L, rows}, flat[1] = {rows * L};
    lh_tensor wt = lh_tensor_cpu(LH_DTYPE_F32, m.w, 2, tshape);
    lh_tensor w1 = lh_tensor_cpu(LH_DTYPE_F32, m.w, 1, flat);
    int64_t ishape[2] = {rows, L};
    lh_tensor wi = lh_tensor_cpu(LH_DTYPE_INT8, m.w, 2, ishape);
    const lh_tensor *ws[3] = {&wt, &w1, &wi};
    const char *names[3] = {"kv_b transposed", "kv_b of 1 dim", "kv_b int8"};
    for (int i = 0; i < 3; i++) {
        lh_attn_forward_args a = io_args(&m, &io);
        a.kv_b = ws[i];
        const lh_attn_ops *ops[2] = {&paged_ops, vanilla_ops};
        lh_attn_layer *layers[2] = {m.paged, m.van};
        for (int b = 0; b < 2; b++) {
            lh_error err = {0};
            CU_ASSERT_EQUAL_FATAL(ops[b]->prepare(layers[b], &io.st, &err), LH_OK);
            lh_status st = ops[b]->forward(layers[b], m.kctx, &io.st, &a, &tq, &tc, &tr, &to,
                                           &err);
            /* a shape: LH_E_USAGE naming kv_b; a dtype: refused (the kernel names it) */
            const bool ok = i < 2 ? st == LH_E_USAGE && strstr(err.msg, "kv_b") != NULL
                                  : st != LH_OK;
            printf("\n    %s (%s): status %d, \"%s\"%s", names[i], b ? "vanilla" : "paged",
                   (int)st, err.msg,
                   ok ? "" : "  <-- BUG: accepted; a kv_b that disagrees with the geometry "
                             "must be refused (LH_E_USAGE naming kv_b), never read");
            CU_ASSERT(ok);
            if (st == LH_OK && b == 1) /* accepted after all: vanilla's slot moved on */
                vanilla_ops->release(m.van, 0);
        }
    }
    io_free(&io);
    mk_close(&m);
}

static void test_create_errors(void)
{
    /* mixed precision does not apply to one latent */
    static const lh_dtype pairs[][2] = {{LH_DTYPE_F32, LH_DTYPE_BF16},
                                        {LH_DTYPE_FP8_E4M3, LH_DTYPE_BF16},
                                        {LH_DTYPE_BF16, LH_DTYPE_F32}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        lh_attn_geometry g = mla_geometry(&small_dims, &mk_default);
        g.kv_dtype = pairs[i][0];
        g.kv_v_dtype = pairs[i][1];
        lh_attn_layer *l = (lh_attn_layer *)&g;
        lh_error err = {0};
        CU_ASSERT_EQUAL(paged_ops.create(&g, &l, &err), LH_E_UNSUPPORTED);
        CU_ASSERT_EQUAL(err.code, LH_E_UNSUPPORTED);
        CU_ASSERT_PTR_NULL(l);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "multi-head latent attention"));
        if (i == 0)
            printf("\n    %s", err.msg);
    }
    /* the same geometry with matching dtypes is accepted */
    lh_attn_geometry g = mla_geometry(&small_dims, &mk_default);
    g.kv_dtype = g.kv_v_dtype = LH_DTYPE_FP8_E4M3;
    lh_attn_layer *l = NULL;
    lh_error err = {0};
    CU_ASSERT_EQUAL(paged_ops.create(&g, &l, &err), LH_OK);
    paged_ops.destroy(l);
    /* an inconsistent MLA geometry */
    for (int i = 0; i < 3; i++) {
        g = mla_geometry(&small_dims, &mk_default);
        if (i == 0)
            g.head_dim += 1; /* not nope + rope */
        else if (i == 1)
            g.kv_lora_rank = 0;
        else
            g.v_head_dim = 0;
        l = (lh_attn_layer *)&g;
        CU_ASSERT_EQUAL(paged_ops.create(&g, &l, &err), LH_E_USAGE);
        CU_ASSERT_PTR_NULL(l);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "invalid MLA geometry"));
        lh_error verr = {0};
        CU_ASSERT_EQUAL(vanilla_ops->create(&g, &l, &verr), LH_E_USAGE);
        CU_ASSERT_PTR_NOT_NULL(strstr(verr.msg, "invalid MLA geometry"));
    }
    /* the host's latent pool: v_dtype other than the keys' refused; unset: one tensor */
    const int64_t W = small_dims.rope + small_dims.lora;
    lh_kv_cache_config kc = {.block_size = 16, .k_dtype = LH_DTYPE_FP8_E4M3,
                             .v_dtype = LH_DTYPE_BF16};
    lh_kv_plan plan;
    lh_err herr = {0};
    CU_ASSERT_EQUAL(lh_kv_plan_compute(&kc, 2, 1, W, false, true, MAX_LEN, MAX_SEQS, NULL, &plan,
                                       &herr), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(herr.msg, "multi-head latent attention"));
    kc.v_dtype = LH_DTYPE_INVALID;
    CU_ASSERT_EQUAL(lh_kv_plan_compute(&kc, 2, 1, W, false, true, MAX_LEN, MAX_SEQS, NULL, &plan,
                                       &herr), LH_OK);
    CU_ASSERT_EQUAL(plan.v_dtype, LH_DTYPE_FP8_E4M3);
    CU_ASSERT_EQUAL(plan.kv_bytes_per_token, (size_t)(2 * W)); /* 1 byte per element, no values */
    lh_kv_cache *cache = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_kv_cache_create(&plan, NULL, &cache, &herr), LH_OK);
    for (int64_t layer = 0; layer < 2; layer++) {
        const lh_kv_pages *kv = lh_kv_cache_layer(cache, layer);
        CU_ASSERT_PTR_EQUAL(kv->v.data, kv->k.data);
        CU_ASSERT_PTR_EQUAL(kv->v_scale.data, kv->k_scale.data);
        CU_ASSERT_EQUAL(kv->k.shape[2] * kv->k.shape[3], W); /* kv_heads 1 x W (either layout) */
    }
    lh_kv_cache_free(cache);
}

/* ---- main ------------------------------------------------------------------------------ */

static int suite_init(void)
{
    if (!(host = rt_builtin_host()))
        return 1;
    const lh_reg_entry *e = NULL;
    lh_err err = {0};
    lh_registry_lock(&host->reg);
    lh_status st = lh_get_attention_backend(&host->reg, "vanilla", NULL, &e, &err);
    lh_registry_unlock(&host->reg);
    if (st != LH_OK || !e || !(e->p.attn.capabilities & LH_ATTN_CAP_MLA)) {
        fprintf(stderr, "vanilla: %s\n", err.msg);
        return 1;
    }
    vanilla_ops = e->p.attn.ops;
    return 0;
}

static int suite_clean(void)
{
    lh_host_free(host);
    return 0;
}

static CU_TestInfo tests[] = {
    {"scripted steps vs double reference and vanilla: blocks, layouts, KV dtypes, kv_b dtypes, "
     "RoPE layouts", test_scripted_small},
    {"DeepSeek-sized geometry (H 16, nope 128, rope 64, lora 512, v 128)", test_scripted_wide},
    {"no RoPE, no rope dims, f16, one thread, soft-cap, chunked", test_extras},
    {"sliding window over MLA, both backends", test_sliding_window},
    {"forward errors: kv_b, workspace, shapes; nothing written; empty step",
     test_forward_errors},
    {"kv_b of another shape or dtype is refused", test_kv_b_checked},
    {"create and pool refusals", test_create_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"MLA backends", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
