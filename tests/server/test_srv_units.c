/* The server's pure parts: request bodies (every class of bad input refused with its status,
 * code and field), the error object, and the response text (stop strings cut, the tail that
 * may begin one held back, the stream equal to the whole). */
#include "server/srv_error.h"
#include "server/srv_request.h"
#include "server/srv_text.h"

#include "llmhost.h"
#include "runner.h"

#include <CUnit/Basic.h>
#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(lh_srv_kind kind, const char *body, lh_srv_req *r, lh_srv_error *e)
{
    memset(e, 0, sizeof *e);
    return lh_srv_req_parse(kind, body, strlen(body), r, e);
}

/* body is refused with status, code and param (NULL: none), and the message contains
 * needle. */
static void refused(lh_srv_kind kind, const char *body, int status, const char *code,
                    const char *param, const char *needle)
{
    lh_srv_req r;
    lh_srv_error e;
    const int rc = parse(kind, body, &r, &e);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_EQUAL(e.status, status);
    CU_ASSERT_STRING_EQUAL(e.code ? e.code : "(null)", code);
    CU_ASSERT_STRING_EQUAL(e.param, param ? param : "");
    if (!strstr(e.message, needle) || rc != -1 || e.status != status)
        fprintf(stderr, "\n  %s\n  -> %d %s [%s] %s (wanted '%s')\n", body, e.status,
                e.code ? e.code : "(null)", e.param, e.message, needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.message, needle));
    lh_srv_req_free(&r);
}

static void test_valid_bodies(void)
{
    lh_srv_req r;
    lh_srv_error e;
    CU_ASSERT_EQUAL(parse(LH_SRV_COMPLETION,
                          "{\"model\": \"m\", \"prompt\": \"hi\", \"max_tokens\": 5, "
                          "\"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": -1, \"seed\": 7, "
                          "\"stop\": [\"a\", \"bc\"], \"stream\": true, \"stream_options\": "
                          "{\"include_usage\": true}, \"logprobs\": 3, \"n\": 1, \"user\": "
                          "\"u\", \"echo\": false, \"frequency_penalty\": 0, "
                          "\"logit_bias\": {}, \"stop_token_ids\": [2, 3], \"ignore_eos\": "
                          "true}", &r, &e), 0);
    CU_ASSERT_STRING_EQUAL(r.model, "m");
    CU_ASSERT_STRING_EQUAL(r.prompt_text, "hi");
    CU_ASSERT_EQUAL(r.max_tokens, 5);
    CU_ASSERT(r.temperature_given && r.temperature == 0.5);
    CU_ASSERT(r.top_k_given && r.top_k == 0); /* -1 is vLLM's "off" */
    CU_ASSERT(r.seed_given && r.seed == 7);
    CU_ASSERT_EQUAL(r.n_stop, 2);
    CU_ASSERT_STRING_EQUAL(r.stop[1], "bc");
    CU_ASSERT(r.stream && r.include_usage && r.logprobs && r.top_logprobs == 3);
    CU_ASSERT(r.stop_ids_given && r.n_stop_ids == 2 && r.stop_ids[1] == 3 && r.ignore_eos);
    lh_srv_req_free(&r);
    /* prompts: ids, one string in an array, one id array in an array; null = not given */
    CU_ASSERT_EQUAL(parse(LH_SRV_COMPLETION, "{\"model\": \"m\", \"prompt\": [1, 2, 3], "
                          "\"max_tokens\": null, \"stop\": null}", &r, &e), 0);
    CU_ASSERT(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.max_tokens == -1 && !r.n_stop);
    lh_srv_req_free(&r);
    CU_ASSERT_EQUAL(parse(LH_SRV_COMPLETION, "{\"model\": \"m\", \"prompt\": [\"x\"]}", &r, &e),
                    0);
    CU_ASSERT_STRING_EQUAL(r.prompt_text, "x");
    lh_srv_req_free(&r);
    CU_ASSERT_EQUAL(parse(LH_SRV_COMPLETION, "{\"model\": \"m\", \"prompt\": [[4, 5]]}", &r, &e),
                    0);
    CU_ASSERT(r.n_prompt_ids == 2 && r.prompt_ids[0] == 4);
    lh_srv_req_free(&r);
    /* chat: string content, text parts joined by newlines, logprobs with alternatives */
    CU_ASSERT_EQUAL(parse(LH_SRV_CHAT,
                          "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": "
                          "\"be brief\"}, {\"role\": \"user\", \"content\": [{\"type\": "
                          "\"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}], "
                          "\"max_completion_tokens\": 9, \"logprobs\": true, \"top_logprobs\": "
                          "2, \"response_format\": {\"type\": \"text\"}, \"tools\": [], "
                          "\"tool_choice\": \"none\"}", &r, &e), 0);
    CU_ASSERT_EQUAL(r.n_messages, 2);
    CU_ASSERT_STRING_EQUAL(r.messages[0].role, "system");
    CU_ASSERT_STRING_EQUAL(r.messages[1].content, "a\nb");
    CU_ASSERT(r.max_tokens == 9 && r.logprobs && r.top_logprobs == 2);
    lh_srv_req_free(&r);
}

static void test_bad_bodies(void)
{
    const lh_srv_kind C = LH_SRV_COMPLETION, H = LH_SRV_CHAT;
    /* malformed JSON, with where */
    refused(C, "{\"model\": ", 400, "invalid_json", NULL, "line 1, column");
    refused(C, "", 400, "invalid_json", NULL, "not valid JSON");
    refused(C, "{\"model\": \"m\", \"model\": \"n\", \"prompt\": \"x\"}", 400, "invalid_json",
            NULL, "duplicate");
    refused(C, "[1, 2]", 400, "invalid_type", NULL, "must be a JSON object, not an array");
    /* unknown fields, with a did-you-mean where one is close */
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"max_tokns\": 3}", 400, "unknown_field",
            "max_tokns", "did you mean 'max_tokens'?");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"zzzzzzzz\": 3}", 400, "unknown_field",
            "zzzzzzzz", "unknown field 'zzzzzzzz'");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"messages\": []}", 400, "unknown_field",
            "messages", "unknown field");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\", "
            "\"nmae\": \"a\"}]}", 400, "unknown_field", "messages[0].nmae", "unknown field");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"stream\": true, \"stream_options\": "
            "{\"include_usge\": true}}", 400, "unknown_field", "stream_options.include_usge",
            "did you mean 'include_usage'?");
    /* missing and mistyped */
    refused(C, "{\"prompt\": \"x\"}", 400, "missing_field", "model", "'model' is required");
    refused(C, "{\"model\": \"m\"}", 400, "missing_field", "prompt", "'prompt' is required");
    refused(H, "{\"model\": \"m\"}", 400, "missing_field", "messages", "required");
    refused(C, "{\"model\": 3, \"prompt\": \"x\"}", 400, "invalid_type", "model",
            "must be a string, not an integer");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"max_tokens\": 2.5}", 400,
            "invalid_type", "max_tokens", "an integer");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"temperature\": \"hot\"}", 400,
            "invalid_type", "temperature", "a number");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"stream\": 1}", 400, "invalid_type",
            "stream", "a boolean");
    refused(C, "{\"model\": \"m\", \"prompt\": {}}", 400, "invalid_type", "prompt",
            "an array of token ids");
    refused(C, "{\"model\": \"m\", \"prompt\": [1, \"a\"]}", 400, "invalid_type", "prompt",
            "'prompt'[1] must be a token id");
    refused(C, "{\"model\": \"m\", \"prompt\": [1, -2]}", 400, "invalid_value", "prompt",
            "'prompt'[1] must be a token id");
    refused(C, "{\"model\": \"m\", \"prompt\": []}", 400, "invalid_value", "prompt",
            "empty array");
    refused(H, "{\"model\": \"m\", \"messages\": {}}", 400, "invalid_type", "messages",
            "an array of messages");
    refused(H, "{\"model\": \"m\", \"messages\": []}", 400, "invalid_value", "messages",
            "empty");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"content\": \"x\"}]}", 400, "missing_field",
            "messages[0].role", "required");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\"}]}", 400, "missing_field",
            "messages[0].content", "required");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400,
            "invalid_type", "messages[0].content", "a string or an array of text parts");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
            "\"text\"}]}]}", 400, "invalid_value", "messages[0].content", "\"text\": STRING");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"stop\": [\"a\", 1]}", 400,
            "invalid_type", "stop", "a string or an array of strings");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"stop_token_ids\": 3}", 400,
            "invalid_type", "stop_token_ids", "an array");
    /* out of range */
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"temperature\": 2.5}", 400,
            "invalid_value", "temperature", "2.5 is outside [0, 2]");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"top_p\": -0.1}", 400, "invalid_value",
            "top_p", "outside [0, 1]");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"min_p\": 1.5}", 400, "invalid_value",
            "min_p", "outside [0, 1]");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"repetition_penalty\": 0}", 400,
            "invalid_value", "repetition_penalty", "outside (0, 10]");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"top_k\": -2}", 400, "invalid_value",
            "top_k", "-2 is outside");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"max_tokens\": -1}", 400,
            "invalid_value", "max_tokens", "-1 is outside");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"seed\": -1}", 400, "invalid_value",
            "seed", "outside");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"logprobs\": 21}", 400, "invalid_value",
            "logprobs", "21 is outside [0, 20]");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
            "\"top_logprobs\": 2}", 400, "invalid_value", "top_logprobs", "needs 'logprobs'");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"stop\": \"\"}", 400, "invalid_value",
            "stop", "0 bytes long");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"stop\": [\"1\", \"2\", \"3\", \"4\", "
            "\"5\", \"6\", \"7\", \"8\", \"9\", \"10\", \"11\", \"12\", \"13\", \"14\", \"15\", "
            "\"16\", \"17\"]}", 400, "invalid_value", "stop", "17 stop strings: at most 16");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"stream_options\": {}}", 400,
            "invalid_value", "stream_options", "needs 'stream': true");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"n\": 0}", 400, "invalid_value", "n",
            "outside");
    /* valid OpenAI values this server does not implement */
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"n\": 2}", 400, "unsupported_value", "n",
            "n = 1");
    refused(C, "{\"model\": \"m\", \"prompt\": [\"a\", \"b\"]}", 400, "unsupported_value",
            "prompt", "one prompt per request");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"echo\": true}", 400,
            "unsupported_value", "echo", "only false");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"best_of\": 3}", 400,
            "unsupported_value", "best_of", "only 1");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"suffix\": \"y\"}", 400,
            "unsupported_value", "suffix", "not implemented");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"presence_penalty\": 0.5}", 400,
            "unsupported_value", "presence_penalty", "only 0");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"logit_bias\": {\"5\": 1}}", 400,
            "unsupported_value", "logit_bias", "not implemented");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 400,
            "unsupported_value", "messages[0].role", "system, user and assistant");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
            "\"image_url\", \"image_url\": {}}]}]}", 400, "unsupported_value",
            "messages[0].content", "only parts of type 'text'");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
            "\"tools\": [{\"type\": \"function\"}]}", 400, "unsupported_value", "tools",
            "not implemented");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
            "\"response_format\": {\"type\": \"json_object\"}}", 400, "unsupported_value",
            "response_format", "only {\"type\": \"text\"}");
    /* valid JSON no field can hold: a NUL inside a string (C strings cannot carry it), an
     * integer beyond 64 bits */
    refused(C, "{\"model\": \"m\", \"prompt\": \"a\\u0000b\"}", 400, "invalid_value", NULL,
            "text cannot hold NUL");
    refused(C, "{\"model\": \"m\", \"prompt\": \"x\", \"seed\": 18446744073709551616}", 400,
            "invalid_value", NULL, "outside the 64-bit range at line 1, column");
    refused(H, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\", "
            "\"name\": \"bob\"}]}", 400, "unsupported_value", "messages[0].name",
            "participant names are not passed");
}

static void test_error_object(void)
{
    lh_srv_error e;
    CU_ASSERT_EQUAL(lh_srv_fail(&e, 404, "model_not_found", "model", "no model '%s'", "x"), -1);
    char *t = lh_srv_error_json(&e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    json_t *o = json_loads(t, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    json_t *err = json_object_get(o, "error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "message")), "no model 'x'");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "type")),
                           "invalid_request_error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "param")), "model");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "code")), "model_not_found");
    json_decref(o);
    free(t);
    /* 5xx: server_error; no param and no code write null; a message cut inside a UTF-8
     * character still gives JSON */
    lh_srv_fail(&e, 503, NULL, NULL, "%s", "caf\xc3");
    t = lh_srv_error_json(&e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    o = json_loads(t, 0, NULL);
    err = json_object_get(o, "error");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(err, "type")), "server_error");
    CU_ASSERT(json_is_null(json_object_get(err, "param")));
    CU_ASSERT(json_is_null(json_object_get(err, "code")));
    CU_ASSERT(json_is_string(json_object_get(err, "message")));
    json_decref(o);
    free(t);
}

static lh_tokenizer *chat_tokenizer(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/models/llama-chat-f32/tokenizer.json",
             lh_test_env("LH_FIXTURES"));
    lh_tokenizer *tok = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_tokenizer_load(path, &tok, &err), LH_OK);
    return tok;
}

/* The ids of text (no special tokens). */
static size_t encode(const lh_tokenizer *tok, const char *text, int32_t **ids)
{
    size_t n = 0;
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_tokenizer_encode(tok, text, strlen(text), false, ids, &n, &err), LH_OK);
    return n;
}

/* Feeds ids one by one, taking what is ready after each; returns everything taken. */
static char *feed(const lh_tokenizer *tok, char *const *stops, size_t n_stops,
                  const int32_t *ids, size_t n, bool *stopped, size_t *max_early)
{
    lh_srv_text t;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_srv_text_init(&t, tok, stops, n_stops, &err), LH_OK);
    char *out = calloc(1, 4096);
    size_t len = 0;
    *max_early = 0;
    for (size_t i = 0; i < n && !t.stopped; i++) {
        CU_ASSERT_EQUAL(lh_srv_text_push(&t, ids[i], &err), LH_OK);
        const char *s;
        const size_t k = lh_srv_text_take(&t, &s);
        memcpy(out + len, s, k);
        len += k;
        /* what went out before the end never holds the beginning of a stop string's text */
        if (len > *max_early)
            *max_early = len;
    }
    CU_ASSERT_EQUAL(lh_srv_text_finish(&t, &err), LH_OK);
    const char *s;
    const size_t k = lh_srv_text_take(&t, &s);
    memcpy(out + len, s, k);
    out[len + k] = '\0';
    *stopped = t.stopped;
    lh_srv_text_free(&t);
    return out;
}

static void test_text_stop_strings(void)
{
    lh_tokenizer *tok = chat_tokenizer();
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    int32_t *ids = NULL;
    const size_t n = encode(tok, "the cat sat on the mat", &ids);
    CU_ASSERT_FATAL(n > 3);
    bool stopped;
    size_t early;
    /* the reference: the ids decoded at once (the tokenizer adds a prefix space) */
    char *ref = NULL;
    size_t ref_len = 0;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_decode(tok, ids, n, true, &ref, &ref_len, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(ref, " the cat sat on the mat");
    /* no stop strings: everything, as it comes */
    char *all = feed(tok, NULL, 0, ids, n, &stopped, &early);
    CU_ASSERT_STRING_EQUAL(all, ref);
    CU_ASSERT_FALSE(stopped);
    free(all);
    /* the text ends before the stop string, which may span tokens */
    char *stops[] = {"t on", "zzz"};
    char *cut = feed(tok, stops, 2, ids, n, &stopped, &early);
    CU_ASSERT_STRING_EQUAL(cut, " the cat sa");
    CU_ASSERT_TRUE(stopped);
    free(cut);
    /* a tail that may begin a stop string is held until it cannot: " the ma" could begin
     * "mat!", so the text handed out early stops before "ma"; at the end it all goes */
    char *later[] = {"mat!"};
    char *held = feed(tok, later, 1, ids, n, &stopped, &early);
    CU_ASSERT_STRING_EQUAL(held, ref);
    CU_ASSERT_FALSE(stopped);
    CU_ASSERT(early <= strlen(" the cat sat on the "));
    free(held);
    /* a stop string at the very start: nothing */
    char *first[] = {" the"};
    char *none = feed(tok, first, 1, ids, n, &stopped, &early);
    CU_ASSERT_STRING_EQUAL(none, "");
    CU_ASSERT_TRUE(stopped);
    free(none);
    free(ref);
    free(ids);
    lh_tokenizer_free(tok);
}

static CU_TestInfo tests[] = {
    {"valid request bodies of both endpoints", test_valid_bodies},
    {"every class of bad body: status, code, field, message", test_bad_bodies},
    {"the OpenAI error object", test_error_object},
    {"response text: stop strings cut, their beginnings held back", test_text_stop_strings},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"server units", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
