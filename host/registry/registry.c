#include "registry.h"

#include "core/err.h"
#include "core/log.h"
#include "core/paths.h"
#include "core/strutil.h"
#include "loader/loader.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *lh_reg_outcome_name(lh_reg_outcome o)
{
    switch (o) {
    case LH_REG_TAKEN: return "registered";
    case LH_REG_KEPT_OUT: return "kept-out";
    case LH_REG_SHADOWED: return "shadowed";
    case LH_REG_UNPROMISED: return "not-in-index";
    case LH_REG_UNDECLARED: return "dir-not-declared";
    }
    return "unknown";
}

void lh_registry_lock(lh_registry *reg) { pthread_mutex_lock(&reg->lock); }
void lh_registry_unlock(lh_registry *reg) { pthread_mutex_unlock(&reg->lock); }

lh_status lh_registry_init(lh_registry *reg, const char *builtin_dir, bool allow_insecure,
                           lh_err *err)
{
    memset(reg, 0, sizeof *reg);
    pthread_mutex_init(&reg->lock, NULL);
    reg->allow_insecure = allow_insecure;
    reg->builtin_dir = realpath(builtin_dir, NULL);
    if (!reg->builtin_dir) {
        lh_status st = lh_err_set(err, LH_E_IO, "built-in plugin dir %s: %s", builtin_dir,
                                  strerror(errno));
        lh_registry_destroy(reg);
        return st;
    }
    char *index_path = lh_path_join(reg->builtin_dir, LH_ARCH_INDEX_FILE);
    lh_status st = index_path ? lh_arch_index_load(index_path, &reg->builtin_index, err)
                              : lh_err_set(err, LH_E_NOMEM, "out of memory");
    free(index_path);
    if (st != LH_OK)
        lh_registry_destroy(reg);
    return st;
}

void lh_module_rec_free(lh_module_rec *m)
{
    for (size_t i = 0; i < m->n_log; i++) {
        free(m->log[i]->name);
        free(m->log[i]);
    }
    free(m->log);
    free(m->path);
    free(m->file_name);
    free(m->dir);
    free(m->fail_msg);
    free(m->plugin_name);
    free(m->plugin_version);
    free(m->init_fail_msg);
    /* m->handle is deliberately not dlclosed: providers' function pointers may outlive us */
    free(m);
}

static void free_dir(lh_custom_dir *d)
{
    free(d->path);
    lh_arch_index_free(&d->index);
    free(d->eager);
    memset(d, 0, sizeof *d);
}

void lh_registry_destroy(lh_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n_dirs; i++)
        free_dir(&reg->dirs[i]);
    free(reg->dirs);
    for (size_t i = 0; i < reg->n_modules; i++)
        lh_module_rec_free(reg->modules[i]);
    free(reg->modules);
    for (int k = 0; k < LH_KIND_COUNT; k++)
        free(reg->slots[k]);
    lh_arch_index_free(&reg->builtin_index);
    free(reg->builtin_dir);
    pthread_mutex_destroy(&reg->lock);
    memset(reg, 0, sizeof *reg);
}

/* ---- tables ---------------------------------------------------------------------------- */

static lh_slot *find_slot(const lh_registry *reg, lh_kind kind, const char *name)
{
    for (size_t i = 0; i < reg->n_slots[kind]; i++)
        if (lh_kind_names_equal(kind, reg->slots[kind][i].entry->name, name))
            return &reg->slots[kind][i];
    return NULL;
}

const lh_reg_entry *lh_registry_peek(const lh_registry *reg, lh_kind kind, const char *name)
{
    lh_slot *s = find_slot(reg, kind, name);
    return s ? s->entry : NULL;
}

static int put_slot(lh_registry *reg, lh_reg_entry *e)
{
    lh_slot *s = find_slot(reg, e->kind, e->name);
    if (s) {
        s->entry = e;
        return 0;
    }
    lh_slot *grown = realloc(reg->slots[e->kind], (reg->n_slots[e->kind] + 1) * sizeof *grown);
    if (!grown)
        return -1;
    reg->slots[e->kind] = grown;
    grown[reg->n_slots[e->kind]++].entry = e;
    return 0;
}

/* ---- declarations and ownership ---------------------------------------------------------- */

static lh_custom_dir *declared_dir(const lh_registry *reg, const char *canon, size_t *pos)
{
    for (size_t i = 0; i < reg->n_dirs; i++)
        if (strcmp(reg->dirs[i].path, canon) == 0) {
            if (pos)
                *pos = i;
            return &reg->dirs[i];
        }
    return NULL;
}

static bool module_declared(const lh_module_rec *m, const char *name, lh_kind kind)
{
    for (size_t i = 0; i < m->n_log; i++)
        if (m->log[i]->kind == kind && lh_kind_names_equal(kind, m->log[i]->name, name))
            return true;
    return false;
}

/* The declared owner of (kind, name): a directory and a file name in it. */
typedef struct owner {
    bool found;
    bool builtin;
    const char *dir;
    const char *file_name;
    const lh_arch_index *index; /* the index that declares it, NULL for eager dirs */
    const lh_index_row *row;
} owner;

static owner owner_of(const lh_registry *reg, lh_kind kind, const char *name)
{
    owner o = {0};
    for (size_t i = 0; i < reg->n_dirs; i++) {
        const lh_custom_dir *d = &reg->dirs[i];
        if (d->has_index) {
            const lh_index_row *row = lh_arch_index_find(&d->index, kind, name);
            if (row) {
                o = (owner){true, false, d->path, row->shared_object, &d->index, row};
                return o;
            }
        } else {
            for (size_t j = 0; j < d->n_eager; j++) {
                const lh_module_rec *m = d->eager[j];
                if (m->state == LH_MOD_STATE_LOADED && module_declared(m, name, kind)) {
                    o = (owner){true, false, d->path, m->file_name, NULL, NULL};
                    return o;
                }
            }
        }
    }
    const lh_index_row *row = lh_arch_index_find(&reg->builtin_index, kind, name);
    if (row)
        o = (owner){true, true, reg->builtin_dir, row->shared_object, &reg->builtin_index, row};
    return o;
}

static bool is_owner(const owner *o, const lh_module_rec *m)
{
    return o->found && strcmp(o->dir, m->dir) == 0 && strcmp(o->file_name, m->file_name) == 0;
}

/* The index that governs module m (built-in index or its custom dir's), NULL for an eagerly
 * loaded dir (everything it registers is what it promises). */
static const lh_arch_index *index_of(const lh_registry *reg, const lh_module_rec *m,
                                     bool *declared)
{
    if (m->builtin) {
        *declared = true;
        return &reg->builtin_index;
    }
    const lh_custom_dir *d = declared_dir(reg, m->dir, NULL);
    *declared = d != NULL;
    return d && d->has_index ? &d->index : NULL;
}

static const char *origin_word(const lh_module_rec *m)
{
    return m->builtin ? "built-in" : "external";
}

/* Applies one log entry through the rules; see registry.h for the ownership rule. */
static void apply(lh_registry *reg, lh_reg_entry *e, bool quiet)
{
    lh_log_level info = quiet ? LH_LOG_DEBUG : LH_LOG_INFO;
    lh_module_rec *m = e->module;
    bool declared;
    const lh_arch_index *idx = index_of(reg, m, &declared);
    if (!declared) {
        e->outcome = LH_REG_UNDECLARED;
        return;
    }
    if (idx) {
        const lh_index_row *row = lh_arch_index_find(idx, e->kind, e->name);
        if (!row || strcmp(row->shared_object, m->file_name) != 0) {
            e->outcome = LH_REG_UNPROMISED;
            char key[1024];
            snprintf(key, sizeof key, "unpromised:%s:%d:%s", m->path, (int)e->kind, e->name);
            lh_log_once(key, LH_LOG_WARN,
                        "index drift: %s registered %s '%s', which %s does not promise to it%s%s; "
                        "ignored (regenerate the index)",
                        m->path, lh_kind_name(e->kind), e->name, idx->path,
                        row ? " (it names " : "", row ? row->shared_object : "");
            return;
        }
    }
    owner o = owner_of(reg, e->kind, e->name);
    lh_slot *slot = find_slot(reg, e->kind, e->name);
    if (is_owner(&o, m)) {
        if (slot && slot->entry != e && slot->entry->module != m)
            lh_log(info, "%s '%s': %s %s replaces %s %s", lh_kind_name(e->kind), e->name,
                   origin_word(m), m->path, origin_word(slot->entry->module),
                   slot->entry->module->path);
        if (put_slot(reg, e) != 0) {
            lh_log(LH_LOG_ERROR, "out of memory registering %s '%s'", lh_kind_name(e->kind),
                   e->name);
            e->outcome = LH_REG_KEPT_OUT;
            return;
        }
        e->outcome = LH_REG_TAKEN;
        return;
    }
    const char *keeper = slot ? slot->entry->module->path : o.file_name;
    if (m->builtin) {
        e->outcome = LH_REG_KEPT_OUT;
        lh_log(info, "keeping %s for %s '%s'; built-in %s not registered", keeper,
               lh_kind_name(e->kind), e->name, m->path);
    } else {
        e->outcome = LH_REG_SHADOWED;
        lh_log(info, "keeping %s/%s for %s '%s' (its custom dir comes first); external %s not "
               "registered",
               o.dir, o.file_name, lh_kind_name(e->kind), e->name, m->path);
    }
}

static void apply_module(lh_registry *reg, lh_module_rec *m, bool quiet)
{
    if (m->state != LH_MOD_STATE_LOADED)
        return;
    for (size_t i = 0; i < m->n_log; i++)
        apply(reg, m->log[i], quiet);
}

void lh_registry_rebuild(lh_registry *reg, bool quiet)
{
    for (int k = 0; k < LH_KIND_COUNT; k++) {
        free(reg->slots[k]);
        reg->slots[k] = NULL;
        reg->n_slots[k] = 0;
    }
    /* modules[] is in first-load order already */
    for (size_t i = 0; i < reg->n_modules; i++) {
        lh_module_rec *m = reg->modules[i];
        if (m->builtin)
            apply_module(reg, m, quiet);
        else if (!declared_dir(reg, m->dir, NULL))
            for (size_t j = 0; j < m->n_log; j++)
                m->log[j]->outcome = LH_REG_UNDECLARED;
    }
    for (size_t d = 0; d < reg->n_dirs; d++)
        for (size_t i = 0; i < reg->n_modules; i++) {
            lh_module_rec *m = reg->modules[i];
            if (!m->builtin && strcmp(m->dir, reg->dirs[d].path) == 0)
                apply_module(reg, m, quiet);
        }
}

/* ---- loading ------------------------------------------------------------------------------ */

static lh_module_rec *find_module(const lh_registry *reg, const char *path)
{
    for (size_t i = 0; i < reg->n_modules; i++)
        if (strcmp(reg->modules[i]->path, path) == 0)
            return reg->modules[i];
    return NULL;
}

static lh_status load_file(lh_registry *reg, const char *dir, const char *file_name,
                           bool apply_now, lh_module_rec **out, lh_err *err)
{
    *out = NULL;
    char *path = lh_path_join(dir, file_name);
    if (!path)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    lh_module_rec *m = find_module(reg, path);
    if (m) {
        free(path);
        *out = m;
        if (m->state == LH_MOD_STATE_FAILED)
            return lh_err_set(err, m->fail_code, "%s", m->fail_msg ? m->fail_msg : "load failed");
        return LH_OK;
    }
    lh_module_rec **grown = realloc(reg->modules, (reg->n_modules + 1) * sizeof *grown);
    m = calloc(1, sizeof *m);
    if (grown)
        reg->modules = grown;
    if (!grown || !m) {
        free(path);
        free(m);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    m->path = path;
    m->file_name = strdup(file_name);
    m->dir = strdup(dir);
    m->builtin = strcmp(dir, reg->builtin_dir) == 0;
    m->load_seq = reg->next_seq++;
    reg->modules[reg->n_modules++] = m;
    *out = m;
    if (!m->file_name || !m->dir)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    lh_status st = lh_loader_load(m, reg->allow_insecure, &reg->dlopen_calls, err);
    if (st != LH_OK)
        return st;
    if (apply_now)
        apply_module(reg, m, false);
    return LH_OK;
}

lh_status lh_registry_load_file(lh_registry *reg, const char *dir, const char *file_name,
                                lh_module_rec **out, lh_err *err)
{
    return load_file(reg, dir, file_name, true, out, err);
}

/* ---- ensure, then look up ---------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int push_name(const char ***arr, size_t *n, size_t *cap, const char *s)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        const char **g = realloc(*arr, nc * sizeof *g);
        if (!g)
            return -1;
        *arr = g;
        *cap = nc;
    }
    (*arr)[(*n)++] = s;
    return 0;
}

const char **lh_registry_known_names(const lh_registry *reg, lh_kind kind, size_t *n)
{
    const char **arr = NULL;
    size_t cap = 0;
    *n = 0;
    bool oom = false;
    for (size_t i = 0; i < reg->builtin_index.n_rows; i++)
        if (reg->builtin_index.rows[i].kind == kind)
            oom |= push_name(&arr, n, &cap, reg->builtin_index.rows[i].name) != 0;
    for (size_t d = 0; d < reg->n_dirs; d++) {
        const lh_custom_dir *cd = &reg->dirs[d];
        if (cd->has_index) {
            for (size_t i = 0; i < cd->index.n_rows; i++)
                if (cd->index.rows[i].kind == kind)
                    oom |= push_name(&arr, n, &cap, cd->index.rows[i].name) != 0;
        } else {
            for (size_t j = 0; j < cd->n_eager; j++)
                for (size_t i = 0; i < cd->eager[j]->n_log; i++)
                    if (cd->eager[j]->log[i]->kind == kind)
                        oom |= push_name(&arr, n, &cap, cd->eager[j]->log[i]->name) != 0;
        }
    }
    if (oom || !*n) {
        free(arr);
        *n = 0;
        return NULL;
    }
    qsort(arr, *n, sizeof *arr, cmp_str);
    size_t w = 1;
    for (size_t r = 1; r < *n; r++)
        if (strcmp(arr[r], arr[w - 1]) != 0)
            arr[w++] = arr[r];
    *n = w;
    return arr;
}

const char **lh_registry_names_of(const lh_module_rec *mod, lh_kind kind, size_t *n)
{
    const char **arr = NULL;
    size_t cap = 0;
    *n = 0;
    for (size_t i = 0; i < mod->n_log; i++)
        if (mod->log[i]->kind == kind && push_name(&arr, n, &cap, mod->log[i]->name) != 0) {
            free(arr);
            *n = 0;
            return NULL;
        }
    return arr;
}

static lh_status unknown_name(const lh_registry *reg, lh_kind kind, const char *name,
                              lh_err *err)
{
    size_t n;
    const char **known = lh_registry_known_names(reg, kind, &n);
    const char *near = known ? lh_nearest(name, known, n) : NULL;
    char list[1200];
    lh_join_names(list, sizeof list, known, n);
    lh_err_set(err, LH_E_UNKNOWN_NAME, "unknown %s '%s': no index lists it%s%s%s; known: %s",
               lh_kind_name(kind), name, near ? "; did you mean '" : "", near ? near : "",
               near ? "'?" : "", n ? list : "(none)");
    free(known);
    return LH_E_UNKNOWN_NAME;
}

lh_status lh_registry_ensure(lh_registry *reg, lh_kind kind, const char *name,
                             const lh_reg_entry **out, lh_err *err)
{
    *out = NULL;
    owner o = owner_of(reg, kind, name);
    if (!o.found)
        return unknown_name(reg, kind, name, err);
    lh_module_rec *m;
    lh_status st = lh_registry_load_file(reg, o.dir, o.file_name, &m, err);
    if (st != LH_OK) {
        if (o.index)
            return lh_err_prefix(err, "%s '%s' (provided by %s per %s:%d)", lh_kind_name(kind),
                                 name, o.file_name, o.index->path, o.row->line);
        return lh_err_prefix(err, "%s '%s'", lh_kind_name(kind), name);
    }
    if (!module_declared(m, name, kind)) {
        size_t n;
        const char **names = lh_registry_names_of(m, kind, &n);
        char list[800];
        lh_join_names(list, sizeof list, names, n);
        free(names);
        return lh_err_set(err, LH_E_INDEX_DRIFT,
                          "index drift: %s:%d says %s '%s' is provided by %s, but %s did not "
                          "register it (it registered %s: %s)",
                          o.index ? o.index->path : o.dir, o.row ? o.row->line : 0,
                          lh_kind_name(kind), name, o.file_name, m->path, lh_kind_name(kind),
                          n ? list : "nothing");
    }
    const lh_reg_entry *e = lh_registry_peek(reg, kind, name);
    if (!e || e->module != m)
        return lh_err_set(err, LH_E_INTERNAL,
                          "%s '%s': owner %s is loaded but the slot holds %s (registry "
                          "invariant broken)",
                          lh_kind_name(kind), name, m->path, e ? e->module->path : "nothing");
    *out = e;
    return LH_OK;
}

/* ---- registration from plugins ----------------------------------------------------------- */

static bool empty(const char *s)
{
    return !s || !*s;
}

/* "{L}" at most once, and only in a tensor name. */
static bool layer_pattern_ok(const char *s)
{
    const char *first = strstr(s, "{L}");
    return !first || !strstr(first + 3, "{L}");
}

/* Why a GGUF provider registration is malformed (a static description), or NULL. */
static const char *gguf_provider_problem(const lh_gguf_provider *p)
{
    if (empty(p->gguf_arch))
        return "a gguf_arch (general.architecture)";
    if (empty(p->architecture))
        return "the architecture it feeds";
    if (p->n_keys && !p->keys)
        return "a key table (n_keys > 0 with keys NULL)";
    if (p->n_tensors && !p->tensors)
        return "a tensor table (n_tensors > 0 with tensors NULL)";
    for (size_t i = 0; i < p->n_keys; i++)
        if (empty(p->keys[i].config_key) || empty(p->keys[i].gguf_key))
            return "both names in every key entry";
    for (size_t i = 0; i < p->n_tensors; i++) {
        const lh_gguf_tensor_name *t = &p->tensors[i];
        if (empty(t->gguf) || (t->layout != LH_GGUF_IGNORE && empty(t->name)))
            return "a GGUF name and (unless LH_GGUF_IGNORE) a tree name in every tensor entry";
        if ((unsigned)t->layout > LH_GGUF_EXPERTS)
            return "a known lh_gguf_layout in every tensor entry";
        const char *ex = t->name ? strstr(t->name, "{E}") : NULL;
        if ((t->layout == LH_GGUF_EXPERTS) != (ex != NULL) || (ex && strstr(ex + 3, "{E}")) ||
            strstr(t->gguf, "{E}"))
            return "one \"{E}\" in the tree name of an LH_GGUF_EXPERTS entry, and none "
                   "elsewhere";
        const bool in_gguf = strstr(t->gguf, "{L}") != NULL;
        const bool in_name = t->name && strstr(t->name, "{L}") != NULL;
        if (!layer_pattern_ok(t->gguf) || (t->name && !layer_pattern_ok(t->name)) ||
            (t->layout != LH_GGUF_IGNORE && in_gguf != in_name))
            return "one \"{L}\" on both sides of a tensor entry, or none";
    }
    return NULL;
}


lh_status lh_registry_register(lh_module_rec *mod, lh_kind kind, const void *provider,
                               size_t host_struct_size)
{
    if (!mod || !mod->in_init) {
        lh_log(LH_LOG_ERROR, "a plugin registered a %s outside its init; ignored",
               lh_kind_name(kind));
        return LH_E_USAGE;
    }
    if (!provider)
        return LH_E_USAGE;
    uint32_t given_size;
    memcpy(&given_size, provider, sizeof given_size);
    /* struct_size must at least cover the fields of ABI x.0 of this provider struct */
    size_t min_size = kind == LH_KIND_DRAFT            ? sizeof(lh_draft_provider)
                      : kind == LH_KIND_ATTENTION_BACKEND ? offsetof(lh_attn_backend_provider, ops)
                      : kind == LH_KIND_GGUF              ? offsetof(lh_gguf_provider, finish) + sizeof(void *)
                                                          : offsetof(lh_model_provider, check_runtime);
    /* (ABI 3.0 model providers end with check_runtime; the size check above covers ops) */
    if (given_size < min_size) {
        lh_log(LH_LOG_ERROR, "%s: %s provider struct_size %u is below the minimum %zu",
               mod->path, lh_kind_name(kind), given_size, min_size);
        return LH_E_USAGE;
    }
    lh_reg_entry *e = calloc(1, sizeof *e);
    if (!e)
        return LH_E_NOMEM;
    memcpy(&e->p, provider, given_size < host_struct_size ? given_size : host_struct_size);
    const char *name = kind == LH_KIND_DRAFT ? e->p.draft.mode
                       : kind == LH_KIND_ATTENTION_BACKEND ? e->p.attn.name
                       : kind == LH_KIND_GGUF              ? e->p.gguf.gguf_arch
                                                           : e->p.model.name;
    const lh_model_ops *ops = kind == LH_KIND_DRAFT ? e->p.draft.ops
                              : kind == LH_KIND_ATTENTION_BACKEND || kind == LH_KIND_GGUF
                                  ? NULL
                                  : e->p.model.ops;
    /* ops must cover construct..destroy as this SDK defines them (append-only later) */
    bool fn_ok = kind == LH_KIND_ATTENTION_BACKEND || kind == LH_KIND_GGUF ||
                 (ops && ops->struct_size >= offsetof(lh_model_ops, destroy) + sizeof ops->destroy &&
                  ops->construct && (!ops->forward) == (!ops->bind));
    const char *gguf_bad = kind == LH_KIND_GGUF ? gguf_provider_problem(&e->p.gguf) : NULL;
    if (!name || !*name || !fn_ok || gguf_bad) {
        lh_log(LH_LOG_ERROR, "%s: %s provider without %s", mod->path, lh_kind_name(kind),
               gguf_bad ? gguf_bad
               : !fn_ok ? "a complete lh_model_ops (construct; bind and forward together)"
                        : "a name");
        free(e);
        return LH_E_USAGE;
    }
    if (module_declared(mod, name, kind)) {
        lh_log(LH_LOG_ERROR, "%s: registers %s '%s' twice", mod->path, lh_kind_name(kind), name);
        free(e);
        return LH_E_USAGE;
    }
    e->name = strdup(name);
    if (!e->name) {
        free(e);
        return LH_E_NOMEM;
    }
    /* point the copied provider's name at our own copy: the plugin's string may be transient */
    if (kind == LH_KIND_DRAFT)
        e->p.draft.mode = e->name;
    else if (kind == LH_KIND_ATTENTION_BACKEND)
        e->p.attn.name = e->name;
    else if (kind == LH_KIND_GGUF)
        e->p.gguf.gguf_arch = e->name;
    else
        e->p.model.name = e->name;
    e->kind = kind;
    e->module = mod;
    if (mod->n_log == mod->cap_log) {
        size_t nc = mod->cap_log ? mod->cap_log * 2 : 8;
        lh_reg_entry **g = realloc(mod->log, nc * sizeof *g);
        if (!g) {
            free(e->name);
            free(e);
            return LH_E_NOMEM;
        }
        mod->log = g;
        mod->cap_log = nc;
    }
    mod->log[mod->n_log++] = e;
    return LH_OK;
}

/* ---- custom dirs --------------------------------------------------------------------------- */

static bool eager_candidate(const char *name)
{
    return fnmatch("libmodel_*.so", name, 0) == 0 || fnmatch("libattn_*.so", name, 0) == 0;
}

static lh_status eager_scan(lh_registry *reg, lh_custom_dir *d, lh_err *err)
{
    DIR *dh = opendir(d->path);
    if (!dh)
        return lh_err_set(err, LH_E_IO, "custom module dir %s: %s", d->path, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    lh_status st = LH_OK;
    struct dirent *de;
    while ((de = readdir(dh))) {
        if (!eager_candidate(de->d_name))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **g = realloc(names, nc * sizeof *g);
            if (!g) {
                st = lh_err_set(err, LH_E_NOMEM, "out of memory");
                break;
            }
            names = g;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name))) {
            st = lh_err_set(err, LH_E_NOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(dh);
    if (st == LH_OK) {
        /* byte order, not the locale's collation: precedence must not depend on LANG */
        if (n > 1) /* names is NULL for an empty dir: qsort's arguments must be valid */
            qsort(names, n, sizeof *names, cmp_str);
        d->eager = calloc(n ? n : 1, sizeof *d->eager);
        if (!d->eager)
            st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n && st == LH_OK; i++) {
        lh_module_rec *m;
        st = load_file(reg, d->path, names[i], false, &m, err); /* applied by the rebuild */
        if (st == LH_OK)
            d->eager[d->n_eager++] = m;
        else
            lh_err_prefix(err, "custom module dir %s has no %s, so every plugin in it is loaded "
                          "at declaration", d->path, LH_ARCH_INDEX_FILE);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

lh_status lh_registry_add_dir(lh_registry *reg, const char *dir, lh_err *err)
{
    lh_status st = lh_security_check_dir(dir, err);
    if (st == LH_E_INSECURE && reg->allow_insecure && dir[0] == '/') {
        lh_log(LH_LOG_WARN, "using despite --allow-insecure-plugins: %s", err->msg);
        st = LH_OK;
    }
    if (st != LH_OK)
        return st;
    char *canon = realpath(dir, NULL);
    if (!canon)
        return lh_err_set(err, LH_E_IO, "custom module dir %s: %s", dir, strerror(errno));
    if (strcmp(canon, reg->builtin_dir) == 0) {
        free(canon);
        return lh_err_set(err, LH_E_USAGE, "custom module dir %s is the built-in plugin dir",
                          dir);
    }
    if (declared_dir(reg, canon, NULL)) {
        free(canon);
        return lh_err_set(err, LH_E_USAGE, "custom module dir %s is already declared", dir);
    }
    lh_custom_dir *grown = realloc(reg->dirs, (reg->n_dirs + 1) * sizeof *grown);
    if (!grown) {
        free(canon);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    reg->dirs = grown;
    lh_custom_dir *d = &reg->dirs[reg->n_dirs];
    memset(d, 0, sizeof *d);
    d->path = canon;
    char *index_path = lh_path_join(canon, LH_ARCH_INDEX_FILE);
    if (!index_path) {
        free_dir(d);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    d->has_index = access(index_path, F_OK) == 0;
    if (d->has_index)
        st = lh_arch_index_load(index_path, &d->index, err);
    free(index_path);
    if (st != LH_OK) {
        free_dir(d);
        return st;
    }
    /* Declared before the eager scan so that what loads is applied with this dir's rank. */
    reg->n_dirs++;
    if (!d->has_index) {
        st = eager_scan(reg, &reg->dirs[reg->n_dirs - 1], err);
        if (st != LH_OK) {
            reg->n_dirs--;
            free_dir(&reg->dirs[reg->n_dirs]);
            lh_registry_rebuild(reg, true);
            return st;
        }
    }
    lh_registry_rebuild(reg, false);
    return LH_OK;
}

lh_status lh_registry_remove_dir(lh_registry *reg, const char *dir, lh_err *err)
{
    char *canon = realpath(dir, NULL);
    size_t pos;
    lh_custom_dir *d = declared_dir(reg, canon ? canon : dir, &pos);
    free(canon);
    if (!d)
        return lh_err_set(err, LH_E_USAGE, "custom module dir %s is not declared", dir);
    free_dir(d);
    memmove(&reg->dirs[pos], &reg->dirs[pos + 1], (reg->n_dirs - pos - 1) * sizeof *reg->dirs);
    reg->n_dirs--;
    lh_registry_rebuild(reg, true);
    return LH_OK;
}
