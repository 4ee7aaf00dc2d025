/* get_attention_backend and create_attention (DESIGN §8): the lookup by name with sparse as a
 * second dimension, and every construction-time check, through the host API table that
 * plugins receive. A fake backend (its create records the geometry it was given) shows what
 * reaches the backend and what is refused before it. */
#include "api/attn_select.h"
#include "api/host_api_table.h"
#include "api/host_internal.h"
#include "lh_plugin.h"
#include "runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lh_attn_geometry seen;
static int creates;

static lh_status fake_create(const lh_attn_geometry *g, lh_attn_layer **out, char *err, size_t n)
{
    (void)err;
    (void)n;
    seen = *g;
    creates++;
    *out = (lh_attn_layer *)&seen; /* any non-NULL token; destroy ignores it */
    return LH_OK;
}

static lh_status fake_forward(lh_attn_layer *l, lh_kctx *k, const lh_attn_step *s,
                              const lh_attn_forward_args *a, lh_tensor *q, lh_tensor *kk,
                              const lh_tensor *v, lh_tensor *o, char *err, size_t n)
{
    (void)l, (void)k, (void)s, (void)a, (void)q, (void)kk, (void)v, (void)o, (void)err, (void)n;
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

static lh_status create(uint64_t caps, const lh_attn_geometry *g, char *msg, size_t n)
{
    const lh_attn_backend_provider p = {.struct_size = sizeof p, .name = "fake",
                                        .capabilities = caps, .ops = &fake_ops};
    lh_attn_layer *l = NULL;
    msg[0] = '\0';
    lh_status st = lh_host_api_table()->create_attention(&p, g, &l, msg, n);
    CU_ASSERT_EQUAL(st == LH_OK, l != NULL);
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
    for (int i = 0; i < 7; i++) {
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
        default:
            g.fused_rope = true;
            bit = LH_ATTN_CAP_FUSED_ROPE;
            name = "fused RoPE";
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
    g = geo();
    CU_ASSERT_EQUAL(lh_host_api_table()->create_attention(&p, &g, &l, msg, sizeof msg),
                    LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "'described' has no forward implementation"));
    CU_ASSERT_EQUAL(lh_host_api_table()->create_attention(NULL, &g, &l, msg, sizeof msg),
                    LH_E_USAGE);
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

static CU_TestInfo tests[] = {
    {"every capability is checked at construction", test_capabilities_at_construction},
    {"MLA dimensions", test_mla_dimensions},
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
