/* Internal: the forward pass of the standard decoder-only LM (the tree that
 * lh_build_decoder_lm builds), over packed batches of several sequences.
 *
 * Numerics follow Hugging Face's Llama/Mistral/Qwen2/Qwen3 (and, by the spec's variants,
 * Gemma: GeGLU tanh MLP, RMSNorm (1 + w), embeddings * sqrt(hidden)) modules: activations in f32,
 * weights as stored (f32, bf16, f16) with f32 accumulation, RMSNorm computed in f32, RoPE in
 * the rotate_half layout, the residual add fused with the next norm (the norm fusion chain).
 *
 * Devices: the decoder runs on its kernel context's device. On a CPU context it computes from
 * the bound tensors directly; on a CUDA context it uploads every tensor it uses to device
 * memory at init (a tied lm_head once). Activations, logits and the KV cache live on the
 * context's device (lh_k_alloc); token ids, positions and block tables stay host memory.
 *
 * Ownership: an lh_decoder borrows the bound model (on the CPU its tensors point into the
 * model's weights) and the attention ops; it owns its per-layer attention instances, its RoPE
 * table, its device weights, its scratch and its CUDA graphs. */
#ifndef LH_RUNTIME_DECODER_H
#define LH_RUNTIME_DECODER_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "lh_attention.h"
#include "lh_plugin.h"
#include "lh_kernels.h"
#include "model/model.h"
#include "runtime/kv_cache.h"

/* How the decoder drives its attention backend (decided by the host at selection). */
typedef struct lh_attn_runtime {
    const lh_attn_backend_provider *provider; /* layers come from lh_create_attention */
    const lh_attn_ops *ops;
    uint64_t caps;       /* LH_ATTN_CAP_*; LH_ATTN_CAP_PAGED_KV: the decoder owns a KV cache */
    bool fused_rope;     /* the backend rotates q and k (see lh_attn_geometry.fused_rope) */
    int64_t sparse_top_k, sparse_local_blocks; /* 0/0: dense */
    const lh_kv_cache_config *kv;
    const lh_kv_plan *kv_plan; /* the pool as selection sized it (NULL: size it here) */
    /* Decoder option: replay decode steps (every sequence one new token) as CUDA graphs, on
     * a CUDA context with a backend whose KV memory does not move (LH_ATTN_CAP_PAGED_KV);
     * ignored otherwise. */
    bool cuda_graphs;
} lh_attn_runtime;

typedef struct lh_decoder_layer {
    lh_tensor input_norm, post_norm;
    lh_tensor wq, wk, wv, wo;
    lh_tensor bq, bk, bv, bo;
    bool has_qkv_bias, has_o_bias;
    bool qk_norm;
    lh_tensor q_norm, k_norm;
    lh_tensor w_gate, w_up, w_down;
    lh_attn_layer *attn;
} lh_decoder_layer;

typedef struct lh_decoder {
    int64_t hidden, intermediate, n_layers, heads, kv_heads, head_dim, vocab;
    float eps;
    /* the architecture's variant (lh_decoder_spec): MLP activation, every RMSNorm's weight
     * offset, the factor the embeddings are multiplied by (1: none) */
    lh_mlp_activation mlp_act;
    float norm_offset;
    float embed_scale;
    lh_tensor embed, final_norm, lm_head;
    lh_decoder_layer *layers;
    lh_rope rope;
    const lh_attn_ops *attn_ops;
    bool fused_rope;
    int64_t max_seq_len, max_seqs;
    /* the host's paged KV cache (NULL for backends with their own) and per-step tables */
    lh_kv_cache *kv;
    const int32_t **tables; /* [max_seqs] */
    int64_t *table_len, *tokens_after; /* [max_seqs] */
    /* scratch on the context's device, sized for `scratch_tokens` tokens */
    int64_t scratch_tokens;
    float *resid, *h, *q, *k, *v, *attn_out, *proj, *gate, *up;
    /* logits on the context's device, [logit_rows, vocab] */
    int64_t logit_rows;
    float *logits;
    /* the context everything above lives on (borrowed; it must outlive the decoder) */
    lh_kctx *kctx;
    lh_device dev;
    /* device copies of the weights (CUDA), freed with the decoder */
    void **wbufs;
    int64_t n_wbufs;
    int64_t weight_bytes; /* bytes uploaded */
    /* CUDA graphs, one per decode batch size (index n_seqs - 1), created on first use */
    bool graphs;
    lh_k_graph **graph; /* [max_seqs] */
} lh_decoder;

/* Reads the bound tensors of `m` by their Hugging Face names, uploads them to kctx's device
 * when that is not the CPU (with the progress bar), builds the RoPE table, the KV cache (for
 * LH_ATTN_CAP_PAGED_KV backends) and one attention instance per layer. Errors:
 * LH_E_UNSUPPORTED when the tree is not a standard decoder LM (names the first missing
 * module), LH_E_CONFIG for a KV pool that cannot be sized, whatever the attention backend's
 * create reports, LH_E_NOMEM (device memory: naming the tensor, with the numbers). On error
 * *d is left empty. */
lh_status lh_decoder_init(lh_decoder *d, const lh_model *m, const lh_model_config *cfg,
                          const lh_attn_runtime *attn, int64_t max_seq_len, int64_t max_seqs,
                          lh_kctx *kctx, lh_err *err);
void lh_decoder_free(lh_decoder *d);

/* One forward step over step->n_tokens packed tokens. For each of the n_out rows listed in
 * out_rows (token indices into the batch) the logits [vocab] are written to
 * logits[i * vocab ...] (host memory). kctx must be the context the decoder was built on.
 * A step that fails midway leaves the KV of its sequences partly written (some layers,
 * reserved blocks): their slots must be released (lh_decoder_release) before they are used
 * again, as lh_generate_greedy does. */
lh_status lh_decoder_forward(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                             const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                             float *logits, lh_err *err);
/* As lh_decoder_forward, but the logits stay where they were computed: *logits is set to a
 * view [n_out, vocab] f32 on the context's device, owned by the decoder and valid until its
 * next forward (nothing is set for n_out == 0). */
lh_status lh_decoder_forward_dev(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                                 const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                                 lh_tensor *logits, lh_err *err);
/* CUDA graph captures and replays of decode steps so far, over every batch size (0 and 0
 * when graphs are off). */
void lh_decoder_graph_counts(const lh_decoder *d, int64_t *captures, int64_t *replays);
/* Frees a sequence slot in the KV cache and every layer. */
void lh_decoder_release(lh_decoder *d, int64_t slot);

#endif
