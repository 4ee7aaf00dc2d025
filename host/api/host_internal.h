/* Internal: what an lh_host is, for the files of host/api/. */
#ifndef LH_API_HOST_INTERNAL_H
#define LH_API_HOST_INTERNAL_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "registry/registry.h"
#include "resolve/resolve.h"

#include <jansson.h>

struct lh_host {
    lh_registry reg;
};

/* Loads and validates the run config (file + overrides), then the model's config: its
 * config.json, or for a GGUF source (gguf_locate.h) the config its plugin writes from the
 * file's metadata (gguf_config.h; that loads the plugin). On success the caller frees both;
 * on error rc is still initialized (free it). */
lh_status lh_prepare_request(lh_host *h, const lh_resolve_request *req, lh_run_config *rc,
                             lh_model_config **cfg, lh_err *err);

/* lh_model_build of the resolved provider; for a GGUF source also the file's tensors as a
 * checkpoint with the tree's types taken from them (lh_model_adopt_stored_dtypes), so the
 * memory plan is what the file holds. *ck (may be NULL: closed here) receives that checkpoint
 * (NULL for a Hugging Face source). A GGUF source refuses the run config's dtype and quant
 * settings, naming them (its weights are used as stored). */
struct lh_model;
struct lh_checkpoint;
lh_status lh_build_for_source(const lh_resolution *r, const lh_model_config *cfg,
                              const lh_run_config *rc, struct lh_model **m,
                              struct lh_checkpoint **ck, lh_err *err);

/* The explain object (lh_host_explain_json's keys) for a resolution r of cfg under rc:
 * resolution keys (with loaded_plugins, read under the registry lock), config, attention
 * (attn_trace when not NULL; kept by reference), and when m is not NULL run_config and the
 * memory plan of m (the KV pool from attn_trace's kv_cache when it has one). New reference
 * in *out. Errors: the plan's, LH_E_NOMEM. */
lh_status lh_explain_object(lh_host *h, const lh_resolution *r, const lh_model_config *cfg,
                            const lh_run_config *rc, json_t *attn_trace,
                            const struct lh_model *m, json_t **out, lh_err *err);

/* For tools that drive an engine's steps themselves (tools/bench): the engine's decoder and
 * kernel context, owned by the engine and valid until lh_engine_close. */
struct lh_runner;
struct lh_kctx;
struct lh_runner *lh_engine_runner(lh_engine *e);
struct lh_kctx *lh_engine_kctx(lh_engine *e);
/* CUDA graph captures and replays of decode steps since the engine opened (0 and 0 when it
 * runs without graphs), and the device it runs on. */
void lh_engine_graph_counts(const lh_engine *e, int64_t *captures, int64_t *replays);
lh_device lh_engine_device(const lh_engine *e);

#endif
