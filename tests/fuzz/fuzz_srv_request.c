/* The server's request bodies: POST /v1/completions and /v1/chat/completions JSON
 * (lh_srv_req_parse, as the server calls it), then the error object of a refusal. The first
 * byte picks the endpoint. */
#include "fuzz_common.h"

#include "server/srv_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const lh_srv_kind kind = data[0] & 1 ? LH_SRV_CHAT : LH_SRV_COMPLETION;
    lh_srv_req r;
    lh_srv_error e;
    if (lh_srv_req_parse(kind, (const char *)data + 1, size - 1, &r, &e) != 0)
        free(lh_srv_error_json(&e));
    lh_srv_req_free(&r);
    return 0;
}
