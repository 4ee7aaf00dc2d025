/* create_attention: every construction-time check of DESIGN §8, then the backend's create.
 * A feature the geometry asks for and the backend's constant capabilities do not promise is
 * refused here, at construction, never discovered mid-generation. */
#include "attn_create.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static lh_dtype kv_or_f32(lh_dtype dt)
{
    return dt == LH_DTYPE_INVALID ? LH_DTYPE_F32 : dt;
}

lh_status lh_create_attention(const lh_attn_backend_provider *p, const lh_attn_geometry *gin,
                              lh_attn_layer **out, lh_error *err)
{
    if (out)
        *out = NULL;
    if (!p || !gin || !out || !p->name)
        return lh_error_set(err, LH_E_USAGE, "create_attention: NULL argument");
    /* a geometry from an older plugin: the fields it lacks are zero (= not asked for) */
    lh_attn_geometry g;
    memset(&g, 0, sizeof g);
    size_t have = gin->struct_size < sizeof g ? gin->struct_size : sizeof g;
    if (have < offsetof(lh_attn_geometry, scale) + sizeof g.scale)
        return lh_error_set(err, LH_E_USAGE,
                            "create_attention: geometry struct_size %u is too small",
                            gin->struct_size);
    memcpy(&g, gin, have);
    g.struct_size = sizeof g;
    if (g.num_kv_heads == 0) /* absent num_key_value_heads: multi-head attention */
        g.num_kv_heads = g.num_heads;
    const lh_dtype kd = kv_or_f32(g.kv_dtype), vd = kv_or_f32(g.kv_v_dtype);
    const struct {
        bool asked;
        uint64_t bit;
        const char *what;
    } needs[] = {
        {g.sliding_window > 0, LH_ATTN_CAP_SLIDING_WINDOW, "sliding-window attention"},
        {g.attention_chunk_size > 0, LH_ATTN_CAP_CHUNKED, "chunked attention"},
        {g.mla, LH_ATTN_CAP_MLA, "multi-head latent attention (MLA)"},
        {kd == LH_DTYPE_FP8_E4M3 || vd == LH_DTYPE_FP8_E4M3, LH_ATTN_CAP_FP8_KV, "an fp8 KV cache"},
        {kd != vd, LH_ATTN_CAP_MIXED_KV, "a mixed-precision KV cache"},
        {g.sparse_top_k > 0 || g.sparse_local_blocks > 0, LH_ATTN_CAP_SPARSE,
         "sparse attention"},
        {g.fused_rope, LH_ATTN_CAP_FUSED_ROPE, "fused RoPE"},
        {g.logit_softcap != 0.0f, LH_ATTN_CAP_SOFTCAP, "attention-logit soft-capping"},
    };
    for (size_t i = 0; i < sizeof needs / sizeof *needs; i++)
        if (needs[i].asked && !(p->capabilities & needs[i].bit))
            return lh_error_set(err, LH_E_UNSUPPORTED,
                                "attention backend '%s' does not support %s, which layer %lld asks "
                                "for", p->name, needs[i].what,
                                (long long)g.layer_index);
    if (g.mla) {
        const struct {
            const char *field;
            int64_t v;
            bool ok;
        } dims[] = {
            {"kv_lora_rank", g.kv_lora_rank, g.kv_lora_rank > 0},
            {"qk_nope_head_dim", g.qk_nope_head_dim, g.qk_nope_head_dim > 0},
            {"v_head_dim", g.v_head_dim, g.v_head_dim > 0},
            {"qk_rope_head_dim", g.qk_rope_head_dim, g.qk_rope_head_dim >= 0},
            {"q_lora_rank", g.q_lora_rank, !g.has_q_lora_rank || g.q_lora_rank > 0},
        };
        for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
            if (!dims[i].ok)
                return lh_error_set(err, LH_E_CONFIG,
                                    "attention layer %lld (MLA): %s=%lld must be %s",
                                    (long long)g.layer_index, dims[i].field, (long long)dims[i].v,
                                    strcmp(dims[i].field, "qk_rope_head_dim") == 0
                                    ? ">= 0"
                                    : strcmp(dims[i].field, "q_lora_rank") == 0
                                    ? "> 0 when present (absent or null: queries are not "
                                    "compressed)"
                                    : "> 0");
    }
    if (!isfinite(g.logit_softcap) || g.logit_softcap < 0.0f)
        return lh_error_set(err, LH_E_CONFIG,
                            "attention layer %lld: logit_softcap=%g must be finite and >= 0 "
                            "(0: none)", (long long)g.layer_index, (double)g.logit_softcap);
    if (p->struct_size < offsetof(lh_attn_backend_provider, ops) + sizeof p->ops || !p->ops ||
        p->ops->struct_size < offsetof(lh_attn_ops, destroy) + sizeof p->ops->destroy ||
        !p->ops->create || !p->ops->forward || !p->ops->destroy)
        return lh_error_set(err, LH_E_UNSUPPORTED, "attention backend '%s' has no forward "
                            "implementation (it is only described)", p->name);
    return p->ops->create(&g, out, err);
}
