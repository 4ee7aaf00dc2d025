/* The KV cache manager (kv_cache.h). */
#include "kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define REGION_ALIGN 4096u

typedef struct kv_slot {
    int32_t *table;   /* [max_blocks_per_seq] */
    int64_t n_blocks; /* entries in use */
    /* prefix caching: blocks [0, n_published) are hashed or known duplicates; last_key is
     * the chain hash of block n_published - 1 (0 before the first) */
    int64_t n_published;
    uint64_t last_key;
} kv_slot;

/* Prefix caching (lh_kv_cache_enable_prefix): full blocks identified by a hash chain of their
 * token ids, shared by reference between slots, and kept after their last holder leaves until
 * a block is needed (least recently released first). A hit is exact: the block's tokens and
 * its parent's chain hash are compared, so only a 64-bit collision of the parent chain could
 * pass. */
typedef struct prefix_cache {
    int32_t *ref;            /* [num_blocks] slots holding each block */
    uint64_t *key, *parent;  /* [num_blocks] a hashed block's chain hash and its parent's */
    int32_t *tok;            /* [num_blocks * block_size] a hashed block's tokens */
    uint8_t *hashed;         /* [num_blocks] */
    int32_t *prev, *next;    /* [num_blocks] the LRU list of hashed blocks nobody holds */
    int32_t head, tail;      /* oldest, newest (-1: empty) */
    int64_t n_lru;
    int32_t *tab;            /* open addressing on key: block ids, -1 empty, -2 deleted */
    int64_t cap;             /* a power of two, >= 2 x num_blocks */
    lh_kv_prefix_stats stats;
} prefix_cache;

struct lh_kv_cache {
    lh_kv_plan plan;
    int64_t max_blocks_per_seq;
    unsigned char *base; /* the whole pool: mmap'ed, or device memory of kctx */
    size_t mapped;
    lh_kctx *kctx;       /* set when base is device memory (lh_k_alloc) */
    lh_device dev;
    lh_kv_pages *layers; /* [n_layers] */
    int32_t *free_ids;   /* released blocks, a stack (allocated, filled only on release) */
    int64_t n_free;
    int64_t next_fresh;  /* blocks [next_fresh, num_blocks) were never handed out */
    kv_slot *slots; /* [max_seqs] */
    prefix_cache *pc; /* NULL: off */
};

static const char *kv_dtype_name(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_F16: return "f16";
    case LH_DTYPE_FP8_E4M3: return "fp8_e4m3";
    default: return "unsupported";
    }
}

uint64_t lh_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    return found ? (uint64_t)kb * 1024u : 0;
}

/* Bytes of one block of one layer, per part; checked for overflow by the caller's bounds. */
typedef struct part_sizes {
    size_t k, v, k_scale, v_scale, summary; /* summary: one of k_min / k_max */
} part_sizes;

static part_sizes block_parts(const lh_kv_plan *p)
{
    const size_t elems = (size_t)p->block_size * (size_t)p->kv_heads * (size_t)p->head_dim;
    part_sizes s = {
        .k = elems * lh_k_dtype_bits(p->k_dtype) / 8,
        .v = p->latent ? 0 : elems * lh_k_dtype_bits(p->v_dtype) / 8,
        .k_scale = p->k_dtype == LH_DTYPE_FP8_E4M3 ? (size_t)p->kv_heads * sizeof(float) : 0,
        .v_scale = !p->latent && p->v_dtype == LH_DTYPE_FP8_E4M3
                       ? (size_t)p->kv_heads * sizeof(float) : 0,
        .summary = p->summaries ? (size_t)p->kv_heads * (size_t)p->head_dim * sizeof(float) : 0,
    };
    return s;
}

static bool kv_dtype_ok(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 || dt == LH_DTYPE_BF16 || dt == LH_DTYPE_F16 ||
           dt == LH_DTYPE_FP8_E4M3;
}

lh_status lh_kv_plan_compute(const lh_kv_cache_config *kv, int64_t n_layers, int64_t kv_heads,
                             int64_t head_dim, bool summaries, bool latent, int64_t max_seq_len,
                             int64_t max_seqs, const lh_kv_mem_budget *budget, lh_kv_plan *out,
                             lh_err *err)
{
    memset(out, 0, sizeof *out);
    /* bounds that keep every product below in 64 bits */
    if (n_layers < 1 || n_layers > 100000 || kv_heads < 1 || kv_heads > 65536 || head_dim < 1 ||
        head_dim > 65536 || max_seq_len < 1 || max_seq_len > INT32_MAX || max_seqs < 1 ||
        max_seqs > (1 << 20))
        return lh_err_set(err, LH_E_CONFIG, "KV cache: geometry out of range (%lld layers, %lld "
                          "kv heads, head_dim %lld, max_seq_len %lld, max_batch_size %lld)",
                          (long long)n_layers, (long long)kv_heads, (long long)head_dim,
                          (long long)max_seq_len, (long long)max_seqs);
    if (kv->block_size < 1 || kv->block_size > (1 << 20))
        return lh_err_set(err, LH_E_CONFIG, "kv_cache.block_size=%lld must be in [1, %d]",
                          (long long)kv->block_size, 1 << 20);
    lh_kv_plan *p = out;
    p->n_layers = n_layers;
    p->kv_heads = kv_heads;
    p->head_dim = head_dim;
    p->block_size = kv->block_size;
    p->layout = kv->layout == 1 ? LH_KV_HND : LH_KV_NHD;
    p->k_dtype = kv->k_dtype == LH_DTYPE_INVALID ? LH_DTYPE_F32 : kv->k_dtype;
    p->v_dtype = kv->v_dtype == LH_DTYPE_INVALID ? LH_DTYPE_F32 : kv->v_dtype;
    if (!kv_dtype_ok(p->k_dtype) || !kv_dtype_ok(p->v_dtype))
        return lh_err_set(err, LH_E_CONFIG, "kv_cache: dtypes %s / %s; the KV cache holds f32, "
                          "bf16, f16 or fp8_e4m3", kv_dtype_name(p->k_dtype),
                          kv_dtype_name(p->v_dtype));
    if (latent && kv->v_dtype != LH_DTYPE_INVALID && kv->v_dtype != p->k_dtype)
        return lh_err_set(err, LH_E_CONFIG, "kv_cache.v_dtype %s differs from the keys' %s, but "
                          "the model's multi-head latent attention caches one latent that "
                          "serves as keys and values; leave v_dtype unset",
                          kv_dtype_name(kv->v_dtype), kv_dtype_name(p->k_dtype));
    if (latent)
        p->v_dtype = p->k_dtype;
    p->latent = latent;
    p->summaries = summaries;
    p->max_seqs = max_seqs;
    p->max_seq_len = max_seq_len;
    /* the bounds above keep one block of one layer below 2^20 x 2^32 x 2 x 4 bytes (< 2^56);
     * across layers it may not fit: checked */
    const size_t tok_elems = (size_t)kv_heads * (size_t)head_dim;
    const part_sizes s = block_parts(p);
    const size_t layer_block = s.k + s.v + s.k_scale + s.v_scale + 2 * s.summary;
    if (__builtin_mul_overflow((size_t)n_layers, layer_block, &p->block_bytes) ||
        __builtin_mul_overflow((size_t)n_layers * tok_elems,
                               (size_t)(lh_k_dtype_bits(p->k_dtype) +
                                        (latent ? 0 : lh_k_dtype_bits(p->v_dtype))),
                               &p->kv_bytes_per_token))
        return lh_err_set(err, LH_E_CONFIG, "KV cache: one block of %lld tokens over %lld layers "
                          "(%lld kv heads x head_dim %lld) overflows the address space",
                          (long long)p->block_size, (long long)n_layers, (long long)kv_heads,
                          (long long)head_dim);
    p->kv_bytes_per_token /= 8;
    const int64_t per_seq = (max_seq_len + p->block_size - 1) / p->block_size;
    if (kv->max_tokens > 0) {
        p->num_blocks = kv->max_tokens / p->block_size + (kv->max_tokens % p->block_size != 0);
        snprintf(p->sized_by, sizeof p->sized_by, "kv_cache.max_tokens=%lld",
                 (long long)kv->max_tokens);
    } else if (kv->memory_fraction > 0) {
        uint64_t avail = budget ? budget->bytes : lh_mem_available();
        const char *of = budget ? budget->what : "MemAvailable";
        if (avail == 0 && budget)
            return lh_err_set(err, LH_E_CONFIG, "kv_cache.memory_fraction=%g: %s is 0 bytes; "
                              "set kv_cache.max_tokens instead", kv->memory_fraction, of);
        if (avail == 0)
            return lh_err_set(err, LH_E_CONFIG, "kv_cache.memory_fraction=%g: cannot read "
                              "MemAvailable from /proc/meminfo; set kv_cache.max_tokens instead",
                              kv->memory_fraction);
        double bytes = kv->memory_fraction * (double)avail;
        /* per block the manager also keeps a free-list entry and the kernels a few bytes of
         * bookkeeping: counted, so that the fraction is what the pool really costs */
        double blocks = bytes / ((double)p->block_bytes + LH_KV_BLOCK_OVERHEAD);
        p->num_blocks = blocks >= (double)INT32_MAX ? INT32_MAX : (int64_t)blocks;
        snprintf(p->sized_by, sizeof p->sized_by,
                 "kv_cache.memory_fraction=%g of %.90s %llu bytes", kv->memory_fraction, of,
                 (unsigned long long)avail);
    } else {
        p->num_blocks = per_seq * max_seqs;
        snprintf(p->sized_by, sizeof p->sized_by,
                 "max_batch_size %lld x max_seq_len %lld (default)", (long long)max_seqs,
                 (long long)max_seq_len);
    }
    if (p->num_blocks > INT32_MAX)
        return lh_err_set(err, LH_E_CONFIG, "KV cache: %s needs %lld blocks of %lld tokens, more "
                          "than %d; use a larger kv_cache.block_size", p->sized_by,
                          (long long)p->num_blocks, (long long)p->block_size, INT32_MAX);
    if (p->num_blocks < 1)
        return lh_err_set(err, LH_E_CONFIG, "KV cache: %s leaves room for no block of %lld tokens "
                          "(%zu bytes each)", p->sized_by, (long long)p->block_size,
                          p->block_bytes);
    if (__builtin_mul_overflow((size_t)p->num_blocks, p->block_bytes, &p->pool_bytes))
        return lh_err_set(err, LH_E_CONFIG, "KV cache: %lld blocks of %zu bytes overflow the "
                          "address space", (long long)p->num_blocks, p->block_bytes);
    return LH_OK;
}

void lh_kv_cache_free(lh_kv_cache *c)
{
    if (!c)
        return;
    if (c->base && c->kctx)
        lh_k_free(c->kctx, c->base);
    else if (c->base)
        munmap(c->base, c->mapped);
    if (c->slots)
        for (int64_t i = 0; i < c->plan.max_seqs; i++)
            free(c->slots[i].table);
    free(c->slots);
    free(c->free_ids);
    free(c->layers);
    if (c->pc) {
        free(c->pc->ref);
        free(c->pc->key);
        free(c->pc->parent);
        free(c->pc->tok);
        free(c->pc->hashed);
        free(c->pc->prev);
        free(c->pc->next);
        free(c->pc->tab);
        free(c->pc);
    }
    free(c);
}

static size_t align_up(size_t n)
{
    return (n + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
}

/* A contiguous view on the pool's device. */
static lh_tensor pool_view(const lh_kv_cache *c, lh_dtype dt, void *data, int ndim,
                           const int64_t *shape)
{
    lh_tensor t = lh_tensor_cpu(dt, data, ndim, shape);
    t.device = c->dev;
    return t;
}

/* The pool on a device: one allocation, zeroed, so that the kernels never meet stale bits in
 * positions no one wrote yet (the CPU's fresh anonymous pages are zero too). */
static lh_status device_pool(lh_kv_cache *c, lh_kctx *kctx, size_t total, lh_err *err)
{
    const lh_kv_plan *p = &c->plan;
    void *base = NULL;
    lh_status st = lh_k_alloc(kctx, total, &base);
    if (st != LH_OK)
        return lh_err_set(err, st, "cannot allocate the KV cache pool on cuda:%d: %lld blocks x "
                          "%zu bytes = %zu bytes (%s): %s; lower kv_cache.max_tokens, "
                          "max_batch_size or max_seq_len", c->dev.index,
                          (long long)p->num_blocks, p->block_bytes, total, p->sized_by,
                          lh_k_last_error(kctx));
    c->base = base;
    c->mapped = total;
    c->kctx = kctx;
    st = lh_k_memzero(kctx, base, total);
    if (st != LH_OK)
        return lh_err_set(err, st, "clearing the KV cache pool: %s", lh_k_last_error(kctx));
    return LH_OK;
}

lh_status lh_kv_cache_create(const lh_kv_plan *plan, lh_kctx *kctx, lh_kv_cache **out,
                             lh_err *err)
{
    *out = NULL;
    lh_kv_cache *c = calloc(1, sizeof *c);
    if (!c)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    c->plan = *plan;
    c->dev = kctx ? lh_k_ctx_device(kctx) : (lh_device){LH_DEVICE_CPU, 0};
    const lh_kv_plan *p = &c->plan;
    const int64_t nb = p->num_blocks, bs = p->block_size;
    c->max_blocks_per_seq = (p->max_seq_len + bs - 1) / bs;
    c->layers = calloc((size_t)p->n_layers, sizeof *c->layers);
    c->free_ids = malloc((size_t)nb * sizeof *c->free_ids);
    c->slots = calloc((size_t)p->max_seqs, sizeof *c->slots);
    bool ok = c->layers && c->free_ids && c->slots;
    for (int64_t i = 0; ok && i < p->max_seqs; i++)
        ok = (c->slots[i].table = malloc((size_t)c->max_blocks_per_seq * sizeof(int32_t))) != NULL;
    if (!ok) {
        lh_kv_cache_free(c);
        return lh_err_set(err, LH_E_NOMEM, "out of memory for the KV block tables (%lld blocks, "
                          "%lld sequences)", (long long)nb, (long long)p->max_seqs);
    }
    /* one address range: per layer, keys, values, scales, summaries, each region aligned */
    const part_sizes s = block_parts(p);
    const size_t parts[6] = {s.k, s.v, s.k_scale, s.v_scale, s.summary, s.summary};
    size_t total = 0;
    for (int64_t l = 0; l < p->n_layers; l++)
        for (int i = 0; i < 6; i++)
            total += align_up(parts[i] * (size_t)nb);
    if (c->dev.kind != LH_DEVICE_CPU) {
        lh_status st = total ? device_pool(c, kctx, total, err)
                             : lh_err_set(err, LH_E_NOMEM, "KV cache: an empty pool");
        if (st != LH_OK) {
            lh_kv_cache_free(c);
            return st;
        }
    } else {
        void *base = total ? mmap(NULL, total, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                           : MAP_FAILED;
        if (base == MAP_FAILED) {
            lh_kv_cache_free(c);
            return lh_err_set(err, LH_E_NOMEM, "cannot reserve the KV cache pool: %lld blocks x "
                              "%zu bytes = %zu bytes (%s); lower kv_cache.max_tokens or "
                              "memory_fraction", (long long)nb, p->block_bytes, total,
                              p->sized_by);
        }
        c->base = base;
        c->mapped = total;
    }
    int64_t shape[4] = {nb, bs, p->kv_heads, p->head_dim};
    if (p->layout == LH_KV_HND) {
        shape[1] = p->kv_heads;
        shape[2] = bs;
    }
    int64_t sshape[2] = {nb, p->kv_heads}, mshape[3] = {nb, p->kv_heads, p->head_dim};
    unsigned char *at = c->base;
    for (int64_t l = 0; l < p->n_layers; l++) {
        void *ptr[6];
        for (int i = 0; i < 6; i++) {
            ptr[i] = parts[i] ? at : NULL;
            at += align_up(parts[i] * (size_t)nb);
        }
        lh_kv_pages *kv = &c->layers[l];
        kv->layout = p->layout;
        kv->k = pool_view(c, p->k_dtype, ptr[0], 4, shape);
        kv->v = pool_view(c, p->v_dtype, ptr[1], 4, shape);
        if (ptr[2])
            kv->k_scale = pool_view(c, LH_DTYPE_F32, ptr[2], 2, sshape);
        if (ptr[3])
            kv->v_scale = pool_view(c, LH_DTYPE_F32, ptr[3], 2, sshape);
        if (p->latent) { /* one tensor serves as keys and values */
            kv->v = kv->k;
            kv->v_scale = kv->k_scale;
        }
        if (ptr[4]) {
            kv->k_min = pool_view(c, LH_DTYPE_F32, ptr[4], 3, mshape);
            kv->k_max = pool_view(c, LH_DTYPE_F32, ptr[5], 3, mshape);
        }
    }
    *out = c;
    return LH_OK;
}

static void lru_push(prefix_cache *pc, int32_t b)
{
    pc->prev[b] = pc->tail;
    pc->next[b] = -1;
    if (pc->tail >= 0)
        pc->next[pc->tail] = b;
    else
        pc->head = b;
    pc->tail = b;
    pc->n_lru++;
}

static void lru_unlink(prefix_cache *pc, int32_t b)
{
    if (pc->prev[b] >= 0)
        pc->next[pc->prev[b]] = pc->next[b];
    else
        pc->head = pc->next[b];
    if (pc->next[b] >= 0)
        pc->prev[pc->next[b]] = pc->prev[b];
    else
        pc->tail = pc->prev[b];
    pc->n_lru--;
}

static void pc_remove(prefix_cache *pc, int32_t b);

/* A block for a slot (the caller checked one is free): released ones first, then fresh ones,
 * lowest first, then the cached block released longest ago (its hash forgotten). */
static int32_t take_block(lh_kv_cache *c)
{
    int32_t b;
    if (c->n_free)
        b = c->free_ids[--c->n_free];
    else if (c->next_fresh < c->plan.num_blocks)
        b = (int32_t)c->next_fresh++;
    else {
        prefix_cache *pc = c->pc;
        b = pc->head;
        lru_unlink(pc, b);
        pc_remove(pc, b);
        pc->hashed[b] = 0;
        pc->stats.evicted_blocks++;
    }
    if (c->pc)
        c->pc->ref[b] = 1;
    return b;
}

lh_status lh_kv_cache_reserve(lh_kv_cache *c, const int64_t *slots, const int64_t *tokens,
                              int64_t n, lh_err *err)
{
    const lh_kv_plan *p = &c->plan;
    const int64_t bs = p->block_size;
    int64_t missing = 0;
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= p->max_seqs)
            return lh_err_set(err, LH_E_USAGE, "KV cache: sequence slot %lld outside [0, %lld)",
                              (long long)slots[i], (long long)p->max_seqs);
        for (int64_t j = 0; j < i; j++)
            if (slots[j] == slots[i])
                return lh_err_set(err, LH_E_USAGE, "KV cache: sequence slot %lld appears twice "
                                  "in one step", (long long)slots[i]);
        if (tokens[i] < 0 || tokens[i] > p->max_seq_len)
            return lh_err_set(err, LH_E_USAGE, "KV cache: slot %lld: %lld tokens, outside [0, "
                              "max_seq_len %lld]", (long long)slots[i], (long long)tokens[i],
                              (long long)p->max_seq_len);
        const int64_t want = (tokens[i] + bs - 1) / bs, have = c->slots[slots[i]].n_blocks;
        if (want > have)
            missing += want - have;
    }
    const int64_t free_now = lh_kv_cache_free_blocks(c);
    if (missing > free_now)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "out of KV cache blocks: this step needs %lld more block%s of %lld "
                          "tokens, but only %lld of the pool's %lld blocks are free (%s/%s KV, "
                          "%zu bytes per block, pool sized by %s); finish sequences or make the "
                          "pool larger (kv_cache.max_tokens or memory_fraction)",
                          (long long)missing, missing == 1 ? "" : "s", (long long)bs,
                          (long long)free_now, (long long)p->num_blocks,
                          kv_dtype_name(p->k_dtype), kv_dtype_name(p->v_dtype), p->block_bytes,
                          p->sized_by);
    for (int64_t i = 0; i < n; i++) {
        kv_slot *s = &c->slots[slots[i]];
        const int64_t want = (tokens[i] + bs - 1) / bs;
        while (s->n_blocks < want)
            s->table[s->n_blocks++] = take_block(c);
    }
    return LH_OK;
}

void lh_kv_cache_release(lh_kv_cache *c, int64_t slot)
{
    if (!c || slot < 0 || slot >= c->plan.max_seqs)
        return;
    kv_slot *s = &c->slots[slot];
    prefix_cache *pc = c->pc;
    /* in reverse, so the slot's first block is on top and is reused first */
    while (s->n_blocks > 0) {
        const int32_t b = s->table[--s->n_blocks];
        if (pc && --pc->ref[b] > 0)
            continue; /* another slot still reads it */
        if (pc && pc->hashed[b])
            lru_push(pc, b); /* kept for a later prefix hit */
        else
            c->free_ids[c->n_free++] = b;
    }
    s->n_published = 0;
    s->last_key = 0;
}

const int32_t *lh_kv_cache_table(const lh_kv_cache *c, int64_t slot, int64_t *n_blocks)
{
    if (!c || slot < 0 || slot >= c->plan.max_seqs) {
        *n_blocks = 0;
        return NULL;
    }
    *n_blocks = c->slots[slot].n_blocks;
    return c->slots[slot].table;
}

const lh_kv_pages *lh_kv_cache_layer(const lh_kv_cache *c, int64_t layer)
{
    return c && layer >= 0 && layer < c->plan.n_layers ? &c->layers[layer] : NULL;
}

const lh_kv_plan *lh_kv_cache_plan(const lh_kv_cache *c)
{
    return &c->plan;
}

int64_t lh_kv_cache_free_blocks(const lh_kv_cache *c)
{
    return c->n_free + (c->plan.num_blocks - c->next_fresh) + (c->pc ? c->pc->n_lru : 0);
}

lh_status lh_kv_cache_enable_prefix(lh_kv_cache *c, lh_err *err)
{
    if (!c)
        return lh_err_set(err, LH_E_USAGE, "KV cache: NULL cache");
    if (c->pc)
        return LH_OK;
    for (int64_t i = 0; i < c->plan.max_seqs; i++)
        if (c->slots[i].n_blocks)
            return lh_err_set(err, LH_E_USAGE, "KV cache: prefix caching is switched on before "
                              "any slot holds blocks (slot %lld holds %lld)", (long long)i,
                              (long long)c->slots[i].n_blocks);
    const size_t nb = (size_t)c->plan.num_blocks, bs = (size_t)c->plan.block_size;
    prefix_cache *pc = calloc(1, sizeof *pc);
    size_t cap = 16;
    while (cap < 2 * nb)
        cap *= 2;
    if (pc) {
        pc->ref = calloc(nb, sizeof *pc->ref);
        pc->key = malloc(nb * sizeof *pc->key);
        pc->parent = malloc(nb * sizeof *pc->parent);
        pc->tok = bs <= SIZE_MAX / sizeof *pc->tok / (nb ? nb : 1)
                      ? malloc(nb * bs * sizeof *pc->tok) : NULL;
        pc->hashed = calloc(nb, sizeof *pc->hashed);
        pc->prev = malloc(nb * sizeof *pc->prev);
        pc->next = malloc(nb * sizeof *pc->next);
        pc->tab = malloc(cap * sizeof *pc->tab);
    }
    if (!pc || !pc->ref || !pc->key || !pc->parent || !pc->tok || !pc->hashed || !pc->prev ||
        !pc->next || !pc->tab) {
        if (pc) {
            free(pc->ref);
            free(pc->key);
            free(pc->parent);
            free(pc->tok);
            free(pc->hashed);
            free(pc->prev);
            free(pc->next);
            free(pc->tab);
        }
        free(pc);
        return lh_err_set(err, LH_E_NOMEM, "KV cache: out of memory for the prefix cache of "
                          "%zu blocks", nb);
    }
    for (size_t i = 0; i < cap; i++)
        pc->tab[i] = -1;
    pc->cap = (int64_t)cap;
    pc->head = pc->tail = -1;
    /* the blocks handed out before (none: checked) hold no reference */
    c->pc = pc;
    return LH_OK;
}

bool lh_kv_cache_prefix_on(const lh_kv_cache *c)
{
    return c && c->pc;
}

void lh_kv_cache_prefix_stats(const lh_kv_cache *c, lh_kv_prefix_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c || !c->pc)
        return;
    *out = c->pc->stats;
    out->cached_blocks = 0;
    for (int64_t b = 0; b < c->plan.num_blocks; b++)
        out->cached_blocks += c->pc->hashed[b];
    out->idle_cached_blocks = c->pc->n_lru;
}

/* The chain hash of a block of tokens after its parent's (splitmix64 steps over the ids). */
static uint64_t chain_hash(uint64_t parent, const int32_t *tok, int64_t n)
{
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) {
        h += (uint64_t)(uint32_t)tok[i] + 0x9e3779b97f4a7c15ull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return h ? h : 1; /* 0 means "no parent" */
}

/* The hashed block with this key whose parent and tokens match, or -1. */
static int32_t pc_find(const prefix_cache *pc, int64_t bs, uint64_t key, uint64_t parent,
                       const int32_t *tok)
{
    for (int64_t i = (int64_t)(key & (uint64_t)(pc->cap - 1)), probes = 0; probes < pc->cap;
         i = (i + 1) & (pc->cap - 1), probes++) {
        const int32_t b = pc->tab[i];
        if (b == -1)
            return -1;
        if (b >= 0 && pc->key[b] == key && pc->parent[b] == parent &&
            memcmp(pc->tok + (size_t)b * (size_t)bs, tok, (size_t)bs * sizeof *tok) == 0)
            return b;
    }
    return -1;
}

static void pc_insert(prefix_cache *pc, int32_t b)
{
    int64_t i = (int64_t)(pc->key[b] & (uint64_t)(pc->cap - 1));
    while (pc->tab[i] >= 0)
        i = (i + 1) & (pc->cap - 1);
    pc->tab[i] = b;
}

static void pc_remove(prefix_cache *pc, int32_t b)
{
    for (int64_t i = (int64_t)(pc->key[b] & (uint64_t)(pc->cap - 1)), probes = 0;
         probes < pc->cap && pc->tab[i] != -1; i = (i + 1) & (pc->cap - 1), probes++)
        if (pc->tab[i] == b) {
            pc->tab[i] = -2;
            return;
        }
}

int64_t lh_kv_cache_attach_prefix(lh_kv_cache *c, int64_t slot, const int32_t *tokens,
                                  int64_t n)
{
    if (!c || !c->pc || slot < 0 || slot >= c->plan.max_seqs || !tokens || n <= 0)
        return 0;
    kv_slot *s = &c->slots[slot];
    if (s->n_blocks != 0)
        return 0;
    prefix_cache *pc = c->pc;
    const int64_t bs = c->plan.block_size;
    /* at least the last token is computed: its logits are what the request waits for */
    const int64_t max_blocks = (n - 1) / bs;
    uint64_t parent = 0;
    pc->stats.lookups++;
    while (s->n_blocks < max_blocks) {
        const int32_t *t = tokens + s->n_blocks * bs;
        const uint64_t key = chain_hash(parent, t, bs);
        const int32_t b = pc_find(pc, bs, key, parent, t);
        if (b < 0)
            break;
        if (pc->ref[b]++ == 0)
            lru_unlink(pc, b);
        s->table[s->n_blocks++] = b;
        parent = key;
    }
    s->n_published = s->n_blocks;
    s->last_key = parent;
    pc->stats.hit_blocks += s->n_blocks;
    pc->stats.hit_tokens += s->n_blocks * bs;
    return s->n_blocks * bs;
}

void lh_kv_cache_publish(lh_kv_cache *c, int64_t slot, const int32_t *tokens, int64_t n)
{
    if (!c || !c->pc || slot < 0 || slot >= c->plan.max_seqs || !tokens)
        return;
    kv_slot *s = &c->slots[slot];
    prefix_cache *pc = c->pc;
    const int64_t bs = c->plan.block_size;
    int64_t full = n / bs;
    if (full > s->n_blocks)
        full = s->n_blocks;
    for (; s->n_published < full; s->n_published++) {
        const int32_t *t = tokens + s->n_published * bs;
        const uint64_t key = chain_hash(s->last_key, t, bs);
        const int32_t b = s->table[s->n_published];
        /* a block of the same content another slot published first stays private */
        if (!pc->hashed[b] && pc_find(pc, bs, key, s->last_key, t) < 0) {
            pc->hashed[b] = 1;
            pc->key[b] = key;
            pc->parent[b] = s->last_key;
            memcpy(pc->tok + (size_t)b * (size_t)bs, t, (size_t)bs * sizeof *t);
            pc_insert(pc, b);
            pc->stats.published_blocks++;
        }
        s->last_key = key;
    }
}
