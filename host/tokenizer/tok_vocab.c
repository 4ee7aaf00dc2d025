/* The tokenizer's lookup structures: open-addressing hash maps (token -> id for the vocab and
 * the added tokens, id pair -> merge for BPE) sized once at loading, and growable arrays. */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* A power of two with room for expect keys at a load of at most one half. */
static size_t map_cap(size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2 + 2)
        cap *= 2;
    return cap;
}

void *grow_array(void *v, size_t *cap, size_t elem_size, size_t first, bool *oom)
{
    size_t c = *cap ? *cap * 2 : first;
    void *g = realloc(v, c * elem_size);
    if (!g) {
        *oom = true;
        return v;
    }
    *cap = c;
    return g;
}

bool strmap_init(strmap *m, size_t expect)
{
    m->cap = map_cap(expect);
    m->n = 0;
    m->e = calloc(m->cap, sizeof *m->e);
    return m->e != NULL;
}

void strmap_free(strmap *m) { free(m->e); }

/* The slot of k[0..n): where it is, or the empty slot where it would go. */
static size_t str_slot(const strmap *m, const char *k, size_t n)
{
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    while (m->e[i].key && !(m->e[i].len == n && memcmp(m->e[i].key, k, n) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

int32_t strmap_get(const strmap *m, const char *k, size_t n)
{
    if (!m->cap)
        return -1;
    const struct str_entry *e = &m->e[str_slot(m, k, n)];
    return e->key ? e->val : -1;
}

void strmap_put(strmap *m, const char *k, size_t n, int32_t v)
{
    struct str_entry *e = &m->e[str_slot(m, k, n)];
    if (!e->key) {
        e->key = k;
        e->len = n;
        m->n++;
    }
    e->val = v;
}

bool pairmap_init(pairmap *m, size_t expect)
{
    m->cap = map_cap(expect);
    m->e = calloc(m->cap, sizeof *m->e);
    return m->e != NULL;
}

void pairmap_free(pairmap *m) { free(m->e); }

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static size_t pair_slot(const pairmap *m, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (m->cap - 1);
    while (m->e[i].key && m->e[i].key != key + 1)
        i = (i + 1) & (m->cap - 1);
    return i;
}

void pairmap_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    uint64_t key = pair_key(a, b);
    m->e[pair_slot(m, key)] = (struct pair_entry){key + 1, rank, merged};
}

bool pairmap_get(const pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
    const struct pair_entry *e = &m->e[pair_slot(m, pair_key(a, b))];
    if (!e->key)
        return false;
    *rank = e->rank;
    *merged = e->merged;
    return true;
}

void ids_push(ids *x, int32_t id)
{
    if (!x->oom && x->n == x->cap)
        x->v = grow_array(x->v, &x->cap, sizeof *x->v, 64, &x->oom);
    if (!x->oom)
        x->v[x->n++] = id;
}
