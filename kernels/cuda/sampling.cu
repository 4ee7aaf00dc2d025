/* Sampling on the GPU (lh_kernels.h "sampling"): the CUDA twin of kernels/cpu/sampling.c.
 *
 * Kernels, in queue order:
 *   prep  (one CTA per row): NaN/+inf check, repetition penalty, temperature into a working copy
 *         w [M, V]; row max, live count; greedy argmax (greedy stops here);
 *   keys  (2-D grid over a chunk of rows): (row, logit descending) sort keys and id values;
 *         cub::DeviceRadixSort (stable, so equal logits keep ascending ids: the CPU's order);
 *   cut   (one CTA per row of the chunk): top-k and top-p on the sorted row, leaving the last
 *         survivor (logit, id) -- the survivors are exactly a prefix of the sorted order;
 *   draw  (one CTA per row): survivors in id order (prefix test, then min-p), their softmax
 *         scanned in double, probs, and the inversion at u.
 * The uniform numbers are computed on the host with lh_k_rng_uniform (bit-identical to the CPU)
 * and staged. Sampling always downloads its row results, so it never runs inside a capture. */
#include "cuda_rt.h"

#include <cub/cub.cuh>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per-row scan kernels: 512 threads x 8 consecutive items per tile keeps the block scans few
 * (one per 4096 items) and the per-thread accumulation sequential, as on the CPU. */
static constexpr int NT = 512;
static constexpr int ITEMS = 8;
static constexpr int TILE = NT * ITEMS;
static constexpr int NW = NT / 32;
/* keys kernel */
static constexpr int KEY_NT = 256;
/* Sort at most this many (key, id) pairs per CUB call (24 bytes each): bounds the scratch for
 * large batches; a row is never split. */
static constexpr int64_t SORT_CHUNK = (int64_t)1 << 23;

using BScan = cub::BlockScan<double, NT>;

/* One row's state on the device; the head (code, out, bad_id) is what the host reads back. */
struct smp_row_state {
    int32_t code;    /* 0 or LH_SAMPLE_* */
    int32_t out;     /* chosen id */
    int64_t bad_id;  /* LH_SAMPLE_BAD_LOGIT: the logit's id; else -1 */
    float wmax;      /* max of the processed logits */
    int32_t live;    /* processed logits > -inf */
    float w_last;    /* top-k / top-p: the last survivor in sorted order ... */
    int32_t id_last; /* ... and its id; -1: no cut */
};

struct smp_prep_args {
    const float *x;       /* [M, V] */
    float *w;             /* [M, V], or NULL (greedy without penalty) */
    smp_row_state *rs;        /* [M] */
    const int64_t *hoff;  /* [M + 1] offsets into hid, or NULL (no penalty) */
    const int32_t *hid;
    int64_t V;
    float temperature;
    float penalty;
    int greedy;
};

struct smp_keys_args {
    const float *w;    /* the chunk's first row */
    uint64_t *keys;    /* [rows * V] */
    int32_t *vals;     /* [rows * V] */
    int64_t V;
};

struct smp_cut_args {
    const uint64_t *keys; /* sorted, [rows * V] */
    const int32_t *vals;
    smp_row_state *rs;        /* the chunk's first row */
    int64_t V;
    int64_t top_k;        /* 0: off */
    int top_p;            /* top-p on */
    double limit;         /* 1 - top_p */
};

struct smp_draw_args {
    const float *w;       /* [M, V] (NULL when greedy) */
    float *probs;         /* [M, V] or NULL */
    smp_row_state *rs;
    const double *u;      /* [M] or NULL (no draw) */
    int64_t V;
    int greedy;
    int min_p_on;
    double min_p;
};

/* ---- block helpers ------------------------------------------------------------------------- */

/* Every thread gets the result. sh holds NW values; the leading barrier lets calls follow each
 * other without a barrier in between. */
template <class T, class Op>
static __device__ __forceinline__ T block_all_reduce(T v, Op op, T *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    T r = sh[0];
    for (int i = 1; i < NW; i++)
        r = op(r, sh[i]);
    return r;
}

struct smp_op_min64 {
    __device__ int64_t operator()(int64_t a, int64_t b) const { return b < a ? b : a; }
};
struct smp_op_max64 {
    __device__ int64_t operator()(int64_t a, int64_t b) const { return b > a ? b : a; }
};
struct smp_op_sum64 {
    __device__ int64_t operator()(int64_t a, int64_t b) const { return a + b; }
};
/* NaN never wins (a NaN row has failed already, its values are unused) */
struct smp_op_maxf {
    __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};
struct smp_op_sumd {
    __device__ double operator()(double a, double b) const { return a + b; }
};

/* v[k] (this thread's ITEMS consecutive items of the tile) become their inclusive running sums
 * on top of carry; carry moves past the tile. The sum at the last item of the tile becomes the
 * next carry exactly, so the final carry equals the running sum at the last item. */
static __device__ __forceinline__ void tile_cumsum(double (&v)[ITEMS], double &carry,
                                                   BScan::TempStorage &ts, double *sh_carry)
{
    double tsum = 0.0;
#pragma unroll
    for (int k = 0; k < ITEMS; k++)
        tsum += v[k];
    double excl;
    BScan(ts).ExclusiveSum(tsum, excl);
    double s = carry + excl;
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        s += v[k];
        v[k] = s;
    }
    if (threadIdx.x == NT - 1)
        *sh_carry = s;
    __syncthreads();
    carry = *sh_carry;
    __syncthreads(); /* ts and sh_carry are reused by the next tile */
}

/* f32 operations as the CPU does them (no contraction, IEEE rounding) */
static __device__ __forceinline__ float penalize(float l, float penalty)
{
    return l > 0.0f ? __fdiv_rn(l, penalty) : __fmul_rn(l, penalty);
}

/* Sort key order: float bits made monotone as unsigned (-0 folded into +0, as the CPU's float
 * comparison treats them), inverted so that larger logits come first. */
static __device__ __forceinline__ uint32_t desc_key(float f)
{
    uint32_t b = __float_as_uint(f);
    if ((b & 0x7fffffffu) == 0)
        b = 0;
    const uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ~ord;
}

static __device__ __forceinline__ float key_value(uint64_t key)
{
    const uint32_t ord = ~(uint32_t)key;
    return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7fffffffu) : ~ord);
}

/* ---- kernels ------------------------------------------------------------------------------- */

static __global__ void __launch_bounds__(NT) prep_kernel(smp_prep_args a)
{
    __shared__ int64_t sh_i[NW];
    __shared__ float sh_f[NW];
    const int64_t r = blockIdx.x, V = a.V;
    const float *x = a.x + r * V;
    float *w = a.w ? a.w + r * V : nullptr;
    const bool tdiv = !a.greedy && a.temperature != 1.0f;

    int64_t bad = V;
    /* this thread's best (value, lowest id); the id sentinel V loses every tie */
    float bv = -INFINITY;
    int64_t bi = V;
    for (int64_t i = threadIdx.x; i < V; i += NT) {
        const float xi = x[i];
        if (bad == V && (isnan(xi) || xi == INFINITY))
            bad = i; /* ids rise along the loop: the thread's first is its lowest */
        if (w) {
            w[i] = tdiv ? __fdiv_rn(xi, a.temperature) : xi;
        } else if (xi > bv || (xi == bv && i < bi)) {
            bv = xi;
            bi = i;
        }
    }
    if (w && a.hid) {
        /* The penalty reads the original logit, so a repeated id writes the same value again
         * (once per distinct id, as the API says); the barrier orders it after the copy. */
        __syncthreads();
        const float pen = a.penalty;
        for (int64_t h = a.hoff[r] + threadIdx.x; h < a.hoff[r + 1]; h += NT) {
            const int32_t id = a.hid[h];
            const float v = penalize(x[id], pen);
            w[id] = tdiv ? __fdiv_rn(v, a.temperature) : v;
        }
    }
    int64_t live = 0;
    float wmax = -INFINITY;
    if (w) {
        __syncthreads(); /* the block's global writes above are visible to the whole block */
        for (int64_t i = threadIdx.x; i < V; i += NT) {
            const float wi = w[i];
            live += wi > -INFINITY;
            if (wi > wmax)
                wmax = wi;
            if (a.greedy && (wi > bv || (wi == bv && i < bi))) {
                bv = wi;
                bi = i;
            }
        }
    }
    bad = block_all_reduce(bad, smp_op_min64(), sh_i);
    int64_t best = 0;
    if (a.greedy) {
        const float gmax = block_all_reduce(bv, smp_op_maxf(), sh_f);
        /* all -inf: every thread that saw an element holds -inf, the lowest id is 0 */
        best = block_all_reduce(bv == gmax ? bi : V, smp_op_min64(), sh_i);
        if (best >= V)
            best = 0;
    } else {
        live = block_all_reduce(live, smp_op_sum64(), sh_i);
        wmax = block_all_reduce(wmax, smp_op_maxf(), sh_f);
    }
    if (threadIdx.x == 0) {
        smp_row_state s;
        s.code = 0;
        s.out = (int32_t)best;
        s.bad_id = -1;
        s.wmax = wmax;
        s.live = (int32_t)live;
        s.w_last = 0.0f;
        s.id_last = -1;
        if (bad < V) {
            s.code = LH_SAMPLE_BAD_LOGIT;
            s.bad_id = bad;
        } else if (!a.greedy) {
            if (!(wmax > -INFINITY))
                s.code = LH_SAMPLE_NO_FINITE;
            else if (wmax == INFINITY) /* a finite logit / a tiny temperature overflowed */
                s.code = LH_SAMPLE_OVERFLOW;
        }
        a.rs[r] = s;
    }
}

static __global__ void __launch_bounds__(KEY_NT) keys_kernel(smp_keys_args a)
{
    const int64_t i = (int64_t)blockIdx.x * KEY_NT + threadIdx.x;
    if (i >= a.V)
        return;
    const int64_t g = (int64_t)blockIdx.y * a.V + i;
    a.keys[g] = ((uint64_t)blockIdx.y << 32) | desc_key(a.w[g]);
    a.vals[g] = (int32_t)i;
}

static __global__ void __launch_bounds__(NT) cut_kernel(smp_cut_args a)
{
    __shared__ BScan::TempStorage ts;
    __shared__ double sh_carry;
    __shared__ int64_t sh_i[NW];
    __shared__ double sh_d[NW];
    const int64_t r = blockIdx.x, V = a.V;
    smp_row_state *rs = a.rs + r;
    if (rs->code != 0)
        return;
    const uint64_t *key = a.keys + r * V;
    const int32_t *val = a.vals + r * V;
    const double wmax = (double)rs->wmax;

    /* The live logits are sorted positions [0, live) (-inf sorts last). Top-k keeps every
     * position whose logit is >= the k-th largest: a prefix, ties with the k-th included. */
    int64_t n = rs->live;
    if (a.top_k > 0) {
        const float thr = key_value(key[a.top_k - 1]);
        int64_t first = V;
        for (int64_t i = a.top_k + threadIdx.x; i < V; i += NT)
            if (key_value(key[i]) < thr) {
                first = i;
                break;
            }
        first = block_all_reduce(first, smp_op_min64(), sh_i);
        if (first < n)
            n = first;
    }

    /* Top-p: keep positions [0, K] where K is the largest position >= 1 whose ascending mass
     * (sum of the probabilities from position K to n - 1) exceeds 1 - p; the CPU walks up from
     * the least likely and stops there. Scanned backwards; the first tile holding such a
     * position holds the largest one. */
    int64_t c = n;
    if (a.top_p && n > 1) {
        double part = 0.0;
        for (int64_t i = threadIdx.x; i < n; i += NT)
            part += exp((double)key_value(key[i]) - wmax);
        const double total = block_all_reduce(part, smp_op_sumd(), sh_d);
        double carry = 0.0;
        int64_t K = 0;
        for (int64_t base = 0; base < n - 1; base += TILE) {
            double v[ITEMS];
#pragma unroll
            for (int k = 0; k < ITEMS; k++) {
                const int64_t p = n - 1 - (base + (int64_t)threadIdx.x * ITEMS + k);
                v[k] = p >= 1 ? exp((double)key_value(key[p]) - wmax) / total : 0.0;
            }
            tile_cumsum(v, carry, ts, &sh_carry);
            int64_t mine = 0;
#pragma unroll
            for (int k = 0; k < ITEMS; k++) {
                const int64_t p = n - 1 - (base + (int64_t)threadIdx.x * ITEMS + k);
                if (p >= 1 && v[k] > a.limit && p > mine)
                    mine = p;
            }
            if (__syncthreads_or(mine > 0)) {
                K = block_all_reduce(mine, smp_op_max64(), sh_i);
                break;
            }
        }
        c = K + 1;
    }
    if (threadIdx.x == 0) {
        rs->w_last = key_value(key[c - 1]);
        rs->id_last = val[c - 1];
    }
}

/* Survivor weight exp(w - max) of id i, or -1 for a removed token (a survivor's weight may
 * underflow to 0 and must still count as a survivor for the last-survivor rule). */
static __device__ __forceinline__ double weight(const float *w, int64_t i, double wmax,
                                                float w_last, int32_t id_last, int min_p_on,
                                                double min_p)
{
    const float wi = w[i];
    if (!(wi > -INFINITY))
        return -1.0;
    if (id_last >= 0 && !(wi > w_last || (wi == w_last && i <= id_last)))
        return -1.0;
    const double e = exp((double)wi - wmax);
    if (min_p_on && e < min_p)
        return -1.0;
    return e;
}

static __global__ void __launch_bounds__(NT) draw_kernel(smp_draw_args a)
{
    __shared__ BScan::TempStorage ts;
    __shared__ double sh_carry;
    __shared__ int64_t sh_i[NW];
    const int64_t r = blockIdx.x, V = a.V;
    smp_row_state *rs = a.rs + r;
    if (rs->code != 0)
        return;
    float *pr = a.probs ? a.probs + r * V : nullptr;
    if (a.greedy) {
        const int64_t best = rs->out;
        for (int64_t i = threadIdx.x; i < V; i += NT)
            pr[i] = i == best ? 1.0f : 0.0f;
        return;
    }
    const float *w = a.w + r * V;
    const double wmax = (double)rs->wmax;
    const float w_last = rs->w_last;
    const int32_t id_last = rs->id_last;

    /* pass 1: the survivors' total in id order (the same running sums as pass 3) */
    double carry = 0.0;
    int64_t last = -1;
    for (int64_t base = 0; base < V; base += TILE) {
        double v[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; k++) {
            const int64_t i = base + (int64_t)threadIdx.x * ITEMS + k;
            double e = i < V ? weight(w, i, wmax, w_last, id_last, a.min_p_on, a.min_p) : -1.0;
            if (e >= 0.0)
                last = i;
            v[k] = e >= 0.0 ? e : 0.0;
        }
        tile_cumsum(v, carry, ts, &sh_carry);
    }
    const double total = carry;
    last = block_all_reduce(last, smp_op_max64(), sh_i);

    /* pass 2: the renormalized distribution */
    if (pr)
        for (int64_t i = threadIdx.x; i < V; i += NT) {
            const double e = weight(w, i, wmax, w_last, id_last, a.min_p_on, a.min_p);
            pr[i] = e >= 0.0 ? (float)(e / total) : 0.0f;
        }

    /* pass 3: the first survivor whose running sum exceeds u * total; none (u * total rounded
     * up to total): the last survivor, as the CPU's loop ends there */
    if (a.u) {
        const double target = a.u[r] * total;
        int64_t pick = last;
        carry = 0.0;
        for (int64_t base = 0; base < V; base += TILE) {
            double v[ITEMS];
            bool surv[ITEMS];
#pragma unroll
            for (int k = 0; k < ITEMS; k++) {
                const int64_t i = base + (int64_t)threadIdx.x * ITEMS + k;
                double e = i < V ? weight(w, i, wmax, w_last, id_last, a.min_p_on, a.min_p)
                                 : -1.0;
                surv[k] = e >= 0.0;
                v[k] = e >= 0.0 ? e : 0.0;
            }
            tile_cumsum(v, carry, ts, &sh_carry);
            int64_t mine = V;
#pragma unroll
            for (int k = 0; k < ITEMS; k++) {
                const int64_t i = base + (int64_t)threadIdx.x * ITEMS + k;
                if (surv[k] && v[k] > target && i < mine)
                    mine = i;
            }
            if (__syncthreads_or(mine < V)) {
                pick = block_all_reduce(mine, smp_op_min64(), sh_i);
                break;
            }
        }
        if (threadIdx.x == 0)
            rs->out = (int32_t)pick;
    }
}

/* ---- host ---------------------------------------------------------------------------------- */

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static int bits_for(int64_t n) /* bits to hold values in [0, n] */
{
    int b = 0;
    while (b < 63 && (n >> b) != 0)
        b++;
    return b;
}

static lh_status host_nomem(lh_kctx *ctx, const char *what, int line)
{
    return lh_kerr(ctx, LH_E_NOMEM, "lh_k_sample: out of host memory at %s:%d (%s)", __FILE__,
                   line, what);
}

/* The radix sort of one chunk (rows * V pairs), gated like any non-launch operation. */
struct smp_sort_rec {
    const void *k0, *k1, *v0, *v1, *temp;
    size_t temp_bytes;
    int n, end_bit;
};

static lh_status sort_chunk(lh_kctx *ctx, void *temp, size_t temp_bytes, uint64_t *k0,
                            uint64_t *k1, int32_t *v0, int32_t *v1, int n, int end_bit,
                            const uint64_t **keys_out, const int32_t **vals_out)
{
    cub::DoubleBuffer<uint64_t> dk(k0, k1);
    cub::DoubleBuffer<int32_t> dv(v0, v1);
    smp_sort_rec rec;
    memset(&rec, 0, sizeof rec);
    rec.k0 = k0;
    rec.k1 = k1;
    rec.v0 = v0;
    rec.v1 = v1;
    rec.temp = temp;
    rec.temp_bytes = temp_bytes;
    rec.n = n;
    rec.end_bit = end_bit;
    if (lh_cu_record(ctx, "cub::DeviceRadixSort::SortPairs(sampling)", &rec, sizeof rec)) {
        size_t tb = temp_bytes;
        LH_CU_CHECK(ctx, cub::DeviceRadixSort::SortPairs(temp, tb, dk, dv, n, 0, end_bit,
                                                         lh_cu_stream(ctx)));
    }
    *keys_out = dk.Current();
    *vals_out = dv.Current();
    return LH_OK;
}

static lh_status sort_temp_bytes(lh_kctx *ctx, int n, int end_bit, size_t *bytes)
{
    cub::DoubleBuffer<uint64_t> dk(nullptr, nullptr);
    cub::DoubleBuffer<int32_t> dv(nullptr, nullptr);
    size_t tb = 0;
    LH_CU_CHECK(ctx, cub::DeviceRadixSort::SortPairs(nullptr, tb, dk, dv, n, 0, end_bit,
                                                     lh_cu_stream(ctx)));
    if (tb > *bytes)
        *bytes = tb;
    return LH_OK;
}

extern "C" lh_status lh_cuda_sample(lh_kctx *ctx, const lh_sample_job *j, int64_t *bad_row,
                                    int *code, int64_t *bad_id)
{
    const char *fn = j->out ? "lh_k_sample" : "lh_k_sampling_probs";
    const lh_sampling_params *p = j->params;
    const int64_t M = j->M, V = j->V;
    *code = 0;
    if (M == 0)
        return LH_OK;
    /* The row results come back to the host, which a capture or dry run cannot do: refuse
     * before queuing anything (lh_cu_download words the error). */
    if (lh_cu_mode_of(ctx) != LH_CU_EAGER)
        return lh_cu_download(ctx, fn, nullptr, nullptr, 0);

    const bool greedy = p->temperature == 0.0f;
    const bool draw = j->out && !greedy;
    const int64_t top_k = !greedy && p->top_k > 0 && p->top_k < V ? p->top_k : 0;
    const bool top_p = !greedy && p->top_p < 1.0f;
    const bool sort = top_k > 0 || top_p;
    int64_t hist_total = 0;
    if (p->repetition_penalty != 1.0f && j->history_len)
        for (int64_t r = 0; r < M; r++)
            hist_total += j->history_len[r];
    const bool penalty = hist_total > 0;
    const bool need_w = !greedy || penalty;

    /* ---- host inputs: u [M] doubles, history offsets [M + 1], history ids, staged as one
     * block (a later stage call may recycle the staging buffer before earlier data is used) */
    const size_t u_bytes = draw ? (size_t)M * sizeof(double) : 0;
    const size_t off_bytes = penalty ? (size_t)(M + 1) * sizeof(int64_t) : 0;
    const size_t id_bytes = penalty ? (size_t)hist_total * sizeof(int32_t) : 0;
    const size_t in_bytes = u_bytes + off_bytes + id_bytes;
    const double *d_u = nullptr;
    const int64_t *d_hoff = nullptr;
    const int32_t *d_hid = nullptr;
    if (in_bytes) {
        unsigned char *h = (unsigned char *)malloc(in_bytes);
        if (!h)
            return host_nomem(ctx, "malloc (sampling inputs)", __LINE__);
        if (draw) {
            double *u = (double *)h;
            for (int64_t r = 0; r < M; r++)
                u[r] = lh_cu_rng_uniform(j->seed, j->stream[r], j->step[r]);
        }
        if (penalty) {
            int64_t *off = (int64_t *)(h + u_bytes);
            int32_t *ids = (int32_t *)(h + u_bytes + off_bytes);
            off[0] = 0;
            for (int64_t r = 0; r < M; r++) {
                const int64_t n = j->history_len[r];
                if (n > 0)
                    memcpy(ids + off[r], j->history[r], (size_t)n * sizeof(int32_t));
                off[r + 1] = off[r] + n;
            }
        }
        lh_status st = LH_OK;
        unsigned char *d = (unsigned char *)lh_cu_stage(ctx, h, in_bytes, &st);
        free(h);
        if (!d)
            return st;
        if (draw)
            d_u = (const double *)d;
        if (penalty) {
            d_hoff = (const int64_t *)(d + u_bytes);
            d_hid = (const int32_t *)(d + u_bytes + off_bytes);
        }
    }

    /* ---- device scratch: row states, w, and for top-k / top-p the sort buffers */
    int64_t chunk_rows = 0;
    size_t sort_temp = 0;
    if (sort) {
        /* CUB sizes and launches for the current device */
        LH_CU_CHECK(ctx, cudaSetDevice(lh_cu_device_index(ctx)));
        chunk_rows = SORT_CHUNK / V;
        if (chunk_rows > M)
            chunk_rows = M;
        if (chunk_rows > 65535) /* gridDim.y of the keys kernel */
            chunk_rows = 65535;
        if (chunk_rows < 1)
            chunk_rows = 1;
        /* every chunk shape that will run: the full one and the remainder */
        lh_status st = sort_temp_bytes(ctx, (int)(chunk_rows * V), 32 + bits_for(chunk_rows - 1),
                                       &sort_temp);
        if (st != LH_OK)
            return st;
        const int64_t rem = M % chunk_rows;
        if (rem) {
            st = sort_temp_bytes(ctx, (int)(rem * V), 32 + bits_for(rem - 1), &sort_temp);
            if (st != LH_OK)
                return st;
        }
    }
    const size_t chunk_n = (size_t)(chunk_rows * V);
    const size_t rs_bytes = align256((size_t)M * sizeof(smp_row_state));
    const size_t w_bytes = need_w ? align256((size_t)(M * V) * sizeof(float)) : 0;
    const size_t key_bytes = align256(chunk_n * sizeof(uint64_t));
    const size_t val_bytes = align256(chunk_n * sizeof(int32_t));
    const size_t sort_bytes = sort ? 2 * key_bytes + 2 * val_bytes + align256(sort_temp) : 0;
    lh_status st = LH_OK;
    unsigned char *scr = (unsigned char *)lh_cu_scratch(ctx, rs_bytes + w_bytes + sort_bytes,
                                                        &st);
    if (!scr)
        return st;
    smp_row_state *d_rs = (smp_row_state *)scr;
    float *d_w = need_w ? (float *)(scr + rs_bytes) : nullptr;
    unsigned char *sb = scr + rs_bytes + w_bytes;
    uint64_t *k0 = (uint64_t *)sb, *k1 = (uint64_t *)(sb + key_bytes);
    int32_t *v0 = (int32_t *)(sb + 2 * key_bytes);
    int32_t *v1 = (int32_t *)(sb + 2 * key_bytes + val_bytes);
    void *temp = sb + 2 * key_bytes + 2 * val_bytes;

    /* ---- 1. penalty, temperature, checks (greedy: the argmax) */
    smp_prep_args pa;
    memset(&pa, 0, sizeof pa); /* no stray padding bytes (cuda_rt.h rule 1) */
    pa.x = j->logits;
    pa.w = d_w;
    pa.rs = d_rs;
    pa.hoff = d_hoff;
    pa.hid = d_hid;
    pa.V = V;
    pa.temperature = p->temperature;
    pa.penalty = p->repetition_penalty;
    pa.greedy = greedy;
    st = LH_CU_LAUNCH(ctx, prep_kernel, dim3((unsigned)M), dim3(NT), 0, pa);
    if (st != LH_OK)
        return st;

    /* ---- 2. top-k / top-p on the sorted rows, chunk by chunk */
    if (sort)
        for (int64_t r0 = 0; r0 < M; r0 += chunk_rows) {
            const int64_t rows = M - r0 < chunk_rows ? M - r0 : chunk_rows;
            smp_keys_args ka;
            memset(&ka, 0, sizeof ka);
            ka.w = d_w + r0 * V;
            ka.keys = k0;
            ka.vals = v0;
            ka.V = V;
            st = LH_CU_LAUNCH(ctx, keys_kernel, dim3(lh_cu_blocks(V, KEY_NT), (unsigned)rows),
                              dim3(KEY_NT), 0, ka);
            if (st != LH_OK)
                return st;
            const uint64_t *ks = nullptr;
            const int32_t *vs = nullptr;
            st = sort_chunk(ctx, temp, sort_temp, k0, k1, v0, v1, (int)(rows * V),
                            32 + bits_for(rows - 1), &ks, &vs);
            if (st != LH_OK)
                return st;
            smp_cut_args ca;
            memset(&ca, 0, sizeof ca);
            ca.keys = ks;
            ca.vals = vs;
            ca.rs = d_rs + r0;
            ca.V = V;
            ca.top_k = top_k;
            ca.top_p = top_p;
            ca.limit = 1.0 - (double)p->top_p;
            st = LH_CU_LAUNCH(ctx, cut_kernel, dim3((unsigned)rows), dim3(NT), 0, ca);
            if (st != LH_OK)
                return st;
        }

    /* ---- 3. min-p, probs, the draw */
    if (!greedy || j->probs) {
        smp_draw_args da;
        memset(&da, 0, sizeof da);
        da.w = greedy ? nullptr : d_w;
        da.probs = j->probs;
        da.rs = d_rs;
        da.u = d_u;
        da.V = V;
        da.greedy = greedy;
        da.min_p_on = p->min_p > 0.0f;
        da.min_p = (double)p->min_p;
        st = LH_CU_LAUNCH(ctx, draw_kernel, dim3((unsigned)M), dim3(NT), 0, da);
        if (st != LH_OK)
            return st;
    }

    /* ---- 4. results */
    smp_row_state *h_rs = (smp_row_state *)malloc((size_t)M * sizeof(smp_row_state));
    if (!h_rs)
        return host_nomem(ctx, "malloc (sampling results)", __LINE__);
    st = lh_cu_download(ctx, fn, h_rs, d_rs, (size_t)M * sizeof(smp_row_state));
    if (st != LH_OK) {
        free(h_rs);
        return st;
    }
    st = LH_OK;
    for (int64_t r = 0; r < M; r++) {
        if (h_rs[r].code == 0) {
            if (j->out)
                j->out[r] = h_rs[r].out;
        } else if (st == LH_OK) {
            *bad_row = r;
            *code = h_rs[r].code;
            *bad_id = h_rs[r].bad_id;
            st = LH_E_USAGE;
        }
    }
    free(h_rs);
    return st;
}
