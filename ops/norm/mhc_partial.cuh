// norm.mhc: the tensor-core partial kernels of run_pre and run_post_pre (2 in the launch contract,
// norm/mhc.cuh): their shared-memory layout, cp.async stages, mix-back, MMAs and schedules.
#pragma once
#include "norm/mhc_common.cuh"

namespace sk {
namespace mhc {

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
SK_HOST_DEVICE constexpr int partial_dynamic_smem_bytes(int ns, int stages, bool own_sums, int fn_smem) {
  return kPartialSmemAlign + partial_smem_bytes(ns, stages, own_sums) + fn_smem * partial_fn_term_bytes(ns);
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
//     its mix-back, so a group has two barriers instead of four.
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
  // post_pre lets its finalize (launched overlapped) be scheduled only once this CTA's groups are
  // done, not at entry; run_pre triggers at entry. Same bits either way; why each entry triggers
  // where it does: ops/norm/norm.mhc.md (launches).
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

}  // namespace mhc
}  // namespace sk
