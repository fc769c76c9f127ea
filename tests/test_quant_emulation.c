/* The kernels' hardware conversion path, emulated on the CPU, equals their software path.
 *
 * On sm_120a/sm_121a the quantizers convert with
 *   cvt.rn.satfinite.e2m1x2.f32 d, a, b   (d[7:4] = convert(a), d[3:0] = convert(b))
 *   cvt.rn.satfinite.e4m3x2.f32 d, a, b   (d[15:8] = convert(a), d[7:0] = convert(b))
 * with the PTX ISA semantics: round to nearest even; .satfinite: magnitudes above MAX_NORM
 * (Inf included) become MAX_NORM with the input's sign; NaN becomes the destination's NaN
 * (E4M3 0x7F) or, for E2M1 which has none, positive MAX_NORM (0x7). Zero results keep the
 * sign. Elsewhere (and with CVT = kCvtSoftware) they use the integer code in numeric.cuh, which
 * is the skref encoder (checked identical over all 2^32 floats, see ops/quantization/quantization.md).
 *
 * Below, emulate_cvt_* implements those PTX semantics independently (per-binade rounding in
 * double), and the kernels' exact hardware-path compositions (operand order, packing, -0
 * clearing, scale conversion) are rebuilt from it and compared with the reference over every
 * boundary input pair and many random inputs. */
#include <criterion/criterion.h>
#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ref.h"
/* The kernels' fast software E2M1 encoder, the very code (C/C++ common subset). */
#include "common/e2m1_fast.cuh"

/* ---- PTX cvt emulation ----------------------------------------------------------------------- */
/* Round |x| to a multiple of `spacing` (a power of two), ties to even multiple; exact in double. */
static double round_to_spacing(double mag, double spacing) { return nearbyint(mag / spacing); }

/* E2M1 magnitude code: binades [0,1) spacing 0.5 (subnormal), [1,2) 0.5, [2,4) 1, [4,8) 2. */
static unsigned e2m1_convert(float x) {
  if (isnan(x)) return 0x7;
  unsigned sign = signbit(x) ? 8u : 0u;
  double mag = fabs((double)x);
  if (mag > 6.0) return sign | 7u;
  unsigned code;
  if (mag < 2.0) {
    code = (unsigned)round_to_spacing(mag, 0.5); /* 0..4: 0, 0.5, 1, 1.5, 2 = codes 0..4 */
  } else if (mag < 4.0) {
    code = 4u + (unsigned)round_to_spacing(mag, 1.0) - 2u; /* 2, 3, 4 -> 4, 5, 6 */
  } else {
    code = 6u + (unsigned)round_to_spacing(mag, 2.0) - 2u; /* 4, 6 -> 6, 7 */
  }
  return sign | code;
}

/* E4M3 magnitude code: subnormals below 2^-6 with spacing 2^-9; binade [2^e, 2^e+1) has
 * spacing 2^(e-3) and codes (e+7)<<3 | mantissa, a carry rolling into the next binade. */
static unsigned e4m3_convert(float x) {
  if (isnan(x)) return 0x7F;
  unsigned sign = signbit(x) ? 0x80u : 0u;
  double mag = fabs((double)x);
  if (mag > 448.0) return sign | 0x7Eu;
  unsigned code;
  if (mag < 0x1p-6) {
    code = (unsigned)round_to_spacing(mag, 0x1p-9);
  } else {
    int e;
    frexp(mag, &e); /* mag = f * 2^e, f in [0.5, 1): binade exponent e - 1 */
    e -= 1;
    unsigned q = (unsigned)round_to_spacing(mag, ldexp(1.0, e - 3)); /* 8..16 */
    code = ((unsigned)(e + 7) << 3) + (q - 8u);
  }
  return sign | (code > 0x7Eu ? 0x7Eu : code);
}

static uint8_t emulate_cvt_e2m1x2(float a, float b) {
  return (uint8_t)((e2m1_convert(a) << 4) | e2m1_convert(b));
}

static uint16_t emulate_cvt_e4m3x2(float a, float b) {
  return (uint16_t)((e4m3_convert(a) << 8) | e4m3_convert(b));
}

/* ---- the kernels' hardware-path compositions (ops/common/numeric.cuh) -------------------
 */
/* pack_e2m1x8<kCvtHardware>: byte j = cvt.e2m1x2(v[2j+1], v[2j]), then -0 codes cleared. */
static uint32_t clear_negative_zeros(uint32_t packed) {
  uint32_t mag = packed & 0x77777777u;
  uint32_t nonzero = (mag | (mag >> 1) | (mag >> 2)) & 0x11111111u;
  return packed & (0x77777777u | (nonzero << 3));
}

static uint32_t hw_pack_e2m1x8(const float v[8]) {
  uint32_t r = 0;
  for (int j = 0; j < 4; j++) r |= (uint32_t)emulate_cvt_e2m1x2(v[2 * j + 1], v[2 * j]) << (8 * j);
  return clear_negative_zeros(r);
}

/* The reference: element i -> skref_e2m1_encode, -0 stored as +0, element 2j in the low nibble. */
static uint32_t ref_pack_e2m1x8(const float v[8]) {
  uint32_t r = 0;
  for (int i = 0; i < 8; i++) {
    uint8_t c = skref_e2m1_encode(v[i]);
    if (c == 0x8) c = 0;
    r |= (uint32_t)c << (4 * i);
  }
  return r;
}

/* pack_e4m3x4<kCvtHardware>: low half = cvt.e4m3x2(v1, v0), high half = cvt.e4m3x2(v3, v2). */
static uint32_t hw_pack_e4m3x4(const float v[4]) {
  return (uint32_t)emulate_cvt_e4m3x2(v[1], v[0]) |
         ((uint32_t)emulate_cvt_e4m3x2(v[3], v[2]) << 16);
}

static uint32_t ref_pack_e4m3x4(const float v[4]) {
  uint32_t r = 0;
  for (int i = 0; i < 4; i++) r |= (uint32_t)skref_e4m3_encode(v[i]) << (8 * i);
  return r;
}

/* float_to_e4m3<kCvtHardware>: low byte of cvt.e4m3x2(0, x). */
static uint8_t hw_e4m3(float x) { return (uint8_t)(emulate_cvt_e4m3x2(0.0f, x) & 0xFF); }

/* nvfp4 block on the hardware path: the kernel's operation order with emulated cvts. */
static uint8_t hw_nvfp4_block(const float x[16], float gs, uint8_t packed[8]) {
  memset(packed, 0, 8);
  if (gs == 0.0f) return 0;
  uint32_t amax_bits = 0;
  for (int i = 0; i < 16; i++) {
    uint32_t a = skref_f32_bits(x[i]) & 0x7FFFFFFFu;
    if (a <= 0x7F800000u && a > amax_bits) amax_bits = a;
  }
  float sf = fminf(gs * (skref_f32_from_bits(amax_bits) * SKREF_NVFP4_RCP6), 448.0f);
  uint8_t scale = hw_e4m3(sf);
  if (scale == 0) return 0;
  float eff = 1.0f / ((float)skref_e4m3_decode(scale) * (1.0f / gs));
  if (eff == 0.0f) return scale;
  for (int h = 0; h < 2; h++) {
    float q[8];
    for (int i = 0; i < 8; i++) q[i] = x[8 * h + i] * eff;
    uint32_t w = hw_pack_e2m1x8(q);
    memcpy(packed + 4 * h, &w, 4); /* little-endian store, as the kernel's u32 store */
  }
  return scale;
}

static uint8_t hw_mxfp8_block(const float x[32], uint8_t values[32]) {
  uint32_t amax_bits = 0;
  for (int i = 0; i < 32; i++) {
    uint32_t a = skref_f32_bits(x[i]) & 0x7FFFFFFFu;
    if (a <= 0x7F800000u && a > amax_bits) amax_bits = a;
  }
  float amax = skref_f32_from_bits(amax_bits);
  uint8_t scale = amax == 0.0f ? 127 : skref_e8m0_ceil_pow2(amax * SKREF_MXFP8_INV_E4M3_MAX);
  float inv = skref_e8m0_reciprocal(scale);
  for (int w = 0; w < 8; w++) {
    float q[4];
    for (int i = 0; i < 4; i++) q[i] = x[4 * w + i] * inv;
    uint32_t word = hw_pack_e4m3x4(q);
    memcpy(values + 4 * w, &word, 4);
  }
  return scale;
}

/* ---- inputs ------------------------------------------------------------------------------------
 */
/* Every code value and every midpoint of both formats, 2 ulps either side, both signs, plus
 * zeros, Inf, NaNs (quiet/signalling, both signs), huge, tiny and subnormal floats. */
static float boundary[4096];
static size_t num_boundary;

static void add(float f) {
  cr_assert(num_boundary < sizeof boundary / sizeof boundary[0]);
  boundary[num_boundary++] = f;
}

static void add_around(double center) {
  float c = (float)center, lo = c, hi = c;
  cr_assert_eq((double)c, center);
  for (int i = 0; i < 3; i++) {
    add(lo), add(-lo), add(hi), add(-hi);
    lo = nextafterf(lo, -INFINITY), hi = nextafterf(hi, INFINITY);
  }
}

static void build_boundary(void) {
  num_boundary = 0;
  for (int c = 0; c < 8; c++) {
    double v = skref_e2m1_decode((uint8_t)c),
           next = c < 7 ? skref_e2m1_decode((uint8_t)(c + 1)) : 7.0;
    add_around(v), add_around((v + next) / 2);
  }
  for (int c = 0; c < 127; c++) {
    double v = skref_e4m3_decode((uint8_t)c),
           next = c < 126 ? skref_e4m3_decode((uint8_t)(c + 1)) : 480.0;
    add_around(v), add_around((v + next) / 2);
  }
  static const uint32_t specials[] = {
      0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu, 0x7F7FFFFFu,
      0xFF7FFFFFu, 0x00000001u, 0x80000001u, 0x00800000u, 0x3F800001u, 0x00000000u, 0x80000000u};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
    add(skref_f32_from_bits(specials[i]));
}

static float random_float(skref_rng *rng) {
  switch (skref_rng_below(rng, 4)) {
    case 0:
      return skref_f32_from_bits(skref_rng_u32(rng)); /* any bits */
    case 1:
      return (float)((skref_rng_uniform(rng) * 2 - 1) * 8); /* dense E2M1 range */
    case 2:
      return (float)((skref_rng_uniform(rng) * 2 - 1) * 512); /* dense E4M3 range */
    default:
      return (float)(skref_rng_normal(rng) * ldexp(1.0, (int)skref_rng_below(rng, 40) - 20));
  }
}

static void init(void) {
  fesetround(FE_TONEAREST);
  build_boundary();
}

/* ---- tests
 * --------------------------------------------------------------------------------------- */
Test(emulation, cvt_operand_order_and_ptx_rules, .init = init) {
  cr_assert_eq(emulate_cvt_e2m1x2(1.0f, -6.0f), 0x2F, "a goes to the upper nibble");
  cr_assert_eq(emulate_cvt_e4m3x2(1.0f, -2.0f), 0x38C0, "a goes to the upper byte");
  cr_assert_eq(emulate_cvt_e2m1x2(NAN, -NAN), 0x77, "NaN -> +MAX_NORM");
  cr_assert_eq(emulate_cvt_e2m1x2(INFINITY, -INFINITY), 0x7F);
  cr_assert_eq(emulate_cvt_e2m1x2(-0.0f, -0.2f), 0x88, "zero results keep the sign");
  cr_assert_eq(emulate_cvt_e4m3x2(-NAN, INFINITY), 0x7F7E);
  cr_assert_eq(emulate_cvt_e4m3x2(464.0f, -1e30f), 0x7EFE);
  cr_assert_eq(emulate_cvt_e2m1x2(2.5f, 0.75f), 0x42, "ties to even");
  /* and the software packer uses the opposite argument order on purpose: (even, odd) */
  cr_assert_eq(skref_e2m1_pack2(-6.0f, 1.0f), emulate_cvt_e2m1x2(1.0f, -6.0f));
}

/* The emulation is an independent encoder: it must agree with the reference everywhere. */
Test(emulation, emulated_cvt_equals_reference_encoders, .init = init) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("emulation.encoders"));
  unsigned bad = 0;
  for (size_t i = 0; i < num_boundary; i++) {
    float f = boundary[i];
    bad += e2m1_convert(f) != skref_e2m1_encode(f);
    bad += e4m3_convert(f) != skref_e4m3_encode(f);
  }
  for (uint32_t h = 0; h < 65536; h++) {
    float f = skref_bf16_to_float((uint16_t)h), g = skref_fp16_to_float((uint16_t)h);
    bad += e2m1_convert(f) != skref_e2m1_encode(f) || e4m3_convert(f) != skref_e4m3_encode(f);
    bad += e2m1_convert(g) != skref_e2m1_encode(g) || e4m3_convert(g) != skref_e4m3_encode(g);
  }
  for (int i = 0; i < 1000000; i++) {
    float f = random_float(&rng);
    if (e2m1_convert(f) != skref_e2m1_encode(f) || e4m3_convert(f) != skref_e4m3_encode(f)) {
      if (bad++ < 8)
        fprintf(stderr, "%a: emulated %x/%02x, reference %x/%02x\n", f, e2m1_convert(f),
                e4m3_convert(f), skref_e2m1_encode(f), skref_e4m3_encode(f));
    }
  }
  cr_assert_eq(bad, 0);
}

Test(emulation, e2m1_packing_hw_equals_sw_on_all_boundary_pairs, .init = init) {
  unsigned bad = 0;
  for (size_t i = 0; i < num_boundary; i++)
    for (size_t j = 0; j < num_boundary; j += 1 + (i & 3)) {
      float v[8] = {boundary[i], boundary[j],  boundary[j],
                    boundary[i], -boundary[i], boundary[(i + j) % num_boundary],
                    0.0f,        boundary[j]};
      if (hw_pack_e2m1x8(v) != ref_pack_e2m1x8(v) && bad++ < 8)
        fprintf(stderr, "e2m1x8 (%a, %a): hw %08x sw %08x\n", boundary[i], boundary[j],
                hw_pack_e2m1x8(v), ref_pack_e2m1x8(v));
    }
  cr_assert_eq(bad, 0);
}

Test(emulation, e4m3_packing_hw_equals_sw_on_all_boundary_pairs, .init = init) {
  unsigned bad = 0;
  for (size_t i = 0; i < num_boundary; i++) {
    bad += hw_e4m3(boundary[i]) != skref_e4m3_encode(boundary[i]);
    for (size_t j = 0; j < num_boundary; j += 1 + (i & 3)) {
      float v[4] = {boundary[i], boundary[j], -boundary[j], boundary[(i * 7 + j) % num_boundary]};
      if (hw_pack_e4m3x4(v) != ref_pack_e4m3x4(v) && bad++ < 8)
        fprintf(stderr, "e4m3x4 (%a, %a): hw %08x sw %08x\n", boundary[i], boundary[j],
                hw_pack_e4m3x4(v), ref_pack_e4m3x4(v));
    }
  }
  cr_assert_eq(bad, 0);
}

Test(emulation, packing_hw_equals_sw_on_random_inputs, .init = init) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("emulation.random_packing"));
  unsigned bad = 0;
  for (int n = 0; n < 400000; n++) {
    float v[8];
    for (int i = 0; i < 8; i++) v[i] = random_float(&rng);
    bad += hw_pack_e2m1x8(v) != ref_pack_e2m1x8(v);
    bad += hw_pack_e4m3x4(v) != ref_pack_e4m3x4(v);
    bad += hw_e4m3(v[0]) != skref_e4m3_encode(v[0]);
  }
  cr_assert_eq(bad, 0);
}

/* Whole blocks: the kernels' hardware path (emulated) against the reference quantizers, on
 * random BF16/FP16 blocks with outliers and specials and a range of global scales. */
Test(emulation, quantized_blocks_hw_path_equal_reference, .init = init) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("emulation.blocks"));
  static const float global_scales[] = {1.0f, 448.0f, 0.037f, 2688.0f / 3.5f, 1e30f, 1e-30f, 0.0f};
  unsigned bad = 0, nonzero = 0;
  for (int n = 0; n < 40000; n++) {
    skref_dtype dt = (skref_dtype)(n & 1);
    uint16_t raw[32];
    switch (n % 4) {
      case 0:
        skref_fill_normal(&rng, raw, 32, dt, 1.0f, 0.05, 100.0f);
        break;
      case 1:
        skref_fill_wide_range(&rng, raw, 32, dt);
        break;
      case 2:
        skref_fill_normal(&rng, raw, 32, dt, 3.0f, 0.0, 1.0f);
        skref_sprinkle_specials(&rng, raw, 32, dt, 0.05);
        break;
      default:
        skref_fill_normal(&rng, raw, 32, dt, dt == SKREF_FP16 ? 1e-5f : 1e-38f, 0.1, 1e3f);
        break;
    }
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = skref_half_to_float(raw[i], dt);
    float gs = global_scales[n % 7];
    if (n % 5 == 0) gs = skref_nvfp4_global_scale_from_amax(fabsf(x[0]) + fabsf(x[9]));
    for (int h = 0; h < 2; h++) {
      uint8_t a[8], b[8];
      uint8_t sa = hw_nvfp4_block(x + 16 * h, gs, a),
              sb = skref_nvfp4_quantize_block(x + 16 * h, gs, b);
      if ((sa != sb || memcmp(a, b, 8)) && bad++ < 8)
        fprintf(stderr, "nvfp4 block %d/%d differs\n", n, h);
      nonzero += sb != 0;
    }
    uint8_t va[32], vb[32];
    uint8_t sa = hw_mxfp8_block(x, va), sb = skref_mxfp8_quantize_block(x, vb);
    if ((sa != sb || memcmp(va, vb, 32)) && bad++ < 8)
      fprintf(stderr, "mxfp8 block %d differs\n", n);
  }
  cr_assert_eq(bad, 0);
  cr_assert(nonzero > 20000, "most nvfp4 blocks must have a nonzero scale (%u)", nonzero);
}

/* ---- the fast software E2M1 path (ops/common/e2m1_fast.cuh, used on sm_90) --------------
 * sk_float_to_e2m1_fast(q) must equal the reference encoder with -0 (0x8) replaced by +0, which
 * is what the NVFP4 kernels store, for every fp32 bit pattern. Checked exhaustively over every
 * pattern whose exponent field is 120..131 (|q| in [2^-7, 32): every rounding boundary, both
 * signs, all mantissas) or 255 (Inf, every NaN payload, signalling ones included). Outside that
 * range both sides are constant by monotonicity (each of the fast path's three lines is
 * non-decreasing in |q|: 0 below 0.25, saturated 7 above 6), which a strided sweep over all 2^32
 * patterns confirms. SK_E2M1_EXHAUSTIVE=1 checks all 2^32 patterns (about a minute). */
static unsigned canonical_e2m1(float q) {
  unsigned c = skref_e2m1_encode(q);
  return c == 0x8u ? 0u : c;
}

static unsigned long long check_fast_e2m1(uint32_t first, uint32_t count, uint32_t stride) {
  unsigned long long bad = 0;
  for (uint32_t i = 0; i < count; i++) {
    const uint32_t u = first + i * stride;
    const float q = skref_f32_from_bits(u);
    if (sk_float_to_e2m1_fast(q) != canonical_e2m1(q) && bad++ < 8)
      fprintf(stderr, "fast e2m1 %a (0x%08x): %x, reference %x\n", q, u, sk_float_to_e2m1_fast(q),
              canonical_e2m1(q));
  }
  return bad;
}

Test(emulation, fast_e2m1_equals_reference_on_all_fp32) {
  unsigned long long bad = 0;
  const char *all = getenv("SK_E2M1_EXHAUSTIVE");
  if (all && !strcmp(all, "1")) {
    for (uint32_t hi = 0; hi < (1u << 8); hi++) bad += check_fast_e2m1(hi << 24, 1u << 24, 1);
  } else {
    for (uint32_t sign = 0; sign < 2; sign++) {
      bad += check_fast_e2m1((sign << 31) | (120u << 23), 12u << 23, 1);
      bad += check_fast_e2m1((sign << 31) | (255u << 23), 1u << 23, 1);
    }
    bad += check_fast_e2m1(12345, (uint32_t)((0x100000000ull - 12345) / 257), 257);
  }
  cr_assert_eq(bad, 0, "%llu fp32 inputs encode differently", bad);
}

/* The 8-value packing (biases summed and removed once) on boundary and random inputs. */
Test(emulation, fast_e2m1_packing_equals_reference, .init = init) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("emulation.fast_e2m1_pack"));
  unsigned bad = 0;
  for (int n = 0; n < 400000; n++) {
    float v[8];
    for (int i = 0; i < 8; i++)
      v[i] = (n & 1) ? random_float(&rng) : boundary[skref_rng_below(&rng, num_boundary)];
    if (sk_pack_e2m1x8_fast(v) != ref_pack_e2m1x8(v) && bad++ < 8)
      fprintf(stderr, "fast pack %a %a ..: %08x, reference %08x\n", v[0], v[1], sk_pack_e2m1x8_fast(v),
              ref_pack_e2m1x8(v));
    /* the middle path's magnitudes (any input): the reference codes without their sign bits */
    if (sk_pack_e2m1x8_magnitudes(v) != (ref_pack_e2m1x8(v) & 0x77777777u) && bad++ < 8)
      fprintf(stderr, "magnitude pack %a %a ..: %08x, reference %08x\n", v[0], v[1], sk_pack_e2m1x8_magnitudes(v),
              ref_pack_e2m1x8(v) & 0x77777777u);
  }
  cr_assert_eq(bad, 0);
}

/* ---- the NVFP4 kernel's block fast and middle paths (sm_90) ---------------------------------------
 * Fast, taken by a block whose amax * eff < 7: the unclamped magnitude lines, and the signs applied
 * eight at a time from the inputs' sign bits (ops/common/e2m1_fast.cuh). Middle, taken when
 * amax * eff is finite and sign-clear but not below 7 (a saturated scale): the clamped lines and
 * the same signs. */

/* Every fp32 with |q| < 7 (the path's domain): the unclamped lines give the reference magnitude.
 * Default: exponent fields 0..129 (|q| < 8), both signs, every mantissa (|q| below 2^-7 is also
 * covered: all of it encodes as 0); SK_E2M1_EXHAUSTIVE=1 runs all 2^32 patterns. */
static unsigned long long check_below7(uint32_t first, uint32_t count) {
  unsigned long long bad = 0;
  for (uint32_t i = 0; i < count; i++) {
    const uint32_t u = first + i;
    const float q = skref_f32_from_bits(u);
    if (!(fabsf(q) < 7.0f)) continue;
    const unsigned got = sk_e2m1_biased_magnitude_below7(q) - 0x4B000000u, want = skref_e2m1_encode(q) & 7u;
    if (got != want && bad++ < 8) fprintf(stderr, "below7 %a (0x%08x): %u, reference %u\n", q, u, got, want);
  }
  return bad;
}

Test(emulation, fast_e2m1_below7_equals_reference) {
  unsigned long long bad = 0;
  const char *all = getenv("SK_E2M1_EXHAUSTIVE");
  if (all && !strcmp(all, "1")) {
    for (uint32_t hi = 0; hi < (1u << 8); hi++) bad += check_below7(hi << 24, 1u << 24);
  } else {
    for (uint32_t sign = 0; sign < 2; sign++) bad += check_below7(sign << 31, 130u << 23);
  }
  cr_assert_eq(bad, 0, "%llu fp32 inputs encode differently", bad);
}

/* prmt.b32 emulation against hand-worked PTX examples (plain and sign-replicating selectors). */
Test(emulation, prmt_emulation) {
  cr_assert_eq(sk_prmt(0x33221100u, 0x77665544u, 0x3210u), 0x33221100u);
  cr_assert_eq(sk_prmt(0x33221100u, 0x77665544u, 0x7654u), 0x77665544u);
  cr_assert_eq(sk_prmt(0x33221100u, 0x77665544u, 0x0415u), 0x00441155u);
  cr_assert_eq(sk_prmt(0x80017F00u, 0x00000000u, 0x8B9Au), 0x00FF0000u);
  cr_assert_eq(sk_prmt(0x80017F00u, 0xFF000000u, 0xF3BAu), 0xFF80FF00u);
}

/* Sign nibbles and their application: every nibble position, code and sign, over random
 * neighbours (the operations are per nibble, no carries between nibbles). */
Test(emulation, fast_e2m1_signs_equal_reference, .init = init) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("emulation.fast_e2m1_signs"));
  unsigned bad = 0;
  for (int n = 0; n < 200000; n++) {
    uint32_t w[4], mags = 0, want = 0;
    for (int j = 0; j < 4; j++) w[j] = skref_rng_u32(&rng);
    for (int i = 0; i < 8; i++) {
      const unsigned code = (n < 64 && i == n / 8) ? (unsigned)(n % 8) : skref_rng_below(&rng, 8);
      const unsigned neg = (w[i / 2] >> (16 * (i & 1) + 15)) & 1u;
      mags |= code << (4 * i);
      want |= (code | (neg && code ? 8u : 0u)) << (4 * i);
    }
    const uint32_t got = sk_e2m1x8_apply_signs(mags, sk_sign_nibbles8(w[0], w[1], w[2], w[3]));
    if (got != want && bad++ < 8) fprintf(stderr, "signs %08x %08x %08x %08x: %08x, want %08x\n", w[0], w[1], w[2], w[3], got, want);
  }
  cr_assert_eq(bad, 0);
}

/* Whole blocks through the fast and middle paths as the kernel runs them (NaN-propagating
 * magnitude max, scale, the eff table entry, the tests p = amax * eff < 7 (fast) and bits(p) <=
 * 0x7F7FFFFF (middle: finite and sign-clear), then the fast encoder without or with the clamp),
 * against the reference, on random BF16/FP16 blocks with specials and given global scales down to
 * the extremes (negative, tiny, huge, Inf, NaN), where the tests must route blocks to the general
 * path. Returns 1 (fast), 2 (middle) or 0 (general: nothing encoded). */
enum { NVFP4_GENERAL = 0, NVFP4_FAST = 1, NVFP4_MIDDLE = 2 };
static int fast_nvfp4_block(const uint16_t raw[16], skref_dtype dt, float gs, uint8_t *scale_out,
                            uint8_t packed[8]) {
  float x[16], amax = 0.0f;
  int nan = 0;
  for (int i = 0; i < 16; i++) {
    x[i] = skref_half_to_float(raw[i], dt);
    nan |= isnan(x[i]);
    if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
  }
  if (nan) amax = NAN;
  const float gs_recip = gs != 0.0f ? 1.0f / gs : 0.0f;
  const uint8_t scale = gs != 0.0f ? skref_e4m3_encode(fminf(gs * (amax * SKREF_NVFP4_RCP6), 448.0f)) : 0;
  const float eff = scale == 0 ? 0.0f : 1.0f / ((float)skref_e4m3_decode(scale) * gs_recip);
  const float amax_eff = amax * eff;
  const int path = amax_eff < 7.0f ? NVFP4_FAST : skref_f32_bits(amax_eff) <= 0x7F7FFFFFu ? NVFP4_MIDDLE : NVFP4_GENERAL;
  if (path == NVFP4_GENERAL) return path;
  for (int h = 0; h < 2; h++) {
    float q[8];
    uint32_t w[4];
    for (int i = 0; i < 8; i++) q[i] = x[8 * h + i] * eff;
    for (int j = 0; j < 4; j++) w[j] = raw[8 * h + 2 * j] | (uint32_t)raw[8 * h + 2 * j + 1] << 16;
    const uint32_t mags = path == NVFP4_FAST ? sk_pack_e2m1x8_magnitudes_below7(q) : sk_pack_e2m1x8_magnitudes(q);
    const uint32_t word = sk_e2m1x8_apply_signs(mags, sk_sign_nibbles8(w[0], w[1], w[2], w[3]));
    memcpy(packed + 4 * h, &word, 4);
  }
  *scale_out = scale;
  return path;
}

Test(emulation, nvfp4_fast_blocks_equal_reference, .init = init) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("emulation.fast_blocks"));
  static const float global_scales[] = {1.0f, 448.0f, 0.037f, 2688.0f / 3.5f, 1e30f, 1e-30f, 0.0f, -3.0f, -0.0f,
                                        0x1.fffffep127f, 0x1p-140f, INFINITY, -INFINITY, NAN, 1e38f, 5e-39f};
  const int ngs = (int)(sizeof global_scales / sizeof global_scales[0]);
  unsigned bad = 0, taken[3] = {0, 0, 0};
  for (int n = 0; n < 300000; n++) {
    skref_dtype dt = (skref_dtype)(n & 1);
    uint16_t raw[16];
    switch (n % 4) {
      case 0: skref_fill_normal(&rng, raw, 16, dt, 1.0f, 0.05, 100.0f); break;
      case 1: skref_fill_wide_range(&rng, raw, 16, dt); break;
      case 2:
        skref_fill_normal(&rng, raw, 16, dt, 3.0f, 0.0, 1.0f);
        skref_sprinkle_specials(&rng, raw, 16, dt, 0.05);
        break;
      default: skref_fill_normal(&rng, raw, 16, dt, dt == SKREF_FP16 ? 1e-5f : 1e-38f, 0.1, 1e3f); break;
    }
    if (n % 16 == 5) for (int i = 0; i < 16; i++) raw[i] &= 0x8000u; /* signed zeros only */
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = skref_half_to_float(raw[i], dt);
    float gs = global_scales[(n / 4) % ngs];
    if (n % 5 == 0) gs = skref_nvfp4_global_scale_from_amax(fabsf(x[0]) + fabsf(x[9]));
    uint8_t a[8], b[8], sa;
    const int path = fast_nvfp4_block(raw, dt, gs, &sa, a);
    taken[path]++;
    if (path == NVFP4_GENERAL) continue;
    const uint8_t sb = skref_nvfp4_quantize_block(x, gs, b);
    if ((sa != sb || memcmp(a, b, 8)) && bad++ < 8)
      fprintf(stderr, "%s nvfp4 block %d (gs %a) differs\n", path == NVFP4_FAST ? "fast" : "middle", n, gs);
  }
  cr_assert_eq(bad, 0);
  cr_assert(taken[NVFP4_FAST] > 60000, "many blocks must take the fast path (%u)", taken[NVFP4_FAST]);
  cr_assert(taken[NVFP4_MIDDLE] > 20000, "many blocks must take the middle path (%u)", taken[NVFP4_MIDDLE]);
  cr_assert(taken[NVFP4_GENERAL] > 20000, "many blocks must take the general path (%u)", taken[NVFP4_GENERAL]);
}
