/* The public embedding API (llmhost.h): a thin layer over the registry, the config parsers,
 * resolution and the module tree. */
#include "llmhost.h"

#include "api/attn_select.h"
#include "api/host_api_table.h"
#include "api/host_internal.h"
#include "config/gguf_config.h"
#include "config/model_config.h"
#include "config/run_config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/paths.h"
#include "model/model.h"
#include "registry/registry.h"
#include "resolve/resolve.h"
#include "runtime/runner.h"
#include "weights/checkpoint_gguf.h"
#include "weights/gguf.h"
#include "weights/gguf_locate.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



lh_status lh_host_create(const lh_host_options *opts, lh_host **out, lh_err *err)
{
    *out = NULL;
    lh_err_clear(err);
    char *dir = NULL;
    lh_status st;
    if (opts && opts->plugin_dir) {
        dir = strdup(opts->plugin_dir);
        st = dir ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory");
    } else {
        st = lh_find_builtin_plugin_dir(&dir, err);
    }
    if (st != LH_OK)
        return st;
    lh_host *h = calloc(1, sizeof *h);
    if (!h) {
        free(dir);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    bool insecure = opts && opts->allow_insecure_plugins;
    if (insecure)
        lh_log(LH_LOG_WARN, "--allow-insecure-plugins: plugin permission checks are waived; "
                            "files anyone may write can run code in this process");
    st = lh_registry_init(&h->reg, dir, insecure, err);
    free(dir);
    if (st != LH_OK) {
        free(h);
        return st;
    }
    *out = h;
    return LH_OK;
}

void lh_host_free(lh_host *h)
{
    if (!h)
        return;
    lh_registry_destroy(&h->reg);
    free(h);
}

lh_status lh_host_add_custom_dir(lh_host *h, const char *dir, lh_err *err)
{
    if (!dir || !*dir)
        return lh_err_set(err, LH_E_USAGE, "custom module dir: empty path");
    lh_registry_lock(&h->reg);
    lh_status st = lh_registry_add_dir(&h->reg, dir, err);
    lh_registry_unlock(&h->reg);
    return st;
}

lh_status lh_host_remove_custom_dir(lh_host *h, const char *dir, lh_err *err)
{
    if (!dir)
        return lh_err_set(err, LH_E_USAGE, "custom module dir: NULL path");
    lh_registry_lock(&h->reg);
    lh_status st = lh_registry_remove_dir(&h->reg, dir, err);
    lh_registry_unlock(&h->reg);
    return st;
}

lh_status lh_host_add_custom_dirs_from_env(lh_host *h, lh_err *err)
{
    const char *env = getenv("LLMHOST_CUSTOM_MODULE_DIRS");
    if (!env || !*env)
        return LH_OK;
    char *copy = strdup(env);
    if (!copy)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    lh_status st = LH_OK;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ":", &save); tok && st == LH_OK;
         tok = strtok_r(NULL, ":", &save)) {
        st = lh_host_add_custom_dir(h, tok, err);
        if (st != LH_OK)
            lh_err_prefix(err, "LLMHOST_CUSTOM_MODULE_DIRS");
    }
    free(copy);
    return st;
}

static lh_status dump(json_t *j, char **out, lh_err *err)
{
    *out = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return *out ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory");
}

static json_t *loaded_plugins(const lh_registry *reg)
{
    json_t *a = json_array();
    for (size_t i = 0; i < reg->n_modules; i++)
        if (reg->modules[i]->state == LH_MOD_STATE_LOADED)
            json_array_append_new(a, json_string(reg->modules[i]->path));
    return a;
}

static json_t *index_json(const lh_arch_index *idx, const char *origin)
{
    json_t *rows = json_array();
    for (size_t i = 0; i < idx->n_rows; i++) {
        const lh_index_row *r = &idx->rows[i];
        char *so = lh_path_join(idx->dir, r->shared_object);
        json_array_append_new(rows, json_pack("{s:s,s:s,s:s,s:i}", "kind", lh_kind_name(r->kind),
                                              "name", r->name, "shared_object", so ? so : "",
                                              "line", r->line));
        free(so);
    }
    return json_pack("{s:s,s:s,s:b,s:o}", "path", idx->path, "origin", origin, "lazy", 1, "rows",
                     rows);
}

static json_t *module_json(const lh_module_rec *m)
{
    json_t *regs = json_array();
    for (size_t i = 0; i < m->n_log; i++)
        json_array_append_new(regs, json_pack("{s:s,s:s,s:s}", "kind",
                                              lh_kind_name(m->log[i]->kind), "name",
                                              m->log[i]->name, "outcome",
                                              lh_reg_outcome_name(m->log[i]->outcome)));
    json_t *j = json_pack("{s:s,s:s,s:s}", "path", m->path, "origin",
                          m->builtin ? "builtin" : "external", "state",
                          m->state == LH_MOD_STATE_LOADED ? "loaded" : "failed");
    if (m->state == LH_MOD_STATE_LOADED) {
        json_object_set_new(j, "plugin", json_string(m->plugin_name));
        json_object_set_new(j, "version", json_string(m->plugin_version));
        json_object_set_new(j, "registrations", regs);
    } else {
        json_decref(regs);
        json_object_set_new(j, "error", json_string(m->fail_msg ? m->fail_msg : ""));
        json_object_set_new(j, "error_class", json_string(lh_status_name(m->fail_code)));
    }
    return j;
}

lh_status lh_host_list_json(lh_host *h, char **json_out, lh_err *err)
{
    lh_registry *reg = &h->reg;
    lh_registry_lock(reg);
    json_t *indexes = json_array();
    json_array_append_new(indexes, index_json(&reg->builtin_index, "builtin"));
    json_t *eager = json_array();
    json_t *dirs = json_array();
    for (size_t d = 0; d < reg->n_dirs; d++) {
        const lh_custom_dir *cd = &reg->dirs[d];
        json_array_append_new(dirs, json_pack("{s:s,s:b}", "path", cd->path, "indexed",
                                              cd->has_index));
        if (cd->has_index) {
            json_array_append_new(indexes, index_json(&cd->index, "external"));
        } else {
            json_t *mods = json_array();
            for (size_t i = 0; i < cd->n_eager; i++)
                json_array_append_new(mods, module_json(cd->eager[i]));
            json_array_append_new(eager, json_pack("{s:s,s:o}", "dir", cd->path, "modules", mods));
        }
    }
    json_t *mods = json_array();
    for (size_t i = 0; i < reg->n_modules; i++)
        json_array_append_new(mods, module_json(reg->modules[i]));
    json_t *j = json_pack("{s:s,s:o,s:o,s:o,s:o,s:o}", "builtin_dir", reg->builtin_dir,
                          "custom_module_dirs", dirs, "indexes", indexes, "eager_dirs", eager,
                          "modules", mods, "loaded_plugins", loaded_plugins(reg));
    lh_registry_unlock(reg);
    return dump(j, json_out, err);
}

lh_status lh_host_backends_json(lh_host *h, char **json_out, lh_err *err)
{
    lh_err_clear(err);
    lh_registry *reg = &h->reg;
    lh_registry_lock(reg);
    size_t n;
    const char **names = lh_registry_known_names(reg, LH_KIND_ATTENTION_BACKEND, &n);
    json_t *arr = json_array();
    lh_status st = LH_OK;
    for (size_t i = 0; i < n && st == LH_OK; i++) {
        const lh_reg_entry *e;
        st = lh_registry_ensure(reg, LH_KIND_ATTENTION_BACKEND, names[i], &e, err);
        if (st != LH_OK)
            break;
        uint64_t caps = e->p.attn.capabilities;
        json_t *c = json_object();
        for (size_t k = 0; k < LH_ATTN_N_CAPS; k++)
            json_object_set_new(c, lh_attn_cap_names[k].name,
                                json_boolean((caps & lh_attn_cap_names[k].bit) != 0));
        json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:b,s:o}", "name", e->name,
                                             "shared_object", e->module->path, "origin",
                                             e->module->builtin ? "builtin" : "external",
                                             "forward", e->p.attn.ops != NULL, "capabilities",
                                             c));
    }
    free(names);
    json_t *j = json_pack("{s:o,s:o}", "backends", arr, "loaded_plugins", loaded_plugins(reg));
    lh_registry_unlock(reg);
    if (st != LH_OK) {
        json_decref(j);
        return st;
    }
    json_object_set_new(j, "devices", lh_devices_json()); /* attn_select.h */
    return dump(j, json_out, err);
}

lh_status lh_host_loaded_plugins_json(lh_host *h, char **json_out, lh_err *err)
{
    lh_registry_lock(&h->reg);
    json_t *j = loaded_plugins(&h->reg);
    lh_registry_unlock(&h->reg);
    return dump(j, json_out, err);
}

/* How a run config given as text is named in messages and origins (FILE:LINE:COL). */
#define CONFIG_TEXT_NAME "<config_text>"

static lh_status load_run_config(const char *config_file, const char *config_text,
                                 const char *const *overrides, lh_run_config *rc, lh_err *err)
{
    lh_run_config_init(rc);
    lh_status st = LH_OK;
    if (config_file && config_text)
        st = lh_err_set(err, LH_E_USAGE, "a run config was given both as a file (%s) and as "
                        "text (config_text); pass one of them", config_file);
    else if (config_file)
        st = lh_run_config_load_file(rc, config_file, err);
    else if (config_text)
        st = lh_run_config_load_string(rc, config_text, CONFIG_TEXT_NAME, err);
    for (const char *const *o = overrides; st == LH_OK && o && *o; o++)
        st = lh_run_config_set(rc, *o, err);
    if (st == LH_OK)
        st = lh_run_config_validate(rc, err);
    return st;
}

static lh_status validate(const char *file, const char *text, const char *const *overrides,
                          lh_err *err)
{
    lh_err_clear(err);
    lh_run_config rc;
    lh_status st = load_run_config(file, text, overrides, &rc, err);
    lh_run_config_free(&rc);
    return st;
}

lh_status lh_validate_run_config(const char *config_file, const char *const *overrides,
                                 lh_err *err)
{
    return validate(config_file, NULL, overrides, err);
}

lh_status lh_validate_run_config_text(const char *config_text, const char *const *overrides,
                                      lh_err *err)
{
    return validate(NULL, config_text, overrides, err);
}

/* Run config first and validated before anything loads (DESIGN §9), then config.json. */
lh_status lh_prepare_request(lh_host *h, const lh_resolve_request *req, lh_run_config *rc,
                             lh_model_config **cfg, lh_err *err)
{
    *cfg = NULL;
    if (!req || !req->model) {
        lh_run_config_init(rc);
        return lh_err_set(err, LH_E_USAGE, "no model given (a model directory or config.json)");
    }
    /* config_text was appended: a caller's older, smaller struct does not have it */
    const char *text = req->struct_size >= offsetof(lh_resolve_request, config_text) +
                                               sizeof req->config_text
                           ? req->config_text : NULL;
    lh_status st = lh_model_path_check(req->model, err);
    if (st != LH_OK) {
        lh_run_config_init(rc);
        return st;
    }
    st = load_run_config(req->config_file, text, req->overrides, rc, err);
    char *gguf = NULL;
    if (st == LH_OK)
        st = lh_gguf_locate(req->model, &gguf, err);
    if (st == LH_OK && gguf)
        st = lh_model_config_from_gguf(&h->reg, gguf, cfg, err);
    else if (st == LH_OK)
        st = lh_model_config_load(req->model, cfg, err);
    free(gguf);
    return st;
}

/* The run config's settings that a GGUF source cannot honour: its weights are used as stored. */
static lh_status gguf_refusals(const lh_model_config *cfg, const lh_run_config *rc, lh_err *err)
{
    char origin[128];
    if (rc->dtype != LH_DTYPE_INVALID)
        return lh_err_set(err, LH_E_UNSUPPORTED, "dtype=%s (from %s): %s is a GGUF file, whose "
                          "weights are used as stored (each tensor in its own type); remove "
                          "dtype", lh_dtype_name(rc->dtype),
                          lh_value_origin_str(rc, rc->dtype_origin, origin, sizeof origin),
                          cfg->path);
    if (rc->quant.scheme != LH_QUANT_NONE || rc->quant.n_rules)
        return lh_err_set(err, LH_E_UNSUPPORTED, "quant (from %s): %s is a GGUF file, whose "
                          "weights are already quantized as stored; remove the quant config",
                          lh_value_origin_str(rc, rc->quant.origin, origin, sizeof origin),
                          cfg->path);
    return LH_OK;
}

lh_status lh_build_for_source(const lh_resolution *r, const lh_model_config *cfg,
                              const lh_run_config *rc, lh_model **m, lh_checkpoint **ck,
                              lh_err *err)
{
    *m = NULL;
    if (ck)
        *ck = NULL;
    lh_status st = cfg->gguf ? gguf_refusals(cfg, rc, err) : LH_OK;
    if (st == LH_OK)
        st = lh_model_build(lh_host_api_table(), &r->entry->p.model, cfg, rc, m, err);
    if (st != LH_OK || !cfg->gguf)
        return st;
    lh_checkpoint *g = NULL;
    st = lh_checkpoint_open_gguf(cfg, &g, err);
    if (st == LH_OK)
        st = lh_model_adopt_stored_dtypes(*m, g, err);
    if (st == LH_OK && ck) {
        *ck = g;
        g = NULL;
    }
    lh_checkpoint_close(g);
    if (st != LH_OK) {
        lh_model_free(*m);
        *m = NULL;
    }
    return st;
}

static json_t *resolution_json(const lh_registry *reg, const lh_resolution *r)
{
    const lh_module_rec *m = r->entry->module;
    char abi[32];
    snprintf(abi, sizeof abi, "%u.%u", m->abi_major, m->abi_minor);
    return json_pack("{s:s,s:s,s:O,s:s,s:s,s:s,s:o,s:{s:s,s:s,s:s},s:O}",
                     "architecture", r->architecture, "resolved_architecture", r->resolved,
                     "rewrites", r->rewrites, "kind", lh_kind_name(r->kind), "shared_object",
                     m->path, "origin", m->builtin ? "builtin" : "external", "loaded_plugins",
                     loaded_plugins(reg), "plugin", "name", m->plugin_name, "version",
                     m->plugin_version, "abi", abi, "trace", r->trace);
}

lh_status lh_explain_object(lh_host *h, const lh_resolution *r, const lh_model_config *cfg,
                            const lh_run_config *rc, json_t *attn_trace, const lh_model *m,
                            json_t **out, lh_err *err)
{
    *out = NULL;
    lh_registry_lock(&h->reg);
    json_t *j = resolution_json(&h->reg, r);
    lh_registry_unlock(&h->reg);
    if (!j)
        return lh_err_set(err, LH_E_NOMEM, "out of memory for the resolution JSON");
    json_object_set_new(j, "config", json_string(cfg->path));
    if (cfg->gguf) {
        lh_registry_lock(&h->reg);
        const lh_reg_entry *ge = lh_registry_peek(&h->reg, LH_KIND_GGUF,
                                                  cfg->gguf_provider->gguf_arch);
        json_t *src = json_pack("{s:s,s:s,s:i,s:s,s:s}", "format", "gguf", "file", cfg->path,
                                "version", (int)lh_gguf_version(cfg->gguf),
                                "gguf_architecture", cfg->gguf_provider->gguf_arch,
                                "names_from", ge ? ge->module->path : "?");
        lh_registry_unlock(&h->reg);
        if (!src || json_object_set_new(j, "source", src) != 0) {
            json_decref(j);
            return lh_err_set(err, LH_E_NOMEM, "out of memory for the resolution JSON");
        }
    }
    if (attn_trace)
        json_object_set(j, "attention", attn_trace);
    if (m) {
        lh_memory_plan plan;
        lh_status st = lh_model_plan(m, &plan, err);
        if (st != LH_OK) {
            json_decref(j);
            return st;
        }
        json_object_set_new(j, "run_config", lh_run_config_to_json(rc));
        json_t *pj = lh_model_plan_json(m, &plan);
        json_object_update(j, pj);
        json_decref(pj);
        /* the pool the engine would allocate (kv_cache sizing, block rounding) replaces
         * the tree's max_seq_len x max_batch_size estimate, so explain has one answer */
        const json_t *kv = json_object_get(json_object_get(j, "attention"), "kv_cache");
        if (kv) {
            json_object_set(j, "kv_pool_tokens", json_object_get(kv, "pool_tokens"));
            json_object_set(j, "kv_pool_bytes", json_object_get(kv, "pool_bytes"));
        }
    }
    *out = j;
    return LH_OK;
}

/* explain's CUDA-graph decision with what only the tree and the backend tell (the runner's
 * own rule): a mixture of experts, or a backend that keeps its own KV memory, decodes
 * eagerly even when graphs are on */
static void explain_graphs(json_t *j, const lh_model *m, uint64_t caps)
{
    json_t *g = json_object_get(json_object_get(json_object_get(j, "attention"), "device"),
                                "cuda_graphs");
    if (!json_is_true(json_object_get(g, "on")))
        return;
    const char *why = lh_runner_graphs_refusal(lh_model_moe_at(m, 0, NULL) != NULL,
                                               !(caps & LH_ATTN_CAP_PAGED_KV));
    if (!why)
        return;
    json_object_set_new(g, "on", json_false());
    json_object_set_new(g, "reason", json_string(why));
}

/* Whether a scheduler over this engine could share KV blocks by prefix (attention.kv_cache
 * .prefix_caching), with the runner's own rule. */
static void explain_prefix(json_t *j, const lh_model *m, uint64_t caps)
{
    json_t *kv = json_object_get(json_object_get(j, "attention"), "kv_cache");
    if (!kv)
        return;
    const char *why = lh_prefix_refusal(!(caps & LH_ATTN_CAP_PAGED_KV), NULL);
    for (size_t i = 0; !why && i < lh_model_attention_count(m); i++) {
        const lh_attention_spec *s =
            lh_model_attention_spec(m, lh_model_attention_lookup(m, lh_model_attention_key(m, i)));
        if (s && s->rope)
            why = lh_prefix_refusal(false, s->rope_scaling.kind);
    }
    json_object_set_new(kv, "prefix_caching",
                        json_pack("{s:b,s:s}", "available", why == NULL, "reason",
                                  why ? why : "a scheduler (lh_scheduler_*) shares whole blocks "
                                              "by a hash chain of their tokens, LRU-evicted"));
}

static lh_status resolve_common(lh_host *h, const lh_resolve_request *req, bool explain,
                                char **json_out, lh_err *err)
{
    *json_out = NULL;
    lh_err_clear(err);
    lh_run_config rc;
    lh_model_config *cfg;
    lh_status st = lh_prepare_request(h, req, &rc, &cfg, err);
    lh_resolution r = {0};
    /* explain: the attention backend is chosen first, so an unknown name fails before any
     * plugin loads (its check reads only the indexes) */
    lh_attn_choice choice = {0};
    if (st == LH_OK && explain)
        st = lh_select_attention_backend(&h->reg, &rc, &choice, err);
    if (st == LH_OK)
        st = lh_resolve(&h->reg, cfg, &rc, &r, err);
    json_t *j = NULL;
    lh_model *m = NULL;
    if (st == LH_OK && explain)
        st = lh_build_for_source(&r, cfg, &rc, &m, NULL, err);
    if (st == LH_OK && explain) { /* the decisions that read the tree's attention geometry */
        lh_model_geometry geo;
        lh_model_run_geometry(m, &cfg->geo, &geo);
        st = lh_attention_decide(&rc, cfg, &geo, &choice, err);
    }
    if (st == LH_OK)
        st = lh_explain_object(h, &r, cfg, &rc, choice.trace, m, &j, err);
    if (st == LH_OK && explain) {
        explain_graphs(j, m, choice.caps);
        explain_prefix(j, m, choice.caps);
    }
    lh_model_free(m);
    lh_attn_choice_free(&choice);
    if (st == LH_OK)
        st = dump(j, json_out, err);
    else
        json_decref(j);
    lh_resolution_free(&r);
    lh_model_config_free(cfg);
    lh_run_config_free(&rc);
    return st;
}

lh_status lh_host_resolve_json(lh_host *h, const lh_resolve_request *req, char **json_out,
                                      lh_err *err)
{
    return resolve_common(h, req, false, json_out, err);
}

lh_status lh_host_explain_json(lh_host *h, const lh_resolve_request *req, char **json_out,
                                      lh_err *err)
{
    return resolve_common(h, req, true, json_out, err);
}
