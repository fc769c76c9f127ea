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

#include "sparkinfer/moe.h" /* the declarations (public: weight preparation is the caller's step) */

/* The source scale layouts and W1 orders of sk_moe_prepare_w1 / _w2 (sparkinfer/moe.h's
 * sk_moe_scale_source and sk_moe_w1_order). */
#define SK_MOE_SRC_SCALES_SWIZZLED SK_MOE_SCALES_SWIZZLED
#define SK_MOE_SRC_SCALES_ROWS SK_MOE_SCALES_ROWS

#endif
