/* arch_index.tsv (lh_arch_index_parse). */
#include "fuzz_common.h"

#include "index/arch_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    lh_arch_index idx;
    lh_err err = {0};
    if (lh_arch_index_parse(text, "fuzz/arch_index.tsv", &idx, &err) == LH_OK)
        lh_arch_index_free(&idx);
    free(text);
    return 0;
}
