/* The layer-wise quant config applied to the module tree, before any weight exists: it decides
 * each linear layer's storage format and so its byte size.
 *
 * For each LINEAR module in tree order: an exclude_modules glob that matches its full name
 * keeps the model dtype; else the first matching rule decides; else the default scheme.
 * A quantized weight [out, in] is weight-only, symmetric (lh_k_quantize_scaled), with its
 * scale in a sibling param "weight_scale" that binding computes (derived):
 *   fp8, int8: out*in bytes (e4m3 / int8) + one f32 scale per output row, weight_scale [out, 1]
 *   int4:      out*in/2 bytes (in even) + one f16 scale per group of group_size inputs per row,
 *              weight_scale [out, in/group_size]; in must be a multiple of group_size
 * Biases and every non-linear parameter stay in the model dtype. A weight shared by a tie
 * stays in the model dtype too (its other users are not linear layers). */
#include "tree_internal.h"

#include "../core/err.h"
#include "../core/log.h"
#include "lh_kernels.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdlib.h>

#define DEFAULT_GROUP_SIZE 128

/* Adds the derived scale param of a weight quantized under `scheme` (int8 / fp8: f32 [out, 1];
 * int4: f16 [out, in / gs]) and sets the weight's storage. */
static lh_status add_scale(lh_build *b, lh_module *x, lh_param *p, lh_quant_scheme scheme,
                           int64_t gs, lh_err *err)
{
    const int64_t out = p->shape[0], in = p->shape[1];
    const bool int4 = scheme == LH_QUANT_INT4;
    const int64_t shape[2] = {out, int4 ? in / gs : 1};
    lh_param *sc = lh_tree_add_param(b, x, "weight_scale", 2, shape, LH_PARAM_PLAIN);
    if (!sc)
        return lh_err_set(err, b->status ? b->status : LH_E_NOMEM, "quant: %s: %s", x->name,
                          b->msg[0] ? b->msg : "cannot add its scale");
    sc->dtype = int4 ? LH_DTYPE_F16 : LH_DTYPE_F32;
    sc->bytes = lh_param_plain_bytes(sc->dtype, sc->numel);
    sc->is_scale = sc->derived = true;
    p->dtype = scheme == LH_QUANT_FP8 ? LH_DTYPE_FP8_E4M3
               : int4                 ? LH_DTYPE_INT4
                                      : LH_DTYPE_INT8;
    p->bytes = lh_k_dtype_bytes(p->dtype, p->numel);
    p->scale = sc;
    p->scale_block_rows = 1;
    p->scale_block_cols = int4 ? gs : in;
    return LH_OK;
}

static bool matches(const char *pattern, const char *name)
{
    return pattern && fnmatch(pattern, name, 0) == 0;
}

/* A pattern that selects no linear layer is a warning, not an error. Say whether it matched
 * nothing at all (a typo) or only non-linear modules (e.g. a container: patterns are matched
 * against the full names of the linear layers themselves). */
static void warn_unmatched(const lh_model *m, const char *what, const char *pattern)
{
    const lh_module *example = NULL;
    for (const lh_module *x = lh_tree_next(m->b->root); x && !example; x = lh_tree_next(x))
        if (matches(pattern, x->name))
            example = x;
    if (!example)
        lh_log(LH_LOG_WARN, "quant: %s '%s' matches no module of %s", what,
               pattern ? pattern : "(null)", m->provider);
    else
        lh_log(LH_LOG_WARN,
               "quant: %s '%s' matches no linear layer of %s (it matches '%s', which is not "
               "a linear layer; patterns are matched against full linear-layer names)",
               what, pattern, m->provider, example->name);
}

lh_status lh_model_apply_quant(lh_model *m, const lh_quant_config *qc, lh_err *err)
{
    static const lh_quant_config none = {0};
    if (!qc)
        qc = &none;
    lh_build *b = m->b;
    size_t n_rules = qc->rules ? qc->n_rules : 0;
    size_t n_excl = qc->exclude_modules ? qc->n_exclude : 0;
    size_t *rule_hits = calloc(n_rules + n_excl + 1, sizeof *rule_hits);
    if (!rule_hits)
        return lh_err_set(err, LH_E_NOMEM, "out of memory applying the quant config");
    size_t *excl_hits = rule_hits + n_rules;
    const int64_t default_gs = qc->group_size > 0 ? qc->group_size : DEFAULT_GROUP_SIZE;
    lh_status st = LH_OK;
    m->quantized_linears = 0;

    for (lh_module *x = lh_tree_next(b->root); x && st == LH_OK; x = lh_tree_next(x)) {
        if (x->kind != LH_MOD_LINEAR && x->kind != LH_MOD_HEAD)
            continue;
        bool excluded = false;
        for (size_t i = 0; i < n_excl; i++)
            if (matches(qc->exclude_modules[i], x->name)) {
                excl_hits[i]++;
                excluded = true;
            }
        lh_quant_scheme scheme = qc->scheme;
        int64_t gs = default_gs;
        const char *origin = "the default scheme";
        bool ruled = false;
        for (size_t i = 0; i < n_rules; i++) {
            if (!matches(qc->rules[i].pattern, x->name))
                continue;
            rule_hits[i]++; /* counted even when shadowed, for the no-match warning */
            if (!ruled) {
                ruled = true;
                scheme = qc->rules[i].scheme;
                gs = qc->rules[i].group_size > 0 ? qc->rules[i].group_size : default_gs;
                origin = qc->rules[i].pattern;
            }
        }
        if (excluded)
            scheme = LH_QUANT_NONE;

        bool quantized = false;
        for (lh_param *p = x->params; p; p = p->next) {
            if (p->role != LH_PARAM_WEIGHT_QUANTIZABLE || p->ndim != 2)
                continue;
            if (p->tied_to)
                continue; /* stored once, on the source */
            lh_quant_scheme ps = scheme;
            if (ps != LH_QUANT_NONE && p->tie_dependents) {
                lh_log(LH_LOG_DEBUG, "quant: %s.%s is shared by a tie; kept in the model dtype",
                       x->name, p->name);
                ps = LH_QUANT_NONE;
            }
            if (ps != LH_QUANT_NONE && p->transposed) {
                st = lh_err_set(err, LH_E_UNSUPPORTED,
                                "quant: %s.%s is stored transposed ([in, out], as GPT-2's "
                                "Conv1D) and cannot be quantized (from %s%s%s); list it in "
                                "exclude_modules", x->name, p->name, ruled ? "rule '" : "",
                                origin, ruled ? "'" : "");
                break;
            }
            const int64_t in = p->shape[1];
            if (ps == LH_QUANT_NONE) {
                p->dtype = b->dtype;
                p->bytes = lh_param_plain_bytes(b->dtype, p->numel);
                continue;
            }
            if (ps == LH_QUANT_INT4 && (in % gs != 0 || in % 2 != 0)) {
                st = lh_err_set(err, LH_E_CONFIG,
                                "quant: %s: int4 group_size %" PRId64
                                " %s the input width %" PRId64 " (from %s%s%s)",
                                x->name, gs, in % gs ? "does not divide" : "divides an odd",
                                in, ruled ? "rule '" : "", origin, ruled ? "'" : "");
                break;
            }
            if ((st = add_scale(b, x, p, ps, gs, err)) != LH_OK)
                break;
            quantized = true;
        }
        x->quant = quantized ? scheme : LH_QUANT_NONE;
        x->group_size = quantized && scheme == LH_QUANT_INT4 ? gs : 0;
        if (quantized)
            m->quantized_linears++;
    }

    if (st == LH_OK) {
        for (size_t i = 0; i < n_excl; i++)
            if (!excl_hits[i])
                warn_unmatched(m, "exclude_modules pattern", qc->exclude_modules[i]);
        for (size_t i = 0; i < n_rules; i++)
            if (!rule_hits[i])
                warn_unmatched(m, "rule pattern", qc->rules[i].pattern);
    }
    free(rule_hits);
    return st;
}
