#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[LH_STATUS_COUNT_] = {
    [LH_OK] = "ok",
    [LH_E_INTERNAL] = "internal-error",
    [LH_E_USAGE] = "usage",
    [LH_E_CONFIG] = "config-error",
    [LH_E_UNKNOWN_NAME] = "unknown-name",
    [LH_E_MODULE_MISSING] = "module-file-missing",
    [LH_E_LOAD] = "load-failure",
    [LH_E_NOT_PLUGIN] = "not-a-plugin",
    [LH_E_ABI] = "abi-mismatch",
    [LH_E_INSECURE] = "insecure-file",
    [LH_E_INIT] = "init-failure",
    [LH_E_INDEX_DRIFT] = "index-drift",
    [LH_E_INDEX_PARSE] = "index-parse-error",
    [LH_E_IO] = "io-error",
    [LH_E_UNSUPPORTED] = "unsupported",
    [LH_E_NOMEM] = "out-of-memory",
};

const char *lh_status_name(lh_status s)
{
    if ((int)s < 0 || s >= LH_STATUS_COUNT_ || !status_names[s])
        return "unknown-status";
    return status_names[s];
}

lh_status lh_err_set(lh_err *err, lh_status code, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

lh_status lh_err_prefix(lh_err *err, const char *fmt, ...)
{
    if (!err)
        return LH_E_INTERNAL;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* shift the message right and put "prefix: " in front, truncating the tail if needed */
    size_t cap = sizeof err->msg;
    size_t pl = strlen(prefix);
    if (pl + 3 > cap)
        pl = cap - 3;
    size_t ml = strnlen(err->msg, cap - 1);
    if (pl + 2 + ml > cap - 1)
        ml = cap - 1 - pl - 2;
    memmove(err->msg + pl + 2, err->msg, ml);
    memcpy(err->msg, prefix, pl);
    err->msg[pl] = ':';
    err->msg[pl + 1] = ' ';
    err->msg[pl + 2 + ml] = '\0';
    return err->code;
}

void lh_err_clear(lh_err *err)
{
    if (err) {
        err->code = LH_OK;
        err->msg[0] = '\0';
    }
}
