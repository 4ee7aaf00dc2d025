/* Building blocks: the implementations behind the host API table's add_* / chain / tie
 * functions. Every function is a no-op returning NULL (or the recorded status) once the build
 * has failed; the first error wins (lh_module.h). */
#include "tree_internal.h"

#include "lh_kernels.h"

#include <inttypes.h>
#include <stddef.h>
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

/* A norm: weight [dim] (+ bias [dim]) and its eps. */
static lh_module *add_norm(lh_build *b, lh_module *parent, const char *name, lh_module_kind kind,
                           int64_t dim, double eps, bool bias)
{
    if (!usable(b))
        return NULL;
    if (!(eps >= 0.0) || !isfinite(eps)) {
        char w[512];
        lh_tree_fail(b, LH_E_USAGE, "%s '%s': eps %g must be a finite value >= 0",
                     kind == LH_MOD_RMSNORM ? "rmsnorm" : "layernorm",
                     where(w, sizeof w, b, parent, name), eps);
        return NULL;
    }
    lh_module *m = module_with_param(b, parent, name, kind, 1, &dim, LH_PARAM_PLAIN);
    if (m && bias && !lh_tree_add_param(b, m, "bias", 1, &dim, LH_PARAM_PLAIN))
        return NULL;
    if (m)
        m->eps = eps;
    return m;
}

lh_module *lh_build_add_rmsnorm(lh_build *b, lh_module *parent, const char *name, int64_t dim,
                                double eps)
{
    return add_norm(b, parent, name, LH_MOD_RMSNORM, dim, eps, false);
}

lh_module *lh_build_add_layernorm(lh_build *b, lh_module *parent, const char *name,
                                  int64_t dim, double eps, bool bias)
{
    return add_norm(b, parent, name, LH_MOD_LAYERNORM, dim, eps, bias);
}

lh_module *lh_build_add_linear_transposed(lh_build *b, lh_module *parent, const char *name,
                                          int64_t in, int64_t out, bool bias)
{
    if (!usable(b))
        return NULL;
    const int64_t shape[2] = {in, out}; /* as stored: the host transposes at bind */
    lh_module *m = module_with_param(b, parent, name, LH_MOD_LINEAR, 2, shape,
                                     LH_PARAM_WEIGHT_QUANTIZABLE);
    if (!m)
        return NULL;
    m->params->transposed = true;
    if (bias && !lh_tree_add_param(b, m, "bias", 1, &out, LH_PARAM_PLAIN))
        return NULL;
    return m;
}

lh_module *lh_build_add_head(lh_build *b, lh_module *parent, const char *name, int64_t in,
                             int64_t out, bool bias)
{
    lh_module *m = lh_build_add_linear(b, parent, name, in, out, bias);
    if (m)
        m->kind = LH_MOD_HEAD;
    return m;
}

lh_module *lh_build_add_mlp(lh_build *b, lh_module *parent, const char *name)
{
    if (!usable(b))
        return NULL;
    return lh_tree_add_module(b, parent, name, LH_MOD_MLP);
}

/* ---- mixture of experts ---------------------------------------------------------------------- */

static bool moe_name_ok(lh_build *b, const char *w, const char *field, const char *v, bool need)
{
    if (v && v[0])
        return true;
    if (!need && !v)
        return true;
    lh_tree_fail(b, LH_E_USAGE, "moe '%s': %s must be a non-empty name", w, field);
    return false;
}

/* The spec's checks: every width and name, and the routing lh_k_moe_route would refuse. */
static bool check_moe(lh_build *b, const char *w, const lh_moe_spec *s)
{
    const lh_k_moe_route_params *r = &s->route;
    const char *bad = NULL;
    char msg[256];
    if (s->hidden <= 0 || s->expert_intermediate <= 0 || s->shared_intermediate < 0)
        snprintf(msg, sizeof msg, "hidden %" PRId64 ", expert_intermediate %" PRId64
                 " must be > 0 and shared_intermediate %" PRId64 " >= 0", s->hidden,
                 s->expert_intermediate, s->shared_intermediate), bad = msg;
    else if (s->n_experts < 1 || s->n_experts > LH_K_MOE_MAX_EXPERTS)
        snprintf(msg, sizeof msg, "n_experts %" PRId64 " must be in [1, %d]", s->n_experts,
                 LH_K_MOE_MAX_EXPERTS), bad = msg;
    else if (r->top_k < 1 || r->top_k > s->n_experts)
        snprintf(msg, sizeof msg, "top_k %" PRId64 " must be in [1, n_experts %" PRId64 "]",
                 r->top_k, s->n_experts), bad = msg;
    else if (r->scoring != LH_K_MOE_SOFTMAX && r->scoring != LH_K_MOE_SIGMOID)
        snprintf(msg, sizeof msg, "scoring %d is not a lh_k_moe_scoring", (int)r->scoring),
            bad = msg;
    else if (r->n_group < 0 ||
             (r->n_group > 1 && (s->n_experts % r->n_group != 0 || r->topk_group < 1 ||
                                 r->topk_group > r->n_group ||
                                 r->topk_group * (s->n_experts / r->n_group) < r->top_k ||
                                 (r->group_score != LH_K_MOE_GROUP_MAX &&
                                  r->group_score != LH_K_MOE_GROUP_TOP2_SUM) ||
                                 (r->group_score == LH_K_MOE_GROUP_TOP2_SUM &&
                                  s->n_experts / r->n_group < 2))))
        snprintf(msg, sizeof msg, "n_group %" PRId64 " / topk_group %" PRId64 " (group score %d) "
                 "cannot choose top_k %" PRId64 " of %" PRId64 " experts", r->n_group,
                 r->topk_group, (int)r->group_score, r->top_k, s->n_experts), bad = msg;
    else if (s->shared_gate && s->shared_intermediate == 0)
        snprintf(msg, sizeof msg, "shared_gate '%s' without a shared expert "
                 "(shared_intermediate 0)", s->shared_gate), bad = msg;
    else if (!isfinite(r->scale) || r->scale < 0 || !isfinite(r->renorm_eps) || r->renorm_eps < 0)
        snprintf(msg, sizeof msg, "scale %g and renorm_eps %g must be finite and >= 0",
                 (double)r->scale, (double)r->renorm_eps), bad = msg;
    else if ((unsigned)s->act > (unsigned)LH_ACT_GELU)
        snprintf(msg, sizeof msg, "act %d is not a lh_activation", (int)s->act), bad = msg;
    if (bad) {
        lh_tree_fail(b, LH_E_USAGE, "moe '%s': %s", w, bad);
        return false;
    }
    return moe_name_ok(b, w, "router", s->router, true) &&
           moe_name_ok(b, w, "correction_bias", s->correction_bias, false) &&
           moe_name_ok(b, w, "experts", s->experts, true) &&
           moe_name_ok(b, w, "gate_linear", s->gate_linear, true) &&
           moe_name_ok(b, w, "up_linear", s->up_linear, true) &&
           moe_name_ok(b, w, "down_linear", s->down_linear, true) &&
           moe_name_ok(b, w, "shared", s->shared, s->shared_intermediate > 0) &&
           moe_name_ok(b, w, "shared_gate", s->shared_gate, false);
}

/* gate / up [inter, hidden] and down [hidden, inter] under `parent` */
static void add_gated(lh_build *b, lh_module *parent, const lh_moe_spec *s, int64_t inter)
{
    lh_build_add_linear(b, parent, s->gate_linear, s->hidden, inter, false);
    lh_build_add_linear(b, parent, s->up_linear, s->hidden, inter, false);
    lh_build_add_linear(b, parent, s->down_linear, inter, s->hidden, false);
}

static const char *arena_name(lh_build *b, const char *s)
{
    return s ? lh_tree_strdup(b, s) : NULL;
}

lh_module *lh_build_add_moe(lh_build *b, lh_module *parent, const char *name,
                            const lh_moe_spec *spec)
{
    if (!usable(b))
        return NULL;
    char w[512];
    where(w, sizeof w, b, parent, name);
    if (!spec || spec->struct_size < sizeof(lh_moe_spec)) {
        lh_tree_fail(b, LH_E_USAGE, "moe '%s': %s", w,
                     spec ? "spec struct_size is smaller than the SDK's lh_moe_spec"
                          : "NULL spec");
        return NULL;
    }
    if (!check_moe(b, w, spec))
        return NULL;
    lh_moe_spec *s = lh_tree_alloc(b, sizeof *s);
    if (!s)
        return NULL;
    *s = *spec;
    s->struct_size = (uint32_t)sizeof *s;
    s->router = arena_name(b, spec->router);
    s->correction_bias = arena_name(b, spec->correction_bias);
    s->experts = arena_name(b, spec->experts);
    s->gate_linear = arena_name(b, spec->gate_linear);
    s->up_linear = arena_name(b, spec->up_linear);
    s->down_linear = arena_name(b, spec->down_linear);
    s->shared = arena_name(b, spec->shared);
    s->shared_gate = arena_name(b, spec->shared_gate);
    lh_module *m = lh_tree_add_module(b, parent, name, LH_MOD_MOE);
    if (!m || !usable(b))
        return NULL;
    m->moe = s;
    /* the router and the shared gate stay in the model dtype (a quantized router could change
     * which experts run): plain parameters of custom modules */
    const int64_t rshape[2] = {s->n_experts, s->hidden};
    lh_module *router = module_with_param(b, m, s->router, LH_MOD_CUSTOM, 2, rshape,
                                          LH_PARAM_PLAIN);
    if (router && router->params)
        router->params->stored_float = true;
    if (router && s->correction_bias) {
        lh_param *cb = lh_tree_add_param(b, router, s->correction_bias, 1, &s->n_experts,
                                         LH_PARAM_PLAIN);
        if (cb) {
            cb->is_buffer = true;
            cb->stored_float = true;
        }
    }
    lh_module *experts = lh_tree_add_module(b, m, s->experts, LH_MOD_EXPERTS);
    if (experts)
        experts->moe = s;
    for (int64_t e = 0; experts && e < s->n_experts && usable(b); e++) {
        char en[24];
        snprintf(en, sizeof en, "%" PRId64, e);
        add_gated(b, lh_build_add_container(b, experts, en), s, s->expert_intermediate);
    }
    if (s->shared_intermediate > 0)
        add_gated(b, lh_build_add_container(b, m, s->shared), s, s->shared_intermediate);
    if (s->shared_gate) {
        const int64_t gshape[2] = {1, s->hidden};
        module_with_param(b, m, s->shared_gate, LH_MOD_CUSTOM, 2, gshape, LH_PARAM_PLAIN);
    }
    return usable(b) ? m : NULL;
}

/* ---- attention -------------------------------------------------------------------------- */

static bool spec_fail(lh_build *b, const char *w, const char *what)
{
    lh_tree_fail(b, LH_E_USAGE, "attention '%s': %s", w, what);
    return false;
}

/* Validates and normalizes (num_kv_heads 0 -> num_heads, scale 0 -> 1/sqrt(head_dim)). */
static bool check_spec(lh_build *b, const char *w, lh_attention_spec *s)
{
    char msg[256];
    if (s->layer_index < 0) {
        snprintf(msg, sizeof msg, "layer_index %" PRId64 " must be >= 0", s->layer_index);
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
    if (s->attention_chunk_size < 0) {
        snprintf(msg, sizeof msg, "attention_chunk_size %" PRId64 " must be >= 0",
                 s->attention_chunk_size);
        return spec_fail(b, w, msg);
    }
    if (!(s->scale >= 0.0) || !isfinite(s->scale)) {
        snprintf(msg, sizeof msg, "scale %g must be a finite value >= 0 (0: 1/sqrt(head_dim))",
                 s->scale);
        return spec_fail(b, w, msg);
    }
    if (s->rope && (!(s->rope_theta > 0.0) || !isfinite(s->rope_theta))) {
        snprintf(msg, sizeof msg, "rope_theta %g must be a finite value > 0", s->rope_theta);
        return spec_fail(b, w, msg);
    }
    if (s->max_positions < 0) {
        snprintf(msg, sizeof msg, "max_positions %" PRId64 " must be >= 0", s->max_positions);
        return spec_fail(b, w, msg);
    }
    if (!(s->logit_softcap >= 0.0) || !isfinite(s->logit_softcap)) {
        snprintf(msg, sizeof msg, "logit_softcap %g must be a finite value >= 0 (0: none)",
                 s->logit_softcap);
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
        if (s->qk_rope_head_dim < 0 || (s->has_q_lora_rank && s->q_lora_rank <= 0)) {
            snprintf(msg, sizeof msg,
                     "MLA needs qk_rope_head_dim (%" PRId64 ") >= 0 and q_lora_rank (%" PRId64
                     ") > 0 where present",
                     s->qk_rope_head_dim, s->q_lora_rank);
            return spec_fail(b, w, msg);
        }
        /* every head has its own keys and values once expanded from the latent */
        if (s->num_kv_heads == 0)
            s->num_kv_heads = s->num_heads;
        const int64_t qk = s->qk_nope_head_dim + s->qk_rope_head_dim;
        if (s->head_dim == 0)
            s->head_dim = qk;
        if (s->head_dim != qk || s->num_kv_heads != s->num_heads || s->num_heads <= 0) {
            snprintf(msg, sizeof msg,
                     "MLA needs head_dim %" PRId64 " = qk_nope_head_dim + qk_rope_head_dim (%"
                     PRId64 ") and num_kv_heads %" PRId64 " = num_heads %" PRId64 " > 0",
                     s->head_dim, qk, s->num_kv_heads, s->num_heads);
            return spec_fail(b, w, msg);
        }
        if (s->rope && (s->qk_rope_head_dim < 2 || s->qk_rope_head_dim % 2 != 0)) {
            snprintf(msg, sizeof msg, "MLA with RoPE needs an even qk_rope_head_dim >= 2 (got %"
                     PRId64 ")", s->qk_rope_head_dim);
            return spec_fail(b, w, msg);
        }
        s->rotary_dim = s->rope ? s->qk_rope_head_dim : 0;
        if (s->scale == 0.0)
            s->scale = 1.0 / sqrt((double)s->head_dim);
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
    if (s->rotary_dim == 0)
        s->rotary_dim = s->head_dim;
    if (s->rotary_dim < 0 || s->rotary_dim % 2 != 0 || s->rotary_dim > s->head_dim) {
        snprintf(msg, sizeof msg, "rotary_dim %" PRId64 " must be even and in [2, head_dim %"
                 PRId64 "] (0: the whole head)", s->rotary_dim, s->head_dim);
        return spec_fail(b, w, msg);
    }
    if (s->scale == 0.0)
        s->scale = 1.0 / sqrt((double)s->head_dim);
    return true;
}

/* KV bytes per token of one layer: keys and values of kv_heads x head_dim elements each
 * (MHA/GQA), or one latent of kv_lora_rank + qk_rope_head_dim elements (MLA, stored with the
 * keys' dtype). */
static bool kv_bytes_per_token(lh_build *b, const lh_attention_spec *s, int64_t *kv_bytes,
                               const char *w)
{
    int64_t width;
    if (s->mla) {
        if (!lh_tree_add(s->kv_lora_rank, s->qk_rope_head_dim, &width) ||
            !lh_tree_mul(width, (int64_t)b->kv_k_bits, kv_bytes))
            return spec_fail(b, w, "KV bytes per token overflow int64");
    } else if (!lh_tree_mul(s->num_kv_heads, s->head_dim, &width) ||
               !lh_tree_mul(width, (int64_t)(b->kv_k_bits + b->kv_v_bits), kv_bytes)) {
        return spec_fail(b, w, "KV width overflows int64");
    }
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
    /* a plugin built against ABI 3.2 has no rope_interleaved: those fields read as zero */
    const size_t min_size = offsetof(lh_attention_spec, rope_interleaved);
    if (spec->struct_size < min_size) {
        char msg[128];
        snprintf(msg, sizeof msg, "spec struct_size %u is smaller than %zu",
                 (unsigned)spec->struct_size, min_size);
        spec_fail(b, w, msg);
        return NULL;
    }
    lh_attention_spec s;
    memset(&s, 0, sizeof s);
    memcpy(&s, spec, spec->struct_size < sizeof s ? spec->struct_size : sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (!check_spec(b, w, &s))
        return NULL;
    int64_t kv_bytes = 0;
    if (!kv_bytes_per_token(b, &s, &kv_bytes, w))
        return NULL;
    /* the scaling kind and factors belong to the config; the tree keeps its own copies */
    if (s.rope_scaling.kind && !(s.rope_scaling.kind = lh_tree_strdup(b, s.rope_scaling.kind)))
        return NULL;
    lh_rope_scaling *rs = &s.rope_scaling;
    if (rs->n_factors < 0 || (rs->n_factors > 0 && (!rs->short_factor || !rs->long_factor)) ||
        rs->n_factors > (int64_t)(1 << 20)) {
        spec_fail(b, w, "rope_scaling: n_factors must be in [0, 2^20] with both short_factor "
                  "and long_factor set");
        return NULL;
    }
    if (rs->n_factors > 0) {
        const size_t bytes = (size_t)rs->n_factors * sizeof(double);
        double *sf = lh_tree_alloc(b, bytes), *lf = lh_tree_alloc(b, bytes);
        if (!sf || !lf)
            return NULL;
        memcpy(sf, rs->short_factor, bytes);
        memcpy(lf, rs->long_factor, bytes);
        rs->short_factor = sf;
        rs->long_factor = lf;
    } else {
        rs->short_factor = rs->long_factor = NULL;
    }
    lh_module *m = lh_tree_add_module(b, parent, name, LH_MOD_ATTENTION);
    if (!m)
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

/* ---- raw params, tie ------------------------------------------------------------------- */

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

lh_status lh_build_base_model(lh_build *b, lh_module *m)
{
    if (!b)
        return LH_E_USAGE;
    if (b->status != LH_OK)
        return b->status;
    if (!m || m->build != b || m->parent != b->root)
        return lh_tree_fail(b, LH_E_USAGE, "base_model: %s", !m ? "NULL module"
                            : m->build != b ? "module of another build"
                                            : "the base model must be a child of the root");
    if (b->base_model && b->base_model != m)
        return lh_tree_fail(b, LH_E_USAGE, "base_model: '%s' is already the base model, not "
                            "'%s'", b->base_model->name, m->name);
    b->base_model = m;
    return LH_OK;
}

lh_status lh_build_ignore_tensors(lh_build *b, const char *suffix)
{
    if (!b)
        return LH_E_USAGE;
    if (b->status != LH_OK)
        return b->status;
    const size_t cap = sizeof b->ignore / sizeof *b->ignore;
    if (!suffix || !suffix[0] || suffix[0] == '.' || suffix[strlen(suffix) - 1] == '.')
        return lh_tree_fail(b, LH_E_USAGE, "ignore_tensors: '%s' is not a dotted name suffix",
                            suffix ? suffix : "(null)");
    if (b->n_ignore == cap)
        return lh_tree_fail(b, LH_E_USAGE, "ignore_tensors: more than %zu suffixes ('%s')", cap,
                            suffix);
    const char *copy = lh_tree_strdup(b, suffix);
    if (!copy)
        return b->status;
    b->ignore[b->n_ignore++] = copy;
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
