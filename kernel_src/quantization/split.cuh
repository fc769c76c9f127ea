// Work split of the row quantizers (quantization/nvfp4.cuh, quantization/mxfp8.cuh), in one place
// that the kernels, the host grid (quant_rows_grid, runtime/ops/quantization/quant_common.c) and
// the CPU mapping test (tests/test_quant_mapping.c) include: plain C11 as well as CUDA C++17
// (integer arithmetic only), so the test checks the kernels' own index arithmetic.
//
// The input [M, K] is cut into 8-element chunks (one 16-byte load), cpr = K/8 per row. Rows are
// grouped in bands of 128 (one row tile of the 128x4 swizzled scale layout). Within a band, a
// chunk's "offset" is its row-major position (band row offset / cpr, column offset % cpr).
// Offsets are cut into blocks of 256, one thread each; only rows that exist in band 0 count, so
// a tensor of M < 128 rows has no empty blocks (sk_qsplit_offset_blocks).
//
// With OB offset blocks and a grid of g CTAs, CTA b takes offset block b % OB and band lane
// l = b / OB of L = sk_qsplit_lanes(g, OB, bands) lanes (CTAs with l >= L have no chunks; when
// g < OB, L = 1 and CTA b takes the blocks b, b + g, ...). Thread t of the CTA walks offset
// 256 * block + t through bands l, l + L, l + 2L, ..., SK_QSPLIT_PER_STEP chunks per step, all
// loaded before any arithmetic. So, per thread:
//  * consecutive chunks are 128 L rows apart in the same column: the x, value, row-major scale
//    and swizzled scale addresses each advance by one CTA-uniform stride (no division per chunk;
//    the swizzled scale 128 L rows down is L row tiles on: L * k_tiles * 512 bytes), and a chunk
//    exists iff its row is below M (one compare);
// and per warp:
//  * the 32 lanes hold 32 consecutive offsets, i.e. consecutive chunks of the row-major tensor
//    (one load instruction reads 512 contiguous bytes when ld_x == K);
//  * offsets o and o ^ 1 (NVFP4) or o ^ 1, o ^ 2, o ^ 3 (MXFP8) are one scale block: cpr is even
//    (a multiple of 4), so 256-aligned blocks and band starts (128 cpr) keep blocks aligned, and a
//    block's lanes share a row, hence whether their chunks exist.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_QSPLIT_FN SK_HOST_DEVICE constexpr
#else
#define SK_QSPLIT_FN static inline
#endif

#define SK_QSPLIT_THREADS 256   /* threads per CTA: one offset block */
#define SK_QSPLIT_BAND_ROWS 128 /* rows per band: one swizzled scale row tile */
#define SK_QSPLIT_PER_STEP 4    /* chunks per thread per step (loads in flight) */
/* At most 2^22 band lanes: a step's rows then stay below 2^32 (row < 2^30 + 128 plus three
 * strides of at most 2^29), so the u32 row compare never wraps. */
#define SK_QSPLIT_MAX_LANES (1 << 22)

SK_QSPLIT_FN int sk_qsplit_bands(int m) { return (m + SK_QSPLIT_BAND_ROWS - 1) / SK_QSPLIT_BAND_ROWS; }

SK_QSPLIT_FN int sk_qsplit_offset_blocks(int m, int cpr) {
  return (int)(((long long)(m < SK_QSPLIT_BAND_ROWS ? m : SK_QSPLIT_BAND_ROWS) * cpr + SK_QSPLIT_THREADS - 1) /
               SK_QSPLIT_THREADS);
}

// Band lanes of a grid of `grid` CTAs: max(1, grid / blocks), at most one per band.
SK_QSPLIT_FN int sk_qsplit_lanes(int grid, int blocks, int bands) {
  int lanes = grid >= blocks ? grid / blocks : 1;
  if (lanes > bands) lanes = bands;
  return lanes < SK_QSPLIT_MAX_LANES ? lanes : SK_QSPLIT_MAX_LANES;
}

// CTA `cta`'s first offset block, its band lane (no chunks if >= lanes) and the stride between its
// offset blocks (blocks itself when grid >= blocks: then it has exactly one).
SK_QSPLIT_FN int sk_qsplit_first_block(int cta, int blocks) { return cta % blocks; }
SK_QSPLIT_FN int sk_qsplit_lane(int cta, int blocks) { return cta / blocks; }
SK_QSPLIT_FN int sk_qsplit_block_stride(int grid, int blocks) { return grid < blocks ? grid : blocks; }

// Thread t's offset in offset block `block` (< 2^31 + 256: fits u32).
SK_QSPLIT_FN unsigned sk_qsplit_offset(int block, int t) {
  return (unsigned)block * SK_QSPLIT_THREADS + (unsigned)t;
}

// Row of the first chunk of the walk of `offset` (row offset / cpr of band `lane`).
SK_QSPLIT_FN unsigned sk_qsplit_first_row(unsigned offset, unsigned cpr, int lane) {
  return (unsigned)lane * SK_QSPLIT_BAND_ROWS + offset / cpr;
}

// Byte offset of scale (row, kcol) in the 128x4 swizzled layout (common/scale_layout.cuh), with
// shifts and masks: ((row / 128) * k_tiles + kcol / 4) * 512 + (row % 32) * 16 + (row % 128 / 32) * 4
// + kcol % 4. 64-bit: a short, very wide tensor's padded buffer can pass 2^32 bytes.
SK_QSPLIT_FN long long sk_qsplit_swizzled_offset(unsigned row, unsigned kcol, unsigned k_tiles) {
  return (long long)((row >> 7) * k_tiles + (kcol >> 2)) * 512 +
         (((row << 4) & 0x1F0u) | ((row >> 3) & 0xCu) | (kcol & 3u));
}

// Per-chunk strides of a walk with `lanes` band lanes: x elements, chunks (values and row-major
// scales are chunk index * bytes per chunk and / chunks per block), swizzled scale bytes, rows.
SK_QSPLIT_FN long long sk_qsplit_x_stride(int lanes, int ld_x) {
  return (long long)lanes * SK_QSPLIT_BAND_ROWS * ld_x;
}
SK_QSPLIT_FN long long sk_qsplit_chunk_stride(int lanes, int cpr) {
  return (long long)lanes * SK_QSPLIT_BAND_ROWS * cpr;
}
SK_QSPLIT_FN long long sk_qsplit_swizzled_stride(int lanes, unsigned k_tiles) {
  return (long long)lanes * k_tiles * 512;
}
SK_QSPLIT_FN unsigned sk_qsplit_row_stride(int lanes) { return (unsigned)lanes * SK_QSPLIT_BAND_ROWS; }

// Host grid for about `per` chunks per thread (1..64): one band lane per `per` bands, but at least
// min(one chunk per thread, 4 CTAs per SM) CTAs' worth of lanes (latency of small tensors:
// M <= 128 is one chunk per thread), and at least `pad_words` threads (the swizzled padding,
// most of the work for M = 1). Any grid is correct; this one has no CTA without chunks unless
// the padding needs it.
SK_QSPLIT_FN long long sk_qsplit_grid(long long m, long long cpr, long long per, long long sms, long long pad_words) {
  const long long blocks = sk_qsplit_offset_blocks((int)m, (int)cpr), bands = sk_qsplit_bands((int)m);
  const long long chunk_ctas = (m * cpr + SK_QSPLIT_THREADS - 1) / SK_QSPLIT_THREADS;
  const long long floor_ctas = chunk_ctas < 4 * sms ? chunk_ctas : 4 * sms;
  long long lanes = (bands + per - 1) / per, floor_lanes = (floor_ctas + blocks - 1) / blocks;
  if (floor_lanes > bands) floor_lanes = bands;
  if (lanes < floor_lanes) lanes = floor_lanes;
  const long long grid = lanes * blocks, pad_ctas = (pad_words + SK_QSPLIT_THREADS - 1) / SK_QSPLIT_THREADS;
  return grid > pad_ctas ? grid : pad_ctas;
}
