/* Decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence; each turns the
 * list of token strings into a new list (ByteLevel and Fuse into one string). */
#include "tokenizer/tokenizer_internal.h"

#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>

void dec_free(void *elem)
{
    decoder *d = elem;
    free_children(d->children, d->n_children, sizeof *d->children, dec_free);
    free(d->content);
    regex_free(&d->re);
}

lh_status parse_dec(ctx *c, json_t *j, const char *path, void *elem)
{
    decoder *d = elem;
    const char *type;
    void *children = NULL;
    lh_status st = parse_component(c, j, path, "decoders", sizeof *d->children, &children,
                                   &d->n_children, parse_dec, &type);
    d->children = children;
    d->kind = DEC_SEQUENCE; /* until the type says otherwise */
    if (st || !type)
        return st;
    static const struct { const char *name; dec_kind kind; } plain[] = {
        {"ByteLevel", DEC_BYTELEVEL}, {"ByteFallback", DEC_BYTEFALLBACK}, {"Fuse", DEC_FUSE}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strcmp(type, plain[i].name) == 0) {
            d->kind = plain[i].kind;
            return LH_OK;
        }
    if (strcmp(type, "Metaspace") == 0) {
        d->kind = DEC_METASPACE;
        if ((st = parse_replacement(c, j, path, d->replacement)))
            return st;
        return parse_scheme(c, j, path, &d->scheme);
    }
    if (strcmp(type, "Strip") == 0) {
        const char *s;
        d->kind = DEC_STRIP;
        if ((st = get_str(c, j, "content", path, true, &s)) ||
            (st = get_size(c, j, "start", path, &d->start)) ||
            (st = get_size(c, j, "stop", path, &d->stop)))
            return st;
        if (!*s || lh_utf8_step(s, strlen(s)) != strlen(s))
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.content: expected one character",
                              c->origin, path);
        d->content = strdup(s);
        return d->content ? LH_OK : oom(c);
    }
    if (strcmp(type, "Replace") == 0) {
        const char *s;
        d->kind = DEC_REPLACE;
        if ((st = get_str(c, j, "content", path, true, &s)))
            return st;
        d->content = strdup(s);
        if (!d->content)
            return oom(c);
        return parse_pattern(c, j, path, &d->re);
    }
    return unsupported(c, "decoder", type, path);
}

void strs_free(strs *s)
{
    for (size_t i = 0; i < s->n; i++)
        lh_strbuf_free(&s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* Appends the bytes token t's characters stand for (GPT-2's map reversed), or false (and
 * nothing) when one of them stands for none. */
static bool add_bytelevel_bytes(lh_strbuf *raw, const lh_strbuf *t)
{
    const size_t start = raw->len;
    for (size_t q = 0, k; q < t->len; q += k) {
        uint32_t cp = 0;
        k = lh_utf8_next(t->s + q, t->len - q, &cp, NULL);
        int b = k ? bytelevel_byte(cp) : -1;
        if (b < 0) {
            lh_strbuf_truncate(raw, start);
            return false;
        }
        lh_strbuf_addc(raw, (char)b);
    }
    return true;
}

/* Replaces s's strings with one string: their concatenation, or for ByteLevel the bytes their
 * characters stand for, read as UTF-8 with U+FFFD for what is ill-formed. */
static bool strs_fuse(strs *s, bool lossy_bytelevel)
{
    lh_strbuf all = {0}, raw = {0};
    lh_strbuf_add(&all, "", 0);
    for (size_t i = 0; i < s->n; i++) {
        if (!lossy_bytelevel)
            lh_strbuf_add(&all, s->v[i].s, s->v[i].len);
        /* ByteLevel: a token whose every character maps to a byte gives those bytes, any other
         * token its own bytes */
        else if (!add_bytelevel_bytes(&raw, &s->v[i]))
            lh_strbuf_add(&raw, s->v[i].s, s->v[i].len);
    }
    if (lossy_bytelevel)
        lh_strbuf_add_lossy(&all, raw.s ? raw.s : "", raw.len);
    const bool raw_ok = lh_strbuf_ok(&raw);
    lh_strbuf_free(&raw);
    if (!lh_strbuf_ok(&all) || !raw_ok) {
        lh_strbuf_free(&all);
        return false;
    }
    strs_free(s);
    s->v = malloc(sizeof *s->v);
    if (!s->v) {
        lh_strbuf_free(&all);
        return false;
    }
    s->v[0] = all;
    s->n = 1;
    return true;
}

static bool is_byte_token(const lh_strbuf *t, unsigned *val)
{
    if (t->len != 6 || memcmp(t->s, "<0x", 3) != 0 || t->s[5] != '>')
        return false;
    unsigned v = 0;
    for (int i = 3; i < 5; i++) {
        char ch = t->s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v * 16 + (unsigned)d;
    }
    *val = v;
    return true;
}

/* Metaspace: every replacement character back to a space (the first token loses them). */
static bool metaspace_token(const decoder *d, size_t i, lh_strbuf *t)
{
    size_t rl = strlen(d->replacement);
    lh_strbuf o = {0};
    lh_strbuf_add(&o, "", 0);
    for (size_t q = 0; q < t->len;) {
        if (q + rl <= t->len && memcmp(t->s + q, d->replacement, rl) == 0) {
            /* as tokenizers: the first token loses every replacement character */
            if (!(i == 0 && d->scheme != PREPEND_NEVER))
                lh_strbuf_addc(&o, ' ');
            q += rl;
        } else {
            lh_strbuf_addc(&o, t->s[q]);
            q++;
        }
    }
    return text_replace(t, &o);
}

/* Strip: up to start copies of content off the front, up to stop off the end. */
static void strip_token(const decoder *d, lh_strbuf *t)
{
    size_t cl = strlen(d->content);
    size_t a = 0, e = t->len;
    for (size_t k = 0; k < d->start && a + cl <= e && memcmp(t->s + a, d->content, cl) == 0; k++)
        a += cl;
    for (size_t k = 0; k < d->stop && e >= a + cl && memcmp(t->s + e - cl, d->content, cl) == 0; k++)
        e -= cl;
    if (a)
        memmove(t->s, t->s + a, e - a);
    lh_strbuf_truncate(t, e - a);
}

static bool replace_token(const decoder *d, lh_strbuf *t)
{
    lh_strbuf o = {0};
    lh_strbuf_add(&o, "", 0);
    if (!regex_replace(&d->re, t->s, t->len, d->content, &o)) {
        lh_strbuf_free(&o);
        return false;
    }
    return text_replace(t, &o);
}

/* ByteFallback: each run of <0xNN> tokens becomes its bytes when they are valid UTF-8, else
 * one U+FFFD per token. */
static bool byte_fallback(strs *s)
{
    strs o = {calloc(s->n + 1, sizeof(lh_strbuf)), 0};
    if (!o.v)
        return false;
    lh_strbuf pend = {0};
    size_t npend = 0;
    bool ok = true;
    for (size_t i = 0; i <= s->n && ok; i++) {
        unsigned v;
        if (i < s->n && is_byte_token(&s->v[i], &v)) {
            lh_strbuf_addc(&pend, (char)v);
            npend++;
            continue;
        }
        if (npend) {
            lh_strbuf t = {0};
            lh_strbuf_add(&t, "", 0);
            if (lh_utf8_valid(pend.s, pend.len))
                lh_strbuf_add(&t, pend.s, pend.len);
            else
                for (size_t k = 0; k < npend; k++)
                    lh_strbuf_add_cp(&t, 0xFFFD);
            o.v[o.n++] = t;
            ok = lh_strbuf_ok(&t);
            lh_strbuf_truncate(&pend, 0);
            npend = 0;
        }
        if (i < s->n) {
            o.v[o.n++] = s->v[i];
            s->v[i] = (lh_strbuf){0};
        }
    }
    ok = ok && lh_strbuf_ok(&pend);
    lh_strbuf_free(&pend);
    strs_free(s);
    *s = o;
    return ok;
}

bool dec_apply(const decoder *d, strs *s)
{
    bool ok = true;
    switch (d->kind) {
    case DEC_SEQUENCE:
        for (size_t i = 0; ok && i < d->n_children; i++)
            ok = dec_apply(&d->children[i], s);
        return ok;
    case DEC_BYTELEVEL:
        return strs_fuse(s, true);
    case DEC_FUSE:
        return strs_fuse(s, false);
    case DEC_BYTEFALLBACK:
        return byte_fallback(s);
    case DEC_METASPACE:
    case DEC_STRIP:
    case DEC_REPLACE:
        for (size_t i = 0; ok && i < s->n; i++) {
            if (d->kind == DEC_METASPACE)
                ok = metaspace_token(d, i, &s->v[i]);
            else if (d->kind == DEC_REPLACE)
                ok = replace_token(d, &s->v[i]);
            else
                strip_token(d, &s->v[i]);
        }
        return ok;
    }
    return false;
}

bool dec_has(const decoder *d, dec_kind k)
{
    if (d->kind == k)
        return true;
    for (size_t i = 0; d->kind == DEC_SEQUENCE && i < d->n_children; i++)
        if (dec_has(&d->children[i], k))
            return true;
    return false;
}
