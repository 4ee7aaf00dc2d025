/* Paged attention benchmark (a program, not a test): one decode step (one new token per
 * sequence) of SmolLM2-135M's attention shape (9 query heads, 3 kv heads, head_dim 64) for
 * context lengths 128, 1024 and 4096 and batches of 1 and 8 sequences, with 1 and 2 threads:
 *   vanilla   lh_k_attention per sequence over its contiguous f32 cache [S, 3, 64]
 *   paged     one lh_k_paged_attention_batch call for the whole batch over an f32 pool
 *             (block 16, NHD, blocks handed out in shuffled order)
 *   per-seq   lh_k_paged_attention per sequence over the same pool (for reference)
 * Each measurement repeats the step until --seconds (default 0.2) have passed, after one
 * warm-up step, and reports the mean time per step in microseconds; "speedup" is vanilla /
 * paged. The ISA is the best this CPU has (LLMHOST_KERNELS_ISA forces one).
 *
 * Every cache and the pool start on a 64-byte boundary (the host's pool is page-aligned);
 * --misalign starts them all 16 bytes past one instead, as glibc's malloc does for large
 * blocks, so that every 256-byte head row straddles one more cache line.
 *
 *   bench_paged [--seconds 0.2] [--threads N]... [--ctx S]... [--batch B]... [--misalign] */
#include "bench_util.h"
#include "lh_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { H = 9, KVH = 3, D = 64, BS = 16 };


static size_t g_offset; /* bytes past a 64-byte boundary for the big buffers */

/* A big buffer of n floats, g_offset bytes past a 64-byte boundary; free with big_free. */
static float *big_alloc(size_t n)
{
    void *base = NULL;
    if (posix_memalign(&base, 64, n * sizeof(float) + 64) != 0) {
        fprintf(stderr, "bench_paged: out of memory\n");
        exit(1);
    }
    return (float *)(void *)((char *)base + g_offset);
}

static void big_free(float *p)
{
    if (p)
        free((char *)p - g_offset);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_paged: out of memory\n");
        exit(1);
    }
    return p;
}

static void check(lh_kctx *ctx, lh_status st, const char *what)
{
    if (st != LH_OK) {
        fprintf(stderr, "bench_paged: %s failed: %s\n", what, lh_k_last_error(ctx));
        exit(1);
    }
}

/* One batch of B sequences of S tokens each: contiguous caches and the same values in a pool. */
typedef struct setup {
    int64_t B, S, nb; /* nb: blocks per sequence */
    float *q, *out, **kc, **vc;
    float *pk, *pv;
    int32_t *tables, *pos;
    const int32_t **tab_ptrs;
    int64_t *tok0, *n_new, *kv_len, *n_blocks;
    lh_kv_pages kv;
    lh_paged_batch batch;
    lh_tensor tq, tout;
} setup;

static void setup_init(setup *s, lh_kctx *ctx, int64_t B, int64_t S)
{
    memset(s, 0, sizeof *s);
    s->B = B;
    s->S = S;
    s->nb = (S + BS - 1) / BS;
    const int64_t NB = B * s->nb;
    s->q = xmalloc((size_t)(B * H * D) * sizeof(float));
    s->out = xmalloc((size_t)(B * H * D) * sizeof(float));
    for (int64_t i = 0; i < B * H * D; i++)
        s->q[i] = frand();
    s->kc = xmalloc((size_t)B * sizeof(float *));
    s->vc = xmalloc((size_t)B * sizeof(float *));
    s->pk = big_alloc((size_t)(NB * BS * KVH * D));
    s->pv = big_alloc((size_t)(NB * BS * KVH * D));
    s->tables = xmalloc((size_t)NB * sizeof(int32_t));
    s->pos = xmalloc((size_t)B * sizeof(int32_t));
    s->tab_ptrs = xmalloc((size_t)B * sizeof(int32_t *));
    s->tok0 = xmalloc((size_t)B * sizeof(int64_t));
    s->n_new = xmalloc((size_t)B * sizeof(int64_t));
    s->kv_len = xmalloc((size_t)B * sizeof(int64_t));
    s->n_blocks = xmalloc((size_t)B * sizeof(int64_t));
    /* shuffled physical blocks */
    for (int64_t i = 0; i < NB; i++)
        s->tables[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) {
        int64_t r = (int64_t)(bench_rng % (uint32_t)(i + 1));
        frand();
        int32_t t = s->tables[i];
        s->tables[i] = s->tables[r];
        s->tables[r] = t;
    }
    int64_t shape[4] = {NB, BS, KVH, D};
    s->kv.layout = LH_KV_NHD;
    s->kv.k = lh_tensor_cpu(LH_DTYPE_F32, s->pk, 4, shape);
    s->kv.v = lh_tensor_cpu(LH_DTYPE_F32, s->pv, 4, shape);
    for (int64_t b = 0; b < B; b++) {
        s->kc[b] = big_alloc((size_t)(S * KVH * D));
        s->vc[b] = big_alloc((size_t)(S * KVH * D));
        for (int64_t i = 0; i < S * KVH * D; i++) {
            s->kc[b][i] = frand();
            s->vc[b][i] = frand();
        }
        s->tab_ptrs[b] = s->tables + b * s->nb;
        s->pos[b] = (int32_t)(S - 1);
        s->tok0[b] = b;
        s->n_new[b] = 1;
        s->kv_len[b] = S;
        s->n_blocks[b] = s->nb;
        lh_tensor tk = {0}, tv = {0};
        int64_t kshape[3] = {S, KVH, D};
        tk = lh_tensor_cpu(LH_DTYPE_F32, s->kc[b], 3, kshape);
        tv = lh_tensor_cpu(LH_DTYPE_F32, s->vc[b], 3, kshape);
        check(ctx, lh_k_paged_kv_write(ctx, &s->kv, s->tab_ptrs[b], s->nb, 0, &tk, &tv),
              "lh_k_paged_kv_write");
    }
    s->batch = (lh_paged_batch){.struct_size = sizeof(lh_paged_batch), .n_seqs = B,
                                .token_start = s->tok0, .n_new = s->n_new, .kv_len = s->kv_len,
                                .positions = s->pos, .block_tables = s->tab_ptrs,
                                .n_blocks = s->n_blocks};
    int64_t qshape[3] = {B, H, D};
    s->tq = lh_tensor_cpu(LH_DTYPE_F32, s->q, 3, qshape);
    s->tout = lh_tensor_cpu(LH_DTYPE_F32, s->out, 3, qshape);
}

static void setup_free(setup *s)
{
    for (int64_t b = 0; b < s->B; b++) {
        big_free(s->kc[b]);
        big_free(s->vc[b]);
    }
    free(s->kc);
    free(s->vc);
    free(s->q);
    free(s->out);
    big_free(s->pk);
    big_free(s->pv);
    free(s->tables);
    free(s->pos);
    free(s->tab_ptrs);
    free(s->tok0);
    free(s->n_new);
    free(s->kv_len);
    free(s->n_blocks);
}

enum { VANILLA, PAGED, PER_SEQ };

static void step(lh_kctx *ctx, setup *s, int kind)
{
    const float scale = 1.0f / sqrtf((float)D);
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = scale};
    if (kind == PAGED) {
        check(ctx, lh_k_paged_attention_batch(ctx, &s->tq, &s->kv, &s->batch, &prm, &s->tout),
              "lh_k_paged_attention_batch");
        return;
    }
    for (int64_t b = 0; b < s->B; b++) {
        int64_t qs[3] = {1, H, D}, ks[3] = {s->S, KVH, D};
        lh_tensor q1 = lh_tensor_cpu(LH_DTYPE_F32, s->q + b * H * D, 3, qs);
        lh_tensor o1 = lh_tensor_cpu(LH_DTYPE_F32, s->out + b * H * D, 3, qs);
        if (kind == VANILLA) {
            lh_tensor tk = lh_tensor_cpu(LH_DTYPE_F32, s->kc[b], 3, ks);
            lh_tensor tv = lh_tensor_cpu(LH_DTYPE_F32, s->vc[b], 3, ks);
            check(ctx, lh_k_attention(ctx, &q1, &tk, &tv, &s->pos[b], scale, 0.0f, 0, &o1),
                  "lh_k_attention");
        } else {
            check(ctx, lh_k_paged_attention(ctx, &q1, &s->kv, s->tab_ptrs[b], s->nb, s->S,
                                            &s->pos[b], &prm, &o1),
                  "lh_k_paged_attention");
        }
    }
}

/* mean seconds per step */
static double time_step(lh_kctx *ctx, setup *s, int kind, double budget)
{
    step(ctx, s, kind);
    int iters = 0;
    double t0 = now_s(), t;
    do {
        step(ctx, s, kind);
        iters++;
        t = now_s();
    } while (t - t0 < budget);
    return (t - t0) / iters;
}

int main(int argc, char **argv)
{
    double budget = 0.2;
    int threads[8], n_threads = 0;
    int64_t ctxs[8], batches[8];
    int n_ctx = 0, n_batch = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && n_threads < 8)
            threads[n_threads++] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc && n_ctx < 8)
            ctxs[n_ctx++] = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc && n_batch < 8)
            batches[n_batch++] = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--misalign"))
            g_offset = 16;
        else {
            fprintf(stderr, "usage: bench_paged [--seconds S] [--threads N]... [--ctx S]... "
                            "[--batch B]... [--misalign]\n");
            return 2;
        }
    }
    if (n_threads == 0) {
        threads[n_threads++] = 1;
        threads[n_threads++] = 2;
    }
    if (n_ctx == 0) {
        ctxs[n_ctx++] = 128;
        ctxs[n_ctx++] = 1024;
        ctxs[n_ctx++] = 4096;
    }
    if (n_batch == 0) {
        batches[n_batch++] = 1;
        batches[n_batch++] = 8;
    }
    for (int i = 0; i < n_ctx; i++)
        if (ctxs[i] < 1) {
            fprintf(stderr, "bench_paged: --ctx must be >= 1\n");
            return 2;
        }
    for (int i = 0; i < n_batch; i++)
        if (batches[i] < 1) {
            fprintf(stderr, "bench_paged: --batch must be >= 1\n");
            return 2;
        }
    lh_device cpu = {LH_DEVICE_CPU, 0};
    printf("bench_paged: decode step, %d heads / %d kv heads, head_dim %d, f32; pool block %d "
           "NHD; caches and pool %s\n",
           H, KVH, D, BS, g_offset ? "16 bytes past a 64-byte boundary" : "64-byte aligned");
    printf("%7s %6s %5s %6s %12s %12s %12s %8s\n", "threads", "isa", "ctx", "batch",
           "vanilla us", "paged us", "per-seq us", "speedup");
    for (int ti = 0; ti < n_threads; ti++) {
        lh_kctx *ctx = lh_k_ctx_create(threads[ti], cpu);
        if (!ctx) {
            fprintf(stderr, "bench_paged: %s\n", lh_k_last_error(NULL));
            return 1;
        }
        for (int ci = 0; ci < n_ctx; ci++)
            for (int bi = 0; bi < n_batch; bi++) {
                setup s;
                setup_init(&s, ctx, batches[bi], ctxs[ci]);
                double tv = time_step(ctx, &s, VANILLA, budget);
                double tp = time_step(ctx, &s, PAGED, budget);
                double ts = time_step(ctx, &s, PER_SEQ, budget);
                printf("%7d %6s %5lld %6lld %12.2f %12.2f %12.2f %7.2fx\n", threads[ti],
                       lh_k_isa_name(lh_k_ctx_isa(ctx)), (long long)ctxs[ci],
                       (long long)batches[bi], tv * 1e6, tp * 1e6, ts * 1e6, tv / tp);
                fflush(stdout);
                setup_free(&s);
            }
        lh_k_ctx_free(ctx);
    }
    return 0;
}
