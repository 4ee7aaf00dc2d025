/* Reading tokenizer.json's values: typed getters that name the JSON path of what is wrong,
 * patterns, components and their Sequence items, and the options Metaspace's pre-tokenizer
 * and decoder share. */
#include "tokenizer/tokenizer_internal.h"

#include "core/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lh_status bad_type(ctx *c, const char *path, const char *want)
{
    return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: expected %s", c->origin, path, want);
}

lh_status unsupported(ctx *c, const char *what, const char *type, const char *path)
{
    return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s: %s type '%s' is not supported", c->origin,
                      path, what, type);
}

lh_status oom(ctx *c) { return lh_err_set(c->err, LH_E_NOMEM, "out of memory"); }

/* bad_type for obj[key] at path. */
static lh_status bad_key(ctx *c, const char *path, const char *key, const char *want)
{
    char p[512];
    snprintf(p, sizeof p, "%s.%s", path, key);
    return bad_type(c, p, want);
}

lh_status get_str(ctx *c, json_t *obj, const char *key, const char *path, bool required,
                  const char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.%s: missing", c->origin, path, key);
        return LH_OK;
    }
    if (!json_is_string(v))
        return bad_key(c, path, key, "a string");
    *out = json_string_value(v);
    return LH_OK;
}

lh_status get_bool(ctx *c, json_t *obj, const char *key, const char *path, bool dflt, bool *out)
{
    json_t *v = json_object_get(obj, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_boolean(v))
        return bad_key(c, path, key, "true or false");
    *out = json_is_true(v);
    return LH_OK;
}

lh_status get_size(ctx *c, json_t *obj, const char *key, const char *path, size_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad_key(c, path, key, "a non-negative integer");
    *out = (size_t)json_integer_value(v);
    return LH_OK;
}

lh_status get_type(ctx *c, json_t *obj, const char *path, const char **type)
{
    if (!json_is_object(obj))
        return bad_type(c, path, "an object");
    return get_str(c, obj, "type", path, true, type);
}

lh_status parse_pattern(ctx *c, json_t *obj, const char *path, regex *re)
{
    json_t *p = json_object_get(obj, "pattern");
    char pp[512];
    snprintf(pp, sizeof pp, "%s.pattern", path);
    if (!json_is_object(p))
        return bad_type(c, pp, "{\"String\": ...} or {\"Regex\": ...}");
    json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    if (json_is_string(s)) {
        if (json_string_length(s) == 0)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.String: empty pattern", c->origin, pp);
        return regex_compile(re, json_string_value(s), json_string_length(s), true, pp, c->err)
                   ? lh_err_prefix(c->err, "%s", c->origin) : LH_OK;
    }
    if (json_is_string(r))
        return regex_compile(re, json_string_value(r), json_string_length(r), false, pp, c->err)
                   ? lh_err_prefix(c->err, "%s", c->origin) : LH_OK;
    return bad_type(c, pp, "{\"String\": ...} or {\"Regex\": ...}");
}

lh_status parse_items(ctx *c, json_t *obj, const char *key, const char *path, size_t elem_size,
                      void **elems, size_t *count, item_fn each, void *arg)
{
    json_t *arr = json_object_get(obj, key);
    char p[512];
    snprintf(p, sizeof p, "%s.%s", path, key);
    if (!json_is_array(arr))
        return bad_type(c, p, "an array");
    const size_t n = json_array_size(arr);
    if (elem_size && !(*elems = calloc(n + 1, elem_size)))
        return oom(c);
    for (size_t i = 0; i < n; i++) {
        char pi[600];
        snprintf(pi, sizeof pi, "%s[%zu]", p, i);
        if (elem_size)
            *count = i + 1;
        lh_status st = each(c, json_array_get(arr, i), pi,
                            elem_size ? (char *)*elems + i * elem_size : arg);
        if (st)
            return st;
    }
    return LH_OK;
}

lh_status parse_component(ctx *c, json_t *obj, const char *path, const char *seq_key,
                          size_t elem_size, void **children, size_t *n_children, item_fn parse,
                          const char **type)
{
    lh_status st = get_type(c, obj, path, type);
    if (st || strcmp(*type, "Sequence") != 0)
        return st;
    *type = NULL;
    return parse_items(c, obj, seq_key, path, elem_size, children, n_children, parse, NULL);
}

void free_children(void *children, size_t n, size_t elem_size, void (*free_elem)(void *elem))
{
    for (size_t i = 0; i < n; i++)
        free_elem((char *)children + i * elem_size);
    free(children);
}

lh_status parse_scheme(ctx *c, json_t *j, const char *path, prepend_scheme *out)
{
    const char *s;
    lh_status st = get_str(c, j, "prepend_scheme", path, false, &s);
    if (st)
        return st;
    if (!s) { /* older files: add_prefix_space */
        bool aps;
        if ((st = get_bool(c, j, "add_prefix_space", path, true, &aps)))
            return st;
        *out = aps ? PREPEND_ALWAYS : PREPEND_NEVER;
        return LH_OK;
    }
    if (strcmp(s, "always") == 0)
        *out = PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0)
        *out = PREPEND_FIRST;
    else if (strcmp(s, "never") == 0)
        *out = PREPEND_NEVER;
    else
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.prepend_scheme: '%s' is none of always, first, never",
                          c->origin, path, s);
    return LH_OK;
}

lh_status parse_replacement(ctx *c, json_t *j, const char *path, char out[8])
{
    const char *s;
    lh_status st = get_str(c, j, "replacement", path, true, &s);
    if (st)
        return st;
    size_t n = strlen(s);
    if (n == 0 || n > 4 || lh_utf8_step(s, n) != n)
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.replacement: expected one character",
                          c->origin, path);
    memcpy(out, s, n + 1);
    return LH_OK;
}
