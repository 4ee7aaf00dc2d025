/* Loading: tokenizer.json -> lh_tokenizer (the model, the added tokens, then normalizer,
 * pre-tokenizer, post-processor and decoder), and freeing it. A GGUF file's tokenizer comes here
 * too, as the document tok_gguf.c builds. */
#include "tokenizer/tokenizer_internal.h"

#include "core/fileio.h"

#include <stdlib.h>
#include <string.h>

#define TOK_MAX_FILE_BYTES ((size_t)1 << 30)

void lh_tokenizer_free(lh_tokenizer *t)
{
    if (!t)
        return;
    for (int32_t i = 0; i < t->n_ids; i++)
        free(t->tokens[i]);
    free(t->tokens);
    free(t->token_lens);
    free(t->special);
    strmap_free(&t->vocab);
    strmap_free(&t->all_tokens);
    pairmap_free(&t->merges);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    if (t->norm)
        norm_free(t->norm);
    free(t->norm);
    if (t->pre)
        pretok_free(t->pre);
    free(t->pre);
    if (t->dec)
        dec_free(t->dec);
    free(t->dec);
    for (size_t i = 0; i < t->n_tmpl; i++)
        free(t->tmpl[i].ids);
    free(t->tmpl);
    free(t);
}

lh_status set_token(ctx *c, lh_tokenizer *t, int32_t id, const char *s, size_t n, const char *path)
{
    if (t->tokens[id]) {
        if (t->token_lens[id] == n && memcmp(t->tokens[id], s, n) == 0)
            return LH_OK;
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: id %d is already token '%s'", c->origin,
                          path, (int)id, t->tokens[id]);
    }
    t->tokens[id] = malloc(n + 1);
    if (!t->tokens[id])
        return oom(c);
    memcpy(t->tokens[id], s, n);
    t->tokens[id][n] = 0;
    t->token_lens[id] = n;
    return LH_OK;
}

/* root[key] when present and not null; else NULL. */
static json_t *component(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

static lh_status load_root(ctx *c, lh_tokenizer *t, json_t *root)
{
    lh_status st;
    if (!json_is_object(root))
        return bad_type(c, "(top level)", "an object");
    static const char *const nulls[] = {"truncation", "padding"};
    for (size_t i = 0; i < 2; i++)
        if (component(root, nulls[i]))
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s: only null is supported", c->origin,
                              nulls[i]);
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return bad_type(c, "added_tokens", "an array");
    json_t *jn = component(root, "normalizer"), *jp = component(root, "pre_tokenizer"),
           *jpp = component(root, "post_processor"), *jd = component(root, "decoder");
    if ((st = parse_model(c, t, json_object_get(root, "model"), added)) ||
        (st = parse_added(c, t, added, jn != NULL)))
        return st;
    if (jn && (!(t->norm = calloc(1, sizeof *t->norm)) ||
               (st = parse_norm(c, jn, "normalizer", t->norm))))
        return t->norm ? st : oom(c);
    if (jp && (!(t->pre = calloc(1, sizeof *t->pre)) ||
               (st = parse_pretok(c, jp, "pre_tokenizer", t->pre))))
        return t->pre ? st : oom(c);
    if (jpp && (st = parse_post(c, jpp, "post_processor", t)))
        return st;
    if (jd && (!(t->dec = calloc(1, sizeof *t->dec)) || (st = parse_dec(c, jd, "decoder", t->dec))))
        return t->dec ? st : oom(c);
    return LH_OK;
}

lh_status tokenizer_from_doc(json_t *root, const char *origin, lh_tokenizer **out, lh_err *err)
{
    *out = NULL;
    bytelevel_init();
    lh_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return lh_err_set(err, LH_E_NOMEM, "out of memory loading %s", origin);
    ctx c = {origin, err};
    lh_status st = load_root(&c, t, root);
    if (st) {
        lh_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LH_OK;
}

lh_status lh_tokenizer_load_json(const char *text, size_t len, const char *origin,
                                 lh_tokenizer **out, lh_err *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return lh_err_set(err, LH_E_CONFIG, "%s:%d:%d: %s", origin, je.line, je.column, je.text);
    lh_status st = tokenizer_from_doc(root, origin, out, err);
    json_decref(root);
    return st;
}

lh_status lh_tokenizer_load(const char *path, lh_tokenizer **out, lh_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    lh_status st = lh_read_text_file(path, "tokenizer", TOK_MAX_FILE_BYTES, LH_E_CONFIG, &text,
                                     &len, err);
    if (st)
        return st;
    st = lh_tokenizer_load_json(text, len, path, out, err);
    free(text);
    return st;
}
