/* Internal: a read-only safetensors file over mmap.
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the data buffer; offsets are relative to the start of the data buffer.
 *
 * lh_st_open validates the whole header before returning, so every tensor it hands out lies
 * inside the file, has exactly the bytes its shape and dtype need, and overlaps no other.
 * Errors (each message names the file, and the tensor where there is one):
 *   LH_E_IO      missing, unreadable, a directory or not a regular file, mmap failure
 *   LH_E_CONFIG  malformed content: empty or shorter than 8 bytes, header length absurd
 *                (> 100,000,000) or larger than the file, header not JSON or not an object,
 *                duplicate names, an entry not an object, unknown dtype string, shape not an
 *                array of non-negative integers (or more than LH_ST_MAX_DIMS dims), element
 *                count or byte size overflowing, data_offsets not two non-negative integers,
 *                begin > end, end beyond the data buffer, shape x dtype size != end - begin,
 *                overlapping tensors, __metadata__ not an object of strings
 *   LH_E_NOMEM
 *
 * Dtypes: every safetensors dtype string is recognised (so messages are precise), but only
 * F32, F16, BF16 and F8_E4M3 (FP8 checkpoints' weights) have an lh_dtype; the others (F64,
 * I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E5M2, F8_E8M0, F4, F6_E2M3, F6_E3M2) are
 * size-checked like the rest and carry LH_DTYPE_INVALID. Using such a tensor as a weight is the caller's error to report
 * (lh_st_tensor_view: "unsupported dtype I64 for tensor X; supported: F32, F16, BF16"); a
 * file that merely contains one opens fine.
 *
 * Alignment: the format requires none. `aligned` says whether a tensor's data is aligned for
 * its element type inside the mapping (the mapping itself is page-aligned); when it is not,
 * a reader must copy rather than point into the mapping.
 *
 * The mapping is PROT_READ / MAP_PRIVATE: pointers into it are read-only, and valid until
 * lh_st_close. Truncating the file while it is mapped is undefined (SIGBUS), as for any
 * mmap-based loader. */
#ifndef LH_WEIGHTS_SAFETENSORS_H
#define LH_WEIGHTS_SAFETENSORS_H

#include "llmhost.h"
#include "lh_tensor.h"

#define LH_ST_MAX_DIMS 8
#define LH_ST_MAX_HEADER ((uint64_t)100000000)

typedef enum lh_st_dtype {
    LH_ST_INVALID = 0,
    LH_ST_F32,
    LH_ST_F16,
    LH_ST_BF16,
    LH_ST_F64,
    LH_ST_I64,
    LH_ST_I32,
    LH_ST_I16,
    LH_ST_I8,
    LH_ST_U64,
    LH_ST_U32,
    LH_ST_U16,
    LH_ST_U8,
    LH_ST_BOOL,
    LH_ST_F8_E4M3,
    LH_ST_F8_E5M2,
    LH_ST_F8_E8M0,
    LH_ST_F4,
    LH_ST_F6_E2M3,
    LH_ST_F6_E3M2,
    LH_ST_DTYPE_COUNT_
} lh_st_dtype;

typedef struct lh_st_file lh_st_file;

typedef struct lh_st_tensor {
    const char *name;          /* owned by the file */
    lh_st_dtype st_dtype;
    lh_dtype dtype;            /* F32/F16/BF16/FP8_E4M3; LH_DTYPE_INVALID for the others */
    int ndim;                  /* 0 for a scalar */
    int64_t shape[LH_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;       /* data_offsets, relative to the data buffer */
    const void *data;          /* inside the mapping (read-only); NULL when end == begin */
    bool aligned;              /* data aligned for the element type */
    const lh_st_file *file;    /* NULL for a tensor of another container (GGUF) */
    /* A GGUF tensor (checkpoint_gguf.c): its ggml type name ("Q4_K"), and how its values
     * relate to the tree's tensor (lh_gguf_layout; layout_heads: the heads a RoPE row
     * permutation runs over). NULL / 0 for safetensors, which store tensors as named. */
    const char *stored_type;
    int layout;
    int64_t layout_heads;
} lh_st_tensor;

/* Opens and validates `path`. *out owned by the caller (lh_st_close). */
lh_status lh_st_open(const char *path, lh_st_file **out, lh_err *err);
void lh_st_close(lh_st_file *f);

const char *lh_st_path(const lh_st_file *f);
/* Tensors sorted by name (byte order); i < lh_st_count. */
size_t lh_st_count(const lh_st_file *f);
const lh_st_tensor *lh_st_at(const lh_st_file *f, size_t i);
/* NULL when absent. */
const lh_st_tensor *lh_st_find(const lh_st_file *f, const char *name);
/* Value of __metadata__[key], NULL when absent. Owned by the file. */
const char *lh_st_metadata(const lh_st_file *f, const char *key);
/* The mapping, for tests and zero-copy checks. */
const void *lh_st_map_base(const lh_st_file *f, size_t *size);
/* true when [p, p + n) lies inside the mapping. */
bool lh_st_contains(const lh_st_file *f, const void *p, size_t n);

/* "BF16", "I64", ...; "?" for invalid values. */
const char *lh_st_dtype_name(lh_st_dtype dt);
/* Bits per element; 0 for LH_ST_INVALID. */
unsigned lh_st_dtype_bits(lh_st_dtype dt);
/* LH_ST_INVALID when `s` names no safetensors dtype. */
lh_st_dtype lh_st_dtype_parse(const char *s);
/* The safetensors name of an lh_dtype that has one ("F32", "F16", "BF16"), else NULL. */
const char *lh_st_dtype_name_of(lh_dtype dt);

/* A CPU view of a tensor (read-only data: do not write through it).
 * Errors: LH_E_UNSUPPORTED "unsupported dtype I64 for tensor X; supported: F32, F16, BF16",
 * LH_E_UNSUPPORTED for more than LH_MAX_DIMS dims or data not aligned for its type (copy it
 * instead). */
lh_status lh_st_tensor_view(const lh_st_tensor *t, lh_tensor *out, lh_err *err);

#endif
