// norm.mhc: the device code its kernels share (launch contract: norm/mhc.cuh): types and tile
// geometry, the mix-back of one lane's 8 elements (post, both partial variants, the fused
// decode), and what the tensor-core partials and run_pre's projection share: 16-token groups, the
// exact 3-term bf16 split of fn, the alignment of their shared-memory buffers.
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

// ---- tensor cores: 16-token groups (the M of mma.m16n8k16) and the exact split of fn ----------------

constexpr int kGroup = SK_MHC_GROUP;
constexpr int kChunks = SK_MHC_CHUNKS;
constexpr int kWarpKSteps = SK_MHC_WARP_KSTEPS;
constexpr int kNTiles = kMixes / 8;    // 3 n8 tiles of the 24 mixes
constexpr int kFnTerms = 3;            // fn = hi + mid + lo (bf16): exact for normal fp32
// Alignment of the stage buffers (see partial_body) and the dynamic shared memory a launch gives.
constexpr int kPartialSmemAlign = 128;
// The first kPartialSmemAlign-aligned shared-memory address at or after `address`.
SK_DEVICE u32 align_smem_address(u32 address) { return (address + (kPartialSmemAlign - 1)) & ~u32(kPartialSmemAlign - 1); }

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

}  // namespace mhc
}  // namespace sk
