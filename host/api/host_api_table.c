#include "host_api_table.h"

#include "config/gguf_config.h"
#include "config/model_config.h"
#include "core/log.h"
#include "model/model.h"
#include "registry/registry.h"
#include "runtime/attn_create.h"
#include "runtime/runner.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* lh_plugin_ctx is the module record of the plugin being initialized. */
static lh_module_rec *rec_of(lh_plugin_ctx *ctx)
{
    return (lh_module_rec *)ctx;
}

static void api_log(lh_plugin_ctx *ctx, lh_log_level level, const char *fmt, ...)
{
    char buf[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    lh_module_rec *m = rec_of(ctx);
    if ((unsigned)level > LH_LOG_DEBUG)
        level = LH_LOG_DEBUG;
    lh_log(level, "[%s] %s", m && m->plugin_name ? m->plugin_name : "plugin", buf);
}

static const char *api_plugin_path(lh_plugin_ctx *ctx)
{
    return ctx ? rec_of(ctx)->path : NULL;
}

static lh_status api_init_fail(lh_plugin_ctx *ctx, const char *fmt, ...)
{
    lh_module_rec *m = rec_of(ctx);
    if (!m || m->init_fail_msg) /* the first reason is kept, as the sticky contexts do */
        return LH_E_INIT;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    m->init_fail_msg = strdup(buf);
    return LH_E_INIT;
}

static lh_status api_register_model(lh_plugin_ctx *ctx, const lh_model_provider *p)
{
    return lh_registry_register(rec_of(ctx), LH_KIND_MODEL, p, sizeof *p);
}

static lh_status api_register_vision_encoder(lh_plugin_ctx *ctx, const lh_model_provider *p)
{
    return lh_registry_register(rec_of(ctx), LH_KIND_VISION_ENCODER, p, sizeof *p);
}

static lh_status api_register_draft(lh_plugin_ctx *ctx, const lh_draft_provider *p)
{
    return lh_registry_register(rec_of(ctx), LH_KIND_DRAFT, p, sizeof *p);
}

static lh_status api_register_attention_backend(lh_plugin_ctx *ctx,
                                                const lh_attn_backend_provider *p)
{
    return lh_registry_register(rec_of(ctx), LH_KIND_ATTENTION_BACKEND, p, sizeof *p);
}

static lh_status api_register_gguf(lh_plugin_ctx *ctx, const lh_gguf_provider *p)
{
    return lh_registry_register(rec_of(ctx), LH_KIND_GGUF, p, sizeof *p);
}

static const lh_host_api host_api = {
    .struct_size = sizeof(lh_host_api),
    .abi_major = LH_PLUGIN_ABI_MAJOR,
    .abi_minor = LH_PLUGIN_ABI_MINOR,
    .log = api_log,
    .plugin_path = api_plugin_path,
    .init_fail = api_init_fail,
    .register_model = api_register_model,
    .register_vision_encoder = api_register_vision_encoder,
    .register_draft = api_register_draft,
    .register_attention_backend = api_register_attention_backend,
    .config_geometry = lh_model_config_geometry,
    .config_get_int = lh_model_config_get_int,
    .config_get_double = lh_model_config_get_double,
    .config_get_bool = lh_model_config_get_bool,
    .config_get_string = lh_model_config_get_string,
    .module_root = lh_build_module_root,
    .add_container = lh_build_add_container,
    .add_embedding = lh_build_add_embedding,
    .add_linear = lh_build_add_linear,
    .add_rmsnorm = lh_build_add_rmsnorm,
    .add_layernorm = lh_build_add_layernorm,
    .add_linear_transposed = lh_build_add_linear_transposed,
    .add_attention = lh_build_add_attention,
    .add_mlp = lh_build_add_mlp,
    .add_head = lh_build_add_head,
    .add_param = lh_build_add_param,
    .base_model = lh_build_base_model,
    .ignore_tensors = lh_build_ignore_tensors,
    .tie_weights = lh_build_tie_weights,
    .build_fail = lh_build_fail,
    .build_status = lh_build_status,
    .create_attention = lh_create_attention,
    .weight = lh_runner_weight,
    .weight_opt = lh_runner_weight_opt,
    .attention = lh_runner_attention,
    .weight_tensor = lh_runner_weight_tensor,
    .weight_rows = lh_runner_weight_rows,
    .bind_fail = lh_runner_bind_fail,
    .bind_status = lh_runner_bind_status,
    .fwd_step = lh_runner_fwd_step,
    .fwd_kctx = lh_runner_fwd_kctx,
    .fwd_where = lh_runner_fwd_where,
    .scratch = lh_runner_scratch,
    .embed = lh_runner_embed,
    .linear = lh_runner_linear,
    .rmsnorm = lh_runner_rmsnorm,
    .residual_rmsnorm = lh_runner_residual_rmsnorm,
    .embed_positions = lh_runner_embed_positions,
    .layernorm = lh_runner_layernorm,
    .add = lh_runner_add,
    .act = lh_runner_act,
    .softcap = lh_runner_softcap,
    .act_mul = lh_runner_act_mul,
    .scale = lh_runner_scale,
    .attend = lh_runner_attend,
    .output_rows = lh_runner_output_rows,
    .logits = lh_runner_logits,
    .fwd_fail = lh_runner_fwd_fail,
    .fwd_status = lh_runner_fwd_status,
    .register_gguf = api_register_gguf,
    .gguf_get_int = lh_gguf_source_get_int,
    .gguf_get_double = lh_gguf_source_get_double,
    .gguf_get_bool = lh_gguf_source_get_bool,
    .gguf_get_string = lh_gguf_source_get_string,
    .gguf_arch = lh_gguf_source_arch,
    .gguf_has_tensor = lh_gguf_source_has_tensor,
    .config_set_int = lh_gguf_config_set_int,
    .config_set_double = lh_gguf_config_set_double,
    .config_set_bool = lh_gguf_config_set_bool,
    .config_set_string = lh_gguf_config_set_string,
    .config_set_json = lh_gguf_config_set_json,
    .config_peek_int = lh_gguf_config_peek_int,
    .add_moe = lh_build_add_moe,
    .moe = lh_runner_moe,
    .moe_ffn = lh_runner_moe_ffn,
    .attend_mla = lh_runner_attend_mla,
};

const lh_host_api *lh_host_api_table(void)
{
    return &host_api;
}
