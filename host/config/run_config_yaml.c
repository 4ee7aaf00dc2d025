/* YAML -> run config, driven by the key table (run_config_keys.c): every root key and every
 * leaf of kv_cache is read by its entry's type; the sections with rules of their own (required
 * keys, quant.rules, model_impl's target/mode) have readers here that take their leaves'
 * names, enum names and expected texts from the table. See run_config.h. */
#include "config/run_config.h"

#include "config/run_config_keys.h"
#include "config/yaml_tree.h"
#include "core/err.h"
#include "core/fileio.h"
#include "core/strutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_NAMES 64

typedef lh_rc_yaml_ctx rc_ctx;

static lh_value_origin yorigin(const lh_ynode *n)
{
    lh_value_origin o = {.kind = LH_ORIGIN_YAML, .line = n->line, .column = n->column};
    return o;
}

static lh_status yerr(rc_ctx *c, const lh_ynode *n, const char *path, const char *why)
{
    return lh_err_set(c->err, LH_E_CONFIG, "%s:%d:%d: %s: %s", c->src, n->line, n->column, path,
                      why);
}

static lh_status nomem(rc_ctx *c)
{
    return lh_err_set(c->err, LH_E_NOMEM, "%s: out of memory", c->src);
}

static const lh_rc_key *key(const char *name)
{
    return lh_rc_key_find(name);
}

/* Every key of `map` must be a YAML key of the table under `prefix` ("" for the root). */
static lh_status check_keys(rc_ctx *c, const lh_ynode *map, const char *where, const char *prefix)
{
    const char *known[MAX_NAMES];
    size_t n = lh_rc_key_names(prefix, LH_RC_YAML, false, known, N_OF(known));
    for (size_t i = 0; i < map->n; i++) {
        const lh_ynode *k = map->keys[i];
        bool ok = false;
        for (size_t j = 0; j < n && !ok; j++)
            ok = strcmp(k->value, known[j]) == 0;
        if (ok)
            continue;
        char list[512], hint[160] = "";
        lh_join_names(list, sizeof list, known, n);
        const char *near = lh_nearest(k->value, known, n);
        if (near)
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
        return lh_err_set(c->err, LH_E_CONFIG, "%s:%d:%d: unknown key '%s'%s%s%s; known keys: %s",
                          c->src, k->line, k->column, k->value, where ? " in " : "",
                          where ? where : "", hint, list);
    }
    return LH_OK;
}

/* The node must be a non-null scalar. `expected` describes the wanted value. */
static lh_status need_scalar(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected)
{
    char why[512];
    if (n->kind != LH_YNODE_SCALAR) {
        snprintf(why, sizeof why, "expected %s, got %s", expected, lh_ynode_kind_name(n));
        return yerr(c, n, path, why);
    }
    if (n->is_null) {
        snprintf(why, sizeof why, "expected %s, got no value (null)", expected);
        return yerr(c, n, path, why);
    }
    return LH_OK;
}

/* A plain (unquoted) non-null scalar. */
static lh_status need_plain(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected)
{
    lh_status st = need_scalar(c, n, path, expected);
    if (st)
        return st;
    if (!n->plain) {
        char why[512];
        snprintf(why, sizeof why, "expected %s, got the quoted string \"%.200s\"", expected,
                 n->value);
        return yerr(c, n, path, why);
    }
    return LH_OK;
}

static lh_status y_pos_int(rc_ctx *c, const lh_ynode *n, const char *path, int64_t *out)
{
    lh_status st = need_plain(c, n, path, "a positive integer");
    if (st)
        return st;
    char why[512];
    if (!lh_rc_parse_pos_int(n->value, out, why, sizeof why))
        return yerr(c, n, path, why);
    return LH_OK;
}

/* A non-empty string (any scalar style). Borrowed from the node. */
static lh_status y_string(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected,
                          const char **out)
{
    lh_status st = need_scalar(c, n, path, expected);
    if (st)
        return st;
    if (n->length == 0 || strlen(n->value) != n->length) {
        char why[512];
        snprintf(why, sizeof why, "expected %s, got %s", expected,
                 n->length == 0 ? "an empty string" : "a string with a NUL byte");
        return yerr(c, n, path, why);
    }
    *out = n->value;
    return LH_OK;
}

static lh_status y_enum(rc_ctx *c, const lh_ynode *n, const char *path, const char *const *names,
                        size_t count, int *out)
{
    char list[256], expected[300];
    lh_join_names(list, sizeof list, names, count);
    snprintf(expected, sizeof expected, "one of %s", list);
    lh_status st = need_scalar(c, n, path, expected);
    if (st)
        return st;
    char why[512];
    if (!lh_rc_parse_enum(n->value, names, count, out, why, sizeof why))
        return yerr(c, n, path, why);
    return LH_OK;
}

/* The enum entry `name`'s names. */
static lh_status y_key_enum(rc_ctx *c, const lh_ynode *n, const char *name, const char *path,
                            int *out)
{
    const lh_rc_key *k = key(name);
    return y_enum(c, n, path ? path : name, k->names, k->n_names, out);
}

/* One value of entry k at node n into rc (which may be a scratch copy), by k's type. */
static lh_status y_leaf(rc_ctx *c, const lh_rc_key *k, const lh_ynode *n, lh_run_config *rc)
{
    lh_status st = LH_OK;
    char list[256], expected[300];
    switch (k->type) {
    case LH_RC_BOOL: st = need_plain(c, n, k->name, "a boolean (true/false)"); break;
    case LH_RC_INT: st = need_plain(c, n, k->name, "a positive integer"); break;
    case LH_RC_FRACTION: st = need_plain(c, n, k->name, "a number in (0, 1]"); break;
    case LH_RC_ENUM:
        lh_join_names(list, sizeof list, k->names, k->n_names);
        snprintf(expected, sizeof expected, "one of %s", list);
        st = need_scalar(c, n, k->name, expected);
        break;
    case LH_RC_STRING: {
        const char *s;
        st = y_string(c, n, k->name, k->expected, &s);
        break;
    }
    case LH_RC_DTYPE:
        st = need_scalar(c, n, k->name, "one of auto, float32, bfloat16, float16");
        break;
    case LH_RC_DEVICE: st = need_scalar(c, n, k->name, "one of " LH_RC_DEVICE_FORMS); break;
    default: return k->yaml(c, k, n);
    }
    if (st)
        return st;
    char why[512];
    if (!lh_rc_key_parse(k, rc, n->value, false, yorigin(n), why, sizeof why))
        return strcmp(why, "out of memory") == 0 ? nomem(c) : yerr(c, n, k->name, why);
    return LH_OK;
}

/* Mapping or null (null: empty); sequences likewise. */
static lh_status y_container(rc_ctx *c, const lh_ynode *n, lh_ynode_kind kind, const char *path,
                             const char *expected, bool *empty)
{
    *empty = n->kind == LH_YNODE_SCALAR && n->is_null;
    if (*empty || n->kind == kind)
        return LH_OK;
    char why[512];
    if (n->kind == LH_YNODE_SCALAR)
        snprintf(why, sizeof why, "expected %s, got the scalar '%.200s'", expected, n->value);
    else
        snprintf(why, sizeof why, "expected %s, got %s", expected, lh_ynode_kind_name(n));
    return yerr(c, n, path, why);
}

static lh_status y_mapping(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected,
                           bool *empty)
{
    return y_container(c, n, LH_YNODE_MAPPING, path, expected, empty);
}

static lh_status y_sequence(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected,
                            bool *empty)
{
    return y_container(c, n, LH_YNODE_SEQUENCE, path, expected, empty);
}

/* ------------------------------------------------------------------------------------------ */
/* sections */

/* The kv_cache mapping is committed as a whole: on error rc->kv_cache is unchanged. Each leaf
 * is read by its table entry, in table order: dtype (both tensors) before k_dtype / v_dtype,
 * so that those win for theirs wherever they stand in the mapping. */
lh_status lh_rc_yaml_kv_cache(rc_ctx *c, const lh_rc_key *k, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, k->name,
                             "a mapping {block_size, dtype, k_dtype, v_dtype, layout, "
                             "max_tokens, memory_fraction}",
                             &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, k->name, "kv_cache.")))
        return st;
    lh_run_config scratch = *c->rc; /* only kv_cache is written (no owned strings) */
    for (size_t i = 0; i < lh_rc_n_keys; i++) {
        const lh_rc_key *e = &lh_rc_keys[i];
        const lh_ynode *v;
        if (strncmp(e->name, "kv_cache.", 9) != 0 || !(v = lh_ynode_get(n, e->name + 9)))
            continue;
        if ((st = y_leaf(c, e, v, &scratch)))
            return st;
    }
    scratch.kv_cache.origin = yorigin(n);
    c->rc->kv_cache = scratch.kv_cache;
    return LH_OK;
}

/* Committed as a whole; a null section leaves what was there. */
lh_status lh_rc_yaml_sparse(rc_ctx *c, const lh_rc_key *k, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, k->name,
                             "a mapping {algorithm: topk_blocks, top_k: N, local_blocks: N}",
                             &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, k->name, "sparse_attention.")))
        return st;
    const lh_ynode *an = lh_ynode_get(n, "algorithm");
    const lh_ynode *kn = lh_ynode_get(n, "top_k");
    const lh_ynode *ln = lh_ynode_get(n, "local_blocks");
    if (!an)
        return yerr(c, n, k->name,
                    "missing required key 'algorithm' (the only one is topk_blocks)");
    if (!kn)
        return yerr(c, n, k->name,
                    "missing required key 'top_k' (KV blocks selected per query, >= 1)");
    int alg;
    if ((st = y_key_enum(c, an, "sparse_attention.algorithm", NULL, &alg)))
        return st;
    lh_run_config scratch = *c->rc; /* only sparse is written */
    scratch.sparse = (lh_sparse_config){.enabled = true, .local_blocks = 1};
    if ((st = y_leaf(c, key("sparse_attention.top_k"), kn, &scratch)))
        return st;
    if (ln && (st = y_leaf(c, key("sparse_attention.local_blocks"), ln, &scratch)))
        return st;
    scratch.sparse.origin = yorigin(n);
    c->rc->sparse = scratch.sparse;
    return LH_OK;
}

/* Committed as a whole; a null section leaves what was there. */
lh_status lh_rc_yaml_speculative(rc_ctx *c, const lh_rc_key *k, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, k->name, "a mapping {mode: NAME, num_tokens: N}", &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, k->name, "speculative.")))
        return st;
    const lh_ynode *mn = lh_ynode_get(n, "mode");
    const lh_ynode *kn = lh_ynode_get(n, "num_tokens");
    if (!mn)
        return yerr(c, n, k->name,
                    "missing required key 'mode' (e.g. eagle3, mtp, draft_model)");
    if (!kn)
        return yerr(c, n, k->name,
                    "missing required key 'num_tokens' (tokens drafted per step, >= 1)");
    const lh_rc_key *mk = key("speculative.mode");
    const char *mode = NULL;
    if ((st = y_string(c, mn, mk->name, mk->expected, &mode)))
        return st;
    int64_t num;
    if ((st = y_pos_int(c, kn, "speculative.num_tokens", &num)))
        return st;
    char *m = lh_strdup(mode);
    if (!m)
        return nomem(c);
    free(c->rc->speculative.mode);
    c->rc->speculative.mode = m;
    c->rc->speculative.num_tokens = num;
    c->rc->speculative.origin = yorigin(n);
    return LH_OK;
}

lh_status lh_rc_yaml_model_impl(rc_ctx *c, const lh_rc_key *k, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, k->name, "a mapping {target: NAME, mode: off|auto|require}",
                             &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, k->name, "model_impl.")))
        return st;
    const lh_ynode *tn = lh_ynode_get(n, "target");
    const lh_ynode *mn = lh_ynode_get(n, "mode");
    const lh_rc_key *tk = key("model_impl.target"), *mk = key("model_impl.mode");
    const char *target = NULL;
    int mode = -1;
    if (tn && (st = y_string(c, tn, tk->name, tk->expected, &target)))
        return st;
    if (mn && (st = y_enum(c, mn, mk->name, mk->names, mk->n_names, &mode)))
        return st;
    if (!tn && !mn)
        return LH_OK;
    if (mode < 0)
        mode = LH_IMPL_AUTO; /* target given without a mode */
    if (mode != LH_IMPL_OFF && !target && !c->rc->model_impl_target) {
        char why[256];
        snprintf(why, sizeof why, "mode '%s' needs model_impl.target (none given)",
                 mk->names[mode]);
        return yerr(c, mn, mk->name, why);
    }
    if (target) {
        char *t = lh_strdup(target);
        if (!t)
            return nomem(c);
        free(c->rc->model_impl_target);
        c->rc->model_impl_target = t;
    }
    c->rc->model_impl_mode = (lh_impl_mode)mode;
    c->rc->model_impl_origin = yorigin(tn ? tn : mn);
    return LH_OK;
}

static lh_status y_group_size_scheme(rc_ctx *c, const lh_ynode *gn, const char *path,
                                     lh_quant_scheme scheme, const char *scheme_from)
{
    if (scheme == LH_QUANT_INT4)
        return LH_OK;
    char why[512];
    snprintf(why, sizeof why,
             "group_size applies only to scheme int4, but the scheme is '%s'%s; remove "
             "group_size or use int4",
             lh_quant_scheme_name(scheme), scheme_from);
    return yerr(c, gn, path, why);
}

static lh_status y_rules(rc_ctx *c, const lh_ynode *n, int64_t default_group,
                         lh_quant_rule **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    bool empty;
    lh_status st = y_sequence(c, n, "quant.rules",
                              "a sequence of mappings {pattern: GLOB, scheme: ..., group_size: N}",
                              &empty);
    if (st || empty)
        return st;
    lh_quant_rule *rules = calloc(n->n ? n->n : 1, sizeof *rules);
    if (!rules)
        return nomem(c);
    const lh_rc_key *pk = key("quant.rules[].pattern");
    size_t count = 0;
    for (size_t i = 0; i < n->n; i++) {
        const lh_ynode *r = n->items[i];
        char path[64], sub[96];
        snprintf(path, sizeof path, "quant.rules[%zu]", i);
        if (r->kind != LH_YNODE_MAPPING) {
            char why[512];
            if (r->kind == LH_YNODE_SCALAR)
                snprintf(why, sizeof why,
                         "expected a mapping {pattern: GLOB, scheme: ...}, got the scalar "
                         "'%.200s'",
                         r->value);
            else
                snprintf(why, sizeof why, "expected a mapping {pattern: GLOB, scheme: ...}, got %s",
                         lh_ynode_kind_name(r));
            st = yerr(c, r, path, why);
            goto fail;
        }
        if ((st = check_keys(c, r, path, "quant.rules[].")))
            goto fail;
        const lh_ynode *pn = lh_ynode_get(r, "pattern");
        const lh_ynode *sn = lh_ynode_get(r, "scheme");
        const lh_ynode *gn = lh_ynode_get(r, "group_size");
        if (!pn || !sn) {
            st = yerr(c, r, path,
                      !pn ? "missing required key 'pattern' (a glob over module names)"
                          : "missing required key 'scheme' (none, fp8, int8 or int4)");
            goto fail;
        }
        const char *pattern = NULL;
        snprintf(sub, sizeof sub, "%s.pattern", path);
        if ((st = y_string(c, pn, sub, pk->expected, &pattern)))
            goto fail;
        int scheme;
        snprintf(sub, sizeof sub, "%s.scheme", path);
        if ((st = y_key_enum(c, sn, "quant.rules[].scheme", sub, &scheme)))
            goto fail;
        int64_t group = default_group;
        if (gn) {
            snprintf(sub, sizeof sub, "%s.group_size", path);
            if ((st = y_pos_int(c, gn, sub, &group)))
                goto fail;
            if ((st = y_group_size_scheme(c, gn, sub, (lh_quant_scheme)scheme, " in this rule")))
                goto fail;
        }
        rules[count].pattern = lh_strdup(pattern);
        if (!rules[count].pattern) {
            st = nomem(c);
            goto fail;
        }
        rules[count].scheme = (lh_quant_scheme)scheme;
        rules[count].group_size = group;
        rules[count].origin = yorigin(r);
        count++;
    }
    *out = rules;
    *n_out = count;
    return LH_OK;
fail:
    lh_rc_free_rules(rules, count);
    return st;
}

static lh_status y_excludes(rc_ctx *c, const lh_ynode *n, char ***out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    bool empty;
    lh_status st = y_sequence(c, n, "quant.exclude_modules", "a sequence of glob patterns",
                              &empty);
    if (st || empty)
        return st;
    char **ex = calloc(n->n ? n->n : 1, sizeof *ex);
    if (!ex)
        return nomem(c);
    size_t count = 0;
    for (size_t i = 0; i < n->n; i++) {
        char path[64];
        snprintf(path, sizeof path, "quant.exclude_modules[%zu]", i);
        const char *s = NULL;
        if ((st = y_string(c, n->items[i], path, "a non-empty glob pattern", &s)))
            goto fail;
        if (!(ex[count] = lh_strdup(s))) {
            st = nomem(c);
            goto fail;
        }
        count++;
    }
    *out = ex;
    *n_out = count;
    return LH_OK;
fail:
    lh_rc_free_strings(ex, count);
    return st;
}

/* The quant mapping is committed as a whole: on error rc->quant is unchanged. */
lh_status lh_rc_yaml_quant(rc_ctx *c, const lh_rc_key *k, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, k->name,
                             "a mapping {scheme, group_size, rules, exclude_modules}", &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, k->name, "quant.")))
        return st;
    lh_quant_config *q = &c->rc->quant;
    const lh_ynode *sn = lh_ynode_get(n, "scheme");
    const lh_ynode *gn = lh_ynode_get(n, "group_size");
    const lh_ynode *rn = lh_ynode_get(n, "rules");
    const lh_ynode *en = lh_ynode_get(n, "exclude_modules");

    int scheme = (int)q->scheme;
    int64_t group = q->group_size;
    if (sn && (st = y_key_enum(c, sn, "quant.scheme", NULL, &scheme)))
        return st;
    if (gn) {
        if ((st = y_pos_int(c, gn, "quant.group_size", &group)))
            return st;
        if ((st = y_group_size_scheme(c, gn, "quant.group_size", (lh_quant_scheme)scheme,
                                      sn ? "" : " (quant.scheme is not set to int4)")))
            return st;
    }
    lh_quant_rule *rules = NULL;
    size_t n_rules = 0;
    char **ex = NULL;
    size_t n_ex = 0;
    if (rn && (st = y_rules(c, rn, group, &rules, &n_rules)))
        return st;
    if (en && (st = y_excludes(c, en, &ex, &n_ex))) {
        lh_rc_free_rules(rules, n_rules);
        return st;
    }
    q->scheme = (lh_quant_scheme)scheme;
    q->group_size = group;
    if (rn) {
        lh_rc_free_rules(q->rules, q->n_rules);
        q->rules = rules;
        q->n_rules = n_rules;
    }
    if (en) {
        lh_rc_free_strings(q->exclude_modules, q->n_exclude);
        q->exclude_modules = ex;
        q->n_exclude = n_ex;
    }
    q->origin = yorigin(sn ? sn : gn ? gn : n);
    return LH_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* the document */

static lh_status apply_tree(rc_ctx *c, const lh_ynode *root)
{
    if (!root || (root->kind == LH_YNODE_SCALAR && root->is_null))
        return LH_OK; /* an empty file is an empty config */
    if (root->kind != LH_YNODE_MAPPING) {
        char why[512];
        if (root->kind == LH_YNODE_SCALAR)
            snprintf(why, sizeof why, "got the scalar '%.200s'", root->value);
        else
            snprintf(why, sizeof why, "got %s", lh_ynode_kind_name(root));
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s:%d:%d: a run config must be a mapping of keys (dtype: ..., quant: "
                          "...), %s",
                          c->src, root->line, root->column, why);
    }
    lh_status st = check_keys(c, root, NULL, "");
    if (st)
        return st;
    for (size_t i = 0; i < root->n; i++) {
        const lh_rc_key *k = key(root->keys[i]->value); /* known: check_keys passed */
        if (k && (st = y_leaf(c, k, root->items[i], c->rc)))
            return st;
    }
    return LH_OK;
}

static lh_status load_text(lh_run_config *rc, const char *text, size_t len, const char *source,
                           lh_err *err)
{
    char *src = lh_strdup(source);
    if (!src)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", source);
    free(rc->source);
    rc->source = src;
    lh_ynode *root = NULL;
    lh_status st = lh_yaml_parse(text, len, rc->source, &root, err);
    if (st)
        return st;
    rc_ctx c = {.rc = rc, .src = rc->source, .err = err};
    st = apply_tree(&c, root);
    lh_ynode_free(root);
    return st;
}

lh_status lh_run_config_load_string(lh_run_config *rc, const char *yaml_text,
                                    const char *source_name, lh_err *err)
{
    if (!rc || !yaml_text)
        return lh_err_set(err, LH_E_USAGE, "lh_run_config_load_string: %s is NULL",
                          rc ? "yaml_text" : "rc");
    return load_text(rc, yaml_text, strlen(yaml_text), source_name ? source_name : "<string>",
                     err);
}

lh_status lh_run_config_load_file(lh_run_config *rc, const char *path, lh_err *err)
{
    if (!rc || !path)
        return lh_err_set(err, LH_E_USAGE, "lh_run_config_load_file: %s is NULL",
                          rc ? "path" : "rc");
    char *buf;
    size_t n;
    lh_status st = lh_read_text_file(path, "run config", (size_t)16 << 20, LH_E_CONFIG, &buf, &n,
                                     err);
    if (st == LH_OK)
        st = load_text(rc, buf, n, path, err);
    free(buf);
    return st;
}
