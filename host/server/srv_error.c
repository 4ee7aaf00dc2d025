#include "srv_error.h"

#include <jansson.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int lh_srv_fail(lh_srv_error *e, int status, const char *code, const char *param,
                const char *fmt, ...)
{
    e->status = status;
    e->type = status >= 500 ? "server_error" : "invalid_request_error";
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

char *lh_srv_error_json(const lh_srv_error *e)
{
    /* the message may quote request text cut at any byte: json_stringn refuses invalid UTF-8,
     * so a message that is not valid UTF-8 is written without the quote */
    json_t *msg = json_string(e->message);
    if (!msg)
        msg = json_string("(the error message quoted text that is not valid UTF-8)");
    json_t *o = json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", msg, "type",
                          e->type ? e->type : "server_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}
