/* Private to libllmhost_kernels: what the AMX kernels (qmm_amx.c: int8 tiles for block-type
 * weights; matmul_amx_bf16.c: bf16 tiles for bf16 weights) share -- the tile instructions,
 * the tile configuration, a 16 x 16 transpose for their outputs, and whether the CPU and OS
 * allow them (amx.c).
 *
 * The instructions are our own asm rather than the compiler's intrinsics, whose tile loads
 * and ldtilecfg do not tell it they read memory (it could sink the stores that fill a tile's
 * source below the load). Tile numbers are literal (they are part of the instruction). */
#ifndef LH_CPU_AMX_H
#define LH_CPU_AMX_H

#include "cpu_kernels.h"

/* Whether the CPU has AMX-TILE and AMX-INT8 (and what the AVX-512 integer kernels need:
 * lh_qmm_avx512_supported), the OS enables the tile state in XCR0, and Linux grants this
 * process the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM), asked on the first call; the answer
 * is remembered). False off x86-64 Linux. */
bool lh_cpu_amx_supported(void);
/* The same, plus AMX-BF16 and AVX512-BF16 (the activations' conversion). */
bool lh_cpu_amx_bf16_supported(void);

/* lh_k_matmul with a bf16 w (arguments checked, M >= LH_AMX_BF16_MIN_M, K > 0, N > 0) on the
 * tiles, when lh_cpu_amx_bf16_supported() (matmul_amx_bf16.c). LH_E_NOMEM (message on ctx) if
 * its working memory cannot be had. */
#define LH_AMX_BF16_MIN_M 16
lh_status lh_cpu_matmul_bf16_amx(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                 const lh_tensor *bias, lh_tensor *y);

#if LH_CPU_X86 && defined(__linux__)
#include <immintrin.h>

#define LH_AMX_TGT \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))

#define LH_AMX_CFG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(cfg)) : "memory")
#define LH_AMX_RELEASE() __asm__ volatile("tilerelease" ::: "memory")
#define LH_AMX_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define LH_AMX_LOAD(t, p, s) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(s)) : "memory")
#define LH_AMX_STORE(t, p, s) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)(s)) : "memory")
/* C += A . B: signed int8 (4 per int32 lane) and bf16 (2 per f32 lane) */
#define LH_AMX_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define LH_AMX_DPBF16PS(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

/* ldtilecfg's 64 bytes (palette 1) */
typedef struct lh_amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} lh_amx_cfg;

/* r[i] lane j <- r[j] lane i */
static inline LH_AMX_TGT void lh_amx_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}
#endif

#endif
