/* Module tree, building blocks, the Llama tree through the API table, quant config, memory
 * plan, built-in model plugins. */
#include "llama_tree.h"
#include "runner.h"

#include "config/model_config.h"
#include "config/run_config.h"
#include "core/log.h"
#include "model/model.h"

#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- the host API table, built locally (independent of host/api/host_api_table.c) ---- */

typedef struct test_ctx {
    lh_model_provider providers[8];
    char names[8][64];
    size_t n;
    char fail_msg[256];
} test_ctx;

static void t_log(lh_plugin_ctx *ctx, lh_log_level level, const char *fmt, ...)
{
    (void)ctx;
    va_list ap;
    va_start(ap, fmt);
    lh_logv(level, fmt, ap);
    va_end(ap);
}

static lh_status t_init_fail(lh_plugin_ctx *ctx, const char *fmt, ...)
{
    test_ctx *t = (test_ctx *)(void *)ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->fail_msg, sizeof t->fail_msg, fmt, ap);
    va_end(ap);
    return LH_E_INIT;
}

static lh_status t_register_model(lh_plugin_ctx *ctx, const lh_model_provider *p)
{
    test_ctx *t = (test_ctx *)(void *)ctx;
    if (!p || !p->name || !p->ops || !p->ops->construct || t->n == 8)
        return LH_E_USAGE;
    t->providers[t->n] = *p;
    snprintf(t->names[t->n], sizeof t->names[t->n], "%s", p->name);
    t->providers[t->n].name = t->names[t->n];
    t->n++;
    return LH_OK;
}

/* The GGUF architectures a plugin serves, and the providers they feed, as registered. */
static char t_gguf[8][2][64];
static size_t t_n_gguf;

static lh_status t_register_gguf(lh_plugin_ctx *ctx, const lh_gguf_provider *p)
{
    (void)ctx;
    if (!p || !p->gguf_arch || !p->architecture || t_n_gguf == 8)
        return LH_E_USAGE;
    snprintf(t_gguf[t_n_gguf][0], sizeof t_gguf[0][0], "%s", p->gguf_arch);
    snprintf(t_gguf[t_n_gguf][1], sizeof t_gguf[0][1], "%s", p->architecture);
    t_n_gguf++;
    return LH_OK;
}

static lh_host_api make_api(void)
{
    lh_host_api a;
    memset(&a, 0, sizeof a);
    a.struct_size = (uint32_t)sizeof a;
    a.abi_major = LH_PLUGIN_ABI_MAJOR;
    a.abi_minor = LH_PLUGIN_ABI_MINOR;
    a.log = t_log;
    a.init_fail = t_init_fail;
    a.register_model = t_register_model;
    a.register_gguf = t_register_gguf;
    a.config_geometry = lh_model_config_geometry;
    a.config_get_int = lh_model_config_get_int;
    a.config_get_double = lh_model_config_get_double;
    a.config_get_bool = lh_model_config_get_bool;
    a.config_get_string = lh_model_config_get_string;
    a.module_root = lh_build_module_root;
    a.add_container = lh_build_add_container;
    a.add_embedding = lh_build_add_embedding;
    a.add_linear = lh_build_add_linear;
    a.add_rmsnorm = lh_build_add_rmsnorm;
    a.add_attention = lh_build_add_attention;
    a.add_mlp = lh_build_add_mlp;
    a.add_moe = lh_build_add_moe;
    a.add_head = lh_build_add_head;
    a.add_param = lh_build_add_param;
    a.add_layernorm = lh_build_add_layernorm;
    a.base_model = lh_build_base_model;
    a.ignore_tensors = lh_build_ignore_tensors;
    a.add_linear_transposed = lh_build_add_linear_transposed;
    a.tie_weights = lh_build_tie_weights;
    a.build_fail = lh_build_fail;
    a.build_status = lh_build_status;
    return a;
}

/* ---- configs: the fixture when present, else the same values inline ---- */

static const char *const LLAMA_3_1_8B =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":4096,"
    "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
    "\"num_key_value_heads\":8,\"vocab_size\":128256,\"max_position_embeddings\":131072,"
    "\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,\"tie_word_embeddings\":false,"
    "\"attention_bias\":false,\"torch_dtype\":\"bfloat16\",\"rope_scaling\":{\"factor\":8.0,"
    "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}}";
static const char *const MISTRAL_7B =
    "{\"architectures\":[\"MistralForCausalLM\"],\"model_type\":\"mistral\","
    "\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,"
    "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"vocab_size\":32000,"
    "\"max_position_embeddings\":32768,\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,"
    "\"sliding_window\":4096,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}";
static const char *const QWEN2_5_7B =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":3584,"
    "\"intermediate_size\":18944,\"num_hidden_layers\":28,\"num_attention_heads\":28,"
    "\"num_key_value_heads\":4,\"vocab_size\":152064,\"max_position_embeddings\":131072,"
    "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_window\":131072,"
    "\"use_sliding_window\":false,\"max_window_layers\":28,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\"}";
static const char *const QWEN3_8B =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":4096,"
    "\"intermediate_size\":12288,\"num_hidden_layers\":36,\"num_attention_heads\":32,"
    "\"num_key_value_heads\":8,\"head_dim\":128,\"vocab_size\":151936,"
    "\"max_position_embeddings\":40960,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000,"
    "\"attention_bias\":false,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}";
/* mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B, as published */
static const char *const MIXTRAL_8X7B =
    "{\"architectures\":[\"MixtralForCausalLM\"],\"model_type\":\"mixtral\",\"hidden_size\":4096,"
    "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
    "\"num_key_value_heads\":8,\"vocab_size\":32000,\"max_position_embeddings\":32768,"
    "\"num_local_experts\":8,\"num_experts_per_tok\":2,\"rms_norm_eps\":1e-05,"
    "\"rope_theta\":1000000.0,\"sliding_window\":null,\"tie_word_embeddings\":false,"
    "\"router_aux_loss_coef\":0.02,\"torch_dtype\":\"bfloat16\"}";
static const char *const QWEN3_30B_A3B =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",\"hidden_size\":2048,"
    "\"intermediate_size\":6144,\"moe_intermediate_size\":768,\"num_hidden_layers\":48,"
    "\"num_attention_heads\":32,\"num_key_value_heads\":4,\"head_dim\":128,"
    "\"vocab_size\":151936,\"max_position_embeddings\":40960,\"num_experts\":128,"
    "\"num_experts_per_tok\":8,\"norm_topk_prob\":true,\"decoder_sparse_step\":1,"
    "\"mlp_only_layers\":[],\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
    "\"use_sliding_window\":false,\"sliding_window\":null,\"attention_bias\":false,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}";
/* deepseek-ai/DeepSeek-V2-Lite and deepseek-ai/DeepSeek-V3, as published (the keys the tree
 * reads) */
static const char *const DEEPSEEK_V2_LITE =
    "{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"model_type\":\"deepseek_v2\","
    "\"hidden_size\":2048,\"intermediate_size\":10944,\"moe_intermediate_size\":1408,"
    "\"num_hidden_layers\":27,\"num_attention_heads\":16,\"num_key_value_heads\":16,"
    "\"vocab_size\":102400,\"max_position_embeddings\":163840,\"n_routed_experts\":64,"
    "\"n_shared_experts\":2,\"num_experts_per_tok\":6,\"first_k_dense_replace\":1,"
    "\"moe_layer_freq\":1,\"n_group\":1,\"topk_group\":1,\"topk_method\":\"greedy\","
    "\"norm_topk_prob\":false,\"routed_scaling_factor\":1.0,\"scoring_func\":\"softmax\","
    "\"q_lora_rank\":null,\"kv_lora_rank\":512,\"qk_nope_head_dim\":128,"
    "\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"rms_norm_eps\":1e-06,"
    "\"rope_theta\":10000,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}";
static const char *const DEEPSEEK_V3 =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"model_type\":\"deepseek_v3\","
    "\"hidden_size\":7168,\"intermediate_size\":18432,\"moe_intermediate_size\":2048,"
    "\"num_hidden_layers\":61,\"num_attention_heads\":128,\"num_key_value_heads\":128,"
    "\"vocab_size\":129280,\"max_position_embeddings\":163840,\"n_routed_experts\":256,"
    "\"n_shared_experts\":1,\"num_experts_per_tok\":8,\"first_k_dense_replace\":3,"
    "\"moe_layer_freq\":1,\"n_group\":8,\"topk_group\":4,\"topk_method\":\"noaux_tc\","
    "\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,\"scoring_func\":\"sigmoid\","
    "\"num_nextn_predict_layers\":1,\"q_lora_rank\":1536,\"kv_lora_rank\":512,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,"
    "\"rms_norm_eps\":1e-06,\"rope_theta\":10000,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\"}";
static const char *const LLAMA_3_1_405B =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":16384,"
    "\"intermediate_size\":53248,\"num_hidden_layers\":126,\"num_attention_heads\":128,"
    "\"num_key_value_heads\":8,\"vocab_size\":128256,\"max_position_embeddings\":131072,"
    "\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\"}";
static const char *const SMOLLM2_135M =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":576,"
    "\"intermediate_size\":1536,\"num_hidden_layers\":30,\"num_attention_heads\":9,"
    "\"num_key_value_heads\":3,\"vocab_size\":49152,\"max_position_embeddings\":8192,"
    "\"rms_norm_eps\":1e-05,\"rope_theta\":100000,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\"}";
/* Small and odd, for error cases. */
static const char *const TINY =
    "{\"architectures\":[\"TestArch\"],\"hidden_size\":64,\"intermediate_size\":128,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
    "\"vocab_size\":100,\"max_position_embeddings\":256}";

static lh_model_config *load_cfg(const char *fixture, const char *inline_json)
{
    lh_err err = {0};
    lh_model_config *cfg = NULL;
    if (fixture) {
        char path[4096];
        snprintf(path, sizeof path, "%s/configs/%s/config.json", lh_test_env("LH_FIXTURES"),
                 fixture);
        struct stat sb;
        if (stat(path, &sb) == 0) {
            if (lh_model_config_load(path, &cfg, &err) != LH_OK)
                fprintf(stderr, "fixture %s: %s\n", path, err.msg);
            return cfg;
        }
    }
    if (lh_model_config_parse(inline_json, fixture ? fixture : "inline", &cfg, &err) != LH_OK)
        fprintf(stderr, "inline config: %s\n", err.msg);
    return cfg;
}

/* ---- providers used by the tests ---- */

/* The Llama family's tree (tests/support/llama_tree.c, a copy of what the built-in plugins
 * build): plain (Llama, Mistral), with q/k/v bias (Qwen2), with q/k norm (Qwen3). */
static lh_status construct_plain(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return test_llama_tree(api, b, cfg, false, false);
}

static lh_status construct_qkv_bias(const lh_host_api *api, lh_build *b,
                                    const lh_model_config *cfg)
{
    return test_llama_tree(api, b, cfg, true, false);
}

static lh_status construct_qk_norm(const lh_host_api *api, lh_build *b,
                                   const lh_model_config *cfg)
{
    return test_llama_tree(api, b, cfg, false, true);
}

/* Tree-only providers: no bind or forward, the tests stop at the memory plan. */
static lh_model *build_with(lh_model_construct_fn fn, const lh_model_config *cfg,
                            const lh_run_config *rc, lh_status *st_out, lh_err *err)
{
    lh_host_api api = make_api();
    /* ops outlive the provider, as the SDK asks (a static); the tests run one at a time */
    static lh_model_ops ops;
    ops = (lh_model_ops){.struct_size = sizeof ops, .construct = fn};
    lh_model_provider prov = {sizeof prov, "TestArch", &ops, NULL};
    lh_model *m = NULL;
    lh_err local = {0};
    lh_status st = lh_model_build(&api, &prov, cfg, rc, &m, err ? err : &local);
    if (st_out)
        *st_out = st;
    return m;
}

static lh_model *build_decoder(const char *fixture, const char *json, lh_model_construct_fn fn,
                               const lh_run_config *rc, lh_memory_plan *plan)
{
    lh_model_config *cfg = load_cfg(fixture, json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    lh_err err = {0};
    lh_status st;
    lh_model *m = build_with(fn, cfg, rc, &st, &err);
    lh_model_config_free(cfg);
    if (st != LH_OK)
        fprintf(stderr, "build: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    if (plan) {
        st = lh_model_plan(m, plan, &err);
        CU_ASSERT_EQUAL(st, LH_OK);
    }
    return m;
}

static bool shape_is(const lh_model *m, const char *mod, const char *param, int ndim, int64_t d0,
                     int64_t d1)
{
    int64_t s[LH_MAX_DIMS];
    int n = lh_model_param_shape(m, mod, param, s);
    if (n != ndim)
        return false;
    return s[0] == d0 && (ndim < 2 || s[1] == d1);
}

static int64_t group(const lh_memory_plan *p, const char *name, bool bytes)
{
    for (size_t i = 0; i < p->n_groups; i++)
        if (strcmp(p->groups[i].name, name) == 0)
            return bytes ? p->groups[i].bytes : p->groups[i].parameters;
    return -1;
}

static void check_group_sums(const lh_memory_plan *p)
{
    int64_t params = 0, bytes = 0;
    CU_ASSERT_EQUAL(p->n_groups, 6);
    for (size_t i = 0; i < p->n_groups; i++) {
        params += p->groups[i].parameters;
        bytes += p->groups[i].bytes;
    }
    CU_ASSERT_EQUAL(params, p->parameters);
    CU_ASSERT_EQUAL(bytes, p->weight_bytes);
}

/* ---- published architectures ---- */

static void test_llama31_8b(void)
{
    lh_memory_plan p;
    lh_model *m = build_decoder("llama-3.1-8b", LLAMA_3_1_8B, construct_plain, NULL, &p);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(8030261248));
    CU_ASSERT_EQUAL(p.weight_bytes, INT64_C(2) * 8030261248);
    CU_ASSERT_EQUAL(p.weight_dtype, LH_DTYPE_BF16);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 262144); /* f32 KV (kv_cache dtype auto) */
    CU_ASSERT_EQUAL(p.kv_pool_tokens, 131072);
    CU_ASSERT_EQUAL(p.kv_pool_bytes, INT64_C(262144) * 131072);
    CU_ASSERT_EQUAL(p.num_attention_layers, 32);
    CU_ASSERT_EQUAL(p.quantized_linears, 0);
    CU_ASSERT(p.peak_construction_bytes > 0);
    check_group_sums(&p);
    CU_ASSERT_EQUAL(group(&p, "embedding", false), INT64_C(525336576));
    CU_ASSERT_EQUAL(group(&p, "lm_head", false), INT64_C(525336576));
    CU_ASSERT_EQUAL(group(&p, "attention", false), INT64_C(32) * 41943040);
    CU_ASSERT_EQUAL(group(&p, "mlp", false), INT64_C(32) * 3 * 4096 * 14336);
    CU_ASSERT_EQUAL(group(&p, "norm", false), INT64_C(65) * 4096);
    CU_ASSERT_EQUAL(group(&p, "other", false), 0);

    CU_ASSERT(shape_is(m, "model.embed_tokens", "weight", 2, 128256, 4096));
    CU_ASSERT(shape_is(m, "model.layers.3.self_attn.q_proj", "weight", 2, 4096, 4096));
    CU_ASSERT(shape_is(m, "model.layers.3.self_attn.k_proj", "weight", 2, 1024, 4096));
    CU_ASSERT(shape_is(m, "model.layers.3.self_attn.v_proj", "weight", 2, 1024, 4096));
    CU_ASSERT(shape_is(m, "model.layers.3.self_attn.o_proj", "weight", 2, 4096, 4096));
    CU_ASSERT(shape_is(m, "model.layers.3.mlp.gate_proj", "weight", 2, 14336, 4096));
    CU_ASSERT(shape_is(m, "model.layers.3.mlp.up_proj", "weight", 2, 14336, 4096));
    CU_ASSERT(shape_is(m, "model.layers.3.mlp.down_proj", "weight", 2, 4096, 14336));
    CU_ASSERT(shape_is(m, "model.layers.31.input_layernorm", "weight", 1, 4096, 0));
    CU_ASSERT(shape_is(m, "model.layers.31.post_attention_layernorm", "weight", 1, 4096, 0));
    CU_ASSERT(shape_is(m, "model.norm", "weight", 1, 4096, 0));
    CU_ASSERT(shape_is(m, "lm_head", "weight", 2, 128256, 4096));
    CU_ASSERT_EQUAL(lh_model_param_shape(m, "model.layers.3.self_attn.k_proj", "bias", NULL), 0);
    CU_ASSERT_EQUAL(lh_model_param_shape(m, "model.layers.32.self_attn", "weight", NULL), 0);

    lh_module_info info;
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.3.self_attn", &info));
    CU_ASSERT_STRING_EQUAL(info.name, "model.layers.3.self_attn");
    CU_ASSERT_EQUAL(info.kind, LH_MOD_ATTENTION);
    CU_ASSERT_EQUAL(info.n_params, 0);
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.3.self_attn.q_proj", &info));
    CU_ASSERT_EQUAL(info.kind, LH_MOD_LINEAR);
    CU_ASSERT_EQUAL(info.parameters, 4096 * 4096);
    CU_ASSERT_EQUAL(info.bytes, 2 * 4096 * 4096);
    CU_ASSERT_EQUAL(info.quant, LH_QUANT_NONE);
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.3.mlp", &info));
    CU_ASSERT_EQUAL(info.kind, LH_MOD_MLP); /* add_mlp: a container of the "mlp" group */
    CU_ASSERT_EQUAL(info.n_params, 0);
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.0.input_layernorm", &info));
    CU_ASSERT_EQUAL(info.kind, LH_MOD_RMSNORM);
    CU_ASSERT_TRUE(lh_model_find(m, "model.embed_tokens", &info));
    CU_ASSERT_EQUAL(info.kind, LH_MOD_EMBEDDING);
    CU_ASSERT_TRUE(lh_model_find(m, "lm_head", &info));
    CU_ASSERT_EQUAL(info.kind, LH_MOD_HEAD); /* add_head: the "lm_head" group */
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers", &info));
    CU_ASSERT_EQUAL(info.kind, LH_MOD_CONTAINER);
    CU_ASSERT_FALSE(lh_model_find(m, "model.layers.32", &info));
    CU_ASSERT_FALSE(lh_model_find(m, "model.layers.3.self_attn.q", &info));

    /* attention table */
    CU_ASSERT_EQUAL(lh_model_attention_count(m), 32);
    CU_ASSERT_STRING_EQUAL(lh_model_attention_key(m, 0), "0");
    CU_ASSERT_STRING_EQUAL(lh_model_attention_key(m, 31), "31");
    CU_ASSERT_PTR_NULL(lh_model_attention_key(m, 32));
    CU_ASSERT_STRING_EQUAL(lh_model_attention_lookup(m, "3"), "model.layers.3.self_attn");
    CU_ASSERT_PTR_NULL(lh_model_attention_lookup(m, "32"));

    lh_model_free(m);
}

static void test_mistral_7b(void)
{
    lh_memory_plan p;
    lh_model *m = build_decoder("mistral-7b-v0.1", MISTRAL_7B, construct_plain, NULL, &p);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(7241732096));
    CU_ASSERT_EQUAL(p.weight_bytes, INT64_C(2) * 7241732096);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 262144);
    CU_ASSERT_EQUAL(p.kv_pool_tokens, 32768);
    check_group_sums(&p);
    lh_model_free(m);
}

static void test_qwen25_7b(void)
{
    lh_memory_plan p;
    lh_model *m = build_decoder("qwen2.5-7b", QWEN2_5_7B, construct_qkv_bias, NULL, &p);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(7615616512));
    CU_ASSERT_EQUAL(p.weight_bytes, INT64_C(2) * 7615616512);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 28 * 2 * 4 * 128 * 4);
    check_group_sums(&p);
    CU_ASSERT(shape_is(m, "model.layers.0.self_attn.k_proj", "weight", 2, 512, 3584));
    CU_ASSERT(shape_is(m, "model.layers.0.self_attn.k_proj", "bias", 1, 512, 0));
    CU_ASSERT(shape_is(m, "model.layers.0.self_attn.v_proj", "bias", 1, 512, 0));
    CU_ASSERT(shape_is(m, "model.layers.0.self_attn.q_proj", "bias", 1, 3584, 0));
    CU_ASSERT_EQUAL(lh_model_param_shape(m, "model.layers.0.self_attn.o_proj", "bias", NULL), 0);
    lh_module_info info;
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.0.self_attn.k_proj", &info));
    CU_ASSERT_EQUAL(info.n_params, 2);
    CU_ASSERT_EQUAL(info.parameters, 512 * 3584 + 512);
    lh_model_free(m);
}

static void test_qwen3_8b(void)
{
    lh_memory_plan p;
    lh_model *m = build_decoder("qwen3-8b", QWEN3_8B, construct_qk_norm, NULL, &p);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(8190735360));
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 36 * 2 * 8 * 128 * 4);
    check_group_sums(&p);
    CU_ASSERT(shape_is(m, "model.layers.5.self_attn.q_norm", "weight", 1, 128, 0));
    CU_ASSERT(shape_is(m, "model.layers.5.self_attn.k_norm", "weight", 1, 128, 0));
    CU_ASSERT(shape_is(m, "model.layers.5.self_attn.q_proj", "weight", 2, 4096, 4096));
    CU_ASSERT_EQUAL(lh_model_param_shape(m, "model.layers.5.self_attn.q_proj", "bias", NULL), 0);
    /* q/k norms belong to attention, not to the norm group */
    CU_ASSERT_EQUAL(group(&p, "norm", false), INT64_C(73) * 4096);
    lh_model_free(m);
}

static void test_smollm2_tied(void)
{
    lh_memory_plan p;
    lh_model *m = build_decoder("smollm2-135m", SMOLLM2_135M, construct_plain, NULL, &p);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(134515008));
    CU_ASSERT_EQUAL(p.weight_bytes, INT64_C(2) * 134515008);
    CU_ASSERT_EQUAL(group(&p, "lm_head", false), 0);
    CU_ASSERT_EQUAL(group(&p, "lm_head", true), 0);
    CU_ASSERT_EQUAL(group(&p, "embedding", false), INT64_C(49152) * 576);
    check_group_sums(&p);
    lh_module_info info;
    CU_ASSERT_TRUE(lh_model_find(m, "lm_head", &info));
    CU_ASSERT_EQUAL(info.parameters, 0);
    CU_ASSERT_EQUAL(info.bytes, 0);
    CU_ASSERT_EQUAL(info.n_params, 1);
    CU_ASSERT(shape_is(m, "lm_head", "weight", 2, 49152, 576));
    lh_model_free(m);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void test_llama31_405b_fast(void)
{
    lh_model_config *cfg = load_cfg("llama-3.1-405b", LLAMA_3_1_405B);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    double t0 = now_ms();
    lh_err err = {0};
    lh_status st;
    lh_model *m = build_with(construct_plain, cfg, NULL, &st, &err);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    lh_memory_plan p;
    CU_ASSERT_EQUAL(lh_model_plan(m, &p, &err), LH_OK);
    json_t *j = lh_model_plan_json(m, &p);
    double ms = now_ms() - t0;
    printf("\n  405B build + plan + json: %.2f ms, peak construction %lld bytes\n", ms,
           (long long)p.peak_construction_bytes);
    /* a few ms normally; generous bound for sanitizer builds and loaded machines */
    CU_ASSERT(ms < 500.0);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(405853388800));
    CU_ASSERT_EQUAL(p.weight_bytes, INT64_C(2) * 405853388800);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 126 * 2 * 8 * 128 * 4);
    CU_ASSERT_EQUAL(p.num_attention_layers, 126);
    CU_ASSERT(p.peak_construction_bytes > 100 * 1000);
    CU_ASSERT(p.peak_construction_bytes < 16 * 1024 * 1024);
    CU_ASSERT_PTR_NOT_NULL(j);
    json_decref(j);
    lh_model_free(m);
    lh_model_config_free(cfg);
}

static void test_plan_json(void)
{
    lh_memory_plan p;
    lh_model *m = build_decoder("smollm2-135m", SMOLLM2_135M, construct_plain, NULL, &p);
    json_t *j = lh_model_plan_json(m, &p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "parameters")), 134515008);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "weight_bytes")), 2 * 134515008);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "weight_dtype")), "bfloat16");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "kv_bytes_per_token")),
                    30 * 2 * 3 * 64 * 4);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "kv_pool_tokens")), 8192);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "kv_pool_bytes")),
                    8192 * 30 * 2 * 3 * 64 * 4);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "peak_construction_bytes")),
                    p.peak_construction_bytes);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "quantized_linears")), 0);
    json_t *groups = json_object_get(j, "groups");
    CU_ASSERT_EQUAL(json_object_size(groups), 6);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(groups, "lm_head"),
                                                       "parameters")),
                    0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(groups, "embedding"),
                                                       "bytes")),
                    2 * 49152 * 576);
    json_t *attn = json_object_get(j, "attention_layers");
    CU_ASSERT_EQUAL(json_array_size(attn), 30);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(attn, 7)), "7");
    json_decref(j);
    lh_model_free(m);
}

static void test_run_config_dtype_and_pool(void)
{
    lh_run_config rc;
    memset(&rc, 0, sizeof rc);
    rc.dtype = LH_DTYPE_F32;
    rc.max_seq_len = 4096;
    rc.max_batch_size = 8;
    lh_memory_plan p;
    lh_model *m = build_decoder("llama-3.1-8b", LLAMA_3_1_8B, construct_plain, &rc, &p);
    CU_ASSERT_EQUAL(p.weight_dtype, LH_DTYPE_F32);
    CU_ASSERT_EQUAL(p.weight_bytes, INT64_C(4) * 8030261248);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 2 * 131072);
    CU_ASSERT_EQUAL(p.kv_pool_tokens, 4096 * 8);
    CU_ASSERT_EQUAL(p.kv_pool_bytes, INT64_C(4096) * 8 * 2 * 131072);
    lh_model_free(m);
    /* the KV dtypes of the run config, per tensor: fp8 keys + bf16 values, 3 bytes a pair */
    rc.kv_cache.k_dtype = LH_DTYPE_FP8_E4M3;
    rc.kv_cache.v_dtype = LH_DTYPE_BF16;
    m = build_decoder("llama-3.1-8b", LLAMA_3_1_8B, construct_plain, &rc, &p);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 32 * 8 * 128 * (1 + 2));
    lh_model_free(m);
    rc.kv_cache.k_dtype = rc.kv_cache.v_dtype = LH_DTYPE_INVALID;

    /* no torch_dtype in the config and none in the run config: bfloat16 */
    m = build_decoder(NULL, TINY, construct_plain, NULL, &p);
    CU_ASSERT_EQUAL(p.weight_dtype, LH_DTYPE_BF16);
    CU_ASSERT_EQUAL(p.weight_bytes, 2 * p.parameters);
    CU_ASSERT_EQUAL(p.kv_pool_tokens, 256);
    lh_model_free(m);
}

/* ---- MLA ---- */

static lh_attention_spec g_mla_spec;
static int64_t g_mla_hidden;

/* Two MLA layers as a DeepSeek plugin builds them: the host registers the geometry (and sizes
 * the KV cache from the latent width), the plugin adds the projections under it. */
static lh_status construct_mla(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    (void)cfg;
    lh_module *root = api->module_root(b);
    lh_module *layers = api->add_container(b, root, "layers");
    lh_module *l0 = api->add_container(b, layers, "0");
    lh_module *l1 = api->add_container(b, layers, "1");
    lh_attention_spec s = g_mla_spec;
    lh_module *a0 = api->add_attention(b, l0, "self_attn", &s);
    test_mla_projections(api, b, a0, g_mla_hidden, &s, 1e-6);
    s.layer_index = 1;
    lh_module *a1 = api->add_attention(b, l1, "self_attn", &s);
    test_mla_projections(api, b, a1, g_mla_hidden, &s, 1e-6);
    api->add_rmsnorm(b, l1, "input_layernorm", g_mla_hidden, 1e-6);
    api->add_rmsnorm(b, root, "norm", g_mla_hidden, 1e-6);
    return api->build_status(b);
}

static lh_attention_spec deepseek_v3_spec(void)
{
    lh_attention_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.num_heads = 128;
    s.num_kv_heads = 128;
    s.head_dim = 192;
    s.mla = true;
    s.has_q_lora_rank = true;
    s.q_lora_rank = 1536;
    s.kv_lora_rank = 512;
    s.qk_rope_head_dim = 64;
    s.qk_nope_head_dim = 128;
    s.v_head_dim = 128;
    return s;
}

static void test_mla_deepseek_v3(void)
{
    lh_model_config *cfg = load_cfg(NULL, TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    g_mla_spec = deepseek_v3_spec();
    g_mla_hidden = 7168;
    lh_err err = {0};
    lh_status st;
    lh_model *m = build_with(construct_mla, cfg, NULL, &st, &err);
    if (st != LH_OK)
        fprintf(stderr, "%s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    lh_memory_plan p;
    CU_ASSERT_EQUAL(lh_model_plan(m, &p, &err), LH_OK);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 2 * (512 + 64) * 4); /* f32 latent */
    CU_ASSERT_EQUAL(p.num_attention_layers, 2);
    /* the attention table holds the geometry, normalized, for the backend */
    CU_ASSERT_EQUAL(lh_model_attention_count(m), 2);
    CU_ASSERT_STRING_EQUAL(lh_model_attention_lookup(m, "1"), "layers.1.self_attn");
    const lh_attention_spec *rs = lh_model_attention_spec(m, "layers.1.self_attn");
    CU_ASSERT_PTR_NOT_NULL_FATAL(rs);
    CU_ASSERT_TRUE(rs->mla);
    CU_ASSERT_EQUAL(rs->layer_index, 1);
    CU_ASSERT_EQUAL(rs->kv_lora_rank, 512);
    CU_ASSERT_EQUAL(rs->qk_rope_head_dim, 64);
    CU_ASSERT_EQUAL(rs->q_lora_rank, 1536);
    CU_ASSERT_PTR_NULL(lh_model_attention_spec(m, "layers.1.self_attn.kv_b_proj"));
    const char *a = "layers.0.self_attn";
    char n[128];
#define SHAPE(sub, param, nd, d0, d1)                                                          \
    do {                                                                                       \
        snprintf(n, sizeof n, "%s.%s", a, sub);                                                \
        CU_ASSERT(shape_is(m, n, param, nd, d0, d1));                                          \
    } while (0)
    SHAPE("q_a_proj", "weight", 2, 1536, 7168);
    SHAPE("q_a_layernorm", "weight", 1, 1536, 0);
    SHAPE("q_b_proj", "weight", 2, 128 * 192, 1536);
    SHAPE("kv_a_proj_with_mqa", "weight", 2, 576, 7168);
    SHAPE("kv_a_layernorm", "weight", 1, 512, 0);
    SHAPE("kv_b_proj", "weight", 2, 128 * 256, 512);
    SHAPE("o_proj", "weight", 2, 7168, 128 * 128);
    snprintf(n, sizeof n, "%s.q_proj", a);
    CU_ASSERT_FALSE(lh_model_find(m, n, NULL));
    /* everything under the attention module is in the attention group */
    int64_t per_layer = INT64_C(1536) * 7168 + 1536 + INT64_C(128) * 192 * 1536 +
                        INT64_C(576) * 7168 + 512 + INT64_C(128) * 256 * 512 +
                        INT64_C(7168) * 128 * 128;
    CU_ASSERT_EQUAL(group(&p, "attention", false), 2 * per_layer);
    lh_model_free(m);

    /* DeepSeek-V2-Lite: queries not compressed */
    g_mla_spec.has_q_lora_rank = false;
    g_mla_spec.q_lora_rank = 0;
    g_mla_spec.num_heads = 16;
    g_mla_spec.num_kv_heads = 0; /* 0 means num_heads */
    g_mla_hidden = 2048;
    m = build_with(construct_mla, cfg, NULL, &st, &err);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT(shape_is(m, "layers.1.self_attn.q_proj", "weight", 2, 16 * 192, 2048));
    CU_ASSERT(shape_is(m, "layers.1.self_attn.kv_b_proj", "weight", 2, 16 * 256, 512));
    CU_ASSERT_FALSE(lh_model_find(m, "layers.1.self_attn.q_a_proj", NULL));
    CU_ASSERT_EQUAL(lh_model_plan(m, &p, &err), LH_OK);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 2 * 576 * 4);
    rs = lh_model_attention_spec(m, "layers.0.self_attn");
    CU_ASSERT_PTR_NOT_NULL_FATAL(rs);
    CU_ASSERT_EQUAL(rs->num_kv_heads, 16);
    CU_ASSERT_FALSE(rs->has_q_lora_rank);
    lh_model_free(m);
    lh_model_config_free(cfg);
#undef SHAPE
}

static const char *const DEEPSEEK_V3_GEOMETRY =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"hidden_size\":7168,"
    "\"intermediate_size\":18432,\"num_hidden_layers\":61,\"num_attention_heads\":128,"
    "\"num_key_value_heads\":128,\"vocab_size\":129280,\"max_position_embeddings\":163840,"
    "\"q_lora_rank\":1536,\"kv_lora_rank\":512,\"qk_nope_head_dim\":128,"
    "\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"rms_norm_eps\":1e-06,"
    "\"torch_dtype\":\"bfloat16\"}";
static const char *const DEEPSEEK_V2_LITE_GEOMETRY =
    "{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"hidden_size\":2048,"
    "\"intermediate_size\":10944,\"num_hidden_layers\":27,\"num_attention_heads\":16,"
    "\"num_key_value_heads\":16,\"vocab_size\":102400,\"max_position_embeddings\":163840,"
    "\"q_lora_rank\":null,\"kv_lora_rank\":512,\"qk_nope_head_dim\":128,"
    "\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"rms_norm_eps\":1e-06,"
    "\"torch_dtype\":\"bfloat16\"}";

/* MLA attention from the geometry (kv_lora_rank present): the test-local Llama tree builds it
 * as build_decoder_lm did before ABI 3, so the memory plan of a DeepSeek config (the latent
 * KV width per layer, the pool) stays checked. DeepSeek's MoE MLP is not built here (the MLP
 * stays dense): only the attention part is checked. */
static void test_mla_from_geometry(void)
{
    lh_memory_plan p;
    lh_model *m = build_decoder("deepseek-v3", DEEPSEEK_V3_GEOMETRY, construct_plain, NULL, &p);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 61 * (512 + 64) * 4);
    CU_ASSERT_EQUAL(p.kv_pool_bytes, INT64_C(163840) * 61 * (512 + 64) * 4);
    CU_ASSERT(shape_is(m, "model.layers.60.self_attn.q_a_proj", "weight", 2, 1536, 7168));
    CU_ASSERT(shape_is(m, "model.layers.60.self_attn.q_b_proj", "weight", 2, 128 * 192, 1536));
    CU_ASSERT(shape_is(m, "model.layers.60.self_attn.kv_a_proj_with_mqa", "weight", 2, 576,
                       7168));
    CU_ASSERT(shape_is(m, "model.layers.60.self_attn.kv_a_layernorm", "weight", 1, 512, 0));
    CU_ASSERT(shape_is(m, "model.layers.60.self_attn.kv_b_proj", "weight", 2, 128 * 256, 512));
    CU_ASSERT(shape_is(m, "model.layers.60.self_attn.o_proj", "weight", 2, 7168, 128 * 128));
    CU_ASSERT_FALSE(lh_model_find(m, "model.layers.0.self_attn.k_proj", NULL));
    lh_model_free(m);

    m = build_decoder("deepseek-v2-lite", DEEPSEEK_V2_LITE_GEOMETRY, construct_plain, NULL, &p);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 27 * (512 + 64) * 4);
    CU_ASSERT(shape_is(m, "model.layers.3.self_attn.q_proj", "weight", 2, 16 * 192, 2048));
    CU_ASSERT_FALSE(lh_model_find(m, "model.layers.3.self_attn.q_a_proj", NULL));
    lh_model_free(m);
}

/* ---- attention table duplicates ---- */

static lh_status construct_dups(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    (void)cfg;
    lh_module *root = api->module_root(b);
    api->add_rmsnorm(b, root, "norm", 64, 1e-6);
    lh_attention_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.num_heads = 4;
    s.head_dim = 16;
    static const int64_t idx[] = {5, 6, 5, 5, 7};
    static const char *const names[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; i++) {
        lh_module *layer = api->add_container(b, root, names[i]);
        s.layer_index = idx[i];
        api->add_attention(b, layer, "attn", &s);
    }
    return api->build_status(b);
}

static void test_attention_duplicates(void)
{
    lh_model_config *cfg = load_cfg(NULL, TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    lh_status st;
    lh_model *m = build_with(construct_dups, cfg, NULL, &st, NULL);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT_EQUAL(lh_model_attention_count(m), 5);
    static const char *const keys[] = {"5_0", "6", "5_1", "5_2", "7"};
    static const char *const mods[] = {"a.attn", "b.attn", "c.attn", "d.attn", "e.attn"};
    for (size_t i = 0; i < 5; i++) {
        CU_ASSERT_STRING_EQUAL(lh_model_attention_key(m, i), keys[i]);
        const char *mod = lh_model_attention_lookup(m, keys[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mod);
        CU_ASSERT_STRING_EQUAL(mod, mods[i]);
    }
    CU_ASSERT_PTR_NULL(lh_model_attention_lookup(m, "5"));
    CU_ASSERT_PTR_NULL(lh_model_attention_lookup(m, "6_0"));
    lh_memory_plan p;
    CU_ASSERT_EQUAL(lh_model_plan(m, &p, NULL), LH_OK);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 5 * 2 * 4 * 16 * 4);
    lh_model_free(m);
    lh_model_config_free(cfg);
}

/* ---- errors ---- */

typedef lh_status (*case_fn)(const lh_host_api *api, lh_build *b);
static case_fn g_case;

static lh_status construct_case(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    (void)cfg;
    return g_case(api, b);
}

static lh_attention_spec small_spec(void)
{
    lh_attention_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.num_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 16;
    return s;
}

static lh_status c_dup(const lh_host_api *api, lh_build *b)
{
    lh_module *model = api->add_container(b, NULL, "model");
    api->add_linear(b, model, "dup", 4, 4, false);
    CU_ASSERT_PTR_NULL(api->add_rmsnorm(b, model, "dup", 4, 1e-5));
    return api->build_status(b);
}
static lh_status c_dup_param(const lh_host_api *api, lh_build *b)
{
    lh_module *x = api->add_linear(b, NULL, "x", 4, 4, true);
    int64_t shape[1] = {4};
    return api->add_param(b, x, "bias", 1, shape, LH_PARAM_PLAIN);
}
static lh_status c_zero_dim(const lh_host_api *api, lh_build *b)
{
    lh_module *model = api->add_container(b, NULL, "model");
    CU_ASSERT_PTR_NULL(api->add_linear(b, model, "proj", 0, 16, false));
    return api->build_status(b);
}
static lh_status c_neg_dim(const lh_host_api *api, lh_build *b)
{
    CU_ASSERT_PTR_NULL(api->add_embedding(b, NULL, "emb", 10, -3));
    return api->build_status(b);
}
static lh_status c_overflow(const lh_host_api *api, lh_build *b)
{
    lh_module *c = api->add_container(b, NULL, "c");
    int64_t shape[3] = {INT64_C(1) << 32, INT64_C(1) << 32, 4};
    return api->add_param(b, c, "huge", 3, shape, LH_PARAM_PLAIN);
}
static lh_status c_bad_ndim(const lh_host_api *api, lh_build *b)
{
    lh_module *c = api->add_container(b, NULL, "c");
    int64_t shape[5] = {1, 1, 1, 1, 1};
    return api->add_param(b, c, "p", 5, shape, LH_PARAM_PLAIN);
}
static lh_status c_quantizable_1d(const lh_host_api *api, lh_build *b)
{
    lh_module *c = api->add_container(b, NULL, "c");
    int64_t shape[1] = {8};
    return api->add_param(b, c, "w", 1, shape, LH_PARAM_WEIGHT_QUANTIZABLE);
}
static lh_status c_bad_kv(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.num_kv_heads = 3;
    CU_ASSERT_PTR_NULL(api->add_attention(b, NULL, "attn", &s));
    return api->build_status(b);
}
static lh_status c_zero_heads(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.num_heads = 0;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_zero_head_dim(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.head_dim = 0;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_bad_mla(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = deepseek_v3_spec();
    s.kv_lora_rank = 0;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_bad_mla_rope(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = deepseek_v3_spec();
    s.qk_rope_head_dim = -1;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_bad_mla_q_lora(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = deepseek_v3_spec();
    s.q_lora_rank = 0; /* has_q_lora_rank says the queries are compressed */
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_bad_scale(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.scale = NAN;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_bad_rope_theta(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.rope = true; /* rope_theta left 0 */
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_bad_chunk(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.attention_chunk_size = -8;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_moe_spec small_moe(void)
{
    return (lh_moe_spec){.struct_size = sizeof(lh_moe_spec), .hidden = 8, .n_experts = 4,
                         .expert_intermediate = 16,
                         .route = {.top_k = 2, .scoring = LH_K_MOE_SOFTMAX, .scale = 1.0f},
                         .router = "gate", .experts = "experts", .gate_linear = "g",
                         .up_linear = "u", .down_linear = "d"};
}
#define MOE_CASE(NAME, EDIT)                                                                      \
    static lh_status NAME(const lh_host_api *api, lh_build *b)                                    \
    {                                                                                             \
        lh_moe_spec s = small_moe();                                                              \
        EDIT;                                                                                     \
        api->add_moe(b, NULL, "mlp", &s);                                                         \
        return api->build_status(b);                                                              \
    }
MOE_CASE(c_moe_top_k, s.route.top_k = 5)
MOE_CASE(c_moe_experts, s.n_experts = 0)
MOE_CASE(c_moe_groups, (s.route.n_group = 2, s.route.topk_group = 1, s.route.top_k = 3))
MOE_CASE(c_moe_width, s.expert_intermediate = 0)
MOE_CASE(c_moe_name, s.up_linear = "")
MOE_CASE(c_moe_shared, s.shared_intermediate = 32)
MOE_CASE(c_moe_size, s.struct_size = 8)
MOE_CASE(c_moe_scale, s.route.scale = -1.0f)
MOE_CASE(c_moe_dup, s.up_linear = "g")
MOE_CASE(c_moe_gate_alone, s.shared_gate = "sg")
MOE_CASE(c_moe_group_score, (s.route.n_group = 2, s.route.topk_group = 1, s.route.top_k = 2,
                             s.route.group_score = (lh_k_moe_group_score)7))
static lh_status c_moe_null(const lh_host_api *api, lh_build *b)
{
    api->add_moe(b, NULL, "mlp", NULL);
    return api->build_status(b);
}
static lh_status c_spec_size(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.struct_size = 8;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_null_name(const lh_host_api *api, lh_build *b)
{
    CU_ASSERT_PTR_NULL(api->add_container(b, NULL, NULL));
    return api->build_status(b);
}
static lh_status c_empty_name(const lh_host_api *api, lh_build *b)
{
    lh_module *model = api->add_container(b, NULL, "model");
    api->add_rmsnorm(b, model, "", 4, 1e-5);
    return api->build_status(b);
}
static lh_status c_dot_name(const lh_host_api *api, lh_build *b)
{
    lh_module *model = api->add_container(b, NULL, "model");
    CU_ASSERT_PTR_NULL(api->add_linear(b, model, "layers.0", 4, 4, false));
    return api->build_status(b);
}
static lh_status c_dot_param(const lh_host_api *api, lh_build *b)
{
    lh_module *model = api->add_container(b, NULL, "model");
    int64_t shape[1] = {4};
    return api->add_param(b, model, "a.b", 1, shape, LH_PARAM_PLAIN);
}
static lh_status c_tie_mismatch(const lh_host_api *api, lh_build *b)
{
    lh_module *emb = api->add_embedding(b, NULL, "emb", 100, 64);
    lh_module *head = api->add_linear(b, NULL, "head", 64, 101, false);
    return api->tie_weights(b, head, emb);
}
static lh_status c_tie_self(const lh_host_api *api, lh_build *b)
{
    lh_module *emb = api->add_embedding(b, NULL, "emb", 100, 64);
    return api->tie_weights(b, emb, emb);
}
static lh_status c_tie_noweight(const lh_host_api *api, lh_build *b)
{
    lh_module *emb = api->add_embedding(b, NULL, "emb", 100, 64);
    lh_module *c = api->add_container(b, NULL, "c");
    return api->tie_weights(b, c, emb);
}
static lh_status c_base_not_root_child(const lh_host_api *api, lh_build *b)
{
    lh_module *tr = api->add_container(b, NULL, "transformer");
    return api->base_model(b, api->add_container(b, tr, "h"));
}
static lh_status c_base_twice(const lh_host_api *api, lh_build *b)
{
    api->base_model(b, api->add_container(b, NULL, "transformer"));
    return api->base_model(b, api->add_container(b, NULL, "model"));
}
static lh_status c_ignore_empty(const lh_host_api *api, lh_build *b)
{
    return api->ignore_tensors(b, "attn.");
}
static lh_status c_ignore_many(const lh_host_api *api, lh_build *b)
{
    for (int i = 0; i < 9; i++)
        api->ignore_tensors(b, "attn.bias");
    return api->build_status(b);
}
static lh_status c_layernorm_eps(const lh_host_api *api, lh_build *b)
{
    api->add_layernorm(b, NULL, "ln", 4, NAN, true);
    return api->build_status(b);
}
static lh_status c_transposed_dim(const lh_host_api *api, lh_build *b)
{
    api->add_linear_transposed(b, NULL, "c_attn", 8, 0, true);
    return api->build_status(b);
}
static lh_status c_rotary_dim(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.rotary_dim = s.head_dim + 2;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_softcap(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.logit_softcap = -50.0;
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_rope_factors(const lh_host_api *api, lh_build *b)
{
    lh_attention_spec s = small_spec();
    s.rope_scaling.kind = "longrope";
    s.rope_scaling.n_factors = 4; /* arrays missing */
    api->add_attention(b, NULL, "attn", &s);
    return api->build_status(b);
}
static lh_status c_bad_eps(const lh_host_api *api, lh_build *b)
{
    api->add_rmsnorm(b, NULL, "n", 4, -1.0);
    return api->build_status(b);
}
static lh_status c_fail(const lh_host_api *api, lh_build *b)
{
    api->add_container(b, NULL, "model");
    return api->build_fail(b, LH_E_UNSUPPORTED, "rope type %s is not supported", "weird");
}
static lh_status c_silent(const lh_host_api *api, lh_build *b)
{
    (void)api;
    (void)b;
    return LH_E_UNSUPPORTED;
}

typedef struct err_case {
    const char *label;
    case_fn fn;
    lh_status code;
    const char *substr;
} err_case;

static void test_build_errors(void)
{
    static const err_case cases[] = {
        {"duplicate module", c_dup, LH_E_USAGE, "duplicate module name 'model.dup'"},
        {"duplicate param", c_dup_param, LH_E_USAGE, "duplicate parameter 'x.bias'"},
        {"zero dim", c_zero_dim, LH_E_USAGE, "model.proj"},
        {"negative dim", c_neg_dim, LH_E_USAGE, "-3"},
        {"overflow", c_overflow, LH_E_USAGE, "overflow"},
        {"ndim", c_bad_ndim, LH_E_USAGE, "ndim 5"},
        {"quantizable 1d", c_quantizable_1d, LH_E_USAGE, "[out, in]"},
        {"kv heads", c_bad_kv, LH_E_USAGE, "num_kv_heads 3 must divide num_heads 4"},
        {"zero heads", c_zero_heads, LH_E_USAGE, "num_heads 0"},
        {"zero head dim", c_zero_head_dim, LH_E_USAGE, "head_dim 0"},
        {"mla kv_lora_rank", c_bad_mla, LH_E_USAGE, "kv_lora_rank"},
        {"mla rope", c_bad_mla_rope, LH_E_USAGE, "qk_rope_head_dim"},
        {"mla q_lora_rank", c_bad_mla_q_lora, LH_E_USAGE, "q_lora_rank (0) > 0 where present"},
        {"scale", c_bad_scale, LH_E_USAGE, "scale nan must be a finite value >= 0"},
        {"rope_theta", c_bad_rope_theta, LH_E_USAGE, "rope_theta 0 must be a finite value > 0"},
        {"chunk size", c_bad_chunk, LH_E_USAGE, "attention_chunk_size -8 must be >= 0"},
        {"spec size", c_spec_size, LH_E_USAGE, "struct_size"},
        {"moe top_k", c_moe_top_k, LH_E_USAGE, "moe 'mlp': top_k 5 must be in [1, n_experts 4]"},
        {"moe experts", c_moe_experts, LH_E_USAGE, "moe 'mlp': n_experts 0 must be in [1, 1024]"},
        {"moe groups", c_moe_groups, LH_E_USAGE,
         "moe 'mlp': n_group 2 / topk_group 1 (group score 0) cannot choose top_k 3 of 4 experts"},
        {"moe shared gate alone", c_moe_gate_alone, LH_E_USAGE,
         "moe 'mlp': shared_gate 'sg' without a shared expert"},
        {"moe group score", c_moe_group_score, LH_E_USAGE, "(group score 7) cannot choose"},
        {"moe width", c_moe_width, LH_E_USAGE, "expert_intermediate 0 must be > 0"},
        {"moe name", c_moe_name, LH_E_USAGE, "moe 'mlp': up_linear must be a non-empty name"},
        {"moe shared", c_moe_shared, LH_E_USAGE, "moe 'mlp': shared must be a non-empty name"},
        {"moe spec size", c_moe_size, LH_E_USAGE, "spec struct_size is smaller than the SDK's"},
        {"moe scale", c_moe_scale, LH_E_USAGE, "scale -1 and renorm_eps 0 must be finite"},
        {"moe names collide", c_moe_dup, LH_E_USAGE, "duplicate module name 'mlp.experts.0.g'"},
        {"moe NULL spec", c_moe_null, LH_E_USAGE, "moe 'mlp': NULL spec"},
        {"NULL name", c_null_name, LH_E_USAGE, "NULL name"},
        {"empty name", c_empty_name, LH_E_USAGE, "empty name"},
        {"dot name", c_dot_name, LH_E_USAGE, "'layers.0'"},
        {"dot param", c_dot_param, LH_E_USAGE, "'a.b'"},
        {"tie mismatch", c_tie_mismatch, LH_E_USAGE, "[101, 64]"},
        {"tie self", c_tie_self, LH_E_USAGE, "itself"},
        {"tie no weight", c_tie_noweight, LH_E_USAGE, "'c' has no weight"},
        {"base model not a root child", c_base_not_root_child, LH_E_USAGE,
         "the base model must be a child of the root"},
        {"two base models", c_base_twice, LH_E_USAGE, "'transformer' is already the base model"},
        {"ignore suffix", c_ignore_empty, LH_E_USAGE, "'attn.' is not a dotted name suffix"},
        {"ignore many", c_ignore_many, LH_E_USAGE, "more than 8 suffixes"},
        {"layernorm eps", c_layernorm_eps, LH_E_USAGE, "layernorm 'ln': eps nan"},
        {"transposed dim", c_transposed_dim, LH_E_USAGE, "'c_attn': dimension 1 is 0"},
        {"rotary_dim", c_rotary_dim, LH_E_USAGE, "rotary_dim"},
        {"softcap", c_softcap, LH_E_USAGE, "logit_softcap -50"},
        {"rope factors", c_rope_factors, LH_E_USAGE, "n_factors"},
        {"bad eps", c_bad_eps, LH_E_USAGE, "eps"},
        {"build_fail", c_fail, LH_E_UNSUPPORTED, "rope type weird is not supported"},
        {"silent failure", c_silent, LH_E_UNSUPPORTED, "without recording a message"},
    };
    lh_model_config *cfg = load_cfg(NULL, TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_case = cases[i].fn;
        lh_err err = {0};
        lh_status st;
        lh_model *m = build_with(construct_case, cfg, NULL, &st, &err);
        CU_ASSERT_PTR_NULL(m);
        lh_model_free(m);
        if (st != cases[i].code || !strstr(err.msg, cases[i].substr) ||
            strncmp(err.msg, "TestArch: ", 10) != 0)
            fprintf(stderr, "\n  case '%s': status %d, message: %s\n", cases[i].label, (int)st,
                    err.msg);
        CU_ASSERT_EQUAL(st, cases[i].code);
        CU_ASSERT_EQUAL(err.code, cases[i].code);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, cases[i].substr));
        CU_ASSERT_EQUAL(strncmp(err.msg, "TestArch: ", 10), 0);
    }
    lh_model_config_free(cfg);
}

static lh_status c_sticky(const lh_host_api *api, lh_build *b)
{
    lh_module *model = api->add_container(b, NULL, "model");
    CU_ASSERT_PTR_NOT_NULL(model);
    CU_ASSERT_PTR_NULL(api->add_linear(b, model, "p", 0, 4, false)); /* first error */
    lh_status first = api->build_status(b);
    CU_ASSERT_EQUAL(first, LH_E_USAGE);
    /* everything after is a no-op returning NULL / the recorded status */
    CU_ASSERT_PTR_NULL(api->module_root(b));
    CU_ASSERT_PTR_NULL(api->add_container(b, model, "ok"));
    CU_ASSERT_PTR_NULL(api->add_linear(b, model, "fine", 4, 4, true));
    CU_ASSERT_PTR_NULL(api->add_rmsnorm(b, model, "n", 4, 1e-5));
    CU_ASSERT_PTR_NULL(api->add_embedding(b, model, "e", 4, 4));
    CU_ASSERT_PTR_NULL(api->add_mlp(b, model, "mlp"));
    lh_attention_spec s = small_spec();
    CU_ASSERT_PTR_NULL(api->add_attention(b, model, "attn", &s));
    int64_t shape[1] = {0};
    CU_ASSERT_EQUAL(api->add_param(b, model, "x.y", 1, shape, LH_PARAM_PLAIN), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(api->add_layernorm(b, model, "ln", 4, 1e-5, true));
    CU_ASSERT_EQUAL(api->tie_weights(b, model, model), LH_E_USAGE);
    CU_ASSERT_EQUAL(api->build_fail(b, LH_E_IO, "second"), LH_E_IO);
    CU_ASSERT_EQUAL(api->build_status(b), first);
    return LH_OK; /* the recorded error still wins */
}

static void test_sticky_error(void)
{
    lh_model_config *cfg = load_cfg(NULL, TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    g_case = c_sticky;
    lh_err err = {0};
    lh_status st;
    lh_model *m = build_with(construct_case, cfg, NULL, &st, &err);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_EQUAL(st, LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "model.p"));
    CU_ASSERT_PTR_NULL(strstr(err.msg, "second"));
    lh_model_config_free(cfg);
}

static bool g_constructed;

static lh_status construct_flag(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    g_constructed = true;
    return construct_plain(api, b, cfg);
}

static lh_status refuse_config(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    (void)api;
    (void)cfg;
    return lh_error_set(err, LH_E_UNSUPPORTED, "mlp_bias=true is not supported");
}

static lh_status refuse_silently(const lh_host_api *api, const lh_model_config *cfg,
                                 lh_error *err)
{
    (void)api;
    (void)cfg;
    (void)err;
    return LH_E_UNSUPPORTED;
}

static void test_null_arguments(void)
{
    lh_err err = {0};
    lh_model *m = (lh_model *)&err;
    lh_host_api api = make_api();
    CU_ASSERT_EQUAL(lh_model_build(&api, NULL, NULL, NULL, &m, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_PTR_NULL(lh_build_module_root(NULL));
    CU_ASSERT_PTR_NULL(lh_build_add_container(NULL, NULL, "x"));
    CU_ASSERT_PTR_NULL(lh_build_add_linear(NULL, NULL, "x", 1, 1, false));
    CU_ASSERT_PTR_NULL(lh_build_add_mlp(NULL, NULL, "x"));
    CU_ASSERT_PTR_NULL(lh_build_add_attention(NULL, NULL, "x", NULL));
    CU_ASSERT_PTR_NULL(lh_model_attention_spec(NULL, "x"));
    CU_ASSERT_EQUAL(lh_build_status(NULL), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(lh_build_add_layernorm(NULL, NULL, "x", 1, 1e-5, false));
    CU_ASSERT_PTR_NULL(lh_build_add_linear_transposed(NULL, NULL, "x", 1, 1, false));
    CU_ASSERT_EQUAL(lh_model_plan(NULL, NULL, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(lh_model_plan_json(NULL, NULL));
    CU_ASSERT_EQUAL(lh_model_attention_count(NULL), 0);
    CU_ASSERT_FALSE(lh_model_find(NULL, "x", NULL));
    lh_model_free(NULL);

    /* a config without the decoder fields: the constructor's build_fail is the build's error */
    lh_model_config *cfg = NULL;
    CU_ASSERT_EQUAL_FATAL(
        lh_model_config_parse("{\"architectures\":[\"TestArch\"],\"hidden_size\":64}", "x.json",
                              &cfg, &err),
        LH_OK);
    lh_status st;
    m = build_with(construct_plain, cfg, NULL, &st, &err);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_EQUAL(st, LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "intermediate_size"));
    lh_model_config_free(cfg);

    /* a provider without ops, or ops without construct, has no constructor */
    cfg = load_cfg(NULL, TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    static const lh_model_ops no_construct = {.struct_size = sizeof(lh_model_ops)};
    const lh_model_provider no_ops = {sizeof no_ops, "NoOps", NULL, NULL};
    const lh_model_provider empty = {sizeof empty, "Empty", &no_construct, NULL};
    m = (lh_model *)&err;
    CU_ASSERT_EQUAL(lh_model_build(&api, &no_ops, cfg, NULL, &m, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "NoOps: provider has no constructor"));
    CU_ASSERT_EQUAL(lh_model_build(&api, &empty, cfg, NULL, &m, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "Empty: provider has no constructor"));

    /* check_config runs before construct: a refusal is the build's error, nothing built */
    static const lh_model_ops refusing = {.struct_size = sizeof(lh_model_ops),
                                          .construct = construct_flag,
                                          .check_config = refuse_config};
    static const lh_model_ops silent = {.struct_size = sizeof(lh_model_ops),
                                        .construct = construct_flag,
                                        .check_config = refuse_silently};
    const lh_model_provider p_refusing = {sizeof p_refusing, "TestArch", &refusing, NULL};
    const lh_model_provider p_silent = {sizeof p_silent, "TestArch", &silent, NULL};
    g_constructed = false;
    m = NULL;
    CU_ASSERT_EQUAL(lh_model_build(&api, &p_refusing, cfg, NULL, &m, &err), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_FALSE(g_constructed);
    CU_ASSERT_STRING_EQUAL(err.msg, "TestArch: mlp_bias=true is not supported");
    CU_ASSERT_EQUAL(lh_model_build(&api, &p_silent, cfg, NULL, &m, &err), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_FALSE(g_constructed);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "without saying why"));
    lh_model_config_free(cfg);
}

/* ---- quant ---- */

typedef struct captured_logs {
    char text[8192];
    int warnings;
} captured_logs;

static void sink(lh_log_level level, const char *msg, void *user)
{
    captured_logs *c = user;
    if (level == LH_LOG_WARN)
        c->warnings++;
    size_t n = strlen(c->text);
    snprintf(c->text + n, sizeof c->text - n, "%s\n", msg);
}

static void test_quant_apply(void)
{
    lh_quant_rule rules[2];
    memset(rules, 0, sizeof rules);
    rules[0].pattern = (char *)"*.mlp.*";
    rules[0].scheme = LH_QUANT_INT4;
    rules[0].group_size = 128;
    rules[1].pattern = (char *)"*.no_such_module";
    rules[1].scheme = LH_QUANT_INT8;
    char *excl[] = {(char *)"lm_head", (char *)"model.nothing*", (char *)"model.layers.1.mlp"};
    lh_run_config rc;
    memset(&rc, 0, sizeof rc);
    rc.max_batch_size = 1;
    rc.quant.scheme = LH_QUANT_FP8;
    rc.quant.group_size = 64;
    rc.quant.rules = rules;
    rc.quant.n_rules = 2;
    rc.quant.exclude_modules = excl;
    rc.quant.n_exclude = 3;

    captured_logs logs;
    memset(&logs, 0, sizeof logs);
    lh_log_level old = lh_log_get_level();
    lh_log_set_level(LH_LOG_WARN);
    lh_log_set_sink(sink, &logs);
    lh_memory_plan p;
    lh_model *m = build_decoder("llama-3.1-8b", LLAMA_3_1_8B, construct_plain, &rc, &p);
    lh_log_set_sink(NULL, NULL);
    lh_log_set_level(old);

    /* three patterns select no linear layer: one warning each, no error */
    CU_ASSERT_EQUAL(logs.warnings, 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(logs.text, "rule pattern '*.no_such_module' matches no module"));
    CU_ASSERT_PTR_NOT_NULL(strstr(logs.text, "pattern 'model.nothing*' matches no module"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(logs.text, "'model.layers.1.mlp' matches no linear layer of TestArch (it matches "
                          "'model.layers.1.mlp'"));

    /* per layer: q,o fp8 [4096,4096] + k,v fp8 [1024,4096] (+ f32 row scales); mlp int4 with
     * group 128 (f16 scales); norms bf16 */
    const int64_t q = 4096 * 4096 + 4 * 4096, kv = 1024 * 4096 + 4 * 1024;
    const int64_t gate = 14336 * 4096 / 2 + 2 * 14336 * (4096 / 128);
    const int64_t down = 4096 * 14336 / 2 + 2 * 4096 * (14336 / 128);
    const int64_t layer = 2 * q + 2 * kv + 2 * gate + down + 2 * 2 * 4096;
    const int64_t total = 32 * layer + 2 * (INT64_C(2) * 128256 * 4096) + 2 * 4096;
    CU_ASSERT_EQUAL(layer, 132833280);
    CU_ASSERT_EQUAL(total, INT64_C(6352019456));
    CU_ASSERT_EQUAL(p.weight_bytes, total);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(8030261248));
    CU_ASSERT_EQUAL(p.quantized_linears, 32 * 7);
    CU_ASSERT_EQUAL(group(&p, "attention", true), 32 * (2 * q + 2 * kv));
    CU_ASSERT_EQUAL(group(&p, "mlp", true), 32 * (2 * gate + down));
    CU_ASSERT_EQUAL(group(&p, "lm_head", true), INT64_C(2) * 128256 * 4096);
    check_group_sums(&p);

    lh_module_info info;
    CU_ASSERT_TRUE(lh_model_find(m, "lm_head", &info));
    CU_ASSERT_EQUAL(info.quant, LH_QUANT_NONE);
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.7.self_attn.k_proj", &info));
    CU_ASSERT_EQUAL(info.quant, LH_QUANT_FP8);
    CU_ASSERT_EQUAL(info.bytes, kv);
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.7.mlp.down_proj", &info));
    CU_ASSERT_EQUAL(info.quant, LH_QUANT_INT4);
    CU_ASSERT_EQUAL(info.bytes, down);
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.7.mlp", &info));
    CU_ASSERT_EQUAL(info.quant, LH_QUANT_NONE); /* not a linear */
    json_t *j = lh_model_plan_json(m, &p);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "quantized_linears")), 224);
    json_decref(j);
    lh_model_free(m);
}

static void test_quant_int8_bias_and_tied(void)
{
    /* Qwen2.5 int8 everywhere: biases stay bf16 */
    lh_run_config rc;
    memset(&rc, 0, sizeof rc);
    rc.quant.scheme = LH_QUANT_INT8;
    lh_module_info info;
    lh_memory_plan p;
    lh_model *m = build_decoder("qwen2.5-7b", QWEN2_5_7B, construct_qkv_bias, &rc, &p);
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.0.self_attn.k_proj", &info));
    CU_ASSERT_EQUAL(info.quant, LH_QUANT_INT8);
    CU_ASSERT_EQUAL(info.bytes, 512 * 3584 + 4 * 512 + 2 * 512);
    CU_ASSERT_EQUAL(p.quantized_linears, 28 * 7 + 1);
    lh_model_free(m);

    /* SmolLM2: tied lm_head stays with the embedding, unquantized, counted once */
    m = build_decoder("smollm2-135m", SMOLLM2_135M, construct_plain, &rc, &p);
    CU_ASSERT_TRUE(lh_model_find(m, "lm_head", &info));
    CU_ASSERT_EQUAL(info.quant, LH_QUANT_NONE);
    CU_ASSERT_EQUAL(info.bytes, 0);
    CU_ASSERT_EQUAL(p.quantized_linears, 30 * 7);
    CU_ASSERT_EQUAL(group(&p, "embedding", true), 2 * 49152 * 576);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(134515008));
    lh_model_free(m);
}

static void test_quant_int4_group_error(void)
{
    lh_quant_rule rule;
    memset(&rule, 0, sizeof rule);
    rule.pattern = (char *)"*down_proj";
    rule.scheme = LH_QUANT_INT4;
    rule.group_size = 4096; /* divides 4096 (gate/up) but not 14336 (down) */
    lh_run_config rc;
    memset(&rc, 0, sizeof rc);
    rc.quant.rules = &rule;
    rc.quant.n_rules = 1;
    lh_model_config *cfg = load_cfg("llama-3.1-8b", LLAMA_3_1_8B);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    lh_err err = {0};
    lh_status st;
    lh_model *m = build_with(construct_plain, cfg, &rc, &st, &err);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_EQUAL(st, LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "model.layers.0.mlp.down_proj"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "4096"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "14336"));

    /* the default scheme's group size applies when the rule has none */
    rule.group_size = 0;
    rc.quant.group_size = 2048;
    lh_memory_plan p;
    m = build_with(construct_plain, cfg, &rc, &st, &err);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT_EQUAL(lh_model_plan(m, &p, &err), LH_OK);
    CU_ASSERT_EQUAL(p.quantized_linears, 32);
    lh_module_info info;
    CU_ASSERT_TRUE(lh_model_find(m, "model.layers.0.mlp.down_proj", &info));
    CU_ASSERT_EQUAL(info.bytes, 4096 * 14336 / 2 + 2 * 4096 * 7);
    lh_model_free(m);
    lh_model_config_free(cfg);
}

/* The same quant config as a YAML run config goes through the real parser. */
static void test_quant_from_yaml(void)
{
    static const char yaml[] = "dtype: bfloat16\n"
                               "max_seq_len: 8192\n"
                               "max_batch_size: 4\n"
                               "quant:\n"
                               "  scheme: fp8\n"
                               "  exclude_modules: [lm_head]\n"
                               "  rules:\n"
                               "    - {pattern: '*.mlp.*', scheme: int4, group_size: 128}\n";
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    lh_status st = lh_run_config_load_string(&rc, yaml, "run.yaml", &err);
    if (st != LH_OK)
        fprintf(stderr, "run config: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    lh_memory_plan p;
    lh_model *m = build_decoder("llama-3.1-8b", LLAMA_3_1_8B, construct_plain, &rc, &p);
    CU_ASSERT_EQUAL(p.weight_bytes, INT64_C(6352019456));
    CU_ASSERT_EQUAL(p.quantized_linears, 224);
    CU_ASSERT_EQUAL(p.kv_pool_tokens, 8192 * 4);
    CU_ASSERT_EQUAL(p.kv_pool_bytes, INT64_C(8192) * 4 * 262144);
    lh_model_free(m);
    lh_run_config_free(&rc);
}

/* ---- built-in plugins through dlopen ---- */

static const lh_plugin_descriptor *open_plugin(const char *file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", lh_test_env("LH_BUILTIN_PLUGINS"), file);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return NULL;
    }
    lh_plugin_entry_fn entry;
    void *sym = dlsym(h, LH_PLUGIN_ENTRY_SYMBOL);
    if (!sym)
        return NULL;
    memcpy(&entry, &sym, sizeof entry);
    return entry(); /* plugins stay loaded, as the host keeps them */
}

static lh_status build_provider(const lh_host_api *api, const lh_model_provider *prov,
                                const char *fixture, const char *json, lh_memory_plan *p)
{
    lh_model_config *cfg = load_cfg(fixture, json);
    if (!cfg)
        return LH_E_CONFIG;
    lh_model *m = NULL;
    lh_err err = {0};
    lh_status st = lh_model_build(api, prov, cfg, NULL, &m, &err);
    if (st == LH_OK)
        st = lh_model_plan(m, p, &err);
    if (st != LH_OK)
        fprintf(stderr, "%s: %s\n", prov->name, err.msg);
    lh_model_free(m);
    lh_model_config_free(cfg);
    return st;
}

/* The parameter list of a tree as text, one "name [shape] (tied)" line each, in tree order. */
typedef struct tree_text {
    char *buf;
    size_t len, cap;
} tree_text;

static void append_param(const lh_param_info *p, void *user)
{
    tree_text *t = user;
    char line[512];
    int n = snprintf(line, sizeof line, "%s.%s [", p->module, p->name);
    for (int d = 0; d < p->ndim; d++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s%lld", d ? ", " : "",
                      (long long)p->shape[d]);
    n += snprintf(line + n, sizeof line - (size_t)n, "]%s\n", p->tied ? " tied" : "");
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *nb = realloc(t->buf, cap);
        if (!nb)
            return; /* the comparison below fails on the shorter text */
        t->buf = nb;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, line, (size_t)n + 1);
    t->len += (size_t)n;
}

/* The tree the built-in plugin builds is the one tests/support/llama_tree.c builds (which the
 * other tests count on): the same parameters in the same order, the same attention table,
 * norm chain and memory plan. */
static void check_same_tree(const lh_host_api *api, const lh_model_provider *prov,
                            lh_model_construct_fn local, const char *fixture, const char *json)
{
    lh_model_config *cfg = load_cfg(fixture, json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    lh_model *pm = NULL;
    lh_err err = {0};
    lh_status st = lh_model_build(api, prov, cfg, NULL, &pm, &err);
    if (st != LH_OK)
        fprintf(stderr, "%s: %s\n", prov->name, err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    lh_model *lm = build_with(local, cfg, NULL, &st, &err);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    tree_text a = {0}, b = {0};
    lh_model_foreach_param(pm, append_param, &a);
    lh_model_foreach_param(lm, append_param, &b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a.buf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.buf);
    if (strcmp(a.buf, b.buf) != 0)
        fprintf(stderr, "\n  %s (%s): the plugin's tree differs from llama_tree.c's\n",
                prov->name, fixture);
    CU_ASSERT_STRING_EQUAL(a.buf, b.buf);
    lh_memory_plan pp, lp;
    CU_ASSERT_EQUAL_FATAL(lh_model_plan(pm, &pp, &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_model_plan(lm, &lp, &err), LH_OK);
    json_t *pj = lh_model_plan_json(pm, &pp), *lj = lh_model_plan_json(lm, &lp);
    static const char *const keys[] = {"parameters", "weight_bytes", "kv_bytes_per_token",
                                       "kv_pool_bytes", "groups", "attention_layers"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        bool same = json_equal(json_object_get(pj, keys[i]), json_object_get(lj, keys[i]));
        if (!same)
            fprintf(stderr, "\n  %s (%s): plan '%s' differs\n", prov->name, fixture, keys[i]);
        CU_ASSERT_TRUE(same);
    }
    json_decref(pj);
    json_decref(lj);
    free(a.buf);
    free(b.buf);
    lh_model_free(pm);
    lh_model_free(lm);
    lh_model_config_free(cfg);
}

static const lh_model_provider *find_provider(const test_ctx *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->providers[i].name, name) == 0)
            return &t->providers[i];
    return NULL;
}

static void test_plugin_llama(void)
{
    const lh_plugin_descriptor *d = open_plugin("libmodel_llama.so");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(d->magic, LH_PLUGIN_MAGIC);
    CU_ASSERT_EQUAL(d->abi_major, LH_PLUGIN_ABI_MAJOR);
    CU_ASSERT_STRING_EQUAL(d->name, "model_llama");
    lh_host_api api = make_api();
    test_ctx t;
    memset(&t, 0, sizeof t);
    t_n_gguf = 0;
    CU_ASSERT_EQUAL_FATAL(d->init(&api, (lh_plugin_ctx *)(void *)&t), LH_OK);
    CU_ASSERT_EQUAL(t.n, 3);
    /* llama.cpp's "llama" files feed the Llama provider */
    CU_ASSERT_EQUAL(t_n_gguf, 1);
    CU_ASSERT_STRING_EQUAL(t_gguf[0][0], "llama");
    CU_ASSERT_STRING_EQUAL(t_gguf[0][1], "LlamaForCausalLM");
    const lh_model_provider *llama = find_provider(&t, "LlamaForCausalLM");
    const lh_model_provider *mistral = find_provider(&t, "MistralForCausalLM");
    CU_ASSERT_PTR_NOT_NULL_FATAL(llama);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mistral);
    lh_memory_plan p;
    CU_ASSERT_EQUAL(build_provider(&api, llama, "llama-3.1-8b", LLAMA_3_1_8B, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(8030261248));
    CU_ASSERT_EQUAL(build_provider(&api, llama, "smollm2-135m", SMOLLM2_135M, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(134515008));
    CU_ASSERT_EQUAL(build_provider(&api, mistral, "mistral-7b-v0.1", MISTRAL_7B, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(7241732096));
    CU_ASSERT_EQUAL(p.active_parameters, p.parameters); /* dense: every parameter runs */
    /* Mixtral: 8 experts per layer, 2 of them run per token */
    const lh_model_provider *mixtral = find_provider(&t, "MixtralForCausalLM");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mixtral);
    CU_ASSERT_EQUAL(build_provider(&api, mixtral, "mixtral-8x7b", MIXTRAL_8X7B, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(46702792704));
    CU_ASSERT_EQUAL(p.active_parameters, INT64_C(12879925248));
    CU_ASSERT_EQUAL(p.routed_expert_bytes, INT64_C(2) * 32 * 8 * 3 * 4096 * 14336); /* bf16 */
    CU_ASSERT_EQUAL(p.routed_share, 0.25);
    CU_ASSERT_EQUAL(group(&p, "mlp", false), INT64_C(32) * (8 * 3 * 4096 * 14336 + 8 * 4096));
    /* a provider that runs the model: the whole vtable, not only the tree */
    CU_ASSERT_PTR_NOT_NULL_FATAL(llama->ops);
    CU_ASSERT_EQUAL(llama->ops->struct_size, sizeof(lh_model_ops));
    CU_ASSERT_PTR_NOT_NULL(llama->ops->check_config);
    CU_ASSERT_PTR_NOT_NULL(llama->ops->bind);
    CU_ASSERT_PTR_NOT_NULL(llama->ops->forward);
    check_same_tree(&api, llama, construct_plain, "llama-3.1-8b", LLAMA_3_1_8B);
    check_same_tree(&api, llama, construct_plain, "smollm2-135m", SMOLLM2_135M);
    check_same_tree(&api, mistral, construct_plain, "mistral-7b-v0.1", MISTRAL_7B);
}

static void test_plugin_qwen(void)
{
    const lh_plugin_descriptor *d = open_plugin("libmodel_qwen.so");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_STRING_EQUAL(d->name, "model_qwen");
    lh_host_api api = make_api();
    test_ctx t;
    memset(&t, 0, sizeof t);
    CU_ASSERT_EQUAL_FATAL(d->init(&api, (lh_plugin_ctx *)(void *)&t), LH_OK);
    CU_ASSERT_EQUAL(t.n, 4);
    const lh_model_provider *q2 = find_provider(&t, "Qwen2ForCausalLM");
    const lh_model_provider *q3 = find_provider(&t, "Qwen3ForCausalLM");
    CU_ASSERT_PTR_NOT_NULL_FATAL(q2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q3);
    lh_memory_plan p;
    CU_ASSERT_EQUAL(build_provider(&api, q2, "qwen2.5-7b", QWEN2_5_7B, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(7615616512));
    CU_ASSERT_EQUAL(build_provider(&api, q3, "qwen3-8b", QWEN3_8B, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(8190735360));
    const lh_model_provider *q3m = find_provider(&t, "Qwen3MoeForCausalLM");
    CU_ASSERT_PTR_NOT_NULL_FATAL(q3m);
    CU_ASSERT_PTR_NOT_NULL(find_provider(&t, "Qwen2MoeForCausalLM"));
    CU_ASSERT_EQUAL(build_provider(&api, q3m, "qwen3-30b-a3b", QWEN3_30B_A3B, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(30532122624));
    /* 8 of 128 experts of 3 x 2048 x 768 per layer run */
    CU_ASSERT_EQUAL(p.active_parameters,
                    INT64_C(30532122624) - INT64_C(48) * 120 * 3 * 2048 * 768);
    check_same_tree(&api, q2, construct_qkv_bias, "qwen2.5-7b", QWEN2_5_7B);
    check_same_tree(&api, q3, construct_qk_norm, "qwen3-8b", QWEN3_8B);
}

/* The DeepSeek plugin's trees: the published parameter counts (transformers' num_parameters,
 * the router's correction bias a buffer, V3 without its multi-token-prediction layer), the
 * latent KV width, and no forward pass (construct only). */
static void test_plugin_deepseek(void)
{
    const lh_plugin_descriptor *d = open_plugin("libmodel_deepseek.so");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    lh_host_api api = make_api();
    test_ctx t;
    memset(&t, 0, sizeof t);
    CU_ASSERT_EQUAL_FATAL(d->init(&api, (lh_plugin_ctx *)(void *)&t), LH_OK);
    CU_ASSERT_EQUAL(t.n, 2);
    const lh_model_provider *ds2 = find_provider(&t, "DeepseekV2ForCausalLM");
    const lh_model_provider *ds3 = find_provider(&t, "DeepseekV3ForCausalLM");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds3);
    CU_ASSERT_PTR_NOT_NULL(ds2->ops->bind);
    CU_ASSERT_PTR_NOT_NULL(ds3->ops->forward);
    lh_memory_plan p;
    CU_ASSERT_EQUAL(build_provider(&api, ds2, "deepseek-v2-lite", DEEPSEEK_V2_LITE, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(15706484224));
    /* 6 of 64 experts of 3 x 2048 x 1408 in 26 sparse layers */
    CU_ASSERT_EQUAL(p.active_parameters,
                    INT64_C(15706484224) - INT64_C(26) * 58 * 3 * 2048 * 1408);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, INT64_C(27) * (512 + 64) * 4); /* f32 latent */
    CU_ASSERT_EQUAL(build_provider(&api, ds3, "deepseek-v3", DEEPSEEK_V3, &p), LH_OK);
    CU_ASSERT_EQUAL(p.parameters, INT64_C(671026404352));
    CU_ASSERT_EQUAL(p.active_parameters,
                    INT64_C(671026404352) - INT64_C(58) * 248 * 3 * 7168 * 2048);
    CU_ASSERT_EQUAL(p.num_attention_layers, 61);
    printf("\n    deepseek-v3: %lld parameters, %lld active", (long long)p.parameters,
           (long long)p.active_parameters);
    /* what transformers' modeling does not do is refused, by name */
    static const struct {
        const char *edit, *needle;
        bool v3;
    } bad[] = {
        {"\"topk_method\":\"noaux_tc\"", "topk_method 'noaux_tc' is not part of DeepSeek-V2", false},
        {"\"scoring_func\":\"sigmoid\"", "scoring_func 'sigmoid': DeepSeek-V2 scores with softmax",
         false},
        {"\"moe_layer_freq\":2", "moe_layer_freq 2", true},
        {"\"scoring_func\":\"softmax\"", "DeepSeek-V3 scores with sigmoid", true},
        {"\"mlp_bias\":true", "mlp_bias true", false},
        {"\"hidden_act\":\"gelu\"", "hidden_act 'gelu'", true},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *base = bad[i].v3 ? DEEPSEEK_V3 : DEEPSEEK_V2_LITE;
        char json[4096];
        /* the edit replaces the config's own key: drop it, then append */
        const char *key_end = strchr(bad[i].edit + 1, '"');
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(key_end - bad[i].edit + 1), bad[i].edit);
        const char *at = strstr(base, key);
        if (at) {
            const char *comma = strchr(at, ',');
            snprintf(json, sizeof json, "%.*s%s", (int)(at - base), base, comma + 1);
        } else {
            snprintf(json, sizeof json, "%s", base);
        }
        char *close = strrchr(json, '}');
        snprintf(close, sizeof json - (size_t)(close - json), ",%s}", bad[i].edit);
        lh_model_config *cfg = load_cfg(NULL, json);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
        lh_model *m = NULL;
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_model_build(&api, bad[i].v3 ? ds3 : ds2, cfg, NULL, &m, &err),
                        LH_E_UNSUPPORTED);
        if (!strstr(err.msg, bad[i].needle))
            printf("\n    want \"%s\"\n    got  \"%s\"", bad[i].needle, err.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i].needle));
        lh_model_free(m);
        lh_model_config_free(cfg);
    }
    /* V2 without num_experts_per_tok (transformers has no default for it) */
    char json[4096];
    const char *at = strstr(DEEPSEEK_V2_LITE, "\"num_experts_per_tok\"");
    snprintf(json, sizeof json, "%.*s%s", (int)(at - DEEPSEEK_V2_LITE), DEEPSEEK_V2_LITE,
             strchr(at, ',') + 1);
    lh_model_config *cfg = load_cfg(NULL, json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    lh_model *m = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_model_build(&api, ds2, cfg, NULL, &m, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "num_experts_per_tok"));
    lh_model_free(m);
    lh_model_config_free(cfg);
}


static CU_TestInfo arch_tests[] = {
    {"llama 3.1 8b: counts, shapes, table", test_llama31_8b},
    {"mistral 7b v0.1", test_mistral_7b},
    {"qwen2.5 7b: q/k/v bias", test_qwen25_7b},
    {"qwen3 8b: q/k norm", test_qwen3_8b},
    {"smollm2 135m: tied lm_head counts 0", test_smollm2_tied},
    {"llama 3.1 405b: fast, small peak", test_llama31_405b_fast},
    {"plan json", test_plan_json},
    {"run config dtype and kv pool", test_run_config_dtype_and_pool},
    {"mla deepseek v3 / v2-lite", test_mla_deepseek_v3},
    {"mla from config geometry", test_mla_from_geometry},
    {"attention table duplicate keys", test_attention_duplicates},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo error_tests[] = {
    {"building-block validation errors", test_build_errors},
    {"sticky error: first wins", test_sticky_error},
    {"NULL arguments, missing config fields, no constructor, check_config",
     test_null_arguments},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo quant_tests[] = {
    {"fp8 default, exclude lm_head, int4 mlp rule", test_quant_apply},
    {"int8 keeps biases, tied weights unquantized", test_quant_int8_bias_and_tied},
    {"int4 group size must divide in", test_quant_int4_group_error},
    {"quant config from a YAML run config", test_quant_from_yaml},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo plugin_tests[] = {
    {"libmodel_llama.so", test_plugin_llama},
    {"libmodel_qwen.so", test_plugin_qwen},
    {"libmodel_deepseek.so: published counts, latent KV, no forward yet", test_plugin_deepseek},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"model_arch", NULL, NULL, NULL, NULL, arch_tests},
    {"model_errors", NULL, NULL, NULL, NULL, error_tests},
    {"model_quant", NULL, NULL, NULL, NULL, quant_tests},
    {"model_plugins", NULL, NULL, NULL, NULL, plugin_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
