/* Internal: a read-only GGUF file (ggml's container for quantized models) over mmap.
 *
 * Format (ggml docs/gguf.md), little-endian throughout:
 *   header   "GGUF", uint32 version (2 or 3), uint64 tensor_count, uint64 metadata_kv_count
 *   kv[]     string key, uint32 value type, value
 *            (string = uint64 length + bytes, not NUL-terminated;
 *             array  = uint32 element type + uint64 count + elements)
 *   tensors  string name, uint32 n_dims, uint64 dims[n_dims] (ne[0] first), uint32 ggml type,
 *            uint64 offset (relative to the data section)
 *   padding  to general.alignment (default 32)
 *   data     the tensors' bytes
 *
 * lh_gguf_open maps the file read-only and validates everything before returning, reading no
 * byte it has not bounds-checked: every metadata value is walked (bool values must be 0 or 1),
 * every tensor lies inside the data section, starts at a multiple of the alignment, has
 * exactly the bytes its dims and ggml type need, and overlaps no other tensor.
 *
 * Errors (each message names the file, and the key or tensor, with its index, where there is
 * one, and the byte offset where a read would have run past the end):
 *   LH_E_IO          missing, unreadable, a directory or not a regular file, mmap failure
 *   LH_E_UNSUPPORTED version 1 ("GGUF version 1 ... not supported"), any version but 2 and 3,
 *                    a byte-swapped (big-endian) file, a ggml type without a known size
 *                    ("unsupported ggml type 4 (Q4_2, removed from ggml)", "unknown ggml
 *                    type 99")
 *   LH_E_CONFIG      malformed content: empty or shorter than the 24-byte header, bad magic,
 *                    a tensor or metadata count larger than the file could hold, any read
 *                    past the end (string, value, array, dims), a key that is empty, longer
 *                    than 65535 bytes or holds a NUL byte, an unknown metadata value type,
 *                    arrays nested deeper than LH_GGUF_MAX_NESTING, an array whose count
 *                    cannot fit in the file, a bool value other than 0 or 1, duplicate keys,
 *                    a tensor name empty, longer than 64 bytes or holding a NUL byte,
 *                    duplicate tensor names, n_dims > LH_GGUF_MAX_DIMS, a dimension of 0 or
 *                    above INT64_MAX, an element count overflowing int64 or a byte size
 *                    overflowing uint64, ne[0]
 *                    not a multiple of the type's block size, general.alignment not an
 *                    integer or 0 or not a power of two, an offset not a multiple of the
 *                    alignment, a tensor outside the data section, overlapping tensors
 *   LH_E_NOMEM
 *
 * Ownership: the file owns everything it hands out (keys, names, values, tensors); pointers
 * stay valid until lh_gguf_close. Tensor data and string values point into the mapping
 * (PROT_READ / MAP_PRIVATE, zero-copy): read-only. Truncating the file while it is mapped is
 * undefined (SIGBUS), as for any mmap-based loader. An open file is immutable: every query is
 * safe from several threads at once. */
#ifndef LH_WEIGHTS_GGUF_H
#define LH_WEIGHTS_GGUF_H

#include "llmhost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LH_GGUF_MAX_DIMS 4
#define LH_GGUF_MAX_NESTING 4         /* an array of arrays is depth 2 */
#define LH_GGUF_MAX_KEY 65535
#define LH_GGUF_MAX_NAME 64
#define LH_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types; the values are the format's ids. */
typedef enum lh_gguf_type {
    LH_GGUF_UINT8 = 0,
    LH_GGUF_INT8 = 1,
    LH_GGUF_UINT16 = 2,
    LH_GGUF_INT16 = 3,
    LH_GGUF_UINT32 = 4,
    LH_GGUF_INT32 = 5,
    LH_GGUF_FLOAT32 = 6,
    LH_GGUF_BOOL = 7,
    LH_GGUF_STRING = 8,
    LH_GGUF_ARRAY = 9,
    LH_GGUF_UINT64 = 10,
    LH_GGUF_INT64 = 11,
    LH_GGUF_FLOAT64 = 12,
    LH_GGUF_TYPE_COUNT_
} lh_gguf_type;

/* A metadata value: a view into the mapping. */
typedef struct lh_gguf_value {
    lh_gguf_type type;
    lh_gguf_type elem_type;   /* ARRAY: the element type; else == type */
    uint64_t count;           /* ARRAY: elements; STRING: bytes; scalars: 1 */
    const unsigned char *p;   /* scalar bytes, string bytes, or the array's first element */
    uint64_t size;            /* bytes from p to the value's end */
    const uint64_t *index;    /* internal: element offsets of a top-level array of strings or
                               * arrays (NULL otherwise; element access then walks) */
} lh_gguf_value;

typedef struct lh_gguf_kv {
    const char *key;          /* NUL-terminated copy, owned by the file */
    uint64_t offset;          /* file offset of the key */
    lh_gguf_value value;
} lh_gguf_kv;

typedef struct lh_gguf_tensor {
    const char *name;         /* NUL-terminated copy, owned by the file */
    uint32_t n_dims;          /* 0 (a scalar) .. LH_GGUF_MAX_DIMS */
    int64_t dims[LH_GGUF_MAX_DIMS]; /* GGUF order: ne[0] (contiguous) first; 1 past n_dims */
    int64_t n_elements;
    uint32_t type;            /* ggml type id */
    const char *type_name;    /* "Q4_1", ... */
    uint64_t offset;          /* relative to the data section, as stored */
    uint64_t file_offset;     /* from the start of the file */
    uint64_t size;            /* bytes: n_elements / block size * block bytes */
    const void *data;         /* inside the mapping (read-only, zero-copy) */
    size_t index;             /* position in the file's tensor list */
} lh_gguf_tensor;

typedef struct lh_gguf_file lh_gguf_file;

/* Opens and validates `path`. *out owned by the caller (lh_gguf_close); NULL on failure. */
lh_status lh_gguf_open(const char *path, lh_gguf_file **out, lh_err *err);
void lh_gguf_close(lh_gguf_file *f);

const char *lh_gguf_path(const lh_gguf_file *f);
uint32_t lh_gguf_version(const lh_gguf_file *f);
uint32_t lh_gguf_alignment(const lh_gguf_file *f);
/* File offset of the data section and its size (to the end of the file). */
uint64_t lh_gguf_data_offset(const lh_gguf_file *f);
uint64_t lh_gguf_data_size(const lh_gguf_file *f);
/* The mapping, for tests and zero-copy checks; true when [p, p + n) lies inside it. */
const void *lh_gguf_map_base(const lh_gguf_file *f, size_t *size);
bool lh_gguf_contains(const lh_gguf_file *f, const void *p, size_t n);

/* ---- metadata ------------------------------------------------------------------------------
 * Keys in file order (i < lh_gguf_kv_count); lh_gguf_find: NULL when absent.
 *
 * Getters by key: LH_E_CONFIG "FILE: metadata key 'K' not found" when absent, and
 * LH_E_CONFIG naming the key and both types when the value has another type, or, for the
 * integer getters, when the value lies outside [min, max] (any integer width is accepted).
 * lh_gguf_get_float accepts FLOAT32 and FLOAT64. Strings are not NUL-terminated (s, len). The
 * array getters address element i of an array (LH_E_CONFIG past the end, naming key[i]). */
size_t lh_gguf_kv_count(const lh_gguf_file *f);
const lh_gguf_kv *lh_gguf_kv_at(const lh_gguf_file *f, size_t i);
const lh_gguf_kv *lh_gguf_find(const lh_gguf_file *f, const char *key);

lh_status lh_gguf_get_int(const lh_gguf_file *f, const char *key, int64_t min, int64_t max,
                          int64_t *out, lh_err *err);
lh_status lh_gguf_get_uint(const lh_gguf_file *f, const char *key, uint64_t max, uint64_t *out,
                           lh_err *err);
lh_status lh_gguf_get_float(const lh_gguf_file *f, const char *key, double *out, lh_err *err);
lh_status lh_gguf_get_bool(const lh_gguf_file *f, const char *key, bool *out, lh_err *err);
lh_status lh_gguf_get_string(const lh_gguf_file *f, const char *key, const char **s,
                             size_t *len, lh_err *err);
/* Element type and count of an array. */
lh_status lh_gguf_get_array(const lh_gguf_file *f, const char *key, lh_gguf_type *elem_type,
                            uint64_t *count, lh_err *err);
lh_status lh_gguf_get_array_int(const lh_gguf_file *f, const char *key, uint64_t i, int64_t min,
                                int64_t max, int64_t *out, lh_err *err);
lh_status lh_gguf_get_array_float(const lh_gguf_file *f, const char *key, uint64_t i,
                                  double *out, lh_err *err);
lh_status lh_gguf_get_array_bool(const lh_gguf_file *f, const char *key, uint64_t i, bool *out,
                                 lh_err *err);
lh_status lh_gguf_get_array_string(const lh_gguf_file *f, const char *key, uint64_t i,
                                   const char **s, size_t *len, lh_err *err);

/* The same on values (iteration, nested arrays); messages name no key (the caller adds it).
 * lh_gguf_value_at: element i of an array, O(1) except inside nested arrays of strings or
 * arrays (a walk over validated bytes). */
lh_status lh_gguf_value_int(const lh_gguf_value *v, int64_t min, int64_t max, int64_t *out,
                            lh_err *err);
lh_status lh_gguf_value_uint(const lh_gguf_value *v, uint64_t max, uint64_t *out, lh_err *err);
lh_status lh_gguf_value_float(const lh_gguf_value *v, double *out, lh_err *err);
lh_status lh_gguf_value_bool(const lh_gguf_value *v, bool *out, lh_err *err);
lh_status lh_gguf_value_string(const lh_gguf_value *v, const char **s, size_t *len,
                               lh_err *err);
lh_status lh_gguf_value_at(const lh_gguf_value *arr, uint64_t i, lh_gguf_value *out,
                           lh_err *err);

/* "UINT8", ..., "FLOAT64"; "?" for an unknown id. */
const char *lh_gguf_type_name(uint32_t t);

/* ---- tensors -------------------------------------------------------------------------------
 * In file order (i < lh_gguf_tensor_count); lh_gguf_find_tensor: NULL when absent. */
size_t lh_gguf_tensor_count(const lh_gguf_file *f);
const lh_gguf_tensor *lh_gguf_tensor_at(const lh_gguf_file *f, size_t i);
const lh_gguf_tensor *lh_gguf_find_tensor(const lh_gguf_file *f, const char *name);

/* ---- ggml types ----------------------------------------------------------------------------
 * Name of a ggml type id ("F32", "Q4_K", "IQ2_XXS", "Q4_2" for a removed one); NULL for an id
 * ggml never assigned. */
const char *lh_ggml_type_name(uint32_t type);
/* Elements per block and bytes per block; false (both 0) for a type without a known size
 * (removed or unknown ids). */
bool lh_ggml_type_size(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);

/* ---- dump ----------------------------------------------------------------------------------
 * Writes a text summary: header, every key (arrays: type, count and up to `max_elems`
 * elements) and every tensor (name, type, dims, offset, size), one per line. */
void lh_gguf_dump(const lh_gguf_file *f, FILE *out, size_t max_elems);

#endif
