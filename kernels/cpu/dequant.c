/* ggml's block formats decoded to f32 (lh_k_dequantize), scalar C, threaded over rows.
 *
 * Written from the format's definition (ggml's block_* layouts; gguf-py's quants.py
 * dequantize_blocks is the reference the tests compare with bit for bit): every value is
 * computed with the same f32 operations in the same order as that reference -- one rounding
 * per operation (this library builds with -ffp-contract=off, so no multiply-add is fused) --
 * and the f16 scales are widened exactly (lh_k_f16_to_f32). Multi-byte fields are read
 * little-endian byte by byte, so the code does not depend on the host's byte order or on
 * alignment (blocks of 18, 22 or 210 bytes leave their scales unaligned). */
#include "cpu_kernels.h"

static inline float f16_at(const uint8_t *p)
{
    return lh_k_f16_to_f32((uint16_t)(p[0] | (uint16_t)p[1] << 8));
}

static inline uint32_t u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* q4_0: d, qs[16]; element j is the low nibble of qs[j], element j + 16 its high nibble */
static void deq_q4_0(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((int)(qs[j] & 0x0f) - 8);
        y[j + 16] = d * (float)((int)(qs[j] >> 4) - 8);
    }
}

/* q4_1: d, m, qs[16]: d * q + m */
static void deq_q4_1(const uint8_t *b, float *y)
{
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0x0f) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

/* q5_0: d, qh (u32, bit j = bit 4 of element j), qs[16]: d * (q - 16) */
static void deq_q5_0(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint32_t qh = u32_at(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4;
        const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

/* q5_1: d, m, qh, qs[16]: d * q + m */
static void deq_q5_1(const uint8_t *b, float *y)
{
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4;
        const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

/* q8_0: d, qs int8[32]: q * d */
static void deq_q8_0(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

/* The eight 6-bit scales and mins of q4_k / q5_k, packed in 12 bytes:
 *   bytes 0-3: sc[0-3] (low 6 bits), top 2 bits: bits 4-5 of sc[4-7]
 *   bytes 4-7: m[0-3] (low 6 bits), top 2 bits: bits 4-5 of m[4-7]
 *   bytes 8-11: low nibble bits 0-3 of sc[4-7], high nibble bits 0-3 of m[4-7] */
static void k_scales(const uint8_t *s, int sc[8], int m[8])
{
    for (int k = 0; k < 4; k++) {
        sc[k] = s[k] & 0x3f;
        m[k] = s[4 + k] & 0x3f;
        sc[4 + k] = (s[8 + k] & 0x0f) | ((s[k] >> 2) & 0x30);
        m[4 + k] = (s[8 + k] >> 4) | ((s[4 + k] >> 2) & 0x30);
    }
}

/* q4_k: d, dmin, scales[12], qs[128]; sub-block s (32 elements) holds the low (s even) or high
 * nibbles of qs[32 (s / 2) .. 32 (s / 2) + 31]: (d * sc[s]) * q - dmin * m[s] */
static void deq_q4_k(const uint8_t *b, float *y)
{
    const float d = f16_at(b), dmin = f16_at(b + 2);
    int sc[8], m[8];
    k_scales(b + 4, sc, m);
    const uint8_t *qs = b + 16;
    for (int s = 0; s < 8; s++) {
        const float ds = d * (float)sc[s], ms = dmin * (float)m[s];
        const uint8_t *q = qs + 32 * (s / 2);
        const int sh = 4 * (s % 2);
        for (int l = 0; l < 32; l++)
            y[32 * s + l] = ds * (float)((q[l] >> sh) & 0x0f) - ms;
    }
}

/* q5_k: d, dmin, scales[12], qh[32], qs[128]; the nibbles as q4_k, bit 4 of element l of
 * sub-block s is bit s of qh[l] */
static void deq_q5_k(const uint8_t *b, float *y)
{
    const float d = f16_at(b), dmin = f16_at(b + 2);
    int sc[8], m[8];
    k_scales(b + 4, sc, m);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int s = 0; s < 8; s++) {
        const float ds = d * (float)sc[s], ms = dmin * (float)m[s];
        const uint8_t *q = qs + 32 * (s / 2);
        const int sh = 4 * (s % 2);
        for (int l = 0; l < 32; l++) {
            const int v = ((q[l] >> sh) & 0x0f) | ((qh[l] >> s) & 1) << 4;
            y[32 * s + l] = ds * (float)v - ms;
        }
    }
}

/* q6_k: ql[128], qh[64], scales int8[16], d (f16, bytes 208-209). Element e = 128 h + r
 * (h = 0, 1; r < 128): low 4 bits from ql[64 h + r % 64] (low nibble for r < 64, high above),
 * high 2 bits from qh[32 h + r % 32] >> 2 (r / 32); x = (d * sc[e / 16]) * (q - 32) */
static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = f16_at(b + 208);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, r = e % 128;
        const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
        const int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
        y[e] = (d * (float)sc[e / 16]) * (float)((lo | hi << 4) - 32);
    }
}

typedef void (*deq_block_fn)(const uint8_t *b, float *y);

static deq_block_fn block_fn(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_Q4_0: return deq_q4_0;
    case LH_DTYPE_Q4_1: return deq_q4_1;
    case LH_DTYPE_Q5_0: return deq_q5_0;
    case LH_DTYPE_Q5_1: return deq_q5_1;
    case LH_DTYPE_Q8_0: return deq_q8_0;
    case LH_DTYPE_Q4_K: return deq_q4_k;
    case LH_DTYPE_Q5_K: return deq_q5_k;
    case LH_DTYPE_Q6_K: return deq_q6_k;
    default: return NULL;
    }
}

void lh_cpu_dequant_row(lh_dtype dt, const void *src, float *dst, int64_t n)
{
    switch (dt) {
    case LH_DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case LH_DTYPE_F16: lh_k_convert_f16_to_f32(src, dst, (size_t)n); return;
    case LH_DTYPE_BF16: lh_k_convert_bf16_to_f32(src, dst, (size_t)n); return;
    default: break;
    }
    const deq_block_fn fn = block_fn(dt);
    int64_t be = 0, bb = 0;
    if (!fn || !lh_k_dtype_block(dt, &be, &bb))
        return; /* the dispatch admits no other dtype */
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / be; i++)
        fn(b + i * bb, dst + i * be);
}

struct deq_job {
    lh_dtype dt;
    const uint8_t *src;
    float *dst;
    int64_t rows, cols, row_bytes, rows_per_task;
};

static void deq_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct deq_job *j = user;
    const int64_t r0 = t * j->rows_per_task;
    const int64_t r1 = r0 + j->rows_per_task < j->rows ? r0 + j->rows_per_task : j->rows;
    for (int64_t r = r0; r < r1; r++)
        lh_cpu_dequant_row(j->dt, j->src + r * j->row_bytes, j->dst + r * j->cols, j->cols);
}

#define DEQ_TASK_ELEMS 16384 /* elements per task, at least one row */

lh_status lh_cpu_dequantize(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst)
{
    struct deq_job j = {src->dtype, src->data, dst->data, src->shape[0], src->shape[1],
                        lh_k_dtype_bytes(src->dtype, src->shape[1]), 1};
    if (j.rows == 0 || j.cols == 0)
        return LH_OK;
    if (j.cols < DEQ_TASK_ELEMS)
        j.rows_per_task = DEQ_TASK_ELEMS / j.cols;
    lh_cpu_parallel(ctx, (j.rows + j.rows_per_task - 1) / j.rows_per_task, deq_task, &j);
    return LH_OK;
}
