/* Kernel library: the batched paged KV cache kernels (lh_k_paged_attention_batch,
 * lh_k_paged_kv_write_batch), mixed-precision KV, fused RoPE, per-block key summaries and
 * sparse (Quest) block selection.
 *
 * Pools start as all-ones bytes (NaN in every dtype, scales and summaries too), so reading
 * anything not written shows; their blocks are handed out in shuffled order. Each case's
 * sequences mix a long decode step (flash-decoding splits), a short decode of three tokens,
 * a chunked-prefill continuation, a prefill from position 0 and a sequence with no new
 * tokens, packed in q / out in an order that differs from the sequence order, with a row
 * that belongs to no sequence (it must stay untouched).
 *  - batch vs per sequence: the pool written by kv_write_batch steps is byte for byte the
 *    pool written by lh_k_paged_kv_write per sequence; attention_batch is bit for bit
 *    lh_k_paged_attention per sequence and independent of the thread count (1, 2, 3);
 *    against a double-precision reference of HF eager attention on the values the pool holds
 *    (read back by the test's own layout arithmetic): |out - ref| <= 2e-5 max|v| + 1e-6.
 *    Every pair of key and value dtypes (f32, bf16, f16, fp8 e4m3), block sizes 1, 16, 64,
 *    NHD and HND, each ISA.
 *  - fused RoPE (default, llama3, dynamic with per-sequence lengths past the original
 *    maximum, longrope with partial rotary whose sequences and write chunks fall on both
 *    sides of the original maximum, so each picks the short or long table by its kv_len,
 *    yarn with DeepSeek's mscale; each in the rotate_half and the interleaved layout):
 *    kv_write_batch with rope on unrotated keys gives the pool (keys, summaries)
 *    of lh_k_rope_apply (seq_len kv_len) then the unrotated write, byte for byte; attention
 *    with params.rope on unrotated q equals lh_k_rope_apply on q then attention without,
 *    bit for bit, dense and sparse; q and k are not modified.
 *  - sparse: local + top_k covering every visible block gives the dense result bit for bit
 *    (with windows, chunks and forced splits); small top_k matches a double-precision
 *    reference that selects the blocks itself (summaries from the keys, the bound
 *    sum_d max(q_d kmin_d, q_d kmax_d), ties to the lower block, masks inside the chosen
 *    blocks); equal bounds go to the lower logical blocks.
 *  - summaries: exact elementwise min / max of the keys as given (before conversion to the
 *    pool's dtype, after rotation), reset by a write that starts at a block's first token,
 *    widened by one that starts inside it; untouched blocks keep their bytes.
 *  - attention-logit soft-capping (softcap_batch, sparse_softcap_vs_reference): batch == per
 *    sequence, thread counts, covering sparse == dense, fused RoPE == rotate-then-attend, all
 *    bit for bit, and the capped reference (the sparse selection by the raw bound), on q
 *    scaled so that the cap matters.
 *  - one latent for keys and values (multi-head latent attention: a pool whose v is its k,
 *    head_dim 576 = 512 + 64, one kv head, 16 and 128 query heads; f32, bf16, f16, fp8):
 *    keys-only writes (v NULL), batched and per sequence, give the bytes (elements, scales,
 *    summaries) a separate pool holds for keys and values both given the keys, and nothing
 *    else is written; attention with v aliasing k is bit for bit lh_k_attention on the
 *    decoded keys used as keys and values (unsplit), the separate pool's result and the
 *    per-sequence calls, and within the usual tolerance of the reference when split; fused
 *    interleaved RoPE over the latent's first 64 dims == rotate then write / attend.
 *  - errors: sparse without summaries, bad sparse parameters, bad batch fields, overlapping
 *    rows, block tables too short or out of the pool, a physical block written twice,
 *    n_new > kv_len, fused RoPE without positions, fp8 keys or values without their scales,
 *    v NULL for a pool whose v is not its k, v given for one whose v is, a v that shares k's
 *    data with another dtype or other fp8 scales, or overlaps it partly; the messages name
 *    the sequence and the field, and nothing is written on error. */
#include "ktest.h"

#include <stddef.h>

/* ---- a pool with independent key and value dtypes ----------------------------------------- */

static inline int64_t imin_t(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static size_t dt_bytes(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 ? 4 : dt == LH_DTYPE_FP8_E4M3 ? 1 : 2;
}

static const char *dtn(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_F16: return "f16";
    default: return "fp8";
    }
}

typedef struct bpool {
    lh_dtype kdt, vdt;
    int64_t bs, KVH, D, NB;
    void *k, *v;
    float *ks, *vs, *kmin, *kmax;
    size_t kbytes, vbytes;
    bool shared; /* v is k (one latent for keys and values): written keys only */
    lh_kv_pages kv;
} bpool;

static void bpool_init(bpool *p, lh_dtype kdt, lh_dtype vdt, lh_kv_layout layout, int64_t bs,
                       int64_t KVH, int64_t D, int64_t NB, bool summaries)
{
    memset(p, 0, sizeof *p);
    p->kdt = kdt;
    p->vdt = vdt;
    p->bs = bs;
    p->KVH = KVH;
    p->D = D;
    p->NB = NB;
    const size_t n = (size_t)(NB * bs * KVH * D);
    p->kbytes = n * dt_bytes(kdt);
    p->vbytes = n * dt_bytes(vdt);
    p->k = malloc(p->kbytes);
    p->v = malloc(p->vbytes);
    memset(p->k, 0xff, p->kbytes);
    memset(p->v, 0xff, p->vbytes);
    int64_t shape[4] = {NB, layout == LH_KV_NHD ? bs : KVH, layout == LH_KV_NHD ? KVH : bs, D};
    p->kv.layout = layout;
    p->kv.k = lh_tensor_cpu(kdt, p->k, 4, shape);
    p->kv.v = lh_tensor_cpu(vdt, p->v, 4, shape);
    const size_t ns = (size_t)(NB * KVH) * sizeof(float);
    if (kdt == LH_DTYPE_FP8_E4M3) {
        p->ks = malloc(ns);
        memset(p->ks, 0xff, ns);
        p->kv.k_scale = kt_t2(LH_DTYPE_F32, p->ks, NB, KVH);
    }
    if (vdt == LH_DTYPE_FP8_E4M3) {
        p->vs = malloc(ns);
        memset(p->vs, 0xff, ns);
        p->kv.v_scale = kt_t2(LH_DTYPE_F32, p->vs, NB, KVH);
    }
    if (summaries) {
        p->kmin = malloc(ns * (size_t)D);
        p->kmax = malloc(ns * (size_t)D);
        memset(p->kmin, 0xff, ns * (size_t)D);
        memset(p->kmax, 0xff, ns * (size_t)D);
        p->kv.k_min = kt_t3(LH_DTYPE_F32, p->kmin, NB, KVH, D);
        p->kv.k_max = kt_t3(LH_DTYPE_F32, p->kmax, NB, KVH, D);
    }
}

/* A pool whose v is its k (the same tensor and, fp8, the same scales). */
static void bpool_init_shared(bpool *p, lh_dtype dt, lh_kv_layout layout, int64_t bs,
                              int64_t KVH, int64_t D, int64_t NB, bool summaries)
{
    bpool_init(p, dt, dt, layout, bs, KVH, D, NB, summaries);
    free(p->v);
    free(p->vs);
    p->v = p->k;
    p->vs = p->ks;
    p->kv.v = p->kv.k;
    p->kv.v_scale = p->kv.k_scale;
    p->shared = true;
}

static void bpool_free(bpool *p)
{
    free(p->k);
    if (!p->shared) {
        free(p->v);
        free(p->vs);
    }
    free(p->ks);
    free(p->kmin);
    free(p->kmax);
}

/* The value the pool holds for (keys or values, physical block, offset, kv head, d). */
static float bpool_get(const bpool *p, int is_v, int64_t phys, int64_t off, int64_t h, int64_t d)
{
    const int64_t idx = p->kv.layout == LH_KV_NHD
                            ? ((phys * p->bs + off) * p->KVH + h) * p->D + d
                            : ((phys * p->KVH + h) * p->bs + off) * p->D + d;
    const lh_dtype dt = is_v ? p->vdt : p->kdt;
    const void *base = is_v ? p->v : p->k;
    switch (dt) {
    case LH_DTYPE_F32: return ((const float *)base)[idx];
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)base)[idx]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)base)[idx]);
    default: {
        float s = (is_v ? p->vs : p->ks)[phys * p->KVH + h];
        return lh_k_fp8_e4m3_to_f32(((const uint8_t *)base)[idx]) * s;
    }
    }
}

static bool bpool_same(const bpool *a, const bpool *b)
{
    const size_t ns = (size_t)(a->NB * a->KVH) * sizeof(float);
    bool same = !memcmp(a->k, b->k, a->kbytes) && !memcmp(a->v, b->v, a->vbytes);
    if (a->ks)
        same = same && !memcmp(a->ks, b->ks, ns);
    if (a->vs)
        same = same && !memcmp(a->vs, b->vs, ns);
    if (a->kmin)
        same = same && !memcmp(a->kmin, b->kmin, ns * (size_t)a->D) &&
               !memcmp(a->kmax, b->kmax, ns * (size_t)a->D);
    return same;
}

/* ---- a batch of sequences ------------------------------------------------------------------- */

#define MAX_SEQS 8

typedef struct bseq {
    int64_t kv_len, n_new, tok0;
} bseq;

typedef struct bset {
    int n;
    int64_t kv_len[MAX_SEQS], n_new[MAX_SEQS], tok0[MAX_SEQS], n_blocks[MAX_SEQS];
    const int32_t *tables[MAX_SEQS];
    float *k[MAX_SEQS], *v[MAX_SEQS]; /* [kv_len, KVH, D] as given (unrotated) */
    int64_t T, H, KVH, D, bs, NB;
    int32_t *perm;
    int32_t *pos; /* [T]: positions of the rows; rows of no sequence hold -7 */
} bset;

/* Sequences with shuffled, disjoint blocks (spare unused ones in the pool), random keys and
 * values (keys scaled per block, so that the blocks' bounds differ). */
static void bset_init(bset *b, const bseq *seqs, int n, int64_t T, int64_t H, int64_t KVH,
                      int64_t D, int64_t bs)
{
    memset(b, 0, sizeof *b);
    b->n = n;
    b->T = T;
    b->H = H;
    b->KVH = KVH;
    b->D = D;
    b->bs = bs;
    int64_t total = 0;
    for (int s = 0; s < n; s++) {
        b->kv_len[s] = seqs[s].kv_len;
        b->n_new[s] = seqs[s].n_new;
        b->tok0[s] = seqs[s].tok0;
        b->n_blocks[s] = (seqs[s].kv_len + bs - 1) / bs;
        total += b->n_blocks[s];
    }
    b->NB = total + 3;
    b->perm = malloc((size_t)b->NB * sizeof(int32_t));
    for (int64_t i = 0; i < b->NB; i++)
        b->perm[i] = (int32_t)i;
    for (int64_t i = b->NB - 1; i > 0; i--) {
        int64_t r = (int64_t)(kt_u64() % (uint64_t)(i + 1));
        int32_t t = b->perm[i];
        b->perm[i] = b->perm[r];
        b->perm[r] = t;
    }
    int64_t used = 0;
    b->pos = malloc((size_t)T * sizeof(int32_t));
    for (int64_t i = 0; i < T; i++)
        b->pos[i] = -7;
    for (int s = 0; s < n; s++) {
        b->tables[s] = b->perm + used;
        used += b->n_blocks[s];
        const int64_t m = b->kv_len[s] * KVH * D;
        b->k[s] = malloc((size_t)(m ? m : 1) * sizeof(float));
        b->v[s] = malloc((size_t)(m ? m : 1) * sizeof(float));
        for (int64_t blk = 0; blk < b->n_blocks[s]; blk++) {
            const float amp = kt_range(0.2f, 1.5f);
            for (int64_t i = blk * bs * KVH * D; i < imin_t(m, (blk + 1) * bs * KVH * D); i++)
                b->k[s][i] = kt_uniform() * amp;
        }
        for (int64_t i = 0; i < m; i++)
            b->v[s][i] = kt_uniform() * 2.0f;
        for (int64_t i = 0; i < b->n_new[s]; i++)
            b->pos[b->tok0[s] + i] = (int32_t)(b->kv_len[s] - b->n_new[s] + i);
    }
}

static void bset_free(bset *b)
{
    for (int s = 0; s < b->n; s++) {
        free(b->k[s]);
        free(b->v[s]);
    }
    free(b->perm);
    free(b->pos);
}

/* Writes positions [from[s], to[s]) of every sequence: one lh_k_paged_kv_write_batch call
 * (rows packed in reverse sequence order), or, per_seq, lh_k_paged_kv_write per sequence of
 * keys rotated first with lh_k_rope_apply (seq_len to[s]) when rope is set. A shared pool
 * (v is k) is written keys only, v NULL. */
static lh_status bset_write(lh_kctx *ctx, const bset *b, bpool *p, const int64_t *from,
                            const int64_t *to, const lh_rope *rope, bool per_seq)
{
    const int64_t row = b->KVH * b->D;
    lh_status st = LH_OK;
    if (per_seq) {
        for (int s = 0; s < b->n && st == LH_OK; s++) {
            const int64_t n = to[s] - from[s];
            if (n == 0)
                continue;
            float *kk = malloc((size_t)(n * row) * sizeof(float));
            memcpy(kk, b->k[s] + from[s] * row, (size_t)(n * row) * sizeof(float));
            lh_tensor tk = kt_t3(LH_DTYPE_F32, kk, n, b->KVH, b->D);
            lh_tensor tv = kt_t3(LH_DTYPE_F32, b->v[s] + from[s] * row, n, b->KVH, b->D);
            if (rope) {
                int32_t *pos = malloc((size_t)n * sizeof(int32_t));
                for (int64_t i = 0; i < n; i++)
                    pos[i] = (int32_t)(from[s] + i);
                st = lh_k_rope_apply(ctx, rope, &tk, pos, to[s]);
                free(pos);
            }
            if (st == LH_OK)
                st = lh_k_paged_kv_write(ctx, &p->kv, b->tables[s], b->n_blocks[s], from[s], &tk,
                                         p->shared ? NULL : &tv);
            free(kk);
        }
        return st;
    }
    int64_t Tw = 0;
    for (int s = 0; s < b->n; s++)
        Tw += to[s] - from[s];
    float *kk = malloc((size_t)(Tw * row + 1) * sizeof(float));
    float *vv = malloc((size_t)(Tw * row + 1) * sizeof(float));
    int32_t *pos = malloc((size_t)(Tw + 1) * sizeof(int32_t));
    int64_t tok[MAX_SEQS], nn[MAX_SEQS], len[MAX_SEQS];
    int64_t r = 0;
    for (int s = b->n - 1; s >= 0; s--) {
        tok[s] = r;
        nn[s] = to[s] - from[s];
        len[s] = to[s];
        memcpy(kk + r * row, b->k[s] + from[s] * row, (size_t)(nn[s] * row) * sizeof(float));
        memcpy(vv + r * row, b->v[s] + from[s] * row, (size_t)(nn[s] * row) * sizeof(float));
        for (int64_t i = 0; i < nn[s]; i++)
            pos[r + i] = (int32_t)(from[s] + i);
        r += nn[s];
    }
    float *kcopy = malloc((size_t)(Tw * row + 1) * sizeof(float));
    memcpy(kcopy, kk, (size_t)(Tw * row) * sizeof(float));
    lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = b->n, .token_start = tok,
                         .n_new = nn, .kv_len = len, .positions = pos,
                         .block_tables = b->tables, .n_blocks = b->n_blocks};
    lh_tensor tk = kt_t3(LH_DTYPE_F32, kk, Tw, b->KVH, b->D);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, vv, Tw, b->KVH, b->D);
    st = lh_k_paged_kv_write_batch(ctx, &p->kv, &pb, &tk, p->shared ? NULL : &tv, rope);
    if (st != LH_OK)
        printf("\n    %s", lh_k_last_error(ctx));
    CU_ASSERT_EQUAL(memcmp(kcopy, kk, (size_t)(Tw * row) * sizeof(float)), 0); /* k unchanged */
    free(kcopy);
    free(kk);
    free(vv);
    free(pos);
    return st;
}

/* The history of every sequence in three pieces, then the step's own new tokens. */
static lh_status bset_fill(lh_kctx *ctx, const bset *b, bpool *p, const lh_rope *rope,
                           bool per_seq)
{
    int64_t cut[5][MAX_SEQS];
    for (int s = 0; s < b->n; s++) {
        const int64_t h = b->kv_len[s] - b->n_new[s];
        cut[0][s] = 0;
        cut[1][s] = h / 2;
        cut[2][s] = h - 3 > h / 2 ? h - 3 : h / 2;
        cut[3][s] = h;
        cut[4][s] = b->kv_len[s];
    }
    lh_status st = LH_OK;
    for (int i = 0; i < 4 && st == LH_OK; i++)
        st = bset_write(ctx, b, p, cut[i], cut[i + 1], rope, per_seq);
    return st;
}

static lh_paged_batch bset_batch(const bset *b)
{
    lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = b->n, .token_start = b->tok0,
                         .n_new = b->n_new, .kv_len = b->kv_len, .positions = b->pos,
                         .block_tables = b->tables, .n_blocks = b->n_blocks};
    return pb;
}

static lh_status attn_batch(lh_kctx *ctx, const bset *b, const bpool *p, const float *q,
                            const lh_paged_attn_params *prm, float *out)
{
    lh_paged_batch pb = bset_batch(b);
    lh_tensor tq = kt_t3(LH_DTYPE_F32, (float *)q, b->T, b->H, b->D);
    lh_tensor to = kt_t3(LH_DTYPE_F32, out, b->T, b->H, b->D);
    lh_status st = lh_k_paged_attention_batch(ctx, &tq, &p->kv, &pb, prm, &to);
    if (st != LH_OK)
        printf("\n    %s", lh_k_last_error(ctx));
    return st;
}

static lh_status attn_per_seq(lh_kctx *ctx, const bset *b, const bpool *p, const float *q,
                              const lh_paged_attn_params *prm, float *out)
{
    const int64_t HD = b->H * b->D;
    for (int s = 0; s < b->n; s++) {
        if (b->n_new[s] == 0)
            continue;
        lh_tensor tq = kt_t3(LH_DTYPE_F32, (float *)q + b->tok0[s] * HD, b->n_new[s], b->H, b->D);
        lh_tensor to = kt_t3(LH_DTYPE_F32, out + b->tok0[s] * HD, b->n_new[s], b->H, b->D);
        lh_status st = lh_k_paged_attention(ctx, &tq, &p->kv, b->tables[s], b->n_blocks[s],
                                            b->kv_len[s], b->pos + b->tok0[s], prm, &to);
        if (st != LH_OK) {
            printf("\n    %s", lh_k_last_error(ctx));
            return st;
        }
    }
    return LH_OK;
}

/* q rotated per sequence with lh_k_rope_apply (seq_len kv_len), rows of no sequence copied */
static void rotate_q(lh_kctx *ctx, const bset *b, const lh_rope *rope, const float *q, float *qr)
{
    const int64_t HD = b->H * b->D;
    memcpy(qr, q, (size_t)(b->T * HD) * sizeof(float));
    for (int s = 0; s < b->n; s++) {
        if (b->n_new[s] == 0)
            continue;
        lh_tensor t = kt_t3(LH_DTYPE_F32, qr + b->tok0[s] * HD, b->n_new[s], b->H, b->D);
        CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, rope, &t, b->pos + b->tok0[s], b->kv_len[s]), LH_OK);
    }
}

/* ---- reference ------------------------------------------------------------------------------ */

/* The pool's values of sequence s, read back: [kv_len, KVH, D]. */
static void read_back(const bset *b, const bpool *p, int s, int is_v, float *dst)
{
    for (int64_t pp = 0; pp < b->kv_len[s]; pp++)
        for (int64_t h = 0; h < b->KVH; h++)
            for (int64_t d = 0; d < b->D; d++)
                dst[(pp * b->KVH + h) * b->D + d] =
                    bpool_get(p, is_v, b->tables[s][pp / b->bs], pp % b->bs, h, d);
}

/* Double-precision attention of one (query, head) over the positions it sees, restricted to
 * the blocks with use[block] (NULL: all); softcap > 0: scores = softcap * tanh(score /
 * softcap) before the softmax. */
static void ref_row_capped(const float *qv, const float *kd, const float *vd, int64_t kvh,
                           int64_t KVH, int64_t D, int64_t S, int64_t qp, double scale,
                           int64_t window, int64_t chunk, const unsigned char *use, int64_t bs,
                           double softcap, double *out)
{
    double m = -INFINITY, sum = 0;
    double *sc = malloc((size_t)S * sizeof(double));
    for (int64_t p = 0; p < S; p++) {
        sc[p] = -INFINITY;
        if (!kt_visible(p, qp, window, chunk) || (use && !use[p / bs]))
            continue;
        double s = 0;
        for (int64_t d = 0; d < D; d++)
            s += (double)qv[d] * kd[(p * KVH + kvh) * D + d];
        sc[p] = s * scale;
        if (softcap > 0)
            sc[p] = tanh(sc[p] / softcap) * softcap;
        m = fmax(m, sc[p]);
    }
    for (int64_t p = 0; p < S; p++)
        if (sc[p] != -INFINITY)
            sum += exp(sc[p] - m);
    for (int64_t d = 0; d < D; d++)
        out[d] = 0;
    for (int64_t p = 0; p < S; p++)
        if (sc[p] != -INFINITY) {
            double w = exp(sc[p] - m) / sum;
            for (int64_t d = 0; d < D; d++)
                out[d] += w * vd[(p * KVH + kvh) * D + d];
        }
    free(sc);
}

static void ref_row(const float *qv, const float *kd, const float *vd, int64_t kvh, int64_t KVH,
                    int64_t D, int64_t S, int64_t qp, double scale, int64_t window, int64_t chunk,
                    const unsigned char *use, int64_t bs, double *out)
{
    ref_row_capped(qv, kd, vd, kvh, KVH, D, S, qp, scale, window, chunk, use, bs, 0.0, out);
}

#define SENTINEL 12345.0f

static void fill_sentinel(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = SENTINEL;
}

/* ---- batch vs per sequence, every dtype pair ------------------------------------------------ */

static const lh_dtype DTS[4] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16, LH_DTYPE_FP8_E4M3};
static const int64_t BSIZES[3] = {1, 16, 64};

/* prefill-decode mixes; row 20 belongs to no sequence, sequence 2 has no new tokens */
static const bseq MIX[5] = {{300, 1, 21}, {45, 12, 25}, {10, 0, 0}, {20, 20, 0}, {530, 3, 22}};
#define MIX_T 37

static lh_paged_attn_params params_variant(int which, int64_t D)
{
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 1.0f / sqrtf((float)D)};
    if (which == 1) {
        prm.sliding_window = 100;
        prm.n_splits = 4;
    } else if (which == 2) {
        prm.chunk_size = 64;
    }
    return prm;
}

static void batch_vs_per_seq(lh_k_isa isa)
{
    lh_kctx *c1 = kt_ctx(1, isa), *c2 = kt_ctx(2, isa), *c3 = kt_ctx(3, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c3);
    kt_seed(77);
    const int64_t H = 6, KVH = 2, D = 36, T = MIX_T, nq = T * H * D;
    float *q = malloc((size_t)nq * sizeof(float)), *ob = malloc((size_t)nq * sizeof(float));
    float *op = malloc((size_t)nq * sizeof(float)), *ot = malloc((size_t)nq * sizeof(float));
    double *ref = malloc((size_t)D * sizeof(double));
    for (int64_t i = 0; i < nq; i++)
        q[i] = kt_uniform();
    long runs = 0;
    for (int ki = 0; ki < 4; ki++)
        for (int vi = 0; vi < 4; vi++)
            for (int bi = 0; bi < 3; bi++)
                for (int li = 0; li < 2; li++) {
                    const lh_dtype kdt = DTS[ki], vdt = DTS[vi];
                    const int64_t bs = BSIZES[bi];
                    const lh_kv_layout lay = li ? LH_KV_HND : LH_KV_NHD;
                    const int pv = (ki + vi + bi + li) % 3;
                    char what[160];
                    snprintf(what, sizeof what, "%s k %s v %s block %lld %s params %d",
                             lh_k_isa_name(isa), dtn(kdt), dtn(vdt), (long long)bs,
                             li ? "HND" : "NHD", pv);
                    bset b;
                    bset_init(&b, MIX, 5, T, H, KVH, D, bs);
                    bpool pa, pb;
                    bpool_init(&pa, kdt, vdt, lay, bs, KVH, D, b.NB, (ki + bi) % 2 == 0);
                    bpool_init(&pb, kdt, vdt, lay, bs, KVH, D, b.NB, (ki + bi) % 2 == 0);
                    CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &pa, NULL, false), LH_OK);
                    CU_ASSERT_EQUAL_FATAL(bset_fill(c1, &b, &pb, NULL, true), LH_OK);
                    bool same_pool = bpool_same(&pa, &pb);
                    if (!same_pool)
                        printf("\n    FAIL %s: kv_write_batch differs from per-sequence writes",
                               what);
                    CU_ASSERT_TRUE(same_pool);

                    /* stored values: f32 exact, bf16 / f16 rounded, fp8 within its error */
                    kt_cmp stored = {0};
                    for (int s = 0; s < b.n; s++)
                        for (int64_t pp = 0; pp < b.kv_len[s]; pp++)
                            for (int64_t h = 0; h < KVH; h++)
                                for (int64_t d = 0; d < D; d += 5)
                                    for (int is_v = 0; is_v < 2; is_v++) {
                                        const int64_t phys = b.tables[s][pp / bs];
                                        const lh_dtype dt = is_v ? vdt : kdt;
                                        const float x = (is_v ? b.v[s] : b.k[s])[(pp * KVH + h) * D + d];
                                        const float got = bpool_get(&pa, is_v, phys, pp % bs, h, d);
                                        double tol = 0;
                                        double want = kt_round_to(dt, x);
                                        if (dt == LH_DTYPE_FP8_E4M3) {
                                            want = x;
                                            tol = 0.0626 * fabs(x) +
                                                  0.001953125 * (is_v ? pa.vs : pa.ks)[phys * KVH + h];
                                        }
                                        kt_check(&stored, (long)pp, got, want, tol);
                                    }
                    KT_REPORT(stored, what);

                    lh_paged_attn_params prm = params_variant(pv, D);
                    fill_sentinel(ob, nq);
                    fill_sentinel(op, nq);
                    CU_ASSERT_EQUAL(attn_batch(c2, &b, &pa, q, &prm, ob), LH_OK);
                    CU_ASSERT_EQUAL(attn_per_seq(c2, &b, &pa, q, &prm, op), LH_OK);
                    bool same = memcmp(ob, op, (size_t)nq * sizeof(float)) == 0;
                    if (!same)
                        printf("\n    FAIL %s: batch differs from per-sequence calls", what);
                    CU_ASSERT_TRUE(same);
                    CU_ASSERT_EQUAL(ob[20 * H * D], SENTINEL); /* the row of no sequence */
                    CU_ASSERT_EQUAL(ob[21 * H * D - 1], SENTINEL);
                    lh_kctx *others[2] = {c1, c3};
                    for (int oi = 0; oi < 2; oi++) {
                        fill_sentinel(ot, nq);
                        CU_ASSERT_EQUAL(attn_batch(others[oi], &b, &pa, q, &prm, ot), LH_OK);
                        bool same_t = memcmp(ob, ot, (size_t)nq * sizeof(float)) == 0;
                        if (!same_t)
                            printf("\n    FAIL %s: %d threads differ from 2", what,
                                   lh_k_ctx_threads(others[oi]));
                        CU_ASSERT_TRUE(same_t);
                    }
                    /* the double-precision reference */
                    kt_cmp cr = {0};
                    for (int s = 0; s < b.n; s++) {
                        if (b.n_new[s] == 0)
                            continue;
                        const int64_t S = b.kv_len[s];
                        float *kd = malloc((size_t)(S * KVH * D) * sizeof(float));
                        float *vd = malloc((size_t)(S * KVH * D) * sizeof(float));
                        read_back(&b, &pa, s, 0, kd);
                        read_back(&b, &pa, s, 1, vd);
                        double vmax = 0;
                        for (int64_t i = 0; i < S * KVH * D; i++)
                            vmax = fmax(vmax, fabs(vd[i]));
                        for (int64_t t = 0; t < b.n_new[s]; t++)
                            for (int64_t h = 0; h < H; h++) {
                                const int64_t row = b.tok0[s] + t;
                                ref_row(q + (row * H + h) * D, kd, vd, h / (H / KVH), KVH, D, S,
                                        b.pos[row], prm.scale, prm.sliding_window,
                                        prm.chunk_size, NULL, bs, ref);
                                for (int64_t d = 0; d < D; d++)
                                    kt_check(&cr, (long)row, ob[(row * H + h) * D + d], ref[d],
                                             2e-5 * vmax + 1e-6);
                            }
                        free(kd);
                        free(vd);
                    }
                    KT_REPORT(cr, what);
                    bpool_free(&pa);
                    bpool_free(&pb);
                    bset_free(&b);
                    runs++;
                }
    printf("\n    %s: %ld configurations", lh_k_isa_name(isa), runs);
    free(q);
    free(ob);
    free(op);
    free(ot);
    free(ref);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c3);
}
KT_ISA_TESTS(batch_vs_per_seq)

/* ---- fused RoPE ----------------------------------------------------------------------------- */

static void fused_rope(lh_k_isa isa)
{
    lh_kctx *c1 = kt_ctx(1, isa), *c2 = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    kt_seed(31);
    const int64_t H = 4, KVH = 2, D = 32;
    /* decode past the dynamic limit (64), a prefill below it, a chunk, an idle sequence */
    static const bseq seqs[4] = {{300, 1, 0}, {40, 40, 1}, {100, 5, 41}, {70, 0, 0}};
    const int64_t T = 46, nq = T * H * D;
    float *q = malloc((size_t)nq * sizeof(float)), *qc = malloc((size_t)nq * sizeof(float));
    float *qr = malloc((size_t)nq * sizeof(float));
    float *of = malloc((size_t)nq * sizeof(float)), *ou = malloc((size_t)nq * sizeof(float));
    for (int64_t i = 0; i < nq; i++)
        q[i] = kt_uniform();
    memcpy(qc, q, (size_t)nq * sizeof(float));
    lh_rope_scaling llama3 = {.kind = "llama3", .factor = 8.0, .low_freq_factor = 1.0,
                              .high_freq_factor = 4.0, .original_max_position_embeddings = 32};
    lh_rope_scaling dynamic = {.kind = "dynamic", .factor = 2.0};
    /* Phi-3 style: rotary_dim D / 2 (8 factors), original 64 */
    static const double lr_short[8] = {1.0, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0};
    static const double lr_long[8] = {1.2, 1.9, 3.1, 5.3, 8.7, 13.9, 22.4, 35.0};
    lh_rope_scaling longrope = {.kind = "longrope", .short_factor = lr_short,
                                .long_factor = lr_long, .n_factors = 8,
                                .original_max_position_embeddings = 64};
    /* DeepSeek's yarn (mscale 0.707 / mscale_all_dim 1: attention scaling below 1), partial */
    lh_rope_scaling yarn = {.kind = "yarn", .factor = 40.0, .original_max_position_embeddings = 32,
                            .mscale = 0.707, .mscale_all_dim = 1.0};
    const lh_rope_scaling *kinds[5] = {NULL, &llama3, &dynamic, &longrope, &yarn};
    const int64_t maxpos[5] = {2048, 4096, 64, 512, 1280};
    const int64_t rdim[5] = {D, D, D, D / 2, 3 * D / 4};
    for (int ri = 0; ri < 5; ri++)
        for (int ci = 0; ci < 4; ci++) {
            const bool il = ci >= 2; /* interleaved pairs */
            const lh_dtype kdt = ci % 2 ? LH_DTYPE_BF16 : LH_DTYPE_F32;
            const lh_dtype vdt = ci % 2 ? LH_DTYPE_FP8_E4M3 : LH_DTYPE_F32;
            const int64_t bs = ci % 2 ? 16 : 5;
            char what[140];
            snprintf(what, sizeof what, "%s rope %s%s, k %s v %s block %lld", lh_k_isa_name(isa),
                     kinds[ri] ? kinds[ri]->kind : "default", il ? " interleaved" : "", dtn(kdt),
                     dtn(vdt), (long long)bs);
            lh_rope rope;
            CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&rope, rdim[ri], 10000.0, kinds[ri], maxpos[ri]),
                                  LH_OK);
            rope.interleaved = il;
            bset b;
            bset_init(&b, seqs, 4, T, H, KVH, D, bs);
            bpool pf, pu;
            bpool_init(&pf, kdt, vdt, ci % 2 ? LH_KV_HND : LH_KV_NHD, bs, KVH, D, b.NB, true);
            bpool_init(&pu, kdt, vdt, ci % 2 ? LH_KV_HND : LH_KV_NHD, bs, KVH, D, b.NB, true);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &pf, &rope, false), LH_OK);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c1, &b, &pu, &rope, true), LH_OK);
            bool same_pool = bpool_same(&pf, &pu);
            if (!same_pool)
                printf("\n    FAIL %s: fused-RoPE writes differ from rotate-then-write", what);
            CU_ASSERT_TRUE(same_pool);
            rotate_q(c2, &b, &rope, q, qr);
            for (int sp = 0; sp < 2; sp++) {
                lh_paged_attn_params prm = {.struct_size = sizeof prm,
                                            .scale = 1.0f / sqrtf((float)D)};
                if (sp) {
                    prm.sparse_local_blocks = 1;
                    prm.sparse_top_k = 2;
                }
                lh_paged_attn_params pr = prm;
                pr.rope = &rope;
                fill_sentinel(of, nq);
                fill_sentinel(ou, nq);
                CU_ASSERT_EQUAL(attn_batch(c2, &b, &pf, q, &pr, of), LH_OK);
                CU_ASSERT_EQUAL(attn_batch(c2, &b, &pu, qr, &prm, ou), LH_OK);
                bool same = memcmp(of, ou, (size_t)nq * sizeof(float)) == 0;
                if (!same)
                    printf("\n    FAIL %s%s: fused differs from rotate-then-attend", what,
                           sp ? " (sparse)" : "");
                CU_ASSERT_TRUE(same);
                CU_ASSERT_EQUAL(memcmp(q, qc, (size_t)nq * sizeof(float)), 0); /* q unchanged */
                /* the single-sequence entry point and another thread count agree */
                fill_sentinel(ou, nq);
                CU_ASSERT_EQUAL(attn_per_seq(c1, &b, &pf, q, &pr, ou), LH_OK);
                CU_ASSERT_EQUAL(memcmp(of, ou, (size_t)nq * sizeof(float)), 0);
            }
            bpool_free(&pf);
            bpool_free(&pu);
            bset_free(&b);
            lh_k_rope_free(&rope);
        }
    free(q);
    free(qc);
    free(qr);
    free(of);
    free(ou);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
}
KT_ISA_TESTS(fused_rope)

/* ---- one latent for keys and values (multi-head latent attention) ---------------------------- */

/* Per sequence: lh_k_attention on kd ([kv_len, 1, D], the decoded keys) as keys and values. */
static void attn_contiguous(lh_kctx *ctx, const bset *b, int s, const float *q, float *kd,
                            float scale, float *out)
{
    const int64_t HD = b->H * b->D, n = b->n_new[s];
    lh_tensor tq = kt_t3(LH_DTYPE_F32, (float *)q + b->tok0[s] * HD, n, b->H, b->D);
    lh_tensor tk = kt_t3(LH_DTYPE_F32, kd, b->kv_len[s], b->KVH, b->D);
    lh_tensor to = kt_t3(LH_DTYPE_F32, out + b->tok0[s] * HD, n, b->H, b->D);
    CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tk, b->pos + b->tok0[s], scale, 0.0f, 0, &to),
                    LH_OK);
}

static void latent_pool(lh_k_isa isa)
{
    lh_kctx *c1 = kt_ctx(1, isa), *c2 = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    kt_seed(576);
    /* DeepSeek's latent: kv_lora_rank 512 + qk_rope_head_dim 64, one kv head */
    const int64_t D = 576, KVH = 1, rd = 64;
    /* 16 heads: a long decode (split), a prefill from 0, a chunk; 128 heads: two decodes */
    static const bseq mix16[3] = {{300, 1, 0}, {20, 20, 1}, {90, 4, 21}};
    static const bseq mix128[2] = {{300, 1, 1}, {37, 2, 2}};
    const struct {
        int64_t H, T;
        const bseq *seqs;
        int n;
    } cfg[2] = {{16, 25, mix16, 3}, {128, 4, mix128, 2}};
    lh_rope_scaling yarn = {.kind = "yarn", .factor = 40.0, .original_max_position_embeddings = 64,
                            .mscale = 0.707, .mscale_all_dim = 0.707};
    lh_rope rope;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&rope, rd, 10000.0, &yarn, 2560), LH_OK);
    rope.interleaved = true;
    long runs = 0;
    for (int hi = 0; hi < 2; hi++)
        for (int di = 0; di < 4; di++) {
            const int64_t H = cfg[hi].H, T = cfg[hi].T, nq = T * H * D;
            const lh_dtype dt = DTS[di];
            const int64_t bs = di % 2 ? 16 : 64;
            const lh_kv_layout lay = (di + hi) % 2 ? LH_KV_HND : LH_KV_NHD;
            const bool summaries = di % 2 == 0;
            char what[140];
            snprintf(what, sizeof what, "%s latent %s, %lld heads, block %lld %s",
                     lh_k_isa_name(isa), dtn(dt), (long long)H, (long long)bs,
                     lay == LH_KV_HND ? "HND" : "NHD");
            bset b;
            bset_init(&b, cfg[hi].seqs, cfg[hi].n, T, H, KVH, D, bs);
            for (int s = 0; s < b.n; s++) /* the separate pool's values are the keys */
                memcpy(b.v[s], b.k[s], (size_t)(b.kv_len[s] * KVH * D) * sizeof(float));
            float *q = malloc((size_t)nq * sizeof(float)), *qr = malloc((size_t)nq * sizeof(float));
            float *o = malloc((size_t)nq * sizeof(float)), *o2 = malloc((size_t)nq * sizeof(float));
            double *ref = malloc((size_t)D * sizeof(double));
            for (int64_t i = 0; i < nq; i++)
                q[i] = kt_uniform();

            /* writes: keys only, batched and per sequence; a separate pool given k as v */
            bpool ps, pp, pn;
            bpool_init_shared(&ps, dt, lay, bs, KVH, D, b.NB, summaries);
            bpool_init_shared(&pp, dt, lay, bs, KVH, D, b.NB, summaries);
            bpool_init(&pn, dt, dt, lay, bs, KVH, D, b.NB, summaries);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &ps, NULL, false), LH_OK);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c1, &b, &pp, NULL, true), LH_OK);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &pn, NULL, false), LH_OK);
            bool same_pool = bpool_same(&ps, &pp);
            /* the separate pool's keys and values are both the shared pool's latent; its
             * spare blocks, like the shared pool's, are untouched (still 0xff) */
            const size_t ns = (size_t)(b.NB * KVH) * sizeof(float);
            bool as_separate = !memcmp(ps.k, pn.k, ps.kbytes) && !memcmp(ps.k, pn.v, ps.kbytes);
            if (dt == LH_DTYPE_FP8_E4M3)
                as_separate = as_separate && !memcmp(ps.ks, pn.ks, ns) && !memcmp(ps.ks, pn.vs, ns);
            if (summaries)
                as_separate = as_separate && !memcmp(ps.kmin, pn.kmin, ns * (size_t)D) &&
                              !memcmp(ps.kmax, pn.kmax, ns * (size_t)D);
            if (!same_pool || !as_separate)
                printf("\n    FAIL %s: keys-only writes (batch == per sequence %d, == separate "
                       "pool %d)",
                       what, same_pool, as_separate);
            CU_ASSERT_TRUE(same_pool);
            CU_ASSERT_TRUE(as_separate);
            kt_cmp stored = {0};
            for (int s = 0; s < b.n; s++)
                for (int64_t p = 0; p < b.kv_len[s]; p++)
                    for (int64_t d = 0; d < D; d += 7) {
                        const int64_t phys = b.tables[s][p / bs];
                        const float x = b.k[s][p * D + d];
                        const float got = bpool_get(&ps, 0, phys, p % bs, 0, d);
                        if (dt == LH_DTYPE_FP8_E4M3)
                            kt_check(&stored, (long)p, got, x,
                                     0.0626 * fabs(x) + 0.001953125 * ps.ks[phys]);
                        else
                            kt_check(&stored, (long)p, got, kt_round_to(dt, x), 0);
                    }
            KT_REPORT(stored, what);

            /* attention, unsplit: lh_k_attention on the decoded keys as keys and values */
            lh_paged_attn_params prm = {.struct_size = sizeof prm,
                                        .scale = 1.0f / sqrtf((float)D), .n_splits = 1};
            fill_sentinel(o, nq);
            fill_sentinel(o2, nq);
            CU_ASSERT_EQUAL(attn_batch(c2, &b, &ps, q, &prm, o), LH_OK);
            for (int s = 0; s < b.n; s++) {
                float *kd = malloc((size_t)(b.kv_len[s] * D) * sizeof(float));
                read_back(&b, &ps, s, 0, kd);
                attn_contiguous(c2, &b, s, q, kd, prm.scale, o2);
                free(kd);
            }
            bool same = memcmp(o, o2, (size_t)nq * sizeof(float)) == 0;
            if (!same)
                printf("\n    FAIL %s: differs from lh_k_attention on the keys as values", what);
            CU_ASSERT_TRUE(same);
            if (hi == 1) { /* row 0 of the 128-head batch is no sequence's */
                CU_ASSERT_EQUAL(o[0], SENTINEL);
                CU_ASSERT_EQUAL(o[H * D - 1], SENTINEL);
            }
            fill_sentinel(o2, nq);
            CU_ASSERT_EQUAL(attn_batch(c2, &b, &pn, q, &prm, o2), LH_OK);
            CU_ASSERT_EQUAL(memcmp(o, o2, (size_t)nq * sizeof(float)), 0); /* separate pool */

            /* automatic splits: per sequence and other threads the same bits, the reference */
            prm.n_splits = 0;
            fill_sentinel(o, nq);
            fill_sentinel(o2, nq);
            CU_ASSERT_EQUAL(attn_batch(c2, &b, &ps, q, &prm, o), LH_OK);
            CU_ASSERT_EQUAL(attn_per_seq(c1, &b, &ps, q, &prm, o2), LH_OK);
            CU_ASSERT_EQUAL(memcmp(o, o2, (size_t)nq * sizeof(float)), 0);
            kt_cmp cr = {0};
            for (int s = 0; s < b.n; s++) {
                const int64_t S = b.kv_len[s];
                float *kd = malloc((size_t)(S * D) * sizeof(float));
                read_back(&b, &ps, s, 0, kd);
                double vmax = 0;
                for (int64_t i = 0; i < S * D; i++)
                    vmax = fmax(vmax, fabs(kd[i]));
                for (int64_t t = 0; t < b.n_new[s]; t++)
                    for (int64_t h = 0; h < H; h++) {
                        const int64_t row = b.tok0[s] + t;
                        ref_row(q + (row * H + h) * D, kd, kd, 0, KVH, D, S, b.pos[row], prm.scale,
                                0, 0, NULL, bs, ref);
                        for (int64_t d = 0; d < D; d++)
                            kt_check(&cr, (long)row, o[(row * H + h) * D + d], ref[d],
                                     2e-5 * vmax + 1e-6);
                    }
                free(kd);
            }
            KT_REPORT(cr, what);

            /* fused interleaved RoPE over the first rd dims: == rotate then write / attend */
            bpool pf, pu;
            bpool_init_shared(&pf, dt, lay, bs, KVH, D, b.NB, summaries);
            bpool_init_shared(&pu, dt, lay, bs, KVH, D, b.NB, summaries);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &pf, &rope, false), LH_OK);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c1, &b, &pu, &rope, true), LH_OK);
            bool same_rot = bpool_same(&pf, &pu);
            if (!same_rot)
                printf("\n    FAIL %s: fused interleaved RoPE write differs", what);
            CU_ASSERT_TRUE(same_rot);
            rotate_q(c2, &b, &rope, q, qr);
            lh_paged_attn_params pr = prm;
            pr.rope = &rope;
            fill_sentinel(o, nq);
            fill_sentinel(o2, nq);
            CU_ASSERT_EQUAL(attn_batch(c2, &b, &pf, q, &pr, o), LH_OK);
            CU_ASSERT_EQUAL(attn_batch(c2, &b, &pf, qr, &prm, o2), LH_OK);
            same = memcmp(o, o2, (size_t)nq * sizeof(float)) == 0;
            if (!same)
                printf("\n    FAIL %s: fused interleaved RoPE attention differs", what);
            CU_ASSERT_TRUE(same);

            bpool_free(&pf);
            bpool_free(&pu);
            bpool_free(&ps);
            bpool_free(&pp);
            bpool_free(&pn);
            bset_free(&b);
            free(q);
            free(qr);
            free(o);
            free(o2);
            free(ref);
            runs++;
        }
    printf("\n    %s: %ld configurations", lh_k_isa_name(isa), runs);
    lh_k_rope_free(&rope);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
}
KT_ISA_TESTS(latent_pool)

/* ---- sparse: covering selections are dense -------------------------------------------------- */

static void sparse_covering_is_dense(lh_k_isa isa)
{
    lh_kctx *c2 = kt_ctx(2, isa), *c1 = kt_ctx(1, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    kt_seed(4242);
    const int64_t H = 6, KVH = 2, D = 36, T = MIX_T, nq = T * H * D;
    float *q = malloc((size_t)nq * sizeof(float)), *od = malloc((size_t)nq * sizeof(float));
    float *os = malloc((size_t)nq * sizeof(float));
    for (int64_t i = 0; i < nq; i++)
        q[i] = kt_uniform();
    long runs = 0;
    for (int bi = 0; bi < 3; bi++)
        for (int ci = 0; ci < 2; ci++) {
            const int64_t bs = BSIZES[bi];
            const lh_dtype kdt = ci ? LH_DTYPE_FP8_E4M3 : LH_DTYPE_F32;
            const lh_dtype vdt = ci ? LH_DTYPE_BF16 : LH_DTYPE_F32;
            bset b;
            bset_init(&b, MIX, 5, T, H, KVH, D, bs);
            bpool p;
            bpool_init(&p, kdt, vdt, ci ? LH_KV_NHD : LH_KV_HND, bs, KVH, D, b.NB, true);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &p, NULL, false), LH_OK);
            const int64_t most = (530 + bs - 1) / bs; /* visible blocks at most */
            for (int pv = 0; pv < 4; pv++) {
                lh_paged_attn_params prm = params_variant(pv % 3, D);
                if (pv == 3)
                    prm.n_splits = 3;
                fill_sentinel(od, nq);
                CU_ASSERT_EQUAL(attn_batch(c2, &b, &p, q, &prm, od), LH_OK);
                const int64_t sel[3][2] = {{1, 1 << 20}, {1 << 20, 0}, {2, most - 2}};
                for (int si = 0; si < 3; si++) {
                    lh_paged_attn_params sp = prm;
                    sp.sparse_local_blocks = sel[si][0];
                    sp.sparse_top_k = sel[si][1];
                    for (int ti = 0; ti < 2; ti++) {
                        fill_sentinel(os, nq);
                        CU_ASSERT_EQUAL(attn_batch(ti ? c1 : c2, &b, &p, q, &sp, os), LH_OK);
                        bool same = memcmp(od, os, (size_t)nq * sizeof(float)) == 0;
                        if (!same)
                            printf("\n    FAIL %s block %lld k %s params %d local %lld top_k %lld "
                                   "(%d threads): differs from dense",
                                   lh_k_isa_name(isa), (long long)bs, dtn(kdt), pv,
                                   (long long)sel[si][0], (long long)sel[si][1], ti ? 1 : 2);
                        CU_ASSERT_TRUE(same);
                        runs++;
                    }
                }
            }
            bpool_free(&p);
            bset_free(&b);
        }
    printf("\n    %s: %ld comparisons", lh_k_isa_name(isa), runs);
    free(q);
    free(od);
    free(os);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
}
KT_ISA_TESTS(sparse_covering_is_dense)

/* ---- sparse: small top_k against a reference that selects on its own ------------------------- */

typedef struct cand {
    double bound;
    int64_t blk;
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->bound != y->bound)
        return x->bound > y->bound ? -1 : 1;
    return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/* The blocks (query at qp, kv head kvh) attends to, use[block] = 1; keys are the sequence's
 * keys as written. Returns false when the k-th and the next candidate are too close to call
 * (float vs double rounding could order them either way). */
static bool ref_select(const float *qv, const float *keys, int64_t S, int64_t KVH, int64_t D,
                       int64_t bs, int64_t kvh, int64_t qp, int64_t window, int64_t chunk,
                       int64_t local, int64_t top_k, unsigned char *use)
{
    const int64_t nb = (S + bs - 1) / bs;
    memset(use, 0, (size_t)nb);
    int64_t first = -1;
    for (int64_t p = 0; p <= qp && first < 0; p++)
        if (kt_visible(p, qp, window, chunk))
            first = p;
    const int64_t vb0 = first / bs, vb1 = qp / bs;
    int64_t n_local = 0;
    for (int64_t blk = vb1; blk >= vb0 && n_local < local; blk--, n_local++)
        use[blk] = 1;
    cand *c = malloc((size_t)nb * sizeof(cand));
    int64_t nc = 0;
    double mag = 0;
    for (int64_t blk = vb0; blk <= vb1; blk++) {
        if (use[blk])
            continue;
        double bound = 0;
        for (int64_t d = 0; d < D; d++) {
            double mn = INFINITY, mx = -INFINITY;
            for (int64_t p = blk * bs; p < (blk + 1) * bs && p < S; p++) {
                mn = fmin(mn, keys[(p * KVH + kvh) * D + d]);
                mx = fmax(mx, keys[(p * KVH + kvh) * D + d]);
            }
            bound += fmax((double)qv[d] * mn, (double)qv[d] * mx);
            mag += fabs((double)qv[d]) * fmax(fabs(mn), fabs(mx));
        }
        c[nc].bound = bound;
        c[nc].blk = blk;
        nc++;
    }
    qsort(c, (size_t)nc, sizeof *c, cand_cmp);
    bool clear = true;
    for (int64_t i = 0; i < nc && i < top_k; i++)
        use[c[i].blk] = 1;
    if (top_k < nc && top_k > 0 && c[top_k - 1].bound - c[top_k].bound < 2e-5 * (mag / (double)nc + 1e-3))
        clear = false;
    free(c);
    return clear;
}

/* softcap 0: plain; > 0: q scaled by 12 and the scores of the chosen blocks capped, the
 * selection still by the raw bound (as the kernels rank) */
static void sparse_vs_ref(lh_k_isa isa, float softcap)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(softcap > 0 ? 1718 : 1717);
    const int64_t H = 4, KVH = 2, D = 32;
    static const bseq seqs[4] = {{300, 1, 0}, {120, 3, 1}, {40, 40, 4}, {200, 10, 44}};
    const int64_t T = 54, nq = T * H * D;
    float *q = malloc((size_t)nq * sizeof(float)), *o = malloc((size_t)nq * sizeof(float));
    float *od = malloc((size_t)nq * sizeof(float));
    double *ref = malloc((size_t)D * sizeof(double));
    for (int64_t i = 0; i < nq; i++)
        q[i] = kt_uniform() * (softcap > 0 ? 12.0f : 1.0f);
    long rows = 0, unclear = 0, pruned = 0;
    const int64_t bsz[2] = {4, 16};
    for (int bi = 0; bi < 2; bi++)
        for (int ci = 0; ci < 2; ci++) {
            const int64_t bs = bsz[bi];
            const lh_dtype kdt = ci ? LH_DTYPE_FP8_E4M3 : LH_DTYPE_F32;
            const lh_dtype vdt = ci ? LH_DTYPE_BF16 : LH_DTYPE_F32;
            bset b;
            bset_init(&b, seqs, 4, T, H, KVH, D, bs);
            bpool p;
            bpool_init(&p, kdt, vdt, (bi + ci) % 2 ? LH_KV_HND : LH_KV_NHD, bs, KVH, D, b.NB,
                       true);
            CU_ASSERT_EQUAL_FATAL(bset_fill(ctx, &b, &p, NULL, false), LH_OK);
            for (int64_t local = 1; local <= 2; local++)
                for (int64_t top_k = 0; top_k <= 3; top_k += local == 1 ? 1 : 3)
                    for (int mv = 0; mv < 2; mv++) {
                        lh_paged_attn_params prm = {.struct_size = sizeof prm,
                                                    .scale = 1.0f / sqrtf((float)D),
                                                    .sliding_window = mv ? 150 : 0,
                                                    .sparse_top_k = top_k,
                                                    .sparse_local_blocks = local,
                                                    .softcap = softcap};
                        lh_paged_attn_params dense = prm;
                        dense.sparse_top_k = dense.sparse_local_blocks = 0;
                        char what[160];
                        snprintf(what, sizeof what,
                                 "%s block %lld k %s v %s local %lld top_k %lld window %lld "
                                 "softcap %g",
                                 lh_k_isa_name(isa), (long long)bs, dtn(kdt), dtn(vdt),
                                 (long long)local, (long long)top_k,
                                 (long long)prm.sliding_window, (double)softcap);
                        CU_ASSERT_EQUAL(attn_batch(ctx, &b, &p, q, &prm, o), LH_OK);
                        CU_ASSERT_EQUAL(attn_batch(ctx, &b, &p, q, &dense, od), LH_OK);
                        kt_cmp cr = {0};
                        for (int s = 0; s < b.n; s++) {
                            const int64_t S = b.kv_len[s];
                            float *kd = malloc((size_t)(S * KVH * D) * sizeof(float));
                            float *vd = malloc((size_t)(S * KVH * D) * sizeof(float));
                            unsigned char *use = malloc((size_t)((S + bs - 1) / bs));
                            read_back(&b, &p, s, 0, kd);
                            read_back(&b, &p, s, 1, vd);
                            double vmax = 0;
                            for (int64_t i = 0; i < S * KVH * D; i++)
                                vmax = fmax(vmax, fabs(vd[i]));
                            for (int64_t t = 0; t < b.n_new[s]; t++)
                                for (int64_t h = 0; h < H; h++) {
                                    const int64_t row = b.tok0[s] + t, kvh = h / (H / KVH);
                                    const float *qv = q + (row * H + h) * D;
                                    rows++;
                                    if (!ref_select(qv, b.k[s], S, KVH, D, bs, kvh, b.pos[row],
                                                    prm.sliding_window, 0, local, top_k, use)) {
                                        unclear++;
                                        continue;
                                    }
                                    ref_row_capped(qv, kd, vd, kvh, KVH, D, S, b.pos[row],
                                                   prm.scale, prm.sliding_window, 0, use, bs,
                                                   softcap, ref);
                                    bool differs = false;
                                    for (int64_t d = 0; d < D; d++) {
                                        const int64_t i = (row * H + h) * D + d;
                                        kt_check(&cr, (long)row, o[i], ref[d], 2e-5 * vmax + 1e-6);
                                        differs |= fabs(o[i] - od[i]) > 1e-4;
                                    }
                                    pruned += differs;
                                }
                            free(kd);
                            free(vd);
                            free(use);
                        }
                        KT_REPORT(cr, what);
                    }
            bpool_free(&p);
            bset_free(&b);
        }
    printf("\n    %s%s: %ld rows, %ld too close to call, %ld changed by the selection",
           lh_k_isa_name(isa), softcap > 0 ? " (soft-capped)" : "", rows, unclear, pruned);
    CU_ASSERT_TRUE(unclear * 50 < rows); /* the comparison covers nearly every row */
    CU_ASSERT_TRUE(pruned * 4 > rows);   /* and the selection really leaves blocks out */
    free(q);
    free(o);
    free(od);
    free(ref);
    lh_k_ctx_free(ctx);
}

static void sparse_vs_reference(lh_k_isa isa)
{
    sparse_vs_ref(isa, 0.0f);
}
KT_ISA_TESTS(sparse_vs_reference)

static void sparse_softcap_vs_reference(lh_k_isa isa)
{
    sparse_vs_ref(isa, 3.0f);
}
KT_ISA_TESTS(sparse_softcap_vs_reference)

/* Equal bounds: every block holds the same keys, so every candidate ties and the lower
 * logical blocks win; the values differ per block, so the output tells which were chosen. */
static void test_sparse_ties(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(99);
    const int64_t H = 2, KVH = 1, D = 8, bs = 4;
    static const bseq seqs[1] = {{40, 1, 0}};
    bset b;
    bset_init(&b, seqs, 1, 1, H, KVH, D, bs);
    for (int64_t p = 0; p < 40; p++)
        for (int64_t d = 0; d < D; d++)
            b.k[0][p * D + d] = b.k[0][(p % bs) * D + d];
    bpool p;
    bpool_init(&p, LH_DTYPE_F32, LH_DTYPE_F32, LH_KV_NHD, bs, KVH, D, b.NB, true);
    CU_ASSERT_EQUAL_FATAL(bset_fill(ctx, &b, &p, NULL, false), LH_OK);
    float q[2 * 8], o[2 * 8];
    for (int i = 0; i < 16; i++)
        q[i] = kt_uniform();
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 0.5f, .sparse_top_k = 3,
                                .sparse_local_blocks = 2};
    CU_ASSERT_EQUAL(attn_batch(ctx, &b, &p, q, &prm, o), LH_OK);
    /* chosen: local blocks 9, 8; ties among 0..7: the lowest three, 0, 1, 2 */
    unsigned char use[10] = {1, 1, 1, 0, 0, 0, 0, 0, 1, 1};
    kt_cmp c = {0};
    double ref[8];
    for (int64_t h = 0; h < H; h++) {
        ref_row(q + h * D, b.k[0], b.v[0], 0, KVH, D, 40, 39, prm.scale, 0, 0, use, bs, ref);
        for (int64_t d = 0; d < D; d++)
            kt_check(&c, (long)(h * D + d), o[h * D + d], ref[d], 1e-5);
    }
    KT_REPORT(c, "ties");
    bpool_free(&p);
    bset_free(&b);
    lh_k_ctx_free(ctx);
}

/* ---- attention-logit soft-capping ----------------------------------------------------------- */

/* Soft-capping (Gemma 2: score = cap * tanh(score / cap) before the softmax) through the
 * batched kernel, on inputs where it matters (q scaled by 12: raw scores up to about +-15;
 * caps 2 and 5): batch == per sequence, bit for bit (a mixed prefill / decode batch, flash-
 * decoding splits included); 1 and 3 threads == 2; a covering sparse selection == dense; the
 * capped double-precision reference within 2e-5 max|v| + 1e-6; with windows, chunks and forced
 * splits (params_variant) over mixed-precision pools. Then fused RoPE with the cap == rotate
 * then attend with it, bit for bit, dense and sparse. (The sparse selection with the cap
 * against a reference: sparse_softcap_vs_reference.) */
static void softcap_batch(lh_k_isa isa)
{
    lh_kctx *c1 = kt_ctx(1, isa), *c2 = kt_ctx(2, isa), *c3 = kt_ctx(3, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c3);
    kt_seed(5150);
    const int64_t H = 6, KVH = 2, D = 36, T = MIX_T, nq = T * H * D;
    float *q = malloc((size_t)nq * sizeof(float)), *qr = malloc((size_t)nq * sizeof(float));
    float *ob = malloc((size_t)nq * sizeof(float)), *op = malloc((size_t)nq * sizeof(float));
    float *ot = malloc((size_t)nq * sizeof(float));
    double *ref = malloc((size_t)D * sizeof(double)), *ref0 = malloc((size_t)D * sizeof(double));
    for (int64_t i = 0; i < nq; i++)
        q[i] = kt_uniform() * 12.0f;
    static const lh_dtype kdts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_FP8_E4M3};
    static const lh_dtype vdts[3] = {LH_DTYPE_F32, LH_DTYPE_FP8_E4M3, LH_DTYPE_F16};
    static const int64_t bss[2] = {1, 16};
    static const float caps[2] = {2.0f, 5.0f};
    long runs = 0;
    double effect = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int bi = 0; bi < 2; bi++) {
            const lh_dtype kdt = kdts[pi], vdt = vdts[pi];
            const int64_t bs = bss[bi];
            bset b;
            bset_init(&b, MIX, 5, T, H, KVH, D, bs);
            bpool p;
            bpool_init(&p, kdt, vdt, (pi + bi) % 2 ? LH_KV_HND : LH_KV_NHD, bs, KVH, D, b.NB,
                       true);
            CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &p, NULL, false), LH_OK);
            for (int pv = 0; pv < 3; pv++)
                for (int cj = 0; cj < 2; cj++) {
                    lh_paged_attn_params prm = params_variant(pv, D);
                    prm.softcap = caps[cj];
                    char what[160];
                    snprintf(what, sizeof what, "%s softcap %g k %s v %s block %lld params %d",
                             lh_k_isa_name(isa), (double)prm.softcap, dtn(kdt), dtn(vdt),
                             (long long)bs, pv);
                    fill_sentinel(ob, nq);
                    fill_sentinel(op, nq);
                    CU_ASSERT_EQUAL(attn_batch(c2, &b, &p, q, &prm, ob), LH_OK);
                    CU_ASSERT_EQUAL(attn_per_seq(c2, &b, &p, q, &prm, op), LH_OK);
                    bool same = memcmp(ob, op, (size_t)nq * sizeof(float)) == 0;
                    if (!same)
                        printf("\n    FAIL %s: batch differs from per-sequence calls", what);
                    CU_ASSERT_TRUE(same);
                    CU_ASSERT_EQUAL(ob[20 * H * D], SENTINEL); /* the row of no sequence */
                    lh_kctx *others[2] = {c1, c3};
                    for (int oi = 0; oi < 2; oi++) {
                        fill_sentinel(ot, nq);
                        CU_ASSERT_EQUAL(attn_batch(others[oi], &b, &p, q, &prm, ot), LH_OK);
                        CU_ASSERT_EQUAL(memcmp(ob, ot, (size_t)nq * sizeof(float)), 0);
                    }
                    lh_paged_attn_params cover = prm;
                    cover.sparse_local_blocks = 1;
                    cover.sparse_top_k = 1 << 20;
                    fill_sentinel(ot, nq);
                    CU_ASSERT_EQUAL(attn_batch(c2, &b, &p, q, &cover, ot), LH_OK);
                    same = memcmp(ob, ot, (size_t)nq * sizeof(float)) == 0;
                    if (!same)
                        printf("\n    FAIL %s: covering sparse selection differs from dense", what);
                    CU_ASSERT_TRUE(same);
                    kt_cmp cr = {0};
                    for (int s = 0; s < b.n; s++) {
                        if (b.n_new[s] == 0)
                            continue;
                        const int64_t S = b.kv_len[s];
                        float *kd = malloc((size_t)(S * KVH * D) * sizeof(float));
                        float *vd = malloc((size_t)(S * KVH * D) * sizeof(float));
                        read_back(&b, &p, s, 0, kd);
                        read_back(&b, &p, s, 1, vd);
                        double vmax = 0;
                        for (int64_t i = 0; i < S * KVH * D; i++)
                            vmax = fmax(vmax, fabs(vd[i]));
                        for (int64_t t = 0; t < b.n_new[s]; t++)
                            for (int64_t h = 0; h < H; h++) {
                                const int64_t row = b.tok0[s] + t, kvh = h / (H / KVH);
                                const float *qv = q + (row * H + h) * D;
                                ref_row_capped(qv, kd, vd, kvh, KVH, D, S, b.pos[row], prm.scale,
                                               prm.sliding_window, prm.chunk_size, NULL, bs,
                                               prm.softcap, ref);
                                ref_row(qv, kd, vd, kvh, KVH, D, S, b.pos[row], prm.scale,
                                        prm.sliding_window, prm.chunk_size, NULL, bs, ref0);
                                for (int64_t d = 0; d < D; d++) {
                                    kt_check(&cr, (long)row, ob[(row * H + h) * D + d], ref[d],
                                             2e-5 * vmax + 1e-6);
                                    effect = fmax(effect, fabs(ref[d] - ref0[d]) / vmax);
                                }
                            }
                        free(kd);
                        free(vd);
                    }
                    KT_REPORT(cr, what);
                    runs++;
                }
            bpool_free(&p);
            bset_free(&b);
        }
    /* fused RoPE: the pool holds keys rotated on the way in; q rotated by the kernel == q
     * rotated first */
    lh_rope rope;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&rope, D, 10000.0, NULL, 2048), LH_OK);
    bset b;
    bset_init(&b, MIX, 5, T, H, KVH, D, 16);
    bpool p;
    bpool_init(&p, LH_DTYPE_BF16, LH_DTYPE_F32, LH_KV_NHD, 16, KVH, D, b.NB, true);
    CU_ASSERT_EQUAL_FATAL(bset_fill(c2, &b, &p, &rope, false), LH_OK);
    rotate_q(c2, &b, &rope, q, qr);
    for (int sp = 0; sp < 2; sp++) {
        lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 1.0f / sqrtf((float)D),
                                    .softcap = 3.0f};
        if (sp) {
            prm.sparse_local_blocks = 1;
            prm.sparse_top_k = 2;
        }
        lh_paged_attn_params pr = prm;
        pr.rope = &rope;
        fill_sentinel(ob, nq);
        fill_sentinel(op, nq);
        CU_ASSERT_EQUAL(attn_batch(c2, &b, &p, q, &pr, ob), LH_OK);
        CU_ASSERT_EQUAL(attn_batch(c2, &b, &p, qr, &prm, op), LH_OK);
        bool same = memcmp(ob, op, (size_t)nq * sizeof(float)) == 0;
        if (!same)
            printf("\n    FAIL %s softcap 3%s: fused RoPE differs from rotate-then-attend",
                   lh_k_isa_name(isa), sp ? " (sparse)" : "");
        CU_ASSERT_TRUE(same);
    }
    bpool_free(&p);
    bset_free(&b);
    lh_k_rope_free(&rope);
    printf("\n    %s: %ld configurations; the cap moves the output by up to %.3g max|v|",
           lh_k_isa_name(isa), runs, effect);
    CU_ASSERT_TRUE(effect > 0.1); /* inputs where the cap matters */
    free(q);
    free(qr);
    free(ob);
    free(op);
    free(ot);
    free(ref);
    free(ref0);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c3);
}
KT_ISA_TESTS(softcap_batch)

/* ---- key summaries -------------------------------------------------------------------------- */

/* The summaries of (phys, kv head) equal the elementwise min / max of keys[p0..p1). */
static bool summary_is(const bpool *p, int64_t phys, int64_t h, const float *keys, int64_t KVH,
                       int64_t D, int64_t p0, int64_t p1)
{
    bool ok = true;
    for (int64_t d = 0; d < D; d++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t pp = p0; pp < p1; pp++) {
            mn = fminf(mn, keys[(pp * KVH + h) * D + d]);
            mx = fmaxf(mx, keys[(pp * KVH + h) * D + d]);
        }
        const int64_t i = (phys * KVH + h) * D + d;
        ok = ok && p->kmin[i] == mn && p->kmax[i] == mx;
    }
    return ok;
}

static bool summary_untouched(const bpool *p, int64_t phys)
{
    const unsigned char *a = (const unsigned char *)(p->kmin + phys * p->KVH * p->D);
    const unsigned char *b = (const unsigned char *)(p->kmax + phys * p->KVH * p->D);
    for (size_t i = 0; i < (size_t)(p->KVH * p->D) * sizeof(float); i++)
        if (a[i] != 0xff || b[i] != 0xff)
            return false;
    return true;
}

static void test_summaries(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(123);
    const int64_t KVH = 2, D = 16, bs = 8, row = KVH * D;
    static const bseq seqs[2] = {{24, 0, 0}, {16, 0, 0}};
    bset b;
    bset_init(&b, seqs, 2, 1, 1, KVH, D, bs);
    /* fp8 keys: the summaries are of the keys as given, not of what fp8 keeps */
    bpool p;
    bpool_init(&p, LH_DTYPE_FP8_E4M3, LH_DTYPE_F16, LH_KV_HND, bs, KVH, D, b.NB, true);
    const int32_t *A = b.tables[0], *B = b.tables[1];
    float *ka = b.k[0], *kb = b.k[1];
    /* 1: A [0, 5), B [0, 3): both start at a block's first token */
    int64_t from[2] = {0, 0}, to[2] = {5, 3};
    CU_ASSERT_EQUAL_FATAL(bset_write(ctx, &b, &p, from, to, NULL, false), LH_OK);
    for (int64_t h = 0; h < KVH; h++) {
        CU_ASSERT_TRUE(summary_is(&p, A[0], h, ka, KVH, D, 0, 5));
        CU_ASSERT_TRUE(summary_is(&p, B[0], h, kb, KVH, D, 0, 3));
    }
    CU_ASSERT_TRUE(summary_untouched(&p, A[1]));
    CU_ASSERT_TRUE(summary_untouched(&p, B[1]));
    /* 2: A [5, 11) starts inside block 0 (widened) and fills block 1 from its start; B [3, 4) */
    from[0] = 5, to[0] = 11, from[1] = 3, to[1] = 4;
    CU_ASSERT_EQUAL_FATAL(bset_write(ctx, &b, &p, from, to, NULL, false), LH_OK);
    for (int64_t h = 0; h < KVH; h++) {
        CU_ASSERT_TRUE(summary_is(&p, A[0], h, ka, KVH, D, 0, 8));
        CU_ASSERT_TRUE(summary_is(&p, A[1], h, ka, KVH, D, 8, 11));
        CU_ASSERT_TRUE(summary_is(&p, B[0], h, kb, KVH, D, 0, 4));
    }
    CU_ASSERT_TRUE(summary_untouched(&p, A[2]));
    /* 3: new keys for A's positions 8, 9 (a rewrite from block 1's first token): reset, so
     * neither the old 8..10 nor anything else counts */
    for (int64_t i = 8 * row; i < 10 * row; i++)
        ka[i] = kt_uniform() * 0.25f;
    from[0] = 8, to[0] = 10, from[1] = to[1] = 4;
    CU_ASSERT_EQUAL_FATAL(bset_write(ctx, &b, &p, from, to, NULL, false), LH_OK);
    for (int64_t h = 0; h < KVH; h++)
        CU_ASSERT_TRUE(summary_is(&p, A[1], h, ka, KVH, D, 8, 10));
    /* 4: the single-sequence write keeps them too: A [10, 13) inside block 1 */
    lh_tensor tk = kt_t3(LH_DTYPE_F32, ka + 10 * row, 3, KVH, D);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, b.v[0] + 10 * row, 3, KVH, D);
    CU_ASSERT_EQUAL_FATAL(lh_k_paged_kv_write(ctx, &p.kv, A, b.n_blocks[0], 10, &tk, &tv), LH_OK);
    for (int64_t h = 0; h < KVH; h++)
        CU_ASSERT_TRUE(summary_is(&p, A[1], h, ka, KVH, D, 8, 13));
    /* 5: fused RoPE: B [4, 11): the rotated keys, block 0 widened, block 1 fresh */
    lh_rope rope;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&rope, D, 10000.0, NULL, 2048), LH_OK);
    float *rot = malloc((size_t)(16 * row) * sizeof(float));
    memcpy(rot, kb, (size_t)(16 * row) * sizeof(float));
    int32_t pos[16];
    for (int i = 0; i < 16; i++)
        pos[i] = i;
    lh_tensor tr = kt_t3(LH_DTYPE_F32, rot + 4 * row, 7, KVH, D);
    CU_ASSERT_EQUAL(lh_k_rope_apply(ctx, &rope, &tr, pos + 4, 11), LH_OK);
    memcpy(rot, kb, (size_t)(4 * row) * sizeof(float)); /* 0..3 were written unrotated */
    from[0] = to[0] = 13, from[1] = 4, to[1] = 11;
    CU_ASSERT_EQUAL_FATAL(bset_write(ctx, &b, &p, from, to, &rope, false), LH_OK);
    for (int64_t h = 0; h < KVH; h++) {
        CU_ASSERT_TRUE(summary_is(&p, B[0], h, rot, KVH, D, 0, 8));
        CU_ASSERT_TRUE(summary_is(&p, B[1], h, rot, KVH, D, 8, 11));
    }
    free(rot);
    lh_k_rope_free(&rope);
    bpool_free(&p);
    bset_free(&b);
    lh_k_ctx_free(ctx);
}

/* ---- errors --------------------------------------------------------------------------------- */

static bool message_has(const char *err, const char *text)
{
    bool ok = kt_contains(err, text);
    if (!ok)
        printf("\n    message \"%s\" lacks \"%s\"", err ? err : "(null)", text);
    return ok;
}

static void test_batch_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(5);
    const int64_t H = 4, KVH = 2, D = 8, bs = 4;
    static const bseq seqs[2] = {{10, 2, 0}, {9, 2, 2}};
    bset b;
    bset_init(&b, seqs, 2, 4, H, KVH, D, bs);
    bpool p, ps;
    bpool_init(&p, LH_DTYPE_F32, LH_DTYPE_F32, LH_KV_NHD, bs, KVH, D, b.NB, false);
    bpool_init(&ps, LH_DTYPE_F32, LH_DTYPE_F32, LH_KV_NHD, bs, KVH, D, b.NB, true);
    CU_ASSERT_EQUAL_FATAL(bset_fill(ctx, &b, &p, NULL, false), LH_OK);
    CU_ASSERT_EQUAL_FATAL(bset_fill(ctx, &b, &ps, NULL, false), LH_OK);
    float q[4 * 4 * 8] = {0}, o[4 * 4 * 8];
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 4, H, D), to = kt_t3(LH_DTYPE_F32, o, 4, H, D);
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 0.3f};
    lh_paged_batch good = bset_batch(&b), bb;
    const char *err;
#define PAB(pool_, b_, prm_) lh_k_paged_attention_batch(ctx, &tq, &(pool_).kv, (b_), (prm_), &to)
#define EXPECT(call, status, text)                                                                \
    do {                                                                                          \
        CU_ASSERT_EQUAL((call), (status));                                                        \
        err = lh_k_last_error(ctx);                                                               \
        CU_ASSERT_TRUE(message_has(err, (text)));                                                 \
    } while (0)
    CU_ASSERT_EQUAL(PAB(p, &good, &prm), LH_OK);

    /* sparse */
    lh_paged_attn_params sp = prm;
    sp.sparse_local_blocks = 1;
    sp.sparse_top_k = 2;
    EXPECT(PAB(p, &good, &sp), LH_E_USAGE, "needs the key summaries kv.k_min and kv.k_max");
    CU_ASSERT_EQUAL(PAB(ps, &good, &sp), LH_OK);
    sp.sparse_local_blocks = 0;
    EXPECT(PAB(ps, &good, &sp), LH_E_USAGE, "sparse_top_k 2 needs sparse_local_blocks >= 1");
    sp.sparse_local_blocks = -1;
    EXPECT(PAB(ps, &good, &sp), LH_E_USAGE, "must not be negative");
    lh_kv_pages half = ps.kv;
    half.k_max.data = NULL;
    EXPECT(lh_k_paged_attention_batch(ctx, &tq, &half, &good, &prm, &to), LH_E_USAGE,
           "kv.k_max is missing");
    half = ps.kv;
    half.k_min = kt_t3(LH_DTYPE_F32, ps.kmin, b.NB, KVH, D - 1);
    EXPECT(lh_k_paged_attention_batch(ctx, &tq, &half, &good, &prm, &to), LH_E_USAGE,
           "must be [9, 2, 8] (num_blocks, kv_heads, head_dim)");
    /* a struct_size that ends before the sparse fields: dense, even with garbage there */
    lh_paged_attn_params old = {.struct_size = offsetof(lh_paged_attn_params, rope),
                                .scale = 0.3f, .sparse_top_k = -5, .sparse_local_blocks = -5};
    CU_ASSERT_EQUAL(PAB(p, &good, &old), LH_OK);
    /* softcap: finite and >= 0; one before it (ABI 2 callers) reads no cap */
    lh_paged_attn_params sc = prm;
    sc.softcap = -3.0f;
    EXPECT(PAB(p, &good, &sc), LH_E_USAGE,
           "lh_k_paged_attention_batch: softcap -3 must be finite and >= 0 (0: none)");
    sc.softcap = NAN;
    EXPECT(PAB(p, &good, &sc), LH_E_USAGE, "softcap nan must be finite");
    sc.softcap = INFINITY;
    EXPECT(PAB(p, &good, &sc), LH_E_USAGE, "softcap inf must be finite");
    sc.struct_size = offsetof(lh_paged_attn_params, softcap); /* -> never read */
    CU_ASSERT_EQUAL(PAB(p, &good, &sc), LH_OK);
    float *o_nocap = malloc(sizeof o);
    memcpy(o_nocap, o, sizeof o);
    CU_ASSERT_EQUAL(PAB(p, &good, &prm), LH_OK);
    CU_ASSERT_EQUAL(memcmp(o_nocap, o, sizeof o), 0); /* the same as no cap */
    free(o_nocap);

    /* the batch itself */
    EXPECT(PAB(p, NULL, &prm), LH_E_USAGE, "batch is NULL");
    bb = good;
    bb.struct_size = 8;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "batch->struct_size 8 is too small");
    bb = good;
    bb.n_seqs = -1;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "batch->n_seqs -1 is negative");
    bb = good;
    bb.kv_len = NULL;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "batch->kv_len is NULL");
    bb = good;
    bb.positions = NULL;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "batch->positions is NULL");
    int64_t nn[2] = {2, -1};
    bb = good;
    bb.n_new = nn;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "sequence 1: n_new[1] = -1 is negative");
    int64_t ts[2] = {0, 3};
    bb = good;
    bb.token_start = ts;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "sequence 1: rows [3, 5) (token_start, n_new) are "
                                          "outside the 4 rows of q");
    int64_t lens[2] = {10, -2};
    bb = good;
    bb.kv_len = lens;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "sequence 1: kv_len[1] = -2 is negative");
    lens[1] = 8; /* position 8 is past the context */
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE,
           "sequence 1: positions[3] = 8 is outside the cached context [0, 8)");
    /* overlapping rows: sorted starts and not */
    int64_t ov[2] = {0, 1};
    bb = good;
    bb.token_start = ov;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE,
           "the rows of sequences 0 [0, 2) and 1 [1, 3) overlap");
    int64_t ov2[2] = {2, 1};
    bb.token_start = ov2;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE, "the rows of sequences 0 [2, 4) and 1 [1, 3) overlap");
    /* tables */
    int64_t nb[2] = {3, 2};
    bb = good;
    bb.n_blocks = nb;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE,
           "sequence 1: the tokens need 3 logical blocks of 4, but block_tables[1] has 2 entries");
    int32_t bad_tab[3] = {0, 99, 1};
    const int32_t *tabs[2] = {b.tables[0], bad_tab};
    bb = good;
    bb.block_tables = tabs;
    EXPECT(PAB(p, &bb, &prm), LH_E_USAGE,
           "sequence 1: block_tables[1][1] = 99 is not a block of the pool");
    /* a sequence without new rows is skipped whatever its table */
    int64_t nn0[2] = {2, 0};
    const int32_t *tabs0[2] = {b.tables[0], NULL};
    bb = good;
    bb.n_new = nn0;
    bb.block_tables = tabs0;
    CU_ASSERT_EQUAL(PAB(p, &bb, &prm), LH_OK);
    /* out overlapping q */
    CU_ASSERT_EQUAL(lh_k_paged_attention_batch(ctx, &tq, &p.kv, &good, &prm, &tq), LH_E_USAGE);
    /* fused RoPE with a table wider than the heads */
    lh_rope wide;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&wide, 16, 10000.0, NULL, 100), LH_OK);
    lh_paged_attn_params pr = prm;
    pr.rope = &wide;
    EXPECT(PAB(p, &good, &pr), LH_E_USAGE, "rotary_dim 16 > head_dim 8");

    /* writes */
    float kv[4 * 2 * 8];
    for (int i = 0; i < 64; i++)
        kv[i] = kt_uniform();
    lh_tensor tk = kt_t3(LH_DTYPE_F32, kv, 4, KVH, D);
    unsigned char *snap = malloc(p.kbytes);
    memcpy(snap, p.k, p.kbytes);
#define KWB(b_, rope_) lh_k_paged_kv_write_batch(ctx, &p.kv, (b_), &tk, &tk, (rope_))
    CU_ASSERT_EQUAL(KWB(&good, NULL), LH_OK);
    memcpy(snap, p.k, p.kbytes);
    bb = good;
    bb.token_start = (int64_t[2]){3, 0};
    EXPECT(KWB(&bb, NULL), LH_E_USAGE,
           "sequence 0: rows [3, 5) (token_start, n_new) are outside the 4 rows of k and v");
    bb.token_start = (int64_t[2]){2, 0};
    bb.n_new = (int64_t[2]){2, 2};
    bb.kv_len = (int64_t[2]){10, 1};
    EXPECT(KWB(&bb, NULL), LH_E_USAGE, "sequence 1: n_new[1] = 2 exceeds kv_len[1] = 1");
    bb = good;
    bb.kv_len = (int64_t[2]){13, 9};
    EXPECT(KWB(&bb, NULL), LH_E_USAGE,
           "sequence 0: positions [11, 13) do not fit the 3 blocks of 4 tokens in block_tables[0]");
    /* the same physical block for both sequences */
    int32_t shared[3] = {b.tables[0][0], b.tables[0][1], b.tables[0][2]};
    const int32_t *tabs_sh[2] = {b.tables[0], shared};
    bb = good;
    bb.block_tables = tabs_sh;
    EXPECT(KWB(&bb, NULL), LH_E_USAGE, "are the same physical block");
    CU_ASSERT_EQUAL(memcmp(snap, p.k, p.kbytes), 0); /* nothing written */
    /* within one table (the single-sequence entry point) */
    int32_t dup[3] = {b.tables[0][0], b.tables[0][0], b.tables[0][2]};
    lh_tensor t8 = kt_t3(LH_DTYPE_F32, kv, 4, KVH, D);
    EXPECT(lh_k_paged_kv_write(ctx, &p.kv, dup, 3, 2, &t8, &t8), LH_E_USAGE,
           "block_table[0] and block_table[1] are the same physical block");
    CU_ASSERT_EQUAL(memcmp(snap, p.k, p.kbytes), 0);
    /* fused RoPE needs the positions, inside the context */
    lh_rope rope;
    CU_ASSERT_EQUAL_FATAL(lh_k_rope_init(&rope, D, 10000.0, NULL, 100), LH_OK);
    bb = good;
    bb.positions = NULL;
    EXPECT(KWB(&bb, &rope), LH_E_USAGE, "batch->positions is NULL");
    CU_ASSERT_EQUAL(KWB(&bb, NULL), LH_OK); /* without rope they are not read */
    int32_t far[4] = {8, 9, 20, 8};
    bb = good;
    bb.positions = far;
    EXPECT(KWB(&bb, &rope), LH_E_USAGE, "sequence 1: positions[2] = 20 is outside");
    EXPECT(KWB(&good, &wide), LH_E_USAGE, "rotary_dim 16 > head_dim 8");
    /* k and v overlapping the pool */
    lh_tensor inpool = kt_t3(LH_DTYPE_F32, p.v, 4, KVH, D);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write_batch(ctx, &p.kv, &good, &inpool, &tk, NULL), LH_E_USAGE);

    /* mixed-precision pools: each fp8 tensor needs its own scales */
    bpool m;
    bpool_init(&m, LH_DTYPE_FP8_E4M3, LH_DTYPE_BF16, LH_KV_HND, bs, KVH, D, b.NB, false);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write_batch(ctx, &m.kv, &good, &tk, &tk, NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_k_paged_attention_batch(ctx, &tq, &m.kv, &good, &prm, &to), LH_OK);
    lh_kv_pages mk = m.kv;
    mk.k_scale.data = NULL;
    EXPECT(lh_k_paged_attention_batch(ctx, &tq, &mk, &good, &prm, &to), LH_E_USAGE,
           "kv.k_scale");
    mk = m.kv;
    mk.v.dtype = LH_DTYPE_FP8_E4M3; /* fp8 values, no v_scale */
    EXPECT(lh_k_paged_attention_batch(ctx, &tq, &mk, &good, &prm, &to), LH_E_USAGE,
           "kv.v_scale");
    bpool_free(&m);

    /* one latent for keys and values: v NULL exactly for a pool whose v is its k */
    memcpy(snap, p.k, p.kbytes);
    unsigned char *snap_v = malloc(p.vbytes);
    memcpy(snap_v, p.v, p.vbytes);
    lh_tensor t2 = kt_t3(LH_DTYPE_F32, kv, 2, KVH, D);
    EXPECT(lh_k_paged_kv_write_batch(ctx, &p.kv, &good, &tk, NULL, NULL), LH_E_USAGE,
           "lh_k_paged_kv_write_batch: v is NULL, but the pool's kv.v is not its kv.k");
    EXPECT(lh_k_paged_kv_write(ctx, &p.kv, b.tables[0], b.n_blocks[0], 8, &t2, NULL), LH_E_USAGE,
           "lh_k_paged_kv_write: v is NULL, but the pool's kv.v is not its kv.k");
    CU_ASSERT_EQUAL(memcmp(snap, p.k, p.kbytes), 0); /* nothing written */
    CU_ASSERT_EQUAL(memcmp(snap_v, p.v, p.vbytes), 0);
    free(snap_v);
    lh_kv_pages part = p.kv; /* v inside k, but not k itself */
    part.v.data = (float *)p.k + D;
    EXPECT(lh_k_paged_attention_batch(ctx, &tq, &part, &good, &prm, &to), LH_E_USAGE,
           "kv.k and kv.v overlap");
    bpool sh;
    bpool_init_shared(&sh, LH_DTYPE_FP8_E4M3, LH_KV_NHD, bs, KVH, D, b.NB, true);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write_batch(ctx, &sh.kv, &good, &tk, NULL, NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &sh.kv, b.tables[0], b.n_blocks[0], 8, &t2, NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(lh_k_paged_attention_batch(ctx, &tq, &sh.kv, &good, &prm, &to), LH_OK);
    unsigned char *snap_sh = malloc(sh.kbytes);
    memcpy(snap_sh, sh.k, sh.kbytes);
    EXPECT(lh_k_paged_kv_write_batch(ctx, &sh.kv, &good, &tk, &tk, NULL), LH_E_USAGE,
           "the pool's kv.v is its kv.k (one latent for keys and values): pass v NULL");
    EXPECT(lh_k_paged_kv_write(ctx, &sh.kv, b.tables[0], b.n_blocks[0], 8, &t2, &t2), LH_E_USAGE,
           "lh_k_paged_kv_write: the pool's kv.v is its kv.k");
    CU_ASSERT_EQUAL(memcmp(snap_sh, sh.k, sh.kbytes), 0);
    float *other = malloc((size_t)(b.NB * KVH) * sizeof(float));
    memcpy(other, sh.ks, (size_t)(b.NB * KVH) * sizeof(float));
    lh_kv_pages bad = sh.kv; /* the same latent with scales of its own for the values */
    bad.v_scale = kt_t2(LH_DTYPE_F32, other, b.NB, KVH);
    EXPECT(lh_k_paged_attention_batch(ctx, &tq, &bad, &good, &prm, &to), LH_E_USAGE,
           "kv.v is kv.k (fp8), but kv.v_scale is not kv.k_scale");
    EXPECT(lh_k_paged_kv_write_batch(ctx, &bad, &good, &tk, NULL, NULL), LH_E_USAGE,
           "kv.v_scale is not kv.k_scale");
    bad = sh.kv;
    bad.v.dtype = LH_DTYPE_BF16;
    EXPECT(lh_k_paged_kv_write_batch(ctx, &bad, &good, &tk, NULL, NULL), LH_E_USAGE,
           "kv.v shares kv.k's data but has dtype bf16, not kv.k's fp8_e4m3");
    CU_ASSERT_EQUAL(memcmp(snap_sh, sh.k, sh.kbytes), 0);
    free(other);
    free(snap_sh);
    bpool_free(&sh);
#undef KWB
#undef PAB
#undef EXPECT
    free(snap);
    lh_k_rope_free(&rope);
    lh_k_rope_free(&wide);
    bpool_free(&p);
    bpool_free(&ps);
    bset_free(&b);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo batch_tests[] = {
    {"batch == per sequence, every k/v dtype pair, vs reference (scalar)", batch_vs_per_seq_scalar},
    {"batch == per sequence, every k/v dtype pair, vs reference (avx2)", batch_vs_per_seq_avx2},
    {"batch == per sequence, every k/v dtype pair, vs reference (avx512)", batch_vs_per_seq_avx512},
    {"fused RoPE == rotate then attend (scalar)", fused_rope_scalar},
    {"fused RoPE == rotate then attend (avx2)", fused_rope_avx2},
    {"fused RoPE == rotate then attend (avx512)", fused_rope_avx512},
    {"latent pool (v is k, head_dim 576, 1 kv head): keys-only writes, attention == "
     "lh_k_attention (scalar)",
     latent_pool_scalar},
    {"latent pool (v is k, head_dim 576, 1 kv head): keys-only writes, attention == "
     "lh_k_attention (avx2)",
     latent_pool_avx2},
    {"latent pool (v is k, head_dim 576, 1 kv head): keys-only writes, attention == "
     "lh_k_attention (avx512)",
     latent_pool_avx512},
    {"softcap: batch == per sequence, vs reference, fused RoPE (scalar)", softcap_batch_scalar},
    {"softcap: batch == per sequence, vs reference, fused RoPE (avx2)", softcap_batch_avx2},
    {"softcap: batch == per sequence, vs reference, fused RoPE (avx512)", softcap_batch_avx512},
    {"key summaries: reset at block start, widened inside", test_summaries},
    {"argument errors", test_batch_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo sparse_tests[] = {
    {"covering selection == dense, bit for bit (scalar)", sparse_covering_is_dense_scalar},
    {"covering selection == dense, bit for bit (avx2)", sparse_covering_is_dense_avx2},
    {"covering selection == dense, bit for bit (avx512)", sparse_covering_is_dense_avx512},
    {"small top_k vs independent reference (scalar)", sparse_vs_reference_scalar},
    {"small top_k vs independent reference (avx2)", sparse_vs_reference_avx2},
    {"small top_k vs independent reference (avx512)", sparse_vs_reference_avx512},
    {"equal bounds go to the lower blocks", test_sparse_ties},
    {"soft-capped, small top_k vs independent reference (scalar)",
     sparse_softcap_vs_reference_scalar},
    {"soft-capped, small top_k vs independent reference (avx2)", sparse_softcap_vs_reference_avx2},
    {"soft-capped, small top_k vs independent reference (avx512)",
     sparse_softcap_vs_reference_avx512},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"paged batch", NULL, NULL, NULL, NULL, batch_tests},
    {"paged sparse", NULL, NULL, NULL, NULL, sparse_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
