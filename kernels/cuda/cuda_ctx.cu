/* The CUDA side of an execution context: device, stream, cuBLAS handles, the caching device
 * memory pool, staging of host inputs, per-call scratch, the one launch path (eager, capture,
 * dry run), transfers, and the facts about devices that explain and backends print.
 *
 * Why a pool: cudaMalloc and cudaFree synchronize the device and cost tens of microseconds;
 * the decoder and the backends allocate their buffers once, but a caller that frees and
 * allocates the same sizes (engines opened and closed in one process, growing scratch) should
 * not pay that again, so freed blocks are kept and reused, and only handed back to the driver
 * when an allocation would otherwise fail. */
#include "cuda_state.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define STAGE_INITIAL (4u << 20)
#define UPLOAD_HALF (32u << 20)
#define BLAS_WORKSPACE (32u << 20)
#define MAX_ARGS_BYTES 4096

static struct lh_cuda_state *cs_of(lh_kctx *ctx)
{
    return ctx->cuda;
}

/* ---- errors ---------------------------------------------------------------------------------- */

lh_status lh_cu_fail(lh_kctx *ctx, cudaError_t e, const char *what, const char *file, int line)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return lh_kerr(ctx, e == cudaErrorMemoryAllocation ? LH_E_NOMEM : LH_E_INTERNAL,
                   "CUDA error at %s:%d (%s): %s (%s)", file, line, what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

lh_status lh_cublas_fail(lh_kctx *ctx, cublasStatus_t s, const char *what, const char *file,
                         int line)
{
    return lh_kerr(ctx, s == CUBLAS_STATUS_ALLOC_FAILED ? LH_E_NOMEM : LH_E_INTERNAL,
                   "cuBLAS error at %s:%d (%s): %s (%s)", file, line, what,
                   cublasGetStatusString(s), cublasGetStatusName(s));
}

/* ---- devices ----------------------------------------------------------------------------------- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_count;
static char probe_reason[256];

static void probe(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(probe_reason, sizeof probe_reason, "no usable CUDA driver or device: %s (%s)",
                 cudaGetErrorString(e), cudaGetErrorName(e));
        probe_count = 0;
        return;
    }
    if (n == 0)
        snprintf(probe_reason, sizeof probe_reason, "no CUDA device");
    probe_count = n;
}

int lh_cuda_device_count(void)
{
    pthread_once(&probe_once, probe);
    return probe_count;
}

const char *lh_cuda_unavailable_reason(void)
{
    pthread_once(&probe_once, probe);
    return probe_count > 0 ? "" : probe_reason;
}

static int attr(cudaDeviceAttr a, int dev)
{
    int v = 0;
    if (cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return v;
}

lh_status lh_cuda_device_info(int index, lh_k_device_info *info)
{
    const int n = lh_cuda_device_count();
    if (index < 0 || index >= n)
        return lh_kerr(NULL, LH_E_UNSUPPORTED, "lh_k_cuda_device_info: cuda:%d does not exist (%s)",
                       index, n ? "fewer devices present" : lh_cuda_unavailable_reason());
    memset(info, 0, sizeof *info);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess)
        return lh_cu_fail(NULL, e, "cudaGetDeviceProperties", __FILE__, __LINE__);
    snprintf(info->name, sizeof info->name, "%.127s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->sm_count = p.multiProcessorCount;
    info->total_bytes = (int64_t)p.totalGlobalMem;
    /* DDR: two transfers per clock over the bus */
    const double clock_khz = attr(cudaDevAttrMemoryClockRate, index);
    const double bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth, index);
    info->bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(index) == cudaSuccess) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
            info->free_bytes = (int64_t)fr;
        if (prev >= 0)
            (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
    /* the binary image the driver picks: the newest built sm_XY of the same major version not
     * above the device's; a newer major runs the compute_90 PTX through the JIT */
    const int cc = p.major * 10 + p.minor;
    const int built[] = {90, 89, 86, 80};
    int image = 0;
    for (size_t i = 0; i < sizeof built / sizeof *built && !image; i++)
        if (built[i] <= cc && built[i] / 10 == p.major)
            image = built[i];
    if (image)
        snprintf(info->kernels, sizeof info->kernels, "sm_%d cubin; GEMM: cuBLAS", image);
    else if (cc > 90)
        snprintf(info->kernels, sizeof info->kernels, "compute_90 PTX (JIT); GEMM: cuBLAS");
    else
        snprintf(info->kernels, sizeof info->kernels,
                 "none: compute capability %d.%d is older than sm_80", p.major, p.minor);
    return LH_OK;
}

/* ---- context ------------------------------------------------------------------------------------ */

static void blocks_free_all(lh_cu_block_list *b, bool device_mem)
{
    for (size_t i = 0; i < b->n; i++)
        if (device_mem)
            (void)cudaFree(b->v[i].ptr);
    free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
}

static bool blocks_push(lh_cu_block_list *b, void *ptr, size_t bytes)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        lh_cu_block *v = (lh_cu_block *)realloc(b->v, cap * sizeof *v);
        if (!v)
            return false;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n].ptr = ptr;
    b->v[b->n].bytes = bytes;
    b->n++;
    return true;
}

static void blocks_remove(lh_cu_block_list *b, size_t i)
{
    b->v[i] = b->v[b->n - 1];
    b->n--;
}

void lh_cu_free_retired(struct lh_cuda_state *cs)
{
    for (size_t i = 0; i < cs->retired.n; i++) {
        /* a retired entry with bytes == 1 is pinned host memory */
        if (cs->retired.v[i].bytes == 1)
            (void)cudaFreeHost(cs->retired.v[i].ptr);
        else
            (void)cudaFree(cs->retired.v[i].ptr);
    }
    cs->retired.n = 0;
}

void lh_cuda_ctx_free(lh_kctx *ctx)
{
    struct lh_cuda_state *cs = ctx ? ctx->cuda : NULL;
    if (!cs)
        return;
    int prev = -1;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(cs->dev);
    if (cs->stream)
        (void)cudaStreamSynchronize(cs->stream);
    if (cs->blas)
        (void)cublasDestroy(cs->blas);
    if (cs->lt)
        (void)cublasLtDestroy(cs->lt);
    (void)cudaFree(cs->blas_ws);
    (void)cudaFreeHost(cs->pin);
    (void)cudaFree(cs->dstage);
    (void)cudaFree(cs->scratch);
    (void)cudaFreeHost(cs->up_pin);
    for (int i = 0; i < 2; i++)
        if (cs->up_done[i])
            (void)cudaEventDestroy(cs->up_done[i]);
    lh_cu_free_retired(cs);
    free(cs->retired.v);
    /* blocks still live belong to callers that forgot lh_k_free; the device memory goes back
     * with the context either way */
    blocks_free_all(&cs->live, true);
    blocks_free_all(&cs->free_list, true);
    if (cs->stream)
        (void)cudaStreamDestroy(cs->stream);
    (void)cudaGetLastError();
    if (prev >= 0)
        (void)cudaSetDevice(prev);
    free(cs);
    ctx->cuda = NULL;
}

#define INIT_CHECK(call)                                                                         \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            lh_cu_fail(NULL, e_, #call, __FILE__, __LINE__);                                     \
            goto fail;                                                                           \
        }                                                                                        \
    } while (0)
#define INIT_BLAS(call)                                                                          \
    do {                                                                                         \
        cublasStatus_t s_ = (call);                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                       \
            lh_cublas_fail(NULL, s_, #call, __FILE__, __LINE__);                                 \
            goto fail;                                                                           \
        }                                                                                        \
    } while (0)

lh_status lh_cuda_ctx_init(lh_kctx *ctx, int device_index)
{
    const int n = lh_cuda_device_count();
    if (device_index < 0 || device_index >= n) {
        if (n == 0)
            return lh_kerr(NULL, LH_E_UNSUPPORTED, "lh_k_ctx_create: cuda:%d is not available: %s",
                           device_index, lh_cuda_unavailable_reason());
        return lh_kerr(NULL, LH_E_UNSUPPORTED,
                       "lh_k_ctx_create: cuda:%d does not exist (%d CUDA device%s: cuda:0%s)",
                       device_index, n, n == 1 ? "" : "s", n == 1 ? "" : " ..");
    }
    struct lh_cuda_state *cs = (struct lh_cuda_state *)calloc(1, sizeof *cs);
    if (!cs)
        return lh_kerr(NULL, LH_E_NOMEM, "lh_k_ctx_create: out of memory");
    ctx->cuda = cs;
    cs->dev = device_index;
    const char *sync = getenv("LLMHOST_CUDA_SYNC");
    cs->sync_each = sync && sync[0] == '1';
    INIT_CHECK(cudaSetDevice(device_index));
    cs->cc = attr(cudaDevAttrComputeCapabilityMajor, device_index) * 10 +
             attr(cudaDevAttrComputeCapabilityMinor, device_index);
    cs->sm_count = attr(cudaDevAttrMultiProcessorCount, device_index);
    if (cs->cc < 80) {
        lh_kerr(NULL, LH_E_UNSUPPORTED,
                "lh_k_ctx_create: cuda:%d has compute capability %d.%d; the CUDA kernels are "
                "built for sm_80 and newer",
                device_index, cs->cc / 10, cs->cc % 10);
        lh_cuda_ctx_free(ctx);
        return LH_E_UNSUPPORTED;
    }
    INIT_CHECK(cudaStreamCreateWithFlags(&cs->stream, cudaStreamNonBlocking));
    cs->stage_cap = STAGE_INITIAL;
    INIT_CHECK(cudaMallocHost((void **)&cs->pin, cs->stage_cap));
    INIT_CHECK(cudaMalloc((void **)&cs->dstage, cs->stage_cap));
    cs->blas_ws_bytes = BLAS_WORKSPACE;
    INIT_CHECK(cudaMalloc(&cs->blas_ws, cs->blas_ws_bytes));
    INIT_BLAS(cublasCreate(&cs->blas));
    INIT_BLAS(cublasSetStream(cs->blas, cs->stream));
    /* a fixed workspace: cuBLAS then allocates nothing inside a graph capture */
    INIT_BLAS(cublasSetWorkspace(cs->blas, cs->blas_ws, cs->blas_ws_bytes));
    INIT_BLAS(cublasSetMathMode(cs->blas, CUBLAS_DEFAULT_MATH));
    INIT_BLAS(cublasLtCreate(&cs->lt));
    return LH_OK;
fail: {
    /* keep the message: freeing may overwrite the thread's last error otherwise */
    char msg[768];
    snprintf(msg, sizeof msg, "%s", lh_cu_last_error(NULL));
    lh_cuda_ctx_free(ctx);
    lh_status st = strstr(msg, "cudaErrorMemoryAllocation") ? LH_E_NOMEM : LH_E_INTERNAL;
    return lh_kerr(NULL, st, "lh_k_ctx_create: cuda:%d: %s", device_index, msg);
}
}

void lh_cuda_make_current(lh_kctx *ctx)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != ctx->cuda->dev)
        (void)cudaSetDevice(ctx->cuda->dev);
}

cudaStream_t lh_cu_stream(lh_kctx *ctx) { return cs_of(ctx)->stream; }
cublasHandle_t lh_cu_cublas(lh_kctx *ctx) { return cs_of(ctx)->blas; }
cublasLtHandle_t lh_cu_cublaslt(lh_kctx *ctx) { return cs_of(ctx)->lt; }
lh_cu_mode lh_cu_mode_of(lh_kctx *ctx) { return cs_of(ctx)->mode; }
int lh_cu_device_index(lh_kctx *ctx) { return cs_of(ctx)->dev; }
int lh_cu_cc(lh_kctx *ctx) { return cs_of(ctx)->cc; }
int lh_cu_sm_count(lh_kctx *ctx) { return cs_of(ctx)->sm_count; }

void *lh_cu_blas_workspace(lh_kctx *ctx, size_t *bytes)
{
    *bytes = cs_of(ctx)->blas_ws_bytes;
    return cs_of(ctx)->blas_ws;
}

void lh_cu_bounds(lh_kctx *ctx, int64_t *max_seq_len, int64_t *max_blocks_per_seq)
{
    *max_seq_len = ctx->bound_seq_len;
    *max_blocks_per_seq = ctx->bound_blocks_per_seq;
}

/* ---- the memory pool ---------------------------------------------------------------------------- */

static size_t round_alloc(size_t bytes)
{
    const size_t g = bytes >= (1u << 20) ? (2u << 20) : 512;
    return (bytes + g - 1) / g * g;
}

static lh_status nomem(lh_kctx *ctx, const char *fn, size_t bytes)
{
    struct lh_cuda_state *cs = ctx->cuda;
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        (void)cudaGetLastError();
    return lh_kerr(ctx, LH_E_NOMEM,
                   "%s: out of memory on cuda:%d: asked for %.1f MiB; llmhost holds %.1f MiB "
                   "(%.1f MiB more cached and already released); the device has %.1f MiB free "
                   "of %.1f MiB",
                   fn, cs->dev, (double)bytes / 1048576.0, (double)cs->in_use / 1048576.0,
                   (double)cs->cached / 1048576.0, (double)fr / 1048576.0, (double)tot / 1048576.0);
}

static void release_cached(struct lh_cuda_state *cs)
{
    for (size_t i = 0; i < cs->free_list.n; i++)
        (void)cudaFree(cs->free_list.v[i].ptr);
    cs->free_list.n = 0;
    cs->cached = 0;
}

/* cudaMalloc that, on running out, hands the pool's cached blocks back and tries once more */
static cudaError_t pool_malloc(struct lh_cuda_state *cs, void **p, size_t bytes)
{
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        release_cached(cs);
        e = cudaMalloc(p, bytes);
    }
    if (e != cudaSuccess)
        (void)cudaGetLastError();
    return e;
}

lh_status lh_cuda_alloc(lh_kctx *ctx, size_t bytes, void **out)
{
    struct lh_cuda_state *cs = ctx->cuda;
    const size_t want = round_alloc(bytes);
    /* best fit among cached blocks, no more than twice the size (no large waste) */
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < cs->free_list.n; i++) {
        const size_t b = cs->free_list.v[i].bytes;
        if (b >= want && b <= 2 * want && (best == SIZE_MAX || b < cs->free_list.v[best].bytes))
            best = i;
    }
    void *p = NULL;
    size_t got = want;
    if (best != SIZE_MAX) {
        p = cs->free_list.v[best].ptr;
        got = cs->free_list.v[best].bytes;
        blocks_remove(&cs->free_list, best);
        cs->cached -= (int64_t)got;
    } else {
        (void)cudaSetDevice(cs->dev);
        cudaError_t e = pool_malloc(cs, &p, want);
        if (e == cudaErrorMemoryAllocation)
            return nomem(ctx, "lh_k_alloc", bytes);
        if (e != cudaSuccess)
            return lh_cu_fail(ctx, e, "cudaMalloc", __FILE__, __LINE__);
    }
    if (!blocks_push(&cs->live, p, got)) {
        (void)blocks_push(&cs->free_list, p, got); /* may fail too: then it leaks to ctx free */
        return lh_kerr(ctx, LH_E_NOMEM, "lh_k_alloc: out of host memory for the pool's records");
    }
    cs->in_use += (int64_t)got;
    if (cs->in_use > cs->peak)
        cs->peak = cs->in_use;
    *out = p;
    return LH_OK;
}

void lh_cuda_free(lh_kctx *ctx, void *ptr)
{
    struct lh_cuda_state *cs = ctx->cuda;
    for (size_t i = cs->live.n; i-- > 0;)
        if (cs->live.v[i].ptr == ptr) {
            const size_t bytes = cs->live.v[i].bytes;
            blocks_remove(&cs->live, i);
            cs->in_use -= (int64_t)bytes;
            /* work still queued may use the block: keeping it cached is safe because the next
             * user queues its work on the same stream, after that work */
            if (blocks_push(&cs->free_list, ptr, bytes))
                cs->cached += (int64_t)bytes;
            else {
                (void)cudaStreamSynchronize(cs->stream);
                (void)cudaFree(ptr);
            }
            return;
        }
}

void lh_cuda_mem_stats(const lh_kctx *ctx, lh_k_mem_stats *out)
{
    const struct lh_cuda_state *cs = ctx->cuda;
    out->in_use = cs->in_use;
    out->peak = cs->peak;
    out->cached = cs->cached;
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(cs->dev) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
        out->device_free = (int64_t)fr;
        out->device_total = (int64_t)tot;
    } else {
        (void)cudaGetLastError();
        out->device_free = out->device_total = 0;
    }
}

/* ---- recording, staging, scratch ---------------------------------------------------------------- */

bool lh_cu_record(lh_kctx *ctx, const char *tag, const void *params, size_t bytes)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (cs->mode == LH_CU_EAGER)
        return true;
    cs->hash = lh_cu_fnv(cs->hash, tag, strlen(tag) + 1);
    cs->hash = lh_cu_fnv(cs->hash, &bytes, sizeof bytes);
    cs->hash = lh_cu_fnv(cs->hash, params, bytes);
    return cs->mode == LH_CU_CAPTURE;
}

/* Replaces a buffer. Work already queued (or recorded) may still read the old one, so it is
 * retired, not freed: eagerly until the next call starts on an idle stream
 * (lh_cuda_call_begin), inside a capture or dry run until the step ends -- and then the
 * recording is unusable (the caller repeats the step, which records afresh). */
static void retire(struct lh_cuda_state *cs, void *p, bool pinned)
{
    if (!p)
        return;
    if (cs->mode != LH_CU_EAGER)
        cs->invalid = true;
    if (!blocks_push(&cs->retired, p, pinned ? 1 : 2)) {
        /* cannot remember it: wait until nothing can use it, then free it */
        (void)cudaStreamSynchronize(cs->stream);
        if (pinned)
            (void)cudaFreeHost(p);
        else
            (void)cudaFree(p);
    }
}

void lh_cuda_call_begin(lh_kctx *ctx)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (cs->mode != LH_CU_EAGER)
        return;
    /* Staged inputs of earlier calls are dead once the stream is idle. Waiting is only worth it
     * when the buffer is half full or retired buffers wait to be freed; a step ends with a
     * download (logits) that resets it anyway, so this rarely waits. */
    if (cs->stage_off > cs->stage_cap / 2 || cs->retired.n) {
        if (cudaStreamSynchronize(cs->stream) != cudaSuccess)
            return; /* the fault surfaces in this call's own checks */
        cs->stage_off = 0;
        lh_cu_free_retired(cs);
    }
}

/* Replaces the staging buffers with ones of `cap` bytes; the old ones are retired. */
static lh_status stage_grow(lh_kctx *ctx, size_t cap)
{
    struct lh_cuda_state *cs = ctx->cuda;
    unsigned char *pin = NULL, *dev = NULL;
    cudaError_t e = cudaMallocHost((void **)&pin, cap);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&dev, cap);
    if (e != cudaSuccess) {
        if (pin)
            (void)cudaFreeHost(pin);
        return lh_cu_fail(ctx, e, "growing the staging buffers", __FILE__, __LINE__);
    }
    retire(cs, cs->pin, true);
    retire(cs, cs->dstage, false);
    cs->pin = pin;
    cs->dstage = dev;
    cs->stage_cap = cap;
    cs->gen++;
    return LH_OK;
}

lh_status lh_cu_stage_reserve(lh_kctx *ctx, size_t need)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (need <= cs->stage_cap)
        return LH_OK;
    size_t cap = cs->stage_cap;
    while (cap < need)
        cap *= 2;
    lh_status st = stage_grow(ctx, cap);
    if (st == LH_OK)
        cs->stage_off = 0;
    return st;
}

void *lh_cu_stage(lh_kctx *ctx, const void *src, size_t bytes, lh_status *st)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (cs->mode != LH_CU_EAGER) {
        cs->step_staged = ((cs->step_staged + 255) & ~(size_t)255) + bytes;
        if (cs->step_staged > cs->stage_need)
            cs->stage_need = cs->step_staged;
    }
    size_t off = (cs->stage_off + 255) & ~(size_t)255;
    if (off + bytes > cs->stage_cap) {
        /* Never reuse the buffer in the middle of a call: this call's earlier staged inputs
         * are not consumed yet. A fresh, larger buffer takes the rest. */
        size_t cap = cs->stage_cap * 2;
        while (cap < 2 * bytes)
            cap *= 2;
        if ((*st = stage_grow(ctx, cap)) != LH_OK)
            return NULL;
        off = 0;
    }
    if (bytes)
        memcpy(cs->pin + off, src, bytes);
    cs->stage_off = off + bytes;
    struct {
        size_t off, bytes;
    } rec = {off, bytes};
    if (lh_cu_record(ctx, "stage", &rec, sizeof rec) && bytes) {
        cudaError_t e = cudaMemcpyAsync(cs->dstage + off, cs->pin + off, bytes,
                                        cudaMemcpyHostToDevice, cs->stream);
        if (e != cudaSuccess) {
            *st = lh_cu_fail(ctx, e, "cudaMemcpyAsync (staging)", __FILE__, __LINE__);
            return NULL;
        }
    }
    *st = LH_OK;
    return cs->dstage + off;
}

void *lh_cu_scratch(lh_kctx *ctx, size_t bytes, lh_status *st)
{
    struct lh_cuda_state *cs = ctx->cuda;
    *st = LH_OK;
    if (bytes == 0)
        bytes = 256;
    if (cs->scratch && cs->scratch_bytes >= bytes)
        return cs->scratch;
    size_t want = cs->scratch_bytes * 2 > bytes ? cs->scratch_bytes * 2 : bytes;
    want = round_alloc(want);
    void *p = NULL;
    cudaError_t e = pool_malloc(cs, &p, want);
    if (e != cudaSuccess) {
        want = round_alloc(bytes);
        e = pool_malloc(cs, &p, want);
    }
    if (e == cudaErrorMemoryAllocation) {
        *st = nomem(ctx, "kernel working memory", bytes);
        return NULL;
    }
    if (e != cudaSuccess) {
        *st = lh_cu_fail(ctx, e, "cudaMalloc (kernel working memory)", __FILE__, __LINE__);
        return NULL;
    }
    retire(cs, cs->scratch, false);
    cs->scratch = p;
    cs->scratch_bytes = want;
    cs->gen++;
    return p;
}

/* ---- launching and waiting ------------------------------------------------------------------- */

lh_status lh_cu_launch(lh_kctx *ctx, const void *fn, dim3 grid, dim3 block, size_t smem,
                       const void *args, size_t args_size, const char *name, const char *file,
                       int line)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (args_size > MAX_ARGS_BYTES)
        return lh_kerr(ctx, LH_E_INTERNAL, "%s:%d: %s: argument struct of %zu bytes (limit %d)",
                       file, line, name, args_size, MAX_ARGS_BYTES);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0)
        return LH_OK; /* nothing to do; also keeps an empty launch out of recordings */
    struct {
        const void *fn;
        unsigned g[3], b[3];
        size_t smem;
    } rec = {fn, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, smem};
    if (cs->mode != LH_CU_EAGER) {
        cs->hash = lh_cu_fnv(cs->hash, &rec, sizeof rec);
        cs->hash = lh_cu_fnv(cs->hash, args, args_size);
        if (cs->mode == LH_CU_DRYRUN)
            return LH_OK;
    }
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess)
            return lh_cu_fail(ctx, e, name, file, line);
    }
    void *argv[1] = {(void *)args};
    cudaError_t e = cudaLaunchKernel(fn, grid, block, argv, smem, cs->stream);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e == cudaSuccess && cs->sync_each && cs->mode == LH_CU_EAGER)
        e = cudaStreamSynchronize(cs->stream);
    if (e != cudaSuccess)
        return lh_cu_fail(ctx, e, name, file, line);
    return LH_OK;
}

lh_status lh_cu_download(lh_kctx *ctx, const char *fn, void *dst, const void *src, size_t bytes)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (cs->mode != LH_CU_EAGER)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: waits for a result in host memory, which a CUDA graph step cannot "
                       "do (call it after lh_k_graph_end)",
                       fn);
    if (bytes) {
        cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cs->stream);
        if (e != cudaSuccess)
            return lh_cu_fail(ctx, e, "cudaMemcpyAsync (download)", __FILE__, __LINE__);
    }
    return lh_cuda_sync(ctx);
}

lh_status lh_cuda_sync(lh_kctx *ctx)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (cs->mode != LH_CU_EAGER)
        return lh_kerr(ctx, LH_E_USAGE, "lh_k_sync: not allowed between lh_k_graph_begin and "
                       "lh_k_graph_end");
    cudaError_t e = cudaStreamSynchronize(cs->stream);
    if (e != cudaSuccess)
        return lh_cu_fail(ctx, e, "cudaStreamSynchronize (a kernel queued earlier failed; "
                          "LLMHOST_CUDA_SYNC=1 names it)", __FILE__, __LINE__);
    cs->stage_off = 0; /* every staged copy has been consumed */
    lh_cu_free_retired(cs);
    return LH_OK;
}

/* ---- transfers ---------------------------------------------------------------------------------- */

/* Host -> device through two pinned halves: while one half's copy runs, the CPU fills the
 * other, so a large upload (weights) runs at the bus speed with pageable sources too. */
static lh_status upload(lh_kctx *ctx, unsigned char *dst, const unsigned char *src, size_t bytes)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (!cs->up_pin) {
        cudaError_t e = cudaMallocHost((void **)&cs->up_pin, 2 * (size_t)UPLOAD_HALF);
        if (e != cudaSuccess) {
            cs->up_pin = NULL;
            return lh_cu_fail(ctx, e, "cudaMallocHost (upload staging)", __FILE__, __LINE__);
        }
        cs->up_half = UPLOAD_HALF;
        for (int i = 0; i < 2; i++) {
            cudaError_t e = cudaEventCreateWithFlags(&cs->up_done[i], cudaEventDisableTiming);
            if (e != cudaSuccess) { /* undo all of it: the next upload sets up afresh */
                for (int j = 0; j < i; j++)
                    (void)cudaEventDestroy(cs->up_done[j]);
                cs->up_done[0] = cs->up_done[1] = NULL;
                (void)cudaFreeHost(cs->up_pin);
                cs->up_pin = NULL;
                return lh_cu_fail(ctx, e, "cudaEventCreateWithFlags (upload)", __FILE__,
                                  __LINE__);
            }
        }
    }
    int half = 0;
    for (size_t done = 0; done < bytes; half ^= 1) {
        const size_t n = bytes - done < cs->up_half ? bytes - done : cs->up_half;
        unsigned char *buf = cs->up_pin + (size_t)half * cs->up_half;
        LH_CU_CHECK(ctx, cudaEventSynchronize(cs->up_done[half]));
        memcpy(buf, src + done, n);
        LH_CU_CHECK(ctx, cudaMemcpyAsync(dst + done, buf, n, cudaMemcpyHostToDevice, cs->stream));
        LH_CU_CHECK(ctx, cudaEventRecord(cs->up_done[half], cs->stream));
        done += n;
    }
    /* the caller may reuse src at once, and it has been copied out: no wait needed here */
    return LH_OK;
}

lh_status lh_cuda_copy(lh_kctx *ctx, void *dst, bool dst_dev, const void *src, bool src_dev,
                       size_t bytes)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (bytes == 0)
        return LH_OK;
    if (dst_dev && src_dev) {
        struct {
            void *d;
            const void *s;
            size_t n;
        } rec = {dst, src, bytes};
        if (lh_cu_record(ctx, "copy d2d", &rec, sizeof rec))
            LH_CU_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                             cs->stream));
        return LH_OK;
    }
    if (dst_dev) {
        if (cs->mode != LH_CU_EAGER) { /* inside a graph step: through the staging buffer */
            lh_status st;
            void *d = lh_cu_stage(ctx, src, bytes, &st);
            if (!d)
                return st;
            return lh_cuda_copy(ctx, dst, true, d, true, bytes);
        }
        return upload(ctx, (unsigned char *)dst, (const unsigned char *)src, bytes);
    }
    if (src_dev)
        return lh_cu_download(ctx, "lh_k_copy", dst, src, bytes);
    memcpy(dst, src, bytes);
    return LH_OK;
}

lh_status lh_cuda_memzero(lh_kctx *ctx, void *ptr, size_t bytes)
{
    struct {
        void *p;
        size_t n;
    } rec = {ptr, bytes};
    if (bytes && lh_cu_record(ctx, "memzero", &rec, sizeof rec))
        LH_CU_CHECK(ctx, cudaMemsetAsync(ptr, 0, bytes, ctx->cuda->stream));
    return LH_OK;
}
