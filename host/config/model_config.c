/* config.json → lh_model_config (jansson). See model_config.h. */
#include "model_config.h"

#include "weights/gguf.h"

#include "core/err.h"
#include "core/fileio.h"
#include "core/strutil.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Sizes above this are rejected as absurd: no real checkpoint comes near 2^40 of anything. */
#define MC_MAX_SIZE ((int64_t)1 << 40)

/* ------------------------------------------------------------------------------------------ */
/* dtype names */

static const struct {
    const char *name;
    lh_dtype dt;
} dtype_names[] = {
    {"float32", LH_DTYPE_F32},   {"fp32", LH_DTYPE_F32},       {"f32", LH_DTYPE_F32},
    {"float", LH_DTYPE_F32},     {"bfloat16", LH_DTYPE_BF16},  {"bf16", LH_DTYPE_BF16},
    {"float16", LH_DTYPE_F16},   {"fp16", LH_DTYPE_F16},       {"f16", LH_DTYPE_F16},
    {"half", LH_DTYPE_F16},      {"fp8_e4m3", LH_DTYPE_FP8_E4M3}, {"fp8", LH_DTYPE_FP8_E4M3},
    {"float8_e4m3fn", LH_DTYPE_FP8_E4M3}, {"e4m3", LH_DTYPE_FP8_E4M3},
    {"int8", LH_DTYPE_INT8},     {"i8", LH_DTYPE_INT8},        {"int4", LH_DTYPE_INT4},
    {"i4", LH_DTYPE_INT4},
    /* ggml's block types (GGUF), by their ggml names */
    {"q4_0", LH_DTYPE_Q4_0},     {"q4_1", LH_DTYPE_Q4_1},      {"q5_0", LH_DTYPE_Q5_0},
    {"q5_1", LH_DTYPE_Q5_1},     {"q8_0", LH_DTYPE_Q8_0},      {"q4_k", LH_DTYPE_Q4_K},
    {"q5_k", LH_DTYPE_Q5_K},     {"q6_k", LH_DTYPE_Q6_K},
};

lh_dtype lh_dtype_from_name(const char *name)
{
    if (!name)
        return LH_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (strcasecmp(name, dtype_names[i].name) == 0)
            return dtype_names[i].dt;
    return LH_DTYPE_INVALID;
}

const char *lh_dtype_name(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "float32";
    case LH_DTYPE_F16: return "float16";
    case LH_DTYPE_BF16: return "bfloat16";
    case LH_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case LH_DTYPE_INT8: return "int8";
    case LH_DTYPE_INT4: return "int4";
    case LH_DTYPE_Q4_0: return "q4_0";
    case LH_DTYPE_Q4_1: return "q4_1";
    case LH_DTYPE_Q5_0: return "q5_0";
    case LH_DTYPE_Q5_1: return "q5_1";
    case LH_DTYPE_Q8_0: return "q8_0";
    case LH_DTYPE_Q4_K: return "q4_k";
    case LH_DTYPE_Q5_K: return "q5_k";
    case LH_DTYPE_Q6_K: return "q6_k";
    default: return "invalid";
    }
}

/* ------------------------------------------------------------------------------------------ */
/* helpers */

typedef struct mc_ctx {
    const char *src; /* name used in messages */
    lh_err *err;
} mc_ctx;

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

/* Short JSON rendering of v for messages. */
static void json_repr(const json_t *v, char *buf, size_t n)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, n, "?");
        return;
    }
    if (strlen(s) > 60)
        snprintf(buf, n, "%.57s...", s);
    else
        snprintf(buf, n, "%s", s);
    free(s);
}

static lh_status type_error(mc_ctx *c, const char *name, const json_t *v, const char *want)
{
    char repr[80];
    json_repr(v, repr, sizeof repr);
    return lh_err_set(c->err, LH_E_CONFIG, "%s: %s must be %s, got %s (%s)", c->src, name, want,
                      json_kind(v), repr);
}

/* Integer field `key` of obj (display name `name`). Absent or null: *present = false.
 * Present: a JSON integer >= min and <= MC_MAX_SIZE. */
static lh_status get_int_field(mc_ctx *c, const json_t *obj, const char *key, const char *name,
                               int64_t min, int64_t *out, bool *present)
{
    *present = false;
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_integer(v))
        return type_error(c, name, v, "an integer");
    json_int_t x = json_integer_value(v);
    if (x < min)
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s=%lld must be %s", c->src, name,
                          (long long)x, min == 1 ? "> 0" : ">= 0");
    if (x > MC_MAX_SIZE)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: %s=%lld is absurdly large (at most 2^40 = %lld accepted)", c->src,
                          name, (long long)x, (long long)MC_MAX_SIZE);
    *out = (int64_t)x;
    *present = true;
    return LH_OK;
}

static lh_status get_num_field(mc_ctx *c, const json_t *obj, const char *key, const char *name,
                               double *out, bool *present)
{
    *present = false;
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_number(v))
        return type_error(c, name, v, "a number");
    double x = json_number_value(v);
    if (!isfinite(x))
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s=%g must be finite", c->src, name, x);
    *out = x;
    *present = true;
    return LH_OK;
}

static lh_status get_bool_field(mc_ctx *c, const json_t *obj, const char *key, bool *out,
                                bool *present)
{
    *present = false;
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_boolean(v))
        return type_error(c, key, v, "a boolean (true or false)");
    *out = json_is_true(v);
    *present = true;
    return LH_OK;
}

static lh_status get_string_field(mc_ctx *c, const json_t *obj, const char *key,
                                  const char *name, const char **out)
{
    *out = NULL;
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_string(v))
        return type_error(c, name, v, "a string");
    *out = json_string_value(v);
    return LH_OK;
}

/* A product of named factors used by parameter counts and memory plans must fit in int64.
 * Factors that are 0 (absent) skip the check. */
typedef struct mc_factor {
    const char *name;
    int64_t value;
} mc_factor;

static lh_status check_product(mc_ctx *c, const mc_factor *f, size_t n, int64_t *out)
{
    int64_t p = 1;
    for (size_t i = 0; i < n; i++)
        if (f[i].value <= 0)
            return LH_OK;
    for (size_t i = 0; i < n; i++) {
        if (__builtin_mul_overflow(p, f[i].value, &p)) {
            char buf[512];
            size_t off = 0;
            for (size_t j = 0; j < n && off < sizeof buf; j++)
                off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s=%lld",
                                        j ? " * " : "", f[j].name, (long long)f[j].value);
            return lh_err_set(c->err, LH_E_CONFIG,
                              "%s: %s overflows a 64-bit size (impossible geometry)", c->src,
                              buf);
        }
    }
    if (out)
        *out = p;
    return LH_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* field parsing */

static lh_status parse_architectures(mc_ctx *c, lh_model_config *cfg)
{
    const json_t *v = json_object_get(cfg->root, "architectures");
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_array(v))
        return type_error(c, "architectures", v, "an array of strings");
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) {
            char name[64];
            snprintf(name, sizeof name, "architectures[%zu]", i);
            return type_error(c, name, e, "a string");
        }
    }
    if (json_array_size(v) > 0) {
        const char *a = json_string_value(json_array_get(v, 0));
        if (!*a)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: architectures[0] is an empty string",
                              c->src);
        cfg->has_architectures = true;
        cfg->geo.architecture = a;
    }
    return LH_OK;
}

static lh_status parse_dtype(mc_ctx *c, lh_model_config *cfg)
{
    const char *key = "torch_dtype";
    const json_t *v = json_object_get(cfg->root, key);
    if (!v || json_is_null(v)) {
        key = "dtype";
        v = json_object_get(cfg->root, key);
    }
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_string(v))
        return type_error(c, key, v, "a string (float32, bfloat16 or float16)");
    const char *s = json_string_value(v);
    const char *name = s;
    if (strncmp(name, "torch.", 6) == 0)
        name += 6;
    lh_dtype dt = lh_dtype_from_name(name);
    if (dt != LH_DTYPE_F32 && dt != LH_DTYPE_BF16 && dt != LH_DTYPE_F16)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: %s=\"%s\" is not a supported weight dtype; accepted: float32, "
                          "bfloat16, float16 (aliases fp32, f32, float, bf16, fp16, f16, half)",
                          c->src, key, s);
    cfg->geo.torch_dtype = dt;
    return LH_OK;
}

/* LongRoPE's per-frequency factors cap: 2^20, the kernels' largest rotary_dim. */
#define MC_MAX_ROPE_FACTORS ((size_t)1 << 20)

/* One of longrope's factor arrays, `okey`.`key`: absent or null leaves *out NULL; otherwise a
 * non-empty array of finite numbers > 0 (integers accepted, as transformers does). */
static lh_status check_factor_array(mc_ctx *c, const json_t *obj, const char *okey,
                                    const char *key, const json_t **out)
{
    *out = NULL;
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return LH_OK;
    char name[96];
    snprintf(name, sizeof name, "%s.%s", okey, key);
    if (!json_is_array(v))
        return type_error(c, name, v, "an array of numbers (one per rotary frequency)");
    const size_t n = json_array_size(v);
    if (n == 0)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: %s is an empty array; it needs one number per rotary frequency "
                          "(rotary_dim / 2)",
                          c->src, name);
    if (n > MC_MAX_ROPE_FACTORS)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: %s has %zu entries, absurdly many (at most %zu accepted)", c->src,
                          name, n, MC_MAX_ROPE_FACTORS);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        char en[128];
        snprintf(en, sizeof en, "%s[%zu]", name, i);
        if (!json_is_number(e))
            return type_error(c, en, e, "a number");
        const double x = json_number_value(e);
        if (!(x > 0) || !isfinite(x))
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s=%g must be finite and > 0", c->src,
                              en, x);
    }
    *out = v;
    return LH_OK;
}

/* short_factor / long_factor of the rope object v (`key`): both or neither, the same length;
 * required when the kind is "longrope". Copied into cfg->rope_factors. */
static lh_status parse_rope_factors(mc_ctx *c, lh_model_config *cfg, const json_t *v,
                                    const char *key, bool longrope)
{
    lh_rope_scaling *rs = &cfg->geo.rope_scaling;
    const json_t *sf, *lf;
    lh_status st;
    if ((st = check_factor_array(c, v, key, "short_factor", &sf)) ||
        (st = check_factor_array(c, v, key, "long_factor", &lf)))
        return st;
    if (!sf && !lf && !longrope)
        return LH_OK;
    if (!sf || !lf)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: %s.%s is missing or null; %s needs both short_factor and "
                          "long_factor (arrays of rotary_dim / 2 numbers)",
                          c->src, key, sf ? "long_factor" : "short_factor",
                          longrope ? "rope type 'longrope'" : "longrope scaling");
    const size_t n = json_array_size(sf);
    if (json_array_size(lf) != n)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: %s.short_factor has %zu entries but %s.long_factor has %zu; "
                          "they must have the same length (rotary_dim / 2)",
                          c->src, key, n, key, json_array_size(lf));
    double *f = malloc(2 * n * sizeof(double));
    if (!f)
        return lh_err_set(c->err, LH_E_NOMEM, "%s: out of memory", c->src);
    for (size_t i = 0; i < n; i++) {
        f[i] = json_number_value(json_array_get(sf, i));
        f[n + i] = json_number_value(json_array_get(lf, i));
    }
    free(cfg->rope_factors);
    cfg->rope_factors = f;
    rs->short_factor = f;
    rs->long_factor = f + n;
    rs->n_factors = (int64_t)n;
    return LH_OK;
}

/* RoPE settings: `key` is "rope_scaling" (transformers 4 and most Hub checkpoints) or
 * "rope_parameters" (transformers 5, which also moves rope_theta inside it).
 * LongRoPE (Phi-3): short_factor / long_factor arrays (see parse_rope_factors); its
 * original_max_position_embeddings comes from the rope object, or else from the top level of
 * the config, where Phi-3 checkpoints written by transformers 4 keep it (transformers 5 writes
 * it into rope_parameters as well). */
static lh_status parse_rope_object(mc_ctx *c, lh_model_config *cfg, const char *key)
{
    lh_rope_scaling *rs = &cfg->geo.rope_scaling;
    const json_t *v = json_object_get(cfg->root, key);
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_object(v))
        return type_error(c, key, v, "an object or null");
    char fname[96];
    lh_status st;
    const char *kind = NULL;
    /* "rope_type" is the current spelling, "type" the legacy one */
    const char *kind_key =
        json_object_get(v, "rope_type") && !json_is_null(json_object_get(v, "rope_type"))
            ? "rope_type"
            : "type";
    snprintf(fname, sizeof fname, "%s.%s", key, kind_key);
    st = get_string_field(c, v, kind_key, fname, &kind);
    if (st)
        return st;
    rs->kind = kind;
    bool p;
    snprintf(fname, sizeof fname, "%s.factor", key);
    if ((st = get_num_field(c, v, "factor", fname, &rs->factor, &p)))
        return st;
    if (p && !(rs->factor > 0))
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s=%g must be > 0", c->src, fname,
                          rs->factor);
    if (strcmp(key, "rope_parameters") == 0) {
        lh_model_geometry *g = &cfg->geo;
        if ((st = get_num_field(c, v, "rope_theta", "rope_parameters.rope_theta", &g->rope_theta,
                                &p)))
            return st;
        if (p && !(g->rope_theta > 0))
            return lh_err_set(c->err, LH_E_CONFIG, "%s: rope_parameters.rope_theta=%g must be > 0",
                              c->src, g->rope_theta);
    }
    static const struct {
        const char *key;
        size_t off;
    } nums[] = {
        {"low_freq_factor", offsetof(lh_rope_scaling, low_freq_factor)},
        {"high_freq_factor", offsetof(lh_rope_scaling, high_freq_factor)},
        {"beta_fast", offsetof(lh_rope_scaling, beta_fast)},
        {"beta_slow", offsetof(lh_rope_scaling, beta_slow)},
        {"attention_factor", offsetof(lh_rope_scaling, attention_factor)},
        {"mscale", offsetof(lh_rope_scaling, mscale)},
        {"mscale_all_dim", offsetof(lh_rope_scaling, mscale_all_dim)},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s.%s", key, nums[i].key);
        double *dst = (double *)((char *)rs + nums[i].off);
        if ((st = get_num_field(c, v, nums[i].key, name, dst, &p)))
            return st;
    }
    snprintf(fname, sizeof fname, "%s.original_max_position_embeddings", key);
    if ((st = get_int_field(c, v, "original_max_position_embeddings", fname, 1,
                            &rs->original_max_position_embeddings, &p)))
        return st;
    const bool longrope = kind && strcmp(kind, "longrope") == 0;
    if ((st = parse_rope_factors(c, cfg, v, key, longrope)))
        return st;
    if (!p && (longrope || rs->n_factors > 0))
        return get_int_field(c, cfg->root, "original_max_position_embeddings",
                             "original_max_position_embeddings", 1,
                             &rs->original_max_position_embeddings, &p);
    return LH_OK;
}

static lh_status parse_mla(mc_ctx *c, lh_model_config *cfg)
{
    lh_model_geometry *g = &cfg->geo;
    lh_status st;
    bool has_kv, has_rope, has_nope, has_v;
    if ((st = get_int_field(c, cfg->root, "q_lora_rank", "q_lora_rank", 1, &g->q_lora_rank,
                            &g->has_q_lora_rank)))
        return st;
    if ((st = get_int_field(c, cfg->root, "kv_lora_rank", "kv_lora_rank", 1, &g->kv_lora_rank,
                            &has_kv)))
        return st;
    if ((st = get_int_field(c, cfg->root, "qk_rope_head_dim", "qk_rope_head_dim", 0,
                            &g->qk_rope_head_dim, &has_rope)))
        return st;
    if ((st = get_int_field(c, cfg->root, "qk_nope_head_dim", "qk_nope_head_dim", 1,
                            &g->qk_nope_head_dim, &has_nope)))
        return st;
    if ((st = get_int_field(c, cfg->root, "v_head_dim", "v_head_dim", 1, &g->v_head_dim,
                            &has_v)))
        return st;
    g->has_mla = has_kv;
    if (has_kv) {
        const char *missing = !has_nope ? "qk_nope_head_dim"
                              : !has_v  ? "v_head_dim"
                              : !has_rope ? "qk_rope_head_dim"
                                          : NULL;
        if (missing)
            return lh_err_set(c->err, LH_E_CONFIG,
                              "%s: kv_lora_rank=%lld selects multi-head latent attention, which "
                              "also needs '%s' (missing or null)",
                              c->src, (long long)g->kv_lora_rank, missing);
    }
    return LH_OK;
}

static lh_status check_overflow(mc_ctx *c, const lh_model_config *cfg)
{
    const lh_model_geometry *g = &cfg->geo;
    lh_status st;
    int64_t embed = 0, mlp = 0, attn = 0, kv = 0, draft = 0;
    mc_factor f1[] = {{"vocab_size", g->vocab_size}, {"hidden_size", g->hidden_size}};
    if ((st = check_product(c, f1, 2, &embed)))
        return st;
    mc_factor f2[] = {{"num_hidden_layers", g->num_hidden_layers},
                      {"hidden_size", g->hidden_size},
                      {"intermediate_size", g->intermediate_size},
                      {"3", 3}};
    if ((st = check_product(c, f2, 4, &mlp)))
        return st;
    mc_factor f3[] = {{"num_hidden_layers", g->num_hidden_layers},
                      {"num_attention_heads", g->num_attention_heads},
                      {"head_dim", g->head_dim},
                      {"hidden_size", g->hidden_size}};
    if ((st = check_product(c, f3, 4, &attn)))
        return st;
    mc_factor f4[] = {{"num_hidden_layers", g->num_hidden_layers},
                      {"num_key_value_heads", g->num_key_value_heads},
                      {"head_dim", g->head_dim},
                      {"hidden_size", g->hidden_size},
                      {"2", 2}};
    if ((st = check_product(c, f4, 5, &kv)))
        return st;
    /* KV cache elements for one full-length sequence */
    mc_factor f5[] = {{"max_position_embeddings", g->max_position_embeddings},
                      {"num_hidden_layers", g->num_hidden_layers},
                      {"num_key_value_heads", g->num_key_value_heads},
                      {"head_dim", g->head_dim},
                      {"2", 2}};
    if ((st = check_product(c, f5, 5, NULL)))
        return st;
    mc_factor f6[] = {{"draft_vocab_size", g->draft_vocab_size}, {"hidden_size", g->hidden_size}};
    if ((st = check_product(c, f6, 2, &draft)))
        return st;
    if (g->has_mla) {
        int64_t qk = 0;
        if (__builtin_add_overflow(g->qk_nope_head_dim, g->qk_rope_head_dim, &qk))
            qk = INT64_MAX;
        mc_factor f7[] = {{"num_hidden_layers", g->num_hidden_layers},
                          {"num_attention_heads", g->num_attention_heads},
                          {"qk_nope_head_dim + qk_rope_head_dim", qk},
                          {g->has_q_lora_rank ? "q_lora_rank" : "hidden_size",
                           g->has_q_lora_rank ? g->q_lora_rank : g->hidden_size}};
        if ((st = check_product(c, f7, 4, NULL)))
            return st;
        int64_t nv = 0;
        if (__builtin_add_overflow(g->qk_nope_head_dim, g->v_head_dim, &nv))
            nv = INT64_MAX;
        mc_factor f8[] = {{"num_hidden_layers", g->num_hidden_layers},
                          {"kv_lora_rank", g->kv_lora_rank},
                          {"num_attention_heads", g->num_attention_heads},
                          {"qk_nope_head_dim + v_head_dim", nv}};
        if ((st = check_product(c, f8, 4, NULL)))
            return st;
    }
    /* The whole parameter count, in f32 bytes, must fit too. */
    int64_t total = 0;
    int64_t parts[] = {embed, g->tie_word_embeddings ? 0 : embed, mlp, attn, attn, kv, draft};
    bool bad = false;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        bad |= __builtin_add_overflow(total, parts[i], &total);
    bad |= __builtin_mul_overflow(total, (int64_t)4, &total);
    if (bad)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: the parameter count implied by vocab_size=%lld, hidden_size=%lld, "
                          "intermediate_size=%lld, num_hidden_layers=%lld, "
                          "num_attention_heads=%lld, head_dim=%lld overflows a 64-bit byte size",
                          c->src, (long long)g->vocab_size, (long long)g->hidden_size,
                          (long long)g->intermediate_size, (long long)g->num_hidden_layers,
                          (long long)g->num_attention_heads, (long long)g->head_dim);
    return LH_OK;
}

static lh_status parse_fields(mc_ctx *c, lh_model_config *cfg)
{
    lh_model_geometry *g = &cfg->geo;
    json_t *root = cfg->root;
    lh_status st;
    bool p;

    g->struct_size = sizeof(lh_model_geometry);
    g->rms_norm_eps = 1e-6;
    g->rope_theta = 10000.0;

    if ((st = parse_architectures(c, cfg)))
        return st;
    if ((st = get_string_field(c, root, "model_type", "model_type", &g->model_type)))
        return st;

    static const struct {
        const char *key;
        size_t off;
        size_t has_off; /* offset of a bool in lh_model_config, or 0 */
    } sizes[] = {
        {"hidden_size", offsetof(lh_model_geometry, hidden_size),
         offsetof(lh_model_config, has_hidden_size)},
        {"intermediate_size", offsetof(lh_model_geometry, intermediate_size),
         offsetof(lh_model_config, has_intermediate_size)},
        {"num_hidden_layers", offsetof(lh_model_geometry, num_hidden_layers),
         offsetof(lh_model_config, has_num_hidden_layers)},
        {"num_attention_heads", offsetof(lh_model_geometry, num_attention_heads),
         offsetof(lh_model_config, has_num_attention_heads)},
        {"vocab_size", offsetof(lh_model_geometry, vocab_size),
         offsetof(lh_model_config, has_vocab_size)},
        {"max_position_embeddings", offsetof(lh_model_geometry, max_position_embeddings), 0},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int64_t *dst = (int64_t *)((char *)g + sizes[i].off);
        if ((st = get_int_field(c, root, sizes[i].key, sizes[i].key, 1, dst, &p)))
            return st;
        if (sizes[i].has_off)
            *(bool *)((char *)cfg + sizes[i].has_off) = p;
    }

    /* heads, kv heads, head_dim */
    bool has_kv, has_hd;
    if ((st = get_int_field(c, root, "num_key_value_heads", "num_key_value_heads", 1,
                            &g->num_key_value_heads, &has_kv)))
        return st;
    if (!has_kv)
        g->num_key_value_heads = g->num_attention_heads;
    if (has_kv && cfg->has_num_attention_heads &&
        g->num_attention_heads % g->num_key_value_heads != 0)
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: num_key_value_heads=%lld does not divide num_attention_heads=%lld",
                          c->src, (long long)g->num_key_value_heads,
                          (long long)g->num_attention_heads);
    if ((st = get_int_field(c, root, "head_dim", "head_dim", 1, &g->head_dim, &has_hd)))
        return st;
    if (!has_hd && cfg->has_hidden_size && cfg->has_num_attention_heads) {
        if (g->hidden_size % g->num_attention_heads != 0)
            return lh_err_set(c->err, LH_E_CONFIG,
                              "%s: hidden_size=%lld is not divisible by num_attention_heads=%lld "
                              "and head_dim is not given",
                              c->src, (long long)g->hidden_size,
                              (long long)g->num_attention_heads);
        g->head_dim = g->hidden_size / g->num_attention_heads;
    }

    if ((st = get_num_field(c, root, "rms_norm_eps", "rms_norm_eps", &g->rms_norm_eps, &p)))
        return st;
    if (p && !(g->rms_norm_eps > 0))
        return lh_err_set(c->err, LH_E_CONFIG, "%s: rms_norm_eps=%g must be > 0", c->src,
                          g->rms_norm_eps);
    if ((st = get_num_field(c, root, "rope_theta", "rope_theta", &g->rope_theta, &p)))
        return st;
    if (p && !(g->rope_theta > 0))
        return lh_err_set(c->err, LH_E_CONFIG, "%s: rope_theta=%g must be > 0", c->src,
                          g->rope_theta);
    /* transformers 5 writes rope_parameters (with rope_theta inside); older files rope_scaling */
    const json_t *rope_params = json_object_get(root, "rope_parameters");
    if ((st = parse_rope_object(c, cfg, rope_params && !json_is_null(rope_params)
                                            ? "rope_parameters"
                                            : "rope_scaling")))
        return st;

    if ((st = get_bool_field(c, root, "tie_word_embeddings", &g->tie_word_embeddings, &p)))
        return st;
    if ((st = get_bool_field(c, root, "attention_bias", &g->attention_bias, &p)))
        return st;
    if ((st = parse_dtype(c, cfg)))
        return st;
    if ((st = parse_mla(c, cfg)))
        return st;

    bool use_sw = true, has_use_sw;
    if ((st = get_bool_field(c, root, "use_sliding_window", &use_sw, &has_use_sw)))
        return st;
    /* A window the config itself switches off is no window, and its value is not validated
     * as if it were used (transformers' Qwen2-MoE writes sliding_window 0 beside
     * use_sliding_window false); only its type is. Whether an absent use_sliding_window means
     * on (Mistral) or off (Qwen2/Qwen3, whose transformers configs default it to false) is the
     * architecture's rule: its plugin decides per layer. */
    if (has_use_sw && !use_sw) {
        const json_t *sw = json_object_get(root, "sliding_window");
        if (sw && !json_is_null(sw) && !json_is_integer(sw))
            return type_error(c, "sliding_window", sw, "an integer");
        g->sliding_window = 0;
    } else if ((st = get_int_field(c, root, "sliding_window", "sliding_window", 1,
                                   &g->sliding_window, &p))) {
        return st;
    }
    if ((st = get_int_field(c, root, "attention_chunk_size", "attention_chunk_size", 1,
                            &g->attention_chunk_size, &p)))
        return st;
    if ((st = get_int_field(c, root, "draft_vocab_size", "draft_vocab_size", 1,
                            &g->draft_vocab_size, &g->has_draft_vocab_size)))
        return st;

    return check_overflow(c, cfg);
}

/* ------------------------------------------------------------------------------------------ */
/* load / parse / free */

static lh_status parse_buffer(const char *text, size_t len, const char *path, const char *dir,
                              lh_model_config **out, lh_err *err)
{
    *out = NULL;
    lh_model_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    cfg->path = lh_strdup(path);
    cfg->dir = lh_strdup(dir);
    if (!cfg->path || (dir && !cfg->dir)) {
        lh_model_config_free(cfg);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    }
    /* a UTF-8 byte order mark (some editors write one) is not JSON; skip it */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        text += 3;
        len -= 3;
    }
    json_error_t jerr;
    cfg->root = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!cfg->root) {
        lh_err_set(err, LH_E_CONFIG, "%s:%d:%d: JSON syntax error: %s", path,
                   jerr.line > 0 ? jerr.line : 1, jerr.column > 0 ? jerr.column : 1,
                   jerr.text);
        lh_model_config_free(cfg);
        return LH_E_CONFIG;
    }
    if (!json_is_object(cfg->root)) {
        lh_err_set(err, LH_E_CONFIG, "%s: the top level must be a JSON object, got %s", path,
                   json_kind(cfg->root));
        lh_model_config_free(cfg);
        return LH_E_CONFIG;
    }
    mc_ctx c = {.src = cfg->path, .err = err};
    lh_status st = parse_fields(&c, cfg);
    if (st) {
        lh_model_config_free(cfg);
        return st;
    }
    *out = cfg;
    return LH_OK;
}

lh_status lh_model_config_parse_at(const char *json_text, size_t len, const char *path,
                                   const char *dir, lh_model_config **out, lh_err *err)
{
    return parse_buffer(json_text, len, path, dir, out, err);
}

lh_status lh_model_config_parse(const char *json_text, const char *source_name,
                                lh_model_config **out, lh_err *err)
{
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_model_config_parse: out is NULL");
    *out = NULL;
    if (!source_name)
        source_name = "<string>";
    if (!json_text)
        return lh_err_set(err, LH_E_USAGE, "%s: no JSON text given", source_name);
    return parse_buffer(json_text, strlen(json_text), source_name, NULL, out, err);
}

/* config.json files are kilobytes; 64 MiB is far beyond any real one */
#define LH_MAX_CONFIG_BYTES ((size_t)64 << 20)

static lh_status read_file(const char *path, char **text, size_t *len, lh_err *err)
{
    return lh_read_text_file(path, "model config", LH_MAX_CONFIG_BYTES, LH_E_CONFIG, text, len,
                             err);
}

lh_status lh_model_config_load(const char *path, lh_model_config **out, lh_err *err)
{
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_model_config_load: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return lh_err_set(err, LH_E_USAGE, "no model path given");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lh_err_set(err, LH_E_IO, "%s: cannot open model config: %s", path,
                          strerror(errno));
    char *file = NULL, *dir = NULL;
    if (S_ISDIR(sb.st_mode)) {
        size_t l = strlen(path);
        while (l > 1 && path[l - 1] == '/')
            l--;
        file = lh_asprintf("%.*s/config.json", (int)l, path);
        dir = lh_asprintf("%.*s", (int)l, path);
    } else {
        file = lh_strdup(path);
        const char *slash = strrchr(path, '/');
        if (!slash)
            dir = lh_strdup(".");
        else if (slash == path)
            dir = lh_strdup("/");
        else
            dir = lh_asprintf("%.*s", (int)(slash - path), path);
    }
    if (!file || !dir) {
        free(file);
        free(dir);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    }
    char *text = NULL;
    size_t len = 0;
    lh_status st = read_file(file, &text, &len, err);
    if (st == LH_OK)
        st = parse_buffer(text, len, file, dir, out, err);
    free(text);
    free(file);
    free(dir);
    return st;
}

void lh_model_config_free(lh_model_config *cfg)
{
    if (!cfg)
        return;
    json_decref(cfg->root);
    lh_gguf_close(cfg->gguf);
    free(cfg->rope_factors);
    free(cfg->path);
    free(cfg->dir);
    free(cfg);
}

/* ------------------------------------------------------------------------------------------ */
/* getters */

/* Walks a dotted path ("rope_scaling.factor"; numeric segments index arrays). NULL when a
 * segment is missing. */
static const json_t *lookup(const lh_model_config *cfg, const char *key)
{
    if (!cfg || !cfg->root || !key || !*key)
        return NULL;
    const json_t *cur = cfg->root;
    const char *s = key;
    char seg[256];
    while (cur) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        if (n == 0 || n >= sizeof seg)
            return NULL;
        memcpy(seg, s, n);
        seg[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            errno = 0;
            unsigned long long idx = strtoull(seg, &end, 10);
            if (*end || errno || !isdigit((unsigned char)seg[0]))
                return NULL;
            cur = json_array_get(cur, (size_t)idx);
        } else {
            return NULL;
        }
        if (!dot)
            return cur;
        s = dot + 1;
    }
    return NULL;
}

int lh_model_config_get_int(const lh_model_config *cfg, const char *key, int64_t *out)
{
    const json_t *v = lookup(cfg, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return -1;
    if (out)
        *out = (int64_t)json_integer_value(v);
    return 1;
}

int lh_model_config_get_double(const lh_model_config *cfg, const char *key, double *out)
{
    const json_t *v = lookup(cfg, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return -1;
    if (out)
        *out = json_number_value(v);
    return 1;
}

int lh_model_config_get_bool(const lh_model_config *cfg, const char *key, bool *out)
{
    const json_t *v = lookup(cfg, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return -1;
    if (out)
        *out = json_is_true(v);
    return 1;
}

int lh_model_config_get_string(const lh_model_config *cfg, const char *key, const char **out)
{
    const json_t *v = lookup(cfg, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return -1;
    if (out)
        *out = json_string_value(v);
    return 1;
}

const lh_model_geometry *lh_model_config_geometry(const lh_model_config *cfg)
{
    return cfg ? &cfg->geo : NULL;
}
