#include "srv_request.h"

#include "core/json_kind.h"
#include "core/strutil.h"

#include <jansson.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The fields each endpoint accepts (OpenAI's, plus vLLM's top_k, min_p,
 * repetition_penalty, stop_token_ids and ignore_eos); anything else is refused by name. */
static const char *const common_fields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
    "seed", "stop", "stop_token_ids", "ignore_eos", "n", "stream", "stream_options",
    "frequency_penalty", "presence_penalty", "logit_bias", "user", "logprobs"};
static const char *const completion_fields[] = {"prompt", "echo", "best_of", "suffix"};
static const char *const chat_fields[] = {"messages", "max_completion_tokens", "top_logprobs",
                                          "response_format", "tools", "tool_choice"};
#define COUNT(a) (sizeof a / sizeof *a)

static int bad_type(lh_srv_error *e, const char *field, const char *want, const json_t *v)
{
    return lh_srv_fail(e, 400, "invalid_type", field, "'%s' must be %s, not %s", field, want,
                       lh_json_kind(v));
}

/* The value of key, or NULL when absent or null (OpenAI treats null as not given). */
static json_t *get(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int want_number(json_t *o, const char *key, double lo, bool lo_open, double hi,
                       const char *range, double *out, bool *given, lh_srv_error *e)
{
    json_t *v = get(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return bad_type(e, key, "a number", v);
    const double x = json_number_value(v);
    if (!isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi)
        return lh_srv_fail(e, 400, "invalid_value", key, "'%s' = %g is outside %s", key, x,
                           range);
    *out = x;
    if (given)
        *given = true;
    return 0;
}

static int want_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    bool *given, lh_srv_error *e)
{
    json_t *v = get(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return bad_type(e, key, "an integer", v);
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return lh_srv_fail(e, 400, "invalid_value", key, "'%s' = %lld is outside [%lld, %lld]",
                           key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    if (given)
        *given = true;
    return 0;
}

static int want_bool(json_t *o, const char *key, bool *out, lh_srv_error *e)
{
    json_t *v = get(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return bad_type(e, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

/* An unknown key of o (allowed: a[0..na) and b[0..nb)), with a did-you-mean; `where` prefixes
 * the field's name ("stream_options."). */
static int check_keys(json_t *o, const char *where, const char *const *a, size_t na,
                      const char *const *b, size_t nb, lh_srv_error *e)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool known = false;
        for (size_t i = 0; i < na && !known; i++)
            known = strcmp(key, a[i]) == 0;
        for (size_t i = 0; i < nb && !known; i++)
            known = strcmp(key, b[i]) == 0;
        if (known)
            continue;
        const char *near = lh_nearest(key, a, na);
        if (!near && nb)
            near = lh_nearest(key, b, nb);
        char field[96];
        snprintf(field, sizeof field, "%s%s", where, key);
        return lh_srv_fail(e, 400, "unknown_field", field, "unknown field '%s'%s%s%s", field,
                           near ? " (did you mean '" : "", near ? near : "",
                           near ? "'?)" : "");
    }
    return 0;
}

/* A valid OpenAI value that this server does not implement. */
static int unsupported(lh_srv_error *e, const char *field, const char *what)
{
    return lh_srv_fail(e, 400, "unsupported_value", field, "'%s': %s", field, what);
}

static int parse_ids(json_t *arr, const char *field, int32_t **ids, size_t *n, lh_srv_error *e)
{
    const size_t len = json_array_size(arr);
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids)
        return lh_srv_fail(e, 500, "out_of_memory", field, "out of memory for %zu ids", len);
    for (size_t i = 0; i < len; i++) {
        json_t *x = json_array_get(arr, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > INT32_MAX)
            return lh_srv_fail(e, 400, json_is_integer(x) ? "invalid_value" : "invalid_type",
                               field, "'%s'[%zu] must be a token id (an integer from 0 to "
                               "%d), not %s", field, i, INT32_MAX, lh_json_kind(x));
        (*ids)[i] = (int32_t)json_integer_value(x);
    }
    *n = len;
    return 0;
}

static int parse_prompt(json_t *o, lh_srv_req *r, lh_srv_error *e)
{
    json_t *p = get(o, "prompt");
    if (!p)
        return lh_srv_fail(e, 400, "missing_field", "prompt", "'prompt' is required");
    /* an array of one prompt (text or ids) is that prompt */
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    else if (json_is_array(p) && json_array_size(p) > 1 &&
             (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        return unsupported(e, "prompt", "one prompt per request (this server answers n = 1 "
                           "choice per request; send the prompts as separate requests)");
    if (json_is_string(p)) {
        r->prompt_text_len = json_string_length(p);
        r->prompt_text = malloc(r->prompt_text_len + 1);
        if (!r->prompt_text)
            return lh_srv_fail(e, 500, "out_of_memory", "prompt", "out of memory");
        memcpy(r->prompt_text, json_string_value(p), r->prompt_text_len + 1);
        return 0;
    }
    if (!json_is_array(p))
        return bad_type(e, "prompt", "a string, an array of token ids, or an array of one of "
                        "those", p);
    if (json_array_size(p) == 0)
        return lh_srv_fail(e, 400, "invalid_value", "prompt", "'prompt' is an empty array");
    return parse_ids(p, "prompt", &r->prompt_ids, &r->n_prompt_ids, e);
}

/* A message's content: a string, or text parts joined by newlines (as vLLM joins them). */
static int parse_content(json_t *c, size_t i, char **out, lh_srv_error *e)
{
    char field[64];
    snprintf(field, sizeof field, "messages[%zu].content", i);
    if (json_is_string(c)) {
        *out = lh_strdup(json_string_value(c));
        return *out ? 0 : lh_srv_fail(e, 500, "out_of_memory", field, "out of memory");
    }
    if (!c)
        return lh_srv_fail(e, 400, "missing_field", field, "'%s' is required", field);
    if (!json_is_array(c))
        return bad_type(e, field, "a string or an array of text parts", c);
    size_t total = 1;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        json_t *text = json_is_object(part) ? json_object_get(part, "text") : NULL;
        if (!json_is_object(part) || !json_is_string(type))
            return lh_srv_fail(e, 400, "invalid_type", field, "'%s'[%zu] must be an object "
                               "with a string 'type'", field, k);
        if (strcmp(json_string_value(type), "text") != 0)
            return unsupported(e, field, "only parts of type 'text' (this server takes text "
                               "only)");
        if (!json_is_string(text) || json_object_size(part) != 2)
            return lh_srv_fail(e, 400, "invalid_value", field, "'%s'[%zu] must be {\"type\": "
                               "\"text\", \"text\": STRING}", field, k);
        total += json_string_length(text) + 1;
    }
    *out = malloc(total);
    if (!*out)
        return lh_srv_fail(e, 500, "out_of_memory", field, "out of memory");
    size_t at = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *text = json_object_get(json_array_get(c, k), "text");
        if (k)
            (*out)[at++] = '\n';
        memcpy(*out + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    (*out)[at] = '\0';
    return 0;
}

static int parse_messages(json_t *o, lh_srv_req *r, lh_srv_error *e)
{
    json_t *m = get(o, "messages");
    if (!m)
        return lh_srv_fail(e, 400, "missing_field", "messages", "'messages' is required");
    if (!json_is_array(m))
        return bad_type(e, "messages", "an array of messages", m);
    if (json_array_size(m) == 0)
        return lh_srv_fail(e, 400, "invalid_value", "messages", "'messages' is empty");
    r->messages = calloc(json_array_size(m), sizeof *r->messages);
    if (!r->messages)
        return lh_srv_fail(e, 500, "out_of_memory", "messages", "out of memory");
    static const char *const roles[] = {"system", "user", "assistant"};
    static const char *const keys[] = {"role", "content"};
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *msg = json_array_get(m, i);
        char field[64];
        snprintf(field, sizeof field, "messages[%zu]", i);
        if (!json_is_object(msg))
            return bad_type(e, field, "an object", msg);
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].", i);
        if (json_object_get(msg, "name")) { /* OpenAI's; the templates here never see one */
            snprintf(field, sizeof field, "messages[%zu].name", i);
            return unsupported(e, field, "participant names are not passed to the chat "
                               "template (lh_chat_message has role and content)");
        }
        if (check_keys(msg, where, keys, COUNT(keys), NULL, 0, e))
            return -1;
        json_t *role = json_object_get(msg, "role");
        snprintf(field, sizeof field, "messages[%zu].role", i);
        if (!json_is_string(role))
            return role ? bad_type(e, field, "a string", role)
                        : lh_srv_fail(e, 400, "missing_field", field, "'%s' is required", field);
        size_t k = 0;
        while (k < COUNT(roles) && strcmp(roles[k], json_string_value(role)) != 0)
            k++;
        if (k == COUNT(roles))
            return unsupported(e, field, "roles are system, user and assistant");
        char *content = NULL;
        if (parse_content(get(msg, "content"), i, &content, e))
            return -1;
        r->messages[i] = (lh_chat_message){.role = roles[k], .content = content};
        r->n_messages = i + 1;
    }
    return 0;
}

static int parse_stop(json_t *o, lh_srv_req *r, lh_srv_error *e)
{
    json_t *s = get(o, "stop");
    if (!s)
        return 0;
    if (!json_is_string(s) && !json_is_array(s))
        return bad_type(e, "stop", "a string or an array of strings", s);
    const size_t n = json_is_string(s) ? 1 : json_array_size(s);
    if (n > LH_SRV_MAX_STOP)
        return lh_srv_fail(e, 400, "invalid_value", "stop", "%zu stop strings: at most %d", n,
                           LH_SRV_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(x))
            return bad_type(e, "stop", "a string or an array of strings", x);
        if (json_string_length(x) == 0 || json_string_length(x) > LH_STOP_STRING_MAX_BYTES)
            return lh_srv_fail(e, 400, "invalid_value", "stop", "stop string %zu is %zu bytes "
                               "long: 1 to %d", i, json_string_length(x),
                               LH_STOP_STRING_MAX_BYTES);
        if (!(r->stop[i] = lh_strdup(json_string_value(x))))
            return lh_srv_fail(e, 500, "out_of_memory", "stop", "out of memory");
        r->n_stop = i + 1;
    }
    return 0;
}

/* Fields this server does not implement must hold their "off" value. */
static int check_unsupported(json_t *o, lh_srv_req *r, lh_srv_error *e)
{
    int64_t n = 1;
    if (want_int(o, "n", 1, INT32_MAX, &n, NULL, e))
        return -1;
    if (n != 1)
        return unsupported(e, "n", "one choice per request (n = 1); send n requests instead");
    static const char *const penalties[] = {"frequency_penalty", "presence_penalty"};
    for (size_t i = 0; i < COUNT(penalties); i++) {
        double p = 0;
        if (want_number(o, penalties[i], -2, false, 2, "[-2, 2]", &p, NULL, e))
            return -1;
        if (p != 0)
            return unsupported(e, penalties[i], "only 0 (use repetition_penalty)");
    }
    json_t *lb = get(o, "logit_bias");
    if (lb && !json_is_object(lb))
        return bad_type(e, "logit_bias", "an object", lb);
    if (lb && json_object_size(lb))
        return unsupported(e, "logit_bias", "logit biases are not implemented (only {})");
    json_t *user = get(o, "user");
    if (user && !json_is_string(user))
        return bad_type(e, "user", "a string", user);
    if (r->kind == LH_SRV_COMPLETION) {
        bool echo = false;
        int64_t best_of = 1;
        if (want_bool(o, "echo", &echo, e) || want_int(o, "best_of", 1, INT32_MAX, &best_of,
                                                       NULL, e))
            return -1;
        if (echo)
            return unsupported(e, "echo", "only false");
        if (best_of != 1)
            return unsupported(e, "best_of", "only 1");
        json_t *suffix = get(o, "suffix");
        if (suffix && !json_is_string(suffix))
            return bad_type(e, "suffix", "a string", suffix);
        if (suffix && json_string_length(suffix))
            return unsupported(e, "suffix", "insertion (suffix) is not implemented");
        return 0;
    }
    json_t *rf = get(o, "response_format");
    if (rf) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_object(rf) || !json_is_string(t))
            return bad_type(e, "response_format", "an object with a string 'type'", rf);
        if (strcmp(json_string_value(t), "text") != 0 || json_object_size(rf) != 1)
            return unsupported(e, "response_format", "only {\"type\": \"text\"} (structured "
                               "output is not implemented)");
    }
    json_t *tools = get(o, "tools");
    if (tools && !json_is_array(tools))
        return bad_type(e, "tools", "an array", tools);
    if (tools && json_array_size(tools))
        return unsupported(e, "tools", "tool calling is not implemented");
    json_t *tc = get(o, "tool_choice");
    if (tc && !(json_is_string(tc) && strcmp(json_string_value(tc), "none") == 0))
        return unsupported(e, "tool_choice", "only \"none\" (tool calling is not implemented)");
    return 0;
}

static int parse_logprobs(json_t *o, lh_srv_req *r, lh_srv_error *e)
{
    if (r->kind == LH_SRV_COMPLETION) { /* logprobs: N alternatives (0: the token's only) */
        int64_t n = 0;
        bool given = false;
        if (want_int(o, "logprobs", 0, LH_MAX_TOP_LOGPROBS, &n, &given, e))
            return -1;
        r->logprobs = given;
        r->top_logprobs = (int)n;
        return 0;
    }
    int64_t top = 0;
    bool top_given = false;
    if (want_bool(o, "logprobs", &r->logprobs, e) ||
        want_int(o, "top_logprobs", 0, LH_MAX_TOP_LOGPROBS, &top, &top_given, e))
        return -1;
    if (top_given && !r->logprobs)
        return lh_srv_fail(e, 400, "invalid_value", "top_logprobs", "'top_logprobs' needs "
                           "'logprobs': true");
    r->top_logprobs = (int)top;
    return 0;
}

static int parse_object(json_t *o, lh_srv_req *r, lh_srv_error *e)
{
    const bool chat = r->kind == LH_SRV_CHAT;
    if (check_keys(o, "", common_fields, COUNT(common_fields),
                   chat ? chat_fields : completion_fields,
                   chat ? COUNT(chat_fields) : COUNT(completion_fields), e))
        return -1;
    json_t *model = get(o, "model");
    if (!model)
        return lh_srv_fail(e, 400, "missing_field", "model", "'model' is required");
    if (!json_is_string(model))
        return bad_type(e, "model", "a string", model);
    if (!(r->model = lh_strdup(json_string_value(model))))
        return lh_srv_fail(e, 500, "out_of_memory", "model", "out of memory");
    if (chat ? parse_messages(o, r, e) : parse_prompt(o, r, e))
        return -1;
    const int64_t max_new = 1 << 30;
    if (want_int(o, "max_tokens", 0, max_new, &r->max_tokens, NULL, e))
        return -1;
    if (chat && want_int(o, "max_completion_tokens", 0, max_new, &r->max_tokens, NULL, e))
        return -1;
    int64_t seed = 0;
    if (want_number(o, "temperature", 0, false, 2, "[0, 2]", &r->temperature,
                    &r->temperature_given, e) ||
        want_number(o, "top_p", 0, false, 1, "[0, 1]", &r->top_p, &r->top_p_given, e) ||
        want_number(o, "min_p", 0, false, 1, "[0, 1]", &r->min_p, &r->min_p_given, e) ||
        want_number(o, "repetition_penalty", 0, true, 10, "(0, 10]", &r->repetition_penalty,
                    &r->repetition_penalty_given, e) ||
        want_int(o, "top_k", -1, INT32_MAX, &r->top_k, &r->top_k_given, e) ||
        want_int(o, "seed", 0, INT64_MAX, &seed, &r->seed_given, e))
        return -1;
    r->seed = (uint64_t)seed;
    if (r->top_k_given && r->top_k == -1) /* vLLM's "off" */
        r->top_k = 0;
    if (parse_stop(o, r, e) || want_bool(o, "ignore_eos", &r->ignore_eos, e))
        return -1;
    json_t *ids = get(o, "stop_token_ids");
    if (ids && !json_is_array(ids))
        return bad_type(e, "stop_token_ids", "an array of token ids", ids);
    if (ids && json_array_size(ids) > LH_SRV_MAX_STOP_IDS)
        return lh_srv_fail(e, 400, "invalid_value", "stop_token_ids", "%zu stop token ids: at "
                           "most %d", json_array_size(ids), LH_SRV_MAX_STOP_IDS);
    if (ids) {
        int32_t *tmp = NULL;
        size_t n = 0;
        const int rc = parse_ids(ids, "stop_token_ids", &tmp, &n, e);
        if (rc == 0)
            memcpy(r->stop_ids, tmp, n * sizeof *tmp);
        free(tmp);
        if (rc)
            return -1;
        r->n_stop_ids = n;
        r->stop_ids_given = true;
    }
    if (want_bool(o, "stream", &r->stream, e))
        return -1;
    json_t *so = get(o, "stream_options");
    if (so) {
        static const char *const so_keys[] = {"include_usage"};
        if (!json_is_object(so))
            return bad_type(e, "stream_options", "an object", so);
        if (!r->stream)
            return lh_srv_fail(e, 400, "invalid_value", "stream_options", "'stream_options' "
                               "needs 'stream': true");
        if (check_keys(so, "stream_options.", so_keys, 1, NULL, 0, e))
            return -1;
        json_t *iu = get(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return bad_type(e, "stream_options.include_usage", "a boolean", iu);
        r->include_usage = iu && json_is_true(iu);
    }
    if (parse_logprobs(o, r, e))
        return -1;
    return check_unsupported(o, r, e);
}

int lh_srv_req_parse(lh_srv_kind kind, const char *body, size_t len, lh_srv_req *out,
                     lh_srv_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->max_tokens = -1;
    json_error_t je;
    /* duplicate keys are refused: which one a client meant cannot be known */
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    /* valid JSON that no field can hold: an integer beyond 64 bits, a NUL in a string */
    if (!o && (strstr(je.text, "too big") || strstr(je.text, "\\u0000")))
        return lh_srv_fail(e, 400, "invalid_value", NULL, "%s at line %d, column %d",
                           strstr(je.text, "too big") ? "an integer outside the 64-bit range"
                                                      : "a \\u0000 in a string (text "
                                                        "cannot hold NUL)",
                           je.line, je.column);
    if (!o)
        return lh_srv_fail(e, 400, "invalid_json", NULL, "the body is not valid JSON: %s "
                           "(line %d, column %d)", je.text, je.line, je.column);
    int rc = json_is_object(o) ? parse_object(o, out, e)
                               : lh_srv_fail(e, 400, "invalid_type", NULL, "the body must be "
                                             "a JSON object, not %s", lh_json_kind(o));
    json_decref(o);
    return rc;
}

void lh_srv_req_free(lh_srv_req *r)
{
    if (!r)
        return;
    free(r->model);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_messages; i++)
        free((char *)r->messages[i].content);
    free(r->messages);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
