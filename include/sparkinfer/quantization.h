/*
 * sparkinfer/quantization.h - row quantizers: quantization.nvfp4 and quantization.mxfp8.
 *
 * Both take BF16 or FP16 rows x[M, K] (contiguous, 16-byte aligned) and write:
 *  - nvfp4: packed E2M1 values [M, K/2] bytes (element 2j in the LOW nibble of byte j), one E4M3
 *    scale byte per 16 values, and an fp32 global scale (given by the caller, or computed in the
 *    same op as 448*6/amax(x));
 *  - mxfp8: E4M3 values [M, K] bytes and one UE8M0 scale byte per 32 values.
 * Scales go to the 128x4 swizzled MMA layout (CUTLASS/cuBLASLt/FlashInfer: [ceil(M/128),
 * ceil(S/4), 32, 4, 4] bytes for S = K/16 or K/32 scale columns, zero padded), to a row-major
 * [M, S] buffer, or to both. The exact math, NaN/Inf policy and layouts: ops/quantization/quantization.md.
 *
 * Life cycle (sparkinfer/op.h): plan_create -> scratch_spec -> bind -> run -> plan_destroy.
 * FP8/FP4 codes and scale bytes are passed as DLPack uint8 tensors.
 *
 * Thread safety: a plan is immutable after creation; any number of threads may bind and run it
 * concurrently. plan_destroy must not race with other uses of the same plan.
 */
#ifndef SPARKINFER_QUANTIZATION_H
#define SPARKINFER_QUANTIZATION_H

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Which scale buffers a plan writes. */
typedef enum sk_scale_layout {
  SK_SCALES_SWIZZLED = 1,  /**< the 128x4 swizzled MMA layout only */
  SK_SCALES_ROW_MAJOR = 2, /**< row-major [M, K/block] only */
  SK_SCALES_BOTH = 3,      /**< both */
} sk_scale_layout;

/** Where the nvfp4 global scale comes from. */
typedef enum sk_global_scale_mode {
  SK_GLOBAL_SCALE_GIVEN = 0,    /**< read from the caller's device fp32 [1] */
  SK_GLOBAL_SCALE_COMPUTED = 1, /**< computed in the op as 448*6/amax(x), written to that tensor */
} sk_global_scale_mode;

/** Caps shared by both quantizers. */
typedef struct sk_quant_caps {
  sk_dtype dtype;                    /**< SK_DTYPE_BF16 or SK_DTYPE_FP16 */
  int64_t k;                         /**< row length: nvfp4 K % 16 == 0, mxfp8 K % 32 == 0 */
  int64_t max_m;                     /**< most rows one run takes (>= 1); max_m*K <= 2^34 */
  sk_scale_layout scales;            /**< which scale tensors bind takes */
  sk_global_scale_mode global_scale; /**< nvfp4 only; must be SK_GLOBAL_SCALE_GIVEN for mxfp8 */
  sk_path path;                      /**< AUTO: hardware cvt where the arch has it; PORTABLE:
                                          software conversion; SM120: needs sm_120a/sm_121a */
  const char *arch;                  /**< target ("sm_120a"); NULL = the current device's */
} sk_quant_caps;

/** An immutable quantizer plan (either op). */
typedef struct sk_quant_plan sk_quant_plan;

/** Bytes of the swizzled scale buffer for M rows and `scale_cols` scale columns
 *  (K/16 for nvfp4, K/32 for mxfp8): ceil(M/128)*128 * ceil(scale_cols/4)*4. 0 on bad input. */
SK_API size_t sk_swizzled_scale_bytes(int64_t m, int64_t scale_cols);

/* ---- quantization.nvfp4 ----------------------------------------------------------------- */

/** Whether quantization.nvfp4 runs on `arch` (sm_89 and newer; the SM120 path on sm_120a/121a).
 *  Needs no GPU. Returns 1 or 0 (0 also for a malformed arch). */
SK_API int sk_nvfp4_is_supported(const char *arch);

/** Validate caps and resolve every kernel the plan may launch (compiles on first use, then
 *  loads them: needs a GPU; sk-warm prebuilds the same kernels without one).
 *  Errors: SK_ERR_INVALID_ARGUMENT (caps), SK_ERR_UNSUPPORTED (arch/path), resolution errors
 *  (SK_ERR_COMPILE, SK_ERR_KERNEL_RESOLUTION_FROZEN, SK_ERR_NO_DEVICE, ...).
 *  @param plan receives a plan owned by the caller; free with sk_quant_plan_destroy. */
SK_API sk_status sk_nvfp4_plan_create(const sk_quant_caps *caps, sk_quant_plan **plan);

/** Device scratch the plan needs (the amax partials when the global scale is computed). */
SK_API sk_status sk_quant_scratch_spec(const sk_quant_plan *plan, sk_scratch_spec *spec);

/** Bind tensors (views only; never allocates or resolves).
 *  @param x               bf16/fp16 [M, K], 1 <= M <= max_m, contiguous, 16-byte aligned
 *  @param values          uint8 [M, K/2], 4-byte aligned
 *  @param scales_swizzled uint8 [sk_swizzled_scale_bytes(M, K/16)] when the layout includes it,
 *                         else NULL; 4-byte aligned
 *  @param scales_rows     uint8 [M, K/16] when the layout includes it, else NULL
 *  @param global_scale    fp32 [1]: input (GIVEN) or output (COMPUTED)
 *  @param scratch         device memory of scratch_spec bytes, 256-byte aligned (NULL if 0)
 *  @param out             receives the binding (a plain value) */
SK_API sk_status sk_nvfp4_bind(const sk_quant_plan *plan, const DLTensor *x, const DLTensor *values,
                               const DLTensor *scales_swizzled, const DLTensor *scales_rows,
                               const DLTensor *global_scale, void *scratch, size_t scratch_bytes,
                               sk_binding *out);

/* ---- quantization.mxfp8 ----------------------------------------------------------------- */

/** Whether quantization.mxfp8 runs on `arch` (sm_89 and newer). Needs no GPU. */
SK_API int sk_mxfp8_is_supported(const char *arch);

/** As sk_nvfp4_plan_create; caps->global_scale must be SK_GLOBAL_SCALE_GIVEN (unused). */
SK_API sk_status sk_mxfp8_plan_create(const sk_quant_caps *caps, sk_quant_plan **plan);

/** Bind tensors: x [M, K] bf16/fp16; values uint8 [M, K] (8-byte aligned); scales_swizzled
 *  uint8 [sk_swizzled_scale_bytes(M, K/32)] or NULL; scales_rows uint8 [M, K/32] or NULL.
 *  mxfp8 needs no scratch (pass NULL, 0). */
SK_API sk_status sk_mxfp8_bind(const sk_quant_plan *plan, const DLTensor *x, const DLTensor *values,
                               const DLTensor *scales_swizzled, const DLTensor *scales_rows,
                               void *scratch, size_t scratch_bytes, sk_binding *out);

/* ---- both -------------------------------------------------------------------------------- */

/** Launch on `stream` (a CUstream / cudaStream_t; NULL = legacy default stream): one kernel, or
 *  two for a computed global scale over more than 32768 elements. No allocation, no sync, no
 *  compile: safe inside CUDA graph capture and after a freeze. */
SK_API sk_status sk_quant_run(const sk_quant_plan *plan, const sk_binding *binding, void *stream);

/** Free a plan (NULL is a no-op). Kernels stay resolved in the process table. */
SK_API void sk_quant_plan_destroy(sk_quant_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_QUANTIZATION_H */
