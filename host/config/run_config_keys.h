/* Internal: the run-config key table. One descriptor per key (dotted names for nested keys:
 * kv_cache.block_size, quant.rules[].scheme) says its type, default, range or enum names,
 * where it may come from (the YAML file, --set KEY=VALUE, a dedicated CLI flag) and its help
 * text; the YAML reader, lh_run_config_set, lh_run_config_to_json, the did-you-mean lists and
 * the key reference (lh_rc_keys_markdown, which docs/run-config.md embeds) are all driven by it.
 * Adding a key is one entry in run_config_keys.c (plus its cross-key rule, if any, in
 * run_config_validate.c). In the manner of Redis's config.c (standardConfig / typeInterface).
 *
 * Values live in lh_run_config at the entry's offsets; each value has its lh_value_origin. */
#ifndef LH_CONFIG_RUN_CONFIG_KEYS_H
#define LH_CONFIG_RUN_CONFIG_KEYS_H

#include "config/run_config.h"
#include "config/yaml_tree.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lh_rc_type {
    LH_RC_BOOL = 0, /* bool; YAML plain true/false/yes/no/on/off, --set also 1/0 */
    LH_RC_INT,      /* int64_t, decimal, >= 1 */
    LH_RC_FRACTION, /* double in (0, 1] */
    LH_RC_ENUM,     /* an int-sized enum: names[i] <-> values[i] (case-insensitive) */
    LH_RC_STRING,   /* char * (owned by the config), non-empty */
    LH_RC_DTYPE,    /* the weight dtype: auto|float32|bfloat16|float16 (lh_dtype) */
    LH_RC_DEVICE,   /* auto|cpu|cuda|cuda:N: lh_device at off, bool device_auto at off2 */
    LH_RC_SECTION,  /* a mapping of the keys named "NAME.*"; its own YAML reader */
    LH_RC_LIST      /* a sequence (quant.rules, quant.exclude_modules); read by its section */
} lh_rc_type;

/* Where a key may come from. */
#define LH_RC_YAML 1u /* the YAML run config */
#define LH_RC_SET 2u  /* lh_run_config_set (--set KEY=VALUE, and the dedicated flags) */

/* Per-key behaviour bits. */
#define LH_RC_AUTO_UNSETS 1u /* --set KEY=auto stores 0 (unset) */
#define LH_RC_LOWER 2u       /* strings are stored in lower case */
#define LH_RC_BOTH 4u        /* writes off/origin_off and off2/origin_off2 (kv_cache.dtype) */
#define LH_RC_SEC_ORIGIN 8u  /* --set also sets the section's origin at sec_origin_off */
#define LH_RC_DTYPE_VALUES 16u /* enum of lh_dtype: JSON shows the canonical dtype name */

typedef struct lh_rc_key lh_rc_key;
typedef struct lh_rc_yaml_ctx {
    lh_run_config *rc;
    const char *src;
    lh_err *err;
} lh_rc_yaml_ctx;

struct lh_rc_key {
    const char *name; /* "dtype", "kv_cache.block_size", "quant.rules[].pattern" */
    lh_rc_type type;
    unsigned from;       /* LH_RC_YAML | LH_RC_SET */
    unsigned flags;      /* LH_RC_AUTO_UNSETS ... */
    const char *cli;     /* the dedicated CLI flag ("--dtype"), or NULL */
    const char *arg;     /* the flag's value syntax when its type does not say it */
    const char *def;     /* the default, in words */
    const char *help;    /* one line */
    const char *expected; /* strings: what the YAML error says is expected */
    const char *const *names; /* enums */
    const int *values;        /* enums: NULL means 0..n_names-1 */
    size_t n_names;
    /* Offsets into lh_run_config; off == SIZE_MAX: no storage of its own. */
    size_t off, origin_off, off2, origin_off2, sec_origin_off;
    int json_rank; /* position in the root of lh_run_config_to_json (1-based); 0: not there */
    /* Sections: reads the YAML mapping (committing it as a whole). */
    lh_status (*yaml)(lh_rc_yaml_ctx *c, const lh_rc_key *k, const lh_ynode *n);
    /* Keys whose --set does more than store one typed value (model_impl, quant). */
    lh_status (*set)(lh_run_config *rc, const lh_rc_key *k, const char *flag, const char *value,
                     lh_err *err);
    /* Root keys whose explain view is not {value, origin}. */
    json_t *(*to_json)(const lh_run_config *rc, const lh_rc_key *k);
};

/* The table, in the order of every list made from it (known keys, settable keys, the key
 * reference). */
extern const lh_rc_key lh_rc_keys[];
extern const size_t lh_rc_n_keys;

/* The entry named exactly `name`, or NULL. */
const lh_rc_key *lh_rc_key_find(const char *name);
/* The names directly under `prefix` ("" for the root, "kv_cache.", "quant.rules[].") that may
 * come from `from`, as their last component (root: the whole name) unless full; writes up to
 * cap pointers into names (borrowed from the table), returns the count. */
size_t lh_rc_key_names(const char *prefix, unsigned from, bool full, const char **names,
                       size_t cap);

/* Typed access: parse `text` for k into rc (value and origin o). why receives the reason on
 * failure (the part after "KEY: "); rc is then unchanged. Not for sections and lists. */
bool lh_rc_key_parse(const lh_rc_key *k, lh_run_config *rc, const char *text, bool from_set,
                     lh_value_origin o, char *why, size_t n);
/* The value of a leaf entry as JSON (new reference). */
json_t *lh_rc_key_value_json(const lh_run_config *rc, const lh_rc_key *k);
/* The value origin of a leaf entry. */
lh_value_origin lh_rc_key_origin(const lh_run_config *rc, const lh_rc_key *k);

/* Text parsers shared by the YAML reader, --set and device resolution. */
bool lh_rc_parse_bool(const char *v, bool *out, char *why, size_t n);
bool lh_rc_parse_pos_int(const char *v, int64_t *out, char *why, size_t n);
bool lh_rc_parse_fraction(const char *v, double *out, char *why, size_t n);
bool lh_rc_parse_enum(const char *v, const char *const *names, size_t count, int *out, char *why,
                      size_t n);
/* auto | cpu | cuda | cuda:N (case-insensitive). */
bool lh_rc_parse_device(const char *v, bool *is_auto, lh_device *out, char *why, size_t n);
#define LH_RC_DEVICE_FORMS "auto, cpu, cuda or cuda:N (N a CUDA device ordinal: 0, 1, ...)"

/* "auto" for LH_DTYPE_INVALID, else the canonical name. */
const char *lh_rc_kv_dtype_str(lh_dtype dt);
const char *lh_rc_impl_mode_name(lh_impl_mode m);
/* "from X" when keys and values got their dtypes from the same place, else both places. */
const char *lh_rc_kv_dtypes_from(const lh_run_config *rc, char *buf, size_t n);
/* The names a quant scheme and the sparse algorithm take. */
extern const char *const lh_rc_scheme_names[];
extern const size_t lh_rc_n_scheme_names;
extern const char *const lh_rc_sparse_algorithms[];
extern const lh_dtype lh_rc_kv_dtype_values[];
extern const size_t lh_rc_n_kv_dtypes;

/* Section readers (run_config_yaml.c). */
lh_status lh_rc_yaml_model_impl(lh_rc_yaml_ctx *c, const lh_rc_key *k, const lh_ynode *n);
lh_status lh_rc_yaml_quant(lh_rc_yaml_ctx *c, const lh_rc_key *k, const lh_ynode *n);
lh_status lh_rc_yaml_kv_cache(lh_rc_yaml_ctx *c, const lh_rc_key *k, const lh_ynode *n);
lh_status lh_rc_yaml_sparse(lh_rc_yaml_ctx *c, const lh_rc_key *k, const lh_ynode *n);
lh_status lh_rc_yaml_speculative(lh_rc_yaml_ctx *c, const lh_rc_key *k, const lh_ynode *n);

/* The key reference as a Markdown table, one row per key in table order (docs/run-config.md
 * embeds it between "<!-- run-config keys -->" markers; tests/config checks they agree). malloc'd, the
 * caller frees it; NULL when out of memory. */
char *lh_rc_keys_markdown(void);

void lh_rc_free_rules(lh_quant_rule *rules, size_t n);
void lh_rc_free_strings(char **s, size_t n);

#endif
