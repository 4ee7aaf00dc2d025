/* Internal error helpers: one convention everywhere (see llmhost.h). */
#ifndef LH_CORE_ERR_H
#define LH_CORE_ERR_H

#include "llmhost.h"

/* Sets err (may be NULL) to code and a formatted message; returns code. */
lh_status lh_err_set(lh_err *err, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
/* Prepends "context: " to err's message, keeping its code; returns err's code (LH_E_INTERNAL
 * if err is NULL). Builds the context chain: the innermost cause stays last. */
lh_status lh_err_prefix(lh_err *err, const char *fmt, ...) LH_PRINTF(2, 3);
void lh_err_clear(lh_err *err);

#endif
