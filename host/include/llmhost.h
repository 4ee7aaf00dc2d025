/* llmhost: the public embedding API (libllmhost).
 *
 * Conventions (the same for every function here):
 *  - Functions return lh_status; LH_OK (0) is success. On failure the optional `err` receives
 *    the status and a message whose context chain names file, key, architecture and cause.
 *    `err` may be NULL. Nothing aborts on bad input.
 *  - Handles are opaque. Whoever gets a handle from a create or open function owns it and releases it
 *    with the matching free or close function. Strings returned as `const char *` are owned by the
 *    handle they came from and live as long as it does; `char *` results are the caller's to
 *    free().
 *  - Thread safety. Every function below says which of these it is:
 *      [concurrent]  may run on the same handle from several threads at once, and alongside
 *                    the handle's other [concurrent] functions;
 *      [exclusive]   one thread at a time per handle: the caller serializes these calls with
 *                    every other call on that handle (a handle may move between threads);
 *      [any thread]  callable from any thread at any time while the handle is open, even
 *                    while an [exclusive] call runs on it (lh_engine_cancel).
 *    Different handles are independent, except that an lh_engine borrows its lh_host: the
 *    host's [concurrent] functions may run while its engines generate, and lh_host_free
 *    comes after the last lh_engine_close. Functions without a handle are [concurrent].
 *  - Versions: LH_PLUGIN_ABI_MAJOR / LH_PLUGIN_ABI_MINOR (lh_plugin.h, also `llmhost
 *    --version` and `pkg-config --variable=abi_major llmhost-plugin`) version the plugin ABI;
 *    this embedding API only ever appends struct fields (struct_size says which a caller
 *    knows) and functions. */
#ifndef LLMHOST_H
#define LLMHOST_H

#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The SDK's error record (lh_types.h) under the embedding API's name. */
typedef lh_error lh_err;

/* Short stable name of a status ("unknown-name", "load-failure", ...). Never NULL; a static
 * string. [concurrent] */
LH_EXPORT const char *lh_status_name(lh_status s);

typedef struct lh_host lh_host;

typedef struct lh_host_options {
    uint32_t struct_size;
    /* Built-in plugin directory. NULL: $LLMHOST_PLUGIN_DIR, else found relative to
     * libllmhost (build tree: ../plugins; installed: <libdir>/llmhost/plugins). */
    const char *plugin_dir;
    /* Refuse nothing on the file-permission checks, but log each refusal that was waived. */
    bool allow_insecure_plugins;
} lh_host_options;

/* Creates a host: reads the built-in arch_index.tsv and loads no plugin. opts may be NULL
 * (the defaults); the caller owns *out (lh_host_free).
 * Errors: LH_E_IO (plugin dir or index missing), LH_E_INDEX_PARSE. [concurrent] */
LH_EXPORT lh_status lh_host_create(const lh_host_options *opts, lh_host **out, lh_err *err);
/* Frees the host. Plugins loaded by it stay mapped (they are never dlclosed). NULL is ok.
 * [exclusive]: no other call on h in flight, and every engine opened on h closed first. */
LH_EXPORT void lh_host_free(lh_host *h);

/* Declares a custom module dir at the end of the precedence order (earlier dirs win).
 * The dir must be absolute. With its own arch_index.tsv its plugins load lazily; without,
 * every libmodel_*.so / libattn_*.so in it loads now, in sorted order. A dir declared before
 * and removed is restored from its modules' registration logs without reloading.
 * Errors: LH_E_INSECURE (relative path, writable by others), LH_E_USAGE (already declared, or
 * the built-in dir), LH_E_IO, LH_E_INDEX_PARSE, and for
 * eagerly loaded dirs any load error class; on error the dir is not declared.
 * [concurrent]: serialized with loading and resolution inside the host; an engine already
 * open keeps the plugin it was built from. */
LH_EXPORT lh_status lh_host_add_custom_dir(lh_host *h, const char *dir, lh_err *err);
/* Removes a declared custom dir; the registries are rebuilt without its modules (nothing is
 * unloaded: engines open on one of its plugins keep working).
 * Errors: LH_E_USAGE when the dir is not declared. [concurrent] */
LH_EXPORT lh_status lh_host_remove_custom_dir(lh_host *h, const char *dir, lh_err *err);
/* Declares each dir of $LLMHOST_CUSTOM_MODULE_DIRS (colon-separated) in order; stops at the
 * first error (the message names the variable). [concurrent] */
LH_EXPORT lh_status lh_host_add_custom_dirs_from_env(lh_host *h, lh_err *err);

/* JSON (caller frees) listing what the indexes offer, built-in and custom, and what is loaded.
 * Loads no plugin. [concurrent] */
LH_EXPORT lh_status lh_host_list_json(lh_host *h, char **json_out, lh_err *err);
/* JSON array of absolute paths of every plugin file this host loaded (caller frees).
 * [concurrent] */
LH_EXPORT lh_status lh_host_loaded_plugins_json(lh_host *h, char **json_out, lh_err *err);

/* Whether `path` can name a model: an existing directory, a JSON file (a config.json; the
 * tokenizer and chat-template openers also take their own JSON files) or a file with the GGUF
 * magic. Resolution, engines, lh_tokenizer_open and lh_chat_template_open check it before they
 * open anything, so a wrong path is reported as such. Errors: LH_E_USAGE (NULL or empty path;
 * "model path 'P' is neither a model directory, a config.json nor a model file (GGUF)"),
 * LH_E_IO ("model path 'P' does not exist", or the error stat gave). [concurrent] */
LH_EXPORT lh_status lh_model_path_check(const char *path, lh_err *err);

/* Resolve a model (directory or config.json path) with an optional YAML run config (a file
 * path, or the YAML text itself, or neither) and CLI-style overrides ("key=value" strings,
 * may be NULL; applied over the YAML). The result is JSON (caller frees): see docs/commands.md
 * "resolve". Errors: every class of lh_status; LH_E_USAGE when both config_file and
 * config_text are set. [concurrent] */
typedef struct lh_resolve_request {
    uint32_t struct_size;
    const char *model;        /* model dir or config.json */
    const char *config_file;  /* YAML run config or NULL */
    const char *const *overrides; /* NULL-terminated "key=value" list or NULL */
    /* ---- appended (a struct_size that ends before here reads as config_text NULL) ---- */
    /* The run config as YAML text (NUL-terminated UTF-8), parsed by the same parser as a
     * file; errors and `explain` name it "<config_text>:LINE:COL". NULL: none. */
    const char *config_text;
} lh_resolve_request;
LH_EXPORT lh_status lh_host_resolve_json(lh_host *h, const lh_resolve_request *req, char **json_out,
                               lh_err *err);
/* JSON array (caller frees) of every attention backend the indexes offer, with its
 * constant capabilities; loads the attention backend plugins and nothing else. [concurrent] */
LH_EXPORT lh_status lh_host_backends_json(lh_host *h, char **json_out, lh_err *err);

/* Parses and validates a run config (YAML file or NULL, plus "key=value" overrides) without
 * loading anything: the CLI calls it before declaring custom dirs so that a bad run config
 * fails before any plugin loads. Errors: LH_E_IO, LH_E_CONFIG, LH_E_USAGE. [concurrent] */
LH_EXPORT lh_status lh_validate_run_config(const char *config_file,
                                           const char *const *overrides, lh_err *err);
/* The same for a run config given as YAML text (NULL: none), as lh_engine_options.config_text
 * takes it; errors name "<config_text>:LINE:COL". [concurrent] */
LH_EXPORT lh_status lh_validate_run_config_text(const char *config_text,
                                                const char *const *overrides, lh_err *err);
/* One key of the run-config key table (docs/run-config.md), for front ends that offer its
 * settings: the dotted name ("kv_cache.block_size"), the dedicated command-line flag that sets
 * it (NULL: none; "--max-seq-len"), whether that flag takes a value (false: a switch that sets
 * the key to true), whether `--set KEY=VALUE` (lh_run_config_set, the engine's overrides)
 * accepts it, whether a YAML run config may set it, the accepted names of an enum key (NULL
 * otherwise), the default in words, one line of help and the value's syntax. Every string is
 * static. */
typedef struct lh_run_config_key_info {
    uint32_t struct_size;
    const char *name;
    const char *flag;
    bool flag_takes_value;
    bool settable;
    bool yaml;
    const char *const *names;
    size_t n_names;
    const char *default_value;
    const char *help;
    /* How a value is written ("N", "auto|cpu|cuda|cuda:N"); NULL for an enum (its names). */
    const char *value_syntax;
} lh_run_config_key_info;
/* The i-th key of the table, in table order: returns 1 and fills *out (out->struct_size says
 * how much the caller knows; only that much is written), 0 past the last key or for a NULL
 * out. Overrides for a key with a flag may be given as "FLAG-NAME=VALUE" without the dashes
 * ("max-seq-len=8"), as the CLI does. [concurrent] */
LH_EXPORT int lh_run_config_key_at(size_t i, lh_run_config_key_info *out);

/* As resolve, then builds the module tree (meta phase, no weight memory) and reports the
 * memory plan. JSON caller-owned; see docs/commands.md "explain". lh_engine_explain_json gives the same
 * for an open engine. [concurrent] */
LH_EXPORT lh_status lh_host_explain_json(lh_host *h, const lh_resolve_request *req, char **json_out,
                               lh_err *err);

/* ---- inference ------------------------------------------------------------------------- */

typedef struct lh_engine lh_engine;

typedef struct lh_engine_options {
    uint32_t struct_size;
    const char *model;             /* model directory (config.json + safetensors) */
    const char *config_file;       /* YAML run config or NULL */
    const char *const *overrides;  /* NULL-terminated "key=value" list or NULL */
    int n_threads;                 /* <= 0: every online core */
    const char *attn_backend;      /* NULL: the run config's attn_backend, else "paged" */
    /* ---- appended (a struct_size that ends before here reads as config_text NULL) ---- */
    /* The run config as YAML text instead of a file (not both: LH_E_USAGE); the same parser
     * and validator, errors name "<config_text>:LINE:COL". Only read during the call. */
    const char *config_text;
} lh_engine_options;

/* Resolves the model, builds its tree, binds the weights (mmap; zero-copy where the dtype
 * allows) and prepares the forward pass. The engine borrows `h`, which must outlive it.
 * Errors: every class of resolve, LH_E_IO / LH_E_CONFIG for the checkpoint (all missing,
 * unexpected and mis-shaped tensors at once), LH_E_UNSUPPORTED for an architecture whose tree
 * has no forward pass yet; LH_E_USAGE for both config_file and config_text, or a
 * struct_size smaller than the fields up to attn_backend. The caller owns *out
 * (lh_engine_close). [concurrent] on h (several engines may open at once); the options and
 * the strings they point to are only read during the call. */
LH_EXPORT lh_status lh_engine_open(lh_host *h, const lh_engine_options *opts, lh_engine **out,
                                   lh_err *err);
/* Frees the engine (NULL is ok). [exclusive]: no other call on e in flight, lh_engine_cancel
 * included. */
LH_EXPORT void lh_engine_close(lh_engine *e);
/* Vocabulary size (logits width); 0 for NULL. [concurrent] (immutable after open) */
LH_EXPORT int64_t lh_engine_vocab_size(const lh_engine *e);
/* Tokens one sequence may hold (run config max_seq_len, else the model's length) and
 * sequences one call may carry (max_batch_size). [concurrent] (immutable after open) */
LH_EXPORT int64_t lh_engine_max_seq_len(const lh_engine *e);
LH_EXPORT int64_t lh_engine_max_batch_size(const lh_engine *e);
/* The explain JSON of the open engine (caller frees): the keys of lh_host_explain_json
 * (resolution, config, attention with its device decision, run_config with origins, memory
 * plan) as decided when the engine opened (loaded_plugins as of then), plus "engine":
 * {device ("cpu" or "cuda:N"), threads, isa (CPU only), vocab_size, max_seq_len,
 * max_batch_size}. Built once at open; this returns a copy.
 * Errors: LH_E_USAGE (NULL engine or json_out), LH_E_NOMEM. [concurrent] (also while the
 * engine generates) */
LH_EXPORT lh_status lh_engine_explain_json(const lh_engine *e, char **json_out, lh_err *err);
/* Logits of every position of one sequence: out [n, vocab] float32, caller-allocated.
 * [exclusive]; not cancellable. */
LH_EXPORT lh_status lh_engine_logits(lh_engine *e, const int32_t *tokens, int64_t n, float *out,
                                     lh_err *err);
/* Greedy generation for n_seqs prompts in one batch: out [n_seqs, max_new] ids,
 * caller-allocated. Exactly max_new tokens per sequence: end-of-sequence ids do not stop it.
 * Errors (all checked before any step runs): LH_E_USAGE for an empty prompt, an id outside
 * the vocabulary, more sequences than max_batch_size, or prompt + max_new beyond
 * max_seq_len; LH_E_UNSUPPORTED for NaN logits. [exclusive]; not cancellable (use
 * lh_engine_generate). */
LH_EXPORT lh_status lh_engine_generate_greedy(lh_engine *e, const int32_t *const *prompts,
                                              const int64_t *lens, int64_t n_seqs,
                                              int64_t max_new, int32_t *out, lh_err *err);

/* Timings of the engine's last lh_engine_generate_greedy or lh_engine_generate call, measured with CLOCK_MONOTONIC.
 * The prefill is the one packed step over every prompt plus the greedy choice of each
 * sequence's first new token: prefill_tokens = the sum of the prompt lengths. Each decode step
 * feeds one token per sequence and chooses the next: decode_steps = max_new - 1 (0 when max_new
 * <= 1), decode_tokens = decode_steps x n_seqs. Argument checks, buffer allocation and the
 * release of the sequences are in neither phase.
 * Derived rates: prefill tok/s = prefill_tokens / prefill_seconds, decode tok/s =
 * decode_tokens / decode_seconds, time per decode step = decode_seconds / decode_steps. */
typedef struct lh_generate_stats {
    uint32_t struct_size; /* set by the caller to sizeof(lh_generate_stats) */
    int64_t prefill_tokens;
    double prefill_seconds;
    int64_t decode_steps;
    int64_t decode_tokens;
    double decode_seconds;
} lh_generate_stats;

/* Copies the last generate call's timings into *out. Every call of lh_engine_generate_greedy
 * resets them first, so a call refused before its first step leaves zeros and a call that
 * failed midway reports the phases and decode steps it completed; before the first call they
 * are zero. lh_engine_logits does not touch them. out->struct_size must be at least
 * sizeof(lh_generate_stats) of this library; struct_size is left as the caller set it and
 * bytes beyond this library's fields (a newer, larger struct) are not written.
 * Errors: LH_E_USAGE for a NULL engine or out, or a struct_size smaller than this library's
 * (nothing is written then). [exclusive] (it reads what a running generate call writes);
 * concurrent with lh_engine_cancel. */
LH_EXPORT lh_status lh_engine_last_stats(const lh_engine *e, lh_generate_stats *out,
                                         lh_err *err);

/* ---- sampling and stop tokens ----------------------------------------------------------- */

/* Generation parameters, with the semantics of Hugging Face transformers' generate():
 * the repetition penalty, then (when sampling) temperature, top-k, top-p and min-p, as
 * lh_kernels.h "sampling" defines them (ties at the top-k boundary are all kept).
 * Greedy (argmax of the penalized logits, first index on ties) when do_sample is false or
 * temperature is 0; then temperature, top_k, top_p, min_p and seed are not used (but must
 * still be valid).
 * lh_engine_generation_defaults fills one from the model directory's generation_config.json
 * (do_sample, temperature, top_k, top_p, min_p, repetition_penalty and eos_token_id as the
 * stop ids; transformers' defaults for absent keys: do_sample false, temperature 1, top_k 50,
 * top_p 1, min_p off, repetition_penalty 1, no stop ids; other keys such as max_length or
 * max_new_tokens are not honoured). Without that file, as transformers derives the generation
 * config from the model config: the defaults with config.json's eos_token_id as stop ids.
 * A malformed generation_config.json fails lh_engine_open with LH_E_CONFIG (FILE:LINE:COL for
 * JSON syntax, the key otherwise). Fields are only ever appended; struct_size covers them. */
typedef struct lh_generate_params {
    uint32_t struct_size;       /* sizeof(lh_generate_params) */
    bool do_sample;
    float temperature;          /* >= 0, finite */
    int64_t top_k;              /* >= 0; 0: off */
    float top_p;                /* [0, 1]; 1: off; 0: only the most likely token */
    float min_p;                /* [0, 1]; 0: off */
    float repetition_penalty;   /* > 0, finite; 1: off */
    uint64_t seed;
    int64_t max_new_tokens;     /* >= 0 */
    const int32_t *stop_ids;    /* n_stop_ids ids (>= 0); borrowed for the call */
    int64_t n_stop_ids;
    /* The random stream of each sequence: sequence s draws its step-k number from
     * (seed, seq_streams[s], k). NULL: stream s (its position in the batch). */
    const uint64_t *seq_streams;
    /* ---- appended (a struct_size that ends before here reads as on_step NULL) ---- */
    /* Called once per generation step, on the calling thread, after the step's tokens are
     * recorded: step k (0: the prefill's first new tokens) gave sequence seqs[i] the token
     * ids[i] (its k-th new token), for i < n, in batch order; sequences that stopped earlier
     * are not listed. Both arrays are borrowed for the call. Returning false stops the whole
     * generation after this step: every sequence still running ends with LH_STOP_CANCELLED
     * and keeps the tokens produced so far (the call itself returns LH_OK). It must not call
     * back into the engine, except lh_engine_cancel (the same effect as returning false)
     * and the engine's [concurrent] getters. NULL: no callback. */
    bool (*on_step)(void *user, int64_t step, const int64_t *seqs, const int32_t *ids,
                    int64_t n);
    void *on_step_user;         /* passed to on_step */
    /* ---- appended (a struct_size that ends before here reads as finish NULL) ---- */
    /* Per-sequence early stop (e.g. a stop string the caller matched on the decoded text):
     * NULL, or an array of n_seqs flags that the caller lends for the call. The library sets
     * every flag to false before the first step. on_step may set finish[seqs[i]] = true for a
     * sequence it was just given a token of: after on_step returns, that sequence ends there
     * with LH_STOP_CALLBACK -- keeping the token of this step, which is its last -- and leaves
     * the batch while the others continue (a token in stop_ids ends it with LH_STOP_EOS
     * instead). Flags of sequences not listed in that call are ignored. */
    bool *finish;
} lh_generate_params;

typedef enum lh_stop_reason {
    LH_STOP_LENGTH = 0,    /* max_new_tokens generated */
    LH_STOP_EOS = 1,       /* the last generated token is one of stop_ids */
    LH_STOP_CANCELLED = 2, /* on_step returned false, or lh_engine_cancel was called, while
                            * the sequence was running */
    LH_STOP_CALLBACK = 3,  /* on_step set the sequence's finish flag (params.finish) */
    LH_STOP_STRING = 4     /* a scheduler request's stop string matched (lh_request) */
} lh_stop_reason;

/* Fills *out (out->struct_size must be at least sizeof(lh_generate_params); kept as given)
 * with the model's defaults (see above), max_new_tokens 32, seed 0, and seq_streams, on_step
 * and finish NULL (as far as out->struct_size reaches).
 * stop_ids points into the engine and lives as long as it. [concurrent] */
LH_EXPORT lh_status lh_engine_generation_defaults(const lh_engine *e, lh_generate_params *out,
                                                  lh_err *err);

/* Generates for n_seqs prompts in one batch: out [n_seqs, max_new_tokens] ids, row-major,
 * caller-allocated; out_lens[s] receives the number of tokens sequence s generated and
 * stop[s] (may be NULL) why it stopped. A sequence stops after generating a token in
 * stop_ids -- that token IS part of its output, as in transformers' generate() -- after
 * max_new_tokens tokens, or when on_step marks it in params.finish (the token of that step is
 * its last); a stopped sequence leaves the batch while the others continue. The
 * rest of a stopped row of out is filled with -1.
 * Same seed, same output: for the same model files, run config, prompt, parameters and
 * stream, the tokens are identical from run to run whatever the thread count or the other
 * sequences in the batch, as long as the logits are identical; with do_sample false the
 * result is lh_engine_generate_greedy's (which equals this with the defaults of a model
 * without generation_config.json, do_sample false and no stop ids).
 * Errors: as lh_engine_generate_greedy, plus LH_E_USAGE naming a bad parameter (checked
 * before any step runs). lh_engine_last_stats reports the call (decode_tokens counts only the
 * tokens of sequences still running).
 * Cancellation: lh_engine_cancel (from another thread, or from on_step) stops the call at the
 * next step boundary, as on_step returning false does.
 * [exclusive]: one generate call per engine at a time; on_step runs on the calling thread. */
LH_EXPORT lh_status lh_engine_generate(lh_engine *e, const lh_generate_params *params,
                                       const int32_t *const *prompts, const int64_t *lens,
                                       int64_t n_seqs, int32_t *out, int64_t *out_lens,
                                       lh_stop_reason *stop, lh_err *err);

/* Asks the lh_engine_generate call running on e to stop at the next step boundary: the
 * flag is read before the prefill and before each decode step, so the step in progress
 * finishes (and its on_step runs) first. Every sequence still running then ends with
 * LH_STOP_CANCELLED (unless that step was its max_new_tokens-th) and keeps the tokens it
 * produced; the call returns LH_OK, and its out_lens say how far each sequence got. A
 * cancel from on_step after step k leaves k + 1 tokens per running sequence.
 * The request belongs to the call in progress: each lh_engine_generate clears it when it
 * starts, so a cancel made while no call runs is forgotten and never stops a later call.
 * Does nothing for NULL, for lh_engine_generate_greedy or lh_engine_logits.
 * [any thread]: one lock-free atomic store; callable from on_step and from a signal
 * handler. Not after (or during) lh_engine_close. */
LH_EXPORT void lh_engine_cancel(lh_engine *e);

/* ---- continuous batching ---------------------------------------------------------------
 *
 * A scheduler runs many requests over one engine, each arriving and leaving at any step
 * (iteration-level batching): every step takes one token of each request that is decoding,
 * then chunks of the prompts waiting to be prefilled (the oldest first, new requests as
 * sequence slots free up) up to max_num_batched_tokens, so a long prompt never stalls the
 * decodes; each row that completes a prompt or decodes a token is sampled with its request's
 * own parameters. When the paged KV pool cannot hold a step, prefill chunks wait first, then
 * the newest running request is preempted (its blocks freed; its prompt and tokens so far are
 * recomputed when it runs again), so no request fails for lack of blocks. A request's tokens
 * depend on its prompt and parameters only: its k-th new token draws from (seed, stream, k),
 * as lh_engine_generate's sequence with that stream does, so a request gives the tokens it
 * gives alone (as far as the kernels compute a row the same way in any batch: the CPU kernels
 * do with f32 weights; bf16 weights on AMX take bf16 tiles for steps of 16 rows or more unless
 * bf16_matmul is exact).
 * Models whose RoPE depends on the sequence length (dynamic scaling, longrope) are refused:
 * a chunked prompt would rotate its keys with other tables than a one-shot prefill.
 * Threads and ownership: submit, cancel and busy may be called from any thread; step from one
 * thread at a time; the token callback runs on the stepping thread, inside step, and must not
 * call step. A scheduler owns the engine's sequence slots while it lives: lh_engine_generate*,
 * lh_engine_logits and a second scheduler on that engine are LH_E_USAGE until it is freed.
 * The engine must outlive the scheduler. */
typedef struct lh_scheduler lh_scheduler;

typedef struct lh_scheduler_options {
    uint32_t struct_size;            /* sizeof(lh_scheduler_options) */
    /* tokens fed to the model per step, >= max_batch_size (every decode takes one); 0: 64
     * per slot, at least 512 */
    int64_t max_num_batched_tokens;
    /* Prefix caching: full KV blocks keyed by a hash chain of their tokens are shared between
     * requests and kept after use until their blocks are needed (least recently used first),
     * so a prompt that starts with cached blocks skips their prefill. 0: on where the model
     * allows (the paged pool; not with dynamic RoPE or longrope, whose keys depend on the
     * sequence length), 1: on (LH_E_UNSUPPORTED saying why where not), -1: off. */
    int prefix_caching;
} lh_scheduler_options;

/* The most alternatives a request may ask log-probabilities of (lh_request.top_logprobs). */
#define LH_MAX_TOP_LOGPROBS 20

/* What the token callback hears: one new token of request `id` (token >= 0, last false), or
 * the request's end (last true, with why; token is its last new token, or -1 when it ended
 * without producing one here: cancelled, or max_new_tokens 0). Everything it points to is
 * the scheduler's and valid during the call only. */
typedef struct lh_token_event {
    uint64_t id;
    int32_t token;
    bool last;
    lh_stop_reason why;    /* when last (LH_STOP_LENGTH otherwise) */
    /* prompt tokens of the request taken from the prefix cache when it was first admitted
     * (0 without prefix caching); known from its first token on */
    int64_t cached_tokens;
    /* With lh_request.logprobs, for a token >= 0: its log-probability under the model's
     * raw distribution (log-softmax of the logits, before temperature, penalties and the
     * top-k/top-p/min-p cuts, as vLLM reports by default), and the n_top (= top_logprobs)
     * most likely ids with theirs, most likely first (equal ones by id). Otherwise logprob is
     * 0 and n_top 0. */
    float logprob;
    int32_t n_top;
    const int32_t *top_ids;
    const float *top_logprobs;
} lh_token_event;

typedef void (*lh_token_fn)(void *user, const lh_token_event *event);

/* What one step did. */
typedef struct lh_scheduler_step_info {
    int64_t tokens;    /* tokens fed to the model */
    int64_t decodes;   /* of them, one per decoding request */
    int64_t prefill;   /* prompt (and recompute) tokens */
    int64_t sampled;   /* new tokens chosen */
    int64_t preempted; /* requests preempted for KV blocks */
    int64_t finished;  /* requests that ended */
    int64_t running;   /* requests holding a sequence slot after the step */
    int64_t waiting;   /* requests waiting for one */
    int64_t cached;    /* prompt tokens taken from the prefix cache instead of computed */
} lh_scheduler_step_info;

/* A scheduler over engine e (options may be NULL: the defaults). *out is the caller's
 * (lh_scheduler_free). Errors: LH_E_USAGE (NULL engine or out, a struct_size too small, a
 * budget outside [max_batch_size, 2^24], naming both; prefix_caching outside -1..1; another
 * scheduler holds the engine's slots), LH_E_UNSUPPORTED (RoPE that depends on the sequence
 * length; prefix_caching 1 where the model does not allow it; each saying why), LH_E_NOMEM.
 * A failed create changes nothing. */
LH_EXPORT lh_status lh_scheduler_create(lh_engine *e, const lh_scheduler_options *options,
                                        lh_scheduler **out, lh_err *err);
/* Drops what is queued or running (no callbacks) and frees the scheduler. NULL: no-op. */
LH_EXPORT void lh_scheduler_free(lh_scheduler *s);
/* One request. Everything is read during lh_scheduler_submit only (copied), except the
 * tokenizer, which must outlive the request. */
typedef struct lh_request {
    uint32_t struct_size;             /* sizeof(lh_request) */
    const int32_t *prompt;            /* prompt_len >= 1 ids inside the vocabulary */
    int64_t prompt_len;
    /* as lh_engine_generate reads them: sampling, seed, max_new_tokens, stop ids
     * (seq_streams, on_step and finish are not read) */
    const lh_generate_params *params;
    uint64_t stream;                  /* the random stream: draws (seed, stream, k) */
    /* Stop strings matched on the request's tokens as lh_stop_matcher matches them (the
     * prompt is their context): the token that completes one is the request's last, and it
     * ends with LH_STOP_STRING. n_stop_strings 0: none; otherwise tokenizer is needed. */
    const char *const *stop_strings;
    size_t n_stop_strings;
    const struct lh_tokenizer *tokenizer; /* lh_tokenizer (below) */
    lh_token_fn on_token;             /* may be NULL */
    void *user;                       /* passed to on_token */
    /* log-probabilities in the token events (lh_token_event): of each new token, and of the
     * top_logprobs (0..LH_MAX_TOP_LOGPROBS) most likely alternatives */
    bool logprobs;
    int32_t top_logprobs;
} lh_request;

/* Queues a request. *id (may be NULL) receives its id, 1, 2, ... in submission order.
 * Errors: LH_E_USAGE (NULL request or a struct_size too small, empty prompt, an id outside
 * the vocabulary, parameters lh_engine_generate refuses, prompt + max_new_tokens beyond
 * max_seq_len, stop strings lh_stop_strings_check refuses or without a tokenizer,
 * top_logprobs outside [0, LH_MAX_TOP_LOGPROBS] or without logprobs),
 * LH_E_UNSUPPORTED (more KV blocks than the whole pool has, with both numbers), LH_E_NOMEM.
 * [concurrent] */
LH_EXPORT lh_status lh_scheduler_submit(lh_scheduler *s, const lh_request *request,
                                        uint64_t *id, lh_err *err);
/* Ends request id at the next step with LH_STOP_CANCELLED (its callback: last true, token
 * -1); an id that ended or never existed is ignored. [concurrent] */
LH_EXPORT void lh_scheduler_cancel(lh_scheduler *s, uint64_t id);
/* Runs one step (nothing when no request is queued). info may be NULL. A failed step (a
 * kernel or backend error) ends the requests it ran with LH_STOP_CANCELLED and returns the
 * error; the scheduler stays usable. */
LH_EXPORT lh_status lh_scheduler_step(lh_scheduler *s, lh_scheduler_step_info *info,
                                      lh_err *err);
/* Whether a request is queued or running. [concurrent] */
LH_EXPORT bool lh_scheduler_busy(lh_scheduler *s);

/* Latency histogram bounds in seconds (cumulative buckets, as Prometheus counts them: bucket
 * i counts observations <= LH_LATENCY_BOUNDS[i]; the last bound is +inf). */
#define LH_LATENCY_BUCKETS 12
#define LH_LATENCY_BOUNDS_INIT                                                                 \
    {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 1e300}

/* What a scheduler has done since it was created, and its state after the last step. Times
 * are CLOCK_MONOTONIC: time to first token from submit to the step that chose it, inter-token
 * latency between a request's consecutive tokens. */
typedef struct lh_scheduler_metrics {
    uint32_t struct_size;           /* sizeof(lh_scheduler_metrics) */
    int64_t running, waiting;       /* after the last step */
    int64_t kv_blocks_used, kv_blocks_total; /* the paged pool (0 and 0 without one) */
    int64_t submitted, finished, preempted;  /* requests */
    int64_t steps, prompt_tokens, generated_tokens;
    int64_t prefix_cached_tokens;   /* prompt tokens taken from the prefix cache */
    int64_t ttft_count, itl_count;
    double ttft_sum, itl_sum;       /* seconds */
    int64_t ttft_buckets[LH_LATENCY_BUCKETS], itl_buckets[LH_LATENCY_BUCKETS];
} lh_scheduler_metrics;

/* A snapshot of s's metrics into *out (its struct_size kept; fields beyond it untouched).
 * NULL s or out, or a struct_size too small: nothing written. [concurrent] */
LH_EXPORT void lh_scheduler_metrics_get(lh_scheduler *s, lh_scheduler_metrics *out);

/* ---- tokenizer ------------------------------------------------------------------------- */

/* The tokenizer of a Hugging Face tokenizer.json, giving the same ids as the `tokenizers`
 * library for the components host/tokenizer/tokenizer.h lists (BPE with byte-level or
 * SentencePiece-style pre-tokenization, added/special tokens, their decoders), or of a GGUF
 * file's tokenizer.ggml.* metadata (llama.cpp's format), read as the tokenizer.json that
 * Hugging Face's tokenizer of the same model has. Independent of lh_host and lh_engine: opening
 * one loads no plugin and no weights.
 * Ownership: an lh_tokenizer is immutable after loading; every function taking a const
 * lh_tokenizer * is [concurrent]; lh_tokenizer_free is [exclusive]. Every array or string
 * these functions return through a pointer argument is malloc'ed and the caller's (free()).
 * Errors of the loaders: LH_E_IO (the file cannot be read, path named), LH_E_CONFIG (malformed
 * JSON with line:column, or a wrong type / missing key / inconsistent value, with its JSON
 * path), LH_E_UNSUPPORTED (a component or option this build does not implement, named with
 * its JSON path), LH_E_NOMEM. On error *out is NULL. */
typedef struct lh_tokenizer lh_tokenizer;

/* Opens the tokenizer of a model: path is a model directory (its tokenizer.json is read), a
 * model's config.json (the tokenizer.json next to it), a tokenizer.json file itself, or a GGUF
 * source -- a file starting with the GGUF magic, or a directory without config.json holding
 * exactly one *.gguf -- whose metadata is read as lh_tokenizer_load_gguf reads it. Errors: the
 * loaders', and LH_E_CONFIG for a directory without config.json holding several *.gguf files. */
LH_EXPORT lh_status lh_tokenizer_open(const char *path, lh_tokenizer **out, lh_err *err);
/* Loads path as a tokenizer.json (no directory lookup). */
LH_EXPORT lh_status lh_tokenizer_load(const char *path, lh_tokenizer **out, lh_err *err);
/* The same from JSON text in memory; origin names it in messages (e.g. a path). */
LH_EXPORT lh_status lh_tokenizer_load_json(const char *text, size_t len, const char *origin,
                                           lh_tokenizer **out, lh_err *err);
/* Loads the tokenizer of a GGUF file from its tokenizer.ggml.* keys (no tensor is read):
 * tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, token_type, merges, the pre-tokenizer
 * named by tokenizer.ggml.pre) or "llama" (SentencePiece BPE: tokens, scores, token_type; the
 * merges derived from the scores as transformers does), add_bos_token / add_eos_token,
 * add_space_prefix and the special-token ids. host/tokenizer/tokenizer.h says how each becomes
 * tokenizer.json. *out is the caller's (lh_tokenizer_free); the file is not kept open.
 * Errors: LH_E_IO and the GGUF reader's LH_E_CONFIG / LH_E_UNSUPPORTED for the file itself;
 * LH_E_CONFIG naming the file and the key for a missing tokenizer.ggml.model or tokens, an
 * array of the wrong element type or length, an empty, non-UTF-8 or duplicate token, a token
 * type outside 0..6 or a BYTE token not named <0xNN>, a NaN score, an id key that is not a
 * token id, a malformed merge (not "a b", a half or the merge not a token), missing scores
 * (llama) or merges (gpt2), add_bos/add_eos true without the id; LH_E_UNSUPPORTED naming the
 * value for another tokenizer.ggml.model (bert, t5, rwkv, ...), an unknown tokenizer.ggml.pre
 * (the supported ones listed) or, for "llama", normalization Hugging Face's Llama tokenizer does
 * not do (remove_extra_whitespaces true, a precompiled_charsmap); LH_E_NOMEM. */
LH_EXPORT lh_status lh_tokenizer_load_gguf(const char *path, lh_tokenizer **out, lh_err *err);
/* NULL is ok. */
LH_EXPORT void lh_tokenizer_free(lh_tokenizer *t);

/* One more than the largest id (model vocab and added tokens). */
LH_EXPORT int32_t lh_tokenizer_vocab_size(const lh_tokenizer *t);
/* The id of a token string (model vocab or added token), or -1. */
LH_EXPORT int32_t lh_tokenizer_token_to_id(const lh_tokenizer *t, const char *token);
/* The token string of an id (owned by the tokenizer), or NULL when no token has that id. */
LH_EXPORT const char *lh_tokenizer_id_to_token(const lh_tokenizer *t, int32_t id);
/* Whether id is an added token marked special. */
LH_EXPORT bool lh_tokenizer_is_special(const lh_tokenizer *t, int32_t id);

/* What a token string stands for, as its decoder reads it (what stop strings are matched
 * against; transformers tells the decoders apart the same way). */
typedef enum lh_byte_mode {
    LH_BYTE_MODE_TEXT = 0,     /* text: a token stands for its characters */
    LH_BYTE_MODE_LEVEL = 1,    /* byte-level: each character stands for one byte (GPT-2's map) */
    LH_BYTE_MODE_FALLBACK = 2, /* SentencePiece style: a "<0xNN>" token stands for byte NN */
} lh_byte_mode;
/* A ByteLevel decoder (at the top) is LEVEL; else a ByteFallback anywhere in the decoder is
 * FALLBACK; else a ByteLevel anywhere is LEVEL; else (or no decoder) TEXT. NULL is TEXT. */
LH_EXPORT lh_byte_mode lh_tokenizer_byte_mode(const lh_tokenizer *t);
/* The bytes token id stands for, read as lh_byte_mode says (the strings lh_stop_matcher
 * matches): a byte-level token's bytes and a "<0xNN>" byte-fallback token's byte -- possibly
 * part of a UTF-8 character, so not always valid UTF-8 -- otherwise the token decoded after
 * a fixed prefix (so that a leading space survives); special tokens as written. *out is
 * malloc'ed and NUL-terminated (*len without the NUL), or NULL with *len 0 for an id no
 * token has. Errors: LH_E_USAGE (a NULL argument), LH_E_NOMEM. [concurrent] */
LH_EXPORT lh_status lh_tokenizer_token_bytes(const lh_tokenizer *t, int32_t id, char **out,
                                             size_t *len, lh_err *err);

/* Encodes len bytes of UTF-8 text. add_special_tokens applies the post-processor (e.g. a BOS
 * token), as transformers' tokenizer(text) does by default. *ids (malloc'ed, may be NULL when
 * *n_ids is 0) receives the ids.
 * Errors: LH_E_USAGE (text is not valid UTF-8, with the byte offset), LH_E_NOMEM. */
LH_EXPORT lh_status lh_tokenizer_encode(const lh_tokenizer *t, const char *text, size_t len,
                                        bool add_special_tokens, int32_t **ids, size_t *n_ids,
                                        lh_err *err);

/* Decodes ids through the decoder into a NUL-terminated UTF-8 string (*text, malloc'ed; *len
 * its length without the NUL). Invalid byte sequences (e.g. a lone byte-fallback token) come
 * out as U+FFFD, as in `tokenizers`. skip_special_tokens drops special added tokens.
 * Errors: LH_E_USAGE (an id no token has, named), LH_E_NOMEM. */
LH_EXPORT lh_status lh_tokenizer_decode(const lh_tokenizer *t, const int32_t *ids, size_t n_ids,
                                        bool skip_special_tokens, char **text, size_t *len,
                                        lh_err *err);

/* Incremental decoding for streaming. Each step adds one id and returns the text it completes;
 * text that ends in an incomplete UTF-8 sequence (decoded as a trailing U+FFFD) is held back
 * until a later id completes it or lh_detok_stream_finish releases it. Every chunk is valid
 * UTF-8, and the chunks of all steps plus finish concatenate to lh_tokenizer_decode of all ids,
 * with one exception: byte-fallback bytes that never complete a character (the stream ends
 * first) decode as a group in `tokenizers`, which can turn an earlier, already returned
 * character of the same group into U+FFFD; finish then returns the held ids decoded alone.
 * The stream keeps a reference to t (t must outlive it) and re-decodes the ids it holds at each
 * step (cost grows with the length of the stream). Every stream function is [exclusive] per
 * stream (different streams over one tokenizer may run at once). */
typedef struct lh_detok_stream lh_detok_stream;

/* Errors: LH_E_NOMEM. */
LH_EXPORT lh_status lh_detok_stream_create(const lh_tokenizer *t, bool skip_special_tokens,
                                           lh_detok_stream **out, lh_err *err);
/* *chunk: malloc'ed, NUL-terminated, possibly empty; *len its length.
 * Errors: as lh_tokenizer_decode; the id is not kept on error. */
LH_EXPORT lh_status lh_detok_stream_step(lh_detok_stream *s, int32_t id, char **chunk,
                                         size_t *len, lh_err *err);
/* Returns whatever is still held back (possibly with U+FFFD for bytes never completed). */
LH_EXPORT lh_status lh_detok_stream_finish(lh_detok_stream *s, char **chunk, size_t *len,
                                           lh_err *err);
/* NULL is ok. */
LH_EXPORT void lh_detok_stream_free(lh_detok_stream *s);

/* ---- stop strings ---------------------------------------------------------------------- */

/* Stop strings for one sequence, matched as transformers' generate(stop_strings=...)
 * (StopStringCriteria) matches them. Each token stands for a string, read as
 * lh_tokenizer_byte_mode says: its bytes for a byte-level token and for a "<0xNN>"
 * byte-fallback token, otherwise the token decoded after a fixed prefix with the prefix cut
 * off (so a leading space survives); special tokens as written; an id no token has (a model
 * vocabulary padded beyond the tokenizer's) stands for nothing. After each new token the
 * strings of the last W tokens of context + output (W: the longest stop string in bytes, in
 * characters for a TEXT tokenizer) are concatenated and searched, byte for byte, for a stop
 * string that ends inside the new token. So a stop string may span tokens, begin or end
 * inside a token -- even between the bytes of one UTF-8 character -- and begin in the
 * context; one wholly inside the context never matches.
 * What a match means is the caller's to apply; transformers (and `llmhost run --stop`) keep
 * the token that completed the string as the sequence's last, so the output text contains
 * the stop string and the rest of that token. Nothing emitted is then ever taken back, so a
 * stream holds nothing back for stop strings: stream the text with lh_detok_stream (which
 * never splits a UTF-8 sequence), feed the same ids to the matcher, and end the sequence
 * after the token that matched (lh_generate_params.finish). The matcher returns no text and
 * needs no flush.
 * Limits: 1 to LH_STOP_STRINGS_MAX strings per matcher, each 1 to LH_STOP_STRING_MAX_BYTES
 * bytes of valid UTF-8.
 * Ownership and threads: a matcher copies its strings and keeps a reference to its tokenizer,
 * which must outlive it; it holds the strings of its last W tokens, nothing per vocabulary
 * (one per request is cheap). Matchers over one tokenizer are independent: any number may
 * run at once, each on one thread at a time. */
#define LH_STOP_STRINGS_MAX 64
#define LH_STOP_STRING_MAX_BYTES 1024

typedef struct lh_stop_matcher lh_stop_matcher;

/* Checks stop strings against the limits without a tokenizer (lh_stop_matcher_create checks
 * the same), e.g. before a model loads. Errors, all LH_E_USAGE, the first found (I: the
 * string's index): "no stop strings (at least 1)" (n 0), "N stop strings: at most 64",
 * "stop strings: the array is NULL", "stop string I is NULL", "stop string I is empty",
 * "stop string I is N bytes long: at most 1024", "stop string I is not valid UTF-8 (byte
 * B)" (B: the offset of the first ill-formed byte). [concurrent] */
LH_EXPORT lh_status lh_stop_strings_check(const char *const *strs, size_t n, lh_err *err);
/* A matcher of strs[0..n) over t's tokens, with no context yet; strs is only read during
 * the call. *out is the caller's (lh_stop_matcher_free), NULL on error.
 * Errors: LH_E_USAGE for a NULL out or t ("lh_stop_matcher_create: ... is NULL") and
 * whatever lh_stop_strings_check refuses, with its message; LH_E_NOMEM. [concurrent] (it only
 * reads t, as t's other functions do) */
LH_EXPORT lh_status lh_stop_matcher_create(const lh_tokenizer *t, const char *const *strs,
                                           size_t n, lh_stop_matcher **out, lh_err *err);
/* Appends ids that precede the output (the prompt; may be called again, e.g. for a prompt
 * given in pieces): a stop string may begin in them but matches only when a later step's
 * token ends it. Only their last W ids are kept. ids may be NULL when n is 0.
 * Errors: LH_E_USAGE for a NULL m or ids, or a negative id ("token id -1 (position 3) is
 * negative"); LH_E_NOMEM. On error the context is as before the call. [exclusive] */
LH_EXPORT lh_status lh_stop_matcher_add_context(lh_stop_matcher *m, const int32_t *ids,
                                                size_t n, lh_err *err);
/* Adds one generated token id: *matched tells whether a stop string ends inside it, and
 * *which (which may be NULL) is the index, in the order given to create, of the first stop
 * string that does (SIZE_MAX when none). Steps may go on after a match (the window moves on
 * as if the sequence continued). An id no token has (at or beyond lh_tokenizer_vocab_size)
 * stands for nothing and is no error.
 * Errors: LH_E_USAGE for a NULL m or matched, or a negative id ("token id -1 is negative");
 * LH_E_NOMEM (*matched false). On error the token is not added. [exclusive] */
LH_EXPORT lh_status lh_stop_matcher_step(lh_stop_matcher *m, int32_t id, bool *matched,
                                         size_t *which, lh_err *err);
/* NULL is ok. [exclusive] */
LH_EXPORT void lh_stop_matcher_free(lh_stop_matcher *m);

/* ---- chat templates -------------------------------------------------------------------- */

/* A model's chat template (tokenizer_config.json's `chat_template`, Jinja, or a GGUF file's
 * tokenizer.chat_template) with the special tokens the template sees (bos_token, eos_token,
 * unk_token, sep_token, pad_token, cls_token, mask_token, as transformers passes them),
 * rendered by an interpreter for the Jinja subset that the Llama 2/3, Mistral, Qwen2 and
 * SmolLM families' templates use; for the templates and conversations of tests/fixtures/chat
 * the output equals transformers' apply_chat_template(..., tokenize=False). host/chat/jinja.h
 * lists the subset.
 * Ownership: an lh_chat_template is immutable after loading; every function taking a const
 * lh_chat_template * is [concurrent]; lh_chat_template_free is [exclusive]. Rendered strings are malloc'ed and the caller's (free()).
 * Errors of the loaders: LH_E_IO (the file cannot be read, path named), LH_E_CONFIG (malformed
 * JSON with line:column, no chat_template, a chat_template list without "default", a wrong
 * type; a template syntax error with the template's line:column), LH_E_UNSUPPORTED (a Jinja
 * construct outside the subset, named, with line:column), LH_E_NOMEM. On error *out is NULL. */
typedef struct lh_chat_template lh_chat_template;

/* Opens the chat template of a model: path is a model directory (its tokenizer_config.json),
 * a model's config.json (the tokenizer_config.json next to it), a tokenizer_config.json, or a
 * GGUF source (as lh_tokenizer_open says; read as lh_chat_template_load_gguf reads it).
 * `chat_template` may be a string or a list of {"name", "template"} (the one named "default"
 * is used). */
LH_EXPORT lh_status lh_chat_template_open(const char *path, lh_chat_template **out,
                                          lh_err *err);
/* The same from tokenizer_config.json text in memory; origin names it in messages. */
LH_EXPORT lh_status lh_chat_template_load_json(const char *text, size_t len, const char *origin,
                                               lh_chat_template **out, lh_err *err);
/* The chat template of a GGUF file: tokenizer.chat_template (the default template; named ones,
 * tokenizer.chat_template.NAME, are not used) and as special tokens the token strings of
 * tokenizer.ggml.bos_token_id, eos_token_id, unknown_token_id, seperator_token_id,
 * padding_token_id, cls_token_id and mask_token_id (those present). *out is the caller's; the
 * file is not kept open. Errors: the GGUF reader's for the file; LH_E_CONFIG for no
 * tokenizer.chat_template (the same class as a tokenizer_config.json without chat_template,
 * naming the key), a template that is not a string or not UTF-8, an id key that is not a token
 * id of tokenizer.ggml.tokens; a template syntax error as lh_chat_template_from_string. */
LH_EXPORT lh_status lh_chat_template_load_gguf(const char *path, lh_chat_template **out,
                                               lh_err *err);
/* A template from its Jinja source (len bytes); special_tokens_json: NULL or a JSON object of
 * strings ({"bos_token": "<s>", ...}) the template sees as variables (LH_E_USAGE if it is
 * not one). */
LH_EXPORT lh_status lh_chat_template_from_string(const char *source, size_t len,
                                                 const char *special_tokens_json,
                                                 lh_chat_template **out, lh_err *err);
/* NULL is ok. */
LH_EXPORT void lh_chat_template_free(lh_chat_template *t);
/* The template's Jinja source (owned by t). */
LH_EXPORT const char *lh_chat_template_source(const lh_chat_template *t);
/* A special token string by name ("bos_token", ...; owned by t), or NULL when not set. */
LH_EXPORT const char *lh_chat_template_special_token(const lh_chat_template *t,
                                                     const char *name);

typedef struct lh_chat_message {
    const char *role;    /* "system", "user", "assistant", ... (UTF-8) */
    const char *content; /* UTF-8 */
} lh_chat_message;

typedef struct lh_chat_render_options {
    uint32_t struct_size; /* sizeof(lh_chat_render_options) */
    /* end with the template's prompt for the assistant's turn */
    bool add_generation_prompt;
    /* NULL, or a JSON array of tool schemas ({"type": "function", "function": {...}}): the
     * template's `tools` (none otherwise) */
    const char *tools_json;
    /* NULL, or a JSON object of further template variables (e.g. {"date_string": "26 Jul
     * 2024"}); they override the special tokens, as apply_chat_template's kwargs do */
    const char *extra_json;
    /* strftime_now's clock: when fixed_now, now_unix (seconds since the epoch) in UTC; else
     * the current local time, as transformers' datetime.now() */
    bool fixed_now;
    int64_t now_unix;
} lh_chat_render_options;

/* Renders the conversation into *out (NUL-terminated UTF-8; *len its length, len may be
 * NULL). opt NULL: no generation prompt, no tools, the current time. The template sees
 * messages (a list of {role, content}), tools, documents (none), add_generation_prompt and
 * the special tokens, then the extra variables.
 * Errors: LH_E_USAGE for NULL arguments, a struct_size smaller than this library's, text that
 * is not UTF-8, malformed tools/extra JSON, and raise_exception() in the template (the message
 * ends with the template's own message, e.g. "Conversation roles must alternate
 * user/assistant/user/assistant/..."); LH_E_CONFIG for a runtime type error in the template
 * (line:column); LH_E_UNSUPPORTED for a method, function or value outside the subset, or a
 * bound exceeded (1e6 loop iterations, 64 MiB strings, values nested 256 deep); LH_E_NOMEM. */
LH_EXPORT lh_status lh_chat_template_render(const lh_chat_template *t,
                                            const lh_chat_message *messages, size_t n_messages,
                                            const lh_chat_render_options *opt, char **out,
                                            size_t *len, lh_err *err);
/* The same with the messages as a JSON array of objects (any keys, e.g. "tool_calls"), as
 * transformers takes them. Errors: as above; malformed messages JSON is LH_E_USAGE. */
LH_EXPORT lh_status lh_chat_template_render_json(const lh_chat_template *t,
                                                 const char *messages_json,
                                                 const lh_chat_render_options *opt, char **out,
                                                 size_t *len, lh_err *err);

/* Writes data [rows, cols] float32 to `path` as a NumPy .npy file ('<f4', C order), the
 * format of `llmhost logits --out`. Errors: LH_E_IO naming the path. */
LH_EXPORT lh_status lh_save_npy_f32(const char *path, const float *data, int64_t rows,
                                    int64_t cols, lh_err *err);

#ifdef __cplusplus
}
#endif
#endif
