/* Registry rules (DESIGN §5): who owns a slot, whatever order plugins load in; the
 * registration log; rebuild on custom-dir changes; origin by directory; declarations. */
#include "loader_util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALPHA "libmodel_tp_alpha.so"
#define BETA "libmodel_tp_beta.so"
#define GAMMA "libmodel_tp_gamma.so"
#define SHARED "SharedForCausalLM"

/* A test: a temp root, a built-in dir "plugins" with tp_alpha (Alpha, Shared) unless told
 * otherwise, and a registry over it. */
typedef struct rt {
    fx f;
    char *builtin;
    lh_registry reg;
    lh_model_config *cfg;
    bool ok;
} rt;

static bool rt_open_with(rt *t, const char *const *plugins, const char *const *rows)
{
    memset(t, 0, sizeof *t);
    if (!fx_init(&t->f))
        return false;
    t->builtin = fx_dir(&t->f, "plugins", plugins, rows);
    t->ok = reg_open(&t->reg, t->builtin, false);
    t->cfg = small_cfg(SHARED, NULL);
    return t->ok;
}

static bool rt_open(rt *t)
{
    return rt_open_with(t, PLUGINS(ALPHA),
                        ROWS("model AlphaForCausalLM " ALPHA, "model SharedForCausalLM " ALPHA));
}

static bool rt_open_empty(rt *t)
{
    return rt_open_with(t, NULL, NO_ROWS);
}

static void rt_close(rt *t)
{
    if (t->ok)
        lh_registry_destroy(&t->reg);
    lh_model_config_free(t->cfg);
    free(t->builtin);
    fx_free(&t->f);
}

/* Custom dirs used below. */
static char *beta_indexed(rt *t, const char *name)
{
    return fx_dir(&t->f, name, PLUGINS(BETA),
                  ROWS("model SharedForCausalLM " BETA, "model BetaForCausalLM " BETA));
}

static char *alpha_indexed(rt *t, const char *name)
{
    return fx_dir(&t->f, name, PLUGINS(ALPHA),
                  ROWS("model AlphaForCausalLM " ALPHA, "model SharedForCausalLM " ALPHA));
}

static char *eager(rt *t, const char *name, const char *file)
{
    return fx_dir(&t->f, name, (const char *const[]){file, NULL}, NULL);
}

/* Ensure (kind model) and check the provider's directory and file, and that its constructor
 * is the one that runs (built_by_<plugin>). */
static const lh_reg_entry *expect_provider(rt *t, const char *name, const char *dir,
                                           const char *file)
{
    const lh_reg_entry *e = ensure_ok(&t->reg, LH_KIND_MODEL, name);
    if (!e)
        return NULL;
    if (strcmp(e->module->dir, dir) != 0 || strcmp(e->module->file_name, file) != 0)
        fprintf(stderr, "\n  %s provided by %s, expected %s/%s\n", name, e->module->path, dir,
                file);
    CU_ASSERT_STRING_EQUAL(e->module->dir, dir);
    CU_ASSERT_STRING_EQUAL(e->module->file_name, file);
    CU_ASSERT_EQUAL(e->outcome, LH_REG_TAKEN);
    CU_ASSERT_PTR_EQUAL(lh_registry_peek(&t->reg, LH_KIND_MODEL, name), e);
    char marker[128];
    /* file libmodel_tp_beta.so -> plugin name model_tp_beta */
    snprintf(marker, sizeof marker, "built_by_%s", file + 3);
    *strrchr(marker, '.') = '\0';
    if (t->cfg)
        CU_ASSERT_TRUE(built_by(e, t->cfg, marker));
    return e;
}

static lh_reg_outcome outcome_of(rt *t, const char *dir, const char *file, const char *name)
{
    const lh_reg_entry *e = log_entry(module_at(&t->reg, dir, file), LH_KIND_MODEL, name);
    CU_ASSERT_PTR_NOT_NULL(e);
    return e ? e->outcome : (lh_reg_outcome)-1;
}

/* ---- rules 1-2: built-in ------------------------------------------------------------------ */

static void test_builtin_fills_empty(void)
{
    rt t;
    if (rt_open(&t)) {
        const lh_reg_entry *e = expect_provider(&t, SHARED, t.builtin, ALPHA);
        if (e) {
            CU_ASSERT_TRUE(e->module->builtin);
            CU_ASSERT_STRING_EQUAL(e->module->plugin_name, "model_tp_alpha");
        }
    }
    rt_close(&t);
}

/* Resolve through the built-in first, then declare the custom dir: the external takes over. */
static void test_external_overrides_builtin_resolved_first(void)
{
    rt t;
    if (rt_open(&t)) {
        char *custom = beta_indexed(&t, "custom");
        const lh_reg_entry *b = expect_provider(&t, SHARED, t.builtin, ALPHA);
        CU_ASSERT_TRUE(b && b->module->builtin);
        logcap_start();
        reg_add(&t.reg, custom);
        const lh_reg_entry *e = expect_provider(&t, SHARED, custom, BETA);
        if (e)
            CU_ASSERT_FALSE(e->module->builtin);
        CU_ASSERT_EQUAL(outcome_of(&t, t.builtin, ALPHA, SHARED), LH_REG_KEPT_OUT);
        CU_ASSERT_EQUAL(outcome_of(&t, t.builtin, ALPHA, "AlphaForCausalLM"), LH_REG_TAKEN);
        int i = logcap_find(LH_LOG_INFO, "keeping", "built-in", "not registered");
        if (i < 0)
            logcap_dump();
        CU_ASSERT_TRUE(i >= 0);
        logcap_stop();
        /* the built-in's other name is still served by it */
        expect_provider(&t, "AlphaForCausalLM", t.builtin, ALPHA);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 2);
        free(custom);
    }
    rt_close(&t);
}

/* Declare the custom dir first, then resolve; later loading the built-in (for another name)
 * keeps its registration out of the occupied slot, with an info log. */
static void test_external_overrides_builtin_declared_first(void)
{
    rt t;
    if (rt_open(&t)) {
        char *custom = beta_indexed(&t, "custom");
        reg_add(&t.reg, custom);
        expect_provider(&t, SHARED, custom, BETA);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1);
        logcap_start();
        expect_provider(&t, "AlphaForCausalLM", t.builtin, ALPHA);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 2);
        expect_provider(&t, SHARED, custom, BETA);
        CU_ASSERT_EQUAL(outcome_of(&t, t.builtin, ALPHA, SHARED), LH_REG_KEPT_OUT);
        char *alpha_path = join(t.builtin, ALPHA);
        char *beta_path = join(custom, BETA);
        int i = logcap_find(LH_LOG_INFO, "keeping", "built-in", "not registered");
        if (i < 0)
            logcap_dump();
        CU_ASSERT_TRUE(i >= 0);
        /* the message names the keeper, the arch and the built-in that was kept out */
        CU_ASSERT_TRUE(logcap_find(LH_LOG_INFO, beta_path, alpha_path, SHARED) >= 0);
        /* no error and no warning for this: it is the normal case */
        CU_ASSERT_EQUAL(logcap_find(LH_LOG_WARN, SHARED, NULL, NULL), -1);
        CU_ASSERT_EQUAL(logcap_find(LH_LOG_ERROR, NULL, NULL, NULL), -1);
        logcap_stop();
        free(beta_path);
        free(alpha_path);
        free(custom);
    }
    rt_close(&t);
}

/* The same with an eager custom dir (no index). */
static void test_external_eager_overrides_builtin(void)
{
    rt t;
    if (rt_open(&t)) {
        char *custom = eager(&t, "custom", BETA);
        expect_provider(&t, SHARED, t.builtin, ALPHA);
        reg_add(&t.reg, custom); /* loads beta now */
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 2);
        expect_provider(&t, SHARED, custom, BETA);
        expect_provider(&t, "BetaForCausalLM", custom, BETA);
        CU_ASSERT_EQUAL(outcome_of(&t, t.builtin, ALPHA, SHARED), LH_REG_KEPT_OUT);
        free(custom);
    }
    rt_close(&t);
    /* declared before the built-in ever loads */
    if (rt_open(&t)) {
        char *custom = eager(&t, "custom", BETA);
        reg_add(&t.reg, custom);
        expect_provider(&t, "AlphaForCausalLM", t.builtin, ALPHA);
        expect_provider(&t, SHARED, custom, BETA);
        CU_ASSERT_EQUAL(outcome_of(&t, t.builtin, ALPHA, SHARED), LH_REG_KEPT_OUT);
        free(custom);
    }
    rt_close(&t);
}

/* ---- rule 3: between externals, the first declared dir wins -------------------------------- */

static void check_log_order(rt *t, const char *dir, const char *file, const char *first,
                            lh_reg_outcome o1, const char *second, lh_reg_outcome o2)
{
    lh_module_rec *m = module_at(&t->reg, dir, file);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(m->n_log, 2);
    if (m->n_log != 2)
        return;
    CU_ASSERT_STRING_EQUAL(m->log[0]->name, first);
    CU_ASSERT_STRING_EQUAL(m->log[1]->name, second);
    CU_ASSERT_EQUAL(m->log[0]->outcome, o1);
    CU_ASSERT_EQUAL(m->log[1]->outcome, o2);
    CU_ASSERT_PTR_EQUAL(m->log[0]->module, m);
}

/* Two indexed (lazy) dirs: A (alpha) declared before B (beta); both provide Shared. */
static void test_two_externals_lazy(void)
{
    for (int order = 0; order < 2; order++) {
        rt t;
        if (!rt_open_empty(&t)) {
            rt_close(&t);
            continue;
        }
        char *a = alpha_indexed(&t, "a");
        char *b = beta_indexed(&t, "b");
        reg_add(&t.reg, a);
        reg_add(&t.reg, b);
        logcap_start();
        if (order == 0) {
            /* B's plugin loads first: its Shared waits for A's */
            expect_provider(&t, "BetaForCausalLM", b, BETA);
            CU_ASSERT_EQUAL(outcome_of(&t, b, BETA, SHARED), LH_REG_SHADOWED);
            CU_ASSERT_PTR_NULL(lh_registry_peek(&t.reg, LH_KIND_MODEL, SHARED));
            expect_provider(&t, SHARED, a, ALPHA);
        } else {
            expect_provider(&t, SHARED, a, ALPHA);
            expect_provider(&t, "BetaForCausalLM", b, BETA);
            expect_provider(&t, SHARED, a, ALPHA);
        }
        CU_ASSERT_EQUAL(outcome_of(&t, b, BETA, SHARED), LH_REG_SHADOWED);
        check_log_order(&t, b, BETA, SHARED, LH_REG_SHADOWED, "BetaForCausalLM", LH_REG_TAKEN);
        check_log_order(&t, a, ALPHA, "AlphaForCausalLM", LH_REG_TAKEN, SHARED, LH_REG_TAKEN);
        /* the conflict is logged with both names */
        char *pa = join(a, ALPHA), *pb = join(b, BETA);
        int i = logcap_find(LH_LOG_INFO, pa, pb, SHARED);
        if (i < 0)
            logcap_dump();
        CU_ASSERT_TRUE(i >= 0);
        logcap_stop();
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 2);
        free(pa);
        free(pb);
        free(a);
        free(b);
        rt_close(&t);
    }
}

/* Two eager dirs. */
static void test_two_externals_eager(void)
{
    rt t;
    /* declaration order = load order */
    if (rt_open_empty(&t)) {
        char *a = eager(&t, "a", ALPHA);
        char *b = eager(&t, "b", BETA);
        reg_add(&t.reg, a);
        reg_add(&t.reg, b);
        expect_provider(&t, SHARED, a, ALPHA);
        CU_ASSERT_EQUAL(outcome_of(&t, b, BETA, SHARED), LH_REG_SHADOWED);
        check_log_order(&t, b, BETA, SHARED, LH_REG_SHADOWED, "BetaForCausalLM", LH_REG_TAKEN);
        free(a);
        free(b);
    }
    rt_close(&t);
    /* B's plugin loaded first (B declared, removed, then A and B declared): A still wins */
    if (rt_open_empty(&t)) {
        char *a = eager(&t, "a", ALPHA);
        char *b = eager(&t, "b", BETA);
        reg_add(&t.reg, b);
        expect_provider(&t, SHARED, b, BETA);
        reg_remove(&t.reg, b);
        reg_add(&t.reg, a);
        reg_add(&t.reg, b);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 2);
        CU_ASSERT_TRUE(module_at(&t.reg, b, BETA)->load_seq <
                       module_at(&t.reg, a, ALPHA)->load_seq);
        expect_provider(&t, SHARED, a, ALPHA);
        CU_ASSERT_EQUAL(outcome_of(&t, b, BETA, SHARED), LH_REG_SHADOWED);
        free(a);
        free(b);
    }
    rt_close(&t);
    /* the other declaration order: the other owner (declaration, not names, decides) */
    if (rt_open_empty(&t)) {
        char *a = eager(&t, "a", ALPHA);
        char *b = eager(&t, "b", BETA);
        reg_add(&t.reg, b);
        reg_add(&t.reg, a);
        expect_provider(&t, SHARED, b, BETA);
        CU_ASSERT_EQUAL(outcome_of(&t, a, ALPHA, SHARED), LH_REG_SHADOWED);
        free(a);
        free(b);
    }
    rt_close(&t);
}

/* Within one eager dir, the first module in sorted file order owns a shared name. */
static void test_eager_dir_sorted_order(void)
{
    rt t;
    if (rt_open_empty(&t)) {
        char *d = fx_dir(&t.f, "d", PLUGINS(GAMMA, BETA), NULL);
        reg_add(&t.reg, d);
        expect_provider(&t, SHARED, d, BETA);
        expect_provider(&t, "GammaForCausalLM", d, GAMMA);
        CU_ASSERT_EQUAL(outcome_of(&t, d, GAMMA, SHARED), LH_REG_SHADOWED);
        CU_ASSERT_TRUE(module_at(&t.reg, d, BETA)->load_seq <
                       module_at(&t.reg, d, GAMMA)->load_seq);
        free(d);
    }
    rt_close(&t);
}

/* Earlier eager dir vs later indexed dir, and vice versa. */
static void test_mixed_eager_indexed(void)
{
    rt t;
    if (rt_open_empty(&t)) {
        char *a = eager(&t, "a", ALPHA);
        char *b = beta_indexed(&t, "b");
        reg_add(&t.reg, a);
        reg_add(&t.reg, b);
        expect_provider(&t, "BetaForCausalLM", b, BETA);
        CU_ASSERT_EQUAL(outcome_of(&t, b, BETA, SHARED), LH_REG_SHADOWED);
        expect_provider(&t, SHARED, a, ALPHA);
        free(a);
        free(b);
    }
    rt_close(&t);
    if (rt_open_empty(&t)) {
        char *a = alpha_indexed(&t, "a");
        char *b = eager(&t, "b", BETA);
        reg_add(&t.reg, a);
        reg_add(&t.reg, b); /* beta loads now; alpha not yet */
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1);
        CU_ASSERT_EQUAL(outcome_of(&t, b, BETA, SHARED), LH_REG_SHADOWED);
        CU_ASSERT_PTR_NULL(lh_registry_peek(&t.reg, LH_KIND_MODEL, SHARED));
        expect_provider(&t, SHARED, a, ALPHA);
        expect_provider(&t, "BetaForCausalLM", b, BETA);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 2);
        free(a);
        free(b);
    }
    rt_close(&t);
}

/* ---- rule 5: rebuild -------------------------------------------------------------------- */

static void check_remove_readd(bool indexed, bool builtin_loaded_first)
{
    rt t;
    if (!rt_open(&t)) {
        rt_close(&t);
        return;
    }
    char *custom = indexed ? beta_indexed(&t, "custom") : eager(&t, "custom", BETA);
    const lh_reg_entry *builtin_e = NULL;
    if (builtin_loaded_first)
        builtin_e = expect_provider(&t, SHARED, t.builtin, ALPHA);
    reg_add(&t.reg, custom);
    const lh_reg_entry *ext = expect_provider(&t, SHARED, custom, BETA);
    lh_module_rec *beta = module_at(&t.reg, custom, BETA);
    unsigned calls = t.reg.dlopen_calls;

    /* remove: the built-in provider is back */
    reg_remove(&t.reg, custom);
    CU_ASSERT_EQUAL(t.reg.n_dirs, 0);
    if (builtin_loaded_first) /* restored by the rebuild itself, no load needed */
        CU_ASSERT_PTR_EQUAL(lh_registry_peek(&t.reg, LH_KIND_MODEL, SHARED), builtin_e);
    const lh_reg_entry *back = expect_provider(&t, SHARED, t.builtin, ALPHA);
    if (back)
        CU_ASSERT_TRUE(back->module->builtin);
    CU_ASSERT_EQUAL(t.reg.dlopen_calls, builtin_loaded_first ? calls : calls + 1);
    calls = t.reg.dlopen_calls;
    /* the undeclared external contributes nothing */
    CU_ASSERT_EQUAL(outcome_of(&t, custom, BETA, SHARED), LH_REG_UNDECLARED);
    CU_ASSERT_EQUAL(outcome_of(&t, custom, BETA, "BetaForCausalLM"), LH_REG_UNDECLARED);
    CU_ASSERT_PTR_NULL(lh_registry_peek(&t.reg, LH_KIND_MODEL, "BetaForCausalLM"));
    CU_ASSERT_FALSE(known_has(&t.reg, LH_KIND_MODEL, "BetaForCausalLM"));
    lh_err err = {0};
    const lh_reg_entry *e;
    lh_status st = reg_ensure(&t.reg, LH_KIND_MODEL, "BetaForCausalLM", &e, &err);
    EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
    /* its own record still knows what it declared */
    CU_ASSERT_TRUE(names_of_equal(beta, LH_KIND_MODEL, ROWS(SHARED, "BetaForCausalLM")));
    CU_ASSERT_EQUAL(outcome_of(&t, t.builtin, ALPHA, SHARED), LH_REG_TAKEN);

    /* re-add: restored from the log, without reloading */
    reg_add(&t.reg, custom);
    CU_ASSERT_EQUAL(t.reg.dlopen_calls, calls);
    const lh_reg_entry *again = expect_provider(&t, SHARED, custom, BETA);
    CU_ASSERT_EQUAL(t.reg.dlopen_calls, calls);
    if (again) {
        CU_ASSERT_PTR_EQUAL(again->module, beta);
        CU_ASSERT_PTR_EQUAL(again, ext); /* the very same log entry */
    }
    expect_provider(&t, "BetaForCausalLM", custom, BETA);
    CU_ASSERT_EQUAL(outcome_of(&t, t.builtin, ALPHA, SHARED), LH_REG_KEPT_OUT);
    /* modules are never duplicated */
    size_t n_beta = 0;
    for (size_t i = 0; i < t.reg.n_modules; i++)
        n_beta += strcmp(t.reg.modules[i]->file_name, BETA) == 0;
    CU_ASSERT_EQUAL(n_beta, 1);
    free(custom);
    rt_close(&t);
}

static void test_remove_readd_indexed(void)
{
    check_remove_readd(true, false);
    check_remove_readd(true, true);
}

static void test_remove_readd_eager(void)
{
    check_remove_readd(false, false);
    check_remove_readd(false, true);
}

/* Rule 6: the per-provider record outlives the slots. */
static void test_names_of_after_losing_slots(void)
{
    rt t;
    if (rt_open_empty(&t)) {
        char *a = eager(&t, "a", ALPHA);
        char *b = eager(&t, "b", BETA);
        reg_add(&t.reg, a);
        reg_add(&t.reg, b);
        lh_module_rec *beta = module_at(&t.reg, b, BETA);
        CU_ASSERT_TRUE(names_of_equal(beta, LH_KIND_MODEL, ROWS(SHARED, "BetaForCausalLM")));
        reg_remove(&t.reg, b);
        CU_ASSERT_TRUE(names_of_equal(beta, LH_KIND_MODEL, ROWS(SHARED, "BetaForCausalLM")));
        CU_ASSERT_TRUE(names_of_equal(beta, LH_KIND_DRAFT, NO_ROWS));
        free(a);
        free(b);
    }
    rt_close(&t);
}

/* ---- index drift inside the registry ----------------------------------------------------- */

static void test_unpromised(void)
{
    rt t;
    if (rt_open_empty(&t)) {
        char *d = fx_dir(&t.f, "custom", PLUGINS("libmodel_tp_extra.so", BETA),
                         ROWS("model ExtraForCausalLM libmodel_tp_extra.so",
                              "model BetaForCausalLM " BETA,
                              "model SharedForCausalLM libmodel_tp_extra.so"));
        reg_add(&t.reg, d);
        logcap_start();
        expect_provider(&t, "ExtraForCausalLM", d, "libmodel_tp_extra.so");
        CU_ASSERT_PTR_NULL(lh_registry_peek(&t.reg, LH_KIND_MODEL, "UnpromisedForCausalLM"));
        CU_ASSERT_EQUAL(outcome_of(&t, d, "libmodel_tp_extra.so", "UnpromisedForCausalLM"),
                        LH_REG_UNPROMISED);
        int w = logcap_find(LH_LOG_WARN, "UnpromisedForCausalLM", "libmodel_tp_extra.so", NULL);
        if (w < 0)
            logcap_dump();
        CU_ASSERT_TRUE(w >= 0);
        lh_err err = {0};
        const lh_reg_entry *e;
        lh_status st = reg_ensure(&t.reg, LH_KIND_MODEL, "UnpromisedForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        /* a name the index gives to another file of the dir: beta's Shared is not taken */
        expect_provider(&t, "BetaForCausalLM", d, BETA);
        CU_ASSERT_EQUAL(outcome_of(&t, d, BETA, SHARED), LH_REG_UNPROMISED);
        CU_ASSERT_TRUE(logcap_find(LH_LOG_WARN, SHARED, BETA, NULL) >= 0);
        st = reg_ensure(&t.reg, LH_KIND_MODEL, SHARED, &e, &err);
        EXPECT_STATUS(st, LH_E_INDEX_DRIFT, err); /* extra does not register Shared */
        EXPECT_HAS(err.msg, "'SharedForCausalLM' is provided by libmodel_tp_extra.so");
        logcap_stop();
        free(d);
    }
    rt_close(&t);
}

static void test_empty_plugin_drift(void)
{
    rt t;
    if (rt_open_empty(&t)) {
        char *d = fx_dir(&t.f, "custom", PLUGINS("libmodel_tp_empty.so"),
                         ROWS("model EmptyForCausalLM libmodel_tp_empty.so"));
        reg_add(&t.reg, d);
        lh_err err = {0};
        const lh_reg_entry *e;
        lh_status st = reg_ensure(&t.reg, LH_KIND_MODEL, "EmptyForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_INDEX_DRIFT, err);
        EXPECT_HAS(err.msg, "'EmptyForCausalLM' is provided by libmodel_tp_empty.so");
        EXPECT_HAS(err.msg, "did not register it");
        char *idx = join(d, LH_ARCH_INDEX_FILE);
        EXPECT_HAS(err.msg, idx);
        free(idx);
        free(d);
    }
    rt_close(&t);
}

/* ---- origin and declarations ------------------------------------------------------------- */

static void check_origin(const char *builtin_name, const char *custom_name)
{
    fx f;
    if (!fx_init(&f))
        return;
    /* the same plugin file in both dirs: only the directory can tell them apart */
    char *builtin = fx_dir(&f, builtin_name, PLUGINS(ALPHA),
                           ROWS("model AlphaForCausalLM " ALPHA, "model SharedForCausalLM " ALPHA));
    char *custom = fx_dir(&f, custom_name, PLUGINS(ALPHA),
                          ROWS("model AlphaForCausalLM " ALPHA));
    lh_registry reg;
    if (reg_open(&reg, builtin, false)) {
        reg_add(&reg, custom);
        const lh_reg_entry *e = ensure_ok(&reg, LH_KIND_MODEL, "AlphaForCausalLM");
        if (e) {
            CU_ASSERT_STRING_EQUAL(e->module->dir, custom);
            CU_ASSERT_FALSE(e->module->builtin);
        }
        e = ensure_ok(&reg, LH_KIND_MODEL, SHARED);
        if (e) {
            CU_ASSERT_STRING_EQUAL(e->module->dir, builtin);
            CU_ASSERT_TRUE(e->module->builtin);
        }
        lh_module_rec *mc = module_at(&reg, custom, ALPHA);
        lh_module_rec *mb = module_at(&reg, builtin, ALPHA);
        CU_ASSERT_TRUE(mc && !mc->builtin);
        CU_ASSERT_TRUE(mb && mb->builtin);
        if (mb)
            CU_ASSERT_EQUAL(log_entry(mb, LH_KIND_MODEL, "AlphaForCausalLM")->outcome,
                            LH_REG_KEPT_OUT);
        lh_registry_destroy(&reg);
    }
    free(custom);
    free(builtin);
    fx_free(&f);
}

static void test_origin_by_directory(void)
{
    check_origin("plugins", "plugins_custom");
    check_origin("plugins_custom", "plugins");
    check_origin("plugins", "plugins2");
}

static void test_declaration_errors(void)
{
    rt t;
    if (rt_open(&t)) {
        char *custom = beta_indexed(&t, "custom");
        lh_err err = {0};
        /* the built-in dir, however spelled */
        lh_status st = reg_add_st(&t.reg, t.builtin, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        EXPECT_HAS(err.msg, "built-in");
        char *spelled = join(t.builtin, ".");
        st = reg_add_st(&t.reg, spelled, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        free(spelled);
        char *link = join(t.f.root, "link_to_plugins");
        CU_ASSERT_EQUAL(symlink(t.builtin, link), 0);
        st = reg_add_st(&t.reg, link, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        CU_ASSERT_EQUAL(t.reg.n_dirs, 0);
        /* twice */
        reg_add(&t.reg, custom);
        st = reg_add_st(&t.reg, custom, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        EXPECT_HAS(err.msg, "already declared");
        char *slash = join(custom, "");
        st = reg_add_st(&t.reg, slash, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        CU_ASSERT_EQUAL(t.reg.n_dirs, 1);
        /* removing what is not declared */
        st = reg_remove_st(&t.reg, t.builtin, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        EXPECT_HAS(err.msg, "not declared");
        char *other = fx_dir(&t.f, "other", NULL, NULL);
        st = reg_remove_st(&t.reg, other, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        char *none = join(t.f.root, "none");
        st = reg_remove_st(&t.reg, none, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        CU_ASSERT_EQUAL(t.reg.n_dirs, 1);
        /* removing under another spelling of a declared dir works */
        reg_remove(&t.reg, slash);
        CU_ASSERT_EQUAL(t.reg.n_dirs, 0);
        st = reg_remove_st(&t.reg, custom, &err);
        EXPECT_STATUS(st, LH_E_USAGE, err);
        free(none);
        free(other);
        free(slash);
        free(link);
        free(custom);
    }
    rt_close(&t);
}

/* An eager dir with a broken plugin: the declaration fails with that plugin's class and the
 * dir stays undeclared; once fixed it declares without reloading the good plugin. */
static void test_eager_broken_plugin(void)
{
    static const struct {
        const char *file;
        lh_status code;
    } cases[] = {
        {"libmodel_tp_abi_major.so", LH_E_ABI},
        {"libmodel_tp_missingdep.so", LH_E_LOAD},
        {"libmodel_tp_noentry.so", LH_E_NOT_PLUGIN},
        {"libmodel_tp_initfail.so", LH_E_INIT},
        {"libmodel_tp_zinsecure.so", LH_E_INSECURE}, /* a group-writable copy of beta */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rt t;
        if (!rt_open_empty(&t)) {
            rt_close(&t);
            continue;
        }
        /* files load in sorted order: alpha loads before the broken file unless that one
         * sorts first (abi_major) and stops the scan */
        bool insecure = cases[i].code == LH_E_INSECURE;
        char *d = fx_dir(&t.f, "eager",
                         (const char *const[]){ALPHA, insecure ? NULL : cases[i].file, NULL},
                         NULL);
        if (insecure)
            copy_plugin(d, BETA, cases[i].file, 0664);
        lh_err err = {0};
        lh_status st = reg_add_st(&t.reg, d, &err);
        EXPECT_STATUS(st, cases[i].code, err);
        /* declaring the broken dir again fails the same way, from the memo */
        unsigned calls0 = t.reg.dlopen_calls;
        lh_err again = {0};
        st = reg_add_st(&t.reg, d, &again);
        EXPECT_STATUS(st, cases[i].code, again);
        CU_ASSERT_STRING_EQUAL(again.msg, err.msg);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, calls0);
        char *path = join(d, cases[i].file);
        EXPECT_HAS(err.msg, path);
        EXPECT_LACKS(err.msg, "unknown");
        CU_ASSERT_EQUAL(t.reg.n_dirs, 0);
        CU_ASSERT_PTR_NULL(lh_registry_peek(&t.reg, LH_KIND_MODEL, "AlphaForCausalLM"));
        CU_ASSERT_FALSE(known_has(&t.reg, LH_KIND_MODEL, "AlphaForCausalLM"));
        const lh_reg_entry *e;
        st = reg_ensure(&t.reg, LH_KIND_MODEL, "AlphaForCausalLM", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        bool alpha_loaded = module_at(&t.reg, d, ALPHA) != NULL;
        CU_ASSERT_EQUAL(alpha_loaded, strcmp(ALPHA, cases[i].file) < 0);
        /* fix the dir, declare again: a loaded alpha comes from its log, without reloading */
        unsigned calls = t.reg.dlopen_calls;
        CU_ASSERT_EQUAL(unlink(path), 0);
        reg_add(&t.reg, d);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, alpha_loaded ? calls : calls + 1);
        expect_provider(&t, "AlphaForCausalLM", d, ALPHA);
        free(path);
        free(d);
        rt_close(&t);
    }
}

/* A custom dir whose index does not parse is not declared; an indexed dir never touches the
 * files its index does not list, broken or not. */
static void test_custom_index_errors(void)
{
    rt t;
    if (rt_open(&t)) {
        char *bad = fx_dir(&t.f, "bad", PLUGINS(BETA), NULL);
        write_file_mode(bad, LH_ARCH_INDEX_FILE,
                        "#llmhost-arch-index\t1\nmodel\tBetaForCausalLM\n", 0644);
        lh_err err = {0};
        lh_status st = reg_add_st(&t.reg, bad, &err);
        EXPECT_STATUS(st, LH_E_INDEX_PARSE, err);
        char *where = join(bad, LH_ARCH_INDEX_FILE ":2");
        EXPECT_HAS(err.msg, where);
        free(where);
        CU_ASSERT_EQUAL(t.reg.n_dirs, 0);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 0);
        CU_ASSERT_FALSE(known_has(&t.reg, LH_KIND_MODEL, "BetaForCausalLM"));

        char *lazy = fx_dir(&t.f, "lazy",
                            PLUGINS(BETA, "libmodel_tp_abi_major.so", "libmodel_tp_noentry.so"),
                            ROWS("model BetaForCausalLM " BETA));
        copy_plugin(lazy, GAMMA, NULL, 0666); /* insecure, but not listed */
        reg_add(&t.reg, lazy);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 0);
        expect_provider(&t, "BetaForCausalLM", lazy, BETA);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1);
        CU_ASSERT_EQUAL(t.reg.n_modules, 1);
        /* the built-in keeps its Shared: beta's is not promised by the lazy dir's index */
        expect_provider(&t, SHARED, t.builtin, ALPHA);
        CU_ASSERT_EQUAL(outcome_of(&t, lazy, BETA, SHARED), LH_REG_UNPROMISED);
        free(lazy);
        free(bad);
    }
    rt_close(&t);
}

/* ---- kinds ------------------------------------------------------------------------------- */

static void test_attention_case_insensitive(void)
{
    for (int indexed = 0; indexed < 2; indexed++) {
        rt t;
        if (!rt_open_empty(&t)) {
            rt_close(&t);
            continue;
        }
        char *d = fx_dir(&t.f, "attn", PLUGINS("libattn_tp_backend.so"),
                         indexed ? ROWS("attention_backend TpPaged libattn_tp_backend.so",
                                        "attention_backend TpFlash libattn_tp_backend.so")
                                 : NULL);
        reg_add(&t.reg, d);
        const lh_reg_entry *e = ensure_ok(&t.reg, LH_KIND_ATTENTION_BACKEND, "tppaged");
        if (e) {
            CU_ASSERT_TRUE(lh_kind_names_equal(LH_KIND_ATTENTION_BACKEND, e->name, "TpPaged"));
            CU_ASSERT_STRING_EQUAL(e->module->file_name, "libattn_tp_backend.so");
            CU_ASSERT_PTR_NOT_NULL(e->p.attn.name);
            CU_ASSERT_TRUE(e->p.attn.capabilities & LH_ATTN_CAP_CHUNKED);
        }
        CU_ASSERT_PTR_EQUAL(ensure_ok(&t.reg, LH_KIND_ATTENTION_BACKEND, "TPPAGED"), e);
        const lh_reg_entry *fl = ensure_ok(&t.reg, LH_KIND_ATTENTION_BACKEND, "tPfLaSh");
        CU_ASSERT_TRUE(fl && e && fl->module == e->module);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1);
        /* models are not attention backends */
        lh_err err = {0};
        lh_status st = reg_ensure(&t.reg, LH_KIND_MODEL, "TpPaged", &e, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        free(d);
        rt_close(&t);
    }
}

static void test_draft_modes(void)
{
    rt t;
    if (rt_open_empty(&t)) {
        char *d = fx_dir(&t.f, "target", PLUGINS("libmodel_tp_target.so"),
                         ROWS("model TargetImpl libmodel_tp_target.so",
                              "model EAGLE3LlamaForCausalLM libmodel_tp_target.so",
                              "vision_encoder AlphaVisionModel libmodel_tp_target.so",
                              "draft eagle3 libmodel_tp_target.so",
                              "draft mtp libmodel_tp_target.so"));
        reg_add(&t.reg, d);
        const lh_reg_entry *e = ensure_ok(&t.reg, LH_KIND_DRAFT, "eagle3");
        if (e) {
            CU_ASSERT_STRING_EQUAL(e->p.draft.mode, "eagle3");
            CU_ASSERT_PTR_NOT_NULL(e->p.draft.ops && e->p.draft.ops->construct);
            CU_ASSERT_TRUE(names_of_equal(e->module, LH_KIND_DRAFT, ROWS("eagle3", "mtp")));
            CU_ASSERT_TRUE(names_of_equal(e->module, LH_KIND_VISION_ENCODER,
                                          ROWS("AlphaVisionModel")));
            CU_ASSERT_TRUE(names_of_equal(e->module, LH_KIND_MODEL,
                                          ROWS("TargetImpl", "EAGLE3LlamaForCausalLM")));
            CU_ASSERT_TRUE(names_of_equal(e->module, LH_KIND_ATTENTION_BACKEND, NO_ROWS));
        }
        const lh_reg_entry *m = ensure_ok(&t.reg, LH_KIND_DRAFT, "mtp");
        CU_ASSERT_TRUE(m && e && m->module == e->module);
        const lh_reg_entry *v = ensure_ok(&t.reg, LH_KIND_VISION_ENCODER, "AlphaVisionModel");
        CU_ASSERT_TRUE(v && e && v->module == e->module);
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 1);
        /* draft modes are case-sensitive */
        lh_err err = {0};
        const lh_reg_entry *x;
        lh_status st = reg_ensure(&t.reg, LH_KIND_DRAFT, "EAGLE3", &x, &err);
        EXPECT_STATUS(st, LH_E_UNKNOWN_NAME, err);
        free(d);
    }
    rt_close(&t);
}

/* Vision encoders follow the same precedence rules as models. */
static void test_vision_rules(void)
{
    rt t;
    if (rt_open_with(&t, PLUGINS("libmodel_tp_target.so"),
                     ROWS("model TargetImpl libmodel_tp_target.so",
                          "vision_encoder AlphaVisionModel libmodel_tp_target.so"))) {
        char *d = fx_dir(&t.f, "custom", PLUGINS("libmodel_tp_target.so"),
                         ROWS("vision_encoder AlphaVisionModel libmodel_tp_target.so"));
        const lh_reg_entry *b = ensure_ok(&t.reg, LH_KIND_VISION_ENCODER, "AlphaVisionModel");
        CU_ASSERT_TRUE(b && b->module->builtin);
        reg_add(&t.reg, d);
        const lh_reg_entry *e = ensure_ok(&t.reg, LH_KIND_VISION_ENCODER, "AlphaVisionModel");
        CU_ASSERT_TRUE(e && !e->module->builtin);
        reg_remove(&t.reg, d);
        CU_ASSERT_PTR_EQUAL(lh_registry_peek(&t.reg, LH_KIND_VISION_ENCODER, "AlphaVisionModel"),
                            b);
        free(d);
    }
    rt_close(&t);
}

/* A custom dir with neither an index nor plugin files is declared with nothing to load (it
 * once handed qsort a NULL array, which UBSan reports). */
static void test_external_empty_dir_without_index(void)
{
    rt t;
    if (rt_open(&t)) {
        char *custom = fx_dir(&t.f, "empty", NULL, NULL);
        CU_ASSERT_TRUE(reg_add(&t.reg, custom));
        CU_ASSERT_EQUAL(t.reg.dlopen_calls, 0);
        expect_provider(&t, SHARED, t.builtin, ALPHA);
        free(custom);
    }
    rt_close(&t);
}

static CU_TestInfo builtin_tests[] = {
    {"built-in fills empty slot", test_builtin_fills_empty},
    {"external overrides built-in (resolved first)", test_external_overrides_builtin_resolved_first},
    {"external overrides built-in (declared first)", test_external_overrides_builtin_declared_first},
    {"eager external overrides built-in", test_external_eager_overrides_builtin},
    {"an empty custom dir without an index declares nothing", test_external_empty_dir_without_index},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo external_tests[] = {
    {"two lazy externals", test_two_externals_lazy},
    {"two eager externals", test_two_externals_eager},
    {"eager dir sorted order", test_eager_dir_sorted_order},
    {"mixed eager and indexed", test_mixed_eager_indexed},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo rebuild_tests[] = {
    {"remove and re-add indexed", test_remove_readd_indexed},
    {"remove and re-add eager", test_remove_readd_eager},
    {"names_of after losing slots", test_names_of_after_losing_slots},
    {"vision encoders rebuilt", test_vision_rules},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo drift_tests[] = {
    {"unpromised registration", test_unpromised},
    {"empty plugin drift", test_empty_plugin_drift},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo decl_tests[] = {
    {"origin by directory", test_origin_by_directory},
    {"declaration errors", test_declaration_errors},
    {"eager dir with broken plugin", test_eager_broken_plugin},
    {"custom dir index errors and laziness", test_custom_index_errors},
    {"attention backends case-insensitive", test_attention_case_insensitive},
    {"draft modes", test_draft_modes},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"registry: built-in vs external", NULL, NULL, NULL, NULL, builtin_tests},
    {"registry: between externals", NULL, NULL, NULL, NULL, external_tests},
    {"registry: rebuild", NULL, NULL, NULL, NULL, rebuild_tests},
    {"registry: index drift", NULL, NULL, NULL, NULL, drift_tests},
    {"registry: declarations and kinds", NULL, NULL, NULL, NULL, decl_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
