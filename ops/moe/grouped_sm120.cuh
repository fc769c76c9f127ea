// moe grouped regime, W4A4 on consumer Blackwell: FC1 / FC2 on the SM120 block-scaled mma.sync
// (kind::mxf4nvf4, scale_vec::4X, UE4M3). sm_120a / sm_121a ONLY; any other target fails to compile.
//
// LAUNCH CONTRACT
//   template <int PHASE, int ACT, int BM, int WARPS_M, int MODE>
//   __global__ void sk::moe::grouped_sm120(sk_moe_params p)
//     As sk::moe::grouped_gemm<PHASE, SK_MOE_W4A4, SK_MOE_WFMT_NVFP4, ACT, BM, WARPS_M, MODE>
//     (moe/grouped.cuh: same arguments, grid, tiles, reads and writes, same epilogue), except:
//     BM in {32, 64, 128} (p.s.bm, plan with dims.sm120 = 1), WARPS_M = BM <= 32 ? 1 : 2, warp
//     tile (BM / WARPS_M) x 32 (multiples of 32 x 32: one scale register pair per 2 m16 x 4 n8 tiles);
//     dynamic shared memory sk_moe_sm120_smem_bytes(BM, 128, 4) (4 stages of 128 K: 73728 at BM 128).
//   Launch sequence as the portable W4A4 grouped path (route_pack, pack_quant, FC1, FC2, combine).
//
// HOW IT WORKS
//   gemm/sm120_blockscaled.cuh's stage layout and compute (sm120_compute_stage: ldmatrix.x4 of the
//   XOR-swizzled E2M1 tiles, one u32 of UE4M3 scales per row and 64-K slab straight into the
//   instruction's scale registers), fed by a loader that maps the tile's rows: A rows are packed
//   rows of the tile's expert (packed_a / inter, scales from their swizzled layouts), B rows are
//   weight rows (FC1 gated: up and gate rows interleaved, sk_moe_grouped_fc1_row). Accumulators
//   hold the dot products unscaled; the epilogue is grouped.cuh's (alpha, activation, BF16,
//   NVFP4 re-quantization of the intermediate, or the combine's down rows / atomic adds).
//   The CPU emulation (tests/test_moe_ref.c) replays these index functions with
//   ops/common/ref_mma_emu.c's fragment emulation against the exact NVFP4 trace.
#pragma once
#include "gemm/sm120_blockscaled.cuh"  // first: enables the block-scaled wrappers on NVRTC sm_121a
#include "moe/grouped.cuh"

namespace sk {
namespace moe {

template <int ACT>
struct Sm120MoeGuard {
  static constexpr bool kNever = false;
};

#if defined(SK_HAS_SM120_BLOCK_SCALED_MMA)
// cp.async copies of the code rows and the scale words of one operand tile of ROWS rows into the
// SM120 stage layout (sk_sm120_code_smem_offset, sk_sm120_scale_smem_word), k stage `ks` (128 K):
// tile row r comes from global row src_row(r) of a [*, kdim] E2M1 matrix with swizzled scales.
template <int ROWS, int THREADS, class SrcRow>
SK_DEVICE void sm120_copy_operand(u8* codes_smem, u32* scales_smem, int ks, const u8* codes, const u8* scales, int kdim,
                                  SrcRow src_row) {
  constexpr int RB = 64, CPR = RB / 16, SLABS = 2;
  const long long grow = kdim / 2, kbyte = (long long)ks * RB;
#pragma unroll
  for (int it = 0; it < (ROWS * CPR + THREADS - 1) / THREADS; ++it) {
    const int c = (int)threadIdx.x + it * THREADS, r = sk_sm120_copy_row(c, RB), byte = sk_sm120_copy_byte(c, RB);
    if ((ROWS * CPR) % THREADS == 0 || c < ROWS * CPR)
      cp_async_16(codes_smem + sk_sm120_code_smem_offset(r, byte, RB), codes + (long long)src_row(r) * grow + kbyte + byte);
  }
#pragma unroll
  for (int it = 0; it < (SLABS * ROWS + THREADS - 1) / THREADS; ++it) {
    const int c = (int)threadIdx.x + it * THREADS, slab = c / ROWS, r = c % ROWS;
    if ((SLABS * ROWS) % THREADS == 0 || c < SLABS * ROWS)
      cp_async_4(scales_smem + sk_sm120_scale_smem_word(slab, r, ROWS), scales + sk_sm120_scale_gmem_offset(0, src_row(r), ks, slab, kdim));
  }
}

template <int PHASE, int ACT, int BM, int WARPS_M, int MODE>
SK_DEVICE void grouped_sm120_body(const sk_moe_params& p) {
  constexpr int BN = kBN, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N, STAGES = 4;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
  constexpr int STAGE_BYTES = sk_sm120_stage_bytes(gemm::kNvfp4, BM, BN);
  extern __shared__ __align__(128) u8 sm120_smem[];
  int4 tile;
  if (!enter_tile<PHASE>(p, THREADS, tile)) return;
  const int e = tile.x, row0 = tile.y, nt_cta = blockIdx.x;
  const int np = padded(p.n), kp = padded(p.k), K = p.k;
  const int kdim = PHASE == 1 ? kp : np, k_stages = kdim / SK_SM120_BK;
  const u8* a_codes = p.scratch + (PHASE == 1 ? p.s.packed_a : p.s.inter);
  const u8* a_scales = p.scratch + (PHASE == 1 ? p.s.packed_a_scales : p.s.inter_scales);
  const u8* wc = PHASE == 1 ? p.w1_codes + e * sk_moe_w1_code_bytes(ACT, np, kp) : p.w2_codes + e * sk_moe_w2_code_bytes(K, np);
  const u8* ws = PHASE == 1 ? p.w1_scales + e * sk_moe_w1_scale_bytes(ACT, SK_MOE_WFMT_NVFP4, np, kp)
                            : p.w2_scales + e * sk_moe_w2_scale_bytes(SK_MOE_WFMT_NVFP4, K, np);
  const auto b_row = [&](int r) -> int {
    return PHASE == 1 ? sk_moe_grouped_fc1_row(ACT, np, nt_cta, r) : min(nt_cta * BN + r, K - 1);
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm0 = sk_sm120_warp_m(warp, WARPS_M) * WM, wn0 = sk_sm120_warp_n(warp, WARPS_M) * WN;
  float acc[MT][NT][4];
  zero_fragments(acc);
  // Stage layout: [A codes BM x 64][B codes BN x 64][A scales 2 x BM u32][B scales 2 x BN u32].
  const auto load_stage = [&](int slot, int ks) {
    u8* st = sm120_smem + slot * STAGE_BYTES;
    u32* sa = reinterpret_cast<u32*>(st + (BM + BN) * 64);
    sm120_copy_operand<BM, THREADS>(st, sa, ks, a_codes, a_scales, kdim, [&](int r) { return row0 + r; });
    sm120_copy_operand<BN, THREADS>(st + BM * 64, sa + 2 * BM, ks, wc, ws, kdim, b_row);
  };
  ring_prologue<STAGES>(k_stages, load_stage);
#pragma unroll 1
  for (int ks = 0; ks < k_stages; ++ks) {
    ring_advance<STAGES>(ks, k_stages, load_stage);
    gemm::sm120_compute_stage<gemm::kNvfp4, BM, BN, MT, NT>(sm120_smem + (ks % STAGES) * STAGE_BYTES, wm0, wn0, lane, acc);
  }
  cp_async_wait<0>();
  grouped_epilogue<PHASE, SK_MOE_W4A4, ACT, MODE, MT, NT>(p, acc, tile, nt_cta, wm0, wn0, 1.0f);
}
#endif  // SK_HAS_SM120_BLOCK_SCALED_MMA

template <int PHASE, int ACT, int BM, int WARPS_M, int MODE>
__global__ void __launch_bounds__(32 * WARPS_M * 4, 1) grouped_sm120(const sk_moe_params p) {
  static_assert(BM == 32 || BM == 64 || BM == 128, "BM in {32, 64, 128}");
  static_assert(BM % (32 * WARPS_M) == 0, "warp tile rows: multiples of 32");
  static_assert(sk_moe_sm120_smem_bytes(BM, kBN, 4) <= SK_MOE_SMEM_LIMIT, "99 KB of shared memory");
#if defined(__CUDA_ARCH__)
#if defined(SK_SM120_TARGET) && defined(SK_HAS_SM120_BLOCK_SCALED_MMA)
  grouped_sm120_body<PHASE, ACT, BM, WARPS_M, MODE>(p);
#else
  static_assert(Sm120MoeGuard<ACT>::kNever, "grouped_sm120 needs sm_120a or sm_121a (block-scaled mma.sync)");
#endif
#endif
}

}  // namespace moe
}  // namespace sk
