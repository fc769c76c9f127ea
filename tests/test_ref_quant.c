/* CPU reference quantizers (NVFP4, MXFP8) and scale layouts: hand-worked blocks, NaN/Inf
 * policy, layout bijection and padding, exact scale rules, error bounds on random data. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ref.h"

static uint16_t bf(float f) { return skref_float_to_bf16(f); }

static void assert_bytes(const uint8_t *got, const uint8_t *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(got[i], want[i], "%s: byte %zu is %02x, expected %02x", what, i, got[i], want[i]);
}

/* ---- swizzled layout ----------------------------------------------------------------------------
 */
Test(layout, swizzled_offsets_by_hand) {
  cr_assert_eq(skref_swizzled_scale_offset(0, 0, 1), 0);
  cr_assert_eq(skref_swizzled_scale_offset(0, 1, 1), 1);
  cr_assert_eq(skref_swizzled_scale_offset(1, 0, 1), 16);
  cr_assert_eq(skref_swizzled_scale_offset(32, 0, 1), 4);
  cr_assert_eq(skref_swizzled_scale_offset(96, 3, 1), 15);
  cr_assert_eq(skref_swizzled_scale_offset(127, 3, 1), 31 * 16 + 3 * 4 + 3);
  cr_assert_eq(skref_swizzled_scale_offset(0, 4, 2), 512);
  cr_assert_eq(skref_swizzled_scale_offset(128, 0, 2), 1024);
  cr_assert_eq(skref_swizzled_scale_offset(130, 5, 3), 1 * 3 * 512 + 1 * 512 + 2 * 16 + 1);
  cr_assert_eq(skref_swizzled_k_tiles(1), 1);
  cr_assert_eq(skref_swizzled_k_tiles(4), 1);
  cr_assert_eq(skref_swizzled_k_tiles(5), 2);
  cr_assert_eq(skref_swizzled_scale_bytes(1, 1), 512);
  cr_assert_eq(skref_swizzled_scale_bytes(129, 5), 256 * 8);
  cr_assert_eq(skref_swizzled_scale_bytes(256, 1024), 256 * 1024);
}

Test(layout, swizzled_is_a_bijection_on_the_padded_matrix) {
  static const size_t shapes[][2] = {{128, 4}, {256, 12}, {1, 1}, {130, 5}, {384, 7}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    size_t rows = (shapes[s][0] + 127) / 128 * 128, cols = (shapes[s][1] + 3) / 4 * 4;
    size_t bytes = skref_swizzled_scale_bytes(shapes[s][0], shapes[s][1]);
    cr_assert_eq(bytes, rows * cols);
    unsigned char *seen = calloc(bytes, 1);
    for (size_t m = 0; m < rows; m++)
      for (size_t k = 0; k < cols; k++) {
        size_t off = skref_swizzled_scale_offset(m, k, skref_swizzled_k_tiles(shapes[s][1]));
        cr_assert(off < bytes && !seen[off], "offset %zu of (%zu,%zu) out of range or repeated",
                  off, m, k);
        seen[off] = 1;
      }
    free(seen);
  }
}

/* ---- NVFP4: hand-worked blocks
 * -------------------------------------------------------------------- */
/* gs = 1 and a block amax of 6: sf = 6 * fp32(1/6) rounds to exactly 1.0, scale 0x38, eff = 1,
 * so every code is e2m1(x) and all ties are visible. */
Test(nvfp4, hand_block_every_code) {
  static const float x[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  static const uint8_t want[8] = {0x10, 0x32, 0x54, 0x76, 0x90, 0xBA, 0xDC, 0xFE};
  uint16_t in[16];
  for (int i = 0; i < 16; i++) in[i] = bf(x[i]);
  uint8_t values[8], rows[1];
  float gs = 1.0f, gs_out = 0;
  cr_assert_eq(skref_quantize_nvfp4(in, SKREF_BF16, 1, 16, 16, &gs, &gs_out, values, NULL, rows),
               0);
  cr_assert_eq(rows[0], 0x38);
  cr_assert_eq(gs_out, 1.0f);
  assert_bytes(values, want, 8, "every code (-0 stored as +0)");
}

Test(nvfp4, hand_block_ties_and_saturation) {
  /* bf16 of -0.1 is -0.10009765625 (-> -0 -> +0), of 0.3 is 0.30078125 (-> 0.5) */
  static const float x[16] = {6,     2.5f, 0.75f, 0.25f, 5,  -1.25f, 3.5f, 1.75f,
                              -0.1f, 0.3f, -5.5f, 2.75f, -3, 4.5f,   0.5f, 1};
  /* codes 7 4 2 0 6 A 6 4 0 1 F 5 D 6 1 2, element 2j in the low nibble */
  static const uint8_t want[8] = {0x47, 0x02, 0xA6, 0x46, 0x10, 0x5F, 0x6D, 0x21};
  uint16_t in[16];
  for (int i = 0; i < 16; i++) in[i] = bf(x[i]);
  uint8_t values[8], rows[1];
  float gs = 1.0f;
  skref_quantize_nvfp4(in, SKREF_BF16, 1, 16, 16, &gs, NULL, values, NULL, rows);
  cr_assert_eq(rows[0], 0x38);
  assert_bytes(values, want, 8, "ties to even, saturation, -0");
}

/* amax 5, gs 1: sf = 5 * fp32(1/6) = 0.8333334 -> e4m3 0.8125 (0x35); eff = fp32(1/0.8125). */
Test(nvfp4, hand_block_rounded_scale) {
  static const float x[16] = {5, 1, -2.203125f, 0.5f, 0.40625f, -0.40625f, 4, 0,
                              0, 0, 0,          0,    0,        0,         0, 0};
  /* q = x / 0.8125: 6.15->6 (7), 1.23->1 (2), -2.71->-3 (D), 0.615->0.5 (1), 0.5 (1), -0.5 (9),
   * 4.92->4 (6), 0 */
  static const uint8_t want[8] = {0x27, 0x1D, 0x91, 0x06, 0, 0, 0, 0};
  uint16_t in[16];
  for (int i = 0; i < 16; i++) in[i] = bf(x[i]);
  uint8_t values[8], rows[1];
  float gs = 1.0f;
  skref_quantize_nvfp4(in, SKREF_BF16, 1, 16, 16, &gs, NULL, values, NULL, rows);
  cr_assert_eq(rows[0], 0x35);
  assert_bytes(values, want, 8, "rounded block scale");
}

/* Computed global scale on [2, 16]: tensor amax 6 -> gs = 2688/6 = 448. Row 0 (amax 6):
 * sf = 448, scale 0x7E, eff = 1 / (448 * fp32(1/448)) = 1. Row 1 (amax 3): sf = 448 * 0.5 =
 * 224 (0x76), eff = 1 / (224 * fp32(1/448)) = 2. */
Test(nvfp4, hand_computed_global_scale) {
  static const float x[2][16] = {
      {6, 2.5f, 0.75f, 0.25f, 5, -1.25f, 3.5f, 1.75f, -0.1f, 0.3f, -5.5f, 2.75f, -3, 4.5f, 0.5f, 1},
      {3, -1.5f, 0.2f, 1.1f, -2.9f, 0.6f, 1.25f, -0.375f, 0, 0, 0, 0, 0, 0, 0, 0}};
  /* row 1: bf16(0.2)=0.2002, bf16(1.1)=1.1016, bf16(-2.9)=-2.9062, bf16(0.6)=0.6016; q = 2x:
   * 6 (7), -3 (D), 0.4 (1), 2.2 (4), -5.8 (F), 1.2 (2), 2.5 tie (4), -0.75 tie (A) */
  static const uint8_t want[16] = {0x47, 0x02, 0xA6, 0x46, 0x10, 0x5F, 0x6D, 0x21,
                                   0xD7, 0x41, 0x2F, 0xA4, 0,    0,    0,    0};
  uint16_t in[32];
  for (int i = 0; i < 32; i++) in[i] = bf(x[i / 16][i % 16]);
  uint8_t values[16], rows[2], swz[512];
  float gs_out = 0;
  cr_assert_eq(skref_nvfp4_global_scale(in, SKREF_BF16, 2, 16, 16), 448.0f);
  skref_quantize_nvfp4(in, SKREF_BF16, 2, 16, 16, NULL, &gs_out, values, swz, rows);
  cr_assert_eq(gs_out, 448.0f);
  cr_assert_eq(rows[0], 0x7E);
  cr_assert_eq(rows[1], 0x76);
  cr_assert_eq(swz[0], 0x7E);
  cr_assert_eq(swz[16], 0x76);
  assert_bytes(values, want, 16, "computed global scale");
}

/* NaN is skipped by the block amax and becomes +6 (0x7); Inf saturates the block scale to 448
 * and itself to +-6; the global scale ignores both. */
Test(nvfp4, nan_and_inf_policy) {
  uint16_t in[16] = {0};
  in[0] = 0x7FC0; /* NaN */
  in[1] = bf(1.0f);
  in[2] = 0xFF80; /* -Inf */
  in[3] = bf(2.0f);
  in[4] = 0xFFC1; /* negative NaN */
  uint8_t values[8], rows[1];
  float gs = 1.0f;
  skref_quantize_nvfp4(in, SKREF_BF16, 1, 16, 16, &gs, NULL, values, NULL, rows);
  cr_assert_eq(rows[0], 0x7E, "Inf block amax saturates the scale");
  /* eff = fp32(1/448): 1 and 2 round to 0; NaN -> 0x7, -Inf -> 0xF */
  static const uint8_t want[8] = {0x07, 0x0F, 0x07, 0, 0, 0, 0, 0};
  assert_bytes(values, want, 8, "NaN/Inf block");
  cr_assert_eq(skref_nvfp4_tensor_amax(in, SKREF_BF16, 1, 16, 16), 2.0f, "finite amax only");
  cr_assert_eq(skref_nvfp4_global_scale(in, SKREF_BF16, 1, 16, 16), 1344.0f);

  /* NaN next to finite values: the scale comes from the finite ones */
  uint16_t in2[16];
  for (int i = 0; i < 16; i++) in2[i] = bf(i == 5 ? 0 : 6.0f - 0.25f * i);
  in2[5] = 0xFFC0;
  uint8_t v2[8], s2[1];
  skref_quantize_nvfp4(in2, SKREF_BF16, 1, 16, 16, &gs, NULL, v2, NULL, s2);
  cr_assert_eq(s2[0], 0x38);
  cr_assert_eq(v2[2] >> 4, 0x7, "NaN element -> +6");
}

Test(nvfp4, zero_blocks_and_zero_global_scale) {
  uint16_t in[32] = {0};
  in[16] = 0x8000;                              /* -0 */
  for (int i = 17; i < 32; i++) in[i] = 0x7FC0; /* all NaN but -0 */
  uint8_t values[16], rows[2];
  memset(values, 0xAA, sizeof values);
  float gs_out = 0;
  skref_quantize_nvfp4(in, SKREF_BF16, 1, 32, 32, NULL, &gs_out, values, NULL, rows);
  cr_assert_eq(gs_out, 1.0f, "no finite nonzero value: gs = 1");
  cr_assert_eq(rows[0], 0);
  cr_assert_eq(rows[1], 0, "amax of an all-NaN block is 0");
  for (int i = 0; i < 16; i++) cr_assert_eq(values[i], 0, "zero scale: all codes 0 (NaN too)");

  /* gs = 0 given: every scale and code is 0 */
  uint16_t ones[16];
  for (int i = 0; i < 16; i++) ones[i] = bf((float)i - 7.5f);
  float zero = 0.0f;
  skref_quantize_nvfp4(ones, SKREF_BF16, 1, 16, 16, &zero, NULL, values, NULL, rows);
  cr_assert_eq(rows[0], 0);
  for (int i = 0; i < 8; i++) cr_assert_eq(values[i], 0);
}

Test(nvfp4, rejects_bad_shapes) {
  uint16_t x[64] = {0};
  uint8_t v[32];
  cr_assert_eq(skref_quantize_nvfp4(x, SKREF_BF16, 1, 24, 24, NULL, NULL, v, NULL, NULL), -1);
  cr_assert_eq(skref_quantize_nvfp4(x, SKREF_BF16, 0, 16, 16, NULL, NULL, v, NULL, NULL), -1);
  cr_assert_eq(skref_quantize_nvfp4(x, SKREF_BF16, 2, 32, 16, NULL, NULL, v, NULL, NULL), -1);
  cr_assert_eq(skref_quantize_mxfp8(x, SKREF_BF16, 1, 48, 48, v, NULL, NULL), -1);
}

/* ---- MXFP8: hand-worked blocks
 * ------------------------------------------------------------------- */
static uint8_t mx_block(const float *x, uint8_t values[32]) {
  uint16_t in[32];
  for (int i = 0; i < 32; i++) in[i] = bf(x[i]);
  uint8_t rows[1];
  cr_assert_eq(skref_quantize_mxfp8(in, SKREF_BF16, 1, 32, 32, values, NULL, rows), 0);
  return rows[0];
}

Test(mxfp8, hand_blocks) {
  uint8_t v[32];
  /* amax 448: 448 * fp32(1/448) rounds to exactly 1.0 -> scale 127, values = e4m3(x) */
  float a[32] = {448, -1, 0.5f, 3, 240, 232, -0x1p-9f, 0x1p-10f};
  cr_assert_eq(mx_block(a, v), 127);
  static const uint8_t want_a[8] = {0x7E, 0xB8, 0x30, 0x44, 0x77, 0x76, 0x81, 0x00};
  assert_bytes(v, want_a, 8, "amax 448");
  for (int i = 8; i < 32; i++) cr_assert_eq(v[i], 0);
  /* amax 450: ceil(450/448) -> 2 (128); x/2: 225 -> 224 (0x76), -150 -> -144 (0xF1) */
  float b[32] = {450, -300, 1};
  cr_assert_eq(mx_block(b, v), 128);
  static const uint8_t want_b[3] = {0x76, 0xF1, 0x30};
  assert_bytes(v, want_b, 3, "amax 450");
  /* amax 1: 1/448 -> 2^-8 (119); x*256: 256 (0x78), -192 (0xF4), bf16(0.001)*256 = 0.2559 -> 0.25
   */
  float c[32] = {1, -0.75f, 0.001f};
  cr_assert_eq(mx_block(c, v), 119);
  static const uint8_t want_c[3] = {0x78, 0xF4, 0x28};
  assert_bytes(v, want_c, 3, "amax 1");
}

Test(mxfp8, zero_nan_inf_policy) {
  uint8_t v[32];
  float zeros[32] = {0};
  zeros[3] = -0.0f;
  cr_assert_eq(mx_block(zeros, v), 127, "all-zero block gets 127");
  for (int i = 0; i < 32; i++) cr_assert_eq(v[i], i == 3 ? 0x80 : 0x00, "-0 keeps its sign");

  uint16_t in[32];
  uint8_t rows[1];
  for (int i = 0; i < 32; i++) in[i] = i & 1 ? 0xFFC0 : 0x7FC0;
  skref_quantize_mxfp8(in, SKREF_BF16, 1, 32, 32, v, NULL, rows);
  cr_assert_eq(rows[0], 127, "all-NaN block: amax 0 -> 127");
  for (int i = 0; i < 32; i++) cr_assert_eq(v[i], 0x7F);

  /* NaN among finite values: scale from the finite ones, NaN -> 0x7F */
  for (int i = 0; i < 32; i++) in[i] = bf(i == 7 ? 0 : 1.0f);
  in[7] = 0xFFC0;
  skref_quantize_mxfp8(in, SKREF_BF16, 1, 32, 32, v, NULL, rows);
  cr_assert_eq(rows[0], 119);
  cr_assert_eq(v[7], 0x7F);
  cr_assert_eq(v[0], 0x78);

  /* Inf: scale 0xFF (E8M0 NaN, the block dequantizes to NaN); reciprocal 0 gives +-0 for finite
   * values and 0x7F for Inf/NaN */
  for (int i = 0; i < 32; i++) in[i] = bf(i & 1 ? -3.0f : 2.0f);
  in[4] = 0x7F80;
  in[6] = 0x7FC0;
  skref_quantize_mxfp8(in, SKREF_BF16, 1, 32, 32, v, NULL, rows);
  cr_assert_eq(rows[0], 0xFF);
  cr_assert_eq(v[0], 0x00);
  cr_assert_eq(v[1], 0x80);
  cr_assert_eq(v[4], 0x7F);
  cr_assert_eq(v[6], 0x7F);
  double out[32];
  skref_dequantize_mxfp8(v, rows, 0, 1, 32, out);
  for (int i = 0; i < 32; i++) cr_assert(isnan(out[i]));
}

/* Least k with 448 * 2^k >= amax, exactly, in double. */
static int exact_mx_exponent(double amax) {
  int k = -140;
  while (ldexp(448.0, k) < amax) k++;
  return k;
}

/* The fp32 rule (amax * fp32(1/448), integer ceiling) equals 2^ceil(log2(amax/448)) for every
 * fp16 amax and every bf16 amax whose product stays normal in fp32 (>= 2^-117); below that the
 * fp32 product is subnormal and loses bits, and the rule can differ by one (counted, printed). */
Test(mxfp8, scale_rule_is_exact_ceil_log2) {
  unsigned fp16_diff = 0, bf16_diff = 0, bf16_tiny_diff = 0;
  for (uint32_t h = 1; h < 0x7C00; h++) {
    float a = skref_fp16_to_float((uint16_t)h);
    fp16_diff += skref_e8m0_ceil_pow2(a * SKREF_MXFP8_INV_E4M3_MAX) != 127 + exact_mx_exponent(a);
  }
  for (uint32_t h = 1; h < 0x7F80; h++) {
    float a = skref_bf16_to_float((uint16_t)h);
    int differs = skref_e8m0_ceil_pow2(a * SKREF_MXFP8_INV_E4M3_MAX) != 127 + exact_mx_exponent(a);
    if (a >= 0x1p-117f)
      bf16_diff += differs;
    else
      bf16_tiny_diff += differs;
  }
  fprintf(stderr, "mxfp8 scale rule vs exact ceil(log2): bf16 amax < 2^-117 differs for %u codes\n",
          bf16_tiny_diff);
  cr_assert_eq(fp16_diff, 0);
  cr_assert_eq(bf16_diff, 0);
}

/* ---- random tensors: layouts, padding, strides, error bounds
 * --------------------------------------- */
typedef struct {
  size_t M, K;
} shape;

static const shape nvfp4_shapes[] = {{1, 16},   {1, 4096},  {3, 48},  {37, 80},
                                     {128, 64}, {130, 272}, {257, 16}};
static const shape mxfp8_shapes[] = {{1, 32},   {1, 4096},  {5, 96},
                                     {37, 160}, {128, 128}, {131, 544}};

static uint16_t *random_tensor(skref_rng *rng, size_t M, size_t ld, skref_dtype dt, int specials) {
  uint16_t *x = malloc(M * ld * sizeof *x);
  skref_fill_normal(rng, x, M * ld, dt, 1.0f, 0.01, 64.0f);
  if (specials) skref_sprinkle_specials(rng, x, M * ld, dt, 0.002);
  return x;
}

Test(nvfp4, layouts_padding_strides_on_random_tensors) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("nvfp4.layouts"));
  for (size_t s = 0; s < sizeof nvfp4_shapes / sizeof nvfp4_shapes[0]; s++)
    for (int d = 0; d < 2; d++) {
      size_t M = nvfp4_shapes[s].M, K = nvfp4_shapes[s].K, cols = K / 16, ld = K + 8 * (s & 1);
      skref_dtype dt = (skref_dtype)d;
      uint16_t *x = random_tensor(&rng, M, ld, dt, 1);
      size_t swz_bytes = skref_swizzled_scale_bytes(M, cols);
      uint8_t *values = malloc(M * K / 2), *values2 = malloc(M * K / 2), *swz = malloc(swz_bytes),
              *rows = malloc(M * cols);
      memset(swz, 0xAA, swz_bytes); /* padding must come back as zeros */
      float gs = 0;
      cr_assert_eq(skref_quantize_nvfp4(x, dt, M, K, ld, NULL, &gs, values, swz, rows), 0);
      for (size_t m = 0; m < (M + 127) / 128 * 128; m++)
        for (size_t k = 0; k < (cols + 3) / 4 * 4; k++) {
          uint8_t b = swz[skref_swizzled_scale_offset(m, k, skref_swizzled_k_tiles(cols))];
          if (m < M && k < cols)
            cr_assert_eq(b, rows[m * cols + k], "(%zu,%zu)", m, k);
          else
            cr_assert_eq(b, 0, "padding (%zu,%zu) of %zux%zu", m, k, M, cols);
        }
      /* the computed scale fed back as a given scale gives the same bits; the block holding the
       * tensor amax gets (about) the largest scale */
      cr_assert_eq(skref_quantize_nvfp4(x, dt, M, K, ld, &gs, NULL, values2, NULL, NULL), 0);
      cr_assert_eq(memcmp(values, values2, M * K / 2), 0);
      uint8_t max_scale = 0;
      for (size_t i = 0; i < M * cols; i++) max_scale = rows[i] > max_scale ? rows[i] : max_scale;
      cr_assert(max_scale >= 0x7D && max_scale <= 0x7E, "max block scale %02x", max_scale);
      /* strided input equals its contiguous copy */
      uint16_t *dense = malloc(M * K * sizeof *dense);
      for (size_t m = 0; m < M; m++) memcpy(dense + m * K, x + m * ld, K * sizeof *dense);
      cr_assert_eq(skref_quantize_nvfp4(dense, dt, M, K, K, &gs, NULL, values2, NULL, NULL), 0);
      cr_assert_eq(memcmp(values, values2, M * K / 2), 0);
      free(dense), free(x), free(values), free(values2), free(swz), free(rows);
    }
}

/* Error bound per element: |x - deq| <= half the largest e2m1 step (1 unit, between 4 and 6) of
 * the block's dequantization unit s/gs, where s >= amax*gs/6 up to e4m3 rounding (2^-4). */
Test(nvfp4, dequantized_error_is_bounded) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("nvfp4.error"));
  size_t M = 19, K = 512, cols = K / 16;
  for (int d = 0; d < 2; d++) {
    skref_dtype dt = (skref_dtype)d;
    uint16_t *x = random_tensor(&rng, M, K, dt, 0);
    uint8_t *values = malloc(M * K / 2), *rows = malloc(M * cols);
    double *out = malloc(M * K * sizeof *out);
    float gs;
    skref_quantize_nvfp4(x, dt, M, K, K, NULL, &gs, values, NULL, rows);
    skref_dequantize_nvfp4(values, rows, 0, M, K, gs, out);
    double worst = 0;
    for (size_t m = 0; m < M; m++)
      for (size_t b = 0; b < cols; b++) {
        double unit = skref_e4m3_decode(rows[m * cols + b]) / gs, amax = 0;
        for (size_t i = 0; i < 16; i++)
          amax = fmax(amax, fabs(skref_half_to_float(x[m * K + b * 16 + i], dt)));
        for (size_t i = 0; i < 16; i++) {
          size_t k = b * 16 + i;
          double err = fabs(skref_half_to_float(x[m * K + k], dt) - out[m * K + k]);
          cr_assert(err <= unit * 1.0 + amax * 0x1p-4, "(%zu,%zu): err %g, unit %g", m, k, err,
                    unit);
          worst = fmax(worst, err / amax);
        }
      }
    cr_assert(worst > 0.01, "quantization should not be exact on random data (worst %g)", worst);
    free(x), free(values), free(rows), free(out);
  }
}

Test(mxfp8, layouts_padding_strides_and_error_on_random_tensors) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed("mxfp8.random"));
  for (size_t s = 0; s < sizeof mxfp8_shapes / sizeof mxfp8_shapes[0]; s++)
    for (int d = 0; d < 2; d++) {
      size_t M = mxfp8_shapes[s].M, K = mxfp8_shapes[s].K, cols = K / 32, ld = K + 16 * (s & 1);
      skref_dtype dt = (skref_dtype)d;
      uint16_t *x = random_tensor(&rng, M, ld, dt, s > 2);
      if (s == 0) skref_fill_wide_range(&rng, x, M * ld, dt);
      size_t swz_bytes = skref_swizzled_scale_bytes(M, cols);
      uint8_t *values = malloc(M * K), *swz = malloc(swz_bytes), *rows = malloc(M * cols);
      memset(swz, 0x55, swz_bytes);
      cr_assert_eq(skref_quantize_mxfp8(x, dt, M, K, ld, values, swz, rows), 0);
      for (size_t m = 0; m < (M + 127) / 128 * 128; m++)
        for (size_t k = 0; k < (cols + 3) / 4 * 4; k++) {
          uint8_t b = swz[skref_swizzled_scale_offset(m, k, skref_swizzled_k_tiles(cols))];
          if (m < M && k < cols)
            cr_assert_eq(b, rows[m * cols + k]);
          else
            cr_assert_eq(b, 0, "padding (%zu,%zu)", m, k);
        }
      double *out = malloc(M * K * sizeof *out);
      skref_dequantize_mxfp8(values, swz, 1, M, K, out);
      for (size_t m = 0; m < M; m++)
        for (size_t b = 0; b < cols; b++) {
          double scale = skref_e8m0_decode(rows[m * cols + b]);
          for (size_t i = 0; i < 32; i++) {
            size_t k = b * 32 + i;
            double xv = skref_half_to_float(x[m * ld + k], dt);
            if (isnan(scale)) continue; /* a block with Inf */
            if (isnan(xv)) {
              cr_assert_eq(values[m * K + k], 0x7F);
              continue;
            }
            /* relative 2^-4 (3 mantissa bits, RNE) or absolute half of the least subnormal */
            double tol = fmax(fabs(xv) * 0x1p-4, scale * 0x1p-10);
            cr_assert(fabs(xv - out[m * K + k]) <= tol, "shape %zu dtype %d (%zu,%zu): %g -> %g", s,
                      d, m, k, xv, out[m * K + k]);
          }
        }
      free(x), free(values), free(swz), free(rows), free(out);
    }
}
