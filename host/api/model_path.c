/* What a model path names, checked before any part of a model is opened (llmhost.h,
 * lh_model_path_check): the resolver, the tokenizer and the chat template all start here, so a
 * path that is no model is reported as exactly that, whichever a command opens first. */
#include "core/err.h"
#include "llmhost.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The magic decides a GGUF file, not its name (as gguf_locate.c reads it). */
static bool gguf_magic(const char *file)
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

lh_status lh_model_path_check(const char *path, lh_err *err)
{
    if (!path || !*path)
        return lh_err_set(err, LH_E_USAGE, "no model path given (a model directory, its "
                          "config.json or a GGUF file)");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return lh_err_set(err, LH_E_IO, "model path '%s' does not exist", path);
        return lh_err_set(err, LH_E_IO, "model path '%s': %s", path, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode))
        return LH_OK;
    /* a config.json (or another JSON file the caller reads: tokenizer.json) or a GGUF file */
    if (S_ISREG(sb.st_mode) && (ends_with(path, ".json") || gguf_magic(path)))
        return LH_OK;
    return lh_err_set(err, LH_E_USAGE, "model path '%s' is neither a model directory, a "
                      "config.json nor a model file (GGUF)", path);
}
