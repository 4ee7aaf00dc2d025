/* The server's request bodies: POST /v1/completions and /v1/chat/completions JSON, parsed and
 * checked into one plain struct. Pure (no engine, no tokenizer), so that every malformed
 * body is refused here with its field named, before anything runs. */
#ifndef LH_SRV_REQUEST_H
#define LH_SRV_REQUEST_H

#include "srv_error.h"

#include "llmhost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lh_srv_kind { LH_SRV_COMPLETION = 0, LH_SRV_CHAT = 1 } lh_srv_kind;

/* The most stop strings and stop token ids one request may give. */
#define LH_SRV_MAX_STOP 16
#define LH_SRV_MAX_STOP_IDS 64

typedef struct lh_srv_req {
    lh_srv_kind kind;
    char *model;
    /* completions: the prompt as text (encoded with special tokens) or as ids */
    char *prompt_text;
    size_t prompt_text_len;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    /* chat: the messages (role and content strings owned here) */
    lh_chat_message *messages;
    size_t n_messages;
    /* -1: not given (the endpoint's default) */
    int64_t max_tokens;
    /* sampling; *_given when the field was there and not null */
    double temperature, top_p, min_p, repetition_penalty;
    int64_t top_k;
    uint64_t seed;
    bool temperature_given, top_p_given, min_p_given, repetition_penalty_given, top_k_given,
         seed_given;
    char *stop[LH_SRV_MAX_STOP];
    size_t n_stop;
    int32_t stop_ids[LH_SRV_MAX_STOP_IDS];
    size_t n_stop_ids;
    bool stop_ids_given, ignore_eos;
    bool stream, include_usage;
    /* log-probabilities: of each token, and of top_logprobs alternatives (completions'
     * integer logprobs N is logprobs true, top_logprobs N) */
    bool logprobs;
    int top_logprobs;
} lh_srv_req;

/* Parses body[0..len) as a request of `kind` into *out (zeroed first; free with
 * lh_srv_req_free, also after an error). Returns 0, or -1 with *e filled: 400 with code
 * invalid_json (with line and column), invalid_type, unknown_field (with a did-you-mean),
 * missing_field, invalid_value (out of range) or unsupported_value (a valid OpenAI value this
 * server does not implement: n > 1, echo, best_of, penalties, logit_bias, tools, ...), the
 * field named in param. */
int lh_srv_req_parse(lh_srv_kind kind, const char *body, size_t len, lh_srv_req *out,
                     lh_srv_error *e);
void lh_srv_req_free(lh_srv_req *r);

#endif
