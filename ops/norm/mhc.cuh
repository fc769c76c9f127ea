// norm.mhc — fused RMSNorm + hyper-connection residual (DeepSeek-V4 mHC), BF16.
// Math and scratch layout: ops/norm/norm.mhc.md. Reference: ops/norm/ref_mhc.{h,c}.
//
// ============================================ LAUNCH CONTRACT ============================================
// Common to every kernel:
//   bf16 = __nv_bfloat16. T = num_tokens >= 1 (launch nothing for T = 0). H = HIDDEN, a multiple of 256.
//   S = H / 256 (hidden tiles). All tensors dense row-major, contiguous, and 16-byte aligned
//   (cudaMalloc / cuMemAlloc give 256). No output may alias an input or another output.
//   Scalars: the eps values as fp32, sinkhorn_iters as int (host rejects < 1; the kernels treat < 1
//   as 1). Dynamic shared memory only in the tensor-core partial kernels (2; elsewhere pass 0).
//   Deterministic: no floating-point atomics, fixed-order reductions; bits do not depend on
//   groups_per_cta / tokens_per_cta, num_stages or hidden_per_cta, but post / comb / y do depend on which partial
//   kernel (2 or 2b; 2c computes exactly 2b -> 3) ran.
//
// Scratch: partials fp32 [T_max][S][36] (kPartialStride), T_max * S * 36 * 4 bytes; the partial
//   kernel writes every slot the finalize reads, so they need no initialisation. Kernels 2c also
//   take token_counters u32 [T_max]: zero before the first launch, zero after every launch.
//
// run_post   = post_kernel
// run_pre    = pre_partial_kernel      -> pre_finalize_kernel        (same stream, in order)
//              or, for large T (the split schedule), pre_projection_kernel (2d) -> pre_finalize_kernel
//              with residual_out (the finalize then writes the 4 copies of x)
// run_post_pre = post_pre_partial_kernel -> post_pre_finalize_kernel (same stream, in order)
// For a few tokens (decode) the *_partial_scalar_kernel variants (2b) replace the partial kernel;
// they write the same partials, so the finalize is the same. The *_fused_decode_kernel variants
// (2c) run 2b and 3 in ONE launch (same bits) when the device has the CTA slots for them.
//
// 1. template <int HIDDEN> __global__ void post_kernel(
//        const bf16* x,           // [T, H]
//        const bf16* residual,    // [T, 4, H]
//        const float* post,       // [T, 4]    (a [T, 4, 1] tensor is the same memory)
//        const float* comb,       // [T, 4, 4]
//        bf16* out,               // [T, 4, H]   written: all
//        int num_tokens);
//    block = exactly 128 threads (kPostThreads); grid = (ceil(T * S / 4), 1, 1).
//    Bandwidth-bound at large T, launch-bound at T = 1.
//
// 2. template <int HIDDEN> __global__ void pre_partial_kernel(
//        const bf16* x,           // [T, H]
//        const float* fn_pre,     // [24, H]  = sum over the 4 stream blocks of fn [24, 4H]
//        bf16* residual_out,      // [T, 4, H]   written: all (4 copies of x)
//        float* partials,         // scratch     written: rows [0, T) x [0, S), slots 0..35 (34, 35 zero)
//        int num_tokens, int groups_per_cta, int num_stages);
//    template <int HIDDEN, int FN_SMEM> __global__ void post_pre_partial_kernel(
//        const bf16* x,           // [T, H]
//        const bf16* residual,    // [T, 4, H]
//        const float* prev_post,  // [T, 4]
//        const float* prev_comb,  // [T, 4, 4]
//        const float* fn,         // [24, 4H]
//        bf16* residual_out,      // [T, 4, H]   written: all (the mix-back)
//        float* partials,         // scratch     written: rows [0, T) x [0, S), slots 0..35 (34, 35 zero)
//        int num_tokens, int groups_per_cta, int num_stages);
//    Tensor cores (mma.sync m16n8k16 bf16, sm_80+): tokens in groups of 16 are the M side, the
//    24 mixes 3 n8 tiles, fn split exactly into 3 bf16 terms held in registers (loaded once per segment).
//    Work items: (tile, group of 16 tokens), numbered tile-major (item = tile * ceil(T / 16) +
//    group); CTA c takes items [c * groups_per_cta, (c + 1) * groups_per_cta), crossing into the
//    next tile where the range does. block = exactly 128 threads (pre) / 512 threads (post_pre);
//    grid = (ceil(ceil(T / 16) * S / groups_per_cta), 1, 1); groups_per_cta >= 1;
//    ceil(T / 16) * S + groups_per_cta < 2^31; bits do not depend on groups_per_cta.
//    num_stages in {2, 3, 4, 2 | kOwnSumsFlag}: cp.async stage buffers; 2 runs the lockstep
//    schedule (four barriers a group), 2 | kOwnSumsFlag the same with a sums buffer of its own
//    (two barriers), 3-4 the pipelined one (same bits all). FN_SMEM (post_pre; pre: 0) = fn terms
//    in shared memory instead of registers (the last ones: lo, then mid; same bits). Dynamic
//    shared memory = partial_dynamic_smem_bytes(NS, stages, own sums, FN_SMEM) = 128 (alignment
//    slack) + stages * partial_stage_bytes(NS) (+ 2 * partial_sums_bytes(NS) for 3-4 stages, + 1
//    with kOwnSumsFlag) + FN_SMEM * 48 KiB: pre 16 / 22 / 36 / 44 KiB, post_pre 82.5 / 106.5 /
//    172 / 213 KiB for 2 / 2 own sums / 3 / 4 stages (+ 128 B); above 48 KiB the host raises the
//    kernel's max dynamic shared memory attribute. Static smem 5 KiB.
//    Suggested: num_stages 2 (the fastest; 3-4 need sm_90/sm_100 shared memory);
//    groups_per_cta from a wave model (ops/norm/mhc.c): about one range per resident CTA.
//
// 2b. template <int HIDDEN> __global__ void pre_partial_scalar_kernel(
//        const bf16* x, const float* fn_pre, bf16* residual_out, float* partials);   // as in 2
//     template <int HIDDEN> __global__ void post_pre_partial_scalar_kernel(
//        const bf16* x, const bf16* residual, const float* prev_post, const float* prev_comb,
//        const float* fn, bf16* residual_out, float* partials);                      // as in 2
//    Scalar fp32 FMA, one warp per (token, tile, role); role z takes mixes 4z .. 4z+3.
//    block = exactly 32 threads; grid = (T, S, 6); no shared memory. Written: as in 2.
//    Suggested for decode sizes (the host's crossover: T <= 16 for H <= 4096, 8 above;
//    SPARKINFER_MHC_SCALAR_MAX_T). Bits differ
//    from kernel 2 (another summation order) but do not depend on T.
//
// 2c. template <int HIDDEN, typename NormWeight> __global__ void pre_fused_decode_kernel(
//        const bf16* x, const float* fn_pre, const float* hc_scale, const float* hc_base,
//        const NormWeight* norm_weight, bf16* residual_out, float* partials, u32* token_counters,
//        bf16* y, float* post, float* comb, int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps);
//     template <int HIDDEN, typename NormWeight> __global__ void post_pre_fused_decode_kernel(
//        const bf16* x, const bf16* residual, const float* prev_post, const float* prev_comb,
//        const float* fn, const float* hc_scale, const float* hc_base, const NormWeight* norm_weight,
//        bf16* residual_out, float* partials, u32* token_counters, bf16* y, float* post, float* comb,
//        int sinkhorn_iters, float rms_eps, float hc_eps, float norm_eps);
//    Arguments as in 2b and 3; token_counters: u32 [T] (scratch), all zero at launch, all zero
//    again when the launch completes (a non-zero counter traps). block = exactly 32 threads;
//    grid = (T, S, 6) as 2b; static smem < 256 B. Written: residual_out, partials, y, post, comb.
//    S + 1 CTAs per token wait (spin) for the token's other CTAs: launch only when
//    (S + 1) * T <= (resident CTAs per SM x SMs) / 2, else 2b -> 3 (see the comment at 2c).
//
// 3. template <int HIDDEN, typename NormWeight> __global__ void pre_finalize_kernel(
//        const bf16* x,           // [T, H]  (the streams are 4 copies of x)
//        bf16* residual_out,      // [T, 4, H] written (4 copies of x) if not nullptr: after 2d; nullptr after 2 / 2b
//        ... the rest as post_pre_finalize_kernel ...);
//    template <int HIDDEN, typename NormWeight> __global__ void post_pre_finalize_kernel(
//        const bf16* residual_out,     // [T, 4, H]  (from post_pre_partial_kernel)
//        const float* partials,        // scratch, as the partial kernel left it
//        const float* hc_scale,        // [3]
//        const float* hc_base,         // [24]
//        const NormWeight* norm_weight,// [H]; NormWeight = __nv_bfloat16 or float; NoNormWeight: nullptr
//        bf16* y,                      // [T, H]      written: all
//        float* post,                  // [T, 4]      written: all
//        float* comb,                  // [T, 4, 4]   written: all
//        int num_tokens, int hidden_per_cta, int sinkhorn_iters,
//        float rms_eps, float hc_eps, float norm_eps);   // norm_eps unused without a norm weight
//    block = exactly 128 threads (kFinalizeThreads); grid = (T, H / hidden_per_cta, 1);
//    CTA (token, 0) writes post and comb (its last warp runs Sinkhorn while the others write y).
//    hidden_per_cta: a multiple of 256 dividing H. Suggested: H when T >= 2 * num_SMs / (H/1024),
//    else the largest of 1024 / 512 / 256 that divides H (decode: several CTAs per token).
//    Static shared memory < 256 B.
//    Must start after the partial kernel (2 or 2b) of the same call has finished (stream order is enough).
//
// Grid limits: grid.x is at most 2^31 - 1 (T), grid.y = S or H / hidden_per_cta (< 65536).
// The tensor-core partials (2) are much faster than the scalar ones (2b) at large T but slower at
// T = 1 (about equal at T = 16, where 2b's 6 * S * T CTAs grow with H): hence 2b for decode sizes.
// ==========================================================================================================
#pragma once
// The kernels, by responsibility (each part includes what it uses):
#include "norm/mhc_post.cuh"
#include "norm/mhc_partial.cuh"
#include "norm/mhc_projection.cuh"
#include "norm/mhc_scalar.cuh"
#include "norm/mhc_finalize.cuh"
#include "norm/mhc_fused.cuh"
