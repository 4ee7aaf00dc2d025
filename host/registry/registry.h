/* Internal: plugin module records, custom module dirs, and the provider registries with the
 * rules of DESIGN §5.
 *
 * Ownership: the registry owns every module record (loaded or failed; never freed before the
 * registry, never dlclosed), every registration log entry and every slot. Slots point at log
 * entries; nothing else holds provider data.
 *
 * Which module owns a (kind, name) is decided by declarations, not by load order:
 *   1. the first declared custom dir that provides it (an indexed dir: its index row; an
 *      eagerly loaded dir: the first of its modules, in sorted file order, that registered it);
 *   2. else the built-in index row.
 * A registration takes its slot only when its module is that owner; built-ins therefore never
 * overwrite an external's slot and externals of a later dir never beat an earlier dir's. That
 * single rule gives rules 1-3 and 5 of DESIGN §5 whatever order plugins load in.
 *
 * Locking: every function here expects the caller to hold reg->lock (lh_registry_lock). */
#ifndef LH_REGISTRY_REGISTRY_H
#define LH_REGISTRY_REGISTRY_H

#include "llmhost.h"
#include "lh_plugin.h"
#include "index/arch_index.h"

#include <pthread.h>

/* What happened to one registration attempt the last time it was applied. */
typedef enum lh_reg_outcome {
    LH_REG_TAKEN = 0,     /* holds the slot */
    LH_REG_KEPT_OUT,      /* built-in kept out: the slot belongs to another provider */
    LH_REG_SHADOWED,      /* external that a higher-precedence external outranks */
    LH_REG_UNPROMISED,    /* the module's index does not list it: ignored (index drift) */
    LH_REG_UNDECLARED     /* its custom dir is no longer declared: contributes nothing */
} lh_reg_outcome;

const char *lh_reg_outcome_name(lh_reg_outcome o);

typedef struct lh_module_rec lh_module_rec;

typedef struct lh_reg_entry {
    lh_kind kind;
    char *name; /* as the plugin spelled it (attention backends compare case-insensitively) */
    union {
        lh_model_provider model;
        lh_draft_provider draft;
        lh_attn_backend_provider attn;
        lh_gguf_provider gguf;
    } p;
    lh_module_rec *module;
    lh_reg_outcome outcome;
} lh_reg_entry;

typedef enum lh_module_state { LH_MOD_STATE_LOADED = 1, LH_MOD_STATE_FAILED = 2 } lh_module_state;

struct lh_module_rec {
    char *path;      /* absolute path as loaded (dir/file of its index or dir scan) */
    char *file_name; /* bare file name */
    char *dir;       /* canonical directory it was loaded from */
    bool builtin;    /* decided by the host from the directory, never by the plugin */
    lh_module_state state;
    lh_status fail_code;
    char *fail_msg;
    void *handle;
    char *plugin_name, *plugin_version;
    unsigned abi_major, abi_minor;
    unsigned load_seq; /* first-load order */
    bool in_init;      /* registration allowed only while init runs */
    char *init_fail_msg;
    /* The registration log: every attempt in order, losers included. It doubles as the
     * per-provider record of declared names (DESIGN §5.6). */
    lh_reg_entry **log;
    size_t n_log, cap_log;
};

typedef struct lh_custom_dir {
    char *path;     /* canonical absolute path */
    bool has_index;
    lh_arch_index index;
    lh_module_rec **eager; /* eager dirs: modules in sorted file order */
    size_t n_eager;
} lh_custom_dir;

typedef struct lh_slot {
    lh_reg_entry *entry;
} lh_slot;

typedef struct lh_registry {
    pthread_mutex_t lock;
    char *builtin_dir;
    lh_arch_index builtin_index;
    bool allow_insecure;
    lh_custom_dir *dirs; /* declared, in precedence order */
    size_t n_dirs;
    lh_module_rec **modules; /* every load attempt, in first-load order */
    size_t n_modules;
    unsigned next_seq;
    unsigned dlopen_calls; /* for tests and benchmarks */
    lh_slot *slots[LH_KIND_COUNT];
    size_t n_slots[LH_KIND_COUNT];
} lh_registry;

/* Reads the built-in index in builtin_dir; loads nothing. Errors: LH_E_IO, LH_E_INDEX_PARSE. */
lh_status lh_registry_init(lh_registry *reg, const char *builtin_dir, bool allow_insecure,
                           lh_err *err);
void lh_registry_destroy(lh_registry *reg);
void lh_registry_lock(lh_registry *reg);
void lh_registry_unlock(lh_registry *reg);

/* Declares / removes a custom dir (see llmhost.h lh_host_add_custom_dir). Rebuilds. */
lh_status lh_registry_add_dir(lh_registry *reg, const char *dir, lh_err *err);
lh_status lh_registry_remove_dir(lh_registry *reg, const char *dir, lh_err *err);

/* Ensure, then look up: makes the owner of (kind, name) loaded and returns its slot entry.
 * Errors: LH_E_UNKNOWN_NAME (names the kind, lists known names, suggests the nearest), any
 * load error class of the owner's file (memoized: a failed file is not retried),
 * LH_E_INDEX_DRIFT (the owner loaded but did not register the name). */
lh_status lh_registry_ensure(lh_registry *reg, lh_kind kind, const char *name,
                             const lh_reg_entry **out, lh_err *err);

/* Loads (or returns the memo of) the file dir/file_name. builtin is decided by the caller
 * from which directory it is. New registrations are applied to the tables. */
lh_status lh_registry_load_file(lh_registry *reg, const char *dir, const char *file_name,
                                lh_module_rec **out, lh_err *err);

/* Clears every table and replays all logs through the rules (built-ins in first-load order,
 * then declared externals in dir order). `quiet` logs conflicts at debug level only. */
void lh_registry_rebuild(lh_registry *reg, bool quiet);

/* Current slot entry for (kind, name) without loading anything; NULL if empty. */
const lh_reg_entry *lh_registry_peek(const lh_registry *reg, lh_kind kind, const char *name);

/* Every name of `kind` that some index or loaded eager module offers (sorted, deduplicated,
 * malloc'ed array of borrowed strings; *n set). NULL with *n = 0 when none or on OOM. */
const char **lh_registry_known_names(const lh_registry *reg, lh_kind kind, size_t *n);

/* Names `mod` declared for `kind`, from its own record (not the tables). Borrowed strings in
 * a malloc'ed array. */
const char **lh_registry_names_of(const lh_module_rec *mod, lh_kind kind, size_t *n);

/* Frees a module record and its log (never dlcloses its handle). */
void lh_module_rec_free(lh_module_rec *m);

/* Registration from a plugin (called through the host API table during init). */
lh_status lh_registry_register(lh_module_rec *mod, lh_kind kind, const void *provider,
                               size_t host_struct_size);

#endif
