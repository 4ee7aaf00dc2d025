/* Internal: UTF-8, one set of helpers for the host (tokenizer, chat templates, CLI text),
 * over utf8proc where it serves. Pure functions; none allocate. */
#ifndef LH_CORE_UTF8_H
#define LH_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes the character at s[0..n) (n > 0): returns its length (1-4) and sets *cp, or, for an
 * ill-formed sequence, returns 0 and sets *bad to the length of its maximal subpart (the bytes
 * one U+FFFD replaces; >= 1) -- surrogates, overlongs and code points past U+10FFFF are
 * ill-formed, as the Unicode standard says. cp or bad may be NULL. */
size_t lh_utf8_next(const char *s, size_t n, uint32_t *cp, size_t *bad);
/* How far a reader steps from s[0..n) (n > 0): the length of the character there, or of the
 * ill-formed subpart one U+FFFD replaces (lh_utf8_next's length or its *bad). */
size_t lh_utf8_step(const char *s, size_t n);
/* Offset of the first ill-formed byte of s[0..n), or n when it is all valid. */
size_t lh_utf8_check(const char *s, size_t n);
static inline bool lh_utf8_valid(const char *s, size_t n) { return lh_utf8_check(s, n) == n; }
/* Writes cp (a Unicode scalar value) as UTF-8 into out; returns the length (1-4), or 0 for a
 * surrogate or a value past U+10FFFF. */
size_t lh_utf8_encode(uint32_t cp, char out[4]);
/* Number of characters in the valid UTF-8 string s[0..n) (ill-formed subparts count as one
 * each, as U+FFFD would). */
size_t lh_utf8_count(const char *s, size_t n);

#endif
