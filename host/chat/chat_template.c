/* The public chat-template API (llmhost.h): tokenizer_config.json's chat_template and special
 * tokens (or a GGUF file's tokenizer.chat_template and special-token ids), rendered with the
 * variables transformers' apply_chat_template passes. */
#include "chat/jinja.h"
#include "core/err.h"
#include "core/fileio.h"
#include "core/paths.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"
#include "weights/gguf.h"
#include "weights/gguf_locate.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_CONFIG_BYTES ((size_t)64 << 20)

struct lh_chat_template {
    lh_jinja *jinja;
    char *source;
    json_t *specials; /* {"bos_token": "...", ...} */
};

/* transformers' SPECIAL_TOKENS_ATTRIBUTES: the special tokens every template sees */
static const char *const special_names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                            "pad_token", "cls_token", "mask_token"};

void lh_chat_template_free(lh_chat_template *t)
{
    if (!t)
        return;
    lh_jinja_free(t->jinja);
    free(t->source);
    json_decref(t->specials);
    free(t);
}

static lh_status build(const char *src, size_t len, json_t *specials, lh_chat_template **out,
                       lh_err *err)
{
    lh_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(specials);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    t->specials = specials;
    t->source = malloc(len + 1);
    if (!t->source || !t->specials) {
        lh_chat_template_free(t);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    memcpy(t->source, src, len);
    t->source[len] = 0;
    lh_status st = lh_jinja_compile(src, len, &t->jinja, err);
    if (st != LH_OK) {
        lh_chat_template_free(t);
        return st;
    }
    *out = t;
    return LH_OK;
}

lh_status lh_chat_template_from_string(const char *source, size_t len,
                                       const char *special_tokens_json,
                                       lh_chat_template **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_from_string: out is NULL");
    *out = NULL;
    if (!source)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_from_string: no template");
    json_t *specials;
    if (special_tokens_json) {
        json_error_t je;
        specials = json_loads(special_tokens_json, JSON_REJECT_DUPLICATES, &je);
        if (!specials)
            return lh_err_set(err, LH_E_USAGE, "special tokens JSON %d:%d: %s", je.line,
                              je.column, je.text);
        const char *k;
        json_t *v;
        bool ok = json_is_object(specials);
        if (ok)
            json_object_foreach(specials, k, v) ok = ok && json_is_string(v);
        if (!ok) {
            json_decref(specials);
            return lh_err_set(err, LH_E_USAGE,
                              "special tokens JSON must be an object of strings");
        }
    } else {
        specials = json_object();
    }
    return build(source, len, specials, out, err);
}

lh_status lh_chat_template_load_json(const char *text, size_t len, const char *origin,
                                     lh_chat_template **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_load_json: out is NULL");
    *out = NULL;
    if (!text)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_load_json: no text");
    if (!origin)
        origin = "tokenizer_config.json";
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return lh_err_set(err, LH_E_CONFIG, "%s:%d:%d: %s", origin, je.line, je.column,
                          je.text);
    lh_status st = LH_OK;
    if (!json_is_object(root)) {
        st = lh_err_set(err, LH_E_CONFIG, "%s: the top level is not an object", origin);
        goto done;
    }
    json_t *ct = json_object_get(root, "chat_template");
    const char *src = NULL;
    size_t srclen = 0;
    if (!ct || json_is_null(ct)) {
        st = lh_err_set(err, LH_E_CONFIG, "%s: no chat_template (the model has no chat format)",
                        origin);
        goto done;
    }
    if (json_is_string(ct)) {
        src = json_string_value(ct);
        srclen = json_string_length(ct);
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            json_t *nm = json_object_get(e, "name"), *tp = json_object_get(e, "template");
            if (!json_is_object(e) || !json_is_string(nm) || !json_is_string(tp)) {
                st = lh_err_set(err, LH_E_CONFIG,
                                "%s: chat_template[%zu] must be an object with string 'name' "
                                "and 'template'",
                                origin, i);
                goto done;
            }
            if (!strcmp(json_string_value(nm), "default")) {
                src = json_string_value(tp);
                srclen = json_string_length(tp);
            }
        }
        if (!src) {
            st = lh_err_set(err, LH_E_CONFIG, "%s: chat_template has no template named 'default'",
                            origin);
            goto done;
        }
    } else {
        st = lh_err_set(err, LH_E_CONFIG,
                        "%s: chat_template must be a string or a list of {name, template}",
                        origin);
        goto done;
    }
    json_t *specials = json_object();
    if (!specials) {
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < sizeof special_names / sizeof *special_names; i++) {
        json_t *v = json_object_get(root, special_names[i]);
        if (!v || json_is_null(v))
            continue;
        if (json_is_object(v))
            v = json_object_get(v, "content"); /* a serialized AddedToken */
        if (!json_is_string(v)) {
            json_decref(specials);
            st = lh_err_set(err, LH_E_CONFIG,
                            "%s: %s must be a string or an object with a string 'content'",
                            origin, special_names[i]);
            goto done;
        }
        json_object_set(specials, special_names[i], v);
    }
    st = build(src, srclen, specials, out, err);
    if (st != LH_OK)
        lh_err_prefix(err, "%s: chat_template", origin);
done:
    json_decref(root);
    return st;
}

#define GK_TEMPLATE "tokenizer.chat_template"

/* tokenizer.chat_template and the special tokens of an open GGUF file. */
static lh_status load_gguf(const lh_gguf_file *f, lh_chat_template **out, lh_err *err)
{
    const char *path = lh_gguf_path(f), *src;
    size_t len;
    lh_status st;
    if (!lh_gguf_find(f, GK_TEMPLATE))
        return lh_err_set(err, LH_E_CONFIG, "%s: no %s (the model has no chat format)", path,
                          GK_TEMPLATE);
    if ((st = lh_gguf_get_string(f, GK_TEMPLATE, &src, &len, err)))
        return st;
    /* the source is kept as a C string (lh_chat_template_source): no NUL inside */
    const char *nul = memchr(src, 0, len);
    size_t bad = lh_utf8_check(src, nul ? (size_t)(nul - src) : len);
    if (nul || bad != len)
        return lh_err_set(err, LH_E_CONFIG, "%s: %s is not UTF-8 text without NUL bytes (byte "
                          "%zu)", path, GK_TEMPLATE, bad);
    json_t *specials = json_object();
    if (!specials)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    for (size_t i = 0; i < LH_GGUF_N_SPECIALS; i++) {
        const char *tok;
        size_t n;
        if ((st = lh_gguf_special_token(f, lh_gguf_specials[i].key, &tok, &n, err))) {
            json_decref(specials);
            return st;
        }
        if (tok && json_object_set_new(specials, lh_gguf_specials[i].name,
                                       json_stringn_nocheck(tok, n))) {
            json_decref(specials);
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        }
    }
    st = build(src, len, specials, out, err);
    if (st != LH_OK)
        lh_err_prefix(err, "%s: %s", path, GK_TEMPLATE);
    return st;
}

lh_status lh_chat_template_load_gguf(const char *path, lh_chat_template **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_load_gguf: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_load_gguf: no path");
    lh_gguf_file *f = NULL;
    lh_status st = lh_gguf_open(path, &f, err);
    if (st == LH_OK)
        st = load_gguf(f, out, err);
    lh_gguf_close(f);
    return st;
}

lh_status lh_chat_template_open(const char *path, lh_chat_template **out, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_open: no path");
    lh_status ps = lh_model_path_check(path, err);
    if (ps != LH_OK)
        return ps;
    char *file = NULL;
    lh_status s = lh_gguf_locate(path, &file, err);
    if (s != LH_OK)
        return s;
    if (file) {
        s = lh_chat_template_load_gguf(file, out, err);
        free(file);
        return s;
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        file = lh_path_join(path, "tokenizer_config.json");
    } else {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (strcmp(base, "config.json") == 0) {
            file = malloc(strlen(path) + sizeof "tokenizer_config.json");
            if (file) {
                memcpy(file, path, (size_t)(base - path));
                strcpy(file + (base - path), "tokenizer_config.json");
            }
        } else {
            file = strdup(path);
        }
    }
    if (!file)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    char *text = NULL;
    size_t len = 0;
    s = lh_read_text_file(file, "tokenizer_config.json", MAX_CONFIG_BYTES, LH_E_CONFIG, &text,
                          &len, err);
    if (s == LH_OK)
        s = lh_chat_template_load_json(text, len, file, out, err);
    free(text);
    free(file);
    return s;
}

const char *lh_chat_template_source(const lh_chat_template *t)
{
    return t ? t->source : NULL;
}

const char *lh_chat_template_special_token(const lh_chat_template *t, const char *name)
{
    if (!t || !name)
        return NULL;
    return json_string_value(json_object_get(t->specials, name));
}

static lh_status render(const lh_chat_template *t, json_t *messages,
                        const lh_chat_render_options *opt, char **out, size_t *len, lh_err *err)
{
    json_t *vars = json_object();
    if (!vars) {
        json_decref(messages);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    lh_status st = LH_OK;
    json_object_update(vars, t->specials);
    lh_jinja_env env = {0};
    json_t *tools = json_null();
    if (opt && opt->extra_json) {
        json_error_t je;
        json_t *extra = json_loads(opt->extra_json, JSON_REJECT_DUPLICATES, &je);
        if (!extra || !json_is_object(extra)) {
            json_decref(extra);
            st = extra ? lh_err_set(err, LH_E_USAGE, "extra context JSON must be an object")
                       : lh_err_set(err, LH_E_USAGE, "extra context JSON %d:%d: %s", je.line,
                                    je.column, je.text);
            goto done;
        }
        json_object_update(vars, extra); /* extra variables override special tokens */
        json_decref(extra);
    }
    if (opt && opt->tools_json) {
        json_error_t je;
        json_decref(tools);
        tools = json_loads(opt->tools_json, JSON_REJECT_DUPLICATES, &je);
        if (!tools || !json_is_array(tools)) {
            st = tools ? lh_err_set(err, LH_E_USAGE, "tools JSON must be an array of tool schemas")
                       : lh_err_set(err, LH_E_USAGE, "tools JSON %d:%d: %s", je.line, je.column,
                                    je.text);
            goto done;
        }
        size_t i;
        json_t *e;
        json_array_foreach(tools, i, e) if (!json_is_object(e))
        {
            st = lh_err_set(err, LH_E_USAGE, "tools JSON: item %zu is not an object", i);
            goto done;
        }
    }
    if (opt) {
        env.fixed_now = opt->fixed_now;
        env.now_unix = opt->now_unix;
    }
    json_object_set(vars, "messages", messages);
    json_object_set(vars, "tools", tools);
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt",
                        json_boolean(opt && opt->add_generation_prompt));
    st = lh_jinja_render(t->jinja, vars, &env, out, len, err);
done:
    json_decref(tools);
    json_decref(messages);
    json_decref(vars);
    return st;
}

static lh_status check_render_args(const lh_chat_template *t, const lh_chat_render_options *opt,
                                   char **out, size_t *len, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_render: out is NULL");
    *out = NULL;
    if (len)
        *len = 0;
    if (!t)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_render: no template");
    if (opt && opt->struct_size < sizeof(lh_chat_render_options))
        return lh_err_set(err, LH_E_USAGE,
                          "lh_chat_render_options.struct_size is %u, this library needs %zu",
                          opt->struct_size, sizeof(lh_chat_render_options));
    return LH_OK;
}

lh_status lh_chat_template_render(const lh_chat_template *t, const lh_chat_message *messages,
                                  size_t n_messages, const lh_chat_render_options *opt,
                                  char **out, size_t *len, lh_err *err)
{
    lh_status st = check_render_args(t, opt, out, len, err);
    if (st != LH_OK)
        return st;
    if (n_messages && !messages)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_render: messages is NULL");
    json_t *arr = json_array();
    if (!arr)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n_messages; i++) {
        if (!messages[i].role || !messages[i].content) {
            json_decref(arr);
            return lh_err_set(err, LH_E_USAGE, "message %zu has no %s", i,
                              messages[i].role ? "content" : "role");
        }
        json_t *r = json_string(messages[i].role), *c = json_string(messages[i].content);
        if (!r || !c) {
            json_decref(r);
            json_decref(c);
            json_decref(arr);
            return lh_err_set(err, LH_E_USAGE, "message %zu: role or content is not UTF-8", i);
        }
        json_t *m = json_object();
        if (!m || json_object_set_new(m, "role", r) || json_object_set_new(m, "content", c) ||
            json_array_append_new(arr, m)) {
            json_decref(arr);
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        }
    }
    return render(t, arr, opt, out, len, err);
}

lh_status lh_chat_template_render_json(const lh_chat_template *t, const char *messages_json,
                                       const lh_chat_render_options *opt, char **out,
                                       size_t *len, lh_err *err)
{
    lh_status st = check_render_args(t, opt, out, len, err);
    if (st != LH_OK)
        return st;
    if (!messages_json)
        return lh_err_set(err, LH_E_USAGE, "lh_chat_template_render_json: no messages");
    json_error_t je;
    json_t *arr = json_loads(messages_json, JSON_REJECT_DUPLICATES, &je);
    if (!arr)
        return lh_err_set(err, LH_E_USAGE, "messages JSON %d:%d: %s", je.line, je.column,
                          je.text);
    size_t i;
    json_t *m;
    bool ok = json_is_array(arr);
    if (ok)
        json_array_foreach(arr, i, m) ok = ok && json_is_object(m);
    if (!ok) {
        json_decref(arr);
        return lh_err_set(err, LH_E_USAGE, "messages JSON must be an array of objects");
    }
    return render(t, arr, opt, out, len, err);
}
