#include "index_generate.h"

#include "core/err.h"
#include "core/paths.h"
#include "loader.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static lh_status list_plugins(const char *dir, char ***out, size_t *n, lh_err *err)
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
    if (st == LH_OK)
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
    memset(out, 0, sizeof *out);
    char **names;
    size_t n;
    lh_status st = list_plugins(dir, &names, &n, err);
    if (st != LH_OK)
        return st;
    out->dir = realpath(dir, NULL);
    out->path = lh_path_join(out->dir ? out->dir : dir, "(generated)");
    unsigned dlopen_calls = 0;
    for (size_t i = 0; i < n && st == LH_OK; i++) {
        lh_module_rec *m = calloc(1, sizeof *m);
        if (!m) {
            st = lh_err_set(err, LH_E_NOMEM, "out of memory");
            break;
        }
        m->path = lh_path_join(out->dir ? out->dir : dir, names[i]);
        m->file_name = strdup(names[i]);
        m->dir = out->dir ? strdup(out->dir) : NULL;
        st = lh_loader_load(m, allow_insecure, &dlopen_calls, err);
        for (size_t j = 0; j < m->n_log && st == LH_OK; j++)
            st = add_row(out, m->log[j]->kind, m->log[j]->name, names[i], err);
        lh_module_rec_free(m);
    }
    free_names(names, n);
    if (st != LH_OK)
        lh_arch_index_free(out);
    return st;
}

size_t lh_index_diff(const lh_arch_index *expected, const lh_arch_index *actual, FILE *report)
{
    size_t diffs = 0;
    for (size_t i = 0; i < actual->n_rows; i++) {
        const lh_index_row *a = &actual->rows[i];
        const lh_index_row *e = lh_arch_index_find(expected, a->kind, a->name);
        if (!e) {
            diffs++;
            if (report)
                fprintf(report, "missing from %s: %s %s -> %s\n", expected->path,
                        lh_kind_name(a->kind), a->name, a->shared_object);
        } else if (strcmp(e->shared_object, a->shared_object) != 0) {
            diffs++;
            if (report)
                fprintf(report, "%s:%d: %s %s names %s, but %s registers it\n", expected->path,
                        e->line, lh_kind_name(e->kind), e->name, e->shared_object,
                        a->shared_object);
        }
    }
    for (size_t i = 0; i < expected->n_rows; i++) {
        const lh_index_row *e = &expected->rows[i];
        if (!lh_arch_index_find(actual, e->kind, e->name)) {
            diffs++;
            if (report)
                fprintf(report, "stale in %s:%d: %s %s -> %s (no plugin registers it)\n",
                        expected->path, e->line, lh_kind_name(e->kind), e->name,
                        e->shared_object);
        }
    }
    return diffs;
}
