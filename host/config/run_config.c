/* The run config's lifecycle, CLI overrides (--set KEY=VALUE, through the key table), value
 * origins and the explain view. The table and its typed operations are in run_config_keys.c,
 * the YAML reader in run_config_yaml.c, the cross-key rules in run_config_validate.c. See
 * run_config.h. */
#include "run_config.h"

#include "config/run_config_keys.h"
#include "core/err.h"
#include "core/strutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define DEFAULT_GROUP_SIZE 128

static lh_dtype kv_dtype_resolved(lh_dtype dt)
{
    return dt == LH_DTYPE_INVALID ? LH_DTYPE_F32 : dt;
}

bool lh_kv_cache_mixed(const lh_kv_cache_config *kv)
{
    return kv && kv_dtype_resolved(kv->k_dtype) != kv_dtype_resolved(kv->v_dtype);
}

/* ------------------------------------------------------------------------------------------ */
/* init / free / origins */

void lh_run_config_init(lh_run_config *rc)
{
    if (!rc)
        return;
    memset(rc, 0, sizeof *rc);
    rc->mm_encoder_only = false;
    rc->model_impl_mode = LH_IMPL_OFF;
    rc->dtype = LH_DTYPE_INVALID;
    rc->max_seq_len = 0;
    rc->max_batch_size = 1;
    rc->kv_cache.block_size = 16;
    rc->kv_cache.k_dtype = LH_DTYPE_INVALID;
    rc->kv_cache.v_dtype = LH_DTYPE_INVALID;
    rc->sparse.local_blocks = 1;
    rc->beam_width = 1;
    rc->fused_rope = true;
    rc->device = (lh_device){LH_DEVICE_CPU, 0};
    rc->device_auto = true;
    rc->cuda_graphs = true;
    rc->quant.scheme = LH_QUANT_NONE;
    rc->quant.group_size = DEFAULT_GROUP_SIZE;
}

void lh_rc_free_rules(lh_quant_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rules[i].pattern);
    free(rules);
}

void lh_rc_free_strings(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

void lh_run_config_free(lh_run_config *rc)
{
    if (!rc)
        return;
    free(rc->source);
    free(rc->model_impl_target);
    free(rc->attn_backend);
    free(rc->speculative.mode);
    lh_rc_free_rules(rc->quant.rules, rc->quant.n_rules);
    lh_rc_free_strings(rc->quant.exclude_modules, rc->quant.n_exclude);
    lh_run_config_init(rc);
}

const char *lh_value_origin_str(const lh_run_config *rc, lh_value_origin o, char *buf, size_t n)
{
    if (!buf || n == 0)
        return "";
    switch (o.kind) {
    case LH_ORIGIN_YAML:
        snprintf(buf, n, "%s:%d:%d", rc && rc->source ? rc->source : "<yaml>", o.line,
                 o.column);
        break;
    case LH_ORIGIN_FLAG:
        snprintf(buf, n, "flag");
        break;
    default:
        snprintf(buf, n, "default");
        break;
    }
    return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* explain: every root key of the table, in json_rank order */

json_t *lh_run_config_to_json(const lh_run_config *rc)
{
    if (!rc)
        return NULL;
    json_t *j = json_object();
    if (!j)
        return NULL;
    int bad = json_object_set_new(j, "source", rc->source ? json_string(rc->source) : json_null());
    int rank_max = 0;
    for (size_t i = 0; i < lh_rc_n_keys; i++)
        if (lh_rc_keys[i].json_rank > rank_max)
            rank_max = lh_rc_keys[i].json_rank;
    for (int rank = 1; rank <= rank_max; rank++) {
        for (size_t i = 0; i < lh_rc_n_keys; i++) {
            const lh_rc_key *k = &lh_rc_keys[i];
            if (k->json_rank != rank)
                continue;
            json_t *o;
            if (k->to_json) {
                o = k->to_json(rc, k);
            } else {
                char buf[1024];
                o = json_object();
                json_t *v = lh_rc_key_value_json(rc, k);
                json_t *from = json_string(
                    lh_value_origin_str(rc, lh_rc_key_origin(rc, k), buf, sizeof buf));
                if (!o || !v || !from || json_object_set_new(o, "value", v) ||
                    json_object_set_new(o, "origin", from)) {
                    json_decref(o);
                    o = NULL;
                }
            }
            bad |= o ? json_object_set_new(j, k->name, o) : -1;
        }
    }
    if (bad) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* ------------------------------------------------------------------------------------------ */
/* CLI overrides: the table's LH_RC_SET keys */

lh_status lh_run_config_set(lh_run_config *rc, const char *key_eq_value, lh_err *err)
{
    if (!rc || !key_eq_value)
        return lh_err_set(err, LH_E_USAGE, "lh_run_config_set: %s is NULL",
                          rc ? "key_eq_value" : "rc");
    const char *eq = strchr(key_eq_value, '=');
    if (!eq || eq == key_eq_value)
        return lh_err_set(err, LH_E_USAGE,
                          "run-config override '%s' must have the form KEY=VALUE", key_eq_value);
    char flag[96], name[96];
    size_t klen = (size_t)(eq - key_eq_value);
    if (klen >= sizeof name)
        klen = sizeof name - 1;
    memcpy(flag, key_eq_value, klen);
    flag[klen] = '\0';
    for (size_t i = 0; i <= klen; i++)
        name[i] = flag[i] == '-' ? '_' : flag[i];
    const char *value = eq + 1;

    const lh_rc_key *k = lh_rc_key_find(name);
    if (!k || !(k->from & LH_RC_SET)) {
        const char *settable[64];
        size_t n = lh_rc_key_names("", LH_RC_SET, true, settable, N_OF(settable));
        char list[768], hint[160] = "";
        lh_join_names(list, sizeof list, settable, n);
        const char *near = lh_nearest(name, settable, n);
        if (near)
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
        return lh_err_set(err, LH_E_USAGE, "--%s: unknown run-config key '%s'%s; settable keys: %s",
                          flag, flag, hint, list);
    }
    if (!*value)
        return lh_err_set(err, LH_E_USAGE, "--%s: no value given", flag);
    if (k->set)
        return k->set(rc, k, flag, value, err);
    char why[512];
    if (!lh_rc_key_parse(k, rc, value, true, (lh_value_origin){.kind = LH_ORIGIN_FLAG}, why,
                         sizeof why)) {
        if (strcmp(why, "out of memory") == 0)
            return lh_err_set(err, LH_E_NOMEM, "out of memory");
        return lh_err_set(err, LH_E_USAGE, "--%s: %s%s", flag, why,
                          (k->flags & LH_RC_AUTO_UNSETS) ? " (or auto: unset)" : "");
    }
    return LH_OK;
}
int64_t lh_run_max_seq_len(const lh_run_config *rc, const lh_model_geometry *g)
{
    if (rc && rc->max_seq_len > 0)
        return rc->max_seq_len;
    int64_t n = g->max_position_embeddings > 0 ? g->max_position_embeddings : 4096;
    if (g->rope_scaling.kind && strcmp(g->rope_scaling.kind, "dynamic") == 0 &&
        g->rope_scaling.factor > 1.0) {
        double scaled = (double)n * g->rope_scaling.factor;
        n = scaled < (double)INT32_MAX ? (int64_t)scaled : INT32_MAX;
    }
    return n < INT32_MAX ? n : INT32_MAX;
}

