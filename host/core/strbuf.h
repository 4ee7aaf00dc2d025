/* Internal: the one growable byte buffer of the host. Always NUL-terminated once anything was
 * added; a failed allocation (or growth past `limit`, when set) makes the buffer "failed":
 * every later add is a no-op, so a caller appends freely and checks lh_strbuf_ok once.
 *
 * Ownership: the buffer owns s; lh_strbuf_take hands it to the caller (who frees it) and
 * resets the buffer; lh_strbuf_free releases it. A zero-initialized lh_strbuf is empty and
 * valid ({0}); limit 0 means no limit. */
#ifndef LH_CORE_STRBUF_H
#define LH_CORE_STRBUF_H

#include "lh_types.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lh_strbuf {
    char *s;      /* NULL until the first add */
    size_t len, cap;
    size_t limit; /* largest len allowed (0: none) */
    bool oom;     /* an allocation failed */
    bool over;    /* an add would have passed limit */
} lh_strbuf;

/* true when no add has failed. */
static inline bool lh_strbuf_ok(const lh_strbuf *b) { return !b->oom && !b->over; }
/* Room for `extra` more bytes (and the NUL); false (and failed) when it cannot be had. */
bool lh_strbuf_reserve(lh_strbuf *b, size_t extra);
void lh_strbuf_add(lh_strbuf *b, const char *s, size_t n);
void lh_strbuf_puts(lh_strbuf *b, const char *s);
void lh_strbuf_addc(lh_strbuf *b, char c);
void lh_strbuf_printf(lh_strbuf *b, const char *fmt, ...) LH_PRINTF(2, 3);
void lh_strbuf_vprintf(lh_strbuf *b, const char *fmt, va_list ap);
/* Appends code point cp as UTF-8 (cp must be a Unicode scalar value; others add U+FFFD). */
void lh_strbuf_add_cp(lh_strbuf *b, uint32_t cp);
/* Appends s[0..n) with every ill-formed subsequence replaced by U+FFFD (lh_utf8_next's rule,
 * the "maximal subpart" one Rust's from_utf8_lossy and Python's "replace" use). */
void lh_strbuf_add_lossy(lh_strbuf *b, const char *s, size_t n);
/* Cuts the text to its first len bytes (no-op when it is not longer); the failure flags stay. */
void lh_strbuf_truncate(lh_strbuf *b, size_t len);
/* The string (never NULL: "" for an empty buffer; malloc'ed, the caller's) or NULL when the
 * buffer failed or the empty string cannot be allocated; the buffer is reset either way. */
char *lh_strbuf_take(lh_strbuf *b);
void lh_strbuf_free(lh_strbuf *b);

#endif
