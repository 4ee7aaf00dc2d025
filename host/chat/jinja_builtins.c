/* The Jinja subset's built-ins (see jinja.h): every filter, test, global function and method
 * is one entry of one table -- its name, its parameters (names and the defaults absent ones
 * take) and its function. The parser checks filter and test names against it; the evaluator
 * looks a name up once and calls through it. */
#include "chat/jinja_internal.h"
#include "core/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* A required argument: false (and the template fails with "WHO needs WHAT") when x is
 * absent. */
static bool need_arg(jctx *c, const jnode *at, const json_t *x, const char *who,
                     const char *what)
{
    if (!x)
        jv_fail(c, at, LH_E_CONFIG, "%s needs %s", who, what);
    return x != NULL;
}

#define BUILTIN(name) \
    static json_t *name(jctx *c, const jbuiltin *b, const jnode *at, json_t *v, json_t **a)

/* ---- string helpers -------------------------------------------------------------------- */

static bool in_chars(const char *cs, size_t ncs, uint32_t cp)
{
    uint32_t x;
    for (size_t q = 0; q < ncs;) {
        q = jv_u8_next(cs, ncs, q, &x);
        if (x == cp)
            return true;
    }
    return false;
}

/* strip: which 1 left, 2 right, 3 both; chars not a string: whitespace */
static json_t *do_strip(jctx *c, json_t *s, json_t *chars, int which)
{
    const char *p = json_string_value(s);
    size_t n = json_string_length(s);
    const char *cs = json_is_string(chars) ? json_string_value(chars) : NULL;
    size_t ncs = cs ? json_string_length(chars) : 0;
#define IN_SET(cp) (cs ? in_chars(cs, ncs, (cp)) : jv_py_space(cp))
    size_t a = 0, e = n;
    uint32_t cp;
    if (which & 1)
        while (a < e) {
            size_t next = jv_u8_next(p, n, a, &cp);
            if (!IN_SET(cp))
                break;
            a = next;
        }
    if (which & 2) /* the end of the last character not in the set */
        for (size_t i = e = a; i < n;) {
            i = jv_u8_next(p, n, i, &cp);
            if (!IN_SET(cp))
                e = i;
        }
#undef IN_SET
    return jv_newstr(c, p + a, e - a);
}

static bool is_cased(uint32_t cp)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* 0 lower, 1 upper, 2 capitalize, 3 str.title, 4 Jinja's title filter (words split at -({[<
 * and whitespace). Simple (one code point to one) Unicode case mapping, by utf8proc. */
static json_t *case_map(jctx *c, json_t *s, int mode)
{
    const char *p = json_string_value(s);
    size_t n = json_string_length(s);
    lh_strbuf b = JV_BUF;
    bool prev_cased = false, at_word_start = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t next = jv_u8_next(p, n, i, &cp);
        utf8proc_int32_t m;
        bool first = false;
        if (mode == 0)
            m = utf8proc_tolower((utf8proc_int32_t)cp);
        else if (mode == 1)
            m = utf8proc_toupper((utf8proc_int32_t)cp);
        else {
            first = mode == 2 ? i == 0 : mode == 3 ? !prev_cased : at_word_start;
            m = first ? utf8proc_totitle((utf8proc_int32_t)cp)
                      : utf8proc_tolower((utf8proc_int32_t)cp);
        }
        bool ok;
        if (cp == 0xDF && m != (utf8proc_int32_t)cp) {
            /* Python's full case mapping of U+00DF: "SS" (upper), "Ss" (title) */
            ok = jv_add(c, &b, mode == 1 ? "SS" : "Ss", 2);
            prev_cased = true;
            at_word_start = false;
        } else {
            prev_cased = is_cased(cp);
            at_word_start = cp < 0x80 && strchr("-({[< \t\n\r\f\v", (int)cp) != NULL && cp != 0;
            ok = jv_add_cp(c, &b, (uint32_t)m);
        }
        if (!ok) {
            lh_strbuf_free(&b);
            return NULL;
        }
        i = next;
    }
    return jv_take(c, &b);
}

/* the first index from i whose character is (space) or is not (!space) whitespace */
static size_t skip_space(const char *p, size_t n, size_t i, bool space)
{
    while (i < n) {
        uint32_t cp;
        size_t next = jv_u8_next(p, n, i, &cp);
        if (jv_py_space(cp) != space)
            break;
        i = next;
    }
    return i;
}

static bool append_str(jctx *c, json_t *list, const char *s, size_t n)
{
    return json_array_append_new(list, json_stringn_nocheck(s, n)) == 0 || JV_OOM(c);
}

static json_t *do_split(jctx *c, const jnode *at, json_t *s, json_t *sep, json_t *maxsplit)
{
    const char *p = json_string_value(s);
    size_t n = json_string_length(s);
    long long maxs = jv_is_intlike(maxsplit) ? jv_num_i(maxsplit) : -1;
    json_t *out = json_array();
    if (!out) {
        JV_OOM(c);
        return NULL;
    }
    bool ok = true;
    long long splits = 0;
    size_t i = 0;
    if (json_is_null(sep)) {
        for (;;) {
            i = skip_space(p, n, i, true);
            if (i >= n)
                break;
            /* past maxsplit Python keeps the remainder's trailing whitespace */
            size_t j = maxs >= 0 && splits >= maxs ? n : skip_space(p, n, i, false);
            if (!(ok = append_str(c, out, p + i, j - i)))
                break;
            splits++;
            i = j;
        }
    } else if (!jv_need_str(c, at, sep, "split's separator")) {
        ok = false;
    } else if (!json_string_length(sep)) {
        ok = jv_fail(c, at, LH_E_CONFIG, "split: empty separator");
    } else {
        const char *sp = json_string_value(sep);
        size_t ns = json_string_length(sep);
        for (;;) {
            const char *hit = NULL;
            if (maxs < 0 || splits < maxs)
                hit = memmem(p + i, n - i, sp, ns);
            size_t j = hit ? (size_t)(hit - p) : n;
            if (!(ok = append_str(c, out, p + i, j - i)) || !hit)
                break;
            splits++;
            i = j + ns;
        }
    }
    if (!ok) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *do_replace(jctx *c, const jnode *at, json_t *s, json_t *old, json_t *new_,
                          json_t *count)
{
    if (!jv_need_str(c, at, s, "replace") || !jv_need_str(c, at, old, "replace") ||
        !jv_need_str(c, at, new_, "replace"))
        return NULL;
    const char *p = json_string_value(s), *o = json_string_value(old);
    const char *nw = json_string_value(new_);
    size_t n = json_string_length(s), no = json_string_length(old);
    size_t nn = json_string_length(new_);
    long long maxc = jv_is_intlike(count) ? jv_num_i(count) : -1;
    lh_strbuf b = JV_BUF;
    size_t i = 0;
    long long done = 0;
    bool ok = true;
    if (!no) {
        /* Python inserts new between every character */
        for (;;) {
            if (maxc >= 0 && done >= maxc) {
                ok = jv_add(c, &b, p + i, n - i);
                break;
            }
            ok = jv_add(c, &b, nw, nn);
            done++;
            if (!ok || i >= n)
                break;
            uint32_t cp;
            size_t j = jv_u8_next(p, n, i, &cp);
            ok = jv_add(c, &b, p + i, j - i);
            if (!ok)
                break;
            i = j;
        }
    } else {
        for (;;) {
            const char *hit = (maxc < 0 || done < maxc) ? memmem(p + i, n - i, o, no) : NULL;
            size_t j = hit ? (size_t)(hit - p) : n;
            ok = jv_add(c, &b, p + i, j - i);
            if (!ok || !hit)
                break;
            ok = jv_add(c, &b, nw, nn);
            if (!ok)
                break;
            done++;
            i = j + no;
        }
    }
    if (!ok) {
        lh_strbuf_free(&b);
        return NULL;
    }
    return jv_take(c, &b);
}

/* ---- filters (v: the filtered value) --------------------------------------------------- */

BUILTIN(f_trim)
{
    (void)b;
    return jv_need_str(c, at, v, "trim") ? do_strip(c, v, a[0], 3) : NULL;
}

BUILTIN(f_length)
{
    (void)b, (void)a;
    if (jv_is_undef(c, v))
        return json_integer(0);
    if (json_is_string(v))
        return json_integer(
            (json_int_t)lh_utf8_count(json_string_value(v), json_string_length(v)));
    if (json_is_array(v))
        return json_integer((json_int_t)json_array_size(v));
    if (json_is_object(v))
        return json_integer((json_int_t)json_object_size(v));
    jv_fail(c, at, LH_E_CONFIG, "length of a %s", jv_type_name(c, v));
    return NULL;
}

/* a: ensure_ascii, indent, separators, sort_keys */
BUILTIN(f_tojson)
{
    (void)b;
    jv_jsonopt o = {NULL, ", ", ": ", jv_truthy(c, a[3]), jv_truthy(c, a[0])};
    char ind[64];
    if (!json_is_null(a[1])) {
        if (jv_is_intlike(a[1])) {
            long long k = jv_num_i(a[1]);
            if (k > 32)
                jv_fail(c, at, LH_E_UNSUPPORTED, "tojson indent above 32");
            size_t m = 0;
            for (long long i = 0; i < k && m < sizeof ind - 1; i++)
                ind[m++] = ' ';
            ind[m] = 0;
            o.indent = ind;
        } else if (json_is_string(a[1])) {
            o.indent = json_string_value(a[1]);
        } else {
            jv_fail(c, at, LH_E_CONFIG, "tojson indent must be an int or a string");
        }
        o.item_sep = ",";
    }
    if (c->failed)
        return NULL;
    if (!json_is_null(a[2])) {
        if (!json_is_array(a[2]) || json_array_size(a[2]) != 2 ||
            !json_is_string(json_array_get(a[2], 0)) || !json_is_string(json_array_get(a[2], 1))) {
            jv_fail(c, at, LH_E_CONFIG, "tojson separators must be two strings");
            return NULL;
        }
        o.item_sep = json_string_value(json_array_get(a[2], 0));
        o.key_sep = json_string_value(json_array_get(a[2], 1));
    }
    lh_strbuf buf = JV_BUF;
    if (jv_dump_json(c, at, &buf, v, &o, 0))
        return jv_take(c, &buf);
    lh_strbuf_free(&buf);
    return NULL;
}

/* capitalize, upper, lower, title (op: case_map's mode) of str(v) */
BUILTIN(f_case)
{
    (void)at, (void)a;
    json_t *s = jv_str_of(c, v);
    json_t *r = s ? case_map(c, s, b->op) : NULL;
    json_decref(s);
    return r;
}

/* a: default_value, boolean */
BUILTIN(f_default)
{
    (void)b, (void)at;
    bool use = jv_is_undef(c, v) || (jv_truthy(c, a[1]) && !jv_truthy(c, v));
    return json_incref(use ? a[0] : v);
}

BUILTIN(f_items)
{
    (void)b, (void)a;
    if (jv_is_undef(c, v))
        return json_array();
    if (json_is_object(v))
        return jv_items(c, v);
    jv_fail(c, at, LH_E_CONFIG, "items of a %s", jv_type_name(c, v));
    return NULL;
}

/* a: d, attribute */
BUILTIN(f_join)
{
    (void)b;
    if (a[1]) {
        jv_fail(c, at, LH_E_UNSUPPORTED, "join's attribute argument");
        return NULL;
    }
    json_t *l = jv_iter_list(c, at, v), *r = NULL;
    if (!l)
        return NULL;
    lh_strbuf buf = JV_BUF;
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(l); i++)
        ok = (!i || jv_str(c, &buf, a[0])) && jv_str(c, &buf, json_array_get(l, i));
    if (ok)
        r = jv_take(c, &buf);
    else
        lh_strbuf_free(&buf);
    json_decref(l);
    return r;
}

/* first (op 0) and last (op 1) */
BUILTIN(f_end)
{
    (void)a;
    json_t *l = jv_iter_list(c, at, v);
    if (!l)
        return NULL;
    size_t n = json_array_size(l);
    json_t *r = n ? json_incref(json_array_get(l, b->op ? n - 1 : 0)) : jv_undef(c);
    json_decref(l);
    return r;
}

BUILTIN(f_list)
{
    (void)b, (void)a;
    return jv_iter_list(c, at, v);
}

BUILTIN(f_reverse)
{
    (void)b, (void)a;
    json_t *l = jv_iter_list(c, at, v), *r;
    if (!l)
        return NULL;
    size_t n = json_array_size(l);
    if (json_is_string(v)) {
        lh_strbuf buf = JV_BUF;
        bool ok = true;
        for (size_t i = n; ok && i > 0; i--)
            ok = jv_str(c, &buf, json_array_get(l, i - 1));
        r = ok ? jv_take(c, &buf) : (lh_strbuf_free(&buf), NULL);
    } else {
        r = json_array();
        for (size_t i = n; r && i > 0; i--)
            json_array_append(r, json_array_get(l, i - 1));
    }
    json_decref(l);
    return r;
}

BUILTIN(f_string)
{
    (void)b, (void)at, (void)a;
    return jv_str_of(c, v);
}

/* a: old, new, count */
BUILTIN(f_replace)
{
    (void)b;
    json_t *s = jv_str_of(c, v), *r = NULL;
    if (s && a[0] && a[1])
        r = do_replace(c, at, s, a[0], a[1], a[2]);
    else if (s)
        jv_fail(c, at, LH_E_CONFIG, "replace needs two arguments");
    json_decref(s);
    return r;
}

/* int (op 1; a: default, base) and float (op 0; a: default) */
BUILTIN(f_number)
{
    bool isint = b->op;
    json_t *r = NULL;
    if (isint && a[1])
        jv_fail(c, at, LH_E_UNSUPPORTED, "int's base argument");
    else if (jv_is_num(v))
        r = isint ? json_integer(json_is_real(v) ? (json_int_t)json_real_value(v) : jv_num_i(v))
                  : json_real(jv_num_d(v));
    else if (json_is_string(v)) {
        json_t *t = do_strip(c, v, NULL, 3);
        if (t) {
            char *end = NULL;
            const char *s = json_string_value(t);
            if (isint) {
                long long x = strtoll(s, &end, 10);
                r = (*s && !*end) ? json_integer(x) : NULL;
            } else {
                double x = strtod(s, &end);
                r = (*s && !*end) ? json_real(x) : NULL;
            }
            json_decref(t);
        }
    }
    if (!r && !c->failed)
        r = json_incref(a[0]);
    return r;
}

enum { SEL_KEEP = 1, SEL_ATTR = 2 };

/* select (op KEEP), reject (0), selectattr (KEEP | ATTR), rejectattr (ATTR); a: [attribute,]
 * test, arg */
BUILTIN(f_select)
{
    bool attr = b->op & SEL_ATTR, keep = b->op & SEL_KEEP;
    json_t *test = attr ? a[1] : a[0], *targ = attr ? a[2] : a[1];
    if (attr && (!a[0] || !json_is_string(a[0]))) {
        jv_fail(c, at, LH_E_CONFIG, "%s needs an attribute name", b->name);
        return NULL;
    }
    if (test && !json_is_string(test)) {
        jv_fail(c, at, LH_E_CONFIG, "%s needs a test name", b->name);
        return NULL;
    }
    json_t *l = jv_iter_list(c, at, v);
    if (!l)
        return NULL;
    const jbuiltin *tb = test ? jb_find(JB_TEST, json_string_value(test)) : NULL; /* once */
    json_t *r = json_array();
    for (size_t i = 0; r && !c->failed && i < json_array_size(l); i++) {
        json_t *item = json_array_get(l, i), *subj = item;
        if (attr) {
            subj = json_is_object(item) ? json_object_get(item, json_string_value(a[0])) : NULL;
            if (!subj)
                subj = c->undef;
        }
        bool t = false;
        if (test) {
            if (!jb_run_test(c, at, tb, json_string_value(test), subj, targ, &t))
                break;
        } else {
            t = jv_truthy(c, subj);
        }
        if (t == keep)
            json_array_append(r, item);
    }
    if (c->failed) {
        json_decref(r);
        r = NULL;
    }
    json_decref(l);
    return r;
}

/* a: filter, attribute, default */
BUILTIN(f_map)
{
    (void)b;
    if (a[0] || !a[1]) {
        jv_fail(c, at, LH_E_UNSUPPORTED, "map with a filter name (only attribute= is supported)");
        return NULL;
    }
    if (!json_is_string(a[1])) {
        jv_fail(c, at, LH_E_CONFIG, "map's attribute must be a string");
        return NULL;
    }
    json_t *l = jv_iter_list(c, at, v);
    if (!l)
        return NULL;
    json_t *r = json_array();
    for (size_t i = 0; r && i < json_array_size(l); i++) {
        json_t *item = json_array_get(l, i);
        json_t *subj = json_is_object(item) ? json_object_get(item, json_string_value(a[1]))
                                            : NULL;
        json_array_append(r, subj ? subj : a[2] ? a[2] : c->undef);
    }
    json_decref(l);
    return r;
}

BUILTIN(f_abs)
{
    (void)b, (void)a;
    if (json_is_integer(v) || json_is_boolean(v))
        return json_integer(llabs(jv_num_i(v)));
    if (json_is_real(v))
        return json_real(fabs(json_real_value(v)));
    jv_fail(c, at, LH_E_CONFIG, "abs of a %s", jv_type_name(c, v));
    return NULL;
}

/* ---- tests (v: the tested value; a[0]: the argument or NULL) ---------------------------- */

enum {
    IS_DEFINED, IS_UNDEFINED, IS_NONE, IS_STRING, IS_NUMBER, IS_INTEGER, IS_FLOAT, IS_BOOLEAN,
    IS_MAPPING, IS_ITERABLE, IS_TRUE, IS_FALSE
};

/* the tests of what a value is (op: which) */
BUILTIN(t_kind)
{
    (void)at, (void)a;
    bool u = jv_is_undef(c, v), r;
    switch (b->op) {
    case IS_DEFINED: r = !u; break;
    case IS_UNDEFINED: r = u; break;
    case IS_NONE: r = !u && json_is_null(v); break;
    case IS_STRING: r = !u && json_is_string(v); break;
    case IS_NUMBER: r = !u && jv_is_num(v); break;
    case IS_INTEGER: r = !u && json_is_integer(v); break;
    case IS_FLOAT: r = !u && json_is_real(v); break;
    case IS_BOOLEAN: r = !u && json_is_boolean(v); break;
    case IS_MAPPING: r = !u && json_is_object(v) && !jv_is_namespace(c, v); break;
    case IS_ITERABLE: r = u || json_is_array(v) || json_is_object(v) || json_is_string(v); break;
    case IS_TRUE: r = !u && json_is_true(v); break;
    default: r = !u && json_is_false(v); break;
    }
    return json_boolean(r);
}

/* odd (op 0), even (op 1), divisibleby (op 2) */
BUILTIN(t_divisible)
{
    long long d = b->op == 2 ? (a[0] && jv_is_intlike(a[0]) ? jv_num_i(a[0]) : 0) : 2;
    if (jv_is_undef(c, v) || !jv_is_intlike(v) || d == 0) {
        jv_fail(c, at, LH_E_CONFIG, "test '%s' needs integers", b->name);
        return NULL;
    }
    long long m = d == -1 ? 0 : jv_num_i(v) % d; /* LLONG_MIN % -1 traps */
    return json_boolean(b->op == 0 ? m != 0 : m == 0);
}

/* eq, equalto, == (op 0) and ne (op 1) */
BUILTIN(t_eq)
{
    if (!a[0]) {
        jv_fail(c, at, LH_E_CONFIG, "test '%s' needs an argument", b->name);
        return NULL;
    }
    return json_boolean(jv_eq(c, v, a[0]) != (bool)b->op);
}

/* ---- global functions (v: NULL) -------------------------------------------------------- */

/* a: message */
BUILTIN(fn_raise_exception)
{
    (void)b, (void)v;
    lh_strbuf buf = JV_BUF;
    jv_str(c, &buf, a[0]);
    if (!c->failed) {
        c->failed = true;
        c->code = LH_E_USAGE;
        lh_err_set(c->err, LH_E_USAGE, "chat template %d:%d raised an exception: %s", at->line,
                   at->col, buf.s ? buf.s : "");
    }
    lh_strbuf_free(&buf);
    return NULL;
}

/* a: format */
BUILTIN(fn_strftime_now)
{
    (void)v;
    if (!need_arg(c, at, a[0], "strftime_now", "a format"))
        return NULL;
    if (!jv_need_str(c, at, a[0], b->name))
        return NULL;
    struct tm tm;
    time_t now;
    if (c->env && c->env->fixed_now) {
        now = (time_t)c->env->now_unix;
        gmtime_r(&now, &tm);
    } else {
        now = time(NULL);
        localtime_r(&now, &tm);
    }
    char buf[1024];
    size_t n = json_string_length(a[0]) ? strftime(buf, sizeof buf, json_string_value(a[0]), &tm)
                                        : 0;
    return jv_newstr(c, buf, n);
}

static bool keep_namespace(jctx *c, json_t *o)
{
    if (c->nns == c->capns) {
        size_t ncap = c->capns ? c->capns * 2 : 8;
        json_t **nn = realloc(c->namespaces, ncap * sizeof *nn);
        if (!nn)
            return JV_OOM(c);
        c->namespaces = nn;
        c->capns = ncap;
    }
    c->namespaces[c->nns++] = json_incref(o);
    return true;
}

/* dict (op 0) and namespace (op 1): one optional dict, then keyword arguments (raw) */
BUILTIN(fn_dict)
{
    (void)v, (void)a;
    const char *f = b->name;
    json_t *o = json_object();
    if (!o) {
        JV_OOM(c);
        return NULL;
    }
    if (at->nkids > 1) {
        json_decref(o);
        jv_fail(c, at, LH_E_CONFIG, "%s takes at most one positional argument", f);
        return NULL;
    }
    if (at->nkids == 1) {
        json_t *init = jinja_eval(c, at->kids[0]);
        if (!init) {
            json_decref(o);
            return NULL;
        }
        if (!json_is_object(init)) {
            jv_fail(c, at, LH_E_CONFIG, "%s needs a dict, got %s", f, jv_type_name(c, init));
            json_decref(init);
            json_decref(o);
            return NULL;
        }
        json_object_update(o, init);
        json_decref(init);
    }
    for (size_t k = 0; k < at->nkw; k++) {
        json_t *x = jinja_eval(c, at->kwvals[k]);
        if (x && !jv_check_nesting(c, at, x, NULL)) {
            json_decref(x);
            x = NULL;
        }
        if (!x) {
            json_decref(o);
            return NULL;
        }
        if (jv_is_undef(c, x)) {
            json_decref(x);
            x = json_null(); /* a stored undefined renders as nothing: keep it falsy */
        }
        json_object_set_new(o, at->kwnames[k], x);
    }
    if (b->op && !keep_namespace(c, o)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* a: start, stop, step */
BUILTIN(fn_range)
{
    (void)b, (void)v;
    long long start = 0, stop = 0, step = 1;
    bool ok = a[0] != NULL;
    for (int i = 0; i < 3; i++)
        if (a[i] && !jv_is_intlike(a[i]))
            ok = false;
    if (!ok) {
        jv_fail(c, at, LH_E_CONFIG, "range needs integers");
        return NULL;
    }
    if (a[1]) {
        start = jv_num_i(a[0]);
        stop = jv_num_i(a[1]);
        if (a[2])
            step = jv_num_i(a[2]);
    } else {
        stop = jv_num_i(a[0]);
    }
    if (step == 0) {
        jv_fail(c, at, LH_E_CONFIG, "range step must not be zero");
        return NULL;
    }
    json_t *out = json_array();
    long long count = 0;
    for (long long i = start; out && (step > 0 ? i < stop : i > stop); i += step) {
        if (++count > JINJA_MAX_ITERS) {
            json_decref(out);
            jv_fail(c, at, LH_E_UNSUPPORTED, "range longer than %lld", JINJA_MAX_ITERS);
            return NULL;
        }
        json_array_append_new(out, json_integer(i));
    }
    if (!out)
        JV_OOM(c);
    return out;
}

/* ---- methods (v: the receiver; a: up to three positional arguments) --------------------- */

/* strip (op 3), lstrip (1), rstrip (2); a: chars */
BUILTIN(m_strip)
{
    if (!json_is_null(a[0]) && !jv_need_str(c, at, a[0], b->name))
        return NULL;
    return do_strip(c, v, a[0], b->op);
}

/* a: sep, maxsplit */
BUILTIN(m_split)
{
    (void)b;
    return do_split(c, at, v, a[0], a[1]);
}

/* startswith (op 0), endswith (op 1); a: prefix or suffix. No argument: NULL unrecorded, as
 * it always was. */
BUILTIN(m_affix)
{
    if (!need_arg(c, at, a[0], b->name, "one argument"))
        return NULL;
    if (!jv_need_str(c, at, a[0], b->name))
        return NULL;
    size_t n = json_string_length(v), k = json_string_length(a[0]);
    return json_boolean(k <= n && memcmp(json_string_value(v) + (b->op ? n - k : 0),
                                         json_string_value(a[0]), k) == 0);
}

/* upper, lower, capitalize, title (op: case_map's mode) */
BUILTIN(m_case)
{
    (void)at, (void)a;
    return case_map(c, v, b->op);
}

/* a: old, new, count */
BUILTIN(m_replace)
{
    (void)b;
    if (!need_arg(c, at, a[0] && a[1] ? a[0] : NULL, "replace", "two arguments"))
        return NULL;
    return do_replace(c, at, v, a[0], a[1], a[2]);
}

BUILTIN(m_items)
{
    (void)b, (void)at, (void)a;
    return jv_items(c, v);
}

/* keys (op 0), values (op 1) */
BUILTIN(m_keys)
{
    (void)at, (void)a;
    json_t *r = json_array();
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!r)
            break;
        json_array_append_new(r, b->op ? json_incref(x) : json_string_nocheck(k));
    }
    if (!r)
        JV_OOM(c);
    return r;
}

/* a: key, default */
BUILTIN(m_get)
{
    (void)b;
    if (!need_arg(c, at, a[0], "get", "a key"))
        return NULL;
    json_t *x = json_is_string(a[0]) ? json_object_get(v, json_string_value(a[0])) : NULL;
    return json_incref(x ? x : a[1]);
}

/* ---- the table ------------------------------------------------------------------------- */

#define FILTER(name, fn, op, ...) {JB_FILTER, name, fn, op, false, __VA_ARGS__}
#define TEST(name, fn, op) {JB_TEST, name, fn, op, false, 1, {{"arg", NULL}}}
#define FUNCTION(name, fn, op, raw, ...) {JB_FUNCTION, name, fn, op, raw, __VA_ARGS__}
/* methods take up to three positional arguments, by keyword a, b and c */
#define METHOD(kind, name, fn, op, da, db, dc) \
    {kind, name, fn, op, false, 3, {{"a", da}, {"b", db}, {"c", dc}}}
#define STR_METHOD(name, fn, op, da, db, dc) METHOD(JB_STR_METHOD, name, fn, op, da, db, dc)
#define DICT_METHOD(name, fn, op, da, db, dc) METHOD(JB_DICT_METHOD, name, fn, op, da, db, dc)

static const jbuiltin builtins[] = {
    FILTER("trim", f_trim, 0, 1, {{"chars", "null"}}),
    FILTER("length", f_length, 0, 0, {{0}}),
    FILTER("count", f_length, 0, 0, {{0}}),
    FILTER("tojson", f_tojson, 0, 4,
           {{"ensure_ascii", "false"}, {"indent", "null"}, {"separators", "null"},
            {"sort_keys", "false"}}),
    FILTER("capitalize", f_case, 2, 0, {{0}}),
    FILTER("upper", f_case, 1, 0, {{0}}),
    FILTER("lower", f_case, 0, 0, {{0}}),
    FILTER("title", f_case, 4, 0, {{0}}),
    FILTER("default", f_default, 0, 2, {{"default_value", "\"\""}, {"boolean", "false"}}),
    FILTER("d", f_default, 0, 2, {{"default_value", "\"\""}, {"boolean", "false"}}),
    FILTER("items", f_items, 0, 0, {{0}}),
    FILTER("join", f_join, 0, 2, {{"d", "\"\""}, {"attribute", NULL}}),
    FILTER("first", f_end, 0, 0, {{0}}),
    FILTER("last", f_end, 1, 0, {{0}}),
    FILTER("string", f_string, 0, 0, {{0}}),
    FILTER("list", f_list, 0, 0, {{0}}),
    FILTER("reverse", f_reverse, 0, 0, {{0}}),
    FILTER("replace", f_replace, 0, 3, {{"old", NULL}, {"new", NULL}, {"count", "-1"}}),
    FILTER("int", f_number, 1, 2, {{"default", "0"}, {"base", NULL}}),
    FILTER("float", f_number, 0, 1, {{"default", "0.0"}}),
    FILTER("abs", f_abs, 0, 0, {{0}}),
    FILTER("select", f_select, SEL_KEEP, 2, {{"test", NULL}, {"arg", NULL}}),
    FILTER("reject", f_select, 0, 2, {{"test", NULL}, {"arg", NULL}}),
    FILTER("selectattr", f_select, SEL_KEEP | SEL_ATTR, 3,
           {{"attribute", NULL}, {"test", NULL}, {"arg", NULL}}),
    FILTER("rejectattr", f_select, SEL_ATTR, 3,
           {{"attribute", NULL}, {"test", NULL}, {"arg", NULL}}),
    FILTER("map", f_map, 0, 3, {{"filter", NULL}, {"attribute", NULL}, {"default", NULL}}),

    TEST("defined", t_kind, IS_DEFINED),
    TEST("undefined", t_kind, IS_UNDEFINED),
    TEST("none", t_kind, IS_NONE),
    TEST("string", t_kind, IS_STRING),
    TEST("number", t_kind, IS_NUMBER),
    TEST("integer", t_kind, IS_INTEGER),
    TEST("float", t_kind, IS_FLOAT),
    TEST("boolean", t_kind, IS_BOOLEAN),
    TEST("mapping", t_kind, IS_MAPPING),
    TEST("iterable", t_kind, IS_ITERABLE),
    TEST("sequence", t_kind, IS_ITERABLE),
    TEST("true", t_kind, IS_TRUE),
    TEST("false", t_kind, IS_FALSE),
    TEST("odd", t_divisible, 0),
    TEST("even", t_divisible, 1),
    TEST("divisibleby", t_divisible, 2),
    TEST("eq", t_eq, 0),
    TEST("equalto", t_eq, 0),
    TEST("==", t_eq, 0),
    TEST("ne", t_eq, 1),

    FUNCTION("raise_exception", fn_raise_exception, 0, false, 1, {{"message", "\"\""}}),
    FUNCTION("strftime_now", fn_strftime_now, 0, false, 1, {{"format", NULL}}),
    FUNCTION("namespace", fn_dict, 1, true, 0, {{0}}),
    FUNCTION("dict", fn_dict, 0, true, 0, {{0}}),
    FUNCTION("range", fn_range, 0, false, 3, {{"start", NULL}, {"stop", NULL}, {"step", NULL}}),

    STR_METHOD("strip", m_strip, 3, "null", NULL, NULL),
    STR_METHOD("lstrip", m_strip, 1, "null", NULL, NULL),
    STR_METHOD("rstrip", m_strip, 2, "null", NULL, NULL),
    STR_METHOD("split", m_split, 0, "null", "-1", NULL),
    STR_METHOD("startswith", m_affix, 0, NULL, NULL, NULL),
    STR_METHOD("endswith", m_affix, 1, NULL, NULL, NULL),
    STR_METHOD("upper", m_case, 1, NULL, NULL, NULL),
    STR_METHOD("lower", m_case, 0, NULL, NULL, NULL),
    STR_METHOD("capitalize", m_case, 2, NULL, NULL, NULL),
    STR_METHOD("title", m_case, 3, NULL, NULL, NULL),
    STR_METHOD("replace", m_replace, 0, NULL, NULL, "-1"),
    DICT_METHOD("items", m_items, 0, NULL, NULL, NULL),
    DICT_METHOD("keys", m_keys, 0, NULL, NULL, NULL),
    DICT_METHOD("values", m_keys, 1, NULL, NULL, NULL),
    DICT_METHOD("get", m_get, 0, NULL, "null", NULL),
};

/* what an unknown name of each kind stands for */
static const jbuiltin unknown[JB_KINDS] = {
    [JB_FILTER] = FILTER("", NULL, 0, 0, {{0}}),
    [JB_TEST] = TEST("", NULL, 0),
    [JB_FUNCTION] = FUNCTION("", NULL, 0, false, 0, {{0}}),
    [JB_STR_METHOD] = STR_METHOD("", NULL, 0, NULL, NULL, NULL),
    [JB_DICT_METHOD] = DICT_METHOD("", NULL, 0, NULL, NULL, NULL),
    [JB_NO_METHOD] = METHOD(JB_NO_METHOD, "", NULL, 0, NULL, NULL, NULL),
};

const jbuiltin *jb_find(int kind, const char *name)
{
    for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
        if (builtins[i].kind == kind && strcmp(builtins[i].name, name) == 0)
            return &builtins[i];
    return &unknown[kind];
}

bool jb_defaults(jctx *c, const jbuiltin *b, json_t **args)
{
    for (size_t i = 0; i < b->nparams; i++)
        if (!args[i] && b->params[i].def &&
            !(args[i] = json_loads(b->params[i].def, JSON_DECODE_ANY, NULL)))
            return JV_OOM(c);
    return true;
}

bool jb_run_test(jctx *c, const jnode *at, const jbuiltin *b, const char *t, json_t *v,
                 json_t *arg, bool *res)
{
    *res = false;
    if (!b->fn)
        return jv_fail(c, at, LH_E_UNSUPPORTED, "unknown test '%s'", t);
    json_t *r = b->fn(c, b, at, v, &arg);
    if (!r)
        return false;
    *res = json_is_true(r);
    json_decref(r);
    return true;
}
