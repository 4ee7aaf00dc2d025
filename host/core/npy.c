#include "npy.h"

#include "err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char magic[6] = {(char)0x93, 'N', 'U', 'M', 'P', 'Y'};

lh_status lh_save_npy_f32(const char *path, const float *data, int64_t rows, int64_t cols,
                           lh_err *err)
{
    int64_t count64;
    if (!path || (!data && rows && cols) || rows < 0 || cols < 0 ||
        __builtin_mul_overflow(rows, cols, &count64) || count64 > INT64_MAX / 4)
        return lh_err_set(err, LH_E_USAGE, "lh_save_npy_f32: invalid arguments (path %s, data "
                          "%s, shape [%lld, %lld])", path ? path : "NULL", data ? "set" : "NULL",
                          (long long)rows, (long long)cols);
    char dict[128];
    int n = snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ", %" PRId64
                     "), }",
                     rows, cols);
    /* magic(6) + version(2) + header_len(2) + dict padded with spaces to a multiple of 64,
     * ending in '\n' */
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    uint16_t hlen = (uint16_t)((size_t)n + pad + 1);
    FILE *f = fopen(path, "wb");
    if (!f)
        return lh_err_set(err, LH_E_IO, "%s: cannot create: %s", path, strerror(errno));
    unsigned char head[10];
    memcpy(head, magic, 6);
    head[6] = 1;
    head[7] = 0;
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8);
    bool ok = fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    size_t count = (size_t)rows * (size_t)cols;
    ok = ok && fwrite(data, sizeof(float), count, f) == count; /* x86-64: little-endian */
    if (fclose(f) != 0)
        ok = false;
    if (!ok) {
        lh_status st = lh_err_set(err, LH_E_IO, "%s: write error: %s", path, strerror(errno));
        remove(path); /* no half-written array left behind */
        return st;
    }
    return LH_OK;
}

/* Finds 'key': in the header dict and returns a pointer just past the colon. */
static const char *dict_value(const char *dict, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "'%s':", key);
    const char *p = strstr(dict, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    return p;
}

lh_status lh_npy_read_f32(const char *path, float **data, int64_t *rows, int64_t *cols,
                          lh_err *err)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lh_err_set(err, LH_E_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char head[12];
    lh_status st = LH_OK;
    char *dict = NULL;
    size_t hlen = 0;
    if (fread(head, 1, 10, f) != 10 || memcmp(head, magic, 6) != 0) {
        st = lh_err_set(err, LH_E_CONFIG, "%s: not a .npy file", path);
    } else if (head[6] == 1) {
        hlen = (size_t)head[8] | (size_t)head[9] << 8;
    } else if (head[6] == 2 || head[6] == 3) {
        if (fread(head + 10, 1, 2, f) != 2)
            st = lh_err_set(err, LH_E_CONFIG, "%s: truncated header", path);
        hlen = (size_t)head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 |
               (size_t)head[11] << 24;
    } else {
        st = lh_err_set(err, LH_E_CONFIG, "%s: .npy format version %u is not supported", path,
                        head[6]);
    }
    if (st == LH_OK && (hlen == 0 || hlen > 65536))
        st = lh_err_set(err, LH_E_CONFIG, "%s: header length %zu is implausible", path, hlen);
    if (st == LH_OK) {
        dict = calloc(1, hlen + 1);
        if (!dict || fread(dict, 1, hlen, f) != hlen)
            st = lh_err_set(err, LH_E_CONFIG, "%s: truncated header", path);
    }
    const char *descr = st == LH_OK ? dict_value(dict, "descr") : NULL;
    const char *order = st == LH_OK ? dict_value(dict, "fortran_order") : NULL;
    const char *shape = st == LH_OK ? dict_value(dict, "shape") : NULL;
    if (st == LH_OK && (!descr || strncmp(descr, "'<f4'", 5) != 0))
        st = lh_err_set(err, LH_E_CONFIG, "%s: dtype is not little-endian float32 ('<f4')", path);
    if (st == LH_OK && (!order || strncmp(order, "False", 5) != 0))
        st = lh_err_set(err, LH_E_CONFIG, "%s: Fortran-order arrays are not supported", path);
    int64_t dims[3] = {1, 1, 1};
    int nd = 0;
    if (st == LH_OK) {
        const char *p = shape && *shape == '(' ? shape + 1 : NULL;
        while (p && *p != ')' && nd < 3) {
            char *end;
            errno = 0;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 0 || errno) {
                p = NULL;
                break;
            }
            dims[nd++] = v;
            p = end;
            while (*p == ',' || *p == ' ')
                p++;
        }
        if (!p || nd == 0 || nd > 2 || *p != ')')
            st = lh_err_set(err, LH_E_CONFIG, "%s: shape must have 1 or 2 dimensions", path);
    }
    int64_t count64 = 0;
    if (st == LH_OK && (__builtin_mul_overflow(dims[0], nd == 2 ? dims[1] : 1, &count64) ||
                        count64 > ((int64_t)1 << 36)))
        st = lh_err_set(err, LH_E_CONFIG, "%s: shape (%lld, %lld) is implausibly large", path,
                        (long long)dims[0], (long long)dims[1]);
    if (st == LH_OK) {
        *rows = dims[0];
        *cols = nd == 2 ? dims[1] : 1;
        size_t count = (size_t)count64;
        *data = malloc(count ? count * sizeof(float) : 1);
        if (!*data)
            st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
        else if (fread(*data, sizeof(float), count, f) != count)
            st = lh_err_set(err, LH_E_CONFIG, "%s: truncated data (expected %zu floats)", path,
                            count);
    }
    if (st != LH_OK) {
        free(*data);
        *data = NULL;
    }
    free(dict);
    fclose(f);
    return st;
}
