/* Quantized GEMV benchmark (a program, not a test): y[1, N] = x[1, K] @ w[N, K]^T with w in each
 * ggml block type, in both modes of lh_k_ctx_set_quant_matmul -- int8 (x quantized, integer
 * dots) and exact (rows decoded to f32 tiles) -- for SmolLM2-135M's shapes (576 x 576,
 * 1536 x 576, 576 x 1536, 49152 x 576) and two 1B-class ones (2048 x 2048, 8192 x 2048), on 1
 * and 2 threads. Reports GB/s of weight bytes read per call (1e9 B/s) and int8 / exact. Each
 * figure is the median of --runs runs (default 5), each the mean over --seconds / runs of
 * back-to-back calls after a warm-up call (the machine may be shared: medians, not means).
 * Random blocks with small f16 scales; the weights stay in the caches when they fit, so small
 * shapes measure cache bandwidth, not DRAM.
 *
 *   bench_qgemv [--seconds 1] [--runs 5] [--isa scalar|avx2|avx512] [--threads N]...
 *               [--types q4_0,q8_0,...] [--shapes NxK,...] [--gemm M] [--no-exact]
 *
 * --gemm M times x[M, K] instead (GFLOP/s, 2 M N K per call) for the prefill comparison. */
#include "bench_util.h"
#include "lh_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    lh_dtype dt;
} types[] = {{"q4_0", LH_DTYPE_Q4_0}, {"q4_1", LH_DTYPE_Q4_1}, {"q5_0", LH_DTYPE_Q5_0},
             {"q5_1", LH_DTYPE_Q5_1}, {"q8_0", LH_DTYPE_Q8_0}, {"q4_k", LH_DTYPE_Q4_K},
             {"q5_k", LH_DTYPE_Q5_K}, {"q6_k", LH_DTYPE_Q6_K}};
#define N_TYPES (int)(sizeof types / sizeof types[0])

/* one timed call: y = x @ w^T */
struct call {
    lh_kctx *ctx;
    const lh_tensor *x, *w;
    lh_tensor *y;
};

static lh_status run_call(const void *arg)
{
    const struct call *c = arg;
    return lh_k_matmul(c->ctx, c->x, c->w, NULL, c->y);
}

/* rows x K of random blocks: random bytes, each f16 scale field set to a small value */
static void *random_blocks(lh_dtype dt, int64_t rows, int64_t K)
{
    int64_t be = 0, bb = 0;
    lh_k_dtype_block(dt, &be, &bb);
    const int64_t n = rows * (K / be);
    uint8_t *b = malloc((size_t)(n * bb));
    if (!b)
        return NULL;
    /* the f16 fields: d (and m / dmin) at 0 and 2, q6_k's d at 208 */
    const int off0 = dt == LH_DTYPE_Q6_K ? 208 : 0;
    const bool two = dt == LH_DTYPE_Q4_1 || dt == LH_DTYPE_Q5_1 || dt == LH_DTYPE_Q4_K ||
                     dt == LH_DTYPE_Q5_K;
    for (int64_t i = 0; i < n; i++) {
        uint8_t *blk = b + i * bb;
        for (int64_t k = 0; k < bb; k++)
            blk[k] = (uint8_t)(frand() * 256.0f + 128.0f);
        for (int s = 0; s < (two ? 2 : 1); s++) {
            const uint16_t h = lh_k_f32_to_f16(frand() * 0.02f);
            blk[off0 + 2 * s] = (uint8_t)(h & 0xff);
            blk[off0 + 2 * s + 1] = (uint8_t)(h >> 8);
        }
    }
    return b;
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_opts_init(&o);
    bool exact = true;
    for (int i = 1; i < argc; i++) {
        const int got = bench_opt("bench_qgemv", argc, argv, &i, &o);
        if (got < 0)
            return 2;
        if (got == 0 && !strcmp(argv[i], "--no-exact")) {
            exact = false;
        } else if (got == 0) {
            fprintf(stderr, "usage: bench_qgemv [--seconds S] [--runs R] [--isa I] [--threads N]... "
                            "[--types q4_0,...] [--shapes NxK,...] [--gemm M] [--no-exact]\n");
            return 2;
        }
    }
    static const int64_t default_shapes[][2] = {{576, 576},   {1536, 576},  {576, 1536},
                                                {49152, 576}, {2048, 2048}, {8192, 2048}};
    if (bench_opts_finish("bench_qgemv", &o, default_shapes, 6, false) != 0)
        return 2;
    const double budget = o.budget;
    const int runs = o.runs, gemm_m = o.gemm_m, n_threads = o.n_threads, n_shapes = o.n_shapes;
    const int *threads = o.threads;
    const char *type_list = o.types;
    const lh_k_isa isa = o.isa;
    const int64_t(*shapes)[2] = o.shapes;
    const int64_t M = gemm_m > 0 ? gemm_m : 1;

    printf("bench_qgemv: %s, M %lld, median of %d runs over %.2f s per figure\n",
           gemm_m > 0 ? "GEMM (GFLOP/s)" : "GEMV (GB/s of weights)", (long long)M, runs, budget);
    printf("%-6s %-12s %3s %10s %10s %7s\n", "type", "w [N, K]", "thr", "int8", "exact", "ratio");
    for (int si = 0; si < n_shapes; si++) {
        const int64_t N = shapes[si][0], K = shapes[si][1];
        float *x = malloc((size_t)(M * K) * sizeof(float));
        float *y = malloc((size_t)(M * N) * sizeof(float));
        for (int64_t i = 0; i < M * K; i++)
            x[i] = frand();
        for (int ti = 0; ti < N_TYPES; ti++) {
            if (type_list && !strstr(type_list, types[ti].name))
                continue;
            const lh_dtype dt = types[ti].dt;
            int64_t be = 0;
            lh_k_dtype_block(dt, &be, NULL);
            if (K % be) {
                printf("%-6s %5lldx%-6lld  K is not a multiple of the block\n", types[ti].name,
                       (long long)N, (long long)K);
                continue;
            }
            void *w = random_blocks(dt, N, K);
            if (!w || !x || !y) {
                fprintf(stderr, "bench_qgemv: out of memory\n");
                return 1;
            }
            const double wbytes = (double)lh_k_dtype_bytes(dt, N * K);
            int64_t xs[2] = {M, K}, ws[2] = {N, K}, ys[2] = {M, N};
            lh_tensor xt = lh_tensor_cpu(LH_DTYPE_F32, x, 2, xs);
            lh_tensor wt = lh_tensor_cpu(dt, w, 2, ws);
            lh_tensor yt = lh_tensor_cpu(LH_DTYPE_F32, y, 2, ys);
            for (int th = 0; th < n_threads; th++) {
                lh_device cpu = {LH_DEVICE_CPU, 0};
                lh_kctx *ctx = lh_k_ctx_create(threads[th], cpu);
                if (!ctx || ((int)isa >= 0 && lh_k_ctx_set_isa(ctx, isa) != LH_OK)) {
                    fprintf(stderr, "bench_qgemv: %s\n", lh_k_last_error(ctx));
                    return 1;
                }
                double v[2] = {0, 0};
                for (int mode = 0; mode < (exact ? 2 : 1); mode++) {
                    lh_k_ctx_set_quant_matmul(ctx, mode ? LH_K_QMM_EXACT : LH_K_QMM_INT8);
                    struct call c = {ctx, &xt, &wt, &yt};
                    const double t = bench_time("bench_qgemv", ctx, run_call, &c, budget, runs);
                    v[mode] = gemm_m > 0 ? 2.0 * (double)(M * N * K) / t * 1e-9 : wbytes / t * 1e-9;
                }
                char shape[32];
                snprintf(shape, sizeof shape, "%lldx%lld", (long long)N, (long long)K);
                if (exact)
                    printf("%-6s %-12s %3d %10.2f %10.2f %7.2f\n", types[ti].name, shape, threads[th],
                           v[0], v[1], v[0] / v[1]);
                else
                    printf("%-6s %-12s %3d %10.2f %10s %7s\n", types[ti].name, shape, threads[th],
                           v[0], "-", "-");
                fflush(stdout);
                lh_k_ctx_free(ctx);
            }
            free(w);
        }
        free(x);
        free(y);
    }
    return 0;
}
