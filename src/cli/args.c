/* args.c - the flag groups commands share (args.h): one parser per flag,
 * one error text per mistake, whichever command it is given to. */
#include "args.h"
#include "cmd.h"
#include "backend/backend.h"
#include "base/util.h"

#include <string.h>

/* A flag of a group: its long name, the alias bit that adds its short
 * name, and the group bit that enables it. */
typedef struct flag {
    const char *name, *alias;
    unsigned group, alias_bit;
} flag;

enum { F_MODEL, F_TOKENIZER, F_THREADS, F_CTX, F_DEVICE, F_NUMERICS, F_ENGINE };

static const flag flags[] = {
    [F_MODEL] = { "--model", "-m", BT_ARGS_MODEL, BT_ARGS_M },
    [F_TOKENIZER] = { "--tokenizer", "-z", BT_ARGS_TOKENIZER, BT_ARGS_Z },
    [F_THREADS] = { "--threads", "-t", BT_ARGS_THREADS, BT_ARGS_T },
    [F_CTX] = { "--ctx", NULL, BT_ARGS_CTX, 0 },
    [F_DEVICE] = { "--device", NULL, BT_ARGS_DEVICE, 0 },
    [F_NUMERICS] = { "--numerics", NULL, BT_ARGS_NUMERICS, 0 },
    [F_ENGINE] = { "--engine", NULL, BT_ARGS_ENGINE, 0 },
};

static int which(const bt_args *a, const char *arg)
{
    for (size_t k = 0; k < BT_ARRAY_SIZE(flags); k++) {
        const flag *f = &flags[k];
        if (!(a->take & f->group)) continue;
        if (!strcmp(arg, f->name) || (f->alias && (a->take & f->alias_bit) && !strcmp(arg, f->alias))) return (int)k;
    }
    return -1;
}

int bt_args_take(bt_args *a, int argc, char **argv, int *i, bool *taken)
{
    const char *arg = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    *taken = false;
    if (a->take & BT_ARGS_LLAMA) {
        int rc = bt_llama_flag(&a->llama, arg, v, taken);
        if (*taken && rc == BT_OK) ++*i;
        if (*taken || rc) return rc;
    }
    int k = which(a, arg);
    if (k < 0) return BT_OK;
    *taken = true;
    if (!v) return bt_error(BT_EINVAL, "%s needs a value", arg);
    ++*i;
    switch (k) {
    case F_MODEL:
        if ((a->take & BT_ARGS_ONE_MODEL) && a->model)
            return bt_error(BT_EINVAL, "more than one model given ('%s' and '%s')", a->model, v);
        a->model = v;
        return BT_OK;
    case F_TOKENIZER: a->tokenizer = v; return BT_OK;
    case F_THREADS: return bt_parse_int(arg, v, 1, 256, &a->threads);
    case F_CTX: return bt_parse_int(arg, v, a->ctx_min > 0 ? a->ctx_min : 1, 1 << 20, &a->ctx);
    case F_DEVICE:
        if (bt_device_parse(v, NULL, NULL)) return BT_EINVAL;
        a->device = v;
        return BT_OK;
    case F_NUMERICS:
        if (bt_numerics_parse(v, &a->numerics)) return BT_EINVAL;
        a->numerics_spec = v;
        return BT_OK;
    case F_ENGINE:
        if (!strcmp(v, "llama.cpp")) a->llamacpp = true;
        else if (strcmp(v, "native")) return bt_error(BT_EINVAL, "--engine expects native or llama.cpp, got '%s'", v);
        return BT_OK;
    }
    return BT_OK;
}

int bt_args_need_model(const bt_args *a, const char *cmd)
{
    return a->model ? BT_OK : bt_error(BT_EINVAL, "--model is required (see bangtrace help %s)", cmd);
}

int bt_args_llama_finish(bt_args *a, bool llamacpp, const char *engine_flag)
{
    if (a->llama.set && !llamacpp)
        return bt_error(BT_EINVAL, "the --llama-* flags choose llama.cpp's path: give %s", engine_flag);
    return llamacpp ? bt_llama_settings_env(&a->llama) : BT_OK;
}

int bt_args_need_feature(const bt_args *a, int feature)
{
    if (bt_device_offers(a->device, feature)) return BT_OK;
    const bt_device *with = bt_device_with(feature), *given;
    if (bt_device_parse(a->device, &given, NULL)) given = NULL;
    return bt_error(BT_EINVAL, "%s needs --device %s (the %s backend has no %s %s)", bt_backend_feature_flag(feature),
                    with ? with->name : "?", given ? given->title : "?", with ? with->title : "?",
                    feature == BT_BACKEND_GRAPHS ? "graphs" : "activity");
}

void bt_args_session(const bt_args *a, bt_session_cfg *cfg)
{
    cfg->model = a->model;
    cfg->tokenizer = a->tokenizer;
    cfg->ctx = (int)a->ctx;
    cfg->threads = (int)a->threads;
    cfg->device = a->device;
    cfg->numerics = (a->take & BT_ARGS_NUMERICS) ? &a->numerics : NULL;
    cfg->llama = a->llama;
}
