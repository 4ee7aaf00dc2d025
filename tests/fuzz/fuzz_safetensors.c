/* A .safetensors file: header and the file-level checks (lh_st_open maps and validates). */
#include "fuzz_common.h"

#include "weights/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    const int fd = fuzz_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    lh_st_file *f = NULL;
    lh_err err = {0};
    if (lh_st_open(path, &f, &err) == LH_OK)
        lh_st_close(f);
    close(fd);
    return 0;
}
