/* The tokenizer: tokenizer.json (jansson) -> components -> encode / decode. See tokenizer.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.h"

#include "core/fileio.h"

#include <jansson.h>
#include <pthread.h>
#include <pcre2.h>
#include <utf8proc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_FILE_BYTES ((size_t)1 << 30)

/* ---- growable byte buffer -------------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom;
} buf;

static bool buf_reserve(buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void buf_add(buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_addc(buf *b, char c) { buf_add(b, &c, 1); }

static void buf_add_cp(buf *b, uint32_t cp)
{
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    buf_add(b, t, n);
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when invalid; *bad receives how many bytes
 * form the maximal invalid subpart (what one U+FFFD replaces, as Rust's from_utf8_lossy does). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    *bad = 1;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    for (size_t i = 1; i <= need; i++) {
        if (i >= n)
            return (*bad = i), 0;
        unsigned char d = s[i];
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (d < l || d > h)
            return (*bad = i), 0;
    }
    return need + 1;
}

/* Offset of the first invalid byte, or n when s is valid UTF-8. */
static size_t utf8_check(const char *s, size_t n)
{
    size_t i = 0, bad;
    while (i < n) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i, &bad);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

/* Appends s with every invalid subpart replaced by U+FFFD. */
static void buf_add_lossy(buf *b, const char *s, size_t n)
{
    size_t i = 0, bad;
    while (i < n) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i, &bad);
        if (k) {
            buf_add(b, s + i, k);
            i += k;
        } else {
            buf_add_cp(b, 0xFFFD);
            i += bad;
        }
    }
}

/* Length of the (valid) UTF-8 character at s. */
static size_t utf8_len(const char *s)
{
    unsigned char c = (unsigned char)*s;
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static uint32_t utf8_cp(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    switch (utf8_len(s)) {
    case 1: return u[0];
    case 2: return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    case 3: return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    default:
        return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
               ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    }
}

/* ---- hash maps ------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* string -> int32 (keys are borrowed: they live in the tokenizer's token table) */
typedef struct strmap {
    const char **keys;
    size_t *lens;
    int32_t *vals;
    size_t cap, n;
} strmap;

static bool strmap_init(strmap *m, size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2 + 2)
        cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->lens = calloc(cap, sizeof *m->lens);
    m->vals = calloc(cap, sizeof *m->vals);
    m->cap = cap;
    m->n = 0;
    return m->keys && m->lens && m->vals;
}

static void strmap_free(strmap *m)
{
    free(m->keys);
    free(m->lens);
    free(m->vals);
}

static int32_t strmap_get(const strmap *m, const char *k, size_t n)
{
    if (!m->cap)
        return -1;
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == n && memcmp(m->keys[i], k, n) == 0)
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

/* Inserts (or overwrites); the map was sized for every key up front. */
static void strmap_put(strmap *m, const char *k, size_t n, int32_t v)
{
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == n && memcmp(m->keys[i], k, n) == 0) {
            m->vals[i] = v;
            return;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = k;
    m->lens[i] = n;
    m->vals[i] = v;
    m->n++;
}

/* (id, id) -> (rank, merged id) */
typedef struct pairmap {
    uint64_t *keys; /* key + 1, 0 = empty */
    int32_t *rank, *merged;
    size_t cap;
} pairmap;

static bool pairmap_init(pairmap *m, size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2 + 2)
        cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->rank = calloc(cap, sizeof *m->rank);
    m->merged = calloc(cap, sizeof *m->merged);
    m->cap = cap;
    return m->keys && m->rank && m->merged;
}

static void pairmap_free(pairmap *m)
{
    free(m->keys);
    free(m->rank);
    free(m->merged);
}

static size_t pair_slot(const pairmap *m, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key + 1)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static bool pairmap_get(const pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = pair_slot(m, key);
    if (!m->keys[i])
        return false;
    *rank = m->rank[i];
    *merged = m->merged[i];
    return true;
}

/* ---- regex ----------------------------------------------------------------------------------- */

typedef struct regex {
    pcre2_code *code;
    bool jit;
} regex;

static lh_status regex_compile(regex *r, const char *pat, size_t n, bool literal, const char *path,
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

static void regex_free(regex *r)
{
    if (r->code)
        pcre2_code_free(r->code);
    r->code = NULL;
}

/* A span of a string and whether it is a match. */
typedef struct span {
    size_t s, e;
    bool match;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
    bool oom;
} spans;

static void spans_push(spans *sp, size_t s, size_t e, bool match)
{
    if (sp->oom)
        return;
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 16;
        span *v = realloc(sp->v, cap * sizeof *v);
        if (!v) {
            sp->oom = true;
            return;
        }
        sp->v = v;
        sp->cap = cap;
    }
    sp->v[sp->n++] = (span){s, e, match};
}

/* Covers s[0..n) with alternating non-match / match spans (empty matches are skipped), as
 * tokenizers' Pattern::find_matches does. Returns false on allocation or match failure. */
static bool regex_find(const regex *r, const char *s, size_t n, spans *out)
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
            at = ms + utf8_len(s + ms);
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

/* ---- components ------------------------------------------------------------------------------ */

typedef enum { NORM_SEQUENCE, NORM_PREPEND, NORM_REPLACE, NORM_UNICODE } norm_kind;

typedef struct normalizer {
    norm_kind kind;
    struct normalizer *children;
    size_t n_children;
    char *str;     /* Prepend: the prefix; Replace: the content */
    regex re;      /* Replace */
    int uoptions;  /* NFC, NFD, NFKC, NFKD: utf8proc options */
} normalizer;

typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } split_behavior;

typedef enum { PT_SEQUENCE, PT_BYTELEVEL, PT_SPLIT, PT_METASPACE } pretok_kind;

typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

typedef struct pretok {
    pretok_kind kind;
    struct pretok *children;
    size_t n_children;
    bool add_prefix_space, use_regex; /* ByteLevel */
    regex re;                         /* Split (and ByteLevel's GPT-2 regex, Digits' \p{N}) */
    split_behavior behavior;
    bool invert;
    char replacement[8]; /* Metaspace */
    prepend_scheme scheme;
    bool split;
} pretok;

typedef enum { DEC_SEQUENCE, DEC_BYTELEVEL, DEC_METASPACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_REPLACE } dec_kind;

typedef struct decoder {
    dec_kind kind;
    struct decoder *children;
    size_t n_children;
    char replacement[8]; /* Metaspace */
    prepend_scheme scheme;
    char *content;       /* Strip: one character; Replace: the content */
    size_t start, stop;  /* Strip */
    regex re;            /* Replace */
} decoder;

typedef struct added_token {
    char *content;
    size_t len;
    int32_t id;
    bool special;
} added_token;

/* One element of the single template: a sequence marker or a special token's ids. */
typedef struct tmpl_item {
    bool is_seq;
    int32_t *ids;
    size_t n;
} tmpl_item;

struct lh_tokenizer {
    /* id -> token */
    char **tokens;
    size_t *token_lens;
    bool *special;
    int32_t n_ids;
    strmap vocab;      /* model vocab */
    strmap all_tokens; /* vocab + added tokens */
    pairmap merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_ids[256];
    added_token *added;
    size_t n_added;
    normalizer *norm;
    pretok *pre;
    decoder *dec;
    bool has_template;
    tmpl_item *tmpl;
    size_t n_tmpl;
};

/* ---- JSON helpers ---------------------------------------------------------------------------- */

typedef struct ctx {
    const char *origin;
    lh_err *err;
} ctx;

static lh_status bad_type(ctx *c, const char *path, const char *want)
{
    return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: expected %s", c->origin, path, want);
}

static lh_status get_str(ctx *c, json_t *obj, const char *key, const char *path, bool required,
                         const char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.%s: missing", c->origin, path, key);
        return LH_OK;
    }
    if (!json_is_string(v)) {
        char p[512];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return bad_type(c, p, "a string");
    }
    *out = json_string_value(v);
    return LH_OK;
}

static lh_status get_bool(ctx *c, json_t *obj, const char *key, const char *path, bool dflt, bool *out)
{
    json_t *v = json_object_get(obj, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return LH_OK;
    if (!json_is_boolean(v)) {
        char p[512];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return bad_type(c, p, "true or false");
    }
    *out = json_is_true(v);
    return LH_OK;
}

static lh_status get_type(ctx *c, json_t *obj, const char *path, const char **type)
{
    if (!json_is_object(obj))
        return bad_type(c, path, "an object");
    return get_str(c, obj, "type", path, true, type);
}

static lh_status unsupported(ctx *c, const char *what, const char *type, const char *path)
{
    return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s: %s type '%s' is not supported", c->origin,
                      path, what, type);
}

/* A {"String": s} or {"Regex": r} pattern into re. */
static lh_status parse_pattern(ctx *c, json_t *obj, const char *path, regex *re)
{
    json_t *p = json_object_get(obj, "pattern");
    char pp[512];
    snprintf(pp, sizeof pp, "%s.pattern", path);
    if (!json_is_object(p))
        return bad_type(c, pp, "{\"String\": ...} or {\"Regex\": ...}");
    json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    if (json_is_string(s)) {
        if (json_string_length(s) == 0)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.String: empty pattern", c->origin, pp);
        return regex_compile(re, json_string_value(s), json_string_length(s), true, pp, c->err)
                   ? lh_err_prefix(c->err, "%s", c->origin) : LH_OK;
    }
    if (json_is_string(r))
        return regex_compile(re, json_string_value(r), json_string_length(r), false, pp, c->err)
                   ? lh_err_prefix(c->err, "%s", c->origin) : LH_OK;
    return bad_type(c, pp, "{\"String\": ...} or {\"Regex\": ...}");
}

/* ---- normalizers ----------------------------------------------------------------------------- */

static void norm_free(normalizer *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_children; i++)
        norm_free(&n->children[i]);
    free(n->children);
    free(n->str);
    regex_free(&n->re);
}

static lh_status parse_norm(ctx *c, json_t *j, const char *path, normalizer *n)
{
    const char *type;
    lh_status st = get_type(c, j, path, &type);
    if (st)
        return st;
    if (strcmp(type, "Sequence") == 0) {
        n->kind = NORM_SEQUENCE;
        json_t *arr = json_object_get(j, "normalizers");
        char p[512];
        snprintf(p, sizeof p, "%s.normalizers", path);
        if (!json_is_array(arr))
            return bad_type(c, p, "an array");
        n->children = calloc(json_array_size(arr) + 1, sizeof *n->children);
        if (!n->children)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char pi[600];
            snprintf(pi, sizeof pi, "%s[%zu]", p, i);
            n->n_children = i + 1;
            if ((st = parse_norm(c, json_array_get(arr, i), pi, &n->children[i])))
                return st;
        }
        return LH_OK;
    }
    if (strcmp(type, "Prepend") == 0) {
        const char *s;
        n->kind = NORM_PREPEND;
        if ((st = get_str(c, j, "prepend", path, true, &s)))
            return st;
        n->str = strdup(s);
        return n->str ? LH_OK : lh_err_set(c->err, LH_E_NOMEM, "out of memory");
    }
    if (strcmp(type, "Replace") == 0) {
        const char *s;
        n->kind = NORM_REPLACE;
        if ((st = get_str(c, j, "content", path, true, &s)))
            return st;
        n->str = strdup(s);
        if (!n->str)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        return parse_pattern(c, j, path, &n->re);
    }
    static const struct { const char *name; int options; } forms[] = {
        {"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
        {"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
        {"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
        {"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (strcmp(type, forms[i].name) == 0) {
            n->kind = NORM_UNICODE;
            n->uoptions = forms[i].options;
            return LH_OK;
        }
    return unsupported(c, "normalizer", type, path);
}

/* Replaces every match of re in s[0..n) by content, into out. */
static bool regex_replace(const regex *re, const char *s, size_t n, const char *content, buf *out)
{
    spans sp = {0};
    if (!regex_find(re, s, n, &sp)) {
        free(sp.v);
        return false;
    }
    for (size_t i = 0; i < sp.n; i++) {
        if (sp.v[i].match)
            buf_add(out, content, strlen(content));
        else
            buf_add(out, s + sp.v[i].s, sp.v[i].e - sp.v[i].s);
    }
    free(sp.v);
    return !out->oom;
}

/* Normalizes in place (b holds the string). */
static bool norm_apply(const normalizer *n, buf *b)
{
    switch (n->kind) {
    case NORM_SEQUENCE:
        for (size_t i = 0; i < n->n_children; i++)
            if (!norm_apply(&n->children[i], b))
                return false;
        return true;
    case NORM_PREPEND: {
        if (b->len == 0)
            return true;
        buf o = {0};
        buf_add(&o, n->str, strlen(n->str));
        buf_add(&o, b->p, b->len);
        if (o.oom) {
            free(o.p);
            return false;
        }
        free(b->p);
        *b = o;
        return true;
    }
    case NORM_UNICODE: {
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)(b->p ? b->p : ""),
                                          (utf8proc_ssize_t)b->len, &dst,
                                          (utf8proc_option_t)n->uoptions);
        if (r < 0)
            return false; /* only allocation can fail: the text is valid UTF-8 */
        free(b->p);
        b->p = (char *)dst;
        b->len = b->cap = (size_t)r;
        b->cap++;
        return true;
    }
    case NORM_REPLACE: {
        buf o = {0};
        buf_add(&o, "", 0);
        if (!regex_replace(&n->re, b->p ? b->p : "", b->len, n->str, &o)) {
            free(o.p);
            return false;
        }
        free(b->p);
        *b = o;
        return true;
    }
    }
    return false;
}

/* ---- pre-tokenizers -------------------------------------------------------------------------- */

static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static void pretok_free(pretok *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_children; i++)
        pretok_free(&p->children[i]);
    free(p->children);
    regex_free(&p->re);
}

static lh_status parse_scheme(ctx *c, json_t *j, const char *path, prepend_scheme *out)
{
    const char *s;
    lh_status st = get_str(c, j, "prepend_scheme", path, false, &s);
    if (st)
        return st;
    if (!s) { /* older files: add_prefix_space */
        bool aps;
        if ((st = get_bool(c, j, "add_prefix_space", path, true, &aps)))
            return st;
        *out = aps ? PREPEND_ALWAYS : PREPEND_NEVER;
        return LH_OK;
    }
    if (strcmp(s, "always") == 0)
        *out = PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0)
        *out = PREPEND_FIRST;
    else if (strcmp(s, "never") == 0)
        *out = PREPEND_NEVER;
    else
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.prepend_scheme: '%s' is none of always, first, never",
                          c->origin, path, s);
    return LH_OK;
}

static lh_status parse_replacement(ctx *c, json_t *j, const char *path, char out[8])
{
    const char *s;
    lh_status st = get_str(c, j, "replacement", path, true, &s);
    if (st)
        return st;
    size_t n = strlen(s);
    if (n == 0 || n > 4 || utf8_len(s) != n)
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.replacement: expected one character",
                          c->origin, path);
    memcpy(out, s, n + 1);
    return LH_OK;
}

static lh_status parse_pretok(ctx *c, json_t *j, const char *path, pretok *p)
{
    const char *type;
    lh_status st = get_type(c, j, path, &type);
    if (st)
        return st;
    if (strcmp(type, "Sequence") == 0) {
        p->kind = PT_SEQUENCE;
        json_t *arr = json_object_get(j, "pretokenizers");
        char pp[512];
        snprintf(pp, sizeof pp, "%s.pretokenizers", path);
        if (!json_is_array(arr))
            return bad_type(c, pp, "an array");
        p->children = calloc(json_array_size(arr) + 1, sizeof *p->children);
        if (!p->children)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char pi[600];
            snprintf(pi, sizeof pi, "%s[%zu]", pp, i);
            p->n_children = i + 1;
            if ((st = parse_pretok(c, json_array_get(arr, i), pi, &p->children[i])))
                return st;
        }
        return LH_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = PT_BYTELEVEL;
        if ((st = get_bool(c, j, "add_prefix_space", path, true, &p->add_prefix_space)) ||
            (st = get_bool(c, j, "use_regex", path, true, &p->use_regex)))
            return st;
        if (p->use_regex)
            return regex_compile(&p->re, GPT2_RE, sizeof GPT2_RE - 1, false, path, c->err);
        return LH_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const char *beh;
        p->kind = PT_SPLIT;
        if ((st = get_str(c, j, "behavior", path, true, &beh)) ||
            (st = get_bool(c, j, "invert", path, false, &p->invert)))
            return st;
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous"};
        size_t k = 0;
        while (k < 5 && strcmp(names[k], beh) != 0)
            k++;
        if (k == 5)
            return lh_err_set(c->err, LH_E_CONFIG,
                              "%s: %s.behavior: '%s' is none of Removed, Isolated, "
                              "MergedWithPrevious, MergedWithNext, Contiguous", c->origin, path, beh);
        p->behavior = (split_behavior)k;
        return parse_pattern(c, j, path, &p->re);
    }
    if (strcmp(type, "Digits") == 0) {
        bool individual;
        if ((st = get_bool(c, j, "individual_digits", path, false, &individual)))
            return st;
        p->kind = PT_SPLIT;
        p->behavior = individual ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        return regex_compile(&p->re, "\\p{N}", 5, false, path, c->err);
    }
    if (strcmp(type, "Metaspace") == 0) {
        p->kind = PT_METASPACE;
        if ((st = parse_replacement(c, j, path, p->replacement)) ||
            (st = parse_scheme(c, j, path, &p->scheme)) ||
            (st = get_bool(c, j, "split", path, true, &p->split)))
            return st;
        if (p->split)
            return regex_compile(&p->re, p->replacement, strlen(p->replacement), true, path, c->err);
        return LH_OK;
    }
    return unsupported(c, "pre_tokenizer", type, path);
}

/* A piece of text under pre-tokenization; orig0: it starts at offset 0 of the input. */
typedef struct piece {
    char *s;
    size_t len;
    bool orig0;
} piece;

typedef struct pieces {
    piece *v;
    size_t n, cap;
    bool oom;
} pieces;

static void pieces_push(pieces *ps, const char *s, size_t len, bool orig0)
{
    if (ps->oom)
        return;
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 16;
        piece *v = realloc(ps->v, cap * sizeof *v);
        if (!v) {
            ps->oom = true;
            return;
        }
        ps->v = v;
        ps->cap = cap;
    }
    char *d = malloc(len + 1);
    if (!d) {
        ps->oom = true;
        return;
    }
    memcpy(d, s, len);
    d[len] = 0;
    ps->v[ps->n++] = (piece){d, len, orig0};
}

static void pieces_free(pieces *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        free(ps->v[i].s);
    free(ps->v);
    *ps = (pieces){0};
}

/* Splits one piece by re with behavior (tokenizers' NormalizedString::split), appending the
 * non-empty results to out. */
static bool split_piece(const regex *re, split_behavior beh, bool invert, const piece *in, pieces *out)
{
    spans sp = {0}, acc = {0};
    if (!regex_find(re, in->s, in->len, &sp)) {
        free(sp.v);
        return false;
    }
    if (invert)
        for (size_t i = 0; i < sp.n; i++)
            sp.v[i].match = !sp.v[i].match;
    bool prev = false;
    switch (beh) {
    case SPLIT_REMOVED:
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < sp.n; i++)
            spans_push(&acc, sp.v[i].s, sp.v[i].e, beh == SPLIT_REMOVED && sp.v[i].match);
        break;
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < sp.n; i++) {
            if (sp.v[i].match && !prev && acc.n)
                acc.v[acc.n - 1].e = sp.v[i].e;
            else
                spans_push(&acc, sp.v[i].s, sp.v[i].e, false);
            prev = sp.v[i].match;
        }
        break;
    case SPLIT_MERGED_NEXT:
        for (size_t i = sp.n; i-- > 0;) {
            if (sp.v[i].match && !prev && acc.n)
                acc.v[acc.n - 1].s = sp.v[i].s;
            else
                spans_push(&acc, sp.v[i].s, sp.v[i].e, false);
            prev = sp.v[i].match;
        }
        for (size_t i = 0; i < acc.n / 2; i++) {
            span t = acc.v[i];
            acc.v[i] = acc.v[acc.n - 1 - i];
            acc.v[acc.n - 1 - i] = t;
        }
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sp.n; i++) {
            if (sp.v[i].match == prev && acc.n)
                acc.v[acc.n - 1].e = sp.v[i].e;
            else
                spans_push(&acc, sp.v[i].s, sp.v[i].e, false);
            prev = sp.v[i].match;
        }
        break;
    }
    bool ok = !acc.oom;
    for (size_t i = 0; ok && i < acc.n; i++)
        if (!acc.v[i].match && acc.v[i].e > acc.v[i].s)
            pieces_push(out, in->s + acc.v[i].s, acc.v[i].e - acc.v[i].s,
                        in->orig0 && acc.v[i].s == 0);
    free(sp.v);
    free(acc.v);
    return ok && !out->oom;
}

/* The GPT-2 byte <-> character maps (characters U+0021..U+0143), built once. */
static uint32_t byte_to_cp[256];
static int16_t cp_to_byte_map[324];
static pthread_once_t bytelevel_once = PTHREAD_ONCE_INIT;

static void build_bytelevel(void)
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            byte_to_cp[b] = (uint32_t)b;
        else
            byte_to_cp[b] = (uint32_t)(256 + n++);
    }
    for (size_t i = 0; i < sizeof cp_to_byte_map / sizeof cp_to_byte_map[0]; i++)
        cp_to_byte_map[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_to_byte_map[byte_to_cp[b]] = (int16_t)b;
}

static void init_bytelevel(void) { pthread_once(&bytelevel_once, build_bytelevel); }

static int cp_to_byte(uint32_t cp)
{
    return cp < sizeof cp_to_byte_map / sizeof cp_to_byte_map[0] ? cp_to_byte_map[cp] : -1;
}

static bool pretok_apply(const pretok *p, pieces *ps)
{
    if (p->kind == PT_SEQUENCE) {
        for (size_t i = 0; i < p->n_children; i++)
            if (!pretok_apply(&p->children[i], ps))
                return false;
        return true;
    }
    pieces out = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < ps->n; i++) {
        piece *in = &ps->v[i];
        switch (p->kind) {
        case PT_SPLIT:
            ok = split_piece(&p->re, p->behavior, p->invert, in, &out);
            break;
        case PT_BYTELEVEL: {
            buf b = {0};
            if (p->add_prefix_space && (in->len == 0 || in->s[0] != ' '))
                buf_addc(&b, ' ');
            buf_add(&b, in->s, in->len);
            if (b.oom) {
                ok = false;
                break;
            }
            piece tmp = {b.p, b.len, in->orig0};
            pieces sub = {0};
            if (p->use_regex)
                ok = split_piece(&p->re, SPLIT_ISOLATED, false, &tmp, &sub);
            else
                pieces_push(&sub, tmp.s, tmp.len, tmp.orig0);
            free(b.p);
            for (size_t k = 0; ok && k < sub.n; k++) {
                buf m = {0};
                buf_add(&m, "", 0);
                for (size_t q = 0; q < sub.v[k].len; q++)
                    buf_add_cp(&m, byte_to_cp[(unsigned char)sub.v[k].s[q]]);
                if (!m.oom)
                    pieces_push(&out, m.p, m.len, sub.v[k].orig0);
                ok = !m.oom;
                free(m.p);
            }
            ok = ok && !sub.oom;
            pieces_free(&sub);
            break;
        }
        case PT_METASPACE: {
            buf b = {0};
            buf_add(&b, "", 0);
            size_t rl = strlen(p->replacement);
            bool starts = false;
            for (size_t q = 0; q < in->len; q++) {
                if (in->s[q] == ' ')
                    buf_add(&b, p->replacement, rl);
                else
                    buf_addc(&b, in->s[q]);
            }
            starts = b.len >= rl && memcmp(b.p, p->replacement, rl) == 0;
            if (!starts && (p->scheme == PREPEND_ALWAYS || (p->scheme == PREPEND_FIRST && in->orig0))) {
                buf o = {0};
                buf_add(&o, p->replacement, rl);
                buf_add(&o, b.p, b.len);
                free(b.p);
                b = o;
            }
            if (b.oom) {
                free(b.p);
                ok = false;
                break;
            }
            piece tmp = {b.p, b.len, in->orig0};
            if (p->split)
                ok = split_piece(&p->re, SPLIT_MERGED_NEXT, false, &tmp, &out);
            else if (b.len)
                pieces_push(&out, b.p, b.len, in->orig0);
            free(b.p);
            break;
        }
        case PT_SEQUENCE:
            break;
        }
    }
    ok = ok && !out.oom;
    if (!ok) {
        pieces_free(&out);
        return false;
    }
    pieces_free(ps);
    *ps = out;
    return true;
}

/* ---- decoders -------------------------------------------------------------------------------- */

static void dec_free(decoder *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_children; i++)
        dec_free(&d->children[i]);
    free(d->children);
    free(d->content);
    regex_free(&d->re);
}

static lh_status get_size(ctx *c, json_t *j, const char *key, const char *path, size_t *out)
{
    json_t *v = json_object_get(j, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        char p[512];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return bad_type(c, p, "a non-negative integer");
    }
    *out = (size_t)json_integer_value(v);
    return LH_OK;
}

static lh_status parse_dec(ctx *c, json_t *j, const char *path, decoder *d)
{
    const char *type;
    lh_status st = get_type(c, j, path, &type);
    if (st)
        return st;
    if (strcmp(type, "Sequence") == 0) {
        d->kind = DEC_SEQUENCE;
        json_t *arr = json_object_get(j, "decoders");
        char pp[512];
        snprintf(pp, sizeof pp, "%s.decoders", path);
        if (!json_is_array(arr))
            return bad_type(c, pp, "an array");
        d->children = calloc(json_array_size(arr) + 1, sizeof *d->children);
        if (!d->children)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char pi[600];
            snprintf(pi, sizeof pi, "%s[%zu]", pp, i);
            d->n_children = i + 1;
            if ((st = parse_dec(c, json_array_get(arr, i), pi, &d->children[i])))
                return st;
        }
        return LH_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        d->kind = DEC_BYTELEVEL;
        return LH_OK;
    }
    if (strcmp(type, "ByteFallback") == 0) {
        d->kind = DEC_BYTEFALLBACK;
        return LH_OK;
    }
    if (strcmp(type, "Fuse") == 0) {
        d->kind = DEC_FUSE;
        return LH_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        d->kind = DEC_METASPACE;
        if ((st = parse_replacement(c, j, path, d->replacement)))
            return st;
        return parse_scheme(c, j, path, &d->scheme);
    }
    if (strcmp(type, "Strip") == 0) {
        const char *s;
        d->kind = DEC_STRIP;
        if ((st = get_str(c, j, "content", path, true, &s)) ||
            (st = get_size(c, j, "start", path, &d->start)) ||
            (st = get_size(c, j, "stop", path, &d->stop)))
            return st;
        if (!*s || utf8_len(s) != strlen(s))
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.content: expected one character",
                              c->origin, path);
        d->content = strdup(s);
        return d->content ? LH_OK : lh_err_set(c->err, LH_E_NOMEM, "out of memory");
    }
    if (strcmp(type, "Replace") == 0) {
        const char *s;
        d->kind = DEC_REPLACE;
        if ((st = get_str(c, j, "content", path, true, &s)))
            return st;
        d->content = strdup(s);
        if (!d->content)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        return parse_pattern(c, j, path, &d->re);
    }
    return unsupported(c, "decoder", type, path);
}

typedef struct strs {
    buf *v;
    size_t n;
} strs;

static void strs_free(strs *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].p);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* Replaces s's strings with one string (their concatenation, passed through fn when set). */
static bool strs_fuse(strs *s, bool lossy_bytelevel)
{
    buf all = {0}, raw = {0};
    buf_add(&all, "", 0);
    for (size_t i = 0; i < s->n; i++) {
        if (!lossy_bytelevel) {
            buf_add(&all, s->v[i].p, s->v[i].len);
            continue;
        }
        /* ByteLevel: a token whose every character maps to a byte gives those bytes, any other
         * token its own bytes */
        size_t start = raw.len;
        bool all_map = true;
        for (size_t q = 0; q < s->v[i].len; q += utf8_len(s->v[i].p + q)) {
            int b = cp_to_byte(utf8_cp(s->v[i].p + q));
            if (b < 0) {
                all_map = false;
                break;
            }
            buf_addc(&raw, (char)b);
        }
        if (!all_map) {
            raw.len = start;
            buf_add(&raw, s->v[i].p, s->v[i].len);
        }
    }
    if (lossy_bytelevel)
        buf_add_lossy(&all, raw.p ? raw.p : "", raw.len);
    free(raw.p);
    if (all.oom || raw.oom) {
        free(all.p);
        return false;
    }
    strs_free(s);
    s->v = malloc(sizeof *s->v);
    if (!s->v) {
        free(all.p);
        return false;
    }
    s->v[0] = all;
    s->n = 1;
    return true;
}

static bool is_byte_token(const buf *t, unsigned *val)
{
    if (t->len != 6 || memcmp(t->p, "<0x", 3) != 0 || t->p[5] != '>')
        return false;
    unsigned v = 0;
    for (int i = 3; i < 5; i++) {
        char ch = t->p[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v * 16 + (unsigned)d;
    }
    *val = v;
    return true;
}

static bool dec_apply(const decoder *d, strs *s)
{
    switch (d->kind) {
    case DEC_SEQUENCE:
        for (size_t i = 0; i < d->n_children; i++)
            if (!dec_apply(&d->children[i], s))
                return false;
        return true;
    case DEC_BYTELEVEL:
        return strs_fuse(s, true);
    case DEC_FUSE:
        return strs_fuse(s, false);
    case DEC_METASPACE: {
        size_t rl = strlen(d->replacement);
        for (size_t i = 0; i < s->n; i++) {
            buf o = {0};
            buf_add(&o, "", 0);
            for (size_t q = 0; q < s->v[i].len;) {
                if (q + rl <= s->v[i].len && memcmp(s->v[i].p + q, d->replacement, rl) == 0) {
                    /* as tokenizers: the first token loses every replacement character */
                    if (!(i == 0 && d->scheme != PREPEND_NEVER))
                        buf_addc(&o, ' ');
                    q += rl;
                } else {
                    buf_addc(&o, s->v[i].p[q]);
                    q++;
                }
            }
            if (o.oom) {
                free(o.p);
                return false;
            }
            free(s->v[i].p);
            s->v[i] = o;
        }
        return true;
    }
    case DEC_STRIP: {
        size_t cl = strlen(d->content);
        for (size_t i = 0; i < s->n; i++) {
            buf *t = &s->v[i];
            size_t a = 0, e = t->len;
            for (size_t k = 0; k < d->start && a + cl <= e && memcmp(t->p + a, d->content, cl) == 0; k++)
                a += cl;
            for (size_t k = 0; k < d->stop && e >= a + cl && memcmp(t->p + e - cl, d->content, cl) == 0; k++)
                e -= cl;
            memmove(t->p, t->p + a, e - a);
            t->len = e - a;
            t->p[t->len] = 0;
        }
        return true;
    }
    case DEC_REPLACE:
        for (size_t i = 0; i < s->n; i++) {
            buf o = {0};
            buf_add(&o, "", 0);
            if (!regex_replace(&d->re, s->v[i].p, s->v[i].len, d->content, &o)) {
                free(o.p);
                return false;
            }
            free(s->v[i].p);
            s->v[i] = o;
        }
        return true;
    case DEC_BYTEFALLBACK: {
        strs o = {calloc(s->n + 1, sizeof(buf)), 0};
        if (!o.v)
            return false;
        buf pend = {0};
        size_t npend = 0;
        bool ok = true;
        for (size_t i = 0; i <= s->n && ok; i++) {
            unsigned v;
            if (i < s->n && is_byte_token(&s->v[i], &v)) {
                buf_addc(&pend, (char)v);
                npend++;
                continue;
            }
            if (npend) {
                buf t = {0};
                buf_add(&t, "", 0);
                if (utf8_check(pend.p, pend.len) == pend.len)
                    buf_add(&t, pend.p, pend.len);
                else
                    for (size_t k = 0; k < npend; k++)
                        buf_add_cp(&t, 0xFFFD);
                o.v[o.n++] = t;
                ok = !t.oom;
                pend.len = 0;
                npend = 0;
            }
            if (i < s->n) {
                o.v[o.n++] = s->v[i];
                s->v[i] = (buf){0};
            }
        }
        ok = ok && !pend.oom;
        free(pend.p);
        strs_free(s);
        *s = o;
        return ok;
    }
    }
    return false;
}

/* ---- loading --------------------------------------------------------------------------------- */

void lh_tokenizer_free(lh_tokenizer *t)
{
    if (!t)
        return;
    for (int32_t i = 0; i < t->n_ids; i++)
        free(t->tokens[i]);
    free(t->tokens);
    free(t->token_lens);
    free(t->special);
    strmap_free(&t->vocab);
    strmap_free(&t->all_tokens);
    pairmap_free(&t->merges);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    norm_free(t->norm);
    free(t->norm);
    pretok_free(t->pre);
    free(t->pre);
    dec_free(t->dec);
    free(t->dec);
    for (size_t i = 0; i < t->n_tmpl; i++)
        free(t->tmpl[i].ids);
    free(t->tmpl);
    free(t);
}

static lh_status parse_template(ctx *c, lh_tokenizer *t, json_t *j, const char *path)
{
    json_t *single = json_object_get(j, "single"), *sp = json_object_get(j, "special_tokens");
    char p[512];
    snprintf(p, sizeof p, "%s.single", path);
    if (!json_is_array(single))
        return bad_type(c, p, "an array");
    if (sp && !json_is_null(sp) && !json_is_object(sp)) {
        snprintf(p, sizeof p, "%s.special_tokens", path);
        return bad_type(c, p, "an object");
    }
    t->tmpl = calloc(json_array_size(single) + 1, sizeof *t->tmpl);
    if (!t->tmpl)
        return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *it = json_array_get(single, i);
        char pi[600];
        snprintf(pi, sizeof pi, "%s.single[%zu]", path, i);
        json_t *seq = json_object_get(it, "Sequence"), *spec = json_object_get(it, "SpecialToken");
        tmpl_item *ti = &t->tmpl[t->n_tmpl++];
        if (json_is_object(seq)) {
            const char *id = json_string_value(json_object_get(seq, "id"));
            if (!id || strcmp(id, "A") != 0)
                return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.Sequence.id: expected \"A\"",
                                  c->origin, pi);
            ti->is_seq = true;
            continue;
        }
        if (!json_is_object(spec))
            return bad_type(c, pi, "{\"Sequence\": ...} or {\"SpecialToken\": ...}");
        const char *name = json_string_value(json_object_get(spec, "id"));
        json_t *def = name ? json_object_get(sp, name) : NULL;
        json_t *ids = json_object_get(def, "ids");
        if (!name || !json_is_array(ids))
            return lh_err_set(c->err, LH_E_CONFIG,
                              "%s: %s.SpecialToken: '%s' has no entry with ids in %s.special_tokens",
                              c->origin, pi, name ? name : "(no id)", path);
        ti->ids = calloc(json_array_size(ids) + 1, sizeof *ti->ids);
        if (!ti->ids)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        for (size_t k = 0; k < json_array_size(ids); k++) {
            json_t *v = json_array_get(ids, k);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= t->n_ids)
                return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.special_tokens.%s.ids[%zu]: not a "
                                  "token id", c->origin, path, name, k);
            ti->ids[ti->n++] = (int32_t)json_integer_value(v);
        }
    }
    t->has_template = true;
    return LH_OK;
}

static lh_status parse_post(ctx *c, lh_tokenizer *t, json_t *j, const char *path)
{
    const char *type;
    lh_status st = get_type(c, j, path, &type);
    if (st)
        return st;
    if (strcmp(type, "ByteLevel") == 0)
        return LH_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") == 0) {
        if (t->has_template)
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s: a second TemplateProcessing is "
                              "not supported", c->origin, path);
        return parse_template(c, t, j, path);
    }
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(j, "processors");
        char p[512];
        snprintf(p, sizeof p, "%s.processors", path);
        if (!json_is_array(arr))
            return bad_type(c, p, "an array");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char pi[600];
            snprintf(pi, sizeof pi, "%s[%zu]", p, i);
            if ((st = parse_post(c, t, json_array_get(arr, i), pi)))
                return st;
        }
        return LH_OK;
    }
    return unsupported(c, "post_processor", type, path);
}

static lh_status set_token(ctx *c, lh_tokenizer *t, int32_t id, const char *s, size_t n, const char *path)
{
    if (t->tokens[id]) {
        if (t->token_lens[id] == n && memcmp(t->tokens[id], s, n) == 0)
            return LH_OK;
        return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: id %d is already token '%s'", c->origin,
                          path, (int)id, t->tokens[id]);
    }
    t->tokens[id] = malloc(n + 1);
    if (!t->tokens[id])
        return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
    memcpy(t->tokens[id], s, n);
    t->tokens[id][n] = 0;
    t->token_lens[id] = n;
    return LH_OK;
}

static lh_status parse_model(ctx *c, lh_tokenizer *t, json_t *m, json_t *added)
{
    lh_status st;
    const char *type = NULL;
    if (!json_is_object(m))
        return bad_type(c, "model", "an object");
    if ((st = get_str(c, m, "type", "model", false, &type)))
        return st;
    if (type && strcmp(type, "BPE") != 0)
        return unsupported(c, "model", type, "model");
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab))
        return bad_type(c, "model.vocab", "an object of token -> id");
    if (!json_is_array(merges))
        return bad_type(c, "model.merges", "an array");
    json_t *dropout = json_object_get(m, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: model.dropout: BPE dropout is not supported",
                          c->origin);
    const char *csp, *eow, *unk;
    if ((st = get_str(c, m, "continuing_subword_prefix", "model", false, &csp)) ||
        (st = get_str(c, m, "end_of_word_suffix", "model", false, &eow)) ||
        (st = get_str(c, m, "unk_token", "model", false, &unk)) ||
        (st = get_bool(c, m, "byte_fallback", "model", false, &t->byte_fallback)) ||
        (st = get_bool(c, m, "fuse_unk", "model", false, &t->fuse_unk)) ||
        (st = get_bool(c, m, "ignore_merges", "model", false, &t->ignore_merges)))
        return st;
    if (csp && *csp)
        return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: model.continuing_subword_prefix: '%s' is "
                          "not supported (only null or empty)", c->origin, csp);
    if (eow && *eow)
        return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: model.end_of_word_suffix: '%s' is not "
                          "supported (only null or empty)", c->origin, eow);
    /* ids: the vocab's and the added tokens' */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= INT32_MAX) {
            char p[512];
            snprintf(p, sizeof p, "model.vocab[\"%.400s\"]", key);
            return bad_type(c, p, "a token id (non-negative integer)");
        }
        if (json_integer_value(val) > max_id)
            max_id = json_integer_value(val);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *id = json_object_get(json_array_get(added, i), "id");
        char p[64];
        snprintf(p, sizeof p, "added_tokens[%zu].id", i);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX)
            return bad_type(c, p, "a token id (non-negative integer)");
        if (json_integer_value(id) > max_id)
            max_id = json_integer_value(id);
    }
    if (max_id > 50000000)
        return lh_err_set(c->err, LH_E_CONFIG, "%s: model.vocab: id %lld is implausibly large",
                          c->origin, (long long)max_id);
    t->n_ids = (int32_t)(max_id + 1);
    t->tokens = calloc((size_t)t->n_ids + 1, sizeof *t->tokens);
    t->token_lens = calloc((size_t)t->n_ids + 1, sizeof *t->token_lens);
    t->special = calloc((size_t)t->n_ids + 1, sizeof *t->special);
    if (!t->tokens || !t->token_lens || !t->special ||
        !strmap_init(&t->vocab, json_object_size(vocab)) ||
        !strmap_init(&t->all_tokens, json_object_size(vocab) + json_array_size(added)) ||
        !pairmap_init(&t->merges, json_array_size(merges)))
        return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
    json_object_foreach(vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        char p[512];
        snprintf(p, sizeof p, "model.vocab[\"%.400s\"]", key);
        if ((st = set_token(c, t, id, key, strlen(key), p)))
            return st;
        strmap_put(&t->vocab, t->tokens[id], t->token_lens[id], id);
        strmap_put(&t->all_tokens, t->tokens[id], t->token_lens[id], id);
    }
    t->unk_id = -1;
    if (unk) {
        t->unk_id = strmap_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: model.unk_token: '%s' is not in the vocab",
                              c->origin, unk);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = strmap_get(&t->vocab, name, 6);
    }
    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *mg = json_array_get(merges, i);
        const char *a, *b;
        size_t al, bl;
        char p[64];
        snprintf(p, sizeof p, "model.merges[%zu]", i);
        if (json_is_string(mg)) {
            const char *s = json_string_value(mg), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: '%s' is not two tokens separated "
                                  "by one space", c->origin, p, s);
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = strlen(b);
        } else if (json_is_array(mg) && json_array_size(mg) == 2 &&
                   json_is_string(json_array_get(mg, 0)) && json_is_string(json_array_get(mg, 1))) {
            a = json_string_value(json_array_get(mg, 0));
            al = json_string_length(json_array_get(mg, 0));
            b = json_string_value(json_array_get(mg, 1));
            bl = json_string_length(json_array_get(mg, 1));
        } else
            return bad_type(c, p, "\"a b\" or [\"a\", \"b\"]");
        int32_t ia = strmap_get(&t->vocab, a, al), ib = strmap_get(&t->vocab, b, bl);
        buf ab = {0};
        buf_add(&ab, a, al);
        buf_add(&ab, b, bl);
        if (ab.oom)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        int32_t im = strmap_get(&t->vocab, ab.p, ab.len);
        free(ab.p);
        if (ia < 0 || ib < 0 || im < 0)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s: '%.*s', '%.*s' or their merge is not in "
                              "the vocab", c->origin, p, (int)al, a, (int)bl, b);
        uint64_t k = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
        size_t slot = pair_slot(&t->merges, k);
        /* a pair listed twice ranks where it was listed last, as `tokenizers` (which collects
         * the merges into a map) has it */
        t->merges.keys[slot] = k + 1;
        t->merges.rank[slot] = (int32_t)i;
        t->merges.merged[slot] = im;
    }
    return LH_OK;
}

static lh_status parse_added(ctx *c, lh_tokenizer *t, json_t *added, bool has_normalizer)
{
    lh_status st;
    t->added = calloc(json_array_size(added) + 1, sizeof *t->added);
    if (!t->added)
        return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        char p[64];
        snprintf(p, sizeof p, "added_tokens[%zu]", i);
        if (!json_is_object(a))
            return bad_type(c, p, "an object");
        const char *content;
        bool special, lstrip, rstrip, single_word, normalized;
        if ((st = get_str(c, a, "content", p, true, &content)) ||
            (st = get_bool(c, a, "special", p, false, &special)) ||
            (st = get_bool(c, a, "lstrip", p, false, &lstrip)) ||
            (st = get_bool(c, a, "rstrip", p, false, &rstrip)) ||
            (st = get_bool(c, a, "single_word", p, false, &single_word)) ||
            (st = get_bool(c, a, "normalized", p, !special, &normalized)))
            return st;
        const char *flag = lstrip ? "lstrip" : rstrip ? "rstrip" : single_word ? "single_word" : NULL;
        if (flag)
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s.%s: added tokens with %s true are "
                              "not supported", c->origin, p, flag, flag);
        if (normalized && has_normalizer)
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s.normalized: normalized added tokens "
                              "with a normalizer are not supported", c->origin, p);
        if (!*content)
            return lh_err_set(c->err, LH_E_CONFIG, "%s: %s.content: empty", c->origin, p);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        if ((st = set_token(c, t, id, content, strlen(content), p)))
            return st;
        t->special[id] = special;
        strmap_put(&t->all_tokens, t->tokens[id], t->token_lens[id], id);
        added_token *at = &t->added[t->n_added++];
        at->content = strdup(content);
        if (!at->content)
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        at->len = strlen(content);
        at->id = id;
        at->special = special;
    }
    return LH_OK;
}

static lh_status load_root(ctx *c, lh_tokenizer *t, json_t *root)
{
    lh_status st;
    if (!json_is_object(root))
        return bad_type(c, "(top level)", "an object");
    static const char *const nulls[] = {"truncation", "padding"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(root, nulls[i]);
        if (v && !json_is_null(v))
            return lh_err_set(c->err, LH_E_UNSUPPORTED, "%s: %s: only null is supported", c->origin,
                              nulls[i]);
    }
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return bad_type(c, "added_tokens", "an array");
    json_t *jn = json_object_get(root, "normalizer");
    bool has_norm = jn && !json_is_null(jn);
    if ((st = parse_model(c, t, json_object_get(root, "model"), added)) ||
        (st = parse_added(c, t, added, has_norm)))
        return st;
    if (has_norm) {
        if (!(t->norm = calloc(1, sizeof *t->norm)))
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        if ((st = parse_norm(c, jn, "normalizer", t->norm)))
            return st;
    }
    json_t *jp = json_object_get(root, "pre_tokenizer");
    if (jp && !json_is_null(jp)) {
        if (!(t->pre = calloc(1, sizeof *t->pre)))
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        if ((st = parse_pretok(c, jp, "pre_tokenizer", t->pre)))
            return st;
    }
    json_t *jpp = json_object_get(root, "post_processor");
    if (jpp && !json_is_null(jpp) && (st = parse_post(c, t, jpp, "post_processor")))
        return st;
    json_t *jd = json_object_get(root, "decoder");
    if (jd && !json_is_null(jd)) {
        if (!(t->dec = calloc(1, sizeof *t->dec)))
            return lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        if ((st = parse_dec(c, jd, "decoder", t->dec)))
            return st;
    }
    return LH_OK;
}

lh_status lh_tokenizer_load_json(const char *text, size_t len, const char *origin,
                                 lh_tokenizer **out, lh_err *err)
{
    *out = NULL;
    init_bytelevel();
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return lh_err_set(err, LH_E_CONFIG, "%s:%d:%d: %s", origin, je.line, je.column, je.text);
    lh_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        return lh_err_set(err, LH_E_NOMEM, "out of memory loading %s", origin);
    }
    ctx c = {origin, err};
    lh_status st = load_root(&c, t, root);
    json_decref(root);
    if (st) {
        lh_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LH_OK;
}

lh_status lh_tokenizer_load(const char *path, lh_tokenizer **out, lh_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    lh_status st = lh_read_text_file(path, "tokenizer", TOK_MAX_FILE_BYTES, LH_E_CONFIG, &text,
                                     &len, err);
    if (st)
        return st;
    st = lh_tokenizer_load_json(text, len, path, out, err);
    free(text);
    return st;
}

int32_t lh_tokenizer_vocab_size(const lh_tokenizer *t) { return t->n_ids; }

int32_t lh_tokenizer_token_to_id(const lh_tokenizer *t, const char *token)
{
    return strmap_get(&t->all_tokens, token, strlen(token));
}

const char *lh_tokenizer_id_to_token(const lh_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids ? t->tokens[id] : NULL;
}

bool lh_tokenizer_is_special(const lh_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->special[id];
}

/* ---- encode ---------------------------------------------------------------------------------- */

typedef struct ids {
    int32_t *v;
    size_t n, cap;
    bool oom;
} ids;

static void ids_push(ids *x, int32_t id)
{
    if (x->oom)
        return;
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        int32_t *v = realloc(x->v, cap * sizeof *v);
        if (!v) {
            x->oom = true;
            return;
        }
        x->v = v;
        x->cap = cap;
    }
    x->v[x->n++] = id;
}

typedef struct cand {
    int32_t rank, merged;
    size_t pos;
} cand;

static bool cand_less(const cand *a, const cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

typedef struct heap {
    cand *v;
    size_t n, cap;
} heap;

static bool heap_push(heap *h, cand c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        cand *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && cand_less(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return true;
}

static cand heap_pop(heap *h)
{
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *mv = &last;
        if (l < h->n && cand_less(&h->v[l], mv)) {
            m = l;
            mv = &h->v[l];
        }
        if (r < h->n && cand_less(&h->v[r], mv))
            m = r;
        if (m == i)
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* Merges sym in place; false on allocation failure. */
static bool bpe_merge(const lh_tokenizer *t, ids *sym)
{
    size_t n = sym->n;
    if (n < 2)
        return true;
    size_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    bool *dead = calloc(n, sizeof *dead);
    heap h = {0};
    bool ok = next && prev && dead;
    const size_t NONE = (size_t)-1;
    for (size_t i = 0; ok && i < n; i++) {
        next[i] = i + 1 < n ? i + 1 : NONE;
        prev[i] = i ? i - 1 : NONE;
        int32_t r, m;
        if (i + 1 < n && pairmap_get(&t->merges, sym->v[i], sym->v[i + 1], &r, &m))
            ok = heap_push(&h, (cand){r, m, i});
    }
    while (ok && h.n) {
        cand c = heap_pop(&h);
        size_t nx = next[c.pos];
        int32_t r, m;
        if (dead[c.pos] || nx == NONE ||
            !pairmap_get(&t->merges, sym->v[c.pos], sym->v[nx], &r, &m) || r != c.rank ||
            m != c.merged)
            continue; /* stale */
        sym->v[c.pos] = c.merged;
        dead[nx] = true;
        next[c.pos] = next[nx];
        if (next[nx] != NONE)
            prev[next[nx]] = c.pos;
        if (prev[c.pos] != NONE &&
            pairmap_get(&t->merges, sym->v[prev[c.pos]], sym->v[c.pos], &r, &m))
            ok = heap_push(&h, (cand){r, m, prev[c.pos]});
        if (ok && next[c.pos] != NONE &&
            pairmap_get(&t->merges, sym->v[c.pos], sym->v[next[c.pos]], &r, &m))
            ok = heap_push(&h, (cand){r, m, c.pos});
    }
    if (ok) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (!dead[i])
                sym->v[k++] = sym->v[i];
        sym->n = k;
    }
    free(next);
    free(prev);
    free(dead);
    free(h.v);
    return ok;
}

/* BPE on one pre-token. */
static bool bpe_word(const lh_tokenizer *t, const char *s, size_t n, ids *out)
{
    if (n == 0)
        return true;
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->vocab, s, n);
        if (id >= 0) {
            ids_push(out, id);
            return !out->oom;
        }
    }
    ids sym = {0};
    bool last_unk = false;
    for (size_t i = 0; i < n;) {
        size_t cl = utf8_len(s + i);
        int32_t id = strmap_get(&t->vocab, s + i, cl);
        if (id >= 0) {
            ids_push(&sym, id);
            last_unk = false;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < cl; k++)
                    all = all && t->byte_ids[(unsigned char)s[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < cl; k++)
                        ids_push(&sym, t->byte_ids[(unsigned char)s[i + k]]);
                    done = true;
                    last_unk = false;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (!(t->fuse_unk && last_unk))
                    ids_push(&sym, t->unk_id);
                last_unk = true;
            }
        }
        i += cl;
    }
    /* repeatedly merge the lowest-ranked adjacent pair, leftmost on ties (as tokenizers: a
     * heap of candidate merges over a linked list of symbols; stale candidates are skipped) */
    bool ok = bpe_merge(t, &sym);
    for (size_t i = 0; ok && i < sym.n; i++)
        ids_push(out, sym.v[i]);
    ok = ok && !sym.oom && !out->oom;
    free(sym.v);
    return ok;
}

/* Normalizes, pre-tokenizes and runs the model on a segment between added tokens. */
static bool encode_segment(const lh_tokenizer *t, const char *s, size_t n, bool orig0, ids *out)
{
    buf b = {0};
    buf_add(&b, s, n);
    if (b.oom || (t->norm && !norm_apply(t->norm, &b))) {
        free(b.p);
        return false;
    }
    pieces ps = {0};
    if (b.len)
        pieces_push(&ps, b.p, b.len, orig0);
    free(b.p);
    bool ok = !ps.oom && (!t->pre || pretok_apply(t->pre, &ps));
    for (size_t i = 0; ok && i < ps.n; i++)
        ok = bpe_word(t, ps.v[i].s, ps.v[i].len, out);
    pieces_free(&ps);
    return ok;
}

lh_status lh_tokenizer_encode(const lh_tokenizer *t, const char *text, size_t len,
                              bool add_special_tokens, int32_t **out_ids, size_t *n_ids, lh_err *err)
{
    *out_ids = NULL;
    *n_ids = 0;
    size_t bad = utf8_check(text, len);
    if (bad != len)
        return lh_err_set(err, LH_E_USAGE, "text to encode is not valid UTF-8 (byte %zu)", bad);
    ids body = {0};
    bool ok = true;
    size_t seg = 0;
    for (size_t i = 0; ok && i < len;) {
        /* the longest added token starting here */
        const added_token *best = NULL;
        for (size_t k = 0; k < t->n_added; k++) {
            const added_token *a = &t->added[k];
            if (a->len <= len - i && a->content[0] == text[i] && memcmp(a->content, text + i, a->len) == 0 &&
                (!best || a->len > best->len))
                best = a;
        }
        if (!best) {
            i++;
            continue;
        }
        if (i > seg)
            ok = encode_segment(t, text + seg, i - seg, seg == 0, &body);
        ids_push(&body, best->id);
        i += best->len;
        seg = i;
    }
    if (ok && seg < len)
        ok = encode_segment(t, text + seg, len - seg, seg == 0, &body);
    ok = ok && !body.oom;
    if (ok && add_special_tokens && t->has_template) {
        ids all = {0};
        for (size_t k = 0; k < t->n_tmpl; k++) {
            if (t->tmpl[k].is_seq)
                for (size_t q = 0; q < body.n; q++)
                    ids_push(&all, body.v[q]);
            else
                for (size_t q = 0; q < t->tmpl[k].n; q++)
                    ids_push(&all, t->tmpl[k].ids[q]);
        }
        free(body.v);
        body = all;
        ok = !body.oom;
    }
    if (!ok) {
        free(body.v);
        return lh_err_set(err, LH_E_NOMEM, "encoding %zu bytes failed: out of memory (or a "
                          "regex match exceeded PCRE2's memory limit)", len);
    }
    *out_ids = body.v;
    *n_ids = body.n;
    return LH_OK;
}

/* ---- decode ---------------------------------------------------------------------------------- */

lh_status lh_tokenizer_decode(const lh_tokenizer *t, const int32_t *id, size_t n,
                              bool skip_special_tokens, char **text, size_t *len, lh_err *err)
{
    *text = NULL;
    *len = 0;
    /* like `tokenizers`, ids without a token are skipped: a model's vocabulary may be padded
     * beyond the tokenizer's (Qwen2), and sampling can pick such an id; negative ids cannot
     * exist and are refused */
    for (size_t i = 0; i < n; i++)
        if (id[i] < 0)
            return lh_err_set(err, LH_E_USAGE, "token id %d (position %zu) is negative",
                              (int)id[i], i);
    strs s = {calloc(n + 1, sizeof(buf)), 0};
    if (!s.v)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        if (id[i] >= t->n_ids || !t->tokens[id[i]] || (skip_special_tokens && t->special[id[i]]))
            continue;
        buf *b = &s.v[s.n++];
        buf_add(b, t->tokens[id[i]], t->token_lens[id[i]]);
        ok = !b->oom;
    }
    ok = ok && (!t->dec || dec_apply(t->dec, &s));
    buf all = {0};
    buf_add(&all, "", 0);
    for (size_t i = 0; ok && i < s.n; i++) {
        if (i && !t->dec)
            buf_addc(&all, ' ');
        buf_add(&all, s.v[i].p ? s.v[i].p : "", s.v[i].len);
    }
    strs_free(&s);
    if (!ok || all.oom) {
        free(all.p);
        return lh_err_set(err, LH_E_NOMEM, "out of memory while decoding %zu ids", n);
    }
    *text = all.p;
    *len = all.len;
    return LH_OK;
}

/* ---- streaming ------------------------------------------------------------------------------- */

struct lh_detok_stream {
    const lh_tokenizer *t;
    bool skip;
    ids all;
    size_t emitted; /* bytes of the decoded text already returned */
    buf sent;       /* those bytes */
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
    free(s->sent.p);
    free(s);
}

/* Returns text[emitted..] (up to `upto` bytes of text) as a new chunk. */
static lh_status take_chunk(lh_detok_stream *s, const char *text, size_t upto, char **chunk,
                            size_t *len, lh_err *err)
{
    if (upto < s->emitted || memcmp(text, s->sent.p ? s->sent.p : "", s->emitted) != 0)
        return lh_err_set(err, LH_E_UNSUPPORTED, "streaming decode: the decoder changed text "
                          "already streamed");
    size_t n = upto - s->emitted;
    buf_add(&s->sent, text + s->emitted, n);
    *chunk = malloc(n + 1);
    if (!*chunk || s->sent.oom) {
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
    s->sent.len = 0;
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
    lh_status st = lh_tokenizer_decode(s->t, s->all.v, s->all.n, s->skip, &text, &tl, err);
    if (st) {
        s->all.n--;
        return st;
    }
    /* hold everything back while the text ends in U+FFFD (an incomplete sequence, until
     * proven otherwise: byte-fallback groups can even turn text already complete into U+FFFD
     * until the group completes) */
    if (tl >= 3 && memcmp(text + tl - 3, "\xEF\xBF\xBD", 3) == 0) {
        free(text);
        *chunk = calloc(1, 1);
        return *chunk ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    if (tl < s->emitted || memcmp(text, s->sent.p ? s->sent.p : "", s->emitted) != 0) {
        /* a byte-fallback group that turned invalid rewrote text already streamed (it
         * decodes as a whole, into U+FFFD): what was sent stays sent; the stream continues
         * from the ids not yet sent, decoded as a new segment */
        free(text);
        rebase(s);
        st = lh_tokenizer_decode(s->t, s->all.v, s->all.n, s->skip, &text, &tl, err);
        if (st)
            return st;
        if (tl >= 3 && memcmp(text + tl - 3, "\xEF\xBF\xBD", 3) == 0) {
            free(text);
            *chunk = calloc(1, 1);
            return *chunk ? LH_OK : lh_err_set(err, LH_E_NOMEM, "out of memory");
        }
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
    lh_status st = lh_tokenizer_decode(s->t, s->all.v, s->all.n, s->skip, &text, &tl, err);
    if (st)
        return st;
    if (tl < s->emitted || memcmp(text, s->sent.p ? s->sent.p : "", s->emitted) != 0) {
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
