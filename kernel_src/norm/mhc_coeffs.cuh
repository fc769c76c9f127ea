// norm.mhc: per-token coefficients of the pre half (gates, Sinkhorn, fused-norm scale), computed
// by one warp from the token's reduced partials. Math: docs/ops/norm.mhc.md, steps 1-6.
#pragma once
#include "common/defs.cuh"
#include "common/reduce.cuh"

namespace sk {
namespace mhc {

constexpr int kStreams = 4;
constexpr int kMixes = 24;       // pre [0,4), post [4,8), comb [8,24) row-major comb[i][j]
constexpr int kGramPairs = 10;   // (0,0) (1,1) (2,2) (3,3) (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
constexpr int kGramSlot0 = kMixes;  // partial-row slot of Gram pair 0

SK_HOST_DEVICE constexpr int gram_stream_a(int pair) { return pair < 4 ? pair : pair < 7 ? 0 : pair < 9 ? 1 : 2; }
SK_HOST_DEVICE constexpr int gram_stream_b(int pair) {
  return pair < 4 ? pair : pair == 4 ? 1 : pair == 5 ? 2 : pair == 6 ? 3 : pair == 7 ? 2 : 3;
}

// What the collapse of one token needs; identical in every CTA that computes it from the same
// reduced partials (same code, same order).
struct TokenCoeffs {
  float pre[kStreams];
  float norm_scale;  // 1 when no norm is fused
};

// Called by all 32 lanes of one warp. reduced: the token's 34 summed partials (24 projection
// dots, 10 Gram entries), readable by every lane (shared memory). post_out [4] / comb_out [16]:
// written when non-null. Every lane returns the same coefficients.
template <bool FUSE_NORM>
SK_DEVICE TokenCoeffs compute_token_coeffs(const float* reduced, const float* __restrict__ hc_scale,
                                           const float* __restrict__ hc_base, int hidden, int sinkhorn_iters,
                                           float rms_eps, float hc_eps, float norm_eps, float* __restrict__ post_out,
                                           float* __restrict__ comb_out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;

  // 1. RMS over the 4H flattened streams: the sum of squares is the Gram trace.
  const float sum_sq = ((reduced[kGramSlot0 + 0] + reduced[kGramSlot0 + 1]) + reduced[kGramSlot0 + 2]) +
                       reduced[kGramSlot0 + 3];
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(kStreams * hidden) + rms_eps);

  // 3. Gates: lanes 0-3 pre, lanes 4-7 post.
  float gate = 0.0f;
  if (lane < 8) {
    const float logit = fmaf(reduced[lane] * inv_rms, hc_scale[lane < 4 ? 0 : 1], hc_base[lane]);
    const float sigmoid = 1.0f / (1.0f + expf(-logit));
    gate = lane < 4 ? sigmoid + hc_eps : 2.0f * sigmoid;
    if (lane >= 4 && post_out != nullptr) post_out[lane - 4] = gate;
  }

  // 4. comb: lane 4i+j holds C[i][j] (lanes 16-31 mirror 0-15 so every shuffle is full-warp).
  // Rows are lanes differing in bits 0-1, columns lanes differing in bits 2-3.
  const int c_idx = lane & 15;
  const float c_logit = fmaf(reduced[8 + c_idx] * inv_rms, hc_scale[2], hc_base[8 + c_idx]);
  const float e = expf(c_logit - butterfly_max<1, 2>(c_logit));
  float c = e / butterfly_sum<1, 2>(e) + hc_eps;
  c = c / (butterfly_sum<4, 8>(c) + hc_eps);
  for (int round = 1; round < sinkhorn_iters; ++round) {
    c = c / (butterfly_sum<1, 2>(c) + hc_eps);
    c = c / (butterfly_sum<4, 8>(c) + hc_eps);
  }
  if (lane < 16 && comb_out != nullptr) comb_out[lane] = c;

  TokenCoeffs coeffs;
#pragma unroll
  for (int s = 0; s < kStreams; ++s) coeffs.pre[s] = __shfl_sync(kFullWarpMask, gate, s);

  // 6. Fused RMSNorm scale from the Gram matrix: sum_h y_raw^2 = pre^T G pre.
  coeffs.norm_scale = 1.0f;
  if (FUSE_NORM) {
    float term = 0.0f;
#pragma unroll
    for (int pair = 0; pair < kGramPairs; ++pair) {
      if (lane == pair) {
        const float weight = pair < 4 ? 1.0f : 2.0f;  // off-diagonal entries count twice
        term = weight * coeffs.pre[gram_stream_a(pair)] * coeffs.pre[gram_stream_b(pair)] * reduced[kGramSlot0 + pair];
      }
    }
    const float sum_y_sq = warp_sum(term);
    coeffs.norm_scale = rsqrtf(sum_y_sq / static_cast<float>(hidden) + norm_eps);
  }
  return coeffs;
}

}  // namespace mhc
}  // namespace sk
