/* Internal: a small YAML node tree built from libyaml events, with 1-based line/column marks.
 *
 * Only what a config file needs: one document of mappings, sequences and scalars. Anchors,
 * aliases, non-core tags and multiple documents are rejected; mapping keys must be scalars and
 * unique (a duplicate is an error naming both positions). */
#ifndef LH_CONFIG_YAML_TREE_H
#define LH_CONFIG_YAML_TREE_H

#include "llmhost.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum lh_ynode_kind {
    LH_YNODE_SCALAR = 0,
    LH_YNODE_MAPPING,
    LH_YNODE_SEQUENCE
} lh_ynode_kind;

typedef struct lh_ynode lh_ynode;
struct lh_ynode {
    lh_ynode_kind kind;
    int line, column;  /* 1-based position of the node's first character */
    /* scalars */
    char *value;       /* NUL-terminated text */
    size_t length;
    bool plain;        /* plain (unquoted, untagged or core-tagged): subject to bool/int/null */
    bool is_null;      /* plain "", "~", "null", "Null", "NULL" (or tagged !!null) */
    /* mappings: n pairs keys[i] -> items[i]; sequences: n items */
    size_t n;
    lh_ynode **keys;
    lh_ynode **items;
};

/* Parses `text` (len bytes). An empty stream (or one with only comments) gives *root = NULL.
 * `source` names the file in messages ("FILE:LINE:COL: ..."). Errors: LH_E_CONFIG (syntax,
 * with libyaml's problem text; duplicate key; alias/anchor/tag/multiple documents),
 * LH_E_NOMEM. */
lh_status lh_yaml_parse(const char *text, size_t len, const char *source, lh_ynode **root,
                        lh_err *err);
void lh_ynode_free(lh_ynode *node);

/* For messages: "a mapping", "a sequence", "null", "a scalar". */
const char *lh_ynode_kind_name(const lh_ynode *node);
/* Mapping lookup by key; NULL when absent (or node is not a mapping). */
const lh_ynode *lh_ynode_get(const lh_ynode *map, const char *key);

#endif
