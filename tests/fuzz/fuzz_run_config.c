/* The YAML run config: parsed as `--config` reads it, then validated (lh_run_config_*). */
#include "fuzz_common.h"

#include "config/run_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    if (lh_run_config_load_string(&rc, text, "fuzz.yaml", &err) == LH_OK)
        lh_run_config_validate(&rc, &err);
    lh_run_config_free(&rc);
    free(text);
    return 0;
}
