/* Kernel library: lh_k_dequantize (ggml's block formats to f32) against gguf-py.
 *
 * tests/fixtures/quant/<TYPE>.bin holds random raw blocks with extreme scales and quant bytes,
 * <TYPE>.f32 gguf-py's dequantization of them (tools/gen_quant_blocks.py, see the README
 * there). Every type must reproduce those floats bit for bit (memcmp, signed zeros included),
 * on 1 and 2 threads, as the fixture's [rows, cols] and as one block per row. Then the dtype
 * facts of the block types and the refused arguments, each with its status and message. */
#include "ktest.h"

#include <errno.h>

typedef struct qtype {
    const char *file;
    lh_dtype dt;
    int64_t rows, block_elems, block_bytes;
} qtype;

static const qtype types[] = {
    {"F32", LH_DTYPE_F32, 4, 1, 4},       {"F16", LH_DTYPE_F16, 4, 1, 2},
    {"BF16", LH_DTYPE_BF16, 4, 1, 2},     {"Q4_0", LH_DTYPE_Q4_0, 5, 32, 18},
    {"Q4_1", LH_DTYPE_Q4_1, 5, 32, 20},   {"Q5_0", LH_DTYPE_Q5_0, 5, 32, 22},
    {"Q5_1", LH_DTYPE_Q5_1, 5, 32, 24},   {"Q8_0", LH_DTYPE_Q8_0, 5, 32, 34},
    {"Q4_K", LH_DTYPE_Q4_K, 4, 256, 144}, {"Q5_K", LH_DTYPE_Q5_K, 4, 256, 176},
    {"Q6_K", LH_DTYPE_Q6_K, 4, 256, 210},
};
#define N_TYPES (sizeof types / sizeof types[0])

static void *read_fixture(const char *name, const char *ext, size_t *size)
{
    const char *dir = getenv("LH_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/quant/%s.%s", dir ? dir : "tests/fixtures", name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("\n    cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static bool same_bits(const char *what, const float *got, const float *want, int64_t n)
{
    if (memcmp(got, want, (size_t)n * sizeof(float)) == 0)
        return true;
    for (int64_t i = 0; i < n; i++) {
        uint32_t g, w;
        memcpy(&g, &got[i], 4);
        memcpy(&w, &want[i], 4);
        if (g != w) {
            printf("\n    %s: element %lld: got 0x%08x (%.9g), gguf-py 0x%08x (%.9g)", what,
                   (long long)i, (unsigned)g, (double)got[i], (unsigned)w, (double)want[i]);
            break;
        }
    }
    return false;
}

static void check_type(const qtype *q)
{
    size_t nb = 0, nf = 0;
    unsigned char *raw = read_fixture(q->file, "bin", &nb);
    float *want = read_fixture(q->file, "f32", &nf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    const int64_t n = (int64_t)(nf / sizeof(float)), cols = n / q->rows;
    CU_ASSERT_EQUAL_FATAL(n % q->rows, 0);
    CU_ASSERT_EQUAL_FATAL(cols % q->block_elems, 0);
    CU_ASSERT_EQUAL_FATAL((int64_t)nb, n / q->block_elems * q->block_bytes);
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, n), (int64_t)nb);
    float *got = malloc((size_t)n * sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    for (int threads = 1; threads <= 2; threads++) {
        lh_kctx *ctx = lh_k_ctx_create(threads, kt_cpu());
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
        /* the fixture's shape, then one block per row (another row split, other row bytes) */
        const int64_t shapes[2][2] = {{q->rows, cols}, {n / q->block_elems, q->block_elems}};
        for (int s = 0; s < 2; s++) {
            memset(got, 0xa5, (size_t)n * sizeof(float));
            lh_tensor src = kt_t2(q->dt, raw, shapes[s][0], shapes[s][1]);
            lh_tensor dst = kt_t2(LH_DTYPE_F32, got, shapes[s][0], shapes[s][1]);
            lh_status st = lh_k_dequantize(ctx, &src, &dst);
            if (st != LH_OK)
                printf("\n    %s: %s", q->file, lh_k_last_error(ctx));
            CU_ASSERT_EQUAL(st, LH_OK);
            char what[96];
            snprintf(what, sizeof what, "%s [%lld, %lld] on %d thread(s)", q->file,
                     (long long)shapes[s][0], (long long)shapes[s][1], threads);
            CU_ASSERT_TRUE(same_bits(what, got, want, n));
        }
        lh_k_ctx_free(ctx);
    }
    printf("\n    %s: %lld values bit-identical to gguf-py\n    ", q->file, (long long)n);
    free(got);
    free(raw);
    free(want);
}

#define TYPE_TEST(i, name)                                                                    \
    static void test_##name(void) { check_type(&types[i]); }
TYPE_TEST(0, f32)
TYPE_TEST(1, f16)
TYPE_TEST(2, bf16)
TYPE_TEST(3, q4_0)
TYPE_TEST(4, q4_1)
TYPE_TEST(5, q5_0)
TYPE_TEST(6, q5_1)
TYPE_TEST(7, q8_0)
TYPE_TEST(8, q4_k)
TYPE_TEST(9, q5_k)
TYPE_TEST(10, q6_k)

/* ---- dtype facts ---------------------------------------------------------------------------- */

static void test_dtype_facts(void)
{
    static const char *const names[N_TYPES] = {"f32",  "f16",  "bf16", "q4_0", "q4_1", "q5_0",
                                               "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"};
    for (size_t i = 0; i < N_TYPES; i++) {
        const qtype *q = &types[i];
        int64_t be = -7, bb = -7;
        const bool is_block = lh_k_dtype_block(q->dt, &be, &bb);
        CU_ASSERT_EQUAL(is_block, q->block_elems > 1);
        CU_ASSERT_EQUAL(be, q->block_elems);
        CU_ASSERT_EQUAL(bb, q->block_bytes);
        CU_ASSERT_STRING_EQUAL(lh_k_dtype_name(q->dt), names[i]);
        if (!is_block)
            continue;
        CU_ASSERT_EQUAL(lh_k_dtype_bits(q->dt), 0); /* no whole bits per element */
        CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, 0), 0);
        CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, q->block_elems), q->block_bytes);
        CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, 3 * q->block_elems), 3 * q->block_bytes);
        CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, q->block_elems + 1), -1);
        CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, q->block_elems - 1), -1);
        CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, -q->block_elems), -1);
        /* the largest whole-block count: its bytes, or -1 where they overflow (q8_0) */
        int64_t big;
        const bool over = __builtin_mul_overflow(INT64_MAX / q->block_elems, q->block_bytes, &big);
        CU_ASSERT_EQUAL(lh_k_dtype_bytes(q->dt, INT64_MAX / q->block_elems * q->block_elems),
                        over ? -1 : big);
        CU_ASSERT_EQUAL(over, q->dt == LH_DTYPE_Q8_0);
    }
    int64_t be = -1, bb = -1;
    CU_ASSERT_FALSE(lh_k_dtype_block(LH_DTYPE_INT4, &be, &bb));
    CU_ASSERT_EQUAL(be, 2);
    CU_ASSERT_EQUAL(bb, 1);
    CU_ASSERT_FALSE(lh_k_dtype_block(LH_DTYPE_INVALID, &be, &bb));
    CU_ASSERT_EQUAL(be, 0);
    CU_ASSERT_EQUAL(bb, 0);
    CU_ASSERT_FALSE(lh_k_dtype_block((lh_dtype)99, NULL, NULL));
    CU_ASSERT_EQUAL(lh_k_dtype_bytes((lh_dtype)99, 32), -1);
    CU_ASSERT_STRING_EQUAL(lh_k_dtype_name((lh_dtype)99), "invalid");
    CU_ASSERT_STRING_EQUAL(lh_k_dtype_name(LH_DTYPE_INT4), "int4");
    /* the numbering is ABI: appended after int4 */
    CU_ASSERT_EQUAL(LH_DTYPE_Q4_0, 7);
    CU_ASSERT_EQUAL(LH_DTYPE_Q6_K, 14);
}

/* ---- refused arguments ---------------------------------------------------------------------- */

static bool has(const char *msg, const char *needle)
{
    if (strstr(msg, needle))
        return true;
    printf("\n    message \"%s\" lacks \"%s\"", msg, needle);
    return false;
}

#define REFUSED(ctx, call, want, needle)                                                      \
    do {                                                                                      \
        lh_status st_ = (call);                                                               \
        CU_ASSERT_EQUAL(st_, (want));                                                         \
        CU_ASSERT_TRUE(has(lh_k_last_error(ctx), (needle)));                                  \
    } while (0)

static void test_bad_arguments(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    static unsigned char blocks[4 * 210];
    static float out[1024], out2[1024];
    memset(blocks, 0, sizeof blocks);
    lh_tensor q40 = kt_t2(LH_DTYPE_Q4_0, blocks, 2, 64), f = kt_t2(LH_DTYPE_F32, out, 2, 64);
    CU_ASSERT_EQUAL(lh_k_dequantize(ctx, &q40, &f), LH_OK);

    /* cols not a multiple of the block */
    lh_tensor bad_cols = kt_t2(LH_DTYPE_Q4_0, blocks, 2, 48), f48 = kt_t2(LH_DTYPE_F32, out, 2, 48);
    REFUSED(ctx, lh_k_dequantize(ctx, &bad_cols, &f48), LH_E_USAGE,
            "cols 48 is not a multiple of the q4_0 block (32 elements)");
    lh_tensor k_cols = kt_t2(LH_DTYPE_Q6_K, blocks, 1, 128), f128 = kt_t2(LH_DTYPE_F32, out, 1, 128);
    REFUSED(ctx, lh_k_dequantize(ctx, &k_cols, &f128), LH_E_USAGE, "q6_k block (256 elements)");
    /* wrong dst dtype */
    lh_tensor h = kt_t2(LH_DTYPE_F16, out, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &q40, &h), LH_E_UNSUPPORTED, "dst [2, 64] has dtype f16");
    lh_tensor qdst = kt_t2(LH_DTYPE_Q8_0, out, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &q40, &qdst), LH_E_UNSUPPORTED, "supported: f32");
    /* unknown and unsupported source dtypes */
    lh_tensor unk = kt_t2((lh_dtype)99, blocks, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &unk, &f), LH_E_USAGE, "src has an invalid dtype (99)");
    lh_tensor inv = kt_t2(LH_DTYPE_INVALID, blocks, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &inv, &f), LH_E_USAGE, "invalid dtype (0)");
    lh_tensor i8 = kt_t2(LH_DTYPE_INT8, blocks, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &i8, &f), LH_E_UNSUPPORTED, "src [2, 64] has dtype int8");
    CU_ASSERT_TRUE(has(lh_k_last_error(ctx), "q4_0"));
    lh_tensor fp8 = kt_t2(LH_DTYPE_FP8_E4M3, blocks, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &fp8, &f), LH_E_UNSUPPORTED, "fp8_e4m3");
    /* NULL */
    REFUSED(ctx, lh_k_dequantize(ctx, NULL, &f), LH_E_USAGE, "lh_k_dequantize: src is NULL");
    REFUSED(ctx, lh_k_dequantize(ctx, &q40, NULL), LH_E_USAGE, "lh_k_dequantize: dst is NULL");
    REFUSED(NULL, lh_k_dequantize(NULL, &q40, &f), LH_E_USAGE, "ctx is NULL");
    lh_tensor nodata = kt_t2(LH_DTYPE_Q4_0, NULL, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &nodata, &f), LH_E_USAGE, "has no data (NULL)");
    /* shapes, rank, overlap */
    lh_tensor f_other = kt_t2(LH_DTYPE_F32, out, 1, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &q40, &f_other), LH_E_USAGE, "must have the shape of src");
    lh_tensor q3 = kt_t3(LH_DTYPE_Q4_0, blocks, 1, 2, 64), f3 = kt_t3(LH_DTYPE_F32, out, 1, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &q3, &f3), LH_E_USAGE, "must have 2 dims");
    lh_tensor alias = kt_t2(LH_DTYPE_F32, blocks, 2, 64);
    REFUSED(ctx, lh_k_dequantize(ctx, &q40, &alias), LH_E_USAGE, "src and dst overlap");
    /* empty tensors are fine */
    lh_tensor q0 = kt_t2(LH_DTYPE_Q4_K, blocks, 0, 256), f0 = kt_t2(LH_DTYPE_F32, out, 0, 256);
    CU_ASSERT_EQUAL(lh_k_dequantize(ctx, &q0, &f0), LH_OK);

    /* other kernels refuse block weights by name (lh_k_matmul and the embeddings take them on
     * the CPU: test_qmatmul.c, test_qembedding.c); lh_k_copy moves whole blocks */
    lh_tensor x = kt_t2(LH_DTYPE_F32, out, 1, 64), y = kt_t2(LH_DTYPE_F32, out2, 1, 2);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &q40, NULL, &y), LH_OK);
    const int32_t ids[1] = {0};
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &q40, ids, 1, &x), LH_OK);
    lh_tensor q40w = kt_t1(LH_DTYPE_Q4_0, blocks, 64);
    REFUSED(ctx, lh_k_rmsnorm(ctx, &x, &q40w, 1e-6f, 0.0f, &x), LH_E_UNSUPPORTED,
            "w [64] has dtype q4_0");
    static unsigned char copy_dst[4 * 210];
    for (size_t i = 0; i < sizeof blocks; i++)
        blocks[i] = (unsigned char)(i * 7u);
    lh_tensor cs = kt_t1(LH_DTYPE_Q6_K, blocks, 1024), cd = kt_t1(LH_DTYPE_Q6_K, copy_dst, 1024);
    CU_ASSERT_EQUAL(lh_k_copy(ctx, &cd, &cs), LH_OK);
    CU_ASSERT_EQUAL(memcmp(copy_dst, blocks, sizeof blocks), 0);
    lh_tensor ps = kt_t1(LH_DTYPE_Q6_K, blocks, 300), pd = kt_t1(LH_DTYPE_Q6_K, copy_dst, 300);
    REFUSED(ctx, lh_k_copy(ctx, &pd, &ps), LH_E_USAGE, "is not a whole number of q6_k blocks");
    lh_k_ctx_free(ctx);
}

static CU_TestInfo facts_tests[] = {
    {"block sizes, bytes, names of every type", test_dtype_facts},
    {"refused arguments: cols, dtypes, NULL, shape, rank, overlap", test_bad_arguments},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo gguf_tests[] = {
    {"f32 = gguf-py", test_f32},   {"f16 = gguf-py", test_f16},   {"bf16 = gguf-py", test_bf16},
    {"q4_0 = gguf-py", test_q4_0}, {"q4_1 = gguf-py", test_q4_1}, {"q5_0 = gguf-py", test_q5_0},
    {"q5_1 = gguf-py", test_q5_1}, {"q8_0 = gguf-py", test_q8_0}, {"q4_k = gguf-py", test_q4_k},
    {"q5_k = gguf-py", test_q5_k}, {"q6_k = gguf-py", test_q6_k}, CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: dequantize, bit-identical to gguf-py (1 and 2 threads)", NULL, NULL, NULL, NULL,
     gguf_tests},
    {"kernels: block dtypes and refused arguments", NULL, NULL, NULL, NULL, facts_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
