/* fuzz_inject.c - the --inject grammar (bt_injector_add), the JSON it
 * records, the ask table and in-place application to small tensors.
 * Input: specs, one per line. */
#include "fuzz.h"
#include "engine/engine.h"
#include "tap/inject.h"
#include "base/util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { bt_log_level = 0; return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    bt_injector *inj = bt_injector_new();
    FUZZ_CHECK(inj);
    int added = 0;
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (bt_injector_add(inj, line) == BT_OK) added++;
        else FUZZ_CHECK(bt_errmsg()[0]);
    }
    FUZZ_CHECK(bt_injector_count(inj) == added);
    char *js = bt_injector_json(inj);
    FUZZ_CHECK(js && js[0] == '[');
    free(js);

    static const char *const models[] = { "target", "draft" };
    float buf[3 * 16];
    for (int mi = 0; mi < 2; mi++)
        for (int op = 0; op < BT_OP_COUNT; op++)
            for (int layer = -1; layer < 4; layer++) {
                if (!bt_injector_wants(inj, models[mi], op, layer)) continue;
                for (int step = 0; step < 3; step++) {
                    for (size_t i = 0; i < sizeof buf / sizeof *buf; i++) buf[i] = (float)i - 20.0f;
                    bt_tensor_view v = { .op = op, .layer = layer, .step = step, .pos0 = step * 3,
                                         .rows = 3, .width = 16, .data = buf };
                    long n = bt_injector_apply(inj, models[mi], &v);
                    FUZZ_CHECK(n >= 0 && n <= (long)added * 3 * 16);   /* each spec counts its own */
                }
            }
    bt_injector_free(inj);
    free(text);
    return 0;
}
