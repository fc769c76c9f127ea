// Activation quantizers of the FP8 linear ops (ops/gemm/act_quant.cuh): checks of the CPU
// references skref_gemm_quantize_block_fp8_rows / skref_gemm_quantize_tensor_fp8 on hand-worked
// cases and edge cases, and a CPU emulation of the kernels' exact operation order (integer-bit
// amax with the kernels' skip rules, the nvfp4_amax_partials grid-stride split, IEEE fp32
// division, numeric.cuh's integer E4M3 rounding) compared bit for bit with the references.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm/ref.h"

static uint64_t fresh_seed(const char* what) {
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20) ^ (uint64_t)(uintptr_t)what;
  printf("[%s] seed=%llu\n", what, (unsigned long long)seed);
  return seed;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
// Exact bf16 bits of a float that is a bf16 value (asserted).
static uint16_t bf(float f) {
  uint32_t u = f32_bits(f);
  cr_assert_eq(u & 0xFFFFu, 0u, "%a is not a bf16 value", (double)f);
  return (uint16_t)(u >> 16);
}

// ---- emulation of the kernels (ops/gemm/act_quant.cuh + common/numeric.cuh) -----------
// magnitude_bits_skip_nan / magnitude_bits_finite
static uint32_t emu_mag_skip_nan(float v) {
  uint32_t a = f32_bits(v) & 0x7FFFFFFFu;
  return a <= 0x7F800000u ? a : 0u;
}
static uint32_t emu_mag_finite(float v) {
  uint32_t a = f32_bits(v) & 0x7FFFFFFFu;
  return a < 0x7F800000u ? a : 0u;
}
// rne_shift_right / minifloat_magnitude<3, -6> / float_to_e4m3_sw
static uint32_t emu_rne_shift_right(uint32_t v, uint32_t s) {
  if (s == 0) return v;
  if (s >= 32) return 0;
  uint32_t q = v >> s, rem = v & ((1u << s) - 1u), half = 1u << (s - 1u);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}
static uint32_t emu_e4m3_magnitude(uint32_t abs_bits) {
  const int man_bits = 3, emin = -6;
  int exp_field = (int)(abs_bits >> 23);
  if (exp_field - 127 >= emin)
    return emu_rne_shift_right(abs_bits - ((uint32_t)(127 + emin - 1) << 23), (uint32_t)(23 - man_bits));
  uint32_t m24 = (abs_bits & 0x7FFFFFu) | (exp_field ? 0x800000u : 0u);
  int e = exp_field ? exp_field : 1;
  return emu_rne_shift_right(m24, (uint32_t)(150 - e - man_bits + emin));
}
static uint8_t emu_float_to_e4m3(float f) {
  uint32_t bits = f32_bits(f), a = bits & 0x7FFFFFFFu, sign = (bits >> 24) & 0x80u;
  if (a > 0x7F800000u) return 0x7F;
  if (a == 0x7F800000u) return (uint8_t)(sign | 0x7Eu);
  uint32_t code = emu_e4m3_magnitude(a);
  return (uint8_t)(sign | (code > 0x7Eu ? 0x7Eu : code));
}
// act_fp8_scale: amax (bits) > 0 ? div_rn(amax, 448) : 1
static float emu_act_scale(uint32_t amax_bits) {
  float amax = f32_from_bits(amax_bits);
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}
// act_fp8_quantize8, one element: float_to_e4m3(div_rn(v, s))
static uint8_t emu_act_code(float v, float s) { return emu_float_to_e4m3(v / s); }

static float bf16f(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

// act_quant_block_fp8: chunk c (8 elements) on thread c; 16 consecutive chunks (a half warp)
// share their amax through xor shuffles; the lane with c % 16 == 0 stores the scale at c / 16.
static void emu_block_fp8(const uint16_t* x, size_t M, size_t K, uint8_t* codes, float* scales) {
  const size_t chunks = M * K / 8;
  for (size_t g = 0; g < chunks / 16; ++g) {
    uint32_t lane_amax[16];
    for (int l = 0; l < 16; ++l) {
      lane_amax[l] = 0;
      for (int i = 0; i < 8; ++i) {
        uint32_t m = emu_mag_skip_nan(bf16f(x[(g * 16 + l) * 8 + i]));
        if (m > lane_amax[l]) lane_amax[l] = m;
      }
    }
    for (int off = 1; off < 16; off <<= 1) {  // butterfly, as the kernel
      uint32_t next[16];
      for (int l = 0; l < 16; ++l) next[l] = lane_amax[l] > lane_amax[l ^ off] ? lane_amax[l] : lane_amax[l ^ off];
      memcpy(lane_amax, next, sizeof next);
    }
    for (int l = 0; l < 16; ++l) {
      const float s = emu_act_scale(lane_amax[l]);
      const size_t c = g * 16 + (size_t)l;
      for (int i = 0; i < 8; ++i) codes[c * 8 + i] = emu_act_code(bf16f(x[c * 8 + i]), s);
      if ((c & 15) == 0) scales[c >> 4] = s;
    }
  }
}

// nvfp4_amax_partials<bf16> with grid P x 256 (chunk c on global thread c mod (P*256)), then
// act_quant_tensor_fp8: max of magnitude_bits_finite(partial), scale, codes.
static void emu_tensor_fp8(const uint16_t* x, size_t M, size_t K, int num_partials, uint8_t* codes,
                           float* scale) {
  const size_t chunks = M * K / 8, threads = (size_t)num_partials * 256;
  float* partials = calloc((size_t)num_partials, sizeof(float));
  uint32_t* pbits = calloc((size_t)num_partials, sizeof(uint32_t));
  for (size_t c = 0; c < chunks; ++c) {
    size_t cta = (c % threads) / 256;
    for (int i = 0; i < 8; ++i) {
      uint32_t m = emu_mag_finite(bf16f(x[c * 8 + i]));
      if (m > pbits[cta]) pbits[cta] = m;
    }
  }
  for (int b = 0; b < num_partials; ++b) partials[b] = f32_from_bits(pbits[b]);
  uint32_t amax = 0;
  for (int b = 0; b < num_partials; ++b) {
    uint32_t m = emu_mag_finite(partials[b]);
    if (m > amax) amax = m;
  }
  const float s = emu_act_scale(amax);
  *scale = s;
  for (size_t i = 0; i < M * K; ++i) codes[i] = emu_act_code(bf16f(x[i]), s);
  free(partials);
  free(pbits);
}

// ---- random inputs ---------------------------------------------------------------------------
typedef enum { KIND_NORMAL, KIND_OUTLIERS, KIND_FULL_RANGE, KIND_TINY, KIND_SPECIALS, KIND_COUNT } input_kind;
static const char* kind_name[] = {"normal", "outliers", "full_range", "tiny", "specials"};

static void random_input(input_kind kind, uint64_t* rng, uint16_t* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = skref_gemm_rand_u64(rng);
    double u = skref_gemm_rand_uniform(rng) * 2.0 - 1.0;
    float v;
    switch (kind) {
      case KIND_NORMAL: v = (float)(u * 3.0); break;
      case KIND_OUTLIERS: v = (float)(u * ((r & 63) == 0 ? 3000.0 : 0.5)); break;
      case KIND_FULL_RANGE: x[i] = (uint16_t)(r >> 16); continue;  // every bf16 bit pattern
      case KIND_TINY: v = (float)ldexp(u, -120 - (int)(r % 16)); break;  // bf16 subnormals too
      default: {
        static const uint16_t sp[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0000, 0x8000, 0x0001, 0x7F7F, 0xFF7F};
        if ((r & 7) == 0) { x[i] = sp[(r >> 3) % (sizeof sp / sizeof sp[0])]; continue; }
        v = (float)(u * 10.0);
      }
    }
    x[i] = gemm_tmp_float_to_bf16(v);
  }
}

// ---- block FP8 -------------------------------------------------------------------------------
// skref_gemm_quantize_block_fp8_rows takes its amax with fmaxf on every element, and glibc's
// fmaxf (IEEE maxNum) returns NaN for a *signalling* NaN operand (bf16 0x7F81..0x7FBF and
// 0xFF81..0xFFBF widen to fp32 sNaNs) when it is not inlined, after which the next fmaxf drops
// the NaN and with it the maximum so far: for such inputs that reference depends on the element
// order and the compiler flags. The kernel skips every NaN (magnitude_bits_skip_nan), which is
// what the reference does for quiet NaNs, so the comparison quiets signalling NaNs first.
// (The tensor-FP8 reference tests isfinite() before fmaxf and has no such issue.)
static void quiet_signalling_nans(uint16_t* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((x[i] & 0x7F80) == 0x7F80 && (x[i] & 0x7F)) x[i] |= 0x40;
}

Test(act_quant_ref, block_fp8_hand_worked) {
  // Row 0: block 0 amax 3.5 -> s = 3.5/448 = 2^-7 exactly; block 1 amax 1 -> s = RN(1/448).
  // Row 1: block 0 all +-0 -> s = 1; block 1 holds NaN (skipped by the amax) and 2^-3.
  enum { M = 2, K = 256 };
  uint16_t x[M * K];
  memset(x, 0, sizeof x);
  x[0] = bf(1.0f);        // 128 -> 0x70
  x[1] = bf(-0.5f);       // -64 -> 0xE8
  x[2] = bf(3.5f);        // 448 -> 0x7E
  x[3] = bf(0x1.48p-7f);  // 0.010009765625 * 128 = 1.28125 -> 1.25 (0x3A)
  x[4] = bf(0x1.1p-7f);   // 1.0625 * 128 / 128 = 1.0625 -> tie between 1 and 1.125 -> 1 (0x38)
  x[5] = bf(-3.0f);       // -384 -> 0xFC (exp 8+7, man 4)
  x[6] = bf(0x1p-16f);    // 2^-9 -> smallest subnormal 0x01
  x[7] = bf(0x1p-18f);    // 2^-11 -> 0 (below half the smallest subnormal)
  x[128] = bf(1.0f);      // 1 / RN(1/448) = 447.99997... -> 448 (0x7E)
  x[129] = bf(-0.5f);     // ~ -224 -> 0xF6 (exp 7+7, man 6)
  x[K + 5] = 0x8000;      // -0 keeps its sign: 0x80
  x[K + 128] = 0x7FC0;    // NaN -> 0x7F
  x[K + 129] = bf(0.125f);  // amax 0.125 -> s = 0.125/448, 0.125 / s -> 448
  uint8_t codes[M * K];
  float scales[M * 2];
  skref_gemm_quantize_block_fp8_rows(x, M, K, codes, scales);
  cr_assert_eq(scales[0], 0x1p-7f);
  cr_assert_eq(f32_bits(scales[1]), f32_bits(0x1.24924ap-9f), "s = %a", (double)scales[1]);
  cr_assert_eq(scales[2], 1.0f);
  cr_assert_eq(scales[3], 0.125f / 448.0f);
  const uint8_t want0[8] = {0x70, 0xE8, 0x7E, 0x3A, 0x38, 0xFC, 0x01, 0x00};
  for (int i = 0; i < 8; ++i) cr_assert_eq(codes[i], want0[i], "code %d = %02x", i, codes[i]);
  for (int i = 8; i < 128; ++i) cr_assert_eq(codes[i], 0);
  cr_assert_eq(codes[128], 0x7E);
  cr_assert_eq(codes[129], 0xF6);
  cr_assert_eq(codes[K + 5], 0x80);
  cr_assert_eq(codes[K + 4], 0x00);
  cr_assert_eq(codes[K + 128], 0x7F);
  cr_assert_eq(codes[K + 129], 0x7E);
  // Dequantized values: code * s reproduces the exactly representable inputs.
  cr_assert_eq(gemm_tmp_e4m3_decode(codes[0]) * scales[0], 1.0);
  cr_assert_eq(gemm_tmp_e4m3_decode(codes[5]) * scales[0], -3.0);
}

Test(act_quant_ref, block_fp8_inf_policy) {
  // A block with +-Inf: amax = Inf (only NaN is skipped), s = Inf, finite -> +-0, +-Inf -> NaN
  // (Inf / Inf). The GEMM then produces NaN for that block, which is the honest result.
  enum { K = 128 };
  uint16_t x[K];
  for (int i = 0; i < K; ++i) x[i] = bf(i % 2 ? -1.0f : 2.0f);
  x[7] = 0xFF80;  // -Inf
  uint8_t codes[K];
  float s;
  skref_gemm_quantize_block_fp8_rows(x, 1, K, codes, &s);
  cr_assert(isinf(s) && s > 0);
  cr_assert_eq(codes[0], 0x00);
  cr_assert_eq(codes[1], 0x80);
  cr_assert_eq(codes[7], 0x7F);
}

Test(act_quant_ref, block_fp8_outlier_stays_in_its_block) {
  enum { K = 512 };
  uint16_t x[K];
  for (int i = 0; i < K; ++i) x[i] = bf(0.25f);
  x[200] = bf(8192.0f);  // block 1 only
  uint8_t codes[K];
  float s[4];
  skref_gemm_quantize_block_fp8_rows(x, 1, K, codes, s);
  cr_assert_eq(s[0], 0.25f / 448.0f);
  cr_assert_eq(s[1], 8192.0f / 448.0f);
  cr_assert_eq(s[2], s[0]);
  cr_assert_eq(codes[0], 0x7E);
  cr_assert_eq(codes[200], 0x7E);
  // 0.25 / RN(8192/448) is just below 0.875 * 2^-6 = 7 * 2^-9 (below the least E4M3 normal
  // 2^-6): subnormal code 0x07.
  cr_assert_eq(codes[128], 0x07);
  cr_assert_eq(codes[384], 0x7E);
}

Test(act_quant_ref, block_fp8_reference_equals_kernel_emulation) {
  uint64_t rng = fresh_seed("block_fp8_emulation");
  const size_t shapes[][2] = {{1, 128}, {3, 256}, {7, 384}, {16, 1024}, {33, 640}};
  for (int kind = 0; kind < KIND_COUNT; ++kind)
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; ++t) {
      size_t M = shapes[t][0], K = shapes[t][1], n = M * K;
      uint16_t* x = malloc(n * 2);
      uint8_t *c_ref = malloc(n), *c_emu = malloc(n);
      float *s_ref = malloc(M * K / 128 * 4), *s_emu = malloc(M * K / 128 * 4);
      random_input((input_kind)kind, &rng, x, n);
      quiet_signalling_nans(x, n);
      skref_gemm_quantize_block_fp8_rows(x, M, K, c_ref, s_ref);
      emu_block_fp8(x, M, K, c_emu, s_emu);
      for (size_t b = 0; b < M * K / 128; ++b)
        cr_assert_eq(f32_bits(s_ref[b]), f32_bits(s_emu[b]), "%s %zux%zu block %zu: %a vs %a",
                     kind_name[kind], M, K, b, (double)s_ref[b], (double)s_emu[b]);
      for (size_t i = 0; i < n; ++i)
        cr_assert_eq(c_ref[i], c_emu[i], "%s %zux%zu element %zu (x=%04x): %02x vs %02x",
                     kind_name[kind], M, K, i, x[i], c_ref[i], c_emu[i]);
      free(x), free(c_ref), free(c_emu), free(s_ref), free(s_emu);
    }
}

// ---- tensor FP8 ------------------------------------------------------------------------------
Test(act_quant_ref, tensor_fp8_hand_worked) {
  // amax 7 (the -Inf and NaN do not count) -> s = 7/448 = 2^-6 exactly; codes = x * 64.
  enum { M = 2, K = 16 };
  uint16_t x[M * K];
  memset(x, 0, sizeof x);
  x[0] = bf(7.0f);        // 448 -> 0x7E
  x[1] = bf(-2.0f);       // -128 -> 0xF0
  x[2] = bf(0.5f);        // 32 -> 0x60
  x[3] = bf(0x1.1p-6f);   // 1.0625 -> tie -> 1.0 (0x38)
  x[4] = bf(0x1.3p-6f);   // 1.1875 -> tie between 1.125 and 1.25 -> 1.25 (even mantissa 2: 0x3A)
  x[5] = 0x8000;          // -0 -> 0x80
  x[K + 0] = 0xFF80;      // -Inf: skipped by the amax, saturates to -448 (0xFE)
  x[K + 1] = 0x7FC0;      // NaN -> 0x7F
  x[K + 2] = bf(-6.5f);   // -416 -> 0xFD (exp 8+7, man 5)
  x[K + 3] = bf(0x1p-15f);  // 2^-9 -> 0x01
  uint8_t codes[M * K];
  float s = 0;
  skref_gemm_quantize_tensor_fp8(x, M, K, codes, &s);
  cr_assert_eq(s, 0x1p-6f);
  const uint8_t want[] = {0x7E, 0xF0, 0x60, 0x38, 0x3A, 0x80};
  for (int i = 0; i < 6; ++i) cr_assert_eq(codes[i], want[i], "code %d = %02x", i, codes[i]);
  for (int i = 6; i < K; ++i) cr_assert_eq(codes[i], 0x00);
  cr_assert_eq(codes[K + 0], 0xFE);
  cr_assert_eq(codes[K + 1], 0x7F);
  cr_assert_eq(codes[K + 2], 0xFD);
  cr_assert_eq(codes[K + 3], 0x01);
}

Test(act_quant_ref, tensor_fp8_zero_and_nonfinite_tensors) {
  enum { K = 32 };
  uint16_t x[K];
  uint8_t codes[K];
  float s = 0;
  for (int i = 0; i < K; ++i) x[i] = i % 2 ? 0x8000 : 0x0000;
  skref_gemm_quantize_tensor_fp8(x, 1, K, codes, &s);
  cr_assert_eq(s, 1.0f);
  for (int i = 0; i < K; ++i) cr_assert_eq(codes[i], i % 2 ? 0x80 : 0x00);
  // Nothing finite and nonzero: scale 1, zeros stay zeros, Inf saturates, NaN -> 0x7F.
  static const uint16_t special_in[4] = {0x7F80, 0xFF80, 0x7FC0, 0x0000};
  static const uint8_t special_out[4] = {0x7E, 0xFE, 0x7F, 0x00};
  for (int i = 0; i < K; ++i) x[i] = special_in[i % 4];
  skref_gemm_quantize_tensor_fp8(x, 1, K, codes, &s);
  cr_assert_eq(s, 1.0f);
  for (int i = 0; i < K; ++i) cr_assert_eq(codes[i], special_out[i % 4]);
}

Test(act_quant_ref, tensor_fp8_outliers) {
  // One outlier sets the scale for everyone: 8192 -> s = RN(8192/448); 1.0 -> 0.0546875 =
  // 1.75 * 2^-5 (0x16), 2^-4 -> ~2^-8.19 -> subnormal 2 * 2^-9 (0x02), 2^-10 -> 0.
  enum { M = 4, K = 64 };
  uint16_t x[M * K];
  for (int i = 0; i < M * K; ++i) x[i] = bf(1.0f);
  x[77] = bf(-8192.0f);
  x[3] = bf(0x1p-4f);
  x[4] = bf(0x1p-10f);
  uint8_t codes[M * K];
  float s;
  skref_gemm_quantize_tensor_fp8(x, M, K, codes, &s);
  cr_assert_eq(f32_bits(s), f32_bits(8192.0f / 448.0f));
  cr_assert_eq(codes[77], 0xFE);
  cr_assert_eq(codes[0], 0x16);
  cr_assert_eq(codes[3], 0x02);
  cr_assert_eq(codes[4], 0x00);
  // A +Inf larger than the outlier changes nothing (finite-only amax); a NaN neither.
  x[100] = 0x7F80;
  x[101] = 0xFFC0;
  float s2;
  uint8_t codes2[M * K];
  skref_gemm_quantize_tensor_fp8(x, M, K, codes2, &s2);
  cr_assert_eq(f32_bits(s2), f32_bits(s));
  cr_assert_eq(codes2[100], 0x7E);
  cr_assert_eq(codes2[101], 0x7F);
  cr_assert_eq(memcmp(codes, codes2, 100), 0);
}

Test(act_quant_ref, tensor_fp8_subnormal_amax) {
  // bf16 amax 2^-133 (the least bf16 subnormal): s = RN(2^-133 / 448) is an fp32 subnormal;
  // x / s ~ 448.9 saturates to 448. No overflow, no NaN.
  enum { K = 16 };
  uint16_t x[K];
  memset(x, 0, sizeof x);
  x[0] = 0x0001;  // 2^-133
  x[1] = 0x8001;
  uint8_t codes[K];
  float s;
  skref_gemm_quantize_tensor_fp8(x, 1, K, codes, &s);
  cr_assert(s > 0 && s < 0x1p-126f, "s = %a", (double)s);
  cr_assert_eq(codes[0], 0x7E);
  cr_assert_eq(codes[1], 0xFE);
  cr_assert_eq(codes[2], 0x00);
}

Test(act_quant_ref, tensor_fp8_reference_equals_kernel_emulation) {
  uint64_t rng = fresh_seed("tensor_fp8_emulation");
  const size_t shapes[][2] = {{1, 16}, {1, 4096}, {3, 256}, {17, 1024}, {64, 2048}};
  const int partials[] = {1, 3, 264, 1024};
  for (int kind = 0; kind < KIND_COUNT; ++kind)
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; ++t) {
      size_t M = shapes[t][0], K = shapes[t][1], n = M * K;
      uint16_t* x = malloc(n * 2);
      uint8_t *c_ref = malloc(n), *c_emu = malloc(n);
      random_input((input_kind)kind, &rng, x, n);
      float s_ref;
      skref_gemm_quantize_tensor_fp8(x, M, K, c_ref, &s_ref);
      for (size_t p = 0; p < sizeof partials / sizeof partials[0]; ++p) {
        float s_emu;
        emu_tensor_fp8(x, M, K, partials[p], c_emu, &s_emu);
        cr_assert_eq(f32_bits(s_ref), f32_bits(s_emu), "%s %zux%zu P=%d: %a vs %a", kind_name[kind],
                     M, K, partials[p], (double)s_ref, (double)s_emu);
        for (size_t i = 0; i < n; ++i)
          cr_assert_eq(c_ref[i], c_emu[i], "%s %zux%zu P=%d element %zu (x=%04x): %02x vs %02x",
                       kind_name[kind], M, K, partials[p], i, x[i], c_ref[i], c_emu[i]);
      }
      free(x), free(c_ref), free(c_emu);
    }
}

// The per-element step alone, exhaustively over bf16 inputs for scales that exercise ties,
// subnormal quotients, saturation and a subnormal scale: the kernel's integer E4M3 rounding of
// an IEEE quotient equals the reference's nearest-value search.
Test(act_quant_ref, element_step_exhaustive_bf16) {
  const float scales[] = {1.0f, 0x1p-7f, 0x1.24924ap-9f, 8192.0f / 448.0f, 3.0f / 448.0f,
                          0x1p-133f / 448.0f, INFINITY};
  for (size_t j = 0; j < sizeof scales / sizeof scales[0]; ++j)
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      float v = bf16f((uint16_t)h), s = scales[j];
      uint8_t ref = gemm_tmp_float_to_e4m3(v / s), emu = emu_act_code(v, s);
      cr_assert_eq(ref, emu, "x=%04x s=%a: %02x vs %02x", h, (double)s, ref, emu);
    }
}
