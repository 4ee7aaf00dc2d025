/* The "paged" attention backend against "vanilla", the oracle.
 *
 * End to end (public API, every fixture under tests/fixtures/models): greedy generation of
 * every prompt in one mixed-length batch through attn_backend "paged" is identical token for
 * token to "vanilla"; logits of prompt + continuation agree within 1e-5 absolute (f32 KV; the
 * unsplit f32 paged kernel computes exactly what vanilla's contiguous kernel does, so the
 * measured difference is 0); each sequence alone equals the batch; 1 and 2 threads agree.
 *
 * Backend level (the plugin's own sources, driven through its ops with settings the attention
 * contract cannot carry yet: block size, layout, KV dtype, pool size, chunk size): a scripted
 * run of steps mixing prefill, chunked prefill, decode and multi-token sequences in one step,
 * with slots released and reused, for block sizes 1, 16, 64, layouts NHD and HND, KV dtypes
 * f32, bf16, f16 and fp8 e4m3, full / sliding-window / chunked attention. Each step's output
 * is compared with a double-precision reference over the keys and values the pool holds for
 * each sequence (read back independently through its block table), |out - ref| <= 2e-5 *
 * max|v| + 1e-6, and, unchunked, with lh_k_attention (vanilla's kernel) on the same values:
 * within 2e-6 * max|v| + 1e-7 (identical whenever the kernel does not split the context).
 * The pool: blocks come back on release; running out is LH_E_UNSUPPORTED naming blocks
 * needed, free and total, and changes nothing. */
#include "llmhost.h"
#include "lh_kernels.h"
#include "paged.h"
#include "runner.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_LOGITS 1e-5
#define MAX_NEW 32

static lh_host *host;

/* ---- end to end ------------------------------------------------------------------------------ */

typedef struct fixture {
    char dir[1024];
    char name[256];
    size_t n_prompts;
    int32_t *prompts[8];
    int64_t lens[8];
} fixture;

static bool fixture_load(const char *root, const char *name, fixture *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%.700s/%.255s", root, name);
    snprintf(f->name, sizeof f->name, "%s", name);
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", f->dir);
    json_t *ref = json_load_file(path, 0, NULL);
    if (!ref)
        return false;
    json_t *prompts = json_object_get(ref, "prompts");
    f->n_prompts = json_array_size(prompts);
    if (f->n_prompts > 8)
        f->n_prompts = 8;
    for (size_t i = 0; i < f->n_prompts; i++) {
        json_t *p = json_array_get(prompts, i);
        f->lens[i] = (int64_t)json_array_size(p);
        f->prompts[i] = malloc((size_t)(f->lens[i] ? f->lens[i] : 1) * sizeof(int32_t));
        for (int64_t j = 0; j < f->lens[i]; j++)
            f->prompts[i][j] = (int32_t)json_integer_value(json_array_get(p, (size_t)j));
    }
    json_decref(ref);
    return f->n_prompts > 0;
}

static void fixture_free(fixture *f)
{
    for (size_t i = 0; i < f->n_prompts; i++)
        free(f->prompts[i]);
}

static lh_engine *open_engine(const fixture *f, const char *backend, int threads)
{
    static const char *const overrides[] = {"max_batch_size=8", "max_seq_len=128", NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = f->dir, .n_threads = threads,
                           .overrides = overrides, .attn_backend = backend};
    lh_engine *e = NULL;
    lh_err err = {0};
    if (lh_engine_open(host, &o, &e, &err) != LH_OK)
        fprintf(stderr, "\n  %s (%s): %s\n", f->name, backend, err.msg);
    return e;
}

static bool generate(lh_engine *e, const fixture *f, size_t first, size_t count, int32_t *out)
{
    lh_err err = {0};
    lh_status st = lh_engine_generate_greedy(e, (const int32_t *const *)&f->prompts[first],
                                             &f->lens[first], (int64_t)count, MAX_NEW, out, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  %s: %s\n", f->name, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    return st == LH_OK;
}

static void for_each_fixture(void (*check)(const fixture *f))
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", lh_test_env("LH_FIXTURES"));
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    CU_ASSERT_FATAL(n > 0);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        fixture f;
        if (names[i]->d_name[0] != '.' && fixture_load(dir, names[i]->d_name, &f)) {
            check(&f);
            checked++;
            fixture_free(&f);
        }
        free(names[i]);
    }
    free(names);
    CU_ASSERT(checked >= 10);
}

static void check_vs_vanilla(const fixture *f)
{
    lh_engine *van = open_engine(f, "vanilla", 0), *pag = open_engine(f, "paged", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(van);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pag);
    int32_t a[8 * MAX_NEW], b[8 * MAX_NEW];
    bool ok = generate(van, f, 0, f->n_prompts, a) && generate(pag, f, 0, f->n_prompts, b);
    int first_diff = -1;
    for (size_t i = 0; ok && i < f->n_prompts * MAX_NEW && first_diff < 0; i++)
        if (a[i] != b[i])
            first_diff = (int)i;
    if (first_diff >= 0)
        printf("\n    %s: paged greedy differs from vanilla at prompt %d step %d", f->name,
               first_diff / MAX_NEW, first_diff % MAX_NEW);
    CU_ASSERT_EQUAL(first_diff, -1);
    /* logits of every position of prompt + continuation */
    const int64_t vocab = lh_engine_vocab_size(van);
    double worst = 0;
    for (size_t i = 0; ok && i < f->n_prompts; i++) {
        const int64_t n = f->lens[i] + MAX_NEW;
        int32_t *toks = malloc((size_t)n * sizeof *toks);
        memcpy(toks, f->prompts[i], (size_t)f->lens[i] * sizeof *toks);
        memcpy(toks + f->lens[i], a + i * MAX_NEW, MAX_NEW * sizeof *toks);
        float *la = malloc((size_t)(n * vocab) * sizeof(float));
        float *lb = malloc((size_t)(n * vocab) * sizeof(float));
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_engine_logits(van, toks, n, la, &err), LH_OK);
        CU_ASSERT_EQUAL(lh_engine_logits(pag, toks, n, lb, &err), LH_OK);
        for (int64_t j = 0; j < n * vocab; j++) {
            double d = fabs((double)la[j] - (double)lb[j]);
            if (!(d <= worst))
                worst = isnan(d) ? INFINITY : d;
        }
        free(toks);
        free(la);
        free(lb);
    }
    printf("\n    %-22s greedy %s; max |dlogit| paged vs vanilla %.3g", f->name,
           first_diff < 0 ? "identical" : "DIFFERS", worst);
    CU_ASSERT(worst <= TOL_LOGITS);
    lh_engine_close(van);
    lh_engine_close(pag);
}

static void check_alone_and_threads(const fixture *f)
{
    lh_engine *one = open_engine(f, "paged", 1), *two = open_engine(f, "paged", 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    CU_ASSERT_PTR_NOT_NULL_FATAL(two);
    int32_t a[8 * MAX_NEW], b[8 * MAX_NEW], alone[MAX_NEW];
    if (generate(one, f, 0, f->n_prompts, a) && generate(two, f, 0, f->n_prompts, b))
        CU_ASSERT_EQUAL(memcmp(a, b, f->n_prompts * MAX_NEW * sizeof *a), 0);
    for (size_t i = 0; i < f->n_prompts; i++)
        if (generate(two, f, i, 1, alone))
            CU_ASSERT_EQUAL(memcmp(alone, a + i * MAX_NEW, sizeof alone), 0);
    lh_engine_close(one);
    lh_engine_close(two);
}

static void test_greedy_and_logits(void) { for_each_fixture(check_vs_vanilla); }
static void test_alone_and_threads(void) { for_each_fixture(check_alone_and_threads); }

static void test_engine_limits(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/llama-mha-f32", lh_test_env("LH_FIXTURES"));
    const char *ov[] = {"max_seq_len=4", NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = dir, .n_threads = 1,
                           .overrides = ov, .attn_backend = "paged"};
    lh_engine *e = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_engine_open(host, &o, &e, &err), LH_OK);
    int32_t five[5] = {1, 2, 3, 4, 5};
    float l5[5 * 4096];
    CU_ASSERT_EQUAL(lh_engine_logits(e, five, 5, l5, &err), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max_seq_len 4"));
    /* nothing stuck: a fitting request still works, twice */
    CU_ASSERT_EQUAL(lh_engine_logits(e, five, 4, l5, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_engine_logits(e, five, 4, l5, &err), LH_OK);
    lh_engine_close(e);
}

/* ---- backend level ----------------------------------------------------------------------------- */

#define MAX_SEQS 4
#define MAX_LEN 400

/* Backend under test plus what the test knows of each slot. */
typedef struct bk {
    lh_attn_layer *layer;
    lh_attn_geometry g;
    paged_config cfg;
    lh_kctx *kctx;
    int64_t len[MAX_SEQS];
    bool check; /* compare this step's outputs (off for most decode steps: run time) */
    double worst_ref, worst_van; /* err / max|v| */
    long bad;
} bk;

static uint64_t rng = 88172645463325252ull;
static double urand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* The value the pool holds for a sequence's (k or v, position, kv head, d). */
static float pool_get(const bk *b, const paged_seq *s, const lh_kv_pages *kvp, int is_v,
                      int64_t pos, int64_t h, int64_t d)
{
    const lh_kv_pages kv = *kvp;
    const int64_t bs = b->cfg.block_size, KVH = b->g.num_kv_heads, D = b->g.head_dim;
    const int64_t phys = s->blocks[pos / bs], off = pos % bs;
    const int64_t idx = kv.layout == LH_KV_NHD ? ((phys * bs + off) * KVH + h) * D + d
                                               : ((phys * KVH + h) * bs + off) * D + d;
    const void *base = is_v ? kv.v.data : kv.k.data;
    switch (b->cfg.kv_dtype) {
    case LH_DTYPE_F32: return ((const float *)base)[idx];
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)base)[idx]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)base)[idx]);
    default: {
        const float *sc = (is_v ? kv.v_scale.data : kv.k_scale.data);
        return lh_k_fp8_e4m3_to_f32(((const uint8_t *)base)[idx]) * sc[phys * KVH + h];
    }
    }
}

static bool visible(int64_t p, int64_t qp, int64_t window, int64_t chunk)
{
    return p <= qp && !(window > 0 && qp - p >= window) && !(chunk > 0 && p / chunk != qp / chunk);
}

/* Checks out [n, H, D] of one sequence against the references on the pool's values. */
static void check_seq(bk *b, int64_t slot, const float *q, const int32_t *pos, int64_t n,
                      const float *out, const char *what)
{
    const int64_t H = b->g.num_heads, KVH = b->g.num_kv_heads, D = b->g.head_dim;
    const int64_t S = b->len[slot];
    paged_pool *pool = paged_layer_pool(b->layer);
    const paged_seq *seq = paged_pool_seq(pool, slot);
    const lh_kv_pages kv = paged_pool_pages(pool);
    float *k = malloc((size_t)(S * KVH * D) * sizeof(float));
    float *v = malloc((size_t)(S * KVH * D) * sizeof(float));
    double vmax = 0;
    for (int64_t p = 0; p < S; p++)
        for (int64_t h = 0; h < KVH; h++)
            for (int64_t d = 0; d < D; d++) {
                k[(p * KVH + h) * D + d] = pool_get(b, seq, &kv, 0, p, h, d);
                v[(p * KVH + h) * D + d] = pool_get(b, seq, &kv, 1, p, h, d);
                vmax = fmax(vmax, fabs(v[(p * KVH + h) * D + d]));
            }
    const double tol = 2e-5 * vmax + 1e-6;
    double *sc = malloc((size_t)S * sizeof(double));
    long bad = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / (H / KVH);
            double m = -INFINITY, sum = 0;
            for (int64_t p = 0; p < S; p++) {
                sc[p] = -INFINITY;
                if (!visible(p, pos[t], b->g.sliding_window, b->cfg.chunk_size))
                    continue;
                double s = 0;
                for (int64_t d = 0; d < D; d++)
                    s += (double)q[(t * H + h) * D + d] * k[(p * KVH + kvh) * D + d];
                sc[p] = s * b->g.scale;
                m = fmax(m, sc[p]);
            }
            for (int64_t p = 0; p < S; p++)
                sum += sc[p] == -INFINITY ? 0 : exp(sc[p] - m);
            for (int64_t d = 0; d < D; d++) {
                double o = 0;
                for (int64_t p = 0; p < S; p++)
                    if (sc[p] != -INFINITY)
                        o += exp(sc[p] - m) / sum * v[(p * KVH + kvh) * D + d];
                double e = fabs(out[(t * H + h) * D + d] - o);
                if (!(e <= tol))
                    bad++;
                b->worst_ref = fmax(b->worst_ref, e / vmax);
            }
        }
    if (b->cfg.chunk_size == 0) { /* vanilla's kernel on the same values */
        float *o2 = malloc((size_t)(n * H * D) * sizeof(float));
        int64_t qs[3] = {n, H, D}, kvs[3] = {S, KVH, D};
        lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, (void *)q, 3, qs);
        lh_tensor to = lh_tensor_cpu(LH_DTYPE_F32, o2, 3, qs);
        lh_tensor tk = lh_tensor_cpu(LH_DTYPE_F32, k, 3, kvs);
        lh_tensor tv = lh_tensor_cpu(LH_DTYPE_F32, v, 3, kvs);
        CU_ASSERT_EQUAL(lh_k_attention(b->kctx, &tq, &tk, &tv, pos, b->g.scale,
                                       b->g.sliding_window, &to), LH_OK);
        for (int64_t i = 0; i < n * H * D; i++) {
            double e = fabs(out[i] - o2[i]);
            if (!(e <= 2e-6 * vmax + 1e-7))
                bad++;
            b->worst_van = fmax(b->worst_van, e / vmax);
        }
        free(o2);
    }
    if (bad)
        printf("\n    FAIL %s: slot %lld, %lld tokens over %lld: %ld values out of tolerance", what,
               (long long)slot, (long long)n, (long long)S, bad);
    b->bad += bad;
    free(sc);
    free(k);
    free(v);
}

/* One step: seqs[i] = {slot, n_new}; random q, k, v. Returns the status of prepare/forward. */
static lh_status bk_step(bk *b, const int64_t (*seqs)[2], int64_t n_seqs, const char *what,
                         char *msg, size_t msg_size)
{
    const int64_t H = b->g.num_heads, KVH = b->g.num_kv_heads, D = b->g.head_dim;
    int64_t T = 0, start[MAX_SEQS], nn[MAX_SEQS], ctx[MAX_SEQS], slot[MAX_SEQS];
    for (int64_t i = 0; i < n_seqs; i++) {
        slot[i] = seqs[i][0];
        nn[i] = seqs[i][1];
        ctx[i] = b->len[slot[i]];
        start[i] = T;
        T += nn[i];
    }
    int32_t *pos = malloc((size_t)(T ? T : 1) * sizeof *pos);
    float *q = malloc((size_t)(T * H * D + 1) * sizeof(float));
    float *k = malloc((size_t)(T * KVH * D + 1) * sizeof(float));
    float *v = malloc((size_t)(T * KVH * D + 1) * sizeof(float));
    float *out = malloc((size_t)(T * H * D + 1) * sizeof(float));
    for (int64_t i = 0; i < n_seqs; i++)
        for (int64_t t = 0; t < nn[i]; t++)
            pos[start[i] + t] = (int32_t)(ctx[i] + t);
    for (int64_t i = 0; i < T * H * D; i++)
        q[i] = (float)urand();
    for (int64_t i = 0; i < T * KVH * D; i++) {
        k[i] = (float)urand();
        v[i] = (float)(urand() * 2.0);
    }
    lh_attn_step st = {.struct_size = sizeof st, .n_tokens = T, .n_seqs = n_seqs,
                       .positions = pos, .token_start = start, .n_new = nn, .ctx_len = ctx,
                       .slot = slot};
    int64_t qs[3] = {T, H, D}, ks[3] = {T, KVH, D};
    lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, q, 3, qs), to = lh_tensor_cpu(LH_DTYPE_F32, out, 3, qs);
    lh_tensor tk = lh_tensor_cpu(LH_DTYPE_F32, k, 3, ks), tv = lh_tensor_cpu(LH_DTYPE_F32, v, 3, ks);
    lh_status rc = paged_ops.prepare(b->layer, &st, msg, msg_size);
    if (rc == LH_OK)
        rc = paged_ops.forward(b->layer, b->kctx, &st, &tq, &tk, &tv, &to, msg, msg_size);
    for (int64_t i = 0; rc == LH_OK && i < n_seqs; i++) {
        b->len[slot[i]] += nn[i];
        if (b->check)
            check_seq(b, slot[i], q + start[i] * H * D, pos + start[i], nn[i],
                      out + start[i] * H * D, what);
    }
    free(pos);
    free(q);
    free(k);
    free(v);
    free(out);
    return rc;
}

static void bk_release(bk *b, int64_t slot)
{
    paged_ops.release(b->layer, slot);
    b->len[slot] = 0;
}

static bool bk_open(bk *b, const paged_config *cfg, int64_t window, int threads)
{
    memset(b, 0, sizeof *b);
    b->check = true;
    b->g = (lh_attn_geometry){.struct_size = sizeof b->g, .layer_index = 3, .num_heads = 6,
                              .num_kv_heads = 2, .head_dim = 24, .sliding_window = window,
                              .scale = 0.2f, .max_seq_len = MAX_LEN, .max_seqs = MAX_SEQS};
    b->cfg = *cfg;
    lh_device cpu = {LH_DEVICE_CPU, 0};
    b->kctx = lh_k_ctx_create(threads, cpu);
    char msg[512] = "";
    lh_status st = paged_create_with(&b->g, cfg, &b->layer, msg, sizeof msg);
    if (st != LH_OK)
        printf("\n    create: %s", msg);
    return st == LH_OK && b->kctx;
}

static void bk_close(bk *b)
{
    paged_ops.destroy(b->layer);
    lh_k_ctx_free(b->kctx);
}

static const char *dt_str(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_F16: return "f16";
    default: return "fp8";
    }
}

static void test_backend_scripted_steps(void)
{
    static const lh_dtype dts[4] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16,
                                    LH_DTYPE_FP8_E4M3};
    static const int64_t sizes[3] = {1, 16, 64};
    static const struct {
        const char *name;
        int64_t window, chunk;
    } masks[3] = {{"full", 0, 0}, {"window 24", 24, 0}, {"chunked 32", 0, 32}};
    double worst_ref = 0, worst_van = 0;
    int runs = 0;
    for (int di = 0; di < 4; di++)
        for (int si = 0; si < 3; si++)
            for (int li = 0; li < 2; li++)
                for (int mi = 0; mi < 3; mi++) {
                    paged_config cfg = paged_default_config;
                    cfg.block_size = sizes[si];
                    cfg.layout = li ? LH_KV_HND : LH_KV_NHD;
                    cfg.kv_dtype = dts[di];
                    cfg.chunk_size = masks[mi].chunk;
                    char what[160];
                    snprintf(what, sizeof what, "%s, block %lld, %s, %s", dt_str(dts[di]),
                             (long long)sizes[si], li ? "HND" : "NHD", masks[mi].name);
                    bk b;
                    CU_ASSERT_FATAL(bk_open(&b, &cfg, masks[mi].window, 3));
                    char msg[512];
                    /* prefill two, then chunked prefill + decode + a new prefill in one step */
                    const int64_t s1[][2] = {{0, 37}, {1, 5}};
                    const int64_t s2[][2] = {{0, 1}, {1, 20}, {2, 70}};
                    const int64_t s3[][2] = {{2, 3}, {0, 1}, {1, 1}}; /* 3 tokens: multi-token */
                    CU_ASSERT_EQUAL(bk_step(&b, s1, 2, what, msg, sizeof msg), LH_OK);
                    CU_ASSERT_EQUAL(bk_step(&b, s2, 3, what, msg, sizeof msg), LH_OK);
                    CU_ASSERT_EQUAL(bk_step(&b, s3, 3, what, msg, sizeof msg), LH_OK);
                    /* decode all three past several blocks (and past 256 tokens for slot 2:
                     * the kernel splits long decode contexts) */
                    for (int i = 0; i < 190; i++) {
                        const int64_t sd[][2] = {{0, 1}, {1, 1}, {2, 1}};
                        b.check = i % 16 == 0 || i >= 186;
                        lh_status st = bk_step(&b, sd, 3, what, msg, sizeof msg);
                        if (st != LH_OK) {
                            printf("\n    %s: %s", what, msg);
                            CU_FAIL("decode step");
                            break;
                        }
                    }
                    b.check = true;
                    /* slot 1 finishes; a new sequence takes it over and reuses its blocks */
                    bk_release(&b, 1);
                    const int64_t s4[][2] = {{1, 50}, {2, 1}};
                    CU_ASSERT_EQUAL(bk_step(&b, s4, 2, what, msg, sizeof msg), LH_OK);
                    const int64_t s5[][2] = {{1, 1}, {0, 1}, {3, 9}};
                    CU_ASSERT_EQUAL(bk_step(&b, s5, 3, what, msg, sizeof msg), LH_OK);
                    for (int64_t s = 0; s < MAX_SEQS; s++)
                        bk_release(&b, s);
                    paged_pool *pool = paged_layer_pool(b.layer);
                    CU_ASSERT_EQUAL(paged_pool_free_blocks(pool), paged_pool_total_blocks(pool));
                    CU_ASSERT_EQUAL(b.bad, 0);
                    worst_ref = fmax(worst_ref, b.worst_ref);
                    worst_van = fmax(worst_van, b.worst_van);
                    bk_close(&b);
                    runs++;
                }
    printf("\n    %d configurations; worst |out - ref| / max|v| %.3g, |out - lh_k_attention| / "
           "max|v| %.3g",
           runs, worst_ref, worst_van);
}

static void test_backend_out_of_blocks(void)
{
    paged_config cfg = paged_default_config;
    cfg.num_blocks = 6; /* 96 tokens */
    bk b;
    CU_ASSERT_FATAL(bk_open(&b, &cfg, 0, 2));
    paged_pool *pool = paged_layer_pool(b.layer);
    char msg[512] = "";
    const int64_t a[][2] = {{0, 80}};
    CU_ASSERT_EQUAL(bk_step(&b, a, 1, "pool", msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(paged_pool_free_blocks(pool), 1);
    /* 40 more tokens in slot 1 need 3 blocks: refused with the numbers, nothing allocated */
    const int64_t c[][2] = {{1, 40}};
    CU_ASSERT_EQUAL(bk_step(&b, c, 1, "pool", msg, sizeof msg), LH_E_UNSUPPORTED);
    printf("\n    %s", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "out of KV cache blocks"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "needs 3 more blocks of 16 tokens"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "only 1 of the pool's 6 blocks are free"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "layer 3"));
    CU_ASSERT_EQUAL(paged_pool_free_blocks(pool), 1);
    /* slot 0 goes on to 96 tokens (its 6th block is the free one), then can go no further */
    for (int i = 0; i < 16; i++) {
        const int64_t d[][2] = {{0, 1}};
        CU_ASSERT_EQUAL(bk_step(&b, d, 1, "pool", msg, sizeof msg), LH_OK);
    }
    CU_ASSERT_EQUAL(paged_pool_free_blocks(pool), 0);
    const int64_t d[][2] = {{0, 1}};
    CU_ASSERT_EQUAL(bk_step(&b, d, 1, "pool", msg, sizeof msg), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "needs 1 more block of 16 tokens, but only 0 of the "
                                       "pool's 6 blocks are free"));
    /* released: everything is free again and slot 1 fits */
    bk_release(&b, 0);
    CU_ASSERT_EQUAL(paged_pool_free_blocks(pool), 6);
    const int64_t e[][2] = {{1, 40}};
    CU_ASSERT_EQUAL(bk_step(&b, e, 1, "pool", msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(b.bad, 0);
    /* the step's own inconsistencies: wrong ctx_len, a slot twice, past max_seq_len */
    b.len[1] = 39;
    CU_ASSERT_EQUAL(bk_step(&b, e, 1, "pool", msg, sizeof msg), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "holds 40 tokens, the step says 39"));
    b.len[1] = 40;
    const int64_t twice[][2] = {{2, 1}, {2, 1}};
    CU_ASSERT_EQUAL(bk_step(&b, twice, 2, "pool", msg, sizeof msg), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "appears twice"));
    bk_close(&b);

    cfg = paged_default_config; /* the default pool cannot run out: max_seq_len stops first */
    CU_ASSERT_FATAL(bk_open(&b, &cfg, 0, 1));
    const int64_t big[][2] = {{3, MAX_LEN}};
    CU_ASSERT_EQUAL(bk_step(&b, big, 1, "pool", msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(bk_step(&b, d, 1, "pool", msg, sizeof msg), LH_OK);
    const int64_t more[][2] = {{3, 1}};
    CU_ASSERT_EQUAL(bk_step(&b, more, 1, "pool", msg, sizeof msg), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "more than max_seq_len 400"));
    bk_close(&b);
}

static int suite_init(void)
{
    lh_host_options opts = {.struct_size = sizeof opts,
                            .plugin_dir = lh_test_env("LH_BUILTIN_PLUGINS")};
    lh_err err = {0};
    if (lh_host_create(&opts, &host, &err) != LH_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

static int suite_clean(void)
{
    lh_host_free(host);
    return 0;
}

static CU_TestInfo e2e_tests[] = {
    {"greedy identical to vanilla, logits within 1e-5, every fixture", test_greedy_and_logits},
    {"alone equals batch, 1 and 2 threads agree", test_alone_and_threads},
    {"max_seq_len is refused, not truncated", test_engine_limits},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo backend_tests[] = {
    {"mixed prefill/decode steps vs reference: blocks, layouts, dtypes, masks",
     test_backend_scripted_steps},
    {"out of blocks, release, step errors", test_backend_out_of_blocks},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"paged vs vanilla, end to end", suite_init, suite_clean, NULL, NULL, e2e_tests},
    {"paged backend", NULL, NULL, NULL, NULL, backend_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
