/* tokenizer.json, then a fuzzed text through it: input = JSON, a NUL byte, the text. Encode
 * (with and without special tokens), decode, the streaming decoder, and a stop-string matcher
 * over the ids. */
#include "fuzz_common.h"

#include "llmhost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json;
    const uint8_t *text;
    size_t text_len;
    fuzz_split(data, size, &json, &text, &text_len);
    if (!json)
        return 0;
    lh_tokenizer *t = NULL;
    lh_err err = {0};
    if (lh_tokenizer_load_json(json, strlen(json), "fuzz/tokenizer.json", &t, &err) != LH_OK) {
        free(json);
        return 0;
    }
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (lh_tokenizer_encode(t, (const char *)text, text_len, special, &ids, &n, &err) !=
            LH_OK)
            continue;
        char *out = NULL;
        size_t out_len = 0;
        if (lh_tokenizer_decode(t, ids, n, special, &out, &out_len, &err) == LH_OK)
            free(out);
        lh_detok_stream *ds = NULL;
        if (lh_detok_stream_create(t, special, &ds, &err) == LH_OK) {
            for (size_t i = 0; i < n && i < 256; i++) {
                char *chunk = NULL;
                size_t cl = 0;
                if (lh_detok_stream_step(ds, ids[i], &chunk, &cl, &err) == LH_OK)
                    free(chunk);
            }
            char *rest = NULL;
            size_t rl = 0;
            if (lh_detok_stream_finish(ds, &rest, &rl, &err) == LH_OK)
                free(rest);
            lh_detok_stream_free(ds);
        }
        const char *stops[] = {"\n\n", "a b"};
        lh_stop_matcher *m = NULL;
        if (lh_stop_matcher_create(t, stops, 2, &m, &err) == LH_OK) {
            bool hit = false;
            for (size_t i = 0; i < n && i < 256 && !hit; i++)
                lh_stop_matcher_step(m, ids[i], &hit, NULL, &err);
            lh_stop_matcher_free(m);
        }
        free(ids);
    }
    lh_tokenizer_free(t);
    free(json);
    return 0;
}
