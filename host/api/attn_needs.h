/* Internal: what a run needs of its attention backend, and the whole run-config validator.
 *
 * lh_attn_needs is the one table of capability rules (sliding window, chunked attention, MLA,
 * fp8 KV, sparse attention, mixed-precision KV, paged KV), read by lh_run_config_validate_with
 * to refuse a backend that lacks one and by attention selection's explain trace to show every
 * check with its reason. */
#ifndef LH_API_ATTN_NEEDS_H
#define LH_API_ATTN_NEEDS_H

#include "config/run_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the validator knows beyond the run config: the selected attention backend and the
 * model geometry (each may be absent). Borrowed; nothing is kept. */
typedef struct lh_validation_facts {
    const char *attn_backend;     /* normalized name of the selected backend, or NULL */
    uint64_t attn_caps;           /* its LH_ATTN_CAP_* flags (plugin_api/lh_plugin.h) */
    const lh_model_geometry *geo; /* NULL: no model known */
    const char *model_path;       /* config.json path, for messages; may be NULL */
} lh_validation_facts;

/* One capability a run needs of its attention backend. */
typedef struct lh_attn_need {
    const char *capability; /* "sliding_window", "chunked", "mla", "fp8_kv", "sparse", "mixed_kv" */
    uint64_t bit;           /* LH_ATTN_CAP_* */
    bool needed;
    char because[160];      /* e.g. "kv_cache.k_dtype=fp8_e4m3 (from run.yaml:3:12)" or
                             * "sliding_window=4096 in /path/config.json"; "" when not needed.
                             * Longer texts are cut and end in "..." */
} lh_attn_need;
#define LH_ATTN_MAX_NEEDS 8
/* Fills out[] with every capability rule (needed or not), in a fixed order (sliding_window,
 * chunked, mla, fp8_kv, sparse, mixed_kv, paged_kv); returns the count (0 when rc or out is
 * NULL). The one table behind both the validator's errors and the explain trace. geo NULL: the
 * model rules are not needed. */
size_t lh_attn_needs(const lh_run_config *rc, const lh_model_geometry *geo, const char *model_path,
                     lh_attn_need out[LH_ATTN_MAX_NEEDS]);
/* The whole validator, run before anything is loaded or allocated: the rc-only rules
 * (lh_run_config_validate: LH_E_CONFIG naming the key(s) and where each value came from), then
 * (when facts->attn_backend is set) each needed capability the backend lacks → LH_E_UNSUPPORTED
 * "attention backend 'X' does not support Y, which this run needs (because ...); see
 * `llmhost backends`" (all missing ones in one message). facts may be NULL (rc-only rules);
 * rc NULL is LH_E_USAGE. */
lh_status lh_run_config_validate_with(const lh_run_config *rc, const lh_validation_facts *facts,
                                      lh_err *err);

#endif
