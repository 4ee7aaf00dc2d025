#include "plugin_tool.h"

#include "core/err.h"
#include "core/paths.h"
#include "index/arch_index.h"
#include "index_generate.h"
#include "loader.h"
#include "plugin_probe.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct check_ctx {
    json_t *problems;
    lh_status first;
} check_ctx;

static void problem(check_ctx *c, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
static void problem(check_ctx *c, lh_status code, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(c->problems, json_pack("{s:i, s:s, s:s}", "status", (int)code,
                                                 "status_name", lh_status_name(code),
                                                 "message", buf));
    if (c->first == LH_OK)
        c->first = code;
}

static const char *outcome_name(const lh_plugin_probe *p)
{
    switch (p->outcome) {
    case LH_PROBE_REPORTED: return p->status == LH_OK ? "ok" : "error";
    case LH_PROBE_CRASHED: return "crashed";
    case LH_PROBE_EXITED: return "exited";
    case LH_PROBE_TIMED_OUT: return "timed_out";
    case LH_PROBE_NOT_RUN: break;
    }
    return "not_run";
}

static json_t *probe_json(const char *file, const lh_plugin_probe *p)
{
    char host_abi[32], plugin_abi[32];
    snprintf(host_abi, sizeof host_abi, "%d.%d", LH_PLUGIN_ABI_MAJOR, LH_PLUGIN_ABI_MINOR);
    json_t *abi = json_null();
    if (p->has_abi) {
        snprintf(plugin_abi, sizeof plugin_abi, "%u.%u", p->abi_major, p->abi_minor);
        abi = json_pack("{s:s, s:i, s:i, s:s, s:b}", "plugin", plugin_abi, "major",
                        (int)p->abi_major, "minor", (int)p->abi_minor, "host", host_abi,
                        "compatible", lh_plugin_abi_compatible(p->abi_major, p->abi_minor));
    }
    bool refused = p->status == LH_E_INSECURE;
    json_t *security = json_pack(
        "{s:b, s:b, s:o}", "ok", !refused && !p->insecure_waived, "waived",
        p->insecure_waived != NULL, "message",
        refused ? json_string(p->msg) : p->insecure_waived ? json_string(p->insecure_waived)
                                                           : json_null());
    json_t *regs = json_array();
    for (size_t i = 0; i < p->n_regs; i++)
        json_array_append_new(regs, json_pack("{s:s, s:s}", "kind",
                                              lh_kind_name(p->regs[i].kind), "name",
                                              p->regs[i].name));
    json_t *o = json_pack("{s:s, s:s, s:b, s:i, s:s, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
                          "file", file, "path", p->path ? p->path : file, "ok",
                          p->status == LH_OK, "status", (int)p->status, "status_name",
                          lh_status_name(p->status), "error",
                          p->msg ? json_string(p->msg) : json_null(), "outcome",
                          outcome_name(p), "phase",
                          p->phase ? json_string(p->phase) : json_null(), "name",
                          p->plugin_name ? json_string(p->plugin_name) : json_null(),
                          "version",
                          p->plugin_version ? json_string(p->plugin_version) : json_null(),
                          "abi", abi, "security", security, "registers", regs);
    if (p->outcome == LH_PROBE_CRASHED)
        json_object_set_new(o, "signal", json_integer(p->term_signal));
    if (p->outcome == LH_PROBE_EXITED)
        json_object_set_new(o, "exit_status", json_integer(p->exit_status));
    return o;
}

static void rows_add(lh_arch_index *idx, lh_kind kind, const char *name, const char *file)
{
    lh_index_row *g = realloc(idx->rows, (idx->n_rows + 1) * sizeof *g);
    if (!g)
        return;
    idx->rows = g;
    lh_index_row *r = &g[idx->n_rows];
    r->kind = kind;
    r->name = strdup(name);
    r->shared_object = strdup(file);
    r->line = (int)idx->n_rows + 1;
    if (r->name && r->shared_object) {
        idx->n_rows++;
    } else {
        free(r->name);
        free(r->shared_object);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool file_exists(const char *dir, const char *name)
{
    char *p = lh_path_join(dir, name);
    struct stat st;
    bool ok = p && lstat(p, &st) == 0;
    free(p);
    return ok;
}

/* The files to probe: the generator's (libmodel_*.so, libattn_*.so) and any other existing
 * file the index names, sorted, each once. */
static lh_status files_to_probe(const char *dir, const lh_arch_index *idx, char ***out,
                                size_t *n, lh_err *err)
{
    char **names;
    lh_status st = lh_index_list_plugins(dir, &names, n, err);
    if (st != LH_OK)
        return st;
    for (size_t i = 0; idx && i < idx->n_rows; i++) {
        const char *so = idx->rows[i].shared_object;
        bool have = false;
        for (size_t j = 0; j < *n && !have; j++)
            have = strcmp(names[j], so) == 0;
        if (have || !file_exists(dir, so))
            continue;
        char **g = realloc(names, (*n + 1) * sizeof *g);
        if (!g)
            break;
        names = g;
        if ((names[*n] = strdup(so)))
            (*n)++;
    }
    if (*n)
        qsort(names, *n, sizeof *names, cmp_str);
    *out = names;
    return LH_OK;
}

static bool probe_failed(const json_t *plugins, const char *file)
{
    size_t i;
    json_t *p;
    json_array_foreach(plugins, i, p)
    {
        if (strcmp(json_string_value(json_object_get(p, "file")), file) == 0)
            return !json_is_true(json_object_get(p, "ok"));
    }
    return false;
}

static void check_plugin(check_ctx *c, const char *path, const char *file, bool allow_insecure,
                         double timeout_s, json_t *plugins, lh_arch_index *gen)
{
    lh_plugin_probe p;
    lh_err perr = {0};
    lh_plugin_probe_file(path, allow_insecure, timeout_s, &p, &perr);
    json_array_append_new(plugins, probe_json(file, &p));
    if (p.status != LH_OK)
        problem(c, p.status, "%s", p.msg ? p.msg : perr.msg);
    for (size_t i = 0; gen && i < p.n_regs; i++) {
        const lh_index_row *dup = lh_arch_index_find(gen, p.regs[i].kind, p.regs[i].name);
        if (dup)
            problem(c, LH_E_INDEX_PARSE,
                    "%s '%s' is registered by both %s and %s (an index can name only one)",
                    lh_kind_name(p.regs[i].kind), p.regs[i].name, dup->shared_object, file);
        else
            rows_add(gen, p.regs[i].kind, p.regs[i].name, file);
    }
    lh_plugin_probe_free(&p);
}

static json_t *row_json(const lh_index_row *r, bool with_line)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "kind", lh_kind_name(r->kind), "name", r->name,
                          "shared_object", r->shared_object);
    if (with_line)
        json_object_set_new(o, "line", json_integer(r->line));
    return o;
}

static void check_index(check_ctx *c, const char *dir, const lh_arch_index *idx,
                        const lh_arch_index *gen, const json_t *plugins, json_t *jidx)
{
    json_t *missing = json_array(), *stale = json_array(), *wrong = json_array(),
           *missing_files = json_array(), *unverified = json_array();
    lh_index_diff_item *items;
    size_t n = lh_index_diff_items(idx, gen, &items);
    if (n == (size_t)-1) {
        problem(c, LH_E_NOMEM, "out of memory comparing %s with the plugins", idx->path);
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        const lh_index_row *e = items[i].expected, *a = items[i].actual;
        switch (items[i].what) {
        case LH_INDEX_DIFF_MISSING:
            json_array_append_new(missing, row_json(a, false));
            problem(c, LH_E_INDEX_DRIFT, "%s lacks %s %s, which %s registers", idx->path,
                    lh_kind_name(a->kind), a->name, a->shared_object);
            break;
        case LH_INDEX_DIFF_WRONG_FILE: {
            json_t *o = row_json(e, true);
            json_object_set_new(o, "registered_by", json_string(a->shared_object));
            json_array_append_new(wrong, o);
            problem(c, LH_E_INDEX_DRIFT, "%s:%d: %s %s names %s, but %s registers it",
                    idx->path, e->line, lh_kind_name(e->kind), e->name, e->shared_object,
                    a->shared_object);
            break;
        }
        case LH_INDEX_DIFF_STALE:
            if (!file_exists(dir, e->shared_object)) {
                json_array_append_new(missing_files, row_json(e, true));
                problem(c, LH_E_MODULE_MISSING, "%s:%d: %s %s names %s, which is not in %s",
                        idx->path, e->line, lh_kind_name(e->kind), e->name, e->shared_object,
                        dir);
            } else if (probe_failed(plugins, e->shared_object)) {
                /* the plugin's own failure is the problem already reported */
                json_array_append_new(unverified, row_json(e, true));
            } else {
                json_array_append_new(stale, row_json(e, true));
                problem(c, LH_E_INDEX_DRIFT,
                        "%s:%d: index says %s %s is provided by %s, %s did not register it",
                        idx->path, e->line, lh_kind_name(e->kind), e->name, e->shared_object,
                        e->shared_object);
            }
            break;
        }
    }
    free(items);
    json_object_set_new(jidx, "missing_from_index", missing);
    json_object_set_new(jidx, "stale", stale);
    json_object_set_new(jidx, "wrong_file", wrong);
    json_object_set_new(jidx, "missing_files", missing_files);
    json_object_set_new(jidx, "unverified", unverified);
}

static lh_status check_dir(check_ctx *c, const char *dir, bool allow_insecure,
                           double timeout_s, json_t *report, lh_err *err)
{
    lh_err serr = {0};
    json_t *dsec;
    if (lh_security_check_dir(dir, &serr) != LH_OK) {
        dsec = json_pack("{s:b, s:b, s:s}", "ok", false, "waived", allow_insecure, "message",
                         serr.msg);
        if (!allow_insecure)
            problem(c, serr.code, "%s", serr.msg);
    } else {
        dsec = json_pack("{s:b, s:b, s:n}", "ok", true, "waived", false, "message");
    }
    json_object_set_new(report, "dir_security", dsec);

    char *index_path = lh_path_join(dir, LH_ARCH_INDEX_FILE);
    if (!index_path)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    lh_arch_index idx = {0};
    bool have_idx = false;
    json_t *jidx = json_pack("{s:s, s:b}", "path", index_path, "present", false);
    struct stat st;
    if (stat(index_path, &st) == 0) {
        json_object_set_new(jidx, "present", json_true());
        lh_err ierr = {0};
        if (lh_arch_index_load(index_path, &idx, &ierr) == LH_OK) {
            have_idx = true;
        } else {
            json_object_set_new(jidx, "error", json_string(ierr.msg));
            problem(c, ierr.code, "%s", ierr.msg);
        }
    }
    size_t n = 0;
    char **names = NULL;
    lh_status lst = files_to_probe(dir, have_idx ? &idx : NULL, &names, &n, err);
    if (lst != LH_OK) {
        json_decref(jidx);
        lh_arch_index_free(&idx);
        free(index_path);
        return lst;
    }
    json_t *plugins = json_object_get(report, "plugins");
    lh_arch_index gen = {0};
    gen.path = strdup("(plugins)");
    for (size_t i = 0; i < n; i++) {
        char *path = lh_path_join(dir, names[i]);
        if (path)
            check_plugin(c, path, names[i], allow_insecure, timeout_s, plugins, &gen);
        free(path);
    }
    if (n == 0)
        problem(c, LH_E_MODULE_MISSING, "%s holds no plugin (no libmodel_*.so or libattn_*.so%s)",
                dir, have_idx ? " and no file its index names" : "");
    if (have_idx)
        check_index(c, dir, &idx, &gen, plugins, jidx);
    json_object_set_new(report, "index", jidx);
    lh_index_free_names(names, n);
    lh_arch_index_free(&gen);
    lh_arch_index_free(&idx);
    free(index_path);
    return LH_OK;
}

lh_status lh_plugin_tool_check(const char *path, bool allow_insecure, double timeout_s,
                               json_t **report, lh_err *err)
{
    *report = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return lh_err_set(err, errno == ENOENT ? LH_E_MODULE_MISSING : LH_E_IO, "%s: %s", path,
                          strerror(errno));
    char *real = realpath(path, NULL);
    if (!real)
        return lh_err_set(err, LH_E_IO, "%s: %s", path, strerror(errno));
    bool is_dir = S_ISDIR(st.st_mode);
    check_ctx c = {json_array(), LH_OK};
    char host_abi[32];
    snprintf(host_abi, sizeof host_abi, "%d.%d", LH_PLUGIN_ABI_MAJOR, LH_PLUGIN_ABI_MINOR);
    json_t *r = json_pack("{s:s, s:s, s:s, s:o}", "path", real, "type", is_dir ? "dir" : "file",
                          "host_abi", host_abi, "plugins", json_array());
    lh_status st2 = LH_OK;
    if (is_dir) {
        st2 = check_dir(&c, real, allow_insecure, timeout_s, r, err);
    } else {
        const char *slash = strrchr(real, '/');
        check_plugin(&c, real, slash ? slash + 1 : real, allow_insecure, timeout_s,
                     json_object_get(r, "plugins"), NULL);
    }
    free(real);
    if (st2 != LH_OK) {
        json_decref(r);
        json_decref(c.problems);
        return st2;
    }
    json_object_set_new(r, "ok", json_boolean(c.first == LH_OK));
    json_object_set_new(r, "status", json_integer(c.first));
    json_object_set_new(r, "status_name", json_string(lh_status_name(c.first)));
    json_object_set_new(r, "problems", c.problems);
    *report = r;
    if (c.first != LH_OK) {
        json_t *p0 = json_array_get(c.problems, 0);
        return lh_err_set(err, c.first, "%s", json_string_value(json_object_get(p0, "message")));
    }
    return LH_OK;
}

lh_status lh_plugin_tool_index(const char *dir, bool allow_insecure, double timeout_s,
                               char **written, size_t *n_rows, lh_err *err)
{
    if (written)
        *written = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return lh_err_set(err, LH_E_IO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return lh_err_set(err, LH_E_USAGE, "%s is not a directory (plugin index takes the "
                          "directory that holds the plugins and their arch_index.tsv)", dir);
    char *real = realpath(dir, NULL);
    if (!real)
        return lh_err_set(err, LH_E_IO, "%s: %s", dir, strerror(errno));
    char *file = lh_path_join(real, LH_ARCH_INDEX_FILE);
    free(real);
    if (!file)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    lh_status st2 = lh_index_regenerate(dir, file, allow_insecure, timeout_s, n_rows, err);
    if (st2 != LH_OK) {
        lh_err_prefix(err, "%s not written", file);
        free(file);
        return st2;
    }
    if (written)
        *written = file;
    else
        free(file);
    return LH_OK;
}
