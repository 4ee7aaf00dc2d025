/* The Jinja subset's lexer and parser (see jinja.h), and the compiled template that holds
 * their result. Syntax errors longjmp out of the parser; every node lives in the template's
 * arena, so nothing leaks. */
#include "chat/jinja_internal.h"
#include "core/err.h"
#include "core/utf8.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 200

enum { T_EOF, T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

typedef struct tok {
    int k;
    int line, col;
    char *s; /* text, name, string value or operator */
    size_t slen;
    long long iv;
    double dv;
} tok;

typedef struct parser {
    lh_jinja *t;
    tok *toks;
    size_t n, cap, pos;
    lh_err *err;
    lh_status code;
    jmp_buf jb;
    int depth;
    int loops;
    const char *src;
    size_t len;
    size_t cur_off;
    int cur_line, cur_col;
} parser;


static _Noreturn void fail(parser *p, lh_status code, int line, int col, const char *fmt, ...)
    LH_PRINTF(5, 6);
static _Noreturn void fail(parser *p, lh_status code, int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lh_jinja_errorv(p->err, code, line, col, fmt, ap);
    va_end(ap);
    p->code = code;
    longjmp(p->jb, 1);
}


/* position of an offset; offsets only grow during lexing */
static void pos_at(parser *p, size_t off, int *line, int *col)
{
    if (off < p->cur_off) {
        p->cur_off = 0;
        p->cur_line = 1;
        p->cur_col = 1;
    }
    while (p->cur_off < off) {
        if (p->src[p->cur_off] == '\n') {
            p->cur_line++;
            p->cur_col = 1;
            p->cur_off++;
        } else { /* a column a character (an ill-formed subsequence is one) */
            size_t bad = 1, k = lh_utf8_next(p->src + p->cur_off, p->len - p->cur_off, NULL, &bad);
            p->cur_col++;
            p->cur_off += k ? k : bad;
        }
    }
    *line = p->cur_line;
    *col = p->cur_col;
}

static tok *push_tok(parser *p, int k, size_t off)
{
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 256;
        tok *nt = realloc(p->toks, nc * sizeof *nt);
        if (!nt)
            fail(p, LH_E_NOMEM, 0, 0, "out of memory");
        p->toks = nt;
        p->cap = nc;
    }
    tok *t = &p->toks[p->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    pos_at(p, off, &t->line, &t->col);
    return t;
}

static char *arena_strndup(parser *p, const char *s, size_t n)
{
    char *d = lh_jinja_arena_alloc(p->t, n + 1);
    if (!d)
        fail(p, LH_E_NOMEM, 0, 0, "out of memory");
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Lexes the inside of a {{ }} or {% %} tag starting at *i; stops at the closing delimiter.
 * Returns the offset just after the closing delimiter; *rstrip set for '-', *plus for '+'. */
static size_t lex_tag(parser *p, size_t i, bool block, bool *rstrip, bool *plus, int open_line,
                      int open_col)
{
    const char *s = p->src;
    size_t n = p->len;
    char close = block ? '%' : '}';
    int paren = 0;
    for (;;) {
        while (i < n && is_space(s[i]))
            i++;
        if (i >= n)
            fail(p, LH_E_CONFIG, open_line, open_col, "unclosed %s tag",
                 block ? "'{%'" : "'{{'");
        /* closing delimiter (a '}}' inside a dict literal closes nothing: track braces) */
        if (paren == 0 && (s[i] == '-' || s[i] == '+') && i + 2 < n && s[i + 1] == close &&
            s[i + 2] == '}') {
            *rstrip = s[i] == '-';
            *plus = s[i] == '+';
            push_tok(p, block ? T_BEND : T_VEND, i);
            return i + 3;
        }
        if (paren == 0 && s[i] == close && i + 1 < n && s[i + 1] == '}') {
            push_tok(p, block ? T_BEND : T_VEND, i);
            return i + 2;
        }
        char c = s[i];
        if (isalpha((unsigned char)c) || c == '_') {
            size_t j = i;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'))
                j++;
            tok *t = push_tok(p, T_NAME, i);
            t->s = arena_strndup(p, s + i, j - i);
            t->slen = j - i;
            i = j;
        } else if (isdigit((unsigned char)c)) {
            size_t j = i;
            bool flt = false;
            while (j < n && (isdigit((unsigned char)s[j]) || s[j] == '_'))
                j++;
            if (j + 1 < n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
                flt = true;
                j++;
                while (j < n && isdigit((unsigned char)s[j]))
                    j++;
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E')) {
                size_t k = j + 1;
                if (k < n && (s[k] == '+' || s[k] == '-'))
                    k++;
                if (k < n && isdigit((unsigned char)s[k])) {
                    flt = true;
                    j = k;
                    while (j < n && isdigit((unsigned char)s[j]))
                        j++;
                }
            }
            char buf[128];
            size_t m = 0;
            for (size_t q = i; q < j && m + 1 < sizeof buf; q++)
                if (s[q] != '_')
                    buf[m++] = s[q];
            buf[m] = 0;
            tok *t = push_tok(p, flt ? T_FLOAT : T_INT, i);
            errno = 0;
            if (flt) {
                t->dv = strtod(buf, NULL);
                if (!isfinite(t->dv))
                    fail(p, LH_E_UNSUPPORTED, t->line, t->col,
                         "float literal %s is not finite", buf);
            } else {
                t->iv = strtoll(buf, NULL, 10);
                if (errno == ERANGE)
                    fail(p, LH_E_UNSUPPORTED, t->line, t->col,
                         "integer literal %s does not fit 64 bits", buf);
            }
            i = j;
        } else if (c == '\'' || c == '"') {
            tok *t = push_tok(p, T_STR, i);
            size_t j = i + 1;
            char *d = lh_jinja_arena_alloc(p->t, n - i + 1);
            if (!d)
                fail(p, LH_E_NOMEM, 0, 0, "out of memory");
            size_t m = 0;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n) {
                    char e = s[j + 1];
                    j += 2;
                    switch (e) {
                    case 'n': d[m++] = '\n'; break;
                    case 't': d[m++] = '\t'; break;
                    case 'r': d[m++] = '\r'; break;
                    case 'b': d[m++] = '\b'; break;
                    case 'f': d[m++] = '\f'; break;
                    case 'v': d[m++] = '\v'; break;
                    case 'a': d[m++] = '\a'; break;
                    case '0': d[m++] = '\0'; break;
                    case '\\': d[m++] = '\\'; break;
                    case '\'': d[m++] = '\''; break;
                    case '"': d[m++] = '"'; break;
                    case '\n': break;
                    case 'x': case 'u': case 'U': {
                        int w = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                        unsigned cp = 0;
                        for (int q = 0; q < w; q++) {
                            if (j >= n || !isxdigit((unsigned char)s[j]))
                                fail(p, LH_E_CONFIG, t->line, t->col,
                                     "truncated \\%c escape in a string literal", e);
                            char h = s[j++];
                            cp = cp * 16 + (unsigned)(isdigit((unsigned char)h)
                                                          ? h - '0'
                                                          : (tolower((unsigned char)h) - 'a' + 10));
                        }
                        size_t k = lh_utf8_encode(cp, d + m); /* 0: not a scalar value */
                        if (!k)
                            fail(p, LH_E_UNSUPPORTED, t->line, t->col,
                                 "escape of code point U+%X in a string literal", cp);
                        m += k;
                        break;
                    }
                    default:
                        d[m++] = '\\';
                        d[m++] = e;
                    }
                } else {
                    d[m++] = s[j++];
                }
            }
            if (j >= n)
                fail(p, LH_E_CONFIG, t->line, t->col, "unterminated string literal");
            d[m] = 0;
            t->s = d;
            t->slen = m;
            i = j + 1;
        } else {
            static const char *ops2[] = {"**", "//", "==", "!=", "<=", ">="};
            size_t w = 0;
            for (size_t q = 0; q < sizeof ops2 / sizeof *ops2; q++)
                if (i + 1 < n && s[i] == ops2[q][0] && s[i + 1] == ops2[q][1])
                    w = 2;
            if (!w) {
                if (!strchr("+-*/%~<>()[]{},.:|=", c) || c == 0) {
                    int l, cl;
                    pos_at(p, i, &l, &cl);
                    fail(p, LH_E_CONFIG, l, cl, "unexpected character '%c'", c);
                }
                w = 1;
                if (c == '(' || c == '[' || c == '{')
                    paren++;
                if ((c == ')' || c == ']' || c == '}') && paren > 0)
                    paren--;
            }
            tok *t = push_tok(p, T_OP, i);
            t->s = arena_strndup(p, s + i, w);
            t->slen = w;
            i += w;
        }
    }
}

static void lex(parser *p)
{
    const char *s = p->src;
    size_t n = p->len, i = 0;
    bool strip_next = false, trim_nl = false;
    while (i <= n) {
        /* find the next tag */
        size_t j = i;
        int kind = 0; /* 1 var, 2 block, 3 comment */
        while (j + 1 < n) {
            if (s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')) {
                kind = s[j + 1] == '{' ? 1 : s[j + 1] == '%' ? 2 : 3;
                break;
            }
            j++;
        }
        size_t tend = kind ? j : n;
        size_t a = i, b = tend;
        if (trim_nl && a < b && s[a] == '\n')
            a++;
        if (strip_next)
            while (a < b && is_space(s[a]))
                a++;
        char mod = kind && j + 2 < n ? s[j + 2] : 0;
        if (kind && mod == '-') {
            while (b > a && is_space(s[b - 1]))
                b--;
        } else if (kind >= 2 && mod != '+') {
            /* lstrip_blocks: spaces and tabs between a line start and a block/comment tag */
            size_t q = b;
            while (q > a && (s[q - 1] == ' ' || s[q - 1] == '\t' || s[q - 1] == '\r' ||
                             s[q - 1] == '\f' || s[q - 1] == '\v'))
                q--;
            if (q == 0 || s[q - 1] == '\n')
                b = q;
        }
        if (b > a) {
            tok *t = push_tok(p, T_TEXT, a);
            t->s = arena_strndup(p, s + a, b - a);
            t->slen = b - a;
        }
        if (!kind)
            break;
        size_t body = j + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
        bool rstrip = false, plus = false;
        int ol, oc;
        pos_at(p, j, &ol, &oc);
        if (kind == 3) {
            size_t q = body;
            while (q + 1 < n && !(s[q] == '#' && s[q + 1] == '}'))
                q++;
            if (q + 1 >= n)
                fail(p, LH_E_CONFIG, ol, oc, "unclosed comment");
            rstrip = q > body && s[q - 1] == '-';
            plus = q > body && s[q - 1] == '+';
            i = q + 2;
        } else {
            push_tok(p, kind == 1 ? T_VBEGIN : T_BBEGIN, j);
            i = lex_tag(p, body, kind == 2, &rstrip, &plus, ol, oc);
            if (kind == 2 && p->n >= 2 && p->toks[p->n - 2].k == T_NAME &&
                p->toks[p->n - 3].k == T_BBEGIN && strcmp(p->toks[p->n - 2].s, "raw") == 0)
                fail(p, LH_E_UNSUPPORTED, ol, oc, "the 'raw' tag is not supported");
        }
        strip_next = rstrip;
        trim_nl = kind >= 2 && !plus && !rstrip;
    }
    push_tok(p, T_EOF, n);
}

/* ---- parser ---------------------------------------------------------------------------- */

static tok *peek(parser *p) { return &p->toks[p->pos]; }
static tok *next(parser *p)
{
    tok *t = &p->toks[p->pos];
    if (t->k != T_EOF)
        p->pos++;
    return t;
}
static bool is_op(tok *t, const char *op) { return t->k == T_OP && strcmp(t->s, op) == 0; }
static bool is_name(tok *t, const char *nm) { return t->k == T_NAME && strcmp(t->s, nm) == 0; }

static const char *tok_desc(tok *t, char *buf, size_t cap)
{
    switch (t->k) {
    case T_EOF: return "end of template";
    case T_TEXT: return "template text";
    case T_VBEGIN: return "'{{'";
    case T_VEND: return "'}}'";
    case T_BBEGIN: return "'{%'";
    case T_BEND: return "'%}'";
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: snprintf(buf, cap, "'%s'", t->s); return buf;
    }
}

static _Noreturn void unexpected(parser *p, tok *t, const char *wanted)
{
    char buf[64];
    fail(p, LH_E_CONFIG, t->line, t->col, "expected %s, got %s", wanted,
         tok_desc(t, buf, sizeof buf));
}

static void expect_op(parser *p, const char *op)
{
    tok *t = next(p);
    if (!is_op(t, op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(p, t, w);
    }
}

static jnode *mk(parser *p, int kind, tok *at)
{
    jnode *nd = lh_jinja_arena_alloc(p->t, sizeof *nd);
    if (!nd)
        fail(p, LH_E_NOMEM, 0, 0, "out of memory");
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->line = at->line;
    nd->col = at->col;
    return nd;
}

static void add_kid(parser *p, jnode *nd, jnode *kid)
{
    if (nd->nkids == nd->capkids) {
        size_t nc = nd->capkids ? nd->capkids * 2 : 4;
        jnode **nk = lh_jinja_arena_alloc(p->t, nc * sizeof *nk);
        if (!nk)
            fail(p, LH_E_NOMEM, 0, 0, "out of memory");
        if (nd->nkids)
            memcpy(nk, nd->kids, nd->nkids * sizeof *nk);
        nd->kids = nk;
        nd->capkids = nc;
    }
    nd->kids[nd->nkids++] = kid;
}

static void add_kw(parser *p, jnode *nd, const char *name, jnode *v)
{
    if (nd->nkw == 8)
        fail(p, LH_E_UNSUPPORTED, v->line, v->col, "more than 8 keyword arguments");
    nd->kwnames[nd->nkw] = name;
    nd->kwvals[nd->nkw++] = v;
}

static void enter(parser *p, tok *t)
{
    if (++p->depth > MAX_DEPTH)
        fail(p, LH_E_UNSUPPORTED, t->line, t->col, "nesting deeper than %d levels", MAX_DEPTH);
}

static jnode *parse_expr(parser *p);
static jnode *parse_or(parser *p);

static bool in_list(const char *s, const char *const *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, l[i]) == 0)
            return true;
    return false;
}

/* (args, kw=args) after '(' was consumed */
static void parse_args(parser *p, jnode *nd)
{
    if (is_op(peek(p), ")")) {
        next(p);
        return;
    }
    for (;;) {
        tok *t = peek(p);
        if (t->k == T_NAME && is_op(&p->toks[p->pos + 1], "=")) {
            next(p);
            next(p);
            add_kw(p, nd, t->s, parse_expr(p));
        } else {
            if (is_op(t, "*") || is_op(t, "**"))
                fail(p, LH_E_UNSUPPORTED, t->line, t->col, "argument unpacking ('%s')", t->s);
            if (nd->nkw)
                fail(p, LH_E_CONFIG, t->line, t->col,
                     "positional argument after a keyword argument");
            add_kid(p, nd, parse_expr(p));
        }
        tok *c = next(p);
        if (is_op(c, ")"))
            return;
        if (!is_op(c, ","))
            unexpected(p, c, "',' or ')'");
        if (is_op(peek(p), ")")) {
            next(p);
            return;
        }
    }
}

static jnode *parse_primary(parser *p)
{
    tok *t = next(p);
    jnode *nd;
    switch (t->k) {
    case T_STR: {
        nd = mk(p, E_LIT, t);
        /* adjacent string literals concatenate */
        size_t total = t->slen;
        size_t q = p->pos;
        while (p->toks[q].k == T_STR)
            total += p->toks[q++].slen;
        char *buf = lh_jinja_arena_alloc(p->t, total + 1);
        if (!buf)
            fail(p, LH_E_NOMEM, 0, 0, "out of memory");
        memcpy(buf, t->s, t->slen);
        size_t m = t->slen;
        while (peek(p)->k == T_STR) {
            tok *u = next(p);
            memcpy(buf + m, u->s, u->slen);
            m += u->slen;
        }
        nd->lit = json_stringn_nocheck(buf, m);
        break;
    }
    case T_INT:
        nd = mk(p, E_LIT, t);
        nd->lit = json_integer(t->iv);
        break;
    case T_FLOAT:
        nd = mk(p, E_LIT, t);
        nd->lit = json_real(t->dv);
        break;
    case T_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
            nd = mk(p, E_LIT, t);
            nd->lit = json_true();
        } else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            nd = mk(p, E_LIT, t);
            nd->lit = json_false();
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            nd = mk(p, E_LIT, t);
            nd->lit = json_null();
        } else {
            nd = mk(p, E_NAME, t);
            nd->name = t->s;
        }
        break;
    case T_OP:
        if (is_op(t, "(")) {
            enter(p, t);
            if (is_op(peek(p), ")"))
                fail(p, LH_E_UNSUPPORTED, t->line, t->col, "tuples");
            nd = parse_expr(p);
            if (is_op(peek(p), ","))
                fail(p, LH_E_UNSUPPORTED, peek(p)->line, peek(p)->col, "tuples");
            expect_op(p, ")");
            p->depth--;
            return nd;
        }
        if (is_op(t, "[")) {
            enter(p, t);
            nd = mk(p, E_LIST, t);
            while (!is_op(peek(p), "]")) {
                add_kid(p, nd, parse_expr(p));
                if (!is_op(peek(p), ","))
                    break;
                next(p);
            }
            expect_op(p, "]");
            p->depth--;
            return nd;
        }
        if (is_op(t, "{")) {
            enter(p, t);
            nd = mk(p, E_DICT, t);
            while (!is_op(peek(p), "}")) {
                add_kid(p, nd, parse_expr(p));
                expect_op(p, ":");
                add_kid(p, nd, parse_expr(p));
                if (!is_op(peek(p), ","))
                    break;
                next(p);
            }
            expect_op(p, "}");
            p->depth--;
            return nd;
        }
        /* fallthrough */
    default:
        unexpected(p, t, "an expression");
    }
    if (nd->kind == E_LIT && !nd->lit)
        fail(p, LH_E_NOMEM, 0, 0, "out of memory");
    if (nd->kind == E_LIT && !lh_jinja_arena_keep(p->t, nd->lit))
        fail(p, LH_E_NOMEM, 0, 0, "out of memory");
    return nd;
}

static jnode *parse_postfix(parser *p, jnode *nd)
{
    for (;;) {
        tok *t = peek(p);
        if (is_op(t, ".")) {
            next(p);
            tok *nm = next(p);
            if (nm->k == T_INT) {
                jnode *g = mk(p, E_ITEM, t);
                add_kid(p, g, nd);
                jnode *lit = mk(p, E_LIT, nm);
                lit->lit = json_integer(nm->iv);
                if (!lit->lit || !lh_jinja_arena_keep(p->t, lit->lit))
                    fail(p, LH_E_NOMEM, 0, 0, "out of memory");
                add_kid(p, g, lit);
                nd = g;
                continue;
            }
            if (nm->k != T_NAME)
                unexpected(p, nm, "an attribute name");
            if (is_op(peek(p), "(")) {
                next(p);
                jnode *m = mk(p, E_METHOD, nm);
                m->name = nm->s;
                add_kid(p, m, nd);
                parse_args(p, m);
                nd = m;
            } else {
                jnode *g = mk(p, E_ATTR, nm);
                g->name = nm->s;
                add_kid(p, g, nd);
                nd = g;
            }
        } else if (is_op(t, "[")) {
            next(p);
            enter(p, t);
            jnode *a[3] = {NULL, NULL, NULL};
            int nparts = 0;
            bool slice = false;
            for (;;) {
                tok *u = peek(p);
                if (is_op(u, ":")) {
                    next(p);
                    slice = true;
                    if (++nparts > 2)
                        fail(p, LH_E_CONFIG, u->line, u->col, "too many ':' in a slice");
                    continue;
                }
                if (is_op(u, "]"))
                    break;
                if (a[nparts])
                    unexpected(p, u, "':' or ']'");
                a[nparts] = parse_expr(p);
                if (is_op(peek(p), ","))
                    fail(p, LH_E_UNSUPPORTED, peek(p)->line, peek(p)->col, "tuple subscripts");
            }
            expect_op(p, "]");
            p->depth--;
            if (!slice && !a[0])
                fail(p, LH_E_CONFIG, t->line, t->col, "empty subscript");
            jnode *g = mk(p, slice ? E_SLICE : E_ITEM, t);
            add_kid(p, g, nd);
            for (int q = 0; q < (slice ? 3 : 1); q++) {
                jnode *x = a[q];
                if (!x) {
                    x = mk(p, E_LIT, t);
                    x->lit = json_null();
                    lh_jinja_arena_keep(p->t, x->lit);
                }
                add_kid(p, g, x);
            }
            nd = g;
        } else if (is_op(t, "(")) {
            if (nd->kind != E_NAME)
                fail(p, LH_E_UNSUPPORTED, t->line, t->col, "calling a value that is not a name");
            next(p);
            jnode *c = mk(p, E_CALL, t);
            c->name = nd->name;
            c->line = nd->line;
            c->col = nd->col;
            parse_args(p, c);
            nd = c;
        } else {
            return nd;
        }
    }
}

static jnode *parse_filters(parser *p, jnode *nd)
{
    for (;;) {
        tok *t = peek(p);
        if (is_op(t, "|")) {
            next(p);
            tok *nm = next(p);
            if (nm->k != T_NAME)
                unexpected(p, nm, "a filter name");
            if (!jb_find(JB_FILTER, nm->s)->fn)
                fail(p, LH_E_UNSUPPORTED, nm->line, nm->col, "unknown filter '%s'", nm->s);
            jnode *f = mk(p, E_FILTER, nm);
            f->name = nm->s;
            add_kid(p, f, nd);
            if (is_op(peek(p), "(")) {
                next(p);
                parse_args(p, f);
            }
            nd = f;
        } else if (is_name(t, "is")) {
            next(p);
            bool neg = false;
            if (is_name(peek(p), "not")) {
                next(p);
                neg = true;
            }
            tok *nm = next(p);
            const char *tn = nm->k == T_NAME ? nm->s
                             : (nm->k == T_OP && strcmp(nm->s, "==") == 0) ? "=="
                                                                            : NULL;
            if (!tn)
                unexpected(p, nm, "a test name");
            if (!jb_find(JB_TEST, tn)->fn)
                fail(p, LH_E_UNSUPPORTED, nm->line, nm->col, "unknown test '%s'", tn);
            jnode *f = mk(p, E_TEST, nm);
            f->name = tn;
            f->neg = neg;
            add_kid(p, f, nd);
            tok *u = peek(p);
            if (is_op(u, "(")) {
                next(p);
                parse_args(p, f);
            } else if (u->k == T_STR || u->k == T_INT || u->k == T_FLOAT ||
                       (u->k == T_NAME && !is_name(u, "and") && !is_name(u, "or") &&
                        !is_name(u, "else") && !is_name(u, "if") && !is_name(u, "in") &&
                        !is_name(u, "not") && !is_name(u, "is"))) {
                /* `x is divisibleby 3` */
                add_kid(p, f, parse_postfix(p, parse_primary(p)));
            }
            nd = f;
        } else {
            return nd;
        }
    }
}

static jnode *parse_unary(parser *p, bool with_filter)
{
    tok *t = peek(p);
    jnode *nd;
    if (is_op(t, "-") || is_op(t, "+")) {
        /* as Jinja: the sign applies before any filter (-3|abs is abs(-3)) */
        next(p);
        enter(p, t);
        nd = mk(p, E_NEG, t);
        nd->name = t->s;
        add_kid(p, nd, parse_unary(p, false));
        p->depth--;
    } else {
        nd = parse_postfix(p, parse_primary(p));
    }
    return with_filter ? parse_filters(p, nd) : nd;
}

static jnode *binop(parser *p, tok *t, jnode *l, jnode *r)
{
    jnode *nd = mk(p, E_BIN, t);
    nd->name = t->s;
    add_kid(p, nd, l);
    add_kid(p, nd, r);
    return nd;
}

static jnode *parse_pow(parser *p)
{
    jnode *l = parse_unary(p, true);
    while (is_op(peek(p), "**")) {
        tok *t = next(p);
        l = binop(p, t, l, parse_unary(p, true));
    }
    return l;
}

static jnode *parse_math2(parser *p)
{
    jnode *l = parse_pow(p);
    for (;;) {
        tok *t = peek(p);
        if (!(is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%")))
            return l;
        next(p);
        l = binop(p, t, l, parse_pow(p));
    }
}

static jnode *parse_concat(parser *p)
{
    jnode *l = parse_math2(p);
    while (is_op(peek(p), "~")) {
        tok *t = next(p);
        l = binop(p, t, l, parse_math2(p));
    }
    return l;
}

static jnode *parse_math1(parser *p)
{
    jnode *l = parse_concat(p);
    for (;;) {
        tok *t = peek(p);
        if (!(is_op(t, "+") || is_op(t, "-")))
            return l;
        next(p);
        l = binop(p, t, l, parse_concat(p));
    }
}

static bool cmp_op(parser *p, const char **op)
{
    tok *t = peek(p);
    static const char *ops[] = {"==", "!=", "<", ">", "<=", ">="};
    for (size_t i = 0; i < 6; i++)
        if (is_op(t, ops[i])) {
            *op = ops[i];
            next(p);
            return true;
        }
    if (is_name(t, "in")) {
        *op = "in";
        next(p);
        return true;
    }
    if (is_name(t, "not") && is_name(&p->toks[p->pos + 1], "in")) {
        *op = "not in";
        next(p);
        next(p);
        return true;
    }
    return false;
}

static jnode *parse_compare(parser *p)
{
    jnode *l = parse_math1(p);
    tok *t = peek(p);
    const char *op;
    if (!cmp_op(p, &op))
        return l;
    jnode *nd = mk(p, E_CMP, t);
    nd->name = op;
    add_kid(p, nd, l);
    const char *ops[64];
    size_t nops = 0;
    do {
        if (nops == 64)
            fail(p, LH_E_UNSUPPORTED, t->line, t->col, "more than 64 chained comparisons");
        ops[nops++] = op;
        add_kid(p, nd, parse_math1(p));
    } while (cmp_op(p, &op));
    nd->ops = lh_jinja_arena_alloc(p->t, nops * sizeof *nd->ops);
    if (!nd->ops)
        fail(p, LH_E_NOMEM, 0, 0, "out of memory");
    memcpy(nd->ops, ops, nops * sizeof *ops);
    return nd;
}

static jnode *parse_not(parser *p)
{
    tok *t = peek(p);
    if (is_name(t, "not")) {
        next(p);
        enter(p, t);
        jnode *nd = mk(p, E_NOT, t);
        add_kid(p, nd, parse_not(p));
        p->depth--;
        return nd;
    }
    return parse_compare(p);
}

static jnode *parse_and(parser *p)
{
    jnode *l = parse_not(p);
    while (is_name(peek(p), "and")) {
        tok *t = next(p);
        jnode *nd = mk(p, E_AND, t);
        add_kid(p, nd, l);
        add_kid(p, nd, parse_not(p));
        l = nd;
    }
    return l;
}

static jnode *parse_or(parser *p)
{
    jnode *l = parse_and(p);
    while (is_name(peek(p), "or")) {
        tok *t = next(p);
        jnode *nd = mk(p, E_OR, t);
        add_kid(p, nd, l);
        add_kid(p, nd, parse_and(p));
        l = nd;
    }
    return l;
}

static jnode *parse_expr(parser *p)
{
    tok *t0 = peek(p);
    enter(p, t0);
    jnode *l = parse_or(p);
    while (is_name(peek(p), "if")) {
        tok *t = next(p);
        jnode *nd = mk(p, E_COND, t);
        add_kid(p, nd, parse_or(p));
        add_kid(p, nd, l);
        if (is_name(peek(p), "else")) {
            next(p);
            add_kid(p, nd, parse_expr(p)); /* right-associative, as Jinja */
        }
        l = nd;
    }
    p->depth--;
    return l;
}

/* ---- statements ------------------------------------------------------------------------ */

static void expect_bend(parser *p)
{
    tok *t = next(p);
    if (t->k != T_BEND)
        unexpected(p, t, "'%}'");
}

static const char *const unsupported_tags[] = {
    "macro", "call", "filter", "block", "extends", "include", "import", "from", "with",
    "autoescape", "do", "endmacro", "endcall", "endfilter", "endblock", "endwith", "endset"};

/* Parses statements until a block tag whose name is in ends; returns that name token (the
 * parser stands after it). ends NULL: until end of template. */
static tok *parse_body(parser *p, jnode *body, const char *const *ends, size_t nends,
                       tok *opener)
{
    for (;;) {
        tok *t = next(p);
        if (t->k == T_EOF) {
            if (!ends)
                return NULL;
            fail(p, LH_E_CONFIG, opener->line, opener->col, "'%s' is never closed (expected '%s')",
                 opener->s, ends[nends - 1]);
        }
        if (t->k == T_TEXT) {
            jnode *nd = mk(p, S_TEXT, t);
            nd->lit = json_stringn_nocheck(t->s, t->slen);
            if (!nd->lit || !lh_jinja_arena_keep(p->t, nd->lit))
                fail(p, LH_E_NOMEM, 0, 0, "out of memory");
            add_kid(p, body, nd);
            continue;
        }
        if (t->k == T_VBEGIN) {
            jnode *nd = mk(p, S_OUT, t);
            add_kid(p, nd, parse_expr(p));
            tok *e = next(p);
            if (e->k != T_VEND)
                unexpected(p, e, "'}}'");
            add_kid(p, body, nd);
            continue;
        }
        if (t->k != T_BBEGIN)
            unexpected(p, t, "template text or a tag");
        tok *kw = next(p);
        if (kw->k != T_NAME)
            unexpected(p, kw, "a tag name");
        for (size_t i = 0; i < nends; i++)
            if (strcmp(kw->s, ends[i]) == 0)
                return kw;
        if (!strcmp(kw->s, "if")) {
            enter(p, kw);
            jnode *nd = mk(p, S_IF, kw);
            add_kid(p, nd, parse_expr(p));
            expect_bend(p);
            static const char *const if_ends[] = {"elif", "else", "endif"};
            for (;;) {
                jnode *b = mk(p, S_BODY, kw);
                tok *e = parse_body(p, b, if_ends, 3, kw);
                add_kid(p, nd, b);
                if (!strcmp(e->s, "elif")) {
                    add_kid(p, nd, parse_expr(p));
                    expect_bend(p);
                } else if (!strcmp(e->s, "else")) {
                    expect_bend(p);
                    jnode *eb = mk(p, S_BODY, e);
                    static const char *const endif[] = {"endif"};
                    parse_body(p, eb, endif, 1, kw);
                    expect_bend(p);
                    add_kid(p, nd, eb);
                    nd->neg = true; /* has else */
                    break;
                } else {
                    expect_bend(p);
                    break;
                }
            }
            p->depth--;
            add_kid(p, body, nd);
        } else if (!strcmp(kw->s, "for")) {
            enter(p, kw);
            jnode *nd = mk(p, S_FOR, kw);
            tok *v = next(p);
            if (v->k != T_NAME)
                unexpected(p, v, "a loop variable name");
            nd->name = v->s;
            if (is_op(peek(p), ",")) {
                next(p);
                tok *v2 = next(p);
                if (v2->k != T_NAME)
                    unexpected(p, v2, "a loop variable name");
                nd->name2 = v2->s;
                if (is_op(peek(p), ","))
                    fail(p, LH_E_UNSUPPORTED, peek(p)->line, peek(p)->col,
                         "unpacking into more than two loop variables");
            }
            tok *in = next(p);
            if (!is_name(in, "in"))
                unexpected(p, in, "'in'");
            jnode *iter = parse_or(p);
            jnode *filt = NULL;
            if (is_name(peek(p), "if")) {
                next(p);
                filt = parse_or(p);
            }
            if (is_name(peek(p), "recursive"))
                fail(p, LH_E_UNSUPPORTED, peek(p)->line, peek(p)->col, "recursive loops");
            expect_bend(p);
            jnode *b = mk(p, S_BODY, kw);
            static const char *const for_ends[] = {"else", "endfor"};
            p->loops++;
            tok *e = parse_body(p, b, for_ends, 2, kw);
            p->loops--;
            expect_bend(p);
            jnode *eb = NULL;
            if (!strcmp(e->s, "else")) {
                eb = mk(p, S_BODY, e);
                static const char *const endfor[] = {"endfor"};
                parse_body(p, eb, endfor, 1, kw);
                expect_bend(p);
            }
            add_kid(p, nd, iter);
            add_kid(p, nd, b);
            add_kid(p, nd, filt);
            add_kid(p, nd, eb);
            p->depth--;
            add_kid(p, body, nd);
        } else if (!strcmp(kw->s, "set")) {
            jnode *nd = mk(p, S_SET, kw);
            tok *v = next(p);
            if (v->k != T_NAME)
                unexpected(p, v, "a variable name");
            nd->name = v->s;
            if (is_op(peek(p), ".")) {
                next(p);
                tok *a = next(p);
                if (a->k != T_NAME)
                    unexpected(p, a, "an attribute name");
                nd->name2 = a->s;
            }
            if (is_op(peek(p), ","))
                fail(p, LH_E_UNSUPPORTED, peek(p)->line, peek(p)->col,
                     "'set' with several targets");
            if (peek(p)->k == T_BEND)
                fail(p, LH_E_UNSUPPORTED, kw->line, kw->col, "block 'set' ({%% set x %%}...)");
            expect_op(p, "=");
            add_kid(p, nd, parse_expr(p));
            expect_bend(p);
            add_kid(p, body, nd);
        } else if (!strcmp(kw->s, "break") || !strcmp(kw->s, "continue")) {
            if (!p->loops)
                fail(p, LH_E_CONFIG, kw->line, kw->col, "'%s' outside a for loop", kw->s);
            jnode *nd = mk(p, kw->s[0] == 'b' ? S_BREAK : S_CONTINUE, kw);
            expect_bend(p);
            add_kid(p, body, nd);
        } else if (!strcmp(kw->s, "generation")) {
            expect_bend(p);
            static const char *const gen_end[] = {"endgeneration"};
            parse_body(p, body, gen_end, 1, kw);
            expect_bend(p);
        } else if (in_list(kw->s, unsupported_tags,
                           sizeof unsupported_tags / sizeof *unsupported_tags)) {
            fail(p, LH_E_UNSUPPORTED, kw->line, kw->col, "the '%s' tag is not supported",
                 kw->s);
        } else {
            fail(p, LH_E_CONFIG, kw->line, kw->col, "unknown or misplaced tag '%s'", kw->s);
        }
    }
}

lh_status lh_jinja_parse(lh_jinja *t, const char *src, size_t len, jnode **root, lh_err *err)
{
    parser *p = calloc(1, sizeof *p);
    if (!p)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    p->t = t;
    p->err = err;
    p->src = src;
    p->len = len;
    p->cur_line = 1;
    p->cur_col = 1;
    lh_status st = LH_OK;
    if (setjmp(p->jb)) {
        st = p->code;
    } else {
        lex(p);
        tok start = {.k = T_NAME, .line = 1, .col = 1, .s = (char *)"template"};
        jnode *body = mk(p, S_BODY, &start);
        parse_body(p, body, NULL, 0, &start);
        *root = body;
    }
    free(p->toks);
    free(p);
    return st;
}

/* ---- the template ---------------------------------------------------------------------- */

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
