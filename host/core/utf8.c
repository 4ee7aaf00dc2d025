#include "utf8.h"

#include <utf8proc.h>

size_t lh_utf8_next(const char *s, size_t n, uint32_t *cp, size_t *bad)
{
    const unsigned char *u = (const unsigned char *)s;
    if (bad)
        *bad = 1;
    if (n == 0)
        return 0;
    if (u[0] < 0x80) {
        if (cp)
            *cp = u[0];
        return 1;
    }
    /* utf8proc_iterate decodes and rejects ill-formed input, but reports no subpart length,
     * which the lossy replacement needs: the leading byte's range decides how many
     * continuation bytes may follow, and the first of them has a narrower range after E0,
     * ED, F0 and F4 (Unicode Table 3-7) */
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (u[0] >= 0xC2 && u[0] <= 0xDF) {
        need = 1;
    } else if (u[0] >= 0xE0 && u[0] <= 0xEF) {
        need = 2;
        lo = u[0] == 0xE0 ? 0xA0 : 0x80;
        hi = u[0] == 0xED ? 0x9F : 0xBF;
    } else if (u[0] >= 0xF0 && u[0] <= 0xF4) {
        need = 3;
        lo = u[0] == 0xF0 ? 0x90 : 0x80;
        hi = u[0] == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    for (size_t i = 1; i <= need; i++) {
        const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (i >= n || u[i] < l || u[i] > h) {
            if (bad)
                *bad = i;
            return 0;
        }
    }
    utf8proc_int32_t c = -1;
    utf8proc_ssize_t k = utf8proc_iterate(u, (utf8proc_ssize_t)(need + 1), &c);
    if (k != (utf8proc_ssize_t)(need + 1) || c < 0)
        return 0; /* cannot happen for the ranges above; kept as the library's word */
    if (cp)
        *cp = (uint32_t)c;
    return need + 1;
}

size_t lh_utf8_step(const char *s, size_t n)
{
    size_t bad = 1, k = lh_utf8_next(s, n, NULL, &bad);
    return k ? k : bad;
}

size_t lh_utf8_check(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t k = lh_utf8_next(s + i, n - i, NULL, NULL);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

size_t lh_utf8_encode(uint32_t cp, char out[4])
{
    if (!utf8proc_codepoint_valid((utf8proc_int32_t)cp) || cp > 0x10FFFF)
        return 0;
    return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

size_t lh_utf8_count(const char *s, size_t n)
{
    size_t i = 0, count = 0;
    for (; i < n; count++)
        i += lh_utf8_step(s + i, n - i);
    return count;
}
