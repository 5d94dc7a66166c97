/* cli_check.c - checks main() runs around every command, so no command has
 * to repeat them:
 *
 * - a flag that takes a value must not swallow the next flag: `run --trace
 *   --force` once created a trace named "--force". Which flags take a value
 *   is read from the command's own --help text (its usage lines and the flag
 *   part of its option lines, the text tests/manpage.sh holds to the man
 *   page), so the rule covers every command without a table to keep in step.
 * - what a command wrote to stdout must have arrived: a full disk or a
 *   closed file behind stdout is an error (exit 2), not a silent exit 0. */
#define _GNU_SOURCE 1
#include "cli_check.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct flag_set {
    char **name;
    unsigned char *value;   /* FROM_USAGE | FROM_OPTION | OPTION_LINE */
    size_t n, cap;
    char alias[32][2][48];   /* "-n, --max-tokens": the same flag */
    int n_alias;
} flag_set;

enum { FROM_USAGE = 1, FROM_OPTION = 2, OPTION_LINE = 4 };

/* An option line ("  --flag  description") decides; else the usage lines. */
static bool takes_value(unsigned char m)
{
    return (m & OPTION_LINE) ? (m & FROM_OPTION) != 0 : (m & FROM_USAGE) != 0;
}

static int flag_find(const flag_set *s, const char *name, size_t len)
{
    for (size_t i = 0; i < s->n; i++)
        if (strlen(s->name[i]) == len && !strncmp(s->name[i], name, len)) return (int)i;
    return -1;
}

static void flag_add(flag_set *s, const char *name, size_t len, unsigned value)
{
    int i = flag_find(s, name, len);
    if (i >= 0) { s->value[i] |= value; return; }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        char **nn = realloc(s->name, cap * sizeof(*nn));
        if (!nn) return;
        s->name = nn;
        unsigned char *nv = realloc(s->value, cap * sizeof(*nv));
        if (!nv) return;
        s->value = nv;
        s->cap = cap;
    }
    char *d = strndup(name, len);
    if (!d) return;
    s->name[s->n] = d;
    s->value[s->n++] = value;
}

static bool flag_start(const char *p, const char *line)
{
    return p[0] == '-' && (isalpha((unsigned char)p[1]) || (p[1] == '-' && isalpha((unsigned char)p[2]))) &&
           (p == line || strchr(" [(|,", p[-1]));
}

static size_t flag_len(const char *p)
{
    size_t n = 1 + (p[1] == '-');
    while (isalnum((unsigned char)p[n]) || p[n] == '-') n++;
    return n;
}

/* A value placeholder right after a flag: " M", " FILE.json", " \"ID ...\"",
 * " native|llama.cpp", " 256..32768"; not " [", " (", " |", " --x", "]". */
static bool value_follows(const char *p)
{
    if (*p != ' ') return false;
    p++;
    return isalnum((unsigned char)*p) || *p == '"' || *p == '<';
}

/* Every flag named anywhere in the help (known), and which take a value:
 * a usage line's "--flag VALUE", or an option line whose flag part (up to
 * the two spaces before its description) is flags and one value each. An
 * option line whose description starts after one space is ambiguous and
 * only adds the names. */
static void parse_help(const char *text, flag_set *s)
{
    bool usage = true;
    const char *line = text;
    while (*line) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[512];
        size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
        memcpy(buf, line, n);
        buf[n] = 0;
        bool blank = true;
        for (size_t i = 0; i < n; i++) if (!isspace((unsigned char)buf[i])) { blank = false; break; }
        if (blank) usage = false;
        /* every flag named: known */
        for (char *p = buf; *p; p++)
            if (flag_start(p, buf)) { size_t l = flag_len(p); flag_add(s, p, l, 0); p += l - 1; }
        if (usage) {
            for (char *p = buf; *p; p++)
                if (flag_start(p, buf)) {
                    size_t l = flag_len(p);
                    if (value_follows(p + l)) flag_add(s, p, l, FROM_USAGE);
                    p += l - 1;
                }
        } else {
            char *p = buf;
            while (*p == ' ') p++;
            if (p - buf >= 2 && *p == '-') {
                char *end = strstr(p, "  ");
                if (end) *end = 0;
                /* tokens: flags ("-o," "--redact[=prompt]"), each optionally followed by one value */
                const char *last = NULL;
                size_t last_len = 0;
                bool ok = true, had_value = false;
                const char *marks[16], *flags[16];
                size_t mark_len[16], flags_len[16];
                int n_marks = 0, n_flags = 0;
                for (char *t = strtok(p, " "); t; t = strtok(NULL, " ")) {
                    if (t[0] == '-' && t[1] && last && last[last_len] == ',' && !had_value && s->n_alias < 32) {
                        snprintf(s->alias[s->n_alias][0], 48, "%.*s", (int)last_len, last);
                        snprintf(s->alias[s->n_alias][1], 48, "%.*s", (int)flag_len(t), t);
                        s->n_alias++;
                    }
                    if (t[0] == '-' && t[1]) {
                        last = t;
                        last_len = flag_len(t);
                        had_value = false;
                        if (n_flags < 16) { flags[n_flags] = t; flags_len[n_flags++] = last_len; }
                    } else if (last && !had_value && (isalnum((unsigned char)t[0]) || t[0] == '"' || t[0] == '<')) {
                        if (n_marks < 16) { marks[n_marks] = last; mark_len[n_marks++] = last_len; }
                        had_value = true;
                    } else if (strcmp(t, "|")) { ok = false; break; }
                }
                if (ok) {
                    for (int i = 0; i < n_flags; i++) flag_add(s, flags[i], flags_len[i], OPTION_LINE);
                    for (int i = 0; i < n_marks; i++) flag_add(s, marks[i], mark_len[i], FROM_OPTION);
                }
            }
        }
        if (!eol) break;
        line = eol + 1;
    }
    for (int i = 0; i < s->n_alias; i++) {
        int a = flag_find(s, s->alias[i][0], strlen(s->alias[i][0]));
        int b = flag_find(s, s->alias[i][1], strlen(s->alias[i][1]));
        if (a >= 0 && b >= 0) s->value[a] = s->value[b] = s->value[a] | s->value[b];
    }
}

int bt_cli_check_values(const char *cmd, void (*help)(FILE *), int argc, char **argv)
{
    char *text = NULL;
    size_t size = 0;
    FILE *m = open_memstream(&text, &size);
    if (!m) return BT_OK;        /* cannot check; the command still parses its own flags */
    help(m);
    fclose(m);
    flag_set s;
    memset(&s, 0, sizeof s);
    parse_help(text ? text : "", &s);
    free(text);
    int rc = BT_OK;
    for (int j = 1; j < argc; j++) {
        const char *a = argv[j];
        if (!strcmp(a, "--")) break;
        if (a[0] != '-' || strchr(a, '=')) continue;
        int f = flag_find(&s, a, strlen(a));
        if (f < 0 || !takes_value(s.value[f])) continue;
        if (j + 1 >= argc) break;          /* the command says "needs a value" */
        const char *v = argv[j + 1];
        size_t vl = strcspn(v, "=");
        if (v[0] == '-' && v[1] == '-' && (flag_find(&s, v, vl) >= 0 || !strcmp(v, "--help"))) {
            fprintf(stderr, "bangtrace: %s: %s needs a value, got the flag '%s'\n", cmd, a, v);
            rc = BT_EINVAL;
            break;
        }
        j++;
    }
    for (size_t i = 0; i < s.n; i++) free(s.name[i]);
    free(s.name);
    free(s.value);
    return rc;
}

/* stdio keeps only an error flag: the reason (ENOSPC) is gone by exit. When
 * stdout is not a terminal (the terminal stays glibc's own: curses needs
 * its descriptor) it goes through this writer, which keeps the first
 * write error's errno. */
static int stdout_errno;
static FILE *stdout_orig;

static ssize_t stdout_write(void *cookie, const char *buf, size_t size)
{
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(STDOUT_FILENO, buf + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!stdout_errno) stdout_errno = w < 0 ? errno : EIO;
            errno = stdout_errno;
            return done ? (ssize_t)done : 0;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

void bt_cli_stdout_begin(void)
{
    if (isatty(STDOUT_FILENO)) return;
    cookie_io_functions_t io = { .write = stdout_write };
    FILE *f = fopencookie(NULL, "w", io);
    if (!f) return;
    stdout_orig = stdout;
    stdout = f;
}

int bt_cli_check_stdout(int status)
{
    errno = 0;
    int flushed = fflush(stdout);
    int e = errno;
    if (flushed == 0 && !ferror(stdout)) return status;
    if (status == 2 && flushed == 0) return 2;      /* the command has already said what failed */
    if (stdout_errno) e = stdout_errno;
    if (e)
        fprintf(stderr, "bangtrace: write error on stdout: %s\n", strerror(e));
    else
        fprintf(stderr, "bangtrace: write error on stdout\n");
    return 2;
}
