/* skref quantizers: NVFP4 and MXFP8 row quantizers, scale layouts, dequantizers. See skref.h.
 * Every fp32 step below is one IEEE operation in the same order as the device kernels in
 * ops/quantization/, so results match them bit for bit. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "common/ref.h"

/* Upstream (b12x) computes 1/6 with rcp.approx.ftz.f32(6.0); the value it returns is the
 * correctly rounded 0x3E2AAAAB (read back on an H200, see ops/quantization/quantization.md). */
const float SKREF_NVFP4_RCP6 = 0x1.555556p-3f;
/* fp32(1/448), the constant upstream multiplies by (never a division). */
const float SKREF_MXFP8_INV_E4M3_MAX = 0x1.24924ap-9f;

/* ---- swizzled scale layout ------------------------------------------------------------------- */
size_t skref_swizzled_k_tiles(size_t num_scale_cols) { return (num_scale_cols + 3) / 4; }

size_t skref_swizzled_scale_offset(size_t m, size_t kcol, size_t num_k_tiles) {
  return (m / 128) * num_k_tiles * 512 + (kcol / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 +
         kcol % 4;
}

size_t skref_swizzled_scale_bytes(size_t M, size_t num_scale_cols) {
  return (M + 127) / 128 * 128 * skref_swizzled_k_tiles(num_scale_cols) * 4;
}

/* ---- helpers --------------------------------------------------------------------------------- */
/* max |x| over the non-NaN values (0 if none), compared as integers on the magnitude bits: no
 * dependence on how a libm fmaxf treats signalling NaNs. */
static float block_amax(const float *x, size_t n) {
  uint32_t amax = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t a = skref_f32_bits(x[i]) & 0x7FFFFFFFu;
    if (a <= 0x7F800000u && a > amax) amax = a;
  }
  return skref_f32_from_bits(amax);
}

static void store_scale(uint8_t *swizzled, uint8_t *rows, size_t m, size_t kcol, size_t cols,
                        uint8_t scale) {
  if (rows) rows[m * cols + kcol] = scale;
  if (swizzled)
    swizzled[skref_swizzled_scale_offset(m, kcol, skref_swizzled_k_tiles(cols))] = scale;
}

static int bad_args(const uint16_t *x, size_t M, size_t K, size_t ld_x, size_t block,
                    const uint8_t *values) {
  return !x || !values || M == 0 || K == 0 || K % block != 0 || ld_x < K;
}

/* ---- NVFP4 ----------------------------------------------------------------------------------- */
float skref_nvfp4_tensor_amax(const uint16_t *x, skref_dtype dtype, size_t M, size_t K,
                              size_t ld_x) {
  uint32_t amax = 0;
  for (size_t m = 0; m < M; m++)
    for (size_t k = 0; k < K; k++) {
      uint32_t a = skref_f32_bits(skref_half_to_float(x[m * ld_x + k], dtype)) & 0x7FFFFFFFu;
      if (a < 0x7F800000u && a > amax) amax = a; /* skips NaN and Inf */
    }
  return skref_f32_from_bits(amax);
}

float skref_nvfp4_global_scale_from_amax(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  return fminf(2688.0f / amax, FLT_MAX); /* 448 * 6; a tiny amax would overflow to Inf */
}

float skref_nvfp4_global_scale(const uint16_t *x, skref_dtype dtype, size_t M, size_t K,
                               size_t ld_x) {
  return skref_nvfp4_global_scale_from_amax(skref_nvfp4_tensor_amax(x, dtype, M, K, ld_x));
}

uint8_t skref_nvfp4_quantize_block(const float x[16], float global_scale, uint8_t packed[8]) {
  memset(packed, 0, 8);
  if (global_scale == 0.0f) return 0;
  float amax = block_amax(x, 16);
  float scale_f = fminf(global_scale * (amax * SKREF_NVFP4_RCP6), 448.0f);
  uint8_t scale = skref_e4m3_encode(scale_f);
  if (scale == 0) return 0;
  float global_recip = 1.0f / global_scale;
  float denom = (float)skref_e4m3_decode(scale) * global_recip;
  float eff = 1.0f / denom;
  if (eff == 0.0f) return scale;
  for (int i = 0; i < 16; i++) {
    uint8_t code = skref_e2m1_encode(x[i] * eff);
    if (code == 0x8) code = 0; /* a value rounded to zero is stored as +0 */
    packed[i / 2] |= (uint8_t)(code << (4 * (i & 1)));
  }
  return scale;
}

int skref_quantize_nvfp4(const uint16_t *x, skref_dtype dtype, size_t M, size_t K, size_t ld_x,
                         const float *global_scale_in, float *global_scale_out, uint8_t *values,
                         uint8_t *scales_swizzled, uint8_t *scales_rows) {
  if (bad_args(x, M, K, ld_x, SKREF_NVFP4_BLOCK, values)) return -1;
  size_t cols = K / SKREF_NVFP4_BLOCK;
  float gs = global_scale_in ? *global_scale_in : skref_nvfp4_global_scale(x, dtype, M, K, ld_x);
  if (global_scale_out) *global_scale_out = gs;
  if (scales_swizzled) memset(scales_swizzled, 0, skref_swizzled_scale_bytes(M, cols));
  for (size_t m = 0; m < M; m++)
    for (size_t b = 0; b < cols; b++) {
      float v[16];
      for (int i = 0; i < 16; i++)
        v[i] = skref_half_to_float(x[m * ld_x + b * 16 + (size_t)i], dtype);
      uint8_t scale = skref_nvfp4_quantize_block(v, gs, values + m * (K / 2) + b * 8);
      store_scale(scales_swizzled, scales_rows, m, b, cols, scale);
    }
  return 0;
}

static uint8_t load_scale(const uint8_t *scales, int swizzled, size_t m, size_t kcol, size_t cols) {
  return swizzled ? scales[skref_swizzled_scale_offset(m, kcol, skref_swizzled_k_tiles(cols))]
                  : scales[m * cols + kcol];
}

void skref_dequantize_nvfp4(const uint8_t *values, const uint8_t *scales, int swizzled, size_t M,
                            size_t K, float global_scale, double *out) {
  size_t cols = K / SKREF_NVFP4_BLOCK;
  for (size_t m = 0; m < M; m++)
    for (size_t k = 0; k < K; k++) {
      uint8_t byte = values[m * (K / 2) + k / 2];
      double v = skref_e2m1_decode((uint8_t)(k & 1 ? byte >> 4 : byte & 0xF));
      double s = skref_e4m3_decode(load_scale(scales, swizzled, m, k / 16, cols));
      out[m * K + k] = v * s / (double)global_scale;
    }
}

/* ---- MXFP8 ----------------------------------------------------------------------------------- */
uint8_t skref_mxfp8_quantize_block(const float x[32], uint8_t values[32]) {
  float amax = block_amax(x, 32);
  uint8_t scale = amax == 0.0f ? 127 : skref_e8m0_ceil_pow2(amax * SKREF_MXFP8_INV_E4M3_MAX);
  float inv = skref_e8m0_reciprocal(scale);
  for (int i = 0; i < 32; i++) values[i] = skref_e4m3_encode(x[i] * inv);
  return scale;
}

int skref_quantize_mxfp8(const uint16_t *x, skref_dtype dtype, size_t M, size_t K, size_t ld_x,
                         uint8_t *values, uint8_t *scales_swizzled, uint8_t *scales_rows) {
  if (bad_args(x, M, K, ld_x, SKREF_MXFP8_BLOCK, values)) return -1;
  size_t cols = K / SKREF_MXFP8_BLOCK;
  if (scales_swizzled) memset(scales_swizzled, 0, skref_swizzled_scale_bytes(M, cols));
  for (size_t m = 0; m < M; m++)
    for (size_t b = 0; b < cols; b++) {
      float v[32];
      for (int i = 0; i < 32; i++)
        v[i] = skref_half_to_float(x[m * ld_x + b * 32 + (size_t)i], dtype);
      uint8_t scale = skref_mxfp8_quantize_block(v, values + m * K + b * 32);
      store_scale(scales_swizzled, scales_rows, m, b, cols, scale);
    }
  return 0;
}

void skref_dequantize_mxfp8(const uint8_t *values, const uint8_t *scales, int swizzled, size_t M,
                            size_t K, double *out) {
  size_t cols = K / SKREF_MXFP8_BLOCK;
  for (size_t m = 0; m < M; m++)
    for (size_t k = 0; k < K; k++)
      out[m * K + k] = skref_e4m3_decode(values[m * K + k]) *
                       skref_e8m0_decode(load_scale(scales, swizzled, m, k / 32, cols));
}
