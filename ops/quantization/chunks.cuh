// Per-thread walk of the row quantizers (quantization/nvfp4.cuh, quantization/mxfp8.cuh) over the
// units of quantization/split.cuh: load a unit's four chunks, store their values, and store the
// unit's scales as whole words (the 4x4 scale transpose). M*K <= 2^34 keeps chunk indices (and
// row-major offsets) below 2^31.
#pragma once
#include "common/defs.cuh"
#include "common/mma.cuh"
#include "common/scale_layout.cuh"
#include "common/smem.cuh"
#include "quantization/split.cuh"

namespace sk {
namespace quant {

constexpr int kQuantThreads = SK_QSPLIT_THREADS;
constexpr int kQuantChunksPerThread = SK_QSPLIT_PER_STEP;

// One thread's walk of the units (slab, kt) of CTA (blockIdx.x, blockIdx.y): kt = blockIdx.x,
// + gridDim.x, ... of slab blockIdx.y, then of slab + gridDim.y, ... VALUE_BYTES per chunk (4 NVFP4,
// 8 MXFP8); a scale block is BLOCK_CHUNKS chunks (2, 4). `raw` holds the current unit's chunks
// (zeros where a chunk does not exist); the control flow is CTA-uniform, so the kernels'
// shuffles see full warps.
template <typename T, int LAYOUT, int VALUE_BYTES, int BLOCK_CHUNKS>
struct UnitWalk {
  static constexpr int kTileChunks = sk_qsplit_tile_chunks(BLOCK_CHUNKS);
  static constexpr u32 kGroupRows = SK_QSPLIT_GROUP_ROWS;

  // Tensor (CTA-uniform).
  const T* x0;
  u8 *values0, *swizzled0, *rows0;
  i64 ld_x, x_group_stride, value_group_stride;
  u32 M, cpr, cols, k_tiles, slabs;
  bool rows_words;  // the row-major scale words are 4-byte aligned: one 4-byte store each
  // Thread (fixed).
  u32 thread_row, thread_col, block, warp_row, sel_a, sel_b;
  bool leader;
  // Current unit (CTA-uniform): slab and k-tile, stepped by the grid (no division).
  u32 slab, kt;
  const T* x;       // chunk 0's input (chunk j: + 32 j rows)
  u8* values;       // chunk 0's values (chunk j: + 32 j rows)
  u32 row;          // row of chunk 0 (chunk j: row + 32 j)
  u32 slab_row;     // the unit's first row (CTA-uniform)
  u32 warp_rows;    // rows from this warp's first row of chunk 0 to M (0 if past M)
  u32 chunk_rows;   // rows from row to M if this thread's chunk column is below cpr, else 0
  uint4 raw[kQuantChunksPerThread];

  SK_DEVICE UnitWalk(const T* __restrict__ input, int ld, int m, int k, u8* __restrict__ values,
                     u8* __restrict__ swizzled, u8* __restrict__ rows)
      : x0(input),
        values0(values),
        swizzled0(swizzled),
        rows0(rows),
        ld_x(ld),
        x_group_stride(i64(kGroupRows) * ld),
        value_group_stride(i64(kGroupRows) * (u32(k) / 8u) * VALUE_BYTES),
        M(u32(m)),
        cpr(u32(k) / 8u),
        cols(u32(k) / 8u / BLOCK_CHUNKS),
        k_tiles(u32(sk_qsplit_k_tiles(int(u32(k) / 8u), BLOCK_CHUNKS))),
        slabs(u32(sk_qsplit_slabs(m, BLOCK_CHUNKS))),
        rows_words(((reinterpret_cast<unsigned long long>(rows) | (u32(k) / 8u / BLOCK_CHUNKS)) & 3u) == 0),
        thread_row(sk_qsplit_thread_row(threadIdx.x, BLOCK_CHUNKS)),
        thread_col(sk_qsplit_thread_col(threadIdx.x, BLOCK_CHUNKS)),
        block(sk_qsplit_thread_block(threadIdx.x, BLOCK_CHUNKS)),
        warp_row(sk_qsplit_thread_row(threadIdx.x & ~31u, BLOCK_CHUNKS)),
        sel_a(sk_qsplit_transpose_a(sk_qsplit_thread_block(threadIdx.x, BLOCK_CHUNKS))),
        sel_b(sk_qsplit_transpose_b(sk_qsplit_thread_block(threadIdx.x, BLOCK_CHUNKS))),
        leader(sk_qsplit_block_leader(threadIdx.x, BLOCK_CHUNKS)),
        slab(blockIdx.y),
        kt(blockIdx.x) {
    locate();
  }

  SK_DEVICE bool has_unit() const { return sk_qsplit_has_unit(slab, kt, slabs, k_tiles); }  // CTA-uniform
  // Move to the CTA's next unit; false when there is none.
  SK_DEVICE bool next() {
    if (!sk_qsplit_next_unit(&slab, &kt, blockIdx.x, gridDim.x, gridDim.y, slabs, k_tiles)) return false;
    locate();
    return true;
  }
  // Every chunk of this thread's unit exists (rows ascend with j: the last one decides).
  SK_DEVICE bool all_exist() const { return exists(kQuantChunksPerThread - 1); }
  // Chunk j exists (its row is below M, its column below cpr).
  SK_DEVICE bool exists(int j) const { return j * kGroupRows < chunk_rows; }
  // Some lane of this warp has a row of chunk j below M (warp-uniform): else the warp skips it.
  SK_DEVICE bool warp_has(int j) const { return j * kGroupRows < warp_rows; }

  // Load the unit's chunks (zeros where they do not exist).
  SK_DEVICE void load() {
    const T* p = x;
#pragma unroll
    for (int j = 0; j < kQuantChunksPerThread; j++, p += x_group_stride)
      raw[j] = exists(j) ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0u, 0u, 0u, 0u);
  }

  // ---- Loads through shared memory (cp.async), one unit ahead ----------------------------------
  // A stage buffer holds one unit: kAsyncStageBytes, chunk j of thread t at 16 (j * 256 + t) (a
  // warp's 16-byte accesses are 512 contiguous bytes). Each thread reads back only the chunks it
  // copied itself, so no barrier is needed: cp.async.wait_group orders them for that thread.
  // The bytes in flight then cost shared memory instead of registers.
  static constexpr u32 kAsyncStageBytes = kQuantChunksPerThread * kQuantThreads * 16;
  // This thread's chunk 0 in the stage buffer at shared address `stage_base`.
  SK_DEVICE static u32 async_slot(u32 stage_base) { return stage_base + threadIdx.x * 16u; }
  // Copy this unit's chunks into the stage (zero fill where they do not exist) and commit them
  // as one group.
  SK_DEVICE void load_async(u32 slot) const { copy_async(slot, x, chunk_rows); }
  // The same for the CTA's next unit, if any (CTA-uniform): the walk itself stays on this unit.
  SK_DEVICE bool load_next_async(u32 slot) const {
    u32 next_slab = slab, next_kt = kt;
    if (!sk_qsplit_next_unit(&next_slab, &next_kt, blockIdx.x, gridDim.x, gridDim.y, slabs, k_tiles)) return false;
    const Origin o = origin(sk_qsplit_slab_row(next_slab, BLOCK_CHUNKS), next_kt);
    copy_async(slot, input_at(o), o.rows);
    return true;
  }
  // Read the unit copied into `slot` (its group must be complete: cp_async_wait).
  SK_DEVICE void read_async(u32 slot) {
#pragma unroll
    for (int j = 0; j < kQuantChunksPerThread; j++) raw[j] = lds_16B(slot + u32(j) * kQuantThreads * 16u);
  }
  // Store chunk j's values (if it exists; KNOWN_TO_EXIST: the caller checked all_exist()).
  template <bool KNOWN_TO_EXIST = false, typename V>
  SK_DEVICE void store_values(int j, const V& v) const {
    static_assert(sizeof(V) == VALUE_BYTES, "one chunk of values");
    if (KNOWN_TO_EXIST || exists(j)) *reinterpret_cast<V*>(values + j * value_group_stride) = v;
  }
  // Store the unit's scales: byte j of p is chunk j's block scale, which must be 0 where chunk j
  // does not exist (padding). All lanes call it (shuffles).
  SK_DEVICE void store_scales(u32 p) const {
    const u32 a = __byte_perm(p, __shfl_xor_sync(0xFFFFFFFFu, p, 2 * BLOCK_CHUNKS), sel_a);
    const u32 w = __byte_perm(a, __shfl_xor_sync(0xFFFFFFFFu, a, BLOCK_CHUNKS), sel_b);
    if (!leader) return;
    // w: row row + 32 block, scale columns 4kt..4kt+3.
    if constexpr ((LAYOUT & kScalesSwizzled) != 0)
      *reinterpret_cast<u32*>(swizzled0 + sk_qsplit_unit_scales(slab, kt, k_tiles, BLOCK_CHUNKS) +
                              sk_qsplit_thread_scale_word(threadIdx.x, BLOCK_CHUNKS)) = w;
    if constexpr ((LAYOUT & kScalesRowMajor) != 0) {
      const u32 r = row + block * kGroupRows;
      if (r < M) {
        u8* dst = rows0 + i64(r) * cols + kt * 4;
        if (rows_words) {  // then cols % 4 == 0: all four columns exist
          *reinterpret_cast<u32*>(dst) = w;
        } else {
#pragma unroll
          for (u32 i = 0; i < 4; i++)
            if (kt * 4 + i < cols) dst[i] = u8(w >> (8 * i));
        }
      }
    }
  }

 private:
  // This thread's chunk 0 of the unit whose first row is `first_row`, k-tile `unit_kt`: its row,
  // chunk column, and the rows from it to M where the column exists (else 0; chunk j exists iff
  // 32 j < rows).
  struct Origin {
    u32 row, col, rows;
  };
  SK_DEVICE Origin origin(u32 first_row, u32 unit_kt) const {
    const u32 r = first_row + thread_row, c = unit_kt * kTileChunks + thread_col;
    return {r, c, c < cpr && r < M ? M - r : 0u};
  }
  SK_DEVICE const T* input_at(const Origin& o) const { return x0 + i64(o.row) * ld_x + o.col * 8; }
  SK_DEVICE void copy_async(u32 slot, const T* p, u32 rows) const {
#pragma unroll
    for (int j = 0; j < kQuantChunksPerThread; j++, p += x_group_stride) {
      const bool present = u32(j) * kGroupRows < rows;
      cp_async_16_at(slot + u32(j) * kQuantThreads * 16u, present ? p : x0, present ? 16 : 0);
    }
    cp_async_commit();
  }
  SK_DEVICE void locate() {
    slab_row = sk_qsplit_slab_row(slab, BLOCK_CHUNKS);
    warp_rows = slab_row + warp_row < M ? M - (slab_row + warp_row) : 0u;
    const Origin o = origin(slab_row, kt);
    row = o.row;
    chunk_rows = o.rows;
    x = input_at(o);
    values = values0 + (i64(o.row) * cpr + o.col) * VALUE_BYTES;
  }
};

}  // namespace quant
}  // namespace sk
