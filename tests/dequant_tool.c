/* dequant_tool.c - test helper for dequant_check.py: dequantizes a file of
 * raw ggml blocks with one kernel variant and writes the floats.
 *
 *   dequant_tool TYPE_ID IN OUT [scalar|avx2|avx512]   raw blocks -> f32 (native order)
 *   dequant_tool --variants                          variants this CPU runs
 *
 * Exit 0 on success, 1 on a bad file or unavailable variant, 2 on usage. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels_impl.h"
#include "base/util.h"

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dequant_tool: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--variants")) {
        static const char *const names[] = { "scalar", "avx2", "avx512" };
        for (size_t i = 0; i < BT_ARRAY_SIZE(names); i++)
            if (bt_kernels_variant(names[i]))
                printf("%s\n", names[i]);
        return 0;
    }
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: dequant_tool TYPE_ID IN OUT [scalar|avx2|avx512]\n"
                        "       dequant_tool --variants\n");
        return 2;
    }
    int type = atoi(argv[1]);
    const char *vname = argc == 5 ? argv[4] : "scalar";
    const bt_kvariant *v = bt_kernels_variant(vname);
    if (!v)
        return fail("%s: variant not available on this CPU", vname);
    const bt_dtype_info *ti = bt_dtype(type);
    if (!ti->name || !v->dequant[type])
        return fail("type id %s: no dequantizer", argv[1]);

    char *data;
    size_t len;
    if (bt_read_file(argv[2], &data, &len) != BT_OK)
        return fail("%s", bt_errmsg());
    if (len % ti->type_size)
        return fail("%s: size is not a whole number of blocks (%lld bytes)", argv[2], (long long)len);
    int64_t n = (int64_t)(len / ti->type_size) * ti->blck;
    float *out = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!out)
        return fail("%s: out of memory for %lld floats", argv[2], (long long)n);
    v->dequant[type](data, out, n);
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(out, sizeof(float), (size_t)n, f) != (size_t)n || fclose(f) != 0)
        return fail("%s: cannot write output", argv[3]);
    free(out);
    free(data);
    return 0;
}
