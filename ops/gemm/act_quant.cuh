// Activation quantizers of the FP8 linear ops: BF16 activations [M, K] -> E4M3 codes with
//   * block-FP8 scales (gemm.block_fp8_linear; DeepSeek-V3 style, one fp32 scale per 1x128), or
//   * one per-tensor fp32 scale (gemm.tensor_fp8_linear, dynamic activation scale).
// Rules and NaN/Inf policy: ops/gemm/gemm.md, "Activation quantizers". CPU references (bit-exact):
// skref_gemm_quantize_block_fp8_rows() and skref_gemm_quantize_tensor_fp8() in tests/ref/gemm.h.
//
// ---- Launch contract -----------------------------------------------------------------------
// All kernels: blockDim = (kActQuantThreads = 256, 1, 1), no dynamic shared memory, any stream,
// no scratch beyond what is listed. No input may alias an output. Deterministic (the only
// reduction is a max, taken on integer bits in a fixed tree).
//
//   sk::gemm::act_quant_block_fp8<CVT>(const __nv_bfloat16* x, int M, int K,
//                                      u8* codes, float* scales)
//     CVT     sk::kCvtSoftware (0) | sk::kCvtHardware (1) (cvt.rn.satfinite.e4m3x2 on sm_89+,
//             software elsewhere; bit-identical either way)
//     x       [M, K] contiguous (row stride K), 16-byte aligned
//     M, K    M >= 1, K >= 128, K % 128 == 0
//     codes   [M, K] E4M3 bytes, contiguous, 8-byte aligned
//     scales  fp32 [M, K/128] row-major (scales[m*(K/128) + k/128]), 4-byte aligned: the GEMM's
//             `sfa` (ops/gemm/gemm.md 2.2)
//     grid    (g, 1, 1), any g >= 1 (grid-stride loop). Recommended g = ceil(M*K / 2048)
//             (= ceil(chunks / 256), chunks = M*K/8): one 8-element chunk per thread. Capping g
//             (e.g. at a multiple of the SM count) is also correct.
//     Each x element is read once (one 16-byte load per 8 elements); one 8-byte code store per
//     8 elements; one scale store per 128 elements.
//
//   Per-tensor scale ("computed scale"): two launches on one stream, like NVFP4's computed
//   global scale, reusing its amax kernel (ops/quantization/nvfp4.cuh):
//   1) sk::quant::nvfp4_amax_partials<__nv_bfloat16>(x, K /*ld_x*/, M, K, amax_partials)
//        grid (P, 1, 1), 1 <= P <= kActMaxAmaxPartials (= sk::quant::kMaxAmaxPartials = 1024),
//        e.g. P = min(ceil(M*K/8 / 256), 2 * SMs); block 256. CTA b writes amax_partials[b] =
//        max |x| over the finite elements it visited (NaN and +-Inf skipped). No
//        initialisation of amax_partials needed. Requires M*K <= 2^34, K % 16 == 0.
//   2) sk::gemm::act_quant_tensor_fp8<CVT>(const __nv_bfloat16* x, int M, int K,
//          const float* amax_partials, int num_partials, u8* codes, float* scale_out)
//        x, codes   as above ([M, K] contiguous, 16-byte / 8-byte aligned); K % 16 == 0
//                   (the GEMM needs K % 128 == 0 anyway)
//        amax_partials, num_partials   the array of step 1 and its P
//        scale_out  fp32 [1] on the device, written (by thread 0 of CTA 0) with the tensor
//                   scale s. The GEMM's alpha must include it: alpha = s_a * s_b
//                   (s_b = the weight's per-tensor scale), computed on the device if a CUDA
//                   graph is to stay valid when s changes.
//        grid (g, 1, 1), any g >= 1. Recommended g = ceil(M*K/2048) (one chunk per thread);
//        every CTA first reduces the P partials (P/256 loads per thread), so keep P small (2*SMs).
//   x is read twice in total (amax pass, quantize pass).
//
// ---- Math (exactly what the CPU references compute) -------------------------------------------
//   block FP8, per 128-element block b of row m (elements x_i, fp32-widened exactly):
//     amax = max_i |x_i| over the non-NaN elements (+-Inf kept)     [fmaxf in the reference]
//     s    = amax > 0 ? RN_fp32(amax / 448) : 1                     [scale stored as-is]
//     code = E4M3_RNE_satfinite(RN_fp32(x_i / s))
//   tensor FP8:
//     amax = max |x_i| over the finite elements of the whole tensor (NaN and +-Inf skipped)
//     s    = amax > 0 ? RN_fp32(amax / 448) : 1                     [written to scale_out]
//     code = E4M3_RNE_satfinite(RN_fp32(x_i / s))
//   E4M3_RNE_satfinite: round to nearest, ties to even; magnitudes beyond 448 (Inf included)
//   saturate to +-448 (0x7E / 0xFE); NaN -> 0x7F; a zero result keeps the sign (-0 -> 0x80).
//   The division is a true IEEE division (div.rn.f32, never x * (1/s)), which is what the
//   block-FP8 reference and DeepSeek-V3's act_quant (y = x / s) do.
#pragma once
#include <cuda_bf16.h>

#include "common/defs.cuh"
#include "common/numeric.cuh"
#include "common/reduce.cuh"
#include "common/sync.cuh"

namespace sk {
namespace gemm {

constexpr int kActQuantThreads = 256;
constexpr int kActBlockFp8Block = 128;
constexpr int kActMaxAmaxPartials = 1024;  // == sk::quant::kMaxAmaxPartials (nvfp4.cuh)
constexpr float kActE4m3Max = 448.0f;

// s = amax / 448 (IEEE RN), or 1 for a block / tensor whose amax is 0 (all zeros, or nothing
// that counts towards the amax). amax = +Inf (block rule only) gives s = +Inf.
SK_DEVICE float act_fp8_scale(float amax) {
  return amax > 0.0f ? div_rn(amax, kActE4m3Max) : 1.0f;
}

// Eight values -> eight E4M3 codes E4M3(v[i] / s), v[i] in byte i.
template <int CVT>
SK_DEVICE uint2 act_fp8_quantize8(const float (&v)[8], float s) {
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; i++) q[i] = div_rn(v[i], s);
  return make_uint2(pack_e4m3x4<CVT>(q[0], q[1], q[2], q[3]),
                    pack_e4m3x4<CVT>(q[4], q[5], q[6], q[7]));
}

template <int CVT>
__global__ void __launch_bounds__(kActQuantThreads)
    act_quant_block_fp8(const __nv_bfloat16* __restrict__ x, int M, int K, u8* __restrict__ codes,
                        float* __restrict__ scales) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  const i64 tid = i64(blockIdx.x) * blockDim.x + threadIdx.x;
  const i64 num_threads = i64(gridDim.x) * blockDim.x;
  // Sixteen threads per 128-element block, 8 elements (one 16-byte load) each. x is contiguous
  // and K % 128 == 0, so chunk c (elements 8c..8c+7 of the flat tensor) belongs to block c/16,
  // which is also the row-major index m*(K/128) + k/128 of its scale. The thread count is a
  // multiple of 32, so chunk c runs on lane c % 32: a block is one aligned half warp, and the
  // 16 lanes of a half warp enter and leave the loop together (the chunk count is a multiple
  // of 16).
  const i64 chunks = i64(M) * (K / 8);
  const unsigned half_mask = 0xFFFFu << (threadIdx.x & 16u);
  const uint4* __restrict__ x16 = reinterpret_cast<const uint4*>(x);
  uint2* __restrict__ codes8 = reinterpret_cast<uint2*>(codes);
  for (i64 c = tid; c < chunks; c += num_threads) {
    float v[8];
    widen8<__nv_bfloat16>(__ldg(x16 + c), v);
    u32 amax = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = max(amax, magnitude_bits_skip_nan(v[i]));
#pragma unroll
    for (int offset = 1; offset < 16; offset <<= 1)
      amax = max(amax, __shfl_xor_sync(half_mask, amax, offset));
    const float s = act_fp8_scale(f32_from_bits(amax));
    codes8[c] = act_fp8_quantize8<CVT>(v, s);
    if ((c & 15) == 0) scales[c >> 4] = s;
  }
}

template <int CVT>
__global__ void __launch_bounds__(kActQuantThreads)
    act_quant_tensor_fp8(const __nv_bfloat16* __restrict__ x, int M, int K,
                         const float* __restrict__ amax_partials, int num_partials,
                         u8* __restrict__ codes, float* __restrict__ scale_out) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  const i64 tid = i64(blockIdx.x) * blockDim.x + threadIdx.x;
  const i64 num_threads = i64(gridDim.x) * blockDim.x;
  // Tensor amax: the max of the partials (non-negative finite floats, compared as integer bits:
  // exact and order-independent). magnitude_bits_finite also keeps a stray NaN/Inf out.
  u32 amax = 0;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x)
    amax = max(amax, magnitude_bits_finite(__ldg(amax_partials + i)));
  const float s = act_fp8_scale(f32_from_bits(block_max_bits(amax)));
  if (tid == 0) *scale_out = s;

  const i64 chunks = i64(M) * (K / 8);
  const uint4* __restrict__ x16 = reinterpret_cast<const uint4*>(x);
  uint2* __restrict__ codes8 = reinterpret_cast<uint2*>(codes);
  // Unrolled twice: ptxas' default 4x unroll of this loop spills 16 bytes on sm_12xa around
  // the division slow-path calls.
#pragma unroll 2
  for (i64 c = tid; c < chunks; c += num_threads) {
    float v[8];
    widen8<__nv_bfloat16>(__ldg(x16 + c), v);
    codes8[c] = act_fp8_quantize8<CVT>(v, s);
  }
}

}  // namespace gemm
}  // namespace sk
