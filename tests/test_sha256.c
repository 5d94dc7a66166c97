/* test_sha256.c - bt_sha256_hex (the trace's model_sha256) against FIPS
 * 180-4's example vectors, on the portable C rounds and on the x86 SHA
 * extensions where the CPU has them: every length from 0 to 300 bytes (the
 * padding's one- and two-block tails) and a 1 MB buffer give both paths the
 * same digest. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"

static const struct { const char *msg; const char *hex; } vectors[] = {
    { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
    { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
    { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    { "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
};

int main(void)
{
    char a[65], b[65];
    for (int path = 0; path < 2; path++) {
        bt_sha256_force_portable(path == 0);
        for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
            bt_sha256_hex(vectors[i].msg, strlen(vectors[i].msg), a);
            CHECK(!strcmp(a, vectors[i].hex), "%s path, vector %zu: %s", path ? "default" : "portable", i, a);
        }
    }
    /* a million 'a': the standard's long vector, through many blocks */
    size_t big = 1000000;
    char *m = malloc(big);
    memset(m, 'a', big);
    bt_sha256_force_portable(false);
    bt_sha256_hex(m, big, a);
    CHECK(!strcmp(a, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "a million a: %s", a);
    /* both paths agree on every short length and on mixed bytes */
    for (size_t i = 0; i < big; i++) m[i] = (char)(i * 2654435761u >> 11);
    for (size_t n = 0; n <= 300; n++) {
        bt_sha256_force_portable(true);
        bt_sha256_hex(m + 7, n, a);
        bt_sha256_force_portable(false);
        bt_sha256_hex(m + 7, n, b);
        CHECK(!strcmp(a, b), "length %zu: portable %s, default %s", n, a, b);
    }
    bt_sha256_force_portable(true);
    bt_sha256_hex(m, big, a);
    bt_sha256_force_portable(false);
    bt_sha256_hex(m, big, b);
    CHECK(!strcmp(a, b), "1 MB: portable %s, default %s", a, b);
    free(m);
    printf("sha256: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
