/* Execution context: device, thread pool, chosen ISA, per-thread scratch, last error. */
#include "cpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define LH_MAX_THREADS 1024

/* Messages of failed calls that have no context (lh_k_ctx_create, lh_k_rope_init, a kernel
 * given ctx == NULL), per thread; read by lh_k_last_error(NULL). */
static _Thread_local char tls_err[768];

lh_status lh_kerr_v(lh_kctx *ctx, lh_status st, const char *fmt, va_list ap)
{
    char *buf = ctx ? ctx->err : tls_err;
    size_t size = ctx ? sizeof ctx->err : sizeof tls_err;
    vsnprintf(buf, size, fmt, ap);
    return st;
}

lh_status lh_kerr(lh_kctx *ctx, lh_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lh_kerr_v(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

const char *lh_k_last_error(const lh_kctx *ctx)
{
    return ctx ? ctx->err : tls_err;
}

static bool parse_isa(const char *s, lh_k_isa *out)
{
    if (!strcmp(s, "scalar"))
        *out = LH_K_ISA_SCALAR;
    else if (!strcmp(s, "avx2"))
        *out = LH_K_ISA_AVX2;
    else if (!strcmp(s, "avx512"))
        *out = LH_K_ISA_AVX512;
    else if (!strcmp(s, "amx"))
        *out = LH_K_ISA_AMX;
    else
        return false;
    return true;
}

#include "cuda/cuda_ops.h"

/* A CUDA context: the work runs on the device, so no CPU pool; host-side work (argument
 * checks, staging) runs on the caller's thread. The first one loads the CUDA library
 * (kernels/cuda_load.c); CPU contexts never do. */
static lh_kctx *cuda_ctx_create(lh_device device)
{
    const lh_cuda_ops *ops = lh_cuda_load();
    if (!ops) {
        lh_kerr(NULL, LH_E_UNSUPPORTED,
                "lh_k_ctx_create: cuda:%d is not available: %s (supported: cpu)", device.index,
                lh_k_cuda_unavailable_reason());
        return NULL;
    }
    lh_kctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        lh_kerr(NULL, LH_E_NOMEM, "lh_k_ctx_create: out of memory");
        return NULL;
    }
    ctx->device = device;
    ctx->n_threads = 1;
    ctx->isa = lh_cpu_isa_best();
    ctx->ops = lh_cpu_ops_for(ctx->isa);
    if (ops->ctx_init(ctx, device.index) != LH_OK) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

lh_kctx *lh_k_ctx_create(int n_threads, lh_device device)
{
    if (device.kind == LH_DEVICE_CUDA)
        return cuda_ctx_create(device);
    if (device.kind != LH_DEVICE_CPU) {
        lh_kerr(NULL, LH_E_UNSUPPORTED,
                "lh_k_ctx_create: device kind %d is unknown (supported: cpu, cuda)",
                (int)device.kind);
        return NULL;
    }
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)(n < LH_MAX_THREADS ? n : LH_MAX_THREADS) : 1;
    }
    if (n_threads > LH_MAX_THREADS) {
        lh_kerr(NULL, LH_E_USAGE, "lh_k_ctx_create: n_threads %d exceeds the limit %d", n_threads,
                LH_MAX_THREADS);
        return NULL;
    }

    lh_k_isa isa = lh_cpu_isa_best();
    const char *env = getenv("LLMHOST_KERNELS_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        if (!parse_isa(env, &isa)) {
            lh_kerr(NULL, LH_E_USAGE,
                    "lh_k_ctx_create: LLMHOST_KERNELS_ISA='%s' is not one of scalar, avx2, avx512, "
                    "amx, auto",
                    env);
            return NULL;
        }
        if (!lh_cpu_isa_supported(isa)) {
            lh_kerr(NULL, LH_E_UNSUPPORTED,
                    "lh_k_ctx_create: LLMHOST_KERNELS_ISA=%s, but this CPU does not support %s "
                    "(best available: %s)",
                    env, env, lh_k_isa_name(lh_cpu_isa_best()));
            return NULL;
        }
    }

    lh_kctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        lh_kerr(NULL, LH_E_NOMEM, "lh_k_ctx_create: out of memory");
        return NULL;
    }
    ctx->device = device;
    ctx->n_threads = n_threads;
    ctx->isa = isa;
    ctx->ops = lh_cpu_ops_for(isa);
    if (n_threads > 1) {
        char msg[256];
        ctx->pool = lh_pool_create(n_threads, msg, sizeof msg);
        if (!ctx->pool) {
            lh_kerr(NULL, LH_E_NOMEM, "lh_k_ctx_create: %d threads: %s", n_threads, msg);
            free(ctx);
            return NULL;
        }
    }
    return ctx;
}

void lh_k_ctx_free(lh_kctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->cuda)
        LH_CUDA(ctx_free)(ctx);
    lh_pool_free(ctx->pool);
    free(ctx->scratch);
    free(ctx->arena);
    free(ctx->marks);
    free(ctx);
}

int lh_k_ctx_threads(const lh_kctx *ctx)
{
    return ctx ? ctx->n_threads : 0;
}

lh_k_isa lh_k_ctx_isa(const lh_kctx *ctx)
{
    return ctx ? ctx->isa : LH_K_ISA_SCALAR;
}

lh_status lh_k_ctx_set_isa(lh_kctx *ctx, lh_k_isa isa)
{
    if (!ctx)
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_ctx_set_isa: ctx is NULL");
    if (isa != LH_K_ISA_SCALAR && isa != LH_K_ISA_AVX2 && isa != LH_K_ISA_AVX512 &&
        isa != LH_K_ISA_AMX)
        return lh_kerr(ctx, LH_E_USAGE, "lh_k_ctx_set_isa: %d is not an lh_k_isa value", (int)isa);
    if (!lh_cpu_isa_supported(isa))
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "lh_k_ctx_set_isa: this CPU does not support %s (best available: %s)",
                       lh_k_isa_name(isa), lh_k_isa_name(lh_cpu_isa_best()));
    ctx->isa = isa;
    ctx->ops = lh_cpu_ops_for(isa);
    return LH_OK;
}

lh_status lh_k_ctx_set_quant_matmul(lh_kctx *ctx, lh_k_qmm mode)
{
    if (!ctx)
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_ctx_set_quant_matmul: ctx is NULL");
    if (mode != LH_K_QMM_INT8 && mode != LH_K_QMM_EXACT)
        return lh_kerr(ctx, LH_E_USAGE,
                       "lh_k_ctx_set_quant_matmul: %d is not an lh_k_qmm value (LH_K_QMM_INT8 or "
                       "LH_K_QMM_EXACT)",
                       (int)mode);
    ctx->qmm = mode;
    return LH_OK;
}

lh_status lh_k_ctx_set_bf16_matmul(lh_kctx *ctx, lh_k_bf16mm mode)
{
    if (!ctx)
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_ctx_set_bf16_matmul: ctx is NULL");
    if (mode != LH_K_BF16MM_TILES && mode != LH_K_BF16MM_EXACT)
        return lh_kerr(ctx, LH_E_USAGE,
                       "lh_k_ctx_set_bf16_matmul: %d is not an lh_k_bf16mm value "
                       "(LH_K_BF16MM_TILES or LH_K_BF16MM_EXACT)",
                       (int)mode);
    ctx->bf16mm = mode;
    return LH_OK;
}

lh_k_bf16mm lh_k_ctx_bf16_matmul(const lh_kctx *ctx)
{
    return ctx ? ctx->bf16mm : LH_K_BF16MM_TILES;
}

const char *lh_k_bf16mm_name(lh_k_bf16mm mode)
{
    switch (mode) {
    case LH_K_BF16MM_TILES: return "tiles";
    case LH_K_BF16MM_EXACT: return "exact";
    default: return NULL;
    }
}

lh_k_qmm lh_k_ctx_quant_matmul(const lh_kctx *ctx)
{
    return ctx ? ctx->qmm : LH_K_QMM_INT8;
}

const char *lh_k_qmm_name(lh_k_qmm mode)
{
    switch (mode) {
    case LH_K_QMM_INT8: return "int8";
    case LH_K_QMM_EXACT: return "exact";
    default: return NULL;
    }
}

float *lh_cpu_scratch(lh_kctx *ctx, size_t floats)
{
    /* round up to a whole number of cache lines per thread: no false sharing */
    floats = (floats + 15) & ~(size_t)15;
    if (floats == 0)
        floats = 16;
    if (ctx->scratch && ctx->scratch_per_thread >= floats)
        return ctx->scratch;
    if (floats > SIZE_MAX / sizeof(float) / (size_t)ctx->n_threads)
        return NULL;
    size_t bytes = floats * sizeof(float) * (size_t)ctx->n_threads;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, bytes) != 0)
        return NULL;
    free(ctx->scratch);
    ctx->scratch = mem;
    ctx->scratch_per_thread = floats;
    return ctx->scratch;
}

void *lh_cpu_arena(lh_kctx *ctx, size_t bytes)
{
    if (bytes > SIZE_MAX / 4)
        return NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0)
        bytes = 64;
    if (ctx->arena && ctx->arena_bytes >= bytes)
        return ctx->arena;
    /* grow geometrically: a batch that changes shape every step settles quickly */
    size_t want = ctx->arena_bytes > bytes / 2 ? 2 * ctx->arena_bytes : bytes;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, want) != 0) {
        want = bytes;
        if (posix_memalign(&mem, 64, want) != 0)
            return NULL;
    }
    free(ctx->arena);
    ctx->arena = mem;
    ctx->arena_bytes = want;
    return mem;
}

lh_cpu_mark *lh_cpu_marks(lh_kctx *ctx, int64_t n, uint32_t *gen)
{
    if (n < 1)
        n = 1;
    if (ctx->n_marks < n) {
        if ((uint64_t)n > SIZE_MAX / sizeof(lh_cpu_mark))
            return NULL;
        lh_cpu_mark *m = calloc((size_t)n, sizeof *m);
        if (!m)
            return NULL;
        free(ctx->marks);
        ctx->marks = m;
        ctx->n_marks = n;
        ctx->mark_gen = 0;
    }
    if (++ctx->mark_gen == 0) { /* wrapped: forget every old mark */
        memset(ctx->marks, 0, (size_t)ctx->n_marks * sizeof *ctx->marks);
        ctx->mark_gen = 1;
    }
    *gen = ctx->mark_gen;
    return ctx->marks;
}

/* ---- public parallel_for -------------------------------------------------------------- */

struct pf_adapter {
    lh_k_task_fn fn;
    void *user;
};

static void pf_run(int64_t i, int tid, void *user)
{
    (void)tid;
    struct pf_adapter *a = user;
    a->fn(i, a->user);
}

void lh_k_parallel_for(lh_kctx *ctx, int64_t n, lh_k_task_fn fn, void *user)
{
    if (!fn || n <= 0)
        return;
    struct pf_adapter a = {fn, user};
    lh_cpu_parallel(ctx, n, pf_run, &a);
}
