/* Helpers shared by the loader / index / registry / resolve tests: plugin dir layouts, error
 * assertions, log capture, small configs. */
#ifndef LH_TESTS_LOADER_UTIL_H
#define LH_TESTS_LOADER_UTIL_H

#include "runner.h"

#include "config/model_config.h"
#include "config/run_config.h"
#include "core/log.h"
#include "index/arch_index.h"
#include "registry/registry.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* NULL-terminated string lists for layouts: PLUGINS("libmodel_tp_alpha.so", ...) and
 * ROWS("model AlphaForCausalLM libmodel_tp_alpha.so", ...) (fields separated by one space;
 * they are written tab-separated). */
#define PLUGINS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ROWS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_ROWS ((const char *const[]){NULL})

/* ---- temp layouts ---------------------------------------------------------------------- */

/* One temp root per test; every dir made with fx_dir lives under it. */
typedef struct fx {
    char *root;
} fx;

/* Creates the root. Asserts on failure (returns false). */
bool fx_init(fx *f);
/* Removes the root recursively and frees it. */
void fx_free(fx *f);
/* Makes root/name (mode 0755), copies each listed test plugin file (from $LH_TEST_PLUGINS,
 * same file name, mode 0755) into it and, when rows is not NULL, writes an arch_index.tsv with
 * the header and those rows. Returns a malloc'ed absolute path (NULL after a failed assert). */
char *fx_dir(fx *f, const char *name, const char *const *plugins, const char *const *rows);
/* An empty built-in dir: index with the header only. */
char *fx_empty_builtin(fx *f, const char *name);

/* $LH_TEST_PLUGINS/file into dir/as_name with mode. Asserts. */
bool copy_plugin(const char *dir, const char *file, const char *as_name, unsigned mode);
/* Writes dir/arch_index.tsv from rows (see ROWS). Asserts. */
bool write_index(const char *dir, const char *const *rows);
/* Writes text to dir/name and chmods it to mode. Asserts. */
bool write_file_mode(const char *dir, const char *name, const char *text, unsigned mode);
/* malloc'ed dir/name */
char *join(const char *dir, const char *name);

/* ---- assertions ---------------------------------------------------------------------- */

void expect_status_at(const char *file, int line, lh_status got, lh_status want, const lh_err *err);
void expect_has_at(const char *file, int line, const char *text, const char *sub);
void expect_lacks_at(const char *file, int line, const char *text, const char *sub);

#define EXPECT_STATUS(got, want, err) expect_status_at(__FILE__, __LINE__, (got), (want), &(err))
/* substring present / absent (absent is checked case-insensitively) */
#define EXPECT_HAS(text, sub) expect_has_at(__FILE__, __LINE__, (text), (sub))
#define EXPECT_LACKS(text, sub) expect_lacks_at(__FILE__, __LINE__, (text), (sub))

/* ---- registry helpers --------------------------------------------------------------- */

/* lh_registry_init asserting success. */
bool reg_open(lh_registry *reg, const char *builtin_dir, bool allow_insecure);
/* lh_registry_add_dir under the lock, asserting success. */
bool reg_add(lh_registry *reg, const char *dir);
lh_status reg_add_st(lh_registry *reg, const char *dir, lh_err *err);
bool reg_remove(lh_registry *reg, const char *dir);
lh_status reg_remove_st(lh_registry *reg, const char *dir, lh_err *err);
/* Ensure under the lock. */
lh_status reg_ensure(lh_registry *reg, lh_kind kind, const char *name, const lh_reg_entry **out,
                     lh_err *err);
/* Ensure asserting success; returns the entry or NULL. */
const lh_reg_entry *ensure_ok(lh_registry *reg, lh_kind kind, const char *name);
/* The file name of the module that provides (kind, name) after ensure; NULL on error. */
const char *provider_file(lh_registry *reg, lh_kind kind, const char *name);
/* The module record loaded from dir/file_name, NULL if none. */
lh_module_rec *module_at(const lh_registry *reg, const char *dir, const char *file_name);
/* The entry of `m`'s log for (kind, name), NULL if none. */
const lh_reg_entry *log_entry(const lh_module_rec *m, lh_kind kind, const char *name);
/* true when the NULL-terminated `want` list equals names_of(m, kind) in order. */
bool names_of_equal(const lh_module_rec *m, lh_kind kind, const char *const *want);
/* true when `name` is among lh_registry_known_names(kind). */
bool known_has(const lh_registry *reg, lh_kind kind, const char *name);
/* Builds the model of `e` with `cfg` and reports whether the tree has container `marker`
 * (test plugins add "built_by_<plugin name>"). */
bool built_by(const lh_reg_entry *e, const lh_model_config *cfg, const char *marker);

/* ---- logs ------------------------------------------------------------------------------ */

/* Captures every log message (any level) until logcap_stop. Thread-safe. */
void logcap_start(void);
void logcap_stop(void);
void logcap_clear(void);
/* Index of the first captured message at `level` containing every non-NULL substring, or -1. */
int logcap_find(lh_log_level level, const char *sub1, const char *sub2, const char *sub3);
/* Prints everything captured (diagnostics on failure). */
void logcap_dump(void);

/* ---- configs ----------------------------------------------------------------------------- */

/* A small decoder config for architecture `arch` (NULL: no architectures key) with extra JSON
 * members appended (e.g. "\"draft_vocab_size\": 32000"); asserts the parse. */
lh_model_config *small_cfg(const char *arch, const char *extra_members);
/* A run config from YAML text (NULL: defaults); asserts the parse and validation. */
bool run_cfg(lh_run_config *rc, const char *yaml);

#endif
