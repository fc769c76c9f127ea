/* skref number formats, conversions and test-data helpers. See skref.h. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, getpid */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ref.h"

uint32_t skref_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

float skref_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- rounding core -------------------------------------------------------------------------
 * Every encoder below reduces to: round a finite fp32 magnitude to a binary format with
 * `man_bits` mantissa bits and minimum normal exponent `emin`, ties to even, and return the
 * unsaturated magnitude code (exponent field << man_bits | mantissa). Integer-only, so it does
 * not depend on the host's rounding mode or denormal handling. The device software path in
 * ops/common/numeric.cuh is the same algorithm. */

/* v >> s rounded to nearest, ties to even. */
static uint32_t rne_shift_right(uint32_t v, unsigned s) {
  if (s == 0) return v;
  if (s >= 32) return 0; /* callers pass v < 2^31: less than half an ulp */
  uint32_t q = v >> s, rem = v & ((1u << s) - 1u), half = 1u << (s - 1u);
  return q + (uint32_t)(rem > half || (rem == half && (q & 1u)));
}

static uint32_t minifloat_magnitude(uint32_t abs_bits, unsigned man_bits, int emin) {
  int exp_field = (int)(abs_bits >> 23);
  if (exp_field - 127 >= emin) /* normal in the target: drop mantissa bits, carry into exp */
    return rne_shift_right(abs_bits - ((uint32_t)(127 + emin - 1) << 23), 23u - man_bits);
  /* subnormal in the target: value = m24 * 2^(e - 150), code = value * 2^(man_bits - emin) */
  uint32_t m24 = (abs_bits & 0x7FFFFFu) | (exp_field ? 0x800000u : 0u);
  int e = exp_field ? exp_field : 1;
  return rne_shift_right(m24, (unsigned)(150 - e - (int)man_bits + emin));
}

/* ---- BF16 / FP16 ----------------------------------------------------------------------------- */
float skref_bf16_to_float(uint16_t bits) { return skref_f32_from_bits((uint32_t)bits << 16); }

uint16_t skref_float_to_bf16(float f) {
  uint32_t u = skref_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* carries into Inf on overflow */
}

float skref_fp16_to_float(uint16_t bits) {
  uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
  uint32_t e = (bits >> 10) & 0x1Fu, m = bits & 0x3FFu;
  if (e == 0x1F) return skref_f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) { /* subnormal: m * 2^-24 is exact in fp32 */
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  return skref_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t skref_float_to_fp16(float f) {
  uint32_t u = skref_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  if (a == 0x7F800000u) return sign | 0x7C00u;
  uint32_t code = minifloat_magnitude(a, 10, -14);
  if (code > 0x7C00u) code = 0x7C00u; /* IEEE overflow under RNE goes to Inf */
  return (uint16_t)(sign | code);
}

float skref_half_to_float(uint16_t bits, skref_dtype dtype) {
  return dtype == SKREF_FP16 ? skref_fp16_to_float(bits) : skref_bf16_to_float(bits);
}

uint16_t skref_float_to_half(float f, skref_dtype dtype) {
  return dtype == SKREF_FP16 ? skref_float_to_fp16(f) : skref_float_to_bf16(f);
}

/* ---- E2M1 ------------------------------------------------------------------------------------ */
double skref_e2m1_decode(uint8_t nibble) {
  unsigned e = (nibble >> 1) & 3u, m = nibble & 1u;
  double mag = e == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, (int)e - 1);
  return (nibble & 8u) ? -mag : mag;
}

uint8_t skref_e2m1_encode(float f) {
  uint32_t u = skref_f32_bits(f), a = u & 0x7FFFFFFFu;
  uint8_t sign = (uint8_t)((u >> 28) & 8u);
  if (a > 0x7F800000u) return 0x7; /* NaN -> +MAX_NORM */
  if (a == 0x7F800000u) return sign | 0x7u;
  uint32_t code = minifloat_magnitude(a, 1, 0);
  return (uint8_t)(sign | (code > 7u ? 7u : code));
}

uint8_t skref_e2m1_pack2(float even, float odd) {
  return (uint8_t)(skref_e2m1_encode(even) | (skref_e2m1_encode(odd) << 4));
}

/* ---- E4M3 ------------------------------------------------------------------------------------ */
double skref_e4m3_decode(uint8_t code) {
  unsigned e = (code >> 3) & 15u, m = code & 7u;
  if (e == 15 && m == 7) return NAN;
  double mag = e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, (int)e - 10);
  return (code & 0x80u) ? -mag : mag;
}

uint8_t skref_e4m3_encode(float f) {
  uint32_t u = skref_f32_bits(f), a = u & 0x7FFFFFFFu;
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  if (a > 0x7F800000u) return 0x7F;
  if (a == 0x7F800000u) return sign | 0x7Eu;
  uint32_t code = minifloat_magnitude(a, 3, -6);
  return (uint8_t)(sign | (code > 0x7Eu ? 0x7Eu : code));
}

/* ---- E8M0 ------------------------------------------------------------------------------------ */
double skref_e8m0_decode(uint8_t code) { return code == 0xFF ? NAN : ldexp(1.0, (int)code - 127); }

uint8_t skref_e8m0_ceil_pow2(float s) {
  uint32_t bits = skref_f32_bits(s);
  if (bits & 0x7FFFFFu) bits = (bits + 0x800000u) & 0x7F800000u;
  return (uint8_t)((bits >> 23) & 0xFFu);
}

float skref_e8m0_reciprocal(uint8_t code) {
  if (code == 0xFF) return 0.0f;
  if (code == 0xFE) return skref_f32_from_bits(0x00400000u); /* 2^-127, subnormal */
  return skref_f32_from_bits((uint32_t)(254 - code) << 23);
}

/* ---- random numbers -------------------------------------------------------------------------- */
static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void skref_rng_seed(skref_rng *rng, uint64_t seed) {
  for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
  rng->spare = 0.0;
  rng->has_spare = 0;
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t skref_rng_u64(skref_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return result;
}

uint32_t skref_rng_u32(skref_rng *rng) { return (uint32_t)(skref_rng_u64(rng) >> 32); }

uint64_t skref_rng_below(skref_rng *rng, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n, r; /* reject the biased tail */
  do r = skref_rng_u64(rng);
  while (r >= limit);
  return r % n;
}

double skref_rng_uniform(skref_rng *rng) { return (double)(skref_rng_u64(rng) >> 11) * 0x1p-53; }

/* Marsaglia's polar method: a pair per accepted point of the unit disc (one log, no trig), the
 * second value kept for the next call; the bench fills draw a billion of these. */
double skref_rng_normal(skref_rng *rng) {
  if (rng->has_spare) {
    rng->has_spare = 0;
    return rng->spare;
  }
  double u, v, r2;
  do {
    u = 2.0 * skref_rng_uniform(rng) - 1.0;
    v = 2.0 * skref_rng_uniform(rng) - 1.0;
    r2 = u * u + v * v;
  } while (r2 >= 1.0 || r2 == 0.0);
  const double m = sqrt(-2.0 * log(r2) / r2);
  rng->spare = v * m;
  rng->has_spare = 1;
  return u * m;
}

uint64_t skref_test_seed(const char *what) {
  const char *env = getenv("SK_SEED");
  uint64_t seed;
  if (env && *env) {
    seed = strtoull(env, NULL, 0);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t mix =
        (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    seed = splitmix64(&mix);
  }
  fprintf(stderr, "[seed] %s: SK_SEED=0x%016llx\n", what ? what : "test", (unsigned long long)seed);
  return seed;
}

/* ---- test data ------------------------------------------------------------------------------- */
void skref_fill_normal(skref_rng *rng, uint16_t *dst, size_t n, skref_dtype dtype, float stddev,
                       double outlier_frac, float outlier_scale) {
  for (size_t i = 0; i < n; i++) {
    float v = (float)(skref_rng_normal(rng) * stddev);
    if (outlier_frac > 0 && skref_rng_uniform(rng) < outlier_frac) v *= outlier_scale;
    dst[i] = skref_float_to_half(v, dtype);
  }
}

void skref_fill_wide_range(skref_rng *rng, uint16_t *dst, size_t n, skref_dtype dtype) {
  for (size_t i = 0; i < n; i++) {
    uint32_t r = skref_rng_u32(rng);
    uint16_t sign = (uint16_t)((r & 1u) << 15);
    if (dtype == SKREF_FP16) /* exponent field 0..30, any mantissa */
      dst[i] = sign | (uint16_t)((((r >> 1) % 31u) << 10) | ((r >> 8) & 0x3FFu));
    else /* exponent field 0..254, any mantissa */
      dst[i] = sign | (uint16_t)((((r >> 1) % 255u) << 7) | ((r >> 9) & 0x7Fu));
  }
}

void skref_sprinkle_specials(skref_rng *rng, uint16_t *dst, size_t n, skref_dtype dtype,
                             double frac) {
  static const uint16_t bf16_specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0,
                                           0x7F81, 0xFFBF, 0x7F7F, 0xFF7F, 0x0001, 0x8001};
  static const uint16_t fp16_specials[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00,
                                           0x7C01, 0xFDFF, 0x7BFF, 0xFBFF, 0x0001, 0x8001};
  const uint16_t *specials = dtype == SKREF_FP16 ? fp16_specials : bf16_specials;
  size_t count = sizeof bf16_specials / sizeof bf16_specials[0];
  for (size_t i = 0; i < n; i++)
    if (skref_rng_uniform(rng) < frac) dst[i] = specials[skref_rng_below(rng, count)];
}
