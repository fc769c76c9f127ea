/*
 * sparkinfer/norm.h - norm.mhc: fused RMSNorm + hyper-connection residual (DeepSeek-V4 mHC),
 * with 4 residual streams and 24 mixes (pre 4, post 4, comb 4x4). Exact math, shapes, epsilons
 * and tolerances: ops/norm/norm.mhc.md.
 *
 * Entry points (one plan serves all three):
 *  - pre:      streams = 4 copies of x; y, post [T,4], comb [T,4,4] from the streams
 *  - post:     out[j] = bf16(post[j]*x + sum_i comb[i][j]*residual[i])
 *  - post_pre: post, then pre on its bf16 output (returns residual, post, comb, y)
 * BF16 activations; any hidden size that is a multiple of 256 (upstream: 4096 and 7168 only).
 * Deterministic: no floating-point atomics (decode signals between CTAs with integer counters);
 * a token's results depend only on which partial variant ran (by T: decode, mid-size, and for
 * pre the split schedule of large T; the crossovers are read at plan time, docs/env.md).
 *
 * Life cycle (sparkinfer/op.h): plan_create -> scratch_spec -> bind_* -> run -> plan_destroy.
 * Thread safety: plans are immutable; bind and run may be called concurrently.
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
  int64_t hidden;                   /**< H: a positive multiple of 256, at most 65536 */
  int64_t max_tokens;               /**< most tokens T one run takes (>= 1); sizes the scratch */
  sk_mhc_norm_weight norm_weight;   /**< which norm weight bind takes (or none) */
  int sinkhorn_iters;               /**< >= 1 (upstream default 20) */
  float rms_eps;                    /**< > 0, e.g. 1e-6 */
  float hc_eps;                     /**< >= 0, e.g. 1e-6 */
  float norm_eps;                   /**< > 0 when a norm weight is fused */
  const char *arch;                 /**< NULL = the current device's */
} sk_mhc_caps;

typedef struct sk_mhc_plan sk_mhc_plan;

/** Whether norm.mhc runs on `arch` (sm_80 and newer). Needs no GPU. */
SK_API int sk_mhc_is_supported(const char *arch);

/** Validate caps and resolve the plan's kernels (one set per hidden size and norm-weight type).
 *  Reads the SPARKINFER_MHC_* tuning variables once, here (docs/env.md); those that pick a kernel
 *  variant must match the ones a prebuilt cache was warmed with. *plan is set on success (free it
 *  with sk_mhc_plan_destroy), NULL otherwise.
 *  Errors: SK_ERR_INVALID_ARGUMENT (caps, or a malformed variable or one whose kernel shape does
 *  not fit the target's shared memory), SK_ERR_UNSUPPORTED, resolution errors (incl.
 *  SK_ERR_KERNEL_RESOLUTION_FROZEN when a kernel would compile after the freeze). */
SK_API sk_status sk_mhc_plan_create(const sk_mhc_caps *caps, sk_mhc_plan **plan);

/** Scratch (needed by pre and post_pre): fp32 partials, max_tokens * (H/256) * 144 bytes, then
 *  from the next 1024-byte boundary one u32 arrival counter per token, max_tokens * 4 bytes (+
 *  alignment slack); spec->zero_once is 1. The caller zeroes the scratch ONCE after allocating it (cudaMemset 0): the
 *  fused decode launch (T <= the scalar crossover) needs its counters at zero, and every run
 *  leaves them at zero. The partial rows hold nothing between runs, but the counters must keep
 *  their zeros: another op may share the scratch only if it leaves the counter region untouched.
 *  A run that finds a counter not at zero fails the launch (the kernel traps) rather than
 *  returning wrong results. */
SK_API sk_status sk_mhc_scratch_spec(const sk_mhc_plan *plan, sk_scratch_spec *spec);

/** Bind run_post. x bf16 [T,H]; residual bf16 [T,4,H]; post fp32 [T,4]; comb fp32 [T,4,4];
 *  out bf16 [T,4,H]. 1 <= T <= max_tokens. All 16-byte aligned, contiguous. */
SK_API sk_status sk_mhc_bind_post(const sk_mhc_plan *plan, const DLTensor *x, const DLTensor *residual,
                                  const DLTensor *post, const DLTensor *comb, const DLTensor *out,
                                  sk_binding *binding);

/** Bind run_pre. x bf16 [T,H]; fn_pre fp32 [24,H] (fn summed over its 4 stream blocks);
 *  hc_scale fp32 [3]; hc_base fp32 [24]; norm_weight [H] of the plan's type, or NULL for
 *  SK_MHC_NORM_NONE; outputs residual_out bf16 [T,4,H], y bf16 [T,H], post fp32 [T,4],
 *  comb fp32 [T,4,4]; scratch of scratch_spec bytes. */
SK_API sk_status sk_mhc_bind_pre(const sk_mhc_plan *plan, const DLTensor *x, const DLTensor *fn_pre,
                                 const DLTensor *hc_scale, const DLTensor *hc_base, const DLTensor *norm_weight,
                                 const DLTensor *residual_out, const DLTensor *y, const DLTensor *post,
                                 const DLTensor *comb, void *scratch, size_t scratch_bytes, sk_binding *binding);

/** Bind run_post_pre. x bf16 [T,H]; residual bf16 [T,4,H]; prev_post fp32 [T,4]; prev_comb fp32
 *  [T,4,4]; fn fp32 [24,4H]; hc_scale, hc_base, norm_weight as for pre; outputs residual_out
 *  bf16 [T,4,H], y bf16 [T,H], post fp32 [T,4], comb fp32 [T,4,4]; scratch. */
SK_API sk_status sk_mhc_bind_post_pre(const sk_mhc_plan *plan, const DLTensor *x, const DLTensor *residual,
                                      const DLTensor *prev_post, const DLTensor *prev_comb, const DLTensor *fn,
                                      const DLTensor *hc_scale, const DLTensor *hc_base,
                                      const DLTensor *norm_weight, const DLTensor *residual_out,
                                      const DLTensor *y, const DLTensor *post, const DLTensor *comb,
                                      void *scratch, size_t scratch_bytes, sk_binding *binding);

/** Launch the bound entry point on `stream` (1 kernel for post and for decode-sized pre /
 *  post_pre where the device has the CTA slots, else 2). No allocation, sync or compile:
 *  safe inside CUDA graph capture and after a freeze. */
SK_API sk_status sk_mhc_run(const sk_mhc_plan *plan, const sk_binding *binding, void *stream);

/** Free a plan (NULL is a no-op). */
SK_API void sk_mhc_plan_destroy(sk_mhc_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_NORM_H */
