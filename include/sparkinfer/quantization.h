/*
 * sparkinfer/quantization.h - row quantizers: quantization.nvfp4 and quantization.mxfp8.
 *
 * Both take BF16 or FP16 rows x[M, K] (contiguous, 16-byte aligned) and write:
 *  - nvfp4: packed E2M1 values [M, K/2] bytes (element 2j in the LOW nibble of byte j), one E4M3
 *    scale byte per 16 values, and an fp32 global scale (given by the caller, or computed in the
 *    same op as 448*6/amax(x));
 *  - mxfp8: E4M3 values [M, K] bytes and one UE8M0 scale byte per 32 values.
 * Scales go to the 128x4 swizzled MMA layout (CUTLASS/cuBLASLt/FlashInfer: [ceil(M/128),
 * ceil(S/4), 32, 4, 4] bytes for S = K/16 or K/32 scale columns, padding written as 0), to a
 * row-major [M, S] buffer, or to both. The exact math, NaN/Inf policy and layouts:
 * ops/quantization/quantization.md.
 *
 * Life cycle: sparkinfer/op.h (sk_plan_create -> sk_plan_scratch_spec -> sk_binding_create ->
 * sk_bind -> sk_run). One entry, "quantize"; its tensors, in order:
 *   nvfp4: x [M, K] bf16|fp16 (caps.dtype), values u8 [M, K/2] (4-byte aligned),
 *          scales_swizzled u8 [pad(M,128) * pad(K/16,4)] (when caps.scales has it, else NULL),
 *          scales_rows u8 [M, K/16] (likewise), global_scale fp32 [1] (input when GIVEN, output
 *          when COMPUTED); 1 <= M <= max_m.
 *   mxfp8: x [M, K], values u8 [M, K] (8-byte aligned), scales_swizzled u8 [pad(M,128) *
 *          pad(K/32,4)], scales_rows u8 [M, K/32]; no scratch.
 * Run: one kernel, or two for nvfp4 with a computed global scale (amax partials, then quantize).
 *
 * Thread safety: as sparkinfer/op.h.
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

/** Caps of both quantizers (versioned: initialise with SK_QUANT_CAPS_INIT, then set fields). */
typedef struct sk_quant_caps {
  size_t struct_size;                /**< sizeof(sk_quant_caps), set by SK_QUANT_CAPS_INIT */
  sk_dtype dtype;                    /**< SK_DTYPE_BF16 (default) or SK_DTYPE_FP16 */
  int64_t k;                         /**< row length: nvfp4 K % 16 == 0, mxfp8 K % 32 == 0 */
  int64_t max_m;                     /**< most rows one run takes (>= 1); max_m*K <= 2^34 */
  sk_scale_layout scales;            /**< which scale tensors bind takes (default swizzled) */
  sk_global_scale_mode global_scale; /**< nvfp4 only; must be SK_GLOBAL_SCALE_GIVEN for mxfp8 */
  sk_path path;                      /**< AUTO: hardware cvt where the arch has it; PORTABLE:
                                          software conversion; SM120: needs sm_120a/sm_121a */
  const char *arch;                  /**< target ("sm_120a"); NULL = the current device's */
} sk_quant_caps;

#define SK_QUANT_CAPS_INIT                                                                                   \
  { sizeof(sk_quant_caps), SK_DTYPE_BF16, 0, 0, SK_SCALES_SWIZZLED, SK_GLOBAL_SCALE_GIVEN, SK_PATH_AUTO, NULL }

/** Bytes of the swizzled scale buffer for M rows and `scale_cols` scale columns
 *  (K/16 for nvfp4, K/32 for mxfp8): ceil(M/128)*128 * ceil(scale_cols/4)*4. 0 on bad input. */
SK_API size_t sk_swizzled_scale_bytes(int64_t m, int64_t scale_cols);

/* Typed wrappers over sparkinfer/op.h. */
static inline sk_status sk_nvfp4_plan_create(const sk_quant_caps *caps, sk_plan **plan) {
  return sk_plan_create("quantization.nvfp4", caps, plan);
}
static inline sk_status sk_mxfp8_plan_create(const sk_quant_caps *caps, sk_plan **plan) {
  return sk_plan_create("quantization.mxfp8", caps, plan);
}
/** Bind an nvfp4 binding (tensors as above; NULL for the scale layout the plan does not write). */
static inline sk_status sk_nvfp4_bind(sk_binding *b, const DLTensor *x, const DLTensor *values,
                                      const DLTensor *scales_swizzled, const DLTensor *scales_rows,
                                      const DLTensor *global_scale, void *scratch, size_t scratch_bytes) {
  const DLTensor *t[5] = {x, values, scales_swizzled, scales_rows, global_scale};
  return sk_bind(b, t, 5, scratch, scratch_bytes);
}
/** Bind an mxfp8 binding. */
static inline sk_status sk_mxfp8_bind(sk_binding *b, const DLTensor *x, const DLTensor *values,
                                      const DLTensor *scales_swizzled, const DLTensor *scales_rows) {
  const DLTensor *t[4] = {x, values, scales_swizzled, scales_rows};
  return sk_bind(b, t, 4, NULL, 0);
}

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_QUANTIZATION_H */
