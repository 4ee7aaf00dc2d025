/* Portable C primitives: the reference path and the only one on non-x86 machines. The
 * library is built with -ffp-contract=off, so a * b + c is two roundings here as in torch. */
#include "cpu_kernels.h"

#include <math.h>

static float s_sumsq(const float *x, int64_t n)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i] * x[i];
        s1 += x[i + 1] * x[i + 1];
        s2 += x[i + 2] * x[i + 2];
        s3 += x[i + 3] * x[i + 3];
    }
    for (; i < n; i++)
        s0 += x[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}

static void s_add(float *res, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        res[i] += x[i];
}

static void s_norm_apply(float *out, const float *x, float r, const float *wf, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * r) * wf[i];
}

static void s_silu_mul(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        out[i] = gi / (1.0f + expf(-gi)) * u[i];
    }
}

static float s_max(const float *x, int64_t n)
{
    float m = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > m)
            m = x[i];
    return m;
}

static float s_exp_sub_sum(float *x, float m, int64_t n)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i] = expf(x[i] - m);
        s1 += x[i + 1] = expf(x[i + 1] - m);
        s2 += x[i + 2] = expf(x[i + 2] - m);
        s3 += x[i + 3] = expf(x[i + 3] - m);
    }
    for (; i < n; i++)
        s0 += x[i] = expf(x[i] - m);
    return (s0 + s1) + (s2 + s3);
}

static void s_scale(float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

static float s_dot(const float *a, const float *b, int64_t n)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

static void s_axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void s_dot_rows(const float *q, const float *k, int64_t kstride, int64_t rows, int64_t n,
                       float scale, float *out)
{
    for (int64_t r = 0; r < rows; r++)
        out[r] = s_dot(q, k + r * kstride, n) * scale;
}

static void s_axpy_rows(float *y, const float *w, const float *x, int64_t xstride, int64_t rows,
                        int64_t n)
{
    for (int64_t r = 0; r < rows; r++)
        s_axpy(y, w[r], x + r * xstride, n);
}

static float s_bound_dot(const float *q, const float *lo, const float *hi, int64_t n)
{
    float s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int u = 0; u < 4; u++) {
            float a = q[i + u] * lo[i + u], b = q[i + u] * hi[i + u];
            s[u] += a > b ? a : b;
        }
    for (; i < n; i++) {
        float a = q[i] * lo[i], b = q[i] * hi[i];
        s[0] += a > b ? a : b;
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static void s_rope_rot(float *lo, float *hi, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float l = lo[i], h = hi[i];
        lo[i] = l * c[i] - h * s[i];
        hi[i] = h * c[i] + l * s[i];
    }
}

static void s_rope_rot_pairs(float *x, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c[i] - b * s[i];
        x[2 * i + 1] = b * c[i] + a * s[i];
    }
}

static int64_t s_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]))
            return -1;
        if (x[i] > x[best])
            best = i;
    }
    return best;
}

static void s_bf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = lh_cpu_bf16_to_f32(src[i]);
}

static void s_f16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    lh_k_convert_f16_to_f32(src, dst, (size_t)n);
}

static void s_f32_to_bf16(const float *src, uint16_t *dst, int64_t n)
{
    lh_k_convert_f32_to_bf16(src, dst, (size_t)n);
}

static void s_f32_to_f16(const float *src, uint16_t *dst, int64_t n)
{
    lh_k_convert_f32_to_f16(src, dst, (size_t)n);
}

const lh_cpu_ops lh_cpu_ops_scalar = {
    .isa = LH_K_ISA_SCALAR,
    .tile_mr = 4,
    .tile_nr = 4,
    .tile_nr1 = 8,
    .tile = {lh_cpu_tile_scalar_f32, lh_cpu_tile_scalar_bf16, lh_cpu_tile_scalar_f16},
    .sumsq = s_sumsq,
    .add = s_add,
    .norm_apply = s_norm_apply,
    .silu_mul = s_silu_mul,
    .max = s_max,
    .exp_sub_sum = s_exp_sub_sum,
    .scale = s_scale,
    .dot = s_dot,
    .axpy = s_axpy,
    .dot_rows = s_dot_rows,
    .axpy_rows = s_axpy_rows,
    .bound_dot = s_bound_dot,
    .rope_rot = s_rope_rot,
    .rope_rot_pairs = s_rope_rot_pairs,
    .argmax = s_argmax,
    .bf16_to_f32 = s_bf16_to_f32,
    .f16_to_f32 = s_f16_to_f32,
    .f32_to_bf16 = s_f32_to_bf16,
    .f32_to_f16 = s_f32_to_f16,
};
