/* An out-of-tree model plugin: Gemma (GemmaForCausalLM), built only against the installed
 * plugin SDK (pkg-config llmhost-plugin). A new architecture in one file.
 *
 * A model plugin (plugin ABI 3) owns its architecture from end to end through the functions
 * of an lh_model_ops (lh_model.h):
 *
 *   check_config  refuse, by name, what this file does not implement (the activation);
 *   construct     the module tree, named as the checkpoint names it (the meta phase: shapes
 *                 only, no weight memory, so `llmhost explain` works on any machine);
 *   bind          look up the bound weights and attention layers by name, keep the handles,
 *                 and tell the host how much scratch a step takes;
 *   forward       one packed step (prefill and decode of several sequences mixed), composed
 *                 of the host's forward blocks (embed, linear, rmsnorm, residual_rmsnorm,
 *                 act_mul, scale, attend, output_rows, logits);
 *   destroy       free what bind allocated.
 *
 * The host keeps everything that is not architecture: loading and placing the weights, the
 * KV cache, the attention backend and its RoPE, scratch memory, CUDA graphs, sampling.
 *
 * Gemma is a Llama-shaped pre-norm decoder (the same module names) with four differences,
 * all visible below (numerics as transformers' GemmaForCausalLM):
 *   - the token embeddings are multiplied by sqrt(hidden_size), that factor first rounded to
 *     the embedding's dtype (transformers: torch.tensor(hidden_size ** 0.5, dtype=...));
 *   - every RMSNorm scales by (1 + w): the checkpoint stores the weights as offsets from 1
 *     (the `offset` argument 1.0f of the norm blocks);
 *   - the gated MLP uses GELU with the tanh approximation (LH_ACT_GELU_TANH), not SiLU;
 *   - head_dim comes from config.json (256 in the released models, not hidden / heads), and
 *     lm_head is tied to model.embed_tokens (tie_word_embeddings: true).
 *
 *   model.embed_tokens                      [vocab, hidden]
 *   model.layers.N.input_layernorm          [hidden]
 *   model.layers.N.self_attn.{q,k,v,o}_proj (a bias only with attention_bias)
 *   model.layers.N.post_attention_layernorm [hidden]
 *   model.layers.N.mlp.{gate,up,down}_proj  (GeGLU)
 *   model.norm                              [hidden]
 *   lm_head                                 [vocab, hidden] (= model.embed_tokens when tied)
 *
 * Everything but the entry point is static. The numeric work happens in the host's kernel
 * library (libllmhost_kernels), reached through the forward blocks of the host API; the only
 * lh_k_* calls of this file are the scalar dtype conversions that round the embedding scale
 * (linked from that same library, never copied). */
#include "lh_kernels.h"
#include "lh_plugin.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "GemmaForCausalLM"

/* ---- check_config ------------------------------------------------------------------------- */

/* Gemma's activation: config.json's hidden_activation when present (the released Gemma
 * checkpoints say "gelu_pytorch_tanh" there and a legacy "gelu" in hidden_act, which
 * transformers also maps to the tanh approximation), else hidden_act; neither key means
 * transformers' default, gelu_pytorch_tanh. */
static lh_status check_config(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    static const char *const keys[] = {"hidden_activation", "hidden_act"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *act = NULL;
        int r = api->config_get_string(cfg, keys[i], &act);
        if (r < 0)
            return lh_error_set(err, LH_E_CONFIG, "%s must be a string", keys[i]);
        if (r == 0)
            continue;
        if (strcmp(act, "gelu_pytorch_tanh") == 0 || strcmp(act, "gelu") == 0 ||
            strcmp(act, "gelu_new") == 0)
            return LH_OK;
        return lh_error_set(err, LH_E_UNSUPPORTED, "%s \"%s\" is not supported (this "
                            "plugin implements gelu_pytorch_tanh)", keys[i], act);
    }
    return LH_OK;
}

/* ---- construct ---------------------------------------------------------------------------- */

/* Every add_* block records the first error in b and is a no-op afterwards ("sticky"), so the
 * calls below are chained without checks and the build's status is returned once. */
static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    static const char *const required[] = {"hidden_size", "intermediate_size",
                                           "num_hidden_layers", "num_attention_heads",
                                           "vocab_size"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        int64_t v;
        if (api->config_get_int(cfg, required[i], &v) != 1)
            return api->build_fail(b, LH_E_CONFIG, "missing required integer field '%s'",
                                   required[i]);
    }
    const lh_model_geometry *g = api->config_geometry(cfg);
    if (g->num_hidden_layers < 1)
        return api->build_fail(b, LH_E_CONFIG, "num_hidden_layers is %" PRId64 "; the "
                               "decoder needs at least one layer", g->num_hidden_layers);
    const int64_t hidden = g->hidden_size, vocab = g->vocab_size, D = g->head_dim;
    const int64_t q_out = g->num_attention_heads * D, kv_out = g->num_key_value_heads * D;
    const double eps = g->rms_norm_eps;
    const bool bias = g->attention_bias; /* q, k, v and o alike */

    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    lh_module *embed = api->add_embedding(b, model, "embed_tokens", vocab, hidden);
    lh_module *layers = api->add_container(b, model, "layers");
    for (int64_t i = 0; i < g->num_hidden_layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = api->add_container(b, layers, name);
        api->add_rmsnorm(b, layer, "input_layernorm", hidden, eps);
        /* the norm fusion chain: the previous layer's last residual add runs with this norm */
        const lh_attention_spec as = {
            .struct_size = sizeof as,
            .layer_index = i,
            .num_heads = g->num_attention_heads,
            .num_kv_heads = g->num_key_value_heads,
            .head_dim = D,
            .sliding_window = 0, /* Gemma attends to the whole context */
            .scale = 0.0,        /* 1 / sqrt(head_dim) */
            .rope = true,
            .rope_theta = g->rope_theta,
            .rope_scaling = g->rope_scaling,
            .max_positions = g->max_position_embeddings,
        };
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        api->add_linear(b, attn, "q_proj", hidden, q_out, bias);
        api->add_linear(b, attn, "k_proj", hidden, kv_out, bias);
        api->add_linear(b, attn, "v_proj", hidden, kv_out, bias);
        api->add_linear(b, attn, "o_proj", q_out, hidden, bias);
        api->add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        lh_module *mlp = api->add_mlp(b, layer, "mlp");
        api->add_linear(b, mlp, "gate_proj", hidden, g->intermediate_size, false);
        api->add_linear(b, mlp, "up_proj", hidden, g->intermediate_size, false);
        api->add_linear(b, mlp, "down_proj", g->intermediate_size, hidden, false);
    }
    api->add_rmsnorm(b, model, "norm", hidden, eps);
    /* add_head: a linear that the memory plan counts as "lm_head"; tied, it is stored once */
    lh_module *head = api->add_head(b, root, "lm_head", hidden, vocab, false);
    if (g->tie_word_embeddings)
        api->tie_weights(b, head, embed);
    return api->build_status(b);
}

/* ---- bind --------------------------------------------------------------------------------- */

typedef struct gemma_layer {
    const lh_weight *in_norm, *post_norm;
    const lh_weight *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo; /* biases NULL without them */
    const lh_weight *gate, *up, *down;
    const lh_attn_ref *attn;
} gemma_layer;

/* The model state: read-only after bind (forward may run twice per step, see forward). */
typedef struct gemma_model {
    int64_t hidden, intermediate, n_layers, heads, kv_heads, head_dim;
    float eps;
    float embed_scale; /* sqrt(hidden_size), rounded to the embedding's dtype */
    const lh_weight *embed, *final_norm, *lm_head;
    gemma_layer *layers;
} gemma_model;

static void destroy(void *model)
{
    gemma_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

/* transformers: normalizer = torch.tensor(hidden_size ** 0.5, dtype=hidden_states.dtype) */
static float embed_scale(int64_t hidden, lh_dtype dtype)
{
    const float s = (float)sqrt((double)hidden);
    if (dtype == LH_DTYPE_BF16)
        return lh_k_bf16_to_f32(lh_k_f32_to_bf16(s));
    if (dtype == LH_DTYPE_F16)
        return lh_k_f16_to_f32(lh_k_f32_to_f16(s));
    return s;
}

/* Like the build, the bind context is sticky: api->weight records a missing name in bd and
 * returns NULL, so the lookups run unchecked and bd's status is read once at the end. */
static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      void **model, lh_forward_info *info)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    gemma_model *m = calloc(1, sizeof *m);
    if (m)
        m->layers = calloc((size_t)g->num_hidden_layers, sizeof *m->layers);
    if (!m || !m->layers) {
        destroy(m);
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    }
    m->hidden = g->hidden_size;
    m->intermediate = g->intermediate_size;
    m->n_layers = g->num_hidden_layers;
    m->heads = g->num_attention_heads;
    m->kv_heads = g->num_key_value_heads;
    m->head_dim = g->head_dim;
    m->eps = (float)g->rms_norm_eps;
    m->embed = api->weight(bd, "model.embed_tokens.weight");
    m->final_norm = api->weight(bd, "model.norm.weight");
    m->lm_head = api->weight(bd, "lm_head.weight"); /* the embedding itself when tied */
    for (int64_t i = 0; i < m->n_layers; i++) {
        gemma_layer *L = &m->layers[i];
        const char *p = "model.layers.%" PRId64 ".%s";
        L->in_norm = api->weight(bd, p, i, "input_layernorm.weight");
        L->post_norm = api->weight(bd, p, i, "post_attention_layernorm.weight");
        L->wq = api->weight(bd, p, i, "self_attn.q_proj.weight");
        L->wk = api->weight(bd, p, i, "self_attn.k_proj.weight");
        L->wv = api->weight(bd, p, i, "self_attn.v_proj.weight");
        L->wo = api->weight(bd, p, i, "self_attn.o_proj.weight");
        L->bq = api->weight_opt(bd, p, i, "self_attn.q_proj.bias");
        L->bk = api->weight_opt(bd, p, i, "self_attn.k_proj.bias");
        L->bv = api->weight_opt(bd, p, i, "self_attn.v_proj.bias");
        L->bo = api->weight_opt(bd, p, i, "self_attn.o_proj.bias");
        L->gate = api->weight(bd, p, i, "mlp.gate_proj.weight");
        L->up = api->weight(bd, p, i, "mlp.up_proj.weight");
        L->down = api->weight(bd, p, i, "mlp.down_proj.weight");
        L->attn = api->attention(bd, "model.layers.%" PRId64 ".self_attn", i);
    }
    if (api->bind_status(bd) == LH_OK) {
        const lh_tensor *et = api->weight_tensor(m->embed);
        if (!et)
            api->bind_fail(bd, LH_E_UNSUPPORTED, "model.embed_tokens.weight has no plain "
                           "tensor (a quantized embedding is not supported)");
        else
            m->embed_scale = embed_scale(m->hidden, et->dtype);
    }
    lh_status st = api->bind_status(bd);
    if (st != LH_OK) {
        destroy(m);
        return st;
    }
    /* The scratch of one step, declared up front so the host sizes its per-step arena before
     * the step runs (nothing is allocated inside one): the 9 api->scratch calls of forward,
     * per token resid, h, proj [hidden]; q, attn [heads * D]; k, v [kv_heads * D]; gate, up
     * [intermediate]; and per logits row the [hidden] rows output_rows gathers. */
    const int64_t qd = m->heads * m->head_dim, kvd = m->kv_heads * m->head_dim;
    info->vocab_size = g->vocab_size;
    info->scratch_bytes_per_token =
        (int64_t)sizeof(float) * (3 * m->hidden + 2 * qd + 2 * kvd + 2 * m->intermediate);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * m->hidden;
    info->scratch_requests = 9;
    *model = m;
    return LH_OK;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* One packed step. Each block records the first error in f and is a no-op afterwards; the
 * layer loop checks once per layer and the step returns f's status. The model state is only
 * read: under CUDA graphs the host may run a step's forward twice (a dry run, then the
 * capture), so nothing here may depend on having run before. */
static lh_status forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const gemma_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens, H = m->heads, KVH = m->kv_heads;
    const int64_t D = m->head_dim;
    const float eps = m->eps, one = 1.0f; /* Gemma's norms: x / rms(x) * (1 + w) */
    lh_tensor resid = api->scratch(f, T, m->hidden), h = api->scratch(f, T, m->hidden);
    lh_tensor q = api->scratch(f, T, H * D), k = api->scratch(f, T, KVH * D);
    lh_tensor v = api->scratch(f, T, KVH * D), attn = api->scratch(f, T, H * D);
    lh_tensor proj = api->scratch(f, T, m->hidden);
    lh_tensor gate = api->scratch(f, T, m->intermediate), up = api->scratch(f, T, m->intermediate);

    api->fwd_where(f, "embedding");
    api->embed(f, m->embed, &resid);
    api->scale(f, &resid, m->embed_scale); /* embeddings * sqrt(hidden_size) */
    api->rmsnorm(f, &resid, m->layers[0].in_norm, eps, one, &h);
    for (int64_t i = 0; i < m->n_layers && api->fwd_status(f) == LH_OK; i++) {
        const gemma_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        api->linear(f, &h, L->wq, L->bq, &q);
        api->linear(f, &h, L->wk, L->bk, &k);
        api->linear(f, &h, L->wv, L->bv, &v);
        api->attend(f, L->attn, &q, &k, &v, &attn); /* RoPE on q, k, then the backend */
        api->linear(f, &attn, L->wo, L->bo, &proj);
        /* residual += attention; h = post_attention_layernorm(residual) */
        api->residual_rmsnorm(f, &resid, &proj, L->post_norm, eps, one, &h);
        api->linear(f, &h, L->gate, NULL, &gate);
        api->linear(f, &h, L->up, NULL, &up);
        api->act_mul(f, LH_ACT_GELU_TANH, &gate, &up, &gate); /* GeGLU */
        api->linear(f, &gate, L->down, NULL, &proj);
        /* the norm fusion chain: residual += mlp; h = next layer's input norm (or model.norm) */
        const lh_weight *next = i + 1 < m->n_layers ? m->layers[i + 1].in_norm : m->final_norm;
        api->residual_rmsnorm(f, &resid, &proj, next, eps, one, &h);
    }
    lh_tensor logits = api->logits(f);
    if (logits.shape[0] == 0) /* a step that only fills the KV cache: no head */
        return api->fwd_status(f);
    api->fwd_where(f, "lm_head");
    lh_tensor rows = api->output_rows(f, &h);
    api->linear(f, &rows, m->lm_head, NULL, &logits);
    return api->fwd_status(f);
}

/* ---- registration ------------------------------------------------------------------------- */

static const lh_model_ops ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct,
    .check_config = check_config,
    .bind = bind,
    .forward = forward,
    .destroy = destroy,
};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_model_provider p = {
        .struct_size = sizeof(lh_model_provider),
        .name = ARCH,
        .ops = &ops,
        .check_runtime = NULL,
    };
    return api->register_model(ctx, &p);
}

LH_PLUGIN_DEFINE("example_gemma", "0.2.0", init)
