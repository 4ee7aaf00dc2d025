/* The KV write of the paged cache on CUDA, for a packed batch of sequences (the semantics of
 * lh_k_paged_kv_write_batch; CPU twin: cpu/paged_kv_write.c).
 *
 * One CTA per (touched logical block of a sequence, kv head): a (block, head) belongs to
 * exactly one CTA (the dispatch checks that no physical block is touched twice in one call),
 * so its fp8 scale, the re-encoding of its existing tokens and its key summaries need no
 * synchronization beyond the CTA. A thread owns dimensions d and walks the CTA's tokens in
 * position order, which keeps the min/max summaries bit for bit those of the CPU (the order
 * decides which of +0 and -0 a tie keeps). Fused RoPE recomputes each rotated key element where
 * it is needed (cos/sin in double, rounded as lh_cpu_rope_cos_sin; no FMA, as torch), so the
 * stored keys are those of rotate-then-write (either pair layout, lh_rope.interleaved).
 * v NULL (multi-head latent attention: the pool's v is its k) writes the keys and their
 * summaries only.
 *
 * Graphs: the host builds a list of work items, padded to a bound that depends only on the
 * sequences' n_new and the block size (a decode step of n_new = 1 per sequence has one item
 * per sequence whatever kv_len is); padding items have count 0 and exit. Positions (fused
 * RoPE) are packed per sequence, so every staged size depends on n_seqs and the n_new only. */
#include "lh_kernels.h"

/* cpu_kernels.h declares these without a C linkage block; declaring them extern "C" first
 * gives the later declarations C linkage too (they are defined in C). */
extern "C" {
lh_status lh_kerr(lh_kctx *ctx, lh_status st, const char *fmt, ...);
const float *lh_cpu_rope_inv(const lh_rope *rope, int64_t seq_len, float *buf);
}

#include "cuda_rt.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One (sequence, touched logical block): tokens [first, first + count) of physical block phys
 * come from rows r0 .. r0 + count - 1 of k / v; their positions (fused RoPE) are
 * pos[pofs ..]. */
typedef struct kw_item {
    int64_t r0, pofs;
    int32_t phys, first, count, seq;
} kw_item;

typedef struct kw_args {
    unsigned char *k, *v;
    float *k_scale, *v_scale, *k_min, *k_max;
    int k_dt, v_dt;
    int64_t block_elems, tok_stride, head_stride, kvh, d;
    const float *kin, *vin;
    const kw_item *items;
    const int32_t *pos; /* packed positions (fused RoPE) */
    const float *inv;   /* [n_seqs, rot / 2] (fused RoPE) */
    int rope, rot;
    float att;
    int inter; /* interleaved RoPE pairs (2i, 2i + 1) */
} kw_args;

/* Element d of row r of the item's keys (rotated) or values, as the CPU stores it. The RoPE
 * pair (lo, hi) of frequency i is (i, half + i), or (2i, 2i + 1) interleaved; lo' = lo c - hi s,
 * hi' = hi c + lo s. */
static __device__ float kw_src(const kw_args &a, const kw_item &it, bool key, int64_t kvh,
                               int64_t r, int64_t d)
{
    const float *src = (key ? a.kin : a.vin) + ((it.r0 + r) * a.kvh + kvh) * a.d;
    const float x = src[d];
    if (!key || !a.rope || d >= a.rot)
        return x;
    const int half = a.rot / 2, di = (int)d;
    const bool lo = a.inter ? (di & 1) == 0 : di < half;
    const int i = a.inter ? di >> 1 : lo ? di : di - half;
    const int partner = a.inter ? (lo ? di + 1 : di - 1) : (lo ? di + half : di - half);
    const float f = __fmul_rn((float)a.pos[it.pofs + r], a.inv[(int64_t)it.seq * half + i]);
    const float c = __fmul_rn((float)cos((double)f), a.att);
    const float s = __fmul_rn((float)sin((double)f), a.att);
    if (lo)
        return __fsub_rn(__fmul_rn(x, c), __fmul_rn(src[partner], s));
    return __fadd_rn(__fmul_rn(x, c), __fmul_rn(src[partner], s));
}

/* max over the CTA (blockDim.x a multiple of 32); every thread gets it */
static __device__ float kw_block_max(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads(); /* red may still be read by a previous call */
    if ((threadIdx.x & 31u) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
    for (unsigned w = 1; w < blockDim.x / 32u; w++)
        v = fmaxf(v, red[w]);
    return v;
}

/* Stores the item's keys or values of head kvh (row 0 of the head at element head0). */
static __device__ void kw_store(const kw_args &a, const kw_item &it, bool key, int64_t kvh,
                                int64_t head0, float *red, float *sh)
{
    unsigned char *base = key ? a.k : a.v;
    const int dt = key ? a.k_dt : a.v_dt;
    const int64_t D = a.d, ts = a.tok_stride;
    if (dt != LH_DTYPE_FP8_E4M3) {
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            for (int64_t r = 0; r < it.count; r++) {
                const float x = kw_src(a, it, key, kvh, r, d);
                const int64_t off = head0 + (it.first + r) * ts + d;
                if (dt == LH_DTYPE_F32)
                    ((float *)base)[off] = x;
                else if (dt == LH_DTYPE_BF16)
                    ((uint16_t *)base)[off] = lh_cu_f32_to_bf16(x);
                else
                    ((uint16_t *)base)[off] = lh_cu_f32_to_f16(x);
            }
        return;
    }
    float amax = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
        for (int64_t r = 0; r < it.count; r++)
            amax = fmaxf(amax, fabsf(kw_src(a, it, key, kvh, r, d)));
    amax = kw_block_max(amax, red);
    float *scp = (key ? a.k_scale : a.v_scale) + (int64_t)it.phys * a.kvh + kvh;
    if (threadIdx.x == 0) {
        /* the decision of kw_fp8 (cpu/paged_kv_write.c), made once for the CTA */
        float s, f = 1.0f;
        if (it.first == 0) {
            s = __fdiv_rn(amax, 448.0f);
        } else {
            s = *scp;
            if (amax > 448.0f * s && s == 0.0f) {
                s = __fdiv_rn(amax, 448.0f);
            } else if (amax > 448.0f * s) {
                while (amax > 448.0f * s) {
                    s *= 2.0f;
                    f *= 0.5f;
                }
            }
        }
        *scp = s;
        sh[0] = s;
        sh[1] = f;
    }
    __syncthreads();
    const float s = sh[0], f = sh[1];
    if (f != 1.0f) /* the existing tokens, divided by the power of two the scale grew by */
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            for (int64_t r = 0; r < it.first; r++) {
                unsigned char *p = base + head0 + r * ts + d;
                *p = lh_cu_f32_to_fp8(lh_cu_fp8_to_f32(*p) * f);
            }
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
        for (int64_t r = 0; r < it.count; r++) {
            const float x = kw_src(a, it, key, kvh, r, d);
            base[head0 + (it.first + r) * ts + d] =
                s > 0.0f ? lh_cu_f32_to_fp8(__fdiv_rn(x, s)) : (unsigned char)0;
        }
    __syncthreads(); /* sh is reused by the next call */
}

static __global__ void kw_kernel(const kw_args a)
{
    const kw_item it = a.items[blockIdx.x];
    if (it.count <= 0)
        return; /* padding */
    __shared__ float red[32], sh[2];
    const int64_t kvh = blockIdx.y, D = a.d;
    const int64_t head0 = (int64_t)it.phys * a.block_elems + kvh * a.head_stride;
    if (a.k_min) {
        const int64_t so = ((int64_t)it.phys * a.kvh + kvh) * D;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
            float lo, hi;
            int64_t r = 0;
            if (it.first == 0) { /* the write starts at the block's first token: reset */
                lo = hi = kw_src(a, it, true, kvh, 0, d);
                r = 1;
            } else {
                lo = a.k_min[so + d];
                hi = a.k_max[so + d];
            }
            for (; r < it.count; r++) {
                const float x = kw_src(a, it, true, kvh, r, d);
                lo = x < lo ? x : lo;
                hi = x > hi ? x : hi;
            }
            a.k_min[so + d] = lo;
            a.k_max[so + d] = hi;
        }
    }
    kw_store(a, it, true, kvh, head0, red, sh);
    if (a.vin) /* NULL: keys only (a pool whose v is its k) */
        kw_store(a, it, false, kvh, head0, red, sh);
}

static size_t kw_align(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

extern "C" lh_status lh_cuda_paged_kv_write(lh_kctx *ctx, const char *fn, const lh_cpu_pages *kv,
                                            const lh_cpu_batch *b, const float *k, const float *v,
                                            const lh_rope *rope)
{
    const int64_t bs = kv->block_size, KVH = kv->kv_heads, D = kv->head_dim;
    /* the item bound: a write of n tokens touches at most (n + bs - 2) / bs + 1 blocks,
     * whatever its start */
    int64_t n_items = 0, n_rows = 0;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        const int64_t n = b->n_new[s];
        if (n <= 0)
            continue;
        n_items += (n + bs - 2) / bs + 1;
        n_rows += n;
    }
    if (n_items == 0 || KVH == 0 || D == 0)
        return LH_OK;
    if (n_items > INT32_MAX || KVH > 65535)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "%s: CUDA: %" PRId64 " block writes of %" PRId64
                       " kv heads exceed the launch limits",
                       fn, n_items, KVH);
    const int half = rope ? (int)(rope->rotary_dim / 2) : 0;
    const size_t sz_items = kw_align((size_t)n_items * sizeof(kw_item));
    const size_t sz_pos = rope ? kw_align((size_t)n_rows * sizeof(int32_t)) : 0;
    const size_t sz_inv = rope ? (size_t)b->n_seqs * (size_t)half * sizeof(float) : 0;
    const size_t total = sz_items + sz_pos + sz_inv;
    unsigned char *blob = (unsigned char *)calloc(1, total);
    if (!blob)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%zu bytes of host staging)", fn,
                       total);
    kw_item *items = (kw_item *)(void *)blob;
    int32_t *pos = (int32_t *)(void *)(blob + sz_items);
    float *inv = (float *)(void *)(blob + sz_items + sz_pos);
    int64_t it_n = 0, pofs = 0;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        const int64_t n = b->n_new[s];
        if (n <= 0)
            continue;
        const int64_t len = b->kv_len[s], start = len - n, row0 = b->token_start[s];
        for (int64_t lb = start / bs; lb <= (len - 1) / bs; lb++) {
            const int64_t p0 = start > lb * bs ? start : lb * bs;
            const int64_t p1 = len < (lb + 1) * bs ? len : (lb + 1) * bs;
            kw_item *it = &items[it_n++];
            it->r0 = row0 + (p0 - start);
            it->pofs = pofs + (p0 - start);
            it->phys = b->tables[s][lb];
            it->first = (int32_t)(p0 - lb * bs);
            it->count = (int32_t)(p1 - p0);
            it->seq = (int32_t)s;
        }
        if (rope) {
            memcpy(pos + pofs, b->positions + row0, (size_t)n * sizeof(int32_t));
            float *row = inv + s * half;
            const float *src = lh_cpu_rope_inv(rope, len, row);
            if (src != row)
                memcpy(row, src, (size_t)half * sizeof(float));
        }
        pofs += n;
    }
    /* it_n <= n_items by the bound; the rest stays zero (count 0: padding) */
    lh_status st = LH_OK;
    unsigned char *dev = (unsigned char *)lh_cu_stage(ctx, blob, total, &st);
    free(blob);
    if (!dev)
        return st;
    kw_args a;
    memset(&a, 0, sizeof a);
    a.k = kv->k;
    a.v = kv->v;
    a.k_scale = kv->k_scale;
    a.v_scale = kv->v_scale;
    a.k_min = kv->k_min;
    a.k_max = kv->k_max;
    a.k_dt = (int)kv->k_dtype;
    a.v_dt = (int)kv->v_dtype;
    a.block_elems = kv->block_elems;
    a.tok_stride = kv->tok_stride;
    a.head_stride = kv->head_stride;
    a.kvh = KVH;
    a.d = D;
    a.kin = k;
    a.vin = v;
    a.items = (const kw_item *)(const void *)dev;
    a.pos = rope ? (const int32_t *)(const void *)(dev + sz_items) : NULL;
    a.inv = rope ? (const float *)(const void *)(dev + sz_items + sz_pos) : NULL;
    a.rope = rope ? 1 : 0;
    a.rot = rope ? (int)rope->rotary_dim : 0;
    a.att = rope ? rope->attention_scaling : 1.0f;
    a.inter = rope && rope->interleaved ? 1 : 0;
    const unsigned threads = (unsigned)(D >= 256 ? 256 : (D + 31) / 32 * 32);
    return LH_CU_LAUNCH(ctx, kw_kernel, dim3((unsigned)n_items, (unsigned)KVH), dim3(threads), 0,
                        a);
}
