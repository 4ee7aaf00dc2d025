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

/* The functions (lh_tokenizer_open/load/load_json/free, vocab_size, token_to_id,
 * id_to_token, is_special, encode, decode and the lh_detok_stream_* streaming decoder) are
 * public: declared and documented in llmhost.h, which core/err.h includes. */

#endif
