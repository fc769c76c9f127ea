// Shared pieces of the GEMM kernels: recipe / output enums, operand addressing (codes, 128x4
// swizzled scales, block-FP8 scales), exact dequantization to BF16 pairs, output stores.
// Formats and layouts: ops/gemm/gemm.md.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "common/defs.cuh"
#include "common/numeric.cuh"
#include "gemm/e2m1_decode.cuh"  // sk_e2m1x8_to_f16x2_2m14

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

// Block-scale code -> float for the swizzled recipes (NVFP4: UE4M3, sign ignored; MX: UE8M0).
template <int RECIPE>
SK_DEVICE float decode_block_scale(u32 code) {
  if (RECIPE == kNvfp4) return e4m3_to_float(u8(code & 0x7Fu));
  return e8m0_to_float(u8(code));
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
