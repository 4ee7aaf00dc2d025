/* A read-only safetensors file over mmap; see safetensors.h for the format and the checks. */
#include "safetensors.h"

#include "../core/err.h"
#include "../core/strutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct lh_st_file {
    char *path;
    const unsigned char *map;
    size_t map_size;
    const unsigned char *data; /* start of the data buffer */
    uint64_t data_size;
    json_t *header;            /* tensor names and metadata strings point into it */
    json_t *metadata;          /* borrowed from header; NULL when absent */
    lh_st_tensor *tensors;     /* sorted by name */
    size_t n;
};

/* ---- dtypes ---------------------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bits;
    lh_dtype dtype;
} DTYPES[LH_ST_DTYPE_COUNT_] = {
    [LH_ST_INVALID] = {"?", 0, LH_DTYPE_INVALID},
    [LH_ST_F32] = {"F32", 32, LH_DTYPE_F32},
    [LH_ST_F16] = {"F16", 16, LH_DTYPE_F16},
    [LH_ST_BF16] = {"BF16", 16, LH_DTYPE_BF16},
    [LH_ST_F64] = {"F64", 64, LH_DTYPE_INVALID},
    [LH_ST_I64] = {"I64", 64, LH_DTYPE_INVALID},
    [LH_ST_I32] = {"I32", 32, LH_DTYPE_INVALID},
    [LH_ST_I16] = {"I16", 16, LH_DTYPE_INVALID},
    [LH_ST_I8] = {"I8", 8, LH_DTYPE_INVALID},
    [LH_ST_U64] = {"U64", 64, LH_DTYPE_INVALID},
    [LH_ST_U32] = {"U32", 32, LH_DTYPE_INVALID},
    [LH_ST_U16] = {"U16", 16, LH_DTYPE_INVALID},
    [LH_ST_U8] = {"U8", 8, LH_DTYPE_INVALID},
    [LH_ST_BOOL] = {"BOOL", 8, LH_DTYPE_INVALID},
    [LH_ST_F8_E4M3] = {"F8_E4M3", 8, LH_DTYPE_FP8_E4M3},
    [LH_ST_F8_E5M2] = {"F8_E5M2", 8, LH_DTYPE_INVALID},
    [LH_ST_F8_E8M0] = {"F8_E8M0", 8, LH_DTYPE_INVALID},
    [LH_ST_F4] = {"F4", 4, LH_DTYPE_INVALID},
    [LH_ST_F6_E2M3] = {"F6_E2M3", 6, LH_DTYPE_INVALID},
    [LH_ST_F6_E3M2] = {"F6_E3M2", 6, LH_DTYPE_INVALID},
};

const char *lh_st_dtype_name(lh_st_dtype dt)
{
    if ((int)dt <= 0 || dt >= LH_ST_DTYPE_COUNT_)
        return "?";
    return DTYPES[dt].name;
}

unsigned lh_st_dtype_bits(lh_st_dtype dt)
{
    if ((int)dt <= 0 || dt >= LH_ST_DTYPE_COUNT_)
        return 0;
    return DTYPES[dt].bits;
}

lh_st_dtype lh_st_dtype_parse(const char *s)
{
    if (!s)
        return LH_ST_INVALID;
    for (int i = 1; i < LH_ST_DTYPE_COUNT_; i++)
        if (strcmp(DTYPES[i].name, s) == 0)
            return (lh_st_dtype)i;
    return LH_ST_INVALID;
}

const char *lh_st_dtype_name_of(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "F32";
    case LH_DTYPE_F16: return "F16";
    case LH_DTYPE_BF16: return "BF16";
    default: return NULL;
    }
}

static const char *all_dtype_names(void)
{
    return "F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2, "
           "F8_E8M0, F4, F6_E2M3, F6_E3M2";
}

/* ---- helpers --------------------------------------------------------------------------- */

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- header entries ------------------------------------------------------------------- */

static lh_status parse_entry(const lh_st_file *f, const char *name, json_t *v, lh_st_tensor *t,
                             lh_err *err)
{
    const char *path = f->path;
    if (!json_is_object(v))
        return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s': header entry is not an object",
                          path, name);
    t->name = name;
    t->file = f;
    json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s': \"dtype\" is %s", path, name,
                          jd ? "not a string" : "missing");
    t->st_dtype = lh_st_dtype_parse(json_string_value(jd));
    if (t->st_dtype == LH_ST_INVALID)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor '%s': unknown dtype '%s' (safetensors dtypes: %s)", path,
                          name, json_string_value(jd), all_dtype_names());
    t->dtype = DTYPES[t->st_dtype].dtype;

    json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor '%s': \"shape\" is %s (expected an array of non-negative "
                          "integers)",
                          path, name, js ? "not an array" : "missing");
    size_t nd = json_array_size(js);
    if (nd > LH_ST_MAX_DIMS)
        return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s': shape has %zu dimensions; at most "
                          "%d are supported",
                          path, name, nd, LH_ST_MAX_DIMS);
    t->ndim = (int)nd;
    int64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return lh_err_set(err, LH_E_CONFIG,
                              "%s: tensor '%s': shape[%zu] is not a non-negative integer "
                              "(expected an array of non-negative integers)",
                              path, name, i);
        t->shape[i] = (int64_t)json_integer_value(d);
        if (__builtin_mul_overflow(numel, t->shape[i], &numel)) {
            char sh[256];
            fmt_shape(sh, sizeof sh, (int)i + 1, t->shape);
            return lh_err_set(err, LH_E_CONFIG,
                              "%s: tensor '%s': element count of shape %s%s overflows int64",
                              path, name, sh, i + 1 < nd ? "..." : "");
        }
    }
    t->numel = numel;
    char sh[256];
    fmt_shape(sh, sizeof sh, t->ndim, t->shape);
    unsigned bits = DTYPES[t->st_dtype].bits;
    uint64_t total_bits;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)bits, &total_bits))
        return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s': byte size of shape %s x %s "
                          "overflows",
                          path, name, sh, DTYPES[t->st_dtype].name);
    if (total_bits % 8)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor '%s': shape %s x %s (%u bits) is not a whole number of "
                          "bytes",
                          path, name, sh, DTYPES[t->st_dtype].name, bits);
    uint64_t bytes = total_bits / 8;

    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)) ||
        json_integer_value(json_array_get(jo, 0)) < 0 ||
        json_integer_value(json_array_get(jo, 1)) < 0)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor '%s': \"data_offsets\" is %s (expected [begin, end], two "
                          "non-negative integers)",
                          path, name, jo ? "malformed" : "missing");
    t->begin = (uint64_t)json_integer_value(json_array_get(jo, 0));
    t->end = (uint64_t)json_integer_value(json_array_get(jo, 1));
    if (t->begin > t->end)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor '%s': data_offsets begin %" PRIu64 " > end %" PRIu64, path,
                          name, t->begin, t->end);
    if (t->end > f->data_size)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor '%s': data_offsets end %" PRIu64
                          " lies beyond the data buffer (%" PRIu64 " bytes); file truncated?",
                          path, name, t->end, f->data_size);
    if (t->end - t->begin != bytes)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor '%s': shape %s x %s needs %" PRIu64
                          " bytes but data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64,
                          path, name, sh, DTYPES[t->st_dtype].name, bytes, t->begin, t->end,
                          t->end - t->begin);
    if (bytes) {
        t->data = f->data + t->begin;
        unsigned esize = bits >= 8 ? bits / 8 : 1;
        t->aligned = (uintptr_t)t->data % esize == 0;
    } else {
        t->data = NULL;
        t->aligned = true;
    }
    return LH_OK;
}

static lh_status parse_metadata(lh_st_file *f, json_t *v, lh_err *err)
{
    if (json_is_null(v))
        return LH_OK;
    if (!json_is_object(v))
        return lh_err_set(err, LH_E_CONFIG, "%s: \"__metadata__\" is not an object", f->path);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x))
            return lh_err_set(err, LH_E_CONFIG,
                              "%s: \"__metadata__\" key '%s' is not a string (the format "
                              "allows string values only)",
                              f->path, k);
    }
    f->metadata = v;
    return LH_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const lh_st_tensor *)a)->name, ((const lh_st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const lh_st_tensor *x = *(const lh_st_tensor *const *)a, *y = *(const lh_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Sorts by begin and checks that no non-empty tensor starts before the furthest end seen. */
static lh_status check_overlaps(const lh_st_file *f, lh_err *err)
{
    if (f->n < 2)
        return LH_OK;
    const lh_st_tensor **by = malloc(f->n * sizeof *by);
    if (!by)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n; i++)
        by[i] = &f->tensors[i];
    qsort(by, f->n, sizeof *by, cmp_offset);
    lh_status st = LH_OK;
    const lh_st_tensor *reach = NULL; /* the non-empty tensor reaching furthest so far */
    for (size_t i = 0; i < f->n; i++) {
        const lh_st_tensor *t = by[i];
        if (t->begin == t->end)
            continue;
        if (reach && t->begin < reach->end) {
            st = lh_err_set(err, LH_E_CONFIG,
                            "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                            ", %" PRIu64 ") overlap in the data buffer",
                            f->path, reach->name, reach->begin, reach->end, t->name, t->begin,
                            t->end);
            break;
        }
        if (!reach || t->end > reach->end)
            reach = t;
    }
    free(by);
    return st;
}

/* ---- open / close ---------------------------------------------------------------------- */

static lh_status parse_header(lh_st_file *f, lh_err *err)
{
    const char *path = f->path;
    if (f->map_size < 8)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: file is %zu bytes, shorter than the 8-byte header length; not a "
                          "safetensors file",
                          path, f->map_size);
    uint64_t hlen = le64(f->map);
    if (hlen > LH_ST_MAX_HEADER)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: header length %" PRIu64 " is absurd (limit %" PRIu64
                          " bytes); not a safetensors file",
                          path, hlen, LH_ST_MAX_HEADER);
    if (hlen > f->map_size - 8)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: header length %" PRIu64 " is larger than the file (%zu bytes "
                          "after the 8-byte length); truncated or not a safetensors file",
                          path, hlen, f->map_size - 8);
    f->data = f->map + 8 + hlen;
    f->data_size = (uint64_t)(f->map_size - 8 - hlen);

    json_error_t je;
    f->header = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!f->header)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: header is not valid JSON: %s (header line %d, column %d)", path,
                          je.text, je.line, je.column);
    if (!json_is_object(f->header))
        return lh_err_set(err, LH_E_CONFIG, "%s: header is not a JSON object", path);

    size_t n = json_object_size(f->header);
    if (json_object_get(f->header, "__metadata__"))
        n--;
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    const char *key;
    json_t *v;
    json_object_foreach(f->header, key, v)
    {
        lh_status st;
        if (strcmp(key, "__metadata__") == 0)
            st = parse_metadata(f, v, err);
        else
            st = parse_entry(f, key, v, &f->tensors[f->n++], err);
        if (st != LH_OK)
            return st;
    }
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_name);
    return check_overlaps(f, err);
}

lh_status lh_st_open(const char *path, lh_st_file **out, lh_err *err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_st_open: NULL argument");
    /* O_NONBLOCK: opening a FIFO must not hang (it is refused below); no effect on files */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return lh_err_set(err, LH_E_IO, "%s: cannot open safetensors file: %s", path,
                          strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: cannot stat safetensors file: %s", path,
                          strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: is a directory, not a safetensors file", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: not a regular file; not a safetensors file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return lh_err_set(err, LH_E_CONFIG, "%s: empty file; not a safetensors file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: too large to map", path);
    }
    lh_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = lh_strdup(path))) {
        free(f);
        close(fd);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    }
    f->map_size = (size_t)sb.st_size;
    void *map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        lh_st_close(f);
        return lh_err_set(err, LH_E_IO, "%s: cannot map safetensors file: %s", path,
                          strerror(map_errno));
    }
    f->map = map;
    lh_status st = parse_header(f, err);
    if (st != LH_OK) {
        lh_st_close(f);
        return st;
    }
    *out = f;
    return LH_OK;
}

void lh_st_close(lh_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap((void *)f->map, f->map_size);
    json_decref(f->header);
    free(f->tensors);
    free(f->path);
    free(f);
}

/* ---- queries ----------------------------------------------------------------------------- */

const char *lh_st_path(const lh_st_file *f)
{
    return f ? f->path : NULL;
}

size_t lh_st_count(const lh_st_file *f)
{
    return f ? f->n : 0;
}

const lh_st_tensor *lh_st_at(const lh_st_file *f, size_t i)
{
    return f && i < f->n ? &f->tensors[i] : NULL;
}

const lh_st_tensor *lh_st_find(const lh_st_file *f, const char *name)
{
    if (!f || !name || !f->n)
        return NULL;
    lh_st_tensor key;
    memset(&key, 0, sizeof key);
    key.name = name;
    return bsearch(&key, f->tensors, f->n, sizeof *f->tensors, cmp_name);
}

const char *lh_st_metadata(const lh_st_file *f, const char *key)
{
    if (!f || !key || !f->metadata)
        return NULL;
    return json_string_value(json_object_get(f->metadata, key));
}

const void *lh_st_map_base(const lh_st_file *f, size_t *size)
{
    if (size)
        *size = f ? f->map_size : 0;
    return f ? f->map : NULL;
}

bool lh_st_contains(const lh_st_file *f, const void *p, size_t n)
{
    if (!f || !p)
        return false;
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)f->map;
    return a >= base && a - base <= f->map_size && n <= f->map_size - (a - base);
}

lh_status lh_st_tensor_view(const lh_st_tensor *t, lh_tensor *out, lh_err *err)
{
    if (!t || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_st_tensor_view: NULL argument");
    const char *path = t->file ? lh_st_path(t->file) : "(no file)";
    if (t->dtype == LH_DTYPE_INVALID)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "%s: unsupported dtype %s for tensor %s; supported: F32, F16, BF16",
                          path, lh_st_dtype_name(t->st_dtype), t->name);
    if (t->ndim > LH_MAX_DIMS)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "%s: tensor %s has %d dimensions; tensors have at most %d", path,
                          t->name, t->ndim, LH_MAX_DIMS);
    if (!t->aligned)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "%s: tensor %s: data at offset %" PRIu64
                          " is not aligned for %s; copy it instead of viewing it",
                          path, t->name, t->begin, lh_st_dtype_name(t->st_dtype));
    *out = lh_tensor_cpu(t->dtype, (void *)(uintptr_t)t->data, t->ndim, t->shape);
    return LH_OK;
}
