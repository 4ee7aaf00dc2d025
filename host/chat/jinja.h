/* Internal: an interpreter for the subset of Jinja that chat templates use, with the
 * environment transformers renders them in (trim_blocks, lstrip_blocks, loop controls, its own
 * tojson, raise_exception, strftime_now, namespace).
 *
 * The supported subset (anything else is LH_E_UNSUPPORTED naming the construct and line:col):
 *  statements: if/elif/else, for (one name or two for unpacking, an `if` filter, else),
 *    set NAME = expr, set NS.ATTR = expr, break, continue, generation (rendered as its body),
 *    {%- -%} {{- -}} {#- -#} and {%+ whitespace control, comments;
 *  expressions: string/int/float/bool/none literals, lists, dicts, names, .attr, [index],
 *    slices [a:b:c], + - * / // % **, ~, unary -/+, comparisons (chained too), and/or/not,
 *    in / not in, `a if c else b`, filters, `is` tests, calls of raise_exception,
 *    strftime_now, namespace, dict, range, and method calls on strings and dicts;
 *  filters: trim, length/count, tojson(indent, separators, sort_keys, ensure_ascii),
 *    capitalize, upper, lower, title, default/d, items, join, first, last, string, list,
 *    reverse, replace, int, float, abs;
 *  tests: defined, undefined, none, string, number, integer, float, boolean, mapping,
 *    iterable, sequence, true, false, odd, even, divisibleby, eq/equalto/ne;
 *  methods: strip/lstrip/rstrip, split, startswith, endswith, upper, lower, title,
 *    capitalize, replace (strings); items, keys, values, get (dicts).
 * Case mapping (upper, lower, capitalize, title) is utf8proc's simple one-to-one mapping
 * (Python maps e.g. "ß".upper() to "SS").
 *
 * Values are jansson values; undefined is its own value. Errors: syntax errors LH_E_CONFIG
 * with line:col; unsupported constructs LH_E_UNSUPPORTED with line:col; runtime type errors
 * LH_E_CONFIG with line:col; raise_exception(msg) LH_E_USAGE whose message ends with msg.
 * Nesting, loop iterations and output size are bounded. */
#ifndef LH_CHAT_JINJA_H
#define LH_CHAT_JINJA_H

#include "llmhost.h"

#include <jansson.h>
#include <stdint.h>

typedef struct lh_jinja lh_jinja;

/* Compiles template source (len bytes of UTF-8). */
lh_status lh_jinja_compile(const char *src, size_t len, lh_jinja **out, lh_err *err);
void lh_jinja_free(lh_jinja *t);

typedef struct lh_jinja_env {
    /* strftime_now's clock: when fixed, now_unix formatted in UTC; else the local time. */
    bool fixed_now;
    int64_t now_unix;
} lh_jinja_env;

/* Renders with the variables of `vars` (a JSON object, borrowed). *out malloc'ed, NUL-terminated. */
lh_status lh_jinja_render(const lh_jinja *t, json_t *vars, const lh_jinja_env *env, char **out,
                          size_t *len, lh_err *err);

#endif
