/* bench_inference: CPU inference benchmark (not a test).
 *
 * On a random-weight model of SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads, 3 KV
 * heads, intermediate 1536, vocab 49152, tied), written to a temporary directory as f32 and as
 * bf16 safetensors, it measures for 1 and 2 threads and both weight placements (zero-copy
 * mmap of the file, and a copy in anonymous memory with transparent huge pages):
 *   load time, prefill tok/s on a 512-token prompt, decode tok/s at batch 1 over 128 tokens,
 *   and peak RSS (each configuration runs in its own child process, so peaks are its own).
 * It also measures read bandwidth of anonymous memory with 4 KiB pages, with huge pages, and
 * of a file mapping, and prints the decode bound (bandwidth / weight bytes per token) beside
 * each decode figure.
 *
 *   bench_inference [PLUGIN_DIR]     (default: $LLMHOST_PLUGIN_DIR or the build tree's)
 *
 * With --attention it instead compares the attention backends "vanilla" and "paged": on the
 * bf16 checkpoint, with max_seq_len 4224 and max_batch_size 8, decode tok/s at contexts of 128,
 * 1024 and 4096 tokens and batches of 1 and 8 (eight different prompts, prefilled together in
 * one packed step as lh_engine_generate_greedy does; tok/s counts every sequence's tokens):
 *   N * batch / (time of the N = 32 decode steps that follow the prefill).
 * The steps are driven through the runtime's runner (what the engine wraps) and timed one by
 * one: timing two whole generate calls and subtracting leaves the prefill's noise, which at
 * 1024+ tokens is larger than the N steps themselves. Each cell runs in its own child process
 * that opens both backends and alternates their decode steps, so that the machine's other load
 * weighs on both alike. --attention skips the batch of 8 x 4096 (its prefill alone takes
 * minutes per backend on 2 cores) and runs 2 threads; --attention-full runs every cell, with 2
 * threads and then 1.
 *
 *   bench_inference --attention [PLUGIN_DIR]
 *   bench_inference --attention-full [PLUGIN_DIR]
 */
#include "api/attn_select.h"
#include "api/host_internal.h"
#include "api/host_api_table.h"
#include "config/model_config.h"
#include "config/run_config.h"
#include "core/err.h"
#include "lh_kernels.h"
#include "llmhost.h"
#include "model/model.h"
#include "resolve/resolve.h"
#include "runtime/runner.h"

#include "../../tests/weights/st_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PREFILL_TOKENS 512
#define DECODE_TOKENS 128
#define DECODE_PROMPT 16
#define BW_BYTES ((size_t)512 << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const lh_err *err)
{
    fprintf(stderr, "bench_inference: %s: %s\n", what, err ? err->msg : strerror(errno));
    exit(1);
}

/* ---- the random-weight checkpoint ---------------------------------------------------------- */

static const char config_fmt[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
    "\"hidden_size\": 576, \"intermediate_size\": 1536, \"num_hidden_layers\": 30, "
    "\"num_attention_heads\": 9, \"num_key_value_heads\": 3, \"vocab_size\": 49152, "
    "\"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-5, \"rope_theta\": 100000, "
    "\"tie_word_embeddings\": true, \"torch_dtype\": \"%s\"}\n";

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float uniform(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

typedef struct writer {
    stw w;
    lh_dtype dtype;
    int64_t weight_bytes; /* stored bytes: what one decode step streams */
} writer;

static void add_param(const lh_param_info *p, void *user)
{
    writer *wr = user;
    if (p->tied)
        return;
    int64_t n = 1;
    for (int i = 0; i < p->ndim; i++)
        n *= p->shape[i];
    size_t esize = wr->dtype == LH_DTYPE_F32 ? 4 : 2;
    void *buf = malloc((size_t)n * esize);
    if (!buf)
        die("out of memory", NULL);
    bool norm = strstr(p->module, "norm") != NULL;
    for (int64_t i = 0; i < n; i++) {
        float v = norm ? 1.0f + 0.1f * uniform() : 0.05f * uniform();
        if (wr->dtype == LH_DTYPE_F32)
            ((float *)buf)[i] = v;
        else
            ((uint16_t *)buf)[i] = lh_k_f32_to_bf16(v);
    }
    char name[512];
    snprintf(name, sizeof name, "%s.%s", p->module, p->name);
    stw_add(&wr->w, name, wr->dtype == LH_DTYPE_F32 ? "F32" : "BF16", p->ndim, p->shape, buf,
            (size_t)n * esize);
    wr->weight_bytes += n * (int64_t)esize;
    free(buf);
}

/* Writes dir/config.json and dir/model.safetensors; returns the weight bytes. */
static int64_t write_model(lh_host *h, const char *dir, lh_dtype dtype)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        die(path, NULL);
    fprintf(f, config_fmt, dtype == LH_DTYPE_F32 ? "float32" : "bfloat16");
    fclose(f);
    lh_err err = {0};
    lh_resolve_request req = {.struct_size = sizeof req, .model = dir};
    lh_run_config rc;
    lh_model_config *cfg = NULL;
    lh_resolution res;
    lh_model *m = NULL;
    if (lh_prepare_request(h, &req, &rc, &cfg, &err) != LH_OK ||
        lh_resolve(&h->reg, cfg, &rc, &res, &err) != LH_OK ||
        lh_model_build(lh_host_api_table(), &res.entry->p.model, cfg, &rc, &m, &err) != LH_OK)
        die("building the model tree", &err);
    writer wr = {.dtype = dtype};
    stw_init(&wr.w);
    lh_model_foreach_param(m, add_param, &wr);
    if (stw_write(&wr.w, dir, "model.safetensors") != 0)
        die("writing model.safetensors", NULL);
    stw_free(&wr.w);
    lh_model_free(m);
    lh_resolution_free(&res);
    lh_model_config_free(cfg);
    lh_run_config_free(&rc);
    return wr.weight_bytes;
}

/* ---- bandwidth ------------------------------------------------------------------------------ */

typedef struct bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_job;

static void *bw_read(void *arg)
{
    bw_job *j = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        a += j->p[i];
        b ^= j->p[i + 1];
        c += j->p[i + 2];
        d ^= j->p[i + 3];
    }
    j->sum = a + b + c + d;
    return NULL;
}

/* Best of 5 full reads of [p, p + bytes) with `threads` threads, in GB/s. */
static double read_bw(const void *p, size_t bytes, int threads)
{
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t t[8];
        bw_job j[8];
        size_t per = bytes / 8 / (size_t)threads;
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            j[i] = (bw_job){(const uint64_t *)p + per * (size_t)i, per, 0};
            pthread_create(&t[i], NULL, bw_read, &j[i]);
        }
        uint64_t sink = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(t[i], NULL);
            sink += j[i].sum;
        }
        double gbs = (double)(per * 8 * (size_t)threads) / (now() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
        if (sink == 42) /* keep the reads */
            fputc(' ', stderr);
    }
    return best;
}

static double anon_bw(bool huge, int threads)
{
    size_t map = BW_BYTES + ((size_t)2 << 20);
    unsigned char *raw = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    if (raw == MAP_FAILED)
        die("mmap", NULL);
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + ((2u << 20) - 1)) & ~(uintptr_t)((2u << 20) - 1));
    madvise(p, BW_BYTES, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(p, 1, BW_BYTES);
    double bw = read_bw(p, BW_BYTES, threads);
    munmap(raw, map);
    return bw;
}

static double file_bw(const char *path, int threads)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die(path, NULL);
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        die("mmap", NULL);
    read_bw(p, (size_t)st.st_size, 1); /* fault the pages in from the page cache first */
    double bw = read_bw(p, (size_t)st.st_size, threads);
    munmap(p, (size_t)st.st_size);
    return bw;
}

/* ---- one configuration, in a child process ------------------------------------------------ */

typedef struct result {
    int ok;
    double load_s, prefill_tps, decode_tps;
    long peak_rss_kb;
    char isa[16];
} result;

static result run_config(const char *plugin_dir, const char *dir, int threads, const char *place)
{
    result r = {0};
    lh_host_options ho = {.struct_size = sizeof ho, .plugin_dir = plugin_dir};
    lh_host *h;
    lh_err err = {0};
    if (lh_host_create(&ho, &h, &err) != LH_OK)
        die("host", &err);
    char placement[64];
    snprintf(placement, sizeof placement, "weight_placement=%s", place);
    const char *ov[] = {placement, "max_seq_len=1024", NULL};
    lh_engine_options eo = {.struct_size = sizeof eo, .model = dir, .n_threads = threads,
                            .overrides = ov};
    lh_engine *e;
    double t0 = now();
    if (lh_engine_open(h, &eo, &e, &err) != LH_OK)
        die("open", &err);
    r.load_s = now() - t0;
    int32_t prompt[PREFILL_TOKENS];
    for (int i = 0; i < PREFILL_TOKENS; i++)
        prompt[i] = (int32_t)((unsigned)(i * 7919 + 13) % 49152u);
    const int32_t *ps[1] = {prompt};
    int32_t out[DECODE_TOKENS + 1];
    /* prefill: best of 2 (the first run also faults weights in) */
    double best = 1e30;
    for (int rep = 0; rep < 2; rep++) {
        int64_t len = PREFILL_TOKENS;
        double a = now();
        if (lh_engine_generate_greedy(e, ps, &len, 1, 1, out, &err) != LH_OK)
            die("prefill", &err);
        double t = now() - a;
        if (t < best)
            best = t;
    }
    r.prefill_tps = PREFILL_TOKENS / best;
    /* decode: (prompt + 129 new) - (prompt + 1 new) = 128 decode steps */
    int64_t len = DECODE_PROMPT;
    double a = now();
    if (lh_engine_generate_greedy(e, ps, &len, 1, 1, out, &err) != LH_OK)
        die("decode", &err);
    double one = now() - a;
    a = now();
    if (lh_engine_generate_greedy(e, ps, &len, 1, DECODE_TOKENS + 1, out, &err) != LH_OK)
        die("decode", &err);
    double all = now() - a;
    r.decode_tps = DECODE_TOKENS / (all - one);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r.peak_rss_kb = ru.ru_maxrss;
    lh_engine_close(e);
    lh_host_free(h);
    r.ok = 1;
    return r;
}

static result run_in_child(const char *plugin_dir, const char *dir, int threads, const char *place)
{
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe", NULL);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        result r = run_config(plugin_dir, dir, threads, place);
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    result r = {0};
    if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r)
        r.ok = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return r;
}

/* ---- --attention: decode tok/s of the attention backends --------------------------------- */

#define ATT_BATCH 8                    /* max_batch_size */
#define ATT_SEQ_LEN (4096 + 64 + 64)   /* max_seq_len: the longest prompt + 1 + N new, spare */
#define ATT_WARM_PROMPT 16

static const char *const att_backends[2] = {"vanilla", "paged"};
static const int att_ctx[3] = {128, 1024, 4096};
static const int att_batch[2] = {1, 8};

/* One cell, both backends (index as att_backends). */
typedef struct att_result {
    int ok;
    double prefill_s[2];   /* the packed prefill step of the whole batch */
    double decode_s[2];    /* the N decode steps together */
    double step_min_s[2], step_med_s[2];
    double tps[2];         /* N * batch / decode_s */
    char msg[240];
} att_result;

/* An engine whose decode steps the benchmark drives and times one by one (the public API
 * only times a whole generate call, prefill included). */
typedef struct att_engine {
    lh_engine *eng;
    lh_runner *dec; /* the engine's */
    lh_kctx *kctx;   /* the engine's */
} att_engine;

static void att_close(att_engine *e)
{
    lh_engine_close(e->eng);
    memset(e, 0, sizeof *e);
}

/* lh_engine_open with overrides max_seq_len, max_batch_size and attn_backend. */
static lh_status att_open(lh_host *h, const char *dir, const char *backend, int threads,
                          att_engine *e, lh_err *err)
{
    memset(e, 0, sizeof *e);
    char seq_len[64], batch_size[64], attn[64];
    snprintf(seq_len, sizeof seq_len, "max_seq_len=%d", ATT_SEQ_LEN);
    snprintf(batch_size, sizeof batch_size, "max_batch_size=%d", ATT_BATCH);
    snprintf(attn, sizeof attn, "attn_backend=%s", backend);
    const char *ov[] = {seq_len, batch_size, attn, NULL};
    lh_engine_options eo = {.struct_size = sizeof eo, .model = dir, .n_threads = threads,
                            .overrides = ov};
    lh_status st = lh_engine_open(h, &eo, &e->eng, err);
    if (st == LH_OK) {
        e->dec = lh_engine_runner(e->eng);
        e->kctx = lh_engine_kctx(e->eng);
    }
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What lh_generate_greedy does for `batch` prompts of `ctx` tokens, split so that the steps
 * can be timed one by one: one packed prefill step of every prompt (att_prefill), then packed
 * decode steps of one token per sequence, logits of every sequence and the greedy choice
 * (att_step), then the slots are released (att_end). Lives in place (step points into it). */
typedef struct att_gen {
    att_engine *e;
    int ctx, batch, k;
    int32_t *tokens, *positions;
    float *logits;
    int64_t start[ATT_BATCH], nn[ATT_BATCH], clen[ATT_BATCH], slot[ATT_BATCH], rows[ATT_BATCH];
    int32_t ids[ATT_BATCH];
    int64_t lshape[2];
    lh_attn_step step;
} att_gen;

static lh_status att_pick(att_gen *g, lh_err *err)
{
    lh_tensor lt = lh_tensor_cpu(LH_DTYPE_F32, g->logits, 2, g->lshape);
    if (lh_k_argmax(g->e->kctx, &lt, g->ids) != LH_OK)
        return lh_err_set(err, LH_E_UNSUPPORTED, "argmax: %s", lh_k_last_error(g->e->kctx));
    return LH_OK;
}

static void att_end(att_gen *g)
{
    for (int s = 0; s < g->batch; s++)
        lh_runner_release(g->e->dec, s);
    free(g->tokens);
    free(g->positions);
    free(g->logits);
    g->tokens = NULL;
    g->positions = NULL;
    g->logits = NULL;
}

static lh_status att_prefill(att_gen *g, att_engine *e, const int32_t *const *ps, int ctx,
                             int batch, double *secs, lh_err *err)
{
    memset(g, 0, sizeof *g);
    g->e = e;
    g->ctx = ctx;
    g->batch = batch;
    size_t total = (size_t)ctx * (size_t)batch;
    g->tokens = malloc(total * sizeof *g->tokens);
    g->positions = malloc(total * sizeof *g->positions);
    g->logits = malloc((size_t)batch * (size_t)lh_runner_vocab(e->dec) * sizeof *g->logits);
    if (!g->tokens || !g->positions || !g->logits)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    size_t t = 0;
    for (int s = 0; s < batch; s++) {
        g->start[s] = (int64_t)t;
        g->nn[s] = ctx;
        g->clen[s] = 0;
        g->slot[s] = s;
        for (int i = 0; i < ctx; i++, t++) {
            g->tokens[t] = ps[s][i];
            g->positions[t] = i;
        }
        g->rows[s] = (int64_t)t - 1;
    }
    g->lshape[0] = batch;
    g->lshape[1] = lh_runner_vocab(e->dec);
    g->step = (lh_attn_step){.struct_size = sizeof g->step, .n_tokens = (int64_t)total,
                             .n_seqs = batch, .positions = g->positions,
                             .token_start = g->start, .n_new = g->nn, .ctx_len = g->clen,
                             .slot = g->slot};
    double a = now();
    lh_status st = lh_runner_forward(e->dec, e->kctx, &g->step, g->tokens, g->rows, batch,
                                      g->logits, err);
    if (st == LH_OK)
        st = att_pick(g, err);
    *secs = now() - a;
    return st;
}

static lh_status att_step(att_gen *g, double *secs, lh_err *err)
{
    for (int s = 0; s < g->batch; s++) {
        g->start[s] = s;
        g->nn[s] = 1;
        g->clen[s] = g->ctx + g->k;
        g->tokens[s] = g->ids[s];
        g->positions[s] = (int32_t)g->clen[s];
        g->rows[s] = s;
    }
    g->step.n_tokens = g->batch;
    g->k++;
    double a = now();
    lh_status st = lh_runner_forward(g->e->dec, g->e->kctx, &g->step, g->tokens, g->rows,
                                      g->batch, g->logits, err);
    if (st == LH_OK)
        st = att_pick(g, err);
    *secs = now() - a;
    return st;
}

/* One cell: `batch` different prompts of `ctx` tokens, on an engine of each backend opened
 * side by side in this process. Both are prefilled, then their decode steps alternate (which
 * backend goes first alternates too), so that whatever else the machine runs meanwhile
 * weighs on both alike. */
static att_result att_run(const char *plugin_dir, const char *dir, int threads, int ctx,
                          int batch, int n_new)
{
    att_result r = {0};
    lh_host_options ho = {.struct_size = sizeof ho, .plugin_dir = plugin_dir};
    lh_host *h = NULL;
    lh_err err = {0};
    att_engine e[2];
    att_gen g[2];
    int opened = 0, k;
    memset(g, 0, sizeof g);
    int32_t *tokens = malloc((size_t)batch * (size_t)ctx * sizeof *tokens);
    double *step_s = malloc(2 * (size_t)n_new * sizeof *step_s);
    const int32_t *ps[ATT_BATCH];
    lh_status st = LH_OK;
    if (!tokens || !step_s) {
        snprintf(r.msg, sizeof r.msg, "out of memory");
        goto done;
    }
    if (lh_host_create(&ho, &h, &err) != LH_OK) {
        snprintf(r.msg, sizeof r.msg, "host: %.200s", err.msg);
        goto done;
    }
    for (; opened < 2; opened++)
        if (att_open(h, dir, att_backends[opened], threads, &e[opened], &err) != LH_OK) {
            snprintf(r.msg, sizeof r.msg, "%s: %.200s", att_backends[opened], err.msg);
            att_close(&e[opened]);
            goto done;
        }
    for (int s = 0; s < batch; s++) { /* a different prompt per sequence */
        for (int i = 0; i < ctx; i++)
            tokens[(size_t)s * (size_t)ctx + (size_t)i] =
                (int32_t)((unsigned)(i * 7919 + s * 104729 + 13) % 49152u);
        ps[s] = tokens + (size_t)s * (size_t)ctx;
    }
    /* warm-up: faults the weights in, sets up each backend's per-sequence state */
    for (k = 0; k < 2 && st == LH_OK; k++) {
        double t;
        st = att_prefill(&g[k], &e[k], ps, ATT_WARM_PROMPT, batch, &t, &err);
        if (st == LH_OK)
            st = att_step(&g[k], &t, &err);
        att_end(&g[k]);
    }
    for (k = 0; k < 2 && st == LH_OK; k++)
        st = att_prefill(&g[k], &e[k], ps, ctx, batch, &r.prefill_s[k], &err);
    for (int i = 0; i < n_new && st == LH_OK; i++)
        for (int j = 0; j < 2 && st == LH_OK; j++) {
            k = (i + j) % 2;
            st = att_step(&g[k], &step_s[k * n_new + i], &err);
        }
    if (st != LH_OK) {
        snprintf(r.msg, sizeof r.msg, "generate: %.200s", err.msg);
        goto done;
    }
    for (k = 0; k < 2; k++) {
        double *t = step_s + k * n_new;
        for (int i = 0; i < n_new; i++)
            r.decode_s[k] += t[i];
        qsort(t, (size_t)n_new, sizeof *t, cmp_double);
        r.step_min_s[k] = t[0];
        r.step_med_s[k] = t[n_new / 2];
        r.tps[k] = (double)n_new * batch / r.decode_s[k];
    }
    r.ok = 1;
done:
    for (k = 0; k < opened; k++) {
        att_end(&g[k]);
        att_close(&e[k]);
    }
    lh_host_free(h);
    free(tokens);
    free(step_s);
    return r;
}

static att_result att_run_in_child(const char *plugin_dir, const char *dir, int threads,
                                   int ctx, int batch, int n_new)
{
    att_result r = {0};
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe", NULL);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork", NULL);
    if (pid == 0) {
        close(fds[0]);
        r = att_run(plugin_dir, dir, threads, ctx, batch, n_new);
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r) {
        r = (att_result){0};
        snprintf(r.msg, sizeof r.msg, "the child process died");
    }
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return r;
}

#define ATT_N 32 /* decode steps per cell */

/* Prompt tokens of a cell beyond which --attention skips it (--attention-full does not). */
#define ATT_MAX_PREFILL (8 * 1024)

static void attention_main(const char *plugin_dir, const char *dir, bool full)
{
    const int threads[2] = {2, 1};
    double t_start = now();
    printf("attention backends: bf16 weights, max_seq_len %d, max_batch_size %d; decode tok/s = "
           "N * batch / time of the N = %d decode steps after the batch's prefill\n",
           ATT_SEQ_LEN, ATT_BATCH, ATT_N);
    for (int ti = 0; ti < (full ? 2 : 1); ti++) {
        printf("\n%d thread%s\n\n| context | batch | vanilla tok/s | paged tok/s | "
               "paged/vanilla |\n|---|---|---|---|---|\n",
               threads[ti], threads[ti] > 1 ? "s" : "");
        fflush(stdout);
        for (int c = 0; c < 3; c++)
            for (int b = 0; b < 2; b++) {
                if (!full && att_ctx[c] * att_batch[b] > ATT_MAX_PREFILL) {
                    printf("| %d | %d | skipped (prefill of %d tokens; --attention-full) | | "
                           "|\n", att_ctx[c], att_batch[b], att_ctx[c] * att_batch[b]);
                    continue;
                }
                att_result r = att_run_in_child(plugin_dir, dir, threads[ti], att_ctx[c],
                                                att_batch[b], ATT_N);
                if (!r.ok) {
                    printf("| %d | %d | failed: %s | | |\n", att_ctx[c], att_batch[b], r.msg);
                    fflush(stdout);
                    continue;
                }
                for (int k = 0; k < 2; k++)
                    fprintf(stderr, "# %d thr %-7s context %4d batch %d: prefill %6.2f s, %d "
                            "decode steps %5.2f s (step min %.1f ms, median %.1f ms)\n",
                            threads[ti], att_backends[k], att_ctx[c], att_batch[b],
                            r.prefill_s[k], ATT_N, r.decode_s[k], r.step_min_s[k] * 1e3,
                            r.step_med_s[k] * 1e3);
                printf("| %d | %d | %.1f | %.1f | %.2f |\n", att_ctx[c], att_batch[b],
                       r.tps[0], r.tps[1], r.tps[1] / r.tps[0]);
                fflush(stdout);
            }
    }
    printf("\n# %.0f s\n", now() - t_start);
}

static void remove_models(char dirs[][256], int n, const char *root)
{
    for (int d = 0; d < n; d++) {
        if (!dirs[d][0])
            continue;
        char p[600];
        snprintf(p, sizeof p, "%s/model.safetensors", dirs[d]);
        unlink(p);
        snprintf(p, sizeof p, "%s/config.json", dirs[d]);
        unlink(p);
        rmdir(dirs[d]);
    }
    rmdir(root);
}

int main(int argc, char **argv)
{
    bool full = argc > 1 && strcmp(argv[1], "--attention-full") == 0;
    bool attention = full || (argc > 1 && strcmp(argv[1], "--attention") == 0);
    int argi = attention ? 2 : 1;
    const char *plugin_dir = argc > argi ? argv[argi] : getenv("LLMHOST_PLUGIN_DIR");
    lh_host_options ho = {.struct_size = sizeof ho, .plugin_dir = plugin_dir};
    lh_host *h;
    lh_err err = {0};
    if (lh_host_create(&ho, &h, &err) != LH_OK)
        die("host (pass the plugin dir as the first argument)", &err);
    char tmpl[] = "/tmp/lh-bench-XXXXXX";
    char *root = mkdtemp(tmpl);
    if (!root)
        die("mkdtemp", NULL);
    char dirs[2][256] = {{0}};
    int64_t wbytes[2] = {0};
    const lh_dtype dts[2] = {LH_DTYPE_F32, LH_DTYPE_BF16};
    for (int d = attention ? 1 : 0; d < 2; d++) { /* --attention: bf16 only */
        snprintf(dirs[d], sizeof dirs[d], "%s/%s", root, d == 0 ? "f32" : "bf16");
        mkdir(dirs[d], 0755);
        wbytes[d] = write_model(h, dirs[d], dts[d]);
    }
    lh_host_free(h);
    lh_device cpu = {LH_DEVICE_CPU, 0};
    lh_kctx *k = lh_k_ctx_create(1, cpu);
    printf("# bench_inference: SmolLM2-135M shape, random weights; %ld cores; kernels %s\n\n",
           sysconf(_SC_NPROCESSORS_ONLN), k ? lh_k_isa_name(lh_k_ctx_isa(k)) : "?");
    lh_k_ctx_free(k);
    if (attention) {
        attention_main(plugin_dir, dirs[1], full);
        remove_models(dirs, 2, root);
        return 0;
    }

    char f32_file[512];
    snprintf(f32_file, sizeof f32_file, "%s/model.safetensors", dirs[0]);
    double bw[2][3]; /* [threads-1][4k, huge, file] */
    printf("| read bandwidth | 1 thread | 2 threads |\n|---|---|---|\n");
    for (int t = 0; t < 2; t++) {
        bw[t][0] = anon_bw(false, t + 1);
        bw[t][1] = anon_bw(true, t + 1);
        bw[t][2] = file_bw(f32_file, t + 1);
    }
    const char *bw_names[3] = {"anonymous, 4 KiB pages", "anonymous, huge pages",
                               "file mapping (page cache)"};
    for (int i = 0; i < 3; i++)
        printf("| %s | %.1f GB/s | %.1f GB/s |\n", bw_names[i], bw[0][i], bw[1][i]);

    printf("\n| weights | placement | threads | load | prefill 512 | decode (bound) | peak RSS |\n"
           "|---|---|---|---|---|---|---|\n");
    const char *places[2] = {"mmap", "huge_pages"};
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < 2; p++)
            for (int t = 1; t <= 2; t++) {
                result r = run_in_child(plugin_dir, dirs[d], t, places[p]);
                if (!r.ok) {
                    printf("| %s | %s | %d | failed |\n", d ? "bf16" : "f32", places[p], t);
                    continue;
                }
                /* mmap'd weights stream from the page cache: bound by the file-mapping rate */
                double b = p == 0 ? bw[t - 1][2] : bw[t - 1][1];
                double bound = b * 1e9 / (double)wbytes[d];
                printf("| %s (%.0f MB) | %s | %d | %.2f s | %.0f tok/s | %.1f tok/s (bound %.1f, "
                       "%.0f%%) | %.0f MB |\n",
                       d ? "bf16" : "f32", (double)wbytes[d] / 1e6, places[p], t, r.load_s,
                       r.prefill_tps, r.decode_tps, bound, 100.0 * r.decode_tps / bound,
                       (double)r.peak_rss_kb / 1024.0);
                fflush(stdout);
            }
    remove_models(dirs, 2, root);
    return 0;
}
