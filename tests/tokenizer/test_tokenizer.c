/* The tokenizer (host/tokenizer/tokenizer.h).
 *
 * Exactness: for every variant listed in tests/fixtures/tokenizers/manifest.txt (byte-level BPE
 * like Llama 3, GPT-2 and SmolLM; SentencePiece-style BPE like Llama 2 and Mistral; Split with
 * every behavior, inverted or not; Qwen2's NFC and regex; NFD, NFKC, NFKD; Replace with a regex
 * in the normalizer and the decoder) and every case (each corpus line and a few multi-line texts),
 * the ids with and without special tokens equal those of the `tokenizers` library, decoding
 * gives its strings (with and without special tokens), and streaming the ids one at a time gives
 * valid UTF-8 chunks that add up to the full decode.
 *
 * Bad input: a missing file, malformed JSON (line:column), wrong types and inconsistent values
 * (JSON path named), unsupported components (type and path named), bad regexes, text that is
 * not UTF-8, ids no token has. */
#include "runner.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
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

static char *fixture_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/%s", lh_test_env("LH_FIXTURES"), name);
    return path;
}

static bool valid_utf8(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!k || i + k > n)
            return false;
        for (size_t q = 1; q < k; q++)
            if (((unsigned char)s[i + q] & 0xC0) != 0x80)
                return false;
        i += k;
    }
    return true;
}

static bool ids_equal(const int32_t *got, size_t n, json_t *want)
{
    if (json_array_size(want) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != got[i])
            return false;
    return true;
}

static void print_ids(const char *what, const int32_t *v, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)v[i]);
    fprintf(stderr, "\n");
}

/* Loads a variant's tokenizer: its file, or its base file with the keys of "override" replaced. */
static lh_tokenizer *load_variant(json_t *exp, lh_err *err)
{
    const char *file = json_string_value(json_object_get(exp, "tokenizer"));
    json_t *over = json_object_get(exp, "override");
    lh_tokenizer *t = NULL;
    if (!over) {
        lh_status st = lh_tokenizer_load(fixture_path(file), &t, err);
        if (st)
            fprintf(stderr, "\n%s\n", err->msg);
        return t;
    }
    json_error_t je;
    json_t *base = json_load_file(fixture_path(file), 0, &je);
    if (!base)
        return NULL;
    json_object_update(base, over);
    char *text = json_dumps(base, JSON_COMPACT);
    json_decref(base);
    lh_status st = lh_tokenizer_load_json(text, strlen(text), "variant", &t, err);
    if (st)
        fprintf(stderr, "\n%s\n", err->msg);
    free(text);
    return t;
}

static size_t g_cases, g_failures;

static void check_stream(lh_tokenizer *t, const int32_t *ids, size_t n, bool skip, const char *want,
                         const char *variant, size_t ci)
{
    lh_err err = {0};
    lh_detok_stream *s;
    CU_ASSERT_EQUAL_FATAL(lh_detok_stream_create(t, skip, &s, &err), LH_OK);
    char *all = calloc(1, 1);
    size_t all_len = 0;
    bool ok = true;
    for (size_t i = 0; i <= n && ok; i++) {
        char *chunk;
        size_t len;
        lh_status st = i < n ? lh_detok_stream_step(s, ids[i], &chunk, &len, &err)
                             : lh_detok_stream_finish(s, &chunk, &len, &err);
        if (st) {
            fprintf(stderr, "\n%s case %zu: stream: %s\n", variant, ci, err.msg);
            ok = false;
            break;
        }
        if (!valid_utf8(chunk, len)) {
            fprintf(stderr, "\n%s case %zu: chunk %zu is not valid UTF-8\n", variant, ci, i);
            ok = false;
        }
        all = realloc(all, all_len + len + 1);
        memcpy(all + all_len, chunk, len + 1);
        all_len += len;
        free(chunk);
    }
    if (ok && strcmp(all, want) != 0) {
        fprintf(stderr, "\n%s case %zu: streamed '%s' != '%s'\n", variant, ci, all, want);
        ok = false;
    }
    CU_ASSERT(ok);
    if (!ok)
        g_failures++;
    free(all);
    lh_detok_stream_free(s);
}

static void run_variant(const char *name)
{
    char file[512];
    snprintf(file, sizeof file, "%s.expected.json", name);
    json_error_t je;
    json_t *exp = json_load_file(fixture_path(file), 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(exp);
    lh_err err = {0};
    lh_tokenizer *t = load_variant(exp, &err);
    CU_ASSERT_PTR_NOT_NULL(t);
    if (!t) {
        json_decref(exp);
        return;
    }
    json_t *cases = json_object_get(exp, "cases");
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t text_len = json_string_length(json_object_get(c, "text"));
        /* "ids" (with special tokens) is stored only when it is not special_prefix + ids_plain */
        json_t *want_plain = json_object_get(c, "ids_plain");
        json_t *want = json_object_get(c, "ids");
        json_t *built = NULL;
        CU_ASSERT_PTR_NOT_NULL_FATAL(want_plain);
        if (!want) {
            built = json_deep_copy(json_object_get(exp, "special_prefix"));
            CU_ASSERT_PTR_NOT_NULL_FATAL(built);
            json_array_extend(built, want_plain);
            want = built;
        }
        json_t *jd = json_object_get(c, "decoded");
        const char *dec = jd ? json_string_value(jd) : text;
        json_t *jds = json_object_get(c, "decoded_skip");
        const char *dec_skip = jds ? json_string_value(jds) : dec;
        g_cases++;
        for (int special = 1; special >= 0; special--) {
            int32_t *ids;
            size_t n;
            json_t *w = special ? want : want_plain;
            CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(t, text, text_len, special, &ids, &n, &err), LH_OK);
            bool same = ids_equal(ids, n, w);
            CU_ASSERT(same);
            if (!same) {
                g_failures++;
                fprintf(stderr, "\n%s case %zu (special %d): ids differ for '%s'\n", name, ci, special, text);
                print_ids("got ", ids, n);
                int32_t *wv = calloc(json_array_size(w) + 1, sizeof *wv);
                for (size_t i = 0; i < json_array_size(w); i++)
                    wv[i] = (int32_t)json_integer_value(json_array_get(w, i));
                print_ids("want", wv, json_array_size(w));
                free(wv);
            }
            free(ids);
        }
        /* decode the expected ids (independent of encode) */
        size_t n = json_array_size(want);
        int32_t *ids = calloc(n + 1, sizeof *ids);
        for (size_t i = 0; i < n; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(want, i));
        for (int skip = 0; skip <= 1; skip++) {
            char *out;
            size_t len;
            CU_ASSERT_EQUAL_FATAL(lh_tokenizer_decode(t, ids, n, skip, &out, &len, &err), LH_OK);
            const char *w = skip ? dec_skip : dec;
            bool same = strcmp(out, w) == 0 && len == strlen(w);
            CU_ASSERT(same);
            if (!same) {
                g_failures++;
                fprintf(stderr, "\n%s case %zu (skip %d): decoded '%s' != '%s'\n", name, ci, skip, out, w);
            }
            free(out);
            check_stream(t, ids, n, skip, w, name, ci);
        }
        free(ids);
        json_decref(built);
    }
    lh_tokenizer_free(t);
    json_decref(exp);
}

static void test_exactness(void)
{
    FILE *f = fopen(fixture_path("manifest.txt"), "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[256];
    size_t variants = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line)
            continue;
        run_variant(line);
        variants++;
    }
    fclose(f);
    fprintf(stderr, "\n  %zu variants, %zu cases, %zu mismatches\n", variants, g_cases, g_failures);
    CU_ASSERT(variants >= 20);
    CU_ASSERT(g_cases > 400);
}

/* ---- whitespace the regex engines could disagree on ------------------------------------------ */

/* NEL (U+0085) and NBSP (U+00A0): Oniguruma (what `tokenizers` uses) and PCRE2 with UCP differ
 * on what \s covers at the edges; the expected ids were computed with tokenizers 0.23.3. */
static void test_unusual_whitespace(void)
{
    static const struct {
        const char *file, *text;
        int32_t ids[8];
        size_t n;
    } cases[] = {
        {"bpe_gpt2.json", "a \xC2\x85" "b", {265, 222, 128, 229, 67}, 5},
        {"bpe_gpt2.json", "x\xC2\x85\xC2\x85 y", {533, 128, 229, 128, 229, 355}, 6},
        {"bpe_gpt2.json", "a\xC2\xA0 b", {265, 128, 256, 396}, 4},
        {"bpe_llama3.json", "a \xC2\x85" "b", {66, 222, 128, 229, 67}, 5},
        {"bpe_llama3.json", "x\xC2\x85\xC2\x85 y", {89, 128, 229, 128, 229, 355}, 6},
        {"sp_llama2.json", "x\xC2\x85\xC2\x85 y", {377, 334, 197, 136, 197, 136, 377, 335}, 8},
        {"sp_llama2.json", "a\xC2\xA0 b", {385, 197, 163, 499}, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        lh_err err = {0};
        lh_tokenizer *t;
        CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load(fixture_path(cases[c].file), &t, &err), LH_OK);
        int32_t *ids;
        size_t n;
        CU_ASSERT_EQUAL(lh_tokenizer_encode(t, cases[c].text, strlen(cases[c].text), false, &ids,
                                            &n, &err), LH_OK);
        CU_ASSERT_EQUAL(n, cases[c].n);
        CU_ASSERT(n == cases[c].n && memcmp(ids, cases[c].ids, n * sizeof *ids) == 0);
        free(ids);
        lh_tokenizer_free(t);
    }
}

/* ---- streaming details ----------------------------------------------------------------------- */

static void test_stream_holds_incomplete_utf8(void)
{
    lh_err err = {0};
    lh_tokenizer *t;
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load(fixture_path("sp_llama2.json"), &t, &err), LH_OK);
    /* 中 = E4 B8 AD through byte-fallback tokens, then a lone E4 never completed */
    int32_t ids[4] = {lh_tokenizer_token_to_id(t, "<0xE4>"), lh_tokenizer_token_to_id(t, "<0xB8>"),
                      lh_tokenizer_token_to_id(t, "<0xAD>"), lh_tokenizer_token_to_id(t, "<0xE4>")};
    CU_ASSERT(ids[0] >= 0 && ids[1] >= 0 && ids[2] >= 0);
    lh_detok_stream *s;
    CU_ASSERT_EQUAL_FATAL(lh_detok_stream_create(t, false, &s, &err), LH_OK);
    const char *want[4] = {"", "", "\xE4\xB8\xAD", ""};
    for (int i = 0; i < 4; i++) {
        char *chunk;
        size_t len;
        CU_ASSERT_EQUAL_FATAL(lh_detok_stream_step(s, ids[i], &chunk, &len, &err), LH_OK);
        CU_ASSERT_STRING_EQUAL(chunk, want[i]);
        free(chunk);
    }
    char *chunk;
    size_t len;
    CU_ASSERT_EQUAL(lh_detok_stream_finish(s, &chunk, &len, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(chunk, "\xEF\xBF\xBD"); /* the lone byte, replaced */
    free(chunk);
    /* an id without a token is skipped (as `tokenizers` does); a negative id is an error and
     * is not kept */
    CU_ASSERT_EQUAL(lh_detok_stream_step(s, 1 << 30, &chunk, &len, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(chunk, "");
    free(chunk);
    CU_ASSERT_EQUAL(lh_detok_stream_step(s, -3, &chunk, &len, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(chunk);
    lh_detok_stream_free(s);

    /* a byte-fallback group that turns invalid after part of it streamed ("é" = C3 A9 sent,
     * then E2 and a word): the whole group would decode to U+FFFD, rewriting "é"; the stream
     * keeps what it sent and goes on with the rest decoded as a new segment, never failing */
    CU_ASSERT_EQUAL_FATAL(lh_detok_stream_create(t, false, &s, &err), LH_OK);
    int32_t *word;
    size_t n_word;
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(t, "the", 3, false, &word, &n_word, &err), LH_OK);
    CU_ASSERT_FATAL(n_word >= 1);
    const int32_t grp[4] = {lh_tokenizer_token_to_id(t, "<0xC3>"),
                            lh_tokenizer_token_to_id(t, "<0xA9>"),
                            lh_tokenizer_token_to_id(t, "<0xE2>"), word[0]};
    free(word);
    CU_ASSERT_FATAL(grp[0] >= 0 && grp[1] >= 0 && grp[2] >= 0);
    char streamed[64] = "";
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL_FATAL(lh_detok_stream_step(s, grp[i], &chunk, &len, &err), LH_OK);
        strncat(streamed, chunk, sizeof streamed - strlen(streamed) - 1);
        free(chunk);
    }
    CU_ASSERT_EQUAL(lh_detok_stream_finish(s, &chunk, &len, &err), LH_OK);
    strncat(streamed, chunk, sizeof streamed - strlen(streamed) - 1);
    free(chunk);
    CU_ASSERT_EQUAL(strncmp(streamed, "\xC3\xA9", 2), 0);         /* "é" stayed */
    CU_ASSERT_PTR_NOT_NULL(strstr(streamed, "\xEF\xBF\xBD"));    /* the lone E2 */
    lh_detok_stream_free(s);

    /* byte-level: the bytes of one emoji split over tokens */
    lh_tokenizer *b;
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load(fixture_path("bpe_llama3.json"), &b, &err), LH_OK);
    const char emoji[] = "\xF0\x9F\x9A\x80"; /* 🚀 */
    int32_t *eids;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(b, emoji, 4, false, &eids, &n, &err), LH_OK);
    CU_ASSERT(n >= 2);
    CU_ASSERT_EQUAL_FATAL(lh_detok_stream_create(b, false, &s, &err), LH_OK);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL_FATAL(lh_detok_stream_step(s, eids[i], &chunk, &len, &err), LH_OK);
        CU_ASSERT_STRING_EQUAL(chunk, i + 1 < n ? "" : emoji);
        free(chunk);
    }
    lh_detok_stream_free(s);
    free(eids);
    lh_tokenizer_free(b);
    lh_tokenizer_free(t);
}

static void test_lookup(void)
{
    lh_err err = {0};
    lh_tokenizer *t;
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load(fixture_path("bpe_llama3.json"), &t, &err), LH_OK);
    int32_t bos = lh_tokenizer_token_to_id(t, "<|begin_of_text|>");
    CU_ASSERT(bos >= 0);
    CU_ASSERT(lh_tokenizer_is_special(t, bos));
    CU_ASSERT_STRING_EQUAL(lh_tokenizer_id_to_token(t, bos), "<|begin_of_text|>");
    CU_ASSERT_EQUAL(lh_tokenizer_token_to_id(t, "no such token here"), -1);
    CU_ASSERT_PTR_NULL(lh_tokenizer_id_to_token(t, -1));
    CU_ASSERT_PTR_NULL(lh_tokenizer_id_to_token(t, lh_tokenizer_vocab_size(t)));
    int32_t a = lh_tokenizer_token_to_id(t, "a");
    CU_ASSERT(a >= 0);
    CU_ASSERT(!lh_tokenizer_is_special(t, a));
    /* text that is not UTF-8; ids no token has */
    int32_t *ids;
    size_t n;
    CU_ASSERT_EQUAL(lh_tokenizer_encode(t, "ab\xC3(", 4, true, &ids, &n, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(ids);
    CHECK_MSG(err, "byte 2");
    char *out;
    size_t len;
    /* an id without a token is skipped, as `tokenizers` does; a negative one is refused */
    int32_t bad[2] = {a, 99999};
    char *one;
    size_t one_len;
    CU_ASSERT_EQUAL(lh_tokenizer_decode(t, bad, 2, false, &out, &len, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_tokenizer_decode(t, bad, 1, false, &one, &one_len, &err), LH_OK);
    CU_ASSERT(out && one && len == one_len && memcmp(out, one, len) == 0);
    free(out);
    free(one);
    bad[1] = -1;
    CU_ASSERT_EQUAL(lh_tokenizer_decode(t, bad, 2, false, &out, &len, &err), LH_E_USAGE);
    CHECK_MSG(err, "negative");
    CU_ASSERT_PTR_NULL(out);
    /* empty text, empty ids */
    CU_ASSERT_EQUAL(lh_tokenizer_encode(t, "", 0, false, &ids, &n, &err), LH_OK);
    CU_ASSERT_EQUAL(n, 0);
    free(ids);
    CU_ASSERT_EQUAL(lh_tokenizer_decode(t, NULL, 0, false, &out, &len, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(out, "");
    free(out);
    lh_tokenizer_free(t);
}

/* Long runs (one pre-token of 200000 spaces or letters, or the whole text for a tokenizer
 * without a pre-tokenizer) encode in far less than the test's timeout (the merge loop is
 * O(n log n)) and decode back to the text. */
static void test_long_inputs(void)
{
    static const char *const files[] = {"bpe_llama3.json", "sp_llama2.json", "bpe_gpt2.json"};
    static const char *const units[] = {" ", "a", "\n", "ab1 ", "\xC3\xA9\xE4\xB8\xAD"};
    const size_t N = 200000;
    char *text = malloc(N + 8);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    for (size_t f = 0; f < 3; f++) {
        lh_err err = {0};
        lh_tokenizer *t;
        CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load(fixture_path(files[f]), &t, &err), LH_OK);
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
            size_t ul = strlen(units[u]), len = N / ul * ul;
            for (size_t i = 0; i < len; i++)
                text[i] = units[u][i % ul];
            text[len] = 0;
            int32_t *ids;
            size_t n;
            CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(t, text, len, true, &ids, &n, &err), LH_OK);
            CU_ASSERT(n > 0 && n <= len + 2); /* a BOS, a prepended space */
            char *out;
            size_t out_len;
            CU_ASSERT_EQUAL_FATAL(lh_tokenizer_decode(t, ids, n, true, &out, &out_len, &err), LH_OK);
            /* gpt2's add_prefix_space puts one space in front */
            const char *got = f == 2 && out_len == len + 1 && out[0] == ' ' ? out + 1 : out;
            bool same = strcmp(got, text) == 0;
            if (!same)
                fprintf(stderr, "\n%s unit %zu: round trip differs (%zu bytes vs %zu)\n", files[f], u,
                        strlen(got), len);
            CU_ASSERT(same);
            free(out);
            free(ids);
        }
        lh_tokenizer_free(t);
    }
    free(text);
}

/* ---- bad files ------------------------------------------------------------------------------- */

/* A minimal valid tokenizer.json with KEY replaced by VALUE (JSON text) when key is set. */
static lh_status load_with(const char *key, const char *value, lh_err *err)
{
    const char *base =
        "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
        "\"added_tokens\":[{\"id\":0,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,"
        "\"rstrip\":false,\"normalized\":false,\"special\":true}],"
        "\"normalizer\":null,\"pre_tokenizer\":null,\"post_processor\":null,\"decoder\":null,"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"<s>\":0,\"a\":1,\"b\":2,\"ab\":3},"
        "\"merges\":[\"a b\"]}}";
    json_error_t je;
    json_t *root = json_loads(base, 0, &je);
    if (key) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
        if (!v) {
            fprintf(stderr, "bad test json %s\n", value);
            abort();
        }
        const char *dot = strchr(key, '.');
        if (dot) {
            char top[64];
            snprintf(top, sizeof top, "%.*s", (int)(dot - key), key);
            json_object_set_new(json_object_get(root, top), dot + 1, v);
        } else
            json_object_set_new(root, key, v);
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    lh_tokenizer *t = NULL;
    lh_status st = lh_tokenizer_load_json(text, strlen(text), "mem.json", &t, err);
    free(text);
    if (st == LH_OK) {
        int32_t *ids;
        size_t n;
        CU_ASSERT_EQUAL(lh_tokenizer_encode(t, "<s>ab", 5, true, &ids, &n, err), LH_OK);
        if (!key) { /* the special token, then "a b" merged ("a b" merge string format) */
            CU_ASSERT_EQUAL(n, 2);
            if (n == 2) {
                CU_ASSERT_EQUAL(ids[0], 0);
                CU_ASSERT_EQUAL(ids[1], 3);
            }
        }
        free(ids);
    }
    CU_ASSERT((st == LH_OK) == (t != NULL));
    lh_tokenizer_free(t);
    return st;
}

static void test_minimal(void)
{
    lh_err err = {0};
    CU_ASSERT_EQUAL(load_with(NULL, NULL, &err), LH_OK);
    lh_tokenizer *t;
    /* no "type" (older files), merges as pairs, no pre-tokenizer, no decoder */
    const char *json = "{\"model\":{\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\",\"b\"]]},"
                       "\"added_tokens\":[]}";
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load_json(json, strlen(json), "m", &t, &err), LH_OK);
    int32_t *ids;
    size_t n;
    CU_ASSERT_EQUAL(lh_tokenizer_encode(t, "abba", 4, true, &ids, &n, &err), LH_OK);
    CU_ASSERT_EQUAL(n, 3);
    if (n == 3) {
        CU_ASSERT_EQUAL(ids[0], 2);
        CU_ASSERT_EQUAL(ids[1], 1);
        CU_ASSERT_EQUAL(ids[2], 0);
    }
    /* no decoder: tokens joined by spaces */
    char *out;
    size_t len;
    CU_ASSERT_EQUAL(lh_tokenizer_decode(t, ids, n, false, &out, &len, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(out, "ab b a");
    free(out);
    free(ids);
    lh_tokenizer_free(t);
}

static void test_bad_files(void)
{
    lh_err err = {0};
    lh_tokenizer *t = (lh_tokenizer *)&err;
    CU_ASSERT_EQUAL(lh_tokenizer_load("/nonexistent/tokenizer.json", &t, &err), LH_E_IO);
    CU_ASSERT_PTR_NULL(t);
    CHECK_MSG(err, "/nonexistent/tokenizer.json");

    /* malformed JSON: line:column */
    CU_ASSERT_EQUAL(lh_tokenizer_load_json("{\n  \"model\": {,\n}", 17, "x.json", &t, &err), LH_E_CONFIG);
    CHECK_MSG(err, "x.json:2:");
    CU_ASSERT_EQUAL(lh_tokenizer_load_json("", 0, "x.json", &t, &err), LH_E_CONFIG);
    CU_ASSERT_EQUAL(lh_tokenizer_load_json("[1,2]", 5, "x.json", &t, &err), LH_E_CONFIG);
    CU_ASSERT_EQUAL(lh_tokenizer_load_json("{\"model\":{\"vocab\":{\"a\":0},\"vocab\":{}}}", 37, "x.json", &t, &err), LH_E_CONFIG);

    /* wrong types and inconsistent values, with their JSON path */
    static const struct { const char *key, *value, *needle; } cfg[] = {
        {"model", "[]", "model"},
        {"model.vocab", "[1]", "model.vocab"},
        {"model.vocab", "{\"a\":\"zero\"}", "model.vocab[\"a\"]"},
        {"model.vocab", "{\"a\":-1}", "model.vocab[\"a\"]"},
        {"model.vocab", "{\"a\":0,\"b\":0}", "already token"},
        {"model.merges", "{}", "model.merges"},
        {"model.merges", "[\"ab\"]", "model.merges[0]"},
        {"model.merges", "[\"a b c\"]", "model.merges[0]"},
        {"model.merges", "[\"a x\"]", "model.merges[0]"},
        {"model.merges", "[[\"a\"]]", "model.merges[0]"},
        {"model.merges", "[[1, 2]]", "model.merges[0]"},
        {"model.unk_token", "\"<unk>\"", "model.unk_token"},
        {"model.unk_token", "5", "model.unk_token"},
        {"model.byte_fallback", "\"yes\"", "model.byte_fallback"},
        {"added_tokens", "{}", "added_tokens"},
        {"added_tokens", "[{\"id\":\"x\",\"content\":\"<s>\"}]", "added_tokens[0].id"},
        {"added_tokens", "[{\"id\":7}]", "added_tokens[0].content"},
        {"added_tokens", "[{\"id\":7,\"content\":\"\"}]", "added_tokens[0].content"},
        {"added_tokens", "[{\"id\":1,\"content\":\"zz\"}]", "already token"},
        {"normalizer", "{\"type\":\"Sequence\",\"normalizers\":7}", "normalizer.normalizers"},
        {"normalizer", "{\"type\":\"Prepend\"}", "normalizer.prepend"},
        {"normalizer", "{\"prepend\":\"x\"}", "normalizer.type"},
        {"normalizer", "\"NFC\"", "normalizer"},
        {"normalizer", "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(\"},\"content\":\"x\"}", "normalizer.pattern"},
        {"normalizer", "{\"type\":\"Replace\",\"pattern\":\"x\",\"content\":\"x\"}", "normalizer.pattern"},
        {"pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Sideways\",\"invert\":false}", "pre_tokenizer.behavior"},
        {"pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[a\"},\"behavior\":\"Isolated\",\"invert\":false}", "pre_tokenizer.pattern"},
        {"pre_tokenizer", "{\"type\":\"ByteLevel\",\"add_prefix_space\":1}", "pre_tokenizer.add_prefix_space"},
        {"pre_tokenizer", "{\"type\":\"Metaspace\",\"replacement\":\"ab\"}", "pre_tokenizer.replacement"},
        {"pre_tokenizer", "{\"type\":\"Metaspace\",\"replacement\":\"_\",\"prepend_scheme\":\"sometimes\"}", "pre_tokenizer.prepend_scheme"},
        {"pre_tokenizer", "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":\"no\"}]}", "pre_tokenizer.pretokenizers[0].individual_digits"},
        {"post_processor", "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<x>\"}}],\"special_tokens\":{}}", "post_processor.single[0]"},
        {"post_processor", "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[99]}}}", "post_processor.special_tokens.<s>.ids[0]"},
        {"post_processor", "{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"B\"}}]}", "post_processor.single[0].Sequence.id"},
        {"decoder", "{\"type\":\"Strip\",\"content\":\" \",\"start\":-1,\"stop\":0}", "decoder.start"},
        {"decoder", "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":7}]}", "decoder.decoders[1].type"},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        lh_status st = load_with(cfg[i].key, cfg[i].value, &err);
        if (st != LH_E_CONFIG)
            fprintf(stderr, "\ncase %zu (%s = %s): status %d: %s\n", i, cfg[i].key, cfg[i].value, (int)st, err.msg);
        CU_ASSERT_EQUAL(st, LH_E_CONFIG);
        CHECK_MSG(err, cfg[i].needle);
        CHECK_MSG(err, "mem.json");
    }

    /* unsupported components: type and path named */
    static const struct { const char *key, *value, *needle; } uns[] = {
        {"model", "{\"type\":\"WordPiece\",\"vocab\":{}}", "model: model type 'WordPiece'"},
        {"model", "{\"type\":\"Unigram\",\"vocab\":[]}", "'Unigram'"},
        {"model.dropout", "0.1", "model.dropout"},
        {"model.continuing_subword_prefix", "\"##\"", "model.continuing_subword_prefix"},
        {"model.end_of_word_suffix", "\"</w>\"", "model.end_of_word_suffix"},
        {"normalizer", "{\"type\":\"BertNormalizer\"}", "normalizer: normalizer type 'BertNormalizer'"},
        {"normalizer", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"x\"},{\"type\":\"Lowercase\"}]}",
         "normalizer.normalizers[1]: normalizer type 'Lowercase'"},
        {"pre_tokenizer", "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},{\"type\":\"Whitespace\"}]}",
         "pre_tokenizer.pretokenizers[1]: pre_tokenizer type 'Whitespace'"},
        {"post_processor", "{\"type\":\"BertProcessing\"}", "post_processor: post_processor type 'BertProcessing'"},
        {"decoder", "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"CTC\"}]}", "decoder.decoders[0]: decoder type 'CTC'"},
        {"added_tokens", "[{\"id\":0,\"content\":\"<s>\",\"lstrip\":true,\"special\":true}]", "added_tokens[0].lstrip"},
        {"added_tokens", "[{\"id\":0,\"content\":\"<s>\",\"single_word\":true,\"special\":true}]", "added_tokens[0].single_word"},
        {"truncation", "{\"max_length\":5}", "truncation"},
        {"padding", "{\"strategy\":\"BatchLongest\"}", "padding"},
    };
    for (size_t i = 0; i < sizeof uns / sizeof uns[0]; i++) {
        lh_status st = load_with(uns[i].key, uns[i].value, &err);
        if (st != LH_E_UNSUPPORTED)
            fprintf(stderr, "\ncase %zu (%s = %s): status %d: %s\n", i, uns[i].key, uns[i].value, (int)st, err.msg);
        CU_ASSERT_EQUAL(st, LH_E_UNSUPPORTED);
        CHECK_MSG(err, uns[i].needle);
    }
    /* a normalized added token with a normalizer is refused; without one it is fine */
    CU_ASSERT_EQUAL(load_with("added_tokens", "[{\"id\":0,\"content\":\"<s>\",\"normalized\":true}]", &err), LH_OK);

    /* every truncation of a real file fails cleanly */
    char *text;
    FILE *f = fopen(fixture_path("sp_llama2.json"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = malloc((size_t)size);
    CU_ASSERT_EQUAL_FATAL(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    for (long cut = 0; cut < size; cut += 97) {
        lh_status st = lh_tokenizer_load_json(text, (size_t)cut, "cut.json", &t, &err);
        CU_ASSERT_EQUAL(st, LH_E_CONFIG);
        CU_ASSERT_PTR_NULL(t);
    }
    free(text);
}

int main(int argc, char **argv)
{
    static CU_TestInfo exact[] = {
        {"exactness against tokenizers on the corpus", test_exactness},
        {"streaming holds incomplete UTF-8", test_stream_holds_incomplete_utf8},
        {"lookup, bad text, bad ids", test_lookup},
        {"long inputs", test_long_inputs},
        {"NEL and NBSP as tokenizers splits them", test_unusual_whitespace},
        CU_TEST_INFO_NULL,
    };
    static CU_TestInfo bad[] = {
        {"minimal tokenizer", test_minimal},
        {"bad files", test_bad_files},
        CU_TEST_INFO_NULL,
    };
    static CU_SuiteInfo suites[] = {
        {"tokenizer", NULL, NULL, NULL, NULL, exact},
        {"tokenizer-bad-input", NULL, NULL, NULL, NULL, bad},
        CU_SUITE_INFO_NULL,
    };
    return lh_test_main(argc, argv, suites);
}
