/* The layer-wise quant config applied to the module tree, before any weight exists: it decides
 * each linear layer's storage format and so its byte size.
 *
 * For each LINEAR module in tree order: an exclude_modules glob that matches its full name
 * keeps the model dtype; else the first matching rule decides; else the default scheme.
 * Storage of a quantized weight [out, in]:
 *   fp8, int8: out*in bytes + one f32 scale per output row (4*out)
 *   int4:      ceil(out*in/2) bytes + one f16 scale per group of group_size inputs per row
 *              (2*out*in/group_size); in must be a multiple of group_size
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

static lh_dtype scheme_dtype(lh_quant_scheme s, lh_dtype model_dtype)
{
    switch (s) {
    case LH_QUANT_FP8: return LH_DTYPE_FP8_E4M3;
    case LH_QUANT_INT8: return LH_DTYPE_INT8;
    case LH_QUANT_INT4: return LH_DTYPE_INT4;
    default: return model_dtype;
    }
}

/* Storage bytes of a [out, in] weight under `scheme`; -1 on overflow. */
static int64_t quant_bytes(lh_quant_scheme scheme, int64_t out, int64_t in, int64_t numel,
                           int64_t group_size)
{
    int64_t data, scales;
    switch (scheme) {
    case LH_QUANT_FP8:
    case LH_QUANT_INT8:
        data = numel;
        if (!lh_tree_mul(out, 4, &scales))
            return -1;
        break;
    case LH_QUANT_INT4:
        data = numel / 2 + numel % 2;
        if (!lh_tree_mul(out, in / group_size, &scales) || !lh_tree_mul(scales, 2, &scales))
            return -1;
        break;
    default:
        return -1;
    }
    int64_t total;
    return lh_tree_add(data, scales, &total) ? total : -1;
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
            int64_t out = p->shape[0], in = p->shape[1];
            int64_t bytes;
            if (ps == LH_QUANT_NONE) {
                bytes = lh_param_plain_bytes(b->dtype, p->numel);
            } else {
                if (ps == LH_QUANT_INT4 && in % gs != 0) {
                    st = lh_err_set(err, LH_E_CONFIG,
                                    "quant: %s: int4 group_size %" PRId64
                                    " does not divide the input width %" PRId64
                                    " (from %s%s%s)",
                                    x->name, gs, in, ruled ? "rule '" : "", origin,
                                    ruled ? "'" : "");
                    break;
                }
                bytes = quant_bytes(ps, out, in, p->numel, gs);
            }
            if (bytes < 0) {
                st = lh_err_set(err, LH_E_CONFIG, "quant: %s.%s: byte size overflows int64",
                                x->name, p->name);
                break;
            }
            p->dtype = scheme_dtype(ps, b->dtype);
            p->bytes = bytes;
            if (ps != LH_QUANT_NONE)
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
