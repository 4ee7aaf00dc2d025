/* A checkpoint: one safetensors file or the shards of model.safetensors.index.json, with one
 * sorted name index over all of them. See checkpoint.h. */
#include "checkpoint.h"

#include "../core/err.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../core/paths.h"
#include "../core/strutil.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_MAX_BYTES ((size_t)256 * 1024 * 1024)

struct lh_checkpoint {
    char *path;
    bool sharded;
    lh_st_file **files;
    size_t n_files;
    const lh_st_tensor **all; /* sorted by name */
    lh_st_tensor *adopted;     /* lh_checkpoint_adopt: the tensors, and their names, owned */
    size_t n_adopted;
    size_t n;
    uint64_t bytes;
};

/* ---- queries ----------------------------------------------------------------------------- */

const char *lh_checkpoint_path(const lh_checkpoint *ck)
{
    return ck ? ck->path : NULL;
}

bool lh_checkpoint_sharded(const lh_checkpoint *ck)
{
    return ck && ck->sharded;
}

size_t lh_checkpoint_file_count(const lh_checkpoint *ck)
{
    return ck ? ck->n_files : 0;
}

const lh_st_file *lh_checkpoint_file(const lh_checkpoint *ck, size_t i)
{
    return ck && i < ck->n_files ? ck->files[i] : NULL;
}

size_t lh_checkpoint_count(const lh_checkpoint *ck)
{
    return ck ? ck->n : 0;
}

const lh_st_tensor *lh_checkpoint_at(const lh_checkpoint *ck, size_t i)
{
    return ck && i < ck->n ? ck->all[i] : NULL;
}

uint64_t lh_checkpoint_data_bytes(const lh_checkpoint *ck)
{
    return ck ? ck->bytes : 0;
}

const lh_st_tensor *lh_checkpoint_find(const lh_checkpoint *ck, const char *name, size_t *index)
{
    if (!ck || !name)
        return NULL;
    size_t lo = 0, hi = ck->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->all[mid]->name, name);
        if (c == 0) {
            if (index)
                *index = mid;
            return ck->all[mid];
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void lh_checkpoint_close(lh_checkpoint *ck)
{
    if (!ck)
        return;
    for (size_t i = 0; i < ck->n_files; i++)
        lh_st_close(ck->files[i]);
    free(ck->files);
    free(ck->all);
    for (size_t i = 0; i < ck->n_adopted; i++)
        free((char *)(uintptr_t)ck->adopted[i].name);
    free(ck->adopted);
    free(ck->path);
    free(ck);
}

/* ---- building ---------------------------------------------------------------------------- */

static int cmp_tensor_ptr(const void *a, const void *b)
{
    return strcmp((*(const lh_st_tensor *const *)a)->name, (*(const lh_st_tensor *const *)b)->name);
}

/* Builds the merged, sorted name index over every opened file. */
static lh_status build_index(lh_checkpoint *ck, lh_err *err)
{
    size_t n = 0;
    for (size_t i = 0; i < ck->n_files; i++)
        n += lh_st_count(ck->files[i]);
    ck->all = malloc((n ? n : 1) * sizeof *ck->all);
    if (!ck->all)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", ck->path);
    for (size_t i = 0; i < ck->n_files; i++)
        for (size_t j = 0; j < lh_st_count(ck->files[i]); j++) {
            const lh_st_tensor *t = lh_st_at(ck->files[i], j);
            ck->all[ck->n++] = t;
            ck->bytes += t->end - t->begin;
        }
    if (ck->n_files > 1)
        qsort(ck->all, ck->n, sizeof *ck->all, cmp_tensor_ptr);
    for (size_t i = 1; i < ck->n; i++) /* the shard checks make this unreachable */
        if (strcmp(ck->all[i - 1]->name, ck->all[i]->name) == 0)
            return lh_err_set(err, LH_E_CONFIG, "%s: tensor '%s' is in both %s and %s",
                              ck->path, ck->all[i]->name, lh_st_path(ck->all[i - 1]->file),
                              lh_st_path(ck->all[i]->file));
    return LH_OK;
}

lh_status lh_checkpoint_adopt(const char *path, lh_st_tensor *tensors, size_t n,
                              lh_checkpoint **out, lh_err *err)
{
    *out = NULL;
    lh_checkpoint *ck = calloc(1, sizeof *ck);
    if (ck) {
        ck->adopted = tensors;
        ck->n_adopted = n;
    } else {
        for (size_t i = 0; i < n; i++)
            free((char *)(uintptr_t)tensors[i].name);
        free(tensors);
    }
    if (!ck || !(ck->path = lh_strdup(path)) ||
        !(ck->all = malloc((n ? n : 1) * sizeof *ck->all))) {
        lh_checkpoint_close(ck);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < n; i++) {
        ck->all[ck->n++] = &tensors[i];
        ck->bytes += tensors[i].end - tensors[i].begin;
    }
    qsort(ck->all, ck->n, sizeof *ck->all, cmp_tensor_ptr);
    for (size_t i = 1; i < ck->n; i++)
        if (strcmp(ck->all[i - 1]->name, ck->all[i]->name) == 0) {
            lh_status st = lh_err_set(err, LH_E_CONFIG, "%s: two tensors are named '%s'", path,
                                      ck->all[i]->name);
            lh_checkpoint_close(ck);
            return st;
        }
    *out = ck;
    return LH_OK;
}

static lh_status open_single(lh_checkpoint *ck, const char *file, lh_err *err)
{
    ck->files = calloc(1, sizeof *ck->files);
    if (!ck->files)
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", file);
    lh_status st = lh_st_open(file, &ck->files[0], err);
    if (st != LH_OK)
        return st;
    ck->n_files = 1;
    return build_index(ck, err);
}

static bool bare_file_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Directory part of `file` ("." when it has none); malloc'ed. */
static char *dir_of(const char *file)
{
    const char *slash = strrchr(file, '/');
    if (!slash)
        return lh_strdup(".");
    if (slash == file)
        return lh_strdup("/");
    size_t n = (size_t)(slash - file);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, file, n);
        d[n] = '\0';
    }
    return d;
}

static size_t shard_slot(const char *const *names, size_t n, const char *name)
{
    for (size_t i = n; i-- > 0;) /* recently added shards first: maps are usually grouped */
        if (strcmp(names[i], name) == 0)
            return i;
    return n;
}

static lh_status open_index(lh_checkpoint *ck, const char *index_path, lh_err *err)
{
    char *text = NULL;
    size_t len = 0;
    lh_status st = lh_read_text_file(index_path, "safetensors index", INDEX_MAX_BYTES,
                                     LH_E_CONFIG, &text, &len, err);
    if (st != LH_OK)
        return st;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        return lh_err_set(err, LH_E_CONFIG, "%s: not valid JSON: %s (line %d, column %d)",
                          index_path, je.text, je.line, je.column);
    const char **names = NULL; /* distinct shard names, first-appearance order; borrowed */
    char *dir = NULL;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(root)) {
        st = lh_err_set(err, LH_E_CONFIG, "%s: not a JSON object", index_path);
        goto out;
    }
    if (!json_is_object(map)) {
        st = lh_err_set(err, LH_E_CONFIG, "%s: \"weight_map\" is %s (expected an object "
                        "mapping tensor names to shard files)",
                        index_path, map ? "not an object" : "missing");
        goto out;
    }
    if (json_object_size(map) == 0) {
        st = lh_err_set(err, LH_E_CONFIG, "%s: \"weight_map\" is empty", index_path);
        goto out;
    }
    names = malloc(json_object_size(map) * sizeof *names);
    dir = dir_of(index_path);
    if (!names || !dir) {
        st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", index_path);
        goto out;
    }
    size_t n_names = 0;
    const char *tname;
    json_t *v;
    json_object_foreach(map, tname, v)
    {
        const char *shard = json_string_value(v);
        if (!shard) {
            st = lh_err_set(err, LH_E_CONFIG,
                            "%s: weight_map entry for tensor '%s' is not a string (expected a "
                            "shard file name)",
                            index_path, tname);
            goto out;
        }
        if (!bare_file_name(shard)) {
            st = lh_err_set(err, LH_E_CONFIG,
                            "%s: weight_map maps tensor '%s' to '%s': shard names must be bare "
                            "file names in the checkpoint directory (no '/', not '.' or '..')",
                            index_path, tname, shard);
            goto out;
        }
        if (shard_slot(names, n_names, shard) == n_names)
            names[n_names++] = shard;
    }

    ck->files = calloc(n_names, sizeof *ck->files);
    if (!ck->files) {
        st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", index_path);
        goto out;
    }
    for (size_t i = 0; i < n_names; i++) {
        char *p = lh_path_join(dir, names[i]);
        if (!p) {
            st = lh_err_set(err, LH_E_NOMEM, "%s: out of memory", index_path);
            goto out;
        }
        st = lh_st_open(p, &ck->files[i], err);
        free(p);
        if (st != LH_OK) {
            lh_err_prefix(err, "shard '%s' named by %s", names[i], index_path);
            goto out;
        }
        ck->n_files++;
    }

    /* index -> shards: every listed tensor is in the shard it is mapped to */
    json_object_foreach(map, tname, v)
    {
        const char *shard = json_string_value(v);
        size_t s = shard_slot(names, n_names, shard);
        if (lh_st_find(ck->files[s], tname))
            continue;
        const char *elsewhere = NULL;
        for (size_t i = 0; i < n_names && !elsewhere; i++)
            if (i != s && lh_st_find(ck->files[i], tname))
                elsewhere = lh_st_path(ck->files[i]);
        st = lh_err_set(err, LH_E_CONFIG,
                        "%s: tensor '%s' is mapped to shard %s, which does not contain it%s%s%s",
                        index_path, tname, lh_st_path(ck->files[s]),
                        elsewhere ? " (it is in " : "", elsewhere ? elsewhere : "",
                        elsewhere ? ")" : "");
        goto out;
    }
    /* shards -> index: every tensor of a shard is mapped to that shard */
    for (size_t i = 0; i < n_names; i++)
        for (size_t j = 0; j < lh_st_count(ck->files[i]); j++) {
            const lh_st_tensor *t = lh_st_at(ck->files[i], j);
            const char *mapped = json_string_value(json_object_get(map, t->name));
            if (mapped && strcmp(mapped, names[i]) == 0)
                continue;
            if (mapped)
                st = lh_err_set(err, LH_E_CONFIG,
                                "%s: tensor '%s' is in shard %s but the index maps it to %s",
                                index_path, t->name, lh_st_path(ck->files[i]), mapped);
            else
                st = lh_err_set(err, LH_E_CONFIG,
                                "%s: tensor '%s' is in shard %s but the index does not list it",
                                index_path, t->name, lh_st_path(ck->files[i]));
            goto out;
        }
    ck->sharded = true;
    st = build_index(ck, err);
out:
    free(names);
    free(dir);
    json_decref(root);
    return st;
}

static bool exists(const char *dir, const char *name, bool *is_file)
{
    char *p = lh_path_join(dir, name);
    struct stat sb;
    bool ok = p && stat(p, &sb) == 0;
    if (is_file)
        *is_file = ok && !S_ISDIR(sb.st_mode);
    free(p);
    return ok;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

lh_status lh_checkpoint_open(const char *path, lh_checkpoint **out, lh_err *err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return lh_err_set(err, LH_E_USAGE, "lh_checkpoint_open: NULL argument");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lh_err_set(err, LH_E_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    lh_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->path = lh_strdup(path))) {
        free(ck);
        return lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
    }
    lh_status st;
    char *file = NULL;
    if (S_ISDIR(sb.st_mode)) {
        if (exists(path, LH_CKPT_SINGLE_FILE, NULL)) {
            if (exists(path, LH_CKPT_INDEX_FILE, NULL))
                lh_log(LH_LOG_INFO, "%s: both %s and %s exist; loading %s", path,
                       LH_CKPT_SINGLE_FILE, LH_CKPT_INDEX_FILE, LH_CKPT_SINGLE_FILE);
            file = lh_path_join(path, LH_CKPT_SINGLE_FILE);
            st = file ? open_single(ck, file, err)
                      : lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
        } else if (exists(path, LH_CKPT_INDEX_FILE, NULL)) {
            file = lh_path_join(path, LH_CKPT_INDEX_FILE);
            st = file ? open_index(ck, file, err)
                      : lh_err_set(err, LH_E_NOMEM, "%s: out of memory", path);
        } else {
            bool bin = exists(path, "pytorch_model.bin", NULL) ||
                       exists(path, "pytorch_model.bin.index.json", NULL);
            st = lh_err_set(err, LH_E_IO, "%s: no %s or %s in this directory%s", path,
                            LH_CKPT_SINGLE_FILE, LH_CKPT_INDEX_FILE,
                            bin ? " (it has PyTorch .bin weights only; convert them to "
                                  "safetensors)"
                                : "");
        }
    } else if (ends_with(path, ".json")) {
        st = open_index(ck, path, err);
    } else {
        st = open_single(ck, path, err);
    }
    free(file);
    if (st != LH_OK) {
        lh_checkpoint_close(ck);
        return st;
    }
    *out = ck;
    return LH_OK;
}
