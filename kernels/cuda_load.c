/* Loading the CUDA half of the kernel library (kernels/cuda/cuda_ops.h): once per process, the
 * first time anything asks for CUDA, dlopen libllmhost_kernels_cuda.so from this library's own
 * directory (or $LLMHOST_KERNELS_CUDA), check its table, probe the devices. The default
 * library is loaded only after the CUDA driver (libcuda.so.1) says it has a device. Every outcome is a
 * state with a reason (lh_k_cuda_load_state), never a crash: a missing library, a missing
 * cudart/cuBLAS, a foreign file, no driver and no device all leave the process on the CPU. */
#include "cpu/cpu_kernels.h"
#include "cuda/cuda_ops.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const lh_cuda_ops *lh_cuda_loaded;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
/* written inside the once (or read before it ran: NOT_TRIED) */
static _Atomic int load_state = LH_K_CUDA_NOT_TRIED;
static char load_reason[1024];

static const lh_cuda_host host_services = {
    .struct_size = sizeof(lh_cuda_host),
    .abi = LH_CUDA_ABI,
    .kctx_size = sizeof(lh_kctx),
    .kerr_v = lh_kerr_v,
    .last_error = lh_k_last_error,
    .rope_inv = lh_cpu_rope_inv,
    .rng_uniform = lh_k_rng_uniform,
};

static void set_state(lh_k_cuda_state st, const char *fmt, ...) LH_PRINTF(2, 3);
static void set_state(lh_k_cuda_state st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(load_reason, sizeof load_reason, fmt, ap);
    va_end(ap);
    load_state = st;
}

/* The library's path: $LLMHOST_KERNELS_CUDA, else LH_CUDA_LIBRARY_NAME in the directory this
 * library was loaded from. false when neither is known (a CPU-only build without the
 * override: nothing to load). */
static bool library_path(char *buf, size_t size, bool *from_env)
{
    const char *env = getenv("LLMHOST_KERNELS_CUDA");
    *from_env = env && *env;
    if (*from_env) {
        snprintf(buf, size, "%s", env);
        return true;
    }
#ifdef LH_HAVE_CUDA
    Dl_info info;
    if (dladdr((const void *)&lh_k_cuda_load_state, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash)
            snprintf(buf, size, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                     LH_CUDA_LIBRARY_NAME);
        else
            snprintf(buf, size, "%s", LH_CUDA_LIBRARY_NAME);
        return true;
    }
    snprintf(buf, size, "%s", LH_CUDA_LIBRARY_NAME); /* the loader's search path */
    return true;
#else
    return false;
#endif
}

/* Whether a CUDA driver with a device is there, asked of the driver library itself before the
 * CUDA kernels library (and with it cudart and cuBLAS, some 200 MB) is mapped: a machine with
 * the toolkit but no GPU pays nothing. $LLMHOST_CUDA_DRIVER names another driver library
 * (tests). false with the state set when there is none. */
static bool driver_has_device(void)
{
    const char *env = getenv("LLMHOST_CUDA_DRIVER");
    const char *path = env && *env ? env : "libcuda.so.1";
    dlerror();
    void *d = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!d) {
        const char *e = dlerror();
        set_state(LH_K_CUDA_NO_DEVICE, "no CUDA driver: %s", e ? e : path);
        return false;
    }
    typedef int (*cu_init_fn)(unsigned);
    typedef int (*cu_count_fn)(int *);
    typedef int (*cu_err_fn)(int, const char **);
    void *si = dlsym(d, "cuInit"), *sc = dlsym(d, "cuDeviceGetCount");
    void *se = dlsym(d, "cuGetErrorString");
    if (!si || !sc) {
        set_state(LH_K_CUDA_NO_DEVICE, "%s is not a CUDA driver (no cuInit / cuDeviceGetCount)",
                  path);
        dlclose(d);
        return false;
    }
    cu_init_fn cu_init;
    cu_count_fn cu_count;
    cu_err_fn cu_err = NULL;
    memcpy(&cu_init, &si, sizeof cu_init);
    memcpy(&cu_count, &sc, sizeof cu_count);
    if (se)
        memcpy(&cu_err, &se, sizeof cu_err);
    int n = 0;
    int r = cu_init(0);
    if (r == 0)
        r = cu_count(&n);
    if (r != 0 || n <= 0) {
        const char *what = NULL;
        if (r != 0 && cu_err)
            cu_err(r, &what);
        if (r != 0)
            set_state(LH_K_CUDA_NO_DEVICE, "the CUDA driver (%s) reports error %d (%s)", path,
                      r, what ? what : "no description");
        else
            set_state(LH_K_CUDA_NO_DEVICE, "no CUDA device (the driver %s finds none)", path);
        return false; /* the driver stays mapped: it is small, and unloading it is not safe */
    }
    return true; /* the driver stays: the CUDA runtime uses it */
}

static void load(void)
{
    char path[512];
    bool from_env = false;
    if (!library_path(path, sizeof path, &from_env)) {
        set_state(LH_K_CUDA_NOT_BUILT,
                  "this build has no CUDA kernels (built with -Dcuda=disabled or without nvcc)");
        return;
    }
    /* an explicit library (LLMHOST_KERNELS_CUDA) is always loaded, so that its own state is
     * the answer; the default one only where the driver has a device */
    if (!from_env && !driver_has_device())
        return;
    const char *origin = from_env ? " (LLMHOST_KERNELS_CUDA)" : "";
    struct stat sb;
    if (strchr(path, '/') && stat(path, &sb) != 0) {
        set_state(LH_K_CUDA_LIB_MISSING, "the CUDA kernels library is missing: %s%s: %s",
                  path, origin, strerror(errno));
        return;
    }
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        const bool dep = e && strstr(e, "cannot open shared object file");
        set_state(LH_K_CUDA_LOAD_FAILED, "the CUDA kernels library %s%s cannot be loaded: %s%s",
                  path, origin, e ? e : "unknown dlopen error",
                  dep ? " (a library it needs is not installed: the CUDA runtime and cuBLAS of "
                        "its build)"
                      : "");
        return;
    }
    dlerror();
    void *sym = dlsym(h, LH_CUDA_ENTRY_NAME);
    if (!sym) {
        const char *e = dlerror();
        set_state(LH_K_CUDA_BAD_LIBRARY,
                  "%s%s is not an llmhost CUDA kernels library: no symbol %s (%s)", path,
                  origin, LH_CUDA_ENTRY_NAME, e ? e : "dlsym found nothing");
        dlclose(h);
        return;
    }
    lh_cuda_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object pointer to function pointer (POSIX) */
    const lh_cuda_ops *ops = entry(&host_services);
    if (!ops || ops->struct_size != sizeof(lh_cuda_ops) || ops->abi != LH_CUDA_ABI ||
        ops->kctx_size != sizeof(lh_kctx)) {
        if (!ops)
            set_state(LH_K_CUDA_BAD_LIBRARY,
                      "%s%s refused this kernel library's table (CUDA ABI %u, %zu bytes): a "
                      "library of another llmhost build",
                      path, origin, LH_CUDA_ABI, sizeof(lh_cuda_host));
        else
            set_state(LH_K_CUDA_BAD_LIBRARY,
                      "%s%s is a CUDA kernels library of another llmhost build: table ABI %u, "
                      "%u bytes, context %u bytes; this library needs ABI %u, %zu bytes, "
                      "context %zu bytes",
                      path, origin, ops->abi, ops->struct_size, ops->kctx_size, LH_CUDA_ABI,
                      sizeof(lh_cuda_ops), sizeof(lh_kctx));
        dlclose(h);
        return;
    }
#define CHECK_FIELD(name)                                                                     \
    if (!ops->name) {                                                                         \
        set_state(LH_K_CUDA_BAD_LIBRARY, "%s%s: its table has no lh_cuda_" #name, path,    \
                  origin);                                                                    \
        dlclose(h);                                                                           \
        return;                                                                               \
    }
    LH_CUDA_OPS_LIST(CHECK_FIELD)
#undef CHECK_FIELD
    /* from here on the library stays (a context or graph may hold its code) */
    lh_cuda_loaded = ops;
    const int n = ops->device_count();
    if (n <= 0) {
        const char *r = ops->unavailable_reason();
        set_state(LH_K_CUDA_NO_DEVICE, "%s", r && *r ? r : "no CUDA device");
        return;
    }
    set_state(LH_K_CUDA_OK, "%s", "");
}

const lh_cuda_ops *lh_cuda_load(void)
{
    pthread_once(&load_once, load);
    return lh_cuda_loaded;
}

lh_k_cuda_state lh_k_cuda_load_state(const char **reason)
{
    const lh_k_cuda_state st = (lh_k_cuda_state)load_state;
    if (reason)
        *reason = st == LH_K_CUDA_NOT_TRIED ? "" : load_reason;
    return st;
}

const char *lh_k_cuda_state_name(lh_k_cuda_state s)
{
    switch (s) {
    case LH_K_CUDA_NOT_TRIED: return "not tried";
    case LH_K_CUDA_NOT_BUILT: return "not built";
    case LH_K_CUDA_LIB_MISSING: return "library missing";
    case LH_K_CUDA_LOAD_FAILED: return "load failed";
    case LH_K_CUDA_BAD_LIBRARY: return "bad library";
    case LH_K_CUDA_NO_DEVICE: return "no device";
    case LH_K_CUDA_OK: return "ok";
    }
    return NULL;
}
