/* The runner's error paths (host/runtime/runner.c, runner_blocks.c), one test per class of bad
 * input a model plugin can hand it, each asserting the exact status and the distinctive part of
 * the message (what was asked, what exists).
 *
 * The plugin is tests/plugins/fwd_bad (libmodel_fwd_bad.so): the real Llama tree, so it binds
 * tests/fixtures/models/llama-mha-f32, with a bind / forward that misbehave as the model
 * config's "fwd_bad_case" says. Each test copies the fixture's checkpoint into a temp model
 * dir once (suite init), rewrites config.json's "architectures" (FwdBadForCausalLM or
 * FwdBadNoForward) and "fwd_bad_case", and opens an engine through the public API with the
 * plugin in a custom module dir. A step that asks for no logits has no public path (every
 * generate / logits step asks for at least one row), so that case drives the runner directly
 * (lh_runner_forward with n_out 0), as test_paged.c does.
 *
 * The "good" case is the positive control: the plugin's Llama forward must give the built-in
 * LlamaForCausalLM's logits and greedy tokens. The suite runs clean under ASan + UBSan with
 * LeakSanitizer (every failing bind / open frees what it made). */
#include "llmhost.h"
#include "runner.h"
#include "rt_host.h"
#include "api/host_internal.h"
#include "runtime/runner.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "FwdBadForCausalLM"
#define VOCAB 256

static lh_host *host;
static char *plugin_dir; /* the custom module dir: libmodel_fwd_bad.so */
static char *model_dir;  /* the fixture's checkpoint, config.json rewritten per test */
static char fixture[1024];

static const int32_t prompt[3] = {1, 2, 3};

/* config.json of the fixture with architectures [arch] and fwd_bad_case (NULL: none). */
static bool write_config(const char *arch, const char *fwd_case)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", fixture);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return false;
    }
    json_t *archs = json_array();
    json_array_append_new(archs, json_string(arch));
    json_object_set_new(cfg, "architectures", archs);
    if (fwd_case)
        json_object_set_new(cfg, "fwd_bad_case", json_string(fwd_case));
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    int rc = json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    return rc == 0;
}

static lh_status open_dir(const char *dir, lh_engine **e, lh_err *err)
{
    static const char *const overrides[] = {"max_batch_size=2", "max_seq_len=32", NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = dir, .n_threads = 1,
                           .overrides = overrides};
    *e = NULL;
    memset(err, 0, sizeof *err);
    return lh_engine_open(host, &o, e, err);
}

/* Opens the temp model as `arch` with fwd_bad_case `fwd_case`. */
static lh_status open_case(const char *arch, const char *fwd_case, lh_engine **e, lh_err *err)
{
    if (!write_config(arch, fwd_case)) {
        *e = NULL;
        return lh_error_set(err, LH_E_IO, "test: cannot write the config");
    }
    return open_dir(model_dir, e, err);
}

static bool has(const lh_err *err, const char *part)
{
    if (strstr(err->msg, part))
        return true;
    fprintf(stderr, "\n    message: %s\n    lacks:   %s\n", err->msg, part);
    return false;
}

/* Opening fails with `code`, the message starting "opening DIR: ARCH: " and holding `part`. */
static void expect_open_fails(const char *arch, const char *fwd_case, lh_status code,
                              const char *part)
{
    lh_engine *e = NULL;
    lh_err err;
    lh_status st = open_case(arch, fwd_case, &e, &err);
    CU_ASSERT_EQUAL(st, code);
    if (st != code)
        fprintf(stderr, "\n    %s: status %d, message: %s\n", fwd_case ? fwd_case : arch,
                (int)st, err.msg);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT_PTR_NULL(e);
    char head[1200];
    snprintf(head, sizeof head, "opening %s: %s: ", model_dir, arch);
    CU_ASSERT(has(&err, head));
    CU_ASSERT(has(&err, part));
    lh_engine_close(e);
}

/* The engine opens; lh_engine_logits over the 3-token prompt fails with `code` and `part`. */
static void expect_logits_fail(const char *fwd_case, lh_status code, const char *part)
{
    lh_engine *e = NULL;
    lh_err err;
    CU_ASSERT_EQUAL_FATAL(open_case(ARCH, fwd_case, &e, &err), LH_OK);
    float logits[3 * VOCAB];
    lh_status st = lh_engine_logits(e, prompt, 3, logits, &err);
    CU_ASSERT_EQUAL(st, code);
    if (st != code)
        fprintf(stderr, "\n    %s: status %d, message: %s\n", fwd_case, (int)st, err.msg);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT(has(&err, part));
    lh_engine_close(e);
}

/* ---- the positive control ---------------------------------------------------------------------- */

static void test_good_matches_builtin(void)
{
    lh_engine *ref = NULL, *e = NULL;
    lh_err err;
    CU_ASSERT_EQUAL_FATAL(open_dir(fixture, &ref, &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(open_case(ARCH, "good", &e, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_engine_vocab_size(e), VOCAB);
    static float a[3 * VOCAB], b[3 * VOCAB];
    CU_ASSERT_EQUAL(lh_engine_logits(ref, prompt, 3, a, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_engine_logits(e, prompt, 3, b, &err), LH_OK);
    double d = 0;
    for (size_t i = 0; i < 3 * VOCAB; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    CU_ASSERT(d <= 1e-6);
    const int32_t *pp[1] = {prompt};
    int64_t len = 3;
    int32_t ta[8], tb[8];
    CU_ASSERT_EQUAL(lh_engine_generate_greedy(ref, pp, &len, 1, 8, ta, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_engine_generate_greedy(e, pp, &len, 1, 8, tb, &err), LH_OK);
    CU_ASSERT_EQUAL(memcmp(ta, tb, sizeof ta), 0);
    /* a step that only fills the KV cache: the good forward skips the head */
    lh_runner *r = lh_engine_runner(e);
    int64_t start = 0, n = 3, ctx = 0, slot = 0;
    int32_t pos[3] = {0, 1, 2};
    lh_attn_step st = {.struct_size = sizeof st, .n_tokens = 3, .n_seqs = 1, .positions = pos,
                       .token_start = &start, .n_new = &n, .ctx_len = &ctx, .slot = &slot};
    CU_ASSERT_EQUAL(lh_runner_forward(r, lh_engine_kctx(e), &st, prompt, NULL, 0, NULL, &err),
                    LH_OK);
    lh_runner_release(r, 0);
    lh_engine_close(e);
    lh_engine_close(ref);
}

/* ---- 1. a provider that only describes the model --------------------------------------------- */

static void test_no_forward_pass(void)
{
    expect_open_fails("FwdBadNoForward", NULL, LH_E_UNSUPPORTED,
                      "FwdBadNoForward: its plugin describes the model (construct) but provides "
                      "no forward pass (bind/forward), so it cannot run");
}

/* ---- 2., 3. bind asks for what the tree / the attention table lacks ------------------------- */

static void test_missing_parameter(void)
{
    expect_open_fails(ARCH, "missing_weight", LH_E_USAGE,
                      "bind asked for the parameter 'model.layers.1.self_attn.qkv_proj.weight', "
                      "which the model's tree (21 parameters) does not have; nearest: "
                      "'model.layers.1.self_attn.q_proj.weight'");
}

static void test_missing_attention_layer(void)
{
    expect_open_fails(ARCH, "missing_attention", LH_E_USAGE,
                      "bind asked for the attention layer 'model.layers.2.self_attn', which is "
                      "not in the model's attention-layer table (2 layers registered by "
                      "add_attention; nearest: 'model.layers.0.self_attn')");
}

static void test_missing_moe_block(void)
{
    expect_open_fails(ARCH, "missing_moe", LH_E_USAGE,
                      "bind asked for the MoE block 'model.layers.0.mlp', which the model's tree "
                      "does not have (0 blocks built by add_moe)");
}

/* ---- 4. what bind reports about the forward pass ---------------------------------------------- */

static void test_bad_forward_info(void)
{
    expect_open_fails(ARCH, "vocab_zero", LH_E_INTERNAL,
                      "bind reported vocab_size 0 and scratch 2816 B/token, 256 B/row, 9 "
                      "requests (vocab must be in [1, 2^31 - 1], the others >= 0)");
    expect_open_fails(ARCH, "scratch_negative", LH_E_INTERNAL,
                      "bind reported vocab_size 256 and scratch -1 B/token, 256 B/row, 9 "
                      "requests");
}

/* ---- 5. scratch beyond what bind declared ------------------------------------------------------ */

static void test_scratch_requests(void)
{
    expect_logits_fail("too_many_requests", LH_E_INTERNAL,
                       ARCH ": scratch request 10 beyond the 9 the plugin declared "
                       "(lh_forward_info.scratch_requests)");
}

static void test_scratch_bytes(void)
{
    /* 3 tokens x 256 B + 10 x 256 B of alignment: 3328 bytes; the fifth [3, 64] f32 request
     * (768 bytes) finds 256 left */
    expect_logits_fail("too_many_bytes", LH_E_INTERNAL,
                       ARCH ": scratch request 5 [3, 64] (768 bytes) exceeds the step's arena "
                       "(3072 of 3328 bytes used) sized from the plugin's lh_forward_info "
                       "(256 B/token, 0 B/row, 9 requests) for 3 tokens");
}

/* ---- 6. attend with tensors of the wrong shape ------------------------------------------------- */

static void test_attend_shapes(void)
{
    expect_logits_fail("attend_q", LH_E_USAGE,
                       ARCH ": layer 0: attend: q must be a contiguous float32 [3, 64] tensor (tokens x "
                       "4 heads x 16)");
    expect_logits_fail("attend_k", LH_E_USAGE,
                       ARCH ": layer 0: attend: k must be a contiguous float32 [3, 64] tensor (tokens x "
                       "4 heads x 16)");
    expect_logits_fail("attend_v", LH_E_USAGE,
                       ARCH ": layer 0: attend: v must be a contiguous float32 [3, 64] tensor");
    expect_logits_fail("attend_out", LH_E_USAGE,
                       ARCH ": layer 0: attend: out must be a contiguous float32 [3, 64] tensor");
}

/* A bf16 q of the right shape must be refused (LH_E_USAGE, naming q), not read as f32: an f32
 * view of it would read (and, rotating, write) twice its bytes. The plugin allocates room for
 * f32 so that a regression fails the assertion instead of corrupting memory. */
static void test_attend_dtype(void)
{
    expect_logits_fail("attend_dtype", LH_E_USAGE, ARCH ": layer 0: attend: q");
}

/* ---- 7. output_rows on a step that asks for no logits ----------------------------------------- */

static void test_output_rows_no_logits(void)
{
    lh_engine *e = NULL;
    lh_err err;
    CU_ASSERT_EQUAL_FATAL(open_case(ARCH, "output_rows_always", &e, &err), LH_OK);
    static float logits[3 * VOCAB];
    CU_ASSERT_EQUAL(lh_engine_logits(e, prompt, 3, logits, &err), LH_OK); /* rows asked: fine */
    lh_runner *r = lh_engine_runner(e);
    int64_t start = 0, n = 3, ctx = 0, slot = 0;
    int32_t pos[3] = {0, 1, 2};
    lh_attn_step st = {.struct_size = sizeof st, .n_tokens = 3, .n_seqs = 1, .positions = pos,
                       .token_start = &start, .n_new = &n, .ctx_len = &ctx, .slot = &slot};
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(lh_runner_forward(r, lh_engine_kctx(e), &st, prompt, NULL, 0, NULL, &err),
                    LH_E_USAGE);
    CU_ASSERT_EQUAL(err.code, LH_E_USAGE);
    CU_ASSERT(has(&err, ARCH ": lm_head: output_rows: this step asks for no logits"));
    lh_runner_release(r, 0);
    /* nothing stuck */
    CU_ASSERT_EQUAL(lh_engine_logits(e, prompt, 3, logits, &err), LH_OK);
    lh_engine_close(e);
}

/* ---- 8. row views outside the weight, of no weight -------------------------------------------- */

static void test_weight_rows(void)
{
    expect_open_fails(ARCH, "rows_outside", LH_E_USAGE,
                      "weight_rows: rows [48, 80) of model.layers.0.self_attn.q_proj.weight, "
                      "which has 64 rows");
    expect_open_fails(ARCH, "rows_null", LH_E_USAGE, ARCH ": weight_rows: NULL weight");
}

/* ---- 9. bind breaking its own contract ---------------------------------------------------------- */

static void test_bind_contract(void)
{
    /* an error recorded, LH_OK returned: still a failure, and the state it kept is destroyed
     * (LeakSanitizer) */
    expect_open_fails(ARCH, "bind_fail_ok", LH_E_CONFIG,
                      ARCH ": fwd_bad: deliberate bind failure (state kept, returned ok)");
    /* a failure recorded with the code "ok" is an internal error */
    expect_open_fails(ARCH, "bind_fail_okcode", LH_E_INTERNAL,
                      ARCH ": fwd_bad: a failure recorded with the code ok");
    /* an error returned without a message */
    expect_open_fails(ARCH, "bind_silent", LH_E_UNSUPPORTED,
                      ARCH ": bind failed (unsupported) without recording a message");
}

/* ---- 10. forward failing: the architecture and fwd_where's context ---------------------------- */

static void test_fwd_fail_context(void)
{
    const char *want = ARCH ": layer 1: fwd_bad: deliberate failure of layer 1's forward";
    expect_logits_fail("fwd_fail", LH_E_UNSUPPORTED, want);
    /* the same through generation */
    lh_engine *e = NULL;
    lh_err err;
    CU_ASSERT_EQUAL_FATAL(open_case(ARCH, "fwd_fail", &e, &err), LH_OK);
    const int32_t *pp[1] = {prompt};
    int64_t len = 3;
    int32_t out[4];
    CU_ASSERT_EQUAL(lh_engine_generate_greedy(e, pp, &len, 1, 4, out, &err), LH_E_UNSUPPORTED);
    CU_ASSERT(has(&err, want));
    lh_engine_close(e);
    /* recorded, LH_OK returned: still the recorded failure */
    expect_logits_fail("fwd_fail_ok", LH_E_CONFIG,
                       ARCH ": lm_head: fwd_bad: deliberate failure, then returns ok");
    /* returned without a message */
    expect_logits_fail("fwd_silent", LH_E_IO,
                       ARCH ": forward failed (io-error) without recording a message");
}

/* ---- 11. linear with mismatched shapes: the kernel's message, naming the weight -------------- */

static void test_linear_shapes(void)
{
    expect_logits_fail("linear_shape", LH_E_USAGE,
                       ARCH ": layer 0: linear model.layers.0.self_attn.q_proj.weight: "
                       "lh_k_matmul: x [6, 32] and w [64, 64] disagree on K (32 vs 64)");
}

/* ---- the other blocks' argument checks -------------------------------------------------------- */

static void test_block_arguments(void)
{
    expect_logits_fail("scratch_empty", LH_E_USAGE,
                       ARCH ": scratch [0, 64]: dimensions must be > 0 and their product "
                       "representable");
    expect_logits_fail("linear_null", LH_E_USAGE, ARCH ": layer 0: linear: NULL weight");
    expect_logits_fail("moe_null", LH_E_USAGE, ARCH ": layer 0: moe_ffn: NULL block");
    expect_logits_fail("mla_not_mla", LH_E_USAGE,
                       ARCH ": layer 0: attend_mla: model.layers.0.self_attn is not multi-head "
                       "latent attention (use attend)");
    expect_logits_fail("mla_null_kv_b", LH_E_USAGE, ARCH ": layer 0: attend_mla: NULL kv_b");
    expect_logits_fail("act_invalid", LH_E_USAGE,
                       ARCH ": layer 0: act_mul: activation 7 is not an lh_activation");
    expect_logits_fail("act_silu", LH_E_UNSUPPORTED,
                       ARCH ": layer 0: act: activation 0 has no ungated kernel");
    expect_logits_fail("output_rows_shape", LH_E_USAGE,
                       ARCH ": lm_head: output_rows: h must be [3, D]");
}

/* ---- suite -------------------------------------------------------------------------------------- */

static int suite_init(void)
{
    snprintf(fixture, sizeof fixture, "%s/models/llama-mha-f32", lh_test_env("LH_FIXTURES"));
    if (!(host = rt_builtin_host()))
        return 1;
    plugin_dir = lh_test_mkdtemp();
    model_dir = lh_test_mkdtemp();
    if (!plugin_dir || !model_dir)
        return 1;
    char src[1200];
    snprintf(src, sizeof src, "%s/libmodel_fwd_bad.so", lh_test_env("LH_TEST_PLUGINS"));
    if (lh_test_copy_file(src, plugin_dir, "libmodel_fwd_bad.so", 0755) != 0) {
        fprintf(stderr, "cannot copy %s\n", src);
        return 1;
    }
    static const char *const files[] = {"model.safetensors", "generation_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(src, sizeof src, "%s/%s", fixture, files[i]);
        if (lh_test_copy_file(src, model_dir, files[i], 0644) != 0) {
            fprintf(stderr, "cannot copy %s\n", src);
            return 1;
        }
    }
    lh_err err = {0};
    if (lh_host_add_custom_dir(host, plugin_dir, &err) != LH_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

static int suite_clean(void)
{
    lh_host_free(host);
    lh_test_rmtree(plugin_dir);
    lh_test_rmtree(model_dir);
    free(plugin_dir);
    free(model_dir);
    return 0;
}

/* ---- which models decode without CUDA graphs, and why (the runner's rule, explain's report) */

static void test_graphs_refusal(void)
{
    CU_ASSERT_PTR_NULL(lh_runner_graphs_refusal(false, false));
    const char *moe = lh_runner_graphs_refusal(true, false);
    const char *own = lh_runner_graphs_refusal(false, true);
    CU_ASSERT_FATAL(moe && own);
    CU_ASSERT_PTR_NOT_NULL(strstr(moe, "mixture-of-experts"));
    CU_ASSERT_PTR_NOT_NULL(strstr(own, "its own KV cache"));
    CU_ASSERT_STRING_EQUAL(lh_runner_graphs_refusal(true, true), moe);
}

static CU_TestInfo tests[] = {
    {"the plugin's good forward equals the built-in Llama (control)", test_good_matches_builtin},
    {"a provider without bind/forward cannot be opened as an engine", test_no_forward_pass},
    {"bind asking for a parameter the tree lacks names it", test_missing_parameter},
    {"bind asking for an attention layer not in the table names it",
     test_missing_attention_layer},
    {"bind asking for a MoE block the tree lacks names it", test_missing_moe_block},
    {"bind reporting vocab_size 0 / negative scratch names the numbers", test_bad_forward_info},
    {"more scratch requests than declared names both counts", test_scratch_requests},
    {"more scratch bytes than declared names the bytes", test_scratch_bytes},
    {"attend with a wrong-shaped q, k, v or out names the expected shape", test_attend_shapes},
    {"attend with a q of another dtype is refused", test_attend_dtype},
    {"output_rows on a step that asks for no logits", test_output_rows_no_logits},
    {"weight_rows outside the weight / of NULL names rows and weight", test_weight_rows},
    {"bind recording an error but returning ok, or failing silently", test_bind_contract},
    {"fwd_fail carries the architecture and the fwd_where context", test_fwd_fail_context},
    {"linear with mismatched shapes: the kernel's message, naming the weight",
     test_linear_shapes},
    {"empty scratch, NULL weight, bad activations, mis-shaped output rows",
     test_block_arguments},
    {"CUDA graphs refused for MoE models and backends with their own KV", test_graphs_refusal},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"runner error paths", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
