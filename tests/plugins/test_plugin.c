/* One source, many deliberately different test plugins: meson compiles it once per variant
 * with -D flags (see meson.build). Each variant exercises one loader or registry rule.
 *
 *   TP_NAME            plugin name in the descriptor
 *   TP_MODELS          string list of model architectures to register
 *   TP_VISION          string list of vision encoders
 *   TP_DRAFTS          string list of draft modes
 *   TP_ATTN            string list of attention backends
 *   TP_FAIL_INIT       register everything, then fail init
 *   TP_ABI_MAJOR/MINOR override the ABI version in the descriptor
 *   TP_BAD_MAGIC       wrong magic in the descriptor
 *   TP_NO_ENTRY        export no entry symbol at all
 *   TP_UNDEFINED       call a function no library defines (fails under RTLD_NOW)
 *   TP_MISSING_DEP     call into a library that is not on the search path
 *   TP_REFUSE_F32      check_runtime refuses float32 runtimes ("no target")
 *   TP_NAME_FROM_FILE  register "Bench_<file stem>" (benchmarks: one source, many files)
 *   TP_CRASH_INIT      init writes a line to stdout, then to an unmapped address (SIGSEGV)
 *   TP_HANG_INIT       init never returns
 *   TP_EXIT_INIT       init ends the process with _exit(3)
 *   TP_ABORT_CTOR      a constructor calls abort() while the file is dlopened
 *   TP_MAX_DIMS        descriptor layout constant LH_MAX_DIMS set to another value
 *   TP_GGUF_RULES      registers GGUF tables that break the registry's rules (each must be
 *                      refused with LH_E_USAGE) and one with stacked experts that keeps them;
 *                      init fails, naming the case, when the registry answers otherwise
 * (the last four are for `llmhost plugin check`, which loads each plugin in a child process)
 */
#include "lh_plugin.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef TP_CRASH_INIT
/* not NULL (UBSan would report a null store first, and abort), just unmapped */
static volatile uintptr_t tp_bad_address = 16;
#endif
#ifdef TP_ABORT_CTOR
__attribute__((constructor)) static void tp_abort_in_constructor(void)
{
    abort();
}
#endif

#ifndef TP_ABI_MAJOR
#define TP_ABI_MAJOR LH_PLUGIN_ABI_MAJOR
#endif
#ifndef TP_ABI_MINOR
#define TP_ABI_MINOR LH_PLUGIN_ABI_MINOR
#endif

#ifdef TP_UNDEFINED
extern int lh_test_symbol_that_no_library_defines(void);
#endif
#ifdef TP_MISSING_DEP
extern int tp_absent_dep_answer(void);
#endif

/* A small Llama-shaped tree from the config's geometry, through the building blocks (the
 * loader and registry tests only construct: these providers describe a model, they have no
 * forward pass). */
__attribute__((unused)) static lh_status construct(const lh_host_api *api, lh_build *b,
                                                   const lh_model_config *cfg)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    lh_module *embed = api->add_embedding(b, model, "embed_tokens", g->vocab_size,
                                          g->hidden_size);
    lh_module *layers = api->add_container(b, model, "layers");
    for (int64_t i = 0; i < g->num_hidden_layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)i);
        lh_module *layer = api->add_container(b, layers, name);
        api->add_rmsnorm(b, layer, "input_layernorm", g->hidden_size,
                                              g->rms_norm_eps);
        const lh_attention_spec as = {.struct_size = sizeof as, .layer_index = i,
                                      .num_heads = g->num_attention_heads,
                                      .num_kv_heads = g->num_key_value_heads,
                                      .head_dim = g->head_dim, .rope = true,
                                      .rope_theta = g->rope_theta,
                                      .max_positions = g->max_position_embeddings};
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        const int64_t q = g->num_attention_heads * g->head_dim;
        const int64_t kv = g->num_key_value_heads * g->head_dim;
        api->add_linear(b, attn, "q_proj", g->hidden_size, q, false);
        api->add_linear(b, attn, "k_proj", g->hidden_size, kv, false);
        api->add_linear(b, attn, "v_proj", g->hidden_size, kv, false);
        api->add_linear(b, attn, "o_proj", q, g->hidden_size, false);
        api->add_rmsnorm(b, layer, "post_attention_layernorm", g->hidden_size, g->rms_norm_eps);
        lh_module *mlp = api->add_mlp(b, layer, "mlp");
        api->add_linear(b, mlp, "gate_proj", g->hidden_size, g->intermediate_size, false);
        api->add_linear(b, mlp, "up_proj", g->hidden_size, g->intermediate_size, false);
        api->add_linear(b, mlp, "down_proj", g->intermediate_size, g->hidden_size, false);
    }
    api->add_rmsnorm(b, model, "norm", g->hidden_size, g->rms_norm_eps);
    lh_module *head = api->add_head(b, root, "lm_head", g->hidden_size, g->vocab_size, false);
    if (g->tie_word_embeddings)
        api->tie_weights(b, head, embed);
    /* marks which plugin built the tree, so tests can tell providers apart */
    api->add_container(b, root, "built_by_" TP_NAME);
    return api->build_status(b);
}

__attribute__((unused)) static const lh_model_ops tp_ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct,
};

#ifdef TP_REFUSE_F32
static lh_status check_runtime(const lh_host_api *api, const lh_model_config *cfg,
                               const lh_runtime_desc *rt, char *reason, size_t reason_len)
{
    (void)api;
    (void)cfg;
    if (rt->dtype == LH_DTYPE_F32) {
        snprintf(reason, reason_len, "float32 weights are not supported by this target");
        return LH_E_UNSUPPORTED;
    }
    return LH_OK;
}
#define TP_CHECK check_runtime
#else
#define TP_CHECK NULL
#endif

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
#ifdef TP_UNDEFINED
    if (lh_test_symbol_that_no_library_defines() != 42)
        return api->init_fail(ctx, "unreachable");
#endif
#ifdef TP_MISSING_DEP
    if (tp_absent_dep_answer() != 42)
        return api->init_fail(ctx, "unreachable");
#endif
#ifdef TP_CRASH_INIT
    /* on stdout, which must not end up in `plugin check --json` */
    static const char noise[] = "tp_crash: noise on stdout before crashing\n";
    if (write(STDOUT_FILENO, noise, sizeof noise - 1) < 0)
        return api->init_fail(ctx, "write failed");
    *(volatile char *)tp_bad_address = 1;
#endif
#ifdef TP_HANG_INIT
    for (;;)
        pause();
#endif
#ifdef TP_EXIT_INIT
    _exit(3);
#endif
    lh_status st = LH_OK;
#ifdef TP_MODELS
    static const char *const models[] = {TP_MODELS};
    for (size_t i = 0; st == LH_OK && i < sizeof models / sizeof *models; i++) {
        lh_model_provider p = {sizeof p, models[i], &tp_ops, TP_CHECK};
        st = api->register_model(ctx, &p);
    }
#endif
#ifdef TP_NAME_FROM_FILE
    {
        const char *path = api->plugin_path(ctx);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        char name[256];
        snprintf(name, sizeof name, "Bench_%s", base);
        char *dot = strchr(name, '.');
        if (dot)
            *dot = '\0';
        lh_model_provider p = {sizeof p, name, &tp_ops, NULL};
        st = api->register_model(ctx, &p);
    }
#endif
#ifdef TP_VISION
    static const char *const vision[] = {TP_VISION};
    for (size_t i = 0; st == LH_OK && i < sizeof vision / sizeof *vision; i++) {
        lh_model_provider p = {sizeof p, vision[i], &tp_ops, NULL};
        st = api->register_vision_encoder(ctx, &p);
    }
#endif
#ifdef TP_DRAFTS
    static const char *const drafts[] = {TP_DRAFTS};
    for (size_t i = 0; st == LH_OK && i < sizeof drafts / sizeof *drafts; i++) {
        lh_draft_provider p = {sizeof p, drafts[i], &tp_ops};
        st = api->register_draft(ctx, &p);
    }
#endif
#ifdef TP_ATTN
    static const char *const attn[] = {TP_ATTN};
    for (size_t i = 0; st == LH_OK && i < sizeof attn / sizeof *attn; i++) {
        lh_attn_backend_provider p = {sizeof p, attn[i],
                                      LH_ATTN_CAP_FUSED_ROPE | LH_ATTN_CAP_CHUNKED, NULL};
        st = api->register_attention_backend(ctx, &p);
    }
#endif
#ifdef TP_GGUF_RULES
    {
        static const lh_gguf_tensor_name bad[][1] = {
            {{"blk.{L}.ffn_gate_exps.weight", "layers.{L}.experts.w1", LH_GGUF_EXPERTS}},
            {{"blk.{L}.ffn_gate.weight", "layers.{L}.experts.{E}.w1", LH_GGUF_AS_STORED}},
            {{"blk.{L}.ffn_gate_exps.weight", "layers.{L}.e.{E}.{E}.w1", LH_GGUF_EXPERTS}},
            {{"blk.{L}.ffn_{E}.weight", "layers.{L}.e.{E}.w1", LH_GGUF_EXPERTS}},
            {{"blk.{L}.ffn_gate.weight", "layers.0.w1", LH_GGUF_AS_STORED}},
            {{"blk.0.ffn_gate.weight", "layers.0.w1", (lh_gguf_layout)9}},
        };
        static const char *const what[] = {"experts without {E}", "{E} without experts",
                                           "{E} twice", "{E} in the GGUF name",
                                           "{L} on one side", "an unknown layout"};
        for (size_t i = 0; st == LH_OK && i < sizeof bad / sizeof bad[0]; i++) {
            char arch[16];
            snprintf(arch, sizeof arch, "tpbad%zu", i);
            const lh_gguf_provider g = {.struct_size = sizeof g, .gguf_arch = arch,
                                        .architecture = "LlamaForCausalLM", .tensors = bad[i],
                                        .n_tensors = 1};
            if (api->register_gguf(ctx, &g) != LH_E_USAGE)
                return api->init_fail(ctx, "a GGUF table with %s was not refused", what[i]);
        }
        static const lh_gguf_tensor_name good[] = {
            {"blk.{L}.ffn_gate_exps.weight", "layers.{L}.experts.{E}.w1.weight",
             LH_GGUF_EXPERTS},
        };
        const lh_gguf_provider g = {.struct_size = sizeof g, .gguf_arch = "tprules",
                                    .architecture = "LlamaForCausalLM", .tensors = good,
                                    .n_tensors = 1};
        if (api->register_gguf(ctx, &g) != LH_OK)
            return api->init_fail(ctx, "a GGUF table with stacked experts was refused");
    }
#endif
    if (st != LH_OK)
        return api->init_fail(ctx, "registration failed: %d", (int)st);
#ifdef TP_FAIL_INIT
    return api->init_fail(ctx, "deliberate init failure after registering");
#else
    api->log(ctx, LH_LOG_DEBUG, "initialized");
    return LH_OK;
#endif
}

#ifndef TP_NO_ENTRY
#ifdef TP_BAD_MAGIC
#define TP_MAGIC 0xdeadbeefu
#else
#define TP_MAGIC LH_PLUGIN_MAGIC
#endif
LH_EXPORT const lh_plugin_descriptor *lh_plugin_entry(void);
LH_EXPORT const lh_plugin_descriptor *lh_plugin_entry(void)
{
#ifdef TP_MAX_DIMS
    /* a plugin compiled against an SDK whose tensors have another rank limit */
    static const lh_plugin_descriptor d = {TP_MAGIC, (uint32_t)sizeof d, TP_ABI_MAJOR,
                                           TP_ABI_MINOR, TP_NAME, "0.0.1", init,
                                           {TP_MAX_DIMS, LH_ERROR_MSG_SIZE,
                                            (uint32_t)sizeof(void *),
                                            (uint32_t)sizeof(lh_tensor)}};
#else
    static const lh_plugin_descriptor d = {TP_MAGIC, (uint32_t)sizeof d, TP_ABI_MAJOR,
                                           TP_ABI_MINOR, TP_NAME, "0.0.1", init,
                                           LH_PLUGIN_LAYOUT_INIT};
#endif
    return &d;
}
#else
/* exports something else, so the file is a valid shared object that is not a plugin */
LH_EXPORT int not_an_llmhost_entry(void);
LH_EXPORT int not_an_llmhost_entry(void)
{
    return init(NULL, NULL) == LH_OK;
}
#endif
