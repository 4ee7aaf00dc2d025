#include "generate.h"

#include "core/err.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct step_buf {
    int32_t *tokens, *positions;
    int64_t *token_start, *n_new, *ctx_len, *slot, *out_rows;
    float *logits;
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
    free(b->logits);
}

static lh_status step_buf_alloc(step_buf *b, int64_t tokens, int64_t seqs, int64_t out_rows,
                                int64_t vocab, lh_err *err)
{
    memset(b, 0, sizeof *b);
    b->tokens = malloc((size_t)tokens * sizeof *b->tokens);
    b->positions = malloc((size_t)tokens * sizeof *b->positions);
    b->token_start = malloc((size_t)seqs * sizeof *b->token_start);
    b->n_new = malloc((size_t)seqs * sizeof *b->n_new);
    b->ctx_len = malloc((size_t)seqs * sizeof *b->ctx_len);
    b->slot = malloc((size_t)seqs * sizeof *b->slot);
    b->out_rows = malloc((size_t)out_rows * sizeof *b->out_rows);
    b->logits = malloc((size_t)out_rows * (size_t)vocab * sizeof *b->logits);
    if (!b->tokens || !b->positions || !b->token_start || !b->n_new || !b->ctx_len ||
        !b->slot || !b->out_rows || !b->logits) {
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

static lh_status check_tokens(const lh_decoder *d, const int32_t *t, int64_t n, int64_t seq,
                              lh_err *err)
{
    for (int64_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= d->vocab)
            return lh_err_set(err, LH_E_USAGE, "sequence %lld: token %lld is id %d, outside the "
                              "vocabulary [0, %lld)", (long long)seq, (long long)i, t[i],
                              (long long)d->vocab);
    return LH_OK;
}

/* Greedy choice for every row (the kernel's argmax keeps the first maximum, as torch does,
 * and refuses NaN rows rather than silently skipping them). */
static lh_status pick(lh_decoder *d, lh_kctx *kctx, const float *logits, int64_t rows,
                      int32_t *ids, lh_err *err)
{
    int64_t shape[2] = {rows, d->vocab};
    lh_tensor t = lh_tensor_cpu(LH_DTYPE_F32, (void *)logits, 2, shape);
    lh_status st = lh_k_argmax(kctx, &t, ids);
    if (st != LH_OK)
        return lh_err_set(err, LH_E_UNSUPPORTED, "greedy choice: %s", lh_k_last_error(kctx));
    return LH_OK;
}

/* A paged KV pool smaller than the batch's whole need is refused before the first step,
 * not discovered midway (the numbers say how much is missing). */
static lh_status check_pool(const lh_decoder *d, const int64_t *lens, int64_t n_seqs,
                            int64_t extra, lh_err *err)
{
    if (!d->kv)
        return LH_OK;
    const lh_kv_plan *p = lh_kv_cache_plan(d->kv);
    int64_t need = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        need += (lens[s] + extra + p->block_size - 1) / p->block_size;
    if (need > lh_kv_cache_free_blocks(d->kv))
        return lh_err_set(err, LH_E_UNSUPPORTED, "the KV cache cannot hold this request: it "
                          "needs %lld blocks of %lld tokens (%lld sequence%s), the pool has %lld "
                          "free of %lld (sized by %s); raise kv_cache.max_tokens / "
                          "memory_fraction or send fewer tokens", (long long)need,
                          (long long)p->block_size, (long long)n_seqs, n_seqs == 1 ? "" : "s",
                          (long long)lh_kv_cache_free_blocks(d->kv), (long long)p->num_blocks,
                          p->sized_by);
    return LH_OK;
}

lh_status lh_generate_greedy(lh_decoder *d, lh_kctx *kctx, const int32_t *const *prompts,
                             const int64_t *lens, int64_t n_seqs, int64_t max_new, int32_t *out,
                             lh_generate_stats *stats, lh_err *err)
{
    lh_generate_stats dummy = {0};
    if (!stats)
        stats = &dummy;
    const uint32_t keep = stats->struct_size;
    *stats = (lh_generate_stats){.struct_size = keep};
    if (n_seqs <= 0 || max_new < 0)
        return lh_err_set(err, LH_E_USAGE, "generate: %lld sequences, %lld new tokens",
                          (long long)n_seqs, (long long)max_new);
    if (n_seqs > d->max_seqs)
        return lh_err_set(err, LH_E_USAGE, "generate: %lld sequences, but max_batch_size is %lld",
                          (long long)n_seqs, (long long)d->max_seqs);
    int64_t total = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        if (lens[s] <= 0)
            return lh_err_set(err, LH_E_USAGE, "generate: sequence %lld has an empty prompt",
                              (long long)s);
        lh_status st = check_tokens(d, prompts[s], lens[s], s, err);
        if (st != LH_OK)
            return st;
        /* refuse up front what would fail max_new steps later */
        if (lens[s] + max_new - (max_new > 0) > d->max_seq_len)
            return lh_err_set(err, LH_E_USAGE, "generate: sequence %lld needs %lld tokens (prompt "
                              "%lld + %lld new), more than max_seq_len %lld (raise --max-seq-len "
                              "or lower -n)", (long long)s,
                              (long long)(lens[s] + max_new - (max_new > 0)), (long long)lens[s],
                              (long long)max_new, (long long)d->max_seq_len);
        total += lens[s];
    }
    lh_status st0 = check_pool(d, lens, n_seqs, max_new - (max_new > 0), err);
    if (st0 != LH_OK)
        return st0;
    if (max_new == 0)
        return LH_OK;
    step_buf b;
    lh_status st = step_buf_alloc(&b, total > n_seqs ? total : n_seqs, n_seqs, n_seqs, d->vocab,
                                  err);
    if (st != LH_OK)
        return st;
    /* prefill: every prompt in one packed step */
    int64_t t = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        b.token_start[s] = t;
        b.n_new[s] = lens[s];
        b.ctx_len[s] = 0;
        b.slot[s] = s;
        for (int64_t i = 0; i < lens[s]; i++, t++) {
            b.tokens[t] = prompts[s][i];
            b.positions[t] = (int32_t)i;
        }
        b.out_rows[s] = t - 1;
    }
    lh_attn_step step = make_step(&b, total, n_seqs);
    double t0 = mono_seconds();
    st = lh_decoder_forward(d, kctx, &step, b.tokens, b.out_rows, n_seqs, b.logits, err);
    if (st == LH_OK)
        st = pick(d, kctx, b.logits, n_seqs, b.tokens, err);
    double t1 = mono_seconds();
    if (st == LH_OK) {
        stats->prefill_tokens = total;
        stats->prefill_seconds = t1 - t0;
    }
    for (int64_t s = 0; s < n_seqs && st == LH_OK; s++)
        out[s * max_new] = b.tokens[s];
    /* decode: one new token per sequence per step; the clock runs across the steps (their
     * input assembly included), and what completed is recorded after each one */
    for (int64_t k = 1; k < max_new && st == LH_OK; k++) {
        for (int64_t s = 0; s < n_seqs; s++) {
            b.token_start[s] = s;
            b.n_new[s] = 1;
            b.ctx_len[s] = lens[s] + k - 1;
            b.tokens[s] = out[s * max_new + k - 1];
            b.positions[s] = (int32_t)b.ctx_len[s];
            b.out_rows[s] = s;
        }
        step = make_step(&b, n_seqs, n_seqs);
        st = lh_decoder_forward(d, kctx, &step, b.tokens, b.out_rows, n_seqs, b.logits, err);
        if (st == LH_OK)
            st = pick(d, kctx, b.logits, n_seqs, b.tokens, err);
        if (st == LH_OK) {
            double t2 = mono_seconds();
            stats->decode_steps = k;
            stats->decode_tokens = k * n_seqs;
            stats->decode_seconds = t2 - t1;
        }
        for (int64_t s = 0; s < n_seqs && st == LH_OK; s++)
            out[s * max_new + k] = b.tokens[s];
    }
    for (int64_t s = 0; s < n_seqs; s++)
        lh_decoder_release(d, s);
    step_buf_free(&b);
    return st;
}

lh_status lh_sequence_logits(lh_decoder *d, lh_kctx *kctx, const int32_t *tokens, int64_t n,
                             float *logits, lh_err *err)
{
    if (n <= 0)
        return lh_err_set(err, LH_E_USAGE, "logits: empty token list");
    lh_status st = check_tokens(d, tokens, n, 0, err);
    if (st == LH_OK && n <= d->max_seq_len)
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
    st = lh_decoder_forward(d, kctx, &step, tokens, rows, n, logits, err);
    lh_decoder_release(d, 0);
    free(positions);
    free(rows);
    return st;
}
