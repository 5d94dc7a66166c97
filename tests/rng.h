/* rng.h - the C unit tests' random numbers: xorshift64*, reproducible
 * across runs and machines. A test may #define TEST_RNG_SEED before
 * including this to pick its own stream. */
#ifndef BT_TEST_RNG_H
#define BT_TEST_RNG_H

#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t rng = TEST_RNG_SEED;

__attribute__((unused)) static uint32_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}

/* uniform in [lo, hi) with 24 random bits */
__attribute__((unused)) static float rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd() >> 8) / 16777216.0f;
}

#endif
