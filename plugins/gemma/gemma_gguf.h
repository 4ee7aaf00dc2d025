/* Gemma 2 / Gemma 3 GGUF providers (gemma_gguf.c), registered by the gemma plugin's init. */
#ifndef LH_PLUGIN_GEMMA_GGUF_H
#define LH_PLUGIN_GEMMA_GGUF_H

#include "lh_plugin.h"

/* Registers "gemma2" and "gemma3"; returns register_gguf's status. */
lh_status gemma_register_gguf(const lh_host_api *api, lh_plugin_ctx *ctx);

#endif
