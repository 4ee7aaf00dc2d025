#include "attn_select.h"

#include "core/err.h"
#include "core/log.h"
#include "core/strutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    uint64_t bit;
    const char *name;
} cap_names[] = {
    {LH_ATTN_CAP_FUSED_ROPE, "fused_rope"},   {LH_ATTN_CAP_FUSED_QKV, "fused_qkv"},
    {LH_ATTN_CAP_MLA, "mla"},                 {LH_ATTN_CAP_FP8_KV, "fp8_kv"},
    {LH_ATTN_CAP_FP4_KV, "fp4_kv"},           {LH_ATTN_CAP_CHUNKED, "chunked"},
    {LH_ATTN_CAP_SPARSE, "sparse"},           {LH_ATTN_CAP_SLIDING_WINDOW, "sliding_window"},
};

const char *lh_attn_caps_str(uint64_t caps, char *buf, size_t n)
{
    const char *names[sizeof cap_names / sizeof *cap_names];
    size_t k = 0;
    for (size_t i = 0; i < sizeof cap_names / sizeof *cap_names; i++)
        if (caps & cap_names[i].bit)
            names[k++] = cap_names[i].name;
    if (!k)
        snprintf(buf, n, "none");
    else
        lh_join_names(buf, n, names, k);
    return buf;
}

void lh_attn_choice_free(lh_attn_choice *c)
{
    if (c) {
        json_decref(c->trace);
        memset(c, 0, sizeof *c);
    }
}

static void check(json_t *checks, const char *need, bool needed, bool have)
{
    json_array_append_new(checks, json_pack("{s:s,s:b,s:b}", "capability", need, "needed",
                                            needed, "supported", have));
}

static lh_status select_locked(lh_registry *reg, const lh_run_config *rc,
                               const lh_model_config *cfg, lh_attn_choice *out, lh_err *err)
{
    char origin[512];
    const char *requested = rc->attn_backend ? rc->attn_backend : LH_DEFAULT_ATTN_BACKEND;
    lh_value_origin_str(rc, rc->attn_backend_origin, origin, sizeof origin);
    json_object_set_new(out->trace, "requested", json_string(requested));
    json_object_set_new(out->trace, "origin", json_string(rc->attn_backend ? origin : "default"));
    size_t n_known;
    const char **known = lh_registry_known_names(reg, LH_KIND_ATTENTION_BACKEND, &n_known);
    bool listed = false;
    for (size_t i = 0; i < n_known; i++)
        listed |= lh_kind_names_equal(LH_KIND_ATTENTION_BACKEND, known[i], requested);
    const char *name = requested;
    if (!listed) {
        char list[600];
        lh_join_names(list, sizeof list, known, n_known);
        if (!rc->attn_backend_fallback) {
            const char *near = n_known ? lh_nearest(requested, known, n_known) : NULL;
            lh_err_set(err, LH_E_UNKNOWN_NAME,
                       "attn_backend '%s' (from %s) is not available%s%s%s; available: %s",
                       requested, rc->attn_backend ? origin : "default",
                       near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "",
                       n_known ? list : "(none)");
            free(known);
            return LH_E_UNKNOWN_NAME;
        }
        lh_log(LH_LOG_WARN, "attn_backend '%s' is not available (available: %s); "
               "attn_backend_fallback: using '%s'", requested, list, LH_DEFAULT_ATTN_BACKEND);
        name = LH_DEFAULT_ATTN_BACKEND;
        json_object_set_new(out->trace, "fallback",
                            json_sprintf("'%s' unavailable (available: %s); fell back to '%s'",
                                         requested, list, name));
    } else {
        json_object_set_new(out->trace, "fallback", json_null());
    }
    free(known);
    json_object_set_new(out->trace, "normalized", json_string(name));
    lh_status st = lh_registry_ensure(reg, LH_KIND_ATTENTION_BACKEND, name, &out->entry, err);
    if (st != LH_OK)
        return lh_err_prefix(err, "attention backend");
    const lh_attn_backend_provider *p = &out->entry->p.attn;
    char caps[256];
    json_object_set_new(out->trace, "backend", json_string(out->entry->name));
    json_object_set_new(out->trace, "shared_object", json_string(out->entry->module->path));
    json_object_set_new(out->trace, "capabilities",
                        json_string(lh_attn_caps_str(p->capabilities, caps, sizeof caps)));
    const lh_model_geometry *g = &cfg->geo;
    const struct {
        const char *what;
        bool needed;
        uint64_t bit;
        const char *why;
    } needs[] = {
        {"sliding_window", g->sliding_window > 0, LH_ATTN_CAP_SLIDING_WINDOW, "sliding_window"},
        {"chunked", g->attention_chunk_size > 0, LH_ATTN_CAP_CHUNKED, "attention_chunk_size"},
        {"mla", g->has_mla, LH_ATTN_CAP_MLA, "kv_lora_rank"},
        {"fp8_kv", rc->kv_cache.dtype == LH_DTYPE_FP8_E4M3, LH_ATTN_CAP_FP8_KV,
         "kv_cache.dtype fp8"},
    };
    json_t *checks = json_array();
    json_object_set_new(out->trace, "checks", checks);
    for (size_t i = 0; i < sizeof needs / sizeof *needs; i++) {
        bool have = (p->capabilities & needs[i].bit) != 0;
        check(checks, needs[i].what, needs[i].needed, have);
        if (needs[i].needed && !have)
            return lh_err_set(err, LH_E_UNSUPPORTED,
                              "attention backend '%s' does not support %s, which this run needs "
                              "(%s is set for %s); backends: see `llmhost backends`",
                              out->entry->name, needs[i].what, needs[i].why, cfg->path);
    }
    return LH_OK;
}

lh_status lh_select_attention_backend(lh_registry *reg, const lh_run_config *rc,
                                      const lh_model_config *cfg, lh_attn_choice *out,
                                      lh_err *err)
{
    memset(out, 0, sizeof *out);
    out->trace = json_object();
    if (!out->trace)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    lh_registry_lock(reg);
    lh_status st = select_locked(reg, rc, cfg, out, err);
    lh_registry_unlock(reg);
    if (st != LH_OK)
        lh_attn_choice_free(out);
    return st;
}
