// norm.mhc: per-token coefficients of the pre half (gates, Sinkhorn, fused-norm scale), each
// computed by one thread from the token's reduced partials. Math: ops/norm/norm.mhc.md, steps 1-6.
// The gates (what the collapse needs) and comb (Sinkhorn, the long part) are separate so the
// finalize can run Sinkhorn on one warp while the others write y.
//
// One thread, everything in registers: the 4 rows / 4 columns give enough independent work, and
// a round costs two short dependency chains (sum, reciprocal, multiply) instead of shuffles and
// divisions. Reciprocals are the hardware approximation (rcp.approx, ~1 ulp, as upstream uses):
// IEEE division and the correctly rounded reciprocal compile to called subroutines that
// serialise the chains.
#pragma once
#include "common/defs.cuh"

namespace sk {
namespace mhc {

constexpr int kStreams = 4;
constexpr int kMixes = 24;          // pre [0,4), post [4,8), comb [8,24) row-major comb[i][j]
constexpr int kGramPairs = 10;      // (0,0) (1,1) (2,2) (3,3) (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
constexpr int kGramSlot0 = kMixes;  // partial-row slot of Gram pair 0

SK_HOST_DEVICE constexpr int gram_stream_a(int pair) { return pair < 4 ? pair : pair < 7 ? 0 : pair < 9 ? 1 : 2; }
SK_HOST_DEVICE constexpr int gram_stream_b(int pair) {
  return pair < 4 ? pair : pair == 4 ? 1 : pair == 5 ? 2 : pair == 6 ? 3 : pair == 7 ? 2 : 3;
}

// What the collapse of one token needs, plus the post gate. Identical in every CTA that computes
// it from the same reduced partials (same code, same order).
struct TokenGates {
  float pre[kStreams];
  float post[kStreams];
  float norm_scale;  // 1 when no norm is fused
};

SK_DEVICE float fast_reciprocal(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

SK_DEVICE float sigmoid(float z) { return fast_reciprocal(1.0f + expf(-z)); }

// Step 1: 1/RMS over the 4H flattened streams; the sum of squares is the Gram trace.
// HIDDEN is a template parameter so 1/(4H) and 1/H are constants (multiplies, not divisions).
template <int HIDDEN>
SK_DEVICE float flat_inv_rms(const float* reduced, float rms_eps) {
  constexpr float kInvFlatLength = 1.0f / static_cast<float>(kStreams * HIDDEN);
  const float sum_sq = (reduced[kGramSlot0 + 0] + reduced[kGramSlot0 + 1]) +
                       (reduced[kGramSlot0 + 2] + reduced[kGramSlot0 + 3]);
  return rsqrtf(fmaf(sum_sq, kInvFlatLength, rms_eps));
}

// Steps 1, 3 and 6. reduced: the token's 34 summed partials (24 dots, then 10 Gram entries).
template <int HIDDEN, bool FUSE_NORM>
SK_DEVICE TokenGates compute_token_gates(const float* reduced, const float* __restrict__ hc_scale,
                                         const float* __restrict__ hc_base, float rms_eps, float hc_eps,
                                         float norm_eps) {
  constexpr float kInvHidden = 1.0f / static_cast<float>(HIDDEN);
  TokenGates g;
  const float inv_rms = flat_inv_rms<HIDDEN>(reduced, rms_eps);
  const float scale_pre = hc_scale[0], scale_post = hc_scale[1];
#pragma unroll
  for (int s = 0; s < kStreams; ++s) {
    g.pre[s] = sigmoid(fmaf(reduced[s] * inv_rms, scale_pre, hc_base[s])) + hc_eps;
    g.post[s] = 2.0f * sigmoid(fmaf(reduced[kStreams + s] * inv_rms, scale_post, hc_base[kStreams + s]));
  }
  // Fused RMSNorm scale from the Gram matrix: sum_h y_raw^2 = pre^T G pre.
  g.norm_scale = 1.0f;
  if (FUSE_NORM) {
    float diagonal = 0.0f, off_diagonal = 0.0f;
#pragma unroll
    for (int pair = 0; pair < kGramPairs; ++pair) {
      const float term = g.pre[gram_stream_a(pair)] * g.pre[gram_stream_b(pair)] * reduced[kGramSlot0 + pair];
      if (pair < kStreams) diagonal += term;
      else off_diagonal += term;
    }
    g.norm_scale = rsqrtf(fmaf(fmaf(2.0f, off_diagonal, diagonal), kInvHidden, norm_eps));
  }
  return g;
}

// Row step (divide every row by its sum + eps), then column step. FIRST_ROUND skips the row
// step: the softmax has normalised the rows already.
template <bool FIRST_ROUND>
SK_DEVICE void sinkhorn_round(float (&c)[kStreams][kStreams], float eps) {
  if (!FIRST_ROUND) {
#pragma unroll
    for (int i = 0; i < kStreams; ++i) {
      const float inv = fast_reciprocal(((c[i][0] + c[i][1]) + (c[i][2] + c[i][3])) + eps);
#pragma unroll
      for (int j = 0; j < kStreams; ++j) c[i][j] *= inv;
    }
  }
#pragma unroll
  for (int j = 0; j < kStreams; ++j) {
    const float inv = fast_reciprocal(((c[0][j] + c[1][j]) + (c[2][j] + c[3][j])) + eps);
#pragma unroll
    for (int i = 0; i < kStreams; ++i) c[i][j] *= inv;
  }
}

// Step 4: comb[i][j] (source i -> destination j): row softmax + eps, then Sinkhorn rounds.
template <int HIDDEN>
SK_DEVICE void compute_token_comb(const float* reduced, const float* __restrict__ hc_scale,
                                  const float* __restrict__ hc_base, int sinkhorn_iters, float rms_eps, float hc_eps,
                                  float (&c)[kStreams][kStreams]) {
  const float inv_rms = flat_inv_rms<HIDDEN>(reduced, rms_eps);
  const float scale_comb = hc_scale[2];
#pragma unroll
  for (int i = 0; i < kStreams; ++i) {
    float logit[kStreams];
#pragma unroll
    for (int j = 0; j < kStreams; ++j) {
      const int m = 2 * kStreams + kStreams * i + j;
      logit[j] = fmaf(reduced[m] * inv_rms, scale_comb, hc_base[m]);
    }
    const float row_max = fmaxf(fmaxf(logit[0], logit[1]), fmaxf(logit[2], logit[3]));
#pragma unroll
    for (int j = 0; j < kStreams; ++j) logit[j] = expf(logit[j] - row_max);
    const float inv = fast_reciprocal((logit[0] + logit[1]) + (logit[2] + logit[3]));
#pragma unroll
    for (int j = 0; j < kStreams; ++j) c[i][j] = fmaf(logit[j], inv, hc_eps);
  }
  sinkhorn_round<true>(c, hc_eps);
  for (int round = 1; round < sinkhorn_iters; ++round) sinkhorn_round<false>(c, hc_eps);
}

// compute_token_comb, stored as token `token`'s 4 rows of comb (one float4 per row).
template <int HIDDEN>
SK_DEVICE void store_token_comb(const float* reduced, const float* __restrict__ hc_scale,
                                const float* __restrict__ hc_base, int sinkhorn_iters, float rms_eps, float hc_eps,
                                float* __restrict__ comb, int token) {
  float c[kStreams][kStreams];
  compute_token_comb<HIDDEN>(reduced, hc_scale, hc_base, sinkhorn_iters, rms_eps, hc_eps, c);
#pragma unroll
  for (int i = 0; i < kStreams; ++i)
    *reinterpret_cast<float4*>(comb + kStreams * (kStreams * token + i)) = make_float4(c[i][0], c[i][1], c[i][2], c[i][3]);
}

}  // namespace mhc
}  // namespace sk
