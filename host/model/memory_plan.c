/* The memory plan: everything `llmhost explain` reports about a model, computed from the tree
 * alone (no weight memory exists). */
#include "tree_internal.h"

#include "../core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { G_EMBEDDING, G_ATTENTION, G_MLP, G_NORM, G_LM_HEAD, G_OTHER, G_COUNT };

static const char *const group_names[G_COUNT] = {"embedding", "attention", "mlp",
                                                 "norm",      "lm_head",   "other"};

static int classify(const lh_module *x)
{
    /* The nearest attention / MLP block owns everything under it. */
    for (const lh_module *a = x; a; a = a->parent) {
        if (a->kind == LH_MOD_ATTENTION)
            return G_ATTENTION;
        if (a->kind == LH_MOD_MLP || a->kind == LH_MOD_MOE)
            return G_MLP;
        if (a->kind == LH_MOD_HEAD)
            return G_LM_HEAD;
    }
    switch (x->kind) {
    case LH_MOD_EMBEDDING: return G_EMBEDDING;
    case LH_MOD_RMSNORM:
    case LH_MOD_LAYERNORM: return G_NORM;
    default: return G_OTHER;
    }
}

/* parameters (scales not counted) and bytes (scales counted) of x and every module under it,
 * tied ones on their source */
static void subtree_sizes(const lh_module *x, int64_t *params, int64_t *bytes)
{
    for (const lh_param *p = x->params; p; p = p->next)
        if (!p->tied_to) {
            *params += p->is_scale || p->is_buffer ? 0 : p->numel;
            *bytes += p->bytes;
        }
    for (const lh_module *c = x->first_child; c; c = c->next_sibling)
        subtree_sizes(c, params, bytes);
}

lh_status lh_model_plan(const lh_model *m, lh_memory_plan *out, lh_err *err)
{
    if (!m || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_model_plan: NULL argument");
    memset(out, 0, sizeof *out);
    const lh_build *b = m->b;
    out->weight_dtype = b->dtype;
    out->n_groups = G_COUNT;
    for (int g = 0; g < G_COUNT; g++)
        out->groups[g].name = group_names[g];

    for (const lh_module *x = b->root; x; x = lh_tree_next(x)) {
        if (!x->params)
            continue;
        lh_plan_group *g = &out->groups[classify(x)];
        for (const lh_param *p = x->params; p; p = p->next) {
            if (p->tied_to)
                continue; /* counted once, on the source */
            /* a quantized weight's scales and a buffer are bytes, not parameters */
            const int64_t n = p->is_scale || p->is_buffer ? 0 : p->numel;
            if (!lh_tree_add(out->parameters, n, &out->parameters) ||
                !lh_tree_add(out->active_parameters, n, &out->active_parameters) ||
                !lh_tree_add(out->weight_bytes, p->bytes, &out->weight_bytes) ||
                !lh_tree_add(g->parameters, n, &g->parameters) ||
                !lh_tree_add(g->bytes, p->bytes, &g->bytes))
                return lh_err_set(err, LH_E_CONFIG, "%s: total parameter bytes overflow int64",
                                  m->provider);
        }
    }
    /* routed experts: only top_k of n_experts run per token (each expert has the same
     * parameters, so the inactive share is exact) */
    for (const lh_module *x = b->root; x; x = lh_tree_next(x)) {
        if (x->kind != LH_MOD_EXPERTS)
            continue;
        int64_t total = 0, bytes = 0;
        subtree_sizes(x, &total, &bytes);
        const int64_t per = total / x->moe->n_experts;
        out->active_parameters -= per * (x->moe->n_experts - x->moe->route.top_k);
        out->routed_expert_bytes += bytes;
        const double share = (double)x->moe->route.top_k / (double)x->moe->n_experts;
        if (share > out->routed_share)
            out->routed_share = share;
    }
    for (size_t i = 0; i < b->n_attn; i++)
        if (!lh_tree_add(out->kv_bytes_per_token, b->attn[i].module->kv_bytes_per_token,
                         &out->kv_bytes_per_token))
            return lh_err_set(err, LH_E_CONFIG, "%s: KV bytes per token overflow int64",
                              m->provider);
    if (!lh_tree_mul(m->max_seq_len, m->max_batch_size, &out->kv_pool_tokens))
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: KV pool of max_seq_len %lld x max_batch_size %lld tokens "
                          "overflows int64",
                          m->provider, (long long)m->max_seq_len, (long long)m->max_batch_size);
    if (!lh_tree_mul(out->kv_pool_tokens, out->kv_bytes_per_token, &out->kv_pool_bytes))
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: KV pool bytes (%lld tokens x %lld bytes) overflow int64",
                          m->provider, (long long)out->kv_pool_tokens,
                          (long long)out->kv_bytes_per_token);
    out->peak_construction_bytes = b->bytes_peak;
    out->num_attention_layers = (int64_t)b->n_attn;
    out->quantized_linears = m->quantized_linears;
    return LH_OK;
}

/* json_*_new steal their argument; a NULL anywhere makes the final check fail. */
static bool put(json_t *obj, const char *key, json_t *v)
{
    return v && json_object_set_new(obj, key, v) == 0;
}

json_t *lh_model_plan_json(const lh_model *m, const lh_memory_plan *plan)
{
    if (!m || !plan)
        return NULL;
    const lh_build *b = m->b;
    json_t *o = json_object();
    json_t *groups = json_object();
    json_t *attn = json_array();
    bool ok = o && groups && attn;
    /* Each stored type's share (a GGUF file mixes them: Q4_K, Q6_K, F32 norms): one
     * weight_dtype names the type only when every parameter has it. */
    json_t *types = json_object();
    ok = ok && types;
    lh_dtype only = LH_DTYPE_INVALID;
    bool mixed = false;
    for (const lh_module *x = b->root; ok && x; x = lh_tree_next(x))
        for (const lh_param *p = x->params; ok && p; p = p->next) {
            if (p->tied_to)
                continue;
            mixed |= only != LH_DTYPE_INVALID && p->dtype != only;
            only = p->dtype;
            const char *n = lh_dtype_name(p->dtype) ? lh_dtype_name(p->dtype) : "?";
            json_t *t = json_object_get(types, n);
            if (!t) {
                ok = put(types, n, json_pack("{s:I,s:I,s:I}", "tensors", (json_int_t)0,
                                             "parameters", (json_int_t)0, "bytes",
                                             (json_int_t)0));
                t = json_object_get(types, n);
            }
            ok = ok && t &&
                 put(t, "tensors", json_integer(json_integer_value(json_object_get(t, "tensors")) + 1)) &&
                 put(t, "parameters", json_integer(json_integer_value(json_object_get(t, "parameters")) + (p->is_scale || p->is_buffer ? 0 : p->numel))) &&
                 put(t, "bytes", json_integer(json_integer_value(json_object_get(t, "bytes")) + p->bytes));
        }
    const char *dt = mixed ? "mixed" : lh_dtype_name(plan->weight_dtype);
    ok = ok && put(o, "weight_types", json_incref(types));
    json_decref(types);
    ok = ok && put(o, "parameters", json_integer(plan->parameters)) &&
         put(o, "active_parameters", json_integer(plan->active_parameters)) &&
         put(o, "routed_expert_bytes", json_integer(plan->routed_expert_bytes)) &&
         put(o, "routed_share", json_real(plan->routed_share)) &&
         put(o, "weight_bytes", json_integer(plan->weight_bytes)) &&
         put(o, "weight_dtype", dt ? json_string(dt) : json_null()) &&
         put(o, "kv_bytes_per_token", json_integer(plan->kv_bytes_per_token)) &&
         put(o, "kv_pool_tokens", json_integer(plan->kv_pool_tokens)) &&
         put(o, "kv_pool_bytes", json_integer(plan->kv_pool_bytes)) &&
         put(o, "peak_construction_bytes", json_integer(plan->peak_construction_bytes)) &&
         put(o, "num_attention_layers", json_integer(plan->num_attention_layers)) &&
         put(o, "quantized_linears", json_integer(plan->quantized_linears));
    for (size_t i = 0; ok && i < plan->n_groups && i < 6; i++) {
        json_t *g = json_object();
        if (!g || !put(g, "parameters", json_integer(plan->groups[i].parameters)) ||
            !put(g, "bytes", json_integer(plan->groups[i].bytes))) {
            json_decref(g);
            ok = false;
            break;
        }
        ok = put(groups, plan->groups[i].name, g); /* steals g, also on failure */
    }
    for (size_t i = 0; ok && i < b->n_attn; i++)
        ok = json_array_append_new(attn, json_string(b->attn[i].key)) == 0;
    /* Each set_new steals its value whether or not it succeeds. */
    if (ok) {
        ok = json_object_set_new(o, "groups", groups) == 0;
        ok = json_object_set_new(o, "attention_layers", attn) == 0 && ok;
    } else {
        json_decref(groups);
        json_decref(attn);
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
