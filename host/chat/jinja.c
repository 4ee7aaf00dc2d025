/* The Jinja subset's evaluator (see jinja.h): Python semantics for the values JSON can hold,
 * as Jinja 3 in transformers' ImmutableSandboxedEnvironment renders them. */
#include "chat/jinja_internal.h"
#include "core/err.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#define MAX_OUTPUT ((size_t)64 << 20)
#define MAX_ITERS 1000000LL
#define MAX_SCOPES 256
#define MAX_VALUE_DEPTH 256

struct lh_jinja {
    void **blocks;
    size_t nblocks, capblocks;
    json_t **vals;
    size_t nvals, capvals;
    jnode *root;
};

void *lh_jinja_arena_alloc(lh_jinja *t, size_t n)
{
    if (t->nblocks == t->capblocks) {
        size_t nc = t->capblocks ? t->capblocks * 2 : 256;
        void **nb = realloc(t->blocks, nc * sizeof *nb);
        if (!nb)
            return NULL;
        t->blocks = nb;
        t->capblocks = nc;
    }
    void *p = calloc(1, n ? n : 1);
    if (p)
        t->blocks[t->nblocks++] = p;
    return p;
}

bool lh_jinja_arena_keep(lh_jinja *t, json_t *v)
{
    if (t->nvals == t->capvals) {
        size_t nc = t->capvals ? t->capvals * 2 : 64;
        json_t **nv = realloc(t->vals, nc * sizeof *nv);
        if (!nv) {
            json_decref(v);
            return false;
        }
        t->vals = nv;
        t->capvals = nc;
    }
    t->vals[t->nvals++] = v;
    return true;
}

void lh_jinja_free(lh_jinja *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nblocks; i++)
        free(t->blocks[i]);
    for (size_t i = 0; i < t->nvals; i++)
        json_decref(t->vals[i]);
    free(t->blocks);
    free(t->vals);
    free(t);
}

/* Jinja's lexer normalizes newlines to \n and drops one trailing newline. */
lh_status lh_jinja_compile(const char *src, size_t len, lh_jinja **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_jinja_compile: out is NULL");
    *out = NULL;
    if (!src)
        return lh_err_set(err, LH_E_USAGE, "lh_jinja_compile: no template");
    for (size_t i = 0; i < len; i++)
        if (src[i] == 0)
            return lh_err_set(err, LH_E_CONFIG, "chat template: NUL byte at offset %zu", i);
    lh_jinja *t = calloc(1, sizeof *t);
    char *norm = malloc(len + 1);
    if (!t || !norm) {
        free(t);
        free(norm);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[m++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            norm[m++] = src[i];
        }
    }
    if (m && norm[m - 1] == '\n')
        m--;
    norm[m] = 0;
    lh_status st = lh_jinja_parse(t, norm, m, &t->root, err);
    free(norm);
    if (st != LH_OK) {
        lh_jinja_free(t);
        return st;
    }
    *out = t;
    return LH_OK;
}

/* ---- render context -------------------------------------------------------------------- */

typedef struct sb {
    char *p;
    size_t n, cap;
} sb;

typedef struct ctx {
    const lh_jinja_env *env;
    json_t *globals;
    json_t *scopes[MAX_SCOPES];
    int nscopes;
    json_t *undef;
    json_t **namespaces;
    size_t nns, capns;
    lh_err *err;
    bool failed;
    lh_status code;
    long long iters;
    int loopctl; /* 1 break, 2 continue */
    int vdepth;
} ctx;

static bool rt_fail(ctx *c, const jnode *at, lh_status code, const char *fmt, ...)
    LH_PRINTF(4, 5);
static bool rt_fail(ctx *c, const jnode *at, lh_status code, const char *fmt, ...)
{
    if (c->failed)
        return false;
    c->failed = true;
    c->code = code;
    char buf[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (code == LH_E_NOMEM)
        lh_err_set(c->err, code, "out of memory");
    else if (at)
        lh_err_set(c->err, code, "chat template %d:%d: %s", at->line, at->col, buf);
    else
        lh_err_set(c->err, code, "chat template: %s", buf);
    return false;
}

#define OOM(c) rt_fail((c), NULL, LH_E_NOMEM, "out of memory")

static bool sb_add(ctx *c, sb *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        if (b->n + n + 1 > MAX_OUTPUT)
            return rt_fail(c, NULL, LH_E_UNSUPPORTED, "a string longer than %zu bytes",
                           MAX_OUTPUT);
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np)
            return OOM(c);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static bool sb_puts(ctx *c, sb *b, const char *s) { return sb_add(c, b, s, strlen(s)); }

static json_t *newstr(ctx *c, const char *s, size_t n)
{
    json_t *v = json_stringn_nocheck(s, n);
    if (!v)
        OOM(c);
    return v;
}

static json_t *take_sb(ctx *c, sb *b)
{
    json_t *v = newstr(c, b->p ? b->p : "", b->n);
    free(b->p);
    return v;
}

static bool is_undef(ctx *c, json_t *v) { return v == c->undef; }
static json_t *undef(ctx *c) { return json_incref(c->undef); }

static const char *type_name(ctx *c, json_t *v)
{
    if (is_undef(c, v))
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

static bool truthy(ctx *c, json_t *v)
{
    if (is_undef(c, v))
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

/* ---- UTF-8 ----------------------------------------------------------------------------- */

static size_t u8_step(const char *s, size_t n, size_t i)
{
    i++;
    while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
        i++;
    return i;
}

static size_t u8_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i = u8_step(s, n, i))
        k++;
    return k;
}

static unsigned u8_cp(const char *s, size_t n, size_t i)
{
    unsigned char b = (unsigned char)s[i];
    if (b < 0x80)
        return b;
    int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
    unsigned cp = b & (0x3F >> extra);
    for (int q = 1; q <= extra && i + (size_t)q < n; q++)
        cp = (cp << 6) | ((unsigned char)s[i + (size_t)q] & 0x3F);
    return cp;
}

/* Python's str.isspace code points */
static bool py_space(unsigned cp)
{
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* code point byte offsets: offs[0..count], offs[count] == n */
static size_t *u8_offsets(ctx *c, const char *s, size_t n, size_t *count)
{
    size_t k = u8_count(s, n);
    size_t *o = malloc((k + 1) * sizeof *o);
    if (!o) {
        OOM(c);
        return NULL;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i = u8_step(s, n, i))
        o[j++] = i;
    o[k] = n;
    *count = k;
    return o;
}

/* ---- str / repr / json ----------------------------------------------------------------- */

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

static bool enter_value(ctx *c)
{
    if (++c->vdepth > MAX_VALUE_DEPTH) {
        c->vdepth--;
        return rt_fail(c, NULL, LH_E_UNSUPPORTED, "a value nested deeper than %d levels",
                       MAX_VALUE_DEPTH);
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

static bool check_nesting(ctx *c, const jnode *at, json_t *item, json_t *forbidden)
{
    if (depth_ok(item, MAX_VALUE_DEPTH - 1, forbidden))
        return true;
    if (forbidden && !depth_ok(item, MAX_VALUE_DEPTH - 1, NULL))
        forbidden = NULL;
    return rt_fail(c, at, LH_E_UNSUPPORTED, forbidden ? "a namespace that contains itself"
                                                      : "a value nested deeper than %d levels",
                   MAX_VALUE_DEPTH);
}

static bool repr(ctx *c, sb *b, json_t *v);

static bool repr_str(ctx *c, sb *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char quote = (sq && !dq) ? '"' : '\'';
    if (!sb_add(c, b, &quote, 1))
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '\\' || ch == (unsigned char)quote) {
            esc[0] = '\\';
            esc[1] = (char)ch;
            if (!sb_add(c, b, esc, 2))
                return false;
        } else if (ch == '\n' || ch == '\r' || ch == '\t') {
            snprintf(esc, sizeof esc, "\\%c", ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't');
            if (!sb_add(c, b, esc, 2))
                return false;
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", ch);
            if (!sb_add(c, b, esc, 4))
                return false;
        } else if (!sb_add(c, b, s + i, 1)) {
            return false;
        }
    }
    return sb_add(c, b, &quote, 1);
}

/* Python str() */
static bool to_str(ctx *c, sb *b, json_t *v)
{
    if (is_undef(c, v))
        return true;
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_STRING: return sb_add(c, b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return sb_puts(c, b, buf);
    case JSON_REAL:
        fmt_float(json_real_value(v), buf, sizeof buf);
        return sb_puts(c, b, buf);
    case JSON_TRUE: return sb_puts(c, b, "True");
    case JSON_FALSE: return sb_puts(c, b, "False");
    case JSON_NULL: return sb_puts(c, b, "None");
    default: return repr(c, b, v);
    }
}

static bool repr(ctx *c, sb *b, json_t *v)
{
    if (is_undef(c, v))
        return true;
    if (json_is_string(v))
        return repr_str(c, b, json_string_value(v), json_string_length(v));
    if (json_is_array(v)) {
        if (!enter_value(c))
            return false;
        bool ok = sb_puts(c, b, "[");
        for (size_t i = 0; ok && i < json_array_size(v); i++) {
            if (i)
                ok = sb_puts(c, b, ", ");
            ok = ok && repr(c, b, json_array_get(v, i));
        }
        c->vdepth--;
        return ok && sb_puts(c, b, "]");
    }
    if (json_is_object(v)) {
        if (!enter_value(c))
            return false;
        bool ok = sb_puts(c, b, "{");
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach(v, k, x) {
            if (!ok)
                break;
            if (!first)
                ok = sb_puts(c, b, ", ");
            first = false;
            ok = ok && repr_str(c, b, k, strlen(k)) && sb_puts(c, b, ": ") && repr(c, b, x);
        }
        c->vdepth--;
        return ok && sb_puts(c, b, "}");
    }
    return to_str(c, b, v);
}

typedef struct jsonopt {
    const char *indent; /* NULL: one line */
    const char *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} jsonopt;

static bool json_str(ctx *c, sb *b, const char *s, size_t n, bool ascii)
{
    if (!sb_puts(c, b, "\""))
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
            if (!sb_puts(c, b, e))
                return false;
            i++;
        } else if (ch < 0x20 || (ascii && ch == 0x7f)) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            if (!sb_puts(c, b, esc))
                return false;
            i++;
        } else if (ascii && ch >= 0x80) {
            unsigned cp = u8_cp(s, n, i);
            if (cp >= 0x10000) {
                unsigned v = cp - 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                         0xDC00 + (v & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            if (!sb_puts(c, b, esc))
                return false;
            i = u8_step(s, n, i);
        } else {
            if (!sb_add(c, b, s + i, 1))
                return false;
            i++;
        }
    }
    return sb_puts(c, b, "\"");
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool newline_indent(ctx *c, sb *b, const jsonopt *o, int level)
{
    if (!sb_puts(c, b, "\n"))
        return false;
    for (int i = 0; i < level; i++)
        if (!sb_puts(c, b, o->indent))
            return false;
    return true;
}

static bool dump_json(ctx *c, const jnode *at, sb *b, json_t *v, const jsonopt *o, int level)
{
    if (is_undef(c, v))
        return rt_fail(c, at, LH_E_CONFIG, "tojson of an undefined value");
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_STRING: return json_str(c, b, json_string_value(v), json_string_length(v),
                                      o->ensure_ascii);
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return sb_puts(c, b, buf);
    case JSON_REAL: {
        double d = json_real_value(v);
        if (isnan(d))
            return sb_puts(c, b, "NaN");
        if (isinf(d))
            return sb_puts(c, b, d < 0 ? "-Infinity" : "Infinity");
        fmt_float(d, buf, sizeof buf);
        return sb_puts(c, b, buf);
    }
    case JSON_TRUE: return sb_puts(c, b, "true");
    case JSON_FALSE: return sb_puts(c, b, "false");
    case JSON_NULL: return sb_puts(c, b, "null");
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (!n)
            return sb_puts(c, b, "[]");
        if (!enter_value(c))
            return false;
        bool ok = sb_puts(c, b, "[");
        for (size_t i = 0; ok && i < n; i++) {
            if (i)
                ok = sb_puts(c, b, o->item_sep);
            if (ok && o->indent)
                ok = newline_indent(c, b, o, level + 1);
            ok = ok && dump_json(c, at, b, json_array_get(v, i), o, level + 1);
        }
        if (ok && o->indent)
            ok = newline_indent(c, b, o, level);
        c->vdepth--;
        return ok && sb_puts(c, b, "]");
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        if (!n)
            return sb_puts(c, b, "{}");
        if (!enter_value(c))
            return false;
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) {
            c->vdepth--;
            return OOM(c);
        }
        size_t k = 0;
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) keys[k++] = key;
        if (o->sort_keys)
            qsort(keys, k, sizeof *keys, cmp_keys);
        bool ok = sb_puts(c, b, "{");
        for (size_t i = 0; ok && i < k; i++) {
            if (i)
                ok = sb_puts(c, b, o->item_sep);
            if (ok && o->indent)
                ok = newline_indent(c, b, o, level + 1);
            ok = ok && json_str(c, b, keys[i], strlen(keys[i]), o->ensure_ascii) &&
                 sb_puts(c, b, o->key_sep) &&
                 dump_json(c, at, b, json_object_get(v, keys[i]), o, level + 1);
        }
        if (ok && o->indent)
            ok = newline_indent(c, b, o, level);
        free(keys);
        c->vdepth--;
        return ok && sb_puts(c, b, "}");
    }
    }
    return false;
}

/* ---- comparisons ----------------------------------------------------------------------- */

static bool is_num(json_t *v) { return json_is_number(v) || json_is_boolean(v); }
static double num_d(json_t *v)
{
    return json_is_boolean(v) ? (json_is_true(v) ? 1.0 : 0.0) : json_number_value(v);
}
static bool is_intlike(json_t *v) { return json_is_integer(v) || json_is_boolean(v); }
static long long num_i(json_t *v)
{
    return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : (long long)json_integer_value(v);
}

static bool py_eq(ctx *c, json_t *a, json_t *b)
{
    if (is_undef(c, a) || is_undef(c, b))
        return a == b;
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b))
            return num_i(a) == num_i(b);
        return num_d(a) == num_d(b);
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
            if (!py_eq(c, json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x) {
            json_t *y = json_object_get(b, k);
            if (!y || !py_eq(c, x, y))
                return false;
        }
        return true;
    }
    default: return false;
    }
}

static bool bytes_lt(json_t *a, json_t *b, int *res)
{
    size_t na = json_string_length(a), nb = json_string_length(b);
    int r = memcmp(json_string_value(a), json_string_value(b), na < nb ? na : nb);
    *res = r ? r : (na < nb ? -1 : na > nb ? 1 : 0);
    return true;
}

/* ordering: -1/0/1; false when the types do not order */
static bool py_cmp(ctx *c, json_t *a, json_t *b, int *res)
{
    if (is_undef(c, a) || is_undef(c, b))
        return false;
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) {
            long long x = num_i(a), y = num_i(b);
            *res = x < y ? -1 : x > y;
        } else {
            double x = num_d(a), y = num_d(b);
            *res = x < y ? -1 : x > y;
        }
        return true;
    }
    if (json_is_string(a) && json_is_string(b))
        return bytes_lt(a, b, res);
    if (json_is_array(a) && json_is_array(b)) {
        size_t na = json_array_size(a), nb = json_array_size(b);
        for (size_t i = 0; i < na && i < nb; i++) {
            json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
            if (!py_eq(c, x, y))
                return py_cmp(c, x, y, res);
        }
        *res = na < nb ? -1 : na > nb;
        return true;
    }
    return false;
}

/* ---- evaluation ------------------------------------------------------------------------ */

static json_t *eval(ctx *c, const jnode *nd);
static bool run_test(ctx *c, const jnode *nd, const char *t, json_t *v, json_t *arg, bool *res);
static bool exec(ctx *c, const jnode *nd, sb *out);

static json_t *lookup(ctx *c, const char *name)
{
    for (int i = c->nscopes - 1; i >= 0; i--) {
        json_t *v = json_object_get(c->scopes[i], name);
        if (v)
            return json_incref(v);
    }
    json_t *v = json_object_get(c->globals, name);
    if (v)
        return json_incref(v);
    static const char *const funcs[] = {"raise_exception", "strftime_now", "namespace", "dict",
                                        "range"};
    for (size_t i = 0; i < sizeof funcs / sizeof *funcs; i++)
        if (!strcmp(name, funcs[i])) {
            char buf[64];
            snprintf(buf, sizeof buf, "<function %s>", name);
            v = json_string(buf);
            if (!v)
                OOM(c);
            return v;
        }
    return undef(c);
}

static bool is_namespace(ctx *c, json_t *v)
{
    for (size_t i = 0; i < c->nns; i++)
        if (c->namespaces[i] == v)
            return true;
    return false;
}

/* Evaluates args (and checks their count); vals[i] new references or NULL where absent.
 * names: the parameter names in order (for keyword arguments). */
static bool eval_args(ctx *c, const jnode *nd, size_t first, const char *what,
                      const char *const *names, size_t nparams, json_t **vals)
{
    for (size_t i = 0; i < nparams; i++)
        vals[i] = NULL;
    size_t npos = nd->nkids - first;
    if (npos > nparams) {
        rt_fail(c, nd, LH_E_CONFIG, "%s takes at most %zu argument%s, got %zu", what, nparams,
                nparams == 1 ? "" : "s", npos);
        return false;
    }
    for (size_t i = 0; i < npos; i++) {
        vals[i] = eval(c, nd->kids[first + i]);
        if (!vals[i])
            goto bad;
    }
    for (size_t k = 0; k < nd->nkw; k++) {
        size_t idx = nparams;
        for (size_t i = 0; i < nparams; i++)
            if (strcmp(names[i], nd->kwnames[k]) == 0)
                idx = i;
        if (idx == nparams) {
            rt_fail(c, nd, LH_E_UNSUPPORTED, "%s has no argument '%s'", what, nd->kwnames[k]);
            goto bad;
        }
        if (vals[idx]) {
            rt_fail(c, nd, LH_E_CONFIG, "%s got argument '%s' twice", what, nd->kwnames[k]);
            goto bad;
        }
        vals[idx] = eval(c, nd->kwvals[k]);
        if (!vals[idx])
            goto bad;
    }
    return true;
bad:
    for (size_t i = 0; i < nparams; i++) {
        json_decref(vals[i]);
        vals[i] = NULL;
    }
    return false;
}

static void release(json_t **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(v[i]);
}

static json_t *str_of(ctx *c, json_t *v)
{
    sb b = {0};
    if (!to_str(c, &b, v)) {
        free(b.p);
        return NULL;
    }
    return take_sb(c, &b);
}

static bool need_str(ctx *c, const jnode *at, json_t *v, const char *what)
{
    if (json_is_string(v))
        return true;
    return rt_fail(c, at, LH_E_CONFIG, "%s needs a string, got %s", what, type_name(c, v));
}

static bool in_chars(const char *cs, size_t ncs, unsigned cp)
{
    for (size_t q = 0; q < ncs; q = u8_step(cs, ncs, q))
        if (u8_cp(cs, ncs, q) == cp)
            return true;
    return false;
}

/* strip: which 1 left, 2 right, 3 both; chars NULL: whitespace */
static json_t *do_strip(ctx *c, json_t *s, json_t *chars, int which)
{
    const char *p = json_string_value(s);
    size_t n = json_string_length(s);
    const char *cs = chars && json_is_string(chars) ? json_string_value(chars) : NULL;
    size_t ncs = cs ? json_string_length(chars) : 0;
#define IN_SET(cp) (cs ? in_chars(cs, ncs, (cp)) : py_space(cp))
    size_t a = 0, e = n;
    if (which & 1)
        while (a < e && IN_SET(u8_cp(p, n, a)))
            a = u8_step(p, n, a);
    if (which & 2)
        while (e > a) {
            size_t q = e - 1;
            while (q > a && ((unsigned char)p[q] & 0xC0) == 0x80)
                q--;
            if (!IN_SET(u8_cp(p, n, q)))
                break;
            e = q;
        }
#undef IN_SET
    return newstr(c, p + a, e - a);
}

static bool is_cased(unsigned cp)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* 0 lower, 1 upper, 2 capitalize, 3 str.title, 4 Jinja's title filter (words split at -({[<
 * and whitespace). Simple (one code point to one) Unicode case mapping, by utf8proc. */
static json_t *case_map(ctx *c, json_t *s, int mode)
{
    const char *p = json_string_value(s);
    size_t n = json_string_length(s);
    sb b = {0};
    bool prev_cased = false, at_word_start = true;
    for (size_t i = 0; i < n;) {
        size_t next = u8_step(p, n, i);
        unsigned cp = u8_cp(p, n, i);
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
        if (cp == 0xDF && m != (utf8proc_int32_t)cp) {
            /* Python's full case mapping of U+00DF: "SS" (upper), "Ss" (title) */
            bool ok = sb_add(c, &b, mode == 1 ? "SS" : "Ss", 2);
            prev_cased = true;
            at_word_start = false;
            i = next;
            if (!ok) {
                free(b.p);
                return NULL;
            }
            continue;
        }
        prev_cased = is_cased(cp);
        at_word_start = cp < 0x80 && strchr("-({[< \t\n\r\f\v", (int)cp) != NULL && cp != 0;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t k = utf8proc_encode_char(m, enc);
        if (k <= 0 || !sb_add(c, &b, (const char *)enc, (size_t)k)) {
            if (k <= 0 && !sb_add(c, &b, p + i, next - i)) {
                free(b.p);
                return NULL;
            }
            if (k > 0) {
                free(b.p);
                return NULL;
            }
        }
        i = next;
    }
    return take_sb(c, &b);
}

static json_t *do_split(ctx *c, const jnode *at, json_t *s, json_t *sep, json_t *maxsplit)
{
    const char *p = json_string_value(s);
    size_t n = json_string_length(s);
    long long maxs = maxsplit && is_intlike(maxsplit) ? num_i(maxsplit) : -1;
    json_t *out = json_array();
    if (!out) {
        OOM(c);
        return NULL;
    }
    if (!sep || json_is_null(sep)) {
        size_t i = 0;
        long long splits = 0;
        for (;;) {
            while (i < n && py_space(u8_cp(p, n, i)))
                i = u8_step(p, n, i);
            if (i >= n)
                break;
            size_t j = i;
            if (maxs >= 0 && splits >= maxs) {
                j = n; /* Python keeps the remainder's trailing whitespace */
            } else {
                while (j < n && !py_space(u8_cp(p, n, j)))
                    j = u8_step(p, n, j);
            }
            if (json_array_append_new(out, json_stringn_nocheck(p + i, j - i))) {
                json_decref(out);
                OOM(c);
                return NULL;
            }
            splits++;
            i = j;
        }
        return out;
    }
    if (!need_str(c, at, sep, "split's separator")) {
        json_decref(out);
        return NULL;
    }
    const char *sp = json_string_value(sep);
    size_t ns = json_string_length(sep);
    if (!ns) {
        json_decref(out);
        rt_fail(c, at, LH_E_CONFIG, "split: empty separator");
        return NULL;
    }
    size_t i = 0;
    long long splits = 0;
    for (;;) {
        const char *hit = NULL;
        if (maxs < 0 || splits < maxs)
            hit = memmem(p + i, n - i, sp, ns);
        size_t j = hit ? (size_t)(hit - p) : n;
        if (json_array_append_new(out, json_stringn_nocheck(p + i, j - i))) {
            json_decref(out);
            OOM(c);
            return NULL;
        }
        if (!hit)
            break;
        splits++;
        i = j + ns;
    }
    return out;
}

static json_t *do_replace(ctx *c, const jnode *at, json_t *s, json_t *old, json_t *new_,
                          json_t *count)
{
    if (!need_str(c, at, s, "replace") || !need_str(c, at, old, "replace") ||
        !need_str(c, at, new_, "replace"))
        return NULL;
    const char *p = json_string_value(s), *o = json_string_value(old);
    size_t n = json_string_length(s), no = json_string_length(old);
    long long maxc = count && is_intlike(count) ? num_i(count) : -1;
    sb b = {0};
    size_t i = 0;
    long long done = 0;
    bool ok = true;
    if (!no) {
        /* Python inserts new between every character */
        for (;;) {
            if (maxc >= 0 && done >= maxc) {
                ok = sb_add(c, &b, p + i, n - i);
                break;
            }
            ok = sb_add(c, &b, json_string_value(new_), json_string_length(new_));
            done++;
            if (!ok || i >= n)
                break;
            size_t j = u8_step(p, n, i);
            ok = sb_add(c, &b, p + i, j - i);
            if (!ok)
                break;
            i = j;
        }
    } else {
        for (;;) {
            const char *hit = (maxc < 0 || done < maxc) ? memmem(p + i, n - i, o, no) : NULL;
            size_t j = hit ? (size_t)(hit - p) : n;
            ok = sb_add(c, &b, p + i, j - i);
            if (!ok || !hit)
                break;
            ok = sb_add(c, &b, json_string_value(new_), json_string_length(new_));
            if (!ok)
                break;
            done++;
            i = j + no;
        }
    }
    if (!ok) {
        free(b.p);
        return NULL;
    }
    return take_sb(c, &b);
}

static json_t *items_of(ctx *c, json_t *v)
{
    json_t *out = json_array();
    if (!out) {
        OOM(c);
        return NULL;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        json_t *pair = json_pack("[sO]", k, x);
        if (!pair || json_array_append_new(out, pair)) {
            json_decref(out);
            OOM(c);
            return NULL;
        }
    }
    return out;
}

/* a list of the items iteration gives: list items, dict keys, string characters */
static json_t *iter_list(ctx *c, const jnode *at, json_t *v)
{
    if (is_undef(c, v))
        return json_array();
    if (json_is_array(v))
        return json_copy(v);
    json_t *out = json_array();
    if (!out) {
        OOM(c);
        return NULL;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (json_array_append_new(out, json_string_nocheck(k))) {
                json_decref(out);
                OOM(c);
                return NULL;
            }
        }
        return out;
    }
    if (json_is_string(v)) {
        const char *p = json_string_value(v);
        size_t n = json_string_length(v);
        for (size_t i = 0; i < n;) {
            size_t j = u8_step(p, n, i);
            if (json_array_append_new(out, json_stringn_nocheck(p + i, j - i))) {
                json_decref(out);
                OOM(c);
                return NULL;
            }
            i = j;
        }
        return out;
    }
    json_decref(out);
    rt_fail(c, at, LH_E_CONFIG, "a %s is not iterable", type_name(c, v));
    return NULL;
}

static json_t *str_method(ctx *c, const jnode *nd, json_t *s, json_t **a)
{
    const char *m = nd->name;
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        if (a[0] && !json_is_null(a[0]) && !need_str(c, nd, a[0], m))
            return NULL;
        return do_strip(c, s, a[0], m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
    }
    if (!strcmp(m, "split"))
        return do_split(c, nd, s, a[0], a[1]);
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (!a[0] || !need_str(c, nd, a[0], m))
            return NULL;
        size_t n = json_string_length(s), k = json_string_length(a[0]);
        bool r = k <= n && memcmp(json_string_value(s) + (m[0] == 's' ? 0 : n - k),
                                  json_string_value(a[0]), k) == 0;
        return json_boolean(r);
    }
    if (!strcmp(m, "upper"))
        return case_map(c, s, 1);
    if (!strcmp(m, "lower"))
        return case_map(c, s, 0);
    if (!strcmp(m, "capitalize"))
        return case_map(c, s, 2);
    if (!strcmp(m, "title"))
        return case_map(c, s, 3);
    if (!strcmp(m, "replace")) {
        if (!a[0] || !a[1]) {
            rt_fail(c, nd, LH_E_CONFIG, "replace needs two arguments");
            return NULL;
        }
        return do_replace(c, nd, s, a[0], a[1], a[2]);
    }
    rt_fail(c, nd, LH_E_UNSUPPORTED, "unsupported method '%s' on a string", m);
    return NULL;
}

static json_t *call_method(ctx *c, const jnode *nd)
{
    static const char *const names[] = {"a", "b", "c"};
    json_t *obj = eval(c, nd->kids[0]);
    if (!obj)
        return NULL;
    json_t *a[3];
    if (!eval_args(c, nd, 1, nd->name, names, 3, a)) {
        json_decref(obj);
        return NULL;
    }
    json_t *r = NULL;
    const char *m = nd->name;
    if (json_is_string(obj)) {
        r = str_method(c, nd, obj, a);
    } else if (json_is_object(obj) && !is_namespace(c, obj)) {
        if (!strcmp(m, "items")) {
            r = items_of(c, obj);
        } else if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            r = json_array();
            const char *k;
            json_t *x;
            json_object_foreach(obj, k, x) {
                if (!r)
                    break;
                json_array_append_new(r, m[0] == 'k' ? json_string_nocheck(k) : json_incref(x));
            }
            if (!r)
                OOM(c);
        } else if (!strcmp(m, "get")) {
            if (!a[0]) {
                rt_fail(c, nd, LH_E_CONFIG, "get needs a key");
            } else {
                json_t *x = json_is_string(a[0]) ? json_object_get(obj, json_string_value(a[0]))
                                                 : NULL;
                r = x ? json_incref(x) : a[1] ? json_incref(a[1]) : json_null();
            }
        } else {
            rt_fail(c, nd, LH_E_UNSUPPORTED, "unsupported method '%s' on a dict", m);
        }
    } else if (is_undef(c, obj)) {
        rt_fail(c, nd, LH_E_CONFIG, "method '%s' called on an undefined value", m);
    } else {
        rt_fail(c, nd, LH_E_UNSUPPORTED, "unsupported method '%s' on a %s", m,
                is_namespace(c, obj) ? "namespace" : type_name(c, obj));
    }
    release(a, 3);
    json_decref(obj);
    return r;
}

static json_t *call_func(ctx *c, const jnode *nd)
{
    const char *f = nd->name;
    if (!strcmp(f, "raise_exception")) {
        static const char *const names[] = {"message"};
        json_t *a[1];
        if (!eval_args(c, nd, 0, f, names, 1, a))
            return NULL;
        sb b = {0};
        if (a[0])
            to_str(c, &b, a[0]);
        json_decref(a[0]);
        if (!c->failed) {
            c->failed = true;
            c->code = LH_E_USAGE;
            lh_err_set(c->err, LH_E_USAGE, "chat template %d:%d raised an exception: %s",
                       nd->line, nd->col, b.p ? b.p : "");
        }
        free(b.p);
        return NULL;
    }
    if (!strcmp(f, "strftime_now")) {
        static const char *const names[] = {"format"};
        json_t *a[1];
        if (!eval_args(c, nd, 0, f, names, 1, a))
            return NULL;
        if (!a[0] || !need_str(c, nd, a[0], "strftime_now")) {
            if (!a[0])
                rt_fail(c, nd, LH_E_CONFIG, "strftime_now needs a format");
            json_decref(a[0]);
            return NULL;
        }
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
        size_t n = json_string_length(a[0]) ? strftime(buf, sizeof buf, json_string_value(a[0]),
                                                       &tm)
                                            : 0;
        json_decref(a[0]);
        return newstr(c, buf, n);
    }
    if (!strcmp(f, "namespace") || !strcmp(f, "dict")) {
        json_t *o = json_object();
        if (!o) {
            OOM(c);
            return NULL;
        }
        if (nd->nkids > 1) {
            json_decref(o);
            rt_fail(c, nd, LH_E_CONFIG, "%s takes at most one positional argument", f);
            return NULL;
        }
        if (nd->nkids == 1) {
            json_t *init = eval(c, nd->kids[0]);
            if (!init) {
                json_decref(o);
                return NULL;
            }
            if (!json_is_object(init)) {
                rt_fail(c, nd, LH_E_CONFIG, "%s needs a dict, got %s", f, type_name(c, init));
                json_decref(init);
                json_decref(o);
                return NULL;
            }
            json_object_update(o, init);
            json_decref(init);
        }
        for (size_t k = 0; k < nd->nkw; k++) {
            json_t *v = eval(c, nd->kwvals[k]);
            if (v && !check_nesting(c, nd, v, NULL)) {
                json_decref(v);
                v = NULL;
            }
            if (!v) {
                json_decref(o);
                return NULL;
            }
            if (is_undef(c, v)) {
                json_decref(v);
                v = json_null(); /* a stored undefined renders as nothing: keep it falsy */
            }
            json_object_set_new(o, nd->kwnames[k], v);
        }
        if (f[0] == 'n') {
            if (c->nns == c->capns) {
                size_t ncap = c->capns ? c->capns * 2 : 8;
                json_t **nn = realloc(c->namespaces, ncap * sizeof *nn);
                if (!nn) {
                    json_decref(o);
                    OOM(c);
                    return NULL;
                }
                c->namespaces = nn;
                c->capns = ncap;
            }
            c->namespaces[c->nns++] = json_incref(o);
        }
        return o;
    }
    if (!strcmp(f, "range")) {
        static const char *const names[] = {"start", "stop", "step"};
        json_t *a[3];
        if (!eval_args(c, nd, 0, f, names, 3, a))
            return NULL;
        long long start = 0, stop = 0, step = 1;
        bool ok = true;
        for (int i = 0; i < 3; i++)
            if (a[i] && !is_intlike(a[i]))
                ok = false;
        if (!ok || !a[0]) {
            release(a, 3);
            rt_fail(c, nd, LH_E_CONFIG, "range needs integers");
            return NULL;
        }
        if (a[1]) {
            start = num_i(a[0]);
            stop = num_i(a[1]);
            if (a[2])
                step = num_i(a[2]);
        } else {
            stop = num_i(a[0]);
        }
        release(a, 3);
        if (step == 0) {
            rt_fail(c, nd, LH_E_CONFIG, "range step must not be zero");
            return NULL;
        }
        json_t *out = json_array();
        long long count = 0;
        for (long long i = start; out && (step > 0 ? i < stop : i > stop); i += step) {
            if (++count > MAX_ITERS) {
                json_decref(out);
                rt_fail(c, nd, LH_E_UNSUPPORTED, "range longer than %lld", MAX_ITERS);
                return NULL;
            }
            json_array_append_new(out, json_integer(i));
        }
        if (!out)
            OOM(c);
        return out;
    }
    rt_fail(c, nd, LH_E_UNSUPPORTED, "unknown function '%s'", f);
    return NULL;
}

static json_t *apply_filter(ctx *c, const jnode *nd)
{
    const char *f = nd->name;
    static const char *const tojson_names[] = {"ensure_ascii", "indent", "separators",
                                               "sort_keys"};
    static const char *const default_names[] = {"default_value", "boolean"};
    static const char *const join_names[] = {"d", "attribute"};
    static const char *const replace_names[] = {"old", "new", "count"};
    static const char *const trim_names[] = {"chars"};
    static const char *const num_names[] = {"default", "base"};
    static const char *const none[] = {""};
    static const char *const select_names[] = {"test", "arg"};
    static const char *const selectattr_names[] = {"attribute", "test", "arg"};
    static const char *const map_names[] = {"filter", "attribute", "default"};
    const char *const *names = none;
    size_t np = 0;
    if (!strcmp(f, "tojson"))
        names = tojson_names, np = 4;
    else if (!strcmp(f, "default") || !strcmp(f, "d"))
        names = default_names, np = 2;
    else if (!strcmp(f, "join"))
        names = join_names, np = 2;
    else if (!strcmp(f, "replace"))
        names = replace_names, np = 3;
    else if (!strcmp(f, "trim"))
        names = trim_names, np = 1;
    else if (!strcmp(f, "int") || !strcmp(f, "float"))
        names = num_names, np = !strcmp(f, "int") ? 2 : 1;
    else if (!strcmp(f, "select") || !strcmp(f, "reject"))
        names = select_names, np = 2;
    else if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
        names = selectattr_names, np = 3;
    else if (!strcmp(f, "map"))
        names = map_names, np = 3;
    json_t *v = eval(c, nd->kids[0]);
    if (!v)
        return NULL;
    json_t *a[4] = {NULL, NULL, NULL, NULL};
    if (!eval_args(c, nd, 1, f, names, np, a)) {
        json_decref(v);
        return NULL;
    }
    json_t *r = NULL;
    if (!strcmp(f, "trim")) {
        if (need_str(c, nd, v, "trim"))
            r = do_strip(c, v, a[0], 3);
    } else if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (is_undef(c, v))
            r = json_integer(0);
        else if (json_is_string(v))
            r = json_integer((json_int_t)u8_count(json_string_value(v), json_string_length(v)));
        else if (json_is_array(v))
            r = json_integer((json_int_t)json_array_size(v));
        else if (json_is_object(v))
            r = json_integer((json_int_t)json_object_size(v));
        else
            rt_fail(c, nd, LH_E_CONFIG, "length of a %s", type_name(c, v));
    } else if (!strcmp(f, "tojson")) {
        jsonopt o = {NULL, ", ", ": ", false, false};
        char ind[64];
        bool ok = true;
        if (a[0])
            o.ensure_ascii = truthy(c, a[0]);
        if (a[1] && !json_is_null(a[1])) {
            if (is_intlike(a[1])) {
                long long k = num_i(a[1]);
                if (k > 32)
                    ok = rt_fail(c, nd, LH_E_UNSUPPORTED, "tojson indent above 32");
                size_t m = 0;
                for (long long i = 0; i < k && m < sizeof ind - 1; i++)
                    ind[m++] = ' ';
                ind[m] = 0;
                o.indent = ind;
            } else if (json_is_string(a[1])) {
                o.indent = json_string_value(a[1]);
            } else {
                ok = rt_fail(c, nd, LH_E_CONFIG, "tojson indent must be an int or a string");
            }
            o.item_sep = ",";
        }
        if (ok && a[2] && !json_is_null(a[2])) {
            if (!json_is_array(a[2]) || json_array_size(a[2]) != 2 ||
                !json_is_string(json_array_get(a[2], 0)) ||
                !json_is_string(json_array_get(a[2], 1)))
                ok = rt_fail(c, nd, LH_E_CONFIG, "tojson separators must be two strings");
            else {
                o.item_sep = json_string_value(json_array_get(a[2], 0));
                o.key_sep = json_string_value(json_array_get(a[2], 1));
            }
        }
        if (a[3])
            o.sort_keys = truthy(c, a[3]);
        if (ok) {
            sb b = {0};
            if (dump_json(c, nd, &b, v, &o, 0))
                r = take_sb(c, &b);
            else
                free(b.p);
        }
    } else if (!strcmp(f, "capitalize") || !strcmp(f, "upper") || !strcmp(f, "lower") ||
               !strcmp(f, "title")) {
        json_t *s = str_of(c, v);
        if (s)
            r = case_map(c, s, f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 'c' ? 2 : 4);
        json_decref(s);
    } else if (!strcmp(f, "default") || !strcmp(f, "d")) {
        bool use = is_undef(c, v) || (a[1] && truthy(c, a[1]) && !truthy(c, v));
        r = use ? (a[0] ? json_incref(a[0]) : newstr(c, "", 0)) : json_incref(v);
    } else if (!strcmp(f, "items")) {
        if (is_undef(c, v))
            r = json_array();
        else if (json_is_object(v))
            r = items_of(c, v);
        else
            rt_fail(c, nd, LH_E_CONFIG, "items of a %s", type_name(c, v));
    } else if (!strcmp(f, "join")) {
        if (a[1]) {
            rt_fail(c, nd, LH_E_UNSUPPORTED, "join's attribute argument");
        } else {
            json_t *l = iter_list(c, nd, v);
            if (l) {
                sb b = {0};
                bool ok = true;
                for (size_t i = 0; ok && i < json_array_size(l); i++) {
                    if (i && a[0])
                        ok = to_str(c, &b, a[0]);
                    ok = ok && to_str(c, &b, json_array_get(l, i));
                }
                if (ok)
                    r = take_sb(c, &b);
                else
                    free(b.p);
                json_decref(l);
            }
        }
    } else if (!strcmp(f, "first") || !strcmp(f, "last") || !strcmp(f, "list") ||
               !strcmp(f, "reverse")) {
        json_t *l = iter_list(c, nd, v);
        if (l) {
            size_t n = json_array_size(l);
            if (f[0] == 'f')
                r = n ? json_incref(json_array_get(l, 0)) : undef(c);
            else if (!strcmp(f, "last"))
                r = n ? json_incref(json_array_get(l, n - 1)) : undef(c);
            else if (!strcmp(f, "list"))
                r = json_incref(l);
            else if (json_is_string(v)) {
                sb b = {0};
                bool ok = true;
                for (size_t i = n; ok && i > 0; i--)
                    ok = to_str(c, &b, json_array_get(l, i - 1));
                r = ok ? take_sb(c, &b) : (free(b.p), NULL);
            } else {
                r = json_array();
                for (size_t i = n; r && i > 0; i--)
                    json_array_append(r, json_array_get(l, i - 1));
            }
            json_decref(l);
        }
    } else if (!strcmp(f, "string")) {
        r = str_of(c, v);
    } else if (!strcmp(f, "replace")) {
        json_t *s = str_of(c, v);
        if (s && a[0] && a[1])
            r = do_replace(c, nd, s, a[0], a[1], a[2]);
        else if (s)
            rt_fail(c, nd, LH_E_CONFIG, "replace needs two arguments");
        json_decref(s);
    } else if (!strcmp(f, "int") || !strcmp(f, "float")) {
        bool isint = f[0] == 'i';
        if (a[1])
            rt_fail(c, nd, LH_E_UNSUPPORTED, "int's base argument");
        else if (is_num(v))
            r = isint ? json_integer(json_is_real(v) ? (json_int_t)json_real_value(v) : num_i(v))
                      : json_real(num_d(v));
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
            r = a[0] ? json_incref(a[0]) : isint ? json_integer(0) : json_real(0.0);
    } else if (!strcmp(f, "select") || !strcmp(f, "reject") || !strcmp(f, "selectattr") ||
               !strcmp(f, "rejectattr") || !strcmp(f, "map")) {
        bool attr = !strcmp(f, "selectattr") || !strcmp(f, "rejectattr");
        bool keep_true = f[0] == 's';
        json_t *test = attr ? a[1] : a[0], *targ = attr ? a[2] : a[1];
        json_t *l = NULL;
        if (!strcmp(f, "map") && (a[0] || !a[1]))
            rt_fail(c, nd, LH_E_UNSUPPORTED, "map with a filter name (only attribute= is supported)");
        else if (attr && (!a[0] || !json_is_string(a[0])))
            rt_fail(c, nd, LH_E_CONFIG, "%s needs an attribute name", f);
        else if (!strcmp(f, "map") && !json_is_string(a[1]))
            rt_fail(c, nd, LH_E_CONFIG, "map's attribute must be a string");
        else if (test && !json_is_string(test))
            rt_fail(c, nd, LH_E_CONFIG, "%s needs a test name", f);
        else
            l = iter_list(c, nd, v);
        if (l) {
            r = json_array();
            for (size_t i = 0; r && !c->failed && i < json_array_size(l); i++) {
                json_t *item = json_array_get(l, i);
                json_t *subj = item;
                const char *an = attr ? json_string_value(a[0])
                                      : !strcmp(f, "map") ? json_string_value(a[1]) : NULL;
                if (an) {
                    subj = json_is_object(item) ? json_object_get(item, an) : NULL;
                    if (!subj)
                        subj = !strcmp(f, "map") && a[2] ? a[2] : c->undef;
                }
                if (!strcmp(f, "map")) {
                    json_array_append(r, subj);
                    continue;
                }
                bool t = false;
                if (test) {
                    if (!run_test(c, nd, json_string_value(test), subj, targ, &t))
                        break;
                } else {
                    t = truthy(c, subj);
                }
                if (t == keep_true)
                    json_array_append(r, item);
            }
            if (c->failed) {
                json_decref(r);
                r = NULL;
            }
            json_decref(l);
        }
    } else if (!strcmp(f, "abs")) {
        if (json_is_integer(v) || json_is_boolean(v))
            r = json_integer(llabs(num_i(v)));
        else if (json_is_real(v))
            r = json_real(fabs(json_real_value(v)));
        else
            rt_fail(c, nd, LH_E_CONFIG, "abs of a %s", type_name(c, v));
    } else {
        rt_fail(c, nd, LH_E_UNSUPPORTED, "unknown filter '%s'", f);
    }
    if (!r && !c->failed)
        OOM(c);
    release(a, 4);
    json_decref(v);
    return r;
}

static bool run_test(ctx *c, const jnode *nd, const char *t, json_t *v, json_t *arg, bool *res)
{
    bool u = is_undef(c, v), r = false, ok = true;
    if (!strcmp(t, "defined"))
        r = !u;
    else if (!strcmp(t, "undefined"))
        r = u;
    else if (!strcmp(t, "none"))
        r = !u && json_is_null(v);
    else if (!strcmp(t, "string"))
        r = !u && json_is_string(v);
    else if (!strcmp(t, "number"))
        r = !u && is_num(v);
    else if (!strcmp(t, "integer"))
        r = !u && json_is_integer(v);
    else if (!strcmp(t, "float"))
        r = !u && json_is_real(v);
    else if (!strcmp(t, "boolean"))
        r = !u && json_is_boolean(v);
    else if (!strcmp(t, "mapping"))
        r = !u && json_is_object(v) && !is_namespace(c, v);
    else if (!strcmp(t, "iterable"))
        r = u || json_is_array(v) || json_is_object(v) || json_is_string(v);
    else if (!strcmp(t, "sequence"))
        r = u || json_is_array(v) || json_is_object(v) || json_is_string(v);
    else if (!strcmp(t, "true"))
        r = !u && json_is_true(v);
    else if (!strcmp(t, "false"))
        r = !u && json_is_false(v);
    else if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        long long d = t[0] == 'd' ? (arg && is_intlike(arg) ? num_i(arg) : 0) : 2;
        if (u || !is_intlike(v) || d == 0)
            ok = rt_fail(c, nd, LH_E_CONFIG, "test '%s' needs integers", t);
        else {
            long long m = num_i(v) % d;
            r = t[0] == 'o' ? m != 0 : m == 0;
        }
    } else if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==") ||
               !strcmp(t, "ne")) {
        if (!arg)
            ok = rt_fail(c, nd, LH_E_CONFIG, "test '%s' needs an argument", t);
        else
            r = py_eq(c, v, arg) != (t[0] == 'n');
    } else {
        ok = rt_fail(c, nd, LH_E_UNSUPPORTED, "unknown test '%s'", t);
    }
    *res = r;
    return ok;
}

static json_t *apply_test(ctx *c, const jnode *nd)
{
    const char *t = nd->name;
    json_t *v = eval(c, nd->kids[0]);
    if (!v)
        return NULL;
    json_t *arg = NULL;
    if (nd->nkids > 2 || nd->nkw) {
        json_decref(v);
        rt_fail(c, nd, LH_E_CONFIG, "test '%s' takes at most one argument", t);
        return NULL;
    }
    if (nd->nkids == 2) {
        arg = eval(c, nd->kids[1]);
        if (!arg) {
            json_decref(v);
            return NULL;
        }
    }
    bool r = false, ok = run_test(c, nd, t, v, arg, &r);
    json_decref(v);
    json_decref(arg);
    if (!ok)
        return NULL;
    return json_boolean(r != nd->neg);
}

static bool slice_bound(ctx *c, const jnode *at, json_t *v, long long *out)
{
    if (json_is_null(v))
        return false;
    if (!is_intlike(v))
        return !rt_fail(c, at, LH_E_CONFIG, "slice indices must be integers");
    *out = num_i(v);
    return true;
}

static json_t *do_slice(ctx *c, const jnode *nd, json_t *obj, json_t *a, json_t *b,
                        json_t *s)
{
    long long start = 0, stop = 0, step = 1;
    bool hs = slice_bound(c, nd, a, &start), he = slice_bound(c, nd, b, &stop);
    bool hst = slice_bound(c, nd, s, &step);
    if (c->failed)
        return NULL;
    if (hst && step == 0) {
        rt_fail(c, nd, LH_E_CONFIG, "slice step cannot be zero");
        return NULL;
    }
    json_t *items = NULL;
    if (json_is_array(obj) || json_is_string(obj))
        items = iter_list(c, nd, obj);
    else if (is_undef(c, obj)) {
        rt_fail(c, nd, LH_E_CONFIG, "slice of an undefined value");
        return NULL;
    } else {
        rt_fail(c, nd, LH_E_CONFIG, "slice of a %s", type_name(c, obj));
        return NULL;
    }
    if (!items)
        return NULL;
    long long len = (long long)json_array_size(items);
    /* Python's PySlice_AdjustIndices */
    if (!hs)
        start = step < 0 ? len - 1 : 0;
    else if (start < 0) {
        start += len;
        if (start < 0)
            start = step < 0 ? -1 : 0;
    } else if (start >= len)
        start = step < 0 ? len - 1 : len;
    if (!he)
        stop = step < 0 ? -1 : len;
    else if (stop < 0) {
        stop += len;
        if (stop < 0)
            stop = step < 0 ? -1 : 0;
    } else if (stop >= len)
        stop = step < 0 ? len - 1 : len;
    json_t *r;
    if (json_is_string(obj)) {
        sb bb = {0};
        bool ok = true;
        for (long long i = start; ok && (step > 0 ? i < stop : i > stop); i += step)
            ok = to_str(c, &bb, json_array_get(items, (size_t)i));
        r = ok ? take_sb(c, &bb) : (free(bb.p), NULL);
    } else {
        r = json_array();
        for (long long i = start; r && (step > 0 ? i < stop : i > stop); i += step)
            json_array_append(r, json_array_get(items, (size_t)i));
        if (!r)
            OOM(c);
    }
    json_decref(items);
    return r;
}

static json_t *arith(ctx *c, const jnode *nd, json_t *l, json_t *r)
{
    const char *op = nd->name;
    if (!strcmp(op, "~")) {
        sb b = {0};
        if (!to_str(c, &b, l) || !to_str(c, &b, r)) {
            free(b.p);
            return NULL;
        }
        return take_sb(c, &b);
    }
    if (op[0] == '+' && json_is_string(l) && json_is_string(r)) {
        sb b = {0};
        if (!sb_add(c, &b, json_string_value(l), json_string_length(l)) ||
            !sb_add(c, &b, json_string_value(r), json_string_length(r))) {
            free(b.p);
            return NULL;
        }
        return take_sb(c, &b);
    }
    if (op[0] == '+' && json_is_array(l) && json_is_array(r)) {
        json_t *o = json_copy(l);
        if (!o || json_array_extend(o, r)) {
            json_decref(o);
            OOM(c);
            return NULL;
        }
        return o;
    }
    if (op[0] == '*' && !op[1] && (json_is_string(l) || json_is_array(l)) && is_intlike(r)) {
        long long k = num_i(r);
        if (json_is_string(l)) {
            sb b = {0};
            for (long long i = 0; i < k; i++)
                if (!sb_add(c, &b, json_string_value(l), json_string_length(l))) {
                    free(b.p);
                    return NULL;
                }
            return take_sb(c, &b);
        }
        if (k > 0 && (unsigned long long)k * json_array_size(l) > (unsigned long long)MAX_ITERS) {
            rt_fail(c, nd, LH_E_UNSUPPORTED, "a list longer than %lld items", MAX_ITERS);
            return NULL;
        }
        json_t *o = json_array();
        for (long long i = 0; o && i < k; i++)
            json_array_extend(o, l);
        if (!o)
            OOM(c);
        return o;
    }
    if (!is_num(l) || !is_num(r)) {
        rt_fail(c, nd, LH_E_CONFIG, "unsupported operand types for %s: %s and %s", op,
                type_name(c, l), type_name(c, r));
        return NULL;
    }
    bool ints = is_intlike(l) && is_intlike(r);
    if (ints && strcmp(op, "/") != 0) {
        long long x = num_i(l), y = num_i(r), z = 0;
        bool ovf = false;
        if (!strcmp(op, "+"))
            ovf = __builtin_add_overflow(x, y, &z);
        else if (!strcmp(op, "-"))
            ovf = __builtin_sub_overflow(x, y, &z);
        else if (!strcmp(op, "*"))
            ovf = __builtin_mul_overflow(x, y, &z);
        else if (!strcmp(op, "//") || !strcmp(op, "%")) {
            if (y == 0) {
                rt_fail(c, nd, LH_E_CONFIG, "integer division or modulo by zero");
                return NULL;
            }
            if (x == LLONG_MIN && y == -1)
                ovf = true;
            else {
                long long q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                z = op[0] == '/' ? q : m;
            }
        } else if (!strcmp(op, "**")) {
            if (y < 0)
                return json_real(pow((double)x, (double)y));
            z = 1;
            for (long long i = 0; i < y && !ovf; i++)
                ovf = __builtin_mul_overflow(z, x, &z);
        }
        if (ovf) {
            rt_fail(c, nd, LH_E_UNSUPPORTED, "integer overflow in %s", op);
            return NULL;
        }
        return json_integer(z);
    }
    double x = num_d(l), y = num_d(r), z;
    if (!strcmp(op, "+"))
        z = x + y;
    else if (!strcmp(op, "-"))
        z = x - y;
    else if (!strcmp(op, "*"))
        z = x * y;
    else if (!strcmp(op, "**"))
        z = pow(x, y);
    else {
        if (y == 0) {
            rt_fail(c, nd, LH_E_CONFIG, "division by zero");
            return NULL;
        }
        if (!strcmp(op, "/"))
            z = x / y;
        else if (!strcmp(op, "//"))
            z = floor(x / y);
        else {
            z = fmod(x, y);
            if (z != 0 && ((z < 0) != (y < 0)))
                z += y;
        }
    }
    if (!isfinite(z)) {
        rt_fail(c, nd, LH_E_UNSUPPORTED, "a float result that is not finite (inf or nan)");
        return NULL;
    }
    return json_real(z);
}

/* one comparison l OP r (Python semantics) */
static bool compare(ctx *c, const jnode *nd, const char *op, json_t *l, json_t *rr, bool *out)
{
    bool res = false;
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        res = py_eq(c, l, rr) == (op[0] == '=');
    } else if (!strcmp(op, "in") || !strcmp(op, "not in")) {
        bool neg = op[0] == 'n';
        if (json_is_string(rr)) {
            if (!json_is_string(l))
                rt_fail(c, nd, LH_E_CONFIG, "'in <string>' needs a string on the left, got %s",
                        type_name(c, l));
            else
                res = memmem(json_string_value(rr), json_string_length(rr),
                             json_string_value(l), json_string_length(l)) != NULL ||
                      json_string_length(l) == 0;
        } else if (json_is_array(rr)) {
            for (size_t i = 0; i < json_array_size(rr) && !res; i++)
                res = py_eq(c, l, json_array_get(rr, i));
        } else if (json_is_object(rr)) {
            res = json_is_string(l) && json_object_get(rr, json_string_value(l)) != NULL;
        } else if (is_undef(c, rr)) {
            res = false;
        } else {
            rt_fail(c, nd, LH_E_CONFIG, "argument of type %s is not iterable",
                    type_name(c, rr));
        }
        res = res != neg;
    } else {
        int cr = 0;
        if (!py_cmp(c, l, rr, &cr))
            rt_fail(c, nd, LH_E_CONFIG, "'%s' not supported between %s and %s", op,
                    type_name(c, l), type_name(c, rr));
        else if (!strcmp(op, "<"))
            res = cr < 0;
        else if (!strcmp(op, "<="))
            res = cr <= 0;
        else if (!strcmp(op, ">"))
            res = cr > 0;
        else
            res = cr >= 0;
    }
    *out = res;
    return !c->failed;
}

static json_t *eval(ctx *c, const jnode *nd)
{
    if (c->failed)
        return NULL;
    json_t *r = NULL;
    switch (nd->kind) {
    case E_LIT: return json_incref(nd->lit);
    case E_NAME: return lookup(c, nd->name);
    case E_LIST: {
        r = json_array();
        if (!r) {
            OOM(c);
            return NULL;
        }
        for (size_t i = 0; i < nd->nkids; i++) {
            json_t *v = eval(c, nd->kids[i]);
            if (!v || !check_nesting(c, nd, v, NULL)) {
                json_decref(v);
                json_decref(r);
                return NULL;
            }
            json_array_append_new(r, v);
        }
        return r;
    }
    case E_DICT: {
        r = json_object();
        if (!r) {
            OOM(c);
            return NULL;
        }
        for (size_t i = 0; i + 1 < nd->nkids; i += 2) {
            json_t *k = eval(c, nd->kids[i]);
            if (!k) {
                json_decref(r);
                return NULL;
            }
            if (!json_is_string(k)) {
                rt_fail(c, nd->kids[i], LH_E_UNSUPPORTED, "dict keys that are not strings");
                json_decref(k);
                json_decref(r);
                return NULL;
            }
            json_t *v = eval(c, nd->kids[i + 1]);
            if (v && !check_nesting(c, nd, v, NULL)) {
                json_decref(v);
                v = NULL;
            }
            if (!v) {
                json_decref(k);
                json_decref(r);
                return NULL;
            }
            json_object_set_new(r, json_string_value(k), v);
            json_decref(k);
        }
        return r;
    }
    case E_ATTR: {
        json_t *o = eval(c, nd->kids[0]);
        if (!o)
            return NULL;
        if (is_undef(c, o))
            rt_fail(c, nd, LH_E_CONFIG, "attribute '%s' of an undefined value", nd->name);
        else if (json_is_object(o)) {
            json_t *v = json_object_get(o, nd->name);
            r = v ? json_incref(v) : undef(c);
        } else
            r = undef(c);
        json_decref(o);
        return r;
    }
    case E_ITEM: {
        json_t *o = eval(c, nd->kids[0]);
        if (!o)
            return NULL;
        json_t *k = eval(c, nd->kids[1]);
        if (!k) {
            json_decref(o);
            return NULL;
        }
        if (is_undef(c, o)) {
            rt_fail(c, nd, LH_E_CONFIG, "subscript of an undefined value");
        } else if (json_is_object(o)) {
            json_t *v = json_is_string(k) ? json_object_get(o, json_string_value(k)) : NULL;
            r = v ? json_incref(v) : undef(c);
        } else if ((json_is_array(o) || json_is_string(o)) && is_intlike(k)) {
            long long i = num_i(k);
            if (json_is_array(o)) {
                long long n = (long long)json_array_size(o);
                if (i < 0)
                    i += n;
                r = (i >= 0 && i < n) ? json_incref(json_array_get(o, (size_t)i)) : undef(c);
            } else {
                size_t cnt;
                size_t *offs = u8_offsets(c, json_string_value(o), json_string_length(o), &cnt);
                if (offs) {
                    long long n = (long long)cnt;
                    if (i < 0)
                        i += n;
                    r = (i >= 0 && i < n)
                            ? newstr(c, json_string_value(o) + offs[i], offs[i + 1] - offs[i])
                            : undef(c);
                    free(offs);
                }
            }
        } else {
            r = undef(c);
        }
        json_decref(o);
        json_decref(k);
        return r;
    }
    case E_SLICE: {
        json_t *v[4] = {NULL, NULL, NULL, NULL};
        bool ok = true;
        for (int i = 0; i < 4 && ok; i++)
            ok = (v[i] = eval(c, nd->kids[i])) != NULL;
        if (ok)
            r = do_slice(c, nd, v[0], v[1], v[2], v[3]);
        release(v, 4);
        return r;
    }
    case E_CALL: return call_func(c, nd);
    case E_METHOD: return call_method(c, nd);
    case E_FILTER: return apply_filter(c, nd);
    case E_TEST: return apply_test(c, nd);
    case E_NEG: {
        json_t *v = eval(c, nd->kids[0]);
        if (!v)
            return NULL;
        if (!is_num(v))
            rt_fail(c, nd, LH_E_CONFIG, "bad operand type for unary %s: %s", nd->name,
                    type_name(c, v));
        else if (nd->name[0] == '+')
            r = is_intlike(v) ? json_integer(num_i(v)) : json_incref(v);
        else if (is_intlike(v)) {
            if (num_i(v) == LLONG_MIN)
                rt_fail(c, nd, LH_E_UNSUPPORTED, "integer overflow in unary -");
            else
                r = json_integer(-num_i(v));
        } else
            r = json_real(-json_real_value(v));
        json_decref(v);
        return r;
    }
    case E_BIN: {
        json_t *l = eval(c, nd->kids[0]);
        if (!l)
            return NULL;
        json_t *rr = eval(c, nd->kids[1]);
        if (rr)
            r = arith(c, nd, l, rr);
        json_decref(l);
        json_decref(rr);
        if (!r && !c->failed)
            OOM(c);
        return r;
    }
    case E_CMP: {
        json_t *l = eval(c, nd->kids[0]);
        bool res = true;
        for (size_t i = 1; l && res && i < nd->nkids; i++) {
            json_t *rr = eval(c, nd->kids[i]);
            bool ok = rr && compare(c, nd, nd->ops[i - 1], l, rr, &res);
            json_decref(l);
            l = ok ? rr : NULL;
            if (!ok)
                json_decref(rr);
        }
        if (!l)
            return NULL;
        json_decref(l);
        return json_boolean(res);
    }
    case E_NOT: {
        json_t *v = eval(c, nd->kids[0]);
        if (!v)
            return NULL;
        r = json_boolean(!truthy(c, v));
        json_decref(v);
        return r;
    }
    case E_AND:
    case E_OR: {
        json_t *l = eval(c, nd->kids[0]);
        if (!l)
            return NULL;
        bool t = truthy(c, l);
        if ((nd->kind == E_AND) != t)
            return l;
        json_decref(l);
        return eval(c, nd->kids[1]);
    }
    case E_COND: {
        json_t *cond = eval(c, nd->kids[0]);
        if (!cond)
            return NULL;
        bool t = truthy(c, cond);
        json_decref(cond);
        if (t)
            return eval(c, nd->kids[1]);
        return nd->nkids > 2 ? eval(c, nd->kids[2]) : undef(c);
    }
    default:
        rt_fail(c, nd, LH_E_INTERNAL, "unknown expression node %d", nd->kind);
        return NULL;
    }
}

static bool push_scope(ctx *c, const jnode *at)
{
    if (c->nscopes >= MAX_SCOPES)
        return rt_fail(c, at, LH_E_UNSUPPORTED, "loops nested deeper than %d", MAX_SCOPES);
    json_t *s = json_object();
    if (!s)
        return OOM(c);
    c->scopes[c->nscopes++] = s;
    return true;
}

static void pop_scope(ctx *c) { json_decref(c->scopes[--c->nscopes]); }

static bool bind_target(ctx *c, const jnode *nd, json_t *scope, json_t *item)
{
    if (!nd->name2)
        return json_object_set(scope, nd->name, item) == 0 || OOM(c);
    if (!json_is_array(item) || json_array_size(item) != 2)
        return rt_fail(c, nd, LH_E_CONFIG, "cannot unpack a %s into two loop variables",
                       type_name(c, item));
    return (json_object_set(scope, nd->name, json_array_get(item, 0)) == 0 &&
            json_object_set(scope, nd->name2, json_array_get(item, 1)) == 0) ||
           OOM(c);
}

static bool exec_for(ctx *c, const jnode *nd, sb *out)
{
    json_t *src = eval(c, nd->kids[0]);
    if (!src)
        return false;
    json_t *items = iter_list(c, nd->kids[0], src);
    json_decref(src);
    if (!items)
        return false;
    bool ok = true;
    if (nd->kids[2]) { /* loop filter */
        json_t *kept = json_array();
        ok = kept != NULL || OOM(c);
        for (size_t i = 0; ok && i < json_array_size(items); i++) {
            ok = push_scope(c, nd) && bind_target(c, nd, c->scopes[c->nscopes - 1],
                                                  json_array_get(items, i));
            json_t *t = ok ? eval(c, nd->kids[2]) : NULL;
            if (ok)
                pop_scope(c);
            ok = t != NULL;
            if (ok && truthy(c, t))
                json_array_append(kept, json_array_get(items, i));
            json_decref(t);
        }
        json_decref(items);
        if (!ok) {
            json_decref(kept);
            return false;
        }
        items = kept;
    }
    size_t n = json_array_size(items);
    for (size_t i = 0; ok && i < n; i++) {
        if (++c->iters > MAX_ITERS) {
            ok = rt_fail(c, nd, LH_E_UNSUPPORTED, "more than %lld loop iterations", MAX_ITERS);
            break;
        }
        if (!push_scope(c, nd)) {
            ok = false;
            break;
        }
        json_t *scope = c->scopes[c->nscopes - 1];
        json_t *loop = json_pack("{sIsIsIsIsbsbsI}", "index0", (json_int_t)i, "index",
                                 (json_int_t)i + 1, "revindex", (json_int_t)(n - i),
                                 "revindex0", (json_int_t)(n - i - 1), "first", i == 0, "last",
                                 i + 1 == n, "length", (json_int_t)n);
        if (loop && i > 0)
            json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (loop && i + 1 < n)
            json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        ok = (loop && json_object_set_new(scope, "loop", loop) == 0) || OOM(c);
        ok = ok && bind_target(c, nd, scope, json_array_get(items, i));
        ok = ok && exec(c, nd->kids[1], out);
        pop_scope(c);
        if (c->loopctl == 1) {
            c->loopctl = 0;
            break;
        }
        c->loopctl = 0;
    }
    if (ok && n == 0 && nd->kids[3])
        ok = exec(c, nd->kids[3], out);
    json_decref(items);
    return ok;
}

static bool exec(ctx *c, const jnode *nd, sb *out)
{
    if (c->failed)
        return false;
    switch (nd->kind) {
    case S_BODY:
        for (size_t i = 0; i < nd->nkids; i++) {
            if (!exec(c, nd->kids[i], out))
                return false;
            if (c->loopctl)
                return true;
        }
        return true;
    case S_TEXT: return sb_add(c, out, json_string_value(nd->lit), json_string_length(nd->lit));
    case S_OUT: {
        json_t *v = eval(c, nd->kids[0]);
        if (!v)
            return false;
        bool ok = to_str(c, out, v);
        json_decref(v);
        return ok;
    }
    case S_IF: {
        size_t i = 0;
        size_t nconds = nd->neg ? (nd->nkids - 1) / 2 : nd->nkids / 2;
        for (; i < nconds; i++) {
            json_t *v = eval(c, nd->kids[2 * i]);
            if (!v)
                return false;
            bool t = truthy(c, v);
            json_decref(v);
            if (t)
                return exec(c, nd->kids[2 * i + 1], out);
        }
        if (nd->neg)
            return exec(c, nd->kids[nd->nkids - 1], out);
        return true;
    }
    case S_FOR: return exec_for(c, nd, out);
    case S_SET: {
        json_t *v = eval(c, nd->kids[0]);
        if (!v)
            return false;
        bool ok;
        if (nd->name2) {
            json_t *ns = lookup(c, nd->name);
            if (!is_namespace(c, ns))
                ok = rt_fail(c, nd, LH_E_CONFIG,
                             "cannot assign attribute '%s' of '%s': not a namespace()",
                             nd->name2, nd->name);
            else if (!check_nesting(c, nd, v, ns))
                ok = false;
            else
                ok = json_object_set(ns, nd->name2, is_undef(c, v) ? json_null() : v) == 0 ||
                     OOM(c);
            json_decref(ns);
        } else {
            ok = json_object_set(c->scopes[c->nscopes - 1], nd->name, v) == 0 || OOM(c);
        }
        json_decref(v);
        return ok;
    }
    case S_BREAK: c->loopctl = 1; return true;
    case S_CONTINUE: c->loopctl = 2; return true;
    default: return rt_fail(c, nd, LH_E_INTERNAL, "unknown statement node %d", nd->kind);
    }
}

lh_status lh_jinja_render(const lh_jinja *t, json_t *vars, const lh_jinja_env *env, char **out,
                          size_t *len, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_jinja_render: out is NULL");
    *out = NULL;
    if (len)
        *len = 0;
    if (!t || (vars && !json_is_object(vars)))
        return lh_err_set(err, LH_E_USAGE, "lh_jinja_render: no template or vars not an object");
    ctx *c = calloc(1, sizeof *c);
    if (!c)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    c->env = env;
    c->err = err;
    c->globals = vars ? json_incref(vars) : json_object();
    c->undef = json_object();
    sb b = {0};
    lh_status st = LH_OK;
    if (!c->globals || !c->undef || !push_scope(c, NULL)) {
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    } else {
        /* break/continue outside a loop are no-ops, as Jinja rejects them at compile time */
        if (!exec(c, t->root, &b) || c->failed)
            st = c->code ? c->code : LH_E_INTERNAL;
        if (st == LH_OK && !b.p && !sb_add(c, &b, "", 0))
            st = c->code ? c->code : LH_E_NOMEM;
    }
    while (c->nscopes)
        pop_scope(c);
    for (size_t i = 0; i < c->nns; i++)
        json_decref(c->namespaces[i]);
    free(c->namespaces);
    json_decref(c->undef);
    json_decref(c->globals);
    free(c);
    if (st != LH_OK) {
        free(b.p);
        return st;
    }
    *out = b.p;
    if (len)
        *len = b.n;
    return LH_OK;
}
