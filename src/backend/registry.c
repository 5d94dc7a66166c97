/* registry.c - open a backend by device name: "cpu" is built in, "cuda[:N]"
 * is a plugin (bangtrace-cuda.so) loaded with dlopen, so the bangtrace
 * binary links no CUDA library and runs on machines without a GPU.
 *
 * The plugin is searched for in $BANGTRACE_PLUGIN_DIR, then beside the
 * running executable (a build tree), then in the install's pkglibdir. It
 * exports one symbol, BT_BACKEND_PLUGIN_ENTRY (backend_impl.h). */
#include "backend/backend_impl.h"
#include "base/util.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef BT_PKGLIBDIR
#define BT_PKGLIBDIR "/usr/local/lib/bangtrace"
#endif

/* "cpu" -> kind 0; "cuda" / "cuda:N" -> kind 1, *ordinal N (0 default).
 * -1 for anything else. */
static int parse_device(const char *device, int *ordinal)
{
    *ordinal = 0;
    if (!device || !*device || !strcmp(device, "cpu")) return 0;
    if (strncmp(device, "cuda", 4)) return -1;
    const char *p = device + 4;
    if (!*p) return 1;
    if (*p != ':' || !p[1]) return -1;
    char *end;
    errno = 0;
    long n = strtol(p + 1, &end, 10);
    if (*end || errno || n < 0 || n > 1024 || p[1] == '-' || p[1] == '+' || p[1] == ' ') return -1;
    *ordinal = (int)n;
    return 1;
}

bool bt_backend_device_valid(const char *device)
{
    int ord;
    return parse_device(device, &ord) >= 0;
}

/* The directory of the running executable, or "" if /proc cannot say. */
static void exe_dir(char *buf, size_t cap)
{
    buf[0] = 0;
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) return;
    path[n] = 0;
    char *slash = strrchr(path, '/');
    if (!slash) return;
    *slash = 0;
    snprintf(buf, cap, "%s", path[0] ? path : "/");
}

static int open_plugin(const char *device, int ordinal, bt_backend **out)
{
    char dirs[3][PATH_MAX];
    const char *env = getenv("BANGTRACE_PLUGIN_DIR");
    snprintf(dirs[0], sizeof(dirs[0]), "%s", env ? env : "");
    exe_dir(dirs[1], sizeof(dirs[1]));
    snprintf(dirs[2], sizeof(dirs[2]), "%s", BT_PKGLIBDIR);
    char path[PATH_MAX + 64], searched[3 * PATH_MAX + 16] = "", why[512] = "";
    _Static_assert(sizeof(searched) > 3 * sizeof(dirs[0]), "room for every directory");
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++) {
        if (!dirs[i][0]) continue;
        snprintf(path, sizeof(path), "%.4000s/%s", dirs[i], BT_BACKEND_CUDA_PLUGIN);
        size_t sl = strlen(searched);
        snprintf(searched + sl, sizeof(searched) - sl, "%s%s", sl ? ", " : "", dirs[i]);
        if (access(path, F_OK) != 0) continue;
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            /* present but unloadable (no libcudart, wrong architecture):
             * that reason beats "not found" */
            const char *e = dlerror();
            snprintf(why, sizeof(why), "%s", e ? e : "dlopen failed");
        }
    }
    if (!h) {
        if (why[0]) return bt_error(BT_EUNSUPPORTED, "--device %s: cannot load the CUDA plugin: %s", device, why);
        return bt_error(BT_EUNSUPPORTED, "--device %s: no CUDA plugin (%s) in %s; this build has no CUDA backend "
                        "(configure with nvcc installed, or set BANGTRACE_PLUGIN_DIR)",
                        device, BT_BACKEND_CUDA_PLUGIN, searched[0] ? searched : "(nowhere)");
    }
    bt_backend_plugin_init_fn init;
    void *sym = dlsym(h, BT_BACKEND_PLUGIN_ENTRY);
    memcpy(&init, &sym, sizeof(init));     /* object -> function pointer without a cast warning */
    if (!sym) {
        dlclose(h);
        return bt_error(BT_EUNSUPPORTED, "--device %s: %s has no %s symbol (not a bangtrace backend plugin)", device,
                        path, BT_BACKEND_PLUGIN_ENTRY);
    }
    char err[400] = "";
    int rc = init(BT_BACKEND_ABI_VERSION, ordinal, out, err, sizeof(err));
    if (rc != BT_OK || !*out) {
        /* the handle stays loaded: a plugin that failed may have registered
         * atexit handlers or threads with the driver */
        *out = NULL;
        return bt_error(rc < 0 ? rc : BT_EUNSUPPORTED, "--device %s: %s", device,
                        err[0] ? err : "the CUDA plugin could not start (no driver or no GPU?)");
    }
    /* the plugin stays loaded for the life of the process: backends may
     * outlive the handle's last user (atexit, driver threads) */
    return BT_OK;
}

int bt_backend_open(const char *device, int n_threads, bt_backend **out)
{
    *out = NULL;
    int ordinal;
    switch (parse_device(device, &ordinal)) {
    case 0: return bt_backend_cpu_new(n_threads, out);
    case 1: return open_plugin(device, ordinal, out);
    default:
        return bt_error(BT_EINVAL, "--device expects cpu, cuda or cuda:N, got '%s'", device ? device : "");
    }
}
