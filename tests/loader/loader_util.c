#include "loader_util.h"

#include "api/host_api_table.h"
#include "model/model.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- temp layouts ---------------------------------------------------------------------- */

char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

bool fx_init(fx *f)
{
    f->root = lh_test_mkdtemp();
    CU_ASSERT_PTR_NOT_NULL(f->root);
    return f->root != NULL;
}

void fx_free(fx *f)
{
    if (f->root) {
        /* a test may have made a dir read-only or group-writable: removal works as root or
         * owner either way */
        lh_test_rmtree(f->root);
        free(f->root);
    }
    f->root = NULL;
}

bool copy_plugin(const char *dir, const char *file, const char *as_name, unsigned mode)
{
    char *src = join(lh_test_env("LH_TEST_PLUGINS"), file);
    int rc = src ? lh_test_copy_file(src, dir, as_name ? as_name : file, mode) : -1;
    if (rc != 0)
        fprintf(stderr, "\n  cannot copy test plugin %s to %s: %s\n", src ? src : file, dir,
                strerror(errno));
    free(src);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return rc == 0;
}

bool write_index(const char *dir, const char *const *rows)
{
    size_t cap = 256;
    for (size_t i = 0; rows[i]; i++)
        cap += strlen(rows[i]) + 2;
    char *text = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    size_t used = (size_t)snprintf(text, cap, "#llmhost-arch-index\t1\n#kind\tname\tshared_object\n");
    for (size_t i = 0; rows[i]; i++) {
        for (const char *p = rows[i]; *p; p++)
            text[used++] = *p == ' ' ? '\t' : *p;
        text[used++] = '\n';
    }
    text[used] = '\0';
    bool ok = write_file_mode(dir, LH_ARCH_INDEX_FILE, text, 0644);
    free(text);
    return ok;
}

bool write_file_mode(const char *dir, const char *name, const char *text, unsigned mode)
{
    int rc = lh_test_write_file(dir, name, text);
    char *p = join(dir, name);
    if (rc == 0 && p)
        rc = chmod(p, mode);
    free(p);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return rc == 0;
}

char *fx_dir(fx *f, const char *name, const char *const *plugins, const char *const *rows)
{
    char *dir = join(f->root, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    int rc = mkdir(dir, 0755);
    if (rc == 0)
        rc = chmod(dir, 0755);
    if (rc != 0)
        fprintf(stderr, "\n  mkdir %s: %s\n", dir, strerror(errno));
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    for (size_t i = 0; plugins && plugins[i]; i++)
        copy_plugin(dir, plugins[i], NULL, 0755);
    if (rows)
        write_index(dir, rows);
    return dir;
}

char *fx_empty_builtin(fx *f, const char *name)
{
    return fx_dir(f, name, NULL, NO_ROWS);
}

/* ---- assertions ---------------------------------------------------------------------- */

void expect_status_at(const char *file, int line, lh_status got, lh_status want, const lh_err *err)
{
    if (got != want)
        fprintf(stderr, "\n  %s:%d: status %s (%d), expected %s (%d); message: %s\n", file, line,
                lh_status_name(got), (int)got, lh_status_name(want), (int)want,
                err ? err->msg : "");
    CU_ASSERT_EQUAL(got, want);
    if (got != LH_OK && err) {
        if (err->code != got)
            fprintf(stderr, "\n  %s:%d: err.code %d differs from the returned status %d\n", file,
                    line, (int)err->code, (int)got);
        CU_ASSERT_EQUAL(err->code, got);
    }
}

void expect_has_at(const char *file, int line, const char *text, const char *sub)
{
    bool ok = text && strstr(text, sub);
    if (!ok)
        fprintf(stderr, "\n  %s:%d: '%s' lacks '%s'\n", file, line, text ? text : "(null)", sub);
    CU_ASSERT_TRUE(ok);
}

void expect_lacks_at(const char *file, int line, const char *text, const char *sub)
{
    bool ok = text && !strcasestr(text, sub);
    if (!ok)
        fprintf(stderr, "\n  %s:%d: '%s' should not contain '%s'\n", file, line,
                text ? text : "(null)", sub);
    CU_ASSERT_TRUE(ok);
}

/* ---- registry helpers --------------------------------------------------------------- */

bool reg_open(lh_registry *reg, const char *builtin_dir, bool allow_insecure)
{
    lh_err err = {0};
    lh_status st = lh_registry_init(reg, builtin_dir, allow_insecure, &err);
    EXPECT_STATUS(st, LH_OK, err);
    if (st != LH_OK)
        memset(reg, 0, sizeof *reg);
    return st == LH_OK;
}

lh_status reg_add_st(lh_registry *reg, const char *dir, lh_err *err)
{
    lh_registry_lock(reg);
    lh_status st = lh_registry_add_dir(reg, dir, err);
    lh_registry_unlock(reg);
    return st;
}

bool reg_add(lh_registry *reg, const char *dir)
{
    lh_err err = {0};
    lh_status st = reg_add_st(reg, dir, &err);
    EXPECT_STATUS(st, LH_OK, err);
    return st == LH_OK;
}

lh_status reg_remove_st(lh_registry *reg, const char *dir, lh_err *err)
{
    lh_registry_lock(reg);
    lh_status st = lh_registry_remove_dir(reg, dir, err);
    lh_registry_unlock(reg);
    return st;
}

bool reg_remove(lh_registry *reg, const char *dir)
{
    lh_err err = {0};
    lh_status st = reg_remove_st(reg, dir, &err);
    EXPECT_STATUS(st, LH_OK, err);
    return st == LH_OK;
}

lh_status reg_ensure(lh_registry *reg, lh_kind kind, const char *name, const lh_reg_entry **out,
                     lh_err *err)
{
    lh_registry_lock(reg);
    lh_status st = lh_registry_ensure(reg, kind, name, out, err);
    lh_registry_unlock(reg);
    return st;
}

const lh_reg_entry *ensure_ok(lh_registry *reg, lh_kind kind, const char *name)
{
    lh_err err = {0};
    const lh_reg_entry *e = NULL;
    lh_status st = reg_ensure(reg, kind, name, &e, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  ensure %s '%s' failed: ", lh_kind_name(kind), name);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_PTR_NOT_NULL(e);
    return st == LH_OK ? e : NULL;
}

const char *provider_file(lh_registry *reg, lh_kind kind, const char *name)
{
    const lh_reg_entry *e = ensure_ok(reg, kind, name);
    return e ? e->module->file_name : NULL;
}

lh_module_rec *module_at(const lh_registry *reg, const char *dir, const char *file_name)
{
    for (size_t i = 0; i < reg->n_modules; i++)
        if (strcmp(reg->modules[i]->dir, dir) == 0 &&
            strcmp(reg->modules[i]->file_name, file_name) == 0)
            return reg->modules[i];
    return NULL;
}

const lh_reg_entry *log_entry(const lh_module_rec *m, lh_kind kind, const char *name)
{
    if (!m)
        return NULL;
    for (size_t i = 0; i < m->n_log; i++)
        if (m->log[i]->kind == kind && lh_kind_names_equal(kind, m->log[i]->name, name))
            return m->log[i];
    return NULL;
}

bool names_of_equal(const lh_module_rec *m, lh_kind kind, const char *const *want)
{
    size_t n = 0;
    const char **got = lh_registry_names_of(m, kind, &n);
    size_t nw = 0;
    while (want[nw])
        nw++;
    bool eq = n == nw;
    for (size_t i = 0; eq && i < n; i++)
        eq = strcmp(got[i], want[i]) == 0;
    if (!eq) {
        fprintf(stderr, "\n  names_of(%s, %s) = [", m->file_name, lh_kind_name(kind));
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", got[i]);
        fprintf(stderr, "]\n");
    }
    free(got);
    return eq;
}

bool known_has(const lh_registry *reg, lh_kind kind, const char *name)
{
    size_t n = 0;
    const char **known = lh_registry_known_names(reg, kind, &n);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(known[i], name) == 0)
            found = true;
    free(known);
    return found;
}

bool built_by(const lh_reg_entry *e, const lh_model_config *cfg, const char *marker)
{
    lh_model *m = NULL;
    lh_err err = {0};
    lh_status st = lh_model_build(lh_host_api_table(), &e->p.model, cfg, NULL, &m, &err);
    EXPECT_STATUS(st, LH_OK, err);
    lh_module_info info;
    bool found = st == LH_OK && lh_model_find(m, marker, &info) == 1;
    lh_model_free(m);
    return found;
}

/* ---- logs ------------------------------------------------------------------------------ */

typedef struct cap_msg {
    lh_log_level level;
    char *text;
} cap_msg;

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static cap_msg *cap_msgs;
static size_t cap_n, cap_cap;

static void cap_sink(lh_log_level level, const char *msg, void *user)
{
    (void)user;
    pthread_mutex_lock(&cap_lock);
    if (cap_n == cap_cap) {
        size_t nc = cap_cap ? cap_cap * 2 : 32;
        cap_msg *g = realloc(cap_msgs, nc * sizeof *g);
        if (g) {
            cap_msgs = g;
            cap_cap = nc;
        }
    }
    if (cap_n < cap_cap) {
        cap_msgs[cap_n].level = level;
        cap_msgs[cap_n].text = strdup(msg);
        if (cap_msgs[cap_n].text)
            cap_n++;
    }
    pthread_mutex_unlock(&cap_lock);
}

void logcap_clear(void)
{
    pthread_mutex_lock(&cap_lock);
    for (size_t i = 0; i < cap_n; i++)
        free(cap_msgs[i].text);
    cap_n = 0;
    pthread_mutex_unlock(&cap_lock);
}

void logcap_start(void)
{
    logcap_clear();
    lh_log_set_sink(cap_sink, NULL);
}

void logcap_stop(void)
{
    lh_log_set_sink(NULL, NULL);
    logcap_clear();
    pthread_mutex_lock(&cap_lock);
    free(cap_msgs);
    cap_msgs = NULL;
    cap_cap = 0;
    pthread_mutex_unlock(&cap_lock);
}

int logcap_find(lh_log_level level, const char *sub1, const char *sub2, const char *sub3)
{
    int found = -1;
    pthread_mutex_lock(&cap_lock);
    for (size_t i = 0; i < cap_n && found < 0; i++) {
        const char *t = cap_msgs[i].text;
        if (cap_msgs[i].level == level && (!sub1 || strstr(t, sub1)) &&
            (!sub2 || strstr(t, sub2)) && (!sub3 || strstr(t, sub3)))
            found = (int)i;
    }
    pthread_mutex_unlock(&cap_lock);
    return found;
}

void logcap_dump(void)
{
    static const char *const lv[] = {"error", "warn", "info", "debug"};
    pthread_mutex_lock(&cap_lock);
    fprintf(stderr, "\n  captured log (%zu messages):\n", cap_n);
    for (size_t i = 0; i < cap_n; i++)
        fprintf(stderr, "    [%s] %s\n", lv[cap_msgs[i].level], cap_msgs[i].text);
    pthread_mutex_unlock(&cap_lock);
}

/* ---- configs ----------------------------------------------------------------------------- */

lh_model_config *small_cfg(const char *arch, const char *extra_members)
{
    char text[2048];
    char arch_member[512] = "";
    if (arch)
        snprintf(arch_member, sizeof arch_member, "\"architectures\": [\"%s\"], ", arch);
    snprintf(text, sizeof text,
             "{%s\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 4, \"vocab_size\": 100, "
             "\"max_position_embeddings\": 256%s%s}",
             arch_member, extra_members ? ", " : "", extra_members ? extra_members : "");
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    lh_status st = lh_model_config_parse(text, "/test/config.json", &cfg, &err);
    EXPECT_STATUS(st, LH_OK, err);
    return st == LH_OK ? cfg : NULL;
}

bool run_cfg(lh_run_config *rc, const char *yaml)
{
    lh_run_config_init(rc);
    if (!yaml)
        return true;
    lh_err err = {0};
    lh_status st = lh_run_config_load_string(rc, yaml, "test-run.yaml", &err);
    if (st == LH_OK)
        st = lh_run_config_validate(rc, &err);
    EXPECT_STATUS(st, LH_OK, err);
    return st == LH_OK;
}
