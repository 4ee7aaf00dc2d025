/* The YAML run config (libyaml via yaml_tree), CLI overrides and the one validator.
 * See run_config.h. */
#include "run_config.h"

#include "config/model_config.h"
#include "config/yaml_tree.h"
#include "core/err.h"
#include "core/fileio.h"
#include "core/strutil.h"

#include "lh_kernels.h"
#include "lh_plugin.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const char *const root_keys[] = {"mm_encoder_only", "model_impl",     "dtype",
                                        "max_seq_len",     "max_batch_size", "quant",
                                        "weight_placement", "attn_backend",
                                        "attn_backend_fallback", "kv_cache",
                                        "sparse_attention", "beam_width", "speculative",
                                        "fused_rope", "device", "cuda_graphs"};
static const char *const impl_keys[] = {"target", "mode"};
static const char *const quant_keys[] = {"scheme", "group_size", "rules", "exclude_modules"};
static const char *const rule_keys[] = {"pattern", "scheme", "group_size"};
static const char *const kv_keys[] = {"block_size", "dtype",      "k_dtype",        "v_dtype",
                                      "layout",     "max_tokens", "memory_fraction"};
static const char *const sparse_keys[] = {"algorithm", "top_k", "local_blocks"};
static const char *const sparse_algorithms[] = {"topk_blocks"};
static const char *const spec_keys[] = {"mode", "num_tokens"};
static const char *const kv_dtype_names[] = {"auto", "float32", "bfloat16", "float16", "fp8"};
static const lh_dtype kv_dtype_values[] = {LH_DTYPE_INVALID, LH_DTYPE_F32, LH_DTYPE_BF16,
                                           LH_DTYPE_F16, LH_DTYPE_FP8_E4M3};
static const char *const kv_layout_names[] = {"NHD", "HND"};
/* Keys lh_run_config_set accepts. */
static const char *const flag_keys[] = {"mm_encoder_only", "model_impl",     "dtype",
                                        "max_seq_len",     "max_batch_size", "quant",
                                        "weight_placement", "attn_backend",
                                        "attn_backend_fallback", "beam_width", "fused_rope",
                                        "device", "cuda_graphs", "kv_cache.dtype",
                                        "kv_cache.k_dtype", "kv_cache.v_dtype",
                                        "kv_cache.memory_fraction", "kv_cache.max_tokens",
                                        "kv_cache.block_size", "kv_cache.layout"};

static const char *const scheme_names[] = {"none", "fp8", "int8", "int4"};
static const char *const mode_names[] = {"off", "auto", "require"};
static const char *const placement_names[] = {"auto", "mmap", "huge_pages"};

/* Backend names are normalized once, here, so that validation and dispatch cannot disagree
 * about "Paged" vs "paged". */
static lh_status set_backend_name(lh_run_config *rc, const char *name, lh_err *err)
{
    char *copy = lh_strdup(name);
    if (!copy)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    for (char *p = copy; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    free(rc->attn_backend);
    rc->attn_backend = copy;
    return LH_OK;
}

const char *lh_weight_placement_name(lh_weight_placement p)
{
    return (unsigned)p < N_OF(placement_names) ? placement_names[p] : "unknown";
}

#define DEFAULT_GROUP_SIZE 128

/* ------------------------------------------------------------------------------------------ */
/* small shared pieces */

const char *lh_quant_scheme_name(lh_quant_scheme s)
{
    if ((unsigned)s < N_OF(scheme_names))
        return scheme_names[s];
    return "invalid";
}

static const char *mode_name(lh_impl_mode m)
{
    if ((unsigned)m < N_OF(mode_names))
        return mode_names[m];
    return "invalid";
}

static void join_names(const char *const *names, size_t n, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? ", " : "", names[i]);
}

static int find_name(const char *v, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(v, names[i]) == 0)
            return (int)i;
    return -1;
}

/* Each value parser fills `why` (the part of the message after "KEY: ") on failure. */

static bool parse_bool_text(const char *v, bool *out, char *why, size_t n)
{
    static const char *const t[] = {"true", "yes", "on"};
    static const char *const f[] = {"false", "no", "off"};
    if (find_name(v, t, N_OF(t)) >= 0) {
        *out = true;
        return true;
    }
    if (find_name(v, f, N_OF(f)) >= 0) {
        *out = false;
        return true;
    }
    snprintf(why, n, "'%s' is not a boolean (true/false, yes/no, on/off)", v);
    return false;
}

/* Decimal integer > 0. */
static bool parse_pos_int_text(const char *v, int64_t *out, char *why, size_t n)
{
    const char *p = v;
    if (*p == '+' || *p == '-')
        p++;
    bool digits = *p != '\0';
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9')
            digits = false;
    if (!digits) {
        snprintf(why, n, "'%s' is not a decimal integer", v);
        return false;
    }
    errno = 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (errno == ERANGE) {
        snprintf(why, n, "'%s' is out of range for a 64-bit integer", v);
        return false;
    }
    if (x <= 0) {
        snprintf(why, n, "%lld must be > 0", x);
        return false;
    }
    *out = (int64_t)x;
    return true;
}

/* A decimal number in (0, 1]: digits, '.', an exponent; no hex, inf or nan (strtod would take
 * those). Underflow and overflow land outside the range. */
static bool parse_fraction_text(const char *v, double *out, char *why, size_t n)
{
    bool ok = *v != '\0';
    for (const char *q = v; *q && ok; q++)
        ok = (*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' ||
             *q == '-';
    char *end = NULL;
    double x = ok ? strtod(v, &end) : 0.0;
    if (!ok || end == v || *end != '\0') {
        snprintf(why, n, "'%s' is not a decimal number", v);
        return false;
    }
    if (!(x > 0.0 && x <= 1.0)) {
        snprintf(why, n, "%s must be in (0, 1] (a fraction of the available memory)", v);
        return false;
    }
    *out = x;
    return true;
}

static bool parse_dtype_text(const char *v, lh_dtype *out, char *why, size_t n)
{
    if (strcasecmp(v, "auto") == 0) {
        *out = LH_DTYPE_INVALID;
        return true;
    }
    lh_dtype dt = lh_dtype_from_name(v);
    if (dt == LH_DTYPE_F32 || dt == LH_DTYPE_BF16 || dt == LH_DTYPE_F16) {
        *out = dt;
        return true;
    }
    if (dt != LH_DTYPE_INVALID)
        snprintf(why, n,
                 "'%s' is not a weight dtype (auto, float32, bfloat16, float16); quantized "
                 "weights are chosen with quant (scheme fp8, int8 or int4)",
                 v);
    else
        snprintf(why, n, "'%s' is not one of auto, float32, bfloat16, float16", v);
    return false;
}

static bool parse_enum_text(const char *v, const char *const *names, size_t count, int *out,
                            char *why, size_t n)
{
    int i = find_name(v, names, count);
    if (i < 0) {
        char list[256];
        join_names(names, count, list, sizeof list);
        snprintf(why, n, "'%s' is not one of %s", v, list);
        return false;
    }
    *out = i;
    return true;
}

#define DEVICE_FORMS "auto, cpu, cuda or cuda:N (N a CUDA device ordinal: 0, 1, ...)"

/* auto | cpu | cuda | cuda:N, case-insensitive; N decimal digits only (no sign, no spaces). */
static bool parse_device_text(const char *v, bool *is_auto, lh_device *out, char *why, size_t n)
{
    lh_device d = {LH_DEVICE_CPU, 0};
    if (strcasecmp(v, "auto") == 0 || strcasecmp(v, "cpu") == 0) {
        *is_auto = strcasecmp(v, "auto") == 0;
        *out = d;
        return true;
    }
    if (strncasecmp(v, "cuda", 4) != 0 || (v[4] != '\0' && v[4] != ':')) {
        snprintf(why, n, "'%s' is not a device; expected " DEVICE_FORMS, v);
        return false;
    }
    long long idx = 0;
    if (v[4] == ':') {
        const char *p = v + 5;
        bool digits = *p != '\0';
        for (const char *q = p; *q; q++)
            if (*q < '0' || *q > '9')
                digits = false;
        if (!digits) {
            snprintf(why, n, "'%s' is not a device: '%s' is not a CUDA device ordinal (a whole "
                     "number >= 0); expected " DEVICE_FORMS, v, p);
            return false;
        }
        errno = 0;
        idx = strtoll(p, NULL, 10);
        if (errno == ERANGE || idx > INT_MAX) {
            snprintf(why, n, "'%s': the CUDA device ordinal %s is out of range", v, p);
            return false;
        }
    }
    d.kind = LH_DEVICE_CUDA;
    d.index = (int)idx;
    *is_auto = false;
    *out = d;
    return true;
}

const char *lh_device_str(lh_device d, char *buf, size_t n)
{
    if (!buf || n == 0)
        return "";
    if (d.kind == LH_DEVICE_CUDA)
        snprintf(buf, n, "cuda:%d", d.index);
    else if (d.kind == LH_DEVICE_CPU)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "device-kind-%d", (int)d.kind);
    return buf;
}

const char *lh_run_device_str(const lh_run_config *rc, char *buf, size_t n)
{
    if (!buf || n == 0)
        return "";
    if (!rc || rc->device_auto) {
        snprintf(buf, n, "auto");
        return buf;
    }
    return lh_device_str(rc->device, buf, n);
}

/* "auto" for LH_DTYPE_INVALID, else the canonical name. */
static const char *kv_dtype_str(lh_dtype dt)
{
    return dt == LH_DTYPE_INVALID ? "auto" : lh_dtype_name(dt);
}

static lh_dtype kv_dtype_resolved(lh_dtype dt)
{
    return dt == LH_DTYPE_INVALID ? LH_DTYPE_F32 : dt;
}

bool lh_kv_cache_mixed(const lh_kv_cache_config *kv)
{
    return kv && kv_dtype_resolved(kv->k_dtype) != kv_dtype_resolved(kv->v_dtype);
}

/* ------------------------------------------------------------------------------------------ */
/* init / free / origins / json */

void lh_run_config_init(lh_run_config *rc)
{
    if (!rc)
        return;
    memset(rc, 0, sizeof *rc);
    rc->mm_encoder_only = false;
    rc->model_impl_mode = LH_IMPL_OFF;
    rc->dtype = LH_DTYPE_INVALID;
    rc->max_seq_len = 0;
    rc->max_batch_size = 1;
    rc->kv_cache.block_size = 16;
    rc->kv_cache.k_dtype = LH_DTYPE_INVALID;
    rc->kv_cache.v_dtype = LH_DTYPE_INVALID;
    rc->sparse.local_blocks = 1;
    rc->beam_width = 1;
    rc->fused_rope = true;
    rc->device = (lh_device){LH_DEVICE_CPU, 0};
    rc->device_auto = true;
    rc->cuda_graphs = true;
    rc->quant.scheme = LH_QUANT_NONE;
    rc->quant.group_size = DEFAULT_GROUP_SIZE;
}

static void free_rules(lh_quant_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rules[i].pattern);
    free(rules);
}

static void free_strings(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

void lh_run_config_free(lh_run_config *rc)
{
    if (!rc)
        return;
    free(rc->source);
    free(rc->model_impl_target);
    free(rc->attn_backend);
    free(rc->speculative.mode);
    free_rules(rc->quant.rules, rc->quant.n_rules);
    free_strings(rc->quant.exclude_modules, rc->quant.n_exclude);
    lh_run_config_init(rc);
}

const char *lh_value_origin_str(const lh_run_config *rc, lh_value_origin o, char *buf, size_t n)
{
    if (!buf || n == 0)
        return "";
    switch (o.kind) {
    case LH_ORIGIN_YAML:
        snprintf(buf, n, "%s:%d:%d", rc && rc->source ? rc->source : "<yaml>", o.line,
                 o.column);
        break;
    case LH_ORIGIN_FLAG:
        snprintf(buf, n, "flag");
        break;
    default:
        snprintf(buf, n, "default");
        break;
    }
    return buf;
}

static json_t *origin_json(const lh_run_config *rc, lh_value_origin o)
{
    char buf[1024];
    return json_string(lh_value_origin_str(rc, o, buf, sizeof buf));
}

static int obj_set(json_t *obj, const char *key, json_t *v)
{
    return v ? json_object_set_new(obj, key, v) : -1;
}

json_t *lh_run_config_to_json(const lh_run_config *rc)
{
    if (!rc)
        return NULL;
    json_t *j = json_object();
    if (!j)
        return NULL;
    int bad = 0;
    bad |= obj_set(j, "source", rc->source ? json_string(rc->source) : json_null());

    json_t *o = json_object();
    bad |= obj_set(o, "value", json_boolean(rc->mm_encoder_only));
    bad |= obj_set(o, "origin", origin_json(rc, rc->mm_encoder_only_origin));
    bad |= obj_set(j, "mm_encoder_only", o);

    o = json_object();
    bad |= obj_set(o, "target",
                   rc->model_impl_target ? json_string(rc->model_impl_target) : json_null());
    bad |= obj_set(o, "mode", json_string(mode_name(rc->model_impl_mode)));
    bad |= obj_set(o, "origin", origin_json(rc, rc->model_impl_origin));
    bad |= obj_set(j, "model_impl", o);

    o = json_object();
    bad |= obj_set(o, "value", json_string(rc->dtype == LH_DTYPE_INVALID
                                               ? "auto"
                                               : lh_dtype_name(rc->dtype)));
    bad |= obj_set(o, "origin", origin_json(rc, rc->dtype_origin));
    bad |= obj_set(j, "dtype", o);

    o = json_object();
    bad |= obj_set(o, "value", json_integer(rc->max_seq_len));
    bad |= obj_set(o, "origin", origin_json(rc, rc->max_seq_len_origin));
    bad |= obj_set(j, "max_seq_len", o);

    o = json_object();
    bad |= obj_set(o, "value", json_integer(rc->max_batch_size));
    bad |= obj_set(o, "origin", origin_json(rc, rc->max_batch_size_origin));
    bad |= obj_set(j, "max_batch_size", o);

    const lh_kv_cache_config *kv = &rc->kv_cache;
    o = json_object();
    bad |= obj_set(o, "block_size", json_integer(kv->block_size));
    bad |= obj_set(o, "k_dtype", json_string(kv_dtype_str(kv->k_dtype)));
    bad |= obj_set(o, "v_dtype", json_string(kv_dtype_str(kv->v_dtype)));
    bad |= obj_set(o, "mixed_precision", json_boolean(lh_kv_cache_mixed(kv)));
    bad |= obj_set(o, "layout", json_string(kv_layout_names[kv->layout ? 1 : 0]));
    bad |= obj_set(o, "max_tokens", json_integer(kv->max_tokens));
    bad |= obj_set(o, "memory_fraction",
                   kv->memory_fraction > 0 ? json_real(kv->memory_fraction) : json_null());
    bad |= obj_set(o, "origin", origin_json(rc, kv->origin));
    json_t *origins = json_object();
    bad |= obj_set(origins, "block_size", origin_json(rc, kv->block_size_origin));
    bad |= obj_set(origins, "k_dtype", origin_json(rc, kv->k_dtype_origin));
    bad |= obj_set(origins, "v_dtype", origin_json(rc, kv->v_dtype_origin));
    bad |= obj_set(origins, "layout", origin_json(rc, kv->layout_origin));
    bad |= obj_set(origins, "max_tokens", origin_json(rc, kv->max_tokens_origin));
    bad |= obj_set(origins, "memory_fraction", origin_json(rc, kv->memory_fraction_origin));
    bad |= obj_set(o, "origins", origins);
    bad |= obj_set(j, "kv_cache", o);

    o = json_object();
    bad |= obj_set(o, "enabled", json_boolean(rc->sparse.enabled));
    bad |= obj_set(o, "algorithm",
                   rc->sparse.enabled ? json_string(sparse_algorithms[0]) : json_null());
    bad |= obj_set(o, "top_k", rc->sparse.enabled ? json_integer(rc->sparse.top_k) : json_null());
    bad |= obj_set(o, "local_blocks", json_integer(rc->sparse.local_blocks));
    bad |= obj_set(o, "origin", origin_json(rc, rc->sparse.origin));
    bad |= obj_set(j, "sparse_attention", o);

    o = json_object();
    bad |= obj_set(o, "value", json_integer(rc->beam_width));
    bad |= obj_set(o, "origin", origin_json(rc, rc->beam_width_origin));
    bad |= obj_set(j, "beam_width", o);

    o = json_object();
    bad |= obj_set(o, "mode", rc->speculative.mode ? json_string(rc->speculative.mode)
                                                   : json_null());
    bad |= obj_set(o, "num_tokens", rc->speculative.mode
                                        ? json_integer(rc->speculative.num_tokens)
                                        : json_null());
    bad |= obj_set(o, "origin", origin_json(rc, rc->speculative.origin));
    bad |= obj_set(j, "speculative", o);

    o = json_object();
    bad |= obj_set(o, "value", json_boolean(rc->fused_rope)); /* requested; the backend decides */
    bad |= obj_set(o, "origin", origin_json(rc, rc->fused_rope_origin));
    bad |= obj_set(j, "fused_rope", o);

    char dev[48];
    o = json_object();
    bad |= obj_set(o, "value", json_string(lh_run_device_str(rc, dev, sizeof dev)));
    bad |= obj_set(o, "origin", origin_json(rc, rc->device_origin));
    bad |= obj_set(j, "device", o);

    o = json_object();
    bad |= obj_set(o, "value", json_boolean(rc->cuda_graphs)); /* requested; CUDA only */
    bad |= obj_set(o, "origin", origin_json(rc, rc->cuda_graphs_origin));
    bad |= obj_set(j, "cuda_graphs", o);

    o = json_object();
    bad |= obj_set(o, "value", rc->attn_backend ? json_string(rc->attn_backend) : json_null());
    bad |= obj_set(o, "origin", origin_json(rc, rc->attn_backend_origin));
    bad |= obj_set(o, "fallback", json_boolean(rc->attn_backend_fallback));
    bad |= obj_set(j, "attn_backend", o);
    o = json_object();
    bad |= obj_set(o, "value", json_string(lh_weight_placement_name(rc->weight_placement)));
    bad |= obj_set(o, "origin", origin_json(rc, rc->weight_placement_origin));
    bad |= obj_set(j, "weight_placement", o);
    json_t *q = json_object();
    bad |= obj_set(q, "scheme", json_string(lh_quant_scheme_name(rc->quant.scheme)));
    bad |= obj_set(q, "group_size", json_integer(rc->quant.group_size));
    bad |= obj_set(q, "origin", origin_json(rc, rc->quant.origin));
    json_t *rules = json_array();
    for (size_t i = 0; rules && i < rc->quant.n_rules; i++) {
        const lh_quant_rule *r = &rc->quant.rules[i];
        json_t *jr = json_object();
        bad |= obj_set(jr, "pattern", json_string(r->pattern ? r->pattern : ""));
        bad |= obj_set(jr, "scheme", json_string(lh_quant_scheme_name(r->scheme)));
        bad |= obj_set(jr, "group_size", json_integer(r->group_size));
        bad |= obj_set(jr, "origin", origin_json(rc, r->origin));
        bad |= jr ? json_array_append_new(rules, jr) : -1;
    }
    bad |= obj_set(q, "rules", rules);
    json_t *ex = json_array();
    for (size_t i = 0; ex && i < rc->quant.n_exclude; i++) {
        json_t *s = json_string(rc->quant.exclude_modules[i] ? rc->quant.exclude_modules[i] : "");
        bad |= s ? json_array_append_new(ex, s) : -1;
    }
    bad |= obj_set(q, "exclude_modules", ex);
    bad |= obj_set(j, "quant", q);
    if (bad) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* ------------------------------------------------------------------------------------------ */
/* YAML → rc */

typedef struct rc_ctx {
    lh_run_config *rc;
    const char *src;
    lh_err *err;
} rc_ctx;

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

static lh_status check_keys(rc_ctx *c, const lh_ynode *map, const char *where,
                            const char *const *known, size_t n)
{
    for (size_t i = 0; i < map->n; i++) {
        const lh_ynode *k = map->keys[i];
        bool ok = false;
        for (size_t j = 0; j < n && !ok; j++)
            ok = strcmp(k->value, known[j]) == 0;
        if (ok)
            continue;
        char list[512], hint[160] = "";
        join_names(known, n, list, sizeof list);
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

/* A plain (unquoted) scalar that `parse` accepts; `expected` names what it takes. */
static lh_status y_plain(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected,
                         bool (*parse)(const char *v, void *out, char *why, size_t n), void *out)
{
    lh_status st = need_scalar(c, n, path, expected);
    if (st)
        return st;
    char why[512];
    if (!n->plain) {
        snprintf(why, sizeof why, "expected %s, got the quoted string \"%.200s\"", expected,
                 n->value);
        return yerr(c, n, path, why);
    }
    if (!parse(n->value, out, why, sizeof why))
        return yerr(c, n, path, why);
    return LH_OK;
}

static bool parse_bool_any(const char *v, void *out, char *why, size_t n)
{
    return parse_bool_text(v, out, why, n);
}

static lh_status y_bool(rc_ctx *c, const lh_ynode *n, const char *path, bool *out)
{
    return y_plain(c, n, path, "a boolean (true/false)", parse_bool_any, out);
}

static lh_status y_pos_int(rc_ctx *c, const lh_ynode *n, const char *path, int64_t *out)
{
    const char *expected = "a positive integer";
    lh_status st = need_scalar(c, n, path, expected);
    if (st)
        return st;
    char why[512];
    if (!n->plain) {
        snprintf(why, sizeof why, "expected %s, got the quoted string \"%.200s\"", expected,
                 n->value);
        return yerr(c, n, path, why);
    }
    if (!parse_pos_int_text(n->value, out, why, sizeof why))
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
    join_names(names, count, list, sizeof list);
    snprintf(expected, sizeof expected, "one of %s", list);
    lh_status st = need_scalar(c, n, path, expected);
    if (st)
        return st;
    char why[512];
    if (!parse_enum_text(n->value, names, count, out, why, sizeof why))
        return yerr(c, n, path, why);
    return LH_OK;
}

/* Mapping or null (null: empty). */
static lh_status y_mapping(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected,
                           bool *empty)
{
    *empty = n->kind == LH_YNODE_SCALAR && n->is_null;
    if (*empty || n->kind == LH_YNODE_MAPPING)
        return LH_OK;
    char why[512];
    if (n->kind == LH_YNODE_SCALAR)
        snprintf(why, sizeof why, "expected %s, got the scalar '%.200s'", expected, n->value);
    else
        snprintf(why, sizeof why, "expected %s, got %s", expected, lh_ynode_kind_name(n));
    return yerr(c, n, path, why);
}

static lh_status y_sequence(rc_ctx *c, const lh_ynode *n, const char *path, const char *expected,
                            bool *empty)
{
    *empty = n->kind == LH_YNODE_SCALAR && n->is_null;
    if (*empty || n->kind == LH_YNODE_SEQUENCE)
        return LH_OK;
    char why[512];
    if (n->kind == LH_YNODE_SCALAR)
        snprintf(why, sizeof why, "expected %s, got the scalar '%.200s'", expected, n->value);
    else
        snprintf(why, sizeof why, "expected %s, got %s", expected, lh_ynode_kind_name(n));
    return yerr(c, n, path, why);
}

static bool parse_fraction_any(const char *v, void *out, char *why, size_t n)
{
    return parse_fraction_text(v, out, why, n);
}

/* A plain (unquoted) decimal number in (0, 1]. */
static lh_status y_fraction(rc_ctx *c, const lh_ynode *n, const char *path, double *out)
{
    return y_plain(c, n, path, "a number in (0, 1]", parse_fraction_any, out);
}

static lh_status y_kv_dtype(rc_ctx *c, const lh_ynode *n, const char *path, lh_dtype *out)
{
    int e;
    lh_status st = y_enum(c, n, path, kv_dtype_names, N_OF(kv_dtype_names), &e);
    if (st == LH_OK)
        *out = kv_dtype_values[e];
    return st;
}

/* The kv_cache mapping is committed as a whole: on error rc->kv_cache is unchanged. dtype sets
 * both tensors; k_dtype / v_dtype, wherever they stand in the mapping, win for theirs. */
static lh_status y_kv_cache(rc_ctx *c, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, "kv_cache",
                             "a mapping {block_size, dtype, k_dtype, v_dtype, layout, "
                             "max_tokens, memory_fraction}",
                             &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, "kv_cache", kv_keys, N_OF(kv_keys))))
        return st;
    lh_kv_cache_config kv = c->rc->kv_cache;
    const lh_ynode *v;
    if ((v = lh_ynode_get(n, "block_size"))) {
        if ((st = y_pos_int(c, v, "kv_cache.block_size", &kv.block_size)))
            return st;
        kv.block_size_origin = yorigin(v);
    }
    if ((v = lh_ynode_get(n, "max_tokens"))) {
        if ((st = y_pos_int(c, v, "kv_cache.max_tokens", &kv.max_tokens)))
            return st;
        kv.max_tokens_origin = yorigin(v);
    }
    if ((v = lh_ynode_get(n, "memory_fraction"))) {
        if ((st = y_fraction(c, v, "kv_cache.memory_fraction", &kv.memory_fraction)))
            return st;
        kv.memory_fraction_origin = yorigin(v);
    }
    if ((v = lh_ynode_get(n, "dtype"))) {
        if ((st = y_kv_dtype(c, v, "kv_cache.dtype", &kv.k_dtype)))
            return st;
        kv.v_dtype = kv.k_dtype;
        kv.k_dtype_origin = kv.v_dtype_origin = yorigin(v);
    }
    if ((v = lh_ynode_get(n, "k_dtype"))) {
        if ((st = y_kv_dtype(c, v, "kv_cache.k_dtype", &kv.k_dtype)))
            return st;
        kv.k_dtype_origin = yorigin(v);
    }
    if ((v = lh_ynode_get(n, "v_dtype"))) {
        if ((st = y_kv_dtype(c, v, "kv_cache.v_dtype", &kv.v_dtype)))
            return st;
        kv.v_dtype_origin = yorigin(v);
    }
    if ((v = lh_ynode_get(n, "layout"))) {
        int e;
        if ((st = y_enum(c, v, "kv_cache.layout", kv_layout_names, N_OF(kv_layout_names), &e)))
            return st;
        kv.layout = e;
        kv.layout_origin = yorigin(v);
    }
    kv.origin = yorigin(n);
    c->rc->kv_cache = kv;
    return LH_OK;
}

/* Committed as a whole; a null section leaves what was there. */
static lh_status y_sparse(rc_ctx *c, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, "sparse_attention",
                             "a mapping {algorithm: topk_blocks, top_k: N, local_blocks: N}",
                             &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, "sparse_attention", sparse_keys, N_OF(sparse_keys))))
        return st;
    const lh_ynode *an = lh_ynode_get(n, "algorithm");
    const lh_ynode *kn = lh_ynode_get(n, "top_k");
    const lh_ynode *ln = lh_ynode_get(n, "local_blocks");
    if (!an)
        return yerr(c, n, "sparse_attention",
                    "missing required key 'algorithm' (the only one is topk_blocks)");
    if (!kn)
        return yerr(c, n, "sparse_attention",
                    "missing required key 'top_k' (KV blocks selected per query, >= 1)");
    int alg;
    if ((st = y_enum(c, an, "sparse_attention.algorithm", sparse_algorithms,
                     N_OF(sparse_algorithms), &alg)))
        return st;
    lh_sparse_config sp = {.enabled = true, .local_blocks = 1, .origin = yorigin(n)};
    if ((st = y_pos_int(c, kn, "sparse_attention.top_k", &sp.top_k)))
        return st;
    if (ln && (st = y_pos_int(c, ln, "sparse_attention.local_blocks", &sp.local_blocks)))
        return st;
    c->rc->sparse = sp;
    return LH_OK;
}

/* Committed as a whole; a null section leaves what was there. */
static lh_status y_speculative(rc_ctx *c, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, "speculative", "a mapping {mode: NAME, num_tokens: N}",
                             &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, "speculative", spec_keys, N_OF(spec_keys))))
        return st;
    const lh_ynode *mn = lh_ynode_get(n, "mode");
    const lh_ynode *kn = lh_ynode_get(n, "num_tokens");
    if (!mn)
        return yerr(c, n, "speculative",
                    "missing required key 'mode' (e.g. eagle3, mtp, draft_model)");
    if (!kn)
        return yerr(c, n, "speculative",
                    "missing required key 'num_tokens' (tokens drafted per step, >= 1)");
    const char *mode = NULL;
    if ((st = y_string(c, mn, "speculative.mode",
                       "a speculative decoding mode (e.g. eagle3, mtp, draft_model)", &mode)))
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

static lh_status y_model_impl(rc_ctx *c, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, "model_impl", "a mapping {target: NAME, mode: off|auto|require}",
                             &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, "model_impl", impl_keys, N_OF(impl_keys))))
        return st;
    const lh_ynode *tn = lh_ynode_get(n, "target");
    const lh_ynode *mn = lh_ynode_get(n, "mode");
    const char *target = NULL;
    int mode = -1;
    if (tn && (st = y_string(c, tn, "model_impl.target", "a target implementation name",
                             &target)))
        return st;
    if (mn && (st = y_enum(c, mn, "model_impl.mode", mode_names, N_OF(mode_names), &mode)))
        return st;
    if (!tn && !mn)
        return LH_OK;
    if (mode < 0)
        mode = LH_IMPL_AUTO; /* target given without a mode */
    if (mode != LH_IMPL_OFF && !target && !c->rc->model_impl_target) {
        char why[256];
        snprintf(why, sizeof why, "mode '%s' needs model_impl.target (none given)",
                 mode_names[mode]);
        return yerr(c, mn, "model_impl.mode", why);
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

static lh_status y_device(rc_ctx *c, const lh_ynode *n)
{
    lh_status st = need_scalar(c, n, "device", "one of " DEVICE_FORMS);
    if (st)
        return st;
    char why[512];
    bool is_auto;
    lh_device d;
    if (!parse_device_text(n->value, &is_auto, &d, why, sizeof why))
        return yerr(c, n, "device", why);
    c->rc->device = d;
    c->rc->device_auto = is_auto;
    c->rc->device_origin = yorigin(n);
    return LH_OK;
}

static lh_status y_dtype(rc_ctx *c, const lh_ynode *n)
{
    lh_status st = need_scalar(c, n, "dtype", "one of auto, float32, bfloat16, float16");
    if (st)
        return st;
    char why[512];
    lh_dtype dt;
    if (!parse_dtype_text(n->value, &dt, why, sizeof why))
        return yerr(c, n, "dtype", why);
    c->rc->dtype = dt;
    c->rc->dtype_origin = yorigin(n);
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
        if ((st = check_keys(c, r, path, rule_keys, N_OF(rule_keys))))
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
        if ((st = y_string(c, pn, sub, "a non-empty glob pattern", &pattern)))
            goto fail;
        int scheme;
        snprintf(sub, sizeof sub, "%s.scheme", path);
        if ((st = y_enum(c, sn, sub, scheme_names, N_OF(scheme_names), &scheme)))
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
    free_rules(rules, count);
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
    free_strings(ex, count);
    return st;
}

/* The quant mapping is committed as a whole: on error rc->quant is unchanged. */
static lh_status y_quant(rc_ctx *c, const lh_ynode *n)
{
    bool empty;
    lh_status st = y_mapping(c, n, "quant",
                             "a mapping {scheme, group_size, rules, exclude_modules}", &empty);
    if (st || empty)
        return st;
    if ((st = check_keys(c, n, "quant", quant_keys, N_OF(quant_keys))))
        return st;
    lh_quant_config *q = &c->rc->quant;
    const lh_ynode *sn = lh_ynode_get(n, "scheme");
    const lh_ynode *gn = lh_ynode_get(n, "group_size");
    const lh_ynode *rn = lh_ynode_get(n, "rules");
    const lh_ynode *en = lh_ynode_get(n, "exclude_modules");

    int scheme = (int)q->scheme;
    int64_t group = q->group_size;
    if (sn && (st = y_enum(c, sn, "quant.scheme", scheme_names, N_OF(scheme_names), &scheme)))
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
        free_rules(rules, n_rules);
        return st;
    }
    q->scheme = (lh_quant_scheme)scheme;
    q->group_size = group;
    if (rn) {
        free_rules(q->rules, q->n_rules);
        q->rules = rules;
        q->n_rules = n_rules;
    }
    if (en) {
        free_strings(q->exclude_modules, q->n_exclude);
        q->exclude_modules = ex;
        q->n_exclude = n_ex;
    }
    q->origin = yorigin(sn ? sn : gn ? gn : n);
    return LH_OK;
}

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
    lh_status st = check_keys(c, root, NULL, root_keys, N_OF(root_keys));
    if (st)
        return st;
    lh_run_config *rc = c->rc;
    for (size_t i = 0; i < root->n; i++) {
        const char *k = root->keys[i]->value;
        const lh_ynode *v = root->items[i];
        if (strcmp(k, "mm_encoder_only") == 0) {
            if ((st = y_bool(c, v, k, &rc->mm_encoder_only)))
                return st;
            rc->mm_encoder_only_origin = yorigin(v);
        } else if (strcmp(k, "model_impl") == 0) {
            if ((st = y_model_impl(c, v)))
                return st;
        } else if (strcmp(k, "dtype") == 0) {
            if ((st = y_dtype(c, v)))
                return st;
        } else if (strcmp(k, "max_seq_len") == 0) {
            if ((st = y_pos_int(c, v, k, &rc->max_seq_len)))
                return st;
            rc->max_seq_len_origin = yorigin(v);
        } else if (strcmp(k, "max_batch_size") == 0) {
            if ((st = y_pos_int(c, v, k, &rc->max_batch_size)))
                return st;
            rc->max_batch_size_origin = yorigin(v);
        } else if (strcmp(k, "quant") == 0) {
            if ((st = y_quant(c, v)))
                return st;
        } else if (strcmp(k, "kv_cache") == 0) {
            if ((st = y_kv_cache(c, v)))
                return st;
        } else if (strcmp(k, "attn_backend") == 0) {
            const char *name = NULL;
            if ((st = y_string(c, v, k, "an attention backend name", &name)))
                return st;
            if ((st = set_backend_name(rc, name, c->err)))
                return st;
            rc->attn_backend_origin = yorigin(v);
        } else if (strcmp(k, "attn_backend_fallback") == 0) {
            if ((st = y_bool(c, v, k, &rc->attn_backend_fallback)))
                return st;
            rc->attn_backend_fallback_origin = yorigin(v);
        } else if (strcmp(k, "weight_placement") == 0) {
            int p;
            if ((st = y_enum(c, v, k, placement_names, N_OF(placement_names), &p)))
                return st;
            rc->weight_placement = (lh_weight_placement)p;
            rc->weight_placement_origin = yorigin(v);
        } else if (strcmp(k, "sparse_attention") == 0) {
            if ((st = y_sparse(c, v)))
                return st;
        } else if (strcmp(k, "beam_width") == 0) {
            if ((st = y_pos_int(c, v, k, &rc->beam_width)))
                return st;
            rc->beam_width_origin = yorigin(v);
        } else if (strcmp(k, "speculative") == 0) {
            if ((st = y_speculative(c, v)))
                return st;
        } else if (strcmp(k, "fused_rope") == 0) {
            if ((st = y_bool(c, v, k, &rc->fused_rope)))
                return st;
            rc->fused_rope_origin = yorigin(v);
        } else if (strcmp(k, "device") == 0) {
            if ((st = y_device(c, v)))
                return st;
        } else if (strcmp(k, "cuda_graphs") == 0) {
            if ((st = y_bool(c, v, k, &rc->cuda_graphs)))
                return st;
            rc->cuda_graphs_origin = yorigin(v);
        }
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

/* ------------------------------------------------------------------------------------------ */
/* CLI overrides */

/* kv_cache.SUB=VALUE; sub is one of the kv_cache.* names in flag_keys. */
static lh_status set_kv_flag(lh_kv_cache_config *kv, const char *sub, const char *flag,
                             const char *value, lh_err *err)
{
    const lh_value_origin fo = {.kind = LH_ORIGIN_FLAG};
    char why[512];
    int e;
    if (strcmp(sub, "dtype") == 0 || strcmp(sub, "k_dtype") == 0 ||
        strcmp(sub, "v_dtype") == 0) {
        if (!parse_enum_text(value, kv_dtype_names, N_OF(kv_dtype_names), &e, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        if (sub[0] != 'v') {
            kv->k_dtype = kv_dtype_values[e];
            kv->k_dtype_origin = fo;
        }
        if (sub[0] != 'k') {
            kv->v_dtype = kv_dtype_values[e];
            kv->v_dtype_origin = fo;
        }
    } else if (strcmp(sub, "layout") == 0) {
        if (!parse_enum_text(value, kv_layout_names, N_OF(kv_layout_names), &e, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        kv->layout = e;
        kv->layout_origin = fo;
    } else if (strcmp(sub, "memory_fraction") == 0) {
        double f = 0.0;
        if (strcasecmp(value, "auto") != 0 && !parse_fraction_text(value, &f, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s (or auto: unset)", flag, why);
        kv->memory_fraction = f;
        kv->memory_fraction_origin = fo;
    } else if (strcmp(sub, "max_tokens") == 0) {
        int64_t x = 0;
        if (strcasecmp(value, "auto") != 0 && !parse_pos_int_text(value, &x, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s (or auto: unset)", flag, why);
        kv->max_tokens = x;
        kv->max_tokens_origin = fo;
    } else { /* block_size */
        int64_t x;
        if (!parse_pos_int_text(value, &x, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        kv->block_size = x;
        kv->block_size_origin = fo;
    }
    kv->origin = fo;
    return LH_OK;
}

lh_status lh_run_config_set(lh_run_config *rc, const char *key_eq_value, lh_err *err)
{
    if (!rc || !key_eq_value)
        return lh_err_set(err, LH_E_USAGE, "lh_run_config_set: %s is NULL",
                          rc ? "key_eq_value" : "rc");
    const char *eq = strchr(key_eq_value, '=');
    if (!eq || eq == key_eq_value)
        return lh_err_set(err, LH_E_USAGE,
                          "run-config override '%s' must have the form KEY=VALUE", key_eq_value);
    char flag[96], key[96];
    size_t klen = (size_t)(eq - key_eq_value);
    if (klen >= sizeof key)
        klen = sizeof key - 1;
    memcpy(flag, key_eq_value, klen);
    flag[klen] = '\0';
    for (size_t i = 0; i <= klen; i++)
        key[i] = flag[i] == '-' ? '_' : flag[i];
    const char *value = eq + 1;

    int which = find_name(key, flag_keys, N_OF(flag_keys));
    if (which < 0 || strcmp(key, flag_keys[which]) != 0) {
        char list[512], hint[160] = "";
        join_names(flag_keys, N_OF(flag_keys), list, sizeof list);
        const char *near = lh_nearest(key, flag_keys, N_OF(flag_keys));
        if (near)
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
        return lh_err_set(err, LH_E_USAGE, "--%s: unknown run-config key '%s'%s; settable keys: %s",
                          flag, flag, hint, list);
    }
    if (!*value)
        return lh_err_set(err, LH_E_USAGE, "--%s: no value given", flag);

    const lh_value_origin fo = {.kind = LH_ORIGIN_FLAG};
    char why[512];
    if (strcmp(key, "mm_encoder_only") == 0) {
        bool b;
        if (strcmp(value, "1") == 0 || strcmp(value, "0") == 0)
            b = value[0] == '1';
        else if (!parse_bool_text(value, &b, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->mm_encoder_only = b;
        rc->mm_encoder_only_origin = fo;
    } else if (strcmp(key, "dtype") == 0) {
        lh_dtype dt;
        if (!parse_dtype_text(value, &dt, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->dtype = dt;
        rc->dtype_origin = fo;
    } else if (strcmp(key, "max_seq_len") == 0 || strcmp(key, "max_batch_size") == 0) {
        int64_t x;
        if (!parse_pos_int_text(value, &x, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        if (strcmp(key, "max_seq_len") == 0) {
            rc->max_seq_len = x;
            rc->max_seq_len_origin = fo;
        } else {
            rc->max_batch_size = x;
            rc->max_batch_size_origin = fo;
        }
    } else if (strcmp(key, "model_impl") == 0) {
        if (strcasecmp(value, "off") == 0) {
            rc->model_impl_mode = LH_IMPL_OFF;
            rc->model_impl_origin = fo;
            return LH_OK;
        }
        const char *colon = strrchr(value, ':');
        int mode = LH_IMPL_AUTO;
        size_t tlen = strlen(value);
        if (colon) {
            tlen = (size_t)(colon - value);
            if (!parse_enum_text(colon + 1, mode_names, N_OF(mode_names), &mode, why,
                                 sizeof why))
                return lh_err_set(err, LH_E_USAGE,
                                  "--%s: mode %s (expected TARGET, TARGET:auto, TARGET:require "
                                  "or off)",
                                  flag, why);
        }
        if (tlen == 0)
            return lh_err_set(err, LH_E_USAGE,
                              "--%s: '%s' names no target (expected TARGET, TARGET:auto, "
                              "TARGET:require or off)",
                              flag, value);
        char *t = strndup(value, tlen);
        if (!t)
            return lh_err_set(err, LH_E_NOMEM, "--%s: out of memory", flag);
        free(rc->model_impl_target);
        rc->model_impl_target = t;
        rc->model_impl_mode = (lh_impl_mode)mode;
        rc->model_impl_origin = fo;
    } else if (strcmp(key, "attn_backend") == 0) {
        lh_status st = set_backend_name(rc, value, err);
        if (st)
            return st;
        rc->attn_backend_origin = fo;
    } else if (strcmp(key, "attn_backend_fallback") == 0) {
        bool b;
        if (strcmp(value, "1") == 0 || strcmp(value, "0") == 0)
            b = value[0] == '1';
        else if (!parse_bool_text(value, &b, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->attn_backend_fallback = b;
        rc->attn_backend_fallback_origin = fo;
    } else if (strcmp(key, "weight_placement") == 0) {
        int p;
        if (!parse_enum_text(value, placement_names, N_OF(placement_names), &p, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->weight_placement = (lh_weight_placement)p;
        rc->weight_placement_origin = fo;
    } else if (strcmp(key, "beam_width") == 0) {
        int64_t x;
        if (!parse_pos_int_text(value, &x, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->beam_width = x;
        rc->beam_width_origin = fo;
    } else if (strcmp(key, "fused_rope") == 0) {
        bool b;
        if (strcmp(value, "1") == 0 || strcmp(value, "0") == 0)
            b = value[0] == '1';
        else if (!parse_bool_text(value, &b, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->fused_rope = b;
        rc->fused_rope_origin = fo;
    } else if (strcmp(key, "cuda_graphs") == 0) {
        bool b;
        if (strcmp(value, "1") == 0 || strcmp(value, "0") == 0)
            b = value[0] == '1';
        else if (!parse_bool_text(value, &b, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->cuda_graphs = b;
        rc->cuda_graphs_origin = fo;
    } else if (strcmp(key, "device") == 0) {
        bool is_auto;
        lh_device d;
        if (!parse_device_text(value, &is_auto, &d, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->device = d;
        rc->device_auto = is_auto;
        rc->device_origin = fo;
    } else if (strncmp(key, "kv_cache.", 9) == 0) {
        return set_kv_flag(&rc->kv_cache, key + 9, flag, value, err);
    } else { /* quant */
        int scheme;
        if (!parse_enum_text(value, scheme_names, N_OF(scheme_names), &scheme, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
        rc->quant.scheme = (lh_quant_scheme)scheme;
        rc->quant.origin = fo;
    }
    return LH_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* The validator: one function per cross-key rule; add new rules to `rules` below. */

typedef lh_status (*rc_rule_fn)(const lh_run_config *rc, lh_err *err);

#define ORIGIN(rc, o) lh_value_origin_str((rc), (o), obuf, sizeof obuf)

static lh_status rule_model_impl(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if ((unsigned)rc->model_impl_mode > LH_IMPL_REQUIRE)
        return lh_err_set(err, LH_E_CONFIG, "model_impl.mode=%d (from %s) is not one of off, "
                          "auto, require", (int)rc->model_impl_mode,
                          ORIGIN(rc, rc->model_impl_origin));
    /* mode off with a target is fine: the target is ignored. */
    if (rc->model_impl_mode != LH_IMPL_OFF &&
        (!rc->model_impl_target || !*rc->model_impl_target))
        return lh_err_set(err, LH_E_CONFIG, "model_impl.mode=%s (from %s) needs model_impl.target",
                          mode_name(rc->model_impl_mode), ORIGIN(rc, rc->model_impl_origin));
    return LH_OK;
}

static lh_status rule_dtype(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if (rc->dtype != LH_DTYPE_INVALID && rc->dtype != LH_DTYPE_F32 &&
        rc->dtype != LH_DTYPE_BF16 && rc->dtype != LH_DTYPE_F16)
        return lh_err_set(err, LH_E_CONFIG,
                          "dtype=%s (from %s) is not a weight dtype (auto, float32, bfloat16, "
                          "float16); use quant for quantized weights",
                          lh_dtype_name(rc->dtype), ORIGIN(rc, rc->dtype_origin));
    return LH_OK;
}

static lh_status rule_sizes(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024], obuf2[1024];
    if (rc->max_seq_len < 0)
        return lh_err_set(err, LH_E_CONFIG, "max_seq_len=%lld (from %s) must be > 0",
                          (long long)rc->max_seq_len, ORIGIN(rc, rc->max_seq_len_origin));
    /* positions travel as int32 (lh_attention.h) */
    if (rc->max_seq_len > INT32_MAX)
        return lh_err_set(err, LH_E_CONFIG, "max_seq_len=%lld (from %s) must be at most %d",
                          (long long)rc->max_seq_len, ORIGIN(rc, rc->max_seq_len_origin),
                          INT32_MAX);
    if (rc->max_batch_size <= 0)
        return lh_err_set(err, LH_E_CONFIG, "max_batch_size=%lld (from %s) must be > 0",
                          (long long)rc->max_batch_size, ORIGIN(rc, rc->max_batch_size_origin));
    int64_t tokens;
    if (__builtin_mul_overflow(rc->max_seq_len, rc->max_batch_size, &tokens))
        return lh_err_set(err, LH_E_CONFIG,
                          "max_seq_len=%lld (from %s) * max_batch_size=%lld (from %s) overflows "
                          "a 64-bit token count",
                          (long long)rc->max_seq_len, ORIGIN(rc, rc->max_seq_len_origin),
                          (long long)rc->max_batch_size,
                          lh_value_origin_str(rc, rc->max_batch_size_origin, obuf2,
                                              sizeof obuf2));
    return LH_OK;
}

static lh_status check_group(const lh_run_config *rc, const char *what, int64_t group,
                             lh_value_origin o, lh_err *err)
{
    char obuf[1024];
    if (group <= 0 || group % 2 != 0)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s=%lld (from %s) must be a positive even number for int4 (two 4-bit "
                          "values share a byte)",
                          what, (long long)group, ORIGIN(rc, o));
    return LH_OK;
}

static lh_status rule_quant(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    const lh_quant_config *q = &rc->quant;
    if ((unsigned)q->scheme > LH_QUANT_INT4)
        return lh_err_set(err, LH_E_CONFIG, "quant.scheme=%d (from %s) is not one of none, fp8, "
                          "int8, int4", (int)q->scheme, ORIGIN(rc, q->origin));
    lh_status st;
    if (q->scheme == LH_QUANT_INT4 &&
        (st = check_group(rc, "quant.group_size", q->group_size, q->origin, err)))
        return st;
    for (size_t i = 0; i < q->n_rules; i++) {
        const lh_quant_rule *r = &q->rules[i];
        char what[64];
        if (!r->pattern || !*r->pattern)
            return lh_err_set(err, LH_E_CONFIG, "quant.rules[%zu].pattern (from %s) is empty",
                              i, ORIGIN(rc, r->origin));
        if ((unsigned)r->scheme > LH_QUANT_INT4)
            return lh_err_set(err, LH_E_CONFIG,
                              "quant.rules[%zu].scheme=%d (from %s) is not one of none, fp8, "
                              "int8, int4", i, (int)r->scheme, ORIGIN(rc, r->origin));
        /* a rule whose scheme is none is fine: it keeps the matched layers unquantized */
        snprintf(what, sizeof what, "quant.rules[%zu].group_size", i);
        if (r->scheme == LH_QUANT_INT4 && (st = check_group(rc, what, r->group_size, r->origin,
                                                            err)))
            return st;
    }
    for (size_t i = 0; i < q->n_exclude; i++)
        if (!q->exclude_modules[i] || !*q->exclude_modules[i])
            return lh_err_set(err, LH_E_CONFIG,
                              "quant.exclude_modules[%zu] (from %s) is an empty pattern", i,
                              ORIGIN(rc, q->origin));
    return LH_OK;
}

static bool kv_dtype_valid(lh_dtype dt)
{
    for (size_t i = 0; i < N_OF(kv_dtype_values); i++)
        if (dt == kv_dtype_values[i])
            return true;
    return false;
}

static lh_status rule_kv_cache(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024], obuf2[1024];
    const lh_kv_cache_config *kv = &rc->kv_cache;
    if (kv->block_size <= 0)
        return lh_err_set(err, LH_E_CONFIG, "kv_cache.block_size=%lld (from %s) must be > 0",
                          (long long)kv->block_size, ORIGIN(rc, kv->block_size_origin));
    if (kv->layout != 0 && kv->layout != 1)
        return lh_err_set(err, LH_E_CONFIG,
                          "kv_cache.layout=%d (from %s) is not 0 (NHD) or 1 (HND)", kv->layout,
                          ORIGIN(rc, kv->layout_origin));
    const struct {
        const char *key;
        lh_dtype dt;
        lh_value_origin o;
    } dts[] = {{"k_dtype", kv->k_dtype, kv->k_dtype_origin},
               {"v_dtype", kv->v_dtype, kv->v_dtype_origin}};
    for (size_t i = 0; i < N_OF(dts); i++)
        if (!kv_dtype_valid(dts[i].dt))
            return lh_err_set(err, LH_E_CONFIG,
                              "kv_cache.%s=%s (from %s) is not a KV cache dtype (auto, float32, "
                              "bfloat16, float16, fp8)",
                              dts[i].key, lh_dtype_name(dts[i].dt), ORIGIN(rc, dts[i].o));
    if (kv->max_tokens < 0)
        return lh_err_set(err, LH_E_CONFIG, "kv_cache.max_tokens=%lld (from %s) must be > 0",
                          (long long)kv->max_tokens, ORIGIN(rc, kv->max_tokens_origin));
    /* 0 is unset; the negation also refuses NaN */
    if (!(kv->memory_fraction >= 0.0 && kv->memory_fraction <= 1.0))
        return lh_err_set(err, LH_E_CONFIG,
                          "kv_cache.memory_fraction=%g (from %s) must be in (0, 1]",
                          kv->memory_fraction, ORIGIN(rc, kv->memory_fraction_origin));
    if (kv->max_tokens > 0 && kv->memory_fraction > 0.0)
        return lh_err_set(err, LH_E_CONFIG,
                          "kv_cache.max_tokens=%lld (from %s) and kv_cache.memory_fraction=%g "
                          "(from %s) are mutually exclusive: both size the KV pool; give one",
                          (long long)kv->max_tokens, ORIGIN(rc, kv->max_tokens_origin),
                          kv->memory_fraction,
                          lh_value_origin_str(rc, kv->memory_fraction_origin, obuf2,
                                              sizeof obuf2));
    return LH_OK;
}

/* beam_width, sparse_attention and speculative, each on its own (API users can build any
 * struct). */
static lh_status rule_decoding(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if (rc->beam_width < 1)
        return lh_err_set(err, LH_E_CONFIG, "beam_width=%lld (from %s) must be >= 1",
                          (long long)rc->beam_width, ORIGIN(rc, rc->beam_width_origin));
    const lh_sparse_config *sp = &rc->sparse;
    if (sp->enabled && sp->top_k < 1)
        return lh_err_set(err, LH_E_CONFIG, "sparse_attention.top_k=%lld (from %s) must be >= 1",
                          (long long)sp->top_k, ORIGIN(rc, sp->origin));
    if (sp->enabled && sp->local_blocks < 1)
        return lh_err_set(err, LH_E_CONFIG,
                          "sparse_attention.local_blocks=%lld (from %s) must be >= 1",
                          (long long)sp->local_blocks, ORIGIN(rc, sp->origin));
    const lh_speculative_config *sd = &rc->speculative;
    if (sd->mode && !*sd->mode)
        return lh_err_set(err, LH_E_CONFIG,
                          "speculative.mode (from %s) is empty; name a mode (e.g. eagle3, mtp, "
                          "draft_model) or leave speculative out",
                          ORIGIN(rc, sd->origin));
    if (sd->mode && sd->num_tokens < 1)
        return lh_err_set(err, LH_E_CONFIG, "speculative.num_tokens=%lld (from %s) must be >= 1",
                          (long long)sd->num_tokens, ORIGIN(rc, sd->origin));
    return LH_OK;
}

/* "from X" when keys and values got their dtypes from the same place, else both places. */
static const char *kv_dtypes_from(const lh_run_config *rc, char *buf, size_t n)
{
    char k[1024], v[1024];
    lh_value_origin_str(rc, rc->kv_cache.k_dtype_origin, k, sizeof k);
    lh_value_origin_str(rc, rc->kv_cache.v_dtype_origin, v, sizeof v);
    if (strcmp(k, v) == 0)
        snprintf(buf, n, "from %s", k);
    else
        snprintf(buf, n, "k_dtype from %s, v_dtype from %s", k, v);
    return buf;
}

/* DESIGN §9: mixed-precision KV needs no sparse attention, a single beam and no speculative
 * decoding (the backend capability is checked with the facts, below). */
static lh_status rule_mixed_kv(const lh_run_config *rc, lh_err *err)
{
    const lh_kv_cache_config *kv = &rc->kv_cache;
    if (!lh_kv_cache_mixed(kv))
        return LH_OK;
    char what[160], obuf[1024];
    const char *why = NULL;
    lh_value_origin o = {0};
    if (rc->sparse.enabled) {
        snprintf(what, sizeof what, "sparse_attention");
        o = rc->sparse.origin;
        why = "mixed-precision KV supports dense attention only";
    } else if (rc->beam_width > 1) {
        snprintf(what, sizeof what, "beam_width=%lld", (long long)rc->beam_width);
        o = rc->beam_width_origin;
        why = "mixed-precision KV supports a single beam only";
    } else if (rc->speculative.mode) {
        snprintf(what, sizeof what, "speculative.mode=%.100s", rc->speculative.mode);
        o = rc->speculative.origin;
        why = "mixed-precision KV does not support speculative decoding";
    }
    if (!why)
        return LH_OK;
    char from[2200];
    return lh_err_set(err, LH_E_CONFIG,
                      "kv_cache.k_dtype=%s / v_dtype=%s (mixed-precision KV, %s) cannot be "
                      "combined with %s (from %s): %s; give one kv_cache.dtype for keys and "
                      "values, or drop %s",
                      kv_dtype_str(kv->k_dtype), kv_dtype_str(kv->v_dtype),
                      kv_dtypes_from(rc, from, sizeof from), what, ORIGIN(rc, o), why,
                      rc->sparse.enabled ? "sparse_attention"
                      : rc->beam_width > 1 ? "beam_width"
                                           : "speculative");
}

/* Only what a struct filled by hand can get wrong: the parsers produce nothing else.
 * cuda_graphs with device cpu is no error: it is simply unused. */
static lh_status rule_device(const lh_run_config *rc, lh_err *err)
{
    char obuf[1024];
    if (rc->device_auto)
        return LH_OK;
    if (rc->device.kind != LH_DEVICE_CPU && rc->device.kind != LH_DEVICE_CUDA)
        return lh_err_set(err, LH_E_CONFIG, "device kind %d (from %s) is neither cpu nor cuda; "
                          "expected " DEVICE_FORMS, (int)rc->device.kind,
                          ORIGIN(rc, rc->device_origin));
    if (rc->device.kind == LH_DEVICE_CUDA && rc->device.index < 0)
        return lh_err_set(err, LH_E_CONFIG, "device cuda:%d (from %s): a CUDA device ordinal is "
                          ">= 0", rc->device.index, ORIGIN(rc, rc->device_origin));
    return LH_OK;
}

static const rc_rule_fn validation_rules[] = {
    rule_model_impl, rule_dtype, rule_sizes, rule_quant, rule_kv_cache, rule_decoding,
    rule_mixed_kv, rule_device,
};

/* ------------------------------------------------------------------------------------------ */
/* Capabilities the run needs of its attention backend: one table, read by the validator (to
 * refuse) and by explain (to show every check). */

/* Writes the reason; a text that does not fit ends in "...". */
__attribute__((format(printf, 3, 4))) static void because(char *buf, size_t n, const char *fmt,
                                                           ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (len >= 0 && (size_t)len >= n && n > 4)
        memcpy(buf + n - 4, "...", 4);
}

static const char *model_where(const char *model_path)
{
    return model_path ? model_path : "the model's config.json";
}

typedef bool (*need_fn)(const lh_run_config *rc, const lh_model_geometry *geo,
                        const char *model_path, char *why, size_t n);

static bool need_sliding_window(const lh_run_config *rc, const lh_model_geometry *geo,
                                const char *model_path, char *why, size_t n)
{
    (void)rc;
    if (!geo || geo->sliding_window <= 0)
        return false;
    because(why, n, "sliding_window=%lld in %s", (long long)geo->sliding_window,
            model_where(model_path));
    return true;
}

static bool need_chunked(const lh_run_config *rc, const lh_model_geometry *geo,
                         const char *model_path, char *why, size_t n)
{
    (void)rc;
    if (!geo || geo->attention_chunk_size <= 0)
        return false;
    because(why, n, "attention_chunk_size=%lld in %s", (long long)geo->attention_chunk_size,
            model_where(model_path));
    return true;
}

static bool need_mla(const lh_run_config *rc, const lh_model_geometry *geo,
                     const char *model_path, char *why, size_t n)
{
    (void)rc;
    if (!geo || !geo->has_mla)
        return false;
    because(why, n, "kv_lora_rank=%lld in %s (multi-head latent attention)",
            (long long)geo->kv_lora_rank, model_where(model_path));
    return true;
}

static bool need_fp8_kv(const lh_run_config *rc, const lh_model_geometry *geo,
                        const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    const lh_kv_cache_config *kv = &rc->kv_cache;
    bool k = kv->k_dtype == LH_DTYPE_FP8_E4M3, v = kv->v_dtype == LH_DTYPE_FP8_E4M3;
    if (!k && !v)
        return false;
    char from[2200];
    if (k && v)
        because(why, n, "kv_cache.k_dtype/v_dtype=%s (%s)", lh_dtype_name(kv->k_dtype),
                kv_dtypes_from(rc, from, sizeof from));
    else
        because(why, n, "kv_cache.%s=%s (from %s)", k ? "k_dtype" : "v_dtype",
                lh_dtype_name(LH_DTYPE_FP8_E4M3),
                lh_value_origin_str(rc, k ? kv->k_dtype_origin : kv->v_dtype_origin, from,
                                    sizeof from));
    return true;
}

static bool need_sparse(const lh_run_config *rc, const lh_model_geometry *geo,
                        const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    if (!rc->sparse.enabled)
        return false;
    char from[1024];
    because(why, n, "sparse_attention=%s, top_k=%lld (from %s)", sparse_algorithms[0],
            (long long)rc->sparse.top_k, lh_value_origin_str(rc, rc->sparse.origin, from,
                                                             sizeof from));
    return true;
}

static bool need_mixed_kv(const lh_run_config *rc, const lh_model_geometry *geo,
                          const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    if (!lh_kv_cache_mixed(&rc->kv_cache))
        return false;
    char from[2200];
    because(why, n, "kv_cache.k_dtype=%s / v_dtype=%s (%s)", kv_dtype_str(rc->kv_cache.k_dtype),
            kv_dtype_str(rc->kv_cache.v_dtype), kv_dtypes_from(rc, from, sizeof from));
    return true;
}

/* KV settings only the host's block pool honours: a backend with its own cache (vanilla:
 * contiguous f32) would ignore them, so they need LH_ATTN_CAP_PAGED_KV rather than being
 * dropped silently. */
static bool need_paged_kv(const lh_run_config *rc, const lh_model_geometry *geo,
                          const char *model_path, char *why, size_t n)
{
    (void)geo;
    (void)model_path;
    const lh_kv_cache_config *kv = &rc->kv_cache;
    char from[1024];
    const char *key = NULL;
    lh_value_origin o = {0};
    char val[64] = "";
    if (kv->k_dtype != LH_DTYPE_INVALID && kv->k_dtype != LH_DTYPE_F32) {
        key = "kv_cache.k_dtype";
        o = kv->k_dtype_origin;
        snprintf(val, sizeof val, "%s", kv_dtype_str(kv->k_dtype));
    } else if (kv->v_dtype != LH_DTYPE_INVALID && kv->v_dtype != LH_DTYPE_F32) {
        key = "kv_cache.v_dtype";
        o = kv->v_dtype_origin;
        snprintf(val, sizeof val, "%s", kv_dtype_str(kv->v_dtype));
    } else if (kv->layout != 0) {
        key = "kv_cache.layout";
        o = kv->layout_origin;
        snprintf(val, sizeof val, "HND");
    } else if (kv->max_tokens > 0) {
        key = "kv_cache.max_tokens";
        o = kv->max_tokens_origin;
        snprintf(val, sizeof val, "%lld", (long long)kv->max_tokens);
    } else if (kv->memory_fraction > 0) {
        key = "kv_cache.memory_fraction";
        o = kv->memory_fraction_origin;
        snprintf(val, sizeof val, "%g", kv->memory_fraction);
    } else if (kv->block_size_origin.kind != LH_ORIGIN_DEFAULT) {
        key = "kv_cache.block_size";
        o = kv->block_size_origin;
        snprintf(val, sizeof val, "%lld", (long long)kv->block_size);
    }
    if (!key)
        return false;
    because(why, n, "%s=%s (from %s) configures the paged KV pool", key, val,
            lh_value_origin_str(rc, o, from, sizeof from));
    return true;
}

static const struct {
    const char *capability;
    uint64_t bit;
    need_fn needed;
} attn_need_rules[] = {
    {"sliding_window", LH_ATTN_CAP_SLIDING_WINDOW, need_sliding_window},
    {"chunked", LH_ATTN_CAP_CHUNKED, need_chunked},
    {"mla", LH_ATTN_CAP_MLA, need_mla},
    {"fp8_kv", LH_ATTN_CAP_FP8_KV, need_fp8_kv},
    {"sparse", LH_ATTN_CAP_SPARSE, need_sparse},
    {"mixed_kv", LH_ATTN_CAP_MIXED_KV, need_mixed_kv},
    {"paged_kv", LH_ATTN_CAP_PAGED_KV, need_paged_kv},
};
_Static_assert(N_OF(attn_need_rules) <= LH_ATTN_MAX_NEEDS, "raise LH_ATTN_MAX_NEEDS");

size_t lh_attn_needs(const lh_run_config *rc, const lh_model_geometry *geo, const char *model_path,
                     lh_attn_need out[LH_ATTN_MAX_NEEDS])
{
    if (!rc || !out)
        return 0;
    for (size_t i = 0; i < N_OF(attn_need_rules); i++) {
        lh_attn_need *o = &out[i];
        memset(o, 0, sizeof *o);
        o->capability = attn_need_rules[i].capability;
        o->bit = attn_need_rules[i].bit;
        o->needed = attn_need_rules[i].needed(rc, geo, model_path, o->because, sizeof o->because);
        if (!o->needed)
            o->because[0] = '\0';
    }
    return N_OF(attn_need_rules);
}

lh_status lh_run_config_validate_with(const lh_run_config *rc, const lh_validation_facts *facts,
                                      lh_err *err)
{
    if (!rc)
        return lh_err_set(err, LH_E_USAGE, "lh_run_config_validate: rc is NULL");
    for (size_t i = 0; i < N_OF(validation_rules); i++) {
        lh_status st = validation_rules[i](rc, err);
        if (st)
            return st;
    }
    if (!facts || !facts->attn_backend)
        return LH_OK;
    lh_attn_need needs[LH_ATTN_MAX_NEEDS];
    size_t n = lh_attn_needs(rc, facts->geo, facts->model_path, needs);
    /* every missing capability in one message, so one round of fixes is enough */
    char missing[1400] = "";
    size_t used = 0, n_missing = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (!needs[i].needed || (facts->attn_caps & needs[i].bit))
            continue;
        if (!n_missing)
            first = i;
        int w = snprintf(missing + used, sizeof missing - used, "%s%s (because %s)",
                         n_missing ? "; " : "", needs[i].capability, needs[i].because);
        n_missing++;
        if (w > 0)
            used += (size_t)w < sizeof missing - used ? (size_t)w : sizeof missing - used - 1;
    }
    if (n_missing == 1)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "attention backend '%s' does not support %s, which this run needs "
                          "(because %s); see `llmhost backends`",
                          facts->attn_backend, needs[first].capability, needs[first].because);
    if (n_missing > 1)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "attention backend '%s' lacks %zu capabilities this run needs: %s; see "
                          "`llmhost backends`", facts->attn_backend, n_missing, missing);
    return LH_OK;
}

lh_status lh_run_config_validate(const lh_run_config *rc, lh_err *err)
{
    return lh_run_config_validate_with(rc, NULL, err);
}

int64_t lh_run_max_seq_len(const lh_run_config *rc, const lh_model_geometry *g)
{
    if (rc && rc->max_seq_len > 0)
        return rc->max_seq_len;
    int64_t n = g->max_position_embeddings > 0 ? g->max_position_embeddings : 4096;
    if (g->rope_scaling.kind && strcmp(g->rope_scaling.kind, "dynamic") == 0 &&
        g->rope_scaling.factor > 1.0) {
        double scaled = (double)n * g->rope_scaling.factor;
        n = scaled < (double)INT32_MAX ? (int64_t)scaled : INT32_MAX;
    }
    return n < INT32_MAX ? n : INT32_MAX;
}

/* Where the device setting came from, as explain and the errors name it. */
static const char *device_from(const lh_run_config *rc, char *buf, size_t n)
{
    switch (rc->device_origin.kind) {
    case LH_ORIGIN_YAML:
        snprintf(buf, n, "run config %s:%d:%d", rc->source ? rc->source : "<yaml>",
                 rc->device_origin.line, rc->device_origin.column);
        break;
    case LH_ORIGIN_FLAG:
        snprintf(buf, n, "--device");
        break;
    default:
        snprintf(buf, n, "default");
        break;
    }
    return buf;
}

lh_status lh_run_resolve_device(const lh_run_config *rc, lh_device *out, char *why,
                                size_t why_size, lh_err *err)
{
    char scratch[8];
    if (!why || why_size == 0) {
        why = scratch;
        why_size = sizeof scratch;
    }
    why[0] = '\0';
    if (!rc || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_run_resolve_device: %s is NULL",
                          rc ? "out" : "rc");
    *out = (lh_device){LH_DEVICE_CPU, 0};
    lh_status st = rule_device(rc, err);
    if (st != LH_OK)
        return st;
    char from[1024];
    device_from(rc, from, sizeof from);
    /* No device in the run config or flags: LLMHOST_DEVICE, when set, takes the place of the
     * default (auto) -- how an operator pins a machine, and how the test suites keep their
     * CPU numerics on a GPU machine. */
    lh_run_config env_rc;
    const char *env = getenv("LLMHOST_DEVICE");
    if (rc->device_auto && rc->device_origin.kind == LH_ORIGIN_DEFAULT && env && *env) {
        char bad[256];
        bool is_auto;
        lh_device d;
        if (!parse_device_text(env, &is_auto, &d, bad, sizeof bad))
            return lh_err_set(err, LH_E_CONFIG, "LLMHOST_DEVICE: %s", bad);
        memcpy(&env_rc, rc, sizeof env_rc);
        env_rc.device = d;
        env_rc.device_auto = is_auto;
        rc = &env_rc;
        snprintf(from, sizeof from, "LLMHOST_DEVICE=%s", env);
    }
    /* an explicit cpu never wakes the CUDA driver */
    if (!rc->device_auto && rc->device.kind == LH_DEVICE_CPU) {
        snprintf(why, why_size, "%s", from);
        return LH_OK;
    }
    const int n_cuda = lh_k_cuda_device_count();
    if (rc->device_auto) {
        if (n_cuda > 0) {
            *out = (lh_device){LH_DEVICE_CUDA, 0};
            snprintf(why, why_size, "auto: %d CUDA device%s", n_cuda, n_cuda == 1 ? "" : "s");
        } else {
            const char *r = lh_k_cuda_unavailable_reason();
            snprintf(why, why_size, "auto: no CUDA device (%s)", r && *r ? r : "none found");
        }
        return LH_OK;
    }
    const int idx = rc->device.index;
    if (idx < n_cuda) {
        *out = rc->device;
        snprintf(why, why_size, "%s", from);
        return LH_OK;
    }
    if (n_cuda <= 0) {
        const char *r = lh_k_cuda_unavailable_reason();
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "device cuda:%d (from %s) is not available: %s; use device cpu, or "
                          "auto (the CPU when no CUDA device is usable)",
                          idx, from, r && *r ? r : "no CUDA device");
    }
    char present[48];
    if (n_cuda == 1)
        snprintf(present, sizeof present, "cuda:0");
    else
        snprintf(present, sizeof present, "cuda:0 to cuda:%d", n_cuda - 1);
    return lh_err_set(err, LH_E_UNSUPPORTED,
                      "device cuda:%d (from %s) is not available: %d CUDA device%s present "
                      "(%s); use one of them, cpu or auto",
                      idx, from, n_cuda, n_cuda == 1 ? " is" : "s are", present);
}
