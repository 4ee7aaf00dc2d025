/* Resolving a config to a provider (DESIGN §6): each step, the trace, and the error classes. */
#include "loader_util.h"

#include "resolve/resolve.h"

#include <stdlib.h>
#include <string.h>

#define TARGET "libmodel_tp_target.so"
#define ALPHA "libmodel_tp_alpha.so"

/* A built-in dir with tp_alpha (Alpha, Shared) plus rows for broken files, and a custom
 * indexed dir with tp_target. */
typedef struct rs {
    fx f;
    char *builtin, *custom;
    lh_registry reg;
    bool ok;
} rs;

static bool rs_open(rs *t)
{
    memset(t, 0, sizeof *t);
    if (!fx_init(&t->f))
        return false;
    t->builtin = fx_dir(&t->f, "plugins", PLUGINS(ALPHA, "libmodel_tp_abi_major.so"),
                        ROWS("model AlphaForCausalLM " ALPHA, "model SharedForCausalLM " ALPHA,
                             "model BrokenForCausalLM libmodel_tp_abi_major.so",
                             "model GoneForCausalLM libmodel_tp_gone.so",
                             "model BrokenImpl libmodel_tp_abi_major.so"));
    t->custom = fx_dir(&t->f, "custom", PLUGINS(TARGET),
                       ROWS("model TargetImpl " TARGET, "model EAGLE3LlamaForCausalLM " TARGET,
                            "vision_encoder AlphaVisionModel " TARGET, "draft eagle3 " TARGET,
                            "draft mtp " TARGET));
    t->ok = reg_open(&t->reg, t->builtin, false) && reg_add(&t->reg, t->custom);
    return t->ok;
}

static void rs_close(rs *t)
{
    if (t->reg.builtin_dir)
        lh_registry_destroy(&t->reg);
    free(t->builtin);
    free(t->custom);
    fx_free(&t->f);
}

/* Resolves cfg (arch + extra members) under a YAML run config (NULL: defaults). */
static lh_status resolve(rs *t, const char *arch, const char *extra, const char *yaml,
                         lh_resolution *r, lh_err *err)
{
    lh_model_config *cfg = small_cfg(arch, extra);
    lh_run_config rc;
    run_cfg(&rc, yaml);
    lh_status st = cfg ? lh_resolve(&t->reg, cfg, &rc, r, err) : LH_E_INTERNAL;
    /* r->architecture borrows from cfg: keep a copy the tests can compare */
    lh_run_config_free(&rc);
    if (st == LH_OK) {
        static char arch_copy[256];
        snprintf(arch_copy, sizeof arch_copy, "%s", r->architecture);
        r->architecture = arch_copy;
    }
    lh_model_config_free(cfg);
    return st;
}

static bool json_array_has(json_t *arr, const char *sub)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (s && strstr(s, sub))
            return true;
    }
    return false;
}

/* The trace entry of `step` whose decision contains sub. */
static bool trace_has(const lh_resolution *r, int step, const char *sub)
{
    size_t i;
    json_t *v;
    json_array_foreach(r->trace, i, v)
    {
        json_int_t s = json_integer_value(json_object_get(v, "step"));
        const char *d = json_string_value(json_object_get(v, "decision"));
        if (s == step && d && strstr(d, sub))
            return true;
    }
    char *dump = json_dumps(r->trace, JSON_INDENT(2));
    fprintf(stderr, "\n  trace lacks step %d '%s':\n%s\n", step, sub, dump ? dump : "");
    free(dump);
    return false;
}

static void test_architectures_missing(void)
{
    rs t;
    if (rs_open(&t)) {
        lh_resolution r;
        lh_err err = {0};
        lh_status st = resolve(&t, NULL, NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_CONFIG, err);
        EXPECT_HAS(err.msg, "'architectures'");
        EXPECT_HAS(err.msg, "/test/config.json");
        CU_ASSERT_PTR_NULL(r.trace);
        CU_ASSERT_PTR_NULL(r.resolved);
        lh_model_config *cfg = NULL;
        st = lh_model_config_parse("{\"architectures\": [], \"hidden_size\": 64}",
                                   "/test/empty.json", &cfg, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (cfg) {
            st = lh_resolve(&t.reg, cfg, NULL, &r, &err);
            EXPECT_STATUS(st, LH_E_CONFIG, err);
            EXPECT_HAS(err.msg, "'architectures'");
            lh_model_config_free(cfg);
        }
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 0);
    }
    rs_close(&t);
}

static void test_plain_lookup_and_trace(void)
{
    rs t;
    if (rs_open(&t)) {
        lh_resolution r;
        lh_err err = {0};
        lh_status st = resolve(&t, "AlphaForCausalLM", NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.architecture, "AlphaForCausalLM");
            CU_ASSERT_STRING_EQUAL(r.resolved, "AlphaForCausalLM");
            CU_ASSERT_EQUAL(r.kind, LH_KIND_MODEL);
            CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, ALPHA);
            CU_ASSERT_TRUE(r.entry->module->builtin);
            CU_ASSERT_EQUAL(json_array_size(r.rewrites), 0);
            /* every step is visible, in order */
            CU_ASSERT_EQUAL(json_array_size(r.trace), 5);
            for (size_t i = 0; i < json_array_size(r.trace); i++)
                CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(r.trace, i),
                                                                   "step")),
                                (json_int_t)i + 1);
            CU_ASSERT_TRUE(trace_has(&r, 5, ALPHA));
            lh_resolution_free(&r);
        }
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1);
        /* a NULL run config is the defaults */
        lh_model_config *cfg = small_cfg("SharedForCausalLM", NULL);
        st = lh_resolve(&t.reg, cfg, NULL, &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, ALPHA);
            lh_resolution_free(&r);
        }
        lh_model_config_free(cfg);
    }
    rs_close(&t);
}

static void test_encoder_only(void)
{
    rs t;
    if (rs_open(&t)) {
        lh_resolution r;
        lh_err err = {0};
        lh_status st = resolve(&t, "AlphaVisionModel", NULL, "mm_encoder_only: true\n", &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_EQUAL(r.kind, LH_KIND_VISION_ENCODER);
            CU_ASSERT_STRING_EQUAL(r.resolved, "AlphaVisionModel");
            CU_ASSERT_EQUAL(r.entry->kind, LH_KIND_VISION_ENCODER);
            CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, TARGET);
            CU_ASSERT_TRUE(trace_has(&r, 2, "mm_encoder_only"));
            lh_resolution_free(&r);
        }
        /* an LLM architecture is not a vision encoder, even if a model of that name exists */
        st = resolve(&t, "AlphaForCausalLM", NULL, "mm_encoder_only: true\n", &r, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "vision_encoder");
        EXPECT_HAS(err.msg, "'AlphaForCausalLM'");
        CU_ASSERT_PTR_NULL(module_at(&t.reg, t.builtin, ALPHA)); /* not loaded for that */
        /* without mm_encoder_only the vision name is not a model */
        st = resolve(&t, "AlphaVisionModel", NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "'AlphaVisionModel'");
    }
    rs_close(&t);
}

static void test_eagle3(void)
{
    rs t;
    if (rs_open(&t)) {
        static const char *const names[] = {"LlamaForCausalLMEagle3", "LlamaEagle3ForCausalLM",
                                            "Eagle3LlamaForCausalLM"};
        for (size_t i = 0; i < 3; i++) {
            lh_resolution r;
            lh_err err = {0};
            lh_status st = resolve(&t, names[i], "\"draft_vocab_size\": 32", NULL, &r, &err);
            EXPECT_STATUS(st, LH_OK, err);
            if (st != LH_OK)
                continue;
            CU_ASSERT_STRING_EQUAL(r.architecture, names[i]);
            CU_ASSERT_STRING_EQUAL(r.resolved, "EAGLE3LlamaForCausalLM");
            CU_ASSERT_EQUAL(r.kind, LH_KIND_MODEL);
            CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, TARGET);
            CU_ASSERT_FALSE(r.entry->module->builtin);
            CU_ASSERT_EQUAL(json_array_size(r.rewrites), 1);
            CU_ASSERT_TRUE(json_array_has(r.rewrites, names[i]));
            CU_ASSERT_TRUE(json_array_has(r.rewrites, "EAGLE3LlamaForCausalLM"));
            CU_ASSERT_TRUE(trace_has(&r, 3, "EAGLE3LlamaForCausalLM"));
            lh_resolution_free(&r);
        }
        /* without draft_vocab_size: no rewrite, so unknown under its own name */
        lh_resolution r;
        lh_err err = {0};
        lh_status st = resolve(&t, "LlamaForCausalLMEagle3", NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "LlamaForCausalLMEagle3");
        /* unknown after the rewrite: the message names the original */
        st = resolve(&t, "FooForCausalLMEagle3", "\"draft_vocab_size\": 32", NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "'FooForCausalLMEagle3'");
        EXPECT_HAS(err.msg, "EAGLE3FooForCausalLM");
    }
    rs_close(&t);
}

static void test_target_accepts(void)
{
    rs t;
    if (rs_open(&t)) {
        static const char *const yamls[] = {
            "model_impl:\n  target: TargetImpl\n  mode: auto\ndtype: bfloat16\n",
            "model_impl:\n  target: TargetImpl\n  mode: require\ndtype: bfloat16\n",
            "model_impl:\n  target: TargetImpl\n", /* auto; dtype from the checkpoint default */
        };
        for (size_t i = 0; i < 3; i++) {
            lh_resolution r;
            lh_err err = {0};
            lh_status st = resolve(&t, "AlphaForCausalLM", NULL, yamls[i], &r, &err);
            EXPECT_STATUS(st, LH_OK, err);
            if (st != LH_OK)
                continue;
            CU_ASSERT_STRING_EQUAL(r.architecture, "AlphaForCausalLM");
            CU_ASSERT_STRING_EQUAL(r.resolved, "TargetImpl");
            CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, TARGET);
            CU_ASSERT_TRUE(json_array_has(r.rewrites, "TargetImpl"));
            CU_ASSERT_TRUE(trace_has(&r, 4, "accepts"));
            lh_resolution_free(&r);
        }
    }
    rs_close(&t);
}

static void test_target_refuses(void)
{
    rs t;
    if (rs_open(&t)) {
        lh_resolution r;
        lh_err err = {0};
        /* auto: fall back to the built-in implementation, with an info log */
        logcap_start();
        lh_status st = resolve(&t, "AlphaForCausalLM", NULL,
                               "model_impl:\n  target: TargetImpl\n  mode: auto\ndtype: float32\n",
                               &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.resolved, "AlphaForCausalLM");
            CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, ALPHA);
            CU_ASSERT_TRUE(r.entry->module->builtin);
            CU_ASSERT_EQUAL(json_array_size(r.rewrites), 0);
            CU_ASSERT_TRUE(trace_has(&r, 4, "no target"));
            CU_ASSERT_TRUE(trace_has(&r, 4, "float32 weights are not supported"));
            lh_resolution_free(&r);
        }
        int i = logcap_find(LH_LOG_INFO, "TargetImpl", "float32 weights are not supported",
                            "AlphaForCausalLM");
        if (i < 0)
            logcap_dump();
        CU_ASSERT_TRUE(i >= 0);
        logcap_stop();
        /* float32 from the checkpoint's torch_dtype counts too */
        st = resolve(&t, "AlphaForCausalLM", "\"torch_dtype\": \"float32\"",
                     "model_impl:\n  target: TargetImpl\n", &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.resolved, "AlphaForCausalLM");
            lh_resolution_free(&r);
        }
        /* ...unless the run config overrides it */
        st = resolve(&t, "AlphaForCausalLM", "\"torch_dtype\": \"float32\"",
                     "model_impl:\n  target: TargetImpl\ndtype: bfloat16\n", &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.resolved, "TargetImpl");
            lh_resolution_free(&r);
        }
        /* require: an error carrying the reason */
        st = resolve(&t, "AlphaForCausalLM", NULL,
                     "model_impl:\n  target: TargetImpl\n  mode: require\ndtype: float32\n", &r,
                     &err);
        EXPECT_STATUS(st, LH_E_UNSUPPORTED, err);
        EXPECT_HAS(err.msg, "float32 weights are not supported");
        EXPECT_HAS(err.msg, "TargetImpl");
        EXPECT_HAS(err.msg, "AlphaForCausalLM");
        EXPECT_HAS(err.msg, "require");
    }
    rs_close(&t);
}

static void test_target_off_and_unknown(void)
{
    rs t;
    if (rs_open(&t)) {
        lh_resolution r;
        lh_err err = {0};
        /* off: the target is ignored and not loaded */
        lh_status st = resolve(&t, "AlphaForCausalLM", NULL,
                               "model_impl:\n  target: TargetImpl\n  mode: off\n", &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.resolved, "AlphaForCausalLM");
            CU_ASSERT_TRUE(trace_has(&r, 4, "off"));
            lh_resolution_free(&r);
        }
        CU_ASSERT_PTR_NULL(module_at(&t.reg, t.custom, TARGET));
        /* an unknown target is an error under auto and require */
        static const char *const modes[] = {"auto", "require"};
        for (size_t i = 0; i < 2; i++) {
            char yaml[256];
            snprintf(yaml, sizeof yaml, "model_impl:\n  target: NoSuchImpl\n  mode: %s\n",
                     modes[i]);
            st = resolve(&t, "AlphaForCausalLM", NULL, yaml, &r, &err);
            EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
            EXPECT_HAS(err.msg, "NoSuchImpl");
            EXPECT_HAS(err.msg, "model_impl.target");
            EXPECT_HAS(err.msg, "AlphaForCausalLM");
        }
        /* a target whose plugin fails to load: the load class, even under auto */
        st = resolve(&t, "AlphaForCausalLM", NULL, "model_impl:\n  target: BrokenImpl\n", &r,
                     &err);
        EXPECT_STATUS(st, LH_E_ABI, err);
        EXPECT_LACKS(err.msg, "unknown");
    }
    rs_close(&t);
}

static void test_unknown_architecture(void)
{
    rs t;
    if (rs_open(&t)) {
        lh_resolution r;
        lh_err err = {0};
        lh_status st = resolve(&t, "AlphaForCausalLm", NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "architecture 'AlphaForCausalLm'");
        EXPECT_HAS(err.msg, "did you mean 'AlphaForCausalLM'");
        CU_ASSERT_PTR_NULL(r.trace);
        /* with a target that refuses, the unknown name is still the original one */
        st = resolve(&t, "NopeForCausalLM", NULL,
                     "model_impl:\n  target: TargetImpl\ndtype: float32\n", &r, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "'NopeForCausalLM'");
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1); /* only the target was loaded */
    }
    rs_close(&t);
}

static void test_load_failure_not_unknown(void)
{
    rs t;
    if (rs_open(&t)) {
        lh_resolution r;
        lh_err err = {0};
        lh_status st = resolve(&t, "BrokenForCausalLM", NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_ABI, err);
        EXPECT_HAS(err.msg, "BrokenForCausalLM");
        EXPECT_HAS(err.msg, "libmodel_tp_abi_major.so");
        EXPECT_LACKS(err.msg, "unknown");
        st = resolve(&t, "GoneForCausalLM", NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_MODULE_MISSING, err);
        EXPECT_HAS(err.msg, "libmodel_tp_gone.so");
        EXPECT_LACKS(err.msg, "unknown");
        /* and again: from the memo, same class */
        st = resolve(&t, "BrokenForCausalLM", NULL, NULL, &r, &err);
        EXPECT_STATUS(st, LH_E_ABI, err);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1);
    }
    rs_close(&t);
}

static void test_runtime_dtype(void)
{
    lh_model_config *plain = small_cfg("AlphaForCausalLM", NULL);
    lh_model_config *f16 = small_cfg("AlphaForCausalLM", "\"torch_dtype\": \"float16\"");
    lh_run_config rc;
    run_cfg(&rc, NULL);
    if (plain && f16) {
        CU_ASSERT_EQUAL(lh_runtime_dtype(plain, NULL), LH_DTYPE_BF16);
        CU_ASSERT_EQUAL(lh_runtime_dtype(plain, &rc), LH_DTYPE_BF16);
        CU_ASSERT_EQUAL(lh_runtime_dtype(f16, &rc), LH_DTYPE_F16);
        lh_run_config_free(&rc);
        run_cfg(&rc, "dtype: float32\n");
        CU_ASSERT_EQUAL(lh_runtime_dtype(f16, &rc), LH_DTYPE_F32);
    }
    lh_run_config_free(&rc);
    lh_model_config_free(plain);
    lh_model_config_free(f16);
}

/* With the real built-in plugins: fall back from the target to the built-in llama. */
static void test_real_builtin_fallback(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *custom = fx_dir(&f, "custom", PLUGINS(TARGET), ROWS("model TargetImpl " TARGET));
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/configs/llama-3.1-8b", lh_test_env("LH_FIXTURES"));
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    lh_status st = lh_model_config_load(cfg_path, &cfg, &err);
    EXPECT_STATUS(st, LH_OK, err);
    lh_registry reg;
    if (cfg && reg_open(&reg, lh_test_env("LH_BUILTIN_PLUGINS"), false)) {
        reg_add(&reg, custom);
        lh_run_config rc;
        run_cfg(&rc, "model_impl:\n  target: TargetImpl\ndtype: float32\n");
        lh_resolution r;
        st = lh_resolve(&reg, cfg, &rc, &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.resolved, "LlamaForCausalLM");
            CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, "libmodel_llama.so");
            CU_ASSERT_TRUE(r.entry->module->builtin);
            lh_resolution_free(&r);
        }
        CU_ASSERT_EQUAL(reg.dlopen_calls, 2);
        lh_run_config_free(&rc);
        run_cfg(&rc, "model_impl:\n  target: TargetImpl\ndtype: bfloat16\n");
        st = lh_resolve(&reg, cfg, &rc, &r, &err);
        EXPECT_STATUS(st, LH_OK, err);
        if (st == LH_OK) {
            CU_ASSERT_STRING_EQUAL(r.resolved, "TargetImpl");
            CU_ASSERT_STRING_EQUAL(r.architecture, "LlamaForCausalLM");
            lh_resolution_free(&r);
        }
        lh_run_config_free(&rc);
        lh_registry_destroy(&reg);
    }
    lh_model_config_free(cfg);
    free(custom);
    fx_free(&f);
}

/* Resolving a built-in architecture loads exactly its plugin. */
static void test_real_builtin_exactly_one(void)
{
    static const struct {
        const char *fixture, *file;
    } cases[] = {{"qwen3-8b", "libmodel_qwen.so"}, {"llama-3.1-8b", "libmodel_llama.so"},
                 {"mistral-7b-v0.1", "libmodel_llama.so"}};
    for (size_t i = 0; i < 3; i++) {
        char cfg_path[4200];
        snprintf(cfg_path, sizeof cfg_path, "%s/configs/%s", lh_test_env("LH_FIXTURES"),
                 cases[i].fixture);
        lh_model_config *cfg = NULL;
        lh_err err = {0};
        lh_status st = lh_model_config_load(cfg_path, &cfg, &err);
        EXPECT_STATUS(st, LH_OK, err);
        lh_registry reg;
        if (cfg && reg_open(&reg, lh_test_env("LH_BUILTIN_PLUGINS"), false)) {
            lh_resolution r;
            st = lh_resolve(&reg, cfg, NULL, &r, &err);
            EXPECT_STATUS(st, LH_OK, err);
            if (st == LH_OK) {
                CU_ASSERT_STRING_EQUAL(r.entry->module->file_name, cases[i].file);
                lh_resolution_free(&r);
            }
            CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
            CU_ASSERT_EQUAL(reg.n_modules, 1);
            lh_registry_destroy(&reg);
        }
        lh_model_config_free(cfg);
    }
}

static CU_TestInfo steps_tests[] = {
    {"architectures missing or empty", test_architectures_missing},
    {"plain lookup and trace", test_plain_lookup_and_trace},
    {"mm_encoder_only", test_encoder_only},
    {"EAGLE-3 rewrite", test_eagle3},
    {"target accepts", test_target_accepts},
    {"target refuses: auto falls back, require fails", test_target_refuses},
    {"target off and unknown", test_target_off_and_unknown},
    {"unknown architecture carries the original", test_unknown_architecture},
    {"load failure is not unknown", test_load_failure_not_unknown},
    {"runtime dtype", test_runtime_dtype},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo builtin_tests[] = {
    {"real built-in fallback", test_real_builtin_fallback},
    {"real built-in loads exactly one", test_real_builtin_exactly_one},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"resolve: steps", NULL, NULL, NULL, NULL, steps_tests},
    {"resolve: built-in plugins", NULL, NULL, NULL, NULL, builtin_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
