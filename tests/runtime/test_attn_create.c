/* get_attention_backend and create_attention (DESIGN §8): the lookup by name with sparse as a
 * second dimension, and every construction-time check, through the host API table that
 * plugins receive. A fake backend (its create records the geometry it was given) shows what
 * reaches the backend and what is refused before it. */
#include "api/attn_select.h"
#include "api/host_api_table.h"
#include "api/host_internal.h"
#include "lh_kernels.h"
#include "lh_plugin.h"
#include "runner.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lh_attn_geometry seen;
static int creates;

/* layer 99 is refused by the backend itself, through the lh_error it is given */
static lh_status fake_create(const lh_attn_geometry *g, lh_attn_layer **out, lh_error *err)
{
    seen = *g;
    creates++;
    if (g->layer_index == 99)
        return lh_error_set(err, LH_E_NOMEM, "fake: layer %lld: no room",
                            (long long)g->layer_index);
    *out = (lh_attn_layer *)&seen; /* any non-NULL token; destroy ignores it */
    return LH_OK;
}

static lh_status fake_forward(lh_attn_layer *l, lh_kctx *k, const lh_attn_step *s,
                              const lh_attn_forward_args *a, lh_tensor *q, lh_tensor *kk,
                              const lh_tensor *v, lh_tensor *o, lh_error *err)
{
    (void)l, (void)k, (void)s, (void)a, (void)q, (void)kk, (void)v, (void)o, (void)err;
    return LH_OK;
}

static void fake_destroy(lh_attn_layer *l)
{
    (void)l;
}

static const lh_attn_ops fake_ops = {.struct_size = sizeof fake_ops, .create = fake_create,
                                     .forward = fake_forward, .destroy = fake_destroy};

static lh_attn_geometry geo(void)
{
    return (lh_attn_geometry){.struct_size = sizeof(lh_attn_geometry), .layer_index = 7,
                              .num_heads = 8, .num_kv_heads = 2, .head_dim = 16, .scale = 0.25f,
                              .max_seq_len = 64, .max_seqs = 1};
}

/* create_attention through the host API table; msg gets the error message ("" on success) */
static lh_status create(uint64_t caps, const lh_attn_geometry *g, char *msg, size_t n)
{
    const lh_attn_backend_provider p = {.struct_size = sizeof p, .name = "fake",
                                        .capabilities = caps, .ops = &fake_ops};
    lh_attn_layer *l = NULL;
    lh_error err = {0};
    lh_status st = lh_host_api_table()->create_attention(&p, g, &l, &err);
    CU_ASSERT_EQUAL(st == LH_OK, l != NULL);
    CU_ASSERT_EQUAL(err.code, st); /* the status and the message travel together */
    snprintf(msg, n, "%s", st == LH_OK ? "" : err.msg);
    return st;
}

static void test_capabilities_at_construction(void)
{
    char msg[512];
    lh_attn_geometry g = geo();
    int before = creates;
    CU_ASSERT_EQUAL(create(0, &g, msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(creates, before + 1);
    /* each feature the geometry asks for, refused without the flag, accepted with it */
    for (int i = 0; i < 8; i++) {
        g = geo();
        uint64_t bit = 0;
        const char *name = "";
        switch (i) {
        case 0:
            g.sliding_window = 32;
            bit = LH_ATTN_CAP_SLIDING_WINDOW;
            name = "sliding-window";
            break;
        case 1:
            g.attention_chunk_size = 16;
            bit = LH_ATTN_CAP_CHUNKED;
            name = "chunked";
            break;
        case 2:
            g.mla = true;
            g.kv_lora_rank = 32;
            g.qk_nope_head_dim = 16;
            g.v_head_dim = 16;
            bit = LH_ATTN_CAP_MLA;
            name = "latent";
            break;
        case 3:
            g.kv_dtype = g.kv_v_dtype = LH_DTYPE_FP8_E4M3;
            bit = LH_ATTN_CAP_FP8_KV;
            name = "fp8";
            break;
        case 4:
            g.kv_dtype = LH_DTYPE_BF16;
            g.kv_v_dtype = LH_DTYPE_F16;
            bit = LH_ATTN_CAP_MIXED_KV;
            name = "mixed-precision";
            break;
        case 5:
            g.sparse_top_k = 4;
            g.sparse_local_blocks = 1;
            bit = LH_ATTN_CAP_SPARSE;
            name = "sparse";
            break;
        case 6:
            g.fused_rope = true;
            bit = LH_ATTN_CAP_FUSED_ROPE;
            name = "fused RoPE";
            break;
        default:
            g.logit_softcap = 50.0f; /* Gemma 2 */
            bit = LH_ATTN_CAP_SOFTCAP;
            name = "attention-logit soft-capping";
            break;
        }
        before = creates;
        CU_ASSERT_EQUAL(create(~(uint64_t)bit, &g, msg, sizeof msg), LH_E_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "'fake' does not support"));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, name));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "layer 7"));
        CU_ASSERT_EQUAL(creates, before); /* refused before the backend's create */
        CU_ASSERT_EQUAL(create(bit, &g, msg, sizeof msg), LH_OK);
    }
    /* fp8 values with f32 keys: fp8 and mixed both needed */
    g = geo();
    g.kv_v_dtype = LH_DTYPE_FP8_E4M3;
    CU_ASSERT_EQUAL(create(LH_ATTN_CAP_FP8_KV, &g, msg, sizeof msg), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "mixed-precision"));
    CU_ASSERT_EQUAL(create(LH_ATTN_CAP_FP8_KV | LH_ATTN_CAP_MIXED_KV, &g, msg, sizeof msg),
                    LH_OK);
}

/* logit_softcap: refused without LH_ATTN_CAP_SOFTCAP (the example's 'sinks' has none),
 * passed through as given with it, 0 is none; a negative or non-finite cap is a config error
 * naming the field, whatever the backend. */
static void test_softcap(void)
{
    char msg[LH_ERROR_MSG_SIZE];
    lh_attn_geometry g = geo();
    g.logit_softcap = 30.0f;
    int before = creates;
    CU_ASSERT_EQUAL(create(LH_ATTN_CAP_SLIDING_WINDOW, &g, msg, sizeof msg), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "attention backend 'fake' does not support "
                                       "attention-logit soft-capping, which layer 7 asks for"));
    CU_ASSERT_EQUAL(creates, before);
    CU_ASSERT_EQUAL(create(LH_ATTN_CAP_SOFTCAP, &g, msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(creates, before + 1);
    CU_ASSERT_EQUAL(seen.logit_softcap, 30.0f); /* passed through */
    g.logit_softcap = 0.0f;
    CU_ASSERT_EQUAL(create(0, &g, msg, sizeof msg), LH_OK); /* 0: none, no capability needed */
    CU_ASSERT_EQUAL(seen.logit_softcap, 0.0f);
    const float bad[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        g.logit_softcap = bad[i];
        before = creates;
        CU_ASSERT_EQUAL(create(LH_ATTN_CAP_SOFTCAP, &g, msg, sizeof msg), LH_E_CONFIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "attention layer 7: logit_softcap="));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "must be finite and >= 0 (0: none)"));
        CU_ASSERT_EQUAL(creates, before);
    }
    /* a geometry from before ABI 3 (no logit_softcap): no cap, whatever lies beyond it */
    g = geo();
    g.logit_softcap = -7.0f;
    g.struct_size = (uint32_t)offsetof(lh_attn_geometry, logit_softcap);
    CU_ASSERT_EQUAL(create(0, &g, msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(seen.logit_softcap, 0.0f);
}

/* The backend's own refusal: its status and the message it wrote into the lh_error. */
static void test_backend_error(void)
{
    char msg[LH_ERROR_MSG_SIZE];
    lh_attn_geometry g = geo();
    g.layer_index = 99;
    CU_ASSERT_EQUAL(create(0, &g, msg, sizeof msg), LH_E_NOMEM);
    CU_ASSERT_STRING_EQUAL(msg, "fake: layer 99: no room");
    /* err may be NULL: the status alone */
    const lh_attn_backend_provider p = {.struct_size = sizeof p, .name = "fake",
                                        .capabilities = 0, .ops = &fake_ops};
    lh_attn_layer *l = NULL;
    CU_ASSERT_EQUAL(lh_host_api_table()->create_attention(&p, &g, &l, NULL), LH_E_NOMEM);
    g.logit_softcap = 1.0f;
    CU_ASSERT_EQUAL(lh_host_api_table()->create_attention(&p, &g, &l, NULL), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(l);
}

static void test_mla_dimensions(void)
{
    char msg[512];
    static const struct {
        const char *field;
        int64_t kv_lora, nope, v, rope, q_lora;
        bool has_q;
    } bad[] = {
        {"kv_lora_rank=0", 0, 16, 16, 8, 0, false},
        {"qk_nope_head_dim=0", 32, 0, 16, 8, 0, false},
        {"v_head_dim=-1", 32, 16, -1, 8, 0, false},
        {"qk_rope_head_dim=-2", 32, 16, 16, -2, 0, false},
        {"q_lora_rank=0", 32, 16, 16, 8, 0, true},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lh_attn_geometry g = geo();
        g.mla = true;
        g.kv_lora_rank = bad[i].kv_lora;
        g.qk_nope_head_dim = bad[i].nope;
        g.v_head_dim = bad[i].v;
        g.qk_rope_head_dim = bad[i].rope;
        g.q_lora_rank = bad[i].q_lora;
        g.has_q_lora_rank = bad[i].has_q;
        CU_ASSERT_EQUAL(create(LH_ATTN_CAP_MLA, &g, msg, sizeof msg), LH_E_CONFIG);
        if (!strstr(msg, bad[i].field))
            printf("\n    %s: %s", bad[i].field, msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, bad[i].field));
    }
    /* absent q_lora_rank (DeepSeek-V2-Lite) and qk_rope_head_dim 0 are valid */
    lh_attn_geometry g = geo();
    g.mla = true;
    g.kv_lora_rank = 512;
    g.qk_nope_head_dim = 128;
    g.v_head_dim = 128;
    CU_ASSERT_EQUAL(create(LH_ATTN_CAP_MLA, &g, msg, sizeof msg), LH_OK);
}

static void test_defaults_and_struct_size(void)
{
    char msg[512];
    /* missing num_kv_heads means num_heads */
    lh_attn_geometry g = geo();
    g.num_kv_heads = 0;
    CU_ASSERT_EQUAL(create(0, &g, msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(seen.num_kv_heads, 8);
    CU_ASSERT_EQUAL(seen.struct_size, sizeof(lh_attn_geometry));
    /* a geometry from an ABI 1 caller: the newer fields read as zero (nothing asked for) */
    g = geo();
    g.fused_rope = true; /* beyond the old struct_size: must not be read */
    g.struct_size = (uint32_t)offsetof(lh_attn_geometry, kv_v_dtype);
    CU_ASSERT_EQUAL(create(0, &g, msg, sizeof msg), LH_OK);
    CU_ASSERT_FALSE(seen.fused_rope);
    g.struct_size = 8;
    CU_ASSERT_EQUAL(create(0, &g, msg, sizeof msg), LH_E_USAGE);
    /* a backend that is only described */
    const lh_attn_backend_provider p = {.struct_size = sizeof p, .name = "described",
                                        .capabilities = 0, .ops = NULL};
    lh_attn_layer *l = NULL;
    lh_error err = {0};
    g = geo();
    CU_ASSERT_EQUAL(lh_host_api_table()->create_attention(&p, &g, &l, &err), LH_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(err.code, LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'described' has no forward implementation"));
    CU_ASSERT_EQUAL(lh_host_api_table()->create_attention(NULL, &g, &l, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "create_attention: NULL argument"));
}

static void test_get_attention_backend(void)
{
    lh_host_options o = {.struct_size = sizeof o,
                         .plugin_dir = lh_test_env("LH_BUILTIN_PLUGINS")};
    lh_host *h = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_host_create(&o, &h, &err), LH_OK);
    const lh_reg_entry *e = NULL;
    lh_sparse_config dense = {0}, sparse = {.enabled = true, .top_k = 4, .local_blocks = 1};
    lh_registry_lock(&h->reg);
    CU_ASSERT_EQUAL(lh_get_attention_backend(&h->reg, "paged", &sparse, &e, &err), LH_OK);
    CU_ASSERT_PTR_NOT_NULL(e);
    CU_ASSERT(e && (e->p.attn.capabilities & LH_ATTN_CAP_SPARSE));
    /* names compare case-insensitively */
    CU_ASSERT_EQUAL(lh_get_attention_backend(&h->reg, "Vanilla", &dense, &e, &err), LH_OK);
    CU_ASSERT(e && strcmp(e->name, "vanilla") == 0);
    /* sparse is a second dimension: vanilla has no sparse mode */
    CU_ASSERT_EQUAL(lh_get_attention_backend(&h->reg, "vanilla", &sparse, &e, &err),
                    LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'vanilla' has no sparse mode"));
    /* unknown: the available ones, and the nearest */
    CU_ASSERT_EQUAL(lh_get_attention_backend(&h->reg, "pagd", NULL, &e, &err),
                    LH_E_UNKNOWN_NAME);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "did you mean 'paged'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "available: paged, vanilla"));
    lh_registry_unlock(&h->reg);
    lh_host_free(h);
}

/* The built-in backends declare LH_ATTN_CAP_SOFTCAP, and vanilla hands
 * geometry.logit_softcap to its kernel: a prefill step through create / prepare / forward
 * equals lh_k_attention with that cap, bit for bit, and differs from the uncapped result. */
static void test_builtin_backends_softcap(void)
{
    lh_host_options o = {.struct_size = sizeof o,
                         .plugin_dir = lh_test_env("LH_BUILTIN_PLUGINS")};
    lh_host *h = NULL;
    lh_err herr = {0};
    CU_ASSERT_EQUAL_FATAL(lh_host_create(&o, &h, &herr), LH_OK);
    const lh_reg_entry *pe = NULL, *ve = NULL;
    lh_registry_lock(&h->reg);
    CU_ASSERT_EQUAL(lh_get_attention_backend(&h->reg, "paged", NULL, &pe, &herr), LH_OK);
    CU_ASSERT_EQUAL(lh_get_attention_backend(&h->reg, "vanilla", NULL, &ve, &herr), LH_OK);
    lh_registry_unlock(&h->reg);
    CU_ASSERT_FATAL(pe != NULL && ve != NULL);
    CU_ASSERT(pe->p.attn.capabilities & LH_ATTN_CAP_SOFTCAP);
    CU_ASSERT(ve->p.attn.capabilities & LH_ATTN_CAP_SOFTCAP);

    enum { T = 6, H = 4, KVH = 2, D = 8 };
    lh_attn_geometry g = geo();
    g.num_heads = H;
    g.num_kv_heads = KVH;
    g.head_dim = D;
    g.scale = 0.35f;
    g.max_seq_len = 16;
    g.logit_softcap = 0.5f; /* the scores below reach about 2 */
    lh_attn_layer *l = NULL;
    lh_error err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_host_api_table()->create_attention(&ve->p.attn, &g, &l, &err), LH_OK);
    static float q[T * H * D], qc[T * H * D], k[T * KVH * D], v[T * KVH * D];
    static float out[T * H * D], want[T * H * D], plain[T * H * D];
    uint32_t x = 12345;
    for (int i = 0; i < T * H * D; i++) {
        x = x * 1664525u + 1013904223u;
        q[i] = qc[i] = (float)(x >> 8) / 8388608.0f - 1.0f;
    }
    for (int i = 0; i < T * KVH * D; i++) {
        x = x * 1664525u + 1013904223u;
        k[i] = (float)(x >> 8) / 8388608.0f - 1.0f;
        x = x * 1664525u + 1013904223u;
        v[i] = (float)(x >> 8) / 4194304.0f - 2.0f;
    }
    int32_t pos[T] = {0, 1, 2, 3, 4, 5};
    int64_t start = 0, n_new = T, ctx_len = 0, slot = 0;
    const lh_attn_step step = {.struct_size = sizeof step, .n_tokens = T, .n_seqs = 1,
                               .positions = pos, .token_start = &start, .n_new = &n_new,
                               .ctx_len = &ctx_len, .slot = &slot};
    const lh_attn_forward_args args = {.struct_size = sizeof args};
    int64_t qs[3] = {T, H, D}, ks[3] = {T, KVH, D};
    lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, q, 3, qs), to = lh_tensor_cpu(LH_DTYPE_F32, out, 3, qs);
    lh_tensor tk = lh_tensor_cpu(LH_DTYPE_F32, k, 3, ks), tv = lh_tensor_cpu(LH_DTYPE_F32, v, 3, ks);
    lh_kctx *kctx = lh_k_ctx_create(1, (lh_device){LH_DEVICE_CPU, 0});
    CU_ASSERT_PTR_NOT_NULL_FATAL(kctx);
    const lh_attn_ops *ops = ve->p.attn.ops;
    CU_ASSERT_EQUAL(ops->prepare(l, &step, &err), LH_OK);
    CU_ASSERT_EQUAL(ops->forward(l, kctx, &step, &args, &tq, &tk, &tv, &to, &err), LH_OK);
    lh_tensor tqc = lh_tensor_cpu(LH_DTYPE_F32, qc, 3, qs);
    lh_tensor tw = lh_tensor_cpu(LH_DTYPE_F32, want, 3, qs);
    lh_tensor tp = lh_tensor_cpu(LH_DTYPE_F32, plain, 3, qs);
    CU_ASSERT_EQUAL(lh_k_attention(kctx, &tqc, &tk, &tv, pos, 0.35f, 0.5f, 0, &tw), LH_OK);
    CU_ASSERT_EQUAL(lh_k_attention(kctx, &tqc, &tk, &tv, pos, 0.35f, 0.0f, 0, &tp), LH_OK);
    CU_ASSERT_EQUAL(memcmp(out, want, sizeof out), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(out, plain, sizeof out), 0);
    /* a forward the backend refuses reports through the lh_error */
    const int64_t bad_slot = 5;
    lh_attn_step bad = step;
    bad.slot = &bad_slot;
    CU_ASSERT_EQUAL(ops->prepare(l, &bad, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(err.code, LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "vanilla: sequence slot 5 outside [0, 1)"));
    ops->destroy(l);
    lh_k_ctx_free(kctx);
    lh_host_free(h);
}

static CU_TestInfo tests[] = {
    {"every capability is checked at construction", test_capabilities_at_construction},
    {"MLA dimensions", test_mla_dimensions},
    {"logit soft-capping: capability, pass-through, invalid caps", test_softcap},
    {"the backend's own error, through lh_error", test_backend_error},
    {"built-in backends: softcap declared, vanilla passes it to its kernel",
     test_builtin_backends_softcap},
    {"num_kv_heads default, older geometry, described-only backend",
     test_defaults_and_struct_size},
    {"get_attention_backend: names, sparse dimension, unknown", test_get_attention_backend},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"attention construction", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
