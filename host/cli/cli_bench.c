/* llmhost bench: prefill and decode throughput of greedy generation over a grid of context
 * lengths x batch sizes, on synthetic prompts.
 *
 * Measures (lh_engine_last_stats, CLOCK_MONOTONIC), per (context C, batch B) cell, after
 * --warmup untimed runs of the same cell:
 *   prefill tok/s = B x C / (time of the one packed prefill step + the first greedy choice)
 *   decode tok/s  = B x (N - 1) / (time of the N - 1 decode steps that follow)
 *   ms/step       = 1000 x (time of the decode steps) / (N - 1)
 * where N is -n (new tokens per sequence). With N = 1 there is no decode step and the decode
 * figures are null (JSON) / "-" (text).
 *
 * On a CUDA device each cell also gets the memory-bandwidth bound of decode: a decode step
 * reads every weight it multiplies by (all of them but an untied embedding table, of which it
 * gathers B rows) and, per sequence, the KV cache of every position it attends to; the
 * sequences of a cell attend to C + 1 ... C + N - 1 positions over the N - 1 steps, C + N/2
 * on average. So
 *   bytes/step  = weight bytes read + B x (C + N/2) x KV bytes per token
 *   bound tok/s = B x bandwidth / bytes/step
 * with the device's theoretical peak bandwidth: no decode can be faster. The CPU has no such
 * figure (its bandwidth is not known to the kernel library), so its rows have none.
 *
 * One engine serves every cell: unless the run config sets them, bench sets max_seq_len to
 * the longest context + N - 1 (the last new token is never fed back) and max_batch_size to
 * the largest batch. Prompts are deterministic pseudo-random ids inside the vocabulary, a fixed
 * hash of (sequence, position), so sequences differ and every run sees the same tokens. */
#include "cli_commands.h"

#include "llmhost.h"

#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_MAX_LIST 64
#define BENCH_MAX_BATCH (1L << 16)
#define BENCH_MAX_CONTEXT ((long)INT32_MAX)
#define BENCH_DEFAULT_STEPS 32
#define BENCH_DEFAULT_WARMUP 1
#define KERNEL_MAX_THREADS 1024 /* the kernel library's cap on "every core" */

static const char bench_help[] =
    "usage: llmhost bench MODEL [--attn-backend NAME] [--context N[,N...]] [--batch B[,B...]]\n"
    "       [-n STEPS] [--warmup W] [--threads N] [--device auto|cpu|cuda[:N]] [--json]\n"
    "       [--config FILE.yaml] [run-config flags, e.g. --set KEY=VALUE]\n"
    "Prefill and decode throughput of greedy generation for every (context, batch) cell: B\n"
    "synthetic prompts of C tokens each (deterministic ids inside the vocabulary, different per\n"
    "sequence) are prefilled in one packed step, then decoded for STEPS new tokens each.\n"
    "  --context N[,N...]   prompt lengths in tokens, each >= 1 (default 128)\n"
    "  --batch B[,B...]     sequences per call, each from 1 to 65536 (default 1)\n"
    "  -n STEPS             new tokens per sequence, >= 1 (default 32): the first comes from the\n"
    "                       prefill, the other STEPS-1 from one decode step each\n"
    "  --warmup W           untimed runs of each cell before the timed one, 0-100 (default 1)\n"
    "  --device D           auto (default: cuda:0 when a CUDA device is usable), cpu, cuda[:N]\n"
    "Reported per cell, from the library's timings (lh_engine_last_stats, CLOCK_MONOTONIC):\n"
    "  prefill tok/s = batch x context / (prefill step + first greedy choice)\n"
    "  decode tok/s  = batch x (STEPS-1) / (the STEPS-1 decode steps)\n"
    "  ms/step       = time of the decode steps / (STEPS-1), in milliseconds\n"
    "(decode figures are '-' / null when STEPS is 1). On a CUDA device two more columns: the\n"
    "memory-bandwidth bound of decode and the share of it reached:\n"
    "  bytes/step  = weight bytes read + batch x (context + STEPS/2) x KV bytes per token (a\n"
"                mixture of experts: the experts B tokens choose, if they choose uniformly)\n"
    "  bound tok/s = batch x peak bandwidth / bytes/step   (an untied embedding is not read)\n"
    "One engine serves every cell; unless the run config sets them, max_seq_len is the longest\n"
    "context + STEPS - 1 and max_batch_size the largest batch. Without --max-seq-len (or\n"
    "max_seq_len in the run config) a context + STEPS - 1 beyond the model's own length is\n"
    "refused.\n"
    "--json prints one object: model, architecture, backend, device (explain's device\n"
    "section), threads, steps, warmup, contexts, batches, max_seq_len, max_batch_size,\n"
    "weight_bytes_per_step, kv_bytes_per_token, and cells: [{context, batch, prefill_tokens,\n"
    "prefill_seconds, prefill_tok_s, decode_steps, decode_tokens, decode_seconds, decode_tok_s,\n"
    "ms_per_step, decode_bytes_per_step, decode_bound_tok_s}] in --context-major order (the\n"
    "last two null off CUDA or without decode steps).\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("llmhost: error [usage]: bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return LH_E_USAGE;
}

static int report(const lh_err *err)
{
    fprintf(stderr, "llmhost: error [%s]: %s\n", lh_status_name(err->code), err->msg);
    return (int)err->code;
}

/* "8,16" -> values in [lo, hi], at most BENCH_MAX_LIST; digits only. Returns 0 or exit 2. */
static int parse_list(const char *flag, const char *text, long lo, long hi, long *vals,
                      size_t *n)
{
    *n = 0;
    const char *p = text;
    for (;;) {
        char *end = (char *)p;
        long v = 0;
        errno = 0;
        if (*p >= '0' && *p <= '9')
            v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ','))
            return usage_error("%s '%s': item %zu is not a whole number (expected a "
                               "comma-separated list such as 8,16)", flag, text, *n + 1);
        if (errno == ERANGE || v < lo || v > hi)
            return usage_error("%s '%s': %.*s is outside [%ld, %ld]", flag, text,
                               (int)(end - p), p, lo, hi);
        if (*n == BENCH_MAX_LIST)
            return usage_error("%s '%s': at most %d values", flag, text, BENCH_MAX_LIST);
        vals[(*n)++] = v;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

static long list_max(const long *v, size_t n)
{
    long m = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] > m)
            m = v[i];
    return m;
}

/* The run config as the library resolved it (explain, no weights): value and origin of a
 * key of run_config. */
static json_int_t rc_value(const json_t *j, const char *key, const char **origin)
{
    const json_t *o = json_object_get(json_object_get(j, "run_config"), key);
    const char *s = json_string_value(json_object_get(o, "origin"));
    *origin = s ? s : "default";
    return json_integer_value(json_object_get(o, "value"));
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static lh_status open_engine(lh_host *h, const lh_cli_args *a, const char *const *ov,
                             lh_engine **e, lh_err *err)
{
    lh_engine_options eo = {.struct_size = sizeof eo, .model = a->model,
                            .config_file = a->config_file, .overrides = ov,
                            .n_threads = a->threads};
    return lh_engine_open(h, &eo, e, err);
}

/* Token id of position i of sequence s: a fixed 64-bit mix, reduced into the vocabulary. */
static int32_t synth_token(int64_t s, int64_t i, int64_t vocab)
{
    uint64_t x = (uint64_t)(s + 1) * 0x9E3779B97F4A7C15u ^ (uint64_t)(i + 1) * 0xC2B2AE3D27D4EB4Fu;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9u;
    x ^= x >> 29;
    return (int32_t)(x % (uint64_t)vocab);
}

typedef struct bench_cell {
    long context, batch;
    lh_generate_stats st;
} bench_cell;

/* What the bandwidth bound needs, from explain; bandwidth_gbs 0 off CUDA. */
typedef struct bench_roofline {
    double bandwidth_gbs;
    double weight_bytes; /* read by one decode step (every routed expert counted) */
    double kv_bytes_per_token;
    double routed_bytes, routed_share; /* MoE: the routed experts' bytes, top_k / n_experts */
} bench_roofline;

static bench_roofline roofline_from_plan(const json_t *plan)
{
    bench_roofline r = {0};
    const json_t *attn = json_object_get(plan, "attention");
    const json_t *dev = json_object_get(attn, "device");
    const json_t *groups = json_object_get(plan, "groups");
    double emb = (double)json_integer_value(
        json_object_get(json_object_get(groups, "embedding"), "bytes"));
    double head = (double)json_integer_value(
        json_object_get(json_object_get(groups, "lm_head"), "bytes"));
    r.weight_bytes = (double)json_integer_value(json_object_get(plan, "weight_bytes"));
    /* an untied embedding is gathered (B rows), not read; a tied one is the output layer */
    if (head > 0 && emb <= r.weight_bytes)
        r.weight_bytes -= emb;
    r.routed_bytes = (double)json_integer_value(json_object_get(plan, "routed_expert_bytes"));
    r.routed_share = json_number_value(json_object_get(plan, "routed_share"));
    r.kv_bytes_per_token = (double)json_integer_value(
        json_object_get(json_object_get(attn, "kv_cache"), "bytes_per_token"));
    const char *kind = json_string_value(json_object_get(dev, "kind"));
    if (kind && strcmp(kind, "cuda") == 0)
        r.bandwidth_gbs = json_number_value(json_object_get(dev, "bandwidth_gbs"));
    return r;
}

/* Bytes one decode step of the cell moves at least, and the tok/s that allows; NAN when there
 * is no bound (no CUDA device, no decode step). */
static void roofline_cell(const bench_roofline *r, const bench_cell *c, int64_t steps,
                          double *bytes, double *bound)
{
    *bytes = *bound = NAN;
    if (!(r->bandwidth_gbs > 0) || steps < 2)
        return;
    /* MoE: a step reads the experts its tokens chose; with B tokens choosing top_k of n
     * independently and uniformly, an expert is read with probability 1 - (1 - k/n)^B */
    const double routed =
        r->routed_bytes * (1.0 - pow(1.0 - r->routed_share, (double)c->batch));
    *bytes = r->weight_bytes - r->routed_bytes + routed +
             (double)c->batch * ((double)c->context + (double)steps / 2.0) * r->kv_bytes_per_token;
    if (*bytes > 0)
        *bound = (double)c->batch * r->bandwidth_gbs * 1e9 / *bytes;
}

static double rate(double n, double secs)
{
    return secs > 0 && n > 0 ? n / secs : NAN;
}

static json_t *num_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* One cell: warmup + the timed call on engine e. Prints the reason of a failure. */
static int run_cell(lh_engine *e, long context, long batch, int64_t steps, long warmup,
                    bench_cell *cell, lh_err *err)
{
    const int64_t vocab = lh_engine_vocab_size(e);
    const size_t n_tok = (size_t)context * (size_t)batch;
    int32_t *tokens = malloc(n_tok * sizeof *tokens);
    int32_t **prompts = malloc((size_t)batch * sizeof *prompts);
    int64_t *lens = malloc((size_t)batch * sizeof *lens);
    int32_t *out = malloc((size_t)batch * (size_t)steps * sizeof *out);
    int rc = 0;
    if (!tokens || !prompts || !lens || !out) {
        fprintf(stderr, "llmhost: error [out-of-memory]: bench: %ld prompts of %ld tokens\n",
                batch, context);
        rc = LH_E_NOMEM;
    }
    for (long s = 0; rc == 0 && s < batch; s++) {
        prompts[s] = tokens + (size_t)s * (size_t)context;
        lens[s] = context;
        for (long i = 0; i < context; i++)
            prompts[s][i] = synth_token(s, i, vocab);
    }
    for (long w = 0; rc == 0 && w <= warmup; w++)
        if (lh_engine_generate_greedy(e, (const int32_t *const *)prompts, lens, batch, steps,
                                      out, err) != LH_OK)
            rc = report(err);
    *cell = (bench_cell){.context = context, .batch = batch};
    cell->st.struct_size = sizeof cell->st;
    if (rc == 0 && lh_engine_last_stats(e, &cell->st, err) != LH_OK)
        rc = report(err);
    free(out);
    free(lens);
    free(prompts);
    free(tokens);
    return rc;
}

static void print_row(const char *backend, long threads, const bench_cell *c,
                      const bench_roofline *r, int64_t steps)
{
    double p = rate((double)c->st.prefill_tokens, c->st.prefill_seconds);
    double d = rate((double)c->st.decode_tokens, c->st.decode_seconds);
    double ms = c->st.decode_steps > 0 ? 1e3 * c->st.decode_seconds / (double)c->st.decode_steps
                                       : NAN;
    char ps[32] = "-", ds[32] = "-", mss[32] = "-";
    if (isfinite(p))
        snprintf(ps, sizeof ps, "%.1f", p);
    if (isfinite(d))
        snprintf(ds, sizeof ds, "%.1f", d);
    if (isfinite(ms))
        snprintf(mss, sizeof mss, "%.3f", ms);
    printf("%-10s %7ld %8ld %6ld %14s %13s %9s", backend, threads, c->context, c->batch, ps, ds,
           mss);
    if (r->bandwidth_gbs > 0) {
        double bytes, bound;
        roofline_cell(r, c, steps, &bytes, &bound);
        char bs[32] = "-", share[32] = "-";
        if (isfinite(bound))
            snprintf(bs, sizeof bs, "%.1f", bound);
        if (isfinite(bound) && isfinite(d))
            snprintf(share, sizeof share, "%.1f%%", 100.0 * d / bound);
        printf(" %12s %9s", bs, share);
    }
    printf("\n");
    fflush(stdout);
}

static json_t *cell_json(const bench_cell *c, const bench_roofline *r, int64_t steps)
{
    const lh_generate_stats *s = &c->st;
    double ms = s->decode_steps > 0 ? 1e3 * s->decode_seconds / (double)s->decode_steps : NAN;
    double bytes, bound;
    roofline_cell(r, c, steps, &bytes, &bound);
    return json_pack("{s:I,s:I,s:I,s:f,s:o,s:I,s:I,s:f,s:o,s:o,s:o,s:o}", "context",
                     (json_int_t)c->context, "batch", (json_int_t)c->batch, "prefill_tokens",
                     (json_int_t)s->prefill_tokens, "prefill_seconds", s->prefill_seconds,
                     "prefill_tok_s",
                     num_or_null(rate((double)s->prefill_tokens, s->prefill_seconds)),
                     "decode_steps", (json_int_t)s->decode_steps, "decode_tokens",
                     (json_int_t)s->decode_tokens, "decode_seconds", s->decode_seconds,
                     "decode_tok_s", num_or_null(rate((double)s->decode_tokens, s->decode_seconds)),
                     "ms_per_step", num_or_null(ms), "decode_bytes_per_step",
                     num_or_null(bytes), "decode_bound_tok_s", num_or_null(bound));
}

/* The line above the table: the device explain decided on, and for CUDA the bound's inputs. */
static void print_device_line(const json_t *d, const bench_roofline *r, int64_t steps)
{
    if (!d)
        return;
    if (strcmp(jstr(d, "kind"), "cuda") == 0) {
        const bool graphs = json_is_true(json_object_get(json_object_get(d, "cuda_graphs"), "on"));
        printf("device: %s %s (compute capability %s, %.0f GB/s peak; kernels %s), cuda graphs "
               "%s; %s\n", jstr(d, "resolved"), jstr(d, "name"), jstr(d, "compute_capability"),
               r->bandwidth_gbs, jstr(d, "kernels"), graphs ? "on" : "off", jstr(d, "reason"));
        printf("decode bound: batch x %.0f GB/s / (%.0f weight bytes + batch x (context + "
               "%lld/2) x %.0f KV bytes per token)\n", r->bandwidth_gbs, r->weight_bytes,
               (long long)steps, r->kv_bytes_per_token);
    } else {
        const char *isa = json_string_value(json_object_get(d, "isa"));
        printf("device: cpu (%s kernels; %s)\n", isa ? isa : "unknown", jstr(d, "reason"));
    }
}

static json_t *list_json(const long *v, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_integer(v[i]));
    return arr;
}

int lh_cli_bench(const lh_cli_args *a)
{
    if (a->help) {
        printf("%s\n%s", bench_help, lh_cli_exit_status_text);
        return 0;
    }
    if (!a->model)
        return usage_error("MODEL (a model directory with config.json and safetensors) is "
                           "required");
    if (a->n_prompts || a->tokens || a->out_file)
        return usage_error("%s is not a bench option (bench makes its own prompts; see "
                           "llmhost bench --help)",
                           a->n_prompts ? "--prompt-tokens" : a->tokens ? "--tokens" : "--out");
    long contexts[BENCH_MAX_LIST], batches[BENCH_MAX_LIST];
    size_t n_ctx = 0, n_batch = 0;
    int rc = parse_list("--context", a->contexts ? a->contexts : "128", 1, BENCH_MAX_CONTEXT,
                        contexts, &n_ctx);
    if (rc == 0)
        rc = parse_list("--batch", a->batches ? a->batches : "1", 1, BENCH_MAX_BATCH, batches,
                        &n_batch);
    if (rc)
        return rc;
    const int64_t steps = a->max_new >= 0 ? a->max_new : BENCH_DEFAULT_STEPS;
    if (steps < 1)
        return usage_error("-n %lld: bench needs at least one new token per sequence",
                           (long long)steps);
    const long warmup = a->warmup >= 0 ? a->warmup : BENCH_DEFAULT_WARMUP;
    const long max_ctx = list_max(contexts, n_ctx), max_batch = list_max(batches, n_batch);
    /* tokens the longest sequence holds: its prompt and every new token but the last */
    const int64_t need = (int64_t)max_ctx + steps - 1;
    long threads = a->threads;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (n < KERNEL_MAX_THREADS ? n : KERNEL_MAX_THREADS) : 1;
    }

    if (a->log_level)
        setenv("LLMHOST_LOG", a->log_level, 1);
    lh_err err = {0};
    if (lh_validate_run_config(a->config_file, (const char *const *)a->overrides, &err) != LH_OK)
        return report(&err);
    lh_host *h = NULL;
    lh_engine *e = NULL;
    json_t *plan = NULL, *out = NULL;
    bench_cell *cells = NULL;
    char *text = NULL;
    if ((rc = lh_cli_open_host(a, &h, &err)) != 0)
        rc = report(&err);
    /* the run config as resolved, and the backend checked, before any weight is touched */
    lh_resolve_request req = {.struct_size = sizeof req, .model = a->model,
                              .config_file = a->config_file,
                              .overrides = (const char *const *)a->overrides};
    if (rc == 0 && lh_host_explain_json(h, &req, &text, &err) != LH_OK)
        rc = report(&err);
    if (rc == 0 && !(plan = json_loads(text, 0, NULL))) {
        fprintf(stderr, "llmhost: error [internal]: bench: explain output is not JSON\n");
        rc = LH_E_INTERNAL;
    }
    const char *seq_origin = "default", *batch_origin = "default";
    json_int_t user_seq = rc == 0 ? rc_value(plan, "max_seq_len", &seq_origin) : 0;
    json_int_t user_batch = rc == 0 ? rc_value(plan, "max_batch_size", &batch_origin) : 0;
    const bool seq_given = strcmp(seq_origin, "default") != 0;
    const bool batch_given = strcmp(batch_origin, "default") != 0;
    const char *ov[LH_CLI_MAX_OVERRIDES + 3] = {0};
    size_t n_ov = 0;
    for (; n_ov < a->n_overrides; n_ov++)
        ov[n_ov] = a->overrides[n_ov];
    char seq_kv[64], batch_kv[64];
    if (rc == 0 && batch_given && max_batch > user_batch)
        rc = usage_error("--batch %ld exceeds max_batch_size %lld (from %s); raise "
                         "--max-batch-size or lower --batch", max_batch, (long long)user_batch,
                         batch_origin);
    if (rc == 0 && seq_given && need > user_seq)
        rc = usage_error("--context %ld with -n %lld needs %lld tokens per sequence (context + "
                         "STEPS - 1), more than max_seq_len %lld (from %s); raise "
                         "--max-seq-len or lower --context / -n",
                         max_ctx, (long long)steps, (long long)need, (long long)user_seq,
                         seq_origin);
    if (rc == 0 && !seq_given) {
        /* the model's own length, as explain resolved it without a max_seq_len setting */
        const json_int_t limit =
            json_integer_value(json_object_get(json_object_get(plan, "attention"), "max_seq_len"));
        if (limit <= 0) {
            fprintf(stderr, "llmhost: error [internal]: bench: explain gave no max_seq_len\n");
            rc = LH_E_INTERNAL;
        } else if (need > limit) {
            rc = usage_error("--context %ld with -n %lld needs %lld tokens per sequence "
                             "(context + STEPS - 1), more than the model's own max_seq_len "
                             "%lld (from its config.json; --max-seq-len N overrides it)",
                             max_ctx, (long long)steps, (long long)need, (long long)limit);
        }
        ov[n_ov] = NULL;
        if (rc == 0) {
            snprintf(seq_kv, sizeof seq_kv, "max-seq-len=%lld", (long long)need);
            ov[n_ov++] = seq_kv;
        }
    }
    if (rc == 0 && !batch_given) {
        snprintf(batch_kv, sizeof batch_kv, "max-batch-size=%ld", max_batch);
        ov[n_ov++] = batch_kv;
    }
    if (rc == 0 && open_engine(h, a, ov, &e, &err) != LH_OK)
        rc = report(&err);
    const json_t *attn = plan ? json_object_get(plan, "attention") : NULL;
    const char *backend = jstr(attn, "normalized");
    const json_t *device = json_object_get(attn, "device");
    const bench_roofline roof = roofline_from_plan(plan);
    /* a CUDA context queues work on its stream: the engine gives it one thread */
    if (strcmp(jstr(device, "kind"), "cuda") == 0)
        threads = 1;
    if (rc == 0 && !(cells = calloc(n_ctx * n_batch, sizeof *cells))) {
        fprintf(stderr, "llmhost: error [out-of-memory]: bench: out of memory\n");
        rc = LH_E_NOMEM;
    }
    if (rc == 0 && !a->json) {
        printf("llmhost bench: %s (%s), attention %s, %lld new token%s per sequence (%lld "
               "decode step%s), %ld warmup run%s per cell\n",
               a->model, jstr(plan, "resolved_architecture"), backend, (long long)steps,
               steps == 1 ? "" : "s", (long long)(steps - 1), steps == 2 ? "" : "s", warmup,
               warmup == 1 ? "" : "s");
        print_device_line(device, &roof, steps);
        printf("%-10s %7s %8s %6s %14s %13s %9s", "backend", "threads", "context", "batch",
               "prefill tok/s", "decode tok/s", "ms/step");
        if (roof.bandwidth_gbs > 0)
            printf(" %12s %9s", "bound tok/s", "of bound");
        printf("\n");
        fflush(stdout);
    }
    size_t done = 0;
    for (size_t c = 0; rc == 0 && c < n_ctx; c++)
        for (size_t b = 0; rc == 0 && b < n_batch; b++) {
            bench_cell *cell = &cells[done];
            if ((rc = run_cell(e, contexts[c], batches[b], steps, warmup, cell, &err)) != 0)
                break;
            done++;
            if (!a->json)
                print_row(backend, threads, cell, &roof, steps);
        }
    if (rc == 0 && a->json) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < done; i++)
            json_array_append_new(arr, cell_json(&cells[i], &roof, steps));
        out = json_pack("{s:s,s:s,s:s,s:O,s:I,s:I,s:I,s:o,s:o,s:I,s:I,s:f,s:f,s:o}", "model",
                        a->model, "architecture", jstr(plan, "resolved_architecture"), "backend",
                        backend, "device", device ? device : json_null(),
                        "threads", (json_int_t)threads, "steps", (json_int_t)steps, "warmup",
                        (json_int_t)warmup, "contexts", list_json(contexts, n_ctx), "batches",
                        list_json(batches, n_batch), "max_seq_len",
                        (json_int_t)lh_engine_max_seq_len(e), "max_batch_size",
                        (json_int_t)lh_engine_max_batch_size(e), "weight_bytes_per_step",
                        roof.weight_bytes, "kv_bytes_per_token", roof.kv_bytes_per_token,
                        "cells", arr);
        char *s = out ? json_dumps(out, JSON_INDENT(2)) : NULL;
        if (!s) {
            fprintf(stderr, "llmhost: error [out-of-memory]: bench: cannot format the JSON\n");
            rc = LH_E_NOMEM;
        } else {
            puts(s);
        }
        free(s);
    }
    json_decref(out);
    free(cells);
    json_decref(plan);
    free(text);
    lh_engine_close(e);
    lh_host_free(h);
    return rc;
}
