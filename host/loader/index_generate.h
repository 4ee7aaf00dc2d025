/* Internal: rebuilding an arch_index.tsv from what plugins actually register, and comparing
 * two indexes (the drift check of DESIGN §3). */
#ifndef LH_LOADER_INDEX_GENERATE_H
#define LH_LOADER_INDEX_GENERATE_H

#include "index/arch_index.h"

/* Loads every libmodel_*.so / libattn_*.so in `dir` (sorted), each in isolation from any
 * registry, and fills *out with one row per registration (kind, name, file). The plugins stay
 * loaded (never dlclosed). Errors: any load error class, naming the file; LH_E_INDEX_PARSE
 * when two files register the same (kind, name). *out owned by the caller. */
lh_status lh_index_generate(const char *dir, bool allow_insecure, lh_arch_index *out,
                            lh_err *err);

/* Compares `expected` (e.g. the committed file) with `actual` (generated). Returns the number
 * of differences and writes one line per difference to `report` (may be NULL):
 *   "missing from <expected>: model Foo -> libx.so"   (a plugin registers it, index lacks it)
 *   "stale in <expected>:<line>: model Foo -> libx.so" (the index promises what no plugin does)
 *   "<expected>:<line>: model Foo names liba.so, but libb.so registers it" */
size_t lh_index_diff(const lh_arch_index *expected, const lh_arch_index *actual, FILE *report);

#endif
