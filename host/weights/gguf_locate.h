/* Internal: whether a model path names a GGUF source, and which file.
 *
 * A model path is a GGUF source when it is
 *   - a regular file that starts with the GGUF magic ("GGUF"), whatever its name, or
 *   - a directory without config.json that holds exactly one "*.gguf" file (a directory with
 *     config.json is a Hugging Face model directory, whatever else it holds).
 * Everything else (a Hugging Face directory, a config.json, a missing path) is not a GGUF
 * source: *gguf_file is NULL and the caller goes on as for a Hugging Face model, which reports
 * a missing path itself.
 *
 * lh_gguf_locate: LH_OK with *gguf_file a malloc'ed path (caller frees) or NULL. Errors:
 * LH_E_CONFIG for a directory without config.json holding several *.gguf files (naming them;
 * split GGUF files "-00001-of-0000N.gguf" are named as not supported), LH_E_NOMEM. */
#ifndef LH_WEIGHTS_GGUF_LOCATE_H
#define LH_WEIGHTS_GGUF_LOCATE_H

#include "llmhost.h"

lh_status lh_gguf_locate(const char *path, char **gguf_file, lh_err *err);

#endif
