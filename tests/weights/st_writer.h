/* Test helper: writes small safetensors files (and raw byte files) into a directory. */
#ifndef LH_TEST_ST_WRITER_H
#define LH_TEST_ST_WRITER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct stw {
    json_t *header;       /* object: name -> entry, plus optional __metadata__ */
    unsigned char *data;  /* the data buffer */
    size_t n, cap;
    /* Pads the header with spaces so that (8 + header length) % 8 == data_misalign
     * (0: the usual 8-byte alignment of the data buffer). */
    unsigned data_misalign;
} stw;

void stw_init(stw *w);
void stw_free(stw *w);
/* Appends a tensor: data is `nbytes` bytes; offsets follow the previous tensor. */
void stw_add(stw *w, const char *name, const char *dtype, int ndim, const int64_t *shape,
             const void *data, size_t nbytes);
/* Appends an entry verbatim (parsed from JSON text) without data. */
void stw_add_entry(stw *w, const char *name, const char *entry_json);
/* Appends raw bytes to the data buffer (for hand-written entries). */
void stw_add_bytes(stw *w, const void *data, size_t nbytes);
void stw_metadata(stw *w, const char *key, const char *value);
/* Writes dir/file; returns 0 on success. */
int stw_write(const stw *w, const char *dir, const char *file);

/* Writes bytes to dir/name; returns 0 on success. */
int write_bytes(const char *dir, const char *name, const void *data, size_t n);
/* A file with the 8-byte length `hlen`, then `header` (strlen bytes), then `data`. */
int write_raw_st(const char *dir, const char *name, uint64_t hlen, const char *header,
                 const void *data, size_t n);

#endif
