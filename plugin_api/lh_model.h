/* llmhost plugin SDK: the model contract -- what a model plugin implements, and the handles
 * its forward pass works with.
 *
 * A model provider (lh_plugin.h) carries an lh_model_ops vtable, as an attention backend
 * carries lh_attn_ops:
 *
 *   construct     the meta phase: the module tree (names as in the checkpoint, shapes,
 *                 attention layers, norm chain, ties) through the add_* blocks; no weight
 *                 memory is touched, so `explain` works on a model that does not fit.
 *   check_config  optional: refuse, by name, the config knobs this implementation does not
 *                 implement (before anything is loaded).
 *   bind          after the host bound the checkpoint to the tree (and placed the weights on
 *                 the engine's device): look the parameters up by name (api->weight) and the
 *                 attention layers (api->attention), keep the handles in a model state of the
 *                 plugin's own, and say what a step needs (lh_forward_info).
 *   forward       one packed step: several sequences of different lengths, prefill and decode
 *                 mixed (api->fwd_step); the plugin composes the forward blocks of the host API
 *                 (embed, linear, norms, activations, attend, output_rows, logits) and writes
 *                 the logits of the rows the runtime asks for.
 *   destroy       frees the model state.
 *
 * The host keeps everything that is not architecture: weights (mmap, binding, placement,
 * device upload), the KV cache, attention-backend selection and its construction-time checks,
 * RoPE tables, scratch memory, CUDA graphs, sampling and generation.
 *
 * Error convention. construct, bind and forward each run against a sticky context (lh_build,
 * lh_bind, lh_fwd): every block records the first error in its context and is a no-op once
 * one is recorded, so plugin code may chain calls and check the status once (per layer, or at
 * the end). A plugin reports its own failures through the same context (build_fail,
 * bind_fail, fwd_fail); check_config fills an lh_error (lh_error_set). Messages name what
 * failed; the host adds the context ("layer 3 mlp: ...") from api->fwd_where.
 *
 * Ownership: handles (lh_weight, lh_attn_ref) are owned by the host and stay valid until the
 * plugin's destroy returns; tensors returned by scratch / output_rows / logits are views valid
 * during the current forward only. */
#ifndef LH_MODEL_H
#define LH_MODEL_H

#include "lh_attention.h"
#include "lh_config.h"
#include "lh_module.h"
#include "lh_tensor.h"
#include "lh_types.h"
#include "lh_kernels.h" /* lh_k_moe_route_params */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_host_api lh_host_api;

typedef struct lh_bind lh_bind;         /* one bind call; owned by the host */
typedef struct lh_fwd lh_fwd;           /* one forward step; owned by the host */
typedef struct lh_weight lh_weight;     /* a bound parameter as the forward blocks read it */
typedef struct lh_attn_ref lh_attn_ref; /* an attention layer of the model's table */

/* What the plugin's bind tells the host about its forward pass. */
typedef struct lh_forward_info {
    uint32_t struct_size;
    /* width of a logits row (the output vocabulary) */
    int64_t vocab_size;
    /* Upper bounds of the scratch a step takes (api->scratch), so the host sizes the per-step
     * arena before the step and nothing is allocated inside one: bytes per token of the
     * step, bytes per logits row asked for (output_rows), and the number of scratch requests
     * per step (each is aligned to LH_SCRATCH_ALIGN). */
    int64_t scratch_bytes_per_token;
    int64_t scratch_bytes_per_row;
    int64_t scratch_requests;
} lh_forward_info;

/* Alignment of every scratch tensor's data. */
#define LH_SCRATCH_ALIGN 256

/* Activations (api->act; gated: api->act_mul, out = act(gate) * up). */
typedef enum lh_activation {
    LH_ACT_SILU = 0,      /* x * sigmoid(x) (silu, swish) */
    LH_ACT_GELU_TANH = 1, /* gelu with the tanh approximation (gelu_new, gelu_pytorch_tanh) */
    LH_ACT_GELU = 2       /* exact gelu, 0.5 x (1 + erf(x / sqrt 2)) */
} lh_activation;

/* A mixture-of-experts feed-forward block (api->add_moe builds it, api->moe finds it at bind,
 * api->moe_ffn runs it). The host builds the block's parameters under the module, named as
 * the plugin says (its checkpoint's spelling):
 *   <router>.weight                        [n_experts, hidden]   never quantized
 *   <router>.<correction_bias>             [n_experts]           when correction_bias is set
 *   <experts>.<e>.<gate_linear|up_linear>.weight [expert_intermediate, hidden], e in [0, n_experts)
 *   <experts>.<e>.<down_linear>.weight       [hidden, expert_intermediate]
 *   <shared>.<gate_linear|up_linear|down_linear>.weight  as an expert's, shared_intermediate wide
 *   <shared_gate>.weight                   [1, hidden]           never quantized
 * and computes, for each token x:
 *   (ids, w) = lh_k_moe_route(router(x), bias, route)   (lh_kernels.h: scores, selection)
 *   y = sum_j w_j * down_{ids_j}(act(gate_{ids_j}(x)) * up_{ids_j}(x))
 *       (experts in ascending order, each added as a product and then a sum, as transformers'
 *       index_add of the weighted expert outputs)
 *   y = y + [sigmoid(shared_gate(x)) *] down_s(act(gate_s(x)) * up_s(x))   with a shared expert
 * A prompt's tokens are grouped by expert: one matmul per active expert and projection, so a
 * decode step reads only the chosen experts' weights. The memory plan counts the block as
 * "mlp" and the routed experts' parameters as top_k / n_experts active (explain's
 * active_parameters). */
typedef struct lh_moe_ref lh_moe_ref; /* a bound MoE block; owned by the host */
typedef struct lh_moe_spec {
    uint32_t struct_size;
    int64_t hidden;              /* input and output width */
    int64_t n_experts;           /* routed experts (1 .. LH_K_MOE_MAX_EXPERTS) */
    int64_t expert_intermediate; /* each routed expert's gated-MLP width */
    lh_k_moe_route_params route; /* top_k, scores, groups, renormalization, scaling */
    lh_activation act;           /* the experts' gate activation */
    const char *router;          /* e.g. "gate" */
    const char *correction_bias; /* e.g. "e_score_correction_bias"; NULL: none */
    const char *experts;         /* e.g. "experts" */
    const char *gate_linear, *up_linear, *down_linear; /* e.g. "w1", "w3", "w2" */
    int64_t shared_intermediate; /* the shared expert's width; 0: none */
    const char *shared;          /* e.g. "shared_expert" (with shared_intermediate > 0) */
    const char *shared_gate;     /* e.g. "shared_expert_gate"; NULL: the shared expert ungated */
} lh_moe_spec;

typedef lh_status (*lh_model_construct_fn)(const lh_host_api *api, lh_build *b,
                                           const lh_model_config *cfg);

typedef struct lh_model_ops {
    uint32_t struct_size; /* sizeof(lh_model_ops) as the plugin was built */
    /* Required. Builds the module tree; returns LH_OK or the build's status. */
    lh_model_construct_fn construct;
    /* Optional (NULL: accepts every config construct accepts). Runs before construct. */
    lh_status (*check_config)(const lh_host_api *api, const lh_model_config *cfg,
                              lh_error *err);
    /* Optional for providers that only describe a model (explain, memory plans); required to
     * run it. On LH_OK *model is the plugin's state (may be NULL) and *info filled; on error
     * nothing is kept (the plugin frees what it allocated). */
    lh_status (*bind)(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      void **model, lh_forward_info *info);
    /* One step (see api->fwd_step). Must not change the plugin's own state: under CUDA graphs
     * the host may run the same step's forward twice (a dry run that checks and stages, then
     * a capture). Returns LH_OK or the step's status (api->fwd_status). */
    lh_status (*forward)(void *model, const lh_host_api *api, lh_fwd *f);
    /* Frees the state bind returned (may be NULL when bind allocates nothing). */
    void (*destroy)(void *model);
} lh_model_ops;

#ifdef __cplusplus
}
#endif
#endif
