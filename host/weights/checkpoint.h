/* Internal: a Hugging Face checkpoint: one or more safetensors files seen as one name space.
 *
 * lh_checkpoint_open(path):
 *   - a directory: model.safetensors if present (what transformers loads first), else
 *     model.safetensors.index.json (sharded), else LH_E_IO naming both;
 *   - a file: an index (*.json) or a single safetensors file.
 * The index is {"metadata": {...}, "weight_map": {tensor: shard}}. Shard names must be bare
 * file names in the index's directory (no '/', not "." or ".."); each distinct shard is opened
 * once. The index and the shards must agree exactly: a tensor listed in the index but absent
 * from its shard, a tensor present in a shard but mapped to another shard (or not listed at
 * all) are LH_E_CONFIG errors naming the tensor and both files. Shard files not named by the
 * index are never opened.
 *
 * Errors: LH_E_IO (path or a shard missing/unreadable), LH_E_CONFIG (malformed index or shard,
 * disagreement), LH_E_NOMEM; every message names the checkpoint path and the file.
 *
 * Lookup is a binary search over all tensors sorted by name. Tensor pointers, names and data
 * stay valid until lh_checkpoint_close. */
#ifndef LH_WEIGHTS_CHECKPOINT_H
#define LH_WEIGHTS_CHECKPOINT_H

#include "safetensors.h"

typedef struct lh_checkpoint lh_checkpoint;

#define LH_CKPT_SINGLE_FILE "model.safetensors"
#define LH_CKPT_INDEX_FILE "model.safetensors.index.json"

lh_status lh_checkpoint_open(const char *path, lh_checkpoint **out, lh_err *err);
void lh_checkpoint_close(lh_checkpoint *ck);

/* A checkpoint over tensors of another container (a GGUF file, checkpoint_gguf.h): takes
 * tensors[0..n) (a malloc'ed array whose names are malloc'ed too; freed with the checkpoint,
 * also on failure); their data must outlive the checkpoint. Errors: LH_E_CONFIG for two
 * tensors of one name (naming it), LH_E_NOMEM. */
lh_status lh_checkpoint_adopt(const char *path, lh_st_tensor *tensors, size_t n,
                              lh_checkpoint **out, lh_err *err);
/* The path given to open. */
const char *lh_checkpoint_path(const lh_checkpoint *ck);
/* true when opened through an index. */
bool lh_checkpoint_sharded(const lh_checkpoint *ck);
size_t lh_checkpoint_file_count(const lh_checkpoint *ck);
const lh_st_file *lh_checkpoint_file(const lh_checkpoint *ck, size_t i);
/* All tensors of all files, sorted by name. */
size_t lh_checkpoint_count(const lh_checkpoint *ck);
const lh_st_tensor *lh_checkpoint_at(const lh_checkpoint *ck, size_t i);
/* NULL when absent; *index (may be NULL) receives the tensor's position for lh_checkpoint_at. */
const lh_st_tensor *lh_checkpoint_find(const lh_checkpoint *ck, const char *name,
                                       size_t *index);
/* Sum of all tensors' data bytes. */
uint64_t lh_checkpoint_data_bytes(const lh_checkpoint *ck);

#endif
