/* The tokenizer's pipeline: encode (added tokens, then per segment normalizer, pre-tokenizer
 * and model, then the post-processor) and decode (the decoder over the token strings), and the
 * token table's queries. The components are the tok_*.c files (tokenizer_internal.h); the
 * API is tokenizer.h's. */
#include "tokenizer/tokenizer_internal.h"

#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>

int32_t lh_tokenizer_vocab_size(const lh_tokenizer *t) { return t->n_ids; }

int32_t lh_tokenizer_token_to_id(const lh_tokenizer *t, const char *token)
{
    return strmap_get(&t->all_tokens, token, strlen(token));
}

const char *lh_tokenizer_id_to_token(const lh_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids ? t->tokens[id] : NULL;
}

bool lh_tokenizer_is_special(const lh_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->special[id];
}

/* As transformers' stop-string matching tells the decoders apart: a ByteLevel decoder first,
 * then ByteFallback anywhere in the decoder, then ByteLevel anywhere. */
lh_byte_mode lh_tokenizer_byte_mode(const lh_tokenizer *t)
{
    if (!t || !t->dec)
        return LH_BYTE_MODE_TEXT;
    if (t->dec->kind == DEC_BYTELEVEL)
        return LH_BYTE_MODE_LEVEL;
    if (dec_has(t->dec, DEC_BYTEFALLBACK))
        return LH_BYTE_MODE_FALLBACK;
    if (dec_has(t->dec, DEC_BYTELEVEL))
        return LH_BYTE_MODE_LEVEL;
    return LH_BYTE_MODE_TEXT;
}

/* ---- encode ------------------------------------------------------------------------------------ */

/* Normalizes, pre-tokenizes and runs the model on a segment between added tokens. */
static bool encode_segment(const lh_tokenizer *t, const char *s, size_t n, bool orig0, ids *out)
{
    lh_strbuf b = {0};
    lh_strbuf_add(&b, s, n);
    if (!lh_strbuf_ok(&b) || (t->norm && !norm_apply(t->norm, &b))) {
        lh_strbuf_free(&b);
        return false;
    }
    pieces ps = {0};
    if (b.len)
        pieces_push(&ps, b.s, b.len, orig0);
    lh_strbuf_free(&b);
    bool ok = !ps.oom && (!t->pre || pretok_apply(t->pre, &ps));
    for (size_t i = 0; ok && i < ps.n; i++)
        ok = bpe_word(t, ps.v[i].s, ps.v[i].len, out);
    pieces_free(&ps);
    return ok;
}

lh_status lh_tokenizer_encode(const lh_tokenizer *t, const char *text, size_t len,
                              bool add_special_tokens, int32_t **out_ids, size_t *n_ids, lh_err *err)
{
    *out_ids = NULL;
    *n_ids = 0;
    size_t bad = lh_utf8_check(text, len);
    if (bad != len)
        return lh_err_set(err, LH_E_USAGE, "text to encode is not valid UTF-8 (byte %zu)", bad);
    ids body = {0};
    bool ok = true;
    size_t seg = 0;
    for (size_t i = 0; ok && i < len;) {
        const added_token *best = added_match(t, text, len, i);
        if (!best) {
            i++;
            continue;
        }
        if (i > seg)
            ok = encode_segment(t, text + seg, i - seg, seg == 0, &body);
        ids_push(&body, best->id);
        i += best->len;
        seg = i;
    }
    if (ok && seg < len)
        ok = encode_segment(t, text + seg, len - seg, seg == 0, &body);
    ok = ok && !body.oom;
    if (ok && add_special_tokens)
        ok = post_apply(t, &body);
    if (!ok) {
        free(body.v);
        return lh_err_set(err, LH_E_NOMEM, "encoding %zu bytes failed: out of memory (or a "
                          "regex match exceeded PCRE2's memory limit)", len);
    }
    *out_ids = body.v;
    *n_ids = body.n;
    return LH_OK;
}

/* ---- decode ------------------------------------------------------------------------------------ */

lh_status lh_tokenizer_decode(const lh_tokenizer *t, const int32_t *id, size_t n,
                              bool skip_special_tokens, char **text, size_t *len, lh_err *err)
{
    *text = NULL;
    *len = 0;
    /* like `tokenizers`, ids without a token are skipped: a model's vocabulary may be padded
     * beyond the tokenizer's (Qwen2), and sampling can pick such an id; negative ids cannot
     * exist and are refused */
    for (size_t i = 0; i < n; i++)
        if (id[i] < 0)
            return lh_err_set(err, LH_E_USAGE, "token id %d (position %zu) is negative",
                              (int)id[i], i);
    strs s = {calloc(n + 1, sizeof(lh_strbuf)), 0};
    if (!s.v)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        if (id[i] >= t->n_ids || !t->tokens[id[i]] || (skip_special_tokens && t->special[id[i]]))
            continue;
        lh_strbuf *b = &s.v[s.n++];
        lh_strbuf_add(b, t->tokens[id[i]], t->token_lens[id[i]]);
        ok = lh_strbuf_ok(b);
    }
    ok = ok && (!t->dec || dec_apply(t->dec, &s));
    lh_strbuf all = {0};
    lh_strbuf_add(&all, "", 0);
    for (size_t i = 0; ok && i < s.n; i++) {
        if (i && !t->dec)
            lh_strbuf_addc(&all, ' ');
        lh_strbuf_add(&all, s.v[i].s ? s.v[i].s : "", s.v[i].len);
    }
    strs_free(&s);
    if (!ok || !lh_strbuf_ok(&all)) {
        lh_strbuf_free(&all);
        return lh_err_set(err, LH_E_NOMEM, "out of memory while decoding %zu ids", n);
    }
    *len = all.len;
    *text = lh_strbuf_take(&all);
    return LH_OK;
}
