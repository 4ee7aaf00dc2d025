/* Internal: deciding the device a run gets from what its run config asks (device key) and the
 * devices the kernel library finds. */
#ifndef LH_RUNTIME_DEVICE_H
#define LH_RUNTIME_DEVICE_H

#include "config/run_config.h"

#include <stddef.h>

/* Decides the device: auto -> cuda:0 when lh_k_cuda_device_count() > 0, else cpu (why names
 * lh_k_cuda_unavailable_reason()); cpu -> cpu; cuda[:N] -> that device, or LH_E_UNSUPPORTED
 * naming what was asked, the reason CUDA is unavailable or the number of devices present, and
 * the key's origin (YAML file:line:col or the flag). When the device is the default (neither
 * YAML nor a flag set it), LLMHOST_DEVICE, when set, takes the default's place (a bad value is
 * LH_E_CONFIG). why (may be NULL) receives a one-line explanation for explain ("auto: no CUDA
 * device (REASON)" / "auto: 1 CUDA device" / "run config FILE:3:9" / "--device"). A device
 * kind or ordinal no parser produces (API users fill the struct) is LH_E_CONFIG; rc NULL or out
 * NULL is LH_E_USAGE. *out is {CPU, 0} on every error. */
lh_status lh_run_resolve_device(const lh_run_config *rc, lh_device *out, char *why,
                                size_t why_size, lh_err *err);

#endif
