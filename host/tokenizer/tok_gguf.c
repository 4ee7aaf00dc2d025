/* GGUF metadata as a tokenizer (lh_tokenizer_load_gguf). llama.cpp's tokenizer.ggml.* keys are
 * turned into the tokenizer.json document that Hugging Face's tokenizer of the same model has,
 * and that document is loaded by tok_load.c: every id then comes from the same code as for a
 * tokenizer.json. This file reads and checks what both models share -- the token list, the
 * token types, the scores, the special-token ids -- and builds the vocab, the added tokens and
 * the post-processor; tok_gguf_bpe.c and tok_gguf_spm.c give the rest of each model. */
#include "tokenizer/tok_gguf.h"

#include "core/utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 50000000 /* the tokenizer.json loader's bound on ids */

lh_status gguf_oom(const gguf_src *g)
{
    return lh_err_set(g->err, LH_E_NOMEM, "out of memory reading the tokenizer of %s", g->path);
}

void gguf_type_desc(const lh_gguf_value *v, char *buf, size_t n)
{
    if (v->type == LH_GGUF_ARRAY)
        snprintf(buf, n, "ARRAY of %s", lh_gguf_type_name(v->elem_type));
    else
        snprintf(buf, n, "%s", lh_gguf_type_name(v->type));
}

static bool is_int_type(lh_gguf_type t)
{
    return t <= LH_GGUF_INT32 || t == LH_GGUF_UINT64 || t == LH_GGUF_INT64;
}

/* kv must be an array whose elements pass ok(); "an array of <want>" otherwise. */
static lh_status need_array(const gguf_src *g, const lh_gguf_kv *kv, bool (*ok)(lh_gguf_type),
                            const char *want)
{
    if (kv->value.type == LH_GGUF_ARRAY && ok(kv->value.elem_type))
        return LH_OK;
    char got[64];
    gguf_type_desc(&kv->value, got, sizeof got);
    return lh_err_set(g->err, LH_E_CONFIG, "%s: %s must be an array of %s, not %s", g->path,
                      kv->key, want, got);
}

/* An array with one element per token. */
static lh_status need_per_token(const gguf_src *g, const lh_gguf_kv *kv)
{
    if (kv->value.count == g->n)
        return LH_OK;
    return lh_err_set(g->err, LH_E_CONFIG, "%s: %s has %" PRIu64 " elements, but %s has %zu "
                      "(one per token)", g->path, kv->key, kv->value.count, GK_TOKENS, g->n);
}

static bool is_string_type(lh_gguf_type t) { return t == LH_GGUF_STRING; }
static bool is_number_type(lh_gguf_type t)
{
    return is_int_type(t) || t == LH_GGUF_FLOAT32 || t == LH_GGUF_FLOAT64;
}

/* ---- the token list, types and scores -------------------------------------------------------- */

static lh_status read_tokens(gguf_src *g)
{
    const lh_gguf_kv *kv = lh_gguf_find(g->f, GK_TOKENS);
    lh_status st;
    if (!kv)
        return lh_err_set(g->err, LH_E_CONFIG, "%s: no %s (the file has no tokenizer vocabulary)",
                          g->path, GK_TOKENS);
    if ((st = need_array(g, kv, is_string_type, "strings")))
        return st;
    if (kv->value.count == 0 || kv->value.count > MAX_TOKENS)
        return lh_err_set(g->err, LH_E_CONFIG, "%s: %s has %" PRIu64 " tokens (expected 1 to %d)",
                          g->path, GK_TOKENS, kv->value.count, MAX_TOKENS);
    g->n = (size_t)kv->value.count;
    g->tok = calloc(g->n, sizeof *g->tok);
    g->len = calloc(g->n, sizeof *g->len);
    if (!g->tok || !g->len || !strmap_init(&g->ids, g->n))
        return gguf_oom(g);
    for (size_t i = 0; i < g->n; i++) {
        lh_gguf_value e;
        const char *s;
        size_t n;
        if ((st = lh_gguf_value_at(&kv->value, i, &e, g->err)) ||
            (st = lh_gguf_value_string(&e, &s, &n, g->err)))
            return lh_err_prefix(g->err, "%s: %s[%zu]", g->path, GK_TOKENS, i);
        size_t bad = lh_utf8_check(s, n);
        if (n == 0)
            return lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%zu] is empty", g->path, GK_TOKENS, i);
        if (memchr(s, 0, n))
            return lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%zu] holds a NUL byte", g->path,
                              GK_TOKENS, i);
        if (bad != n)
            return lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%zu] is not valid UTF-8 (byte %zu)",
                              g->path, GK_TOKENS, i, bad);
        int32_t dup = strmap_get(&g->ids, s, n);
        if (dup >= 0)
            return lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%zu] '%.*s' is also %s[%d] (duplicate "
                              "token)", g->path, GK_TOKENS, i, (int)(n < 200 ? n : 200), s,
                              GK_TOKENS, (int)dup);
        g->tok[i] = s;
        g->len[i] = n;
        strmap_put(&g->ids, s, n, (int32_t)i);
    }
    return LH_OK;
}

/* A byte token must be "<0xNN>" (upper-case hex), the name byte fallback looks up. */
static bool byte_token_name(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && s[3] && s[4] &&
           strchr(hex, s[3]) && strchr(hex, s[4]);
}

static lh_status read_types(gguf_src *g)
{
    g->type = malloc(g->n * sizeof *g->type);
    if (!g->type)
        return gguf_oom(g);
    for (size_t i = 0; i < g->n; i++)
        g->type[i] = TT_NORMAL;
    const lh_gguf_kv *kv = lh_gguf_find(g->f, GK_TYPES);
    lh_status st;
    if (!kv) /* llama.cpp: every token is normal */
        return LH_OK;
    if ((st = need_array(g, kv, is_int_type, "integers")) || (st = need_per_token(g, kv)))
        return st;
    for (size_t i = 0; i < g->n; i++) {
        lh_gguf_value e;
        int64_t t;
        if ((st = lh_gguf_value_at(&kv->value, i, &e, g->err)) ||
            (st = lh_gguf_value_int(&e, TT_UNDEFINED, TT_BYTE, &t, g->err)))
            return lh_err_prefix(g->err, "%s: %s[%zu] (token '%.*s'): not a token type", g->path,
                                 GK_TYPES, i, (int)(g->len[i] < 200 ? g->len[i] : 200),
                                 g->tok[i]);
        g->type[i] = (int32_t)t;
        if (t == TT_BYTE && !byte_token_name(g->tok[i], g->len[i]))
            return lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%zu] '%.*s' has %s BYTE (6) but is "
                              "not a byte token <0xNN>", g->path, GK_TOKENS, i,
                              (int)(g->len[i] < 200 ? g->len[i] : 200), g->tok[i], GK_TYPES);
    }
    return LH_OK;
}

static lh_status read_scores(gguf_src *g)
{
    const lh_gguf_kv *kv = lh_gguf_find(g->f, GK_SCORES);
    lh_status st;
    if (!kv)
        return LH_OK;
    if ((st = need_array(g, kv, is_number_type, "numbers")) || (st = need_per_token(g, kv)))
        return st;
    g->score = malloc(g->n * sizeof *g->score);
    if (!g->score)
        return gguf_oom(g);
    for (size_t i = 0; i < g->n; i++) {
        lh_gguf_value e;
        int64_t v;
        if ((st = lh_gguf_value_at(&kv->value, i, &e, g->err)))
            return lh_err_prefix(g->err, "%s: %s[%zu]", g->path, GK_SCORES, i);
        if (is_int_type(e.type)) {
            if ((st = lh_gguf_value_int(&e, INT64_MIN, INT64_MAX, &v, g->err)))
                return lh_err_prefix(g->err, "%s: %s[%zu]", g->path, GK_SCORES, i);
            g->score[i] = (double)v;
        } else if ((st = lh_gguf_value_float(&e, &g->score[i], g->err))) {
            return lh_err_prefix(g->err, "%s: %s[%zu]", g->path, GK_SCORES, i);
        }
        if (isnan(g->score[i]))
            return lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%zu] is NaN (scores order the pieces)",
                              g->path, GK_SCORES, i);
    }
    return LH_OK;
}

static void src_free(gguf_src *g)
{
    free(g->tok);
    free(g->len);
    free(g->type);
    free(g->score);
    strmap_free(&g->ids);
}

/* ---- keys ------------------------------------------------------------------------------------ */

/* The id key gives, checked against n tokens; -1 when absent. */
static lh_status token_id(const lh_gguf_file *f, const char *key, uint64_t n, int32_t *id,
                          lh_err *err)
{
    const lh_gguf_kv *kv = lh_gguf_find(f, key);
    *id = -1;
    if (!kv)
        return LH_OK;
    if (!is_int_type(kv->value.type)) {
        char got[64];
        gguf_type_desc(&kv->value, got, sizeof got);
        return lh_err_set(err, LH_E_CONFIG, "%s: %s must be an integer (a token id), not %s",
                          lh_gguf_path(f), key, got);
    }
    int64_t v;
    if (lh_gguf_value_int(&kv->value, INT64_MIN, INT64_MAX, &v, NULL) != LH_OK || v < 0 ||
        (uint64_t)v >= n)
        return lh_err_set(err, LH_E_CONFIG, "%s: %s is not a token id (%s has %" PRIu64
                          " tokens, ids 0 to %" PRIu64 ")", lh_gguf_path(f), key, GK_TOKENS, n,
                          n - 1);
    *id = (int32_t)v;
    return LH_OK;
}

lh_status gguf_special_id(const gguf_src *g, const char *key, int32_t *id)
{
    return token_id(g->f, key, g->n, id, g->err);
}

lh_status gguf_opt_bool(const gguf_src *g, const char *key, bool dflt, bool *out)
{
    *out = dflt;
    if (!lh_gguf_find(g->f, key))
        return LH_OK;
    return lh_gguf_get_bool(g->f, key, out, g->err);
}

const lh_gguf_special lh_gguf_specials[LH_GGUF_N_SPECIALS] = {
    {"bos_token", "tokenizer.ggml.bos_token_id"},
    {"eos_token", "tokenizer.ggml.eos_token_id"},
    {"unk_token", "tokenizer.ggml.unknown_token_id"},
    {"sep_token", "tokenizer.ggml.seperator_token_id"}, /* sic: llama.cpp's spelling */
    {"pad_token", "tokenizer.ggml.padding_token_id"},
    {"cls_token", "tokenizer.ggml.cls_token_id"},
    {"mask_token", "tokenizer.ggml.mask_token_id"},
};

lh_status lh_gguf_special_token(const lh_gguf_file *f, const char *key, const char **s,
                                size_t *len, lh_err *err)
{
    *s = NULL;
    *len = 0;
    if (!lh_gguf_find(f, key))
        return LH_OK;
    const lh_gguf_kv *toks = lh_gguf_find(f, GK_TOKENS);
    if (!toks || toks->value.type != LH_GGUF_ARRAY || toks->value.elem_type != LH_GGUF_STRING)
        return lh_err_set(err, LH_E_CONFIG, "%s: %s is set, but there is no %s (an array of "
                          "strings) to give its token", lh_gguf_path(f), key, GK_TOKENS);
    int32_t id;
    lh_gguf_value e;
    lh_status st = token_id(f, key, toks->value.count, &id, err);
    if (st)
        return st;
    if ((st = lh_gguf_value_at(&toks->value, (uint64_t)id, &e, err)) ||
        (st = lh_gguf_value_string(&e, s, len, err)))
        return lh_err_prefix(err, "%s: %s[%d]", lh_gguf_path(f), GK_TOKENS, (int)id);
    if (!*len || memchr(*s, 0, *len) || !lh_utf8_valid(*s, *len)) {
        *s = NULL;
        return lh_err_set(err, LH_E_CONFIG, "%s: %s: %s[%d] is empty, holds a NUL byte or is "
                          "not UTF-8", lh_gguf_path(f), key, GK_TOKENS, (int)id);
    }
    return LH_OK;
}

/* ---- the document ---------------------------------------------------------------------------- */

/* Every id key the tokens may name (the ones transformers and llama.cpp read), checked even
 * when this tokenizer does not use it, so that a bad file fails here and not later. */
static lh_status check_special_ids(const gguf_src *g)
{
    for (size_t i = 0; i < LH_GGUF_N_SPECIALS; i++) {
        int32_t id;
        lh_status st = gguf_special_id(g, lh_gguf_specials[i].key, &id);
        if (st)
            return st;
    }
    return LH_OK;
}

/* model.vocab (every token) and added_tokens (control, unknown and user-defined tokens: the
 * first two special, as transformers' SentencePiece converter and convert_hf_to_gguf.py
 * have them; never normalized, never stripped). */
static lh_status add_vocab(gguf_src *g, json_t *doc, json_t *model)
{
    json_t *vocab = json_object(), *added = json_array();
    if (json_object_set_new(model, "vocab", vocab) ||
        json_object_set_new(doc, "added_tokens", added))
        return gguf_oom(g);
    for (size_t i = 0; i < g->n; i++) {
        if (json_object_setn_new_nocheck(vocab, g->tok[i], g->len[i], json_integer((json_int_t)i)))
            return gguf_oom(g);
        int32_t t = g->type[i];
        if (t != TT_CONTROL && t != TT_UNKNOWN && t != TT_USER_DEFINED)
            continue;
        json_t *a = json_pack("{s:I,s:s%,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)i, "content",
                              g->tok[i], g->len[i], "single_word", 0, "lstrip", 0, "rstrip", 0,
                              "normalized", 0, "special", t != TT_USER_DEFINED);
        if (json_array_append_new(added, a))
            return gguf_oom(g);
    }
    return LH_OK;
}

/* A TemplateProcessing of [BOS] $A [EOS] when tokenizer.ggml.add_bos_token / add_eos_token say
 * so (transformers builds the same from add_bos_token / add_eos_token); none otherwise. */
static lh_status add_post(gguf_src *g, json_t *doc, bool bos_dflt, bool eos_dflt)
{
    bool add[2];
    int32_t id[2];
    static const char *const add_key[2] = {GK_ADD_BOS, GK_ADD_EOS};
    static const char *const id_key[2] = {GK_BOS, GK_EOS};
    lh_status st;
    if ((st = gguf_opt_bool(g, GK_ADD_BOS, bos_dflt, &add[0])) ||
        (st = gguf_opt_bool(g, GK_ADD_EOS, eos_dflt, &add[1])))
        return st;
    if (!add[0] && !add[1])
        return LH_OK;
    json_t *single = json_array(), *specials = json_object();
    json_t *post = json_pack("{s:s,s:o,s:o}", "type", "TemplateProcessing", "single", single,
                             "special_tokens", specials);
    if (!post || json_object_set_new(doc, "post_processor", post))
        return gguf_oom(g);
    for (int k = 0; k < 2; k++) {
        if (k == 1 && json_array_append_new(single, json_pack("{s:{s:s,s:i}}", "Sequence", "id",
                                                              "A", "type_id", 0)))
            return gguf_oom(g);
        if (!add[k])
            continue;
        if ((st = gguf_special_id(g, id_key[k], &id[k])))
            return st;
        if (id[k] < 0)
            return lh_err_set(g->err, LH_E_CONFIG, "%s: %s is %s, but %s is not set", g->path,
                              add_key[k], lh_gguf_find(g->f, add_key[k]) ? "true" :
                              "true by default for this model", id_key[k]);
        const char *s = g->tok[id[k]];
        size_t n = g->len[id[k]];
        if (json_array_append_new(single, json_pack("{s:{s:s%,s:i}}", "SpecialToken", "id", s, n,
                                                    "type_id", 0)) ||
            json_object_setn_new_nocheck(specials, s, n,
                                         json_pack("{s:s%,s:[I],s:[s%]}", "id", s, n, "ids",
                                                   (json_int_t)id[k], "tokens", s, n)))
            return gguf_oom(g);
    }
    return LH_OK;
}

static lh_status build_doc(gguf_src *g, json_t *doc)
{
    const char *model_name;
    size_t model_len;
    lh_status st;
    if (!lh_gguf_find(g->f, GK_MODEL))
        return lh_err_set(g->err, LH_E_CONFIG, "%s: no %s (the file has no tokenizer)", g->path,
                          GK_MODEL);
    if ((st = lh_gguf_get_string(g->f, GK_MODEL, &model_name, &model_len, g->err)))
        return st;
    bool gpt2 = model_len == 4 && memcmp(model_name, "gpt2", 4) == 0;
    bool llama = model_len == 5 && memcmp(model_name, "llama", 5) == 0;
    if (!gpt2 && !llama)
        return lh_err_set(g->err, LH_E_UNSUPPORTED, "%s: %s '%.*s' is not supported (supported: "
                          "gpt2 -- byte-level BPE, llama -- SentencePiece BPE)", g->path,
                          GK_MODEL, (int)(model_len < 100 ? model_len : 100), model_name);
    if ((st = read_tokens(g)) || (st = read_types(g)) || (st = read_scores(g)) ||
        (st = check_special_ids(g)))
        return st;
    json_t *model = json_pack("{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                              "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0);
    if (!model || json_object_set_new(doc, "model", model))
        return gguf_oom(g);
    if ((st = add_vocab(g, doc, model)))
        return st;
    /* llama.cpp's defaults: SentencePiece adds BOS, byte-level BPE only for some
     * pre-tokenizers; neither adds EOS */
    bool add_bos = llama;
    if ((st = gpt2 ? gguf_bpe_model(g, doc, model, &add_bos) : gguf_spm_model(g, doc, model)))
        return st;
    return add_post(g, doc, add_bos, false);
}

lh_status lh_tokenizer_load_gguf(const char *path, lh_tokenizer **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_tokenizer_load_gguf: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return lh_err_set(err, LH_E_USAGE, "lh_tokenizer_load_gguf: no path");
    lh_gguf_file *f = NULL;
    lh_status st = lh_gguf_open(path, &f, err);
    if (st)
        return st;
    gguf_src g = {.f = f, .path = path, .err = err};
    json_t *doc = json_pack("{s:s,s:n,s:n,s:n,s:n,s:n,s:n}", "version", "1.0", "truncation",
                            "padding", "normalizer", "pre_tokenizer", "post_processor", "decoder");
    st = doc ? build_doc(&g, doc) : gguf_oom(&g);
    if (st == LH_OK) {
        /* what the loader finds that the checks above did not is named as in the document */
        char origin[4200];
        snprintf(origin, sizeof origin, "%s (its tokenizer.ggml.* metadata as tokenizer.json)",
                 path);
        st = tokenizer_from_doc(doc, origin, out, err);
    }
    json_decref(doc);
    src_free(&g);
    lh_gguf_close(f);
    return st;
}
