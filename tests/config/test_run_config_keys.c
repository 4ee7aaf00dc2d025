/* The run-config key table: every key round-trips through YAML, --set and explain's JSON with
 * its default; range and enum errors name the key and the accepted values; the lists made from
 * the table (known keys, settable keys) and docs/run-config.md's key reference agree with it.
 * LH_RC_KEYS_PRINT=1 prints the key reference (for docs/run-config.md) and exits. */
#include "config/run_config.h"
#include "config/run_config_keys.h"
#include "core/strutil.h"
#include "llmhost.h"

#include "runner.h"

#include <CUnit/CUnit.h>
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK_BEGIN "<!-- run-config keys: generated from host/config/run_config_keys.c -->\n"
#define MARK_END "<!-- end of run-config keys -->\n"

static bool is_leaf(const lh_rc_key *k)
{
    return k->type != LH_RC_SECTION && k->type != LH_RC_LIST && k->off != SIZE_MAX;
}

/* A value other than the default, as text, and the JSON explain must show for it. */
static void sample(const lh_rc_key *k, const lh_run_config *fresh, char *text, size_t n,
                   json_t **want)
{
    switch (k->type) {
    case LH_RC_BOOL: {
        json_t *d = lh_rc_key_value_json(fresh, k);
        bool b = !json_is_true(d);
        json_decref(d);
        snprintf(text, n, "%s", b ? "true" : "false");
        *want = json_boolean(b);
        break;
    }
    case LH_RC_INT:
        snprintf(text, n, "7");
        *want = json_integer(7);
        break;
    case LH_RC_FRACTION:
        snprintf(text, n, "0.25");
        *want = json_real(0.25);
        break;
    case LH_RC_ENUM: {
        size_t last = k->n_names - 1;
        snprintf(text, n, "%s", k->names[last]);
        if (k->flags & LH_RC_DTYPE_VALUES)
            *want = json_string(lh_rc_kv_dtype_str((lh_dtype)k->values[last]));
        else
            *want = json_string(k->names[last]);
        break;
    }
    case LH_RC_STRING:
        snprintf(text, n, "%s", (k->flags & LH_RC_LOWER) ? "MiXed" : "mixed");
        *want = json_string("mixed");
        break;
    case LH_RC_DTYPE:
        snprintf(text, n, "bfloat16");
        *want = json_string("bfloat16");
        break;
    case LH_RC_DEVICE:
        snprintf(text, n, "cuda:3");
        *want = json_string("cuda:3");
        break;
    default:
        text[0] = '\0';
        *want = json_null();
        break;
    }
}

/* YAML that sets k (and the keys its section requires) to `value`; *line, *col: where the
 * value stands. */
static void yaml_for(const lh_rc_key *k, const char *value, char *buf, size_t n, int *line,
                     int *col)
{
    const char *dot = strchr(k->name, '.');
    if (!dot) {
        snprintf(buf, n, "%s: %s\n", k->name, value);
        *line = 1;
        *col = (int)strlen(k->name) + 3;
        return;
    }
    const char *leaf = dot + 1;
    int off = snprintf(buf, n, "%.*s:\n", (int)(dot - k->name), k->name);
    int l = 2;
    if (strncmp(k->name, "sparse_attention.", 17) == 0) {
        off += snprintf(buf + off, n - (size_t)off, "  algorithm: topk_blocks\n");
        l++;
        if (strcmp(leaf, "top_k") != 0) {
            off += snprintf(buf + off, n - (size_t)off, "  top_k: 1\n");
            l++;
        }
    }
    snprintf(buf + off, n - (size_t)off, "  %s: %s\n", leaf, value);
    *line = l;
    *col = 2 + (int)strlen(leaf) + 3;
}

/* Where explain shows k's value: root[name].value, or section[leaf]. */
static const json_t *json_value_of(const json_t *j, const lh_rc_key *k)
{
    const char *dot = strchr(k->name, '.');
    if (!dot && k->json_rank == 0) { /* folded into its owner: attn_backend_fallback */
        for (size_t i = 0; i < lh_rc_n_keys; i++) {
            const char *owner = lh_rc_keys[i].name;
            size_t n = strlen(owner);
            if (lh_rc_keys[i].json_rank > 0 && strncmp(k->name, owner, n) == 0 &&
                k->name[n] == '_')
                return json_object_get(json_object_get(j, owner), k->name + n + 1);
        }
        return NULL;
    }
    if (!dot)
        return json_object_get(json_object_get(j, k->name), "value");
    char sec[64];
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - k->name), k->name);
    const char *leaf = dot + 1;
    if (k->flags & LH_RC_BOTH) /* shown as the key with the same storage (k_dtype) */
        for (size_t i = 0; i < lh_rc_n_keys; i++)
            if (lh_rc_keys[i].off == k->off && !(lh_rc_keys[i].flags & LH_RC_BOTH))
                leaf = strchr(lh_rc_keys[i].name, '.') + 1;
    return json_object_get(json_object_get(j, sec), leaf);
}

static void check_json(const json_t *got, const json_t *want, const char *what)
{
    bool ok = got && json_equal((json_t *)got, (json_t *)want);
    if (!ok) {
        char *g = got ? json_dumps(got, JSON_ENCODE_ANY) : NULL;
        char *w = json_dumps(want, JSON_ENCODE_ANY);
        fprintf(stderr, "\n  %s: got %s, want %s\n", what, g ? g : "(none)", w ? w : "?");
        free(g);
        free(w);
    }
    CU_ASSERT(ok);
}

static void test_round_trip(void)
{
    size_t n_yaml = 0, n_set = 0;
    for (size_t i = 0; i < lh_rc_n_keys; i++) {
        const lh_rc_key *k = &lh_rc_keys[i];
        CU_ASSERT_PTR_NOT_NULL(k->help);
        CU_ASSERT_PTR_NOT_NULL(k->def);
        if (!is_leaf(k))
            continue;
        lh_run_config fresh;
        lh_run_config_init(&fresh);
        /* the default: what explain shows of a fresh config */
        json_t *j = lh_run_config_to_json(&fresh);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        json_t *def = lh_rc_key_value_json(&fresh, k);
        const json_t *shown = json_value_of(j, k);
        if (strncmp(k->name, "sparse_attention.top_k", 22) != 0) /* null while disabled */
            check_json(shown, def, k->name);
        json_decref(def);
        json_decref(j);
        char text[64];
        json_t *want;
        sample(k, &fresh, text, sizeof text, &want);
        if (k->from & LH_RC_YAML) {
            char yaml[256];
            int line, col;
            yaml_for(k, text, yaml, sizeof yaml, &line, &col);
            lh_run_config rc;
            lh_run_config_init(&rc);
            lh_err err = {0};
            lh_status st = lh_run_config_load_string(&rc, yaml, "keys.yaml", &err);
            if (st)
                fprintf(stderr, "\n  %s: %s\n", yaml, err.msg);
            CU_ASSERT_EQUAL(st, LH_OK);
            json_t *v = lh_rc_key_value_json(&rc, k);
            check_json(v, want, yaml);
            json_decref(v);
            json_t *jr = lh_run_config_to_json(&rc);
            check_json(json_value_of(jr, k), want, yaml);
            json_decref(jr);
            /* sections record their own origin; plain keys the value's position */
            char buf[256], exp[64];
            lh_value_origin_str(&rc, lh_rc_key_origin(&rc, k), buf, sizeof buf);
            if (strncmp(k->name, "sparse_attention.", 17) == 0)
                snprintf(exp, sizeof exp, "keys.yaml:2:3");
            else
                snprintf(exp, sizeof exp, "keys.yaml:%d:%d", line, col);
            if (strcmp(buf, exp) != 0)
                fprintf(stderr, "\n  %s: origin %s, want %s\n", k->name, buf, exp);
            CU_ASSERT_STRING_EQUAL(buf, exp);
            lh_run_config_free(&rc);
            n_yaml++;
        }
        if (k->from & LH_RC_SET) {
            char kv[128];
            snprintf(kv, sizeof kv, "%s=%s", k->name, text);
            lh_run_config rc;
            lh_run_config_init(&rc);
            lh_err err = {0};
            CU_ASSERT_EQUAL(lh_run_config_set(&rc, kv, &err), LH_OK);
            json_t *v = lh_rc_key_value_json(&rc, k);
            check_json(v, want, kv);
            json_decref(v);
            char buf[64];
            CU_ASSERT_STRING_EQUAL(lh_value_origin_str(&rc, lh_rc_key_origin(&rc, k), buf,
                                                       sizeof buf), "flag");
            json_t *jr = lh_run_config_to_json(&rc);
            check_json(json_value_of(jr, k), want, kv);
            json_decref(jr);
            lh_run_config_free(&rc);
            n_set++;
        }
        json_decref(want);
        lh_run_config_free(&fresh);
    }
    CU_ASSERT(n_yaml >= 20);
    CU_ASSERT(n_set >= 18);
}

static void expect_err(lh_status st, lh_status code, const lh_err *err, const char *a,
                       const char *b, const char *what)
{
    CU_ASSERT_EQUAL(st, code);
    bool ok = strstr(err->msg, a) && (!b || strstr(err->msg, b));
    if (!ok)
        fprintf(stderr, "\n  %s: message '%s' lacks '%s' / '%s'\n", what, err->msg, a,
                b ? b : "");
    CU_ASSERT(ok);
}

/* Out-of-range and unknown enum values, from YAML (LH_E_CONFIG at FILE:LINE:COL) and --set
 * (LH_E_USAGE naming --KEY). */
static void test_range_and_enum_errors(void)
{
    for (size_t i = 0; i < lh_rc_n_keys; i++) {
        const lh_rc_key *k = &lh_rc_keys[i];
        if (!is_leaf(k))
            continue;
        const char *bad = NULL;
        char want[512];
        if (k->type == LH_RC_INT) {
            bad = "0";
            snprintf(want, sizeof want, "0 must be > 0");
        } else if (k->type == LH_RC_FRACTION) {
            bad = "1.5";
            snprintf(want, sizeof want, "1.5 must be in (0, 1]");
        } else if (k->type == LH_RC_ENUM) {
            bad = "bogus";
            char list[256];
            lh_join_names(list, sizeof list, k->names, k->n_names);
            snprintf(want, sizeof want, "'bogus' is not one of %s", list);
        } else if (k->type == LH_RC_BOOL) {
            bad = "maybe";
            snprintf(want, sizeof want, "'maybe' is not a boolean");
        }
        if (!bad)
            continue;
        char prefix[160];
        if (k->from & LH_RC_YAML) {
            char yaml[256];
            int line, col;
            yaml_for(k, bad, yaml, sizeof yaml, &line, &col);
            lh_run_config rc;
            lh_run_config_init(&rc);
            lh_err err = {0};
            lh_status st = lh_run_config_load_string(&rc, yaml, "keys.yaml", &err);
            snprintf(prefix, sizeof prefix, "keys.yaml:%d:%d: %s: ", line, col, k->name);
            expect_err(st, LH_E_CONFIG, &err, prefix, want, yaml);
            lh_run_config_free(&rc);
        }
        if (k->from & LH_RC_SET) {
            char kv[128];
            snprintf(kv, sizeof kv, "%s=%s", k->name, bad);
            lh_run_config rc;
            lh_run_config_init(&rc);
            json_t *before = lh_run_config_to_json(&rc);
            lh_err err = {0};
            lh_status st = lh_run_config_set(&rc, kv, &err);
            snprintf(prefix, sizeof prefix, "--%s: ", k->name);
            expect_err(st, LH_E_USAGE, &err, prefix, want, kv);
            json_t *after = lh_run_config_to_json(&rc); /* nothing changed */
            CU_ASSERT(json_equal(before, after));
            json_decref(before);
            json_decref(after);
            lh_run_config_free(&rc);
        }
    }
}

/* The known-keys and settable-keys lists name every key of the table that belongs there. */
static void test_lists_from_table(void)
{
    static const char *const sections[] = {"", "kv_cache.", "quant.", "sparse_attention.",
                                           "speculative.", "model_impl.", "quant.rules[]."};
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        const char *names[64];
        size_t n = lh_rc_key_names(sections[s], LH_RC_YAML, false, names, 64);
        CU_ASSERT(n > 0);
        char yaml[256];
        if (!*sections[s])
            snprintf(yaml, sizeof yaml, "zzz_not_a_key: 1\n");
        else if (strcmp(sections[s], "quant.rules[].") == 0)
            snprintf(yaml, sizeof yaml, "quant:\n  rules:\n    - {zzz_not_a_key: 1}\n");
        else
            snprintf(yaml, sizeof yaml, "%.*s:\n  zzz_not_a_key: 1\n",
                     (int)strlen(sections[s]) - 1, sections[s]);
        lh_run_config rc;
        lh_run_config_init(&rc);
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_run_config_load_string(&rc, yaml, "keys.yaml", &err), LH_E_CONFIG);
        char list[512];
        lh_join_names(list, sizeof list, names, n);
        if (!strstr(err.msg, list))
            fprintf(stderr, "\n  %s: '%s' lacks '%s'\n", yaml, err.msg, list);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, list));
        lh_run_config_free(&rc);
    }
    const char *settable[64];
    size_t n = lh_rc_key_names("", LH_RC_SET, true, settable, 64);
    lh_run_config rc;
    lh_run_config_init(&rc);
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_run_config_set(&rc, "zzz_not_a_key=1", &err), LH_E_USAGE);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, settable[i]));
        CU_ASSERT_PTR_NOT_NULL(lh_rc_key_find(settable[i]));
    }
    lh_run_config_free(&rc);
    /* names are unique */
    for (size_t i = 0; i < lh_rc_n_keys; i++)
        for (size_t j = i + 1; j < lh_rc_n_keys; j++)
            CU_ASSERT(strcmp(lh_rc_keys[i].name, lh_rc_keys[j].name) != 0);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

/* docs/run-config.md embeds the key reference exactly as the table prints it. */
static void test_docs_list_every_key(void)
{
    const char *root = getenv("LH_SOURCE_ROOT");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/run-config.md", root);
    char *doc = read_all(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    char *md = lh_rc_keys_markdown();
    CU_ASSERT_PTR_NOT_NULL_FATAL(md);
    const char *b = strstr(doc, MARK_BEGIN);
    const char *e = b ? strstr(b, MARK_END) : NULL;
    CU_ASSERT_PTR_NOT_NULL(e);
    if (e) {
        b += strlen(MARK_BEGIN);
        bool same = (size_t)(e - b) == strlen(md) && memcmp(b, md, strlen(md)) == 0;
        if (!same)
            fprintf(stderr, "\n  docs/run-config.md's run-config keys differ from the table; "
                            "LH_RC_KEYS_PRINT=1 %s prints them\n", "test_run_config_keys");
        CU_ASSERT(same);
    }
    for (size_t i = 0; i < lh_rc_n_keys; i++) {
        char cell[128];
        snprintf(cell, sizeof cell, "| `%s` |", lh_rc_keys[i].name);
        CU_ASSERT_PTR_NOT_NULL(strstr(doc, cell));
    }
    free(md);
    free(doc);
}

/* The public view of the table (llmhost.h), which the CLI's flags and --help are made from. */
static void test_public_key_info(void)
{
    size_t n = 0, flags = 0;
    lh_run_config_key_info k = {.struct_size = sizeof k};
    for (; lh_run_config_key_at(n, &k); n++) {
        const lh_rc_key *e = &lh_rc_keys[n];
        CU_ASSERT_STRING_EQUAL(k.name, e->name);
        CU_ASSERT_PTR_EQUAL(k.flag, e->cli);
        CU_ASSERT_EQUAL(k.settable, (e->from & LH_RC_SET) != 0);
        CU_ASSERT_EQUAL(k.yaml, (e->from & LH_RC_YAML) != 0);
        CU_ASSERT_PTR_NOT_NULL(k.help);
        CU_ASSERT_PTR_NOT_NULL(k.default_value);
        if (k.flag) {
            flags++;
            CU_ASSERT_EQUAL(strncmp(k.flag, "--", 2), 0);
            /* a flag is an override spelled with dashes: lh_run_config_set must take it */
            CU_ASSERT_TRUE(k.settable);
            CU_ASSERT_EQUAL(k.flag_takes_value, e->type != LH_RC_BOOL);
        }
        k = (lh_run_config_key_info){.struct_size = sizeof k};
    }
    CU_ASSERT_EQUAL(n, lh_rc_n_keys);
    CU_ASSERT_EQUAL(flags, 12);
    CU_ASSERT_EQUAL(lh_run_config_key_at(n, &k), 0);
    CU_ASSERT_EQUAL(lh_run_config_key_at(0, NULL), 0);
    /* a caller that knows only the first fields gets only those */
    struct {
        lh_run_config_key_info k;
        char guard[8];
    } small;
    memset(&small, 0x5a, sizeof small);
    small.k.struct_size = (uint32_t)offsetof(lh_run_config_key_info, flag);
    CU_ASSERT_EQUAL(lh_run_config_key_at(0, &small.k), 1);
    CU_ASSERT_STRING_EQUAL(small.k.name, lh_rc_keys[0].name);
    CU_ASSERT_EQUAL(((unsigned char *)&small.k.flag)[0], 0x5a);
}

static CU_TestInfo key_tests[] = {
    {"lh_run_config_key_at: the table as the embedding API shows it", test_public_key_info},
    {"every key round-trips through YAML, --set and JSON", test_round_trip},
    {"range and enum errors", test_range_and_enum_errors},
    {"known and settable keys come from the table", test_lists_from_table},
    {"docs/run-config.md lists every key", test_docs_list_every_key},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"run_config: key table", NULL, NULL, NULL, NULL, key_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    const char *print = getenv("LH_RC_KEYS_PRINT");
    if (print && *print == '1') {
        char *md = lh_rc_keys_markdown();
        if (!md)
            return 1;
        fputs(MARK_BEGIN, stdout);
        fputs(md, stdout);
        fputs(MARK_END, stdout);
        free(md);
        return 0;
    }
    return lh_test_main(argc, argv, suites);
}
