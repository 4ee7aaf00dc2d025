/* The paged backend's ops, visible to the backend-level tests that compile its sources in. */
#ifndef LH_ATTN_PAGED_H
#define LH_ATTN_PAGED_H

#include "lh_attention.h"

extern const lh_attn_ops paged_ops;

/* The capability flags the plugin registers. */
#define PAGED_CAPABILITIES                                                                  \
    (LH_ATTN_CAP_SLIDING_WINDOW | LH_ATTN_CAP_CHUNKED | LH_ATTN_CAP_FP8_KV |                \
     LH_ATTN_CAP_MIXED_KV | LH_ATTN_CAP_SPARSE | LH_ATTN_CAP_FUSED_ROPE |                    \
     LH_ATTN_CAP_PAGED_KV | LH_ATTN_CAP_SOFTCAP | LH_ATTN_CAP_MLA)

#endif
