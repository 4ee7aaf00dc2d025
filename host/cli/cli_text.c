/* llmhost tokenize: the model's tokenizer.json, without plugins or weights. */
#include "cli_commands.h"
#include "core/strbuf.h"

#include "llmhost.h"

#include <jansson.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char tokenize_help[] =
    "usage: llmhost tokenize MODEL (--text TEXT | --text-file FILE) [--no-special] [--json]\n"
    "Encodes text with the model's tokenizer.json (MODEL: a model directory, its config.json,\n"
    "or a tokenizer.json file), as transformers' tokenizer(text) does: with the special tokens\n"
    "of the post-processor (e.g. BOS) unless --no-special. Loads no plugin and no weights.\n"
    "--text-file FILE reads the text from FILE, byte for byte (UTF-8).\n"
    "Output: the ids, space-separated, on one line; with --json\n"
    "{\"ids\": [ids], \"tokens\": [token strings]}.\n"
    "Errors: no tokenizer.json (13, the path named), a tokenizer component this build does\n"
    "not support (14), a malformed tokenizer.json (3), text that is not UTF-8 (2).\n";

/* Reads a whole file (any bytes); NULL on failure, with errno kept in *err_no. */
static char *read_all(const char *path, size_t *len, int *err_no)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err_no = errno;
        return NULL;
    }
    lh_strbuf b = {0};
    for (;;) {
        if (!lh_strbuf_reserve(&b, 65536)) {
            fclose(f);
            lh_strbuf_free(&b);
            *err_no = ENOMEM;
            return NULL;
        }
        size_t got = fread(b.s + b.len, 1, 65536, f);
        b.len += got;
        b.s[b.len] = '\0';
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        *err_no = errno ? errno : EIO;
        lh_strbuf_free(&b);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *len = b.len;
    char *text = lh_strbuf_take(&b);
    if (!text)
        *err_no = ENOMEM;
    return text;
}

int lh_cli_tokenize(const lh_cli_args *a)
{
    if (a->help) {
        printf("%s\n%s", tokenize_help, lh_cli_exit_status_text);
        return 0;
    }
    if (!a->model) {
        fprintf(stderr, "llmhost tokenize: MODEL is required\n");
        return LH_E_USAGE;
    }
    if (!a->text == !a->text_file) {
        fprintf(stderr, "llmhost tokenize: give exactly one of --text and --text-file\n");
        return LH_E_USAGE;
    }
    char *owned = NULL;
    const char *text = a->text;
    size_t len = text ? strlen(text) : 0;
    if (a->text_file) {
        int e = 0;
        owned = read_all(a->text_file, &len, &e);
        if (!owned) {
            fprintf(stderr, "llmhost: error [%s]: --text-file %s: %s\n",
                    lh_status_name(e == ENOMEM ? LH_E_NOMEM : LH_E_IO), a->text_file,
                    strerror(e));
            return e == ENOMEM ? LH_E_NOMEM : LH_E_IO;
        }
        text = owned;
    }
    lh_err err = {0};
    lh_tokenizer *t = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    lh_status st = lh_tokenizer_open(a->model, &t, &err);
    if (st == LH_OK)
        st = lh_tokenizer_encode(t, text, len, !a->no_special, &ids, &n, &err);
    if (st != LH_OK) {
        fprintf(stderr, "llmhost: error [%s]: %s\n", lh_status_name(err.code), err.msg);
    } else if (a->json) {
        json_t *j = json_object(), *ja = json_array(), *jt = json_array();
        bool ok = j && ja && jt;
        for (size_t i = 0; ok && i < n; i++) {
            const char *tok = lh_tokenizer_id_to_token(t, ids[i]);
            json_t *s = tok ? json_string(tok) : NULL;
            ok = json_array_append_new(ja, json_integer(ids[i])) == 0 &&
                 json_array_append_new(jt, s ? s : json_null()) == 0;
        }
        ok = ok && json_object_set(j, "ids", ja) == 0 && json_object_set(j, "tokens", jt) == 0;
        char *out = ok ? json_dumps(j, 0) : NULL;
        if (out) {
            puts(out);
            free(out);
        } else {
            fprintf(stderr, "llmhost tokenize: out of memory\n");
            st = LH_E_NOMEM;
        }
        json_decref(ja);
        json_decref(jt);
        json_decref(j);
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    }
    free(ids);
    lh_tokenizer_free(t);
    free(owned);
    return (int)st;
}
