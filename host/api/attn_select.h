/* Internal: choosing the attention backend for a model (DESIGN §8). The requested name (run
 * config / --attn-backend, already lower-case) must be listed by some index — checked before
 * any backend plugin loads; an unknown name is an error listing the available ones, unless
 * attn_backend_fallback is set, which takes the default and says so in the trace. Then the
 * one selected plugin is loaded and the one run-config validator checks its constant
 * capabilities against what the run needs (lh_attn_needs: sliding window, chunked attention,
 * MLA, fp8 KV, sparse attention, mixed-precision KV): a missing capability is an error before
 * the model loads, never mid-generation. Then the decisions that follow from the choice are
 * made once, each with its reason: RoPE fusion, chunked attention, sparse selection, and the
 * KV cache (who owns it, its dtypes, bytes per token, the pool in blocks and bytes).
 *
 * Before any of that (and before any plugin loads) the device is decided
 * (lh_run_resolve_device): a CUDA device that is not there fails here, and the trace's
 * "device" section says what was chosen, why, what it is and what CUDA graphs will do. */
#ifndef LH_API_ATTN_SELECT_H
#define LH_API_ATTN_SELECT_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "lh_plugin.h"
#include "registry/registry.h"
#include "runtime/kv_cache.h"

#include <jansson.h>

#define LH_DEFAULT_ATTN_BACKEND "paged"

typedef struct lh_attn_choice {
    lh_device device;          /* the run's device (lh_run_resolve_device; reason in the trace) */
    bool cuda_graphs;          /* decode steps replayed as CUDA graphs: CUDA and cuda_graphs */
    const lh_reg_entry *entry; /* the backend; lives as long as the registry */
    uint64_t caps;             /* its LH_ATTN_CAP_* flags */
    bool fused_rope;           /* RoPE fusion decision (reason in the trace) */
    int64_t sparse_top_k, sparse_local_blocks; /* 0/0: dense */
    int64_t max_seq_len;       /* the run's, resolved (lh_run_max_seq_len, run_config.h) */
    bool has_kv_plan;          /* LH_ATTN_CAP_PAGED_KV backends: the host pool, sized once */
    lh_kv_plan kv_plan;
    /* {device: {...}, requested, origin, normalized, fallback, backend, shared_object,
     *  capabilities, checks: [...], rope_fusion: {...}, chunked_attention: {...},
     *  sparse_attention: {...}, kv_cache: {...}}. device: {requested, origin, resolved, kind,
     *  index, reason, cuda_device_count and cuda_unavailable (null when CUDA is usable; both
     *  absent when the config asked for cpu, which leaves the CUDA driver alone), then for
     *  the CPU isa (the kernels' instruction set; null with isa_error when no context could be
     *  made), for CUDA name, compute_capability ("9.0"), sm_count, total_bytes, free_bytes,
     *  bandwidth_gbs, kernels; and cuda_graphs: {requested, origin, on, reason}} */
    json_t *trace;
} lh_attn_choice;


/* The device and the backend (reads no model geometry). Takes the registry lock itself.
 * Errors: LH_E_UNSUPPORTED (a CUDA device that is not there, from lh_run_resolve_device,
 * before any plugin loads), LH_E_UNKNOWN_NAME (with the available names), the backend
 * plugin's load error class, LH_E_NOMEM. On success free with lh_attn_choice_free (also after
 * a failed lh_attention_decide). */
lh_status lh_select_attention_backend(lh_registry *reg, const lh_run_config *rc,
                                      lh_attn_choice *out, lh_err *err);
/* The decisions that need the model's attention geometry, after lh_select_attention_backend
 * and after the model's tree is built: `geo` is what the tree's attention layers say
 * (lh_model_run_geometry), not the config's keys. The capability checks (lh_attn_needs),
 * RoPE fusion, chunked and sparse attention, max_seq_len and the KV cache, each with its
 * reason in out->trace. Errors: LH_E_UNSUPPORTED (a capability the run needs, naming both),
 * LH_E_CONFIG (a KV pool that cannot be sized), LH_E_NOMEM. */
lh_status lh_attention_decide(const lh_run_config *rc, const lh_model_config *cfg,
                              const lh_model_geometry *geo, lh_attn_choice *out, lh_err *err);
void lh_attn_choice_free(lh_attn_choice *c);

/* get_attention_backend (DESIGN §8): the provider of backend `name` (already normalized to
 * lower case when the run config was parsed; compared case-insensitively), loading exactly
 * its plugin. sparse (NULL or not enabled: dense) is the second dimension of the lookup: a
 * backend without LH_ATTN_CAP_SPARSE has no sparse mode. Call with the registry lock held.
 * Errors: LH_E_UNKNOWN_NAME (listing the available names, suggesting the nearest), the
 * plugin's load error class, LH_E_UNSUPPORTED (no sparse mode). */
lh_status lh_get_attention_backend(lh_registry *reg, const char *name,
                                   const lh_sparse_config *sparse, const lh_reg_entry **out,
                                   lh_err *err);
/* Every capability flag with its name, in the order `llmhost backends` prints them. */
#define LH_ATTN_N_CAPS 11
typedef struct lh_attn_cap_name {
    uint64_t bit;
    const char *name;
} lh_attn_cap_name;
extern const lh_attn_cap_name lh_attn_cap_names[LH_ATTN_N_CAPS];

/* "fused_rope,chunked,..." for a capability mask, into buf. */
const char *lh_attn_caps_str(uint64_t caps, char *buf, size_t n);

/* The devices this process can use, for `llmhost backends`: {cpu: {isa, isa_error},
 * cuda: {built, device_count, unavailable (null when usable), devices: [{index, name,
 * compute_capability, sm_count, total_bytes, free_bytes, bandwidth_gbs, kernels}]}}. NULL
 * when out of memory. */
json_t *lh_devices_json(void);

#endif
