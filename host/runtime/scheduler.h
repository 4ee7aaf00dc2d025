/* Internal: the continuous-batching scheduler over an lh_runner (llmhost.h describes its
 * behaviour, threads and errors, lh_scheduler_*; scheduler.c implements them). */
#ifndef LH_RUNTIME_SCHEDULER_H
#define LH_RUNTIME_SCHEDULER_H

#include "llmhost.h"
#include "runner.h"

/* The scheduler of llmhost.h over runner d on kctx (both borrowed, outliving it), feeding at
 * most token_budget tokens per step (0: 64 per slot, at least 512), prefix caching as
 * lh_scheduler_options.prefix_caching says. The other functions are llmhost.h's
 * lh_scheduler_*. Errors: as lh_scheduler_create. */
lh_status lh_scheduler_create_on(lh_runner *d, lh_kctx *kctx, int64_t token_budget,
                                 int prefix_caching, lh_scheduler **out, lh_err *err);

#endif
