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

#define MAX_RUNS 31

static const struct {
    const char *name;
    lh_dtype dt;
} types[] = {{"q4_0", LH_DTYPE_Q4_0}, {"q4_1", LH_DTYPE_Q4_1}, {"q5_0", LH_DTYPE_Q5_0},
             {"q5_1", LH_DTYPE_Q5_1}, {"q8_0", LH_DTYPE_Q8_0}, {"q4_k", LH_DTYPE_Q4_K},
             {"q5_k", LH_DTYPE_Q5_K}, {"q6_k", LH_DTYPE_Q6_K}};
#define N_TYPES (int)(sizeof types / sizeof types[0])

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median over runs of the mean seconds per call. */
static double time_calls(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, lh_tensor *y,
                         double budget, int runs)
{
    if (lh_k_matmul(ctx, x, w, NULL, y) != LH_OK) {
        fprintf(stderr, "bench_qgemv: matmul failed: %s\n", lh_k_last_error(ctx));
        exit(1);
    }
    double per[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        int iters = 0;
        double t0 = now_s(), t;
        do {
            lh_k_matmul(ctx, x, w, NULL, y);
            iters++;
            t = now_s();
        } while (t - t0 < budget / runs);
        per[r] = (t - t0) / iters;
    }
    qsort(per, (size_t)runs, sizeof per[0], cmp_double);
    return per[runs / 2];
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
    double budget = 1.0;
    int runs = 5, threads[4], n_threads = 0, gemm_m = 0;
    bool exact = true;
    const char *type_list = NULL, *shape_list = NULL;
    lh_k_isa isa = (lh_k_isa)-1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && n_threads < 4)
            threads[n_threads++] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc)
            type_list = argv[++i];
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc)
            shape_list = argv[++i];
        else if (!strcmp(argv[i], "--gemm") && i + 1 < argc)
            gemm_m = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-exact"))
            exact = false;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *s = argv[++i];
            isa = !strcmp(s, "scalar") ? LH_K_ISA_SCALAR
                  : !strcmp(s, "avx2") ? LH_K_ISA_AVX2
                  : !strcmp(s, "avx512") ? LH_K_ISA_AVX512
                                         : (lh_k_isa)-2;
            if ((int)isa == -2) {
                fprintf(stderr, "bench_qgemv: --isa must be scalar, avx2 or avx512\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_qgemv [--seconds S] [--runs R] [--isa I] [--threads N]... "
                            "[--types q4_0,...] [--shapes NxK,...] [--gemm M] [--no-exact]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > MAX_RUNS || budget <= 0) {
        fprintf(stderr, "bench_qgemv: --runs must be 1..%d and --seconds > 0\n", MAX_RUNS);
        return 2;
    }
    if (n_threads == 0) {
        threads[n_threads++] = 1;
        threads[n_threads++] = 2;
    }
    int64_t shapes[16][2] = {{576, 576},     {1536, 576},   {576, 1536},
                             {49152, 576},   {2048, 2048},  {8192, 2048}};
    int n_shapes = 6;
    if (shape_list) {
        n_shapes = 0;
        for (const char *p = shape_list; *p && n_shapes < 16;) {
            long long n, k;
            int used = 0;
            if (sscanf(p, "%lldx%lld%n", &n, &k, &used) != 2 || n <= 0 || k <= 0) {
                fprintf(stderr, "bench_qgemv: --shapes wants NxK[,NxK...]\n");
                return 2;
            }
            shapes[n_shapes][0] = n;
            shapes[n_shapes++][1] = k;
            p += used;
            if (*p == ',')
                p++;
        }
    }
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
                    const double t = time_calls(ctx, &xt, &wt, &yt, budget, runs);
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
