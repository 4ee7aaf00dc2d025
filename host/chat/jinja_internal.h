/* Internal to host/chat: the template AST shared by the parser and the evaluator. */
#ifndef LH_CHAT_JINJA_INTERNAL_H
#define LH_CHAT_JINJA_INTERNAL_H

#include "chat/jinja.h"

enum {
    /* statements */
    S_BODY, S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_BREAK, S_CONTINUE,
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_METHOD, E_FILTER,
    E_TEST, E_NEG, E_BIN, E_CMP, E_NOT, E_AND, E_OR, E_COND
};

typedef struct jnode {
    int kind;
    int line, col;
    const char *name;  /* variable, attribute, filter, test, method, function or operator */
    const char *name2; /* second loop variable; attribute of `set ns.attr` */
    bool neg;          /* `is not`; S_IF: has an else body */
    json_t *lit;       /* E_LIT, S_TEXT (owned by the arena) */
    struct jnode **kids;
    size_t nkids, capkids;
    const char *kwnames[8];
    struct jnode *kwvals[8];
    size_t nkw;
    const char **ops; /* E_CMP: the operator between kids[i] and kids[i + 1] */
} jnode;

/* S_IF kids: cond, body, [cond, body]..., [else body]. S_FOR kids: iterable, body, filter
 * (may be NULL), else body (may be NULL). S_SET kids: value. E_COND kids: cond, then,
 * [else]. E_FILTER / E_TEST / E_METHOD kids: subject, args...; E_CALL kids: args. E_CMP kids: the operands of a
 * (possibly chained) comparison. */

void *lh_jinja_arena_alloc(lh_jinja *t, size_t n);
/* The arena takes the reference; false on allocation failure (the value is released). */
bool lh_jinja_arena_keep(lh_jinja *t, json_t *v);
lh_status lh_jinja_parse(lh_jinja *t, const char *src, size_t len, jnode **root, lh_err *err);

#endif
