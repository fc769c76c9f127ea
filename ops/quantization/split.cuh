// Work split of the row quantizers (quantization/nvfp4.cuh, quantization/mxfp8.cuh), in one place
// that the kernels, the host grid (quant_rows_grid, runtime/ops/quantization/quant_common.c) and
// the CPU mapping test (tests/test_quant_mapping.c) include: plain C11 as well as CUDA C++17
// (integer arithmetic only), so the test checks the kernels' own index arithmetic.
//
// The input [M, K] is cut into 8-element chunks (one 16-byte load), cpr = K/8 per row; a scale
// block is bc chunks (2 NVFP4, 4 MXFP8). The work follows the 128x4 swizzled scale layout
// (common/scale_layout.cuh), whose 16-byte pieces hold rows r, r+32, r+64, r+96 of a 128-row tile
// times the 4 scale columns of one k-tile (4 bc chunks per row). A "unit" (one CTA step) is the
// 4 * 256 chunks of
//   rows  band * 128 + r0 + [0, R) + 32 g   (g = 0..3, the tile's four row groups)
//   cols  the k-tile kt (4 bc chunks per row)
// with R = 256 / (4 bc) (32 NVFP4: a unit is a whole tile; 16 MXFP8: half a tile, r0 = 0 or 16).
// The units of one (band, r0) form a "slab"; unit (slab, kt) is slab `slab`, k-tile kt. The grid
// is 2-D, (gx, gy): CTA (bx, by) takes the k-tiles kt = bx, bx + gx, ... < k_tiles of slab by,
// then the same of slab by + gy, by + 2 gy, ... < slabs (any gx, gy >= 1 is correct: no
// division anywhere in the walk). The host launches gx = k_tiles (one k-tile per CTA and slab,
// so CTAs in launch order are neighbouring k-tiles of the same rows) and gy = about slabs / the
// units per CTA it wants. In a unit, thread t holds the four chunks
//   row slab_row + t / (4 bc) + 32 j, chunk column kt * 4 bc + t % (4 bc)      (j = 0..3)
// all loaded before any arithmetic. So:
//  * a warp's load reads whole 128-byte (NVFP4: 4 rows) or 256-byte (MXFP8: 2 rows) row pieces;
//  * a scale block is bc adjacent lanes of one row (the kernels' amax shuffles), and the four
//    blocks of a k-tile row are the 4 bc lanes t & ~(4 bc - 1) ..;
//  * thread t holds the scales of rows r, r+32, r+64, r+96 of its block: the four blocks' lanes
//    transpose their 4x4 scale bytes with two shuffles (sk_qsplit_transpose_*), after which the
//    first lane of block c holds row group c's four scales = word c of the 16-byte piece, and the
//    row-major word of row r + 32c, columns 4kt..4kt+3;
//  * the unit's swizzled scales are 512 (NVFP4) or 256 (MXFP8) contiguous bytes, written once by
//    4-byte stores of adjacent lanes (whole sectors), padding rows and columns included (their
//    scales are set to 0): every byte of the swizzled buffer is written exactly once and there is
//    no separate padding pass.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_QSPLIT_FN SK_HOST_DEVICE constexpr
#else
#define SK_QSPLIT_FN static inline
#endif

#define SK_QSPLIT_THREADS 256   /* threads per CTA */
#define SK_QSPLIT_BAND_ROWS 128 /* rows per band: one swizzled scale row tile */
#define SK_QSPLIT_GROUP_ROWS 32 /* rows between the four rows of one 16-byte swizzled piece */
#define SK_QSPLIT_PER_STEP 4    /* chunks per thread per unit: one per row group */

// Counts of positive m and cpr in unsigned arithmetic: shifts on the device, no sign fix-ups.
SK_QSPLIT_FN int sk_qsplit_bands(int m) {
  return (int)(((unsigned)m + SK_QSPLIT_BAND_ROWS - 1) / SK_QSPLIT_BAND_ROWS);
}

// Chunks per row of one k-tile (4 scale blocks of bc chunks): 8 NVFP4, 16 MXFP8.
SK_QSPLIT_FN int sk_qsplit_tile_chunks(int bc) { return 4 * bc; }
// Rows per row group of a unit (R): 32 NVFP4, 16 MXFP8.
SK_QSPLIT_FN int sk_qsplit_unit_rows(int bc) { return SK_QSPLIT_THREADS / sk_qsplit_tile_chunks(bc); }
// Slabs per band: 1 NVFP4, 2 MXFP8.
SK_QSPLIT_FN int sk_qsplit_slabs_per_band(int bc) { return SK_QSPLIT_GROUP_ROWS / sk_qsplit_unit_rows(bc); }
SK_QSPLIT_FN int sk_qsplit_k_tiles(int cpr, int bc) { return (int)(((unsigned)cpr / (unsigned)bc + 3u) / 4u); }
// Slabs of an [m, 8 cpr] tensor: below 2^24 for M * K <= 2^34.
SK_QSPLIT_FN int sk_qsplit_slabs(int m, int bc) { return sk_qsplit_bands(m) * sk_qsplit_slabs_per_band(bc); }
// Units of an [m, 8 cpr] tensor: below 2^27 for M * K <= 2^34 (and K < 2^31).
SK_QSPLIT_FN int sk_qsplit_units(int m, int cpr, int bc) { return sk_qsplit_slabs(m, bc) * sk_qsplit_k_tiles(cpr, bc); }

// CTA (bx, by) of a (gx, gy) grid: its first unit is (slab by, k-tile bx) if both are in range;
// after unit (*slab, *kt) its next one, or 0 when there is none. No wrap: kt + gx < 2^32
// (k_tiles < 2^28, gx < 2^31) and slab + gy < 2^32 (slabs < 2^24, gy <= 65535).
SK_QSPLIT_FN int sk_qsplit_has_unit(unsigned slab, unsigned kt, unsigned slabs, unsigned k_tiles) {
  return slab < slabs && kt < k_tiles;
}
SK_QSPLIT_FN int sk_qsplit_next_unit(unsigned* slab, unsigned* kt, unsigned bx, unsigned gx, unsigned gy,
                                     unsigned slabs, unsigned k_tiles) {
  unsigned next_kt = *kt + gx, next_slab = *slab;
  if (next_kt >= k_tiles) next_kt = bx, next_slab += gy;
  if (next_slab >= slabs) return 0;
  *kt = next_kt;
  *slab = next_slab;
  return 1;
}

// Row of the slab's first chunk (thread 0, row group 0) and the band's row offset of it.
SK_QSPLIT_FN unsigned sk_qsplit_slab_row(unsigned slab, int bc) {
  return slab / (unsigned)sk_qsplit_slabs_per_band(bc) * SK_QSPLIT_BAND_ROWS +
         slab % (unsigned)sk_qsplit_slabs_per_band(bc) * (unsigned)sk_qsplit_unit_rows(bc);
}
// Thread t's row in its slab and chunk column in its k-tile.
SK_QSPLIT_FN unsigned sk_qsplit_thread_row(unsigned t, int bc) { return t / (unsigned)sk_qsplit_tile_chunks(bc); }
SK_QSPLIT_FN unsigned sk_qsplit_thread_col(unsigned t, int bc) { return t % (unsigned)sk_qsplit_tile_chunks(bc); }
// Thread t's scale block in its k-tile (0..3) and whether it is the block's first lane (the lane
// that stores the block's scale words).
SK_QSPLIT_FN unsigned sk_qsplit_thread_block(unsigned t, int bc) { return sk_qsplit_thread_col(t, bc) / (unsigned)bc; }
SK_QSPLIT_FN int sk_qsplit_block_leader(unsigned t, int bc) { return sk_qsplit_thread_col(t, bc) % (unsigned)bc == 0; }

// Byte offset of word c (row group c, columns 4kt..4kt+3) of the 16-byte swizzled piece of row
// `row` (k-tile kt): the layout's (row / 128) * k_tiles * 512 + kt * 512 + (row % 32) * 16 + c * 4,
// split as the walk computes it: a unit part (slab, kt) plus a thread part fixed for the whole
// walk (thread t's row in the slab, below R, and its block c), since row = slab_row +
// thread_row with slab_row = band * 128 + (slab % slabs per band) * R:
//   sk_qsplit_unit_scales(slab, kt, k_tiles, bc) + sk_qsplit_thread_scale_word(t, bc).
// 64-bit: a short, very wide tensor's padded buffer can pass 2^32 bytes.
SK_QSPLIT_FN long long sk_qsplit_unit_scales(unsigned slab, unsigned kt, unsigned k_tiles, int bc) {
  const unsigned spb = (unsigned)sk_qsplit_slabs_per_band(bc);
  return ((long long)(slab / spb) * k_tiles + kt) * 512 + slab % spb * (unsigned)sk_qsplit_unit_rows(bc) * 16u;
}
SK_QSPLIT_FN unsigned sk_qsplit_thread_scale_word(unsigned t, int bc) {
  return sk_qsplit_thread_row(t, bc) * 16u + sk_qsplit_thread_block(t, bc) * 4u;
}

// Byte offset of scale (row, kcol) in the 128x4 swizzled layout (common/scale_layout.cuh), with
// shifts and masks (the in-CTA mode's per-chunk store).
SK_QSPLIT_FN long long sk_qsplit_swizzled_offset(unsigned row, unsigned kcol, unsigned k_tiles) {
  return (long long)((row >> 7) * k_tiles + (kcol >> 2)) * 512 +
         (((row << 4) & 0x1F0u) | ((row >> 3) & 0xCu) | (kcol & 3u));
}

// The 4x4 byte transpose of a k-tile row's scales in two shuffle rounds. Before: the lanes of
// block c hold p, byte j = scale (row group j, block c). Round a exchanges with block c ^ 2
// (lane ^ 2 bc) and keeps row groups 2(c/2), 2(c/2)+1 of blocks c, c ^ 2:
//   a = prmt(p, shfl_xor(p, 2 bc), sk_qsplit_transpose_a(c))
// round b exchanges with block c ^ 1 (lane ^ bc):
//   w = prmt(a, shfl_xor(a, bc), sk_qsplit_transpose_b(c))
// After: w byte i = scale (row group c, block i). prmt selectors (byte k of the result is byte
// sel >> 4k of {second, first}).
SK_QSPLIT_FN unsigned sk_qsplit_transpose_a(unsigned c) { return (c & 2u) ? 0x3276u : 0x5410u; }
SK_QSPLIT_FN unsigned sk_qsplit_transpose_b(unsigned c) { return (c & 1u) ? 0x3715u : 0x6240u; }

#define SK_QSPLIT_MAX_GRID_Y 65535 /* the CUDA limit of gridDim.y */

// Host grid for about `per` chunks per thread (1..64; a unit is 4 per thread, so below 4 counts
// as 4): per / 4 units per CTA, but at least min(units, 4 CTAs per SM) CTAs (latency of small
// tensors, bytes in flight of mid-sized ones). gx = k_tiles; this is gy = slabs / units per CTA
// (rounded up; at most SK_QSPLIT_MAX_GRID_Y, beyond which CTAs take more slabs). Any grid is
// correct.
SK_QSPLIT_FN long long sk_qsplit_grid_y(long long slabs, long long k_tiles, long long per, long long sms) {
  const long long units = slabs * k_tiles;
  long long per_cta = per / SK_QSPLIT_PER_STEP > 1 ? per / SK_QSPLIT_PER_STEP : 1;
  const long long floor_ctas = units < 4 * sms ? units : 4 * sms;
  if (units / per_cta < floor_ctas) per_cta = units / floor_ctas > 1 ? units / floor_ctas : 1;
  const long long gy = (slabs + per_cta - 1) / per_cta;
  return gy < SK_QSPLIT_MAX_GRID_Y ? gy : SK_QSPLIT_MAX_GRID_Y;
}
