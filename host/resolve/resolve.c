#include "resolve.h"

#include "api/host_api_table.h"
#include "core/err.h"
#include "core/log.h"
#include "core/strutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void trace(lh_resolution *r, int step, const char *name, const char *fmt, ...)
    LH_PRINTF(4, 5);

static void trace(lh_resolution *r, int step, const char *name, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(r->trace, json_pack("{s:i,s:s,s:s}", "step", step, "name", name,
                                              "decision", buf));
}

void lh_resolution_free(lh_resolution *r)
{
    if (!r)
        return;
    free(r->resolved);
    json_decref(r->rewrites);
    json_decref(r->trace);
    memset(r, 0, sizeof *r);
}

lh_dtype lh_runtime_dtype(const lh_model_config *cfg, const lh_run_config *rc)
{
    if (rc && rc->dtype != LH_DTYPE_INVALID)
        return rc->dtype;
    if (cfg->geo.torch_dtype != LH_DTYPE_INVALID)
        return cfg->geo.torch_dtype;
    return LH_DTYPE_BF16;
}

/* Removes every "Eagle3" and prefixes "EAGLE3": LlamaForCausalLMEagle3 -> EAGLE3LlamaForCausalLM */
static char *eagle3_name(const char *arch)
{
    size_t len = strlen(arch);
    char *out = malloc(len + 7);
    if (!out)
        return NULL;
    strcpy(out, "EAGLE3");
    char *w = out + 6;
    for (const char *p = arch; *p;) {
        if (strncmp(p, "Eagle3", 6) == 0) {
            p += 6;
            continue;
        }
        *w++ = *p++;
    }
    *w = '\0';
    return out;
}

static const char *entry_desc(const lh_reg_entry *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s (plugin '%s' %s)", e->module->builtin ? "built-in" : "external",
             e->module->path, e->module->plugin_name, e->module->plugin_version);
    return buf;
}

/* Step 4. Returns LH_OK with *use_target set when the target serves; LH_OK with it clear when
 * there is no target or auto falls back. */
static lh_status try_target(lh_registry *reg, const lh_model_config *cfg, const lh_run_config *rc,
                            lh_resolution *r, const char *name, bool *use_target, lh_err *err)
{
    *use_target = false;
    char origin[512];
    if (!rc || !rc->model_impl_target || rc->model_impl_mode == LH_IMPL_OFF) {
        trace(r, 4, "model_impl", "%s", rc && rc->model_impl_target
                                          ? "mode off: target ignored"
                                          : "no target: built-in lookup");
        return LH_OK;
    }
    const char *mode = rc->model_impl_mode == LH_IMPL_REQUIRE ? "require" : "auto";
    lh_value_origin_str(rc, rc->model_impl_origin, origin, sizeof origin);
    const lh_reg_entry *t;
    lh_status st = lh_registry_ensure(reg, LH_KIND_MODEL, rc->model_impl_target, &t, err);
    if (st != LH_OK)
        return lh_err_prefix(err, "model_impl.target '%s' (mode %s, from %s) for architecture "
                             "'%s'", rc->model_impl_target, mode, origin, name);
    char reason[512] = "";
    lh_status verdict = LH_OK;
    if (t->p.model.check_runtime) {
        lh_runtime_desc rt = {
            .struct_size = sizeof rt,
            .dtype = lh_runtime_dtype(cfg, rc),
            .max_seq_len = rc->max_seq_len ? rc->max_seq_len : cfg->geo.max_position_embeddings,
            .max_batch_size = rc->max_batch_size,
            .mm_encoder_only = rc->mm_encoder_only,
        };
        verdict = t->p.model.check_runtime(lh_host_api_table(), cfg, &rt, reason, sizeof reason);
        reason[sizeof reason - 1] = '\0';
        if (verdict != LH_OK && !reason[0])
            snprintf(reason, sizeof reason, "refused without a reason (%s)",
                     lh_status_name(verdict));
    }
    if (verdict == LH_OK) {
        *use_target = true;
        trace(r, 4, "model_impl", "target '%s' (mode %s, from %s) accepts the runtime",
              rc->model_impl_target, mode, origin);
        return LH_OK;
    }
    if (rc->model_impl_mode == LH_IMPL_REQUIRE)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "model_impl.target '%s' (mode require, from %s) for architecture '%s': "
                          "no target: %s",
                          rc->model_impl_target, origin, name, reason);
    lh_log(LH_LOG_INFO, "model_impl target '%s' refused (no target: %s); using the built-in "
           "implementation of '%s'", rc->model_impl_target, reason, name);
    trace(r, 4, "model_impl", "target '%s' (mode auto, from %s): no target: %s; falling back to "
          "the built-in implementation", rc->model_impl_target, origin, reason);
    return LH_OK;
}

static lh_status resolve_locked(lh_registry *reg, const lh_model_config *cfg,
                                const lh_run_config *rc, lh_resolution *r, lh_err *err)
{
    char desc[1200];
    /* 1 */
    if (!cfg->has_architectures || !cfg->geo.architecture)
        return lh_err_set(err, LH_E_CONFIG,
                          "%s: field 'architectures' is missing or empty; it must name the "
                          "model class, e.g. [\"LlamaForCausalLM\"]",
                          cfg->path);
    r->architecture = cfg->geo.architecture;
    trace(r, 1, "architectures", "architectures[0] = '%s'", r->architecture);

    /* 2 */
    if (rc && rc->mm_encoder_only) {
        r->kind = LH_KIND_VISION_ENCODER;
        r->resolved = strdup(r->architecture);
        if (!r->resolved)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        lh_status st = lh_registry_ensure(reg, LH_KIND_VISION_ENCODER, r->resolved, &r->entry, err);
        if (st != LH_OK)
            return lh_err_prefix(err, "mm_encoder_only: architecture '%s'", r->architecture);
        trace(r, 2, "encoder-only", "mm_encoder_only: vision_encoder '%s' -> %s", r->resolved,
              entry_desc(r->entry, desc, sizeof desc));
        return LH_OK;
    }
    trace(r, 2, "encoder-only", "no (full model)");

    /* 3 */
    r->kind = LH_KIND_MODEL;
    if (cfg->geo.has_draft_vocab_size) {
        r->resolved = eagle3_name(r->architecture);
        if (!r->resolved)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        char rw[600];
        snprintf(rw, sizeof rw, "eagle3: %s -> %s", r->architecture, r->resolved);
        json_array_append_new(r->rewrites, json_string(rw));
        trace(r, 3, "eagle3", "draft_vocab_size=%lld: EAGLE-3 draft checkpoint, '%s' -> '%s'",
              (long long)cfg->geo.draft_vocab_size, r->architecture, r->resolved);
    } else {
        r->resolved = strdup(r->architecture);
        if (!r->resolved)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        trace(r, 3, "eagle3", "no draft_vocab_size: not an EAGLE-3 draft");
    }

    /* 4 */
    bool use_target;
    lh_status st = try_target(reg, cfg, rc, r, r->resolved, &use_target, err);
    if (st != LH_OK)
        return st;
    if (use_target) {
        char rw[600];
        snprintf(rw, sizeof rw, "model_impl: %s -> %s", r->resolved, rc->model_impl_target);
        json_array_append_new(r->rewrites, json_string(rw));
        free(r->resolved);
        r->resolved = strdup(rc->model_impl_target);
        if (!r->resolved)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }

    /* 5 */
    st = lh_registry_ensure(reg, LH_KIND_MODEL, r->resolved, &r->entry, err);
    if (st != LH_OK) {
        if (strcmp(r->resolved, r->architecture) != 0)
            return lh_err_prefix(err, "architecture '%s' (looked up as '%s')", r->architecture,
                                 r->resolved);
        return lh_err_prefix(err, "architecture '%s'", r->architecture);
    }
    trace(r, 5, "lookup", "model '%s' -> %s", r->resolved, entry_desc(r->entry, desc, sizeof desc));
    return LH_OK;
}

lh_status lh_resolve(lh_registry *reg, const lh_model_config *cfg, const lh_run_config *rc,
                     lh_resolution *out, lh_err *err)
{
    memset(out, 0, sizeof *out);
    out->rewrites = json_array();
    out->trace = json_array();
    if (!out->rewrites || !out->trace) {
        lh_resolution_free(out);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    lh_registry_lock(reg);
    lh_status st = resolve_locked(reg, cfg, rc, out, err);
    lh_registry_unlock(reg);
    if (st != LH_OK)
        lh_resolution_free(out);
    return st;
}
