/* Internal: the tensors of a GGUF model source as a checkpoint, named as the model's tree
 * names them.
 *
 * lh_checkpoint_open_gguf(cfg): cfg comes from lh_model_config_from_gguf (cfg->gguf and
 * cfg->gguf_provider set). Every tensor of the file is mapped through the provider's tensor
 * table ("blk.{L}.attn_q.weight" -> "model.layers.{L}.self_attn.q_proj.weight"); its dims are
 * reversed into the tree's row-major shape and its ggml type becomes the lh_dtype of the same
 * format (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; any other type
 * keeps LH_DTYPE_INVALID with its ggml name in stored_type, and binding reports it). Data
 * points into the file's mapping; the layout (RoPE row permutation, stored + 1) is applied
 * when the weights are bound (bind.c), so opening copies nothing. LH_GGUF_IGNORE tensors are
 * left out.
 *
 * Errors (naming the file and the tensor): LH_E_CONFIG for a tensor the table does not name
 * (listing the table's names), two tensors mapped to one name, a RoPE-permuted tensor whose
 * rows are not a multiple of 2 x heads, a stored + 1 tensor that is not F32; LH_E_USAGE when
 * cfg is not a GGUF config; LH_E_NOMEM.
 *
 * The checkpoint does not own the file: cfg must outlive it. */
#ifndef LH_WEIGHTS_CHECKPOINT_GGUF_H
#define LH_WEIGHTS_CHECKPOINT_GGUF_H

#include "config/model_config.h"
#include "weights/checkpoint.h"

lh_status lh_checkpoint_open_gguf(const lh_model_config *cfg, lh_checkpoint **out, lh_err *err);

/* The lh_dtype of a ggml type id; LH_DTYPE_INVALID for a type without one. */
lh_dtype lh_dtype_of_ggml(uint32_t ggml_type);

#endif
