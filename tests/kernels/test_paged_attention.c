/* Kernel library: fp8 e4m3 conversions and attention over a paged KV cache.
 *
 * fp8 (torch.float8_e4m3fn): all 256 codes decoded against an independent formula (ldexp),
 * every finite code round-trips, every midpoint between neighbouring codes rounds to the even
 * one and the floats just beside it to the nearer one, saturation to +-448, NaN, hand-computed
 * values.
 *
 * Paged attention: random keys and values written into a pool whose blocks are handed out in
 * shuffled order (lh_k_paged_kv_write, in a prefill piece and then small appends, so blocks are
 * filled partially and fp8 scales grow), the pool starting as all-ones bytes (NaN in every
 * dtype) so that reading anything not written shows. The values the pool holds are read back
 * by the test itself (its own layout arithmetic and scalar conversions) into contiguous
 * [S, kv_heads, D] arrays, and:
 *  - stored values: f32 exactly the input; bf16/f16 exactly the input rounded to nearest even;
 *    fp8 within half an ulp (2^-4 |x|) plus one subnormal step of the block's final scale
 *    (2^-9 * scale: re-encoding after a scale growth is exact for normal codes, and the
 *    subnormal roundings of successive doublings sum to less than that);
 *  - out vs a double-precision reference of HF eager attention on the read-back values
 *    (masks: causal, sliding window p > q - w, chunked p / c == q / c):
 *    |out - ref| <= 2e-5 * max|v| + 1e-6, the tolerance of the contiguous attention test, for
 *    every dtype, since the reference uses the very values the kernel reads;
 *  - unsplit (n_splits 1) and no chunking: bit-identical to lh_k_attention on the read-back
 *    values (same primitives, same order);
 *  - split into many partitions (n_splits 5 and 1000, and automatic): equal to the unsplit
 *    result within 2e-6 * max|v| + 1e-7 (float rounding of the merge), and the thread count
 *    changes nothing (bit-identical with 1 and 3 threads).
 * Block sizes 1, 16 and 64, layouts NHD and HND, dtypes f32, bf16, f16 and fp8 e4m3, each ISA.
 * The same checks with attention-logit soft-capping on inputs where the cap matters
 * (paged_softcap). */
#include "ktest.h"

/* ---- fp8 ------------------------------------------------------------------------------------ */

static float fp8_formula(unsigned c)
{
    unsigned s = c >> 7, e = (c >> 3) & 15u, m = c & 7u;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), (int)e - 10);
    return s ? -v : v;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void test_fp8_decode_all_codes(void)
{
    int bad = 0;
    for (unsigned c = 0; c < 256; c++) {
        float got = lh_k_fp8_e4m3_to_f32((uint8_t)c), want = fp8_formula(c);
        if (isnan(want) ? !isnan(got) : bits(got) != bits(want)) {
            printf("\n    code 0x%02x: got %a, want %a", c, (double)got, (double)want);
            bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* the landmarks of the format */
    CU_ASSERT_EQUAL(lh_k_fp8_e4m3_to_f32(0x7e), 448.0f);
    CU_ASSERT_EQUAL(lh_k_fp8_e4m3_to_f32(0xfe), -448.0f);
    CU_ASSERT_TRUE(isnan(lh_k_fp8_e4m3_to_f32(0x7f)));
    CU_ASSERT_TRUE(isnan(lh_k_fp8_e4m3_to_f32(0xff)));
    CU_ASSERT_EQUAL(lh_k_fp8_e4m3_to_f32(0x38), 1.0f);
    CU_ASSERT_EQUAL(lh_k_fp8_e4m3_to_f32(0x08), 0.015625f);       /* 2^-6, smallest normal */
    CU_ASSERT_EQUAL(lh_k_fp8_e4m3_to_f32(0x01), 0.001953125f);    /* 2^-9, smallest subnormal */
    CU_ASSERT_EQUAL(lh_k_fp8_e4m3_to_f32(0x07), 0.013671875f);    /* 7 * 2^-9 */
    CU_ASSERT_EQUAL(lh_k_fp8_e4m3_to_f32(0x77), 240.0f);          /* 1.875 * 2^7 */
    CU_ASSERT_EQUAL(bits(lh_k_fp8_e4m3_to_f32(0x80)), 0x80000000u); /* -0 */
}

static void test_fp8_encode_round_trip_and_midpoints(void)
{
    int bad = 0;
    for (unsigned c = 0; c < 256; c++) {
        float v = lh_k_fp8_e4m3_to_f32((uint8_t)c);
        if (isnan(v))
            continue;
        if (lh_k_f32_to_fp8_e4m3(v) != c) {
            printf("\n    round trip of code 0x%02x (%a) gives 0x%02x", c, (double)v,
                   lh_k_f32_to_fp8_e4m3(v));
            bad++;
        }
    }
    /* neighbours c, c + 1 of either sign: the midpoint (exact in f32) goes to the even code, a
     * float either side of it to the nearer code */
    for (unsigned sign = 0; sign < 2; sign++)
        for (unsigned c = 0; c < 0x7e; c++) {
            unsigned lo = c | (sign << 7), hi = (c + 1) | (sign << 7);
            float a = lh_k_fp8_e4m3_to_f32((uint8_t)lo), b = lh_k_fp8_e4m3_to_f32((uint8_t)hi);
            float mid = (a + b) / 2;
            unsigned even = (c & 1u) ? hi : lo;
            uint8_t gm = lh_k_f32_to_fp8_e4m3(mid);
            uint8_t gb = lh_k_f32_to_fp8_e4m3(nextafterf(mid, b));
            uint8_t ga = lh_k_f32_to_fp8_e4m3(nextafterf(mid, a));
            if (gm != even || gb != hi || ga != lo) {
                printf("\n    between 0x%02x and 0x%02x: mid -> 0x%02x (want 0x%02x), above -> "
                       "0x%02x, below -> 0x%02x", lo, hi, gm, even, gb, ga);
                bad++;
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_fp8_encode_hand_values(void)
{
    static const struct {
        float x;
        uint8_t code;
    } cases[] = {
        {1.0f, 0x38},   {-2.0f, 0xc0},  {3.0f, 0x44},   {0.1f, 0x1d}, /* 0.1 -> 1.625 * 2^-4 */
        {17.0f, 0x58},  /* tie between 16 and 18: even mantissa, 16 */
        {19.0f, 0x5a},  /* tie between 18 and 20: 20 */
        {448.0f, 0x7e}, {449.0f, 0x7e}, {463.99f, 0x7e}, {464.0f, 0x7e}, {470.0f, 0x7e},
        {1e9f, 0x7e},   {-1e30f, 0xfe}, {INFINITY, 0x7e}, {-INFINITY, 0xfe},
        {0.015625f, 0x08},      /* 2^-6 */
        {0.0146484375f, 0x08},  /* 7.5 * 2^-9: tie between 7 and 8 subnormal steps -> 8 */
        {0.0126953125f, 0x06},  /* 6.5 * 2^-9: tie -> 6 */
        {0.001953125f, 0x01},   /* 2^-9 */
        {0.0009765625f, 0x00},  /* 2^-10: tie between 0 and 2^-9 -> 0 */
        {0.00097656256f, 0x01}, /* just above 2^-10 */
        {0.0029296875f, 0x02},  /* 1.5 * 2^-9: tie -> 2 */
        {1e-30f, 0x00},         {-1e-30f, 0x80}, {0.0f, 0x00}, {-0.0f, 0x80},
        {240.0f, 0x77},         {248.0f, 0x78},  /* tie between 240 and 256 -> 256 (even) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t got = lh_k_f32_to_fp8_e4m3(cases[i].x);
        if (got != cases[i].code)
            printf("\n    %a -> 0x%02x, want 0x%02x", (double)cases[i].x, got, cases[i].code);
        CU_ASSERT_EQUAL(got, cases[i].code);
    }
    CU_ASSERT_EQUAL(lh_k_f32_to_fp8_e4m3(NAN) & 0x7f, 0x7f);
    CU_ASSERT_EQUAL(lh_k_f32_to_fp8_e4m3(-NAN), 0xff);
    /* row conversions agree with the scalar ones */
    float src[300];
    uint8_t enc[300], codes[256];
    float dec[256];
    kt_seed(77);
    for (int i = 0; i < 300; i++)
        src[i] = kt_uniform() * 600.0f * (i % 3 ? 1.0f : 1e-3f);
    lh_k_convert_f32_to_fp8_e4m3(src, enc, 300);
    for (int i = 0; i < 300; i++)
        CU_ASSERT_EQUAL(enc[i], lh_k_f32_to_fp8_e4m3(src[i]));
    for (int i = 0; i < 256; i++)
        codes[i] = (uint8_t)i;
    lh_k_convert_fp8_e4m3_to_f32(codes, dec, 256);
    for (int i = 0; i < 256; i++) {
        float w = lh_k_fp8_e4m3_to_f32((uint8_t)i);
        CU_ASSERT_TRUE(isnan(w) ? isnan(dec[i]) : bits(dec[i]) == bits(w));
    }
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(LH_DTYPE_FP8_E4M3, 10), 10);
}

/* ---- a paged pool built by the test ----------------------------------------------------------- */

typedef struct tpool {
    lh_kv_pages kv;
    lh_dtype dt;
    int64_t NB, bs, KVH, D;
    void *k, *v;
    float *ks, *vs;
    int32_t *table;
    int64_t n_table;
} tpool;

static size_t dt_size(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 ? 4 : dt == LH_DTYPE_FP8_E4M3 ? 1 : 2;
}

static const char *dt_str(lh_dtype dt)
{
    return dt == LH_DTYPE_FP8_E4M3 ? "fp8" : kt_dt_name(dt);
}

/* A pool with room for S tokens in shuffled blocks plus `spare` unused ones; every byte 0xff
 * (NaN in each dtype, fp8 scales NaN too). */
static void tpool_init(tpool *p, lh_dtype dt, lh_kv_layout layout, int64_t bs, int64_t KVH,
                       int64_t D, int64_t S, int64_t spare)
{
    memset(p, 0, sizeof *p);
    p->dt = dt;
    p->bs = bs;
    p->KVH = KVH;
    p->D = D;
    p->n_table = (S + bs - 1) / bs;
    p->NB = p->n_table + spare;
    size_t bytes = (size_t)(p->NB * bs * KVH * D) * dt_size(dt);
    p->k = malloc(bytes);
    p->v = malloc(bytes);
    memset(p->k, 0xff, bytes);
    memset(p->v, 0xff, bytes);
    int64_t shape[4] = {p->NB, layout == LH_KV_NHD ? bs : KVH, layout == LH_KV_NHD ? KVH : bs, D};
    p->kv.layout = layout;
    p->kv.k = lh_tensor_cpu(dt, p->k, 4, shape);
    p->kv.v = lh_tensor_cpu(dt, p->v, 4, shape);
    if (dt == LH_DTYPE_FP8_E4M3) {
        p->ks = malloc((size_t)(p->NB * KVH) * sizeof(float));
        p->vs = malloc((size_t)(p->NB * KVH) * sizeof(float));
        memset(p->ks, 0xff, (size_t)(p->NB * KVH) * sizeof(float));
        memset(p->vs, 0xff, (size_t)(p->NB * KVH) * sizeof(float));
        p->kv.k_scale = kt_t2(LH_DTYPE_F32, p->ks, p->NB, KVH);
        p->kv.v_scale = kt_t2(LH_DTYPE_F32, p->vs, p->NB, KVH);
    }
    /* a random permutation of the physical blocks; the sequence gets the first n_table */
    int32_t *perm = malloc((size_t)p->NB * sizeof(int32_t));
    for (int64_t i = 0; i < p->NB; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = p->NB - 1; i > 0; i--) {
        int64_t r = (int64_t)(kt_u64() % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[r];
        perm[r] = t;
    }
    p->table = perm;
}

static void tpool_free(tpool *p)
{
    free(p->k);
    free(p->v);
    free(p->ks);
    free(p->vs);
    free(p->table);
}

/* The value the pool holds for (k or v, position, kv head, d), read independently. */
static float tpool_get(const tpool *p, int is_v, int64_t pos, int64_t h, int64_t d)
{
    int64_t phys = p->table[pos / p->bs], off = pos % p->bs;
    int64_t idx = p->kv.layout == LH_KV_NHD ? ((phys * p->bs + off) * p->KVH + h) * p->D + d
                                            : ((phys * p->KVH + h) * p->bs + off) * p->D + d;
    const void *base = is_v ? p->v : p->k;
    switch (p->dt) {
    case LH_DTYPE_F32: return ((const float *)base)[idx];
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)base)[idx]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)base)[idx]);
    default: {
        float s = (is_v ? p->vs : p->ks)[phys * p->KVH + h];
        return lh_k_fp8_e4m3_to_f32(((const uint8_t *)base)[idx]) * s;
    }
    }
}

/* Writes tokens [from, to) of k, v ([S, KVH, D]) with lh_k_paged_kv_write. */
static lh_status tpool_write(lh_kctx *ctx, tpool *p, const float *k, const float *v, int64_t from,
                             int64_t to)
{
    const int64_t row = p->KVH * p->D;
    lh_tensor tk = kt_t3(LH_DTYPE_F32, (float *)k + from * row, to - from, p->KVH, p->D);
    lh_tensor tv = kt_t3(LH_DTYPE_F32, (float *)v + from * row, to - from, p->KVH, p->D);
    return lh_k_paged_kv_write(ctx, &p->kv, p->table, p->n_table, from, &tk, &tv);
}

/* ---- paged attention vs the references (kt_attn_ref, ktest.h) ------------------------------- */

struct pcase {
    const char *name;
    int64_t T, H, KVH, D, S, window, chunk;
    bool from_zero; /* queries at positions 0..T-1 (S == T) rather than the last T */
};

static const struct pcase PCases[] = {
    {"decode GQA 8/2", 1, 8, 2, 64, 37, 0, 0, false},
    {"decode long context GQA 4/2", 1, 4, 2, 32, 1000, 0, 0, false},
    {"decode MQA 6/1, D 33", 1, 6, 1, 33, 300, 0, 0, false},
    {"decode batch-of-3 queries, MHA 3/3", 3, 3, 3, 16, 520, 0, 0, false},
    {"prefill at the end of the cache, MHA 4/4", 20, 4, 4, 16, 100, 0, 0, false},
    {"prefill from 0, GQA 4/2, D 8", 70, 4, 2, 8, 70, 0, 0, true},
    {"prefill sliding window 20", 7, 4, 2, 32, 150, 20, 0, false},
    {"decode sliding window 16", 1, 4, 1, 64, 500, 16, 0, false},
    {"prefill chunked 32", 40, 4, 2, 16, 120, 0, 32, false},
    {"decode chunked 256", 1, 2, 1, 16, 777, 0, 256, false},
    {"prefill chunked 64 + window 10", 12, 2, 2, 8, 200, 10, 64, false},
    {"prefill from 0 chunked 16", 50, 2, 1, 8, 50, 0, 16, true},
};
#define N_PCASES (sizeof PCases / sizeof PCases[0])

static const lh_dtype KV_DTYPES[4] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16,
                                      LH_DTYPE_FP8_E4M3};
static const int64_t BLOCK_SIZES[3] = {1, 16, 64};

static lh_status run_paged(lh_kctx *ctx, const tpool *p, const float *q, const int32_t *qpos,
                           const struct pcase *c, int64_t n_splits, float softcap, float *out)
{
    lh_tensor tq = kt_t3(LH_DTYPE_F32, (float *)q, c->T, c->H, c->D);
    lh_tensor to = kt_t3(LH_DTYPE_F32, out, c->T, c->H, c->D);
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 1.0f / sqrtf((float)c->D),
                                .sliding_window = c->window, .chunk_size = c->chunk,
                                .n_splits = n_splits, .softcap = softcap};
    lh_status st = lh_k_paged_attention(ctx, &tq, &p->kv, p->table, p->n_table, c->S, qpos, &prm,
                                        &to);
    if (st != LH_OK)
        printf("\n    %s", lh_k_last_error(ctx));
    return st;
}

/* Writes k, v ([S, KVH, D]) into p the way a sequence fills its cache -- a prefill piece of
 * S / 2 tokens, then appends of 1..5 -- and reads back what the pool holds into kd, vd,
 * checking the stored values into *stored; returns max|vd|. */
static double tpool_fill(lh_kctx *ctx, tpool *p, const float *k, const float *v, int64_t S,
                         float *kd, float *vd, kt_cmp *stored)
{
    int64_t pos = S / 2;
    lh_status st = tpool_write(ctx, p, k, v, 0, pos);
    while (st == LH_OK && pos < S) {
        int64_t n = 1 + (int64_t)(kt_u64() % 5);
        if (pos + n > S)
            n = S - pos;
        st = tpool_write(ctx, p, k, v, pos, pos + n);
        pos += n;
    }
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    const int64_t KVH = p->KVH, D = p->D, nkv = S * KVH * D;
    double vmax = 0;
    for (int64_t i = 0; i < nkv; i++) {
        int64_t pp = i / (KVH * D), h = (i / D) % KVH, d = i % D;
        kd[i] = tpool_get(p, 0, pp, h, d);
        vd[i] = tpool_get(p, 1, pp, h, d);
        vmax = fmax(vmax, fabs(vd[i]));
        if (p->dt == LH_DTYPE_FP8_E4M3) {
            int64_t si = p->table[pp / p->bs] * KVH + h;
            kt_check(stored, (long)i, kd[i], k[i], 0.0626 * fabs(k[i]) + 0.001953125 * p->ks[si]);
            kt_check(stored, (long)i, vd[i], v[i], 0.0626 * fabs(v[i]) + 0.001953125 * p->vs[si]);
        } else {
            kt_check(stored, (long)i, kd[i], kt_round_to(p->dt, k[i]), 0);
            kt_check(stored, (long)i, vd[i], kt_round_to(p->dt, v[i]), 0);
        }
    }
    return vmax;
}

static void paged_vs_reference(lh_k_isa isa)
{
    lh_kctx *c2 = kt_ctx(2, isa), *c1 = kt_ctx(1, isa), *c3 = kt_ctx(3, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c3);
    kt_seed(2024);
    long runs = 0;
    double worst_split = 0;
    for (size_t ci = 0; ci < N_PCASES; ci++) {
        const struct pcase *c = &PCases[ci];
        const int64_t nq = c->T * c->H * c->D, nkv = c->S * c->KVH * c->D;
        float *q = malloc((size_t)nq * sizeof(float));
        float *k = malloc((size_t)nkv * sizeof(float)), *v = malloc((size_t)nkv * sizeof(float));
        float *kd = malloc((size_t)nkv * sizeof(float)), *vd = malloc((size_t)nkv * sizeof(float));
        float *o = malloc((size_t)nq * sizeof(float)), *o1 = malloc((size_t)nq * sizeof(float));
        float *os = malloc((size_t)nq * sizeof(float)), *oc = malloc((size_t)nq * sizeof(float));
        float *ot = malloc((size_t)nq * sizeof(float));
        double *ref = malloc((size_t)nq * sizeof(double));
        int32_t *qpos = malloc((size_t)c->T * sizeof(int32_t));
        for (int64_t i = 0; i < nq; i++)
            q[i] = kt_uniform();
        for (int64_t i = 0; i < nkv; i++) {
            k[i] = kt_uniform();
            v[i] = kt_uniform() * 2.0f;
        }
        for (int64_t t = 0; t < c->T; t++)
            qpos[t] = (int32_t)(c->from_zero ? t : c->S - c->T + t);
        for (int di = 0; di < 4; di++)
            for (int bi = 0; bi < 3; bi++)
                for (int li = 0; li < 2; li++) {
                    const lh_dtype dt = KV_DTYPES[di];
                    const int64_t bs = BLOCK_SIZES[bi];
                    char what[200];
                    snprintf(what, sizeof what, "%s %s: %s, block %lld, %s", lh_k_isa_name(isa),
                             c->name, dt_str(dt), (long long)bs, li ? "HND" : "NHD");
                    tpool p;
                    tpool_init(&p, dt, li ? LH_KV_HND : LH_KV_NHD, bs, c->KVH, c->D, c->S, 3);
                    /* what the pool holds */
                    kt_cmp stored = {0};
                    const double vmax = tpool_fill(c2, &p, k, v, c->S, kd, vd, &stored);
                    KT_REPORT(stored, what);
                    const double tol = 2e-5 * vmax + 1e-6, tol_split = 2e-6 * vmax + 1e-7;
                    /* unsplit, automatic, and forced splits */
                    CU_ASSERT_EQUAL(run_paged(c2, &p, q, qpos, c, 1, 0.0f, o1), LH_OK);
                    CU_ASSERT_EQUAL(run_paged(c2, &p, q, qpos, c, 0, 0.0f, o), LH_OK);
                    kt_attn_ref(q, kd, vd, qpos, c->T, c->H, c->KVH, c->D, c->D, c->S,
                                1.0f / sqrtf((float)c->D), c->window, c->chunk, ref);
                    kt_cmp cr = {0}, cr1 = {0}, csp = {0};
                    for (int64_t i = 0; i < nq; i++) {
                        kt_check(&cr, (long)i, o[i], ref[i], tol);
                        kt_check(&cr1, (long)i, o1[i], ref[i], tol);
                        kt_check(&csp, (long)i, o[i], o1[i], tol_split);
                        worst_split = fmax(worst_split, fabs(o[i] - o1[i]) / vmax);
                    }
                    KT_REPORT(cr, what);
                    KT_REPORT(cr1, what);
                    KT_REPORT(csp, what);
                    for (int64_t ns = 5; ns <= 1000; ns *= 200) {
                        CU_ASSERT_EQUAL(run_paged(c2, &p, q, qpos, c, ns, 0.0f, os), LH_OK);
                        kt_cmp cs = {0};
                        for (int64_t i = 0; i < nq; i++) {
                            kt_check(&cs, (long)i, os[i], o1[i], tol_split);
                            worst_split = fmax(worst_split, fabs(os[i] - o1[i]) / vmax);
                        }
                        KT_REPORT(cs, what);
                    }
                    /* thread count: bit-identical */
                    CU_ASSERT_EQUAL(run_paged(c1, &p, q, qpos, c, 0, 0.0f, ot), LH_OK);
                    CU_ASSERT_EQUAL(memcmp(ot, o, (size_t)nq * sizeof(float)), 0);
                    CU_ASSERT_EQUAL(run_paged(c3, &p, q, qpos, c, 0, 0.0f, ot), LH_OK);
                    CU_ASSERT_EQUAL(memcmp(ot, o, (size_t)nq * sizeof(float)), 0);
                    /* unsplit == lh_k_attention on the same values, bit for bit */
                    if (c->chunk == 0) {
                        lh_tensor tq = kt_t3(LH_DTYPE_F32, q, c->T, c->H, c->D);
                        lh_tensor tk = kt_t3(LH_DTYPE_F32, kd, c->S, c->KVH, c->D);
                        lh_tensor tv = kt_t3(LH_DTYPE_F32, vd, c->S, c->KVH, c->D);
                        lh_tensor to = kt_t3(LH_DTYPE_F32, oc, c->T, c->H, c->D);
                        CU_ASSERT_EQUAL(lh_k_attention(c2, &tq, &tk, &tv, qpos,
                                                       1.0f / sqrtf((float)c->D), 0.0f,
                                                       c->window, &to),
                                        LH_OK);
                        bool same = memcmp(oc, o1, (size_t)nq * sizeof(float)) == 0;
                        if (!same)
                            printf("\n    FAIL %s: unsplit differs from lh_k_attention", what);
                        CU_ASSERT_TRUE(same);
                    }
                    tpool_free(&p);
                    runs++;
                }
        free(q);
        free(k);
        free(v);
        free(kd);
        free(vd);
        free(o);
        free(o1);
        free(os);
        free(oc);
        free(ot);
        free(ref);
        free(qpos);
    }
    printf("\n    %s: %ld configurations; worst |split - unsplit| / max|v| = %.3g",
           lh_k_isa_name(isa), runs, worst_split);
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c3);
}
KT_ISA_TESTS(paged_vs_reference)

/* ---- attention-logit soft-capping (Gemma 2) ---------------------------------------------------
 *
 * score = cap * tanh(score / cap) after q.k * scale, before the masks and the softmax, on
 * shapes where the cap matters: q is scaled by 12, so raw scores reach about +-15 against caps
 * of 2, 3.5 and 5 (the capped reference differs from the uncapped one by more than a tenth of
 * max|v|). Checked: vs the capped double-precision reference on the read-back values within
 * the tolerance of the test above, 2e-5 * max|v| + 1e-6; unsplit and unchunked ==
 * lh_k_attention with the same cap, bit for bit; splits (automatic, 5, 1000) == unsplit within
 * 2e-6 * max|v| + 1e-7; 1 and 3 threads bit-identical to 2. */
static const struct pcase SoftcapCases[] = {
    {"decode long context GQA 4/2", 1, 4, 2, 32, 1000, 0, 0, false},
    {"decode batch-of-3 queries, MHA 3/3", 3, 3, 3, 16, 520, 0, 0, false},
    {"prefill at the end of the cache, MHA 4/4", 20, 4, 4, 16, 100, 0, 0, false},
    {"prefill from 0, GQA 4/2, D 8", 30, 4, 2, 8, 30, 0, 0, true},
    {"prefill sliding window 20", 7, 4, 2, 32, 150, 20, 0, false},
    {"decode sliding window 16", 1, 4, 1, 64, 500, 16, 0, false},
    {"prefill chunked 32", 40, 4, 2, 16, 120, 0, 32, false},
};

static void paged_softcap(lh_k_isa isa)
{
    lh_kctx *c2 = kt_ctx(2, isa), *c1 = kt_ctx(1, isa), *c3 = kt_ctx(3, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c3);
    kt_seed(2525);
    static const lh_dtype dts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_FP8_E4M3};
    static const int64_t bss[2] = {1, 16};
    static const float caps[3] = {2.0f, 3.5f, 5.0f};
    long runs = 0;
    double worst_split = 0, worst_ref = 0, cap_effect = 0;
    for (size_t ci = 0; ci < sizeof SoftcapCases / sizeof *SoftcapCases; ci++) {
        const struct pcase *c = &SoftcapCases[ci];
        const int64_t nq = c->T * c->H * c->D, nkv = c->S * c->KVH * c->D;
        const float scale = 1.0f / sqrtf((float)c->D);
        float *q = malloc((size_t)nq * sizeof(float));
        float *k = malloc((size_t)nkv * sizeof(float)), *v = malloc((size_t)nkv * sizeof(float));
        float *kd = malloc((size_t)nkv * sizeof(float)), *vd = malloc((size_t)nkv * sizeof(float));
        float *o = malloc((size_t)nq * sizeof(float)), *o1 = malloc((size_t)nq * sizeof(float));
        float *os = malloc((size_t)nq * sizeof(float)), *oc = malloc((size_t)nq * sizeof(float));
        float *ot = malloc((size_t)nq * sizeof(float));
        double *ref = malloc((size_t)nq * sizeof(double));
        double *ref0 = malloc((size_t)nq * sizeof(double));
        int32_t *qpos = malloc((size_t)c->T * sizeof(int32_t));
        for (int64_t i = 0; i < nq; i++)
            q[i] = kt_uniform() * 12.0f;
        for (int64_t i = 0; i < nkv; i++) {
            k[i] = kt_uniform();
            v[i] = kt_uniform() * 2.0f;
        }
        for (int64_t t = 0; t < c->T; t++)
            qpos[t] = (int32_t)(c->from_zero ? t : c->S - c->T + t);
        for (int di = 0; di < 3; di++)
            for (int bi = 0; bi < 2; bi++) {
                const lh_dtype dt = dts[di];
                const int64_t bs = bss[bi];
                const bool hnd = (ci + (size_t)di + (size_t)bi) % 2 != 0;
                tpool p;
                tpool_init(&p, dt, hnd ? LH_KV_HND : LH_KV_NHD, bs, c->KVH, c->D, c->S, 2);
                kt_cmp stored = {0};
                const double vmax = tpool_fill(c2, &p, k, v, c->S, kd, vd, &stored);
                KT_REPORT(stored, c->name);
                const double tol = 2e-5 * vmax + 1e-6, tol_split = 2e-6 * vmax + 1e-7;
                kt_attn_ref(q, kd, vd, qpos, c->T, c->H, c->KVH, c->D, c->D, c->S, scale,
                            c->window, c->chunk, ref0);
                for (int cj = 0; cj < 3; cj++) {
                    const float cap = caps[cj];
                    char what[200];
                    snprintf(what, sizeof what, "%s softcap %g %s: %s, block %lld, %s",
                             lh_k_isa_name(isa), (double)cap, c->name, dt_str(dt), (long long)bs,
                             hnd ? "HND" : "NHD");
                    CU_ASSERT_EQUAL(run_paged(c2, &p, q, qpos, c, 1, cap, o1), LH_OK);
                    CU_ASSERT_EQUAL(run_paged(c2, &p, q, qpos, c, 0, cap, o), LH_OK);
                    kt_attn_ref_capped(q, kd, vd, qpos, c->T, c->H, c->KVH, c->D, c->D, c->S,
                                       scale, c->window, c->chunk, cap, ref);
                    kt_cmp cr = {0}, cr1 = {0}, csp = {0};
                    for (int64_t i = 0; i < nq; i++) {
                        kt_check(&cr, (long)i, o[i], ref[i], tol);
                        kt_check(&cr1, (long)i, o1[i], ref[i], tol);
                        kt_check(&csp, (long)i, o[i], o1[i], tol_split);
                        worst_split = fmax(worst_split, fabs(o[i] - o1[i]) / vmax);
                        worst_ref = fmax(worst_ref, fabs(o1[i] - ref[i]) / vmax);
                        cap_effect = fmax(cap_effect, fabs(ref[i] - ref0[i]) / vmax);
                    }
                    KT_REPORT(cr, what);
                    KT_REPORT(cr1, what);
                    KT_REPORT(csp, what);
                    for (int64_t ns = 5; ns <= 1000; ns *= 200) {
                        CU_ASSERT_EQUAL(run_paged(c2, &p, q, qpos, c, ns, cap, os), LH_OK);
                        kt_cmp cs = {0};
                        for (int64_t i = 0; i < nq; i++) {
                            kt_check(&cs, (long)i, os[i], o1[i], tol_split);
                            worst_split = fmax(worst_split, fabs(os[i] - o1[i]) / vmax);
                        }
                        KT_REPORT(cs, what);
                    }
                    CU_ASSERT_EQUAL(run_paged(c1, &p, q, qpos, c, 0, cap, ot), LH_OK);
                    CU_ASSERT_EQUAL(memcmp(ot, o, (size_t)nq * sizeof(float)), 0);
                    CU_ASSERT_EQUAL(run_paged(c3, &p, q, qpos, c, 0, cap, ot), LH_OK);
                    CU_ASSERT_EQUAL(memcmp(ot, o, (size_t)nq * sizeof(float)), 0);
                    if (c->chunk == 0) { /* the contiguous kernel with the same cap */
                        lh_tensor tq = kt_t3(LH_DTYPE_F32, q, c->T, c->H, c->D);
                        lh_tensor tk = kt_t3(LH_DTYPE_F32, kd, c->S, c->KVH, c->D);
                        lh_tensor tv = kt_t3(LH_DTYPE_F32, vd, c->S, c->KVH, c->D);
                        lh_tensor to = kt_t3(LH_DTYPE_F32, oc, c->T, c->H, c->D);
                        CU_ASSERT_EQUAL(lh_k_attention(c2, &tq, &tk, &tv, qpos, scale, cap,
                                                       c->window, &to),
                                        LH_OK);
                        bool same = memcmp(oc, o1, (size_t)nq * sizeof(float)) == 0;
                        if (!same)
                            printf("\n    FAIL %s: unsplit differs from lh_k_attention", what);
                        CU_ASSERT_TRUE(same);
                    }
                    runs++;
                }
                tpool_free(&p);
            }
        free(q);
        free(k);
        free(v);
        free(kd);
        free(vd);
        free(o);
        free(o1);
        free(os);
        free(oc);
        free(ot);
        free(ref);
        free(ref0);
        free(qpos);
    }
    printf("\n    %s: %ld configurations; worst |out - ref| / max|v| = %.3g, |split - unsplit| / "
           "max|v| = %.3g; the cap moves the output by up to %.3g max|v|",
           lh_k_isa_name(isa), runs, worst_ref, worst_split, cap_effect);
    CU_ASSERT_TRUE(cap_effect > 0.1); /* the shapes are ones where the cap matters */
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c3);
}
KT_ISA_TESTS(paged_softcap)

/* Mask boundaries with one-hot values: equal scores, v = 2^p, so the output tells which
 * positions were visible. */
static void test_paged_mask_boundaries(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(5);
    tpool p;
    tpool_init(&p, LH_DTYPE_F32, LH_KV_NHD, 3, 1, 1, 10, 2);
    float k[10], v[10], q[1] = {0}, o[1];
    for (int i = 0; i < 10; i++) {
        k[i] = 0;
        v[i] = (float)(1 << i);
    }
    CU_ASSERT_EQUAL_FATAL(tpool_write(ctx, &p, k, v, 0, 10), LH_OK);
    const struct {
        int32_t pos;
        int64_t window, chunk;
        double want;
    } cases[] = {
        {9, 0, 4, (256 + 512) / 2.0},           /* chunk [8, 12) */
        {7, 0, 4, (16 + 32 + 64 + 128) / 4.0},  /* chunk [4, 8) */
        {8, 0, 4, 256},                          /* first position of a chunk: itself only */
        {9, 3, 4, (256 + 512) / 2.0},           /* window 3 reaches 7, the chunk starts at 8 */
        {5, 3, 4, (16 + 32) / 2.0},             /* window reaches 3, chunk starts at 4 */
        {9, 3, 0, (128 + 256 + 512) / 3.0},     /* window only */
        {5, 0, 0, 63 / 6.0},                     /* causal only */
        {9, 0, 100, 1023 / 10.0},                /* chunk larger than the context */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 1, 1, 1), to = kt_t3(LH_DTYPE_F32, o, 1, 1, 1);
        for (int64_t ns = 0; ns <= 4; ns += 4) {
            lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 1.0f,
                                        .sliding_window = cases[i].window,
                                        .chunk_size = cases[i].chunk, .n_splits = ns};
            CU_ASSERT_EQUAL(lh_k_paged_attention(ctx, &tq, &p.kv, p.table, p.n_table, 10,
                                                 &cases[i].pos, &prm, &to),
                            LH_OK);
            CU_ASSERT_DOUBLE_EQUAL(o[0], cases[i].want, 1e-4 * cases[i].want);
        }
    }
    tpool_free(&p);
    lh_k_ctx_free(ctx);
}

/* fp8 scales: a block's scale follows its largest value; growing it re-encodes the tokens
 * already there; a fresh block gets its own scale. */
static void test_paged_fp8_scales(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(9);
    tpool p;
    tpool_init(&p, LH_DTYPE_FP8_E4M3, LH_KV_HND, 4, 1, 2, 8, 0);
    float k[8 * 2] = {1.0f, -0.5f, 4.0f, 0.0f, 0.1f, 0.0f, 2.0f, 1.0f, 0.25f, 0.125f};
    float v[8 * 2] = {0};
    const int32_t b0 = p.table[0], b1 = p.table[1];
    CU_ASSERT_EQUAL_FATAL(tpool_write(ctx, &p, k, v, 0, 1), LH_OK);
    CU_ASSERT_EQUAL(p.ks[b0], 1.0f / 448.0f);
    CU_ASSERT_EQUAL(p.vs[b0], 0.0f); /* all zero: zero scale, zeros stored */
    CU_ASSERT_EQUAL(tpool_get(&p, 1, 0, 0, 0), 0.0f);
    CU_ASSERT_EQUAL_FATAL(tpool_write(ctx, &p, k, v, 1, 2), LH_OK); /* 4.0: the scale grows */
    CU_ASSERT_EQUAL(p.ks[b0], 4.0f / 448.0f);
    CU_ASSERT_DOUBLE_EQUAL(tpool_get(&p, 0, 0, 0, 0), 1.0, 1e-6);  /* 112 * 4/448 */
    CU_ASSERT_DOUBLE_EQUAL(tpool_get(&p, 0, 0, 0, 1), -0.5, 1e-6); /* -56 * 4/448 */
    CU_ASSERT_DOUBLE_EQUAL(tpool_get(&p, 0, 1, 0, 0), 4.0, 1e-6);
    CU_ASSERT_EQUAL_FATAL(tpool_write(ctx, &p, k, v, 2, 5), LH_OK); /* fits; then a new block */
    CU_ASSERT_EQUAL(p.ks[b0], 4.0f / 448.0f);
    CU_ASSERT_EQUAL(p.ks[b1], 0.25f / 448.0f); /* position 4 alone in block 1 */
    CU_ASSERT_DOUBLE_EQUAL(tpool_get(&p, 0, 3, 0, 0), 2.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(tpool_get(&p, 0, 4, 0, 1), 0.125, 1e-7);
    tpool_free(&p);
    lh_k_ctx_free(ctx);
}

static void test_paged_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(3);
    tpool p;
    tpool_init(&p, LH_DTYPE_F32, LH_KV_NHD, 4, 2, 8, 10, 1);
    float kv[10 * 2 * 8] = {0}, q[2 * 4 * 8] = {0}, o[2 * 4 * 8];
    CU_ASSERT_EQUAL_FATAL(tpool_write(ctx, &p, kv, kv, 0, 10), LH_OK);
    int32_t pos[2] = {8, 9};
    lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 2, 4, 8), to = kt_t3(LH_DTYPE_F32, o, 2, 4, 8);
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 0.3f};
#define PA(ctx_, q_, kv_, tab_, ntab_, len_, pos_, prm_, out_)                                     \
    lh_k_paged_attention((ctx_), (q_), (kv_), (tab_), (ntab_), (len_), (pos_), (prm_), (out_))
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_OK);
    CU_ASSERT_EQUAL(PA(NULL, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(PA(ctx, &tq, NULL, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, NULL, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, NULL, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, NULL, &prm, &to), LH_E_USAGE);
    /* a table too short for the context, an entry outside the pool */
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, 2, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "need 3 logical blocks of 4"));
    int32_t bad_table[3] = {0, 4, 1};
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, bad_table, 3, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "block_table[1] = 4 is not a block of the pool [0, 4)"));
    /* positions outside the context */
    pos[1] = 10;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "q_pos[1] = 10 is outside the cached context [0, 10)"));
    pos[1] = 9;
    /* params */
    lh_paged_attn_params small = {.struct_size = 2, .scale = 0.3f};
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &small, &to), LH_E_USAGE);
    lh_paged_attn_params old = {.struct_size = offsetof(lh_paged_attn_params, chunk_size),
                                .scale = 0.3f, .chunk_size = -7, .n_splits = -7};
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &old, &to), LH_OK);
    prm.n_splits = -1;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    prm.n_splits = 0;
    prm.scale = INFINITY;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    prm.scale = 0.3f;
    /* softcap: finite and >= 0; a struct_size that ends before it reads it as 0 */
    const float bad_caps[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        prm.softcap = bad_caps[i];
        CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "softcap"));
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "must be finite and >= 0"));
    }
    lh_paged_attn_params no_cap = prm;
    no_cap.struct_size = offsetof(lh_paged_attn_params, softcap);
    no_cap.softcap = -5.0f; /* beyond struct_size: never read */
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &no_cap, &to), LH_OK);
    prm.softcap = 0.0f;
    /* shapes: heads not a multiple of kv heads, head_dim, out */
    lh_tensor q3 = kt_t3(LH_DTYPE_F32, q, 2, 3, 8), q7 = kt_t3(LH_DTYPE_F32, q, 2, 4, 7);
    lh_tensor o3 = kt_t3(LH_DTYPE_F32, o, 2, 3, 8);
    CU_ASSERT_EQUAL(PA(ctx, &q3, &p.kv, p.table, p.n_table, 10, pos, &prm, &o3), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "not a multiple of the 2 kv heads"));
    CU_ASSERT_EQUAL(PA(ctx, &q7, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &o3), LH_E_USAGE);
    /* out overlapping the pool */
    lh_tensor in_pool = kt_t3(LH_DTYPE_F32, p.k, 2, 4, 8);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &in_pool), LH_E_USAGE);
    /* pool: bad layout, int8, k/v shapes disagreeing, fp8 without scales */
    lh_kv_pages bad = p.kv;
    bad.layout = (lh_kv_layout)7;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &bad, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    bad = p.kv;
    bad.k.dtype = bad.v.dtype = LH_DTYPE_INT8;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &bad, p.table, p.n_table, 10, pos, &prm, &to), LH_E_UNSUPPORTED);
    /* k and v may differ in dtype (mixed-precision KV), never in shape */
    bad = p.kv;
    bad.v.shape[0] = 3;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &bad, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "must have the same shape"));
    bad = p.kv;
    bad.v.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &bad, p.table, p.n_table, 10, pos, &prm, &to), LH_OK);
    bad = p.kv;
    bad.k.dtype = bad.v.dtype = LH_DTYPE_FP8_E4M3;
    CU_ASSERT_EQUAL(PA(ctx, &tq, &bad, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "kv.k_scale"));
    bad = p.kv;
    bad.k.device = kt_cuda();
    CU_ASSERT_EQUAL(PA(ctx, &tq, &bad, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    /* writes */
    lh_tensor k1 = kt_t3(LH_DTYPE_F32, kv, 3, 2, 8), k1h = kt_t3(LH_DTYPE_F32, kv, 3, 1, 8);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &p.kv, p.table, p.n_table, 10, &k1, &k1), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "positions [10, 13) do not fit the 3 blocks of 4"));
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &p.kv, p.table, p.n_table, 0, &k1h, &k1h), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &p.kv, p.table, p.n_table, -1, &k1, &k1), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &p.kv, bad_table, 3, 4, &k1, &k1), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &p.kv, bad_table, 3, 0, &k1, &k1), LH_OK);
    lh_tensor from_pool = kt_t3(LH_DTYPE_F32, p.v, 3, 2, 8);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &p.kv, p.table, p.n_table, 0, &from_pool, &k1),
                    LH_E_USAGE);

    /* lh_k_ctx_set_bounds: both or neither, non-negative; then calls beyond them are refused
     * (the context of 10 tokens needs 3 blocks of 4) on every device */
    CU_ASSERT_EQUAL(lh_k_ctx_set_bounds(ctx, -1, 4), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_ctx_set_bounds(ctx, 16, 0), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "both be positive, or both 0"));
    CU_ASSERT_EQUAL(lh_k_ctx_set_bounds(ctx, 16, (int64_t)INT32_MAX + 1), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_ctx_set_bounds(ctx, 16, 4), LH_OK);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_OK);
    CU_ASSERT_EQUAL(lh_k_ctx_set_bounds(ctx, 9, 4), LH_OK);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "exceed the context's bounds"));
    CU_ASSERT_EQUAL(lh_k_ctx_set_bounds(ctx, 16, 2), LH_OK);
    CU_ASSERT_EQUAL(lh_k_paged_kv_write(ctx, &p.kv, p.table, p.n_table, 8, &k1, &k1), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "3 blocks exceed"));
    CU_ASSERT_EQUAL(lh_k_ctx_set_bounds(ctx, 0, 0), LH_OK);
    CU_ASSERT_EQUAL(PA(ctx, &tq, &p.kv, p.table, p.n_table, 10, pos, &prm, &to), LH_OK);
#undef PA
    tpool_free(&p);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo fp8_tests[] = {
    {"all 256 codes decode as the format defines", test_fp8_decode_all_codes},
    {"round trip, midpoints to even, neighbours", test_fp8_encode_round_trip_and_midpoints},
    {"hand-computed values, saturation, NaN", test_fp8_encode_hand_values},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo paged_tests[] = {
    {"vs reference and lh_k_attention (scalar)", paged_vs_reference_scalar},
    {"vs reference and lh_k_attention (avx2)", paged_vs_reference_avx2},
    {"vs reference and lh_k_attention (avx512)", paged_vs_reference_avx512},
    {"softcap vs reference, == lh_k_attention, split == unsplit (scalar)", paged_softcap_scalar},
    {"softcap vs reference, == lh_k_attention, split == unsplit (avx2)", paged_softcap_avx2},
    {"softcap vs reference, == lh_k_attention, split == unsplit (avx512)", paged_softcap_avx512},
    {"causal, window and chunk boundaries", test_paged_mask_boundaries},
    {"fp8 per-block scales", test_paged_fp8_scales},
    {"argument errors", test_paged_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"fp8 e4m3", NULL, NULL, NULL, NULL, fp8_tests},
    {"paged attention", NULL, NULL, NULL, NULL, paged_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
