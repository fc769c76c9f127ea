// quantization.mxfp8: BF16/FP16 rows [M, K] -> MXFP8 (E4M3 values, one UE8M0 scale per 32
// values). Numerics, layouts and NaN/Inf policy: docs/ops/quantization.md; CPU reference:
// skref_quantize_mxfp8() in tests/ref/skref.h.
//
// ---- Launch contract -----------------------------------------------------------------------
//   sk::quant::mxfp8_rows<T, LAYOUT, CVT>(
//       const T* x, int ld_x, int M, int K,
//       u8* values, u8* scales_swizzled, u8* scales_rows)
//     T        __nv_bfloat16 | __half
//     LAYOUT   sk::kScalesSwizzled (1) | sk::kScalesRowMajor (2) | sk::kScalesBoth (3)
//     CVT      sk::kCvtSoftware (0) | sk::kCvtHardware (1) (cvt.e4m3x2 on sm_89+, software
//              elsewhere; bit-identical either way)
//     x        [M, ld_x] elements, row m at x + m*ld_x; 16-byte aligned, ld_x % 8 == 0, ld_x >= K
//     M, K     M >= 1, K >= 32, K % 32 == 0, M * K <= 2^34
//     values   [M, K] E4M3 bytes, contiguous, 8-byte aligned
//     scales_swizzled  LAYOUT & 1: sk::swizzled_scale_bytes(M, K/32) bytes, 4-byte aligned;
//                      padding rows/columns are written as 0 by this kernel. Else may be null.
//     scales_rows      LAYOUT & 2: [M, K/32] bytes, contiguous. Else may be null.
//     blockDim (kMxfp8Threads = 256, 1, 1); no dynamic shared memory; no scratch.
//     grid     (g, 1, 1): any g >= 1 is correct (grid-stride loop). Recommended
//              g = ceil(max(M*K/8, P) / 256) with P = sk::swizzled_padding_words(M, K/32) when
//              LAYOUT & 1 (else 0): one 8-value chunk and at most one padding word per thread.
//              One launch for any M (M = 1 included).
// No input may alias an output. Each x element is read once.
#pragma once
#include "common/defs.cuh"
#include "common/numeric.cuh"
#include "common/scale_layout.cuh"

namespace sk {
namespace quant {

constexpr int kMxfp8Threads = 256;
constexpr int kMxfp8Block = 32;

// fp32(1/448): upstream multiplies the block amax by this constant (it never divides).
constexpr float kMxfp8InvE4m3Max = 0x1.24924ap-9f;

// UE8M0 block scale: 127 (1.0) for an all-zero block, else the least power of two >=
// amax * fp32(1/448) (+Inf amax gives 0xFF, the E8M0 NaN).
SK_DEVICE u8 mxfp8_block_scale(float amax) {
  return amax == 0.0f ? u8(127) : e8m0_ceil_pow2(mul_rn(amax, kMxfp8InvE4m3Max));
}

template <typename T, int LAYOUT, int CVT>
__global__ void __launch_bounds__(kMxfp8Threads)
    mxfp8_rows(const T* __restrict__ x, int ld_x, int M, int K, u8* __restrict__ values,
               u8* __restrict__ scales_swizzled, u8* __restrict__ scales_rows) {
  static_assert(LAYOUT >= kScalesSwizzled && LAYOUT <= kScalesBoth, "LAYOUT: 1, 2 or 3");
  const i64 tid = i64(blockIdx.x) * blockDim.x + threadIdx.x;
  const i64 num_threads = i64(gridDim.x) * blockDim.x;

  // Four threads per 32-value block, 8 values (one 16-byte load) each. K/8 is a multiple of 4,
  // so a block is four aligned adjacent lanes of one warp and never straddles a row.
  const int chunks_per_row = K / 8, scale_cols = K / kMxfp8Block;
  const i64 chunks = i64(M) * chunks_per_row;
  const unsigned quad_mask = 15u << (threadIdx.x & 28u);
  for (i64 c = tid; c < chunks; c += num_threads) {
    // M*K <= 2^34 keeps chunk indices below 2^31: 32-bit division is exact and cheap.
    const u32 c32 = u32(c), cpr = u32(chunks_per_row);
    const int row = int(c32 / cpr), chunk_in_row = int(c32 % cpr);
    float v[8];
    widen8<T>(__ldg(reinterpret_cast<const uint4*>(x + i64(row) * ld_x + chunk_in_row * 8)), v);
    u32 amax = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = max(amax, magnitude_bits_skip_nan(v[i]));
    amax = max(amax, __shfl_xor_sync(quad_mask, amax, 1));
    amax = max(amax, __shfl_xor_sync(quad_mask, amax, 2));

    const u8 scale = mxfp8_block_scale(f32_from_bits(amax));
    const float inv = e8m0_reciprocal(scale);  // a power of two: x * inv is exact unless tiny
    float q[8];
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = mul_rn(v[i], inv);
    const uint2 packed = make_uint2(pack_e4m3x4<CVT>(q[0], q[1], q[2], q[3]),
                                    pack_e4m3x4<CVT>(q[4], q[5], q[6], q[7]));
    *reinterpret_cast<uint2*>(values + i64(row) * K + chunk_in_row * 8) = packed;
    if ((chunk_in_row & 3) == 0)
      store_scale<LAYOUT>(scales_swizzled, scales_rows, row, chunk_in_row / 4, scale_cols, scale);
  }
  if constexpr ((LAYOUT & kScalesSwizzled) != 0)
    zero_swizzled_padding(scales_swizzled, M, scale_cols, tid, num_threads);
}

}  // namespace quant
}  // namespace sk
