/* Embedding llmhost: open a host, optionally declare a custom module dir, open an engine on a
 * model directory with a run config given as YAML text, tokenize a prompt (or take token
 * ids), generate with a streaming per-step callback, print the explain JSON's device and
 * attention backend, close everything. Uses only llmhost.h; Ctrl-C cancels the generation
 * cleanly at the next step (lh_engine_cancel is safe in a signal handler).
 *
 * usage: embed_example [--custom-module-dir DIR] [--prompt TEXT | --ids 1,2,3] [-n N]
 *                      [--config-text YAML] MODEL_DIR
 *
 * Output (stdout): "prompt ids: ...", the generated text or ids as they stream, then
 * "generated ids: ...", "stopped: ...", "device: ...", "backend: ...". */
#include "llmhost.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The run config, inline. The device is left to LLMHOST_DEVICE / auto. */
static const char default_run_config[] =
    "max_seq_len: 128\n"
    "max_batch_size: 1\n"
    "attn_backend: paged\n"
    "kv_cache:\n"
    "  block_size: 16\n";

static lh_engine *volatile running_engine; /* for the SIGINT handler */

static void on_sigint(int sig)
{
    (void)sig;
    lh_engine_cancel(running_engine); /* one atomic store: async-signal-safe */
}

typedef struct stream_state {
    lh_detok_stream *detok; /* NULL: print ids */
    int failed;
} stream_state;

/* Called once per step on the generating thread with the step's new token(s). */
static bool on_step(void *user, int64_t step, const int64_t *seqs, const int32_t *ids,
                    int64_t n)
{
    stream_state *s = user;
    (void)seqs;
    for (int64_t i = 0; i < n; i++) {
        if (!s->detok) {
            printf("%s%d", step == 0 ? "" : " ", ids[i]);
        } else {
            char *chunk = NULL;
            size_t len = 0;
            lh_err err;
            if (lh_detok_stream_step(s->detok, ids[i], &chunk, &len, &err) != LH_OK) {
                fprintf(stderr, "decode: %s\n", err.msg);
                s->failed = 1;
                return false; /* stops the generation after this step */
            }
            fwrite(chunk, 1, len, stdout);
            free(chunk);
        }
    }
    fflush(stdout);
    return true;
}

/* "1,2,3" -> ids (malloc'ed). */
static int parse_ids(const char *text, int32_t **ids, int64_t *n)
{
    size_t cap = strlen(text) / 2 + 1;
    *ids = malloc(cap * sizeof **ids);
    *n = 0;
    if (!*ids)
        return -1;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ','))
            return -1;
        (*ids)[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    return *n > 0 ? 0 : -1;
}

/* The string value of "key" in the first JSON object that follows "anchor" (a small reader
 * for the pretty-printed explain JSON; an application would use a JSON parser). */
static void json_field(const char *json, const char *anchor, const char *key, char *out,
                       size_t size)
{
    snprintf(out, size, "?");
    const char *a = strstr(json, anchor);
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *k = a ? strstr(a, pat) : NULL;
    if (!k)
        return;
    k += strlen(pat);
    size_t len = strcspn(k, "\"");
    snprintf(out, size, "%.*s", (int)(len < size - 1 ? len : size - 1), k);
}

static int file_exists(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

static const char *stop_name(lh_stop_reason r)
{
    switch (r) {
    case LH_STOP_LENGTH: return "length";
    case LH_STOP_EOS: return "eos";
    case LH_STOP_CANCELLED: return "cancelled";
    case LH_STOP_CALLBACK: return "callback";
    case LH_STOP_STRING: return "stop_string";
    }
    return "?";
}

static int usage(void)
{
    fprintf(stderr, "usage: embed_example [--custom-module-dir DIR] [--prompt TEXT | --ids 1,2,3]"
                    " [-n N] [--config-text YAML] MODEL_DIR\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *custom_dir = NULL, *prompt = "Hello", *ids_arg = NULL;
    const char *config_text = default_run_config;
    long max_new = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 < argc && strcmp(a, "--custom-module-dir") == 0)
            custom_dir = argv[++i];
        else if (i + 1 < argc && strcmp(a, "--prompt") == 0)
            prompt = argv[++i];
        else if (i + 1 < argc && strcmp(a, "--ids") == 0)
            ids_arg = argv[++i];
        else if (i + 1 < argc && strcmp(a, "-n") == 0)
            max_new = strtol(argv[++i], NULL, 10);
        else if (i + 1 < argc && strcmp(a, "--config-text") == 0)
            config_text = argv[++i];
        else if (a[0] != '-' && !model)
            model = a;
        else
            return usage();
    }
    if (!model || max_new < 0)
        return usage();

    lh_err err = {0};
    lh_host *host = NULL;
    lh_engine *engine = NULL;
    lh_tokenizer *tok = NULL;
    stream_state ss = {0};
    int32_t *prompt_ids = NULL, *out = NULL;
    int64_t n_prompt = 0;
    char *explain = NULL;
    int rc = 1;

    /* 1. the host: reads the built-in plugin index (found next to libllmhost), loads nothing */
    lh_host_options hopts = {.struct_size = sizeof hopts};
    if (lh_host_create(&hopts, &host, &err) != LH_OK)
        goto fail;
    /* 2. an optional directory of third-party plugins (absolute path) */
    if (custom_dir && lh_host_add_custom_dir(host, custom_dir, &err) != LH_OK)
        goto fail;

    /* 3. the engine, with the run config as YAML text */
    lh_engine_options eopts = {.struct_size = sizeof eopts, .model = model,
                               .config_text = config_text};
    if (lh_engine_open(host, &eopts, &engine, &err) != LH_OK)
        goto fail;

    /* 4. the prompt: text through the model's tokenizer.json, else token ids */
    if (!ids_arg && file_exists(model, "tokenizer.json")) {
        size_t n = 0;
        if (lh_tokenizer_open(model, &tok, &err) != LH_OK ||
            lh_tokenizer_encode(tok, prompt, strlen(prompt), true, &prompt_ids, &n, &err) !=
                LH_OK ||
            lh_detok_stream_create(tok, true, &ss.detok, &err) != LH_OK)
            goto fail;
        n_prompt = (int64_t)n;
    } else if (parse_ids(ids_arg ? ids_arg : "1,2,3", &prompt_ids, &n_prompt) != 0) {
        fprintf(stderr, "embed_example: --ids wants comma-separated token ids\n");
        rc = 2;
        goto done;
    }
    printf("prompt ids:");
    for (int64_t i = 0; i < n_prompt; i++)
        printf(" %d", prompt_ids[i]);
    printf("\n");

    /* 5. generation with the model's defaults (generation_config.json), streaming */
    lh_generate_params gp = {.struct_size = sizeof gp};
    if (lh_engine_generation_defaults(engine, &gp, &err) != LH_OK)
        goto fail;
    gp.max_new_tokens = max_new;
    gp.on_step = on_step;
    gp.on_step_user = &ss;
    out = malloc(((size_t)max_new + 1) * sizeof *out);
    if (!out)
        goto done;
    const int32_t *prompts[1] = {prompt_ids};
    int64_t lens[1] = {n_prompt}, out_len = 0;
    lh_stop_reason stop = LH_STOP_LENGTH;
    running_engine = engine;
    signal(SIGINT, on_sigint);
    printf("stream: ");
    fflush(stdout);
    lh_status st = lh_engine_generate(engine, &gp, prompts, lens, 1, out, &out_len, &stop, &err);
    signal(SIGINT, SIG_DFL);
    if (ss.detok) {
        char *rest = NULL;
        size_t len = 0;
        if (st == LH_OK && lh_detok_stream_finish(ss.detok, &rest, &len, &err) == LH_OK)
            fwrite(rest, 1, len, stdout);
        free(rest);
    }
    printf("\n");
    if (st != LH_OK)
        goto fail;
    if (ss.failed) /* the callback printed why */
        goto done;
    printf("generated ids:");
    for (int64_t i = 0; i < out_len; i++)
        printf(" %d", out[i]);
    printf("\nstopped: %s\n", stop_name(stop));

    /* 6. what the engine decided: device and attention backend */
    if (lh_engine_explain_json(engine, &explain, &err) != LH_OK)
        goto fail;
    char device[64], backend[64];
    json_field(explain, "\"engine\": {", "device", device, sizeof device);
    json_field(explain, "\"attention\": {", "backend", backend, sizeof backend);
    printf("device: %s\nbackend: %s\n", device, backend);
    rc = 0;
    goto done;

fail:
    fprintf(stderr, "embed_example: %s (%s)\n", err.msg, lh_status_name(err.code));
    rc = err.code ? (int)err.code : 1;
done:
    free(explain);
    free(out);
    free(prompt_ids);
    lh_detok_stream_free(ss.detok);
    lh_tokenizer_free(tok);
    lh_engine_close(engine); /* engines before their host */
    lh_host_free(host);
    return rc;
}
