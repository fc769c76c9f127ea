// Tensor-core ceiling probe for bench_mma_peak: the rate at which one SM retires warp-level
// mma.sync when nothing else limits it (operands in registers, independent accumulators).
// It gives the prefill GEMM goals a measured denominator on the GPU at hand.
#pragma once
#include "common/defs.cuh"
#include "common/mma.cuh"

namespace sk_test {

// KIND 0: m16n8k16 f16, 1: m16n8k16 bf16, 2: m16n8k32 e4m3 (sm_89+; ptxas emulates it on sm_90).
// Each warp issues ITERS rounds of kChains independent MMAs (enough to cover MMA latency), then
// folds its accumulators into out[] so nothing is dead code. Operands come from `seed` so the
// compiler cannot constant-fold them.
template <int KIND, int ITERS>
__global__ void __launch_bounds__(256) mma_peak(float* __restrict__ out, sk::u32 seed) {
  constexpr int kChains = 8;
  const sk::u32 lane = threadIdx.x & 31u;
  const sk::u32 a0[4] = {seed ^ lane, seed + lane, seed * 3u + lane, seed ^ (lane << 8)};
  // Distinct B per chain: identical chains would be merged by the compiler (one chain measures
  // MMA latency, not throughput).
  sk::u32 b[kChains][2];
#pragma unroll
  for (int c = 0; c < kChains; ++c) {
    b[c][0] = seed + 7u * lane + 0x01010101u * c;
    b[c][1] = seed ^ (lane << 16) ^ (0x00110011u * c);
  }
  float acc[kChains][4];
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[c][e] = 0.0f;
#pragma unroll 1
  for (int it = 0; it < ITERS; ++it) {
    // A changes every iteration, as a GEMM's fragments do every k-step, so per-fragment work
    // (on sm_90 ptxas converts e4m3 fragments to f16) stays inside the loop.
    const sk::u32 a[4] = {a0[0] ^ sk::u32(it), a0[1] ^ sk::u32(it), a0[2] ^ sk::u32(it), a0[3] ^ sk::u32(it)};
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (KIND == 0) sk::mma_f16_m16n8k16(acc[c], a, b[c]);
      else if constexpr (KIND == 1) sk::mma_bf16_m16n8k16(acc[c], a, b[c]);
      else sk::mma_e4m3_m16n8k32(acc[c], a, b[c]);
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) sum += acc[c][e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

}  // namespace sk_test
