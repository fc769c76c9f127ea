// Work decomposition of the decode GEMM (gemm/gemv_decode.cuh), in one place that the kernel, the
// host (runtime/ops/gemm/blockscaled.c) and the CPU tests (tests/test_gemm_ops.c) include: plain
// C11 as well as CUDA C++17 (integer arithmetic only, no CUDA headers when compiled as C).
//
// A work unit is one 128-K step of one tile of weight rows (sk_decode_tile_rows): unit u is step
// u % steps of tile u / steps, units = tiles * steps. CTA c of `ctas` owns the contiguous units
// [begin(c), begin(c + 1)) with begin(c) = floor(c * units / ctas): every CTA gets the same work
// to within one step (stream-K), whatever the shape. A CTA walks its range tile by tile, so only
// its first and its last tile can be partial (the tiles between are whole). The CTAs sharing a
// split tile are cta_of_unit(its first unit) .. cta_of_unit(its last unit); each stores its FP32
// share of the tile in slot 2c (the tile is its first) or 2c + 1 (its last), and the CTA that
// arrives last at the tile's counter sums the slots in CTA order, which is K order: a fixed
// reduction order, independent of timing. No CTA waits for another, so the grid need not be
// co-resident for correctness (only for speed).
// Requires 1 <= ctas <= units < 2^31, so every CTA has work: a CTA with none would never arrive at
// the counter of a tile it sits inside of.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_DECODE_FN SK_HOST_DEVICE constexpr
#else
#define SK_DECODE_FN static inline
#endif

// Weight rows per tile: ROW_GROUPS groups of a warp's 16*ROW_TILES rows (gemv_decode).
SK_DECODE_FN int sk_decode_tile_rows(int row_tiles, int row_groups) { return 16 * row_tiles * row_groups; }

// Interleaved tiles, for the MX recipes (mxfp4 1, mxfp8 2: one UE8M0 word per row and step in the
// 128x4 swizzle) at 1 or 2 row tiles and a group count dividing 4. The swizzle keeps the words of
// rows m, m+32, m+64, m+96 (m % 128 < 32) side by side, so a lane whose 2*ROW_TILES weight rows lie
// 32 apart loads all their scales at once (8 or 16 bytes) instead of one load per row: faster for
// mxfp8 and mxfp4 at small M. nvfp4 (one u16 per row, so a shift per row after the load) is slower
// this way and stays contiguous.
// Tile-local row r = 16*ROW_TILES*group + 8*slot + g (slot = 2*row tile + half, g < 8, as the
// kernel's lanes hold them) then maps to row 64*ROW_TILES*span + 8*(ROW_GROUPS*i + group) + g +
// 32*slot, where the tile is the i-th of the 4/ROW_GROUPS tiles of span `span` (64*ROW_TILES
// rows). Otherwise tiles are contiguous: row tile*rows + r.
SK_DECODE_FN int sk_decode_interleaved(int recipe, int row_tiles, int row_groups) {
  return (recipe == 1 || recipe == 2) && row_tiles <= 2 && 4 % row_groups == 0;
}

// Tiles covering n weight rows (interleaved: whole spans; tiles past row n load row n-1 and store nothing).
SK_DECODE_FN int sk_decode_tiles(int n, int recipe, int row_tiles, int row_groups) {
  return sk_decode_interleaved(recipe, row_tiles, row_groups)
             ? (n + 64 * row_tiles - 1) / (64 * row_tiles) * (4 / row_groups)
             : (n + sk_decode_tile_rows(row_tiles, row_groups) - 1) / sk_decode_tile_rows(row_tiles, row_groups);
}

// The weight row of tile-local row r is sk_decode_tile_base(tile) + sk_decode_row_offset(r) (see
// sk_decode_interleaved).
SK_DECODE_FN int sk_decode_tile_base(int tile, int recipe, int row_tiles, int row_groups) {
  if (!sk_decode_interleaved(recipe, row_tiles, row_groups)) return tile * sk_decode_tile_rows(row_tiles, row_groups);
  const int per_span = 4 / row_groups, span = tile / per_span;
  return 64 * row_tiles * span + 8 * row_groups * (tile - span * per_span);
}
SK_DECODE_FN int sk_decode_row_offset(int r, int recipe, int row_tiles, int row_groups) {
  if (!sk_decode_interleaved(recipe, row_tiles, row_groups)) return r;
  const int group = r / (16 * row_tiles), within = r - group * 16 * row_tiles;
  return 8 * group + within % 8 + 32 * (within / 8);
}
SK_DECODE_FN int sk_decode_row(int tile, int r, int recipe, int row_tiles, int row_groups) {
  return sk_decode_tile_base(tile, recipe, row_tiles, row_groups) + sk_decode_row_offset(r, recipe, row_tiles, row_groups);
}

// First unit of CTA `cta` (cta = ctas gives units).
SK_DECODE_FN int sk_decode_cta_begin(int cta, int units, int ctas) { return (int)((long long)cta * units / ctas); }

// The CTA whose range holds unit `unit`: the largest c with begin(c) <= unit.
SK_DECODE_FN int sk_decode_cta_of_unit(int unit, int units, int ctas) {
  return (int)((((long long)unit + 1) * ctas - 1) / units);
}

// Partial slot of CTA `cta`'s share of tile `tile` (cta is one of the tile's CTAs).
SK_DECODE_FN int sk_decode_partial_slot(int cta, int tile, int steps, int units, int ctas) {
  return 2 * cta + (sk_decode_cta_begin(cta, units, ctas) < tile * steps ? 1 : 0);
}

// 0 when no tile can be split between CTAs (every begin(c) a multiple of steps): then the kernel
// touches neither partials nor counters. Conservative: 1 may still mean no split.
SK_DECODE_FN int sk_decode_may_split_tiles(int tiles, int steps, int ctas) {
  return !(steps == 1 || (ctas <= tiles && tiles % ctas == 0));
}

// CTAs per SM that the kernel's __launch_bounds__ guarantee (gemv_decode; its threads-per-SM
// figure): at 8 tokens every recipe but mxfp8 is bound to 4 CTAs of 128 threads (4 warps x 2 row
// tiles; mxfp4 takes a small spill for it and is still faster on the large layers than at 3
// CTAs), mxfp8 to 3 (slower at 4; its fused BF16 variant shares the figure), 16 tokens to 3,
// ROW_TILES 4 to 2. Recipe numbers as sk::gemm::Recipe (2 mxfp8).
SK_DECODE_FN int sk_decode_threads_per_sm(int recipe, int token_tiles, int row_tiles) {
  return row_tiles == 4 ? 256 : token_tiles == 1 && recipe != 2 ? 512 : 384;
}
SK_DECODE_FN int sk_decode_ctas_per_sm(int recipe, int token_tiles, int warps, int row_tiles) {
  const int c = sk_decode_threads_per_sm(recipe, token_tiles, row_tiles) / (32 * warps);
  return c > 1 ? c : 1;
}
