/* A chat template: parsed (lh_chat_template_from_string), then rendered over messages whose
 * contents are fuzzed too: input = template, a NUL byte, message text (split into a system,
 * user and assistant turn at further NULs). Rendering is bounded by the engine's own limits. */
#include "fuzz_common.h"

#include "llmhost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *source;
    const uint8_t *rest;
    size_t rest_len;
    fuzz_split(data, size, &source, &rest, &rest_len);
    if (!source)
        return 0;
    lh_chat_template *t = NULL;
    lh_err err = {0};
    if (lh_chat_template_from_string(source, strlen(source),
                                     "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", &t,
                                     &err) != LH_OK) {
        free(source);
        return 0;
    }
    char *parts[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        const uint8_t *next;
        size_t next_len;
        fuzz_split(rest, rest_len, &parts[i], &next, &next_len);
        rest = next;
        rest_len = next_len;
    }
    const lh_chat_message msgs[3] = {{"system", parts[0] ? parts[0] : ""},
                                     {"user", parts[1] ? parts[1] : ""},
                                     {"assistant", parts[2] ? parts[2] : ""}};
    const lh_chat_render_options ro = {.struct_size = sizeof ro, .add_generation_prompt = true,
                                       .fixed_now = true, .now_unix = 1700000000};
    for (size_t n = 1; n <= 3; n++) {
        char *out = NULL;
        size_t len = 0;
        if (lh_chat_template_render(t, msgs, n, &ro, &out, &len, &err) == LH_OK)
            free(out);
    }
    for (int i = 0; i < 3; i++)
        free(parts[i]);
    lh_chat_template_free(t);
    free(source);
    return 0;
}
