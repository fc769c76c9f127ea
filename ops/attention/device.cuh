// Device helpers shared by the attention kernels: scratch region pointers, transposing ldmatrix,
// the 16-bit MMA flavours, packing, fast exp2/log2 and the E4M3 -> f16 fragment conversions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/layout.cuh"
#include "common/defs.cuh"
#include "common/mma.cuh"
#include "common/numeric.cuh"

namespace sk {
namespace attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
#define SK_ATTN_NEG_INF __int_as_float(0xff800000)

template <typename P>
SK_DEVICE P* region(const sk_attn_params& p, int r, int dvo) {
  return reinterpret_cast<P*>(static_cast<char*>(p.scratch) + sk_attn_params_region(&p, r, dvo));
}

SK_DEVICE u32 lds_u32(u32 address) {
  u32 v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address));
  return v;
}

// Transposed 8x8 b16 matrices: lane (g, t) receives (row 2t, col g) and (row 2t + 1, col g) of
// each matrix, row = the addressing lane's row.
SK_DEVICE void ldmatrix_x4_trans_at(u32 (&r)[4], u32 smem_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address));
}

// MMA flavour of the 16-bit operand type.
template <typename M>
SK_DEVICE void mma16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  if constexpr (HalfType<M>::kIsBf16) mma_bf16_m16n8k16(d, a, b);
  else mma_f16_m16n8k16(d, a, b);
}

// Two n8 tiles from one ldmatrix.x4 (registers 0, 1: b0, b1 of tile j; 2, 3: of tile j + 1) times
// every m16 A fragment of the warp, into acc[mq][j] and acc[mq][j + 1].
template <typename M, int MQ, int N>
SK_DEVICE void mma_tile_pair(float (&acc)[MQ][N][4], int j, const u32 (&a)[MQ][4], const u32 (&bb)[4]) {
  const u32 b0[2] = {bb[0], bb[1]}, b1[2] = {bb[2], bb[3]};
#pragma unroll
  for (int mq = 0; mq < MQ; ++mq) {
    mma16<M>(acc[mq][j], a[mq], b0);
    mma16<M>(acc[mq][j + 1], a[mq], b1);
  }
}

// Two floats -> one 32-bit pair (lo in the low half), round to nearest.
template <typename M>
SK_DEVICE u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (HalfType<M>::kIsBf16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

SK_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
SK_DEVICE float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// E4M3 bytes 0 and 2 (even) / 1 and 3 (odd) of w -> f16x2, the lower byte in the lower half.
SK_DEVICE u32 e4m3_even_f16x2(u32 w) { return e4m3x2_to_f16x2<0>(__byte_perm(w, 0, 0x3120)); }
SK_DEVICE u32 e4m3_odd_f16x2(u32 w) { return e4m3x2_to_f16x2<1>(__byte_perm(w, 0, 0x3120)); }

// Stores of 2 or 4 consecutive output values.
template <typename T>
SK_DEVICE void store2(T* dst, float a, float b) {
  *reinterpret_cast<u32*>(dst) = pack2<T>(a, b);
}
template <typename T>
SK_DEVICE void store4(T* dst, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack2<T>(a, b), pack2<T>(c, d));
}

}  // namespace attn
}  // namespace sk
