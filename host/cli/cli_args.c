#include "cli_args.h"
#include "core/strutil.h"

#include "llmhost.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_JSON = 1000,
    OPT_CONFIG,
    OPT_CUSTOM_DIR,
    OPT_INSECURE,
    OPT_LOG_LEVEL,
    OPT_PROMPT_TOKENS,
    OPT_TOKENS,
    OPT_OUT,
    OPT_THREADS,
    OPT_SET,
    OPT_CONTEXT,
    OPT_BATCH,
    OPT_WARMUP,
    OPT_VERBOSE,
    OPT_TEMPERATURE,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_REPETITION_PENALTY,
    OPT_SEED,
    OPT_STOP_TOKEN_ID,
    OPT_STOP,
    OPT_IGNORE_EOS,
    OPT_TEXT,
    OPT_TEXT_FILE,
    OPT_NO_SPECIAL,
    OPT_CHAT,
    OPT_HOST,
    OPT_PORT,
    OPT_API_KEY,
    OPT_SERVED_NAME,
    OPT_MAX_BATCHED,
    OPT_NO_PREFIX,
    OPT_MAX_REQUESTS,
    OPT_MAX_BODY,
    OPT_TIMEOUT,
};

/* The options of the CLI itself; the run-config keys with a dedicated flag come from the key
 * table (lh_run_config_key_at) and are appended at parse time, as OPT_KEY + their index. */
#define OPT_KEY 2000
static const struct option own_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"json", no_argument, NULL, OPT_JSON},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"custom-module-dir", required_argument, NULL, OPT_CUSTOM_DIR},
    {"allow-insecure-plugins", no_argument, NULL, OPT_INSECURE},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"prompt-tokens", required_argument, NULL, OPT_PROMPT_TOKENS},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"out", required_argument, NULL, OPT_OUT},
    {"max-new-tokens", required_argument, NULL, 'n'},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"set", required_argument, NULL, OPT_SET},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"top-p", required_argument, NULL, OPT_TOP_P},
    {"min-p", required_argument, NULL, OPT_MIN_P},
    {"repetition-penalty", required_argument, NULL, OPT_REPETITION_PENALTY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"stop-token-id", required_argument, NULL, OPT_STOP_TOKEN_ID},
    {"stop", required_argument, NULL, OPT_STOP},
    {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
    {"prompt", required_argument, NULL, 'p'},
    {"text", required_argument, NULL, OPT_TEXT},
    {"text-file", required_argument, NULL, OPT_TEXT_FILE},
    {"no-special", no_argument, NULL, OPT_NO_SPECIAL},
    {"chat", no_argument, NULL, OPT_CHAT},
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"api-key", required_argument, NULL, OPT_API_KEY},
    {"served-model-name", required_argument, NULL, OPT_SERVED_NAME},
    {"max-num-batched-tokens", required_argument, NULL, OPT_MAX_BATCHED},
    {"no-prefix-caching", no_argument, NULL, OPT_NO_PREFIX},
    {"max-requests", required_argument, NULL, OPT_MAX_REQUESTS},
    {"max-body-bytes", required_argument, NULL, OPT_MAX_BODY},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {NULL, 0, NULL, 0},
};

#define N_OWN (sizeof own_options / sizeof *own_options - 1)
#define MAX_KEY_FLAGS 64

/* own_options followed by the table's flags, and each flag's key info. */
static size_t build_options(struct option *opts, lh_run_config_key_info *info)
{
    memcpy(opts, own_options, N_OWN * sizeof *opts);
    size_t n = N_OWN, k = 0;
    lh_run_config_key_info ki = {.struct_size = sizeof ki};
    for (size_t i = 0; lh_run_config_key_at(i, &ki) && k < MAX_KEY_FLAGS; i++) {
        if (!ki.flag || strncmp(ki.flag, "--", 2) != 0)
            continue;
        info[k] = ki;
        opts[n++] = (struct option){ki.flag + 2, ki.flag_takes_value ? required_argument
                                                                      : no_argument,
                                    NULL, OPT_KEY + (int)k};
        k++;
        ki = (lh_run_config_key_info){.struct_size = sizeof ki};
    }
    opts[n] = (struct option){NULL, 0, NULL, 0};
    return k;
}

/* A whole decimal number in [lo, hi]; prints the reason and returns 2 otherwise. */
static int parse_long(const char *cmd, const char *flag, const char *text, long lo, long hi,
                      long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "llmhost %s: %s '%s' must be a whole number from %ld to %ld\n", cmd, flag,
                text, lo, hi);
        return 2;
    }
    *out = v;
    return 0;
}

/* A finite decimal number in the range `what` describes (lo, lo_open, hi, hi_open); prints the
 * reason and returns 2 otherwise. */
static int parse_double(const char *cmd, const char *flag, const char *text, double lo,
                        bool lo_open, double hi, const char *what, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi) {
        fprintf(stderr, "llmhost %s: %s '%s' must be %s\n", cmd, flag, text, what);
        return 2;
    }
    *out = v;
    return 0;
}

static int add_override(lh_cli_args *a, const char *key, const char *value)
{
    if (a->n_overrides == LH_CLI_MAX_OVERRIDES) {
        fprintf(stderr, "llmhost: too many run-config flags\n");
        return 2;
    }
    size_t n = strlen(key) + strlen(value) + 2;
    char *kv = malloc(n);
    if (!kv) {
        fprintf(stderr, "llmhost: out of memory\n");
        return 2;
    }
    snprintf(kv, n, "%s=%s", key, value);
    a->overrides[a->n_overrides++] = kv;
    a->overrides[a->n_overrides] = NULL;
    return 0;
}

void lh_cli_args_free(lh_cli_args *a)
{
    for (size_t i = 0; i < a->n_overrides; i++)
        free(a->overrides[i]);
    a->n_overrides = 0;
}

int lh_cli_parse(int argc, char **argv, lh_cli_args *a)
{
    memset(a, 0, sizeof *a);
    a->max_new = -1;
    a->warmup = -1;
    a->port = -1;
    a->idle_timeout = -1;
    if (argc < 2) {
        a->help = true;
        return 0;
    }
    a->command = argv[1];
    if (strcmp(a->command, "-h") == 0 || strcmp(a->command, "--help") == 0) {
        a->command = NULL;
        a->help = true;
        return 0;
    }
    /* the command is what the user meant first: an unknown one is reported before any of
     * its options is read (those belong to the command, so they cannot be judged without it) */
    static const char *const commands[] = {"list",   "resolve", "explain", "backends",
                                           "run",    "serve",   "tokenize", "logits", "bench",
                                           "plugin", "version", "help"};
    const size_t n_commands = sizeof commands / sizeof *commands;
    bool known = strcmp(a->command, "--version") == 0;
    for (size_t i = 0; !known && i < n_commands; i++)
        known = strcmp(a->command, commands[i]) == 0;
    if (!known) {
        char list[160];
        const char *near = lh_nearest(a->command, commands, n_commands);
        fprintf(stderr, "llmhost: error [usage]: unknown command '%s'%s%s%s; commands: %s\n",
                a->command, near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "",
                lh_join_names(list, sizeof list, commands, n_commands));
        return LH_E_USAGE;
    }
    optind = 2;
    opterr = 0;
    int c, rc = 0;
    struct option options[N_OWN + MAX_KEY_FLAGS + 1];
    lh_run_config_key_info keys[MAX_KEY_FLAGS];
    const size_t n_keys = build_options(options, keys);
    while (rc == 0 && (c = getopt_long(argc, argv, ":hn:p:", options, NULL)) != -1) {
        if (c >= OPT_KEY && (size_t)(c - OPT_KEY) < n_keys) {
            /* a run-config key's own flag: an override "flag-name=VALUE", which the run
             * config checks like --set (its messages name the flag) */
            const lh_run_config_key_info *k = &keys[c - OPT_KEY];
            if (strcmp(k->name, "max_batch_size") == 0)
                a->batch_size_given = true;
            rc = add_override(a, k->flag + 2, k->flag_takes_value ? optarg : "true");
            continue;
        }
        switch (c) {
        case 'h': a->help = true; break;
        case OPT_JSON: a->json = true; break;
        case OPT_CONFIG: a->config_file = optarg; break;
        case OPT_CUSTOM_DIR:
            if (a->n_custom_dirs == LH_CLI_MAX_DIRS) {
                fprintf(stderr, "llmhost: at most %d --custom-module-dir\n", LH_CLI_MAX_DIRS);
                rc = 2;
            } else {
                a->custom_dirs[a->n_custom_dirs++] = optarg;
            }
            break;
        case OPT_INSECURE: a->allow_insecure = true; break;
        case OPT_PROMPT_TOKENS:
            if (a->n_prompts == LH_CLI_MAX_DIRS) {
                fprintf(stderr, "llmhost: at most %d --prompt-tokens\n", LH_CLI_MAX_DIRS);
                rc = 2;
            } else {
                a->prompt_tokens[a->n_prompts++] = optarg;
            }
            break;
        case 'p':
            if (a->n_text_prompts == LH_CLI_MAX_DIRS) {
                fprintf(stderr, "llmhost: at most %d -p/--prompt\n", LH_CLI_MAX_DIRS);
                rc = 2;
            } else {
                a->prompts[a->n_text_prompts++] = optarg;
            }
            break;
        case OPT_TEXT: a->text = optarg; break;
        case OPT_TEXT_FILE: a->text_file = optarg; break;
        case OPT_NO_SPECIAL: a->no_special = true; break;
        case OPT_CHAT: a->chat = true; break;
        case OPT_HOST: a->listen_host = optarg; break;
        case OPT_PORT: rc = parse_long(a->command, "--port", optarg, 0, 65535, &a->port); break;
        case OPT_API_KEY: a->api_key = optarg; break;
        case OPT_SERVED_NAME: a->served_name = optarg; break;
        case OPT_MAX_BATCHED:
            rc = parse_long(a->command, "--max-num-batched-tokens", optarg, 1, 1L << 24,
                            &a->max_batched_tokens);
            break;
        case OPT_NO_PREFIX: a->no_prefix_caching = true; break;
        case OPT_MAX_REQUESTS:
            rc = parse_long(a->command, "--max-requests", optarg, 1, 100000, &a->max_requests);
            break;
        case OPT_MAX_BODY:
            rc = parse_long(a->command, "--max-body-bytes", optarg, 1024, 1L << 30,
                            &a->max_body_bytes);
            break;
        case OPT_TIMEOUT:
            rc = parse_long(a->command, "--timeout", optarg, 1, 86400, &a->idle_timeout);
            break;
        case OPT_TOKENS: a->tokens = optarg; break;
        case OPT_OUT: a->out_file = optarg; break;
        case 'n': rc = parse_long(a->command, "-n", optarg, 0, 1L << 30, &a->max_new); break;
        case OPT_THREADS: {
            /* the kernel library enforces its own limit and says so */
            long t = 0;
            rc = parse_long(a->command, "--threads", optarg, 1, 1L << 20, &t);
            a->threads = (int)t;
            break;
        }
        case OPT_SET: { /* any run-config override KEY=VALUE (lh_run_config_set checks it) */
            const char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg) {
                fprintf(stderr, "llmhost %s: --set '%s' is not KEY=VALUE (e.g. --set "
                        "kv_cache.dtype=fp8)\n", a->command, optarg);
                rc = 2;
                break;
            }
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)(eq - optarg) < 127 ? (int)(eq - optarg) : 127,
                     optarg);
            rc = add_override(a, key, eq + 1);
            break;
        }
        case OPT_CONTEXT: a->contexts = optarg; break;
        case OPT_BATCH: a->batches = optarg; break;
        case OPT_WARMUP: rc = parse_long(a->command, "--warmup", optarg, 0, 100, &a->warmup); break;
        case OPT_VERBOSE: a->verbose = true; break;
        case OPT_TEMPERATURE:
            a->temperature_given = true;
            rc = parse_double(a->command, "--temperature", optarg, 0, false, HUGE_VAL,
                              "a number >= 0 (0: greedy)", &a->temperature);
            break;
        case OPT_TOP_K:
            a->top_k_given = true;
            rc = parse_long(a->command, "--top-k", optarg, 0, 1L << 30, &a->top_k);
            break;
        case OPT_TOP_P:
            a->top_p_given = true;
            rc = parse_double(a->command, "--top-p", optarg, 0, false, 1, "a number in [0, 1]",
                              &a->top_p);
            break;
        case OPT_MIN_P:
            a->min_p_given = true;
            rc = parse_double(a->command, "--min-p", optarg, 0, false, 1, "a number in [0, 1]",
                              &a->min_p);
            break;
        case OPT_REPETITION_PENALTY:
            a->repetition_penalty_given = true;
            rc = parse_double(a->command, "--repetition-penalty", optarg, 0, true, HUGE_VAL,
                              "a number > 0 (1: off)", &a->repetition_penalty);
            break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = optarg[0] >= '0' && optarg[0] <= '9'
                                       ? strtoull(optarg, &end, 10) : (end = optarg, 0);
            if (errno || end == optarg || *end) {
                fprintf(stderr, "llmhost %s: --seed '%s' must be a whole number from 0 to "
                        "18446744073709551615\n", a->command, optarg);
                rc = 2;
            }
            a->seed = v;
            a->seed_given = true;
            break;
        }
        case OPT_STOP_TOKEN_ID: {
            long v = 0;
            if (a->n_stop_ids == LH_CLI_MAX_DIRS) {
                fprintf(stderr, "llmhost: at most %d --stop-token-id\n", LH_CLI_MAX_DIRS);
                rc = 2;
            } else if ((rc = parse_long(a->command, "--stop-token-id", optarg, 0, INT32_MAX,
                                        &v)) == 0) {
                a->stop_ids[a->n_stop_ids++] = (int)v;
            }
            break;
        }
        case OPT_STOP:
            if (a->n_stop_strings == LH_CLI_MAX_DIRS) {
                fprintf(stderr, "llmhost: at most %d --stop\n", LH_CLI_MAX_DIRS);
                rc = 2;
            } else if (!optarg[0]) {
                fprintf(stderr, "llmhost %s: --stop needs a non-empty string\n", a->command);
                rc = 2;
            } else {
                a->stop_strings[a->n_stop_strings++] = optarg;
            }
            break;
        case OPT_IGNORE_EOS: a->ignore_eos = true; break;
        case OPT_LOG_LEVEL:
            if (strcmp(optarg, "error") && strcmp(optarg, "warn") && strcmp(optarg, "info") &&
                strcmp(optarg, "debug")) {
                fprintf(stderr, "llmhost %s: --log-level '%s' is not one of error, warn, info, "
                        "debug\n", a->command, optarg);
                rc = 2;
            }
            a->log_level = optarg;
            break;
        case ':':
            fprintf(stderr, "llmhost %s: option %s needs a value\n", a->command, argv[optind - 1]);
            rc = 2;
            break;
        default:
            fprintf(stderr, "llmhost %s: unknown option '%s' (see llmhost %s --help)\n",
                    a->command, argv[optind - 1], a->command);
            rc = 2;
            break;
        }
    }
    if (rc == 0 && optind < argc)
        a->model = argv[optind++];
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "llmhost %s: unexpected argument '%s'\n", a->command, argv[optind]);
        rc = 2;
    }
    return rc;
}
