#include "index_generate.h"

#include "core/err.h"
#include "core/paths.h"
#include "loader.h"
#include "plugin_probe.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void lh_index_free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

lh_status lh_index_list_plugins(const char *dir, char ***out, size_t *n, lh_err *err)
{
    *out = NULL;
    *n = 0;
    DIR *dh = opendir(dir);
    if (!dh)
        return lh_err_set(err, LH_E_IO, "%s: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *de;
    lh_status st = LH_OK;
    while ((de = readdir(dh)) && st == LH_OK) {
        if (fnmatch("libmodel_*.so", de->d_name, 0) != 0 &&
            fnmatch("libattn_*.so", de->d_name, 0) != 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **g = realloc(*out, cap * sizeof *g);
            if (!g) {
                st = lh_err_set(err, LH_E_NOMEM, "out of memory");
                break;
            }
            *out = g;
        }
        if (!((*out)[*n] = strdup(de->d_name)))
            st = lh_err_set(err, LH_E_NOMEM, "out of memory");
        else
            (*n)++;
    }
    closedir(dh);
    if (st == LH_OK && *n) /* an empty dir: no array (qsort must not get NULL) */
        qsort(*out, *n, sizeof **out, cmp_str);
    return st;
}

static lh_status add_row(lh_arch_index *idx, lh_kind kind, const char *name, const char *file,
                         lh_err *err)
{
    const lh_index_row *dup = lh_arch_index_find(idx, kind, name);
    if (dup)
        return lh_err_set(err, LH_E_INDEX_PARSE, "%s '%s' is registered by both %s and %s",
                          lh_kind_name(kind), name, dup->shared_object, file);
    lh_index_row *g = realloc(idx->rows, (idx->n_rows + 1) * sizeof *g);
    if (!g)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    idx->rows = g;
    lh_index_row *r = &g[idx->n_rows++];
    r->kind = kind;
    r->line = (int)idx->n_rows;
    r->name = strdup(name);
    r->shared_object = strdup(file);
    return r->name && r->shared_object ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory");
}

lh_status lh_index_generate(const char *dir, bool allow_insecure, lh_arch_index *out,
                            lh_err *err)
{
    return lh_index_generate_ex(dir, allow_insecure, 0, out, err);
}

lh_status lh_index_generate_ex(const char *dir, bool allow_insecure, double timeout_s,
                               lh_arch_index *out, lh_err *err)
{
    memset(out, 0, sizeof *out);
    char **names;
    size_t n;
    lh_status st = lh_index_list_plugins(dir, &names, &n, err);
    if (st != LH_OK)
        return st;
    out->dir = realpath(dir, NULL);
    out->path = lh_path_join(out->dir ? out->dir : dir, "(generated)");
    for (size_t i = 0; i < n && st == LH_OK; i++) {
        char *path = lh_path_join(out->dir ? out->dir : dir, names[i]);
        if (!path) {
            st = lh_err_set(err, LH_E_NOMEM, "out of memory");
            break;
        }
        lh_plugin_probe p;
        st = lh_plugin_probe_file(path, allow_insecure, timeout_s, &p, err);
        for (size_t j = 0; j < p.n_regs && st == LH_OK; j++)
            st = add_row(out, p.regs[j].kind, p.regs[j].name, names[i], err);
        lh_plugin_probe_free(&p);
        free(path);
    }
    lh_index_free_names(names, n);
    if (st != LH_OK)
        lh_arch_index_free(out);
    return st;
}

lh_status lh_index_regenerate(const char *dir, const char *file, bool allow_insecure,
                              double timeout_s, size_t *n_rows, lh_err *err)
{
    lh_arch_index gen;
    lh_status st = lh_index_generate_ex(dir, allow_insecure, timeout_s, &gen, err);
    if (st != LH_OK)
        return st;
    st = lh_arch_index_write_atomic(file, gen.rows, gen.n_rows, err);
    if (st == LH_OK && n_rows)
        *n_rows = gen.n_rows;
    lh_arch_index_free(&gen);
    return st;
}

size_t lh_index_diff_items(const lh_arch_index *expected, const lh_arch_index *actual,
                           lh_index_diff_item **items)
{
    *items = NULL;
    size_t n = 0;
    lh_index_diff_item *v = malloc((actual->n_rows + expected->n_rows + 1) * sizeof *v);
    if (!v)
        return (size_t)-1;
    for (size_t i = 0; i < actual->n_rows; i++) {
        const lh_index_row *a = &actual->rows[i];
        const lh_index_row *e = lh_arch_index_find(expected, a->kind, a->name);
        if (!e)
            v[n++] = (lh_index_diff_item){LH_INDEX_DIFF_MISSING, NULL, a};
        else if (strcmp(e->shared_object, a->shared_object) != 0)
            v[n++] = (lh_index_diff_item){LH_INDEX_DIFF_WRONG_FILE, e, a};
    }
    for (size_t i = 0; i < expected->n_rows; i++) {
        const lh_index_row *e = &expected->rows[i];
        if (!lh_arch_index_find(actual, e->kind, e->name))
            v[n++] = (lh_index_diff_item){LH_INDEX_DIFF_STALE, e, NULL};
    }
    if (!n) {
        free(v);
        v = NULL;
    }
    *items = v;
    return n;
}

size_t lh_index_diff(const lh_arch_index *expected, const lh_arch_index *actual, FILE *report)
{
    lh_index_diff_item *items;
    size_t n = lh_index_diff_items(expected, actual, &items);
    if (n == (size_t)-1) {
        if (report)
            fprintf(report, "out of memory comparing %s with %s\n", expected->path,
                    actual->path);
        return 1;
    }
    for (size_t i = 0; report && i < n; i++) {
        const lh_index_row *e = items[i].expected, *a = items[i].actual;
        switch (items[i].what) {
        case LH_INDEX_DIFF_MISSING:
            fprintf(report, "missing from %s: %s %s -> %s\n", expected->path,
                    lh_kind_name(a->kind), a->name, a->shared_object);
            break;
        case LH_INDEX_DIFF_WRONG_FILE:
            fprintf(report, "%s:%d: %s %s names %s, but %s registers it\n", expected->path,
                    e->line, lh_kind_name(e->kind), e->name, e->shared_object,
                    a->shared_object);
            break;
        case LH_INDEX_DIFF_STALE:
            fprintf(report, "stale in %s:%d: %s %s -> %s (no plugin registers it)\n",
                    expected->path, e->line, lh_kind_name(e->kind), e->name,
                    e->shared_object);
            break;
        }
    }
    free(items);
    return n;
}
