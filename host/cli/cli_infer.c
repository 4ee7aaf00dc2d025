/* llmhost run / logits: inference from token ids. */
#include "cli_commands.h"

#include "llmhost.h"

#include <jansson.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

int lh_cli_open_engine(const lh_cli_args *a, char *const *overrides, lh_host **h,
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
    "usage: llmhost run MODEL -p TEXT [-p TEXT]... [-n N] [--json]\n"
    "       llmhost run MODEL --prompt-tokens IDS [--prompt-tokens IDS]... [-n N] [--json]\n"
    "       [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]\n"
    "       [--seed S] [--stop-token-id ID]... [--ignore-eos] [--stop STRING]... [--chat]\n"
    "       [--verbose] [--threads N] [--attn-backend NAME] [--device auto|cpu|cuda[:N]]\n"
    "       [--config FILE.yaml] [run-config flags]\n"
    "Generation from token ids (comma-separated), all prompts in one batch (the batch size\n"
    "defaults to the number of prompts). Defaults come from the model's generation_config.json\n"
    "as transformers applies them (do_sample, temperature, top_k, top_p, min_p,\n"
    "repetition_penalty; eos_token_id as stop ids); without that file: greedy, with\n"
    "config.json's eos_token_id (if any) as stop ids.\n"
    "-n N (--max-new-tokens) new tokens per prompt at most (default 32).\n"
    "A prompt stops early after a stop token, which is printed as its last token (as\n"
    "transformers' generate() includes the eos token); the other prompts continue.\n"
    "--temperature T   T > 0 samples (T scales the logits); 0 is greedy\n"
    "--top-k K         keep the K most likely tokens (ties with the K-th all kept); 0: off\n"
    "--top-p P         nucleus: keep the smallest most-likely set with mass >= P, in [0, 1]\n"
    "--min-p P         keep tokens with probability >= P x the largest, in [0, 1]\n"
    "                  (--temperature > 0, --top-k, --top-p and --min-p turn sampling on,\n"
    "                  --temperature 0 turns it off)\n"
    "--repetition-penalty R  CTRL penalty (> 0, 1: off) on every id of prompt + output;\n"
    "                  applies to greedy too\n"
    "--seed S          sampling seed (default 0); the same seed gives the same tokens\n"
    "                  whatever --threads and the other prompts (prompt i draws from\n"
    "                  stream i)\n"
    "--stop-token-id ID  stop a prompt after ID (repeatable; replaces the model's eos ids)\n"
    "--ignore-eos      no stop ids: exactly N tokens per prompt\n"
    "--stop STRING     stop a prompt once STRING (non-empty UTF-8; repeatable, any one\n"
    "                  counts) is generated, as transformers' generate(stop_strings=...)\n"
    "                  does: after each new token, the text of the prompt + output tokens\n"
    "                  (each token's own string: its bytes for byte-level and <0xNN>\n"
    "                  tokens, special tokens as written) is searched for an occurrence\n"
    "                  that ends inside that token -- so a string may span several tokens,\n"
    "                  may begin in the prompt's last tokens, and one wholly inside the\n"
    "                  prompt does not count. The token that completed it is the output's\n"
    "                  last: the output keeps it, so the printed text contains the stop\n"
    "                  string (and whatever else that token holds), exactly as\n"
    "                  transformers' decode of the returned ids. Nothing printed is ever\n"
    "                  taken back, so streaming holds nothing back for it. A stop token\n"
    "                  on the same step wins (\"eos\"). Needs the model's tokenizer.json,\n"
    "                  with --prompt-tokens too (13 when it is missing).\n"
    "Output: one line per prompt, the generated ids; with --json\n"
    "{\"tokens\": [ids], \"stopped\": \"eos\"|\"length\"|\"stop_string\"}.\n"
    "--verbose prints the timings of the prefill and the decode steps to stderr (see\n"
    "`llmhost bench --help` for what each covers).\n"
    "\n"
    "--chat: each -p TEXT is a user message, rendered by the model's chat template\n"
    "(tokenizer_config.json chat_template) with the generation prompt, then encoded.\n"
    "-p TEXT (--prompt): a text prompt, encoded with the model's tokenizer.json with its\n"
    "special tokens (e.g. BOS), as transformers' tokenizer(text) does; -p and\n"
    "--prompt-tokens cannot be mixed. The generated text is decoded with special tokens\n"
    "skipped (an eos token is not printed). One prompt: the text is streamed to stdout as\n"
    "the tokens are generated (never a broken UTF-8 sequence), then a newline. Several\n"
    "prompts (one batch): each prompt's text followed by a newline, in prompt order, once\n"
    "generation ends. --json (with -p): one object\n"
    "{\"outputs\": [{\"ids\": [generated ids], \"text\": ..., \"stopped\":\n"
    "\"eos\"|\"length\"|\"stop_string\"|\"interrupted\"}], \"timings\": {\"load_seconds\",\n"
    "\"time_to_first_token_seconds\", \"prefill_tokens\", \"prefill_tokens_per_second\",\n"
    "\"decode_tokens\", \"decode_tokens_per_second\"}}.\n"
    "Ctrl-C (SIGINT) during generation stops it after the current step: what was produced\n"
    "is printed (the text, or --json with \"stopped\": \"interrupted\") and the exit\n"
    "status is 130.\n";

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The per-step callback of `run`: streams sequence 0 when ds is set, notes the time of the
 * first token, and stops the generation once SIGINT arrived (or the stream failed). */
typedef struct run_stream {
    lh_detok_stream *ds;
    lh_status st;
    lh_err err;
    double t_first;
    lh_stop_matcher **stops; /* --stop: one per sequence; NULL without */
    bool *finish;            /* the params' finish flags */
} run_stream;

static bool run_on_step(void *user, int64_t step, const int64_t *seqs, const int32_t *ids,
                        int64_t n)
{
    run_stream *rs = user;
    if (step == 0)
        rs->t_first = now_seconds();
    for (int64_t i = 0; rs->ds && rs->st == LH_OK && i < n; i++) {
        if (seqs[i] != 0)
            continue;
        char *chunk = NULL;
        size_t len = 0;
        rs->st = lh_detok_stream_step(rs->ds, ids[i], &chunk, &len, &rs->err);
        if (rs->st == LH_OK && len) {
            fwrite(chunk, 1, len, stdout);
            fflush(stdout);
        }
        free(chunk);
    }
    for (int64_t i = 0; rs->stops && rs->st == LH_OK && i < n; i++) {
        bool hit = false;
        rs->st = lh_stop_matcher_step(rs->stops[seqs[i]], ids[i], &hit, NULL, &rs->err);
        if (hit)
            rs->finish[seqs[i]] = true;
    }
    return rs->st == LH_OK && !g_interrupted;
}

static const char *stop_name(lh_stop_reason r)
{
    return r == LH_STOP_EOS ? "eos" : r == LH_STOP_CANCELLED ? "interrupted"
         : r == LH_STOP_CALLBACK || r == LH_STOP_STRING ? "stop_string" : "length";
}

/* The output of `run -p`: the streamed text's end (one prompt), each prompt's text, or the
 * --json object. Returns 0 or an exit status after printing why. */
static int print_text_results(const lh_cli_args *a, const lh_tokenizer *tok, run_stream *rs,
                              const int32_t *out, int64_t max_new, const int64_t *out_lens,
                              const lh_stop_reason *stopped, size_t n_prompts,
                              double load_seconds, double t_gen, lh_engine *e)
{
    lh_err err = {0};
    const size_t stride = (size_t)(max_new ? max_new : 1);
    if (rs->ds) { /* streamed: release what the stream holds back */
        char *chunk = NULL;
        size_t len = 0;
        if (lh_detok_stream_finish(rs->ds, &chunk, &len, &err) != LH_OK)
            return report(&err);
        fwrite(chunk, 1, len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(chunk);
        return 0;
    }
    json_t *outs = a->json ? json_array() : NULL;
    int rc = 0;
    for (size_t s = 0; rc == 0 && s < n_prompts; s++) {
        char *text = NULL;
        size_t len = 0;
        const int32_t *row = out + s * stride;
        if (lh_tokenizer_decode(tok, row, (size_t)out_lens[s], true, &text, &len, &err) !=
            LH_OK) {
            rc = report(&err);
            break;
        }
        if (!a->json) {
            fwrite(text, 1, len, stdout);
            fputc('\n', stdout);
        } else {
            json_t *jids = json_array();
            for (int64_t k = 0; jids && k < out_lens[s]; k++)
                json_array_append_new(jids, json_integer(row[k]));
            json_t *o = json_pack("{s:o?,s:s%,s:s}", "ids", jids, "text", text, len, "stopped",
                                  stop_name(stopped[s]));
            if (!o || json_array_append_new(outs, o) != 0)
                rc = LH_E_NOMEM;
        }
        free(text);
    }
    if (rc == 0 && a->json) {
        lh_generate_stats gs = {.struct_size = sizeof gs};
        if (lh_engine_last_stats(e, &gs, &err) != LH_OK) {
            json_decref(outs);
            return report(&err);
        }
        json_t *tim = json_pack(
            "{s:f,s:f,s:I,s:f,s:I,s:f}", "load_seconds", load_seconds,
            "time_to_first_token_seconds", rs->t_first > 0 ? rs->t_first - t_gen : 0.0,
            "prefill_tokens", (json_int_t)gs.prefill_tokens, "prefill_tokens_per_second",
            gs.prefill_seconds > 0 ? (double)gs.prefill_tokens / gs.prefill_seconds : 0.0,
            "decode_tokens", (json_int_t)gs.decode_tokens, "decode_tokens_per_second",
            gs.decode_seconds > 0 ? (double)gs.decode_tokens / gs.decode_seconds : 0.0);
        if (!tim)
            json_decref(outs); /* json_pack steals outs only when it runs */
        json_t *j = tim ? json_pack("{s:o,s:o}", "outputs", outs, "timings", tim) : NULL;
        outs = NULL;
        char *dump = j ? json_dumps(j, 0) : NULL;
        if (dump)
            puts(dump);
        else
            rc = LH_E_NOMEM;
        free(dump);
        json_decref(j);
    }
    json_decref(outs);
    if (rc == LH_E_NOMEM)
        fprintf(stderr, "llmhost run: out of memory\n");
    fflush(stdout);
    return rc;
}

int lh_cli_run(const lh_cli_args *a)
{
    if (a->help) {
        printf("%s\n%s", run_help, lh_cli_exit_status_text);
        return 0;
    }
    if (a->n_prompts && a->n_text_prompts) {
        fprintf(stderr, "llmhost run: -p/--prompt and --prompt-tokens cannot be mixed\n");
        return LH_E_USAGE;
    }
    if (!a->model || (a->n_prompts == 0 && a->n_text_prompts == 0)) {
        fprintf(stderr, "llmhost run: MODEL and at least one -p TEXT or --prompt-tokens are "
                "required\n");
        return LH_E_USAGE;
    }
    const bool text_mode = a->n_text_prompts > 0;
    const size_t n_prompts = text_mode ? a->n_text_prompts : a->n_prompts;
    int64_t max_new = a->max_new >= 0 ? a->max_new : 32;
    int32_t *ids[LH_CLI_MAX_DIRS] = {0};
    int64_t lens[LH_CLI_MAX_DIRS] = {0};
    int rc = 0;
    lh_err err = {0};
    lh_tokenizer *tok = NULL;
    const double t_load = now_seconds();
    for (size_t i = 0; rc == 0 && !text_mode && i < n_prompts; i++)
        rc = parse_ids("run", "--prompt-tokens", a->prompt_tokens[i], &ids[i], &lens[i]);
    /* before anything loads: the matcher checks them again, after the model opened */
    if (rc == 0 && a->n_stop_strings &&
        lh_stop_strings_check(a->stop_strings, a->n_stop_strings, &err) != LH_OK) {
        fprintf(stderr, "llmhost run: --stop: %s\n", err.msg);
        rc = LH_E_USAGE;
    }
    if (rc == 0 && a->chat && !text_mode) {
        fprintf(stderr, "llmhost run: --chat needs -p TEXT (a user message)\n");
        rc = LH_E_USAGE;
    }
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
    if (!a->batch_size_given && !a->config_file && n_prompts > 1) {
        snprintf(batch, sizeof batch, "max-batch-size=%zu", n_prompts);
        ov[n_ov++] = batch;
    }
    if (rc == 0 && (rc = lh_cli_open_engine(a, ov, &h, &e, &err)) != 0)
        rc = report(&err);
    /* the model resolves (and opens) before its tokenizer: a wrong architecture is reported
     * as such, not as a missing tokenizer.json. --stop matches decoded text: it needs the
     * tokenizer with --prompt-tokens too */
    if (rc == 0 && (text_mode || a->n_stop_strings) &&
        lh_tokenizer_open(a->model, &tok, &err) != LH_OK)
        rc = report(&err);
    lh_chat_template *tmpl = NULL;
    if (rc == 0 && a->chat && lh_chat_template_open(a->model, &tmpl, &err) != LH_OK)
        rc = report(&err);
    for (size_t i = 0; rc == 0 && text_mode && i < n_prompts; i++) {
        size_t n = 0;
        /* --chat: the prompt is one user message rendered by the model's chat template with
         * the generation prompt, then encoded without adding special tokens (the template
         * writes them), as transformers' apply_chat_template(tokenize=True) does */
        char *rendered = NULL;
        size_t rlen = 0;
        if (tmpl) {
            const lh_chat_message msg = {.role = "user", .content = a->prompts[i]};
            const lh_chat_render_options ro = {.struct_size = sizeof ro,
                                               .add_generation_prompt = true};
            if (lh_chat_template_render(tmpl, &msg, 1, &ro, &rendered, &rlen, &err) != LH_OK) {
                rc = report(&err);
                break;
            }
        }
        const char *text = rendered ? rendered : a->prompts[i];
        const size_t tlen = rendered ? rlen : strlen(a->prompts[i]);
        lh_status est = lh_tokenizer_encode(tok, text, tlen, !rendered, &ids[i], &n, &err);
        free(rendered);
        if (est != LH_OK) {
            fprintf(stderr, "llmhost: error [%s]: -p %zu: %s\n", lh_status_name(err.code), i,
                    err.msg);
            rc = (int)err.code;
        }
        lens[i] = (int64_t)n;
        if (rc == 0 && n == 0) {
            fprintf(stderr, "llmhost: error [usage]: prompt %zu encodes to no token\n", i);
            rc = LH_E_USAGE;
        }
    }
    lh_chat_template_free(tmpl);
    for (size_t s = 0; rc == 0 && s < n_prompts; s++)
        if (lens[s] + max_new - (max_new > 0) > lh_engine_max_seq_len(e)) {
            fprintf(stderr, "llmhost: error [usage]: prompt %zu (%lld tokens) + -n %lld exceeds "
                    "max_seq_len %lld; raise --max-seq-len or lower -n\n", s, (long long)lens[s],
                    (long long)max_new, (long long)lh_engine_max_seq_len(e));
            rc = LH_E_USAGE;
        }
    if (rc == 0) {
        out = malloc((size_t)(n_prompts * (size_t)(max_new ? max_new : 1)) * sizeof *out);
        if (!out) {
            fprintf(stderr, "llmhost run: out of memory\n");
            rc = LH_E_NOMEM;
        }
    }
    lh_generate_params gp = {.struct_size = sizeof gp};
    run_stream rs = {.st = LH_OK};
    double t_gen = 0;
    const double load_seconds = now_seconds() - t_load;
    int64_t out_lens[LH_CLI_MAX_DIRS] = {0};
    lh_stop_reason stopped[LH_CLI_MAX_DIRS] = {0};
    int32_t stop_ids[LH_CLI_MAX_DIRS];
    if (rc == 0 && lh_engine_generation_defaults(e, &gp, &err) != LH_OK)
        rc = report(&err);
    if (rc == 0) {
        gp.max_new_tokens = max_new;
        if (a->temperature_given) {
            gp.temperature = (float)a->temperature;
            gp.do_sample = a->temperature > 0;
        }
        if (a->top_k_given) {
            gp.top_k = a->top_k;
            gp.do_sample = gp.do_sample || !a->temperature_given;
        }
        if (a->top_p_given) {
            gp.top_p = (float)a->top_p;
            gp.do_sample = gp.do_sample || !a->temperature_given;
        }
        if (a->min_p_given) {
            gp.min_p = (float)a->min_p;
            gp.do_sample = gp.do_sample || !a->temperature_given;
        }
        if (a->repetition_penalty_given)
            gp.repetition_penalty = (float)a->repetition_penalty;
        if (a->seed_given)
            gp.seed = (uint64_t)a->seed;
        if (a->n_stop_ids) {
            for (size_t i = 0; i < a->n_stop_ids; i++)
                stop_ids[i] = (int32_t)a->stop_ids[i];
            gp.stop_ids = stop_ids;
            gp.n_stop_ids = (int64_t)a->n_stop_ids;
        }
        if (a->ignore_eos) {
            gp.stop_ids = NULL;
            gp.n_stop_ids = 0;
        }
        if (text_mode && n_prompts == 1 && !a->json &&
            lh_detok_stream_create(tok, true, &rs.ds, &err) != LH_OK)
            rc = report(&err);
    }
    /* --stop: each prompt's matcher sees the prompt as context, where a stop string may
     * begin */
    lh_stop_matcher *sm[LH_CLI_MAX_DIRS] = {0};
    bool finish[LH_CLI_MAX_DIRS];
    for (size_t s = 0; rc == 0 && a->n_stop_strings && s < n_prompts; s++)
        if (lh_stop_matcher_create(tok, a->stop_strings, a->n_stop_strings, &sm[s], &err) !=
                LH_OK ||
            lh_stop_matcher_add_context(sm[s], ids[s], (size_t)lens[s], &err) != LH_OK)
            rc = report(&err);
    if (rc == 0 && a->n_stop_strings) {
        rs.stops = sm;
        rs.finish = finish;
        gp.finish = finish;
    }
    if (rc == 0) {
        gp.on_step = run_on_step;
        gp.on_step_user = &rs;
        /* Ctrl-C stops the generation cleanly (run_on_step reads the flag) */
        /* SA_RESTART: a Ctrl-C during a write to stdout must not make it fail (the text
         * produced so far is printed); SA_RESETHAND: a second Ctrl-C ends the process */
        struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESTART | SA_RESETHAND},
                         old_sa;
        sigemptyset(&sa.sa_mask);
        g_interrupted = 0;
        sigaction(SIGINT, &sa, &old_sa);
        t_gen = now_seconds();
        if (lh_engine_generate(e, &gp, (const int32_t *const *)ids, lens, (int64_t)n_prompts,
                               out, out_lens, stopped, &err) != LH_OK)
            rc = report(&err);
        else if (rs.st != LH_OK)
            rc = report(&rs.err);
        sigaction(SIGINT, &old_sa, NULL);
    }
    if (rc == 0 && text_mode)
        rc = print_text_results(a, tok, &rs, out, max_new, out_lens, stopped, n_prompts,
                                load_seconds, t_gen, e);
    for (size_t s = 0; rc == 0 && !text_mode && s < n_prompts; s++) {
        fputs(a->json ? "{\"tokens\": [" : "", stdout);
        for (int64_t k = 0; k < out_lens[s]; k++)
            printf("%s%d", k ? (a->json ? ", " : " ") : "", out[s * (size_t)max_new + (size_t)k]);
        if (a->json)
            printf("], \"stopped\": \"%s\"}\n", stop_name(stopped[s]));
        else
            fputc('\n', stdout);
    }
    /* after the output, so that the text and the timings do not interleave */
    fflush(stdout);
    lh_generate_stats gs = {.struct_size = sizeof gs};
    if (rc == 0 && a->verbose && lh_engine_last_stats(e, &gs, &err) == LH_OK) {
        fprintf(stderr, "llmhost run: prefill %lld tokens in %.6f s (%.1f tok/s)",
                (long long)gs.prefill_tokens, gs.prefill_seconds,
                gs.prefill_seconds > 0 ? (double)gs.prefill_tokens / gs.prefill_seconds : 0.0);
        if (gs.decode_steps > 0 && gs.decode_tokens != gs.decode_steps * (int64_t)n_prompts)
            fprintf(stderr, "; decode %lld steps = %lld tokens (sequences stopped early) in %.6f s "
                    "(%.1f tok/s, %.3f ms/step)", (long long)gs.decode_steps,
                    (long long)gs.decode_tokens, gs.decode_seconds,
                    gs.decode_seconds > 0 ? (double)gs.decode_tokens / gs.decode_seconds : 0.0,
                    1e3 * gs.decode_seconds / (double)gs.decode_steps);
        else if (gs.decode_steps > 0)
            fprintf(stderr, "; decode %lld steps x %zu sequence%s = %lld tokens in %.6f s "
                    "(%.1f tok/s, %.3f ms/step)", (long long)gs.decode_steps, n_prompts,
                    n_prompts == 1 ? "" : "s", (long long)gs.decode_tokens,
                    gs.decode_seconds,
                    gs.decode_seconds > 0 ? (double)gs.decode_tokens / gs.decode_seconds : 0.0,
                    1e3 * gs.decode_seconds / (double)gs.decode_steps);
        fputc('\n', stderr);
    }
    bool interrupted = false;
    for (size_t s = 0; rc == 0 && s < n_prompts; s++)
        interrupted = interrupted || stopped[s] == LH_STOP_CANCELLED;
    if (rc == 0 && g_interrupted) /* Ctrl-C at the last step still counts as interrupted */
        interrupted = true;
    fflush(stdout);
    if (rc == 0 && ferror(stdout)) {
        fprintf(stderr, "llmhost: error [io-error]: writing the output to stdout failed\n");
        rc = LH_E_IO;
    }
    if (rc == 0 && interrupted) {
        fprintf(stderr, "llmhost run: interrupted\n");
        rc = 130;
    }
    free(out);
    for (size_t i = 0; i < n_prompts; i++)
        free(ids[i]);
    lh_detok_stream_free(rs.ds);
    for (size_t s = 0; s < n_prompts; s++)
        lh_stop_matcher_free(sm[s]);
    lh_tokenizer_free(tok);
    lh_engine_close(e);
    lh_host_free(h);
    return rc;
}

static const char logits_help[] =
    "usage: llmhost logits MODEL --tokens IDS --out FILE.npy [--threads N] [--attn-backend NAME]\n"
    "       [--device auto|cpu|cuda[:N]] [--config FILE.yaml] [run-config flags]\n"
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
    if ((rc = lh_cli_open_engine(a, a->overrides, &h, &e, &err)) != 0)
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
