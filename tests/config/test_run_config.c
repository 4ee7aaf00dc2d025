/* YAML run config: values and origins, every error class, CLI overrides, the validator. */
#include "config/run_config.h"

#include "api/attn_needs.h"
#include "runtime/device.h"

#include "lh_kernels.h"
#include "lh_plugin.h"
#include "runner.h"

#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *rc_path(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/run_configs/%s", lh_test_env("LH_FIXTURES"), name);
    return buf;
}

static void check_msg(const lh_err *err, const char *const *subs, const char *what)
{
    for (size_t i = 0; subs && subs[i]; i++) {
        if (!strstr(err->msg, subs[i]))
            fprintf(stderr, "\n  %s: message '%s' lacks '%s'\n", what, err->msg, subs[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(err->msg, subs[i]));
    }
}

/* Loads run_configs/NAME into a fresh rc; expects `code` and the substrings. */
static void expect_file(const char *name, lh_status code, const char *const *subs)
{
    char p[PATH_MAX];
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    lh_status st = lh_run_config_load_file(&rc, rc_path(name, p, sizeof p), &err);
    if (st != code)
        fprintf(stderr, "\n  %s: status %d, message: %s\n", name, (int)st, err.msg);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_EQUAL(err.code, code);
    check_msg(&err, subs, name);
    if (code != LH_OK) {
        /* every message carries the file name */
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, name));
    }
    lh_run_config_free(&rc);
}

#define EXPECT_FILE(name, code, ...)                                                           \
    do {                                                                                       \
        const char *const subs_[] = {__VA_ARGS__, NULL};                                       \
        expect_file((name), (code), subs_);                                                    \
    } while (0)

static void expect_string(const char *yaml, lh_status code, const char *const *subs)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    lh_status st = lh_run_config_load_string(&rc, yaml, "inline.yaml", &err);
    if (st != code)
        fprintf(stderr, "\n  for:\n%s\n  status %d, message: %s\n", yaml, (int)st, err.msg);
    CU_ASSERT_EQUAL(st, code);
    check_msg(&err, subs, yaml);
    lh_run_config_free(&rc);
}

#define EXPECT_STR(yaml, code, ...)                                                            \
    do {                                                                                       \
        const char *const subs_[] = {__VA_ARGS__, NULL};                                       \
        expect_string((yaml), (code), subs_);                                                  \
    } while (0)

static void expect_set(lh_run_config *rc, const char *kv, lh_status code,
                       const char *const *subs)
{
    lh_err err = {0};
    lh_status st = lh_run_config_set(rc, kv, &err);
    if (st != code)
        fprintf(stderr, "\n  set %s: status %d, message: %s\n", kv, (int)st, err.msg);
    CU_ASSERT_EQUAL(st, code);
    check_msg(&err, subs, kv);
}

#define EXPECT_SET(rc, kv, code, ...)                                                          \
    do {                                                                                       \
        const char *const subs_[] = {__VA_ARGS__, NULL};                                       \
        expect_set((rc), (kv), (code), subs_);                                                 \
    } while (0)

static void origin_is(const lh_run_config *rc, lh_value_origin o, const char *want)
{
    char buf[PATH_MAX + 64];
    const char *s = lh_value_origin_str(rc, o, buf, sizeof buf);
    if (!strstr(s, want))
        fprintf(stderr, "\n  origin '%s' lacks '%s'\n", s, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(s, want));
}

/* ------------------------------------------------------------------------------------------ */

static void test_defaults(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_PTR_NULL(rc.source);
    CU_ASSERT_FALSE(rc.mm_encoder_only);
    CU_ASSERT_PTR_NULL(rc.model_impl_target);
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_OFF);
    CU_ASSERT_EQUAL(rc.dtype, LH_DTYPE_INVALID);
    CU_ASSERT_EQUAL(rc.max_seq_len, 0);
    CU_ASSERT_EQUAL(rc.max_batch_size, 1);
    CU_ASSERT_EQUAL(rc.quant.scheme, LH_QUANT_NONE);
    CU_ASSERT_EQUAL(rc.quant.group_size, 128);
    CU_ASSERT_EQUAL(rc.quant.n_rules, 0);
    CU_ASSERT_EQUAL(rc.quant.n_exclude, 0);
    CU_ASSERT_EQUAL(rc.dtype_origin.kind, LH_ORIGIN_DEFAULT);
    origin_is(&rc, rc.max_batch_size_origin, "default");
    /* the keys for sparse attention, beam search, speculative decoding, mixed KV, RoPE fusion */
    CU_ASSERT_FALSE(rc.sparse.enabled);
    CU_ASSERT_EQUAL(rc.sparse.local_blocks, 1);
    CU_ASSERT_EQUAL(rc.beam_width, 1);
    CU_ASSERT_PTR_NULL(rc.speculative.mode);
    CU_ASSERT_TRUE(rc.fused_rope);
    CU_ASSERT_EQUAL(rc.fused_rope_origin.kind, LH_ORIGIN_DEFAULT);
    CU_ASSERT_EQUAL(rc.kv_cache.memory_fraction, 0.0);
    CU_ASSERT_EQUAL(rc.kv_cache.max_tokens, 0);
    CU_ASSERT_FALSE(lh_kv_cache_mixed(&rc.kv_cache));
    CU_ASSERT_FALSE(lh_kv_cache_mixed(NULL));
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_validate_with(&rc, NULL, NULL), LH_OK);

    json_t *j = lh_run_config_to_json(&rc);
    CU_ASSERT_PTR_NOT_NULL(j);
    if (j) {
        CU_ASSERT_TRUE(json_is_null(json_object_get(j, "source")));
        json_t *d = json_object_get(j, "dtype");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d, "value")), "auto");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d, "origin")), "default");
        json_t *mi = json_object_get(j, "model_impl");
        CU_ASSERT_TRUE(json_is_null(json_object_get(mi, "target")));
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(mi, "mode")), "off");
        json_t *q = json_object_get(j, "quant");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(q, "scheme")), "none");
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(q, "group_size")), 128);
        CU_ASSERT_EQUAL(json_array_size(json_object_get(q, "rules")), 0);
        json_t *kv = json_object_get(j, "kv_cache");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(kv, "k_dtype")), "auto");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(kv, "v_dtype")), "auto");
        CU_ASSERT_TRUE(json_is_null(json_object_get(kv, "memory_fraction")));
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(kv, "max_tokens")), 0);
        CU_ASSERT_TRUE(json_is_false(json_object_get(kv, "mixed_precision")));
        json_t *sp = json_object_get(j, "sparse_attention");
        CU_ASSERT_TRUE(json_is_false(json_object_get(sp, "enabled")));
        CU_ASSERT_TRUE(json_is_null(json_object_get(sp, "algorithm")));
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(j, "beam_width"),
                                                           "value")),
                        1);
        CU_ASSERT_TRUE(json_is_null(json_object_get(json_object_get(j, "speculative"), "mode")));
        CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(j, "fused_rope"), "value")));
        json_decref(j);
    }
    lh_run_config_free(&rc);
}

static void test_full_file(void)
{
    char p[PATH_MAX];
    rc_path("full.yaml", p, sizeof p);
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    lh_status st = lh_run_config_load_file(&rc, p, &err);
    if (st)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT_STRING_EQUAL(rc.source, p);
    CU_ASSERT_FALSE(rc.mm_encoder_only);
    CU_ASSERT_EQUAL(rc.mm_encoder_only_origin.kind, LH_ORIGIN_YAML);
    CU_ASSERT_EQUAL(rc.mm_encoder_only_origin.line, 2);
    CU_ASSERT_EQUAL(rc.mm_encoder_only_origin.column, 18);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "transformers");
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_REQUIRE);
    CU_ASSERT_EQUAL(rc.model_impl_origin.line, 4);
    CU_ASSERT_EQUAL(rc.model_impl_origin.column, 11);
    CU_ASSERT_EQUAL(rc.dtype, LH_DTYPE_BF16);
    CU_ASSERT_EQUAL(rc.dtype_origin.line, 6);
    CU_ASSERT_EQUAL(rc.dtype_origin.column, 8);
    CU_ASSERT_EQUAL(rc.max_seq_len, 8192);
    CU_ASSERT_EQUAL(rc.max_seq_len_origin.line, 7);
    CU_ASSERT_EQUAL(rc.max_batch_size, 4);
    CU_ASSERT_EQUAL(rc.max_batch_size_origin.line, 8);
    CU_ASSERT_EQUAL(rc.quant.scheme, LH_QUANT_INT4);
    CU_ASSERT_EQUAL(rc.quant.group_size, 64);
    CU_ASSERT_EQUAL(rc.quant.origin.line, 10);
    CU_ASSERT_EQUAL_FATAL(rc.quant.n_rules, 3);
    CU_ASSERT_STRING_EQUAL(rc.quant.rules[0].pattern, "model.layers.*.mlp.*");
    CU_ASSERT_EQUAL(rc.quant.rules[0].scheme, LH_QUANT_INT8);
    CU_ASSERT_EQUAL(rc.quant.rules[0].origin.kind, LH_ORIGIN_YAML);
    CU_ASSERT_EQUAL(rc.quant.rules[0].origin.line, 13);
    CU_ASSERT_EQUAL(rc.quant.rules[0].origin.column, 7);
    CU_ASSERT_STRING_EQUAL(rc.quant.rules[1].pattern, "model.layers.0.*");
    CU_ASSERT_EQUAL(rc.quant.rules[1].scheme, LH_QUANT_NONE);
    CU_ASSERT_STRING_EQUAL(rc.quant.rules[2].pattern, "*.self_attn.o_proj");
    CU_ASSERT_EQUAL(rc.quant.rules[2].scheme, LH_QUANT_INT4);
    CU_ASSERT_EQUAL(rc.quant.rules[2].group_size, 32);
    CU_ASSERT_EQUAL(rc.quant.rules[0].group_size, 64); /* inherits quant.group_size */
    CU_ASSERT_EQUAL_FATAL(rc.quant.n_exclude, 2);
    CU_ASSERT_STRING_EQUAL(rc.quant.exclude_modules[0], "lm_head");
    CU_ASSERT_STRING_EQUAL(rc.quant.exclude_modules[1], "model.embed_tokens");
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_OK);

    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "%s:6:8", p);
    origin_is(&rc, rc.dtype_origin, want);

    json_t *j = lh_run_config_to_json(&rc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "source")), p);
    json_t *d = json_object_get(j, "dtype");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d, "value")), "bfloat16");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d, "origin")), want);
    json_t *mi = json_object_get(j, "model_impl");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(mi, "target")), "transformers");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(mi, "mode")), "require");
    json_t *ms = json_object_get(j, "max_seq_len");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(ms, "value")), 8192);
    json_t *me = json_object_get(j, "mm_encoder_only");
    CU_ASSERT_TRUE(json_is_false(json_object_get(me, "value")));
    json_t *q = json_object_get(j, "quant");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(q, "scheme")), "int4");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(q, "group_size")), 64);
    json_t *rules = json_object_get(q, "rules");
    CU_ASSERT_EQUAL(json_array_size(rules), 3);
    json_t *r2 = json_array_get(rules, 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r2, "pattern")),
                           "*.self_attn.o_proj");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r2, "scheme")), "int4");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(r2, "group_size")), 32);
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(r2, "origin")), ":17:7"));
    json_t *ex = json_object_get(q, "exclude_modules");
    CU_ASSERT_EQUAL(json_array_size(ex), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(ex, 1)), "model.embed_tokens");
    json_decref(j);
    lh_run_config_free(&rc);
    /* free leaves the struct in its initial state: free again and re-init are both fine */
    CU_ASSERT_PTR_NULL(rc.source);
    CU_ASSERT_EQUAL(rc.quant.n_rules, 0);
    lh_run_config_free(&rc);
    lh_run_config_init(&rc);
    lh_run_config_free(&rc);
}

static void test_empty_files(void)
{
    EXPECT_FILE("empty.yaml", LH_OK, NULL);
    EXPECT_FILE("comments-only.yaml", LH_OK, NULL);
    EXPECT_STR("---\n", LH_OK, NULL);
    EXPECT_STR("", LH_OK, NULL);
    /* an empty file leaves what was there */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "dtype=float16", NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "", NULL, NULL), LH_OK);
    CU_ASSERT_EQUAL(rc.dtype, LH_DTYPE_F16);
    CU_ASSERT_STRING_EQUAL(rc.source, "<string>");
    lh_run_config_free(&rc);
}

static void test_io_error(void)
{
    char p[PATH_MAX];
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_run_config_load_file(&rc, rc_path("nope.yaml", p, sizeof p), &err),
                    LH_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "nope.yaml"));
    CU_ASSERT_EQUAL(lh_run_config_load_file(&rc, NULL, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, NULL, "x", &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_run_config_validate(NULL, &err), LH_E_USAGE);
    lh_run_config_free(&rc);
}

/* ------------------------------------------------------------------------------------------ */
/* error classes, from fixtures */

static void test_unknown_keys(void)
{
    EXPECT_FILE("unknown-key.yaml", LH_E_CONFIG, "unknown-key.yaml:2:1: unknown key 'dtyp'",
                "(did you mean 'dtype'?)", "known keys: mm_encoder_only, model_impl, dtype, "
                                           "max_seq_len, max_batch_size, quant");
    EXPECT_FILE("unknown-nested-key.yaml", LH_E_CONFIG,
                ":3:3: unknown key 'exclude_module' in quant",
                "(did you mean 'exclude_modules'?)", "known keys: scheme, group_size, rules, "
                                                     "exclude_modules");
    EXPECT_FILE("unknown-rule-key.yaml", LH_E_CONFIG,
                ":5:7: unknown key 'schema' in quant.rules[0]", "did you mean 'scheme'?",
                "known keys: pattern, scheme, group_size");
    /* no suggestion when nothing is close */
    EXPECT_STR("completely_different: 1\n", LH_E_CONFIG,
               "inline.yaml:1:1: unknown key 'completely_different'; known keys:");
    EXPECT_STR("model_impl:\n  taget: x\n", LH_E_CONFIG, ":2:3: unknown key 'taget' in model_impl",
               "did you mean 'target'?");
}

static void test_duplicate_key(void)
{
    EXPECT_FILE("duplicate-key.yaml", LH_E_CONFIG, "duplicate-key.yaml:3:1: duplicate key 'dtype'",
                "first given at 1:1");
    EXPECT_STR("quant:\n  scheme: int8\n  scheme: fp8\n", LH_E_CONFIG, ":3:3: duplicate key "
                                                                      "'scheme'",
               "first given at 2:3");
}

static void test_syntax_errors(void)
{
    EXPECT_FILE("syntax-error.yaml", LH_E_CONFIG, "syntax-error.yaml:4:",
                "YAML syntax error", "flow sequence");
    EXPECT_FILE("tab-indent.yaml", LH_E_CONFIG, "tab-indent.yaml:2:", "YAML syntax error");
    EXPECT_FILE("invalid-utf8.yaml", LH_E_CONFIG, "invalid-utf8.yaml:1:11:", "YAML syntax error",
                "UTF-8");
    EXPECT_STR("a: [1, 2\n", LH_E_CONFIG, "inline.yaml:", "YAML syntax error");
    EXPECT_STR("key: 'unterminated\n", LH_E_CONFIG, "YAML syntax error", "quoted scalar");
}

static void test_structure_errors(void)
{
    EXPECT_FILE("root-scalar.yaml", LH_E_CONFIG, "root-scalar.yaml:1:1:", "must be a mapping",
                "just a string");
    EXPECT_FILE("root-sequence.yaml", LH_E_CONFIG, ":1:1:", "must be a mapping", "a sequence");
    EXPECT_FILE("alias.yaml", LH_E_CONFIG, "alias.yaml:4:7:", "anchors", "not supported");
    EXPECT_STR("dtype: &x bfloat16\n", LH_E_CONFIG, ":1:8:", "anchors (&x)");
    EXPECT_STR("a: &x 1\nb: *x\n", LH_E_CONFIG, ":1:4:", "anchors");
    EXPECT_FILE("multi-doc.yaml", LH_E_CONFIG, "multi-doc.yaml:2:1:", "more than one YAML document");
    EXPECT_FILE("bad-tag.yaml", LH_E_CONFIG, "bad-tag.yaml:1:8:", "tag '!custom'");
    EXPECT_STR("? [a, b]\n: 1\n", LH_E_CONFIG, ":1:3:", "mapping key must be a plain scalar");
    EXPECT_FILE("non-scalar.yaml", LH_E_CONFIG, "non-scalar.yaml:2:3: dtype:", "expected one of "
                                                                               "auto",
                "got a sequence");
    EXPECT_FILE("null-value.yaml", LH_E_CONFIG, ":1:7: dtype:", "got no value (null)");
    EXPECT_FILE("quant-not-mapping.yaml", LH_E_CONFIG, ":1:8: quant:", "expected a mapping",
                "'int8'");
    EXPECT_FILE("model-impl-scalar.yaml", LH_E_CONFIG, ":1:13: model_impl:",
                "expected a mapping {target: NAME, mode: off|auto|require}", "'transformers'");
    /* core tags resolve */
    EXPECT_STR("max_seq_len: !!int 4096\ndtype: !!str bfloat16\n", LH_OK, NULL);
    EXPECT_STR("max_seq_len: !!str 4096\n", LH_E_CONFIG, "max_seq_len:",
               "quoted string \"4096\"");
    /* a null section is an empty section */
    EXPECT_STR("quant:\nmodel_impl: ~\n", LH_OK, NULL);
    /* deep nesting is refused, not a stack overflow */
    char deep[400];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "a: ");
    for (int i = 0; i < 100; i++)
        deep[k++] = '[';
    for (int i = 0; i < 100; i++)
        deep[k++] = ']';
    deep[k++] = '\n';
    deep[k] = '\0';
    EXPECT_STR(deep, LH_E_CONFIG, "nested more than");
}

static void test_scalar_type_errors(void)
{
    EXPECT_FILE("bad-bool.yaml", LH_E_CONFIG, "bad-bool.yaml:1:18: mm_encoder_only:",
                "'maybe' is not a boolean");
    EXPECT_FILE("quoted-int.yaml", LH_E_CONFIG, ":1:14: max_seq_len:",
                "expected a positive integer", "\"4096\"");
    EXPECT_FILE("bad-int.yaml", LH_E_CONFIG, ":1:14: max_seq_len:", "'0x1000'",
                "not a decimal integer");
    EXPECT_FILE("float-int.yaml", LH_E_CONFIG, ":1:17: max_batch_size:", "'2.5'");
    EXPECT_FILE("zero-int.yaml", LH_E_CONFIG, ":1:17: max_batch_size:", "0 must be > 0");
    EXPECT_FILE("negative-int.yaml", LH_E_CONFIG, ":1:14: max_seq_len:", "-8 must be > 0");
    EXPECT_STR("max_seq_len: 99999999999999999999\n", LH_E_CONFIG, "max_seq_len:",
               "out of range");
    EXPECT_STR("mm_encoder_only: \"true\"\n", LH_E_CONFIG, "mm_encoder_only:",
               "quoted string");
    EXPECT_STR("mm_encoder_only: [true]\n", LH_E_CONFIG, "mm_encoder_only:", "got a sequence");
    /* YAML 1.1 booleans */
    const char *truthy[] = {"true", "True", "TRUE", "yes", "Yes", "on", "On"};
    const char *falsy[] = {"false", "False", "no", "NO", "off", "Off"};
    for (size_t i = 0; i < sizeof truthy / sizeof truthy[0]; i++) {
        char y[64];
        snprintf(y, sizeof y, "mm_encoder_only: %s\n", truthy[i]);
        lh_run_config rc;
        lh_run_config_init(&rc);
        CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, y, NULL, NULL), LH_OK);
        CU_ASSERT_TRUE(rc.mm_encoder_only);
        lh_run_config_free(&rc);
    }
    for (size_t i = 0; i < sizeof falsy / sizeof falsy[0]; i++) {
        char y[64];
        snprintf(y, sizeof y, "mm_encoder_only: %s\n", falsy[i]);
        lh_run_config rc;
        lh_run_config_init(&rc);
        rc.mm_encoder_only = true;
        CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, y, NULL, NULL), LH_OK);
        CU_ASSERT_FALSE(rc.mm_encoder_only);
        lh_run_config_free(&rc);
    }
}

static void test_dtype_errors(void)
{
    EXPECT_FILE("bad-dtype.yaml", LH_E_CONFIG, "bad-dtype.yaml:1:8: dtype:",
                "'float64' is not one of auto, float32, bfloat16, float16");
    EXPECT_FILE("quant-dtype.yaml", LH_E_CONFIG, ":1:8: dtype:", "'fp8' is not a weight dtype",
                "quant");
    static const struct {
        const char *v;
        lh_dtype dt;
    } ok[] = {{"auto", LH_DTYPE_INVALID}, {"float32", LH_DTYPE_F32}, {"fp32", LH_DTYPE_F32},
              {"bf16", LH_DTYPE_BF16},    {"half", LH_DTYPE_F16},    {"\"float16\"", LH_DTYPE_F16}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char y[64];
        snprintf(y, sizeof y, "dtype: %s\n", ok[i].v);
        lh_run_config rc;
        lh_run_config_init(&rc);
        rc.dtype = LH_DTYPE_F32;
        CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, y, NULL, NULL), LH_OK);
        CU_ASSERT_EQUAL(rc.dtype, ok[i].dt);
        CU_ASSERT_EQUAL(rc.dtype_origin.kind, LH_ORIGIN_YAML);
        lh_run_config_free(&rc);
    }
}

static void test_model_impl(void)
{
    EXPECT_FILE("model-impl-bad-mode.yaml", LH_E_CONFIG, ":3:9: model_impl.mode:",
                "'always' is not one of off, auto, require");
    EXPECT_FILE("model-impl-no-target.yaml", LH_E_CONFIG, ":2:9: model_impl.mode:",
                "'require' needs model_impl.target");
    EXPECT_STR("model_impl:\n  mode: auto\n", LH_E_CONFIG, "model_impl.mode:", "'auto' needs");
    EXPECT_FILE("model-impl-empty-target.yaml", LH_E_CONFIG, ":2:11: model_impl.target:",
                "empty string");
    EXPECT_STR("model_impl:\n  target:\n", LH_E_CONFIG, "model_impl.target:", "no value");

    /* target alone: mode auto */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "model_impl:\n  target: mine\n", NULL, NULL),
                    LH_OK);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "mine");
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_AUTO);
    CU_ASSERT_EQUAL(rc.model_impl_origin.line, 2);
    /* a mode alone is fine once a target is known */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "model_impl:\n  mode: require\n", NULL, NULL),
                    LH_OK);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "mine");
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_REQUIRE);
    lh_run_config_free(&rc);

    /* mode off with a target: fine, target kept but unused */
    char p[PATH_MAX];
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_file(&rc, rc_path("model-impl-off.yaml", p, sizeof p),
                                            NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_OFF);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "transformers");
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_OK);
    lh_run_config_free(&rc);
}

static void test_quant_errors(void)
{
    EXPECT_FILE("bad-scheme.yaml", LH_E_CONFIG, ":2:11: quant.scheme:",
                "'int5' is not one of none, fp8, int8, int4");
    EXPECT_FILE("rule-bad-scheme.yaml", LH_E_CONFIG, "rule-bad-scheme.yaml:7:15: "
                                                     "quant.rules[1].scheme:",
                "'nf4' is not one of none, fp8, int8, int4");
    EXPECT_FILE("rule-missing-pattern.yaml", LH_E_CONFIG, ":3:7: quant.rules[0]:",
                "missing required key 'pattern'");
    EXPECT_FILE("rule-missing-scheme.yaml", LH_E_CONFIG, ":3:7: quant.rules[0]:",
                "missing required key 'scheme'");
    EXPECT_FILE("rule-empty-pattern.yaml", LH_E_CONFIG, ":3:16: quant.rules[0].pattern:",
                "empty string");
    EXPECT_FILE("rule-not-mapping.yaml", LH_E_CONFIG, ":3:7: quant.rules[0]:",
                "expected a mapping", "'*.q_proj'");
    EXPECT_FILE("rules-not-sequence.yaml", LH_E_CONFIG, ":3:5: quant.rules:",
                "expected a sequence", "got a mapping");
    EXPECT_FILE("group-size-non-int4.yaml", LH_E_CONFIG, ":3:15: quant.group_size:",
                "only to scheme int4", "'int8'");
    EXPECT_FILE("rule-group-size-non-int4.yaml", LH_E_CONFIG,
                ":6:19: quant.rules[0].group_size:", "only to scheme int4", "'fp8'");
    EXPECT_FILE("group-size-zero.yaml", LH_E_CONFIG, ":3:15: quant.group_size:", "must be > 0");
    EXPECT_FILE("exclude-not-string.yaml", LH_E_CONFIG, ":5:7: quant.exclude_modules[1]:",
                "got a mapping");
    EXPECT_FILE("exclude-not-sequence.yaml", LH_E_CONFIG, ":3:20: quant.exclude_modules:",
                "expected a sequence", "'lm_head'");
    EXPECT_STR("quant:\n  exclude_modules: [\"\"]\n", LH_E_CONFIG,
               "quant.exclude_modules[0]:", "empty string");
    EXPECT_STR("quant:\n  scheme: int4\n  rules: [{pattern: a, scheme: int4, group_size: 0}]\n",
               LH_E_CONFIG, "quant.rules[0].group_size:", "must be > 0");

    /* int4 default group size; rules and exclusions can be empty */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "quant:\n  scheme: int4\n  rules: []\n"
                                              "  exclude_modules:\n",
                                              NULL, NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(rc.quant.scheme, LH_QUANT_INT4);
    CU_ASSERT_EQUAL(rc.quant.group_size, 128);
    CU_ASSERT_EQUAL(rc.quant.n_rules, 0);
    /* a failed quant section leaves the previous quant config untouched */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "quant:\n  scheme: fp8\n  rules:\n"
                                              "    - {pattern: a, scheme: int8}\n"
                                              "    - {pattern: b}\n",
                                              NULL, NULL),
                    LH_E_CONFIG);
    CU_ASSERT_EQUAL(rc.quant.scheme, LH_QUANT_INT4);
    CU_ASSERT_EQUAL(rc.quant.n_rules, 0);
    /* a later file replaces rules rather than appending */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "quant:\n  rules: [{pattern: a, scheme: int8}]\n",
                                              NULL, NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "quant:\n  rules: [{pattern: b, scheme: fp8}]\n",
                                              NULL, NULL),
                    LH_OK);
    CU_ASSERT_EQUAL_FATAL(rc.quant.n_rules, 1);
    CU_ASSERT_STRING_EQUAL(rc.quant.rules[0].pattern, "b");
    CU_ASSERT_EQUAL(rc.quant.rules[0].group_size, 128);
    lh_run_config_free(&rc);
}

static void test_partial_load_no_leak(void)
{
    /* errors after strings were taken must not leak (checked under ASan) */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "model_impl: {target: a}\n"
                                              "quant:\n  exclude_modules: [x, y, [z]]\n",
                                              "p.yaml", NULL),
                    LH_E_CONFIG);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "a");
    CU_ASSERT_EQUAL(rc.quant.n_exclude, 0);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "model_impl: {target: b}\n"
                                              "quant:\n  rules: [{pattern: x, scheme: int8}, "
                                              "{pattern: y, scheme: int8, extra: 1}]\n",
                                              "p.yaml", NULL),
                    LH_E_CONFIG);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "b");
    CU_ASSERT_EQUAL(rc.quant.n_rules, 0);
    lh_run_config_free(&rc);
}

/* ------------------------------------------------------------------------------------------ */
/* CLI overrides */

static void test_set_overrides(void)
{
    char p[PATH_MAX];
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL_FATAL(lh_run_config_load_file(&rc, rc_path("full.yaml", p, sizeof p), NULL),
                          LH_OK);
    EXPECT_SET(&rc, "dtype=float16", LH_OK, NULL);
    EXPECT_SET(&rc, "max_seq_len=2048", LH_OK, NULL);
    EXPECT_SET(&rc, "max-batch-size=16", LH_OK, NULL);
    EXPECT_SET(&rc, "mm_encoder_only=true", LH_OK, NULL);
    EXPECT_SET(&rc, "model_impl=other:auto", LH_OK, NULL);
    EXPECT_SET(&rc, "quant=fp8", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.dtype, LH_DTYPE_F16);
    CU_ASSERT_EQUAL(rc.max_seq_len, 2048);
    CU_ASSERT_EQUAL(rc.max_batch_size, 16);
    CU_ASSERT_TRUE(rc.mm_encoder_only);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "other");
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_AUTO);
    CU_ASSERT_EQUAL(rc.quant.scheme, LH_QUANT_FP8);
    CU_ASSERT_EQUAL(rc.quant.n_rules, 3); /* rules stay */
    origin_is(&rc, rc.dtype_origin, "flag");
    origin_is(&rc, rc.max_seq_len_origin, "flag");
    origin_is(&rc, rc.max_batch_size_origin, "flag");
    origin_is(&rc, rc.mm_encoder_only_origin, "flag");
    origin_is(&rc, rc.model_impl_origin, "flag");
    origin_is(&rc, rc.quant.origin, "flag");
    CU_ASSERT_EQUAL(rc.dtype_origin.kind, LH_ORIGIN_FLAG);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_OK);

    json_t *j = lh_run_config_to_json(&rc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    json_t *d = json_object_get(j, "dtype");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d, "value")), "float16");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d, "origin")), "flag");
    json_t *mi = json_object_get(j, "model_impl");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(mi, "origin")), "flag");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(mi, "mode")), "auto");
    json_decref(j);

    /* model_impl forms */
    EXPECT_SET(&rc, "model_impl=tgt", LH_OK, NULL);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "tgt");
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_AUTO);
    EXPECT_SET(&rc, "model_impl=tgt2:require", LH_OK, NULL);
    CU_ASSERT_STRING_EQUAL(rc.model_impl_target, "tgt2");
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_REQUIRE);
    EXPECT_SET(&rc, "model_impl=off", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_OFF);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_OK);
    EXPECT_SET(&rc, "dtype=auto", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.dtype, LH_DTYPE_INVALID);
    EXPECT_SET(&rc, "mm_encoder_only=off", LH_OK, NULL);
    CU_ASSERT_FALSE(rc.mm_encoder_only);
    EXPECT_SET(&rc, "mm_encoder_only=1", LH_OK, NULL);
    CU_ASSERT_TRUE(rc.mm_encoder_only);
    lh_run_config_free(&rc);
}

static void test_set_errors(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    EXPECT_SET(&rc, "dtype=foo", LH_E_USAGE,
               "--dtype: 'foo' is not one of auto, float32, bfloat16, float16");
    EXPECT_SET(&rc, "dtype=int4", LH_E_USAGE, "--dtype: 'int4' is not a weight dtype", "quant");
    EXPECT_SET(&rc, "dtyp=bf16", LH_E_USAGE, "--dtyp: unknown run-config key 'dtyp'",
               "did you mean 'dtype'?", "mm_encoder_only, model_impl");
    EXPECT_SET(&rc, "max-seqlen=4", LH_E_USAGE, "--max-seqlen", "did you mean 'max_seq_len'?");
    EXPECT_SET(&rc, "max_seq_len=abc", LH_E_USAGE, "--max_seq_len: 'abc' is not a decimal "
                                                   "integer");
    EXPECT_SET(&rc, "max_batch_size=0", LH_E_USAGE, "--max_batch_size: 0 must be > 0");
    EXPECT_SET(&rc, "max_seq_len=-3", LH_E_USAGE, "--max_seq_len: -3 must be > 0");
    EXPECT_SET(&rc, "mm_encoder_only=maybe", LH_E_USAGE, "--mm_encoder_only: 'maybe' is not a "
                                                         "boolean");
    EXPECT_SET(&rc, "model_impl=x:sometimes", LH_E_USAGE, "--model_impl:",
               "'sometimes' is not one of off, auto, require");
    EXPECT_SET(&rc, "model_impl=:require", LH_E_USAGE, "--model_impl:", "names no target");
    EXPECT_SET(&rc, "quant=int5", LH_E_USAGE, "--quant: 'int5' is not one of none, fp8, int8, "
                                              "int4");
    EXPECT_SET(&rc, "dtype", LH_E_USAGE, "KEY=VALUE");
    EXPECT_SET(&rc, "=x", LH_E_USAGE, "KEY=VALUE");
    EXPECT_SET(&rc, "dtype=", LH_E_USAGE, "--dtype: no value");
    EXPECT_SET(&rc, "rules=x", LH_E_USAGE, "unknown run-config key 'rules'");
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, NULL, NULL), LH_E_USAGE);
    /* nothing changed */
    CU_ASSERT_EQUAL(rc.dtype, LH_DTYPE_INVALID);
    CU_ASSERT_EQUAL(rc.max_batch_size, 1);
    CU_ASSERT_PTR_NULL(rc.model_impl_target);
    lh_run_config_free(&rc);
}

/* flags given before a file still lose to nothing: the file is applied over what rc holds, so
 * the caller applies flags last; check that order gives flags the last word */
static void test_flag_after_yaml(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "dtype: bfloat16\nmax_seq_len: 100\n",
                                              "a.yaml", NULL),
                    LH_OK);
    origin_is(&rc, rc.dtype_origin, "a.yaml:1:8");
    origin_is(&rc, rc.max_seq_len_origin, "a.yaml:2:14");
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "dtype=float32", NULL), LH_OK);
    CU_ASSERT_EQUAL(rc.dtype, LH_DTYPE_F32);
    origin_is(&rc, rc.dtype_origin, "flag");
    origin_is(&rc, rc.max_seq_len_origin, "a.yaml:2:14");
    char buf[4];
    lh_value_origin_str(&rc, rc.max_seq_len_origin, buf, sizeof buf); /* truncates safely */
    CU_ASSERT_EQUAL(strlen(buf), 3);
    lh_run_config_free(&rc);
}

/* ------------------------------------------------------------------------------------------ */
/* validator */

static void test_validate(void)
{
    lh_run_config rc;
    lh_err err = {0};

    /* int4 group size must be even: origin named */
    char p[PATH_MAX];
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_file(&rc, rc_path("group-size-odd.yaml", p, sizeof p),
                                            NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "quant.group_size=33"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "positive even"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "group-size-odd.yaml:2:11"));
    /* switching scheme by flag makes the group size irrelevant */
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "quant=int8", NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_OK);
    lh_run_config_free(&rc);

    /* rule group size */
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "quant:\n  rules:\n"
                                              "    - {pattern: '*.o_proj', scheme: int4, "
                                              "group_size: 7}\n"
                                              "    - {pattern: '*.mlp.*', scheme: none}\n",
                                              "r.yaml", NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "quant.rules[0].group_size=7"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "r.yaml:3:7"));
    rc.quant.rules[0].group_size = 64;
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_OK); /* scheme none rule is fine */
    lh_run_config_free(&rc);

    /* seq len * batch overflow, with both origins */
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "max_seq_len: 2147483647\n", "o.yaml", NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "max_batch_size=4611686018427387904", NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max_seq_len=2147483647 (from o.yaml:1:14)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max_batch_size=4611686018427387904 (from flag)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "overflow"));
    lh_run_config_free(&rc);

    /* positions are int32 in the attention contract: max_seq_len is capped */
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "max_seq_len: 2147483648\n", "c.yaml", NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max_seq_len=2147483648 (from c.yaml:1:14)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "at most 2147483647"));
    lh_run_config_free(&rc);

    /* mode needs a target (API users can build such a struct) */
    lh_run_config_init(&rc);
    rc.model_impl_mode = LH_IMPL_REQUIRE;
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "model_impl.mode=require (from default)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "model_impl.target"));
    lh_run_config_free(&rc);

    /* mode off with a target: fine */
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "model_impl=x:off", NULL), LH_OK);
    CU_ASSERT_EQUAL(rc.model_impl_mode, LH_IMPL_OFF);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_OK);
    lh_run_config_free(&rc);

    /* structurally impossible values set through the API */
    lh_run_config_init(&rc);
    rc.dtype = LH_DTYPE_INT8;
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "dtype=int8"));
    rc.dtype = LH_DTYPE_INVALID;
    rc.max_batch_size = 0;
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max_batch_size=0"));
    rc.max_batch_size = 1;
    rc.quant.scheme = LH_QUANT_INT4;
    rc.quant.group_size = 0;
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "quant.group_size=0 (from default)"));
    lh_run_config_free(&rc);
}

static void test_names(void)
{
    CU_ASSERT_STRING_EQUAL(lh_quant_scheme_name(LH_QUANT_NONE), "none");
    CU_ASSERT_STRING_EQUAL(lh_quant_scheme_name(LH_QUANT_FP8), "fp8");
    CU_ASSERT_STRING_EQUAL(lh_quant_scheme_name(LH_QUANT_INT8), "int8");
    CU_ASSERT_STRING_EQUAL(lh_quant_scheme_name(LH_QUANT_INT4), "int4");
    CU_ASSERT_PTR_NOT_NULL(lh_quant_scheme_name((lh_quant_scheme)42));
    lh_run_config rc;
    lh_run_config_init(&rc);
    char buf[64];
    lh_value_origin o = {.kind = LH_ORIGIN_YAML, .line = 3, .column = 5};
    CU_ASSERT_STRING_EQUAL(lh_value_origin_str(&rc, o, buf, sizeof buf), "<yaml>:3:5");
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "", "named.yaml", NULL), LH_OK);
    CU_ASSERT_STRING_EQUAL(lh_value_origin_str(&rc, o, buf, sizeof buf), "named.yaml:3:5");
    lh_run_config_free(&rc);
}

/* attn_backend is normalized when parsed; weight_placement is an enum; both are flags too */
static void test_backend_and_placement(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_PTR_NULL(rc.attn_backend);
    CU_ASSERT_EQUAL(rc.weight_placement, LH_PLACE_AUTO);
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "attn_backend: PaGed\n"
                                              "attn_backend_fallback: yes\n"
                                              "weight_placement: huge_pages\n",
                                              "b.yaml", &err),
                    LH_OK);
    CU_ASSERT_STRING_EQUAL(rc.attn_backend, "paged");
    CU_ASSERT_TRUE(rc.attn_backend_fallback);
    CU_ASSERT_EQUAL(rc.weight_placement, LH_PLACE_HUGE_PAGES);
    origin_is(&rc, rc.attn_backend_origin, "b.yaml:1:15");
    origin_is(&rc, rc.weight_placement_origin, "b.yaml:3:");
    EXPECT_SET(&rc, "attn-backend=VANILLA", LH_OK, NULL);
    CU_ASSERT_STRING_EQUAL(rc.attn_backend, "vanilla");
    origin_is(&rc, rc.attn_backend_origin, "flag");
    EXPECT_SET(&rc, "weight-placement=mmap", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.weight_placement, LH_PLACE_MMAP);
    EXPECT_SET(&rc, "weight-placement=huge", LH_E_USAGE, "--weight-placement", "huge_pages");
    EXPECT_SET(&rc, "attn_backend_fallback=maybe", LH_E_USAGE, "attn_backend_fallback");
    json_t *j = lh_run_config_to_json(&rc);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(j, "attn_backend"),
                                                             "value")),
                           "vanilla");
    json_decref(j);
    lh_run_config_free(&rc);
    EXPECT_STR("weight_placement: thp\n", LH_E_CONFIG, "weight_placement", "inline.yaml:1:",
               "huge_pages");
    EXPECT_STR("attn_backend: [a]\n", LH_E_CONFIG, "attn_backend", "inline.yaml:1:");
    EXPECT_STR("attn_backend_fallback: 3\n", LH_E_CONFIG, "attn_backend_fallback");
    EXPECT_STR("attn_backnd: x\n", LH_E_CONFIG, "did you mean 'attn_backend'");
}

static void test_kv_cache(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(rc.kv_cache.block_size, 16);
    CU_ASSERT_EQUAL(rc.kv_cache.k_dtype, LH_DTYPE_INVALID); /* auto */
    CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, LH_DTYPE_INVALID);
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "kv_cache:\n  block_size: 64\n  dtype: fp8\n"
                                              "  layout: HND\n  max_tokens: 4096\n",
                                              "kv.yaml", &err),
                    LH_OK);
    CU_ASSERT_EQUAL(rc.kv_cache.block_size, 64);
    /* dtype sets both tensors */
    CU_ASSERT_EQUAL(rc.kv_cache.k_dtype, LH_DTYPE_FP8_E4M3);
    CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, LH_DTYPE_FP8_E4M3);
    CU_ASSERT_FALSE(lh_kv_cache_mixed(&rc.kv_cache));
    origin_is(&rc, rc.kv_cache.k_dtype_origin, "kv.yaml:3:10");
    origin_is(&rc, rc.kv_cache.v_dtype_origin, "kv.yaml:3:10");
    origin_is(&rc, rc.kv_cache.block_size_origin, "kv.yaml:2:15");
    origin_is(&rc, rc.kv_cache.layout_origin, "kv.yaml:4:11");
    origin_is(&rc, rc.kv_cache.max_tokens_origin, "kv.yaml:5:15");
    origin_is(&rc, rc.kv_cache.memory_fraction_origin, "default");
    CU_ASSERT_EQUAL(rc.kv_cache.layout, 1);
    CU_ASSERT_EQUAL(rc.kv_cache.max_tokens, 4096);
    origin_is(&rc, rc.kv_cache.origin, "kv.yaml:2:");
    json_t *j = lh_run_config_to_json(&rc);
    json_t *kv = json_object_get(j, "kv_cache");
    CU_ASSERT_PTR_NULL(json_object_get(kv, "dtype")); /* replaced by k_dtype / v_dtype */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(kv, "k_dtype")), "fp8_e4m3");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(kv, "v_dtype")), "fp8_e4m3");
    CU_ASSERT_TRUE(json_is_false(json_object_get(kv, "mixed_precision")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(kv, "max_tokens")), 4096);
    CU_ASSERT_TRUE(json_is_null(json_object_get(kv, "memory_fraction")));
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(kv, "origins"), "max_tokens")),
        "kv.yaml:5:15");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(kv, "layout")), "HND");
    json_decref(j);
    lh_run_config_free(&rc);
    EXPECT_STR("kv_cache:\n  dtype: int8\n", LH_E_CONFIG, "kv_cache.dtype", "fp8");
    EXPECT_STR("kv_cache:\n  layout: NDH\n", LH_E_CONFIG, "kv_cache.layout", "HND");
    EXPECT_STR("kv_cache:\n  block_size: 0\n", LH_E_CONFIG, "kv_cache.block_size");
    EXPECT_STR("kv_cache:\n  blocksize: 4\n", LH_E_CONFIG, "did you mean 'block_size'");
    EXPECT_STR("kv_cache: 16\n", LH_E_CONFIG, "kv_cache");
}


/* ------------------------------------------------------------------------------------------ */
/* sparse attention, beam search, speculative decoding, mixed-precision KV, RoPE fusion */

static void test_new_keys_file(void)
{
    char p[PATH_MAX];
    rc_path("new-keys.yaml", p, sizeof p);
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    lh_status st = lh_run_config_load_file(&rc, p, &err);
    if (st)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    const lh_kv_cache_config *kv = &rc.kv_cache;
    /* k_dtype stands before dtype in the file and still wins for the keys */
    CU_ASSERT_EQUAL(kv->k_dtype, LH_DTYPE_FP8_E4M3);
    CU_ASSERT_EQUAL(kv->v_dtype, LH_DTYPE_BF16);
    CU_ASSERT_TRUE(lh_kv_cache_mixed(kv));
    CU_ASSERT_EQUAL(kv->k_dtype_origin.line, 3);
    CU_ASSERT_EQUAL(kv->k_dtype_origin.column, 12);
    CU_ASSERT_EQUAL(kv->v_dtype_origin.line, 4);
    CU_ASSERT_EQUAL(kv->v_dtype_origin.column, 10);
    CU_ASSERT_DOUBLE_EQUAL(kv->memory_fraction, 0.25, 1e-12);
    CU_ASSERT_EQUAL(kv->memory_fraction_origin.kind, LH_ORIGIN_YAML);
    CU_ASSERT_EQUAL(kv->memory_fraction_origin.line, 5);
    CU_ASSERT_EQUAL(kv->memory_fraction_origin.column, 20);
    CU_ASSERT_EQUAL(kv->block_size, 32);
    CU_ASSERT_EQUAL(kv->block_size_origin.line, 6);
    CU_ASSERT_EQUAL(kv->layout, 1);
    CU_ASSERT_EQUAL(kv->layout_origin.line, 7);
    CU_ASSERT_EQUAL(kv->max_tokens, 0);
    CU_ASSERT_EQUAL(kv->max_tokens_origin.kind, LH_ORIGIN_DEFAULT);
    CU_ASSERT_TRUE(rc.sparse.enabled);
    CU_ASSERT_EQUAL(rc.sparse.top_k, 8);
    CU_ASSERT_EQUAL(rc.sparse.local_blocks, 2);
    CU_ASSERT_EQUAL(rc.sparse.origin.kind, LH_ORIGIN_YAML);
    CU_ASSERT_EQUAL(rc.sparse.origin.line, 9);
    CU_ASSERT_EQUAL(rc.sparse.origin.column, 3);
    CU_ASSERT_EQUAL(rc.beam_width, 4);
    CU_ASSERT_EQUAL(rc.beam_width_origin.line, 12);
    CU_ASSERT_EQUAL(rc.beam_width_origin.column, 13);
    CU_ASSERT_STRING_EQUAL(rc.speculative.mode, "eagle3");
    CU_ASSERT_EQUAL(rc.speculative.num_tokens, 3);
    CU_ASSERT_EQUAL(rc.speculative.origin.line, 14);
    CU_ASSERT_FALSE(rc.fused_rope);
    CU_ASSERT_EQUAL(rc.fused_rope_origin.line, 16);
    CU_ASSERT_EQUAL(rc.fused_rope_origin.column, 13);

    json_t *j = lh_run_config_to_json(&rc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    json_t *jkv = json_object_get(j, "kv_cache");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(jkv, "k_dtype")), "fp8_e4m3");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(jkv, "v_dtype")), "bfloat16");
    CU_ASSERT_TRUE(json_is_true(json_object_get(jkv, "mixed_precision")));
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(jkv, "memory_fraction")), 0.25, 1e-12);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(jkv, "max_tokens")), 0);
    json_t *origins = json_object_get(jkv, "origins");
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(origins, "k_dtype")),
                                  "new-keys.yaml:3:12"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(origins, "v_dtype")),
                                  "new-keys.yaml:4:10"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(origins, "memory_fraction")),
                                  "new-keys.yaml:5:20"));
    json_t *sp = json_object_get(j, "sparse_attention");
    CU_ASSERT_TRUE(json_is_true(json_object_get(sp, "enabled")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sp, "algorithm")), "topk_blocks");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(sp, "top_k")), 8);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(sp, "local_blocks")), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(sp, "origin")), ":9:3"));
    json_t *bw = json_object_get(j, "beam_width");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(bw, "value")), 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(bw, "origin")), ":12:13"));
    json_t *sd = json_object_get(j, "speculative");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sd, "mode")), "eagle3");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(sd, "num_tokens")), 3);
    json_t *fr = json_object_get(j, "fused_rope");
    CU_ASSERT_TRUE(json_is_false(json_object_get(fr, "value")));
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(fr, "origin")), ":16:13"));
    json_decref(j);

    /* mixed-precision KV with sparse attention (the first conflict): both keys, both origins */
    char want[2 * PATH_MAX + 64];
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_EQUAL(err.code, LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "kv_cache.k_dtype=fp8_e4m3 / v_dtype=bfloat16"));
    snprintf(want, sizeof want, "k_dtype from %s:3:12, v_dtype from %s:4:10", p, p);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    snprintf(want, sizeof want, "sparse_attention (from %s:9:3)", p);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    /* one dtype by flag: no longer mixed, and every other value is fine */
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.dtype=bfloat16", NULL), LH_OK);
    CU_ASSERT_FALSE(lh_kv_cache_mixed(&rc.kv_cache));
    st = lh_run_config_validate(&rc, &err);
    if (st)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    lh_run_config_free(&rc);
    CU_ASSERT_PTR_NULL(rc.speculative.mode);
}

static void test_kv_dtypes(void)
{
    /* specific keys win over dtype, in any order; auto resolves to float32 */
    static const struct {
        const char *yaml;
        lh_dtype k, v;
        bool mixed;
    } cases[] = {
        {"kv_cache: {dtype: float16}\n", LH_DTYPE_F16, LH_DTYPE_F16, false},
        {"kv_cache: {dtype: float16, v_dtype: fp8}\n", LH_DTYPE_F16, LH_DTYPE_FP8_E4M3, true},
        {"kv_cache: {v_dtype: fp8, dtype: float16}\n", LH_DTYPE_F16, LH_DTYPE_FP8_E4M3, true},
        {"kv_cache: {k_dtype: bfloat16}\n", LH_DTYPE_BF16, LH_DTYPE_INVALID, true},
        {"kv_cache: {k_dtype: float32}\n", LH_DTYPE_F32, LH_DTYPE_INVALID, false},
        {"kv_cache: {k_dtype: auto, v_dtype: FLOAT32}\n", LH_DTYPE_INVALID, LH_DTYPE_F32, false},
        {"kv_cache: {dtype: fp8, k_dtype: fp8, v_dtype: fp8}\n", LH_DTYPE_FP8_E4M3,
         LH_DTYPE_FP8_E4M3, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lh_run_config rc;
        lh_run_config_init(&rc);
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, cases[i].yaml, "d.yaml", &err), LH_OK);
        if (rc.kv_cache.k_dtype != cases[i].k || rc.kv_cache.v_dtype != cases[i].v)
            fprintf(stderr, "\n  %s: k %d v %d\n", cases[i].yaml, (int)rc.kv_cache.k_dtype,
                    (int)rc.kv_cache.v_dtype);
        CU_ASSERT_EQUAL(rc.kv_cache.k_dtype, cases[i].k);
        CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, cases[i].v);
        CU_ASSERT_EQUAL(lh_kv_cache_mixed(&rc.kv_cache), cases[i].mixed);
        json_t *j = lh_run_config_to_json(&rc);
        CU_ASSERT_EQUAL(json_is_true(json_object_get(json_object_get(j, "kv_cache"),
                                                     "mixed_precision")),
                        cases[i].mixed);
        json_decref(j);
        lh_run_config_free(&rc);
    }
    /* the origins follow the key that set each tensor */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "kv_cache:\n  v_dtype: fp8\n  dtype: float16\n",
                                              "o.yaml", NULL),
                    LH_OK);
    origin_is(&rc, rc.kv_cache.k_dtype_origin, "o.yaml:3:10");
    origin_is(&rc, rc.kv_cache.v_dtype_origin, "o.yaml:2:12");
    /* a later file with dtype alone sets both again */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "kv_cache:\n  dtype: bfloat16\n", "p.yaml",
                                              NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(rc.kv_cache.k_dtype, LH_DTYPE_BF16);
    CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, LH_DTYPE_BF16);
    origin_is(&rc, rc.kv_cache.v_dtype_origin, "p.yaml:2:10");
    lh_run_config_free(&rc);
}

static void test_new_key_errors(void)
{
    EXPECT_FILE("kv-memory-fraction-zero.yaml", LH_E_CONFIG,
                "kv-memory-fraction-zero.yaml:2:20: kv_cache.memory_fraction:",
                "0 must be in (0, 1]");
    EXPECT_FILE("kv-memory-fraction-big.yaml", LH_E_CONFIG,
                "kv-memory-fraction-big.yaml:2:20: kv_cache.memory_fraction:",
                "1.5 must be in (0, 1]");
    EXPECT_FILE("kv-bad-v-dtype.yaml", LH_E_CONFIG, "kv-bad-v-dtype.yaml:3:12: kv_cache.v_dtype:",
                "'int8' is not one of auto, float32, bfloat16, float16, fp8");
    EXPECT_STR("kv_cache:\n  k_dtype: [fp8]\n", LH_E_CONFIG, "inline.yaml:2:12: kv_cache.k_dtype:",
               "got a sequence");
    EXPECT_STR("kv_cache:\n  memory_fraction: -0.5\n", LH_E_CONFIG,
               ":2:20: kv_cache.memory_fraction:", "-0.5 must be in (0, 1]");
    EXPECT_STR("kv_cache:\n  memory_fraction: half\n", LH_E_CONFIG,
               ":2:20: kv_cache.memory_fraction:", "'half' is not a decimal number");
    EXPECT_STR("kv_cache:\n  memory_fraction: .nan\n", LH_E_CONFIG,
               ":2:20: kv_cache.memory_fraction:", "not a decimal number");
    EXPECT_STR("kv_cache:\n  memory_fraction: inf\n", LH_E_CONFIG, "not a decimal number");
    EXPECT_STR("kv_cache:\n  memory_fraction: 0x1p-1\n", LH_E_CONFIG, "not a decimal number");
    EXPECT_STR("kv_cache:\n  memory_fraction: 0.5.5\n", LH_E_CONFIG, "'0.5.5' is not a decimal");
    EXPECT_STR("kv_cache:\n  memory_fraction: 1e-400\n", LH_E_CONFIG, "1e-400 must be in (0, 1]");
    EXPECT_STR("kv_cache:\n  memory_fraction: 1e999\n", LH_E_CONFIG, "1e999 must be in (0, 1]");
    /* the accepted spellings */
    static const struct {
        const char *v;
        double want;
    } fr[] = {{"1", 1.0}, {"1.0", 1.0}, {".5", 0.5}, {"5e-1", 0.5}, {"+0.75", 0.75},
              {"0.0001", 0.0001}};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) {
        char y[96];
        snprintf(y, sizeof y, "kv_cache:\n  memory_fraction: %s\n", fr[i].v);
        lh_run_config r;
        lh_run_config_init(&r);
        CU_ASSERT_EQUAL(lh_run_config_load_string(&r, y, NULL, NULL), LH_OK);
        CU_ASSERT_DOUBLE_EQUAL(r.kv_cache.memory_fraction, fr[i].want, 1e-12);
        lh_run_config_free(&r);
    }
    EXPECT_STR("kv_cache:\n  memory_fraction: \"0.5\"\n", LH_E_CONFIG,
               ":2:20: kv_cache.memory_fraction:", "expected a number in (0, 1]",
               "quoted string \"0.5\"");
    EXPECT_STR("kv_cache:\n  memory_fraction:\n", LH_E_CONFIG, "kv_cache.memory_fraction:",
               "no value");
    EXPECT_STR("kv_cache:\n  memory_fracton: 0.5\n", LH_E_CONFIG,
               ":2:3: unknown key 'memory_fracton' in kv_cache",
               "did you mean 'memory_fraction'?",
               "known keys: block_size, dtype, k_dtype, v_dtype, layout, max_tokens, "
               "memory_fraction");
    EXPECT_STR("kv_cache:\n  k_dtyp: fp8\n", LH_E_CONFIG, "did you mean 'k_dtype'?");

    EXPECT_FILE("sparse-bad-algorithm.yaml", LH_E_CONFIG,
                "sparse-bad-algorithm.yaml:2:14: sparse_attention.algorithm:",
                "'quest' is not one of topk_blocks");
    EXPECT_FILE("sparse-unknown-key.yaml", LH_E_CONFIG,
                "sparse-unknown-key.yaml:3:3: unknown key 'topk' in sparse_attention",
                "did you mean 'top_k'?", "known keys: algorithm, top_k, local_blocks");
    EXPECT_FILE("sparse-top-k-zero.yaml", LH_E_CONFIG,
                "sparse-top-k-zero.yaml:3:10: sparse_attention.top_k:", "0 must be > 0");
    EXPECT_STR("sparse_attention: {algorithm: topk_blocks, top_k: 2, local_blocks: -1}\n",
               LH_E_CONFIG, "inline.yaml:1:68: sparse_attention.local_blocks:", "-1 must be > 0");
    EXPECT_STR("sparse_attention: {algorithm: topk_blocks, top_k: four}\n", LH_E_CONFIG,
               ":1:51: sparse_attention.top_k:", "'four' is not a decimal integer");
    EXPECT_STR("sparse_attention:\n  top_k: 4\n", LH_E_CONFIG, "inline.yaml:2:3: sparse_attention:",
               "missing required key 'algorithm'", "topk_blocks");
    EXPECT_STR("sparse_attention:\n  algorithm: topk_blocks\n", LH_E_CONFIG,
               "inline.yaml:2:3: sparse_attention:", "missing required key 'top_k'");
    EXPECT_STR("sparse_attention: topk_blocks\n", LH_E_CONFIG,
               "inline.yaml:1:19: sparse_attention:",
               "expected a mapping", "'topk_blocks'");
    EXPECT_STR("sparse_attention: {algorithm: [topk_blocks], top_k: 1}\n", LH_E_CONFIG,
               "sparse_attention.algorithm:", "got a sequence");
    EXPECT_STR("sparse_atention: {}\n", LH_E_CONFIG, "did you mean 'sparse_attention'?");

    EXPECT_FILE("speculative-empty-mode.yaml", LH_E_CONFIG,
                "speculative-empty-mode.yaml:2:9: speculative.mode:", "an empty string");
    EXPECT_FILE("speculative-unknown-key.yaml", LH_E_CONFIG,
                "speculative-unknown-key.yaml:3:3: unknown key 'num_token' in speculative",
                "did you mean 'num_tokens'?", "known keys: mode, num_tokens");
    EXPECT_STR("speculative:\n  mode:\n  num_tokens: 2\n", LH_E_CONFIG, ":2:8: speculative.mode:",
               "no value");
    EXPECT_STR("speculative:\n  mode: mtp\n  num_tokens: 0\n", LH_E_CONFIG,
               "inline.yaml:3:15: speculative.num_tokens:", "0 must be > 0");
    EXPECT_STR("speculative:\n  mode: mtp\n  num_tokens: 1.5\n", LH_E_CONFIG,
               ":3:15: speculative.num_tokens:", "'1.5' is not a decimal integer");
    EXPECT_STR("speculative:\n  num_tokens: 2\n", LH_E_CONFIG, "inline.yaml:2:3: speculative:",
               "missing required key 'mode'");
    EXPECT_STR("speculative:\n  mode: eagle3\n", LH_E_CONFIG, "inline.yaml:2:3: speculative:",
               "missing required key 'num_tokens'");
    EXPECT_STR("speculative: [eagle3]\n", LH_E_CONFIG, ":1:14: speculative:",
               "expected a mapping", "got a sequence");
    EXPECT_STR("speculativ:\n  mode: mtp\n", LH_E_CONFIG, "did you mean 'speculative'?");

    EXPECT_FILE("beam-width-zero.yaml", LH_E_CONFIG, "beam-width-zero.yaml:1:13: beam_width:",
                "0 must be > 0");
    EXPECT_STR("beam_width: \"2\"\n", LH_E_CONFIG, ":1:13: beam_width:",
               "expected a positive integer", "quoted string");
    EXPECT_STR("beam_width: {n: 2}\n", LH_E_CONFIG, ":1:13: beam_width:", "got a mapping");
    EXPECT_STR("beam_widht: 2\n", LH_E_CONFIG, "did you mean 'beam_width'?");
    EXPECT_FILE("fused-rope-bad.yaml", LH_E_CONFIG, "fused-rope-bad.yaml:1:13: fused_rope:",
                "'sometimes' is not a boolean");
    EXPECT_STR("fused_rope: 1\n", LH_E_CONFIG, ":1:13: fused_rope:", "not a boolean");
    EXPECT_STR("fused_rop: true\n", LH_E_CONFIG, "did you mean 'fused_rope'?");
    /* the root key list names the new keys */
    EXPECT_STR("nothing_like_it: 1\n", LH_E_CONFIG, "kv_cache, sparse_attention, beam_width, "
                                                    "speculative, fused_rope");

    /* null sections are empty; sections are committed whole: a failed one leaves what was */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "sparse_attention:\nspeculative: ~\n", NULL,
                                              NULL),
                    LH_OK);
    CU_ASSERT_FALSE(rc.sparse.enabled);
    CU_ASSERT_PTR_NULL(rc.speculative.mode);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "sparse_attention: {algorithm: topk_blocks, "
                                              "top_k: 3}\n"
                                              "speculative: {mode: mtp, num_tokens: 2}\n"
                                              "kv_cache: {dtype: float16}\n",
                                              NULL, NULL),
                    LH_OK);
    CU_ASSERT_EQUAL(rc.sparse.local_blocks, 1); /* default */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "sparse_attention: {algorithm: topk_blocks, "
                                              "top_k: 5, local_blocks: 0}\n",
                                              NULL, NULL),
                    LH_E_CONFIG);
    CU_ASSERT_TRUE(rc.sparse.enabled);
    CU_ASSERT_EQUAL(rc.sparse.top_k, 3);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "speculative: {mode: eagle3, num_tokens: 0}\n",
                                              NULL, NULL),
                    LH_E_CONFIG);
    CU_ASSERT_STRING_EQUAL(rc.speculative.mode, "mtp");
    CU_ASSERT_EQUAL(rc.speculative.num_tokens, 2);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "kv_cache: {block_size: 8, v_dtype: fp8, "
                                              "memory_fraction: 2}\n",
                                              NULL, NULL),
                    LH_E_CONFIG);
    CU_ASSERT_EQUAL(rc.kv_cache.block_size, 16);
    CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, LH_DTYPE_F16);
    CU_ASSERT_EQUAL(rc.kv_cache.memory_fraction, 0.0);
    /* a later speculative section replaces the mode (checked for leaks under ASan) */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "speculative: {mode: draft_model, "
                                                   "num_tokens: 4}\n",
                                              NULL, NULL),
                    LH_OK);
    CU_ASSERT_STRING_EQUAL(rc.speculative.mode, "draft_model");
    lh_run_config_free(&rc);
}

static void test_set_new_keys(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "beam_width: 3\nfused_rope: true\n"
                                              "kv_cache: {dtype: fp8, max_tokens: 100}\n",
                                              "y.yaml", NULL),
                    LH_OK);
    origin_is(&rc, rc.beam_width_origin, "y.yaml:1:13");
    EXPECT_SET(&rc, "beam-width=2", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.beam_width, 2);
    CU_ASSERT_EQUAL(rc.beam_width_origin.kind, LH_ORIGIN_FLAG);
    EXPECT_SET(&rc, "fused_rope=false", LH_OK, NULL);
    CU_ASSERT_FALSE(rc.fused_rope);
    CU_ASSERT_EQUAL(rc.fused_rope_origin.kind, LH_ORIGIN_FLAG);
    EXPECT_SET(&rc, "fused-rope=1", LH_OK, NULL);
    CU_ASSERT_TRUE(rc.fused_rope);
    /* kv_cache.dtype sets both; the specific flags one each */
    EXPECT_SET(&rc, "kv_cache.v_dtype=bfloat16", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.k_dtype, LH_DTYPE_FP8_E4M3);
    CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, LH_DTYPE_BF16);
    origin_is(&rc, rc.kv_cache.k_dtype_origin, "y.yaml:3:19");
    origin_is(&rc, rc.kv_cache.v_dtype_origin, "flag");
    CU_ASSERT_TRUE(lh_kv_cache_mixed(&rc.kv_cache));
    EXPECT_SET(&rc, "kv-cache.k-dtype=float16", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.k_dtype, LH_DTYPE_F16);
    CU_ASSERT_EQUAL(rc.kv_cache.k_dtype_origin.kind, LH_ORIGIN_FLAG);
    EXPECT_SET(&rc, "kv_cache.dtype=auto", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.k_dtype, LH_DTYPE_INVALID);
    CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, LH_DTYPE_INVALID);
    CU_ASSERT_FALSE(lh_kv_cache_mixed(&rc.kv_cache));
    EXPECT_SET(&rc, "kv_cache.dtype=FP8", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.v_dtype, LH_DTYPE_FP8_E4M3);
    EXPECT_SET(&rc, "kv_cache.block_size=64", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.block_size, 64);
    CU_ASSERT_EQUAL(rc.kv_cache.block_size_origin.kind, LH_ORIGIN_FLAG);
    EXPECT_SET(&rc, "kv_cache.layout=hnd", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.layout, 1);
    CU_ASSERT_EQUAL(rc.kv_cache.layout_origin.kind, LH_ORIGIN_FLAG);
    CU_ASSERT_EQUAL(rc.kv_cache.origin.kind, LH_ORIGIN_FLAG);
    EXPECT_SET(&rc, "kv_cache.max_tokens=2048", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.max_tokens, 2048);
    CU_ASSERT_EQUAL(rc.kv_cache.max_tokens_origin.kind, LH_ORIGIN_FLAG);
    /* a fraction by flag over a YAML/flag max_tokens: the validator refuses both... */
    EXPECT_SET(&rc, "kv_cache.memory_fraction=0.5", LH_OK, NULL);
    CU_ASSERT_DOUBLE_EQUAL(rc.kv_cache.memory_fraction, 0.5, 1e-12);
    CU_ASSERT_EQUAL(rc.kv_cache.memory_fraction_origin.kind, LH_ORIGIN_FLAG);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_E_CONFIG);
    /* ...until the other is unset with auto */
    EXPECT_SET(&rc, "kv_cache.max_tokens=auto", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.max_tokens, 0);
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_OK);
    EXPECT_SET(&rc, "kv_cache.memory_fraction=1", LH_OK, NULL);
    CU_ASSERT_DOUBLE_EQUAL(rc.kv_cache.memory_fraction, 1.0, 1e-12);
    EXPECT_SET(&rc, "kv_cache.memory_fraction=auto", LH_OK, NULL);
    CU_ASSERT_EQUAL(rc.kv_cache.memory_fraction, 0.0);
    json_t *j = lh_run_config_to_json(&rc);
    json_t *kv = json_object_get(j, "kv_cache");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(kv, "origin")), "flag");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(kv, "origins"), "layout")), "flag");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(j, "beam_width"),
                                                             "origin")),
                           "flag");
    json_decref(j);

    /* errors: the flag named, the accepted values, nothing changed */
    lh_run_config before = rc;
    EXPECT_SET(&rc, "beam_width=0", LH_E_USAGE, "--beam_width: 0 must be > 0");
    EXPECT_SET(&rc, "beam_width=two", LH_E_USAGE, "--beam_width: 'two' is not a decimal integer");
    EXPECT_SET(&rc, "fused_rope=maybe", LH_E_USAGE, "--fused_rope: 'maybe' is not a boolean");
    EXPECT_SET(&rc, "kv_cache.dtype=int8", LH_E_USAGE,
               "--kv_cache.dtype: 'int8' is not one of auto, float32, bfloat16, float16, fp8");
    EXPECT_SET(&rc, "kv-cache.v-dtype=fp4", LH_E_USAGE, "--kv-cache.v-dtype: 'fp4' is not one of");
    EXPECT_SET(&rc, "kv_cache.k_dtype=", LH_E_USAGE, "--kv_cache.k_dtype: no value");
    EXPECT_SET(&rc, "kv_cache.layout=NDH", LH_E_USAGE, "--kv_cache.layout: 'NDH' is not one of "
                                                       "NHD, HND");
    EXPECT_SET(&rc, "kv_cache.block_size=0", LH_E_USAGE, "--kv_cache.block_size: 0 must be > 0");
    EXPECT_SET(&rc, "kv_cache.max_tokens=-5", LH_E_USAGE, "--kv_cache.max_tokens: -5 must be > 0",
               "auto");
    EXPECT_SET(&rc, "kv_cache.memory_fraction=0", LH_E_USAGE,
               "--kv_cache.memory_fraction: 0 must be in (0, 1]");
    EXPECT_SET(&rc, "kv_cache.memory_fraction=1.5", LH_E_USAGE,
               "--kv_cache.memory_fraction: 1.5 must be in (0, 1]");
    EXPECT_SET(&rc, "kv_cache.memory_fraction=nan", LH_E_USAGE,
               "--kv_cache.memory_fraction: 'nan' is not a decimal number");
    EXPECT_SET(&rc, "kv_cache.memory_fraction=0.5x", LH_E_USAGE, "not a decimal number");
    EXPECT_SET(&rc, "kv_cache.memory_fration=0.5", LH_E_USAGE,
               "unknown run-config key 'kv_cache.memory_fration'",
               "did you mean 'kv_cache.memory_fraction'?");
    EXPECT_SET(&rc, "kv_cache.v_dtyp=fp8", LH_E_USAGE, "did you mean 'kv_cache.v_dtype'?");
    EXPECT_SET(&rc, "beam=2", LH_E_USAGE, "unknown run-config key 'beam'", "beam_width",
               "kv_cache.layout");
    CU_ASSERT_EQUAL(memcmp(&before.kv_cache, &rc.kv_cache, sizeof rc.kv_cache), 0);
    CU_ASSERT_EQUAL(rc.beam_width, before.beam_width);
    CU_ASSERT_EQUAL(rc.fused_rope, before.fused_rope);
    lh_run_config_free(&rc);
}

/* Expects lh_run_config_validate_with to give `code` with the substrings. */
static void expect_validate(const lh_run_config *rc, const lh_validation_facts *facts,
                            lh_status code, const char *const *subs, const char *what)
{
    lh_err err = {0};
    lh_status st = lh_run_config_validate_with(rc, facts, &err);
    if (st != code)
        fprintf(stderr, "\n  %s: status %d, message: %s\n", what, (int)st, err.msg);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_EQUAL(err.code, code);
    check_msg(&err, subs, what);
}

#define EXPECT_VALIDATE(rc, facts, code, ...)                                                  \
    do {                                                                                       \
        const char *const subs_[] = {__VA_ARGS__, NULL};                                       \
        expect_validate((rc), (facts), (code), subs_, #rc " " #code);                          \
    } while (0)

static void load_fixture(lh_run_config *rc, const char *name, char *path, size_t n)
{
    lh_run_config_init(rc);
    lh_err err = {0};
    lh_status st = lh_run_config_load_file(rc, rc_path(name, path, n), &err);
    if (st)
        fprintf(stderr, "\n  %s: %s\n", name, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
}

static void test_validate_new_rules(void)
{
    char p[PATH_MAX], want[2 * PATH_MAX + 96];
    lh_run_config rc;

    /* memory_fraction and max_tokens both given: both keys with their origins */
    load_fixture(&rc, "kv-memory-fraction-max-tokens.yaml", p, sizeof p);
    snprintf(want, sizeof want, "kv_cache.max_tokens=4096 (from %s:3:15)", p);
    char want2[2 * PATH_MAX + 96];
    snprintf(want2, sizeof want2, "kv_cache.memory_fraction=0.5 (from %s:4:20)", p);
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, want, want2, "mutually exclusive");
    /* one from YAML, the other by flag */
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.memory_fraction=0.125", NULL), LH_OK);
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, want,
                    "kv_cache.memory_fraction=0.125 (from flag)");
    rc.kv_cache.max_tokens = 0;
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL);
    lh_run_config_free(&rc);

    /* mixed-precision KV with sparse attention, beam search, speculative decoding */
    load_fixture(&rc, "kv-mixed-sparse.yaml", p, sizeof p);
    snprintf(want, sizeof want, "k_dtype from %s:2:12, v_dtype from %s:3:12", p, p);
    snprintf(want2, sizeof want2, "cannot be combined with sparse_attention (from %s:4:19)", p);
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG,
                    "kv_cache.k_dtype=fp8_e4m3 / v_dtype=bfloat16 (mixed-precision KV", want,
                    want2, "dense attention only", "kv_cache.dtype");
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.v_dtype=fp8", NULL), LH_OK);
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL);
    lh_run_config_free(&rc);

    load_fixture(&rc, "kv-mixed-beam.yaml", p, sizeof p);
    snprintf(want2, sizeof want2, "cannot be combined with beam_width=2 (from %s:4:13)", p);
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.k_dtype=fp8_e4m3 / v_dtype=bfloat16", want2,
                    "single beam");
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "beam_width=1", NULL), LH_OK);
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL);
    lh_run_config_free(&rc);

    load_fixture(&rc, "kv-mixed-speculative.yaml", p, sizeof p);
    snprintf(want2, sizeof want2, "cannot be combined with speculative.mode=mtp (from %s:5:3)",
             p);
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.k_dtype=fp8_e4m3 / v_dtype=bfloat16", want2,
                    "speculative decoding");
    /* dtype by flag: both tensors from the same place, said once */
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.k_dtype=float16", NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.v_dtype=auto", NULL), LH_OK);
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG,
                    "kv_cache.k_dtype=float16 / v_dtype=auto (mixed-precision KV, from flag)");
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.k_dtype=float32", NULL), LH_OK);
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL); /* auto is float32: not mixed */
    lh_run_config_free(&rc);

    /* one dtype goes with all three */
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "kv_cache: {dtype: fp8}\nbeam_width: 4\n"
                                              "sparse_attention: {algorithm: topk_blocks, "
                                              "top_k: 2}\n"
                                              "speculative: {mode: eagle3, num_tokens: 2}\n",
                                              "all.yaml", NULL),
                    LH_OK);
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL);
    lh_run_config_free(&rc);

    /* impossible values set through the API */
    lh_run_config_init(&rc);
    rc.beam_width = 0;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "beam_width=0 (from default) must be >= 1");
    rc.beam_width = 1;
    rc.sparse.enabled = true;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "sparse_attention.top_k=0 (from default)");
    rc.sparse.top_k = 4;
    rc.sparse.local_blocks = 0;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "sparse_attention.local_blocks=0");
    rc.sparse.local_blocks = 1;
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL);
    char empty[] = "";
    rc.speculative.mode = empty;
    rc.speculative.num_tokens = 1;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "speculative.mode (from default) is empty");
    char mode[] = "mtp";
    rc.speculative.mode = mode;
    rc.speculative.num_tokens = 0;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "speculative.num_tokens=0");
    rc.speculative.mode = NULL;
    rc.kv_cache.memory_fraction = 1.5;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.memory_fraction=1.5 (from default) must "
                                            "be in (0, 1]");
    rc.kv_cache.memory_fraction = NAN;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.memory_fraction=nan");
    rc.kv_cache.memory_fraction = -0.25;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.memory_fraction=-0.25");
    rc.kv_cache.memory_fraction = 1.0;
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL);
    rc.kv_cache.max_tokens = -1;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.max_tokens=-1");
    rc.kv_cache.max_tokens = 0;
    rc.kv_cache.v_dtype = LH_DTYPE_INT8;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.v_dtype=int8 (from default) is not a KV "
                                            "cache dtype");
    rc.kv_cache.v_dtype = LH_DTYPE_INVALID;
    rc.kv_cache.k_dtype = (lh_dtype)99;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.k_dtype=invalid");
    rc.kv_cache.k_dtype = LH_DTYPE_INVALID;
    rc.kv_cache.layout = 2;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.layout=2");
    rc.kv_cache.layout = 0;
    rc.kv_cache.block_size = 0;
    EXPECT_VALIDATE(&rc, NULL, LH_E_CONFIG, "kv_cache.block_size=0");
    rc.kv_cache.block_size = 16;
    EXPECT_VALIDATE(&rc, NULL, LH_OK, NULL);
    lh_run_config_free(&rc);
}

/* The entry for `cap`; a missing one fails the test (and points at a blank entry). */
static const lh_attn_need *find_need(const lh_attn_need *needs, size_t n, const char *cap)
{
    static const lh_attn_need missing = {.capability = "missing"};
    for (size_t i = 0; i < n; i++)
        if (strcmp(needs[i].capability, cap) == 0)
            return &needs[i];
    fprintf(stderr, "\n  no attention need '%s'\n", cap);
    CU_FAIL("attention need missing");
    return &missing;
}

static lh_model_geometry test_geometry(void)
{
    lh_model_geometry g;
    memset(&g, 0, sizeof g);
    g.struct_size = sizeof g;
    g.architecture = "TestForCausalLM";
    g.hidden_size = 64;
    g.num_hidden_layers = 2;
    g.num_attention_heads = 4;
    g.num_key_value_heads = 2;
    g.head_dim = 16;
    return g;
}

static void test_attn_needs(void)
{
    static const struct {
        const char *cap;
        uint64_t bit;
    } order[] = {{"sliding_window", LH_ATTN_CAP_SLIDING_WINDOW}, {"chunked", LH_ATTN_CAP_CHUNKED},
                 {"mla", LH_ATTN_CAP_MLA},       {"fp8_kv", LH_ATTN_CAP_FP8_KV},
                 {"sparse", LH_ATTN_CAP_SPARSE}, {"mixed_kv", LH_ATTN_CAP_MIXED_KV},
                 {"paged_kv", LH_ATTN_CAP_PAGED_KV}};
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_attn_need needs[LH_ATTN_MAX_NEEDS];
    memset(needs, 0x5a, sizeof needs);
    size_t n = lh_attn_needs(&rc, NULL, NULL, needs);
    CU_ASSERT_EQUAL_FATAL(n, sizeof order / sizeof order[0]);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_STRING_EQUAL(needs[i].capability, order[i].cap);
        CU_ASSERT_EQUAL(needs[i].bit, order[i].bit);
        CU_ASSERT_FALSE(needs[i].needed);
        CU_ASSERT_STRING_EQUAL(needs[i].because, "");
    }
    CU_ASSERT_EQUAL(lh_attn_needs(NULL, NULL, NULL, needs), 0);

    /* a geometry with nothing special needs nothing either */
    lh_model_geometry g = test_geometry();
    n = lh_attn_needs(&rc, &g, "/m/config.json", needs);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_FALSE(needs[i].needed);

    /* the model's needs, named with the config.json they come from */
    g.sliding_window = 4096;
    g.attention_chunk_size = 8192;
    g.has_mla = true;
    g.kv_lora_rank = 512;
    n = lh_attn_needs(&rc, &g, "/models/m/config.json", needs);
    const lh_attn_need *x = find_need(needs, n, "sliding_window");
    CU_ASSERT_TRUE(x->needed);
    CU_ASSERT_STRING_EQUAL(x->because, "sliding_window=4096 in /models/m/config.json");
    x = find_need(needs, n, "chunked");
    CU_ASSERT_TRUE(x->needed);
    CU_ASSERT_STRING_EQUAL(x->because, "attention_chunk_size=8192 in /models/m/config.json");
    x = find_need(needs, n, "mla");
    CU_ASSERT_TRUE(x->needed);
    CU_ASSERT_PTR_NOT_NULL(strstr(x->because, "kv_lora_rank=512 in /models/m/config.json"));
    CU_ASSERT_FALSE(find_need(needs, n, "fp8_kv")->needed);
    CU_ASSERT_FALSE(find_need(needs, n, "sparse")->needed);
    CU_ASSERT_FALSE(find_need(needs, n, "mixed_kv")->needed);
    /* without a path the text still says where */
    lh_attn_needs(&rc, &g, NULL, needs);
    CU_ASSERT_STRING_EQUAL(needs[0].because, "sliding_window=4096 in the model's config.json");
    /* a long path is cut, visibly */
    char longpath[400];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    lh_attn_needs(&rc, &g, longpath, needs);
    CU_ASSERT_EQUAL(strlen(needs[0].because), sizeof needs[0].because - 1);
    CU_ASSERT_STRING_EQUAL(needs[0].because + sizeof needs[0].because - 4, "...");
    CU_ASSERT_PTR_NOT_NULL(strstr(needs[0].because, "sliding_window=4096 in /aaa"));

    /* the run config's needs, named with their origins */
    g = test_geometry();
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "kv_cache:\n  k_dtype: fp8\n"
                                              "sparse_attention: {algorithm: topk_blocks, "
                                              "top_k: 6}\n",
                                              "n.yaml", NULL),
                    LH_OK);
    n = lh_attn_needs(&rc, &g, "/m/config.json", needs);
    CU_ASSERT_FALSE(find_need(needs, n, "sliding_window")->needed);
    x = find_need(needs, n, "fp8_kv");
    CU_ASSERT_TRUE(x->needed);
    CU_ASSERT_STRING_EQUAL(x->because, "kv_cache.k_dtype=fp8_e4m3 (from n.yaml:2:12)");
    x = find_need(needs, n, "sparse");
    CU_ASSERT_TRUE(x->needed);
    CU_ASSERT_STRING_EQUAL(x->because, "sparse_attention=topk_blocks, top_k=6 (from n.yaml:3:19)");
    x = find_need(needs, n, "mixed_kv");
    CU_ASSERT_TRUE(x->needed);
    CU_ASSERT_STRING_EQUAL(x->because, "kv_cache.k_dtype=fp8_e4m3 / v_dtype=auto (k_dtype from "
                                       "n.yaml:2:12, v_dtype from default)");
    /* the run config's needs hold without a model too */
    n = lh_attn_needs(&rc, NULL, NULL, needs);
    CU_ASSERT_TRUE(find_need(needs, n, "fp8_kv")->needed);
    CU_ASSERT_TRUE(find_need(needs, n, "mixed_kv")->needed);
    /* values only: fp8 there, not mixed */
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.v_dtype=fp8", NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.k_dtype=float32", NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.v_dtype=fp8", NULL), LH_OK);
    n = lh_attn_needs(&rc, NULL, NULL, needs);
    CU_ASSERT_STRING_EQUAL(find_need(needs, n, "fp8_kv")->because,
                           "kv_cache.v_dtype=fp8_e4m3 (from flag)");
    CU_ASSERT_TRUE(find_need(needs, n, "mixed_kv")->needed);
    /* both fp8 */
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "kv_cache.dtype=fp8", NULL), LH_OK);
    n = lh_attn_needs(&rc, NULL, NULL, needs);
    CU_ASSERT_STRING_EQUAL(find_need(needs, n, "fp8_kv")->because,
                           "kv_cache.k_dtype/v_dtype=fp8_e4m3 (from flag)");
    CU_ASSERT_FALSE(find_need(needs, n, "mixed_kv")->needed);
    CU_ASSERT_STRING_EQUAL(find_need(needs, n, "mixed_kv")->because, "");
    lh_run_config_free(&rc);
}

/* KV settings only the host pool honours need LH_ATTN_CAP_PAGED_KV, instead of being ignored
 * by a backend with its own cache */
static void test_paged_kv_need(void)
{
    static const struct {
        const char *yaml, *because;
    } cases[] = {
        {"kv_cache: {layout: HND}\n", "kv_cache.layout=HND (from p.yaml:1:20)"},
        {"kv_cache: {block_size: 32}\n", "kv_cache.block_size=32 (from p.yaml:1:24)"},
        {"kv_cache: {max_tokens: 512}\n", "kv_cache.max_tokens=512"},
        {"kv_cache: {memory_fraction: 0.25}\n", "kv_cache.memory_fraction=0.25"},
        {"kv_cache: {dtype: bfloat16}\n", "kv_cache.k_dtype=bfloat16"},
    };
    const lh_validation_facts van = {.attn_backend = "vanilla",
                                     .attn_caps = LH_ATTN_CAP_SLIDING_WINDOW};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lh_run_config rc;
        lh_run_config_init(&rc);
        CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, cases[i].yaml, "p.yaml", NULL), LH_OK);
        EXPECT_VALIDATE(&rc, &van, LH_E_UNSUPPORTED, "'vanilla' does not support paged_kv",
                        cases[i].because, "configures the paged KV pool");
        lh_validation_facts paged = van;
        paged.attn_caps |= LH_ATTN_CAP_PAGED_KV;
        EXPECT_VALIDATE(&rc, &paged, LH_OK, NULL);
        lh_run_config_free(&rc);
    }
    /* defaults and explicit float32 ask nothing of the pool */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "kv_cache: {dtype: float32}\n", "p.yaml",
                                              NULL),
                    LH_OK);
    EXPECT_VALIDATE(&rc, &van, LH_OK, NULL);
    lh_run_config_free(&rc);
}

static void test_validate_with_caps(void)
{
    const uint64_t all = LH_ATTN_CAP_SLIDING_WINDOW | LH_ATTN_CAP_CHUNKED | LH_ATTN_CAP_MLA |
                         LH_ATTN_CAP_FP8_KV | LH_ATTN_CAP_SPARSE | LH_ATTN_CAP_MIXED_KV |
                         LH_ATTN_CAP_PAGED_KV;
    lh_run_config rc;
    lh_run_config_init(&rc);
    /* everything needed at once: no conflict among rc-only rules (one beam, no speculation) */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "kv_cache:\n  dtype: bfloat16\n  k_dtype: fp8\n",
                                              "w.yaml", NULL),
                    LH_OK);
    lh_model_geometry g = test_geometry();
    g.sliding_window = 128;
    g.attention_chunk_size = 256;
    g.has_mla = true;
    g.kv_lora_rank = 32;
    lh_validation_facts f = {.attn_backend = "paged", .attn_caps = all, .geo = &g,
                             .model_path = "/m/config.json"};
    EXPECT_VALIDATE(&rc, &f, LH_OK, NULL);

    static const struct {
        uint64_t bit;
        const char *cap, *because;
    } each[] = {
        {LH_ATTN_CAP_SLIDING_WINDOW, "sliding_window", "(because sliding_window=128 in "
                                                       "/m/config.json)"},
        {LH_ATTN_CAP_CHUNKED, "chunked", "(because attention_chunk_size=256 in /m/config.json)"},
        {LH_ATTN_CAP_MLA, "mla", "(because kv_lora_rank=32 in /m/config.json"},
        {LH_ATTN_CAP_FP8_KV, "fp8_kv", "(because kv_cache.k_dtype=fp8_e4m3 (from w.yaml:3:12))"},
        {LH_ATTN_CAP_MIXED_KV, "mixed_kv", "(because kv_cache.k_dtype=fp8_e4m3 / "
                                           "v_dtype=bfloat16 (k_dtype from w.yaml:3:12, v_dtype "
                                           "from w.yaml:2:10))"},
    };
    for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
        char head[160];
        snprintf(head, sizeof head, "attention backend 'paged' does not support %s, which this "
                                    "run needs (because",
                 each[i].cap);
        f.attn_caps = all & ~each[i].bit;
        EXPECT_VALIDATE(&rc, &f, LH_E_UNSUPPORTED, head, each[i].because,
                        "see `llmhost backends`");
    }
    /* sparse: a run without mixed KV (that conflict is an rc-only rule, checked first) */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc,
                                              "kv_cache: {dtype: float32}\n"
                                              "sparse_attention: {algorithm: topk_blocks, "
                                              "top_k: 2, local_blocks: 3}\n",
                                              "s.yaml", NULL),
                    LH_OK);
    f.geo = NULL;
    f.attn_backend = "vanilla";
    f.attn_caps = 0;
    EXPECT_VALIDATE(&rc, &f, LH_E_UNSUPPORTED,
                    "attention backend 'vanilla' does not support sparse, which this run needs "
                    "(because sparse_attention=topk_blocks, top_k=2 (from s.yaml:2:19)); see "
                    "`llmhost backends`");
    f.attn_caps = LH_ATTN_CAP_SPARSE;
    EXPECT_VALIDATE(&rc, &f, LH_OK, NULL);
    /* the model's needs are checked only with a geometry */
    f.geo = &g;
    EXPECT_VALIDATE(&rc, &f, LH_E_UNSUPPORTED, "lacks 3 capabilities", "sliding_window");
    /* several missing at once: all of them, in one message */
    f.attn_caps = LH_ATTN_CAP_SPARSE;
    EXPECT_VALIDATE(&rc, &f, LH_E_UNSUPPORTED, "'vanilla' lacks 3 capabilities this run needs: "
                    "sliding_window (because sliding_window=128 in /m/config.json); chunked "
                    "(because attention_chunk_size=256", "; mla (because kv_lora_rank=32");
    f.attn_caps = all;
    EXPECT_VALIDATE(&rc, &f, LH_OK, NULL);
    /* no backend known: the capability rules are not checked */
    f.attn_backend = NULL;
    f.attn_caps = 0;
    EXPECT_VALIDATE(&rc, &f, LH_OK, NULL);
    /* rc-only rules come first and still hold with facts */
    f.attn_backend = "paged";
    f.attn_caps = all;
    rc.beam_width = 0;
    EXPECT_VALIDATE(&rc, &f, LH_E_CONFIG, "beam_width=0");
    CU_ASSERT_EQUAL(lh_run_config_validate_with(NULL, &f, NULL), LH_E_USAGE);
    lh_run_config_free(&rc);
}


/* ------------------------------------------------------------------------------------------ */
/* device and cuda_graphs */

static void expect_device(const lh_run_config *rc, bool is_auto, lh_device_kind kind, int index)
{
    CU_ASSERT_EQUAL(rc->device_auto, is_auto);
    CU_ASSERT_EQUAL(rc->device.kind, kind);
    CU_ASSERT_EQUAL(rc->device.index, index);
}

static void test_device_values(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    expect_device(&rc, true, LH_DEVICE_CPU, 0);
    CU_ASSERT_TRUE(rc.cuda_graphs);
    CU_ASSERT_EQUAL(rc.device_origin.kind, LH_ORIGIN_DEFAULT);
    CU_ASSERT_EQUAL(rc.cuda_graphs_origin.kind, LH_ORIGIN_DEFAULT);
    char buf[64];
    CU_ASSERT_STRING_EQUAL(lh_run_device_str(&rc, buf, sizeof buf), "auto");

    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "device: cpu\ncuda_graphs: false\n", "d.yaml",
                                              NULL),
                    LH_OK);
    expect_device(&rc, false, LH_DEVICE_CPU, 0);
    CU_ASSERT_FALSE(rc.cuda_graphs);
    origin_is(&rc, rc.device_origin, "d.yaml:1:9");
    origin_is(&rc, rc.cuda_graphs_origin, "d.yaml:2:14");
    CU_ASSERT_STRING_EQUAL(lh_run_device_str(&rc, buf, sizeof buf), "cpu");
    /* cuda_graphs on the CPU is unused, not wrong */
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_OK);
    rc.cuda_graphs = true;
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, NULL), LH_OK);

    static const struct {
        const char *yaml;
        bool is_auto;
        lh_device_kind kind;
        int index;
        const char *str;
    } good[] = {
        {"device: cuda\n", false, LH_DEVICE_CUDA, 0, "cuda:0"},
        {"device: CUDA:3\n", false, LH_DEVICE_CUDA, 3, "cuda:3"},
        {"device: cuda:0\n", false, LH_DEVICE_CUDA, 0, "cuda:0"},
        {"device: \"cuda:12\"\n", false, LH_DEVICE_CUDA, 12, "cuda:12"},
        {"device: Cpu\n", false, LH_DEVICE_CPU, 0, "cpu"},
        {"device: AUTO\n", true, LH_DEVICE_CPU, 0, "auto"},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        lh_run_config r;
        lh_run_config_init(&r);
        lh_err err = {0};
        lh_status st = lh_run_config_load_string(&r, good[i].yaml, "g.yaml", &err);
        if (st != LH_OK)
            fprintf(stderr, "\n  %s: %s\n", good[i].yaml, err.msg);
        CU_ASSERT_EQUAL(st, LH_OK);
        expect_device(&r, good[i].is_auto, good[i].kind, good[i].index);
        CU_ASSERT_STRING_EQUAL(lh_run_device_str(&r, buf, sizeof buf), good[i].str);
        CU_ASSERT_EQUAL(r.device_origin.kind, LH_ORIGIN_YAML);
        json_t *j = lh_run_config_to_json(&r);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(j, "device"),
                                                                 "value")),
                               good[i].str);
        json_decref(j);
        lh_run_config_free(&r);
    }

    json_t *j = lh_run_config_to_json(&rc);
    json_t *g = json_object_get(j, "cuda_graphs");
    CU_ASSERT_TRUE(json_is_true(json_object_get(g, "value")));
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(g, "origin")),
                                  "d.yaml:2:14"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(j, "device"),
                                                             "origin")),
                           "d.yaml:1:9");
    json_decref(j);
    lh_run_config_free(&rc);
    CU_ASSERT_STRING_EQUAL(lh_device_str((lh_device){LH_DEVICE_CUDA, 7}, buf, sizeof buf),
                           "cuda:7");
    CU_ASSERT_STRING_EQUAL(lh_device_str((lh_device){LH_DEVICE_CPU, 0}, buf, sizeof buf), "cpu");
}

static void test_device_errors(void)
{
    const char *forms = "expected auto, cpu, cuda or cuda:N";
    EXPECT_STR("device: gpu\n", LH_E_CONFIG, "inline.yaml:1:9: device: 'gpu' is not a device",
               forms);
    EXPECT_STR("max_seq_len: 8\ndevice: cuda:abc\n", LH_E_CONFIG, "inline.yaml:2:9: device:",
               "'abc' is not a CUDA device ordinal", forms);
    EXPECT_STR("device: cuda:-1\n", LH_E_CONFIG, "'-1' is not a CUDA device ordinal");
    EXPECT_STR("device: cuda:+1\n", LH_E_CONFIG, "'+1' is not a CUDA device ordinal");
    EXPECT_STR("device: \"cuda:\"\n", LH_E_CONFIG, "'cuda:' is not a device", "ordinal");
    EXPECT_STR("device: cuda:1x\n", LH_E_CONFIG, "'1x' is not a CUDA device ordinal");
    EXPECT_STR("device: cuda0\n", LH_E_CONFIG, "'cuda0' is not a device", forms);
    EXPECT_STR("device: cuda:99999999999\n", LH_E_CONFIG, "out of range");
    EXPECT_STR("device: \n", LH_E_CONFIG, "inline.yaml:1:", "device", "null");
    EXPECT_STR("device: [cpu]\n", LH_E_CONFIG, "inline.yaml:1:9: device: expected one of auto, "
               "cpu, cuda or cuda:N");
    EXPECT_STR("cuda_graphs: maybe\n", LH_E_CONFIG, "inline.yaml:1:14: cuda_graphs:",
               "not a boolean");
    EXPECT_STR("cuda_graphs: \"true\"\n", LH_E_CONFIG, "cuda_graphs", "quoted");
    /* misspelled keys get a suggestion */
    EXPECT_STR("devce: cpu\n", LH_E_CONFIG, "inline.yaml:1:1: unknown key 'devce'",
               "(did you mean 'device'?)", "cuda_graphs");
    EXPECT_STR("cuda_graph: false\n", LH_E_CONFIG, "unknown key 'cuda_graph'",
               "(did you mean 'cuda_graphs'?)");
    /* a failed load leaves the earlier value */
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "device: cuda:1\n", "a.yaml", NULL), LH_OK);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "device: tpu\n", "b.yaml", NULL), LH_E_CONFIG);
    expect_device(&rc, false, LH_DEVICE_CUDA, 1);
    lh_run_config_free(&rc);
}

static void test_set_device(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "device: cpu\ncuda_graphs: false\n", "y.yaml",
                                              NULL),
                    LH_OK);
    EXPECT_SET(&rc, "device=cuda:2", LH_OK, NULL);
    expect_device(&rc, false, LH_DEVICE_CUDA, 2);
    CU_ASSERT_EQUAL(rc.device_origin.kind, LH_ORIGIN_FLAG);
    EXPECT_SET(&rc, "device=CUDA", LH_OK, NULL);
    expect_device(&rc, false, LH_DEVICE_CUDA, 0);
    EXPECT_SET(&rc, "device=auto", LH_OK, NULL);
    expect_device(&rc, true, LH_DEVICE_CPU, 0);
    EXPECT_SET(&rc, "device=cpu", LH_OK, NULL);
    expect_device(&rc, false, LH_DEVICE_CPU, 0);
    CU_ASSERT_FALSE(rc.cuda_graphs);
    EXPECT_SET(&rc, "cuda-graphs=1", LH_OK, NULL);
    CU_ASSERT_TRUE(rc.cuda_graphs);
    CU_ASSERT_EQUAL(rc.cuda_graphs_origin.kind, LH_ORIGIN_FLAG);
    EXPECT_SET(&rc, "cuda_graphs=off", LH_OK, NULL);
    CU_ASSERT_FALSE(rc.cuda_graphs);
    /* errors leave rc as it was */
    EXPECT_SET(&rc, "device=bogus", LH_E_USAGE, "--device: 'bogus' is not a device",
               "expected auto, cpu, cuda or cuda:N");
    EXPECT_SET(&rc, "device=cuda:abc", LH_E_USAGE, "--device:",
               "'abc' is not a CUDA device ordinal");
    EXPECT_SET(&rc, "device=", LH_E_USAGE, "--device: no value given");
    EXPECT_SET(&rc, "cuda_graphs=sometimes", LH_E_USAGE, "--cuda_graphs:", "not a boolean");
    EXPECT_SET(&rc, "devce=cpu", LH_E_USAGE, "unknown run-config key 'devce'",
               "(did you mean 'device'?)");
    expect_device(&rc, false, LH_DEVICE_CPU, 0);
    CU_ASSERT_FALSE(rc.cuda_graphs);
    lh_run_config_free(&rc);
}

static void test_resolve_device(void)
{
    const int n_cuda = lh_k_cuda_device_count();
    const char *unavailable = lh_k_cuda_unavailable_reason();
    CU_ASSERT_PTR_NOT_NULL(unavailable);
    /* the library's own answer must be consistent before the resolver is judged by it */
    if (n_cuda == 0)
        CU_ASSERT_TRUE(unavailable && unavailable[0]);
    if (!lh_k_cuda_built())
        CU_ASSERT_EQUAL(n_cuda, 0);

    /* the default without LLMHOST_DEVICE (the test environment sets it; restored below) */
    const char *env_saved = getenv("LLMHOST_DEVICE");
    char *env_copy = env_saved ? strdup(env_saved) : NULL;
    unsetenv("LLMHOST_DEVICE");

    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_device d = {LH_DEVICE_CUDA, 5};
    char why[512];
    lh_err err = {0};

    /* auto */
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_OK);
    if (n_cuda == 0) {
        CU_ASSERT_EQUAL(d.kind, LH_DEVICE_CPU);
        CU_ASSERT_EQUAL(d.index, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "auto: no CUDA device"));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, unavailable));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "CUDA"));
    } else {
        CU_ASSERT_EQUAL(d.kind, LH_DEVICE_CUDA);
        CU_ASSERT_EQUAL(d.index, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "CUDA device"));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "auto: "));
    }
    /* why may be NULL */
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, NULL, 0, NULL), LH_OK);

    /* cpu, from YAML and from the flag */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "max_seq_len: 8\ndevice: cpu\n", "r.yaml",
                                              NULL),
                    LH_OK);
    d = (lh_device){LH_DEVICE_CUDA, 5};
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_OK);
    CU_ASSERT_EQUAL(d.kind, LH_DEVICE_CPU);
    CU_ASSERT_EQUAL(d.index, 0);
    CU_ASSERT_STRING_EQUAL(why, "run config r.yaml:2:9");
    EXPECT_SET(&rc, "device=cpu", LH_OK, NULL);
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(why, "--device");

    /* cuda: the first device, or a refusal that says why */
    CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, "device: cuda\n", "r.yaml", NULL), LH_OK);
    lh_status st = lh_run_resolve_device(&rc, &d, why, sizeof why, &err);
    if (n_cuda == 0) {
        CU_ASSERT_EQUAL(st, LH_E_UNSUPPORTED);
        CU_ASSERT_EQUAL(err.code, LH_E_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "device cuda:0 (from run config r.yaml:1:9) is "
                                               "not available"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, unavailable));
        CU_ASSERT_EQUAL(d.kind, LH_DEVICE_CPU); /* never a device that is not there */
    } else {
        CU_ASSERT_EQUAL(st, LH_OK);
        CU_ASSERT_EQUAL(d.kind, LH_DEVICE_CUDA);
        CU_ASSERT_EQUAL(d.index, 0);
    }
    /* one past the last device is refused everywhere, naming how many there are */
    char kv[64];
    snprintf(kv, sizeof kv, "device=cuda:%d", n_cuda);
    EXPECT_SET(&rc, kv, LH_OK, NULL);
    err = (lh_err){0};
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "(from --device) is not available"));
    if (n_cuda > 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "CUDA device"));
    /* cuda:abc never gets that far: it does not parse */
    EXPECT_SET(&rc, "device=cuda:abc", LH_E_USAGE, "'abc' is not a CUDA device ordinal");

    /* structs filled by hand */
    rc.device_auto = false;
    rc.device = (lh_device){(lh_device_kind)7, 0};
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "device kind 7"));
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    rc.device = (lh_device){LH_DEVICE_CUDA, -1};
    CU_ASSERT_EQUAL(lh_run_config_validate(&rc, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "cuda:-1"));
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_E_CONFIG);
    CU_ASSERT_EQUAL(lh_run_resolve_device(NULL, &d, why, sizeof why, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, NULL, why, sizeof why, &err), LH_E_USAGE);
    lh_run_config_free(&rc);

    /* LLMHOST_DEVICE replaces the default, never a device the run config or a flag names */
    lh_run_config_init(&rc);
    setenv("LLMHOST_DEVICE", "CPU", 1);
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_OK);
    CU_ASSERT_EQUAL(d.kind, LH_DEVICE_CPU);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "LLMHOST_DEVICE=CPU"));
    setenv("LLMHOST_DEVICE", "gpu", 1);
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "LLMHOST_DEVICE: 'gpu' is not a device"));
    setenv("LLMHOST_DEVICE", "cuda:7", 1);
    if (n_cuda < 8) {
        CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_E_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "LLMHOST_DEVICE=cuda:7"));
    }
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "device=cpu", &err), LH_OK);
    CU_ASSERT_EQUAL(lh_run_resolve_device(&rc, &d, why, sizeof why, &err), LH_OK);
    CU_ASSERT_EQUAL(d.kind, LH_DEVICE_CPU);
    CU_ASSERT_PTR_NULL(strstr(why, "LLMHOST_DEVICE"));
    lh_run_config_free(&rc);
    if (env_copy)
        setenv("LLMHOST_DEVICE", env_copy, 1);
    else
        unsetenv("LLMHOST_DEVICE");
    free(env_copy);
}

static CU_TestInfo load_tests[] = {
    {"defaults", test_defaults},
    {"full file: values and origins", test_full_file},
    {"empty files", test_empty_files},
    {"io errors", test_io_error},
    {"attn_backend and weight_placement", test_backend_and_placement},
    {"kv_cache", test_kv_cache},
    {"new keys: values, origins, explain", test_new_keys_file},
    {"kv_cache k_dtype / v_dtype", test_kv_dtypes},
    {"device and cuda_graphs", test_device_values},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo error_tests[] = {
    {"unknown keys with did-you-mean", test_unknown_keys},
    {"duplicate keys", test_duplicate_key},
    {"YAML syntax errors", test_syntax_errors},
    {"structure errors", test_structure_errors},
    {"scalar type errors", test_scalar_type_errors},
    {"dtype", test_dtype_errors},
    {"model_impl", test_model_impl},
    {"quant", test_quant_errors},
    {"partial loads do not leak", test_partial_load_no_leak},
    {"new keys: bad values", test_new_key_errors},
    {"device and cuda_graphs: bad values", test_device_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo flag_tests[] = {
    {"overrides win with origin flag", test_set_overrides},
    {"override errors", test_set_errors},
    {"flag after yaml", test_flag_after_yaml},
    {"new keys by flag", test_set_new_keys},
    {"device and cuda_graphs by flag", test_set_device},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo validate_tests[] = {
    {"cross-key rules", test_validate},
    {"names", test_names},
    {"kv pool size, mixed-precision KV, decoding", test_validate_new_rules},
    {"attention needs", test_attn_needs},
    {"capabilities of the backend", test_validate_with_caps},
    {"KV settings need the paged KV pool", test_paged_kv_need},
    {"lh_run_resolve_device", test_resolve_device},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"run_config: load", NULL, NULL, NULL, NULL, load_tests},
    {"run_config: errors", NULL, NULL, NULL, NULL, error_tests},
    {"run_config: flags", NULL, NULL, NULL, NULL, flag_tests},
    {"run_config: validate", NULL, NULL, NULL, NULL, validate_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
