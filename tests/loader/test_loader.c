/* The loader (DESIGN §3, §4, §5.8): every error class with its own status and a message that
 * names the file; failed loads are remembered; laziness; the permission checks. */
#include "loader_util.h"

#include "loader/loader.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A built-in dir holding one of every kind of broken plugin, each behind its own index row. */
static char *broken_builtin(fx *f)
{
    char *dir = fx_dir(f, "plugins",
                       PLUGINS("libmodel_tp_alpha.so", "libmodel_tp_missingdep.so",
                               "libmodel_tp_undef.so", "libmodel_tp_noentry.so",
                               "libmodel_tp_badmagic.so", "libmodel_tp_abi_major.so",
                               "libmodel_tp_abi_minor.so", "libmodel_tp_layout.so",
                               "libmodel_tp_initfail.so",
                               "libmodel_tp_empty.so", "libmodel_tp_target.so",
                               "libattn_tp_backend.so"),
                       ROWS("model AlphaForCausalLM libmodel_tp_alpha.so",
                            "model SharedForCausalLM libmodel_tp_alpha.so",
                            "model GoneForCausalLM libmodel_tp_gone.so",
                            "model DepForCausalLM libmodel_tp_missingdep.so",
                            "model UndefForCausalLM libmodel_tp_undef.so",
                            "model NotElfForCausalLM libmodel_notelf.so",
                            "model NoEntryForCausalLM libmodel_tp_noentry.so",
                            "model MagicForCausalLM libmodel_tp_badmagic.so",
                            "model AbiForCausalLM libmodel_tp_abi_major.so",
                            "model AbiMinorForCausalLM libmodel_tp_abi_minor.so",
                            "model LayoutForCausalLM libmodel_tp_layout.so",
                            "model FailForCausalLM libmodel_tp_initfail.so",
                            "model NotThereForCausalLM libmodel_tp_alpha.so",
                            "model EmptyForCausalLM libmodel_tp_empty.so",
                            "model BetaForCausalLM libmodel_tp_beta.so",
                            "model GammaForCausalLM libmodel_tp_gamma.so",
                            "model TargetImpl libmodel_tp_target.so",
                            "draft mtp libmodel_tp_target.so",
                            "attention_backend TpPaged libattn_tp_backend.so"));
    write_file_mode(dir, "libmodel_notelf.so", "this is a text file, not a shared object\n",
                    0755);
    copy_plugin(dir, "libmodel_tp_beta.so", NULL, 0664);
    copy_plugin(dir, "libmodel_tp_gamma.so", NULL, 0666);
    return dir;
}

typedef struct load_case {
    const char *arch;
    const char *file;
    lh_status code;
    unsigned dlopens; /* dlopen calls the failed attempt makes */
    const char *subs[4];
} load_case;

/* Ensures c->arch in a fresh registry over the broken built-in dir: the status is c->code,
 * the message names the file's path, the arch, the cause, never says "unknown"; a second
 * ensure is answered from the memo (no dlopen, same status and message); nothing of the file
 * is in any slot. */
static void check_load_case(const load_case *c)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = broken_builtin(&f);
    lh_registry reg;
    if (!reg_open(&reg, dir, false)) {
        free(dir);
        fx_free(&f);
        return;
    }
    char *path = join(dir, c->file);
    const lh_reg_entry *e = (const lh_reg_entry *)1;
    lh_err err = {0};
    lh_status st = reg_ensure(&reg, LH_KIND_MODEL, c->arch, &e, &err);
    EXPECT_STATUS(st, c->code, err);
    CU_ASSERT_PTR_NULL(e);
    EXPECT_HAS(err.msg, path);
    EXPECT_HAS(err.msg, c->arch);
    for (size_t i = 0; i < 4 && c->subs[i]; i++)
        EXPECT_HAS(err.msg, c->subs[i]);
    /* "module failed to load" is never "unknown architecture" */
    EXPECT_LACKS(err.msg, "unknown");
    CU_ASSERT_EQUAL(reg.dlopen_calls, c->dlopens);
    CU_ASSERT_EQUAL(reg.n_modules, 1);
    lh_module_rec *m = module_at(&reg, dir, c->file);
    CU_ASSERT_PTR_NOT_NULL(m);
    if (m) {
        CU_ASSERT_EQUAL(m->state, LH_MOD_STATE_FAILED);
        CU_ASSERT_EQUAL(m->fail_code, c->code);
        CU_ASSERT_TRUE(m->builtin);
        CU_ASSERT_EQUAL(m->n_log, 0); /* nothing it registered stays */
    }
    for (int k = 0; k < LH_KIND_COUNT; k++)
        CU_ASSERT_EQUAL(reg.n_slots[k], 0);

    /* memo: not retried */
    lh_err err2 = {0};
    st = reg_ensure(&reg, LH_KIND_MODEL, c->arch, &e, &err2);
    EXPECT_STATUS(st, c->code, err2);
    CU_ASSERT_STRING_EQUAL(err2.msg, err.msg);
    CU_ASSERT_EQUAL(reg.dlopen_calls, c->dlopens);
    CU_ASSERT_EQUAL(reg.n_modules, 1);

    /* the failure of one file does not affect another */
    const lh_reg_entry *a = ensure_ok(&reg, LH_KIND_MODEL, "AlphaForCausalLM");
    CU_ASSERT_EQUAL(reg.dlopen_calls, c->dlopens + 1);
    if (a)
        CU_ASSERT_STRING_EQUAL(a->module->file_name, "libmodel_tp_alpha.so");
    lh_registry_destroy(&reg);
    free(path);
    free(dir);
    fx_free(&f);
}

static void test_module_missing(void)
{
    load_case c = {"GoneForCausalLM", "libmodel_tp_gone.so", LH_E_MODULE_MISSING, 0,
                   {"No such file", NULL}};
    check_load_case(&c);
}

static void test_missing_dependency(void)
{
    /* glibc says "cannot open shared object file" for both; only the stat tells them apart */
    load_case c = {"DepForCausalLM", "libmodel_tp_missingdep.so", LH_E_LOAD, 1,
                   {"libtp_absent_dep.so", "dlopen", NULL}};
    check_load_case(&c);
}

static void test_undefined_symbol(void)
{
    load_case c = {"UndefForCausalLM", "libmodel_tp_undef.so", LH_E_LOAD, 1,
                   {"lh_test_symbol_that_no_library_defines", "undefined symbol", NULL}};
    check_load_case(&c);
}

static void test_not_elf(void)
{
    load_case c = {"NotElfForCausalLM", "libmodel_notelf.so", LH_E_LOAD, 1, {"dlopen", NULL}};
    check_load_case(&c);
}

static void test_no_entry(void)
{
    load_case c = {"NoEntryForCausalLM", "libmodel_tp_noentry.so", LH_E_NOT_PLUGIN, 1,
                   {"lh_plugin_entry", NULL}};
    check_load_case(&c);
}

static void test_bad_magic(void)
{
    load_case c = {"MagicForCausalLM", "libmodel_tp_badmagic.so", LH_E_NOT_PLUGIN, 1,
                   {"magic", NULL}};
    check_load_case(&c);
}

/* the host's ABI as the messages print it, "MAJOR.MINOR" */
#define STR2(x) #x
#define STR(x) STR2(x)
#define HOST_ABI STR(LH_PLUGIN_ABI_MAJOR) "." STR(LH_PLUGIN_ABI_MINOR)

static void test_abi_major(void)
{
    load_case c = {"AbiForCausalLM", "libmodel_tp_abi_major.so", LH_E_ABI, 1,
                   {"1.0", HOST_ABI, NULL}};
    check_load_case(&c);
}

static void test_abi_minor(void)
{
    load_case c = {"AbiMinorForCausalLM", "libmodel_tp_abi_minor.so", LH_E_ABI, 1,
                   {STR(LH_PLUGIN_ABI_MAJOR) ".99", HOST_ABI, NULL}};
    check_load_case(&c);
}

/* a layout constant that differs (LH_MAX_DIMS 8) is refused before init, naming it */
static void test_layout_constant(void)
{
    load_case c = {"LayoutForCausalLM", "libmodel_tp_layout.so", LH_E_ABI, 1,
                   {"LH_MAX_DIMS = 8", "host has 4", NULL}};
    check_load_case(&c);
}

static void test_group_writable(void)
{
    load_case c = {"BetaForCausalLM", "libmodel_tp_beta.so", LH_E_INSECURE, 0,
                   {"group-writable", "0664", NULL}};
    check_load_case(&c);
}

static void test_world_writable(void)
{
    load_case c = {"GammaForCausalLM", "libmodel_tp_gamma.so", LH_E_INSECURE, 0,
                   {"world-writable", "0666", NULL}};
    check_load_case(&c);
}

static void test_init_failure(void)
{
    load_case c = {"FailForCausalLM", "libmodel_tp_initfail.so", LH_E_INIT, 1,
                   {"deliberate init failure", "tp_initfail", NULL}};
    check_load_case(&c);
}

/* Transactional init: what the failing plugin registered is nowhere: not in a slot, not in
 * the module's log, not among the known names learnt from logs (eager dir). */
static void test_init_failure_leaves_nothing(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *builtin = fx_empty_builtin(&f, "plugins");
    char *eager = fx_dir(&f, "eager", PLUGINS("libmodel_tp_initfail.so"), NULL);
    lh_registry reg;
    if (reg_open(&reg, builtin, false)) {
        lh_err err = {0};
        lh_status st = reg_add_st(&reg, eager, &err);
        EXPECT_STATUS(st, LH_E_INIT, err);
        EXPECT_HAS(err.msg, "deliberate init failure");
        EXPECT_HAS(err.msg, "libmodel_tp_initfail.so");
        CU_ASSERT_EQUAL(reg.n_dirs, 0);
        CU_ASSERT_PTR_NULL(lh_registry_peek(&reg, LH_KIND_MODEL, "FailForCausalLM"));
        CU_ASSERT_FALSE(known_has(&reg, LH_KIND_MODEL, "FailForCausalLM"));
        lh_module_rec *m = module_at(&reg, eager, "libmodel_tp_initfail.so");
        CU_ASSERT_PTR_NOT_NULL(m);
        if (m) {
            CU_ASSERT_EQUAL(m->n_log, 0);
            CU_ASSERT_TRUE(names_of_equal(m, LH_KIND_MODEL, NO_ROWS));
        }
        const lh_reg_entry *e;
        st = reg_ensure(&reg, LH_KIND_MODEL, "FailForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        lh_registry_destroy(&reg);
    }
    free(eager);
    free(builtin);
    fx_free(&f);
}

static void test_index_drift(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = broken_builtin(&f);
    lh_registry reg;
    if (reg_open(&reg, dir, false)) {
        lh_err err = {0};
        const lh_reg_entry *e;
        lh_status st = reg_ensure(&reg, LH_KIND_MODEL, "NotThereForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_INDEX_DRIFT, err);
        EXPECT_HAS(err.msg, "'NotThereForCausalLM' is provided by libmodel_tp_alpha.so");
        EXPECT_HAS(err.msg, "did not register it");
        EXPECT_HAS(err.msg, "arch_index.tsv:15"); /* the stale row */
        EXPECT_LACKS(err.msg, "unknown");
        /* the plugin itself loaded fine and serves what it does register */
        CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
        const lh_reg_entry *a = ensure_ok(&reg, LH_KIND_MODEL, "AlphaForCausalLM");
        CU_ASSERT_PTR_NOT_NULL(a);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
        /* a plugin that registers nothing */
        st = reg_ensure(&reg, LH_KIND_MODEL, "EmptyForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_INDEX_DRIFT, err);
        EXPECT_HAS(err.msg, "'EmptyForCausalLM' is provided by libmodel_tp_empty.so");
        EXPECT_HAS(err.msg, "did not register it");
        /* drift is stable across calls */
        lh_err err2 = {0};
        st = reg_ensure(&reg, LH_KIND_MODEL, "EmptyForCausalLM", &e, &err2);
        EXPECT_STATUS(st, LH_E_INDEX_DRIFT, err2);
        CU_ASSERT_STRING_EQUAL(err2.msg, err.msg);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 2);
        lh_registry_destroy(&reg);
    }
    free(dir);
    fx_free(&f);
}

static void test_unknown_name(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = broken_builtin(&f);
    lh_registry reg;
    if (reg_open(&reg, dir, false)) {
        lh_err err = {0};
        const lh_reg_entry *e;
        lh_status st = reg_ensure(&reg, LH_KIND_MODEL, "AlphaForCausalLm", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "unknown model 'AlphaForCausalLm'");
        EXPECT_HAS(err.msg, "did you mean 'AlphaForCausalLM'");
        EXPECT_HAS(err.msg, "SharedForCausalLM"); /* the known names are listed */
        EXPECT_HAS(err.msg, "TargetImpl");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        CU_ASSERT_EQUAL(reg.n_modules, 0);
        /* per kind */
        st = reg_ensure(&reg, LH_KIND_DRAFT, "mpt", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "unknown draft 'mpt'");
        EXPECT_HAS(err.msg, "did you mean 'mtp'");
        /* nothing close: no suggestion, still the list */
        st = reg_ensure(&reg, LH_KIND_MODEL, "Zzzzzzzzzzzzzzzzzzzz", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_LACKS(err.msg, "did you mean");
        EXPECT_HAS(err.msg, "AlphaForCausalLM");
        /* a kind with no names at all */
        st = reg_ensure(&reg, LH_KIND_VISION_ENCODER, "AlphaVisionModel", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        EXPECT_HAS(err.msg, "vision_encoder");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        lh_registry_destroy(&reg);
    }
    free(dir);
    fx_free(&f);
}

/* The list of known names in an unknown-name message is bounded, whatever the names' length:
 * long names near the end of the buffer must truncate the list, not write past it. */
static void check_unknown_with_names(size_t n_names, size_t name_len)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = fx_dir(&f, "plugins", NULL, NULL);
    size_t cap = 64 + n_names * (name_len + 40);
    char *text = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    size_t used = (size_t)snprintf(text, cap, "#llmhost-arch-index\t1\n");
    for (size_t i = 0; i < n_names; i++) {
        char name[4096];
        snprintf(name, sizeof name, "N%03zu", i);
        memset(name + 4, 'x', name_len - 4);
        name[name_len] = '\0';
        used += (size_t)snprintf(text + used, cap - used, "model\t%s\tlibmodel_x.so\n", name);
    }
    write_file_mode(dir, LH_ARCH_INDEX_FILE, text, 0644);
    free(text);
    /* in a child process: a memory error there must fail this test, not end the program */
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_TRUE_FATAL(pid >= 0);
    if (pid == 0) {
        int code = 0;
        lh_registry reg;
        lh_err err = {0};
        if (lh_registry_init(&reg, dir, false, &err) != LH_OK)
            _exit(10);
        const lh_reg_entry *e;
        lh_status st = reg_ensure(&reg, LH_KIND_MODEL, "Q", &e, &err);
        if (st != LH_E_UNKNOWN_NAME)
            code = 11;
        else if (!strstr(err.msg, "unknown model 'Q'") || !strstr(err.msg, "N000x"))
            code = 12;
        if (code)
            fprintf(stderr, "\n  child: status %d, message: %s\n", (int)st, err.msg);
        lh_registry_destroy(&reg);
        _exit(code);
    }
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean)
        fprintf(stderr, "\n  unknown-name message with %zu known names of %zu chars: the child %s %d\n",
                n_names, name_len, WIFSIGNALED(status) ? "was killed by signal" : "exited with",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    CU_ASSERT_TRUE(clean);
    free(dir);
    fx_free(&f);
}

static void test_unknown_name_long_list(void)
{
    check_unknown_with_names(30, 100); /* crosses the list's end in the middle of a name */
    check_unknown_with_names(3, 1500); /* one name longer than the whole list */
    check_unknown_with_names(200, 20); /* many short names: truncated with "..." */
}

/* ---- laziness ------------------------------------------------------------------------ */

static void test_lazy(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = broken_builtin(&f);
    lh_registry reg;
    if (reg_open(&reg, dir, false)) {
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        CU_ASSERT_EQUAL(reg.n_modules, 0);
        size_t n = 0;
        const char **names = lh_registry_known_names(&reg, LH_KIND_MODEL, &n);
        CU_ASSERT_EQUAL(n, 17);
        /* sorted */
        for (size_t i = 1; i < n; i++)
            CU_ASSERT_TRUE(strcmp(names[i - 1], names[i]) < 0);
        free(names);
        names = lh_registry_known_names(&reg, LH_KIND_ATTENTION_BACKEND, &n);
        CU_ASSERT_EQUAL(n, 1);
        free(names);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        CU_ASSERT_PTR_NULL(lh_registry_peek(&reg, LH_KIND_MODEL, "AlphaForCausalLM"));
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);

        /* ensure-then-look-up: exactly the one file */
        const lh_reg_entry *e = ensure_ok(&reg, LH_KIND_MODEL, "AlphaForCausalLM");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
        CU_ASSERT_EQUAL(reg.n_modules, 1);
        if (e) {
            CU_ASSERT_STRING_EQUAL(e->name, "AlphaForCausalLM");
            CU_ASSERT_STRING_EQUAL(e->module->file_name, "libmodel_tp_alpha.so");
            CU_ASSERT_TRUE(e->module->builtin);
            CU_ASSERT_EQUAL(e->outcome, LH_REG_TAKEN);
            CU_ASSERT_PTR_EQUAL(lh_registry_peek(&reg, LH_KIND_MODEL, "AlphaForCausalLM"), e);
        }
        /* another name of the same file: nothing more */
        const lh_reg_entry *s = ensure_ok(&reg, LH_KIND_MODEL, "SharedForCausalLM");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
        CU_ASSERT_EQUAL(reg.n_modules, 1);
        if (s && e)
            CU_ASSERT_PTR_EQUAL(s->module, e->module);
        /* the same name again: nothing more */
        CU_ASSERT_PTR_EQUAL(ensure_ok(&reg, LH_KIND_MODEL, "AlphaForCausalLM"), e);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
        /* names of other kinds in another file load that file only */
        const lh_reg_entry *d = ensure_ok(&reg, LH_KIND_DRAFT, "mtp");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 2);
        CU_ASSERT_EQUAL(reg.n_modules, 2);
        if (d)
            CU_ASSERT_STRING_EQUAL(d->module->file_name, "libmodel_tp_target.so");
        ensure_ok(&reg, LH_KIND_MODEL, "TargetImpl");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 2);
        lh_registry_destroy(&reg);
    }
    free(dir);
    fx_free(&f);
}

/* An indexed custom dir dlopens nothing at declaration. */
static void test_lazy_custom_dir(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *builtin = fx_empty_builtin(&f, "plugins");
    char *custom = fx_dir(&f, "custom",
                          PLUGINS("libmodel_tp_alpha.so", "libmodel_tp_beta.so",
                                  "libmodel_tp_abi_major.so"),
                          ROWS("model AlphaForCausalLM libmodel_tp_alpha.so",
                               "model BetaForCausalLM libmodel_tp_beta.so",
                               "model AbiForCausalLM libmodel_tp_abi_major.so"));
    lh_registry reg;
    if (reg_open(&reg, builtin, false)) {
        reg_add(&reg, custom);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        CU_ASSERT_EQUAL(reg.n_modules, 0);
        CU_ASSERT_TRUE(known_has(&reg, LH_KIND_MODEL, "BetaForCausalLM"));
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        const lh_reg_entry *e = ensure_ok(&reg, LH_KIND_MODEL, "BetaForCausalLM");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
        if (e)
            CU_ASSERT_FALSE(e->module->builtin);
        lh_registry_destroy(&reg);
    }
    free(custom);
    free(builtin);
    fx_free(&f);
}

static void test_registry_init_errors(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    lh_registry reg;
    lh_err err = {0};
    char *none = join(f.root, "none");
    lh_status st = lh_registry_init(&reg, none, false, &err);
    EXPECT_STATUS(st, LH_E_IO, err);
    EXPECT_HAS(err.msg, none);
    char *noindex = fx_dir(&f, "noindex", PLUGINS("libmodel_tp_alpha.so"), NULL);
    st = lh_registry_init(&reg, noindex, false, &err);
    EXPECT_STATUS(st, LH_E_IO, err);
    EXPECT_HAS(err.msg, "arch_index.tsv");
    char *bad = fx_dir(&f, "bad", NULL, NULL);
    write_file_mode(bad, LH_ARCH_INDEX_FILE, "#llmhost-arch-index\t7\n", 0644);
    st = lh_registry_init(&reg, bad, false, &err);
    EXPECT_STATUS(st, LH_E_INDEX_PARSE, err);
    EXPECT_HAS(err.msg, "version");
    free(bad);
    free(noindex);
    free(none);
    fx_free(&f);
}

/* ---- permissions ------------------------------------------------------------------- */

static void test_other_owner(void)
{
    if (geteuid() != 0) {
        LH_TEST_SKIP("chown to another user needs root");
        return;
    }
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = fx_dir(&f, "plugins", PLUGINS("libmodel_tp_alpha.so"),
                       ROWS("model AlphaForCausalLM libmodel_tp_alpha.so"));
    char *path = join(dir, "libmodel_tp_alpha.so");
    CU_ASSERT_EQUAL_FATAL(chown(path, 4242, 4242), 0);
    lh_registry reg;
    if (reg_open(&reg, dir, false)) {
        lh_err err = {0};
        const lh_reg_entry *e;
        lh_status st = reg_ensure(&reg, LH_KIND_MODEL, "AlphaForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_INSECURE, err);
        EXPECT_HAS(err.msg, path);
        EXPECT_HAS(err.msg, "4242");
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        lh_registry_destroy(&reg);
    }
    /* the direct check too */
    lh_err err = {0};
    EXPECT_STATUS(lh_security_check_file(path, &err), LH_E_INSECURE, err);
    /* root-owned is fine */
    CU_ASSERT_EQUAL(chown(path, 0, 0), 0);
    EXPECT_STATUS(lh_security_check_file(path, &err), LH_OK, err);
    free(path);
    free(dir);
    fx_free(&f);
}

static void test_allow_insecure(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = broken_builtin(&f);
    lh_registry reg;
    logcap_start();
    if (reg_open(&reg, dir, true)) {
        const lh_reg_entry *e = ensure_ok(&reg, LH_KIND_MODEL, "BetaForCausalLM");
        if (e)
            CU_ASSERT_STRING_EQUAL(e->module->file_name, "libmodel_tp_beta.so");
        lh_module_rec *m = module_at(&reg, dir, "libmodel_tp_beta.so");
        CU_ASSERT_PTR_NOT_NULL(m);
        if (m)
            CU_ASSERT_EQUAL(m->state, LH_MOD_STATE_LOADED);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 1);
        int w = logcap_find(LH_LOG_WARN, "allow-insecure", "libmodel_tp_beta.so",
                            "group-writable");
        if (w < 0)
            logcap_dump();
        CU_ASSERT_TRUE(w >= 0);
        /* other checks are not waived */
        lh_err err = {0};
        lh_status st = reg_ensure(&reg, LH_KIND_MODEL, "AbiForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_ABI, err);
        lh_registry_destroy(&reg);
    }
    logcap_stop();
    free(dir);
    fx_free(&f);
}

static void test_custom_dir_security(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *builtin = fx_empty_builtin(&f, "plugins");
    char *custom = fx_dir(&f, "custom", PLUGINS("libmodel_tp_alpha.so"),
                          ROWS("model AlphaForCausalLM libmodel_tp_alpha.so"));
    lh_registry reg;
    if (!reg_open(&reg, builtin, false)) {
        free(custom);
        free(builtin);
        fx_free(&f);
        return;
    }
    lh_err err = {0};
    /* relative */
    lh_status st = reg_add_st(&reg, "relative/custom", &err);
    EXPECT_STATUS(st, LH_E_INSECURE, err);
    EXPECT_HAS(err.msg, "relative/custom");
    EXPECT_HAS(err.msg, "absolute");
    CU_ASSERT_EQUAL(reg.n_dirs, 0);
    /* group- and world-writable dirs */
    CU_ASSERT_EQUAL(chmod(custom, 0775), 0);
    st = reg_add_st(&reg, custom, &err);
    EXPECT_STATUS(st, LH_E_INSECURE, err);
    EXPECT_HAS(err.msg, custom);
    EXPECT_HAS(err.msg, "group-writable");
    CU_ASSERT_EQUAL(chmod(custom, 0777), 0);
    st = reg_add_st(&reg, custom, &err);
    EXPECT_STATUS(st, LH_E_INSECURE, err);
    EXPECT_HAS(err.msg, "world-writable");
    CU_ASSERT_EQUAL(reg.n_dirs, 0);
    CU_ASSERT_EQUAL(chmod(custom, 0755), 0);
    /* a dir that does not exist, a file that is not a dir */
    char *none = join(f.root, "none");
    st = reg_add_st(&reg, none, &err);
    EXPECT_STATUS(st, LH_E_IO, err);
    EXPECT_HAS(err.msg, none);
    char *file = join(custom, "libmodel_tp_alpha.so");
    st = reg_add_st(&reg, file, &err);
    EXPECT_STATUS(st, LH_E_IO, err);
    CU_ASSERT_EQUAL(reg.n_dirs, 0);
    if (geteuid() == 0) {
        CU_ASSERT_EQUAL(chown(custom, 4242, 4242), 0);
        st = reg_add_st(&reg, custom, &err);
        EXPECT_STATUS(st, LH_E_INSECURE, err);
        EXPECT_HAS(err.msg, "4242");
        CU_ASSERT_EQUAL(chown(custom, 0, 0), 0);
    }
    CU_ASSERT_EQUAL(reg.n_dirs, 0);
    reg_add(&reg, custom);
    CU_ASSERT_EQUAL(reg.n_dirs, 1);
    lh_registry_destroy(&reg);

    /* with the waiver: a writable dir is accepted (loudly), a relative one never */
    logcap_start();
    if (reg_open(&reg, builtin, true)) {
        st = reg_add_st(&reg, "relative/custom", &err);
        EXPECT_STATUS(st, LH_E_INSECURE, err);
        CU_ASSERT_EQUAL(chmod(custom, 0775), 0);
        reg_add(&reg, custom);
        CU_ASSERT_TRUE(logcap_find(LH_LOG_WARN, "allow-insecure", custom, NULL) >= 0);
        CU_ASSERT_EQUAL(chmod(custom, 0755), 0);
        lh_registry_destroy(&reg);
    }
    logcap_stop();
    free(file);
    free(none);
    free(custom);
    free(builtin);
    fx_free(&f);
}

/* Security refusals are checked before dlopen: no plugin code runs. */
static void test_security_before_dlopen(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = fx_dir(&f, "d", NULL, NULL);
    copy_plugin(dir, "libmodel_tp_alpha.so", NULL, 0664);
    char *path = join(dir, "libmodel_tp_alpha.so");
    lh_module_rec *m = calloc(1, sizeof *m);
    m->path = strdup(path);
    m->file_name = strdup("libmodel_tp_alpha.so");
    m->dir = strdup(dir);
    unsigned calls = 0;
    lh_err err = {0};
    lh_status st = lh_loader_load(m, false, &calls, &err);
    EXPECT_STATUS(st, LH_E_INSECURE, err);
    CU_ASSERT_EQUAL(calls, 0);
    CU_ASSERT_EQUAL(m->state, LH_MOD_STATE_FAILED);
    CU_ASSERT_EQUAL(m->fail_code, LH_E_INSECURE);
    CU_ASSERT_PTR_NOT_NULL(m->fail_msg);
    if (m->fail_msg)
        CU_ASSERT_STRING_EQUAL(m->fail_msg, err.msg);
    CU_ASSERT_PTR_NULL(m->handle);
    lh_module_rec_free(m);
    /* a directory is not a plugin file */
    st = lh_security_check_file(dir, &err);
    CU_ASSERT_NOT_EQUAL(st, LH_OK);
    free(path);
    free(dir);
    fx_free(&f);
}

static CU_TestInfo class_tests[] = {
    {"module missing", test_module_missing},
    {"missing dependency", test_missing_dependency},
    {"undefined symbol", test_undefined_symbol},
    {"not ELF", test_not_elf},
    {"no entry symbol", test_no_entry},
    {"bad magic", test_bad_magic},
    {"ABI major", test_abi_major},
    {"ABI minor too new", test_abi_minor},
    {"layout constant differs", test_layout_constant},
    {"group-writable file", test_group_writable},
    {"world-writable file", test_world_writable},
    {"init failure", test_init_failure},
    {"init failure leaves nothing", test_init_failure_leaves_nothing},
    {"index drift", test_index_drift},
    {"unknown name", test_unknown_name},
    {"unknown name with long known names", test_unknown_name_long_list},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo lazy_tests[] = {
    {"lazy built-in index", test_lazy},
    {"lazy custom dir", test_lazy_custom_dir},
    {"registry init errors", test_registry_init_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo security_tests[] = {
    {"file owned by another user", test_other_owner},
    {"allow_insecure waives permissions", test_allow_insecure},
    {"custom dir security", test_custom_dir_security},
    {"security before dlopen", test_security_before_dlopen},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"loader: error classes and memo", NULL, NULL, NULL, NULL, class_tests},
    {"loader: laziness", NULL, NULL, NULL, NULL, lazy_tests},
    {"loader: security", NULL, NULL, NULL, NULL, security_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
