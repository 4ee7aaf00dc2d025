/* The Jinja subset's evaluator (see jinja.h): expressions and statements over the values of
 * jinja_value.c, built-ins called through jinja_builtins.c's table. */
#include "chat/jinja_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool exec(jctx *c, const jnode *nd, lh_strbuf *out);

static json_t *lookup(jctx *c, const char *name)
{
    for (int i = c->nscopes - 1; i >= 0; i--) {
        json_t *v = json_object_get(c->scopes[i], name);
        if (v)
            return json_incref(v);
    }
    json_t *v = json_object_get(c->globals, name);
    if (v)
        return json_incref(v);
    if (jb_find(JB_FUNCTION, name)->fn) {
        char buf[64];
        snprintf(buf, sizeof buf, "<function %s>", name);
        v = json_string(buf);
        if (!v)
            JV_OOM(c);
        return v;
    }
    return jv_undef(c);
}

/* Evaluates nd's arguments from kid `first` on, for b's parameters (and checks their count);
 * vals[i] new references or NULL where absent. */
static bool eval_args(jctx *c, const jnode *nd, size_t first, const jbuiltin *b, json_t **vals)
{
    const char *what = nd->name;
    size_t nparams = b->nparams;
    for (size_t i = 0; i < nparams; i++)
        vals[i] = NULL;
    size_t npos = nd->nkids - first;
    if (npos > nparams) {
        jv_fail(c, nd, LH_E_CONFIG, "%s takes at most %zu argument%s, got %zu", what, nparams,
                nparams == 1 ? "" : "s", npos);
        return false;
    }
    for (size_t i = 0; i < npos; i++) {
        vals[i] = jinja_eval(c, nd->kids[first + i]);
        if (!vals[i])
            goto bad;
    }
    for (size_t k = 0; k < nd->nkw; k++) {
        size_t idx = nparams;
        for (size_t i = 0; i < nparams; i++)
            if (strcmp(b->params[i].name, nd->kwnames[k]) == 0)
                idx = i;
        if (idx == nparams) {
            jv_fail(c, nd, LH_E_UNSUPPORTED, "%s has no argument '%s'", what, nd->kwnames[k]);
            goto bad;
        }
        if (vals[idx]) {
            jv_fail(c, nd, LH_E_CONFIG, "%s got argument '%s' twice", what, nd->kwnames[k]);
            goto bad;
        }
        vals[idx] = jinja_eval(c, nd->kwvals[k]);
        if (!vals[idx])
            goto bad;
    }
    return true;
bad:
    for (size_t i = 0; i < nparams; i++) {
        json_decref(vals[i]);
        vals[i] = NULL;
    }
    return false;
}

/* ---- built-in calls -------------------------------------------------------------------- */

static json_t *apply_filter(jctx *c, const jnode *nd)
{
    const jbuiltin *b = jb_find(JB_FILTER, nd->name);
    json_t *v = jinja_eval(c, nd->kids[0]);
    if (!v)
        return NULL;
    json_t *a[JB_MAX_PARAMS] = {NULL};
    if (!eval_args(c, nd, 1, b, a)) {
        json_decref(v);
        return NULL;
    }
    json_t *r = NULL;
    if (!b->fn)
        jv_fail(c, nd, LH_E_UNSUPPORTED, "unknown filter '%s'", nd->name);
    else if (jb_defaults(c, b, a))
        r = b->fn(c, b, nd, v, a);
    if (!r && !c->failed)
        JV_OOM(c);
    jv_release(a, JB_MAX_PARAMS);
    json_decref(v);
    return r;
}

static json_t *apply_test(jctx *c, const jnode *nd)
{
    const char *t = nd->name;
    const jbuiltin *b = jb_find(JB_TEST, t);
    json_t *v = jinja_eval(c, nd->kids[0]);
    if (!v)
        return NULL;
    json_t *arg = NULL;
    if (nd->nkids > 2 || nd->nkw) {
        json_decref(v);
        jv_fail(c, nd, LH_E_CONFIG, "test '%s' takes at most one argument", t);
        return NULL;
    }
    if (nd->nkids == 2) {
        arg = jinja_eval(c, nd->kids[1]);
        if (!arg) {
            json_decref(v);
            return NULL;
        }
    }
    bool r = false, ok = jb_run_test(c, nd, b, t, v, arg, &r);
    json_decref(v);
    json_decref(arg);
    if (!ok)
        return NULL;
    return json_boolean(r != nd->neg);
}

static json_t *call_func(jctx *c, const jnode *nd)
{
    const jbuiltin *b = jb_find(JB_FUNCTION, nd->name);
    if (!b->fn) {
        jv_fail(c, nd, LH_E_UNSUPPORTED, "unknown function '%s'", nd->name);
        return NULL;
    }
    if (b->raw)
        return b->fn(c, b, nd, NULL, NULL);
    json_t *a[JB_MAX_PARAMS] = {NULL};
    if (!eval_args(c, nd, 0, b, a))
        return NULL;
    json_t *r = jb_defaults(c, b, a) ? b->fn(c, b, nd, NULL, a) : NULL;
    jv_release(a, JB_MAX_PARAMS);
    return r;
}

static json_t *call_method(jctx *c, const jnode *nd)
{
    json_t *obj = jinja_eval(c, nd->kids[0]);
    if (!obj)
        return NULL;
    const char *m = nd->name;
    bool dict = json_is_object(obj) && !jv_is_namespace(c, obj);
    const jbuiltin *b = jb_find(json_is_string(obj) ? JB_STR_METHOD
                                : dict              ? JB_DICT_METHOD
                                                    : JB_NO_METHOD,
                                m);
    json_t *a[JB_MAX_PARAMS] = {NULL};
    if (!eval_args(c, nd, 1, b, a)) {
        json_decref(obj);
        return NULL;
    }
    json_t *r = NULL;
    if (b->fn) {
        if (jb_defaults(c, b, a))
            r = b->fn(c, b, nd, obj, a);
    } else if (json_is_string(obj) || dict) {
        jv_fail(c, nd, LH_E_UNSUPPORTED, "unsupported method '%s' on a %s", m,
                dict ? "dict" : "string");
    } else if (jv_is_undef(c, obj)) {
        jv_fail(c, nd, LH_E_CONFIG, "method '%s' called on an undefined value", m);
    } else {
        jv_fail(c, nd, LH_E_UNSUPPORTED, "unsupported method '%s' on a %s", m,
                jv_is_namespace(c, obj) ? "namespace" : jv_type_name(c, obj));
    }
    jv_release(a, JB_MAX_PARAMS);
    json_decref(obj);
    return r;
}

/* ---- operators ------------------------------------------------------------------------- */

static bool slice_bound(jctx *c, const jnode *at, json_t *v, long long *out)
{
    if (json_is_null(v))
        return false;
    if (!jv_is_intlike(v))
        return !jv_fail(c, at, LH_E_CONFIG, "slice indices must be integers");
    *out = jv_num_i(v);
    return true;
}

static json_t *do_slice(jctx *c, const jnode *nd, json_t *obj, json_t *a, json_t *b,
                        json_t *s)
{
    long long start = 0, stop = 0, step = 1;
    bool hs = slice_bound(c, nd, a, &start), he = slice_bound(c, nd, b, &stop);
    bool hst = slice_bound(c, nd, s, &step);
    if (c->failed)
        return NULL;
    if (hst && step == 0) {
        jv_fail(c, nd, LH_E_CONFIG, "slice step cannot be zero");
        return NULL;
    }
    json_t *items = NULL;
    if (json_is_array(obj) || json_is_string(obj))
        items = jv_iter_list(c, nd, obj);
    else if (jv_is_undef(c, obj)) {
        jv_fail(c, nd, LH_E_CONFIG, "slice of an undefined value");
        return NULL;
    } else {
        jv_fail(c, nd, LH_E_CONFIG, "slice of a %s", jv_type_name(c, obj));
        return NULL;
    }
    if (!items)
        return NULL;
    long long len = (long long)json_array_size(items);
    /* Python's PySlice_AdjustIndices */
    if (!hs)
        start = step < 0 ? len - 1 : 0;
    else if (start < 0) {
        start += len;
        if (start < 0)
            start = step < 0 ? -1 : 0;
    } else if (start >= len)
        start = step < 0 ? len - 1 : len;
    if (!he)
        stop = step < 0 ? -1 : len;
    else if (stop < 0) {
        stop += len;
        if (stop < 0)
            stop = step < 0 ? -1 : 0;
    } else if (stop >= len)
        stop = step < 0 ? len - 1 : len;
    json_t *r;
    if (json_is_string(obj)) {
        lh_strbuf bb = JV_BUF;
        bool ok = true;
        for (long long i = start; ok && (step > 0 ? i < stop : i > stop); i += step)
            ok = jv_str(c, &bb, json_array_get(items, (size_t)i));
        r = ok ? jv_take(c, &bb) : (lh_strbuf_free(&bb), NULL);
    } else {
        r = json_array();
        for (long long i = start; r && (step > 0 ? i < stop : i > stop); i += step)
            json_array_append(r, json_array_get(items, (size_t)i));
        if (!r)
            JV_OOM(c);
    }
    json_decref(items);
    return r;
}

static json_t *arith(jctx *c, const jnode *nd, json_t *l, json_t *r)
{
    const char *op = nd->name;
    if (!strcmp(op, "~")) {
        lh_strbuf b = JV_BUF;
        if (!jv_str(c, &b, l) || !jv_str(c, &b, r)) {
            lh_strbuf_free(&b);
            return NULL;
        }
        return jv_take(c, &b);
    }
    if (op[0] == '+' && json_is_string(l) && json_is_string(r)) {
        lh_strbuf b = JV_BUF;
        if (!jv_add(c, &b, json_string_value(l), json_string_length(l)) ||
            !jv_add(c, &b, json_string_value(r), json_string_length(r))) {
            lh_strbuf_free(&b);
            return NULL;
        }
        return jv_take(c, &b);
    }
    if (op[0] == '+' && json_is_array(l) && json_is_array(r)) {
        json_t *o = json_copy(l);
        if (!o || json_array_extend(o, r)) {
            json_decref(o);
            JV_OOM(c);
            return NULL;
        }
        return o;
    }
    if (op[0] == '*' && !op[1] && (json_is_string(l) || json_is_array(l)) && jv_is_intlike(r)) {
        long long k = jv_num_i(r);
        if (json_is_string(l)) {
            lh_strbuf b = JV_BUF;
            for (long long i = 0; i < k; i++)
                if (!jv_add(c, &b, json_string_value(l), json_string_length(l))) {
                    lh_strbuf_free(&b);
                    return NULL;
                }
            return jv_take(c, &b);
        }
        if (k > 0 &&
            (unsigned long long)k * json_array_size(l) > (unsigned long long)JINJA_MAX_ITERS) {
            jv_fail(c, nd, LH_E_UNSUPPORTED, "a list longer than %lld items", JINJA_MAX_ITERS);
            return NULL;
        }
        json_t *o = json_array();
        for (long long i = 0; o && i < k; i++)
            json_array_extend(o, l);
        if (!o)
            JV_OOM(c);
        return o;
    }
    if (!jv_is_num(l) || !jv_is_num(r)) {
        jv_fail(c, nd, LH_E_CONFIG, "unsupported operand types for %s: %s and %s", op,
                jv_type_name(c, l), jv_type_name(c, r));
        return NULL;
    }
    bool ints = jv_is_intlike(l) && jv_is_intlike(r);
    if (ints && strcmp(op, "/") != 0) {
        long long x = jv_num_i(l), y = jv_num_i(r), z = 0;
        bool ovf = false;
        if (!strcmp(op, "+"))
            ovf = __builtin_add_overflow(x, y, &z);
        else if (!strcmp(op, "-"))
            ovf = __builtin_sub_overflow(x, y, &z);
        else if (!strcmp(op, "*"))
            ovf = __builtin_mul_overflow(x, y, &z);
        else if (!strcmp(op, "//") || !strcmp(op, "%")) {
            if (y == 0) {
                jv_fail(c, nd, LH_E_CONFIG, "integer division or modulo by zero");
                return NULL;
            }
            if (x == LLONG_MIN && y == -1)
                ovf = true;
            else {
                long long q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                z = op[0] == '/' ? q : m;
            }
        } else if (!strcmp(op, "**")) {
            if (y < 0)
                return json_real(pow((double)x, (double)y));
            z = 1;
            for (long long i = 0; i < y && !ovf; i++)
                ovf = __builtin_mul_overflow(z, x, &z);
        }
        if (ovf) {
            jv_fail(c, nd, LH_E_UNSUPPORTED, "integer overflow in %s", op);
            return NULL;
        }
        return json_integer(z);
    }
    double x = jv_num_d(l), y = jv_num_d(r), z;
    if (!strcmp(op, "+"))
        z = x + y;
    else if (!strcmp(op, "-"))
        z = x - y;
    else if (!strcmp(op, "*"))
        z = x * y;
    else if (!strcmp(op, "**"))
        z = pow(x, y);
    else {
        if (y == 0) {
            jv_fail(c, nd, LH_E_CONFIG, "division by zero");
            return NULL;
        }
        if (!strcmp(op, "/"))
            z = x / y;
        else if (!strcmp(op, "//"))
            z = floor(x / y);
        else {
            z = fmod(x, y);
            if (z != 0 && ((z < 0) != (y < 0)))
                z += y;
        }
    }
    if (!isfinite(z)) {
        jv_fail(c, nd, LH_E_UNSUPPORTED, "a float result that is not finite (inf or nan)");
        return NULL;
    }
    return json_real(z);
}

/* one comparison l OP r (Python semantics) */
static bool compare(jctx *c, const jnode *nd, const char *op, json_t *l, json_t *rr, bool *out)
{
    bool res = false;
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        res = jv_eq(c, l, rr) == (op[0] == '=');
    } else if (!strcmp(op, "in") || !strcmp(op, "not in")) {
        bool neg = op[0] == 'n';
        if (json_is_string(rr)) {
            if (!json_is_string(l))
                jv_fail(c, nd, LH_E_CONFIG, "'in <string>' needs a string on the left, got %s",
                        jv_type_name(c, l));
            else
                res = memmem(json_string_value(rr), json_string_length(rr),
                             json_string_value(l), json_string_length(l)) != NULL ||
                      json_string_length(l) == 0;
        } else if (json_is_array(rr)) {
            for (size_t i = 0; i < json_array_size(rr) && !res; i++)
                res = jv_eq(c, l, json_array_get(rr, i));
        } else if (json_is_object(rr)) {
            res = json_is_string(l) && json_object_get(rr, json_string_value(l)) != NULL;
        } else if (jv_is_undef(c, rr)) {
            res = false;
        } else {
            jv_fail(c, nd, LH_E_CONFIG, "argument of type %s is not iterable",
                    jv_type_name(c, rr));
        }
        res = res != neg;
    } else {
        int cr = 0;
        if (!jv_cmp(c, l, rr, &cr))
            jv_fail(c, nd, LH_E_CONFIG, "'%s' not supported between %s and %s", op,
                    jv_type_name(c, l), jv_type_name(c, rr));
        else if (!strcmp(op, "<"))
            res = cr < 0;
        else if (!strcmp(op, "<="))
            res = cr <= 0;
        else if (!strcmp(op, ">"))
            res = cr > 0;
        else
            res = cr >= 0;
    }
    *out = res;
    return !c->failed;
}

json_t *jinja_eval(jctx *c, const jnode *nd)
{
    if (c->failed)
        return NULL;
    json_t *r = NULL;
    switch (nd->kind) {
    case E_LIT: return json_incref(nd->lit);
    case E_NAME: return lookup(c, nd->name);
    case E_LIST: {
        r = json_array();
        if (!r) {
            JV_OOM(c);
            return NULL;
        }
        for (size_t i = 0; i < nd->nkids; i++) {
            json_t *v = jinja_eval(c, nd->kids[i]);
            if (!v || !jv_check_nesting(c, nd, v, NULL)) {
                json_decref(v);
                json_decref(r);
                return NULL;
            }
            json_array_append_new(r, v);
        }
        return r;
    }
    case E_DICT: {
        r = json_object();
        if (!r) {
            JV_OOM(c);
            return NULL;
        }
        for (size_t i = 0; i + 1 < nd->nkids; i += 2) {
            json_t *k = jinja_eval(c, nd->kids[i]);
            if (!k) {
                json_decref(r);
                return NULL;
            }
            if (!json_is_string(k)) {
                jv_fail(c, nd->kids[i], LH_E_UNSUPPORTED, "dict keys that are not strings");
                json_decref(k);
                json_decref(r);
                return NULL;
            }
            json_t *v = jinja_eval(c, nd->kids[i + 1]);
            if (v && !jv_check_nesting(c, nd, v, NULL)) {
                json_decref(v);
                v = NULL;
            }
            if (!v) {
                json_decref(k);
                json_decref(r);
                return NULL;
            }
            json_object_set_new(r, json_string_value(k), v);
            json_decref(k);
        }
        return r;
    }
    case E_ATTR: {
        json_t *o = jinja_eval(c, nd->kids[0]);
        if (!o)
            return NULL;
        if (jv_is_undef(c, o))
            jv_fail(c, nd, LH_E_CONFIG, "attribute '%s' of an undefined value", nd->name);
        else if (json_is_object(o)) {
            json_t *v = json_object_get(o, nd->name);
            r = v ? json_incref(v) : jv_undef(c);
        } else
            r = jv_undef(c);
        json_decref(o);
        return r;
    }
    case E_ITEM: {
        json_t *o = jinja_eval(c, nd->kids[0]);
        if (!o)
            return NULL;
        json_t *k = jinja_eval(c, nd->kids[1]);
        if (!k) {
            json_decref(o);
            return NULL;
        }
        if (jv_is_undef(c, o)) {
            jv_fail(c, nd, LH_E_CONFIG, "subscript of an undefined value");
        } else if (json_is_object(o)) {
            json_t *v = json_is_string(k) ? json_object_get(o, json_string_value(k)) : NULL;
            r = v ? json_incref(v) : jv_undef(c);
        } else if ((json_is_array(o) || json_is_string(o)) && jv_is_intlike(k)) {
            long long i = jv_num_i(k);
            if (json_is_array(o)) {
                long long n = (long long)json_array_size(o);
                if (i < 0)
                    i += n;
                r = (i >= 0 && i < n) ? json_incref(json_array_get(o, (size_t)i)) : jv_undef(c);
            } else {
                size_t cnt;
                size_t *offs = jv_u8_offsets(c, json_string_value(o), json_string_length(o), &cnt);
                if (offs) {
                    long long n = (long long)cnt;
                    if (i < 0)
                        i += n;
                    r = (i >= 0 && i < n)
                            ? jv_newstr(c, json_string_value(o) + offs[i], offs[i + 1] - offs[i])
                            : jv_undef(c);
                    free(offs);
                }
            }
        } else {
            r = jv_undef(c);
        }
        json_decref(o);
        json_decref(k);
        return r;
    }
    case E_SLICE: {
        json_t *v[4] = {NULL, NULL, NULL, NULL};
        bool ok = true;
        for (int i = 0; i < 4 && ok; i++)
            ok = (v[i] = jinja_eval(c, nd->kids[i])) != NULL;
        if (ok)
            r = do_slice(c, nd, v[0], v[1], v[2], v[3]);
        jv_release(v, 4);
        return r;
    }
    case E_CALL: return call_func(c, nd);
    case E_METHOD: return call_method(c, nd);
    case E_FILTER: return apply_filter(c, nd);
    case E_TEST: return apply_test(c, nd);
    case E_NEG: {
        json_t *v = jinja_eval(c, nd->kids[0]);
        if (!v)
            return NULL;
        if (!jv_is_num(v))
            jv_fail(c, nd, LH_E_CONFIG, "bad operand type for unary %s: %s", nd->name,
                    jv_type_name(c, v));
        else if (nd->name[0] == '+')
            r = jv_is_intlike(v) ? json_integer(jv_num_i(v)) : json_incref(v);
        else if (jv_is_intlike(v)) {
            if (jv_num_i(v) == LLONG_MIN)
                jv_fail(c, nd, LH_E_UNSUPPORTED, "integer overflow in unary -");
            else
                r = json_integer(-jv_num_i(v));
        } else
            r = json_real(-json_real_value(v));
        json_decref(v);
        return r;
    }
    case E_BIN: {
        json_t *l = jinja_eval(c, nd->kids[0]);
        if (!l)
            return NULL;
        json_t *rr = jinja_eval(c, nd->kids[1]);
        if (rr)
            r = arith(c, nd, l, rr);
        json_decref(l);
        json_decref(rr);
        if (!r && !c->failed)
            JV_OOM(c);
        return r;
    }
    case E_CMP: {
        json_t *l = jinja_eval(c, nd->kids[0]);
        bool res = true;
        for (size_t i = 1; l && res && i < nd->nkids; i++) {
            json_t *rr = jinja_eval(c, nd->kids[i]);
            bool ok = rr && compare(c, nd, nd->ops[i - 1], l, rr, &res);
            json_decref(l);
            l = ok ? rr : NULL;
            if (!ok)
                json_decref(rr);
        }
        if (!l)
            return NULL;
        json_decref(l);
        return json_boolean(res);
    }
    case E_NOT: {
        json_t *v = jinja_eval(c, nd->kids[0]);
        if (!v)
            return NULL;
        r = json_boolean(!jv_truthy(c, v));
        json_decref(v);
        return r;
    }
    case E_AND:
    case E_OR: {
        json_t *l = jinja_eval(c, nd->kids[0]);
        if (!l)
            return NULL;
        bool t = jv_truthy(c, l);
        if ((nd->kind == E_AND) != t)
            return l;
        json_decref(l);
        return jinja_eval(c, nd->kids[1]);
    }
    case E_COND: {
        json_t *cond = jinja_eval(c, nd->kids[0]);
        if (!cond)
            return NULL;
        bool t = jv_truthy(c, cond);
        json_decref(cond);
        if (t)
            return jinja_eval(c, nd->kids[1]);
        return nd->nkids > 2 ? jinja_eval(c, nd->kids[2]) : jv_undef(c);
    }
    default:
        jv_fail(c, nd, LH_E_INTERNAL, "unknown expression node %d", nd->kind);
        return NULL;
    }
}

/* ---- statements ---------------------------------------------------------------------- */

static bool push_scope(jctx *c, const jnode *at)
{
    if (c->nscopes >= JINJA_MAX_SCOPES)
        return jv_fail(c, at, LH_E_UNSUPPORTED, "loops nested deeper than %d", JINJA_MAX_SCOPES);
    json_t *s = json_object();
    if (!s)
        return JV_OOM(c);
    c->scopes[c->nscopes++] = s;
    return true;
}

static void pop_scope(jctx *c) { json_decref(c->scopes[--c->nscopes]); }

static bool bind_target(jctx *c, const jnode *nd, json_t *scope, json_t *item)
{
    if (!nd->name2)
        return json_object_set(scope, nd->name, item) == 0 || JV_OOM(c);
    if (!json_is_array(item) || json_array_size(item) != 2)
        return jv_fail(c, nd, LH_E_CONFIG, "cannot unpack a %s into two loop variables",
                       jv_type_name(c, item));
    return (json_object_set(scope, nd->name, json_array_get(item, 0)) == 0 &&
            json_object_set(scope, nd->name2, json_array_get(item, 1)) == 0) ||
           JV_OOM(c);
}

static bool exec_for(jctx *c, const jnode *nd, lh_strbuf *out)
{
    json_t *src = jinja_eval(c, nd->kids[0]);
    if (!src)
        return false;
    json_t *items = jv_iter_list(c, nd->kids[0], src);
    json_decref(src);
    if (!items)
        return false;
    bool ok = true;
    if (nd->kids[2]) { /* loop filter */
        json_t *kept = json_array();
        ok = kept != NULL || JV_OOM(c);
        for (size_t i = 0; ok && i < json_array_size(items); i++) {
            ok = push_scope(c, nd) && bind_target(c, nd, c->scopes[c->nscopes - 1],
                                                  json_array_get(items, i));
            json_t *t = ok ? jinja_eval(c, nd->kids[2]) : NULL;
            if (ok)
                pop_scope(c);
            ok = t != NULL;
            if (ok && jv_truthy(c, t))
                json_array_append(kept, json_array_get(items, i));
            json_decref(t);
        }
        json_decref(items);
        if (!ok) {
            json_decref(kept);
            return false;
        }
        items = kept;
    }
    size_t n = json_array_size(items);
    for (size_t i = 0; ok && i < n; i++) {
        if (++c->iters > JINJA_MAX_ITERS) {
            ok = jv_fail(c, nd, LH_E_UNSUPPORTED, "more than %lld loop iterations",
                         JINJA_MAX_ITERS);
            break;
        }
        if (!push_scope(c, nd)) {
            ok = false;
            break;
        }
        json_t *scope = c->scopes[c->nscopes - 1];
        json_t *loop = json_pack("{sIsIsIsIsbsbsI}", "index0", (json_int_t)i, "index",
                                 (json_int_t)i + 1, "revindex", (json_int_t)(n - i),
                                 "revindex0", (json_int_t)(n - i - 1), "first", i == 0, "last",
                                 i + 1 == n, "length", (json_int_t)n);
        if (loop && i > 0)
            json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (loop && i + 1 < n)
            json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        ok = (loop && json_object_set_new(scope, "loop", loop) == 0) || JV_OOM(c);
        ok = ok && bind_target(c, nd, scope, json_array_get(items, i));
        ok = ok && exec(c, nd->kids[1], out);
        pop_scope(c);
        if (c->loopctl == 1) {
            c->loopctl = 0;
            break;
        }
        c->loopctl = 0;
    }
    if (ok && n == 0 && nd->kids[3])
        ok = exec(c, nd->kids[3], out);
    json_decref(items);
    return ok;
}

static bool exec(jctx *c, const jnode *nd, lh_strbuf *out)
{
    if (c->failed)
        return false;
    switch (nd->kind) {
    case S_BODY:
        for (size_t i = 0; i < nd->nkids; i++) {
            if (!exec(c, nd->kids[i], out))
                return false;
            if (c->loopctl)
                return true;
        }
        return true;
    case S_TEXT: return jv_add(c, out, json_string_value(nd->lit), json_string_length(nd->lit));
    case S_OUT: {
        json_t *v = jinja_eval(c, nd->kids[0]);
        if (!v)
            return false;
        bool ok = jv_str(c, out, v);
        json_decref(v);
        return ok;
    }
    case S_IF: {
        size_t i = 0;
        size_t nconds = nd->neg ? (nd->nkids - 1) / 2 : nd->nkids / 2;
        for (; i < nconds; i++) {
            json_t *v = jinja_eval(c, nd->kids[2 * i]);
            if (!v)
                return false;
            bool t = jv_truthy(c, v);
            json_decref(v);
            if (t)
                return exec(c, nd->kids[2 * i + 1], out);
        }
        if (nd->neg)
            return exec(c, nd->kids[nd->nkids - 1], out);
        return true;
    }
    case S_FOR: return exec_for(c, nd, out);
    case S_SET: {
        json_t *v = jinja_eval(c, nd->kids[0]);
        if (!v)
            return false;
        bool ok;
        if (nd->name2) {
            json_t *ns = lookup(c, nd->name);
            if (!jv_is_namespace(c, ns))
                ok = jv_fail(c, nd, LH_E_CONFIG,
                             "cannot assign attribute '%s' of '%s': not a namespace()",
                             nd->name2, nd->name);
            else if (!jv_check_nesting(c, nd, v, ns))
                ok = false;
            else
                ok = json_object_set(ns, nd->name2, jv_is_undef(c, v) ? json_null() : v) == 0 ||
                     JV_OOM(c);
            json_decref(ns);
        } else {
            ok = json_object_set(c->scopes[c->nscopes - 1], nd->name, v) == 0 || JV_OOM(c);
        }
        json_decref(v);
        return ok;
    }
    case S_BREAK: c->loopctl = 1; return true;
    case S_CONTINUE: c->loopctl = 2; return true;
    default: return jv_fail(c, nd, LH_E_INTERNAL, "unknown statement node %d", nd->kind);
    }
}


lh_status lh_jinja_render(const lh_jinja *t, json_t *vars, const lh_jinja_env *env, char **out,
                          size_t *len, lh_err *err)
{
    lh_err_clear(err);
    if (!out)
        return lh_err_set(err, LH_E_USAGE, "lh_jinja_render: out is NULL");
    *out = NULL;
    if (len)
        *len = 0;
    if (!t || (vars && !json_is_object(vars)))
        return lh_err_set(err, LH_E_USAGE, "lh_jinja_render: no template or vars not an object");
    jctx *c = calloc(1, sizeof *c);
    if (!c)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    c->env = env;
    c->err = err;
    c->globals = vars ? json_incref(vars) : json_object();
    c->undef = json_object();
    lh_strbuf b = JV_BUF;
    lh_status st = LH_OK;
    if (!c->globals || !c->undef || !push_scope(c, NULL)) {
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    } else {
        /* break/continue outside a loop are no-ops, as Jinja rejects them at compile time */
        if (!exec(c, t->root, &b) || c->failed)
            st = c->code ? c->code : LH_E_INTERNAL;
    }
    while (c->nscopes)
        pop_scope(c);
    for (size_t i = 0; i < c->nns; i++)
        json_decref(c->namespaces[i]);
    free(c->namespaces);
    json_decref(c->undef);
    json_decref(c->globals);
    free(c);
    if (st != LH_OK) {
        lh_strbuf_free(&b);
        return st;
    }
    size_t n = b.len;
    if (!(*out = lh_strbuf_take(&b)))
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    if (len)
        *len = n;
    return LH_OK;
}
