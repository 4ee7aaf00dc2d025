/* Internal: choosing the attention backend for a model (DESIGN §8). The requested name (run
 * config / --attn-backend, already lower-case) must be listed by some index — checked before
 * any backend plugin loads; an unknown name is an error listing the available ones, unless
 * attn_backend_fallback is set, which takes the default and says so in the trace. Then the
 * one selected plugin is loaded and its constant capabilities are checked against what the
 * model needs (sliding window, chunked attention, MLA): a missing capability is an error at
 * construction time, never mid-generation. */
#ifndef LH_API_ATTN_SELECT_H
#define LH_API_ATTN_SELECT_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "registry/registry.h"

#include <jansson.h>

#define LH_DEFAULT_ATTN_BACKEND "vanilla"

typedef struct lh_attn_choice {
    const lh_reg_entry *entry; /* the backend; lives as long as the registry */
    json_t *trace;             /* {requested, origin, normalized, fallback, checks: [...]} */
} lh_attn_choice;

/* Takes the registry lock itself. Errors: LH_E_UNKNOWN_NAME (with the available names),
 * the backend plugin's load error class, LH_E_UNSUPPORTED (a capability the model needs,
 * naming both), LH_E_NOMEM. On success free with lh_attn_choice_free. */
lh_status lh_select_attention_backend(lh_registry *reg, const lh_run_config *rc,
                                      const lh_model_config *cfg, lh_attn_choice *out,
                                      lh_err *err);
void lh_attn_choice_free(lh_attn_choice *c);
/* "fused_rope,chunked,..." for a capability mask, into buf. */
const char *lh_attn_caps_str(uint64_t caps, char *buf, size_t n);

#endif
