/* Internal: resolving a model config to a provider, DESIGN §6, each step recorded in a trace
 * that `explain` prints:
 *   1. architectures missing or empty -> LH_E_CONFIG naming the field
 *   2. mm_encoder_only -> vision-encoder registry with the raw architectures[0]
 *   3. EAGLE-3 draft (config has draft_vocab_size) -> drop every "Eagle3", prefix "EAGLE3"
 *   4. run config model_impl target (off|auto|require): a target may refuse the runtime with
 *      a reason; auto falls back to the built-in implementation (info log), require fails
 *      with the reason. Under auto and require a target name no index knows is an error
 *      (no silent fallback); under off the target is ignored.
 *   5. ensure-then-look-up; unknown -> LH_E_UNKNOWN_NAME carrying the original name. */
#ifndef LH_RESOLVE_RESOLVE_H
#define LH_RESOLVE_RESOLVE_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "registry/registry.h"

#include <jansson.h>

typedef struct lh_resolution {
    const char *architecture; /* original architectures[0], borrowed from the config */
    char *resolved;           /* the name finally looked up */
    lh_kind kind;
    const lh_reg_entry *entry; /* the provider; lives as long as the registry */
    json_t *rewrites;          /* array of strings */
    json_t *trace;             /* array of {step, name, decision} */
} lh_resolution;

/* Takes the registry lock itself. On error *out is freed and err names the original
 * architecture. On success the caller frees *out with lh_resolution_free. */
lh_status lh_resolve(lh_registry *reg, const lh_model_config *cfg, const lh_run_config *rc,
                     lh_resolution *out, lh_err *err);
void lh_resolution_free(lh_resolution *r);
/* The weight dtype the runtime will use: run config dtype, else torch_dtype, else bfloat16. */
lh_dtype lh_runtime_dtype(const lh_model_config *cfg, const lh_run_config *rc);

#endif
