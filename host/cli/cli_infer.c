/* llmhost run / logits: inference from token ids. */
#include "cli_commands.h"

#include "llmhost.h"

#include <jansson.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int report(const lh_err *err)
{
    fprintf(stderr, "llmhost: error [%s]: %s\n", lh_status_name(err->code), err->msg);
    return (int)err->code;
}

/* "1,2,3" -> ids. Returns 0, or 2 after printing why. *ids malloc'ed. */
static int parse_ids(const char *cmd, const char *flag, const char *text, int32_t **ids,
                     int64_t *n)
{
    *ids = NULL;
    *n = 0;
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) {
        fprintf(stderr, "llmhost %s: out of memory\n", cmd);
        return 2;
    }
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        /* digits only: strtol alone would also take " 1" and "+1" */
        long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : (end = (char *)p, 0);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "llmhost %s: %s '%s': token %lld is not an id (a whole number >= 0 "
                    "in a comma-separated list)\n", cmd, flag, text, (long long)*n);
            free(out);
            return 2;
        }
        out[(*n)++] = (int32_t)v;
        if (!*end)
            break;
        p = end + 1;
    }
    *ids = out;
    return 0;
}

static int open_engine(const lh_cli_args *a, char *const *overrides, lh_host **h,
                       lh_engine **e, lh_err *err)
{
    *e = NULL;
    if (a->log_level) /* before the library's first log line, which reads it */
        setenv("LLMHOST_LOG", a->log_level, 1);
    lh_host_options opts = {.struct_size = sizeof opts,
                            .allow_insecure_plugins = a->allow_insecure};
    lh_status st = lh_validate_run_config(a->config_file, (const char *const *)overrides, err);
    if (st == LH_OK)
        st = lh_host_create(&opts, h, err);
    for (size_t i = 0; st == LH_OK && i < a->n_custom_dirs; i++)
        st = lh_host_add_custom_dir(*h, a->custom_dirs[i], err);
    if (st == LH_OK)
        st = lh_host_add_custom_dirs_from_env(*h, err);
    lh_engine_options eo = {.struct_size = sizeof eo, .model = a->model,
                            .config_file = a->config_file,
                            .overrides = (const char *const *)overrides,
                            .n_threads = a->threads};
    if (st == LH_OK)
        st = lh_engine_open(*h, &eo, e, err);
    return (int)st;
}

static const char run_help[] =
    "usage: llmhost run MODEL --prompt-tokens IDS [--prompt-tokens IDS]... [-n N] [--json]\n"
    "       [--verbose] [--threads N] [--attn-backend NAME] [--config FILE.yaml]\n"
    "       [run-config flags]\n"
    "Greedy generation from token ids (comma-separated), all prompts in one batch (the batch\n"
    "size defaults to the number of prompts). Exactly N tokens per prompt: end-of-sequence\n"
    "ids do not stop generation yet.\n"
    "-n N (--max-new-tokens) new tokens per prompt (default 32). With --json, one line per\n"
    "prompt: {\"tokens\": [generated ids]}.\n"
    "--verbose prints the timings of the prefill and the decode steps to stderr (see\n"
    "`llmhost bench --help` for what each covers).\n";

int lh_cli_run(const lh_cli_args *a)
{
    if (a->help) {
        printf("%s\n%s", run_help, lh_cli_exit_status_text);
        return 0;
    }
    if (!a->model || a->n_prompts == 0) {
        fprintf(stderr, "llmhost run: MODEL and at least one --prompt-tokens are required\n");
        return LH_E_USAGE;
    }
    int64_t max_new = a->max_new >= 0 ? a->max_new : 32;
    int32_t *ids[LH_CLI_MAX_DIRS] = {0};
    int64_t lens[LH_CLI_MAX_DIRS] = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < a->n_prompts; i++)
        rc = parse_ids("run", "--prompt-tokens", a->prompt_tokens[i], &ids[i], &lens[i]);
    lh_err err = {0};
    lh_host *h = NULL;
    lh_engine *e = NULL;
    int32_t *out = NULL;
    /* `run` batches its prompts: without --max-batch-size (or a run config, which decides for
     * itself) the batch is as large as the number of prompts */
    char *ov[LH_CLI_MAX_OVERRIDES + 2] = {0};
    char batch[64];
    size_t n_ov = 0;
    for (; n_ov < a->n_overrides; n_ov++)
        ov[n_ov] = a->overrides[n_ov];
    if (!a->batch_size_given && !a->config_file && a->n_prompts > 1) {
        snprintf(batch, sizeof batch, "max-batch-size=%zu", a->n_prompts);
        ov[n_ov++] = batch;
    }
    if (rc == 0 && (rc = open_engine(a, ov, &h, &e, &err)) != 0)
        rc = report(&err);
    for (size_t s = 0; rc == 0 && s < a->n_prompts; s++)
        if (lens[s] + max_new - (max_new > 0) > lh_engine_max_seq_len(e)) {
            fprintf(stderr, "llmhost: error [usage]: prompt %zu (%lld tokens) + -n %lld exceeds "
                    "max_seq_len %lld; raise --max-seq-len or lower -n\n", s, (long long)lens[s],
                    (long long)max_new, (long long)lh_engine_max_seq_len(e));
            rc = LH_E_USAGE;
        }
    if (rc == 0) {
        out = malloc((size_t)(a->n_prompts * (size_t)(max_new ? max_new : 1)) * sizeof *out);
        if (!out) {
            fprintf(stderr, "llmhost run: out of memory\n");
            rc = LH_E_NOMEM;
        }
    }
    if (rc == 0 && lh_engine_generate_greedy(e, (const int32_t *const *)ids, lens,
                                             (int64_t)a->n_prompts, max_new, out, &err) != LH_OK)
        rc = report(&err);
    lh_generate_stats gs = {.struct_size = sizeof gs};
    if (rc == 0 && a->verbose && lh_engine_last_stats(e, &gs, &err) == LH_OK) {
        fprintf(stderr, "llmhost run: prefill %lld tokens in %.6f s (%.1f tok/s)",
                (long long)gs.prefill_tokens, gs.prefill_seconds,
                gs.prefill_seconds > 0 ? (double)gs.prefill_tokens / gs.prefill_seconds : 0.0);
        if (gs.decode_steps > 0)
            fprintf(stderr, "; decode %lld steps x %zu sequence%s = %lld tokens in %.6f s "
                    "(%.1f tok/s, %.3f ms/step)", (long long)gs.decode_steps, a->n_prompts,
                    a->n_prompts == 1 ? "" : "s", (long long)gs.decode_tokens,
                    gs.decode_seconds,
                    gs.decode_seconds > 0 ? (double)gs.decode_tokens / gs.decode_seconds : 0.0,
                    1e3 * gs.decode_seconds / (double)gs.decode_steps);
        fputc('\n', stderr);
    }
    for (size_t s = 0; rc == 0 && s < a->n_prompts; s++) {
        fputs(a->json ? "{\"tokens\": [" : "", stdout);
        for (int64_t k = 0; k < max_new; k++)
            printf("%s%d", k ? (a->json ? ", " : " ") : "", out[s * (size_t)max_new + (size_t)k]);
        fputs(a->json ? "]}\n" : "\n", stdout);
    }
    free(out);
    for (size_t i = 0; i < a->n_prompts; i++)
        free(ids[i]);
    lh_engine_close(e);
    lh_host_free(h);
    return rc;
}

static const char logits_help[] =
    "usage: llmhost logits MODEL --tokens IDS --out FILE.npy [--threads N] [--attn-backend NAME]\n"
    "       [--config FILE.yaml] [run-config flags]\n"
    "Writes the float32 logits of every position, shape [tokens, vocab], as a NumPy .npy file.\n";

int lh_cli_logits(const lh_cli_args *a)
{
    if (a->help) {
        printf("%s\n%s", logits_help, lh_cli_exit_status_text);
        return 0;
    }
    if (!a->model || !a->tokens || !a->out_file) {
        fprintf(stderr, "llmhost logits: MODEL, --tokens and --out are required\n");
        return LH_E_USAGE;
    }
    int32_t *ids;
    int64_t n;
    int rc = parse_ids("logits", "--tokens", a->tokens, &ids, &n);
    if (rc)
        return rc;
    lh_err err = {0};
    lh_host *h = NULL;
    lh_engine *e = NULL;
    float *logits = NULL;
    if ((rc = open_engine(a, a->overrides, &h, &e, &err)) != 0)
        rc = report(&err);
    int64_t vocab = rc == 0 ? lh_engine_vocab_size(e) : 0;
    if (rc == 0 && !(logits = malloc((size_t)n * (size_t)vocab * sizeof *logits))) {
        fprintf(stderr, "llmhost logits: out of memory for %lld x %lld logits\n", (long long)n,
                (long long)vocab);
        rc = LH_E_NOMEM;
    }
    if (rc == 0 && lh_engine_logits(e, ids, n, logits, &err) != LH_OK)
        rc = report(&err);
    if (rc == 0 && lh_save_npy_f32(a->out_file, logits, n, vocab, &err) != LH_OK)
        rc = report(&err);
    if (rc == 0 && a->json) {
        json_t *j = json_pack("{s:s,s:[I,I]}", "out", a->out_file, "shape", (json_int_t)n,
                              (json_int_t)vocab);
        char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (text)
            puts(text);
        free(text);
        json_decref(j);
    }
    free(logits);
    free(ids);
    lh_engine_close(e);
    lh_host_free(h);
    return rc;
}
