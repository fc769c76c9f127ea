// Warp-level tensor-core wrappers: mma.sync (BF16 m16n8k16, E4M3 m16n8k32 on sm_89+, SM120
// block-scaled kinds on sm_120a/sm_121a), ldmatrix, cp.async. Fragment layouts (lane = 4*g + t):
//   m16n8k16 bf16:  A a0=(row g, k 2t..2t+1) a1=(row g+8, k 2t..) a2=(row g, k 2t+8..) a3=(row g+8, k 2t+8..)
//                   B b0=(col g, k 2t..2t+1) b1=(col g, k 2t+8..)
//   m16n8k32 e4m3:  same with 4 bytes per register: k 4t..4t+3 and 4t+16..4t+19
//   m16n8k64 e2m1:  same with 8 nibbles per register: k 8t..8t+7 and 8t+32..8t+39
//   C/D (all):      c0,c1=(row g, cols 2t, 2t+1)  c2,c3=(row g+8, cols 2t, 2t+1)
#pragma once
#include "common/defs.cuh"

namespace sk {

// Zeroes a warp's accumulator fragments [M tiles][N tiles][c0..c3].
template <int MT, int NT>
SK_DEVICE void zero_fragments(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
}

// D = A * B + D, BF16 inputs, FP32 accumulators.
SK_DEVICE void mma_bf16_m16n8k16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D = A * B + D, FP16 inputs, FP32 accumulators.
SK_DEVICE void mma_f16_m16n8k16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D = A * B + D, E4M3 inputs (4 per register), FP32 accumulators. sm_89+.
SK_DEVICE void mma_e4m3_m16n8k32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ---- SM120 block-scaled MMA (sm_120a / sm_121a only) ----------------------------------------
// Scale registers: lane 4*(m%8) + 2*TID_A + m/8 supplies row m of A; lane 4*n + TID_B supplies
// column n of B; within the register, byte BID + j scales the j-th K block of this MMA
// (1X: 1 block of 32, BID 0..3; 2X: 2 blocks of 32, BID 0 or 2; 4X: 4 blocks of 16, BID 0).
// TID_A in [0,1], TID_B in [0,3] (ptxas-enforced). Emulated in tests/ref/mma_emu.c.
// NVRTC 13.0 defines __CUDA_ARCH_FEAT_SM120_ALL for sm_120a but not __CUDA_ARCH_FEAT_SM121_ALL for
// sm_121a (nvcc does): also accept __CUDA_ARCH_SPECIFIC__ 1200/1210, which both define.
#if defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || defined(SK_GEMM_FORCE_SM120) || \
    (defined(__CUDA_ARCH_SPECIFIC__) && (__CUDA_ARCH_SPECIFIC__ == 1200 || __CUDA_ARCH_SPECIFIC__ == 1210))
#define SK_HAS_SM120_BLOCK_SCALED_MMA 1

template <int BID_A, int TID_A, int BID_B, int TID_B>
SK_DEVICE void mma_mxf8_e4m3_m16n8k32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], u32 sfa, u32 sfb) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {%12,%13}, %11, {%14,%15};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "r"(sfb),
        "n"(BID_A), "n"(TID_A), "n"(BID_B), "n"(TID_B));
}

template <int BID_A, int TID_A, int BID_B, int TID_B>
SK_DEVICE void mma_mxf4_m16n8k64(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], u32 sfa, u32 sfb) {
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {%12,%13}, %11, {%14,%15};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "r"(sfb),
        "n"(BID_A), "n"(TID_A), "n"(BID_B), "n"(TID_B));
}

template <int TID_A, int TID_B>
SK_DEVICE void mma_nvf4_m16n8k64(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], u32 sfa, u32 sfb) {
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {%12,%13}, %11, {%14,%15};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "r"(sfb),
        "n"(0), "n"(TID_A), "n"(0), "n"(TID_B));
}
#endif

// ---- ldmatrix / cp.async ----------------------------------------------------------------------

// Four 8x8 b16 matrices; lane i supplies the row address of matrix i/8, row i%8.
SK_DEVICE void ldmatrix_x4(u32 (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
}
SK_DEVICE void ldmatrix_x2(u32 (&r)[2], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row_ptr)));
}

// The same from a shared-memory address (u32), for callers that step addresses themselves.
SK_DEVICE void ldmatrix_x4_at(u32 (&r)[4], u32 smem_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address));
}
SK_DEVICE void ldmatrix_x2_at(u32 (&r)[2], u32 smem_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_address));
}

// 16-byte global -> shared copy; src_bytes < 16 zero-fills the rest (0: pure zero fill).
SK_DEVICE void cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_bytes));
}
// The same to a shared-memory address (u32, common/smem.cuh).
SK_DEVICE void cp_async_16_at(u32 smem_address, const void* gmem_src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address), "l"(gmem_src), "r"(src_bytes));
}
SK_DEVICE void cp_async_4(void* smem_dst, const void* gmem_src, int src_bytes = 4) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_bytes));
}
SK_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N_PENDING>
SK_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N_PENDING));
}

}  // namespace sk
