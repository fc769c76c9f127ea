// quantization.mxfp8: BF16/FP16 rows [M, K] -> MXFP8 (E4M3 values, one UE8M0 scale per 32
// values). Numerics, layouts and NaN/Inf policy: ops/quantization/quantization.md; CPU reference:
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
//     grid     (gx, gy, 1): any gx, gy >= 1 is correct. The work split of nvfp4_rows
//              (quantization/split.cuh) with 128-value k-tiles: a unit is 128 rows x one k-tile
//              but only half the rows of each row group (r in [0, 16) or [16, 32): two slabs per
//              128 rows), so it is still four chunks per thread. The host (quant_rows_grid ->
//              sk_qsplit_grid_y) launches gx = sk_qsplit_k_tiles(K/8, 4) and about one unit per
//              CTA (4 chunks per thread), at least min(units, 4 CTAs per SM). One launch for any
//              M (M = 1 included).
// No input may alias an output. Each x element is read once.
// Why this shape: bandwidth-bound (3 bytes per element); four coalesced 16-byte loads per thread
// are issued together (a warp reads two whole 256-byte row pieces), the block amax is max.f32 on
// |x|, and a thread's four chunks are the rows of one 16-byte swizzled scale piece, so the
// unit's scales leave as whole 4-byte words (256 contiguous bytes per unit, padding included).
#pragma once
#include "common/defs.cuh"
#include "common/sync.cuh"
#include "common/numeric.cuh"
#include "common/scale_layout.cuh"
#include "quantization/chunks.cuh"

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

// Quantize 8 values (a quarter of a 32-value block whose other quarters are held by lanes
// lane^1, lane^2, lane^3 of the same warp): returns the 8 E4M3 codes (x: values 0..3, y: 4..7,
// lower value in the lower byte) and the block's UE8M0 scale in `scale`. All 32 lanes must call
// it together (full-mask shuffles). Shared with the fused decode GEMM (gemm/gemv_decode.cuh,
// gemv_decode_mxfp8_bf16), which therefore sees exactly this op's codes and scales.
template <typename T, int CVT>
SK_DEVICE uint2 mxfp8_quantize8(const uint4& raw, u8& scale) {
  float v[8];
  widen8<T>(raw, v);
  // max.f32 drops NaN and keeps Inf: the reference's "max |x| over the non-NaN x".
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; i++) amax = max_f32(amax, fabs_f32(v[i]));
  amax = max_f32(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
  amax = max_f32(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
  scale = mxfp8_block_scale(amax);
  const float inv = e8m0_reciprocal(scale);  // a power of two: x * inv is exact unless tiny
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; i++) q[i] = mul_rn(v[i], inv);
  return make_uint2(pack_e4m3x4<CVT>(q[0], q[1], q[2], q[3]), pack_e4m3x4<CVT>(q[4], q[5], q[6], q[7]));
}

template <typename T, int LAYOUT, int CVT>
// 6 CTAs per SM (40 registers): the occupancy of the previous split, no spills on sm_90a/sm_12xa.
__global__ void __launch_bounds__(kMxfp8Threads, 6)
    mxfp8_rows(const T* __restrict__ x, int ld_x, int M, int K, u8* __restrict__ values,
               u8* __restrict__ scales_swizzled, u8* __restrict__ scales_rows) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  static_assert(LAYOUT >= kScalesSwizzled && LAYOUT <= kScalesBoth, "LAYOUT: 1, 2 or 3");
  // Four threads per 32-value block, 8 values (one 16-byte load) each: a block is an aligned lane
  // quad. One unit (128 rows x half a k-tile, quantization/split.cuh) per step: its four chunks
  // per thread are loaded first, then quantized, then the unit's scales are stored as whole words
  // (padding included: no padding pass).
  UnitWalk<T, LAYOUT, 8, 4> walk(x, ld_x, M, K, values, scales_swizzled, scales_rows);
  bool more = walk.has_unit();  // CTA-uniform
  while (more) {
    walk.load();
    u32 scales = 0;  // byte j: chunk j's; 0 for padding (an all-zero block's scale would be 127)
#pragma unroll
    for (int j = 0; j < kQuantChunksPerThread; j++) {
      if (walk.warp_has(j)) {  // warp-uniform: full-mask shuffles inside
        u8 s;
        const uint2 codes = mxfp8_quantize8<T, CVT>(walk.raw[j], s);
        walk.store_values(j, codes);
        if (walk.exists(j)) scales |= u32(s) << (8 * j);
      }
    }
    walk.store_scales(scales);
    more = walk.next();
  }
}

}  // namespace quant
}  // namespace sk
