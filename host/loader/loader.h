/* Internal: loading one plugin file into a module record.
 *
 * Steps, each with its own error class: stat (LH_E_MODULE_MISSING: glibc reports a missing
 * module and a missing dependency with the same text, so existence is checked first), the
 * permission checks (LH_E_INSECURE), dlopen with RTLD_NOW | RTLD_LOCAL (LH_E_LOAD, dlerror
 * verbatim), the entry symbol and descriptor (LH_E_NOT_PLUGIN), the ABI version (LH_E_ABI,
 * both versions shown) — all before any plugin code but the constant entry function runs —
 * then init (LH_E_INIT with the plugin's own message). A plugin that loaded is never
 * dlclosed. */
#ifndef LH_LOADER_LOADER_H
#define LH_LOADER_LOADER_H

#include "registry/registry.h"

/* Fills rec (already holding path, file_name, dir, builtin). On failure rec->state is
 * LH_MOD_STATE_FAILED with fail_code/fail_msg set (the memo) and the same is returned in err.
 * On success the registration log holds what init registered. */
lh_status lh_loader_load(lh_module_rec *rec, bool allow_insecure, unsigned *dlopen_calls,
                         lh_err *err);

/* Security checks of DESIGN §5.8 for a plugin file: regular file, not group- or
 * world-writable, owned by root or the effective user. LH_E_INSECURE with the reason. */
lh_status lh_security_check_file(const char *path, lh_err *err);
/* A custom module dir: absolute, a directory, not group- or world-writable, owned by root
 * or the effective user. */
lh_status lh_security_check_dir(const char *path, lh_err *err);

#endif
