/* A checkpoint stored quantized, as its config.json's quantization_config says (transformers'
 * convention, the same for every architecture): the tree's linear weights take the stored
 * format and a scale param the checkpoint holds, so binding reads them as stored and the memory
 * plan counts what the files hold.
 *
 *   quant_method "fp8" (transformers' FineGrainedFP8, DeepSeek-V3's layout): e4m3 weights
 *     with one f32 `weight_scale_inv` per weight_block_size block (default [128, 128]),
 *     [ceil(out / 128), ceil(in / 128)]; dequant(w) = w * weight_scale_inv. Dynamic
 *     activations only.
 *   quant_method "fbgemm_fp8": e4m3 weights with one f32 `weight_scale` per output row
 *     ([out, 1], per channel).
 * modules_to_not_convert (names matched as substrings, as transformers does) and the output
 * head keep the model dtype. Every other method (gptq, awq, bitsandbytes, compressed-tensors,
 * ...) is refused by name. */
#include "tree_internal.h"

#include "../config/model_config.h"
#include "../config/run_config.h"
#include "../core/err.h"
#include "lh_kernels.h"

#include <inttypes.h>
#include <jansson.h>
#include <string.h>

typedef struct ckpt_quant {
    const char *method;
    const char *scale_name;
    int64_t block_rows, block_cols; /* 0 block_cols: the whole input width (per channel) */
    const json_t *skip;             /* modules_to_not_convert (array or NULL) */
} ckpt_quant;

static bool skipped(const ckpt_quant *q, const char *name)
{
    size_t i;
    const json_t *v;
    json_array_foreach(q->skip, i, v)
        if (json_is_string(v) && strstr(name, json_string_value(v)))
            return true;
    return false;
}

static lh_status parse(const lh_model_config *cfg, const json_t *qc, ckpt_quant *q, lh_err *err)
{
    const json_t *method = json_object_get(qc, "quant_method");
    if (!json_is_string(method))
        return lh_err_set(err, LH_E_CONFIG, "%s: quantization_config.quant_method is %s",
                          cfg->path, method ? "not a string" : "missing");
    q->method = json_string_value(method);
    q->skip = json_object_get(qc, "modules_to_not_convert");
    if (q->skip && !json_is_array(q->skip) && !json_is_null(q->skip))
        return lh_err_set(err, LH_E_CONFIG, "%s: quantization_config.modules_to_not_convert "
                          "is not an array", cfg->path);
    if (strcmp(q->method, "fbgemm_fp8") == 0) {
        q->scale_name = "weight_scale";
        q->block_rows = 1;
        return LH_OK;
    }
    if (strcmp(q->method, "fp8") != 0)
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: quantization_config.quant_method '%s' is "
                          "not supported (fp8 with block scales, fbgemm_fp8 per channel)",
                          cfg->path, q->method);
    const json_t *fmt = json_object_get(qc, "fmt");
    if (fmt && !(json_is_string(fmt) && strcmp(json_string_value(fmt), "e4m3") == 0))
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: quantization_config.fmt %s is not "
                          "supported (e4m3)", cfg->path,
                          json_is_string(fmt) ? json_string_value(fmt) : "(not a string)");
    const json_t *act = json_object_get(qc, "activation_scheme");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), "dynamic") == 0))
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: quantization_config.activation_scheme %s "
                          "is not supported (dynamic: the weights alone are quantized)",
                          cfg->path, json_is_string(act) ? json_string_value(act) : "?");
    q->scale_name = "weight_scale_inv";
    q->block_rows = q->block_cols = 128;
    const json_t *bs = json_object_get(qc, "weight_block_size");
    if (bs && !json_is_null(bs)) {
        const json_t *r = json_array_get(bs, 0), *c = json_array_get(bs, 1);
        if (!json_is_array(bs) || json_array_size(bs) != 2 || !json_is_integer(r) ||
            !json_is_integer(c) || json_integer_value(r) < 1 || json_integer_value(c) < 1 ||
            json_integer_value(r) > (1 << 20) || json_integer_value(c) > (1 << 20))
            return lh_err_set(err, LH_E_CONFIG, "%s: quantization_config.weight_block_size "
                              "must be [rows, cols] of integers in [1, 1048576]", cfg->path);
        q->block_rows = json_integer_value(r);
        q->block_cols = json_integer_value(c);
    }
    return LH_OK;
}

/* The weight of linear x stored as FP8 with its scale param. */
static lh_status quantize_linear(lh_build *b, lh_module *x, lh_param *p, const ckpt_quant *q,
                                 lh_err *err)
{
    const int64_t out = p->shape[0], in = p->shape[1];
    const int64_t bc = q->block_cols ? q->block_cols : in;
    const int64_t shape[2] = {(out + q->block_rows - 1) / q->block_rows, (in + bc - 1) / bc};
    lh_param *sc = lh_tree_add_param(b, x, q->scale_name, 2, shape, LH_PARAM_PLAIN);
    if (!sc)
        return lh_err_set(err, b->status ? b->status : LH_E_NOMEM, "%s: %s", x->name,
                          b->msg[0] ? b->msg : "cannot add its scale");
    sc->is_scale = true;
    sc->dtype = LH_DTYPE_F32;
    sc->bytes = lh_param_plain_bytes(LH_DTYPE_F32, sc->numel);
    p->dtype = LH_DTYPE_FP8_E4M3;
    p->bytes = p->numel;
    p->scale = sc;
    p->scale_block_rows = q->block_rows;
    p->scale_block_cols = bc;
    return LH_OK;
}

lh_status lh_model_apply_checkpoint_quant(lh_model *m, const lh_model_config *cfg,
                                          const lh_run_config *rc, lh_err *err)
{
    const json_t *qc = cfg && cfg->root ? json_object_get(cfg->root, "quantization_config") : NULL;
    if (!qc || json_is_null(qc))
        return LH_OK;
    if (!json_is_object(qc))
        return lh_err_set(err, LH_E_CONFIG, "%s: quantization_config is not an object",
                          cfg->path);
    ckpt_quant q = {0};
    lh_status st = parse(cfg, qc, &q, err);
    if (st != LH_OK)
        return st;
    if (rc && (rc->quant.scheme != LH_QUANT_NONE || rc->quant.n_rules))
        return lh_err_set(err, LH_E_UNSUPPORTED, "quant: %s is already quantized "
                          "(quantization_config.quant_method %s); remove the quant config",
                          cfg->path, q.method);
    lh_build *b = m->b;
    for (lh_module *x = lh_tree_next(b->root); x && st == LH_OK; x = lh_tree_next(x)) {
        if (x->kind != LH_MOD_LINEAR || skipped(&q, x->name))
            continue;
        for (lh_param *p = x->params; p && st == LH_OK; p = p->next)
            if (p->role == LH_PARAM_WEIGHT_QUANTIZABLE && p->ndim == 2 && !p->tied_to &&
                !p->tie_dependents && !p->transposed && !p->scale) {
                st = quantize_linear(b, x, p, &q, err);
                if (st == LH_OK) {
                    x->quant = LH_QUANT_FP8;
                    m->quantized_linears++;
                }
            }
    }
    return st;
}
