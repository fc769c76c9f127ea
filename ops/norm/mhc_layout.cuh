// Index math of the norm.mhc tensor-core partial kernels (norm/mhc.cuh), in one place that both
// the CUDA kernel and the C emulation test include (tests/test_mhc_emulation.c): plain C11 as well as
// CUDA C++17 (int arithmetic only). The emulation drives an independently written model of
// ldmatrix / mma.sync m16n8k16 with exactly these functions, so the smem swizzle, ldmatrix row
// addresses, fn fragment columns and accumulator mappings are checked on the CPU.
//
// Conventions: lane = 4*g + t (g = lane/4, t = lane%4). A "group" is 16 tokens (the M of one
// MMA). The CTA covers one 256-wide hidden tile; its stage buffer holds, per token and stream,
// 32 16-byte chunks (8 bf16 each) of that tile. NS = streams per token in smem (1: run_pre,
// where the 4 streams are copies of x; 4: run_post_pre). Warp w = 4*s + q owns stream s and the
// hidden quarter q (64 elements = 4 k-steps of 16) of the projection.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_MHC_FN SK_HOST_DEVICE constexpr
#else
#define SK_MHC_FN static inline
#endif

#define SK_MHC_GROUP 16      /* tokens per MMA group */
#define SK_MHC_CHUNKS 32     /* 16-byte chunks per (token, stream) row of a tile */
#define SK_MHC_WARP_KSTEPS 4 /* k-steps of 16 per warp and stream: a quarter of the tile */

// uint4 index of chunk `chunk` of (token, stream) in the stream region of a stage buffer. The
// XOR swizzle (by token + 2*stream) spreads the 8 rows of every ldmatrix over all banks: the
// projection reads 8 consecutive tokens of one stream, the Gram 2 tokens x 4 streams.
SK_MHC_FN int sk_mhc_chunk_index(int ns, int token, int stream, int chunk) {
  return (token * ns + stream) * SK_MHC_CHUNKS + (chunk ^ ((token + 2 * stream) & 7));
}

// ---- projection: A = 16 tokens x 16 stream elements (ldmatrix.x4), B = fn (registers) ----------
// Lane's ldmatrix row: matrices 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
// (rows 8-15, k 8-15), i.e. a0..a3.
SK_MHC_FN int sk_mhc_a_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
SK_MHC_FN int sk_mhc_a_chunk(int quarter, int ks, int lane) {
  return quarter * 8 + ks * 2 + (lane >> 4);
}
// Byte offset (within a 128-byte aligned stage buffer) of the same lane's ldmatrix row at k-step
// ks, from its offset at k-step 0: the chunks of k-steps 0..3 (a_chunk, gram_b_chunk) differ in
// chunk bits 1-2 only, which the swizzle XORs and nothing else touches, so one XOR on byte-offset
// bits 5-6 steps them (one instruction per ldmatrix instead of the recomputed swizzle).
SK_MHC_FN int sk_mhc_kstep_offset(int offset_ks0, int ks) { return offset_ks0 ^ (ks << 5); }
// fn column (relative to the stream's tile start s*H + tile*256; run_pre: tile*256) of the first
// of the two fp32 values of B register `half` (b0: 0, b1: 1) of k-step ks; the mix is nt*8 + g.
SK_MHC_FN int sk_mhc_b_col(int quarter, int ks, int half, int lane) {
  return quarter * 64 + ks * 16 + half * 8 + 2 * (lane & 3);
}
SK_MHC_FN int sk_mhc_b_mix(int nt, int lane) { return nt * 8 + (lane >> 2); }
// The inverse over a whole tile (run_pre's projection kernel, 2d, whose fn_pre tile sits in shared
// memory as B fragments): the even column col (0..254 of the tile) of mix `mix` is the first of the
// pair in B register sk_mhc_b_half(col) of k-step sk_mhc_b_kstep(col) (0..15, i.e. quarter ks / 4,
// k-step ks % 4 above) and n-tile mix / 8, held by lane sk_mhc_b_lane(mix, col).
SK_MHC_FN int sk_mhc_b_kstep(int col) { return col / 16; }
SK_MHC_FN int sk_mhc_b_half(int col) { return (col / 8) % 2; }
SK_MHC_FN int sk_mhc_b_lane(int mix, int col) { return 4 * (mix % 8) + (col % 8) / 2; }
// Accumulator i (0..3) of n-tile nt: token row and mix.
SK_MHC_FN int sk_mhc_c_token(int i, int lane) { return (lane >> 2) + 8 * (i >> 1); }
SK_MHC_FN int sk_mhc_c_mix(int nt, int i, int lane) { return nt * 8 + 2 * (lane & 3) + (i & 1); }

// ---- Gram: per token quad (4 tokens), A rows r = (token r/4, stream r%4), B cols n of MMA j =
// (token 2j + n/4, stream n%4); only the diagonal token blocks are kept. ------------------------
SK_MHC_FN int sk_mhc_gram_stream(int ns, int r) { return (r & 3) & (ns - 1); }  // run_pre: always x
// ldmatrix.x2 row of B for lane (lanes 16-31 mirror 0-15: their addresses are not used).
SK_MHC_FN int sk_mhc_gram_b_row(int lane) { return lane & 7; }
SK_MHC_FN int sk_mhc_gram_b_chunk(int quarter, int ks, int lane) {
  return quarter * 8 + ks * 2 + ((lane >> 3) & 1);
}
// Does accumulator i of Gram MMA j hold a diagonal-block value? (j = 0: c0, c1; j = 1: c2, c3.)
SK_MHC_FN int sk_mhc_gram_useful(int j, int i, int lane) {
  return (i >> 1) == j && ((lane >> 2) >> 2) == ((lane & 3) >> 1);
}
SK_MHC_FN int sk_mhc_gram_token(int j, int lane) { return 2 * j + ((lane >> 2) >> 2); }  // within the quad
SK_MHC_FN int sk_mhc_gram_a(int lane) { return (lane >> 2) & 3; }
SK_MHC_FN int sk_mhc_gram_b(int i, int lane) { return 2 * ((lane & 3) & 1) + (i & 1); }
// 2d's sum x^2 as the diagonal of A A^T: MMA j takes tokens 8j..8j+7 as B (B = A's registers
// {a0, a2} / {a1, a3}), so accumulator i of lane holds token c_token(i) times token
// 8j + c_mix(0, i). The entry of row token g + 8j with itself is held by the lanes with
// sk_mhc_self_gram_holder(lane), in accumulator sk_mhc_self_gram_acc(j, lane).
SK_MHC_FN int sk_mhc_self_gram_holder(int lane) { return (lane & 3) == ((lane >> 2) >> 1); }
SK_MHC_FN int sk_mhc_self_gram_acc(int j, int lane) { return 2 * j + ((lane >> 2) & 1); }
// Partial-row Gram pair of streams (a, b), a <= b: (0,0) (1,1) (2,2) (3,3) (0,1) (0,2) (0,3) (1,2) (1,3) (2,3).
SK_MHC_FN int sk_mhc_gram_pair(int a, int b) { return a == b ? a : 4 + a * (7 - a) / 2 + (b - a - 1); }
