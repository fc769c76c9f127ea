// Work split shared by the row quantizers (quantization/nvfp4.cuh, quantization/mxfp8.cuh).
//
// The input [M, K] is cut into 8-element chunks (one 16-byte load), numbered row-major:
// chunk c is row c / (K/8), elements 8 * (c % (K/8)) ... + 7. M*K <= 2^34 keeps c < 2^31.
// A CTA of kQuantThreads threads walks "steps": in the step at (CTA-uniform) base b, thread t
// owns the chunks b + t + j * G for j < kQuantChunksPerThread, G = gridDim.x * kQuantThreads,
// and the next step starts at b + kQuantChunksPerThread * G. So:
//  * each load instruction of a warp reads 512 contiguous bytes (coalesced);
//  * a thread issues all kQuantChunksPerThread loads before any arithmetic (bytes in flight
//    per thread x4, which the one-chunk-per-thread grid lacked);
//  * chunk c and c ^ 1, c ^ 2, c ^ 3 are lanes of one warp (b and G are multiples of 256), so
//    an NVFP4 block is a lane pair and an MXFP8 block a lane quad, as before;
//  * any grid works; a grid of ceil(chunks / 256) blocks is the old one chunk per thread
//    (j >= 1 all out of range), ceil(chunks / (256 * 4)) four per thread (the host's choice for
//    large tensors, quant_grid in runtime/ops/quantization/quant_common.c).
#pragma once
#include "common/defs.cuh"
#include "common/scale_layout.cuh"

namespace sk {
namespace quant {

constexpr int kQuantThreads = 256;
constexpr int kQuantChunksPerThread = 4;

// n / d for n < 2^31 by one multiply-high and a shift: m = ceil(2^(31+l) / d), l = ceil(log2 d)
// (m < 2^32), q = umulhi(2n, m) >> l. Exact: m*d - 2^(31+l) < d, so the error of n*m/2^(31+l)
// is below n/2^(31+l) < 2^-l <= 1/d, too small to reach the next integer.
struct FastDiv {
  u32 magic, shift;
};
SK_DEVICE FastDiv make_fast_div(u32 d) {
  const u32 l = d == 1 ? 0u : 32u - u32(__clz(d - 1u));
  return {u32(((1ull << (31 + l)) + d - 1u) / d), l};
}
SK_DEVICE u32 fast_div(u32 n, FastDiv f) { return __umulhi(n << 1, f.magic) >> f.shift; }

struct ChunkGrid {
  u32 chunks_per_row, chunks;
  int ld_x;
  bool dense;  // ld_x == K: chunk c is at x + 8c, no division needed to load it
  SK_DEVICE ChunkGrid(int M, int K, int ld)
      : chunks_per_row(u32(K) / 8u), chunks(u32(M) * (u32(K) / 8u)), ld_x(ld), dense(ld == K) {}

  template <typename T>
  SK_DEVICE uint4 load(const T* __restrict__ x, u32 c) const {
    if (dense) return __ldg(reinterpret_cast<const uint4*>(x) + c);
    const u32 row = c / chunks_per_row, col = c - row * chunks_per_row;
    return __ldg(reinterpret_cast<const uint4*>(x + i64(row) * ld_x + col * 8));
  }
};

// One thread's chunks of one step: offsets from the step base (0xFFFFFFFF: past any tensor),
// and the loaded data.
template <typename T>
struct ChunkGroup {
  u32 offset[kQuantChunksPerThread];
  uint4 raw[kQuantChunksPerThread];

  SK_DEVICE ChunkGroup() {
    const u64 grid_threads = u64(gridDim.x) * kQuantThreads;
#pragma unroll
    for (int j = 0; j < kQuantChunksPerThread; j++) {
      const u64 off = threadIdx.x + j * grid_threads;
      offset[j] = off < (1ull << 31) ? u32(off) : 0xFFFFFFFFu;
    }
  }
  SK_DEVICE static u64 step(u64 base) {
    return base + u64(gridDim.x) * kQuantThreads * kQuantChunksPerThread;
  }
  // Chunk j of the step at `base` (< chunks), and whether it exists.
  SK_DEVICE bool valid(const ChunkGrid& g, u32 base, int j) const {
    return offset[j] < g.chunks - base;
  }
  SK_DEVICE void load(const T* __restrict__ x, const ChunkGrid& g, u32 base) {
#pragma unroll
    for (int j = 0; j < kQuantChunksPerThread; j++)
      raw[j] = valid(g, base, j) ? g.load(x, base + offset[j]) : make_uint4(0u, 0u, 0u, 0u);
  }
};

// Store the scale of block column kcol = col / BLOCK_CHUNKS of chunk c's row (c = row * cpr + col,
// any chunk of the block: all give the same addresses) into the selected layouts. Row-major index row * (cpr / BLOCK_CHUNKS)
// + kcol is just c / BLOCK_CHUNKS; the swizzled one needs the row (fast_div).
template <int LAYOUT, int BLOCK_CHUNKS>
SK_DEVICE void store_block_scale(u8* __restrict__ swizzled, u8* __restrict__ rows, u32 c, u32 cpr,
                                 FastDiv row_div, u32 k_tiles, u8 scale);

// Scale byte offsets of block column `kcol` of row `row`: the 128x4 swizzled layout
// (common/scale_layout.cuh), spelled out with shifts and masks for the kernels' hot loop.
SK_DEVICE i64 swizzled_offset_fast(u32 row, u32 kcol, u32 k_tiles) {
  const u32 inner = ((row << 4) & 0x1F0u) | ((row >> 3) & 0xCu) | (kcol & 3u);  // (m%32)*16 + (m%128/32)*4 + k%4
  return (i64((row >> 7)) * k_tiles + (kcol >> 2)) * 512 + inner;
}

template <int LAYOUT, int BLOCK_CHUNKS>
SK_DEVICE void store_block_scale(u8* __restrict__ swizzled, u8* __restrict__ rows, u32 c, u32 cpr,
                                 FastDiv row_div, u32 k_tiles, u8 scale) {
  if constexpr ((LAYOUT & kScalesRowMajor) != 0) rows[c / BLOCK_CHUNKS] = scale;
  if constexpr ((LAYOUT & kScalesSwizzled) != 0) {
    const u32 row = fast_div(c, row_div), kcol = (c - row * cpr) / BLOCK_CHUNKS;
    swizzled[swizzled_offset_fast(row, kcol, k_tiles)] = scale;
  }
}

}  // namespace quant
}  // namespace sk
