/* llmhost plugin SDK: basic types shared by the host, the kernels and every plugin.
 *
 * One error convention everywhere: a function returns an lh_status; LH_OK is zero and every
 * other value is a distinct error class. The CLI exits with the numeric value of the class, so
 * these numbers are part of the user-facing contract: never renumber, only append. */
#ifndef LH_TYPES_H
#define LH_TYPES_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lh_status {
    LH_OK = 0,
    LH_E_INTERNAL = 1,        /* a bug in llmhost; please report */
    LH_E_USAGE = 2,           /* bad command line or API misuse */
    LH_E_CONFIG = 3,          /* config.json or run config invalid */
    LH_E_UNKNOWN_NAME = 4,    /* architecture / backend in no index */
    LH_E_MODULE_MISSING = 5,  /* index names a plugin file that does not exist */
    LH_E_LOAD = 6,            /* dlopen failed (dependency, undefined symbol, bad ELF) */
    LH_E_NOT_PLUGIN = 7,      /* no entry symbol, bad magic or bad descriptor */
    LH_E_ABI = 8,             /* plugin ABI version incompatible with the host */
    LH_E_INSECURE = 9,        /* plugin file or custom dir fails the security checks */
    LH_E_INIT = 10,           /* the plugin's init reported failure */
    LH_E_INDEX_DRIFT = 11,    /* index and plugin disagree about what it provides */
    LH_E_INDEX_PARSE = 12,    /* arch_index.tsv malformed */
    LH_E_IO = 13,             /* a file could not be read */
    LH_E_UNSUPPORTED = 14,    /* a valid request this build or target cannot serve */
    LH_E_NOMEM = 15,          /* allocation failed */
    LH_STATUS_COUNT_
} lh_status;

/* Element types. Numbering is ABI: append only. */
typedef enum lh_dtype {
    LH_DTYPE_INVALID = 0,
    LH_DTYPE_F32 = 1,
    LH_DTYPE_F16 = 2,
    LH_DTYPE_BF16 = 3,
    LH_DTYPE_FP8_E4M3 = 4,
    LH_DTYPE_INT8 = 5,
    LH_DTYPE_INT4 = 6, /* two values per byte */
    /* ggml's block formats (GGUF files), as ggml lays them out: each block holds
     * lh_k_dtype_block elements in a fixed number of bytes, its f16 scales little-endian.
     * Comments: elements per block / bytes per block, ggml type id. */
    LH_DTYPE_Q4_0 = 7,  /*  32 / 18, ggml 2 */
    LH_DTYPE_Q4_1 = 8,  /*  32 / 20, ggml 3 */
    LH_DTYPE_Q5_0 = 9,  /*  32 / 22, ggml 6 */
    LH_DTYPE_Q5_1 = 10, /*  32 / 24, ggml 7 */
    LH_DTYPE_Q8_0 = 11, /*  32 / 34, ggml 8 */
    LH_DTYPE_Q4_K = 12, /* 256 / 144, ggml 12 */
    LH_DTYPE_Q5_K = 13, /* 256 / 176, ggml 13 */
    LH_DTYPE_Q6_K = 14, /* 256 / 210, ggml 14 */
    LH_DTYPE_COUNT_
} lh_dtype;

typedef enum lh_log_level {
    LH_LOG_ERROR = 0,
    LH_LOG_WARN = 1,
    LH_LOG_INFO = 2,
    LH_LOG_DEBUG = 3
} lh_log_level;

#if defined(__GNUC__)
#define LH_PRINTF(fmt_idx, first_arg) __attribute__((format(printf, fmt_idx, first_arg)))
#define LH_EXPORT __attribute__((visibility("default")))
#else
#define LH_PRINTF(fmt_idx, first_arg)
#define LH_EXPORT
#endif

/* The one error record of the SDK and the embedding API: a status and its message, the
 * innermost cause last ("layer 3 attention: sequence 2: ..."). Whoever receives an lh_error *
 * fills it on failure; LH_ERROR_MSG_SIZE is a layout constant checked when a plugin loads.
 *
 * How plugin code reports a failure, everywhere: a call that is handed an lh_error * (a
 * model's check_config, every attention-backend op, the host's create_attention) fills it with
 * lh_error_set and returns its status; a phase that runs against a host context (init, a
 * model's construct, bind and forward) reports through that context's fail function
 * (init_fail, build_fail, bind_fail, fwd_fail), which fills the lh_error the context holds and
 * keeps the first one (sticky). Either way the host adds where it happened ("GPT2LMHeadModel:
 * layer 3: ...") and nothing else travels. Kernels (lh_kernels.h) return a status and leave
 * their message on their context for the caller to wrap (lh_k_last_error): the host's blocks
 * do that, so plugin code that calls blocks never reads it. */
#define LH_ERROR_MSG_SIZE 2048
typedef struct lh_error {
    lh_status code;
    char msg[LH_ERROR_MSG_SIZE];
} lh_error;

/* Sets *e (e may be NULL) to code and a printf-style message; returns code, so plugin code
 * can `return lh_error_set(err, LH_E_CONFIG, "...", ...);`. Header-only: a plugin references
 * no symbol of libllmhost. */
static inline lh_status lh_error_set(lh_error *e, lh_status code, const char *fmt, ...)
    LH_PRINTF(3, 4);
static inline lh_status lh_error_set(lh_error *e, lh_status code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

#ifdef __cplusplus
}
#endif
#endif
