/* Matmul benchmark (a program, not a test): for every ISA this CPU supports and thread counts
 * 1, 2 and all cores,
 *   GEMV  y[1, 4096] = x[1, 4096] @ w[4096, 4096]^T    reported as GB/s of weight streamed
 *   GEMM  y[64, 4096] = x[64, 4096] @ w[4096, 4096]^T  reported as GFLOP/s (2*M*N*K per call)
 * with bf16 weights by default (--dtype f32|bf16|f16). Each measurement repeats the call until
 * --seconds (default 0.5) have passed, after one warm-up call, and reports the mean.
 *
 *   bench_matmul [--dtype bf16] [--seconds 0.5] [--threads N]... */
#include "bench_util.h"
#include "lh_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* Mean seconds per call. */
static double time_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, lh_tensor *y,
                          double budget)
{
    if (lh_k_matmul(ctx, x, w, NULL, y) != LH_OK) {
        fprintf(stderr, "matmul failed: %s\n", lh_k_last_error(ctx));
        exit(1);
    }
    int iters = 0;
    double t0 = now_s(), t;
    do {
        lh_k_matmul(ctx, x, w, NULL, y);
        iters++;
        t = now_s();
    } while (t - t0 < budget);
    return (t - t0) / iters;
}

int main(int argc, char **argv)
{
    lh_dtype wdt = LH_DTYPE_BF16;
    const char *wname = "bf16";
    double budget = 0.5;
    int threads[8], n_threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            wname = argv[++i];
            if (!strcmp(wname, "f32"))
                wdt = LH_DTYPE_F32;
            else if (!strcmp(wname, "f16"))
                wdt = LH_DTYPE_F16;
            else if (!strcmp(wname, "bf16"))
                wdt = LH_DTYPE_BF16;
            else {
                fprintf(stderr, "bench_matmul: --dtype must be f32, bf16 or f16\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            budget = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc && n_threads < 8) {
            threads[n_threads++] = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_matmul [--dtype f32|bf16|f16] [--seconds S] [--threads N]...\n");
            return 2;
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads == 0) {
        threads[n_threads++] = 1;
        if (cores >= 2)
            threads[n_threads++] = 2;
        if (cores > 2)
            threads[n_threads++] = (int)cores;
    }

    const int64_t K = 4096, N = 4096, MG = 64;
    const size_t wbytes = (size_t)lh_k_dtype_bytes(wdt, N * K);
    void *wdata = malloc(wbytes);
    float *xdata = malloc((size_t)(MG * K) * sizeof(float));
    float *ydata = malloc((size_t)(MG * N) * sizeof(float));
    if (!wdata || !xdata || !ydata) {
        fprintf(stderr, "bench_matmul: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < N * K; i++) {
        float v = frand() * 0.1f;
        if (wdt == LH_DTYPE_F32)
            ((float *)wdata)[i] = v;
        else if (wdt == LH_DTYPE_BF16)
            ((uint16_t *)wdata)[i] = lh_k_f32_to_bf16(v);
        else
            ((uint16_t *)wdata)[i] = lh_k_f32_to_f16(v);
    }
    for (int64_t i = 0; i < MG * K; i++)
        xdata[i] = frand();

    int64_t wshape[2] = {N, K}, x1[2] = {1, K}, y1[2] = {1, N}, xg[2] = {MG, K}, yg[2] = {MG, N};
    lh_tensor w = lh_tensor_cpu(wdt, wdata, 2, wshape);
    lh_tensor xv = lh_tensor_cpu(LH_DTYPE_F32, xdata, 2, x1);
    lh_tensor yv = lh_tensor_cpu(LH_DTYPE_F32, ydata, 2, y1);
    lh_tensor xm = lh_tensor_cpu(LH_DTYPE_F32, xdata, 2, xg);
    lh_tensor ym = lh_tensor_cpu(LH_DTYPE_F32, ydata, 2, yg);

    printf("bench_matmul: w %s [%lld, %lld] (%.1f MiB), %ld cores\n", wname, (long long)N,
           (long long)K, (double)wbytes / (1024.0 * 1024.0), cores);
    printf("%-8s %7s %14s %16s\n", "isa", "threads", "GEMV GB/s", "GEMM M=64 GFLOP/s");
    const lh_k_isa isas[4] = {LH_K_ISA_SCALAR, LH_K_ISA_AVX2, LH_K_ISA_AVX512, LH_K_ISA_AMX};
    for (int ii = 0; ii < 4; ii++) {
        for (int ti = 0; ti < n_threads; ti++) {
            lh_device cpu = {LH_DEVICE_CPU, 0};
            lh_kctx *ctx = lh_k_ctx_create(threads[ti], cpu);
            if (!ctx) {
                fprintf(stderr, "bench_matmul: %s\n", lh_k_last_error(NULL));
                return 1;
            }
            if (lh_k_ctx_set_isa(ctx, isas[ii]) != LH_OK) {
                printf("%-8s %7d %14s %16s\n", lh_k_isa_name(isas[ii]), threads[ti], "unsupported",
                       "unsupported");
                lh_k_ctx_free(ctx);
                continue;
            }
            double tv = time_matmul(ctx, &xv, &w, &yv, budget);
            double tm = time_matmul(ctx, &xm, &w, &ym, budget);
            printf("%-8s %7d %14.2f %16.2f\n", lh_k_isa_name(isas[ii]), threads[ti],
                   (double)wbytes / tv * 1e-9, 2.0 * (double)MG * (double)N * (double)K / tm * 1e-9);
            fflush(stdout);
            lh_k_ctx_free(ctx);
        }
    }
    free(wdata);
    free(xdata);
    free(ydata);
    return 0;
}
