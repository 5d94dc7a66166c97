/* backtrace.c - symbolized host backtraces with libunwind.
 *
 * Called from the fatal-signal handler, so everything here is
 * async-signal-safe in practice: no malloc, no stdio, fixed buffers on the
 * stack, numbers formatted by hand. Symbol names come from libunwind's own
 * ELF reader (unw_get_proc_name reads .symtab, so static functions resolve
 * too); the module name from dladdr, trimmed to its base name. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* dladdr, Dl_info */
#endif
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <ucontext.h>
#include <stdint.h>
#include <string.h>

#include "sys/backtrace.h"

/* A bounded appender: writes what fits, always leaves room for the NUL. */
typedef struct out_buf {
    char *p;
    size_t cap, len;
} out_buf;

static void put_str(out_buf *o, const char *s)
{
    while (*s && o->len + 1 < o->cap) o->p[o->len++] = *s++;
    if (o->cap) o->p[o->len < o->cap ? o->len : o->cap - 1] = 0;
}

static void put_hex(out_buf *o, uint64_t v, int min_digits)
{
    char tmp[24];
    int n = 0;
    do { tmp[n++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v && n < 16);
    while (n < min_digits && n < 16) tmp[n++] = '0';
    char s[24];
    int k = 0;
    s[k++] = '0'; s[k++] = 'x';
    while (n) s[k++] = tmp[--n];
    s[k] = 0;
    put_str(o, s);
}

static void put_dec(out_buf *o, int v)
{
    char tmp[16], s[16];
    int n = 0, k = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) s[k++] = '-';
    while (n) s[k++] = tmp[--n];
    s[k] = 0;
    put_str(o, s);
}

/* Base name of a path, without stdio or allocation. */
static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* Append one "#N 0x... name+0xoff (module)\n" line for the cursor's frame. */
static void put_frame(out_buf *o, unw_cursor_t *cur, int n, bool exact)
{
    unw_word_t ip = 0, off = 0;
    unw_get_reg(cur, UNW_REG_IP, &ip);
    char name[256];
    put_str(o, "#");
    put_dec(o, n);
    put_str(o, " ");
    put_hex(o, (uint64_t)ip, 16);
    put_str(o, " ");
    if (unw_get_proc_name(cur, name, sizeof(name), &off) == 0 && name[0]) {
        name[sizeof(name) - 1] = 0;
        put_str(o, name);
        put_str(o, "+");
        put_hex(o, (uint64_t)off, 1);
    } else {
        put_str(o, "??");
    }
    /* A return address can point one past a call at the end of a function
     * (noreturn callees); ask the loader about ip - 1 unless ip is exact. */
    Dl_info info;
    uintptr_t q = (uintptr_t)ip;
    if (q && !exact) q--;
    if (dladdr((void *)q, &info) && info.dli_fname && info.dli_fname[0]) {
        put_str(o, " (");
        put_str(o, base_name(info.dli_fname));
        put_str(o, ")");
    }
    put_str(o, "\n");
}

/* Walk from an initialized cursor: skip `skip` frames, then list up to the
 * buffer's capacity. A frame line that would not fit whole is dropped so the
 * buffer never ends in half a line. */
static int walk(unw_cursor_t *cur, char *buf, size_t cap, int skip, bool exact0)
{
    out_buf o = { buf, cap, 0 };
    if (cap) buf[0] = 0;
    int frames = 0, depth = 0;
    do {
        if (depth++ < skip) continue;
        size_t before = o.len;
        put_frame(&o, cur, frames, exact0 && frames == 0);
        if (o.len + 1 >= o.cap) {      /* truncated: roll back this line */
            o.len = before;
            if (cap) buf[before] = 0;
            break;
        }
        frames++;
        if (frames >= 128) break;
    } while (unw_step(cur) > 0);
    return frames;
}

__attribute__((noinline))
int bt_backtrace(char *buf, size_t cap, int skip)
{
    if (!buf || !cap) return 0;
    buf[0] = 0;
    unw_context_t ctx;
    unw_cursor_t cur;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0) return 0;
    /* The first frame is bt_backtrace itself. */
    if (unw_step(&cur) <= 0) return 0;
    return walk(&cur, buf, cap, skip < 0 ? 0 : skip, false);
}

/* The interrupted program counter saved in a signal handler's context. */
static uintptr_t context_pc(const void *ucontext)
{
    if (!ucontext) return 0;
    const ucontext_t *uc = ucontext;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__i386__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0;
#endif
}

__attribute__((noinline))
int bt_backtrace_signal(char *buf, size_t cap, const void *ucontext)
{
    if (!buf || !cap) return 0;
    buf[0] = 0;
    unw_context_t ctx;
    unw_cursor_t cur;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0) return 0;
    /* Find the interrupted frame: the one whose IP is the saved PC (exact
     * and independent of how this libunwind flags signal frames), else the
     * first frame libunwind marks as reached through a signal frame. If
     * neither is found (not in a handler), list the caller's stack. */
    uintptr_t pc = context_pc(ucontext);
    unw_cursor_t probe = cur, flagged;
    bool have_flagged = false;
    for (int i = 0; i < 64; i++) {
        unw_word_t ip = 0;
        unw_get_reg(&probe, UNW_REG_IP, &ip);
        if (pc && (uintptr_t)ip == pc) return walk(&probe, buf, cap, 0, true);
        if (!have_flagged && unw_is_signal_frame(&probe) > 0) { flagged = probe; have_flagged = true; }
        if (unw_step(&probe) <= 0) break;
    }
    if (have_flagged) return walk(&flagged, buf, cap, 0, true);
    if (unw_step(&cur) <= 0) return 0;
    return walk(&cur, buf, cap, 0, false);
}

const char *bt_backtrace_provider(void) { return "libunwind"; }
