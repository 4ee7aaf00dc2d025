/* llmhost plugin check | index: plugin tooling. Every plugin is loaded in a child process
 * (host/loader/plugin_probe.c), so a plugin that crashes, exits or hangs is reported and the
 * CLI goes on; the logic lives in host/loader/plugin_tool.c, this file parses and renders. */
#include "cli_commands.h"
#include "lh_plugin.h"
#include "llmhost.h"
#include "loader/plugin_tool.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char plugin_usage[] =
    "usage: llmhost plugin check FILE.so|DIR [--json] [--timeout SECONDS]\n"
    "                            [--allow-insecure-plugins]\n"
    "       llmhost plugin index DIR [--json] [--timeout SECONDS] [--allow-insecure-plugins]\n"
    "\n"
    "check   loads each plugin in a child process (a crash, exit or hang is reported, never\n"
    "        fatal) and reports its ABI (and the host's), name, version, the security checks\n"
    "        and everything it registers; for a DIR also the differences from DIR/arch_index.tsv\n"
    "        in both directions and rows naming missing files. Exit 0 when nothing is wrong,\n"
    "        else the status of the first problem.\n"
    "index   writes DIR/arch_index.tsv from what the plugins in DIR register (each loaded in a\n"
    "        child process), atomically; when a plugin fails nothing is written and an\n"
    "        existing index stays as it was.\n"
    "\n"
    "options:\n"
    "  --json                     machine-readable report on stdout\n"
    "  --timeout SECONDS          a plugin still loading after this is killed (default 10)\n"
    "  --allow-insecure-plugins   load plugin files that fail the permission checks (reported)\n"
    "\n";

typedef struct plugin_args {
    const char *sub, *path;
    bool json, allow_insecure, help;
    double timeout_s;
} plugin_args;

static int parse(int argc, char **argv, plugin_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            a->help = true;
        } else if (strcmp(s, "--json") == 0) {
            a->json = true;
        } else if (strcmp(s, "--allow-insecure-plugins") == 0) {
            a->allow_insecure = true;
        } else if (strcmp(s, "--timeout") == 0 || strncmp(s, "--timeout=", 10) == 0) {
            const char *v = s[9] == '=' ? s + 10 : (i + 1 < argc ? argv[++i] : NULL);
            char *end = NULL;
            errno = 0;
            double t = v ? strtod(v, &end) : 0;
            if (!v || !*v || *end || errno || !(t > 0) || !isfinite(t) || t > 86400) {
                fprintf(stderr, "llmhost plugin: --timeout needs a number of seconds in "
                                "(0, 86400], got '%s'\n", v ? v : "");
                return LH_E_USAGE;
            }
            a->timeout_s = t;
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "llmhost plugin: unknown option '%s' (see llmhost plugin --help)\n",
                    s);
            return LH_E_USAGE;
        } else if (!a->sub) {
            a->sub = s;
        } else if (!a->path) {
            a->path = s;
        } else {
            fprintf(stderr, "llmhost plugin %s: unexpected argument '%s'\n", a->sub, s);
            return LH_E_USAGE;
        }
    }
    return 0;
}

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static void print_plugin(const json_t *p)
{
    bool ok = json_is_true(json_object_get(p, "ok"));
    if (ok)
        printf("%s: ok\n", str(p, "file"));
    else
        printf("%s: FAILED [%s] (%s)\n  error     %s\n", str(p, "file"), str(p, "status_name"),
               str(p, "outcome"), str(p, "error"));
    const json_t *name = json_object_get(p, "name");
    if (json_is_string(name))
        printf("  plugin    %s %s\n", json_string_value(name), str(p, "version"));
    const json_t *abi = json_object_get(p, "abi");
    if (json_is_object(abi))
        printf("  ABI       %s (host %s: %s)\n", str(abi, "plugin"), str(abi, "host"),
               json_is_true(json_object_get(abi, "compatible")) ? "compatible"
                                                                 : "INCOMPATIBLE");
    else
        printf("  ABI       unknown (no valid descriptor was read)\n");
    const json_t *sec = json_object_get(p, "security");
    if (json_is_true(json_object_get(sec, "ok")))
        printf("  security  ok\n");
    else
        printf("  security  %s: %s\n",
               json_is_true(json_object_get(sec, "waived")) ? "WAIVED (--allow-insecure-plugins)"
                                                           : "REFUSED",
               str(sec, "message"));
    const json_t *regs = json_object_get(p, "registers");
    size_t i;
    const json_t *r;
    if (!json_array_size(regs))
        printf("  registers nothing\n");
    json_array_foreach(regs, i, r) printf("  %-9s %s %s\n", i ? "" : "registers", str(r, "kind"),
                                          str(r, "name"));
}

static void print_rows(const json_t *idx, const char *key, const char *title)
{
    const json_t *rows = json_object_get(idx, key);
    size_t i;
    const json_t *r;
    json_array_foreach(rows, i, r)
    {
        const json_t *line = json_object_get(r, "line");
        printf("  %s: %s %s -> %s", title, str(r, "kind"), str(r, "name"),
               str(r, "shared_object"));
        if (json_is_integer(line))
            printf(" (line %lld)", (long long)json_integer_value(line));
        if (json_is_string(json_object_get(r, "registered_by")))
            printf(", but %s registers it", str(r, "registered_by"));
        printf("\n");
    }
}

static void print_report(const json_t *rep)
{
    printf("plugin check %s (%s; host plugin ABI %s)\n\n", str(rep, "path"), str(rep, "type"),
           str(rep, "host_abi"));
    const json_t *dsec = json_object_get(rep, "dir_security");
    if (dsec && !json_is_true(json_object_get(dsec, "ok")))
        printf("directory security: %s: %s\n\n",
               json_is_true(json_object_get(dsec, "waived")) ? "WAIVED" : "REFUSED",
               str(dsec, "message"));
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(rep, "plugins"), i, p) print_plugin(p);
    const json_t *idx = json_object_get(rep, "index");
    if (idx) {
        if (!json_is_true(json_object_get(idx, "present"))) {
            printf("\nindex: %s: none (the directory's plugins load eagerly)\n",
                   str(idx, "path"));
        } else if (json_is_string(json_object_get(idx, "error"))) {
            printf("\nindex: %s: UNREADABLE: %s\n", str(idx, "path"), str(idx, "error"));
        } else {
            size_t n = json_array_size(json_object_get(idx, "missing_from_index")) +
                       json_array_size(json_object_get(idx, "stale")) +
                       json_array_size(json_object_get(idx, "wrong_file")) +
                       json_array_size(json_object_get(idx, "missing_files"));
            printf("\nindex: %s: %s\n", str(idx, "path"),
                   n ? "DISAGREES with the plugins" : "matches the plugins");
            print_rows(idx, "missing_from_index", "registered, not in the index");
            print_rows(idx, "stale", "in the index, not registered");
            print_rows(idx, "wrong_file", "in the index under another file");
            print_rows(idx, "missing_files", "names a missing file");
            print_rows(idx, "unverified", "unverified (its plugin failed)");
        }
    }
    const json_t *problems = json_object_get(rep, "problems");
    if (!json_array_size(problems)) {
        printf("\nresult: ok\n");
        return;
    }
    printf("\nresult: %zu problem%s (exit %lld, %s)\n", json_array_size(problems),
           json_array_size(problems) == 1 ? "" : "s",
           (long long)json_integer_value(json_object_get(rep, "status")),
           str(rep, "status_name"));
    json_array_foreach(problems, i, p) printf("  [%s] %s\n", str(p, "status_name"),
                                              str(p, "message"));
}

static void print_json(json_t *o)
{
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
}

static int cmd_check(const plugin_args *a)
{
    json_t *rep = NULL;
    lh_err err = {0};
    lh_status st = lh_plugin_tool_check(a->path, a->allow_insecure, a->timeout_s, &rep, &err);
    if (!rep) {
        if (a->json) {
            json_t *o = json_pack("{s:s, s:b, s:i, s:s, s:s}", "path", a->path, "ok", false,
                                  "status", (int)st, "status_name", lh_status_name(st), "error",
                                  err.msg);
            print_json(o);
            json_decref(o);
        }
        fprintf(stderr, "llmhost plugin check: error [%s]: %s\n", lh_status_name(st), err.msg);
        return st;
    }
    if (a->json)
        print_json(rep);
    else
        print_report(rep);
    if (st != LH_OK) {
        size_t n = json_array_size(json_object_get(rep, "problems"));
        fprintf(stderr, "llmhost plugin check: %zu problem%s in %s; first: [%s] %s\n", n,
                n == 1 ? "" : "s", a->path, lh_status_name(st), err.msg);
    }
    json_decref(rep);
    return st;
}

static int cmd_index(const plugin_args *a)
{
    lh_err err = {0};
    char *written = NULL;
    size_t n_rows = 0;
    lh_status st =
        lh_plugin_tool_index(a->path, a->allow_insecure, a->timeout_s, &written, &n_rows, &err);
    if (st != LH_OK) {
        if (a->json) {
            json_t *o = json_pack("{s:s, s:b, s:i, s:s, s:s}", "dir", a->path, "ok", false,
                                  "status", (int)st, "status_name", lh_status_name(st), "error",
                                  err.msg);
            print_json(o);
            json_decref(o);
        }
        fprintf(stderr, "llmhost plugin index: error [%s]: %s (an existing index is left as "
                        "it was)\n", lh_status_name(st), err.msg);
        return st;
    }
    if (a->json) {
        json_t *o = json_pack("{s:s, s:b, s:s, s:i}", "dir", a->path, "ok", true, "index",
                              written, "rows", (int)n_rows);
        print_json(o);
        json_decref(o);
    } else {
        printf("wrote %s (%zu row%s)\n", written, n_rows, n_rows == 1 ? "" : "s");
    }
    free(written);
    return LH_OK;
}

int lh_cli_plugin(int argc, char **argv)
{
    plugin_args a;
    int rc = parse(argc, argv, &a);
    if (rc != 0)
        return rc;
    if (a.help || !a.sub) {
        fputs(plugin_usage, a.help ? stdout : stderr);
        if (a.help) {
            fputs(lh_cli_exit_status_text, stdout);
            return 0;
        }
        return LH_E_USAGE;
    }
    if (strcmp(a.sub, "check") != 0 && strcmp(a.sub, "index") != 0) {
        fprintf(stderr, "llmhost plugin: unknown subcommand '%s'; subcommands: check, index\n",
                a.sub);
        return LH_E_USAGE;
    }
    if (!a.path) {
        fprintf(stderr, "llmhost plugin %s: needs a %s\n", a.sub,
                strcmp(a.sub, "check") == 0 ? "plugin file or directory" : "directory");
        return LH_E_USAGE;
    }
    return strcmp(a.sub, "check") == 0 ? cmd_check(&a) : cmd_index(&a);
}
