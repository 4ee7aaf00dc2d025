/* The llmhost CLI commands. Each returns the process exit status (an lh_status value). */
#ifndef LH_CLI_COMMANDS_H
#define LH_CLI_COMMANDS_H

#include "cli_args.h"
#include "llmhost.h"

/* The exit-status table printed by every --help. */
extern const char lh_cli_exit_status_text[];

/* A host with the args' custom dirs (flags, then $LLMHOST_CUSTOM_MODULE_DIRS). Returns 0, or
 * the lh_status of the failure with *h NULL (freed) and err set. */
int lh_cli_open_host(const lh_cli_args *a, lh_host **h, lh_err *err);
/* The run config checked, a host with the args' custom dirs, and the engine of a->model with
 * `overrides` (NULL-terminated run-config "key=value"). Returns 0, or the lh_status of the
 * failure with err set (*h and *e may then hold what was opened: the caller frees both). */
int lh_cli_open_engine(const lh_cli_args *a, char *const *overrides, lh_host **h,
                       lh_engine **e, lh_err *err);
int lh_cli_list(const lh_cli_args *a);
int lh_cli_resolve(const lh_cli_args *a);
int lh_cli_explain(const lh_cli_args *a);
int lh_cli_backends(const lh_cli_args *a);
int lh_cli_run(const lh_cli_args *a);
int lh_cli_serve(const lh_cli_args *a);
int lh_cli_tokenize(const lh_cli_args *a);
int lh_cli_logits(const lh_cli_args *a);
int lh_cli_bench(const lh_cli_args *a);
/* `llmhost plugin check|index ...`: parses its own arguments (argv[1] is "plugin"). */
int lh_cli_plugin(int argc, char **argv);

#endif
