/* CPU reference number formats: exhaustive code tables, encoder rounding/saturation/NaN rules,
 * BF16/FP16 conversions, E8M0 scale rules. The encoders under test (tests/ref/formats.c) are
 * integer bit manipulations; they are checked here against an independent nearest-value search
 * over each format's decoded code table. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/ref.h"

#define MAX_REPORTS 8

static float next_up(float f) { return nextafterf(f, INFINITY); }
static float next_down(float f) { return nextafterf(f, -INFINITY); }

/* ---- independent encoders: nearest code by search, ties to the even code ----------------------
 */
static double e2m1_table[8], e4m3_table[127];

static void build_tables(void) {
  for (int c = 0; c < 8; c++) e2m1_table[c] = skref_e2m1_decode((uint8_t)c);
  for (int c = 0; c < 127; c++) e4m3_table[c] = skref_e4m3_decode((uint8_t)c);
}

/* Codes 0..n-1 have increasing magnitudes; past the last one the nearest is the last one, which
 * is exactly satfinite for finite inputs. Distances are exact in double below the last code. */
static uint8_t nearest_code(double mag, const double *table, int n) {
  if (mag >= table[n - 1]) return (uint8_t)(n - 1); /* huge mags: distances would round equal */
  int best = 0;
  double best_dist = fabs(mag - table[0]);
  for (int c = 1; c < n; c++) {
    double dist = fabs(mag - table[c]);
    if (dist < best_dist || (dist == best_dist && (c & 1) == 0)) best = c, best_dist = dist;
  }
  return (uint8_t)best;
}

static uint8_t search_encode_e2m1(float f) {
  if (isnan(f)) return 0x7;
  uint8_t sign = signbit(f) ? 8 : 0;
  return sign | nearest_code(fabs((double)f), e2m1_table, 8);
}

static uint8_t search_encode_e4m3(float f) {
  if (isnan(f)) return 0x7F;
  uint8_t sign = signbit(f) ? 0x80 : 0;
  return sign | nearest_code(fabs((double)f), e4m3_table, 127);
}

/* Runs both encoders over `f`; counts and reports mismatches. */
static unsigned check_encoders_at(float f) {
  unsigned bad = 0;
  static unsigned reported;
  uint8_t a = skref_e2m1_encode(f), b = search_encode_e2m1(f);
  uint8_t c = skref_e4m3_encode(f), d = search_encode_e4m3(f);
  if (a != b || c != d) {
    bad = 1;
    if (reported++ < MAX_REPORTS)
      fprintf(stderr, "encode(%a = 0x%08x): e2m1 %x vs search %x, e4m3 %02x vs search %02x\n", f,
              skref_f32_bits(f), a, b, c, d);
  }
  return bad;
}

/* Every neighbourhood that matters: each code value, each midpoint between adjacent codes, and
 * a few ulps around both, for both signs. */
static unsigned check_encoders_around(const double *table, int n) {
  unsigned bad = 0;
  for (int c = 0; c < n; c++) {
    double points[2] = {table[c], c + 1 < n ? (table[c] + table[c + 1]) / 2 : table[c] * 1.25};
    for (int p = 0; p < 2; p++) {
      float center = (float)points[p]; /* exact: midpoints have few significant bits */
      cr_assert_eq((double)center, points[p], "midpoint %a not exact in fp32", points[p]);
      float lo = center, hi = center;
      for (int step = 0; step < 4; step++) {
        for (int sign = 0; sign < 2; sign++) {
          bad += check_encoders_at(sign ? -lo : lo);
          bad += check_encoders_at(sign ? -hi : hi);
        }
        lo = next_down(lo);
        hi = next_up(hi);
      }
    }
  }
  return bad;
}

/* ---- code tables ------------------------------------------------------------------------------
 */
Test(formats, e2m1_decode_table) {
  static const double expected[16] = {0,    0.5,  1,  1.5,  2,  3,  4,  6,
                                      -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int c = 0; c < 16; c++) {
    double v = skref_e2m1_decode((uint8_t)c);
    cr_assert_eq(v, expected[c], "e2m1 %x decodes to %g, expected %g", c, v, expected[c]);
    cr_assert_eq(!!signbit(v), c >= 8, "e2m1 %x has the wrong sign", c);
  }
  /* only the low nibble is read */
  cr_assert_eq(skref_e2m1_decode(0xF3), 1.5);
}

Test(formats, e4m3_decode_hand_values) {
  static const struct {
    uint8_t code;
    double value;
  } cases[] = {
      {0x00, 0.0},   {0x01, 0x1p-9}, {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6},  {0x0F, 1.875 * 0x1p-6},
      {0x38, 1.0},   {0x3F, 1.875},  {0x40, 2.0},        {0x77, 240.0},   {0x78, 256.0},
      {0x7E, 448.0}, {0xB8, -1.0},   {0xFE, -448.0},     {0x81, -0x1p-9}, {0x30, 0.5},
      {0x35, 0.8125}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_assert_eq(skref_e4m3_decode(cases[i].code), cases[i].value, "e4m3 %02x: %g vs %g",
                 cases[i].code, skref_e4m3_decode(cases[i].code), cases[i].value);
  cr_assert(signbit(skref_e4m3_decode(0x80)) && skref_e4m3_decode(0x80) == 0.0);
  cr_assert(isnan(skref_e4m3_decode(0x7F)) && isnan(skref_e4m3_decode(0xFF)));
}

Test(formats, e4m3_decode_structure) {
  int nans = 0;
  for (int c = 0; c < 256; c++) {
    double v = skref_e4m3_decode((uint8_t)c);
    if (isnan(v)) {
      nans++;
      continue;
    }
    /* sign symmetry, and every value is an integer multiple of 2^-9 below 2^9 */
    cr_assert_eq(skref_e4m3_decode((uint8_t)(c ^ 0x80)), -v);
    double units = ldexp(fabs(v), 9);
    cr_assert_eq(units, floor(units), "e4m3 %02x = %g is not a multiple of 2^-9", c, v);
    cr_assert(fabs(v) <= 448.0);
    /* strictly increasing over 0x00..0x7E, and step = 2^(e-10) within a binade (2^-9 for
     * subnormals) */
    if (c > 0 && c < 0x7F) {
      double prev = skref_e4m3_decode((uint8_t)(c - 1));
      int e = (c >> 3) & 15;
      double step = e <= 1 ? 0x1p-9 : ldexp(1.0, e - 10);
      if ((c & 7) == 0 && e > 1) step = ldexp(1.0, e - 11); /* first code of a binade */
      cr_assert_eq(v - prev, step, "e4m3 %02x: step %g, expected %g", c, v - prev, step);
    }
  }
  cr_assert_eq(nans, 2);
}

Test(formats, e8m0_decode_all) {
  for (int c = 0; c < 255; c++) {
    double v = skref_e8m0_decode((uint8_t)c);
    cr_assert_eq(v, ldexp(1.0, c - 127));
    /* the reciprocal is exact for every finite code */
    cr_assert_eq((double)skref_e8m0_reciprocal((uint8_t)c) * v, 1.0, "e8m0 %d", c);
  }
  cr_assert(isnan(skref_e8m0_decode(0xFF)));
  cr_assert_eq(skref_e8m0_decode(127), 1.0);
  cr_assert_eq(skref_e8m0_decode(0), 0x1p-127);
  cr_assert_eq(skref_e8m0_decode(254), 0x1p127);
  cr_assert_eq(skref_e8m0_reciprocal(0xFF), 0.0f);
}

/* ---- encoders -------------------------------------------------------------------------------- */
Test(formats, encode_decode_round_trip_all_codes) {
  for (int c = 0; c < 16; c++)
    cr_assert_eq(skref_e2m1_encode((float)skref_e2m1_decode((uint8_t)c)), c, "e2m1 %x", c);
  for (int c = 0; c < 256; c++) {
    if ((c & 0x7F) == 0x7F) continue;
    cr_assert_eq(skref_e4m3_encode((float)skref_e4m3_decode((uint8_t)c)), c, "e4m3 %02x", c);
  }
}

Test(formats, e2m1_ties_and_saturation_by_hand) {
  static const struct {
    float in;
    uint8_t code;
  } cases[] = {{0.25f, 0x0}, {0.2500001f, 0x1}, {0.75f, 0x2},      {0.7499999f, 0x1},
               {1.25f, 0x2}, {1.75f, 0x4},      {2.5f, 0x4},       {2.5000002f, 0x5},
               {3.5f, 0x6},  {5.0f, 0x6},       {5.0000005f, 0x7}, {6.0f, 0x7},
               {7.0f, 0x7},  {1e38f, 0x7},      {INFINITY, 0x7},   {-INFINITY, 0xF},
               {-0.1f, 0x8}, {-0.0f, 0x8},      {-2.9f, 0xD},      {0x1p-149f, 0x0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_assert_eq(skref_e2m1_encode(cases[i].in), cases[i].code, "e2m1(%a) = %x, expected %x",
                 cases[i].in, skref_e2m1_encode(cases[i].in), cases[i].code);
  cr_assert_eq(skref_e2m1_encode(NAN), 0x7);
  cr_assert_eq(skref_e2m1_encode(-NAN), 0x7, "NaN gives +MAX_NORM whatever its sign");
  cr_assert_eq(skref_e2m1_encode(skref_f32_from_bits(0x7F800001u)), 0x7, "signalling NaN");
  /* nibble order of the pair packer */
  cr_assert_eq(skref_e2m1_pack2(1.0f, -6.0f), 0xF2);
}

Test(formats, e4m3_ties_and_saturation_by_hand) {
  static const struct {
    float in;
    uint8_t code;
  } cases[] = {
      {0x1p-10f, 0x00},  {0x1.000002p-10f, 0x01}, {3 * 0x1p-10f, 0x02}, {5 * 0x1p-10f, 0x02},
      {-0x1p-10f, 0x80}, {1.0625f, 0x38},         {1.1875f, 0x3A},      {1.0625001f, 0x39},
      {448.0f, 0x7E},    {464.0f, 0x7E},          {464.00003f, 0x7E},   {1e30f, 0x7E},
      {INFINITY, 0x7E},  {-INFINITY, 0xFE},       {-500.0f, 0xFE},      {0x1p-149f, 0x00},
      {-0.0f, 0x80},     {0x1.ep-7f, 0x08},       {240.0f, 0x77},       {232.0f, 0x76}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_assert_eq(skref_e4m3_encode(cases[i].in), cases[i].code, "e4m3(%a) = %02x, expected %02x",
                 cases[i].in, skref_e4m3_encode(cases[i].in), cases[i].code);
  cr_assert_eq(skref_e4m3_encode(NAN), 0x7F);
  cr_assert_eq(skref_e4m3_encode(-NAN), 0x7F, "NaN gives 0x7F whatever its sign");
  cr_assert_eq(skref_e4m3_encode(skref_f32_from_bits(0xFF800001u)), 0x7F);
}

Test(formats, encoders_match_search_at_every_boundary) {
  build_tables();
  unsigned bad = check_encoders_around(e2m1_table, 8) + check_encoders_around(e4m3_table, 127);
  cr_assert_eq(bad, 0, "%u boundary inputs encode differently from the search", bad);
}

Test(formats, encoders_match_search_on_all_16bit_floats) {
  build_tables();
  unsigned bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float b = skref_bf16_to_float((uint16_t)h), f = skref_fp16_to_float((uint16_t)h);
    if (!isnan(b)) bad += check_encoders_at(b);
    if (!isnan(f)) bad += check_encoders_at(f);
  }
  cr_assert_eq(bad, 0);
}

Test(formats, encoders_match_search_on_fp32_sweep_and_random) {
  build_tables();
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("formats.encoders_random"));
  unsigned bad = 0;
  for (uint64_t u = 0; u < 0x100000000ull; u += 4093) { /* every exponent, both signs */
    float f = skref_f32_from_bits((uint32_t)u);
    if (!isnan(f)) bad += check_encoders_at(f);
  }
  for (int i = 0; i < 300000; i++) {
    /* uniform in [-8, 8] and [-512, 512] puts most samples where the codes are dense */
    float f = (float)((skref_rng_uniform(&rng) * 2 - 1) * (i & 1 ? 8.0 : 512.0));
    bad += check_encoders_at(f);
    float g = skref_f32_from_bits(skref_rng_u32(&rng));
    if (!isnan(g)) bad += check_encoders_at(g);
  }
  cr_assert_eq(bad, 0);
}

Test(formats, nan_and_inf_everywhere) {
  /* every NaN bit pattern class: quiet/signalling, both signs, payload extremes */
  static const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u,
                                  0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FBFFFFFu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    float f = skref_f32_from_bits(nans[i]);
    cr_assert_eq(skref_e2m1_encode(f), 0x7);
    cr_assert_eq(skref_e4m3_encode(f), 0x7F);
    cr_assert_eq(skref_float_to_bf16(f), 0x7FFF);
    cr_assert_eq(skref_float_to_fp16(f), 0x7FFF);
  }
  cr_assert_eq(skref_float_to_bf16(INFINITY), 0x7F80);
  cr_assert_eq(skref_float_to_bf16(-INFINITY), 0xFF80);
  cr_assert_eq(skref_float_to_fp16(INFINITY), 0x7C00);
  cr_assert_eq(skref_float_to_fp16(-INFINITY), 0xFC00);
  cr_assert(isinf(skref_bf16_to_float(0xFF80)) && skref_bf16_to_float(0xFF80) < 0);
  cr_assert(isinf(skref_fp16_to_float(0x7C00)) && skref_fp16_to_float(0x7C00) > 0);
  cr_assert(isnan(skref_fp16_to_float(0x7C01)) && isnan(skref_fp16_to_float(0xFE00)));
  cr_assert(isnan(skref_bf16_to_float(0x7F81)));
}

/* ---- BF16 / FP16 ------------------------------------------------------------------------------
 */
Test(formats, half_round_trip_every_code) {
  for (uint32_t h = 0; h < 65536; h++) {
    uint16_t c = (uint16_t)h;
    float b = skref_bf16_to_float(c), f = skref_fp16_to_float(c);
    if (!isnan(b)) cr_assert_eq(skref_float_to_bf16(b), c, "bf16 %04x", c);
    if (!isnan(f)) cr_assert_eq(skref_float_to_fp16(f), c, "fp16 %04x", c);
  }
}

Test(formats, fp16_decode_matches_formula) {
  for (uint32_t h = 0; h < 0x7C00; h++) { /* all finite positive codes */
    unsigned e = h >> 10, m = h & 0x3FF;
    double expected = e ? ldexp(1024.0 + m, (int)e - 25) : ldexp((double)m, -24);
    cr_assert_eq((double)skref_fp16_to_float((uint16_t)h), expected, "fp16 %04x", h);
    cr_assert_eq((double)skref_fp16_to_float((uint16_t)(h | 0x8000)), -expected);
  }
}

Test(formats, half_rounding_by_hand) {
  /* bf16: 8 significant bits */
  cr_assert_eq(skref_float_to_bf16(1.0f + 0x1p-8f), 0x3F80, "tie to even (down)");
  cr_assert_eq(skref_float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82, "tie to even (up)");
  cr_assert_eq(skref_float_to_bf16(next_up(1.0f + 0x1p-8f)), 0x3F81);
  cr_assert_eq(skref_float_to_bf16(FLT_MAX), 0x7F80, "overflow rounds to Inf");
  cr_assert_eq(skref_float_to_bf16(-0.0f), 0x8000);
  cr_assert_eq(skref_float_to_bf16(0x1p-149f), 0x0000, "below half of bf16's least subnormal");
  cr_assert_eq(skref_float_to_bf16(0x1p-133f), 0x0001);
  /* fp16 */
  cr_assert_eq(skref_float_to_fp16(65504.0f), 0x7BFF);
  cr_assert_eq(skref_float_to_fp16(65519.996f), 0x7BFF);
  cr_assert_eq(skref_float_to_fp16(65520.0f), 0x7C00, "tie past max goes to Inf");
  cr_assert_eq(skref_float_to_fp16(0x1p-24f), 0x0001);
  cr_assert_eq(skref_float_to_fp16(0x1p-25f), 0x0000, "tie to even zero");
  cr_assert_eq(skref_float_to_fp16(next_up(0x1p-25f)), 0x0001);
  cr_assert_eq(skref_float_to_fp16(3 * 0x1p-25f), 0x0002);
  cr_assert_eq(skref_float_to_fp16(-1.5f), 0xBE00);
  cr_assert_eq(skref_float_to_fp16(1.0f + 0x1p-11f), 0x3C00);
  cr_assert_eq(skref_float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);
  cr_assert_eq(skref_float_to_fp16(0x1p-14f), 0x0400, "least normal");
}

/* Random floats: the result must be one of the two neighbouring codes, the nearer one, and on a
 * tie the even one. Checked in double, independently of the bit tricks under test. */
Test(formats, half_rounding_random) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("formats.half_rounding_random"));
  for (int i = 0; i < 400000; i++) {
    float f = skref_f32_from_bits(skref_rng_u32(&rng));
    if (i & 1)
      f = (float)(skref_rng_normal(&rng) * ldexp(1.0, (int)skref_rng_below(&rng, 40) - 20));
    if (!isfinite(f)) continue;
    for (int d = 0; d < 2; d++) {
      skref_dtype dt = (skref_dtype)d;
      uint16_t c = skref_float_to_half(f, dt);
      double got = skref_half_to_float(c, dt), x = f;
      /* neighbours of the result in the format */
      uint16_t mag = c & 0x7FFF, sign = c & 0x8000;
      uint16_t inf_code = dt == SKREF_FP16 ? 0x7C00 : 0x7F80;
      if (mag == inf_code) { /* overflow: x must be at least max + half ulp */
        double max = skref_half_to_float((uint16_t)(inf_code - 1), dt);
        double half_ulp = (max - skref_half_to_float((uint16_t)(inf_code - 2), dt)) / 2;
        cr_assert(fabs(x) >= max + half_ulp, "%s(%a) overflowed", d ? "fp16" : "bf16", f);
        continue;
      }
      double up = skref_half_to_float((uint16_t)(sign | (mag + 1)), dt);
      double down = mag ? skref_half_to_float((uint16_t)(sign | (mag - 1)), dt) : -got;
      double err = fabs(x - got);
      cr_assert(err <= fabs(x - up) && err <= fabs(x - down), "%s(%a) = %04x is not nearest",
                d ? "fp16" : "bf16", f, c);
      if (err == fabs(x - up) || (mag && err == fabs(x - down)))
        cr_assert((c & 1) == 0 || err == 0, "%s(%a) = %04x: tie not to even", d ? "fp16" : "bf16",
                  f, c);
    }
  }
}

/* ---- E8M0 scale rule ----------------------------------------------------------------------------
 */
Test(formats, e8m0_ceil_pow2) {
  cr_assert_eq(skref_e8m0_ceil_pow2(1.0f), 127);
  cr_assert_eq(skref_e8m0_ceil_pow2(next_up(1.0f)), 128);
  cr_assert_eq(skref_e8m0_ceil_pow2(next_down(1.0f)), 127);
  cr_assert_eq(skref_e8m0_ceil_pow2(0.75f), 127);
  cr_assert_eq(skref_e8m0_ceil_pow2(0x1p-126f), 1);
  cr_assert_eq(skref_e8m0_ceil_pow2(0x1p-149f), 1, "subnormals round up to 2^-126");
  cr_assert_eq(skref_e8m0_ceil_pow2(0x1p-127f), 1);
  cr_assert_eq(skref_e8m0_ceil_pow2(0.0f), 0);
  cr_assert_eq(skref_e8m0_ceil_pow2(INFINITY), 0xFF);
  cr_assert_eq(skref_e8m0_ceil_pow2(0x1p127f), 254);
  cr_assert_eq(skref_e8m0_ceil_pow2(next_up(0x1p127f)), 0xFF, "past 2^127 the ceiling is NaN");
  /* random positive floats: 2^(b-127) is the least power of two >= s (s >= 2^-126) */
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("formats.e8m0_ceil_pow2"));
  for (int i = 0; i < 200000; i++) {
    float s = skref_f32_from_bits(skref_rng_u32(&rng) & 0x7F7FFFFFu);
    if (s < 0x1p-126f) continue;
    uint8_t b = skref_e8m0_ceil_pow2(s);
    if (s > 0x1p127f) {
      cr_assert_eq(b, 0xFF);
      continue;
    }
    cr_assert(ldexp(1.0, b - 127) >= s && ldexp(1.0, b - 128) < s, "ceil_pow2(%a) = %d", s, b);
  }
}
