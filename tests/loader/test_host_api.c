/* Public API smoke test (llmhost.h), linked against the shared libllmhost like an embedder:
 * create, custom dirs (API and environment), list, resolve. */
#include "llmhost.h"
#include "runner.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static void expect_ok(lh_status st, const lh_err *err)
{
    if (st != LH_OK)
        fprintf(stderr, "\n  unexpected %s: %s\n", lh_status_name(st), err->msg);
    CU_ASSERT_EQUAL(st, LH_OK);
}

/* mkdir root/name, copy the plugin, write an index with rows ("kind\tname\tfile\n"...). */
static char *plugin_dir(const char *root, const char *name, const char *plugin, const char *rows)
{
    char *dir = join(root, name);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    chmod(dir, 0755);
    char *src = join(lh_test_env("LH_TEST_PLUGINS"), plugin);
    CU_ASSERT_EQUAL_FATAL(lh_test_copy_file(src, dir, plugin, 0755), 0);
    free(src);
    char text[1024];
    snprintf(text, sizeof text, "#llmhost-arch-index\t1\n%s", rows);
    CU_ASSERT_EQUAL_FATAL(lh_test_write_file(dir, "arch_index.tsv", text), 0);
    char *idx = join(dir, "arch_index.tsv");
    chmod(idx, 0644);
    free(idx);
    return dir;
}

/* A model dir holding config.json for arch. */
static char *model_dir(const char *root, const char *name, const char *arch)
{
    char *dir = join(root, name);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    char text[512];
    snprintf(text, sizeof text,
             "{\"architectures\": [\"%s\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
             arch);
    CU_ASSERT_EQUAL_FATAL(lh_test_write_file(dir, "config.json", text), 0);
    return dir;
}

static lh_host *make_host(void)
{
    lh_host_options o = {.struct_size = sizeof o,
                         .plugin_dir = lh_test_env("LH_BUILTIN_PLUGINS")};
    lh_host *h = NULL;
    lh_err err = {0};
    lh_status st = lh_host_create(&o, &h, &err);
    expect_ok(st, &err);
    return h;
}

static json_t *list(lh_host *h)
{
    char *out = NULL;
    lh_err err = {0};
    lh_status st = lh_host_list_json(h, &out, &err);
    expect_ok(st, &err);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    CU_ASSERT_PTR_NOT_NULL(j);
    free(out);
    return j;
}

static json_t *resolve(lh_host *h, const char *model, const char *const *overrides,
                       lh_status want, lh_err *err)
{
    lh_resolve_request req = {.struct_size = sizeof req, .model = model, .overrides = overrides};
    char *out = NULL;
    lh_status st = lh_host_resolve_json(h, &req, &out, err);
    if (st != want)
        fprintf(stderr, "\n  resolve %s: %s, expected %s: %s\n", model, lh_status_name(st),
                lh_status_name(want), err->msg);
    CU_ASSERT_EQUAL(st, want);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    if (want == LH_OK)
        CU_ASSERT_PTR_NOT_NULL(j);
    free(out);
    return j;
}

static const char *jstr(json_t *j, const char *key)
{
    const char *s = json_string_value(json_object_get(j, key));
    if (!s)
        fprintf(stderr, "\n  JSON lacks string '%s'\n", key);
    CU_ASSERT_PTR_NOT_NULL(s);
    return s ? s : "";
}

static void test_create_list_resolve(void)
{
    lh_host *h = make_host();
    if (!h)
        return;
    json_t *l = list(h);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(l, "loaded_plugins")), 0);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(l, "modules")), 0);
    char *canon = realpath(lh_test_env("LH_BUILTIN_PLUGINS"), NULL);
    CU_ASSERT_STRING_EQUAL(jstr(l, "builtin_dir"), canon);
    json_decref(l);

    char model[PATH_MAX];
    snprintf(model, sizeof model, "%s/configs/llama-3.1-8b", lh_test_env("LH_FIXTURES"));
    lh_err err = {0};
    json_t *j = resolve(h, model, NULL, LH_OK, &err);
    if (j) {
        CU_ASSERT_STRING_EQUAL(jstr(j, "architecture"), "LlamaForCausalLM");
        CU_ASSERT_STRING_EQUAL(jstr(j, "resolved_architecture"), "LlamaForCausalLM");
        CU_ASSERT_TRUE(json_is_array(json_object_get(j, "rewrites")));
        CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "rewrites")), 0);
        CU_ASSERT_STRING_EQUAL(jstr(j, "kind"), "model");
        const char *so = jstr(j, "shared_object");
        char *want = join(canon, "libmodel_llama.so");
        CU_ASSERT_EQUAL(so[0], '/');
        CU_ASSERT_STRING_EQUAL(so, want);
        CU_ASSERT_STRING_EQUAL(jstr(j, "origin"), "builtin");
        json_t *loaded = json_object_get(j, "loaded_plugins");
        CU_ASSERT_EQUAL(json_array_size(loaded), 1);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(loaded, 0)), want);
        free(want);
        json_decref(j);
    }
    /* list afterwards shows what loaded */
    char *out = NULL;
    expect_ok(lh_host_loaded_plugins_json(h, &out, &err), &err);
    json_t *lp = out ? json_loads(out, 0, NULL) : NULL;
    CU_ASSERT_EQUAL(json_array_size(lp), 1);
    json_decref(lp);
    free(out);
    free(canon);
    lh_host_free(h);
}

static void test_create_errors(void)
{
    lh_host_options o = {.struct_size = sizeof o, .plugin_dir = "/nonexistent/llmhost/plugins"};
    lh_host *h = (lh_host *)1;
    lh_err err = {0};
    lh_status st = lh_host_create(&o, &h, &err);
    CU_ASSERT_EQUAL(st, LH_E_IO);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/llmhost/plugins"));
    lh_host_free(NULL);
}

/* Without plugin_dir: $LLMHOST_PLUGIN_DIR, else found next to libllmhost (build tree). */
static void test_default_plugin_dir(void)
{
    char *root = lh_test_mkdtemp();
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    char *dir = plugin_dir(root, "plugins", "libmodel_tp_alpha.so",
                           "model\tAlphaForCausalLM\tlibmodel_tp_alpha.so\n");
    setenv("LLMHOST_PLUGIN_DIR", dir, 1);
    lh_host *h = NULL;
    lh_err err = {0};
    expect_ok(lh_host_create(NULL, &h, &err), &err);
    if (h) {
        json_t *l = list(h);
        CU_ASSERT_STRING_EQUAL(jstr(l, "builtin_dir"), dir);
        json_decref(l);
        lh_host_free(h);
    }
    unsetenv("LLMHOST_PLUGIN_DIR");
    h = NULL;
    expect_ok(lh_host_create(NULL, &h, &err), &err);
    if (h) {
        char *canon = realpath(lh_test_env("LH_BUILTIN_PLUGINS"), NULL);
        json_t *l = list(h);
        CU_ASSERT_STRING_EQUAL(jstr(l, "builtin_dir"), canon);
        json_decref(l);
        free(canon);
        lh_host_free(h);
    }
    lh_test_rmtree(root);
    free(dir);
    free(root);
}

static void test_custom_dirs(void)
{
    char *root = lh_test_mkdtemp();
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    char *custom = plugin_dir(root, "custom", "libmodel_tp_alpha.so",
                              "model\tSharedForCausalLM\tlibmodel_tp_alpha.so\n"
                              "model\tAlphaForCausalLM\tlibmodel_tp_alpha.so\n");
    char *model = model_dir(root, "model", "SharedForCausalLM");
    lh_host *h = make_host();
    if (h) {
        lh_err err = {0};
        expect_ok(lh_host_add_custom_dir(h, custom, &err), &err);
        /* listing loads nothing, and shows the custom index */
        json_t *l = list(h);
        CU_ASSERT_EQUAL(json_array_size(json_object_get(l, "loaded_plugins")), 0);
        json_t *dirs = json_object_get(l, "custom_module_dirs");
        CU_ASSERT_EQUAL(json_array_size(dirs), 1);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(dirs, 0),
                                                                 "path")), custom);
        CU_ASSERT_EQUAL(json_array_size(json_object_get(l, "indexes")), 2);
        json_decref(l);

        json_t *j = resolve(h, model, NULL, LH_OK, &err);
        char *want = join(custom, "libmodel_tp_alpha.so");
        if (j) {
            CU_ASSERT_STRING_EQUAL(jstr(j, "origin"), "external");
            CU_ASSERT_STRING_EQUAL(jstr(j, "shared_object"), want);
            CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "loaded_plugins")), 1);
            json_decref(j);
        }
        /* errors: relative, empty, twice, remove undeclared */
        CU_ASSERT_NOT_EQUAL(lh_host_add_custom_dir(h, "relative/dir", &err), LH_OK);
        CU_ASSERT_EQUAL(lh_host_add_custom_dir(h, "", &err), LH_E_USAGE);
        CU_ASSERT_EQUAL(lh_host_add_custom_dir(h, NULL, &err), LH_E_USAGE);
        CU_ASSERT_EQUAL(lh_host_remove_custom_dir(h, NULL, &err), LH_E_USAGE);
        CU_ASSERT_EQUAL(lh_host_add_custom_dir(h, custom, &err), LH_E_USAGE);
        CU_ASSERT_EQUAL(lh_host_remove_custom_dir(h, root, &err), LH_E_USAGE);

        /* removed: unknown again, with the original name */
        expect_ok(lh_host_remove_custom_dir(h, custom, &err), &err);
        j = resolve(h, model, NULL, LH_E_UNKNOWN_NAME, &err);
        json_decref(j);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "SharedForCausalLM"));
        /* re-added: back */
        expect_ok(lh_host_add_custom_dir(h, custom, &err), &err);
        j = resolve(h, model, NULL, LH_OK, &err);
        if (j) {
            CU_ASSERT_STRING_EQUAL(jstr(j, "shared_object"), want);
            CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "loaded_plugins")), 1);
            json_decref(j);
        }
        free(want);
        lh_host_free(h);
    }
    lh_test_rmtree(root);
    free(model);
    free(custom);
    free(root);
}

static void test_custom_dirs_from_env(void)
{
    char *root = lh_test_mkdtemp();
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    char *a = plugin_dir(root, "a", "libmodel_tp_alpha.so",
                         "model\tSharedForCausalLM\tlibmodel_tp_alpha.so\n");
    char *b = plugin_dir(root, "b", "libmodel_tp_beta.so",
                         "model\tSharedForCausalLM\tlibmodel_tp_beta.so\n"
                         "model\tBetaForCausalLM\tlibmodel_tp_beta.so\n");
    char *shared = model_dir(root, "shared", "SharedForCausalLM");
    char *beta = model_dir(root, "beta", "BetaForCausalLM");
    char env[2 * PATH_MAX + 2];
    snprintf(env, sizeof env, "%s:%s", a, b);
    setenv("LLMHOST_CUSTOM_MODULE_DIRS", env, 1);
    lh_host *h = make_host();
    if (h) {
        lh_err err = {0};
        expect_ok(lh_host_add_custom_dirs_from_env(h, &err), &err);
        json_t *l = list(h);
        json_t *dirs = json_object_get(l, "custom_module_dirs");
        CU_ASSERT_EQUAL(json_array_size(dirs), 2);
        if (json_array_size(dirs) == 2) {
            CU_ASSERT_STRING_EQUAL(
                json_string_value(json_object_get(json_array_get(dirs, 0), "path")), a);
            CU_ASSERT_STRING_EQUAL(
                json_string_value(json_object_get(json_array_get(dirs, 1), "path")), b);
        }
        CU_ASSERT_EQUAL(json_array_size(json_object_get(l, "loaded_plugins")), 0);
        json_decref(l);
        /* the first dir wins the shared name; the second still serves its own */
        json_t *j = resolve(h, beta, NULL, LH_OK, &err);
        json_decref(j);
        j = resolve(h, shared, NULL, LH_OK, &err);
        if (j) {
            char *want = join(a, "libmodel_tp_alpha.so");
            CU_ASSERT_STRING_EQUAL(jstr(j, "shared_object"), want);
            CU_ASSERT_STRING_EQUAL(jstr(j, "origin"), "external");
            free(want);
            json_decref(j);
        }
        /* declaring them again from the env fails (already declared), naming the variable */
        lh_status st = lh_host_add_custom_dirs_from_env(h, &err);
        CU_ASSERT_EQUAL(st, LH_E_USAGE);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "LLMHOST_CUSTOM_MODULE_DIRS"));
        lh_host_free(h);
    }
    /* unset: nothing to do */
    unsetenv("LLMHOST_CUSTOM_MODULE_DIRS");
    h = make_host();
    if (h) {
        lh_err err = {0};
        expect_ok(lh_host_add_custom_dirs_from_env(h, &err), &err);
        json_t *l = list(h);
        CU_ASSERT_EQUAL(json_array_size(json_object_get(l, "custom_module_dirs")), 0);
        json_decref(l);
        lh_host_free(h);
    }
    lh_test_rmtree(root);
    free(beta);
    free(shared);
    free(a);
    free(b);
    free(root);
}

static void test_resolve_errors(void)
{
    char *root = lh_test_mkdtemp();
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    char *custom = plugin_dir(root, "custom", "libmodel_tp_target.so",
                              "model\tTargetImpl\tlibmodel_tp_target.so\n");
    lh_host *h = make_host();
    if (h) {
        lh_err err = {0};
        expect_ok(lh_host_add_custom_dir(h, custom, &err), &err);
        char model[PATH_MAX];
        snprintf(model, sizeof model, "%s/configs/qwen3-8b", lh_test_env("LH_FIXTURES"));
        const char *const require[] = {"model_impl=TargetImpl:require", "dtype=float32", NULL};
        json_t *j = resolve(h, model, require, LH_E_UNSUPPORTED, &err);
        json_decref(j);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "float32 weights are not supported"));
        const char *const fallback[] = {"model_impl=TargetImpl:auto", "dtype=float32", NULL};
        j = resolve(h, model, fallback, LH_OK, &err);
        if (j) {
            CU_ASSERT_STRING_EQUAL(jstr(j, "resolved_architecture"), "Qwen3ForCausalLM");
            CU_ASSERT_STRING_EQUAL(jstr(j, "origin"), "builtin");
            CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "loaded_plugins")), 2);
            json_decref(j);
        }
        /* a plugin that fails: the load class, and the listing shows the failed module */
        char *broken = plugin_dir(root, "broken", "libmodel_tp_abi_major.so",
                                  "model\tAbiForCausalLM\tlibmodel_tp_abi_major.so\n");
        char *abi_model = join(root, "abi_model");
        CU_ASSERT_EQUAL_FATAL(mkdir(abi_model, 0755), 0);
        CU_ASSERT_EQUAL(lh_test_write_file(abi_model, "config.json",
                                           "{\"architectures\": [\"AbiForCausalLM\"]}"), 0);
        expect_ok(lh_host_add_custom_dir(h, broken, &err), &err);
        j = resolve(h, abi_model, NULL, LH_E_ABI, &err);
        json_decref(j);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "libmodel_tp_abi_major.so"));
        json_t *l = list(h);
        size_t i;
        json_t *m;
        bool seen = false;
        json_array_foreach(json_object_get(l, "modules"), i, m)
        {
            const char *path = json_string_value(json_object_get(m, "path"));
            if (path && strstr(path, "libmodel_tp_abi_major.so")) {
                seen = true;
                CU_ASSERT_STRING_EQUAL(jstr(m, "state"), "failed");
                CU_ASSERT_STRING_EQUAL(jstr(m, "error_class"), lh_status_name(LH_E_ABI));
                CU_ASSERT_STRING_EQUAL(jstr(m, "origin"), "external");
            }
        }
        CU_ASSERT_TRUE(seen);
        json_decref(l);
        free(abi_model);
        free(broken);
        /* no model */
        lh_resolve_request req = {.struct_size = sizeof req};
        char *out = (char *)1;
        CU_ASSERT_EQUAL(lh_host_resolve_json(h, &req, &out, &err), LH_E_USAGE);
        CU_ASSERT_PTR_NULL(out);
        lh_host_free(h);
    }
    lh_test_rmtree(root);
    free(custom);
    free(root);
}

static void test_status_names(void)
{
    for (int i = 0; i < LH_STATUS_COUNT_; i++) {
        const char *a = lh_status_name((lh_status)i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        for (int k = 0; k < i; k++)
            CU_ASSERT_STRING_NOT_EQUAL(a, lh_status_name((lh_status)k));
    }
}

static CU_TestInfo tests[] = {
    {"create, list, resolve", test_create_list_resolve},
    {"create errors", test_create_errors},
    {"default plugin dir", test_default_plugin_dir},
    {"custom dirs", test_custom_dirs},
    {"custom dirs from env", test_custom_dirs_from_env},
    {"resolve errors and overrides", test_resolve_errors},
    {"status names distinct", test_status_names},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"host API", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
