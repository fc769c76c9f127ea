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
// cp.async copies of k stage `ks` (128 K) of the tile: A rows row0 + r of a_codes / a_scales
// (row bytes kdim / 2, swizzled scales with kdim / 16 columns), B rows b_row(r) of the expert.
template <int BM, int BN, int THREADS, class BRow>
SK_DEVICE void moe_sm120_load_stage(u8* stage, int ks, const u8* a_codes, const u8* a_scales, const u8* b_codes,
                                    const u8* b_scales, int row0, int kdim, BRow b_row) {
  constexpr int RB = 64, CPR = RB / 16, SLABS = 2;
  u8* s_a = stage;
  u8* s_b = s_a + BM * RB;
  u32* s_sa = reinterpret_cast<u32*>(s_b + BN * RB);
  u32* s_sb = s_sa + SLABS * BM;
  const long long grow = kdim / 2, kbyte = (long long)ks * RB;
  const int tid = threadIdx.x;
#pragma unroll
  for (int it = 0; it < (BM * CPR + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((BM * CPR) % THREADS != 0 && c >= BM * CPR) break;
    const int r = sk_sm120_copy_row(c, RB), byte = sk_sm120_copy_byte(c, RB);
    cp_async_16(s_a + sk_sm120_code_smem_offset(r, byte, RB), a_codes + (long long)(row0 + r) * grow + kbyte + byte);
  }
#pragma unroll
  for (int it = 0; it < (BN * CPR + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((BN * CPR) % THREADS != 0 && c >= BN * CPR) break;
    const int r = sk_sm120_copy_row(c, RB), byte = sk_sm120_copy_byte(c, RB);
    cp_async_16(s_b + sk_sm120_code_smem_offset(r, byte, RB), b_codes + (long long)b_row(r) * grow + kbyte + byte);
  }
#pragma unroll
  for (int it = 0; it < (SLABS * BM + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((SLABS * BM) % THREADS != 0 && c >= SLABS * BM) break;
    const int slab = c / BM, r = c % BM;
    cp_async_4(s_sa + sk_sm120_scale_smem_word(slab, r, BM), a_scales + sk_sm120_scale_gmem_offset(0, row0 + r, ks, slab, kdim));
  }
#pragma unroll
  for (int it = 0; it < (SLABS * BN + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((SLABS * BN) % THREADS != 0 && c >= SLABS * BN) break;
    const int slab = c / BN, r = c % BN;
    cp_async_4(s_sb + sk_sm120_scale_smem_word(slab, r, BN), b_scales + sk_sm120_scale_gmem_offset(0, b_row(r), ks, slab, kdim));
  }
}

template <int PHASE, int ACT, int BM, int WARPS_M, int MODE>
SK_DEVICE void grouped_sm120_body(const sk_moe_params& p) {
  constexpr int BN = kBN, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N, STAGES = 4;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
  constexpr int STAGE_BYTES = sk_sm120_stage_bytes(gemm::kNvfp4, BM, BN);
  extern __shared__ __align__(128) u8 sm120_smem[];
  pdl_enter();
  if (PHASE == 1) zero_out_acc_share(p, THREADS);
  const int* flags = reinterpret_cast<const int*>(p.scratch + p.s.flags);
  if ((int)blockIdx.y >= flags[1]) return;
  const int4 tile = reinterpret_cast<const int4*>(p.scratch + p.s.tiles)[blockIdx.y];
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
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_stages) moe_sm120_load_stage<BM, BN, THREADS>(sm120_smem + s * STAGE_BYTES, s, a_codes, a_scales, wc, ws, row0, kdim, b_row);
    cp_async_commit();
  }
#pragma unroll 1
  for (int ks = 0; ks < k_stages; ++ks) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = ks + STAGES - 1;
    if (next < k_stages)
      moe_sm120_load_stage<BM, BN, THREADS>(sm120_smem + (next % STAGES) * STAGE_BYTES, next, a_codes, a_scales, wc, ws, row0, kdim, b_row);
    cp_async_commit();
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
