/* The host honours lh_decoder_spec end to end, without any out-of-tree plugin: the test plugin
 * libmodel_tp_gemma.so (tests/plugins, TP_GEMMA_SPEC) registers TpGemmaForCausalLM with the
 * Gemma variant (GeGLU with tanh GELU, RMSNorm x / rms(x) * (1 + w), embeddings multiplied by
 * sqrt(hidden_size), tied lm_head). A tiny random f32 checkpoint is written here, the engine's
 * logits (lh_engine_logits, CPU) are compared with a double-precision forward computed in this
 * file, and the config checks of the MLP activation are exercised (gelu / gelu_pytorch_tanh
 * accepted for the GELU spec, a mismatch refused either way). */
#include "llmhost.h"
#include "lh_kernels.h"
#include "runner.h"
#include "../weights/st_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { HID = 24, INTER = 40, LAYERS = 2, HEADS = 2, KVH = 1, HD = 16, VOCAB = 50, NTOK = 7 };
#define EPS 1e-6
#define THETA 10000.0

typedef struct layer_w {
    float in_norm[HID], post_norm[HID];
    float wq[HEADS * HD][HID], wk[KVH * HD][HID], wv[KVH * HD][HID], wo[HID][HEADS * HD];
    float wg[INTER][HID], wu[INTER][HID], wd[HID][INTER];
} layer_w;

typedef struct weights {
    float embed[VOCAB][HID];
    float final_norm[HID];
    layer_w layers[LAYERS];
} weights;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(float a) /* uniform in [-a, a) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0) * a;
}

static void fill(float *p, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        p[i] = urand(a);
}

static void make_weights(weights *w)
{
    fill(&w->embed[0][0], sizeof w->embed / sizeof(float), 0.5f);
    fill(w->final_norm, HID, 0.3f); /* Gemma norms are stored around 0: (1 + w) */
    for (int l = 0; l < LAYERS; l++) {
        layer_w *L = &w->layers[l];
        fill(L->in_norm, HID, 0.3f);
        fill(L->post_norm, HID, 0.3f);
        fill(&L->wq[0][0], sizeof L->wq / sizeof(float), 0.3f);
        fill(&L->wk[0][0], sizeof L->wk / sizeof(float), 0.3f);
        fill(&L->wv[0][0], sizeof L->wv / sizeof(float), 0.3f);
        fill(&L->wo[0][0], sizeof L->wo / sizeof(float), 0.2f);
        fill(&L->wg[0][0], sizeof L->wg / sizeof(float), 0.3f);
        fill(&L->wu[0][0], sizeof L->wu / sizeof(float), 0.3f);
        fill(&L->wd[0][0], sizeof L->wd / sizeof(float), 0.2f);
    }
}

static bool ckpt_bf16; /* write BF16 tensors (the weights must be bf16 values already) */

static void add(stw *s, const char *name, const float *p, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    const size_t n = (size_t)(d0 * (d1 ? d1 : 1));
    if (!ckpt_bf16) {
        stw_add(s, name, "F32", d1 ? 2 : 1, shape, p, n * sizeof(float));
        return;
    }
    uint16_t *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++)
        b[i] = lh_k_f32_to_bf16(p[i]);
    stw_add(s, name, "BF16", d1 ? 2 : 1, shape, b, n * sizeof *b);
    free(b);
}

static int write_checkpoint(const char *dir, const weights *w)
{
    stw s;
    stw_init(&s);
    add(&s, "model.embed_tokens.weight", &w->embed[0][0], VOCAB, HID);
    add(&s, "model.norm.weight", w->final_norm, HID, 0);
    for (int l = 0; l < LAYERS; l++) {
        const layer_w *L = &w->layers[l];
        char n[128];
#define ADD(suffix, ptr, d0, d1)                                                                \
    snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, suffix);                                \
    add(&s, n, ptr, d0, d1)
        ADD("input_layernorm", L->in_norm, HID, 0);
        ADD("post_attention_layernorm", L->post_norm, HID, 0);
        ADD("self_attn.q_proj", &L->wq[0][0], HEADS * HD, HID);
        ADD("self_attn.k_proj", &L->wk[0][0], KVH * HD, HID);
        ADD("self_attn.v_proj", &L->wv[0][0], KVH * HD, HID);
        ADD("self_attn.o_proj", &L->wo[0][0], HID, HEADS * HD);
        ADD("mlp.gate_proj", &L->wg[0][0], INTER, HID);
        ADD("mlp.up_proj", &L->wu[0][0], INTER, HID);
        ADD("mlp.down_proj", &L->wd[0][0], HID, INTER);
#undef ADD
    }
    stw_metadata(&s, "format", "pt");
    int rc = stw_write(&s, dir, "model.safetensors");
    stw_free(&s);
    return rc;
}

/* ---- the double-precision reference (transformers' GemmaForCausalLM, eager) ---------------- */

static void rmsnorm1p(const double *x, const float *w, double *out)
{
    double ss = 0;
    for (int i = 0; i < HID; i++)
        ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / HID + EPS);
    for (int i = 0; i < HID; i++)
        out[i] = x[i] * r * (1.0 + (double)w[i]);
}

static void linear(const double *x, const float *w, int in, int out, double *y)
{
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++)
            s += (double)w[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

static void rope(double *x, int pos) /* one head [HD], rotate_half layout */
{
    for (int j = 0; j < HD / 2; j++) {
        const double f = pow(THETA, -2.0 * j / HD), c = cos(pos * f), s = sin(pos * f);
        const double a = x[j], b = x[j + HD / 2];
        x[j] = a * c - b * s;
        x[j + HD / 2] = b * c + a * s;
    }
}

static double gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* normalizer: sqrt(hidden_size) as transformers rounds it to the checkpoint's dtype */
static void reference(const weights *w, double normalizer, const int32_t *tok, int n,
                      double *logits /* [n][V] */)
{
    static double x[NTOK][HID], h[NTOK][HID], q[NTOK][HEADS * HD], k[NTOK][KVH * HD],
        v[NTOK][KVH * HD], att[NTOK][HEADS * HD], tmp[HID], g[INTER], u[INTER];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < HID; i++)
            x[t][i] = (double)w->embed[tok[t]][i] * normalizer;
    for (int l = 0; l < LAYERS; l++) {
        const layer_w *L = &w->layers[l];
        for (int t = 0; t < n; t++) {
            rmsnorm1p(x[t], L->in_norm, h[t]);
            linear(h[t], &L->wq[0][0], HID, HEADS * HD, q[t]);
            linear(h[t], &L->wk[0][0], HID, KVH * HD, k[t]);
            linear(h[t], &L->wv[0][0], HID, KVH * HD, v[t]);
            for (int hh = 0; hh < HEADS; hh++)
                rope(q[t] + hh * HD, t);
            for (int hh = 0; hh < KVH; hh++)
                rope(k[t] + hh * HD, t);
        }
        for (int t = 0; t < n; t++)
            for (int hh = 0; hh < HEADS; hh++) {
                const int kv = hh / (HEADS / KVH);
                double sc[NTOK], m = -INFINITY, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double d = 0;
                    for (int j = 0; j < HD; j++)
                        d += q[t][hh * HD + j] * k[p][kv * HD + j];
                    sc[p] = d / sqrt((double)HD);
                    m = sc[p] > m ? sc[p] : m;
                }
                for (int p = 0; p <= t; p++)
                    sum += (sc[p] = exp(sc[p] - m));
                for (int j = 0; j < HD; j++) {
                    double o = 0;
                    for (int p = 0; p <= t; p++)
                        o += sc[p] / sum * v[p][kv * HD + j];
                    att[t][hh * HD + j] = o;
                }
            }
        for (int t = 0; t < n; t++) {
            linear(att[t], &L->wo[0][0], HEADS * HD, HID, tmp);
            for (int i = 0; i < HID; i++)
                x[t][i] += tmp[i];
            rmsnorm1p(x[t], L->post_norm, h[t]);
            linear(h[t], &L->wg[0][0], HID, INTER, g);
            linear(h[t], &L->wu[0][0], HID, INTER, u);
            for (int i = 0; i < INTER; i++)
                g[i] = gelu_tanh(g[i]) * u[i];
            linear(g, &L->wd[0][0], INTER, HID, tmp);
            for (int i = 0; i < HID; i++)
                x[t][i] += tmp[i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm1p(x[t], w->final_norm, h[t]);
        linear(h[t], &w->embed[0][0], HID, VOCAB, logits + (size_t)t * VOCAB); /* tied */
    }
}

/* ---- fixtures: a plugin dir with tp_gemma, model dirs -------------------------------------- */

static char *root, *plugins;
static weights *W;

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static char *plugin_dir(void)
{
    char *dir = join(root, "plugins");
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    chmod(dir, 0755);
    char *src = join(lh_test_env("LH_TEST_PLUGINS"), "libmodel_tp_gemma.so");
    CU_ASSERT_EQUAL_FATAL(lh_test_copy_file(src, dir, "libmodel_tp_gemma.so", 0755), 0);
    free(src);
    CU_ASSERT_EQUAL_FATAL(lh_test_write_file(dir, "arch_index.tsv",
                                             "#llmhost-arch-index\t1\n"
                                             "model\tTpGemmaForCausalLM\tlibmodel_tp_gemma.so\n"),
                          0);
    char *idx = join(dir, "arch_index.tsv");
    chmod(idx, 0644);
    free(idx);
    return dir;
}

/* root/name with config.json (arch, the activation keys as JSON members or "") and the
 * checkpoint. */
static char *model_dir(const char *name, const char *arch, const char *act_members)
{
    const char *torch_dtype = ckpt_bf16 ? "bfloat16" : "float32";
    char *dir = join(root, name);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"architectures\": [\"%s\"], \"model_type\": \"gemma\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": true, \"torch_dtype\": \"%s\", "
             "\"attention_bias\": false%s%s}",
             arch, HID, INTER, LAYERS, HEADS, KVH, HD, VOCAB, torch_dtype,
             *act_members ? ", " : "", act_members);
    CU_ASSERT_EQUAL_FATAL(lh_test_write_file(dir, "config.json", text), 0);
    CU_ASSERT_EQUAL_FATAL(write_checkpoint(dir, W), 0);
    return dir;
}

static lh_host *make_host(void)
{
    lh_host_options o = {.struct_size = sizeof o, .plugin_dir = lh_test_env("LH_BUILTIN_PLUGINS")};
    lh_host *h = NULL;
    lh_err err = {0};
    if (lh_host_create(&o, &h, &err) != LH_OK) {
        fprintf(stderr, "\n  host: %s\n", err.msg);
        return NULL;
    }
    if (lh_host_add_custom_dir(h, plugins, &err) != LH_OK) {
        fprintf(stderr, "\n  custom dir: %s\n", err.msg);
        lh_host_free(h);
        return NULL;
    }
    return h;
}

static lh_status open_engine(lh_host *h, const char *dir, lh_engine **e, lh_err *err)
{
    static const char *const overrides[] = {"max_seq_len=32", NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = dir, .n_threads = 2,
                           .overrides = overrides};
    *e = NULL;
    return lh_engine_open(h, &o, e, err);
}

static int setup(void)
{
    root = lh_test_mkdtemp();
    W = calloc(1, sizeof *W);
    if (!root || !W)
        return 1;
    make_weights(W);
    return 0;
}

static int teardown(void)
{
    if (root)
        lh_test_rmtree(root);
    free(root);
    free(plugins);
    free(W);
    return 0;
}

static void ensure_plugins(void)
{
    if (!plugins)
        plugins = plugin_dir();
}

/* Logits of the engine vs the reference, for the config's activation spelled `act`;
 * tol: max abs difference. */
static void check_logits_tol(const char *name, const char *act, double normalizer, double tol)
{
    ensure_plugins();
    char *dir = model_dir(name, "TpGemmaForCausalLM", act);
    lh_host *h = make_host();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    lh_engine *e = NULL;
    lh_err err = {0};
    lh_status st = open_engine(h, dir, &e, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  open: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT_EQUAL(lh_engine_vocab_size(e), VOCAB);
    static const int32_t tokens[NTOK] = {3, 17, 0, 49, 17, 8, 25};
    float *ours = calloc((size_t)NTOK * VOCAB, sizeof *ours);
    double *ref = calloc((size_t)NTOK * VOCAB, sizeof *ref);
    st = lh_engine_logits(e, tokens, NTOK, ours, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  logits: %s\n", err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    reference(W, normalizer, tokens, NTOK, ref);
    double maxd = 0, maxref = 0;
    for (size_t i = 0; i < (size_t)NTOK * VOCAB; i++) {
        double d = fabs((double)ours[i] - ref[i]);
        maxd = d > maxd || isnan(d) ? d : maxd;
        maxref = fabs(ref[i]) > maxref ? fabs(ref[i]) : maxref;
    }
    if (!(maxd <= tol) || getenv("LH_TEST_VERBOSE"))
        fprintf(stderr, "\n  %s: max |ours - ref| = %g (max |ref| %g)\n", name, maxd, maxref);
    CU_ASSERT(maxd <= tol);
    CU_ASSERT(maxref > 0.5); /* the comparison is not vacuous */

    free(ours);
    free(ref);
    lh_engine_close(e);
    lh_host_free(h);
    free(dir);
}

/* f32 checkpoint: the factor is sqrt(hidden) in f32; tolerance 1e-4 */
static void check_logits(const char *name, const char *act)
{
    check_logits_tol(name, act, (double)(float)sqrt((double)HID), 1e-4);
}

static void test_gemma_logits_gelu(void)
{
    /* the official Gemma 1 configs: legacy "gelu" plus hidden_activation */
    check_logits("gemma-gelu", "\"hidden_act\": \"gelu\", \"hidden_activation\": "
                               "\"gelu_pytorch_tanh\"");
}

static void test_gemma_logits_tanh(void)
{
    check_logits("gemma-tanh", "\"hidden_act\": \"gelu_pytorch_tanh\"");
}

static void test_gemma_logits_no_act_key(void)
{
    check_logits("gemma-noact", "");
}

/* bf16 checkpoint: the weights are bf16 values and the factor is sqrt(24) = 4.899 rounded to
 * bf16 (4.90625), as transformers' normalizer; activations stay f32 in the runtime. */
static void test_gemma_logits_bf16(void)
{
    weights *f32 = W, *bf = malloc(sizeof *bf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bf);
    float *src = (float *)f32, *dst = (float *)bf;
    for (size_t i = 0; i < sizeof *bf / sizeof(float); i++)
        dst[i] = lh_k_bf16_to_f32(lh_k_f32_to_bf16(src[i]));
    W = bf;
    ckpt_bf16 = true;
    const float f = lh_k_bf16_to_f32(lh_k_f32_to_bf16((float)sqrt((double)HID)));
    CU_ASSERT_EQUAL(f, 4.90625f);
    check_logits_tol("gemma-bf16", "\"hidden_act\": \"gelu_pytorch_tanh\"", f, 1e-4);
    ckpt_bf16 = false;
    W = f32;
    free(bf);
}

static void expect_refused(const char *name, const char *arch, const char *act,
                           const char *needle)
{
    ensure_plugins();
    char *dir = model_dir(name, arch, act);
    lh_host *h = make_host();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    lh_engine *e = NULL;
    lh_err err = {0};
    lh_status st = open_engine(h, dir, &e, &err);
    CU_ASSERT_EQUAL(st, LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(e);
    if (!strstr(err.msg, needle))
        fprintf(stderr, "\n  expected '%s' in: %s\n", needle, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
    lh_engine_close(e);
    lh_host_free(h);
    free(dir);
}

static void test_activation_mismatch(void)
{
    /* a GELU architecture whose config says silu */
    expect_refused("gemma-silu", "TpGemmaForCausalLM", "\"hidden_act\": \"silu\"",
                   "hidden_act 'silu' does not match");
    /* hidden_activation is checked too */
    expect_refused("gemma-hact", "TpGemmaForCausalLM",
                   "\"hidden_act\": \"gelu\", \"hidden_activation\": \"relu\"",
                   "hidden_activation 'relu'");
    /* a SiLU architecture (built-in Llama) whose config asks for tanh GELU */
    expect_refused("llama-gelu", "LlamaForCausalLM", "\"hidden_act\": \"gelu_pytorch_tanh\"",
                   "hidden_act 'gelu_pytorch_tanh' is not supported");
}

static CU_TestInfo tests[] = {
    {"gemma spec: logits vs double reference (gelu + hidden_activation)", test_gemma_logits_gelu},
    {"gemma spec: logits vs double reference (gelu_pytorch_tanh)", test_gemma_logits_tanh},
    {"gemma spec: logits vs double reference (no activation key)", test_gemma_logits_no_act_key},
    {"gemma spec: bf16 checkpoint, normalizer rounded to bf16", test_gemma_logits_bf16},
    {"mlp activation: config / spec mismatch refused", test_activation_mismatch},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"spec_variants", setup, teardown, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
