/* Kernel library: lh_k_embedding and lh_k_embedding_add with a table of one of ggml's block
 * types (Q4_0 ... Q6_K) on the CPU.
 *
 * The contract is bit-identity with lh_k_dequantize: every looked-up row equals (memcmp) that
 * row of the dequantized table, and embedding_add adds it with one f32 addition per element,
 * for every ISA this CPU has, on 1 and 2 threads: random blocks (D of one block, of several,
 * and above the 1024-float stage of embedding_add, so a row is decoded in pieces) and the
 * committed extreme-scale fixtures against gguf-py's floats. Then the refusals: D not a
 * multiple of the block (LH_E_USAGE naming D and the block), ids outside [0, V) on a block
 * table (LH_E_USAGE, nothing written) and a dtype outside the set. The CUDA twin is in
 * test_cuda_kernels.c (block types). */
#include "qtest.h"

static lh_status emb(lh_kctx *ctx, bool add, lh_dtype dt, const void *table, int64_t V,
                     int64_t D, const int32_t *ids, int64_t n, float *out)
{
    lh_tensor t = kt_t2(dt, (void *)table, V, D), o = kt_t2(LH_DTYPE_F32, out, n, D);
    lh_status st = add ? lh_k_embedding_add(ctx, &t, ids, n, &o) : lh_k_embedding(ctx, &t, ids, n, &o);
    if (st != LH_OK)
        printf("\n    %s (%s) failed: %s", add ? "lh_k_embedding_add" : "lh_k_embedding",
               lh_k_dtype_name(dt), lh_k_last_error(ctx));
    return st;
}

/* Looks up ids in table [V, D] of type q on ctx and checks both kernels against deq, the
 * table's rows as f32 (lh_k_dequantize's or gguf-py's). Returns the number of failures. */
static long check_lookup(lh_kctx *ctx, const qtype *q, const void *table, const float *deq,
                         int64_t V, int64_t D, const int32_t *ids, int64_t n, const char *what)
{
    float *out = malloc((size_t)(n * D) * sizeof(float) + 1);
    float *want = malloc((size_t)(n * D) * sizeof(float) + 1);
    float *base = malloc((size_t)(n * D) * sizeof(float) + 1);
    long bad = 0;
    char label[160];

    memset(out, 0xa5, (size_t)(n * D) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        memcpy(want + i * D, deq + ids[i] * D, (size_t)D * sizeof(float));
    if (emb(ctx, false, q->dt, table, V, D, ids, n, out) != LH_OK)
        bad++;
    snprintf(label, sizeof label, "%s embedding %s D %lld, %d thread(s)", lh_k_isa_name(lh_k_ctx_isa(ctx)),
             what, (long long)D, lh_k_ctx_threads(ctx));
    bad += !qt_same_bits(label, out, want, n * D);

    for (int64_t i = 0; i < n * D; i++) {
        base[i] = out[i] = kt_uniform() * 4.0f;
        want[i] = base[i] + deq[ids[i / D] * D + i % D];
    }
    if (emb(ctx, true, q->dt, table, V, D, ids, n, out) != LH_OK)
        bad++;
    snprintf(label, sizeof label, "%s embedding_add %s D %lld, %d thread(s)",
             lh_k_isa_name(lh_k_ctx_isa(ctx)), what, (long long)D, lh_k_ctx_threads(ctx));
    bad += !qt_same_bits(label, out, want, n * D);
    free(out);
    free(want);
    free(base);
    return bad;
}

static void qembedding_random(lh_k_isa isa)
{
    lh_kctx *ctxs[2] = {kt_ctx(1, isa), kt_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(211 + (uint64_t)isa);
    const int64_t V = 13;
    static const int32_t ids[] = {0, 12, 5, 5, 7, 0, 11, 3, 1, 12};
    const int64_t n = (int64_t)(sizeof ids / sizeof ids[0]);
    long bad = 0;
    int cases = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        const qtype *q = &qtypes[qi];
        /* one block, a few, and past the 1024-float stage (33 and 5 blocks) */
        const int64_t Ds[3] = {q->block_elems, 3 * q->block_elems,
                               q->block_elems == 32 ? 33 * 32 : 5 * 256};
        for (int di = 0; di < 3; di++) {
            const int64_t D = Ds[di];
            uint8_t *table = qt_random_blocks(q, V, D);
            float *deq = malloc((size_t)(V * D) * sizeof(float));
            for (int c = 0; c < 2; c++) {
                lh_tensor src = kt_t2(q->dt, table, V, D), dst = kt_t2(LH_DTYPE_F32, deq, V, D);
                CU_ASSERT_EQUAL_FATAL(lh_k_dequantize(ctxs[c], &src, &dst), LH_OK);
                bad += check_lookup(ctxs[c], q, table, deq, V, D, ids, n, lh_k_dtype_name(q->dt));
                cases++;
            }
            free(table);
            free(deq);
        }
    }
    CU_ASSERT_EQUAL(cases, (int)N_QTYPES * 3 * 2);
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_ISA_TESTS(qembedding_random)

/* The fixtures (extreme f16 scales, all-0 / all-0xFF quants, packed K scales at their limits)
 * as tables, every row looked up in reverse order and twice: rows bit-identical to gguf-py. */
static void qembedding_fixtures(lh_k_isa isa)
{
    lh_kctx *ctxs[2] = {kt_ctx(1, isa), kt_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(223 + (uint64_t)isa);
    long bad = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        const qtype *q = &qtypes[qi];
        size_t nb = 0, nf = 0;
        uint8_t *raw = qt_read_fixture(q->file, "bin", &nb);
        float *want = qt_read_fixture(q->file, "f32", &nf);
        CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
        CU_ASSERT_PTR_NOT_NULL_FATAL(want);
        const int64_t V = q->fixture_rows, D = (int64_t)(nf / sizeof(float)) / V;
        CU_ASSERT_EQUAL_FATAL(lh_k_dtype_bytes(q->dt, V * D), (int64_t)nb);
        int32_t ids[2 * 5];
        const int64_t n = 2 * V;
        for (int64_t i = 0; i < n; i++)
            ids[i] = (int32_t)(V - 1 - i % V);
        for (int c = 0; c < 2; c++) {
            char what[64];
            snprintf(what, sizeof what, "fixture %s", q->file);
            bad += check_lookup(ctxs[c], q, raw, want, V, D, ids, n, what);
        }
        free(raw);
        free(want);
    }
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_ISA_TESTS(qembedding_fixtures)

static void test_qembedding_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(229);
    uint8_t *table = qt_random_blocks(&qtypes[0], 4, 64); /* q4_0 [4, 64] */
    float out[3 * 288], out0[3 * 288]; /* room for the [1, 288] view */
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++)
        out0[i] = out[i] = (float)i;
    int32_t ids[3] = {1, 4, 0};
    static const char *const fns[2] = {"lh_k_embedding", "lh_k_embedding_add"};
    for (int add = 0; add < 2; add++) {
        lh_tensor t = kt_t2(LH_DTYPE_Q4_0, table, 4, 64), o = kt_t2(LH_DTYPE_F32, out, 2, 64);
        lh_status (*const fn)(lh_kctx *, const lh_tensor *, const int32_t *, int64_t, lh_tensor *) =
            add ? lh_k_embedding_add : lh_k_embedding;
        char want[200];
        memcpy(out0, out, sizeof out); /* the last iteration's successful call wrote out */

        /* ids outside [0, V): reported as for a float table, nothing written */
        ids[1] = 4;
        CU_ASSERT_EQUAL(fn(ctx, &t, ids, 2, &o), LH_E_USAGE);
        snprintf(want, sizeof want, "%s: ids[1] = 4 is outside [0, 4) (table [4, 64])", fns[add]);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), want));
        ids[1] = -1;
        CU_ASSERT_EQUAL(fn(ctx, &t, ids, 2, &o), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "ids[1] = -1 is outside [0, 4)"));
        CU_ASSERT_EQUAL(memcmp(out, out0, sizeof out), 0);
        ids[1] = 3;
        CU_ASSERT_EQUAL(fn(ctx, &t, ids, 2, &o), LH_OK);

        /* D not a multiple of the block: q4_0 [4, 48] (the bytes of 6 blocks), q6_k [1, 288] */
        lh_tensor t48 = kt_t2(LH_DTYPE_Q4_0, table, 4, 48), o48 = kt_t2(LH_DTYPE_F32, out, 2, 48);
        CU_ASSERT_EQUAL(fn(ctx, &t48, ids, 2, &o48), LH_E_USAGE);
        snprintf(want, sizeof want,
                 "%s: table q4_0 [4, 48]: D 48 is not a multiple of the q4_0 block (32 elements)",
                 fns[add]);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), want));
        lh_tensor t288 = kt_t2(LH_DTYPE_Q6_K, table, 1, 288), o288 = kt_t2(LH_DTYPE_F32, out, 1, 288);
        const int32_t id0 = 0;
        CU_ASSERT_EQUAL(fn(ctx, &t288, &id0, 1, &o288), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                                   "D 288 is not a multiple of the q6_k block (256 elements)"));

        /* the shape rule still comes first; n = 0 with a block table is fine */
        lh_tensor o3 = kt_t2(LH_DTYPE_F32, out, 3, 64);
        CU_ASSERT_EQUAL(fn(ctx, &t, ids, 2, &o3), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "out [3, 64] must be [2, 64] for table [4, 64]"));
        lh_tensor o0 = kt_t2(LH_DTYPE_F32, out, 0, 64);
        CU_ASSERT_EQUAL(fn(ctx, &t, NULL, 0, &o0), LH_OK);

        /* out inside the table's bytes */
        lh_tensor oin = kt_t2(LH_DTYPE_F32, table, 1, 64);
        CU_ASSERT_EQUAL(fn(ctx, &t, ids, 1, &oin), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "out overlaps table"));

        /* dtypes outside the set */
        lh_tensor ti = kt_t2(LH_DTYPE_INT4, table, 4, 64);
        CU_ASSERT_EQUAL(fn(ctx, &ti, ids, 2, &o), LH_E_UNSUPPORTED);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                                   "table [4, 64] has dtype int4; supported: f32, bf16, f16, q4_0, "
                                   "q4_1, q5_0, q5_1, q8_0, q4_k, q5_k or q6_k"));
        lh_tensor tf8 = kt_t2(LH_DTYPE_FP8_E4M3, table, 4, 64);
        CU_ASSERT_EQUAL(fn(ctx, &tf8, ids, 2, &o), LH_E_UNSUPPORTED);
    }
    free(table);
    lh_k_ctx_free(ctx);
}


static CU_TestInfo qembedding_tests[] = {
    {"quantized-table embedding(_add) == dequantized rows, bit for bit [scalar]",
     qembedding_random_scalar},
    {"quantized-table embedding(_add) == dequantized rows, bit for bit [avx2]",
     qembedding_random_avx2},
    {"quantized-table embedding(_add) == dequantized rows, bit for bit [avx512]",
     qembedding_random_avx512},
    {"quantized-table embedding(_add) of the extreme-scale fixtures == gguf-py [scalar]",
     qembedding_fixtures_scalar},
    {"quantized-table embedding(_add) of the extreme-scale fixtures == gguf-py [avx2]",
     qembedding_fixtures_avx2},
    {"quantized-table embedding(_add) of the extreme-scale fixtures == gguf-py [avx512]",
     qembedding_fixtures_avx512},
    {"quantized-table embedding(_add) argument errors", test_qembedding_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: embedding from quantized tables", NULL, NULL, NULL, NULL, qembedding_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
