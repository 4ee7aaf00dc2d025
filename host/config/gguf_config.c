/* A model config from a GGUF file's metadata, written by the plugin that serves its
 * architecture (gguf_config.h). */
#include "config/gguf_config.h"

#include "api/host_api_table.h"

#include "core/err.h"
#include "core/log.h"
#include "core/paths.h"
#include "core/strbuf.h"
#include "weights/gguf.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lh_gguf_source {
    const lh_gguf_file *f;
    const char *arch;
    /* NUL-terminated copies of the strings finish asked for (GGUF strings are not) */
    char **strs;
    size_t n_strs;
    bool oom;
};

struct lh_gguf_config {
    json_t *root;
};

static bool empty(const char *s)
{
    return !s || !*s;
}

/* ---- the source: metadata getters for finish ---------------------------------------------- */

int lh_gguf_source_get_int(const lh_gguf_source *s, const char *key, int64_t *out)
{
    const lh_gguf_kv *kv = s && key ? lh_gguf_find(s->f, key) : NULL;
    if (!kv)
        return 0;
    int64_t v;
    if (lh_gguf_value_int(&kv->value, INT64_MIN, INT64_MAX, &v, NULL) != LH_OK)
        return -1;
    if (out)
        *out = v;
    return 1;
}

int lh_gguf_source_get_double(const lh_gguf_source *s, const char *key, double *out)
{
    const lh_gguf_kv *kv = s && key ? lh_gguf_find(s->f, key) : NULL;
    if (!kv)
        return 0;
    double v;
    if (lh_gguf_value_float(&kv->value, &v, NULL) != LH_OK)
        return -1;
    if (out)
        *out = v;
    return 1;
}

int lh_gguf_source_get_bool(const lh_gguf_source *s, const char *key, bool *out)
{
    const lh_gguf_kv *kv = s && key ? lh_gguf_find(s->f, key) : NULL;
    if (!kv)
        return 0;
    bool v;
    if (lh_gguf_value_bool(&kv->value, &v, NULL) != LH_OK)
        return -1;
    if (out)
        *out = v;
    return 1;
}

int lh_gguf_source_get_string(const lh_gguf_source *cs, const char *key, const char **out)
{
    lh_gguf_source *s = (lh_gguf_source *)(uintptr_t)cs; /* the copies are a cache */
    const lh_gguf_kv *kv = s && key ? lh_gguf_find(s->f, key) : NULL;
    if (!kv)
        return 0;
    const char *p;
    size_t len;
    if (lh_gguf_value_string(&kv->value, &p, &len, NULL) != LH_OK || memchr(p, 0, len))
        return -1;
    char **grown = realloc(s->strs, (s->n_strs + 1) * sizeof *grown);
    char *copy = grown ? strndup(p, len) : NULL;
    if (grown)
        s->strs = grown;
    if (!copy) {
        s->oom = true;
        return -1;
    }
    s->strs[s->n_strs++] = copy;
    if (out)
        *out = copy;
    return 1;
}

const char *lh_gguf_source_arch(const lh_gguf_source *s)
{
    return s ? s->arch : NULL;
}

bool lh_gguf_source_has_tensor(const lh_gguf_source *s, const char *name)
{
    return s && name && lh_gguf_find_tensor(s->f, name) != NULL;
}

/* ---- the config being written -------------------------------------------------------------- */

/* The object that holds the last segment of a dotted key, created on the way; *leaf is that
 * segment. NULL when a segment is empty or an existing value on the path is not an object. */
static json_t *parent_of(json_t *root, const char *key, char *seg, size_t seg_size,
                         const char **leaf)
{
    json_t *cur = root;
    const char *s = key;
    for (;;) {
        const char *dot = strchr(s, '.');
        const size_t n = dot ? (size_t)(dot - s) : strlen(s);
        if (n == 0 || n >= seg_size)
            return NULL;
        if (!dot) {
            *leaf = s;
            return cur;
        }
        memcpy(seg, s, n);
        seg[n] = '\0';
        json_t *next = json_object_get(cur, seg);
        if (!next || json_is_null(next)) {
            next = json_object();
            if (!next || json_object_set_new(cur, seg, next) != 0)
                return NULL;
        } else if (!json_is_object(next)) {
            return NULL;
        }
        cur = next;
        s = dot + 1;
    }
}

/* Takes v (also on failure). */
static lh_status set_value(lh_gguf_config *c, const char *key, json_t *v)
{
    if (!v)
        return LH_E_NOMEM;
    char seg[256];
    const char *leaf = NULL;
    json_t *obj = c && !empty(key) ? parent_of(c->root, key, seg, sizeof seg, &leaf) : NULL;
    if (!obj || strlen(leaf) >= 256) {
        json_decref(v);
        return LH_E_USAGE;
    }
    return json_object_set_new(obj, leaf, v) == 0 ? LH_OK : LH_E_NOMEM;
}

lh_status lh_gguf_config_set_int(lh_gguf_config *c, const char *key, int64_t v)
{
    return set_value(c, key, json_integer((json_int_t)v));
}

lh_status lh_gguf_config_set_double(lh_gguf_config *c, const char *key, double v)
{
    if (!isfinite(v))
        return LH_E_USAGE;
    return set_value(c, key, json_real(v));
}

lh_status lh_gguf_config_set_bool(lh_gguf_config *c, const char *key, bool v)
{
    return set_value(c, key, json_boolean(v));
}

lh_status lh_gguf_config_set_string(lh_gguf_config *c, const char *key, const char *v)
{
    if (!v)
        return LH_E_USAGE;
    return set_value(c, key, json_string(v));
}

lh_status lh_gguf_config_set_json(lh_gguf_config *c, const char *key, const char *json_text)
{
    if (!json_text)
        return LH_E_USAGE;
    json_t *v = json_loads(json_text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (!v)
        return LH_E_USAGE;
    return set_value(c, key, v);
}

int lh_gguf_config_peek_int(const lh_gguf_config *c, const char *key, int64_t *out)
{
    if (!c || empty(key))
        return 0;
    const json_t *cur = c->root;
    const char *s = key;
    char seg[256];
    while (cur) {
        const char *dot = strchr(s, '.');
        const size_t n = dot ? (size_t)(dot - s) : strlen(s);
        if (n == 0 || n >= sizeof seg)
            return 0;
        memcpy(seg, s, n);
        seg[n] = '\0';
        cur = json_is_object(cur) ? json_object_get(cur, seg) : NULL;
        if (!dot)
            break;
        s = dot + 1;
    }
    if (!cur || json_is_null(cur))
        return 0;
    if (!json_is_integer(cur))
        return -1;
    if (out)
        *out = (int64_t)json_integer_value(cur);
    return 1;
}

/* ---- metadata values as JSON ---------------------------------------------------------------- */

/* A float32 as the shortest decimal that reads back as the same float32 (1e-05, not
 * 9.99999975e-06), which is what the model's config.json said before conversion. */
static double shortest_f32(float v)
{
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        const double d = strtod(buf, NULL);
        if ((float)d == v)
            return d;
    }
    return (double)v;
}

static json_t *scalar_json(const lh_gguf_value *v, lh_err *err, const char *what)
{
    switch (v->elem_type == v->type ? v->type : v->elem_type) {
    case LH_GGUF_BOOL: {
        bool b;
        return lh_gguf_value_bool(v, &b, err) == LH_OK ? json_boolean(b) : NULL;
    }
    case LH_GGUF_FLOAT32: {
        float f;
        memcpy(&f, v->p, sizeof f);
        if (!isfinite(f)) {
            lh_err_set(err, LH_E_CONFIG, "%s is %g, not a finite number", what, (double)f);
            return NULL;
        }
        return json_real(shortest_f32(f));
    }
    case LH_GGUF_FLOAT64: {
        double d;
        if (lh_gguf_value_float(v, &d, err) != LH_OK)
            return NULL;
        if (!isfinite(d)) {
            lh_err_set(err, LH_E_CONFIG, "%s is %g, not a finite number", what, d);
            return NULL;
        }
        return json_real(d);
    }
    case LH_GGUF_STRING: {
        const char *s;
        size_t len;
        if (lh_gguf_value_string(v, &s, &len, err) != LH_OK)
            return NULL;
        json_t *j = json_stringn(s, len);
        if (!j)
            lh_err_set(err, LH_E_CONFIG, "%s is not valid UTF-8", what);
        return j;
    }
    default: {
        int64_t i;
        if (lh_gguf_value_int(v, INT64_MIN, INT64_MAX, &i, err) != LH_OK)
            return NULL;
        return json_integer((json_int_t)i);
    }
    }
}

/* A metadata value as JSON: scalars, and arrays of scalars (per-layer values). */
static json_t *value_json(const lh_gguf_value *v, const char *key, lh_err *err)
{
    if (v->type != LH_GGUF_ARRAY) {
        json_t *j = scalar_json(v, err, key);
        if (!j && err && err->code == LH_OK)
            lh_err_set(err, LH_E_NOMEM, "out of memory");
        else if (!j && err && !strstr(err->msg, key))
            lh_err_prefix(err, "metadata key '%s'", key);
        return j;
    }
    if (v->elem_type == LH_GGUF_ARRAY) {
        lh_err_set(err, LH_E_CONFIG, "metadata key '%s' is an array of arrays, which no config "
                   "key takes", key);
        return NULL;
    }
    json_t *arr = json_array();
    for (uint64_t i = 0; arr && i < v->count; i++) {
        lh_gguf_value e;
        json_t *j = NULL;
        if (lh_gguf_value_at(v, i, &e, err) == LH_OK)
            j = scalar_json(&e, err, key);
        if (!j || json_array_append_new(arr, j) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* "{arch}" in a table's key replaced by general.architecture. */
static char *expand_key(const char *pattern, const char *arch)
{
    lh_strbuf b = {0};
    for (const char *p = pattern; *p;) {
        const char *at = strstr(p, "{arch}");
        if (!at) {
            lh_strbuf_printf(&b, "%s", p);
            break;
        }
        lh_strbuf_printf(&b, "%.*s%s", (int)(at - p), p, arch);
        p = at + 6;
    }
    if (b.oom || !b.s) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

static lh_status copy_keys(const lh_gguf_provider *p, const lh_gguf_source *src,
                           lh_gguf_config *c, lh_err *err)
{
    for (size_t i = 0; i < p->n_keys; i++) {
        const lh_gguf_key *k = &p->keys[i];
        char *key = expand_key(k->gguf_key, src->arch);
        if (!key)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        const lh_gguf_kv *kv = lh_gguf_find(src->f, key);
        lh_status st = LH_OK;
        if (!kv && (k->flags & LH_GGUF_REQUIRED))
            st = lh_err_set(err, LH_E_CONFIG, "metadata key '%s' is missing (the '%s' of "
                            "architecture '%s')", key, k->config_key, src->arch);
        else if (kv) {
            json_t *j = value_json(&kv->value, key, err);
            if (!j)
                st = err && err->code != LH_OK ? err->code : LH_E_NOMEM;
            else if ((st = set_value(c, k->config_key, j)) != LH_OK)
                st = lh_err_set(err, st, "cannot set config key '%s' from '%s'", k->config_key,
                                key);
        }
        free(key);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}

/* What every GGUF file says the same way (the format's tokenizer keys), where the provider's
 * table and finish set nothing. */
static lh_status add_common(const lh_gguf_provider *p, const lh_gguf_source *src,
                            lh_gguf_config *c, lh_err *err)
{
    /* the provider's architecture, unless its finish named another of its plugin (llama
     * files with experts are Mixtral) */
    json_t *archs = json_object_get(c->root, "architectures") ? NULL
                                                               : json_pack("[s]", p->architecture);
    if (!json_object_get(c->root, "architectures") &&
        (!archs || json_object_set_new(c->root, "architectures", archs) != 0))
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    const lh_gguf_kv *toks = lh_gguf_find(src->f, "tokenizer.ggml.tokens");
    if (!json_object_get(c->root, "vocab_size") && toks && toks->value.type == LH_GGUF_ARRAY &&
        json_object_set_new(c->root, "vocab_size", json_integer((json_int_t)toks->value.count)))
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    /* generation stops at the end of a turn too: llama.cpp's eot / eom ids join eos, as
     * transformers' generation_config lists them (Gemma's <end_of_turn>, Llama 3's <|eot_id|>) */
    if (!json_object_get(c->root, "eos_token_id")) {
        static const char *const stops[] = {"tokenizer.ggml.eos_token_id",
                                            "tokenizer.ggml.eot_token_id",
                                            "tokenizer.ggml.eom_token_id"};
        json_t *list = json_array();
        if (!list)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
            int64_t v;
            const int got = lh_gguf_source_get_int(src, stops[i], &v);
            if (got < 0) {
                json_decref(list);
                return lh_err_set(err, LH_E_CONFIG, "metadata key '%s' is not an integer",
                                  stops[i]);
            }
            bool dup = false;
            for (size_t k = 0; got == 1 && k < json_array_size(list); k++)
                dup |= json_integer_value(json_array_get(list, k)) == v;
            if (got == 1 && !dup && json_array_append_new(list, json_integer((json_int_t)v))) {
                json_decref(list);
                return lh_err_set(err, LH_E_NOMEM, "out of memory");
            }
        }
        json_t *eos = json_array_size(list) == 1 ? json_incref(json_array_get(list, 0)) : NULL;
        if (json_array_size(list) > 0 &&
            json_object_set_new(c->root, "eos_token_id", eos ? eos : json_incref(list))) {
            json_decref(list);
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        }
        json_decref(list);
    }
    static const char *const ids[][2] = {{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                                          {"pad_token_id", "tokenizer.ggml.padding_token_id"}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if (json_object_get(c->root, ids[i][0]))
            continue;
        int64_t v;
        const int got = lh_gguf_source_get_int(src, ids[i][1], &v);
        if (got < 0)
            return lh_err_set(err, LH_E_CONFIG, "metadata key '%s' is not an integer",
                              ids[i][1]);
        if (got == 1 && json_object_set_new(c->root, ids[i][0], json_integer((json_int_t)v)))
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    return LH_OK;
}

/* The format's RoPE scaling keys (gguf.md: [llm].rope.scaling.type none|linear|yarn, .factor,
 * .original_context_length; llama.cpp adds yarn_beta_fast / yarn_beta_slow) as transformers'
 * rope_scaling, unless the provider wrote one. */
static lh_status add_rope_scaling(const lh_gguf_source *src, lh_gguf_config *c, lh_err *err)
{
    if (json_object_get(c->root, "rope_scaling") || json_object_get(c->root, "rope_parameters"))
        return LH_OK;
    char key[200];
    snprintf(key, sizeof key, "%s.rope.scaling.type", src->arch);
    const char *type;
    const int got = lh_gguf_source_get_string(src, key, &type);
    if (got < 0)
        return lh_err_set(err, LH_E_CONFIG, "metadata key '%s' is not a string", key);
    if (got == 0 || strcmp(type, "none") == 0)
        return LH_OK;
    if (strcmp(type, "linear") != 0 && strcmp(type, "yarn") != 0)
        return lh_err_set(err, LH_E_UNSUPPORTED, "metadata key '%s' is '%s'; supported: none, "
                          "linear, yarn", key, type);
    json_t *rs = json_pack("{s:s}", "rope_type", type);
    if (!rs || json_object_set_new(c->root, "rope_scaling", rs) != 0)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    static const char *const fields[][2] = {
        {"factor", "factor"},
        {"original_context_length", "original_max_position_embeddings"},
        {"yarn_beta_fast", "beta_fast"},
        {"yarn_beta_slow", "beta_slow"}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        snprintf(key, sizeof key, "%s.rope.scaling.%s", src->arch, fields[i][0]);
        const lh_gguf_kv *kv = lh_gguf_find(src->f, key);
        if (!kv) {
            if (i == 0)
                return lh_err_set(err, LH_E_CONFIG, "RoPE scaling '%s' without '%s'", type,
                                  key);
            continue;
        }
        json_t *v = value_json(&kv->value, key, err);
        if (!v)
            return err && err->code != LH_OK ? err->code : LH_E_NOMEM;
        if (json_object_set_new(rs, fields[i][1], v) != 0)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    return LH_OK;
}

static lh_status find_provider(lh_registry *reg, const char *arch, const lh_reg_entry **out,
                               lh_err *err)
{
    lh_registry_lock(reg);
    lh_status st = lh_registry_ensure(reg, LH_KIND_GGUF, arch, out, err);
    lh_registry_unlock(reg);
    return st;
}

static lh_status write_config(const lh_gguf_provider *p, const lh_gguf_source *src,
                              lh_gguf_config *c, lh_err *err)
{
    lh_status st = copy_keys(p, src, c, err);
    if (st == LH_OK && p->finish) {
        lh_error perr = {0};
        st = p->finish(lh_host_api_table(), src, c, &perr);
        if (src->oom)
            st = lh_err_set(err, LH_E_NOMEM, "out of memory");
        else if (st != LH_OK)
            lh_err_set(err, st, "%s", perr.msg[0] ? perr.msg : "the GGUF provider failed "
                       "without a message");
    }
    if (st == LH_OK)
        st = add_common(p, src, c, err);
    if (st == LH_OK)
        st = add_rope_scaling(src, c, err);
    if (st == LH_OK && src->oom)
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    return st;
}

lh_status lh_model_config_from_gguf(lh_registry *reg, const char *file, lh_model_config **out,
                                    lh_err *err)
{
    *out = NULL;
    lh_gguf_file *f = NULL;
    lh_status st = lh_gguf_open(file, &f, err);
    if (st != LH_OK)
        return st;
    lh_gguf_source src = {.f = f};
    const char *arch = NULL;
    size_t arch_len = 0;
    char *arch_copy = NULL;
    st = lh_gguf_get_string(f, "general.architecture", &arch, &arch_len, err);
    if (st == LH_OK && (!(arch_copy = strndup(arch, arch_len)) || strlen(arch_copy) != arch_len))
        st = lh_err_set(err, arch_copy ? LH_E_CONFIG : LH_E_NOMEM, "%s: general.architecture "
                        "%s", file, arch_copy ? "holds a NUL byte" : "(out of memory)");
    src.arch = arch_copy;
    int64_t split = 0;
    if (st == LH_OK && lh_gguf_source_get_int(&src, "split.count", &split) == 1 && split > 1)
        st = lh_err_set(err, LH_E_UNSUPPORTED, "%s is one of %" PRId64 " split GGUF files "
                        "(split.count); merge them first with llama.cpp's gguf-split --merge",
                        file, split);
    const lh_reg_entry *e = NULL;
    if (st == LH_OK && (st = find_provider(reg, arch_copy, &e, err)) != LH_OK)
        lh_err_prefix(err, "%s: GGUF architecture '%s'", file, arch_copy);
    lh_gguf_config c = {.root = st == LH_OK ? json_object() : NULL};
    if (st == LH_OK && !c.root)
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    if (st == LH_OK && (st = write_config(&e->p.gguf, &src, &c, err)) != LH_OK)
        lh_err_prefix(err, "%s: GGUF architecture '%s' (%s)", file, arch_copy, e->module->path);
    char *text = NULL;
    if (st == LH_OK && !(text = json_dumps(c.root, JSON_INDENT(2) | JSON_PRESERVE_ORDER)))
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    char *dir = st == LH_OK ? lh_parent_dir(file) : NULL;
    if (st == LH_OK && !dir)
        st = lh_err_set(err, LH_E_NOMEM, "%s: cannot resolve its directory", file);
    if (st == LH_OK) {
        lh_log(LH_LOG_DEBUG, "gguf: %s (%s via %s) as config.json:\n%s", file, arch_copy,
               e->module->path, text);
        st = lh_model_config_parse_at(text, strlen(text), file, dir, out, err);
        if (st != LH_OK)
            lh_err_prefix(err, "the config written from GGUF architecture '%s' (%s)",
                          arch_copy, e->module->path);
    }
    if (st == LH_OK) {
        (*out)->gguf = f;
        (*out)->gguf_provider = &e->p.gguf;
        f = NULL;
        lh_log(LH_LOG_INFO, "model: %s is a GGUF file (v%u, architecture '%s'), served as %s "
               "by %s", file, lh_gguf_version((*out)->gguf), arch_copy,
               e->p.gguf.architecture, e->module->path);
    }
    free(dir);
    free(text);
    json_decref(c.root);
    for (size_t i = 0; i < src.n_strs; i++)
        free(src.strs[i]);
    free(src.strs);
    free(arch_copy);
    lh_gguf_close(f);
    return st;
}
