#include "fileio.h"

#include "err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

lh_status lh_read_text_file(const char *path, const char *what, size_t max_bytes,
                            lh_status too_big_code, char **text, size_t *len, lh_err *err)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lh_err_set(err, LH_E_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return lh_err_set(err, LH_E_IO, "%s: is a directory, not a %s file", path, what);
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    lh_status rc = buf ? LH_OK : lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    while (rc == LH_OK) {
        if (n + 1 == cap) {
            if (cap > max_bytes) {
                rc = lh_err_set(err, too_big_code, "%s: larger than %zu bytes; not a %s", path,
                                max_bytes, what);
                break;
            }
            char *g = realloc(buf, cap * 2);
            if (!g) {
                rc = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = g;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = lh_err_set(err, LH_E_IO, "%s: read error: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (rc == LH_OK && n > max_bytes)
        rc = lh_err_set(err, too_big_code, "%s: larger than %zu bytes; not a %s", path,
                        max_bytes, what);
    if (rc == LH_OK && memchr(buf, '\0', n))
        rc = lh_err_set(err, too_big_code, "%s: contains a NUL byte; not a text %s", path, what);
    if (rc != LH_OK) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return LH_OK;
}
