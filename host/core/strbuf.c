#include "strbuf.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool lh_strbuf_reserve(lh_strbuf *b, size_t extra)
{
    if (!lh_strbuf_ok(b))
        return false;
    if (extra > SIZE_MAX / 2 - b->len || (b->limit && b->len + extra > b->limit)) {
        b->over = true;
        return false;
    }
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->s = p;
    b->cap = cap;
    return true;
}

void lh_strbuf_add(lh_strbuf *b, const char *s, size_t n)
{
    if (!lh_strbuf_reserve(b, n))
        return;
    if (n)
        memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void lh_strbuf_puts(lh_strbuf *b, const char *s) { lh_strbuf_add(b, s, strlen(s)); }

void lh_strbuf_addc(lh_strbuf *b, char c) { lh_strbuf_add(b, &c, 1); }

void lh_strbuf_vprintf(lh_strbuf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        b->oom = true; /* an encoding error: the text cannot be had */
        return;
    }
    if (!lh_strbuf_reserve(b, (size_t)n))
        return;
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void lh_strbuf_printf(lh_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lh_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void lh_strbuf_add_cp(lh_strbuf *b, uint32_t cp)
{
    char t[4];
    size_t n = lh_utf8_encode(cp, t);
    if (!n)
        n = lh_utf8_encode(0xFFFD, t);
    lh_strbuf_add(b, t, n);
}

void lh_strbuf_add_lossy(lh_strbuf *b, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && lh_strbuf_ok(b)) {
        size_t bad = 1, k = lh_utf8_next(s + i, n - i, NULL, &bad);
        if (k) {
            lh_strbuf_add(b, s + i, k);
            i += k;
        } else {
            lh_strbuf_add_cp(b, 0xFFFD);
            i += bad;
        }
    }
}

void lh_strbuf_truncate(lh_strbuf *b, size_t len)
{
    if (b->s && len < b->len) {
        b->len = len;
        b->s[len] = '\0';
    }
}

char *lh_strbuf_take(lh_strbuf *b)
{
    char *s = NULL;
    if (lh_strbuf_ok(b))
        s = b->s ? b->s : calloc(1, 1);
    else
        free(b->s);
    const size_t limit = b->limit;
    *b = (lh_strbuf){.limit = limit};
    return s;
}

void lh_strbuf_free(lh_strbuf *b)
{
    free(b->s);
    const size_t limit = b->limit;
    *b = (lh_strbuf){.limit = limit};
}
