// attention.paged / attention.varlen: the split-KV merge kernel. Folds the partial (output, LSE)
// pairs of every token of a split request into the final output row and LSE.
// Contract: ops/attention/attention.md.
//
// LAUNCH CONTRACT
//   template <typename T, int DVO>   T: __nv_bfloat16 / __half (the output type); DVO % 64 == 0
//   __global__ void sk::attn::merge<T, DVO>(const __grid_constant__ sk_attn_params p)
//   grid = (any >= 1, 1, 1), block = (SK_ATTN_MERGE_THREADS = 128, 1, 1): warp w of CTA b takes
//   the (merge row, q head) pairs 4b + w, 4b + w + 4 gridDim.x, ... below the live count
//   (rows x Hq), 8 partial rows in flight per lane; no dynamic shared memory.
//   reads   the scratch header and merge rows (attention/schedule.cuh), the partial rows and
//           LSEs (attention/attention.cuh), sinks
//   writes  out[token, head, :] and lse[token, head] of every merge row (the rows the attention
//           kernel left to it; nothing when nothing was split), and zeroes the header's unit
//           counter (so a work list may serve several attention launches, see attention.md)
//   Must run after the attention kernel on the same scratch (stream order or PDL).
//
// Rule (base 2, -inf partials skipped): M = max(lse_c [, sink * log2 e]); w_c = 2^(lse_c - M);
// D = sum w_c [+ 2^(sink2 - M)]; out = sum w_c o_c / D; lse = M + log2 D (-inf, out 0: no key
// and no sink). The partials are already normalised by their own sums.
#pragma once
#include "attention/device.cuh"
#include "attention/layout.cuh"
#include "common/defs.cuh"
#include "common/sync.cuh"

namespace sk {
namespace attn {

template <int VEC>
SK_DEVICE void load_vec(const float* src, float (&v)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; i += 4) {
    if (VEC - i >= 4) {
      const float4 x = *reinterpret_cast<const float4*>(src + i);
      v[i] = x.x, v[i + 1] = x.y, v[i + 2] = x.z, v[i + 3] = x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(src + i);
      v[i] = x.x, v[i + 1] = x.y;
    }
  }
}

template <typename T, int DVO>
__global__ void __launch_bounds__(SK_ATTN_MERGE_THREADS) merge(const __grid_constant__ sk_attn_params p) {
  constexpr int VEC = DVO / 32;  // output values per lane
  constexpr int WARPS = SK_ATTN_MERGE_THREADS / 32;
  constexpr int UNROLL = 8;      // partial rows in flight per lane
  static_assert(DVO % 64 == 0 && DVO <= 512, "DVO");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  pdl_wait_for_previous();
  pdl_launch_dependents();

  int* hdr = region<int>(p, SK_ATTN_R_HEADER, DVO);
  // The attention kernel is done with the unit counter: zero it, so that the next attention launch
  // on this scratch may reuse the work list without another scheduler run (same lengths).
  if (blockIdx.x == 0 && threadIdx.x == 0) hdr[SK_ATTN_HDR_COUNTER] = 0;
  const int4* rows = region<const int4>(p, SK_ATTN_R_MERGE, DVO);
  const float* part_o = region<const float>(p, SK_ATTN_R_PART_O, DVO);
  const float* part_lse = region<const float>(p, SK_ATTN_R_PART_LSE, DVO);
  const int hq = p.num_heads_q;
  const long long pairs = (long long)hdr[SK_ATTN_HDR_MERGE_ROWS] * hq;

  // One warp per (merge row, q head).
  for (long long wi = (long long)blockIdx.x * WARPS + warp; wi < pairs; wi += (long long)gridDim.x * WARPS) {
    const int j = (int)(wi / hq), h = (int)(wi - (long long)j * hq);
    const int4 e = rows[j];  // token, first partial row, chunks, request
    const float* lse_h = part_lse + (long long)e.y * hq + h;
    float mx = SK_ATTN_NEG_INF;
    for (int c = lane; c < e.z; c += 32) mx = fmaxf(mx, lse_h[(long long)c * hq]);
#pragma unroll
    for (int d = 16; d >= 1; d /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
    const float s2 = p.sinks ? p.sinks[h] * kLog2e : SK_ATTN_NEG_INF;
    const float top = fmaxf(mx, s2), mu = top == SK_ATTN_NEG_INF ? 0.0f : top;
    float acc[VEC], den = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = 0.0f;
    // A -inf partial (no key in its chunk) weighs 0; its stored output is 0.
    const float* o_h = part_o + ((long long)e.y * hq + h) * DVO + lane * VEC;
    for (int c0 = 0; c0 < e.z; c0 += UNROLL) {
      float w[UNROLL], v[UNROLL][VEC];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + u < e.z ? c0 + u : e.z - 1;  // in range: the surplus weighs 0 below
        w[u] = c0 + u < e.z ? fast_exp2(lse_h[(long long)c * hq] - mu) : 0.0f;
        load_vec<VEC>(o_h + (long long)c * hq * DVO, v[u]);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        den += w[u];
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[i] += w[u] * v[u][i];
      }
    }
    if (p.sinks) den += fast_exp2(s2 - mu);
    const float inv = den > 0.0f ? __fdividef(1.0f, den) : 0.0f;
    T* dst = static_cast<T*>(p.out) + ((long long)e.x * hq + h) * DVO + lane * VEC;
#pragma unroll
    for (int i = 0; i < VEC; i += 2) store2<T>(dst + i, acc[i] * inv, acc[i + 1] * inv);
    if (p.lse && lane == 0) {
      const float lse2 = den > 0.0f ? mu + fast_log2(den) : SK_ATTN_NEG_INF;
      p.lse[(long long)e.x * hq + h] = p.lse_natural ? lse2 * kLn2 : lse2;
    }
  }
}

}  // namespace attn
}  // namespace sk
