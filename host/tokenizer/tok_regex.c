/* The regexes tokenizer.json gives (Split, Replace, the GPT-2 pattern): PCRE2 with UTF and UCP,
 * JIT-compiled when the platform has it. */
#include "tokenizer/tokenizer_internal.h"

#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>

lh_status regex_compile(regex *r, const char *pat, size_t n, bool literal, const char *path,
                        lh_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    r->code = pcre2_compile((PCRE2_SPTR)pat, n, opts, &ec, &eo, NULL);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return lh_err_set(err, LH_E_CONFIG, "%s: regex does not compile at offset %zu: %s", path,
                          (size_t)eo, (const char *)msg);
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    return LH_OK;
}

void regex_free(regex *r)
{
    if (r->code)
        pcre2_code_free(r->code);
    r->code = NULL;
}

void spans_push(spans *sp, size_t s, size_t e, bool match)
{
    if (!sp->oom && sp->n == sp->cap)
        sp->v = grow_array(sp->v, &sp->cap, sizeof *sp->v, 16, &sp->oom);
    if (!sp->oom)
        sp->v[sp->n++] = (span){s, e, match};
}

bool regex_find(const regex *r, const char *s, size_t n, spans *out)
{
    out->n = 0;
    if (n == 0) {
        spans_push(out, 0, 0, false);
        return !out->oom;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->code, NULL);
    if (!md)
        return false;
    size_t prev = 0, at = 0;
    bool ok = true;
    while (at <= n) {
        int rc = r->jit ? pcre2_jit_match(r->code, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL)
                        : PCRE2_ERROR_JIT_STACKLIMIT;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* no JIT, or its stack is too small: interpret */
            rc = pcre2_match(r->code, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            ok = false;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character */
            if (ms >= n)
                break;
            at = ms + lh_utf8_step(s + ms, n - ms);
            continue;
        }
        if (prev != ms)
            spans_push(out, prev, ms, false);
        spans_push(out, ms, me, true);
        prev = at = me;
    }
    pcre2_match_data_free(md);
    if (prev != n)
        spans_push(out, prev, n, false);
    return ok && !out->oom;
}

bool regex_replace(const regex *re, const char *s, size_t n, const char *content, lh_strbuf *out)
{
    spans sp = {0};
    if (!regex_find(re, s, n, &sp)) {
        free(sp.v);
        return false;
    }
    for (size_t i = 0; i < sp.n; i++) {
        if (sp.v[i].match)
            lh_strbuf_puts(out, content);
        else
            lh_strbuf_add(out, s + sp.v[i].s, sp.v[i].e - sp.v[i].s);
    }
    free(sp.v);
    return lh_strbuf_ok(out);
}
