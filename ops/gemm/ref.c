// CPU double-precision reference for the GEMM family; see gemm.h and ops/gemm/gemm.md.
#include "gemm/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- temporary decoders (swap for tests/ref/skref.h when it lands) ------------------------

double gemm_tmp_e2m1_decode(uint8_t nibble) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  double v = mag[nibble & 7];
  return (nibble & 8) ? -v : v;
}

double gemm_tmp_e4m3_decode(uint8_t code) {
  int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  if (exp == 15 && man == 7) return NAN;
  double v = exp == 0 ? ldexp((double)man, -9) : ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -v : v;
}

double gemm_tmp_e8m0_decode(uint8_t code) { return code == 0xFF ? NAN : ldexp(1.0, (int)code - 127); }

float gemm_tmp_bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t gemm_tmp_float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);                                            // RN-even
  return (uint16_t)(u >> 16);
}

uint8_t gemm_tmp_float_to_e4m3(float f) {
  // Exhaustive nearest search over the 127 finite magnitudes; ties to even code (even mantissa).
  if (isnan(f)) return 0x7F;
  uint8_t sign = signbit(f) ? 0x80 : 0;
  double a = fabs((double)f);
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double best_err = a;
  for (int c = 1; c <= 0x7E; ++c) {
    double err = fabs(gemm_tmp_e4m3_decode((uint8_t)c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_err = err;
    }
  }
  return sign | (uint8_t)best;
}

// ---- layouts -------------------------------------------------------------------------------

const char* skref_gemm_recipe_name(skref_gemm_recipe r) {
  static const char* names[] = {"nvfp4", "mxfp4", "mxfp8", "block_fp8", "tensor_fp8"};
  return (unsigned)r < 5 ? names[r] : "?";
}

int skref_gemm_is_fp4(skref_gemm_recipe r) { return r == SKREF_GEMM_NVFP4 || r == SKREF_GEMM_MXFP4; }

size_t skref_gemm_scale_vec(skref_gemm_recipe r) {
  switch (r) {
    case SKREF_GEMM_NVFP4: return 16;
    case SKREF_GEMM_MXFP4:
    case SKREF_GEMM_MXFP8: return 32;
    case SKREF_GEMM_BLOCK_FP8: return 128;
    default: return 0;
  }
}

size_t skref_gemm_code_bytes(skref_gemm_recipe r, size_t rows, size_t k) {
  return skref_gemm_is_fp4(r) ? rows * (k / 2) : rows * k;
}

static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

size_t skref_gemm_scale_bytes(skref_gemm_recipe r, skref_gemm_side side, size_t rows, size_t k) {
  switch (r) {
    case SKREF_GEMM_NVFP4:
    case SKREF_GEMM_MXFP4:
    case SKREF_GEMM_MXFP8:
      return cdiv(rows, 128) * 128 * cdiv(k / skref_gemm_scale_vec(r), 4) * 4;
    case SKREF_GEMM_BLOCK_FP8:
      return (side == SKREF_GEMM_A ? rows : cdiv(rows, 128)) * cdiv(k, 128) * sizeof(float);
    default: return 0;
  }
}

size_t skref_gemm_swizzled_offset(size_t row, size_t scale_col, size_t k_scales) {
  size_t num_k_tiles = cdiv(k_scales, 4);
  return (row / 128) * num_k_tiles * 512 + (scale_col / 4) * 512 + (row % 32) * 16 +
         ((row % 128) / 32) * 4 + (scale_col % 4);
}

// ---- dequantization + product --------------------------------------------------------------

static double code_value(skref_gemm_recipe r, const uint8_t* codes, size_t k, size_t row, size_t kk) {
  if (skref_gemm_is_fp4(r)) {
    uint8_t byte = codes[row * (k / 2) + kk / 2];
    return gemm_tmp_e2m1_decode((kk & 1) ? (byte >> 4) : (byte & 15));
  }
  return gemm_tmp_e4m3_decode(codes[row * k + kk]);
}

static double scale_value(const skref_gemm_operand* op, size_t row, size_t kk) {
  const skref_gemm_recipe r = op->recipe;
  if (r == SKREF_GEMM_TENSOR_FP8) return 1.0;
  if (r == SKREF_GEMM_BLOCK_FP8) {
    const float* s = (const float*)op->scales;
    size_t kb = cdiv(op->k, 128);
    size_t srow = op->side == SKREF_GEMM_A ? row : row / 128;
    return (double)s[srow * kb + kk / 128];
  }
  size_t vec = skref_gemm_scale_vec(r);
  uint8_t code = ((const uint8_t*)op->scales)[skref_gemm_swizzled_offset(row, kk / vec, op->k / vec)];
  return r == SKREF_GEMM_NVFP4 ? gemm_tmp_e4m3_decode(code & 0x7F) : gemm_tmp_e8m0_decode(code);
}

double skref_gemm_dequant(const skref_gemm_operand* op, size_t r, size_t kk) {
  return code_value(op->recipe, op->codes, op->k, r, kk) * scale_value(op, r, kk);
}

void skref_gemm_dequant_all(const skref_gemm_operand* op, double* out) {
  for (size_t r = 0; r < op->rows; ++r)
    for (size_t kk = 0; kk < op->k; ++kk) out[r * op->k + kk] = skref_gemm_dequant(op, r, kk);
}

void skref_gemm(const skref_gemm_operand* a, const skref_gemm_operand* b, double alpha, double* c,
                double* abs_out) {
  const size_t M = a->rows, N = b->rows, K = a->k;
  double* da = malloc(sizeof(double) * M * K);
  double* db = malloc(sizeof(double) * N * K);
  skref_gemm_dequant_all(a, da);
  skref_gemm_dequant_all(b, db);
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      double s = 0, s_abs = 0;
      const double* x = da + m * K;
      const double* w = db + n * K;
      for (size_t kk = 0; kk < K; ++kk) {
        s += x[kk] * w[kk];
        s_abs += fabs(x[kk] * w[kk]);
      }
      c[m * N + n] = alpha * s;
      if (abs_out) abs_out[m * N + n] = fabs(alpha) * s_abs;
    }
  free(da);
  free(db);
}

// ---- outputs -------------------------------------------------------------------------------

static double round_to_bits(double v, int mantissa_bits, int min_exp) {
  // RN-even to a binary format with `mantissa_bits` fraction bits and normal exponent >= min_exp
  // (gradual underflow below). Overflow is not modelled (tests stay in range).
  if (v == 0 || !isfinite(v)) return v;
  int e;
  frexp(v, &e);  // v = f * 2^e, 0.5 <= |f| < 1 -> unit exponent e-1
  int unit = e - 1;
  if (unit < min_exp) unit = min_exp;
  double q = ldexp(1.0, unit - mantissa_bits);
  return nearbyint(v / q) * q;  // default rounding mode: to nearest even
}

double skref_gemm_round_out(skref_gemm_out t, double v) {
  switch (t) {
    case SKREF_GEMM_OUT_BF16: return round_to_bits(v, 7, -126);
    case SKREF_GEMM_OUT_FP16: return round_to_bits(v, 10, -14);
    default: return (double)(float)v;
  }
}

static double fp16_decode(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v = exp == 0 ? ldexp((double)man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexp(1.0 + man / 1024.0, exp - 15);
  return sign ? -v : v;
}

double skref_gemm_load_out(skref_gemm_out t, const void* c, size_t i) {
  switch (t) {
    case SKREF_GEMM_OUT_BF16: return gemm_tmp_bf16_to_float(((const uint16_t*)c)[i]);
    case SKREF_GEMM_OUT_FP16: return fp16_decode(((const uint16_t*)c)[i]);
    default: return ((const float*)c)[i];
  }
}

size_t skref_gemm_out_bytes(skref_gemm_out t) { return t == SKREF_GEMM_OUT_FP32 ? 4 : 2; }

double skref_gemm_tolerance(skref_gemm_out t, double ref, double abs_sum, size_t k) {
  // FP32 accumulation: a rigorous sequential-sum bound (k+8) * 2^-24 * sum|a*b|, plus one
  // rounding of the output type (a full ulp: the FP32 value may already sit off the midpoint).
  double acc = abs_sum * ((double)k + 8.0) * ldexp(1.0, -24);
  double out_rel = t == SKREF_GEMM_OUT_BF16 ? ldexp(1.0, -8) : t == SKREF_GEMM_OUT_FP16 ? ldexp(1.0, -11) : ldexp(1.0, -23);
  double out_abs = t == SKREF_GEMM_OUT_FP16 ? ldexp(1.0, -24) : 0.0;
  return acc + fabs(ref) * out_rel + out_abs + 1e-30;
}

// ---- random operands -----------------------------------------------------------------------

uint64_t skref_gemm_rand_u64(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double skref_gemm_rand_uniform(uint64_t* s) { return (double)(skref_gemm_rand_u64(s) >> 11) * 0x1.0p-53; }

static uint8_t random_e4m3_code(uint64_t* rng) {
  for (;;) {
    uint8_t c = (uint8_t)skref_gemm_rand_u64(rng);
    if ((c & 0x7F) != 0x7F) return c;  // any finite code, subnormals included
  }
}

void skref_gemm_random_operand(skref_gemm_recipe r, skref_gemm_side side, size_t rows, size_t k,
                               uint64_t* rng, uint8_t* codes, void* scales) {
  size_t nbytes = skref_gemm_code_bytes(r, rows, k);
  for (size_t i = 0; i < nbytes; ++i)
    codes[i] = skref_gemm_is_fp4(r) ? (uint8_t)skref_gemm_rand_u64(rng) : random_e4m3_code(rng);
  if (r == SKREF_GEMM_TENSOR_FP8) return;
  if (r == SKREF_GEMM_BLOCK_FP8) {
    float* s = (float*)scales;
    size_t n = skref_gemm_scale_bytes(r, side, rows, k) / sizeof(float);
    for (size_t i = 0; i < n; ++i)
      s[i] = (float)ldexp(1.0 + skref_gemm_rand_uniform(rng), (int)(skref_gemm_rand_u64(rng) % 13) - 10);
    return;
  }
  uint8_t* s = (uint8_t*)scales;
  size_t vec = skref_gemm_scale_vec(r), ks = k / vec;
  const uint8_t one = r == SKREF_GEMM_NVFP4 ? 0x38 : 0x7F;
  memset(s, one, skref_gemm_scale_bytes(r, side, rows, k));
  for (size_t row = 0; row < rows; ++row)
    for (size_t c = 0; c < ks; ++c) {
      uint8_t code;
      if (r == SKREF_GEMM_NVFP4)
        code = (uint8_t)(0x08 + skref_gemm_rand_u64(rng) % (0x7E - 0x08 + 1));  // normal UE4M3
      else
        code = (uint8_t)(127 - 12 + skref_gemm_rand_u64(rng) % 17);  // 2^-12 .. 2^4
      s[skref_gemm_swizzled_offset(row, c, ks)] = code;
    }
}

// ---- activation quantizers -----------------------------------------------------------------

void skref_gemm_quantize_mxfp8_rows(const uint16_t* x, size_t rows, size_t k, uint8_t* codes,
                                    uint8_t* scales) {
  size_t ks = k / 32;
  memset(scales, 0x7F, skref_gemm_scale_bytes(SKREF_GEMM_MXFP8, SKREF_GEMM_A, rows, k));
  for (size_t r = 0; r < rows; ++r)
    for (size_t b = 0; b < ks; ++b) {
      float amax = 0;
      for (size_t i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(gemm_tmp_bf16_to_float(x[r * k + b * 32 + i])));
      int e = 0;
      if (amax > 0) {
        e = (int)ceil(log2((double)(amax / 448.0f)));
        e = e < -127 ? -127 : e > 127 ? 127 : e;
      }
      scales[skref_gemm_swizzled_offset(r, b, ks)] = (uint8_t)(e + 127);
      for (size_t i = 0; i < 32; ++i) {
        float v = gemm_tmp_bf16_to_float(x[r * k + b * 32 + i]);
        codes[r * k + b * 32 + i] = gemm_tmp_float_to_e4m3((float)ldexp(v, -e));
      }
    }
}

void skref_gemm_quantize_block_fp8_rows(const uint16_t* x, size_t rows, size_t k, uint8_t* codes,
                                        float* scales) {
  size_t kb = k / 128;
  for (size_t r = 0; r < rows; ++r)
    for (size_t b = 0; b < kb; ++b) {
      float amax = 0;
      for (size_t i = 0; i < 128; ++i) {
        /* Skip NaN explicitly: glibc's fmaxf lets a signalling NaN through when not inlined,
         * which would make the amax depend on element order and compiler flags. */
        const float v = fabsf(gemm_tmp_bf16_to_float(x[r * k + b * 128 + i]));
        if (!isnan(v)) amax = fmaxf(amax, v);
      }
      float s = amax > 0 ? amax / 448.0f : 1.0f;
      scales[r * kb + b] = s;
      for (size_t i = 0; i < 128; ++i)
        codes[r * k + b * 128 + i] = gemm_tmp_float_to_e4m3(gemm_tmp_bf16_to_float(x[r * k + b * 128 + i]) / s);
    }
}

void skref_gemm_quantize_tensor_fp8(const uint16_t* x, size_t rows, size_t k, uint8_t* codes,
                                    float* scale) {
  const size_t n = rows * k;
  float amax = 0;
  for (size_t i = 0; i < n; ++i) {
    float v = gemm_tmp_bf16_to_float(x[i]);
    if (isfinite(v)) amax = fmaxf(amax, fabsf(v));
  }
  const float s = amax > 0 ? amax / 448.0f : 1.0f;
  *scale = s;
  for (size_t i = 0; i < n; ++i) codes[i] = gemm_tmp_float_to_e4m3(gemm_tmp_bf16_to_float(x[i]) / s);
}

// ---- pack_weight ---------------------------------------------------------------------------

size_t skref_gemm_padded_k(size_t k) { return cdiv(k, 128) * 128; }

void skref_gemm_pack_weight(skref_gemm_recipe r, size_t rows, size_t k, const uint8_t* codes,
                            const void* scales, uint8_t* pc, void* ps) {
  const size_t kp = skref_gemm_padded_k(k);
  const size_t row_in = skref_gemm_code_bytes(r, 1, k), row_out = skref_gemm_code_bytes(r, 1, kp);
  for (size_t i = 0; i < rows; ++i) {
    memcpy(pc + i * row_out, codes + i * row_in, row_in);
    memset(pc + i * row_out + row_in, 0, row_out - row_in);
  }
  if (r == SKREF_GEMM_TENSOR_FP8) return;
  if (r == SKREF_GEMM_BLOCK_FP8) {
    size_t rb = cdiv(rows, 128), kb_in = cdiv(k, 128), kb_out = kp / 128;  // == kb_in
    for (size_t i = 0; i < rb; ++i)
      memcpy((float*)ps + i * kb_out, (const float*)scales + i * kb_in, kb_out * sizeof(float));
    return;
  }
  const size_t vec = skref_gemm_scale_vec(r), ks_in = k / vec, ks_out = kp / vec;
  memset(ps, r == SKREF_GEMM_NVFP4 ? 0x38 : 0x7F, skref_gemm_scale_bytes(r, SKREF_GEMM_B, rows, kp));
  for (size_t i = 0; i < rows; ++i)
    for (size_t c = 0; c < ks_in; ++c)
      ((uint8_t*)ps)[skref_gemm_swizzled_offset(i, c, ks_out)] =
          ((const uint8_t*)scales)[skref_gemm_swizzled_offset(i, c, ks_in)];
}
