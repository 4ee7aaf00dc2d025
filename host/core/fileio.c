#include "fileio.h"

#include "err.h"
#include "strbuf.h"

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
    /* read at most one byte past the limit: that byte tells "too big" from "exactly
     * max_bytes" */
    if (max_bytes > SIZE_MAX / 4)
        max_bytes = SIZE_MAX / 4;
    lh_strbuf b = {0};
    lh_status rc = LH_OK;
    bool too_big = false;
    for (;;) {
        if (b.len > max_bytes) {
            too_big = true;
            break;
        }
        const size_t want = max_bytes - b.len + 1 < 65536 ? max_bytes - b.len + 1 : 65536;
        if (!lh_strbuf_reserve(&b, want)) {
            rc = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
            break;
        }
        size_t got = fread(b.s + b.len, 1, want, f);
        b.len += got;
        b.s[b.len] = '\0';
        if (got == 0) {
            if (ferror(f))
                rc = lh_err_set(err, LH_E_IO, "%s: read error: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (rc == LH_OK && too_big)
        rc = lh_err_set(err, too_big_code, "%s: larger than %zu bytes; not a %s", path,
                        max_bytes, what);
    if (rc == LH_OK && b.len && memchr(b.s, '\0', b.len))
        rc = lh_err_set(err, too_big_code, "%s: contains a NUL byte; not a text %s", path, what);
    if (rc != LH_OK) {
        lh_strbuf_free(&b);
        return rc;
    }
    *len = b.len;
    *text = lh_strbuf_take(&b);
    return *text ? LH_OK : lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
}
