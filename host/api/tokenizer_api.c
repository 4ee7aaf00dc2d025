/* The public tokenizer entry point that finds a model's tokenizer: a GGUF source's metadata or
 * the tokenizer.json of a Hugging Face model (the rest of the tokenizer API is
 * host/tokenizer/tokenizer.c, exported through llmhost.h). */
#include "core/err.h"
#include "core/paths.h"
#include "llmhost.h"
#include "tokenizer/tokenizer.h"
#include "weights/gguf_locate.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

lh_status lh_tokenizer_open(const char *path, lh_tokenizer **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_tokenizer_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return lh_err_set(err, LH_E_USAGE, "lh_tokenizer_open: no path");
    lh_status ps = lh_model_path_check(path, err);
    if (ps != LH_OK)
        return ps;
    /* a GGUF path wins only when lh_gguf_locate says it is one (a Hugging Face directory, with
     * config.json, never is) */
    char *file = NULL;
    lh_status s = lh_gguf_locate(path, &file, err);
    if (s != LH_OK)
        return s;
    if (file) {
        s = lh_tokenizer_load_gguf(file, out, err);
        free(file);
        return s;
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        file = lh_path_join(path, "tokenizer.json");
    } else {
        size_t n = strlen(path);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (strcmp(base, "config.json") == 0) {
            /* a model's config.json: the tokenizer.json next to it */
            file = malloc(n + sizeof "tokenizer.json");
            if (file) {
                memcpy(file, path, (size_t)(base - path));
                strcpy(file + (base - path), "tokenizer.json");
            }
        } else {
            file = strdup(path);
        }
    }
    if (!file)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    s = lh_tokenizer_load(file, out, err);
    free(file);
    return s;
}
