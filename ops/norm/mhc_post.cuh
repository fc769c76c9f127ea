// norm.mhc: run_post's kernel (1 in the launch contract, norm/mhc.cuh).
#pragma once
#include "norm/mhc_common.cuh"

namespace sk {
namespace mhc {

// ---- 1. post ------------------------------------------------------------------------------------------

template <int HIDDEN>
__global__ void __launch_bounds__(kPostThreads)
    post_kernel(const bf16* __restrict__ x, const bf16* __restrict__ residual, const float* __restrict__ post,
                const float* __restrict__ comb, bf16* __restrict__ out, int num_tokens) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  static_assert(HIDDEN % kTileH == 0 && HIDDEN > 0, "hidden must be a positive multiple of 256");
  constexpr int kTiles = num_tiles(HIDDEN);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  // One warp per (token, tile).
  const i64 work = static_cast<i64>(blockIdx.x) * (kPostThreads / kWarpSize) + threadIdx.x / kWarpSize;
  if (work >= static_cast<i64>(num_tokens) * kTiles) return;
  const i64 token = work / kTiles;
  const i64 h = (work % kTiles) * kTileH + lane * kBf16PerVector;

  const MixBackCoeffs m = load_mix_back_coeffs(post, comb, token);
  float xv[8], r[kStreams][8];
  load_readonly_bf16x8(x + token * HIDDEN + h, xv);
#pragma unroll
  for (int s = 0; s < kStreams; ++s) load_readonly_bf16x8(residual + (token * kStreams + s) * HIDDEN + h, r[s]);
  uint4 o[kStreams];
  mix_back_vector(m, xv, r, o);
#pragma unroll
  for (int s = 0; s < kStreams; ++s) store_16B(out + (token * kStreams + s) * HIDDEN + h, o[s]);
}

}  // namespace mhc
}  // namespace sk
