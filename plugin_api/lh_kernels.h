/* llmhost kernel library (libllmhost_kernels): the one copy of every numeric routine, shared
 * by the host and all plugins.
 *
 * Part 1 (below): dtype facts and scalar/row conversions. Pure; none allocate; none fail on
 * valid arguments. Conversions round to nearest even and keep NaN a NaN (quiet) and
 * infinities infinite.
 *
 * Part 2: tensor kernels (lh_tensor.h views) driven through an execution context that owns
 * the thread pool. Every kernel checks dtypes, ranks, shapes and devices and returns
 * LH_E_USAGE (or LH_E_UNSUPPORTED for a dtype/device it does not implement) with a message
 * retrievable by lh_k_last_error(ctx); none aborts. Activations are f32; weights may be f32,
 * bf16 or f16; accumulation is f32. The CPU code picks AVX-512, AVX2+FMA or scalar at run time
 * from cpuid (LLMHOST_KERNELS_ISA=scalar|avx2|avx512 forces one, for tests). */
#ifndef LH_KERNELS_H
#define LH_KERNELS_H

#include "lh_types.h"
#include "lh_tensor.h"
#include "lh_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage bits per element (4 for int4); 0 for LH_DTYPE_INVALID or unknown values. */
LH_EXPORT unsigned lh_k_dtype_bits(lh_dtype dt);
/* Bytes needed for `n` elements, rounded up to whole bytes; -1 on overflow or unknown dtype. */
LH_EXPORT int64_t lh_k_dtype_bytes(lh_dtype dt, int64_t n);

LH_EXPORT float lh_k_bf16_to_f32(uint16_t v);
LH_EXPORT uint16_t lh_k_f32_to_bf16(float f);
LH_EXPORT float lh_k_f16_to_f32(uint16_t v);
LH_EXPORT uint16_t lh_k_f32_to_f16(float f);

/* Row conversions; src and dst must not overlap. */
LH_EXPORT void lh_k_convert_bf16_to_f32(const uint16_t *src, float *dst, size_t n);
LH_EXPORT void lh_k_convert_f16_to_f32(const uint16_t *src, float *dst, size_t n);
LH_EXPORT void lh_k_convert_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
LH_EXPORT void lh_k_convert_f32_to_f16(const float *src, uint16_t *dst, size_t n);

/* ---- Part 2: execution context and tensor kernels ---------------------------------------- */

typedef struct lh_kctx lh_kctx;

typedef enum lh_k_isa { LH_K_ISA_SCALAR = 0, LH_K_ISA_AVX2 = 1, LH_K_ISA_AVX512 = 2 } lh_k_isa;

/* Creates a context with `n_threads` workers for `device` (n_threads <= 0: the number of
 * online cores). Returns NULL on allocation failure or an unsupported device. Owned by the
 * caller; one context may serve many models but is used by one thread at a time. */
LH_EXPORT lh_kctx *lh_k_ctx_create(int n_threads, lh_device device);
LH_EXPORT void lh_k_ctx_free(lh_kctx *ctx);
LH_EXPORT int lh_k_ctx_threads(const lh_kctx *ctx);
/* The ISA the context's CPU kernels use, and a way to force one (tests, benchmarks). Forcing
 * an ISA the CPU lacks returns LH_E_UNSUPPORTED. */
LH_EXPORT lh_k_isa lh_k_ctx_isa(const lh_kctx *ctx);
LH_EXPORT lh_status lh_k_ctx_set_isa(lh_kctx *ctx, lh_k_isa isa);
LH_EXPORT const char *lh_k_isa_name(lh_k_isa isa);
/* Message of the last failed kernel call on ctx; "" when none. Owned by ctx. With ctx == NULL:
 * the message of the calling thread's last failed call that had no context to hold it
 * (lh_k_ctx_create returning NULL, lh_k_rope_init, a kernel given ctx == NULL or called from
 * inside lh_k_parallel_for on its own context); thread-local, valid until that thread's next
 * such failure. */
LH_EXPORT const char *lh_k_last_error(const lh_kctx *ctx);

/* Runs fn(i, user) for i in [0, n) on the context's pool; returns when all are done. */
typedef void (*lh_k_task_fn)(int64_t i, void *user);
LH_EXPORT void lh_k_parallel_for(lh_kctx *ctx, int64_t n, lh_k_task_fn fn, void *user);

/* y[M,N] = x[M,K] @ w[N,K]^T (+ bias[N]). x, y f32; w and bias f32, bf16 or f16 (a model's
 * biases are stored like its weights). M == 1 takes the GEMV path. */
LH_EXPORT lh_status lh_k_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                const lh_tensor *bias, lh_tensor *y);
/* out[n,D] = table[ids[i], :] converted to f32; ids outside [0, V) are an error. */
LH_EXPORT lh_status lh_k_embedding(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                                   int64_t n, lh_tensor *out);
/* out[M,D] = x / rms(x) * (w + offset); offset 0 for Llama, 1 for Gemma-style norms. x and
 * out may alias. w f32/bf16/f16. */
LH_EXPORT lh_status lh_k_rmsnorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                 float eps, float offset, lh_tensor *out);
/* Fused residual add + RMSNorm: residual += x; out = rmsnorm(residual). out may alias x. */
LH_EXPORT lh_status lh_k_add_rmsnorm(lh_kctx *ctx, lh_tensor *residual, const lh_tensor *x,
                                     const lh_tensor *w, float eps, float offset, lh_tensor *out);
/* out = silu(gate) * up, all [M, I] f32; out may alias gate or up. */
LH_EXPORT lh_status lh_k_silu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                  lh_tensor *out);
/* In-place row softmax over the last dim of x [M, N] f32 (max-subtracted). */
LH_EXPORT lh_status lh_k_softmax(lh_kctx *ctx, lh_tensor *x);
/* out[i] = argmax of row i of x [M, N] f32 (first index on ties). */
LH_EXPORT lh_status lh_k_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out);
/* dst = src converted (f32/bf16/f16 in any direction, same shape). */
LH_EXPORT lh_status lh_k_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst);

/* RoPE as Hugging Face computes it (rotate_half layout: the first and second halves of each
 * head's rotary dims pair up). The table holds inv_freq and the attention scaling applied to
 * cos and sin, for the scaling kinds default, linear, dynamic, llama3 and yarn. */
typedef struct lh_rope {
    int64_t rotary_dim;        /* == head_dim here */
    double theta;
    lh_rope_scaling scaling;   /* kind NULL or "default": none */
    int64_t max_position_embeddings;
    float attention_scaling;   /* yarn: applied to cos and sin; 1 otherwise */
    float *inv_freq;           /* [rotary_dim / 2], owned */
} lh_rope;
/* Fills rope (inv_freq malloc'ed). Unknown scaling kind -> LH_E_UNSUPPORTED naming it; the
 * message is read with lh_k_last_error(NULL). Free with lh_k_rope_free. */
LH_EXPORT lh_status lh_k_rope_init(lh_rope *rope, int64_t rotary_dim, double theta,
                                   const lh_rope_scaling *scaling, int64_t max_position_embeddings);
LH_EXPORT void lh_k_rope_free(lh_rope *rope);
/* Rotates x [T, H, D] f32 in place, token t at positions[t]. For "dynamic" scaling the
 * frequencies follow HF: recomputed from seq_len = max(positions) + 1 when it exceeds the
 * original maximum (the caller passes that seq_len). */
LH_EXPORT lh_status lh_k_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x,
                                    const int32_t *positions, int64_t seq_len);

/* Attention over a contiguous KV cache for one sequence:
 *   q [T, H, D] f32 (T query tokens at positions q_pos[t]),
 *   k, v [S, KVH, D] f32 (cache positions 0..S-1), H % KVH == 0 (GQA),
 *   out [T, H, D] f32.
 * Token t attends to cache positions p <= q_pos[t] (causal) and, with sliding_window > 0,
 * p > q_pos[t] - sliding_window. scale multiplies q·k (usually 1/sqrt(D)). */
LH_EXPORT lh_status lh_k_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                   const lh_tensor *v, const int32_t *q_pos, float scale,
                                   int64_t sliding_window, lh_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
