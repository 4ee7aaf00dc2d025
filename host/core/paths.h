/* Internal: file-system paths: where the built-in plugins are, canonical comparison. */
#ifndef LH_CORE_PATHS_H
#define LH_CORE_PATHS_H

#include "llmhost.h"

/* The built-in plugin directory: $LLMHOST_PLUGIN_DIR if set, else relative to the file that
 * holds libllmhost's code: <its dir>/llmhost/plugins (installed) or <its dir>/../plugins
 * (build tree), whichever holds an arch_index.tsv. Returns a malloc'ed canonical path.
 * Errors: LH_E_IO naming every candidate tried. */
lh_status lh_find_builtin_plugin_dir(char **out, lh_err *err);
/* malloc'ed "dir/name". NULL on allocation failure. */
char *lh_path_join(const char *dir, const char *name);
/* true when a and b name the same directory, comparing whole canonical paths (so "plugins"
 * and "plugins_custom" differ). Either may not exist: then they are equal only if identical
 * after lexical normalisation. */
bool lh_same_dir(const char *a, const char *b);
/* Canonical directory containing `file` (realpath of its parent); malloc'ed, NULL on error. */
char *lh_parent_dir(const char *file);

#endif
