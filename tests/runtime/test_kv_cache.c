/* The host's KV cache manager (host/runtime/kv_cache.h), on its own: no model, no backend.
 *
 * Sizing (lh_kv_plan_compute): the default pool (max_batch_size x ceil(max_seq_len /
 * block_size) blocks), kv_cache.max_tokens rounded up to whole blocks, memory_fraction of
 * lh_mem_available(); block bytes for f32, bf16, f16, fp8 (one f32 scale per kv head per fp8
 * tensor), mixed dtypes and block summaries (key min and max per kv head); every refusal
 * (block_size, geometry, dtypes, a pool that holds no block, more than INT32_MAX blocks) with a
 * message naming the setting.
 *
 * The pool (lh_kv_cache_create / reserve / release): reservation is all or nothing (a shortage
 * names blocks needed, free and total and changes nothing; a slot twice, a slot out of range,
 * more than max_seq_len tokens are usage errors that change nothing); the lowest free ids are
 * handed out first; reservations never shrink; a release gives every block back and the
 * slot's first block is the next one reused; tables and their lengths; layer views: shapes for
 * NHD and HND, the dtype of each tensor, scale and summary tensors present exactly when needed,
 * and every byte of every view writable without touching any other view (the regions are
 * filled with distinct patterns and read back). */
#include "runner.h"
#include "runtime/kv_cache.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The run config's kv_cache defaults (block_size 16, auto dtypes, NHD, no sizing). */
static lh_kv_cache_config kv_defaults(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_kv_cache_config kv = rc.kv_cache;
    lh_run_config_free(&rc);
    return kv;
}

#define CHECK_MSG(err, needle)                                                                 \
    do {                                                                                       \
        bool found_ = strstr((err).msg, (needle)) != NULL;                                     \
        if (!found_)                                                                           \
            fprintf(stderr, "\nmessage '%s' lacks '%s'\n", (err).msg, (needle));               \
        CU_ASSERT(found_);                                                                     \
    } while (0)

/* ---- sizing ---------------------------------------------------------------------------------- */

static void test_plan_default(void)
{
    lh_kv_cache_config kv = kv_defaults();
    CU_ASSERT_EQUAL(kv.block_size, 16);
    lh_kv_plan p;
    lh_err err = {0};
    /* 2 layers, 2 kv heads, head_dim 8, max_seq_len 100, 3 sequences */
    CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, 2, 2, 8, false, false, 100, 3, NULL, &p, &err), LH_OK);
    CU_ASSERT_EQUAL(p.n_layers, 2);
    CU_ASSERT_EQUAL(p.kv_heads, 2);
    CU_ASSERT_EQUAL(p.head_dim, 8);
    CU_ASSERT_EQUAL(p.block_size, 16);
    CU_ASSERT_EQUAL(p.layout, LH_KV_NHD);
    CU_ASSERT_EQUAL(p.k_dtype, LH_DTYPE_F32); /* auto */
    CU_ASSERT_EQUAL(p.v_dtype, LH_DTYPE_F32);
    CU_ASSERT_FALSE(p.summaries);
    CU_ASSERT_EQUAL(p.max_seqs, 3);
    CU_ASSERT_EQUAL(p.max_seq_len, 100);
    CU_ASSERT_EQUAL(p.num_blocks, 3 * 7); /* ceil(100 / 16) = 7 per sequence */
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 2u * 2 * 8 * (4 + 4));
    CU_ASSERT_EQUAL(p.block_bytes, 2u * 16 * 2 * 8 * 4 * 2);
    CU_ASSERT_EQUAL(p.pool_bytes, (size_t)p.num_blocks * p.block_bytes);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.sized_by, "default"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.sized_by, "max_batch_size 3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.sized_by, "max_seq_len 100"));
    /* a multiple of the block size needs no extra block */
    CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, 2, 2, 8, false, false, 96, 1, NULL, &p, &err), LH_OK);
    CU_ASSERT_EQUAL(p.num_blocks, 6);
    /* HND is carried into the plan */
    kv.layout = LH_KV_HND;
    CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, 2, 2, 8, false, false, 96, 1, NULL, &p, &err), LH_OK);
    CU_ASSERT_EQUAL(p.layout, LH_KV_HND);
}

/* Multi-head latent attention: one latent per token and layer serves as keys and values. */
static void test_plan_latent(void)
{
    lh_kv_cache_config kv = kv_defaults();
    lh_kv_plan p;
    lh_err err = {0};
    /* 3 layers of one 40-wide latent (32 + 8), 64 tokens, 2 sequences */
    CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, 3, 1, 40, false, true, 64, 2, NULL, &p, &err),
                          LH_OK);
    CU_ASSERT_TRUE(p.latent);
    CU_ASSERT_EQUAL(p.v_dtype, p.k_dtype);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 3u * 40 * 4);
    CU_ASSERT_EQUAL(p.block_bytes, 3u * 16 * 40 * 4);
    /* fp8: one scale per block and layer, the keys' */
    kv.k_dtype = LH_DTYPE_FP8_E4M3;
    CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, 3, 1, 40, true, true, 64, 2, NULL, &p, &err),
                          LH_OK);
    CU_ASSERT_EQUAL(p.v_dtype, LH_DTYPE_FP8_E4M3);
    CU_ASSERT_EQUAL(p.kv_bytes_per_token, 3u * 40);
    CU_ASSERT_EQUAL(p.block_bytes, 3u * (16 * 40 + 4 + 2 * 40 * 4));
    /* the pool's v is its k: same data, dtype, shape and scales */
    lh_kv_cache *c = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_kv_cache_create(&p, NULL, &c, &err), LH_OK);
    for (int64_t l = 0; l < 3; l++) {
        const lh_kv_pages *pg = lh_kv_cache_layer(c, l);
        CU_ASSERT_PTR_EQUAL(pg->v.data, pg->k.data);
        CU_ASSERT_EQUAL(pg->v.dtype, pg->k.dtype);
        CU_ASSERT_EQUAL(pg->k.shape[2], 1);
        CU_ASSERT_EQUAL(pg->k.shape[3], 40);
        CU_ASSERT_PTR_NOT_NULL(pg->k_scale.data);
        CU_ASSERT_PTR_EQUAL(pg->v_scale.data, pg->k_scale.data);
        CU_ASSERT_PTR_NOT_NULL(pg->k_min.data);
    }
    lh_kv_cache_free(c);
    /* values of another dtype: nothing to split a latent into */
    kv.v_dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_kv_plan_compute(&kv, 3, 1, 40, false, true, 64, 2, NULL, &p, &err),
                    LH_E_CONFIG);
    CHECK_MSG(err, "kv_cache.v_dtype bf16");
    CHECK_MSG(err, "one latent");
    kv.v_dtype = LH_DTYPE_FP8_E4M3; /* the keys' own dtype, spelled out: fine */
    CU_ASSERT_EQUAL(lh_kv_plan_compute(&kv, 3, 1, 40, false, true, 64, 2, NULL, &p, &err), LH_OK);
}

static void test_plan_max_tokens(void)
{
    lh_kv_cache_config kv = kv_defaults();
    lh_kv_plan p;
    lh_err err = {0};
    static const struct {
        int64_t tokens, block, blocks;
    } cases[] = {{1000, 16, 63}, {1024, 16, 64}, {1, 16, 1}, {17, 16, 2}, {16, 16, 1},
                 {1000, 32, 32}, {5, 1, 5}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kv.max_tokens = cases[i].tokens;
        kv.block_size = cases[i].block;
        CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, 4, 2, 8, false, false, 4096, 8, NULL, &p, &err), LH_OK);
        CU_ASSERT_EQUAL(p.num_blocks, cases[i].blocks);
        CU_ASSERT_EQUAL(p.pool_bytes, (size_t)cases[i].blocks * p.block_bytes);
        char want[64];
        snprintf(want, sizeof want, "kv_cache.max_tokens=%lld", (long long)cases[i].tokens);
        CU_ASSERT_PTR_NOT_NULL(strstr(p.sized_by, want));
    }
}

static void test_plan_memory_fraction(void)
{
    uint64_t before = lh_mem_available();
    if (before == 0) {
        LH_TEST_SKIP("MemAvailable cannot be read from /proc/meminfo here");
        return;
    }
    lh_kv_cache_config kv = kv_defaults();
    kv.memory_fraction = 0.01;
    lh_kv_plan p;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, 4, 2, 64, false, false, 4096, 1, NULL, &p, &err), LH_OK);
    uint64_t after = lh_mem_available();
    uint64_t lo = before < after ? before : after, hi = before < after ? after : before;
    /* floor(f x MemAvailable / (block bytes + per-block bookkeeping)), MemAvailable read while
     * the plan was made */
    const double per_block = (double)p.block_bytes + LH_KV_BLOCK_OVERHEAD;
    int64_t want_lo = (int64_t)(0.01 * (double)lo / per_block);
    int64_t want_hi = (int64_t)(0.01 * (double)hi / per_block);
    CU_ASSERT(p.num_blocks >= want_lo && p.num_blocks <= want_hi);
    CU_ASSERT_EQUAL(p.pool_bytes, (size_t)p.num_blocks * p.block_bytes);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.sized_by, "kv_cache.memory_fraction=0.01"));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.sized_by, "MemAvailable"));
    /* the plan reports the MemAvailable it used, and the count follows from it exactly */
    const char *m = strstr(p.sized_by, "MemAvailable ");
    unsigned long long used = 0;
    CU_ASSERT_FATAL(m && sscanf(m, "MemAvailable %llu bytes", &used) == 1);
    CU_ASSERT(used >= lo && used <= hi);
    CU_ASSERT_EQUAL(p.num_blocks, (int64_t)(0.01 * (double)used / per_block));
}

/* Bytes of one block, all layers, computed independently of the library. */
static size_t want_block_bytes(int64_t layers, int64_t bs, int64_t heads, int64_t dim,
                               size_t k_elem, size_t v_elem, bool k_fp8, bool v_fp8,
                               bool summaries)
{
    size_t elems = (size_t)bs * (size_t)heads * (size_t)dim;
    size_t per_layer = elems * k_elem + elems * v_elem;
    per_layer += (k_fp8 ? (size_t)heads * 4 : 0) + (v_fp8 ? (size_t)heads * 4 : 0);
    per_layer += summaries ? 2 * (size_t)heads * (size_t)dim * 4 : 0;
    return (size_t)layers * per_layer;
}

static void test_plan_block_bytes_per_dtype(void)
{
    static const struct {
        lh_dtype k, v;
        size_t k_elem, v_elem;
    } cases[] = {
        {LH_DTYPE_INVALID, LH_DTYPE_INVALID, 4, 4}, /* auto: f32 */
        {LH_DTYPE_F32, LH_DTYPE_F32, 4, 4},
        {LH_DTYPE_BF16, LH_DTYPE_BF16, 2, 2},
        {LH_DTYPE_F16, LH_DTYPE_F16, 2, 2},
        {LH_DTYPE_FP8_E4M3, LH_DTYPE_FP8_E4M3, 1, 1},
        {LH_DTYPE_FP8_E4M3, LH_DTYPE_BF16, 1, 2}, /* mixed */
        {LH_DTYPE_F16, LH_DTYPE_FP8_E4M3, 2, 1},
        {LH_DTYPE_F32, LH_DTYPE_BF16, 4, 2},
    };
    const int64_t L = 3, H = 4, D = 16, BS = 8;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int summ = 0; summ < 2; summ++) {
            lh_kv_cache_config kv = kv_defaults();
            kv.block_size = BS;
            kv.k_dtype = cases[i].k;
            kv.v_dtype = cases[i].v;
            lh_kv_plan p;
            lh_err err = {0};
            CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, L, H, D, summ, false, 64, 2, NULL, &p, &err), LH_OK);
            bool kf = cases[i].k == LH_DTYPE_FP8_E4M3, vf = cases[i].v == LH_DTYPE_FP8_E4M3;
            size_t want = want_block_bytes(L, BS, H, D, cases[i].k_elem, cases[i].v_elem, kf,
                                           vf, summ);
            if (p.block_bytes != want)
                fprintf(stderr, "\ncase %zu summaries %d: block_bytes %zu, want %zu\n", i, summ,
                        p.block_bytes, want);
            CU_ASSERT_EQUAL(p.block_bytes, want);
            /* scales and summaries are not per-token KV bytes */
            CU_ASSERT_EQUAL(p.kv_bytes_per_token,
                            (size_t)L * H * D * (cases[i].k_elem + cases[i].v_elem));
            CU_ASSERT_EQUAL(p.summaries, (bool)summ);
            CU_ASSERT_EQUAL(p.num_blocks, 2 * 64 / BS);
            CU_ASSERT_EQUAL(p.pool_bytes, (size_t)p.num_blocks * want);
        }
}

static void expect_config_error(const lh_kv_cache_config *kv, int64_t layers, int64_t heads,
                                int64_t dim, int64_t seq, int64_t seqs, const char *needle)
{
    lh_kv_plan p;
    lh_err err = {0};
    lh_status st = lh_kv_plan_compute(kv, layers, heads, dim, false, false, seq, seqs, NULL, &p, &err);
    CU_ASSERT_EQUAL(st, LH_E_CONFIG);
    CU_ASSERT_EQUAL(err.code, LH_E_CONFIG);
    CHECK_MSG(err, needle);
}

static void test_plan_errors(void)
{
    lh_kv_cache_config kv = kv_defaults();
    /* block_size */
    kv.block_size = 0;
    expect_config_error(&kv, 2, 2, 8, 64, 1, "kv_cache.block_size=0");
    kv.block_size = (1 << 20) + 1;
    expect_config_error(&kv, 2, 2, 8, 64, 1, "kv_cache.block_size=1048577");
    kv.block_size = -16;
    expect_config_error(&kv, 2, 2, 8, 64, 1, "must be in [1, 1048576]");
    kv = kv_defaults();
    /* geometry out of range, each bound */
    expect_config_error(&kv, 0, 2, 8, 64, 1, "geometry out of range");
    expect_config_error(&kv, 100001, 2, 8, 64, 1, "100001 layers");
    expect_config_error(&kv, 2, 0, 8, 64, 1, "0 kv heads");
    expect_config_error(&kv, 2, 65537, 8, 64, 1, "65537 kv heads");
    expect_config_error(&kv, 2, 2, 0, 64, 1, "head_dim 0");
    expect_config_error(&kv, 2, 2, 65537, 64, 1, "head_dim 65537");
    expect_config_error(&kv, 2, 2, 8, 0, 1, "max_seq_len 0");
    expect_config_error(&kv, 2, 2, 8, (int64_t)INT32_MAX + 1, 1, "max_seq_len 2147483648");
    expect_config_error(&kv, 2, 2, 8, 64, 0, "max_batch_size 0");
    expect_config_error(&kv, 2, 2, 8, 64, (1 << 20) + 1, "max_batch_size 1048577");
    /* dtypes the pool does not hold */
    kv.k_dtype = LH_DTYPE_INT8;
    expect_config_error(&kv, 2, 2, 8, 64, 1, "bf16, f16 or fp8_e4m3");
    kv = kv_defaults();
    kv.v_dtype = LH_DTYPE_INT4;
    expect_config_error(&kv, 2, 2, 8, 64, 1, "kv_cache: dtypes");
    /* more than INT32_MAX blocks: by max_tokens, and by default sizing */
    kv = kv_defaults();
    kv.block_size = 1;
    kv.max_tokens = (int64_t)INT32_MAX + 1;
    expect_config_error(&kv, 1, 1, 1, 64, 1, "2147483648 blocks");
    expect_config_error(&kv, 1, 1, 1, 64, 1, "use a larger kv_cache.block_size");
    kv.max_tokens = 0;
    expect_config_error(&kv, 1, 1, 1, INT32_MAX, 2, "more than 2147483647");
    /* exactly INT32_MAX blocks is allowed (planned, not allocated) */
    kv.max_tokens = INT32_MAX;
    lh_kv_plan p;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_kv_plan_compute(&kv, 1, 1, 1, false, false, 64, 1, NULL, &p, &err), LH_OK);
    CU_ASSERT_EQUAL(p.num_blocks, INT32_MAX);
    /* max_tokens at the top of int64: rounding up to blocks must not overflow */
    kv.block_size = 16;
    kv.max_tokens = INT64_MAX;
    expect_config_error(&kv, 1, 1, 1, 64, 1, "more than 2147483647");
    /* one block over every layer larger than the address space: refused, not wrapped */
    kv = kv_defaults();
    kv.block_size = 1 << 20;
    expect_config_error(&kv, 100000, 65536, 65536, 64, 1, "overflows the address space");
    /* a pool smaller than one block (memory_fraction needs a readable MemAvailable) */
    kv = kv_defaults();
    if (lh_mem_available() == 0) {
        LH_TEST_SKIP("MemAvailable cannot be read from /proc/meminfo here");
        return;
    }
    kv.memory_fraction = 1e-300;
    expect_config_error(&kv, 2, 2, 8, 64, 1, "leaves room for no block");
    expect_config_error(&kv, 2, 2, 8, 64, 1, "kv_cache.memory_fraction");
}

/* ---- the pool -------------------------------------------------------------------------------- */

/* 2 layers, 2 kv heads, head_dim 4, blocks of 4 tokens, max_seq_len 16 (4 blocks per
 * sequence), 3 slots, a pool of 24 tokens = 6 blocks. */
static lh_kv_cache *small_cache(lh_kv_plan *plan)
{
    lh_kv_cache_config kv = kv_defaults();
    kv.block_size = 4;
    kv.max_tokens = 24;
    lh_err err = {0};
    if (lh_kv_plan_compute(&kv, 2, 2, 4, false, false, 16, 3, NULL, plan, &err) != LH_OK) {
        fprintf(stderr, "\nplan: %s\n", err.msg);
        return NULL;
    }
    lh_kv_cache *c = NULL;
    if (lh_kv_cache_create(plan, NULL, &c, &err) != LH_OK)
        fprintf(stderr, "\ncreate: %s\n", err.msg);
    return c;
}

/* The slot's table equals want[0..n). */
static bool table_is(const lh_kv_cache *c, int64_t slot, const int32_t *want, int64_t n)
{
    int64_t got_n = -1;
    const int32_t *t = lh_kv_cache_table(c, slot, &got_n);
    bool ok = t && got_n == n && (n == 0 || memcmp(t, want, (size_t)n * sizeof *t) == 0);
    if (!ok) {
        fprintf(stderr, "\nslot %lld: %lld blocks [", (long long)slot, (long long)got_n);
        for (int64_t i = 0; t && i < got_n; i++)
            fprintf(stderr, "%s%d", i ? " " : "", t[i]);
        fprintf(stderr, "], want %lld\n", (long long)n);
    }
    return ok;
}

static void test_reserve_and_shortage(void)
{
    lh_kv_plan plan;
    lh_kv_cache *c = small_cache(&plan);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(plan.num_blocks, 6);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 6);
    CU_ASSERT_EQUAL(lh_kv_cache_plan(c)->num_blocks, 6);
    lh_err err = {0};
    /* 5 tokens: 2 blocks, the lowest ids */
    int64_t s0 = 0, t5 = 5;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t5, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 0, (const int32_t[]){0, 1}, 2));
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 4);
    /* never shrinks; 0 tokens is fine */
    int64_t t3 = 3, t0 = 0;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t3, 1, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t0, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 0, (const int32_t[]){0, 1}, 2));
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 4);
    /* all or nothing: slots 1 and 2 need 2 + 3 = 5 blocks, 4 are free */
    int64_t slots[2] = {1, 2}, toks[2] = {8, 12};
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, slots, toks, 2, &err), LH_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(err.code, LH_E_UNSUPPORTED);
    CHECK_MSG(err, "needs 5 more blocks of 4 tokens");
    CHECK_MSG(err, "only 4 of the pool's 6 blocks are free");
    CHECK_MSG(err, "kv_cache.max_tokens=24");
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 4);
    CU_ASSERT(table_is(c, 1, NULL, 0));
    CU_ASSERT(table_is(c, 2, NULL, 0));
    /* one block short in the singular */
    int64_t s1 = 1, t16 = 16;
    int64_t s2 = 2, t1 = 1;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s2, &t1, 1, &err), LH_OK); /* block 2 */
    CU_ASSERT(table_is(c, 2, (const int32_t[]){2}, 1));
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s1, &t16, 1, &err), LH_E_UNSUPPORTED);
    CHECK_MSG(err, "needs 4 more blocks");
    CHECK_MSG(err, "only 3 of the pool's 6");
    toks[0] = 8;
    toks[1] = 4; /* slot 2 already holds 4 tokens' block: only slot 1's 2 blocks are new */
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, slots, toks, 2, &err), LH_OK);
    CU_ASSERT(table_is(c, 1, (const int32_t[]){3, 4}, 2));
    CU_ASSERT(table_is(c, 2, (const int32_t[]){2}, 1));
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 1);
    /* exactly the last block */
    int64_t t9 = 9;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t9, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 0, (const int32_t[]){0, 1, 5}, 3));
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 0);
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s2, &t5, 1, &err), LH_E_UNSUPPORTED);
    CHECK_MSG(err, "needs 1 more block of 4 tokens");
    CHECK_MSG(err, "only 0 of the pool's 6");
    lh_kv_cache_free(c);
}

static void test_reserve_usage_errors(void)
{
    lh_kv_plan plan;
    lh_kv_cache *c = small_cache(&plan);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    lh_err err = {0};
    int64_t s0 = 0, t4 = 4;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t4, 1, &err), LH_OK);
    /* a slot twice in one call, even when the first would fit */
    int64_t twice[2] = {1, 1}, toks[2] = {4, 4};
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, twice, toks, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "slot 1 appears twice");
    /* slots out of range, after a valid one */
    int64_t bad[2] = {1, 3};
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, bad, toks, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "slot 3 outside [0, 3)");
    bad[1] = -1;
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, bad, toks, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "slot -1 outside [0, 3)");
    /* more tokens than max_seq_len, and negative */
    int64_t s1 = 1, t17 = 17, tneg = -1;
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s1, &t17, 1, &err), LH_E_USAGE);
    CHECK_MSG(err, "17 tokens");
    CHECK_MSG(err, "max_seq_len 16");
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s1, &tneg, 1, &err), LH_E_USAGE);
    /* none of it changed anything */
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 5);
    CU_ASSERT(table_is(c, 0, (const int32_t[]){0}, 1));
    CU_ASSERT(table_is(c, 1, NULL, 0));
    /* exactly max_seq_len is fine */
    int64_t t16 = 16;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s1, &t16, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 1, (const int32_t[]){1, 2, 3, 4}, 4));
    /* tables outside the range */
    int64_t n = 99;
    CU_ASSERT_PTR_NULL(lh_kv_cache_table(c, 3, &n));
    CU_ASSERT_EQUAL(n, 0);
    n = 99;
    CU_ASSERT_PTR_NULL(lh_kv_cache_table(c, -1, &n));
    CU_ASSERT_EQUAL(n, 0);
    /* releasing outside the range, or NULL, is a no-op */
    lh_kv_cache_release(c, 3);
    lh_kv_cache_release(c, -1);
    lh_kv_cache_release(NULL, 0);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 1);
    lh_kv_cache_free(c);
    lh_kv_cache_free(NULL);
}

/* Prefix caching: shared full blocks, references, LRU eviction, exact matches only. */
static void test_prefix_cache(void)
{
    lh_kv_plan plan;
    lh_kv_cache *c = small_cache(&plan); /* 6 blocks of 4 tokens, 3 slots */
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    lh_err err = {0};
    const int32_t t[16] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    int64_t s0 = 0, s1 = 1, s2 = 2, t12 = 12, t16 = 16;
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 0, t, 12), 0); /* off: nothing */
    CU_ASSERT_FALSE(lh_kv_cache_prefix_on(c));
    CU_ASSERT_EQUAL_FATAL(lh_kv_cache_enable_prefix(c, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_kv_cache_enable_prefix(c, &err), LH_OK); /* twice: fine */
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t12, 1, &err), LH_OK); /* 0 1 2 */
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 1, t, 14), 0); /* nothing published yet */
    lh_kv_cache_publish(c, 0, t, 11);                             /* 2 full blocks of 3 */
    lh_kv_cache_publish(c, 0, t, 12);                             /* the third */
    lh_kv_prefix_stats st;
    lh_kv_cache_prefix_stats(c, &st);
    CU_ASSERT_EQUAL(st.published_blocks, 3);
    /* 14 tokens: 3 whole blocks, the last token left to compute */
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 1, t, 14), 12);
    CU_ASSERT(table_is(c, 1, (const int32_t[]){0, 1, 2}, 3));
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 1, t, 14), 0); /* a slot that holds blocks */
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 3);             /* shared blocks count once */
    /* 12 tokens: at most 2 blocks (the 12th token is computed) */
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 2, t, 12), 8);
    lh_kv_cache_release(c, 2);
    /* another token in the second block: only the first matches */
    int32_t u[16];
    memcpy(u, t, sizeof u);
    u[5] = 99;
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 2, u, 14), 4);
    lh_kv_cache_release(c, 2);
    /* enabling once blocks are held is refused */
    lh_kv_plan plan2;
    lh_kv_cache *c2 = small_cache(&plan2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c2, &s0, &t12, 1, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_kv_cache_enable_prefix(c2, &err), LH_E_USAGE);
    CHECK_MSG(err, "before any slot holds blocks");
    lh_kv_cache_free(c2);
    /* held by slot 1 still: releasing slot 0 frees nothing */
    lh_kv_cache_release(c, 0);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 3);
    /* released by everyone: kept, and counted free */
    lh_kv_cache_release(c, 1);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 6);
    lh_kv_cache_prefix_stats(c, &st);
    CU_ASSERT_EQUAL(st.cached_blocks, 3);
    CU_ASSERT_EQUAL(st.idle_cached_blocks, 3);
    /* 4 blocks: the 3 never used, then the cached one released longest ago (block 2: slot 1
     * gave 2, 1, 0 back in that order) */
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s2, &t16, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 2, (const int32_t[]){3, 4, 5, 2}, 4));
    lh_kv_cache_prefix_stats(c, &st);
    CU_ASSERT_EQUAL(st.evicted_blocks, 1);
    /* the chain now stops where its block was taken */
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 0, t, 16), 8);
    CU_ASSERT(table_is(c, 0, (const int32_t[]){0, 1}, 2));
    /* slot 2 writes the same 16 tokens: its copies of blocks 0 and 1 stay private, its third
     * block (block 5) is new to the cache */
    lh_kv_cache_publish(c, 2, t, 16);
    lh_kv_cache_prefix_stats(c, &st);
    CU_ASSERT_EQUAL(st.published_blocks, 5);
    lh_kv_cache_release(c, 2);
    CU_ASSERT_EQUAL(lh_kv_cache_attach_prefix(c, 1, t, 16), 12); /* 0 1 (held by 0), then 5 */
    CU_ASSERT(table_is(c, 1, (const int32_t[]){0, 1, 5}, 3));
    lh_kv_cache_release(c, 0);
    lh_kv_cache_release(c, 1);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 6);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s1, &t16, 1, &err), LH_OK); /* every block again */
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 2);
    (void)s1;
    lh_kv_cache_free(c);
}

static void test_release_and_reuse_order(void)
{
    lh_kv_plan plan;
    lh_kv_cache *c = small_cache(&plan);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    lh_err err = {0};
    int64_t s0 = 0, s1 = 1, s2 = 2, t12 = 12, t4 = 4, t8 = 8;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t12, 1, &err), LH_OK); /* 0 1 2 */
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s1, &t4, 1, &err), LH_OK);  /* 3 */
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 2);
    lh_kv_cache_release(c, 0);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 5);
    CU_ASSERT(table_is(c, 0, NULL, 0));
    lh_kv_cache_release(c, 0); /* twice: nothing more comes back */
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 5);
    /* the released slot's first block is reused first, then its others in order, then the
     * never-used ones */
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s2, &t8, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 2, (const int32_t[]){0, 1}, 2));
    int64_t t16 = 16;
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s2, &t16, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 2, (const int32_t[]){0, 1, 2, 4}, 4));
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 1);
    /* block 3 comes back on top of 5 */
    lh_kv_cache_release(c, 1);
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t4, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 0, (const int32_t[]){3}, 1));
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, &s0, &t8, 1, &err), LH_OK);
    CU_ASSERT(table_is(c, 0, (const int32_t[]){3, 5}, 2));
    /* everything back: the whole pool is free again */
    lh_kv_cache_release(c, 0);
    lh_kv_cache_release(c, 2);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 6);
    /* a fresh reservation of the whole pool gets every id once */
    int64_t slots[3] = {0, 1, 2}, toks[3] = {8, 8, 8};
    CU_ASSERT_EQUAL(lh_kv_cache_reserve(c, slots, toks, 3, &err), LH_OK);
    int seen[6] = {0};
    for (int64_t s = 0; s < 3; s++) {
        int64_t n;
        const int32_t *t = lh_kv_cache_table(c, s, &n);
        CU_ASSERT_EQUAL(n, 2);
        for (int64_t i = 0; i < n; i++)
            if (t[i] >= 0 && t[i] < 6)
                seen[t[i]]++;
    }
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(seen[i], 1);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(c), 0);
    lh_kv_cache_free(c);
}

/* ---- layer views ----------------------------------------------------------------------------- */

static size_t tensor_bytes(const lh_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    return n * lh_k_dtype_bits(t->dtype) / 8;
}

static bool shape_is(const lh_tensor *t, int ndim, const int64_t *want)
{
    if (t->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != want[i])
            return false;
    return true;
}

typedef struct view_case {
    lh_dtype k, v;
    int layout;
    bool summaries;
} view_case;

static void check_views(const view_case *vc)
{
    const int64_t L = 3, H = 2, D = 8, BS = 4, NB = 5;
    lh_kv_cache_config kv = kv_defaults();
    kv.block_size = BS;
    kv.max_tokens = NB * BS;
    kv.k_dtype = vc->k;
    kv.v_dtype = vc->v;
    kv.layout = vc->layout;
    lh_kv_plan plan;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_kv_plan_compute(&kv, L, H, D, vc->summaries, false, 64, 2, NULL, &plan, &err),
                          LH_OK);
    lh_kv_cache *c = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_kv_cache_create(&plan, NULL, &c, &err), LH_OK);
    CU_ASSERT_PTR_NULL(lh_kv_cache_layer(c, -1));
    CU_ASSERT_PTR_NULL(lh_kv_cache_layer(c, L));
    const int64_t kv_shape[4] = {NB, vc->layout == LH_KV_HND ? H : BS,
                                 vc->layout == LH_KV_HND ? BS : H, D};
    const int64_t scale_shape[2] = {NB, H}, summary_shape[3] = {NB, H, D};
    const bool k_fp8 = vc->k == LH_DTYPE_FP8_E4M3, v_fp8 = vc->v == LH_DTYPE_FP8_E4M3;
    const lh_dtype k_dt = vc->k == LH_DTYPE_INVALID ? LH_DTYPE_F32 : vc->k;
    const lh_dtype v_dt = vc->v == LH_DTYPE_INVALID ? LH_DTYPE_F32 : vc->v;
    /* every region of every layer, for the overlap check */
    enum { PARTS = 6 };
    unsigned char *base[3][PARTS] = {{0}};
    size_t len[3][PARTS] = {{0}};
    size_t total = 0;
    for (int64_t l = 0; l < L; l++) {
        const lh_kv_pages *p = lh_kv_cache_layer(c, l);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        CU_ASSERT_EQUAL(p->layout, vc->layout);
        CU_ASSERT_EQUAL(p->k.dtype, k_dt);
        CU_ASSERT_EQUAL(p->v.dtype, v_dt);
        CU_ASSERT(shape_is(&p->k, 4, kv_shape));
        CU_ASSERT(shape_is(&p->v, 4, kv_shape));
        CU_ASSERT_PTR_NOT_NULL(p->k.data);
        CU_ASSERT_PTR_NOT_NULL(p->v.data);
        CU_ASSERT_EQUAL(p->k.stride[3], 1);
        /* scales: exactly for fp8 tensors */
        CU_ASSERT_EQUAL(p->k_scale.data != NULL, k_fp8);
        CU_ASSERT_EQUAL(p->v_scale.data != NULL, v_fp8);
        if (k_fp8) {
            CU_ASSERT_EQUAL(p->k_scale.dtype, LH_DTYPE_F32);
            CU_ASSERT(shape_is(&p->k_scale, 2, scale_shape));
        }
        if (v_fp8) {
            CU_ASSERT_EQUAL(p->v_scale.dtype, LH_DTYPE_F32);
            CU_ASSERT(shape_is(&p->v_scale, 2, scale_shape));
        }
        /* summaries: both or neither */
        CU_ASSERT_EQUAL(p->k_min.data != NULL, vc->summaries);
        CU_ASSERT_EQUAL(p->k_max.data != NULL, vc->summaries);
        if (vc->summaries) {
            CU_ASSERT_EQUAL(p->k_min.dtype, LH_DTYPE_F32);
            CU_ASSERT_EQUAL(p->k_max.dtype, LH_DTYPE_F32);
            CU_ASSERT(shape_is(&p->k_min, 3, summary_shape));
            CU_ASSERT(shape_is(&p->k_max, 3, summary_shape));
        }
        const lh_tensor *ts[PARTS] = {&p->k, &p->v, &p->k_scale, &p->v_scale, &p->k_min,
                                      &p->k_max};
        for (int i = 0; i < PARTS; i++)
            if (ts[i]->data) {
                base[l][i] = ts[i]->data;
                len[l][i] = tensor_bytes(ts[i]);
                total += len[l][i];
            }
    }
    /* the views cover exactly the plan's bytes */
    CU_ASSERT_EQUAL(total, plan.pool_bytes);
    /* write every byte of every view with its own pattern, then read all back: a view that
     * reaches past its region would overwrite a neighbour (or fault past the mapping) */
    for (int64_t l = 0; l < L; l++)
        for (int i = 0; i < PARTS; i++)
            if (base[l][i])
                memset(base[l][i], (int)(1 + l * PARTS + i), len[l][i]);
    bool intact = true;
    for (int64_t l = 0; l < L; l++)
        for (int i = 0; i < PARTS; i++)
            for (size_t b = 0; base[l][i] && b < len[l][i]; b++)
                if (base[l][i][b] != (unsigned char)(1 + l * PARTS + i)) {
                    intact = false;
                    break;
                }
    CU_ASSERT(intact);
    lh_kv_cache_free(c);
}

static void test_layer_views(void)
{
    static const view_case cases[] = {
        {LH_DTYPE_INVALID, LH_DTYPE_INVALID, LH_KV_NHD, false},
        {LH_DTYPE_F32, LH_DTYPE_F32, LH_KV_HND, false},
        {LH_DTYPE_BF16, LH_DTYPE_BF16, LH_KV_NHD, true},
        {LH_DTYPE_F16, LH_DTYPE_F16, LH_KV_HND, true},
        {LH_DTYPE_FP8_E4M3, LH_DTYPE_FP8_E4M3, LH_KV_NHD, false},
        {LH_DTYPE_FP8_E4M3, LH_DTYPE_FP8_E4M3, LH_KV_HND, true},
        {LH_DTYPE_FP8_E4M3, LH_DTYPE_BF16, LH_KV_NHD, false}, /* mixed: one scale tensor */
        {LH_DTYPE_BF16, LH_DTYPE_FP8_E4M3, LH_KV_HND, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_views(&cases[i]);
}

static CU_TestInfo plan_tests[] = {
    {"default: max_batch_size x ceil(max_seq_len / block_size)", test_plan_default},
    {"max_tokens rounds up to whole blocks", test_plan_max_tokens},
    {"latent (MLA): one tensor for keys and values, v_dtype refused", test_plan_latent},
    {"memory_fraction of MemAvailable", test_plan_memory_fraction},
    {"block bytes per dtype, fp8 scales, mixed, summaries", test_plan_block_bytes_per_dtype},
    {"refusals name the setting", test_plan_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo pool_tests[] = {
    {"reserve: lowest ids first, never shrinks, all or nothing", test_reserve_and_shortage},
    {"reserve: usage errors change nothing", test_reserve_usage_errors},
    {"release gives blocks back, reuse order", test_release_and_reuse_order},
    {"prefix cache: shared blocks, references, LRU eviction, exact hits", test_prefix_cache},
    {"layer views: shapes, dtypes, scales, summaries, disjoint", test_layer_views},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kv plan", NULL, NULL, NULL, NULL, plan_tests},
    {"kv pool", NULL, NULL, NULL, NULL, pool_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
