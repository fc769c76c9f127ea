// norm.mhc — fused RMSNorm + hyper-connection residual (DeepSeek-V4 mHC), BF16.
// Math and scratch layout: ops/norm/norm.mhc.md. Reference: ops/norm/ref_mhc.{h,c}.
//
// ============================================ LAUNCH CONTRACT ============================================
// Common to every kernel:
//   bf16 = __nv_bfloat16. T = num_tokens >= 1 (launch nothing for T = 0). H = HIDDEN, a multiple of 256.
//   S = H / 256 (hidden tiles). All tensors dense row-major, contiguous, and 16-byte aligned
//   (cudaMalloc / cuMemAlloc give 256). No output may alias an input or another output.
//   Scalars: the eps values as fp32, sinkhorn_iters as int (host rejects < 1; the kernels treat < 1
//   as 1). Dynamic shared memory only in the tensor-core partial kernels (2; elsewhere pass 0).
//   Deterministic: no floating-point atomics, fixed-order reductions; bits do not depend on
//   groups_per_cta / tokens_per_cta, num_stages or hidden_per_cta, but post / comb / y do depend on which partial
//   kernel (2 or 2b; 2c computes exactly 2b -> 3) ran.
//
// Scratch: partials fp32 [T_max][S][36] (kPartialStride), T_max * S * 36 * 4 bytes; the partial
//   kernel writes every slot the finalize reads, so they need no initialisation. Kernels 2c also
//   take token_counters u32 [T_max]: zero before the first launch, zero after every launch.
//
// run_post   = post_kernel
// run_pre    = pre_partial_kernel      -> pre_finalize_kernel        (same stream, in order)
//              or, for large T (the split schedule), pre_projection_kernel (2d) -> pre_finalize_kernel
//              with residual_out (the finalize then writes the 4 copies of x)
// run_post_pre = post_pre_partial_kernel -> post_pre_finalize_kernel (same stream, in order)
// For a few tokens (decode) the *_partial_scalar_kernel variants (2b) replace the partial kernel;
// they write the same partials, so the finalize is the same. The *_fused_decode_kernel variants
// (2c) run 2b and 3 in ONE launch (same bits) when the device has the CTA slots for them.
//
// 1. template <int HIDDEN> __global__ void post_kernel(
//        const bf16* x,           // [T, H]
//        const bf16* residual,    // [T, 4, H]
//        const float* post,       // [T, 4]    (a [T, 4, 1] tensor is the same memory)
//        const float* comb,       // [T, 4, 4]
//        bf16* out,               // [T, 4, H]   written: all
//        int num_tokens);
//    block = exactly 128 threads (kPostThreads); grid = (ceil(T * S / 4), 1, 1).
//    Bandwidth-bound at large T, launch-bound at T = 1.
//
// 2. template <int HIDDEN> __global__ void pre_partial_kernel(
//        const bf16* x,           // [T, H]
//        const float* fn_pre,     // [24, H]  = sum over the 4 stream blocks of fn [24, 4H]
//        bf16* residual_out,      // [T, 4, H]   written: all (4 copies of x)
//        float* partials,         // scratch     written: rows [0, T) x [0, S), slots 0..35 (34, 35 zero)
//        int num_tokens, int groups_per_cta, int num_stages);
//    template <int HIDDEN, int FN_SMEM> __global__ void post_pre_partial_kernel(
//        const bf16* x,           // [T, H]
//        const bf16* residual,    // [T, 4, H]
//        const float* prev_post,  // [T, 4]
//        const float* prev_comb,  // [T, 4, 4]
//        const float* fn,         // [24, 4H]
//        bf16* residual_out,      // [T, 4, H]   written: all (the mix-back)
//        float* partials,         // scratch     written: rows [0, T) x [0, S), slots 0..35 (34, 35 zero)
//        int num_tokens, int groups_per_cta, int num_stages);
//    Tensor cores (mma.sync m16n8k16 bf16, sm_80+): tokens in groups of 16 are the M side, the
//    24 mixes 3 n8 tiles, fn split exactly into 3 bf16 terms held in registers (loaded once per segment).
//    Work items: (tile, group of 16 tokens), numbered tile-major (item = tile * ceil(T / 16) +
//    group); CTA c takes items [c * groups_per_cta, (c + 1) * groups_per_cta), crossing into the
//    next tile where the range does. block = exactly 128 threads (pre) / 512 threads (post_pre);
//    grid = (ceil(ceil(T / 16) * S / groups_per_cta), 1, 1); groups_per_cta >= 1;
//    ceil(T / 16) * S + groups_per_cta < 2^31; bits do not depend on groups_per_cta.
//    num_stages in {2, 3, 4, 2 | kOwnSumsFlag}: cp.async stage buffers; 2 runs the lockstep
//    schedule (four barriers a group), 2 | kOwnSumsFlag the same with a sums buffer of its own
//    (two barriers), 3-4 the pipelined one (same bits all). FN_SMEM (post_pre; pre: 0) = fn terms
//    in shared memory instead of registers (the last ones: lo, then mid; same bits). Dynamic
//    shared memory = partial_dynamic_smem_bytes(NS, stages, own sums, FN_SMEM) = 128 (alignment
//    slack) + stages * partial_stage_bytes(NS) (+ 2 * partial_sums_bytes(NS) for 3-4 stages, + 1
//    with kOwnSumsFlag) + FN_SMEM * 48 KiB: pre 16 / 22 / 36 / 44 KiB, post_pre 82.5 / 106.5 /
//    172 / 213 KiB for 2 / 2 own sums / 3 / 4 stages (+ 128 B); above 48 KiB the host raises the
//    kernel's max dynamic shared memory attribute. Static smem 5 KiB.
//    Suggested: num_stages 2 (the fastest; 3-4 need sm_90/sm_100 shared memory);
//    groups_per_cta from a wave model (ops/norm/mhc.c): about one range per resident CTA.
//
// 2b. template <int HIDDEN> __global__ void pre_partial_scalar_kernel(
//        const bf16* x, const float* fn_pre, bf16* residual_out, float* partials);   // as in 2
//     template <int HIDDEN> __global__ void post_pre_partial_scalar_kernel(
//        const bf16* x, const bf16* residual, const float* prev_post, const float* prev_comb,
//        const float* fn, bf16* residual_out, float* partials);                      // as in 2
//    Scalar fp32 FMA, one warp per (token, tile, role); role z takes mixes 4z .. 4z+3.
//    block = exactly 32 threads; grid = (T, S, 6); no shared memory. Written: as in 2.
//    Suggested for decode sizes (the host's crossover: T <= 16 for H <= 4096, 8 above;
//    SPARKINFER_MHC_SCALAR_MAX_T). Bits differ
//    from kernel 2 (another summation order) but do not depend on T.
//
// 2c. template <int HIDDEN, typename NormWeight> __global__ void pre_fused_decode_kernel(
//        const bf16* x, const float* fn_pre, const float* hc_scale, const float* hc_base,
//        const NormWeight* norm_weight, bf16* residual_out, float* partials, u32* token_counters,
//        bf16* y, float* post, float* comb, int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps);
//     template <int HIDDEN, typename NormWeight> __global__ void post_pre_fused_decode_kernel(
//        const bf16* x, const bf16* residual, const float* prev_post, const float* prev_comb,
//        const float* fn, const float* hc_scale, const float* hc_base, const NormWeight* norm_weight,
//        bf16* residual_out, float* partials, u32* token_counters, bf16* y, float* post, float* comb,
//        int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps);
//    Arguments as in 2b and 3; token_counters: u32 [T] (scratch), all zero at launch, all zero
//    again when the launch completes (a non-zero counter traps). block = exactly 32 threads;
//    grid = (T, S, 6) as 2b; static smem < 256 B. Written: residual_out, partials, y, post, comb.
//    S + 1 CTAs per token wait (spin) for the token's other CTAs: launch only when
//    (S + 1) * T <= (resident CTAs per SM x SMs) / 2, else 2b -> 3 (see the comment at 2c).
//
// 3. template <int HIDDEN, typename NormWeight> __global__ void pre_finalize_kernel(
//        const bf16* x,           // [T, H]  (the streams are 4 copies of x)
//        bf16* residual_out,      // [T, 4, H] written (4 copies of x) if not nullptr: after 2d; nullptr after 2 / 2b
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
//    Must start after the partial kernel (2 or 2b) of the same call has finished (stream order is enough).
//
// Grid limits: grid.x is at most 2^31 - 1 (T), grid.y = S or H / hidden_per_cta (< 65536).
// The tensor-core partials (2) are much faster than the scalar ones (2b) at large T but slower at
// T = 1 (about equal at T = 16, where 2b's 6 * S * T CTAs grow with H): hence 2b for decode sizes.
// ==========================================================================================================
#pragma once
#include <cuda_bf16.h>

#include "common/defs.cuh"
#include "common/mma.cuh"
#include "common/reduce.cuh"
#include "common/smem.cuh"
#include "common/sync.cuh"
#include "norm/bf16x8.cuh"
#include "norm/mhc_coeffs.cuh"
#include "norm/mhc_layout.cuh"

namespace sk {
namespace mhc {

typedef __nv_bfloat16 bf16;

constexpr int kLanesPerTile = kWarpSize;
constexpr int kTileH = kLanesPerTile * kBf16PerVector;  // 256 hidden elements: one warp, 16 B per lane
constexpr int kPartialStride = 36;                      // floats per (token, tile) row: 24 dots, 10 Gram, 2 pad
constexpr int kPostThreads = 128;
constexpr int kFinalizeThreads = 128;

// Tag for "no RMSNorm fused into y" (the norm_weight argument is then nullptr).
struct NoNormWeight {};

SK_HOST_DEVICE constexpr int num_tiles(int hidden) { return hidden / kTileH; }

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

// ---- 2. partials (tensor cores) ---------------------------------------------------------------------
//
// CTA (a range of (tile, 16-token group) items, partial_body): 4*NS warps (NS = streams held in
// smem: 1 for run_pre, 4 for post_pre).
// Tokens go in groups of 16 (the M of mma.m16n8k16) through a ring of cp.async stage buffers
// (dynamic smem). Per group:
//   stage   post_pre: mix-back of the group's x/residual chunks in place (smem -> smem, the
//           coefficients prefetched with the data), store of residual_out; pre: store of the 4
//           copies of x.
//   mma     warp (s, q): projection of its 64-element slice of stream s for the 16 tokens
//           against fn split exactly into 3 bf16 terms (hi + mid + lo, registers, loaded once
//           per segment): 4 k-steps x 3 n-tiles x 3 terms; plus its share of the 16 Gram units
//           (token quad x quarter; A = 4 tokens x 4 streams, B = 2 tokens x 4 streams, the
//           diagonal token blocks kept; products of bf16 are exact). run_pre has no Gram MMAs:
//           its streams are copies of x, so each warp sums x^2 of 4 tokens (group_gram).
//   reduce  warps' partial sums into smem (2 stages: the consumed stage buffer; else two sums
//           buffers), then one thread per (token, slot) sums them in warp order and writes the
//           partial row. The two schedules (partial_body) order these phases differently.
// Index math: norm/mhc_layout.cuh (emulated on the CPU by tests/test_mhc_emulation.c).

constexpr int kGroup = SK_MHC_GROUP;
constexpr int kChunks = SK_MHC_CHUNKS;
constexpr int kWarpKSteps = SK_MHC_WARP_KSTEPS;
constexpr int kNTiles = kMixes / 8;    // 3 n8 tiles of the 24 mixes
constexpr int kFnTerms = 3;            // fn = hi + mid + lo (bf16): exact for normal fp32
constexpr int kGramUnits = 16;         // (token quad, hidden quarter) per group
constexpr int kPartialSlots = kMixes + kGramPairs;  // 34 written per row
constexpr int kMaxStages = 4;

constexpr int kCoefs = kStreams + kStreams * kStreams;  // post_pre: prev_post[4], prev_comb[16] per token

// Dynamic shared memory of one stage buffer: the stream region (NS x 16 tokens x 512 B; with 2
// stages reused for the warps' projection sums once consumed), then (post_pre only) x (16 x 512 B)
// and the mix-back coefficients (16 x 80 B, prefetched with the data so the mix-back never waits
// on an L2 round trip).
SK_HOST_DEVICE constexpr int partial_stage_bytes(int ns) {
  return (ns + (ns > 1 ? 1 : 0)) * kGroup * kChunks * 16 + (ns > 1 ? kGroup * kCoefs * 4 : 0);
}
SK_HOST_DEVICE constexpr int x_region_chunk(int ns) { return ns * kGroup * kChunks; }  // post_pre: x rows
SK_HOST_DEVICE constexpr int coef_region_chunk(int ns) { return x_region_chunk(ns) + kGroup * kChunks; }
// Projection sums of one group, [warp][token][mix] fp32.
SK_HOST_DEVICE constexpr int partial_sums_bytes(int ns) { return 4 * ns * kGroup * kMixes * 4; }
// Whole dynamic shared memory: 2 stages run the lockstep loop (sums in the consumed stream
// region, or with kOwnSumsFlag in one sums buffer after the stages); 3-4 the pipelined loop, which
// adds two sums buffers (double-buffered across groups).
constexpr int kOwnSumsFlag = 16;  // or-ed into num_stages (2 stages only)
SK_HOST_DEVICE constexpr int partial_smem_bytes(int ns, int stages, bool own_sums = false) {
  return stages * partial_stage_bytes(ns) + (stages >= 3 ? 2 * partial_sums_bytes(ns) : own_sums ? partial_sums_bytes(ns) : 0);
}
// One fn term's fragments of every warp, [warp][k-step][n-tile][lane] x 8 bytes: post_pre 48 KiB,
// pre 12 KiB. FN_SMEM of these (the last terms: lo, then mid) follow partial_smem_bytes.
SK_HOST_DEVICE constexpr int partial_fn_term_bytes(int ns) { return 4 * ns * kWarpKSteps * kNTiles * kWarpSize * 8; }
// Alignment of the stage buffers (see partial_body) and the dynamic shared memory a launch gives.
constexpr int kPartialSmemAlign = 128;
// The first kPartialSmemAlign-aligned shared-memory address at or after `address`.
SK_DEVICE u32 align_smem_address(u32 address) { return (address + (kPartialSmemAlign - 1)) & ~u32(kPartialSmemAlign - 1); }
SK_HOST_DEVICE constexpr int partial_dynamic_smem_bytes(int ns, int stages, bool own_sums, int fn_smem) {
  return kPartialSmemAlign + partial_smem_bytes(ns, stages, own_sums) + fn_smem * partial_fn_term_bytes(ns);
}

// fn = hi + mid + lo with each term a bf16 (round to nearest): f - hi and (f - hi) - mid are
// exact in fp32 and the last remainder has at most 8 significant bits, so the sum is exactly f
// (for |f| >= 2^-110; below that lo may lose bits to bf16 subnormals: irrelevant absolutely).
SK_DEVICE void split_bf16x3(float f, u16 (&terms)[kFnTerms]) {
  const __nv_bfloat16 hi = __float2bfloat16_rn(f);
  const float r1 = f - __bfloat162float(hi);
  const __nv_bfloat16 mid = __float2bfloat16_rn(r1);
  const float r2 = r1 - __bfloat162float(mid);
  terms[0] = __bfloat16_as_ushort(hi);
  terms[1] = __bfloat16_as_ushort(mid);
  terms[2] = __bfloat16_as_ushort(__float2bfloat16_rn(r2));
}

template <int HIDDEN, int NS>
struct PartialArgs {
  const bf16* __restrict__ x;          // [T, H]
  const bf16* __restrict__ residual;   // [T, 4, H] (post_pre)
  const float* __restrict__ prev_post; // [T, 4]    (post_pre)
  const float* __restrict__ prev_comb; // [T, 4, 4] (post_pre)
  const float* __restrict__ fn;        // [24, NS * H]
  bf16* __restrict__ residual_out;
  float* __restrict__ partials;
};

// cp.async of one group's inputs (chunks of tile `tile`) into a stage buffer; tokens >= end are
// zero-filled (the MMAs read them; their rows are never written out). Every thread's units are
// fixed by its warp and lane (blockDim is exactly 4 * NS warps): chunk = lane, and token = warp
// with input k = stream k (k = NS: x) for post_pre (16 warps = 16 tokens), token = warp + 4k for
// run_pre. Fixed units keep the per-group work to one address per row: a generic unit walk (a
// division by the 5 rows per token, 64-bit products) costs a quarter of post_pre's instructions.
template <int HIDDEN, int NS>
SK_DEVICE void issue_group_loads(const PartialArgs<HIDDEN, NS>& a, u32 buf, i64 group_first, i64 end, int tile) {
  static_assert(kChunks == kWarpSize, "one chunk per lane");
  static_assert(NS == 1 || 4 * NS == kGroup, "post_pre: one warp per token of the group");
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const i64 col = static_cast<i64>(tile) * kTileH + lane * kBf16PerVector;
  if constexpr (NS == 1) {
#pragma unroll
    for (int k = 0; k < kGroup / 4; ++k) {
      const int token = warp + 4 * k;
      const bool valid = group_first + token < end;
      cp_async_16_at(buf + 16 * sk_mhc_chunk_index(1, token, 0, lane),
                     a.x + (valid ? group_first + token : 0) * HIDDEN + col, valid ? 16 : 0);
    }
  } else {
    const int token = warp;
    const bool valid = group_first + token < end;
    const i64 tg = valid ? group_first + token : 0;
    const bf16* streams = a.residual + tg * kStreams * HIDDEN + col;
#pragma unroll
    for (int s = 0; s < NS; ++s)
      cp_async_16_at(buf + 16 * sk_mhc_chunk_index(NS, token, s, lane), streams + s * HIDDEN, valid ? 16 : 0);
    cp_async_16_at(buf + 16 * (x_region_chunk(NS) + token * kChunks + lane), a.x + tg * HIDDEN + col, valid ? 16 : 0);
    // Coefficients: per token post (1 chunk) then the 4 rows of comb (4 chunks).
    constexpr int kCoefChunks = kCoefs / 4;
    const int u = static_cast<int>(threadIdx.x);
    if (u < kGroup * kCoefChunks) {
      const int ctoken = u / kCoefChunks, c = u % kCoefChunks;
      const bool cvalid = group_first + ctoken < end;
      const i64 t = cvalid ? group_first + ctoken : 0;
      const float* src = c == 0 ? a.prev_post + kStreams * t : a.prev_comb + kStreams * (kStreams * t + (c - 1));
      cp_async_16_at(buf + 16 * (coef_region_chunk(NS) + u), src, cvalid ? 16 : 0);
    }
  }
}

// bf16 element e of a packed 16-byte vector, widened exactly to fp32.
SK_DEVICE float bf16_element(const uint4& v, int e) {
  const u32 word = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
  return __uint_as_float((e & 1) ? (word & 0xffff0000u) : (word << 16));
}

// Output stream j of one 8-element chunk, mixed back from the packed inputs with post_j and
// column j of comb: the fma chain of mix_back_vector (same bits as run_post). One output stream
// at a time keeps the live set small next to the fn values both partial kernels hold in registers.
SK_DEVICE uint4 mix_back_stream(float post_j, const float (&comb_j)[kStreams], const uint4& xv,
                                const uint4 (&r)[kStreams]) {
  float v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float acc = post_j * bf16_element(xv, e);
#pragma unroll
    for (int i = 0; i < kStreams; ++i) acc = fmaf(comb_j[i], bf16_element(r[i], e), acc);
    v[e] = acc;
  }
  return pack_bf16x8_rn(v);
}

// Stage: post_pre mixes back in place (stream i of the chunk is replaced by output stream i, same
// fma chain as mix_back_vector) and stores residual_out; pre stores 4 copies of x. Thread units
// as in issue_group_loads: chunk = lane, token = warp (+ 4k for run_pre).
// COEFS_AT_ONCE: the token's 20 coefficients in 5 vector loads up front (20 registers at once);
// otherwise one scalar load as each is used, which keeps the live set small where the fn terms
// all sit in registers (FN_SMEM = 0, sm_120a: a 56-byte stack frame that way, 128 bytes with the
// vector loads).
template <int HIDDEN, int NS, bool COEFS_AT_ONCE>
SK_DEVICE void stage_group(const PartialArgs<HIDDEN, NS>& a, u32 buf, i64 group_first, i64 end, int tile) {
  constexpr int kWarps = 4 * NS;  // blockDim, as the launch contract fixes it
  const int chunk = static_cast<int>(threadIdx.x) % kWarpSize;  // kChunks == kWarpSize
#pragma unroll
  for (int k = 0; k < kGroup / kWarps; ++k) {
    const int token = static_cast<int>(threadIdx.x) / kWarpSize + k * kWarps;
    const i64 tg = group_first + token;
    if (tg >= end) continue;  // zero rows stay zero
    const i64 col = static_cast<i64>(tile) * kTileH + chunk * kBf16PerVector;
    bf16* out = a.residual_out + tg * kStreams * HIDDEN + col;
    if (NS == 1) {
      const uint4 v = lds_16B(buf + 16 * sk_mhc_chunk_index(1, token, 0, chunk));
#pragma unroll
      for (int s = 0; s < kStreams; ++s) store_16B_streaming(out + s * HIDDEN, v);
    } else {
      const uint4 xv = lds_16B(buf + 16 * (x_region_chunk(NS) + token * kChunks + chunk));
      const u32 coef = buf + 16 * coef_region_chunk(NS) + 4 * token * kCoefs;  // post[4], then comb[4][4]: 80 bytes
      float coefs[COEFS_AT_ONCE ? kCoefs : 1];
      if constexpr (COEFS_AT_ONCE) {
#pragma unroll
        for (int q = 0; q < kCoefs / 4; ++q) {
          const float4 c = lds_f32x4(coef + 16 * q);
          coefs[4 * q] = c.x, coefs[4 * q + 1] = c.y, coefs[4 * q + 2] = c.z, coefs[4 * q + 3] = c.w;
        }
      }
      auto coef_at = [&](int k) {
        if constexpr (COEFS_AT_ONCE) return coefs[k];
        else return lds_f32(coef + 4 * k);
      };
      uint4 r[kStreams];
#pragma unroll
      for (int s = 0; s < kStreams; ++s) r[s] = lds_16B(buf + 16 * sk_mhc_chunk_index(NS, token, s, chunk));
#pragma unroll
      for (int j = 0; j < kStreams; ++j) {
        float comb_j[kStreams];
#pragma unroll
        for (int i = 0; i < kStreams; ++i) comb_j[i] = coef_at(kStreams + kStreams * i + j);
        const uint4 o = mix_back_stream(coef_at(j), comb_j, xv, r);
        sts_16B(buf + 16 * sk_mhc_chunk_index(NS, token, j, chunk), o);  // r[] holds the inputs: in place is safe
        store_16B(out + j * HIDDEN, o);
      }
    }
  }
}

SK_DEVICE void cp_async_wait_pending(int n_pending) {  // wait_group takes an immediate
  if (n_pending <= 0) cp_async_wait<0>();
  else if (n_pending == 1) cp_async_wait<1>();
  else cp_async_wait<2>();
}

typedef float GramSums[4][kGroup][kGramPairs];  // [quarter][token][pair]
// Shared-memory address of gram_sums[quarter][token][pair] of the GramSums at `sums`.
SK_DEVICE u32 gram_slot(u32 sums, int quarter, int token, int pair) {
  return sums + 4 * ((quarter * kGroup + token) * kGramPairs + pair);
}
// A warp's fn fragments: the first REG_TERMS terms in registers, the others (FN_SMEM = 3 -
// REG_TERMS) in this warp's own slice of shared memory ([term][k-step][n-tile][lane], 8 bytes a
// lane: conflict-free). Shared memory holds them only to free registers (post_pre's partial runs
// 512 threads at 128 registers, 72 of them fn): every warp reads back only what it wrote.
template <int FN_SMEM>
struct FnFragments {
  static constexpr int kRegTerms = kFnTerms - FN_SMEM;
  u32 reg[kRegTerms > 0 ? kRegTerms : 1][kWarpKSteps][kNTiles][2];
  u32 smem;  // shared-memory address of this warp's FN_SMEM terms
  SK_DEVICE void b(int term, int ks, int nt, int lane, u32 (&out)[2]) const {
    if (term < kRegTerms) {
      out[0] = reg[term][ks][nt][0], out[1] = reg[term][ks][nt][1];
    } else {
      const uint2 w = lds_8B(smem + 8 * ((((term - kRegTerms) * kWarpKSteps + ks) * kNTiles + nt) * kWarpSize + lane));
      out[0] = w.x, out[1] = w.y;
    }
  }
};

// Gram units of one group (u = warp, warp + kWarps, ...: token quad u / 4, hidden quarter u % 4),
// written straight to gram_sums.
// run_pre (NS = 1): the 4 streams are copies of x, so every Gram entry of a token is sum x^2 over
// the tile. Warp w sums tokens w, w + 4, ... (8 elements per lane, then the warp) into
// gram_sums[0][token][0]; reduce_group reads that one value for all 10 pairs. 16 MMA units per
// group would compute the same number 10 times over (and their ldmatrix addressing dominated
// run_pre's partial kernel).
template <int NS>
SK_DEVICE void group_gram(u32 buf, u32 gram_sums, int warp, int lane) {
  if constexpr (NS == 1) {
#pragma unroll
    for (int k = 0; k < kGroup / 4; ++k) {
      const int token = warp + 4 * k;
      const uint4 v = lds_16B(buf + 16 * sk_mhc_chunk_index(1, token, 0, lane));
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) sum = fmaf(bf16_element(v, e), bf16_element(v, e), sum);
      sum = warp_sum(sum);
      if (lane == 0) sts_f32(gram_slot(gram_sums, 0, token, 0), sum);
    }
    return;
  }
  constexpr int kWarps = 4 * NS;
  const u32 base = buf;  // 128-byte aligned (partial_body): sk_mhc_kstep_offset applies
#pragma unroll 1
  for (int unit = warp; unit < kGramUnits; unit += kWarps) {
    const int quad = unit / 4, gq = unit % 4;
    float gram[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const int ar = sk_mhc_a_row(lane), br = sk_mhc_gram_b_row(lane);
    const int a_off = 16 * sk_mhc_chunk_index(NS, 4 * quad + ar / 4, sk_mhc_gram_stream(NS, ar), sk_mhc_a_chunk(gq, 0, lane));
    int b_off[2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
      b_off[j] = 16 * sk_mhc_chunk_index(NS, 4 * quad + 2 * j + br / 4, sk_mhc_gram_stream(NS, br),
                                         sk_mhc_gram_b_chunk(gq, 0, lane));
#pragma unroll
    for (int ks = 0; ks < kWarpKSteps; ++ks) {
      u32 afrag[4];
      ldmatrix_x4_at(afrag, base + sk_mhc_kstep_offset(a_off, ks));
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        u32 bfrag[2];
        ldmatrix_x2_at(bfrag, base + sk_mhc_kstep_offset(b_off[j], ks));
        mma_bf16_m16n8k16(gram[j], afrag, bfrag);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ga = sk_mhc_gram_a(lane), gb = sk_mhc_gram_b(i, lane);
        if (sk_mhc_gram_useful(j, i, lane) && ga <= gb)
          sts_f32(gram_slot(gram_sums, gq, 4 * quad + sk_mhc_gram_token(j, lane), sk_mhc_gram_pair(ga, gb)), gram[j][i]);
      }
  }
}

// Projection of this warp's 64-element slice of stream `stream` for the group's 16 tokens.
template <int NS, int FN_SMEM>
SK_DEVICE void group_projection(u32 buf, const FnFragments<FN_SMEM>& b, int stream, int quarter, int lane,
                                float (&acc)[kNTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  const u32 base = buf;  // 128-byte aligned (partial_body): sk_mhc_kstep_offset applies
  const int a_off = 16 * sk_mhc_chunk_index(NS, sk_mhc_a_row(lane), stream, sk_mhc_a_chunk(quarter, 0, lane));
#pragma unroll
  for (int ks = 0; ks < kWarpKSteps; ++ks) {
    u32 afrag[4];
    ldmatrix_x4_at(afrag, base + sk_mhc_kstep_offset(a_off, ks));
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int term = 0; term < kFnTerms; ++term) {
        u32 frag[2];
        b.b(term, ks, nt, lane, frag);
        mma_bf16_m16n8k16(acc[nt], afrag, frag);
      }
  }
}

SK_DEVICE void store_projection(u32 proj_sums, const float (&acc)[kNTiles][4], int warp, int lane) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; i += 2)
      sts_f32x2(proj_sums + 4 * ((warp * kGroup + sk_mhc_c_token(i, lane)) * kMixes + sk_mhc_c_mix(nt, i, lane)),
                acc[nt][i], acc[nt][i + 1]);
}

// One thread per (token, 4 slots): the warps' projection sums added in warp order (the Gram
// quarters in quarter order), then one 16-byte store into the partial row. Slots 24..35 are the
// 10 Gram pairs and the 2 pad slots (written as zero).
template <int HIDDEN, int NS>
SK_DEVICE void reduce_group(const PartialArgs<HIDDEN, NS>& a, u32 proj_sums, u32 gram_sums, i64 group_first, i64 end,
                            int tile) {
  constexpr int kWarps = 4 * NS;
  constexpr int kMixQuads = kMixes / 4, kRowQuads = kPartialStride / 4;
  static_assert(kMixes % 4 == 0 && kPartialStride % 4 == 0 && kMixes + kGramPairs <= kPartialStride, "row of float4");
#pragma unroll 1
  for (int u = static_cast<int>(threadIdx.x); u < kGroup * kRowQuads; u += kWarps * kWarpSize) {
    const int token = u % kGroup, quad = u / kGroup;  // lanes of a warp: consecutive tokens
    const i64 tg = group_first + token;
    if (tg >= end) continue;
    float4 sum;
    if (quad < kMixQuads) {
      sum = lds_f32x4(proj_sums + 4 * (token * kMixes + 4 * quad));
#pragma unroll
      for (int w = 1; w < kWarps; ++w) {
        const float4 p = lds_f32x4(proj_sums + 4 * ((w * kGroup + token) * kMixes + 4 * quad));
        sum.x += p.x; sum.y += p.y; sum.z += p.z; sum.w += p.w;
      }
    } else {
      float g[4];
      const float x_sq = NS == 1 ? lds_f32(gram_slot(gram_sums, 0, token, 0)) : 0.0f;  // run_pre: group_gram's sum x^2
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int pair = 4 * (quad - kMixQuads) + i;
        if (pair >= kGramPairs) g[i] = 0.0f;
        else if (NS == 1) g[i] = x_sq;  // every pair
        else
          g[i] = ((lds_f32(gram_slot(gram_sums, 0, token, pair)) + lds_f32(gram_slot(gram_sums, 1, token, pair))) +
                  lds_f32(gram_slot(gram_sums, 2, token, pair))) +
                 lds_f32(gram_slot(gram_sums, 3, token, pair));
      }
      sum = make_float4(g[0], g[1], g[2], g[3]);
    }
    store_16B(a.partials + (tg * num_tiles(HIDDEN) + tile) * kPartialStride + 4 * quad,
              make_uint4(__float_as_uint(sum.x), __float_as_uint(sum.y), __float_as_uint(sum.z), __float_as_uint(sum.w)));
  }
}

// Three schedules of the same per-group work (same bits: every warp runs the same MMAs and the
// reduction the same order; only the overlap differs):
//   2 stages, lockstep (fits 99 KiB): per group wait -> stage -> MMA -> sums -> reduce, four
//     barriers, sums in the consumed stream region.
//   2 stages, lockstep with its own sums buffer (kOwnSumsFlag; 24 KiB more for post_pre, too much
//     for sm_120's 99 KiB): group g's reduce runs after the first barrier of group g + 1, next to
//     its mix-back, so a group has two barriers; faster than the plain lockstep.
//   3-4 stages, pipelined: iteration i runs reduce(i-1), stage(i+1) and MMA(i) between ONE pair
//     of barriers; half the warps of every scheduler partition (warp / 4 odd) take MMA(i) first,
//     the other half stage(i+1) first, so the tensor pipe (MMA) and the FMA pipe (mix-back)
//     work at the same time. Sums go to two dedicated buffers (group parity); loads are issued
//     into the buffer MMA(i-1) released, stages - 2 groups ahead of the mix-back.
//
// One segment of a CTA's work: tokens [first, end) of tile `tile` (first a multiple of 16), from
// an empty pipeline to an empty one. segment_start loads its tile's fn fragments into b (the fn
// loads first, then its first stages - 1 groups, then the split); segment_run runs the groups. Two functions so that the first
// segment's loads go out before the loop-invariant index math the compiler hoists in front of
// segment_run (otherwise ~300 instructions a warp run ahead of the fn loads, which shows at
// small T).
template <int HIDDEN, int NS, int FN_SMEM>
SK_DEVICE void segment_start(const PartialArgs<HIDDEN, NS>& a, int tile, i64 first, i64 end, int stages, bool own_sums,
                             u32 stage_smem, FnFragments<FN_SMEM>& b) {
  constexpr u32 kStageBytes = partial_stage_bytes(NS);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int stream = warp / 4, quarter = warp % 4;
  const int groups = static_cast<int>((end - first + kGroup - 1) / kGroup);
  // stages == 2 (the default) picks the buffer by parity, not a run-time division.
  auto group_buf = [&](int g) { return stage_smem + (stages == 2 ? g & 1 : g % stages) * kStageBytes; };
  auto group_first = [&](int g) { return first + static_cast<i64>(g) * kGroup; };

  // fn slice of this warp, split into 3 bf16 terms, for every token of the segment:
  // b[term][ks][nt][half] = the pair fn[mix][col], fn[mix][col + 1] of sk_mhc_b_col / sk_mhc_b_mix.
  static_assert(FN_SMEM >= 0 && FN_SMEM <= kFnTerms, "0..3 fn terms in shared memory");
  // This warp's slice of the fn-term region (after the stages and sums).
  const u32 fn_smem = stage_smem + partial_smem_bytes(NS, stages, own_sums && stages == 2) +
                      8 * warp * FN_SMEM * kWarpKSteps * kNTiles * kWarpSize;
  b.smem = fn_smem;
  {
    // The fn loads first, then the first stages - 1 groups (one commit per slot, empty or not, so
    // the group count that wait_group sees is uniform), then the split. Issued after the group
    // loads, the fn loads would wait behind every CTA's stream bytes.
    const float* fn_warp = a.fn + static_cast<i64>(stream) * HIDDEN + static_cast<i64>(tile) * kTileH;
    float2 fn_pairs[kWarpKSteps][kNTiles][2];
#pragma unroll
    for (int ks = 0; ks < kWarpKSteps; ++ks)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          fn_pairs[ks][nt][half] = __ldg(reinterpret_cast<const float2*>(
              fn_warp + static_cast<i64>(sk_mhc_b_mix(nt, lane)) * (NS * HIDDEN) + sk_mhc_b_col(quarter, ks, half, lane)));
    for (int p = 0; p < stages - 1; ++p) {
      if (p < groups) issue_group_loads(a, group_buf(p), group_first(p), end, tile);
      cp_async_commit();
    }
#pragma unroll
    for (int ks = 0; ks < kWarpKSteps; ++ks)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float2 f = fn_pairs[ks][nt][half];
          u16 lo[kFnTerms], hi[kFnTerms];
          split_bf16x3(f.x, lo);
          split_bf16x3(f.y, hi);
#pragma unroll
          for (int term = 0; term < kFnTerms; ++term) {
            const u32 word = static_cast<u32>(lo[term]) | (static_cast<u32>(hi[term]) << 16);
            if (term < FnFragments<FN_SMEM>::kRegTerms) {
              b.reg[term][ks][nt][half] = word;
            } else {
              sts_u32(fn_smem + 8 * (((term - FnFragments<FN_SMEM>::kRegTerms) * kWarpKSteps + ks) * kNTiles * kWarpSize +
                                     nt * kWarpSize + lane) + 4 * half,
                      word);
            }
          }
        }
  }
  if (FN_SMEM > 0) __syncwarp();  // the warp's own slice: written and read by its lanes only
}

template <int HIDDEN, int NS, int FN_SMEM>
SK_DEVICE void segment_run(const PartialArgs<HIDDEN, NS>& a, int tile, i64 first, i64 end, int stages, bool own_sums,
                           u32 stage_smem, u32 gram_smem, const FnFragments<FN_SMEM>& b) {
  constexpr u32 kStageBytes = partial_stage_bytes(NS);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int stream = warp / 4, quarter = warp % 4;
  const int groups = static_cast<int>((end - first + kGroup - 1) / kGroup);
  // stages == 2 (the default) picks the buffer by parity, not a run-time division.
  auto group_buf = [&](int g) { return stage_smem + (stages == 2 ? g & 1 : g % stages) * kStageBytes; };
  auto group_first = [&](int g) { return first + static_cast<i64>(g) * kGroup; };
  // The 2-stage loops' buffers by parity, spelled out: through group_buf the compiler keeps a
  // run-time division by `stages` in every iteration.
  auto parity_buf = [&](int g) { return stage_smem + (g & 1) * kStageBytes; };

  float acc[kNTiles][4];
  if (stages == 2 && own_sums) {
    // Two barriers a group: group g's reduce runs after the first barrier of group g + 1, next to
    // its mix-back, from a sums buffer of its own (the stream region is being refilled by then).
    const u32 sums = stage_smem + 2 * kStageBytes;
    for (int grp = 0; grp < groups; ++grp) {
      const u32 buf = parity_buf(grp);
      cp_async_wait<0>();
      __syncthreads();  // group grp visible; group grp - 1's MMAs done with its buffer, its sums visible
      if (grp + 1 < groups) issue_group_loads(a, parity_buf(grp + 1), group_first(grp + 1), end, tile);
      cp_async_commit();
      if (grp > 0) reduce_group(a, sums, gram_smem, group_first(grp - 1), end, tile);
      stage_group<HIDDEN, NS, (FN_SMEM > 0)>(a, buf, group_first(grp), end, tile);
      __syncthreads();  // group grp staged; the reduce is done reading sums and gram_sums
      group_gram<NS>(buf, gram_smem, warp, lane);
      group_projection<NS, FN_SMEM>(buf, b, stream, quarter, lane, acc);
      store_projection(sums, acc, warp, lane);
    }
    if (groups > 0) {
      __syncthreads();
      reduce_group(a, sums, gram_smem, group_first(groups - 1), end, tile);
    }
  } else if (stages == 2) {
    for (int grp = 0; grp < groups; ++grp) {
      const u32 buf = parity_buf(grp);
      cp_async_wait<0>();
      __syncthreads();  // group grp visible to all; everyone is done with the previous iteration
      if (grp + 1 < groups) issue_group_loads(a, parity_buf(grp + 1), group_first(grp + 1), end, tile);
      cp_async_commit();
      stage_group<HIDDEN, NS, (FN_SMEM > 0)>(a, buf, group_first(grp), end, tile);
      __syncthreads();
      group_gram<NS>(buf, gram_smem, warp, lane);  // not aliased: its readers passed the first barrier
      group_projection<NS, FN_SMEM>(buf, b, stream, quarter, lane, acc);
      __syncthreads();  // every warp is done reading the stream region: reuse it for the sums
      store_projection(buf, acc, warp, lane);
      __syncthreads();
      reduce_group(a, buf, gram_smem, group_first(grp), end, tile);
    }
  } else {
    const u32 sums = stage_smem + stages * kStageBytes;  // [parity][warp][token][mix]
    constexpr u32 kSumsBytes = partial_sums_bytes(NS);
    constexpr u32 kGramBytes = sizeof(GramSums);
    const bool mma_first = (warp / 4) % 2 == 1;
    cp_async_wait_pending(stages - 2);
    __syncthreads();  // group 0 visible
    stage_group<HIDDEN, NS, (FN_SMEM > 0)>(a, group_buf(0), group_first(0), end, tile);
    cp_async_wait_pending(stages - 3);
    __syncthreads();  // group 0 staged, group 1 visible
    for (int grp = 0; grp < groups; ++grp) {
      const int next = grp + stages - 1;  // into the buffer MMA(grp - 1) released
      if (next < groups) issue_group_loads(a, group_buf(next), group_first(next), end, tile);
      cp_async_commit();
      if (grp > 0)
        reduce_group(a, sums + ((grp - 1) % 2) * kSumsBytes, gram_smem + ((grp - 1) % 2) * kGramBytes, group_first(grp - 1),
                     end, tile);
      for (int step = 0; step < 2; ++step) {
        if ((step == 0) == mma_first) {
          group_gram<NS>(group_buf(grp), gram_smem + (grp % 2) * kGramBytes, warp, lane);
          group_projection<NS, FN_SMEM>(group_buf(grp), b, stream, quarter, lane, acc);
          store_projection(sums + (grp % 2) * kSumsBytes, acc, warp, lane);
        } else if (grp + 1 < groups) {
          stage_group<HIDDEN, NS, (FN_SMEM > 0)>(a, group_buf(grp + 1), group_first(grp + 1), end, tile);
        }
      }
      cp_async_wait_pending(stages - 3);  // group grp + 2 landed
      __syncthreads();
    }
    if (groups > 0)
      reduce_group(a, sums + ((groups - 1) % 2) * kSumsBytes, gram_smem + ((groups - 1) % 2) * kGramBytes,
                   group_first(groups - 1), end, tile);
  }
  cp_async_wait<0>();  // only empty groups can be pending here
}

// A CTA's work: the items (tile, group of 16 tokens), numbered tile-major, [blockIdx.x *
// groups_per_cta, + groups_per_cta). A range that crosses into the next tile becomes two segments
// (each loads its tile's fn once). One balanced range per resident CTA slot loads fn once or twice
// per CTA; a CTA per (token block, tile) would load it once per 8 groups, a large part of the
// post_pre partial's time.
template <int HIDDEN, int NS, int FN_SMEM>
SK_DEVICE void partial_body(const PartialArgs<HIDDEN, NS>& a, int num_tokens, int groups_per_cta, int num_stages) {
  static_assert(HIDDEN % kTileH == 0 && HIDDEN > 0, "hidden must be a positive multiple of 256");
  static_assert(kMaxStages - 2 <= 2, "cp_async_wait_pending covers up to 2 pending groups");
  static_assert(4 * NS * kGroup * kMixes * 4 <= NS * kGroup * kChunks * 16, "projection sums fit the stream region");
  extern __shared__ uint4 dynamic_smem[];
  __shared__ GramSums gram_sums[2];  // [group parity] (the lockstep loop uses [0])
  // Stage buffers from a 128-byte boundary (the launch adds kPartialSmemAlign bytes of slack):
  // the MMAs step their ldmatrix rows by XOR (sk_mhc_kstep_offset), which needs it.
  static_assert(partial_stage_bytes(NS) % kPartialSmemAlign == 0, "every stage buffer 128-byte aligned");
  const u32 stage_smem = align_smem_address(smem_addr(dynamic_smem));
  const u32 gram_smem = smem_addr(gram_sums);
  const bool own_sums = (num_stages & kOwnSumsFlag) != 0;
  num_stages &= kOwnSumsFlag - 1;
  const int stages = num_stages < 2 ? 2 : num_stages > kMaxStages ? kMaxStages : num_stages;

  // 32-bit item math: the contract keeps ceil(T / 16) * S below 2^31 (the host's 2^40-byte cap on
  // the partials scratch keeps it below 2^29), and 64-bit math here delayed every CTA's first
  // loads.
  const u32 groups_per_tile = (static_cast<u32>(num_tokens) + kGroup - 1) / kGroup;
  const u32 items = groups_per_tile * num_tiles(HIDDEN);
  u32 item = blockIdx.x * static_cast<u32>(groups_per_cta);
  const u32 item_end = min(item + static_cast<u32>(groups_per_cta), items);
  if (item >= item_end) return;
  FnFragments<FN_SMEM> b;
  u32 tile, segment_end;
  i64 first, end;
  auto segment_at = [&](u32 at) {
    tile = at / groups_per_tile;
    segment_end = min(item_end, (tile + 1) * groups_per_tile);
    first = static_cast<i64>(at - tile * groups_per_tile) * kGroup;
    end = min_i64(first + static_cast<i64>(segment_end - at) * kGroup, num_tokens);
  };
  segment_at(item);
  segment_start<HIDDEN, NS, FN_SMEM>(a, static_cast<int>(tile), first, end, stages, own_sums, stage_smem, b);
  for (;;) {
    segment_run<HIDDEN, NS, FN_SMEM>(a, static_cast<int>(tile), first, end, stages, own_sums, stage_smem, gram_smem, b);
    if (segment_end >= item_end) break;
    __syncthreads();  // the last segment's final reduce is done with shared memory
    segment_at(segment_end);
    segment_start<HIDDEN, NS, FN_SMEM>(a, static_cast<int>(tile), first, end, stages, own_sums, stage_smem, b);
  }
  // post_pre lets its finalize (launched overlapped) be scheduled only now, not at entry: with the
  // trigger at entry, graph replays of run_post_pre at mid-sized T are slower than plain launches,
  // with it here faster. run_pre keeps the trigger at entry, where the late one is the slower.
  if (NS > 1) pdl_launch_dependents();
}

template <int HIDDEN>
__global__ void __launch_bounds__(4 * kWarpSize, 4)
    pre_partial_kernel(const bf16* __restrict__ x, const float* __restrict__ fn_pre, bf16* __restrict__ residual_out,
                       float* __restrict__ partials, int num_tokens, int groups_per_cta, int num_stages) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  const PartialArgs<HIDDEN, 1> a{x, nullptr, nullptr, nullptr, fn_pre, residual_out, partials};
  partial_body<HIDDEN, 1, 0>(a, num_tokens, groups_per_cta, num_stages);
}

template <int HIDDEN, int FN_SMEM>
__global__ void __launch_bounds__(16 * kWarpSize, 1)
    post_pre_partial_kernel(const bf16* __restrict__ x, const bf16* __restrict__ residual,
                            const float* __restrict__ prev_post, const float* __restrict__ prev_comb,
                            const float* __restrict__ fn, bf16* __restrict__ residual_out,
                            float* __restrict__ partials, int num_tokens, int groups_per_cta, int num_stages) {
  pdl_wait_for_previous();  // launched overlapped (docs/architecture.md, Launch); dependents: partial_body's end
  const PartialArgs<HIDDEN, kStreams> a{x, residual, prev_post, prev_comb, fn, residual_out, partials};
  partial_body<HIDDEN, kStreams, FN_SMEM>(a, num_tokens, groups_per_cta, num_stages);
}

// ---- 2d. run_pre's projection, one warp per 16-token group (prefill: the split schedule) ---------------
//
// The pre partial rows from x alone; the finalize then writes the 4 copies of x (finalize_body's
// `copies`), so this kernel stores nothing but the rows. Kernel 2 splits a tile's K over 4 warps
// (fn in registers) and meets them in shared memory with three barriers per group; that lockstep,
// not DRAM, bounds it (a projection-only variant of it stays far below the copy rate on x).
// Here run_pre's whole fn_pre tile (24 x 256, 3 bf16 terms: 40 KiB as the lanes' B fragments) sits
// in shared memory, so one warp owns a group over the whole tile: 16 k-steps of ldmatrix.x4 (A),
// five shared loads (B) and 9 + 2 MMAs, no cross-warp sums and no barrier after the fill. Each
// term has its own accumulator (9 independent MMA chains of 16 instead of 3 of 48); the Gram
// sum x^2 is the diagonal of A A^T from the same A fragments (b = {a0, a2} / {a1, a3}).
// Bits: other summation order than kernel 2 (and 2b); deterministic, independent of
// tokens_per_cta and of which warp ran a group.
//
// template <int HIDDEN, int WARPS, int STAGES> __global__ void pre_projection_kernel(
//     const bf16* x,            // [T, H]
//     const float* fn_pre,      // [24, H]
//     float* partials,          // scratch: rows [0, T) x [0, S), slots 0..35 written (34, 35 zero)
//     int num_tokens, int tokens_per_cta);
// block = exactly WARPS * 32 threads (WARPS in 1..8); grid = (ceil(T / tokens_per_cta), S, 1);
// tokens_per_cta a multiple of 16 (groups go to the warps round-robin); dynamic shared memory =
// pre_projection_smem_bytes(WARPS, STAGES) = 128 + 40 KiB + WARPS x STAGES x 8 KiB (above 48 KiB: the
// host raises the attribute). STAGES = x buffers per warp: 2 loads a warp's next group while it
// multiplies the current one; 1 loads it after the MMAs (before the partial-row stores), so the
// other warps of the SM must hide the load, and the same shared memory holds twice the warps.
// Defaults: the per-arch tuning table of ops/norm/mhc.c.

constexpr int kTileKSteps = kTileH / 16;                  // 16 k-steps of mma.m16n8k16 per tile
constexpr int kFnLaneWords = 20;                          // 18 fragment words + 2 pad: 16-byte rows, no bank conflicts
SK_HOST_DEVICE constexpr int pre_projection_fn_bytes() { return kTileKSteps * kWarpSize * kFnLaneWords * 4; }
SK_HOST_DEVICE constexpr int pre_projection_group_bytes() { return kGroup * kChunks * 16; }
SK_HOST_DEVICE constexpr int pre_projection_smem_bytes(int warps, int stages) {
  return 128 + pre_projection_fn_bytes() + warps * stages * pre_projection_group_bytes();  // + alignment slack
}

// One group's x chunks (16 tokens x 32 chunks of the tile) into a warp's buffer, in the swizzled
// layout of sk_mhc_chunk_index(1, ...); tokens >= end zero-filled. Lane = chunk.
template <int HIDDEN>
SK_DEVICE void issue_projection_loads(const bf16* __restrict__ x, u32 buf, i64 group_first, i64 end, int tile, int lane) {
  // One 64-bit base per group; the rows are constant offsets from it (a zero-filled row reads nothing).
  const bf16* rows = x + group_first * HIDDEN + static_cast<i64>(tile) * kTileH + lane * kBf16PerVector;
  if (group_first + kGroup <= end) {  // a whole group (all but a CTA's last): constant row offsets, no tests
#pragma unroll
    for (int token = 0; token < kGroup; ++token)
      cp_async_16_at(buf + 16 * sk_mhc_chunk_index(1, token, 0, lane), rows + token * HIDDEN);
    return;
  }
#pragma unroll
  for (int token = 0; token < kGroup; ++token) {
    const bool valid = group_first + token < end;
    cp_async_16_at(buf + 16 * sk_mhc_chunk_index(1, token, 0, lane), valid ? rows + token * HIDDEN : rows, valid ? 16 : 0);
  }
}

template <int HIDDEN, int WARPS, int STAGES>
__global__ void __launch_bounds__(WARPS* kWarpSize)
    pre_projection_kernel(const bf16* __restrict__ x, const float* __restrict__ fn_pre, float* __restrict__ partials,
                          int num_tokens, int tokens_per_cta) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  static_assert(HIDDEN % kTileH == 0 && HIDDEN > 0, "hidden must be a positive multiple of 256");
  static_assert(kNTiles * kFnTerms * 2 + 2 == kFnLaneWords, "fragment words per lane and k-step");
  static_assert(WARPS >= 1 && WARPS <= 8, "1..8 warps");
  static_assert(STAGES == 1 || STAGES == 2, "one or two x buffers per warp");
  extern __shared__ uint4 projection_smem_raw[];
  // From a 128-byte boundary (kPartialSmemAlign bytes of slack in the launch): the A rows step by
  // XOR between k-steps (sk_mhc_kstep_offset).
  const u32 projection_smem = align_smem_address(smem_addr(projection_smem_raw));
  static_assert(pre_projection_fn_bytes() % kPartialSmemAlign == 0 && pre_projection_group_bytes() % kPartialSmemAlign == 0,
                "every x buffer 128-byte aligned");
  const u32 fn_words = projection_smem;  // [k-step][lane][kFnLaneWords] u32
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int tile = static_cast<int>(blockIdx.y);
  const i64 first = static_cast<i64>(blockIdx.x) * tokens_per_cta;
  const i64 end = min_i64(first + tokens_per_cta, num_tokens);
  const int groups = static_cast<int>((end - first + kGroup - 1) / kGroup);
  const u32 warp_bufs = projection_smem + pre_projection_fn_bytes() + warp * STAGES * pre_projection_group_bytes();
  auto buf_of = [&](int i) { return warp_bufs + (i % STAGES) * pre_projection_group_bytes(); };

  // Fill: word (ks, l, nt, term, half) = the bf16 pair fn[mix][col], fn[mix][col + 1] of term
  // `term`, mix = 8 nt + l / 4, col = 16 ks + 8 half + 2 (l % 4): lane l's B fragments. The tile
  // is read row-major in 16-byte pieces, all of a thread's loads in flight at once, then scattered:
  // a fill in fragment order (one fragment pair per load) touches a 32-byte sector per 8 bytes and
  // waits on its loads batch by batch.
  const float* fn_tile = fn_pre + static_cast<i64>(tile) * kTileH;
  constexpr int kFillPieces = kMixes * kTileH / 4, kFillThreads = WARPS * kWarpSize,
                kPiecesPerThread = (kFillPieces + kFillThreads - 1) / kFillThreads;
  float4 pieces[kPiecesPerThread];
#pragma unroll
  for (int j = 0; j < kPiecesPerThread; ++j) {
    const int piece = min(static_cast<int>(threadIdx.x) + j * kFillThreads, kFillPieces - 1);
    pieces[j] = __ldg(reinterpret_cast<const float4*>(fn_tile + static_cast<i64>(piece / (kTileH / 4)) * HIDDEN) +
                      piece % (kTileH / 4));
  }
  // Then this warp's first groups (both buffers with STAGES = 2), behind the fill's loads: issued
  // before them, the fill would wait behind every CTA's x bytes while the CTA stands at its one
  // barrier.
  int grp = warp;
#pragma unroll
  for (int b = 0; b < STAGES; ++b) {
    const int g = grp + b * WARPS;
    if (g < groups) issue_projection_loads<HIDDEN>(x, buf_of(b), first + static_cast<i64>(g) * kGroup, end, tile, lane);
    cp_async_commit();
  }
#pragma unroll
  for (int j = 0; j < kPiecesPerThread; ++j) {
    const int piece = static_cast<int>(threadIdx.x) + j * kFillThreads;
    if (piece >= kFillPieces) break;
    const int mix = piece / (kTileH / 4), col0 = 4 * (piece % (kTileH / 4));
    const float values[4] = {pieces[j].x, pieces[j].y, pieces[j].z, pieces[j].w};
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      const int col = col0 + 2 * pair, ks = sk_mhc_b_kstep(col), half = sk_mhc_b_half(col),
                l = sk_mhc_b_lane(mix, col);
      u16 lo[kFnTerms], hi[kFnTerms];
      split_bf16x3(values[2 * pair], lo);
      split_bf16x3(values[2 * pair + 1], hi);
      const u32 dst = fn_words + 4 * ((ks * kWarpSize + l) * kFnLaneWords + (mix / 8) * kFnTerms * 2 + half);
#pragma unroll
      for (int term = 0; term < kFnTerms; ++term)
        sts_u32(dst + 8 * term, static_cast<u32>(lo[term]) | (static_cast<u32>(hi[term]) << 16));
    }
  }
  __syncthreads();  // the only CTA-wide barrier

  const u32 lane_fn = fn_words + 4 * lane * kFnLaneWords;
  for (int i = 0; grp < groups; ++i, grp += WARPS) {
    const int next = grp + WARPS;
    if constexpr (STAGES == 2) {
      if (i > 0) {  // group i + 1 of iteration 0 went out before the fill
        if (next < groups) issue_projection_loads<HIDDEN>(x, buf_of(i + 1), first + static_cast<i64>(next) * kGroup, end, tile, lane);
        cp_async_commit();
      }
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncwarp();
    const u32 buf = buf_of(i);
    // A row of k-step ks: the quarter ks / 4 is 128 bytes a step (above the swizzled bits), the
    // k-step within it one XOR (sk_mhc_kstep_offset): four addresses, then immediate offsets.
    const int a_off = 16 * sk_mhc_chunk_index(1, sk_mhc_a_row(lane), 0, sk_mhc_a_chunk(0, 0, lane));
    u32 a_row_at[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) a_row_at[k] = buf + static_cast<u32>(sk_mhc_kstep_offset(a_off, k));
    float acc[kFnTerms][kNTiles][4], gram_acc[1][2][4];  // gram_acc[0][j]: tokens 8j..8j+7 as B
    zero_fragments(acc);
    zero_fragments(gram_acc);
    float (&gram)[2][4] = gram_acc[0];
#pragma unroll
    for (int ks = 0; ks < kTileKSteps; ++ks) {
      u32 a[4];
      ldmatrix_x4_at(a, a_row_at[ks % 4] + 128u * (ks / 4));
      const u32 w = lane_fn + 4 * ks * kWarpSize * kFnLaneWords;
      const uint4 w0 = lds_16B(w), w1 = lds_16B(w + 16), w2 = lds_16B(w + 32), w3 = lds_16B(w + 48);
      const uint2 w4 = lds_8B(w + 64);
      const u32 words[18] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w, w2.x,
                             w2.y, w2.z, w2.w, w3.x, w3.y, w3.z, w3.w, w4.x, w4.y};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int term = 0; term < kFnTerms; ++term) {
          const u32 b[2] = {words[(nt * kFnTerms + term) * 2], words[(nt * kFnTerms + term) * 2 + 1]};
          mma_bf16_m16n8k16(acc[term][nt], a, b);
        }
      const u32 b_low[2] = {a[0], a[2]}, b_high[2] = {a[1], a[3]};  // tokens 0-7 / 8-15 as B = A^T
      mma_bf16_m16n8k16(gram[0], a, b_low);
      mma_bf16_m16n8k16(gram[1], a, b_high);
    }
    __syncwarp();  // every lane is done with buf before the next issue refills it
    if constexpr (STAGES == 1) {
      if (next < groups) issue_projection_loads<HIDDEN>(x, buf_of(i + 1), first + static_cast<i64>(next) * kGroup, end, tile, lane);
      cp_async_commit();
    }

    // Accumulators 2r, 2r + 1 of a lane (mma C layout, norm/mhc_layout.cuh): token row
    // c_token(0) + 8r, mixes c_mix(nt, 0) and the next; the terms added hi + mid, then + lo.
    const i64 group_first = first + static_cast<i64>(grp) * kGroup;
    const int row0 = sk_mhc_c_token(0, lane), mix0 = sk_mhc_c_mix(0, 0, lane);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const i64 tg = group_first + row0 + 8 * r;
      if (tg >= end) continue;
      float* row = partials + (tg * num_tiles(HIDDEN) + tile) * kPartialStride;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e)
          v[e] = (acc[0][nt][2 * r + e] + acc[1][nt][2 * r + e]) + acc[2][nt][2 * r + e];
        *reinterpret_cast<float2*>(row + nt * 8 + mix0) = make_float2(v[0], v[1]);  // n-tile nt: 8 mixes on
      }
      // sum x^2 of this row's token: its entry with itself in Gram MMA j = r.
      if (sk_mhc_self_gram_holder(lane)) {
        const float s = sk_mhc_self_gram_acc(r, lane) & 1 ? gram[r][2 * r + 1] : gram[r][2 * r];  // no run-time index
        float4* gram_slots = reinterpret_cast<float4*>(row + kMixes);
        gram_slots[0] = make_float4(s, s, s, s);
        gram_slots[1] = make_float4(s, s, s, s);
        gram_slots[2] = make_float4(s, s, 0.0f, 0.0f);
      }
    }
  }
  cp_async_wait<0>();  // only empty groups can be pending here
}

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
