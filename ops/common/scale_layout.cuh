// Block-scale layouts shared by the quantizers and the block-scaled GEMMs.
//
// Row-major: scale (m, k) at m * num_scale_cols + k.
//
// 128x4 swizzled ("MMA") layout of CUTLASS / cuBLASLt / FlashInfer: the [M, num_scale_cols]
// scale matrix is cut into 128-row x 4-column tiles of 512 bytes, tiles stored row-tile-major
// ([ceil(M/128), ceil(cols/4)]), and inside a tile row m and column k go to
//   (m % 32) * 16 + ((m % 128) / 32) * 4 + (k % 4),
// so that the four rows m, m+32, m+64, m+96 and four columns of one tile are 16 contiguous
// bytes. Rows past M and columns past num_scale_cols are padding, which the quantizers write
// as 0. The host C version is skref_swizzled_scale_offset() in tests/ref/skref.h.
#pragma once
#include "common/defs.cuh"

namespace sk {

// Which scale layouts a quantizer writes (bit flags).
enum ScaleLayout : int { kScalesSwizzled = 1, kScalesRowMajor = 2, kScalesBoth = 3 };

SK_HOST_DEVICE int swizzled_k_tiles(int num_scale_cols) { return (num_scale_cols + 3) / 4; }
SK_HOST_DEVICE int swizzled_padded_rows(int M) { return (M + 127) / 128 * 128; }

SK_HOST_DEVICE i64 swizzled_scale_offset(int m, int kcol, int num_k_tiles) {
  return i64(m / 128) * num_k_tiles * 512 + i64(kcol / 4) * 512 + (m % 32) * 16 +
         ((m % 128) / 32) * 4 + kcol % 4;
}

SK_HOST_DEVICE i64 swizzled_scale_bytes(int M, int num_scale_cols) {
  return i64(swizzled_padded_rows(M)) * swizzled_k_tiles(num_scale_cols) * 4;
}

// Walks i = first, first + step, ... below `end` while keeping (i / d, i % d) up to date with
// one division per thread instead of one per step (all values below 2^31).
struct StridedDivmod {
  u32 i, quot, rem;
  const u32 d, step, step_quot, step_rem;
  SK_DEVICE StridedDivmod(u32 first, u32 divisor, u32 stride)
      : i(first),
        quot(first / divisor),
        rem(first % divisor),
        d(divisor),
        step(stride),
        step_quot(stride / divisor),
        step_rem(stride % divisor) {
    // Both divisions here, together: ptxas then expands one reciprocal of d for the two (it
    // would sink the step's division to its first use, e.g. past a barrier, and expand it again).
    asm volatile("" ::"r"(step_quot), "r"(step_rem));
  }
  SK_DEVICE void advance() {
    i += step;
    quot += step_quot;
    rem += step_rem;
    if (rem >= d) rem -= d, quot += 1;
  }
};

// Number of 4-byte padding words (rows M..padded-1, one row of one k-tile each) and padding
// bytes (columns past num_scale_cols of rows 0..M-1) of a swizzled scale buffer.
SK_HOST_DEVICE i64 swizzled_padding_words(int M, int num_scale_cols) {
  return i64(swizzled_padded_rows(M) - M) * swizzled_k_tiles(num_scale_cols);
}

// Zero the padding of a swizzled scale buffer, spread over `num_threads` threads (thread `tid`
// of them). `scales` must be 4-byte aligned. For writers that store scales byte by byte (the
// in-CTA NVFP4 mode); the row quantizers' unit split writes the padding with the data.
SK_DEVICE void zero_swizzled_padding(u8* __restrict__ scales, int M, int num_scale_cols, i64 tid,
                                     i64 num_threads) {
  const int k_tiles = swizzled_k_tiles(num_scale_cols);
  const i64 pad_words = swizzled_padding_words(M, num_scale_cols);
  if (tid < pad_words) {  // word (row M + quot, k-tile rem)
    for (StridedDivmod w{u32(tid), u32(k_tiles), u32(num_threads)}; w.i < pad_words; w.advance()) {
      *reinterpret_cast<u32*>(scales +
                              swizzled_scale_offset(M + int(w.quot), int(w.rem) * 4, k_tiles)) = 0u;
      if (pad_words - w.i <= num_threads) break;  // the next step would pass the end (no wrap)
    }
  }
  const int extra_cols = k_tiles * 4 - num_scale_cols;
  const i64 pad_bytes = i64(M) * extra_cols;
  if (tid < pad_bytes) {  // byte (row quot, column num_scale_cols + rem)
    for (StridedDivmod b{u32(tid), u32(extra_cols), u32(num_threads)}; b.i < pad_bytes;
         b.advance()) {
      scales[swizzled_scale_offset(int(b.quot), num_scale_cols + int(b.rem), k_tiles)] = 0;
      if (pad_bytes - b.i <= num_threads) break;
    }
  }
}

// Store one scale byte into the layouts selected by LAYOUT (null pointers for the others).
template <int LAYOUT>
SK_DEVICE void store_scale(u8* __restrict__ swizzled, u8* __restrict__ rows, int m, int kcol,
                           int num_scale_cols, u8 scale) {
  if constexpr ((LAYOUT & kScalesSwizzled) != 0)
    swizzled[swizzled_scale_offset(m, kcol, swizzled_k_tiles(num_scale_cols))] = scale;
  if constexpr ((LAYOUT & kScalesRowMajor) != 0) rows[i64(m) * num_scale_cols + kcol] = scale;
}

}  // namespace sk
