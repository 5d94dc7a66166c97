/* registry.c - the device table and opening a backend by device name:
 * "cpu" is built in, "cuda[:N]" is a plugin (bangtrace-cuda.so) loaded with
 * dlopen, so the bangtrace binary links no CUDA library and runs on
 * machines without a GPU.
 *
 * The table below is the one place device names are known: the --device
 * flag of every command (src/cli/args.c), its error text, the commands'
 * device checks (--cuda-graphs, --cupti, bench --against) and the trace's
 * meta backend read it. A new device is a row here (and, for a plugin, its
 * toolkit detected in configure.ac).
 *
 * A plugin is searched for in $BANGTRACE_PLUGIN_DIR, then beside the
 * running executable (a build tree), then in the install's pkglibdir. It
 * exports one symbol, BT_BACKEND_PLUGIN_ENTRY (backend_impl.h). */
#include "backend/backend_impl.h"
#include "base/util.h"
#include "kernels/cpu/kernels.h"     /* bt_kernels_simd: the CPU's trace name */

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

static const bt_device devices[] = {
    { .name = "cpu", .builtin = bt_backend_cpu_new, .title = "CPU",
      .description = "the built-in CPU backend (kernels/cpu), exact f32 with the numerics profiles" },
    { .name = "cuda", .ordinal = true, .plugin = BT_BACKEND_CUDA_PLUGIN, .title = "CUDA",
      .features = BT_BACKEND_GRAPHS | BT_BACKEND_ACTIVITY,
      .description = "an NVIDIA GPU through the CUDA plugin (kernels/cuda): device taps, CUDA graphs, CUPTI" },
};

const bt_device *bt_device_table(int *n)
{
    *n = (int)BT_ARRAY_SIZE(devices);
    return devices;
}

/* "cpu, cuda or cuda:N": every name the table accepts. */
static void device_list(char *buf, size_t cap)
{
    const char *names[2 * BT_ARRAY_SIZE(devices)];
    char with_n[BT_ARRAY_SIZE(devices)][32];
    int k = 0;
    for (size_t i = 0; i < BT_ARRAY_SIZE(devices); i++) {
        names[k++] = devices[i].name;
        if (devices[i].ordinal) {
            snprintf(with_n[i], sizeof(with_n[i]), "%s:N", devices[i].name);
            names[k++] = with_n[i];
        }
    }
    size_t u = 0;
    buf[0] = 0;
    for (int i = 0; i < k && u < cap; i++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%s", i == 0 ? "" : i == k - 1 ? " or " : ", ", names[i]);
}

/* The row of `device` and its ordinal; NULL for anything the table lacks. */
static const bt_device *lookup(const char *device, int *ordinal)
{
    *ordinal = 0;
    if (!device || !*device) return &devices[0];
    for (size_t i = 0; i < BT_ARRAY_SIZE(devices); i++) {
        const bt_device *d = &devices[i];
        size_t l = strlen(d->name);
        if (strncmp(device, d->name, l)) continue;
        const char *p = device + l;
        if (!*p) return d;
        if (!d->ordinal || *p != ':' || !p[1]) continue;
        char *end;
        errno = 0;
        long n = strtol(p + 1, &end, 10);
        if (*end || errno || n < 0 || n > 1024 || p[1] == '-' || p[1] == '+' || p[1] == ' ') continue;
        *ordinal = (int)n;
        return d;
    }
    return NULL;
}

int bt_device_parse(const char *device, const bt_device **row, int *ordinal)
{
    int ord;
    const bt_device *d = lookup(device, &ord);
    if (row) *row = d;
    if (ordinal) *ordinal = ord;
    if (d) return BT_OK;
    char list[256];
    device_list(list, sizeof(list));
    return bt_error(BT_EINVAL, "--device expects %s, got '%s'", list, device);
}

bool bt_backend_device_valid(const char *device)
{
    int ord;
    return lookup(device, &ord) != NULL;
}

bool bt_device_is_cpu(const char *device)
{
    int ord;
    return lookup(device, &ord) == &devices[0];
}

bool bt_device_offers(const char *device, int feature)
{
    int ord;
    const bt_device *d = lookup(device, &ord);
    return d && (d->features & (unsigned)feature);
}

const bt_device *bt_device_with(int feature)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(devices); i++)
        if (devices[i].features & (unsigned)feature) return &devices[i];
    return NULL;
}

void bt_backend_trace_name(const bt_backend *be, char *buf, size_t cap)
{
    const char *name = bt_backend_name(be);
    int ord;
    const bt_device *d = lookup(name, &ord);
    if (d && d->builtin) snprintf(buf, cap, "%s-%s", d->name, bt_kernels_simd());
    else snprintf(buf, cap, "%s", name);
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

static int open_plugin(const bt_device *row, const char *device, int ordinal, bt_backend **out)
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
        snprintf(path, sizeof(path), "%.4000s/%s", dirs[i], row->plugin);
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
        if (why[0]) return bt_error(BT_EUNSUPPORTED, "--device %s: cannot load the %s plugin: %s", device, row->title, why);
        return bt_error(BT_EUNSUPPORTED, "--device %s: no %s plugin (%s) in %s; this build has no %s backend "
                        "(configure with nvcc installed, or set BANGTRACE_PLUGIN_DIR)",
                        device, row->title, row->plugin, searched[0] ? searched : "(nowhere)", row->title);
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
        if (err[0]) return bt_error(rc < 0 ? rc : BT_EUNSUPPORTED, "--device %s: %s", device, err);
        return bt_error(rc < 0 ? rc : BT_EUNSUPPORTED, "--device %s: the %s plugin could not start (no driver or no GPU?)",
                        device, row->title);
    }
    /* the plugin stays loaded for the life of the process: backends may
     * outlive the handle's last user (atexit, driver threads) */
    return BT_OK;
}

int bt_backend_open(const char *device, int n_threads, bt_backend **out)
{
    *out = NULL;
    const bt_device *row;
    int ordinal, rc = bt_device_parse(device, &row, &ordinal);
    if (rc) return rc;
    rc = row->builtin ? row->builtin(n_threads, out) : open_plugin(row, device, ordinal, out);
    if (rc == BT_OK) bt_debug("backend %s: %s", bt_backend_describe(*out), row->description);
    return rc;
}
