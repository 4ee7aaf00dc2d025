/* Post-processors: TemplateProcessing (the single template), ByteLevel (offsets only: no
 * effect on ids), Sequence. */
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One item of the single template: {"Sequence": {"id": "A"}} or {"SpecialToken": {"id": name}}
 * with name's ids in special_tokens. */
static lh_status parse_template_item(ctx *c, lh_tokenizer *t, json_t *it, json_t *sp,
                                     const char *path, size_t i)
{
    char pi[600];
    snprintf(pi, sizeof pi, "%s.single[%zu]", path, i);
    json_t *seq = json_object_get(it, "Sequence"), *spec = json_object_get(it, "SpecialToken");
    tmpl_item *ti = &t->tmpl[t->n_tmpl++];
    if (json_is_object(seq)) {
        const char *id = json_string_value(json_object_get(seq, "id"));
        if (!id || strcmp(id, "A") != 0)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.Sequence.id: expected \"A\"",
                              c->origin, pi);
        ti->is_seq = true;
        return LH_OK;
    }
    if (!json_is_object(spec))
        return bad_type(c, pi, "{\"Sequence\": ...} or {\"SpecialToken\": ...}");
    const char *name = json_string_value(json_object_get(spec, "id"));
    json_t *def = name ? json_object_get(sp, name) : NULL;
    json_t *ids = json_object_get(def, "ids");
    if (!name || !json_is_array(ids))
        return lh_err_set(c->err, LH_E_CONFIG,
                          "%s: %s.SpecialToken: '%s' has no entry with ids in %s.special_tokens",
                          c->origin, pi, name ? name : "(no id)", path);
    ti->ids = calloc(json_array_size(ids) + 1, sizeof *ti->ids);
    if (!ti->ids)
        return oom(c);
    for (size_t k = 0; k < json_array_size(ids); k++) {
        json_t *v = json_array_get(ids, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= t->n_ids)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.special_tokens.%s.ids[%zu]: not a "
                              "token id", c->origin, path, name, k);
        ti->ids[ti->n++] = (int32_t)json_integer_value(v);
    }
    return LH_OK;
}

static lh_status parse_template(ctx *c, lh_tokenizer *t, json_t *j, const char *path)
{
    json_t *single = json_object_get(j, "single"), *sp = json_object_get(j, "special_tokens");
    char p[512];
    snprintf(p, sizeof p, "%s.single", path);
    if (!json_is_array(single))
        return bad_type(c, p, "an array");
    if (sp && !json_is_null(sp) && !json_is_object(sp)) {
        snprintf(p, sizeof p, "%s.special_tokens", path);
        return bad_type(c, p, "an object");
    }
    t->tmpl = calloc(json_array_size(single) + 1, sizeof *t->tmpl);
    if (!t->tmpl)
        return oom(c);
    for (size_t i = 0; i < json_array_size(single); i++) {
        lh_status st = parse_template_item(c, t, json_array_get(single, i), sp, path, i);
        if (st)
            return st;
    }
    t->has_template = true;
    return LH_OK;
}

lh_status parse_post(ctx *c, json_t *j, const char *path, void *tok)
{
    lh_tokenizer *t = tok;
    const char *type;
    lh_status st = get_type(c, j, path, &type);
    if (st)
        return st;
    if (strcmp(type, "ByteLevel") == 0)
        return LH_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") == 0) {
        if (t->has_template)
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s: a second TemplateProcessing is "
                              "not supported", c->origin, path);
        return parse_template(c, t, j, path);
    }
    if (strcmp(type, "Sequence") == 0)
        return parse_items(c, j, "processors", path, 0, NULL, NULL, parse_post, t);
    return unsupported(c, "post_processor", type, path);
}

bool post_apply(const lh_tokenizer *t, ids *body)
{
    if (!t->has_template)
        return true;
    ids all = {0};
    for (size_t k = 0; k < t->n_tmpl; k++) {
        const int32_t *v = t->tmpl[k].is_seq ? body->v : t->tmpl[k].ids;
        const size_t n = t->tmpl[k].is_seq ? body->n : t->tmpl[k].n;
        for (size_t q = 0; q < n; q++)
            ids_push(&all, v[q]);
    }
    free(body->v);
    *body = all;
    return !body->oom;
}
