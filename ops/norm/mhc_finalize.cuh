// norm.mhc: the finalize kernels (3 in the launch contract, norm/mhc.cuh): the token's partial
// rows summed, the gates, Sinkhorn, the norm scale and y; the pieces the fused decode shares.
#pragma once
#include "norm/mhc_common.cuh"

namespace sk {
namespace mhc {

// ---- 3. finalize ----------------------------------------------------------------------------------------

template <typename NormWeight>
struct NormWeightTraits {
  static constexpr bool kFused = true;
};
template <>
struct NormWeightTraits<NoNormWeight> {
  static constexpr bool kFused = false;
};

SK_DEVICE void load_norm_weight(const NoNormWeight*, i64, float (&out)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = 1.0f;
}
SK_DEVICE void load_norm_weight(const bf16* __restrict__ w, i64 h, float (&out)[8]) { load_readonly_bf16x8(w + h, out); }
SK_DEVICE void load_norm_weight(const float* __restrict__ w, i64 h, float (&out)[8]) { load_readonly_f32x8(w + h, out); }

// Streams of the finalize: read the 4 bf16 streams (or x, 4 times over) of one lane's 8 elements.
// BROADCAST with copies != nullptr (run_pre after the projection kernel 2d): also store the 4
// copies of x into copies = residual_out.
template <int HIDDEN, bool BROADCAST>
SK_DEVICE void load_stream_vectors(const bf16* __restrict__ src, i64 token, i64 h, float (&r)[kStreams][8],
                                   bf16* __restrict__ copies) {
  if (BROADCAST) {
    const uint4 bits = load_readonly_16B(src + token * HIDDEN + h);
    if (copies != nullptr) {
#pragma unroll
      for (int s = 0; s < kStreams; ++s) store_16B_streaming(copies + (token * kStreams + s) * HIDDEN + h, bits);
    }
    unpack_bf16x8(bits, r[0]);
#pragma unroll
    for (int s = 1; s < kStreams; ++s)
#pragma unroll
      for (int e = 0; e < 8; ++e) r[s][e] = r[0][e];
  } else {
#pragma unroll
    for (int s = 0; s < kStreams; ++s) load_readonly_bf16x8(src + (token * kStreams + s) * HIDDEN + h, r[s]);
  }
}

// Slot `slot` of a token's S partial rows summed over the tiles, tile 0 first: the one order
// every consumer (finalize, fused decode) uses, so they all get the same bits. COHERENT: the rows
// were written by other CTAs of the running kernel, so read them from L2 (ld.global.cg), never
// through the non-coherent L1 / read-only paths.
template <int HIDDEN, bool COHERENT>
SK_DEVICE float sum_token_partials(const float* __restrict__ token_rows, int slot) {
  const float* column = token_rows + slot;
  float sum = COHERENT ? __ldcg(column) : column[0];
#pragma unroll
  for (int t = 1; t < num_tiles(HIDDEN); ++t)
    sum += COHERENT ? __ldcg(column + t * kPartialStride) : column[t * kPartialStride];
  return sum;
}

// y of one lane's 8 elements (steps 5-6): the collapse fma chain, then (fused norm) the bf16
// rounding of y_pre, the norm scale and the weight; one final rounding.
template <typename NormWeight>
SK_DEVICE uint4 collapse_vector(const float (&pre)[kStreams], float norm_scale, const float (&r)[kStreams][8],
                                const NormWeight* __restrict__ norm_weight, i64 h) {
  float wv[8], out[8];
  load_norm_weight(norm_weight, h, wv);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float y_raw = fmaf(pre[3], r[3][e], fmaf(pre[2], r[2][e], fmaf(pre[1], r[1][e], pre[0] * r[0][e])));
    if (NormWeightTraits<NormWeight>::kFused) {
      const float y_pre = __bfloat162float(__float2bfloat16_rn(y_raw));
      out[e] = (y_pre * norm_scale) * wv[e];
    } else {
      out[e] = y_raw;
    }
  }
  return pack_bf16x8_rn(out);
}

template <int HIDDEN, bool BROADCAST, typename NormWeight>
SK_DEVICE void finalize_body(const bf16* __restrict__ streams, bf16* __restrict__ copies, const float* __restrict__ partials,
                             const float* __restrict__ hc_scale, const float* __restrict__ hc_base,
                             const NormWeight* __restrict__ norm_weight, bf16* __restrict__ y,
                             float* __restrict__ post, float* __restrict__ comb, int num_tokens, int hidden_per_cta,
                             int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps) {
  static_assert(HIDDEN % kTileH == 0 && HIDDEN > 0, "hidden must be a positive multiple of 256");
  constexpr int kTiles = num_tiles(HIDDEN);
  constexpr bool kFuseNorm = NormWeightTraits<NormWeight>::kFused;
  constexpr int kReduced = kMixes + kGramPairs;
  __shared__ float reduced[kReduced];
  __shared__ float shared_pre[kStreams];
  __shared__ float shared_norm_scale;

  const i64 token = blockIdx.x;
  if (token >= num_tokens) return;
  const int tid = static_cast<int>(threadIdx.x);

  if (tid < kReduced) reduced[tid] = sum_token_partials<HIDDEN, false>(partials + token * kTiles * kPartialStride, tid);
  __syncthreads();
  const bool writes_outputs = blockIdx.y == 0;  // one CTA per token writes post and comb
  if (tid == 0) {
    const TokenGates g =
        compute_token_gates<HIDDEN, kFuseNorm>(reduced, hc_scale, hc_base, rms_eps, hc_eps, norm_eps);
#pragma unroll
    for (int s = 0; s < kStreams; ++s) shared_pre[s] = g.pre[s];
    shared_norm_scale = g.norm_scale;
    if (writes_outputs)
      *reinterpret_cast<float4*>(post + kStreams * token) = make_float4(g.post[0], g.post[1], g.post[2], g.post[3]);
  }
  __syncthreads();

  // y does not depend on comb: in the writing CTA the last warp runs Sinkhorn (one lane) while
  // the other warps collapse. No barrier follows.
  constexpr int kWarps = kFinalizeThreads / kWarpSize;
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int y_warps = writes_outputs ? kWarps - 1 : kWarps;
  if (warp >= y_warps) {
    if (lane == 0) store_token_comb<HIDDEN>(reduced, hc_scale, hc_base, sinkhorn_iters, rms_eps, hc_eps, comb, token);
    return;
  }

  float pre[kStreams];
#pragma unroll
  for (int s = 0; s < kStreams; ++s) pre[s] = shared_pre[s];
  const float norm_scale = shared_norm_scale;

  // Collapse (and norm) this CTA's slice: warp w takes the slice's tiles w, w + y_warps, ...
  const int tiles_here = hidden_per_cta / kTileH;
  for (int t = warp; t < tiles_here; t += y_warps) {
    const i64 h = static_cast<i64>(blockIdx.y) * hidden_per_cta + static_cast<i64>(t) * kTileH + lane * kBf16PerVector;
    float r[kStreams][8];
    load_stream_vectors<HIDDEN, BROADCAST>(streams, token, h, r, copies);
    store_16B(y + token * HIDDEN + h, collapse_vector(pre, norm_scale, r, norm_weight, h));
  }
}

template <int HIDDEN, typename NormWeight>
__global__ void __launch_bounds__(kFinalizeThreads)
    pre_finalize_kernel(const bf16* __restrict__ x, bf16* __restrict__ residual_out, const float* __restrict__ partials,
                        const float* __restrict__ hc_scale, const float* __restrict__ hc_base,
                        const NormWeight* __restrict__ norm_weight, bf16* __restrict__ y, float* __restrict__ post,
                        float* __restrict__ comb, int num_tokens, int hidden_per_cta, int sinkhorn_iters,
                        float rms_eps, float hc_eps, float norm_eps) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  finalize_body<HIDDEN, true>(x, residual_out, partials, hc_scale, hc_base, norm_weight, y, post, comb, num_tokens,
                              hidden_per_cta, sinkhorn_iters, rms_eps, hc_eps, norm_eps);
}

template <int HIDDEN, typename NormWeight>
__global__ void __launch_bounds__(kFinalizeThreads)
    post_pre_finalize_kernel(const bf16* __restrict__ residual_out, const float* __restrict__ partials,
                             const float* __restrict__ hc_scale, const float* __restrict__ hc_base,
                             const NormWeight* __restrict__ norm_weight, bf16* __restrict__ y,
                             float* __restrict__ post, float* __restrict__ comb, int num_tokens, int hidden_per_cta,
                             int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  finalize_body<HIDDEN, false>(residual_out, nullptr, partials, hc_scale, hc_base, norm_weight, y, post, comb, num_tokens,
                               hidden_per_cta, sinkhorn_iters, rms_eps, hc_eps, norm_eps);
}

}  // namespace mhc
}  // namespace sk
