/* A test model plugin whose bind and forward misbehave on purpose, one way per class of bad
 * input the runner (host/runtime/runner*.c) handles. Used by tests/runtime/test_runner_errors.c.
 *
 * construct builds the real Llama tree (the same names, order and shapes as
 * plugins/llama/llama_family.c), so the plugin binds any Llama checkpoint without MLA, qk-norm
 * or biases -- the tests use tests/fixtures/models/llama-mha-f32. The misbehaviour is chosen by
 * the model's config.json: the string key "fwd_bad_case" (absent: "good", a correct Llama
 * forward pass that must agree with the built-in one).
 *
 * Architectures registered:
 *   FwdBadForCausalLM  construct, bind, forward, destroy; the case decides what goes wrong
 *   FwdBadNoForward    construct only: describes the model but cannot run it
 *
 * Cases (bind):
 *   missing_weight      asks for model.layers.1.self_attn.qkv_proj.weight (not in the tree)
 *   missing_attention   asks for the attention layer model.layers.2.self_attn (2 layers only)
 *   missing_moe         asks for the MoE block model.layers.0.mlp (a dense tree has none)
 *   vocab_zero          reports vocab_size 0
 *   scratch_negative    reports scratch_bytes_per_token -1
 *   rows_outside        a valid row view of layer 0's q_proj, then rows [48, 80) of it (64 rows)
 *   rows_null           weight_rows of a NULL weight
 *   bind_fail_ok        records an error (LH_E_CONFIG) but returns LH_OK, keeping its state
 *   bind_fail_okcode    records an error with the code LH_OK and returns LH_OK
 *   bind_silent         returns LH_E_UNSUPPORTED without recording a message
 * Cases (forward):
 *   too_many_requests   takes a 10th scratch tensor after declaring 9
 *   too_many_bytes      declares 4 * hidden bytes per token (one activation), takes nine
 *   attend_q            q seen as [2T, 32] (width of 2 heads, twice the rows)
 *   attend_k            k seen as [T - 1, 64]
 *   attend_v            v NULL
 *   attend_out          out a [T, 64] strided view of a [T, 128] tensor (not contiguous)
 *   attend_dtype        q a bf16 [T, 64] tensor (the right shape in another dtype)
 *   output_rows_always  calls output_rows even when the step asks for no logits
 *   fwd_fail            fails layer 1 with fwd_fail(LH_E_UNSUPPORTED) under fwd_where("layer 1")
 *   fwd_fail_ok         records an error with fwd_fail but returns LH_OK
 *   fwd_silent          returns LH_E_IO without recording a message
 *   linear_shape        linear of layer 0's q_proj on h cut to [2T, 32]
 *   linear_null         linear with a NULL weight
 *   moe_null            moe_ffn with a NULL block
 *   mla_not_mla         attend_mla on layer 0's attention (GQA, not latent)
 *   mla_null_kv_b       attend_mla with a NULL kv_b weight
 *   scratch_empty       a scratch tensor [0, hidden]
 *   act_invalid         act_mul with activation 7 (no lh_activation)
 *   act_silu            the ungated act with LH_ACT_SILU (gated only)
 *   output_rows_shape   output_rows of h seen as [2T, hidden / 2]
 *
 * Only plugin_api/ headers; every block through the host API table. */
#include "lh_plugin.h"
#include "llama_tree.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum fb_case {
    FB_GOOD,
    FB_MISSING_WEIGHT,
    FB_MISSING_ATTENTION,
    FB_MISSING_MOE,
    FB_MOE_NULL,
    FB_MLA_NOT_MLA,
    FB_MLA_NULL_KV_B,
    FB_VOCAB_ZERO,
    FB_SCRATCH_NEGATIVE,
    FB_ROWS_OUTSIDE,
    FB_ROWS_NULL,
    FB_BIND_FAIL_OK,
    FB_BIND_FAIL_OKCODE,
    FB_BIND_SILENT,
    FB_TOO_MANY_REQUESTS,
    FB_TOO_MANY_BYTES,
    FB_ATTEND_Q,
    FB_ATTEND_K,
    FB_ATTEND_V,
    FB_ATTEND_OUT,
    FB_ATTEND_DTYPE,
    FB_OUTPUT_ROWS_ALWAYS,
    FB_FWD_FAIL,
    FB_FWD_FAIL_OK,
    FB_FWD_SILENT,
    FB_LINEAR_SHAPE,
    FB_LINEAR_NULL,
    FB_SCRATCH_EMPTY,
    FB_ACT_INVALID,
    FB_ACT_SILU,
    FB_OUTPUT_ROWS_SHAPE,
} fb_case;

static const struct {
    const char *name;
    fb_case c;
} fb_cases[] = {
    {"good", FB_GOOD},
    {"missing_weight", FB_MISSING_WEIGHT},
    {"missing_attention", FB_MISSING_ATTENTION},
    {"missing_moe", FB_MISSING_MOE},
    {"moe_null", FB_MOE_NULL},
    {"mla_not_mla", FB_MLA_NOT_MLA},
    {"mla_null_kv_b", FB_MLA_NULL_KV_B},
    {"vocab_zero", FB_VOCAB_ZERO},
    {"scratch_negative", FB_SCRATCH_NEGATIVE},
    {"rows_outside", FB_ROWS_OUTSIDE},
    {"rows_null", FB_ROWS_NULL},
    {"bind_fail_ok", FB_BIND_FAIL_OK},
    {"bind_fail_okcode", FB_BIND_FAIL_OKCODE},
    {"bind_silent", FB_BIND_SILENT},
    {"too_many_requests", FB_TOO_MANY_REQUESTS},
    {"too_many_bytes", FB_TOO_MANY_BYTES},
    {"attend_q", FB_ATTEND_Q},
    {"attend_k", FB_ATTEND_K},
    {"attend_v", FB_ATTEND_V},
    {"attend_out", FB_ATTEND_OUT},
    {"attend_dtype", FB_ATTEND_DTYPE},
    {"output_rows_always", FB_OUTPUT_ROWS_ALWAYS},
    {"fwd_fail", FB_FWD_FAIL},
    {"fwd_fail_ok", FB_FWD_FAIL_OK},
    {"fwd_silent", FB_FWD_SILENT},
    {"linear_shape", FB_LINEAR_SHAPE},
    {"linear_null", FB_LINEAR_NULL},
    {"scratch_empty", FB_SCRATCH_EMPTY},
    {"act_invalid", FB_ACT_INVALID},
    {"act_silu", FB_ACT_SILU},
    {"output_rows_shape", FB_OUTPUT_ROWS_SHAPE},
};

/* ---- construct: the Llama tree (tests/support/llama_tree.c, as the built-in plugin builds it) */

static lh_status fb_construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return test_llama_tree(api, b, cfg, false, false);
}

/* ---- bind ------------------------------------------------------------------------------------- */

typedef struct fb_layer {
    const lh_weight *in_norm, *post_norm, *wq, *wk, *wv, *wo, *gate, *up, *down;
    const lh_attn_ref *attn;
} fb_layer;

typedef struct fb_model {
    fb_case c;
    int64_t hidden, intermediate, n_layers, heads, kv_heads, head_dim;
    float eps;
    const lh_weight *embed, *final_norm, *lm_head;
    fb_layer *layers;
} fb_model;

static void fb_destroy(void *model)
{
    fb_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

static lh_status fb_bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                         void **model, lh_forward_info *info)
{
    fb_case c = FB_GOOD;
    const char *name = "good";
    int got = api->config_get_string(cfg, "fwd_bad_case", &name);
    if (got < 0)
        return api->bind_fail(bd, LH_E_CONFIG, "fwd_bad: fwd_bad_case must be a string");
    size_t k = 0;
    while (k < sizeof fb_cases / sizeof *fb_cases && strcmp(fb_cases[k].name, name) != 0)
        k++;
    if (k == sizeof fb_cases / sizeof *fb_cases)
        return api->bind_fail(bd, LH_E_CONFIG, "fwd_bad: unknown fwd_bad_case '%s'", name);
    c = fb_cases[k].c;
    if (c == FB_BIND_SILENT)
        return LH_E_UNSUPPORTED;

    const lh_model_geometry *g = api->config_geometry(cfg);
    fb_model *m = calloc(1, sizeof *m);
    if (m)
        m->layers = calloc((size_t)g->num_hidden_layers, sizeof *m->layers);
    if (!m || !m->layers) {
        fb_destroy(m);
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    }
    m->c = c;
    m->hidden = g->hidden_size;
    m->intermediate = g->intermediate_size;
    m->n_layers = g->num_hidden_layers;
    m->heads = g->num_attention_heads;
    m->kv_heads = g->num_key_value_heads;
    m->head_dim = g->head_dim;
    m->eps = (float)g->rms_norm_eps;
    m->embed = api->weight(bd, "model.embed_tokens.weight");
    m->final_norm = api->weight(bd, "model.norm.weight");
    m->lm_head = api->weight(bd, "lm_head.weight");
    for (int64_t i = 0; i < m->n_layers; i++) {
        fb_layer *L = &m->layers[i];
        const char *p = "model.layers.%" PRId64 ".%s";
        L->in_norm = api->weight(bd, p, i, "input_layernorm.weight");
        L->post_norm = api->weight(bd, p, i, "post_attention_layernorm.weight");
        L->wq = api->weight(bd, p, i, "self_attn.q_proj.weight");
        L->wk = api->weight(bd, p, i, "self_attn.k_proj.weight");
        L->wv = api->weight(bd, p, i, "self_attn.v_proj.weight");
        L->wo = api->weight(bd, p, i, "self_attn.o_proj.weight");
        L->gate = api->weight(bd, p, i, "mlp.gate_proj.weight");
        L->up = api->weight(bd, p, i, "mlp.up_proj.weight");
        L->down = api->weight(bd, p, i, "mlp.down_proj.weight");
        L->attn = api->attention(bd, "model.layers.%" PRId64 ".self_attn", i);
    }
    switch (c) {
    case FB_MISSING_WEIGHT:
        api->weight(bd, "model.layers.%d.self_attn.qkv_proj.weight", 1);
        break;
    case FB_MISSING_ATTENTION:
        api->attention(bd, "model.layers.%" PRId64 ".self_attn", m->n_layers);
        break;
    case FB_MISSING_MOE:
        api->moe(bd, "model.layers.%d.mlp", 0);
        break;
    case FB_ROWS_OUTSIDE: {
        /* a good view first: the failing bind must free it too */
        const lh_weight *ok = api->weight_rows(bd, m->layers[0].wq, 0, 16);
        if (ok && api->weight_tensor(ok)->shape[0] != 16)
            api->bind_fail(bd, LH_E_INTERNAL, "fwd_bad: a view of 16 rows has %" PRId64,
                           api->weight_tensor(ok)->shape[0]);
        api->weight_rows(bd, m->layers[0].wq, 48, 32);
        break;
    }
    case FB_ROWS_NULL:
        api->weight_rows(bd, NULL, 0, 1);
        break;
    default:
        break;
    }
    lh_status st = api->bind_status(bd);
    if (c == FB_BIND_FAIL_OK) {
        api->bind_fail(bd, LH_E_CONFIG, "fwd_bad: deliberate bind failure (state kept, "
                       "returned ok)");
        st = LH_OK;
    } else if (c == FB_BIND_FAIL_OKCODE) {
        api->bind_fail(bd, LH_OK, "fwd_bad: a failure recorded with the code ok");
        st = LH_OK;
    } else if (st != LH_OK) {
        fb_destroy(m);
        return st;
    }
    const int64_t qd = m->heads * m->head_dim, kvd = m->kv_heads * m->head_dim;
    info->vocab_size = c == FB_VOCAB_ZERO ? 0 : g->vocab_size;
    /* resid, h, proj [hidden]; q, attn_out [qd]; k, v [kvd]; gate, up [intermediate] */
    info->scratch_bytes_per_token =
        (int64_t)sizeof(float) * (3 * m->hidden + 2 * qd + 2 * kvd + 2 * m->intermediate);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * m->hidden;
    info->scratch_requests = 9;
    if (c == FB_SCRATCH_NEGATIVE)
        info->scratch_bytes_per_token = -1;
    if (c == FB_TOO_MANY_BYTES) {
        info->scratch_bytes_per_token = (int64_t)sizeof(float) * m->hidden;
        info->scratch_bytes_per_row = 0;
    }
    *model = m;
    return st;
}

/* ---- forward ---------------------------------------------------------------------------------- */

static lh_tensor view2(const lh_tensor *x, int64_t rows, int64_t cols)
{
    const int64_t shape[2] = {rows, cols};
    return lh_tensor_view(x, 2, shape);
}

static lh_status fb_forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const fb_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens, H = m->heads, KVH = m->kv_heads;
    const int64_t D = m->head_dim;
    if (m->c == FB_FWD_SILENT)
        return LH_E_IO;
    if (m->c == FB_SCRATCH_EMPTY)
        api->scratch(f, 0, m->hidden);
    lh_tensor resid = api->scratch(f, T, m->hidden), h = api->scratch(f, T, m->hidden);
    lh_tensor q = api->scratch(f, T, H * D), k = api->scratch(f, T, KVH * D);
    lh_tensor v = api->scratch(f, T, KVH * D), attn = api->scratch(f, T, H * D);
    lh_tensor proj = api->scratch(f, T, m->hidden);
    lh_tensor gate = api->scratch(f, T, m->intermediate), up = api->scratch(f, T, m->intermediate);
    if (m->c == FB_TOO_MANY_REQUESTS)
        api->scratch(f, T, m->hidden);
    void *bf16 = NULL; /* attend_dtype: room for f32, so a reader that ignores dtype stays in */
    lh_tensor qb = q;
    if (m->c == FB_ATTEND_DTYPE) {
        bf16 = calloc((size_t)(T * H * D), sizeof(float));
        if (!bf16)
            return api->fwd_fail(f, LH_E_NOMEM, "out of memory");
        const int64_t shape[2] = {T, H * D};
        qb = lh_tensor_cpu(LH_DTYPE_BF16, bf16, 2, shape);
        qb.device = q.device;
    }

    api->fwd_where(f, "embedding");
    api->embed(f, m->embed, &resid);
    api->rmsnorm(f, &resid, m->layers[0].in_norm, m->eps, 0.0f, &h);
    for (int64_t i = 0; i < m->n_layers && api->fwd_status(f) == LH_OK; i++) {
        const fb_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        if (m->c == FB_FWD_FAIL && i == 1)
            api->fwd_fail(f, LH_E_UNSUPPORTED, "fwd_bad: deliberate failure of layer %" PRId64
                          "'s forward", i);
        if (m->c == FB_LINEAR_SHAPE) {
            lh_tensor narrow = view2(&h, 2 * T, m->hidden / 2);
            api->linear(f, &narrow, L->wq, NULL, &q);
        }
        if (m->c == FB_LINEAR_NULL)
            api->linear(f, &h, NULL, NULL, &q);
        if (m->c == FB_MOE_NULL)
            api->moe_ffn(f, NULL, &h, &proj);
        if (m->c == FB_MLA_NOT_MLA)
            api->attend_mla(f, L->attn, &q, &k, &v, L->wk, &attn);
        if (m->c == FB_MLA_NULL_KV_B)
            api->attend_mla(f, L->attn, &q, &k, &v, NULL, &attn);
        api->linear(f, &h, L->wq, NULL, &q);
        api->linear(f, &h, L->wk, NULL, &k);
        api->linear(f, &h, L->wv, NULL, &v);
        lh_tensor aq = q, ak = k, av = v, ao = attn;
        lh_tensor *pv = &av;
        switch (m->c) {
        case FB_ATTEND_Q:
            aq = view2(&q, 2 * T, H * D / 2);
            break;
        case FB_ATTEND_K:
            ak = view2(&k, T - 1, KVH * D);
            break;
        case FB_ATTEND_V:
            pv = NULL;
            break;
        case FB_ATTEND_OUT: /* [T, H * D] with the row stride of gate [T, intermediate] */
            ao = gate;
            ao.shape[1] = H * D;
            break;
        case FB_ATTEND_DTYPE:
            aq = qb;
            break;
        default:
            break;
        }
        api->attend(f, L->attn, &aq, &ak, pv, &ao);
        api->linear(f, &attn, L->wo, NULL, &proj);
        api->residual_rmsnorm(f, &resid, &proj, L->post_norm, m->eps, 0.0f, &h);
        api->linear(f, &h, L->gate, NULL, &gate);
        api->linear(f, &h, L->up, NULL, &up);
        if (m->c == FB_ACT_INVALID)
            api->act_mul(f, (lh_activation)7, &gate, &up, &gate);
        if (m->c == FB_ACT_SILU)
            api->act(f, LH_ACT_SILU, &gate, &gate);
        api->act_mul(f, LH_ACT_SILU, &gate, &up, &gate);
        api->linear(f, &gate, L->down, NULL, &proj);
        const lh_weight *next = i + 1 < m->n_layers ? m->layers[i + 1].in_norm : m->final_norm;
        api->residual_rmsnorm(f, &resid, &proj, next, m->eps, 0.0f, &h);
    }
    free(bf16);
    lh_tensor logits = api->logits(f);
    if (logits.shape[0] == 0 && m->c != FB_OUTPUT_ROWS_ALWAYS)
        return api->fwd_status(f);
    api->fwd_where(f, "lm_head");
    lh_tensor hh = m->c == FB_OUTPUT_ROWS_SHAPE ? view2(&h, 2 * T, m->hidden / 2) : h;
    lh_tensor rows = api->output_rows(f, &hh);
    api->linear(f, &rows, m->lm_head, NULL, &logits);
    if (m->c == FB_FWD_FAIL_OK) {
        api->fwd_fail(f, LH_E_CONFIG, "fwd_bad: deliberate failure, then returns ok");
        return LH_OK;
    }
    return api->fwd_status(f);
}

static const lh_model_ops fb_ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = fb_construct,
    .bind = fb_bind,
    .forward = fb_forward,
    .destroy = fb_destroy,
};

static const lh_model_ops fb_describe_only_ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = fb_construct,
};

static lh_status fb_init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_model_provider full = {sizeof full, "FwdBadForCausalLM", &fb_ops, NULL};
    const lh_model_provider describe = {sizeof describe, "FwdBadNoForward",
                                        &fb_describe_only_ops, NULL};
    lh_status st = api->register_model(ctx, &full);
    if (st == LH_OK)
        st = api->register_model(ctx, &describe);
    if (st != LH_OK)
        return api->init_fail(ctx, "fwd_bad: registration failed (status %d)", (int)st);
    return LH_OK;
}

LH_PLUGIN_DEFINE("fwd_bad", "1.0.0", fb_init);
