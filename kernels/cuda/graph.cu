/* CUDA graphs for repeated steps (lh_kernels.h, "CUDA graphs").
 *
 * Capture records what one step's kernel calls queue; replay must then feed it the next
 * step's host inputs. Those inputs reach the device only through the staging buffer
 * (cuda_rt.h rule 2), whose copies are part of the graph: a dry run of the same calls writes
 * the new inputs into the pinned buffer at the same offsets (offsets depend only on the
 * sizes staged), and the graph's copy nodes carry them over at replay. The dry run also
 * hashes every launch (kernel, configuration, argument bytes), staging offset and library
 * call, so a step that would queue anything different from the recording is detected and
 * captured afresh instead of replaying the wrong work. */
#include "cuda_state.h"

#include <stdlib.h>

struct lh_k_graph {
    cudaGraphExec_t exec; /* NULL until captured */
    uint64_t hash, gen;
    int dev;
    int64_t captures, replays;
};

lh_status lh_cuda_graph_create(lh_kctx *ctx, lh_k_graph **out)
{
    lh_k_graph *g = (lh_k_graph *)calloc(1, sizeof *g);
    if (!g)
        return lh_kerr(ctx, LH_E_NOMEM, "lh_k_graph_create: out of memory");
    g->dev = ctx->cuda->dev;
    *out = g;
    return LH_OK;
}

static void drop(lh_k_graph *g)
{
    if (g->exec)
        (void)cudaGraphExecDestroy(g->exec);
    g->exec = NULL;
}

lh_status lh_cuda_graph_begin(lh_kctx *ctx, lh_k_graph *g)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (cs->mode != LH_CU_EAGER)
        return lh_kerr(ctx, LH_E_USAGE, "lh_k_graph_begin: a graph step is already open on this "
                       "context");
    if (g->dev != cs->dev)
        return lh_kerr(ctx, LH_E_USAGE, "lh_k_graph_begin: the graph belongs to cuda:%d, the "
                       "context to cuda:%d", g->dev, cs->dev);
    /* the previous replay's copies read the pinned buffer that this step overwrites */
    LH_CU_CHECK(ctx, cudaStreamSynchronize(cs->stream));
    cs->stage_off = 0;
    /* A step that outgrew the staging buffer (which makes it repeat) starts from offset 0
     * again: give it room for everything it stages, or the repeat outgrows the buffer too. */
    lh_status st = lh_cu_stage_reserve(ctx, cs->stage_need);
    if (st != LH_OK)
        return st;
    cs->step_staged = 0;
    cs->hash = LH_CU_FNV_SEED;
    cs->invalid = false;
    if (g->exec && g->gen == cs->gen) {
        cs->mode = LH_CU_DRYRUN;
        return LH_OK;
    }
    drop(g);
    /* relaxed: allocations a step makes while growing its buffers are legal during capture (the
     * recording is then thrown away and redone, see retire() in cuda_ctx.cu) */
    LH_CU_CHECK(ctx, cudaStreamBeginCapture(cs->stream, cudaStreamCaptureModeRelaxed));
    cs->mode = LH_CU_CAPTURE;
    return LH_OK;
}

lh_status lh_cuda_graph_end(lh_kctx *ctx, lh_k_graph *g, bool *rerun)
{
    struct lh_cuda_state *cs = ctx->cuda;
    *rerun = false;
    const lh_cu_mode mode = cs->mode;
    if (mode == LH_CU_EAGER)
        return lh_kerr(ctx, LH_E_USAGE, "lh_k_graph_end: no graph step is open (call "
                       "lh_k_graph_begin first)");
    cs->mode = LH_CU_EAGER;
    if (mode == LH_CU_DRYRUN) {
        if (cs->invalid || cs->hash != g->hash || cs->gen != g->gen) {
            drop(g); /* nothing was executed: the caller repeats the step, which captures */
            lh_cu_free_retired(cs);
            *rerun = true;
            return LH_OK;
        }
        LH_CU_CHECK(ctx, cudaGraphLaunch(g->exec, cs->stream));
        g->replays++;
        return LH_OK;
    }
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(cs->stream, &graph);
    lh_cu_free_retired(cs);
    if (e != cudaSuccess) {
        if (graph)
            (void)cudaGraphDestroy(graph);
        return lh_cu_fail(ctx, e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    if (cs->invalid) { /* buffers moved while recording: record again */
        (void)cudaGraphDestroy(graph);
        *rerun = true;
        return LH_OK;
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        g->exec = NULL;
        return lh_cu_fail(ctx, e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    g->hash = cs->hash;
    g->gen = cs->gen;
    g->captures++;
    /* capturing executed nothing: this launch runs the step */
    LH_CU_CHECK(ctx, cudaGraphLaunch(g->exec, cs->stream));
    return LH_OK;
}

void lh_cuda_graph_abort(lh_kctx *ctx, lh_k_graph *g)
{
    struct lh_cuda_state *cs = ctx->cuda;
    if (cs->mode == LH_CU_CAPTURE) {
        cudaGraph_t graph = NULL;
        if (cudaStreamEndCapture(cs->stream, &graph) == cudaSuccess && graph)
            (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        drop(g);
    }
    cs->mode = LH_CU_EAGER;
    lh_cu_free_retired(cs);
}

void lh_cuda_graph_counts(const lh_k_graph *g, int64_t *captures, int64_t *replays)
{
    if (captures)
        *captures = g ? g->captures : 0;
    if (replays)
        *replays = g ? g->replays : 0;
}

void lh_cuda_graph_free(lh_k_graph *g)
{
    if (!g)
        return;
    drop(g);
    free(g);
}
