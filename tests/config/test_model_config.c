/* config.json → lh_model_config: good published configs, every class of bad input, getters. */
#include "config/model_config.h"
#include "runner.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char fixture_buf[PATH_MAX];

static const char *cfg_path(const char *name)
{
    snprintf(fixture_buf, sizeof fixture_buf, "%s/configs/%s", lh_test_env("LH_FIXTURES"), name);
    return fixture_buf;
}

static lh_model_config *load_ok(const char *name)
{
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    lh_status st = lh_model_config_load(cfg_path(name), &cfg, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  unexpected error loading %s: %s\n", name, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    CU_ASSERT_PTR_NOT_NULL(cfg);
    return cfg;
}

/* Parses text, expects `code` and every NULL-terminated substring in the message. */
static void expect_parse_error(const char *json, lh_status code, const char *const *subs)
{
    lh_model_config *cfg = (lh_model_config *)0x1;
    lh_err err = {0};
    lh_status st = lh_model_config_parse(json, "test.json", &cfg, &err);
    if (st != code)
        fprintf(stderr, "\n  for %s\n  got status %d (%s)\n", json, (int)st, err.msg);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT_PTR_NULL(cfg);
    for (size_t i = 0; subs && subs[i]; i++) {
        if (!strstr(err.msg, subs[i]))
            fprintf(stderr, "\n  message '%s' lacks '%s'\n", err.msg, subs[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, subs[i]));
    }
    lh_model_config_free(st == LH_OK ? cfg : NULL);
}

#define EXPECT_ERR(json, code, ...)                                                            \
    do {                                                                                       \
        const char *const subs_[] = {__VA_ARGS__, NULL};                                       \
        expect_parse_error((json), (code), subs_);                                             \
    } while (0)

static lh_model_config *parse_ok(const char *json)
{
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    lh_status st = lh_model_config_parse(json, "test.json", &cfg, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  unexpected error for %s: %s\n", json, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    return cfg;
}

/* A valid decoder base; tests append fields after it. */
#define BASE                                                                                   \
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 4096, "                      \
    "\"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "   \
    "\"vocab_size\": 128256"

/* ------------------------------------------------------------------------------------------ */
/* good configs */

static void test_llama31_8b(void)
{
    lh_model_config *cfg = load_ok("llama-3.1-8b");
    if (!cfg)
        return;
    const lh_model_geometry *g = lh_model_config_geometry(cfg);
    CU_ASSERT_EQUAL(g->struct_size, sizeof(lh_model_geometry));
    CU_ASSERT_STRING_EQUAL(g->architecture, "LlamaForCausalLM");
    CU_ASSERT_STRING_EQUAL(g->model_type, "llama");
    CU_ASSERT_TRUE(cfg->has_architectures);
    CU_ASSERT_EQUAL(g->hidden_size, 4096);
    CU_ASSERT_EQUAL(g->intermediate_size, 14336);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 32);
    CU_ASSERT_EQUAL(g->num_attention_heads, 32);
    CU_ASSERT_EQUAL(g->num_key_value_heads, 8);
    CU_ASSERT_EQUAL(g->head_dim, 128);
    CU_ASSERT_EQUAL(g->vocab_size, 128256);
    CU_ASSERT_EQUAL(g->max_position_embeddings, 131072);
    CU_ASSERT_DOUBLE_EQUAL(g->rms_norm_eps, 1e-5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_theta, 500000.0, 1e-9);
    CU_ASSERT_STRING_EQUAL(g->rope_scaling.kind, "llama3");
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.factor, 8.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.low_freq_factor, 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.high_freq_factor, 4.0, 1e-12);
    CU_ASSERT_EQUAL(g->rope_scaling.original_max_position_embeddings, 8192);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.beta_fast, 0.0, 0.0);
    CU_ASSERT_FALSE(g->tie_word_embeddings);
    CU_ASSERT_FALSE(g->attention_bias);
    CU_ASSERT_EQUAL(g->torch_dtype, LH_DTYPE_BF16);
    CU_ASSERT_FALSE(g->has_mla);
    CU_ASSERT_FALSE(g->has_q_lora_rank);
    CU_ASSERT_EQUAL(g->sliding_window, 0);
    CU_ASSERT_EQUAL(g->attention_chunk_size, 0);
    CU_ASSERT_FALSE(g->has_draft_vocab_size);
    CU_ASSERT_PTR_NOT_NULL(strstr(cfg->path, "llama-3.1-8b/config.json"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cfg->dir, "llama-3.1-8b"));
    lh_model_config_free(cfg);
}

static void test_mistral_7b(void)
{
    lh_model_config *cfg = load_ok("mistral-7b-v0.1");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_STRING_EQUAL(g->architecture, "MistralForCausalLM");
    CU_ASSERT_EQUAL(g->hidden_size, 4096);
    CU_ASSERT_EQUAL(g->intermediate_size, 14336);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 32);
    CU_ASSERT_EQUAL(g->num_attention_heads, 32);
    CU_ASSERT_EQUAL(g->num_key_value_heads, 8);
    CU_ASSERT_EQUAL(g->head_dim, 128);
    CU_ASSERT_EQUAL(g->vocab_size, 32000);
    CU_ASSERT_EQUAL(g->sliding_window, 4096);
    CU_ASSERT_EQUAL(g->max_position_embeddings, 32768);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_theta, 10000.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(g->rms_norm_eps, 1e-5, 1e-12);
    CU_ASSERT_PTR_NULL(g->rope_scaling.kind);
    CU_ASSERT_EQUAL(g->torch_dtype, LH_DTYPE_BF16);
    CU_ASSERT_FALSE(g->attention_bias); /* absent: default */
    lh_model_config_free(cfg);
}

static void test_qwen25_7b(void)
{
    lh_model_config *cfg = load_ok("qwen2.5-7b");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_STRING_EQUAL(g->architecture, "Qwen2ForCausalLM");
    CU_ASSERT_EQUAL(g->hidden_size, 3584);
    CU_ASSERT_EQUAL(g->intermediate_size, 18944);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 28);
    CU_ASSERT_EQUAL(g->num_attention_heads, 28);
    CU_ASSERT_EQUAL(g->num_key_value_heads, 4);
    CU_ASSERT_EQUAL(g->head_dim, 128);
    CU_ASSERT_EQUAL(g->vocab_size, 152064);
    CU_ASSERT_EQUAL(g->max_position_embeddings, 131072);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_theta, 1000000.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(g->rms_norm_eps, 1e-6, 1e-12);
    CU_ASSERT_EQUAL(g->sliding_window, 0); /* use_sliding_window: false */
    CU_ASSERT_FALSE(g->tie_word_embeddings);
    CU_ASSERT_EQUAL(g->torch_dtype, LH_DTYPE_BF16);
    int64_t sw = 0;
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "sliding_window", &sw), 1);
    CU_ASSERT_EQUAL(sw, 131072);
    lh_model_config_free(cfg);
}

static void test_qwen3_8b(void)
{
    lh_model_config *cfg = load_ok("qwen3-8b");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_STRING_EQUAL(g->architecture, "Qwen3ForCausalLM");
    CU_ASSERT_STRING_EQUAL(g->model_type, "qwen3");
    CU_ASSERT_EQUAL(g->hidden_size, 4096);
    CU_ASSERT_EQUAL(g->intermediate_size, 12288);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 36);
    CU_ASSERT_EQUAL(g->num_attention_heads, 32);
    CU_ASSERT_EQUAL(g->num_key_value_heads, 8);
    CU_ASSERT_EQUAL(g->head_dim, 128);
    CU_ASSERT_EQUAL(g->vocab_size, 151936);
    CU_ASSERT_EQUAL(g->max_position_embeddings, 40960);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_theta, 1000000.0, 1e-6); /* integer in the file */
    CU_ASSERT_DOUBLE_EQUAL(g->rms_norm_eps, 1e-6, 1e-12);
    CU_ASSERT_PTR_NULL(g->rope_scaling.kind); /* null */
    CU_ASSERT_EQUAL(g->sliding_window, 0);    /* null */
    CU_ASSERT_FALSE(g->attention_bias);
    CU_ASSERT_FALSE(g->tie_word_embeddings);
    CU_ASSERT_EQUAL(g->torch_dtype, LH_DTYPE_BF16);
    lh_model_config_free(cfg);
}

static void test_llama31_405b(void)
{
    lh_model_config *cfg = load_ok("llama-3.1-405b");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_STRING_EQUAL(g->architecture, "LlamaForCausalLM");
    CU_ASSERT_EQUAL(g->hidden_size, 16384);
    CU_ASSERT_EQUAL(g->intermediate_size, 53248);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 126);
    CU_ASSERT_EQUAL(g->num_attention_heads, 128);
    CU_ASSERT_EQUAL(g->num_key_value_heads, 8);
    CU_ASSERT_EQUAL(g->head_dim, 128);
    CU_ASSERT_EQUAL(g->vocab_size, 128256);
    CU_ASSERT_STRING_EQUAL(g->rope_scaling.kind, "llama3");
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.factor, 8.0, 1e-12);
    CU_ASSERT_EQUAL(g->torch_dtype, LH_DTYPE_BF16);
    lh_model_config_free(cfg);
}

static void test_deepseek_v3(void)
{
    lh_model_config *cfg = load_ok("deepseek-v3");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_STRING_EQUAL(g->architecture, "DeepseekV3ForCausalLM");
    CU_ASSERT_STRING_EQUAL(g->model_type, "deepseek_v3");
    CU_ASSERT_EQUAL(g->hidden_size, 7168);
    CU_ASSERT_EQUAL(g->intermediate_size, 18432);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 61);
    CU_ASSERT_EQUAL(g->num_attention_heads, 128);
    CU_ASSERT_EQUAL(g->num_key_value_heads, 128);
    CU_ASSERT_EQUAL(g->vocab_size, 129280);
    CU_ASSERT_TRUE(g->has_mla);
    CU_ASSERT_TRUE(g->has_q_lora_rank);
    CU_ASSERT_EQUAL(g->q_lora_rank, 1536);
    CU_ASSERT_EQUAL(g->kv_lora_rank, 512);
    CU_ASSERT_EQUAL(g->qk_rope_head_dim, 64);
    CU_ASSERT_EQUAL(g->qk_nope_head_dim, 128);
    CU_ASSERT_EQUAL(g->v_head_dim, 128);
    CU_ASSERT_STRING_EQUAL(g->rope_scaling.kind, "yarn"); /* from "type" */
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.factor, 40.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.beta_fast, 32.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.beta_slow, 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.mscale, 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.mscale_all_dim, 1.0, 1e-12);
    CU_ASSERT_EQUAL(g->rope_scaling.original_max_position_embeddings, 4096);
    CU_ASSERT_EQUAL(g->torch_dtype, LH_DTYPE_BF16);
    int64_t v = 0;
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "moe_intermediate_size", &v), 1);
    CU_ASSERT_EQUAL(v, 2048);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "n_routed_experts", &v), 1);
    CU_ASSERT_EQUAL(v, 256);
    lh_model_config_free(cfg);
}

static void test_deepseek_v2_lite(void)
{
    lh_model_config *cfg = load_ok("deepseek-v2-lite");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_STRING_EQUAL(g->architecture, "DeepseekV2ForCausalLM");
    CU_ASSERT_EQUAL(g->hidden_size, 2048);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 27);
    CU_ASSERT_EQUAL(g->num_attention_heads, 16);
    CU_ASSERT_TRUE(g->has_mla);
    CU_ASSERT_FALSE(g->has_q_lora_rank); /* null: queries not compressed */
    CU_ASSERT_EQUAL(g->q_lora_rank, 0);
    CU_ASSERT_EQUAL(g->kv_lora_rank, 512);
    CU_ASSERT_EQUAL(g->qk_rope_head_dim, 64);
    CU_ASSERT_EQUAL(g->qk_nope_head_dim, 128);
    CU_ASSERT_EQUAL(g->v_head_dim, 128);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_scaling.mscale, 0.707, 1e-12);
    CU_ASSERT_EQUAL(g->vocab_size, 102400);
    lh_model_config_free(cfg);
}

static void test_smollm2(void)
{
    lh_model_config *cfg = load_ok("smollm2-135m");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_STRING_EQUAL(g->architecture, "LlamaForCausalLM");
    CU_ASSERT_EQUAL(g->hidden_size, 576);
    CU_ASSERT_EQUAL(g->intermediate_size, 1536);
    CU_ASSERT_EQUAL(g->num_hidden_layers, 30);
    CU_ASSERT_EQUAL(g->num_attention_heads, 9);
    CU_ASSERT_EQUAL(g->num_key_value_heads, 3);
    CU_ASSERT_EQUAL(g->head_dim, 64);
    CU_ASSERT_EQUAL(g->vocab_size, 49152);
    CU_ASSERT_TRUE(g->tie_word_embeddings);
    CU_ASSERT_PTR_NULL(g->rope_scaling.kind);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_theta, 100000.0, 1e-9);
    lh_model_config_free(cfg);
}

static void test_load_json_file_path(void)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/configs/qwen3-8b/config.json", lh_test_env("LH_FIXTURES"));
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_model_config_load(p, &cfg, &err), LH_OK);
    if (!cfg)
        return;
    CU_ASSERT_STRING_EQUAL(cfg->path, p);
    CU_ASSERT_PTR_NOT_NULL(strstr(cfg->dir, "/qwen3-8b"));
    CU_ASSERT_PTR_NULL(strstr(cfg->dir, "config.json"));
    lh_model_config_free(cfg);
}

static void test_defaults(void)
{
    lh_model_config *cfg = parse_ok("{\"hidden_size\": 64, \"num_attention_heads\": 4}");
    if (!cfg)
        return;
    const lh_model_geometry *g = &cfg->geo;
    CU_ASSERT_EQUAL(g->num_key_value_heads, 4);
    CU_ASSERT_EQUAL(g->head_dim, 16);
    CU_ASSERT_DOUBLE_EQUAL(g->rms_norm_eps, 1e-6, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(g->rope_theta, 10000.0, 1e-9);
    CU_ASSERT_FALSE(g->tie_word_embeddings);
    CU_ASSERT_FALSE(g->attention_bias);
    CU_ASSERT_EQUAL(g->torch_dtype, LH_DTYPE_INVALID);
    CU_ASSERT_PTR_NULL(g->architecture);
    CU_ASSERT_PTR_NULL(g->model_type);
    CU_ASSERT_FALSE(cfg->has_architectures);
    CU_ASSERT_TRUE(cfg->has_hidden_size);
    CU_ASSERT_FALSE(cfg->has_vocab_size);
    CU_ASSERT_EQUAL(g->vocab_size, 0);
    CU_ASSERT_STRING_EQUAL(cfg->path, "test.json");
    lh_model_config_free(cfg);

    /* an empty object parses; everything is absent */
    cfg = parse_ok("{}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.head_dim, 0);
        CU_ASSERT_EQUAL(cfg->geo.num_key_value_heads, 0);
        lh_model_config_free(cfg);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* bad config fixtures */

static void expect_load_error(const char *name, lh_status code, const char *const *subs)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/configs/bad/%s", lh_test_env("LH_FIXTURES"), name);
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    lh_status st = lh_model_config_load(p, &cfg, &err);
    if (st != code)
        fprintf(stderr, "\n  %s: status %d, message: %s\n", name, (int)st, err.msg);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_PTR_NULL(cfg);
    lh_model_config_free(cfg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "config.json"));
    for (size_t i = 0; subs[i]; i++) {
        if (!strstr(err.msg, subs[i]))
            fprintf(stderr, "\n  %s: message '%s' lacks '%s'\n", name, err.msg, subs[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, subs[i]));
    }
}

#define EXPECT_LOAD_ERR(name, code, ...)                                                       \
    do {                                                                                       \
        const char *const subs_[] = {__VA_ARGS__, NULL};                                       \
        expect_load_error((name), (code), subs_);                                              \
    } while (0)

static void test_bad_syntax(void)
{
    EXPECT_LOAD_ERR("syntax-error", LH_E_CONFIG, "bad/syntax-error/config.json:4:",
                    "JSON syntax error", "expected");
}

static void test_bad_kv_heads(void)
{
    EXPECT_LOAD_ERR("kv-heads-not-dividing", LH_E_CONFIG,
                    "num_key_value_heads=5 does not divide num_attention_heads=32");
}

static void test_bad_zero_hidden(void)
{
    EXPECT_LOAD_ERR("zero-hidden", LH_E_CONFIG, "hidden_size=0", "> 0");
}

static void test_bad_negative_layers(void)
{
    EXPECT_LOAD_ERR("negative-layers", LH_E_CONFIG, "num_hidden_layers=-2", "> 0");
}

static void test_bad_float_int(void)
{
    EXPECT_LOAD_ERR("float-int", LH_E_CONFIG, "hidden_size", "must be an integer",
                    "4096.0");
}

static void test_bad_bool_int(void)
{
    EXPECT_LOAD_ERR("bool-as-int", LH_E_CONFIG, "num_hidden_layers", "must be an integer",
                    "boolean");
}

static void test_bad_architectures_type(void)
{
    EXPECT_LOAD_ERR("architectures-wrong-type", LH_E_CONFIG, "architectures",
                    "an array of strings", "a string");
    EXPECT_LOAD_ERR("architectures-element-type", LH_E_CONFIG, "architectures[0]",
                    "must be a string", "42");
}

static void test_missing_and_empty_architectures(void)
{
    /* a missing or empty `architectures` is resolve's error, not the parser's */
    const char *names[] = {"missing-architectures", "empty-architectures"};
    for (size_t i = 0; i < 2; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/configs/bad/%s", lh_test_env("LH_FIXTURES"), names[i]);
        lh_model_config *cfg = NULL;
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_model_config_load(p, &cfg, &err), LH_OK);
        if (!cfg)
            continue;
        CU_ASSERT_FALSE(cfg->has_architectures);
        CU_ASSERT_PTR_NULL(cfg->geo.architecture);
        CU_ASSERT_EQUAL(cfg->geo.hidden_size, 4096);
        lh_model_config_free(cfg);
    }
}

static void test_bad_head_dim(void)
{
    EXPECT_LOAD_ERR("head-dim-indivisible", LH_E_CONFIG, "hidden_size=4000",
                    "num_attention_heads=48", "head_dim");
}

static void test_bad_overflow(void)
{
    EXPECT_LOAD_ERR("overflow", LH_E_CONFIG, "vocab_size=549755813888",
                    "hidden_size=549755813888", "overflow");
    EXPECT_LOAD_ERR("absurd-size", LH_E_CONFIG, "vocab_size=2199023255552", "2^40");
}

static void test_bad_dtype(void)
{
    EXPECT_LOAD_ERR("unknown-dtype", LH_E_CONFIG, "torch_dtype", "float64", "float32",
                    "bfloat16", "float16");
}

static void test_bad_mla(void)
{
    EXPECT_LOAD_ERR("mla-v-head-dim-zero", LH_E_CONFIG, "v_head_dim=0", "> 0");
    EXPECT_LOAD_ERR("mla-missing-nope", LH_E_CONFIG, "kv_lora_rank=512", "qk_nope_head_dim");
}

static void test_bad_not_object(void)
{
    EXPECT_LOAD_ERR("not-object", LH_E_CONFIG, "JSON object", "an array");
}

static void test_bad_rope_factor(void)
{
    EXPECT_LOAD_ERR("rope-scaling-bad-factor", LH_E_CONFIG, "rope_scaling.factor=0", "> 0");
}

static void test_io_errors(void)
{
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/configs/does-not-exist", lh_test_env("LH_FIXTURES"));
    CU_ASSERT_EQUAL(lh_model_config_load(p, &cfg, &err), LH_E_IO);
    CU_ASSERT_EQUAL(err.code, LH_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "does-not-exist"));
    CU_ASSERT_PTR_NULL(cfg);

    /* a directory without config.json: the message names the file it looked for */
    snprintf(p, sizeof p, "%s/configs/bad", lh_test_env("LH_FIXTURES"));
    CU_ASSERT_EQUAL(lh_model_config_load(p, &cfg, &err), LH_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "configs/bad/config.json"));
    CU_ASSERT_PTR_NULL(cfg);

    CU_ASSERT_EQUAL(lh_model_config_load(NULL, &cfg, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_config_load(p, NULL, NULL), LH_E_USAGE);
}

static void test_syntax_line_column(void)
{
    EXPECT_ERR("{\n  \"a\": 1,\n  \"b\" 2\n}", LH_E_CONFIG, "test.json:3:7: JSON syntax error:",
               "':' expected");
    EXPECT_ERR("", LH_E_CONFIG, "test.json:1:", "JSON syntax error");
    EXPECT_ERR("{\"hidden_size\": 1, \"hidden_size\": 2}", LH_E_CONFIG, "duplicate");
    EXPECT_ERR("42", LH_E_CONFIG, "JSON object", "an integer");
    EXPECT_ERR("\"x\"", LH_E_CONFIG, "JSON object", "a string");
    lh_model_config *cfg = parse_ok("\xEF\xBB\xBF{\"hidden_size\": 8}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.hidden_size, 8);
        lh_model_config_free(cfg);
    }
}

static void test_integer_types(void)
{
    EXPECT_ERR(BASE ", \"max_position_embeddings\": \"4096\"}", LH_E_CONFIG,
               "max_position_embeddings", "must be an integer", "a string");
    EXPECT_ERR(BASE ", \"num_key_value_heads\": 8.0}", LH_E_CONFIG, "num_key_value_heads",
               "8.0");
    EXPECT_ERR(BASE ", \"head_dim\": 0}", LH_E_CONFIG, "head_dim=0");
    EXPECT_ERR("{\"vocab_size\": [1]}", LH_E_CONFIG, "vocab_size", "an array");
    EXPECT_ERR("{\"intermediate_size\": -1}", LH_E_CONFIG, "intermediate_size=-1");
    /* exactly 2^40 is accepted as a value; 2^40+1 is not */
    EXPECT_ERR(BASE ", \"max_position_embeddings\": 1099511627777}", LH_E_CONFIG,
               "max_position_embeddings=1099511627777", "2^40");
    EXPECT_ERR(BASE ", \"attention_chunk_size\": 0}", LH_E_CONFIG, "attention_chunk_size=0");
    EXPECT_ERR(BASE ", \"draft_vocab_size\": -5}", LH_E_CONFIG, "draft_vocab_size=-5");
    EXPECT_ERR(BASE ", \"sliding_window\": 0}", LH_E_CONFIG, "sliding_window=0");
    EXPECT_ERR("{\"vocab_size\": 99999999999999999999}", LH_E_CONFIG, "JSON syntax error",
               "too big integer");
}

static void test_kv_heads_rules(void)
{
    EXPECT_ERR(BASE ", \"num_key_value_heads\": 64}", LH_E_CONFIG,
               "num_key_value_heads=64 does not divide num_attention_heads=32");
    EXPECT_ERR(BASE ", \"num_key_value_heads\": 0}", LH_E_CONFIG, "num_key_value_heads=0");
    lh_model_config *cfg = parse_ok(BASE ", \"num_key_value_heads\": null}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.num_key_value_heads, 32);
        lh_model_config_free(cfg);
    }
}

static void test_head_dim_rules(void)
{
    /* explicit head_dim: no divisibility requirement (Gemma-style) */
    lh_model_config *cfg =
        parse_ok("{\"hidden_size\": 3072, \"num_attention_heads\": 16, \"head_dim\": 256}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.head_dim, 256);
        lh_model_config_free(cfg);
    }
    /* null head_dim counts as absent */
    cfg = parse_ok("{\"hidden_size\": 3072, \"num_attention_heads\": 16, \"head_dim\": null}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.head_dim, 192);
        lh_model_config_free(cfg);
    }
    EXPECT_ERR("{\"hidden_size\": 100, \"num_attention_heads\": 3, \"head_dim\": null}",
               LH_E_CONFIG, "hidden_size=100 is not divisible by num_attention_heads=3");
}

static void test_float_fields(void)
{
    EXPECT_ERR(BASE ", \"rms_norm_eps\": \"1e-5\"}", LH_E_CONFIG, "rms_norm_eps",
               "a number");
    EXPECT_ERR(BASE ", \"rms_norm_eps\": 0}", LH_E_CONFIG, "rms_norm_eps=0", "> 0");
    EXPECT_ERR(BASE ", \"rope_theta\": -1.0}", LH_E_CONFIG, "rope_theta=-1", "> 0");
    EXPECT_ERR(BASE ", \"rope_theta\": true}", LH_E_CONFIG, "rope_theta", "a boolean");
}

static void test_bool_fields(void)
{
    EXPECT_ERR(BASE ", \"tie_word_embeddings\": 1}", LH_E_CONFIG, "tie_word_embeddings",
               "a boolean");
    EXPECT_ERR(BASE ", \"attention_bias\": \"false\"}", LH_E_CONFIG, "attention_bias",
               "a boolean");
    EXPECT_ERR(BASE ", \"use_sliding_window\": 0}", LH_E_CONFIG, "use_sliding_window");
    lh_model_config *cfg =
        parse_ok(BASE ", \"tie_word_embeddings\": true, \"attention_bias\": true}");
    if (cfg) {
        CU_ASSERT_TRUE(cfg->geo.tie_word_embeddings);
        CU_ASSERT_TRUE(cfg->geo.attention_bias);
        lh_model_config_free(cfg);
    }
}

static void test_string_fields(void)
{
    EXPECT_ERR(BASE ", \"model_type\": 3}", LH_E_CONFIG, "model_type", "a string");
    EXPECT_ERR("{\"architectures\": {\"a\": 1}}", LH_E_CONFIG, "architectures", "an object");
    EXPECT_ERR("{\"architectures\": [\"A\", null]}", LH_E_CONFIG, "architectures[1]");
    lh_model_config *cfg = parse_ok("{\"architectures\": [\"A\", \"B\"]}");
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(cfg->geo.architecture, "A");
        lh_model_config_free(cfg);
    }
}

static void test_rope_scaling_rules(void)
{
    lh_model_config *cfg = parse_ok(BASE ", \"rope_scaling\": {\"type\": \"linear\", "
                                         "\"factor\": 2}}");
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(cfg->geo.rope_scaling.kind, "linear");
        CU_ASSERT_DOUBLE_EQUAL(cfg->geo.rope_scaling.factor, 2.0, 0);
        lh_model_config_free(cfg);
    }
    /* rope_type wins over the legacy "type" */
    cfg = parse_ok(BASE ", \"rope_scaling\": {\"type\": \"su\", \"rope_type\": \"dynamic\", "
                        "\"factor\": 1.5, \"attention_factor\": 0.5}}");
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(cfg->geo.rope_scaling.kind, "dynamic");
        CU_ASSERT_DOUBLE_EQUAL(cfg->geo.rope_scaling.attention_factor, 0.5, 0);
        lh_model_config_free(cfg);
    }
    EXPECT_ERR(BASE ", \"rope_scaling\": {\"rope_type\": 3}}", LH_E_CONFIG,
               "rope_scaling.rope_type", "a string");
    EXPECT_ERR(BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": -2}}", LH_E_CONFIG,
               "rope_scaling.factor=-2", "> 0");
    EXPECT_ERR(BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": \"2\"}}",
               LH_E_CONFIG, "rope_scaling.factor", "a number");
    EXPECT_ERR(BASE ", \"rope_scaling\": \"llama3\"}", LH_E_CONFIG, "rope_scaling",
               "an object or null");
    EXPECT_ERR(BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", "
                    "\"original_max_position_embeddings\": 4096.5}}",
               LH_E_CONFIG, "rope_scaling.original_max_position_embeddings", "an integer");
    EXPECT_ERR(BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"beta_fast\": []}}",
               LH_E_CONFIG, "rope_scaling.beta_fast");
}

/* transformers 5 spelling: rope_parameters carries the kind and rope_theta */
static void test_rope_parameters(void)
{
    lh_model_config *cfg = parse_ok(BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", "
                                         "\"factor\": 8.0, \"low_freq_factor\": 1.0, "
                                         "\"high_freq_factor\": 4.0, \"rope_theta\": 500000.0, "
                                         "\"original_max_position_embeddings\": 8192}}");
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(cfg->geo.rope_scaling.kind, "llama3");
        CU_ASSERT_DOUBLE_EQUAL(cfg->geo.rope_scaling.factor, 8.0, 0);
        CU_ASSERT_DOUBLE_EQUAL(cfg->geo.rope_scaling.high_freq_factor, 4.0, 0);
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.original_max_position_embeddings, 8192);
        CU_ASSERT_DOUBLE_EQUAL(cfg->geo.rope_theta, 500000.0, 0);
        lh_model_config_free(cfg);
    }
    /* "default" keeps the plain rotation; rope_theta still comes from inside */
    cfg = parse_ok(BASE ", \"rope_parameters\": {\"rope_type\": \"default\", "
                        "\"rope_theta\": 1000000.0}}");
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(cfg->geo.rope_scaling.kind, "default");
        CU_ASSERT_DOUBLE_EQUAL(cfg->geo.rope_theta, 1000000.0, 0);
        lh_model_config_free(cfg);
    }
    EXPECT_ERR(BASE ", \"rope_parameters\": {\"rope_type\": \"default\", "
                    "\"rope_theta\": -1}}",
               LH_E_CONFIG, "rope_parameters.rope_theta=-1", "> 0");
    EXPECT_ERR(BASE ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 0}}",
               LH_E_CONFIG, "rope_parameters.factor=0");
    EXPECT_ERR(BASE ", \"rope_parameters\": [1]}", LH_E_CONFIG, "rope_parameters",
               "an object or null");
}

/* LongRoPE (Phi-3, Phi-3.5, Phi-4-mini): short_factor / long_factor arrays owned by the config;
 * original_max_position_embeddings from the rope object, or else from the top level (where
 * the Hub's Phi-3 files, written by transformers 4, keep it; transformers 5 writes it into
 * rope_parameters too). */
static void test_longrope(void)
{
    /* transformers 4 (Phi-3-mini-128k's shape): "type", top-level original length */
    lh_model_config *cfg =
        parse_ok(BASE ", \"max_position_embeddings\": 131072, "
                      "\"original_max_position_embeddings\": 4096, \"rope_scaling\": {"
                      "\"type\": \"longrope\", \"short_factor\": [1, 1.5, 2.0], "
                      "\"long_factor\": [1.25, 3, 7.5e1]}}");
    if (cfg) {
        const lh_rope_scaling *rs = &cfg->geo.rope_scaling;
        CU_ASSERT_STRING_EQUAL(rs->kind, "longrope");
        CU_ASSERT_EQUAL_FATAL(rs->n_factors, 3);
        CU_ASSERT_PTR_EQUAL(rs->short_factor, cfg->rope_factors);
        CU_ASSERT_PTR_EQUAL(rs->long_factor, cfg->rope_factors + 3);
        CU_ASSERT_DOUBLE_EQUAL(rs->short_factor[0], 1.0, 0);
        CU_ASSERT_DOUBLE_EQUAL(rs->short_factor[1], 1.5, 0);
        CU_ASSERT_DOUBLE_EQUAL(rs->short_factor[2], 2.0, 0);
        CU_ASSERT_DOUBLE_EQUAL(rs->long_factor[0], 1.25, 0);
        CU_ASSERT_DOUBLE_EQUAL(rs->long_factor[1], 3.0, 0);
        CU_ASSERT_DOUBLE_EQUAL(rs->long_factor[2], 75.0, 0);
        CU_ASSERT_EQUAL(rs->original_max_position_embeddings, 4096);
        CU_ASSERT_DOUBLE_EQUAL(rs->factor, 0.0, 0); /* absent: the kernel derives it */
        CU_ASSERT_DOUBLE_EQUAL(rs->attention_factor, 0.0, 0);
        CU_ASSERT_EQUAL(cfg->geo.max_position_embeddings, 131072);
        lh_model_config_free(cfg);
    }
    /* transformers 5 (save_pretrained of a Phi3Config): rope_parameters with both spellings
     * of the type, rope_theta, partial_rotary_factor and the original length inside, which
     * is also at the top level */
    cfg = parse_ok(BASE ", \"max_position_embeddings\": 32, "
                        "\"original_max_position_embeddings\": 8, \"partial_rotary_factor\": 0.5, "
                        "\"rope_parameters\": {\"long_factor\": [2.0, 4.0], "
                        "\"original_max_position_embeddings\": 8, "
                        "\"partial_rotary_factor\": 0.5, \"rope_theta\": 250000.0, "
                        "\"rope_type\": \"longrope\", \"short_factor\": [1.0, 1.5], "
                        "\"type\": \"longrope\", \"factor\": 4, \"attention_factor\": 1.2}}");
    if (cfg) {
        const lh_rope_scaling *rs = &cfg->geo.rope_scaling;
        CU_ASSERT_STRING_EQUAL(rs->kind, "longrope");
        CU_ASSERT_EQUAL_FATAL(rs->n_factors, 2);
        CU_ASSERT_DOUBLE_EQUAL(rs->short_factor[1], 1.5, 0);
        CU_ASSERT_DOUBLE_EQUAL(rs->long_factor[1], 4.0, 0);
        CU_ASSERT_EQUAL(rs->original_max_position_embeddings, 8);
        CU_ASSERT_DOUBLE_EQUAL(rs->factor, 4.0, 0);
        CU_ASSERT_DOUBLE_EQUAL(rs->attention_factor, 1.2, 0);
        CU_ASSERT_DOUBLE_EQUAL(cfg->geo.rope_theta, 250000.0, 0);
        lh_model_config_free(cfg);
    }
    /* the rope object's original length comes first; none anywhere: 0 (the kernel then uses
     * max_position_embeddings, transformers' default) */
    cfg = parse_ok(BASE ", \"original_max_position_embeddings\": 16, \"rope_scaling\": {"
                        "\"rope_type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [2], "
                        "\"original_max_position_embeddings\": 8}}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.original_max_position_embeddings, 8);
        lh_model_config_free(cfg);
    }
    cfg = parse_ok(BASE ", \"rope_scaling\": {\"rope_type\": \"longrope\", "
                        "\"short_factor\": [1], \"long_factor\": [2], "
                        "\"original_max_position_embeddings\": null}}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.original_max_position_embeddings, 0);
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.n_factors, 1);
        lh_model_config_free(cfg);
    }
    /* other kinds: no arrays, nothing allocated, and the top level is not read for them */
    cfg = parse_ok(BASE ", \"original_max_position_embeddings\": 16, \"rope_scaling\": {"
                        "\"rope_type\": \"yarn\", \"factor\": 4}}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.n_factors, 0);
        CU_ASSERT_PTR_NULL(cfg->geo.rope_scaling.short_factor);
        CU_ASSERT_PTR_NULL(cfg->geo.rope_scaling.long_factor);
        CU_ASSERT_PTR_NULL(cfg->rope_factors);
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.original_max_position_embeddings, 0);
        lh_model_config_free(cfg);
    }
    /* a legacy name (Phi-3's "su") keeps its arrays for the plugin that maps it */
    cfg = parse_ok(BASE ", \"original_max_position_embeddings\": 4096, \"rope_scaling\": {"
                        "\"type\": \"su\", \"short_factor\": [1, 2], \"long_factor\": [3, 4]}}");
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(cfg->geo.rope_scaling.kind, "su");
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.n_factors, 2);
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.original_max_position_embeddings, 4096);
        lh_model_config_free(cfg);
    }
    /* a config without rope settings keeps the fields empty */
    cfg = parse_ok(BASE "}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.rope_scaling.n_factors, 0);
        CU_ASSERT_PTR_NULL(cfg->rope_factors);
        lh_model_config_free(cfg);
    }
}

static void test_longrope_errors(void)
{
#define LR BASE ", \"rope_scaling\": {\"type\": \"longrope\", "
    /* missing arrays (absent or null) */
    EXPECT_ERR(LR "\"short_factor\": [1, 2]}}", LH_E_CONFIG,
               "test.json: rope_scaling.long_factor is missing", "'longrope'",
               "short_factor and long_factor");
    EXPECT_ERR(LR "\"long_factor\": [1, 2]}}", LH_E_CONFIG, "rope_scaling.short_factor is missing");
    EXPECT_ERR(LR "\"factor\": 2}}", LH_E_CONFIG, "rope_scaling.short_factor is missing");
    EXPECT_ERR(LR "\"short_factor\": [1], \"long_factor\": null}}", LH_E_CONFIG,
               "rope_scaling.long_factor is missing or null");
    EXPECT_ERR(BASE ", \"rope_parameters\": {\"rope_type\": \"longrope\", "
                    "\"short_factor\": [1]}}",
               LH_E_CONFIG, "rope_parameters.long_factor is missing");
    /* one array without the other, whatever the kind */
    EXPECT_ERR(BASE ", \"rope_scaling\": {\"type\": \"su\", \"long_factor\": [1]}}", LH_E_CONFIG,
               "rope_scaling.short_factor is missing");
    /* wrong types */
    EXPECT_ERR(LR "\"short_factor\": [1], \"long_factor\": \"1\"}}", LH_E_CONFIG,
               "rope_scaling.long_factor must be an array of numbers", "a string");
    EXPECT_ERR(LR "\"short_factor\": {\"0\": 1}, \"long_factor\": [1]}}", LH_E_CONFIG,
               "rope_scaling.short_factor must be an array of numbers", "an object");
    EXPECT_ERR(LR "\"short_factor\": [1, 2, 3, 4], \"long_factor\": [1, 2, 3, \"4\"]}}",
               LH_E_CONFIG, "rope_scaling.long_factor[3] must be a number", "a string");
    EXPECT_ERR(LR "\"short_factor\": [1, null], \"long_factor\": [1, 2]}}", LH_E_CONFIG,
               "rope_scaling.short_factor[1] must be a number", "null");
    EXPECT_ERR(LR "\"short_factor\": [true], \"long_factor\": [1]}}", LH_E_CONFIG,
               "rope_scaling.short_factor[0] must be a number", "a boolean");
    EXPECT_ERR(LR "\"short_factor\": [1], \"long_factor\": [[1]]}}", LH_E_CONFIG,
               "rope_scaling.long_factor[0] must be a number", "an array");
    EXPECT_ERR(BASE ", \"rope_parameters\": {\"rope_type\": \"longrope\", "
                    "\"short_factor\": [1], \"long_factor\": [\"x\"]}}",
               LH_E_CONFIG, "rope_parameters.long_factor[0] must be a number");
    /* lengths */
    EXPECT_ERR(LR "\"short_factor\": [1, 2, 3], \"long_factor\": [1, 2]}}", LH_E_CONFIG,
               "rope_scaling.short_factor has 3 entries but rope_scaling.long_factor has 2",
               "same length");
    EXPECT_ERR(LR "\"short_factor\": [], \"long_factor\": []}}", LH_E_CONFIG,
               "rope_scaling.short_factor is an empty array");
    EXPECT_ERR(LR "\"short_factor\": [1], \"long_factor\": []}}", LH_E_CONFIG,
               "rope_scaling.long_factor is an empty array");
    /* values */
    EXPECT_ERR(LR "\"short_factor\": [1, 0], \"long_factor\": [1, 2]}}", LH_E_CONFIG,
               "rope_scaling.short_factor[1]=0 must be finite and > 0");
    EXPECT_ERR(LR "\"short_factor\": [1, 2], \"long_factor\": [-1.5, 2]}}", LH_E_CONFIG,
               "rope_scaling.long_factor[0]=-1.5", "> 0");
    /* the other longrope fields */
    EXPECT_ERR(LR "\"short_factor\": [1], \"long_factor\": [1], \"factor\": 0}}", LH_E_CONFIG,
               "rope_scaling.factor=0", "> 0");
    EXPECT_ERR(LR "\"short_factor\": [1], \"long_factor\": [1], \"attention_factor\": \"1\"}}",
               LH_E_CONFIG, "rope_scaling.attention_factor", "a number");
    EXPECT_ERR(LR "\"short_factor\": [1], \"long_factor\": [1], "
                  "\"original_max_position_embeddings\": 0}}",
               LH_E_CONFIG, "rope_scaling.original_max_position_embeddings=0", "> 0");
    EXPECT_ERR(BASE ", \"original_max_position_embeddings\": \"4096\", \"rope_scaling\": {"
                    "\"type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [1]}}",
               LH_E_CONFIG, "test.json: original_max_position_embeddings must be an integer");
    EXPECT_ERR(BASE ", \"original_max_position_embeddings\": -1, \"rope_scaling\": {"
                    "\"type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [1]}}",
               LH_E_CONFIG, "original_max_position_embeddings=-1", "> 0");
#undef LR
}

static void test_dtype_rules(void)
{
    static const struct {
        const char *name;
        lh_dtype dt;
    } ok[] = {{"float32", LH_DTYPE_F32}, {"fp32", LH_DTYPE_F32},    {"f32", LH_DTYPE_F32},
              {"float", LH_DTYPE_F32},   {"bfloat16", LH_DTYPE_BF16}, {"bf16", LH_DTYPE_BF16},
              {"float16", LH_DTYPE_F16}, {"fp16", LH_DTYPE_F16},    {"f16", LH_DTYPE_F16},
              {"half", LH_DTYPE_F16}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char json[256];
        snprintf(json, sizeof json, "{\"torch_dtype\": \"%s\"}", ok[i].name);
        lh_model_config *cfg = parse_ok(json);
        if (cfg) {
            CU_ASSERT_EQUAL(cfg->geo.torch_dtype, ok[i].dt);
            lh_model_config_free(cfg);
        }
    }
    /* the newer "dtype" key when torch_dtype is absent */
    lh_model_config *cfg = parse_ok("{\"dtype\": \"float16\"}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.torch_dtype, LH_DTYPE_F16);
        lh_model_config_free(cfg);
    }
    cfg = parse_ok("{\"torch_dtype\": \"bfloat16\", \"dtype\": \"float32\"}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.torch_dtype, LH_DTYPE_BF16);
        lh_model_config_free(cfg);
    }
    EXPECT_ERR("{\"dtype\": \"int8\"}", LH_E_CONFIG, "dtype=\"int8\"", "float32, bfloat16, "
                                                                       "float16");
    EXPECT_ERR("{\"torch_dtype\": \"fp8\"}", LH_E_CONFIG, "torch_dtype=\"fp8\"");
    EXPECT_ERR("{\"torch_dtype\": 16}", LH_E_CONFIG, "torch_dtype", "a string");
}

static void test_mla_rules(void)
{
#define MLA BASE ", \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64, \"qk_nope_head_dim\": 128"
    lh_model_config *cfg = parse_ok(BASE ", \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 0, "
                        "\"qk_nope_head_dim\": 128, \"v_head_dim\": 128}");
    if (cfg) {
        CU_ASSERT_TRUE(cfg->geo.has_mla);
        CU_ASSERT_EQUAL(cfg->geo.qk_rope_head_dim, 0); /* >= 0 allowed */
        lh_model_config_free(cfg);
    }
    EXPECT_ERR(MLA ", \"v_head_dim\": 128, \"q_lora_rank\": 0}", LH_E_CONFIG, "q_lora_rank=0");
    EXPECT_ERR(BASE ", \"kv_lora_rank\": 0}", LH_E_CONFIG, "kv_lora_rank=0");
    EXPECT_ERR(MLA "}", LH_E_CONFIG, "kv_lora_rank=512", "v_head_dim");
    EXPECT_ERR(BASE ", \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"v_head_dim\": 128}",
               LH_E_CONFIG, "qk_rope_head_dim");
    EXPECT_ERR(MLA ", \"v_head_dim\": 128, \"qk_rope_head_dim\": -1}", LH_E_CONFIG,
               "duplicate");
    EXPECT_ERR(BASE ", \"kv_lora_rank\": 512, \"qk_rope_head_dim\": -1, "
                    "\"qk_nope_head_dim\": 128, \"v_head_dim\": 128}",
               LH_E_CONFIG, "qk_rope_head_dim=-1", ">= 0");
    EXPECT_ERR(BASE ", \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64, "
                    "\"qk_nope_head_dim\": 0, \"v_head_dim\": 128}",
               LH_E_CONFIG, "qk_nope_head_dim=0");
    /* MLA fields without kv_lora_rank: no MLA */
    cfg = parse_ok(BASE ", \"v_head_dim\": 128}");
    if (cfg) {
        CU_ASSERT_FALSE(cfg->geo.has_mla);
        lh_model_config_free(cfg);
    }
#undef MLA
}

static void test_window_chunk_draft(void)
{
    lh_model_config *cfg = parse_ok(BASE ", \"sliding_window\": 4096, "
                                         "\"use_sliding_window\": true, "
                                         "\"attention_chunk_size\": 8192, "
                                         "\"draft_vocab_size\": 32000}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.sliding_window, 4096);
        CU_ASSERT_EQUAL(cfg->geo.attention_chunk_size, 8192);
        CU_ASSERT_TRUE(cfg->geo.has_draft_vocab_size);
        CU_ASSERT_EQUAL(cfg->geo.draft_vocab_size, 32000);
        lh_model_config_free(cfg);
    }
    cfg = parse_ok(BASE ", \"sliding_window\": 4096, \"use_sliding_window\": false}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.sliding_window, 0);
        lh_model_config_free(cfg);
    }
    /* a window the config switches off is not validated as if it were used (transformers'
     * Qwen2-MoE writes 0, and any value is as unused): only its type is */
    static const char *const off[] = {"0", "-1", "null"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        char text[256];
        snprintf(text, sizeof text, BASE ", \"sliding_window\": %s, \"use_sliding_window\": false}",
                 off[i]);
        cfg = parse_ok(text);
        if (cfg) {
            CU_ASSERT_EQUAL(cfg->geo.sliding_window, 0);
            lh_model_config_free(cfg);
        }
    }
    EXPECT_ERR(BASE ", \"sliding_window\": \"4k\", \"use_sliding_window\": false}", LH_E_CONFIG,
               "sliding_window");
    /* on (or not said) and <= 0 stays an error */
    EXPECT_ERR(BASE ", \"sliding_window\": 0, \"use_sliding_window\": true}", LH_E_CONFIG,
               "sliding_window=0 must be > 0");
    cfg = parse_ok(BASE ", \"sliding_window\": null, \"attention_chunk_size\": null}");
    if (cfg) {
        CU_ASSERT_EQUAL(cfg->geo.sliding_window, 0);
        CU_ASSERT_EQUAL(cfg->geo.attention_chunk_size, 0);
        CU_ASSERT_FALSE(cfg->geo.has_draft_vocab_size);
        lh_model_config_free(cfg);
    }
}

static void test_overflow_products(void)
{
    /* each product is checked and named */
    EXPECT_ERR("{\"num_hidden_layers\": 1099511627776, \"hidden_size\": 1099511627776, "
               "\"intermediate_size\": 1}",
               LH_E_CONFIG, "num_hidden_layers=1099511627776", "hidden_size=1099511627776",
               "intermediate_size=1", "overflow");
    EXPECT_ERR("{\"num_hidden_layers\": 1048576, \"hidden_size\": 1048576, "
               "\"num_attention_heads\": 1048576, \"head_dim\": 1048576}",
               LH_E_CONFIG, "num_attention_heads=1048576", "head_dim=1048576", "overflow");
    EXPECT_ERR("{\"max_position_embeddings\": 1099511627776, \"num_hidden_layers\": 1048576, "
               "\"num_attention_heads\": 8, \"head_dim\": 128}",
               LH_E_CONFIG, "max_position_embeddings=1099511627776", "overflow");
    EXPECT_ERR("{\"draft_vocab_size\": 1099511627776, \"hidden_size\": 16777216, "
               "\"num_attention_heads\": 1}",
               LH_E_CONFIG, "draft_vocab_size=1099511627776", "overflow");
    /* large but representable sizes are fine */
    lh_model_config *cfg = parse_ok("{\"vocab_size\": 1048576, \"hidden_size\": 65536, "
                                    "\"num_attention_heads\": 512, \"num_hidden_layers\": 512, "
                                    "\"intermediate_size\": 262144}");
    lh_model_config_free(cfg);
}

static void test_parse_usage(void)
{
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_model_config_parse(NULL, "x", &cfg, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_config_parse("{}", "x", NULL, &err), LH_E_USAGE);
    /* NULL err is allowed everywhere */
    CU_ASSERT_EQUAL(lh_model_config_parse("{\"hidden_size\": 0}", NULL, &cfg, NULL), LH_E_CONFIG);
    CU_ASSERT_PTR_NULL(cfg);
    CU_ASSERT_EQUAL(lh_model_config_parse("{}", NULL, &cfg, NULL), LH_OK);
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(cfg->path, "<string>");
        CU_ASSERT_PTR_NULL(cfg->dir);
    }
    lh_model_config_free(cfg);
    lh_model_config_free(NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* getters */

static void test_getters(void)
{
    lh_model_config *cfg = load_ok("llama-3.1-8b");
    if (!cfg)
        return;
    double d = 0;
    int64_t i = 0;
    bool b = true;
    const char *s = NULL;
    CU_ASSERT_EQUAL(lh_model_config_get_double(cfg, "rope_scaling.factor", &d), 1);
    CU_ASSERT_DOUBLE_EQUAL(d, 8.0, 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "rope_scaling.original_max_position_embeddings",
                                            &i),
                    1);
    CU_ASSERT_EQUAL(i, 8192);
    CU_ASSERT_EQUAL(lh_model_config_get_string(cfg, "rope_scaling.rope_type", &s), 1);
    CU_ASSERT_STRING_EQUAL(s, "llama3");
    /* get_int accepts only JSON integers; get_double accepts both */
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "rope_scaling.factor", &i), -1);
    CU_ASSERT_EQUAL(lh_model_config_get_double(cfg, "hidden_size", &d), 1);
    CU_ASSERT_DOUBLE_EQUAL(d, 4096.0, 0);
    CU_ASSERT_EQUAL(lh_model_config_get_bool(cfg, "use_cache", &b), 1);
    CU_ASSERT_TRUE(b);
    CU_ASSERT_EQUAL(lh_model_config_get_bool(cfg, "mlp_bias", &b), 1);
    CU_ASSERT_FALSE(b);
    CU_ASSERT_EQUAL(lh_model_config_get_bool(cfg, "hidden_size", &b), -1);
    CU_ASSERT_EQUAL(lh_model_config_get_string(cfg, "hidden_size", &s), -1);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "hidden_act", &i), -1);
    CU_ASSERT_EQUAL(lh_model_config_get_string(cfg, "hidden_act", &s), 1);
    CU_ASSERT_STRING_EQUAL(s, "silu");
    CU_ASSERT_EQUAL(lh_model_config_get_string(cfg, "architectures.0", &s), 1);
    CU_ASSERT_STRING_EQUAL(s, "LlamaForCausalLM");
    CU_ASSERT_EQUAL(lh_model_config_get_string(cfg, "architectures.1", &s), 0);
    /* absent */
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "no_such_key", &i), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "rope_scaling.nope", &i), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "hidden_size.x", &i), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "", &i), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "rope_scaling.", &i), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, NULL, &i), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(NULL, "hidden_size", &i), 0);
    /* an object is "other type" for every getter */
    CU_ASSERT_EQUAL(lh_model_config_get_double(cfg, "rope_scaling", &d), -1);
    lh_model_config_free(cfg);

    cfg = load_ok("qwen3-8b");
    if (!cfg)
        return;
    /* null counts as absent */
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "sliding_window", &i), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_double(cfg, "rope_scaling.factor", &d), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_string(cfg, "rope_scaling", &s), 0);
    CU_ASSERT_EQUAL(lh_model_config_get_int(cfg, "head_dim", NULL), 1);
    CU_ASSERT_PTR_NULL(lh_model_config_geometry(NULL));
    lh_model_config_free(cfg);
}

static void test_dtype_names(void)
{
    CU_ASSERT_EQUAL(lh_dtype_from_name("float32"), LH_DTYPE_F32);
    CU_ASSERT_EQUAL(lh_dtype_from_name("FP32"), LH_DTYPE_F32);
    CU_ASSERT_EQUAL(lh_dtype_from_name("bf16"), LH_DTYPE_BF16);
    CU_ASSERT_EQUAL(lh_dtype_from_name("half"), LH_DTYPE_F16);
    CU_ASSERT_EQUAL(lh_dtype_from_name("fp8_e4m3"), LH_DTYPE_FP8_E4M3);
    CU_ASSERT_EQUAL(lh_dtype_from_name("fp8"), LH_DTYPE_FP8_E4M3);
    CU_ASSERT_EQUAL(lh_dtype_from_name("int8"), LH_DTYPE_INT8);
    CU_ASSERT_EQUAL(lh_dtype_from_name("int4"), LH_DTYPE_INT4);
    CU_ASSERT_EQUAL(lh_dtype_from_name("float64"), LH_DTYPE_INVALID);
    CU_ASSERT_EQUAL(lh_dtype_from_name(""), LH_DTYPE_INVALID);
    CU_ASSERT_EQUAL(lh_dtype_from_name(NULL), LH_DTYPE_INVALID);
    CU_ASSERT_STRING_EQUAL(lh_dtype_name(LH_DTYPE_F32), "float32");
    CU_ASSERT_STRING_EQUAL(lh_dtype_name(LH_DTYPE_BF16), "bfloat16");
    CU_ASSERT_STRING_EQUAL(lh_dtype_name(LH_DTYPE_F16), "float16");
    CU_ASSERT_STRING_EQUAL(lh_dtype_name(LH_DTYPE_FP8_E4M3), "fp8_e4m3");
    CU_ASSERT_STRING_EQUAL(lh_dtype_name(LH_DTYPE_INT8), "int8");
    CU_ASSERT_STRING_EQUAL(lh_dtype_name(LH_DTYPE_INT4), "int4");
    CU_ASSERT_PTR_NOT_NULL(lh_dtype_name(LH_DTYPE_INVALID));
    CU_ASSERT_PTR_NOT_NULL(lh_dtype_name((lh_dtype)99));
    /* canonical names round-trip */
    for (int dt = LH_DTYPE_F32; dt < LH_DTYPE_COUNT_; dt++)
        CU_ASSERT_EQUAL(lh_dtype_from_name(lh_dtype_name((lh_dtype)dt)), (lh_dtype)dt);
}

static CU_TestInfo good_tests[] = {
    {"llama-3.1-8b", test_llama31_8b},
    {"mistral-7b-v0.1", test_mistral_7b},
    {"qwen2.5-7b", test_qwen25_7b},
    {"qwen3-8b", test_qwen3_8b},
    {"llama-3.1-405b", test_llama31_405b},
    {"deepseek-v3", test_deepseek_v3},
    {"deepseek-v2-lite", test_deepseek_v2_lite},
    {"smollm2-135m", test_smollm2},
    {"load by config.json path", test_load_json_file_path},
    {"defaults", test_defaults},
    {"rope_parameters (transformers 5)", test_rope_parameters},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo bad_fixture_tests[] = {
    {"syntax error with line:column", test_bad_syntax},
    {"kv heads not dividing heads", test_bad_kv_heads},
    {"zero hidden_size", test_bad_zero_hidden},
    {"negative layers", test_bad_negative_layers},
    {"real where integer expected", test_bad_float_int},
    {"boolean where integer expected", test_bad_bool_int},
    {"architectures wrong type", test_bad_architectures_type},
    {"missing/empty architectures parse", test_missing_and_empty_architectures},
    {"head_dim absent, hidden not divisible", test_bad_head_dim},
    {"overflow and absurd sizes", test_bad_overflow},
    {"unknown torch_dtype", test_bad_dtype},
    {"MLA invalid", test_bad_mla},
    {"root not an object", test_bad_not_object},
    {"rope_scaling factor", test_bad_rope_factor},
    {"io errors", test_io_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo rule_tests[] = {
    {"syntax line:column", test_syntax_line_column},
    {"integer types and ranges", test_integer_types},
    {"kv heads", test_kv_heads_rules},
    {"head_dim", test_head_dim_rules},
    {"float fields", test_float_fields},
    {"bool fields", test_bool_fields},
    {"string fields", test_string_fields},
    {"rope_scaling", test_rope_scaling_rules},
    {"longrope: factor arrays, original length (transformers 4 and 5 files)", test_longrope},
    {"longrope: missing arrays, wrong types, lengths, values", test_longrope_errors},
    {"torch_dtype", test_dtype_rules},
    {"MLA", test_mla_rules},
    {"sliding window, chunk, draft", test_window_chunk_draft},
    {"overflow products", test_overflow_products},
    {"usage errors", test_parse_usage},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo getter_tests[] = {
    {"dotted getters", test_getters},
    {"dtype names", test_dtype_names},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"model_config: good configs", NULL, NULL, NULL, NULL, good_tests},
    {"model_config: bad fixtures", NULL, NULL, NULL, NULL, bad_fixture_tests},
    {"model_config: rules", NULL, NULL, NULL, NULL, rule_tests},
    {"model_config: getters", NULL, NULL, NULL, NULL, getter_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
