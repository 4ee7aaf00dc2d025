/* Shared by the runtime test programs: the host over the build tree's built-in plugins that
 * their engines open on. */
#ifndef LH_TEST_RT_HOST_H
#define LH_TEST_RT_HOST_H

#include "llmhost.h"
#include "runner.h"

#include <stdio.h>

/* NULL (message on stderr) when the host cannot be created; free with lh_host_free. */
static inline lh_host *rt_builtin_host(void)
{
    lh_host_options opts = {.struct_size = sizeof opts,
                            .plugin_dir = lh_test_env("LH_BUILTIN_PLUGINS")};
    lh_err err = {0};
    lh_host *h = NULL;
    if (lh_host_create(&opts, &h, &err) != LH_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    return h;
}

#endif
