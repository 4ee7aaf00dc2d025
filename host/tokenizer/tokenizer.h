/* Internal: the tokenizer, read from a Hugging Face tokenizer.json, giving the same ids as the
 * `tokenizers` library (tests/tokenizer compares every case of tests/fixtures/tokenizers).
 *
 * Supported components (anything else is LH_E_UNSUPPORTED naming the type and its JSON path):
 *   model           BPE: vocab, merges ("a b" strings or [a, b] pairs), byte_fallback,
 *                   unk_token (+ fuse_unk), ignore_merges; continuing_subword_prefix and
 *                   end_of_word_suffix only when null or empty; dropout only null or 0
 *   normalizer      Sequence, Prepend, Replace (String or Regex pattern), NFC, NFD, NFKC,
 *                   NFKD (utf8proc: exact for characters assigned in its Unicode version)
 *   pre_tokenizer   Sequence, ByteLevel (add_prefix_space, use_regex), Split (String or Regex
 *                   pattern, every behavior, invert), Digits (individual_digits), Metaspace
 *                   (replacement, prepend_scheme always/first/never, split)
 *   added_tokens    special and normal, matched (leftmost, longest) on the raw text before the
 *                   normalizer and the model; lstrip, rstrip and single_word must be false, and
 *                   normalized true only when there is no normalizer
 *   post_processor  TemplateProcessing (single template), ByteLevel (no effect on ids), Sequence
 *   decoder         ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence; none:
 *                   tokens joined by " "
 *   truncation and padding must be null.
 * Regexes (Split, Replace) are compiled with PCRE2 (UTF, UCP, JIT when available).
 *
 * Errors: LH_E_IO (the file cannot be read), LH_E_CONFIG (malformed JSON with line:column, or a
 * wrong type / missing key / inconsistent value, with its JSON path), LH_E_UNSUPPORTED (a
 * component or option this build does not implement, with its JSON path), LH_E_NOMEM.
 *
 * Ownership: an lh_tokenizer is immutable after loading; encode and decode may run on it from
 * several threads at once. Every array or string these functions return is malloc'ed and
 * belongs to the caller (free()). */
#ifndef LH_TOKENIZER_TOKENIZER_H
#define LH_TOKENIZER_TOKENIZER_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lh_tokenizer lh_tokenizer;

/* Loads path (a tokenizer.json). On error *out is NULL. */
lh_status lh_tokenizer_load(const char *path, lh_tokenizer **out, lh_err *err);
/* The same from JSON text in memory; origin names it in messages (e.g. a path). */
lh_status lh_tokenizer_load_json(const char *text, size_t len, const char *origin,
                                 lh_tokenizer **out, lh_err *err);
void lh_tokenizer_free(lh_tokenizer *t);

/* One more than the largest id (model vocab and added tokens). */
int32_t lh_tokenizer_vocab_size(const lh_tokenizer *t);
/* The id of a token string (model vocab or added token), or -1. */
int32_t lh_tokenizer_token_to_id(const lh_tokenizer *t, const char *token);
/* The token string of an id (owned by the tokenizer), or NULL when no token has that id. */
const char *lh_tokenizer_id_to_token(const lh_tokenizer *t, int32_t id);
/* Whether id is an added token marked special. */
bool lh_tokenizer_is_special(const lh_tokenizer *t, int32_t id);

/* Encodes len bytes of UTF-8 text. add_special_tokens applies the post-processor (e.g. a BOS
 * token). *ids (malloc'ed, may be NULL when *n_ids is 0) receives the ids.
 * Errors: LH_E_USAGE (text is not valid UTF-8, with the byte offset), LH_E_NOMEM. */
lh_status lh_tokenizer_encode(const lh_tokenizer *t, const char *text, size_t len,
                              bool add_special_tokens, int32_t **ids, size_t *n_ids, lh_err *err);

/* Decodes ids through the decoder into a NUL-terminated UTF-8 string (*text, malloc'ed; *len
 * its length without the NUL). Invalid byte sequences (e.g. a lone byte-fallback token) come
 * out as U+FFFD, as in `tokenizers`. skip_special_tokens drops special added tokens.
 * Errors: LH_E_USAGE (an id no token has, named), LH_E_NOMEM. */
lh_status lh_tokenizer_decode(const lh_tokenizer *t, const int32_t *ids, size_t n_ids,
                              bool skip_special_tokens, char **text, size_t *len, lh_err *err);

/* Incremental decoding for streaming. Each step adds one id and returns the text it completes;
 * text that ends in an incomplete UTF-8 sequence (decoded as a trailing U+FFFD) is held back
 * until a later id completes it or lh_detok_stream_finish releases it. Every chunk is valid
 * UTF-8, and the chunks of all steps plus finish concatenate to lh_tokenizer_decode of all ids,
 * with one exception: byte-fallback bytes that never complete a character (the stream ends
 * first) decode as a group in `tokenizers`, which can turn an earlier, already returned
 * character of the same group into U+FFFD; finish then returns the held ids decoded alone.
 * The stream keeps a reference to t (t must outlive it) and re-decodes the ids it holds at each
 * step (cost grows with the length of the stream). */
typedef struct lh_detok_stream lh_detok_stream;

lh_status lh_detok_stream_create(const lh_tokenizer *t, bool skip_special_tokens,
                                 lh_detok_stream **out, lh_err *err);
/* *chunk: malloc'ed, NUL-terminated, possibly empty; *len its length.
 * Errors: as lh_tokenizer_decode; the id is not kept on error. */
lh_status lh_detok_stream_step(lh_detok_stream *s, int32_t id, char **chunk, size_t *len,
                               lh_err *err);
/* Returns whatever is still held back (possibly with U+FFFD for bytes never completed). */
lh_status lh_detok_stream_finish(lh_detok_stream *s, char **chunk, size_t *len, lh_err *err);
void lh_detok_stream_free(lh_detok_stream *s);

#endif
