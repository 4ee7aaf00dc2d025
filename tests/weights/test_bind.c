/* Binding checkpoints to module trees: zero-copy, conversion, the mismatch report, tied
 * embeddings, quantized params, sharded checkpoints, the tensor accessor, real fixtures. */
#include "llama_tree.h"
#include "runner.h"
#include "st_writer.h"

#include "api/host_api_table.h"
#include "config/model_config.h"
#include "config/run_config.h"
#include "core/log.h"
#include "index/arch_index.h"
#include "lh_kernels.h"
#include "model/model.h"
#include "model/tree_internal.h"
#include "weights/bind.h"
#include "weights/checkpoint.h"

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- models ---- */

/* The Llama tree the built-in plugin builds (tests/support/llama_tree.c): the tests write
 * checkpoints from its parameter list. No bind/forward: only the tree is bound here. */
static lh_status construct_plain(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return test_llama_tree(api, b, cfg, false, false);
}

static const lh_model_ops plain_ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct_plain,
};

/* A tiny Llama: hidden 16, 4 heads (head_dim 4), 2 kv heads, intermediate 32, vocab 40. */
static lh_model *tiny_llama(int layers, bool tied, const char *torch_dtype,
                            const lh_run_config *rc)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\","
             "\"hidden_size\":16,\"intermediate_size\":32,\"num_hidden_layers\":%d,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":40,"
             "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,"
             "\"tie_word_embeddings\":%s,\"torch_dtype\":\"%s\"}",
             layers, tied ? "true" : "false", torch_dtype);
    lh_err err = {0};
    lh_model_config *cfg = NULL;
    if (lh_model_config_parse(json, "tiny-llama", &cfg, &err) != LH_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
        return NULL;
    }
    lh_model_provider prov = {sizeof prov, "LlamaForCausalLM", &plain_ops, NULL};
    lh_model *m = NULL;
    if (lh_model_build(lh_host_api_table(), &prov, cfg, rc, &m, &err) != LH_OK)
        fprintf(stderr, "build: %s\n", err.msg);
    lh_model_config_free(cfg);
    return m;
}

static size_t count_params(const lh_model *m, bool with_tied)
{
    size_t n = 0;
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p))
        n += with_tied || !p->tied_to;
    return n;
}

static void param_name(char *buf, size_t n, const lh_param *p)
{
    snprintf(buf, n, "%s%s%s", p->owner->name, p->owner->name[0] ? "." : "", p->name);
}

/* ---- checkpoints written from a model's own parameter list ---- */

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The f32 value written for element i of tensor `name`. */
static float value(const char *name, int64_t i)
{
    return sinf((float)(hash_name(name) % 1000) * 0.37f + (float)i * 0.71f) * 0.5f;
}

typedef struct gen_opts {
    const char *dtype;            /* "F32" (default), "BF16", "F16" */
    const char *const *skip;      /* NULL-terminated names not written */
    const char *const *extra;     /* NULL-terminated extra names, F32 [2] */
    const char *transpose;        /* a 2-D tensor written with its dims swapped */
    const char *as_i64;           /* a tensor written as I64 */
    bool write_tied;              /* also write tensors for tied params */
    bool skip_tie_sources;        /* do not write params other params are tied to */
    unsigned misalign;            /* data buffer misalignment */
    int shards;                   /* > 1: index + that many shards */
    const char *prefix;           /* prepended to every param name */
} gen_opts;

static bool listed(const char *const *list, const char *name)
{
    for (; list && *list; list++)
        if (strcmp(*list, name) == 0)
            return true;
    return false;
}

/* Writes the tensor `name` with `numel` values in `dtype` into w. */
static void add_values(stw *w, const char *name, const char *dtype, int ndim,
                       const int64_t *shape, int64_t numel)
{
    if (strcmp(dtype, "F32") == 0) {
        float *v = malloc((size_t)numel * 4);
        for (int64_t i = 0; i < numel; i++)
            v[i] = value(name, i);
        stw_add(w, name, "F32", ndim, shape, v, (size_t)numel * 4);
        free(v);
    } else if (strcmp(dtype, "I64") == 0) {
        int64_t *v = calloc((size_t)numel, 8);
        stw_add(w, name, "I64", ndim, shape, v, (size_t)numel * 8);
        free(v);
    } else {
        bool bf = strcmp(dtype, "BF16") == 0;
        uint16_t *v = malloc((size_t)numel * 2);
        for (int64_t i = 0; i < numel; i++)
            v[i] = bf ? lh_k_f32_to_bf16(value(name, i)) : lh_k_f32_to_f16(value(name, i));
        stw_add(w, name, dtype, ndim, shape, v, (size_t)numel * 2);
        free(v);
    }
}

static void write_checkpoint(const lh_model *m, const char *dir, const gen_opts *o)
{
    const char *dtype = o->dtype ? o->dtype : "F32";
    int shards = o->shards > 1 ? o->shards : 1;
    stw w[8];
    for (int s = 0; s < shards; s++) {
        stw_init(&w[s]);
        w[s].data_misalign = o->misalign;
    }
    json_t *map = json_object();
    char fname[8][64];
    for (int s = 0; s < shards; s++)
        snprintf(fname[s], sizeof fname[s], "model-%05d-of-%05d.safetensors", s + 1, shards);
    int k = 0;
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p)) {
        char base[512], name[600];
        param_name(base, sizeof base, p);
        snprintf(name, sizeof name, "%s%s", o->prefix ? o->prefix : "", base);
        if (listed(o->skip, name) || (p->tied_to && !o->write_tied) ||
            (p->tie_dependents && o->skip_tie_sources))
            continue;
        int64_t shape[LH_MAX_DIMS];
        memcpy(shape, p->shape, sizeof shape);
        if (o->transpose && strcmp(o->transpose, name) == 0) {
            shape[0] = p->shape[1];
            shape[1] = p->shape[0];
        }
        int s = k++ % shards;
        add_values(&w[s], name, o->as_i64 && strcmp(o->as_i64, name) == 0 ? "I64" : dtype,
                   p->ndim, shape, p->numel);
        json_object_set_new(map, name, json_string(fname[s]));
    }
    for (const char *const *e = o->extra; e && *e; e++) {
        const int64_t two[] = {2};
        add_values(&w[0], *e, "F32", 1, two, 2);
        json_object_set_new(map, *e, json_string(fname[0]));
    }
    if (shards == 1) {
        CU_ASSERT_EQUAL(stw_write(&w[0], dir, "model.safetensors"), 0);
    } else {
        for (int s = 0; s < shards; s++)
            CU_ASSERT_EQUAL(stw_write(&w[s], dir, fname[s]), 0);
        json_t *idx = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", map);
        map = NULL;
        char *text = json_dumps(idx, JSON_INDENT(2));
        CU_ASSERT_EQUAL(lh_test_write_file(dir, "model.safetensors.index.json", text), 0);
        free(text);
        json_decref(idx);
    }
    json_decref(map);
    for (int s = 0; s < shards; s++)
        stw_free(&w[s]);
}

/* What element i of `name` must read as once bound: written in `written`, stored as `dt`. */
static bool expected_bits(const char *name, int64_t i, const char *written, lh_dtype dt,
                          const void *data)
{
    float x = value(name, i);
    if (strcmp(written, "BF16") == 0)
        x = lh_k_bf16_to_f32(lh_k_f32_to_bf16(x));
    else if (strcmp(written, "F16") == 0)
        x = lh_k_f16_to_f32(lh_k_f32_to_f16(x));
    if (dt == LH_DTYPE_F32)
        return memcmp(&((const float *)data)[i], &x, 4) == 0;
    uint16_t want = dt == LH_DTYPE_BF16 ? lh_k_f32_to_bf16(x) : lh_k_f32_to_f16(x);
    return ((const uint16_t *)data)[i] == want;
}

static bool in_checkpoint(const lh_model *m, const void *p, size_t n)
{
    const lh_checkpoint *ck = lh_model_checkpoint(m);
    for (size_t i = 0; i < lh_checkpoint_file_count(ck); i++)
        if (lh_st_contains(lh_checkpoint_file(ck, i), p, n))
            return true;
    return false;
}

/* Checks every param's view against what was written. where: 1 all inside the mapping,
 * 0 all outside (owned, 64-byte aligned), -1 do not check. Returns the number of bad params. */
static int check_values(const lh_model *m, const char *written, int where)
{
    int bad = 0;
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p)) {
        char name[512];
        param_name(name, sizeof name, p->tied_to ? p->tied_to : p);
        lh_tensor t;
        if (lh_model_param_tensor(m, p->owner, p->name, &t) != LH_OK) {
            bad++;
            continue;
        }
        bool ok = t.dtype == p->dtype && t.ndim == p->ndim && t.device.kind == LH_DEVICE_CPU;
        for (int d = 0; d < p->ndim; d++)
            ok = ok && t.shape[d] == p->shape[d];
        ok = ok && t.stride[p->ndim - 1] == 1;
        size_t bytes = (size_t)lh_k_dtype_bytes(p->dtype, p->numel);
        if (where == 1)
            ok = ok && in_checkpoint(m, t.data, bytes);
        if (where == 0)
            ok = ok && !in_checkpoint(m, t.data, bytes) && (uintptr_t)t.data % 64 == 0;
        for (int64_t i = 0; i < p->numel && ok; i++)
            ok = expected_bits(name, i, written, p->dtype, t.data);
        if (!ok) {
            fprintf(stderr, "\n    param %s.%s: wrong view or values\n", p->owner->name,
                    p->name);
            bad++;
        }
    }
    return bad;
}

static bool has(const char *msg, const char *needle)
{
    if (!strstr(msg, needle)) {
        fprintf(stderr, "\n    message lacks \"%s\":\n    %s\n", needle, msg);
        return false;
    }
    return true;
}

static lh_status load(lh_model *m, const char *dir, lh_err *err)
{
    lh_status st = lh_model_load_weights(m, dir, err);
    if (st != LH_OK && getenv("LH_TEST_VERBOSE"))
        fprintf(stderr, "\n    load: %s\n", err->msg);
    return st;
}

/* ---- good checkpoints ---- */

static void test_zero_copy_bf16(void)
{
    lh_model *m = tiny_llama(2, false, "bfloat16", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(count_params(m, true), 21);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "BF16"};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    lh_bind_stats s;
    CU_ASSERT_FALSE(lh_model_bind_stats(m, &s));
    CU_ASSERT_FALSE(lh_model_weights_bound(m));
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    CU_ASSERT_TRUE(lh_model_weights_bound(m));
    CU_ASSERT_TRUE(lh_model_bind_stats(m, &s));
    CU_ASSERT_EQUAL(s.bound, 21);
    CU_ASSERT_EQUAL(s.zero_copy, 21);
    CU_ASSERT_EQUAL(s.converted + s.copied + s.tied + s.ignored, 0);
    CU_ASSERT_EQUAL(s.owned_bytes, 0);
    CU_ASSERT_EQUAL(s.mapped_bytes, (int64_t)lh_checkpoint_data_bytes(lh_model_checkpoint(m)));
    CU_ASSERT_EQUAL(check_values(m, "BF16", 1), 0);
    /* the accessor by name */
    lh_tensor t;
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.layers.1.self_attn.k_proj",
                                                  "weight", &t),
                    LH_OK);
    CU_ASSERT_EQUAL(t.dtype, LH_DTYPE_BF16);
    CU_ASSERT_EQUAL(t.shape[0], 8);
    CU_ASSERT_EQUAL(t.shape[1], 16);
    CU_ASSERT_EQUAL(t.stride[0], 16);
    const lh_st_tensor *src = lh_checkpoint_find(lh_model_checkpoint(m),
                                                 "model.layers.1.self_attn.k_proj.weight", NULL);
    CU_ASSERT_PTR_EQUAL(t.data, src->data);
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);
}

static void test_convert_f32_to_bf16(void)
{
    lh_model *m = tiny_llama(2, false, "bfloat16", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "F32"};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    lh_bind_stats s;
    CU_ASSERT_TRUE(lh_model_bind_stats(m, &s));
    CU_ASSERT_EQUAL(s.converted, 21);
    CU_ASSERT_EQUAL(s.zero_copy, 0);
    CU_ASSERT_EQUAL(s.owned_bytes,
                    (int64_t)lh_checkpoint_data_bytes(lh_model_checkpoint(m)) / 2);
    CU_ASSERT_EQUAL(check_values(m, "F32", 0), 0);
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);
}

static void test_convert_to_f32_and_f16(void)
{
    static const struct {
        lh_dtype model;
        const char *ckpt;
    } cases[] = {
        {LH_DTYPE_F32, "BF16"}, {LH_DTYPE_F32, "F16"}, {LH_DTYPE_F16, "F32"},
        {LH_DTYPE_F16, "BF16"}, {LH_DTYPE_BF16, "F16"}, {LH_DTYPE_F32, "F32"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        lh_run_config rc;
        lh_run_config_init(&rc);
        rc.dtype = cases[c].model; /* the run config overrides torch_dtype */
        lh_model *m = tiny_llama(1, false, "bfloat16", &rc);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        char *d = lh_test_mkdtemp();
        gen_opts o = {.dtype = cases[c].ckpt};
        write_checkpoint(m, d, &o);
        lh_err err = {0};
        CU_ASSERT_EQUAL(load(m, d, &err), LH_OK);
        lh_bind_stats s;
        lh_model_bind_stats(m, &s);
        bool same = strcmp(cases[c].ckpt, lh_st_dtype_name_of(cases[c].model)) == 0;
        CU_ASSERT_EQUAL(s.converted, same ? 0 : 12);
        CU_ASSERT_EQUAL(s.zero_copy, same ? 12 : 0);
        CU_ASSERT_EQUAL(check_values(m, cases[c].ckpt, same ? 1 : 0), 0);
        lh_model_free(m);
        lh_run_config_free(&rc);
        lh_test_rmtree(d);
        free(d);
    }
}

static void test_misaligned_copies(void)
{
    lh_run_config rc;
    lh_run_config_init(&rc);
    rc.dtype = LH_DTYPE_F32;
    lh_model *m = tiny_llama(1, false, "float32", &rc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "F32", .misalign = 2};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    lh_bind_stats s;
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.copied, 12);
    CU_ASSERT_EQUAL(s.zero_copy, 0);
    CU_ASSERT_EQUAL(check_values(m, "F32", 0), 0);
    lh_model_free(m);
    /* misaligned and converted */
    m = tiny_llama(1, false, "float32", &rc);
    lh_test_rmtree(d);
    free(d);
    d = lh_test_mkdtemp();
    o.dtype = "BF16";
    o.misalign = 1;
    write_checkpoint(m, d, &o);
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.converted, 12);
    CU_ASSERT_EQUAL(check_values(m, "BF16", 0), 0);
    lh_model_free(m);
    lh_run_config_free(&rc);
    lh_test_rmtree(d);
    free(d);
}

static void test_sharded(void)
{
    lh_model *m = tiny_llama(2, false, "float32", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "F32", .shards = 3};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    CU_ASSERT_TRUE(lh_checkpoint_sharded(lh_model_checkpoint(m)));
    CU_ASSERT_EQUAL(lh_checkpoint_file_count(lh_model_checkpoint(m)), 3);
    lh_bind_stats s;
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.zero_copy, 21);
    CU_ASSERT_EQUAL(check_values(m, "F32", 1), 0);
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);
}

static void test_ignored_buffers(void)
{
    lh_model *m = tiny_llama(2, false, "float32", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char *d = lh_test_mkdtemp();
    const char *extra[] = {"model.layers.0.self_attn.rotary_emb.inv_freq",
                           "model.layers.1.self_attn.rotary_emb.inv_freq", NULL};
    gen_opts o = {.dtype = "F32", .extra = extra};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    lh_bind_stats s;
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.ignored, 2);
    CU_ASSERT_EQUAL(s.bound, 21);
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);
}

/* ---- the mismatch report ---- */

static void test_all_problems_at_once(void)
{
    lh_model *m = tiny_llama(2, false, "float32", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char *d = lh_test_mkdtemp();
    const char *skip[] = {"model.norm.weight", "model.layers.1.mlp.down_proj.weight", NULL};
    const char *extra[] = {"foo.weight", "model.layers.2.mlp.up_proj.weight", "bar",
                           "model.layers.0.self_attn.rotary_emb.inv_freq", NULL};
    gen_opts o = {.dtype = "F32",
                  .skip = skip,
                  .extra = extra,
                  .transpose = "model.layers.0.self_attn.k_proj.weight",
                  .as_i64 = "model.layers.0.input_layernorm.weight"};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    lh_checkpoint *ck = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_checkpoint_open(d, &ck, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_model_bind_weights(m, ck, &err), LH_E_CONFIG); /* consumes ck */
    CU_ASSERT_EQUAL(err.code, LH_E_CONFIG);
    const char *msg = err.msg;
    CU_ASSERT(has(msg, "LlamaForCausalLM: checkpoint "));
    CU_ASSERT(has(msg, d));
    CU_ASSERT(has(msg, "2 missing, 3 unexpected, 1 mis-shaped, 1 unsupported dtype"));
    CU_ASSERT(has(msg, "missing (2): model.layers.1.mlp.down_proj.weight, model.norm.weight"));
    CU_ASSERT(has(msg, "unexpected (3): bar, foo.weight, model.layers.2.mlp.up_proj.weight"));
    CU_ASSERT(has(msg, "mis-shaped (1): model.layers.0.self_attn.k_proj.weight expected "
                       "[8, 16], found [16, 8]"));
    CU_ASSERT(has(msg, "unsupported dtype (1): unsupported dtype I64 for tensor "
                       "model.layers.0.input_layernorm.weight; supported: F32, F16, BF16"));
    CU_ASSERT_PTR_NULL(strstr(msg, "inv_freq"));
    CU_ASSERT_PTR_NULL(strstr(msg, "no parameter name matched"));
    /* nothing bound; the model is usable for another try */
    CU_ASSERT_FALSE(lh_model_weights_bound(m));
    lh_tensor t;
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.norm", "weight", &t), LH_E_USAGE);
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p))
        CU_ASSERT_PTR_NULL(p->data);
    char *d2 = lh_test_mkdtemp();
    gen_opts good = {.dtype = "BF16"};
    write_checkpoint(m, d2, &good);
    CU_ASSERT_EQUAL(load(m, d2, &err), LH_OK);
    CU_ASSERT_EQUAL(check_values(m, "BF16", 0), 0);
    lh_model_free(m);
    lh_test_rmtree(d);
    lh_test_rmtree(d2);
    free(d);
    free(d2);
}

static void count_sink(lh_log_level level, const char *msg, void *user)
{
    size_t *n = user;
    if (level == LH_LOG_DEBUG && strstr(msg, "weights: missing: "))
        n[0]++;
    if (level == LH_LOG_DEBUG && strstr(msg, "weights: unexpected: "))
        n[1]++;
}

static void test_report_is_bounded(void)
{
    lh_model *m = tiny_llama(8, false, "float32", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(count_params(m, false), 75);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "F32", .prefix = "transformer."};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    CU_ASSERT_EQUAL(load(m, d, &err), LH_E_CONFIG);
    size_t len = strlen(err.msg);
    CU_ASSERT(len < sizeof err.msg - 400); /* room left for callers' prefixes */
    CU_ASSERT(has(err.msg, "75 missing, 75 unexpected"));
    CU_ASSERT(has(err.msg, "missing (75): model.embed_tokens.weight, "));
    CU_ASSERT(has(err.msg, "unexpected (75): transformer.lm_head.weight, "));
    CU_ASSERT(has(err.msg, " more"));
    CU_ASSERT(has(err.msg, "no parameter name matched any tensor"));
    CU_ASSERT(has(err.msg, "LLMHOST_LOG=debug"));
    /* every entry at debug level */
    size_t logged[2] = {0, 0};
    lh_log_set_sink(count_sink, logged); /* the sink sees every level */
    CU_ASSERT_EQUAL(load(m, d, &err), LH_E_CONFIG);
    lh_log_set_sink(NULL, NULL);
    CU_ASSERT_EQUAL(logged[0], 75);
    CU_ASSERT_EQUAL(logged[1], 75);
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);
}

/* ---- tied embeddings ---- */

static void test_tied(void)
{
    lh_err err = {0};
    lh_tensor head, emb;
    /* a: no lm_head.weight in the file (what save_pretrained writes) */
    lh_model *m = tiny_llama(1, true, "float32", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(count_params(m, true), 12);
    CU_ASSERT_EQUAL(count_params(m, false), 11);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "F32"};
    write_checkpoint(m, d, &o);
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    lh_bind_stats s;
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.bound, 11);
    CU_ASSERT_EQUAL(s.tied, 1);
    CU_ASSERT_EQUAL(s.ignored, 0);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "lm_head", "weight", &head), LH_OK);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.embed_tokens", "weight", &emb), LH_OK);
    CU_ASSERT_PTR_EQUAL(head.data, emb.data);
    CU_ASSERT_EQUAL(head.shape[0], 40);
    CU_ASSERT_EQUAL(check_values(m, "F32", 1), 0);
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);

    /* b: both present: lm_head.weight accepted, unused */
    m = tiny_llama(1, true, "float32", NULL);
    d = lh_test_mkdtemp();
    o.write_tied = true;
    write_checkpoint(m, d, &o);
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.ignored, 1);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "lm_head", "weight", &head), LH_OK);
    const lh_st_tensor *e = lh_checkpoint_find(lh_model_checkpoint(m), "model.embed_tokens.weight",
                                               NULL);
    CU_ASSERT_PTR_EQUAL(head.data, e->data);
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);

    /* c: only the tied copy: the source is bound from it */
    m = tiny_llama(1, true, "float32", NULL);
    d = lh_test_mkdtemp();
    o.skip_tie_sources = true;
    write_checkpoint(m, d, &o);
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.ignored, 0); /* the copy is used, not ignored */
    CU_ASSERT_EQUAL(s.bound, 11);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.embed_tokens", "weight", &emb), LH_OK);
    const lh_st_tensor *h = lh_checkpoint_find(lh_model_checkpoint(m), "lm_head.weight", NULL);
    CU_ASSERT_PTR_NOT_NULL(h);
    CU_ASSERT_PTR_NULL(lh_checkpoint_find(lh_model_checkpoint(m), "model.embed_tokens.weight",
                                          NULL));
    CU_ASSERT_PTR_EQUAL(emb.data, h->data);
    for (int64_t i = 0; i < 40 * 16; i++)
        if (((const float *)emb.data)[i] != value("lm_head.weight", i)) {
            CU_FAIL("embedding values");
            break;
        }
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);

    /* d: a tied copy with the wrong shape is reported */
    m = tiny_llama(1, true, "float32", NULL);
    d = lh_test_mkdtemp();
    gen_opts bad = {.dtype = "F32", .write_tied = true, .transpose = "lm_head.weight"};
    write_checkpoint(m, d, &bad);
    CU_ASSERT_EQUAL(load(m, d, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "1 mis-shaped"));
    CU_ASSERT(has(err.msg, "lm_head.weight expected [40, 16], found [16, 40]"));
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);

    /* d2: only the tied copy, mis-shaped: reported once, under the copy's name */
    m = tiny_llama(1, true, "float32", NULL);
    d = lh_test_mkdtemp();
    gen_opts bad2 = {.dtype = "F32", .write_tied = true, .skip_tie_sources = true,
                     .transpose = "lm_head.weight"};
    write_checkpoint(m, d, &bad2);
    CU_ASSERT_EQUAL(load(m, d, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "does not match the model: 1 mis-shaped\n"));
    CU_ASSERT(has(err.msg, "lm_head.weight expected [40, 16], found [16, 40]"));
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);

    /* e: neither present: the source is missing (once) */
    m = tiny_llama(1, true, "float32", NULL);
    d = lh_test_mkdtemp();
    const char *skip[] = {"model.embed_tokens.weight", NULL};
    gen_opts none = {.dtype = "F32", .skip = skip};
    write_checkpoint(m, d, &none);
    CU_ASSERT_EQUAL(load(m, d, &err), LH_E_CONFIG);
    CU_ASSERT(has(err.msg, "does not match the model: 1 missing\n"));
    CU_ASSERT(has(err.msg, "missing (1): model.embed_tokens.weight"));
    CU_ASSERT_PTR_NULL(strstr(err.msg, "lm_head"));
    lh_model_free(m);
    lh_test_rmtree(d);
    free(d);
}

/* ---- quantized params ---- */

/* The quant config quantizes at load: the checkpoint holds the float weights (written from the
 * unquantized tree), binding quantizes every linear and computes its derived scale, and what it
 * took is the plan's bytes. */
static void check_quantized_load(const char *yaml, size_t n_quantized, lh_dtype wdt)
{
    lh_model *plain = tiny_llama(1, false, "bfloat16", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "BF16"};
    write_checkpoint(plain, d, &o);
    lh_model_free(plain);
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_run_config_load_string(&rc, yaml, "inline", &err), LH_OK);
    lh_model *m = tiny_llama(1, false, "bfloat16", &rc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    if (load(m, d, &err) != LH_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_TRUE_FATAL(lh_model_weights_bound(m));
    lh_bind_stats s;
    lh_model_bind_stats(m, &s);
    CU_ASSERT_EQUAL(s.quantized, n_quantized);
    lh_memory_plan plan;
    CU_ASSERT_EQUAL_FATAL(lh_model_plan(m, &plan, &err), LH_OK);
    CU_ASSERT_EQUAL(s.mapped_bytes + s.owned_bytes, plan.weight_bytes);
    lh_tensor t;
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.layers.0.mlp.gate_proj", "weight",
                                                  &t), LH_OK);
    CU_ASSERT_EQUAL(t.dtype, wdt);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.layers.0.mlp.gate_proj",
                                                  "weight_scale", &t), LH_OK);
    CU_ASSERT_EQUAL(t.dtype, wdt == LH_DTYPE_INT4 ? LH_DTYPE_F16 : LH_DTYPE_F32);
    lh_model_free(m);
    lh_run_config_free(&rc);
    lh_test_rmtree(d);
    free(d);
}

static void test_quantized_at_load(void)
{
    /* q k v o gate up down lm_head */
    check_quantized_load("quant:\n  scheme: int8\n", 8, LH_DTYPE_INT8);
    check_quantized_load("quant:\n  scheme: fp8\n", 8, LH_DTYPE_FP8_E4M3);
    /* int4 on the MLP through a rule */
    check_quantized_load("quant:\n  rules:\n    - pattern: \"*.mlp.*\"\n"
                         "      scheme: int4\n      group_size: 16\n", 3, LH_DTYPE_INT4);
}

/* ---- API misuse ---- */

static void test_misuse(void)
{
    lh_model *m = tiny_llama(1, false, "float32", NULL);
    lh_model *other = tiny_llama(1, false, "float32", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    lh_tensor t;
    memset(&t, 0, sizeof t);
    /* not bound yet */
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.norm", "weight", &t), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(t.data);
    char *d = lh_test_mkdtemp();
    gen_opts o = {.dtype = "F32"};
    write_checkpoint(m, d, &o);
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(load(m, d, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.norm", "weight", &t), LH_OK);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.norm", "bias", &t), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.nope", "weight", &t), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "", "weight", &t), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, NULL, "weight", &t), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.norm", NULL, &t), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(m, "model.norm", "weight", NULL), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_param_tensor_by_name(NULL, "model.norm", "weight", &t), LH_E_USAGE);
    /* a module of another model */
    const lh_module *foreign = lh_tree_lookup(other->b, "model.norm");
    CU_ASSERT_EQUAL(lh_model_param_tensor(m, foreign, "weight", &t), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_param_tensor(m, NULL, "weight", &t), LH_E_USAGE);
    /* binding twice: refused, and the second checkpoint is consumed */
    lh_checkpoint *ck = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_checkpoint_open(d, &ck, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_model_bind_weights(m, ck, &err), LH_E_USAGE);
    CU_ASSERT(has(err.msg, "already bound"));
    CU_ASSERT_EQUAL(lh_model_load_weights(m, d, &err), LH_E_USAGE);
    /* NULL arguments */
    CU_ASSERT_EQUAL_FATAL(lh_checkpoint_open(d, &ck, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_model_bind_weights(NULL, ck, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_bind_weights(other, NULL, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_load_weights(other, NULL, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_model_load_weights(other, "/nonexistent/model", &err), LH_E_IO);
    CU_ASSERT(has(err.msg, "/nonexistent/model"));
    CU_ASSERT_FALSE(lh_model_weights_bound(other));
    CU_ASSERT_FALSE(lh_model_weights_bound(NULL));
    CU_ASSERT_PTR_NULL(lh_model_checkpoint(other));
    lh_model_free(m);
    lh_model_free(other);
    lh_test_rmtree(d);
    free(d);
}

static void test_param_iterator(void)
{
    lh_model *m = tiny_llama(1, true, "float32", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const char *want[] = {"model.embed_tokens.weight",
                          "model.layers.0.input_layernorm.weight",
                          "model.layers.0.self_attn.q_proj.weight",
                          "model.layers.0.self_attn.k_proj.weight",
                          "model.layers.0.self_attn.v_proj.weight",
                          "model.layers.0.self_attn.o_proj.weight",
                          "model.layers.0.post_attention_layernorm.weight",
                          "model.layers.0.mlp.gate_proj.weight",
                          "model.layers.0.mlp.up_proj.weight",
                          "model.layers.0.mlp.down_proj.weight",
                          "model.norm.weight",
                          "lm_head.weight"};
    size_t i = 0;
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p), i++) {
        char name[256];
        param_name(name, sizeof name, p);
        CU_ASSERT(i < 12 && strcmp(name, want[i]) == 0);
    }
    CU_ASSERT_EQUAL(i, 12);
    CU_ASSERT_PTR_NULL(lh_tree_next_param(NULL, NULL));
    lh_model_free(m);
}

/* ---- real Hugging Face fixtures (tests/fixtures/models/<name>/), when present ---- */

typedef struct reg_ctx {
    lh_model_provider providers[8];
    char names[8][96];
    size_t n;
} reg_ctx;

static lh_status t_register_model(lh_plugin_ctx *ctx, const lh_model_provider *p)
{
    reg_ctx *t = (reg_ctx *)(void *)ctx;
    if (!p || !p->name || t->n == 8)
        return LH_E_USAGE;
    t->providers[t->n] = *p;
    snprintf(t->names[t->n], sizeof t->names[t->n], "%s", p->name);
    t->providers[t->n].name = t->names[t->n];
    t->n++;
    return LH_OK;
}

static lh_status t_register_other(lh_plugin_ctx *ctx, const lh_model_provider *p)
{
    (void)ctx;
    (void)p;
    return LH_OK;
}

static lh_status t_init_fail(lh_plugin_ctx *ctx, const char *fmt, ...)
{
    (void)ctx;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    return LH_E_INIT;
}

static const char *t_plugin_path(lh_plugin_ctx *ctx)
{
    (void)ctx;
    return "";
}

/* GGUF providers are not this test's subject: accepted, not kept. */
static lh_status t_register_gguf(lh_plugin_ctx *ctx, const lh_gguf_provider *p)
{
    (void)ctx;
    return p && p->gguf_arch ? LH_OK : LH_E_USAGE;
}

/* The provider of `arch` from the built-in plugin the index names. */
static bool find_provider(const char *arch, reg_ctx *t, const lh_model_provider **out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/arch_index.tsv", lh_test_env("LH_BUILTIN_PLUGINS"));
    lh_arch_index idx;
    lh_err err = {0};
    if (lh_arch_index_load(path, &idx, &err) != LH_OK) {
        fprintf(stderr, "\n    %s\n", err.msg);
        return false;
    }
    const lh_index_row *row = lh_arch_index_find(&idx, LH_KIND_MODEL, arch);
    bool ok = false;
    if (row) {
        snprintf(path, sizeof path, "%s/%s", lh_test_env("LH_BUILTIN_PLUGINS"),
                 row->shared_object);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept loaded, as the host does */
        void *sym = h ? dlsym(h, LH_PLUGIN_ENTRY_SYMBOL) : NULL;
        if (sym) {
            lh_plugin_entry_fn entry;
            memcpy(&entry, &sym, sizeof entry);
            lh_host_api api = *lh_host_api_table();
            api.register_model = t_register_model;
            api.register_vision_encoder = t_register_other;
            api.register_gguf = t_register_gguf;
            api.init_fail = t_init_fail;
            api.plugin_path = t_plugin_path;
            memset(t, 0, sizeof *t);
            if (entry()->init(&api, (lh_plugin_ctx *)(void *)t) == LH_OK)
                for (size_t i = 0; i < t->n; i++)
                    if (strcmp(t->providers[i].name, arch) == 0) {
                        *out = &t->providers[i];
                        ok = true;
                    }
        } else {
            fprintf(stderr, "\n    dlopen %s: %s\n", path, dlerror());
        }
    }
    lh_arch_index_free(&idx);
    return ok;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct first_param {
    const char *module, *name;
} first_param;

static void take_first(const lh_param_info *p, void *user)
{
    first_param *fp = user;
    if (!fp->module) {
        fp->module = p->module;
        fp->name = p->name;
    }
}

static void test_fixture_models(void)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/models", lh_test_env("LH_FIXTURES"));
    DIR *dir = opendir(root);
    if (!dir) {
        LH_TEST_SKIP("no tests/fixtures/models");
        return;
    }
    char *names[256];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) && n < 256) {
        char cfg_path[4400];
        snprintf(cfg_path, sizeof cfg_path, "%s/%s/config.json", root, de->d_name);
        struct stat sb;
        if (de->d_name[0] != '.' && stat(cfg_path, &sb) == 0)
            names[n++] = strdup(de->d_name);
    }
    closedir(dir);
    if (!n) {
        LH_TEST_SKIP("no model fixtures");
        return;
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        char mdir[4352], cfg_path[4400];
        snprintf(mdir, sizeof mdir, "%s/%s", root, names[i]);
        lh_err err = {0};
        lh_model_config *cfg = NULL;
        /* config.json; config.v4.json (the older spelling) if this build cannot read it */
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", mdir);
        if (lh_model_config_load(cfg_path, &cfg, &err) != LH_OK) {
            snprintf(cfg_path, sizeof cfg_path, "%s/config.v4.json", mdir);
            lh_err err2 = {0};
            if (lh_model_config_load(cfg_path, &cfg, &err2) != LH_OK) {
                fprintf(stderr, "\n    %s: %s\n", names[i], err.msg);
                CU_FAIL("fixture config");
                continue;
            }
        }
        reg_ctx t;
        const lh_model_provider *prov = NULL;
        if (!find_provider(cfg->geo.architecture, &t, &prov)) {
            fprintf(stderr, "\n    %s: no built-in provider for %s\n", names[i],
                    cfg->geo.architecture);
            CU_FAIL("fixture provider");
            lh_model_config_free(cfg);
            continue;
        }
        lh_model *m = NULL;
        lh_status st = lh_model_build(lh_host_api_table(), prov, cfg, NULL, &m, &err);
        if (st == LH_OK)
            st = lh_model_load_weights(m, mdir, &err);
        if (st != LH_OK) {
            fprintf(stderr, "\n    fixture %s: %s\n", names[i], err.msg);
            CU_FAIL("fixture binds with no missing or unexpected tensors");
        } else {
            lh_bind_stats s;
            lh_model_bind_stats(m, &s);
            CU_ASSERT_EQUAL(s.bound, count_params(m, false));
            CU_ASSERT_EQUAL(s.tied, count_params(m, true) - count_params(m, false));
            CU_ASSERT_EQUAL(s.tied, cfg->geo.tie_word_embeddings ? 1 : 0);
            printf("\n    %s: %zu tensors (%zu in place, %zu converted, %zu tied)", names[i],
                   s.bound, s.zero_copy, s.converted, s.tied);
        }
        lh_model_free(m);
        m = NULL;
        /* the same checkpoint into another dtype: every tensor converted, values exact */
        lh_run_config rc;
        lh_run_config_init(&rc);
        rc.dtype = cfg->geo.torch_dtype == LH_DTYPE_BF16 ? LH_DTYPE_F32 : LH_DTYPE_BF16;
        st = lh_model_build(lh_host_api_table(), prov, cfg, &rc, &m, &err);
        if (st == LH_OK)
            st = lh_model_load_weights(m, mdir, &err);
        CU_ASSERT_EQUAL(st, LH_OK);
        if (st == LH_OK) {
            lh_bind_stats s;
            lh_model_bind_stats(m, &s);
            /* an FP8 checkpoint's weights and scales stay as stored */
            if (json_object_get(cfg->root, "quantization_config")) {
                CU_ASSERT_EQUAL(s.converted + s.zero_copy, s.bound);
            } else {
                /* MoE routers stay in their stored float dtype rather than narrow */
                CU_ASSERT_EQUAL(s.converted + s.stored_float, s.bound);
            }
            /* the tree's first parameter (every family's token embedding), whatever its name */
            first_param fp = {0};
            lh_model_foreach_param(m, take_first, &fp);
            char full[300];
            snprintf(full, sizeof full, "%s.%s", fp.module, fp.name);
            lh_tensor t;
            CU_ASSERT_EQUAL_FATAL(lh_model_param_tensor_by_name(m, fp.module, fp.name, &t),
                                  LH_OK);
            const lh_st_tensor *src = lh_checkpoint_find(lh_model_checkpoint(m), full, NULL);
            CU_ASSERT_PTR_NOT_NULL_FATAL(src);
            int bad = 0;
            for (int64_t k = 0; k < src->numel; k++) {
                float x = src->dtype == LH_DTYPE_BF16
                              ? lh_k_bf16_to_f32(((const uint16_t *)src->data)[k])
                              : ((const float *)src->data)[k];
                if (rc.dtype == LH_DTYPE_F32)
                    bad += memcmp(&((const float *)t.data)[k], &x, 4) != 0;
                else
                    bad += ((const uint16_t *)t.data)[k] != lh_k_f32_to_bf16(x);
            }
            CU_ASSERT_EQUAL(bad, 0);
        } else {
            fprintf(stderr, "\n    fixture %s as %s: %s\n", names[i], lh_dtype_name(rc.dtype),
                    err.msg);
        }
        lh_model_free(m);
        lh_run_config_free(&rc);
        lh_model_config_free(cfg);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
}

static CU_TestInfo bind_tests[] = {
    {"bf16 checkpoint into bf16 model: zero-copy", test_zero_copy_bf16},
    {"f32 checkpoint into bf16 model: converted exactly", test_convert_f32_to_bf16},
    {"f32/f16/bf16 conversions in every direction", test_convert_to_f32_and_f16},
    {"misaligned data is copied, not mapped", test_misaligned_copies},
    {"sharded checkpoint", test_sharded},
    {"rotary inv_freq buffers are ignored", test_ignored_buffers},
    {"missing + unexpected + mis-shaped + bad dtype in one error", test_all_problems_at_once},
    {"the report stays bounded, with counts", test_report_is_bounded},
    {"tied embeddings", test_tied},
    {"the quant config quantizes at load: bytes = plan", test_quantized_at_load},
    {"API misuse", test_misuse},
    {"param iterator order", test_param_iterator},
    {"every fixture model binds cleanly", test_fixture_models},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"weights: binding", NULL, NULL, NULL, NULL, bind_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    lh_log_set_level(LH_LOG_ERROR);
    return lh_test_main(argc, argv, suites);
}
