/* Private to libllmhost_kernels: the CUDA implementations behind the public kernels, callable
 * from C. kernel_dispatch.c, paged_dispatch.c and sampling_dispatch.c check every argument
 * (the same device-independent rules as for the CPU, plus: every tensor on the context's
 * device) and then call lh_cuda_* instead of lh_cpu_* when the context is a CUDA context.
 *
 * Conventions shared by every function here:
 *   - tensor data pointers are device pointers on the context's device; every other pointer
 *     argument (ids, positions, block tables, history, outputs such as argmax's `out`) is
 *     host memory, exactly as in the public API: the implementation stages what the device
 *     needs through the context (cuda_rt.h) and copies results back;
 *   - work is queued on the context's stream; a function returns once the work is queued
 *     (results that land in host memory are waited for);
 *   - errors: LH_E_NOMEM (device memory), LH_E_INTERNAL (a failed CUDA/cuBLAS call, message
 *     names the call site), LH_E_UNSUPPORTED (a case the CUDA code does not implement, named),
 *     each with the message set on ctx.
 * These live in libllmhost_kernels_cuda.so, not in libllmhost_kernels: the kernel library
 * reaches them only through the table of cuda_ops.h (LH_CUDA(fn)), once that library is
 * loaded; without it a CUDA context cannot be created, so the dispatch never reaches them. */
#ifndef LH_CUDA_KERNELS_H
#define LH_CUDA_KERNELS_H

/* the CPU headers are C: their declarations need C linkage in the .cu files too */
#ifdef __cplusplus
extern "C" {
#endif

#include "cpu/cpu_kernels.h"
#include "cpu/paged_kernels.h"
#include "cpu/sampling.h"
#include "cpu/scaled.h"

/* ---- context (cuda_ctx.cu) ----------------------------------------------------------------- */

/* Creates the CUDA state of ctx for device.index: sets the device, creates the stream, the
 * cuBLAS/cuBLASLt handles and the staging buffers. On failure ctx->cuda stays NULL and the
 * thread's error (lh_k_last_error(NULL)) says why. */
lh_status lh_cuda_ctx_init(lh_kctx *ctx, int device_index);
void lh_cuda_ctx_free(lh_kctx *ctx);
/* Makes the context's device current on the calling thread (every entry point calls it, so a
 * context may be used from any thread, one at a time). */
void lh_cuda_make_current(lh_kctx *ctx);
/* Start of a public call (lh_kd_begin): recycles the staging buffer and frees retired buffers
 * when the stream can be waited for (not inside a graph step). */
void lh_cuda_call_begin(lh_kctx *ctx);

/* The public device functions of lh_kernels.h for CUDA (device.c checks the arguments and
 * handles CPU contexts). */
int lh_cuda_device_count(void);
const char *lh_cuda_unavailable_reason(void);
lh_status lh_cuda_device_info(int index, lh_k_device_info *info);
lh_status lh_cuda_alloc(lh_kctx *ctx, size_t bytes, void **out);
void lh_cuda_free(lh_kctx *ctx, void *ptr);
lh_status lh_cuda_memzero(lh_kctx *ctx, void *ptr, size_t bytes);
void lh_cuda_mem_stats(const lh_kctx *ctx, lh_k_mem_stats *out);
/* bytes from src to dst; *_dev: whether that side is device memory */
lh_status lh_cuda_copy(lh_kctx *ctx, void *dst, bool dst_dev, const void *src, bool src_dev,
                       size_t bytes);
lh_status lh_cuda_sync(lh_kctx *ctx);
lh_status lh_cuda_graph_create(lh_kctx *ctx, lh_k_graph **out);
lh_status lh_cuda_graph_begin(lh_kctx *ctx, lh_k_graph *g);
lh_status lh_cuda_graph_end(lh_kctx *ctx, lh_k_graph *g, bool *rerun);
void lh_cuda_graph_abort(lh_kctx *ctx, lh_k_graph *g);
void lh_cuda_graph_counts(const lh_k_graph *g, int64_t *captures, int64_t *replays);
void lh_cuda_graph_free(lh_k_graph *g);

/* ---- dense kernels (cuda/matmul.cu, cuda/elementwise.cu, cuda/nn_ops.cu, cuda/attention.cu) - */

lh_status lh_cuda_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                         const lh_tensor *bias, lh_tensor *y);
lh_status lh_cuda_embedding(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids, int64_t n,
                            lh_tensor *out);
/* residual NULL: plain RMSNorm; else residual += x first (lh_k_add_rmsnorm) */
lh_status lh_cuda_rmsnorm(lh_kctx *ctx, lh_tensor *residual, const lh_tensor *x,
                          const lh_tensor *w, float eps, float offset, lh_tensor *out);
lh_status lh_cuda_silu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                           lh_tensor *out);
lh_status lh_cuda_gelu_tanh_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                lh_tensor *out);
lh_status lh_cuda_scale(lh_kctx *ctx, lh_tensor *x, float s);
/* cuda/nn_ops.cu: LayerNorm (b may be NULL), GELU exact / tanh, exact-GELU-gated product,
 * soft-capping, residual add, additive embedding lookup (ids host memory, staged) */
lh_status lh_cuda_layernorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                            const lh_tensor *b, float eps, lh_tensor *out);
lh_status lh_cuda_gelu(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out);
lh_status lh_cuda_gelu_tanh(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out);
lh_status lh_cuda_gelu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                           lh_tensor *out);
lh_status lh_cuda_softcap(lh_kctx *ctx, lh_tensor *x, float cap);
lh_status lh_cuda_add(lh_kctx *ctx, lh_tensor *y, const lh_tensor *x);
lh_status lh_cuda_embedding_add(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                                int64_t n, lh_tensor *out);
lh_status lh_cuda_softmax(lh_kctx *ctx, lh_tensor *x);
/* out: host memory, one id per row (waits for the result) */
lh_status lh_cuda_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out);
lh_status lh_cuda_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst);
/* cuda/dequant.cu: ggml block formats (and f32 / f16 / bf16) to f32, bit-identical to
 * lh_cpu_dequantize (src [rows, cols] checked by the caller: cols a multiple of the block) */
lh_status lh_cuda_dequantize(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst);
lh_status lh_cuda_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x,
                             const int32_t *positions, int64_t seq_len);
lh_status lh_cuda_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                            const lh_tensor *v, const int32_t *q_pos, float scale, float softcap,
                            int64_t sliding_window, lh_tensor *out);
lh_status lh_cuda_attention_positions(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                      const lh_tensor *v, const int32_t *q_pos,
                                      const int32_t *k_pos, float scale, float softcap,
                                      int64_t sliding_window, int64_t n_sinks, lh_tensor *out);
/* dst rows i = src rows rows[i] (f32 [*, D] both; rows host memory, checked by the caller) */
lh_status lh_cuda_gather_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                              int64_t n, lh_tensor *dst);

/* ---- weights with separate scale tensors (cuda/scaled.cu) ----------------------------------- */

/* The twins of lh_cpu_matmul_scaled, lh_cpu_dequantize_scaled and lh_cpu_quantize_scaled
 * (arguments checked): the same bits wherever the CPU's are defined bit for bit (dequantized
 * elements, the int8 integer path, the quantized weights and scales), the exact path's sums in
 * another order. quantize_scaled waits for the device and reports a source it refuses through
 * *fail (the dispatch words the error, as for the CPU). */
lh_status lh_cuda_matmul_scaled(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                const lh_tensor *scale, int64_t block_rows, int64_t block_cols,
                                const lh_tensor *bias, lh_tensor *y);
lh_status lh_cuda_dequantize_scaled(lh_kctx *ctx, const lh_tensor *w, const lh_tensor *scale,
                                    int64_t block_rows, int64_t block_cols, lh_tensor *dst);
lh_status lh_cuda_quantize_scaled(lh_kctx *ctx, const lh_tensor *src, int64_t block_rows,
                                  int64_t block_cols, lh_tensor *w, lh_tensor *scale,
                                  lh_scaled_qfail *fail);

/* ---- mixture of experts (cuda/moe.cu) -------------------------------------------------------- */

/* lh_cpu_moe_route's and lh_cpu_scatter_add_rows' twins (arguments checked; ids, weights,
 * rows and scales host memory). route waits for its results; rows of logits holding inf or
 * NaN come back as *bad_first / *bad_n (the dispatch words the error). */
lh_status lh_cuda_moe_route(lh_kctx *ctx, const lh_tensor *logits, const lh_tensor *bias,
                            const lh_k_moe_route_params *p, int32_t *ids, float *weights,
                            int64_t *bad_first, int64_t *bad_n);
lh_status lh_cuda_scatter_add_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                                   const float *scales, lh_tensor *dst);

/* ---- per-head linear maps and strided copies (cuda/heads.cu) ------------------------------- */

/* lh_k_matmul_heads' and lh_k_copy_view's twins (arguments checked by the dispatch). */
lh_status lh_cuda_matmul_heads(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, bool w_kn,
                               lh_tensor *y);
lh_status lh_cuda_copy_view(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src);

/* ---- paged KV cache (cuda/paged_attention.cu, cuda/paged_kv_write.cu) ---------------------- */

/* kv holds device pointers; b holds host arrays (checked). */
lh_status lh_cuda_paged_attention(lh_kctx *ctx, const char *fn, const lh_tensor *q,
                                  const lh_cpu_pages *kv, const lh_cpu_batch *b,
                                  const lh_cpu_attn_params *prm, lh_tensor *out);
lh_status lh_cuda_paged_kv_write(lh_kctx *ctx, const char *fn, const lh_cpu_pages *kv,
                                 const lh_cpu_batch *b, const float *k, const float *v,
                                 const lh_rope *rope);

/* ---- sampling (cuda/sampling.cu) ----------------------------------------------------------- */

/* j->logits and j->probs are device pointers; history, stream, step and out are host memory.
 * Same contract as lh_cpu_sample (row failures reported through bad_row/code/bad_id). */
lh_status lh_cuda_sample(lh_kctx *ctx, const lh_sample_job *j, int64_t *bad_row, int *code,
                         int64_t *bad_id);

#ifdef __cplusplus
}
#endif
#endif
