// gemm decode kernel (M <= 16): weight streaming, every recipe, portable (sm_89+, runs on sm_90
// and sm_120a/sm_121a).
//
// LAUNCH CONTRACT
//   template <int RECIPE, int OUT, int TOKEN_TILES, int WARPS, int ROW_TILES, int ROW_GROUPS>
//     RECIPE      sk::gemm::Recipe (0 nvfp4, 1 mxfp4, 2 mxfp8, 3 block_fp8, 4 tensor_fp8)
//     OUT         sk::gemm::OutType (0 bf16, 1 fp16, 2 fp32)
//     TOKEN_TILES 1 (M <= 8) or 2 (M <= 16)
//     WARPS       warps per block (4 or 8)
//     ROW_TILES   16-row tiles of B per warp (1..4)
//     ROW_GROUPS  divides WARPS: a tile has ROW_GROUPS x 16*ROW_TILES rows
//                 (sk_decode_tile_rows); warp w takes row group w % ROW_GROUPS and every
//                 (WARPS/ROW_GROUPS)-th K step from w / ROW_GROUPS. 1: the warps split the tile's
//                 K steps round-robin; > 1: the warps of a K phase load the same token bytes at
//                 about the same time, for L1 to serve all but the first (see "Token traffic").
//   Tiles: local row r of tile T is weight row sk_decode_row(T, r) (gemm/decode_schedule.cuh):
//     contiguous, or interleaved for mxfp8 / mxfp4 (a lane's rows 32 apart, so one vector load
//     fetches their swizzled scale words); tiles = sk_decode_tiles(N).
//   __global__ void sk::gemm::gemv_decode<...>(
//       const u8* a_codes,     // A [M, K]: E2M1 packed (K/2 bytes/row) or E4M3 (K bytes/row)
//       const void* a_scales,  // swizzled u8 (nvfp4/mx), fp32 [M, K/128] (block_fp8), unused (tensor_fp8)
//       const u8* b_codes,     // B [N, K], same code format
//       const void* b_scales,  // swizzled u8, fp32 [ceil(N/128), K/128], unused
//       const float* alpha,    // device scalar, nullptr = 1
//       void* c,               // C [M, ldc] of OUT
//       int M, int N, int K, int ldc,
//       float* partials,       // 2 * gridDim.x * M * tile rows floats when a tile may be split
//                              //   (sk_decode_may_split_tiles); else unused (may be null)
//       u32* tile_counters)    // same condition: `tiles` u32, zero before the first
//                              //   launch; every launch leaves them zero again (graph-replay safe)
//   grid  = (ctas, 1, 1), 1 <= ctas <= units: CTA c takes the contiguous (tile, 128-K step) work
//     units [c*units/ctas, (c+1)*units/ctas), units = tiles * K/128 < 2^31
//     (gemm/decode_schedule.cuh; ctas = tiles gives one whole tile per CTA, no partials)
//   block = (32*WARPS, 1, 1); __launch_bounds__ sk_decode_ctas_per_sm CTAs per SM
//   dynamic shared memory: 0 (static: WARPS*ROW_TILES*16*TOKEN_TILES*8*4 bytes + 4)
//   requirements: 1 <= M <= 8*TOKEN_TILES, K % 128 == 0 (one step = 128 K),
//     code arrays 16-byte aligned, swizzled scales 4-byte aligned, fp32 scales 4-byte.
//     Rows of C are written for 0 <= m < M, 0 <= n < N only.
//   Determinism: fixed work split and fixed reduction order (warps, then the CTAs of a split tile
//   in K order through `partials`); no floating-point atomics. Bitwise reproducible for a given
//   (config, ctas), independent of timing.
//
//   template <int OUT, int TOKEN_TILES, int WARPS, int ROW_TILES>
//   __global__ void sk::gemm::gemv_decode_mxfp8_bf16<...>(const __nv_bfloat16* x, const void* unused,
//       ... then as gemv_decode)
//     gemm.mxfp8_linear, M <= 16: gemv_decode<mxfp8> with BF16 tokens x [M, K] (row stride K,
//     16-byte aligned) quantized in the kernel by quantization.mxfp8's device function: bitwise
//     equal to quantization.mxfp8 + gemv_decode<mxfp8> with the same ctas (see Fp8Bf16Stage).
//     Same grid, block, scratch and requirements; 3 blocks of 128 threads per SM at TOKEN_TILES 1
//     (as gemv_decode<mxfp8>), 2 at TOKEN_TILES 2 (register bound, see below).
//
// HOW IT WORKS
//   Swap-AB tensor-core GEMV: 16 weight rows are the MMA's M side, up to 8 tokens its N side
//   (mma.sync m16n8k16, FP32 accumulate). The MMA's K slots of both operands are indexed by the
//   lane's t alone, so lanes may take any K pieces as long as weights and tokens agree. Warps take
//   128-K steps round-robin and, with ROW_GROUPS > 1, row groups; each weight byte is read
//   exactly once per launch.
//   Token traffic: every warp loads the token bytes of each step it computes. At 16 tokens and 16
//   rows per warp that is as many bytes, and as many load requests, as the weights. Requests are
//   what bounds the FP8 recipes at M = 16, so the wide map below halves them.
//   With ROW_GROUPS g the g warps of a K phase share a step; how much L1 then serves is not
//   measured (ops/gemm/gemm.md 5.1).
//   FP8 (mxfp8, block_fp8, tensor_fp8): mxfp8 lane (g, t) loads 8 bytes at 32b + 8t of each 32-K
//   block b of the step, so a quad covers one 32-K block and every MMA lies in one MXFP8 scale
//   block; tensor_fp8 and block_fp8, whose scale spans the step, load 32 contiguous bytes at 32t
//   as two 16-byte words (the wide map: half the load instructions, see load_step_wide). One
//   cvt.rn.f16x2.e4m3x2 per pair (exact) feeds FP16 MMAs; scales multiply FP32 partials (never the
//   FP16 operands, whose range would make that inexact): see fp8_compute_stage. Two register
//   stages keep the next step's loads in flight.
//   FP4: codes decode to FP16 value * 2^-14 without a lookup (sk_e2m1x8_to_f16x2_2m14), FP16 MMAs,
//   2^28 in the epilogue. nvfp4: lane (g, t) loads 16 contiguous bytes (32-K block t of the step),
//   UE4M3 scales folded in with one HMUL2 per pair (exact: see Nvfp4Stage). mxfp4: the FP8 mapping
//   at 4 bytes per block, UE8M0 scales on FP32 partials per 32-K block (see Mxfp4Stage).
#pragma once
#include "common/defs.cuh"
#include "common/mma.cuh"
#include "common/sync.cuh"
#include "gemm/decode_schedule.cuh"
#include "gemm/gemm_common.cuh"
#include "quantization/mxfp8.cuh"

namespace sk {
namespace gemm {

template <int RECIPE>
struct DecodeStep {
  // K elements consumed by one warp step: nvfp4 4 lanes x 16 bytes, mxfp4 4 lanes x 4 x 4 bytes,
  // FP8 4 lanes x 4 x 8 bytes.
  static constexpr int kStepK = 128;
};

// Byte b of four UE8M0 codes -> 2^(code-127) as float (byte b to bits 24..31, then >> 1: two
// integer ops). Code 0 (2^-127) reads as 0: outside the exact range anyway (see "Scales" above).
SK_DEVICE float ue8m0_byte_to_float(u32 codes, int b) {
  return __uint_as_float(__byte_perm(codes, 0u, 0x0444u | (u32)(b << 12)) >> 1);
}

// 8-byte loads at p + OFF with the offset as an immediate (the compiler would otherwise form a
// 64-bit address per load): weights streamed (evict-first), tokens and scales through the
// read-only path (re-read by every block).
template <int OFF>
SK_DEVICE uint2 ld_stream_u2(const u8* p) {
  uint2 v;
  asm volatile("ld.global.cs.v2.u32 {%0, %1}, [%2 + %3];" : "=r"(v.x), "=r"(v.y) : "l"(p), "n"(OFF));
  return v;
}
template <int OFF>
SK_DEVICE uint2 ld_ro_u2(const u8* p) {
  uint2 v;
  asm("ld.global.nc.v2.u32 {%0, %1}, [%2 + %3];" : "=r"(v.x), "=r"(v.y) : "l"(p), "n"(OFF));
  return v;
}
// 4-byte variants (mxfp4).
template <int OFF>
SK_DEVICE u32 ld_stream_u1(const u8* p) {
  u32 v;
  asm volatile("ld.global.cs.u32 %0, [%1 + %2];" : "=r"(v) : "l"(p), "n"(OFF));
  return v;
}
template <int OFF>
SK_DEVICE u32 ld_ro_u1(const u8* p) {
  u32 v;
  asm("ld.global.nc.u32 %0, [%1 + %2];" : "=r"(v) : "l"(p), "n"(OFF));
  return v;
}

// 16-byte variants (nvfp4, and the wide FP8 lane map).
template <int OFF>
SK_DEVICE uint4 ld_stream_u4(const u8* p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4 + %5];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "n"(OFF));
  return v;
}
template <int OFF>
SK_DEVICE uint4 ld_ro_u4(const u8* p) {
  uint4 v;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4 + %5];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "n"(OFF));
  return v;
}

// One word of each of a step's four 32-K blocks (FP8: 8 bytes, block stride 32; mxfp4: 4 bytes,
// stride 16): weights streamed, tokens through the read-only path.
template <bool STREAM, int OFF>
SK_DEVICE void ld_block_word(const u8* p, uint2& v) {
  if constexpr (STREAM) v = ld_stream_u2<OFF>(p);
  else v = ld_ro_u2<OFF>(p);
}
template <bool STREAM, int OFF>
SK_DEVICE void ld_block_word(const u8* p, u32& v) {
  if constexpr (STREAM) v = ld_stream_u1<OFF>(p);
  else v = ld_ro_u1<OFF>(p);
}
template <bool STREAM, int BLOCK_STRIDE, class Word>
SK_DEVICE void load_step_blocks(const u8* p, Word (&w)[4]) {
  ld_block_word<STREAM, 0>(p, w[0]);
  ld_block_word<STREAM, BLOCK_STRIDE>(p, w[1]);
  ld_block_word<STREAM, 2 * BLOCK_STRIDE>(p, w[2]);
  ld_block_word<STREAM, 3 * BLOCK_STRIDE>(p, w[3]);
}

// The wide FP8 lane map (tensor_fp8, block_fp8: one scale for all 128 K of a step, so the MMAs
// may take any K): lane t loads the 32 contiguous bytes at 32t as two 16-byte words, half the
// load instructions of the 8-byte map; words 2b, 2b + 1 play the role of block b's word pair.
template <bool STREAM>
SK_DEVICE void load_step_wide(const u8* p, uint2 (&w)[4]) {
  uint4 lo, hi;
  if constexpr (STREAM) lo = ld_stream_u4<0>(p), hi = ld_stream_u4<16>(p);
  else lo = ld_ro_u4<0>(p), hi = ld_ro_u4<16>(p);
  w[0] = make_uint2(lo.x, lo.y), w[1] = make_uint2(lo.z, lo.w);
  w[2] = make_uint2(hi.x, hi.y), w[3] = make_uint2(hi.z, hi.w);
}

// Bytes between the first bytes of lanes t and t + 1 of an FP8 recipe's step (see fp8_load_stage).
template <int RECIPE>
SK_DEVICE constexpr int fp8_lane_stride() { return RECIPE == kTensorFp8 || RECIPE == kBlockFp8 ? 32 : 8; }

// Everything one warp step of an FP8 recipe reads (loaded one step ahead of its use).
// acc += part * (sfw[row] * sfx[token]) for K block b of a step: the UE8M0 codes of a row / of
// token 2t + j sit in byte b of w_sf / x_sf (mxfp8 and mxfp4: the MMAs of a block never mix
// blocks, so its fp32 partial is scaled once; the scale product is exact, a power of two).
template <int ROW_TILES, int TOKEN_TILES>
SK_DEVICE void fold_ue8m0_block(float (&acc)[ROW_TILES][TOKEN_TILES][4], const float (&part)[ROW_TILES][TOKEN_TILES][4],
                                const u32 (&w_sf)[ROW_TILES][2], const u32 (&x_sf)[TOKEN_TILES][2], int b) {
  float sw[ROW_TILES][2], sx[TOKEN_TILES][2];
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) sw[rt][h] = ue8m0_byte_to_float(w_sf[rt][h], b);
#pragma unroll
  for (int nt = 0; nt < TOKEN_TILES; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) sx[nt][j] = ue8m0_byte_to_float(x_sf[nt][j], b);
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][nt][i] = fmaf(part[rt][nt][i], sw[rt][i >> 1] * sx[nt][i & 1], acc[rt][nt][i]);
}

// Interleaved tiles (sk_decode_interleaved): the swizzled scale words of a lane's 2*ROW_TILES
// weight rows, 32 rows apart, are adjacent (word 2 rt + h), so one 8- or 16-byte load fetches them.
template <int ROW_TILES>
SK_DEVICE void load_interleaved_scale_words(u32 (&w)[ROW_TILES][2], const u8* p) {
  static_assert(ROW_TILES == 1 || ROW_TILES == 2, "4 rows per 16-byte chunk");
  if constexpr (ROW_TILES == 1) {
    const uint2 v = ld_ro_u2<0>(p);
    w[0][0] = v.x, w[0][1] = v.y;
  } else {
    const uint4 v = ld_ro_u4<0>(p);
    w[0][0] = v.x, w[0][1] = v.y, w[1][0] = v.z, w[1][1] = v.w;
  }
}

// The UE8M0 scale words of a 128-K step (mxfp8, mxfp4): its 4 scale columns 4*step .. 4*step+3
// are one aligned u32 of the 128x4 swizzle, per weight row and per token 2t + j (TOKENS false: the
// fused mxfp8_linear path makes the token scales itself). INTERLEAVED: w_sfo[0][0] is the lane's
// first row's, and one load fetches every row's word (load_interleaved_scale_words).
template <bool TOKENS, bool INTERLEAVED, int ROW_TILES, int TOKEN_TILES>
SK_DEVICE void load_ue8m0_step_scales(u32 (&w_sf)[ROW_TILES][2], u32 (&x_sf)[TOKEN_TILES][2], int step, const u8* w_sf_base,
                                      const u32 (&w_sfo)[ROW_TILES][2], const u8* x_sf_base,
                                      const u32 (&x_sfo)[TOKEN_TILES][2]) {
  if constexpr (INTERLEAVED) {
    load_interleaved_scale_words(w_sf, w_sf_base + (w_sfo[0][0] + step * 512u));
  } else {
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h) w_sf[rt][h] = __ldg(reinterpret_cast<const u32*>(w_sf_base + (w_sfo[rt][h] + step * 512u)));
  }
#pragma unroll
  for (int nt = 0; nt < TOKEN_TILES && TOKENS; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) x_sf[nt][j] = __ldg(reinterpret_cast<const u32*>(x_sf_base + (x_sfo[nt][j] + step * 512u)));
}

template <int TOKEN_TILES, int ROW_TILES>
struct Fp8Stage {
  uint2 w[ROW_TILES][2][4];  // [row tile][row g / g+8][32-K block]: 8 bytes at 32*b + 8*t
  uint2 x[TOKEN_TILES][4];   // token g of each token tile, same K pieces
  u32 w_sf[ROW_TILES][2];    // mxfp8: the 4 UE8M0 codes of the step's 4 blocks, per row
  u32 x_sf[TOKEN_TILES][2];  // mxfp8: same per token 2t + j; block_fp8: sfa of token 2t + j (bits)
  float b_sf;                // block_fp8: sfb of this block's 128 rows
};

// FP8 recipes (mxfp8, block_fp8, tensor_fp8): a step is 128 K = four 32-K blocks. mxfp8 lane (g, t)
// loads bytes [32b + 8t, 32b + 8t + 8) of every block b, so the 4 lanes of a quad cover exactly one
// 32-K block (one MXFP8 scale); the wide map of tensor_fp8 and block_fp8 gives "block" b the bytes
// [32t + 8b, 32t + 8b + 8) instead (any K order works when one scale covers the step). Word j
// (j = 0, 1) of that piece feeds MMA (b, j), its low pair the K slots 2t, 2t+1 and its high pair
// 2t+8, 2t+9, for weights and tokens alike. Weights stay
// FP16 (one cvt per pair, no scaling) on FP16 MMAs; scales multiply FP32 partials:
//   mxfp8      acc += part_b * (sfb[row][b] * sfa[token][b])   per 32-K block (2 MMAs chained)
//   block_fp8  acc += part * (sfb[row/128] * sfa[token])       per step (= one 128-K block)
//   tensor_fp8 MMAs accumulate into acc directly; alpha at the end.
// Powers of two and products of FP16 values are exact in FP32, so the only roundings are the FP32
// accumulations (as in the reference's tolerance model), for scale products inside FP32's range.
// TOKENS false: weights and their scales only (the fused mxfp8_linear path quantizes its tokens).
// INTERLEAVED (mxfp8): see load_ue8m0_step_scales.
template <int RECIPE, bool INTERLEAVED, bool TOKENS = true, int TOKEN_TILES, int ROW_TILES>
SK_DEVICE void fp8_load_stage(Fp8Stage<TOKEN_TILES, ROW_TILES>& st, int step, const u8* const (&w_ptr)[ROW_TILES][2],
                              const u8* const (&x_ptr)[TOKEN_TILES], const u8* w_sf_base, const u32 (&w_sfo)[ROW_TILES][2],
                              const u8* x_sf_base, const u32 (&x_sfo)[TOKEN_TILES][2], const float* b_sfp) {
  const long long off = (long long)step * 128;
  constexpr bool kWide = fp8_lane_stride<RECIPE>() == 32;
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (kWide) load_step_wide<true>(w_ptr[rt][h] + off, st.w[rt][h]);
      else load_step_blocks<true, 32>(w_ptr[rt][h] + off, st.w[rt][h]);
    }
#pragma unroll
  for (int nt = 0; nt < TOKEN_TILES && TOKENS; ++nt) {
    if constexpr (kWide) load_step_wide<false>(x_ptr[nt] + off, st.x[nt]);
    else load_step_blocks<false, 32>(x_ptr[nt] + off, st.x[nt]);
  }
  if (RECIPE == kMxfp8) {
    load_ue8m0_step_scales<TOKENS, INTERLEAVED>(st.w_sf, st.x_sf, step, w_sf_base, w_sfo, x_sf_base, x_sfo);
  } else if (RECIPE == kBlockFp8) {
    st.b_sf = __ldg(b_sfp + step);
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        st.x_sf[nt][j] = __float_as_uint(__ldg(reinterpret_cast<const float*>(x_sf_base) + (x_sfo[nt][j] + step)));
  }
}

template <int RECIPE, int TOKEN_TILES, int ROW_TILES>
SK_DEVICE void fp8_compute_stage(const Fp8Stage<TOKEN_TILES, ROW_TILES>& st, float (&acc)[ROW_TILES][TOKEN_TILES][4]) {
  float part[ROW_TILES][TOKEN_TILES][4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    if (RECIPE == kMxfp8 || (RECIPE == kBlockFp8 && b == 0)) zero_fragments(part);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      u32 b_frag[TOKEN_TILES][2];
#pragma unroll
      for (int nt = 0; nt < TOKEN_TILES; ++nt) {
        const u32 xw = j ? st.x[nt][b].y : st.x[nt][b].x;
        b_frag[nt][0] = e4m3x2_to_f16x2<0>(xw);
        b_frag[nt][1] = e4m3x2_to_f16x2<1>(xw);
      }
#pragma unroll
      for (int rt = 0; rt < ROW_TILES; ++rt) {
        const u32 w0 = j ? st.w[rt][0][b].y : st.w[rt][0][b].x, w1 = j ? st.w[rt][1][b].y : st.w[rt][1][b].x;
        const u32 a_frag[4] = {e4m3x2_to_f16x2<0>(w0), e4m3x2_to_f16x2<0>(w1), e4m3x2_to_f16x2<1>(w0),
                               e4m3x2_to_f16x2<1>(w1)};
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; ++nt) {
          if (RECIPE == kTensorFp8) mma_f16_m16n8k16(acc[rt][nt], a_frag, b_frag[nt]);
          else mma_f16_m16n8k16(part[rt][nt], a_frag, b_frag[nt]);
        }
      }
    }
    if (RECIPE == kMxfp8) {
      fold_ue8m0_block(acc, part, st.w_sf, st.x_sf, b);
    }
  }
  if (RECIPE == kBlockFp8) {
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
      for (int nt = 0; nt < TOKEN_TILES; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          acc[rt][nt][i] = fmaf(part[rt][nt][i], st.b_sf * __uint_as_float(st.x_sf[nt][i & 1]), acc[rt][nt][i]);
  }
}

// Fused gemm.mxfp8_linear (gemv_decode_mxfp8_bf16): the mxfp8 step with BF16 tokens. Lane (g, t)
// loads the 8 BF16 at 32b + 8t of each block b of token g (16 bytes), i.e. the elements whose E4M3
// codes the mxfp8 step loads, so the quad (t = 0..3) holds exactly one 32-element MXFP8 block:
// the quantization.mxfp8 op's device function (sk::quant::mxfp8_quantize8: quad amax shuffles,
// UE8M0 scale, E4M3 codes) runs on it unchanged and yields the op's codes bit for bit, in the
// registers the mxfp8 step would have loaded. The scales of C columns 2t + j come from lane
// 4 (2t + j) (token g = 2t + j of the tile). Then fp8_compute_stage runs as for mxfp8: the result
// equals quantize + mm bit for bit (same MMAs, same order, same ctas).
template <int TOKEN_TILES, int ROW_TILES>
struct Fp8Bf16Stage {
  Fp8Stage<TOKEN_TILES, ROW_TILES> q;  // weights as loaded; x and x_sf filled by mxfp8_quantize_tokens
  uint4 xr[TOKEN_TILES][4];            // token g: 8 BF16 at 32b + 8t of block b
};

template <int TOKEN_TILES, int ROW_TILES>
SK_DEVICE void mxfp8_quantize_tokens(Fp8Bf16Stage<TOKEN_TILES, ROW_TILES>& st) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < TOKEN_TILES; ++nt) {
    u32 sf = 0;  // the 4 UE8M0 codes of token g, block b in byte b (the swizzled u32's order)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      u8 s;
      st.q.x[nt][b] = quant::mxfp8_quantize8<__nv_bfloat16, kCvtHardware>(st.xr[nt][b], s);
      sf |= (u32)s << (8 * b);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) st.q.x_sf[nt][j] = __shfl_sync(0xFFFFFFFFu, sf, 8 * t + 4 * j);
  }
}

// Loop-invariant addresses pinned in registers before the FP4 step loops: otherwise the compiler
// rematerializes them (row clamps, swizzle offsets, 64-bit products) in every load stage, ~90
// instructions per step. The FP8 recipes gain nothing from it (block_fp8 loses), so they are left
// unpinned.
template <class T>
SK_DEVICE void pin_in_register(const T*& p) { asm volatile("" : "+l"(p)); }
SK_DEVICE void pin_in_register(u32& v) { asm volatile("" : "+r"(v)); }
template <class T, int N>
SK_DEVICE void pin_in_register(T (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) pin_in_register(a[i]);
}
template <class First, class... Rest>
SK_DEVICE void pin_in_register(First& first, Rest&... rest) {
  pin_in_register(first);
  pin_in_register(rest...);
}

// Two register stages: the next step's loads are in flight while this one computes. The warp
// takes every STRIDE-th step from `step` (its first) to s_end.
template <int STRIDE, class Stage, class Load, class Compute>
SK_DEVICE void pipelined_steps(int step, int s_end, Stage& st0, Stage& st1, Load load, Compute compute) {
  if (step < s_end) load(st0, step);
#pragma unroll 1
  for (; step < s_end; step += 2 * STRIDE) {
    const int s1 = step + STRIDE;
    if (s1 < s_end) load(st1, s1);
    compute(st0);
    if (s1 >= s_end) break;
    if (s1 + STRIDE < s_end) load(st0, s1 + STRIDE);
    compute(st1);
  }
}

// The FP4 step loop: loop-invariant addresses pinned (pin_in_register), then two register stages
// of Stage, each filled by load_stage(st, step, w_ptr, x_ptr, w_sf_base, w_sfo, x_sf_base, x_sfo)
// (INTERLEAVED: only w_sfo[0][0] of the weight scale offsets is read).
template <int STRIDE, class Stage, bool INTERLEAVED, class WPtrs, class XPtrs, class WOffsets, class XOffsets, class LoadStage,
          class Compute>
SK_DEVICE void fp4_pipelined_steps(int first_step, int s_end, WPtrs& w_ptr, XPtrs& x_ptr, const void* b_scales,
                                   WOffsets& w_sfo, const void* a_scales, XOffsets& x_sfo, LoadStage load_stage,
                                   Compute compute) {
  const u8* w_sf_base = reinterpret_cast<const u8*>(b_scales);
  const u8* x_sf_base = reinterpret_cast<const u8*>(a_scales);
  if constexpr (INTERLEAVED) pin_in_register(w_ptr, x_ptr, w_sfo[0][0], x_sfo);  // the others are unused
  else pin_in_register(w_ptr, x_ptr, w_sfo, x_sfo);
  Stage st0, st1;
  auto load = [&](Stage& st, int step) { load_stage(st, step, w_ptr, x_ptr, w_sf_base, w_sfo, x_sf_base, x_sfo); };
  pipelined_steps<STRIDE>(first_step, s_end, st0, st1, load, compute);
}

// NVFP4: lane (g, t) holds the 32-K block t of the step (16 bytes) of its rows and token, and the
// two UE4M3 scales of that block's 16-K halves. Each u32 of codes decodes (sk_e2m1x8_to_f16x2_2m14)
// into the K slots of two MMAs: pairs 0, 1 feed slots {2t, 2t+1}, {2t+8, 2t+9} of the first, pairs
// 2, 3 of the second, for weights and tokens alike. The scale is folded in with one HMUL2 per
// pair, exactly: E2M1 x UE4M3 has <= 6 significant bits (2 x 4) and lies in [2^-10, 2688], so the
// product times 2^-14 lies in [2^-24, 0.17] on the f16 grid (subnormals included; f16 arithmetic
// and the f16 MMA do not flush). The two 2^-14 factors are undone in the epilogue (2^28, exact).
template <int TOKEN_TILES, int ROW_TILES>
struct Nvfp4Stage {
  uint4 w[ROW_TILES][2];    // [row tile][row g / g+8]
  uint4 x[TOKEN_TILES];     // token g of each token tile
  u32 w_sf[ROW_TILES][2];   // two UE4M3 codes (low byte: K 0..15 of the block)
  u32 x_sf[TOKEN_TILES];
};

template <int TOKEN_TILES, int ROW_TILES>
SK_DEVICE void nvfp4_load_stage(Nvfp4Stage<TOKEN_TILES, ROW_TILES>& st, int step, const u8* const (&w_ptr)[ROW_TILES][2],
                                const u8* const (&x_ptr)[TOKEN_TILES], const u8* w_sf_base,
                                const u32 (&w_sfo)[ROW_TILES][2], const u8* x_sf_base, const u32 (&x_sfo)[TOKEN_TILES]) {
  const long long off = (long long)step * 64;
  // Scale columns 8 step + 2t, +1: one aligned u16, two 128x4 k-tiles (1024 bytes) per step.
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st.w[rt][h] = ld_stream_u4<0>(w_ptr[rt][h] + off);
      st.w_sf[rt][h] = __ldg(reinterpret_cast<const u16*>(w_sf_base + (w_sfo[rt][h] + step * 1024u)));
    }
#pragma unroll
  for (int nt = 0; nt < TOKEN_TILES; ++nt) {
    st.x[nt] = ld_ro_u4<0>(x_ptr[nt] + off);
    st.x_sf[nt] = __ldg(reinterpret_cast<const u16*>(x_sf_base + (x_sfo[nt] + step * 1024u)));
  }
}

// Two UE4M3 codes (sign bits ignored) -> f16x2 {s0, s1} (exact: one F2FP).
SK_DEVICE __half2 ue4m3x2_to_half2(u32 two) {
  const u32 h = e4m3x2_to_f16x2<0>(two & 0x7F7Fu);
  return *reinterpret_cast<const __half2*>(&h);
}

// Codes word w times scale s (f16x2 {s, s}) -> the 4 pairs of sk_e2m1x8_to_f16x2_2m14, scaled.
SK_DEVICE void nvfp4_word(u32 w, __half2 s, u32 (&p)[4]) {
  sk_e2m1x8_to_f16x2_2m14(w, p);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&p[j]), s);
    p[j] = *reinterpret_cast<const u32*>(&v);
  }
}

// The two MMAs of one decoded u32 of FP4 codes per operand (sk_e2m1x8_to_f16x2_2m14 pairs): pairs
// 2j, 2j + 1 of weight rows g (wp[0]) and g + 8 (wp[1]) against the same pairs of each token tile.
template <int TOKEN_TILES>
SK_DEVICE void fp4_word_mmas(float (&acc)[TOKEN_TILES][4], const u32 (&wp)[2][4], const u32 (&xp)[TOKEN_TILES][4]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const u32 a_frag[4] = {wp[0][2 * j], wp[1][2 * j], wp[0][2 * j + 1], wp[1][2 * j + 1]};
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt) {
      const u32 b_frag[2] = {xp[nt][2 * j], xp[nt][2 * j + 1]};
      mma_f16_m16n8k16(acc[nt], a_frag, b_frag);
    }
  }
}

template <int TOKEN_TILES, int ROW_TILES>
SK_DEVICE void nvfp4_compute_stage(const Nvfp4Stage<TOKEN_TILES, ROW_TILES>& st, float (&acc)[ROW_TILES][TOKEN_TILES][4]) {
  __half2 w_s[ROW_TILES][2], x_s[TOKEN_TILES];
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) w_s[rt][h] = ue4m3x2_to_half2(st.w_sf[rt][h]);
#pragma unroll
  for (int nt = 0; nt < TOKEN_TILES; ++nt) x_s[nt] = ue4m3x2_to_half2(st.x_sf[nt]);
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // u32 q of the chunk: K 8q .. 8q+7 of the block, scale q / 2
    u32 xp[TOKEN_TILES][4];
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt) {
      const u32 xw = q == 0 ? st.x[nt].x : q == 1 ? st.x[nt].y : q == 2 ? st.x[nt].z : st.x[nt].w;
      nvfp4_word(xw, q < 2 ? __low2half2(x_s[nt]) : __high2half2(x_s[nt]), xp[nt]);
    }
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt) {
      u32 wp[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4& c = st.w[rt][h];
        nvfp4_word(q == 0 ? c.x : q == 1 ? c.y : q == 2 ? c.z : c.w, q < 2 ? __low2half2(w_s[rt][h]) : __high2half2(w_s[rt][h]),
                   wp[h]);
      }
      fp4_word_mmas(acc[rt], wp, xp);
    }
  }
}

// MXFP4: the FP8 lane mapping at half the bytes. Lane (g, t) loads the u32 at 16b + 4t of every
// 32-K block b of the step, so the quad covers block b and its two MMAs (pairs 0, 1 and 2, 3 of
// sk_e2m1x8_to_f16x2_2m14, weights and tokens alike) lie in one UE8M0 scale block. Operands stay
// unscaled (value * 2^-14, exact); as for MXFP8 the scales multiply the FP32 partial of each block
// (acc += part * sfb * sfa: powers of two, exact inside FP32's range), the 2^28 is the epilogue's.
template <int TOKEN_TILES, int ROW_TILES>
struct Mxfp4Stage {
  u32 w[ROW_TILES][2][4];   // [row tile][row g / g+8][32-K block]
  u32 x[TOKEN_TILES][4];
  u32 w_sf[ROW_TILES][2];   // the 4 UE8M0 codes of the step's blocks, per row
  u32 x_sf[TOKEN_TILES][2]; // same per token 2t + j
};

template <bool INTERLEAVED, int TOKEN_TILES, int ROW_TILES>
SK_DEVICE void mxfp4_load_stage(Mxfp4Stage<TOKEN_TILES, ROW_TILES>& st, int step, const u8* const (&w_ptr)[ROW_TILES][2],
                                const u8* const (&x_ptr)[TOKEN_TILES], const u8* w_sf_base,
                                const u32 (&w_sfo)[ROW_TILES][2], const u8* x_sf_base, const u32 (&x_sfo)[TOKEN_TILES][2]) {
  const long long off = (long long)step * 64;
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      load_step_blocks<true, 16>(w_ptr[rt][h] + off, st.w[rt][h]);
    }
#pragma unroll
  for (int nt = 0; nt < TOKEN_TILES; ++nt) {
    load_step_blocks<false, 16>(x_ptr[nt] + off, st.x[nt]);
  }
  load_ue8m0_step_scales<true, INTERLEAVED>(st.w_sf, st.x_sf, step, w_sf_base, w_sfo, x_sf_base, x_sfo);
}

template <int TOKEN_TILES, int ROW_TILES>
SK_DEVICE void mxfp4_compute_stage(const Mxfp4Stage<TOKEN_TILES, ROW_TILES>& st, float (&acc)[ROW_TILES][TOKEN_TILES][4]) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    float part[ROW_TILES][TOKEN_TILES][4];
    zero_fragments(part);
    u32 xp[TOKEN_TILES][4];
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt) sk_e2m1x8_to_f16x2_2m14(st.x[nt][b], xp[nt]);
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt) {
      u32 wp[2][4];
      sk_e2m1x8_to_f16x2_2m14(st.w[rt][0][b], wp[0]);
      sk_e2m1x8_to_f16x2_2m14(st.w[rt][1][b], wp[1]);
      fp4_word_mmas(part[rt], wp, xp);
    }
    fold_ue8m0_block(acc, part, st.w_sf, st.x_sf, b);
  }
}

// Interleaved tiles: the swizzled scale words of a lane's rows are read as one vector at its
// first row's place; a first row past N (every row of the lane then is) reads that place in the
// last 128-row block, which the swizzled buffer pads, so the load stays in bounds (results
// discarded).
SK_DEVICE int interleaved_scale_row(int first_row, int N) {
  return first_row < N ? first_row : (N - 1) / 128 * 128 + first_row % 128;
}

// One tile's share of a CTA: steps [s_begin, s_end) of the tile's kRows weight rows (sk_decode_row),
// warps taking row groups of 16*ROW_TILES rows and the steps of their group round-robin. A whole tile (s_begin 0, s_end num_steps) is
// stored directly; a split one goes through the tile's partials slot and counter (see
// gemm/decode_schedule.cuh; first_of_cta: this is the CTA's first tile, slot 2 cta, else 2 cta + 1).
// X_BF16 (mxfp8 only): a_codes holds BF16 tokens [M, K], quantized in the warp
// (gemv_decode_mxfp8_bf16), a_scales unused.
template <int RECIPE, int OUT, int TOKEN_TILES, int WARPS, int ROW_TILES, int ROW_GROUPS, bool X_BF16>
SK_DEVICE void gemv_decode_tile(const u8* __restrict__ a_codes, const void* __restrict__ a_scales,
                                const u8* __restrict__ b_codes, const void* __restrict__ b_scales,
                                const float* __restrict__ alpha, void* __restrict__ c, int M, int N, int K, int ldc,
                                int tile, int s_begin, int s_end, bool first_of_cta, int units, int ctas,
                                float* __restrict__ partials, u32* __restrict__ tile_counters) {
  static_assert(TOKEN_TILES == 1 || TOKEN_TILES == 2, "M <= 16");
  static_assert(!X_BF16 || RECIPE == kMxfp8, "BF16 tokens: mxfp8 only");
  static_assert(ROW_TILES >= 1 && ROW_TILES <= 4, "register budget");
  static_assert(ROW_GROUPS >= 1 && WARPS % ROW_GROUPS == 0, "row groups split the warps");
  static_assert(!X_BF16 || ROW_GROUPS == 1, "the fused kernel keeps the mxfp8 kernel's K split");
  using Traits = RecipeTraits<RECIPE>;
  constexpr int kStepK = DecodeStep<RECIPE>::kStepK;
  constexpr int kRows = sk_decode_tile_rows(ROW_TILES, ROW_GROUPS), kTokens = 8 * TOKEN_TILES;
  static_assert(RECIPE != kBlockFp8 || 128 % kRows == 0, "block_fp8: a block's rows share one 128-row scale");
  // Warp w's share: row group w % ROW_GROUPS, every kPhases-th step from s_begin + w / ROW_GROUPS;
  // its sums go to slice w / ROW_GROUPS of red (the epilogue adds the slices up).
  constexpr int kPhases = WARPS / ROW_GROUPS;
  constexpr bool kInterleaved = sk_decode_interleaved(RECIPE, ROW_TILES, ROW_GROUPS);

  // Laundered per tile, so the lane's address arithmetic is redone per tile instead of hoisted
  // out of the CTA's tile loop and kept live through the step loop (4-6 registers on sm_90a).
  int tid = (int)threadIdx.x;
  asm volatile("" : "+r"(tid), "+r"(K));
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Weight row of tile-local row r: row0 + row_offset(r) (contiguous, or interleaved tiles: see
  // decode_schedule.cuh); block_fp8 tiles are contiguous, inside one 128-row scale block.
  const int row0 = sk_decode_tile_base(tile, RECIPE, ROW_TILES, ROW_GROUPS);
  const auto row_offset = [](int r) { return sk_decode_row_offset(r, RECIPE, ROW_TILES, ROW_GROUPS); };
  const int warp_row0 = warp % ROW_GROUPS * 16 * ROW_TILES;  // the warp's first row in the tile
  const int phase = warp / ROW_GROUPS, first_step = s_begin + phase;
  const long long row_bytes = Traits::row_bytes(K);
  const int k_blocks128 = K / 128;
  const int num_steps = K / kStepK;

  // Rows this lane loads (clamped: out-of-range rows re-read row N-1, results discarded).
  int w_rows[ROW_TILES][2];
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) w_rows[rt][h] = min(row0 + row_offset(warp_row0 + rt * 16 + h * 8 + g), N - 1);

  float acc[ROW_TILES][TOKEN_TILES][4];
  zero_fragments(acc);

  if constexpr (!Traits::kFp4) {
    // Tokens past M re-read token M-1: their columns of C are computed and never stored, and MMA
    // columns do not mix, so no masking is needed.
    const u8* w_ptr[ROW_TILES][2];
    const u8* x_ptr[TOKEN_TILES];
    // Scale positions as 32-bit offsets (fewer live registers): mxfp8 the row's / token's
    // swizzled column 0 (step s adds 512 s), block_fp8 the token's sfa row (float index).
    u32 w_sfo[ROW_TILES][2] = {}, x_sfo[TOKEN_TILES][2] = {};
    const u8* w_sf_base = reinterpret_cast<const u8*>(b_scales);
    const u8* x_sf_base = reinterpret_cast<const u8*>(a_scales);
    const float* b_sfp = nullptr;
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w_ptr[rt][h] = b_codes + w_rows[rt][h] * row_bytes + fp8_lane_stride<RECIPE>() * t;
        if (RECIPE == kMxfp8) w_sfo[rt][h] = (u32)swizzled_scale_offset(w_rows[rt][h], 0, (K / 32 + 3) / 4);
      }
    if constexpr (kInterleaved)
      w_sfo[0][0] = (u32)swizzled_scale_offset(interleaved_scale_row(row0 + row_offset(warp_row0 + g), N), 0, (K / 32 + 3) / 4);
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt) {
      // BF16 tokens: 2 bytes per element, the same elements (see Fp8Bf16Stage).
      x_ptr[nt] = a_codes + (min(nt * 8 + g, M - 1) * row_bytes + fp8_lane_stride<RECIPE>() * t) * (X_BF16 ? 2 : 1);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int m = min(nt * 8 + 2 * t + j, M - 1);  // the C column this lane holds
        if (RECIPE == kMxfp8) x_sfo[nt][j] = (u32)swizzled_scale_offset(m, 0, (K / 32 + 3) / 4);
        if (RECIPE == kBlockFp8) x_sfo[nt][j] = (u32)(m * k_blocks128);
      }
    }
    if (RECIPE == kBlockFp8) b_sfp = reinterpret_cast<const float*>(b_scales) + (long long)(row0 >> 7) * k_blocks128;

    if constexpr (X_BF16) {
      Fp8Bf16Stage<TOKEN_TILES, ROW_TILES> st0, st1;
      auto load = [&](Fp8Bf16Stage<TOKEN_TILES, ROW_TILES>& st, int step) {
        fp8_load_stage<RECIPE, kInterleaved, false>(st.q, step, w_ptr, x_ptr, w_sf_base, w_sfo, x_sf_base, x_sfo, b_sfp);
#pragma unroll
        for (int nt = 0; nt < TOKEN_TILES; ++nt) {
          const u8* p = x_ptr[nt] + (long long)step * 256;
          st.xr[nt][0] = ld_ro_u4<0>(p);
          st.xr[nt][1] = ld_ro_u4<64>(p);
          st.xr[nt][2] = ld_ro_u4<128>(p);
          st.xr[nt][3] = ld_ro_u4<192>(p);
        }
      };
      auto compute = [&](Fp8Bf16Stage<TOKEN_TILES, ROW_TILES>& st) {
        mxfp8_quantize_tokens(st);
        fp8_compute_stage<RECIPE>(st.q, acc);
      };
      pipelined_steps<kPhases>(first_step, s_end, st0, st1, load, compute);
    } else {
      Fp8Stage<TOKEN_TILES, ROW_TILES> st0, st1;
      auto load = [&](Fp8Stage<TOKEN_TILES, ROW_TILES>& st, int step) {
        fp8_load_stage<RECIPE, kInterleaved>(st, step, w_ptr, x_ptr, w_sf_base, w_sfo, x_sf_base, x_sfo, b_sfp);
      };
      auto compute = [&](const Fp8Stage<TOKEN_TILES, ROW_TILES>& st) { fp8_compute_stage<RECIPE>(st, acc); };
      pipelined_steps<kPhases>(first_step, s_end, st0, st1, load, compute);
    }
  } else if constexpr (RECIPE == kNvfp4) {
    // Lane (g, t) loads the 16 bytes (32-K block t of the step) of each of its rows and tokens.
    const u8* w_ptr[ROW_TILES][2];
    const u8* x_ptr[TOKEN_TILES];
    u32 w_sfo[ROW_TILES][2], x_sfo[TOKEN_TILES];  // swizzled offset of scale columns 2t, 2t+1 at step 0
    const int num_k_tiles = (K / 16 + 3) / 4;
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w_ptr[rt][h] = b_codes + w_rows[rt][h] * row_bytes + 16 * t;
        w_sfo[rt][h] = (u32)swizzled_scale_offset(w_rows[rt][h], 2 * t, num_k_tiles);
      }
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt) {
      const int m = min(nt * 8 + g, M - 1);  // tokens past M: computed, never stored
      x_ptr[nt] = a_codes + m * row_bytes + 16 * t;
      x_sfo[nt] = (u32)swizzled_scale_offset(m, 2 * t, num_k_tiles);
    }
    using Stage = Nvfp4Stage<TOKEN_TILES, ROW_TILES>;
    fp4_pipelined_steps<kPhases, Stage, false>(
        first_step, s_end, w_ptr, x_ptr, b_scales, w_sfo, a_scales, x_sfo,
        [](Stage& st, int step, const auto&... where) { nvfp4_load_stage(st, step, where...); },
        [&](const Stage& st) { nvfp4_compute_stage(st, acc); });
  } else {
    // MXFP4: lane (g, t) loads the 4 bytes at 16b + 4t of every 32-K block b of the step (the FP8
    // mapping at half the bytes), so a quad covers one scale block per pair of MMAs.
    const u8* w_ptr[ROW_TILES][2];
    const u8* x_ptr[TOKEN_TILES];
    u32 w_sfo[ROW_TILES][2], x_sfo[TOKEN_TILES][2];
    const int num_k_tiles = (K / 32 + 3) / 4;
#pragma unroll
    for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w_ptr[rt][h] = b_codes + w_rows[rt][h] * row_bytes + 4 * t;
        w_sfo[rt][h] = (u32)swizzled_scale_offset(w_rows[rt][h], 0, num_k_tiles);
      }
    if constexpr (kInterleaved)
      w_sfo[0][0] = (u32)swizzled_scale_offset(interleaved_scale_row(row0 + row_offset(warp_row0 + g), N), 0, num_k_tiles);
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt) {
      x_ptr[nt] = a_codes + min(nt * 8 + g, M - 1) * row_bytes + 4 * t;
#pragma unroll
      for (int j = 0; j < 2; ++j) x_sfo[nt][j] = (u32)swizzled_scale_offset(min(nt * 8 + 2 * t + j, M - 1), 0, num_k_tiles);
    }
    using Stage = Mxfp4Stage<TOKEN_TILES, ROW_TILES>;
    fp4_pipelined_steps<kPhases, Stage, kInterleaved>(
        first_step, s_end, w_ptr, x_ptr, b_scales, w_sfo, a_scales, x_sfo,
        [](Stage& st, int step, const auto&... where) { mxfp4_load_stage<kInterleaved>(st, step, where...); },
        [&](const Stage& st) { mxfp4_compute_stage(st, acc); });
  }

  // ---- fixed-order reduction: warps (shared memory), then the CTAs of a split tile (partials) ----
  __shared__ float red[kPhases][kRows][kTokens];
  __shared__ u32 is_last_cta;
  __syncthreads();  // the CTA's previous tile is done reading red
#pragma unroll
  for (int rt = 0; rt < ROW_TILES; ++rt)
#pragma unroll
    for (int nt = 0; nt < TOKEN_TILES; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        red[phase][warp_row0 + rt * 16 + g + (i >> 1) * 8][nt * 8 + 2 * t + (i & 1)] = acc[rt][nt][i];
  __syncthreads();

  // FP4 operands are decoded as value * 2^-14 (weights and tokens): 2^28 restores the products.
  const float out_scale = load_alpha(alpha) * (Traits::kFp4 ? 268435456.0f : 1.0f);
  if (s_begin == 0 && s_end == num_steps) {
    for (int idx = threadIdx.x; idx < kRows * kTokens; idx += WARPS * 32) {
      const int r = idx % kRows, m = idx / kRows;  // consecutive threads -> consecutive n
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kPhases; ++w) sum += red[w][r][m];
      if (row0 + row_offset(r) < N && m < M) store_out<OUT>(c, (long long)m * ldc + row0 + row_offset(r), sum * out_scale);
    }
    return;
  }

  // Partials slot s holds [M][kRows] floats.
  const int slot = 2 * (int)blockIdx.x + (first_of_cta ? 0 : 1);
  for (int idx = threadIdx.x; idx < kRows * kTokens; idx += WARPS * 32) {
    const int r = idx % kRows, m = idx / kRows;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kPhases; ++w) sum += red[w][r][m];
    if (row0 + row_offset(r) < N && m < M) partials[((long long)slot * M + m) * kRows + r] = sum;
  }
  // Hand-over (common/sync.cuh): the barrier orders the CTA's partial stores before thread 0's
  // acq_rel add, which publishes them (release, cumulative through the barrier) and, in the last
  // arriver, acquires every other CTA's; the second barrier extends that to the CTA's readers.
  __syncthreads();
  const int unit0 = tile * num_steps;
  const int cta_first = sk_decode_cta_of_unit(unit0, units, ctas);
  const int cta_last = sk_decode_cta_of_unit(unit0 + num_steps - 1, units, ctas);
  if (threadIdx.x == 0) {
    const u32 arrived = atomic_add_acq_rel_gpu(tile_counters + tile, 1u);
    is_last_cta = arrived == (u32)(cta_last - cta_first);
    if (is_last_cta) tile_counters[tile] = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!is_last_cta) return;
  // Only the first CTA may hold the tile as its last one (it began before the tile).
  const int first_slot = sk_decode_partial_slot(cta_first, tile, num_steps, units, ctas);
  for (int idx = threadIdx.x; idx < kRows * kTokens; idx += WARPS * 32) {
    const int r = idx % kRows, m = idx / kRows;
    if (row0 + row_offset(r) >= N || m >= M) continue;
    float sum = __ldcg(partials + ((long long)first_slot * M + m) * kRows + r);
    for (int cta = cta_first + 1; cta <= cta_last; ++cta) sum += __ldcg(partials + ((long long)(2 * cta) * M + m) * kRows + r);
    store_out<OUT>(c, (long long)m * ldc + row0 + row_offset(r), sum * out_scale);
  }
}

// Before waiting for the previous kernel (programmatic dependent launch): pull the weight bytes of
// this CTA's first steps (up to two per warp: what the step pipeline loads first) into L2, one
// bulk prefetch per row, so that they stream in during that kernel's tail. Only a hint: it fills
// L2, the point of coherence, and every real load comes after the wait, so even weights that the
// previous kernel wrote are read correctly. With a plain launch it just warms L2.
template <int RECIPE, int ROW_TILES, int WARPS, int ROW_GROUPS>
SK_DEVICE void prefetch_first_weight_steps(const u8* __restrict__ b_codes, int N, int K, int u_begin, int u_end,
                                           int num_steps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kRows = sk_decode_tile_rows(ROW_TILES, ROW_GROUPS);
  static_assert(kRows <= 32 * WARPS, "a thread per row");
  constexpr int kStepBytes = RecipeTraits<RECIPE>::kFp4 ? DecodeStep<RECIPE>::kStepK / 2 : DecodeStep<RECIPE>::kStepK;
  const int r = (int)threadIdx.x;
  if (u_begin >= u_end || r >= kRows) return;
  const int tile = u_begin / num_steps, s0 = u_begin - tile * num_steps;
  const int steps = min(min(num_steps - s0, u_end - u_begin), 2 * WARPS / ROW_GROUPS);
  const int row = min(sk_decode_row(tile, r, RECIPE, ROW_TILES, ROW_GROUPS), N - 1);
  // 16-byte aligned (code arrays are, rows are multiples of 64 bytes) and a multiple of 16 bytes.
  const u8* p = b_codes + row * RecipeTraits<RECIPE>::row_bytes(K) + (long long)s0 * kStepBytes;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(steps * kStepBytes) : "memory");
#endif
}

// The kernel: CTA blockIdx.x walks its units (gemm/decode_schedule.cuh) tile by tile.
template <int RECIPE, int OUT, int TOKEN_TILES, int WARPS, int ROW_TILES, int ROW_GROUPS, bool X_BF16>
SK_DEVICE void gemv_decode_body(const u8* __restrict__ a_codes, const void* __restrict__ a_scales,
                                const u8* __restrict__ b_codes, const void* __restrict__ b_scales,
                                const float* __restrict__ alpha, void* __restrict__ c, int M, int N, int K, int ldc,
                                float* __restrict__ partials, u32* __restrict__ tile_counters) {
  const int num_steps = K / DecodeStep<RECIPE>::kStepK;
  const int units = sk_decode_tiles(N, RECIPE, ROW_TILES, ROW_GROUPS) * num_steps, ctas = (int)gridDim.x;
  const int u_begin = sk_decode_cta_begin((int)blockIdx.x, units, ctas);
  const int u_end = sk_decode_cta_begin((int)blockIdx.x + 1, units, ctas);
  // Launched with SK_LAUNCH_OVERLAP_PREVIOUS: this CTA may be resident before the previous kernel
  // (which may have written the tokens, scales, alpha, C or the workspace) has finished.
  prefetch_first_weight_steps<RECIPE, ROW_TILES, WARPS, ROW_GROUPS>(b_codes, N, K, u_begin, u_end, num_steps);
  pdl_enter();
#pragma unroll 1
  for (int u = u_begin; u < u_end;) {
    const int tile = u / num_steps, s_begin = u - tile * num_steps;
    const int s_end = min(num_steps, s_begin + (u_end - u));
    gemv_decode_tile<RECIPE, OUT, TOKEN_TILES, WARPS, ROW_TILES, ROW_GROUPS, X_BF16>(
        a_codes, a_scales, b_codes, b_scales, alpha, c, M, N, K, ldc, tile, s_begin, s_end, u == u_begin, units, ctas,
        partials, tile_counters);
    u += s_end - s_begin;
  }
}

// CTAs per SM: sk_decode_ctas_per_sm (gemm/decode_schedule.cuh), which the host sizes its grid with.
template <int RECIPE, int OUT, int TOKEN_TILES, int WARPS, int ROW_TILES, int ROW_GROUPS>
__global__ void __launch_bounds__(WARPS * 32, sk_decode_ctas_per_sm(RECIPE, TOKEN_TILES, WARPS, ROW_TILES))
    gemv_decode(const u8* __restrict__ a_codes, const void* __restrict__ a_scales, const u8* __restrict__ b_codes,
                const void* __restrict__ b_scales, const float* __restrict__ alpha, void* __restrict__ c, int M,
                int N, int K, int ldc, float* __restrict__ partials, u32* __restrict__ tile_counters) {
  gemv_decode_body<RECIPE, OUT, TOKEN_TILES, WARPS, ROW_TILES, ROW_GROUPS, false>(a_codes, a_scales, b_codes, b_scales,
                                                                                  alpha, c, M, N, K, ldc, partials,
                                                                                  tile_counters);
}

// The 16-token variant holds 32 more registers of raw BF16 per stage: the 256-thread bound (the
// ROW_TILES = 4 one) instead of spilling.
template <int OUT, int TOKEN_TILES, int WARPS, int ROW_TILES>
__global__ void __launch_bounds__(WARPS * 32, (ROW_TILES == 4 || TOKEN_TILES == 2 ? 256 : 384) / (WARPS * 32))
    gemv_decode_mxfp8_bf16(const __nv_bfloat16* __restrict__ x, const void* __restrict__ unused,
                           const u8* __restrict__ b_codes, const void* __restrict__ b_scales,
                           const float* __restrict__ alpha, void* __restrict__ c, int M, int N, int K, int ldc,
                           float* __restrict__ partials, u32* __restrict__ tile_counters) {
  gemv_decode_body<kMxfp8, OUT, TOKEN_TILES, WARPS, ROW_TILES, 1, true>(reinterpret_cast<const u8*>(x), unused, b_codes,
                                                                     b_scales, alpha, c, M, N, K, ldc, partials,
                                                                     tile_counters);
}

}  // namespace gemm
}  // namespace sk
