// norm.mhc: the fused decode kernels (2c in the launch contract, norm/mhc.cuh): the scalar
// partials and the finalize in one launch, handed over through per-token arrival counters.
#pragma once
#include "norm/mhc_scalar.cuh"
#include "norm/mhc_finalize.cuh"

namespace sk {
namespace mhc {

// ---- 2c. fused decode: scalar partials + finalize in one launch --------------------------------------
//
// The grid and the partial work of 2b (CTA = one warp per (token, tile, role)), then the finalize
// of 3 inside the same launch, handed over through one arrival counter per token in scratch:
//   every CTA  writes its partial values (lane 0, as 2b), then adds 1 to its token's counter with
//              release semantics; all but the token's S + 1 waiters exit.
//   waiters    wait (acquire) until the counter holds all 6*S arrivals of the token, then sum the
//              token's partial rows in the finalize's order (tile 0 first) and
//              - role 5 of tile k: the gates and norm scale, then y of tile k from the streams it
//                still holds in registers (the bits of residual_out); tile 0's also writes post;
//              - role 4 of tile 0: Sinkhorn, writes comb (while the role-5 waiters write y).
// Same operations in the same order as 2b -> 3 (shared code), hence the same bits.
//
// Counter protocol (per token; the caller zeroes the counters once, every launch leaves them 0):
// arrivals take it 0 -> 6S; each waiter, once released, departs (+1), and the waiter whose
// departure makes 6S + S + 1 stores 0: by then every arrival and departure of this launch is done,
// and the next launch on the scratch starts after this one (stream order). An arrival that finds
// the counter already at 6S or more means the counters were not zero: the kernel traps instead of
// returning wrong results (as it does if a waiter spins for 10 s).
//
// Progress: only waiters wait, and only for arrivals, which every CTA makes before waiting (if it
// waits at all). As long as the waiters of the whole grid, (S + 1) * T, occupy fewer than all the
// CTA slots of the device, a free or soon-freed slot (a non-waiter never blocks) always remains for
// the CTAs not yet started, so every arrival happens. The host launches this kernel only when
// (S + 1) * T <= (resident CTAs per SM x SMs) / 2 (ops/norm/mhc.c; half, for other work
// sharing the GPU), and falls back to 2b -> 3 otherwise.

constexpr int kFusedYRole = kRoles - 1;      // a waiter per tile: gates, y (tile 0: post)
constexpr int kFusedCombRole = kRoles - 2;   // tile 0 only: Sinkhorn, comb
constexpr u64 kFusedWaitTimeoutNs = 10000000000ull;  // 10 s: only a broken contract waits that long

template <int HIDDEN, int STAGED, typename NormWeight>
SK_DEVICE void fused_decode_finalize(const uint4 (&streams)[STAGED], const float* __restrict__ partials,
                                     u32* __restrict__ token_counters, const float* __restrict__ hc_scale,
                                     const float* __restrict__ hc_base, const NormWeight* __restrict__ norm_weight,
                                     bf16* __restrict__ y, float* __restrict__ post, float* __restrict__ comb,
                                     int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps) {
  constexpr int kTiles = num_tiles(HIDDEN);
  constexpr u32 kArrivals = kRoles * kTiles, kWaiters = kTiles + 1;
  constexpr int kReduced = kMixes + kGramPairs;
  static_assert(kReduced <= 2 * kWarpSize, "two partial slots per lane at most");
  __shared__ float reduced[kReduced];
  __shared__ float shared_pre[kStreams];
  __shared__ float shared_norm_scale;

  const i64 token = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  u32* counter = token_counters + token;
  // Lane 0 wrote this CTA's partial values (scalar_partial_reduce): its release publishes them.
  if (lane == 0 && atomic_add_release_gpu(counter, 1) >= kArrivals) __trap();  // counters not zeroed
  const bool y_waiter = blockIdx.z == kFusedYRole, comb_waiter = blockIdx.z == kFusedCombRole && blockIdx.y == 0;
  if (!y_waiter && !comb_waiter) return;

  wait_until_at_least(counter, kArrivals, kFusedWaitTimeoutNs);
  u32 departed_before = 0;
  if (lane == 0) departed_before = atomicAdd(counter, 1u);  // result needed only at the end

  const float* rows = partials + token * kTiles * kPartialStride;
  const int second = lane + kWarpSize < kReduced ? lane + kWarpSize : kReduced - 1;  // both chains in flight
  const float first_sum = sum_token_partials<HIDDEN, true>(rows, lane);
  const float second_sum = sum_token_partials<HIDDEN, true>(rows, second);
  reduced[lane] = first_sum;
  if (lane + kWarpSize < kReduced) reduced[second] = second_sum;
  __syncwarp();

  if (comb_waiter) {
    if (lane == 0) store_token_comb<HIDDEN>(reduced, hc_scale, hc_base, sinkhorn_iters, rms_eps, hc_eps, comb, token);
  } else {
    if (lane == 0) {
      const TokenGates g = compute_token_gates<HIDDEN, NormWeightTraits<NormWeight>::kFused>(
          reduced, hc_scale, hc_base, rms_eps, hc_eps, norm_eps);
#pragma unroll
      for (int s = 0; s < kStreams; ++s) shared_pre[s] = g.pre[s];
      shared_norm_scale = g.norm_scale;
      if (blockIdx.y == 0)
        *reinterpret_cast<float4*>(post + kStreams * token) = make_float4(g.post[0], g.post[1], g.post[2], g.post[3]);
    }
    __syncwarp();
    float pre[kStreams], r[kStreams][8];
#pragma unroll
    for (int s = 0; s < kStreams; ++s) {
      pre[s] = shared_pre[s];
#pragma unroll
      for (int e = 0; e < 8; ++e) r[s][e] = bf16_element(streams[STAGED == 1 ? 0 : s], e);
    }
    const i64 h = scalar_lane_h();
    store_16B(y + token * HIDDEN + h, collapse_vector(pre, shared_norm_scale, r, norm_weight, h));
  }
  if (lane == 0 && departed_before == kArrivals + kWaiters - 1) atomicExch(counter, 0u);  // the last waiter
}

template <int HIDDEN, typename NormWeight>
__global__ void __launch_bounds__(kWarpSize)
    pre_fused_decode_kernel(const bf16* __restrict__ x, const float* __restrict__ fn_pre,
                            const float* __restrict__ hc_scale, const float* __restrict__ hc_base,
                            const NormWeight* __restrict__ norm_weight, bf16* __restrict__ residual_out,
                            float* __restrict__ partials, u32* __restrict__ token_counters, bf16* __restrict__ y,
                            float* __restrict__ post, float* __restrict__ comb, int sinkhorn_iters, float rms_eps,
                            float hc_eps, float norm_eps) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  uint4 streams[1];
  pre_partial_scalar_body<HIDDEN>(x, fn_pre, residual_out, partials, streams);
  fused_decode_finalize<HIDDEN, 1>(streams, partials, token_counters, hc_scale, hc_base, norm_weight, y, post, comb,
                                   sinkhorn_iters, rms_eps, hc_eps, norm_eps);
}

template <int HIDDEN, typename NormWeight>
__global__ void __launch_bounds__(kWarpSize)
    post_pre_fused_decode_kernel(const bf16* __restrict__ x, const bf16* __restrict__ residual,
                                 const float* __restrict__ prev_post, const float* __restrict__ prev_comb,
                                 const float* __restrict__ fn, const float* __restrict__ hc_scale,
                                 const float* __restrict__ hc_base, const NormWeight* __restrict__ norm_weight,
                                 bf16* __restrict__ residual_out, float* __restrict__ partials,
                                 u32* __restrict__ token_counters, bf16* __restrict__ y, float* __restrict__ post,
                                 float* __restrict__ comb, int sinkhorn_iters, float rms_eps, float hc_eps,
                                 float norm_eps) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  uint4 mixed[kStreams];
  post_pre_partial_scalar_body<HIDDEN>(x, residual, prev_post, prev_comb, fn, residual_out, partials, mixed);
  fused_decode_finalize<HIDDEN, kStreams>(mixed, partials, token_counters, hc_scale, hc_base, norm_weight, y, post,
                                          comb, sinkhorn_iters, rms_eps, hc_eps, norm_eps);
}

}  // namespace mhc
}  // namespace sk
