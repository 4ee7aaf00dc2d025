/* generation_config.json (lh_generation_config_parse). */
#include "fuzz_common.h"

#include "config/generation_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lh_generation_config g;
    lh_err err = {0};
    lh_generation_config_parse((const char *)data, size, "fuzz/generation_config.json", &g,
                               &err);
    lh_generation_config_free(&g);
    return 0;
}
