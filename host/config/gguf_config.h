/* Internal: a model config written from a GGUF file's metadata by the plugin that serves its
 * general.architecture (lh_gguf.h).
 *
 * lh_model_config_from_gguf(reg, file): opens and validates the file (gguf.h), reads
 * general.architecture, ensures-then-looks-up its GGUF provider (kind "gguf" of the arch
 * index: exactly that plugin is loaded), copies the provider's key table, runs its finish hook,
 * adds architectures[0], vocab_size (tokenizer.ggml.tokens' length), bos/eos/pad_token_id
 * (tokenizer.ggml.*) and rope_scaling (the format's {arch}.rope.scaling.* keys: none, linear,
 * yarn) where the provider set none, and parses the document as a config.json
 * with every check config.json gets. The config owns the open file (cfg->gguf) and points at
 * the provider (cfg->gguf_provider); cfg->path is the file, cfg->dir its directory.
 *
 * Errors, each naming the file: the reader's (LH_E_IO, LH_E_CONFIG, LH_E_UNSUPPORTED);
 * LH_E_CONFIG for a missing or non-string general.architecture, a required key that is
 * absent, a metadata value that cannot become JSON (an integer above INT64_MAX, a non-finite
 * float, nested arrays), and the config parser's own; the registry's (LH_E_UNKNOWN_NAME
 * listing the GGUF architectures the index knows, load errors of the plugin); the provider's
 * finish error; LH_E_NOMEM. */
#ifndef LH_CONFIG_GGUF_CONFIG_H
#define LH_CONFIG_GGUF_CONFIG_H

#include "config/model_config.h"
#include "registry/registry.h"

lh_status lh_model_config_from_gguf(lh_registry *reg, const char *file, lh_model_config **out,
                                    lh_err *err);

/* The host API's gguf_* getters and config_set_* setters (lh_plugin.h, ABI 3.1). */
int lh_gguf_source_get_int(const lh_gguf_source *s, const char *key, int64_t *out);
int lh_gguf_source_get_double(const lh_gguf_source *s, const char *key, double *out);
int lh_gguf_source_get_bool(const lh_gguf_source *s, const char *key, bool *out);
int lh_gguf_source_get_string(const lh_gguf_source *s, const char *key, const char **out);
const char *lh_gguf_source_arch(const lh_gguf_source *s);
bool lh_gguf_source_has_tensor(const lh_gguf_source *s, const char *name);
lh_status lh_gguf_config_set_int(lh_gguf_config *c, const char *key, int64_t v);
lh_status lh_gguf_config_set_double(lh_gguf_config *c, const char *key, double v);
lh_status lh_gguf_config_set_bool(lh_gguf_config *c, const char *key, bool v);
lh_status lh_gguf_config_set_string(lh_gguf_config *c, const char *key, const char *v);
lh_status lh_gguf_config_set_json(lh_gguf_config *c, const char *key, const char *json_text);
int lh_gguf_config_peek_int(const lh_gguf_config *c, const char *key, int64_t *out);

#endif
