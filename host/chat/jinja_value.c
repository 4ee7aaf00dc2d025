/* The Jinja subset's values (see jinja.h): Python semantics for what JSON can hold, as Jinja 3
 * in transformers' ImmutableSandboxedEnvironment sees it -- truthiness, equality and ordering,
 * str() and repr(), tojson -- and the render context's errors and strings. */
#include "chat/jinja_internal.h"
#include "core/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lh_jinja_errorv(lh_err *err, lh_status code, int line, int col, const char *fmt,
                     va_list ap)
{
    char buf[1536];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (code == LH_E_NOMEM)
        lh_err_set(err, code, "out of memory");
    else if (line > 0)
        lh_err_set(err, code, "chat template %d:%d: %s", line, col, buf);
    else
        lh_err_set(err, code, "chat template: %s", buf);
}

bool jv_fail(jctx *c, const jnode *at, lh_status code, const char *fmt, ...)
{
    if (c->failed)
        return false;
    c->failed = true;
    c->code = code;
    va_list ap;
    va_start(ap, fmt);
    lh_jinja_errorv(c->err, code, at ? at->line : 0, at ? at->col : 0, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- strings --------------------------------------------------------------------------- */

bool jv_buf_ok(jctx *c, lh_strbuf *b)
{
    if (b->over)
        return jv_fail(c, NULL, LH_E_UNSUPPORTED, "a string longer than %zu bytes",
                       JINJA_MAX_OUTPUT);
    if (b->oom)
        return JV_OOM(c);
    return true;
}

bool jv_add(jctx *c, lh_strbuf *b, const char *s, size_t n)
{
    lh_strbuf_add(b, s, n);
    return jv_buf_ok(c, b);
}

bool jv_puts(jctx *c, lh_strbuf *b, const char *s) { return jv_add(c, b, s, strlen(s)); }

bool jv_add_cp(jctx *c, lh_strbuf *b, uint32_t cp)
{
    lh_strbuf_add_cp(b, cp);
    return jv_buf_ok(c, b);
}

json_t *jv_newstr(jctx *c, const char *s, size_t n)
{
    json_t *v = json_stringn_nocheck(s, n);
    if (!v)
        JV_OOM(c);
    return v;
}

json_t *jv_take(jctx *c, lh_strbuf *b)
{
    json_t *v = jv_buf_ok(c, b) ? jv_newstr(c, b->s ? b->s : "", b->len) : NULL;
    lh_strbuf_free(b);
    return v;
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */

size_t jv_u8_next(const char *s, size_t n, size_t i, uint32_t *cp)
{
    size_t bad = 1, k = lh_utf8_next(s + i, n - i, cp, &bad);
    if (!k)
        *cp = 0xFFFD;
    return i + (k ? k : bad);
}

bool jv_py_space(uint32_t cp)
{
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t *jv_u8_offsets(jctx *c, const char *s, size_t n, size_t *count)
{
    size_t k = lh_utf8_count(s, n);
    size_t *o = malloc((k + 1) * sizeof *o);
    if (!o) {
        JV_OOM(c);
        return NULL;
    }
    size_t j = 0;
    uint32_t cp;
    for (size_t i = 0; i < n; i = jv_u8_next(s, n, i, &cp))
        o[j++] = i;
    o[k] = n;
    *count = k;
    return o;
}

bool jv_need_str(jctx *c, const jnode *at, json_t *v, const char *what)
{
    if (json_is_string(v))
        return true;
    return jv_fail(c, at, LH_E_CONFIG, "%s needs a string, got %s", what, jv_type_name(c, v));
}

/* ---- types, truth, numbers ------------------------------------------------------------- */

bool jv_is_namespace(const jctx *c, const json_t *v)
{
    for (size_t i = 0; i < c->nns; i++)
        if (c->namespaces[i] == v)
            return true;
    return false;
}

const char *jv_type_name(const jctx *c, json_t *v)
{
    if (jv_is_undef(c, v))
        return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "dict";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE: case JSON_FALSE: return "bool";
    default: return "none";
    }
}

bool jv_truthy(const jctx *c, json_t *v)
{
    if (jv_is_undef(c, v))
        return false;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return true;
    default: return false;
    }
}

bool jv_is_num(json_t *v) { return json_is_number(v) || json_is_boolean(v); }
double jv_num_d(json_t *v)
{
    return json_is_boolean(v) ? (json_is_true(v) ? 1.0 : 0.0) : json_number_value(v);
}
bool jv_is_intlike(json_t *v) { return json_is_integer(v) || json_is_boolean(v); }
long long jv_num_i(json_t *v)
{
    return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : (long long)json_integer_value(v);
}

void jv_release(json_t **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(v[i]);
}

/* ---- comparisons ----------------------------------------------------------------------- */

bool jv_eq(const jctx *c, json_t *a, json_t *b)
{
    if (jv_is_undef(c, a) || jv_is_undef(c, b))
        return a == b;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (jv_is_intlike(a) && jv_is_intlike(b))
            return jv_num_i(a) == jv_num_i(b);
        return jv_num_d(a) == jv_num_d(b);
    }
    if (json_typeof(a) != json_typeof(b))
        return false;
    switch (json_typeof(a)) {
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_NULL: return true;
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!jv_eq(c, json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x) {
            json_t *y = json_object_get(b, k);
            if (!y || !jv_eq(c, x, y))
                return false;
        }
        return true;
    }
    default: return false;
    }
}

bool jv_cmp(const jctx *c, json_t *a, json_t *b, int *res)
{
    if (jv_is_undef(c, a) || jv_is_undef(c, b))
        return false;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (jv_is_intlike(a) && jv_is_intlike(b)) {
            long long x = jv_num_i(a), y = jv_num_i(b);
            *res = x < y ? -1 : x > y;
        } else {
            double x = jv_num_d(a), y = jv_num_d(b);
            *res = x < y ? -1 : x > y;
        }
        return true;
    }
    if (json_is_string(a) && json_is_string(b)) {
        size_t na = json_string_length(a), nb = json_string_length(b);
        int r = memcmp(json_string_value(a), json_string_value(b), na < nb ? na : nb);
        *res = r ? r : (na < nb ? -1 : na > nb ? 1 : 0);
        return true;
    }
    if (json_is_array(a) && json_is_array(b)) {
        size_t na = json_array_size(a), nb = json_array_size(b);
        for (size_t i = 0; i < na && i < nb; i++) {
            json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
            if (!jv_eq(c, x, y))
                return jv_cmp(c, x, y, res);
        }
        *res = na < nb ? -1 : na > nb;
        return true;
    }
    return false;
}

/* ---- nesting --------------------------------------------------------------------------- */

static bool enter_value(jctx *c)
{
    if (++c->vdepth > JINJA_MAX_VALUE_DEPTH) {
        c->vdepth--;
        return jv_fail(c, NULL, LH_E_UNSUPPORTED, "a value nested deeper than %d levels",
                       JINJA_MAX_VALUE_DEPTH);
    }
    return true;
}

/* Whether v nests at most `room` containers deep and does not contain `forbidden` (a
 * namespace being assigned into: no reference cycles). Bounds every value the evaluator builds,
 * so later recursion over it (and jansson's own, when it is released) stays shallow. */
static bool depth_ok(json_t *v, int room, json_t *forbidden)
{
    if (!json_is_array(v) && !json_is_object(v))
        return true;
    if (room <= 0 || v == forbidden)
        return false;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!depth_ok(json_array_get(v, i), room - 1, forbidden))
                return false;
        return true;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) if (!depth_ok(x, room - 1, forbidden)) return false;
    return true;
}

bool jv_check_nesting(jctx *c, const jnode *at, json_t *item, json_t *forbidden)
{
    if (depth_ok(item, JINJA_MAX_VALUE_DEPTH - 1, forbidden))
        return true;
    if (forbidden && !depth_ok(item, JINJA_MAX_VALUE_DEPTH - 1, NULL))
        forbidden = NULL;
    return jv_fail(c, at, LH_E_UNSUPPORTED, forbidden ? "a namespace that contains itself"
                                                      : "a value nested deeper than %d levels",
                   JINJA_MAX_VALUE_DEPTH);
}

/* ---- str / repr ------------------------------------------------------------------------ */

/* Python's repr of a float (the shortest text that reads back the same) */
static void fmt_float(double d, char *out, size_t cap)
{
    if (isnan(d)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(out, cap, d < 0 ? "-inf" : "inf");
        return;
    }
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    bool neg = buf[0] == '-';
    char digits[32];
    size_t nd = 0;
    const char *q = buf + (neg ? 1 : 0);
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < sizeof digits - 1)
            digits[nd++] = *q;
    int exp = *q == 'e' ? atoi(q + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    char res[96];
    size_t m = 0;
    if (neg)
        res[m++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++)
                res[m++] = (size_t)i < nd ? digits[i] : '0';
            res[m++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++)
                    res[m++] = digits[i];
            else
                res[m++] = '0';
        } else {
            res[m++] = '0';
            res[m++] = '.';
            for (int i = 0; i < -exp - 1; i++)
                res[m++] = '0';
            for (size_t i = 0; i < nd; i++)
                res[m++] = digits[i];
        }
        res[m] = 0;
    } else {
        res[m++] = digits[0];
        if (nd > 1) {
            res[m++] = '.';
            for (size_t i = 1; i < nd; i++)
                res[m++] = digits[i];
        }
        res[m] = 0;
        snprintf(res + m, sizeof res - m, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(out, cap, "%s", res);
}

static bool repr_str(jctx *c, lh_strbuf *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char quote = (sq && !dq) ? '"' : '\'';
    if (!jv_add(c, b, &quote, 1))
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '\\' || ch == (unsigned char)quote) {
            esc[0] = '\\';
            esc[1] = (char)ch;
            if (!jv_add(c, b, esc, 2))
                return false;
        } else if (ch == '\n' || ch == '\r' || ch == '\t') {
            snprintf(esc, sizeof esc, "\\%c", ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't');
            if (!jv_add(c, b, esc, 2))
                return false;
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", ch);
            if (!jv_add(c, b, esc, 4))
                return false;
        } else if (!jv_add(c, b, s + i, 1)) {
            return false;
        }
    }
    return jv_add(c, b, &quote, 1);
}

bool jv_str(jctx *c, lh_strbuf *b, json_t *v)
{
    if (jv_is_undef(c, v))
        return true;
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_STRING: return jv_add(c, b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return jv_puts(c, b, buf);
    case JSON_REAL:
        fmt_float(json_real_value(v), buf, sizeof buf);
        return jv_puts(c, b, buf);
    case JSON_TRUE: return jv_puts(c, b, "True");
    case JSON_FALSE: return jv_puts(c, b, "False");
    case JSON_NULL: return jv_puts(c, b, "None");
    default: return jv_repr(c, b, v);
    }
}

bool jv_repr(jctx *c, lh_strbuf *b, json_t *v)
{
    if (jv_is_undef(c, v))
        return true;
    if (json_is_string(v))
        return repr_str(c, b, json_string_value(v), json_string_length(v));
    if (json_is_array(v)) {
        if (!enter_value(c))
            return false;
        bool ok = jv_puts(c, b, "[");
        for (size_t i = 0; ok && i < json_array_size(v); i++) {
            if (i)
                ok = jv_puts(c, b, ", ");
            ok = ok && jv_repr(c, b, json_array_get(v, i));
        }
        c->vdepth--;
        return ok && jv_puts(c, b, "]");
    }
    if (json_is_object(v)) {
        if (!enter_value(c))
            return false;
        bool ok = jv_puts(c, b, "{");
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach(v, k, x) {
            if (!ok)
                break;
            if (!first)
                ok = jv_puts(c, b, ", ");
            first = false;
            ok = ok && repr_str(c, b, k, strlen(k)) && jv_puts(c, b, ": ") && jv_repr(c, b, x);
        }
        c->vdepth--;
        return ok && jv_puts(c, b, "}");
    }
    return jv_str(c, b, v);
}

json_t *jv_str_of(jctx *c, json_t *v)
{
    lh_strbuf b = JV_BUF;
    if (!jv_str(c, &b, v)) {
        lh_strbuf_free(&b);
        return NULL;
    }
    return jv_take(c, &b);
}

/* ---- tojson ---------------------------------------------------------------------------- */

static bool json_str(jctx *c, lh_strbuf *b, const char *s, size_t n, bool ascii)
{
    if (!jv_puts(c, b, "\""))
        return false;
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        const char *e = NULL;
        switch (ch) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default: break;
        }
        if (e) {
            if (!jv_puts(c, b, e))
                return false;
            i++;
        } else if (ch < 0x20 || (ascii && ch == 0x7f)) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            if (!jv_puts(c, b, esc))
                return false;
            i++;
        } else if (ascii && ch >= 0x80) {
            uint32_t cp;
            i = jv_u8_next(s, n, i, &cp);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", (unsigned)(0xD800 + (v >> 10)),
                         (unsigned)(0xDC00 + (v & 0x3FF)));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            }
            if (!jv_puts(c, b, esc))
                return false;
        } else {
            if (!jv_add(c, b, s + i, 1))
                return false;
            i++;
        }
    }
    return jv_puts(c, b, "\"");
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool newline_indent(jctx *c, lh_strbuf *b, const jv_jsonopt *o, int level)
{
    if (!jv_puts(c, b, "\n"))
        return false;
    for (int i = 0; i < level; i++)
        if (!jv_puts(c, b, o->indent))
            return false;
    return true;
}

bool jv_dump_json(jctx *c, const jnode *at, lh_strbuf *b, json_t *v, const jv_jsonopt *o,
                  int level)
{
    if (jv_is_undef(c, v))
        return jv_fail(c, at, LH_E_CONFIG, "tojson of an undefined value");
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_STRING: return json_str(c, b, json_string_value(v), json_string_length(v),
                                      o->ensure_ascii);
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return jv_puts(c, b, buf);
    case JSON_REAL: {
        double d = json_real_value(v);
        if (isnan(d))
            return jv_puts(c, b, "NaN");
        if (isinf(d))
            return jv_puts(c, b, d < 0 ? "-Infinity" : "Infinity");
        fmt_float(d, buf, sizeof buf);
        return jv_puts(c, b, buf);
    }
    case JSON_TRUE: return jv_puts(c, b, "true");
    case JSON_FALSE: return jv_puts(c, b, "false");
    case JSON_NULL: return jv_puts(c, b, "null");
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (!n)
            return jv_puts(c, b, "[]");
        if (!enter_value(c))
            return false;
        bool ok = jv_puts(c, b, "[");
        for (size_t i = 0; ok && i < n; i++) {
            if (i)
                ok = jv_puts(c, b, o->item_sep);
            if (ok && o->indent)
                ok = newline_indent(c, b, o, level + 1);
            ok = ok && jv_dump_json(c, at, b, json_array_get(v, i), o, level + 1);
        }
        if (ok && o->indent)
            ok = newline_indent(c, b, o, level);
        c->vdepth--;
        return ok && jv_puts(c, b, "]");
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        if (!n)
            return jv_puts(c, b, "{}");
        if (!enter_value(c))
            return false;
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) {
            c->vdepth--;
            return JV_OOM(c);
        }
        size_t k = 0;
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) keys[k++] = key;
        if (o->sort_keys)
            qsort(keys, k, sizeof *keys, cmp_keys);
        bool ok = jv_puts(c, b, "{");
        for (size_t i = 0; ok && i < k; i++) {
            if (i)
                ok = jv_puts(c, b, o->item_sep);
            if (ok && o->indent)
                ok = newline_indent(c, b, o, level + 1);
            ok = ok && json_str(c, b, keys[i], strlen(keys[i]), o->ensure_ascii) &&
                 jv_puts(c, b, o->key_sep) &&
                 jv_dump_json(c, at, b, json_object_get(v, keys[i]), o, level + 1);
        }
        if (ok && o->indent)
            ok = newline_indent(c, b, o, level);
        free(keys);
        c->vdepth--;
        return ok && jv_puts(c, b, "}");
    }
    }
    return false;
}

/* ---- containers ------------------------------------------------------------------------ */

json_t *jv_items(jctx *c, json_t *v)
{
    json_t *out = json_array();
    if (!out) {
        JV_OOM(c);
        return NULL;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        json_t *pair = json_pack("[sO]", k, x);
        if (!pair || json_array_append_new(out, pair)) {
            json_decref(out);
            JV_OOM(c);
            return NULL;
        }
    }
    return out;
}

json_t *jv_iter_list(jctx *c, const jnode *at, json_t *v)
{
    if (jv_is_undef(c, v))
        return json_array();
    if (json_is_array(v))
        return json_copy(v);
    json_t *out = json_array();
    if (!out) {
        JV_OOM(c);
        return NULL;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (json_array_append_new(out, json_string_nocheck(k))) {
                json_decref(out);
                JV_OOM(c);
                return NULL;
            }
        }
        return out;
    }
    if (json_is_string(v)) {
        const char *p = json_string_value(v);
        size_t n = json_string_length(v);
        uint32_t cp;
        for (size_t i = 0; i < n;) {
            size_t j = jv_u8_next(p, n, i, &cp);
            if (json_array_append_new(out, json_stringn_nocheck(p + i, j - i))) {
                json_decref(out);
                JV_OOM(c);
                return NULL;
            }
            i = j;
        }
        return out;
    }
    json_decref(out);
    jv_fail(c, at, LH_E_CONFIG, "a %s is not iterable", jv_type_name(c, v));
    return NULL;
}
