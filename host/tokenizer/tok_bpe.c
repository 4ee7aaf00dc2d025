/* The model: BPE. Its vocab, merges and options from tokenizer.json, and the merge loop on one
 * pre-token (as tokenizers: the lowest-ranked adjacent pair first, leftmost on ties). */
#include "tokenizer/tokenizer_internal.h"

#include "core/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading ----------------------------------------------------------------------------------- */

/* The largest id the vocab and the added tokens give, checking each. */
static lh_status max_token_id(ctx *c, json_t *vocab, json_t *added, int64_t *max_id)
{
    const char *key;
    json_t *val;
    *max_id = -1;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= INT32_MAX) {
            char p[512];
            snprintf(p, sizeof p, "model.vocab[\"%.400s\"]", key);
            return bad_type(c, p, "a token id (non-negative integer)");
        }
        if (json_integer_value(val) > *max_id)
            *max_id = json_integer_value(val);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *id = json_object_get(json_array_get(added, i), "id");
        char p[64];
        snprintf(p, sizeof p, "added_tokens[%zu].id", i);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX)
            return bad_type(c, p, "a token id (non-negative integer)");
        if (json_integer_value(id) > *max_id)
            *max_id = json_integer_value(id);
    }
    if (*max_id > 50000000)
        return lh_err_set(c->err, LH_E_CONFIG, "%s: model.vocab: id %lld is implausibly large",
                          c->origin, (long long)*max_id);
    return LH_OK;
}

/* merges[i] ("a b" or ["a", "b"]) into the merge table, ranked i. */
static lh_status parse_merge(ctx *c, lh_tokenizer *t, json_t *mg, size_t i)
{
    const char *a, *b;
    size_t al, bl;
    char p[64];
    snprintf(p, sizeof p, "model.merges[%zu]", i);
    if (json_is_string(mg)) {
        const char *s = json_string_value(mg), *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: '%s' is not two tokens separated "
                              "by one space", c->origin, p, s);
        a = s;
        al = (size_t)(sp - s);
        b = sp + 1;
        bl = strlen(b);
    } else if (json_is_array(mg) && json_array_size(mg) == 2 &&
               json_is_string(json_array_get(mg, 0)) && json_is_string(json_array_get(mg, 1))) {
        a = json_string_value(json_array_get(mg, 0));
        al = json_string_length(json_array_get(mg, 0));
        b = json_string_value(json_array_get(mg, 1));
        bl = json_string_length(json_array_get(mg, 1));
    } else
        return bad_type(c, p, "\"a b\" or [\"a\", \"b\"]");
    int32_t ia = strmap_get(&t->vocab, a, al), ib = strmap_get(&t->vocab, b, bl);
    lh_strbuf ab = {0};
    lh_strbuf_add(&ab, a, al);
    lh_strbuf_add(&ab, b, bl);
    if (!lh_strbuf_ok(&ab)) {
        lh_strbuf_free(&ab);
        return oom(c);
    }
    int32_t im = strmap_get(&t->vocab, ab.s, ab.len);
    lh_strbuf_free(&ab);
    if (ia < 0 || ib < 0 || im < 0)
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: '%.*s', '%.*s' or their merge is not in "
                          "the vocab", c->origin, p, (int)al, a, (int)bl, b);
    /* a pair listed twice ranks where it was listed last, as `tokenizers` (which collects
     * the merges into a map) has it */
    pairmap_put(&t->merges, ia, ib, (int32_t)i, im);
    return LH_OK;
}

lh_status parse_model(ctx *c, lh_tokenizer *t, json_t *m, json_t *added)
{
    lh_status st;
    const char *type = NULL;
    if (!json_is_object(m))
        return bad_type(c, "model", "an object");
    if ((st = get_str(c, m, "type", "model", false, &type)))
        return st;
    if (type && strcmp(type, "BPE") != 0)
        return unsupported(c, "model", type, "model");
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab))
        return bad_type(c, "model.vocab", "an object of token -> id");
    if (!json_is_array(merges))
        return bad_type(c, "model.merges", "an array");
    json_t *dropout = json_object_get(m, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: model.dropout: BPE dropout is not supported",
                          c->origin);
    const char *csp, *eow, *unk;
    if ((st = get_str(c, m, "continuing_subword_prefix", "model", false, &csp)) ||
        (st = get_str(c, m, "end_of_word_suffix", "model", false, &eow)) ||
        (st = get_str(c, m, "unk_token", "model", false, &unk)) ||
        (st = get_bool(c, m, "byte_fallback", "model", false, &t->byte_fallback)) ||
        (st = get_bool(c, m, "fuse_unk", "model", false, &t->fuse_unk)) ||
        (st = get_bool(c, m, "ignore_merges", "model", false, &t->ignore_merges)))
        return st;
    if (csp && *csp)
        return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: model.continuing_subword_prefix: '%s' is "
                          "not supported (only null or empty)", c->origin, csp);
    if (eow && *eow)
        return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: model.end_of_word_suffix: '%s' is not "
                          "supported (only null or empty)", c->origin, eow);
    /* ids: the vocab's and the added tokens' */
    int64_t max_id;
    if ((st = max_token_id(c, vocab, added, &max_id)))
        return st;
    t->n_ids = (int32_t)(max_id + 1);
    t->tokens = calloc((size_t)t->n_ids + 1, sizeof *t->tokens);
    t->token_lens = calloc((size_t)t->n_ids + 1, sizeof *t->token_lens);
    t->special = calloc((size_t)t->n_ids + 1, sizeof *t->special);
    if (!t->tokens || !t->token_lens || !t->special ||
        !strmap_init(&t->vocab, json_object_size(vocab)) ||
        !strmap_init(&t->all_tokens, json_object_size(vocab) + json_array_size(added)) ||
        !pairmap_init(&t->merges, json_array_size(merges)))
        return oom(c);
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        char p[512];
        snprintf(p, sizeof p, "model.vocab[\"%.400s\"]", key);
        if ((st = set_token(c, t, id, key, strlen(key), p)))
            return st;
        strmap_put(&t->vocab, t->tokens[id], t->token_lens[id], id);
        strmap_put(&t->all_tokens, t->tokens[id], t->token_lens[id], id);
    }
    t->unk_id = -1;
    if (unk) {
        t->unk_id = strmap_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: model.unk_token: '%s' is not in the vocab",
                              c->origin, unk);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = strmap_get(&t->vocab, name, 6);
    }
    for (size_t i = 0; i < json_array_size(merges); i++)
        if ((st = parse_merge(c, t, json_array_get(merges, i), i)))
            return st;
    return LH_OK;
}

/* ---- the merge loop ---------------------------------------------------------------------------- */

typedef struct cand {
    int32_t rank, merged;
    size_t pos;
} cand;

static bool cand_less(const cand *a, const cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

typedef struct heap {
    cand *v;
    size_t n, cap;
} heap;

static bool heap_push(heap *h, cand c)
{
    if (h->n == h->cap) {
        bool failed = false;
        h->v = grow_array(h->v, &h->cap, sizeof *h->v, 64, &failed);
        if (failed)
            return false;
    }
    size_t i = h->n++;
    while (i > 0 && cand_less(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return true;
}

static cand heap_pop(heap *h)
{
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *mv = &last;
        if (l < h->n && cand_less(&h->v[l], mv)) {
            m = l;
            mv = &h->v[l];
        }
        if (r < h->n && cand_less(&h->v[r], mv))
            m = r;
        if (m == i)
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* Merges sym in place; false on allocation failure. */
static bool bpe_merge(const lh_tokenizer *t, ids *sym)
{
    size_t n = sym->n;
    if (n < 2)
        return true;
    size_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    bool *dead = calloc(n, sizeof *dead);
    heap h = {0};
    bool ok = next && prev && dead;
    const size_t NONE = (size_t)-1;
    for (size_t i = 0; ok && i < n; i++) {
        next[i] = i + 1 < n ? i + 1 : NONE;
        prev[i] = i ? i - 1 : NONE;
        int32_t r, m;
        if (i + 1 < n && pairmap_get(&t->merges, sym->v[i], sym->v[i + 1], &r, &m))
            ok = heap_push(&h, (cand){r, m, i});
    }
    while (ok && h.n) {
        cand c = heap_pop(&h);
        size_t nx = next[c.pos];
        int32_t r, m;
        if (dead[c.pos] || nx == NONE ||
            !pairmap_get(&t->merges, sym->v[c.pos], sym->v[nx], &r, &m) || r != c.rank ||
            m != c.merged)
            continue; /* stale */
        sym->v[c.pos] = c.merged;
        dead[nx] = true;
        next[c.pos] = next[nx];
        if (next[nx] != NONE)
            prev[next[nx]] = c.pos;
        if (prev[c.pos] != NONE &&
            pairmap_get(&t->merges, sym->v[prev[c.pos]], sym->v[c.pos], &r, &m))
            ok = heap_push(&h, (cand){r, m, prev[c.pos]});
        if (ok && next[c.pos] != NONE &&
            pairmap_get(&t->merges, sym->v[c.pos], sym->v[next[c.pos]], &r, &m))
            ok = heap_push(&h, (cand){r, m, c.pos});
    }
    if (ok) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (!dead[i])
                sym->v[k++] = sym->v[i];
        sym->n = k;
    }
    free(next);
    free(prev);
    free(dead);
    free(h.v);
    return ok;
}

bool bpe_word(const lh_tokenizer *t, const char *s, size_t n, ids *out)
{
    if (n == 0)
        return true;
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->vocab, s, n);
        if (id >= 0) {
            ids_push(out, id);
            return !out->oom;
        }
    }
    ids sym = {0};
    bool last_unk = false;
    for (size_t i = 0; i < n;) {
        size_t cl = lh_utf8_step(s + i, n - i);
        int32_t id = strmap_get(&t->vocab, s + i, cl);
        if (id >= 0) {
            ids_push(&sym, id);
            last_unk = false;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < cl; k++)
                    all = all && t->byte_ids[(unsigned char)s[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < cl; k++)
                        ids_push(&sym, t->byte_ids[(unsigned char)s[i + k]]);
                    done = true;
                    last_unk = false;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (!(t->fuse_unk && last_unk))
                    ids_push(&sym, t->unk_id);
                last_unk = true;
            }
        }
        i += cl;
    }
    /* repeatedly merge the lowest-ranked adjacent pair, leftmost on ties (as tokenizers: a
     * heap of candidate merges over a linked list of symbols; stale candidates are skipped) */
    bool ok = bpe_merge(t, &sym);
    for (size_t i = 0; ok && i < sym.n; i++)
        ids_push(out, sym.v[i]);
    ok = ok && !sym.oom && !out->oom;
    free(sym.v);
    return ok;
}
