/* Safetensors reader, checkpoints (single and sharded), conversion helper, progress bar. */
#include "runner.h"
#include "st_writer.h"

#include "core/log.h"
#include "lh_kernels.h"
#include "weights/bind.h"
#include "weights/checkpoint.h"
#include "weights/progress.h"
#include "weights/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- helpers ---- */

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

static char *path_of(const char *dir, const char *name)
{
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static bool has(const char *msg, const char *needle)
{
    if (!strstr(msg, needle)) {
        fprintf(stderr, "\n    message lacks \"%s\":\n    %s\n", needle, msg);
        return false;
    }
    return true;
}

/* Opens dir/file expecting failure with `code` and a message holding the file name and each
 * of up to two substrings. */
static void expect_open_fail(const char *file, lh_status code, const char *s1, const char *s2)
{
    lh_err err = {0};
    lh_st_file *f = (lh_st_file *)(uintptr_t)1;
    lh_status st = lh_st_open(path_of(g_dir, file), &f, &err);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT_PTR_NULL(f);
    if (st != code)
        fprintf(stderr, "\n    %s: got %s: %s\n", file, lh_status_name(st), err.msg);
    CU_ASSERT(has(err.msg, file));
    if (s1)
        CU_ASSERT(has(err.msg, s1));
    if (s2)
        CU_ASSERT(has(err.msg, s2));
    if (st == LH_OK)
        lh_st_close(f);
}

/* Writes a file whose header is `header` (data_len zero bytes of data) and expects failure. */
static void expect_header_fail(const char *file, const char *header, size_t data_len,
                               lh_status code, const char *s1, const char *s2)
{
    unsigned char *data = calloc(data_len ? data_len : 1, 1);
    CU_ASSERT_EQUAL_FATAL(write_raw_st(g_dir, file, strlen(header), header, data, data_len), 0);
    free(data);
    expect_open_fail(file, code, s1, s2);
}

static lh_st_file *open_ok(const char *path)
{
    lh_err err = {0};
    lh_st_file *f = NULL;
    lh_status st = lh_st_open(path, &f, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n    open %s: %s\n", path, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    return f;
}

/* ---- reader: good files ---- */

static void test_good_file(void)
{
    float f32[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -7.0f};
    uint16_t bf16[4], f16[3];
    for (int i = 0; i < 4; i++)
        bf16[i] = lh_k_f32_to_bf16((float)i + 0.5f);
    for (int i = 0; i < 3; i++)
        f16[i] = lh_k_f32_to_f16((float)i * -0.25f);
    stw w;
    stw_init(&w);
    const int64_t s23[] = {2, 3}, s4[] = {4}, s31[] = {3, 1};
    stw_add(&w, "b.weight", "F32", 2, s23, f32, sizeof f32);
    stw_add(&w, "a.weight", "BF16", 1, s4, bf16, sizeof bf16);
    stw_add(&w, "c.bias", "F16", 2, s31, f16, sizeof f16);
    stw_metadata(&w, "format", "pt");
    CU_ASSERT_EQUAL_FATAL(stw_write(&w, g_dir, "good.safetensors"), 0);
    stw_free(&w);

    lh_st_file *f = open_ok(path_of(g_dir, "good.safetensors"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(lh_st_count(f), 3);
    /* sorted by name */
    CU_ASSERT_STRING_EQUAL(lh_st_at(f, 0)->name, "a.weight");
    CU_ASSERT_STRING_EQUAL(lh_st_at(f, 1)->name, "b.weight");
    CU_ASSERT_STRING_EQUAL(lh_st_at(f, 2)->name, "c.bias");
    CU_ASSERT_PTR_NULL(lh_st_at(f, 3));
    CU_ASSERT_STRING_EQUAL(lh_st_metadata(f, "format"), "pt");
    CU_ASSERT_PTR_NULL(lh_st_metadata(f, "nope"));
    CU_ASSERT_PTR_NULL(lh_st_find(f, "nope"));

    const lh_st_tensor *b = lh_st_find(f, "b.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(b->st_dtype, LH_ST_F32);
    CU_ASSERT_EQUAL(b->dtype, LH_DTYPE_F32);
    CU_ASSERT_EQUAL(b->ndim, 2);
    CU_ASSERT_EQUAL(b->shape[0], 2);
    CU_ASSERT_EQUAL(b->shape[1], 3);
    CU_ASSERT_EQUAL(b->numel, 6);
    CU_ASSERT_EQUAL(b->begin, 0);
    CU_ASSERT_EQUAL(b->end, 24);
    CU_ASSERT_TRUE(b->aligned);
    CU_ASSERT_PTR_EQUAL(b->file, f);
    CU_ASSERT_EQUAL(memcmp(b->data, f32, sizeof f32), 0);
    CU_ASSERT_TRUE(lh_st_contains(f, b->data, 24));

    const lh_st_tensor *a = lh_st_find(f, "a.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_EQUAL(a->dtype, LH_DTYPE_BF16);
    CU_ASSERT_EQUAL(memcmp(a->data, bf16, sizeof bf16), 0);
    const lh_st_tensor *c = lh_st_find(f, "c.bias");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(c->dtype, LH_DTYPE_F16);
    CU_ASSERT_EQUAL(memcmp(c->data, f16, sizeof f16), 0);

    lh_tensor t;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_st_tensor_view(b, &t, &err), LH_OK);
    CU_ASSERT_EQUAL(t.dtype, LH_DTYPE_F32);
    CU_ASSERT_EQUAL(t.ndim, 2);
    CU_ASSERT_EQUAL(t.shape[1], 3);
    CU_ASSERT_EQUAL(t.stride[0], 3);
    CU_ASSERT_EQUAL(t.device.kind, LH_DEVICE_CPU);
    CU_ASSERT_PTR_EQUAL(t.data, b->data);

    size_t size = 0;
    const void *base = lh_st_map_base(f, &size);
    CU_ASSERT_PTR_NOT_NULL(base);
    CU_ASSERT(size > 8 + 24 + 8 + 6);
    CU_ASSERT_FALSE(lh_st_contains(f, (const char *)base + size - 2, 4));
    CU_ASSERT_STRING_EQUAL(lh_st_path(f), path_of(g_dir, "good.safetensors"));
    lh_st_close(f);
    lh_st_close(NULL);
}

static void test_scalar_empty_and_other_dtypes(void)
{
    stw w;
    stw_init(&w);
    float one = 1.5f;
    int64_t i64[2] = {7, -9};
    const int64_t s0[] = {0, 5}, s2[] = {2}, s3[] = {3};
    stw_add(&w, "scalar", "F32", 0, NULL, &one, 4);
    stw_add(&w, "empty", "F32", 2, s0, NULL, 0);
    stw_add(&w, "ids", "I64", 1, s2, i64, sizeof i64);
    unsigned char fp8[3] = {1, 2, 3};
    stw_add(&w, "fp8", "F8_E4M3", 1, s3, fp8, 3);
    unsigned char f4[1] = {0x21};
    stw_add(&w, "f4", "F4", 1, s2, f4, 1);
    stw_add(&w, "empty2", "BF16", 1, s0, NULL, 0); /* same offsets as its neighbours */
    CU_ASSERT_EQUAL_FATAL(stw_write(&w, g_dir, "misc.safetensors"), 0);
    stw_free(&w);

    lh_st_file *f = open_ok(path_of(g_dir, "misc.safetensors"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(lh_st_count(f), 6);
    const lh_st_tensor *s = lh_st_find(f, "scalar");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->ndim, 0);
    CU_ASSERT_EQUAL(s->numel, 1);
    const lh_st_tensor *e = lh_st_find(f, "empty");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(e->numel, 0);
    CU_ASSERT_PTR_NULL(e->data);
    const lh_st_tensor *ids = lh_st_find(f, "ids");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
    CU_ASSERT_EQUAL(ids->st_dtype, LH_ST_I64);
    CU_ASSERT_EQUAL(ids->dtype, LH_DTYPE_INVALID);
    CU_ASSERT_STRING_EQUAL(lh_st_dtype_name(ids->st_dtype), "I64");
    CU_ASSERT_EQUAL(lh_st_find(f, "fp8")->st_dtype, LH_ST_F8_E4M3);
    CU_ASSERT_EQUAL(lh_st_find(f, "f4")->st_dtype, LH_ST_F4);

    lh_tensor t;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_st_tensor_view(ids, &t, &err), LH_E_UNSUPPORTED);
    CU_ASSERT(has(err.msg, "unsupported dtype I64 for tensor ids; supported: F32, F16, BF16"));
    CU_ASSERT(has(err.msg, "misc.safetensors"));
    CU_ASSERT_EQUAL(lh_st_tensor_view(s, &t, &err), LH_OK);
    CU_ASSERT_EQUAL(t.ndim, 0);
    CU_ASSERT_EQUAL(*(const float *)t.data, 1.5f);
    lh_st_close(f);

    /* dtype tables */
    CU_ASSERT_EQUAL(lh_st_dtype_parse("BF16"), LH_ST_BF16);
    CU_ASSERT_EQUAL(lh_st_dtype_parse("bf16"), LH_ST_INVALID);
    CU_ASSERT_EQUAL(lh_st_dtype_parse(NULL), LH_ST_INVALID);
    CU_ASSERT_EQUAL(lh_st_dtype_bits(LH_ST_F64), 64);
    CU_ASSERT_EQUAL(lh_st_dtype_bits(LH_ST_BOOL), 8);
    CU_ASSERT_EQUAL(lh_st_dtype_bits(LH_ST_INVALID), 0);
    CU_ASSERT_STRING_EQUAL(lh_st_dtype_name(LH_ST_DTYPE_COUNT_), "?");
    CU_ASSERT_STRING_EQUAL(lh_st_dtype_name_of(LH_DTYPE_F16), "F16");
    CU_ASSERT_PTR_NULL(lh_st_dtype_name_of(LH_DTYPE_INT8));
}

static void test_misaligned_data(void)
{
    float v[4] = {1, 2, 3, 4};
    stw w;
    stw_init(&w);
    w.data_misalign = 1;
    const int64_t s4[] = {4};
    stw_add(&w, "w", "F32", 1, s4, v, sizeof v);
    unsigned char u8[1] = {9};
    const int64_t s1[] = {1};
    stw_add(&w, "byte", "U8", 1, s1, u8, 1);
    CU_ASSERT_EQUAL_FATAL(stw_write(&w, g_dir, "odd.safetensors"), 0);
    stw_free(&w);
    lh_st_file *f = open_ok(path_of(g_dir, "odd.safetensors"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    const lh_st_tensor *t = lh_st_find(f, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_FALSE(t->aligned);
    CU_ASSERT_EQUAL(memcmp(t->data, v, sizeof v), 0);
    CU_ASSERT_TRUE(lh_st_find(f, "byte")->aligned); /* bytes are always aligned */
    lh_tensor view;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_st_tensor_view(t, &view, &err), LH_E_UNSUPPORTED);
    CU_ASSERT(has(err.msg, "not aligned"));
    lh_st_close(f);
}

/* ---- reader: every bad-input class ---- */

static void test_file_level_errors(void)
{
    expect_open_fail("does-not-exist.safetensors", LH_E_IO, "cannot open", NULL);
    CU_ASSERT_EQUAL_FATAL(mkdir(path_of(g_dir, "adir.safetensors"), 0755), 0);
    expect_open_fail("adir.safetensors", LH_E_IO, "is a directory", NULL);
    CU_ASSERT_EQUAL_FATAL(mkfifo(path_of(g_dir, "fifo.safetensors"), 0600), 0);
    expect_open_fail("fifo.safetensors", LH_E_IO, "not a regular file", NULL);
    CU_ASSERT_EQUAL_FATAL(write_bytes(g_dir, "empty.safetensors", "", 0), 0);
    expect_open_fail("empty.safetensors", LH_E_CONFIG, "empty file", NULL);
    CU_ASSERT_EQUAL_FATAL(write_bytes(g_dir, "short.safetensors", "\x02\0\0", 3), 0);
    expect_open_fail("short.safetensors", LH_E_CONFIG, "3 bytes", "shorter than the 8-byte");
    /* absurd header length */
    CU_ASSERT_EQUAL_FATAL(write_raw_st(g_dir, "absurd.safetensors", UINT64_C(200000000), "{}",
                                       NULL, 0),
                          0);
    expect_open_fail("absurd.safetensors", LH_E_CONFIG, "header length 200000000 is absurd",
                     NULL);
    CU_ASSERT_EQUAL_FATAL(write_raw_st(g_dir, "huge.safetensors", UINT64_MAX, "{}", NULL, 0), 0);
    expect_open_fail("huge.safetensors", LH_E_CONFIG, "absurd", NULL);
    /* header length beyond the file */
    CU_ASSERT_EQUAL_FATAL(write_raw_st(g_dir, "long.safetensors", 100, "{}", NULL, 0), 0);
    expect_open_fail("long.safetensors", LH_E_CONFIG, "header length 100 is larger than the file",
                     NULL);
    /* just the 8-byte length 0: an empty header is not JSON */
    CU_ASSERT_EQUAL_FATAL(write_raw_st(g_dir, "zero.safetensors", 0, "", NULL, 0), 0);
    expect_open_fail("zero.safetensors", LH_E_CONFIG, "not valid JSON", NULL);
}

static void test_header_errors(void)
{
    expect_header_fail("notjson.safetensors", "{\"a\": ", 0, LH_E_CONFIG, "not valid JSON", NULL);
    expect_header_fail("array.safetensors", "[1, 2]", 0, LH_E_CONFIG, "not a JSON object", NULL);
    expect_header_fail("dup.safetensors",
                       "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                       8, LH_E_CONFIG, "duplicate", "not valid JSON");
    expect_header_fail("entry.safetensors", "{\"w.weight\": [1, 2]}", 0, LH_E_CONFIG,
                       "tensor 'w.weight'", "not an object");
    expect_header_fail("nodtype.safetensors", "{\"w\": {\"shape\":[1],\"data_offsets\":[0,4]}}",
                       4, LH_E_CONFIG, "tensor 'w'", "\"dtype\" is missing");
    expect_header_fail("unknown.safetensors",
                       "{\"w\": {\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                       LH_E_CONFIG, "tensor 'w': unknown dtype 'F17'", "BF16");
    expect_header_fail("lower.safetensors",
                       "{\"w\": {\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
                       LH_E_CONFIG, "unknown dtype 'bf16'", NULL);
    expect_header_fail("shape1.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}}", 12,
                       LH_E_CONFIG, "tensor 'w'", "\"shape\" is not an array");
    expect_header_fail("shape2.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[3,-1],\"data_offsets\":[0,12]}}",
                       12, LH_E_CONFIG, "tensor 'w'", "shape[1] is not a non-negative integer");
    expect_header_fail("shape3.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
                       LH_E_CONFIG, "shape[0] is not a non-negative integer", NULL);
    expect_header_fail("shape4.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}",
                       8, LH_E_CONFIG, "shape[0]", NULL);
    expect_header_fail("noshape.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, LH_E_CONFIG,
                       "\"shape\" is missing", NULL);
    expect_header_fail("dims.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                       "\"data_offsets\":[0,4]}}",
                       4, LH_E_CONFIG, "9 dimensions", NULL);
    expect_header_fail("overflow.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[4611686018427387904, 4],"
                       "\"data_offsets\":[0,4]}}",
                       4, LH_E_CONFIG, "tensor 'w'", "overflows");
    expect_header_fail("overflow2.safetensors",
                       "{\"w\": {\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                       "\"data_offsets\":[0,4]}}",
                       4, LH_E_CONFIG, "tensor 'w'", "overflows");
    expect_header_fail("f4odd.safetensors",
                       "{\"w\": {\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
                       LH_E_CONFIG, "not a whole number of bytes", NULL);
    expect_header_fail("size.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}",
                       24, LH_E_CONFIG, "tensor 'w'",
                       "shape [2, 3] x F32 needs 24 bytes but data_offsets [0, 20] span 20");
    expect_header_fail("order.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
                       LH_E_CONFIG, "tensor 'w'", "begin 8 > end 4");
    expect_header_fail("beyond.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
                       LH_E_CONFIG, "tensor 'w'", "end 16 lies beyond the data buffer (12 bytes)");
    expect_header_fail("offs1.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                       LH_E_CONFIG, "tensor 'w'", "\"data_offsets\" is malformed");
    expect_header_fail("offs2.safetensors",
                       "{\"w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
                       LH_E_CONFIG, "\"data_offsets\" is malformed", NULL);
    expect_header_fail("offs3.safetensors", "{\"w\": {\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                       LH_E_CONFIG, "\"data_offsets\" is missing", NULL);
    expect_header_fail("overlap.safetensors",
                       "{\"a\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                       "\"b\": {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                       16, LH_E_CONFIG, "'a' [0, 16) and 'b' [8, 16) overlap", NULL);
    expect_header_fail("overlap2.safetensors",
                       "{\"a\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[4,20]},"
                       "\"b\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                       20, LH_E_CONFIG, "overlap", "'b' [0, 16)");
    /* a tensor nested inside a longer one, after a shorter one: still found */
    expect_header_fail("overlap3.safetensors",
                       "{\"a\": {\"dtype\":\"U8\",\"shape\":[40],\"data_offsets\":[0,40]},"
                       "\"b\": {\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]},"
                       "\"c\": {\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[20,24]}}",
                       40, LH_E_CONFIG, "overlap", NULL);
    expect_header_fail("meta1.safetensors", "{\"__metadata__\": [1]}", 0, LH_E_CONFIG,
                       "\"__metadata__\" is not an object", NULL);
    expect_header_fail("meta2.safetensors", "{\"__metadata__\": {\"format\": 1}}", 0,
                       LH_E_CONFIG, "\"__metadata__\" key 'format' is not a string", NULL);

    /* valid edge: adjacent tensors, a gap, metadata null, trailing header spaces */
    unsigned char data[40] = {0};
    const char *ok = "{\"__metadata__\": null,"
                     "\"a\": {\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                     "\"b\": {\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]},"
                     "\"c\": {\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[20,24]}}   ";
    CU_ASSERT_EQUAL_FATAL(write_raw_st(g_dir, "ok.safetensors", strlen(ok), ok, data, 40), 0);
    lh_st_file *f = open_ok(path_of(g_dir, "ok.safetensors"));
    CU_ASSERT_EQUAL(lh_st_count(f), 3);
    CU_ASSERT_PTR_NULL(lh_st_metadata(f, "format"));
    lh_st_close(f);
    /* an empty header object is a valid, empty file */
    CU_ASSERT_EQUAL_FATAL(write_raw_st(g_dir, "none.safetensors", 2, "{}", NULL, 0), 0);
    f = open_ok(path_of(g_dir, "none.safetensors"));
    CU_ASSERT_EQUAL(lh_st_count(f), 0);
    CU_ASSERT_PTR_NULL(lh_st_find(f, "x"));
    lh_st_close(f);
}

/* ---- checkpoints ---- */

static char *fresh_dir(void)
{
    char *d = lh_test_mkdtemp();
    CU_ASSERT_PTR_NOT_NULL(d);
    return d;
}

static void write_shard(const char *dir, const char *file, const char *const *names, size_t n,
                        float base)
{
    stw w;
    stw_init(&w);
    for (size_t i = 0; i < n; i++) {
        float v[2] = {base + (float)i, base - (float)i};
        const int64_t s2[] = {2};
        stw_add(&w, names[i], "F32", 1, s2, v, sizeof v);
    }
    CU_ASSERT_EQUAL(stw_write(&w, dir, file), 0);
    stw_free(&w);
}

static lh_status ck_open(const char *path, lh_checkpoint **ck, lh_err *err)
{
    *ck = NULL;
    lh_status st = lh_checkpoint_open(path, ck, err);
    if (st != LH_OK)
        CU_ASSERT_PTR_NULL(*ck);
    return st;
}

static void test_checkpoint_single(void)
{
    char *d = fresh_dir();
    const char *names[] = {"x.weight", "y.weight"};
    write_shard(d, "model.safetensors", names, 2, 1.0f);
    lh_checkpoint *ck;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(ck_open(d, &ck, &err), LH_OK);
    CU_ASSERT_FALSE(lh_checkpoint_sharded(ck));
    CU_ASSERT_EQUAL(lh_checkpoint_file_count(ck), 1);
    CU_ASSERT_EQUAL(lh_checkpoint_count(ck), 2);
    CU_ASSERT_EQUAL(lh_checkpoint_data_bytes(ck), 16);
    size_t idx = 99;
    const lh_st_tensor *t = lh_checkpoint_find(ck, "y.weight", &idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(idx, 1);
    CU_ASSERT_PTR_EQUAL(lh_checkpoint_at(ck, 1), t);
    CU_ASSERT_PTR_NULL(lh_checkpoint_find(ck, "z", NULL));
    CU_ASSERT_STRING_EQUAL(lh_checkpoint_path(ck), d);
    lh_checkpoint_close(ck);
    /* the file itself */
    CU_ASSERT_EQUAL(ck_open(path_of(d, "model.safetensors"), &ck, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_checkpoint_count(ck), 2);
    lh_checkpoint_close(ck);
    lh_checkpoint_close(NULL);
    lh_test_rmtree(d);
    free(d);
}

static void test_checkpoint_missing(void)
{
    char *d = fresh_dir();
    lh_checkpoint *ck;
    lh_err err = {0};
    CU_ASSERT_EQUAL(ck_open(d, &ck, &err), LH_E_IO);
    CU_ASSERT(has(err.msg, d));
    CU_ASSERT(has(err.msg, "no model.safetensors or model.safetensors.index.json"));
    CU_ASSERT_EQUAL(lh_test_write_file(d, "pytorch_model.bin", "x"), 0);
    CU_ASSERT_EQUAL(ck_open(d, &ck, &err), LH_E_IO);
    CU_ASSERT(has(err.msg, "PyTorch .bin weights only"));
    CU_ASSERT_EQUAL(ck_open(path_of(d, "nope"), &ck, &err), LH_E_IO);
    CU_ASSERT(has(err.msg, "cannot open checkpoint"));
    /* a corrupt single file keeps the reader's class and names the file */
    CU_ASSERT_EQUAL(write_bytes(d, "model.safetensors", "abc", 3), 0);
    CU_ASSERT_EQUAL(ck_open(d, &ck, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "model.safetensors: file is 3 bytes"));
    lh_test_rmtree(d);
    free(d);
}

static const char *const S1[] = {"a.weight", "b.weight"};
static const char *const S2[] = {"c.weight"};

static char *sharded_dir(const char *index_json)
{
    char *d = fresh_dir();
    write_shard(d, "model-00001-of-00002.safetensors", S1, 2, 10.0f);
    write_shard(d, "model-00002-of-00002.safetensors", S2, 1, 20.0f);
    CU_ASSERT_EQUAL(lh_test_write_file(d, "model.safetensors.index.json", index_json), 0);
    return d;
}

#define GOOD_INDEX                                                                           \
    "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"                                 \
    "\"a.weight\": \"model-00001-of-00002.safetensors\","                                    \
    "\"c.weight\": \"model-00002-of-00002.safetensors\","                                    \
    "\"b.weight\": \"model-00001-of-00002.safetensors\"}}"

static void test_checkpoint_sharded(void)
{
    char *d = sharded_dir(GOOD_INDEX);
    lh_checkpoint *ck;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(ck_open(d, &ck, &err), LH_OK);
    CU_ASSERT_TRUE(lh_checkpoint_sharded(ck));
    CU_ASSERT_EQUAL(lh_checkpoint_file_count(ck), 2); /* each shard opened once */
    CU_ASSERT_EQUAL(lh_checkpoint_count(ck), 3);
    CU_ASSERT_STRING_EQUAL(lh_checkpoint_at(ck, 0)->name, "a.weight");
    CU_ASSERT_STRING_EQUAL(lh_checkpoint_at(ck, 1)->name, "b.weight");
    CU_ASSERT_STRING_EQUAL(lh_checkpoint_at(ck, 2)->name, "c.weight");
    const lh_st_tensor *c = lh_checkpoint_find(ck, "c.weight", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(((const float *)c->data)[0], 20.0f);
    CU_ASSERT(has(lh_st_path(c->file), "model-00002-of-00002.safetensors"));
    const lh_st_tensor *b = lh_checkpoint_find(ck, "b.weight", NULL);
    CU_ASSERT_EQUAL(((const float *)b->data)[0], 11.0f);
    CU_ASSERT_EQUAL(lh_checkpoint_data_bytes(ck), 24);
    lh_checkpoint_close(ck);
    /* the index file itself */
    CU_ASSERT_EQUAL(ck_open(path_of(d, "model.safetensors.index.json"), &ck, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_checkpoint_count(ck), 3);
    lh_checkpoint_close(ck);
    /* model.safetensors wins over the index when both exist (as in transformers) */
    const char *one[] = {"only.weight"};
    write_shard(d, "model.safetensors", one, 1, 0.0f);
    CU_ASSERT_EQUAL(ck_open(d, &ck, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_checkpoint_count(ck), 1);
    CU_ASSERT_FALSE(lh_checkpoint_sharded(ck));
    lh_checkpoint_close(ck);
    lh_test_rmtree(d);
    free(d);
}

static void expect_index_fail(const char *index_json, lh_status code, const char *s1,
                              const char *s2, const char *s3)
{
    char *d = sharded_dir(index_json);
    lh_checkpoint *ck;
    lh_err err = {0};
    lh_status st = ck_open(d, &ck, &err);
    CU_ASSERT_EQUAL(st, code);
    if (st != code)
        fprintf(stderr, "\n    got %s: %s\n", lh_status_name(st), err.msg);
    CU_ASSERT(has(err.msg, "model.safetensors.index.json"));
    if (s1)
        CU_ASSERT(has(err.msg, s1));
    if (s2)
        CU_ASSERT(has(err.msg, s2));
    if (s3)
        CU_ASSERT(has(err.msg, s3));
    if (st == LH_OK)
        lh_checkpoint_close(ck);
    lh_test_rmtree(d);
    free(d);
}

static void test_checkpoint_index_errors(void)
{
    expect_index_fail("{\"weight_map\": ", LH_E_CONFIG, "not valid JSON", NULL, NULL);
    expect_index_fail("[]", LH_E_CONFIG, "not a JSON object", NULL, NULL);
    expect_index_fail("{\"metadata\": {}}", LH_E_CONFIG, "\"weight_map\" is missing", NULL,
                      NULL);
    expect_index_fail("{\"weight_map\": []}", LH_E_CONFIG, "\"weight_map\" is not an object",
                      NULL, NULL);
    expect_index_fail("{\"weight_map\": {}}", LH_E_CONFIG, "\"weight_map\" is empty", NULL,
                      NULL);
    expect_index_fail("{\"weight_map\": {\"a.weight\": 3}}", LH_E_CONFIG, "'a.weight'",
                      "not a string", NULL);
    expect_index_fail("{\"weight_map\": {\"a.weight\": \"sub/model.safetensors\"}}",
                      LH_E_CONFIG, "'sub/model.safetensors'", "bare file names", NULL);
    expect_index_fail("{\"weight_map\": {\"a.weight\": \"../model.safetensors\"}}", LH_E_CONFIG,
                      "bare file names", NULL, NULL);
    expect_index_fail("{\"weight_map\": {\"a.weight\": \"..\"}}", LH_E_CONFIG, "bare file names",
                      NULL, NULL);
    expect_index_fail("{\"weight_map\": {\"a.weight\": \"\"}}", LH_E_CONFIG, "bare file names",
                      NULL, NULL);
    expect_index_fail("{\"weight_map\": {\"a.weight\": \"/etc/passwd\"}}", LH_E_CONFIG,
                      "bare file names", NULL, NULL);
    /* a shard that does not exist */
    expect_index_fail("{\"weight_map\": {\"a.weight\": \"model-00009.safetensors\"}}", LH_E_IO,
                      "shard 'model-00009.safetensors'", "cannot open", NULL);
    /* listed in the index, absent from its shard (and present in another) */
    expect_index_fail("{\"weight_map\": {"
                      "\"a.weight\": \"model-00001-of-00002.safetensors\","
                      "\"b.weight\": \"model-00001-of-00002.safetensors\","
                      "\"c.weight\": \"model-00001-of-00002.safetensors\"}}",
                      LH_E_CONFIG, "tensor 'c.weight' is mapped to shard",
                      "model-00001-of-00002.safetensors, which does not contain it", NULL);
    expect_index_fail("{\"weight_map\": {"
                      "\"a.weight\": \"model-00001-of-00002.safetensors\","
                      "\"b.weight\": \"model-00002-of-00002.safetensors\","
                      "\"c.weight\": \"model-00002-of-00002.safetensors\"}}",
                      LH_E_CONFIG,
                      "tensor 'b.weight' is mapped to shard",
                      "model-00002-of-00002.safetensors, which does not contain it",
                      "(it is in ");
    /* listed, in no shard at all */
    expect_index_fail("{\"weight_map\": {"
                      "\"a.weight\": \"model-00001-of-00002.safetensors\","
                      "\"b.weight\": \"model-00001-of-00002.safetensors\","
                      "\"c.weight\": \"model-00002-of-00002.safetensors\","
                      "\"d.weight\": \"model-00002-of-00002.safetensors\"}}",
                      LH_E_CONFIG, "tensor 'd.weight'", "does not contain it", NULL);
    /* in a shard, not listed */
    expect_index_fail("{\"weight_map\": {"
                      "\"a.weight\": \"model-00001-of-00002.safetensors\","
                      "\"c.weight\": \"model-00002-of-00002.safetensors\"}}",
                      LH_E_CONFIG, "tensor 'b.weight' is in shard",
                      "model-00001-of-00002.safetensors but the index does not list it", NULL);
    /* in a shard, mapped to another one that also has it: duplicate across shards */
    {
        char *d = sharded_dir("{\"weight_map\": {"
                              "\"a.weight\": \"model-00001-of-00002.safetensors\","
                              "\"b.weight\": \"model-00001-of-00002.safetensors\","
                              "\"c.weight\": \"model-00002-of-00002.safetensors\"}}");
        const char *dup[] = {"a.weight", "c.weight"};
        write_shard(d, "model-00002-of-00002.safetensors", dup, 2, 5.0f);
        lh_checkpoint *ck;
        lh_err err = {0};
        CU_ASSERT_EQUAL(ck_open(d, &ck, &err), LH_E_CONFIG);
        CU_ASSERT(has(err.msg, "tensor 'a.weight' is in shard"));
        CU_ASSERT(has(err.msg, "model-00002-of-00002.safetensors but the index maps it to "
                               "model-00001-of-00002.safetensors"));
        lh_test_rmtree(d);
        free(d);
    }
    /* a corrupt shard: the reader's error, prefixed with the shard and the index */
    {
        char *d = sharded_dir(GOOD_INDEX);
        CU_ASSERT_EQUAL(write_raw_st(d, "model-00002-of-00002.safetensors", 7, "{\"c\": 1}",
                                     NULL, 0),
                        0);
        lh_checkpoint *ck;
        lh_err err = {0};
        CU_ASSERT_EQUAL(ck_open(d, &ck, &err), LH_E_CONFIG);
        CU_ASSERT(has(err.msg, "shard 'model-00002-of-00002.safetensors' named by"));
        CU_ASSERT(has(err.msg, "not valid JSON"));
        lh_test_rmtree(d);
        free(d);
    }
}

/* ---- conversion helper ---- */

static void test_convert_all_directions(void)
{
    enum { N = 1000 };
    float src_f32[N + 1];
    for (int i = 0; i < N + 1; i++)
        src_f32[i] = ((float)i - 500.0f) * 0.0371f;
    uint16_t src_bf16[N + 1], src_f16[N + 1];
    lh_k_convert_f32_to_bf16(src_f32, src_bf16, N + 1);
    lh_k_convert_f32_to_f16(src_f32, src_f16, N + 1);
    const lh_dtype dts[3] = {LH_DTYPE_F32, LH_DTYPE_F16, LH_DTYPE_BF16};
    const void *srcs[3] = {src_f32, src_f16, src_bf16};
    const size_t sizes[3] = {4, 2, 2};
    lh_err err = {0};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int misalign = 0; misalign < 2; misalign++) {
                /* a misaligned copy of the source */
                unsigned char *raw = malloc(N * 4 + 8);
                memcpy(raw + misalign, srcs[a], N * sizes[a]);
                float dst_f32[N];
                uint16_t dst16[N];
                void *dst = dts[b] == LH_DTYPE_F32 ? (void *)dst_f32 : (void *)dst16;
                lh_progress pg;
                lh_progress_begin_to(&pg, NULL, false, "x", (int64_t)(N * sizes[b]), 0);
                CU_ASSERT_EQUAL(lh_bind_convert(raw + misalign, dts[a], dst, dts[b], N,
                                                NULL, &pg, &err),
                                LH_OK);
                CU_ASSERT_EQUAL(pg.done, (int64_t)(N * sizes[b]));
                int bad = 0;
                for (int i = 0; i < N; i++) {
                    float x = a == 0   ? src_f32[i]
                              : a == 1 ? lh_k_f16_to_f32(src_f16[i])
                                       : lh_k_bf16_to_f32(src_bf16[i]);
                    if (b == 0)
                        bad += memcmp(&dst_f32[i], &x, 4) != 0;
                    else if (b == 1)
                        bad += dst16[i] != lh_k_f32_to_f16(x);
                    else
                        bad += dst16[i] != lh_k_f32_to_bf16(x);
                }
                CU_ASSERT_EQUAL(bad, 0);
                free(raw);
            }
    float d[2];
    CU_ASSERT_EQUAL(lh_bind_convert(src_f32, LH_DTYPE_INT8, d, LH_DTYPE_F32, 2, NULL, NULL,
                                    &err),
                    LH_E_USAGE);
    CU_ASSERT(has(err.msg, "int8"));
}

static void test_ignorable(void)
{
    CU_ASSERT_TRUE(lh_bind_ignorable("model.layers.0.self_attn.rotary_emb.inv_freq"));
    CU_ASSERT_TRUE(lh_bind_ignorable("rotary_emb.inv_freq"));
    CU_ASSERT_TRUE(lh_bind_ignorable("x.rotary_emb.cos_cached"));
    CU_ASSERT_TRUE(lh_bind_ignorable("x.rotary_emb.sin_cached"));
    CU_ASSERT_FALSE(lh_bind_ignorable("x.my_rotary_emb.inv_freq"));
    CU_ASSERT_FALSE(lh_bind_ignorable("x.inv_freq"));
    CU_ASSERT_FALSE(lh_bind_ignorable(NULL));
}

/* ---- progress bar ---- */

static void test_progress(void)
{
    char line[256];
    lh_progress_format(line, sizeof line, "loading weights", 52, 100);
    CU_ASSERT_STRING_EQUAL(line, "loading weights [##########..........]  52% 52/100 B");
    lh_progress_format(line, sizeof line, "loading weights", INT64_C(1288490189),
                       INT64_C(2469606195));
    CU_ASSERT_STRING_EQUAL(line, "loading weights [##########..........]  52% 1.20/2.30 GiB");
    lh_progress_format(line, sizeof line, "w", 3 << 20, 3 << 20);
    CU_ASSERT_STRING_EQUAL(line, "w [####################] 100% 3.00/3.00 MiB");
    lh_progress_format(line, sizeof line, "w", 5, 0);
    CU_ASSERT(has(line, "100%"));

    /* enabled: draws in place and ends the line */
    FILE *f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    lh_progress p;
    lh_progress_begin_to(&p, f, true, "loading weights", 1000, 0.0);
    for (int i = 0; i < 10; i++)
        lh_progress_add(&p, 100);
    lh_progress_end(&p);
    long n = ftell(f);
    rewind(f);
    char buf[8192] = {0};
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    CU_ASSERT_EQUAL((long)got, n);
    CU_ASSERT(has(buf, "\rloading weights [....................]   0%"));
    CU_ASSERT(has(buf, "100% 1000/1000 B"));
    CU_ASSERT_EQUAL(buf[got - 1], '\n');
    /* the final state is drawn once, not again by end */
    CU_ASSERT_PTR_NULL(strstr(strstr(buf, "100%") + 1, "100%"));
    fclose(f);

    /* rate limit: with a long interval only the first and the final state are drawn */
    f = tmpfile();
    lh_progress_begin_to(&p, f, true, "x", 1000, 3600.0);
    for (int i = 0; i < 9; i++)
        lh_progress_add(&p, 100);
    lh_progress_end(&p);
    rewind(f);
    memset(buf, 0, sizeof buf);
    got = fread(buf, 1, sizeof buf - 1, f);
    int draws = 0;
    for (size_t i = 0; i < got; i++)
        draws += buf[i] == '\r';
    CU_ASSERT_EQUAL(draws, 2);
    CU_ASSERT(has(buf, " 90% 900/1000 B"));
    fclose(f);

    /* disabled: nothing */
    f = tmpfile();
    lh_progress_begin_to(&p, f, false, "x", 1000, 0.0);
    lh_progress_add(&p, 1000);
    lh_progress_end(&p);
    CU_ASSERT_EQUAL(ftell(f), 0);
    fclose(f);
    /* total 0: nothing either, even when enabled */
    f = tmpfile();
    lh_progress_begin_to(&p, f, true, "x", 0, 0.0);
    lh_progress_end(&p);
    CU_ASSERT_EQUAL(ftell(f), 0);
    fclose(f);
}

static CU_TestInfo reader_tests[] = {
    {"good F32/BF16/F16 file, metadata, lookup, view", test_good_file},
    {"scalar, empty, I64/F8/F4 tensors open; views refuse them", test_scalar_empty_and_other_dtypes},
    {"misaligned data is flagged, not viewed", test_misaligned_data},
    {"file-level errors (missing, dir, empty, short, header length)", test_file_level_errors},
    {"header errors, each naming file and tensor", test_header_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo checkpoint_tests[] = {
    {"single model.safetensors", test_checkpoint_single},
    {"no weights in the directory", test_checkpoint_missing},
    {"sharded via index", test_checkpoint_sharded},
    {"index errors", test_checkpoint_index_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo helper_tests[] = {
    {"convert f32/f16/bf16 in all directions, misaligned sources", test_convert_all_directions},
    {"non-parameter buffers", test_ignorable},
    {"progress bar", test_progress},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"weights: safetensors reader", setup, teardown, NULL, NULL, reader_tests},
    {"weights: checkpoints", NULL, NULL, NULL, NULL, checkpoint_tests},
    {"weights: helpers", NULL, NULL, NULL, NULL, helper_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    lh_log_set_level(LH_LOG_ERROR);
    return lh_test_main(argc, argv, suites);
}
