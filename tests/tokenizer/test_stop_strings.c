/* Stop strings (lh_stop_matcher_*, llmhost.h), over the tokenizer fixtures of
 * tests/fixtures/tokenizers: bpe_gpt2 (byte-level: a token stands for its bytes), sp_llama2
 * (byte fallback: "<0xNN>" stands for byte NN, other tokens for their decoded text) and
 * sp_metaspace (text: every token decoded after a prefix).
 *
 * Matching: a stop string spanning several tokens, beginning in the context, ending inside a
 * token, inside one UTF-8 character's bytes, overlapping candidates, several strings (the first
 * in the order given wins), special tokens as written, ids no token has; every step of a longer
 * text against a brute-force search of the whole byte-level text. Refusals: every limit and
 * NULL argument, with its status and message. */
#include "runner.h"

#include "llmhost.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_MSG(err, needle)                                                                 \
    do {                                                                                       \
        bool found_ = strstr((err).msg, (needle)) != NULL;                                     \
        if (!found_)                                                                           \
            fprintf(stderr, "\nmessage '%s' lacks '%s'\n", (err).msg, (needle));               \
        CU_ASSERT(found_);                                                                     \
    } while (0)

static lh_tokenizer *load(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/%s", lh_test_env("LH_FIXTURES"), name);
    lh_tokenizer *t = NULL;
    lh_err err = {0};
    if (lh_tokenizer_load(path, &t, &err) != LH_OK)
        fprintf(stderr, "\n%s: %s\n", name, err.msg);
    return t;
}

/* GPT-2's bytes_to_unicode, written out here as the test's own oracle: the character byte b
 * is written as in a byte-level vocabulary, UTF-8 encoded into out (NUL-terminated). */
static void byte_char(unsigned b, char out[3])
{
    unsigned cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        unsigned n = 0;
        for (unsigned x = 0; x < b; x++)
            n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* The bytes a byte-level token string stands for (the oracle's reverse of byte_char). */
static size_t token_bytes(const char *tok, char *out)
{
    size_t n = 0;
    for (const char *p = tok; *p;) {
        bool found = false;
        for (unsigned b = 0; b < 256 && !found; b++) {
            char c[3];
            byte_char(b, c);
            size_t cl = strlen(c);
            if (strncmp(p, c, cl) == 0) {
                out[n++] = (char)b;
                p += cl;
                found = true;
            }
        }
        if (!found)
            return (size_t)-1;
    }
    return n;
}

/* The ids of the byte-level single-byte tokens spelling s. */
static size_t byte_ids(const lh_tokenizer *t, const char *s, int32_t *ids)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char c[3];
        byte_char(*p, c);
        ids[n] = lh_tokenizer_token_to_id(t, c);
        CU_ASSERT(ids[n] >= 0);
        n++;
    }
    return n;
}

static lh_stop_matcher *matcher(const lh_tokenizer *t, const char *const *strs, size_t n)
{
    lh_stop_matcher *m = NULL;
    lh_err err = {0};
    if (lh_stop_matcher_create(t, strs, n, &m, &err) != LH_OK)
        fprintf(stderr, "\ncreate: %s\n", err.msg);
    CU_ASSERT_PTR_NOT_NULL(m);
    return m;
}

/* Steps ids[0..n) through m; returns the index of the first step that matched (n: none) and
 * that step's string index in *which. */
static size_t first_match(lh_stop_matcher *m, const int32_t *ids, size_t n, size_t *which)
{
    for (size_t i = 0; i < n; i++) {
        bool hit = true;
        size_t w = 0;
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_stop_matcher_step(m, ids[i], &hit, &w, &err), LH_OK);
        CU_ASSERT_EQUAL(hit, w != SIZE_MAX);
        if (hit) {
            if (which)
                *which = w;
            return i;
        }
    }
    return n;
}

static size_t match_once(const lh_tokenizer *t, const char *const *strs, size_t n_strs,
                         const int32_t *ctx, size_t n_ctx, const int32_t *ids, size_t n,
                         size_t *which)
{
    lh_stop_matcher *m = matcher(t, strs, n_strs);
    if (!m)
        return SIZE_MAX;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(m, ctx, n_ctx, &err), LH_OK);
    size_t k = first_match(m, ids, n, which);
    lh_stop_matcher_free(m);
    return k;
}

static void test_check_refusals(void)
{
    lh_err err = {0};
    const char *one[] = {"ok"};
    CU_ASSERT_EQUAL(lh_stop_strings_check(one, 1, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_stop_strings_check(one, 0, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(err.code, LH_E_USAGE);
    CHECK_MSG(err, "no stop strings");
    CU_ASSERT_EQUAL(lh_stop_strings_check(NULL, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop strings: the array is NULL");
    const char *with_null[] = {"a", NULL};
    CU_ASSERT_EQUAL(lh_stop_strings_check(with_null, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop string 1 is NULL");
    const char *empty[] = {"a", "b", ""};
    CU_ASSERT_EQUAL(lh_stop_strings_check(empty, 3, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop string 2 is empty");
    const char *bad[] = {"fine", "ab\xC3"};
    CU_ASSERT_EQUAL(lh_stop_strings_check(bad, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop string 1 is not valid UTF-8 (byte 2)");
    const char *overlong[] = {"\xC0\xAF"};
    CU_ASSERT_EQUAL(lh_stop_strings_check(overlong, 1, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop string 0 is not valid UTF-8 (byte 0)");
    const char *surrogate[] = {"x\xED\xA0\x80"};
    CU_ASSERT_EQUAL(lh_stop_strings_check(surrogate, 1, &err), LH_E_USAGE);
    CHECK_MSG(err, "(byte 1)");
    /* the limits, exactly: 1024 bytes and 64 strings pass, one more is refused */
    char *longest = malloc(LH_STOP_STRING_MAX_BYTES + 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(longest);
    memset(longest, 'x', LH_STOP_STRING_MAX_BYTES);
    longest[LH_STOP_STRING_MAX_BYTES] = 0;
    const char *lng[] = {"a", longest};
    CU_ASSERT_EQUAL(lh_stop_strings_check(lng, 2, &err), LH_OK);
    longest[LH_STOP_STRING_MAX_BYTES] = 'x';
    longest[LH_STOP_STRING_MAX_BYTES + 1] = 0;
    CU_ASSERT_EQUAL(lh_stop_strings_check(lng, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop string 1 is 1025 bytes long: at most 1024");
    free(longest);
    const char *many[LH_STOP_STRINGS_MAX + 1];
    for (size_t i = 0; i <= LH_STOP_STRINGS_MAX; i++)
        many[i] = "s";
    CU_ASSERT_EQUAL(lh_stop_strings_check(many, LH_STOP_STRINGS_MAX, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_stop_strings_check(many, LH_STOP_STRINGS_MAX + 1, &err), LH_E_USAGE);
    CHECK_MSG(err, "65 stop strings: at most 64");
    /* err may be NULL */
    CU_ASSERT_EQUAL(lh_stop_strings_check(empty, 3, NULL), LH_E_USAGE);
}

static void test_create_refusals(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    lh_err err = {0};
    const char *one[] = {"ok"};
    lh_stop_matcher *m = (lh_stop_matcher *)1;
    CU_ASSERT_EQUAL(lh_stop_matcher_create(NULL, one, 1, &m, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(m);
    CHECK_MSG(err, "lh_stop_matcher_create: the tokenizer is NULL");
    CU_ASSERT_EQUAL(lh_stop_matcher_create(t, one, 1, NULL, &err), LH_E_USAGE);
    CHECK_MSG(err, "lh_stop_matcher_create: out is NULL");
    /* the checks of lh_stop_strings_check, with its messages */
    const char *bad[] = {"ok", "\xFF"};
    m = (lh_stop_matcher *)1;
    CU_ASSERT_EQUAL(lh_stop_matcher_create(t, bad, 2, &m, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(m);
    CHECK_MSG(err, "stop string 1 is not valid UTF-8 (byte 0)");
    const char *empty[] = {""};
    CU_ASSERT_EQUAL(lh_stop_matcher_create(t, empty, 1, &m, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop string 0 is empty");
    CU_ASSERT_EQUAL(lh_stop_matcher_create(t, one, 0, &m, &err), LH_E_USAGE);
    CHECK_MSG(err, "no stop strings");
    const char *many[LH_STOP_STRINGS_MAX + 1];
    for (size_t i = 0; i <= LH_STOP_STRINGS_MAX; i++)
        many[i] = "s";
    CU_ASSERT_EQUAL(lh_stop_matcher_create(t, many, LH_STOP_STRINGS_MAX + 1, &m, &err),
                    LH_E_USAGE);
    CHECK_MSG(err, "65 stop strings: at most 64");
    /* the longest string allowed makes a matcher with a window of 1024 tokens */
    char *longest = malloc(LH_STOP_STRING_MAX_BYTES + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(longest);
    memset(longest, 'x', LH_STOP_STRING_MAX_BYTES);
    longest[LH_STOP_STRING_MAX_BYTES] = 0;
    const char *lng[] = {longest};
    int32_t x;
    CU_ASSERT_EQUAL(byte_ids(t, "x", &x), 1);
    m = matcher(t, lng, 1);
    size_t hit_at = SIZE_MAX;
    for (size_t i = 0; m && i < 2 * LH_STOP_STRING_MAX_BYTES; i++) {
        bool hit = false;
        CU_ASSERT_EQUAL(lh_stop_matcher_step(m, x, &hit, NULL, &err), LH_OK);
        if (hit && hit_at == SIZE_MAX)
            hit_at = i;
    }
    CU_ASSERT_EQUAL(hit_at, LH_STOP_STRING_MAX_BYTES - 1);
    lh_stop_matcher_free(m);
    free(longest);
    /* strings are copied: the caller's may change after create */
    char mine[] = "ab";
    const char *mv[] = {mine};
    m = matcher(t, mv, 1);
    mine[0] = 'z';
    int32_t ab[2];
    byte_ids(t, "ab", ab);
    CU_ASSERT_EQUAL(first_match(m, ab, 2, NULL), 1);
    lh_stop_matcher_free(m);
    lh_stop_matcher_free(NULL);
    lh_tokenizer_free(t);
}

static void test_null_arguments(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const char *one[] = {"ab"};
    lh_stop_matcher *m = matcher(t, one, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    lh_err err = {0};
    int32_t ids[2];
    byte_ids(t, "ab", ids);
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(NULL, ids, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "lh_stop_matcher_add_context: the matcher is NULL");
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(m, NULL, 2, &err), LH_E_USAGE);
    CHECK_MSG(err, "lh_stop_matcher_add_context: ids is NULL");
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(m, NULL, 0, &err), LH_OK);
    const int32_t neg[] = {ids[0], ids[1], 7, -1};
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(m, neg, 4, &err), LH_E_USAGE);
    CHECK_MSG(err, "token id -1 (position 3) is negative");
    bool hit = true;
    size_t which = 0;
    CU_ASSERT_EQUAL(lh_stop_matcher_step(NULL, ids[0], &hit, &which, &err), LH_E_USAGE);
    CHECK_MSG(err, "lh_stop_matcher_step: the matcher is NULL");
    CU_ASSERT_FALSE(hit);
    CU_ASSERT_EQUAL(which, SIZE_MAX);
    CU_ASSERT_EQUAL(lh_stop_matcher_step(m, ids[0], NULL, &which, &err), LH_E_USAGE);
    CHECK_MSG(err, "lh_stop_matcher_step: matched is NULL");
    CU_ASSERT_EQUAL(lh_stop_matcher_step(m, -5, &hit, &which, &err), LH_E_USAGE);
    CHECK_MSG(err, "token id -5 is negative");
    /* the refused calls added nothing: "a" then "b" is the first match, at "b" */
    CU_ASSERT_EQUAL(first_match(m, ids, 2, &which), 1);
    CU_ASSERT_EQUAL(which, 0);
    /* err may be NULL */
    CU_ASSERT_EQUAL(lh_stop_matcher_step(m, -1, &hit, NULL, NULL), LH_E_USAGE);
    lh_stop_matcher_free(m);
    lh_tokenizer_free(t);
}

/* Every step of a byte-level text against a search of the whole text so far: a step matches
 * when a stop string occurs ending inside its token's bytes. */
static void test_byte_level_against_brute_force(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const char *text = "Hello, world! How are you doing today? I'm fine, thanks; you're "
                       "welcome. The quick brown fox jumps over the lazy dog.";
    int32_t *ids = NULL;
    size_t n = 0;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(t, text, strlen(text), false, &ids, &n, &err),
                          LH_OK);
    CU_ASSERT(n > 20);
    /* the bytes of every token and where each starts */
    char all[1024];
    size_t start[256], len = 0;
    CU_ASSERT_FATAL(n < 256);
    for (size_t i = 0; i < n; i++) {
        start[i] = len;
        size_t k = token_bytes(lh_tokenizer_id_to_token(t, ids[i]), all + len);
        CU_ASSERT_FATAL(k != (size_t)-1);
        len += k;
    }
    start[n] = len;
    const char *const sets[][3] = {
        {"world! How", NULL, NULL},  /* several tokens */
        {"o", NULL, NULL},           /* inside the first token */
        {"you", "ou'", NULL},        /* the second one overlaps the first's next occurrence */
        {"lazy dog.", "fox j", "x"}, /* whichever ends first */
        {"e. T", ", y", "ks; y"},
        {"not in it", "dog!", NULL}, /* never */
    };
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        size_t n_strs = sets[s][2] ? 3 : sets[s][1] ? 2 : 1;
        lh_stop_matcher *m = matcher(t, sets[s], n_strs);
        if (!m)
            continue;
        for (size_t i = 0; i < n; i++) {
            size_t want = SIZE_MAX;
            for (size_t j = 0; j < n_strs && want == SIZE_MAX; j++) {
                size_t L = strlen(sets[s][j]);
                for (size_t e = start[i] + 1; e <= start[i + 1] && want == SIZE_MAX; e++)
                    if (e >= L && memcmp(all + e - L, sets[s][j], L) == 0)
                        want = j;
            }
            bool hit = false;
            size_t which = 0;
            CU_ASSERT_EQUAL(lh_stop_matcher_step(m, ids[i], &hit, &which, &err), LH_OK);
            CU_ASSERT_EQUAL(which, want);
            CU_ASSERT_EQUAL(hit, want != SIZE_MAX);
            if (which != want)
                fprintf(stderr, "\nset %zu step %zu: matched %zu, want %zu\n", s, i, which,
                        want);
        }
        lh_stop_matcher_free(m);
    }
    free(ids);
    lh_tokenizer_free(t);
}

static void test_spanning_tokens_and_context(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    int32_t ctx[16], out[16];
    size_t nc = byte_ids(t, "Hello", ctx), no = byte_ids(t, "abcdef", out);
    /* spans three output tokens */
    const char *cde[] = {"cde"};
    CU_ASSERT_EQUAL(match_once(t, cde, 1, ctx, nc, out, no, NULL), 4);
    /* begun in the context, completed by the first new token */
    const char *loa[] = {"loa"};
    CU_ASSERT_EQUAL(match_once(t, loa, 1, ctx, nc, out, no, NULL), 0);
    /* wholly inside the context: never */
    const char *ell[] = {"ell"};
    CU_ASSERT_EQUAL(match_once(t, ell, 1, ctx, nc, out, no, NULL), no);
    /* context given in two pieces is the same context */
    lh_stop_matcher *m = matcher(t, loa, 1);
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(m, ctx, 2, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(m, ctx + 2, nc - 2, &err), LH_OK);
    CU_ASSERT_EQUAL(first_match(m, out, no, NULL), 0);
    lh_stop_matcher_free(m);
    /* a context far longer than the window: its end still counts */
    int32_t *lng = malloc(300 * sizeof *lng);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lng);
    for (size_t i = 0; i < 300; i++)
        lng[i] = ctx[i % nc];
    CU_ASSERT_EQUAL(match_once(t, loa, 1, lng, 300, out, no, NULL), 0);
    free(lng);
    /* no context: a string at the very start */
    const char *ab[] = {"ab"};
    CU_ASSERT_EQUAL(match_once(t, ab, 1, NULL, 0, out, no, NULL), 1);
    lh_tokenizer_free(t);
}

static void test_overlapping_and_several(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    int32_t ids[32];
    lh_err err = {0};
    /* "abab" in "ababab": at the 4th token, and again at the 6th when stepping on */
    size_t n = byte_ids(t, "ababab", ids);
    const char *abab[] = {"abab"};
    lh_stop_matcher *m = matcher(t, abab, 1);
    bool hits[6];
    for (size_t i = 0; m && i < n; i++)
        CU_ASSERT_EQUAL(lh_stop_matcher_step(m, ids[i], &hits[i], NULL, &err), LH_OK);
    CU_ASSERT(!hits[0] && !hits[1] && !hits[2] && hits[3] && !hits[4] && hits[5]);
    lh_stop_matcher_free(m);
    /* a candidate that fails ("aab" against "aaa") does not hide the match that overlaps it */
    n = byte_ids(t, "aaab", ids);
    const char *aab[] = {"aab"};
    CU_ASSERT_EQUAL(match_once(t, aab, 1, NULL, 0, ids, n, NULL), 3);
    /* two strings ending on the same token: the first in the order given */
    n = byte_ids(t, "xabc", ids);
    size_t which = 9;
    const char *order1[] = {"zzz", "bc", "abc"};
    CU_ASSERT_EQUAL(match_once(t, order1, 3, NULL, 0, ids, n, &which), 3);
    CU_ASSERT_EQUAL(which, 1);
    const char *order2[] = {"abc", "zzz", "bc"};
    CU_ASSERT_EQUAL(match_once(t, order2, 3, NULL, 0, ids, n, &which), 3);
    CU_ASSERT_EQUAL(which, 0);
    /* the one that ends first wins, whatever the order */
    const char *early[] = {"abc", "xa"};
    CU_ASSERT_EQUAL(match_once(t, early, 2, NULL, 0, ids, n, &which), 1);
    CU_ASSERT_EQUAL(which, 1);
    /* merged tokens: "Hello world" is "Ġ" "Hello" "Ġw" "or" "l" "d" */
    int32_t *enc = NULL;
    size_t ne = 0;
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(t, "Hello world", 11, false, &enc, &ne, &err),
                          LH_OK);
    CU_ASSERT_EQUAL_FATAL(ne, 6);
    const char *ell[] = {"ell"}; /* inside one token */
    CU_ASSERT_EQUAL(match_once(t, ell, 1, NULL, 0, enc, ne, NULL), 1);
    const char *orl[] = {"orl"}; /* a token's whole string and the next */
    CU_ASSERT_EQUAL(match_once(t, orl, 1, NULL, 0, enc, ne, NULL), 4);
    const char *world[] = {" world"}; /* from the middle of one token over three more */
    CU_ASSERT_EQUAL(match_once(t, world, 1, NULL, 0, enc, ne, NULL), 5);
    free(enc);
    lh_tokenizer_free(t);
}

/* Byte-level tokens carry single bytes: a stop string may end (or begin) between the bytes of
 * one character. */
static void test_inside_utf8_characters(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    int32_t ids[16];
    size_t n = byte_ids(t, "a\xC3\xA9z", ids); /* "aéz" as four byte tokens */
    /* "é" is complete only with its second byte */
    const char *e_acute[] = {"\xC3\xA9"};
    CU_ASSERT_EQUAL(match_once(t, e_acute, 1, NULL, 0, ids, n, NULL), 2);
    const char *ae[] = {"a\xC3\xA9"};
    CU_ASSERT_EQUAL(match_once(t, ae, 1, NULL, 0, ids, n, NULL), 2);
    /* begun in the context with the first byte of "é" */
    const char *ez[] = {"\xC3\xA9z"};
    CU_ASSERT_EQUAL(match_once(t, ez, 1, ids, 2, ids + 2, 2, NULL), 1);
    /* a token whose bytes end inside a character: "Ø§ÙĦØ" stands for D8 A7 D9 84 D8 ("ال"
     * and the first byte of a third letter); "©" (byte A9) then completes "ة" (D8 A9) */
    const int32_t split = lh_tokenizer_token_to_id(t, "\xC3\x98\xC2\xA7\xC3\x99\xC4\xA6\xC3\x98");
    CU_ASSERT_FATAL(split >= 0);
    int32_t seq[2] = {split, 0};
    byte_ids(t, "\xA9", &seq[1]);
    const char *lam_ta[] = {"\xD9\x84\xD8\xA9"};   /* "لة": ends inside the next token */
    CU_ASSERT_EQUAL(match_once(t, lam_ta, 1, NULL, 0, seq, 2, NULL), 1);
    const char *lam[] = {"\xD9\x84"};              /* "ل": wholly inside the first */
    CU_ASSERT_EQUAL(match_once(t, lam, 1, NULL, 0, seq, 2, NULL), 0);
    const char *ta[] = {"\xD8\xA9"};               /* "ة": its two bytes in two tokens */
    CU_ASSERT_EQUAL(match_once(t, ta, 1, NULL, 0, seq, 2, NULL), 1);
    lh_tokenizer_free(t);

    /* byte fallback: "€" (E2 82 AC) as three <0xNN> tokens after a text token */
    t = load("sp_llama2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), LH_BYTE_MODE_FALLBACK);
    int32_t fb[4] = {lh_tokenizer_token_to_id(t, "\xE2\x96\x81" "a"), /* "▁a" */
                     lh_tokenizer_token_to_id(t, "<0xE2>"), lh_tokenizer_token_to_id(t, "<0x82>"),
                     lh_tokenizer_token_to_id(t, "<0xAC>")};
    for (size_t i = 0; i < 4; i++)
        CU_ASSERT_FATAL(fb[i] >= 0);
    const char *euro[] = {"\xE2\x82\xAC"};
    CU_ASSERT_EQUAL(match_once(t, euro, 1, NULL, 0, fb, 4, NULL), 3);
    /* "▁a" stands for " a" (decoded after the prefix, its space kept) */
    const char *a_euro[] = {" a\xE2\x82\xAC"};
    CU_ASSERT_EQUAL(match_once(t, a_euro, 1, NULL, 0, fb, 4, NULL), 3);
    lh_tokenizer_free(t);
}

/* A text tokenizer: each token decoded after a prefix, so a word's leading space survives,
 * and the window counts characters. */
static void test_text_tokenizer(void)
{
    lh_tokenizer *t = load("sp_metaspace.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), LH_BYTE_MODE_TEXT);
    const int32_t hello = lh_tokenizer_token_to_id(t, "Hello"),
                  and_ = lh_tokenizer_token_to_id(t, "\xE2\x96\x81" "and"),
                  user = lh_tokenizer_token_to_id(t, "\xE2\x96\x81" "user");
    CU_ASSERT_FATAL(hello >= 0 && and_ >= 0 && user >= 0);
    const int32_t ids[] = {and_, user};
    /* decoded alone, "▁and" would lose its space at the start of the text */
    const char *sp_and[] = {" and"};
    CU_ASSERT_EQUAL(match_once(t, sp_and, 1, NULL, 0, ids, 2, NULL), 0);
    const char *o_and[] = {"o and"};
    CU_ASSERT_EQUAL(match_once(t, o_and, 1, &hello, 1, ids, 2, NULL), 0);
    const char *d_us[] = {"d us", "nope"};
    size_t which = 9;
    CU_ASSERT_EQUAL(match_once(t, d_us, 2, &hello, 1, ids, 2, &which), 1);
    CU_ASSERT_EQUAL(which, 0);
    /* special tokens as written */
    const int32_t eos = lh_tokenizer_token_to_id(t, "</s>");
    CU_ASSERT_FATAL(eos >= 0);
    const int32_t with_eos[] = {user, eos};
    const char *user_eos[] = {"user</s>"};
    CU_ASSERT_EQUAL(match_once(t, user_eos, 1, NULL, 0, with_eos, 2, NULL), 1);
    lh_tokenizer_free(t);

    /* byte-level: special tokens as written too */
    t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const int32_t end = lh_tokenizer_token_to_id(t, "<|end_of_text|>");
    CU_ASSERT_FATAL(end >= 0);
    int32_t seq[4];
    byte_ids(t, "ok", seq);
    seq[2] = end;
    const char *k_end[] = {"k<|end"};
    CU_ASSERT_EQUAL(match_once(t, k_end, 1, NULL, 0, seq, 3, NULL), 2);
    lh_tokenizer_free(t);
}

/* Ids no token has (a model vocabulary padded beyond the tokenizer's) stand for nothing; a
 * text with no stop string in it never matches, and there is nothing to flush at its end:
 * the matcher holds no text. */
static void test_no_match_and_unknown_ids(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const int32_t vocab = lh_tokenizer_vocab_size(t);
    int32_t ids[8];
    size_t n = byte_ids(t, "abc", ids);
    ids[n++] = vocab;
    ids[n++] = vocab + 100;
    byte_ids(t, "d", &ids[n++]);
    const char *never[] = {"xyz", "dcba", "ca"};
    CU_ASSERT_EQUAL(match_once(t, never, 3, NULL, 0, ids, n, NULL), n);
    /* "c", two ids standing for nothing, "d": "cd" matches when the window (W tokens, as
     * transformers looks back) still holds "c" -- W 4 here, for the other string ... */
    const char *cd_long[] = {"cd", "zzzz"};
    CU_ASSERT_EQUAL(match_once(t, cd_long, 2, NULL, 0, ids, n, NULL), n - 1);
    /* ... not with W 2 */
    const char *cd[] = {"cd"};
    CU_ASSERT_EQUAL(match_once(t, cd, 1, NULL, 0, ids, n, NULL), n);
    /* two matchers over one tokenizer are independent */
    const char *ab[] = {"ab"}, *bc[] = {"bc"};
    lh_stop_matcher *m1 = matcher(t, ab, 1), *m2 = matcher(t, bc, 1);
    lh_err err = {0};
    bool h1[3], h2[3];
    for (size_t i = 0; m1 && m2 && i < 3; i++) {
        CU_ASSERT_EQUAL(lh_stop_matcher_step(m1, ids[i], &h1[i], NULL, &err), LH_OK);
        CU_ASSERT_EQUAL(lh_stop_matcher_step(m2, ids[i], &h2[i], NULL, &err), LH_OK);
    }
    CU_ASSERT(!h1[0] && h1[1] && !h1[2]);
    CU_ASSERT(!h2[0] && !h2[1] && h2[2]);
    lh_stop_matcher_free(m1);
    lh_stop_matcher_free(m2);
    lh_tokenizer_free(t);
}

/* lh_tokenizer_token_bytes: the strings the matcher reads, one token at a time. */
static void expect_bytes(const lh_tokenizer *t, int32_t id, const char *want, size_t want_len)
{
    char *b = NULL;
    size_t n = 99;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_token_bytes(t, id, &b, &n, &err), LH_OK);
    CU_ASSERT_EQUAL(n, want_len);
    if (want) {
        CU_ASSERT(b && memcmp(b, want, want_len) == 0 && b[n] == '\0');
    } else {
        CU_ASSERT_PTR_NULL(b);
    }
    free(b);
}

static void test_token_bytes(void)
{
    lh_tokenizer *t = load("bpe_gpt2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    /* byte-level: a token that ends inside a character gives exactly its bytes */
    const int32_t split = lh_tokenizer_token_to_id(t, "\xC3\x98\xC2\xA7\xC3\x99\xC4\xA6\xC3\x98");
    CU_ASSERT_FATAL(split >= 0);
    expect_bytes(t, split, "\xD8\xA7\xD9\x84\xD8", 5);
    const int32_t sp_the = lh_tokenizer_token_to_id(t, "\xC4\xA0the"); /* "Ġthe" */
    CU_ASSERT_FATAL(sp_the >= 0);
    expect_bytes(t, sp_the, " the", 4);
    const int32_t end = lh_tokenizer_token_to_id(t, "<|end_of_text|>");
    expect_bytes(t, end, "<|end_of_text|>", 15); /* special tokens as written */
    expect_bytes(t, lh_tokenizer_vocab_size(t) + 5, NULL, 0); /* no such token */
    char *b = NULL;
    size_t n = 0;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_tokenizer_token_bytes(NULL, 1, &b, &n, &err), LH_E_USAGE);
    CHECK_MSG(err, "the tokenizer is NULL");
    CU_ASSERT_EQUAL(lh_tokenizer_token_bytes(t, 1, NULL, &n, &err), LH_E_USAGE);
    lh_tokenizer_free(t);
    /* byte fallback: <0xNN> is its byte; a text token keeps its leading space */
    t = load("sp_llama2.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    expect_bytes(t, lh_tokenizer_token_to_id(t, "<0xE2>"), "\xE2", 1);
    expect_bytes(t, lh_tokenizer_token_to_id(t, "\xE2\x96\x81" "a"), " a", 2);
    lh_tokenizer_free(t);
}

int main(int argc, char **argv)
{
    static CU_TestInfo tests[] = {
        {"check_refusals", test_check_refusals},
        {"create_refusals", test_create_refusals},
        {"null_arguments", test_null_arguments},
        {"byte_level_against_brute_force", test_byte_level_against_brute_force},
        {"spanning_tokens_and_context", test_spanning_tokens_and_context},
        {"overlapping_and_several", test_overlapping_and_several},
        {"inside_utf8_characters", test_inside_utf8_characters},
        {"text_tokenizer", test_text_tokenizer},
        {"no_match_and_unknown_ids", test_no_match_and_unknown_ids},
        {"token_bytes", test_token_bytes},
        CU_TEST_INFO_NULL,
    };
    static CU_SuiteInfo suites[] = {
        {"stop_strings", NULL, NULL, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };
    return lh_test_main(argc, argv, suites);
}
