#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static lh_log_level current_level = LH_LOG_WARN;
static lh_log_sink_fn sink_fn;
static void *sink_user;

/* warn-once keys: a small growable set; keys are few (one per distinct condition). */
static char **once_keys;
static size_t once_count, once_cap;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void read_env_level(void)
{
    const char *v = getenv("LLMHOST_LOG");
    if (!v || !*v)
        return;
    for (int i = 0; i <= LH_LOG_DEBUG; i++)
        if (strcasecmp(v, level_names[i]) == 0) {
            current_level = (lh_log_level)i;
            return;
        }
    if (strcasecmp(v, "warning") == 0)
        current_level = LH_LOG_WARN;
    else
        fprintf(stderr, "llmhost: warn: LLMHOST_LOG=%s is not one of error, warn, info, debug; "
                        "using warn\n", v);
}

void lh_log_set_level(lh_log_level level)
{
    pthread_once(&level_once, read_env_level);
    current_level = level;
}

lh_log_level lh_log_get_level(void)
{
    pthread_once(&level_once, read_env_level);
    return current_level;
}

void lh_log_set_sink(lh_log_sink_fn fn, void *user)
{
    pthread_mutex_lock(&log_lock);
    sink_fn = fn;
    sink_user = user;
    pthread_mutex_unlock(&log_lock);
}

void lh_logv(lh_log_level level, const char *fmt, va_list ap)
{
    if (level > lh_log_get_level() && !sink_fn)
        return;
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    pthread_mutex_lock(&log_lock);
    if (sink_fn)
        sink_fn(level, buf, sink_user);
    if (level <= current_level)
        fprintf(stderr, "llmhost: %s: %s\n", level_names[level], buf);
    pthread_mutex_unlock(&log_lock);
}

void lh_log(lh_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lh_logv(level, fmt, ap);
    va_end(ap);
}

static bool once_first_time(const char *key)
{
    bool first = true;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < once_count; i++)
        if (strcmp(once_keys[i], key) == 0) {
            first = false;
            break;
        }
    if (first) {
        if (once_count == once_cap) {
            size_t cap = once_cap ? once_cap * 2 : 16;
            char **grown = realloc(once_keys, cap * sizeof *grown);
            if (grown) {
                once_keys = grown;
                once_cap = cap;
            }
        }
        char *copy = once_count < once_cap ? strdup(key) : NULL;
        if (copy)
            once_keys[once_count++] = copy;
    }
    pthread_mutex_unlock(&log_lock);
    return first;
}

void lh_log_once(const char *key, lh_log_level level, const char *fmt, ...)
{
    if (!once_first_time(key))
        return;
    va_list ap;
    va_start(ap, fmt);
    lh_logv(level, fmt, ap);
    va_end(ap);
}
