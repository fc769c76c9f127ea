// Index math of the SM120 block-scaled GEMM (gemm/sm120_blockscaled.cuh), in one place that both
// the CUDA kernel and the C emulation test include: this header is plain C11 as well as CUDA C++17
// (int arithmetic only, no CUDA headers when compiled as C). tests/ref/mma_emu.c drives the
// emulated mma.sync with exactly these functions (skref_sm120_sim_gemm), so the tile loads,
// smem swizzle, ldmatrix addressing, scale-register lanes, MMA selectors and the epilogue mapping
// the kernel uses are the ones checked against the double reference on the CPU.
//
// Conventions: lane = 4*g + t (g = lane/4, t = lane%4). One pipeline stage covers 128 K elements
// (BK = 128): 64 bytes per row for E2M1 codes, 128 bytes for E4M3. One "slab" is the K range of
// one aligned u32 of scales (4 scale columns): 64 K for nvfp4, 128 K for mxfp4 / mxfp8.
// Recipe numbers as sk::gemm::Recipe: 0 nvfp4, 1 mxfp4, 2 mxfp8.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_SM120_FN SK_HOST_DEVICE constexpr
#else
#define SK_SM120_FN static inline
#endif

#define SK_SM120_BK 128

// ---- recipe geometry ---------------------------------------------------------------------------
SK_SM120_FN int sk_sm120_is_fp4(int recipe) { return recipe != 2; }
SK_SM120_FN int sk_sm120_scale_vec(int recipe) { return recipe == 0 ? 16 : 32; }
// Code bytes of one row in one stage (128 K).
SK_SM120_FN int sk_sm120_stage_row_bytes(int recipe) { return sk_sm120_is_fp4(recipe) ? SK_SM120_BK / 2 : SK_SM120_BK; }
// K elements of one MMA: m16n8k64 (e2m1) or m16n8k32 (e4m3). Either way 32 code bytes per row.
SK_SM120_FN int sk_sm120_mma_k(int recipe) { return sk_sm120_is_fp4(recipe) ? 64 : 32; }
// Slabs (u32 of scales per row) per stage: 2 (nvfp4), 1 (mx).
SK_SM120_FN int sk_sm120_slabs_per_stage(int recipe) { return SK_SM120_BK / (4 * sk_sm120_scale_vec(recipe)); }
// MMAs per slab: 1 (nvfp4), 2 (mxfp4), 4 (mxfp8).
SK_SM120_FN int sk_sm120_mmas_per_slab(int recipe) { return 4 * sk_sm120_scale_vec(recipe) / sk_sm120_mma_k(recipe); }
// Byte-id selector of the j-th MMA of a slab: the first of its K blocks within the u32
// (nvfp4 0; mxfp4 0, 2; mxfp8 0, 1, 2, 3).
SK_SM120_FN int sk_sm120_bid(int recipe, int j) { return j * (sk_sm120_mma_k(recipe) / sk_sm120_scale_vec(recipe)); }
// First code byte (within a stage row) of MMA j of slab `slab`.
SK_SM120_FN int sk_sm120_mma_byte(int recipe, int slab, int j) { return (slab * sk_sm120_mmas_per_slab(recipe) + j) * 32; }

// ---- global addressing ---------------------------------------------------------------------------
// Code bytes of one row of A or B (K-major).
SK_SM120_FN long long sk_sm120_row_bytes(int recipe, int K) { return sk_sm120_is_fp4(recipe) ? K / 2 : K; }
// num_k_tiles of the 128x4 swizzled scale layout (K % 128 == 0, so K/vec is a multiple of 4).
SK_SM120_FN int sk_sm120_num_k_tiles(int recipe, int K) { return K / (4 * sk_sm120_scale_vec(recipe)); }
// Byte offset of (row, scale column) in the 128x4 swizzled layout (ops/gemm/gemm.md 2.1).
SK_SM120_FN long long sk_sm120_swizzled_offset(int row, int scale_col, int num_k_tiles) {
  return (long long)(row >> 7) * num_k_tiles * 512 + (long long)(scale_col >> 2) * 512 + (row & 31) * 16 +
         ((row & 127) >> 5) * 4 + (scale_col & 3);
}
// Global byte offset of the slab u32 (scale columns 4s..4s+3, s = kstage*slabs + slab) of `row`.
SK_SM120_FN long long sk_sm120_scale_gmem_offset(int recipe, int row, int kstage, int slab, int K) {
  return sk_sm120_swizzled_offset(row, 4 * (kstage * sk_sm120_slabs_per_stage(recipe) + slab),
                                  sk_sm120_num_k_tiles(recipe, K));
}

// ---- shared memory ---------------------------------------------------------------------------
// Stage layout: [A codes BM x RB][B codes BN x RB][A scales slabs x BM u32][B scales slabs x BN u32],
// RB = sk_sm120_stage_row_bytes. Codes: 16-byte chunks XOR-swizzled by row so that the 8 rows
// an ldmatrix phase reads hit 8 distinct 16-byte bank groups (RB = 64: chunk ^ ((row>>1)&3);
// RB = 128: chunk ^ (row&7)).
SK_SM120_FN int sk_sm120_code_smem_offset(int row, int byte, int row_bytes) {
  const int swz = (row_bytes >> 4) >= 8 ? (row & 7) : ((row >> 1) & 3);
  return row * row_bytes + ((((byte >> 4) ^ swz)) << 4) + (byte & 15);
}
SK_SM120_FN int sk_sm120_stage_bytes(int recipe, int bm, int bn) {
  return (bm + bn) * sk_sm120_stage_row_bytes(recipe) + (bm + bn) * sk_sm120_slabs_per_stage(recipe) * 4;
}
// Dynamic shared memory of one block (bytes). Must be <= 101376 (99 KB) on GeForce Blackwell.
SK_SM120_FN int sk_sm120_smem_bytes(int recipe, int bm, int bn, int stages) {
  return stages * sk_sm120_stage_bytes(recipe, bm, bn);
}
// Word index of (slab, tile row) in a stage's scale array of `rows` rows.
SK_SM120_FN int sk_sm120_scale_smem_word(int slab, int row, int rows) { return slab * rows + row; }

// cp.async work split: copy item c (c = tid, tid + threads, ...) of a stage's code tile is
// 16-byte chunk c % CPR of tile row c / CPR (CPR = RB/16: consecutive threads, consecutive bytes);
// scale item c is tile row c % rows of slab c / rows.
SK_SM120_FN int sk_sm120_copy_row(int c, int row_bytes) { return c / (row_bytes >> 4); }
SK_SM120_FN int sk_sm120_copy_byte(int c, int row_bytes) { return (c % (row_bytes >> 4)) * 16; }

// ---- warp-level mapping ----------------------------------------------------------------------
// Warp w owns rows [wm*WM, +WM) and cols [wn*WN, +WN) of the block tile.
SK_SM120_FN int sk_sm120_warp_m(int warp, int warps_m) { return warp % warps_m; }
SK_SM120_FN int sk_sm120_warp_n(int warp, int warps_m) { return warp / warps_m; }

// ldmatrix.x4 addresses. Lane l supplies row l%8 of matrix l/8; lane (g,t) then receives in
// register i the 4 bytes at (address of lane 8i+g) + 4t.
// A (one m16 tile, one MMA): matrices = (rows 0-7, bytes 0-15), (rows 8-15, bytes 0-15),
// (rows 0-7, bytes 16-31), (rows 8-15, bytes 16-31) -> the m16n8k{32,64} A fragment a0..a3.
SK_SM120_FN int sk_sm120_ldsm_a_row(int lane) { return (lane & 7) + 8 * ((lane >> 3) & 1); }
SK_SM120_FN int sk_sm120_ldsm_a_byte(int lane) { return 16 * (lane >> 4); }
// B (two n8 tiles 2p, 2p+1, one MMA): matrices = (tile 2p, bytes 0-15), (tile 2p, bytes 16-31),
// (tile 2p+1, bytes 0-15), (tile 2p+1, bytes 16-31) -> b0,b1 of tile 2p, then of tile 2p+1.
SK_SM120_FN int sk_sm120_ldsm_b_row(int lane) { return (lane & 7) + 8 * (lane >> 4); }
SK_SM120_FN int sk_sm120_ldsm_b_byte(int lane) { return 16 * ((lane >> 3) & 1); }

// Scale registers. For every group of 32 warp rows (2 m16 tiles) and of 32 warp cols (4 n8
// tiles), each lane holds one slab u32 of ONE row / column, straight from shared memory:
//   A: row 16*tid_a + (g + 8*(t&1)) with tid_a = t>>1, i.e. MMA row m = g + 8*(t&1) of m tile
//      tid_a sits at lane 4*(m%8) + 2*tid_a + m/8 as the instruction expects;
//   B: col 8*tid_b + g with tid_b = t, i.e. MMA col n = g of n tile tid_b at lane 4*n + tid_b.
// Both reduce to 8*t + g: a permutation of 0..31 (bank-conflict free).
SK_SM120_FN int sk_sm120_sfa_row(int lane) { return 16 * ((lane & 3) >> 1) + (lane >> 2) + 8 * (lane & 1); }
SK_SM120_FN int sk_sm120_sfb_row(int lane) { return 8 * (lane & 3) + (lane >> 2); }
// Selectors for m tile mt / n tile nt of the warp: scale register index and thread-id.
SK_SM120_FN int sk_sm120_sfa_reg(int mt) { return mt >> 1; }
SK_SM120_FN int sk_sm120_tid_a(int mt) { return mt & 1; }
SK_SM120_FN int sk_sm120_sfb_reg(int nt) { return nt >> 2; }
SK_SM120_FN int sk_sm120_tid_b(int nt) { return nt & 3; }

// Accumulator register i of a lane -> (row, col) within its m16 x n8 tile.
SK_SM120_FN int sk_sm120_acc_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
SK_SM120_FN int sk_sm120_acc_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
