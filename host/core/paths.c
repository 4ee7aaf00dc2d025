#include "paths.h"

#include "err.h"
#include "strutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef LH_PLUGIN_INSTALL_SUBDIR
#define LH_PLUGIN_INSTALL_SUBDIR "llmhost/plugins"
#endif

char *lh_path_join(const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    return lh_asprintf("%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", name);
}

char *lh_parent_dir(const char *file)
{
    char *copy = strdup(file);
    if (!copy)
        return NULL;
    char *canon = realpath(dirname(copy), NULL);
    free(copy);
    return canon;
}

bool lh_same_dir(const char *a, const char *b)
{
    char *ca = realpath(a, NULL), *cb = realpath(b, NULL);
    bool same;
    if (ca && cb)
        same = strcmp(ca, cb) == 0;
    else
        same = strcmp(a, b) == 0;
    free(ca);
    free(cb);
    return same;
}

static bool has_index(const char *dir)
{
    char *p = lh_path_join(dir, "arch_index.tsv");
    bool ok = p && access(p, R_OK) == 0;
    free(p);
    return ok;
}

lh_status lh_find_builtin_plugin_dir(char **out, lh_err *err)
{
    *out = NULL;
    const char *env = getenv("LLMHOST_PLUGIN_DIR");
    if (env && *env) {
        char *canon = realpath(env, NULL);
        if (!canon)
            return lh_err_set(err, LH_E_IO, "LLMHOST_PLUGIN_DIR=%s: %s", env, strerror(errno));
        *out = canon;
        return LH_OK;
    }
    Dl_info info;
    if (!dladdr((void *)lh_find_builtin_plugin_dir, &info) || !info.dli_fname)
        return lh_err_set(err, LH_E_IO, "cannot tell where libllmhost is loaded from; set "
                                        "LLMHOST_PLUGIN_DIR");
    char *self_dir = lh_parent_dir(info.dli_fname);
    if (!self_dir)
        return lh_err_set(err, LH_E_IO, "%s: %s", info.dli_fname, strerror(errno));
    char *installed = lh_path_join(self_dir, LH_PLUGIN_INSTALL_SUBDIR);
    char *build_tree = lh_path_join(self_dir, "../plugins");
    lh_status st = LH_OK;
    const char *found = NULL;
    if (installed && has_index(installed))
        found = installed;
    else if (build_tree && has_index(build_tree))
        found = build_tree;
    if (found) {
        *out = realpath(found, NULL);
        if (!*out)
            st = lh_err_set(err, LH_E_IO, "%s: %s", found, strerror(errno));
    } else {
        st = lh_err_set(err, LH_E_IO,
                        "no built-in plugin directory with an arch_index.tsv: tried %s and %s "
                        "(relative to %s); set LLMHOST_PLUGIN_DIR",
                        installed ? installed : "?", build_tree ? build_tree : "?",
                        info.dli_fname);
    }
    free(self_dir);
    free(installed);
    free(build_tree);
    return st;
}
