// norm.mhc: the scalar partial kernels for decode sizes (2b in the launch contract, norm/mhc.cuh),
// whose bodies the fused decode kernels (norm/mhc_fused.cuh) run too.
#pragma once
#include "norm/mhc_common.cuh"

namespace sk {
namespace mhc {

// ---- 2b. partials for decode (scalar FMA) --------------------------------------------------------------
//
// One warp per CTA, CTA (token, tile, role): role blockIdx.z takes mixes 4*role .. 4*role+3 and
// its Gram pairs over the tile's 256 elements (8 per lane), as fp32 fma chains summed over the
// warp. For a few tokens this beats the tensor-core kernel: 6*S*T independent CTAs with no shared
// memory, barriers or fn split, where a 16-token MMA group would be mostly padding. Same partial
// rows as the tensor-core kernel (other summation order, so other bits); role 0 also stores
// residual_out. Restored from the kernel the tensor-core one replaced (decode geometry only).

constexpr int kRoles = 6;                       // grid.z of the scalar partial kernels
constexpr int kMixesPerRole = kMixes / kRoles;  // 4

// Gram pairs of a role: roles 0-3 take two, roles 4-5 one, so the 10 pairs are covered once.
SK_HOST_DEVICE constexpr int role_gram_pairs(int role) { return role < 4 ? 2 : 1; }
SK_HOST_DEVICE constexpr int role_first_gram_pair(int role) { return role < 4 ? 2 * role : role + 4; }

// One role's values over the lane's 8 elements (element-major, stream-minor: a fixed order),
// summed over the warp; lane 0 writes them to the token's partial row. STAGED = 1: the streams
// are 4 copies of x (run_pre), and role 0's one Gram value (sum x^2) is every Gram entry.
template <int ROLE, int STAGED>
SK_DEVICE void reduce_role_values(const float (&w)[kMixesPerRole][STAGED][8], const uint4 (&packed)[STAGED],
                                  float* __restrict__ partial_row) {
  constexpr bool kBroadcast = STAGED == 1;
  constexpr int kGram = kBroadcast ? (ROLE == 0 ? 1 : 0) : role_gram_pairs(ROLE);
  constexpr int kValues = kMixesPerRole + kGram;
  float v[kValues];
#pragma unroll
  for (int i = 0; i < kValues; ++i) v[i] = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float r[STAGED];
#pragma unroll
    for (int s = 0; s < STAGED; ++s) r[s] = bf16_element(packed[s], e);
#pragma unroll
    for (int s = 0; s < STAGED; ++s)
#pragma unroll
      for (int m = 0; m < kMixesPerRole; ++m) v[m] = fmaf(w[m][s][e], r[s], v[m]);
#pragma unroll
    for (int g = 0; g < kGram; ++g) {
      const int pair = kBroadcast ? 0 : role_first_gram_pair(ROLE) + g;
      const int a = kBroadcast ? 0 : gram_stream_a(pair), b = kBroadcast ? 0 : gram_stream_b(pair);
      v[kMixesPerRole + g] = fmaf(r[a], r[b], v[kMixesPerRole + g]);
    }
  }
  warp_sum_each(v);
  if (threadIdx.x % kWarpSize == 0) {
#pragma unroll
    for (int m = 0; m < kMixesPerRole; ++m) partial_row[kMixesPerRole * ROLE + m] = v[m];
    if (kBroadcast) {
      if (kGram > 0) {
#pragma unroll
        for (int p = 0; p < kGramPairs; ++p) partial_row[kGramSlot0 + p] = v[kValues - 1];
      }
    } else {
#pragma unroll
      for (int g = 0; g < kGram; ++g) partial_row[kGramSlot0 + role_first_gram_pair(ROLE) + g] = v[kMixesPerRole + g];
    }
  }
}

// The role's fn slice for this lane: w[m][s][e] = fn[4*role + m][s*H + h + e] (fn: [24, STAGED*H]).
template <int HIDDEN, int STAGED>
SK_DEVICE void load_role_fn(const float* __restrict__ fn, i64 h, float (&w)[kMixesPerRole][STAGED][8]) {
  const int role = static_cast<int>(blockIdx.z);
#pragma unroll
  for (int m = 0; m < kMixesPerRole; ++m)
#pragma unroll
    for (int s = 0; s < STAGED; ++s)
      load_readonly_f32x8(fn + static_cast<i64>(kMixesPerRole * role + m) * (STAGED * HIDDEN) + s * HIDDEN + h, w[m][s]);
}

template <int HIDDEN, int STAGED>
SK_DEVICE void scalar_partial_reduce(const float (&w)[kMixesPerRole][STAGED][8], const uint4 (&packed)[STAGED],
                                     float* __restrict__ partials) {
  float* row = partials + (static_cast<i64>(blockIdx.x) * num_tiles(HIDDEN) + blockIdx.y) * kPartialStride;
  switch (blockIdx.z) {  // roles as template parameters: their Gram pairs index registers statically
    case 0: reduce_role_values<0>(w, packed, row); break;
    case 1: reduce_role_values<1>(w, packed, row); break;
    case 2: reduce_role_values<2>(w, packed, row); break;
    case 3: reduce_role_values<3>(w, packed, row); break;
    case 4: reduce_role_values<4>(w, packed, row); break;
    default: reduce_role_values<5>(w, packed, row); break;
  }
}

SK_DEVICE i64 scalar_lane_h() {
  return static_cast<i64>(blockIdx.y) * kTileH + static_cast<int>(threadIdx.x) * kBf16PerVector;
}

// The bodies of the scalar partial kernels, shared with the fused decode kernels (2c): they
// leave the lane's streams of the tile in `streams` (run_pre: x, the 4 streams being copies).
template <int HIDDEN>
SK_DEVICE void pre_partial_scalar_body(const bf16* __restrict__ x, const float* __restrict__ fn_pre,
                                       bf16* __restrict__ residual_out, float* __restrict__ partials,
                                       uint4 (&streams)[1]) {
  static_assert(HIDDEN % kTileH == 0 && HIDDEN > 0, "hidden must be a positive multiple of 256");
  const i64 token = blockIdx.x, h = scalar_lane_h();
  float w[kMixesPerRole][1][8];
  load_role_fn<HIDDEN, 1>(fn_pre, h, w);
  streams[0] = load_readonly_16B(x + token * HIDDEN + h);
  if (blockIdx.z == 0) {
#pragma unroll
    for (int s = 0; s < kStreams; ++s) store_16B_streaming(residual_out + (token * kStreams + s) * HIDDEN + h, streams[0]);
  }
  scalar_partial_reduce<HIDDEN, 1>(w, streams, partials);
}

template <int HIDDEN>
SK_DEVICE void post_pre_partial_scalar_body(const bf16* __restrict__ x, const bf16* __restrict__ residual,
                                            const float* __restrict__ prev_post, const float* __restrict__ prev_comb,
                                            const float* __restrict__ fn, bf16* __restrict__ residual_out,
                                            float* __restrict__ partials, uint4 (&mixed)[kStreams]) {
  static_assert(HIDDEN % kTileH == 0 && HIDDEN > 0, "hidden must be a positive multiple of 256");
  const i64 token = blockIdx.x, h = scalar_lane_h();
  float w[kMixesPerRole][kStreams][8];
  load_role_fn<HIDDEN, kStreams>(fn, h, w);
  const uint4 xv = load_readonly_16B(x + token * HIDDEN + h);
  uint4 r[kStreams];
#pragma unroll
  for (int s = 0; s < kStreams; ++s) r[s] = load_readonly_16B(residual + (token * kStreams + s) * HIDDEN + h);
#pragma unroll
  for (int j = 0; j < kStreams; ++j) {
    float comb_j[kStreams];
#pragma unroll
    for (int i = 0; i < kStreams; ++i) comb_j[i] = __ldg(prev_comb + kStreams * (kStreams * token + i) + j);
    mixed[j] = mix_back_stream(__ldg(prev_post + kStreams * token + j), comb_j, xv, r);
  }
  if (blockIdx.z == 0) {
#pragma unroll
    for (int s = 0; s < kStreams; ++s) store_16B(residual_out + (token * kStreams + s) * HIDDEN + h, mixed[s]);
  }
  scalar_partial_reduce<HIDDEN, kStreams>(w, mixed, partials);
}

template <int HIDDEN>
__global__ void __launch_bounds__(kWarpSize)
    pre_partial_scalar_kernel(const bf16* __restrict__ x, const float* __restrict__ fn_pre,
                              bf16* __restrict__ residual_out, float* __restrict__ partials) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  uint4 streams[1];
  pre_partial_scalar_body<HIDDEN>(x, fn_pre, residual_out, partials, streams);
}

template <int HIDDEN>
__global__ void __launch_bounds__(kWarpSize)
    post_pre_partial_scalar_kernel(const bf16* __restrict__ x, const bf16* __restrict__ residual,
                                   const float* __restrict__ prev_post, const float* __restrict__ prev_comb,
                                   const float* __restrict__ fn, bf16* __restrict__ residual_out,
                                   float* __restrict__ partials) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  uint4 mixed[kStreams];
  post_pre_partial_scalar_body<HIDDEN>(x, residual, prev_post, prev_comb, fn, residual_out, partials, mixed);
}

}  // namespace mhc
}  // namespace sk
