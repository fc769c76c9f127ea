// Low-precision number formats for sparkinfer kernels: exact conversions between fp32 and
// E2M1 (FP4), E4M3 (FP8), E8M0 (MX scale), BF16 and FP16, plus the IEEE fp32 arithmetic the
// quantizers need to be bit-reproducible.
//
// Every conversion has a portable software path (integer code, SK_HOST_DEVICE so it can also be
// checked on the host) and, where the target has one, a hardware path:
//   cvt.rn.satfinite.e4m3x2.f32  sm_89 and newer                (SK_HAS_CVT_E4M3X2)
//   cvt.rn.satfinite.e2m1x2.f32  arch- or family-specific sm_100a..sm_12xa / sm_1xxf targets
//                                (__CUDA_ARCH_FAMILY_SPECIFIC__ in [1000, 1300): sm_120a,
//                                sm_121a, sm_120f, sm_121f, sm_100a, ...)  (SK_HAS_CVT_E2M1X2)
// Both paths give identical bits (tests/test_quant_emulation.c, ops/quantization/quantization.md):
//   round to nearest, ties to even; finite and infinite magnitudes beyond the largest finite
//   code saturate to it with the input's sign ("satfinite"); a result of zero keeps the input's
//   sign; NaN becomes E4M3 0x7F, and E2M1 0x7 (+6: PTX converts NaN to positive MAX_NORM for
//   formats without NaN).
// The CPU reference of every function here is in tests/ref/skref.h (same names, skref_ prefix).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/defs.cuh"
#include "common/e2m1_fast.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define SK_HAS_CVT_E4M3X2 1
#else
#define SK_HAS_CVT_E4M3X2 0
#endif

#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000 && \
    __CUDA_ARCH_FAMILY_SPECIFIC__ < 1300
#define SK_HAS_CVT_E2M1X2 1
#else
#define SK_HAS_CVT_E2M1X2 0
#endif

namespace sk {

// Template switch for kernels: kCvtHardware uses a cvt instruction where the target arch has
// it and falls back to software where it does not (so every instantiation compiles for every
// arch, with the same results).
enum Conversion : int { kCvtSoftware = 0, kCvtHardware = 1 };

// ---- fp32 bits and IEEE arithmetic ---------------------------------------------------------
SK_HOST_DEVICE u32 f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  u32 u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SK_HOST_DEVICE float f32_from_bits(u32 u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Single IEEE operations that the compiler may neither fuse, reorder nor flush to zero,
// whatever -ftz / -prec-div / --use_fast_math say: the quantizers' bits depend on them.
SK_HOST_DEVICE float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a * b;
#endif
}

SK_HOST_DEVICE float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a / b;
#endif
}

// max/min that return the other operand when one is NaN (PTX max.f32 / C fmaxf).
SK_HOST_DEVICE float max_f32(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return __builtin_fmaxf(a, b);
#endif
}

SK_HOST_DEVICE float min_f32(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("min.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return __builtin_fminf(a, b);
#endif
}

SK_HOST_DEVICE float abs_f32(float a) { return f32_from_bits(f32_bits(a) & 0x7FFFFFFFu); }
// The same through abs.f32, which ptxas folds into the consuming instruction's |operand|.
SK_HOST_DEVICE float fabs_f32(float a) {
#ifdef __CUDA_ARCH__
  float r;
  asm("abs.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
#else
  return __builtin_fabsf(a);
#endif
}

// Block maxima are taken on the magnitude bits as unsigned integers (same order as the
// non-negative floats they encode): exact, and independent of how a max instruction treats
// quiet or signalling NaNs.
// |v| as bits, or 0 for NaN (Inf kept): the block amax skips NaN.
SK_HOST_DEVICE u32 magnitude_bits_skip_nan(float v) {
  const u32 a = f32_bits(v) & 0x7FFFFFFFu;
  return a <= 0x7F800000u ? a : 0u;
}
// |v| as bits, or 0 for NaN and +-Inf: the tensor amax of the NVFP4 global scale.
SK_HOST_DEVICE u32 magnitude_bits_finite(float v) {
  const u32 a = f32_bits(v) & 0x7FFFFFFFu;
  return a < 0x7F800000u ? a : 0u;
}

// ---- rounding core (software path) -------------------------------------------------------
// v >> s, rounded to nearest, ties to even.
SK_HOST_DEVICE u32 rne_shift_right(u32 v, u32 s) {
  if (s == 0) return v;
  if (s >= 32) return 0;  // callers pass v < 2^31: below half an ulp
  u32 q = v >> s, rem = v & ((1u << s) - 1u), half = 1u << (s - 1u);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// Round a finite fp32 magnitude (bits, sign clear) to a binary format with MAN_BITS mantissa
// bits and least normal exponent EMIN; returns the unsaturated magnitude code.
template <int MAN_BITS, int EMIN>
SK_HOST_DEVICE u32 minifloat_magnitude(u32 abs_bits) {
  int exp_field = int(abs_bits >> 23);
  if (exp_field - 127 >= EMIN)  // normal in the target: drop bits, the carry bumps the exponent
    return rne_shift_right(abs_bits - (u32(127 + EMIN - 1) << 23), u32(23 - MAN_BITS));
  // subnormal in the target: value = m24 * 2^(e - 150), code = value * 2^(MAN_BITS - EMIN)
  u32 m24 = (abs_bits & 0x7FFFFFu) | (exp_field ? 0x800000u : 0u);
  int e = exp_field ? exp_field : 1;
  return rne_shift_right(m24, u32(150 - e - MAN_BITS + EMIN));
}

// ---- E2M1 ----------------------------------------------------------------------------------
// Decode the low 4 bits: magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}, bit 3 is the sign.
SK_HOST_DEVICE float e2m1_to_float(u8 nibble) {
  u32 e = (nibble >> 1) & 3u, m = nibble & 1u;
  // e == 0: m * 0.5; else (1 + m/2) * 2^(e-1): fp32 exponent e + 126, mantissa bit 22 = m
  u32 mag = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3F000000u : 0u);
  return f32_from_bits(mag | (u32(nibble & 8u) << 28));
}

// RNE by comparison with the midpoints (ties go to the even code: 0.25->0, 0.75->1.0,
// 1.25->1.0, 1.75->2.0, 2.5->2.0, 3.5->4.0, 5.0->4.0); >5 and Inf saturate to 6.
SK_HOST_DEVICE u8 float_to_e2m1_sw(float f) {
  u32 bits = f32_bits(f), a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7;  // NaN -> +6
  float m = f32_from_bits(a);
  u32 code = u32(m > 0.25f) + u32(m >= 0.75f) + u32(m > 1.25f) + u32(m >= 1.75f) + u32(m > 2.5f) +
             u32(m >= 3.5f) + u32(m > 5.0f);
  return u8(code | ((bits >> 28) & 8u));
}

// Hardware pair: `hi` goes to bits 7..4, `lo` to bits 3..0 (PTX operand order: d[7:4] = a).
SK_DEVICE u8 cvt_e2m1x2_hw(float hi, float lo) {
#if SK_HAS_CVT_E2M1X2
  u16 r;
  asm("{\n\t.reg .b8 t;\n\tcvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\n\tcvt.u16.u8 %0, t;\n\t}"
      : "=h"(r)
      : "f"(hi), "f"(lo));
  return u8(r);
#else
  return u8(float_to_e2m1_sw(lo) | (float_to_e2m1_sw(hi) << 4));
#endif
}

// Element 2j (`even`) in the low nibble, element 2j+1 (`odd`) in the high nibble: the order
// of PyTorch's float4_e2m1fn_x2, CUTLASS and cuBLASLt.
template <int CVT>
SK_DEVICE u8 pack_e2m1x2(float even, float odd) {
  if constexpr (CVT == kCvtHardware && SK_HAS_CVT_E2M1X2)
    return cvt_e2m1x2_hw(odd, even);
  else
    return u8(float_to_e2m1_sw(even) | (float_to_e2m1_sw(odd) << 4));
}

// Eight values -> 32 bits, v[i] in bits 4i+3..4i.
template <int CVT>
SK_DEVICE u32 pack_e2m1x8(const float (&v)[8]) {
  u32 r = 0;
#pragma unroll
  for (int j = 0; j < 4; j++) r |= u32(pack_e2m1x2<CVT>(v[2 * j], v[2 * j + 1])) << (8 * j);
  return r;
}

// Replace -0 codes (0x8) by +0 in eight packed E2M1 codes.
SK_HOST_DEVICE u32 e2m1x8_clear_negative_zeros(u32 packed) {
  u32 mag = packed & 0x77777777u;
  u32 nonzero = (mag | (mag >> 1) | (mag >> 2)) & 0x11111111u;
  return packed & (0x77777777u | (nonzero << 3));
}

// ---- E4M3 ----------------------------------------------------------------------------------
// Exact decode; 0x7F / 0xFF give NaN.
SK_HOST_DEVICE float e4m3_to_float(u8 code) {
  u32 sign = u32(code & 0x80u) << 24, e = (code >> 3) & 15u, m = code & 7u;
  if (e == 15 && m == 7) return f32_from_bits(0x7FFFFFFFu);
  if (e == 0) return f32_from_bits(sign | f32_bits(mul_rn(float(m), 0x1p-9f)));  // exact
  return f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

SK_HOST_DEVICE u8 float_to_e4m3_sw(float f) {
  u32 bits = f32_bits(f), a = bits & 0x7FFFFFFFu, sign = (bits >> 24) & 0x80u;
  if (a > 0x7F800000u) return 0x7F;
  if (a == 0x7F800000u) return u8(sign | 0x7Eu);
  u32 code = minifloat_magnitude<3, -6>(a);
  return u8(sign | (code > 0x7Eu ? 0x7Eu : code));
}

// Hardware pair: `hi` in bits 15..8, `lo` in bits 7..0.
SK_DEVICE u16 cvt_e4m3x2_hw(float hi, float lo) {
#if SK_HAS_CVT_E4M3X2
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return u16(float_to_e4m3_sw(lo) | (u32(float_to_e4m3_sw(hi)) << 8));
#endif
}

template <int CVT>
SK_DEVICE u8 float_to_e4m3(float f) {
  if constexpr (CVT == kCvtHardware && SK_HAS_CVT_E4M3X2)
    return u8(cvt_e4m3x2_hw(0.0f, f));
  else
    return float_to_e4m3_sw(f);
}

// The same code in bits 7..0 of a u32 whose other bits are 0, with no masking instruction on the
// hardware path: the pair's other value is +0, whose code is 0x00.
template <int CVT>
SK_DEVICE u32 float_to_e4m3_u32(float f) {
  if constexpr (CVT == kCvtHardware && SK_HAS_CVT_E4M3X2) {
    u32 r;
    asm("{\n\t.reg .b16 t, z;\n\tmov.b16 z, 0;\n\tcvt.rn.satfinite.e4m3x2.f32 t, %1, %2;\n\tmov.b32 %0, {t, z};\n\t}"
        : "=r"(r)
        : "f"(0.0f), "f"(f));
    return r;
  } else
    return u32(float_to_e4m3_sw(f));
}

// Four values -> 32 bits, v[i] in byte i (memory order on a little-endian store).
template <int CVT>
SK_DEVICE u32 pack_e4m3x4(float v0, float v1, float v2, float v3) {
  if constexpr (CVT == kCvtHardware && SK_HAS_CVT_E4M3X2) {
    return u32(cvt_e4m3x2_hw(v1, v0)) | (u32(cvt_e4m3x2_hw(v3, v2)) << 16);
  } else {
    return u32(float_to_e4m3_sw(v0)) | (u32(float_to_e4m3_sw(v1)) << 8) |
           (u32(float_to_e4m3_sw(v2)) << 16) | (u32(float_to_e4m3_sw(v3)) << 24);
  }
}

// ---- E8M0 ----------------------------------------------------------------------------------
// 2^(code-127); code 0 is the subnormal 2^-127, 0xFF is NaN.
SK_HOST_DEVICE float e8m0_to_float(u8 code) {
  if (code == 0xFF) return f32_from_bits(0x7FFFFFFFu);
  return f32_from_bits(code ? u32(code) << 23 : 0x00400000u);
}

// Exponent byte of the least power of two >= s, for s >= 0 (integer ceiling on the fp32 bits,
// exact, no log2): bump the exponent when any mantissa bit is set. +Inf gives 0xFF (E8M0 NaN);
// subnormal s gives 1; 0 gives 0.
SK_HOST_DEVICE u8 e8m0_ceil_pow2(float s) {
  u32 bits = f32_bits(s);
  if (bits & 0x7FFFFFu) bits = (bits + 0x800000u) & 0x7F800000u;
  return u8((bits >> 23) & 0xFFu);
}

// 1 / 2^(code-127) = 2^(127-code) as fp32: exact for codes 0..254; 0 for the NaN code 0xFF.
SK_HOST_DEVICE float e8m0_reciprocal(u8 code) {
  if (code == 0xFF) return 0.0f;
  if (code == 0xFE) return f32_from_bits(0x00400000u);  // 2^-127, subnormal
  return f32_from_bits(u32(254 - code) << 23);
}

// ---- BF16 / FP16 ---------------------------------------------------------------------------
SK_HOST_DEVICE float bf16_bits_to_float(u16 b) { return f32_from_bits(u32(b) << 16); }

// Exact. NaN payloads are widened in software; the device path (cvt.f32.f16) may return a
// canonical NaN instead, which no quantizer result depends on.
SK_HOST_DEVICE float fp16_bits_to_float_sw(u16 h) {
  u32 sign = u32(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) return f32_from_bits(sign | f32_bits(mul_rn(float(m), 0x1p-24f)));
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

SK_HOST_DEVICE float fp16_bits_to_float(u16 h) {
#ifdef __CUDA_ARCH__
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return fp16_bits_to_float_sw(h);
#endif
}

// The E4M3 pair in half HALF of w (bytes 2*HALF, 2*HALF+1; lower byte -> lower f16) -> f16x2,
// exact: every E4M3 value, subnormals included, is an FP16 value. One F2FP per pair on sm_90; HALF
// 1 reads the .H1 operand in place. sm_89+ (SK_HAS_CVT_E4M3X2): its callers target that.
template <int HALF>
SK_DEVICE u32 e4m3x2_to_f16x2(u32 w) {
  u32 r;
  if (HALF == 0) asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\t}" : "=r"(r) : "r"(w));
  else asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, hi;\n\t}" : "=r"(r) : "r"(w));
  return r;
}

// e4m3_to_float through cvt.rn.f16x2.e4m3x2 where the target has it (sm_89+): every E4M3 value,
// subnormals included, is an FP16 value, and FP16 -> fp32 is exact, so the bits are those of
// e4m3_to_float (NaN stays a NaN). Two conversions instead of the branchy integer decode.
template <int CVT>
SK_DEVICE float e4m3_to_float_cvt(u8 code) {
  if constexpr (CVT == kCvtHardware && SK_HAS_CVT_E4M3X2) {
    // the low half holds the low byte's value
    return fp16_bits_to_float(u16(e4m3x2_to_f16x2<0>(code) & 0xFFFFu));
  } else {
    return e4m3_to_float(code);
  }
}

// RNE; overflow gives +-Inf; NaN gives 0x7FFF (the canonical NaN of cvt.rn.bf16.f32).
SK_HOST_DEVICE u16 float_to_bf16_bits_sw(float f) {
  u32 u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  return u16((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// RNE; overflow gives +-Inf; NaN gives 0x7FFF (the canonical NaN of cvt.rn.f16.f32).
SK_HOST_DEVICE u16 float_to_fp16_bits_sw(float f) {
  u32 u = f32_bits(f), a = u & 0x7FFFFFFFu;
  u16 sign = u16((u >> 16) & 0x8000u);
  if (a > 0x7F800000u) return 0x7FFF;
  if (a == 0x7F800000u) return u16(sign | 0x7C00u);
  u32 code = minifloat_magnitude<10, -14>(a);
  return u16(sign | (code > 0x7C00u ? 0x7C00u : code));
}

template <int CVT>
SK_DEVICE u16 float_to_bf16_bits(float f) {
  if constexpr (CVT == kCvtHardware) {
    u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
  } else {
    return float_to_bf16_bits_sw(f);
  }
}

template <int CVT>
SK_DEVICE u16 float_to_fp16_bits(float f) {
  if constexpr (CVT == kCvtHardware) {
    u16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
  } else {
    return float_to_fp16_bits_sw(f);
  }
}

// ---- 16-bit input element types --------------------------------------------------------------
template <typename T>
struct HalfType;
template <>
struct HalfType<__nv_bfloat16> {
  static constexpr bool kIsBf16 = true;
  static SK_DEVICE float to_float(u16 bits) { return bf16_bits_to_float(bits); }
};
template <>
struct HalfType<__half> {
  static constexpr bool kIsBf16 = false;
  static SK_DEVICE float to_float(u16 bits) { return fp16_bits_to_float(bits); }
};

// Eight consecutive 16-bit elements (one 16-byte load) widened to fp32, exactly.
template <typename T>
SK_DEVICE void widen8(const uint4& raw, float (&v)[8]) {
  const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[2 * i] = HalfType<T>::to_float(u16(words[i] & 0xFFFFu));
    v[2 * i + 1] = HalfType<T>::to_float(u16(words[i] >> 16));
  }
}

}  // namespace sk
