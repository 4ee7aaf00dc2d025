/* Stop strings (lh_stop_matcher_*): transformers' StopStringCriteria for one sequence.
 *
 * transformers compares each stop string with a "clean" string per token rather than with the
 * decoded text, so that a match is pinned to the token that completes it: for a byte-level
 * decoder the token's bytes (GPT-2's character map reversed), for a ByteFallback decoder
 * "<0xNN>" as its byte, otherwise the token decoded after the prefix "abcdef" (a decoder
 * drops a word's leading space at the start of the text, not after a prefix) with the prefix
 * cut off. After every new token it looks at the last W tokens (W: the longest stop string,
 * in bytes, or characters when the decoder is neither) and stops when a stop string occurs in
 * their concatenation ending inside the new token. (W tokens hold every match as long as each
 * token stands for at least one unit; transformers looks no further, so neither does this.)
 *
 * The matcher keeps the window's concatenation in one buffer and the length of each token's
 * part in a ring, so a step computes one clean string and moves the buffer by the oldest
 * part: nothing per vocabulary, which keeps one matcher per request cheap. */
#include "tokenizer/tokenizer_internal.h"

#include "core/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct lh_stop_matcher {
    const lh_tokenizer *t;
    lh_byte_mode mode;
    char **strs; /* copies, NUL-terminated */
    size_t *str_len;
    size_t n_strs;
    size_t window;     /* W, in tokens */
    int32_t *prefix;   /* encode("abcdef") without special tokens */
    size_t n_prefix;
    char *buf;         /* the window's clean strings, concatenated */
    size_t len, cap;
    size_t *part;      /* ring of W lengths: part[(head + i) % W] is the i-th token's */
    size_t head, count;
};

static lh_status no_memory(lh_err *err)
{
    return lh_err_set(err, LH_E_NOMEM, "out of memory matching stop strings");
}

lh_status lh_stop_strings_check(const char *const *strs, size_t n, lh_err *err)
{
    lh_err_clear(err);
    if (n == 0)
        return lh_err_set(err, LH_E_USAGE, "no stop strings (at least 1)");
    if (n > LH_STOP_STRINGS_MAX)
        return lh_err_set(err, LH_E_USAGE, "%zu stop strings: at most %d", n,
                          LH_STOP_STRINGS_MAX);
    if (!strs)
        return lh_err_set(err, LH_E_USAGE, "stop strings: the array is NULL");
    for (size_t i = 0; i < n; i++) {
        if (!strs[i])
            return lh_err_set(err, LH_E_USAGE, "stop string %zu is NULL", i);
        const size_t len = strlen(strs[i]);
        if (len == 0)
            return lh_err_set(err, LH_E_USAGE, "stop string %zu is empty", i);
        if (len > LH_STOP_STRING_MAX_BYTES)
            return lh_err_set(err, LH_E_USAGE, "stop string %zu is %zu bytes long: at most %d",
                              i, len, LH_STOP_STRING_MAX_BYTES);
        const size_t bad = lh_utf8_check(strs[i], len);
        if (bad != len)
            return lh_err_set(err, LH_E_USAGE, "stop string %zu is not valid UTF-8 (byte %zu)",
                              i, bad);
    }
    return LH_OK;
}

void lh_stop_matcher_free(lh_stop_matcher *m)
{
    if (!m)
        return;
    for (size_t i = 0; m->strs && i < m->n_strs; i++)
        free(m->strs[i]);
    free(m->strs);
    free(m->str_len);
    free(m->prefix);
    free(m->buf);
    free(m->part);
    free(m);
}

lh_status lh_stop_matcher_create(const lh_tokenizer *t, const char *const *strs, size_t n,
                                 lh_stop_matcher **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_stop_matcher_create: out is NULL");
    *out = NULL;
    if (!t)
        return lh_err_set(err, LH_E_USAGE, "lh_stop_matcher_create: the tokenizer is NULL");
    lh_status st = lh_stop_strings_check(strs, n, err);
    if (st != LH_OK)
        return st;
    lh_stop_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return no_memory(err);
    m->t = t;
    m->mode = lh_tokenizer_byte_mode(t);
    m->n_strs = n;
    m->strs = calloc(n, sizeof *m->strs);
    m->str_len = calloc(n, sizeof *m->str_len);
    bool ok = m->strs && m->str_len;
    for (size_t i = 0; ok && i < n; i++) {
        m->str_len[i] = strlen(strs[i]);
        ok = (m->strs[i] = strdup(strs[i])) != NULL;
        /* valid UTF-8 (checked), so characters count as a text decoder's string length */
        size_t units = m->mode == LH_BYTE_MODE_TEXT ? lh_utf8_count(strs[i], m->str_len[i])
                                                    : m->str_len[i];
        if (units > m->window)
            m->window = units;
    }
    ok = ok && (m->part = calloc(m->window, sizeof *m->part)) != NULL;
    if (!ok) {
        lh_stop_matcher_free(m);
        return no_memory(err);
    }
    bytelevel_init();
    /* only encoding can fail here, and "abcdef" is valid UTF-8: a failure is out of memory */
    if ((st = lh_tokenizer_encode(t, "abcdef", 6, false, &m->prefix, &m->n_prefix, err)) !=
        LH_OK) {
        lh_stop_matcher_free(m);
        return st;
    }
    *out = m;
    return LH_OK;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The bytes a byte-level token stands for, into c (room for tl bytes); false when a character
 * of it is outside GPT-2's map (an added token written in other characters). */
static bool byte_level_bytes(const char *tok, size_t tl, char *c, size_t *cl)
{
    *cl = 0;
    for (size_t q = 0, k; q < tl; q += k) {
        uint32_t cp = 0;
        k = lh_utf8_next(tok + q, tl - q, &cp, NULL);
        int b = k ? bytelevel_byte(cp) : -1;
        if (b < 0)
            return false;
        c[(*cl)++] = (char)b;
    }
    return true;
}

/* id decoded after the prefix (n_prefix ids of "abcdef"), the prefix cut off again; the token
 * alone when the prefix does not survive the decoder. *out malloc'ed. */
static lh_status decoded_after_prefix(const lh_tokenizer *t, const int32_t *prefix,
                                      size_t n_prefix, int32_t id, char **out, size_t *len,
                                      lh_err *err)
{
    int32_t *seq = malloc((n_prefix + 1) * sizeof *seq);
    if (!seq)
        return no_memory(err);
    if (n_prefix)
        memcpy(seq, prefix, n_prefix * sizeof *seq);
    seq[n_prefix] = id;
    char *text = NULL;
    size_t tl = 0;
    lh_status st = lh_tokenizer_decode(t, seq, n_prefix + 1, false, &text, &tl, err);
    free(seq);
    if (st != LH_OK)
        return st;
    const char *at = strstr(text, "abcdef");
    if (!at) {
        free(text);
        return lh_tokenizer_decode(t, &id, 1, false, out, len, err);
    }
    at += 6;
    *len = tl - (size_t)(at - text);
    memmove(text, at, *len + 1);
    *out = text;
    return LH_OK;
}

/* The clean string of id (see the top), malloc'ed into *out (NULL with *len 0 for an id no
 * token has: it stands for nothing); prefix: the ids of "abcdef". */
static lh_status clean_string(const lh_tokenizer *t, lh_byte_mode mode, const int32_t *prefix,
                              size_t n_prefix, int32_t id, char **out, size_t *len,
                              lh_err *err)
{
    *out = NULL;
    *len = 0;
    const char *tok = lh_tokenizer_id_to_token(t, id);
    if (!tok)
        return LH_OK;
    const size_t tl = strlen(tok);
    if (mode == LH_BYTE_MODE_LEVEL) {
        char *c = malloc(tl + 1);
        if (!c)
            return no_memory(err);
        if (byte_level_bytes(tok, tl, c, len)) {
            *out = c;
            return LH_OK;
        }
        free(c);
    } else if (mode == LH_BYTE_MODE_FALLBACK && tl == 6 && memcmp(tok, "<0x", 3) == 0 &&
               tok[5] == '>' && hex_digit(tok[3]) >= 0 && hex_digit(tok[4]) >= 0) {
        char *c = malloc(1);
        if (!c)
            return no_memory(err);
        c[0] = (char)(hex_digit(tok[3]) * 16 + hex_digit(tok[4]));
        *out = c;
        *len = 1;
        return LH_OK;
    }
    return decoded_after_prefix(t, prefix, n_prefix, id, out, len, err);
}

lh_status lh_tokenizer_token_bytes(const lh_tokenizer *t, int32_t id, char **out, size_t *len,
                                   lh_err *err)
{
    lh_err_clear(err);
    if (!t || !out || !len)
        return lh_err_set(err, LH_E_USAGE, "lh_tokenizer_token_bytes: %s is NULL",
                          !t ? "the tokenizer" : !out ? "out" : "len");
    bytelevel_init();
    int32_t *prefix = NULL;
    size_t n_prefix = 0;
    lh_status st = lh_tokenizer_encode(t, "abcdef", 6, false, &prefix, &n_prefix, err);
    if (st == LH_OK)
        st = clean_string(t, lh_tokenizer_byte_mode(t), prefix, n_prefix, id, out, len, err);
    free(prefix);
    /* a NUL-terminated copy for callers that print it */
    if (st == LH_OK && *out) {
        char *c = realloc(*out, *len + 1);
        if (!c) {
            free(*out);
            *out = NULL;
            return no_memory(err);
        }
        c[*len] = '\0';
        *out = c;
    }
    return st;
}

/* Room for extra more bytes in the buffer; false (the buffer unchanged) when none is left. */
static bool buf_reserve(lh_stop_matcher *m, size_t extra)
{
    if (m->cap - m->len >= extra)
        return true;
    size_t cap = m->cap ? m->cap : 64;
    while (cap - m->len < extra)
        cap *= 2;
    char *b = realloc(m->buf, cap);
    if (!b)
        return false;
    m->buf = b;
    m->cap = cap;
    return true;
}

/* Appends a token's clean string (room reserved) to the window, dropping the oldest token
 * once the window holds W. */
static void window_push(lh_stop_matcher *m, const char *c, size_t cl)
{
    if (m->count == m->window) {
        const size_t drop = m->part[m->head];
        memmove(m->buf, m->buf + drop, m->len - drop);
        m->len -= drop;
        m->head = (m->head + 1) % m->window;
        m->count--;
    }
    if (cl)
        memcpy(m->buf + m->len, c, cl);
    m->len += cl;
    m->part[(m->head + m->count) % m->window] = cl;
    m->count++;
}

lh_status lh_stop_matcher_add_context(lh_stop_matcher *m, const int32_t *ids, size_t n,
                                      lh_err *err)
{
    lh_err_clear(err);
    if (!m)
        return lh_err_set(err, LH_E_USAGE, "lh_stop_matcher_add_context: the matcher is NULL");
    if (!ids && n)
        return lh_err_set(err, LH_E_USAGE, "lh_stop_matcher_add_context: ids is NULL");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return lh_err_set(err, LH_E_USAGE, "token id %d (position %zu) is negative",
                              (int)ids[i], i);
    /* only the last W ids can still be part of a match; all of their strings are made before
     * the window changes, so that an error leaves it as it was */
    const size_t take = n < m->window ? n : m->window;
    const int32_t *tail = ids ? ids + (n - take) : NULL;
    char **c = calloc(take ? take : 1, sizeof *c);
    size_t *cl = calloc(take ? take : 1, sizeof *cl);
    lh_status st = c && cl ? LH_OK : no_memory(err);
    size_t total = 0;
    for (size_t i = 0; st == LH_OK && i < take; i++)
        if ((st = clean_string(m->t, m->mode, m->prefix, m->n_prefix, tail[i], &c[i], &cl[i],
                               err)) == LH_OK)
            total += cl[i];
    if (st == LH_OK && !buf_reserve(m, total))
        st = no_memory(err);
    for (size_t i = 0; st == LH_OK && i < take; i++)
        window_push(m, c[i], cl[i]);
    for (size_t i = 0; c && i < take; i++)
        free(c[i]);
    free(c);
    free(cl);
    return st;
}

lh_status lh_stop_matcher_step(lh_stop_matcher *m, int32_t id, bool *matched, size_t *which,
                               lh_err *err)
{
    lh_err_clear(err);
    if (which)
        *which = SIZE_MAX;
    if (!matched)
        return lh_err_set(err, LH_E_USAGE, "lh_stop_matcher_step: matched is NULL");
    *matched = false;
    if (!m)
        return lh_err_set(err, LH_E_USAGE, "lh_stop_matcher_step: the matcher is NULL");
    if (id < 0)
        return lh_err_set(err, LH_E_USAGE, "token id %d is negative", (int)id);
    char *c = NULL;
    size_t cl = 0;
    lh_status st = clean_string(m->t, m->mode, m->prefix, m->n_prefix, id, &c, &cl, err);
    if (st != LH_OK)
        return st;
    if (!buf_reserve(m, cl)) {
        free(c);
        return no_memory(err);
    }
    window_push(m, c, cl);
    free(c);
    const size_t n = m->len, last = n - cl; /* the new token's string starts at last */
    for (size_t j = 0; j < m->n_strs; j++) {
        const size_t L = m->str_len[j];
        /* an occurrence that ends inside the new token starts after last - L */
        const size_t from = last + 1 > L ? last + 1 - L : 0;
        if (from < n && n - from >= L && memmem(m->buf + from, n - from, m->strs[j], L)) {
            *matched = true;
            if (which)
                *which = j;
            break;
        }
    }
    return LH_OK;
}
