/* YAML → lh_ynode tree with libyaml's event API. See yaml_tree.h. */
#include "yaml_tree.h"

#include "core/err.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define YT_MAX_DEPTH 64

typedef struct yt_ctx {
    yaml_parser_t parser;
    const char *text;
    size_t len;
    const char *src;
    lh_err *err;
} yt_ctx;

void lh_ynode_free(lh_ynode *node)
{
    if (!node)
        return;
    for (size_t i = 0; i < node->n; i++) {
        if (node->keys)
            lh_ynode_free(node->keys[i]);
        if (node->items)
            lh_ynode_free(node->items[i]);
    }
    free(node->keys);
    free(node->items);
    free(node->value);
    free(node);
}

const char *lh_ynode_kind_name(const lh_ynode *node)
{
    if (!node)
        return "nothing";
    switch (node->kind) {
    case LH_YNODE_MAPPING: return "a mapping";
    case LH_YNODE_SEQUENCE: return "a sequence";
    case LH_YNODE_SCALAR: return node->is_null ? "null" : "a scalar";
    }
    return "a node";
}

const lh_ynode *lh_ynode_get(const lh_ynode *map, const char *key)
{
    if (!map || map->kind != LH_YNODE_MAPPING)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->keys[i]->value, key) == 0)
            return map->items[i];
    return NULL;
}

static lh_status nomem(yt_ctx *c)
{
    return lh_err_set(c->err, LH_E_NOMEM, "%s: out of memory while reading YAML", c->src);
}

/* Line/column (1-based) of a byte offset, for reader errors that carry only an offset. */
static void offset_to_mark(const yt_ctx *c, size_t off, int *line, int *col)
{
    int l = 1, k = 1;
    for (size_t i = 0; i < off && i < c->len; i++) {
        if (c->text[i] == '\n') {
            l++;
            k = 1;
        } else {
            k++;
        }
    }
    *line = l;
    *col = k;
}

static lh_status parser_error(yt_ctx *c)
{
    yaml_parser_t *p = &c->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return nomem(c);
    int line, col;
    if (p->error == YAML_READER_ERROR) {
        offset_to_mark(c, p->problem_offset, &line, &col);
        if (p->problem_value != -1)
            return lh_err_set(c->err, LH_E_CONFIG,
                              "%s:%d:%d: YAML syntax error: %s (byte #x%X at offset %zu)", c->src,
                              line, col, p->problem ? p->problem : "unreadable input",
                              (unsigned)p->problem_value, p->problem_offset);
        return lh_err_set(c->err, LH_E_CONFIG, "%s:%d:%d: YAML syntax error: %s", c->src, line,
                          col, p->problem ? p->problem : "unreadable input");
    }
    line = (int)p->problem_mark.line + 1;
    col = (int)p->problem_mark.column + 1;
    if (p->context)
        return lh_err_set(c->err, LH_E_CONFIG, "%s:%d:%d: YAML syntax error: %s (%s at %d:%d)",
                          c->src, line, col, p->problem ? p->problem : "invalid YAML",
                          p->context, (int)p->context_mark.line + 1,
                          (int)p->context_mark.column + 1);
    return lh_err_set(c->err, LH_E_CONFIG, "%s:%d:%d: YAML syntax error: %s", c->src, line, col,
                      p->problem ? p->problem : "invalid YAML");
}

static lh_status next_event(yt_ctx *c, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&c->parser, ev))
        return parser_error(c);
    return LH_OK;
}

static int ev_line(const yaml_event_t *ev)
{
    return (int)ev->start_mark.line + 1;
}
static int ev_col(const yaml_event_t *ev)
{
    return (int)ev->start_mark.column + 1;
}

#define TAG_PREFIX "tag:yaml.org,2002:"

/* Scalar tags: none or the non-specific "!" (quoted) are fine; core tags resolve as their
 * names say; anything else is refused. */
static lh_status check_tag(yt_ctx *c, const yaml_event_t *ev, const yaml_char_t *tag_u,
                           lh_ynode *node)
{
    const char *tag = (const char *)tag_u;
    if (!tag)
        return LH_OK;
    if (strcmp(tag, "!") == 0)
        return LH_OK;
    if (strncmp(tag, TAG_PREFIX, strlen(TAG_PREFIX)) == 0) {
        const char *t = tag + strlen(TAG_PREFIX);
        if (node && node->kind == LH_YNODE_SCALAR) {
            if (strcmp(t, "str") == 0) {
                node->plain = false;
                node->is_null = false;
                return LH_OK;
            }
            if (strcmp(t, "int") == 0 || strcmp(t, "bool") == 0 || strcmp(t, "float") == 0) {
                node->plain = true;
                return LH_OK;
            }
            if (strcmp(t, "null") == 0) {
                node->plain = true;
                node->is_null = true;
                return LH_OK;
            }
        } else if (node && ((node->kind == LH_YNODE_MAPPING && strcmp(t, "map") == 0) ||
                            (node->kind == LH_YNODE_SEQUENCE && strcmp(t, "seq") == 0))) {
            return LH_OK;
        }
    }
    return lh_err_set(c->err, LH_E_CONFIG, "%s:%d:%d: YAML tag '%s' is not supported here",
                      c->src, ev_line(ev), ev_col(ev), tag);
}

static lh_status check_anchor(yt_ctx *c, const yaml_event_t *ev, const yaml_char_t *anchor)
{
    if (!anchor)
        return LH_OK;
    return lh_err_set(c->err, LH_E_CONFIG,
                      "%s:%d:%d: YAML anchors (&%s) and aliases are not supported in a config "
                      "file; write the value out",
                      c->src, ev_line(ev), ev_col(ev), (const char *)anchor);
}

static bool plain_is_null(const char *v)
{
    return !*v || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

static lh_status push_child(yt_ctx *c, lh_ynode *parent, size_t *cap, lh_ynode *key,
                            lh_ynode *item)
{
    if (parent->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        lh_ynode **ni = realloc(parent->items, nc * sizeof *ni);
        if (!ni)
            return nomem(c);
        parent->items = ni;
        if (parent->kind == LH_YNODE_MAPPING) {
            lh_ynode **nk = realloc(parent->keys, nc * sizeof *nk);
            if (!nk)
                return nomem(c);
            parent->keys = nk;
        }
        *cap = nc;
    }
    if (parent->kind == LH_YNODE_MAPPING)
        parent->keys[parent->n] = key;
    parent->items[parent->n] = item;
    parent->n++;
    return LH_OK;
}

/* Builds the node that starts with *ev (consumed here: deleted before return). */
static lh_status build_node(yt_ctx *c, yaml_event_t *ev, int depth, lh_ynode **out)
{
    *out = NULL;
    lh_status st = LH_OK;
    if (ev->type == YAML_ALIAS_EVENT) {
        st = lh_err_set(c->err, LH_E_CONFIG,
                        "%s:%d:%d: YAML aliases (*%s) and anchors are not supported in a config "
                        "file; write the value out",
                        c->src, ev_line(ev), ev_col(ev), (const char *)ev->data.alias.anchor);
        yaml_event_delete(ev);
        return st;
    }
    if (depth > YT_MAX_DEPTH) {
        st = lh_err_set(c->err, LH_E_CONFIG, "%s:%d:%d: YAML nested more than %d levels deep",
                        c->src, ev_line(ev), ev_col(ev), YT_MAX_DEPTH);
        yaml_event_delete(ev);
        return st;
    }
    lh_ynode *node = calloc(1, sizeof *node);
    if (!node) {
        yaml_event_delete(ev);
        return nomem(c);
    }
    node->line = ev_line(ev);
    node->column = ev_col(ev);

    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        node->kind = LH_YNODE_SCALAR;
        node->length = ev->data.scalar.length;
        node->value = malloc(node->length + 1);
        if (!node->value) {
            st = nomem(c);
            break;
        }
        memcpy(node->value, ev->data.scalar.value, node->length);
        node->value[node->length] = '\0';
        node->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        node->is_null = node->plain && plain_is_null(node->value);
        if ((st = check_anchor(c, ev, ev->data.scalar.anchor)))
            break;
        st = check_tag(c, ev, ev->data.scalar.tag, node);
        break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool is_map = ev->type == YAML_MAPPING_START_EVENT;
        node->kind = is_map ? LH_YNODE_MAPPING : LH_YNODE_SEQUENCE;
        if ((st = check_anchor(c, ev, is_map ? ev->data.mapping_start.anchor
                                             : ev->data.sequence_start.anchor)))
            break;
        if ((st = check_tag(c, ev, is_map ? ev->data.mapping_start.tag
                                          : ev->data.sequence_start.tag,
                            node)))
            break;
        yaml_event_type_t end = is_map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
        size_t cap = 0;
        for (;;) {
            yaml_event_t cev;
            if ((st = next_event(c, &cev)))
                break;
            if (cev.type == end) {
                yaml_event_delete(&cev);
                break;
            }
            lh_ynode *key = NULL, *val = NULL;
            if (is_map) {
                if ((st = build_node(c, &cev, depth + 1, &key)))
                    break;
                if (key->kind != LH_YNODE_SCALAR) {
                    st = lh_err_set(c->err, LH_E_CONFIG,
                                    "%s:%d:%d: a mapping key must be a plain scalar, got %s",
                                    c->src, key->line, key->column, lh_ynode_kind_name(key));
                    lh_ynode_free(key);
                    break;
                }
                for (size_t i = 0; i < node->n; i++)
                    if (strcmp(node->keys[i]->value, key->value) == 0) {
                        st = lh_err_set(c->err, LH_E_CONFIG,
                                        "%s:%d:%d: duplicate key '%s' (first given at %d:%d)",
                                        c->src, key->line, key->column, key->value,
                                        node->keys[i]->line, node->keys[i]->column);
                        break;
                    }
                if (st) {
                    lh_ynode_free(key);
                    break;
                }
                yaml_event_t vev;
                if ((st = next_event(c, &vev))) {
                    lh_ynode_free(key);
                    break;
                }
                if ((st = build_node(c, &vev, depth + 1, &val))) {
                    lh_ynode_free(key);
                    break;
                }
            } else {
                if ((st = build_node(c, &cev, depth + 1, &val)))
                    break;
            }
            if ((st = push_child(c, node, &cap, key, val))) {
                lh_ynode_free(key);
                lh_ynode_free(val);
                break;
            }
        }
        break;
    }
    default:
        st = lh_err_set(c->err, LH_E_INTERNAL, "%s:%d:%d: unexpected YAML event %d", c->src,
                        ev_line(ev), ev_col(ev), (int)ev->type);
        break;
    }
    yaml_event_delete(ev);
    if (st) {
        lh_ynode_free(node);
        return st;
    }
    *out = node;
    return LH_OK;
}

lh_status lh_yaml_parse(const char *text, size_t len, const char *source, lh_ynode **root,
                        lh_err *err)
{
    *root = NULL;
    yt_ctx c = {.text = text, .len = len, .src = source ? source : "<string>", .err = err};
    if (!yaml_parser_initialize(&c.parser))
        return nomem(&c);
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);

    lh_status st;
    yaml_event_t ev;
    lh_ynode *doc = NULL;
    bool seen_doc = false;
    bool done = false;
    while (!done) {
        if ((st = next_event(&c, &ev)))
            goto fail;
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT:
            yaml_event_delete(&ev);
            break;
        case YAML_STREAM_END_EVENT:
            yaml_event_delete(&ev);
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (seen_doc) {
                st = lh_err_set(err, LH_E_CONFIG,
                                "%s:%d:%d: more than one YAML document; a config file holds one",
                                c.src, ev_line(&ev), ev_col(&ev));
                yaml_event_delete(&ev);
                goto fail;
            }
            seen_doc = true;
            yaml_event_delete(&ev);
            if ((st = next_event(&c, &ev)))
                goto fail;
            if ((st = build_node(&c, &ev, 0, &doc)))
                goto fail;
            break;
        default:
            st = lh_err_set(err, LH_E_INTERNAL, "%s:%d:%d: unexpected YAML event %d", c.src,
                            ev_line(&ev), ev_col(&ev), (int)ev.type);
            yaml_event_delete(&ev);
            goto fail;
        }
    }
    yaml_parser_delete(&c.parser);
    *root = doc;
    return LH_OK;
fail:
    lh_ynode_free(doc);
    yaml_parser_delete(&c.parser);
    return st;
}
