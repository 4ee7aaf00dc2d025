/* Internal: a one-line progress bar on a terminal,
 *     loading weights [##########..........]  52% 1.20/2.30 GiB
 * redrawn in place at most ~10 times a second (plus once at 100%). It draws only when
 * enabled: lh_progress_begin enables it when stderr is a terminal and $LLMHOST_NO_PROGRESS is
 * unset; tests use lh_progress_begin_to with their own stream. Nothing is drawn for a total of
 * 0. */
#ifndef LH_WEIGHTS_PROGRESS_H
#define LH_WEIGHTS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct lh_progress {
    FILE *out;
    bool enabled;
    int64_t drawn_done;  /* done at the last draw; -1 before the first */
    const char *label;   /* not copied */
    int64_t total, done;
    double last_draw_s;  /* monotonic seconds of the last draw */
    double min_interval_s;
} lh_progress;

/* On stderr, enabled iff stderr is a terminal and LLMHOST_NO_PROGRESS is unset. */
void lh_progress_begin(lh_progress *p, const char *label, int64_t total);
/* On `out`, enabled as told; min_interval_s < 0 keeps the default 0.1 s. */
void lh_progress_begin_to(lh_progress *p, FILE *out, bool enabled, const char *label,
                          int64_t total, double min_interval_s);
/* Adds `delta` to done; redraws when the interval has passed or done reaches total. */
void lh_progress_add(lh_progress *p, int64_t delta);
/* Draws the final state (when anything was drawn or the bar is enabled) and ends the line. */
void lh_progress_end(lh_progress *p);
/* Formats one line (no '\r', no newline) into buf; returns buf. */
char *lh_progress_format(char *buf, size_t n, const char *label, int64_t done, int64_t total);

#endif
