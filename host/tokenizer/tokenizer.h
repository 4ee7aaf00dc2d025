/* Internal: the tokenizer, read from a Hugging Face tokenizer.json (or a GGUF file, below),
 * giving the same ids as the `tokenizers` library (tests/tokenizer compares every case of
 * tests/fixtures/tokenizers, and the GGUF files converted from them).
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
 * GGUF (lh_tokenizer_load_gguf; lh_tokenizer_open on a GGUF source): llama.cpp's
 * tokenizer.ggml.* metadata is turned into the tokenizer.json document Hugging Face's tokenizer
 * of the same model has (tok_gguf*.c), which the loader above reads, so both sources share every
 * line of encoding and decoding:
 *   tokens          model.vocab, id = position; token_type CONTROL (3) and UNKNOWN (2) become
 *                   special added tokens, USER_DEFINED (4) non-special ones (normalized false,
 *                   as transformers' SentencePiece converter and convert_hf_to_gguf.py have
 *                   them); no token_type: all normal, as in llama.cpp
 *   model "gpt2"    byte-level BPE: merges "a b" -> model.merges; decoder ByteLevel;
 *                   tokenizer.ggml.pre picks normalizer and pre-tokenizer (add_space_prefix ->
 *                   ByteLevel's add_prefix_space):
 *                     default             llama.cpp's four regexes as Split (Isolated), then
 *                                         ByteLevel without regex (also when the key is
 *                                         missing, with a warning, as llama.cpp does)
 *                     gpt-2, phi-2        ByteLevel with the GPT-2 regex
 *                     smollm, starcoder   Digits (individual) + ByteLevel with the GPT-2 regex
 *                     llama3, llama-v3,   Split (Llama 3's regex) + ByteLevel; ignore_merges,
 *                     llama-bpe           add_bos_token true unless the file says otherwise
 *                     qwen2,              NFC + Split (Qwen2's regex) + ByteLevel
 *                     deepseek-r1-qwen
 *                   any other name is LH_E_UNSUPPORTED listing these
 *   model "llama"   SentencePiece BPE (Llama 2, Mistral, Gemma files): merges derived from the
 *                   scores as transformers' SentencePieceExtractor does (tok_gguf_spm.c),
 *                   byte_fallback when there are BYTE tokens, unk_token from unknown_token_id,
 *                   fuse_unk; normalizer [Prepend("▁") when add_space_prefix (default true)] +
 *                   Replace(" ", "▁"); decoder Replace("▁", " "), ByteFallback, Fuse [, Strip(1
 *                   left)]; remove_extra_whitespaces true or a precompiled charsmap is
 *                   LH_E_UNSUPPORTED
 *   other models    (bert, t5, rwkv, ...) LH_E_UNSUPPORTED naming the model
 *   post-processor  TemplateProcessing [BOS] $A [EOS] when add_bos_token / add_eos_token are true
 *                   (defaults: llama true / false; gpt2 false / false except as above)
 * Errors name the file and the key (and the element index): llmhost.h lists them.
 *
 * Ownership: an lh_tokenizer is immutable after loading; encode and decode may run on it from
 * several threads at once. Every array or string these functions return is malloc'ed and
 * belongs to the caller (free()). */
#ifndef LH_TOKENIZER_TOKENIZER_H
#define LH_TOKENIZER_TOKENIZER_H

#include "core/err.h"
#include "weights/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The functions (lh_tokenizer_open/load/load_json/load_gguf/free, vocab_size, token_to_id,
 * id_to_token, is_special, byte_mode, encode, decode and the lh_detok_stream_* streaming
 * decoder) are public: declared and documented in llmhost.h, which core/err.h includes. */

/* The GGUF keys of transformers' special tokens (host/chat reads them for its templates). */
#define LH_GGUF_N_SPECIALS 7
typedef struct lh_gguf_special {
    const char *name; /* "bos_token", ... */
    const char *key;  /* "tokenizer.ggml.bos_token_id", ... */
} lh_gguf_special;
extern const lh_gguf_special lh_gguf_specials[LH_GGUF_N_SPECIALS];

/* The token string of an id key of f (a view into f's mapping, not NUL-terminated; *s NULL when
 * the key is absent). Errors: LH_E_CONFIG naming the file and key when the id is not an integer
 * or not an index of tokenizer.ggml.tokens (or there is none), or the token is empty, holds a
 * NUL byte or is not UTF-8. */
lh_status lh_gguf_special_token(const lh_gguf_file *f, const char *key, const char **s,
                                size_t *len, lh_err *err);

#endif
