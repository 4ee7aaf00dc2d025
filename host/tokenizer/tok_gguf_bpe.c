/* tokenizer.ggml.model "gpt2" (byte-level BPE): the merges, checked, and the pre-tokenizer that
 * tokenizer.ggml.pre names, as the Hugging Face tokenizer.json of those models has it.
 *
 * The table maps llama.cpp's pre-tokenizer names (llama-vocab.cpp) to the normalizer and
 * pre-tokenizer of the models they were made for (transformers' GPT2Converter and
 * Qwen2Converter, the Llama 3 and StarCoder tokenizer.json files). "default" is llama.cpp's own
 * fallback for files without a name -- its four regexes applied in turn, every match and
 * everything between kept (Split, Isolated) -- and no Hugging Face tokenizer; a file without
 * tokenizer.ggml.pre gets it, with a warning, as in llama.cpp. tokenizer.ggml.add_space_prefix
 * becomes the ByteLevel pre-tokenizer's add_prefix_space, which is what transformers does with
 * tokenizer_config.json's add_prefix_space (convert_hf_to_gguf.py records that flag there). */
#include "tokenizer/tok_gguf.h"

#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PRE_DEFAULT, PRE_GPT2, PRE_DIGITS, PRE_LLAMA3, PRE_QWEN2 } pre_kind;

static const struct {
    const char *name;
    pre_kind kind;
} pre_names[] = {
    {"default", PRE_DEFAULT},     {"gpt-2", PRE_GPT2},         {"phi-2", PRE_GPT2},
    {"smollm", PRE_DIGITS},       {"starcoder", PRE_DIGITS},   {"llama3", PRE_LLAMA3},
    {"llama-v3", PRE_LLAMA3},     {"llama-bpe", PRE_LLAMA3},   {"qwen2", PRE_QWEN2},
    {"deepseek-r1-qwen", PRE_QWEN2},
};

/* llama.cpp's default regexes (no tokenizer.json has them) */
static const char *const default_re[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};
/* Llama 3's and Qwen2's Split regexes, as their tokenizer.json files give them */
static const char llama3_re[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_re[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_t *bytelevel(bool add_prefix_space, bool use_regex)
{
    return json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space",
                     add_prefix_space, "trim_offsets", 1, "use_regex", use_regex);
}

static json_t *split(const char *re)
{
    return json_pack("{s:s,s:{s:s},s:s,s:b}", "type", "Split", "pattern", "Regex", re,
                     "behavior", "Isolated", "invert", 0);
}

/* Sequence [parts..., ByteLevel] (parts are stolen, NULL when an allocation failed). */
static json_t *sequence(json_t **parts, size_t n, json_t *last)
{
    json_t *items = json_array();
    bool ok = items != NULL;
    for (size_t i = 0; i < n; i++)
        ok = json_array_append_new(items, parts[i]) == 0 && ok;
    ok = json_array_append_new(items, last) == 0 && ok;
    json_t *seq = json_pack("{s:s,s:o}", "type", "Sequence", "pretokenizers", items);
    if (!ok) {
        json_decref(seq);
        return NULL;
    }
    return seq;
}

static lh_status known_names(const gguf_src *g, const char *name, size_t len)
{
    char list[512] = "";
    for (size_t i = 0; i < sizeof pre_names / sizeof *pre_names; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 pre_names[i].name);
    return lh_err_set(g->err, LH_E_UNSUPPORTED, "%s: %s '%.*s' is not supported (supported: %s)",
                      g->path, GK_PRE, (int)(len < 100 ? len : 100), name, list);
}

/* doc's normalizer and pre_tokenizer, the model's ignore_merges and the default of add_bos
 * for tokenizer.ggml.pre. */
static lh_status set_pre(gguf_src *g, json_t *doc, json_t *model, bool *add_bos)
{
    const char *name = "default";
    size_t len = 7;
    lh_status st;
    if (!lh_gguf_find(g->f, GK_PRE))
        lh_log(LH_LOG_WARN, "%s: no %s; using llama.cpp's 'default' pre-tokenizer (as llama.cpp "
               "does: the ids may differ from the model's own tokenizer)", g->path, GK_PRE);
    else if ((st = lh_gguf_get_string(g->f, GK_PRE, &name, &len, g->err)))
        return st;
    size_t k = 0;
    while (k < sizeof pre_names / sizeof *pre_names &&
           !(strlen(pre_names[k].name) == len && memcmp(pre_names[k].name, name, len) == 0))
        k++;
    if (k == sizeof pre_names / sizeof *pre_names)
        return known_names(g, name, len);
    bool aps;
    if ((st = gguf_opt_bool(g, GK_ADD_PREFIX, false, &aps)))
        return st;
    json_t *pre = NULL, *norm = NULL, *parts[4];
    *add_bos = false;
    switch (pre_names[k].kind) {
    case PRE_DEFAULT:
        for (size_t i = 0; i < 4; i++)
            parts[i] = split(default_re[i]);
        pre = sequence(parts, 4, bytelevel(aps, false));
        break;
    case PRE_GPT2:
        pre = bytelevel(aps, true);
        break;
    case PRE_DIGITS:
        parts[0] = json_pack("{s:s,s:b}", "type", "Digits", "individual_digits", 1);
        pre = sequence(parts, 1, bytelevel(aps, true));
        break;
    case PRE_LLAMA3:
        /* llama.cpp: a pre-token that is a token is taken whole; Llama 3 adds BOS */
        if (json_object_set_new(model, "ignore_merges", json_true()))
            return gguf_oom(g);
        *add_bos = true;
        parts[0] = split(llama3_re);
        pre = sequence(parts, 1, bytelevel(aps, false));
        break;
    case PRE_QWEN2:
        norm = json_pack("{s:s}", "type", "NFC");
        parts[0] = split(qwen2_re);
        pre = sequence(parts, 1, bytelevel(aps, false));
        if (!norm || json_object_set_new(doc, "normalizer", norm)) {
            json_decref(pre);
            return gguf_oom(g);
        }
        break;
    }
    if (!pre || json_object_set_new(doc, "pre_tokenizer", pre))
        return gguf_oom(g);
    return LH_OK;
}

/* tokenizer.ggml.merges: "a b" strings, both halves and their concatenation tokens, as
 * `tokenizers` requires of a BPE model; into model.merges as [a, b] pairs. */
static lh_status set_merges(gguf_src *g, json_t *model)
{
    const lh_gguf_kv *kv = lh_gguf_find(g->f, GK_MERGES);
    if (!kv)
        return lh_err_set(g->err, LH_E_CONFIG, "%s: no %s (model 'gpt2' needs its merges)",
                          g->path, GK_MERGES);
    if (kv->value.type != LH_GGUF_ARRAY || kv->value.elem_type != LH_GGUF_STRING) {
        char got[64];
        gguf_type_desc(&kv->value, got, sizeof got);
        return lh_err_set(g->err, LH_E_CONFIG, "%s: %s must be an array of strings, not %s",
                          g->path, GK_MERGES, got);
    }
    json_t *merges = json_array();
    if (json_object_set_new(model, "merges", merges))
        return gguf_oom(g);
    lh_strbuf ab = {0};
    lh_status st = LH_OK;
    for (uint64_t i = 0; i < kv->value.count && st == LH_OK; i++) {
        lh_gguf_value e;
        const char *s;
        size_t n;
        if ((st = lh_gguf_value_at(&kv->value, i, &e, g->err)) ||
            (st = lh_gguf_value_string(&e, &s, &n, g->err))) {
            lh_err_prefix(g->err, "%s: %s[%llu]", g->path, GK_MERGES, (unsigned long long)i);
            break;
        }
        int shown = (int)(n < 200 ? n : 200);
        const char *sp = memchr(s, ' ', n);
        size_t al = sp ? (size_t)(sp - s) : 0, bl = sp ? n - al - 1 : 0;
        if (!sp || !al || !bl || memchr(sp + 1, ' ', bl)) {
            st = lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%llu] '%.*s' is not two tokens "
                            "separated by one space", g->path, GK_MERGES, (unsigned long long)i,
                            shown, s);
            break;
        }
        int32_t a = strmap_get(&g->ids, s, al), b = strmap_get(&g->ids, sp + 1, bl);
        if (a < 0 || b < 0) {
            st = lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%llu] '%.*s': '%.*s' is not a token",
                            g->path, GK_MERGES, (unsigned long long)i, shown, s,
                            a < 0 ? (int)al : (int)bl, a < 0 ? s : sp + 1);
            break;
        }
        lh_strbuf_truncate(&ab, 0);
        lh_strbuf_add(&ab, s, al);
        lh_strbuf_add(&ab, sp + 1, bl);
        if (!lh_strbuf_ok(&ab)) {
            st = gguf_oom(g);
            break;
        }
        if (strmap_get(&g->ids, ab.s, ab.len) < 0) {
            st = lh_err_set(g->err, LH_E_CONFIG, "%s: %s[%llu] '%.*s': their merge '%.*s' is not "
                            "a token", g->path, GK_MERGES, (unsigned long long)i, shown, s,
                            (int)(ab.len < 200 ? ab.len : 200), ab.s);
            break;
        }
        json_t *pair = json_pack("[s%,s%]", g->tok[a], g->len[a], g->tok[b], g->len[b]);
        if (json_array_append_new(merges, pair))
            st = gguf_oom(g);
    }
    lh_strbuf_free(&ab);
    return st;
}

lh_status gguf_bpe_model(gguf_src *g, json_t *doc, json_t *model, bool *add_bos)
{
    lh_status st;
    json_t *dec = bytelevel(true, true);
    if ((st = set_pre(g, doc, model, add_bos)) || (st = set_merges(g, model)))
        goto fail;
    if (!dec || json_object_set_new(doc, "decoder", dec))
        return gguf_oom(g);
    return LH_OK;
fail:
    json_decref(dec);
    return st;
}
