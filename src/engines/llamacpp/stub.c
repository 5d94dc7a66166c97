/* stub.c - bangtrace built without llama.cpp (configure --without-llama-cpp,
 * or no build in the cache): the engine exists and says how to get it. */
#include "llamacpp.h"
#include "base/util.h"

int bt_llamacpp_engine_new(const bt_model *m, const bt_llamacpp_opts *o, bt_engine **out)
{
    (void)m; (void)o;
    *out = NULL;
    return bt_error(BT_EUNSUPPORTED, "--engine llama.cpp: this bangtrace was built without llama.cpp "
                    "(run tools/llama-cpp, then configure --with-llama-cpp)");
}

int bt_llamacpp_engines_new(const bt_model *m, const bt_llamacpp_opts *o, int n, bt_engine **out)
{
    for (int i = 0; i < n; i++) out[i] = NULL;
    return bt_llamacpp_engine_new(m, o, out);
}
int bt_llamacpp_mtp_engine_new(bt_engine *target, bt_engine **out)
{
    (void)target;
    return bt_llamacpp_engine_new(NULL, NULL, out);
}
const char *bt_llamacpp_last_path(void) { return ""; }
const char *bt_llamacpp_version(void) { return NULL; }
const char *bt_llamacpp_lib_version(void) { return NULL; }
const char *bt_llamacpp_build_flags(void) { return NULL; }

const char *bt_llamacpp_dir(void) { return NULL; }

int bt_llamacpp_bench_check(char *bench, size_t cap)
{
    if (cap) bench[0] = 0;
    return bt_error(BT_EUNSUPPORTED, "--against llama.cpp: this bangtrace was built without llama.cpp "
                    "(run tools/llama-cpp, then configure --with-llama-cpp)");
}

int bt_llamacpp_bench_run(const char *model, int threads, int depth, int np, int nd, int reps, const bt_llama_settings *ls,
                          double *prompt_tps, double *decode_tps)
{
    (void)model; (void)threads; (void)depth; (void)np; (void)nd; (void)reps; (void)ls;
    *prompt_tps = *decode_tps = 0;
    char b[1];
    return bt_llamacpp_bench_check(b, sizeof(b));
}
