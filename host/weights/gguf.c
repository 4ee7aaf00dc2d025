/* A read-only GGUF file over mmap; see gguf.h for the format and the checks. */
#include "gguf.h"

#include "../core/err.h"
#include "../core/strutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 24u
/* The fewest bytes a metadata kv can take: key length + a 1-byte key + type + a 1-byte value. */
#define MIN_KV_BYTES 14u
/* ... and a tensor info: name length + a 1-byte name + n_dims (0) + type + offset. */
#define MIN_TENSOR_BYTES 25u

struct lh_gguf_file {
    char *path;
    const unsigned char *map;
    size_t size;
    uint32_t version, alignment;
    uint64_t data_off, data_size;
    lh_gguf_kv *kvs;               /* file order */
    size_t n_kv;
    const lh_gguf_kv **kv_sorted;  /* by key */
    lh_gguf_tensor *tensors;       /* file order */
    size_t n_t;
    const lh_gguf_tensor **t_sorted; /* by name */
};

/* ---- ggml types ------------------------------------------------------------------------- */

static const struct {
    const char *name;
    uint32_t blck, bytes; /* 0, 0: no size (removed from ggml) */
} GGML_TYPES[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},     [4] = {"Q4_2", 0, 0},       [5] = {"Q4_3", 0, 0},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},     [8] = {"Q8_0", 32, 34},
    [9] = {"Q8_1", 32, 40},     [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},  [14] = {"Q6_K", 256, 210},
    [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50}, [20] = {"IQ4_NL", 32, 18},
    [21] = {"IQ3_S", 256, 110}, [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},        [25] = {"I16", 1, 2},       [26] = {"I32", 1, 4},
    [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},      [31] = {"Q4_0_4_4", 0, 0},  [32] = {"Q4_0_4_8", 0, 0},
    [33] = {"Q4_0_8_8", 0, 0},  [34] = {"TQ1_0", 256, 54},  [35] = {"TQ2_0", 256, 66},
    [36] = {"IQ4_NL_4_4", 0, 0}, [37] = {"IQ4_NL_4_8", 0, 0}, [38] = {"IQ4_NL_8_8", 0, 0},
    [39] = {"MXFP4", 32, 17},   [40] = {"NVFP4", 64, 36},   [41] = {"Q1_0", 128, 18},
    [42] = {"Q2_0", 64, 18},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

const char *lh_ggml_type_name(uint32_t type)
{
    return type < N_GGML_TYPES ? GGML_TYPES[type].name : NULL;
}

bool lh_ggml_type_size(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes)
{
    bool ok = type < N_GGML_TYPES && GGML_TYPES[type].blck;
    if (block_elems)
        *block_elems = ok ? GGML_TYPES[type].blck : 0;
    if (block_bytes)
        *block_bytes = ok ? GGML_TYPES[type].bytes : 0;
    return ok;
}

/* ---- metadata value types --------------------------------------------------------------- */

static const char *const TYPE_NAMES[LH_GGUF_TYPE_COUNT_] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
    "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};
/* Bytes of a fixed-size value; 0 for STRING and ARRAY. */
static const uint8_t TYPE_SIZE[LH_GGUF_TYPE_COUNT_] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *lh_gguf_type_name(uint32_t t)
{
    return t < LH_GGUF_TYPE_COUNT_ ? TYPE_NAMES[t] : "?";
}

/* The fewest bytes one value of type t takes (t known). */
static uint64_t min_size(uint32_t t)
{
    return t == LH_GGUF_STRING ? 8 : t == LH_GGUF_ARRAY ? 12 : TYPE_SIZE[t];
}

/* ---- little-endian reads (callers have bounds-checked) -------------------------------------- */

static uint64_t rd(const unsigned char *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = (v << 8) | p[i];
    return v;
}
static uint32_t rd32(const unsigned char *p) { return (uint32_t)rd(p, 4); }
static uint64_t rd64(const unsigned char *p) { return rd(p, 8); }

/* ---- the parser ------------------------------------------------------------------------ */

typedef struct parser {
    lh_gguf_file *f;
    uint64_t pos;
    lh_err *err;
    /* what is being read, for messages: "metadata kv #3 'general.name'", "tensor #5 'x'" */
    char what[320];
} parser;

static uint64_t left(const parser *ps)
{
    return (uint64_t)ps->f->size - ps->pos;
}

/* "FILE: WHAT: ITEM at offset X runs past the end of the file (S bytes); truncated?" */
static lh_status truncated(parser *ps, const char *item, uint64_t need)
{
    return lh_err_set(ps->err, LH_E_CONFIG,
                      "%s: %s: %s at offset %" PRIu64 " needs %" PRIu64
                      " bytes, but the file ends at %zu; truncated?",
                      ps->f->path, ps->what, item, ps->pos, need, ps->f->size);
}

static void fmt_path(char *buf, size_t n, const uint64_t *path, int depth)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < depth && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "[%" PRIu64 "]", path[i]);
}

/* Reads a GGUF string header at ps->pos: its length and that the bytes are there. */
static lh_status read_str(parser *ps, const char *item, uint64_t *len)
{
    if (left(ps) < 8)
        return truncated(ps, item, 8);
    *len = rd64(ps->f->map + ps->pos);
    if (*len > left(ps) - 8) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s of %" PRIu64 " bytes", item, *len);
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: %s: %s at offset %" PRIu64
                          " is longer than the rest of the file (%" PRIu64
                          " bytes after its length; the file ends at %zu); truncated or "
                          "corrupt",
                          ps->f->path, ps->what, buf, ps->pos, left(ps) - 8, ps->f->size);
    }
    ps->pos += 8;
    return LH_OK;
}

/* Walks one value of type `type` at ps->pos, checking every byte it covers. depth: 1 for a
 * kv's value; path[0..depth-1) the element indices leading here (for messages). When `index`
 * is non-NULL and the value is an array of strings or arrays, *index receives the element
 * offsets (relative to the first element; malloc'ed). */
static lh_status walk(parser *ps, uint32_t type, int depth, uint64_t *path, uint64_t **index)
{
    char at[96];
    if (type >= LH_GGUF_TYPE_COUNT_) /* checked by callers; defensive */
        return lh_err_set(ps->err, LH_E_INTERNAL, "%s: %s: bad type", ps->f->path, ps->what);
    if (TYPE_SIZE[type]) {
        unsigned sz = TYPE_SIZE[type];
        if (left(ps) < sz) {
            fmt_path(at, sizeof at, path, depth - 1);
            char item[192];
            snprintf(item, sizeof item, "%s value%s", TYPE_NAMES[type], at);
            return truncated(ps, item, sz);
        }
        if (type == LH_GGUF_BOOL && ps->f->map[ps->pos] > 1) {
            fmt_path(at, sizeof at, path, depth - 1);
            return lh_err_set(ps->err, LH_E_CONFIG,
                              "%s: %s: BOOL value%s at offset %" PRIu64
                              " is %u; a bool must be 0 or 1",
                              ps->f->path, ps->what, at, ps->pos, ps->f->map[ps->pos]);
        }
        ps->pos += sz;
        return LH_OK;
    }
    if (type == LH_GGUF_STRING) {
        uint64_t len;
        fmt_path(at, sizeof at, path, depth - 1);
        char item[192];
        snprintf(item, sizeof item, "string%s", at);
        lh_status st = read_str(ps, item, &len);
        if (st != LH_OK)
            return st;
        ps->pos += len;
        return LH_OK;
    }
    /* ARRAY */
    if (left(ps) < 12) {
        fmt_path(at, sizeof at, path, depth - 1);
        char item[192];
        snprintf(item, sizeof item, "array header%s (element type, count)", at);
        return truncated(ps, item, 12);
    }
    uint32_t et = rd32(ps->f->map + ps->pos);
    uint64_t count = rd64(ps->f->map + ps->pos + 4);
    fmt_path(at, sizeof at, path, depth - 1);
    if (et >= LH_GGUF_TYPE_COUNT_)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: %s: array%s at offset %" PRIu64
                          " has unknown element type %" PRIu32
                          " (metadata value types are 0..12, UINT8..FLOAT64)",
                          ps->f->path, ps->what, at, ps->pos, et);
    if (et == LH_GGUF_ARRAY && depth >= LH_GGUF_MAX_NESTING)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: %s: array%s at offset %" PRIu64
                          " holds arrays nested more than %d deep",
                          ps->f->path, ps->what, at, ps->pos, LH_GGUF_MAX_NESTING);
    ps->pos += 12;
    uint64_t es = min_size(et);
    if (count > left(ps) / es)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: %s: array%s count %" PRIu64 " at offset %" PRIu64
                          " is absurd: %s elements take at least %" PRIu64
                          " bytes each, but only %" PRIu64
                          " bytes remain before the end of the file at %zu",
                          ps->f->path, ps->what, at, count, ps->pos - 8, TYPE_NAMES[et], es,
                          left(ps), ps->f->size);
    if (TYPE_SIZE[et]) {
        if (et == LH_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++) {
                uint8_t b = ps->f->map[ps->pos + i];
                if (b > 1) {
                    path[depth - 1] = i;
                    fmt_path(at, sizeof at, path, depth);
                    return lh_err_set(ps->err, LH_E_CONFIG,
                                      "%s: %s: BOOL value%s at offset %" PRIu64
                                      " is %u; a bool must be 0 or 1",
                                      ps->f->path, ps->what, at, ps->pos + i, b);
                }
            }
        ps->pos += count * es;
        return LH_OK;
    }
    uint64_t *idx = NULL;
    if (index && count) {
        idx = malloc(count * sizeof *idx); /* count <= file size / 8 */
        if (!idx)
            return lh_err_set(ps->err, LH_E_NOMEM, "%s: out of memory", ps->f->path);
    }
    uint64_t first = ps->pos;
    for (uint64_t i = 0; i < count; i++) {
        if (idx)
            idx[i] = ps->pos - first;
        path[depth - 1] = i;
        lh_status st = walk(ps, et, depth + 1, path, NULL);
        if (st != LH_OK) {
            free(idx);
            return st;
        }
    }
    if (index)
        *index = idx;
    return LH_OK;
}

/* Bytes one already validated value of type t at p (avail bytes) takes; UINT64_MAX when it
 * does not fit (cannot happen after lh_gguf_open's walk, checked anyway). */
static uint64_t skip_valid(uint32_t t, const unsigned char *p, uint64_t avail, int depth)
{
    if (t >= LH_GGUF_TYPE_COUNT_ || (t == LH_GGUF_ARRAY && depth > LH_GGUF_MAX_NESTING))
        return UINT64_MAX;
    if (TYPE_SIZE[t])
        return TYPE_SIZE[t] <= avail ? TYPE_SIZE[t] : UINT64_MAX;
    if (t == LH_GGUF_STRING) {
        if (avail < 8)
            return UINT64_MAX;
        uint64_t len = rd64(p);
        return len <= avail - 8 ? 8 + len : UINT64_MAX;
    }
    if (avail < 12)
        return UINT64_MAX;
    uint32_t et = rd32(p);
    uint64_t count = rd64(p + 4);
    if (et >= LH_GGUF_TYPE_COUNT_)
        return UINT64_MAX;
    uint64_t used = 12;
    if (TYPE_SIZE[et]) {
        if (count > (avail - used) / TYPE_SIZE[et])
            return UINT64_MAX;
        return used + count * TYPE_SIZE[et];
    }
    for (uint64_t i = 0; i < count; i++) {
        uint64_t n = skip_valid(et, p + used, avail - used, depth + 1);
        if (n == UINT64_MAX)
            return n;
        used += n;
    }
    return used;
}

/* A value view of the validated value of type t at p (avail bytes). */
static bool make_value(uint32_t t, const unsigned char *p, uint64_t avail, int depth,
                       lh_gguf_value *v)
{
    memset(v, 0, sizeof *v);
    uint64_t n = skip_valid(t, p, avail, depth);
    if (n == UINT64_MAX)
        return false;
    v->type = (lh_gguf_type)t;
    v->elem_type = (lh_gguf_type)t;
    v->count = 1;
    v->p = p;
    v->size = n;
    if (t == LH_GGUF_STRING) {
        v->count = rd64(p);
        v->p = p + 8;
        v->size = n - 8;
    } else if (t == LH_GGUF_ARRAY) {
        v->elem_type = (lh_gguf_type)rd32(p);
        v->count = rd64(p + 4);
        v->p = p + 12;
        v->size = n - 12;
    }
    return true;
}

/* Room for `need` elements of `elem` bytes in *p (capacity *cap, doubling; new slots zeroed):
 * the arrays grow as entries are read, so a corrupt count allocates no more than the file
 * really holds. */
static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return false;
    memset((char *)q + *cap * elem, 0, (nc - *cap) * elem);
    *p = q;
    *cap = nc;
    return true;
}

static lh_status parse_kvs(parser *ps, uint64_t n)
{
    lh_gguf_file *f = ps->f;
    size_t cap = 0;
    if (!grow((void **)&f->kvs, &cap, 1, sizeof *f->kvs))
        return lh_err_set(ps->err, LH_E_NOMEM, "%s: out of memory", f->path);
    for (uint64_t i = 0; i < n; i++) {
        if (!grow((void **)&f->kvs, &cap, (size_t)i + 1, sizeof *f->kvs))
            return lh_err_set(ps->err, LH_E_NOMEM, "%s: out of memory", f->path);
        lh_gguf_kv *kv = &f->kvs[i];
        snprintf(ps->what, sizeof ps->what, "metadata kv #%" PRIu64, i);
        kv->offset = ps->pos;
        uint64_t len;
        lh_status st = read_str(ps, "key", &len);
        if (st != LH_OK)
            return st;
        const char *k = (const char *)f->map + ps->pos;
        if (len == 0)
            return lh_err_set(ps->err, LH_E_CONFIG, "%s: %s: empty key at offset %" PRIu64,
                              f->path, ps->what, kv->offset);
        if (len > LH_GGUF_MAX_KEY)
            return lh_err_set(ps->err, LH_E_CONFIG,
                              "%s: %s: key of %" PRIu64 " bytes at offset %" PRIu64
                              " is longer than the %d bytes GGUF allows",
                              f->path, ps->what, len, kv->offset, LH_GGUF_MAX_KEY);
        if (memchr(k, '\0', (size_t)len))
            return lh_err_set(ps->err, LH_E_CONFIG,
                              "%s: %s: key at offset %" PRIu64 " holds a NUL byte", f->path,
                              ps->what, kv->offset);
        char *key = malloc((size_t)len + 1);
        if (!key)
            return lh_err_set(ps->err, LH_E_NOMEM, "%s: out of memory", f->path);
        memcpy(key, k, (size_t)len);
        key[len] = '\0';
        kv->key = key;
        f->n_kv = (size_t)i + 1;
        ps->pos += len;
        snprintf(ps->what, sizeof ps->what, "metadata kv #%" PRIu64 " '%.200s'", i, key);
        if (left(ps) < 4)
            return truncated(ps, "value type", 4);
        uint32_t type = rd32(f->map + ps->pos);
        if (type >= LH_GGUF_TYPE_COUNT_)
            return lh_err_set(ps->err, LH_E_CONFIG,
                              "%s: %s: unknown metadata value type %" PRIu32
                              " at offset %" PRIu64
                              " (metadata value types are 0..12, UINT8..FLOAT64)",
                              f->path, ps->what, type, ps->pos);
        ps->pos += 4;
        uint64_t start = ps->pos, path[LH_GGUF_MAX_NESTING + 1];
        uint64_t *index = NULL;
        st = walk(ps, type, 1, path, &index);
        if (st != LH_OK)
            return st;
        if (!make_value(type, f->map + start, ps->pos - start, 1, &kv->value)) {
            free(index);
            return lh_err_set(ps->err, LH_E_INTERNAL, "%s: %s: value re-read failed", f->path,
                              ps->what);
        }
        kv->value.index = index;
    }
    return LH_OK;
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp((*(const lh_gguf_kv *const *)a)->key, (*(const lh_gguf_kv *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const lh_gguf_tensor *const *)a)->name,
                  (*(const lh_gguf_tensor *const *)b)->name);
}

static int cmp_tensor_off(const void *a, const void *b)
{
    const lh_gguf_tensor *x = *(const lh_gguf_tensor *const *)a;
    const lh_gguf_tensor *y = *(const lh_gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static void fmt_dims(char *buf, size_t n, uint32_t nd, const int64_t *d)
{
    size_t off = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < nd && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRId64, i ? ", " : "", d[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
}

static lh_status parse_alignment(parser *ps)
{
    lh_gguf_file *f = ps->f;
    f->alignment = LH_GGUF_DEFAULT_ALIGNMENT;
    const lh_gguf_kv *kv = lh_gguf_find(f, "general.alignment");
    if (!kv)
        return LH_OK;
    uint64_t a;
    lh_status st = lh_gguf_value_uint(&kv->value, UINT32_MAX, &a, ps->err);
    if (st != LH_OK)
        return ps->err ? lh_err_prefix(ps->err,
                                       "%s: general.alignment (expected a UINT32 power of two)",
                                       f->path)
                       : st;
    if (a == 0 || (a & (a - 1)))
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: general.alignment is %" PRIu64
                          "; it must be a non-zero power of two",
                          f->path, a);
    f->alignment = (uint32_t)a;
    return LH_OK;
}

static lh_status parse_tensor_info(parser *ps, uint64_t i, lh_gguf_tensor *t)
{
    lh_gguf_file *f = ps->f;
    snprintf(ps->what, sizeof ps->what, "tensor #%" PRIu64, i);
    t->index = (size_t)i;
    uint64_t at = ps->pos, len;
    lh_status st = read_str(ps, "name", &len);
    if (st != LH_OK)
        return st;
    const char *nm = (const char *)f->map + ps->pos;
    if (len == 0)
        return lh_err_set(ps->err, LH_E_CONFIG, "%s: %s: empty name at offset %" PRIu64,
                          f->path, ps->what, at);
    if (len > LH_GGUF_MAX_NAME)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: %s: name '%.*s...' at offset %" PRIu64 " is %" PRIu64
                          " bytes; GGUF allows at most %d",
                          f->path, ps->what, 48, nm, at, len, LH_GGUF_MAX_NAME);
    if (memchr(nm, '\0', (size_t)len))
        return lh_err_set(ps->err, LH_E_CONFIG, "%s: %s: name at offset %" PRIu64
                          " holds a NUL byte",
                          f->path, ps->what, at);
    char *name = malloc((size_t)len + 1);
    if (!name)
        return lh_err_set(ps->err, LH_E_NOMEM, "%s: out of memory", f->path);
    memcpy(name, nm, (size_t)len);
    name[len] = '\0';
    t->name = name;
    f->n_t = (size_t)i + 1;
    ps->pos += len;
    snprintf(ps->what, sizeof ps->what, "tensor #%" PRIu64 " '%s'", i, name);

    if (left(ps) < 4)
        return truncated(ps, "n_dims", 4);
    uint32_t nd = rd32(f->map + ps->pos);
    if (nd > LH_GGUF_MAX_DIMS)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: %s: n_dims is %" PRIu32 " (offset %" PRIu64
                          "); GGUF tensors have at most %d",
                          f->path, ps->what, nd, ps->pos, LH_GGUF_MAX_DIMS);
    ps->pos += 4;
    t->n_dims = nd;
    if (left(ps) < (uint64_t)8 * nd)
        return truncated(ps, "dims", (uint64_t)8 * nd);
    int64_t ne = 1;
    for (int j = 0; j < LH_GGUF_MAX_DIMS; j++)
        t->dims[j] = 1;
    for (uint32_t j = 0; j < nd; j++) {
        uint64_t d = rd64(f->map + ps->pos + (uint64_t)8 * j);
        if (d == 0)
            return lh_err_set(ps->err, LH_E_CONFIG,
                              "%s: %s: dims[%" PRIu32 "] is 0 (offset %" PRIu64
                              "); every dimension must be at least 1",
                              f->path, ps->what, j, ps->pos + (uint64_t)8 * j);
        if (d > (uint64_t)INT64_MAX)
            return lh_err_set(ps->err, LH_E_CONFIG,
                              "%s: %s: dims[%" PRIu32 "] is %" PRIu64 ", above INT64_MAX",
                              f->path, ps->what, j, d);
        t->dims[j] = (int64_t)d;
        if (__builtin_mul_overflow(ne, (int64_t)d, &ne)) {
            char dm[160];
            fmt_dims(dm, sizeof dm, j + 1, t->dims);
            return lh_err_set(ps->err, LH_E_CONFIG,
                              "%s: %s: element count of dims %s%s overflows int64", f->path,
                              ps->what, dm, j + 1 < nd ? "..." : "");
        }
    }
    ps->pos += (uint64_t)8 * nd;
    t->n_elements = ne;
    char dm[160];
    fmt_dims(dm, sizeof dm, nd, t->dims);

    if (left(ps) < 4)
        return truncated(ps, "ggml type", 4);
    t->type = rd32(f->map + ps->pos);
    uint32_t blck, bytes;
    if (!lh_ggml_type_size(t->type, &blck, &bytes)) {
        const char *tn = lh_ggml_type_name(t->type);
        if (tn)
            return lh_err_set(ps->err, LH_E_UNSUPPORTED,
                              "%s: %s: unsupported ggml type %" PRIu32
                              " (%s, removed from ggml; re-quantize the model)",
                              f->path, ps->what, t->type, tn);
        return lh_err_set(ps->err, LH_E_UNSUPPORTED,
                          "%s: %s: unsupported ggml type %" PRIu32
                          " (unknown: this reader knows ids 0..%zu)",
                          f->path, ps->what, t->type, N_GGML_TYPES - 1);
    }
    t->type_name = GGML_TYPES[t->type].name;
    ps->pos += 4;
    if (t->dims[0] % blck)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: %s: %s %s: ne[0] = %" PRId64
                          " is not a multiple of the type's block size %" PRIu32,
                          f->path, ps->what, t->type_name, dm, t->dims[0], blck);
    if (__builtin_mul_overflow((uint64_t)ne / blck, (uint64_t)bytes, &t->size))
        return lh_err_set(ps->err, LH_E_CONFIG, "%s: %s: byte size of %s %s overflows",
                          f->path, ps->what, t->type_name, dm);

    if (left(ps) < 8)
        return truncated(ps, "data offset", 8);
    t->offset = rd64(f->map + ps->pos);
    ps->pos += 8;
    return LH_OK;
}

static lh_status place_tensor(parser *ps, lh_gguf_tensor *t)
{
    lh_gguf_file *f = ps->f;
    char dm[160];
    fmt_dims(dm, sizeof dm, t->n_dims, t->dims);
    if (t->offset % f->alignment)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: tensor #%zu '%s': data offset %" PRIu64
                          " is not a multiple of the alignment %" PRIu32 "%s",
                          f->path, t->index, t->name, t->offset, f->alignment,
                          lh_gguf_find(f, "general.alignment") ? " (general.alignment)"
                                                               : " (the default)");
    uint64_t end;
    if (t->offset > f->data_size || __builtin_add_overflow(t->offset, t->size, &end) ||
        end > f->data_size)
        return lh_err_set(ps->err, LH_E_CONFIG,
                          "%s: tensor #%zu '%s' (%s %s, %" PRIu64 " bytes) at data offset %" PRIu64
                          " lies outside the data section (%" PRIu64
                          " bytes from file offset %" PRIu64 " to the end at %zu); truncated?",
                          f->path, t->index, t->name, t->type_name, dm, t->size, t->offset,
                          f->data_size, f->data_off, f->size);
    t->file_offset = f->data_off + t->offset;
    t->data = f->map + t->file_offset;
    return LH_OK;
}

static lh_status parse(lh_gguf_file *f, lh_err *err)
{
    parser ps = {.f = f, .pos = 0, .err = err};
    snprintf(ps.what, sizeof ps.what, "header");
    const unsigned char *m = f->map;
    if (f->size >= 4 && memcmp(m, "GGUF", 4) != 0) {
        char shown[8];
        for (int i = 0; i < 4; i++)
            shown[i] = (m[i] >= 0x20 && m[i] < 0x7f) ? (char)m[i] : '.';
        shown[4] = '\0';
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: not a GGUF file: bad magic %02x %02x %02x %02x ('%s'); expected "
                          "47 47 55 46 ('GGUF')",
                          f->path, m[0], m[1], m[2], m[3], shown);
    }
    if (f->size < HEADER_BYTES)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: truncated header: the file is %zu bytes, shorter than the "
                          "%u-byte GGUF header",
                          f->path, f->size, HEADER_BYTES);
    uint32_t ver = rd32(m + 4);
    if (ver == 1)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "%s: GGUF version 1 is not supported (it used 32-bit counts and "
                          "lengths; supported: 2, 3); re-convert the model",
                          f->path);
    if (ver != 2 && ver != 3) {
        uint32_t sw = __builtin_bswap32(ver);
        if (sw >= 1 && sw <= 3)
            return lh_err_set(err, LH_E_UNSUPPORTED,
                              "%s: GGUF version field reads %" PRIu32
                              ", byte-swapped %" PRIu32
                              ": a big-endian GGUF file, which is not supported",
                              f->path, ver, sw);
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "%s: unsupported GGUF version %" PRIu32 " (supported: 2, 3)",
                          f->path, ver);
    }
    f->version = ver;
    uint64_t n_t = rd64(m + 8), n_kv = rd64(m + 16);
    uint64_t room = f->size - HEADER_BYTES;
    if (n_kv > room / MIN_KV_BYTES)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: metadata kv count %" PRIu64 " is absurd: the file (%zu bytes) "
                          "could hold at most %" PRIu64 " (%u bytes each at least)",
                          f->path, n_kv, f->size, room / MIN_KV_BYTES, MIN_KV_BYTES);
    if (n_t > room / MIN_TENSOR_BYTES)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor count %" PRIu64 " is absurd: the file (%zu bytes) could "
                          "hold at most %" PRIu64 " tensor infos (%u bytes each at least)",
                          f->path, n_t, f->size, room / MIN_TENSOR_BYTES, MIN_TENSOR_BYTES);
    ps.pos = HEADER_BYTES;

    lh_status st = parse_kvs(&ps, n_kv);
    if (st != LH_OK)
        return st;
    f->kv_sorted = malloc((f->n_kv ? f->n_kv : 1) * sizeof *f->kv_sorted);
    if (!f->kv_sorted)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n_kv; i++)
        f->kv_sorted[i] = &f->kvs[i];
    qsort(f->kv_sorted, f->n_kv, sizeof *f->kv_sorted, cmp_kv);
    for (size_t i = 1; i < f->n_kv; i++)
        if (strcmp(f->kv_sorted[i - 1]->key, f->kv_sorted[i]->key) == 0) {
            const lh_gguf_kv *a = f->kv_sorted[i - 1], *b = f->kv_sorted[i];
            if (a > b) {
                const lh_gguf_kv *x = a;
                a = b;
                b = x;
            }
            return lh_err_set(err, LH_E_CONFIG,
                              "%s: duplicate metadata key '%s' (kv #%td at offset %" PRIu64
                              " and kv #%td at offset %" PRIu64 ")",
                              f->path, a->key, a - f->kvs, a->offset, b - f->kvs, b->offset);
        }
    st = parse_alignment(&ps);
    if (st != LH_OK)
        return st;

    size_t cap = 0;
    if (!grow((void **)&f->tensors, &cap, 1, sizeof *f->tensors))
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", f->path);
    if (n_t > left(&ps) / MIN_TENSOR_BYTES)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: tensor count %" PRIu64 " is absurd: the %" PRIu64
                          " bytes after the metadata (from offset %" PRIu64
                          " to the end of the file at %zu) could hold at most %" PRIu64
                          " tensor infos",
                          f->path, n_t, left(&ps), ps.pos, f->size,
                          left(&ps) / MIN_TENSOR_BYTES);
    for (uint64_t i = 0; i < n_t; i++) {
        if (!grow((void **)&f->tensors, &cap, (size_t)i + 1, sizeof *f->tensors))
            return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", f->path);
        st = parse_tensor_info(&ps, i, &f->tensors[i]);
        if (st != LH_OK)
            return st;
    }
    f->t_sorted = malloc((f->n_t ? f->n_t : 1) * sizeof *f->t_sorted);
    if (!f->t_sorted)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n_t; i++)
        f->t_sorted[i] = &f->tensors[i];
    qsort(f->t_sorted, f->n_t, sizeof *f->t_sorted, cmp_tensor_name);
    for (size_t i = 1; i < f->n_t; i++)
        if (strcmp(f->t_sorted[i - 1]->name, f->t_sorted[i]->name) == 0) {
            size_t a = f->t_sorted[i - 1]->index, b = f->t_sorted[i]->index;
            return lh_err_set(err, LH_E_CONFIG, "%s: duplicate tensor name '%s' (tensors #%zu "
                              "and #%zu)",
                              f->path, f->t_sorted[i]->name, a < b ? a : b, a < b ? b : a);
        }

    /* the data section: the end of the tensor infos rounded up to the alignment */
    uint64_t info_end = ps.pos, a = f->alignment;
    f->data_off = (info_end + a - 1) / a * a;
    f->data_size = f->data_off <= f->size ? f->size - f->data_off : 0;
    for (size_t i = 0; i < f->n_t; i++) {
        st = place_tensor(&ps, &f->tensors[i]);
        if (st != LH_OK)
            return st;
    }
    if (f->n_t > 1) {
        const lh_gguf_tensor **by = malloc(f->n_t * sizeof *by);
        if (!by)
            return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", f->path);
        for (size_t i = 0; i < f->n_t; i++)
            by[i] = &f->tensors[i];
        qsort(by, f->n_t, sizeof *by, cmp_tensor_off);
        const lh_gguf_tensor *reach = by[0];
        for (size_t i = 1; i < f->n_t && st == LH_OK; i++) {
            const lh_gguf_tensor *t = by[i];
            if (t->offset < reach->offset + reach->size)
                st = lh_err_set(err, LH_E_CONFIG,
                                "%s: tensors #%zu '%s' [%" PRIu64 ", %" PRIu64
                                ") and #%zu '%s' [%" PRIu64 ", %" PRIu64
                                ") overlap in the data section",
                                f->path, reach->index, reach->name, reach->offset,
                                reach->offset + reach->size, t->index, t->name, t->offset,
                                t->offset + t->size);
            if (t->offset + t->size > reach->offset + reach->size)
                reach = t;
        }
        free(by);
    }
    return st;
}

/* ---- open / close ---------------------------------------------------------------------- */

lh_status lh_gguf_open(const char *path, lh_gguf_file **out, lh_err *err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_gguf_open: NULL argument");
    /* O_NONBLOCK: opening a FIFO must not hang (it is refused below); no effect on files */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return lh_err_set(err, LH_E_IO, "%s: cannot open GGUF file: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: cannot stat GGUF file: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: is a directory, not a GGUF file", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: not a regular file; not a GGUF file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return lh_err_set(err, LH_E_CONFIG, "%s: empty file; not a GGUF file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return lh_err_set(err, LH_E_IO, "%s: too large to map", path);
    }
    lh_gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = lh_strdup(path))) {
        free(f);
        close(fd);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    }
    f->size = (size_t)sb.st_size;
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        lh_gguf_close(f);
        return lh_err_set(err, LH_E_IO, "%s: cannot map GGUF file: %s", path,
                          strerror(map_errno));
    }
    f->map = map;
    lh_status st = parse(f, err);
    if (st != LH_OK) {
        lh_gguf_close(f);
        return st;
    }
    *out = f;
    return LH_OK;
}

void lh_gguf_close(lh_gguf_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap((void *)(uintptr_t)f->map, f->size);
    for (size_t i = 0; i < f->n_kv; i++) {
        free((void *)(uintptr_t)f->kvs[i].key);
        free((void *)(uintptr_t)f->kvs[i].value.index);
    }
    for (size_t i = 0; i < f->n_t; i++)
        free((void *)(uintptr_t)f->tensors[i].name);
    free(f->kvs);
    free(f->kv_sorted);
    free(f->tensors);
    free(f->t_sorted);
    free(f->path);
    free(f);
}

/* ---- queries ----------------------------------------------------------------------------- */

const char *lh_gguf_path(const lh_gguf_file *f) { return f ? f->path : NULL; }
uint32_t lh_gguf_version(const lh_gguf_file *f) { return f ? f->version : 0; }
uint32_t lh_gguf_alignment(const lh_gguf_file *f) { return f ? f->alignment : 0; }
uint64_t lh_gguf_data_offset(const lh_gguf_file *f) { return f ? f->data_off : 0; }
uint64_t lh_gguf_data_size(const lh_gguf_file *f) { return f ? f->data_size : 0; }

const void *lh_gguf_map_base(const lh_gguf_file *f, size_t *size)
{
    if (size)
        *size = f ? f->size : 0;
    return f ? f->map : NULL;
}

bool lh_gguf_contains(const lh_gguf_file *f, const void *p, size_t n)
{
    if (!f || !p)
        return false;
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)f->map;
    return a >= base && a - base <= f->size && n <= f->size - (a - base);
}

size_t lh_gguf_kv_count(const lh_gguf_file *f) { return f ? f->n_kv : 0; }

const lh_gguf_kv *lh_gguf_kv_at(const lh_gguf_file *f, size_t i)
{
    return f && i < f->n_kv ? &f->kvs[i] : NULL;
}

const lh_gguf_kv *lh_gguf_find(const lh_gguf_file *f, const char *key)
{
    if (!f || !key || !f->kv_sorted)
        return NULL;
    size_t lo = 0, hi = f->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->kv_sorted[mid]->key, key);
        if (c == 0)
            return f->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t lh_gguf_tensor_count(const lh_gguf_file *f) { return f ? f->n_t : 0; }

const lh_gguf_tensor *lh_gguf_tensor_at(const lh_gguf_file *f, size_t i)
{
    return f && i < f->n_t ? &f->tensors[i] : NULL;
}

const lh_gguf_tensor *lh_gguf_find_tensor(const lh_gguf_file *f, const char *name)
{
    if (!f || !name || !f->t_sorted)
        return NULL;
    size_t lo = 0, hi = f->n_t;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t_sorted[mid]->name, name);
        if (c == 0)
            return f->t_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- typed values -------------------------------------------------------------------------- */

static bool is_int_type(lh_gguf_type t)
{
    return t <= LH_GGUF_INT32 || t == LH_GGUF_UINT64 || t == LH_GGUF_INT64;
}
static bool is_signed_type(lh_gguf_type t)
{
    return t == LH_GGUF_INT8 || t == LH_GGUF_INT16 || t == LH_GGUF_INT32 || t == LH_GGUF_INT64;
}

/* Reads an integer value as (negative?, magnitude-or-value). */
static lh_status read_int(const lh_gguf_value *v, bool *neg, uint64_t *u, int64_t *s,
                          lh_err *err)
{
    if (!v)
        return lh_err_set(err, LH_E_USAGE, "NULL value");
    if (v->type >= LH_GGUF_TYPE_COUNT_ || !is_int_type(v->type) || v->size < TYPE_SIZE[v->type])
        return lh_err_set(err, LH_E_CONFIG, "value has type %s, not an integer",
                          lh_gguf_type_name(v->type));
    unsigned n = TYPE_SIZE[v->type];
    uint64_t raw = rd(v->p, n);
    if (is_signed_type(v->type)) {
        unsigned shift = 64 - 8 * n;
        int64_t x = (int64_t)(raw << shift) >> shift; /* sign-extend (arithmetic shift) */
        *s = x;
        *neg = x < 0;
        *u = x < 0 ? 0 : (uint64_t)x;
    } else {
        *u = raw;
        *neg = false;
        *s = raw > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)raw;
    }
    return LH_OK;
}

lh_status lh_gguf_value_int(const lh_gguf_value *v, int64_t min, int64_t max, int64_t *out,
                            lh_err *err)
{
    bool neg;
    uint64_t u;
    int64_t s;
    lh_status st = read_int(v, &neg, &u, &s, err);
    if (st != LH_OK)
        return st;
    if (!neg && u > (uint64_t)INT64_MAX)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s value %" PRIu64 " is outside [%" PRId64 ", %" PRId64 "]",
                          lh_gguf_type_name(v->type), u, min, max);
    if (s < min || s > max)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s value %" PRId64 " is outside [%" PRId64 ", %" PRId64 "]",
                          lh_gguf_type_name(v->type), s, min, max);
    if (out)
        *out = s;
    return LH_OK;
}

lh_status lh_gguf_value_uint(const lh_gguf_value *v, uint64_t max, uint64_t *out, lh_err *err)
{
    bool neg;
    uint64_t u;
    int64_t s;
    lh_status st = read_int(v, &neg, &u, &s, err);
    if (st != LH_OK)
        return st;
    if (neg)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s value %" PRId64 " is negative (expected [0, %" PRIu64 "])",
                          lh_gguf_type_name(v->type), s, max);
    if (u > max)
        return lh_err_set(err, LH_E_CONFIG, "%s value %" PRIu64 " is outside [0, %" PRIu64 "]",
                          lh_gguf_type_name(v->type), u, max);
    if (out)
        *out = u;
    return LH_OK;
}

lh_status lh_gguf_value_float(const lh_gguf_value *v, double *out, lh_err *err)
{
    if (!v)
        return lh_err_set(err, LH_E_USAGE, "NULL value");
    if (v->type == LH_GGUF_FLOAT32 && v->size >= 4) {
        uint32_t b = rd32(v->p);
        float x;
        memcpy(&x, &b, 4);
        if (out)
            *out = x;
        return LH_OK;
    }
    if (v->type == LH_GGUF_FLOAT64 && v->size >= 8) {
        uint64_t b = rd64(v->p);
        double x;
        memcpy(&x, &b, 8);
        if (out)
            *out = x;
        return LH_OK;
    }
    return lh_err_set(err, LH_E_CONFIG, "value has type %s, not FLOAT32 or FLOAT64",
                      lh_gguf_type_name(v->type));
}

lh_status lh_gguf_value_bool(const lh_gguf_value *v, bool *out, lh_err *err)
{
    if (!v)
        return lh_err_set(err, LH_E_USAGE, "NULL value");
    if (v->type != LH_GGUF_BOOL || v->size < 1)
        return lh_err_set(err, LH_E_CONFIG, "value has type %s, not BOOL",
                          lh_gguf_type_name(v->type));
    if (out)
        *out = v->p[0] != 0;
    return LH_OK;
}

lh_status lh_gguf_value_string(const lh_gguf_value *v, const char **s, size_t *len, lh_err *err)
{
    if (!v)
        return lh_err_set(err, LH_E_USAGE, "NULL value");
    if (v->type != LH_GGUF_STRING)
        return lh_err_set(err, LH_E_CONFIG, "value has type %s, not STRING",
                          lh_gguf_type_name(v->type));
    if (s)
        *s = (const char *)v->p;
    if (len)
        *len = (size_t)v->count;
    return LH_OK;
}

lh_status lh_gguf_value_at(const lh_gguf_value *arr, uint64_t i, lh_gguf_value *out, lh_err *err)
{
    if (!arr || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_gguf_value_at: NULL argument");
    if (arr->type != LH_GGUF_ARRAY)
        return lh_err_set(err, LH_E_CONFIG, "value has type %s, not ARRAY",
                          lh_gguf_type_name(arr->type));
    if (i >= arr->count)
        return lh_err_set(err, LH_E_CONFIG,
                          "index %" PRIu64 " is past the end of the %s array of %" PRIu64,
                          i, lh_gguf_type_name(arr->elem_type), arr->count);
    uint32_t et = arr->elem_type;
    uint64_t off;
    if (et < LH_GGUF_TYPE_COUNT_ && TYPE_SIZE[et]) {
        off = i * TYPE_SIZE[et];
    } else if (arr->index) {
        off = arr->index[i];
    } else {
        off = 0;
        for (uint64_t k = 0; k < i; k++) {
            uint64_t n = off <= arr->size ? skip_valid(et, arr->p + off, arr->size - off, 2)
                                          : UINT64_MAX;
            if (n == UINT64_MAX)
                return lh_err_set(err, LH_E_INTERNAL, "array element %" PRIu64
                                  " does not fit", k);
            off += n;
        }
    }
    if (off > arr->size || !make_value(et, arr->p + off, arr->size - off, 2, out))
        return lh_err_set(err, LH_E_INTERNAL, "array element %" PRIu64 " does not fit", i);
    return LH_OK;
}

/* ---- getters by key -------------------------------------------------------------------------- */

static lh_status need_kv(const lh_gguf_file *f, const char *key, const lh_gguf_kv **kv,
                         lh_err *err)
{
    if (!f || !key)
        return lh_err_set(err, LH_E_USAGE, "lh_gguf_get: NULL argument");
    *kv = lh_gguf_find(f, key);
    if (!*kv)
        return lh_err_set(err, LH_E_CONFIG, "%s: metadata key '%s' not found", f->path, key);
    return LH_OK;
}

/* st, with "FILE: metadata key 'K'" (and "[i]" when i != UINT64_MAX) before err's message. */
static lh_status key_prefix(lh_status st, const lh_gguf_file *f, const char *key, uint64_t i,
                            lh_err *err)
{
    if (st == LH_OK || !err)
        return st;
    if (i == UINT64_MAX)
        return lh_err_prefix(err, "%s: metadata key '%s'", f->path, key);
    return lh_err_prefix(err, "%s: metadata key '%s'[%" PRIu64 "]", f->path, key, i);
}

#define GET_KV()                                                                                 \
    const lh_gguf_kv *kv = NULL;                                                                 \
    lh_status st0 = need_kv(f, key, &kv, err);                                                   \
    if (st0 != LH_OK)                                                                            \
        return st0
#define KEY_PREFIX(st) key_prefix((st), f, key, UINT64_MAX, err)

lh_status lh_gguf_get_int(const lh_gguf_file *f, const char *key, int64_t min, int64_t max,
                          int64_t *out, lh_err *err)
{
    GET_KV();
    return KEY_PREFIX(lh_gguf_value_int(&kv->value, min, max, out, err));
}

lh_status lh_gguf_get_uint(const lh_gguf_file *f, const char *key, uint64_t max, uint64_t *out,
                           lh_err *err)
{
    GET_KV();
    return KEY_PREFIX(lh_gguf_value_uint(&kv->value, max, out, err));
}

lh_status lh_gguf_get_float(const lh_gguf_file *f, const char *key, double *out, lh_err *err)
{
    GET_KV();
    return KEY_PREFIX(lh_gguf_value_float(&kv->value, out, err));
}

lh_status lh_gguf_get_bool(const lh_gguf_file *f, const char *key, bool *out, lh_err *err)
{
    GET_KV();
    return KEY_PREFIX(lh_gguf_value_bool(&kv->value, out, err));
}

lh_status lh_gguf_get_string(const lh_gguf_file *f, const char *key, const char **s,
                             size_t *len, lh_err *err)
{
    GET_KV();
    return KEY_PREFIX(lh_gguf_value_string(&kv->value, s, len, err));
}

lh_status lh_gguf_get_array(const lh_gguf_file *f, const char *key, lh_gguf_type *elem_type,
                            uint64_t *count, lh_err *err)
{
    GET_KV();
    if (kv->value.type != LH_GGUF_ARRAY)
        return lh_err_set(err, LH_E_CONFIG, "%s: metadata key '%s': value has type %s, not ARRAY",
                          f->path, key, lh_gguf_type_name(kv->value.type));
    if (elem_type)
        *elem_type = kv->value.elem_type;
    if (count)
        *count = kv->value.count;
    return LH_OK;
}

/* Element i of key's array, or an error naming the key. */
static lh_status elem(const lh_gguf_file *f, const char *key, uint64_t i, lh_gguf_value *v,
                      lh_err *err)
{
    GET_KV();
    return KEY_PREFIX(lh_gguf_value_at(&kv->value, i, v, err));
}

#define ELEM_PREFIX(st) key_prefix((st), f, key, i, err)

lh_status lh_gguf_get_array_int(const lh_gguf_file *f, const char *key, uint64_t i, int64_t min,
                                int64_t max, int64_t *out, lh_err *err)
{
    lh_gguf_value v;
    lh_status st = elem(f, key, i, &v, err);
    if (st != LH_OK)
        return st;
    return ELEM_PREFIX(lh_gguf_value_int(&v, min, max, out, err));
}

lh_status lh_gguf_get_array_float(const lh_gguf_file *f, const char *key, uint64_t i,
                                  double *out, lh_err *err)
{
    lh_gguf_value v;
    lh_status st = elem(f, key, i, &v, err);
    if (st != LH_OK)
        return st;
    return ELEM_PREFIX(lh_gguf_value_float(&v, out, err));
}

lh_status lh_gguf_get_array_bool(const lh_gguf_file *f, const char *key, uint64_t i, bool *out,
                                 lh_err *err)
{
    lh_gguf_value v;
    lh_status st = elem(f, key, i, &v, err);
    if (st != LH_OK)
        return st;
    return ELEM_PREFIX(lh_gguf_value_bool(&v, out, err));
}

lh_status lh_gguf_get_array_string(const lh_gguf_file *f, const char *key, uint64_t i,
                                   const char **s, size_t *len, lh_err *err)
{
    lh_gguf_value v;
    lh_status st = elem(f, key, i, &v, err);
    if (st != LH_OK)
        return st;
    return ELEM_PREFIX(lh_gguf_value_string(&v, s, len, err));
}

/* ---- dump ------------------------------------------------------------------------------------ */

static void dump_scalar(const lh_gguf_value *v, FILE *out)
{
    int64_t s;
    uint64_t u;
    double d;
    bool b;
    const char *str;
    size_t len;
    if (v->type == LH_GGUF_UINT64 && lh_gguf_value_uint(v, UINT64_MAX, &u, NULL) == LH_OK)
        fprintf(out, "%" PRIu64, u);
    else if (lh_gguf_value_int(v, INT64_MIN, INT64_MAX, &s, NULL) == LH_OK)
        fprintf(out, "%" PRId64, s);
    else if (lh_gguf_value_float(v, &d, NULL) == LH_OK)
        fprintf(out, "%.9g", d);
    else if (lh_gguf_value_bool(v, &b, NULL) == LH_OK)
        fputs(b ? "true" : "false", out);
    else if (lh_gguf_value_string(v, &str, &len, NULL) == LH_OK) {
        fputc('"', out);
        size_t n = len > 80 ? 80 : len;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)str[i];
            if (c == '"' || c == '\\')
                fprintf(out, "\\%c", c);
            else if (c < 0x20 || c == 0x7f)
                fprintf(out, "\\x%02x", c);
            else
                fputc(c, out);
        }
        fputs(len > n ? "\"..." : "\"", out);
    }
}

static void dump_value(const lh_gguf_value *v, FILE *out, size_t max_elems)
{
    if (v->type != LH_GGUF_ARRAY) {
        dump_scalar(v, out);
        return;
    }
    fprintf(out, "%s[%" PRIu64 "] [", lh_gguf_type_name(v->elem_type), v->count);
    for (uint64_t i = 0; i < v->count && i < max_elems; i++) {
        lh_gguf_value e;
        if (lh_gguf_value_at(v, i, &e, NULL) != LH_OK)
            break;
        fputs(i ? ", " : "", out);
        dump_value(&e, out, max_elems);
    }
    fputs(v->count > max_elems ? ", ...]" : "]", out);
}

void lh_gguf_dump(const lh_gguf_file *f, FILE *out, size_t max_elems)
{
    if (!f || !out)
        return;
    fprintf(out, "%s: GGUF v%" PRIu32 ", %zu metadata keys, %zu tensors, alignment %" PRIu32
            ", data at %" PRIu64 " (%" PRIu64 " bytes)\n",
            f->path, f->version, f->n_kv, f->n_t, f->alignment, f->data_off, f->data_size);
    for (size_t i = 0; i < f->n_kv; i++) {
        const lh_gguf_kv *kv = &f->kvs[i];
        fprintf(out, "kv %zu %s %s = ", i, kv->key, lh_gguf_type_name(kv->value.type));
        dump_value(&kv->value, out, max_elems);
        fputc('\n', out);
    }
    for (size_t i = 0; i < f->n_t; i++) {
        const lh_gguf_tensor *t = &f->tensors[i];
        char dm[160];
        fmt_dims(dm, sizeof dm, t->n_dims, t->dims);
        fprintf(out, "tensor %zu %s %s %s offset %" PRIu64 " size %" PRIu64 "\n", i, t->name,
                t->type_name, dm, t->offset, t->size);
    }
}
