/* util.c - status codes, thread-local error messages, logging, SHA-256 and
 * half-precision conversion. */
#include "util.h"
#include "text.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int bt_log_level = 1;
static _Thread_local char errbuf[1024];

const char *bt_strerror(int code)
{
    switch (code) {
    case BT_OK: return "BT_OK";
    case BT_ENOMEM: return "BT_ENOMEM";
    case BT_EIO: return "BT_EIO";
    case BT_EFORMAT: return "BT_EFORMAT";
    case BT_EUNSUPPORTED: return "BT_EUNSUPPORTED";
    case BT_EINVAL: return "BT_EINVAL";
    case BT_ENOTFOUND: return "BT_ENOTFOUND";
    case BT_ERANGE: return "BT_ERANGE";
    case BT_EINTERNAL: return "BT_EINTERNAL";
    default: return "BT_E?";
    }
}

int bt_error(int code, const char *fmt, ...)
{
    char raw[sizeof errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    /* One line, always: a message is printed after "bangtrace: ". */
    for (char *p = raw; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    /* Messages quote model and trace text (names, keys, paths): never let
     * them reach the terminal raw. RAWBS keeps this idempotent for messages
     * that wrap bt_errmsg() again. */
    bt_text_escape(raw, strlen(raw), errbuf, sizeof errbuf, 0, BT_TEXT_UTF8 | BT_TEXT_RAWBS | BT_TEXT_ELLIPSIS);
    return code;
}

const char *bt_errmsg(void) { return errbuf; }

/* One line per message, escaped like bt_error: logs quote model and trace
 * text too. */
static void vlog(const char *prefix, const char *fmt, va_list ap)
{
    char raw[4096];
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    if (n < 0) return;
    fputs(prefix, stderr);
    bt_text_fput(raw, BT_MIN((size_t)n, sizeof raw - 1), BT_TEXT_UTF8 | BT_TEXT_RAWBS, stderr);
    fputc('\n', stderr);
}

void bt_log(const char *fmt, ...)
{
    if (bt_log_level < 1) return;
    va_list ap; va_start(ap, fmt); vlog("", fmt, ap); va_end(ap);
}

void bt_warn(const char *fmt, ...)
{
    va_list ap; va_start(ap, fmt); vlog("bangtrace: warning: ", fmt, ap); va_end(ap);
}

void bt_debug(const char *fmt, ...)
{
    if (bt_log_level < 2) return;
    va_list ap; va_start(ap, fmt); vlog("bangtrace: debug: ", fmt, ap); va_end(ap);
}

double bt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bt_rate(double n, double seconds)
{
    return n > 0 && seconds >= BT_RATE_MIN_S && isfinite(seconds) ? n / seconds : NAN;
}

const char *bt_rate_fmt(double n, double seconds, char *buf, size_t cap)
{
    double r = bt_rate(n, seconds);
    if (isnan(r)) snprintf(buf, cap, "n/a");
    else snprintf(buf, cap, "%.1f t/s", r);
    return buf;
}

static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m) ? "a fifo" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

void bt_dir_of(const char *path, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
}

int bt_open_input(const char *path)
{
    /* O_NONBLOCK: opening a fifo with no writer returns at once instead of
     * waiting forever; the fstat then refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return bt_error(errno == ENOENT ? BT_ENOTFOUND : BT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return bt_error(BT_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return bt_error(BT_EIO, "%s is not a regular file (%s)", path, file_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return bt_error(BT_EIO, "%s: %s", path, strerror(e));
    }
    return fd;
}

FILE *bt_fopen_input(const char *path)
{
    int fd = bt_open_input(path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) { bt_error(BT_EIO, "%s: %s", path, strerror(errno)); close(fd); }
    return f;
}

int bt_read_file(const char *path, char **out, size_t *len)
{
    /* standard input ("-" mapped by the caller) may be a pipe; any other
     * input must be a regular file (a fifo would block forever) */
    FILE *f;
    if (!strcmp(path, "/dev/stdin") || !strcmp(path, "-")) {
        f = fopen("/dev/stdin", "rb");
        if (!f) return bt_error(BT_EIO, "%s: %s", path, strerror(errno));
    } else if (!(f = bt_fopen_input(path))) return BT_EIO;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { fclose(f); return bt_error(BT_ENOMEM, "%s: out of memory", path); }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) { free(buf); fclose(f); return bt_error(BT_ENOMEM, "%s: out of memory", path); }
        buf = nb; cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return bt_error(BT_EIO, "%s: read error", path); }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return BT_OK;
}

void bt_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "bangtrace: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

/* ---- SHA-256 (FIPS 180-4) ---- */

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

/* The x86 SHA extensions (SHA-NI: Intel since Ice Lake / Goldmont, AMD
 * since Zen) do a block's 64 rounds in 32 sha256rnds2 instructions, about
 * eight times the C rounds' rate: `run --trace` hashes the whole model file
 * for the trace's model_sha256, which the C rounds made about a second per
 * 500 MB. The same FIPS 180-4 function, the state kept as (ABEF, CDGH)
 * word pairs as the instructions want it; tests/test_util.c checks both
 * paths against the standard's vectors and each other. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define BT_SHA_NI 1

static bool sha_ni_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (b >> 29) & 1;   /* CPUID.7.0:EBX.SHA */
}

__attribute__((target("sha,sse4.1,ssse3"))) static void sha_blocks_ni(uint32_t h[8], const uint8_t *p, size_t nb)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)h), 0xB1);          /* C D A B */
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(h + 4)), 0x1B);   /* H G F E */
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);                                             /* A B E F */
    s1 = _mm_blend_epi16(s1, t, 0xF0);                                                  /* C D G H */
    for (; nb; nb--, p += 64) {
        __m128i save0 = s0, save1 = s1, w[4];
        for (int g = 0; g < 16; g++) {
            if (g < 4)
                w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
            else {   /* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four words at a time */
                __m128i m3 = w[(g + 3) & 3], m2 = w[(g + 2) & 3];
                __m128i x = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(m3, m2, 4));
                w[g & 3] = _mm_sha256msg2_epu32(x, m3);
            }
            __m128i m = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *)(sha_k + 4 * g)));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
        }
        s0 = _mm_add_epi32(s0, save0);
        s1 = _mm_add_epi32(s1, save1);
    }
    t = _mm_shuffle_epi32(s0, 0x1B);                                                    /* F E B A */
    s1 = _mm_shuffle_epi32(s1, 0xB1);                                                   /* D C H G */
    _mm_storeu_si128((__m128i *)h, _mm_blend_epi16(t, s1, 0xF0));                      /* D C B A -> h0..h3 */
    _mm_storeu_si128((__m128i *)(h + 4), _mm_alignr_epi8(s1, t, 8));                   /* H G F E -> h4..h7 */
}
#endif

static _Atomic int sha_path = -1;   /* -1: not chosen yet; 0: C rounds; 1: SHA-NI */

void bt_sha256_force_portable(bool on) { sha_path = on ? 0 : -1; }

static void sha_blocks(uint32_t h[8], const uint8_t *p, size_t nb)
{
#ifdef BT_SHA_NI
    if (sha_path < 0) sha_path = sha_ni_usable();
    if (sha_path == 1) {
        sha_blocks_ni(h, p, nb);
        return;
    }
#endif
    for (; nb; nb--, p += 64) sha_block(h, p);
}

void bt_sha256_hex(const void *data, size_t len, char hex[65])
{
    uint32_t h[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    const uint8_t *p = data;
    size_t n = len;
    sha_blocks(h, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    uint8_t tail[128] = {0};
    memcpy(tail, p, n);
    tail[n] = 0x80;
    size_t tl = n < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tl - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha_blocks(h, tail, tl / 64);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", h[i]);
}

/* ---- half precision ---- */

float bt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {            /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | man << 13;   /* Inf or NaN (payload kept) */
    } else {
        bits = sign | (exp + 112) << 23 | man << 13;
    }
    union { uint32_t u; float f; } v = { .u = bits };
    return v.f;
}

uint16_t bt_f32_to_f16(float f)
{
    union { float f; uint32_t u; } v = { .f = f };
    uint32_t x = v.u, sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | (uint32_t)exp << 10 | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)half;
}

void bt_sbuf_putn(bt_sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (BT_VEC_RESERVE(b->p, b->cap, b->n + n + 1)) { b->oom = true; return; }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void bt_sbuf_puts(bt_sbuf *b, const char *s) { bt_sbuf_putn(b, s, strlen(s)); }

char *bt_sbuf_take(bt_sbuf *b)
{
    if (b->oom) { free(b->p); return NULL; }
    if (!b->p) return strdup("");
    return b->p;
}

int bt_vec_grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return BT_OK;
    size_t nc = *cap > 8 ? *cap : 8;
    do nc *= 2; while (nc < need && nc <= SIZE_MAX / 4);
    if (nc < need || nc > SIZE_MAX / elem) return bt_error(BT_ENOMEM, "out of memory (%zu elements of %zu bytes)", need, elem);
    void *nv = realloc(*v, nc * elem);
    if (!nv) return bt_error(BT_ENOMEM, "out of memory (%zu elements of %zu bytes)", nc, elem);
    *v = nv;
    *cap = nc;
    return BT_OK;
}

uint16_t bt_f32_to_bf16(float x)
{
    union { float f; uint32_t u; } v = { .f = x };
    if (isnan(x)) return 0x7fc0;
    uint32_t u = v.u;
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float bt_bf16_round(float x) { return bt_bf16_to_f32(bt_f32_to_bf16(x)); }
