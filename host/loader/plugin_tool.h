/* `llmhost plugin check` and `llmhost plugin index`: the logic, inside libllmhost (the CLI
 * renders the report). Exported for the CLI only; not part of the public API (llmhost.h) and
 * not stable. Every plugin is loaded in a child process (loader/plugin_probe.h). */
#ifndef LH_LOADER_PLUGIN_TOOL_H
#define LH_LOADER_PLUGIN_TOOL_H

#include "llmhost.h"

#include <jansson.h>

/* Checks a plugin file, or every plugin of a directory together with the directory's
 * arch_index.tsv (both directions, rows naming missing files) and the directory's own
 * permissions. *report (the caller's reference) describes everything; see docs/commands.md
 * "plugin check" for its fields. Returns LH_OK, or the class of the first problem in the report's
 * "problems" (also set in err). When the path cannot be checked at all (missing, unreadable)
 * *report is NULL and err says why. timeout_s <= 0: the default (10 s per plugin). */
LH_EXPORT lh_status lh_plugin_tool_check(const char *path, bool allow_insecure,
                                         double timeout_s, json_t **report, lh_err *err);

/* Writes DIR/arch_index.tsv from what the plugins in dir register (lh_index_regenerate).
 * *written (malloc'ed, may be NULL) gets the file's path, *n_rows its row count. On any
 * error nothing is written and an existing index stays as it was. */
LH_EXPORT lh_status lh_plugin_tool_index(const char *dir, bool allow_insecure, double timeout_s,
                                         char **written, size_t *n_rows, lh_err *err);

#endif
