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
 *   TP_GEMMA_SPEC      build_decoder_lm with the Gemma variant (GeGLU tanh, RMSNorm 1 + w,
 *                      embeddings * sqrt(hidden)) and no marker container
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

#ifdef TP_GEMMA_SPEC
__attribute__((unused)) static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    const lh_decoder_spec spec = {
        .struct_size = sizeof spec,
        .mlp_act = LH_MLP_GELU_TANH,
        .norm_weight_offset = 1.0f,
        .scale_embeddings = true,
    };
    return api->build_decoder_lm(b, cfg, &spec);
}
#else
__attribute__((unused)) static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    lh_decoder_spec spec = {.struct_size = sizeof spec};
    lh_status st = api->build_decoder_lm(b, cfg, &spec);
    if (st != LH_OK)
        return st;
    /* marks which plugin built the tree, so tests can tell providers apart */
    api->add_container(b, api->module_root(b), "built_by_" TP_NAME);
    return api->build_status(b);
}
#endif

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
        lh_model_provider p = {sizeof p, models[i], construct, TP_CHECK};
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
        lh_model_provider p = {sizeof p, name, construct, NULL};
        st = api->register_model(ctx, &p);
    }
#endif
#ifdef TP_VISION
    static const char *const vision[] = {TP_VISION};
    for (size_t i = 0; st == LH_OK && i < sizeof vision / sizeof *vision; i++) {
        lh_model_provider p = {sizeof p, vision[i], construct, NULL};
        st = api->register_vision_encoder(ctx, &p);
    }
#endif
#ifdef TP_DRAFTS
    static const char *const drafts[] = {TP_DRAFTS};
    for (size_t i = 0; st == LH_OK && i < sizeof drafts / sizeof *drafts; i++) {
        lh_draft_provider p = {sizeof p, drafts[i], construct};
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
    static const lh_plugin_descriptor d = {TP_MAGIC, (uint32_t)sizeof d, TP_ABI_MAJOR,
                                           TP_ABI_MINOR, TP_NAME, "0.0.1", init};
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
