/* Shared by the kernel microbenchmarks: a monotonic clock, a small deterministic RNG, the
 * median-of-runs timer and the options the weight-format benchmarks (bench_qgemv,
 * bench_scaled) have in common. */
#ifndef LH_KERNELS_BENCH_UTIL_H
#define LH_KERNELS_BENCH_UTIL_H

#include "lh_kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* uniform in [-0.5, 0.5) (xorshift32; the same sequence on every run) */
static uint32_t bench_rng = 0x9e3779b9u;
static inline float frand(void)
{
    bench_rng ^= bench_rng << 13;
    bench_rng ^= bench_rng >> 17;
    bench_rng ^= bench_rng << 5;
    return (float)(bench_rng >> 8) / 16777216.0f - 0.5f;
}

#define BENCH_MAX_RUNS 31

static inline int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over runs of the mean seconds per call of call(arg), each run budget / runs
 * seconds of back-to-back calls, after one warm-up call; exits with ctx's message when the
 * warm-up call fails. */
static inline double bench_time(const char *prog, lh_kctx *ctx,
                                lh_status (*call)(const void *), const void *arg, double budget,
                                int runs)
{
    if (call(arg) != LH_OK) {
        fprintf(stderr, "%s: the timed call failed: %s\n", prog, lh_k_last_error(ctx));
        exit(1);
    }
    double per[BENCH_MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        int iters = 0;
        double t0 = now_s(), t;
        do {
            call(arg);
            iters++;
            t = now_s();
        } while (t - t0 < budget / runs);
        per[r] = (t - t0) / iters;
    }
    qsort(per, (size_t)runs, sizeof per[0], bench_cmp_double);
    return per[runs / 2];
}

/* --seconds S --runs R --isa I --threads N (repeatable) --types LIST --shapes NxK,... --gemm M */
typedef struct bench_opts {
    double budget;
    int runs, threads[4], n_threads, gemm_m;
    const char *types;
    lh_k_isa isa; /* -1: the library's choice */
    int64_t shapes[16][2];
    int n_shapes;
    const char *shape_list;
} bench_opts;

static inline void bench_opts_init(bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->budget = 1.0;
    o->runs = 5;
    o->isa = (lh_k_isa)-1;
}

/* 1 when argv[*i] is a common option (taken, *i advanced past its value), 0 when it is not,
 * -1 after printing why its value is bad. */
static inline int bench_opt(const char *prog, int argc, char **argv, int *i, bench_opts *o)
{
    const char *a = argv[*i];
    if (*i + 1 >= argc)
        return 0;
    if (!strcmp(a, "--seconds"))
        o->budget = atof(argv[++*i]);
    else if (!strcmp(a, "--runs"))
        o->runs = atoi(argv[++*i]);
    else if (!strcmp(a, "--threads") && o->n_threads < 4)
        o->threads[o->n_threads++] = atoi(argv[++*i]);
    else if (!strcmp(a, "--types"))
        o->types = argv[++*i];
    else if (!strcmp(a, "--shapes"))
        o->shape_list = argv[++*i];
    else if (!strcmp(a, "--gemm"))
        o->gemm_m = atoi(argv[++*i]);
    else if (!strcmp(a, "--isa")) {
        const char *s = argv[++*i];
        o->isa = !strcmp(s, "scalar") ? LH_K_ISA_SCALAR
                 : !strcmp(s, "avx2") ? LH_K_ISA_AVX2
                 : !strcmp(s, "avx512") ? LH_K_ISA_AVX512
                 : !strcmp(s, "amx")    ? LH_K_ISA_AMX
                                        : (lh_k_isa)-2;
        if ((int)o->isa == -2) {
            fprintf(stderr, "%s: --isa must be scalar, avx2, avx512 or amx\n", prog);
            return -1;
        }
    } else
        return 0;
    return 1;
}

/* After parsing: checks runs and seconds, defaults the threads to 1 and 2, and reads the shape
 * list (or takes the n_defaults defaults); K must be even when even_k. 0, or -1 after printing
 * why. */
static inline int bench_opts_finish(const char *prog, bench_opts *o,
                                    const int64_t (*defaults)[2], int n_defaults, bool even_k)
{
    if (o->runs < 1 || o->runs > BENCH_MAX_RUNS || o->budget <= 0) {
        fprintf(stderr, "%s: --runs must be 1..%d and --seconds > 0\n", prog, BENCH_MAX_RUNS);
        return -1;
    }
    if (o->n_threads == 0) {
        o->threads[o->n_threads++] = 1;
        o->threads[o->n_threads++] = 2;
    }
    if (!o->shape_list) {
        for (int i = 0; i < n_defaults && i < 16; i++) {
            o->shapes[i][0] = defaults[i][0];
            o->shapes[i][1] = defaults[i][1];
        }
        o->n_shapes = n_defaults < 16 ? n_defaults : 16;
        return 0;
    }
    for (const char *p = o->shape_list; *p && o->n_shapes < 16;) {
        long long n, k;
        int used = 0;
        if (sscanf(p, "%lldx%lld%n", &n, &k, &used) != 2 || n <= 0 || k <= 0 ||
            (even_k && k % 2)) {
            fprintf(stderr, "%s: --shapes wants NxK[,NxK...]%s\n", prog,
                    even_k ? " with K even" : "");
            return -1;
        }
        o->shapes[o->n_shapes][0] = n;
        o->shapes[o->n_shapes++][1] = k;
        p += used;
        if (*p == ',')
            p++;
    }
    return 0;
}

#endif
