/* The bind-phase lookups and the forward blocks of the host API table (lh_plugin.h): what a
 * model plugin's bind and forward compose. Every function is sticky on its context (lh_bind,
 * lh_fwd): the first error is kept and later calls return it at once. */
#include "runner_internal.h"

#include "api/host_api_table.h"
#include "core/err.h"
#include "core/strutil.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* ---- bind ----------------------------------------------------------------------------------- */

/* The sticky contexts' one rule: the first error is kept ("failing with ok" is a plugin bug
 * and still fails), its message after `prefix` (may be ""), cut to fit. */
static lh_status sticky_failv(lh_err *e, const char *prefix, lh_status code, const char *fmt,
                              va_list ap)
{
    if (e->code != LH_OK)
        return e->code;
    if (code == LH_OK)
        code = LH_E_INTERNAL;
    const size_t n = sizeof e->msg;
    int k = snprintf(e->msg, n, "%s", prefix);
    if (k < 0)
        k = 0;
    if ((size_t)k < n)
        vsnprintf(e->msg + k, n - (size_t)k, fmt, ap);
    e->code = code;
    return code;
}

lh_status lh_runner_bind_fail(lh_bind *bd, lh_status code, const char *fmt, ...)
{
    if (!bd)
        return code;
    va_list ap;
    va_start(ap, fmt);
    lh_status st = sticky_failv(&bd->err, "", code, fmt, ap);
    va_end(ap);
    return st;
}

lh_status lh_runner_bind_status(lh_bind *bd)
{
    return bd ? bd->err.code : LH_E_USAGE;
}

static int by_name_cmp(const void *a, const void *b)
{
    return strcmp((*(lh_weight *const *)a)->name, (*(lh_weight *const *)b)->name);
}

bool lh_runner_index_weights(lh_runner *r)
{
    free(r->by_name);
    r->by_name = malloc((size_t)(r->n_weights ? r->n_weights : 1) * sizeof *r->by_name);
    if (!r->by_name)
        return false;
    for (int64_t i = 0; i < r->n_weights; i++)
        r->by_name[i] = &r->weights[i];
    qsort(r->by_name, (size_t)r->n_weights, sizeof *r->by_name, by_name_cmp);
    return true;
}

lh_weight *lh_runner_find_weight(const lh_runner *r, const char *name)
{
    int64_t lo = 0, hi = r->by_name ? r->n_weights : 0;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int c = strcmp(r->by_name[mid]->name, name);
        if (c == 0)
            return r->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const lh_weight *find_weight(lh_bind *bd, bool required, const char *fmt, va_list ap)
{
    if (!bd || bd->err.code != LH_OK)
        return NULL;
    char name[512];
    int n = vsnprintf(name, sizeof name, fmt, ap);
    if (n < 0 || (size_t)n >= sizeof name) {
        lh_runner_bind_fail(bd, LH_E_USAGE, "weight: a name longer than %zu bytes",
                            sizeof name - 1);
        return NULL;
    }
    const lh_runner *r = bd->r;
    const lh_weight *w = lh_runner_find_weight(r, name);
    if (w)
        return w;
    if (required) {
        const char **names = malloc((size_t)(r->n_weights ? r->n_weights : 1) * sizeof *names);
        for (int64_t i = 0; names && i < r->n_weights; i++)
            names[i] = r->weights[i].name;
        const char *near = names ? lh_nearest(name, names, (size_t)r->n_weights) : NULL;
        lh_runner_bind_fail(bd, LH_E_USAGE, "bind asked for the parameter '%s', which the "
                            "model's tree (%lld parameters) does not have%s%s%s", name,
                            (long long)r->n_weights, near ? "; nearest: '" : "",
                            near ? near : "", near ? "'" : "");
        free(names);
    }
    return NULL;
}

const lh_weight *lh_runner_weight(lh_bind *bd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const lh_weight *w = find_weight(bd, true, fmt, ap);
    va_end(ap);
    return w;
}

const lh_weight *lh_runner_weight_opt(lh_bind *bd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const lh_weight *w = find_weight(bd, false, fmt, ap);
    va_end(ap);
    return w;
}

bool lh_runner_bind_name(lh_bind *bd, const char *what, char *name, size_t size, const char *fmt,
                         va_list ap)
{
    if (!bd || bd->err.code != LH_OK)
        return false;
    const int n = vsnprintf(name, size, fmt, ap);
    if (n < 0 || (size_t)n >= size) {
        lh_runner_bind_fail(bd, LH_E_USAGE, "%s: a name longer than %zu bytes", what, size - 1);
        return false;
    }
    return true;
}

const lh_attn_ref *lh_runner_attention(lh_bind *bd, const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    const bool ok = lh_runner_bind_name(bd, "attention", name, sizeof name, fmt, ap);
    va_end(ap);
    if (!ok)
        return NULL;
    const lh_runner *r = bd->r;
    for (int64_t i = 0; i < r->n_attn; i++)
        if (strcmp(r->attn[i].module, name) == 0)
            return &r->attn[i];
    const char **names = malloc((size_t)(r->n_attn ? r->n_attn : 1) * sizeof *names);
    for (int64_t i = 0; names && i < r->n_attn; i++)
        names[i] = r->attn[i].module;
    const char *near = names ? lh_nearest(name, names, (size_t)r->n_attn) : NULL;
    lh_runner_bind_fail(bd, LH_E_USAGE, "bind asked for the attention layer '%s', which is not "
                        "in the model's attention-layer table (%lld layers registered by "
                        "add_attention%s%s%s)", name, (long long)r->n_attn,
                        near ? "; nearest: '" : "", near ? near : "", near ? "'" : "");
    free(names);
    return NULL;
}

const lh_tensor *lh_runner_weight_tensor(const lh_weight *w)
{
    /* a weight with a separate scale is no tensor of its own */
    return w && !w->scale.data ? &w->t : NULL;
}

const lh_weight *lh_runner_weight_rows(lh_bind *bd, const lh_weight *w, int64_t start,
                                       int64_t count)
{
    if (!bd || bd->err.code != LH_OK)
        return NULL;
    if (!w) {
        lh_runner_bind_fail(bd, LH_E_USAGE, "weight_rows: NULL weight");
        return NULL;
    }
    const lh_tensor *t = &w->t;
    const int64_t rows = t->ndim >= 1 ? t->shape[0] : 0;
    const int64_t bits = lh_k_dtype_bits(t->dtype);
    if (t->ndim < 1 || t->ndim > 2 || bits % 8 != 0 || bits == 0) {
        lh_runner_bind_fail(bd, LH_E_USAGE, "weight_rows: %s (%s, %d-D) has no row view: it "
                            "must be a 1-D or 2-D weight of whole bytes per element (not a "
                            "block-quantized or int4 one)", w->name,
                            lh_k_dtype_name(t->dtype) ? lh_k_dtype_name(t->dtype) : "?",
                            t->ndim);
        return NULL;
    }
    if (w->scale.data && (start % w->block_rows != 0 ||
                          (count % w->block_rows != 0 && start + count != rows))) {
        lh_runner_bind_fail(bd, LH_E_USAGE, "weight_rows: rows [%lld, %lld) of %s cut its "
                            "scale blocks of %lld rows", (long long)start,
                            (long long)(start + count), w->name, (long long)w->block_rows);
        return NULL;
    }
    if (start < 0 || count <= 0 || start > rows || count > rows - start) {
        lh_runner_bind_fail(bd, LH_E_USAGE, "weight_rows: rows [%lld, %lld) of %s, which has "
                            "%lld rows", (long long)start, (long long)start + count, w->name,
                            (long long)rows);
        return NULL;
    }
    lh_runner *r = bd->r;
    lh_weight *v = calloc(1, sizeof *v);
    lh_weight **grown = v ? realloc(r->views, (size_t)(r->n_views + 1) * sizeof *r->views)
                          : NULL;
    const size_t n = strlen(w->name) + 48;
    if (grown)
        r->views = grown;
    if (v)
        v->name = malloc(n);
    if (!v || !grown || !v->name) {
        if (v)
            free(v->name);
        free(v);
        lh_runner_bind_fail(bd, LH_E_NOMEM, "weight_rows: out of memory");
        return NULL;
    }
    snprintf(v->name, n, "%s[%lld:%lld]", w->name, (long long)start,
             (long long)(start + count));
    v->t = *t;
    v->t.shape[0] = count;
    v->t.data = (char *)t->data + (size_t)(start * t->stride[0]) * (size_t)(bits / 8);
    if (w->scale.data) { /* the rows' scales with them (per-row blocks: always whole) */
        v->scale = w->scale;
        v->block_rows = w->block_rows;
        v->block_cols = w->block_cols;
        v->scale.shape[0] = (count + w->block_rows - 1) / w->block_rows;
        v->scale.data = (char *)w->scale.data +
                        (size_t)(start / w->block_rows * w->scale.stride[0]) *
                            (size_t)(lh_k_dtype_bits(w->scale.dtype) / 8);
    }
    r->views[r->n_views++] = v;
    return v;
}

/* ---- forward -------------------------------------------------------------------------------- */

lh_status lh_runner_fwd_fail(lh_fwd *f, lh_status code, const char *fmt, ...)
{
    if (!f)
        return code;
    /* "ARCH: WHERE: message" */
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s: %s%s", f->r->arch, f->where, f->where[0] ? ": " : "");
    va_list ap;
    va_start(ap, fmt);
    lh_status st = sticky_failv(f->err, prefix, code, fmt, ap);
    va_end(ap);
    return st;
}

lh_status lh_runner_fwd_status(lh_fwd *f)
{
    return f ? f->err->code : LH_E_USAGE;
}

const lh_attn_step *lh_runner_fwd_step(lh_fwd *f)
{
    return f ? f->step : NULL;
}

lh_kctx *lh_runner_fwd_kctx(lh_fwd *f)
{
    return f ? f->kctx : NULL;
}

void lh_runner_fwd_where(lh_fwd *f, const char *fmt, ...)
{
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->where, sizeof f->where, fmt, ap);
    va_end(ap);
}

/* A kernel's status as the step's: its message, naming the block. */
static lh_status kernel(lh_fwd *f, lh_status st, const char *block)
{
    if (st == LH_OK)
        return LH_OK;
    return lh_runner_fwd_fail(f, st, "%s: %s", block, lh_k_last_error(f->kctx));
}

static bool usable(lh_fwd *f)
{
    return f && f->err->code == LH_OK;
}

/* what: "scratch request N" or the block taking its own room, for the message */
static lh_tensor take(lh_fwd *f, int64_t rows, int64_t cols, const char *what)
{
    lh_tensor none = {0};
    if (!usable(f))
        return none;
    if (rows <= 0 || cols <= 0 || rows > INT64_MAX / cols ||
        rows * cols > (int64_t)(SIZE_MAX / 8 / sizeof(float))) {
        lh_runner_fwd_fail(f, LH_E_USAGE, "scratch [%lld, %lld]: dimensions must be > 0 and "
                           "their product representable", (long long)rows, (long long)cols);
        return none;
    }
    size_t bytes = (size_t)(rows * cols) * sizeof(float);
    bytes = (bytes + LH_SCRATCH_ALIGN - 1) / LH_SCRATCH_ALIGN * LH_SCRATCH_ALIGN;
    lh_runner *r = f->r;
    if (bytes > r->arena_bytes - f->arena_used) {
        lh_runner_fwd_fail(f, LH_E_INTERNAL, "%s [%lld, %lld] (%zu bytes) "
                           "exceeds the step's arena (%zu of %zu bytes used) sized from the "
                           "plugin's lh_forward_info (%lld B/token, %lld B/row, %lld requests) "
                           "for %lld tokens: the plugin under-declared its scratch",
                           what, (long long)rows, (long long)cols, bytes,
                           f->arena_used, r->arena_bytes,
                           (long long)r->info.scratch_bytes_per_token,
                           (long long)r->info.scratch_bytes_per_row,
                           (long long)r->info.scratch_requests, (long long)f->step->n_tokens);
        return none;
    }
    int64_t shape[2] = {rows, cols};
    lh_tensor t = lh_runner_view(r->dev, LH_DTYPE_F32, (char *)r->arena + f->arena_used, 2,
                                 shape);
    f->arena_used += bytes;
    return t;
}

lh_tensor lh_runner_scratch(lh_fwd *f, int64_t rows, int64_t cols)
{
    if (f && usable(f) && f->requests >= f->r->info.scratch_requests) {
        lh_runner_fwd_fail(f, LH_E_INTERNAL, "scratch request %lld beyond the %lld the plugin "
                           "declared (lh_forward_info.scratch_requests)",
                           (long long)f->requests + 1, (long long)f->r->info.scratch_requests);
        return (lh_tensor){0};
    }
    char what[48];
    snprintf(what, sizeof what, "scratch request %lld", f ? (long long)f->requests + 1 : 0LL);
    lh_tensor t = take(f, rows, cols, what);
    if (f && t.data)
        f->requests++;
    return t;
}

lh_status lh_runner_embed(lh_fwd *f, const lh_weight *table, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!table || !out)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "embed: NULL %s", !table ? "table" : "out");
    return kernel(f, lh_k_embedding(f->kctx, &table->t, f->tokens, f->step->n_tokens, out),
                  "embedding");
}

lh_status lh_runner_linear(lh_fwd *f, const lh_tensor *x, const lh_weight *w,
                           const lh_weight *bias, lh_tensor *y)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!x || !w || !y)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "linear: NULL %s",
                                  !x ? "x" : !w ? "weight" : "y");
    lh_status st = w->scale.data
                       ? lh_k_matmul_scaled(f->kctx, x, &w->t, &w->scale, w->block_rows,
                                            w->block_cols, bias ? &bias->t : NULL, y)
                       : lh_k_matmul(f->kctx, x, &w->t, bias ? &bias->t : NULL, y);
    if (st == LH_OK)
        return LH_OK;
    return lh_runner_fwd_fail(f, st, "linear %s: %s", w->name, lh_k_last_error(f->kctx));
}

lh_status lh_runner_rmsnorm(lh_fwd *f, const lh_tensor *x, const lh_weight *w, float eps,
                            float offset, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!x || !w || !out)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "rmsnorm: NULL argument");
    lh_status st = lh_k_rmsnorm(f->kctx, x, &w->t, eps, offset, out);
    if (st == LH_OK)
        return LH_OK;
    return lh_runner_fwd_fail(f, st, "rmsnorm %s: %s", w->name, lh_k_last_error(f->kctx));
}

lh_status lh_runner_residual_rmsnorm(lh_fwd *f, lh_tensor *residual, const lh_tensor *x,
                                const lh_weight *w, float eps, float offset, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!residual || !x || !w || !out)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "add_rmsnorm: NULL argument");
    lh_status st = lh_k_add_rmsnorm(f->kctx, residual, x, &w->t, eps, offset, out);
    if (st == LH_OK)
        return LH_OK;
    return lh_runner_fwd_fail(f, st, "residual add + rmsnorm %s: %s", w->name,
                              lh_k_last_error(f->kctx));
}

lh_status lh_runner_act_mul(lh_fwd *f, lh_activation act, const lh_tensor *gate,
                            const lh_tensor *up, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    switch (act) {
    case LH_ACT_SILU:
        return kernel(f, lh_k_silu_mul(f->kctx, gate, up, out), "silu * up");
    case LH_ACT_GELU_TANH:
        return kernel(f, lh_k_gelu_tanh_mul(f->kctx, gate, up, out), "gelu_tanh * up");
    case LH_ACT_GELU:
        return kernel(f, lh_k_gelu_mul(f->kctx, gate, up, out), "gelu * up");
    }
    return lh_runner_fwd_fail(f, LH_E_USAGE, "act_mul: activation %d is not an lh_activation "
                              "(LH_ACT_SILU 0, LH_ACT_GELU_TANH 1, LH_ACT_GELU 2)", (int)act);
}

lh_status lh_runner_scale(lh_fwd *f, lh_tensor *x, float s)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    return kernel(f, lh_k_scale(f->kctx, x, s), "scale");
}

/* x [T, width] must be [T, heads * head_dim] for attend; returns its [T, heads, D] view. */
static bool heads_view(lh_fwd *f, const char *what, const lh_tensor *x, int64_t heads, int64_t D,
                       lh_tensor *out)
{
    const int64_t T = f->step->n_tokens;
    if (!x || x->dtype != LH_DTYPE_F32 || x->ndim != 2 || x->shape[0] != T ||
        x->shape[1] != heads * D || x->stride[1] != 1 || x->stride[0] != heads * D) {
        char got[96] = "NULL";
        if (x)
            snprintf(got, sizeof got, "a %s tensor of %d dims [%lld, %lld] with strides "
                     "[%lld, %lld]", lh_dtype_name(x->dtype) ? lh_dtype_name(x->dtype) : "?",
                     x->ndim, (long long)x->shape[0], (long long)(x->ndim > 1 ? x->shape[1] : 0),
                     (long long)x->stride[0], (long long)(x->ndim > 1 ? x->stride[1] : 0));
        lh_runner_fwd_fail(f, LH_E_USAGE, "attend: %s must be a contiguous float32 [%lld, %lld] "
                           "tensor (tokens x %lld heads x %lld); got %s", what, (long long)T,
                           (long long)(heads * D), (long long)heads, (long long)D, got);
        return false;
    }
    int64_t shape[3] = {T, heads, D};
    *out = lh_runner_view(x->device, LH_DTYPE_F32, x->data, 3, shape);
    return true;
}

/* RoPE per sequence with its own length (dynamic scaling reads it). */
static lh_status rotate(lh_fwd *f, const lh_rope *rope, lh_tensor *x3)
{
    const lh_attn_step *step = f->step;
    const int64_t nh = x3->shape[1], D = x3->shape[2];
    for (int64_t s = 0; s < step->n_seqs; s++) {
        if (step->n_new[s] == 0) /* nothing to rotate (and no empty view to pass) */
            continue;
        int64_t shape[3] = {step->n_new[s], nh, D};
        lh_tensor part = lh_runner_view(x3->device, LH_DTYPE_F32,
                                        (float *)x3->data + step->token_start[s] * nh * D, 3,
                                        shape);
        int64_t seq_len = step->ctx_len[s] + step->n_new[s];
        lh_status st = lh_k_rope_apply(f->kctx, rope, &part,
                                       step->positions + step->token_start[s], seq_len);
        if (st != LH_OK)
            return kernel(f, st, "rope");
    }
    return LH_OK;
}

lh_status lh_runner_attend(lh_fwd *f, const lh_attn_ref *a, lh_tensor *q, lh_tensor *k,
                           lh_tensor *v, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!a)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "attend: NULL attention layer");
    const lh_attention_spec *s = a->spec;
    if (s->mla)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "attend: %s is multi-head latent attention "
                                  "(use attend_mla)", a->module);
    const int64_t D = s->head_dim;
    lh_tensor q3, k3, v3, o3;
    if (!heads_view(f, "q", q, s->num_heads, D, &q3) ||
        !heads_view(f, "k", k, s->num_kv_heads, D, &k3) ||
        !heads_view(f, "v", v, s->num_kv_heads, D, &v3) ||
        !heads_view(f, "out", out, s->num_heads, D, &o3))
        return f->err->code;
    lh_runner *r = f->r;
    const bool fused = r->fused_rope && a->rope;
    if (a->rope && !fused && (rotate(f, a->rope, &q3) != LH_OK || rotate(f, a->rope, &k3)))
        return f->err->code;
    const lh_attn_forward_args args = {.struct_size = sizeof args,
                                       .kv = lh_kv_cache_layer(r->kv, a->index),
                                       .rope = fused ? a->rope : NULL};
    lh_err err; /* per layer and step: only what a failure reads is set */
    err.code = LH_OK;
    err.msg[0] = '\0';
    lh_status st = r->attn_ops->forward(a->layer, f->kctx, f->step, &args, &q3, &k3, &v3, &o3,
                                        &err);
    if (st != LH_OK)
        return lh_runner_fwd_fail(f, st, "attention: %s", err.msg);
    return LH_OK;
}

lh_status lh_runner_attend_mla(lh_fwd *f, const lh_attn_ref *a, lh_tensor *q, lh_tensor *kv_c,
                               lh_tensor *k_rope, const lh_weight *kv_b, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!a || !kv_b)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "attend_mla: NULL %s",
                                  !a ? "attention layer" : "kv_b weight");
    const lh_attention_spec *s = a->spec;
    if (!s->mla)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "attend_mla: %s is not multi-head latent "
                                  "attention (use attend)", a->module);
    const int64_t H = s->num_heads, rows = H * (s->qk_nope_head_dim + s->v_head_dim);
    lh_tensor q3, c3, r3, o3;
    if (!heads_view(f, "q", q, H, s->head_dim, &q3) ||
        !heads_view(f, "kv_c", kv_c, 1, s->kv_lora_rank, &c3) ||
        !heads_view(f, "k_rope", k_rope, 1, s->qk_rope_head_dim, &r3) ||
        !heads_view(f, "out", out, H, s->v_head_dim, &o3))
        return f->err->code;
    /* the backends read kv_b per head through views: it needs a plain float tensor */
    const lh_tensor *w = kv_b->scale.data ? NULL : &kv_b->t;
    if (!w || (w->dtype != LH_DTYPE_F32 && w->dtype != LH_DTYPE_BF16 &&
               w->dtype != LH_DTYPE_F16) ||
        w->ndim != 2 || w->shape[0] != rows || w->shape[1] != s->kv_lora_rank)
        return lh_runner_fwd_fail(
            f, LH_E_USAGE, "attend_mla %s: kv_b (%s) must be a float32, bfloat16 or float16 "
            "[%lld, %lld] weight (heads x (qk_nope_head_dim + v_head_dim), kv_lora_rank); got "
            "%s [%lld, %lld]%s", a->module, kv_b->name, (long long)rows,
            (long long)s->kv_lora_rank, lh_k_dtype_name(kv_b->t.dtype),
            (long long)kv_b->t.shape[0], (long long)(kv_b->t.ndim > 1 ? kv_b->t.shape[1] : 0),
            kv_b->scale.data ? " with a separate scale (add it as a plain parameter)" : "");
    lh_runner *r = f->r;
    const int64_t T = f->step->n_tokens;
    const lh_attn_forward_args args = {.struct_size = sizeof args,
                                       .kv = r->kv ? lh_kv_cache_layer(r->kv, a->index) : NULL,
                                       .rope = a->rope,
                                       .kv_b = w,
                                       .workspace = r->mla_ws,
                                       .workspace_bytes = T > 0 ? r->mla_ws_bytes : 0};
    lh_err err;
    err.code = LH_OK;
    err.msg[0] = '\0';
    lh_status st = r->attn_ops->forward(a->layer, f->kctx, f->step, &args, &q3, &c3, &r3, &o3,
                                        &err);
    if (st != LH_OK)
        return lh_runner_fwd_fail(f, st, "attention: %s", err.msg);
    return LH_OK;
}

lh_tensor lh_runner_output_rows(lh_fwd *f, const lh_tensor *h)
{
    lh_tensor none = {0};
    if (!usable(f))
        return none;
    if (!h || h->ndim != 2 || h->shape[0] != f->step->n_tokens) {
        lh_runner_fwd_fail(f, LH_E_USAGE, "output_rows: h must be [%lld, D]; got %s%lld dims "
                           "[%lld, ...]", (long long)f->step->n_tokens, h ? "" : "NULL, ",
                           (long long)(h ? h->ndim : 0), (long long)(h ? h->shape[0] : 0));
        return none;
    }
    if (f->n_out == 0) {
        lh_runner_fwd_fail(f, LH_E_USAGE, "output_rows: this step asks for no logits (check "
                           "that the logits tensor has rows before computing them)");
        return none;
    }
    lh_tensor rows = take(f, f->n_out, h->shape[1], "output_rows");
    if (rows.data)
        kernel(f, lh_k_gather_rows(f->kctx, h, f->out_rows, f->n_out, &rows), "output rows");
    return usable(f) ? rows : none;
}

lh_tensor lh_runner_logits(lh_fwd *f)
{
    lh_tensor none = {0};
    if (!f)
        return none;
    int64_t shape[2] = {f->n_out, f->r->info.vocab_size};
    if (f->n_out == 0) { /* a step that only fills the cache: an empty view */
        none.ndim = 2;
        none.shape[1] = f->r->info.vocab_size;
        none.device = f->r->dev;
        return none;
    }
    return lh_runner_view(f->r->dev, LH_DTYPE_F32, f->r->logits, 2, shape);
}

lh_status lh_runner_embed_positions(lh_fwd *f, const lh_weight *table, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!table || !out)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "embed_positions: NULL %s",
                                  !table ? "table" : "out");
    return kernel(f, lh_k_embedding_add(f->kctx, &table->t, f->step->positions,
                                        f->step->n_tokens, out), "position embedding");
}

lh_status lh_runner_layernorm(lh_fwd *f, const lh_tensor *x, const lh_weight *w,
                              const lh_weight *bias, float eps, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    if (!x || !w || !out)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "layernorm: NULL argument");
    lh_status st = lh_k_layernorm(f->kctx, x, &w->t, bias ? &bias->t : NULL, eps, out);
    if (st == LH_OK)
        return LH_OK;
    return lh_runner_fwd_fail(f, st, "layernorm %s: %s", w->name, lh_k_last_error(f->kctx));
}

lh_status lh_runner_add(lh_fwd *f, lh_tensor *y, const lh_tensor *x)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    return kernel(f, lh_k_add(f->kctx, y, x), "add");
}

lh_status lh_runner_act(lh_fwd *f, lh_activation act, const lh_tensor *x, lh_tensor *out)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    switch (act) {
    case LH_ACT_GELU_TANH:
        return kernel(f, lh_k_gelu_tanh(f->kctx, x, out), "gelu_tanh");
    case LH_ACT_GELU:
        return kernel(f, lh_k_gelu(f->kctx, x, out), "gelu");
    case LH_ACT_SILU:
        break;
    }
    return lh_runner_fwd_fail(f, LH_E_UNSUPPORTED, "act: activation %d has no ungated kernel "
                              "(LH_ACT_GELU_TANH 1 and LH_ACT_GELU 2 do; LH_ACT_SILU is gated "
                              "only, act_mul)", (int)act);
}

lh_status lh_runner_softcap(lh_fwd *f, lh_tensor *x, float cap)
{
    if (!usable(f))
        return f ? f->err->code : LH_E_USAGE;
    return kernel(f, lh_k_softcap(f->kctx, x, cap), "softcap");
}
