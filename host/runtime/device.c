/* Device resolution: what the run config asks for (device: auto|cpu|cuda|cuda:N, or
 * LLMHOST_DEVICE when neither the file nor a flag says) against the devices the kernel library
 * finds. See device.h. */
#include "runtime/device.h"

#include "config/run_config_keys.h"
#include "core/err.h"

#include "lh_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the device setting came from, as explain and the errors name it. */
static const char *device_from(const lh_run_config *rc, char *buf, size_t n)
{
    char at[256];
    const lh_value_origin o = rc->device_origin;
    lh_value_origin_str(rc, o, at, sizeof at);
    snprintf(buf, n, "%s%s", o.kind == LH_ORIGIN_YAML ? "run config " : "",
             o.kind == LH_ORIGIN_FLAG ? "--device" : at);
    return buf;
}

lh_status lh_run_resolve_device(const lh_run_config *rc, lh_device *out, char *why,
                                size_t why_size, lh_err *err)
{
    char scratch[8];
    if (!why || why_size == 0) {
        why = scratch;
        why_size = sizeof scratch;
    }
    why[0] = '\0';
    if (!rc || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_run_resolve_device: %s is NULL",
                          rc ? "out" : "rc");
    *out = (lh_device){LH_DEVICE_CPU, 0};
    lh_status st = lh_run_config_validate_device(rc, err);
    if (st != LH_OK)
        return st;
    char from[1024];
    device_from(rc, from, sizeof from);
    /* No device in the run config or flags: LLMHOST_DEVICE, when set, takes the place of the
     * default (auto) -- how an operator pins a machine, and how the test suites keep their
     * CPU numerics on a GPU machine. */
    lh_run_config env_rc;
    const char *env = getenv("LLMHOST_DEVICE");
    if (rc->device_auto && rc->device_origin.kind == LH_ORIGIN_DEFAULT && env && *env) {
        char bad[256];
        bool is_auto;
        lh_device d;
        if (!lh_rc_parse_device(env, &is_auto, &d, bad, sizeof bad))
            return lh_err_set(err, LH_E_CONFIG, "LLMHOST_DEVICE: %s", bad);
        memcpy(&env_rc, rc, sizeof env_rc);
        env_rc.device = d;
        env_rc.device_auto = is_auto;
        rc = &env_rc;
        snprintf(from, sizeof from, "LLMHOST_DEVICE=%s", env);
    }
    /* an explicit cpu never wakes the CUDA driver */
    if (!rc->device_auto && rc->device.kind == LH_DEVICE_CPU) {
        snprintf(why, why_size, "%s", from);
        return LH_OK;
    }
    const int n_cuda = lh_k_cuda_device_count();
    if (rc->device_auto) {
        if (n_cuda > 0) {
            *out = (lh_device){LH_DEVICE_CUDA, 0};
            snprintf(why, why_size, "auto: %d CUDA device%s", n_cuda, n_cuda == 1 ? "" : "s");
        } else {
            const char *r = lh_k_cuda_unavailable_reason();
            snprintf(why, why_size, "auto: no CUDA device (%s)", r && *r ? r : "none found");
        }
        return LH_OK;
    }
    const int idx = rc->device.index;
    if (idx < n_cuda) {
        *out = rc->device;
        snprintf(why, why_size, "%s", from);
        return LH_OK;
    }
    if (n_cuda <= 0) {
        const char *r = lh_k_cuda_unavailable_reason();
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "device cuda:%d (from %s) is not available: %s; use device cpu, or "
                          "auto (the CPU when no CUDA device is usable)",
                          idx, from, r && *r ? r : "no CUDA device");
    }
    char present[48];
    if (n_cuda == 1)
        snprintf(present, sizeof present, "cuda:0");
    else
        snprintf(present, sizeof present, "cuda:0 to cuda:%d", n_cuda - 1);
    return lh_err_set(err, LH_E_UNSUPPORTED,
                      "device cuda:%d (from %s) is not available: %d CUDA device%s present "
                      "(%s); use one of them, cpu or auto",
                      idx, from, n_cuda, n_cuda == 1 ? " is" : "s are", present);
}
