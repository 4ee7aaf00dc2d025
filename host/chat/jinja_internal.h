/* Internal to host/chat: what the Jinja interpreter's parts share. The template and its AST
 * (jinja_parse.c builds them), the render context and value semantics (jinja_value.c), the
 * built-in filters, tests, functions and methods (jinja_builtins.c, one table) and the
 * evaluator (jinja_eval.c). */
#ifndef LH_CHAT_JINJA_INTERNAL_H
#define LH_CHAT_JINJA_INTERNAL_H

#include "chat/jinja.h"
#include "core/err.h"
#include "core/strbuf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JINJA_MAX_OUTPUT ((size_t)64 << 20) /* a string (the output too) stays below this */
#define JINJA_MAX_ITERS 1000000LL
#define JINJA_MAX_SCOPES 256
#define JINJA_MAX_VALUE_DEPTH 256

/* ---- the template and its AST (jinja_parse.c) ------------------------------------------ */

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
 * [else]. E_FILTER / E_TEST / E_METHOD kids: subject, args...; E_CALL kids: args. E_CMP kids:
 * the operands of a (possibly chained) comparison. */

struct lh_jinja {
    void **blocks;
    size_t nblocks, capblocks;
    json_t **vals;
    size_t nvals, capvals;
    jnode *root;
};

void *lh_jinja_arena_alloc(lh_jinja *t, size_t n);
/* The arena takes the reference; false on allocation failure (the value is released). */
bool lh_jinja_arena_keep(lh_jinja *t, json_t *v);
lh_status lh_jinja_parse(lh_jinja *t, const char *src, size_t len, jnode **root, lh_err *err);

/* ---- the render context and value semantics (jinja_value.c) ---------------------------- */

typedef struct jctx {
    const lh_jinja_env *env;
    json_t *globals;
    json_t *scopes[JINJA_MAX_SCOPES];
    int nscopes;
    json_t *undef; /* the undefined value: its own object, compared by identity */
    json_t **namespaces;
    size_t nns, capns;
    lh_err *err;
    bool failed;
    lh_status code;
    long long iters;
    int loopctl; /* 1 break, 2 continue */
    int vdepth;
} jctx;

/* Records the first runtime error (at: where, or NULL); always false. */
/* The one form of a template error: "chat template LINE:COL: message" (line 0: without the
 * position; LH_E_NOMEM: "out of memory"), into err. */
void lh_jinja_errorv(lh_err *err, lh_status code, int line, int col, const char *fmt,
                     va_list ap);
bool jv_fail(jctx *c, const jnode *at, lh_status code, const char *fmt, ...) LH_PRINTF(4, 5);
#define JV_OOM(c) jv_fail((c), NULL, LH_E_NOMEM, "out of memory")

/* A string under construction: an lh_strbuf bounded below JINJA_MAX_OUTPUT. The jv_add
 * family appends and, when the buffer failed, records the error (its size or out of memory)
 * and returns false. */
#define JV_BUF ((lh_strbuf){.limit = JINJA_MAX_OUTPUT - 1})
bool jv_buf_ok(jctx *c, lh_strbuf *b);
bool jv_add(jctx *c, lh_strbuf *b, const char *s, size_t n);
bool jv_puts(jctx *c, lh_strbuf *b, const char *s);
bool jv_add_cp(jctx *c, lh_strbuf *b, uint32_t cp);
/* The buffer's text as a new string value (NULL, recorded, on failure); frees the buffer. */
json_t *jv_take(jctx *c, lh_strbuf *b);
json_t *jv_newstr(jctx *c, const char *s, size_t n);

static inline bool jv_is_undef(const jctx *c, const json_t *v) { return v == c->undef; }
static inline json_t *jv_undef(jctx *c) { return json_incref(c->undef); }
bool jv_is_namespace(const jctx *c, const json_t *v);
const char *jv_type_name(const jctx *c, json_t *v);
bool jv_truthy(const jctx *c, json_t *v);
/* numbers: ints, floats and bools (Python's bool is an int) */
bool jv_is_num(json_t *v);
bool jv_is_intlike(json_t *v);
double jv_num_d(json_t *v);
long long jv_num_i(json_t *v);
bool jv_eq(const jctx *c, json_t *a, json_t *b);
/* ordering -1/0/1 in *res; false when the types do not order */
bool jv_cmp(const jctx *c, json_t *a, json_t *b, int *res);
void jv_release(json_t **v, size_t n);

/* UTF-8: the character at s[i] (i < n): returns the index after it and sets *cp; an
 * ill-formed subsequence is one character, U+FFFD. */
size_t jv_u8_next(const char *s, size_t n, size_t i, uint32_t *cp);
/* Python's str.isspace */
bool jv_py_space(uint32_t cp);
/* character byte offsets: offs[0..count], offs[count] == n (malloc'ed; NULL, recorded) */
size_t *jv_u8_offsets(jctx *c, const char *s, size_t n, size_t *count);

/* Python's str() and repr() appended to b */
bool jv_str(jctx *c, lh_strbuf *b, json_t *v);
bool jv_repr(jctx *c, lh_strbuf *b, json_t *v);
json_t *jv_str_of(jctx *c, json_t *v);
bool jv_need_str(jctx *c, const jnode *at, json_t *v, const char *what);

/* transformers' tojson (Python's json.dumps) */
typedef struct jv_jsonopt {
    const char *indent; /* NULL: one line */
    const char *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} jv_jsonopt;
bool jv_dump_json(jctx *c, const jnode *at, lh_strbuf *b, json_t *v, const jv_jsonopt *o,
                  int level);

/* Whether item nests at most JINJA_MAX_VALUE_DEPTH deep and, when forbidden is set (a
 * namespace assigned into), does not contain it; recorded when not. */
bool jv_check_nesting(jctx *c, const jnode *at, json_t *item, json_t *forbidden);
/* [[key, value]...] of a dict */
json_t *jv_items(jctx *c, json_t *v);
/* the items iteration gives: list items, dict keys, string characters (undefined: none) */
json_t *jv_iter_list(jctx *c, const jnode *at, json_t *v);

/* ---- built-ins (jinja_builtins.c) ------------------------------------------------------ */

/* what a built-in is; JB_NO_METHOD: the methods of a receiver that has none */
enum { JB_FILTER, JB_TEST, JB_FUNCTION, JB_STR_METHOD, JB_DICT_METHOD, JB_NO_METHOD, JB_KINDS };

typedef struct jbuiltin jbuiltin;
/* subj: the filtered/tested value or a method's receiver (NULL for a function); args: one
 * value or NULL (absent) per parameter. A test returns json_true()/json_false(). A
 * function with raw set gets args NULL and evaluates at's arguments itself. NULL: failed
 * (recorded, except out of memory after a filter, which the caller records). */
typedef json_t *(*jbuiltin_fn)(jctx *c, const jbuiltin *b, const jnode *at, json_t *subj,
                               json_t **args);

#define JB_MAX_PARAMS 4
typedef struct jparam {
    const char *name;
    const char *def; /* JSON text of the value an absent argument takes; NULL: stays absent */
} jparam;

struct jbuiltin {
    int kind;
    const char *name;
    jbuiltin_fn fn;
    int op;   /* which variant of fn (e.g. lstrip, rstrip, strip share one) */
    bool raw; /* a function that takes its arguments unevaluated */
    size_t nparams;
    jparam params[JB_MAX_PARAMS];
};

/* The built-in of that kind and name; for an unknown name, an entry whose fn is NULL with the
 * parameters every built-in of that kind accepts (none; a method's three). Never NULL. */
const jbuiltin *jb_find(int kind, const char *name);
/* Fills absent arguments with their defaults; false (recorded) when one cannot be made. */
bool jb_defaults(jctx *c, const jbuiltin *b, json_t **args);
/* Runs test b (jb_find's entry for the name t) on v with arg (may be NULL); an unknown test
 * is LH_E_UNSUPPORTED at `at`. */
bool jb_run_test(jctx *c, const jnode *at, const jbuiltin *b, const char *t, json_t *v,
                 json_t *arg, bool *res);

/* ---- the evaluator (jinja_eval.c) ------------------------------------------------------ */

json_t *jinja_eval(jctx *c, const jnode *nd);

#endif
