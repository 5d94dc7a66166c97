/* compare.h - the one rule that decides "these taps differ".
 *
 * `bisect --reference` (a trace against its clean replay) and `diff` (two
 * traces) both ask it, so they can never disagree about what diverged. The
 * rule, also in doc/trace-format.md ("Comparing taps"):
 *
 *  1. The NaN, +Inf and -Inf counts must be equal (checked in that order).
 *  2. min, max, mean and rms (over the finite values) are then compared, in
 *     that order. A tensor without non-finite values is stored as bf16, so
 *     both sides are rounded to bf16 first (a no-op on a value read from a
 *     trace); a tensor holding non-finite values is stored at full
 *     precision (tap_bad) and compared as it is.
 *  3. NaN means "no finite value": it equals only NaN. Equal values (±Inf
 *     included) never differ.
 *  4. Otherwise a field differs when |a - b| > tol * max(scale, 1e-6), where
 *     scale is the tensor's spread, not the field's own size, so a value near
 *     zero cannot turn rounding noise into a large relative change:
 *       min, max: the larger finite absmax of the two sides
 *       rms:      the larger rms
 *       mean:     the larger of the two rms and the two |mean|
 *     tol = 0 therefore means exact equality. */
#ifndef BT_TRACE_COMPARE_H
#define BT_TRACE_COMPARE_H

#include <stdbool.h>
#include "base/records.h"
#include "trace/reader.h"

#define BT_TAP_SCALE_FLOOR 1e-6   /* smallest scale a relative tolerance is taken of */

typedef struct bt_tap_diff {
    const char *field;    /* first differing field: nan | pinf | ninf | min | max | mean | rms; NULL if equal */
    double a, b;          /* that field's values on each side */
    double rel;           /* largest |a - b| / scale over all fields; INFINITY for a count or NaN mismatch */
} bt_tap_diff;

/* True when a and b differ under the rule above with relative tolerance tol
 * (>= 0). *d (may be NULL) gets the first differing field and rel. */
bool bt_tap_compare(const bt_trace_tap_row *a, const bt_trace_tap_row *b, double tol, bt_tap_diff *d);

/* The tolerance across devices (bisect --reference --device, doc/cuda.md
 * "Across devices"): two backends computing the same ops in the same dtype
 * differ only by rounding order, so the tolerance comes from the dtypes:
 *   tol = min(0.5, max(2^-7, 8 * u * sqrt(K * (L + 1))))
 * u = 2^-p for the narrowest format the run computed activations in (p = 24
 * for f32, 11 for f16, 8 for bf16 or q8 activations), K the longest
 * reduction of the model (max of dim, hidden_dim, n_heads * head_dim), L
 * its layers: each dot product's rounding grows like u * sqrt(K), and the
 * layers add theirs. 2^-7 is one bf16 step, the precision of the stored
 * statistics themselves (rule 2): no tolerance below it means anything. */
#define BT_TAP_TOL_STORED 0.0078125
#define BT_TAP_TOL_MAX 0.5
double bt_tap_tol_devices(int mant_bits, long k, int n_layers);
/* The mantissa bits p of the narrowest of act, mm_in, mm_acc and kv in a
 * numerics profile as the trace's meta numerics spells it (NULL or "f32":
 * 24). */
int bt_tap_tol_mant_bits(const char *numerics);

/* A tap row holding freshly computed statistics (a replay's), so it can be
 * compared with one read from a trace. Names are left NULL. */
void bt_tap_row_from_stats(const bt_tap_stats *s, bt_trace_tap_row *out);

#endif
