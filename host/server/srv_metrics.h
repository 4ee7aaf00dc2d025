/* GET /metrics: the scheduler's metrics in the Prometheus text exposition format (0.0.4). */
#ifndef LH_SRV_METRICS_H
#define LH_SRV_METRICS_H

#include "llmhost.h"

#include <stdint.h>

/* What the HTTP side counts itself. */
typedef struct lh_srv_http_counts {
    int64_t requests_ok, requests_error; /* completions answered, refused or failed */
    int64_t disconnects;                 /* requests whose client went away */
} lh_srv_http_counts;

/* The exposition text, malloc'ed (the caller frees it); NULL when out of memory. */
char *lh_srv_metrics_text(const lh_scheduler_metrics *m, const lh_srv_http_counts *h);

#endif
