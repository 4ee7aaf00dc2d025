#include "core/strbuf.h"
#include "plugin_probe.h"

#include "core/err.h"
#include "loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* Fields every ABI 1.x descriptor has (as in loader.c). */
#define PROBE_DESCRIPTOR_MIN_SIZE                                                              \
    (offsetof(lh_plugin_descriptor, init) + sizeof(lh_plugin_init_fn))
#define PROBE_MAX_REPORT (4u << 20)

bool lh_plugin_abi_compatible(unsigned major, unsigned minor)
{
    return major == LH_PLUGIN_ABI_MAJOR && minor <= LH_PLUGIN_ABI_MINOR;
}

/* ---- the child ------------------------------------------------------------------------ */

/* One record: a type byte, a 4-byte length, the bytes. */
static void put_bytes(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(125);
        p += w;
        n -= (size_t)w;
    }
}

static void put(int fd, char type, const char *s)
{
    size_t n = s ? strnlen(s, 65536) : 0;
    unsigned char hdr[5] = {(unsigned char)type, (unsigned char)(n & 0xff),
                            (unsigned char)((n >> 8) & 0xff), (unsigned char)((n >> 16) & 0xff),
                            0};
    put_bytes(fd, hdr, sizeof hdr);
    if (n)
        put_bytes(fd, s, n);
}

static void child_on_exit(int status, void *arg)
{
    (void)arg;
    _exit(status);
}

static void child_setup(void)
{
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        sigaction(fatal[i], &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    on_exit(child_on_exit, NULL);
}

/* Reads the descriptor (reported even when the loader then refuses it, e.g. ABI mismatch).
 * Returns whether the file got as far as having an entry function: only then can the loader
 * below run plugin code (init). */
static bool describe(int fd, const char *path)
{
    put(fd, 'P', "dlopen");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return false; /* the loader reports it, with its own class */
    void *sym = dlsym(h, LH_PLUGIN_ENTRY_SYMBOL);
    if (!sym)
        return false;
    put(fd, 'P', "entry");
    lh_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    const lh_plugin_descriptor *d = entry();
    if (!d || d->magic != LH_PLUGIN_MAGIC)
        return true;
    char abi[64];
    snprintf(abi, sizeof abi, "%u %u", d->abi_major, d->abi_minor);
    put(fd, 'A', abi);
    if (d->struct_size < PROBE_DESCRIPTOR_MIN_SIZE)
        return true;
    if (d->name)
        put(fd, 'N', d->name);
    if (d->version)
        put(fd, 'V', d->version);
    /* the handle stays open: the loader's dlopen below finds the same object */
    return true;
}

static void child_main(int fd, const char *path, bool allow_insecure)
{
    child_setup();
    put(fd, 'P', "security check");
    lh_err err = {0};
    lh_status st = lh_security_check_file(path, &err);
    if (st == LH_E_INSECURE && allow_insecure)
        put(fd, 'W', err.msg);
    bool has_entry = false;
    if (st == LH_OK || (st == LH_E_INSECURE && allow_insecure))
        has_entry = describe(fd, path);
    /* the loader's own steps; only init can run plugin code that has not run yet */
    put(fd, 'P', has_entry ? "init" : "load");
    lh_module_rec *rec = calloc(1, sizeof *rec);
    if (!rec)
        _exit(124);
    rec->path = strdup(path);
    const char *slash = strrchr(path, '/');
    rec->file_name = strdup(slash ? slash + 1 : path);
    unsigned calls = 0;
    err = (lh_err){0};
    st = lh_loader_load(rec, allow_insecure, &calls, &err);
    char code[32];
    snprintf(code, sizeof code, "%d", (int)st);
    put(fd, 'S', code);
    if (st != LH_OK)
        put(fd, 'M', err.msg);
    for (size_t i = 0; st == LH_OK && i < rec->n_log; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%d", (int)rec->log[i]->kind);
        put(fd, 'K', buf);
        put(fd, 'R', rec->log[i]->name);
    }
    put(fd, 'E', NULL);
    _exit(0);
}

/* ---- the parent ----------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* the child's report, in the host's growable buffer (bytes; limit PROBE_MAX_REPORT) */
typedef lh_strbuf probe_buf;

/* Whether buf holds a complete 'E' record, i.e. the child said everything. */
static bool report_complete(const probe_buf *b)
{
    size_t i = 0;
    while (i + 5 <= b->len) {
        size_t n = (size_t)(unsigned char)b->s[i + 1] |
                   (size_t)(unsigned char)b->s[i + 2] << 8 |
                   (size_t)(unsigned char)b->s[i + 3] << 16;
        if (b->s[i] == 'E')
            return true;
        i += 5 + n;
    }
    return false;
}

static char *dupn(const char *s, size_t n)
{
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = '\0';
    }
    return r;
}

static void parse_report(const probe_buf *b, lh_plugin_probe *p, bool *got_status)
{
    size_t i = 0;
    int kind = -1;
    while (i + 5 <= b->len) {
        char type = b->s[i];
        size_t n = (size_t)(unsigned char)b->s[i + 1] |
                   (size_t)(unsigned char)b->s[i + 2] << 8 |
                   (size_t)(unsigned char)b->s[i + 3] << 16;
        if (i + 5 + n > b->len)
            break;
        char *s = dupn(b->s + i + 5, n);
        i += 5 + n;
        if (!s)
            break;
        switch (type) {
        case 'P': free(p->phase); p->phase = s; s = NULL; break;
        case 'W': free(p->insecure_waived); p->insecure_waived = s; s = NULL; break;
        case 'A':
            if (sscanf(s, "%u %u", &p->abi_major, &p->abi_minor) == 2)
                p->has_abi = true;
            break;
        case 'N': free(p->plugin_name); p->plugin_name = s; s = NULL; break;
        case 'V': free(p->plugin_version); p->plugin_version = s; s = NULL; break;
        case 'S': p->status = (lh_status)atoi(s); *got_status = true; break;
        case 'M': free(p->msg); p->msg = s; s = NULL; break;
        case 'K': kind = atoi(s); break;
        case 'R':
            if (kind >= 0 && kind < LH_KIND_COUNT) {
                lh_probe_reg *g = realloc(p->regs, (p->n_regs + 1) * sizeof *g);
                if (g) {
                    p->regs = g;
                    g[p->n_regs].kind = (lh_kind)kind;
                    g[p->n_regs].name = s;
                    s = NULL;
                    p->n_regs++;
                }
            }
            kind = -1;
            break;
        default: break;
        }
        free(s);
    }
}

/* The class of a child that did not report: by the phase it died in. */
static lh_status phase_class(const char *phase)
{
    if (phase && strcmp(phase, "init") == 0)
        return LH_E_INIT;
    if (strcmp(phase, "entry") == 0)
        return LH_E_NOT_PLUGIN;
    return LH_E_LOAD; /* security check, dlopen (the plugin's constructors), load */
}

static const char *phase_words(const char *phase)
{
    if (!phase)
        return "before loading";
    if (strcmp(phase, "init") == 0)
        return "in init";
    if (strcmp(phase, "entry") == 0)
        return "in its entry function";
    if (strcmp(phase, "dlopen") == 0)
        return "while being loaded (dlopen: its constructors)";
    if (strcmp(phase, "load") == 0)
        return "while being loaded";
    return "during the security check";
}

static void set_msg(lh_plugin_probe *p, const char *fmt, ...) LH_PRINTF(2, 3);
static void set_msg(lh_plugin_probe *p, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(p->msg);
    p->msg = strdup(buf);
}

lh_status lh_plugin_probe_file(const char *path, bool allow_insecure, double timeout_s,
                               lh_plugin_probe *out, lh_err *err)
{
    memset(out, 0, sizeof *out);
    out->path = strdup(path);
    out->status = LH_E_INTERNAL;
    out->outcome = LH_PROBE_NOT_RUN;
    if (timeout_s <= 0)
        timeout_s = LH_PROBE_DEFAULT_TIMEOUT_S;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        set_msg(out, "%s: cannot create a pipe to probe it: %s", path, strerror(errno));
        return lh_err_set(err, out->status, "%s", out->msg);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        set_msg(out, "%s: cannot fork a process to probe it: %s", path, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return lh_err_set(err, out->status, "%s", out->msg);
    }
    if (pid == 0) {
        close(fds[0]);
        child_main(fds[1], path, allow_insecure);
        _exit(126);
    }
    setpgid(pid, pid); /* also done in the child; whichever runs first */
    close(fds[1]);

    probe_buf b = {.limit = PROBE_MAX_REPORT};
    double deadline = now_s() + timeout_s;
    bool timed_out = false, reaped = false;
    int ws = 0;
    for (;;) {
        if (report_complete(&b))
            break;
        double left = deadline - now_s();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int slice = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        int pr = poll(&pfd, 1, slice);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr > 0) {
            if (!lh_strbuf_reserve(&b, 65536))
                break;
            ssize_t r = read(fds[0], b.s + b.len, 65536);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break; /* EOF: the child (and whatever it forked) closed the pipe */
            b.len += (size_t)r;
            continue;
        }
        /* nothing to read: a child that died while something it forked holds the pipe */
        pid_t w = waitpid(pid, &ws, WNOHANG);
        if (w == pid) {
            reaped = true;
            /* what it wrote between the poll and its death is still in the pipe */
            while (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN) &&
                   lh_strbuf_reserve(&b, 65536)) {
                ssize_t r = read(fds[0], b.s + b.len, 65536);
                if (r <= 0)
                    break;
                b.len += (size_t)r;
            }
            break;
        }
    }
    close(fds[0]);
    if (!reaped) {
        /* Whatever still runs in the child's group goes: a hung child, anything the plugin
         * forked, a child that closed the pipe and went on. Unreaped, the child's pid still
         * names this group. A child that already ended keeps the status it ended with; one
         * that reported everything is ended here rather than waited for. */
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        for (;;) {
            pid_t w = waitpid(pid, &ws, 0);
            if (w == pid || (w < 0 && errno != EINTR))
                break;
        }
    }

    bool got_status = false;
    parse_report(&b, out, &got_status);
    lh_strbuf_free(&b);
    if (timed_out) {
        out->outcome = LH_PROBE_TIMED_OUT;
        out->status = phase_class(out->phase);
        set_msg(out, "%s: did not finish %s within %g s (killed; it hangs?)", path,
                phase_words(out->phase), timeout_s);
    } else if (got_status) {
        out->outcome = LH_PROBE_REPORTED;
        if (out->status != LH_OK && !out->msg)
            set_msg(out, "%s: %s", path, lh_status_name(out->status));
    } else if (WIFSIGNALED(ws)) {
        out->outcome = LH_PROBE_CRASHED;
        out->term_signal = WTERMSIG(ws);
        out->status = phase_class(out->phase);
        set_msg(out, "%s: crashed with signal %d (%s) %s", path, out->term_signal,
                strsignal(out->term_signal), phase_words(out->phase));
    } else {
        out->outcome = LH_PROBE_EXITED;
        out->exit_status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
        out->status = phase_class(out->phase);
        set_msg(out, "%s: exited with status %d %s (a plugin must not end the process)", path,
                out->exit_status, phase_words(out->phase));
    }
    if (out->status != LH_OK) {
        for (size_t i = 0; i < out->n_regs; i++)
            free(out->regs[i].name);
        out->n_regs = 0;
        return lh_err_set(err, out->status, "%s", out->msg ? out->msg : "(no message)");
    }
    return LH_OK;
}

void lh_plugin_probe_free(lh_plugin_probe *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_regs; i++)
        free(p->regs[i].name);
    free(p->regs);
    free(p->path);
    free(p->msg);
    free(p->phase);
    free(p->plugin_name);
    free(p->plugin_version);
    free(p->insecure_waived);
    memset(p, 0, sizeof *p);
}
