/* The tokenizer of a GGUF file (lh_tokenizer_load_gguf, lh_tokenizer_open on a GGUF source).
 *
 * Exactness: tests/fixtures/tokenizers/gguf holds tokenizer-only GGUF files that
 * tools/gen_gguf_tokenizers.py converted (as llama.cpp's convert_hf_to_gguf.py does) from the
 * tokenizer.json fixtures bpe_gpt2, bpe_smollm, bpe_llama3, bpe_qwen2 (tokenizer.ggml.model
 * "gpt2" with the pre-tokenizers gpt-2, smollm, llama-bpe, qwen2) and sp_llama2 ("llama":
 * SentencePiece BPE whose merges the reader derives from the scores). Each must give, on every
 * case of NAME.expected.json, the ids of the `tokenizers` library with and without special
 * tokens, its decoded strings (and streamed chunks adding up to them), and the same token table
 * (strings, special flags, byte mode) as the tokenizer.json it came from. When the default
 * model's GGUF and its converted tokenizer.json are in the user's cache, both give the same ids
 * on the corpus (else the test says it is skipped).
 *
 * Bad input: small GGUF files written by the test, one per class -- a missing or unsupported
 * model, missing / mistyped / wrong-length arrays, empty, duplicate, non-UTF-8 and NUL-holding
 * tokens, bad token types and byte tokens, NaN scores, id keys out of range or mistyped,
 * add_bos without its id, malformed merges, an unknown pre-tokenizer, SentencePiece files
 * without scores or with normalization this reader does not do -- and every truncation of a
 * fixture. Each error names the file and the key. */
#include "runner.h"
#include "tokenizer/tokenizer.h"

#include "core/strbuf.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHECK_MSG(err, needle)                                                                 \
    do {                                                                                       \
        bool found_ = strstr((err).msg, (needle)) != NULL;                                     \
        if (!found_)                                                                           \
            fprintf(stderr, "\nmessage '%s' lacks '%s'\n", (err).msg, (needle));               \
        CU_ASSERT(found_);                                                                     \
    } while (0)

static const char *fixture(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/%s", lh_test_env("LH_FIXTURES"), name);
    return path;
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

/* The tokenizer.json a variant names (its base file with "override"'s keys replaced). */
static lh_tokenizer *load_json_variant(json_t *exp)
{
    json_error_t je;
    json_t *base = json_load_file(fixture(json_string_value(json_object_get(exp, "tokenizer"))),
                                  0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(base);
    json_t *over = json_object_get(exp, "override");
    if (over)
        json_object_update(base, over);
    char *text = json_dumps(base, JSON_COMPACT);
    json_decref(base);
    lh_tokenizer *t = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_tokenizer_load_json(text, strlen(text), "variant", &t, &err), LH_OK);
    free(text);
    return t;
}

/* Streaming the ids one at a time gives valid chunks that add up to want. */
static bool stream_ok(const lh_tokenizer *t, const int32_t *ids, size_t n, bool skip,
                      const char *want)
{
    lh_err err = {0};
    lh_detok_stream *s;
    if (lh_detok_stream_create(t, skip, &s, &err) != LH_OK)
        return false;
    lh_strbuf all = {0};
    lh_strbuf_add(&all, "", 0);
    bool ok = true;
    for (size_t i = 0; i <= n && ok; i++) {
        char *chunk;
        size_t len;
        ok = (i < n ? lh_detok_stream_step(s, ids[i], &chunk, &len, &err)
                    : lh_detok_stream_finish(s, &chunk, &len, &err)) == LH_OK;
        if (ok) {
            lh_strbuf_add(&all, chunk, len);
            free(chunk);
        }
    }
    ok = ok && lh_strbuf_ok(&all) && strcmp(all.s, want) == 0;
    lh_strbuf_free(&all);
    lh_detok_stream_free(s);
    return ok;
}

/* Every case of NAME.expected.json through gguf/NAME.gguf; the token table against the
 * tokenizer.json. Returns the mismatches. */
static size_t run_gguf_variant(const char *name, size_t *cases)
{
    char file[512];
    snprintf(file, sizeof file, "%s.expected.json", name);
    json_error_t je;
    json_t *exp = json_load_file(fixture(file), 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(exp);
    snprintf(file, sizeof file, "gguf/%s.gguf", name);
    lh_err err = {0};
    lh_tokenizer *t = NULL;
    lh_status st = lh_tokenizer_load_gguf(fixture(file), &t, &err);
    if (st)
        fprintf(stderr, "\n%s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    lh_tokenizer *j = load_json_variant(exp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    size_t bad = 0;
    /* the same token table */
    CU_ASSERT_EQUAL(lh_tokenizer_vocab_size(t), lh_tokenizer_vocab_size(j));
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), lh_tokenizer_byte_mode(j));
    for (int32_t id = 0; id < lh_tokenizer_vocab_size(j); id++) {
        const char *a = lh_tokenizer_id_to_token(t, id), *b = lh_tokenizer_id_to_token(j, id);
        if (!a || !b || strcmp(a, b) != 0 ||
            lh_tokenizer_is_special(t, id) != lh_tokenizer_is_special(j, id)) {
            fprintf(stderr, "\n%s: token %d differs ('%s' vs '%s')\n", name, (int)id,
                    a ? a : "(none)", b ? b : "(none)");
            bad++;
        }
    }
    json_t *cs = json_object_get(exp, "cases");
    for (size_t ci = 0; ci < json_array_size(cs); ci++) {
        json_t *c = json_array_get(cs, ci);
        json_t *jt = json_object_get(c, "text");
        const char *text = json_string_value(jt);
        json_t *plain = json_object_get(c, "ids_plain"), *with = json_object_get(c, "ids");
        json_t *built = NULL;
        if (!with) {
            built = json_deep_copy(json_object_get(exp, "special_prefix"));
            json_array_extend(built, plain);
            with = built;
        }
        (*cases)++;
        for (int special = 0; special <= 1; special++) {
            int32_t *ids;
            size_t n;
            CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(t, text, json_string_length(jt), special,
                                                      &ids, &n, &err), LH_OK);
            if (!ids_equal(ids, n, special ? with : plain)) {
                fprintf(stderr, "\n%s case %zu (special %d): ids differ for '%s'\n", name, ci,
                        special, text);
                bad++;
            }
            free(ids);
        }
        json_t *jd = json_object_get(c, "decoded"), *jds = json_object_get(c, "decoded_skip");
        const char *dec = jd ? json_string_value(jd) : text;
        const char *dec_skip = jds ? json_string_value(jds) : dec;
        size_t n = json_array_size(with);
        int32_t *ids = calloc(n + 1, sizeof *ids);
        for (size_t i = 0; i < n; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(with, i));
        for (int skip = 0; skip <= 1; skip++) {
            char *out;
            size_t len;
            const char *want = skip ? dec_skip : dec;
            CU_ASSERT_EQUAL_FATAL(lh_tokenizer_decode(t, ids, n, skip, &out, &len, &err), LH_OK);
            if (strcmp(out, want) != 0 || !stream_ok(t, ids, n, skip, want)) {
                fprintf(stderr, "\n%s case %zu (skip %d): decoded '%s' != '%s'\n", name, ci,
                        skip, out, want);
                bad++;
            }
            free(out);
        }
        free(ids);
        json_decref(built);
    }
    lh_tokenizer_free(t);
    lh_tokenizer_free(j);
    json_decref(exp);
    return bad;
}

static void test_gguf_exactness(void)
{
    static const char *const names[] = {"bpe_gpt2", "bpe_smollm", "bpe_llama3", "bpe_qwen2",
                                        "sp_llama2"};
    size_t cases = 0, bad = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        bad += run_gguf_variant(names[i], &cases);
    fprintf(stderr, "\n  %zu GGUF files, %zu cases, %zu mismatches\n",
            sizeof names / sizeof *names, cases, bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(cases >= 250);
}

/* ---- lh_tokenizer_open on GGUF sources; byte modes ------------------------------------------- */

static void test_open_and_byte_mode(void)
{
    lh_err err = {0};
    lh_tokenizer *t = NULL;
    /* a file with the GGUF magic, whatever its name: here a copy without the .gguf suffix */
    char *dir = lh_test_mkdtemp();
    CU_ASSERT_EQUAL_FATAL(lh_test_copy_file(fixture("gguf/sp_llama2.gguf"), dir, "model.bin",
                                            0644), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_open(path, &t, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), LH_BYTE_MODE_FALLBACK);
    CU_ASSERT_EQUAL(lh_tokenizer_token_to_id(t, "<s>"), 1);
    lh_tokenizer_free(t);
    /* a directory without config.json holding one *.gguf */
    CU_ASSERT_EQUAL_FATAL(lh_test_copy_file(fixture("gguf/bpe_llama3.gguf"), dir, "m.gguf",
                                            0644), 0);
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_open(dir, &t, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), LH_BYTE_MODE_LEVEL);
    CU_ASSERT(lh_tokenizer_is_special(t, lh_tokenizer_token_to_id(t, "<|begin_of_text|>")));
    lh_tokenizer_free(t);
    /* two of them: the locator's error */
    CU_ASSERT_EQUAL_FATAL(lh_test_copy_file(fixture("gguf/bpe_gpt2.gguf"), dir, "n.gguf", 0644), 0);
    CU_ASSERT_EQUAL(lh_tokenizer_open(dir, &t, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NULL(t);
    CHECK_MSG(err, "m.gguf");
    /* with config.json it is a Hugging Face directory: tokenizer.json is read, not the GGUF */
    CU_ASSERT_EQUAL_FATAL(lh_test_write_file(dir, "config.json", "{}"), 0);
    CU_ASSERT_EQUAL_FATAL(lh_test_copy_file(fixture("sp_metaspace.json"), dir, "tokenizer.json",
                                            0644), 0);
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_open(dir, &t, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), LH_BYTE_MODE_TEXT); /* a Metaspace decoder */
    lh_tokenizer_free(t);
    lh_test_rmtree(dir);
    free(dir);
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(NULL), LH_BYTE_MODE_TEXT);
    /* a decoder without ByteFallback or ByteLevel, and none at all */
    const char *none = "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}";
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load_json(none, strlen(none), "m", &t, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), LH_BYTE_MODE_TEXT);
    lh_tokenizer_free(t);
    /* not a GGUF file; no file; bad arguments */
    CU_ASSERT_EQUAL(lh_tokenizer_load_gguf(fixture("sp_llama2.json"), &t, &err), LH_E_CONFIG);
    CHECK_MSG(err, "sp_llama2.json");
    CU_ASSERT_EQUAL(lh_tokenizer_load_gguf("/nonexistent/x.gguf", &t, &err), LH_E_IO);
    CU_ASSERT_EQUAL(lh_tokenizer_load_gguf(NULL, &t, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_tokenizer_load_gguf(fixture("gguf/sp_llama2.gguf"), NULL, &err), LH_E_USAGE);
}

/* ---- a tiny GGUF writer ---------------------------------------------------------------------- */

enum { G_U32 = 4, G_I32 = 5, G_F32 = 6, G_BOOL = 7, G_STR = 8, G_ARR = 9 };

/* A value: its type and bytes, as they follow the key. */
typedef struct val {
    lh_strbuf b;
} val;

static void put_u32(lh_strbuf *b, uint32_t v) { lh_strbuf_add(b, (const char *)&v, 4); }
static void put_u64(lh_strbuf *b, uint64_t v) { lh_strbuf_add(b, (const char *)&v, 8); }
static void put_str(lh_strbuf *b, const char *s, size_t n)
{
    put_u64(b, n);
    lh_strbuf_add(b, s, n);
}

static val v_str(const char *s)
{
    val v = {{0}};
    put_u32(&v.b, G_STR);
    put_str(&v.b, s, strlen(s));
    return v;
}

static val v_u32(uint32_t x)
{
    val v = {{0}};
    put_u32(&v.b, G_U32);
    put_u32(&v.b, x);
    return v;
}

static val v_bool(bool x)
{
    val v = {{0}};
    put_u32(&v.b, G_BOOL);
    lh_strbuf_addc(&v.b, x ? 1 : 0);
    return v;
}

/* An array of n strings given as (pointer, length) pairs. */
static val v_strs_n(size_t n, const char *const *s, const size_t *len)
{
    val v = {{0}};
    put_u32(&v.b, G_ARR);
    put_u32(&v.b, G_STR);
    put_u64(&v.b, n);
    for (size_t i = 0; i < n; i++)
        put_str(&v.b, s[i], len ? len[i] : strlen(s[i]));
    return v;
}

static val v_strs(size_t n, ...)
{
    const char *s[32];
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        s[i] = va_arg(ap, const char *);
    va_end(ap);
    return v_strs_n(n, s, NULL);
}

static val v_i32s(size_t n, ...)
{
    val v = {{0}};
    put_u32(&v.b, G_ARR);
    put_u32(&v.b, G_I32);
    put_u64(&v.b, n);
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        put_u32(&v.b, (uint32_t)va_arg(ap, int));
    va_end(ap);
    return v;
}

static val v_f32s(size_t n, ...)
{
    val v = {{0}};
    put_u32(&v.b, G_ARR);
    put_u32(&v.b, G_F32);
    put_u64(&v.b, n);
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++) {
        float f = (float)va_arg(ap, double);
        lh_strbuf_add(&v.b, (const char *)&f, 4);
    }
    va_end(ap);
    return v;
}

typedef struct kv {
    const char *key;
    val v;
} kv;

#define MODEL "tokenizer.ggml.model"
#define PRE "tokenizer.ggml.pre"
#define TOKENS "tokenizer.ggml.tokens"
#define TYPES "tokenizer.ggml.token_type"
#define SCORES "tokenizer.ggml.scores"
#define MERGES "tokenizer.ggml.merges"
#define BOS "tokenizer.ggml.bos_token_id"
#define ADD_BOS "tokenizer.ggml.add_bos_token"

/* The base files: byte-level BPE (a, b, ab, <s>, c, Ġ, Ġc) and SentencePiece BPE. */
static size_t base_gpt2(kv *kvs)
{
    size_t n = 0;
    kvs[n++] = (kv){MODEL, v_str("gpt2")};
    kvs[n++] = (kv){PRE, v_str("gpt-2")};
    kvs[n++] = (kv){TOKENS, v_strs(7, "a", "b", "ab", "<s>", "c", "\xC4\xA0", "\xC4\xA0" "c")};
    kvs[n++] = (kv){TYPES, v_i32s(7, 1, 1, 1, 3, 1, 1, 1)};
    kvs[n++] = (kv){MERGES, v_strs(2, "a b", "\xC4\xA0 c")};
    kvs[n++] = (kv){BOS, v_u32(3)};
    return n;
}

#define SP "\xE2\x96\x81"

/* ▁a scores above ab unless ab_first: "ab" is then [▁a, b] or [▁, ab] */
static size_t base_llama(kv *kvs, bool ab_first)
{
    size_t n = 0;
    kvs[n++] = (kv){MODEL, v_str("llama")};
    kvs[n++] = (kv){TOKENS, v_strs(9, "<unk>", "<s>", "</s>", "<0x41>", SP, "a", "b", SP "a",
                                   "ab")};
    kvs[n++] = (kv){SCORES, v_f32s(9, 0.0, 0.0, 0.0, 0.0, -10.0, -11.0, -12.0, -1.0,
                                   ab_first ? -0.5 : -2.0)};
    kvs[n++] = (kv){TYPES, v_i32s(9, 2, 3, 3, 6, 1, 1, 1, 1, 1)};
    kvs[n++] = (kv){"tokenizer.ggml.unknown_token_id", v_u32(0)};
    kvs[n++] = (kv){BOS, v_u32(1)};
    kvs[n++] = (kv){"tokenizer.ggml.eos_token_id", v_u32(2)};
    return n;
}

static char *g_dir;

/* Writes kvs (GGUF v3, no tensors) to the test directory; returns the path (static). */
static const char *write_gguf(const kv *kvs, size_t n)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/t.gguf", g_dir);
    lh_strbuf b = {0};
    lh_strbuf_add(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, n);
    for (size_t i = 0; i < n; i++) {
        put_str(&b, kvs[i].key, strlen(kvs[i].key));
        lh_strbuf_add(&b, kvs[i].v.b.s, kvs[i].v.b.len);
    }
    CU_ASSERT_FATAL(lh_strbuf_ok(&b));
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(b.s, 1, b.len, f), b.len);
    fclose(f);
    lh_strbuf_free(&b);
    return path;
}

static void free_kvs(kv *kvs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        lh_strbuf_free(&kvs[i].v.b);
}

/* The base of `model` with key set to v (added when the base lacks it) or, without v.b.s,
 * removed; loads it. The caller's t (may be NULL) gets the tokenizer on success. */
static lh_status load_with(const char *model, const char *key, val v, lh_tokenizer **t,
                           lh_err *err)
{
    kv kvs[16];
    size_t n = strcmp(model, "gpt2") == 0 ? base_gpt2(kvs) : base_llama(kvs, false), i = 0;
    if (key) {
        while (i < n && strcmp(kvs[i].key, key) != 0)
            i++;
        if (i < n) {
            lh_strbuf_free(&kvs[i].v.b);
            if (v.b.s)
                kvs[i].v = v;
            else
                kvs[i] = kvs[--n];
        } else if (v.b.s) {
            kvs[n++] = (kv){key, v};
        }
    }
    const char *path = write_gguf(kvs, n);
    free_kvs(kvs, n);
    lh_tokenizer *tok = NULL;
    lh_status st = lh_tokenizer_load_gguf(path, &tok, err);
    CU_ASSERT((st == LH_OK) == (tok != NULL));
    if (t)
        *t = tok;
    else
        lh_tokenizer_free(tok);
    return st;
}

static const val NONE = {{0}};

static void expect_ids(lh_tokenizer *t, const char *text, bool special, const int32_t *want,
                       size_t n_want)
{
    lh_err err = {0};
    int32_t *ids;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(t, text, strlen(text), special, &ids, &n, &err),
                          LH_OK);
    bool same = n == n_want && memcmp(ids, want, n * sizeof *ids) == 0;
    if (!same) {
        fprintf(stderr, "\n'%s':", text);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", (int)ids[i]);
        fprintf(stderr, "\n");
    }
    CU_ASSERT(same);
    free(ids);
}

static void test_minimal_files(void)
{
    g_dir = lh_test_mkdtemp();
    lh_err err = {0};
    lh_tokenizer *t;
    /* byte-level: the added <s> matched first, "a b" merged, " c" through "Ġ c" */
    CU_ASSERT_EQUAL_FATAL(load_with("gpt2", NULL, NONE, &t, &err), LH_OK);
    expect_ids(t, "<s>ab c", false, (const int32_t[]){3, 2, 6}, 3);
    expect_ids(t, "ab", true, (const int32_t[]){2}, 1); /* add_bos_token defaults to false */
    CU_ASSERT(lh_tokenizer_is_special(t, 3));
    lh_tokenizer_free(t);
    CU_ASSERT_EQUAL_FATAL(load_with("gpt2", ADD_BOS, v_bool(true), &t, &err), LH_OK);
    expect_ids(t, "ab", true, (const int32_t[]){3, 2}, 2);
    lh_tokenizer_free(t);
    /* add_space_prefix: ByteLevel's add_prefix_space ("c" is then "Ġc") */
    CU_ASSERT_EQUAL_FATAL(load_with("gpt2", "tokenizer.ggml.add_space_prefix", v_bool(true), &t,
                                    &err), LH_OK);
    expect_ids(t, "c", false, (const int32_t[]){6}, 1);
    lh_tokenizer_free(t);
    /* a user-defined token is an added token, not special */
    CU_ASSERT_EQUAL_FATAL(load_with("gpt2", TYPES, v_i32s(7, 1, 1, 1, 4, 1, 1, 1), &t, &err),
                          LH_OK);
    expect_ids(t, "b<s>", false, (const int32_t[]){1, 3}, 2);
    CU_ASSERT(!lh_tokenizer_is_special(t, 3));
    lh_tokenizer_free(t);
    /* no token types: every token normal ("<s>" is then bytes: not in this vocabulary) */
    CU_ASSERT_EQUAL_FATAL(load_with("gpt2", TYPES, NONE, &t, &err), LH_OK);
    CU_ASSERT(!lh_tokenizer_is_special(t, 3));
    lh_tokenizer_free(t);
    /* no tokenizer.ggml.pre: llama.cpp's default, with a warning */
    CU_ASSERT_EQUAL_FATAL(load_with("gpt2", PRE, NONE, &t, &err), LH_OK);
    expect_ids(t, "ab c", false, (const int32_t[]){2, 6}, 2);
    lh_tokenizer_free(t);
    /* every supported pre-tokenizer name loads */
    static const char *const pres[] = {"default", "gpt-2", "phi-2", "smollm", "starcoder",
                                       "llama3", "llama-v3", "llama-bpe", "qwen2",
                                       "deepseek-r1-qwen"};
    for (size_t i = 0; i < sizeof pres / sizeof *pres; i++) {
        lh_status st = load_with("gpt2", PRE, v_str(pres[i]), &t, &err);
        if (st)
            fprintf(stderr, "\n%s: %s\n", pres[i], err.msg);
        CU_ASSERT_EQUAL(st, LH_OK);
        if (st == LH_OK)
            expect_ids(t, "ab", false, (const int32_t[]){2}, 1);
        lh_tokenizer_free(t);
    }
    /* the Llama 3 family adds BOS by default */
    CU_ASSERT_EQUAL_FATAL(load_with("gpt2", PRE, v_str("llama-bpe"), &t, &err), LH_OK);
    expect_ids(t, "ab", true, (const int32_t[]){3, 2}, 2);
    lh_tokenizer_free(t);

    /* SentencePiece: the scores order the derived merges */
    kv kvs[16];
    for (int ab_first = 0; ab_first <= 1; ab_first++) {
        size_t n = base_llama(kvs, ab_first);
        const char *path = write_gguf(kvs, n);
        free_kvs(kvs, n);
        CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load_gguf(path, &t, &err), LH_OK);
        if (ab_first)
            expect_ids(t, "ab", true, (const int32_t[]){1, 4, 8}, 3);
        else
            expect_ids(t, "ab", true, (const int32_t[]){1, 7, 6}, 3);
        /* byte fallback for A, <unk> for what has no byte token */
        expect_ids(t, "A", false, (const int32_t[]){4, 3}, 2);
        expect_ids(t, "Z", false, (const int32_t[]){4, 0}, 2);
        char *out;
        size_t len;
        CU_ASSERT_EQUAL(lh_tokenizer_decode(t, (const int32_t[]){1, 7, 6, 4, 3}, 5, true, &out,
                                            &len, &err), LH_OK);
        CU_ASSERT_STRING_EQUAL(out, "ab A");
        free(out);
        CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(t), LH_BYTE_MODE_FALLBACK);
        lh_tokenizer_free(t);
    }
    /* equal scores: the merges keep the pieces' id order (transformers' stable sort), so of
     * "ab" and "bc" the one with the lower id merges first */
    for (int bc_first = 0; bc_first <= 1; bc_first++) {
        size_t n = 0;
        kvs[n++] = (kv){MODEL, v_str("llama")};
        kvs[n++] = (kv){TOKENS, bc_first ? v_strs(7, "<unk>", SP, "a", "b", "c", "bc", "ab")
                                         : v_strs(7, "<unk>", SP, "a", "b", "c", "ab", "bc")};
        kvs[n++] = (kv){SCORES, v_f32s(7, 0.0, -10.0, -11.0, -12.0, -13.0, -1.0, -1.0)};
        kvs[n++] = (kv){TYPES, v_i32s(7, 2, 1, 1, 1, 1, 1, 1)};
        kvs[n++] = (kv){ADD_BOS, v_bool(false)};
        const char *path = write_gguf(kvs, n);
        free_kvs(kvs, n);
        CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load_gguf(path, &t, &err), LH_OK);
        if (bc_first)
            expect_ids(t, "abc", true, (const int32_t[]){1, 2, 5}, 3);
        else
            expect_ids(t, "abc", true, (const int32_t[]){1, 5, 4}, 3);
        lh_tokenizer_free(t);
    }
    /* add_space_prefix false: no "▁" in front, no strip */
    CU_ASSERT_EQUAL_FATAL(load_with("llama", "tokenizer.ggml.add_space_prefix", v_bool(false), &t,
                                    &err), LH_OK);
    expect_ids(t, "ab", false, (const int32_t[]){8}, 1);
    lh_tokenizer_free(t);
    lh_test_rmtree(g_dir);
    free(g_dir);
}

static void test_bad_files(void)
{
    g_dir = lh_test_mkdtemp();
    const char *nul_tok[] = {"a", "b", "ab", "<s>", "c\0d", "\xC4\xA0", "\xC4\xA0" "c"};
    const size_t nul_len[] = {1, 1, 2, 3, 3, 2, 3};
    struct {
        const char *model, *key;
        val v;
        lh_status code;
        const char *needle, *needle2;
    } cases[] = {
        /* the model */
        {"gpt2", MODEL, NONE, LH_E_CONFIG, "no tokenizer.ggml.model", NULL},
        {"gpt2", MODEL, v_u32(2), LH_E_CONFIG, "'tokenizer.ggml.model'", "STRING"},
        {"gpt2", MODEL, v_str("bert"), LH_E_UNSUPPORTED, "tokenizer.ggml.model 'bert'", "gpt2"},
        {"gpt2", MODEL, v_str("t5"), LH_E_UNSUPPORTED, "'t5'", "llama"},
        {"gpt2", MODEL, v_str("rwkv"), LH_E_UNSUPPORTED, "'rwkv'", "supported"},
        /* the token list */
        {"gpt2", TOKENS, NONE, LH_E_CONFIG, "no tokenizer.ggml.tokens", NULL},
        {"gpt2", TOKENS, v_i32s(2, 1, 2), LH_E_CONFIG, "tokenizer.ggml.tokens must be an array "
                                                        "of strings", "INT32"},
        {"gpt2", TOKENS, v_str("a"), LH_E_CONFIG, "tokenizer.ggml.tokens", "not STRING"},
        {"gpt2", TOKENS, v_strs(0), LH_E_CONFIG, "tokenizer.ggml.tokens has 0 tokens", NULL},
        {"gpt2", TOKENS, v_strs(7, "a", "b", "ab", "<s>", "", "x", "y"), LH_E_CONFIG,
         "tokenizer.ggml.tokens[4] is empty", NULL},
        {"gpt2", TOKENS, v_strs(7, "a", "b", "ab", "<s>", "b", "x", "y"), LH_E_CONFIG,
         "tokenizer.ggml.tokens[4] 'b' is also tokenizer.ggml.tokens[1]", "duplicate"},
        {"gpt2", TOKENS, v_strs(7, "a", "b", "ab", "<s>", "x\xC3(", "x", "y"), LH_E_CONFIG,
         "tokenizer.ggml.tokens[4] is not valid UTF-8 (byte 1)", NULL},
        {"gpt2", TOKENS, v_strs_n(7, nul_tok, nul_len), LH_E_CONFIG,
         "tokenizer.ggml.tokens[4] holds a NUL byte", NULL},
        /* token types */
        {"gpt2", TYPES, v_i32s(6, 1, 1, 1, 3, 1, 1), LH_E_CONFIG,
         "tokenizer.ggml.token_type has 6 elements, but tokenizer.ggml.tokens has 7", NULL},
        {"gpt2", TYPES, v_strs(7, "1", "1", "1", "3", "1", "1", "1"), LH_E_CONFIG,
         "tokenizer.ggml.token_type must be an array of integers", "ARRAY of STRING"},
        {"gpt2", TYPES, v_i32s(7, 1, 1, 1, 9, 1, 1, 1), LH_E_CONFIG,
         "tokenizer.ggml.token_type[3] (token '<s>'): not a token type", "outside [0, 6]"},
        {"gpt2", TYPES, v_i32s(7, 1, 1, 1, 6, 1, 1, 1), LH_E_CONFIG,
         "tokenizer.ggml.tokens[3] '<s>' has tokenizer.ggml.token_type BYTE", "<0xNN>"},
        /* scores */
        {"llama", SCORES, v_f32s(3, 0.0, 0.0, 0.0), LH_E_CONFIG,
         "tokenizer.ggml.scores has 3 elements, but tokenizer.ggml.tokens has 9", NULL},
        {"llama", SCORES, v_strs(1, "x"), LH_E_CONFIG, "tokenizer.ggml.scores must be an array "
                                                       "of numbers", NULL},
        {"llama", SCORES, v_f32s(9, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0, -1.0, (double)NAN, -1.0),
         LH_E_CONFIG, "tokenizer.ggml.scores[7] is NaN", NULL},
        {"llama", SCORES, NONE, LH_E_CONFIG, "no tokenizer.ggml.scores", "'llama'"},
        /* special-token ids */
        {"gpt2", BOS, v_u32(7), LH_E_CONFIG, "tokenizer.ggml.bos_token_id is not a token id",
         "7 tokens"},
        {"gpt2", "tokenizer.ggml.padding_token_id", v_u32(99), LH_E_CONFIG,
         "tokenizer.ggml.padding_token_id is not a token id", NULL},
        {"gpt2", BOS, v_str("<s>"), LH_E_CONFIG, "tokenizer.ggml.bos_token_id must be an integer",
         "STRING"},
        {"llama", BOS, NONE, LH_E_CONFIG, "tokenizer.ggml.add_bos_token is true by default",
         "tokenizer.ggml.bos_token_id is not set"},
        {"gpt2", "tokenizer.ggml.add_eos_token", v_bool(true), LH_E_CONFIG,
         "tokenizer.ggml.add_eos_token is true", "eos_token_id is not set"},
        {"gpt2", ADD_BOS, v_u32(1), LH_E_CONFIG, "'tokenizer.ggml.add_bos_token'", "BOOL"},
        /* merges */
        {"gpt2", MERGES, NONE, LH_E_CONFIG, "no tokenizer.ggml.merges", NULL},
        {"gpt2", MERGES, v_i32s(1, 1), LH_E_CONFIG, "tokenizer.ggml.merges must be an array of "
                                                    "strings", NULL},
        {"gpt2", MERGES, v_strs(1, "ab"), LH_E_CONFIG,
         "tokenizer.ggml.merges[0] 'ab' is not two tokens separated by one space", NULL},
        {"gpt2", MERGES, v_strs(2, "a b", "a b c"), LH_E_CONFIG, "tokenizer.ggml.merges[1]",
         "not two tokens"},
        {"gpt2", MERGES, v_strs(1, " ab"), LH_E_CONFIG, "tokenizer.ggml.merges[0]",
         "not two tokens"},
        {"gpt2", MERGES, v_strs(1, "a x"), LH_E_CONFIG, "tokenizer.ggml.merges[0] 'a x': 'x' is "
                                                        "not a token", NULL},
        {"gpt2", MERGES, v_strs(1, "b a"), LH_E_CONFIG, "tokenizer.ggml.merges[0] 'b a': their "
                                                        "merge 'ba' is not a token", NULL},
        /* the pre-tokenizer */
        {"gpt2", PRE, v_str("jais"), LH_E_UNSUPPORTED, "tokenizer.ggml.pre 'jais' is not "
                                                       "supported", "qwen2"},
        {"gpt2", PRE, v_u32(1), LH_E_CONFIG, "'tokenizer.ggml.pre'", NULL},
        /* SentencePiece normalization this reader does not do */
        {"llama", "tokenizer.ggml.remove_extra_whitespaces", v_bool(true), LH_E_UNSUPPORTED,
         "tokenizer.ggml.remove_extra_whitespaces", NULL},
        {"llama", "tokenizer.ggml.precompiled_charsmap", v_i32s(2, 1, 2), LH_E_UNSUPPORTED,
         "tokenizer.ggml.precompiled_charsmap", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lh_err err = {0};
        lh_status st = load_with(cases[i].model, cases[i].key, cases[i].v, NULL, &err);
        if (st != cases[i].code)
            fprintf(stderr, "\ncase %zu (%s): status %d: %s\n", i, cases[i].key, (int)st, err.msg);
        CU_ASSERT_EQUAL(st, cases[i].code);
        CHECK_MSG(err, cases[i].needle);
        if (cases[i].needle2)
            CHECK_MSG(err, cases[i].needle2);
        CHECK_MSG(err, "t.gguf"); /* the file is named */
    }
    /* every truncation of a fixture fails cleanly */
    FILE *f = fopen(fixture("gguf/sp_llama2.gguf"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)size);
    CU_ASSERT_EQUAL_FATAL(fread(data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    char path[4096];
    snprintf(path, sizeof path, "%s/cut.gguf", g_dir);
    for (long cut = 0; cut < size; cut += 61) {
        FILE *o = fopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(o);
        fwrite(data, 1, (size_t)cut, o);
        fclose(o);
        lh_tokenizer *t = NULL;
        lh_err err = {0};
        CU_ASSERT_NOT_EQUAL(lh_tokenizer_load_gguf(path, &t, &err), LH_OK);
        CU_ASSERT_PTR_NULL(t);
    }
    free(data);
    lh_test_rmtree(g_dir);
    free(g_dir);
}

/* ---- the default model ----------------------------------------------------------------------- */

/* $LH_TEST_GGUF, else the cache's SmolLM2 GGUF; the tokenizer.json converted from it. */
static bool default_model(char *gguf, char *json, size_t n)
{
    const char *e = getenv("LH_TEST_GGUF"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    char cache[2048];
    if (xdg && *xdg)
        snprintf(cache, sizeof cache, "%s", xdg);
    else if (home && *home)
        snprintf(cache, sizeof cache, "%s/.cache", home);
    else
        return false;
    if (e && *e)
        snprintf(gguf, n, "%s", e);
    else
        snprintf(gguf, n, "%s/llmhost/gguf/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    snprintf(json, n, "%s/llmhost/models/SmolLM2-135M-Instruct/tokenizer.json", cache);
    struct stat sb;
    return stat(gguf, &sb) == 0 && stat(json, &sb) == 0;
}

static void test_default_model(void)
{
    char gguf[4096], json[4096];
    if (!default_model(gguf, json, sizeof gguf)) {
        LH_TEST_SKIP("no default-model GGUF and tokenizer.json (run "
                     "tools/default_model/fetch_gguf.py and convert_gguf.py to cache "
                     "SmolLM2-135M-Instruct under ~/.cache/llmhost)");
        return;
    }
    lh_err err = {0};
    lh_tokenizer *g = NULL, *j = NULL;
    lh_status st = lh_tokenizer_open(gguf, &g, &err);
    if (st)
        fprintf(stderr, "\n%s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load(json, &j, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_tokenizer_vocab_size(g), lh_tokenizer_vocab_size(j));
    CU_ASSERT_EQUAL(lh_tokenizer_byte_mode(g), lh_tokenizer_byte_mode(j));
    size_t diff = 0;
    for (int32_t id = 0; id < lh_tokenizer_vocab_size(j); id++) {
        const char *a = lh_tokenizer_id_to_token(g, id), *b = lh_tokenizer_id_to_token(j, id);
        diff += !a || !b || strcmp(a, b) != 0 ||
                lh_tokenizer_is_special(g, id) != lh_tokenizer_is_special(j, id);
    }
    CU_ASSERT_EQUAL(diff, 0);
    /* every corpus line, the whole corpus, and the lines with the special tokens in them */
    FILE *f = fopen(fixture("corpus.txt"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    lh_strbuf all = {0};
    char line[4096];
    size_t lines = 0, bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            char text[4200];
            snprintf(text, sizeof text, pass ? "<|im_start|>user\n%s<|im_end|>\n" : "%s", line);
            if (!pass)
                lh_strbuf_printf(&all, "%s\n", line);
            for (int k = 0; k < (pass ? 1 : 2); k++) {
                const char *s = k ? all.s : text;
                int32_t *a, *b;
                size_t na, nb;
                CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(g, s, strlen(s), true, &a, &na, &err),
                                      LH_OK);
                CU_ASSERT_EQUAL_FATAL(lh_tokenizer_encode(j, s, strlen(s), true, &b, &nb, &err),
                                      LH_OK);
                if (na != nb || memcmp(a, b, na * sizeof *a) != 0) {
                    fprintf(stderr, "\nids differ for '%.80s'\n", s);
                    bad++;
                }
                char *da, *db;
                size_t la, lb;
                CU_ASSERT_EQUAL(lh_tokenizer_decode(g, a, na, false, &da, &la, &err), LH_OK);
                CU_ASSERT_EQUAL(lh_tokenizer_decode(j, a, na, false, &db, &lb, &err), LH_OK);
                CU_ASSERT(la == lb && strcmp(da, db) == 0 && strcmp(da, s) == 0);
                free(da);
                free(db);
                free(a);
                free(b);
                lines++;
            }
        }
        rewind(f);
    }
    fclose(f);
    lh_strbuf_free(&all);
    fprintf(stderr, "\n  default model: %zu texts, %zu differ\n", lines, bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(lines > 90);
    lh_tokenizer_free(g);
    lh_tokenizer_free(j);
}

int main(int argc, char **argv)
{
    static CU_TestInfo exact[] = {
        {"GGUF fixtures give the tokenizer.json ids", test_gguf_exactness},
        {"GGUF sources, byte modes", test_open_and_byte_mode},
        {"minimal GGUF tokenizers", test_minimal_files},
        {"the default model's GGUF against its tokenizer.json", test_default_model},
        CU_TEST_INFO_NULL,
    };
    static CU_TestInfo bad[] = {
        {"bad GGUF tokenizers", test_bad_files},
        CU_TEST_INFO_NULL,
    };
    static CU_SuiteInfo suites[] = {
        {"tokenizer-gguf", NULL, NULL, NULL, NULL, exact},
        {"tokenizer-gguf-bad-input", NULL, NULL, NULL, NULL, bad},
        CU_SUITE_INFO_NULL,
    };
    return lh_test_main(argc, argv, suites);
}
