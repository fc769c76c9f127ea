/* ops/moe/prep.h - one-time host-side preparation of MoE expert weights (host memory in, host
 * memory out) into the layout of the moe kernels (ops/moe/moe.md, "Weights"):
 *   W1 [E, R1p, Kp/2] E2M1 (low nibble = even column), rows [up; gate] (gated) padded from N to
 *      Np = roundup(N, 128) per half, columns padded from K to Kp = roundup(K, 128);
 *      scales per expert in the 128x4 swizzled layout of [R1p, Kp/vec] (sk_moe_w1_scale_bytes).
 *   W2 [E, K, Np/2], scales per expert swizzled [K, Np/vec].
 * Padding holds zero codes and 1.0 scales (E4M3 0x38, UE8M0 127). NVFP4 scales are UE4M3 (the
 * sign bit is ignored by the kernels); per-expert fp32 global scales pass through unchanged.
 * Plain C11; no runtime state (returns sk_status without setting the thread's error message). */
#ifndef SK_MOE_PREP_H
#define SK_MOE_PREP_H
#include <stddef.h>
#include <stdint.h>

#include "sparkinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scale layout of the checkpoint's block scales. */
#define SK_MOE_SRC_SCALES_SWIZZLED 0 /* 128x4 swizzled per expert, for [R, K/vec] */
#define SK_MOE_SRC_SCALES_ROWS 1     /* row-major [R, K/vec] per expert (ModelOpt / HF) */

/* Per-expert byte sizes of the prepared tensors. wfmt: SK_MOE_WFMT_*, act: SK_MOE_ACT_*. */
typedef struct sk_moe_prepared_sizes {
  size_t w1_codes, w1_scales, w2_codes, w2_scales;
} sk_moe_prepared_sizes;
sk_status sk_moe_prepared_sizes_of(int wfmt, int act, int64_t n, int64_t k, sk_moe_prepared_sizes *out);

/* W1: codes [E, R1, K/2] with R1 = 2N (gated, rows in `order`, SK_MOE_W1_*) or N (relu2);
 * scales per expert in `src_scales` layout. Writes the prepared codes and scales (sizes from
 * sk_moe_prepared_sizes_of, times E). MXFP4 weights for the W4A16 kernels need UE8M0 codes in
 * [10, 136] (block scales 2^-117 .. 2^9: the BF16 dequantization is exact there, moe.md): any
 * other code gives SK_ERR_UNSUPPORTED. Errors: SK_ERR_INVALID_ARGUMENT (NULL, N % 16 (NVFP4) or
 * % 32 (MXFP4), K % 32, E < 1). */
sk_status sk_moe_prepare_w1(int wfmt, int act, int order, int src_scales, int64_t e, int64_t n, int64_t k,
                            const uint8_t *codes, const uint8_t *scales, uint8_t *out_codes, uint8_t *out_scales);
/* W2: codes [E, K, N/2], scales per expert for [K, N/vec]. */
sk_status sk_moe_prepare_w2(int wfmt, int src_scales, int64_t e, int64_t n, int64_t k, const uint8_t *codes,
                            const uint8_t *scales, uint8_t *out_codes, uint8_t *out_scales);
/* The inverse of sk_moe_prepare_w1 for one expert (row-major source scales out): the checkpoint
 * layout in `order`, for round-trip checks and for exporting prepared weights. */
sk_status sk_moe_unprepare_w1(int wfmt, int act, int order, int64_t n, int64_t k, const uint8_t *prep_codes,
                              const uint8_t *prep_scales, uint8_t *codes, uint8_t *scales_rows);

#ifdef __cplusplus
}
#endif
#endif
