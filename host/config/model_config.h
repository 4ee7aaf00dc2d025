/* Internal: config.json parsed with jansson into a typed model config.
 *
 * Parsing type-checks and range-checks every known field that is present (zero or negative
 * sizes, kv heads not dividing heads, hidden_size not divisible by heads when head_dim is
 * absent, size products that overflow int64, MLA ranks, longrope's short_factor / long_factor
 * arrays) and rejects the file naming the field.
 * Which fields an architecture requires is its plugin's business (its constructor names a
 * missing one), because resolution must run first (a missing `architectures` is resolve's
 * error). */
#ifndef LH_CONFIG_MODEL_CONFIG_H
#define LH_CONFIG_MODEL_CONFIG_H

#include "llmhost.h"
#include "lh_config.h"
#include "lh_gguf.h"
#include <jansson.h>

struct lh_model_config {
    lh_model_geometry geo;
    json_t *root;      /* the whole document, owned */
    char *path;        /* the config.json path as opened */
    char *dir;         /* its directory */
    /* presence flags for fields whose defaults need to be told apart from given values */
    bool has_architectures;   /* "architectures" present and a non-empty array */
    bool has_hidden_size, has_intermediate_size, has_num_hidden_layers,
         has_num_attention_heads, has_vocab_size;
    /* longrope's short_factor and long_factor, owned: geo.rope_scaling.short_factor points at
     * the first geo.rope_scaling.n_factors entries, long_factor at the next n_factors. NULL
     * when the rope object carries neither. */
    double *rope_factors;
    /* A GGUF source (gguf_config.h): the open file, owned, and the provider that wrote this
     * config from its metadata (a registry entry's copy, valid while the host lives). NULL for
     * a config.json. path is then the GGUF file and dir its directory. */
    struct lh_gguf_file *gguf;
    const lh_gguf_provider *gguf_provider;
};

/* Loads `path`, which is a model directory (its config.json is read) or a .json file.
 * Errors: LH_E_IO (missing/unreadable, message names the path), LH_E_CONFIG (JSON syntax
 * error with line and column; a field with the wrong type or an impossible value, naming it).
 * On success *out is owned by the caller (lh_model_config_free). */
lh_status lh_model_config_load(const char *path, lh_model_config **out, lh_err *err);
/* From text read elsewhere (a GGUF file's metadata): path is what messages name, dir what
 * cfg->dir becomes (may be NULL). */
lh_status lh_model_config_parse_at(const char *json_text, size_t len, const char *path,
                                   const char *dir, lh_model_config **out, lh_err *err);
/* Same from text; `source_name` is used in messages. */
lh_status lh_model_config_parse(const char *json_text, const char *source_name,
                                lh_model_config **out, lh_err *err);
void lh_model_config_free(lh_model_config *cfg);

/* Raw getters: dotted key path; 1 present with that type, 0 absent or null, -1 other type. */
int lh_model_config_get_int(const lh_model_config *cfg, const char *key, int64_t *out);
int lh_model_config_get_double(const lh_model_config *cfg, const char *key, double *out);
int lh_model_config_get_bool(const lh_model_config *cfg, const char *key, bool *out);
int lh_model_config_get_string(const lh_model_config *cfg, const char *key, const char **out);
const lh_model_geometry *lh_model_config_geometry(const lh_model_config *cfg);

/* dtype names: "float32"/"f32"/"fp32", "bfloat16"/"bf16", "float16"/"f16"/"fp16", ... */
lh_dtype lh_dtype_from_name(const char *name);
const char *lh_dtype_name(lh_dtype dt); /* canonical: "float32", "bfloat16", "float16", ... */

#endif
