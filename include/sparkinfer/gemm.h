/*
 * sparkinfer/gemm.h - block-scaled GEMMs: gemm.blockscaled (mm, pack_weight, prewarm) and the
 * linear-layer entry points gemm.mxfp8_linear and gemm.tensor_fp8_linear (aliases of mm with a
 * fixed recipe, as upstream keeps them).
 *
 *   C[m, n] = out_cast(alpha * sum_k deq(A)[m, k] * deq(B)[n, k])     A [M,K], B [N,K], K-major
 *
 * Recipes (formats and scale layouts: docs/ops/gemm.md):
 *   NVFP4       E2M1 codes (2 per byte, low nibble first), UE4M3 scale per 16, 128x4 swizzled;
 *               alpha = 1/(gsA*gsB)
 *   MXFP4       E2M1 codes, UE8M0 scale per 32, swizzled
 *   MXFP8       E4M3 codes, UE8M0 scale per 32, swizzled
 *   BLOCK_FP8   E4M3 codes; fp32 scales: A [M, K/128] (1x128), B [ceil(N/128), K/128] (128x128)
 *   TENSOR_FP8  E4M3 codes, no block scales; alpha = scale_a * scale_b
 * Codes and scale bytes are DLPack uint8 tensors; fp32 scales are float32 tensors. K % 128 == 0:
 * pack_weight pads weights; the quantizers take no padding, so for K % 128 != 0 the caller
 * zero-pads x to the padded K (sk_gemm_padded_k) and quantizes that (zero blocks quantize to zero
 * codes, and a NaN in the padding would poison the sums).
 *
 * Kernels: M <= 16 uses a weight-streaming decode kernel (each weight byte read once, optional
 * deterministic split-K through a caller workspace); larger M a tiled mma.sync kernel. Both are
 * resolved through the JIT on first use of a (recipe, output type, tile) configuration: call
 * sk_gemm_prewarm before sk_freeze_kernel_resolution. Results are bitwise reproducible for the
 * same inputs and workspace setting.
 *
 * Thread safety: all functions may be called concurrently; a workspace must not be shared by two
 * launches that can run at the same time.
 */
#ifndef SPARKINFER_GEMM_H
#define SPARKINFER_GEMM_H

#include "jit.h"
#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sk_gemm_recipe {
  SK_GEMM_NVFP4 = 0,
  SK_GEMM_MXFP4 = 1,
  SK_GEMM_MXFP8 = 2,
  SK_GEMM_BLOCK_FP8 = 3,
  SK_GEMM_TENSOR_FP8 = 4,
} sk_gemm_recipe;

/** Whether gemm.blockscaled runs `recipe` on `arch` (sm_89+; needs no GPU). 1 or 0. */
SK_API int sk_gemm_is_supported(sk_gemm_recipe recipe, const char *arch);

/** Bytes of the optional decode workspace for M x N x K (0 when split-K would not help, and for
 *  a shape mm refuses: M outside 1..16, K not a multiple of 128 up to 2^30, N x K too large). The
 *  caller allocates it (256-byte aligned), zeroes it ONCE (cudaMemset 0), and may then reuse it
 *  for any later call with the same or smaller M*N: every launch leaves its counters at zero. */
SK_API size_t sk_gemm_workspace_bytes(sk_gemm_recipe recipe, int64_t m, int64_t n, int64_t k);

/** What sk_gemm_mm launches for one problem shape (sk_gemm_describe). */
typedef struct sk_gemm_launch_info {
  char source[64];        /**< kernel source, relative to kernel_src/ (e.g. "gemm/gemv_decode.cuh") */
  char name[160];         /**< name expression, as in compile logs and `sk-warm --dry-run` */
  char params[128];       /**< the kernel request's params string */
  sk_dim3 grid, block;    /**< launch geometry */
  unsigned smem_bytes;    /**< dynamic shared memory per block */
  size_t workspace_bytes; /**< sk_gemm_workspace_bytes for this shape; the grid assumes it is given */
  int sm_count;           /**< SMs the grid is sized for: the current device's, or 128 without one */
} sk_gemm_launch_info;

/** Describe the kernel and launch geometry sk_gemm_mm picks for recipe, output type `out`
 *  (SK_DTYPE_BF16/FP16/FP32), M x N x K and `arch` (NULL = the current device), with the
 *  SPARKINFER_GEMM_* overrides applied: for tools, benchmarks and tests that must launch or
 *  prebuild exactly what mm would. Host only: resolves, compiles and launches nothing; with an
 *  explicit arch it needs no GPU (the decode and tiled grids then assume 128 SMs unless a device is
 *  present). Resolve the kernel with sk_kernel_resolve({op, info.source, info.name, info.params,
 *  arch}) to get the very cubin mm uses.
 *  @param info  filled on success (caller-owned)
 *  @return SK_OK; SK_ERR_INVALID_ARGUMENT for a bad recipe, output type, shape (M, N < 1, K not a
 *          positive multiple of 128), arch or NULL info, or a malformed SPARKINFER_GEMM_* variable;
 *          device errors when arch is NULL and there is no usable GPU.
 *  Thread safety: any thread. */
SK_API sk_status sk_gemm_describe(sk_gemm_recipe recipe, sk_dtype out, int64_t m, int64_t n, int64_t k,
                                  const char *arch, sk_gemm_launch_info *info);

/** C = alpha * A x B^T.
 *  @param a_codes   uint8 [M, K/2] (FP4) or [M, K] (FP8)
 *  @param a_scales  swizzled uint8 [sk_swizzled_scale_bytes(M, K/vec)] (NVFP4/MX*), float32
 *                   [M, K/128] (BLOCK_FP8), NULL (TENSOR_FP8)
 *  @param b_codes   uint8 [N, K/2] or [N, K]
 *  @param b_scales  as a_scales with N rows; BLOCK_FP8: float32 [ceil(N/128), K/128]
 *  @param alpha     float32 [1] on the device, or NULL for 1.0
 *  @param c         bfloat16, float16 or float32 [M, N] (rows may be padded: strides {ldc, 1})
 *  @param workspace NULL, or sk_gemm_workspace_bytes of zero-initialised device memory
 *  @param stream    CUstream / cudaStream_t (NULL = legacy default stream)
 *  Resolves the kernel configuration on first use (compiles if needed): after a freeze, only
 *  configurations warmed before it run. Errors: SK_ERR_INVALID_ARGUMENT (shapes, dtypes,
 *  alignment: codes 16-byte, scales 4-byte aligned; B too large for the kernels' 32-bit work
 *  counters: N > 2^31 - 257 or (N/16 + 4) x K/128 >= 2^31, which no weight in memory reaches),
 *  SK_ERR_UNSUPPORTED, resolution errors. */
SK_API sk_status sk_gemm_mm(sk_gemm_recipe recipe, const DLTensor *a_codes, const DLTensor *a_scales,
                            const DLTensor *b_codes, const DLTensor *b_scales, const DLTensor *alpha,
                            const DLTensor *c, void *workspace, size_t workspace_bytes, void *stream);

/** Resolve (compile or load) every kernel configuration mm uses for the listed M values with
 *  this recipe, output dtype (SK_DTYPE_BF16/FP16/FP32), N and K. arch NULL = current device.
 *  Call before sk_freeze_kernel_resolution. What is warmed is configurations, not M values: after
 *  a freeze, mm with an M that was not listed runs when it maps to a configuration a listed M
 *  resolved (sk_gemm_describe names it), and fails with SK_ERR_KERNEL_RESOLUTION_FROZEN when it
 *  needs another one. Errors: SK_ERR_INVALID_ARGUMENT (bad recipe or
 *  dtype, no or non-positive M values, N < 1, K not a positive multiple of 128, N x K beyond
 *  the 32-bit work counters (as sk_gemm_mm), a malformed arch
 *  string or SPARKINFER_GEMM_* override), resolution errors (compile failure,
 *  SK_ERR_KERNEL_RESOLUTION_FROZEN after a freeze). Thread safety: any thread. */
SK_API sk_status sk_gemm_prewarm(sk_gemm_recipe recipe, sk_dtype out, const int64_t *ms, size_t num_ms, int64_t n,
                                 int64_t k, const char *arch);

/** Host-side, once per weight: pad K up to a multiple of 128 (zero codes; scale columns 1.0:
 *  0x38 for UE4M3, 127 for UE8M0, 1.0f for fp32) and lay scales out as the kernels read them.
 *  Inputs: codes [n, k] (FP4: k/2 bytes per row), scales in the recipe's layout for k
 *  (swizzled computed with k; BLOCK_FP8 fp32 [ceil(n/128), ceil(k/128)], the last column scaling
 *  a partial block when k % 128 != 0; NULL for TENSOR_FP8).
 *  Outputs (caller-allocated host memory): packed codes [n, kp], packed scales for kp, with
 *  kp = sk_gemm_padded_k(k). Then upload them once. Padding scales are never applied to nonzero
 *  codes: any finite value works there (the quantizers write 0, pack_weight 1.0). */
SK_API int64_t sk_gemm_padded_k(int64_t k);
/** Errors: SK_ERR_INVALID_ARGUMENT for an unknown recipe, k not a multiple of the scale block
 *  (16 for NVFP4, 32 for MXFP4 / MXFP8; BLOCK_FP8 and TENSOR_FP8 take any k, FP4 an even k),
 *  sizes beyond 2^31 rows / 2^30 columns, or a NULL buffer. Reads and writes host memory only;
 *  thread-safe for distinct outputs. */
SK_API sk_status sk_gemm_pack_weight(sk_gemm_recipe recipe, int64_t n, int64_t k, const void *codes,
                                     const void *scales, void *packed_codes, void *packed_scales);
/** Bytes of pack_weight's outputs. scales_bytes may be NULL for TENSOR_FP8 (no scales; else it
 *  receives 0). Errors as pack_weight's, for a NULL codes_bytes and, other recipes, scales_bytes. */
SK_API sk_status sk_gemm_packed_bytes(sk_gemm_recipe recipe, int64_t n, int64_t k, size_t *codes_bytes,
                                      size_t *scales_bytes);

/** gemm.mxfp8_linear: out = (MXFP8-quantized x) x W^T with a packed MXFP8 weight. x bfloat16
 *  [M, K]; w_codes uint8 [N, K]; w_scales swizzled uint8; alpha as mm (NULL = 1); out as mm's c.
 *  x is quantized into `workspace` by the quantization.mxfp8 kernel, then mm runs (two launches).
 *  With SPARKINFER_GEMM_LINEAR_FUSED=1, M <= 8 is one decode launch that quantizes x itself
 *  (bitwise equal to the two launches; measured slower on the H200, docs/ops/gemm.md); the
 *  workspace then only holds mm's K-split partials and may be 0 bytes (NULL). Size:
 *  sk_gemm_mxfp8_linear_workspace_bytes (zeroed once; a larger workspace is fine; it follows
 *  that variable, read once per process; 0 for M < 1 or a weight shape mm refuses). Thread
 *  safety: any thread. */
SK_API size_t sk_gemm_mxfp8_linear_workspace_bytes(int64_t m, int64_t n, int64_t k);
/** Errors as sk_gemm_mm, plus SK_ERR_INVALID_ARGUMENT for a missing or short workspace. One
 *  launch (fused, M <= 8) or two (quantize, GEMM) on `stream`; the workspace must not be shared by
 *  concurrent calls. */
SK_API sk_status sk_gemm_mxfp8_linear(const DLTensor *x, const DLTensor *w_codes, const DLTensor *w_scales,
                                      const DLTensor *alpha, const DLTensor *out, void *workspace,
                                      size_t workspace_bytes, void *stream);

/** Resolve (compile or load) every kernel gemm.mxfp8_linear uses for the listed M values, output
 *  dtype (SK_DTYPE_BF16/FP16/FP32), N and K: mm's kernel and the activation quantizer (the fused
 *  decode kernel for M <= 8 with SPARKINFER_GEMM_LINEAR_FUSED=1). arch NULL = current device. Call before
 *  sk_freeze_kernel_resolution (sk_gemm_prewarm covers mm only). Errors: SK_ERR_INVALID_ARGUMENT
 *  (bad dtype, no or non-positive M values, N < 1, K not a positive multiple of 128, a malformed
 *  arch string or SPARKINFER_GEMM_* override), resolution errors (compile failure, SK_ERR_KERNEL_RESOLUTION_FROZEN after a freeze).
 *  Thread safety: any thread; concurrent calls share single-flight compiles. */
SK_API sk_status sk_gemm_mxfp8_linear_prewarm(sk_dtype out, const int64_t *ms, size_t num_ms, int64_t n, int64_t k,
                                              const char *arch);

/** gemm.tensor_fp8_linear: E4M3 activations (quantized with the static input scale) x E4M3
 *  weight, alpha = input_scale * weight_scale (device fp32 [1]); out bfloat16/float16 [M, N].
 *  Same as sk_gemm_mm with SK_GEMM_TENSOR_FP8 and no scales. */
SK_API sk_status sk_gemm_tensor_fp8_linear(const DLTensor *x_codes, const DLTensor *w_codes, const DLTensor *alpha,
                                           const DLTensor *out, void *workspace, size_t workspace_bytes,
                                           void *stream);

/* ---- gemm.block_fp8_linear (planned) ------------------------------------------------------ */

/** DeepSeek-V3-style FP8 linear: BF16 activations re-quantized inside the op to E4M3 with one fp32
 *  scale per 1x128 block (s = amax/448, codes = E4M3(x/s)), times an E4M3 weight with fp32
 *  128x128 block scales; out = sum over K blocks of (codes . codes) * sA * sB. */
typedef struct sk_block_fp8_linear_caps {
  int64_t n;          /**< output features (weight rows), >= 1 */
  int64_t k;          /**< input features, a multiple of 128 */
  int64_t max_m;      /**< most tokens per run (>= 1): decides the kernels resolved and the scratch */
  sk_dtype out;       /**< SK_DTYPE_BF16, SK_DTYPE_FP16 or SK_DTYPE_FP32 */
  const char *arch;   /**< NULL = the current device's */
} sk_block_fp8_linear_caps;

typedef struct sk_block_fp8_linear_plan sk_block_fp8_linear_plan;

/** Whether gemm.block_fp8_linear runs on `arch` (sm_89+). Needs no GPU. */
SK_API int sk_block_fp8_linear_is_supported(const char *arch);
/** Validate caps and resolve the quantizer and every GEMM kernel M in 1..max_m can use.
 *  Errors: SK_ERR_INVALID_ARGUMENT (NULL caps or plan, N < 1, K not a positive multiple of 128
 *  up to 2^30, N x K beyond the kernels' 32-bit work counters as sk_gemm_mm, max_m * K > 2^34, a
 *  bad out dtype or arch), resolution errors (as sk_gemm_prewarm); *plan is NULL on error.
 *  Thread safety: any thread. */
SK_API sk_status sk_block_fp8_linear_plan_create(const sk_block_fp8_linear_caps *caps,
                                                 sk_block_fp8_linear_plan **plan);
/** Scratch: the quantized activations (max_m*K codes, max_m*K/128 fp32 scales) and the decode
 *  split-K workspace. The caller zeroes it ONCE after allocating (the split-K counters must start
 *  at zero; every run leaves them at zero); spec->zero_once says so (1 whenever the workspace is
 *  non-empty). */
SK_API sk_status sk_block_fp8_linear_scratch_spec(const sk_block_fp8_linear_plan *plan, sk_scratch_spec *spec);
/** Bind x bfloat16 [M, K] (1 <= M <= max_m), w_codes uint8 [N, K], w_scales float32
 *  [ceil(N/128), K/128], out [M, N] of caps.out, and the scratch. Views only. */
SK_API sk_status sk_block_fp8_linear_bind(const sk_block_fp8_linear_plan *plan, const DLTensor *x,
                                          const DLTensor *w_codes, const DLTensor *w_scales, const DLTensor *out,
                                          void *scratch, size_t scratch_bytes, sk_binding *binding);
/** Two launches: quantize, then GEMM. No allocation, sync or compile. */
SK_API sk_status sk_block_fp8_linear_run(const sk_block_fp8_linear_plan *plan, const sk_binding *binding,
                                         void *stream);
/** Free a plan (NULL is a no-op); must not race with other uses of the plan. */
SK_API void sk_block_fp8_linear_plan_destroy(sk_block_fp8_linear_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_GEMM_H */
