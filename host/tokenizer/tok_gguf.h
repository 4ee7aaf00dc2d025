/* Internal to host/tokenizer: a GGUF file's tokenizer.ggml.* metadata as a tokenizer source.
 *   tok_gguf.c      the entry point (lh_tokenizer_load_gguf): the vocabulary, token types,
 *                   scores and special-token ids read and checked, the added tokens and the
 *                   post-processor, assembled into a tokenizer.json document for tok_load.c
 *   tok_gguf_bpe.c  tokenizer.ggml.model "gpt2": the merges and the pre-tokenizer table
 *   tok_gguf_spm.c  tokenizer.ggml.model "llama": SentencePiece BPE, merges derived from scores
 * Every string handed on is a view into the file's mapping (valid while the file is open),
 * checked to be non-empty UTF-8 without NUL bytes. */
#ifndef LH_TOKENIZER_TOK_GGUF_H
#define LH_TOKENIZER_TOK_GGUF_H

#include "tokenizer/tokenizer_internal.h"
#include "weights/gguf.h"

#define GK_MODEL "tokenizer.ggml.model"
#define GK_PRE "tokenizer.ggml.pre"
#define GK_TOKENS "tokenizer.ggml.tokens"
#define GK_TYPES "tokenizer.ggml.token_type"
#define GK_SCORES "tokenizer.ggml.scores"
#define GK_MERGES "tokenizer.ggml.merges"
#define GK_UNK "tokenizer.ggml.unknown_token_id"
#define GK_BOS "tokenizer.ggml.bos_token_id"
#define GK_EOS "tokenizer.ggml.eos_token_id"
#define GK_ADD_BOS "tokenizer.ggml.add_bos_token"
#define GK_ADD_EOS "tokenizer.ggml.add_eos_token"
#define GK_ADD_PREFIX "tokenizer.ggml.add_space_prefix"
#define GK_REMOVE_WS "tokenizer.ggml.remove_extra_whitespaces"
#define GK_CHARSMAP "tokenizer.ggml.precompiled_charsmap"

/* llama.cpp's token types (llama_token_type; gguf-py's TokenType). */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

/* The vocabulary of one file, as read and checked by tok_gguf.c. */
typedef struct gguf_src {
    const lh_gguf_file *f;
    const char *path;
    lh_err *err;
    size_t n;            /* tokens */
    const char **tok;    /* views into the mapping */
    size_t *len;
    int32_t *type;       /* TT_*, TT_NORMAL for every token when the file has no token types */
    double *score;       /* NULL when the file has no scores */
    strmap ids;          /* token -> id */
} gguf_src;

/* "ARRAY of INT32", "STRING", ...: a value's type for messages. */
void gguf_type_desc(const lh_gguf_value *v, char *buf, size_t n);
/* The id a special-token key gives (-1 when the key is absent); LH_E_CONFIG naming the key when
 * it is not an integer or not a token id. */
lh_status gguf_special_id(const gguf_src *g, const char *key, int32_t *id);
/* An optional bool key: dflt when absent; the getter's error when it is not a bool. */
lh_status gguf_opt_bool(const gguf_src *g, const char *key, bool dflt, bool *out);
lh_status gguf_oom(const gguf_src *g);

/* tok_gguf_bpe.c: model "gpt2". Fills model's merges and ignore_merges, and doc's normalizer,
 * pre_tokenizer and decoder; *add_bos: the default of tokenizer.ggml.add_bos_token for its
 * pre-tokenizer (true for the Llama 3 family, as in llama.cpp). */
lh_status gguf_bpe_model(gguf_src *g, json_t *doc, json_t *model, bool *add_bos);
/* tok_gguf_spm.c: model "llama". Fills model's merges, unk_token, fuse_unk and byte_fallback,
 * and doc's normalizer and decoder. */
lh_status gguf_spm_model(gguf_src *g, json_t *doc, json_t *model);

#endif
