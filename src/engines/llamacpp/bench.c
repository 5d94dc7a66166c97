/* bench.c - llama.cpp's own llama-bench, from the same pinned build the
 * adapter links, for `bangtrace bench --against llama.cpp`: one run on the
 * same GGUF and threads, its prompt and decode tokens/s read from its JSON.
 *
 * The build directory is configure's (BT_LLAMA_CPP_DIR), or the
 * BT_LLAMA_CPP_DIR environment variable; its build-info.txt must name the
 * pinned version (a llama-bench of another llama.cpp would compare other
 * kernels). It runs with llama.cpp's defaults (repacked weights, flash
 * attention auto, f16 KV), as the adapter does, unless the --llama-* settings
 * choose another path; those are passed on as llama-bench's own flags. */
#include "config.h"
#include "llamacpp.h"
#include "run/session.h"           /* bt_llama_settings */
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *bt_llamacpp_dir(void)
{
    const char *d = getenv("BT_LLAMA_CPP_DIR");
    return d && *d ? d : BT_LLAMA_CPP_DIR;
}

/* The version= line of DIR/build-info.txt into buf ("" when absent). */
static void build_version(const char *dir, char *buf, size_t cap)
{
    char path[4096], line[256];
    buf[0] = 0;
    snprintf(path, sizeof(path), "%s/build-info.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "version=", 8)) {
            line[strcspn(line, "\r\n")] = 0;
            snprintf(buf, cap, "%.60s", line + 8);
            break;
        }
    fclose(f);
}

int bt_llamacpp_bench_check(char *bench, size_t cap)
{
    const char *dir = bt_llamacpp_dir();
    char ver[64];
    build_version(dir, ver, sizeof(ver));
    if (strcmp(ver, bt_llamacpp_version()))
        return bt_error(BT_EINVAL, "%s/build-info.txt names llama.cpp version '%s', bangtrace pins %s "
                        "(tools/llama-cpp.sha256): version mismatch", dir, ver, bt_llamacpp_version());
    snprintf(bench, cap, "%s/bin/llama-bench", dir);
    if (access(bench, X_OK))
        return bt_error(BT_EINVAL, "%s: %s (tools/llama-cpp builds it)", bench, strerror(errno));
    return BT_OK;
}

/* The first avg_ts of the rows with only a prompt (pp) or only generation (tg). */
static double rate_of(json_t *rows, bool prompt)
{
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_int_t np = json_integer_value(json_object_get(r, "n_prompt"));
        json_int_t ng = json_integer_value(json_object_get(r, "n_gen"));
        json_t *ts = json_object_get(r, "avg_ts");
        if ((prompt ? np > 0 && ng == 0 : ng > 0 && np == 0) && json_is_number(ts)) return json_number_value(ts);
    }
    return NAN;
}

int bt_llamacpp_bench_run(const char *model, int threads, int depth, int np, int nd, int reps, const bt_llama_settings *ls,
                          double *prompt_tps, double *decode_tps)
{
    char bench[4200];
    *prompt_tps = *decode_tps = NAN;
    int rc = bt_llamacpp_bench_check(bench, sizeof(bench));
    if (rc) return rc;
    char t_s[16], d_s[16], p_s[16], n_s[16], r_s[16];
    snprintf(t_s, sizeof(t_s), "%d", threads);
    snprintf(d_s, sizeof(d_s), "%d", depth);
    snprintf(p_s, sizeof(p_s), "%d", np);
    snprintf(n_s, sizeof(n_s), "%d", nd);
    snprintf(r_s, sizeof(r_s), "%d", reps);
    /* the adapter's path (bt_llama_settings; NULL fields: llama.cpp's defaults) */
    char *fa = (char *)(ls && ls->flash_attn ? ls->flash_attn : "auto"), *ctk = (char *)(ls && ls->type_k ? ls->type_k : "f16"),
         *ctv = (char *)(ls && ls->type_v ? ls->type_v : "f16");
    char *repack = ls && ls->repack && !strcmp(ls->repack, "off") ? "0" : "1";
    char *argv[] = { bench, "-m", (char *)model, "-t", t_s, "-d", d_s, "-p", p_s, "-n", n_s, "-r", r_s,
                     "--repack", repack, "-fa", fa, "-ctk", ctk, "-ctv", ctv, "-o", "json", NULL };
    int out[2];
    if (pipe(out)) return bt_error(BT_EIO, "pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { close(out[0]); close(out[1]); return bt_error(BT_EIO, "fork: %s", strerror(errno)); }
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(out[1], 1);
        if (devnull >= 0) dup2(devnull, 2);     /* llama.cpp's model-loading chatter */
        close(out[0]);
        close(out[1]);
        execv(bench, argv);
        _exit(127);
    }
    close(out[1]);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap = cap ? 2 * cap : 65536);
            if (!nb) { rc = bt_error(BT_ENOMEM, "out of memory reading llama-bench's output"); break; }
            buf = nb;
        }
        ssize_t got = read(out[0], buf + len, cap - len - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        len += (size_t)got;
    }
    close(out[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (!rc && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        rc = bt_error(BT_EINVAL, "%s failed on %s (%s %d)", bench, model,
                      WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    if (!rc) {
        buf[len] = 0;
        json_error_t err;
        json_t *rows = json_loads(buf, 0, &err);
        if (!json_is_array(rows)) rc = bt_error(BT_EINVAL, "%s printed no JSON rows (%s)", bench, err.text);
        else {
            *prompt_tps = rate_of(rows, true);
            *decode_tps = rate_of(rows, false);
        }
        json_decref(rows);
    }
    free(buf);
    return rc;
}
