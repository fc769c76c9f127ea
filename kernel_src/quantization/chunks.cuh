// Per-thread chunk walk of the row quantizers (quantization/nvfp4.cuh, quantization/mxfp8.cuh):
// the work split of quantization/split.cuh, with running pointers. M*K <= 2^34 keeps chunk
// indices (and row-major offsets / cpr) below 2^31.
#pragma once
#include "common/defs.cuh"
#include "common/scale_layout.cuh"
#include "quantization/split.cuh"

namespace sk {
namespace quant {

constexpr int kQuantThreads = SK_QSPLIT_THREADS;
constexpr int kQuantChunksPerThread = SK_QSPLIT_PER_STEP;

// The CTA's share of the split (CTA-uniform).
struct CtaSplit {
  int blocks, bands, lanes, lane, block, block_stride;
  SK_DEVICE CtaSplit(int M, int cpr)
      : blocks(sk_qsplit_offset_blocks(M, cpr)),
        bands(sk_qsplit_bands(M)),
        lanes(sk_qsplit_lanes(int(gridDim.x), blocks, bands)),
        lane(sk_qsplit_lane(int(blockIdx.x), blocks)),
        block(sk_qsplit_first_block(int(blockIdx.x), blocks)),
        block_stride(sk_qsplit_block_stride(int(gridDim.x), blocks)) {}
  SK_DEVICE bool has_chunks() const { return lane < lanes; }
};

// One thread's walk of offset 256 * block + threadIdx.x through bands lane, lane + lanes, ...
// `x` points at the next chunk to load; `values`, `scales_rows`, `scales_swizzled` and `row`
// belong to the next chunk to store. VALUE_BYTES per chunk (4 NVFP4, 8 MXFP8); a scale
// block is BLOCK_CHUNKS chunks (2, 4).
template <typename T, int LAYOUT, int VALUE_BYTES, int BLOCK_CHUNKS>
struct ChunkWalk {
  const T* x;
  u8* values;
  u8* scales_rows;
  u8* scales_swizzled;
  u32 row;
  // Per-chunk strides (CTA-uniform).
  i64 x_stride, chunk_stride, swizzled_stride;
  u32 row_stride;
  uint4 raw[kQuantChunksPerThread];

  // Start at offset block `block` (band `lane`). One division per thread and block.
  SK_DEVICE void start(const T* __restrict__ x0, int ld_x, int cpr, int k_tiles, u8* __restrict__ values0,
                       u8* __restrict__ rows0, u8* __restrict__ swizzled0, const CtaSplit& s, int block) {
    const u32 offset = sk_qsplit_offset(block, int(threadIdx.x));
    row = sk_qsplit_first_row(offset, u32(cpr), s.lane);
    const u32 col = offset % u32(cpr);
    const i64 chunk = i64(row) * cpr + col;
    x = x0 + i64(row) * ld_x + col * 8;
    values = values0 + chunk * VALUE_BYTES;
    scales_rows = rows0 + chunk / BLOCK_CHUNKS;
    scales_swizzled = swizzled0 + sk_qsplit_swizzled_offset(row, col / BLOCK_CHUNKS, u32(k_tiles));
    x_stride = sk_qsplit_x_stride(s.lanes, ld_x);
    chunk_stride = sk_qsplit_chunk_stride(s.lanes, cpr);
    swizzled_stride = sk_qsplit_swizzled_stride(s.lanes, u32(k_tiles));
    row_stride = sk_qsplit_row_stride(s.lanes);
  }
  // Load the step's chunks (zeros past M) and move x to the next step.
  SK_DEVICE void load(u32 M) {
#pragma unroll
    for (int j = 0; j < kQuantChunksPerThread; j++) {
      raw[j] = row + j * row_stride < M ? __ldg(reinterpret_cast<const uint4*>(x)) : make_uint4(0u, 0u, 0u, 0u);
      x += x_stride;
    }
  }
  // Store the next chunk's values and its block's scale (if it exists), then move to the chunk after.
  template <typename V>
  SK_DEVICE void store(u32 M, const V& v, u8 scale, bool scale_lane) {
    static_assert(sizeof(V) == VALUE_BYTES, "one chunk of values");
    if (row < M) {
      *reinterpret_cast<V*>(values) = v;
      if (scale_lane) {
        if constexpr ((LAYOUT & kScalesRowMajor) != 0) *scales_rows = scale;
        if constexpr ((LAYOUT & kScalesSwizzled) != 0) *scales_swizzled = scale;
      }
    }
    values += chunk_stride * VALUE_BYTES;
    scales_rows += chunk_stride / BLOCK_CHUNKS;
    scales_swizzled += swizzled_stride;
    row += row_stride;
  }
};

}  // namespace quant
}  // namespace sk
