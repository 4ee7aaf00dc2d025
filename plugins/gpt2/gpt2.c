/* Built-in model plugin: GPT-2 (GPT2LMHeadModel), as transformers' modeling_gpt2.py.
 *
 *   transformer.wte, transformer.wpe           token and learned position embeddings
 *   transformer.h.N.ln_1 / ln_2                LayerNorm with bias, before attention / MLP
 *   transformer.h.N.attn.c_attn                fused q|k|v, Conv1D: weight stored [in, 3 D]
 *   transformer.h.N.attn.c_proj                Conv1D [D, D]
 *   transformer.h.N.mlp.c_fc, mlp.c_proj       Conv1D, gelu_new between them
 *   transformer.ln_f                           final LayerNorm
 *   lm_head                                    tied to wte
 *
 * Its config keys are its own (n_embd, n_layer, n_head, n_positions, n_inner,
 * layer_norm_epsilon, activation_function); there is no RoPE. */
#include "lh_plugin.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gpt2_dims {
    int64_t embd, layers, heads, positions, inner, vocab;
    double eps;
    lh_activation act;
} gpt2_dims;

/* Reads and checks the config; on error fills err. */
static lh_status read_dims(const lh_host_api *api, const lh_model_config *cfg, gpt2_dims *d,
                           lh_error *err)
{
    static const char *const keys[] = {"n_embd", "n_layer", "n_head", "n_positions",
                                       "vocab_size"};
    int64_t *dst[] = {&d->embd, &d->layers, &d->heads, &d->positions, &d->vocab};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        int got = api->config_get_int(cfg, keys[i], dst[i]);
        if (got != 1 || *dst[i] <= 0)
            return lh_error_set(err, LH_E_CONFIG, "%s '%s' (GPT-2 needs a positive integer)",
                                got == 0 ? "missing required field" : "invalid field", keys[i]);
    }
    if (d->embd % d->heads != 0)
        return lh_error_set(err, LH_E_CONFIG, "n_embd=%" PRId64 " is not divisible by n_head=%"
                            PRId64, d->embd, d->heads);
    int got = api->config_get_int(cfg, "n_inner", &d->inner);
    if (got == -1 || (got == 1 && d->inner <= 0))
        return lh_error_set(err, LH_E_CONFIG, "n_inner must be a positive integer or null");
    if (got == 0)
        d->inner = 4 * d->embd; /* transformers: n_inner None means 4 x n_embd */
    d->eps = 1e-5;
    if (api->config_get_double(cfg, "layer_norm_epsilon", &d->eps) == -1 || !(d->eps >= 0))
        return lh_error_set(err, LH_E_CONFIG, "layer_norm_epsilon must be a number >= 0");
    const char *act = "gelu_new";
    api->config_get_string(cfg, "activation_function", &act);
    if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh"))
        d->act = LH_ACT_GELU_TANH;
    else if (!strcmp(act, "gelu"))
        d->act = LH_ACT_GELU;
    else
        return lh_error_set(err, LH_E_UNSUPPORTED, "activation_function '%s' is not supported "
                            "by GPT2LMHeadModel here (gelu_new, gelu_pytorch_tanh, gelu)", act);
    return LH_OK;
}

static lh_status check_config(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    gpt2_dims d;
    lh_status st = read_dims(api, cfg, &d, err);
    if (st != LH_OK)
        return st;
    bool b;
    if (api->config_get_bool(cfg, "add_cross_attention", &b) == 1 && b)
        return lh_error_set(err, LH_E_UNSUPPORTED, "add_cross_attention=true (an encoder-"
                            "decoder GPT-2) is not supported; GPT2LMHeadModel runs decoder-only");
    /* reorder_and_upcast_attn only changes where the scale is applied in low precision; the
     * runtime computes attention scores in f32 either way */
    return LH_OK;
}

static double attn_scale(const lh_host_api *api, const lh_model_config *cfg, const gpt2_dims *d,
                         int64_t layer)
{
    bool scale = true, by_layer = false;
    api->config_get_bool(cfg, "scale_attn_weights", &scale);
    api->config_get_bool(cfg, "scale_attn_by_inverse_layer_idx", &by_layer);
    double s = scale ? 1.0 / sqrt((double)(d->embd / d->heads)) : 1.0;
    return by_layer ? s / (double)(layer + 1) : s;
}

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    gpt2_dims d;
    lh_error e = {0};
    if (read_dims(api, cfg, &d, &e) != LH_OK)
        return api->build_fail(b, e.code, "%s", e.msg);
    const int64_t D = d.embd;
    lh_module *root = api->module_root(b);
    lh_module *tr = api->add_container(b, root, "transformer");
    /* GPT-2's published files hold the base model alone ("h.0.ln_1.weight") and carry each
     * layer's causal-mask buffers (attn.bias, attn.masked_bias) */
    api->base_model(b, tr);
    api->ignore_tensors(b, "attn.bias");
    api->ignore_tensors(b, "attn.masked_bias");
    lh_module *wte = api->add_embedding(b, tr, "wte", d.vocab, D);
    api->add_embedding(b, tr, "wpe", d.positions, D);
    lh_module *h = api->add_container(b, tr, "h");
    for (int64_t i = 0; i < d.layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = api->add_container(b, h, name);
        api->add_layernorm(b, layer, "ln_1", D, d.eps, true);
        const lh_attention_spec as = {.struct_size = sizeof as, .layer_index = i,
                                      .num_heads = d.heads, .num_kv_heads = d.heads,
                                      .head_dim = D / d.heads,
                                      .scale = attn_scale(api, cfg, &d, i),
                                      .max_positions = d.positions};
        lh_module *attn = api->add_attention(b, layer, "attn", &as);
        api->add_linear_transposed(b, attn, "c_attn", D, 3 * D, true);
        api->add_linear_transposed(b, attn, "c_proj", D, D, true);
        api->add_layernorm(b, layer, "ln_2", D, d.eps, true);
        lh_module *mlp = api->add_mlp(b, layer, "mlp");
        api->add_linear_transposed(b, mlp, "c_fc", D, d.inner, true);
        api->add_linear_transposed(b, mlp, "c_proj", d.inner, D, true);
    }
    api->add_layernorm(b, tr, "ln_f", D, d.eps, true);
    lh_module *head = api->add_head(b, root, "lm_head", D, d.vocab, false);
    api->tie_weights(b, head, wte); /* GPT2LMHeadModel always ties */
    return api->build_status(b);
}

typedef struct gpt2_layer {
    const lh_weight *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const lh_weight *wq, *wk, *wv, *bq, *bk, *bv, *wo, *bo;
    const lh_weight *fc_w, *fc_b, *proj_w, *proj_b;
    const lh_attn_ref *attn;
} gpt2_layer;

typedef struct gpt2_model {
    gpt2_dims d;
    const lh_weight *wte, *wpe, *lnf_w, *lnf_b, *head;
    gpt2_layer *layers;
} gpt2_model;

static void destroy(void *model)
{
    gpt2_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      void **model, lh_forward_info *info)
{
    gpt2_model *m = calloc(1, sizeof *m);
    lh_error e = {0};
    if (!m)
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    if (read_dims(api, cfg, &m->d, &e) != LH_OK) {
        free(m);
        return api->bind_fail(bd, e.code, "%s", e.msg);
    }
    m->layers = calloc((size_t)m->d.layers, sizeof *m->layers);
    if (!m->layers) {
        destroy(m);
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    }
    const int64_t D = m->d.embd;
    m->wte = api->weight(bd, "transformer.wte.weight");
    m->wpe = api->weight(bd, "transformer.wpe.weight");
    m->lnf_w = api->weight(bd, "transformer.ln_f.weight");
    m->lnf_b = api->weight(bd, "transformer.ln_f.bias");
    m->head = api->weight(bd, "lm_head.weight");
    for (int64_t i = 0; i < m->d.layers; i++) {
        gpt2_layer *L = &m->layers[i];
        const char *p = "transformer.h.%" PRId64 ".%s";
        L->ln1_w = api->weight(bd, p, i, "ln_1.weight");
        L->ln1_b = api->weight(bd, p, i, "ln_1.bias");
        L->ln2_w = api->weight(bd, p, i, "ln_2.weight");
        L->ln2_b = api->weight(bd, p, i, "ln_2.bias");
        /* c_attn's output columns are q | k | v */
        const lh_weight *qkv = api->weight(bd, p, i, "attn.c_attn.weight");
        const lh_weight *qkv_b = api->weight(bd, p, i, "attn.c_attn.bias");
        L->wq = api->weight_rows(bd, qkv, 0, D);
        L->wk = api->weight_rows(bd, qkv, D, D);
        L->wv = api->weight_rows(bd, qkv, 2 * D, D);
        L->bq = api->weight_rows(bd, qkv_b, 0, D);
        L->bk = api->weight_rows(bd, qkv_b, D, D);
        L->bv = api->weight_rows(bd, qkv_b, 2 * D, D);
        L->wo = api->weight(bd, p, i, "attn.c_proj.weight");
        L->bo = api->weight(bd, p, i, "attn.c_proj.bias");
        L->fc_w = api->weight(bd, p, i, "mlp.c_fc.weight");
        L->fc_b = api->weight(bd, p, i, "mlp.c_fc.bias");
        L->proj_w = api->weight(bd, p, i, "mlp.c_proj.weight");
        L->proj_b = api->weight(bd, p, i, "mlp.c_proj.bias");
        L->attn = api->attention(bd, "transformer.h.%" PRId64 ".attn", i);
    }
    lh_status st = api->bind_status(bd);
    if (st != LH_OK) {
        destroy(m);
        return st;
    }
    info->vocab_size = m->d.vocab;
    /* resid, h, q, k, v, attn, proj [D]; ff [inner] */
    info->scratch_bytes_per_token = (int64_t)sizeof(float) * (7 * D + m->d.inner);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * D;
    info->scratch_requests = 8;
    *model = m;
    return LH_OK;
}

static lh_status forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const gpt2_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens, D = m->d.embd;
    const float eps = (float)m->d.eps;
    lh_tensor resid = api->scratch(f, T, D), h = api->scratch(f, T, D);
    lh_tensor q = api->scratch(f, T, D), k = api->scratch(f, T, D), v = api->scratch(f, T, D);
    lh_tensor attn = api->scratch(f, T, D), proj = api->scratch(f, T, D);
    lh_tensor ff = api->scratch(f, T, m->d.inner);

    api->fwd_where(f, "embedding");
    api->embed(f, m->wte, &resid);
    api->embed_positions(f, m->wpe, &resid);
    for (int64_t i = 0; i < m->d.layers && api->fwd_status(f) == LH_OK; i++) {
        const gpt2_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        api->layernorm(f, &resid, L->ln1_w, L->ln1_b, eps, &h);
        api->linear(f, &h, L->wq, L->bq, &q);
        api->linear(f, &h, L->wk, L->bk, &k);
        api->linear(f, &h, L->wv, L->bv, &v);
        api->attend(f, L->attn, &q, &k, &v, &attn);
        api->linear(f, &attn, L->wo, L->bo, &proj);
        api->add(f, &resid, &proj);
        api->layernorm(f, &resid, L->ln2_w, L->ln2_b, eps, &h);
        api->linear(f, &h, L->fc_w, L->fc_b, &ff);
        api->act(f, m->d.act, &ff, &ff);
        api->linear(f, &ff, L->proj_w, L->proj_b, &proj);
        api->add(f, &resid, &proj);
    }
    lh_tensor logits = api->logits(f);
    if (logits.shape[0] == 0)
        return api->fwd_status(f);
    api->fwd_where(f, "lm_head");
    lh_tensor rows = api->output_rows(f, &resid); /* ln_f only on the rows asked for */
    api->layernorm(f, &rows, m->lnf_w, m->lnf_b, eps, &rows);
    api->linear(f, &rows, m->head, NULL, &logits);
    return api->fwd_status(f);
}

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
    const lh_model_provider p = {.struct_size = sizeof p, .name = "GPT2LMHeadModel", .ops = &ops};
    return api->register_model(ctx, &p);
}

LH_PLUGIN_DEFINE("model_gpt2", "0.1.0", init)
