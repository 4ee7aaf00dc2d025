/* host/core's shared text helpers: core/utf8.h (decoding with the maximal-subpart rule,
 * checking, encoding, counting) on well-formed input at every length boundary and on every
 * class of ill-formed input (lone continuation bytes, bytes that never start a character,
 * overlongs, surrogates, past U+10FFFF, truncated sequences), compared with Python's
 * bytes.decode("utf-8", "replace"); and core/strbuf.h (every add, truncate, take, free) with
 * its limit and its sticky failure on an allocation that cannot succeed. */
#include "runner.h"

#include "core/strbuf.h"
#include "core/utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The allocation-failure tests ask for more memory than the address space holds; under
 * AddressSanitizer that must return NULL as it does without, not abort the program. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

#define FFFD "\xEF\xBF\xBD"

/* ---- utf8 -------------------------------------------------------------------------------------- */

static void test_next_valid(void)
{
    static const struct { const char *s; size_t n; uint32_t cp; } ok[] = {
        {"A", 1, 0x41},           {"\x7F", 1, 0x7F},
        {"\xC2\x80", 2, 0x80},    {"\xC3\xA9", 2, 0xE9},          {"\xDF\xBF", 2, 0x7FF},
        {"\xE0\xA0\x80", 3, 0x800}, {"\xE2\x82\xAC", 3, 0x20AC},  {"\xED\x9F\xBF", 3, 0xD7FF},
        {"\xEE\x80\x80", 3, 0xE000}, {"\xEF\xBF\xBD", 3, 0xFFFD}, {"\xEF\xBF\xBF", 3, 0xFFFF},
        {"\xF0\x90\x80\x80", 4, 0x10000}, {"\xF0\x9F\x98\x80", 4, 0x1F600},
        {"\xF4\x8F\xBF\xBF", 4, 0x10FFFF},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint32_t cp = 0;
        size_t bad = 99;
        /* followed by more text: only the first character is read */
        char s[8];
        memcpy(s, ok[i].s, ok[i].n);
        memcpy(s + ok[i].n, "xyz", 3);
        CU_ASSERT_EQUAL(lh_utf8_next(s, ok[i].n + 3, &cp, &bad), ok[i].n);
        CU_ASSERT_EQUAL(cp, ok[i].cp);
        CU_ASSERT_EQUAL(lh_utf8_next(ok[i].s, ok[i].n, NULL, NULL), ok[i].n);
        CU_ASSERT_EQUAL(lh_utf8_step(ok[i].s, ok[i].n), ok[i].n);
    }
    uint32_t cp = 7;
    CU_ASSERT_EQUAL(lh_utf8_next("\0", 1, &cp, NULL), 1); /* NUL is a character */
    CU_ASSERT_EQUAL(cp, 0);
}

static void test_next_ill_formed(void)
{
    /* bad: how many bytes the first U+FFFD replaces (Unicode Table 3-7, maximal subparts) */
    static const struct { const char *what, *s; size_t n, bad; } ko[] = {
        {"lone continuation", "\x80", 1, 1},
        {"lone continuation (last)", "\xBF", 1, 1},
        {"overlong 2-byte C0", "\xC0\x80", 2, 1},
        {"overlong 2-byte C1", "\xC1\xBF", 2, 1},
        {"overlong 3-byte", "\xE0\x80\x80", 3, 1},
        {"overlong 3-byte (U+07FF)", "\xE0\x9F\xBF", 3, 1},
        {"overlong 4-byte", "\xF0\x80\x80\x80", 4, 1},
        {"overlong 4-byte (U+FFFF)", "\xF0\x8F\xBF\xBF", 4, 1},
        {"surrogate U+D800", "\xED\xA0\x80", 3, 1},
        {"surrogate U+DFFF", "\xED\xBF\xBF", 3, 1},
        {"past U+10FFFF (F4 90)", "\xF4\x90\x80\x80", 4, 1},
        {"past U+10FFFF (F5)", "\xF5\x80\x80\x80", 4, 1},
        {"never a lead byte (F8)", "\xF8\x88\x80\x80\x80", 5, 1},
        {"never a lead byte (FE)", "\xFE", 1, 1},
        {"never a lead byte (FF)", "\xFF", 1, 1},
        {"truncated 2-byte", "\xC3", 1, 1},
        {"truncated 3-byte after 1", "\xE2", 1, 1},
        {"truncated 3-byte after 2", "\xE2\x82", 2, 2},
        {"truncated 4-byte after 3", "\xF0\x9F\x98", 3, 3},
        {"3-byte cut by ASCII", "\xE2\x82\x41", 3, 2},
        {"4-byte cut by a lead byte", "\xF0\x9F\xC3\xA9", 4, 2},
        {"2-byte cut by ASCII", "\xC3\x41", 2, 1},
    };
    for (size_t i = 0; i < sizeof ko / sizeof ko[0]; i++) {
        uint32_t cp = 12345;
        size_t bad = 0;
        size_t k = lh_utf8_next(ko[i].s, ko[i].n, &cp, &bad);
        if (k != 0 || bad != ko[i].bad)
            fprintf(stderr, "\n%s: length %zu, bad %zu (want 0, %zu)\n", ko[i].what, k, bad,
                    ko[i].bad);
        CU_ASSERT_EQUAL(k, 0);
        CU_ASSERT_EQUAL(bad, ko[i].bad);
        CU_ASSERT_EQUAL(cp, 12345); /* untouched */
        CU_ASSERT_EQUAL(lh_utf8_next(ko[i].s, ko[i].n, NULL, NULL), 0);
        CU_ASSERT_EQUAL(lh_utf8_step(ko[i].s, ko[i].n), ko[i].bad);
        CU_ASSERT_FALSE(lh_utf8_valid(ko[i].s, ko[i].n));
        CU_ASSERT_EQUAL(lh_utf8_check(ko[i].s, ko[i].n), 0);
    }
}

static void test_check_and_count(void)
{
    const char *ok = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z"; /* a é € 😀 z */
    CU_ASSERT_TRUE(lh_utf8_valid(ok, strlen(ok)));
    CU_ASSERT_EQUAL(lh_utf8_check(ok, strlen(ok)), strlen(ok));
    CU_ASSERT_EQUAL(lh_utf8_count(ok, strlen(ok)), 5);
    CU_ASSERT_TRUE(lh_utf8_valid("", 0));
    CU_ASSERT_EQUAL(lh_utf8_check("", 0), 0);
    CU_ASSERT_EQUAL(lh_utf8_count("", 0), 0);
    CU_ASSERT_TRUE(lh_utf8_valid("a\0b", 3)); /* lengths, not NUL, end strings */

    /* the first ill-formed byte, wherever it is */
    CU_ASSERT_EQUAL(lh_utf8_check("ab\xC3\xA9\x80", 5), 4);
    CU_ASSERT_EQUAL(lh_utf8_check("ab\xED\xA0\x80", 5), 2);
    CU_ASSERT_EQUAL(lh_utf8_check("\xC3\xA9\xF0\x9F\x98", 5), 2); /* truncated at the end */
    /* a valid string cut inside a character is not valid */
    CU_ASSERT_EQUAL(lh_utf8_check(ok, 3), 1 + 2);
    CU_ASSERT_FALSE(lh_utf8_valid(ok, 5));

    /* ill-formed subparts count one each, as the U+FFFD that would replace them:
     * a, 80, E2 82 (one subpart), b, C0, 80 */
    CU_ASSERT_EQUAL(lh_utf8_count("a\x80\xE2\x82" "b\xC0\x80", 7), 6);
    /* Unicode's example (Table 3-8): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> 10 */
    CU_ASSERT_EQUAL(lh_utf8_count("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", 13), 10);
}

static void test_encode(void)
{
    static const struct { uint32_t cp; const char *s; size_t n; } ok[] = {
        {0x0, "\0", 1},
        {0x41, "A", 1},
        {0x7F, "\x7F", 1},
        {0x80, "\xC2\x80", 2},
        {0x7FF, "\xDF\xBF", 2},
        {0x800, "\xE0\xA0\x80", 3},
        {0xD7FF, "\xED\x9F\xBF", 3},
        {0xE000, "\xEE\x80\x80", 3},
        {0xFFFD, FFFD, 3},
        {0xFFFF, "\xEF\xBF\xBF", 3},
        {0x10000, "\xF0\x90\x80\x80", 4},
        {0x10FFFF, "\xF4\x8F\xBF\xBF", 4},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char out[4] = {0};
        CU_ASSERT_EQUAL(lh_utf8_encode(ok[i].cp, out), ok[i].n);
        CU_ASSERT_EQUAL(memcmp(out, ok[i].s, ok[i].n), 0);
        /* round trip */
        uint32_t cp = 0;
        CU_ASSERT_EQUAL(lh_utf8_next(out, ok[i].n, &cp, NULL), ok[i].n);
        CU_ASSERT_EQUAL(cp, ok[i].cp);
    }
    static const uint32_t ko[] = {0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0x110000, 0x7FFFFFFF,
                                  0x80000000u, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof ko / sizeof ko[0]; i++) {
        char out[4] = {'x', 'x', 'x', 'x'};
        CU_ASSERT_EQUAL(lh_utf8_encode(ko[i], out), 0);
    }
}

/* ---- strbuf ------------------------------------------------------------------------------------ */

static void test_strbuf_adds(void)
{
    lh_strbuf b = {0};
    CU_ASSERT_TRUE(lh_strbuf_ok(&b));
    CU_ASSERT_PTR_NULL(b.s);
    lh_strbuf_add(&b, "", 0); /* an empty add still makes a string */
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.s);
    CU_ASSERT_STRING_EQUAL(b.s, "");
    lh_strbuf_add(&b, "abcdef", 3);
    lh_strbuf_puts(&b, "-x-");
    lh_strbuf_addc(&b, '!');
    lh_strbuf_printf(&b, "%d:%s:%.2f", 42, "y", 0.5);
    CU_ASSERT_STRING_EQUAL(b.s, "abc-x-!42:y:0.50");
    CU_ASSERT_EQUAL(b.len, strlen(b.s));
    lh_strbuf_addc(&b, '\0'); /* bytes, not C strings: a NUL is kept */
    CU_ASSERT_EQUAL(b.len, 17);
    CU_ASSERT_EQUAL(b.s[16], '\0');
    CU_ASSERT_TRUE(lh_strbuf_ok(&b));
    lh_strbuf_free(&b);
    CU_ASSERT_PTR_NULL(b.s);
    CU_ASSERT_EQUAL(b.len, 0);

    /* growth past the first allocations, one byte at a time */
    for (int i = 0; i < 10000; i++)
        lh_strbuf_addc(&b, (char)('a' + i % 26));
    CU_ASSERT_EQUAL_FATAL(b.len, 10000);
    CU_ASSERT_TRUE(b.cap > b.len);
    bool same = true;
    for (int i = 0; i < 10000; i++)
        same = same && b.s[i] == (char)('a' + i % 26);
    CU_ASSERT_TRUE(same);
    CU_ASSERT_EQUAL(b.s[10000], '\0');
    /* reserve: room without a reallocation */
    CU_ASSERT_TRUE(lh_strbuf_reserve(&b, 100000));
    char *before = b.s;
    for (int i = 0; i < 100000; i++)
        lh_strbuf_addc(&b, 'z');
    CU_ASSERT_PTR_EQUAL(b.s, before);
    lh_strbuf_free(&b);

    /* a long printf (past the first allocation) */
    char big[1000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    lh_strbuf_printf(&b, "<%s>", big);
    CU_ASSERT_EQUAL(b.len, 1001);
    CU_ASSERT_EQUAL(b.s[0], '<');
    CU_ASSERT_EQUAL(b.s[1000], '>');
    lh_strbuf_free(&b);
}

static void test_strbuf_utf8(void)
{
    lh_strbuf b = {0};
    lh_strbuf_add_cp(&b, 0x41);
    lh_strbuf_add_cp(&b, 0xE9);
    lh_strbuf_add_cp(&b, 0x20AC);
    lh_strbuf_add_cp(&b, 0x1F600);
    CU_ASSERT_STRING_EQUAL(b.s, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
    lh_strbuf_truncate(&b, 0);
    /* not a scalar value: U+FFFD */
    lh_strbuf_add_cp(&b, 0xD800);
    lh_strbuf_add_cp(&b, 0xDFFF);
    lh_strbuf_add_cp(&b, 0x110000);
    lh_strbuf_add_cp(&b, 0xFFFFFFFFu);
    CU_ASSERT_STRING_EQUAL(b.s, FFFD FFFD FFFD FFFD);
    lh_strbuf_free(&b);

    /* lossy: every case as Python's bytes.decode("utf-8", "replace") has it */
    /* out_n: the output length when it holds a NUL (else 0: strlen) */
    static const struct { const char *in; size_t n; const char *out; size_t out_n; } cases[] = {
        {"plain \xC3\xA9\xF0\x9F\x98\x80", 12, "plain \xC3\xA9\xF0\x9F\x98\x80", 0},
        {"", 0, "", 0},
        {"\x80", 1, FFFD, 0},
        {"\xC0\x80", 2, FFFD FFFD, 0},
        {"\xC1\xBF", 2, FFFD FFFD, 0},
        {"\xE0\x80\x80", 3, FFFD FFFD FFFD, 0},
        {"\xF0\x80\x80\x80", 4, FFFD FFFD FFFD FFFD, 0},
        {"\xED\xA0\x80", 3, FFFD FFFD FFFD, 0},
        {"\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, 0},
        {"\xF5", 1, FFFD, 0},
        {"\xFF", 1, FFFD, 0},
        {"\xE2\x82", 2, FFFD, 0},
        {"\xF0\x9F\x98", 3, FFFD, 0},
        {"\xE2\x82\x41", 3, FFFD "A", 0},
        {"a\0b", 3, "a\0b", 3},
        /* Unicode's example (Table 3-8) */
        {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", 13,
         "a" FFFD FFFD FFFD "b" FFFD "c" FFFD FFFD "d", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lh_strbuf_add_lossy(&b, cases[i].in, cases[i].n);
        size_t want = cases[i].out_n ? cases[i].out_n : strlen(cases[i].out);
        CU_ASSERT_TRUE(lh_strbuf_ok(&b));
        CU_ASSERT_EQUAL(b.len, want);
        CU_ASSERT_TRUE(b.len == want && memcmp(b.s ? b.s : "", cases[i].out, want) == 0);
        CU_ASSERT_TRUE(lh_utf8_valid(b.s ? b.s : "", b.len)); /* lossy output is always valid */
        lh_strbuf_free(&b);
    }
}

static void test_strbuf_truncate_take(void)
{
    lh_strbuf b = {0};
    lh_strbuf_truncate(&b, 0); /* on an empty buffer: nothing */
    CU_ASSERT_PTR_NULL(b.s);
    lh_strbuf_puts(&b, "hello world");
    lh_strbuf_truncate(&b, 50); /* not longer: nothing */
    CU_ASSERT_STRING_EQUAL(b.s, "hello world");
    lh_strbuf_truncate(&b, 5);
    CU_ASSERT_EQUAL(b.len, 5);
    CU_ASSERT_STRING_EQUAL(b.s, "hello");
    lh_strbuf_puts(&b, "!");
    CU_ASSERT_STRING_EQUAL(b.s, "hello!");

    char *s = lh_strbuf_take(&b);
    CU_ASSERT_STRING_EQUAL(s, "hello!");
    free(s);
    CU_ASSERT_PTR_NULL(b.s); /* reset */
    CU_ASSERT_EQUAL(b.len, 0);
    CU_ASSERT_EQUAL(b.cap, 0);
    /* an empty buffer's take: "", the caller's */
    s = lh_strbuf_take(&b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_STRING_EQUAL(s, "");
    free(s);
    /* the buffer serves again after a take */
    lh_strbuf_addc(&b, 'x');
    CU_ASSERT_STRING_EQUAL(b.s, "x");
    lh_strbuf_free(&b);
    lh_strbuf_free(&b); /* twice: harmless */
}

static void test_strbuf_limit(void)
{
    lh_strbuf b = {.limit = 5};
    lh_strbuf_puts(&b, "abc");
    CU_ASSERT_TRUE(lh_strbuf_ok(&b));
    lh_strbuf_puts(&b, "de"); /* len == limit is allowed */
    CU_ASSERT_TRUE(lh_strbuf_ok(&b));
    CU_ASSERT_STRING_EQUAL(b.s, "abcde");
    lh_strbuf_addc(&b, 'f'); /* one past */
    CU_ASSERT_FALSE(lh_strbuf_ok(&b));
    CU_ASSERT_TRUE(b.over);
    CU_ASSERT_FALSE(b.oom);
    CU_ASSERT_EQUAL(b.len, 5); /* nothing of the failed add */
    CU_ASSERT_STRING_EQUAL(b.s, "abcde");
    /* sticky: every later add is a no-op, even an empty one */
    lh_strbuf_add(&b, "", 0);
    lh_strbuf_add_cp(&b, 'g');
    lh_strbuf_add_lossy(&b, "h", 1);
    lh_strbuf_printf(&b, "%s", "");
    CU_ASSERT_FALSE(lh_strbuf_reserve(&b, 0));
    CU_ASSERT_EQUAL(b.len, 5);
    /* a failed buffer's take: NULL; the buffer is reset, its limit kept */
    CU_ASSERT_PTR_NULL(lh_strbuf_take(&b));
    CU_ASSERT_TRUE(lh_strbuf_ok(&b));
    CU_ASSERT_PTR_NULL(b.s);
    CU_ASSERT_EQUAL(b.limit, 5);
    lh_strbuf_puts(&b, "abcdef"); /* one add past the limit: nothing of it */
    CU_ASSERT_FALSE(lh_strbuf_ok(&b));
    CU_ASSERT_EQUAL(b.len, 0);
    lh_strbuf_free(&b);
    CU_ASSERT_TRUE(lh_strbuf_ok(&b));
    CU_ASSERT_EQUAL(b.limit, 5);

    /* printf and multi-byte adds past the limit */
    lh_strbuf_printf(&b, "%d", 123456);
    CU_ASSERT_TRUE(b.over);
    lh_strbuf_free(&b);
    lh_strbuf_puts(&b, "abcd");
    lh_strbuf_add_cp(&b, 0xE9); /* 2 bytes: 6 > 5 */
    CU_ASSERT_TRUE(b.over);
    CU_ASSERT_STRING_EQUAL(b.s, "abcd");
    lh_strbuf_free(&b);
    lh_strbuf_puts(&b, "abc");
    lh_strbuf_add_lossy(&b, "d\x80", 2); /* d, then 3 bytes of U+FFFD: over */
    CU_ASSERT_TRUE(b.over);
    CU_ASSERT_STRING_EQUAL(b.s, "abcd");
    lh_strbuf_free(&b);
}

static void test_strbuf_oom(void)
{
    /* more than the address space: realloc fails, the buffer is failed (oom) */
    lh_strbuf b = {0};
    lh_strbuf_puts(&b, "kept");
    CU_ASSERT_FALSE(lh_strbuf_reserve(&b, SIZE_MAX / 4));
    CU_ASSERT_TRUE(b.oom);
    CU_ASSERT_FALSE(b.over);
    CU_ASSERT_FALSE(lh_strbuf_ok(&b));
    CU_ASSERT_STRING_EQUAL(b.s, "kept"); /* what was there stays, until free or take */
    lh_strbuf_puts(&b, "more");
    CU_ASSERT_EQUAL(b.len, 4);
    CU_ASSERT_PTR_NULL(lh_strbuf_take(&b));
    CU_ASSERT_TRUE(lh_strbuf_ok(&b)); /* reset: usable again */
    lh_strbuf_puts(&b, "again");
    CU_ASSERT_STRING_EQUAL(b.s, "again");
    lh_strbuf_free(&b);

    /* a size that would overflow: failed (over), nothing allocated */
    CU_ASSERT_FALSE(lh_strbuf_reserve(&b, SIZE_MAX));
    CU_ASSERT_TRUE(b.over);
    CU_ASSERT_PTR_NULL(b.s);
    lh_strbuf_add(&b, "x", 1);
    CU_ASSERT_PTR_NULL(b.s);
    lh_strbuf_free(&b);
    CU_ASSERT_TRUE(lh_strbuf_ok(&b));
}

int main(int argc, char **argv)
{
    static CU_TestInfo utf8[] = {
        {"well-formed characters at every length boundary", test_next_valid},
        {"ill-formed: overlong, surrogate, truncated, past U+10FFFF", test_next_ill_formed},
        {"check, valid and count", test_check_and_count},
        {"encode", test_encode},
        CU_TEST_INFO_NULL,
    };
    static CU_TestInfo strbuf[] = {
        {"add, puts, addc, printf, reserve, free", test_strbuf_adds},
        {"add_cp and add_lossy", test_strbuf_utf8},
        {"truncate and take", test_strbuf_truncate_take},
        {"limit: sticky, nothing of the failed add", test_strbuf_limit},
        {"allocation failure and overflow", test_strbuf_oom},
        CU_TEST_INFO_NULL,
    };
    static CU_SuiteInfo suites[] = {
        {"core-utf8", NULL, NULL, NULL, NULL, utf8},
        {"core-strbuf", NULL, NULL, NULL, NULL, strbuf},
        CU_SUITE_INFO_NULL,
    };
    return lh_test_main(argc, argv, suites);
}
