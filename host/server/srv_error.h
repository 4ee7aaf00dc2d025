/* The server's one error convention: every failure becomes an OpenAI error object,
 * {"error": {"message", "type", "param", "code"}}, with its HTTP status. */
#ifndef LH_SRV_ERROR_H
#define LH_SRV_ERROR_H

#include <stddef.h>

typedef struct lh_srv_error {
    int status;        /* HTTP status, 0: no error */
    const char *type;  /* "invalid_request_error" (4xx) or "server_error" (5xx); static */
    const char *code;  /* e.g. "invalid_value"; static; NULL writes null */
    char param[96];    /* the request field concerned ("" writes null) */
    char message[640];
} lh_srv_error;

/* Fills *e (status, code and param as given; type from the status; param may be NULL) and
 * returns -1, so that a check reads `return lh_srv_fail(...)`. */
int lh_srv_fail(lh_srv_error *e, int status, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The JSON text of e, malloc'ed (the caller frees it); NULL only when out of memory. */
char *lh_srv_error_json(const lh_srv_error *e);

#endif
