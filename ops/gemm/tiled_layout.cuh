// Index math of the tiled prefill GEMM (gemm/mma_tiled.cuh) in one place that the CUDA kernel,
// the host op (runtime/ops/gemm/blockscaled.c: the shared memory size) and the CPU model
// (tests/test_gemm_tiled_model.c) include: plain C11 as well as CUDA C++17 (int arithmetic only,
// no CUDA headers when compiled as C). The model replays the kernel's raster, producer, fragment
// loads and scale reads with exactly these functions and checks the result with an independently
// written MMA emulation, so the two cannot drift apart.
//
// Conventions: lane = 4*g + t (g = lane/4, t = lane%4). One stage = BK = 128 K elements of BM rows
// of A and BN rows of B. Recipes as sk::gemm::Recipe: 0 nvfp4, 1 mxfp4, 2 mxfp8, 3 block_fp8,
// 4 tensor_fp8.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_TILED_FN SK_HOST_DEVICE constexpr
#else
#define SK_TILED_FN static inline
#endif

#define SK_TILED_BK 128
#define SK_TILED_GROUP_M 8 /* M tiles per group of the grouped raster */

// ---- stage layout: [A codes BM x RB][B codes BN x RB][A scales][B scales] -----------------------
SK_TILED_FN int sk_tiled_is_fp4(int recipe) { return recipe <= 1; }
// RB: code bytes of one row in one stage.
SK_TILED_FN int sk_tiled_row_bytes(int recipe) { return sk_tiled_is_fp4(recipe) ? SK_TILED_BK / 2 : SK_TILED_BK; }
SK_TILED_FN int sk_tiled_chunks(int recipe) { return sk_tiled_row_bytes(recipe) / 16; }  // 16-byte chunks per row
// 512-byte swizzled scale k-tiles per stage (nvfp4: 8 scale columns of 16 K; mx: 4 of 32 K).
SK_TILED_FN int sk_tiled_scale_k_tiles(int recipe) { return recipe == 0 ? 2 : 1; }
SK_TILED_FN int sk_tiled_scale_a_bytes(int recipe, int bm) {
  return recipe <= 2 ? 512 * sk_tiled_scale_k_tiles(recipe) : recipe == 3 ? 4 * bm : 0;
}
SK_TILED_FN int sk_tiled_scale_b_bytes(int recipe) {
  return recipe <= 2 ? 512 * sk_tiled_scale_k_tiles(recipe) : recipe == 3 ? 16 : 0;
}
SK_TILED_FN int sk_tiled_off_b(int recipe, int bm) { return bm * sk_tiled_row_bytes(recipe); }
SK_TILED_FN int sk_tiled_off_scale_a(int recipe, int bm, int bn) { return (bm + bn) * sk_tiled_row_bytes(recipe); }
SK_TILED_FN int sk_tiled_off_scale_b(int recipe, int bm, int bn) {
  return sk_tiled_off_scale_a(recipe, bm, bn) + sk_tiled_scale_a_bytes(recipe, bm);
}
SK_TILED_FN int sk_tiled_stage_bytes(int recipe, int bm, int bn) {
  return sk_tiled_off_scale_b(recipe, bm, bn) + sk_tiled_scale_b_bytes(recipe);
}
// Dynamic shared memory of one block (bytes).
SK_TILED_FN int sk_tiled_smem_bytes(int recipe, int bm, int bn, int stages) {
  return stages * sk_tiled_stage_bytes(recipe, bm, bn);
}

// Byte offset in a code tile of 16-byte chunk `chunk` of row `row`. FP8 (128-byte rows): the
// chunk is XORed with 2*(row%4), which makes the 8-byte fragment loads conflict-free per
// half-warp; FP4 (64-byte rows): 16-byte loads are conflict-free per quarter-warp unswizzled.
SK_TILED_FN int sk_tiled_code_offset(int recipe, int row, int chunk) {
  return row * sk_tiled_row_bytes(recipe) + (sk_tiled_is_fp4(recipe) ? chunk : (chunk ^ ((row & 3) << 1))) * 16;
}

// ---- swizzled block scales (ops/gemm/gemm.md 2.1) ------------------------------------------------
// Byte offset of (row within the 128-row block, scale column within the k-tile) in one k-tile.
SK_TILED_FN int sk_tiled_swz_in_tile(int row_in_128, int col4) {
  return (row_in_128 & 31) * 16 + (row_in_128 >> 5) * 4 + col4;
}
// num_k_tiles of the operand's swizzled scales: ceil(K / vec / 4) with K % 128 == 0.
SK_TILED_FN int sk_tiled_num_scale_k_tiles(int recipe, int K) { return recipe == 0 ? K / 64 : K / 128; }
// Global byte offset of the first k-tile of stage kb for the 128-row block holding tile row 0
// `row0`; the stage's k-tiles are contiguous (sk_tiled_scale_k_tiles of 512 bytes).
SK_TILED_FN long long sk_tiled_scale_src_offset(int recipe, int row0, int kb, int num_k_tiles) {
  return ((long long)(row0 >> 7) * num_k_tiles + (long long)kb * sk_tiled_scale_k_tiles(recipe)) * 512;
}

// ---- grouped raster: block pid of a (num_n, num_m) grid -> tile, in groups of 8 M tiles ----------
// pid = by * num_n + bx (the block's linear index); group pid / (8 * num_n) covers M tiles
// 8 * group .. (the last group may be ragged).
SK_TILED_FN int sk_tiled_tile_m(int pid, int num_n, int num_m) {
  const int per_group = SK_TILED_GROUP_M * num_n, first_m = (pid / per_group) * SK_TILED_GROUP_M;
  const int group_m = num_m - first_m < SK_TILED_GROUP_M ? num_m - first_m : SK_TILED_GROUP_M;
  return first_m + (pid % per_group) % group_m;
}
SK_TILED_FN int sk_tiled_tile_n(int pid, int num_n, int num_m) {
  const int per_group = SK_TILED_GROUP_M * num_n, first_m = (pid / per_group) * SK_TILED_GROUP_M;
  const int group_m = num_m - first_m < SK_TILED_GROUP_M ? num_m - first_m : SK_TILED_GROUP_M;
  return (pid % per_group) / group_m;
}

// ---- producer -----------------------------------------------------------------------------------
// Thread tid copies 16-byte chunk sk_tiled_copy_chunk of rows sk_tiled_copy_row + c * row_step
// (c < sk_tiled_copies, stopping at the tile's last row). row_step is a multiple of 4, so the FP8
// swizzle and the chunk are the same for every c: shared offset = sk_tiled_copy_dst + c * dst_step.
SK_TILED_FN int sk_tiled_copy_row_step(int recipe, int threads) { return threads / sk_tiled_chunks(recipe); }
SK_TILED_FN int sk_tiled_copies(int rows, int row_step) { return (rows + row_step - 1) / row_step; }
// (unsigned: the thread index is never negative, and the compiler then needs no sign fix-up)
SK_TILED_FN int sk_tiled_copy_row(int recipe, unsigned tid) { return (int)(tid / (unsigned)sk_tiled_chunks(recipe)); }
SK_TILED_FN int sk_tiled_copy_chunk(int recipe, unsigned tid) { return (int)(tid % (unsigned)sk_tiled_chunks(recipe)); }
SK_TILED_FN int sk_tiled_copy_dst(int recipe, unsigned tid) {
  return sk_tiled_code_offset(recipe, sk_tiled_copy_row(recipe, tid), sk_tiled_copy_chunk(recipe, tid));
}
SK_TILED_FN int sk_tiled_copy_dst_step(int recipe, int row_step) { return row_step * sk_tiled_row_bytes(recipe); }

// ---- FP4 consumers: lane t holds the 16-byte chunk t (elements 32t..32t+31) of each of its rows --
// Word w of the chunk (elements 8w..8w+7) decodes to 4 pairs p[0..3] (sk_e2m1x8_to_f16x2_2m14 in
// gemm/e2m1_decode.cuh fixes which elements), which feed two k16 MMAs k2 = 0, 1. Register `reg`
// of MMA k2 is pair sk_tiled_fp4_a_pair of the row g (reg even) or g + 8 (reg odd) word for A,
// pair sk_tiled_fp4_b_pair for B (a0..a3 / b0, b1 as in the PTX m16n8k16 fragment layout).
SK_TILED_FN int sk_tiled_fp4_a_pair(int k2, int reg) { return 2 * k2 + (reg >> 1); }
SK_TILED_FN int sk_tiled_fp4_a_row_half(int reg) { return reg & 1; }
SK_TILED_FN int sk_tiled_fp4_b_pair(int k2, int reg) { return 2 * k2 + reg; }
// nvfp4: the u16 of scale columns 2t, 2t+1 of the slab (k-tile t/2, bytes 2(t%2), +1) for the row
// r128 of its 128-row block; word w uses byte sk_tiled_nvfp4_scale_byte(w) of it (16 K each).
SK_TILED_FN int sk_tiled_nvfp4_scale_offset(int r128, int t) { return (t >> 1) * 512 + sk_tiled_swz_in_tile(r128, 2 * (t & 1)); }
SK_TILED_FN int sk_tiled_nvfp4_scale_byte(int w) { return w >> 1; }
// mxfp4: scale column t of the slab's single k-tile.
SK_TILED_FN int sk_tiled_mxfp4_scale_offset(int r128, int t) { return sk_tiled_swz_in_tile(r128, t); }

// ---- FP8 consumers: 32-element K block blk, lane t loads bytes 32 blk + 8t .. +7 of a row --------
SK_TILED_FN int sk_tiled_fp8_chunk(int blk, int t) { return 2 * blk + (t >> 1); }
SK_TILED_FN int sk_tiled_fp8_half(int t) { return (t & 1) * 8; }
