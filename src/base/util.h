/* util.h - status codes, error messages, logging and small helpers shared by
 * every module.
 *
 * Library functions return BT_OK (0) or a negative BT_E* code and set a
 * one-line, human-readable message with bt_error(); main() prints it as
 * "bangtrace: <message>". The message is thread-local so worker threads never
 * clobber the main thread's error. */
#ifndef BT_UTIL_H
#define BT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum {
    BT_OK = 0,
    BT_ENOMEM = -1,     /* allocation failed */
    BT_EIO = -2,        /* open/read/mmap/write failed */
    BT_EFORMAT = -3,    /* file is not what it claims (bad magic, truncated, inconsistent) */
    BT_EUNSUPPORTED = -4, /* valid input we do not handle (version, type, architecture) */
    BT_EINVAL = -5,     /* bad argument or user input (flag, JSON, spec) */
    BT_ENOTFOUND = -6,  /* key, tensor or file missing */
    BT_ERANGE = -7,     /* value out of range (token id, dimension) */
    BT_EINTERNAL = -8,  /* a bug: an invariant did not hold */
};

/* Name of a status code ("BT_EFORMAT"). */
const char *bt_strerror(int code);

/* Record a printf-style message for the current thread and return code, so
 * callers can write `return bt_error(BT_EFORMAT, "%s: bad magic", path);`. */
int bt_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" when none). */
const char *bt_errmsg(void);

/* Logging to stderr. bt_log_level: 0 quiet, 1 normal (default), 2 verbose. */
extern int bt_log_level;
void bt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bt_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic time in seconds. */
double bt_now(void);
/* A rate over a timed interval: n / seconds, or NAN when it cannot be
 * measured (n <= 0, or an interval shorter than BT_RATE_MIN_S, where timer
 * jitter dominates and 1 token in 1 us would read as 1e6 t/s).
 * bt_rate_fmt writes "123.4 t/s" or "n/a" into buf and returns it. */
#define BT_RATE_MIN_S 1e-3
double bt_rate(double n, double seconds);
const char *bt_rate_fmt(double n, double seconds, char *buf, size_t cap);

/* Open an input file (a model, tokenizer, request, trace, HF folder file)
 * read-only: a fifo, device, socket or directory is refused at once ("PATH is
 * not a regular file (a fifo)") instead of blocking in open. Returns the
 * descriptor (blocking, close-on-exec), or a negative BT_E* code with the
 * message set. bt_fopen_input: the same as a FILE ("rb"), NULL on error. */
#include <stdio.h>
/* The folder of path into dir (cap bytes): "." for a bare name, "/" for a
 * file in the root. */
void bt_dir_of(const char *path, char *dir, size_t cap);
int bt_open_input(const char *path);
FILE *bt_fopen_input(const char *path);

/* Read a whole file into a NUL-terminated malloc'd buffer: a regular file,
 * or standard input ("-" or /dev/stdin, which may be a pipe). Returns BT_OK or BT_EIO (message
 * names the path). */
int bt_read_file(const char *path, char **out, size_t *len);

/* SHA-256 of a buffer, as 64 lowercase hex chars plus NUL in hex[65]. */
void bt_sha256_hex(const void *data, size_t len, char hex[65]);
/* Tests only: true takes the portable C rounds even where the CPU has the
 * SHA extensions; false chooses again. */
void bt_sha256_force_portable(bool on);

/* IEEE half and bfloat16 conversion (scalar, exact). */
float bt_f16_to_f32(uint16_t h);
uint16_t bt_f32_to_f16(float f);
/* bfloat16 with round-to-nearest-even (the trace's packed stats); NaN in,
 * 0x7fc0 out. bt_bf16_round(x) = the float the trace will give back. */
uint16_t bt_f32_to_bf16(float x);
float bt_bf16_round(float x);
static inline float bt_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
    return v.f;
}

#define BT_ASSERT(c) do { if (!(c)) bt_assert_fail(#c, __FILE__, __LINE__); } while (0)
void bt_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#define BT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Growable arrays: a malloc'd pointer v (NULL when empty), a count n and a
 * capacity cap, of any integer types. BT_VEC_RESERVE(v, cap, need) makes
 * room for need elements (the capacity doubles, from 16); BT_VEC_PUSH(v, n,
 * cap, x) appends x. Both evaluate to BT_OK or BT_ENOMEM (message set); on
 * failure v, n and cap are unchanged and v is still the caller's to free. */
int bt_vec_grow(void **v, size_t *cap, size_t need, size_t elem);
#define BT_VEC_RESERVE(v, cap, need) __extension__ ({ \
        size_t bt_cap_ = (size_t)(cap); \
        int bt_rc_ = (size_t)(need) <= bt_cap_ ? BT_OK : bt_vec_grow((void **)&(v), &bt_cap_, (size_t)(need), sizeof(*(v))); \
        (cap) = bt_cap_; \
        bt_rc_; })
#define BT_VEC_PUSH(v, n, cap, x) __extension__ ({ \
        int bt_prc_ = BT_VEC_RESERVE(v, cap, (size_t)(n) + 1); \
        if (bt_prc_ == BT_OK) (v)[(n)++] = (x); \
        bt_prc_; })
/* A growable string (zero-initialise): appends after an allocation
 * failure do nothing and leave oom set; p is NUL-terminated once anything
 * was appended. bt_sbuf_take hands over p ("" when nothing was appended),
 * or frees it and returns NULL after a failure. */
typedef struct bt_sbuf { char *p; size_t n, cap; bool oom; } bt_sbuf;
void bt_sbuf_putn(bt_sbuf *b, const char *s, size_t n);
void bt_sbuf_puts(bt_sbuf *b, const char *s);
char *bt_sbuf_take(bt_sbuf *b);
#define BT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define BT_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
