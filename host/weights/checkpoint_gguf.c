/* A GGUF file's tensors under the tree's names (checkpoint_gguf.h). */
#include "weights/checkpoint_gguf.h"

#include "core/err.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "weights/gguf.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

lh_dtype lh_dtype_of_ggml(uint32_t ggml_type)
{
    /* ggml's type ids (ggml.h enum ggml_type) */
    switch (ggml_type) {
    case 0: return LH_DTYPE_F32;
    case 1: return LH_DTYPE_F16;
    case 2: return LH_DTYPE_Q4_0;
    case 3: return LH_DTYPE_Q4_1;
    case 6: return LH_DTYPE_Q5_0;
    case 7: return LH_DTYPE_Q5_1;
    case 8: return LH_DTYPE_Q8_0;
    case 12: return LH_DTYPE_Q4_K;
    case 13: return LH_DTYPE_Q5_K;
    case 14: return LH_DTYPE_Q6_K;
    case 30: return LH_DTYPE_BF16;
    default: return LH_DTYPE_INVALID;
    }
}

/* name matches pattern, "{L}" standing for a layer index (decimal, no sign, no leading zero):
 * true and *layer set (-1 when the pattern has none). */
static bool match(const char *pattern, const char *name, long long *layer)
{
    const char *at = strstr(pattern, "{L}");
    *layer = -1;
    if (!at)
        return strcmp(pattern, name) == 0;
    const size_t pre = (size_t)(at - pattern), post = strlen(at + 3), n = strlen(name);
    if (n <= pre + post || strncmp(name, pattern, pre) != 0 ||
        strcmp(name + n - post, at + 3) != 0)
        return false;
    const char *d = name + pre, *end = name + n - post;
    if (end - d > 9 || (*d == '0' && end - d > 1))
        return false;
    long long v = 0;
    for (const char *c = d; c < end; c++) {
        if (*c < '0' || *c > '9')
            return false;
        v = v * 10 + (*c - '0');
    }
    *layer = v;
    return true;
}

/* pattern with "{L}" -> layer, and "{E}" -> expert (expert < 0: no "{E}" in pattern) */
static char *expand(const char *pattern, long long layer, long long expert)
{
    lh_strbuf b = {0};
    for (const char *p = pattern; *p;) {
        if (strncmp(p, "{L}", 3) == 0 || (expert >= 0 && strncmp(p, "{E}", 3) == 0)) {
            lh_strbuf_printf(&b, "%lld", p[1] == 'L' ? layer : expert);
            p += 3;
        } else {
            lh_strbuf_printf(&b, "%c", *p++);
        }
    }
    if (b.oom || !b.s) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

static const lh_gguf_tensor_name *find_entry(const lh_gguf_provider *p, const char *name,
                                             long long *layer)
{
    for (size_t i = 0; i < p->n_tensors; i++)
        if (match(p->tensors[i].gguf, name, layer))
            return &p->tensors[i];
    return NULL;
}

static lh_status unmapped(const lh_model_config *cfg, const char *name, lh_err *err)
{
    const lh_gguf_provider *p = cfg->gguf_provider;
    lh_strbuf b = {0};
    for (size_t i = 0; i < p->n_tensors; i++)
        lh_strbuf_printf(&b, "%s%s", i ? ", " : "", p->tensors[i].gguf);
    lh_status st = lh_err_set(err, LH_E_CONFIG,
                              "%s: tensor '%s' is not one that GGUF architecture '%s' (%s) "
                              "names; it names: %s", cfg->path, name, p->gguf_arch,
                              p->architecture, b.oom || !b.s ? "?" : b.s);
    free(b.s);
    return st;
}

/* One GGUF tensor as a checkpoint tensor named `name`. */
static lh_status fill(const lh_model_config *cfg, const lh_gguf_tensor *g, char *name,
                      lh_gguf_layout layout, lh_st_tensor *t, lh_err *err)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    t->st_dtype = LH_ST_INVALID;
    t->dtype = lh_dtype_of_ggml(g->type);
    t->stored_type = g->type_name;
    t->ndim = (int)g->n_dims;
    for (uint32_t i = 0; i < g->n_dims; i++)
        t->shape[i] = g->dims[g->n_dims - 1 - i];
    t->numel = g->n_elements;
    t->begin = g->offset;
    t->end = g->offset + g->size;
    t->data = g->size ? g->data : NULL;
    const unsigned align = t->dtype == LH_DTYPE_F32 ? 4 : t->dtype == LH_DTYPE_F16 ||
                                                          t->dtype == LH_DTYPE_BF16 ? 2 : 1;
    t->aligned = (uintptr_t)g->data % align == 0;
    t->layout = (int)layout;
    if (layout == LH_GGUF_ROPE_ROWS_Q || layout == LH_GGUF_ROPE_ROWS_K) {
        const lh_model_geometry *geo = &cfg->geo;
        const int64_t heads = layout == LH_GGUF_ROPE_ROWS_Q ? geo->num_attention_heads
                                                             : geo->num_key_value_heads;
        const int64_t rows = t->ndim ? t->shape[0] : 0;
        if (heads <= 0 || t->ndim < 1 || t->ndim > 2 || rows % (2 * heads) != 0)
            return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s' (%s): %" PRId64 " rows cannot "
                              "be the RoPE-permuted rows of %" PRId64 " %s heads", cfg->path,
                              g->name, name, rows, heads,
                              layout == LH_GGUF_ROPE_ROWS_Q ? "query" : "key/value");
        t->layout_heads = heads;
    }
    if (layout == LH_GGUF_PLUS_ONE && t->dtype != LH_DTYPE_F32)
        return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s' (%s) is stored as w + 1 in %s; "
                          "only F32 tensors can be taken back", cfg->path, g->name, name,
                          g->type_name);
    return LH_OK;
}

lh_status lh_checkpoint_open_gguf(const lh_model_config *cfg, lh_checkpoint **out, lh_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->gguf || !cfg->gguf_provider)
        return lh_err_set(err, LH_E_USAGE, "lh_checkpoint_open_gguf: not a GGUF model config");
    const lh_gguf_file *f = cfg->gguf;
    const size_t n_file = lh_gguf_tensor_count(f);
    /* stacked experts become one checkpoint tensor per expert */
    size_t n = n_file;
    for (size_t i = 0; i < n_file; i++) {
        const lh_gguf_tensor *g = lh_gguf_tensor_at(f, i);
        long long layer;
        const lh_gguf_tensor_name *e = find_entry(cfg->gguf_provider, g->name, &layer);
        if (e && e->layout == LH_GGUF_EXPERTS) {
            if (g->n_dims != 3 || g->dims[2] < 1)
                return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s' holds stacked experts and "
                                  "must be 3-D [experts, rows, cols], not %u-D", cfg->path,
                                  g->name, (unsigned)g->n_dims);
            n += (size_t)g->dims[2] - 1;
        }
    }
    lh_st_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    if (!ts)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", cfg->path);
    size_t used = 0, ignored = 0;
    lh_status st = LH_OK;
    for (size_t i = 0; i < n_file && st == LH_OK; i++) {
        const lh_gguf_tensor *g = lh_gguf_tensor_at(f, i);
        long long layer;
        const lh_gguf_tensor_name *e = find_entry(cfg->gguf_provider, g->name, &layer);
        if (!e) {
            st = unmapped(cfg, g->name, err);
            break;
        }
        if (e->layout == LH_GGUF_IGNORE) {
            lh_log(LH_LOG_DEBUG, "gguf: %s: tensor %s is not used by %s", cfg->path, g->name,
                   cfg->gguf_provider->architecture);
            ignored++;
            continue;
        }
        if (e->layout == LH_GGUF_EXPERTS) {
            /* expert x: the x-th of dims[2] equal slices, [dims[1], dims[0]] each */
            const int64_t n_ex = (int64_t)g->dims[2];
            for (int64_t x = 0; x < n_ex && st == LH_OK; x++) {
                char *name = expand(e->name, layer, x);
                if (!name) {
                    st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", cfg->path);
                    break;
                }
                st = fill(cfg, g, name, LH_GGUF_AS_STORED, &ts[used], err);
                lh_st_tensor *t = &ts[used++];
                if (st != LH_OK)
                    break;
                const uint64_t bytes = g->size / (uint64_t)n_ex;
                t->ndim = 2;
                t->shape[0] = (int64_t)g->dims[1];
                t->shape[1] = (int64_t)g->dims[0];
                t->shape[2] = 0;
                t->numel = g->n_elements / n_ex;
                t->begin = g->offset + (uint64_t)x * bytes;
                t->end = t->begin + bytes;
                t->data = g->size ? (const void *)((const unsigned char *)g->data + (uint64_t)x * bytes)
                                  : NULL;
            }
            continue;
        }
        char *name = expand(e->name, layer, -1);
        if (!name) {
            st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", cfg->path);
            break;
        }
        st = fill(cfg, g, name, e->layout, &ts[used], err);
        used++; /* the name is owned by ts[used - 1] from here on, also on failure */
    }
    if (st != LH_OK) {
        for (size_t i = 0; i < used; i++)
            free((char *)(uintptr_t)ts[i].name);
        free(ts);
        return st;
    }
    if (ignored)
        lh_log(LH_LOG_INFO, "gguf: %s: %zu tensor%s not used by %s", cfg->path, ignored,
               ignored == 1 ? "" : "s", cfg->gguf_provider->architecture);
    return lh_checkpoint_adopt(cfg->path, ts, used, out, err);
}
