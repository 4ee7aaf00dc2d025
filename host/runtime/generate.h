/* Internal: greedy generation and full-sequence logits over an lh_runner. */
#ifndef LH_RUNTIME_GENERATE_H
#define LH_RUNTIME_GENERATE_H

#include "runner.h"
#include "llmhost.h"

#include <stdatomic.h>

/* Greedy continuation of n_seqs prompts (lh_generate with do_sample false and no stop ids), all in one packed prefill step and then one packed
 * decode step per new token. out receives max_new ids per sequence, row-major [n_seqs,
 * max_new]. Sequence slots 0..n_seqs-1 are used and released. Errors: LH_E_USAGE (empty
 * prompt, more sequences than slots, token id outside the vocabulary), kernel and attention
 * errors, LH_E_NOMEM.
 * stats (may be NULL) is reset on entry (its struct_size kept) and receives the timings of
 * the phases that ran, as llmhost.h describes for lh_engine_last_stats (CLOCK_MONOTONIC). */
lh_status lh_generate_greedy(lh_runner *d, lh_kctx *kctx, const int32_t *const *prompts,
                             const int64_t *lens, int64_t n_seqs, int64_t max_new, int32_t *out,
                             lh_generate_stats *stats, lh_err *err);

/* Generation with the parameters llmhost.h describes for lh_engine_generate: one packed
 * prefill step, then one packed decode step per new token over the sequences still running
 * (a sequence that produced a stop id leaves the batch). out [n_seqs, max_new_tokens]
 * (unused tail -1); out_lens and stop may be NULL. Greedy without a repetition penalty takes
 * lh_k_argmax (the lh_generate_greedy path, bit for bit); otherwise lh_k_sample with the
 * step k (0 for the first new token) and the sequence's stream. p->on_step (read only when
 * p->struct_size covers it; struct sizes down to offsetof(on_step) are accepted) is called
 * after each step's tokens are recorded; false from it ends the generation there
 * (LH_STOP_CANCELLED for the sequences still short of max_new_tokens); p->finish (read only
 * when struct_size covers it) is cleared on entry, and a sequence whose flag on_step set
 * leaves the batch with LH_STOP_CALLBACK (LH_STOP_EOS wins on a stop id). Errors: as
 * lh_generate_greedy, plus LH_E_USAGE for the parameters. */
lh_status lh_generate(lh_runner *d, lh_kctx *kctx, const lh_generate_params *p,
                      const int32_t *const *prompts, const int64_t *lens, int64_t n_seqs,
                      int32_t *out, int64_t *out_lens, lh_stop_reason *stop,
                      lh_generate_stats *stats, lh_err *err);

/* lh_generate that also stops at the next step boundary once *cancel (may be NULL) reads
 * true: it is read before the prefill and before every decode step, from any thread's store
 * (lh_engine_cancel); the sequences still running then end with LH_STOP_CANCELLED and keep
 * the tokens produced so far, and the call returns LH_OK, exactly as when on_step returns
 * false. The flag is only read, never cleared. */
lh_status lh_generate_cancellable(lh_runner *d, lh_kctx *kctx, const lh_generate_params *p,
                                  const int32_t *const *prompts, const int64_t *lens,
                                  int64_t n_seqs, int32_t *out, int64_t *out_lens,
                                  lh_stop_reason *stop, lh_generate_stats *stats,
                                  const atomic_bool *cancel, lh_err *err);

/* Logits of every position of one sequence, [n, vocab] row-major, in one prefill step
 * (slot 0, released afterwards). */
lh_status lh_sequence_logits(lh_runner *d, lh_kctx *kctx, const int32_t *tokens, int64_t n,
                             float *logits, lh_err *err);

#endif
