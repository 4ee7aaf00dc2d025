/* The server's response bodies in OpenAI's formats: completions and chat completions, whole
 * or as stream chunks, with usage and log-probabilities. Every function returns a new jansson
 * reference (the caller's; json_decref), or NULL when out of memory (or, for text, when it
 * is not valid UTF-8 -- which the decoder never produces). */
#ifndef LH_SRV_RESPONSE_H
#define LH_SRV_RESPONSE_H

#include "srv_core.h"
#include "srv_request.h"

#include <jansson.h>

typedef struct lh_srv_usage {
    int64_t prompt, completion, cached;
} lh_srv_usage;

/* What every object of one response shares. */
typedef struct lh_srv_resp_id {
    lh_srv_kind kind;
    char id[40];      /* "cmpl-..." or "chatcmpl-..." */
    int64_t created;  /* Unix seconds */
    const char *model;
} lh_srv_resp_id;

/* The log-probabilities of tokens t[0..n) in the endpoint's format: completions' {tokens,
 * token_logprobs, top_logprobs, text_offset} (offsets[i]: the code-point offset of token i's
 * text in the response text), chat's {content: [{token, logprob, bytes, top_logprobs}]}.
 * Token strings are each id decoded alone with special tokens kept. */
json_t *lh_srv_logprobs_json(lh_srv_kind kind, const lh_tokenizer *tok, const lh_srv_token *t,
                             const int64_t *offsets, size_t n);
json_t *lh_srv_usage_json(const lh_srv_usage *u);
/* A whole (non-streamed) response; logprobs (stolen; may be NULL) and usage (stolen). */
json_t *lh_srv_completion_json(const lh_srv_resp_id *r, const char *text, size_t len,
                               const char *finish_reason, json_t *logprobs, json_t *usage);
/* One stream chunk: the text delta (chat: role_delta true writes the first chunk's
 * {"role": "assistant", "content": ""}), logprobs (stolen; may be NULL), finish_reason NULL
 * until the last; with_usage_null writes "usage": null (stream_options.include_usage). */
json_t *lh_srv_chunk_json(const lh_srv_resp_id *r, const char *text, size_t len,
                          bool role_delta, const char *finish_reason, json_t *logprobs,
                          bool with_usage_null);
/* The closing usage chunk of a stream that asked for it: "choices": [] and usage (stolen). */
json_t *lh_srv_usage_chunk_json(const lh_srv_resp_id *r, json_t *usage);

#endif
