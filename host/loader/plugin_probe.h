/* Internal: loading one plugin file in a child process, to learn what it is and what it
 * registers without letting it touch (or take down) the calling process.
 *
 * The child is a fork of the caller (no exec: it runs the same loader code on the same host
 * API table, in the tool, the CLI and the library tests alike). In the child, the fatal-signal
 * handlers are reset to their defaults (so a sanitizer's handler does not turn a plugin's
 * SIGSEGV into an exit status), stdout goes to stderr (a plugin's output cannot corrupt the
 * caller's --json), exit() becomes _exit() (no inherited atexit handler or buffer flush runs
 * twice; no sanitizer leak check of the child's copy of the caller), and the child dies with
 * its parent (PR_SET_PDEATHSIG). It reports, through a pipe, how far it got (security check,
 * dlopen, entry, init), the descriptor (name, version, ABI) and the loader's verdict with
 * the registration log. A child that crashes, exits or hangs past the timeout (killed, with
 * its process group) is reported as such, with the phase it was in.
 *
 * Call it from a single-threaded process (the CLI, the generator tool, a test): the child
 * of a multi-threaded process may inherit a lock another thread held. */
#ifndef LH_LOADER_PLUGIN_PROBE_H
#define LH_LOADER_PLUGIN_PROBE_H

#include "index/arch_index.h"

#define LH_PROBE_DEFAULT_TIMEOUT_S 10.0

typedef enum lh_probe_outcome {
    LH_PROBE_REPORTED = 0, /* the child reported the loader's verdict (ok or an error class) */
    LH_PROBE_CRASHED,      /* killed by a signal (term_signal) */
    LH_PROBE_EXITED,       /* exited (exit_status) before reporting */
    LH_PROBE_TIMED_OUT,    /* still running after the timeout: killed */
    LH_PROBE_NOT_RUN       /* fork / pipe failed (status LH_E_INTERNAL) */
} lh_probe_outcome;

typedef struct lh_probe_reg {
    lh_kind kind;
    char *name;
} lh_probe_reg;

typedef struct lh_plugin_probe {
    char *path;
    lh_status status; /* LH_OK or the error class (crash/hang/exit: by the phase, see .c) */
    char *msg;        /* the error message; NULL when status is LH_OK */
    lh_probe_outcome outcome;
    int term_signal, exit_status;
    /* the last phase the child entered: "security check", "dlopen" (constructors), "entry",
     * then "init" (the loader, up to and including init) or "load" (the loader, for a file
     * that has no entry function or did not dlopen: no plugin code can run) */
    char *phase;
    bool has_abi; /* the descriptor's magic was right: abi_major/minor are the plugin's */
    unsigned abi_major, abi_minor;
    char *plugin_name, *plugin_version; /* from the descriptor, or NULL */
    char *insecure_waived; /* the security finding that --allow-insecure-plugins waived */
    lh_probe_reg *regs; /* what init registered, in order (empty unless status is LH_OK) */
    size_t n_regs;
} lh_plugin_probe;

/* Probes `path` in a child (see above). Always fills *out (lh_plugin_probe_free); returns
 * out->status and, when it is not LH_OK, sets err to the same code and message. */
lh_status lh_plugin_probe_file(const char *path, bool allow_insecure, double timeout_s,
                               lh_plugin_probe *out, lh_err *err);
void lh_plugin_probe_free(lh_plugin_probe *p);
/* Whether a plugin ABI is accepted by this host (major equal, minor not above). */
bool lh_plugin_abi_compatible(unsigned major, unsigned minor);

#endif
