/* Pre-tokenizers: Sequence, ByteLevel (add_prefix_space, use_regex), Split (String or Regex
 * pattern, every behavior, invert), Digits (individual_digits), Metaspace (replacement,
 * prepend_scheme, split); they turn a normalized segment into pieces for the model. */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void pretok_free(void *elem)
{
    pretok *p = elem;
    free_children(p->children, p->n_children, sizeof *p->children, pretok_free);
    regex_free(&p->re);
}

lh_status parse_pretok(ctx *c, json_t *j, const char *path, void *elem)
{
    pretok *p = elem;
    const char *type;
    void *children = NULL;
    lh_status st = parse_component(c, j, path, "pretokenizers", sizeof *p->children, &children,
                                   &p->n_children, parse_pretok, &type);
    p->children = children;
    p->kind = PT_SEQUENCE; /* until the type says otherwise */
    if (st || !type)
        return st;
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = PT_BYTELEVEL;
        if ((st = get_bool(c, j, "add_prefix_space", path, true, &p->add_prefix_space)) ||
            (st = get_bool(c, j, "use_regex", path, true, &p->use_regex)))
            return st;
        if (p->use_regex)
            return regex_compile(&p->re, GPT2_RE, sizeof GPT2_RE - 1, false, path, c->err);
        return LH_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const char *beh;
        p->kind = PT_SPLIT;
        if ((st = get_str(c, j, "behavior", path, true, &beh)) ||
            (st = get_bool(c, j, "invert", path, false, &p->invert)))
            return st;
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous"};
        size_t k = 0;
        while (k < 5 && strcmp(names[k], beh) != 0)
            k++;
        if (k == 5)
            return lh_err_set(c->err, LH_E_CONFIG,
                              "%s: %s.behavior: '%s' is none of Removed, Isolated, "
                              "MergedWithPrevious, MergedWithNext, Contiguous", c->origin, path, beh);
        p->behavior = (split_behavior)k;
        return parse_pattern(c, j, path, &p->re);
    }
    if (strcmp(type, "Digits") == 0) {
        bool individual;
        if ((st = get_bool(c, j, "individual_digits", path, false, &individual)))
            return st;
        p->kind = PT_SPLIT;
        p->behavior = individual ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        return regex_compile(&p->re, "\\p{N}", 5, false, path, c->err);
    }
    if (strcmp(type, "Metaspace") == 0) {
        p->kind = PT_METASPACE;
        if ((st = parse_replacement(c, j, path, p->replacement)) ||
            (st = parse_scheme(c, j, path, &p->scheme)) ||
            (st = get_bool(c, j, "split", path, true, &p->split)))
            return st;
        if (p->split)
            return regex_compile(&p->re, p->replacement, strlen(p->replacement), true, path, c->err);
        return LH_OK;
    }
    return unsupported(c, "pre_tokenizer", type, path);
}

void pieces_push(pieces *ps, const char *s, size_t len, bool orig0)
{
    if (!ps->oom && ps->n == ps->cap)
        ps->v = grow_array(ps->v, &ps->cap, sizeof *ps->v, 16, &ps->oom);
    char *d = ps->oom ? NULL : malloc(len + 1);
    if (!d) {
        ps->oom = true;
        return;
    }
    memcpy(d, s, len);
    d[len] = 0;
    ps->v[ps->n++] = (piece){d, len, orig0};
}

void pieces_free(pieces *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        free(ps->v[i].s);
    free(ps->v);
    *ps = (pieces){0};
}

/* Splits one piece by re with behavior (tokenizers' NormalizedString::split), appending the
 * non-empty results to out. */
static bool split_piece(const regex *re, split_behavior beh, bool invert, const piece *in, pieces *out)
{
    spans sp = {0}, acc = {0};
    if (!regex_find(re, in->s, in->len, &sp)) {
        free(sp.v);
        return false;
    }
    if (invert)
        for (size_t i = 0; i < sp.n; i++)
            sp.v[i].match = !sp.v[i].match;
    bool prev = false;
    switch (beh) {
    case SPLIT_REMOVED:
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < sp.n; i++)
            spans_push(&acc, sp.v[i].s, sp.v[i].e, beh == SPLIT_REMOVED && sp.v[i].match);
        break;
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < sp.n; i++) {
            if (sp.v[i].match && !prev && acc.n)
                acc.v[acc.n - 1].e = sp.v[i].e;
            else
                spans_push(&acc, sp.v[i].s, sp.v[i].e, false);
            prev = sp.v[i].match;
        }
        break;
    case SPLIT_MERGED_NEXT:
        for (size_t i = sp.n; i-- > 0;) {
            if (sp.v[i].match && !prev && acc.n)
                acc.v[acc.n - 1].s = sp.v[i].s;
            else
                spans_push(&acc, sp.v[i].s, sp.v[i].e, false);
            prev = sp.v[i].match;
        }
        for (size_t i = 0; i < acc.n / 2; i++) {
            span t = acc.v[i];
            acc.v[i] = acc.v[acc.n - 1 - i];
            acc.v[acc.n - 1 - i] = t;
        }
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sp.n; i++) {
            if (sp.v[i].match == prev && acc.n)
                acc.v[acc.n - 1].e = sp.v[i].e;
            else
                spans_push(&acc, sp.v[i].s, sp.v[i].e, false);
            prev = sp.v[i].match;
        }
        break;
    }
    bool ok = !acc.oom;
    for (size_t i = 0; ok && i < acc.n; i++)
        if (!acc.v[i].match && acc.v[i].e > acc.v[i].s)
            pieces_push(out, in->s + acc.v[i].s, acc.v[i].e - acc.v[i].s,
                        in->orig0 && acc.v[i].s == 0);
    free(sp.v);
    free(acc.v);
    return ok && !out->oom;
}

/* ByteLevel: the prefix space, the GPT-2 split, then every byte as its character. */
static bool bytelevel_piece(const pretok *p, const piece *in, pieces *out)
{
    lh_strbuf b = {0};
    if (p->add_prefix_space && (in->len == 0 || in->s[0] != ' '))
        lh_strbuf_addc(&b, ' ');
    lh_strbuf_add(&b, in->s, in->len);
    if (!lh_strbuf_ok(&b)) {
        lh_strbuf_free(&b);
        return false;
    }
    piece tmp = {b.s, b.len, in->orig0};
    pieces sub = {0};
    bool ok = true;
    if (p->use_regex)
        ok = split_piece(&p->re, SPLIT_ISOLATED, false, &tmp, &sub);
    else
        pieces_push(&sub, tmp.s, tmp.len, tmp.orig0);
    lh_strbuf_free(&b);
    for (size_t k = 0; ok && k < sub.n; k++) {
        lh_strbuf m = {0};
        lh_strbuf_add(&m, "", 0);
        for (size_t q = 0; q < sub.v[k].len; q++)
            lh_strbuf_add_cp(&m, bytelevel_cp((unsigned char)sub.v[k].s[q]));
        ok = lh_strbuf_ok(&m);
        if (ok)
            pieces_push(out, m.s, m.len, sub.v[k].orig0);
        lh_strbuf_free(&m);
    }
    ok = ok && !sub.oom;
    pieces_free(&sub);
    return ok;
}

/* Metaspace: spaces become the replacement, which is prepended by the scheme; then the split
 * before each replacement. */
static bool metaspace_piece(const pretok *p, const piece *in, pieces *out)
{
    lh_strbuf b = {0};
    lh_strbuf_add(&b, "", 0);
    size_t rl = strlen(p->replacement);
    for (size_t q = 0; q < in->len; q++) {
        if (in->s[q] == ' ')
            lh_strbuf_add(&b, p->replacement, rl);
        else
            lh_strbuf_addc(&b, in->s[q]);
    }
    bool starts = b.len >= rl && memcmp(b.s, p->replacement, rl) == 0;
    if (!starts && (p->scheme == PREPEND_ALWAYS || (p->scheme == PREPEND_FIRST && in->orig0))) {
        lh_strbuf o = {0};
        lh_strbuf_add(&o, p->replacement, rl);
        lh_strbuf_add(&o, b.s, b.len);
        lh_strbuf_free(&b);
        b = o;
    }
    if (!lh_strbuf_ok(&b)) {
        lh_strbuf_free(&b);
        return false;
    }
    piece tmp = {b.s, b.len, in->orig0};
    bool ok = true;
    if (p->split)
        ok = split_piece(&p->re, SPLIT_MERGED_NEXT, false, &tmp, out);
    else if (b.len)
        pieces_push(out, b.s, b.len, in->orig0);
    lh_strbuf_free(&b);
    return ok;
}

bool pretok_apply(const pretok *p, pieces *ps)
{
    if (p->kind == PT_SEQUENCE) {
        for (size_t i = 0; i < p->n_children; i++)
            if (!pretok_apply(&p->children[i], ps))
                return false;
        return true;
    }
    pieces out = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < ps->n; i++) {
        const piece *in = &ps->v[i];
        switch (p->kind) {
        case PT_SPLIT:
            ok = split_piece(&p->re, p->behavior, p->invert, in, &out);
            break;
        case PT_BYTELEVEL:
            ok = bytelevel_piece(p, in, &out);
            break;
        case PT_METASPACE:
            ok = metaspace_piece(p, in, &out);
            break;
        case PT_SEQUENCE:
            break;
        }
    }
    ok = ok && !out.oom;
    if (!ok) {
        pieces_free(&out);
        return false;
    }
    pieces_free(ps);
    *ps = out;
    return true;
}
