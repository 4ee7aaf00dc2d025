/* Internal: arch_index.tsv, the static index of what each plugin file provides.
 *
 * Format (DESIGN §3): first line "#llmhost-arch-index<TAB>1"; other lines starting with '#'
 * are comments; blank lines are ignored; data lines are exactly three tab-separated fields
 * kind, name, shared_object. kind is one of model, vision_encoder, draft, attention_backend.
 * shared_object is a bare file name (no '/', not "." or "..") looked up in the index's own
 * directory. A duplicate (kind, name) is an error naming both lines. Attention backend names
 * compare case-insensitively, everything else exactly. */
#ifndef LH_INDEX_ARCH_INDEX_H
#define LH_INDEX_ARCH_INDEX_H

#include "llmhost.h"
#include <stdio.h>

#define LH_ARCH_INDEX_FILE "arch_index.tsv"
#define LH_ARCH_INDEX_VERSION 1

typedef enum lh_kind {
    LH_KIND_MODEL = 0,
    LH_KIND_VISION_ENCODER,
    LH_KIND_DRAFT,
    LH_KIND_ATTENTION_BACKEND,
    LH_KIND_GGUF, /* a GGUF file's general.architecture (lh_gguf.h) */
    LH_KIND_COUNT
} lh_kind;

const char *lh_kind_name(lh_kind k);
/* 0 and sets *out when `name` is a kind, -1 otherwise. */
int lh_kind_from_name(const char *name, lh_kind *out);
/* Name equality under the kind's rule (case-insensitive for attention backends). */
bool lh_kind_names_equal(lh_kind k, const char *a, const char *b);

typedef struct lh_index_row {
    lh_kind kind;
    char *name;
    char *shared_object;
    int line;
} lh_index_row;

typedef struct lh_arch_index {
    char *path; /* the file read, or a description for parsed text */
    char *dir;  /* directory holding it (where shared objects are looked up) */
    lh_index_row *rows;
    size_t n_rows;
} lh_arch_index;

/* Reads `path`. Errors: LH_E_IO (missing/unreadable), LH_E_INDEX_PARSE ("PATH:LINE: ...").
 * On success the caller owns *out (lh_arch_index_free); on error *out is empty. */
lh_status lh_arch_index_load(const char *path, lh_arch_index *out, lh_err *err);
/* Parses text as if read from `path` (path's directory becomes out->dir). */
lh_status lh_arch_index_parse(const char *text, const char *path, lh_arch_index *out,
                              lh_err *err);
void lh_arch_index_free(lh_arch_index *idx);
/* The row for (kind, name), or NULL. */
const lh_index_row *lh_arch_index_find(const lh_arch_index *idx, lh_kind kind, const char *name);
/* Writes an index in canonical form (header, column comment, rows sorted by kind then name)
 * to f. Returns 0 or -1 on a write error. */
int lh_arch_index_write(FILE *f, const lh_index_row *rows, size_t n_rows);
/* Writes the canonical form to `path` atomically: a temporary file in the same directory
 * (mode 0644 less the umask), flushed and synced, then renamed over `path`. On any error the
 * temporary file is removed and `path` is untouched. LH_E_IO naming the file and the cause. */
lh_status lh_arch_index_write_atomic(const char *path, const lh_index_row *rows, size_t n_rows,
                                     lh_err *err);

#endif
