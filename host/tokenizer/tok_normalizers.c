/* Normalizers: Sequence, Prepend, Replace (String or Regex pattern), NFC, NFD, NFKC, NFKD
 * (utf8proc). */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

void norm_free(void *elem)
{
    normalizer *n = elem;
    free_children(n->children, n->n_children, sizeof *n->children, norm_free);
    free(n->str);
    regex_free(&n->re);
}

lh_status parse_norm(ctx *c, json_t *j, const char *path, void *elem)
{
    normalizer *n = elem;
    const char *type;
    void *children = NULL;
    lh_status st = parse_component(c, j, path, "normalizers", sizeof *n->children, &children,
                                   &n->n_children, parse_norm, &type);
    n->children = children;
    n->kind = NORM_SEQUENCE; /* until the type says otherwise */
    if (st || !type)
        return st;
    if (strcmp(type, "Prepend") == 0 || strcmp(type, "Replace") == 0) {
        const bool prepend = type[0] == 'P';
        const char *s;
        n->kind = prepend ? NORM_PREPEND : NORM_REPLACE;
        if ((st = get_str(c, j, prepend ? "prepend" : "content", path, true, &s)))
            return st;
        if (!(n->str = strdup(s)))
            return oom(c);
        return prepend ? LH_OK : parse_pattern(c, j, path, &n->re);
    }
    static const struct { const char *name; int options; } forms[] = {
        {"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
        {"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
        {"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
        {"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (strcmp(type, forms[i].name) == 0) {
            n->kind = NORM_UNICODE;
            n->uoptions = forms[i].options;
            return LH_OK;
        }
    return unsupported(c, "normalizer", type, path);
}

bool norm_apply(const normalizer *n, lh_strbuf *b)
{
    switch (n->kind) {
    case NORM_SEQUENCE:
        for (size_t i = 0; i < n->n_children; i++)
            if (!norm_apply(&n->children[i], b))
                return false;
        return true;
    case NORM_PREPEND: {
        if (b->len == 0)
            return true;
        lh_strbuf o = {0};
        lh_strbuf_puts(&o, n->str);
        lh_strbuf_add(&o, b->s, b->len);
        return text_replace(b, &o);
    }
    case NORM_UNICODE: {
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)(b->s ? b->s : ""),
                                          (utf8proc_ssize_t)b->len, &dst,
                                          (utf8proc_option_t)n->uoptions);
        if (r < 0)
            return false; /* only allocation can fail: the text is valid UTF-8 */
        lh_strbuf_free(b);
        b->s = (char *)dst; /* NUL-terminated, r + 1 bytes */
        b->len = (size_t)r;
        b->cap = (size_t)r + 1;
        return true;
    }
    case NORM_REPLACE: {
        lh_strbuf o = {0};
        lh_strbuf_add(&o, "", 0);
        if (!regex_replace(&n->re, b->s ? b->s : "", b->len, n->str, &o)) {
            lh_strbuf_free(&o);
            return false;
        }
        return text_replace(b, &o);
    }
    }
    return false;
}
