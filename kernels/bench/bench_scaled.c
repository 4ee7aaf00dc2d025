/* Benchmark of weights with separate scale tensors (a program, not a test): y[M, N] = x[M, K]
 * @ dequant(w)^T through lh_k_matmul_scaled, w int8 with per-channel scales (1 x K), int4 with
 * groups of 128 (1 x 128) and fp8 e4m3 with 128 x 128 blocks (DeepSeek-V3's), f32 scales, for
 * 576 x 576 (SmolLM2-135M), 2048 x 2048 and 8192 x 2048 (1B-class), on 1 and 2 threads, in
 * both modes of lh_k_ctx_set_quant_matmul (int8, the default: int8 per channel takes integer
 * dots; exact: every weight decoded into f32 tiles -- int4 and fp8 take that path in both).
 * Also timed: the same product with the weight dequantized to bf16 and to f32 beforehand
 * (lh_k_matmul), the paths a caller would otherwise take. Reports GB/s of weight bytes read per
 * call (w only, not the scales; 1e9 B/s); for the bf16 / f32 columns the bytes of those
 * weights. Each figure
 * is the median of --runs runs (default 5), each the mean over --seconds / runs of
 * back-to-back calls after a warm-up call. Random weights, scales in [0.01, 0.02].
 *
 *   bench_scaled [--seconds 1] [--runs 5] [--isa scalar|avx2|avx512] [--threads N]...
 *                [--types int8,int4,fp8] [--shapes NxK,...] [--gemm M] */
#include "bench_util.h"
#include "lh_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    lh_dtype dt;
    int64_t br, bc; /* 0: the whole dimension */
} types[] = {{"int8", LH_DTYPE_INT8, 1, 0},
             {"int4", LH_DTYPE_INT4, 1, 128},
             {"fp8", LH_DTYPE_FP8_E4M3, 128, 128}};
#define N_TYPES (int)(sizeof types / sizeof types[0])

/* one call of the timed product: the scaled weight in a mode, or a plain one (scale NULL) */
struct call {
    lh_kctx *ctx;
    const lh_tensor *x, *w, *scale;
    int64_t br, bc;
    lh_tensor *y;
    lh_k_qmm mode;
};

static lh_status run(const struct call *c)
{
    lh_k_ctx_set_quant_matmul(c->ctx, c->mode);
    if (c->scale)
        return lh_k_matmul_scaled(c->ctx, c->x, c->w, c->scale, c->br, c->bc, NULL, c->y);
    return lh_k_matmul(c->ctx, c->x, c->w, NULL, c->y);
}

static lh_status run_call(const void *arg)
{
    return run(arg);
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const int got = bench_opt("bench_scaled", argc, argv, &i, &o);
        if (got < 0)
            return 2;
        if (got == 0) {
            fprintf(stderr, "usage: bench_scaled [--seconds S] [--runs R] [--isa I] [--threads N]... "
                            "[--types int8,int4,fp8] [--shapes NxK,...] [--gemm M]\n");
            return 2;
        }
    }
    static const int64_t default_shapes[][2] = {{576, 576}, {2048, 2048}, {8192, 2048}};
    if (bench_opts_finish("bench_scaled", &o, default_shapes, 3, true) != 0)
        return 2;
    const double budget = o.budget;
    const int runs = o.runs, gemm_m = o.gemm_m, n_threads = o.n_threads, n_shapes = o.n_shapes;
    const int *threads = o.threads;
    const char *type_list = o.types;
    const lh_k_isa isa = o.isa;
    const int64_t(*shapes)[2] = o.shapes;
    const int64_t M = gemm_m > 0 ? gemm_m : 1;

    printf("bench_scaled: %s, M %lld, median of %d runs over %.2f s per figure\n",
           gemm_m > 0 ? "GEMM (GFLOP/s)" : "GEMV (GB/s of weight bytes)", (long long)M, runs,
           budget);
    printf("%-5s %-8s %-12s %3s %10s %10s %10s %10s\n", "type", "blocks", "w [N, K]", "thr",
           "int8 mode", "exact", "as bf16", "as f32");
    for (int si = 0; si < n_shapes; si++) {
        const int64_t N = shapes[si][0], K = shapes[si][1];
        float *x = malloc((size_t)(M * K) * sizeof(float));
        float *y = malloc((size_t)(M * N) * sizeof(float));
        float *wf = malloc((size_t)(N * K) * sizeof(float));
        uint16_t *wb = malloc((size_t)(N * K) * sizeof(uint16_t));
        uint8_t *w = malloc((size_t)(N * K));
        if (!x || !y || !wf || !wb || !w) {
            fprintf(stderr, "bench_scaled: out of memory\n");
            return 1;
        }
        for (int64_t i = 0; i < M * K; i++)
            x[i] = frand();
        for (int ti = 0; ti < N_TYPES; ti++) {
            if (type_list && !strstr(type_list, types[ti].name))
                continue;
            const lh_dtype dt = types[ti].dt;
            const int64_t br = types[ti].br ? types[ti].br : N, bc = types[ti].bc ? types[ti].bc : K;
            const int64_t sr = (N + br - 1) / br, sc = (K + bc - 1) / bc;
            float *scale = malloc((size_t)(sr * sc) * sizeof(float));
            const size_t wbytes = (size_t)lh_k_dtype_bytes(dt, N * K);
            for (size_t i = 0; i < wbytes; i++) {
                w[i] = (uint8_t)(frand() * 256.0f + 128.0f);
                if (dt == LH_DTYPE_FP8_E4M3 && (w[i] & 0x7f) == 0x7f)
                    w[i] = 0; /* no NaN */
            }
            for (int64_t i = 0; i < sr * sc; i++)
                scale[i] = 0.015f + frand() * 0.01f;
            int64_t xs[2] = {M, K}, ws[2] = {N, K}, ys[2] = {M, N}, ss[2] = {sr, sc};
            lh_tensor xt = lh_tensor_cpu(LH_DTYPE_F32, x, 2, xs);
            lh_tensor wt = lh_tensor_cpu(dt, w, 2, ws);
            lh_tensor st = lh_tensor_cpu(LH_DTYPE_F32, scale, 2, ss);
            lh_tensor yt = lh_tensor_cpu(LH_DTYPE_F32, y, 2, ys);
            lh_tensor wft = lh_tensor_cpu(LH_DTYPE_F32, wf, 2, ws);
            lh_tensor wbt = lh_tensor_cpu(LH_DTYPE_BF16, wb, 2, ws);
            for (int th = 0; th < n_threads; th++) {
                lh_device cpu = {LH_DEVICE_CPU, 0};
                lh_kctx *ctx = lh_k_ctx_create(threads[th], cpu);
                if (!ctx || ((int)isa >= 0 && lh_k_ctx_set_isa(ctx, isa) != LH_OK)) {
                    fprintf(stderr, "bench_scaled: %s\n", lh_k_last_error(ctx));
                    return 1;
                }
                if (lh_k_dequantize_scaled(ctx, &wt, &st, br, bc, &wft) != LH_OK ||
                    lh_k_convert(ctx, &wft, &wbt) != LH_OK) {
                    fprintf(stderr, "bench_scaled: %s\n", lh_k_last_error(ctx));
                    return 1;
                }
                const struct call calls[4] = {
                    {ctx, &xt, &wt, &st, br, bc, &yt, LH_K_QMM_INT8},
                    {ctx, &xt, &wt, &st, br, bc, &yt, LH_K_QMM_EXACT},
                    {ctx, &xt, &wbt, NULL, 0, 0, &yt, LH_K_QMM_INT8},
                    {ctx, &xt, &wft, NULL, 0, 0, &yt, LH_K_QMM_INT8}};
                const double bytes[4] = {(double)wbytes, (double)wbytes, 2.0 * (double)(N * K),
                                         4.0 * (double)(N * K)};
                double v[4];
                for (int c = 0; c < 4; c++) {
                    const double t = bench_time("bench_scaled", calls[c].ctx, run_call, &calls[c], budget,
                                                runs);
                    v[c] = gemm_m > 0 ? 2.0 * (double)(M * N * K) / t * 1e-9 : bytes[c] / t * 1e-9;
                }
                char shape[32], blocks[24];
                snprintf(shape, sizeof shape, "%lldx%lld", (long long)N, (long long)K);
                if (types[ti].bc)
                    snprintf(blocks, sizeof blocks, "%lldx%lld", (long long)br, (long long)bc);
                else
                    snprintf(blocks, sizeof blocks, "1xK");
                printf("%-5s %-8s %-12s %3d %10.2f %10.2f %10.2f %10.2f\n", types[ti].name, blocks,
                       shape, threads[th], v[0], v[1], v[2], v[3]);
                fflush(stdout);
                lh_k_ctx_free(ctx);
            }
            free(scale);
        }
        free(x);
        free(y);
        free(wf);
        free(wb);
        free(w);
    }
    return 0;
}
