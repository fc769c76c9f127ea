// Wire codecs of comm.pcie, in one place that the kernels (comm/*.cuh), the C reference
// (comm/codec.c) and the CPU tests include: plain C11 as well as CUDA C++17. Every value the
// codecs produce comes from integer operations on fp32 bits and single IEEE fp32 operations
// rounded to nearest even (__fmul_rn / __fdiv_rn / __fadd_rn on the device: no contraction, no
// approximate division), so the device encodes and decodes bit for bit as the C reference does.
// The rules (ops/comm/comm.md, Codecs):
//
//   block: 128 values x (fp32: bf16 inputs are exact in fp32; partial sums are fp32)
//   special block: some x is Inf or NaN            -> every code 0, scale NaN (decodes to NaN)
//                  amax < 2^-64 (zeros, subnormals) -> every code 0, scale 0   (decodes to +0)
//   E4M3:  scale = amax / 448 (one ulp less if 448 * scale would be Inf), inv = 448 / amax, code_i = e4m3_rn_satfinite(x_i * inv)
//   INT8:  scale = amax / 127, inv = 127 / amax, code_i = clamp(rint_even(x_i * inv), -127, 127)
//   MXFP8: per 32 values: s = amax == 0 ? 127 : e8m0_ceil_pow2(amax * fp32(1/448)),
//          code_i = e4m3(x_i * 2^(127-s)); a group holding Inf/NaN gets s = 0xFF and codes 0
//          (the MX rule, as quantization.mxfp8: a group below 2^-64 is not special)
//   decode: value_i = decode(code_i) * scale (fp32 multiply; exact for MXFP8, whose range ends
//          near 2^128: |x| >= 2^127 * 1.9375 rounds to 2^128 and decodes to Inf, as the format has it)
//   BF16:  bf16_rn(x) (NaN -> 0x7FFF, as cvt.rn.bf16.f32; overflow rounds to Inf)
//
// amax is the largest |x| as fp32 bits (an integer max: exact and independent of order, so a
// warp's shuffle reduction gives the reference's value).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_CODEC_FN SK_HOST_DEVICE
#define SK_CODEC_MUL(a, b) __fmul_rn((a), (b))
#define SK_CODEC_DIV(a, b) __fdiv_rn((a), (b))
#define SK_CODEC_ADD(a, b) __fadd_rn((a), (b))
SK_CODEC_FN unsigned sk_codec_bits(float f) { return __float_as_uint(f); }
SK_CODEC_FN float sk_codec_float(unsigned u) { return __uint_as_float(u); }
#else
#define SK_CODEC_FN static inline
// Separate statements of single operations: C11 (-std=c11) does not contract them, and x86-64
// computes fp32 in SSE registers (no excess precision).
#define SK_CODEC_MUL(a, b) ((float)((a) * (b)))
#define SK_CODEC_DIV(a, b) ((float)((a) / (b)))
#define SK_CODEC_ADD(a, b) ((float)((a) + (b)))
SK_CODEC_FN unsigned sk_codec_bits(float f) {
  union { float f; unsigned u; } v;
  v.f = f;
  return v.u;
}
SK_CODEC_FN float sk_codec_float(unsigned u) {
  union { float f; unsigned u; } v;
  v.u = u;
  return v.f;
}
#endif

#define SK_CODEC_BLOCK 128        /* values per block */
#define SK_CODEC_MX_GROUP 32      /* values per E8M0 scale */
#define SK_CODEC_CODED_BYTES 132  /* 128 codes + 4 scale bytes */
#define SK_CODEC_TINY_BITS 0x1F800000u   /* 2^-64: smaller block amax encodes as zeros */
#define SK_CODEC_NAN_BITS 0x7FC00000u
#define SK_CODEC_INF_BITS 0x7F800000u

// ---- scalar formats -------------------------------------------------------------------------

// fp32 -> bf16 bits, round to nearest even; NaN -> 0x7FFF (cvt.rn.bf16.f32's canonical NaN).
SK_CODEC_FN unsigned short sk_codec_bf16_rn(float f) {
  unsigned u = sk_codec_bits(f);
  if ((u & 0x7FFFFFFFu) > SK_CODEC_INF_BITS) return (unsigned short)0x7FFFu;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
SK_CODEC_FN float sk_codec_bf16_to_f32(unsigned short b) { return sk_codec_float((unsigned)b << 16); }

// fp32 -> E4M3 (e4m3fn), round to nearest even, saturating to +-448; NaN -> 0x7F, +-Inf -> +-448,
// -0 kept; fp32 subnormals round to (signed) zero. As cvt.rn.satfinite.e4m3x2.f32.
SK_CODEC_FN unsigned char sk_codec_e4m3_rn(float f) {
  unsigned u = sk_codec_bits(f), a = u & 0x7FFFFFFFu, sign = (u >> 24) & 0x80u;
  if (a > SK_CODEC_INF_BITS) return 0x7F;
  if (a >= 0x43E00000u) return (unsigned char)(sign | 0x7Eu);  // >= 448 (and Inf) saturate
  int e = (int)(a >> 23) - 127;
  if (e < -126) return (unsigned char)sign;                     // fp32 zero / subnormal
  unsigned m = (a & 0x7FFFFFu) | 0x800000u;
  // Quantum 2^(e-3) for E4M3 normals (e >= -6), 2^-9 for its subnormals: drop s mantissa bits.
  int s = e >= -6 ? 20 : 20 + (-6 - e);
  if (s > 24) return (unsigned char)sign;                       // below half the least subnormal
  unsigned r = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
  if (rem > half || (rem == half && (r & 1u))) r++;
  unsigned code = e >= -6 ? (unsigned)((e + 7) << 3) + r - 8u : r;  // r == 16 / 8 carries exactly
  if (code > 0x7Eu) code = 0x7Eu;
  return (unsigned char)(sign | code);
}

// E4M3 -> fp32, exact; 0x7F / 0xFF give NaN.
SK_CODEC_FN float sk_codec_e4m3_to_f32(unsigned char code) {
  unsigned sign = (unsigned)(code & 0x80u) << 24, e = (code >> 3) & 15u, m = code & 7u;
  if (e == 15 && m == 7) return sk_codec_float(SK_CODEC_NAN_BITS);
  if (e == 0) return sk_codec_float(sign | sk_codec_bits(SK_CODEC_MUL((float)m, 0x1p-9f)));
  return sk_codec_float(sign | ((e + 120u) << 23) | (m << 20));
}

// E8M0 of the least power of two >= s (s >= 0; integer ceiling on the bits); +Inf -> 0xFF.
SK_CODEC_FN unsigned char sk_codec_e8m0_ceil(float s) {
  unsigned bits = sk_codec_bits(s);
  if (bits & 0x7FFFFFu) bits = (bits + 0x800000u) & 0x7F800000u;
  return (unsigned char)((bits >> 23) & 0xFFu);
}
// 2^(code-127) (code 0: the subnormal 2^-127; 0xFF: NaN) and 2^(127-code) (0 for 0xFF).
SK_CODEC_FN float sk_codec_e8m0_to_f32(unsigned char code) {
  if (code == 0xFF) return sk_codec_float(SK_CODEC_NAN_BITS);
  return sk_codec_float(code ? (unsigned)code << 23 : 0x00400000u);
}
SK_CODEC_FN float sk_codec_e8m0_reciprocal(unsigned char code) {
  if (code == 0xFF) return 0.0f;
  if (code == 0xFE) return sk_codec_float(0x00400000u);
  return sk_codec_float((unsigned)(254 - code) << 23);
}

// Round to the nearest integer, ties to even, for |y| < 2^22 (the int8 codes: |y| <= ~127).
SK_CODEC_FN int sk_codec_rint(float y) {
  float t = SK_CODEC_ADD(y, 12582912.0f);  // 1.5 * 2^23: the sum's ulp is 1
  t = SK_CODEC_ADD(t, -12582912.0f);
  return (int)t;
}

// ---- block scales ---------------------------------------------------------------------------
// `amax_bits` is the largest (|x| bits) of the block; `nonfinite` is nonzero when any |x| bits
// are >= 0x7F800000 (then amax_bits is too: pass amax_bits >= SK_CODEC_INF_BITS as the test).

// E4M3 (max 448) and INT8 (max 127): the fp32 scale written to the wire and the multiplier the
// codes are computed with; *zero_codes = 1 for a special block (every code 0).
SK_CODEC_FN float sk_codec_block_scale(unsigned amax_bits, float qmax, float* inv, int* zero_codes) {
  if (amax_bits >= SK_CODEC_INF_BITS) {
    *inv = 0.0f;
    *zero_codes = 1;
    return sk_codec_float(SK_CODEC_NAN_BITS);
  }
  if (amax_bits < SK_CODEC_TINY_BITS) {
    *inv = 0.0f;
    *zero_codes = 1;
    return 0.0f;
  }
  float amax = sk_codec_float(amax_bits);
  *inv = SK_CODEC_DIV(qmax, amax);
  *zero_codes = 0;
  float scale = SK_CODEC_DIV(amax, qmax);
  // Near FLT_MAX, qmax * scale may round up to Inf: step the scale down one ulp so every code
  // decodes to a finite value.
  if (sk_codec_bits(SK_CODEC_MUL(scale, qmax)) >= SK_CODEC_INF_BITS) scale = sk_codec_float(sk_codec_bits(scale) - 1u);
  return scale;
}

SK_CODEC_FN unsigned char sk_codec_e4m3_code(float x, float inv, int zero_codes) {
  return zero_codes ? (unsigned char)0 : sk_codec_e4m3_rn(SK_CODEC_MUL(x, inv));
}

SK_CODEC_FN signed char sk_codec_int8_code(float x, float inv, int zero_codes) {
  if (zero_codes) return 0;
  int q = sk_codec_rint(SK_CODEC_MUL(x, inv));
  return (signed char)(q > 127 ? 127 : q < -127 ? -127 : q);
}

// MXFP8 group scale byte: 0xFF (and codes 0) for a group holding Inf/NaN, 127 for an all-zero
// group, else the E8M0 ceiling of amax / 448 (amax * fp32(1/448), as quantization.mxfp8).
SK_CODEC_FN unsigned char sk_codec_mx_scale(unsigned amax_bits) {
  if (amax_bits >= SK_CODEC_INF_BITS) return 0xFF;
  if (amax_bits == 0) return 127;
  return sk_codec_e8m0_ceil(SK_CODEC_MUL(sk_codec_float(amax_bits), 0x1.24924ap-9f));
}
SK_CODEC_FN unsigned char sk_codec_mx_code(float x, unsigned char scale) {
  return scale == 0xFF ? (unsigned char)0 : sk_codec_e4m3_rn(SK_CODEC_MUL(x, sk_codec_e8m0_reciprocal(scale)));
}

// ---- decode -----------------------------------------------------------------------------------
SK_CODEC_FN float sk_codec_e4m3_value(unsigned char code, float scale) {
  return SK_CODEC_MUL(sk_codec_e4m3_to_f32(code), scale);
}
SK_CODEC_FN float sk_codec_int8_value(signed char code, float scale) { return SK_CODEC_MUL((float)code, scale); }
SK_CODEC_FN float sk_codec_mx_value(unsigned char code, unsigned char scale) {
  return SK_CODEC_MUL(sk_codec_e4m3_to_f32(code), sk_codec_e8m0_to_f32(scale));
}
