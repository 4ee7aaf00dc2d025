/* Internal: runs a model plugin's forward pass (lh_model.h) over packed steps of several
 * sequences. The runner is everything around the plugin's forward that is not architecture:
 *
 *   - the weights on the device: on a CPU context the bound tensors themselves (zero-copy
 *     views into the checkpoint mapping or the placement region); on a CUDA context (or with
 *     LLMHOST_COPY_WEIGHTS=1) every parameter of the tree uploaded once (tied ones shared),
 *     with the progress bar;
 *   - one attention-backend instance per entry of the model's attention-layer table (created
 *     with every construction-time check), the RoPE tables their specs ask for, and the
 *     host's paged KV cache for LH_ATTN_CAP_PAGED_KV backends;
 *   - per step: the checks of the step metadata, the KV blocks reserved for every sequence
 *     before any layer runs, the backends' prepare, the scratch arena and the logits buffer
 *     (sized before the step, from lh_forward_info), and CUDA graphs for decode steps;
 *   - the forward blocks of the host API table (runner_blocks.c), which the plugin composes.
 *
 * Ownership: an lh_runner borrows the bound model (on the CPU its weights point into the
 * model's memory), the attention ops and the kernel context (which must outlive it); it owns
 * the plugin's model state (destroyed through the provider's ops), the attention instances,
 * the RoPE tables, the device weights, the arena, the logits and the CUDA graphs. */
#ifndef LH_RUNTIME_RUNNER_H
#define LH_RUNTIME_RUNNER_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "lh_attention.h"
#include "lh_plugin.h"
#include "lh_kernels.h"
#include "model/model.h"
#include "runtime/kv_cache.h"

/* How the runner drives its attention backend (decided by the host at selection). */
typedef struct lh_attn_runtime {
    const lh_attn_backend_provider *provider; /* layers come from lh_create_attention */
    const lh_attn_ops *ops;
    uint64_t caps;       /* LH_ATTN_CAP_*; LH_ATTN_CAP_PAGED_KV: the runner owns a KV cache */
    bool fused_rope;     /* the backend rotates q and k (see lh_attn_geometry.fused_rope) */
    int64_t sparse_top_k, sparse_local_blocks; /* 0/0: dense */
    const lh_kv_cache_config *kv;
    const lh_kv_plan *kv_plan; /* the pool as selection sized it (NULL: size it here) */
    /* Replay decode steps (every sequence one new token) as CUDA graphs, on a CUDA context
     * with a backend whose KV memory does not move (LH_ATTN_CAP_PAGED_KV); ignored
     * otherwise. */
    bool cuda_graphs;
} lh_attn_runtime;

typedef struct lh_runner lh_runner;

/* Builds the runner for model `m` (weights bound) served by provider `prov`: places the
 * weights on kctx's device, creates the attention layers, RoPE tables and KV cache, then
 * calls the plugin's bind. Errors: LH_E_UNSUPPORTED when the provider has no forward pass or
 * the attention layers differ in KV geometry, LH_E_CONFIG for a KV pool that cannot be sized
 * or a RoPE table that cannot be built, whatever the attention backend's create or the
 * plugin's bind reports (prefixed with the architecture), LH_E_NOMEM (device memory: naming
 * the tensor, with the numbers). On error *out is NULL and nothing is kept. */
lh_status lh_runner_create(const lh_model *m, const lh_model_provider *prov,
                           const lh_model_config *cfg, const lh_attn_runtime *attn,
                           int64_t max_seq_len, int64_t max_seqs, lh_kctx *kctx,
                           lh_runner **out, lh_err *err);
void lh_runner_free(lh_runner *r);

/* Sizes the runner was built with. */
int64_t lh_runner_vocab(const lh_runner *r);
int64_t lh_runner_max_seq_len(const lh_runner *r);
int64_t lh_runner_max_seqs(const lh_runner *r);
/* The host's paged KV cache (NULL for backends that keep their own). */
const lh_kv_cache *lh_runner_kv(const lh_runner *r);
/* Bytes of weights uploaded to the device (0 on the CPU without LLMHOST_COPY_WEIGHTS). */
int64_t lh_runner_weight_bytes(const lh_runner *r);
/* Whether decode steps run as CUDA graphs. */
bool lh_runner_graphs(const lh_runner *r);
/* Why decode steps cannot be recorded as CUDA graphs for a model with MoE blocks (moe) or a
 * backend that keeps its own KV memory (own_kv): a static sentence, NULL when they can. The
 * runner's decision and explain's report both come from here. */
const char *lh_runner_graphs_refusal(bool moe, bool own_kv);
/* The sequence length at which a layer's RoPE table switches (longrope: the original
 * maximum; a sequence longer than it is rotated with the long factors, every position), or
 * 0 when no table switches. Keys cached before the switch were rotated with the other table,
 * so a sequence that grows past it is computed afresh (lh_generate), as transformers does. */
int64_t lh_runner_rope_switch_len(const lh_runner *r);
/* Why KV blocks cannot be shared by prefix (a static sentence), or NULL when they can: a
 * backend with its own KV cache (own_kv), RoPE whose keys depend on the sequence length
 * (rope_kind "dynamic" or "longrope"; NULL: none). The runner's decision and explain's report
 * both come from here; lh_runner_prefix_refusal applies it to a runner's layers. */
const char *lh_prefix_refusal(bool own_kv, const char *rope_kind);
const char *lh_runner_prefix_refusal(const lh_runner *r);
/* The RoPE part of that rule alone (dynamic RoPE, longrope), or NULL. */
const char *lh_runner_rope_refusal(const lh_runner *r);
/* The sequence slots belong to one owner at a time: a scheduler claims them (false when one
 * already holds them), and lh_generate* / lh_sequence_logits refuse while they are claimed.
 * [concurrent] */
bool lh_runner_claim_slots(lh_runner *r);
void lh_runner_unclaim_slots(lh_runner *r);
bool lh_runner_slots_claimed(const lh_runner *r);

/* One forward step over step->n_tokens packed tokens. For each of the n_out rows listed in
 * out_rows (token indices into the batch) the logits [vocab] are written to
 * logits[i * vocab ...] (host memory). kctx must be the context the runner was built on.
 * A step that fails midway leaves the KV of its sequences partly written (some layers,
 * reserved blocks): their slots must be released (lh_runner_release) before they are used
 * again, as lh_generate_greedy does. */
lh_status lh_runner_forward(lh_runner *r, lh_kctx *kctx, const lh_attn_step *step,
                            const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                            float *logits, lh_err *err);
/* As lh_runner_forward, but the logits stay where they were computed: *logits is set to a
 * view [n_out, vocab] f32 on the context's device, owned by the runner and valid until its
 * next forward (nothing is set for n_out == 0). */
lh_status lh_runner_forward_dev(lh_runner *r, lh_kctx *kctx, const lh_attn_step *step,
                                const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                                lh_tensor *logits, lh_err *err);
/* CUDA graph captures and replays of decode steps so far, over every batch size (0 and 0
 * when graphs are off or r is NULL). */
void lh_runner_graph_counts(const lh_runner *r, int64_t *captures, int64_t *replays);
/* Frees a sequence slot in the KV cache and every attention layer. */
void lh_runner_release(lh_runner *r, int64_t slot);

/* ---- the bind and forward blocks behind the host API table (runner_blocks.c) ---- */
const lh_weight *lh_runner_weight(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
const lh_weight *lh_runner_weight_opt(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
const lh_attn_ref *lh_runner_attention(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
const lh_tensor *lh_runner_weight_tensor(const lh_weight *w);
const lh_weight *lh_runner_weight_rows(lh_bind *bd, const lh_weight *w, int64_t start,
                                       int64_t count);
lh_status lh_runner_bind_fail(lh_bind *bd, lh_status code, const char *fmt, ...)
    LH_PRINTF(3, 4);
lh_status lh_runner_bind_status(lh_bind *bd);
const lh_attn_step *lh_runner_fwd_step(lh_fwd *f);
lh_kctx *lh_runner_fwd_kctx(lh_fwd *f);
void lh_runner_fwd_where(lh_fwd *f, const char *fmt, ...) LH_PRINTF(2, 3);
lh_tensor lh_runner_scratch(lh_fwd *f, int64_t rows, int64_t cols);
lh_status lh_runner_embed(lh_fwd *f, const lh_weight *table, lh_tensor *out);
lh_status lh_runner_linear(lh_fwd *f, const lh_tensor *x, const lh_weight *w,
                           const lh_weight *bias, lh_tensor *y);
lh_status lh_runner_rmsnorm(lh_fwd *f, const lh_tensor *x, const lh_weight *w, float eps,
                            float offset, lh_tensor *out);
lh_status lh_runner_residual_rmsnorm(lh_fwd *f, lh_tensor *residual, const lh_tensor *x,
                                const lh_weight *w, float eps, float offset, lh_tensor *out);
lh_status lh_runner_act_mul(lh_fwd *f, lh_activation act, const lh_tensor *gate,
                            const lh_tensor *up, lh_tensor *out);
lh_status lh_runner_scale(lh_fwd *f, lh_tensor *x, float s);
lh_status lh_runner_embed_positions(lh_fwd *f, const lh_weight *table, lh_tensor *out);
lh_status lh_runner_layernorm(lh_fwd *f, const lh_tensor *x, const lh_weight *w,
                              const lh_weight *bias, float eps, lh_tensor *out);
lh_status lh_runner_add(lh_fwd *f, lh_tensor *y, const lh_tensor *x);
lh_status lh_runner_act(lh_fwd *f, lh_activation act, const lh_tensor *x, lh_tensor *out);
lh_status lh_runner_softcap(lh_fwd *f, lh_tensor *x, float cap);
lh_status lh_runner_attend(lh_fwd *f, const lh_attn_ref *a, lh_tensor *q, lh_tensor *k,
                           lh_tensor *v, lh_tensor *out);
lh_status lh_runner_attend_mla(lh_fwd *f, const lh_attn_ref *a, lh_tensor *q, lh_tensor *kv_c,
                               lh_tensor *k_rope, const lh_weight *kv_b, lh_tensor *out);
lh_tensor lh_runner_output_rows(lh_fwd *f, const lh_tensor *h);
lh_tensor lh_runner_logits(lh_fwd *f);
lh_status lh_runner_fwd_fail(lh_fwd *f, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
lh_status lh_runner_fwd_status(lh_fwd *f);
const lh_moe_ref *lh_runner_moe(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
lh_status lh_runner_moe_ffn(lh_fwd *f, const lh_moe_ref *m, const lh_tensor *x, lh_tensor *out);

#endif
