/* Which model paths are GGUF sources (gguf_locate.h). */
#include "gguf_locate.h"

#include "../core/err.h"
#include "../core/paths.h"
#include "../core/strbuf.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The magic decides, not the name: a GGUF file renamed without its extension still loads, and
 * a JSON file named *.gguf is reported by the JSON parser. */
static bool has_gguf_magic(const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return false;
    char m[4];
    const bool ok = fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    fclose(f);
    return ok;
}

static bool ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The *.gguf regular files of dir, sorted (deterministic messages). */
static lh_status list_gguf(const char *dir, char ***names, size_t *n, lh_err *err)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return LH_OK; /* unreadable: the Hugging Face path reports it */
    size_t cap = 0;
    lh_status st = LH_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!ends_with(e->d_name, ".gguf"))
            continue;
        char *full = lh_path_join(dir, e->d_name);
        struct stat sb;
        const bool regular = full && stat(full, &sb) == 0 && S_ISREG(sb.st_mode);
        free(full);
        if (!regular)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 4;
            char **grown = realloc(*names, cap * sizeof *grown);
            if (!grown) {
                st = LH_E_NOMEM;
                break;
            }
            *names = grown;
        }
        if (!((*names)[*n] = strdup(e->d_name))) {
            st = LH_E_NOMEM;
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (st != LH_OK)
        return lh_err_set(err, st, "%s: out of memory listing GGUF files", dir);
    if (*n > 1)
        qsort(*names, *n, sizeof **names, cmp_str);
    return LH_OK;
}

lh_status lh_gguf_locate(const char *path, char **gguf_file, lh_err *err)
{
    *gguf_file = NULL;
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return LH_OK;
    if (S_ISREG(sb.st_mode)) {
        if (has_gguf_magic(path) && !(*gguf_file = strdup(path)))
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        return LH_OK;
    }
    if (!S_ISDIR(sb.st_mode))
        return LH_OK;
    char *cfg = lh_path_join(path, "config.json");
    if (!cfg)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    const bool hf = stat(cfg, &sb) == 0;
    free(cfg);
    if (hf)
        return LH_OK;
    char **names;
    size_t n;
    lh_status st = list_gguf(path, &names, &n, err);
    if (st == LH_OK && n == 1 && !(*gguf_file = lh_path_join(path, names[0])))
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    if (st == LH_OK && n > 1) {
        lh_strbuf b = {0};
        for (size_t i = 0; i < n; i++)
            lh_strbuf_printf(&b, "%s%s", i ? ", " : "", names[i]);
        const bool split = strstr(b.s ? b.s : "", "-of-") != NULL;
        st = lh_err_set(err, LH_E_CONFIG,
                        "%s holds %zu GGUF files (%s) and no config.json: name the one to load%s",
                        path, n, b.oom ? "?" : b.s,
                        split ? " (split GGUF files, -NNNNN-of-NNNNN.gguf, are not supported: "
                                "merge them with llama.cpp's gguf-split --merge)" : "");
        free(b.s);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}
