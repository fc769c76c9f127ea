// SM120 block-scaled GEMM (prefill): mma.sync ... .block_scale on consumer Blackwell.
// sm_120a / sm_121a ONLY (RTX 50xx, RTX PRO Blackwell, DGX Spark). Any other target fails to
// compile (static_assert), it never computes garbage.
//
// LAUNCH CONTRACT
//   template <int RECIPE, int OUT, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
//     RECIPE   sk::gemm::Recipe: 0 nvfp4 (kind::mxf4nvf4 scale_vec::4X ue4m3),
//              1 mxfp4 (kind::mxf4 scale_vec::2X ue8m0), 2 mxfp8 (kind::mxf8f6f4 scale_vec::1X ue8m0).
//              block_fp8 / tensor_fp8 use the portable kernels (static_assert).
//     OUT      sk::gemm::OutType (0 bf16, 1 fp16, 2 fp32)
//     BM, BN   block tile; BM % (32*WARPS_M) == 0, BN % (32*WARPS_N) == 0
//     BK       must be 128 (one stage = 128 K elements = one or two u32 of scales per row)
//     WARPS_M, WARPS_N  warp grid; warp tile WM = BM/WARPS_M rows x WN = BN/WARPS_N cols
//     STAGES   cp.async pipeline depth, >= 2
//   __global__ void sk::gemm::sm120_blockscaled<...>(
//       const u8* a_codes,     // A [M, K] K-major: E2M1 packed (K/2 bytes/row) or E4M3 (K bytes/row)
//       const void* a_scales,  // 128x4 swizzled u8 block scales of A (ops/gemm/gemm.md 2.1)
//       const u8* b_codes,     // B [N, K] K-major, same format
//       const void* b_scales,  // 128x4 swizzled u8 block scales of B
//       const float* alpha,    // device scalar, nullptr = 1
//       void* c,               // C [M, ldc] of OUT; C = alpha * A * B^T
//       int M, int N, int K, int ldc)
//   grid  = (ceil(N / BN), ceil(M / BM), 1)      block = (32 * WARPS_M * WARPS_N, 1, 1)
//   dynamic shared memory = sm120_blockscaled_smem_bytes<RECIPE, BM, BN, STAGES>()
//       = STAGES * (BM + BN) * (RB + 4 * SLABS)    RB = 64 (fp4) / 128 (fp8), SLABS = 2 (nvfp4) / 1
//     (host C code: sk_sm120_smem_bytes(recipe, BM, BN, STAGES) in gemm/sm120_layout.cuh).
//     Needs cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) above 48 KB; limit 101376 (99 KB).
//     128x128: 4 stages 73728 (nvfp4), 69632 (mxfp4); 3 stages 101376 (mxfp8, exactly the limit).
//   requirements: M >= 1, N >= 1, K % 128 == 0 (else __trap()), ldc >= N; code arrays 16-byte
//     aligned, scale arrays 4-byte aligned, scale arrays padded to ceil(rows/128)*128 rows as the
//     layout defines. Only C[m, n] with m < M, n < N is written (edge tiles masked: rows >= M / N
//     are zero-filled in shared memory). bf16x2 / float2 stores when ldc is even and c is
//     8-byte aligned, scalar stores otherwise.
//   Determinism: every output element is one warp's fixed-order sum over K (no split-K, no
//     atomics): bitwise reproducible for a given configuration.
//
// HOW IT WORKS
//   Block tile BM x BN, K in stages of 128 through a STAGES-deep cp.async ring (16-byte chunks of
//   codes, XOR-swizzled per row; one u32 of scales per row and slab). Each warp computes WM x WN
//   as (WM/16) m16 tiles x (WN/8) n8 tiles; per MMA, A fragments come from ldmatrix.x4 (one per
//   m tile) and B fragments from ldmatrix.x4 (two n tiles each) -- ldmatrix moves 4-byte words, so
//   the b16 shape serves E2M1 and E4M3 alike. Scales never go through the codes: per slab each
//   lane reads ONE u32 per 32 warp rows (A) and ONE per 32 warp cols (B) from shared memory, the
//   instruction's thread-id selector picks the m tile (tid_a 0..1) / n tile (tid_b 0..3) and the
//   byte-id walks the slab's K blocks (nvfp4: 0; mxfp4: 0, 2; mxfp8: 0..3). All index math lives
//   in gemm/sm120_layout.cuh, which tests/test_mma_emulation.c runs on the CPU against the
//   lane-level mma.sync emulation (tests/ref/mma_emu.c) and the double reference.
#pragma once

// Target detection. nvcc defines __CUDA_ARCH_FEAT_SM120_ALL / __CUDA_ARCH_FEAT_SM121_ALL for
// sm_120a / sm_121a, but NVRTC 13.0 defines no __CUDA_ARCH_FEAT_SM121_ALL for sm_121a (probed:
// only __CUDA_ARCH_SPECIFIC__ == 1210), so the arch-specific macro is checked as well. The
// family targets (sm_120f: __CUDA_ARCH_FAMILY_SPECIFIC__ only) and plain sm_120 are excluded.
#if defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || \
    (defined(__CUDA_ARCH_SPECIFIC__) && (__CUDA_ARCH_SPECIFIC__ == 1200 || __CUDA_ARCH_SPECIFIC__ == 1210))
#define SK_SM120_TARGET 1
#if !defined(SK_GEMM_FORCE_SM120)
#define SK_GEMM_FORCE_SM120 1  // makes common/mma.cuh emit the block-scaled wrappers on NVRTC sm_121a
#endif
#endif

#include "common/defs.cuh"
#include "common/mma.cuh"
#include "gemm/gemm_common.cuh"
#include "gemm/sm120_layout.cuh"

namespace sk {
namespace gemm {

template <int RECIPE, int BM, int BN, int STAGES>
SK_HOST_DEVICE constexpr int sm120_blockscaled_smem_bytes() {
  return sk_sm120_smem_bytes(RECIPE, BM, BN, STAGES);
}

template <int RECIPE>
struct Sm120ArchGuard {
  static constexpr bool kNever = false;
};

#if defined(SK_HAS_SM120_BLOCK_SCALED_MMA)

// One block-scaled MMA with compile-time selectors (bid_a = bid_b = BID).
template <int RECIPE, int BID, int TA, int TB>
SK_DEVICE void sm120_mma_fixed(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], u32 sfa, u32 sfb) {
  if constexpr (RECIPE == kNvfp4) mma_nvf4_m16n8k64<TA, TB>(d, a, b, sfa, sfb);
  else if constexpr (RECIPE == kMxfp4) mma_mxf4_m16n8k64<BID, TA, BID, TB>(d, a, b, sfa, sfb);
  else mma_mxf8_e4m3_m16n8k32<BID, TA, BID, TB>(d, a, b, sfa, sfb);
}
// Selectors as ints: the call sites are fully unrolled, so the branches fold to one MMA.
template <int RECIPE, int BID, int TA>
SK_DEVICE void sm120_mma_tb(int tb, float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], u32 sfa, u32 sfb) {
  if (tb == 0) sm120_mma_fixed<RECIPE, BID, TA, 0>(d, a, b, sfa, sfb);
  else if (tb == 1) sm120_mma_fixed<RECIPE, BID, TA, 1>(d, a, b, sfa, sfb);
  else if (tb == 2) sm120_mma_fixed<RECIPE, BID, TA, 2>(d, a, b, sfa, sfb);
  else sm120_mma_fixed<RECIPE, BID, TA, 3>(d, a, b, sfa, sfb);
}
template <int RECIPE, int BID>
SK_DEVICE void sm120_mma_ta(int ta, int tb, float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], u32 sfa, u32 sfb) {
  if (ta == 0) sm120_mma_tb<RECIPE, BID, 0>(tb, d, a, b, sfa, sfb);
  else sm120_mma_tb<RECIPE, BID, 1>(tb, d, a, b, sfa, sfb);
}
template <int RECIPE>
SK_DEVICE void sm120_mma(int bid, int ta, int tb, float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], u32 sfa,
                         u32 sfb) {
  if constexpr (RECIPE == kNvfp4) {
    sm120_mma_ta<RECIPE, 0>(ta, tb, d, a, b, sfa, sfb);
  } else if constexpr (RECIPE == kMxfp4) {
    if (bid == 0) sm120_mma_ta<RECIPE, 0>(ta, tb, d, a, b, sfa, sfb);
    else sm120_mma_ta<RECIPE, 2>(ta, tb, d, a, b, sfa, sfb);
  } else {
    if (bid == 0) sm120_mma_ta<RECIPE, 0>(ta, tb, d, a, b, sfa, sfb);
    else if (bid == 1) sm120_mma_ta<RECIPE, 1>(ta, tb, d, a, b, sfa, sfb);
    else if (bid == 2) sm120_mma_ta<RECIPE, 2>(ta, tb, d, a, b, sfa, sfb);
    else sm120_mma_ta<RECIPE, 3>(ta, tb, d, a, b, sfa, sfb);
  }
}

// Issue the cp.async copies of k stage `ks` (K elements [128*ks, 128*ks + 128)) into `stage`.
template <int RECIPE, int BM, int BN, int THREADS>
SK_DEVICE void sm120_load_stage(u8* stage, int ks, const u8* __restrict__ a_codes, const u8* __restrict__ a_scales,
                                const u8* __restrict__ b_codes, const u8* __restrict__ b_scales, int m0, int n0,
                                int M, int N, int K) {
  constexpr int RB = sk_sm120_stage_row_bytes(RECIPE), CPR = RB / 16, SLABS = sk_sm120_slabs_per_stage(RECIPE);
  u8* s_a = stage;
  u8* s_b = s_a + BM * RB;
  u32* s_sa = reinterpret_cast<u32*>(s_b + BN * RB);
  u32* s_sb = s_sa + SLABS * BM;
  const long long grow = sk_sm120_row_bytes(RECIPE, K);
  const long long kbyte = (long long)ks * RB;
  const int tid = threadIdx.x;
#pragma unroll
  for (int it = 0; it < (BM * CPR + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((BM * CPR) % THREADS != 0 && c >= BM * CPR) break;
    const int r = sk_sm120_copy_row(c, RB), byte = sk_sm120_copy_byte(c, RB);
    const bool ok = m0 + r < M;
    const u8* src = a_codes + (ok ? (long long)(m0 + r) * grow + kbyte + byte : 0);
    cp_async_16(s_a + sk_sm120_code_smem_offset(r, byte, RB), src, ok ? 16 : 0);
  }
#pragma unroll
  for (int it = 0; it < (BN * CPR + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((BN * CPR) % THREADS != 0 && c >= BN * CPR) break;
    const int r = sk_sm120_copy_row(c, RB), byte = sk_sm120_copy_byte(c, RB);
    const bool ok = n0 + r < N;
    const u8* src = b_codes + (ok ? (long long)(n0 + r) * grow + kbyte + byte : 0);
    cp_async_16(s_b + sk_sm120_code_smem_offset(r, byte, RB), src, ok ? 16 : 0);
  }
#pragma unroll
  for (int it = 0; it < (SLABS * BM + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((SLABS * BM) % THREADS != 0 && c >= SLABS * BM) break;
    const int slab = c / BM, r = c % BM;
    const bool ok = m0 + r < M;
    const u8* src = a_scales + (ok ? sk_sm120_scale_gmem_offset(RECIPE, m0 + r, ks, slab, K) : 0);
    cp_async_4(s_sa + sk_sm120_scale_smem_word(slab, r, BM), src, ok ? 4 : 0);
  }
#pragma unroll
  for (int it = 0; it < (SLABS * BN + THREADS - 1) / THREADS; ++it) {
    const int c = tid + it * THREADS;
    if ((SLABS * BN) % THREADS != 0 && c >= SLABS * BN) break;
    const int slab = c / BN, r = c % BN;
    const bool ok = n0 + r < N;
    const u8* src = b_scales + (ok ? sk_sm120_scale_gmem_offset(RECIPE, n0 + r, ks, slab, K) : 0);
    cp_async_4(s_sb + sk_sm120_scale_smem_word(slab, r, BN), src, ok ? 4 : 0);
  }
}

// All MMAs of one resident stage for this warp.
template <int RECIPE, int BM, int BN, int MT, int NT>
SK_DEVICE void sm120_compute_stage(const u8* stage, int wm0, int wn0, int lane, float (&acc)[MT][NT][4]) {
  constexpr int RB = sk_sm120_stage_row_bytes(RECIPE), SLABS = sk_sm120_slabs_per_stage(RECIPE);
  constexpr int MMAS = sk_sm120_mmas_per_slab(RECIPE);
  const u8* s_a = stage;
  const u8* s_b = s_a + BM * RB;
  const u32* s_sa = reinterpret_cast<const u32*>(s_b + BN * RB);
  const u32* s_sb = s_sa + SLABS * BM;
#pragma unroll
  for (int slab = 0; slab < SLABS; ++slab) {
    u32 sfa[MT / 2], sfb[NT / 4];
#pragma unroll
    for (int i = 0; i < MT / 2; ++i) sfa[i] = s_sa[sk_sm120_scale_smem_word(slab, wm0 + 32 * i + sk_sm120_sfa_row(lane), BM)];
#pragma unroll
    for (int i = 0; i < NT / 4; ++i) sfb[i] = s_sb[sk_sm120_scale_smem_word(slab, wn0 + 32 * i + sk_sm120_sfb_row(lane), BN)];
#pragma unroll
    for (int j = 0; j < MMAS; ++j) {
      const int kb = sk_sm120_mma_byte(RECIPE, slab, j);
      u32 af[MT][4], bf[NT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldmatrix_x4(af[mt], s_a + sk_sm120_code_smem_offset(wm0 + 16 * mt + sk_sm120_ldsm_a_row(lane),
                                                            kb + sk_sm120_ldsm_a_byte(lane), RB));
#pragma unroll
      for (int p = 0; p < NT / 2; ++p) {
        u32 r[4];
        ldmatrix_x4(r, s_b + sk_sm120_code_smem_offset(wn0 + 16 * p + sk_sm120_ldsm_b_row(lane),
                                                       kb + sk_sm120_ldsm_b_byte(lane), RB));
        bf[2 * p][0] = r[0];
        bf[2 * p][1] = r[1];
        bf[2 * p + 1][0] = r[2];
        bf[2 * p + 1][1] = r[3];
      }
      const int bid = sk_sm120_bid(RECIPE, j);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          sm120_mma<RECIPE>(bid, sk_sm120_tid_a(mt), sk_sm120_tid_b(nt), acc[mt][nt], af[mt], bf[nt],
                            sfa[sk_sm120_sfa_reg(mt)], sfb[sk_sm120_sfb_reg(nt)]);
    }
  }
}

template <int OUT>
SK_DEVICE void sm120_store_pair(void* c, long long index, float v0, float v1) {
  if (OUT == kOutBf16) *reinterpret_cast<__nv_bfloat162*>(reinterpret_cast<__nv_bfloat16*>(c) + index) = __floats2bfloat162_rn(v0, v1);
  else if (OUT == kOutFp16) *reinterpret_cast<__half2*>(reinterpret_cast<__half*>(c) + index) = __floats2half2_rn(v0, v1);
  else *reinterpret_cast<float2*>(reinterpret_cast<float*>(c) + index) = make_float2(v0, v1);
}

template <int RECIPE, int OUT, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
SK_DEVICE void sm120_blockscaled_body(const u8* __restrict__ a_codes, const u8* __restrict__ a_scales,
                                      const u8* __restrict__ b_codes, const u8* __restrict__ b_scales,
                                      const float* __restrict__ alpha, void* __restrict__ c, int M, int N, int K,
                                      int ldc) {
  constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
  constexpr int STAGE_BYTES = sk_sm120_stage_bytes(RECIPE, BM, BN);
  extern __shared__ __align__(128) u8 sm120_smem[];

  if (K % SK_SM120_BK != 0) __trap();  // contract violation: never return a silently wrong C
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int wm0 = sk_sm120_warp_m(warp, WARPS_M) * WM, wn0 = sk_sm120_warp_n(warp, WARPS_M) * WN;
  const int k_stages = K / SK_SM120_BK;

  float acc[MT][NT][4];
  zero_fragments(acc);

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_stages)
      sm120_load_stage<RECIPE, BM, BN, THREADS>(sm120_smem + s * STAGE_BYTES, s, a_codes, a_scales, b_codes, b_scales,
                                                m0, n0, M, N, K);
    cp_async_commit();
  }
#pragma unroll 1
  for (int ks = 0; ks < k_stages; ++ks) {
    cp_async_wait<STAGES - 2>();  // stage ks has landed (this thread's copies) ...
    __syncthreads();              // ... everyone's, and stage ks-1 is no longer being read
    const int next = ks + STAGES - 1;
    if (next < k_stages)
      sm120_load_stage<RECIPE, BM, BN, THREADS>(sm120_smem + (next % STAGES) * STAGE_BYTES, next, a_codes, a_scales,
                                                b_codes, b_scales, m0, n0, M, N, K);
    cp_async_commit();
    sm120_compute_stage<RECIPE, BM, BN, MT, NT>(sm120_smem + (ks % STAGES) * STAGE_BYTES, wm0, wn0, lane, acc);
  }
  cp_async_wait<0>();

  // Epilogue: alpha in FP32, RN to OUT, masked to m < M, n < N.
  const float s = load_alpha(alpha);
  const bool pairs = (ldc % 2 == 0) && ((reinterpret_cast<unsigned long long>(c) & 7ull) == 0);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + wm0 + 16 * mt + sk_sm120_acc_row(lane, 2 * h);
        const int n = n0 + wn0 + 8 * nt + sk_sm120_acc_col(lane, 2 * h);
        if (m >= M) continue;
        const float v0 = acc[mt][nt][2 * h] * s, v1 = acc[mt][nt][2 * h + 1] * s;
        const long long idx = (long long)m * ldc + n;
        if (pairs && n + 1 < N) {
          sm120_store_pair<OUT>(c, idx, v0, v1);
        } else {
          if (n < N) store_out<OUT>(c, idx, v0);
          if (n + 1 < N) store_out<OUT>(c, idx + 1, v1);
        }
      }
}

#endif  // SK_HAS_SM120_BLOCK_SCALED_MMA

template <int RECIPE, int OUT, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, 1)
    sm120_blockscaled(const u8* __restrict__ a_codes, const void* __restrict__ a_scales, const u8* __restrict__ b_codes,
                      const void* __restrict__ b_scales, const float* __restrict__ alpha, void* __restrict__ c, int M,
                      int N, int K, int ldc) {
  static_assert(RECIPE == kNvfp4 || RECIPE == kMxfp4 || RECIPE == kMxfp8,
                "sm120_blockscaled: nvfp4 / mxfp4 / mxfp8 only (block_fp8, tensor_fp8: portable kernels)");
  static_assert(OUT == kOutBf16 || OUT == kOutFp16 || OUT == kOutFp32, "OUT: 0 bf16, 1 fp16, 2 fp32");
  static_assert(BK == SK_SM120_BK, "sm120_blockscaled: BK must be 128");
  static_assert(WARPS_M >= 1 && WARPS_N >= 1 && WARPS_M * WARPS_N <= 16, "1..16 warps");
  static_assert(BM % (32 * WARPS_M) == 0 && BN % (32 * WARPS_N) == 0,
                "warp tile must be a multiple of 32x32 (2 m16 x 4 n8 tiles share one scale register pair)");
  static_assert(STAGES >= 2, "cp.async ring needs >= 2 stages");
  static_assert(sk_sm120_smem_bytes(RECIPE, BM, BN, STAGES) <= 101376, "exceeds 99 KB of shared memory per block");
#if defined(__CUDA_ARCH__)
#if defined(SK_SM120_TARGET) && defined(SK_HAS_SM120_BLOCK_SCALED_MMA)
  sm120_blockscaled_body<RECIPE, OUT, BM, BN, WARPS_M, WARPS_N, STAGES>(
      a_codes, reinterpret_cast<const u8*>(a_scales), b_codes, reinterpret_cast<const u8*>(b_scales), alpha, c, M, N,
      K, ldc);
#elif defined(SK_SM120_TARGET)
  static_assert(Sm120ArchGuard<RECIPE>::kNever,
                "sm120_blockscaled: common/mma.cuh was included before this header without the SM120 "
                "block-scaled wrappers; include gemm/sm120_blockscaled.cuh first");
#else
  static_assert(Sm120ArchGuard<RECIPE>::kNever,
                "sm120_blockscaled needs sm_120a or sm_121a (block-scaled mma.sync); this target is neither");
#endif
#endif
}

}  // namespace gemm
}  // namespace sk
