/* Private to host/runtime/runner*.c: the runner and the handles the plugin's bind and forward
 * see as opaque types (lh_model.h). */
#ifndef LH_RUNTIME_RUNNER_INTERNAL_H
#define LH_RUNTIME_RUNNER_INTERNAL_H

#include "runner.h"

#include <stdatomic.h>

#include <stdarg.h>

/* A parameter of the tree as the forward blocks read it: a tensor on the runner's device. */
struct lh_weight {
    char *name;  /* "module.param" */
    lh_tensor t;
    /* weight-only quantized (INT8 / INT4 / FP8_E4M3 with a scale param): the scale tensor and
     * its block (lh_k_matmul_scaled); scale_name is the param's full name until it is linked.
     * scale.data NULL for every other weight. */
    lh_tensor scale;
    int64_t block_rows, block_cols;
    char *scale_name;
};

/* One entry of the model's attention-layer table: its backend instance and RoPE table. */
struct lh_attn_ref {
    int64_t index;                 /* position in the table: the KV cache layer */
    const char *module;            /* the attention module's full name (tree-owned) */
    const lh_attention_spec *spec; /* normalized (tree-owned) */
    lh_attn_layer *layer;
    const lh_rope *rope;           /* NULL: no rotary embedding */
};

struct lh_bind {
    lh_runner *r;
    lh_err err; /* err.code: the sticky status */
};

struct lh_fwd {
    lh_runner *r;
    lh_kctx *kctx;
    const lh_attn_step *step;
    const int32_t *tokens;
    const int64_t *out_rows;
    int64_t n_out;
    size_t arena_used;
    int64_t requests;
    char where[128];
    lh_err *err; /* err->code: the sticky status */
};

struct lh_runner {
    const char *arch; /* provider name (registry-owned) */
    const lh_model_ops *ops;
    void *state;      /* the plugin's model state */
    bool bound;       /* bind succeeded: destroy owes the state */
    lh_forward_info info;
    int64_t max_seq_len, max_seqs;
    /* every parameter of the tree, in tree order, and the same sorted by name (for the
     * lookups of bind: a model of tens of thousands of expert weights binds in linear-log
     * time, not quadratic) */
    lh_weight *weights;
    int64_t n_weights;
    lh_weight **by_name;
    /* the attention-layer table, in registration order */
    lh_attn_ref *attn;
    int64_t n_attn;
    lh_rope *ropes; /* distinct RoPE tables */
    int64_t n_ropes;
    const lh_attn_ops *attn_ops;
    bool fused_rope;
    /* the host's paged KV cache (NULL for backends with their own) and per-step tables */
    lh_kv_cache *kv;
    const int32_t **tables; /* [max_seqs] */
    int64_t *table_len, *tokens_after; /* [max_seqs] */
    /* the per-step scratch arena on the context's device */
    void *arena;
    size_t arena_bytes;
    /* logits on the context's device, [logit_rows, vocab] */
    int64_t logit_rows;
    float *logits;
    lh_kctx *kctx; /* borrowed; must outlive the runner */
    lh_device dev;
    /* device copies of the weights (CUDA or LLMHOST_COPY_WEIGHTS), freed with the runner */
    void **wbufs;
    int64_t n_wbufs;
    /* host copies of transposed weights (add_linear_transposed), [out, in] */
    void **tbufs;
    int64_t n_tbufs;
    /* the model's MoE blocks (moe.c) and their working memory on the context's device */
    lh_moe_ref *moes;
    int64_t n_moes;
    void *moe_buf;
    size_t moe_buf_bytes;
    void *moe_host; /* the blocks' host-side routing tables, grown on demand */
    size_t moe_host_bytes;
    /* the MLA layers' working memory on the context's device (attend_mla), reserved with
     * the arena for each step's token count: mla_ws_per_token bytes per token (0: no MLA) */
    size_t mla_ws_per_token;
    void *mla_ws;
    size_t mla_ws_bytes;
    /* row views the plugin's bind made (weight_rows), each allocated once */
    lh_weight **views;
    int64_t n_views;
    int64_t weight_bytes;
    /* a scheduler holds the sequence slots (lh_runner_claim_slots) */
    atomic_bool slots_claimed;
    /* CUDA graphs, one per decode batch size (index n_seqs - 1), created on first use */
    bool graphs;
    lh_k_graph **graph; /* [max_seqs] */
};

/* The weight of that full name, NULL when the tree has none (r->by_name). */
lh_weight *lh_runner_find_weight(const lh_runner *r, const char *name);
/* Builds r->by_name; false on out of memory. */
bool lh_runner_index_weights(lh_runner *r);

/* The full name a bind lookup formats into name[size]; false (bd failed, or fails now with
 * "<what>: a name longer than ...") when there is none. */
bool lh_runner_bind_name(lh_bind *bd, const char *what, char *name, size_t size, const char *fmt,
                         va_list ap);

/* moe.c: the MoE blocks of m, with their weights (after init_weights); their release. */
lh_status lh_runner_init_moe(lh_runner *r, const lh_model *m, lh_err *err);
void lh_runner_free_moe(lh_runner *r);

/* "cpu" or "cuda:N" into buf. */
const char *lh_runner_device_name(lh_device dev, char *buf, size_t n);
/* A contiguous view on `dev`. */
lh_tensor lh_runner_view(lh_device dev, lh_dtype dt, void *data, int ndim, const int64_t *shape);

#endif
