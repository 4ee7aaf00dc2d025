#include "generate.h"

#include "core/err.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct step_buf {
    int32_t *tokens, *positions;
    int64_t *token_start, *n_new, *ctx_len, *slot, *out_rows;
    lh_tensor logits; /* the decoder's, on its device (valid until its next forward) */
} step_buf;

static void step_buf_free(step_buf *b)
{
    free(b->tokens);
    free(b->positions);
    free(b->token_start);
    free(b->n_new);
    free(b->ctx_len);
    free(b->slot);
    free(b->out_rows);
}

static lh_status step_buf_alloc(step_buf *b, int64_t tokens, int64_t seqs, int64_t out_rows,
                                lh_err *err)
{
    memset(b, 0, sizeof *b);
    b->tokens = malloc((size_t)tokens * sizeof *b->tokens);
    b->positions = malloc((size_t)tokens * sizeof *b->positions);
    b->token_start = malloc((size_t)seqs * sizeof *b->token_start);
    b->n_new = malloc((size_t)seqs * sizeof *b->n_new);
    b->ctx_len = malloc((size_t)seqs * sizeof *b->ctx_len);
    b->slot = malloc((size_t)seqs * sizeof *b->slot);
    b->out_rows = malloc((size_t)out_rows * sizeof *b->out_rows);
    if (!b->tokens || !b->positions || !b->token_start || !b->n_new || !b->ctx_len ||
        !b->slot || !b->out_rows) {
        step_buf_free(b);
        return lh_err_set(err, LH_E_NOMEM, "out of memory for a step of %lld tokens",
                          (long long)tokens);
    }
    return LH_OK;
}

/* Seconds on CLOCK_MONOTONIC (never steps back with the wall clock). */
static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static lh_attn_step make_step(const step_buf *b, int64_t n_tokens, int64_t n_seqs)
{
    lh_attn_step s = {
        .struct_size = sizeof s,
        .n_tokens = n_tokens,
        .n_seqs = n_seqs,
        .positions = b->positions,
        .token_start = b->token_start,
        .n_new = b->n_new,
        .ctx_len = b->ctx_len,
        .slot = b->slot,
    };
    return s;
}

static lh_status check_tokens(const lh_runner *d, const int32_t *t, int64_t n, int64_t seq,
                              lh_err *err)
{
    for (int64_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= lh_runner_vocab(d))
            return lh_err_set(err, LH_E_USAGE, "sequence %lld: token %lld is id %d, outside the "
                              "vocabulary [0, %lld)", (long long)seq, (long long)i, t[i],
                              (long long)lh_runner_vocab(d));
    return LH_OK;
}

/* Greedy choice for every row (the kernel's argmax keeps the first maximum, as torch does,
 * and refuses NaN rows rather than silently skipping them). logits [rows, vocab] on the
 * decoder's device; the ids come back to the host. */
static lh_status pick(lh_kctx *kctx, const lh_tensor *logits, int32_t *ids, lh_err *err)
{
    lh_status st = lh_k_argmax(kctx, logits, ids);
    if (st != LH_OK)
        return lh_err_set(err, LH_E_UNSUPPORTED, "greedy choice: %s", lh_k_last_error(kctx));
    return LH_OK;
}

/* A paged KV pool smaller than the batch's whole need is refused before the first step,
 * not discovered midway (the numbers say how much is missing). */
static lh_status check_pool(const lh_runner *d, const int64_t *lens, int64_t n_seqs,
                            int64_t extra, lh_err *err)
{
    if (!lh_runner_kv(d))
        return LH_OK;
    const lh_kv_plan *p = lh_kv_cache_plan(lh_runner_kv(d));
    int64_t need = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        need += (lens[s] + extra + p->block_size - 1) / p->block_size;
    if (need > lh_kv_cache_free_blocks(lh_runner_kv(d)))
        return lh_err_set(err, LH_E_UNSUPPORTED, "the KV cache cannot hold this request: it "
                          "needs %lld blocks of %lld tokens (%lld sequence%s), the pool has %lld "
                          "free of %lld (sized by %s); raise kv_cache.max_tokens / "
                          "memory_fraction or send fewer tokens", (long long)need,
                          (long long)p->block_size, (long long)n_seqs, n_seqs == 1 ? "" : "s",
                          (long long)lh_kv_cache_free_blocks(lh_runner_kv(d)), (long long)p->num_blocks,
                          p->sized_by);
    return LH_OK;
}

/* The kernel's view of the parameters: temperature 0 means greedy */
static lh_sampling_params kernel_params(const lh_generate_params *p)
{
    lh_sampling_params k = {.struct_size = sizeof k,
                            .temperature = p->do_sample ? p->temperature : 0.0f,
                            .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
                            .repetition_penalty = p->repetition_penalty};
    return k;
}

typedef struct choose_ctx {
    lh_sampling_params kp;
    bool plain_greedy;         /* argmax of the raw logits: the lh_k_argmax path */
    const lh_generate_params *p;
    int32_t **hist;            /* per sequence: prompt + generated */
    const int32_t **hist_rows; /* per row of a step */
    int64_t *hist_len, *row_hist_len;
    uint64_t *stream, *step;
} choose_ctx;

/* Chooses the next id of each of the rows of logits [rows, vocab] (on the decoder's device;
 * seq[i] the sequence of row i), which have generated k tokens so far. */
static lh_status choose(lh_kctx *kctx, choose_ctx *c, const lh_tensor *logits,
                        const int64_t *seq, int64_t k, int32_t *ids, lh_err *err)
{
    const int64_t rows = logits->shape[0];
    if (c->plain_greedy)
        return pick(kctx, logits, ids, err);
    for (int64_t i = 0; i < rows; i++) {
        int64_t s = seq[i];
        c->hist_rows[i] = c->hist[s];
        c->row_hist_len[i] = c->hist_len[s];
        c->stream[i] = c->p->seq_streams ? c->p->seq_streams[s] : (uint64_t)s;
        c->step[i] = (uint64_t)k;
    }
    lh_status st = lh_k_sample(kctx, &c->kp, logits, c->hist_rows, c->row_hist_len,
                               c->p->seed, c->stream, c->step, ids);
    if (st != LH_OK)
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s choice: %s",
                          c->kp.temperature == 0.0f ? "greedy" : "sampled",
                          lh_k_last_error(kctx));
    return LH_OK;
}

static bool is_stop(const lh_generate_params *p, int32_t id)
{
    for (int64_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == id)
            return true;
    return false;
}

/* the struct before the appended callback fields: callers built against it still work */
#define GP_MIN_SIZE offsetof(lh_generate_params, on_step)

/* the callback, or NULL when the caller's struct ends before it */
static bool (*step_callback(const lh_generate_params *p))(void *, int64_t, const int64_t *,
                                                             const int32_t *, int64_t)
{
    if (p->struct_size < offsetof(lh_generate_params, on_step_user) + sizeof p->on_step_user)
        return NULL;
    return p->on_step;
}

/* the caller's finish flags, or NULL when its struct ends before them */
static bool *finish_flags(const lh_generate_params *p)
{
    if (p->struct_size < offsetof(lh_generate_params, finish) + sizeof p->finish)
        return NULL;
    return p->finish;
}

/* After on_step saw rows seq[0..n): the sequences it marked finished end with
 * LH_STOP_CALLBACK (one that just produced a stop id keeps LH_STOP_EOS). */
static void apply_finish(bool *finish, const int64_t *seq, int64_t n, bool *done,
                         lh_stop_reason *stop)
{
    if (!finish)
        return;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = seq[i];
        if (finish[s] && !done[s]) {
            done[s] = true;
            if (stop)
                stop[s] = LH_STOP_CALLBACK;
        }
    }
}

static lh_status check_params(lh_kctx *kctx, const lh_generate_params *p, lh_err *err)
{
    if (!p)
        return lh_err_set(err, LH_E_USAGE, "generate: params is NULL");
    if (p->struct_size < GP_MIN_SIZE)
        return lh_err_set(err, LH_E_USAGE, "generate: params.struct_size %u is smaller than "
                          "%zu (the fields before on_step); set it to "
                          "sizeof(lh_generate_params)", p->struct_size, GP_MIN_SIZE);
    if (p->max_new_tokens < 0)
        return lh_err_set(err, LH_E_USAGE, "generate: max_new_tokens = %lld must be >= 0",
                          (long long)p->max_new_tokens);
    if (p->n_stop_ids < 0 || (p->n_stop_ids > 0 && !p->stop_ids))
        return lh_err_set(err, LH_E_USAGE, "generate: %lld stop_ids%s",
                          (long long)p->n_stop_ids, p->n_stop_ids < 0 ? "" : " but stop_ids is NULL");
    for (int64_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0)
            return lh_err_set(err, LH_E_USAGE, "generate: stop_ids[%lld] = %d is not a token id",
                              (long long)i, p->stop_ids[i]);
    lh_sampling_params kp = kernel_params(p);
    kp.temperature = p->temperature; /* checked even when unused */
    if (lh_k_sampling_check(kctx, &kp) != LH_OK) {
        const char *m = lh_k_last_error(kctx);
        const char *colon = strstr(m, ": ");
        return lh_err_set(err, LH_E_USAGE, "generate: %s", colon ? colon + 2 : m);
    }
    return LH_OK;
}

/* whether lh_engine_cancel asked the call to stop (read at each step boundary) */
static bool cancel_requested(const atomic_bool *cancel)
{
    return cancel && atomic_load_explicit(cancel, memory_order_acquire);
}

lh_status lh_generate(lh_runner *d, lh_kctx *kctx, const lh_generate_params *p,
                      const int32_t *const *prompts, const int64_t *lens, int64_t n_seqs,
                      int32_t *out, int64_t *out_lens, lh_stop_reason *stop,
                      lh_generate_stats *stats, lh_err *err)
{
    return lh_generate_cancellable(d, kctx, p, prompts, lens, n_seqs, out, out_lens, stop,
                                   stats, NULL, err);
}

lh_status lh_generate_cancellable(lh_runner *d, lh_kctx *kctx, const lh_generate_params *p,
                                  const int32_t *const *prompts, const int64_t *lens,
                                  int64_t n_seqs, int32_t *out, int64_t *out_lens,
                                  lh_stop_reason *stop, lh_generate_stats *stats,
                                  const atomic_bool *cancel, lh_err *err)
{
    lh_generate_stats dummy = {0};
    if (!stats)
        stats = &dummy;
    const uint32_t keep = stats->struct_size;
    *stats = (lh_generate_stats){.struct_size = keep};
    lh_status st0 = check_params(kctx, p, err);
    if (st0 != LH_OK)
        return st0;
    if (lh_runner_slots_claimed(d)) /* it would take (and release) a scheduler's slots */
        return lh_err_set(err, LH_E_USAGE, "generate: a scheduler holds the engine's sequence "
                          "slots (lh_scheduler_free it first)");
    const int64_t max_new = p->max_new_tokens;
    if (n_seqs <= 0)
        return lh_err_set(err, LH_E_USAGE, "generate: %lld sequences, %lld new tokens",
                          (long long)n_seqs, (long long)max_new);
    if (n_seqs > lh_runner_max_seqs(d))
        return lh_err_set(err, LH_E_USAGE, "generate: %lld sequences, but max_batch_size is %lld",
                          (long long)n_seqs, (long long)lh_runner_max_seqs(d));
    int64_t total = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        if (lens[s] <= 0)
            return lh_err_set(err, LH_E_USAGE, "generate: sequence %lld has an empty prompt",
                              (long long)s);
        lh_status st = check_tokens(d, prompts[s], lens[s], s, err);
        if (st != LH_OK)
            return st;
        /* refuse up front what would fail max_new steps later */
        /* compared without forming lens + max_new, which could overflow */
        if (max_new - (max_new > 0) > lh_runner_max_seq_len(d) - lens[s])
            return lh_err_set(err, LH_E_USAGE, "generate: sequence %lld needs its prompt of %lld "
                              "tokens + %lld new (the last one is not cached), more than "
                              "max_seq_len %lld (raise --max-seq-len or lower -n)", (long long)s,
                              (long long)lens[s], (long long)max_new, (long long)lh_runner_max_seq_len(d));
        total += lens[s];
    }
    st0 = check_pool(d, lens, n_seqs, max_new - (max_new > 0), err);
    if (st0 != LH_OK)
        return st0;
    bool *finish = finish_flags(p);
    for (int64_t s = 0; s < n_seqs; s++) {
        if (finish)
            finish[s] = false;
        if (out_lens)
            out_lens[s] = 0;
        if (stop)
            stop[s] = LH_STOP_LENGTH;
        for (int64_t k = 0; k < max_new; k++)
            out[s * max_new + k] = -1;
    }
    if (max_new == 0)
        return LH_OK;
    /* a sequence that grows past a RoPE table switch is fed again in full (below), so the
     * step buffers then hold up to every sequence's whole length */
    const int64_t rope_switch = lh_runner_rope_switch_len(d);
    const int64_t cap = rope_switch > 0 ? total + n_seqs * max_new
                                        : (total > n_seqs ? total : n_seqs);
    step_buf b;
    lh_status st = step_buf_alloc(&b, cap, n_seqs, n_seqs, err);
    if (st != LH_OK)
        return st;
    choose_ctx c = {.kp = kernel_params(p), .p = p};
    c.plain_greedy = c.kp.temperature == 0.0f && p->repetition_penalty == 1.0f;
    int64_t *seq = malloc((size_t)n_seqs * sizeof *seq);
    bool *done = calloc((size_t)n_seqs, sizeof *done);
    if (!c.plain_greedy) {
        c.hist = calloc((size_t)n_seqs, sizeof *c.hist);
        c.hist_rows = calloc((size_t)n_seqs, sizeof *c.hist_rows);
        c.hist_len = calloc((size_t)n_seqs, sizeof *c.hist_len);
        c.row_hist_len = calloc((size_t)n_seqs, sizeof *c.row_hist_len);
        c.stream = calloc((size_t)n_seqs, sizeof *c.stream);
        c.step = calloc((size_t)n_seqs, sizeof *c.step);
        bool ok = c.hist && c.hist_rows && c.hist_len && c.row_hist_len && c.stream && c.step;
        for (int64_t s = 0; ok && s < n_seqs; s++) {
            c.hist[s] = malloc((size_t)(lens[s] + max_new) * sizeof **c.hist);
            ok = c.hist[s] != NULL;
            if (ok) {
                memcpy(c.hist[s], prompts[s], (size_t)lens[s] * sizeof **c.hist);
                c.hist_len[s] = lens[s];
            }
        }
        if (!ok)
            st = lh_err_set(err, LH_E_NOMEM, "out of memory for the sampling state");
    }
    if (st == LH_OK && (!seq || !done))
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    /* prefill: every prompt in one packed step */
    int64_t t = 0;
    for (int64_t s = 0; s < n_seqs && st == LH_OK; s++) {
        b.token_start[s] = t;
        b.n_new[s] = lens[s];
        b.ctx_len[s] = 0;
        b.slot[s] = s;
        seq[s] = s;
        for (int64_t i = 0; i < lens[s]; i++, t++) {
            b.tokens[t] = prompts[s][i];
            b.positions[t] = (int32_t)i;
        }
        b.out_rows[s] = t - 1;
    }
    lh_attn_step step = make_step(&b, total, n_seqs);
    double t0 = mono_seconds(), t1 = t0;
    /* tokens each running sequence holds when the generation was cancelled (on_step false
     * or lh_engine_cancel); -1: not cancelled */
    int64_t cancel_at = -1;
    if (st == LH_OK && cancel_requested(cancel))
        cancel_at = 0; /* before the prefill: nothing produced */
    if (st == LH_OK && cancel_at < 0) {
        st = lh_runner_forward_dev(d, kctx, &step, b.tokens, b.out_rows, n_seqs, &b.logits,
                                    err);
        if (st == LH_OK)
            st = choose(kctx, &c, &b.logits, seq, 0, b.tokens, err);
        t1 = mono_seconds();
    }
    if (st == LH_OK && cancel_at < 0) {
        stats->prefill_tokens = total;
        stats->prefill_seconds = t1 - t0;
    }
    /* records row i's new token (sequence seq[i], its k-th) */
#define ACCEPT(i, k)                                                                            \
    do {                                                                                        \
        int64_t s_ = seq[i];                                                                    \
        int32_t id_ = b.tokens[i];                                                              \
        out[s_ * max_new + (k)] = id_;                                                          \
        if (out_lens)                                                                           \
            out_lens[s_] = (k) + 1;                                                             \
        if (c.hist)                                                                             \
            c.hist[s_][c.hist_len[s_]++] = id_;                                                 \
        if (is_stop(p, id_)) {                                                                  \
            done[s_] = true;                                                                    \
            if (stop)                                                                           \
                stop[s_] = LH_STOP_EOS;                                                         \
        }                                                                                       \
    } while (0)
    for (int64_t i = 0; i < n_seqs && st == LH_OK && cancel_at < 0; i++)
        ACCEPT(i, 0);
    bool (*on_step)(void *, int64_t, const int64_t *, const int32_t *, int64_t) =
        step_callback(p);
    if (st == LH_OK && cancel_at < 0 && on_step) {
        if (!on_step(p->on_step_user, 0, seq, b.tokens, n_seqs))
            cancel_at = 1;
        apply_finish(finish, seq, n_seqs, done, stop);
    }
    /* decode: one new token per running sequence per step; the clock runs across the steps
     * (their input assembly included), and what completed is recorded after each one */
    int64_t decoded = 0;
    for (int64_t k = 1; k < max_new && st == LH_OK && cancel_at < 0; k++) {
        if (cancel_requested(cancel)) { /* the step boundary: k tokens each so far */
            cancel_at = k;
            break;
        }
        int64_t n = 0, t = 0;
        for (int64_t s = 0; s < n_seqs; s++) {
            if (done[s])
                continue;
            const int64_t ctx = lens[s] + k - 1;
            b.token_start[n] = t;
            b.slot[n] = s;
            seq[n] = s;
            if (ctx == rope_switch && rope_switch > 0) {
                /* the new token takes the sequence past the switch: its cached keys were
                 * rotated with the other table, so it is computed again from the start
                 * (transformers' Phi-3 drops its cache at this step the same way) */
                lh_runner_release(d, s);
                b.ctx_len[n] = 0;
                b.n_new[n] = ctx + 1;
                for (int64_t i = 0; i <= ctx; i++, t++) {
                    b.tokens[t] = i < lens[s] ? prompts[s][i] : out[s * max_new + i - lens[s]];
                    b.positions[t] = (int32_t)i;
                }
            } else {
                b.ctx_len[n] = ctx;
                b.n_new[n] = 1;
                b.tokens[t] = out[s * max_new + k - 1];
                b.positions[t] = (int32_t)ctx;
                t++;
            }
            b.out_rows[n] = t - 1;
            n++;
        }
        if (n == 0)
            break;
        step = make_step(&b, t, n);
        st = lh_runner_forward_dev(d, kctx, &step, b.tokens, b.out_rows, n, &b.logits, err);
        if (st == LH_OK)
            st = choose(kctx, &c, &b.logits, seq, k, b.tokens, err);
        if (st == LH_OK) {
            double t2 = mono_seconds();
            decoded += n;
            stats->decode_steps = k;
            stats->decode_tokens = decoded;
            stats->decode_seconds = t2 - t1;
        }
        for (int64_t i = 0; i < n && st == LH_OK; i++)
            ACCEPT(i, k);
        if (st == LH_OK && on_step) {
            if (!on_step(p->on_step_user, k, seq, b.tokens, n))
                cancel_at = k + 1;
            apply_finish(finish, seq, n, done, stop);
        }
    }
#undef ACCEPT
    if (st == LH_OK && cancel_at >= 0 && stop)
        for (int64_t s = 0; s < n_seqs; s++)
            if (!done[s] && cancel_at < max_new)
                stop[s] = LH_STOP_CANCELLED;
    for (int64_t s = 0; s < n_seqs; s++)
        lh_runner_release(d, s);
    if (c.hist)
        for (int64_t s = 0; s < n_seqs; s++)
            free(c.hist[s]);
    free(c.hist);
    free(c.hist_rows);
    free(c.hist_len);
    free(c.row_hist_len);
    free(c.stream);
    free(c.step);
    free(seq);
    free(done);
    step_buf_free(&b);
    return st;
}

lh_status lh_generate_greedy(lh_runner *d, lh_kctx *kctx, const int32_t *const *prompts,
                             const int64_t *lens, int64_t n_seqs, int64_t max_new, int32_t *out,
                             lh_generate_stats *stats, lh_err *err)
{
    if (max_new < 0) { /* the old message, before any parameter check */
        if (stats)
            *stats = (lh_generate_stats){.struct_size = stats->struct_size};
        return lh_err_set(err, LH_E_USAGE, "generate: %lld sequences, %lld new tokens",
                          (long long)n_seqs, (long long)max_new);
    }
    lh_generate_params p = {.struct_size = sizeof p, .do_sample = false, .temperature = 1.0f,
                            .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                            .repetition_penalty = 1.0f, .max_new_tokens = max_new};
    return lh_generate(d, kctx, &p, prompts, lens, n_seqs, out, NULL, NULL, stats, err);
}

lh_status lh_sequence_logits(lh_runner *d, lh_kctx *kctx, const int32_t *tokens, int64_t n,
                             float *logits, lh_err *err)
{
    if (n <= 0)
        return lh_err_set(err, LH_E_USAGE, "logits: empty token list");
    if (lh_runner_slots_claimed(d))
        return lh_err_set(err, LH_E_USAGE, "logits: a scheduler holds the engine's sequence "
                          "slots (lh_scheduler_free it first)");
    lh_status st = check_tokens(d, tokens, n, 0, err);
    if (st == LH_OK && n <= lh_runner_max_seq_len(d))
        st = check_pool(d, &n, 1, 0, err);
    if (st != LH_OK)
        return st;
    int32_t *positions = malloc((size_t)n * sizeof *positions);
    int64_t *rows = malloc((size_t)n * sizeof *rows);
    if (!positions || !rows) {
        free(positions);
        free(rows);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        positions[i] = (int32_t)i;
        rows[i] = i;
    }
    int64_t start = 0, ctx = 0, slot = 0;
    lh_attn_step step = {.struct_size = sizeof step, .n_tokens = n, .n_seqs = 1,
                         .positions = positions, .token_start = &start, .n_new = &n,
                         .ctx_len = &ctx, .slot = &slot};
    st = lh_runner_forward(d, kctx, &step, tokens, rows, n, logits, err);
    lh_runner_release(d, 0);
    free(positions);
    free(rows);
    return st;
}
