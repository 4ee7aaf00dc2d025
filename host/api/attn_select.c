#include "attn_select.h"
#include "weights/gguf.h"

#include "api/attn_needs.h"

#include "core/err.h"
#include "core/log.h"
#include "core/strutil.h"
#include "runtime/device.h"
#include "runtime/kv_cache.h"

#include "lh_kernels.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

const lh_attn_cap_name lh_attn_cap_names[LH_ATTN_N_CAPS] = {
    {LH_ATTN_CAP_FUSED_ROPE, "fused_rope"},   {LH_ATTN_CAP_FUSED_QKV, "fused_qkv"},
    {LH_ATTN_CAP_MLA, "mla"},                 {LH_ATTN_CAP_FP8_KV, "fp8_kv"},
    {LH_ATTN_CAP_FP4_KV, "fp4_kv"},           {LH_ATTN_CAP_CHUNKED, "chunked"},
    {LH_ATTN_CAP_SPARSE, "sparse"},           {LH_ATTN_CAP_SLIDING_WINDOW, "sliding_window"},
    {LH_ATTN_CAP_MIXED_KV, "mixed_kv"},       {LH_ATTN_CAP_PAGED_KV, "paged_kv"},
    {LH_ATTN_CAP_SOFTCAP, "softcap"},
};
#define cap_names lh_attn_cap_names

const char *lh_attn_caps_str(uint64_t caps, char *buf, size_t n)
{
    const char *names[sizeof cap_names / sizeof *cap_names];
    size_t k = 0;
    for (size_t i = 0; i < sizeof cap_names / sizeof *cap_names; i++)
        if (caps & cap_names[i].bit)
            names[k++] = cap_names[i].name;
    if (!k)
        snprintf(buf, n, "none");
    else
        lh_join_names(buf, n, names, k);
    return buf;
}

void lh_attn_choice_free(lh_attn_choice *c)
{
    if (c) {
        json_decref(c->trace);
        memset(c, 0, sizeof *c);
    }
}

/* ---- the device ----------------------------------------------------------------------- */

/* The ISA the CPU kernels use: only a context knows it (cpuid, LLMHOST_KERNELS_ISA), so one
 * is made with a single thread and freed. */
static void cpu_isa_json(json_t *o)
{
    lh_kctx *ctx = lh_k_ctx_create(1, (lh_device){LH_DEVICE_CPU, 0});
    if (ctx) {
        json_object_set_new(o, "isa", json_string(lh_k_isa_name(lh_k_ctx_isa(ctx))));
        lh_k_ctx_free(ctx);
        return;
    }
    const char *why = lh_k_last_error(NULL);
    json_object_set_new(o, "isa", json_null());
    json_object_set_new(o, "isa_error", json_string(why && *why ? why : "out of memory"));
}

/* A fixed-size text from the kernel library as a JSON string: cut at its end even when the
 * library filled every byte, and printable ASCII only (jansson refuses invalid UTF-8). */
static json_t *fixed_str(const char *src, size_t cap)
{
    char buf[256];
    size_t n = 0;
    for (; n < cap && n + 1 < sizeof buf && src[n]; n++)
        buf[n] = src[n] >= 0x20 && src[n] < 0x7f ? src[n] : '?';
    buf[n] = '\0';
    return json_string(buf);
}

static json_t *cuda_info_json(int index, const lh_k_device_info *in)
{
    char cc[32];
    snprintf(cc, sizeof cc, "%d.%d", in->cc_major, in->cc_minor);
    json_t *o = json_pack("{s:i,s:o,s:s,s:i,s:I,s:I,s:f,s:o}", "index", index, "name",
                          fixed_str(in->name, sizeof in->name), "compute_capability", cc,
                          "sm_count", in->sm_count, "total_bytes", (json_int_t)in->total_bytes,
                          "free_bytes", (json_int_t)in->free_bytes, "bandwidth_gbs",
                          isfinite(in->bandwidth_gbs) ? in->bandwidth_gbs : 0.0, "kernels",
                          fixed_str(in->kernels, sizeof in->kernels));
    return o;
}

json_t *lh_devices_json(void)
{
    json_t *cpu = json_object();
    if (cpu)
        cpu_isa_json(cpu);
    const int n = lh_k_cuda_device_count();
    json_t *devs = json_array();
    for (int i = 0; devs && i < n; i++) {
        lh_k_device_info info;
        memset(&info, 0, sizeof info);
        if (lh_k_cuda_device_info(i, &info) == LH_OK)
            json_array_append_new(devs, cuda_info_json(i, &info));
        else
            json_array_append_new(devs, json_pack("{s:i,s:s}", "index", i, "error",
                                                  lh_k_last_error(NULL)));
    }
    const char *why = lh_k_cuda_unavailable_reason();
    json_t *cuda = json_pack("{s:b,s:i,s:o,s:o}", "built", lh_k_cuda_built(), "device_count", n,
                             "unavailable", n > 0 ? json_null() : json_string(why ? why : ""),
                             "devices", devs);
    return json_pack("{s:o,s:o}", "cpu", cpu, "cuda", cuda);
}

/* lh_run_resolve_device, once, with what explain shows of the result. Runs before any plugin
 * loads, so a CUDA device that is not there costs nothing. */
static lh_status decide_device(const lh_run_config *rc, lh_attn_choice *out, lh_err *err)
{
    char why[1200], req[48], res[48], origin[1024], gorigin[1024];
    lh_status st = lh_run_resolve_device(rc, &out->device, why, sizeof why, err);
    if (st != LH_OK)
        return st;
    const bool cuda = out->device.kind == LH_DEVICE_CUDA;
    lh_value_origin_str(rc, rc->device_origin, origin, sizeof origin);
    json_t *d = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s}", "requested",
                          lh_run_device_str(rc, req, sizeof req), "origin", origin, "resolved",
                          lh_device_str(out->device, res, sizeof res), "kind",
                          cuda ? "cuda" : "cpu", "index", out->device.index, "reason", why);
    if (!d)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    /* CUDA was probed (auto or cuda asked, by the run config or LLMHOST_DEVICE); an explicit
     * cpu leaves the driver alone, and so does explain's report of it */
    if (cuda || lh_k_cuda_load_state(NULL) != LH_K_CUDA_NOT_TRIED) {
        const int n_cuda = lh_k_cuda_device_count();
        const char *unavailable = lh_k_cuda_unavailable_reason();
        json_object_set_new(d, "cuda_device_count", json_integer(n_cuda));
        json_object_set_new(d, "cuda_unavailable", n_cuda > 0 ? json_null()
                                                   : json_string(unavailable ? unavailable : ""));
    }
    if (cuda) {
        lh_k_device_info info;
        memset(&info, 0, sizeof info);
        if (lh_k_cuda_device_info(out->device.index, &info) != LH_OK) {
            json_decref(d);
            return lh_err_set(err, LH_E_UNSUPPORTED, "device %s (%s): %s", res, why,
                              lh_k_last_error(NULL));
        }
        json_t *ci = cuda_info_json(out->device.index, &info);
        json_object_update(d, ci);
        json_decref(ci);
    } else {
        cpu_isa_json(d);
    }
    lh_value_origin_str(rc, rc->cuda_graphs_origin, gorigin, sizeof gorigin);
    out->cuda_graphs = cuda && rc->cuda_graphs;
    char reason[1200];
    if (!cuda)
        snprintf(reason, sizeof reason, "off (device cpu)");
    else if (!rc->cuda_graphs)
        snprintf(reason, sizeof reason, "off: not requested (cuda_graphs: false, from %s); "
                 "every kernel of a decode step is launched on its own", gorigin);
    else
        snprintf(reason, sizeof reason, "on (cuda_graphs: true, from %s): a decode step is "
                 "captured once per shape and replayed as one CUDA graph", gorigin);
    json_object_set_new(d, "cuda_graphs",
                        json_pack("{s:b,s:s,s:b,s:s}", "requested", rc->cuda_graphs, "origin",
                                  gorigin, "on", out->cuda_graphs, "reason", reason));
    json_object_set_new(out->trace, "device", d);
    return LH_OK;
}

/* the run config's spelling (float32, bfloat16, float16, fp8_e4m3) */
static const char *kv_dtype_str(lh_dtype dt)
{
    return dt == LH_DTYPE_FP8_E4M3 ? "fp8_e4m3" : lh_dtype_name(dt);
}

/* RoPE fusion: on only if requested, the backend can, and the cache keeps every position
 * where RoPE put it (no KV compression that changes the physical cache length — none of the
 * KV settings this runtime has does). Each refusal is logged once with its reason. */
static void decide_rope(const lh_run_config *rc, lh_attn_choice *out)
{
    char origin[256];
    lh_value_origin_str(rc, rc->fused_rope_origin, origin, sizeof origin);
    const bool requested = rc->fused_rope, supported = (out->caps & LH_ATTN_CAP_FUSED_ROPE) != 0;
    const bool length_kept = true;
    char reason[512];
    if (!requested)
        snprintf(reason, sizeof reason, "off: not requested (fused_rope: false, from %s); the "
                 "runtime rotates q and k before attention", origin);
    else if (!supported)
        snprintf(reason, sizeof reason, "off: requested (fused_rope: true, from %s) but backend "
                 "'%s' has no fused_rope capability; the runtime rotates q and k before "
                 "attention", origin, out->entry->name);
    else
        snprintf(reason, sizeof reason, "on: requested (fused_rope: true, from %s), backend '%s' "
                 "supports it, and the KV cache keeps every position (no KV compression), so "
                 "keys are rotated as they are written and queries inside the attention kernel",
                 origin, out->entry->name);
    out->fused_rope = requested && supported && length_kept;
    if (!out->fused_rope) {
        char key[96];
        snprintf(key, sizeof key, "rope-fusion-off:%s:%d", out->entry->name, (int)requested);
        lh_log_once(key, LH_LOG_INFO, "RoPE fusion %s", reason);
    }
    json_object_set_new(out->trace, "rope_fusion",
                        json_pack("{s:b,s:s,s:b,s:b,s:b,s:s}", "requested", requested, "origin",
                                  origin, "backend_supports", supported,
                                  "cache_length_preserved", length_kept, "fused", out->fused_rope,
                                  "reason", reason));
}

static void decide_chunked(const lh_model_config *cfg, const lh_model_geometry *geo,
                           lh_attn_choice *out)
{
    const int64_t c = geo->attention_chunk_size;
    char reason[400];
    if (c > 0)
        snprintf(reason, sizeof reason, "on: attention_chunk_size=%lld in %s; a query attends "
                 "only to keys of its own chunk of %lld positions (backend '%s' supports it)",
                 (long long)c, cfg->path, (long long)c, out->entry->name);
    else
        snprintf(reason, sizeof reason, "off: the model sets no attention_chunk_size; attention "
                 "spans the whole context%s", geo->sliding_window > 0 ? " (within the "
                 "sliding window)" : "");
    json_object_set_new(out->trace, "chunked_attention",
                        json_pack("{s:b,s:I,s:s}", "chunked", c > 0, "chunk_size", (json_int_t)c,
                                  "reason", reason));
}

static void decide_sparse(const lh_run_config *rc, lh_attn_choice *out)
{
    if (!rc->sparse.enabled) {
        json_object_set_new(out->trace, "sparse_attention",
                            json_pack("{s:b,s:s}", "sparse", 0, "reason",
                                      "off: no sparse_attention in the run config; dense"));
        return;
    }
    char origin[256], reason[640];
    lh_value_origin_str(rc, rc->sparse.origin, origin, sizeof origin);
    out->sparse_top_k = rc->sparse.top_k;
    out->sparse_local_blocks = rc->sparse.local_blocks;
    snprintf(reason, sizeof reason, "on (from %s): each query attends to its %lld most recent "
             "KV blocks plus the %lld highest-scoring others (topk_blocks; equals dense when "
             "they cover every block)", origin, (long long)rc->sparse.local_blocks,
             (long long)rc->sparse.top_k);
    json_object_set_new(out->trace, "sparse_attention",
                        json_pack("{s:b,s:s,s:I,s:I,s:s}", "sparse", 1, "algorithm",
                                  "topk_blocks", "top_k", (json_int_t)rc->sparse.top_k,
                                  "local_blocks", (json_int_t)rc->sparse.local_blocks, "reason",
                                  reason));
}

/* The bytes of the checkpoint's *.safetensors files in dir (the weights a device run uploads as
 * stored); 0 when none can be read. */
static uint64_t checkpoint_bytes(const char *dir)
{
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d)
        return 0;
    uint64_t total = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        const size_t n = strlen(e->d_name);
        struct stat st;
        if (n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0 &&
            (size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path &&
            stat(path, &st) == 0 && S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
    }
    closedir(d);
    return total;
}

/* On a CUDA device kv_cache.memory_fraction is a share of what the device will have left once
 * the weights are uploaded: its free memory now minus the checkpoint's bytes. */
static lh_status device_budget(const lh_attn_choice *out, const lh_model_config *cfg,
                               lh_kv_mem_budget *b, lh_err *err)
{
    lh_k_device_info info;
    if (lh_k_cuda_device_info(out->device.index, &info) != LH_OK)
        return lh_err_set(err, LH_E_UNSUPPORTED, "kv_cache.memory_fraction: %s",
                          lh_k_last_error(NULL));
    const uint64_t weights = cfg->gguf ? lh_gguf_data_size(cfg->gguf) : checkpoint_bytes(cfg->dir);
    const uint64_t fr = info.free_bytes > 0 ? (uint64_t)info.free_bytes : 0;
    b->bytes = fr > weights ? fr - weights : 0;
    snprintf(b->what, sizeof b->what, "cuda:%d free memory after %.2f GiB of weights",
             out->device.index, (double)weights / 1073741824.0);
    return LH_OK;
}

/* The KV cache the run will have: the host's block pool for LH_ATTN_CAP_PAGED_KV backends
 * (lh_kv_plan_compute, once: the engine allocates exactly this plan), else the backend's own
 * contiguous f32 cache growing to max_seq_len per sequence. */
static lh_status decide_kv(const lh_run_config *rc, const lh_model_config *cfg,
                           const lh_model_geometry *g, lh_attn_choice *out, lh_err *err)
{
    const int64_t seqs = rc->max_batch_size > 0 ? rc->max_batch_size : 1;
    json_t *kv;
    if (out->caps & LH_ATTN_CAP_PAGED_KV) {
        lh_kv_plan *pl = &out->kv_plan;
        lh_kv_mem_budget budget;
        const bool on_device = out->device.kind == LH_DEVICE_CUDA &&
                               rc->kv_cache.max_tokens <= 0 && rc->kv_cache.memory_fraction > 0;
        if (on_device) {
            lh_status st = device_budget(out, cfg, &budget, err);
            if (st != LH_OK)
                return st;
        }
        /* MLA: one latent per token and layer (DESIGN 8), not per-head keys and values */
        const int64_t heads = g->has_mla ? 1 : g->num_key_value_heads;
        const int64_t dim = g->has_mla ? g->kv_lora_rank + g->qk_rope_head_dim : g->head_dim;
        lh_status st = lh_kv_plan_compute(&rc->kv_cache, g->num_hidden_layers, heads, dim,
                                          rc->sparse.enabled, g->has_mla, out->max_seq_len, seqs,
                                          on_device ? &budget : NULL, pl, err);
        if (st != LH_OK)
            return st;
        out->has_kv_plan = true;
        const lh_kv_plan plan = *pl;
        kv = json_pack("{s:s,s:b,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:s}", "manager",
                       "host block pool (paged)", "latent", plan.latent,
                       "k_dtype", kv_dtype_str(plan.k_dtype),
                       "v_dtype", kv_dtype_str(plan.v_dtype), "layout",
                       plan.layout == LH_KV_HND ? "HND" : "NHD", "block_size",
                       (json_int_t)plan.block_size, "bytes_per_token",
                       (json_int_t)plan.kv_bytes_per_token, "block_bytes",
                       (json_int_t)plan.block_bytes, "num_blocks", (json_int_t)plan.num_blocks,
                       "pool_tokens", (json_int_t)(plan.num_blocks * plan.block_size),
                       "pool_bytes", (json_int_t)plan.pool_bytes, "block_summaries",
                       plan.summaries, "sized_by", plan.sized_by);
    } else {
        /* the reference backend expands an MLA layer's keys and values per head */
        const int64_t kv_width =
            g->has_mla ? g->num_attention_heads *
                             (g->qk_nope_head_dim + g->qk_rope_head_dim + g->v_head_dim)
                       : 2 * g->num_key_value_heads * g->head_dim;
        const int64_t per_tok = g->num_hidden_layers * kv_width * (int64_t)sizeof(float);
        kv = json_pack("{s:s,s:s,s:s,s:I,s:I,s:I}", "manager",
                       "the backend's own (contiguous per sequence, grown to max_seq_len)",
                       "k_dtype", kv_dtype_str(LH_DTYPE_F32), "v_dtype",
                       kv_dtype_str(LH_DTYPE_F32), "bytes_per_token", (json_int_t)per_tok,
                       "pool_tokens", (json_int_t)(out->max_seq_len * seqs), "pool_bytes",
                       (json_int_t)(per_tok * out->max_seq_len * seqs));
    }
    json_object_set_new(out->trace, "kv_cache", kv);
    return LH_OK;
}

static lh_status decide(const lh_run_config *rc, const lh_model_config *cfg,
                        const lh_model_geometry *geo, lh_attn_choice *out, lh_err *err)
{
    out->max_seq_len = lh_run_max_seq_len(rc, geo);
    json_object_set_new(out->trace, "max_seq_len", json_integer(out->max_seq_len));
    decide_rope(rc, out);
    decide_chunked(cfg, geo, out);
    decide_sparse(rc, out);
    return decide_kv(rc, cfg, geo, out, err);
}

/* The names some index lists for attention backends, joined, and whether `name` is one. */
static bool backend_listed(lh_registry *reg, const char *name, char *list, size_t n,
                           const char **nearest)
{
    size_t n_known;
    const char **known = lh_registry_known_names(reg, LH_KIND_ATTENTION_BACKEND, &n_known);
    bool listed = false;
    for (size_t i = 0; i < n_known; i++)
        listed |= lh_kind_names_equal(LH_KIND_ATTENTION_BACKEND, known[i], name);
    if (n_known)
        lh_join_names(list, n, known, n_known);
    else
        snprintf(list, n, "(none)");
    /* the suggestion points into the registry's names, which outlive this call */
    *nearest = !listed && n_known ? lh_nearest(name, known, n_known) : NULL;
    free(known);
    return listed;
}

lh_status lh_get_attention_backend(lh_registry *reg, const char *name,
                                   const lh_sparse_config *sparse, const lh_reg_entry **out,
                                   lh_err *err)
{
    *out = NULL;
    char list[600];
    const char *near = NULL;
    if (!name || !backend_listed(reg, name, list, sizeof list, &near))
        return lh_err_set(err, LH_E_UNKNOWN_NAME,
                          "attention backend '%s' is not available%s%s%s; available: %s",
                          name ? name : "(null)", near ? "; did you mean '" : "",
                          near ? near : "", near ? "'?" : "", list);
    lh_status st = lh_registry_ensure(reg, LH_KIND_ATTENTION_BACKEND, name, out, err);
    if (st != LH_OK)
        return lh_err_prefix(err, "attention backend");
    if (sparse && sparse->enabled && !((*out)->p.attn.capabilities & LH_ATTN_CAP_SPARSE)) {
        const char *bn = (*out)->name;
        *out = NULL;
        return lh_err_set(err, LH_E_UNSUPPORTED, "attention backend '%s' has no sparse mode "
                          "(sparse_attention topk_blocks asked for); backends with the sparse "
                          "capability: see `llmhost backends`", bn);
    }
    return LH_OK;
}

static lh_status select_locked(lh_registry *reg, const lh_run_config *rc, lh_attn_choice *out,
                               lh_err *err)
{
    char origin[512];
    const char *requested = rc->attn_backend ? rc->attn_backend : LH_DEFAULT_ATTN_BACKEND;
    lh_value_origin_str(rc, rc->attn_backend_origin, origin, sizeof origin);
    json_object_set_new(out->trace, "requested", json_string(requested));
    json_object_set_new(out->trace, "origin", json_string(rc->attn_backend ? origin : "default"));
    char list[600];
    const char *near = NULL;
    const char *name = requested;
    json_object_set_new(out->trace, "fallback", json_null());
    if (!backend_listed(reg, requested, list, sizeof list, &near)) {
        if (!rc->attn_backend_fallback)
            return lh_err_set(err, LH_E_UNKNOWN_NAME,
                              "attn_backend '%s' (from %s) is not available%s%s%s; available: %s",
                              requested, rc->attn_backend ? origin : "default",
                              near ? "; did you mean '" : "", near ? near : "",
                              near ? "'?" : "", list);
        lh_log(LH_LOG_WARN, "attn_backend '%s' is not available (available: %s); "
               "attn_backend_fallback: using '%s'", requested, list, LH_DEFAULT_ATTN_BACKEND);
        name = LH_DEFAULT_ATTN_BACKEND;
        json_object_set_new(out->trace, "fallback",
                            json_sprintf("'%s' unavailable (available: %s); fell back to '%s'",
                                         requested, list, name));
    }
    /* get_attention_backend(name, sparse): sparse is a second dimension of the lookup, not
     * another backend (checked again, with every other capability, by the validator) */
    const lh_sparse_config *sparse = &rc->sparse;
    lh_status st = lh_get_attention_backend(reg, name, sparse, &out->entry, err);
    if (st != LH_OK && st != LH_E_UNSUPPORTED && rc->attn_backend_fallback &&
        strcmp(name, LH_DEFAULT_ATTN_BACKEND) != 0) {
        /* listed but unavailable (its plugin does not load): the opted-in fallback applies */
        lh_log(LH_LOG_WARN, "attn_backend '%s' is unavailable (%s); attn_backend_fallback: "
               "using '%s'", name, err->msg, LH_DEFAULT_ATTN_BACKEND);
        json_object_set_new(out->trace, "fallback",
                            json_sprintf("'%s' unavailable (%s); fell back to '%s'", name,
                                         err->msg, LH_DEFAULT_ATTN_BACKEND));
        name = LH_DEFAULT_ATTN_BACKEND;
        lh_err_clear(err);
        st = lh_get_attention_backend(reg, name, sparse, &out->entry, err);
    }
    json_object_set_new(out->trace, "normalized", json_string(name));
    if (st != LH_OK)
        return st;
    const lh_attn_backend_provider *p = &out->entry->p.attn;
    char caps[256];
    json_object_set_new(out->trace, "backend", json_string(out->entry->name));
    json_object_set_new(out->trace, "shared_object", json_string(out->entry->module->path));
    json_object_set_new(out->trace, "capabilities",
                        json_string(lh_attn_caps_str(p->capabilities, caps, sizeof caps)));
    out->caps = p->capabilities;
    return LH_OK;
}

lh_status lh_attention_decide(const lh_run_config *rc, const lh_model_config *cfg,
                              const lh_model_geometry *geo, lh_attn_choice *out, lh_err *err)
{
    const lh_attn_backend_provider *p = &out->entry->p.attn;
    /* the capability rules live in the one run-config validator; the trace lists them all */
    lh_attn_need needs[LH_ATTN_MAX_NEEDS];
    size_t n_needs = lh_attn_needs(rc, geo, cfg->path, needs);
    json_t *checks = json_array();
    json_object_set_new(out->trace, "checks", checks);
    for (size_t i = 0; i < n_needs; i++) {
        bool have = (p->capabilities & needs[i].bit) != 0;
        json_t *c = json_pack("{s:s,s:b,s:b}", "capability", needs[i].capability, "needed",
                              needs[i].needed, "supported", have);
        if (needs[i].needed)
            json_object_set_new(c, "because", json_string(needs[i].because));
        json_array_append_new(checks, c);
    }
    const lh_validation_facts facts = {.attn_backend = out->entry->name,
                                       .attn_caps = p->capabilities, .geo = geo,
                                       .model_path = cfg->path};
    lh_status vst = lh_run_config_validate_with(rc, &facts, err);
    if (vst != LH_OK)
        return vst;
    return decide(rc, cfg, geo, out, err);
}

lh_status lh_select_attention_backend(lh_registry *reg, const lh_run_config *rc,
                                      lh_attn_choice *out, lh_err *err)
{
    memset(out, 0, sizeof *out);
    out->trace = json_object();
    if (!out->trace)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    /* the device first: nothing else is worth doing on a device that is not there */
    lh_status st = decide_device(rc, out, err);
    if (st == LH_OK) {
        lh_registry_lock(reg);
        st = select_locked(reg, rc, out, err);
        lh_registry_unlock(reg);
    }
    if (st != LH_OK)
        lh_attn_choice_free(out);
    return st;
}
