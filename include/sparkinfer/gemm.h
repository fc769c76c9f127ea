/*
 * sparkinfer/gemm.h - block-scaled GEMMs: gemm.blockscaled and the linear-layer ops
 * gemm.mxfp8_linear, gemm.tensor_fp8_linear, gemm.block_fp8_linear, all planned ops
 * (sparkinfer/op.h); plus a one-shot convenience (sk_gemm_mm) and weight packing.
 *
 *   C[m, n] = out_cast(alpha * sum_k deq(A)[m, k] * deq(B)[n, k])     A [M,K], B [N,K], K-major
 *
 * Recipes (formats and scale layouts: ops/gemm/gemm.md):
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
 * deterministic split-K through the plan's scratch); larger M a tiled mma.sync kernel (SM120:
 * block-scaled mma.sync for NVFP4 / MXFP4 / MXFP8). A plan resolves one configuration per range of
 * M it can meet (1..max_m), so bind picks the kernel by M and run only launches. Results are
 * bitwise reproducible for the same inputs and scratch setting.
 *
 * gemm.blockscaled, entry "mm", tensors in order (1 <= M <= max_m):
 *   a_codes u8 [M, K/2] (FP4) or [M, K] (FP8), 16-byte aligned
 *   a_scales  swizzled u8 [pad(M,128) * pad(K/vec,4)] (NVFP4/MX*), fp32 [M, K/128] (BLOCK_FP8),
 *             absent (TENSOR_FP8); 4-byte aligned
 *   b_codes   u8 [N, K/2] or [N, K]
 *   b_scales  as a_scales with N rows; BLOCK_FP8: fp32 [ceil(N/128), K/128]
 *   alpha     fp32 [1] on the device, optional (absent = 1.0)
 *   c         caps.out [M, N], contiguous
 * Scratch: the decode split-K workspace (zero_once); optional for this op: without it (NULL, 0)
 * or when it is too small, the decode kernel takes a whole tile per CTA (each weight byte still
 * read once; another reduction order, so other low bits).
 * After sk_bind, sk_binding_symbol gives M, REGIME (the kernel slot the run launches) and CTAS (the
 * GEMM launch's CTAs); the linear ops add QUANTIZE (1: x is quantized by a first launch).
 *
 * Thread safety: as sparkinfer/op.h; the one-shot functions may be called concurrently, but a
 * workspace must not be shared by two launches that can run at the same time.
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

/** gemm.blockscaled caps (versioned: SK_GEMM_CAPS_INIT, then set fields). */
typedef struct sk_gemm_caps {
  size_t struct_size;     /**< sizeof(sk_gemm_caps), set by SK_GEMM_CAPS_INIT */
  sk_gemm_recipe recipe;  /**< default SK_GEMM_NVFP4 */
  sk_dtype out;           /**< C's type: SK_DTYPE_BF16 (default), _FP16 or _FP32 */
  int64_t n;              /**< weight rows, >= 1 */
  int64_t k;              /**< K (padded), a positive multiple of 128 up to 2^30 */
  int64_t max_m;          /**< most rows of A one run takes (>= 1, <= 2^31 - 1) */
  const char *arch;       /**< NULL = the current device's */
} sk_gemm_caps;
#define SK_GEMM_CAPS_INIT { sizeof(sk_gemm_caps), SK_GEMM_NVFP4, SK_DTYPE_BF16, 0, 0, 0, NULL }

/** Caps of the three linear ops (versioned: SK_GEMM_LINEAR_CAPS_INIT). */
typedef struct sk_gemm_linear_caps {
  size_t struct_size;     /**< sizeof(sk_gemm_linear_caps) */
  int64_t n;              /**< output features (weight rows), >= 1 */
  int64_t k;              /**< input features, a positive multiple of 128 up to 2^30 */
  int64_t max_m;          /**< most tokens per run (>= 1); max_m * K <= 2^34 */
  sk_dtype out;           /**< SK_DTYPE_BF16 (default), _FP16 or _FP32 */
  const char *arch;       /**< NULL = the current device's */
} sk_gemm_linear_caps;
#define SK_GEMM_LINEAR_CAPS_INIT { sizeof(sk_gemm_linear_caps), 0, 0, 0, SK_DTYPE_BF16, NULL }

/* gemm.mxfp8_linear, entry "linear": x bf16 [M, K] (16-byte aligned), w_codes u8 [N, K],
 *   w_scales swizzled u8 [pad(N,128) * pad(K/32,4)], alpha fp32 [1] (optional), out [M, N].
 *   Run: the quantization.mxfp8 kernel quantizes x into the scratch, then mm (two launches);
 *   with SPARKINFER_GEMM_LINEAR_FUSED=1, M <= 8 is one decode launch that quantizes x itself
 *   (bitwise equal). Scratch (zero_once): the quantized activations and mm's workspace.
 * gemm.tensor_fp8_linear, entry "linear": x_codes u8 [M, K] (E4M3, quantized with the static
 *   input scale), w_codes u8 [N, K], alpha fp32 [1] (optional; input_scale * weight_scale),
 *   out [M, N]. Scratch: mm's workspace.
 * gemm.block_fp8_linear, entry "linear" (DeepSeek-V3 FP8): x bf16 [M, K] re-quantized inside the
 *   op to E4M3 with one fp32 scale per 1x128 block (s = amax/448, codes = E4M3(x/s)), w_codes u8
 *   [N, K], w_scales fp32 [ceil(N/128), K/128], out [M, N]; out = sum over K blocks of
 *   (codes . codes) * sA * sB. Scratch (zero_once): the quantized activations and mm's
 *   workspace. Two launches. */

/** Whether gemm.blockscaled runs `recipe` on `arch` (sm_89+; needs no GPU). 1 or 0. */
SK_API int sk_gemm_is_supported(sk_gemm_recipe recipe, const char *arch);

/* ---- one-shot convenience ------------------------------------------------------------------ */

/** C = alpha * A x B^T in one call: a thin wrapper over gemm.blockscaled plans, cached per
 *  (recipe, output type, N, K, range of M, arch, device) for the life of the process. Tensors as
 *  the "mm" entry; the recipe, N, K and the output type come from them. The first call of a new
 *  range of M creates its plan (may compile): call sk_gemm_prewarm before
 *  sk_freeze_kernel_resolution; afterwards any M whose range was warmed runs, M of an unwarmed
 *  range fails with SK_ERR_KERNEL_RESOLUTION_FROZEN. `workspace` (NULL, or
 *  sk_gemm_workspace_bytes of device memory zeroed once) is the plan's scratch. Errors:
 *  SK_ERR_INVALID_ARGUMENT (shapes, dtypes, alignment: codes 16-byte, scales 4-byte aligned; B
 *  beyond the kernels' 32-bit work counters), SK_ERR_UNSUPPORTED, resolution errors. */
SK_API sk_status sk_gemm_mm(sk_gemm_recipe recipe, const DLTensor *a_codes, const DLTensor *a_scales,
                            const DLTensor *b_codes, const DLTensor *b_scales, const DLTensor *alpha,
                            const DLTensor *c, void *workspace, size_t workspace_bytes, void *stream);

/** Bytes of sk_gemm_mm's optional workspace for M x N x K on the current device (0 when split-K
 *  would not help, and for a shape mm refuses). The caller allocates it (256-byte aligned),
 *  zeroes it ONCE, and may reuse it for any later call with the same or smaller M*N: every launch
 *  leaves its counters at zero. */
SK_API size_t sk_gemm_workspace_bytes(sk_gemm_recipe recipe, int64_t m, int64_t n, int64_t k);

/** Create (and cache) the plans sk_gemm_mm uses for the listed M values with this recipe, output
 *  dtype, N and K; arch NULL = the current device. An M that is not listed but falls in a range
 *  a listed M warmed also runs after a freeze (sk_gemm_describe names the configuration); one that
 *  needs another configuration fails with SK_ERR_KERNEL_RESOLUTION_FROZEN. Call before
 *  sk_freeze_kernel_resolution. Errors: SK_ERR_INVALID_ARGUMENT (bad recipe or dtype, no or
 *  non-positive M values, N < 1, K not a positive multiple of 128, N x K beyond the 32-bit work
 *  counters (as sk_gemm_mm), a malformed arch string or SPARKINFER_GEMM_* override), resolution
 *  errors (compile failure, SK_ERR_KERNEL_RESOLUTION_FROZEN after a freeze). Thread safety: any
 *  thread. */
SK_API sk_status sk_gemm_prewarm(sk_gemm_recipe recipe, sk_dtype out, const int64_t *ms, size_t num_ms, int64_t n,
                                 int64_t k, const char *arch);

/** What a gemm.blockscaled plan launches for one problem shape. */
typedef struct sk_gemm_launch_info {
  char source[64];        /**< kernel source, relative to ops/ (e.g. "gemm/gemv_decode.cuh") */
  char name[160];         /**< name expression, as in compile logs and `sk-warm --dry-run` */
  char params[128];       /**< the kernel request's params string */
  sk_dim3 grid, block;    /**< launch geometry (the decode grid with a large enough workspace) */
  unsigned smem_bytes;    /**< dynamic shared memory per block */
  size_t workspace_bytes; /**< sk_gemm_workspace_bytes for this shape */
  int sm_count;           /**< SMs the grid is sized for */
} sk_gemm_launch_info;

/** Describe the kernel and launch geometry for recipe, output type, M x N x K and `arch` (NULL =
 *  the current device), with the SPARKINFER_GEMM_* overrides applied. Host only; with an explicit
 *  arch it needs no GPU (the grids then use the arch table's SM count, unless the present device
 *  has that arch). Errors: SK_ERR_INVALID_ARGUMENT (recipe, out, shape, arch, NULL info, a
 *  malformed override); device errors when arch is NULL and there is no usable GPU. */
SK_API sk_status sk_gemm_describe(sk_gemm_recipe recipe, sk_dtype out, int64_t m, int64_t n, int64_t k,
                                  const char *arch, sk_gemm_launch_info *info);

/* ---- weight packing -------------------------------------------------------------------------- */

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

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_GEMM_H */
