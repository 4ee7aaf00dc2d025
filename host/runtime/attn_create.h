/* Internal: create_attention (DESIGN §8) — the one place an attention layer is constructed,
 * by the runtime and, through the host API table, by plugins. */
#ifndef LH_RUNTIME_ATTN_CREATE_H
#define LH_RUNTIME_ATTN_CREATE_H

#include "lh_plugin.h"

/* See lh_host_api.create_attention (lh_plugin.h) for the checks, errors and ownership. */
lh_status lh_create_attention(const lh_attn_backend_provider *p, const lh_attn_geometry *g,
                              lh_attn_layer **out, lh_error *err);

#endif
