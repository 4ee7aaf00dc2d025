/* Private to libllmhost_kernels: the execution context, the thread pool, per-ISA primitive
 * tables and the CPU implementations behind kernels/kernel_dispatch.c.
 *
 * Division of labour: kernel_dispatch.c checks every argument (device-independent rules:
 * NULLs, dtypes, ranks, shapes, contiguity, devices) and then calls an lh_cpu_* function
 * below, which may assume valid, contiguous CPU tensors. */
#ifndef LH_CPU_KERNELS_H
#define LH_CPU_KERNELS_H

#include "lh_kernels.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* LH_KERNELS_NO_X86 builds the portable path only, as on other architectures (a build check). */
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(LH_KERNELS_NO_X86)
#define LH_CPU_X86 1
#else
#define LH_CPU_X86 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LH_UNUSED __attribute__((unused))
#define LH_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define LH_UNUSED
#define LH_ALWAYS_INLINE inline
#endif

/* ---- matmul tiling (shared by every ISA so that blocking never depends on threads) ------- */

/* Rows of x per task, rows of w per task, and the K block. A task owns y[m0:m1, n0:n1]; within
 * a task the K loop is blocked by LH_MM_KC, and partial sums of each K block are added in order,
 * so every element of y is computed the same way whatever the thread count. */
#define LH_MM_MB 64
#define LH_MM_NB 48
#define LH_MM_KC 512
/* x rows * K at or below this (256 KiB of floats): the weight-streaming loop order */
#define LH_MM_STREAM_FLOATS (64 * 1024)

/* acc[i * ldacc + j] += sum_{k < kc} x[i * ldx + k] * w[j * ldw + k] for i < mr, j < nr.
 * w is f32, bf16 or f16 (by table slot); ldx, ldw in elements. mr <= tile_mr, nr <= tile_nr
 * when mr > 1; nr <= tile_nr1 when mr == 1. Per element the arithmetic is the same whatever
 * mr and nr are, so a value never depends on where it fell in the tiling. */
typedef void (*lh_cpu_tile_fn)(int mr, int nr, int64_t kc, const float *x, int64_t ldx,
                               const void *w, int64_t ldw, float *acc, int64_t ldacc);

enum { LH_WDT_F32 = 0, LH_WDT_BF16 = 1, LH_WDT_F16 = 2, LH_WDT_COUNT = 3 };

/* One ISA's primitives. Every pointer is set in every table. */
typedef struct lh_cpu_ops {
    lh_k_isa isa;
    int tile_mr, tile_nr, tile_nr1;
    lh_cpu_tile_fn tile[LH_WDT_COUNT];
    /* sum x[i]^2 */
    float (*sumsq)(const float *x, int64_t n);
    /* res[i] += x[i] */
    void (*add)(float *res, const float *x, int64_t n);
    /* out[i] = (x[i] * r) * wf[i] */
    void (*norm_apply)(float *out, const float *x, float r, const float *wf, int64_t n);
    /* out[i] = g[i] / (1 + exp(-g[i])) * u[i] */
    void (*silu_mul)(float *out, const float *g, const float *u, int64_t n);
    /* max over x (NaN-free input assumed; n >= 1) */
    float (*max)(const float *x, int64_t n);
    /* x[i] = exp(x[i] - m); returns the sum */
    float (*exp_sub_sum)(float *x, float m, int64_t n);
    /* x[i] *= s */
    void (*scale)(float *x, float s, int64_t n);
    /* sum a[i] * b[i] */
    float (*dot)(const float *a, const float *b, int64_t n);
    /* y[i] += a * x[i] */
    void (*axpy)(float *y, float a, const float *x, int64_t n);
    /* out[r] = dot(q, k + r * kstride, n) * scale for r < rows: each value exactly as dot()
     * computes it, then one multiplication (rows interleaved for speed, never mixed) */
    void (*dot_rows)(const float *q, const float *k, int64_t kstride, int64_t rows, int64_t n,
                     float scale, float *out);
    /* axpy(y, w[r], x + r * xstride, n) for r = 0 .. rows - 1 in order, with the same
     * arithmetic per element as those calls (y kept in registers across the rows) */
    void (*axpy_rows)(float *y, const float *w, const float *x, int64_t xstride, int64_t rows,
                      int64_t n);
    /* sum max(q[i] * lo[i], q[i] * hi[i]): the bound of q.k over keys between lo and hi
     * (sparse block selection); the summation order is the ISA's own */
    float (*bound_dot)(const float *q, const float *lo, const float *hi, int64_t n);
    /* RoPE on one head: lo, hi the two halves (n each):
     * lo' = lo * c - hi * s; hi' = hi * c + lo * s (no fused multiply-add, as torch) */
    void (*rope_rot)(float *lo, float *hi, const float *c, const float *s, int64_t n);
    /* RoPE on one head in interleaved pairs (GPT-J, DeepSeek), n pairs a = x[2i], b = x[2i+1]:
     * a' = a * c - b * s; b' = b * c + a * s, the products and sums of rope_rot, so that both
     * layouts round alike */
    void (*rope_rot_pairs)(float *x, const float *c, const float *s, int64_t n);
    /* first index of the maximum; returns -1 when x holds a NaN */
    int64_t (*argmax)(const float *x, int64_t n);
    /* row conversions (same rounding as Part 1's scalar functions) */
    void (*bf16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_bf16)(const float *src, uint16_t *dst, int64_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
} lh_cpu_ops;

extern const lh_cpu_ops lh_cpu_ops_scalar;

/* matmul tiles per ISA and weight dtype (matmul.c; matmul_avx2.c and matmul_avx512.c, both
 * from matmul_simd.inc) */
void lh_cpu_tile_scalar_f32(int, int, int64_t, const float *, int64_t, const void *, int64_t, float *,
                            int64_t);
void lh_cpu_tile_scalar_bf16(int, int, int64_t, const float *, int64_t, const void *, int64_t,
                             float *, int64_t);
void lh_cpu_tile_scalar_f16(int, int, int64_t, const float *, int64_t, const void *, int64_t, float *,
                            int64_t);
#if LH_CPU_X86
void lh_cpu_tile_avx2_f32(int, int, int64_t, const float *, int64_t, const void *, int64_t, float *,
                          int64_t);
void lh_cpu_tile_avx2_bf16(int, int, int64_t, const float *, int64_t, const void *, int64_t, float *,
                           int64_t);
void lh_cpu_tile_avx2_f16(int, int, int64_t, const float *, int64_t, const void *, int64_t, float *,
                          int64_t);
void lh_cpu_tile_avx512_f32(int, int, int64_t, const float *, int64_t, const void *, int64_t, float *,
                            int64_t);
void lh_cpu_tile_avx512_bf16(int, int, int64_t, const float *, int64_t, const void *, int64_t,
                             float *, int64_t);
void lh_cpu_tile_avx512_f16(int, int, int64_t, const float *, int64_t, const void *, int64_t,
                            float *, int64_t);
#endif
#if LH_CPU_X86
extern const lh_cpu_ops lh_cpu_ops_avx2;
extern const lh_cpu_ops lh_cpu_ops_avx512;
#endif

/* ---- ISA detection (isa.c) ---------------------------------------------------------------- */

/* Whether this CPU (and OS) can run the ISA's code. */
bool lh_cpu_isa_supported(lh_k_isa isa);
/* The best supported ISA. */
lh_k_isa lh_cpu_isa_best(void);
const lh_cpu_ops *lh_cpu_ops_for(lh_k_isa isa);

/* ---- thread pool (pool.c) ----------------------------------------------------------------- */

typedef void (*lh_cpu_task_fn)(int64_t i, int tid, void *user);

typedef struct lh_pool lh_pool;
/* n_threads >= 2: n_threads - 1 workers; the caller is the last participant. NULL on failure
 * (errno-style message in err). */
lh_pool *lh_pool_create(int n_threads, char *err, size_t err_size);
void lh_pool_free(lh_pool *pool);

/* ---- context (ctx.c) ---------------------------------------------------------------------- */

/* Ownership mark of one pool block, for the paged kernels' duplicate-block check. */
typedef struct lh_cpu_mark {
    uint32_t gen; /* the check that set it */
    int32_t seq;
    int64_t logical;
} lh_cpu_mark;

struct lh_kctx {
    lh_device device;
    int n_threads;
    lh_k_isa isa;
    const lh_cpu_ops *ops;
    lh_pool *pool;           /* NULL when n_threads == 1 */
    float *scratch;          /* n_threads * scratch_per_thread floats */
    size_t scratch_per_thread;
    void *arena;             /* one call's shared working memory (see lh_cpu_arena) */
    size_t arena_bytes;
    lh_cpu_mark *marks;      /* see lh_cpu_marks */
    int64_t n_marks;
    uint32_t mark_gen;
    /* lh_k_ctx_set_bounds (0: none) */
    int64_t bound_seq_len, bound_blocks_per_seq;
    lh_k_qmm qmm;            /* lh_k_ctx_set_quant_matmul (calloc: LH_K_QMM_INT8) */
    lh_k_bf16mm bf16mm;      /* lh_k_ctx_set_bf16_matmul (calloc: LH_K_BF16MM_TILES) */
    /* host-heap allocations of a CPU context's lh_k_alloc, for lh_k_mem_stats */
    int64_t host_in_use, host_peak;
    struct lh_cuda_state *cuda; /* CUDA contexts only (kernels/cuda/cuda_ctx.cu) */
    char err[768];
};

/* Records a message on ctx (or, for ctx == NULL, in the calling thread's slot read by
 * lh_k_last_error(NULL)) and returns st. */
lh_status lh_kerr(lh_kctx *ctx, lh_status st, const char *fmt, ...) LH_PRINTF(3, 4);
lh_status lh_kerr_v(lh_kctx *ctx, lh_status st, const char *fmt, va_list ap);

/* Runs fn(i, tid, user) for i in [0, n); tid in [0, n_threads) names the participating thread
 * (stable for the duration of one call; use it to index per-thread scratch). Nested calls from
 * inside a task run inline. */
void lh_cpu_parallel(lh_kctx *ctx, int64_t n, lh_cpu_task_fn fn, void *user);

/* Per-thread scratch of at least `floats` floats per thread; NULL on allocation failure. The
 * pointer for thread tid is base + tid * lh_cpu_scratch_stride(ctx). Valid until the next call. */
float *lh_cpu_scratch(lh_kctx *ctx, size_t floats);
static inline size_t lh_cpu_scratch_stride(const lh_kctx *ctx)
{
    return ctx->scratch_per_thread;
}

/* Shared (not per-thread) working memory of at least `bytes` bytes for the duration of one
 * kernel call, 64-byte aligned; grown on demand and kept by the context, so a steady stream
 * of calls allocates nothing. NULL on allocation failure. Independent of lh_cpu_scratch;
 * valid until the next lh_cpu_arena call. */
void *lh_cpu_arena(lh_kctx *ctx, size_t bytes);

/* Marks for n pool blocks and a fresh generation number: a block is marked by the current
 * check when marks[b].gen == *gen. NULL on allocation failure. */
lh_cpu_mark *lh_cpu_marks(lh_kctx *ctx, int64_t n, uint32_t *gen);

/* True while the calling thread executes a task of ctx's pool (kernels refuse re-entry). */
bool lh_cpu_in_task(const lh_kctx *ctx);

/* ---- scalar conversions usable in every translation unit ---------------------------------- */

static inline float lh_cpu_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t lh_cpu_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float lh_cpu_bf16_to_f32(uint16_t v)
{
    return lh_cpu_bits_f32((uint32_t)v << 16);
}

/* Load element i of a weight row of dtype slot wdt as f32. */
static inline float lh_cpu_load_w(int wdt, const void *w, int64_t i)
{
    if (wdt == LH_WDT_F32)
        return ((const float *)w)[i];
    if (wdt == LH_WDT_BF16)
        return lh_cpu_bf16_to_f32(((const uint16_t *)w)[i]);
    return lh_k_f16_to_f32(((const uint16_t *)w)[i]);
}

static inline int lh_cpu_wdt(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 ? LH_WDT_F32 : dt == LH_DTYPE_BF16 ? LH_WDT_BF16 : LH_WDT_F16;
}

/* ---- CPU kernel implementations (arguments already checked) ------------------------------- */

lh_status lh_cpu_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, const lh_tensor *bias,
                        lh_tensor *y);
/* y = x @ W^T (+ bias) for a weight W [N, K] that is decoded to f32 as the matmul goes:
 * decode(user, n0, n1, k0, k1, dst, ldd) writes W[n0:n1, k0:k1], row n at dst + (n - n0) * ldd;
 * k0 is a multiple of LH_MM_KC, and k1 - k0 <= LH_MM_KC. It is called from every pool thread
 * at once (user is read-only). The tiles read each decoded panel at once, so y is
 * bit-identical to decoding all of W and calling lh_cpu_matmul with it. fn and wname name the
 * caller and the weight dtype in the out-of-memory message (matmul.c). */
typedef void (*lh_cpu_wrows_fn)(const void *user, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                                float *dst, int64_t ldd);
lh_status lh_cpu_matmul_decoded(lh_kctx *ctx, const lh_tensor *x, int64_t N,
                                lh_cpu_wrows_fn decode, const void *user, const lh_tensor *bias,
                                lh_tensor *y, const char *fn, const char *wname);
lh_status lh_cpu_embedding(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids, int64_t n,
                           lh_tensor *out);
lh_status lh_cpu_rmsnorm(lh_kctx *ctx, lh_tensor *residual, const lh_tensor *x, const lh_tensor *w,
                         float eps, float offset, lh_tensor *out);
lh_status lh_cpu_silu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up, lh_tensor *out);
lh_status lh_cpu_gelu_tanh_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                               lh_tensor *out);
lh_status lh_cpu_scale(lh_kctx *ctx, lh_tensor *x, float s);
/* b may be NULL (norm.c) */
lh_status lh_cpu_layernorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                           const lh_tensor *b, float eps, lh_tensor *out);
/* activation.c */
lh_status lh_cpu_gelu(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out);
lh_status lh_cpu_gelu_tanh(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out);
lh_status lh_cpu_gelu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up, lh_tensor *out);
lh_status lh_cpu_softcap(lh_kctx *ctx, lh_tensor *x, float cap);
/* nn_ops.c */
lh_status lh_cpu_add(lh_kctx *ctx, lh_tensor *y, const lh_tensor *x);
lh_status lh_cpu_embedding_add(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                               int64_t n, lh_tensor *out);
lh_status lh_cpu_softmax(lh_kctx *ctx, lh_tensor *x);
lh_status lh_cpu_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out);
lh_status lh_cpu_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst);
/* cpu/dequant.c: ggml block formats to f32 (lh_k_dequantize). lh_cpu_dequant_row decodes n
 * elements (a multiple of dt's block) of one row starting at a block boundary; the building
 * block of the later quantized matmul. dt: a block type or f32 / f16 / bf16. */
void lh_cpu_dequant_row(lh_dtype dt, const void *src, float *dst, int64_t n);
lh_status lh_cpu_dequantize(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst);
lh_status lh_cpu_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x,
                            const int32_t *positions, int64_t seq_len);
lh_status lh_cpu_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k, const lh_tensor *v,
                           const int32_t *q_pos, float scale, float softcap,
                           int64_t sliding_window, lh_tensor *out);
lh_status lh_cpu_attention_positions(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                     const lh_tensor *v, const int32_t *q_pos,
                                     const int32_t *k_pos, float scale, float softcap,
                                     int64_t sliding_window, int64_t n_sinks, lh_tensor *out);
/* Attention-logit soft-capping of n scores in place, x = cap * tanh(x / cap) (cap > 0): the
 * one definition every CPU attention path uses (attention.c), so that the contiguous and the
 * paged kernels stay bit-identical. */
void lh_cpu_attn_softcap(float *x, int64_t n, float cap);

/* inv_freq for "dynamic" scaling at seq_len (> max_position_embeddings), as HF's forward-time
 * update computes it (rope.c). */
void lh_cpu_rope_dynamic_inv_freq(const lh_rope *rope, int64_t seq_len, float *inv_freq);

/* The pieces of lh_k_rope_apply, shared with the fused-RoPE paths of the paged kernels so
 * that they rotate bit for bit as it does (rope.c):
 *  - lh_cpu_rope_is_dynamic: whether the table's frequencies depend on seq_len there (dynamic
 *    scaling and seq_len > max_position_embeddings);
 *  - lh_cpu_rope_inv: the frequencies for seq_len: rope->inv_freq, rope->inv_freq_long
 *    (longrope, seq_len beyond the original maximum), or (dynamic) computed into
 *    buf [rotary_dim / 2];
 *  - lh_cpu_rope_cos_sin: cos and sin [rotary_dim / 2] at position pos;
 *  - lh_cpu_rope_heads: rotates the first rotary_dim dims of each of the n_heads heads (D
 *    floats apart) of one token, in rope->interleaved's layout. */
bool lh_cpu_rope_is_dynamic(const lh_rope *rope, int64_t seq_len);
const float *lh_cpu_rope_inv(const lh_rope *rope, int64_t seq_len, float *buf);
void lh_cpu_rope_cos_sin(const lh_rope *rope, const float *inv, int32_t pos, float *c, float *s);
void lh_cpu_rope_heads(const lh_cpu_ops *ops, const lh_rope *rope, float *x, int64_t n_heads,
                       int64_t D, const float *c, const float *s);

/* Elements of a tensor (shape product over ndim). */
static inline int64_t lh_cpu_numel(const lh_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* Element i of a matmul bias of dtype dt (f32, bf16 or f16), widened exactly to f32: what every
 * matmul driver (matmul.c, qmatmul.c, scaled_qmm.c) adds to its outputs. */
static inline float lh_cpu_bias_at(const void *bias, lh_dtype dt, int64_t i)
{
    switch (dt) {
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)bias)[i]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)bias)[i]);
    default: return ((const float *)bias)[i];
    }
}

/* lh_k_moe_route / lh_k_scatter_add_rows (cpu/moe.c; arguments checked). route: rows of
 * logits holding inf or NaN are reported through *bad_first (-1: none) and *bad_n, not
 * worded (the dispatch does that for both devices). */
lh_status lh_cpu_moe_route(lh_kctx *ctx, const lh_tensor *logits, const lh_tensor *bias,
                           const lh_k_moe_route_params *p, int32_t *ids, float *weights,
                           int64_t *bad_first, int64_t *bad_n);
lh_status lh_cpu_scatter_add_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                                  const float *scales, lh_tensor *dst);

/* cpu/heads.c: lh_k_matmul_heads and lh_k_copy_view (arguments checked by the dispatch). */
lh_status lh_cpu_matmul_heads(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, bool w_kn,
                              lh_tensor *y);
lh_status lh_cpu_copy_view(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src);

#endif
