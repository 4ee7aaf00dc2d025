/* Internal: rebuilding an arch_index.tsv from what plugins actually register, and comparing
 * two indexes (the drift check of DESIGN §3). */
#ifndef LH_LOADER_INDEX_GENERATE_H
#define LH_LOADER_INDEX_GENERATE_H

#include "index/arch_index.h"

/* Loads every libmodel_*.so / libattn_*.so in `dir` (sorted), each in a child process
 * (loader/plugin_probe.h: the caller loads nothing and survives a plugin that crashes or
 * hangs), and fills *out with one row per registration (kind, name, file). Errors: any load
 * error class, naming the file (a crash, exit or hang in the plugin: the class of the phase
 * it happened in); LH_E_INDEX_PARSE when two files register the same (kind, name). *out owned
 * by the caller. One implementation behind `gen_arch_index` and `llmhost plugin index`. */
lh_status lh_index_generate(const char *dir, bool allow_insecure, lh_arch_index *out,
                            lh_err *err);
/* The same with a per-plugin timeout in seconds (<= 0: LH_PROBE_DEFAULT_TIMEOUT_S). */
lh_status lh_index_generate_ex(const char *dir, bool allow_insecure, double timeout_s,
                               lh_arch_index *out, lh_err *err);
/* Generates the index of `dir` and writes it to `file` atomically (a temporary file next to
 * it, then rename); on any error `file` is untouched. *n_rows (may be NULL): rows written. */
lh_status lh_index_regenerate(const char *dir, const char *file, bool allow_insecure,
                              double timeout_s, size_t *n_rows, lh_err *err);
/* The sorted libmodel_*.so / libattn_*.so file names in dir (what the generator loads). */
lh_status lh_index_list_plugins(const char *dir, char ***names, size_t *n, lh_err *err);
void lh_index_free_names(char **names, size_t n);

typedef enum lh_index_diff_kind {
    LH_INDEX_DIFF_MISSING, /* a plugin registers it, the index lacks it (actual only) */
    LH_INDEX_DIFF_STALE,   /* the index promises what no plugin registers (expected only) */
    LH_INDEX_DIFF_WRONG_FILE /* both, naming different files */
} lh_index_diff_kind;

typedef struct lh_index_diff_item {
    lh_index_diff_kind what;
    const lh_index_row *expected; /* NULL for MISSING */
    const lh_index_row *actual;   /* NULL for STALE */
} lh_index_diff_item;

/* The differences as a list (actual's rows in order, then expected's stale rows in order);
 * *items is malloc'ed (NULL when none, or on out of memory: returns (size_t)-1). */
size_t lh_index_diff_items(const lh_arch_index *expected, const lh_arch_index *actual,
                           lh_index_diff_item **items);

/* Compares `expected` (e.g. the committed file) with `actual` (generated). Returns the number
 * of differences and writes one line per difference to `report` (may be NULL):
 *   "missing from <expected>: model Foo -> libx.so"   (a plugin registers it, index lacks it)
 *   "stale in <expected>:<line>: model Foo -> libx.so" (the index promises what no plugin does)
 *   "<expected>:<line>: model Foo names liba.so, but libb.so registers it" */
size_t lh_index_diff(const lh_arch_index *expected, const lh_arch_index *actual, FILE *report);

#endif
