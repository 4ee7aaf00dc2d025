/* Private to libllmhost_kernels, CUDA sources only (C++): the runtime every CUDA kernel file
 * uses -- the context's stream and handles, error checks that name the call site, staging of
 * host-side inputs, per-call device scratch, and the one launch path that makes CUDA graph
 * capture and dry-run replay work (lh_kernels.h, "CUDA graphs").
 *
 * Rules for kernel files (every one of them follows these, so graphs stay correct):
 *  1. Every kernel takes exactly one parameter: a struct passed by value. Launch it with
 *     LH_CU_LAUNCH(ctx, kernel, grid, block, smem, args) and nothing else.
 *  2. Host-side inputs (positions, ids, tables, per-sequence numbers, RoPE frequencies) reach
 *     the device only through lh_cu_stage; never cudaMemcpy them yourself.
 *  3. Device working memory comes from lh_cu_scratch (one region per call, carved by the caller)
 *     or from buffers the caller passed in; never cudaMalloc in a kernel wrapper.
 *  4. For decode-shaped work the launch configuration and the bytes of the args struct must
 *     depend only on shapes (rows, sequences, heads), the context's bounds
 *     (lh_cu_bounds) and pointers from the rules above, never on values such as context
 *     lengths or positions: those travel in staged device arrays. A wrapper that breaks this
 *     still works (the dry run detects the difference and the step is captured afresh), it
 *     only loses the replay.
 *  5. cuBLAS calls go through lh_cu_record first (see there).
 *  6. Waiting for the device (results into host memory) uses lh_cu_download, which refuses to
 *     run inside a capture or dry run. */
#ifndef LH_CUDA_RT_H
#define LH_CUDA_RT_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda_kernels.h"

/* ---- the context's CUDA state ------------------------------------------------------------- */

typedef enum lh_cu_mode {
    LH_CU_EAGER = 0,   /* launch as called */
    LH_CU_CAPTURE = 1, /* launch into a stream capture (lh_k_graph_begin, first time) */
    LH_CU_DRYRUN = 2   /* record only: check, stage, hash; launch nothing */
} lh_cu_mode;

cudaStream_t lh_cu_stream(lh_kctx *ctx);
cublasHandle_t lh_cu_cublas(lh_kctx *ctx);
cublasLtHandle_t lh_cu_cublaslt(lh_kctx *ctx);
/* cuBLAS(Lt) workspace for this context (fixed address, so captures stay valid) */
void *lh_cu_blas_workspace(lh_kctx *ctx, size_t *bytes);
lh_cu_mode lh_cu_mode_of(lh_kctx *ctx);
int lh_cu_device_index(lh_kctx *ctx);
/* compute capability major * 10 + minor, SM count */
int lh_cu_cc(lh_kctx *ctx);
int lh_cu_sm_count(lh_kctx *ctx);
/* The promises of lh_k_ctx_set_bounds (0: none made). */
void lh_cu_bounds(lh_kctx *ctx, int64_t *max_seq_len, int64_t *max_blocks_per_seq);

/* ---- errors ---------------------------------------------------------------------------------- */

/* Records "fn: CUDA error at FILE:LINE (what): <cudaGetErrorString> (<cudaGetErrorName>)" on
 * ctx and returns LH_E_NOMEM for cudaErrorMemoryAllocation, LH_E_INTERNAL otherwise. */
lh_status lh_cu_fail(lh_kctx *ctx, cudaError_t e, const char *what, const char *file, int line);
lh_status lh_cublas_fail(lh_kctx *ctx, cublasStatus_t s, const char *what, const char *file,
                         int line);

/* The kernel library's lh_k_last_error and lh_k_rng_uniform, reached through the table it
 * handed to this library (cuda_entry.c): the CUDA library links nothing of libllmhost_kernels. */
extern "C" const char *lh_cu_last_error(const lh_kctx *ctx);
extern "C" double lh_cu_rng_uniform(uint64_t seed, uint64_t stream, uint64_t step);

#define LH_CU_CHECK(ctx, call)                                                                \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess)                                                                \
            return lh_cu_fail((ctx), e_, #call, __FILE__, __LINE__);                          \
    } while (0)

#define LH_CUBLAS_CHECK(ctx, call)                                                            \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                      \
            return lh_cublas_fail((ctx), s_, #call, __FILE__, __LINE__);                      \
    } while (0)

/* ---- host inputs and device scratch ----------------------------------------------------------- */

/* Copies `bytes` bytes of host memory `src` into the context's pinned staging buffer and
 * queues their copy to the device; returns the device address where they will be (256-byte
 * aligned), valid for work queued afterwards on the stream until the next lh_k_sync or the
 * end of the current graph step. In a dry run only the pinned buffer is written (the captured
 * copy moves it at replay). src may be NULL with bytes 0 (returns a valid dummy address).
 * NULL on failure (message on ctx, status in *st). The offsets are deterministic: the same
 * sequence of calls with the same sizes gets the same addresses. */
void *lh_cu_stage(lh_kctx *ctx, const void *src, size_t bytes, lh_status *st);

/* Device working memory for one public kernel call: at least `bytes` bytes, 256-byte aligned,
 * valid until the next lh_cu_scratch call on ctx (work queued on the one stream is ordered, so
 * reuse by the next call is safe). Grows on demand (growth moves it: captured graphs are then
 * recaptured automatically). NULL on failure (message on ctx, status in *st). */
void *lh_cu_scratch(lh_kctx *ctx, size_t bytes, lh_status *st);

/* ---- launching --------------------------------------------------------------------------------- */

/* Mixes an operation that is not a kernel launch (a cuBLAS call, a cudaMemsetAsync, a
 * device-to-device copy) into the step's record: `tag` names it and `params` are all of its
 * arguments (pointers and sizes) as bytes. Returns true when the caller must perform the
 * operation now (eager or capture), false in a dry run (skip it). */
bool lh_cu_record(lh_kctx *ctx, const char *tag, const void *params, size_t bytes);

/* Launches fn<<<grid, block, smem, stream>>>(*args) (eager, capture) or records it (dry run);
 * checks the launch (cudaGetLastError) and, with LLMHOST_CUDA_SYNC=1, waits and checks the
 * kernel. `name`, `file`, `line` name the call site in errors. */
lh_status lh_cu_launch(lh_kctx *ctx, const void *fn, dim3 grid, dim3 block, size_t smem,
                       const void *args, size_t args_size, const char *name, const char *file,
                       int line);

#define LH_CU_LAUNCH(ctx, kernel, grid, block, smem, args)                                     \
    lh_cu_launch((ctx), (const void *)(kernel), (grid), (block), (smem), &(args), sizeof(args), \
                 #kernel, __FILE__, __LINE__)

/* Copies `bytes` from device memory to host memory `dst` and waits for it. LH_E_USAGE inside a
 * graph capture or dry run (`fn` names the public kernel in that message). */
lh_status lh_cu_download(lh_kctx *ctx, const char *fn, void *dst, const void *src, size_t bytes);

/* ggml block types (dequant.cu), arguments checked by the dispatch: a block-type table's rows
 * by the staged ids dids into out (add: out += the rows), and y = x @ dequant(w)^T (+ bias)
 * for a block-type w (M, N, K > 0). Each element decoded as lh_k_dequantize decodes it. */
static inline bool lh_cu_is_block(lh_dtype dt)
{
    return dt >= LH_DTYPE_Q4_0 && dt <= LH_DTYPE_Q6_K;
}
lh_status lh_cu_embedding_blocks(lh_kctx *ctx, const lh_tensor *table, const int32_t *dids,
                                 int64_t n, lh_tensor *out, bool add);
lh_status lh_cu_matmul_blocks(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                              const lh_tensor *bias, lh_tensor *y);

/* Grid size helper: ceil(n / d) as unsigned, n >= 0, d > 0. */
static inline unsigned lh_cu_blocks(int64_t n, int64_t d)
{
    return (unsigned)((n + d - 1) / d);
}

/* ---- device-side dtype helpers (same rounding as the CPU: nearest even; NaN stays NaN) ----- */

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float lh_cu_bf16_to_f32(uint16_t v)
{
    return __uint_as_float((uint32_t)v << 16);
}

__device__ __forceinline__ uint16_t lh_cu_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float lh_cu_f16_to_f32(uint16_t v)
{
    return __half2float(__ushort_as_half(v));
}

__device__ __forceinline__ uint16_t lh_cu_f32_to_f16(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}

/* fp8 e4m3fn, the semantics of lh_k_fp8_e4m3_to_f32 / lh_k_f32_to_fp8_e4m3 (exact decode;
 * encode rounds to nearest even, saturates at +-448, NaN -> 0x7f | sign, |f| <= 2^-10 -> 0) */
__device__ __forceinline__ float lh_cu_fp8_to_f32(uint8_t v)
{
    const uint32_t sign = (uint32_t)(v & 0x80u) << 24, e = (v >> 3) & 0xfu, m = v & 7u;
    if (e == 15u && m == 7u)
        return __uint_as_float(sign | 0x7fc00000u);
    float mag = e == 0u ? (float)m * 0x1p-9f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    return __uint_as_float(__float_as_uint(mag) | sign);
}

__device__ __forceinline__ uint8_t lh_cu_f32_to_fp8(float f)
{
    const uint32_t u = __float_as_uint(f);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const float a = fabsf(f);
    if (a != a)
        return (uint8_t)(sign | 0x7fu);
    if (a >= 448.0f)
        return (uint8_t)(sign | 0x7eu);
    if (a < 0x1p-6f) /* subnormal codes: multiples of 2^-9 (a code of 8 is the first normal) */
        return (uint8_t)(sign | (uint8_t)__float2int_rn(a * 512.0f));
    const uint32_t ua = __float_as_uint(a);
    int e = (int)(ua >> 23) - 127;
    uint32_t mant = (ua >> 20) & 7u, rem = ua & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (mant & 1u)))
        mant++;
    if (mant == 8u) {
        mant = 0;
        e++;
    }
    return (uint8_t)(sign | (uint8_t)(((uint32_t)(e + 7) << 3) | mant));
}

/* Element `i` of a weight/KV array of dtype dt (f32, bf16, f16, fp8 e4m3 unscaled) as f32. */
__device__ __forceinline__ float lh_cu_load(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case LH_DTYPE_BF16: return lh_cu_bf16_to_f32(((const uint16_t *)p)[i]);
    case LH_DTYPE_F16: return lh_cu_f16_to_f32(((const uint16_t *)p)[i]);
    case LH_DTYPE_FP8_E4M3: return lh_cu_fp8_to_f32(((const uint8_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* ---- warp reductions (full warps) ------------------------------------------------------------ */

__device__ __forceinline__ float lh_cu_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* max as the CPU's `if (x > m) m = x` (a NaN never wins a comparison) */
__device__ __forceinline__ float lh_cu_max_gt(float a, float b)
{
    return b > a ? b : a;
}

__device__ __forceinline__ float lh_cu_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = lh_cu_max_gt(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#endif
