/* A response's text as its tokens arrive: decoded incrementally (never a broken UTF-8
 * sequence), cut before the first stop string (OpenAI leaves the stop string out), and
 * handed out in pieces that never include a tail which might still become a stop string --
 * so a stream sends exactly the text a non-streamed response returns. */
#ifndef LH_SRV_TEXT_H
#define LH_SRV_TEXT_H

#include "core/strbuf.h"

#include "llmhost.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct lh_srv_text {
    lh_detok_stream *ds;
    lh_strbuf text;          /* everything decoded (and kept) so far */
    size_t sent;             /* bytes of text handed out by lh_srv_text_take */
    size_t chars;            /* code points of text */
    char *const *stops;      /* borrowed; n_stops 0: none */
    size_t n_stops;
    bool stopped;            /* a stop string appeared: text ends where it began */
    bool finished;           /* lh_srv_text_finish ran: everything may go out */
} lh_srv_text;

/* Starts an empty text over tok (borrowed; special tokens are skipped) with the stop strings
 * stops[0..n) (borrowed, must outlive t). Errors: LH_E_NOMEM. */
lh_status lh_srv_text_init(lh_srv_text *t, const lh_tokenizer *tok, char *const *stops,
                           size_t n, lh_err *err);
/* Adds a generated token's text. Once a stop string has appeared, later tokens add nothing.
 * Errors: as lh_detok_stream_step (an id the tokenizer lacks), LH_E_NOMEM. */
lh_status lh_srv_text_push(lh_srv_text *t, int32_t id, lh_err *err);
/* The generation ended: releases what the decoder still holds (unless a stop string ended
 * the text). Errors: as lh_detok_stream_finish. */
lh_status lh_srv_text_finish(lh_srv_text *t, lh_err *err);
/* The text that can go out now and was not handed out before: *s points into t (valid until
 * the next push or finish), the return value is its length (0: nothing yet). */
size_t lh_srv_text_take(lh_srv_text *t, const char **s);
void lh_srv_text_free(lh_srv_text *t);

#endif
