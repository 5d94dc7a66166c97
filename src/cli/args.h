/* args.h - the flag groups commands share, parsed in one place: the model
 * (--model, --tokenizer), compute (--threads, --ctx, --device), numerics
 * (--numerics) and the engine (--engine native|llama.cpp and the --llama-*
 * flags that choose llama.cpp's path).
 *
 * A command fills `take` with the groups it accepts (and the short aliases
 * it has always taken), sets the defaults it wants (threads, ctx_min), then
 * offers every argument to bt_args_take before its own flags; what the
 * groups parsed goes into a bt_session_cfg with bt_args_session. The error
 * texts are the same in every command: "--threads expects an integer in
 * [1, 256], got 'x'", "--device expects cpu, cuda or cuda:N, got 'x'" (the
 * device list read from the registry's table, src/backend/registry.c). */
#ifndef BT_ARGS_H
#define BT_ARGS_H

#include <stdbool.h>
#include "kernels/cpu/numerics.h"
#include "run/session.h"          /* bt_llama_settings, bt_session_cfg */

enum bt_args_group {
    BT_ARGS_MODEL     = 1 << 0,   /* --model M */
    BT_ARGS_TOKENIZER = 1 << 1,   /* --tokenizer T */
    BT_ARGS_THREADS   = 1 << 2,   /* --threads N, 1..256 */
    BT_ARGS_CTX       = 1 << 3,   /* --ctx N, ctx_min..2^20 */
    BT_ARGS_DEVICE    = 1 << 4,   /* --device DEV: a row of the registry's device table */
    BT_ARGS_NUMERICS  = 1 << 5,   /* --numerics PROFILE (doc/numerics.md) */
    BT_ARGS_ENGINE    = 1 << 6,   /* --engine native|llama.cpp */
    BT_ARGS_LLAMA     = 1 << 7,   /* --llama-flash-attn, --llama-repack, --llama-kv-type, --llama-opt */
    /* the short aliases, only where a command has always had them */
    BT_ARGS_M         = 1 << 8,   /* -m for --model */
    BT_ARGS_T         = 1 << 9,   /* -t for --threads */
    BT_ARGS_Z         = 1 << 10,  /* -z for --tokenizer */
    BT_ARGS_ONE_MODEL = 1 << 11,  /* a second model is an error, not the last one winning */
};
/* what every command that runs a model takes */
#define BT_ARGS_COMPUTE (BT_ARGS_THREADS | BT_ARGS_CTX | BT_ARGS_DEVICE)

typedef struct bt_args {
    unsigned take;                /* bt_args_group bits */
    long ctx_min;                 /* --ctx's lower bound; 0 means 1 */
    /* the values (a command may preset a default) */
    const char *model, *tokenizer;
    long threads, ctx;
    const char *device;           /* as given, checked against the device table; NULL: the CPU */
    const char *numerics_spec;    /* as given; NULL: none (exact f32) */
    bt_numerics numerics;
    bool llamacpp;                /* --engine llama.cpp */
    bt_llama_settings llama;      /* the --llama-* flags */
} bt_args;

/* Offer argv[*i] to the groups in a->take. When it is one of their flags,
 * *taken is set, its value parsed (*i advanced past it) and BT_OK returned,
 * or BT_EINVAL with one line naming the flag ("--ctx needs a value", a
 * value out of range). Otherwise *taken is false and nothing changes. */
int bt_args_take(bt_args *a, int argc, char **argv, int *i, bool *taken);
/* "--model is required (see bangtrace help CMD)" unless a model was given. */
int bt_args_need_model(const bt_args *a, const char *cmd);
/* After the loop, for the llama.cpp flags: refused unless the engine is
 * llama.cpp (the flag that picks it, e.g. "--engine llama.cpp", is named in
 * the message); with it, the environment aliases fill what no flag gave. */
int bt_args_llama_finish(bt_args *a, bool llamacpp, const char *engine_flag);
/* --cuda-graphs / --cupti (feature: bt_backend_feature): BT_EINVAL with
 * "--cuda-graphs needs --device cuda (the CPU backend has no CUDA graphs)"
 * unless the device given is one that can offer it (the device table). */
int bt_args_need_feature(const bt_args *a, int feature);
/* Copy what the groups hold into cfg: model, tokenizer, ctx, threads,
 * device, numerics (NULL when not taken), the llama.cpp settings. */
void bt_args_session(const bt_args *a, bt_session_cfg *cfg);

#endif
