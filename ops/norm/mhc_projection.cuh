// norm.mhc: run_pre's projection kernel for the split schedule (2d in the launch contract,
// norm/mhc.cuh).
#pragma once
#include "norm/mhc_common.cuh"

namespace sk {
namespace mhc {

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

}  // namespace mhc
}  // namespace sk
