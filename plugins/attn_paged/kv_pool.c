/* The paged backend's KV block pool (see kv_pool.h). */
#include "kv_pool.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct paged_pool {
    paged_pool_config cfg;
    int64_t kv_heads, head_dim;
    int64_t max_seqs, max_blocks_per_seq;
    size_t elem_bytes;   /* bytes per element */
    size_t block_elems;  /* elements per block, keys or values */
    /* storage of the first `cap` blocks (materialized) */
    unsigned char *k, *v;
    float *k_scale, *v_scale; /* fp8 only */
    int64_t cap;
    /* free materialized blocks, a stack (lowest ids on top after growth) */
    int32_t *free_ids;
    int64_t n_free;
    paged_seq *seqs;
};

static lh_status fail(char *err, size_t n, lh_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static lh_status fail(char *err, size_t n, lh_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return code;
}

static const char *dtype_name(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_F16: return "f16";
    case LH_DTYPE_FP8_E4M3: return "fp8_e4m3";
    default: return "unsupported";
    }
}

void paged_pool_destroy(paged_pool *p)
{
    if (!p)
        return;
    if (p->seqs)
        for (int64_t i = 0; i < p->max_seqs; i++)
            free(p->seqs[i].blocks);
    free(p->seqs);
    free(p->free_ids);
    free(p->k);
    free(p->v);
    free(p->k_scale);
    free(p->v_scale);
    free(p);
}

lh_status paged_pool_create(const paged_pool_config *cfg, int64_t kv_heads, int64_t head_dim,
                            int64_t max_seqs, int64_t max_seq_len, paged_pool **out, char *err,
                            size_t n)
{
    *out = NULL;
    if (cfg->block_size < 1 || cfg->block_size > (1 << 20))
        return fail(err, n, LH_E_USAGE, "block_size %lld is outside [1, %d]",
                    (long long)cfg->block_size, 1 << 20);
    if (cfg->layout != LH_KV_NHD && cfg->layout != LH_KV_HND)
        return fail(err, n, LH_E_USAGE, "KV layout %d is neither NHD nor HND", (int)cfg->layout);
    if (cfg->dtype != LH_DTYPE_F32 && cfg->dtype != LH_DTYPE_BF16 &&
        cfg->dtype != LH_DTYPE_F16 && cfg->dtype != LH_DTYPE_FP8_E4M3)
        return fail(err, n, LH_E_USAGE, "KV dtype %d is not one of f32, bf16, f16, fp8_e4m3",
                    (int)cfg->dtype);
    if (cfg->num_blocks < 1 || cfg->num_blocks > INT32_MAX)
        return fail(err, n, LH_E_USAGE, "num_blocks %lld is outside [1, %d]",
                    (long long)cfg->num_blocks, INT32_MAX);
    if (kv_heads < 1 || head_dim < 1 || max_seqs < 1 || max_seq_len < 1)
        return fail(err, n, LH_E_USAGE, "invalid geometry (kv heads %lld, head_dim %lld, "
                    "max_seqs %lld, max_seq_len %lld)", (long long)kv_heads,
                    (long long)head_dim, (long long)max_seqs, (long long)max_seq_len);
    paged_pool *p = calloc(1, sizeof *p);
    if (!p)
        return fail(err, n, LH_E_NOMEM, "out of memory");
    p->cfg = *cfg;
    p->kv_heads = kv_heads;
    p->head_dim = head_dim;
    p->max_seqs = max_seqs;
    p->max_blocks_per_seq = (max_seq_len + cfg->block_size - 1) / cfg->block_size;
    p->elem_bytes = lh_k_dtype_bits(cfg->dtype) / 8;
    p->block_elems = (size_t)(cfg->block_size * kv_heads * head_dim);
    p->free_ids = malloc((size_t)cfg->num_blocks * sizeof *p->free_ids);
    p->seqs = calloc((size_t)max_seqs, sizeof *p->seqs);
    bool ok = p->free_ids && p->seqs;
    for (int64_t i = 0; ok && i < max_seqs; i++)
        ok = (p->seqs[i].blocks =
                  malloc((size_t)p->max_blocks_per_seq * sizeof *p->seqs[i].blocks)) != NULL;
    if (!ok) {
        paged_pool_destroy(p);
        return fail(err, n, LH_E_NOMEM, "out of memory for the block tables of %lld sequences",
                    (long long)max_seqs);
    }
    *out = p;
    return LH_OK;
}

int64_t paged_pool_total_blocks(const paged_pool *p)
{
    return p->cfg.num_blocks;
}

int64_t paged_pool_free_blocks(const paged_pool *p)
{
    return p->n_free + (p->cfg.num_blocks - p->cap);
}

size_t paged_pool_block_bytes(const paged_pool *p)
{
    size_t b = 2 * p->block_elems * p->elem_bytes;
    if (p->cfg.dtype == LH_DTYPE_FP8_E4M3)
        b += 2 * (size_t)p->kv_heads * sizeof(float);
    return b;
}

static bool grow_array(void **a, size_t bytes)
{
    void *q = realloc(*a, bytes);
    if (!q)
        return false;
    *a = q;
    return true;
}

/* Materializes at least `need` more blocks (need <= num_blocks - cap). */
static lh_status grow(paged_pool *p, int64_t need, char *err, size_t n)
{
    int64_t cap = p->cap ? p->cap * 2 : 16;
    if (cap < p->cap + need)
        cap = p->cap + need;
    if (cap > p->cfg.num_blocks)
        cap = p->cfg.num_blocks;
    size_t bytes = (size_t)cap * p->block_elems * p->elem_bytes;
    bool ok = grow_array((void **)&p->k, bytes) && grow_array((void **)&p->v, bytes);
    if (ok && p->cfg.dtype == LH_DTYPE_FP8_E4M3) {
        size_t sb = (size_t)cap * (size_t)p->kv_heads * sizeof(float);
        ok = grow_array((void **)&p->k_scale, sb) && grow_array((void **)&p->v_scale, sb);
    }
    if (!ok)
        return fail(err, n, LH_E_NOMEM, "out of memory growing the KV pool to %lld blocks "
                    "(%zu bytes)", (long long)cap, (size_t)cap * paged_pool_block_bytes(p));
    /* new ids on the stack, lowest on top */
    for (int64_t id = cap - 1; id >= p->cap; id--)
        p->free_ids[p->n_free++] = (int32_t)id;
    p->cap = cap;
    return LH_OK;
}

lh_status paged_pool_reserve(paged_pool *p, const int64_t *slots, const int64_t *tokens,
                             int64_t n_slots, char *err, size_t n)
{
    const int64_t bs = p->cfg.block_size;
    int64_t missing = 0;
    for (int64_t i = 0; i < n_slots; i++) {
        if (slots[i] < 0 || slots[i] >= p->max_seqs)
            return fail(err, n, LH_E_USAGE, "sequence slot %lld outside [0, %lld)",
                        (long long)slots[i], (long long)p->max_seqs);
        for (int64_t j = 0; j < i; j++)
            if (slots[j] == slots[i])
                return fail(err, n, LH_E_USAGE, "sequence slot %lld appears twice in one step",
                            (long long)slots[i]);
        int64_t want = (tokens[i] + bs - 1) / bs;
        if (tokens[i] < 0 || want > p->max_blocks_per_seq)
            return fail(err, n, LH_E_USAGE, "slot %lld: %lld tokens do not fit %lld blocks of "
                        "%lld", (long long)slots[i], (long long)tokens[i],
                        (long long)p->max_blocks_per_seq, (long long)bs);
        const paged_seq *s = &p->seqs[slots[i]];
        if (want > s->n_blocks)
            missing += want - s->n_blocks;
    }
    if (missing == 0)
        return LH_OK;
    int64_t free_now = paged_pool_free_blocks(p);
    if (missing > free_now)
        return fail(err, n, LH_E_UNSUPPORTED,
                    "out of KV cache blocks: this step needs %lld more block%s of %lld tokens, "
                    "but only %lld of the pool's %lld blocks are free (%s, %lld bytes per "
                    "block); finish or release sequences, or make the pool larger",
                    (long long)missing, missing == 1 ? "" : "s", (long long)bs,
                    (long long)free_now, (long long)p->cfg.num_blocks,
                    dtype_name(p->cfg.dtype), (long long)paged_pool_block_bytes(p));
    if (missing > p->n_free) {
        lh_status st = grow(p, missing - p->n_free, err, n);
        if (st != LH_OK)
            return st;
    }
    for (int64_t i = 0; i < n_slots; i++) {
        paged_seq *s = &p->seqs[slots[i]];
        int64_t want = (tokens[i] + bs - 1) / bs;
        while (s->n_blocks < want)
            s->blocks[s->n_blocks++] = p->free_ids[--p->n_free];
    }
    return LH_OK;
}

void paged_pool_release(paged_pool *p, int64_t slot)
{
    if (slot < 0 || slot >= p->max_seqs)
        return;
    paged_seq *s = &p->seqs[slot];
    /* back in reverse, so the slot's first block is on top and reused first */
    while (s->n_blocks > 0)
        p->free_ids[p->n_free++] = s->blocks[--s->n_blocks];
    s->len = 0;
}

paged_seq *paged_pool_seq(paged_pool *p, int64_t slot)
{
    return slot >= 0 && slot < p->max_seqs ? &p->seqs[slot] : NULL;
}

lh_kv_pages paged_pool_pages(const paged_pool *p)
{
    lh_kv_pages kv;
    memset(&kv, 0, sizeof kv);
    const int64_t nb = p->cap > 0 ? p->cap : 0, bs = p->cfg.block_size;
    int64_t shape[4] = {nb, bs, p->kv_heads, p->head_dim};
    if (p->cfg.layout == LH_KV_HND) {
        shape[1] = p->kv_heads;
        shape[2] = bs;
    }
    kv.layout = p->cfg.layout;
    kv.k = lh_tensor_cpu(p->cfg.dtype, p->k, 4, shape);
    kv.v = lh_tensor_cpu(p->cfg.dtype, p->v, 4, shape);
    if (p->cfg.dtype == LH_DTYPE_FP8_E4M3) {
        int64_t ss[2] = {nb, p->kv_heads};
        kv.k_scale = lh_tensor_cpu(LH_DTYPE_F32, p->k_scale, 2, ss);
        kv.v_scale = lh_tensor_cpu(LH_DTYPE_F32, p->v_scale, 2, ss);
    }
    return kv;
}
