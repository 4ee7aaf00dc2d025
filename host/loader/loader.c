#include "loader.h"

#include "api/host_api_table.h"
#include "core/err.h"
#include "core/log.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* Fields every ABI 3.x descriptor has (the layout constants included); a smaller struct
 * cannot be trusted. */
#define LH_DESCRIPTOR_MIN_SIZE (offsetof(lh_plugin_descriptor, layout) + sizeof(lh_plugin_layout))

static lh_status fail(lh_module_rec *rec, lh_err *err, lh_status code)
{
    rec->state = LH_MOD_STATE_FAILED;
    rec->fail_code = code;
    free(rec->fail_msg);
    rec->fail_msg = strdup(err->msg);
    return code;
}

static void drop_log(lh_module_rec *rec)
{
    for (size_t i = 0; i < rec->n_log; i++) {
        free(rec->log[i]->name);
        free(rec->log[i]);
    }
    rec->n_log = 0;
}

static lh_status check_descriptor(const lh_module_rec *rec, const lh_plugin_descriptor *d,
                                  lh_err *err)
{
    if (!d)
        return lh_err_set(err, LH_E_NOT_PLUGIN, "%s: %s() returned NULL", rec->path,
                          LH_PLUGIN_ENTRY_SYMBOL);
    if (d->magic != LH_PLUGIN_MAGIC)
        return lh_err_set(err, LH_E_NOT_PLUGIN,
                          "%s: bad magic 0x%08x in the plugin descriptor (expected 0x%08x): "
                          "not an llmhost plugin",
                          rec->path, d->magic, LH_PLUGIN_MAGIC);
    if (d->abi_major != LH_PLUGIN_ABI_MAJOR || d->abi_minor > LH_PLUGIN_ABI_MINOR)
        return lh_err_set(err, LH_E_ABI,
                          "%s: plugin built for ABI %u.%u, host provides ABI %d.%d (%s); "
                          "rebuild the plugin against this llmhost's SDK",
                          rec->path, d->abi_major, d->abi_minor, LH_PLUGIN_ABI_MAJOR,
                          LH_PLUGIN_ABI_MINOR,
                          d->abi_major != LH_PLUGIN_ABI_MAJOR
                              ? "major versions must be equal"
                              : "the plugin's minor version must not exceed the host's");
    if (d->struct_size < LH_DESCRIPTOR_MIN_SIZE)
        return lh_err_set(err, LH_E_NOT_PLUGIN,
                          "%s: plugin descriptor is %u bytes, smaller than the %zu bytes of "
                          "ABI %d.0",
                          rec->path, d->struct_size, (size_t)LH_DESCRIPTOR_MIN_SIZE,
                          LH_PLUGIN_ABI_MAJOR);
    /* the constants that decide struct layouts, before any plugin code runs */
    const lh_plugin_layout host = LH_PLUGIN_LAYOUT_INIT;
    static const struct {
        const char *name;
        size_t off;
    } consts[] = {
        {"LH_MAX_DIMS", offsetof(lh_plugin_layout, max_dims)},
        {"LH_ERROR_MSG_SIZE", offsetof(lh_plugin_layout, error_msg_size)},
        {"sizeof(void *)", offsetof(lh_plugin_layout, pointer_size)},
        {"sizeof(lh_tensor)", offsetof(lh_plugin_layout, tensor_size)},
    };
    for (size_t i = 0; i < sizeof consts / sizeof *consts; i++) {
        uint32_t mine, theirs;
        memcpy(&mine, (const char *)&host + consts[i].off, sizeof mine);
        memcpy(&theirs, (const char *)&d->layout + consts[i].off, sizeof theirs);
        if (mine != theirs)
            return lh_err_set(err, LH_E_ABI,
                              "%s: plugin built with %s = %u, host has %u: the SDK's struct "
                              "layouts differ; rebuild the plugin against this llmhost's SDK",
                              rec->path, consts[i].name, (unsigned)theirs, (unsigned)mine);
    }
    if (!d->name || !d->name[0] || !d->init)
        return lh_err_set(err, LH_E_NOT_PLUGIN, "%s: plugin descriptor lacks %s", rec->path,
                          !d->init ? "an init function" : "a name");
    return LH_OK;
}

lh_status lh_loader_load(lh_module_rec *rec, bool allow_insecure, unsigned *dlopen_calls,
                         lh_err *err)
{
    lh_status st = lh_security_check_file(rec->path, err);
    if (st == LH_E_INSECURE && allow_insecure) {
        lh_log(LH_LOG_WARN, "loading despite --allow-insecure-plugins: %s", err->msg);
        st = LH_OK;
    }
    if (st != LH_OK)
        return fail(rec, err, st);

    (*dlopen_calls)++;
    dlerror();
    void *handle = dlopen(rec->path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        lh_err_set(err, LH_E_LOAD, "%s: dlopen failed: %s", rec->path, why ? why : "(no reason)");
        return fail(rec, err, LH_E_LOAD);
    }
    dlerror();
    void *sym = dlsym(handle, LH_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        lh_err_set(err, LH_E_NOT_PLUGIN,
                   "%s: no entry symbol '%s': not an llmhost plugin (define one with "
                   "LH_PLUGIN_DEFINE)",
                   rec->path, LH_PLUGIN_ENTRY_SYMBOL);
        dlclose(handle); /* no plugin code ran; unloading is safe */
        return fail(rec, err, LH_E_NOT_PLUGIN);
    }
    lh_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object pointer to function pointer, POSIX-style */
    const lh_plugin_descriptor *d = entry();
    st = check_descriptor(rec, d, err);
    if (st != LH_OK) {
        dlclose(handle);
        return fail(rec, err, st);
    }
    rec->handle = handle;
    rec->plugin_name = strdup(d->name);
    rec->plugin_version = strdup(d->version ? d->version : "");
    rec->abi_major = d->abi_major;
    rec->abi_minor = d->abi_minor;

    rec->in_init = true;
    st = d->init(lh_host_api_table(), (lh_plugin_ctx *)rec);
    rec->in_init = false;
    if (st != LH_OK) {
        /* Transactional: whatever init registered goes. The handle stays open because plugin
         * code has run and may have left state (threads, atexit) behind. */
        drop_log(rec);
        lh_err_set(err, LH_E_INIT, "%s: plugin '%s' init failed (%s): %s", rec->path, d->name,
                   lh_status_name(st),
                   rec->init_fail_msg ? rec->init_fail_msg : "(the plugin gave no reason)");
        return fail(rec, err, LH_E_INIT);
    }
    rec->state = LH_MOD_STATE_LOADED;
    lh_log(LH_LOG_DEBUG, "loaded %s (plugin '%s' %s, ABI %u.%u, %zu registrations)", rec->path,
           rec->plugin_name, rec->plugin_version, rec->abi_major, rec->abi_minor, rec->n_log);
    return LH_OK;
}
