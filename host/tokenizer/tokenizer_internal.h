/* Internal to host/tokenizer: the types the tokenizer's files share and the functions each
 * gives the others. The files follow the Hugging Face tokenizers pipeline:
 *   tok_json.c           reading tokenizer.json values (typed getters, patterns, Metaspace options)
 *   tok_regex.c          PCRE2: compiling, covering a string with match / non-match spans, replacing
 *   tok_vocab.c          the hash maps (token -> id, id pair -> merge) and the id list
 *   tok_normalizers.c    normalizers (parse, apply)
 *   tok_pretokenizers.c  pre-tokenizers (parse, apply) and the pieces they produce
 *   tok_bytelevel.c      the GPT-2 byte <-> character map (ByteLevel pre-tokenizer and decoder)
 *   tok_bpe.c            the model: BPE's vocab and merges (parse) and the merge loop
 *   tok_added.c          added tokens (parse, the leftmost-longest match on the raw text)
 *   tok_postprocess.c    post-processors (parse, the template applied to the ids)
 *   tok_decoders.c       decoders (parse, apply)
 *   tok_load.c           loading: tokenizer.json -> lh_tokenizer, and freeing it
 *   tok_gguf*.c          a GGUF file's tokenizer.ggml.* metadata -> a tokenizer.json document
 *                        (tok_gguf.h)
 *   tokenizer.c          encode and decode through the components; the token table queries
 *   tok_stream.c         the streaming decoder (lh_detok_stream_*)
 *   tok_stop.c           stop strings matched on the tokens' strings (lh_stop_matcher_*)
 * Text is kept in core/strbuf.h's lh_strbuf, UTF-8 read with core/utf8.h. Every string these
 * components handle is valid UTF-8 (tokenizer.json's strings are, encode checks its text, and
 * each component keeps it so). */
#ifndef LH_TOKENIZER_INTERNAL_H
#define LH_TOKENIZER_INTERNAL_H

#include "tokenizer/tokenizer.h"

#include "core/strbuf.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <jansson.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Replaces b's text by o's (o is consumed); false, b kept, when o failed. */
static inline bool text_replace(lh_strbuf *b, lh_strbuf *o)
{
    if (!lh_strbuf_ok(o)) {
        lh_strbuf_free(o);
        return false;
    }
    lh_strbuf_free(b);
    *b = *o;
    return true;
}

/* ---- tok_vocab.c: hash maps and the id list --------------------------------------------------- */

/* Grows an array of elem_size elements to twice *cap (first when empty); on failure it keeps
 * v, sets *oom and returns v. */
void *grow_array(void *v, size_t *cap, size_t elem_size, size_t first, bool *oom);

/* string -> int32 (keys are borrowed: they live in the tokenizer's token table) */
typedef struct strmap {
    struct str_entry {
        const char *key; /* NULL: empty */
        size_t len;
        int32_t val;
    } *e;
    size_t cap, n;
} strmap;

bool strmap_init(strmap *m, size_t expect);
void strmap_free(strmap *m);
/* The value of k[0..n), or -1. */
int32_t strmap_get(const strmap *m, const char *k, size_t n);
/* Inserts (or overwrites); the map was sized for every key up front. */
void strmap_put(strmap *m, const char *k, size_t n, int32_t v);

/* (id, id) -> (rank, merged id) */
typedef struct pairmap {
    struct pair_entry {
        uint64_t key; /* key + 1, 0 = empty */
        int32_t rank, merged;
    } *e;
    size_t cap;
} pairmap;

bool pairmap_init(pairmap *m, size_t expect);
void pairmap_free(pairmap *m);
/* Sets (or overwrites) the entry of the pair (a, b). */
void pairmap_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
bool pairmap_get(const pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged);

/* A growable list of ids; a failed allocation makes it "oom" (later pushes are no-ops). */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
    bool oom;
} ids;

void ids_push(ids *x, int32_t id);

/* ---- tok_regex.c: PCRE2 ------------------------------------------------------------------------ */

typedef struct regex {
    pcre2_code *code;
    bool jit;
} regex;

/* Compiles pat[0..n) (literal: as a plain string) with UTF (and UCP); LH_E_CONFIG naming path. */
lh_status regex_compile(regex *r, const char *pat, size_t n, bool literal, const char *path,
                        lh_err *err);
void regex_free(regex *r);

/* A span of a string and whether it is a match. */
typedef struct span {
    size_t s, e;
    bool match;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
    bool oom;
} spans;

void spans_push(spans *sp, size_t s, size_t e, bool match);
/* Covers s[0..n) with alternating non-match / match spans (empty matches are skipped), as
 * tokenizers' Pattern::find_matches does. Returns false on allocation or match failure. */
bool regex_find(const regex *r, const char *s, size_t n, spans *out);
/* Replaces every match of re in s[0..n) by content, into out. */
bool regex_replace(const regex *re, const char *s, size_t n, const char *content, lh_strbuf *out);

/* ---- tok_json.c: reading tokenizer.json ------------------------------------------------------- */

typedef struct ctx {
    const char *origin; /* the file (or the caller's name for the text), for messages */
    lh_err *err;
} ctx;

lh_status bad_type(ctx *c, const char *path, const char *want);
lh_status unsupported(ctx *c, const char *what, const char *type, const char *path);
lh_status oom(ctx *c);
/* obj[key]: a string (*out NULL when absent or null and not required). */
lh_status get_str(ctx *c, json_t *obj, const char *key, const char *path, bool required,
                  const char **out);
/* obj[key]: true or false (dflt when absent or null). */
lh_status get_bool(ctx *c, json_t *obj, const char *key, const char *path, bool dflt, bool *out);
/* obj[key]: a non-negative integer. */
lh_status get_size(ctx *c, json_t *obj, const char *key, const char *path, size_t *out);
/* obj must be an object; its "type". */
lh_status get_type(ctx *c, json_t *obj, const char *path, const char **type);
/* A {"String": s} or {"Regex": r} pattern (obj's "pattern") into re. */
lh_status parse_pattern(ctx *c, json_t *obj, const char *path, regex *re);
/* The items of a Sequence: obj[key] must be an array; each is called on its items in order
 * (path "path.key[i]"), stopping at the first error: with elem_size, on item i's element of
 * *elems, a new zeroed array of one element per item (and one more), *count counting the
 * elements given to each (what the caller frees); without, on arg. */
typedef lh_status (*item_fn)(ctx *c, json_t *item, const char *path, void *elem);
lh_status parse_items(ctx *c, json_t *obj, const char *key, const char *path, size_t elem_size,
                      void **elems, size_t *count, item_fn each, void *arg);
/* A component (normalizer, pre-tokenizer, decoder): obj must be an object with a "type"; for
 * "Sequence", its items (obj[seq_key]) are parsed with parse into *children (as parse_items)
 * and *type is NULL. */
lh_status parse_component(ctx *c, json_t *obj, const char *path, const char *seq_key,
                          size_t elem_size, void **children, size_t *n_children, item_fn parse,
                          const char **type);
/* Frees the n elements of children (elem_size bytes each) with free_elem, then children. */
void free_children(void *children, size_t n, size_t elem_size, void (*free_elem)(void *elem));

typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

/* Metaspace's prepend_scheme (or the older add_prefix_space). */
lh_status parse_scheme(ctx *c, json_t *j, const char *path, prepend_scheme *out);
/* Metaspace's replacement: one character. */
lh_status parse_replacement(ctx *c, json_t *j, const char *path, char out[8]);

/* ---- tok_normalizers.c ------------------------------------------------------------------------- */

typedef enum { NORM_SEQUENCE, NORM_PREPEND, NORM_REPLACE, NORM_UNICODE } norm_kind;

typedef struct normalizer {
    norm_kind kind;
    struct normalizer *children;
    size_t n_children;
    char *str;     /* Prepend: the prefix; Replace: the content */
    regex re;      /* Replace */
    int uoptions;  /* NFC, NFD, NFKC, NFKD: utf8proc options */
} normalizer;

/* elem: a normalizer (item_fn) */
lh_status parse_norm(ctx *c, json_t *j, const char *path, void *elem);
void norm_free(void *elem);
/* Normalizes in place (b holds the string); false on allocation failure. */
bool norm_apply(const normalizer *n, lh_strbuf *b);

/* ---- tok_pretokenizers.c ----------------------------------------------------------------------- */

typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } split_behavior;

typedef enum { PT_SEQUENCE, PT_BYTELEVEL, PT_SPLIT, PT_METASPACE } pretok_kind;

typedef struct pretok {
    pretok_kind kind;
    struct pretok *children;
    size_t n_children;
    bool add_prefix_space, use_regex; /* ByteLevel */
    regex re;                         /* Split (and ByteLevel's GPT-2 regex, Digits' \p{N}) */
    split_behavior behavior;
    bool invert;
    char replacement[8]; /* Metaspace */
    prepend_scheme scheme;
    bool split;
} pretok;

/* A piece of text under pre-tokenization; orig0: it starts at offset 0 of the input. */
typedef struct piece {
    char *s;
    size_t len;
    bool orig0;
} piece;

typedef struct pieces {
    piece *v;
    size_t n, cap;
    bool oom;
} pieces;

void pieces_push(pieces *ps, const char *s, size_t len, bool orig0);
void pieces_free(pieces *ps);

/* elem: a pretok (item_fn) */
lh_status parse_pretok(ctx *c, json_t *j, const char *path, void *elem);
void pretok_free(void *elem);
/* Replaces ps with its pre-tokenization; false on allocation or match failure. */
bool pretok_apply(const pretok *p, pieces *ps);

/* ---- tok_bytelevel.c: the GPT-2 byte <-> character map ---------------------------------------- */

/* Builds the map once (thread-safe); loading calls it before anything reads the map. */
void bytelevel_init(void);
/* The character byte b stands for. */
uint32_t bytelevel_cp(unsigned char b);
/* The byte character cp stands for, or -1. */
int bytelevel_byte(uint32_t cp);

/* ---- tok_decoders.c ---------------------------------------------------------------------------- */

typedef enum { DEC_SEQUENCE, DEC_BYTELEVEL, DEC_METASPACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_REPLACE } dec_kind;

typedef struct decoder {
    dec_kind kind;
    struct decoder *children;
    size_t n_children;
    char replacement[8]; /* Metaspace */
    prepend_scheme scheme;
    char *content;       /* Strip: one character; Replace: the content */
    size_t start, stop;  /* Strip */
    regex re;            /* Replace */
} decoder;

/* The token strings under decoding. */
typedef struct strs {
    lh_strbuf *v;
    size_t n;
} strs;

void strs_free(strs *s);

/* elem: a decoder (item_fn) */
lh_status parse_dec(ctx *c, json_t *j, const char *path, void *elem);
void dec_free(void *elem);
/* Decodes s in place; false on allocation or match failure. */
bool dec_apply(const decoder *d, strs *s);
/* Whether d is, or its Sequence holds (at any depth), a decoder of kind k. */
bool dec_has(const decoder *d, dec_kind k);

/* ---- the tokenizer ----------------------------------------------------------------------------- */

typedef struct added_token {
    char *content;
    size_t len;
    int32_t id;
    bool special;
} added_token;

/* One element of the single template: a sequence marker or a special token's ids. */
typedef struct tmpl_item {
    bool is_seq;
    int32_t *ids;
    size_t n;
} tmpl_item;

struct lh_tokenizer {
    /* id -> token */
    char **tokens;
    size_t *token_lens;
    bool *special;
    int32_t n_ids;
    strmap vocab;      /* model vocab */
    strmap all_tokens; /* vocab + added tokens */
    pairmap merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_ids[256];
    added_token *added;
    size_t n_added;
    normalizer *norm;
    pretok *pre;
    decoder *dec;
    bool has_template;
    tmpl_item *tmpl;
    size_t n_tmpl;
};

/* tok_load.c: a tokenizer from a parsed tokenizer.json document (root stays the caller's);
 * origin names it in messages. */
lh_status tokenizer_from_doc(json_t *root, const char *origin, lh_tokenizer **out, lh_err *err);
/* tok_load.c: sets id's token to s[0..n) (an id may be given twice only with the same token). */
lh_status set_token(ctx *c, lh_tokenizer *t, int32_t id, const char *s, size_t n, const char *path);

/* tok_bpe.c: the model (sizes the token table and the maps for the added tokens too). */
lh_status parse_model(ctx *c, lh_tokenizer *t, json_t *m, json_t *added);
/* BPE on one pre-token, appending its ids to out; false on allocation failure. */
bool bpe_word(const lh_tokenizer *t, const char *s, size_t n, ids *out);

/* tok_added.c */
lh_status parse_added(ctx *c, lh_tokenizer *t, json_t *added, bool has_normalizer);
/* The longest added token that text[i..len) starts with, or NULL. */
const added_token *added_match(const lh_tokenizer *t, const char *text, size_t len, size_t i);

/* tok_postprocess.c */
/* tok: the lh_tokenizer (item_fn) */
lh_status parse_post(ctx *c, json_t *j, const char *path, void *tok);
/* Replaces body by itself with the special tokens the template adds (no change without a
 * template); false on allocation failure. body->v stays the caller's to free either way. */
bool post_apply(const lh_tokenizer *t, ids *body);

#endif
