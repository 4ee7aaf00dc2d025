/* A GGUF file: header, metadata and tensor table (lh_gguf_open), then its tokenizer and chat
 * template as the model opener reads them. */
#include "fuzz_common.h"

#include "llmhost.h"
#include "weights/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    const int fd = fuzz_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    lh_gguf_file *f = NULL;
    lh_err err = {0};
    if (lh_gguf_open(path, &f, &err) == LH_OK) {
        lh_gguf_close(f);
        lh_tokenizer *t = NULL;
        if (lh_tokenizer_load_gguf(path, &t, &err) == LH_OK)
            lh_tokenizer_free(t);
        lh_chat_template *c = NULL;
        if (lh_chat_template_load_gguf(path, &c, &err) == LH_OK)
            lh_chat_template_free(c);
    }
    close(fd);
    return 0;
}
