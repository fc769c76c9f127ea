/*
 * sparkinfer/norm.h - norm.mhc: fused RMSNorm + hyper-connection residual (DeepSeek-V4 mHC),
 * with 4 residual streams and 24 mixes (pre 4, post 4, comb 4x4). Exact math, shapes, epsilons
 * and tolerances: ops/norm/norm.mhc.md.
 *
 * Entries of one plan (sparkinfer/op.h; tensors in order, all bf16/fp32 as listed, contiguous,
 * 16-byte aligned, 1 <= T <= max_tokens):
 *  - "post":     x [T,H], residual [T,4,H], post f32 [T,4], comb f32 [T,4,4] -> out [T,4,H];
 *                out[j] = bf16(post[j]*x + sum_i comb[i][j]*residual[i])
 *  - "pre":      x [T,H], fn_pre f32 [24,H] (fn summed over its 4 stream blocks), hc_scale f32 [3],
 *                hc_base f32 [24], norm_weight [H] (caps.norm_weight's dtype, NULL for none)
 *                -> residual_out [T,4,H] (4 copies of x), y [T,H], post f32 [T,4], comb f32 [T,4,4]
 *  - "post_pre": x [T,H], residual [T,4,H], prev_post f32 [T,4], prev_comb f32 [T,4,4], fn f32
 *                [24,4H], hc_scale, hc_base, norm_weight -> residual_out, y, post, comb:
 *                post, then pre on its bf16 output.
 * Scratch (sk_plan_scratch_spec; every entry binds it, post leaves it untouched): fp32 partials,
 * max_tokens * (H/256) * 144 bytes, then one u32 arrival counter per token; zero_once is 1: zero
 * it once after allocating; every run leaves the
 * counters at zero (another op may share the scratch only if it leaves that region untouched; a
 * run that finds a counter not at zero traps rather than returning wrong results).
 * Run: 1 kernel for post and for decode-sized pre / post_pre where the device has the CTA slots,
 * else 2. BF16 activations; any hidden size that is a multiple of 256. Deterministic: no
 * floating-point atomics; a token's results depend only on which partial variant ran (by T:
 * decode, mid-size, and for pre the split schedule of large T; the crossovers are fixed at plan
 * time, docs/env.md). After bind, the binding's symbols FUSED and SPLIT (sk_binding_symbol) say
 * whether the run is one fused decode launch and whether pre takes the split schedule (post:
 * both 0).
 */
#ifndef SPARKINFER_NORM_H
#define SPARKINFER_NORM_H

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The optional RMSNorm weight fused into y. */
typedef enum sk_mhc_norm_weight {
  SK_MHC_NORM_NONE = 0, /**< y is not normalised */
  SK_MHC_NORM_BF16 = 1, /**< norm weight bf16 [H] */
  SK_MHC_NORM_FP32 = 2, /**< norm weight fp32 [H] */
} sk_mhc_norm_weight;

typedef struct sk_mhc_caps {
  size_t struct_size;               /**< sizeof(sk_mhc_caps), set by SK_MHC_CAPS_INIT */
  int64_t hidden;                   /**< H: a positive multiple of 256, at most 65536 */
  int64_t max_tokens;               /**< most tokens T one run takes (>= 1); sizes the scratch */
  sk_mhc_norm_weight norm_weight;   /**< which norm weight bind takes (or none) */
  int sinkhorn_iters;               /**< >= 1 (default 20, as upstream) */
  float rms_eps;                    /**< > 0 (default 1e-6) */
  float hc_eps;                     /**< >= 0 (default 1e-6) */
  float norm_eps;                   /**< > 0 when a norm weight is fused (default 1e-6) */
  const char *arch;                 /**< NULL = the current device's */
} sk_mhc_caps;

#define SK_MHC_CAPS_INIT { sizeof(sk_mhc_caps), 0, 1, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, NULL }

static inline sk_status sk_mhc_plan_create(const sk_mhc_caps *caps, sk_plan **plan) {
  return sk_plan_create("norm.mhc", caps, plan);
}

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_NORM_H */
