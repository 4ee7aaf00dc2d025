#include "srv_text.h"

#include "core/err.h"

#include <stdlib.h>
#include <string.h>

lh_status lh_srv_text_init(lh_srv_text *t, const lh_tokenizer *tok, char *const *stops,
                           size_t n, lh_err *err)
{
    memset(t, 0, sizeof *t);
    t->stops = stops;
    t->n_stops = n;
    return lh_detok_stream_create(tok, true, &t->ds, err);
}

static size_t count_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* Appends a decoded piece; when a stop string now appears, cuts the text at its start. Only
 * text from `sent` on is searched: before it, no stop string can begin (take never hands out
 * a tail that could start one). */
static lh_status add(lh_srv_text *t, const char *piece, size_t len)
{
    if (t->stopped || len == 0)
        return LH_OK;
    lh_strbuf_add(&t->text, piece, len);
    if (!lh_strbuf_ok(&t->text))
        return LH_E_NOMEM;
    size_t cut = t->text.len;
    for (size_t i = 0; i < t->n_stops; i++) {
        const char *at = memmem(t->text.s + t->sent, t->text.len - t->sent, t->stops[i],
                                strlen(t->stops[i]));
        if (at && (size_t)(at - t->text.s) < cut)
            cut = (size_t)(at - t->text.s);
    }
    if (cut < t->text.len) {
        lh_strbuf_truncate(&t->text, cut);
        t->stopped = true;
    }
    t->chars = count_chars(t->text.s, t->text.len);
    return LH_OK;
}

lh_status lh_srv_text_push(lh_srv_text *t, int32_t id, lh_err *err)
{
    if (t->stopped)
        return LH_OK;
    char *chunk = NULL;
    size_t len = 0;
    lh_status st = lh_detok_stream_step(t->ds, id, &chunk, &len, err);
    if (st == LH_OK && add(t, chunk, len) != LH_OK)
        st = lh_err_set(err, LH_E_NOMEM, "out of memory for the response text");
    free(chunk);
    return st;
}

lh_status lh_srv_text_finish(lh_srv_text *t, lh_err *err)
{
    lh_status st = LH_OK;
    if (!t->stopped && !t->finished) {
        char *chunk = NULL;
        size_t len = 0;
        st = lh_detok_stream_finish(t->ds, &chunk, &len, err);
        if (st == LH_OK && add(t, chunk, len) != LH_OK)
            st = lh_err_set(err, LH_E_NOMEM, "out of memory for the response text");
        free(chunk);
    }
    t->finished = true;
    return st;
}

size_t lh_srv_text_take(lh_srv_text *t, const char **s)
{
    size_t ready = t->text.len;
    if (!t->finished && !t->stopped) {
        /* hold back the earliest tail that is the beginning of a stop string */
        for (size_t i = 0; i < t->n_stops; i++) {
            const size_t sl = strlen(t->stops[i]);
            const size_t from = t->text.len >= sl ? t->text.len - sl + 1 : 0;
            for (size_t q = from > t->sent ? from : t->sent; q < ready; q++)
                if (memcmp(t->text.s + q, t->stops[i], t->text.len - q) == 0) {
                    ready = q;
                    break;
                }
        }
    }
    *s = t->text.s ? t->text.s + t->sent : "";
    const size_t n = ready > t->sent ? ready - t->sent : 0;
    t->sent += n;
    return n;
}

void lh_srv_text_free(lh_srv_text *t)
{
    lh_detok_stream_free(t->ds);
    lh_strbuf_free(&t->text);
    memset(t, 0, sizeof *t);
}
