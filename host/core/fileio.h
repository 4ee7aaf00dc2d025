/* Internal: reading a whole text file, with the checks every config-like reader wants. */
#ifndef LH_CORE_FILEIO_H
#define LH_CORE_FILEIO_H

#include "llmhost.h"

/* Reads `path` into a malloc'ed NUL-terminated buffer (*len excludes the NUL).
 * Errors: LH_E_IO (cannot open or read; message names the path and errno text),
 * `too_big_code` when the file exceeds max_bytes or contains a NUL byte (a text format's
 * parse-error class), LH_E_NOMEM. `what` names the kind of file in messages ("arch index"). */
lh_status lh_read_text_file(const char *path, const char *what, size_t max_bytes,
                            lh_status too_big_code, char **text, size_t *len, lh_err *err);

#endif
