#include "cli_commands.h"

#include "llmhost.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int report(const lh_err *err)
{
    fprintf(stderr, "llmhost: error [%s]: %s\n", lh_status_name(err->code), err->msg);
    return (int)err->code;
}

static void apply_log_level(const lh_cli_args *a)
{
    if (a->log_level)
        setenv("LLMHOST_LOG", a->log_level, 1);
}

/* Creates the host and declares custom dirs: flags first (most specific), then the
 * environment. */
int lh_cli_open_host(const lh_cli_args *a, lh_host **h, lh_err *err)
{
    lh_host_options opts = {.struct_size = sizeof opts, .plugin_dir = NULL,
                            .allow_insecure_plugins = a->allow_insecure};
    lh_status st = lh_host_create(&opts, h, err);
    for (size_t i = 0; st == LH_OK && i < a->n_custom_dirs; i++)
        st = lh_host_add_custom_dir(*h, a->custom_dirs[i], err);
    if (st == LH_OK)
        st = lh_host_add_custom_dirs_from_env(*h, err);
    if (st != LH_OK) {
        lh_host_free(*h);
        *h = NULL;
    }
    return (int)st;
}

static void print_json_text(const char *text)
{
    fputs(text, stdout);
    fputc('\n', stdout);
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static void print_resolution(const json_t *j)
{
    printf("config:                  %s\n", jstr(j, "config"));
    const json_t *src = json_object_get(j, "source");
    if (src)
        printf("source:                  GGUF v%lld, general.architecture '%s' (config and "
               "tensor names from %s)\n", (long long)json_integer_value(json_object_get(src,
               "version")), jstr(src, "gguf_architecture"), jstr(src, "names_from"));
    printf("architecture:            %s\n", jstr(j, "architecture"));
    printf("resolved architecture:   %s\n", jstr(j, "resolved_architecture"));
    printf("kind:                    %s\n", jstr(j, "kind"));
    const json_t *p = json_object_get(j, "plugin");
    printf("provider:                %s (%s; plugin '%s' %s, ABI %s)\n", jstr(j, "shared_object"),
           jstr(j, "origin"), jstr(p, "name"), jstr(p, "version"), jstr(p, "abi"));
    size_t i;
    const json_t *v;
    printf("rewrites:               ");
    if (!json_array_size(json_object_get(j, "rewrites")))
        printf(" none");
    json_array_foreach(json_object_get(j, "rewrites"), i, v) printf(" %s;", json_string_value(v));
    printf("\nloaded plugins:\n");
    json_array_foreach(json_object_get(j, "loaded_plugins"), i, v)
        printf("  %s\n", json_string_value(v));
}

static void print_trace(const json_t *j)
{
    size_t i;
    const json_t *v;
    printf("resolution trace:\n");
    json_array_foreach(json_object_get(j, "trace"), i, v)
        printf("  %lld. %-14s %s\n", (long long)json_integer_value(json_object_get(v, "step")),
               jstr(v, "name"), jstr(v, "decision"));
}

static const char *human_bytes(json_int_t bytes, char *buf, size_t n)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, n, "%.2f %s", v, units[u]);
    return buf;
}

static void print_human_bytes(const char *label, json_int_t bytes)
{
    char b[64];
    printf("  %-24s %s (%lld bytes)\n", label, human_bytes(bytes, b, sizeof b), (long long)bytes);
}

/* One CUDA device of lh_devices_json / the explain trace, on one line. */
static void print_cuda_device(const json_t *d)
{
    char total[32], free_[32];
    printf("%s, compute capability %s, %lld SMs, %s (%s free), %.0f GB/s; kernels %s",
           jstr(d, "name"), jstr(d, "compute_capability"),
           (long long)json_integer_value(json_object_get(d, "sm_count")),
           human_bytes(json_integer_value(json_object_get(d, "total_bytes")), total,
                       sizeof total),
           human_bytes(json_integer_value(json_object_get(d, "free_bytes")), free_,
                       sizeof free_),
           json_number_value(json_object_get(d, "bandwidth_gbs")), jstr(d, "kernels"));
}

/* explain's device section (the attention trace's "device"). */
static void print_device(const json_t *j)
{
    const json_t *d = json_object_get(json_object_get(j, "attention"), "device");
    if (!d)
        return;
    printf("device: %s (%s)\n", jstr(d, "resolved"), jstr(d, "reason"));
    printf("  requested: %s (from %s)\n", jstr(d, "requested"), jstr(d, "origin"));
    if (strcmp(jstr(d, "kind"), "cuda") == 0) {
        printf("  cuda:%lld: ", (long long)json_integer_value(json_object_get(d, "index")));
        print_cuda_device(d);
        printf("\n");
    } else {
        const char *isa = json_string_value(json_object_get(d, "isa"));
        if (isa)
            printf("  kernels: CPU, %s\n", isa);
        else
            printf("  kernels: CPU, no kernel context (%s)\n", jstr(d, "isa_error"));
    }
    printf("  cuda graphs: %s\n", jstr(json_object_get(d, "cuda_graphs"), "reason"));
}

/* backends' device list (lh_host_backends_json "devices"). */
static void print_devices(const json_t *j)
{
    const json_t *devs = json_object_get(j, "devices");
    if (!devs)
        return;
    const json_t *cpu = json_object_get(devs, "cpu"), *cuda = json_object_get(devs, "cuda");
    printf("\ndevices:\n");
    const char *isa = json_string_value(json_object_get(cpu, "isa"));
    if (isa)
        printf("  cpu (%s)\n", isa);
    else
        printf("  cpu (no kernel context: %s)\n", jstr(cpu, "isa_error"));
    size_t i;
    const json_t *d;
    if (json_array_size(json_object_get(cuda, "devices")) == 0)
        printf("  cuda: unavailable (%s)\n", jstr(cuda, "unavailable"));
    json_array_foreach(json_object_get(cuda, "devices"), i, d) {
        printf("  cuda:%lld ", (long long)json_integer_value(json_object_get(d, "index")));
        if (json_is_string(json_object_get(d, "error")))
            printf("(no information: %s)", jstr(d, "error"));
        else
            print_cuda_device(d);
        printf("\n");
    }
}

static void print_attention(const json_t *j)
{
    const json_t *a = json_object_get(j, "attention");
    if (!a)
        return;
    printf("attention backend:\n");
    printf("  requested                %s (from %s)\n", jstr(a, "requested"), jstr(a, "origin"));
    if (json_is_string(json_object_get(a, "fallback")))
        printf("  fallback                 %s\n", jstr(a, "fallback"));
    printf("  selected                 %s (%s)\n", jstr(a, "normalized"), jstr(a, "shared_object"));
    printf("  capabilities             %s\n", jstr(a, "capabilities"));
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(a, "checks"), i, c) {
        bool needed = json_is_true(json_object_get(c, "needed"));
        printf("  check %-18s needed %-3s supported %-3s%s%s\n", jstr(c, "capability"),
               needed ? "yes" : "no",
               json_is_true(json_object_get(c, "supported")) ? "yes" : "no",
               needed ? " because " : "", needed ? jstr(c, "because") : "");
    }
    printf("  rope fusion              %s\n", jstr(json_object_get(a, "rope_fusion"), "reason"));
    printf("  chunked attention        %s\n",
           jstr(json_object_get(a, "chunked_attention"), "reason"));
    printf("  sparse attention         %s\n",
           jstr(json_object_get(a, "sparse_attention"), "reason"));
    const json_t *kv = json_object_get(a, "kv_cache");
    printf("  KV cache                 %s; keys %s, values %s\n", jstr(kv, "manager"),
           jstr(kv, "k_dtype"), jstr(kv, "v_dtype"));
    print_human_bytes("  KV bytes per token", json_integer_value(json_object_get(kv, "bytes_per_token")));
    if (json_object_get(kv, "num_blocks")) {
        printf("    %-22s %lld blocks of %lld tokens (%s), %lld bytes each\n", "KV pool",
               (long long)json_integer_value(json_object_get(kv, "num_blocks")),
               (long long)json_integer_value(json_object_get(kv, "block_size")),
               jstr(kv, "layout"),
               (long long)json_integer_value(json_object_get(kv, "block_bytes")));
        printf("    %-22s sized by %s\n", "", jstr(kv, "sized_by"));
    }
    printf("    %-22s %lld tokens\n", "KV pool",
           (long long)json_integer_value(json_object_get(kv, "pool_tokens")));
    print_human_bytes("  KV pool", json_integer_value(json_object_get(kv, "pool_bytes")));
}

static json_int_t jint(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

static void print_plan(const json_t *j)
{
    printf("memory plan (weights in %s; nothing allocated):\n", jstr(j, "weight_dtype"));
    printf("  %-24s %lld\n", "parameters", (long long)jint(j, "parameters"));
    if (jint(j, "active_parameters") != jint(j, "parameters"))
        printf("  %-24s %lld (per token: top_k of each MoE block's experts)\n",
               "active parameters", (long long)jint(j, "active_parameters"));
    print_human_bytes("weights", jint(j, "weight_bytes"));
    print_human_bytes("KV cache per token", jint(j, "kv_bytes_per_token"));
    printf("  %-24s %lld tokens (see the attention backend above)\n", "KV pool",
           (long long)jint(j, "kv_pool_tokens"));
    print_human_bytes("peak construction", jint(j, "peak_construction_bytes"));
    printf("  %-24s %lld\n", "attention layers", (long long)jint(j, "num_attention_layers"));
    printf("  %-24s %lld\n", "quantized linears", (long long)jint(j, "quantized_linears"));
    const char *key;
    const json_t *g;
    printf("  by module group:\n");
    json_object_foreach((json_t *)json_object_get(j, "groups"), key, g)
        printf("    %-12s %15lld params %18lld bytes\n", key, (long long)jint(g, "parameters"),
               (long long)jint(g, "bytes"));
    const json_t *types = json_object_get(j, "weight_types");
    if (json_object_size(types) > 1) {
        printf("  by stored type:\n");
        json_object_foreach((json_t *)types, key, g)
            printf("    %-12s %5lld tensors %15lld params %11lld bytes\n", key,
                   (long long)jint(g, "tensors"), (long long)jint(g, "parameters"),
                   (long long)jint(g, "bytes"));
    }
}

/* A command that takes no MODEL and prints one JSON document of the host: as it is with
 * --json, else through print_text. */
static int host_json_command(const lh_cli_args *a, const char *cmd,
                             lh_status (*fetch)(lh_host *, char **, lh_err *),
                             void (*print_text)(const json_t *j))
{
    if (a->model) {
        fprintf(stderr, "llmhost %s: takes no MODEL argument\n", cmd);
        return LH_E_USAGE;
    }
    apply_log_level(a);
    lh_err err = {0};
    lh_host *h;
    if (lh_cli_open_host(a, &h, &err))
        return report(&err);
    char *text = NULL;
    lh_status st = fetch(h, &text, &err);
    if (st == LH_OK && a->json) {
        print_json_text(text);
    } else if (st == LH_OK) {
        json_t *j = json_loads(text, 0, NULL);
        print_text(j);
        json_decref(j);
    }
    free(text);
    lh_host_free(h);
    return st == LH_OK ? 0 : report(&err);
}

static void print_list(const json_t *j)
{
    size_t i, k;
    json_t *idx, *row;
    printf("%-18s %-34s %-9s %s\n", "KIND", "NAME", "ORIGIN", "SHARED OBJECT");
    json_array_foreach(json_object_get(j, "indexes"), i, idx)
        json_array_foreach(json_object_get(idx, "rows"), k, row)
            printf("%-18s %-34s %-9s %s\n", jstr(row, "kind"), jstr(row, "name"),
                   jstr(idx, "origin"), jstr(row, "shared_object"));
    json_t *dir, *mod, *r;
    size_t d, m;
    json_array_foreach(json_object_get(j, "eager_dirs"), d, dir)
        json_array_foreach(json_object_get(dir, "modules"), m, mod)
            json_array_foreach(json_object_get(mod, "registrations"), k, r)
                printf("%-18s %-34s %-9s %s (%s)\n", jstr(r, "kind"), jstr(r, "name"),
                       "external", jstr(mod, "path"), jstr(r, "outcome"));
    printf("loaded plugins: %zu\n", json_array_size(json_object_get(j, "loaded_plugins")));
}

int lh_cli_list(const lh_cli_args *a)
{
    if (a->help) {
        printf("usage: llmhost list [--json] [--custom-module-dir DIR]...\n"
               "Lists what the built-in and custom arch indexes offer. Loads no plugin (custom "
               "dirs without an arch_index.tsv are loaded eagerly to learn what they provide).\n"
               "\n%s", lh_cli_exit_status_text);
        return 0;
    }
    return host_json_command(a, "list", lh_host_list_json, print_list);
}

static void print_backends(const json_t *j)
{
    /* columns: the capability names in the library's order (jansson keeps insertion
     * order), so a new flag shows up without touching the CLI */
    const json_t *first = json_object_get(json_array_get(json_object_get(j, "backends"), 0),
                                          "capabilities");
    const char *cap;
    const json_t *unused;
    printf("%-12s", "BACKEND");
    json_object_foreach((json_t *)first, cap, unused)
        printf(" %-14s", cap);
    printf(" SHARED OBJECT\n");
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(j, "backends"), i, b) {
        printf("%-12s", jstr(b, "name"));
        json_object_foreach((json_t *)first, cap, unused)
            printf(" %-14s",
                   json_is_true(json_object_get(json_object_get(b, "capabilities"), cap))
                       ? "yes"
                       : "-");
        printf(" %s (%s)\n", jstr(b, "shared_object"), jstr(b, "origin"));
    }
    print_devices(j);
}

int lh_cli_backends(const lh_cli_args *a)
{
    if (a->help) {
        printf("usage: llmhost backends [--json] [--custom-module-dir DIR]...\n"
               "The capability matrix of every attention backend the indexes offer. Loads the "
               "attention backend plugins and nothing else. Then the devices: the CPU with the "
               "instruction set its kernels use, and each CUDA device (name, compute capability, "
               "memory, bandwidth, kernels) or why CUDA is unavailable.\n\n%s",
               lh_cli_exit_status_text);
        return 0;
    }
    return host_json_command(a, "backends", lh_host_backends_json, print_backends);
}

static int resolve_or_explain(const lh_cli_args *a, bool explain)
{
    if (a->help) {
        printf("usage: llmhost %s MODEL [--json] [--config FILE.yaml] [--custom-module-dir DIR]...\n"
               "       [--dtype D] [--max-seq-len N] [--max-batch-size N] [--model-impl T[:MODE]]\n"
               "       [--mm-encoder-only] [--quant SCHEME] [--allow-insecure-plugins]\n"
               "       [--attn-backend NAME] [--attn-backend-fallback] [--set KEY=VALUE]...\n"
               "       [--device auto|cpu|cuda|cuda:N]\n"
               "%s\n%s",
               explain ? "explain" : "resolve",
               explain ? "Resolves MODEL, builds its module tree without allocating weights, and "
                         "prints the resolution trace, the device (which one and why; a CUDA "
                         "device that is not there is exit 14), the attention backend and the "
                         "memory plan.\n"
                       : "Resolves MODEL to the plugin that serves it, loading exactly that "
                         "plugin.\n",
               lh_cli_exit_status_text);
        return 0;
    }
    if (!a->model) {
        fprintf(stderr, "llmhost %s: MODEL (a model directory or config.json) is required\n",
                explain ? "explain" : "resolve");
        return LH_E_USAGE;
    }
    apply_log_level(a);
    lh_err err = {0};
    /* The run config is validated before any plugin can load (custom dirs may load eagerly). */
    if (lh_validate_run_config(a->config_file, (const char *const *)a->overrides, &err) != LH_OK)
        return report(&err);
    lh_host *h;
    int rc = lh_cli_open_host(a, &h, &err);
    if (rc)
        return report(&err);
    lh_resolve_request req = {.struct_size = sizeof req, .model = a->model,
                              .config_file = a->config_file,
                              .overrides = (const char *const *)a->overrides};
    char *text = NULL;
    lh_status st = explain ? lh_host_explain_json(h, &req, &text, &err)
                           : lh_host_resolve_json(h, &req, &text, &err);
    if (st == LH_OK && a->json) {
        print_json_text(text);
    } else if (st == LH_OK) {
        json_t *j = json_loads(text, 0, NULL);
        print_resolution(j);
        if (explain) {
            print_trace(j);
            print_device(j);
            print_attention(j);
            print_plan(j);
        }
        json_decref(j);
    }
    free(text);
    lh_host_free(h);
    return st == LH_OK ? 0 : report(&err);
}

int lh_cli_resolve(const lh_cli_args *a)
{
    return resolve_or_explain(a, false);
}

int lh_cli_explain(const lh_cli_args *a)
{
    return resolve_or_explain(a, true);
}
