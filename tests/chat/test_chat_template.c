/* Chat templates (host/chat, lh_chat_template_* in llmhost.h).
 *
 * Exactness: every case of tests/fixtures/chat/cases.json (written by
 * tools/gen_chat_fixtures.py from transformers' apply_chat_template / render_jinja_template)
 * renders byte for byte the same, or raises the same raise_exception message: SmolLM2's
 * official template (also opened from its tokenizer_config.json), the official templates of
 * Qwen2.5-0.5B-Instruct (tools branch), Llama-3.1-8B-Instruct (tools, date_string,
 * builtin_tools), Mistral-7B-Instruct-v0.1 (optional system message) and Llama-2-7b-chat-hf,
 * and a template exercising the whole supported subset.
 *
 * Errors: syntax errors (LH_E_CONFIG with line:col), unsupported constructs and unknown
 * filters/tests/functions/methods (LH_E_UNSUPPORTED, named, with line:col), runtime type errors,
 * bounded nesting, loops, values and output, malformed tokenizer_config.json, bad API
 * arguments, and every prefix of the real templates compiling and rendering without a crash.
 *
 * GGUF: tokenizer.chat_template and the special-token ids of a GGUF file (the fixture converted
 * from SmolLM2's tokenizer_config.json renders its cases as transformers does; the default
 * model's GGUF, when cached, renders as its converted tokenizer_config.json), a file without a
 * template, and one file per bad class (a template that is not a string, not UTF-8 or not Jinja;
 * an id that is not a token id or not an integer; no token list). */
#include "runner.h"
#include "llmhost.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHECK_MSG(err, needle)                                                                 \
    do {                                                                                       \
        bool found_ = strstr((err).msg, (needle)) != NULL;                                     \
        if (!found_)                                                                           \
            fprintf(stderr, "\nmessage '%s' lacks '%s'\n", (err).msg, (needle));               \
        CU_ASSERT(found_);                                                                     \
    } while (0)

static char *fixture_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/chat/%s", lh_test_env("LH_FIXTURES"), name);
    return path;
}

static json_t *load_cases(void)
{
    json_error_t je;
    json_t *root = json_load_file(fixture_path("cases.json"), 0, &je);
    if (!root)
        fprintf(stderr, "cases.json: %d:%d: %s\n", je.line, je.column, je.text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    return root;
}

static char *dump(json_t *v)
{
    if (!v || json_is_null(v))
        return NULL;
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

static void show_diff(const char *fam, const char *name, const char *want, const char *got)
{
    size_t i = 0;
    while (want[i] && got[i] && want[i] == got[i])
        i++;
    fprintf(stderr, "\n%s/%s: differs at byte %zu\n--- want ---\n%s\n--- got ---\n%s\n", fam,
            name, i, want, got);
}

/* renders one case; returns whether it matched */
static bool run_case(const char *fam, lh_chat_template *t, json_t *cs, int64_t now)
{
    const char *name = json_string_value(json_object_get(cs, "name"));
    char *msgs = dump(json_object_get(cs, "messages"));
    char *tools = dump(json_object_get(cs, "tools"));
    char *extra = dump(json_object_get(cs, "extra"));
    lh_chat_render_options opt = {
        .struct_size = sizeof opt,
        .add_generation_prompt = json_is_true(json_object_get(cs, "add_generation_prompt")),
        .tools_json = tools,
        .extra_json = extra,
        .fixed_now = true,
        .now_unix = now,
    };
    char *out = NULL;
    size_t len = 0;
    lh_err err;
    lh_status st = lh_chat_template_render_json(t, msgs, &opt, &out, &len, &err);
    bool ok;
    json_t *want = json_object_get(cs, "expected");
    if (want) {
        ok = st == LH_OK && len == json_string_length(want) &&
             memcmp(out, json_string_value(want), len) == 0;
        if (!ok) {
            if (st != LH_OK)
                fprintf(stderr, "\n%s/%s: status %d: %s\n", fam, name, st, err.msg);
            else
                show_diff(fam, name, json_string_value(want), out);
        }
    } else {
        const char *msg = json_string_value(json_object_get(cs, "error"));
        ok = st == LH_E_USAGE && out == NULL && msg && strstr(err.msg, msg) &&
             strstr(err.msg, "raised an exception");
        if (!ok)
            fprintf(stderr, "\n%s/%s: wanted raise_exception '%s', got status %d '%s'\n", fam,
                    name, msg ? msg : "?", st, st ? err.msg : out);
    }
    free(out);
    free(msgs);
    free(tools);
    free(extra);
    return ok;
}

static void test_fixtures(void)
{
    json_t *root = load_cases();
    int64_t now = json_integer_value(json_object_get(root, "now_unix"));
    size_t fi, total = 0, passed = 0;
    json_t *fam;
    json_array_foreach(json_object_get(root, "families"), fi, fam) {
        const char *fname = json_string_value(json_object_get(fam, "name"));
        json_t *tmpl = json_object_get(fam, "template");
        char *specials = dump(json_object_get(fam, "special_tokens"));
        lh_chat_template *t = NULL;
        lh_err err;
        lh_status st = lh_chat_template_from_string(json_string_value(tmpl),
                                                    json_string_length(tmpl), specials, &t, &err);
        if (st != LH_OK)
            fprintf(stderr, "\n%s: %s\n", fname, err.msg);
        CU_ASSERT_EQUAL_FATAL(st, LH_OK);
        lh_chat_template *t2 = NULL;
        json_t *cfg = json_object_get(fam, "config");
        if (cfg) {
            CU_ASSERT_EQUAL(lh_chat_template_open(fixture_path(json_string_value(cfg)), &t2, &err),
                            LH_OK);
            CU_ASSERT_STRING_EQUAL(lh_chat_template_source(t2), json_string_value(tmpl));
        }
        size_t ci;
        json_t *cs;
        json_array_foreach(json_object_get(fam, "cases"), ci, cs) {
            total++;
            bool ok = run_case(fname, t, cs, now);
            if (t2)
                ok = run_case(fname, t2, cs, now) && ok;
            CU_ASSERT(ok);
            passed += ok;
        }
        lh_chat_template_free(t);
        lh_chat_template_free(t2);
        free(specials);
    }
    fprintf(stderr, "\nchat fixtures: %zu of %zu cases match transformers\n", passed, total);
    CU_ASSERT(total >= 100);
    json_decref(root);
}

/* the struct-message entry point gives the same as the JSON one */
static void test_struct_messages(void)
{
    lh_chat_template *t = NULL;
    lh_err err;
    CU_ASSERT_EQUAL_FATAL(lh_chat_template_open(fixture_path("smollm2_tokenizer_config.json"),
                                                &t, &err),
                          LH_OK);
    CU_ASSERT_STRING_EQUAL(lh_chat_template_special_token(t, "eos_token"), "<|im_end|>");
    CU_ASSERT_PTR_NULL(lh_chat_template_special_token(t, "mask_token"));
    lh_chat_message m[] = {{"system", "Be kind."}, {"user", "héllo"}};
    lh_chat_render_options opt = {.struct_size = sizeof opt, .add_generation_prompt = true};
    char *out = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(lh_chat_template_render(t, m, 2, &opt, &out, &len, &err), LH_OK);
    const char *want = "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nhéllo"
                       "<|im_end|>\n<|im_start|>assistant\n";
    CU_ASSERT_STRING_EQUAL(out, want);
    CU_ASSERT_EQUAL(len, strlen(want));
    free(out);
    /* no messages: the template's loop renders nothing */
    CU_ASSERT_EQUAL(lh_chat_template_render(t, NULL, 0, NULL, &out, &len, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(out, "");
    free(out);
    /* bad arguments */
    CU_ASSERT_EQUAL(lh_chat_template_render(t, m, 2, &opt, NULL, &len, &err), LH_E_USAGE);
    lh_chat_render_options small = {.struct_size = 4};
    CU_ASSERT_EQUAL(lh_chat_template_render(t, m, 2, &small, &out, &len, &err), LH_E_USAGE);
    CHECK_MSG(err, "struct_size");
    CU_ASSERT_PTR_NULL(out);
    lh_chat_message bad_utf8[] = {{"user", "\xff\xfe"}};
    CU_ASSERT_EQUAL(lh_chat_template_render(t, bad_utf8, 1, &opt, &out, &len, &err), LH_E_USAGE);
    CHECK_MSG(err, "UTF-8");
    lh_chat_message no_content[] = {{"user", NULL}};
    CU_ASSERT_EQUAL(lh_chat_template_render(t, no_content, 1, &opt, &out, &len, &err),
                    LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_chat_template_render_json(t, "[{\"role\": 1", &opt, &out, &len, &err),
                    LH_E_USAGE);
    CHECK_MSG(err, "messages JSON 1:");
    CU_ASSERT_EQUAL(lh_chat_template_render_json(t, "{}", &opt, &out, &len, &err), LH_E_USAGE);
    opt.tools_json = "{\"not\": \"a list\"}";
    CU_ASSERT_EQUAL(lh_chat_template_render_json(t, "[]", &opt, &out, &len, &err), LH_E_USAGE);
    CHECK_MSG(err, "tools JSON");
    opt.tools_json = NULL;
    opt.extra_json = "[1]";
    CU_ASSERT_EQUAL(lh_chat_template_render_json(t, "[]", &opt, &out, &len, &err), LH_E_USAGE);
    CHECK_MSG(err, "extra context");
    lh_chat_template_free(t);
    lh_chat_template_free(NULL);
}

/* compiles src; expects status code and each needle in the message */
static void expect_compile(const char *src, lh_status code, const char *n1, const char *n2)
{
    lh_chat_template *t = NULL;
    lh_err err;
    lh_status st = lh_chat_template_from_string(src, strlen(src), NULL, &t, &err);
    if (st != code)
        fprintf(stderr, "\n'%.80s': status %d (%s), wanted %d\n", src, st, st ? err.msg : "", code);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_PTR_NULL(t);
    if (st != LH_OK) {
        if (n1)
            CHECK_MSG(err, n1);
        if (n2)
            CHECK_MSG(err, n2);
    }
    lh_chat_template_free(t);
}

/* renders src with messages JSON; expects code (LH_OK: output want) */
static void expect_render(const char *src, const char *msgs, lh_status code, const char *want)
{
    lh_chat_template *t = NULL;
    lh_err err;
    lh_status st = lh_chat_template_from_string(src, strlen(src), "{\"bos_token\": \"<s>\"}", &t,
                                                &err);
    if (st != LH_OK)
        fprintf(stderr, "\n'%s': compile status %d: %s\n", src, st, err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    char *out = NULL;
    lh_chat_render_options opt = {.struct_size = sizeof opt, .fixed_now = true};
    st = lh_chat_template_render_json(t, msgs ? msgs : "[]", &opt, &out, NULL, &err);
    if (st != code)
        fprintf(stderr, "\n'%s': status %d (%s), wanted %d\n", src, st, st ? err.msg : out, code);
    CU_ASSERT_EQUAL(st, code);
    if (code == LH_OK && st == LH_OK) {
        if (strcmp(out, want) != 0)
            fprintf(stderr, "\n'%s': got '%s', wanted '%s'\n", src, out, want);
        CU_ASSERT_STRING_EQUAL(out, want);
    } else if (st != LH_OK && want) {
        CHECK_MSG(err, want);
    }
    free(out);
    lh_chat_template_free(t);
}

static void test_syntax_errors(void)
{
    expect_compile("hello\n{% if x %}\n  {{ 1 + }}\n{% endif %}", LH_E_CONFIG, "3:10",
                   "expected an expression");
    expect_compile("{% if x %}never closed", LH_E_CONFIG, "1:4", "never closed");
    expect_compile("{% for x in y %}{% endif %}", LH_E_CONFIG, "1:20", "'endif'");
    expect_compile("a\n\n  {{ 'unterminated }}", LH_E_CONFIG, "3:6", "unterminated string");
    expect_compile("{{ x ", LH_E_CONFIG, "1:1", "unclosed");
    expect_compile("{# no end", LH_E_CONFIG, "1:1", "unclosed comment");
    expect_compile("{{ x $ y }}", LH_E_CONFIG, "1:6", "'$'");
    expect_compile("{% frobnicate %}", LH_E_CONFIG, "1:4", "'frobnicate'");
    expect_compile("{% break %}", LH_E_CONFIG, "1:4", "outside a for loop");
    expect_compile("{{ f(a=1, 2) }}", LH_E_CONFIG, "positional argument after", NULL);
    expect_compile("{% set = 1 %}", LH_E_CONFIG, "a variable name", NULL);
    expect_compile("{{ [1, 2 }}", LH_E_CONFIG, "1:1", "unclosed");
    expect_compile("{{ [1, 2) }}", LH_E_CONFIG, "1:9", "expected ']'");
    expect_compile("{{ x[] }}", LH_E_CONFIG, "empty subscript", NULL);
    expect_compile("{{ 'a\0b' }}", LH_E_CONFIG, "unterminated", NULL); /* strlen stops at NUL */
}

static void test_unsupported(void)
{
    expect_compile("line1\n  {% macro f(x) %}{{ x }}{% endmacro %}", LH_E_UNSUPPORTED, "2:6",
                   "'macro'");
    expect_compile("{% include 'other.j2' %}", LH_E_UNSUPPORTED, "'include'", "1:4");
    expect_compile("{% raw %}{{ x }}{% endraw %}", LH_E_UNSUPPORTED, "'raw'", NULL);
    expect_compile("{{ messages | frobnicate }}", LH_E_UNSUPPORTED, "unknown filter 'frobnicate'",
                   "1:15");
    expect_compile("{{ x is frobnicated }}", LH_E_UNSUPPORTED, "unknown test 'frobnicated'",
                   "1:9");
    expect_compile("{{ (1, 2) }}", LH_E_UNSUPPORTED, "tuples", NULL);
    expect_compile("{% set a, b = 1, 2 %}", LH_E_UNSUPPORTED, "several targets", NULL);
    expect_compile("{% set x %}body{% endset %}", LH_E_UNSUPPORTED, "block 'set'", NULL);
    expect_compile("{% for a, b, c in x %}{% endfor %}", LH_E_UNSUPPORTED, "two loop variables",
                   NULL);
    expect_compile("{{ x(1) }}{{ x.y(2)(3) }}", LH_E_UNSUPPORTED, "not a name", NULL);
    /* runtime: functions and methods outside the subset, named with their position */
    expect_render("\n {{ lipsum(3) }}", NULL, LH_E_UNSUPPORTED, "2:5: unknown function 'lipsum'");
    expect_render("{{ 'abc'.zfill(5) }}", NULL, LH_E_UNSUPPORTED, "method 'zfill' on a string");
    expect_render("{{ [1].append(2) }}", NULL, LH_E_UNSUPPORTED, "method 'append' on a list");
    expect_render("{{ {'a': 1}.pop('a') }}", NULL, LH_E_UNSUPPORTED, "method 'pop' on a dict");
    expect_render("{{ 'x'.startswith() }}", NULL, LH_E_CONFIG, "startswith needs one argument");
    expect_render("{{ 'x'.endswith() }}", NULL, LH_E_CONFIG, "endswith needs one argument");
    expect_render("{{ 'x' | tojson(colour=1) }}", NULL, LH_E_UNSUPPORTED, "no argument 'colour'");
    expect_render("{{ [1] | map('upper') | list }}", NULL, LH_E_UNSUPPORTED, "map with a filter");
    expect_render("{{ {1: 2} }}", NULL, LH_E_UNSUPPORTED, "dict keys");
    expect_render("{{ 9223372036854775807 + 1 }}", NULL, LH_E_UNSUPPORTED, "overflow");
}

static void test_runtime_errors(void)
{
    expect_render("{{ 1 + 'a' }}", NULL, LH_E_CONFIG, "1:6: unsupported operand types for +");
    expect_render("{{ messages[0].role.x }}", NULL, LH_E_CONFIG, "attribute 'role' of an undefined");
    expect_render("{{ nothing.here }}", NULL, LH_E_CONFIG, "1:12");
    expect_render("{{ 1 / 0 }}", NULL, LH_E_CONFIG, "division by zero");
    expect_render("{{ 1 < 'a' }}", NULL, LH_E_CONFIG, "'<' not supported");
    expect_render("{% for x in 3 %}{% endfor %}", NULL, LH_E_CONFIG, "not iterable");
    expect_render("{% set d = {} %}{% set d.x = 1 %}", NULL, LH_E_CONFIG, "not a namespace");
    expect_render("{{ x | tojson }}", NULL, LH_E_CONFIG, "tojson of an undefined");
    expect_render("{{ raise_exception('custom: ' ~ messages | length) }}", "[{}]", LH_E_USAGE,
                  "1:4 raised an exception: custom: 1");
    expect_render("{{ 'a'.split('') }}", NULL, LH_E_CONFIG, "empty separator");
    /* and what works: undefined prints nothing, missing keys are undefined */
    expect_render("[{{ x }}{{ messages[5] }}{{ {'a': 1}.b }}{{ none.x }}]", NULL, LH_OK, "[]");
    expect_render("{{ bos_token }}{{ strftime_now('%Y') }}", NULL, LH_OK, "<s>1970");
    expect_render("{{ 1e308 * 10 }}", NULL, LH_E_UNSUPPORTED, "not finite");
    expect_compile("{{ 1e999 }}", LH_E_UNSUPPORTED, "not finite", "1:4");
    expect_render("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-7 }} {{ -0.0 }} {{ 100.0 }}",
                  NULL, LH_OK, "0.30000000000000004 1e+16 1.5e-07 -0.0 100.0");
    expect_render("{{ \"it's\" }} {{ [\"it's\", 'say \"x\"', 'both \\'\"'] }}", NULL, LH_OK,
                  "it's [\"it's\", 'say \"x\"', 'both \\'\"']");
    expect_render("{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' in 'abc' != false }}{{ 3 > 2 == 2 }}", NULL,
                  LH_OK, "TrueFalseTrueTrue");
    expect_render("{{ 1 if true else 2 if false else 3 }}{{ -3 | abs }}{{ ' a  b '.split(none, 1) }}",
                  NULL, LH_OK, "13['a', 'b ']");
    expect_render("{{ 'Ünï straße' | upper }} {{ 'hello-world foo_bar' | title }} {{ 'aBC'.capitalize() }}",
                  NULL, LH_OK, "ÜNÏ STRASSE Hello-World Foo_bar Abc");
    /* the smallest integer modulo -1 (a trap in C) */
    expect_render("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}", NULL, LH_OK, "True");
    expect_render("  {%+ if true %}x{% endif +%}\ny", NULL, LH_OK, "  x\ny");
    expect_render("a\r\nb{# c #}\r\n", NULL, LH_OK, "a\nb");
}

static void test_bounds(void)
{
    /* deep expression nesting: bounded, not a stack overflow */
    size_t depth = 100000;
    char *src = malloc(2 * depth + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    size_t n = 0;
    n += (size_t)sprintf(src, "{{ ");
    for (size_t i = 0; i < depth; i++)
        src[n++] = '(';
    src[n++] = '1';
    for (size_t i = 0; i < depth; i++)
        src[n++] = ')';
    strcpy(src + n, " }}");
    expect_compile(src, LH_E_UNSUPPORTED, "nesting deeper than", NULL);
    /* unary and not chains, list nesting, nested blocks */
    n = (size_t)sprintf(src, "{{ ");
    for (size_t i = 0; i < depth; i++)
        src[n++] = '-';
    strcpy(src + n, "1 }}");
    expect_compile(src, LH_E_UNSUPPORTED, "nesting deeper than", NULL);
    n = (size_t)sprintf(src, "{{ ");
    for (size_t i = 0; i < depth / 2; i++)
        src[n++] = '[';
    for (size_t i = 0; i < depth / 2; i++)
        src[n++] = ']';
    strcpy(src + n, " }}");
    expect_compile(src, LH_E_UNSUPPORTED, "nesting deeper than", NULL);
    free(src);
    size_t blocks = 5000;
    src = malloc(blocks * 24 + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    n = 0;
    for (size_t i = 0; i < blocks; i++)
        n += (size_t)sprintf(src + n, "{%% if true %%}");
    src[n] = 0;
    expect_compile(src, LH_E_UNSUPPORTED, "nesting deeper than", NULL);
    free(src);
    /* loops, output and value depth */
    expect_render("{% for i in range(10000000) %}{% endfor %}", NULL, LH_E_UNSUPPORTED,
                  "range longer than");
    expect_render("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(2) %}"
                  "{% endfor %}{% endfor %}{% endfor %}",
                  NULL, LH_E_UNSUPPORTED, "loop iterations");
    expect_render("{{ 'x' * 100000000 }}", NULL, LH_E_UNSUPPORTED, "a string longer than");
    expect_render("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}"
                  "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v | tojson }}",
                  NULL, LH_E_UNSUPPORTED, "nested deeper than");
    expect_render("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}"
                  "{% set ns.v = [ns.v] %}{% endfor %}",
                  NULL, LH_E_UNSUPPORTED, "nested deeper than 256");
    expect_render("{% set ns = namespace(v=[]) %}{% for i in range(200) %}"
                  "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v == ns.v }}{{ ns.v | length }}",
                  NULL, LH_OK, "True1");
    expect_render("{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = {'a': ns.d} %}"
                  "{% endfor %}",
                  NULL, LH_E_UNSUPPORTED, "nested deeper than");
    expect_render("{% set ns = namespace(a=1) %}{% set ns.self = ns %}", NULL, LH_E_UNSUPPORTED,
                  "contains itself");
    expect_render("{% set ns = namespace(a=1) %}{% set ns.l = [[ns]] %}", NULL, LH_E_UNSUPPORTED,
                  "contains itself");
}

static void test_config_files(void)
{
    char *dir = lh_test_mkdtemp();
    lh_chat_template *t = NULL;
    lh_err err;
    /* missing file */
    CU_ASSERT_EQUAL(lh_chat_template_open(dir, &t, &err), LH_E_IO);
    CHECK_MSG(err, "tokenizer_config.json");
    CU_ASSERT_PTR_NULL(t);
    struct {
        const char *text;
        lh_status code;
        const char *needle;
    } bad[] = {
        {"{\"chat_template\": \"x\",\n  \"bos_token\": }", LH_E_CONFIG, ":2:"},
        {"[1, 2]", LH_E_CONFIG, "not an object"},
        {"{\"bos_token\": \"<s>\"}", LH_E_CONFIG, "no chat_template"},
        {"{\"chat_template\": 5}", LH_E_CONFIG, "a string or a list"},
        {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"t\"}]}", LH_E_CONFIG,
         "no template named 'default'"},
        {"{\"chat_template\": [{\"name\": \"default\"}]}", LH_E_CONFIG, "chat_template[0]"},
        {"{\"chat_template\": \"x\", \"eos_token\": 7}", LH_E_CONFIG, "eos_token"},
        {"{\"chat_template\": \"{% if %}\"}", LH_E_CONFIG, "chat_template: chat template 1:7"},
        {"{\"chat_template\": \"a\", \"chat_template\": \"b\"}", LH_E_CONFIG, "duplicate"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CU_ASSERT_EQUAL_FATAL(lh_test_write_file(dir, "tokenizer_config.json", bad[i].text), 0);
        lh_status st = lh_chat_template_open(dir, &t, &err);
        if (st != bad[i].code)
            fprintf(stderr, "\ncase %zu: status %d: %s\n", i, st, err.msg);
        CU_ASSERT_EQUAL(st, bad[i].code);
        CU_ASSERT_PTR_NULL(t);
        CHECK_MSG(err, bad[i].needle);
    }
    /* a list of named templates: "default" is used; AddedToken objects give their content;
     * a config.json path finds the file next to it */
    CU_ASSERT_EQUAL_FATAL(
        lh_test_write_file(dir, "tokenizer_config.json",
                           "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                           " {\"name\": \"default\", \"template\": \"{{ bos_token }}D\"}],"
                           " \"bos_token\": {\"content\": \"<B>\", \"lstrip\": false}}"),
        0);
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    /* a model path that does not exist is said to be missing (lh_model_path_check) */
    CU_ASSERT_EQUAL(lh_chat_template_open(cfg, &t, &err), LH_E_IO);
    CHECK_MSG(err, "does not exist");
    CU_ASSERT_EQUAL_FATAL(lh_test_write_file(dir, "config.json", "{}"), 0);
    CU_ASSERT_EQUAL_FATAL(lh_chat_template_open(cfg, &t, &err), LH_OK);
    char *out = NULL;
    CU_ASSERT_EQUAL(lh_chat_template_render_json(t, "[]", NULL, &out, NULL, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(out, "<B>D");
    free(out);
    lh_chat_template_free(t);
    t = NULL;
    CU_ASSERT_EQUAL(lh_chat_template_load_json("{", 1, "mem", &t, &err), LH_E_CONFIG);
    CHECK_MSG(err, "mem:1:");
    CU_ASSERT_EQUAL(lh_chat_template_from_string("x", 1, "[1]", &t, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_chat_template_open(NULL, &t, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_chat_template_open(dir, NULL, &err), LH_E_USAGE);
    lh_test_rmtree(dir);
    free(dir);
}

/* every prefix of every fixture template (and of a mutated copy) compiles or fails cleanly,
 * and what compiles renders or fails cleanly: never a crash (ASan/UBSan run this too) */
static void test_prefixes_never_crash(void)
{
    json_t *root = load_cases();
    size_t fi;
    json_t *fam;
    size_t compiled = 0, tried = 0;
    json_array_foreach(json_object_get(root, "families"), fi, fam) {
        json_t *tmpl = json_object_get(fam, "template");
        const char *src = json_string_value(tmpl);
        size_t len = json_string_length(tmpl);
        json_t *cs = json_array_get(json_object_get(fam, "cases"), 0);
        char *msgs = dump(json_object_get(cs, "messages"));
        char *copy = malloc(len + 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
        size_t step = len > 2000 ? 7 : 1;
        for (int variant = 0; variant < 2; variant++) {
            memcpy(copy, src, len);
            if (variant) /* swap braces and quotes for a differently broken template */
                for (size_t i = 0; i < len; i++)
                    copy[i] = copy[i] == '}' ? '{' : copy[i] == '\'' ? '"' : copy[i];
            for (size_t cut = 0; cut <= len; cut += step) {
                lh_chat_template *t = NULL;
                lh_err err;
                tried++;
                if (lh_chat_template_from_string(copy, cut, NULL, &t, &err) != LH_OK) {
                    CU_ASSERT(err.msg[0] != 0);
                    continue;
                }
                compiled++;
                char *out = NULL;
                lh_chat_render_options opt = {.struct_size = sizeof opt, .fixed_now = true};
                lh_status st = lh_chat_template_render_json(t, msgs, &opt, &out, NULL, &err);
                CU_ASSERT(st == LH_OK ? out != NULL : out == NULL);
                free(out);
                lh_chat_template_free(t);
            }
        }
        free(copy);
        free(msgs);
    }
    CU_ASSERT(compiled > 0 && tried > compiled);
    json_decref(root);
}

/* ---- GGUF files ------------------------------------------------------------------------------ */

static const char *gguf_fixture(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/gguf/%s", lh_test_env("LH_FIXTURES"), name);
    return path;
}

/* A tiny GGUF writer (v3, metadata only): keys with string, UINT32 or string-array values. */
typedef struct gw {
    unsigned char b[8192];
    size_t n;
    uint64_t kvs;
} gw;

static void gw_put(gw *w, const void *p, size_t n)
{
    CU_ASSERT_FATAL(w->n + n <= sizeof w->b);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void gw_u32(gw *w, uint32_t v) { gw_put(w, &v, 4); }

static void gw_raw_str(gw *w, const char *s, size_t n)
{
    uint64_t len = n;
    gw_put(w, &len, 8);
    gw_put(w, s, n);
}

static void gw_key(gw *w, const char *key, uint32_t type)
{
    gw_raw_str(w, key, strlen(key));
    gw_u32(w, type);
    w->kvs++;
}

static void gw_string(gw *w, const char *key, const char *s, size_t n)
{
    gw_key(w, key, 8);
    gw_raw_str(w, s, n);
}

static void gw_uint(gw *w, const char *key, uint32_t v)
{
    gw_key(w, key, 4);
    gw_u32(w, v);
}

static void gw_tokens(gw *w, size_t n, const char *const *toks)
{
    gw_key(w, "tokenizer.ggml.tokens", 9);
    gw_u32(w, 8);
    uint64_t c = n;
    gw_put(w, &c, 8);
    for (size_t i = 0; i < n; i++)
        gw_raw_str(w, toks[i], strlen(toks[i]));
}

static void gw_write(const gw *w, const char *path)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    uint32_t version = 3;
    uint64_t tensors = 0;
    fwrite("GGUF", 1, 4, f);
    fwrite(&version, 4, 1, f);
    fwrite(&tensors, 8, 1, f);
    fwrite(&w->kvs, 8, 1, f);
    fwrite(w->b, 1, w->n, f);
    fclose(f);
}

/* tokenizer.chat_template and the special tokens of a GGUF file, through lh_chat_template_open
 * (a GGUF source) and lh_chat_template_load_gguf; SmolLM2's template renders every one of its
 * cases as transformers does; a file without a template, bad ids and bad templates fail. */
static void test_gguf_templates(void)
{
    lh_chat_template *t = NULL, *cfg = NULL;
    lh_err err;
    lh_status st = lh_chat_template_open(gguf_fixture("bpe_smollm.gguf"), &t, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n%s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_chat_template_open(fixture_path("smollm2_tokenizer_config.json"),
                                                &cfg, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(lh_chat_template_source(t), lh_chat_template_source(cfg));
    /* the ids the file gives (bos 0, eos 1, unk 0, pad 1) as their token strings */
    CU_ASSERT_STRING_EQUAL(lh_chat_template_special_token(t, "bos_token"), "<|begin_of_text|>");
    CU_ASSERT_STRING_EQUAL(lh_chat_template_special_token(t, "eos_token"), "<|end_of_text|>");
    CU_ASSERT_STRING_EQUAL(lh_chat_template_special_token(t, "unk_token"), "<|begin_of_text|>");
    CU_ASSERT_STRING_EQUAL(lh_chat_template_special_token(t, "pad_token"), "<|end_of_text|>");
    CU_ASSERT_PTR_NULL(lh_chat_template_special_token(t, "sep_token"));
    json_t *root = load_cases();
    int64_t now = json_integer_value(json_object_get(root, "now_unix"));
    size_t fi, ci, n = 0;
    json_t *fam, *cs;
    json_array_foreach(json_object_get(root, "families"), fi, fam) {
        if (strcmp(json_string_value(json_object_get(fam, "name")), "smollm2") != 0)
            continue;
        json_array_foreach(json_object_get(fam, "cases"), ci, cs) {
            CU_ASSERT(run_case("smollm2 (GGUF)", t, cs, now));
            n++;
        }
    }
    CU_ASSERT(n >= 10);
    json_decref(root);
    lh_chat_template_free(t);
    lh_chat_template_free(cfg);
    t = NULL;

    /* a GGUF file without a template: the class of a tokenizer_config.json without one */
    CU_ASSERT_EQUAL(lh_chat_template_open(gguf_fixture("bpe_gpt2.gguf"), &t, &err), LH_E_CONFIG);
    CHECK_MSG(err, "no tokenizer.chat_template");
    CHECK_MSG(err, "bpe_gpt2.gguf");
    CU_ASSERT_PTR_NULL(t);

    /* small files: a good one, then one per bad class */
    char *dir = lh_test_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/c.gguf", dir);
    static const char *const toks[] = {"<s>", "</s>", "x"};
    enum { GOOD, NOT_STRING, BAD_UTF8, HAS_NUL, BAD_ID, ID_TYPE, NO_TOKENS, SYNTAX, N_CASES };
    static const struct {
        lh_status code;
        const char *needle;
    } want[N_CASES] = {
        {LH_OK, NULL},
        {LH_E_CONFIG, "'tokenizer.chat_template'"},
        {LH_E_CONFIG, "tokenizer.chat_template is not UTF-8"},
        {LH_E_CONFIG, "tokenizer.chat_template is not UTF-8"},
        {LH_E_CONFIG, "tokenizer.ggml.eos_token_id is not a token id"},
        {LH_E_CONFIG, "tokenizer.ggml.bos_token_id must be an integer"},
        {LH_E_CONFIG, "there is no tokenizer.ggml.tokens"},
        {LH_E_CONFIG, "tokenizer.chat_template: chat template 1:"},
    };
    for (int c = 0; c < N_CASES; c++) {
        gw w = {.n = 0};
        static const char tmpl[] = "{{ bos_token }}{% for m in messages %}{{ m.content }}"
                                   "{% endfor %}{{ eos_token }}";
        if (c == NOT_STRING)
            gw_uint(&w, "tokenizer.chat_template", 7);
        else if (c == BAD_UTF8)
            gw_string(&w, "tokenizer.chat_template", "a\xC3(", 3);
        else if (c == HAS_NUL)
            gw_string(&w, "tokenizer.chat_template", "a\0b", 3);
        else if (c == SYNTAX)
            gw_string(&w, "tokenizer.chat_template", "{% if %}", 8);
        else
            gw_string(&w, "tokenizer.chat_template", tmpl, strlen(tmpl));
        if (c != NO_TOKENS)
            gw_tokens(&w, 3, toks);
        if (c == ID_TYPE)
            gw_string(&w, "tokenizer.ggml.bos_token_id", "0", 1);
        else
            gw_uint(&w, "tokenizer.ggml.bos_token_id", 0);
        gw_uint(&w, "tokenizer.ggml.eos_token_id", c == BAD_ID ? 3 : 1);
        gw_write(&w, path);
        t = NULL;
        st = lh_chat_template_load_gguf(path, &t, &err);
        if (st != want[c].code)
            fprintf(stderr, "\ncase %d: status %d: %s\n", c, st, st ? err.msg : "");
        CU_ASSERT_EQUAL(st, want[c].code);
        CU_ASSERT((st == LH_OK) == (t != NULL));
        if (st != LH_OK) {
            CHECK_MSG(err, want[c].needle);
            CHECK_MSG(err, "c.gguf");
            continue;
        }
        char *out = NULL;
        CU_ASSERT_EQUAL(lh_chat_template_render_json(t, "[{\"role\":\"user\",\"content\":\"hi\"}]",
                                                     NULL, &out, NULL, &err), LH_OK);
        CU_ASSERT_STRING_EQUAL(out, "<s>hi</s>");
        free(out);
        lh_chat_template_free(t);
    }
    /* not a GGUF file, no file, bad arguments */
    CU_ASSERT_EQUAL(lh_chat_template_load_gguf(fixture_path("cases.json"), &t, &err), LH_E_CONFIG);
    CU_ASSERT_EQUAL(lh_chat_template_load_gguf("/nonexistent.gguf", &t, &err), LH_E_IO);
    CU_ASSERT_EQUAL(lh_chat_template_load_gguf(NULL, &t, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_chat_template_load_gguf(path, NULL, &err), LH_E_USAGE);
    lh_test_rmtree(dir);
    free(dir);
}

/* The default model's GGUF (cached by tools/default_model) against the model directory converted
 * from it: the same template and special tokens, the same rendering. */
static void test_gguf_default_model(void)
{
    const char *e = getenv("LH_TEST_GGUF"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    char cache[2048], gguf[4096], dir[4096];
    struct stat sb;
    if (xdg && *xdg)
        snprintf(cache, sizeof cache, "%s", xdg);
    else
        snprintf(cache, sizeof cache, "%s/.cache", home ? home : "");
    if (e && *e)
        snprintf(gguf, sizeof gguf, "%s", e);
    else
        snprintf(gguf, sizeof gguf, "%s/llmhost/gguf/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    snprintf(dir, sizeof dir, "%s/llmhost/models/SmolLM2-135M-Instruct/tokenizer_config.json",
             cache);
    if (stat(gguf, &sb) != 0 || stat(dir, &sb) != 0) {
        LH_TEST_SKIP("no default-model GGUF and converted model directory (run "
                     "tools/default_model/fetch_gguf.py and convert_gguf.py to cache "
                     "SmolLM2-135M-Instruct under ~/.cache/llmhost)");
        return;
    }
    lh_chat_template *g = NULL, *h = NULL;
    lh_err err;
    CU_ASSERT_EQUAL_FATAL(lh_chat_template_open(gguf, &g, &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_chat_template_open(dir, &h, &err), LH_OK);
    CU_ASSERT_STRING_EQUAL(lh_chat_template_source(g), lh_chat_template_source(h));
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *a = lh_chat_template_special_token(g, names[i]),
                   *b = lh_chat_template_special_token(h, names[i]);
        CU_ASSERT((a == NULL) == (b == NULL));
        if (a && b)
            CU_ASSERT_STRING_EQUAL(a, b);
    }
    json_t *root = load_cases();
    size_t fi, ci, n = 0;
    json_t *fam, *cs;
    json_array_foreach(json_object_get(root, "families"), fi, fam) {
        if (strcmp(json_string_value(json_object_get(fam, "name")), "smollm2") != 0)
            continue;
        json_array_foreach(json_object_get(fam, "cases"), ci, cs) {
            char *msgs = dump(json_object_get(cs, "messages"));
            lh_chat_render_options opt = {
                .struct_size = sizeof opt,
                .add_generation_prompt = json_is_true(json_object_get(cs, "add_generation_prompt")),
                .fixed_now = true,
            };
            char *a = NULL, *b = NULL;
            lh_status sa = lh_chat_template_render_json(g, msgs, &opt, &a, NULL, &err);
            lh_status sb2 = lh_chat_template_render_json(h, msgs, &opt, &b, NULL, &err);
            CU_ASSERT_EQUAL(sa, sb2);
            if (a && b)
                CU_ASSERT_STRING_EQUAL(a, b);
            n += a != NULL;
            free(a);
            free(b);
            free(msgs);
        }
    }
    CU_ASSERT(n >= 10);
    json_decref(root);
    lh_chat_template_free(g);
    lh_chat_template_free(h);
}

int main(int argc, char **argv)
{
    static CU_TestInfo exact[] = {
        {"fixtures byte for byte against transformers", test_fixtures},
        {"struct messages, special tokens, bad arguments", test_struct_messages},
        CU_TEST_INFO_NULL,
    };
    static CU_TestInfo bad[] = {
        {"syntax errors with line:col", test_syntax_errors},
        {"unsupported constructs named", test_unsupported},
        {"runtime errors and Python semantics", test_runtime_errors},
        {"bounded nesting, loops, values, output", test_bounds},
        {"tokenizer_config.json", test_config_files},
        {"every template prefix fails cleanly", test_prefixes_never_crash},
        {"GGUF files: tokenizer.chat_template and special tokens", test_gguf_templates},
        {"the default model's GGUF against its tokenizer_config.json", test_gguf_default_model},
        CU_TEST_INFO_NULL,
    };
    static CU_SuiteInfo suites[] = {
        {"chat-template", NULL, NULL, NULL, NULL, exact},
        {"chat-template-bad-input", NULL, NULL, NULL, NULL, bad},
        CU_SUITE_INFO_NULL,
    };
    return lh_test_main(argc, argv, suites);
}
