/* fuzz.h - shared by the libFuzzer harnesses in tests/fuzz/ (see README.md).
 *
 * Each harness is one parser's buffer entry point driven with arbitrary
 * bytes under ASan+UBSan; an input must end in BT_OK or an error code with
 * a message, never a crash, a sanitizer report, a leak or an abort.
 * FUZZ_CHECK marks an invariant that holds for every input: a violation
 * aborts, which libFuzzer saves as a crash artifact. */
#ifndef BT_FUZZ_H
#define BT_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(c) do { if (!(c)) { \
    fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Where the shared test models are: $BT_SHARED, else the build's default
 * (the directory beside the source tree). */
static inline const char *fuzz_shared(void)
{
    const char *s = getenv("BT_SHARED");
#ifdef BT_SHARED_DEFAULT
    if (!s || !*s) s = BT_SHARED_DEFAULT;
#endif
    return s && *s ? s : "../shared";
}

/* A NUL-terminated copy (malloc'd; aborts on OOM: not the parser's fault). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}
#endif
