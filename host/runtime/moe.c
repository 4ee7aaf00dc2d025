/* The mixture-of-experts block of the host API (lh_model.h's lh_moe_spec: add_moe, moe,
 * moe_ffn): the bound blocks of the model, looked up at bind, and their forward.
 *
 * The forward routes on the device (lh_k_moe_route, ids and weights into host memory), groups
 * the step's (token, slot) pairs by expert in host memory, then for each active expert in
 * ascending order gathers its tokens' rows, runs its gated MLP through the linear blocks (any
 * weight dtype: float, GGUF block types, weight-only quantized) and adds the weighted rows into
 * the output (lh_k_scatter_add_rows). Its working memory is the runner's own (grown on demand,
 * freed with the runner), not the plugin's per-step arena: the plugin does not know how many
 * tokens an expert gets. */
#include "runner_internal.h"

#include "core/err.h"
#include "core/strutil.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lh_moe_ref {
    char *module;           /* full name */
    const lh_moe_spec *spec; /* tree-owned */
    const lh_weight *router, *bias;
    /* the correction bias as the routing kernel reads it: the bound f32 tensor, or an f32
     * copy (bias_buf, the context's memory) of a bf16 / f16 one -- exact, as transformers
     * promotes it when it adds it to the f32 scores */
    lh_tensor bias_f32;
    void *bias_buf;
    const lh_weight **w;    /* [3 * n_experts]: gate, up, down of each expert */
    const lh_weight *sh[3], *sh_gate;
};

static const lh_weight *find(lh_runner *r, const char *fmt, ...) LH_PRINTF(2, 3);
static const lh_weight *find(lh_runner *r, const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return lh_runner_find_weight(r, name);
}

lh_status lh_runner_init_moe(lh_runner *r, const lh_model *m, lh_err *err)
{
    size_t n = 0;
    while (lh_model_moe_at(m, n, NULL))
        n++;
    if (n == 0)
        return LH_OK;
    r->moes = calloc(n, sizeof *r->moes);
    if (!r->moes)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *name;
        const lh_moe_spec *s = lh_model_moe_at(m, i, &name);
        lh_moe_ref *x = &r->moes[r->n_moes++];
        x->spec = s;
        x->module = lh_strdup(name);
        x->w = calloc((size_t)(3 * s->n_experts), sizeof *x->w);
        if (!x->module || !x->w)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        x->router = find(r, "%s.%s.weight", name, s->router);
        x->bias = s->correction_bias ? find(r, "%s.%s.%s", name, s->router, s->correction_bias)
                                     : NULL;
        const char *proj[3] = {s->gate_linear, s->up_linear, s->down_linear};
        for (int64_t e = 0; e < s->n_experts; e++)
            for (int k = 0; k < 3; k++)
                x->w[3 * e + k] = find(r, "%s.%s.%" PRId64 ".%s.weight", name, s->experts, e,
                                       proj[k]);
        for (int k = 0; k < 3 && s->shared_intermediate > 0; k++)
            x->sh[k] = find(r, "%s.%s.%s.weight", name, s->shared, proj[k]);
        x->sh_gate = s->shared_gate ? find(r, "%s.%s.weight", name, s->shared_gate) : NULL;
        /* the tree made every one of them: a miss is the host's own bug */
        bool ok = x->router && (!s->correction_bias || x->bias) &&
                  (!s->shared_gate || x->sh_gate);
        for (int64_t k = 0; ok && k < 3 * s->n_experts; k++)
            ok = x->w[k] != NULL;
        for (int k = 0; ok && k < 3 && s->shared_intermediate > 0; k++)
            ok = x->sh[k] != NULL;
        if (!ok)
            return lh_err_set(err, LH_E_INTERNAL, "%s: a parameter of the MoE block is not "
                              "among the bound weights", name);
        if (x->bias && x->bias->t.dtype == LH_DTYPE_F32) {
            x->bias_f32 = x->bias->t;
        } else if (x->bias) {
            const lh_tensor *b = &x->bias->t;
            const lh_dtype dt = b->dtype;
            if ((dt != LH_DTYPE_BF16 && dt != LH_DTYPE_F16) || b->ndim != 1 || x->bias->scale.data)
                return lh_err_set(err, LH_E_UNSUPPORTED, "%s.%s.%s is %s; the routing kernel "
                                  "reads an f32 correction bias (bf16 and f16 are converted)",
                                  name, s->router, s->correction_bias, lh_k_dtype_name(dt));
            lh_status st = lh_k_alloc(r->kctx, (size_t)b->shape[0] * sizeof(float),
                                      &x->bias_buf);
            if (st == LH_OK) {
                x->bias_f32 = lh_runner_view(b->device, LH_DTYPE_F32, x->bias_buf, 1, b->shape);
                st = lh_k_convert(r->kctx, b, &x->bias_f32);
            }
            if (st != LH_OK)
                return lh_err_set(err, st, "%s.%s.%s: converting the correction bias to f32: %s",
                                  name, s->router, s->correction_bias,
                                  lh_k_last_error(r->kctx));
        }
    }
    return LH_OK;
}

void lh_runner_free_moe(lh_runner *r)
{
    for (int64_t i = 0; i < r->n_moes; i++) {
        if (r->moes[i].bias_buf)
            lh_k_free(r->kctx, r->moes[i].bias_buf);
        free(r->moes[i].module);
        free(r->moes[i].w);
    }
    free(r->moes);
    if (r->moe_buf)
        lh_k_free(r->kctx, r->moe_buf);
    free(r->moe_host);
}

const lh_moe_ref *lh_runner_moe(lh_bind *bd, const char *fmt, ...)
{
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    const bool ok = lh_runner_bind_name(bd, "moe", name, sizeof name, fmt, ap);
    va_end(ap);
    if (!ok)
        return NULL;
    const lh_runner *r = bd->r;
    for (int64_t i = 0; i < r->n_moes; i++)
        if (strcmp(r->moes[i].module, name) == 0)
            return &r->moes[i];
    lh_runner_bind_fail(bd, LH_E_USAGE, "bind asked for the MoE block '%s', which the model's "
                        "tree does not have (%lld blocks built by add_moe%s%s)", name,
                        (long long)r->n_moes, r->n_moes ? ", the first " : "",
                        r->n_moes ? r->moes[0].module : "");
    return NULL;
}

/* The runner's MoE working memory: at least `bytes`, on the context's device. */
static float *moe_mem(lh_fwd *f, size_t bytes)
{
    lh_runner *r = f->r;
    if (r->moe_buf_bytes >= bytes)
        return r->moe_buf;
    if (r->moe_buf)
        lh_k_free(r->kctx, r->moe_buf);
    r->moe_buf = NULL;
    r->moe_buf_bytes = 0;
    void *p = NULL;
    if (lh_k_alloc(r->kctx, bytes, &p) != LH_OK) {
        lh_runner_fwd_fail(f, LH_E_NOMEM, "moe: %zu bytes of working memory: %s", bytes,
                           lh_k_last_error(r->kctx));
        return NULL;
    }
    r->moe_buf = p;
    r->moe_buf_bytes = bytes;
    return p;
}

static lh_tensor view2(lh_fwd *f, float *p, int64_t rows, int64_t cols)
{
    const int64_t shape[2] = {rows, cols};
    return lh_runner_view(f->r->dev, LH_DTYPE_F32, p, 2, shape);
}

/* t is a contiguous f32 [rows, cols] on the runner's device */
static bool plain_f32(const lh_fwd *f, const lh_tensor *t, int64_t cols)
{
    return t->ndim == 2 && t->dtype == LH_DTYPE_F32 && t->shape[1] == cols &&
           t->stride[1] == 1 && t->stride[0] == cols && t->data &&
           t->device.kind == f->r->dev.kind && t->device.index == f->r->dev.index;
}

static size_t al(size_t n) /* floats, rounded to 64 (256 bytes) */
{
    return (n + 63) & ~(size_t)63;
}

/* out = down(act(gate(x)) * up(x)) with w[0..2] = gate, up, down; g, u [rows, inter] */
static void gated(lh_fwd *f, const lh_moe_spec *s, const lh_weight *const *w, const lh_tensor *x,
                  lh_tensor *g, lh_tensor *u, lh_tensor *out)
{
    lh_runner_linear(f, x, w[0], NULL, g);
    lh_runner_linear(f, x, w[1], NULL, u);
    lh_runner_act_mul(f, s->act, g, u, g);
    lh_runner_linear(f, g, w[2], NULL, out);
}

lh_status lh_runner_moe_ffn(lh_fwd *f, const lh_moe_ref *m, const lh_tensor *x, lh_tensor *out)
{
    if (!f || f->err->code != LH_OK)
        return f ? f->err->code : LH_E_USAGE;
    if (!m || !x || !out)
        return lh_runner_fwd_fail(f, LH_E_USAGE, "moe_ffn: NULL %s", !m ? "block" : !x ? "x" : "out");
    const lh_moe_spec *s = m->spec;
    const int64_t T = x->shape[0], H = s->hidden, E = s->n_experts, K = s->route.top_k;
    /* out is written before any kernel would check it: check it here */
    const char *xo = (const char *)x->data, *oo = (const char *)out->data;
    const size_t bytes = (size_t)(T > 0 ? T : 0) * (size_t)H * sizeof(float);
    if (!plain_f32(f, x, H) || !plain_f32(f, out, H) || out->shape[0] != T ||
        (xo < oo + bytes && oo < xo + bytes))
        return lh_runner_fwd_fail(f, LH_E_USAGE, "moe_ffn %s: x and out must be contiguous f32 "
                                  "[T, %" PRId64 "] tensors on the step's device that do not "
                                  "overlap", m->module, H);
    if (T == 0)
        return LH_OK;
    const int64_t I = s->expert_intermediate, IS = s->shared_intermediate;
    const int64_t wide = I > IS ? I : IS;
    /* logits [T, E]; xe, ye [T, H]; g, u [T, max(I, IS)]; shared gate [T] */
    const size_t o_x = al((size_t)(T * E)), o_y = o_x + al((size_t)(T * H));
    const size_t o_g = o_y + al((size_t)(T * H)), o_u = o_g + al((size_t)(T * wide));
    const size_t o_s = o_u + al((size_t)(T * wide)), total = o_s + al((size_t)T);
    float *mem = moe_mem(f, total * sizeof(float));
    /* host (the runner's, grown on demand, so a step allocates nothing once it has run at
     * its size): order, rows [T * K | T] and counts, cursors [E + 1 | E] as int64; ids [T * K];
     * weights [T * K] and scales [T] */
    const size_t TK = (size_t)(T * K), n64 = TK + (size_t)T + 2 * (size_t)E + 1;
    const size_t hbytes = n64 * 8 + TK * 4 + (TK + (size_t)T) * 4;
    lh_runner *r = f->r;
    if (mem && r->moe_host_bytes < hbytes) {
        void *p = realloc(r->moe_host, hbytes);
        if (p) {
            r->moe_host = p;
            r->moe_host_bytes = hbytes;
        }
    }
    if (!mem || r->moe_host_bytes < hbytes) {
        if (mem)
            lh_runner_fwd_fail(f, LH_E_NOMEM, "moe_ffn %s: out of host memory (%lld tokens)",
                               m->module, (long long)T);
        return f->err->code;
    }
    int64_t *order = r->moe_host, *rows = order + TK, *cnt = rows + T, *at = cnt + E + 1;
    int32_t *ids = (int32_t *)(at + E);
    float *wts = (float *)(ids + TK), *sc = wts + TK;
    memset(cnt, 0, ((size_t)E + 1) * sizeof *cnt);
    lh_tensor logits = view2(f, mem, T, E);
    lh_runner_linear(f, x, m->router, NULL, &logits);
    if (f->err->code != LH_OK)
        return f->err->code;
    lh_status st = lh_k_moe_route(f->kctx, &logits, m->bias ? &m->bias_f32 : NULL, &s->route, ids,
                                  wts);
    if (st != LH_OK) {
        lh_runner_fwd_fail(f, st, "moe %s: %s", m->module, lh_k_last_error(f->kctx));
        return f->err->code;
    }
    /* (token, slot) pairs by expert, tokens ascending within each: a counting sort */
    for (int64_t i = 0; i < T * K; i++) {
        if (ids[i] < 0 || ids[i] >= E) { /* the kernel's contract; never trusted blindly */
            lh_runner_fwd_fail(f, LH_E_INTERNAL, "moe %s: routing returned expert %d of %lld",
                               m->module, (int)ids[i], (long long)E);
            return f->err->code;
        }
        cnt[ids[i] + 1]++;
    }
    for (int64_t e = 0; e < E; e++)
        cnt[e + 1] += cnt[e];
    memcpy(at, cnt, (size_t)E * sizeof *at);
    for (int64_t i = 0; i < T * K; i++)
        order[at[ids[i]]++] = i;
    if ((st = lh_k_memzero(f->kctx, out->data, (size_t)(T * H) * sizeof(float))) != LH_OK) {
        lh_runner_fwd_fail(f, st, "moe %s: %s", m->module, lh_k_last_error(f->kctx));
        return f->err->code;
    }
    for (int64_t e = 0; e < E && f->err->code == LH_OK; e++) {
        const int64_t n = cnt[e + 1] - cnt[e];
        if (n == 0)
            continue; /* its weights are not read */
        for (int64_t j = 0; j < n; j++) {
            const int64_t i = order[cnt[e] + j];
            rows[j] = i / K;
            sc[j] = wts[i];
        }
        lh_tensor xe = view2(f, mem + o_x, n, H), ye = view2(f, mem + o_y, n, H);
        lh_tensor g = view2(f, mem + o_g, n, I), u = view2(f, mem + o_u, n, I);
        if ((st = lh_k_gather_rows(f->kctx, x, rows, n, &xe)) != LH_OK) {
            lh_runner_fwd_fail(f, st, "moe %s: %s", m->module, lh_k_last_error(f->kctx));
            break;
        }
        gated(f, s, m->w + 3 * e, &xe, &g, &u, &ye);
        if (f->err->code == LH_OK &&
            (st = lh_k_scatter_add_rows(f->kctx, &ye, rows, sc, out)) != LH_OK)
            lh_runner_fwd_fail(f, st, "moe %s: %s", m->module, lh_k_last_error(f->kctx));
    }
    if (IS > 0 && f->err->code == LH_OK) {
        lh_tensor g = view2(f, mem + o_g, T, IS), u = view2(f, mem + o_u, T, IS);
        lh_tensor ys = view2(f, mem + o_y, T, H);
        gated(f, s, m->sh, x, &g, &u, &ys);
        if (m->sh_gate && f->err->code == LH_OK) {
            /* out += sigmoid(shared_gate(x)) * shared(x), row by row */
            lh_tensor gt = view2(f, mem + o_s, T, 1);
            lh_runner_linear(f, x, m->sh_gate, NULL, &gt);
            lh_tensor hs = lh_runner_view((lh_device){LH_DEVICE_CPU, 0}, LH_DTYPE_F32, sc, 2,
                                          gt.shape);
            if (f->err->code == LH_OK && (st = lh_k_copy(f->kctx, &hs, &gt)) != LH_OK)
                lh_runner_fwd_fail(f, st, "moe %s: %s", m->module, lh_k_last_error(f->kctx));
            for (int64_t t = 0; t < T && f->err->code == LH_OK; t++) {
                sc[t] = 1.0f / (1.0f + expf(-sc[t]));
                rows[t] = t;
            }
            if (f->err->code == LH_OK &&
                (st = lh_k_scatter_add_rows(f->kctx, &ys, rows, sc, out)) != LH_OK)
                lh_runner_fwd_fail(f, st, "moe %s: %s", m->module, lh_k_last_error(f->kctx));
        } else if (f->err->code == LH_OK) {
            lh_runner_add(f, out, &ys);
        }
    }
    return f->err->code;
}
