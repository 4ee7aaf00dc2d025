/* Building blocks: the implementations behind the host API table's add_* / chain / tie
 * functions. Every function is a no-op returning NULL (or the recorded status) once the build
 * has failed; the first error wins (lh_module.h). */
#include "tree_internal.h"

#include "lh_kernels.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* "parent.name" for messages, before the module exists. */
static const char *where(char *buf, size_t n, const lh_build *b, const lh_module *parent,
                         const char *name)
{
    if (!parent)
        parent = b->root;
    snprintf(buf, n, "%s%s%s", parent->name, parent->name[0] ? "." : "",
             name ? name : "(null)");
    return buf;
}

static bool usable(lh_build *b)
{
    return b && b->status == LH_OK;
}

lh_module *lh_build_add_container(lh_build *b, lh_module *parent, const char *name)
{
    if (!usable(b))
        return NULL;
    return lh_tree_add_module(b, parent, name, LH_MOD_CONTAINER);
}

/* One-parameter module helper. */
static lh_module *module_with_param(lh_build *b, lh_module *parent, const char *name,
                                    lh_module_kind kind, int ndim, const int64_t *shape,
                                    lh_param_role role)
{
    char w[512];
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) {
            lh_tree_fail(b, LH_E_USAGE, "module '%s': dimension %d is %" PRId64
                         " (must be > 0)",
                         where(w, sizeof w, b, parent, name), i, shape[i]);
            return NULL;
        }
    lh_module *m = lh_tree_add_module(b, parent, name, kind);
    if (!m || !lh_tree_add_param(b, m, "weight", ndim, shape, role))
        return NULL;
    return m;
}

lh_module *lh_build_add_embedding(lh_build *b, lh_module *parent, const char *name, int64_t num,
                                  int64_t dim)
{
    if (!usable(b))
        return NULL;
    const int64_t shape[2] = {num, dim};
    return module_with_param(b, parent, name, LH_MOD_EMBEDDING, 2, shape, LH_PARAM_PLAIN);
}

lh_module *lh_build_add_linear(lh_build *b, lh_module *parent, const char *name, int64_t in,
                               int64_t out, bool bias)
{
    if (!usable(b))
        return NULL;
    const int64_t shape[2] = {out, in};
    lh_module *m = module_with_param(b, parent, name, LH_MOD_LINEAR, 2, shape,
                                     LH_PARAM_WEIGHT_QUANTIZABLE);
    if (m && bias && !lh_tree_add_param(b, m, "bias", 1, &out, LH_PARAM_PLAIN))
        return NULL;
    return m;
}

lh_module *lh_build_add_rmsnorm(lh_build *b, lh_module *parent, const char *name, int64_t dim,
                                double eps)
{
    if (!usable(b))
        return NULL;
    if (!(eps >= 0.0) || !isfinite(eps)) {
        char w[512];
        lh_tree_fail(b, LH_E_USAGE, "rmsnorm '%s': eps %g must be a finite value >= 0",
                     where(w, sizeof w, b, parent, name), eps);
        return NULL;
    }
    lh_module *m = module_with_param(b, parent, name, LH_MOD_RMSNORM, 1, &dim, LH_PARAM_PLAIN);
    if (m)
        m->eps = eps;
    return m;
}

lh_module *lh_build_add_gated_mlp(lh_build *b, lh_module *parent, const char *name,
                                  int64_t hidden, int64_t intermediate)
{
    if (!usable(b))
        return NULL;
    if (hidden <= 0 || intermediate <= 0) {
        char w[512];
        lh_tree_fail(b, LH_E_USAGE,
                     "gated mlp '%s': hidden %" PRId64 " and intermediate %" PRId64
                     " must be > 0",
                     where(w, sizeof w, b, parent, name), hidden, intermediate);
        return NULL;
    }
    lh_module *m = lh_tree_add_module(b, parent, name, LH_MOD_GATED_MLP);
    if (!m || !lh_build_add_linear(b, m, "gate_proj", hidden, intermediate, false) ||
        !lh_build_add_linear(b, m, "up_proj", hidden, intermediate, false) ||
        !lh_build_add_linear(b, m, "down_proj", intermediate, hidden, false))
        return NULL;
    return m;
}

/* ---- attention -------------------------------------------------------------------------- */

static bool spec_fail(lh_build *b, const char *w, const char *what)
{
    lh_tree_fail(b, LH_E_USAGE, "attention '%s': %s", w, what);
    return false;
}

/* Validates and normalizes (num_kv_heads 0 -> num_heads). */
static bool check_spec(lh_build *b, const char *w, lh_attention_spec *s)
{
    char msg[256];
    if (s->layer_index < 0) {
        snprintf(msg, sizeof msg, "layer_index %" PRId64 " must be >= 0", s->layer_index);
        return spec_fail(b, w, msg);
    }
    if (s->hidden_size <= 0) {
        snprintf(msg, sizeof msg, "hidden_size %" PRId64 " must be > 0", s->hidden_size);
        return spec_fail(b, w, msg);
    }
    if (s->num_heads <= 0) {
        snprintf(msg, sizeof msg, "num_heads %" PRId64 " must be > 0", s->num_heads);
        return spec_fail(b, w, msg);
    }
    if (s->sliding_window < 0) {
        snprintf(msg, sizeof msg, "sliding_window %" PRId64 " must be >= 0", s->sliding_window);
        return spec_fail(b, w, msg);
    }
    if (!(s->norm_eps >= 0.0) || !isfinite(s->norm_eps)) {
        snprintf(msg, sizeof msg, "norm_eps %g must be a finite value >= 0", s->norm_eps);
        return spec_fail(b, w, msg);
    }
    if (s->mla) {
        if (s->kv_lora_rank <= 0 || s->qk_nope_head_dim <= 0 || s->v_head_dim <= 0) {
            snprintf(msg, sizeof msg,
                     "MLA needs kv_lora_rank (%" PRId64 "), qk_nope_head_dim (%" PRId64
                     ") and v_head_dim (%" PRId64 ") > 0",
                     s->kv_lora_rank, s->qk_nope_head_dim, s->v_head_dim);
            return spec_fail(b, w, msg);
        }
        if (s->qk_rope_head_dim < 0 || s->q_lora_rank < 0) {
            snprintf(msg, sizeof msg,
                     "MLA needs qk_rope_head_dim (%" PRId64 ") and q_lora_rank (%" PRId64
                     ") >= 0",
                     s->qk_rope_head_dim, s->q_lora_rank);
            return spec_fail(b, w, msg);
        }
        if (s->qk_norm)
            return spec_fail(b, w, "qk_norm is not supported together with MLA");
        if (s->num_kv_heads == 0)
            s->num_kv_heads = s->num_heads;
        return true;
    }
    if (s->num_kv_heads == 0)
        s->num_kv_heads = s->num_heads;
    if (s->num_kv_heads < 0 || s->num_heads % s->num_kv_heads != 0) {
        snprintf(msg, sizeof msg, "num_kv_heads %" PRId64 " must divide num_heads %" PRId64,
                 s->num_kv_heads, s->num_heads);
        return spec_fail(b, w, msg);
    }
    if (s->head_dim <= 0) {
        snprintf(msg, sizeof msg, "head_dim %" PRId64 " must be > 0", s->head_dim);
        return spec_fail(b, w, msg);
    }
    return true;
}

/* KV bytes per token of one layer: keys and values of kv_out elements each (MHA/GQA), or
 * one latent of kv_out elements (MLA, stored with the keys' dtype). */
static bool attn_mha(lh_build *b, lh_module *m, const lh_attention_spec *s, int64_t *kv_bytes,
                     const char *w)
{
    int64_t q_out, kv_out;
    if (!lh_tree_mul(s->num_heads, s->head_dim, &q_out) ||
        !lh_tree_mul(s->num_kv_heads, s->head_dim, &kv_out) ||
        !lh_tree_mul(kv_out, (int64_t)(b->kv_k_bits + b->kv_v_bits), kv_bytes))
        return spec_fail(b, w, "projection width overflows int64");
    *kv_bytes /= 8;
    int64_t h = s->hidden_size;
    if (!lh_build_add_linear(b, m, "q_proj", h, q_out, s->qkv_bias) ||
        !lh_build_add_linear(b, m, "k_proj", h, kv_out, s->qkv_bias) ||
        !lh_build_add_linear(b, m, "v_proj", h, kv_out, s->qkv_bias) ||
        !lh_build_add_linear(b, m, "o_proj", q_out, h, s->o_bias))
        return false;
    if (s->qk_norm && (!lh_build_add_rmsnorm(b, m, "q_norm", s->head_dim, s->norm_eps) ||
                       !lh_build_add_rmsnorm(b, m, "k_norm", s->head_dim, s->norm_eps)))
        return false;
    return true;
}

static bool attn_mla(lh_build *b, lh_module *m, const lh_attention_spec *s, int64_t *kv_bytes,
                     const char *w)
{
    int64_t qk_head, q_out, kva_out, kvb_head, kvb_out, o_in;
    if (!lh_tree_add(s->qk_nope_head_dim, s->qk_rope_head_dim, &qk_head) ||
        !lh_tree_mul(s->num_heads, qk_head, &q_out) ||
        !lh_tree_add(s->kv_lora_rank, s->qk_rope_head_dim, &kva_out) ||
        !lh_tree_add(s->qk_nope_head_dim, s->v_head_dim, &kvb_head) ||
        !lh_tree_mul(s->num_heads, kvb_head, &kvb_out) ||
        !lh_tree_mul(s->num_heads, s->v_head_dim, &o_in))
        return spec_fail(b, w, "projection width overflows int64");
    int64_t h = s->hidden_size;
    if (s->q_lora_rank > 0) {
        if (!lh_build_add_linear(b, m, "q_a_proj", h, s->q_lora_rank, s->qkv_bias) ||
            !lh_build_add_rmsnorm(b, m, "q_a_layernorm", s->q_lora_rank, s->norm_eps) ||
            !lh_build_add_linear(b, m, "q_b_proj", s->q_lora_rank, q_out, false))
            return false;
    } else if (!lh_build_add_linear(b, m, "q_proj", h, q_out, false)) {
        return false;
    }
    if (!lh_build_add_linear(b, m, "kv_a_proj_with_mqa", h, kva_out, s->qkv_bias) ||
        !lh_build_add_rmsnorm(b, m, "kv_a_layernorm", s->kv_lora_rank, s->norm_eps) ||
        !lh_build_add_linear(b, m, "kv_b_proj", s->kv_lora_rank, kvb_out, false) ||
        !lh_build_add_linear(b, m, "o_proj", o_in, h, s->o_bias))
        return false;
    /* the latent is cached, not per-head K and V */
    if (!lh_tree_mul(kva_out, (int64_t)b->kv_k_bits, kv_bytes))
        return spec_fail(b, w, "KV bytes per token overflow int64");
    *kv_bytes /= 8;
    return true;
}

lh_module *lh_build_add_attention(lh_build *b, lh_module *parent, const char *name,
                                  const lh_attention_spec *spec)
{
    if (!usable(b))
        return NULL;
    char w[512];
    where(w, sizeof w, b, parent, name);
    if (!spec) {
        spec_fail(b, w, "NULL spec");
        return NULL;
    }
    if (spec->struct_size < sizeof(lh_attention_spec)) {
        char msg[128];
        snprintf(msg, sizeof msg, "spec struct_size %u is smaller than %zu",
                 (unsigned)spec->struct_size, sizeof(lh_attention_spec));
        spec_fail(b, w, msg);
        return NULL;
    }
    lh_attention_spec s;
    memcpy(&s, spec, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (!check_spec(b, w, &s))
        return NULL;
    lh_module *m = lh_tree_add_module(b, parent, name, LH_MOD_ATTENTION);
    if (!m)
        return NULL;
    int64_t kv_bytes = 0;
    if (!(s.mla ? attn_mla(b, m, &s, &kv_bytes, w) : attn_mha(b, m, &s, &kv_bytes, w)))
        return NULL;
    m->attn = lh_tree_alloc(b, sizeof *m->attn);
    if (!m->attn)
        return NULL;
    *m->attn = s;
    m->kv_bytes_per_token = kv_bytes;
    if (lh_tree_register_attention(b, m, s.layer_index) != LH_OK)
        return NULL;
    return m;
}

/* ---- raw params, chain, tie ------------------------------------------------------------ */

lh_status lh_build_add_param(lh_build *b, lh_module *m, const char *name, int ndim,
                             const int64_t *shape, lh_param_role role)
{
    if (!b)
        return LH_E_USAGE;
    if (b->status != LH_OK)
        return b->status;
    return lh_tree_add_param(b, m, name, ndim, shape, role) ? LH_OK : b->status;
}

static const char *mname(const lh_module *m)
{
    return m->name[0] ? m->name : "<root>";
}

lh_status lh_build_chain_norm(lh_build *b, lh_module *layer, lh_module *next_norm)
{
    if (!b)
        return LH_E_USAGE;
    if (b->status != LH_OK)
        return b->status;
    if (!layer || !next_norm)
        return lh_tree_fail(b, LH_E_USAGE, "chain_norm: NULL %s",
                            !layer ? "layer" : "next_norm");
    if (layer->build != b || next_norm->build != b)
        return lh_tree_fail(b, LH_E_USAGE, "chain_norm: module of another build");
    if (next_norm->kind != LH_MOD_RMSNORM)
        return lh_tree_fail(b, LH_E_USAGE,
                            "chain_norm: '%s' cannot follow '%s': it is not an RMSNorm module",
                            mname(next_norm), mname(layer));
    if (layer == next_norm)
        return lh_tree_fail(b, LH_E_USAGE, "chain_norm: '%s' chained to itself",
                            mname(layer));
    if (layer->next_norm && layer->next_norm != next_norm)
        return lh_tree_fail(b, LH_E_USAGE,
                            "chain_norm: '%s' is already chained to '%s', not '%s'",
                            mname(layer), layer->next_norm->name, next_norm->name);
    layer->next_norm = next_norm;
    return LH_OK;
}

static bool same_shape(const lh_param *a, const lh_param *c)
{
    if (a->ndim != c->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != c->shape[i])
            return false;
    return true;
}

static void shape_str(char *buf, size_t n, const lh_param *p)
{
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < p->ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRId64, i ? ", " : "", p->shape[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
}

lh_status lh_build_tie_weights(lh_build *b, lh_module *dst, lh_module *src)
{
    if (!b)
        return LH_E_USAGE;
    if (b->status != LH_OK)
        return b->status;
    if (!dst || !src)
        return lh_tree_fail(b, LH_E_USAGE, "tie_weights: NULL %s", !dst ? "dst" : "src");
    if (dst->build != b || src->build != b)
        return lh_tree_fail(b, LH_E_USAGE, "tie_weights: module of another build");
    if (dst == src)
        return lh_tree_fail(b, LH_E_USAGE, "tie_weights: '%s' tied to itself", mname(dst));
    lh_param *dw = lh_tree_find_param(dst, "weight");
    lh_param *sw = lh_tree_find_param(src, "weight");
    if (!dw || !sw)
        return lh_tree_fail(b, LH_E_USAGE, "tie_weights: '%s' has no weight",
                            mname(!dw ? dst : src));
    if (!same_shape(dw, sw)) {
        char a[128], c[128];
        shape_str(a, sizeof a, dw);
        shape_str(c, sizeof c, sw);
        return lh_tree_fail(b, LH_E_USAGE,
                            "tie_weights: '%s.weight' %s and '%s.weight' %s differ in shape",
                            mname(dst), a, mname(src), c);
    }
    lh_param *source = sw->tied_to ? sw->tied_to : sw;
    if (source == dw)
        return lh_tree_fail(b, LH_E_USAGE, "tie_weights: '%s' and '%s' would tie in a cycle",
                            mname(dst), mname(src));
    if (dw->tied_to)
        return dw->tied_to == source
                   ? LH_OK
                   : lh_tree_fail(b, LH_E_USAGE,
                                  "tie_weights: '%s.weight' is already tied to '%s.weight'",
                                  mname(dst), mname(dw->tied_to->owner));
    if (dw->tie_dependents)
        return lh_tree_fail(b, LH_E_USAGE,
                            "tie_weights: '%s.weight' is already the source of a tie",
                            mname(dst));
    dw->tied_to = source;
    dw->dtype = source->dtype;
    dw->bytes = 0;
    source->tie_dependents++;
    return LH_OK;
}
