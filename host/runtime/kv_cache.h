/* Internal: the KV cache manager — the block pool that paged attention backends
 * (LH_ATTN_CAP_PAGED_KV) keep their keys and values in, and the per-sequence block tables.
 *
 * Sizing (lh_kv_plan_compute, no allocation, also used by `explain`): a block holds
 * block_size tokens of every layer; its bytes are, per layer, block_size x kv_heads x
 * head_dim elements of keys (k_dtype) and of values (v_dtype), plus for each fp8 tensor one f32
 * scale per kv head, plus, with sparse attention, per-head key minima and maxima (2 x head_dim
 * f32 per kv head). The pool holds num_blocks blocks:
 *   kv_cache.max_tokens        -> ceil(max_tokens / block_size)
 *   kv_cache.memory_fraction f -> floor(f x MemAvailable / (bytes per block + bookkeeping)),
 *                                 MemAvailable read from /proc/meminfo when the plan is made
 *   neither                    -> max_batch_size x ceil(max_seq_len / block_size), which never
 *                                 runs out before max_seq_len does.
 * On the CPU the pool is reserved as one address range and materializes as blocks are first
 * written (lowest block ids are handed out first, so a lightly used pool stays small); on a
 * CUDA context it is one lh_k_alloc of device memory, zeroed at creation.
 *
 * Allocation: a step reserves, all or nothing, the blocks its sequences need to hold their
 * tokens after the step; a finished sequence gives its blocks back. Running out is
 * LH_E_UNSUPPORTED with blocks needed, free and total, and changes nothing.
 *
 * Ownership: the cache owns its storage and tables; pointers it returns stay valid until the
 * next reserve/release of that slot (tables) or until lh_kv_cache_free (pages). */
#ifndef LH_RUNTIME_KV_CACHE_H
#define LH_RUNTIME_KV_CACHE_H

#include "config/run_config.h"
#include "core/err.h"
#include "lh_kernels.h"

/* Bytes of bookkeeping per block besides its data: the manager's free-list entry (4) and the
 * kernels' per-block marks (16); memory_fraction sizing counts them. */
#define LH_KV_BLOCK_OVERHEAD 20

typedef struct lh_kv_plan {
    int64_t n_layers, kv_heads, head_dim;
    int64_t block_size;
    lh_kv_layout layout;
    lh_dtype k_dtype, v_dtype;
    bool summaries;           /* per-block key min/max for sparse selection */
    /* multi-head latent attention: each layer caches one latent (kv_heads 1, head_dim
     * kv_lora_rank + qk_rope_head_dim) that serves as keys and values: the pool's v is its k
     * (lh_kv_pages), v_dtype is k_dtype and nothing is stored for values */
    bool latent;
    int64_t max_seqs, max_seq_len;
    size_t kv_bytes_per_token; /* keys + values, all layers (scales and summaries excluded) */
    size_t block_bytes;        /* one block, all layers, everything included */
    int64_t num_blocks;
    size_t pool_bytes;         /* num_blocks x block_bytes */
    char sized_by[160];        /* how num_blocks was chosen, for explain and errors */
} lh_kv_plan;

/* The memory kv_cache.memory_fraction is a share of: NULL means the host's MemAvailable; a
 * device run passes what the device will have left for the pool (free memory minus the
 * weights about to be uploaded), with a description for explain. */
typedef struct lh_kv_mem_budget {
    uint64_t bytes;
    char what[96]; /* "cuda:0 free memory after the weights" */
} lh_kv_mem_budget;

/* Computes the pool for the run config's kv_cache (auto dtypes resolve to f32) and the model
 * geometry. Errors: LH_E_CONFIG (a pool that cannot hold one block, sizes that overflow,
 * memory_fraction without a readable MemAvailable or with no device memory left), naming the
 * setting; for a latent cache, a kv_cache.v_dtype other than the keys' dtype. */
lh_status lh_kv_plan_compute(const lh_kv_cache_config *kv, int64_t n_layers, int64_t kv_heads,
                             int64_t head_dim, bool summaries, bool latent, int64_t max_seq_len,
                             int64_t max_seqs, const lh_kv_mem_budget *budget, lh_kv_plan *out,
                             lh_err *err);

/* MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read. */
uint64_t lh_mem_available(void);

typedef struct lh_kv_cache lh_kv_cache;

/* Reserves the pool's address range (kctx NULL or a CPU context) or allocates it on kctx's
 * device, and the tables. kctx, when given, must outlive the cache. Errors: LH_E_NOMEM naming
 * the bytes (device memory: with lh_k_alloc's numbers). */
lh_status lh_kv_cache_create(const lh_kv_plan *plan, lh_kctx *kctx, lh_kv_cache **out,
                             lh_err *err);
void lh_kv_cache_free(lh_kv_cache *c);

/* Makes slot slots[i] hold blocks for tokens[i] tokens (never shrinks), for all i, or changes
 * nothing. Errors: LH_E_USAGE (slot outside [0, max_seqs), a slot twice, more than
 * max_seq_len tokens), LH_E_UNSUPPORTED (out of blocks: needed, free, total). */
lh_status lh_kv_cache_reserve(lh_kv_cache *c, const int64_t *slots, const int64_t *tokens,
                              int64_t n, lh_err *err);
/* Gives the slot's blocks back; the slot's first block ends on top of the free list, so a
 * sequence that takes the slot next reuses the same blocks in the same order. */
void lh_kv_cache_release(lh_kv_cache *c, int64_t slot);

/* The slot's block table and its length (NULL for a slot outside the range). */
const int32_t *lh_kv_cache_table(const lh_kv_cache *c, int64_t slot, int64_t *n_blocks);
/* Layer `layer`'s view of the pool (NULL outside [0, n_layers)). */
const lh_kv_pages *lh_kv_cache_layer(const lh_kv_cache *c, int64_t layer);
const lh_kv_plan *lh_kv_cache_plan(const lh_kv_cache *c);
int64_t lh_kv_cache_free_blocks(const lh_kv_cache *c);

/* ---- prefix caching ----
 * Full blocks are identified by a hash chain of their token ids (the cache belongs to one
 * engine, so the model, its RoPE and the KV dtype are fixed), shared by reference between
 * slots, and kept when their last holder releases them until a block is needed (the one
 * released longest ago goes first): lh_kv_cache_free_blocks counts them as free. A block is
 * published only once it is full and written, and never written again (a slot writes past
 * what it holds), so a hit reads what a cold run would have written -- bit for bit with
 * f32/bf16/f16 KV; an fp8 block's scale grows with the writes that filled it, so one filled
 * over several steps may hold other codes than a one-shot prefill's (within the fp8 write
 * bound of lh_k_paged_kv_write). */
typedef struct lh_kv_prefix_stats {
    int64_t lookups;          /* attach calls */
    int64_t hit_blocks, hit_tokens;
    int64_t published_blocks; /* blocks made shareable */
    int64_t evicted_blocks;   /* cached blocks taken for new contents */
    int64_t cached_blocks;    /* hashed now (held or idle) */
    int64_t idle_cached_blocks; /* hashed, held by no slot */
} lh_kv_prefix_stats;

/* Switches prefix caching on (before any slot holds a block). Errors: LH_E_USAGE (blocks
 * already handed out), LH_E_NOMEM. */
lh_status lh_kv_cache_enable_prefix(lh_kv_cache *c, lh_err *err);
bool lh_kv_cache_prefix_on(const lh_kv_cache *c);
/* An empty slot takes the cached blocks that hold the longest prefix of tokens[0..n) in whole
 * blocks, leaving at least the last token to compute; returns the tokens they cover (0 when
 * off, the slot holds blocks, or nothing matches). */
int64_t lh_kv_cache_attach_prefix(lh_kv_cache *c, int64_t slot, const int32_t *tokens,
                                  int64_t n);
/* Publishes the slot's full blocks among its first n tokens (tokens[0..n) its sequence, whose
 * KV is written), continuing the chain from what it published or attached before. */
void lh_kv_cache_publish(lh_kv_cache *c, int64_t slot, const int32_t *tokens, int64_t n);
void lh_kv_cache_prefix_stats(const lh_kv_cache *c, lh_kv_prefix_stats *out);

#endif
