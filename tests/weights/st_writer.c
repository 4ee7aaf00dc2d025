#include "st_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void stw_init(stw *w)
{
    memset(w, 0, sizeof *w);
    w->header = json_object();
}

void stw_free(stw *w)
{
    json_decref(w->header);
    free(w->data);
    memset(w, 0, sizeof *w);
}

void stw_add_bytes(stw *w, const void *data, size_t nbytes)
{
    if (w->n + nbytes > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + nbytes)
            cap *= 2;
        w->data = realloc(w->data, cap);
        if (!w->data)
            abort();
        w->cap = cap;
    }
    if (nbytes)
        memcpy(w->data + w->n, data, nbytes);
    w->n += nbytes;
}

void stw_add(stw *w, const char *name, const char *dtype, int ndim, const int64_t *shape,
             const void *data, size_t nbytes)
{
    json_t *sh = json_array();
    for (int i = 0; i < ndim; i++)
        json_array_append_new(sh, json_integer(shape[i]));
    json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", dtype, "shape", sh, "data_offsets",
                          (json_int_t)w->n, (json_int_t)(w->n + nbytes));
    json_object_set_new(w->header, name, e);
    stw_add_bytes(w, data, nbytes);
}

void stw_add_entry(stw *w, const char *name, const char *entry_json)
{
    json_error_t je;
    json_t *e = json_loads(entry_json, JSON_DECODE_ANY, &je);
    if (!e) {
        fprintf(stderr, "stw_add_entry: bad JSON %s: %s\n", entry_json, je.text);
        abort();
    }
    json_object_set_new(w->header, name, e);
}

void stw_metadata(stw *w, const char *key, const char *value)
{
    json_t *m = json_object_get(w->header, "__metadata__");
    if (!m) {
        m = json_object();
        json_object_set_new(w->header, "__metadata__", m);
    }
    json_object_set_new(m, key, json_string(value));
}

int write_bytes(const char *dir, const char *name, const void *data, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = (n && fwrite(data, 1, n, f) != n) ? -1 : 0;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

static void le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

int write_raw_st(const char *dir, const char *name, uint64_t hlen, const char *header,
                 const void *data, size_t n)
{
    size_t hl = header ? strlen(header) : 0;
    size_t total = 8 + hl + n;
    unsigned char *buf = malloc(total);
    if (!buf)
        return -1;
    le64(buf, hlen);
    if (hl)
        memcpy(buf + 8, header, hl);
    if (n)
        memcpy(buf + 8 + hl, data, n);
    int rc = write_bytes(dir, name, buf, total);
    free(buf);
    return rc;
}

int stw_write(const stw *w, const char *dir, const char *file)
{
    char *h = json_dumps(w->header, JSON_COMPACT);
    if (!h)
        return -1;
    size_t hl = strlen(h);
    size_t pad = 0;
    while ((8 + hl + pad) % 8 != w->data_misalign % 8)
        pad++;
    char *padded = malloc(hl + pad + 1);
    if (!padded) {
        free(h);
        return -1;
    }
    memcpy(padded, h, hl);
    memset(padded + hl, ' ', pad);
    padded[hl + pad] = '\0';
    int rc = write_raw_st(dir, file, hl + pad, padded, w->data, w->n);
    free(padded);
    free(h);
    return rc;
}
