/* The module tree: arena, node creation and validation, the name index, the attention-layer
 * table, the model lifecycle (lh_model_build / lh_model_free) and inspection. */
#include "tree_internal.h"

#include "../core/err.h"
#include "../core/log.h"
#include "../core/strutil.h"
#include "../weights/checkpoint.h"
#include "lh_kernels.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#define ARENA_CHUNK_MIN ((size_t)64 * 1024)

/* ---- checked arithmetic ---------------------------------------------------------------- */

bool lh_tree_mul(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

bool lh_tree_add(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* ---- errors ---------------------------------------------------------------------------- */

lh_status lh_tree_failv(lh_build *b, lh_status code, const char *fmt, va_list ap)
{
    if (!b)
        return code;
    if (b->status == LH_OK) {
        b->status = code == LH_OK ? LH_E_INTERNAL : code;
        vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    }
    return code;
}

lh_status lh_tree_fail(lh_build *b, lh_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lh_status st = lh_tree_failv(b, code, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- tracked memory -------------------------------------------------------------------- */

static void track(lh_build *b, int64_t delta)
{
    b->bytes_now += delta;
    if (b->bytes_now > b->bytes_peak)
        b->bytes_peak = b->bytes_now;
}

void *lh_tree_alloc(lh_build *b, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    lh_arena_chunk *c = b->chunks;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > ARENA_CHUNK_MIN ? size : ARENA_CHUNK_MIN;
        c = malloc(sizeof *c + cap);
        if (!c) {
            lh_tree_fail(b, LH_E_NOMEM, "out of memory building the module tree");
            return NULL;
        }
        c->cap = cap;
        c->used = 0;
        c->next = b->chunks;
        b->chunks = c;
        track(b, (int64_t)(sizeof *c + cap));
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *lh_tree_strdup(lh_build *b, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = lh_tree_alloc(b, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* ---- build lifecycle ------------------------------------------------------------------- */

lh_build *lh_tree_build_new(lh_dtype dtype)
{
    lh_build *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->dtype = dtype;
    b->kv_k_bits = b->kv_v_bits = 32;
    track(b, (int64_t)sizeof *b);
    lh_module *root = lh_tree_alloc(b, sizeof *root);
    if (!root) {
        lh_tree_build_free(b);
        return NULL;
    }
    root->name = root->local = "";
    root->kind = LH_MOD_CONTAINER;
    root->build = b;
    b->root = root;
    b->n_modules = 1;
    return b;
}

void lh_tree_build_free(lh_build *b)
{
    if (!b)
        return;
    lh_arena_chunk *c = b->chunks;
    while (c) {
        lh_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(b->index);
    free(b->attn);
    free(b->attn_slots);
    free(b);
}

/* ---- name index -------------------------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

lh_module *lh_tree_lookup(const lh_build *b, const char *full_name)
{
    if (!full_name)
        return NULL;
    if (!*full_name)
        return b->root;
    if (!b->index_cap)
        return NULL;
    size_t mask = b->index_cap - 1;
    for (size_t i = hash_str(full_name) & mask;; i = (i + 1) & mask) {
        lh_module *m = b->index[i];
        if (!m)
            return NULL;
        if (strcmp(m->name, full_name) == 0)
            return m;
    }
}

static void index_put(lh_module **tab, size_t cap, lh_module *m)
{
    size_t mask = cap - 1;
    size_t i = hash_str(m->name) & mask;
    while (tab[i])
        i = (i + 1) & mask;
    tab[i] = m;
}

/* Makes room for one more entry (load factor <= 1/2). */
static bool index_reserve(lh_build *b)
{
    size_t entries = b->n_modules - 1; /* the root is not indexed */
    if (b->index_cap && (entries + 1) * 2 <= b->index_cap)
        return true;
    size_t cap = b->index_cap ? b->index_cap * 2 : 256;
    lh_module **tab = calloc(cap, sizeof *tab);
    if (!tab) {
        lh_tree_fail(b, LH_E_NOMEM, "out of memory indexing the module tree");
        return false;
    }
    track(b, (int64_t)(cap * sizeof *tab)); /* old and new coexist for a moment */
    for (size_t i = 0; i < b->index_cap; i++)
        if (b->index[i])
            index_put(tab, cap, b->index[i]);
    track(b, -(int64_t)(b->index_cap * sizeof *tab));
    free(b->index);
    b->index = tab;
    b->index_cap = cap;
    return true;
}

/* ---- nodes --------------------------------------------------------------------------------- */

static const char *display(const lh_module *m)
{
    return m->name[0] ? m->name : "<root>";
}

lh_module *lh_tree_add_module(lh_build *b, lh_module *parent, const char *name,
                              lh_module_kind kind)
{
    if (!b)
        return NULL;
    if (b->status != LH_OK)
        return NULL;
    if (!parent)
        parent = b->root;
    if (parent->build != b) {
        lh_tree_fail(b, LH_E_USAGE, "module parent belongs to another build");
        return NULL;
    }
    if (!name || !*name) {
        lh_tree_fail(b, LH_E_USAGE, "module under '%s' has %s name", display(parent),
                     name ? "an empty" : "a NULL");
        return NULL;
    }
    if (strchr(name, '.')) {
        lh_tree_fail(b, LH_E_USAGE,
                     "module name '%s' under '%s' contains '.' (names are single path "
                     "components; the host joins them)",
                     name, display(parent));
        return NULL;
    }
    size_t plen = strlen(parent->name), nlen = strlen(name);
    size_t full_len = plen + (plen ? 1 : 0) + nlen;
    char *full = lh_tree_alloc(b, full_len + 1);
    if (!full)
        return NULL;
    if (plen) {
        memcpy(full, parent->name, plen);
        full[plen] = '.';
        memcpy(full + plen + 1, name, nlen + 1);
    } else {
        memcpy(full, name, nlen + 1);
    }
    /* Full names are unique exactly when sibling names are; the index answers in O(1). */
    if (lh_tree_lookup(b, full)) {
        lh_tree_fail(b, LH_E_USAGE, "duplicate module name '%s'", full);
        return NULL;
    }
    if (!index_reserve(b))
        return NULL;
    lh_module *m = lh_tree_alloc(b, sizeof *m);
    if (!m)
        return NULL;
    m->name = full;
    m->local = full + full_len - nlen;
    m->kind = kind;
    m->build = b;
    m->parent = parent;
    if (parent->last_child)
        parent->last_child->next_sibling = m;
    else
        parent->first_child = m;
    parent->last_child = m;
    parent->n_children++;
    b->n_modules++;
    index_put(b->index, b->index_cap, m);
    return m;
}

lh_param *lh_tree_find_param(const lh_module *m, const char *name)
{
    for (lh_param *p = m->params; p; p = p->next)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

int64_t lh_param_plain_bytes(lh_dtype dtype, int64_t numel)
{
    return lh_k_dtype_bytes(dtype, numel);
}

lh_param *lh_tree_add_param(lh_build *b, lh_module *m, const char *name, int ndim,
                            const int64_t *shape, lh_param_role role)
{
    if (!b || b->status != LH_OK)
        return NULL;
    if (!m) {
        lh_tree_fail(b, LH_E_USAGE, "parameter '%s' added to a NULL module",
                     name ? name : "(null)");
        return NULL;
    }
    if (m->build != b) {
        lh_tree_fail(b, LH_E_USAGE, "parameter added to a module of another build");
        return NULL;
    }
    if (!name || !*name) {
        lh_tree_fail(b, LH_E_USAGE, "parameter of '%s' has %s name", display(m),
                     name ? "an empty" : "a NULL");
        return NULL;
    }
    if (strchr(name, '.')) {
        lh_tree_fail(b, LH_E_USAGE, "parameter name '%s' of '%s' contains '.'", name,
                     display(m));
        return NULL;
    }
    if (lh_tree_find_param(m, name)) {
        lh_tree_fail(b, LH_E_USAGE, "duplicate parameter '%s%s%s'", m->name,
                     m->name[0] ? "." : "", name);
        return NULL;
    }
    if (ndim < 1 || ndim > LH_MAX_DIMS) {
        lh_tree_fail(b, LH_E_USAGE, "parameter '%s%s%s': ndim %d out of range 1..%d", m->name,
                     m->name[0] ? "." : "", name, ndim, LH_MAX_DIMS);
        return NULL;
    }
    if (!shape) {
        lh_tree_fail(b, LH_E_USAGE, "parameter '%s%s%s': NULL shape", m->name,
                     m->name[0] ? "." : "", name);
        return NULL;
    }
    if (role != LH_PARAM_WEIGHT_QUANTIZABLE && role != LH_PARAM_PLAIN) {
        lh_tree_fail(b, LH_E_USAGE, "parameter '%s%s%s': unknown role %d", m->name,
                     m->name[0] ? "." : "", name, (int)role);
        return NULL;
    }
    if (role == LH_PARAM_WEIGHT_QUANTIZABLE && ndim != 2) {
        lh_tree_fail(b, LH_E_USAGE,
                     "parameter '%s%s%s': a quantizable weight is a matrix [out, in], got %d "
                     "dims",
                     m->name, m->name[0] ? "." : "", name, ndim);
        return NULL;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) {
            lh_tree_fail(b, LH_E_USAGE, "parameter '%s%s%s': dimension %d is %" PRId64
                         " (must be > 0)",
                         m->name, m->name[0] ? "." : "", name, i, shape[i]);
            return NULL;
        }
        if (!lh_tree_mul(numel, shape[i], &numel)) {
            lh_tree_fail(b, LH_E_USAGE, "parameter '%s%s%s': element count overflows int64",
                         m->name, m->name[0] ? "." : "", name);
            return NULL;
        }
    }
    int64_t bytes = lh_param_plain_bytes(b->dtype, numel);
    if (bytes < 0) {
        lh_tree_fail(b, LH_E_USAGE, "parameter '%s%s%s': byte size overflows int64", m->name,
                     m->name[0] ? "." : "", name);
        return NULL;
    }
    lh_param *p = lh_tree_alloc(b, sizeof *p);
    char *pname = p ? lh_tree_strdup(b, name) : NULL;
    if (!pname)
        return NULL;
    p->name = pname;
    p->ndim = ndim;
    memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    p->numel = numel;
    p->role = role;
    p->dtype = b->dtype;
    p->bytes = bytes;
    p->owner = m;
    if (m->last_param)
        m->last_param->next = p;
    else
        m->params = p;
    m->last_param = p;
    m->n_params++;
    return p;
}

lh_module *lh_tree_next(const lh_module *m)
{
    if (m->first_child)
        return m->first_child;
    while (m) {
        if (m->next_sibling)
            return m->next_sibling;
        m = m->parent;
    }
    return NULL;
}

lh_param *lh_tree_next_param(const lh_build *b, const lh_param *p)
{
    if (!b)
        return NULL;
    if (p && p->next)
        return p->next;
    for (const lh_module *m = p ? lh_tree_next(p->owner) : b->root; m; m = lh_tree_next(m))
        if (m->params)
            return m->params;
    return NULL;
}

/* ---- attention-layer table ---------------------------------------------------------------- */

static uint64_t hash_i64(int64_t v)
{
    uint64_t x = (uint64_t)v;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static lh_attn_slot *slot_find(lh_attn_slot *tab, size_t cap, int64_t idx, bool *found)
{
    size_t mask = cap - 1;
    for (size_t i = hash_i64(idx) & mask;; i = (i + 1) & mask) {
        if (!tab[i].used) {
            *found = false;
            return &tab[i];
        }
        if (tab[i].layer_index == idx) {
            *found = true;
            return &tab[i];
        }
    }
}

static bool slots_reserve(lh_build *b)
{
    if (b->attn_slots_cap && (b->attn_slots_used + 1) * 2 <= b->attn_slots_cap)
        return true;
    size_t cap = b->attn_slots_cap ? b->attn_slots_cap * 2 : 64;
    lh_attn_slot *tab = calloc(cap, sizeof *tab);
    if (!tab) {
        lh_tree_fail(b, LH_E_NOMEM, "out of memory registering attention layers");
        return false;
    }
    track(b, (int64_t)(cap * sizeof *tab));
    for (size_t i = 0; i < b->attn_slots_cap; i++) {
        if (!b->attn_slots[i].used)
            continue;
        bool found;
        *slot_find(tab, cap, b->attn_slots[i].layer_index, &found) = b->attn_slots[i];
    }
    track(b, -(int64_t)(b->attn_slots_cap * sizeof *tab));
    free(b->attn_slots);
    b->attn_slots = tab;
    b->attn_slots_cap = cap;
    return true;
}

lh_status lh_tree_register_attention(lh_build *b, lh_module *m, int64_t layer_index)
{
    if (b->status != LH_OK)
        return b->status;
    if (b->n_attn == b->cap_attn) {
        size_t cap = b->cap_attn ? b->cap_attn * 2 : 32;
        lh_attn_entry *tab = realloc(b->attn, cap * sizeof *tab);
        if (!tab)
            return lh_tree_fail(b, LH_E_NOMEM, "out of memory registering attention layers");
        track(b, (int64_t)((cap - b->cap_attn) * sizeof *tab));
        b->attn = tab;
        b->cap_attn = cap;
    }
    if (!slots_reserve(b))
        return b->status;
    bool found;
    lh_attn_slot *slot = slot_find(b->attn_slots, b->attn_slots_cap, layer_index, &found);
    lh_attn_entry *e = &b->attn[b->n_attn];
    memset(e, 0, sizeof *e);
    e->layer_index = layer_index;
    e->module = m;
    if (!found) {
        slot->used = true;
        slot->layer_index = layer_index;
        slot->first = b->n_attn;
        slot->count = 1;
        b->attn_slots_used++;
        snprintf(e->key, sizeof e->key, "%" PRId64, layer_index);
    } else {
        if (slot->count == 1) {
            lh_attn_entry *first = &b->attn[slot->first];
            snprintf(first->key, sizeof first->key, "%" PRId64 "_0", layer_index);
            lh_log(LH_LOG_DEBUG,
                   "attention layer index %" PRId64 " registered more than once ('%s', '%s'): "
                   "keys get _0, _1, ... suffixes",
                   layer_index, first->module->name, m->name);
        }
        snprintf(e->key, sizeof e->key, "%" PRId64 "_%zu", layer_index, slot->count);
        slot->count++;
    }
    b->n_attn++;
    return LH_OK;
}

/* ---- host API building-block entry points kept here ------------------------------------- */

lh_module *lh_build_module_root(lh_build *b)
{
    if (!b || b->status != LH_OK)
        return NULL;
    return b->root;
}

lh_status lh_build_fail(lh_build *b, lh_status code, const char *fmt, ...)
{
    if (!b)
        return code == LH_OK ? LH_E_USAGE : code;
    if (code == LH_OK)
        code = LH_E_INTERNAL; /* failing with "ok" is a constructor bug: still fail */
    va_list ap;
    va_start(ap, fmt);
    lh_tree_failv(b, code, fmt ? fmt : "build failed", ap);
    va_end(ap);
    return code;
}

lh_status lh_build_status(lh_build *b)
{
    return b ? b->status : LH_E_USAGE;
}

/* ---- the model --------------------------------------------------------------------------- */

static lh_dtype weight_dtype(const lh_model_config *cfg, const lh_run_config *rc)
{
    if (rc && rc->dtype != LH_DTYPE_INVALID)
        return rc->dtype;
    if (cfg->geo.torch_dtype != LH_DTYPE_INVALID)
        return cfg->geo.torch_dtype;
    return LH_DTYPE_BF16;
}

/* A decoder layer is a non-root module that directly holds an attention module; each must
 * fuse its residual add with the next norm. */
lh_status lh_model_build(const lh_host_api *api, const lh_model_provider *prov,
                         const lh_model_config *cfg, const lh_run_config *rc, lh_model **out,
                         lh_err *err)
{
    if (out)
        *out = NULL;
    if (!api || !prov || !cfg || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_model_build: NULL argument");
    const char *pname = prov->name ? prov->name : "(unnamed provider)";
    if (!prov->ops || !prov->ops->construct)
        return lh_err_set(err, LH_E_USAGE, "%s: provider has no constructor", pname);
    if (prov->ops->check_config) {
        lh_err ce = {0};
        lh_status cst = prov->ops->check_config(api, cfg, &ce);
        if (cst != LH_OK)
            return lh_err_set(err, cst, "%s: %s", pname,
                              ce.msg[0] ? ce.msg : "the plugin refused the config without "
                                                   "saying why");
    }
    lh_dtype dtype = weight_dtype(cfg, rc);
    if (lh_k_dtype_bits(dtype) == 0)
        return lh_err_set(err, LH_E_CONFIG, "%s: invalid weight dtype %d", pname, (int)dtype);

    lh_model *m = calloc(1, sizeof *m);
    if (!m)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", pname);
    m->provider = lh_strdup(pname);
    m->b = lh_tree_build_new(dtype);
    if (!m->provider || !m->b) {
        lh_model_free(m);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", pname);
    }
    if (rc && rc->kv_cache.k_dtype != LH_DTYPE_INVALID)
        m->b->kv_k_bits = lh_k_dtype_bits(rc->kv_cache.k_dtype);
    if (rc && rc->kv_cache.v_dtype != LH_DTYPE_INVALID)
        m->b->kv_v_bits = lh_k_dtype_bits(rc->kv_cache.v_dtype);
    m->max_batch_size = rc && rc->max_batch_size > 0 ? rc->max_batch_size : 1;

    lh_status st = prov->ops->construct(api, m->b, cfg);
    lh_status bst = m->b->status;
    if (bst != LH_OK) {
        lh_err_set(err, bst, "%s: %s", pname, m->b->msg);
        lh_model_free(m);
        return bst;
    }
    if (st != LH_OK) {
        lh_err_set(err, st, "%s: constructor failed (%s) without recording a message", pname,
                   lh_status_name(st));
        lh_model_free(m);
        return st;
    }
    lh_model_geometry geo;
    lh_model_run_geometry(m, &cfg->geo, &geo);
    m->max_seq_len = lh_run_max_seq_len(rc, &geo); /* what the engine's cache will hold */
    st = lh_model_apply_quant(m, rc ? &rc->quant : NULL, err);
    if (st == LH_OK) /* after: a quant config of the run on a quantized checkpoint is refused */
        st = lh_model_apply_checkpoint_quant(m, cfg, rc, err);
    if (st != LH_OK) {
        lh_model_free(m);
        return st;
    }
    *out = m;
    return LH_OK;
}

void lh_model_free(lh_model *m)
{
    if (!m)
        return;
    if (m->b)
        for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p))
            if (p->data_owned) {
                free(p->data);
                p->data = NULL;
                p->data_owned = false;
            }
    if (m->weight_region)
        munmap(m->weight_region, m->weight_region_bytes);
    lh_checkpoint_close(m->weights); /* after the buffers: nothing points into it any more */
    lh_tree_build_free(m->b);
    free(m->provider);
    free(m);
}

/* ---- inspection ------------------------------------------------------------------------- */

void lh_model_foreach_param(const lh_model *m, lh_param_visit_fn fn, void *user)
{
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p)) {
        lh_param_info info = {.module = p->owner->name, .name = p->name, .ndim = p->ndim,
                              .dtype = p->dtype, .tied = p->tied_to != NULL,
                              .transposed = p->transposed,
                              .scale_param = p->scale ? p->scale->name : NULL,
                              .scale_block_rows = p->scale_block_rows,
                              .scale_block_cols = p->scale_block_cols};
        memcpy(info.shape, p->shape, sizeof info.shape);
        fn(&info, user);
    }
}

int lh_model_find(const lh_model *m, const char *name, lh_module_info *info)
{
    if (!m || !name)
        return 0;
    const lh_module *x = lh_tree_lookup(m->b, name);
    if (!x)
        return 0;
    if (info) {
        memset(info, 0, sizeof *info);
        info->name = x->name;
        info->kind = x->kind;
        info->quant = x->quant;
        info->n_params = x->n_params;
        for (const lh_param *p = x->params; p; p = p->next) {
            if (p->tied_to)
                continue;
            info->parameters += p->numel;
            info->bytes += p->bytes;
        }
    }
    return 1;
}

int lh_model_param_shape(const lh_model *m, const char *name, const char *param,
                         int64_t shape[LH_MAX_DIMS])
{
    if (!m || !name || !param)
        return 0;
    const lh_module *x = lh_tree_lookup(m->b, name);
    if (!x)
        return 0;
    const lh_param *p = lh_tree_find_param(x, param);
    if (!p)
        return 0;
    if (shape) {
        memset(shape, 0, LH_MAX_DIMS * sizeof *shape);
        memcpy(shape, p->shape, (size_t)p->ndim * sizeof *shape);
    }
    return p->ndim;
}

size_t lh_model_attention_count(const lh_model *m)
{
    return m ? m->b->n_attn : 0;
}

const char *lh_model_attention_key(const lh_model *m, size_t i)
{
    if (!m || i >= m->b->n_attn)
        return NULL;
    return m->b->attn[i].key;
}

const char *lh_model_attention_lookup(const lh_model *m, const char *key)
{
    if (!m || !key)
        return NULL;
    for (size_t i = 0; i < m->b->n_attn; i++)
        if (strcmp(m->b->attn[i].key, key) == 0)
            return m->b->attn[i].module->name;
    return NULL;
}

void lh_model_run_geometry(const lh_model *m, const lh_model_geometry *base,
                           lh_model_geometry *out)
{
    *out = *base;
    if (!m || m->b->n_attn == 0)
        return;
    const lh_attention_spec *s0 = m->b->attn[0].module->attn;
    out->num_hidden_layers = (int64_t)m->b->n_attn;
    out->num_attention_heads = s0->num_heads;
    out->num_key_value_heads = s0->num_kv_heads;
    out->head_dim = s0->head_dim;
    if (s0->max_positions > 0)
        out->max_position_embeddings = s0->max_positions;
    out->rope_scaling = s0->rope ? s0->rope_scaling : (lh_rope_scaling){0};
    out->has_mla = s0->mla;
    out->has_q_lora_rank = s0->has_q_lora_rank;
    out->q_lora_rank = s0->q_lora_rank;
    out->kv_lora_rank = s0->kv_lora_rank;
    out->qk_rope_head_dim = s0->qk_rope_head_dim;
    out->qk_nope_head_dim = s0->qk_nope_head_dim;
    out->v_head_dim = s0->v_head_dim;
    out->sliding_window = 0;
    out->attention_chunk_size = 0;
    for (size_t i = 0; i < m->b->n_attn; i++) {
        const lh_attention_spec *s = m->b->attn[i].module->attn;
        if (s->sliding_window > out->sliding_window)
            out->sliding_window = s->sliding_window;
        if (s->attention_chunk_size > out->attention_chunk_size)
            out->attention_chunk_size = s->attention_chunk_size;
    }
}

const lh_attention_spec *lh_model_attention_spec(const lh_model *m, const char *module_name)
{
    if (!m || !module_name)
        return NULL;
    const lh_module *x = lh_tree_lookup(m->b, module_name);
    return x && x->kind == LH_MOD_ATTENTION ? x->attn : NULL;
}

const lh_moe_spec *lh_model_moe_at(const lh_model *m, size_t i, const char **name)
{
    if (!m)
        return NULL;
    for (const lh_module *x = m->b->root; x; x = lh_tree_next(x))
        if (x->kind == LH_MOD_MOE && i-- == 0) {
            if (name)
                *name = x->name;
            return x->moe;
        }
    return NULL;
}
