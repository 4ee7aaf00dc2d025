#include "srv_response.h"

#include <stdlib.h>
#include <string.h>

/* An id decoded alone, special tokens kept (as vLLM shows a token); "" when it has none. */
static json_t *token_string(const lh_tokenizer *tok, int32_t id, json_t **bytes)
{
    char *text = NULL;
    size_t len = 0;
    lh_err err = {0};
    if (lh_tokenizer_decode(tok, &id, 1, false, &text, &len, &err) != LH_OK)
        len = 0;
    json_t *s = json_stringn(text ? text : "", len);
    free(text);
    if (bytes) { /* the token's own bytes: a piece of a character stays that piece */
        char *raw = NULL;
        size_t rl = 0;
        *bytes = json_array();
        if (lh_tokenizer_token_bytes(tok, id, &raw, &rl, &err) != LH_OK)
            rl = 0;
        for (size_t i = 0; *bytes && i < rl; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)raw[i]));
        free(raw);
    }
    return s;
}

static json_t *chat_logprobs(const lh_tokenizer *tok, const lh_srv_token *t, size_t n)
{
    json_t *content = json_array();
    for (size_t i = 0; content && i < n; i++) {
        json_t *top = json_array();
        for (int32_t k = 0; top && k < t[i].n_top; k++) {
            json_t *b = NULL;
            json_t *s = token_string(tok, t[i].top_ids[k], &b);
            json_array_append_new(top, json_pack("{s:o?,s:f,s:o?}", "token", s, "logprob",
                                                 (double)t[i].top_logprobs[k], "bytes", b));
        }
        json_t *b = NULL;
        json_t *s = token_string(tok, t[i].id, &b);
        json_array_append_new(content, json_pack("{s:o?,s:f,s:o?,s:o?}", "token", s, "logprob",
                                                 (double)t[i].logprob, "bytes", b,
                                                 "top_logprobs", top));
    }
    return json_pack("{s:o?}", "content", content);
}

static json_t *completion_logprobs(const lh_tokenizer *tok, const lh_srv_token *t,
                                   const int64_t *offsets, size_t n)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    for (size_t i = 0; tokens && lps && tops && offs && i < n; i++) {
        json_array_append_new(tokens, token_string(tok, t[i].id, NULL));
        json_array_append_new(lps, json_real((double)t[i].logprob));
        /* a map from token string to logprob, most likely first (OpenAI's shape: two ids
         * that read the same share one key, the more likely kept) */
        json_t *top = json_object();
        for (int32_t k = 0; top && k < t[i].n_top; k++) {
            json_t *s = token_string(tok, t[i].top_ids[k], NULL);
            if (s && !json_object_get(top, json_string_value(s)))
                json_object_set_new(top, json_string_value(s),
                                    json_real((double)t[i].top_logprobs[k]));
            json_decref(s);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(offsets[i]));
    }
    return json_pack("{s:o?,s:o?,s:o?,s:o?}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

json_t *lh_srv_logprobs_json(lh_srv_kind kind, const lh_tokenizer *tok, const lh_srv_token *t,
                             const int64_t *offsets, size_t n)
{
    return kind == LH_SRV_CHAT ? chat_logprobs(tok, t, n)
                               : completion_logprobs(tok, t, offsets, n);
}

json_t *lh_srv_usage_json(const lh_srv_usage *u)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt,
                     "completion_tokens", (json_int_t)u->completion, "total_tokens",
                     (json_int_t)(u->prompt + u->completion), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->cached);
}

static json_t *head(const lh_srv_resp_id *r, const char *object)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object", object, "created",
                     (json_int_t)r->created, "model", r->model);
}

json_t *lh_srv_completion_json(const lh_srv_resp_id *r, const char *text, size_t len,
                               const char *finish_reason, json_t *logprobs, json_t *usage)
{
    const bool chat = r->kind == LH_SRV_CHAT;
    json_t *o = head(r, chat ? "chat.completion" : "text_completion");
    json_t *choice = chat ? json_pack("{s:i,s:{s:s,s:s%},s:o,s:s}", "index", 0, "message",
                                      "role", "assistant", "content", text, len, "logprobs",
                                      logprobs ? logprobs : json_null(), "finish_reason",
                                      finish_reason)
                          : json_pack("{s:i,s:s%,s:o,s:s}", "index", 0, "text", text, len,
                                      "logprobs", logprobs ? logprobs : json_null(),
                                      "finish_reason", finish_reason);
    if (!o || !choice || json_object_set_new(o, "choices", json_pack("[o]", choice)) != 0 ||
        json_object_set_new(o, "usage", usage) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *lh_srv_chunk_json(const lh_srv_resp_id *r, const char *text, size_t len,
                          bool role_delta, const char *finish_reason, json_t *logprobs,
                          bool with_usage_null)
{
    const bool chat = r->kind == LH_SRV_CHAT;
    json_t *o = head(r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i,s:o,s:o}", "index", 0, "logprobs",
                               logprobs ? logprobs : json_null(), "finish_reason",
                               finish_reason ? json_string(finish_reason) : json_null());
    if (choice && chat) {
        json_t *delta = role_delta ? json_pack("{s:s,s:s}", "role", "assistant", "content", "")
                        : len || !finish_reason ? json_pack("{s:s%}", "content", text, len)
                                                : json_object();
        json_object_set_new(choice, "delta", delta);
    } else if (choice) {
        json_object_set_new(choice, "text", json_stringn(text ? text : "", len));
    }
    if (!o || !choice || json_object_set_new(o, "choices", json_pack("[o]", choice)) != 0 ||
        (with_usage_null && json_object_set_new(o, "usage", json_null()) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *lh_srv_usage_chunk_json(const lh_srv_resp_id *r, json_t *usage)
{
    json_t *o = head(r, r->kind == LH_SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    if (!o || json_object_set_new(o, "choices", json_array()) != 0 ||
        json_object_set_new(o, "usage", usage) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}
