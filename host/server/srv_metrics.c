#include "srv_metrics.h"

#include "core/strbuf.h"

#include <math.h>

static void metric(lh_strbuf *b, const char *name, const char *type, const char *help,
                   int64_t value)
{
    lh_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name,
                     (long long)value);
}

static void histogram(lh_strbuf *b, const char *name, const char *help,
                      const int64_t *buckets, int64_t count, double sum)
{
    static const double bounds[LH_LATENCY_BUCKETS] = LH_LATENCY_BOUNDS_INIT;
    lh_strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < LH_LATENCY_BUCKETS; i++) {
        if (i == LH_LATENCY_BUCKETS - 1 || isinf(bounds[i]) || bounds[i] > 1e299)
            lh_strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %lld\n", name, (long long)count);
        else
            lh_strbuf_printf(b, "%s_bucket{le=\"%g\"} %lld\n", name, bounds[i],
                             (long long)buckets[i]);
    }
    lh_strbuf_printf(b, "%s_sum %.9g\n%s_count %lld\n", name, sum, name, (long long)count);
}

char *lh_srv_metrics_text(const lh_scheduler_metrics *m, const lh_srv_http_counts *h)
{
    lh_strbuf b = {0};
    metric(&b, "llmhost_requests_running", "gauge", "Requests holding a sequence slot.",
           m->running);
    metric(&b, "llmhost_requests_waiting", "gauge", "Requests waiting for a sequence slot.",
           m->waiting);
    metric(&b, "llmhost_kv_blocks_used", "gauge", "KV-cache blocks in use (the paged pool).",
           m->kv_blocks_used);
    metric(&b, "llmhost_kv_blocks_total", "gauge", "KV-cache blocks of the paged pool.",
           m->kv_blocks_total);
    metric(&b, "llmhost_requests_total", "counter", "Requests submitted to the scheduler.",
           m->submitted);
    metric(&b, "llmhost_requests_finished_total", "counter", "Requests that ended.",
           m->finished);
    metric(&b, "llmhost_requests_preempted_total", "counter",
           "Preemptions for KV blocks (the request is recomputed later).", m->preempted);
    metric(&b, "llmhost_engine_steps_total", "counter", "Engine steps run.", m->steps);
    metric(&b, "llmhost_prompt_tokens_total", "counter",
           "Prompt tokens computed (recomputation after preemption included).",
           m->prompt_tokens);
    metric(&b, "llmhost_generation_tokens_total", "counter", "Tokens generated.",
           m->generated_tokens);
    metric(&b, "llmhost_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens taken from the prefix cache instead of computed.",
           m->prefix_cached_tokens);
    metric(&b, "llmhost_http_requests_ok_total", "counter",
           "Completion requests answered with status 200.", h->requests_ok);
    metric(&b, "llmhost_http_requests_error_total", "counter",
           "Completion requests answered with an error status.", h->requests_error);
    metric(&b, "llmhost_http_disconnects_total", "counter",
           "Requests cancelled because their client went away.", h->disconnects);
    histogram(&b, "llmhost_time_to_first_token_seconds",
              "From submission to the step that chose the first token.", m->ttft_buckets,
              m->ttft_count, m->ttft_sum);
    histogram(&b, "llmhost_inter_token_latency_seconds",
              "Between consecutive tokens of a request.", m->itl_buckets, m->itl_count,
              m->itl_sum);
    if (!lh_strbuf_ok(&b)) {
        lh_strbuf_free(&b);
        return NULL;
    }
    return lh_strbuf_take(&b);
}
