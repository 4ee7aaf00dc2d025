#include "arch_index.h"

#include "core/err.h"
#include "core/fileio.h"
#include "core/strutil.h"

#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const kind_names[LH_KIND_COUNT] = {
    [LH_KIND_MODEL] = "model",
    [LH_KIND_VISION_ENCODER] = "vision_encoder",
    [LH_KIND_DRAFT] = "draft",
    [LH_KIND_ATTENTION_BACKEND] = "attention_backend",
    [LH_KIND_GGUF] = "gguf",
};

const char *lh_kind_name(lh_kind k)
{
    return (unsigned)k < LH_KIND_COUNT ? kind_names[k] : "unknown-kind";
}

int lh_kind_from_name(const char *name, lh_kind *out)
{
    for (int k = 0; k < LH_KIND_COUNT; k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (lh_kind)k;
            return 0;
        }
    return -1;
}

bool lh_kind_names_equal(lh_kind k, const char *a, const char *b)
{
    return k == LH_KIND_ATTENTION_BACKEND ? strcasecmp(a, b) == 0 : strcmp(a, b) == 0;
}

void lh_arch_index_free(lh_arch_index *idx)
{
    if (!idx)
        return;
    for (size_t i = 0; i < idx->n_rows; i++) {
        free(idx->rows[i].name);
        free(idx->rows[i].shared_object);
    }
    free(idx->rows);
    free(idx->path);
    free(idx->dir);
    memset(idx, 0, sizeof *idx);
}

const lh_index_row *lh_arch_index_find(const lh_arch_index *idx, lh_kind kind, const char *name)
{
    for (size_t i = 0; i < idx->n_rows; i++)
        if (idx->rows[i].kind == kind && lh_kind_names_equal(kind, idx->rows[i].name, name))
            return &idx->rows[i];
    return NULL;
}

static bool bare_file_name_ok(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 &&
           !strstr(s, "..");
}

static bool has_space(const char *s)
{
    for (; *s; s++)
        if (*s == ' ' || *s == '\r' || *s == '\v' || *s == '\f')
            return true;
    return false;
}

/* Splits `line` (modified in place) at tabs into at most `max` fields; returns the count, or
 * max + 1 when there are more. */
static size_t split_tabs(char *line, char **fields, size_t max)
{
    size_t n = 0;
    char *p = line;
    for (;;) {
        if (n == max)
            return max + 1;
        fields[n++] = p;
        char *tab = strchr(p, '\t');
        if (!tab)
            return n;
        *tab = '\0';
        p = tab + 1;
    }
}

static lh_status parse_line(lh_arch_index *idx, char *line, int lineno, lh_err *err)
{
    char *f[3];
    size_t n = split_tabs(line, f, 3);
    if (n != 3)
        return lh_err_set(err, LH_E_INDEX_PARSE,
                          "%s:%d: expected 3 tab-separated fields (kind, name, shared_object), "
                          "found %s%zu",
                          idx->path, lineno, n > 3 ? "more than " : "", n > 3 ? (size_t)3 : n);
    lh_kind kind;
    if (lh_kind_from_name(f[0], &kind) != 0) {
        const char *near = lh_nearest(f[0], kind_names, LH_KIND_COUNT);
        return lh_err_set(err, LH_E_INDEX_PARSE,
                          "%s:%d: unknown kind '%s'%s%s%s (kinds: model, vision_encoder, draft, "
                          "attention_backend)",
                          idx->path, lineno, f[0], near ? "; did you mean '" : "",
                          near ? near : "", near ? "'?" : "");
    }
    if (!*f[1] || has_space(f[1]))
        return lh_err_set(err, LH_E_INDEX_PARSE, "%s:%d: name '%s' is empty or contains "
                          "white space", idx->path, lineno, f[1]);
    if (!bare_file_name_ok(f[2]) || has_space(f[2]))
        return lh_err_set(err, LH_E_INDEX_PARSE,
                          "%s:%d: shared_object '%s' must be a bare file name (no '/', no '..') "
                          "in the index's directory",
                          idx->path, lineno, f[2]);
    const lh_index_row *dup = lh_arch_index_find(idx, kind, f[1]);
    if (dup)
        return lh_err_set(err, LH_E_INDEX_PARSE,
                          "%s:%d: duplicate row for %s '%s' (first at line %d)", idx->path,
                          lineno, f[0], f[1], dup->line);
    lh_index_row *rows = realloc(idx->rows, (idx->n_rows + 1) * sizeof *rows);
    if (!rows)
        return lh_err_set(err, LH_E_NOMEM, "%s:%d: out of memory", idx->path, lineno);
    idx->rows = rows;
    lh_index_row *r = &rows[idx->n_rows];
    r->kind = kind;
    r->line = lineno;
    r->name = strdup(f[1]);
    r->shared_object = strdup(f[2]);
    idx->n_rows++;
    if (!r->name || !r->shared_object)
        return lh_err_set(err, LH_E_NOMEM, "%s:%d: out of memory", idx->path, lineno);
    return LH_OK;
}

lh_status lh_arch_index_parse(const char *text, const char *path, lh_arch_index *out,
                              lh_err *err)
{
    memset(out, 0, sizeof *out);
    out->path = strdup(path);
    char *pcopy = strdup(path);
    out->dir = pcopy ? strdup(dirname(pcopy)) : NULL;
    free(pcopy);
    char *buf = strdup(text);
    if (!out->path || !out->dir || !buf) {
        free(buf);
        lh_arch_index_free(out);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    }
    lh_status st = LH_OK;
    int lineno = 0;
    char *p = buf;
    /* Walk lines by hand: strtok would merge empty lines and hide line numbers. */
    while (p && st == LH_OK) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        lineno++;
        size_t len = strlen(p);
        if (len && p[len - 1] == '\r') /* files written on Windows */
            p[--len] = '\0';
        if (lineno == 1) {
            char *f[2];
            char *hdr = p;
            size_t n = split_tabs(hdr, f, 2);
            if (n != 2 || strcmp(f[0], "#llmhost-arch-index") != 0) {
                st = lh_err_set(err, LH_E_INDEX_PARSE,
                                "%s:1: first line must be '#llmhost-arch-index<TAB>%d'", path,
                                LH_ARCH_INDEX_VERSION);
            } else {
                char *end;
                errno = 0;
                long v = strtol(f[1], &end, 10);
                if (errno || *end || end == f[1] || v != LH_ARCH_INDEX_VERSION)
                    st = lh_err_set(err, LH_E_INDEX_PARSE,
                                    "%s:1: index format version '%s' is not supported; this "
                                    "host reads version %d",
                                    path, f[1], LH_ARCH_INDEX_VERSION);
            }
        } else if (len == 0 || p[0] == '#') {
            /* blank line or comment */
        } else {
            st = parse_line(out, p, lineno, err);
        }
        p = nl ? nl + 1 : NULL;
    }
    if (st == LH_OK && lineno == 0)
        st = lh_err_set(err, LH_E_INDEX_PARSE, "%s: empty file (missing header line)", path);
    free(buf);
    if (st != LH_OK)
        lh_arch_index_free(out);
    return st;
}

lh_status lh_arch_index_load(const char *path, lh_arch_index *out, lh_err *err)
{
    memset(out, 0, sizeof *out);
    char *text;
    size_t len;
    lh_status st = lh_read_text_file(path, "arch index", (size_t)64 << 20, LH_E_INDEX_PARSE,
                                     &text, &len, err);
    if (st != LH_OK)
        return st;
    st = lh_arch_index_parse(text, path, out, err);
    free(text);
    return st;
}

static int row_cmp(const void *a, const void *b)
{
    const lh_index_row *x = *(const lh_index_row *const *)a, *y = *(const lh_index_row *const *)b;
    if (x->kind != y->kind)
        return (int)x->kind - (int)y->kind;
    return strcmp(x->name, y->name);
}

int lh_arch_index_write(FILE *f, const lh_index_row *rows, size_t n_rows)
{
    const lh_index_row **order = malloc((n_rows ? n_rows : 1) * sizeof *order);
    if (!order)
        return -1;
    for (size_t i = 0; i < n_rows; i++)
        order[i] = &rows[i];
    qsort(order, n_rows, sizeof *order, row_cmp);
    int rc = fprintf(f, "#llmhost-arch-index\t%d\n#kind\tname\tshared_object\n",
                     LH_ARCH_INDEX_VERSION) < 0 ? -1 : 0;
    for (size_t i = 0; i < n_rows && rc == 0; i++)
        if (fprintf(f, "%s\t%s\t%s\n", lh_kind_name(order[i]->kind), order[i]->name,
                    order[i]->shared_object) < 0)
            rc = -1;
    free(order);
    return rc;
}

lh_status lh_arch_index_write_atomic(const char *path, const lh_index_row *rows, size_t n_rows,
                                     lh_err *err)
{
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) + 1 : 0;
    snprintf(tmp, n, "%.*s.%s.XXXXXX", dir_len, path, slash ? slash + 1 : path);
    lh_status st = LH_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = lh_err_set(err, LH_E_IO, "%s: cannot create a temporary file next to it: %s",
                        path, strerror(errno));
        free(tmp);
        return st;
    }
    mode_t mask = umask(0);
    umask(mask);
    FILE *f = fdopen(fd, "w");
    const char *what = NULL;
    if (!f) {
        close(fd);
        what = "fdopen";
    } else if (fchmod(fd, 0644 & ~mask) != 0) {
        what = "chmod";
    } else if (lh_arch_index_write(f, rows, n_rows) != 0 || fflush(f) != 0) {
        what = "write";
    } else if (fsync(fd) != 0) {
        what = "fsync";
    }
    if (f && fclose(f) != 0 && !what)
        what = "close";
    if (!what && rename(tmp, path) != 0)
        what = "rename";
    if (what) {
        st = lh_err_set(err, LH_E_IO, "%s: %s of %s failed: %s; the file is unchanged", path,
                        what, tmp, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return st;
}
