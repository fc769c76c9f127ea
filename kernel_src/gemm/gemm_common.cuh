// Shared pieces of the GEMM kernels: recipe / output enums, operand addressing (codes, 128x4
// swizzled scales, block-FP8 scales), exact dequantization to BF16 pairs, output stores.
// Formats and layouts: docs/ops/gemm.md.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "common/defs.cuh"

namespace sk {
namespace gemm {

// Same numbering as skref_gemm_recipe / skref_gemm_out (tests/ref/gemm.h).
enum Recipe { kNvfp4 = 0, kMxfp4 = 1, kMxfp8 = 2, kBlockFp8 = 3, kTensorFp8 = 4 };
enum OutType { kOutBf16 = 0, kOutFp16 = 1, kOutFp32 = 2 };

template <int RECIPE>
struct RecipeTraits {
  static constexpr bool kFp4 = RECIPE == kNvfp4 || RECIPE == kMxfp4;
  // Elements per scale along K (0: no block scale).
  static constexpr int kScaleVec = RECIPE == kNvfp4 ? 16 : (RECIPE == kMxfp4 || RECIPE == kMxfp8) ? 32 : RECIPE == kBlockFp8 ? 128 : 0;
  static constexpr bool kSwizzledScales = RECIPE <= kMxfp8;
  // Elements in one 16-byte load of codes.
  static constexpr int kElemsPer16B = kFp4 ? 32 : 16;
  static SK_HOST_DEVICE long long row_bytes(int k) { return kFp4 ? k / 2 : k; }
};

// ---- temporary decoders: swap for common/numeric.cuh (sk::e2m1_to_float, sk::e4m3_to_float,
// ---- sk::e8m0_to_float) when it lands. All exact.
SK_DEVICE float gemm_tmp_e2m1_to_float(u32 nibble) {
  const u32 e = (nibble >> 1) & 3u, m = nibble & 1u;
  // e == 0: subnormal 0 or 0.5; else 2^(e-1) * (1 + m/2), built from bits (no FTZ hazards).
  float mag = e == 0 ? 0.5f * (float)m : __uint_as_float(((e + 126u) << 23) | (m << 22));
  return (nibble & 8u) ? -mag : mag;
}
SK_DEVICE float gemm_tmp_e4m3_to_float(u32 code) {
  __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)(code & 0xFFu), __NV_E4M3);
  return __half2float(__half(h));
}
SK_DEVICE float2 gemm_tmp_e4m3x2_to_float2(u32 two_codes) {  // low byte -> .x
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two_codes & 0xFFFFu), __NV_E4M3);
  return __half22float2(__half2(h));
}
SK_DEVICE float gemm_tmp_e8m0_to_float(u32 code) {
  // 2^(code-127); code 0 is 2^-127 (subnormal), built without FTZ hazards.
  return code == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(code << 23);
}

// Block-scale code -> float for the swizzled recipes (NVFP4: UE4M3, sign ignored; MX: UE8M0).
template <int RECIPE>
SK_DEVICE float decode_block_scale(u32 code) {
  if (RECIPE == kNvfp4) return gemm_tmp_e4m3_to_float(code & 0x7Fu);
  return gemm_tmp_e8m0_to_float(code & 0xFFu);
}

// Byte offset of (row, scale column) in the 128x4 swizzled layout with num_k_tiles = ceil(KS/4).
SK_HOST_DEVICE long long swizzled_scale_offset(int row, int scale_col, int num_k_tiles) {
  return (long long)(row >> 7) * num_k_tiles * 512 + (scale_col >> 2) * 512 + (row & 31) * 16 +
         ((row & 127) >> 5) * 4 + (scale_col & 3);
}

// Two floats -> one bf16x2 register, RN (exact for every dequantized value we produce).
SK_DEVICE u32 pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

// Eight E2M1 codes (one u32, element i in nibble i) -> four f16x2 (elements 2p, 2p+1), exact.
// The f16 encodings of the 8 magnitudes have a zero low byte, so one byte permute looks up four
// high bytes at once; the sign bits are moved to bit 15 / 31.
SK_DEVICE void e2m1x8_to_f16x2x4(u32 w, u32 (&pairs)[4]) {
  const u32 kLutLo = 0x3E3C3800u, kLutHi = 0x46444240u;  // 0, .5, 1, 1.5 | 2, 3, 4, 6
  u32 hb[2];
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hb[0]) : "r"(kLutLo), "r"(kLutHi), "r"(w & 0x7777u));
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hb[1]) : "r"(kLutLo), "r"(kLutHi), "r"((w >> 16) & 0x7777u));
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    u32 v;
    const u32 src = hb[p >> 1];
    if (p & 1) asm("prmt.b32 %0, %1, 0, 0x3424;" : "=r"(v) : "r"(src));
    else asm("prmt.b32 %0, %1, 0, 0x1404;" : "=r"(v) : "r"(src));
    const u32 sign_lo = (w >> (8 * p + 3)) & 1u, sign_hi = (w >> (8 * p + 7)) & 1u;
    pairs[p] = v | (sign_lo << 15) | (sign_hi << 31);
  }
}

// Eight E2M1 codes (nibble i = element i) -> four f16x2 equal to the E2M1 values times 2^-14,
// exactly: p[j] = {element j, element j + 4}. With the magnitude bits (e1 e0 m) at f16 bits 9..11
// and the sign at 15, exponent field e and mantissa MSB m give 2^(e-15) (1 + m/2) for e >= 1 and
// the subnormal (m/2) 2^-14 for e = 0: value * 2^-14 in both cases. The sign must move 3 bits
// further than the magnitude, so r = rotl(w, 3) brings each sign 6 above its magnitude and one
// LOP3 merges them into a word holding every other nibble (fe: even, fo: odd nibbles, whose
// neighbours' bits are free); each pair is then one shift (rotate for j = 3, whose sign wrapped)
// and one mask. 11 integer ops per 8 weights (the old byte-permute LUT took ~20).
SK_DEVICE void e2m1x8_to_f16x2_2m14(u32 w, u32 (&p)[4]) {
  const u32 kKeep = 0x8E008E00u;  // f16 sign and magnitude bits of both halves
  const u32 r = __funnelshift_l(w, w, 3);
  u32 fe, fo;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(fe) : "r"(w), "r"(r), "n"(0x07070707));  // c ? a : b
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(fo) : "r"(w), "r"(r), "n"(0x70707070));
  p[0] = (fe << 9) & kKeep;
  p[1] = (fo << 5) & kKeep;
  p[2] = (fe << 1) & kKeep;
  p[3] = __funnelshift_r(fo, fo, 3) & kKeep;
}

// Dequantize elements [4q, 4q+4) of a 16-byte code chunk to two bf16x2 registers
// (lo = elements 4q, 4q+1; hi = 4q+2, 4q+3), multiplied by `scale` (exact: <= 8 significant bits).
template <int RECIPE>
SK_DEVICE void dequant_quad_bf16(const uint4& chunk, int q, float scale, u32& lo, u32& hi) {
  const u32 words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
  if (RecipeTraits<RECIPE>::kFp4) {
    u32 pairs[4];
    e2m1x8_to_f16x2x4(words[q >> 1], pairs);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&pairs[(q & 1) * 2]));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&pairs[(q & 1) * 2 + 1]));
    lo = pack_bf16x2(a.x * scale, a.y * scale);
    hi = pack_bf16x2(b.x * scale, b.y * scale);
  } else {
    const u32 w = words[q];
    const float2 a = gemm_tmp_e4m3x2_to_float2(w), b = gemm_tmp_e4m3x2_to_float2(w >> 16);
    lo = pack_bf16x2(a.x * scale, a.y * scale);
    hi = pack_bf16x2(b.x * scale, b.y * scale);
  }
}

// NVFP4 quad q of a 16-byte chunk -> f16x2 lo/hi, times the UE4M3 scale (as f16x2; exact: the
// product has <= 5 significant bits and lies in [2^-10, 2688]).
SK_DEVICE void dequant_quad_f16_nvfp4(const uint4& chunk, int q, u32 scale_h2, u32& lo, u32& hi) {
  const u32 words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
  u32 pairs[4];
  e2m1x8_to_f16x2x4(words[q >> 1], pairs);
  const __half2 s = *reinterpret_cast<const __half2*>(&scale_h2);
  __half2 a = __hmul2(*reinterpret_cast<__half2*>(&pairs[(q & 1) * 2]), s);
  __half2 b = __hmul2(*reinterpret_cast<__half2*>(&pairs[(q & 1) * 2 + 1]), s);
  lo = *reinterpret_cast<u32*>(&a);
  hi = *reinterpret_cast<u32*>(&b);
}

// UE4M3 scale code -> f16x2 {s, s} (exact).
SK_DEVICE u32 ue4m3_to_f16x2(u32 code) {
  __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)(code & 0x7Fu), __NV_E4M3);
  return (u32)h.x | ((u32)h.x << 16);
}

// Store one output element (alpha already applied), RN to the output type.
template <int OUT>
SK_DEVICE void store_out(void* c, long long index, float v) {
  if (OUT == kOutBf16) reinterpret_cast<__nv_bfloat16*>(c)[index] = __float2bfloat16_rn(v);
  else if (OUT == kOutFp16) reinterpret_cast<__half*>(c)[index] = __float2half_rn(v);
  else reinterpret_cast<float*>(c)[index] = v;
}

SK_DEVICE float load_alpha(const float* alpha) { return alpha ? __ldg(alpha) : 1.0f; }

}  // namespace gemm
}  // namespace sk
