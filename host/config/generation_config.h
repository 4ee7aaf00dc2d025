/* Internal: a model directory's generation_config.json (Hugging Face GenerationConfig), the
 * source of generation defaults.
 *
 * Honoured keys, each optional (null = absent), with transformers' GenerationConfig defaults
 * when absent: do_sample (false), temperature (1.0), top_k (50), top_p (1.0), min_p (off),
 * repetition_penalty (1.0), eos_token_id (an id or a list of ids; none). Every other key
 * (max_length, max_new_tokens, bos/pad ids, num_beams, ...) is ignored. A present key of the
 * wrong type or with an impossible value is LH_E_CONFIG naming it; a JSON syntax error is
 * LH_E_CONFIG with FILE:LINE:COLUMN. Without the file the engine takes config.json's
 * eos_token_id (lh_generation_config_from_model), as transformers does. */
#ifndef LH_CONFIG_GENERATION_CONFIG_H
#define LH_CONFIG_GENERATION_CONFIG_H

#include "llmhost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lh_generation_config {
    bool present; /* the file existed */
    bool do_sample;
    float temperature;
    int64_t top_k;
    float top_p;
    float min_p; /* 0: off (transformers' None) */
    float repetition_penalty;
    int32_t *eos_ids; /* owned; n_eos ids */
    int64_t n_eos;
} lh_generation_config;

/* transformers' defaults, no eos ids */
void lh_generation_config_defaults(lh_generation_config *g);
/* Reads DIR/generation_config.json; an absent file gives the defaults (present = false).
 * Errors: LH_E_IO (exists but unreadable), LH_E_CONFIG. *g is always initialized (free it). */
lh_status lh_generation_config_load(const char *model_dir, lh_generation_config *g,
                                    lh_err *err);
/* Same from text; `source` names it in messages. */
lh_status lh_generation_config_parse(const char *text, size_t len, const char *source,
                                     lh_generation_config *g, lh_err *err);
/* Without generation_config.json transformers derives the generation config from the model
 * config: the defaults plus config.json's eos_token_id (same rules; `source` names the file).
 * model_root is the parsed config.json (jansson object). */
struct json_t;
lh_status lh_generation_config_from_model(const struct json_t *model_root, const char *source,
                                          lh_generation_config *g, lh_err *err);
void lh_generation_config_free(lh_generation_config *g);

#endif
