/* The streaming decoder (lh_detok_stream_*): decodes the ids so far after every step and
 * returns the text not yet returned, holding back what may still change (a trailing U+FFFD:
 * an incomplete character or byte-fallback group). */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

struct lh_detok_stream {
    const lh_tokenizer *t;
    bool skip;
    ids all;
    size_t emitted; /* bytes of the decoded text already returned */
    lh_strbuf sent; /* those bytes */
    size_t n_sent;  /* ids decoded when the last text was returned */
};

lh_status lh_detok_stream_create(const lh_tokenizer *t, bool skip_special_tokens,
                                 lh_detok_stream **out, lh_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    (*out)->t = t;
    (*out)->skip = skip_special_tokens;
    return LH_OK;
}

void lh_detok_stream_free(lh_detok_stream *s)
{
    if (!s)
        return;
    free(s->all.v);
    lh_strbuf_free(&s->sent);
    free(s);
}

/* Whether text[0..tl) begins with what was already returned. */
static bool keeps_sent(const lh_detok_stream *s, const char *text, size_t tl)
{
    return tl >= s->emitted && memcmp(text, s->sent.s ? s->sent.s : "", s->emitted) == 0;
}

/* Whether text[0..tl) ends in U+FFFD. */
static bool ends_in_fffd(const char *text, size_t tl)
{
    return tl >= 3 && memcmp(text + tl - 3, "\xEF\xBF\xBD", 3) == 0;
}

/* Frees text and gives an empty chunk: everything is held back. */
static lh_status hold(char *text, char **chunk, lh_err *err)
{
    free(text);
    *chunk = calloc(1, 1);
    return *chunk ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory");
}

/* Returns text[emitted..] (up to `upto` bytes of text) as a new chunk. */
static lh_status take_chunk(lh_detok_stream *s, const char *text, size_t upto, char **chunk,
                            size_t *len, lh_err *err)
{
    if (!keeps_sent(s, text, upto))
        return lh_err_set(err, LH_E_UNSUPPORTED, "streaming decode: the decoder changed text "
                          "already streamed");
    size_t n = upto - s->emitted;
    lh_strbuf_add(&s->sent, text + s->emitted, n);
    *chunk = malloc(n + 1);
    if (!*chunk || !lh_strbuf_ok(&s->sent)) {
        free(*chunk);
        *chunk = NULL;
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    memcpy(*chunk, text + s->emitted, n);
    (*chunk)[n] = 0;
    *len = n;
    s->emitted += n;
    return LH_OK;
}

/* Starts a new segment at the first id not yet sent: what was sent stays sent. */
static void rebase(lh_detok_stream *s)
{
    memmove(s->all.v, s->all.v + s->n_sent, (s->all.n - s->n_sent) * sizeof *s->all.v);
    s->all.n -= s->n_sent;
    s->n_sent = 0;
    s->emitted = 0;
    lh_strbuf_truncate(&s->sent, 0);
}

static lh_status decode_all(const lh_detok_stream *s, char **text, size_t *tl, lh_err *err)
{
    return lh_tokenizer_decode(s->t, s->all.v, s->all.n, s->skip, text, tl, err);
}

lh_status lh_detok_stream_step(lh_detok_stream *s, int32_t id, char **chunk, size_t *len,
                               lh_err *err)
{
    *chunk = NULL;
    *len = 0;
    ids_push(&s->all, id);
    if (s->all.oom)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    char *text;
    size_t tl;
    lh_status st = decode_all(s, &text, &tl, err);
    if (st) {
        s->all.n--;
        return st;
    }
    /* hold everything back while the text ends in U+FFFD (an incomplete sequence, until
     * proven otherwise: byte-fallback groups can even turn text already complete into U+FFFD
     * until the group completes) */
    if (ends_in_fffd(text, tl))
        return hold(text, chunk, err);
    if (!keeps_sent(s, text, tl)) {
        /* a byte-fallback group that turned invalid rewrote text already streamed (it
         * decodes as a whole, into U+FFFD): what was sent stays sent; the stream continues
         * from the ids not yet sent, decoded as a new segment */
        free(text);
        rebase(s);
        if ((st = decode_all(s, &text, &tl, err)))
            return st;
        if (ends_in_fffd(text, tl))
            return hold(text, chunk, err);
    }
    st = take_chunk(s, text, tl, chunk, len, err);
    free(text);
    if (st)
        s->all.n--;
    else
        s->n_sent = s->all.n;
    return st;
}

lh_status lh_detok_stream_finish(lh_detok_stream *s, char **chunk, size_t *len, lh_err *err)
{
    *chunk = NULL;
    *len = 0;
    char *text;
    size_t tl;
    lh_status st = decode_all(s, &text, &tl, err);
    if (st)
        return st;
    if (!keeps_sent(s, text, tl)) {
        /* bytes that never completed a character changed text already returned (a byte-fallback
         * group decodes as a whole): return the held ids decoded on their own */
        free(text);
        st = lh_tokenizer_decode(s->t, s->all.v + s->n_sent, s->all.n - s->n_sent, s->skip, &text,
                                 &tl, err);
        if (st)
            return st;
        *chunk = text;
        *len = tl;
        s->n_sent = s->all.n;
        return LH_OK;
    }
    st = take_chunk(s, text, tl, chunk, len, err);
    free(text);
    if (!st)
        s->n_sent = s->all.n;
    return st;
}
