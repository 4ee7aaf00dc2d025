/* Added tokens: special and normal, matched (leftmost, longest) on the raw text before the
 * normalizer and the model. */
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lh_status parse_added(ctx *c, lh_tokenizer *t, json_t *added, bool has_normalizer)
{
    lh_status st;
    t->added = calloc(json_array_size(added) + 1, sizeof *t->added);
    if (!t->added)
        return oom(c);
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        char p[64];
        snprintf(p, sizeof p, "added_tokens[%zu]", i);
        if (!json_is_object(a))
            return bad_type(c, p, "an object");
        const char *content;
        bool special, lstrip, rstrip, single_word, normalized;
        if ((st = get_str(c, a, "content", p, true, &content)) ||
            (st = get_bool(c, a, "special", p, false, &special)) ||
            (st = get_bool(c, a, "lstrip", p, false, &lstrip)) ||
            (st = get_bool(c, a, "rstrip", p, false, &rstrip)) ||
            (st = get_bool(c, a, "single_word", p, false, &single_word)) ||
            (st = get_bool(c, a, "normalized", p, !special, &normalized)))
            return st;
        const char *flag = lstrip ? "lstrip" : rstrip ? "rstrip" : single_word ? "single_word" : NULL;
        if (flag)
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s.%s: added tokens with %s true are "
                              "not supported", c->origin, p, flag, flag);
        if (normalized && has_normalizer)
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s.normalized: normalized added tokens "
                              "with a normalizer are not supported", c->origin, p);
        if (!*content)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.content: empty", c->origin, p);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        if ((st = set_token(c, t, id, content, strlen(content), p)))
            return st;
        t->special[id] = special;
        strmap_put(&t->all_tokens, t->tokens[id], t->token_lens[id], id);
        added_token *at = &t->added[t->n_added++];
        at->content = strdup(content);
        if (!at->content)
            return oom(c);
        at->len = strlen(content);
        at->id = id;
        at->special = special;
    }
    return LH_OK;
}

const added_token *added_match(const lh_tokenizer *t, const char *text, size_t len, size_t i)
{
    const added_token *best = NULL;
    for (size_t k = 0; k < t->n_added; k++) {
        const added_token *a = &t->added[k];
        if (a->len <= len - i && a->content[0] == text[i] && memcmp(a->content, text + i, a->len) == 0 &&
            (!best || a->len > best->len))
            best = a;
    }
    return best;
}
