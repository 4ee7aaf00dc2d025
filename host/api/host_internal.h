/* Internal: what an lh_host is, for the files of host/api/. */
#ifndef LH_API_HOST_INTERNAL_H
#define LH_API_HOST_INTERNAL_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "registry/registry.h"

struct lh_host {
    lh_registry reg;
};

/* Loads and validates the run config (file + overrides), then the model's config.json. On
 * success the caller frees both; on error rc is still initialized (free it). */
lh_status lh_prepare_request(const lh_resolve_request *req, lh_run_config *rc,
                             lh_model_config **cfg, lh_err *err);

#endif
