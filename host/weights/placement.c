/* Weight placement: copying bound parameters out of the file mapping into anonymous memory
 * backed by transparent huge pages. A file mapping is never backed by huge pages, and decode
 * streams every weight once per token, so the TLB reach of 2 MiB pages can matter; whether it
 * does is measured by tools/bench/bench_inference (see docs/benchmarks.md). */
#include "model/tree_internal.h"

#include "core/err.h"
#include "core/log.h"

#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define PARAM_ALIGN ((size_t)64)

static size_t param_bytes(const lh_param *p)
{
    return (size_t)p->bytes;
}

lh_status lh_model_place_weights_huge(lh_model *m, lh_err *err)
{
    if (!m || !m->weights)
        return lh_err_set(err, LH_E_USAGE, "weight placement: the model has no bound weights");
    if (m->weight_region)
        return LH_OK;
    size_t total = 0;
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p))
        if (!p->tied_to && p->data)
            total += (param_bytes(p) + PARAM_ALIGN - 1) / PARAM_ALIGN * PARAM_ALIGN;
    /* over-allocate by one huge page so the start can be aligned to it */
    size_t map_bytes = total + HUGE_PAGE;
    void *raw = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return lh_err_set(err, LH_E_NOMEM, "weight placement: cannot map %zu bytes for the "
                          "weights", map_bytes);
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
    if (madvise(base, total, MADV_HUGEPAGE) != 0)
        lh_log_once("madvise-hugepage", LH_LOG_WARN,
                    "weight placement: madvise(MADV_HUGEPAGE) refused; weights use 4 KiB pages");
    size_t off = 0;
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p)) {
        if (p->tied_to || !p->data)
            continue;
        memcpy(base + off, p->data, param_bytes(p));
        if (p->data_owned)
            free(p->data);
        p->data = base + off;
        p->data_owned = false;
        off += (param_bytes(p) + PARAM_ALIGN - 1) / PARAM_ALIGN * PARAM_ALIGN;
    }
    for (lh_param *p = lh_tree_next_param(m->b, NULL); p; p = lh_tree_next_param(m->b, p))
        if (p->tied_to)
            p->data = p->tied_to->data;
    m->weight_region = raw;
    m->weight_region_bytes = map_bytes;
    lh_log(LH_LOG_DEBUG, "weights placed in %zu bytes of huge-page memory", total);
    return LH_OK;
}

size_t lh_model_weight_region_bytes(const lh_model *m)
{
    return m && m->weight_region ? m->weight_region_bytes : 0;
}
