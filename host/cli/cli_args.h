/* The llmhost CLI: argument parsing shared by every command. */
#ifndef LH_CLI_ARGS_H
#define LH_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#define LH_CLI_MAX_DIRS 64
#define LH_CLI_MAX_OVERRIDES 16

typedef struct lh_cli_args {
    const char *command;
    const char *model;
    const char *config_file;
    const char *custom_dirs[LH_CLI_MAX_DIRS];
    size_t n_custom_dirs;
    /* "key=value" run-config overrides from flags; owned by the struct */
    char *overrides[LH_CLI_MAX_OVERRIDES + 1];
    size_t n_overrides;
    /* run / logits */
    const char *prompt_tokens[LH_CLI_MAX_DIRS]; /* --prompt-tokens, one per sequence */
    size_t n_prompts;
    const char *prompts[LH_CLI_MAX_DIRS]; /* run -p / --prompt TEXT, one per sequence */
    size_t n_text_prompts;
    const char *text;      /* tokenize --text */
    const char *text_file; /* tokenize --text-file */
    bool no_special;       /* tokenize --no-special: no post-processor (BOS etc.) */
    bool chat;             /* run --chat: each -p is a user message through the chat template */
    const char *tokens;   /* --tokens */
    const char *out_file; /* --out */
    long max_new;         /* -n / --max-new-tokens; -1 when not given */
    /* run: sampling (each *_given when the flag was on the command line; ranges checked) */
    double temperature, top_p, min_p, repetition_penalty;
    long top_k;
    unsigned long long seed;
    bool temperature_given, top_p_given, min_p_given, repetition_penalty_given, top_k_given,
         seed_given, ignore_eos;
    int stop_ids[LH_CLI_MAX_DIRS]; /* --stop-token-id, repeatable */
    size_t n_stop_ids;
    const char *stop_strings[LH_CLI_MAX_DIRS]; /* --stop STRING, repeatable, never empty */
    size_t n_stop_strings;
    /* bench */
    const char *contexts; /* --context N[,N...] (checked by the bench command) */
    const char *batches;  /* --batch B[,B...] */
    long warmup;          /* --warmup N; -1 when not given */
    bool verbose;         /* --verbose: run prints its timings to stderr */
    int threads;          /* --threads; 0: every core */
    bool batch_size_given; /* --max-batch-size was on the command line */
    /* serve */
    const char *listen_host;   /* --host; NULL: 127.0.0.1 */
    long port;                 /* --port; -1 when not given (8000) */
    const char *api_key;       /* --api-key; NULL: $LLMHOST_API_KEY, else none */
    const char *served_name;   /* --served-model-name */
    long max_batched_tokens;   /* --max-num-batched-tokens; 0 when not given */
    bool no_prefix_caching;    /* --no-prefix-caching */
    long max_requests;         /* --max-requests; 0 when not given */
    long max_body_bytes;       /* --max-body-bytes; 0 when not given */
    long idle_timeout;         /* --timeout SECONDS; -1 when not given */
    bool json;
    bool help;
    bool allow_insecure;
    const char *log_level;
} lh_cli_args;

/* Parses argv[1..]. Returns 0, or 2 (usage) after printing the reason to stderr. */
int lh_cli_parse(int argc, char **argv, lh_cli_args *a);
void lh_cli_args_free(lh_cli_args *a);

#endif
