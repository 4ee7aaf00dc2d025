/* The run-config key table and its typed operations (parse, store, JSON, the key reference).
 * See run_config_keys.h. */
#include "config/run_config_keys.h"

#include "config/model_config.h"
#include "core/err.h"
#include "core/strbuf.h"
#include "core/strutil.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define NO_OFF SIZE_MAX
#define OFF(field) offsetof(lh_run_config, field)

_Static_assert(sizeof(lh_dtype) == sizeof(int) && sizeof(lh_impl_mode) == sizeof(int) &&
                   sizeof(lh_quant_scheme) == sizeof(int) &&
                   sizeof(lh_weight_placement) == sizeof(int) &&
                   sizeof(lh_quantized_matmul) == sizeof(int) &&
                   sizeof(lh_bf16_matmul) == sizeof(int),
               "enum keys are stored as int");

/* ------------------------------------------------------------------------------------------ */
/* enum names */

static const char *const bool_true[] = {"true", "yes", "on"};
static const char *const bool_false[] = {"false", "no", "off"};
const char *const lh_rc_scheme_names[] = {"none", "fp8", "int8", "int4"};
const size_t lh_rc_n_scheme_names = N_OF(lh_rc_scheme_names);
static const char *const mode_names[] = {"off", "auto", "require"};
static const char *const placement_names[] = {"auto", "mmap", "huge_pages"};
static const char *const qmm_names[] = {"int8", "exact"};
static const char *const bf16mm_names[] = {"tiles", "exact"};
static const char *const kv_dtype_names[] = {"auto", "float32", "bfloat16", "float16", "fp8"};
const lh_dtype lh_rc_kv_dtype_values[] = {LH_DTYPE_INVALID, LH_DTYPE_F32, LH_DTYPE_BF16,
                                          LH_DTYPE_F16, LH_DTYPE_FP8_E4M3};
const size_t lh_rc_n_kv_dtypes = N_OF(lh_rc_kv_dtype_values);
_Static_assert(N_OF(kv_dtype_names) == N_OF(lh_rc_kv_dtype_values), "one value per name");
static const int kv_dtype_ints[] = {LH_DTYPE_INVALID, LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16,
                                    LH_DTYPE_FP8_E4M3};
static const char *const kv_layout_names[] = {"NHD", "HND"};
const char *const lh_rc_sparse_algorithms[] = {"topk_blocks"};

const char *lh_quant_scheme_name(lh_quant_scheme s)
{
    return (unsigned)s < N_OF(lh_rc_scheme_names) ? lh_rc_scheme_names[s] : "invalid";
}

const char *lh_weight_placement_name(lh_weight_placement p)
{
    return (unsigned)p < N_OF(placement_names) ? placement_names[p] : "unknown";
}

const char *lh_rc_impl_mode_name(lh_impl_mode m)
{
    return (unsigned)m < N_OF(mode_names) ? mode_names[m] : "invalid";
}

const char *lh_rc_kv_dtype_str(lh_dtype dt)
{
    return dt == LH_DTYPE_INVALID ? "auto" : lh_dtype_name(dt);
}

/* ------------------------------------------------------------------------------------------ */
/* text parsers: each fills `why` (the part of the message after "KEY: ") on failure */

static int find_name(const char *v, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(v, names[i]) == 0)
            return (int)i;
    return -1;
}

bool lh_rc_parse_bool(const char *v, bool *out, char *why, size_t n)
{
    if (find_name(v, bool_true, N_OF(bool_true)) >= 0) {
        *out = true;
        return true;
    }
    if (find_name(v, bool_false, N_OF(bool_false)) >= 0) {
        *out = false;
        return true;
    }
    snprintf(why, n, "'%s' is not a boolean (true/false, yes/no, on/off)", v);
    return false;
}

/* Decimal integer > 0. */
bool lh_rc_parse_pos_int(const char *v, int64_t *out, char *why, size_t n)
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
bool lh_rc_parse_fraction(const char *v, double *out, char *why, size_t n)
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

bool lh_rc_parse_enum(const char *v, const char *const *names, size_t count, int *out, char *why,
                      size_t n)
{
    int i = find_name(v, names, count);
    if (i < 0) {
        char list[256];
        lh_join_names(list, sizeof list, names, count);
        snprintf(why, n, "'%s' is not one of %s", v, list);
        return false;
    }
    *out = i;
    return true;
}

/* auto | cpu | cuda | cuda:N, case-insensitive; N decimal digits only (no sign, no spaces). */
bool lh_rc_parse_device(const char *v, bool *is_auto, lh_device *out, char *why, size_t n)
{
    lh_device d = {LH_DEVICE_CPU, 0};
    if (strcasecmp(v, "auto") == 0 || strcasecmp(v, "cpu") == 0) {
        *is_auto = strcasecmp(v, "auto") == 0;
        *out = d;
        return true;
    }
    if (strncasecmp(v, "cuda", 4) != 0 || (v[4] != '\0' && v[4] != ':')) {
        snprintf(why, n, "'%s' is not a device; expected " LH_RC_DEVICE_FORMS, v);
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
                     "number >= 0); expected " LH_RC_DEVICE_FORMS, v, p);
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

const char *lh_rc_kv_dtypes_from(const lh_run_config *rc, char *buf, size_t n)
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

/* ------------------------------------------------------------------------------------------ */
/* --set for the keys that are more than one typed value */

/* model_impl=TARGET, TARGET:MODE or off. */
static lh_status set_model_impl(lh_run_config *rc, const lh_rc_key *k, const char *flag,
                                const char *value, lh_err *err)
{
    (void)k;
    const lh_value_origin fo = {.kind = LH_ORIGIN_FLAG};
    char why[512];
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
        if (!lh_rc_parse_enum(colon + 1, mode_names, N_OF(mode_names), &mode, why, sizeof why))
            return lh_err_set(err, LH_E_USAGE,
                              "--%s: mode %s (expected TARGET, TARGET:auto, TARGET:require or "
                              "off)",
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
    return LH_OK;
}

/* quant=SCHEME: the default scheme (quant.scheme). */
static lh_status set_quant(lh_run_config *rc, const lh_rc_key *k, const char *flag,
                           const char *value, lh_err *err)
{
    (void)k;
    char why[512];
    int scheme;
    if (!lh_rc_parse_enum(value, lh_rc_scheme_names, N_OF(lh_rc_scheme_names), &scheme, why,
                          sizeof why))
        return lh_err_set(err, LH_E_USAGE, "--%s: %s", flag, why);
    rc->quant.scheme = (lh_quant_scheme)scheme;
    rc->quant.origin = (lh_value_origin){.kind = LH_ORIGIN_FLAG};
    return LH_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* explain views of the sections */

static json_t *origin_json(const lh_run_config *rc, lh_value_origin o)
{
    char buf[1024];
    return json_string(lh_value_origin_str(rc, o, buf, sizeof buf));
}

static int obj_set(json_t *obj, const char *key, json_t *v)
{
    if (!v)
        return -1;
    if (!obj) {
        json_decref(v);
        return -1;
    }
    return json_object_set_new(obj, key, v);
}

static json_t *finish(json_t *o, int bad)
{
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static const char *last_part(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

static json_t *json_model_impl(const lh_run_config *rc, const lh_rc_key *k)
{
    (void)k;
    json_t *o = json_object();
    int bad = 0;
    bad |= obj_set(o, "target",
                   rc->model_impl_target ? json_string(rc->model_impl_target) : json_null());
    bad |= obj_set(o, "mode", json_string(lh_rc_impl_mode_name(rc->model_impl_mode)));
    bad |= obj_set(o, "origin", origin_json(rc, rc->model_impl_origin));
    return finish(o, bad);
}

/* Every kv_cache.* value with its own storage, then the section's origin and each value's. */
static json_t *json_kv_cache(const lh_run_config *rc, const lh_rc_key *k)
{
    (void)k;
    json_t *o = json_object(), *origins = json_object();
    int bad = 0;
    for (size_t i = 0; i < lh_rc_n_keys; i++) {
        const lh_rc_key *e = &lh_rc_keys[i];
        if (strncmp(e->name, "kv_cache.", 9) != 0 || (e->flags & LH_RC_BOTH))
            continue;
        bad |= obj_set(o, last_part(e->name), lh_rc_key_value_json(rc, e));
        bad |= obj_set(origins, last_part(e->name), origin_json(rc, lh_rc_key_origin(rc, e)));
        if (strcmp(e->name, "kv_cache.v_dtype") == 0)
            bad |= obj_set(o, "mixed_precision", json_boolean(lh_kv_cache_mixed(&rc->kv_cache)));
    }
    bad |= obj_set(o, "origin", origin_json(rc, rc->kv_cache.origin));
    bad |= obj_set(o, "origins", origins);
    return finish(o, bad);
}

static json_t *json_sparse(const lh_run_config *rc, const lh_rc_key *k)
{
    (void)k;
    const lh_sparse_config *sp = &rc->sparse;
    json_t *o = json_object();
    int bad = 0;
    bad |= obj_set(o, "enabled", json_boolean(sp->enabled));
    bad |= obj_set(o, "algorithm",
                   sp->enabled ? json_string(lh_rc_sparse_algorithms[0]) : json_null());
    bad |= obj_set(o, "top_k", sp->enabled ? json_integer(sp->top_k) : json_null());
    bad |= obj_set(o, "local_blocks", json_integer(sp->local_blocks));
    bad |= obj_set(o, "origin", origin_json(rc, sp->origin));
    return finish(o, bad);
}

static json_t *json_speculative(const lh_run_config *rc, const lh_rc_key *k)
{
    (void)k;
    const lh_speculative_config *sd = &rc->speculative;
    json_t *o = json_object();
    int bad = 0;
    bad |= obj_set(o, "mode", sd->mode ? json_string(sd->mode) : json_null());
    bad |= obj_set(o, "num_tokens", sd->mode ? json_integer(sd->num_tokens) : json_null());
    bad |= obj_set(o, "origin", origin_json(rc, sd->origin));
    return finish(o, bad);
}

/* attn_backend carries attn_backend_fallback as "fallback". */
static json_t *json_attn_backend(const lh_run_config *rc, const lh_rc_key *k)
{
    json_t *o = json_object();
    int bad = 0;
    bad |= obj_set(o, "value", lh_rc_key_value_json(rc, k));
    bad |= obj_set(o, "origin", origin_json(rc, rc->attn_backend_origin));
    bad |= obj_set(o, "fallback", json_boolean(rc->attn_backend_fallback));
    return finish(o, bad);
}

static json_t *json_quant(const lh_run_config *rc, const lh_rc_key *k)
{
    (void)k;
    const lh_quant_config *qc = &rc->quant;
    json_t *q = json_object();
    int bad = 0;
    bad |= obj_set(q, "scheme", json_string(lh_quant_scheme_name(qc->scheme)));
    bad |= obj_set(q, "group_size", json_integer(qc->group_size));
    bad |= obj_set(q, "origin", origin_json(rc, qc->origin));
    json_t *rules = json_array();
    for (size_t i = 0; rules && i < qc->n_rules; i++) {
        const lh_quant_rule *r = &qc->rules[i];
        json_t *jr = json_object();
        bad |= obj_set(jr, "pattern", json_string(r->pattern ? r->pattern : ""));
        bad |= obj_set(jr, "scheme", json_string(lh_quant_scheme_name(r->scheme)));
        bad |= obj_set(jr, "group_size", json_integer(r->group_size));
        bad |= obj_set(jr, "origin", origin_json(rc, r->origin));
        bad |= jr ? json_array_append_new(rules, jr) : -1;
    }
    bad |= obj_set(q, "rules", rules);
    json_t *ex = json_array();
    for (size_t i = 0; ex && i < qc->n_exclude; i++) {
        json_t *s = json_string(qc->exclude_modules[i] ? qc->exclude_modules[i] : "");
        bad |= s ? json_array_append_new(ex, s) : -1;
    }
    bad |= obj_set(q, "exclude_modules", ex);
    return finish(q, bad);
}

/* ------------------------------------------------------------------------------------------ */
/* the table */

#define Y LH_RC_YAML
#define S LH_RC_SET
#define ENUM_OF(a) .names = (a), .n_names = N_OF(a)
#define NO_STORAGE .off = NO_OFF, .origin_off = NO_OFF
#define AT(f, o) .off = OFF(f), .origin_off = OFF(o)
#define NONE2 .off2 = NO_OFF, .origin_off2 = NO_OFF, .sec_origin_off = NO_OFF

const lh_rc_key lh_rc_keys[] = {
    /* root keys, in the order of the "known keys" list */
    {.name = "mm_encoder_only", .type = LH_RC_BOOL, .from = Y | S, .cli = "--mm-encoder-only",
     .def = "false", .help = "run only the multimodal encoder",
     AT(mm_encoder_only, mm_encoder_only_origin), NONE2, .json_rank = 1},
    {.name = "model_impl", .type = LH_RC_SECTION, .from = Y | S, .cli = "--model-impl",
     .def = "none", .arg = "TARGET[:auto|:require]|off",
     .help = "a target implementation: {target, mode}; --set TARGET[:MODE] or off",
     NO_STORAGE, NONE2, .json_rank = 2, .yaml = lh_rc_yaml_model_impl, .set = set_model_impl,
     .to_json = json_model_impl},
    {.name = "dtype", .type = LH_RC_DTYPE, .from = Y | S, .cli = "--dtype", .def = "auto",
     .help = "weight dtype: auto (the checkpoint's torch_dtype), float32, bfloat16, float16",
     AT(dtype, dtype_origin), NONE2, .json_rank = 3},
    {.name = "max_seq_len", .type = LH_RC_INT, .from = Y | S, .cli = "--max-seq-len",
     .def = "max_position_embeddings", .help = "the longest sequence (at most 2147483647)",
     AT(max_seq_len, max_seq_len_origin), NONE2, .json_rank = 4},
    {.name = "max_batch_size", .type = LH_RC_INT, .from = Y | S, .cli = "--max-batch-size",
     .def = "1", .help = "sequences per step", AT(max_batch_size, max_batch_size_origin), NONE2,
     .json_rank = 5},
    {.name = "quant", .type = LH_RC_SECTION, .from = Y | S, .cli = "--quant", .def = "none",
     .arg = "none|fp8|int8|int4",
     .help = "weight quantization; --set quant=SCHEME sets quant.scheme", NO_STORAGE, NONE2,
     .json_rank = 15, .yaml = lh_rc_yaml_quant, .set = set_quant, .to_json = json_quant},
    {.name = "weight_placement", .type = LH_RC_ENUM, .from = Y | S, .cli = "--weight-placement",
     .def = "auto", .help = "where bound weights live", ENUM_OF(placement_names),
     AT(weight_placement, weight_placement_origin), NONE2, .json_rank = 14},
    {.name = "quantized_matmul", .type = LH_RC_ENUM, .from = Y | S,
     .cli = "--quantized-matmul", .def = "int8",
     .help = "quantized weights (GGUF block types on the CPU; the quant config's int8 on "
             "the CPU and CUDA): int8 = activations quantized to 8 bits, integer dot products "
             "(fast, llama.cpp's arithmetic); exact = weights decoded to f32 (bit-identical to "
             "the dequantized model)",
     ENUM_OF(qmm_names), AT(quantized_matmul, quantized_matmul_origin), NONE2,
     .json_rank = 16},
    {.name = "bf16_matmul", .type = LH_RC_ENUM, .from = Y | S, .cli = "--bf16-matmul",
     .def = "tiles",
     .help = "bf16 weights on the CPU: tiles = AMX-BF16 tiles for prompts (16 rows or more) "
             "where the CPU has them, activations rounded to bf16 (fast, what llama.cpp and "
             "PyTorch compute); exact = f32 activations, every row count",
     ENUM_OF(bf16mm_names), AT(bf16_matmul, bf16_matmul_origin), NONE2, .json_rank = 17},
    {.name = "attn_backend", .type = LH_RC_STRING, .from = Y | S, .flags = LH_RC_LOWER,
     .cli = "--attn-backend", .def = "paged",
     .help = "attention backend name (case-insensitive; see `llmhost backends`)",
     .expected = "an attention backend name", AT(attn_backend, attn_backend_origin), NONE2,
     .json_rank = 13, .to_json = json_attn_backend},
    {.name = "attn_backend_fallback", .type = LH_RC_BOOL, .from = Y | S,
     .cli = "--attn-backend-fallback", .def = "false",
     .help = "an unknown backend falls back to the default instead of failing",
     AT(attn_backend_fallback, attn_backend_fallback_origin), NONE2},
    {.name = "kv_cache", .type = LH_RC_SECTION, .from = Y, .def = "-",
     .help = "KV cache settings (the paged pool)", NO_STORAGE, NONE2, .json_rank = 6,
     .yaml = lh_rc_yaml_kv_cache, .to_json = json_kv_cache},
    {.name = "sparse_attention", .type = LH_RC_SECTION, .from = Y, .def = "off (dense)",
     .help = "sparse attention (needs a sparse backend); null: dense", NO_STORAGE, NONE2,
     .json_rank = 7, .yaml = lh_rc_yaml_sparse, .to_json = json_sparse},
    {.name = "beam_width", .type = LH_RC_INT, .from = Y | S, .def = "1",
     .help = "beams per sequence", AT(beam_width, beam_width_origin), NONE2, .json_rank = 8},
    {.name = "speculative", .type = LH_RC_SECTION, .from = Y, .def = "off",
     .help = "speculative decoding; null: off", NO_STORAGE, NONE2, .json_rank = 9,
     .yaml = lh_rc_yaml_speculative, .to_json = json_speculative},
    {.name = "fused_rope", .type = LH_RC_BOOL, .from = Y | S, .def = "true",
     .help = "fuse RoPE into attention when the backend can",
     AT(fused_rope, fused_rope_origin), NONE2, .json_rank = 10},
    {.name = "device", .type = LH_RC_DEVICE, .from = Y | S, .cli = "--device", .def = "auto",
     .help = "where the engine runs: auto (cuda:0 when usable, else cpu), cpu, cuda, cuda:N",
     AT(device, device_origin), .off2 = OFF(device_auto), .origin_off2 = NO_OFF,
     .sec_origin_off = NO_OFF, .json_rank = 11},
    {.name = "cuda_graphs", .type = LH_RC_BOOL, .from = Y | S, .def = "true",
     .help = "replay each decode step as one CUDA graph (CUDA only)",
     AT(cuda_graphs, cuda_graphs_origin), NONE2, .json_rank = 12},

    /* model_impl.* */
    {.name = "model_impl.target", .type = LH_RC_STRING, .from = Y, .def = "none",
     .help = "the target implementation's name", .expected = "a target implementation name",
     NO_STORAGE, NONE2},
    {.name = "model_impl.mode", .type = LH_RC_ENUM, .from = Y, .def = "auto (with a target)",
     .help = "off, auto (use the target when it resolves) or require", ENUM_OF(mode_names),
     NO_STORAGE, NONE2},
    /* quant.* */
    {.name = "quant.scheme", .type = LH_RC_ENUM, .from = Y, .def = "none",
     .help = "default scheme for linear layers", ENUM_OF(lh_rc_scheme_names), NO_STORAGE,
     NONE2},
    {.name = "quant.group_size", .type = LH_RC_INT, .from = Y, .def = "128",
     .help = "int4 only: inputs per scale (even)", NO_STORAGE, NONE2},
    {.name = "quant.rules", .type = LH_RC_LIST, .from = Y, .def = "[]",
     .help = "[{pattern, scheme, group_size}, ...]; the first match wins", NO_STORAGE, NONE2},
    {.name = "quant.exclude_modules", .type = LH_RC_LIST, .from = Y, .def = "[]",
     .help = "[GLOB, ...]: these keep the model dtype", NO_STORAGE, NONE2},
    {.name = "quant.rules[].pattern", .type = LH_RC_STRING, .from = Y, .def = "required",
     .help = "fnmatch glob over full module names", .expected = "a non-empty glob pattern",
     NO_STORAGE, NONE2},
    {.name = "quant.rules[].scheme", .type = LH_RC_ENUM, .from = Y, .def = "required",
     .help = "the scheme for matching layers", ENUM_OF(lh_rc_scheme_names), NO_STORAGE, NONE2},
    {.name = "quant.rules[].group_size", .type = LH_RC_INT, .from = Y,
     .def = "quant.group_size", .help = "int4 only", NO_STORAGE, NONE2},
    /* kv_cache.*: the section is read as a whole (run_config_yaml.c) */
    {.name = "kv_cache.block_size", .type = LH_RC_INT, .from = Y | S,
     .flags = LH_RC_SEC_ORIGIN, .def = "16", .help = "tokens per block",
     AT(kv_cache.block_size, kv_cache.block_size_origin), .off2 = NO_OFF, .origin_off2 = NO_OFF,
     .sec_origin_off = OFF(kv_cache.origin)},
    {.name = "kv_cache.dtype", .type = LH_RC_ENUM, .from = Y | S,
     .flags = LH_RC_SEC_ORIGIN | LH_RC_BOTH | LH_RC_DTYPE_VALUES, .def = "auto",
     .help = "sets k_dtype and v_dtype (fp8: e4m3; auto: float32)", ENUM_OF(kv_dtype_names),
     .values = kv_dtype_ints, AT(kv_cache.k_dtype, kv_cache.k_dtype_origin),
     .off2 = OFF(kv_cache.v_dtype), .origin_off2 = OFF(kv_cache.v_dtype_origin),
     .sec_origin_off = OFF(kv_cache.origin)},
    {.name = "kv_cache.k_dtype", .type = LH_RC_ENUM, .from = Y | S,
     .flags = LH_RC_SEC_ORIGIN | LH_RC_DTYPE_VALUES,
     .def = "auto", .help = "keys' dtype (wins over kv_cache.dtype)", ENUM_OF(kv_dtype_names),
     .values = kv_dtype_ints, AT(kv_cache.k_dtype, kv_cache.k_dtype_origin), .off2 = NO_OFF,
     .origin_off2 = NO_OFF, .sec_origin_off = OFF(kv_cache.origin)},
    {.name = "kv_cache.v_dtype", .type = LH_RC_ENUM, .from = Y | S,
     .flags = LH_RC_SEC_ORIGIN | LH_RC_DTYPE_VALUES,
     .def = "auto", .help = "values' dtype (wins over kv_cache.dtype)", ENUM_OF(kv_dtype_names),
     .values = kv_dtype_ints, AT(kv_cache.v_dtype, kv_cache.v_dtype_origin), .off2 = NO_OFF,
     .origin_off2 = NO_OFF, .sec_origin_off = OFF(kv_cache.origin)},
    {.name = "kv_cache.layout", .type = LH_RC_ENUM, .from = Y | S, .flags = LH_RC_SEC_ORIGIN,
     .def = "NHD", .help = "NHD [block][token][head][dim] or HND [block][head][token][dim]",
     ENUM_OF(kv_layout_names), AT(kv_cache.layout, kv_cache.layout_origin), .off2 = NO_OFF,
     .origin_off2 = NO_OFF, .sec_origin_off = OFF(kv_cache.origin)},
    {.name = "kv_cache.max_tokens", .type = LH_RC_INT, .from = Y | S,
     .flags = LH_RC_SEC_ORIGIN | LH_RC_AUTO_UNSETS, .def = "max_seq_len x max_batch_size",
     .help = "pool size in tokens per layer (--set auto: unset)",
     AT(kv_cache.max_tokens, kv_cache.max_tokens_origin), .off2 = NO_OFF, .origin_off2 = NO_OFF,
     .sec_origin_off = OFF(kv_cache.origin)},
    {.name = "kv_cache.memory_fraction", .type = LH_RC_FRACTION, .from = Y | S,
     .flags = LH_RC_SEC_ORIGIN | LH_RC_AUTO_UNSETS, .def = "unset",
     .help = "pool share of the memory available at open; not with max_tokens (--set auto: "
             "unset)",
     AT(kv_cache.memory_fraction, kv_cache.memory_fraction_origin), .off2 = NO_OFF,
     .origin_off2 = NO_OFF, .sec_origin_off = OFF(kv_cache.origin)},
    /* sparse_attention.* */
    {.name = "sparse_attention.algorithm", .type = LH_RC_ENUM, .from = Y, .def = "required",
     .help = "the selection algorithm", ENUM_OF(lh_rc_sparse_algorithms), NO_STORAGE, NONE2},
    {.name = "sparse_attention.top_k", .type = LH_RC_INT, .from = Y, .def = "required",
     .help = "KV blocks selected per query", AT(sparse.top_k, sparse.origin), NONE2},
    {.name = "sparse_attention.local_blocks", .type = LH_RC_INT, .from = Y, .def = "1",
     .help = "most recent KV blocks always attended", AT(sparse.local_blocks, sparse.origin),
     NONE2},
    /* speculative.* */
    {.name = "speculative.mode", .type = LH_RC_STRING, .from = Y, .def = "required",
     .help = "the drafting method (e.g. eagle3, mtp, draft_model)",
     .expected = "a speculative decoding mode (e.g. eagle3, mtp, draft_model)", NO_STORAGE,
     NONE2},
    {.name = "speculative.num_tokens", .type = LH_RC_INT, .from = Y, .def = "required",
     .help = "tokens drafted per step", NO_STORAGE, NONE2},
};
const size_t lh_rc_n_keys = N_OF(lh_rc_keys);

const lh_rc_key *lh_rc_key_find(const char *name)
{
    for (size_t i = 0; name && i < lh_rc_n_keys; i++)
        if (strcmp(lh_rc_keys[i].name, name) == 0)
            return &lh_rc_keys[i];
    return NULL;
}

size_t lh_rc_key_names(const char *prefix, unsigned from, bool full, const char **names,
                       size_t cap)
{
    size_t plen = strlen(prefix), n = 0;
    for (size_t i = 0; i < lh_rc_n_keys && n < cap; i++) {
        const lh_rc_key *k = &lh_rc_keys[i];
        if (!(k->from & from) || strncmp(k->name, prefix, plen) != 0)
            continue;
        const char *rest = k->name + plen;
        if (plen == 0 && full) {
            names[n++] = k->name; /* every key, dotted */
            continue;
        }
        if (strchr(rest, '.') || strchr(rest, '['))
            continue;
        names[n++] = full ? k->name : rest;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* typed get / set */

#define FIELD(rc, off, T) ((T *)(void *)((char *)(rc) + (off)))
#define CFIELD(rc, off, T) ((const T *)(const void *)((const char *)(rc) + (off)))

lh_value_origin lh_rc_key_origin(const lh_run_config *rc, const lh_rc_key *k)
{
    if (k->origin_off == NO_OFF)
        return (lh_value_origin){0};
    return *CFIELD(rc, k->origin_off, lh_value_origin);
}

bool lh_rc_key_parse(const lh_rc_key *k, lh_run_config *rc, const char *text, bool from_set,
                     lh_value_origin o, char *why, size_t n)
{
    if (k->off == NO_OFF) {
        snprintf(why, n, "has no single value to set");
        return false;
    }
    bool b = false;
    int64_t i = 0;
    double d = 0.0;
    int e = 0;
    lh_dtype dt = LH_DTYPE_INVALID;
    lh_device dev = {LH_DEVICE_CPU, 0};
    char *s = NULL;
    const bool unset = from_set && (k->flags & LH_RC_AUTO_UNSETS) && strcasecmp(text, "auto") == 0;
    switch (k->type) {
    case LH_RC_BOOL:
        if (from_set && (strcmp(text, "1") == 0 || strcmp(text, "0") == 0))
            b = text[0] == '1';
        else if (!lh_rc_parse_bool(text, &b, why, n))
            return false;
        *FIELD(rc, k->off, bool) = b;
        break;
    case LH_RC_INT:
        if (!unset && !lh_rc_parse_pos_int(text, &i, why, n))
            return false;
        *FIELD(rc, k->off, int64_t) = i;
        break;
    case LH_RC_FRACTION:
        if (!unset && !lh_rc_parse_fraction(text, &d, why, n))
            return false;
        *FIELD(rc, k->off, double) = d;
        break;
    case LH_RC_ENUM:
        if (!lh_rc_parse_enum(text, k->names, k->n_names, &e, why, n))
            return false;
        if (k->values)
            e = k->values[e];
        *FIELD(rc, k->off, int) = e;
        if (k->flags & LH_RC_BOTH)
            *FIELD(rc, k->off2, int) = e;
        break;
    case LH_RC_STRING:
        if (!(s = lh_strdup(text))) {
            snprintf(why, n, "out of memory");
            return false;
        }
        /* normalized once, here, so that validation and dispatch cannot disagree about
         * "Paged" vs "paged" */
        for (char *p = s; (k->flags & LH_RC_LOWER) && *p; p++)
            *p = (char)tolower((unsigned char)*p);
        free(*FIELD(rc, k->off, char *));
        *FIELD(rc, k->off, char *) = s;
        break;
    case LH_RC_DTYPE:
        if (!parse_dtype_text(text, &dt, why, n))
            return false;
        *FIELD(rc, k->off, lh_dtype) = dt;
        break;
    case LH_RC_DEVICE:
        if (!lh_rc_parse_device(text, &b, &dev, why, n))
            return false;
        *FIELD(rc, k->off, lh_device) = dev;
        *FIELD(rc, k->off2, bool) = b;
        break;
    default:
        snprintf(why, n, "has no single value to set");
        return false;
    }
    *FIELD(rc, k->origin_off, lh_value_origin) = o;
    if ((k->flags & LH_RC_BOTH) && k->origin_off2 != NO_OFF)
        *FIELD(rc, k->origin_off2, lh_value_origin) = o;
    if (from_set && (k->flags & LH_RC_SEC_ORIGIN) && k->sec_origin_off != NO_OFF)
        *FIELD(rc, k->sec_origin_off, lh_value_origin) = o;
    return true;
}

json_t *lh_rc_key_value_json(const lh_run_config *rc, const lh_rc_key *k)
{
    if (k->off == NO_OFF)
        return json_null();
    switch (k->type) {
    case LH_RC_BOOL:
        return json_boolean(*CFIELD(rc, k->off, bool));
    case LH_RC_INT:
        return json_integer(*CFIELD(rc, k->off, int64_t));
    case LH_RC_FRACTION: {
        double d = *CFIELD(rc, k->off, double);
        return d > 0 ? json_real(d) : json_null(); /* 0: unset */
    }
    case LH_RC_ENUM: {
        int v = *CFIELD(rc, k->off, int);
        if (k->flags & LH_RC_DTYPE_VALUES)
            return json_string(lh_rc_kv_dtype_str((lh_dtype)v));
        for (size_t i = 0; i < k->n_names; i++)
            if ((k->values ? k->values[i] : (int)i) == v)
                return json_string(k->names[i]);
        return json_string("unknown");
    }
    case LH_RC_STRING: {
        const char *s = *CFIELD(rc, k->off, char *const);
        return s ? json_string(s) : json_null();
    }
    case LH_RC_DTYPE:
        return json_string(lh_rc_kv_dtype_str(*CFIELD(rc, k->off, lh_dtype)));
    case LH_RC_DEVICE: {
        char dev[48];
        return json_string(lh_run_device_str(rc, dev, sizeof dev));
    }
    default:
        return json_null();
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the key reference */

static const char *type_words(const lh_rc_key *k, char *buf, size_t n)
{
    switch (k->type) {
    case LH_RC_BOOL: return "bool";
    case LH_RC_INT: return "int >= 1";
    case LH_RC_FRACTION: return "number in (0, 1]";
    case LH_RC_STRING: return "string";
    case LH_RC_DTYPE: return "auto, float32, bfloat16, float16";
    case LH_RC_DEVICE: return "auto, cpu, cuda, cuda:N";
    case LH_RC_SECTION: return "mapping";
    case LH_RC_LIST: return "sequence";
    case LH_RC_ENUM: break;
    }
    lh_join_names(buf, n, k->names, k->n_names);
    return buf;
}

char *lh_rc_keys_markdown(void)
{
    lh_strbuf out = {0};
    lh_strbuf_puts(&out, "| key | type | default | from | meaning |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < lh_rc_n_keys; i++) {
        const lh_rc_key *k = &lh_rc_keys[i];
        char types[256];
        lh_strbuf_printf(&out, "| `%s` | %s | %s | %s%s%s%s%s | %s |\n", k->name,
                         type_words(k, types, sizeof types), k->def,
                         (k->from & Y) ? "YAML" : "", (k->from & S) ? ", --set" : "",
                         k->cli ? ", `" : "", k->cli ? k->cli : "", k->cli ? "`" : "", k->help);
    }
    return lh_strbuf_take(&out);
}

/* How a value of k is written, for --help. */
static const char *value_syntax(const lh_rc_key *k)
{
    if (k->arg)
        return k->arg;
    switch (k->type) {
    case LH_RC_BOOL: return "true|false";
    case LH_RC_INT: return "N";
    case LH_RC_FRACTION: return "F";
    case LH_RC_DTYPE: return "auto|float32|bfloat16|float16";
    case LH_RC_DEVICE: return "auto|cpu|cuda|cuda:N";
    case LH_RC_STRING: return "NAME";
    default: return k->n_names ? NULL : "VALUE"; /* enums: their names */
    }
}

LH_EXPORT int lh_run_config_key_at(size_t i, lh_run_config_key_info *out)
{
    if (!out || i >= lh_rc_n_keys || out->struct_size < sizeof(uint32_t))
        return 0;
    const lh_rc_key *k = &lh_rc_keys[i];
    const lh_run_config_key_info info = {
        .struct_size = out->struct_size,
        .name = k->name,
        .flag = k->cli,
        .flag_takes_value = k->cli && k->type != LH_RC_BOOL,
        .settable = (k->from & LH_RC_SET) != 0,
        .yaml = (k->from & LH_RC_YAML) != 0,
        .names = k->type == LH_RC_ENUM || k->type == LH_RC_DTYPE ? k->names : NULL,
        .n_names = k->type == LH_RC_ENUM || k->type == LH_RC_DTYPE ? k->n_names : 0,
        .value_syntax = value_syntax(k),
        .default_value = k->def,
        .help = k->help,
    };
    const size_t n = out->struct_size < sizeof info ? out->struct_size : sizeof info;
    memcpy(out, &info, n);
    return 1;
}
