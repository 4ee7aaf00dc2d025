/* The standard decoder-only causal LM (Llama family) with Hugging Face names:
 *
 *   model.embed_tokens                       [vocab, hidden]
 *   model.layers.N.input_layernorm           [hidden]
 *   model.layers.N.self_attn.{q,k,v,o}_proj  (q_norm/k_norm with qk_norm; MLA layout when the
 *                                             geometry has kv_lora_rank)
 *   model.layers.N.post_attention_layernorm  [hidden]
 *   model.layers.N.mlp.{gate,up,down}_proj
 *   model.norm                               [hidden]
 *   lm_head                                  [vocab, hidden], tied to embed_tokens when
 *                                             tie_word_embeddings
 *
 * Norm fusion chain: layer N -> layer N+1's input_layernorm; the last layer -> model.norm. */
#include "tree_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

static lh_attention_spec attention_spec(const lh_model_config *cfg, const lh_decoder_spec *spec,
                                        int64_t layer)
{
    const lh_model_geometry *g = &cfg->geo;
    lh_attention_spec s = {0};
    s.struct_size = (uint32_t)sizeof s;
    s.layer_index = layer;
    s.hidden_size = g->hidden_size;
    s.num_heads = g->num_attention_heads;
    s.num_kv_heads = g->num_key_value_heads;
    s.head_dim = g->head_dim;
    /* transformers: Llama/Mistral use attention_bias for q, k, v and o; Qwen2 has q/k/v bias
     * and no o bias. */
    s.qkv_bias = spec->qkv_bias || g->attention_bias;
    s.o_bias = g->attention_bias;
    s.qk_norm = spec->qk_norm;
    s.norm_eps = g->rms_norm_eps;
    s.sliding_window = g->sliding_window;
    /* Qwen2 configs carry a sliding_window value with use_sliding_window: false. */
    bool use_sw;
    if (lh_model_config_get_bool(cfg, "use_sliding_window", &use_sw) == 1 && !use_sw)
        s.sliding_window = 0;
    if (g->has_mla) {
        s.mla = true;
        s.q_lora_rank = g->has_q_lora_rank ? g->q_lora_rank : 0;
        s.kv_lora_rank = g->kv_lora_rank;
        s.qk_rope_head_dim = g->qk_rope_head_dim;
        s.qk_nope_head_dim = g->qk_nope_head_dim;
        s.v_head_dim = g->v_head_dim;
    }
    return s;
}

lh_status lh_build_decoder_lm(lh_build *b, const lh_model_config *cfg,
                              const lh_decoder_spec *spec)
{
    if (!b)
        return LH_E_USAGE;
    if (b->status != LH_OK)
        return b->status;
    if (!cfg)
        return lh_tree_fail(b, LH_E_USAGE, "build_decoder_lm: NULL config");
    lh_decoder_spec dspec = {.struct_size = (uint32_t)sizeof dspec};
    if (spec) {
        /* ABI 2.0 plugins end before mlp_act; later fields read as defaults for them */
        const size_t min_size = offsetof(lh_decoder_spec, mlp_act);
        if (spec->struct_size < min_size)
            return lh_tree_fail(b, LH_E_USAGE,
                                "build_decoder_lm: spec struct_size %u is smaller than %zu",
                                (unsigned)spec->struct_size, min_size);
#define SPEC_HAS(f) (spec->struct_size >= offsetof(lh_decoder_spec, f) + sizeof spec->f)
        dspec.qkv_bias = spec->qkv_bias;
        dspec.qk_norm = spec->qk_norm;
        if (SPEC_HAS(mlp_act))
            dspec.mlp_act = spec->mlp_act;
        if (SPEC_HAS(norm_weight_offset))
            dspec.norm_weight_offset = spec->norm_weight_offset;
        if (SPEC_HAS(scale_embeddings))
            dspec.scale_embeddings = spec->scale_embeddings;
#undef SPEC_HAS
        if (dspec.mlp_act != LH_MLP_SILU && dspec.mlp_act != LH_MLP_GELU_TANH)
            return lh_tree_fail(b, LH_E_USAGE,
                                "build_decoder_lm: spec mlp_act %d is not an lh_mlp_activation "
                                "(LH_MLP_SILU 0, LH_MLP_GELU_TANH 1)", (int)dspec.mlp_act);
        if (!isfinite(dspec.norm_weight_offset))
            return lh_tree_fail(b, LH_E_USAGE,
                                "build_decoder_lm: spec norm_weight_offset %g is not finite",
                                (double)dspec.norm_weight_offset);
    }
    lh_err e = {0};
    if (lh_model_config_require_decoder(cfg, &e) != LH_OK)
        return lh_tree_fail(b, e.code != LH_OK ? e.code : LH_E_CONFIG, "%s", e.msg);

    const lh_model_geometry *g = &cfg->geo;
    const int64_t hidden = g->hidden_size, vocab = g->vocab_size;
    const double eps = g->rms_norm_eps;

    lh_module *root = lh_build_module_root(b);
    lh_module *model = lh_build_add_container(b, root, "model");
    lh_module *embed = lh_build_add_embedding(b, model, "embed_tokens", vocab, hidden);
    lh_module *layers = lh_build_add_container(b, model, "layers");
    lh_module *prev = NULL;
    for (int64_t i = 0; i < g->num_hidden_layers && b->status == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = lh_build_add_container(b, layers, name);
        lh_module *in_norm = lh_build_add_rmsnorm(b, layer, "input_layernorm", hidden, eps);
        if (prev)
            lh_build_chain_norm(b, prev, in_norm);
        lh_attention_spec as = attention_spec(cfg, &dspec, i);
        lh_build_add_attention(b, layer, "self_attn", &as);
        lh_build_add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        lh_build_add_gated_mlp(b, layer, "mlp", hidden, g->intermediate_size);
        prev = layer;
    }
    lh_module *norm = lh_build_add_rmsnorm(b, model, "norm", hidden, eps);
    if (prev)
        lh_build_chain_norm(b, prev, norm);
    lh_module *head = lh_build_add_linear(b, root, "lm_head", hidden, vocab, false);
    if (g->tie_word_embeddings)
        lh_build_tie_weights(b, head, embed);
    if (b->status == LH_OK) {
        b->has_decoder_spec = true;
        b->decoder_spec = dspec;
    }
    return b->status;
}

const lh_decoder_spec *lh_model_decoder_spec(const lh_model *m)
{
    return m && m->b && m->b->has_decoder_spec ? &m->b->decoder_spec : NULL;
}
