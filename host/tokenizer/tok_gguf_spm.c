/* tokenizer.ggml.model "llama" (SentencePiece BPE, as Llama 2, Mistral and Gemma files carry
 * it): the tokenizer.json transformers' LlamaConverter writes for such a model.
 *
 * The file has no merges, only a score per piece. transformers derives the merges from the
 * scores (SentencePieceExtractor with the pieces' scores, generate_merges): for every piece in
 * id order, every split into two pieces that are both in the vocabulary (at character
 * boundaries), those of one piece ordered by the left piece's id, then the right one's; then the
 * whole list sorted by the piece's score, the left piece's length and the right piece's length
 * (in characters), all descending, with Python's stable sort keeping the order above on ties.
 * This file does the same, so the ranks are the ones Hugging Face's tokenizer.json has.
 *
 * The rest: byte_fallback when the vocabulary has byte tokens (type BYTE, "<0xNN>"), the unknown
 * token from tokenizer.ggml.unknown_token_id (fuse_unk, as every SentencePiece conversion has),
 * the normalizer Prepend("▁") (when tokenizer.ggml.add_space_prefix, default true) and
 * Replace(" ", "▁"), no pre-tokenizer, and the decoder Replace("▁", " "), ByteFallback, Fuse
 * and, with the prefix, Strip(" ", 1, 0). Normalization llama.cpp would do that transformers' Llama
 * conversion does not (tokenizer.ggml.remove_extra_whitespaces, a precompiled charsmap) is
 * refused as unsupported rather than silently skipped. */
#include "tokenizer/tok_gguf.h"

#include "core/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPIECE "\xE2\x96\x81" /* ▁ */

typedef struct cand {
    double score;          /* the piece's */
    int32_t l, r;
    uint32_t len_l, len_r; /* characters */
    size_t seq;            /* position after the per-piece sort (the stable sort's tie-break) */
} cand;

static int by_ids(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->l != b->l)
        return a->l < b->l ? -1 : 1;
    return (a->r > b->r) - (a->r < b->r);
}

static int by_rank(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    if (a->len_l != b->len_l)
        return a->len_l > b->len_l ? -1 : 1;
    if (a->len_r != b->len_r)
        return a->len_r > b->len_r ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

/* The splits of every piece into two tokens, in the order described above. */
static lh_status derive(gguf_src *g, cand **out, size_t *count)
{
    size_t cap = 0, n = 0;
    cand *v = NULL;
    bool failed = false;
    for (size_t p = 0; p < g->n; p++) {
        const char *s = g->tok[p];
        size_t len = g->len[p], start = n;
        uint32_t chars = (uint32_t)lh_utf8_count(s, len), left = 0;
        size_t pos = lh_utf8_step(s, len);
        for (; pos < len; pos += lh_utf8_step(s + pos, len - pos)) {
            left++;
            int32_t l = strmap_get(&g->ids, s, pos), r = strmap_get(&g->ids, s + pos, len - pos);
            if (l < 0 || r < 0)
                continue;
            if (n == cap && (v = grow_array(v, &cap, sizeof *v, 1024, &failed), failed)) {
                free(v);
                return gguf_oom(g);
            }
            v[n++] = (cand){g->score[p], l, r, left, chars - left, 0};
        }
        if (n - start > 1)
            qsort(v + start, n - start, sizeof *v, by_ids);
    }
    for (size_t i = 0; i < n; i++)
        v[i].seq = i;
    if (n > 1)
        qsort(v, n, sizeof *v, by_rank);
    *out = v;
    *count = n;
    return LH_OK;
}

static lh_status set_merges(gguf_src *g, json_t *model)
{
    cand *v = NULL;
    size_t n = 0;
    lh_status st = derive(g, &v, &n);
    if (st)
        return st;
    json_t *merges = json_array();
    if (json_object_set_new(model, "merges", merges))
        st = gguf_oom(g);
    for (size_t i = 0; i < n && st == LH_OK; i++)
        if (json_array_append_new(merges, json_pack("[s%,s%]", g->tok[v[i].l], g->len[v[i].l],
                                                     g->tok[v[i].r], g->len[v[i].r])))
            st = gguf_oom(g);
    free(v);
    return st;
}

/* What llama.cpp would normalize and transformers' Llama conversion would not. */
static lh_status refuse_normalization(gguf_src *g)
{
    bool remove_ws;
    lh_status st = gguf_opt_bool(g, GK_REMOVE_WS, false, &remove_ws);
    if (st)
        return st;
    if (remove_ws)
        return lh_err_set(g->err, LH_E_UNSUPPORTED, "%s: %s = true is not supported for model "
                          "'llama' (Hugging Face's Llama tokenizer keeps every space)", g->path,
                          GK_REMOVE_WS);
    const lh_gguf_kv *cm = lh_gguf_find(g->f, GK_CHARSMAP);
    if (cm && cm->value.count > 0)
        return lh_err_set(g->err, LH_E_UNSUPPORTED, "%s: %s is not supported for model 'llama' "
                          "(a SentencePiece normalization table)", g->path, GK_CHARSMAP);
    return LH_OK;
}

lh_status gguf_spm_model(gguf_src *g, json_t *doc, json_t *model)
{
    lh_status st;
    bool prefix, bytes = false;
    int32_t unk;
    if (!g->score)
        return lh_err_set(g->err, LH_E_CONFIG, "%s: no %s (model 'llama' derives its merges from "
                          "the scores)", g->path, GK_SCORES);
    if ((st = refuse_normalization(g)) || (st = gguf_opt_bool(g, GK_ADD_PREFIX, true, &prefix)) ||
        (st = gguf_special_id(g, GK_UNK, &unk)) || (st = set_merges(g, model)))
        return st;
    for (size_t i = 0; i < g->n && !bytes; i++)
        bytes = g->type[i] == TT_BYTE;
    json_t *unk_tok = unk >= 0 ? json_stringn_nocheck(g->tok[unk], g->len[unk]) : json_null();
    json_t *norm = prefix ? json_pack("{s:s,s:[{s:s,s:s},{s:s,s:{s:s},s:s}]}", "type", "Sequence",
                                      "normalizers", "type", "Prepend", "prepend", SPIECE, "type",
                                      "Replace", "pattern", "String", " ", "content", SPIECE)
                          : json_pack("{s:s,s:{s:s},s:s}", "type", "Replace", "pattern", "String",
                                      " ", "content", SPIECE);
    json_t *decs = json_pack("[{s:s,s:{s:s},s:s},{s:s},{s:s}]", "type", "Replace", "pattern",
                             "String", SPIECE, "content", " ", "type", "ByteFallback", "type",
                             "Fuse");
    if (prefix && decs)
        json_array_append_new(decs, json_pack("{s:s,s:s,s:i,s:i}", "type", "Strip", "content", " ",
                                              "start", 1, "stop", 0));
    json_t *dec = json_pack("{s:s,s:o}", "type", "Sequence", "decoders", decs);
    if (json_object_set_new(model, "unk_token", unk_tok) ||
        json_object_set_new(model, "fuse_unk", json_true()) ||
        json_object_set_new(model, "byte_fallback", json_boolean(bytes)) ||
        json_object_set_new(doc, "normalizer", norm) || json_object_set_new(doc, "decoder", dec) ||
        (prefix && json_array_size(decs) != 4))
        return gguf_oom(g);
    return LH_OK;
}
