/*
 * sparkinfer/moe.h - moe.fused_moe and moe.ep_moe: the routed-expert FFN over FP4 experts,
 *   out[t] = sum_j w[t,j] * FC2_e(act(FC1_e(x_t))),  e = topk_ids[t,j],
 * planned ops (sparkinfer/op.h). Math, weight layouts and preparation, recipes, regimes, scratch
 * and tolerances: ops/moe/moe.md.
 *
 * Weights are prepared once on the host (ops/moe/prep.h: sk_moe_prepare_w1 / _w2: padding to
 * multiples of 128, the W1 row order [up; gate], swizzled block scales) and uploaded. Recipes:
 * W4A16 (BF16 activations, FP4 weights dequantised in the kernel; portable) and NVFP4 W4A4
 * (activations quantised to NVFP4 with quantization.nvfp4's rounding; block-scaled mma.sync on
 * sm_120a/121a, a portable path elsewhere). A run of m <= 8 tokens takes the micro regime (each
 * active expert's weight bytes read once), larger m the grouped one (routes sorted and packed by
 * expert on the device, FC1 -> act -> FC2 -> combine). No host synchronisation; the scratch is
 * zeroed once and every run leaves its counters at zero, so a captured run replays with new
 * routes. An expert id outside [0, E_global) (or an expert_map entry outside [-1, E)) skips the
 * route and sets a bit read with sk_moe_error_flags.
 *
 * Entry "run", tensors in order (1 <= M <= max_tokens):
 *   x             [M, K] bf16, 16-byte aligned rows
 *   topk_ids      [M, TOPK] int32 or int64 (caps.ids_int64): input; with caps.routing != GIVEN
 *                 the op writes int32 ids here (then caps.ids_int64 must be 0)
 *   topk_weights  [M, TOPK] fp32: input, or written with the ids
 *   router_logits [M, EG] fp32: only with caps.routing != GIVEN (else NULL)
 *   w1_codes      [E, R1P, KP/2] u8: prepared W1 (R1P = 2 Np gated, Np ungated; Np, KP the
 *                 padded N, K)
 *   w1_scales     [E, W1SB] u8: prepared W1 block scales (W1SB bytes per expert, prep.h)
 *   w2_codes      [E, K, NP/2] u8
 *   w2_scales     [E, W2SB] u8
 *   w1_gs, w2_gs  [E] fp32: NVFP4 weight global scales (dequant multipliers); optional (1.0),
 *                 absent for MXFP4
 *   a1_gs, a2_gs  [E] fp32: W4A4 activation global scales; absent for W4A16
 *   expert_map    [EG] int32: moe.ep_moe only (global id -> local id or -1); absent for fused
 *   out           [M, K] bf16 (ep_moe: the rank's partial, zero where no local route)
 */
#ifndef SPARKINFER_MOE_H
#define SPARKINFER_MOE_H

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sk_moe_recipe {
  SK_MOE_RECIPE_W4A16 = 0, /**< BF16 activations x FP4 weights (default) */
  SK_MOE_RECIPE_NVFP4 = 1, /**< NVFP4 activations x NVFP4 weights (W4A4) */
} sk_moe_recipe;

typedef enum sk_moe_weight_format {
  SK_MOE_WEIGHTS_NVFP4 = 0, /**< E2M1 + E4M3 per 16 + fp32 global scale per expert (default) */
  SK_MOE_WEIGHTS_MXFP4 = 1, /**< E2M1 + UE8M0 per 32 (gpt-oss, DeepSeek-V4-Flash) */
} sk_moe_weight_format;

typedef enum sk_moe_activation {
  SK_MOE_ACTIVATION_SILU = 0,  /**< silu(g) * u, optional clamp (default) */
  SK_MOE_ACTIVATION_RELU2 = 1,      /**< relu(h)^2, ungated (W1 has N rows) */
  SK_MOE_ACTIVATION_SWIGLU_OAI = 2, /**< gpt-oss: g * sigmoid(alpha g) * (u + beta), clamped */
} sk_moe_activation;

typedef enum sk_moe_routing {
  SK_MOE_ROUTES_GIVEN = 0,       /**< the caller's topk_ids / topk_weights (default) */
  SK_MOE_ROUTES_TOPK = 1,        /**< top-k over router_logits, weights = the chosen logits */
  SK_MOE_ROUTES_TOPK_RENORM = 2, /**< weights = softmax over the k chosen logits */
  SK_MOE_ROUTES_SOFTMAX_TOPK = 3,/**< weights = softmax over all logits, at the chosen ids */
} sk_moe_routing;

/** Caps of moe.fused_moe and moe.ep_moe (versioned: SK_MOE_CAPS_INIT, then set fields). */
typedef struct sk_moe_caps {
  size_t struct_size;             /**< sizeof(sk_moe_caps) */
  sk_moe_recipe recipe;
  sk_moe_weight_format weights;   /**< NVFP4 W4A4 needs NVFP4 weights */
  sk_moe_activation activation;
  int64_t num_experts;            /**< E: experts whose weights the plan takes (1..1024) */
  int64_t num_global_experts;     /**< EG: the ids' range; ep_moe: the global count; fused: 0 = E */
  int64_t hidden;                 /**< K: a multiple of 32 */
  int64_t intermediate;           /**< N per rank: a multiple of 16 (32 for MXFP4) */
  int topk;                       /**< routes per token, 1..32 */
  int64_t max_tokens;             /**< most tokens per run; sizes the scratch */
  int ids_int64;                  /**< topk_ids are int64 (given routes only) */
  sk_moe_routing routing;
  int apply_router_weight_on_input; /**< the router weight scales FC1's input, not the output */
  int deterministic;              /**< 1: fixed-order combine (scratch grows by M x TOPK x K fp32);
                                       0 (default): fp32 atomic adds */
  float limit;                    /**< clamp; 0 (default): none for SiLU, 7.0 for SwiGLU-OAI */
  float alpha, beta;              /**< SwiGLU-OAI (defaults 1.702, 1.0) */
  const char *arch;               /**< NULL = the current device's */
} sk_moe_caps;
#define SK_MOE_CAPS_INIT                                                                           \
  { sizeof(sk_moe_caps), SK_MOE_RECIPE_W4A16, SK_MOE_WEIGHTS_NVFP4, SK_MOE_ACTIVATION_SILU, 0, 0, 0, 0, 0, 0, 0, \
    SK_MOE_ROUTES_GIVEN, 0, 0, 0.0f, 1.702f, 1.0f, NULL }

enum {
  SK_MOE_FLAG_EXPERT_ID = 1,  /**< a topk id outside [0, EG): the route was skipped */
  SK_MOE_FLAG_EXPERT_MAP = 2, /**< an expert_map entry outside [-1, E): the route was skipped */
};

/** The error bits (SK_MOE_FLAG_*) of the last run of `binding`: waits for `stream`, then reads the
 *  word from the binding's scratch (a 4-byte device-to-host copy); 0 when every route was valid.
 *  Not for use inside graph capture. Errors: SK_ERR_INVALID_ARGUMENT (not a bound moe binding),
 *  SK_ERR_CUDA. Thread safety: as sk_run for the binding. */
SK_API sk_status sk_moe_error_flags(const sk_binding *binding, void *stream, uint32_t *flags);

/* ---- weight preparation (host memory in, host memory out; once per model) -----------------------
 * Into the kernels' layout: W1 [E, R1P, KP/2] E2M1 (low nibble = even column), rows [up; gate]
 * (gated) each padded from N to NP = roundup(N, 128), columns padded from K to KP = roundup(K, 128);
 * W2 [E, K, NP/2]; block scales per expert in the 128x4 swizzled layout. Padding holds zero codes
 * and 1.0 scales. Plain host functions (no GPU, no sk_init): thread-safe for distinct outputs; the
 * caller owns every buffer. Errors set the thread's message (sk_last_error_message) naming the
 * argument; outputs may then be partly written. */
typedef enum sk_moe_w1_order {
  SK_MOE_W1_ORDER_UP_GATE = 0,     /**< [up; gate] (b12x "w13") */
  SK_MOE_W1_ORDER_GATE_UP = 1,     /**< [gate; up] (vLLM / FlashInfer checkpoints): flipped once */
  SK_MOE_W1_ORDER_INTERLEAVED = 2, /**< gate and up rows alternate, gate first (gpt-oss) */
} sk_moe_w1_order;
typedef enum sk_moe_scale_source {
  SK_MOE_SCALES_SWIZZLED = 0, /**< 128x4 swizzled per expert, for [R, K/vec] */
  SK_MOE_SCALES_ROWS = 1,     /**< row-major [R, K/vec] per expert (ModelOpt / HF) */
} sk_moe_scale_source;
/** Per-expert byte sizes of the prepared tensors. */
typedef struct sk_moe_prepared_sizes {
  size_t w1_codes, w1_scales, w2_codes, w2_scales;
} sk_moe_prepared_sizes;
/** Fills *out for (weights: sk_moe_weight_format, activation: sk_moe_activation, N, K): allocate
 *  E times each. Errors: SK_ERR_INVALID_ARGUMENT (NULL out, unknown format or activation, N not a
 *  positive multiple of 16 (NVFP4) / 32 (MXFP4), K not a positive multiple of 32, either > 2^20). */
SK_API sk_status sk_moe_prepared_sizes_of(int weights, int activation, int64_t n, int64_t k, sk_moe_prepared_sizes *out);
/** W1: codes [E, R1, K/2] (R1 = 2N gated in `order`, N for relu2), scales per expert in
 *  `src_scales` layout -> the prepared codes and scales (sizes x E). MXFP4 weights for W4A16 need
 *  UE8M0 codes in [10, 136] (else SK_ERR_UNSUPPORTED). Errors: SK_ERR_INVALID_ARGUMENT (NULL,
 *  N % 16 (NVFP4) or % 32 (MXFP4), K % 32, E < 1). */
SK_API sk_status sk_moe_prepare_w1(int weights, int activation, int order, int src_scales, int64_t e, int64_t n, int64_t k,
                                   const uint8_t *codes, const uint8_t *scales, uint8_t *out_codes, uint8_t *out_scales);
/** W2: codes [E, K, N/2], scales per expert for [K, N/vec] in `src_scales` layout -> the prepared
 *  codes and scales (sizes x E). Errors as sk_moe_prepare_w1's. */
SK_API sk_status sk_moe_prepare_w2(int weights, int src_scales, int64_t e, int64_t n, int64_t k, const uint8_t *codes,
                                   const uint8_t *scales, uint8_t *out_codes, uint8_t *out_scales);
/** The inverse of sk_moe_prepare_w1 for one expert: the checkpoint layout in `order` (codes
 *  [R1, K/2]) with row-major scales [R1, K/vec]; for round-trip checks and exports. Errors:
 *  SK_ERR_INVALID_ARGUMENT (NULL, dims as sk_moe_prepared_sizes_of, unknown order). */
SK_API sk_status sk_moe_unprepare_w1(int weights, int activation, int order, int64_t n, int64_t k,
                                     const uint8_t *prep_codes, const uint8_t *prep_scales, uint8_t *codes,
                                     uint8_t *scales_rows);

static inline sk_status sk_moe_fused_plan_create(const sk_moe_caps *caps, sk_plan **plan) {
  return sk_plan_create("moe.fused_moe", caps, plan);
}
static inline sk_status sk_moe_ep_plan_create(const sk_moe_caps *caps, sk_plan **plan) {
  return sk_plan_create("moe.ep_moe", caps, plan);
}

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_MOE_H */
