/* GGUF reader: valid files of every metadata type, each class of malformed file with its
 * status and message, every truncation, random byte flips, and the default model's GGUF. */
#include "runner.h"

#include "core/log.h"
#include "weights/gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a tiny GGUF writer --------------------------------------------------------------------- */

typedef struct gbuf {
    unsigned char *b;
    size_t n, cap;
} gbuf;

static void put(gbuf *g, const void *p, size_t n)
{
    if (g->n + n > g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 1024;
        while (cap < g->n + n)
            cap *= 2;
        g->b = realloc(g->b, cap);
        if (!g->b)
            abort();
        g->cap = cap;
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void putle(gbuf *g, uint64_t v, unsigned n)
{
    unsigned char c[8];
    for (unsigned i = 0; i < n; i++)
        c[i] = (unsigned char)(v >> (8 * i));
    put(g, c, n);
}
static void put8(gbuf *g, uint8_t v) { putle(g, v, 1); }
static void put32(gbuf *g, uint32_t v) { putle(g, v, 4); }
static void put64(gbuf *g, uint64_t v) { putle(g, v, 8); }
static void putstr(gbuf *g, const char *s)
{
    put64(g, strlen(s));
    put(g, s, strlen(s));
}
static void patch(gbuf *g, size_t at, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        g->b[at + i] = (unsigned char)(v >> (8 * i));
}

typedef struct tdesc {
    const char *name;
    uint32_t n_dims;
    uint64_t dims[4];
    uint32_t type;
} tdesc;

/* Block elements and bytes of the types the writer uses (independent of the reader's table). */
static uint64_t tbytes(const tdesc *t)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->n_dims; i++)
        n *= t->dims[i];
    switch (t->type) {
    case 0: return n * 4;              /* F32 */
    case 1: return n * 2;              /* F16 */
    case 3: return n / 32 * 20;        /* Q4_1 */
    case 8: return n / 32 * 34;        /* Q8_0 */
    case 12: return n / 256 * 144;     /* Q4_K */
    case 30: return n * 2;             /* BF16 */
    default: return n;
    }
}

#define MAX_KV 32
#define MAX_T 8

typedef struct spec {
    uint32_t version;
    uint32_t alignment;          /* 0: no general.alignment key (default 32) */
    const tdesc *t;
    size_t nt;
    void (*extra)(gbuf *g);      /* more kvs, written after the standard ones */
    uint64_t n_extra;
} spec;

/* Where each field of a written file lies. */
typedef struct layout {
    size_t n_kv;
    size_t kv_key[MAX_KV], kv_type[MAX_KV], kv_val[MAX_KV];
    size_t t_name[MAX_T], t_ndims[MAX_T], t_dims[MAX_T], t_type[MAX_T], t_off[MAX_T];
    uint64_t t_offset[MAX_T];
    size_t data_off;
    size_t align_kv;             /* kv index of general.alignment */
} layout;

enum { KV_ARCH, KV_ALIGN }; /* the first kvs: general.architecture, then general.alignment */

static void kv_begin(gbuf *g, layout *L, const char *key, uint32_t type)
{
    L->kv_key[L->n_kv] = g->n;
    putstr(g, key);
    L->kv_type[L->n_kv] = g->n;
    put32(g, type);
    L->kv_val[L->n_kv] = g->n;
    L->n_kv++;
}

static const tdesc STD_T[] = {
    {"token_embd.weight", 2, {4, 3}, 0},     /* F32, 48 bytes */
    {"blk.0.attn_q.weight", 2, {64, 2}, 3},  /* Q4_1, 80 bytes */
    {"blk.0.attn_k.weight", 1, {32}, 8},     /* Q8_0, 34 bytes */
    {"output_norm.weight", 1, {3}, 1},       /* F16, 6 bytes */
};

static void build(gbuf *g, layout *L, const spec *sp)
{
    memset(g, 0, sizeof *g);
    memset(L, 0, sizeof *L);
    const tdesc *t = sp->t ? sp->t : STD_T;
    size_t nt = sp->t ? sp->nt : sizeof STD_T / sizeof STD_T[0];
    uint64_t align = sp->alignment ? sp->alignment : 32;
    put(g, "GGUF", 4);
    put32(g, sp->version ? sp->version : 3);
    put64(g, nt);
    size_t n_kv_at = g->n;
    put64(g, 0);

    kv_begin(g, L, "general.architecture", 8);
    putstr(g, "llama");
    if (sp->alignment) {
        L->align_kv = L->n_kv;
        kv_begin(g, L, "general.alignment", 4);
        put32(g, sp->alignment);
    } else {
        L->align_kv = SIZE_MAX;
        kv_begin(g, L, "general.name", 8);
        putstr(g, "tiny \"test\"\n");
    }
    kv_begin(g, L, "llama.block_count", 4);
    put32(g, 2);
    kv_begin(g, L, "test.u8", 0);
    put8(g, 200);
    kv_begin(g, L, "test.i8", 1);
    put8(g, (uint8_t)-5);
    kv_begin(g, L, "test.u16", 2);
    putle(g, 65535, 2);
    kv_begin(g, L, "test.i16", 3);
    putle(g, (uint16_t)-300, 2);
    kv_begin(g, L, "test.i32", 5);
    put32(g, (uint32_t)-70000);
    kv_begin(g, L, "test.f32", 6);
    float f = 0.5f;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    put32(g, fb);
    kv_begin(g, L, "test.bool", 7);
    put8(g, 1);
    kv_begin(g, L, "test.u64", 10);
    put64(g, UINT64_MAX);
    kv_begin(g, L, "test.i64", 11);
    put64(g, (uint64_t)INT64_MIN);
    kv_begin(g, L, "test.f64", 12);
    double d = -2.25;
    uint64_t db;
    memcpy(&db, &d, 8);
    put64(g, db);
    kv_begin(g, L, "test.strings", 9);
    put32(g, 8);
    put64(g, 3);
    putstr(g, "a");
    putstr(g, "bc");
    putstr(g, "");
    kv_begin(g, L, "test.ints", 9);
    put32(g, 5);
    put64(g, 3);
    put32(g, 1);
    put32(g, (uint32_t)-2);
    put32(g, 3);
    kv_begin(g, L, "test.bools", 9);
    put32(g, 7);
    put64(g, 2);
    put8(g, 0);
    put8(g, 1);
    kv_begin(g, L, "test.nested", 9); /* [[1, 2], [3]] of UINT8 */
    put32(g, 9);
    put64(g, 2);
    put32(g, 0);
    put64(g, 2);
    put8(g, 1);
    put8(g, 2);
    put32(g, 0);
    put64(g, 1);
    put8(g, 3);
    kv_begin(g, L, "test.empty", 9);
    put32(g, 6);
    put64(g, 0);
    if (sp->extra)
        sp->extra(g);
    patch(g, n_kv_at, L->n_kv + sp->n_extra, 8);

    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        L->t_name[i] = g->n;
        putstr(g, t[i].name);
        L->t_ndims[i] = g->n;
        put32(g, t[i].n_dims);
        L->t_dims[i] = g->n;
        for (uint32_t j = 0; j < t[i].n_dims; j++)
            put64(g, t[i].dims[j]);
        L->t_type[i] = g->n;
        put32(g, t[i].type);
        L->t_off[i] = g->n;
        off = (off + align - 1) / align * align;
        L->t_offset[i] = off;
        put64(g, off);
        off += tbytes(&t[i]);
    }
    while (g->n % align)
        put8(g, 0);
    L->data_off = g->n;
    for (uint64_t i = 0; i < off; i++)
        put8(g, (uint8_t)(i * 7 + 1));
}

/* ---- helpers ---------------------------------------------------------------------------------- */

static char *g_dir;

static int setup(void)
{
    g_dir = lh_test_mkdtemp();
    return g_dir ? 0 : -1;
}

static int teardown(void)
{
    lh_test_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
    return 0;
}

static const char *path_of(const char *name)
{
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    return p;
}

static void write_file(const char *name, const void *p, size_t n)
{
    FILE *fp = fopen(path_of(name), "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    if (n)
        CU_ASSERT_EQUAL(fwrite(p, 1, n, fp), n);
    CU_ASSERT_EQUAL(fclose(fp), 0);
}

static bool has(const char *msg, const char *needle)
{
    if (!strstr(msg, needle)) {
        fprintf(stderr, "\n    message lacks \"%s\":\n    %s\n", needle, msg);
        return false;
    }
    return true;
}

/* Writes g[0..n) to `name` and expects lh_gguf_open to fail with code and a message holding
 * the file name and each of s1, s2, s3 (those not NULL). */
static void expect_fail_n(const char *name, const gbuf *g, size_t n, lh_status code,
                          const char *s1, const char *s2, const char *s3)
{
    write_file(name, g->b, n);
    lh_err err = {0};
    lh_gguf_file *f = (lh_gguf_file *)(uintptr_t)1;
    lh_status st = lh_gguf_open(path_of(name), &f, &err);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT_PTR_NULL(f);
    if (st != code)
        fprintf(stderr, "\n    %s: got %s: %s\n", name, lh_status_name(st), err.msg);
    CU_ASSERT(has(err.msg, name));
    if (s1)
        CU_ASSERT(has(err.msg, s1));
    if (s2)
        CU_ASSERT(has(err.msg, s2));
    if (s3)
        CU_ASSERT(has(err.msg, s3));
    if (st == LH_OK)
        lh_gguf_close(f);
}

static void expect_fail(const char *name, const gbuf *g, lh_status code, const char *s1,
                        const char *s2, const char *s3)
{
    expect_fail_n(name, g, g->n, code, s1, s2, s3);
}

static lh_gguf_file *open_ok(const char *name, const gbuf *g)
{
    write_file(name, g->b, g->n);
    lh_err err = {0};
    lh_gguf_file *f = NULL;
    lh_status st = lh_gguf_open(path_of(name), &f, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n    %s: %s\n", name, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    return f;
}

/* A standard file, built fresh for each corruption. */
static void std_file(gbuf *g, layout *L)
{
    spec sp = {0};
    build(g, L, &sp);
}

/* ---- valid files ------------------------------------------------------------------------------ */

static void test_valid_file(void)
{
    gbuf g;
    layout L;
    std_file(&g, &L);
    lh_gguf_file *f = open_ok("good.gguf", &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(lh_gguf_version(f), 3);
    CU_ASSERT_EQUAL(lh_gguf_alignment(f), 32);
    CU_ASSERT_EQUAL(lh_gguf_data_offset(f), L.data_off);
    CU_ASSERT_EQUAL(lh_gguf_data_offset(f) % 32, 0);
    CU_ASSERT_EQUAL(lh_gguf_data_size(f), g.n - L.data_off);
    CU_ASSERT_EQUAL(lh_gguf_kv_count(f), L.n_kv);
    CU_ASSERT_STRING_EQUAL(lh_gguf_kv_at(f, 0)->key, "general.architecture");
    CU_ASSERT_STRING_EQUAL(lh_gguf_kv_at(f, L.n_kv - 1)->key, "test.empty");
    CU_ASSERT_PTR_NULL(lh_gguf_kv_at(f, L.n_kv));
    CU_ASSERT_PTR_NULL(lh_gguf_find(f, "nope"));

    lh_err err = {0};
    const char *s;
    size_t len;
    CU_ASSERT_EQUAL(lh_gguf_get_string(f, "general.architecture", &s, &len, &err), LH_OK);
    CU_ASSERT_EQUAL(len, 5);
    CU_ASSERT_NSTRING_EQUAL(s, "llama", 5);
    CU_ASSERT(lh_gguf_contains(f, s, len)); /* zero-copy */

    int64_t i64;
    uint64_t u64;
    double dv;
    bool b;
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "llama.block_count", 0, 1000, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, 2);
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.u8", 0, 255, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, 200);
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.i8", -128, 127, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, -5);
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.u16", 0, 65535, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, 65535);
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.i16", INT16_MIN, INT16_MAX, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, -300);
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.i32", INT32_MIN, INT32_MAX, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, -70000);
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.i64", INT64_MIN, INT64_MAX, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, INT64_MIN);
    CU_ASSERT_EQUAL(lh_gguf_get_uint(f, "test.u64", UINT64_MAX, &u64, &err), LH_OK);
    CU_ASSERT_EQUAL(u64, UINT64_MAX);
    CU_ASSERT_EQUAL(lh_gguf_get_uint(f, "test.u16", 65535, &u64, &err), LH_OK);
    CU_ASSERT_EQUAL(u64, 65535);
    CU_ASSERT_EQUAL(lh_gguf_get_float(f, "test.f32", &dv, &err), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(dv, 0.5, 0);
    CU_ASSERT_EQUAL(lh_gguf_get_float(f, "test.f64", &dv, &err), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(dv, -2.25, 0);
    CU_ASSERT_EQUAL(lh_gguf_get_bool(f, "test.bool", &b, &err), LH_OK);
    CU_ASSERT(b);

    /* arrays */
    lh_gguf_type et;
    uint64_t count;
    CU_ASSERT_EQUAL(lh_gguf_get_array(f, "test.strings", &et, &count, &err), LH_OK);
    CU_ASSERT_EQUAL(et, LH_GGUF_STRING);
    CU_ASSERT_EQUAL(count, 3);
    const char *want[] = {"a", "bc", ""};
    for (uint64_t i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(lh_gguf_get_array_string(f, "test.strings", i, &s, &len, &err), LH_OK);
        CU_ASSERT_EQUAL(len, strlen(want[i]));
        CU_ASSERT(memcmp(s, want[i], len) == 0);
    }
    CU_ASSERT_EQUAL(lh_gguf_get_array_int(f, "test.ints", 1, -10, 10, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, -2);
    CU_ASSERT_EQUAL(lh_gguf_get_array_int(f, "test.ints", 2, -10, 10, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, 3);
    CU_ASSERT_EQUAL(lh_gguf_get_array_bool(f, "test.bools", 1, &b, &err), LH_OK);
    CU_ASSERT(b);
    CU_ASSERT_EQUAL(lh_gguf_get_array_bool(f, "test.bools", 0, &b, &err), LH_OK);
    CU_ASSERT(!b);
    CU_ASSERT_EQUAL(lh_gguf_get_array(f, "test.empty", &et, &count, &err), LH_OK);
    CU_ASSERT_EQUAL(et, LH_GGUF_FLOAT32);
    CU_ASSERT_EQUAL(count, 0);
    /* nested: [[1, 2], [3]] */
    const lh_gguf_kv *kv = lh_gguf_find(f, "test.nested");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_EQUAL(kv->value.elem_type, LH_GGUF_ARRAY);
    lh_gguf_value inner, x;
    CU_ASSERT_EQUAL(lh_gguf_value_at(&kv->value, 1, &inner, &err), LH_OK);
    CU_ASSERT_EQUAL(inner.type, LH_GGUF_ARRAY);
    CU_ASSERT_EQUAL(inner.elem_type, LH_GGUF_UINT8);
    CU_ASSERT_EQUAL(inner.count, 1);
    CU_ASSERT_EQUAL(lh_gguf_value_at(&inner, 0, &x, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_gguf_value_int(&x, 0, 255, &i64, &err), LH_OK);
    CU_ASSERT_EQUAL(i64, 3);
    CU_ASSERT_EQUAL(lh_gguf_value_at(&kv->value, 0, &inner, &err), LH_OK);
    CU_ASSERT_EQUAL(inner.count, 2);
    CU_ASSERT_EQUAL(lh_gguf_value_at(&inner, 1, &x, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_gguf_value_uint(&x, 255, &u64, &err), LH_OK);
    CU_ASSERT_EQUAL(u64, 2);

    /* getter errors: missing key, wrong type, out of range, past the end; NULL err is fine */
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "llama.nope", 0, 1, &i64, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "good.gguf: metadata key 'llama.nope' not found"));
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "general.architecture", 0, 1, &i64, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "metadata key 'general.architecture': value has type STRING, not "
                           "an integer"));
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.u8", 0, 100, &i64, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "metadata key 'test.u8': UINT8 value 200 is outside [0, 100]"));
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.u64", INT64_MIN, INT64_MAX, &i64, &err),
                    LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "UINT64 value 18446744073709551615 is outside"));
    CU_ASSERT_EQUAL(lh_gguf_get_uint(f, "test.i8", 255, &u64, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "INT8 value -5 is negative"));
    CU_ASSERT_EQUAL(lh_gguf_get_float(f, "test.i32", &dv, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "'test.i32': value has type INT32, not FLOAT32 or FLOAT64"));
    CU_ASSERT_EQUAL(lh_gguf_get_bool(f, "test.u8", &b, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "not BOOL"));
    CU_ASSERT_EQUAL(lh_gguf_get_string(f, "test.ints", &s, &len, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "value has type ARRAY, not STRING"));
    CU_ASSERT_EQUAL(lh_gguf_get_array(f, "test.u8", &et, &count, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "'test.u8': value has type UINT8, not ARRAY"));
    CU_ASSERT_EQUAL(lh_gguf_get_array_string(f, "test.strings", 3, &s, &len, &err),
                    LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "'test.strings': index 3 is past the end of the STRING array of 3"));
    CU_ASSERT_EQUAL(lh_gguf_get_array_int(f, "test.ints", 0, 2, 10, &i64, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "metadata key 'test.ints'[0]: INT32 value 1 is outside [2, 10]"));
    CU_ASSERT_EQUAL(lh_gguf_get_array_float(f, "test.strings", 0, &dv, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "'test.strings'[0]: value has type STRING"));
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "nope", 0, 1, &i64, NULL), LH_E_CONFIG);
    CU_ASSERT_EQUAL(lh_gguf_get_int(f, "test.u8", 0, 1, &i64, NULL), LH_E_CONFIG);
    CU_ASSERT_EQUAL(lh_gguf_get_int(NULL, "x", 0, 1, &i64, &err), LH_E_USAGE);

    /* tensors: file order, lookup by name, dims in GGUF order, sizes, zero-copy data */
    CU_ASSERT_EQUAL_FATAL(lh_gguf_tensor_count(f), 4);
    for (size_t i = 0; i < 4; i++) {
        const lh_gguf_tensor *t = lh_gguf_tensor_at(f, i);
        CU_ASSERT_STRING_EQUAL(t->name, STD_T[i].name);
        CU_ASSERT_EQUAL(t->index, i);
        CU_ASSERT_PTR_EQUAL(lh_gguf_find_tensor(f, STD_T[i].name), t);
        CU_ASSERT_EQUAL(t->n_dims, STD_T[i].n_dims);
        for (uint32_t j = 0; j < 4; j++)
            CU_ASSERT_EQUAL(t->dims[j], j < STD_T[i].n_dims ? (int64_t)STD_T[i].dims[j] : 1);
        CU_ASSERT_EQUAL(t->type, STD_T[i].type);
        CU_ASSERT_EQUAL(t->size, tbytes(&STD_T[i]));
        CU_ASSERT_EQUAL(t->offset, L.t_offset[i]);
        CU_ASSERT_EQUAL(t->file_offset, L.data_off + L.t_offset[i]);
        size_t msize;
        const unsigned char *base = lh_gguf_map_base(f, &msize);
        CU_ASSERT_EQUAL(msize, g.n);
        CU_ASSERT_PTR_EQUAL(t->data, base + t->file_offset);
        CU_ASSERT(lh_gguf_contains(f, t->data, (size_t)t->size));
        CU_ASSERT_EQUAL((uintptr_t)t->data % 32, 0);
        CU_ASSERT(memcmp(t->data, g.b + t->file_offset, (size_t)t->size) == 0);
    }
    const lh_gguf_tensor *q = lh_gguf_find_tensor(f, "blk.0.attn_q.weight");
    CU_ASSERT_STRING_EQUAL(q->type_name, "Q4_1");
    CU_ASSERT_EQUAL(q->n_elements, 128);
    CU_ASSERT_EQUAL(q->size, 80);
    CU_ASSERT_PTR_NULL(lh_gguf_find_tensor(f, "blk.0.attn_v.weight"));
    CU_ASSERT_PTR_NULL(lh_gguf_tensor_at(f, 4));

    /* the dump names every key and tensor */
    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
    lh_gguf_dump(f, mem, 8);
    fclose(mem);
    CU_ASSERT(has(text, "GGUF v3, 18 metadata keys, 4 tensors, alignment 32"));
    CU_ASSERT(has(text, "kv 0 general.architecture STRING = \"llama\""));
    CU_ASSERT(has(text, "general.name STRING = \"tiny \\\"test\\\"\\x0a\""));
    CU_ASSERT(has(text, "test.nested ARRAY = ARRAY[2] [UINT8[2] [1, 2], UINT8[1] [3]]"));
    CU_ASSERT(has(text, "test.u64 UINT64 = 18446744073709551615"));
    CU_ASSERT(has(text, "test.bools ARRAY = BOOL[2] [false, true]"));
    CU_ASSERT(has(text, "tensor 1 blk.0.attn_q.weight Q4_1 [64, 2] offset 64 size 80"));
    free(text);
    lh_gguf_close(f);
    lh_gguf_close(NULL);
    free(g.b);
}

static void test_valid_variants(void)
{
    gbuf g;
    layout L;
    /* version 2 has the same layout */
    std_file(&g, &L);
    patch(&g, 4, 2, 4);
    lh_gguf_file *f = open_ok("v2.gguf", &g);
    CU_ASSERT_EQUAL(f ? lh_gguf_version(f) : 0, 2);
    lh_gguf_close(f);
    free(g.b);

    /* general.alignment 64 moves the data section; a scalar (n_dims 0); Q4_K; BF16 */
    static const tdesc T[] = {
        {"a", 0, {0}, 0}, {"b", 1, {512}, 12}, {"c", 3, {2, 3, 4}, 30}, {"d", 4, {1, 1, 1, 2}, 0}};
    spec sp = {.alignment = 64, .t = T, .nt = 4};
    build(&g, &L, &sp);
    f = open_ok("align64.gguf", &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(lh_gguf_alignment(f), 64);
    CU_ASSERT_EQUAL(lh_gguf_data_offset(f) % 64, 0);
    const lh_gguf_tensor *t = lh_gguf_find_tensor(f, "a");
    CU_ASSERT_EQUAL(t->n_dims, 0);
    CU_ASSERT_EQUAL(t->n_elements, 1);
    CU_ASSERT_EQUAL(t->size, 4);
    t = lh_gguf_find_tensor(f, "b");
    CU_ASSERT_EQUAL(t->offset, 64);
    CU_ASSERT_EQUAL(t->size, 288);
    CU_ASSERT_STRING_EQUAL(t->type_name, "Q4_K");
    t = lh_gguf_find_tensor(f, "c");
    CU_ASSERT_EQUAL(t->n_elements, 24);
    CU_ASSERT_EQUAL(t->size, 48);
    CU_ASSERT_STRING_EQUAL(t->type_name, "BF16");
    CU_ASSERT_EQUAL(lh_gguf_find_tensor(f, "d")->n_dims, 4);
    lh_gguf_close(f);
    free(g.b);

    /* no tensors at all, and the file ends at the last kv (no padding) */
    spec none = {.t = T, .nt = 0};
    build(&g, &L, &none);
    g.n = L.kv_val[L.n_kv - 1] + 12; /* the end of the last kv (test.empty): no padding */
    f = open_ok("notensors.gguf", &g);
    CU_ASSERT_EQUAL(lh_gguf_tensor_count(f), 0);
    CU_ASSERT_EQUAL(lh_gguf_data_size(f), 0);
    lh_gguf_close(f);
    free(g.b);
}

static void test_ggml_types(void)
{
    /* gguf-py's GGML_QUANT_SIZES (gguf 0.19.0), and ggml.h's Q2_0 */
    static const struct { uint32_t id; const char *name; uint32_t blck, bytes; } W[] = {
        {0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},     {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 40},      {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
        {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
        {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
        {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},        {25, "I16", 1, 2},
        {26, "I32", 1, 4},       {27, "I64", 1, 8},        {28, "F64", 1, 8},
        {29, "IQ1_M", 256, 56},  {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
        {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
        {41, "Q1_0", 128, 18},   {42, "Q2_0", 64, 18},
    };
    for (size_t i = 0; i < sizeof W / sizeof W[0]; i++) {
        uint32_t b = 0, n = 0;
        CU_ASSERT(lh_ggml_type_size(W[i].id, &b, &n));
        CU_ASSERT_EQUAL(b, W[i].blck);
        CU_ASSERT_EQUAL(n, W[i].bytes);
        CU_ASSERT_STRING_EQUAL(lh_ggml_type_name(W[i].id), W[i].name);
    }
    uint32_t b = 9, n = 9;
    CU_ASSERT(!lh_ggml_type_size(4, &b, &n));
    CU_ASSERT_EQUAL(b, 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_STRING_EQUAL(lh_ggml_type_name(4), "Q4_2");
    CU_ASSERT_STRING_EQUAL(lh_ggml_type_name(31), "Q4_0_4_4");
    CU_ASSERT(!lh_ggml_type_size(36, NULL, NULL));
    CU_ASSERT(!lh_ggml_type_size(43, NULL, NULL));
    CU_ASSERT_PTR_NULL(lh_ggml_type_name(43));
    CU_ASSERT_STRING_EQUAL(lh_gguf_type_name(LH_GGUF_FLOAT64), "FLOAT64");
    CU_ASSERT_STRING_EQUAL(lh_gguf_type_name(13), "?");
}

/* ---- malformed files -------------------------------------------------------------------------- */

static void test_file_level(void)
{
    lh_err err = {0};
    lh_gguf_file *f = NULL;
    CU_ASSERT_EQUAL(lh_gguf_open(path_of("missing.gguf"), &f, &err), LH_E_IO);
    CU_ASSERT(has(err.msg, "missing.gguf: cannot open GGUF file: No such file"));
    CU_ASSERT_EQUAL(lh_gguf_open(g_dir, &f, &err), LH_E_IO);
    CU_ASSERT(has(err.msg, "is a directory, not a GGUF file"));
    CU_ASSERT_EQUAL(lh_gguf_open("/dev/null", &f, &err), LH_E_IO);
    CU_ASSERT(has(err.msg, "/dev/null: not a regular file"));
    CU_ASSERT_EQUAL(mkfifo(path_of("fifo.gguf"), 0600), 0);
    CU_ASSERT_EQUAL(lh_gguf_open(path_of("fifo.gguf"), &f, &err), LH_E_IO);
    CU_ASSERT(has(err.msg, "fifo.gguf: not a regular file"));
    CU_ASSERT_EQUAL(lh_gguf_open(NULL, &f, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(f);

    gbuf g;
    layout L;
    std_file(&g, &L);
    expect_fail_n("empty.gguf", &g, 0, LH_E_CONFIG, "empty file", NULL, NULL);
    expect_fail_n("short3.gguf", &g, 3, LH_E_CONFIG, "truncated header: the file is 3 bytes",
                  "24-byte GGUF header", NULL);
    expect_fail_n("short20.gguf", &g, 20, LH_E_CONFIG, "truncated header: the file is 20 bytes",
                  NULL, NULL);
    free(g.b);
}

static void test_header_errors(void)
{
    gbuf g;
    layout L;
    std_file(&g, &L);
    memcpy(g.b, "GGML", 4);
    expect_fail("magic.gguf", &g, LH_E_CONFIG, "not a GGUF file: bad magic 47 47 4d 4c ('GGML')",
                "expected 47 47 55 46 ('GGUF')", NULL);
    memcpy(g.b, "\x89PNG", 4);
    expect_fail_n("png.gguf", &g, 8, LH_E_CONFIG, "bad magic 89 50 4e 47 ('.PNG')", NULL, NULL);
    memcpy(g.b, "GGUF", 4);

    patch(&g, 4, 1, 4);
    expect_fail("v1.gguf", &g, LH_E_UNSUPPORTED, "GGUF version 1 is not supported",
                "supported: 2, 3", NULL);
    patch(&g, 4, 4, 4);
    expect_fail("v4.gguf", &g, LH_E_UNSUPPORTED, "unsupported GGUF version 4 (supported: 2, 3)",
                NULL, NULL);
    patch(&g, 4, 0, 4);
    expect_fail("v0.gguf", &g, LH_E_UNSUPPORTED, "unsupported GGUF version 0", NULL, NULL);
    patch(&g, 4, 0x03000000u, 4);
    expect_fail("bigendian.gguf", &g, LH_E_UNSUPPORTED, "version field reads 50331648",
                "byte-swapped 3: a big-endian GGUF file, which is not supported", NULL);
    patch(&g, 4, 3, 4);

    /* absurd counts */
    patch(&g, 16, 1ull << 40, 8);
    char want[160];
    snprintf(want, sizeof want, "metadata kv count %llu is absurd: the file (%zu bytes) could "
             "hold at most %zu", 1ull << 40, g.n, (g.n - 24) / 14);
    expect_fail("kvcount.gguf", &g, LH_E_CONFIG, want, NULL, NULL);
    patch(&g, 16, UINT64_MAX, 8);
    expect_fail("kvcount2.gguf", &g, LH_E_CONFIG, "metadata kv count 18446744073709551615 is "
                "absurd", NULL, NULL);
    patch(&g, 16, L.n_kv, 8);
    patch(&g, 8, UINT64_MAX / 2, 8);
    expect_fail("tcount.gguf", &g, LH_E_CONFIG, "tensor count 9223372036854775807 is absurd",
                "tensor infos", NULL);
    /* plausible for the whole file, not for what follows the metadata */
    uint64_t after = g.n - L.t_name[0];
    patch(&g, 8, after / 25 + 1, 8);
    expect_fail("tcount2.gguf", &g, LH_E_CONFIG, "is absurd: the", "bytes after the metadata",
                NULL);
    /* one tensor more than written: the reader runs into the data, then the end */
    patch(&g, 8, 5, 8);
    write_file("tcount3.gguf", g.b, g.n);
    lh_err err = {0};
    lh_gguf_file *f = NULL;
    CU_ASSERT_EQUAL(lh_gguf_open(path_of("tcount3.gguf"), &f, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "tensor #4"));
    /* a kv count one too large: the first tensor name is read as a key, its n_dims as a type,
     * and the tensor infos that follow are garbage */
    patch(&g, 8, 4, 8);
    patch(&g, 16, L.n_kv + 1, 8);
    write_file("kvcount3.gguf", g.b, g.n);
    CU_ASSERT_EQUAL(lh_gguf_open(path_of("kvcount3.gguf"), &f, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "kvcount3.gguf: "));
    free(g.b);
}

static void nest5(gbuf *g)
{
    putstr(g, "test.deep");
    put32(g, 9);
    for (int i = 0; i < 4; i++) {
        put32(g, 9); /* array of arrays ... */
        put64(g, 1);
    }
    put32(g, 0); /* the fifth level: UINT8[1] */
    put64(g, 1);
    put8(g, 7);
}

static void nest4(gbuf *g)
{
    putstr(g, "test.deep");
    put32(g, 9);
    for (int i = 0; i < 3; i++) {
        put32(g, 9);
        put64(g, 1);
    }
    put32(g, 8);
    put64(g, 1);
    putstr(g, "leaf");
}

static void dup_kv(gbuf *g)
{
    putstr(g, "test.u16");
    put32(g, 2);
    putle(g, 1, 2);
}

static void long_key(gbuf *g)
{
    char *k = malloc(70000);
    memset(k, 'k', 69999);
    k[69999] = '\0';
    putstr(g, k);
    free(k);
    put32(g, 0);
    put8(g, 0);
}

static void test_metadata_errors(void)
{
    gbuf g;
    layout L;
    char want[200];

    /* strings longer than the file: a value, a key */
    std_file(&g, &L);
    patch(&g, L.kv_val[KV_ARCH], 1ull << 50, 8);
    snprintf(want, sizeof want, "string of %llu bytes at offset %zu is longer than the rest of "
             "the file", 1ull << 50, L.kv_val[KV_ARCH]);
    expect_fail("strlen.gguf", &g, LH_E_CONFIG, "metadata kv #0 'general.architecture'", want,
                "truncated or corrupt");
    patch(&g, L.kv_val[KV_ARCH], 5, 8);
    patch(&g, L.kv_key[3], UINT64_MAX, 8);
    expect_fail("keylen.gguf", &g, LH_E_CONFIG, "metadata kv #3: key of 18446744073709551615 "
                "bytes", "is longer than the rest of the file", NULL);
    patch(&g, L.kv_key[3], 0, 8);
    expect_fail("emptykey.gguf", &g, LH_E_CONFIG, "metadata kv #3: empty key at offset", NULL,
                NULL);
    patch(&g, L.kv_key[3], strlen("test.u8"), 8);
    g.b[L.kv_key[3] + 8 + 2] = 0;
    expect_fail("nulkey.gguf", &g, LH_E_CONFIG, "metadata kv #3: key at offset", "NUL byte",
                NULL);
    free(g.b);
    spec sk = {.extra = long_key, .n_extra = 1};
    build(&g, &L, &sk);
    expect_fail("longkey.gguf", &g, LH_E_CONFIG, "key of 69999 bytes",
                "longer than the 65535 bytes GGUF allows", NULL);
    free(g.b);

    /* unknown value types: of a kv, of an array's elements */
    std_file(&g, &L);
    patch(&g, L.kv_type[3], 13, 4);
    snprintf(want, sizeof want, "unknown metadata value type 13 at offset %zu", L.kv_type[3]);
    expect_fail("vtype.gguf", &g, LH_E_CONFIG, "metadata kv #3 'test.u8'", want,
                "(metadata value types are 0..12, UINT8..FLOAT64)");
    patch(&g, L.kv_type[3], 0xffffffffu, 4);
    expect_fail("vtype2.gguf", &g, LH_E_CONFIG, "unknown metadata value type 4294967295", NULL,
                NULL);
    patch(&g, L.kv_type[3], 0, 4);
    size_t ints = 14; /* test.ints */
    patch(&g, L.kv_val[ints], 77, 4);
    expect_fail("etype.gguf", &g, LH_E_CONFIG, "kv #14 'test.ints': array at offset",
                "unknown element type 77", NULL);
    patch(&g, L.kv_val[ints], 5, 4);

    /* absurd array lengths */
    patch(&g, L.kv_val[ints] + 4, 1ull << 62, 8);
    expect_fail("alen.gguf", &g, LH_E_CONFIG, "'test.ints': array count 4611686018427387904",
                "is absurd: INT32 elements take at least 4 bytes each", NULL);
    patch(&g, L.kv_val[ints] + 4, UINT64_MAX, 8);
    expect_fail("alen2.gguf", &g, LH_E_CONFIG, "array count 18446744073709551615", NULL, NULL);
    patch(&g, L.kv_val[ints] + 4, 3, 8);
    size_t strs = 13; /* test.strings: a count that fits 8-byte lengths but not the strings */
    patch(&g, L.kv_val[strs] + 4, (g.n - L.kv_val[strs]) / 8, 8);
    expect_fail("alen3.gguf", &g, LH_E_CONFIG, "'test.strings'", NULL, NULL);
    patch(&g, L.kv_val[strs] + 4, 3, 8);
    /* a string inside an array, longer than the file */
    patch(&g, L.kv_val[strs] + 12 + 9, 1ull << 33, 8);
    expect_fail("astr.gguf", &g, LH_E_CONFIG, "'test.strings': string[1] of 8589934592 bytes",
                NULL, NULL);
    patch(&g, L.kv_val[strs] + 12 + 9, 2, 8);
    /* a nested array's own count */
    size_t nested = 16;
    patch(&g, L.kv_val[nested] + 12 + 4, 1ull << 40, 8);
    expect_fail("nlen.gguf", &g, LH_E_CONFIG, "'test.nested': array[0] count 1099511627776",
                "is absurd", NULL);
    patch(&g, L.kv_val[nested] + 12 + 4, 2, 8);

    /* bools must be 0 or 1 */
    patch(&g, L.kv_val[9], 2, 1);
    expect_fail("bool.gguf", &g, LH_E_CONFIG, "'test.bool': BOOL value at offset",
                "is 2; a bool must be 0 or 1", NULL);
    patch(&g, L.kv_val[9], 1, 1);
    patch(&g, L.kv_val[15] + 12 + 1, 255, 1);
    expect_fail("bools.gguf", &g, LH_E_CONFIG, "'test.bools': BOOL value[1] at offset",
                "is 255", NULL);
    patch(&g, L.kv_val[15] + 12 + 1, 1, 1);

    /* duplicate keys (patched: test.u16 -> test.i16; appended) */
    g.b[L.kv_key[5] + 8 + 5] = 'i';
    snprintf(want, sizeof want, "duplicate metadata key 'test.i16' (kv #5 at offset %zu and kv #6"
             " at offset %zu)", L.kv_key[5], L.kv_key[6]);
    expect_fail("dupkey.gguf", &g, LH_E_CONFIG, want, NULL, NULL);
    free(g.b);
    spec sd = {.extra = dup_kv, .n_extra = 1};
    build(&g, &L, &sd);
    expect_fail("dupkey2.gguf", &g, LH_E_CONFIG, "duplicate metadata key 'test.u16' (kv #5",
                "and kv #18", NULL);
    free(g.b);

    /* nesting: 4 deep is fine, 5 is refused */
    spec s4 = {.extra = nest4, .n_extra = 1};
    build(&g, &L, &s4);
    lh_gguf_file *f = open_ok("nest4.gguf", &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    lh_gguf_value v = lh_gguf_find(f, "test.deep")->value, e;
    lh_err err = {0};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(lh_gguf_value_at(&v, 0, &e, &err), LH_OK);
        v = e;
    }
    CU_ASSERT_EQUAL(v.elem_type, LH_GGUF_STRING);
    CU_ASSERT_EQUAL_FATAL(lh_gguf_value_at(&v, 0, &e, &err), LH_OK);
    const char *s;
    size_t len;
    CU_ASSERT_EQUAL(lh_gguf_value_string(&e, &s, &len, &err), LH_OK);
    CU_ASSERT(len == 4 && memcmp(s, "leaf", 4) == 0);
    lh_gguf_close(f);
    free(g.b);
    spec s5 = {.extra = nest5, .n_extra = 1};
    build(&g, &L, &s5);
    expect_fail("nest5.gguf", &g, LH_E_CONFIG, "kv #18 'test.deep': array[0][0][0] at offset",
                "holds arrays nested more than 4 deep", NULL);
    free(g.b);
}

static void test_alignment_errors(void)
{
    gbuf g;
    layout L;
    spec sp = {.alignment = 32};
    build(&g, &L, &sp);
    lh_gguf_file *f = open_ok("align32.gguf", &g);
    CU_ASSERT_EQUAL(f ? lh_gguf_alignment(f) : 0, 32);
    lh_gguf_close(f);
    size_t v = L.kv_val[L.align_kv], t = L.kv_type[L.align_kv];
    patch(&g, v, 0, 4);
    expect_fail("align0.gguf", &g, LH_E_CONFIG,
                "general.alignment is 0; it must be a non-zero power of two", NULL, NULL);
    patch(&g, v, 48, 4);
    expect_fail("align48.gguf", &g, LH_E_CONFIG, "general.alignment is 48; it must be", NULL,
                NULL);
    patch(&g, v, 0x80000001u, 4);
    expect_fail("alignodd.gguf", &g, LH_E_CONFIG, "general.alignment is 2147483649", NULL, NULL);
    patch(&g, t, 6, 4); /* FLOAT32 */
    expect_fail("alignf.gguf", &g, LH_E_CONFIG,
                "general.alignment (expected a UINT32 power of two): value has type FLOAT32, "
                "not an integer",
                NULL, NULL);
    patch(&g, t, 5, 4); /* INT32 -1 */
    patch(&g, v, 0xffffffffu, 4);
    expect_fail("alignneg.gguf", &g, LH_E_CONFIG, "general.alignment", "INT32 value -1 is "
                "negative", NULL);
    /* a huge power of two: the data section starts past the end of the file */
    patch(&g, t, 4, 4);
    patch(&g, v, 1u << 30, 4);
    expect_fail("alignhuge.gguf", &g, LH_E_CONFIG, "tensor #0 'token_embd.weight'",
                "lies outside the data section (0 bytes", NULL);
    free(g.b);
}

static void test_tensor_errors(void)
{
    gbuf g;
    layout L;
    char want[240];
    std_file(&g, &L);
    /* name: longer than the file, empty, NUL, too long */
    patch(&g, L.t_name[1], 1ull << 45, 8);
    expect_fail("tname.gguf", &g, LH_E_CONFIG, "tensor #1: name of 35184372088832 bytes",
                "longer than the rest of the file", NULL);
    patch(&g, L.t_name[1], 0, 8);
    expect_fail("tname0.gguf", &g, LH_E_CONFIG, "tensor #1: empty name at offset", NULL, NULL);
    patch(&g, L.t_name[1], strlen(STD_T[1].name), 8);
    g.b[L.t_name[1] + 8 + 3] = 0;
    expect_fail("tnamenul.gguf", &g, LH_E_CONFIG, "tensor #1: name at offset", "NUL byte", NULL);
    g.b[L.t_name[1] + 8 + 3] = '.';
    /* duplicate names: blk.0.attn_k -> blk.0.attn_q */
    g.b[L.t_name[2] + 8 + strlen("blk.0.attn_")] = 'q';
    expect_fail("tdup.gguf", &g, LH_E_CONFIG,
                "duplicate tensor name 'blk.0.attn_q.weight' (tensors #1 and #2)", NULL, NULL);
    g.b[L.t_name[2] + 8 + strlen("blk.0.attn_")] = 'k';

    /* dims: too many, a zero, above INT64_MAX, element count overflow */
    patch(&g, L.t_ndims[0], 5, 4);
    expect_fail("ndims.gguf", &g, LH_E_CONFIG, "tensor #0 'token_embd.weight': n_dims is 5",
                "at most 4", NULL);
    patch(&g, L.t_ndims[0], 0xffffffffu, 4);
    expect_fail("ndims2.gguf", &g, LH_E_CONFIG, "n_dims is 4294967295", NULL, NULL);
    patch(&g, L.t_ndims[0], 2, 4);
    patch(&g, L.t_dims[0] + 8, 0, 8);
    expect_fail("dim0.gguf", &g, LH_E_CONFIG, "tensor #0 'token_embd.weight': dims[1] is 0",
                "every dimension must be at least 1", NULL);
    patch(&g, L.t_dims[0] + 8, 1ull << 63, 8);
    expect_fail("dimbig.gguf", &g, LH_E_CONFIG, "dims[1] is 9223372036854775808, above "
                "INT64_MAX", NULL, NULL);
    patch(&g, L.t_dims[0], 1ull << 32, 8);
    patch(&g, L.t_dims[0] + 8, 1ull << 32, 8);
    expect_fail("numel.gguf", &g, LH_E_CONFIG, "'token_embd.weight': element count of dims "
                "[4294967296, 4294967296] overflows int64", NULL, NULL);
    /* fits int64 elements, but not the byte size */
    patch(&g, L.t_dims[0], 1ull << 31, 8);
    patch(&g, L.t_dims[0] + 8, 1ull << 31, 8);
    expect_fail("bytes.gguf", &g, LH_E_CONFIG, "overflow", NULL, NULL);
    patch(&g, L.t_dims[0], 4, 8);
    patch(&g, L.t_dims[0] + 8, 3, 8);
    /* huge but valid dims: outside the data */
    patch(&g, L.t_dims[0], 1ull << 20, 8);
    expect_fail("dimhuge.gguf", &g, LH_E_CONFIG, "'token_embd.weight' (F32 [1048576, 3], "
                "12582912 bytes) at data offset 0 lies outside the data section", NULL, NULL);
    patch(&g, L.t_dims[0], 4, 8);
    /* ne[0] not a multiple of the block size */
    patch(&g, L.t_dims[1], 48, 8);
    expect_fail("block.gguf", &g, LH_E_CONFIG, "'blk.0.attn_q.weight': Q4_1 [48, 2]: ne[0] = 48 "
                "is not a multiple of the type's block size 32", NULL, NULL);
    patch(&g, L.t_dims[1], 64, 8);

    /* unknown and removed ggml types */
    patch(&g, L.t_type[1], 4, 4);
    expect_fail("ttype4.gguf", &g, LH_E_UNSUPPORTED, "tensor #1 'blk.0.attn_q.weight': "
                "unsupported ggml type 4 (Q4_2, removed from ggml", NULL, NULL);
    patch(&g, L.t_type[1], 37, 4);
    expect_fail("ttype37.gguf", &g, LH_E_UNSUPPORTED, "unsupported ggml type 37 (IQ4_NL_4_8",
                NULL, NULL);
    patch(&g, L.t_type[1], 99, 4);
    expect_fail("ttype99.gguf", &g, LH_E_UNSUPPORTED, "unsupported ggml type 99 (unknown",
                NULL, NULL);
    patch(&g, L.t_type[1], 3, 4);

    /* offsets: outside the file, not aligned, overlapping */
    patch(&g, L.t_off[3], UINT64_MAX - 31, 8);
    snprintf(want, sizeof want, "tensor #3 'output_norm.weight' (F16 [3], 6 bytes) at data offset"
             " 18446744073709551584 lies outside the data section (%zu bytes from file offset %zu"
             " to the end at %zu); truncated?", g.n - L.data_off, L.data_off, g.n);
    expect_fail("toff.gguf", &g, LH_E_CONFIG, want, NULL, NULL);
    patch(&g, L.t_off[3], 1ull << 20, 8);
    expect_fail("toff2.gguf", &g, LH_E_CONFIG, "at data offset 1048576 lies outside", NULL, NULL);
    patch(&g, L.t_off[3], L.t_offset[3] + 1, 8);
    snprintf(want, sizeof want, "tensor #3 'output_norm.weight': data offset %llu is not a "
             "multiple of the alignment 32 (the default)", (unsigned long long)L.t_offset[3] + 1);
    expect_fail("tunaligned.gguf", &g, LH_E_CONFIG, want, NULL, NULL);
    patch(&g, L.t_off[3], L.t_offset[3], 8);
    patch(&g, L.t_off[2], 64, 8); /* blk.0.attn_k onto blk.0.attn_q [64, 144) */
    expect_fail("overlap.gguf", &g, LH_E_CONFIG,
                "tensors #1 'blk.0.attn_q.weight' [64, 144) and #2 'blk.0.attn_k.weight' [64, 98)"
                " overlap in the data section", NULL, NULL);
    patch(&g, L.t_off[2], 128, 8); /* starts inside blk.0.attn_q */
    expect_fail("overlap2.gguf", &g, LH_E_CONFIG, "[64, 144) and #2 'blk.0.attn_k.weight' "
                "[128, 162) overlap", NULL, NULL);
    patch(&g, L.t_off[2], 0, 8); /* over token_embd [0, 48) */
    expect_fail("overlap3.gguf", &g, LH_E_CONFIG, "tensors #0 'token_embd.weight' [0, 48) and "
                "#2 'blk.0.attn_k.weight' [0, 34) overlap", NULL, NULL);
    patch(&g, L.t_off[2], L.t_offset[2], 8);
    /* the last tensor's data cut short */
    expect_fail_n("tcut.gguf", &g, g.n - 1, LH_E_CONFIG, "tensor #3 'output_norm.weight'",
                  "lies outside the data section", "truncated?");
    free(g.b);

    /* a name longer than 64 bytes */
    static const tdesc T[] = {
        {"a_name_that_is_much_longer_than_the_sixty_four_bytes_gguf_allows_for_a_tensor", 1,
         {4}, 0}};
    spec sp = {.t = T, .nt = 1};
    build(&g, &L, &sp);
    expect_fail("tlong.gguf", &g, LH_E_CONFIG, "tensor #0: name 'a_name_that_is_much_longer",
                "is 77 bytes; GGUF allows at most 64", NULL);
    free(g.b);
}

/* Every prefix of a valid file fails cleanly (the last tensor ends at the end of the file). */
static void test_every_truncation(void)
{
    gbuf g;
    layout L;
    std_file(&g, &L);
    int fails = 0;
    for (size_t n = 0; n < g.n; n++) {
        write_file("cut.gguf", g.b, n);
        lh_err err = {0};
        lh_gguf_file *f = NULL;
        lh_status st = lh_gguf_open(path_of("cut.gguf"), &f, &err);
        if (st != LH_E_CONFIG || !strstr(err.msg, "cut.gguf") || f) {
            if (fails++ < 5)
                fprintf(stderr, "\n    cut at %zu: %s: %s\n", n, lh_status_name(st), err.msg);
            lh_gguf_close(f);
        }
        /* a cut inside the metadata or tensor infos names the offset and the file end */
        if (n >= 24 && n < L.t_off[3] + 8 && st == LH_E_CONFIG) {
            char end[64];
            snprintf(end, sizeof end, "%zu", n);
            if (!strstr(err.msg, end) && fails++ < 5)
                fprintf(stderr, "\n    cut at %zu: size not named: %s\n", n, err.msg);
        }
    }
    CU_ASSERT_EQUAL(fails, 0);
    free(g.b);
}

/* Exercises every query on an opened file, reading every byte it hands out. */
static unsigned touch_all(const lh_gguf_file *f, FILE *sink)
{
    unsigned sum = 0;
    for (size_t i = 0; i < lh_gguf_kv_count(f); i++) {
        const lh_gguf_kv *kv = lh_gguf_kv_at(f, i);
        sum += (unsigned)strlen(kv->key);
        CU_ASSERT_PTR_EQUAL(lh_gguf_find(f, kv->key), kv);
        int64_t i64;
        double d;
        bool b;
        const char *s;
        size_t len;
        lh_gguf_get_int(f, kv->key, INT64_MIN, INT64_MAX, &i64, NULL);
        lh_gguf_get_float(f, kv->key, &d, NULL);
        lh_gguf_get_bool(f, kv->key, &b, NULL);
        if (lh_gguf_get_string(f, kv->key, &s, &len, NULL) == LH_OK)
            for (size_t k = 0; k < len; k++)
                sum += (unsigned char)s[k];
        if (kv->value.type == LH_GGUF_ARRAY)
            for (uint64_t k = 0; k < kv->value.count && k < 64; k++) {
                lh_gguf_value e;
                if (lh_gguf_value_at(&kv->value, k, &e, NULL) == LH_OK && e.size)
                    sum += e.p[e.size - 1];
            }
    }
    for (size_t i = 0; i < lh_gguf_tensor_count(f); i++) {
        const lh_gguf_tensor *t = lh_gguf_tensor_at(f, i);
        CU_ASSERT(lh_gguf_contains(f, t->data, (size_t)t->size));
        const unsigned char *p = t->data;
        for (uint64_t k = 0; k < t->size; k++)
            sum += p[k];
    }
    lh_gguf_dump(f, sink, 4);
    return sum;
}

static void test_fuzz_flips(void)
{
    gbuf g;
    layout L;
    std_file(&g, &L);
    unsigned char *orig = malloc(g.n);
    memcpy(orig, g.b, g.n);
    FILE *sink = fopen("/dev/null", "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(sink);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int opened = 0, failed = 0;
    /* LH_GGUF_FUZZ_ITERS: more iterations, for a longer run by hand */
    const char *iters = getenv("LH_GGUF_FUZZ_ITERS");
    const int N = iters && atoi(iters) > 0 ? atoi(iters) : 3000;
    for (int it = 0; it < N; it++) {
        memcpy(g.b, orig, g.n);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int flips = 1 + (int)(x % 4);
        /* most flips land in the header and metadata, where the parsing is */
        size_t span = (it % 4 == 3) ? g.n : L.data_off;
        for (int k = 0; k < flips; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t at = (size_t)(x % span);
            uint8_t v = (uint8_t)(x >> 32);
            if ((x >> 40) & 1)
                g.b[at] ^= (uint8_t)(1u << (v % 8));
            else
                g.b[at] = v;
        }
        size_t n = g.n;
        if (it % 16 == 5)
            n = (size_t)((x >> 20) % g.n);
        write_file("fuzz.gguf", g.b, n);
        lh_err err = {0};
        lh_gguf_file *f = NULL;
        lh_status st = lh_gguf_open(path_of("fuzz.gguf"), &f, &err);
        if (st == LH_OK) {
            opened++;
            touch_all(f, sink);
            lh_gguf_close(f);
        } else {
            failed++;
            CU_ASSERT_PTR_NULL(f);
            CU_ASSERT(st == LH_E_CONFIG || st == LH_E_UNSUPPORTED);
            CU_ASSERT(strstr(err.msg, "fuzz.gguf") != NULL);
        }
    }
    fclose(sink);
    if (iters)
        fprintf(stderr, "\n    %d flipped files: %d opened, %d refused\n", N, opened, failed);
    CU_ASSERT_EQUAL(opened + failed, N);
    CU_ASSERT(failed > N / 4);
    CU_ASSERT(opened > 0);
    free(orig);
    free(g.b);
}

/* ---- the default model's GGUF ----------------------------------------------------------------- */

static const char *default_gguf(char *buf, size_t n)
{
    const char *e = getenv("LH_TEST_GGUF");
    if (e && *e) {
        snprintf(buf, n, "%s", e);
        return buf;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, n, "%s/llmhost/gguf/SmolLM2-135M-Instruct.Q4_1.gguf", xdg);
    else if (home && *home)
        snprintf(buf, n, "%s/.cache/llmhost/gguf/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else
        return NULL;
    return buf;
}

static void test_default_model_gguf(void)
{
    char path[4096];
    struct stat sb;
    if (!default_gguf(path, sizeof path) || stat(path, &sb) != 0) {
        LH_TEST_SKIP("no default-model GGUF (set LH_TEST_GGUF, or run "
                     "tools/default_model/fetch_gguf.py to cache "
                     "SmolLM2-135M-Instruct.Q4_1.gguf under ~/.cache/llmhost/gguf)");
        return;
    }
    lh_err err = {0};
    lh_gguf_file *f = NULL;
    lh_status st = lh_gguf_open(path, &f, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n    %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT_EQUAL(lh_gguf_version(f), 3);
    CU_ASSERT_EQUAL(lh_gguf_kv_count(f), 33);
    CU_ASSERT_EQUAL(lh_gguf_tensor_count(f), 272);
    CU_ASSERT_EQUAL(lh_gguf_alignment(f), 32);
    CU_ASSERT_EQUAL(lh_gguf_data_offset(f), 1785664);

    const char *s;
    size_t len;
    CU_ASSERT_EQUAL(lh_gguf_get_string(f, "general.architecture", &s, &len, &err), LH_OK);
    CU_ASSERT(len == 5 && memcmp(s, "llama", 5) == 0);
    int64_t v;
    static const struct { const char *key; int64_t want; } K[] = {
        {"llama.block_count", 30},          {"llama.context_length", 8192},
        {"llama.embedding_length", 576},    {"llama.feed_forward_length", 1536},
        {"llama.attention.head_count", 9},  {"llama.attention.head_count_kv", 3},
        {"llama.vocab_size", 49152},        {"llama.rope.dimension_count", 64},
        {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2},
    };
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) {
        CU_ASSERT_EQUAL(lh_gguf_get_int(f, K[i].key, 0, INT32_MAX, &v, &err), LH_OK);
        CU_ASSERT_EQUAL(v, K[i].want);
    }
    double d;
    CU_ASSERT_EQUAL(lh_gguf_get_float(f, "llama.rope.freq_base", &d, &err), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(d, 100000.0, 0);
    CU_ASSERT_EQUAL(lh_gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &d, &err),
                    LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(d, 1e-5, 1e-9);
    bool b = true;
    CU_ASSERT_EQUAL(lh_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b, &err), LH_OK);
    CU_ASSERT(!b);
    lh_gguf_type et;
    uint64_t n;
    CU_ASSERT_EQUAL(lh_gguf_get_array(f, "tokenizer.ggml.tokens", &et, &n, &err), LH_OK);
    CU_ASSERT_EQUAL(et, LH_GGUF_STRING);
    CU_ASSERT_EQUAL(n, 49152);
    CU_ASSERT_EQUAL(lh_gguf_get_array_string(f, "tokenizer.ggml.tokens", 1, &s, &len, &err),
                    LH_OK);
    CU_ASSERT(len == 12 && memcmp(s, "<|im_start|>", 12) == 0);
    CU_ASSERT(lh_gguf_contains(f, s, len));
    CU_ASSERT_EQUAL(lh_gguf_get_array_string(f, "tokenizer.ggml.tokens", 49151, &s, &len, &err),
                    LH_OK);
    CU_ASSERT_EQUAL(lh_gguf_get_array(f, "tokenizer.ggml.merges", &et, &n, &err), LH_OK);
    CU_ASSERT_EQUAL(n, 48900);
    CU_ASSERT_EQUAL(lh_gguf_get_array_int(f, "tokenizer.ggml.token_type", 0, 0, 10, &v, &err),
                    LH_OK);

    /* every tensor inside the file, aligned, and the data section exactly covered */
    size_t msize;
    lh_gguf_map_base(f, &msize);
    uint64_t total = 0, max_end = 0;
    for (size_t i = 0; i < lh_gguf_tensor_count(f); i++) {
        const lh_gguf_tensor *t = lh_gguf_tensor_at(f, i);
        CU_ASSERT(lh_gguf_contains(f, t->data, (size_t)t->size));
        CU_ASSERT(t->file_offset + t->size <= msize);
        CU_ASSERT_EQUAL(t->file_offset % 32, 0);
        CU_ASSERT(t->type == 0 || t->type == 3 || t->type == 8);
        total += t->size;
        if (t->offset + t->size > max_end)
            max_end = t->offset + t->size;
    }
    CU_ASSERT(total <= lh_gguf_data_size(f));
    CU_ASSERT(max_end <= lh_gguf_data_size(f));
    CU_ASSERT(lh_gguf_data_size(f) - max_end < 32);
    const lh_gguf_tensor *t = lh_gguf_find_tensor(f, "token_embd.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->n_dims, 2);
    CU_ASSERT_EQUAL(t->dims[0], 576);
    CU_ASSERT_EQUAL(t->dims[1], 49152);
    t = lh_gguf_find_tensor(f, "blk.29.ffn_down.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->dims[0], 1536);
    CU_ASSERT_EQUAL(t->dims[1], 576);
    CU_ASSERT_PTR_NULL(lh_gguf_find_tensor(f, "output.weight")); /* tied embeddings */

    /* LH_GGUF_DUMP=FILE writes the dump, for cross-checks against gguf-py */
    const char *dump = getenv("LH_GGUF_DUMP");
    if (dump && *dump) {
        FILE *out = fopen(dump, "w");
        if (out) {
            lh_gguf_dump(f, out, 4);
            fclose(out);
        }
    }
    lh_gguf_close(f);
}

static CU_TestInfo valid_tests[] = {
    {"valid v3 file: every metadata type, getters, tensors, dump", test_valid_file},
    {"v2, alignment 64, scalar/Q4_K/BF16 tensors, no tensors", test_valid_variants},
    {"ggml type ids, names and block sizes", test_ggml_types},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo malformed_tests[] = {
    {"file level: missing, directory, device, fifo, empty, truncated header", test_file_level},
    {"header: magic, versions, big-endian, absurd counts", test_header_errors},
    {"metadata: long strings, keys, value types, arrays, bools, duplicates, nesting",
     test_metadata_errors},
    {"general.alignment: 0, not a power of two, wrong type, huge", test_alignment_errors},
    {"tensors: names, dims, types, offsets, alignment, overlaps", test_tensor_errors},
    {"every truncation fails cleanly", test_every_truncation},
    {"3000 random byte flips never crash", test_fuzz_flips},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo real_tests[] = {
    {"the default model's GGUF (SmolLM2-135M Q4_1)", test_default_model_gguf},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"weights: gguf valid files", setup, teardown, NULL, NULL, valid_tests},
    {"weights: gguf malformed files", setup, teardown, NULL, NULL, malformed_tests},
    {"weights: gguf default model", NULL, NULL, NULL, NULL, real_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    lh_log_set_level(LH_LOG_ERROR);
    return lh_test_main(argc, argv, suites);
}
