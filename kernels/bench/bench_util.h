/* Shared by the kernel microbenchmarks: a monotonic clock and a small deterministic RNG. */
#ifndef LH_KERNELS_BENCH_UTIL_H
#define LH_KERNELS_BENCH_UTIL_H

#include <stdint.h>
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

#endif
