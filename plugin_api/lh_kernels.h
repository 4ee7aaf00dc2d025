/* llmhost kernel library (libllmhost_kernels): the one copy of every numeric routine, shared
 * by the host and all plugins.
 *
 * Part 1 (below): dtype facts and scalar/row conversions. Pure; none allocate; none fail on
 * valid arguments. Conversions round to nearest even and keep NaN a NaN (quiet) and
 * infinities infinite.
 *
 * Part 2: tensor kernels (lh_tensor.h views) driven through an execution context that owns
 * the thread pool (CPU) or the stream (CUDA; see "devices" at the end). Every kernel checks
 * dtypes, ranks, shapes and devices (each tensor on the context's device) and returns
 * LH_E_USAGE (or LH_E_UNSUPPORTED for a dtype it does not implement) with a message
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

/* Storage bits per element (4 for int4); 0 for LH_DTYPE_INVALID, unknown values and the ggml
 * block types (LH_DTYPE_Q4_0 ... LH_DTYPE_Q6_K: no whole number of bits per element; their size
 * comes from lh_k_dtype_block or lh_k_dtype_bytes). */
LH_EXPORT unsigned lh_k_dtype_bits(lh_dtype dt);
/* Bytes needed for `n` elements, rounded up to whole bytes; -1 on overflow or unknown dtype.
 * Block types: n / block elements * block bytes when n is a multiple of the block, -1
 * otherwise (a block is never partial). */
LH_EXPORT int64_t lh_k_dtype_bytes(lh_dtype dt, int64_t n);
/* The dtype's storage unit: *block_elems elements in *block_bytes bytes (either pointer may be
 * NULL). Block types: 32 / 18 (q4_0), 32 / 20 (q4_1), 32 / 22 (q5_0), 32 / 24 (q5_1), 32 / 34
 * (q8_0), 256 / 144 (q4_k), 256 / 176 (q5_k), 256 / 210 (q6_k); int4: 2 / 1; the others 1 /
 * bytes per element. Returns whether dt is a block type (block_elems > 1, int4 excluded);
 * unknown values and LH_DTYPE_INVALID: false with 0 / 0. */
LH_EXPORT bool lh_k_dtype_block(lh_dtype dt, int64_t *block_elems, int64_t *block_bytes);
/* Short name: "f32", "f16", "bf16", "fp8_e4m3", "int8", "int4", "q4_0", "q4_1", "q5_0",
 * "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"; "invalid" for anything else. A static string. */
LH_EXPORT const char *lh_k_dtype_name(lh_dtype dt);

LH_EXPORT float lh_k_bf16_to_f32(uint16_t v);
LH_EXPORT uint16_t lh_k_f32_to_bf16(float f);
LH_EXPORT float lh_k_f16_to_f32(uint16_t v);
LH_EXPORT uint16_t lh_k_f32_to_f16(float f);

/* Row conversions; src and dst must not overlap. */
LH_EXPORT void lh_k_convert_bf16_to_f32(const uint16_t *src, float *dst, size_t n);
LH_EXPORT void lh_k_convert_f16_to_f32(const uint16_t *src, float *dst, size_t n);
LH_EXPORT void lh_k_convert_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
LH_EXPORT void lh_k_convert_f32_to_f16(const float *src, uint16_t *dst, size_t n);

/* fp8 e4m3, the OCP "FN" variant (torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7) and 3
 * mantissa bits; no infinities; S.1111.111 is NaN; largest finite +-448; smallest normal 2^-6,
 * smallest subnormal 2^-9. fp8 -> f32 is exact. f32 -> fp8 rounds to nearest even and
 * saturates: a magnitude >= 448 (infinity included) becomes +-448 (torch's cast gives NaN for
 * magnitudes >= 464 instead); NaN stays NaN (0x7f | sign); magnitudes <= 2^-10 become a zero of
 * the input's sign. */
LH_EXPORT float lh_k_fp8_e4m3_to_f32(uint8_t v);
LH_EXPORT uint8_t lh_k_f32_to_fp8_e4m3(float f);
LH_EXPORT void lh_k_convert_fp8_e4m3_to_f32(const uint8_t *src, float *dst, size_t n);
LH_EXPORT void lh_k_convert_f32_to_fp8_e4m3(const float *src, uint8_t *dst, size_t n);

/* ---- Part 2: execution context and tensor kernels ---------------------------------------- */

typedef struct lh_kctx lh_kctx;

/* The CPU kernels' instruction sets. LH_K_ISA_AMX is the AVX-512 kernels plus Intel AMX tiles
 * (AMX-TILE and AMX-INT8, the kernel's permission to use them asked once per process with
 * arch_prctl) for lh_k_matmul at M >= 16 of block-type weights in LH_K_QMM_INT8 mode and, where
 * the CPU also has AMX-BF16, of bf16 weights in LH_K_BF16MM_TILES mode; see those for their
 * arithmetic. The best one the CPU and OS allow is the default (environment
 * LLMHOST_KERNELS_ISA = scalar | avx2 | avx512 | amx | auto chooses another). */
typedef enum lh_k_isa {
    LH_K_ISA_SCALAR = 0,
    LH_K_ISA_AVX2 = 1,
    LH_K_ISA_AVX512 = 2,
    LH_K_ISA_AMX = 3
} lh_k_isa;

/* Creates a context with `n_threads` workers for `device` (n_threads <= 0: the number of
 * online cores; ignored for CUDA, whose work runs on the device). Returns NULL on allocation
 * failure or a device this build or machine cannot use (a CUDA device without CUDA in the
 * build, without a driver, an index beyond the devices present, compute capability below
 * 8.0); lh_k_last_error(NULL) says which. Owned by the caller; one context may serve many
 * models but is used by one thread at a time. */
LH_EXPORT lh_kctx *lh_k_ctx_create(int n_threads, lh_device device);
LH_EXPORT void lh_k_ctx_free(lh_kctx *ctx);
LH_EXPORT int lh_k_ctx_threads(const lh_kctx *ctx);
/* The ISA the context's CPU kernels use, and a way to force one (tests, benchmarks). Forcing
 * an ISA the CPU lacks returns LH_E_UNSUPPORTED. */
LH_EXPORT lh_k_isa lh_k_ctx_isa(const lh_kctx *ctx);
LH_EXPORT lh_status lh_k_ctx_set_isa(lh_kctx *ctx, lh_k_isa isa);
LH_EXPORT const char *lh_k_isa_name(lh_k_isa isa);
/* How lh_k_matmul computes with a weight of one of ggml's block types on the CPU:
 *   LH_K_QMM_INT8  (the default) each row of x is quantized once per call to 8-bit blocks (one
 *                  f32 scale per 32 elements for q4_0, q4_1, q5_0, q5_1, q8_0; per 256, with
 *                  sums per 16, for q4_k, q5_k, q6_k) and every output is integer dot products
 *                  of weight blocks with those blocks, scaled in f32, for every M. The result
 *                  is the same bits on every ISA and thread count, but not those of the f32
 *                  path: x is rounded to 8 bits (each |x - x8| at most half its block's step,
 *                  amax / 254), so |y - y_exact| is at most about sum |w| amax / 254 over the
 *                  row (measured on uniform random x: about 5e-4 of sum |w||x|). A block of x
 *                  holding inf or NaN makes that row's outputs NaN. The exact arithmetic is
 *                  specified in kernels/cpu/qmatmul.h. One exception to "every ISA": with
 *                  LH_K_ISA_AMX and M >= 16, the 32-element types (q4_0, q4_1, q5_0, q5_1,
 *                  q8_0) sum each block's integer products whole before scaling it (the AMX
 *                  scheme of qmatmul.h), which rounds differently from the lane-wise sums of
 *                  the other paths (the same bound holds; the K types give the same bits
 *                  there too). That result is still the same on every thread count and M >= 16.
 *   LH_K_QMM_EXACT each weight row decoded to f32 and run through the f32 kernels: y is
 *                  bit-identical to lh_k_dequantize(w) followed by the f32 matmul (slower).
 * Per context; it also chooses lh_k_matmul_scaled's path for int8 weights with one scale per
 * row (see there); other weight dtypes and other kernels are not affected. set: LH_E_USAGE for a
 * value outside the enum (ctx == NULL: the message in lh_k_last_error(NULL)). The getter of a
 * NULL ctx is LH_K_QMM_INT8. name: "int8", "exact", NULL for a value outside the enum. */
typedef enum lh_k_qmm { LH_K_QMM_INT8 = 0, LH_K_QMM_EXACT = 1 } lh_k_qmm;
LH_EXPORT lh_status lh_k_ctx_set_quant_matmul(lh_kctx *ctx, lh_k_qmm mode);
LH_EXPORT lh_k_qmm lh_k_ctx_quant_matmul(const lh_kctx *ctx);
LH_EXPORT const char *lh_k_qmm_name(lh_k_qmm mode);
/* How lh_k_matmul computes with a bf16 weight on the CPU:
 *   LH_K_BF16MM_TILES (the default) on LH_K_ISA_AMX with M >= 16 (a prompt, a large batch):
 *                  AMX-BF16 tiles. Each x element is rounded to bf16 (to nearest even; NaN
 *                  stays NaN), products of bf16 pairs are exact and accumulate in f32 in the
 *                  tile unit, 32 elements of K at a time in K's order (TDPBF16PS: round to
 *                  nearest even, denormal inputs and results flushed to zero), then the bias
 *                  is added. |y - y_exact| <= 2^-8 sum |w||x| + f32 rounding (test_matmul_amx.c
 *                  measures it). The result depends on neither M (>= 16), the tiling nor the
 *                  thread count. Elsewhere (another ISA, M < 16) the exact path.
 *   LH_K_BF16MM_EXACT every M: x stays f32, each bf16 weight widened exactly (the f32 tiles).
 * Per context; other weight dtypes are not affected. set: LH_E_USAGE for a value outside the
 * enum (ctx == NULL: the message in lh_k_last_error(NULL)). The getter of a NULL ctx is
 * LH_K_BF16MM_TILES. name: "tiles", "exact", NULL for a value outside the enum. */
typedef enum lh_k_bf16mm { LH_K_BF16MM_TILES = 0, LH_K_BF16MM_EXACT = 1 } lh_k_bf16mm;
LH_EXPORT lh_status lh_k_ctx_set_bf16_matmul(lh_kctx *ctx, lh_k_bf16mm mode);
LH_EXPORT lh_k_bf16mm lh_k_ctx_bf16_matmul(const lh_kctx *ctx);
LH_EXPORT const char *lh_k_bf16mm_name(lh_k_bf16mm mode);
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
 * biases are stored like its weights). M == 1 takes the GEMV path.
 * On the CPU, w may also be one of ggml's block types (LH_DTYPE_Q4_0 ... LH_DTYPE_Q6_K, rows of
 * K / block elements' blocks; K a multiple of the block, else LH_E_USAGE; bias stays f32, bf16
 * or f16), computed as the context's lh_k_ctx_set_quant_matmul says: by default with x
 * quantized to 8 bits and integer dot products (LH_K_QMM_INT8: the same bits on every ISA and
 * thread count but for the AMX exception described at lh_k_qmm, close to but not the f32
 * result); with LH_K_QMM_EXACT each weight row is
 * decoded to f32 and run through the f32 kernels, so y is bit-identical to lh_k_dequantize(w)
 * followed by lh_k_matmul with the f32 weight. On a CUDA context a block-type w is multiplied
 * in f32 with exactly the dequantized weights (the LH_K_QMM_EXACT values; the mode does not
 * apply there), summed in the device's order: within 2 K 2^-24 sum |x w| of the CPU's exact
 * path (kernels/cuda/dequant.cu; compiled, not yet run on a GPU). */
LH_EXPORT lh_status lh_k_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                const lh_tensor *bias, lh_tensor *y);
/* out[n,D] = table[ids[i], :] converted to f32; ids outside [0, V) are an error. table f32, bf16
 * or f16, or one of ggml's block types (LH_DTYPE_Q4_0 ... LH_DTYPE_Q6_K, rows of D / block
 * elements' blocks; D a multiple of the block, else LH_E_USAGE naming D and the block): each
 * looked-up row is bit-identical to that row of lh_k_dequantize(table), on the CPU and on a
 * CUDA context alike. */
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
/* out = gelu_tanh(gate) * up, all [M, I] f32 (torch.nn.functional.gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))); out may alias gate or up exactly. */
LH_EXPORT lh_status lh_k_gelu_tanh_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up, lh_tensor *out);
/* x *= s, in place, any shape, f32 */
LH_EXPORT lh_status lh_k_scale(lh_kctx *ctx, lh_tensor *x, float s);
/* out[M,D] = (x - mean(x)) / sqrt(var(x) + eps) * w + b, rows of the last dimension, with the
 * population variance (torch.nn.LayerNorm); b may be NULL (no bias); w, b [D] f32/bf16/f16;
 * statistics in f32 (the mean first, then the centred sum of squares); eps finite and >= 0.
 * x (any rank >= 1, normalized over the last dim) and out may alias exactly. */
LH_EXPORT lh_status lh_k_layernorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                   const lh_tensor *b, float eps, lh_tensor *out);
/* Activations, element-wise on f32 tensors of one shape (any rank, e.g. [M, N]; contiguous);
 * out may alias the input exactly (a partial overlap is LH_E_USAGE):
 *   lh_k_gelu       0.5 x (1 + erf(x / sqrt 2))          (gelu, approximate="none")
 *   lh_k_gelu_tanh  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (gelu_new,
 *                   gelu_pytorch_tanh)
 *   lh_k_gelu_mul   gelu(gate) * up, exact gelu, as lh_k_gelu_tanh_mul */
LH_EXPORT lh_status lh_k_gelu(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out);
LH_EXPORT lh_status lh_k_gelu_tanh(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out);
LH_EXPORT lh_status lh_k_gelu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                  lh_tensor *out);
/* Soft-capping, in place, any shape, f32: x = cap * tanh(x / cap) (Gemma 2's final logits);
 * cap finite and > 0 (otherwise LH_E_USAGE). */
LH_EXPORT lh_status lh_k_softcap(lh_kctx *ctx, lh_tensor *x, float cap);
/* y += x, same shape, f32, contiguous (a residual add); y may be x exactly (it doubles). */
LH_EXPORT lh_status lh_k_add(lh_kctx *ctx, lh_tensor *y, const lh_tensor *x);
/* out[i, :] += table[ids[i], :] converted to f32, for i < n (learned position embeddings:
 * ids are the positions); ids outside [0, V) are an error, as lh_k_embedding (nothing is
 * written then); ids is host memory on every device; out must not overlap table. The table's
 * dtypes as lh_k_embedding (block types: the dequantized row is added, one f32
 * addition per element). */
LH_EXPORT lh_status lh_k_embedding_add(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                                       int64_t n, lh_tensor *out);
/* In-place row softmax over the last dim of x [M, N] f32 (max-subtracted). */
LH_EXPORT lh_status lh_k_softmax(lh_kctx *ctx, lh_tensor *x);
/* out[i] = argmax of row i of x [M, N] f32 (first index on ties). */
LH_EXPORT lh_status lh_k_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out);
/* dst = src converted (f32/bf16/f16 in any direction, same shape). */
LH_EXPORT lh_status lh_k_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst);
/* dst [rows, cols] f32 = src [rows, cols] decoded, element for element as ggml defines each
 * format (gguf-py's gguf/quants.py dequantize_blocks, ggml-quants.c dequantize_row_*), with the
 * same f32 operations in the same order, so the result is bit-identical to theirs:
 *   q4_0  d (f16), 16 bytes of nibbles: x[j] = d * (lo(q[j]) - 8), x[j+16] = d * (hi(q[j]) - 8)
 *   q4_1  d, m (f16), nibbles as q4_0: x = d * q + m
 *   q5_0  d, qh (u32: bit j is bit 4 of x[j]), nibbles as q4_0: x = d * (q - 16)
 *   q5_1  d, m, qh, nibbles: x = d * q + m
 *   q8_0  d, 32 int8: x = q * d
 *   q4_k  d, dmin (f16), 12 bytes of eight 6-bit scales sc and mins m, 128 bytes of nibbles
 *         (sub-block s of 32: low (s even) or high nibbles of bytes 32 (s / 2) ..):
 *         x = (d * sc[s]) * q - dmin * m[s]
 *   q5_k  as q4_k with qh[32] (bit s of qh[l] is bit 4 of element l of sub-block s)
 *   q6_k  ql[128], qh[64], 16 int8 scales, d (f16, last): x = (d * sc[i / 16]) * (q - 32)
 * f32, f16 and bf16 sources are widened (exact). src: one of those dtypes, on the context's
 * device, contiguous, cols a multiple of its block (LH_E_USAGE otherwise); another dtype
 * (int8, int4, fp8) is LH_E_UNSUPPORTED, dst not f32 too. dst must not overlap src. Rows are
 * spread over the pool's threads; the result does not depend on the thread count or device.
 * Infinite or NaN scales give what IEEE arithmetic gives (NaN payloads are not specified). */
LH_EXPORT lh_status lh_k_dequantize(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst);

/* RoPE as Hugging Face computes it (rotate_half layout: the first and second halves of each
 * head's rotary dims pair up). The table holds inv_freq and the attention scaling applied to
 * cos and sin, for the scaling kinds default, linear, dynamic, llama3, yarn and longrope. */
typedef struct lh_rope {
    int64_t rotary_dim;        /* <= head_dim: dims [0, rotary_dim) of each head rotate (pairs
                                * i, i + rotary_dim / 2), [rotary_dim, head_dim) pass through
                                * (partial_rotary_factor) */
    double theta;
    lh_rope_scaling scaling;   /* kind NULL or "default": none; short_factor / long_factor
                                * point into `factors` */
    int64_t max_position_embeddings;
    float attention_scaling;   /* yarn, longrope: applied to cos and sin; 1 otherwise */
    float *inv_freq;           /* [rotary_dim / 2], owned; longrope: the short table */
    /* longrope: the table for sequences longer than the original maximum
     * (scaling.original_max_position_embeddings, or max_position_embeddings when that is 0),
     * 1 / (long_factor[i] * theta^(2i/d)); owned. NULL for the other kinds. */
    float *inv_freq_long;
    /* Owned copies of scaling.short_factor and scaling.long_factor (2 * n_factors doubles,
     * short first); NULL when n_factors is 0. */
    double *factors;
    /* Interleaved pairs (GPT-J, DeepSeek's rope_interleave): rotary dims (2i, 2i + 1) rotate
     * by frequency i instead of (i, i + rotary_dim / 2). lh_k_rope_init sets false; the
     * caller sets it after init. Every kernel that takes an lh_rope honours it: lh_k_rope_apply
     * and the fused rotations of the paged kernels, CPU and CUDA, bit for bit alike. */
    bool interleaved;
} lh_rope;
/* Fills rope (inv_freq malloc'ed). Unknown scaling kind -> LH_E_UNSUPPORTED naming it; the
 * message is read with lh_k_last_error(NULL). Free with lh_k_rope_free.
 * longrope needs n_factors == rotary_dim / 2 and both factor arrays (finite, > 0); attention
 * scaling: scaling.attention_factor when > 0, else with factor = scaling.factor when > 0,
 * else max_position_embeddings / original, sqrt(1 + ln(factor) / ln(original)), or 1 when
 * factor <= 1 (transformers' _compute_longrope_parameters). */
LH_EXPORT lh_status lh_k_rope_init(lh_rope *rope, int64_t rotary_dim, double theta,
                                   const lh_rope_scaling *scaling, int64_t max_position_embeddings);
LH_EXPORT void lh_k_rope_free(lh_rope *rope);
/* Rotates x [T, H, D] f32 in place, token t at positions[t]. For "dynamic" scaling the
 * frequencies follow HF: recomputed from seq_len = max(positions) + 1 when it exceeds the
 * original maximum (the caller passes that seq_len). For "longrope" the same seq_len picks
 * the table, as HF's longrope_frequency_update: inv_freq_long when seq_len > the original
 * maximum, inv_freq otherwise. */
LH_EXPORT lh_status lh_k_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x,
                                    const int32_t *positions, int64_t seq_len);

/* Attention over a contiguous KV cache for one sequence:
 *   q [T, H, D] f32 (T query tokens at positions q_pos[t]),
 *   k, v [S, KVH, D] f32 (cache positions 0..S-1), H % KVH == 0 (GQA),
 *   out [T, H, D] f32.
 * Token t attends to cache positions p <= q_pos[t] (causal) and, with sliding_window > 0,
 * p > q_pos[t] - sliding_window. scale multiplies q·k (usually 1/sqrt(D)). softcap > 0
 * soft-caps the scores before the mask and the softmax, as Gemma 2's attention does: score =
 * softcap * tanh((q·k * scale) / softcap) (f32); 0: none; negative or not finite: LH_E_USAGE. */
LH_EXPORT lh_status lh_k_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                   const lh_tensor *v, const int32_t *q_pos, float scale,
                                   float softcap, int64_t sliding_window, lh_tensor *out);
/* Attention of T queries over S cached keys that sit at arbitrary positions (a ring buffer):
 * q [T, H, D], k, v [S, KVH, D] f32, q_pos[T], k_pos[S] (host arrays; k_pos < 0 marks an empty slot, never visible);
 * key s is visible to query t when k_pos[s] <= q_pos[t] and (k_pos[s] < n_sinks or sliding_window <= 0 or k_pos[s] > q_pos[t] - sliding_window).
 * A query that sees no key gets zeros. Scores f32, max-subtracted softmax, as lh_k_attention; keys summed in slot order.
 * v may have its own head dim Dv (out [T, H, Dv]); H % KVH == 0; q_pos[t] >= 0; n_sinks >= 0;
 * scale finite; softcap as lh_k_attention (0: none); out must not overlap q, k or v. */
LH_EXPORT lh_status lh_k_attention_positions(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k, const lh_tensor *v, const int32_t *q_pos, const int32_t *k_pos, float scale, float softcap, int64_t sliding_window, int64_t n_sinks, lh_tensor *out);

/* ---- paged KV cache ------------------------------------------------------------------------
 *
 * A paged KV cache is a pool of num_blocks blocks; each block holds block_size consecutive
 * tokens of one sequence, for kv_heads heads of head_dim elements, for keys and for values.
 * A sequence's tokens [i * block_size, (i + 1) * block_size) live in the physical block
 * block_table[i] (its "logical block i"); different sequences use disjoint blocks, so a
 * sequence's table entries are distinct. Two memory layouts:
 *   LH_KV_NHD: k, v [num_blocks, block_size, kv_heads, head_dim] (a token's heads together)
 *   LH_KV_HND: k, v [num_blocks, kv_heads, block_size, head_dim] (a head's tokens together)
 * Element dtypes: f32, bf16, f16 or fp8_e4m3, for keys and values independently (mixed-
 * precision KV, e.g. fp8 keys and bf16 values; k and v have the same shape). An fp8 tensor
 * carries one f32 scale per (block, kv head): k_scale for fp8 keys, v_scale for fp8 values,
 * each [num_blocks, kv_heads] (needed only for a tensor that is fp8, ignored otherwise):
 * stored = value / scale, so an element reads back as lh_k_fp8_e4m3_to_f32(stored) * scale
 * (computed in f32). */
typedef enum lh_kv_layout { LH_KV_NHD = 0, LH_KV_HND = 1 } lh_kv_layout;

typedef struct lh_kv_pages {
    lh_kv_layout layout;
    lh_tensor k, v;             /* 4 dims, as above; k.dtype and v.dtype may differ
                                 * (mixed-precision KV) */
    lh_tensor k_scale, v_scale; /* fp8 only (per tensor): [num_blocks, kv_heads] f32 */
    /* Per-block key summaries for sparse block selection (Quest): the elementwise minimum and
     * maximum of the keys stored in each (block, kv head), [num_blocks, kv_heads, head_dim]
     * f32, maintained by the kv_write kernels: of the keys as given (after fused rotation,
     * before conversion to the pool's dtype); a write that starts at a block's first token
     * resets the block's summaries to its own keys, one that starts inside the block widens
     * them. Both or neither: data NULL for both means the pool keeps none (then sparse
     * selection is refused); one without the other is LH_E_USAGE. */
    lh_tensor k_min, k_max;
} lh_kv_pages;

/* Parameters of lh_k_paged_attention. struct_size = sizeof(lh_paged_attn_params); fields are
 * only ever appended, and the kernel reads only those struct_size covers. */
typedef struct lh_paged_attn_params {
    uint32_t struct_size;
    float scale;            /* multiplies q.k (usually 1/sqrt(head_dim)); finite */
    int64_t sliding_window; /* > 0: key p visible to query position qp only if p > qp - window */
    int64_t chunk_size;     /* > 0: chunked attention (Llama 4 attention_chunk_size): key p
                             * visible to qp only if p / chunk_size == qp / chunk_size */
    int64_t n_splits;       /* 0: automatic; n >= 1: split each query's context into at most n
                             * partitions (flash-decoding), whatever T is (tests, tuning; CPU
                             * only: the CUDA kernels partition by the GPU's size and the
                             * context's bounds, with the same exact merge) */
    /* Fused RoPE: when non-NULL, q is rotated (into private memory; q itself is not changed)
     * at q_pos with this table before the scores, with sequence length ctx_len (kv_len[s] in
     * a batch) for dynamic scaling, bit for bit as lh_k_rope_apply would; the cache must hold
     * keys rotated the same way (lh_k_paged_kv_write_batch with the same rope). rotary_dim <=
     * head_dim. */
    const struct lh_rope *rope;
    /* Sparse top-k block selection (both 0: dense). With sparse_local_blocks >= 1 and
     * sparse_top_k >= 0, each (query, head) attends only to a subset of the KV blocks that hold
     * a position it may see (its visible blocks, after the causal, window and chunk masks):
     * the sparse_local_blocks visible blocks with the highest logical index (the block of its
     * own position among them), plus the sparse_top_k other visible blocks with the highest
     * score sum_d max(q_d * k_min[b][g][d], q_d * k_max[b][g][d]) (an upper bound of q.k over
     * the block; q rotated when rope is set; computed in f32, summation order per ISA; ties:
     * lower logical block first; a NaN score ranks last); the masks still apply inside the
     * chosen blocks. When local + top_k cover every visible block the result is bit-identical
     * to dense attention (whatever the partitioning). Needs kv->k_min / k_max. Negative
     * values, or sparse_top_k > 0 with sparse_local_blocks 0: LH_E_USAGE. */
    int64_t sparse_top_k;
    int64_t sparse_local_blocks;
    /* Attention-logit soft-capping (Gemma 2), as lh_k_attention's softcap: every score
     * becomes softcap * tanh(score / softcap) before the softmax (in every path: split,
     * batched, sparse). Sparse block selection still ranks blocks by the bound of the raw
     * q.k above: the cap is increasing, so the ranking is the same (except where it rounds
     * two bounds to one value). 0 (or not covered by struct_size): none; negative or not
     * finite: LH_E_USAGE. */
    float softcap;
} lh_paged_attn_params;

/* Attention of one sequence over its paged KV cache:
 *   q [T, H, head_dim] f32, T query tokens at positions q_pos[t] (0 <= q_pos[t] < ctx_len);
 *   kv: the pool (H % kv_heads == 0: query head h reads kv head h / (H / kv_heads));
 *   block_table [n_table] (n_table >= ceil(ctx_len / block_size); the first ceil(ctx_len /
 *   block_size) entries must be in [0, num_blocks)); the sequence's cached tokens are
 *   positions 0 .. ctx_len - 1 (the step's own new tokens already written, see
 *   lh_k_paged_kv_write);
 *   out [T, H, head_dim] f32 (must not overlap q or the pool).
 * Masks, all combined: causal (p <= q_pos[t]), sliding window and chunked as in params; every
 * query sees at least its own position. Same numerics as lh_k_attention (f32 scores, max-
 * subtracted softmax, weights normalized before the weighted sum of v) on the values the pool
 * holds; when the context is split into partitions (flash-decoding: decode steps, T <= 8,
 * whose visible blocks span more than 256 tokens, or params->n_splits), each partition's
 * softmax is computed separately, in parallel, and the partials (max, sum, normalized output)
 * are merged exactly: out = sum_i w_i o_i with w_i = s_i e^(m_i - M) / sum_j s_j e^(m_j - M),
 * equal to the unsplit result up to float rounding. Unsplit: bit-identical to lh_k_attention
 * on the pool's values (decoded to f32) laid out contiguously. The partitioning depends on
 * T, the positions, ctx_len, block_size and params only, never on the thread count, so
 * results do not depend on the thread count. A call is one sequence of
 * lh_k_paged_attention_batch (same results, bit for bit).
 * Errors: LH_E_USAGE (shapes, table entries, positions, params), LH_E_UNSUPPORTED (dtype,
 * device), LH_E_NOMEM. */
LH_EXPORT lh_status lh_k_paged_attention(lh_kctx *ctx, const lh_tensor *q, const lh_kv_pages *kv,
                                         const int32_t *block_table, int64_t n_table,
                                         int64_t ctx_len, const int32_t *q_pos,
                                         const lh_paged_attn_params *params, lh_tensor *out);

/* Stores the keys and values of n new tokens, k and v [n, kv_heads, head_dim] f32, at the
 * sequence's positions start .. start + n - 1 (converted to the pool's dtype, rounding to
 * nearest even). start + n <= n_table * block_size; the table entries of the touched logical
 * blocks must be in [0, num_blocks). Positions before `start` are the sequence's existing
 * tokens; positions from `start` on are (over)written.
 * fp8: a (block, kv head) that starts at or after `start` gets a fresh scale, amax / 448 over
 * its new values (the largest maps to the largest code; all zero: scale 0, zeros stored). The
 * block holding position start - 1 keeps its scale unless a new value exceeds 448 * scale;
 * then the scale doubles until it covers the new amax, and the block's existing tokens for
 * that head are re-encoded (each divided by the power of two: exact while its code stays
 * normal), so a stored value is within 2^-4 |x| + 2^-9 * scale of the value written. Values
 * must be finite. Keys and values are stored in their own dtypes; the key summaries, when
 * the pool keeps them, are maintained (see lh_kv_pages). The touched logical blocks must be
 * distinct physical blocks.
 * One latent for keys and values (multi-head latent attention): a pool whose v is its k (the
 * same data, dtype, shape and scales) caches one tensor; then v is NULL and only the keys
 * (and their summaries) are written. v NULL for any other pool is LH_E_USAGE.
 * Errors: LH_E_USAGE (nothing written), LH_E_UNSUPPORTED (dtype, device). */
LH_EXPORT lh_status lh_k_paged_kv_write(lh_kctx *ctx, const lh_kv_pages *kv,
                                        const int32_t *block_table, int64_t n_table,
                                        int64_t start, const lh_tensor *k, const lh_tensor *v);

/* A packed batch of sequences for the batched paged kernels: the tokens of sequence s are
 * rows [token_start[s], token_start[s] + n_new[s]) of q / k / v / out, at positions
 * positions[row]; after the step the sequence holds kv_len[s] tokens (its n_new[s] new ones
 * are positions kv_len[s] - n_new[s] .. kv_len[s] - 1) in the blocks block_tables[s][0 ..
 * n_blocks[s]). Sequences' row ranges must not overlap; a sequence with n_new 0 is skipped
 * (its table is not read and may be NULL); rows of no sequence are neither read nor written.
 * positions is read by the attention, and by the write only with fused RoPE (it may be NULL
 * otherwise). */
typedef struct lh_paged_batch {
    uint32_t struct_size; /* sizeof(lh_paged_batch) */
    int64_t n_seqs;
    const int64_t *token_start;
    const int64_t *n_new;
    const int64_t *kv_len;
    const int32_t *positions;
    const int32_t *const *block_tables;
    const int64_t *n_blocks;
} lh_paged_batch;

/* lh_k_paged_attention for every sequence of the batch in one call: q [T, H, D] and
 * out [T, H, D] hold all sequences' rows; the work (sequences x query tiles x head ranges x
 * flash-decoding partitions) is spread over the thread pool as one job, so a decode step of
 * many sequences costs one dispatch (flash-decoding partials are merged inside it, by the
 * last partition to finish). Results are bit-identical to calling lh_k_paged_attention per
 * sequence with the same params (and depend neither on the thread count nor on the other
 * sequences). Working memory comes from the context and is kept for the next call.
 * Errors: as lh_k_paged_attention, naming the sequence and the field ("sequence 2:
 * positions[7] = 40 is outside the cached context [0, 40)"), and for the batch itself
 * (struct_size, NULL arrays, rows outside q, overlapping rows): LH_E_USAGE. */
LH_EXPORT lh_status lh_k_paged_attention_batch(lh_kctx *ctx, const lh_tensor *q,
                                               const lh_kv_pages *kv, const lh_paged_batch *b,
                                               const lh_paged_attn_params *params,
                                               lh_tensor *out);

/* lh_k_paged_kv_write for every sequence of the batch: k, v [T, kv_heads, head_dim] f32; the
 * rows of sequence s are written at positions kv_len[s] - n_new[s] .. kv_len[s] - 1
 * (n_new[s] <= kv_len[s]). With rope non-NULL the keys are rotated first, row r at
 * positions[r] (which must lie in [0, kv_len[s])), as lh_k_rope_apply with sequence length
 * kv_len[s] would, bit for bit (k itself is not changed). When kv->k_min / k_max are
 * present, each touched (block, kv head) summary is updated with the keys (rotated, before
 * conversion; reset when the write starts at the block's first token). Every physical block
 * the call touches must be touched by one sequence only (sequences use disjoint blocks).
 * Results equal writing each sequence with lh_k_paged_kv_write (after lh_k_rope_apply),
 * byte for byte. v NULL: keys only, for a pool whose v is its k (as lh_k_paged_kv_write).
 * Errors: as lh_k_paged_kv_write, naming the sequence; nothing is written
 * when a check fails. */
LH_EXPORT lh_status lh_k_paged_kv_write_batch(lh_kctx *ctx, const lh_kv_pages *kv,
                                              const lh_paged_batch *b, const lh_tensor *k,
                                              const lh_tensor *v, const struct lh_rope *rope);


/* ---- sampling ------------------------------------------------------------------------------
 *
 * Token choice from logits with the semantics of Hugging Face transformers' logits processors
 * and warpers, applied in transformers' order:
 *   1. repetition penalty (RepetitionPenaltyLogitsProcessor, CTRL): for every distinct id in
 *      the row's history (prompt + tokens generated so far) the logit l becomes l / penalty
 *      when l > 0 and l * penalty otherwise (each id once, however often it occurs);
 *   2. temperature: l / T (f32 division). T == 0 means greedy: the argmax of the penalized
 *      logits (first index on ties, as lh_k_argmax and torch.argmax); steps 3-5 and the draw
 *      are skipped;
 *   3. top-k (TopKLogitsWarper): with k > 0, every token whose logit is below the k-th largest
 *      logit is removed. Tokens tied with the k-th largest value are all KEPT (transformers
 *      removes `scores < topk(scores, k).values[-1]`), so more than k may survive a tie;
 *      k >= vocab keeps all;
 *   4. top-p (TopPLogitsWarper): with p < 1, the survivors are ordered by logit (descending;
 *      among equal logits the lower id first) and their softmax accumulated from the least
 *      likely upwards (in double); a token is removed when that ascending cumulative mass is
 *      <= 1 - p. Equivalently: the smallest most-likely prefix whose mass reaches p is kept;
 *      the most likely token is always kept. (Speed: tokens whose probability is at most
 *      (1 - p) / (2 n), n the survivors, are removed before the sort -- together they hold at
 *      most half of 1 - p, so the rule removes them anyway -- and the accumulation starts from
 *      their mass, summed in id order);
 *   5. min-p (MinPLogitsWarper, after temperature): with min_p > 0, tokens whose probability
 *      (softmax over the survivors) is below min_p * the largest probability are removed (the
 *      most likely token always stays);
 *   6. draw: the survivors' softmax (computed in double, max-subtracted, summed in id order)
 *      is inverted at one uniform number u from lh_k_rng_uniform(seed, stream, step): the
 *      chosen id is the first whose cumulative weight exceeds u * total.
 * Removed tokens get probability 0. Logits may be -inf (masked); NaN or +inf logits, or a
 * row with no finite logit when sampling, are LH_E_USAGE naming the row and id.
 *
 * Determinism ("same seed, same output"): the draw of a row depends only on its logits, its
 * history, the params, and (seed, stream, step); rows are independent, and nothing depends on
 * the thread count, the ISA, the number of rows in the call or their order. Identical inputs
 * give identical ids on every run with the same libm (the probabilities use its exp()); the
 * generator itself is exact integer arithmetic, the same everywhere. */
typedef struct lh_sampling_params {
    uint32_t struct_size;     /* sizeof(lh_sampling_params) */
    float temperature;        /* >= 0, finite; 0: greedy */
    int64_t top_k;            /* >= 0; 0: off */
    float top_p;              /* [0, 1]; 1: off; 0: only the most likely token */
    float min_p;              /* [0, 1]; 0: off */
    float repetition_penalty; /* > 0, finite; 1: off */
} lh_sampling_params;

/* Checks params; LH_E_USAGE naming the parameter ("top_p = 1.5 is outside [0, 1]"). With
 * ctx == NULL the message is read with lh_k_last_error(NULL). */
LH_EXPORT lh_status lh_k_sampling_check(lh_kctx *ctx, const lh_sampling_params *params);

/* The counter-based generator behind every draw: Philox4x32-10 keyed by `seed`, counter
 * (stream, step); returns a double in [0, 1) with 53 random bits. A pure function. */
LH_EXPORT double lh_k_rng_uniform(uint64_t seed, uint64_t stream, uint64_t step);

/* The distribution a row is drawn from: probs[M, V] f32 after steps 1-5 (renormalized;
 * removed tokens 0; greedy: 1 at the argmax, 0 elsewhere). logits [M, V] f32 is not changed.
 * history[r] (history_len[r] ids in [0, V)) feeds the repetition penalty; history may be NULL
 * when every history_len is 0 or history_len is NULL. probs must not overlap logits. */
LH_EXPORT lh_status lh_k_sampling_probs(lh_kctx *ctx, const lh_sampling_params *params,
                                        const lh_tensor *logits, const int32_t *const *history,
                                        const int64_t *history_len, lh_tensor *probs);

/* Chooses out[r] for each row of logits [M, V] f32 (not changed): steps 1-6 above with
 * u = lh_k_rng_uniform(seed, stream[r], step[r]). history as for lh_k_sampling_probs; stream
 * and step may be NULL only for greedy params (T == 0). */
LH_EXPORT lh_status lh_k_sample(lh_kctx *ctx, const lh_sampling_params *params,
                                const lh_tensor *logits, const int32_t *const *history,
                                const int64_t *history_len, uint64_t seed,
                                const uint64_t *stream, const uint64_t *step, int32_t *out);


/* ---- devices, device memory, transfers and CUDA graphs ---------------------------------------
 *
 * A context is created for one device (lh_k_ctx_create): LH_DEVICE_CPU, or LH_DEVICE_CUDA with
 * the device's ordinal. A CUDA context owns one stream, the cuBLAS handles and its staging
 * buffers; every kernel given a CUDA context queues its work on that stream, and every tensor
 * it is given must live on the context's device (a tensor on another device is LH_E_USAGE
 * naming both). Host-side arguments of the kernels (ids, positions, block tables, histories,
 * argmax and sampling outputs) stay host memory on every device; the CUDA kernels copy them
 * through pinned staging memory. A kernel returns once its work is queued, except those that
 * write host memory (argmax, sampling, lh_k_copy to the CPU), which wait for their result.
 * Asynchronous device faults surface at the next call that waits (lh_k_sync or a download);
 * LLMHOST_CUDA_SYNC=1 waits after every kernel so a fault names the kernel that caused it. */

/* Whether this library was built with CUDA kernels. */
LH_EXPORT bool lh_k_cuda_built(void);
/* Number of CUDA devices usable now: 0 without CUDA in the build, without a driver or without a
 * device (then lh_k_cuda_unavailable_reason says which). Never fails. */
LH_EXPORT int lh_k_cuda_device_count(void);
/* Why lh_k_cuda_device_count() is 0 ("this build has no CUDA kernels (built with
 * -Dcuda=disabled or without nvcc)", "no CUDA driver: ...", "no CUDA device"); "" when it is
 * not. A static string or one owned by the library; valid until the next call. */
LH_EXPORT const char *lh_k_cuda_unavailable_reason(void);

/* The CUDA half of this library is its own shared object, libllmhost_kernels_cuda.so beside
 * libllmhost_kernels (LLMHOST_KERNELS_CUDA=PATH names another file, for tests), loaded the
 * first time a CUDA context is created or a CUDA device is probed (lh_k_cuda_device_count,
 * lh_k_cuda_unavailable_reason, lh_k_cuda_device_info), once per process. Where it stands: */
typedef enum lh_k_cuda_state {
    LH_K_CUDA_NOT_TRIED = 0,  /* nothing has asked for CUDA yet: nothing is loaded */
    LH_K_CUDA_NOT_BUILT,      /* this build has no CUDA kernels */
    LH_K_CUDA_LIB_MISSING,    /* no file at the library's path */
    LH_K_CUDA_LOAD_FAILED,    /* dlopen failed (cudart or cuBLAS missing, not an ELF ...) */
    LH_K_CUDA_BAD_LIBRARY,    /* loaded, but no entry symbol or a table of another ABI/size */
    LH_K_CUDA_NO_DEVICE,      /* loaded; the CUDA runtime found no driver or no device */
    LH_K_CUDA_OK              /* loaded, at least one device */
} lh_k_cuda_state;
/* The state now (never loads anything); *reason (if reason is non-NULL) is why CUDA is not
 * usable ("" for NOT_TRIED and OK), valid for the life of the process. */
LH_EXPORT lh_k_cuda_state lh_k_cuda_load_state(const char **reason);
/* "not tried", "not built", "library missing", "load failed", "bad library", "no device",
 * "ok" (NULL for a value outside the enum). */
LH_EXPORT const char *lh_k_cuda_state_name(lh_k_cuda_state s);

typedef struct lh_k_device_info {
    char name[128];           /* "NVIDIA H200" */
    int cc_major, cc_minor;   /* compute capability */
    int sm_count;
    int64_t total_bytes;      /* device memory */
    int64_t free_bytes;       /* free now (cudaMemGetInfo) */
    double bandwidth_gbs;     /* theoretical peak memory bandwidth, GB/s (1e9 B/s) */
    char kernels[96];         /* the kernels chosen for it, e.g. "sm_90 (cuBLASLt GEMM, ...)" */
} lh_k_device_info;
/* Facts about CUDA device `index`. LH_E_UNSUPPORTED without CUDA or for an index outside
 * [0, lh_k_cuda_device_count()); the message is read with lh_k_last_error(NULL). */
LH_EXPORT lh_status lh_k_cuda_device_info(int index, lh_k_device_info *info);

/* The context's device. */
LH_EXPORT lh_device lh_k_ctx_device(const lh_kctx *ctx);
/* Upper bounds the caller promises for later paged kernel calls on ctx: no sequence longer
 * than max_seq_len tokens, no block table longer than max_blocks_per_seq. A CUDA context then
 * sizes its launches from these bounds instead of from each call's values, so a step's launch
 * configuration depends only on its shape (what CUDA graph replay needs). A call exceeding
 * them is LH_E_USAGE. 0 and 0: no promise (the default). */
LH_EXPORT lh_status lh_k_ctx_set_bounds(lh_kctx *ctx, int64_t max_seq_len,
                                        int64_t max_blocks_per_seq);

/* Memory on the context's device: `bytes` (> 0) bytes, 256-byte aligned, into *out. CPU: the
 * host heap. CUDA: a caching pool over cudaMalloc (no managed memory); freed blocks are kept
 * for reuse and returned to the driver when an allocation would otherwise fail. Running out
 * is LH_E_NOMEM with the numbers (asked, in use by llmhost, free on the device, total). The
 * memory is not initialized. Free with lh_k_free on the same context. */
LH_EXPORT lh_status lh_k_alloc(lh_kctx *ctx, size_t bytes, void **out);
LH_EXPORT void lh_k_free(lh_kctx *ctx, void *ptr);
/* Sets `bytes` bytes at device memory ptr to zero (queued on the stream for CUDA). */
LH_EXPORT lh_status lh_k_memzero(lh_kctx *ctx, void *ptr, size_t bytes);

typedef struct lh_k_mem_stats {
    int64_t in_use;     /* bytes handed out by lh_k_alloc and not freed */
    int64_t peak;       /* highest in_use */
    int64_t cached;     /* bytes held by the pool for reuse */
    int64_t device_free, device_total; /* the device now (CPU: 0, 0) */
} lh_k_mem_stats;
LH_EXPORT void lh_k_mem_stats_get(const lh_kctx *ctx, lh_k_mem_stats *out);

/* dst = src, same dtype and shape, contiguous; each on the CPU or on the context's device (any
 * direction). Dtypes f32, bf16, f16, fp8_e4m3, int8, int4 (an even element count) and the
 * block types (whole blocks: the element count a multiple of the block). A copy that ends in host memory waits for the data; one from host memory is
 * staged through pinned memory, so src may be reused when the call returns. */
LH_EXPORT lh_status lh_k_copy(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src);
/* dst rows i = src rows rows[i] for i < n: src [R, D], dst [n, D], f32, on the context's
 * device; rows (host) in [0, R). */
LH_EXPORT lh_status lh_k_gather_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                                     int64_t n, lh_tensor *dst);

/* ---- per-head linear maps and strided copies (multi-head latent attention) ----------------
 *
 * Both take views into larger tensors: a view's last dimension is contiguous (stride 1 when
 * it has more than one element); its other strides are element counts >= 0 (0 repeats one
 * row, a broadcast). An output view's elements must be distinct (its dimensions of size > 1,
 * ordered by stride, each step at least the span of the dimensions inside it: row-major and
 * permuted layouts alike), and its byte span must not overlap any input's. Tensors on the
 * context's device. */

/* A [d0, d1, d2] view of elements of dt, `offset` elements into data on dev, planes s0 and
 * rows s1 elements apart, the last dimension contiguous (a head's slice of a packed
 * activation, the per-head row blocks of a fused weight). Header-only. */
static inline lh_tensor lh_k_view3(lh_dtype dt, const void *data, int64_t offset, lh_device dev,
                                   int64_t d0, int64_t d1, int64_t d2, int64_t s0, int64_t s1)
{
    const int64_t shape[3] = {d0, d1, d2};
    lh_tensor t = lh_tensor_cpu(dt, (char *)(uintptr_t)data + lh_k_dtype_bytes(dt, offset), 3,
                                shape);
    t.stride[0] = s0;
    t.stride[1] = s1;
    t.device = dev;
    return t;
}

/* For every t < T and h < H:
 *   w_kn false: y[t, h, :] = x[t, h, :] @ w[h]^T   (w [H, N, K]: each head's rows as
 *                                                   lh_k_matmul's w)
 *   w_kn true:  y[t, h, :] = x[t, h, :] @ w[h]     (w [H, K, N])
 * x [T, H, K] and y [T, H, N] f32 views; w a 3-dim f32, bf16 or f16 view (its heads may lie
 * anywhere in a larger weight: the per-head row blocks of a fused projection, stride[0] >=
 * 0, stride[1] >= its last dim). Each y element is summed over k in an order that depends on
 * neither the thread count nor T (on the CPU, per ISA); on a CUDA context within
 * 2 K 2^-24 sum |x w| of the CPU. With w_kn false each y[t, h, :] is bit-identical to
 * lh_k_matmul of that x row and w[h] on the f32 path (the AMX bf16 tiles of a prompt aside).
 * Errors: LH_E_USAGE (NULL, dims, shapes that disagree, strides, overlaps, naming the tensor),
 * LH_E_UNSUPPORTED (x or y not f32; another w dtype: a block-quantized weight goes through
 * lh_k_dequantize first, an int8 / int4 / fp8 one through lh_k_dequantize_scaled). */
LH_EXPORT lh_status lh_k_matmul_heads(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                      bool w_kn, lh_tensor *y);
/* dst = src, f32 views of the same shape (1 to 4 dims) on the context's device; src may
 * broadcast (stride 0) and may not overlap dst. Errors: LH_E_USAGE (dtype, shapes, strides,
 * overlap). */
LH_EXPORT lh_status lh_k_copy_view(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src);

/* Waits until everything queued on ctx is done; reports a deferred device fault. CPU: no-op. */
LH_EXPORT lh_status lh_k_sync(lh_kctx *ctx);

/* CUDA graphs. A graph records the kernels one piece of host code queues (a decode step) and
 * replays them with one launch. Use:
 *     lh_k_graph_begin(ctx, g);  ...the same kernel calls as always...;  lh_k_graph_end(ctx, g, &rerun);
 * The first time (or after the context's buffers moved) begin starts a stream capture and end
 * instantiates the graph and launches it. Later, begin starts a dry run: the kernel calls check
 * their arguments and stage their host-side inputs (positions, tables...) as always but launch
 * nothing, and end launches the recorded graph, whose copies pick up the freshly staged inputs.
 * A dry run whose calls differ from the recording (another launch configuration or argument;
 * nothing is executed then) sets *rerun: the caller repeats the same calls between a new
 * begin/end pair, which captures afresh. Between begin and end no call may wait for the device
 * (argmax, sampling, downloads, lh_k_sync: LH_E_USAGE). After a failed call inside, call
 * lh_k_graph_abort. CPU contexts: LH_E_UNSUPPORTED. */
typedef struct lh_k_graph lh_k_graph;
LH_EXPORT lh_status lh_k_graph_create(lh_kctx *ctx, lh_k_graph **out);
LH_EXPORT lh_status lh_k_graph_begin(lh_kctx *ctx, lh_k_graph *g);
LH_EXPORT lh_status lh_k_graph_end(lh_kctx *ctx, lh_k_graph *g, bool *rerun);
LH_EXPORT void lh_k_graph_abort(lh_kctx *ctx, lh_k_graph *g);
/* Captures and replays so far (either pointer may be NULL). */
LH_EXPORT void lh_k_graph_counts(const lh_k_graph *g, int64_t *captures, int64_t *replays);
LH_EXPORT void lh_k_graph_free(lh_k_graph *g);

/* ---- mixture of experts ----------------------------------------------------------------------
 *
 * The two kernels a MoE block needs besides the matmuls (the runtime's MoE block, host/runtime,
 * groups a step's tokens by expert and runs one matmul per active expert between them):
 *
 * lh_k_moe_route: for each row t of logits [T, E] (f32; the router's output), the top_k experts
 * and their weights, written to host memory ids[t * top_k + j] / weights[t * top_k + j], j in
 * descending order of the choice score (lowest expert index first on ties):
 *   score[e]  = softmax(logits[t])[e] (LH_K_MOE_SOFTMAX: exp(x - max) summed in f32, then
 *               multiplied by 1 / sum, as lh_k_softmax) or 1 / (1 + exp(-x)) (LH_K_MOE_SIGMOID);
 *   choice[e] = score[e] + bias[e] (bias [E] f32, DeepSeek-V3's e_score_correction_bias; NULL:
 *               none) -- used to choose, never as a weight;
 *   with n_group > 1 (groups of E / n_group consecutive experts): each group's score is the
 *   largest choice in it (LH_K_MOE_GROUP_MAX, DeepSeek-V2) or the sum of its two largest
 *   (LH_K_MOE_GROUP_TOP2_SUM, DeepSeek-V3); only experts of the topk_group best groups (lowest
 *   group first on ties) can be chosen;
 *   weights[j] = score[id j]; with renormalize, divided by (their f32 sum in j order +
 *   renorm_eps); then multiplied by scale (when scale != 1).
 * Errors (LH_E_USAGE): top_k outside [1, E], E above LH_K_MOE_MAX_EXPERTS, n_group not dividing
 * E, topk_group outside [1, n_group], fewer than top_k experts in topk_group groups, a
 * non-finite or negative renorm_eps or scale, a row of logits holding inf or NaN (named: no
 * expert can be chosen for it; ids and weights then hold no promised contents). On a CUDA
 * context the same selection runs on the device (its expf: weights within f32 rounding of the
 * CPU's) and the call waits for the results (LH_E_USAGE inside a graph step).
 *
 * lh_k_scatter_add_rows: dst[rows[i]] += scales[i] * src[i] for i < n in i order (src [n, D],
 * dst [R, D], f32; rows and scales host memory; scales NULL: plain sums), each element one f32
 * product then one f32 sum (no fused multiply-add): a destination row named twice accumulates
 * in that order. Errors (LH_E_USAGE): shapes, a row outside [0, R), NULL rows with n > 0,
 * dst overlapping src. On a CUDA context: the same bits (rows and scales staged). */
#define LH_K_MOE_MAX_EXPERTS 1024
typedef enum lh_k_moe_scoring { LH_K_MOE_SOFTMAX = 0, LH_K_MOE_SIGMOID = 1 } lh_k_moe_scoring;
typedef enum lh_k_moe_group_score {
    LH_K_MOE_GROUP_MAX = 0,
    LH_K_MOE_GROUP_TOP2_SUM = 1
} lh_k_moe_group_score;
typedef struct lh_k_moe_route_params {
    int64_t top_k;
    lh_k_moe_scoring scoring;
    int64_t n_group, topk_group; /* n_group 0 or 1: no groups (topk_group ignored) */
    lh_k_moe_group_score group_score;
    bool renormalize;
    float renorm_eps; /* added to the sum before the division (DeepSeek-V3: 1e-20) */
    float scale;      /* routed_scaling_factor; 1: none */
} lh_k_moe_route_params;
LH_EXPORT lh_status lh_k_moe_route(lh_kctx *ctx, const lh_tensor *logits, const lh_tensor *bias,
                                   const lh_k_moe_route_params *p, int32_t *ids, float *weights);
LH_EXPORT lh_status lh_k_scatter_add_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                                          const float *scales, lh_tensor *dst);

/* ---- weight-only quantized linears with separate scale tensors -----------------------------
 *
 * A quantized weight w [N, K] with a scale tensor (the runtime's load-time quant config: int8
 * per output channel, int4 group-wise, fp8 per channel; and FP8 checkpoints such as
 * DeepSeek-V3's, e4m3 weights with a 128 x 128-block f32 `weight_scale_inv`). The scales cover
 * blocks of block_rows x block_cols elements (block_rows, block_cols >= 1; per channel:
 * 1 x K; groups of g: 1 x g; DeepSeek: 128 x 128), edge blocks partial:
 *   w      [N, K]: LH_DTYPE_INT8 (signed bytes), LH_DTYPE_INT4 (signed two's-complement
 *          nibbles, values -8..7; element k of a row in byte k / 2, the low nibble for even k;
 *          K must be even, so each row is K / 2 whole bytes, rows contiguous) or
 *          LH_DTYPE_FP8_E4M3 (OCP e4m3fn, decoded as lh_k_fp8_e4m3_to_f32);
 *   scale  [ceil(N / block_rows), ceil(K / block_cols)], f32 or f16, contiguous;
 *   dequant(w)[n][k] = value(w[n][k]) * (float)scale[n / block_rows][k / block_cols]
 * computed in f32: value and the widened scale are exact f32s, so the product is one f32
 * multiplication, rounded to nearest even (an fp8 NaN code, or an inf / NaN scale, gives what
 * that multiplication gives). The tensors are views owned by the caller; nothing is kept after
 * a call. Every check failure is LH_E_USAGE with a message naming the argument (dims, shapes,
 * block sizes, the scale shape expected, int4 with an odd K, overlapping tensors), except a
 * dtype outside a set, which is LH_E_UNSUPPORTED as for every kernel. On a CUDA context all
 * three run on the device (kernels/cuda/scaled.cu) with the same results as on the CPU, bit for
 * bit (a NaN result is a NaN there too, its payload and sign unspecified), except the exact
 * path's f32 sums of lh_k_matmul_scaled, which run in another order (|y - y_cpu| <= 2 K 2^-24
 * sum_k |x w| + rounding of the bias); lh_k_quantize_scaled waits for the device there
 * (LH_E_USAGE inside a graph step, before anything is queued). */

/* y [M, N] f32 = x [M, K] f32 @ dequant(w)^T (+ bias [N] f32, bf16 or f16; NULL: none); y
 * must not overlap an input. Two ways, by the context's lh_k_ctx_set_quant_matmul mode:
 *   - int8 w with one scale column (block_cols >= K: per output channel, or per tensor) in
 *     LH_K_QMM_INT8 mode (the default): integer dot products. Each row m of x is quantized
 *     once per call to int8 with one scale d[m] (as the ggml path's blocks, qmatmul.h step 1,
 *     but the block is the whole row: d = amax / 127, q = x * (127 / amax) rounded to nearest
 *     even; a row holding inf or NaN: d = NaN), isum = sum_k w[n][k] * q[m][k] exactly (int64),
 *     y = (float)isum * (s[n] * d[m]) (+ bias[n]); kernels/cpu/scaled.h has every step. The
 *     same bits on every ISA and thread count, not those of the f32 path: |y - y_exact| <=
 *     |s[n]| d[m] / 2 (1 + 2^-14) sum_k |w[n][k]| plus f32 roundings (reached only when every
 *     rounding of x leans with w; on the tests' uniform random x the error stays below about
 *     5e-4 of sum_k |w s x|).
 *   - everything else (LH_K_QMM_EXACT mode; int8 groups or blocks; int4; fp8): bit-identical to
 *     lh_k_dequantize_scaled into an f32 [N, K] weight followed by lh_k_matmul with it, on
 *     every ISA and thread count: the weight is decoded (scaled, as above) panel by panel into
 *     per-thread f32 buffers and run through the f32 kernels.
 * Neither widens the weight in memory (a few KiB per thread). */
LH_EXPORT lh_status lh_k_matmul_scaled(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                       const lh_tensor *scale, int64_t block_rows,
                                       int64_t block_cols, const lh_tensor *bias, lh_tensor *y);
/* dst [N, K] f32 = dequant(w), the same bits on every ISA and thread count; dst must not
 * overlap w or scale. */
LH_EXPORT lh_status lh_k_dequantize_scaled(lh_kctx *ctx, const lh_tensor *w, const lh_tensor *scale,
                                           int64_t block_rows, int64_t block_cols, lh_tensor *dst);
/* Quantizes src [N, K] (f32, bf16 or f16) into w (same shape; its dtype, INT8, INT4 or
 * FP8_E4M3, says which) and scale (f32 or f16, by its dtype; the shape above): symmetric
 * absmax per block, qmax = 127 (int8), 7 (int4), 448 (fp8). Per block, in f32 (v the source
 * value widened exactly to f32):
 *   absmax = max |v| over the block;
 *   s = absmax / qmax (one f32 division, rounded to nearest even);
 *   stored scale = s (f32) or s rounded to nearest even to f16 (lh_k_f32_to_f16); ss = the
 *   stored scale read back as f32;
 *   ss == 0 (absmax 0, or s below the smallest f16 / f32 subnormal): every value of the block
 *   is stored as 0;
 *   otherwise each value is t = v / ss (one f32 division, RNE), then
 *     int8, int4: q = t rounded to the nearest integer, ties to even, clamped to
 *                 [-qmax, qmax] (so int4 never stores -8; the clamp only bites where the
 *                 stored scale rounded below s);
 *     fp8:        q = lh_k_f32_to_fp8_e4m3(t) (RNE, saturating at +-448).
 * numpy reproduces it bit for bit: s = np.float32(absmax) / np.float32(qmax); ss =
 * np.float32(np.float16(s)) for an f16 scale; q = np.clip(np.rint(v / ss), -qmax, qmax) (all
 * f32; the fp8 codes as lh_k_f32_to_fp8_e4m3, which saturates where torch's cast gives NaN).
 * Round trip, per element of a block with a normal stored scale: |dequant(q) - v| <= ss / 2
 * (ints; an f16 scale rounded below s makes |t| exceed qmax by at most qmax * 2^-11, well
 * inside that) or <= max(2^-4 |v|, 2^-10 ss) (fp8: half an e4m3 step of t, times ss), plus
 * 2^-22 absmax for the f32 roundings. Errors (LH_E_USAGE; w and scale then hold no promised
 * contents): a non-finite source value, naming the first in row-major order ("src f32 row 3
 * col 17 is nan"); an f16 scale that would overflow f16 (s rounds above 65504), naming the
 * block and suggesting an f32 scale. w, scale and src must not overlap one another. Threaded
 * over row blocks; the result depends neither on the thread count nor on the ISA. */
LH_EXPORT lh_status lh_k_quantize_scaled(lh_kctx *ctx, const lh_tensor *src, int64_t block_rows,
                                         int64_t block_cols, lh_tensor *w, lh_tensor *scale);

#ifdef __cplusplus
}
#endif
#endif
