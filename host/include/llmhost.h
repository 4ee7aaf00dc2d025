/* llmhost: the public embedding API (libllmhost).
 *
 * Conventions (the same for every function here):
 *  - Functions return lh_status; LH_OK (0) is success. On failure the optional `err` receives
 *    the status and a message whose context chain names file, key, architecture and cause.
 *    `err` may be NULL. Nothing aborts on bad input.
 *  - Handles are opaque. Whoever gets a handle from a create or open function owns it and releases it
 *    with the matching free or close function. Strings returned as `const char *` are owned by the
 *    handle they came from and live as long as it does; `char *` results are the caller's to
 *    free().
 *  - Thread safety: an lh_host may be used from several threads at once; loading and
 *    registry access are serialized inside. Other handles belong to one thread at a time. */
#ifndef LLMHOST_H
#define LLMHOST_H

#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_err {
    lh_status code;
    char msg[2048];
} lh_err;

/* Short stable name of a status ("unknown-name", "load-failure", ...). Never NULL. */
LH_EXPORT const char *lh_status_name(lh_status s);

typedef struct lh_host lh_host;

typedef struct lh_host_options {
    uint32_t struct_size;
    /* Built-in plugin directory. NULL: $LLMHOST_PLUGIN_DIR, else found relative to
     * libllmhost (build tree: ../plugins; installed: <libdir>/llmhost/plugins). */
    const char *plugin_dir;
    /* Refuse nothing on the file-permission checks, but log each refusal that was waived. */
    bool allow_insecure_plugins;
} lh_host_options;

/* Creates a host: reads the built-in arch_index.tsv and loads no plugin.
 * Errors: LH_E_IO (plugin dir or index missing), LH_E_INDEX_PARSE. */
LH_EXPORT lh_status lh_host_create(const lh_host_options *opts, lh_host **out, lh_err *err);
/* Frees the host. Plugins loaded by it stay mapped (they are never dlclosed). NULL is ok. */
LH_EXPORT void lh_host_free(lh_host *h);

/* Declares a custom module dir at the end of the precedence order (earlier dirs win).
 * The dir must be absolute. With its own arch_index.tsv its plugins load lazily; without,
 * every libmodel_*.so / libattn_*.so in it loads now, in sorted order. A dir declared before
 * and removed is restored from its modules' registration logs without reloading.
 * Errors: LH_E_INSECURE (relative path, writable by others), LH_E_USAGE (already declared, or
 * the built-in dir), LH_E_IO, LH_E_INDEX_PARSE, and for
 * eagerly loaded dirs any load error class; on error the dir is not declared. */
LH_EXPORT lh_status lh_host_add_custom_dir(lh_host *h, const char *dir, lh_err *err);
/* Removes a declared custom dir; the registries are rebuilt without its modules.
 * Errors: LH_E_USAGE when the dir is not declared. */
LH_EXPORT lh_status lh_host_remove_custom_dir(lh_host *h, const char *dir, lh_err *err);
/* Declares each dir of $LLMHOST_CUSTOM_MODULE_DIRS (colon-separated) in order. */
LH_EXPORT lh_status lh_host_add_custom_dirs_from_env(lh_host *h, lh_err *err);

/* JSON (caller frees) listing what the indexes offer, built-in and custom, and what is loaded.
 * Loads no plugin. */
LH_EXPORT lh_status lh_host_list_json(lh_host *h, char **json_out, lh_err *err);
/* JSON array of absolute paths of every plugin file this host loaded (caller frees). */
LH_EXPORT lh_status lh_host_loaded_plugins_json(lh_host *h, char **json_out, lh_err *err);

/* Resolve a model (directory or config.json path) with an optional YAML run config (file
 * path, may be NULL) and CLI-style overrides ("key=value" strings, may be NULL). The result
 * is JSON (caller frees): see README "resolve". Errors: every class of lh_status. */
typedef struct lh_resolve_request {
    uint32_t struct_size;
    const char *model;        /* model dir or config.json */
    const char *config_file;  /* YAML run config or NULL */
    const char *const *overrides; /* NULL-terminated "key=value" list or NULL */
} lh_resolve_request;
LH_EXPORT lh_status lh_host_resolve_json(lh_host *h, const lh_resolve_request *req, char **json_out,
                               lh_err *err);
/* Parses and validates a run config (YAML file or NULL, plus "key=value" overrides) without
 * loading anything: the CLI calls it before declaring custom dirs so that a bad run config
 * fails before any plugin loads. Errors: LH_E_IO, LH_E_CONFIG, LH_E_USAGE. */
LH_EXPORT lh_status lh_validate_run_config(const char *config_file,
                                           const char *const *overrides, lh_err *err);
/* As resolve, then builds the module tree (meta phase, no weight memory) and reports the
 * memory plan. JSON caller-owned; see README "explain". */
LH_EXPORT lh_status lh_host_explain_json(lh_host *h, const lh_resolve_request *req, char **json_out,
                               lh_err *err);

#ifdef __cplusplus
}
#endif
#endif
