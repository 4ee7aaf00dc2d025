/* config.json: the model-config parser (lh_model_config_parse). */
#include "fuzz_common.h"

#include "config/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    if (lh_model_config_parse(text, "fuzz/config.json", &cfg, &err) == LH_OK)
        lh_model_config_free(cfg);
    free(text);
    return 0;
}
