// norm.mhc — fused RMSNorm + hyper-connection residual (DeepSeek-V4 mHC), BF16.
// Math and scratch layout: docs/ops/norm.mhc.md. Reference: tests/ref/mhc.{h,c}.
//
// ============================================ LAUNCH CONTRACT ============================================
// Common to every kernel:
//   bf16 = __nv_bfloat16. T = num_tokens >= 1 (launch nothing for T = 0). H = HIDDEN, a multiple of 256.
//   S = H / 256 (hidden tiles). All tensors dense row-major, contiguous, and 16-byte aligned
//   (cudaMalloc / cuMemAlloc give 256). No output may alias an input or another output.
//   Scalars: the eps values as fp32, sinkhorn_iters as int (host rejects < 1; the kernels treat < 1
//   as 1). No dynamic shared memory anywhere (pass 0). Deterministic: no atomics, fixed-order
//   reductions; bits do not depend on tokens_per_cta, the warps per partial CTA or hidden_per_cta.
//
// Scratch: partials fp32 [T_max][S][36] (kPartialStride), scratch_bytes = T_max * S * 36 * 4.
//   Needs no initialisation; the partial kernel writes every slot the finalize reads.
//
// run_post   = post_kernel
// run_pre    = pre_partial_kernel      -> pre_finalize_kernel        (same stream, in order)
// run_post_pre = post_pre_partial_kernel -> post_pre_finalize_kernel (same stream, in order)
//
// 1. template <int HIDDEN> __global__ void post_kernel(
//        const bf16* x,           // [T, H]
//        const bf16* residual,    // [T, 4, H]
//        const float* post,       // [T, 4]    (a [T, 4, 1] tensor is the same memory)
//        const float* comb,       // [T, 4, 4]
//        bf16* out,               // [T, 4, H]   written: all
//        int num_tokens);
//    block = exactly 128 threads (kPostThreads); grid = (ceil(T * S / 4), 1, 1).
//    Measured (H200): ~4.2 TB/s at T = 4096; 1.4 us at T = 1 (launch-bound).
//
// 2. template <int HIDDEN> __global__ void pre_partial_kernel(
//        const bf16* x,           // [T, H]
//        const float* fn_pre,     // [24, H]  = sum over the 4 stream blocks of fn [24, 4H]
//        bf16* residual_out,      // [T, 4, H]   written: all (4 copies of x)
//        float* partials,         // scratch     written: rows [0, T) x [0, S), slots 0..33
//        int num_tokens, int tokens_per_cta);
//    template <int HIDDEN> __global__ void post_pre_partial_kernel(
//        const bf16* x,           // [T, H]
//        const bf16* residual,    // [T, 4, H]
//        const float* prev_post,  // [T, 4]
//        const float* prev_comb,  // [T, 4, 4]
//        const float* fn,         // [24, 4H]
//        bf16* residual_out,      // [T, 4, H]   written: all (the mix-back)
//        float* partials,         // scratch     written: rows [0, T) x [0, S), slots 0..33
//        int num_tokens, int tokens_per_cta);
//    W = warps per CTA in {1, 2, 3, 6}; block = exactly 32 * W threads;
//    grid = (ceil(T / tokens_per_cta), S, 6 / W)      (blockDim.x * gridDim.z must be 192).
//    Warp w of CTA (bx, tile, z) plays role z * W + w (mixes 4*role .. 4*role+3 and its Gram
//    entries); role group z = 0 also stores residual_out.
//    tokens_per_cta >= 1: how many tokens one CTA walks (fn is read once per CTA; larger = less
//    fn traffic, fewer CTAs). Suggested: decode (T <= 16): W = 1, tokens_per_cta = 1;
//    otherwise W = 6 and tokens_per_cta = clamp(ceil(T * S / (2 * num_SMs)), 1, 64).
//    Static shared memory: 24 KiB (post_pre), 6 KiB (pre).
//
// 3. template <int HIDDEN, typename NormWeight> __global__ void pre_finalize_kernel(
//        const bf16* x,           // [T, H]  (the streams are 4 copies of x)
//        ... the rest as post_pre_finalize_kernel ...);
//    template <int HIDDEN, typename NormWeight> __global__ void post_pre_finalize_kernel(
//        const bf16* residual_out,     // [T, 4, H]  (from post_pre_partial_kernel)
//        const float* partials,        // scratch, as the partial kernel left it
//        const float* hc_scale,        // [3]
//        const float* hc_base,         // [24]
//        const NormWeight* norm_weight,// [H]; NormWeight = __nv_bfloat16 or float; NoNormWeight: nullptr
//        bf16* y,                      // [T, H]      written: all
//        float* post,                  // [T, 4]      written: all
//        float* comb,                  // [T, 4, 4]   written: all
//        int num_tokens, int hidden_per_cta, int sinkhorn_iters,
//        float rms_eps, float hc_eps, float norm_eps);   // norm_eps unused without a norm weight
//    block = exactly 128 threads (kFinalizeThreads); grid = (T, H / hidden_per_cta, 1);
//    CTA (token, 0) writes post and comb (its last warp runs Sinkhorn while the others write y).
//    hidden_per_cta: a multiple of 256 dividing H. Suggested: H when T >= 2 * num_SMs / (H/1024),
//    else the largest of 1024 / 512 / 256 that divides H (decode: several CTAs per token).
//    Static shared memory < 256 B.
//    Must start after the partial kernel of the same call has finished (stream order is enough).
//
// Grid limits: grid.x is at most 2^31 - 1 (T), grid.y = S or H / hidden_per_cta (< 65536).
// Measured on an H200 (sm_90a build; SM120 numbers pending), H = 4096, CUDA-graph replay:
//   decode T = 1: post_pre 5.3 us (partial 2.1 + finalize 3.2), pre 4.9 us, post 1.4 us.
//   prefill T = 4096: post_pre 390 us (partial ~345, instruction-bound), pre 112 us, post 73 us.
// ==========================================================================================================
#pragma once
#include <cuda_bf16.h>

#include "common/defs.cuh"
#include "common/reduce.cuh"
#include "norm/bf16x8.cuh"
#include "norm/mhc_coeffs.cuh"

namespace sk {
namespace mhc {

typedef __nv_bfloat16 bf16;

constexpr int kLanesPerTile = kWarpSize;
constexpr int kTileH = kLanesPerTile * kBf16PerVector;  // 256 hidden elements: one warp, 16 B per lane
constexpr int kPartialStride = 36;                      // floats per (token, tile) row: 24 dots, 10 Gram, 2 pad
constexpr int kRoles = 6;                               // mix groups of the partial kernels
constexpr int kMixesPerRole = kMixes / kRoles;          // 4
constexpr int kPartialMaxThreads = kRoles * kWarpSize;  // 192
constexpr int kTokenBatch = 12;                         // tokens staged at once (a multiple of every W)
constexpr int kPostThreads = 128;
constexpr int kFinalizeThreads = 128;

// Tag for "no RMSNorm fused into y" (the norm_weight argument is then nullptr).
struct NoNormWeight {};

SK_HOST_DEVICE constexpr int num_tiles(int hidden) { return hidden / kTileH; }

// Gram pairs of a role: roles 0-3 take two, roles 4-5 one, so the 10 pairs are covered once.
SK_HOST_DEVICE constexpr int role_gram_pairs(int role) { return role < 4 ? 2 : 1; }
SK_HOST_DEVICE constexpr int role_first_gram_pair(int role) { return role < 4 ? 2 * role : role + 4; }

SK_DEVICE i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

// ---- mix-back (post) of one lane's 8 elements -------------------------------------------------------

struct MixBackCoeffs {
  float post[kStreams];
  float comb[kStreams * kStreams];  // comb[i][j]: source stream i -> destination stream j
};

SK_DEVICE MixBackCoeffs load_mix_back_coeffs(const float* __restrict__ post, const float* __restrict__ comb,
                                             i64 token) {
  MixBackCoeffs m;
  const float4 p = load_readonly_f32x4(post + kStreams * token);
  m.post[0] = p.x; m.post[1] = p.y; m.post[2] = p.z; m.post[3] = p.w;
#pragma unroll
  for (int i = 0; i < kStreams; ++i) {
    const float4 row = load_readonly_f32x4(comb + kStreams * kStreams * token + kStreams * i);
    m.comb[4 * i + 0] = row.x; m.comb[4 * i + 1] = row.y; m.comb[4 * i + 2] = row.z; m.comb[4 * i + 3] = row.w;
  }
  return m;
}

// out[j] = bf16(post[j]*x + sum_i comb[i][j]*r[i]) as one fma chain (fixed order, one rounding).
SK_DEVICE void mix_back_vector(const MixBackCoeffs& m, const float (&x)[8], const float (&r)[kStreams][8],
                               uint4 (&out_bits)[kStreams]) {
#pragma unroll
  for (int j = 0; j < kStreams; ++j) {
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float acc = m.post[j] * x[e];
#pragma unroll
      for (int i = 0; i < kStreams; ++i) acc = fmaf(m.comb[4 * i + j], r[i][e], acc);
      v[e] = acc;
    }
    out_bits[j] = pack_bf16x8_rn(v);
  }
}

// ---- 1. post ------------------------------------------------------------------------------------------

template <int HIDDEN>
__global__ void __launch_bounds__(kPostThreads)
    post_kernel(const bf16* __restrict__ x, const bf16* __restrict__ residual, const float* __restrict__ post,
                const float* __restrict__ comb, bf16* __restrict__ out, int num_tokens) {
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

// ---- 2. partials ----------------------------------------------------------------------------------------
//
// CTA (token block, tile, role group). Warp w of the CTA plays role blockIdx.z * W + w: mixes
// 4*role .. 4*role+3 and its Gram pairs, for every token of the block. Tokens go through shared
// memory in batches of kTokenBatch: the CTA's warps stage the batch's streams (computing and,
// in role group 0, storing residual_out), then every warp reduces its values for each token.

// bf16 element e of a packed 16-byte vector, widened exactly to fp32.
SK_DEVICE float bf16_element(const uint4& v, int e) {
  const u32 word = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
  return __uint_as_float((e & 1) ? (word & 0xffff0000u) : (word << 16));
}

// Input side of the partial kernels: what "the 4 streams of a tile" are.
template <int HIDDEN>
struct BroadcastStreams {  // run_pre: the 4 streams are copies of x
  static constexpr int kStaged = 1;        // vectors staged per lane and token
  static constexpr int kProjCols = HIDDEN; // columns of fn_pre
  const bf16* __restrict__ x;

  SK_DEVICE void stage(i64 token, i64 h, bool store, bf16* __restrict__ residual_out, uint4 (&staged)[kStaged]) const {
    const uint4 v = load_readonly_16B(x + token * HIDDEN + h);
    staged[0] = v;
    if (store) {
#pragma unroll
      for (int s = 0; s < kStreams; ++s) store_16B(residual_out + (token * kStreams + s) * HIDDEN + h, v);
    }
  }
};

template <int HIDDEN>
struct MixedBackStreams {  // run_post_pre: the streams are the mix-back of residual and x
  static constexpr int kStaged = kStreams;
  static constexpr int kProjCols = kStreams * HIDDEN;
  const bf16* __restrict__ x;
  const bf16* __restrict__ residual;
  const float* __restrict__ prev_post;
  const float* __restrict__ prev_comb;

  // Computes one output stream at a time from the packed inputs: a small live set next to the
  // fn slice the calling warp keeps in registers. Same fma chain as mix_back_vector (same bits).
  SK_DEVICE void stage(i64 token, i64 h, bool store, bf16* __restrict__ residual_out, uint4 (&staged)[kStaged]) const {
    const uint4 xv = load_readonly_16B(x + token * HIDDEN + h);
    uint4 r[kStreams];
#pragma unroll
    for (int s = 0; s < kStreams; ++s) r[s] = load_readonly_16B(residual + (token * kStreams + s) * HIDDEN + h);
#pragma unroll
    for (int j = 0; j < kStreams; ++j) {
      const float post_j = __ldg(prev_post + kStreams * token + j);
      float comb_j[kStreams];
#pragma unroll
      for (int i = 0; i < kStreams; ++i) comb_j[i] = __ldg(prev_comb + kStreams * (kStreams * token + i) + j);
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float acc = post_j * bf16_element(xv, e);
#pragma unroll
        for (int i = 0; i < kStreams; ++i) acc = fmaf(comb_j[i], bf16_element(r[i], e), acc);
        v[e] = acc;
      }
      staged[j] = pack_bf16x8_rn(v);
    }
    if (store) {
#pragma unroll
      for (int s = 0; s < kStreams; ++s) store_16B(residual_out + (token * kStreams + s) * HIDDEN + h, staged[s]);
    }
  }
};

// One role's work on one token of one tile: 4 projection dots (+ its Gram pairs) over the lane's
// 8 elements (element-major, stream-minor: a fixed order), then summed over the warp; lane 0
// writes them to the token's partial row. The streams stay packed and are widened as used, so
// only the fn slice occupies many registers.
template <int ROLE, int STAGED>
SK_DEVICE void reduce_role_values(const float (&w)[kMixesPerRole][STAGED][8], const uint4 (&packed)[STAGED],
                                  float* __restrict__ partial_row) {
  constexpr bool kBroadcast = STAGED == 1;
  // Broadcast streams: role 0 computes sum x^2, which is every Gram entry.
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

template <int HIDDEN, class Streams>
SK_DEVICE void partial_body(const Streams& streams, const float* __restrict__ fn, bf16* __restrict__ residual_out,
                            float* __restrict__ partials, int num_tokens, int tokens_per_cta) {
  static_assert(HIDDEN % kTileH == 0 && HIDDEN > 0, "hidden must be a positive multiple of 256");
  constexpr int kTiles = num_tiles(HIDDEN);
  constexpr int kStaged = Streams::kStaged;
  __shared__ uint4 staged[kTokenBatch][kStaged][kLanesPerTile];

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  const int role = static_cast<int>(blockIdx.z) * warps + warp;
  const int tile = static_cast<int>(blockIdx.y);
  const i64 h = static_cast<i64>(tile) * kTileH + lane * kBf16PerVector;
  const bool stores_streams = blockIdx.z == 0;  // one role group writes residual_out
  const i64 first_token = static_cast<i64>(blockIdx.x) * tokens_per_cta;
  const i64 end_token = min_i64(first_token + tokens_per_cta, num_tokens);

  // The role's slice of the projection, kept in registers for every token of the CTA:
  // w[m][s][e] = fn[4*role + m][s*H + h + e].
  float w[kMixesPerRole][kStaged][8];
#pragma unroll
  for (int m = 0; m < kMixesPerRole; ++m)
#pragma unroll
    for (int s = 0; s < kStaged; ++s)
      load_readonly_f32x8(fn + static_cast<i64>(kMixesPerRole * role + m) * Streams::kProjCols + s * HIDDEN + h,
                          w[m][s]);

  for (i64 batch_begin = first_token; batch_begin < end_token; batch_begin += kTokenBatch) {
    const int batch = static_cast<int>(min_i64(kTokenBatch, end_token - batch_begin));
    for (int i = warp; i < batch; i += warps) {
      uint4 v[kStaged];
      streams.stage(batch_begin + i, h, stores_streams, residual_out, v);
#pragma unroll
      for (int s = 0; s < kStaged; ++s) staged[i][s][lane] = v[s];
    }
    __syncthreads();
    for (int i = 0; i < batch; ++i) {
      uint4 r[kStaged];
#pragma unroll
      for (int s = 0; s < kStaged; ++s) r[s] = staged[i][s][lane];
      float* row = partials + ((batch_begin + i) * kTiles + tile) * kPartialStride;
      switch (role) {  // roles as template parameters: their Gram pairs index registers statically
        case 0: reduce_role_values<0>(w, r, row); break;
        case 1: reduce_role_values<1>(w, r, row); break;
        case 2: reduce_role_values<2>(w, r, row); break;
        case 3: reduce_role_values<3>(w, r, row); break;
        case 4: reduce_role_values<4>(w, r, row); break;
        default: reduce_role_values<5>(w, r, row); break;
      }
    }
    __syncthreads();  // the next batch overwrites staged
  }
}

template <int HIDDEN>
__global__ void __launch_bounds__(kPartialMaxThreads)
    pre_partial_kernel(const bf16* __restrict__ x, const float* __restrict__ fn_pre, bf16* __restrict__ residual_out,
                       float* __restrict__ partials, int num_tokens, int tokens_per_cta) {
  partial_body<HIDDEN>(BroadcastStreams<HIDDEN>{x}, fn_pre, residual_out, partials, num_tokens, tokens_per_cta);
}

template <int HIDDEN>
__global__ void __launch_bounds__(kPartialMaxThreads)
    post_pre_partial_kernel(const bf16* __restrict__ x, const bf16* __restrict__ residual,
                            const float* __restrict__ prev_post, const float* __restrict__ prev_comb,
                            const float* __restrict__ fn, bf16* __restrict__ residual_out,
                            float* __restrict__ partials, int num_tokens, int tokens_per_cta) {
  partial_body<HIDDEN>(MixedBackStreams<HIDDEN>{x, residual, prev_post, prev_comb}, fn, residual_out, partials,
                       num_tokens, tokens_per_cta);
}

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
template <int HIDDEN, bool BROADCAST>
SK_DEVICE void load_stream_vectors(const bf16* __restrict__ src, i64 token, i64 h, float (&r)[kStreams][8]) {
  if (BROADCAST) {
    load_readonly_bf16x8(src + token * HIDDEN + h, r[0]);
#pragma unroll
    for (int s = 1; s < kStreams; ++s)
#pragma unroll
      for (int e = 0; e < 8; ++e) r[s][e] = r[0][e];
  } else {
#pragma unroll
    for (int s = 0; s < kStreams; ++s) load_readonly_bf16x8(src + (token * kStreams + s) * HIDDEN + h, r[s]);
  }
}

template <int HIDDEN, bool BROADCAST, typename NormWeight>
SK_DEVICE void finalize_body(const bf16* __restrict__ streams, const float* __restrict__ partials,
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

  // Sum the token's tile rows, tile 0 first: the same order in every CTA of the token.
  if (tid < kReduced) {
    const float* column = partials + token * kTiles * kPartialStride + tid;
    float sum = column[0];
#pragma unroll
    for (int t = 1; t < kTiles; ++t) sum += column[t * kPartialStride];
    reduced[tid] = sum;
  }
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
    if (lane == 0) {
      float c[kStreams][kStreams];
      compute_token_comb<HIDDEN>(reduced, hc_scale, hc_base, sinkhorn_iters, rms_eps, hc_eps, c);
#pragma unroll
      for (int i = 0; i < kStreams; ++i)
        *reinterpret_cast<float4*>(comb + kStreams * (kStreams * token + i)) =
            make_float4(c[i][0], c[i][1], c[i][2], c[i][3]);
    }
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
    float r[kStreams][8], wv[8], out[8];
    load_stream_vectors<HIDDEN, BROADCAST>(streams, token, h, r);
    load_norm_weight(norm_weight, h, wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float y_raw = fmaf(pre[3], r[3][e], fmaf(pre[2], r[2][e], fmaf(pre[1], r[1][e], pre[0] * r[0][e])));
      if (kFuseNorm) {
        const float y_pre = __bfloat162float(__float2bfloat16_rn(y_raw));
        out[e] = (y_pre * norm_scale) * wv[e];
      } else {
        out[e] = y_raw;
      }
    }
    store_16B(y + token * HIDDEN + h, pack_bf16x8_rn(out));
  }
}

template <int HIDDEN, typename NormWeight>
__global__ void __launch_bounds__(kFinalizeThreads)
    pre_finalize_kernel(const bf16* __restrict__ x, const float* __restrict__ partials,
                        const float* __restrict__ hc_scale, const float* __restrict__ hc_base,
                        const NormWeight* __restrict__ norm_weight, bf16* __restrict__ y, float* __restrict__ post,
                        float* __restrict__ comb, int num_tokens, int hidden_per_cta, int sinkhorn_iters,
                        float rms_eps, float hc_eps, float norm_eps) {
  finalize_body<HIDDEN, true>(x, partials, hc_scale, hc_base, norm_weight, y, post, comb, num_tokens,
                              hidden_per_cta, sinkhorn_iters, rms_eps, hc_eps, norm_eps);
}

template <int HIDDEN, typename NormWeight>
__global__ void __launch_bounds__(kFinalizeThreads)
    post_pre_finalize_kernel(const bf16* __restrict__ residual_out, const float* __restrict__ partials,
                             const float* __restrict__ hc_scale, const float* __restrict__ hc_base,
                             const NormWeight* __restrict__ norm_weight, bf16* __restrict__ y,
                             float* __restrict__ post, float* __restrict__ comb, int num_tokens, int hidden_per_cta,
                             int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps) {
  finalize_body<HIDDEN, false>(residual_out, partials, hc_scale, hc_base, norm_weight, y, post, comb, num_tokens,
                               hidden_per_cta, sinkhorn_iters, rms_eps, hc_eps, norm_eps);
}

}  // namespace mhc
}  // namespace sk
