/* y = x @ w^T (+ bias) for a bf16 weight on AMX-BF16 tiles (LH_K_BF16MM_TILES on LH_K_ISA_AMX,
 * M >= LH_AMX_BF16_MIN_M; the arithmetic is lh_k_bf16mm's in lh_kernels.h).
 *
 * C[n][m] = sum_k W[n][k] xb[m][k]: the weight is the A operand straight from its rows (16 rows
 * of 32 bf16 per tile, the row stride K * 2 bytes; a panel whose rows end before 32 or whose K
 * is not a multiple of 32 is copied, zero-padded, into the thread's scratch first), x the B
 * operand, rounded to bf16 once per call into the tile unit's pair layout (B[r][2 m + i] =
 * xb[m][2 r + i]). A task is a panel of 32 weight rows against every x row, 32 at a time: four
 * C tiles (two A tiles by two B tiles) accumulate over all of K in f32 -- unlike the int8 path
 * no scale interrupts the sums -- and leave through one 4 KiB store per 32 x 32 outputs, then
 * are transposed into y. Measured here (one core, 2048 x 2048 x 512): see docs/benchmarks.md. */
#include "amx.h"

#if LH_CPU_X86 && defined(__linux__)

#define TGT LH_AMX_TGT

#define NP 32 /* weight rows per task: two A tiles */
#define MB 32 /* x rows per step: two B tiles */
#define KT 32 /* K elements per tile product */

static int64_t round_up(int64_t v, int64_t to)
{
    return (v + to - 1) / to * to;
}

struct bf_job {
    const float *x;
    const uint16_t *w;
    int64_t M, N, K, Kp, Mp, nch;
    const void *bias;
    lh_dtype bias_dtype;
    float *y;
    uint16_t *xb; /* [Mp / 16][nch][16 pairs][16 m][2] */
    unsigned char *scratch;
    size_t stride; /* bytes per thread */
};

/* x rows [16 t, 16 t + 16) as B tiles: each row's 32-element chunk is rounded to bf16 (RNE)
 * and its 16 pairs scattered to the 16 tile rows; rows past M and elements past K are zero */
static TGT void prep_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct bf_job *j = user;
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(16)); /* pair r -> dword 16 r */
    for (int64_t c = 0; c < j->nch; c++) {
        uint16_t *dst = j->xb + ((size_t)t * (size_t)j->nch + (size_t)c) * 512;
        const int64_t k0 = c * KT, kn = j->K - k0 < KT ? j->K - k0 : KT;
        const __mmask16 lo = kn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << kn) - 1);
        const __mmask16 hi = kn >= 32 ? (__mmask16)0xffff
                             : kn > 16 ? (__mmask16)((1u << (kn - 16)) - 1)
                                       : (__mmask16)0;
        for (int64_t i = 0; i < 16; i++) {
            const int64_t m = t * 16 + i;
            __m512i pairs = _mm512_setzero_si512();
            if (m < j->M) {
                const float *xr = j->x + m * j->K + k0;
                const __m512 a = _mm512_maskz_loadu_ps(lo, xr), b = _mm512_maskz_loadu_ps(hi, xr + 16);
                pairs = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* element e of the chunk: bf16 e */
            }
            /* dword r of `pairs` is elements 2r, 2r + 1: tile row r, column m */
            _mm512_i32scatter_epi32((int *)dst + i, idx, pairs, 4);
        }
    }
}

static TGT void panel_task(int64_t t, int tid, void *user)
{
    const struct bf_job *j = user;
    const int64_t n0 = t * NP, K = j->K;
    unsigned char *mine = j->scratch + (size_t)tid * j->stride;
    float *cbuf = (float *)mine;       /* [4][16][16] */
    float *bias = cbuf + 4 * 256;      /* [NP] */
    uint16_t *copy = (uint16_t *)(bias + NP);
    const uint16_t *a;
    int64_t lda; /* elements */
    if (n0 + NP <= j->N && K % KT == 0) {
        a = j->w + (size_t)n0 * (size_t)K;
        lda = K;
    } else {
        const int64_t rows = j->N - n0 < NP ? j->N - n0 : NP;
        memset(copy, 0, (size_t)NP * (size_t)j->Kp * sizeof(uint16_t));
        for (int64_t r = 0; r < rows; r++)
            memcpy(copy + r * j->Kp, j->w + (size_t)(n0 + r) * (size_t)K, (size_t)K * sizeof(uint16_t));
        a = copy;
        lda = j->Kp;
    }
    for (int r = 0; r < NP; r++)
        bias[r] = j->bias && n0 + r < j->N ? lh_cpu_bias_at(j->bias, j->bias_dtype, n0 + r) : 0.0f;

    lh_amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { /* C, A and B tiles alike: 16 rows of 64 bytes */
        cfg.rows[i] = 16;
        cfg.colsb[i] = 64;
    }
    LH_AMX_CFG(&cfg);
    const uint16_t *a1 = a + 16 * lda;
    const long lda_b = (long)lda * 2;
    for (int64_t m0 = 0; m0 < j->Mp; m0 += MB) {
        const uint16_t *x0 = j->xb + (size_t)(m0 / 16) * (size_t)j->nch * 512;
        const uint16_t *x1 = x0 + (size_t)j->nch * 512;
        LH_AMX_ZERO(0);
        LH_AMX_ZERO(1);
        LH_AMX_ZERO(2);
        LH_AMX_ZERO(3);
        for (int64_t c = 0; c < j->nch; c++) {
            LH_AMX_LOAD(4, a + c * KT, lda_b);
            LH_AMX_LOAD(5, a1 + c * KT, lda_b);
            LH_AMX_LOAD(6, x0 + c * 512, 64);
            LH_AMX_LOAD(7, x1 + c * 512, 64);
            LH_AMX_DPBF16PS(0, 4, 6);
            LH_AMX_DPBF16PS(1, 4, 7);
            LH_AMX_DPBF16PS(2, 5, 6);
            LH_AMX_DPBF16PS(3, 5, 7);
        }
        LH_AMX_STORE(0, cbuf, 64);
        LH_AMX_STORE(1, cbuf + 256, 64);
        LH_AMX_STORE(2, cbuf + 512, 64);
        LH_AMX_STORE(3, cbuf + 768, 64);
        for (int nh = 0; nh < 2; nh++) {
            const int64_t nb0 = n0 + 16 * nh;
            if (nb0 >= j->N)
                break;
            const __mmask16 nk =
                j->N - nb0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (j->N - nb0)) - 1);
            const __m512 bv = _mm512_loadu_ps(bias + 16 * nh);
            for (int mh = 0; mh < 2; mh++) {
                const int64_t mb0 = m0 + 16 * mh;
                if (mb0 >= j->M)
                    break;
                __m512 r[16];
                for (int i = 0; i < 16; i++)
                    r[i] = _mm512_loadu_ps(cbuf + (nh * 2 + mh) * 256 + i * 16);
                lh_amx_transpose16(r);
                for (int i = 0; i < 16 && mb0 + i < j->M; i++)
                    _mm512_mask_storeu_ps(j->y + (mb0 + i) * j->N + nb0, nk,
                                          j->bias ? _mm512_add_ps(r[i], bv) : r[i]);
            }
        }
    }
    LH_AMX_RELEASE();
}

lh_status lh_cpu_matmul_bf16_amx(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                 const lh_tensor *bias, lh_tensor *y)
{
    struct bf_job j;
    memset(&j, 0, sizeof j);
    j.x = x->data;
    j.w = w->data;
    j.M = x->shape[0];
    j.K = x->shape[1];
    j.N = w->shape[0];
    j.Kp = round_up(j.K, KT);
    j.Mp = round_up(j.M, MB);
    j.nch = j.Kp / KT;
    j.bias = bias ? bias->data : NULL;
    j.bias_dtype = bias ? bias->dtype : LH_DTYPE_F32;
    j.y = y->data;
    const size_t xbytes = (size_t)j.Mp * (size_t)j.Kp * sizeof(uint16_t);
    j.xb = lh_cpu_arena(ctx, xbytes);
    const size_t per = 4 * 256 * sizeof(float) + NP * sizeof(float) +
                       (size_t)NP * (size_t)j.Kp * sizeof(uint16_t);
    float *scratch = j.xb ? lh_cpu_scratch(ctx, (per + sizeof(float) - 1) / sizeof(float)) : NULL;
    if (!scratch)
        return lh_kerr(ctx, LH_E_NOMEM,
                       "lh_k_matmul: out of memory (%zu bytes for the bf16 tiles of x [%lld, %lld] "
                       "and %zu per thread for the weight panels)",
                       xbytes, (long long)j.M, (long long)j.K, per);
    j.scratch = (unsigned char *)scratch;
    j.stride = lh_cpu_scratch_stride(ctx) * sizeof(float);
    lh_cpu_parallel(ctx, j.Mp / 16, prep_task, &j);
    lh_cpu_parallel(ctx, (j.N + NP - 1) / NP, panel_task, &j);
    return LH_OK;
}

#endif
