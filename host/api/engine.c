/* The public inference API (llmhost.h, "inference"): an engine is one resolved, built and
 * weight-bound model with its kernel context and attention backend. */
#include "llmhost.h"

#include "api/attn_select.h"
#include "api/host_api_table.h"
#include "api/host_internal.h"
#include "config/generation_config.h"
#include "core/err.h"
#include "core/log.h"
#include "model/model.h"
#include "resolve/resolve.h"
#include "runtime/device.h"
#include "runtime/runner.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "weights/checkpoint.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* lh_engine_cancel is documented as callable from a signal handler */
_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "lh_engine_cancel needs a lock-free atomic_bool");

/* weight_placement: auto resolves to this; chosen by tools/bench/bench_inference (docs/benchmarks.md) */
#define LH_AUTO_PLACEMENT LH_PLACE_MMAP

struct lh_engine {
    lh_host *host;
    lh_run_config rc;
    lh_model_config *cfg;
    lh_resolution res;
    lh_model *model;
    lh_kctx *kctx;
    lh_device device; /* where the model runs (lh_run_resolve_device) */
    lh_runner *run; /* the model's forward pass on the engine's device */
    lh_generate_stats last; /* the last generate call's timings (lh_engine_last_stats) */
    lh_generation_config gen; /* generation_config.json (lh_engine_generation_defaults) */
    /* lh_engine_cancel's request to the generate call in progress (cleared when one starts) */
    atomic_bool cancel;
    char *explain; /* lh_engine_explain_json's JSON, built once at open */
};

void lh_engine_close(lh_engine *e)
{
    if (!e)
        return;
    lh_runner_free(e->run);
    lh_k_ctx_free(e->kctx);
    lh_model_free(e->model);
    lh_resolution_free(&e->res);
    lh_model_config_free(e->cfg);
    lh_run_config_free(&e->rc);
    lh_generation_config_free(&e->gen);
    free(e->explain);
    free(e);
}

#define GIB (1024.0 * 1024.0 * 1024.0)

/* The kernel context on the resolved device. A CUDA context queues work on its stream, so
 * the thread count means nothing there: 1. */
static lh_status create_kctx(lh_engine *e, int n_threads, lh_err *err)
{
    const bool cuda = e->device.kind == LH_DEVICE_CUDA;
    e->kctx = lh_k_ctx_create(cuda ? 1 : n_threads, e->device);
    if (e->kctx)
        return LH_OK;
    /* the kernel library says why (thread limit, LLMHOST_KERNELS_ISA, the CUDA driver);
     * silence means OOM */
    const char *why = lh_k_last_error(NULL);
    if (cuda)
        return lh_err_set(err, why[0] ? LH_E_UNSUPPORTED : LH_E_NOMEM,
                          "cannot create the kernel context on cuda:%d: %s", e->device.index,
                          why[0] ? why : "out of memory");
    return lh_err_set(err, why[0] ? LH_E_USAGE : LH_E_NOMEM,
                      "cannot create the kernel context (%d threads): %s", n_threads,
                      why[0] ? why : "out of memory");
}

/* lh_engine_explain_json's text: explain's keys for what this engine resolved, built and
 * chose, plus what only an open engine knows (its threads, ISA, the runner's sizes). */
static lh_status build_explain(lh_engine *e, json_t *attn_trace, lh_err *err)
{
    json_t *j = NULL;
    lh_status st = lh_explain_object(e->host, &e->res, e->cfg, &e->rc, attn_trace, e->model, &j,
                                     err);
    if (st != LH_OK)
        return st;
    char dev[32];
    json_t *eng = json_pack("{s:s,s:i,s:I,s:I,s:I}", "device", lh_device_str(e->device, dev,
                            sizeof dev), "threads", lh_k_ctx_threads(e->kctx), "vocab_size",
                            (json_int_t)lh_runner_vocab(e->run), "max_seq_len", (json_int_t)lh_runner_max_seq_len(e->run),
                            "max_batch_size", (json_int_t)lh_runner_max_seqs(e->run));
    if (eng && e->device.kind == LH_DEVICE_CPU)
        json_object_set_new(eng, "isa", json_string(lh_k_isa_name(lh_k_ctx_isa(e->kctx))));
    /* what binding took (mapped + owned): equal to the plan's weight_bytes, quantized or not */
    lh_bind_stats bs;
    if (eng && lh_model_bind_stats(e->model, &bs))
        json_object_set_new(eng, "weight_bytes_bound",
                            json_integer((json_int_t)(bs.mapped_bytes + bs.owned_bytes)));
    if (!eng || json_object_set_new(j, "engine", eng) != 0) {
        json_decref(j);
        return lh_err_set(err, LH_E_NOMEM, "out of memory for the explain JSON");
    }
    e->explain = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    return e->explain ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory for the explain JSON");
}

/* Every decision that follows from the chosen backend and the model's attention layers
 * (attn_select.c); the run's knobs that this runtime does not implement are refused here, by
 * name. Frees *choice. */
static lh_status attention_setup(const lh_run_config *rc, const lh_model_config *cfg,
                                 const lh_model *m, lh_attn_choice *choice_in,
                                 lh_attn_runtime *out, lh_kv_plan *plan, int64_t *max_seq_len,
                                 json_t **trace, lh_err *err)
{
    lh_model_geometry geo;
    lh_model_run_geometry(m, &cfg->geo, &geo);
    lh_status st = lh_attention_decide(rc, cfg, &geo, choice_in, err);
    if (st != LH_OK) {
        lh_attn_choice_free(choice_in);
        return st;
    }
    lh_attn_choice choice = *choice_in;
    *choice_in = (lh_attn_choice){0};
    const lh_reg_entry *entry = choice.entry;
    const lh_attn_backend_provider *p = &entry->p.attn;
    *out = (lh_attn_runtime){.caps = choice.caps, .fused_rope = choice.fused_rope,
                             .sparse_top_k = choice.sparse_top_k,
                             .sparse_local_blocks = choice.sparse_local_blocks,
                             .kv = &rc->kv_cache};
    *max_seq_len = choice.max_seq_len;
    if (choice.has_kv_plan) { /* allocate what explain showed, not a second measurement */
        *plan = choice.kv_plan;
        out->kv_plan = plan;
    }
    *trace = json_incref(choice.trace); /* for lh_engine_explain_json */
    lh_attn_choice_free(&choice);
    if (p->struct_size < offsetof(lh_attn_backend_provider, ops) + sizeof p->ops || !p->ops ||
        !p->ops->create || !p->ops->forward || !p->ops->destroy)
        return lh_err_set(err, LH_E_UNSUPPORTED, "attention backend '%s' (%s) has no forward "
                          "implementation", entry->name, entry->module->path);
    out->ops = p->ops;
    out->provider = p;
    if (rc->beam_width > 1)
        return lh_err_set(err, LH_E_UNSUPPORTED, "beam_width=%lld: beam search is not "
                          "implemented by this runtime (greedy decoding only)",
                          (long long)rc->beam_width);
    if (rc->speculative.mode)
        return lh_err_set(err, LH_E_UNSUPPORTED, "speculative.mode=%s: speculative decoding is "
                          "not implemented by this runtime", rc->speculative.mode);
    return LH_OK;
}

lh_status lh_engine_open(lh_host *h, const lh_engine_options *o, lh_engine **out, lh_err *err)
{
    *out = NULL;
    lh_err_clear(err);
    if (!h || !o || !o->model)
        return lh_err_set(err, LH_E_USAGE, "lh_engine_open: host, options and model are required");
    /* callers built before config_text was appended pass a smaller struct: no text */
    const size_t min_size = offsetof(lh_engine_options, attn_backend) + sizeof o->attn_backend;
    if (o->struct_size < min_size)
        return lh_err_set(err, LH_E_USAGE, "lh_engine_open: options.struct_size %u is smaller "
                          "than %zu (the fields up to attn_backend); set it to "
                          "sizeof(lh_engine_options)", o->struct_size, min_size);
    const char *config_text =
        o->struct_size >= offsetof(lh_engine_options, config_text) + sizeof o->config_text
            ? o->config_text : NULL;
    lh_engine *e = calloc(1, sizeof *e);
    if (!e)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    e->host = h;
    atomic_init(&e->cancel, false);
    lh_resolve_request req = {.struct_size = sizeof req, .model = o->model,
                              .config_file = o->config_file, .overrides = o->overrides,
                              .config_text = config_text};
    lh_status st = lh_prepare_request(h, &req, &e->rc, &e->cfg, err);
    if (st == LH_OK && o->attn_backend) {
        char kv[256];
        snprintf(kv, sizeof kv, "attn_backend=%s", o->attn_backend);
        st = lh_run_config_set(&e->rc, kv, err);
    }
    /* the device before any weight: a CUDA device that is not there fails here, saying why */
    char device_why[256] = "";
    if (st == LH_OK)
        st = lh_run_resolve_device(&e->rc, &e->device, device_why, sizeof device_why, err);
    /* the backend first: an unknown name fails before any plugin loads; the decisions that
     * need the model's attention geometry wait for its tree (attention_setup) */
    lh_attn_runtime attn = {0};
    lh_kv_plan kv_plan;
    int64_t max_seq = 0;
    json_t *attn_trace = NULL;
    lh_attn_choice choice = {0};
    if (st == LH_OK)
        st = lh_select_attention_backend(&h->reg, &e->rc, &choice, err);
    if (st == LH_OK)
        st = lh_resolve(&h->reg, e->cfg, &e->rc, &e->res, err);
    if (st == LH_OK && e->res.kind != LH_KIND_MODEL)
        st = lh_err_set(err, LH_E_UNSUPPORTED, "%s resolves to a %s; only causal LMs generate",
                        e->cfg->path, lh_kind_name(e->res.kind));
    /* a malformed generation_config.json fails here, before any weight; a GGUF file carries
     * its token ids in its metadata (the config its plugin wrote has them) */
    if (st == LH_OK && !e->cfg->gguf)
        st = lh_generation_config_load(e->cfg->dir, &e->gen, err);
    if (st == LH_OK && !e->gen.present) /* transformers: from the model config (its eos ids) */
        st = lh_generation_config_from_model(e->cfg->root, e->cfg->path, &e->gen, err);
    lh_checkpoint *ck = NULL;
    if (st == LH_OK)
        st = lh_build_for_source(&e->res, e->cfg, &e->rc, &e->model, &ck, err);
    if (st == LH_OK)
        st = attention_setup(&e->rc, e->cfg, e->model, &choice, &attn, &kv_plan, &max_seq,
                             &attn_trace, err);
    lh_attn_choice_free(&choice);
    if (st == LH_OK && !ck)
        st = lh_checkpoint_open(e->cfg->dir, &ck, err);
    if (st == LH_OK) {
        st = lh_model_bind_weights(e->model, ck, err); /* the model owns ck from here on */
        ck = NULL;
    }
    lh_checkpoint_close(ck); /* a GGUF checkpoint when a step before binding failed */
    lh_weight_placement place = e->rc.weight_placement == LH_PLACE_AUTO ? LH_AUTO_PLACEMENT
                                                                      : e->rc.weight_placement;
    /* host placement matters only where the kernels read host memory: a CUDA run uploads the
     * weights from the file mapping */
    if (st == LH_OK && place == LH_PLACE_HUGE_PAGES && e->device.kind == LH_DEVICE_CPU)
        st = lh_model_place_weights_huge(e->model, err);
    else if (st == LH_OK && place == LH_PLACE_HUGE_PAGES)
        lh_log(LH_LOG_INFO, "weight_placement=huge_pages: not applied on cuda:%d (the weights "
               "are uploaded to device memory)", e->device.index);
    if (st == LH_OK)
        st = create_kctx(e, o->n_threads, err);
    if (st == LH_OK)
        st = lh_k_ctx_set_quant_matmul(e->kctx, e->rc.quantized_matmul == LH_QMM_EXACT
                                                    ? LH_K_QMM_EXACT : LH_K_QMM_INT8);
    if (st == LH_OK)
        st = lh_k_ctx_set_bf16_matmul(e->kctx, e->rc.bf16_matmul == LH_BF16MM_EXACT
                                                   ? LH_K_BF16MM_EXACT : LH_K_BF16MM_TILES);
    if (st == LH_OK) {
        attn.cuda_graphs = e->rc.cuda_graphs;
        st = lh_runner_create(e->model, &e->res.entry->p.model, e->cfg, &attn, max_seq,
                              e->rc.max_batch_size, e->kctx, &e->run, err);
    }
    if (st == LH_OK)
        st = build_explain(e, attn_trace, err);
    json_decref(attn_trace);
    if (st != LH_OK) {
        lh_err_prefix(err, "opening %s", o->model);
        lh_engine_close(e);
        return st;
    }
    if (e->device.kind == LH_DEVICE_CUDA) {
        lh_k_device_info info = {0};
        if (lh_k_cuda_device_info(e->device.index, &info) != LH_OK)
            snprintf(info.name, sizeof info.name, "unknown");
        lh_k_mem_stats ms = {0};
        lh_k_mem_stats_get(e->kctx, &ms);
        lh_log(LH_LOG_INFO, "engine: %s via %s on cuda:%d (%s); weights %.2f GiB, device "
               "memory %.2f GiB in use, %.2f GiB free; cuda graphs %s; device: %s",
               e->res.resolved, e->res.entry->module->path, e->device.index, info.name,
               (double)lh_runner_weight_bytes(e->run) / GIB, (double)ms.in_use / GIB,
               (double)ms.device_free / GIB, lh_runner_graphs(e->run) ? "on" : "off",
               device_why[0] ? device_why : "asked for");
    } else {
        lh_log(LH_LOG_INFO, "engine: %s via %s on cpu, %d threads (%s kernels); device: %s",
               e->res.resolved, e->res.entry->module->path, lh_k_ctx_threads(e->kctx),
               lh_k_isa_name(lh_k_ctx_isa(e->kctx)), device_why[0] ? device_why : "asked for");
    }
    *out = e;
    return LH_OK;
}

int64_t lh_engine_vocab_size(const lh_engine *e)
{
    return e ? lh_runner_vocab(e->run) : 0;
}

int64_t lh_engine_max_seq_len(const lh_engine *e)
{
    return e ? lh_runner_max_seq_len(e->run) : 0;
}

int64_t lh_engine_max_batch_size(const lh_engine *e)
{
    return e ? lh_runner_max_seqs(e->run) : 0;
}

lh_status lh_engine_logits(lh_engine *e, const int32_t *tokens, int64_t n, float *out,
                           lh_err *err)
{
    lh_err_clear(err);
    if (!e || !tokens || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_engine_logits: NULL argument");
    return lh_sequence_logits(e->run, e->kctx, tokens, n, out, err);
}

/* What one generate call did with CUDA graphs (counts since c0 / r0), for --verbose runs. */
static void log_graph_counts(const lh_engine *e, int64_t c0, int64_t r0)
{
    if (!lh_runner_graphs(e->run))
        return;
    int64_t c, r;
    lh_runner_graph_counts(e->run, &c, &r);
    lh_log(LH_LOG_INFO, "cuda graphs: %lld capture%s, %lld replay%s", (long long)(c - c0),
           c - c0 == 1 ? "" : "s", (long long)(r - r0), r - r0 == 1 ? "" : "s");
}

void lh_engine_graph_counts(const lh_engine *e, int64_t *captures, int64_t *replays)
{
    lh_runner_graph_counts(e ? e->run : NULL, captures, replays);
}

lh_device lh_engine_device(const lh_engine *e)
{
    return e ? e->device : (lh_device){LH_DEVICE_CPU, 0};
}

lh_status lh_engine_generate_greedy(lh_engine *e, const int32_t *const *prompts,
                                    const int64_t *lens, int64_t n_seqs, int64_t max_new,
                                    int32_t *out, lh_err *err)
{
    lh_err_clear(err);
    if (e)
        e->last = (lh_generate_stats){0};
    if (!e || !prompts || !lens || (!out && max_new > 0))
        return lh_err_set(err, LH_E_USAGE, "lh_engine_generate_greedy: NULL argument");
    int64_t c0, r0;
    lh_runner_graph_counts(e->run, &c0, &r0);
    lh_status st = lh_generate_greedy(e->run, e->kctx, prompts, lens, n_seqs, max_new, out,
                                      &e->last, err);
    log_graph_counts(e, c0, r0);
    return st;
}

lh_status lh_engine_generation_defaults(const lh_engine *e, lh_generate_params *out,
                                        lh_err *err)
{
    lh_err_clear(err);
    if (!e || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_engine_generation_defaults: %s is NULL",
                          e ? "out" : "engine");
    /* a struct that ends before the appended callback fields (an older caller) is filled up
     * to its size */
    const size_t min_size = offsetof(lh_generate_params, on_step);
    if (out->struct_size < min_size)
        return lh_err_set(err, LH_E_USAGE, "lh_engine_generation_defaults: out.struct_size %u "
                          "is smaller than %zu; set it to sizeof(lh_generate_params)",
                          out->struct_size, min_size);
    const lh_generation_config *g = &e->gen;
    lh_generate_params p = {.struct_size = out->struct_size, .do_sample = g->do_sample,
                            .temperature = g->temperature, .top_k = g->top_k, .top_p = g->top_p,
                            .min_p = g->min_p, .repetition_penalty = g->repetition_penalty,
                            .seed = 0, .max_new_tokens = 32, .stop_ids = g->eos_ids,
                            .n_stop_ids = g->n_eos, .seq_streams = NULL};
    /* this library's fields only (on_step NULL), and none beyond the caller's struct */
    memcpy(out, &p, out->struct_size < sizeof p ? out->struct_size : sizeof p);
    return LH_OK;
}

lh_status lh_engine_generate(lh_engine *e, const lh_generate_params *params,
                             const int32_t *const *prompts, const int64_t *lens, int64_t n_seqs,
                             int32_t *out, int64_t *out_lens, lh_stop_reason *stop, lh_err *err)
{
    lh_err_clear(err);
    if (e) { /* a cancel belongs to the call in progress: one made before this call is void */
        atomic_store_explicit(&e->cancel, false, memory_order_release);
        e->last = (lh_generate_stats){0};
    }
    if (!e || !params || !prompts || !lens || !out_lens ||
        (!out && (params->struct_size < sizeof *params || params->max_new_tokens > 0)))
        return lh_err_set(err, LH_E_USAGE, "lh_engine_generate: NULL argument");
    int64_t c0, r0;
    lh_runner_graph_counts(e->run, &c0, &r0);
    lh_status st = lh_generate_cancellable(e->run, e->kctx, params, prompts, lens, n_seqs, out,
                                           out_lens, stop, &e->last, &e->cancel, err);
    log_graph_counts(e, c0, r0);
    return st;
}

lh_status lh_scheduler_create(lh_engine *e, const lh_scheduler_options *options,
                              lh_scheduler **out, lh_err *err)
{
    lh_err_clear(err);
    if (out)
        *out = NULL;
    if (!e || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_scheduler_create: NULL engine or out");
    if (options && options->struct_size < sizeof *options)
        return lh_err_set(err, LH_E_USAGE, "lh_scheduler_create: options.struct_size %u is "
                          "smaller than %zu", options->struct_size, sizeof *options);
    return lh_scheduler_create_on(e->run, e->kctx, options ? options->max_num_batched_tokens : 0,
                                  options ? options->prefix_caching : 0, out, err);
}

void lh_engine_cancel(lh_engine *e)
{
    if (e)
        atomic_store_explicit(&e->cancel, true, memory_order_release);
}

lh_status lh_engine_explain_json(const lh_engine *e, char **json_out, lh_err *err)
{
    lh_err_clear(err);
    if (!e || !json_out) {
        if (json_out)
            *json_out = NULL;
        return lh_err_set(err, LH_E_USAGE, "lh_engine_explain_json: %s is NULL",
                          e ? "json_out" : "engine");
    }
    *json_out = strdup(e->explain);
    return *json_out ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory");
}

lh_status lh_engine_last_stats(const lh_engine *e, lh_generate_stats *out, lh_err *err)
{
    lh_err_clear(err);
    if (!e || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_engine_last_stats: %s is NULL",
                          e ? "out" : "engine");
    if (out->struct_size < sizeof *out)
        return lh_err_set(err, LH_E_USAGE, "lh_engine_last_stats: out.struct_size %u is smaller "
                          "than this library's %zu; set it to sizeof(lh_generate_stats)",
                          out->struct_size, sizeof *out);
    /* this library's fields only: a larger struct's tail is the caller's */
    const uint32_t keep = out->struct_size;
    memcpy(out, &e->last, sizeof *out);
    out->struct_size = keep;
    return LH_OK;
}

lh_runner *lh_engine_runner(lh_engine *e)
{
    return e ? e->run : NULL;
}

lh_kctx *lh_engine_kctx(lh_engine *e)
{
    return e ? e->kctx : NULL;
}
