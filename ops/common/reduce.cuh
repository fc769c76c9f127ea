// Warp and block reductions with a fixed order, so results are bit-reproducible run to run
// (CUDA-graph replay == eager). No atomics.
//
// Xor butterflies leave the same bits in every lane they cover: each step adds (or maxes) the
// same two values in one order or the other, and those operations are commutative.
#pragma once
#include "common/defs.cuh"

namespace sk {

constexpr unsigned kFullWarpMask = 0xffffffffu;
constexpr int kWarpSize = 32;

// Sum over the lanes whose indices differ only in the bits of XOR_MASKS, e.g.
// butterfly_sum<1, 2> sums groups of 4 consecutive lanes, butterfly_sum<4, 8> sums lanes
// l, l^4, l^8, l^12. All 32 lanes must call it (full-warp shuffles).
template <int... XOR_MASKS>
SK_DEVICE float butterfly_sum(float value) {
  ((value += __shfl_xor_sync(kFullWarpMask, value, XOR_MASKS)), ...);
  return value;
}

template <int... XOR_MASKS>
SK_DEVICE float butterfly_max(float value) {
  ((value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, XOR_MASKS))), ...);
  return value;
}

// Sum / max over the whole warp; every lane gets the result.
SK_DEVICE float warp_sum(float value) { return butterfly_sum<16, 8, 4, 2, 1>(value); }
SK_DEVICE float warp_max(float value) { return butterfly_max<16, 8, 4, 2, 1>(value); }

// Warp sum of N independent values at once (interleaved, so the shuffles overlap).
template <int N>
SK_DEVICE void warp_sum_each(float (&values)[N]) {
#pragma unroll
  for (int mask = 16; mask >= 1; mask /= 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) values[i] += __shfl_xor_sync(kFullWarpMask, values[i], mask);
  }
}

// Block sum for a block of WARPS full warps: warp sums, then the warp partials added in warp
// order by every thread. scratch: WARPS floats of shared memory. Every thread gets the result.
// Contains __syncthreads(): all threads of the block must call it.
template <int WARPS>
SK_DEVICE float block_sum(float value, float* scratch) {
  value = warp_sum(value);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  if ((threadIdx.x % kWarpSize) == 0) scratch[warp] = value;
  __syncthreads();
  float total = scratch[0];
#pragma unroll
  for (int w = 1; w < WARPS; ++w) total += scratch[w];
  __syncthreads();  // scratch may be reused right after
  return total;
}

// Max of non-negative fp32 values compared as their bit patterns (magnitude bits: exact, the same
// order as the floats, and independent of how a float max treats NaN). Whole warp / whole CTA;
// every thread gets the result. block_max_bits contains __syncthreads(): every thread of the
// block must call it.
SK_DEVICE u32 warp_max_bits(u32 v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  return v;
}

SK_DEVICE u32 block_max_bits(u32 v) {
  __shared__ u32 warp_maxes[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max_bits(v);
  if (lane == 0) warp_maxes[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x + 31) / 32 ? warp_maxes[lane] : 0u;
  v = warp_max_bits(v);
  __syncthreads();  // warp_maxes may be reused by a later call
  return v;
}

}  // namespace sk
