/* The integer-dot matmul on AMX tiles (LH_K_ISA_AMX, M >= LH_QMM_AMX_MIN_M): the same quantized
 * activations as every other path (qmatmul.c quantizes x with the AVX-512 table's quantizer),
 * the integer products of a weight block (or sub-block, or q6_k group) with an activation block
 * made by TDPBSSD for 16 x 16 outputs at a time, the scales applied in AVX-512 registers.
 *
 * Why a tile product per block: the weight's scale changes every 32 elements (16 for q6_k), so
 * one product may span one block only (K = 32 or 16 bytes per tile row), and each block's
 * 16 x 16 int32 sums leave the tile unit through memory (TILESTORED to a 1 KiB buffer in L1)
 * before they are scaled. Measured here (one core): the tile work alone of a 16 x 16 x 32 block
 * (two loads, zero, TDPBSSD, store) runs at about 9 ns, the scaling of its 256 sums at about as
 * much, so two tile sets alternate: block g + 1's product is issued before block g's sums are
 * scaled, and those sums are read one store after they were written (a vector load of what
 * TILESTORED has just written waits for it to reach L1).
 *
 * Layout: C[n][m] = sum_k W[n][k] x8[m][k]: the weights are the A operand (16 rows of n, their
 * integers row-major, which a panel decode writes directly), the activations the B operand in
 * the tile unit's pair-of-four layout (B[r][4 m + i] = x8[m][4 r + i]), built once per call. A
 * task is one panel of 16 weight rows against every activation row, 16 at a time; the panel is
 * decoded once per task into the thread's scratch, the 16 x 16 f32 sums stay in registers (the
 * K types' int32 sums do, their f32 sums in L1) and are transposed into y.
 *
 * q4_k and q5_k skip the per-sub-block scaling: their 6-bit sub-block scales are split into
 * digits (base 8 for q4_k, 4 for q5_k) small enough that weight x digit still fits a signed
 * byte, the panel holds one plane of those products per digit, and the tile unit sums each
 * plane over a whole 256-element super-block (four K = 64 products into one C tile); isum is
 * then the planes' sums shifted and added -- the reference's exact integer, with one store per
 * super-block instead of eight scaled sub-blocks (q4_k GEMM 415 -> 528 GFLOP/s here). q6_k's
 * signed 8-bit group scales need five such planes (base 3), which measured slower than one
 * product per 16-element group (149 vs 171 GFLOP/s), so q6_k keeps the latter.
 *
 * The arithmetic (qmatmul.h, "AMX"): the K types' integers and float steps are the reference's,
 * so they give its bits; the 32-element types sum a block whole before scaling it. */
#include "qmatmul.h"

#if LH_CPU_X86 && defined(__linux__)
#include "amx.h"

#define TGT LH_AMX_TGT

#define NP 16 /* weight rows per task: one A tile */
#define MB 16 /* activation rows per step: one B tile */

/* K elements per tile product: a block (32), a q6_k group (16), or -- q4_k / q5_k, whose
 * sub-block scales are folded into the weights (see k45_digits) -- 64 */
static int64_t group_of(int qt)
{
    return qt == LH_QT_Q6_K ? 16 : qt == LH_QT_Q4_K || qt == LH_QT_Q5_K ? 64 : 32;
}

/* q4_k / q5_k: sc = sum_i digit_i(sc) D^i with digits below D, and w * digit fits a signed byte
 * (q4_k: w <= 15, D = 8, 15 * 7 = 105; q5_k: w <= 31, D = 4, 31 * 3 = 93), so the tile unit
 * sums the products w * digit_i(sc[s]) * q over a whole super-block in one int32 per digit, and
 * isum = sum_i C_i D^i is the reference's exact integer without a multiply per sub-block. */
static int k45_digits(int qt)
{
    return qt == LH_QT_Q4_K ? 2 : 3;
}
static int k45_shift(int qt)
{
    return qt == LH_QT_Q4_K ? 3 : 2;
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* The shared arrays one call prepares from the lh_qact (offsets in bytes from `shared`). */
typedef struct amx_shared {
    int8_t *xv;   /* [Mp / 16][ng][G / 4][16][4]: the activations as B tiles */
    float *dx;    /* [nb][Mp]: activation scales, transposed */
    float *sx;    /* [nb][Mp]: a->s transposed (q4_1, q5_1) */
    int32_t *bx;  /* [K / 16][Mp]: q6_k 32 * sums of q per 16; q4_k / q5_k (as float, the
                   * first K / 32 rows) the sums per 32 */
} amx_shared;

static amx_shared shared_at(unsigned char *base, int qt, int64_t Mp, int64_t K, int64_t nb)
{
    amx_shared s;
    size_t o = 0;
    s.xv = (int8_t *)(base + o);
    o += round64((size_t)Mp * (size_t)K);
    s.dx = (float *)(base + o);
    o += round64((size_t)nb * (size_t)Mp * sizeof(float));
    s.sx = lh_qt_has_min(qt) ? (float *)(base + o) : NULL;
    o += lh_qt_has_min(qt) ? round64((size_t)nb * (size_t)Mp * sizeof(float)) : 0;
    s.bx = lh_qt_is_k(qt) ? (int32_t *)(base + o) : NULL;
    return s;
}

size_t lh_qmm_amx_shared_bytes(int qt, int64_t M, int64_t K, int64_t nb)
{
    const int64_t Mp = lh_qmm_amx_mpad(M), ng = K / 16;
    size_t o = round64((size_t)Mp * (size_t)K) + round64((size_t)nb * (size_t)Mp * sizeof(float));
    if (lh_qt_has_min(qt))
        o += round64((size_t)nb * (size_t)Mp * sizeof(float));
    if (lh_qt_is_k(qt))
        o += round64((size_t)ng * (size_t)Mp * sizeof(int32_t));
    return o;
}

/* The per-thread panel: its integers [NP][K] and scales, transposed so that a row's scale is
 * a broadcast load; the C-tile buffers (two for the alternating tile sets, three for the
 * digit tiles), q6_k's f32 sums, the bias. */
typedef struct amx_panel {
    int8_t *w;      /* [NP][K]; q4_k / q5_k: one such plane per digit, NP x K apart */
    float *dw;      /* [nb][NP]: 32-element types dw; K types d */
    float *mw;      /* [nb][NP]: q4_1 / q5_1 mw; q4_k / q5_k dmin */
    int32_t *sc;    /* [ng][NP]: K types' sub-block / group scales */
    int32_t *mn;    /* [K / 32][NP]: q4_k / q5_k sub-block mins, as float */
    int32_t *tiles; /* [3][16][16] */
    float *acc;     /* [NP][MB]: q6_k (its int32 sums hold the registers) */
    float *bias;    /* [NP] */
} amx_panel;

static size_t panel_bytes(int64_t K, int64_t nb, int64_t ng)
{
    ng = K / 16; /* the most groups of any type */
    return 3 * round64((size_t)NP * (size_t)K) + 2 * round64((size_t)nb * NP * sizeof(float)) +
           2 * round64((size_t)ng * NP * sizeof(int32_t)) + 3 * 256 * sizeof(int32_t) +
           NP * MB * sizeof(float) + NP * sizeof(float) + 64;
}

static amx_panel panel_at(unsigned char *base, int64_t K, int64_t nb, int64_t ng)
{
    amx_panel p;
    base = (unsigned char *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
    ng = K / 16;
    size_t o = 0;
    p.w = (int8_t *)(base + o);
    o += 3 * round64((size_t)NP * (size_t)K);
    p.dw = (float *)(base + o);
    o += round64((size_t)nb * NP * sizeof(float));
    p.mw = (float *)(base + o);
    o += round64((size_t)nb * NP * sizeof(float));
    p.sc = (int32_t *)(base + o);
    o += round64((size_t)ng * NP * sizeof(int32_t));
    p.mn = (int32_t *)(base + o);
    o += round64((size_t)ng * NP * sizeof(int32_t));
    p.tiles = (int32_t *)(base + o);
    o += 3 * 256 * sizeof(int32_t);
    p.acc = (float *)(base + o);
    o += NP * MB * sizeof(float);
    p.bias = (float *)(base + o);
    return p;
}

struct amx_job {
    int qt;
    const lh_qact *a;
    const uint8_t *w;
    size_t wrow;
    int64_t N, Mp, ng, G;
    const void *bias;
    lh_dtype bias_dtype;
    float *y;
    amx_shared s;
    unsigned char *scratch;
    size_t scratch_stride; /* bytes */
};

/* ---- the activations as B tiles, once per call ---------------------------------------------- */

static void prep_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct amx_job *j = user;
    const lh_qact *a = j->a;
    const int64_t G = j->G, K = a->K, Mp = j->Mp, m0 = t * 16;
    for (int64_t g = 0; g < j->ng; g++) {
        int8_t *dst = j->s.xv + ((size_t)t * (size_t)j->ng + (size_t)g) * (size_t)(16 * G);
        for (int64_t r = 0; r < G / 4; r++)
            for (int64_t i = 0; i < 16; i++) {
                const int64_t m = m0 + i;
                int8_t *o = dst + r * 64 + i * 4;
                if (m < a->M)
                    memcpy(o, a->q + m * K + g * G + 4 * r, 4);
                else
                    memset(o, 0, 4);
            }
    }
    for (int64_t i = 0; i < 16; i++) {
        const int64_t m = m0 + i;
        const bool in = m < a->M;
        for (int64_t b = 0; b < a->nb; b++) {
            j->s.dx[b * Mp + m] = in ? a->d[m * a->nb + b] : 0.0f;
            if (j->s.sx)
                j->s.sx[b * Mp + m] = in ? a->s[m * a->nb + b] : 0.0f;
        }
        if (!j->s.bx)
            continue;
        const int16_t *bs = in ? a->bsum + m * (K / 16) : NULL;
        if (j->qt == LH_QT_Q6_K)
            for (int64_t g = 0; g < K / 16; g++)
                j->s.bx[g * Mp + m] = in ? 32 * (int32_t)bs[g] : 0;
        else
            for (int64_t s32 = 0; s32 < K / 32; s32++)
                ((float *)j->s.bx)[s32 * Mp + m] =
                    in ? (float)((int32_t)bs[2 * s32] + bs[2 * s32 + 1]) : 0.0f;
    }
}

/* ---- a panel of weight rows, once per task ----------------------------------------------------- */

/* lh_qmm_super_ints on AVX-512 (the same integers and scales; the panel decode is a tenth of a
 * prompt's time with the scalar one): 32 or 64 values per register, the layouts of
 * qmm_scalar.c's reference */
static LH_ALWAYS_INLINE TGT void super_ints(int qt, const uint8_t *blk, int8_t w[256], int sc[16],
                                            int mn[8], float *d, float *dmin)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    if (qt == LH_QT_Q6_K) {
        const __m256i three = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
            const __m256i qhv = _mm256_loadu_si256((const __m256i *)qh);
            for (int half = 0; half < 2; half++) { /* r in [32 half, 32 half + 32) of ql */
                const __m256i qlv = _mm256_loadu_si256((const __m256i *)(ql + 32 * half));
                for (int nib = 0; nib < 2; nib++) { /* r / 64 = nib */
                    const int q = 2 * nib + half; /* r / 32 */
                    const __m256i lo = nib ? _mm256_and_si256(_mm256_srli_epi16(qlv, 4), low4)
                                           : _mm256_and_si256(qlv, low4);
                    const __m256i hi =
                        _mm256_and_si256(_mm256_srli_epi16(qhv, 2 * q), three);
                    _mm256_storeu_si256((__m256i *)(w + 128 * h + 32 * q),
                                        _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
                }
            }
        }
        lh_qmm_super_scales(qt, blk, sc, mn, d, dmin);
        return;
    }
    const bool five = qt == LH_QT_Q5_K;
    const uint8_t *qs = blk + (five ? 48 : 16);
    const __m256i qhv = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    const __m256i one = _mm256_set1_epi8(1);
    for (int t = 0; t < 4; t++) {
        const __m256i y = _mm256_loadu_si256((const __m256i *)(qs + 32 * t));
        __m256i lo = _mm256_and_si256(y, low4), hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), low4);
        if (five) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qhv, 2 * t), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qhv, 2 * t + 1), one), 4));
        }
        _mm256_storeu_si256((__m256i *)(w + 64 * t), lo);
        _mm256_storeu_si256((__m256i *)(w + 64 * t + 32), hi);
    }
    lh_qmm_super_scales(qt, blk, sc, mn, d, dmin);
}

static TGT void decode_panel(const struct amx_job *j, int64_t n0, amx_panel *p)
{
    const int qt = j->qt;
    const int64_t K = j->a->K, nb = j->a->nb;
    int64_t bb = 0;
    lh_k_dtype_block((lh_dtype)(LH_DTYPE_Q4_0 + qt), NULL, &bb);
    for (int64_t r = 0; r < NP; r++) {
        const int64_t n = n0 + r;
        int8_t *wr = p->w + r * K;
        if (n >= j->N) { /* the panel's rows past N: zeros, their outputs never written */
            for (int d = 0; d < 3; d++)
                memset(p->w + (size_t)d * NP * (size_t)K + r * K, 0, (size_t)K);
            for (int64_t b = 0; b < nb; b++)
                p->dw[b * NP + r] = p->mw[b * NP + r] = 0.0f;
            for (int64_t g = 0; g < K / 16; g++) {
                p->sc[g * NP + r] = 0;
                ((float *)p->mn)[g * NP + r] = 0.0f;
            }
            continue;
        }
        const uint8_t *src = j->w + (size_t)n * j->wrow;
        for (int64_t b = 0; b < nb; b++) {
            if (!lh_qt_is_k(qt)) {
                lh_qmm_block_ints(qt, src + b * bb, wr + 32 * b, &p->dw[b * NP + r],
                                  &p->mw[b * NP + r]);
                continue;
            }
            int sc[16], mn[8];
            super_ints(qt, src + b * bb, wr + 256 * b, sc, mn, &p->dw[b * NP + r],
                       &p->mw[b * NP + r]);
            if (qt != LH_QT_Q6_K) { /* the digit planes, highest first (plane 0 last) */
                const int nd = k45_digits(qt), sh = k45_shift(qt), mask = (1 << sh) - 1;
                for (int d = nd - 1; d >= 0; d--) {
                    int8_t *pl = p->w + (size_t)d * NP * (size_t)K + r * K + 256 * b;
                    for (int s32 = 0; s32 < 8; s32++) { /* 32 bytes times one digit */
                        const __m512i v = _mm512_cvtepu8_epi16(
                            _mm256_loadu_si256((const __m256i *)(wr + 256 * b + 32 * s32)));
                        const __m512i prod = _mm512_mullo_epi16(
                            v, _mm512_set1_epi16((short)((sc[s32] >> (sh * d)) & mask)));
                        _mm256_storeu_si256((__m256i *)(pl + 32 * s32), _mm512_cvtepi16_epi8(prod));
                    }
                }
            }
            const int per = qt == LH_QT_Q6_K ? 16 : 8;
            for (int s = 0; s < per; s++) {
                p->sc[(b * per + s) * NP + r] = sc[s];
                ((float *)p->mn)[(b * per + s) * NP + r] = qt == LH_QT_Q6_K ? 0.0f : (float)mn[s];
            }
        }
    }
}

/* ---- the scale steps, on one 16 x 16 block: rows n (the panel's), lanes m ---------------------- */

/* 32-element types, block b: acc = fma(dw * dx, (float)isum, acc), then fma(mw, s, acc) */
static LH_ALWAYS_INLINE TGT void scale32(const struct amx_job *j, const amx_panel *p,
                                         const int32_t *tile, int64_t b, int64_t m0, bool has_min,
                                         __m512 acc[16])
{
    const __m512 dx = _mm512_loadu_ps(j->s.dx + b * j->Mp + m0);
    const __m512 sx = has_min ? _mm512_loadu_ps(j->s.sx + b * j->Mp + m0) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const __m512 dw = _mm512_set1_ps(p->dw[b * NP + r]);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx),
                                 _mm512_cvtepi32_ps(_mm512_loadu_si512(tile + 16 * r)), acc[r]);
        if (has_min)
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(p->mw[b * NP + r]), sx, acc[r]);
    }
}

/* q6_k, group g: iacc += sc * (isum_g - 32 * bsum_g) */
static LH_ALWAYS_INLINE TGT void scale_q6k_group(const struct amx_job *j, const amx_panel *p,
                                                 const int32_t *tile, int64_t g, int64_t m0,
                                                 __m512i iacc[16])
{
    const __m512i bx = _mm512_loadu_si512(j->s.bx + g * j->Mp + m0);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const __m512i v = _mm512_sub_epi32(_mm512_loadu_si512(tile + 16 * r), bx);
        iacc[r] = _mm512_add_epi32(iacc[r], _mm512_mullo_epi32(_mm512_set1_epi32(p->sc[g * NP + r]), v));
    }
}

/* q6_k, end of super-block sb: acc = acc + (d * dx) * (float)isum (qmatmul.h, 3.), acc in L1 */
static LH_ALWAYS_INLINE TGT void scale_q6k_super(const struct amx_job *j, const amx_panel *p,
                                                 int64_t sb, int64_t m0, __m512i iacc[16])
{
    const __m512 dx = _mm512_loadu_ps(j->s.dx + sb * j->Mp + m0);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const __m512 d = _mm512_set1_ps(p->dw[sb * NP + r]);
        _mm512_storeu_ps(p->acc + r * MB,
                         _mm512_add_ps(_mm512_loadu_ps(p->acc + r * MB),
                                       _mm512_mul_ps(_mm512_mul_ps(d, dx),
                                                     _mm512_cvtepi32_ps(iacc[r]))));
        iacc[r] = _mm512_setzero_si512();
    }
}

/* q4_k / q5_k, super-block sb from its digit tiles t[0 .. nd): isum = sum_i t_i << (sh i), msum
 * in f32 (every partial sum an integer below 2^24, so exact: the reference's (float)msum), then
 * the reference's float steps (qmatmul.h, 3.) */
static LH_ALWAYS_INLINE TGT void scale_k45_super(const struct amx_job *j, const amx_panel *p,
                                                 const int32_t *t, int64_t sb, int64_t m0,
                                                 const int nd, const int sh, __m512 acc[16])
{
    const __m512 dx = _mm512_loadu_ps(j->s.dx + sb * j->Mp + m0);
    const float *bxf = (const float *)j->s.bx, *mnf = (const float *)p->mn;
    __m512 bs[8];
    for (int s = 0; s < 8; s++)
        bs[s] = _mm512_loadu_ps(bxf + (sb * 8 + s) * j->Mp + m0);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        __m512i isum = _mm512_add_epi32(_mm512_loadu_si512(t + 16 * r),
                                        _mm512_slli_epi32(_mm512_loadu_si512(t + 256 + 16 * r), sh));
        if (nd == 3)
            isum = _mm512_add_epi32(isum, _mm512_slli_epi32(_mm512_loadu_si512(t + 512 + 16 * r), 2 * sh));
        __m512 msum = _mm512_setzero_ps();
        for (int s = 0; s < 8; s++)
            msum = _mm512_fmadd_ps(_mm512_set1_ps(mnf[(sb * 8 + s) * NP + r]), bs[s], msum);
        const __m512 d = _mm512_set1_ps(p->dw[sb * NP + r]), dmin = _mm512_set1_ps(p->mw[sb * NP + r]);
        __m512 a = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum)));
        acc[r] = _mm512_sub_ps(a, _mm512_mul_ps(_mm512_mul_ps(dmin, dx), msum));
    }
}

/* ---- the output: 16 x 16 sums [n][m] transposed into y [m][n], plus the bias -------------------- */

static LH_ALWAYS_INLINE TGT void write_block(const struct amx_job *j, const amx_panel *p,
                                             int64_t n0, int64_t m0, __m512 r[16])
{
    const int64_t N = j->N, M = j->a->M;
    const __mmask16 nk = N - n0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (N - n0)) - 1);
    const __m512 bias = _mm512_loadu_ps(p->bias);
    lh_amx_transpose16(r);
    for (int i = 0; i < 16 && m0 + i < M; i++)
        _mm512_mask_storeu_ps(j->y + (m0 + i) * N + n0, nk, j->bias ? _mm512_add_ps(r[i], bias) : r[i]);
}

/* ---- one task: a panel of NP weight rows against all activation rows ------------------------------ */

/* Group g's tile product on tile set 0 (C 0, A 1, B 2) or 1 (C 3, A 4, B 5); the next set's
 * product is issued before this one's sums are scaled, so the tile unit works while the vector
 * units scale. */
#define AMX_ISSUE(set, g)                                                                       \
    do {                                                                                        \
        if ((set) == 0) {                                                                       \
            LH_AMX_LOAD(1, p.w + (g) * G, K);                                                   \
            LH_AMX_LOAD(2, xt + (g) * 16 * G, 64);                                              \
            LH_AMX_ZERO(0);                                                                     \
            LH_AMX_DPBSSD(0, 1, 2);                                                             \
        } else {                                                                                \
            LH_AMX_LOAD(4, p.w + (g) * G, K);                                                   \
            LH_AMX_LOAD(5, xt + (g) * 16 * G, 64);                                              \
            LH_AMX_ZERO(3);                                                                     \
            LH_AMX_DPBSSD(3, 4, 5);                                                             \
        }                                                                                       \
    } while (0)

static LH_ALWAYS_INLINE TGT void scale_group(const struct amx_job *j, const amx_panel *p,
                                             const int32_t *tile, int64_t g, int64_t m0, int qt,
                                             __m512 acc[16], __m512i iacc[16])
{
    if (!lh_qt_is_k(qt)) {
        scale32(j, p, tile, g, m0, lh_qt_has_min(qt), acc);
        return;
    }
    scale_q6k_group(j, p, tile, g, m0, iacc);
    if (g % 16 == 15)
        scale_q6k_super(j, p, g / 16, m0, iacc);
}

static LH_ALWAYS_INLINE TGT void panel_type(const struct amx_job *j, amx_panel p, int64_t n0,
                                            const int qt)
{
    const int64_t K = j->a->K, ng = j->ng, G = j->G;
    for (int64_t m0 = 0; m0 < j->Mp; m0 += MB) {
        const int8_t *xt = j->s.xv + (size_t)(m0 / 16) * (size_t)ng * (size_t)(16 * G);
        __m512 acc[16];
        __m512i iacc[16];
        for (int r = 0; r < 16; r++) {
            acc[r] = _mm512_setzero_ps();
            iacc[r] = _mm512_setzero_si512();
        }
        if (lh_qt_is_k(qt))
            memset(p.acc, 0, NP * MB * sizeof(float));
        /* group g's sums are scaled one store later than they are stored: a vector load of
         * what TILESTORED has just written waits for it to reach L1 */
        int32_t *buf0 = p.tiles, *buf1 = p.tiles + 256;
        AMX_ISSUE(0, 0);
        for (int64_t g = 0; g < ng; g += 2) {
            if (g + 1 < ng)
                AMX_ISSUE(1, g + 1);
            LH_AMX_STORE(0, buf0, 64);
            if (g >= 1)
                scale_group(j, &p, buf1, g - 1, m0, qt, acc, iacc);
            if (g + 1 < ng) {
                if (g + 2 < ng)
                    AMX_ISSUE(0, g + 2);
                LH_AMX_STORE(3, buf1, 64);
                scale_group(j, &p, buf0, g, m0, qt, acc, iacc);
            }
        }
        scale_group(j, &p, ng % 2 ? buf0 : buf1, ng - 1, m0, qt, acc, iacc);
        if (lh_qt_is_k(qt))
            for (int r = 0; r < 16; r++)
                acc[r] = _mm512_loadu_ps(p.acc + r * MB);
        write_block(j, &p, n0, m0, acc);
    }
}

/* q4_k / q5_k: per super-block the digit planes' products accumulate over its four 64-element
 * groups in C tiles 0 .. nd - 1 (A tiles 3 .. 3 + nd - 1, the activations in B tile 7) */
static LH_ALWAYS_INLINE TGT void panel_k45(const struct amx_job *j, amx_panel p, int64_t n0,
                                           const int qt)
{
    const int64_t K = j->a->K, ng = j->ng, G = j->G, nb = j->a->nb;
    const int nd = k45_digits(qt), sh = k45_shift(qt);
    const size_t plane = (size_t)NP * (size_t)K;
    for (int64_t m0 = 0; m0 < j->Mp; m0 += MB) {
        const int8_t *xt = j->s.xv + (size_t)(m0 / 16) * (size_t)ng * (size_t)(16 * G);
        __m512 acc[16];
        for (int r = 0; r < 16; r++)
            acc[r] = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < nb; sb++) {
            LH_AMX_ZERO(0);
            LH_AMX_ZERO(1);
            if (nd == 3)
                LH_AMX_ZERO(2);
            for (int64_t g = 4 * sb; g < 4 * sb + 4; g++) {
                LH_AMX_LOAD(7, xt + g * 16 * G, 64);
                LH_AMX_LOAD(3, p.w + g * G, K);
                LH_AMX_DPBSSD(0, 3, 7);
                LH_AMX_LOAD(4, p.w + plane + g * G, K);
                LH_AMX_DPBSSD(1, 4, 7);
                if (nd == 3) {
                    LH_AMX_LOAD(5, p.w + 2 * plane + g * G, K);
                    LH_AMX_DPBSSD(2, 5, 7);
                }
            }
            LH_AMX_STORE(0, p.tiles, 64);
            LH_AMX_STORE(1, p.tiles + 256, 64);
            if (nd == 3)
                LH_AMX_STORE(2, p.tiles + 512, 64);
            scale_k45_super(j, &p, p.tiles, sb, m0, nd, sh, acc);
        }
        write_block(j, &p, n0, m0, acc);
    }
}

static TGT void panel_task(int64_t t, int tid, void *user)
{
    const struct amx_job *j = user;
    const int64_t K = j->a->K, nb = j->a->nb, ng = j->ng, G = j->G, n0 = t * NP;
    amx_panel p = panel_at(j->scratch + (size_t)tid * j->scratch_stride, K, nb, ng);
    decode_panel(j, n0, &p);
    for (int r = 0; r < NP; r++)
        p.bias[r] = j->bias && n0 + r < j->N ? lh_cpu_bias_at(j->bias, j->bias_dtype, n0 + r) : 0.0f;

    lh_amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int set = 0; set < 2; set++) {
        cfg.rows[3 * set] = 16; /* C: 16 weight rows of 16 int32 */
        cfg.colsb[3 * set] = 64;
        cfg.rows[3 * set + 1] = 16; /* A: 16 weight rows of G bytes */
        cfg.colsb[3 * set + 1] = (uint16_t)G;
        cfg.rows[3 * set + 2] = (uint8_t)(G / 4); /* B: G / 4 rows of 16 x 4 activation bytes */
        cfg.colsb[3 * set + 2] = 64;
    }
    if (j->qt == LH_QT_Q4_K || j->qt == LH_QT_Q5_K) {
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        for (int i = 0; i < 8; i++) { /* C 0-2, A 3-5 (16 rows of 64 bytes), B 7 (16 rows) */
            cfg.rows[i] = 16;
            cfg.colsb[i] = 64;
        }
    }
    LH_AMX_CFG(&cfg);
    /* one instance per type, so that each inner loop is straight-line code */
    switch (j->qt) {
    case LH_QT_Q4_0: panel_type(j, p, n0, LH_QT_Q4_0); break;
    case LH_QT_Q4_1: panel_type(j, p, n0, LH_QT_Q4_1); break;
    case LH_QT_Q5_0: panel_type(j, p, n0, LH_QT_Q5_0); break;
    case LH_QT_Q5_1: panel_type(j, p, n0, LH_QT_Q5_1); break;
    case LH_QT_Q8_0: panel_type(j, p, n0, LH_QT_Q8_0); break;
    case LH_QT_Q4_K: panel_k45(j, p, n0, LH_QT_Q4_K); break;
    case LH_QT_Q5_K: panel_k45(j, p, n0, LH_QT_Q5_K); break;
    default: panel_type(j, p, n0, LH_QT_Q6_K); break;
    }
    LH_AMX_RELEASE();
}

lh_status lh_qmm_amx_run(lh_kctx *ctx, int qt, const lh_qact *a, const uint8_t *w, size_t wrow,
                         int64_t N, const void *bias, lh_dtype bias_dtype, float *y,
                         unsigned char *shared)
{
    struct amx_job j;
    memset(&j, 0, sizeof j);
    j.qt = qt;
    j.a = a;
    j.w = w;
    j.wrow = wrow;
    j.N = N;
    j.Mp = lh_qmm_amx_mpad(a->M);
    j.G = group_of(qt);
    j.ng = a->K / j.G;
    j.bias = bias;
    j.bias_dtype = bias_dtype;
    j.y = y;
    j.s = shared_at(shared, qt, j.Mp, a->K, a->nb);
    const size_t pb = panel_bytes(a->K, a->nb, j.ng);
    float *scratch = lh_cpu_scratch(ctx, (pb + sizeof(float) - 1) / sizeof(float));
    if (!scratch)
        return lh_kerr(ctx, LH_E_NOMEM,
                       "lh_k_matmul: out of memory (%zu bytes per thread for the AMX weight panels "
                       "of K = %lld)",
                       pb, (long long)a->K);
    j.scratch = (unsigned char *)scratch;
    j.scratch_stride = lh_cpu_scratch_stride(ctx) * sizeof(float);
    lh_cpu_parallel(ctx, j.Mp / 16, prep_task, &j);
    lh_cpu_parallel(ctx, (N + NP - 1) / NP, panel_task, &j);
    return LH_OK;
}

#endif
