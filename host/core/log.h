/* Internal: the one host logger. Level from $LLMHOST_LOG (error|warn|info|debug, default warn),
 * or lh_log_set_level. Messages go to stderr as "llmhost: <level>: <message>". */
#ifndef LH_CORE_LOG_H
#define LH_CORE_LOG_H

#include "lh_types.h"
#include <stdarg.h>

void lh_log(lh_log_level level, const char *fmt, ...) LH_PRINTF(2, 3);
void lh_logv(lh_log_level level, const char *fmt, va_list ap);
/* Logs only the first time `key` is seen in this process (thread-safe). */
void lh_log_once(const char *key, lh_log_level level, const char *fmt, ...) LH_PRINTF(3, 4);
void lh_log_set_level(lh_log_level level);
lh_log_level lh_log_get_level(void);
/* Tests: capture every formatted message into a callback instead of stderr (NULL restores). */
typedef void (*lh_log_sink_fn)(lh_log_level level, const char *msg, void *user);
void lh_log_set_sink(lh_log_sink_fn fn, void *user);

#endif
