/* arch_index.tsv (DESIGN §3): parsing, every parse error class, writing, generating an index
 * from built plugins and diffing it against a committed one. */
#include "loader_util.h"

#include "loader/index_generate.h"

#include <stdlib.h>
#include <string.h>

#define HDR "#llmhost-arch-index\t1\n"

static lh_status parse(const char *text, lh_arch_index *idx, lh_err *err)
{
    return lh_arch_index_parse(text, "/idx/arch_index.tsv", idx, err);
}

/* Parses text expecting LH_E_INDEX_PARSE and every listed substring. */
static void expect_parse_error(const char *text, const char *const *subs)
{
    lh_arch_index idx;
    lh_err err = {0};
    lh_status st = parse(text, &idx, &err);
    EXPECT_STATUS(st, LH_E_INDEX_PARSE, err);
    for (size_t i = 0; subs[i]; i++)
        EXPECT_HAS(err.msg, subs[i]);
    /* on error *out is empty */
    CU_ASSERT_EQUAL(idx.n_rows, 0);
    CU_ASSERT_PTR_NULL(idx.rows);
    lh_arch_index_free(&idx);
}

#define EXPECT_PARSE_ERR(text, ...) expect_parse_error((text), (const char *const[]){__VA_ARGS__, NULL})

/* ---- parsing ---------------------------------------------------------------------------- */

static void test_good(void)
{
    const char *text = HDR "#kind\tname\tshared_object\n"
                           "model\tLlamaForCausalLM\tlibmodel_llama.so\n"
                           "model\tMistralForCausalLM\tlibmodel_llama.so\n"
                           "vision_encoder\tAlphaVisionModel\tlibmodel_tp_target.so\n"
                           "draft\teagle3\tlibmodel_tp_target.so\n"
                           "attention_backend\tpaged\tlibattn_paged.so\n";
    lh_arch_index idx;
    lh_err err = {0};
    lh_status st = parse(text, &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    if (st != LH_OK)
        return;
    CU_ASSERT_EQUAL(idx.n_rows, 5);
    CU_ASSERT_STRING_EQUAL(idx.dir, "/idx");
    CU_ASSERT_STRING_EQUAL(idx.path, "/idx/arch_index.tsv");
    CU_ASSERT_EQUAL(idx.rows[0].kind, LH_KIND_MODEL);
    CU_ASSERT_STRING_EQUAL(idx.rows[0].name, "LlamaForCausalLM");
    CU_ASSERT_STRING_EQUAL(idx.rows[0].shared_object, "libmodel_llama.so");
    CU_ASSERT_EQUAL(idx.rows[0].line, 3);
    CU_ASSERT_EQUAL(idx.rows[2].kind, LH_KIND_VISION_ENCODER);
    CU_ASSERT_EQUAL(idx.rows[3].kind, LH_KIND_DRAFT);
    CU_ASSERT_EQUAL(idx.rows[4].kind, LH_KIND_ATTENTION_BACKEND);
    CU_ASSERT_EQUAL(idx.rows[4].line, 7);
    /* many names may share one file */
    const lh_index_row *r = lh_arch_index_find(&idx, LH_KIND_MODEL, "MistralForCausalLM");
    CU_ASSERT_PTR_NOT_NULL(r);
    if (r)
        CU_ASSERT_STRING_EQUAL(r->shared_object, "libmodel_llama.so");
    /* lookups are per kind, and model names are case-sensitive */
    CU_ASSERT_PTR_NULL(lh_arch_index_find(&idx, LH_KIND_DRAFT, "LlamaForCausalLM"));
    CU_ASSERT_PTR_NULL(lh_arch_index_find(&idx, LH_KIND_MODEL, "llamaforcausallm"));
    CU_ASSERT_PTR_NULL(lh_arch_index_find(&idx, LH_KIND_DRAFT, "EAGLE3"));
    lh_arch_index_free(&idx);
}

static void test_header_missing(void)
{
    EXPECT_PARSE_ERR("model\tLlamaForCausalLM\tlibmodel_llama.so\n", "/idx/arch_index.tsv:1",
                     "#llmhost-arch-index");
    EXPECT_PARSE_ERR("#kind\tname\tshared_object\nmodel\tA\tlibmodel_a.so\n",
                     "/idx/arch_index.tsv:1", "#llmhost-arch-index");
    EXPECT_PARSE_ERR("", "/idx/arch_index.tsv");
    /* a header without a version field */
    EXPECT_PARSE_ERR("#llmhost-arch-index\n", ":1", "#llmhost-arch-index");
}

static void test_header_version(void)
{
    EXPECT_PARSE_ERR("#llmhost-arch-index\t2\nmodel\tA\tlibmodel_a.so\n", ":1", "version",
                     "'2'", "1");
    EXPECT_PARSE_ERR("#llmhost-arch-index\tone\n", ":1", "version", "'one'");
    EXPECT_PARSE_ERR("#llmhost-arch-index\t1x\n", ":1", "version");
    EXPECT_PARSE_ERR("#llmhost-arch-index\t\n", ":1", "version");
    EXPECT_PARSE_ERR("#llmhost-arch-index\t0\n", ":1", "version");
}

static void test_field_count(void)
{
    EXPECT_PARSE_ERR(HDR "model\tA\tlibmodel_a.so\nmodel\tB\n", "/idx/arch_index.tsv:3",
                     "3 tab-separated fields", "found 2");
    EXPECT_PARSE_ERR(HDR "\n\nmodel\tA\tlibmodel_a.so\textra\n", "/idx/arch_index.tsv:4",
                     "more than 3");
    /* spaces are not separators */
    EXPECT_PARSE_ERR(HDR "model A libmodel_a.so\n", "/idx/arch_index.tsv:2", "found 1");
    /* a trailing tab is a fourth (empty) field */
    EXPECT_PARSE_ERR(HDR "model\tA\tlibmodel_a.so\t\n", ":2", "more than 3");
}

static void test_unknown_kind(void)
{
    EXPECT_PARSE_ERR(HDR "modle\tA\tlibmodel_a.so\n", ":2", "unknown kind 'modle'",
                     "did you mean 'model'");
    EXPECT_PARSE_ERR(HDR "attention-backend\tpaged\tlibattn_paged.so\n", ":2",
                     "did you mean 'attention_backend'");
    EXPECT_PARSE_ERR(HDR "model\tA\tlibmodel_a.so\nxyzzyqwerty\tA\tlibmodel_a.so\n", ":3",
                     "unknown kind 'xyzzyqwerty'", "vision_encoder");
    /* kinds are case-sensitive */
    EXPECT_PARSE_ERR(HDR "Model\tA\tlibmodel_a.so\n", ":2", "unknown kind 'Model'");
}

static void test_shared_object_bare(void)
{
    EXPECT_PARSE_ERR(HDR "model\tA\tsub/libmodel_a.so\n", ":2", "sub/libmodel_a.so", "bare");
    EXPECT_PARSE_ERR(HDR "model\tA\t/abs/libmodel_a.so\n", ":2", "bare");
    EXPECT_PARSE_ERR(HDR "model\tA\t..\n", ":2", "bare");
    EXPECT_PARSE_ERR(HDR "model\tA\t.\n", ":2", "bare");
    EXPECT_PARSE_ERR(HDR "model\tA\t../libmodel_a.so\n", ":2", "bare");
    EXPECT_PARSE_ERR(HDR "model\tA\t\n", ":2", "shared_object");
    EXPECT_PARSE_ERR(HDR "model\t\tlibmodel_a.so\n", ":2", "name");
}

static void test_duplicate(void)
{
    EXPECT_PARSE_ERR(HDR "#kind\tname\tshared_object\n"
                         "model\tA\tlibmodel_a.so\n"
                         "model\tB\tlibmodel_a.so\n"
                         "model\tA\tlibmodel_b.so\n",
                     "/idx/arch_index.tsv:5", "duplicate", "'A'", "line 3");
    /* the same name under different kinds is not a duplicate */
    lh_arch_index idx;
    lh_err err = {0};
    lh_status st = parse(HDR "model\tX\tlibmodel_a.so\nvision_encoder\tX\tlibmodel_a.so\n"
                             "draft\tX\tlibmodel_a.so\nattention_backend\tX\tlibattn_a.so\n",
                         &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(idx.n_rows, 4);
    lh_arch_index_free(&idx);
    /* attention backend names compare case-insensitively, so these collide */
    EXPECT_PARSE_ERR(HDR "attention_backend\tPaged\tlibattn_a.so\n"
                         "attention_backend\tpaged\tlibattn_b.so\n",
                     ":3", "duplicate", "line 2");
}

static void test_comments_blank_crlf(void)
{
    const char *text = "#llmhost-arch-index\t1\r\n"
                       "# a comment\r\n"
                       "\r\n"
                       "model\tA\tlibmodel_a.so\r\n"
                       "\n"
                       "#model\tCommented\tlibmodel_c.so\n";
    lh_arch_index idx;
    lh_err err = {0};
    lh_status st = parse(text, &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(idx.n_rows, 1);
    if (idx.n_rows == 1) {
        CU_ASSERT_STRING_EQUAL(idx.rows[0].name, "A");
        /* CR is stripped, not part of the file name */
        CU_ASSERT_STRING_EQUAL(idx.rows[0].shared_object, "libmodel_a.so");
        CU_ASSERT_EQUAL(idx.rows[0].line, 4);
    }
    CU_ASSERT_PTR_NULL(lh_arch_index_find(&idx, LH_KIND_MODEL, "Commented"));
    lh_arch_index_free(&idx);
    /* no trailing newline on the last row */
    st = parse(HDR "model\tA\tlibmodel_a.so", &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(idx.n_rows, 1);
    lh_arch_index_free(&idx);
    /* header only */
    st = parse(HDR, &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(idx.n_rows, 0);
    lh_arch_index_free(&idx);
}

static void test_attention_case(void)
{
    lh_arch_index idx;
    lh_err err = {0};
    lh_status st = parse(HDR "attention_backend\tTpPaged\tlibattn_tp_backend.so\n"
                             "model\tTpPaged\tlibmodel_x.so\n",
                         &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    const lh_index_row *r = lh_arch_index_find(&idx, LH_KIND_ATTENTION_BACKEND, "tppaged");
    CU_ASSERT_PTR_NOT_NULL(r);
    if (r)
        CU_ASSERT_STRING_EQUAL(r->shared_object, "libattn_tp_backend.so");
    CU_ASSERT_PTR_NOT_NULL(lh_arch_index_find(&idx, LH_KIND_ATTENTION_BACKEND, "TPPAGED"));
    /* models stay case-sensitive */
    CU_ASSERT_PTR_NULL(lh_arch_index_find(&idx, LH_KIND_MODEL, "tppaged"));
    CU_ASSERT_TRUE(lh_kind_names_equal(LH_KIND_ATTENTION_BACKEND, "Flash", "fLASH"));
    CU_ASSERT_FALSE(lh_kind_names_equal(LH_KIND_MODEL, "Flash", "fLASH"));
    CU_ASSERT_FALSE(lh_kind_names_equal(LH_KIND_DRAFT, "EAGLE3", "eagle3"));
    lh_arch_index_free(&idx);
}

static void test_kind_names(void)
{
    lh_kind k;
    CU_ASSERT_EQUAL(lh_kind_from_name("model", &k), 0);
    CU_ASSERT_EQUAL(k, LH_KIND_MODEL);
    CU_ASSERT_EQUAL(lh_kind_from_name("vision_encoder", &k), 0);
    CU_ASSERT_EQUAL(k, LH_KIND_VISION_ENCODER);
    CU_ASSERT_EQUAL(lh_kind_from_name("draft", &k), 0);
    CU_ASSERT_EQUAL(k, LH_KIND_DRAFT);
    CU_ASSERT_EQUAL(lh_kind_from_name("attention_backend", &k), 0);
    CU_ASSERT_EQUAL(k, LH_KIND_ATTENTION_BACKEND);
    CU_ASSERT_EQUAL(lh_kind_from_name("models", &k), -1);
    for (int i = 0; i < LH_KIND_COUNT; i++) {
        CU_ASSERT_EQUAL(lh_kind_from_name(lh_kind_name((lh_kind)i), &k), 0);
        CU_ASSERT_EQUAL(k, (lh_kind)i);
    }
}

/* ---- files ------------------------------------------------------------------------------- */

static void test_load_file(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = fx_dir(&f, "d", NULL, ROWS("model A libmodel_a.so", "draft mtp libmodel_a.so"));
    char *path = join(dir, LH_ARCH_INDEX_FILE);
    lh_arch_index idx;
    lh_err err = {0};
    lh_status st = lh_arch_index_load(path, &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(idx.n_rows, 2);
    if (st == LH_OK) {
        CU_ASSERT_STRING_EQUAL(idx.dir, dir);
        CU_ASSERT_STRING_EQUAL(idx.path, path);
    }
    lh_arch_index_free(&idx);

    /* missing file: LH_E_IO naming the path */
    char *missing = join(dir, "nope.tsv");
    st = lh_arch_index_load(missing, &idx, &err);
    EXPECT_STATUS(st, LH_E_IO, err);
    EXPECT_HAS(err.msg, missing);
    CU_ASSERT_EQUAL(idx.n_rows, 0);
    lh_arch_index_free(&idx);

    /* a NUL byte: not a text index */
    char *nul = join(dir, "nul.tsv");
    FILE *fp = fopen(nul, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    static const char bytes[] = "#llmhost-arch-index\t1\nmodel\tA\0B\tlibmodel_a.so\n";
    fwrite(bytes, 1, sizeof bytes - 1, fp);
    fclose(fp);
    st = lh_arch_index_load(nul, &idx, &err);
    EXPECT_STATUS(st, LH_E_INDEX_PARSE, err);
    EXPECT_HAS(err.msg, nul);
    EXPECT_HAS(err.msg, "NUL");
    lh_arch_index_free(&idx);

    /* parse errors from a file carry the file's path and line */
    write_file_mode(dir, "bad.tsv", HDR "model\tA\n", 0644);
    char *bad = join(dir, "bad.tsv");
    st = lh_arch_index_load(bad, &idx, &err);
    EXPECT_STATUS(st, LH_E_INDEX_PARSE, err);
    char where[4200];
    snprintf(where, sizeof where, "%s:2", bad);
    EXPECT_HAS(err.msg, where);
    lh_arch_index_free(&idx);

    /* a directory is not an index */
    st = lh_arch_index_load(dir, &idx, &err);
    CU_ASSERT_NOT_EQUAL(st, LH_OK);
    lh_arch_index_free(&idx);

    free(bad);
    free(nul);
    free(missing);
    free(path);
    free(dir);
    fx_free(&f);
}

/* An index larger than the reader's first buffer. */
static void test_load_large(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *dir = fx_dir(&f, "d", NULL, NULL);
    size_t n = 3000, cap = 64 + n * 64;
    char *text = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    size_t used = (size_t)snprintf(text, cap, HDR);
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, cap - used, "model\tArch%05zuForCausalLM\tlibmodel_%zu.so\n",
                                 i, i % 7);
    write_file_mode(dir, "big.tsv", text, 0644);
    free(text);
    char *path = join(dir, "big.tsv");
    lh_arch_index idx;
    lh_err err = {0};
    lh_status st = lh_arch_index_load(path, &idx, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(idx.n_rows, n);
    if (idx.n_rows == n) {
        CU_ASSERT_STRING_EQUAL(idx.rows[n - 1].name, "Arch02999ForCausalLM");
        CU_ASSERT_STRING_EQUAL(idx.rows[n - 1].shared_object, "libmodel_3.so");
        CU_ASSERT_EQUAL(idx.rows[n - 1].line, (int)n + 1);
    }
    lh_arch_index_free(&idx);
    free(path);
    free(dir);
    fx_free(&f);
}

static void test_write_roundtrip(void)
{
    const char *text = HDR "attention_backend\tTpFlash\tlibattn_tp_backend.so\n"
                           "model\tZedForCausalLM\tlibmodel_z.so\n"
                           "draft\tmtp\tlibmodel_tp_target.so\n"
                           "model\tAlphaForCausalLM\tlibmodel_tp_alpha.so\n"
                           "vision_encoder\tAlphaVisionModel\tlibmodel_tp_target.so\n";
    lh_arch_index a, b;
    lh_err err = {0};
    lh_status st = parse(text, &a, &err);
    EXPECT_STATUS(st, LH_OK, err);
    if (st != LH_OK)
        return;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
    CU_ASSERT_EQUAL(lh_arch_index_write(mem, a.rows, a.n_rows), 0);
    fclose(mem);
    /* canonical: header, column comment, rows sorted by kind then name */
    const char *want = "#llmhost-arch-index\t1\n"
                       "#kind\tname\tshared_object\n"
                       "model\tAlphaForCausalLM\tlibmodel_tp_alpha.so\n"
                       "model\tZedForCausalLM\tlibmodel_z.so\n"
                       "vision_encoder\tAlphaVisionModel\tlibmodel_tp_target.so\n"
                       "draft\tmtp\tlibmodel_tp_target.so\n"
                       "attention_backend\tTpFlash\tlibattn_tp_backend.so\n";
    if (strcmp(buf, want) != 0)
        fprintf(stderr, "\n  written:\n%s\n  expected:\n%s\n", buf, want);
    CU_ASSERT_STRING_EQUAL(buf, want);
    st = parse(buf, &b, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(b.n_rows, a.n_rows);
    CU_ASSERT_EQUAL(lh_index_diff(&a, &b, NULL), 0);
    CU_ASSERT_EQUAL(lh_index_diff(&b, &a, NULL), 0);
    for (size_t i = 0; i < a.n_rows; i++) {
        const lh_index_row *r = lh_arch_index_find(&b, a.rows[i].kind, a.rows[i].name);
        CU_ASSERT_PTR_NOT_NULL(r);
        if (r)
            CU_ASSERT_STRING_EQUAL(r->shared_object, a.rows[i].shared_object);
    }
    lh_arch_index_free(&b);
    free(buf);
    /* empty row set: header only, and it parses */
    buf = NULL;
    mem = open_memstream(&buf, &len);
    CU_ASSERT_EQUAL(lh_arch_index_write(mem, NULL, 0), 0);
    fclose(mem);
    st = parse(buf, &b, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(b.n_rows, 0);
    lh_arch_index_free(&b);
    free(buf);
    lh_arch_index_free(&a);
}

/* ---- generate and diff ------------------------------------------------------------------ */

static void test_generate(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    /* only libmodel_*.so / libattn_*.so count: a stray file is ignored */
    char *dir = fx_dir(&f, "gen",
                       PLUGINS("libmodel_tp_alpha.so", "libmodel_tp_target.so",
                               "libattn_tp_backend.so"),
                       NULL);
    write_file_mode(dir, "README.txt", "not a plugin\n", 0644);
    copy_plugin(dir, "libmodel_tp_beta.so", "other_tp_beta.so", 0755);
    lh_arch_index gen;
    lh_err err = {0};
    lh_status st = lh_index_generate(dir, false, &gen, &err);
    EXPECT_STATUS(st, LH_OK, err);
    if (st != LH_OK) {
        free(dir);
        fx_free(&f);
        return;
    }
    static const struct {
        lh_kind kind;
        const char *name, *file;
    } want[] = {
        {LH_KIND_MODEL, "AlphaForCausalLM", "libmodel_tp_alpha.so"},
        {LH_KIND_MODEL, "SharedForCausalLM", "libmodel_tp_alpha.so"},
        {LH_KIND_MODEL, "TargetImpl", "libmodel_tp_target.so"},
        {LH_KIND_MODEL, "EAGLE3LlamaForCausalLM", "libmodel_tp_target.so"},
        {LH_KIND_VISION_ENCODER, "AlphaVisionModel", "libmodel_tp_target.so"},
        {LH_KIND_DRAFT, "eagle3", "libmodel_tp_target.so"},
        {LH_KIND_DRAFT, "mtp", "libmodel_tp_target.so"},
        {LH_KIND_ATTENTION_BACKEND, "TpPaged", "libattn_tp_backend.so"},
        {LH_KIND_ATTENTION_BACKEND, "TpFlash", "libattn_tp_backend.so"},
    };
    CU_ASSERT_EQUAL(gen.n_rows, sizeof want / sizeof *want);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const lh_index_row *r = lh_arch_index_find(&gen, want[i].kind, want[i].name);
        if (!r)
            fprintf(stderr, "\n  generated index lacks %s %s\n", lh_kind_name(want[i].kind),
                    want[i].name);
        CU_ASSERT_PTR_NOT_NULL(r);
        if (r)
            CU_ASSERT_STRING_EQUAL(r->shared_object, want[i].file);
    }
    CU_ASSERT_PTR_NULL(lh_arch_index_find(&gen, LH_KIND_MODEL, "BetaForCausalLM"));

    /* a committed index that matches (in another order, attention names in another case) */
    lh_arch_index committed;
    st = parse(HDR "attention_backend\ttpflash\tlibattn_tp_backend.so\n"
                   "attention_backend\tTPPAGED\tlibattn_tp_backend.so\n"
                   "draft\tmtp\tlibmodel_tp_target.so\n"
                   "draft\teagle3\tlibmodel_tp_target.so\n"
                   "vision_encoder\tAlphaVisionModel\tlibmodel_tp_target.so\n"
                   "model\tEAGLE3LlamaForCausalLM\tlibmodel_tp_target.so\n"
                   "model\tTargetImpl\tlibmodel_tp_target.so\n"
                   "model\tSharedForCausalLM\tlibmodel_tp_alpha.so\n"
                   "model\tAlphaForCausalLM\tlibmodel_tp_alpha.so\n",
               &committed, &err);
    EXPECT_STATUS(st, LH_OK, err);
    char *rep = NULL;
    size_t rlen = 0;
    FILE *mem = open_memstream(&rep, &rlen);
    size_t d = lh_index_diff(&committed, &gen, mem);
    fclose(mem);
    if (d)
        fprintf(stderr, "\n  unexpected diff:\n%s", rep);
    CU_ASSERT_EQUAL(d, 0);
    CU_ASSERT_STRING_EQUAL(rep, "");
    free(rep);
    lh_arch_index_free(&committed);

    /* the generated index written out and read back is the same index */
    rep = NULL;
    mem = open_memstream(&rep, &rlen);
    CU_ASSERT_EQUAL(lh_arch_index_write(mem, gen.rows, gen.n_rows), 0);
    fclose(mem);
    st = parse(rep, &committed, &err);
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(lh_index_diff(&committed, &gen, NULL), 0);
    CU_ASSERT_EQUAL(lh_index_diff(&gen, &committed, NULL), 0);
    lh_arch_index_free(&committed);
    free(rep);

    lh_arch_index_free(&gen);
    free(dir);
    fx_free(&f);
}

static void test_generate_errors(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    lh_arch_index gen;
    lh_err err = {0};
    /* two files registering one name */
    char *dup = fx_dir(&f, "dup", PLUGINS("libmodel_tp_alpha.so", "libmodel_tp_beta.so"), NULL);
    lh_status st = lh_index_generate(dup, false, &gen, &err);
    EXPECT_STATUS(st, LH_E_INDEX_PARSE, err);
    EXPECT_HAS(err.msg, "SharedForCausalLM");
    EXPECT_HAS(err.msg, "libmodel_tp_alpha.so");
    EXPECT_HAS(err.msg, "libmodel_tp_beta.so");
    CU_ASSERT_EQUAL(gen.n_rows, 0);
    lh_arch_index_free(&gen);
    /* a broken plugin: its own error class, naming the file */
    char *abi = fx_dir(&f, "abi", PLUGINS("libmodel_tp_alpha.so", "libmodel_tp_abi_major.so"),
                       NULL);
    st = lh_index_generate(abi, false, &gen, &err);
    EXPECT_STATUS(st, LH_E_ABI, err);
    EXPECT_HAS(err.msg, "libmodel_tp_abi_major.so");
    lh_arch_index_free(&gen);
    char *initfail = fx_dir(&f, "initfail", PLUGINS("libmodel_tp_initfail.so"), NULL);
    st = lh_index_generate(initfail, false, &gen, &err);
    EXPECT_STATUS(st, LH_E_INIT, err);
    EXPECT_HAS(err.msg, "deliberate init failure");
    lh_arch_index_free(&gen);
    /* the registry's rules for GGUF tables: the plugin's init fails unless every bad table is
     * refused and the table with stacked experts kept (tests/plugins/test_plugin.c) */
    char *rules = fx_dir(&f, "rules", PLUGINS("libmodel_tp_gguf_rules.so"), NULL);
    logcap_start(); /* the refusals are logged */
    st = lh_index_generate(rules, false, &gen, &err);
    logcap_stop();
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(gen.n_rows, 1); /* gguf tprules */
    lh_arch_index_free(&gen);
    free(rules);
    /* insecure files are refused unless waived */
    char *insecure = fx_dir(&f, "insecure", NULL, NULL);
    copy_plugin(insecure, "libmodel_tp_alpha.so", NULL, 0666);
    st = lh_index_generate(insecure, false, &gen, &err);
    EXPECT_STATUS(st, LH_E_INSECURE, err);
    lh_arch_index_free(&gen);
    logcap_start(); /* the waiver is logged; keep it off stderr */
    st = lh_index_generate(insecure, true, &gen, &err);
    logcap_stop();
    EXPECT_STATUS(st, LH_OK, err);
    CU_ASSERT_EQUAL(gen.n_rows, 2);
    lh_arch_index_free(&gen);
    /* a missing dir */
    char *none = join(f.root, "none");
    st = lh_index_generate(none, false, &gen, &err);
    EXPECT_STATUS(st, LH_E_IO, err);
    EXPECT_HAS(err.msg, none);
    lh_arch_index_free(&gen);
    free(none);
    free(insecure);
    free(initfail);
    free(abi);
    free(dup);
    fx_free(&f);
}

static void test_diff(void)
{
    lh_arch_index expected, actual;
    lh_err err = {0};
    lh_status st = parse(HDR "model\tSame\tlibmodel_a.so\n"          /* line 2 */
                             "model\tStale\tlibmodel_a.so\n"         /* line 3 */
                             "model\tMoved\tlibmodel_a.so\n"         /* line 4 */
                             "attention_backend\tPaged\tlibattn_x.so\n", /* line 5 */
                         &expected, &err);
    EXPECT_STATUS(st, LH_OK, err);
    lh_arch_index_parse(HDR "model\tSame\tlibmodel_a.so\n"
                            "model\tMoved\tlibmodel_b.so\n"
                            "model\tNew\tlibmodel_b.so\n"
                            "draft\tStale\tlibmodel_a.so\n"
                            "attention_backend\tpaged\tlibattn_x.so\n",
                        "/gen/(generated)", &actual, &err);
    CU_ASSERT_EQUAL(actual.n_rows, 5);
    char *rep = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&rep, &len);
    size_t d = lh_index_diff(&expected, &actual, mem);
    fclose(mem);
    /* New and draft Stale missing, model Stale stale, Moved mismatched */
    CU_ASSERT_EQUAL(d, 4);
    EXPECT_HAS(rep, "missing from /idx/arch_index.tsv: model New -> libmodel_b.so");
    EXPECT_HAS(rep, "missing from /idx/arch_index.tsv: draft Stale -> libmodel_a.so");
    EXPECT_HAS(rep, "stale in /idx/arch_index.tsv:3: model Stale -> libmodel_a.so");
    EXPECT_HAS(rep, "/idx/arch_index.tsv:4: model Moved names libmodel_a.so, but libmodel_b.so "
                    "registers it");
    EXPECT_LACKS(rep, "Same");
    EXPECT_LACKS(rep, "Paged");
    free(rep);

    /* the other direction: every difference is seen from the other side too */
    rep = NULL;
    mem = open_memstream(&rep, &len);
    d = lh_index_diff(&actual, &expected, mem);
    fclose(mem);
    CU_ASSERT_EQUAL(d, 4);
    EXPECT_HAS(rep, "stale in /gen/(generated):4: model New -> libmodel_b.so");
    EXPECT_HAS(rep, "stale in /gen/(generated):5: draft Stale");
    EXPECT_HAS(rep, "missing from /gen/(generated): model Stale -> libmodel_a.so");
    EXPECT_HAS(rep, "model Moved names libmodel_b.so, but libmodel_a.so registers it");
    free(rep);
    /* a NULL report still counts */
    CU_ASSERT_EQUAL(lh_index_diff(&expected, &actual, NULL), 4);
    CU_ASSERT_EQUAL(lh_index_diff(&expected, &expected, NULL), 0);
    lh_arch_index_free(&expected);
    lh_arch_index_free(&actual);
}

/* The committed arch_index.tsv and the built-in plugins agree (DESIGN §3 drift check). */
static void test_builtin_index_matches_plugins(void)
{
    const char *dir = lh_test_env("LH_BUILTIN_PLUGINS");
    lh_arch_index committed, gen;
    lh_err err = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/arch_index.tsv", lh_test_env("LH_SOURCE_ROOT"));
    lh_status st = lh_arch_index_load(path, &committed, &err);
    EXPECT_STATUS(st, LH_OK, err);
    if (st != LH_OK)
        return;
    st = lh_index_generate(dir, false, &gen, &err);
    EXPECT_STATUS(st, LH_OK, err);
    if (st == LH_OK) {
        char *rep = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&rep, &len);
        size_t d = lh_index_diff(&committed, &gen, mem);
        fclose(mem);
        if (d)
            fprintf(stderr, "\n  committed index and built-in plugins disagree:\n%s", rep);
        CU_ASSERT_EQUAL(d, 0);
        free(rep);
        lh_arch_index_free(&gen);
    }
    lh_arch_index_free(&committed);
}

static CU_TestInfo parse_tests[] = {
    {"good index", test_good},
    {"header missing", test_header_missing},
    {"header version", test_header_version},
    {"field count with line", test_field_count},
    {"unknown kind did-you-mean", test_unknown_kind},
    {"shared_object bare name", test_shared_object_bare},
    {"duplicate names both lines", test_duplicate},
    {"comments, blank lines, CRLF", test_comments_blank_crlf},
    {"attention_backend case-insensitive", test_attention_case},
    {"kind names", test_kind_names},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo file_tests[] = {
    {"load: file, missing, NUL, errors", test_load_file},
    {"load: larger than the first buffer", test_load_large},
    {"write round-trip", test_write_roundtrip},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo gen_tests[] = {
    {"generate from test plugins", test_generate},
    {"generate errors", test_generate_errors},
    {"diff both directions", test_diff},
    {"built-in index matches plugins", test_builtin_index_matches_plugins},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"index: parse", NULL, NULL, NULL, NULL, parse_tests},
    {"index: files", NULL, NULL, NULL, NULL, file_tests},
    {"index: generate and diff", NULL, NULL, NULL, NULL, gen_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
