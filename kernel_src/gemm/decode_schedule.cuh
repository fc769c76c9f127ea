// Work decomposition of the decode GEMM (gemm/gemv_decode.cuh), in one place that the kernel, the
// host (runtime/ops/gemm/blockscaled.c) and the CPU tests (tests/test_gemm_ops.c) include: plain
// C11 as well as CUDA C++17 (integer arithmetic only, no CUDA headers when compiled as C).
//
// A work unit is one 128-K step of one tile of 16*ROW_TILES weight rows: unit u is step u % steps
// of tile u / steps, units = tiles * steps. CTA c of `ctas` owns the contiguous units
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
// tiles on sm_90a: nvfp4, block_fp8, tensor_fp8 106-128 registers; mxfp4 128 with an 8-byte
// spill, down from 160 at 3 CTAs: 7-16% faster on the large layers, bench/RESULTS.md, twenty-fifth run),
// mxfp8 to 3 (4 CTAs measured 6% slower on 8192x28672; its fused BF16 variant shares the
// figure), 16 tokens to 3, ROW_TILES 4 to 2. Recipe numbers as sk::gemm::Recipe (2 mxfp8).
SK_DECODE_FN int sk_decode_threads_per_sm(int recipe, int token_tiles, int row_tiles) {
  return row_tiles == 4 ? 256 : token_tiles == 1 && recipe != 2 ? 512 : 384;
}
SK_DECODE_FN int sk_decode_ctas_per_sm(int recipe, int token_tiles, int warps, int row_tiles) {
  const int c = sk_decode_threads_per_sm(recipe, token_tiles, row_tiles) / (32 * warps);
  return c > 1 ? c : 1;
}

// FP4 load ring (nvfp4 0, mxfp4 1; gemv_decode on sm_90 only): each lane stages its steps through
// a cp.async ring of `depth` entries in dynamic shared memory, depth - 1 steps in flight per warp
// while it computes one (the register stages it replaces kept one). Per lane and entry: a 16-byte
// slot per weight row (2 per row tile) and per token tile (nvfp4: its 16 contiguous code bytes;
// mxfp4: its 4 words, one per 32-K block), and a 4-byte slot per scale word (nvfp4: the aligned
// u32 holding the lane's u16 of a row / token; mxfp4: a row's u32, two per token tile).
SK_DECODE_FN int sk_decode_ring_slots16(int token_tiles, int row_tiles) { return 2 * row_tiles + token_tiles; }
SK_DECODE_FN int sk_decode_ring_slots4(int recipe, int token_tiles, int row_tiles) {
  return 2 * row_tiles + (recipe == 1 ? 2 : 1) * token_tiles;
}
SK_DECODE_FN int sk_decode_ring_lane_bytes(int recipe, int token_tiles, int row_tiles) {
  return 16 * sk_decode_ring_slots16(token_tiles, row_tiles) + 4 * sk_decode_ring_slots4(recipe, token_tiles, row_tiles);
}

// Static shared memory of a gemv_decode with a ring: the warps' reduction buffer alone (its tile
// flag lives inside it), a multiple of 128 bytes as the ring is.
SK_DECODE_FN int sk_decode_static_smem_bytes(int warps, int token_tiles, int row_tiles) {
  return warps * 16 * row_tiles * 8 * token_tiles * 4;
}

// Ring depth: the deepest of 4 .. 3 at which sk_decode_ctas_per_sm CTAs still fit an SM (sm_90:
// 228 KB per SM, 227 KB per block, 1 KB reserved per block); 0 = no ring, two register stages
// (other archs: sm_120a/sm_121a have ~100 KB per SM, too little for 3 entries at 4 CTAs; 2 entries
// would keep no more in flight than the register stages). arch as sk_arch_number (90 = sm_90[a]).
#define SK_DECODE_RING_MAX_DEPTH 4
SK_DECODE_FN int sk_decode_ring_depth(int arch, int recipe, int token_tiles, int warps, int row_tiles) {
  if (arch != 90 || (recipe != 0 && recipe != 1)) return 0;
  const int ctas = sk_decode_ctas_per_sm(recipe, token_tiles, warps, row_tiles);
  const int fixed = sk_decode_static_smem_bytes(warps, token_tiles, row_tiles) + 1024;
  for (int depth = SK_DECODE_RING_MAX_DEPTH; depth >= 3; --depth) {
    const int ring = depth * 32 * warps * sk_decode_ring_lane_bytes(recipe, token_tiles, row_tiles);
    if (ring + fixed <= 228 * 1024 && ctas * (ring + fixed) <= 228 * 1024) return depth;
  }
  return 0;
}

// Dynamic shared memory a gemv_decode launch needs (the ring; 0 without one).
SK_DECODE_FN int sk_decode_dynamic_smem_bytes(int arch, int recipe, int token_tiles, int warps, int row_tiles) {
  return sk_decode_ring_depth(arch, recipe, token_tiles, warps, row_tiles) * 32 * warps *
         sk_decode_ring_lane_bytes(recipe, token_tiles, row_tiles);
}
