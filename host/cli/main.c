/* llmhost: the command-line front end of libllmhost. */
#include "cli_args.h"
#include "cli_commands.h"
#include "lh_plugin.h"
#include "llmhost.h"

#include <stdio.h>
#include <string.h>

static const char usage_text[] =
    "usage: llmhost COMMAND [options] [MODEL]\n"
    "\n"
    "MODEL is a Hugging Face model directory or the path of its config.json.\n"
    "\n"
    "commands:\n"
    "  list                 what the arch indexes offer (built-in and custom dirs); loads no plugin\n"
    "  resolve MODEL        which plugin serves the model, and why (loads exactly that plugin)\n"
    "  explain MODEL        the resolution trace and the memory plan (module tree, no weights)\n"
    "  run MODEL -p TEXT [-p TEXT]... [-n N] [--json]    generation from text, streamed\n"
    "  run MODEL --prompt-tokens 1,2,3 [-n N] [--json]   generation from token ids\n"
    "  serve MODEL [--host H] [--port P] [--api-key K]   an OpenAI-compatible HTTP server\n"
    "                       (continuous batching, prefix caching; see serve --help)\n"
    "  tokenize MODEL (--text T | --text-file F) [--no-special] [--json]\n"
    "                       ids of the model's tokenizer.json (no plugin, no weights)\n"
    "  logits MODEL --tokens 1,2,3 --out FILE.npy        float32 logits of every position\n"
    "  bench MODEL [--context N,..] [--batch B,..] [-n STEPS] [--json]\n"
    "                       prefill and decode tok/s of greedy generation on synthetic prompts\n"
    "  backends [--json]    attention backends and their capabilities (loads only those plugins),\n"
    "                       and the devices: the CPU's kernels, each CUDA device or why none\n"
    "  version              versions of llmhost and of the plugin ABI\n"
    "  plugin check FILE.so|DIR [--json] [--timeout S]\n"
    "                       load plugins in a child process: ABI, name, version, registrations,\n"
    "                       security, and a DIR's arch_index.tsv differences (llmhost plugin -h)\n"
    "  plugin index DIR     write DIR/arch_index.tsv from what its plugins register (atomic)\n"
    "\n"
    "options:\n"
    "  --json                       machine-readable output\n"
    "  --config FILE.yaml           run config (YAML); flags below override its values\n"
    "  --custom-module-dir DIR      absolute dir of third-party plugins; repeatable, earlier wins;\n"
    "                               then $LLMHOST_CUSTOM_MODULE_DIRS (colon-separated)\n"
    "  --allow-insecure-plugins     load plugin files that fail the permission checks (logged)\n"
    "  --log-level error|warn|info|debug   (or $LLMHOST_LOG)\n"
    "  --threads N                  kernel threads (default: every core)\n"
    "  --verbose                    run: print the prefill / decode timings to stderr\n"
    ;

/* after the run-config key flags */
static const char usage_tail[] =
    "  --set KEY=VALUE              a scalar run-config key, e.g. kv_cache.dtype=fp8,\n"
    "                               kv_cache.block_size=32, kv_cache.memory_fraction=0.5,\n"
    "                               fused_rope=false, beam_width=1, cuda_graphs=false\n"
    "                               (repeatable)\n"
    "  -h, --help\n"
    "\n"
    "environment: LLMHOST_PLUGIN_DIR (built-in plugin dir), LLMHOST_CUSTOM_MODULE_DIRS, LLMHOST_LOG\n"
    "\n";

/* The run-config keys with a flag of their own, from the key table (its help, its names). */
static void print_key_flags(void)
{
    lh_run_config_key_info k = {.struct_size = sizeof k};
    for (size_t i = 0; lh_run_config_key_at(i, &k); i++, k = (lh_run_config_key_info){.struct_size = sizeof k}) {
        if (!k.flag)
            continue;
        char left[128];
        int n = snprintf(left, sizeof left, "%s", k.flag);
        if (k.flag_takes_value && !k.value_syntax)
            for (size_t j = 0; j < k.n_names && n > 0 && (size_t)n < sizeof left; j++)
                n += snprintf(left + n, sizeof left - (size_t)n, "%s%s", j ? "|" : " ",
                              k.names[j]);
        else if (k.flag_takes_value && n > 0 && (size_t)n < sizeof left)
            n += snprintf(left + n, sizeof left - (size_t)n, " %s", k.value_syntax);
        /* a long flag takes its own line; the help starts in the column the others use */
        if (n > 28)
            printf("  %s\n  %-28s %s (default %s)\n", left, "", k.help, k.default_value);
        else
            printf("  %-28s %s (default %s)\n", left, k.help, k.default_value);
    }
}

const char lh_cli_exit_status_text[] =
    "exit status (one per error class):\n"
    "   0 ok                  1 internal error        2 usage\n"
    "   3 config error        4 unknown name          5 module file missing\n"
    "   6 load failure        7 not a plugin          8 ABI mismatch\n"
    "   9 insecure file      10 init failure         11 index drift\n"
    "  12 index parse error  13 I/O error            14 unsupported\n"
    "  15 out of memory     130 interrupted (run: Ctrl-C; what was produced is printed)\n";

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "plugin") == 0)
        return lh_cli_plugin(argc, argv); /* its own arguments: a subcommand and a path */
    lh_cli_args a;
    int rc = lh_cli_parse(argc, argv, &a);
    if (rc != 0) {
        lh_cli_args_free(&a);
        return rc;
    }
    if (!a.command || strcmp(a.command, "help") == 0) {
        fputs(usage_text, stdout);
        print_key_flags();
        fputs(usage_tail, stdout);
        fputs(lh_cli_exit_status_text, stdout);
    } else if (strcmp(a.command, "version") == 0 || strcmp(a.command, "--version") == 0) {
        if (a.help) {
            printf("usage: llmhost version\nPrints the llmhost version and the plugin ABI "
                   "version it provides.\n\n%s", lh_cli_exit_status_text);
        } else if (a.model) {
            fprintf(stderr, "llmhost version: unexpected argument '%s'\n", a.model);
            rc = LH_E_USAGE;
        } else {
            printf("llmhost %s (plugin ABI %d.%d)\n", LH_VERSION_STRING, LH_PLUGIN_ABI_MAJOR,
                   LH_PLUGIN_ABI_MINOR);
        }
    } else if (strcmp(a.command, "list") == 0) {
        rc = lh_cli_list(&a);
    } else if (strcmp(a.command, "resolve") == 0) {
        rc = lh_cli_resolve(&a);
    } else if (strcmp(a.command, "explain") == 0) {
        rc = lh_cli_explain(&a);
    } else if (strcmp(a.command, "backends") == 0) {
        rc = lh_cli_backends(&a);
    } else if (strcmp(a.command, "run") == 0) {
        rc = lh_cli_run(&a);
    } else if (strcmp(a.command, "serve") == 0) {
        rc = lh_cli_serve(&a);
    } else if (strcmp(a.command, "tokenize") == 0) {
        rc = lh_cli_tokenize(&a);
    } else if (strcmp(a.command, "logits") == 0) {
        rc = lh_cli_logits(&a);
    } else if (strcmp(a.command, "bench") == 0) {
        rc = lh_cli_bench(&a);
    } else { /* lh_cli_parse refused every other name */
        fprintf(stderr, "llmhost: internal error: command '%s' has no handler\n", a.command);
        rc = LH_E_INTERNAL;
    }
    lh_cli_args_free(&a);
    return rc;
}
