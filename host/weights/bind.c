/* Binding checkpoint tensors to the module tree's parameters; the rules are documented at
 * lh_model_bind_weights in host/model/model.h. */
#include "bind.h"

#include "../core/err.h"
#include "../core/log.h"
#include "../core/strbuf.h"
#include "../model/tree_internal.h"
#include "lh_gguf.h"
#include "lh_kernels.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPORT_MAX_PER_KIND 20
#define DATA_ALIGN 64

/* ---- small helpers --------------------------------------------------------------------- */

/* name ends with one of the dotted-component suffixes ("a.b" matches "x.a.b", not "xa.b") */
static bool ends_with_components(const char *name, const char *const *suffixes, size_t count)
{
    const size_t n = strlen(name);
    for (size_t i = 0; i < count; i++) {
        size_t k = strlen(suffixes[i]);
        if (n >= k && strcmp(name + n - k, suffixes[i]) == 0 && (n == k || name[n - k - 1] == '.'))
            return true;
    }
    return false;
}

bool lh_bind_ignorable(const char *name)
{
    static const char *const suffixes[] = {"rotary_emb.inv_freq", "rotary_emb.cos_cached",
                                           "rotary_emb.sin_cached"};
    return name && ends_with_components(name, suffixes, sizeof suffixes / sizeof *suffixes);
}

static size_t elem_size(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return 4;
    case LH_DTYPE_F16:
    case LH_DTYPE_BF16: return 2;
    default: return 0;
    }
}

static const char *dtype_name(lh_dtype dt)
{
    const char *s = lh_st_dtype_name_of(dt);
    if (s)
        return s;
    switch (dt) {
    case LH_DTYPE_FP8_E4M3: return "fp8";
    case LH_DTYPE_INT8: return "int8";
    case LH_DTYPE_INT4: return "int4";
    default: return lh_k_dtype_name(dt) ? lh_k_dtype_name(dt) : "?";
    }
}

static void to_f32(const void *src, lh_dtype sd, float *dst, size_t n)
{
    if (sd == LH_DTYPE_BF16)
        lh_k_convert_bf16_to_f32(src, dst, n);
    else
        lh_k_convert_f16_to_f32(src, dst, n);
}

static void from_f32(const float *src, void *dst, lh_dtype dd, size_t n)
{
    if (dd == LH_DTYPE_BF16)
        lh_k_convert_f32_to_bf16(src, dst, n);
    else
        lh_k_convert_f32_to_f16(src, dst, n);
}

lh_status lh_bind_convert(const void *src, lh_dtype sd, void *dst, lh_dtype dd, size_t n,
                          void *scratch, lh_progress *progress, lh_err *err)
{
    size_t ss = elem_size(sd), ds = elem_size(dd);
    if (!ss || !ds)
        return lh_err_set(err, LH_E_USAGE, "cannot convert %s to %s (F32, F16, BF16 only)",
                          dtype_name(sd), dtype_name(dd));
    void *own = NULL;
    if (sd != dd && !scratch) {
        own = scratch = malloc(LH_BIND_SCRATCH_BYTES);
        if (!own)
            return lh_err_set(err, LH_E_NOMEM, "out of memory converting weights");
    }
    float *bounce = scratch;
    float *tmp = bounce ? bounce + LH_BIND_CHUNK : NULL;
    for (size_t i = 0; i < n; i += LH_BIND_CHUNK) {
        size_t c = n - i < LH_BIND_CHUNK ? n - i : LH_BIND_CHUNK;
        const unsigned char *s = (const unsigned char *)src + i * ss;
        unsigned char *d = (unsigned char *)dst + i * ds;
        if (sd == dd) {
            memcpy(d, s, c * ss);
        } else {
            if ((uintptr_t)s % ss) { /* the kernels take typed, aligned pointers */
                memcpy(bounce, s, c * ss);
                s = (const unsigned char *)bounce;
            }
            if (sd == LH_DTYPE_F32) {
                from_f32((const float *)(const void *)s, d, dd, c);
            } else if (dd == LH_DTYPE_F32) {
                to_f32(s, sd, (float *)(void *)d, c);
            } else { /* bf16 <-> f16 through f32 */
                to_f32(s, sd, tmp, c);
                from_f32(tmp, d, dd, c);
            }
        }
        if (progress)
            lh_progress_add(progress, (int64_t)(c * ds));
    }
    free(own);
    return LH_OK;
}

static void sb_shape(lh_strbuf *b, int ndim, const int64_t *shape)
{
    lh_strbuf_printf(b, "[");
    for (int i = 0; i < ndim; i++)
        lh_strbuf_printf(b, "%s%" PRId64, i ? ", " : "", shape[i]);
    lh_strbuf_printf(b, "]");
}

/* "module.param", or "param" for the root. */
static void sb_param_name(lh_strbuf *b, const lh_param *p)
{
    const char *mn = p->owner->name;
    lh_strbuf_printf(b, "%s%s%s", mn, mn[0] ? "." : "", p->name);
}

/* A param paired with a tensor (either may be NULL, by list). */
typedef struct pair {
    lh_param *p;
    const lh_st_tensor *t;
} pair;

typedef struct pairs {
    pair *a;
    size_t n, cap;
} pairs;

static bool push(pairs *v, lh_param *p, const lh_st_tensor *t)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        pair *g = realloc(v->a, cap * sizeof *g);
        if (!g)
            return false;
        v->a = g;
        v->cap = cap;
    }
    v->a[v->n].p = p;
    v->a[v->n].t = t;
    v->n++;
    return true;
}

/* The shapes agree; for a GGUF tensor (no safetensors file) also when they differ only by
 * leading dimensions of 1: ggml pads every shape with trailing ne = 1, so a converter may
 * store the tree's [1, H] as [H] (llama.cpp's qwen2moe ffn_gate_inp_shexp). */
static bool same_shape(const lh_param *p, const lh_st_tensor *t)
{
    if (p->ndim == t->ndim) {
        for (int i = 0; i < p->ndim; i++)
            if (p->shape[i] != t->shape[i])
                return false;
        return true;
    }
    if (t->file)
        return false;
    int a = 0, b = 0;
    while (a < p->ndim && p->shape[a] == 1 && p->ndim - a > t->ndim)
        a++;
    while (b < t->ndim && t->shape[b] == 1 && t->ndim - b > p->ndim)
        b++;
    if (p->ndim - a != t->ndim - b)
        return false;
    for (int i = 0; a + i < p->ndim; i++)
        if (p->shape[a + i] != t->shape[b + i])
            return false;
    return true;
}

/* ---- the mismatch report ----------------------------------------------------------------- */

enum { K_MISSING, K_UNEXPECTED, K_SHAPE, K_DTYPE, K_COUNT };

typedef struct report {
    pairs kind[K_COUNT];
} report;

static void report_entry(lh_strbuf *b, int kind, const pair *e)
{
    switch (kind) {
    case K_MISSING:
        sb_param_name(b, e->p);
        break;
    case K_UNEXPECTED:
        lh_strbuf_printf(b, "%s", e->t->name);
        break;
    case K_SHAPE:
        lh_strbuf_printf(b, "%s expected ", e->t->name);
        sb_shape(b, e->p->ndim, e->p->shape);
        lh_strbuf_printf(b, ", found ");
        sb_shape(b, e->t->ndim, e->t->shape);
        break;
    case K_DTYPE:
        if (e->t->stored_type) /* a GGUF tensor: ggml's type name */
            lh_strbuf_printf(b, "unsupported ggml type %s for tensor %s (this build reads F32, "
                             "F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                             e->t->stored_type, e->t->name);
        else
            lh_strbuf_printf(b, "unsupported dtype %s for tensor %s",
                             lh_st_dtype_name(e->t->st_dtype), e->t->name);
        break;
    }
}

static const char *const KIND_NAMES[K_COUNT] = {"missing", "unexpected", "mis-shaped",
                                                "unsupported dtype"};

static void format_report(lh_strbuf *b, const lh_model *m, const lh_checkpoint *ck, const report *r,
                          size_t limit, bool nothing_matched)
{
    lh_strbuf_printf(b, "%s: checkpoint %s does not match the model:", m->provider,
           lh_checkpoint_path(ck));
    bool first = true;
    for (int k = 0; k < K_COUNT; k++)
        if (r->kind[k].n) {
            lh_strbuf_printf(b, "%s %zu %s", first ? "" : ",", r->kind[k].n, KIND_NAMES[k]);
            first = false;
        }
    for (int k = 0; k < K_COUNT; k++) {
        const pairs *v = &r->kind[k];
        if (!v->n)
            continue;
        lh_strbuf_printf(b, "\n  %s (%zu): ", KIND_NAMES[k], v->n);
        size_t shown = v->n < limit ? v->n : limit;
        for (size_t i = 0; i < shown; i++) {
            if (i)
                lh_strbuf_printf(b, ", ");
            report_entry(b, k, &v->a[i]);
        }
        if (shown < v->n)
            lh_strbuf_printf(b, ", ... and %zu more", v->n - shown);
        if (k == K_DTYPE && !v->a[0].t->stored_type) /* GGUF entries list their own */
            lh_strbuf_printf(b, "; supported: F32, F16, BF16");
    }
    if (nothing_matched)
        lh_strbuf_printf(b, "\n  no parameter name matched any tensor: is this a checkpoint of another "
                  "architecture, or does it use another name prefix?");
    if (r->kind[K_MISSING].n + r->kind[K_UNEXPECTED].n > 2 * limit)
        lh_strbuf_printf(b, "\n  (LLMHOST_LOG=debug lists every entry)");
}

static lh_status fail_report(const lh_model *m, const lh_checkpoint *ck, const report *r,
                             bool nothing_matched, lh_err *err)
{
    for (int k = 0; k < K_COUNT; k++) /* the full lists, for LLMHOST_LOG=debug */
        for (size_t i = 0; i < r->kind[k].n; i++) {
            lh_strbuf e = {0};
            report_entry(&e, k, &r->kind[k].a[i]);
            lh_log(LH_LOG_DEBUG, "weights: %s: %s", KIND_NAMES[k], e.s ? e.s : "?");
            free(e.s);
        }
    /* Leave room in the message for the callers' context prefixes. */
    const size_t budget = sizeof(((lh_err *)0)->msg) - 400;
    static const size_t limits[] = {REPORT_MAX_PER_KIND, 10, 5, 3, 1};
    lh_strbuf b = {0};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        b.len = 0;
        b.oom = false;
        format_report(&b, m, ck, r, limits[i], nothing_matched);
        if (b.oom || b.len < budget)
            break;
    }
    lh_status st = b.oom || !b.s
                       ? lh_err_set(err, LH_E_NOMEM, "%s: out of memory reporting a checkpoint "
                                    "mismatch", m->provider)
                       : lh_err_set(err, LH_E_CONFIG, "%s", b.s);
    free(b.s);
    return st;
}

/* ---- binding ------------------------------------------------------------------------------ */

static void unbind(lh_model *m)
{
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p)) {
        if (p->data_owned)
            free(p->data);
        p->data = NULL;
        p->data_owned = false;
    }
}

/* Looks up the tensor named after p, or (p under the tree's base model) the same name
 * without the base model's prefix, as a checkpoint of the base model alone spells it.
 * `name` is scratch. */
static const lh_st_tensor *find_for(const lh_checkpoint *ck, const lh_param *p, lh_strbuf *name,
                                    size_t *index)
{
    name->len = 0;
    sb_param_name(name, p);
    if (name->oom)
        return NULL;
    const lh_st_tensor *t = lh_checkpoint_find(ck, name->s, index);
    const lh_module *base = p->owner->build->base_model;
    if (t || !base)
        return t;
    const size_t k = strlen(base->name);
    if (strncmp(name->s, base->name, k) != 0 || name->s[k] != '.')
        return NULL;
    return lh_checkpoint_find(ck, name->s + k + 1, index);
}

/* A tensor name ending with one of the model's ignore_tensors suffixes. */
static bool model_ignores(const lh_build *b, const char *name)
{
    return ends_with_components(name, b->ignore, b->n_ignore);
}

/* A GGUF tensor stored in another layout than the tree's (lh_gguf_layout), copied into buf as
 * the tree has it. Rows move whole, so block-quantized rows need no decoding. */
static lh_status apply_layout(const lh_st_tensor *t, const lh_param *p, void *buf, int64_t bytes,
                              lh_progress *pg, lh_err *err)
{
    if (t->dtype != p->dtype)
        return lh_err_set(err, LH_E_USAGE, "%s is stored as %s, the tree asks for %s: a GGUF "
                          "tensor's layout is taken back only in its stored type", t->name,
                          dtype_name(t->dtype), dtype_name(p->dtype));
    const unsigned char *src = t->data;
    unsigned char *dst = buf;
    if (t->layout == LH_GGUF_PLUS_ONE) { /* checkpoint_gguf.c admits F32 only */
        for (int64_t i = 0; i < p->numel; i++) {
            float v;
            memcpy(&v, src + 4 * i, 4);
            v -= 1.0f;
            memcpy(dst + 4 * i, &v, 4);
        }
    } else { /* LH_GGUF_ROPE_ROWS_Q / _K: per head, GGUF row 2i + j is row j * hd / 2 + i */
        const int64_t rows = p->ndim ? p->shape[0] : 1;
        const size_t row_bytes = (size_t)(bytes / rows);
        const int64_t hd = rows / t->layout_heads, half = hd / 2;
        for (int64_t h = 0; h < t->layout_heads; h++)
            for (int64_t i = 0; i < half; i++)
                for (int64_t j = 0; j < 2; j++)
                    memcpy(dst + (size_t)(h * hd + j * half + i) * row_bytes,
                           src + (size_t)(h * hd + 2 * i + j) * row_bytes, row_bytes);
    }
    lh_progress_add(pg, bytes);
    return LH_OK;
}

/* A weight the quant config quantizes here: its scale is derived. */
static bool quantizes_at_load(const lh_param *p)
{
    return p->scale && p->scale->derived;
}

/* Rows per quantization chunk: 64 rows of f32 at a time (a few MiB for the widest layers),
 * whatever the source type. */
#define QUANT_CHUNK_ROWS 64

/* t (f32 / bf16 / f16, p's shape [out, in]) quantized into wbuf (p's format) and a fresh
 * buffer for p's scale param (lh_k_quantize_scaled), in chunks of rows: the scales are per
 * row or per group of a row (block_rows 1), so chunks are independent. */
static lh_status quantize_at_load(lh_kctx **kc, const lh_st_tensor *t, lh_param *p, void *wbuf,
                                  lh_progress *pg, lh_err *err)
{
    lh_param *sc = p->scale;
    if (t->dtype != LH_DTYPE_F32 && t->dtype != LH_DTYPE_BF16 && t->dtype != LH_DTYPE_F16)
        return lh_err_set(err, LH_E_UNSUPPORTED, "quantizing %s at load needs a float32, "
                          "bfloat16 or float16 tensor, not %s", t->name, dtype_name(t->dtype));
    if (!*kc && !(*kc = lh_k_ctx_create(0, (lh_device){LH_DEVICE_CPU, 0})))
        return lh_err_set(err, LH_E_NOMEM, "cannot create the quantizer's kernel context: %s",
                          lh_k_last_error(NULL));
    const size_t salloc = ((size_t)sc->bytes + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    void *sbuf = aligned_alloc(DATA_ALIGN, salloc);
    const int64_t rows = p->shape[0], in = p->shape[1], scols = sc->shape[1];
    const int64_t chunk = rows < QUANT_CHUNK_ROWS ? rows : QUANT_CHUNK_ROWS;
    float *f = sbuf ? malloc((size_t)(chunk * in) * sizeof *f) : NULL;
    if (!f) {
        free(sbuf);
        return lh_err_set(err, LH_E_NOMEM, "out of memory quantizing %s", t->name);
    }
    const size_t src_row = lh_k_dtype_bytes(t->dtype, in);
    const size_t w_row = (size_t)lh_k_dtype_bytes(p->dtype, in);
    const size_t s_row = (size_t)lh_k_dtype_bytes(sc->dtype, scols);
    lh_status st = LH_OK;
    for (int64_t r0 = 0; r0 < rows && st == LH_OK; r0 += chunk) {
        const int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
        st = lh_bind_convert((const unsigned char *)t->data + (size_t)r0 * src_row, t->dtype, f,
                             LH_DTYPE_F32, (size_t)(n * in), NULL, NULL, err);
        const int64_t src_shape[2] = {n, in}, s_shape[2] = {n, scols};
        lh_tensor src = lh_tensor_cpu(LH_DTYPE_F32, f, 2, src_shape);
        lh_tensor w = lh_tensor_cpu(p->dtype, (unsigned char *)wbuf + (size_t)r0 * w_row, 2,
                                    src_shape);
        lh_tensor s = lh_tensor_cpu(sc->dtype, (unsigned char *)sbuf + (size_t)r0 * s_row, 2,
                                    s_shape);
        if (st == LH_OK && (st = lh_k_quantize_scaled(*kc, &src, p->scale_block_rows,
                                                      p->scale_block_cols, &w, &s)) != LH_OK)
            lh_err_set(err, st, "%s", lh_k_last_error(*kc));
        lh_progress_add(pg, (int64_t)((size_t)n * w_row));
    }
    free(f);
    if (st != LH_OK) {
        free(sbuf);
        return st;
    }
    sc->data = sbuf;
    sc->data_owned = true;
    return LH_OK;
}

lh_status lh_model_adopt_stored_dtypes(lh_model *m, const lh_checkpoint *ck, lh_err *err)
{
    if (!m || !ck)
        return lh_err_set(err, LH_E_USAGE, "lh_model_adopt_stored_dtypes: NULL argument");
    lh_strbuf name = {0};
    lh_status st = LH_OK;
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p && st == LH_OK;
         p = lh_tree_next_param(m->b, p)) {
        if (p->tied_to)
            continue;
        const lh_st_tensor *t = find_for(ck, p, &name, NULL);
        if (name.oom) {
            st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", m->provider);
            break;
        }
        /* an absent, mis-shaped or unreadable tensor stays as built: binding reports it */
        if (!t || t->dtype == LH_DTYPE_INVALID || !same_shape(p, t))
            continue;
        const int64_t bytes = lh_k_dtype_bytes(t->dtype, p->numel);
        if (bytes < 0) {
            st = lh_err_set(err, LH_E_CONFIG, "%s: tensor %s: %s rows of %" PRId64 " elements "
                            "are not whole blocks", m->provider, t->name, dtype_name(t->dtype),
                            p->ndim ? p->shape[p->ndim - 1] : 1);
            break;
        }
        p->dtype = t->dtype;
        p->bytes = bytes;
    }
    /* a tied param reads its source's data, so it has its source's type (bytes stay 0) */
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p && st == LH_OK;
         p = lh_tree_next_param(m->b, p))
        if (p->tied_to)
            p->dtype = p->tied_to->dtype;
    free(name.s);
    return st;
}

static lh_status bind(lh_model *m, lh_checkpoint *ck, lh_err *err)
{
    lh_status st = LH_OK;
    lh_bind_stats s;
    memset(&s, 0, sizeof s);
    size_t n_tensors = lh_checkpoint_count(ck);
    unsigned char *used = calloc(n_tensors ? n_tensors : 1, 1);
    report r;
    memset(&r, 0, sizeof r);
    pairs jobs = {0};
    lh_strbuf name = {0};
    void *scratch = NULL;
    size_t matched = 0; /* non-tied params that found a tensor */
    bool oom = !used;

    /* 1. match every param */
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p && !oom;
         p = lh_tree_next_param(m->b, p)) {
        if (p->derived)
            continue; /* computed when its weight is quantized, not read */
        size_t idx = 0;
        const lh_st_tensor *t = find_for(ck, p, &name, &idx);
        if (name.oom) {
            oom = true;
            break;
        }
        if (p->tied_to) {
            s.tied++;
            if (t) { /* a saved copy of a tied weight: accepted, unused (2) */
                if (!used[idx])
                    used[idx] = 2;
                /* when the source's own tensor is absent this copy stands in for it, and the
                 * source reports its shape */
                const lh_st_tensor *src = find_for(ck, p->tied_to, &name, NULL);
                if (name.oom) {
                    oom = true;
                    break;
                }
                if (src && !same_shape(p, t))
                    oom |= !push(&r.kind[K_SHAPE], p, t);
            }
            continue;
        }
        if (!t && p->tie_dependents) {
            /* the source is absent: a checkpoint that saved only a tied copy */
            for (lh_param *q = lh_tree_next_param(m->b, NULL); q && !t;
                 q = lh_tree_next_param(m->b, q))
                if (q->tied_to == p) {
                    t = find_for(ck, q, &name, &idx);
                    if (t)
                        lh_log(LH_LOG_INFO, "weights: %s.%s is absent; binding it from its tied "
                               "copy %s", p->owner->name, p->name, t->name);
                }
            if (name.oom) {
                oom = true;
                break;
            }
        }
        if (!t) {
            oom |= !push(&r.kind[K_MISSING], p, NULL);
            continue;
        }
        used[idx] = 1;
        matched++;
        if (t->dtype == LH_DTYPE_INVALID)
            oom |= !push(&r.kind[K_DTYPE], p, t);
        else if (!same_shape(p, t))
            oom |= !push(&r.kind[K_SHAPE], p, t);
        else
            oom |= !push(&jobs, p, t);
    }
    /* 2. what the checkpoint has beyond the params */
    for (size_t i = 0; i < n_tensors && !oom; i++) {
        if (used[i] == 2)
            s.ignored++;
        if (used[i])
            continue;
        const lh_st_tensor *t = lh_checkpoint_at(ck, i);
        if (lh_bind_ignorable(t->name) || model_ignores(m->b, t->name)) {
            lh_log(LH_LOG_DEBUG, "weights: ignoring non-parameter buffer %s", t->name);
            s.ignored++;
            continue;
        }
        oom |= !push(&r.kind[K_UNEXPECTED], NULL, t);
    }
    if (oom) {
        st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory matching checkpoint %s",
                        m->provider, lh_checkpoint_path(ck));
        goto out;
    }
    size_t problems = 0;
    for (int k = 0; k < K_COUNT; k++)
        problems += r.kind[k].n;
    if (problems) {
        st = fail_report(m, ck, &r, matched == 0 && r.kind[K_MISSING].n > 0, err);
        goto out;
    }

    /* 3. bind: in place where possible, else convert/copy into owned buffers. A param that
     * keeps its stored float dtype takes it now unless the model's is f32 (widening is exact):
     * never narrower than stored */
    for (size_t i = 0; i < jobs.n; i++) {
        lh_param *p = jobs.a[i].p;
        const lh_dtype sd = jobs.a[i].t->dtype;
        if (p->stored_float && !p->tied_to && !p->scale && p->dtype != LH_DTYPE_F32 &&
            (sd == LH_DTYPE_F32 || sd == LH_DTYPE_BF16 || sd == LH_DTYPE_F16)) {
            p->dtype = sd;
            p->bytes = lh_k_dtype_bytes(sd, p->numel);
        }
        if (p->stored_float && p->dtype == sd)
            s.stored_float++;
    }
    int64_t to_convert = 0;
    bool any_conversion = false;
    for (size_t i = 0; i < jobs.n; i++) {
        const lh_param *p = jobs.a[i].p;
        const lh_st_tensor *t = jobs.a[i].t;
        if (t->dtype != p->dtype || !t->aligned || t->layout != LH_GGUF_AS_STORED)
            to_convert += lh_k_dtype_bytes(p->dtype, p->numel);
        if (t->dtype != p->dtype && !quantizes_at_load(p))
            any_conversion = true;
    }
    lh_kctx *qctx = NULL; /* the quantizer's, made on the first weight quantized at load */
    if (any_conversion && !(scratch = malloc(LH_BIND_SCRATCH_BYTES))) {
        st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory converting weights", m->provider);
        goto out;
    }
    lh_progress pg;
    lh_progress_begin(&pg, m->quantized_linears ? "loading and quantizing weights"
                                                : "loading weights", to_convert);
    for (size_t i = 0; i < jobs.n && st == LH_OK; i++) {
        lh_param *p = jobs.a[i].p;
        const lh_st_tensor *t = jobs.a[i].t;
        int64_t bytes = lh_k_dtype_bytes(p->dtype, p->numel);
        s.bound++;
        if (t->dtype == p->dtype && t->aligned && t->layout == LH_GGUF_AS_STORED) {
            p->data = (void *)(uintptr_t)t->data; /* read-only mapping */
            p->data_owned = false;
            s.zero_copy++;
            s.mapped_bytes += bytes;
            continue;
        }
        size_t alloc = ((size_t)bytes + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
        void *buf = aligned_alloc(DATA_ALIGN, alloc);
        if (!buf) {
            st = lh_err_set(err, LH_E_NOMEM,
                            "%s: out of memory for tensor %s (%" PRId64 " bytes of %s)",
                            m->provider, t->name, bytes, dtype_name(p->dtype));
            break;
        }
        if (quantizes_at_load(p))
            st = quantize_at_load(&qctx, t, p, buf, &pg, err);
        else if (t->layout != LH_GGUF_AS_STORED)
            st = apply_layout(t, p, buf, bytes, &pg, err);
        else
            st = lh_bind_convert(t->data, t->dtype, buf, p->dtype, (size_t)p->numel, scratch,
                                 &pg, err);
        if (st != LH_OK) {
            free(buf);
            lh_err_prefix(err, "%s: tensor %s", m->provider, t->name);
            break;
        }
        p->data = buf;
        p->data_owned = true;
        if (quantizes_at_load(p)) {
            s.quantized++;
            s.owned_bytes += p->scale->bytes;
        }
        else if (t->dtype == p->dtype)
            s.copied++;
        else
            s.converted++;
        s.owned_bytes += bytes;
    }
    lh_progress_end(&pg);
    lh_k_ctx_free(qctx);
    if (st != LH_OK) {
        unbind(m);
        goto out;
    }
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p))
        if (p->tied_to) {
            p->data = p->tied_to->data;
            p->data_owned = false;
        }
    m->weights = ck;
    m->bind_stats = s;
    lh_log(LH_LOG_INFO,
           "weights: %zu tensors bound from %s (%zu in place, %zu converted, %zu quantized, "
           "%zu copied, %zu tied, %zu ignored)",
           s.bound, lh_checkpoint_path(ck), s.zero_copy, s.converted, s.quantized, s.copied,
           s.tied, s.ignored);
out:
    free(scratch);
    free(name.s);
    free(jobs.a);
    for (int k = 0; k < K_COUNT; k++)
        free(r.kind[k].a);
    free(used);
    return st;
}

lh_status lh_model_bind_weights(lh_model *m, lh_checkpoint *ck, lh_err *err)
{
    lh_status st;
    if (!m || !ck)
        st = lh_err_set(err, LH_E_USAGE, "lh_model_bind_weights: NULL %s",
                        !m ? "model" : "checkpoint");
    else if (m->weights)
        st = lh_err_set(err, LH_E_USAGE, "%s: weights are already bound (from %s)",
                        m->provider, lh_checkpoint_path(m->weights));
    else
        st = bind(m, ck, err);
    if (st != LH_OK)
        lh_checkpoint_close(ck); /* consumed either way */
    return st;
}

lh_status lh_model_load_weights(lh_model *m, const char *path, lh_err *err)
{
    if (!m || !path)
        return lh_err_set(err, LH_E_USAGE, "lh_model_load_weights: NULL argument");
    if (m->weights)
        return lh_err_set(err, LH_E_USAGE, "%s: weights are already bound (from %s)",
                          m->provider, lh_checkpoint_path(m->weights));
    lh_checkpoint *ck = NULL;
    lh_status st = lh_checkpoint_open(path, &ck, err);
    if (st != LH_OK)
        return st;
    return lh_model_bind_weights(m, ck, err);
}

bool lh_model_bind_stats(const lh_model *m, lh_bind_stats *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!m || !m->weights)
        return false;
    if (out)
        *out = m->bind_stats;
    return true;
}

bool lh_model_weights_bound(const lh_model *m)
{
    return m && m->weights;
}

const lh_checkpoint *lh_model_checkpoint(const lh_model *m)
{
    return m ? m->weights : NULL;
}

lh_status lh_model_param_tensor(const lh_model *m, const lh_module *mod, const char *param,
                                lh_tensor *out)
{
    if (!m || !mod || !param || !out || mod->build != m->b || !m->weights)
        return LH_E_USAGE;
    const lh_param *p = lh_tree_find_param(mod, param);
    if (!p)
        return LH_E_USAGE;
    void *data = p->tied_to ? p->tied_to->data : p->data;
    if (!data)
        return LH_E_INTERNAL; /* bound models have data on every param */
    *out = lh_tensor_cpu(p->dtype, data, p->ndim, p->shape);
    return LH_OK;
}

lh_status lh_model_param_tensor_by_name(const lh_model *m, const char *module_name,
                                        const char *param, lh_tensor *out)
{
    if (!m || !module_name)
        return LH_E_USAGE;
    const lh_module *mod = lh_tree_lookup(m->b, module_name);
    if (!mod)
        return LH_E_USAGE;
    return lh_model_param_tensor(m, mod, param, out);
}
