/* CPU references of moe.fused_moe / moe.ep_moe (ops/moe/moe.md), test code only (built into
 * build/lib/libskref.a). Weights are read in the prepared layout of ops/moe/plan.cuh. */
#ifndef SKREF_MOE_H
#define SKREF_MOE_H
#include <stddef.h>
#include <stdint.h>

#include "common/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct skref_moe_weights {
  int wfmt, act;  /* SK_MOE_WFMT_*, SK_MOE_ACT_* */
  int e, k, n;    /* local experts, hidden, intermediate (unpadded) */
  const uint8_t *w1_codes, *w1_scales, *w2_codes, *w2_scales; /* prepared layout, [E] strides */
  const float *w1_gs, *w2_gs; /* NVFP4 weight global scales [E] (dequant multipliers); NULL = 1 */
  const float *a1_gs, *a2_gs; /* W4A4 activation global scales [E] (quantizer multipliers) */
} skref_moe_weights;

typedef struct skref_moe_routes {
  int m, topk;
  const int64_t *ids;      /* [m * topk] */
  const float *weights;    /* [m * topk] */
  int e_global;            /* ids are valid in [0, e_global) */
  const int32_t *expert_map; /* [e_global]: local id or -1; NULL = identity (e_global == e) */
  int apply_on_input;      /* the router weight scales the input (FC1) instead of the output */
} skref_moe_routes;

typedef struct skref_moe_act_params {
  float limit, alpha, beta; /* clamp limit (+inf: none), SwiGLU-OAI alpha and beta */
} skref_moe_act_params;

/* Local expert of route r, or -1 (skipped); ORs SK_MOE_ERR_* bits into *err. */
int skref_moe_local_expert(const skref_moe_routes *rt, int e_local, size_t r, unsigned *err);

/* Dequantized prepared weights (double): W1 of expert e as [R1p, Kp] (code x block scale x
 * w1_gs), W2 as [K, Np]. with_gs 0 leaves out the global scale (the W4A4 trace's form). */
void skref_moe_dequant_w1(const skref_moe_weights *w, int e, int with_gs, double *out);
void skref_moe_dequant_w2(const skref_moe_weights *w, int e, int with_gs, double *out);

/* W4A16: out[t, c] = sum_j w_j * sum_i W2[c, i] * inter_j[i], inter = bf16(act(W1 x)), computed
 * in double with the intermediate rounded to BF16 (the only rounding besides the caller's final
 * one). apply_on_input: the FC1 output is multiplied by w_j (= W1 (w_j x)) and the combine
 * weight is 1. x: BF16 bits [m, K]. out: double [m, K]. inter_out (optional): BF16 bits
 * [m * topk][Np] (0 for skipped routes). Returns the error bits. */
unsigned skref_moe_w4a16(const skref_moe_weights *w, const skref_moe_routes *rt, const skref_moe_act_params *ap,
                         const uint16_t *x, double *out, uint16_t *inter_out);

/* The exact NVFP4 (W4A4) trace of the kernels, per route r = (t, j) of a local expert e:
 *   xq    = NVFP4(x_t) with gs = a1_gs[e] over Kp (zero padding; apply_on_input: of fp32(x_t * w_j)),
 *           the quantization.nvfp4 rounding (skref_nvfp4_quantize_block)
 *   h     = fp32(fp32(sum_k W1q[row, k] * xq[k]) * alpha1), alpha1 = fp32(w1_gs[e] / a1_gs[e]);
 *           W1q and xq are code x block scale (no global scales); the sum is exact, rounded once
 *   inter = bf16(sk_moe_act(act, h_gate, h_up)) (moe/act.cuh, fp32)
 *   iq    = NVFP4(inter) with gs = a2_gs[e] over Np
 *   down  = fp32(fp32(sum_i W2q[c, i] * iq[i]) * alpha2), alpha2 = fp32(w2_gs[e] / a2_gs[e])
 *   out_t = bf16(((0 + fp32(w_0 down_0)) + fp32(w_1 down_1)) + ...) in fp32, j ascending over the
 *           routes kept (w = 1 with apply_on_input)
 * out: BF16 bits [m, K]. *inexact (optional) counts the dot products whose exact value an fp32
 * accumulation in some order could miss (sum |terms| >= 2^24 x the terms' common grid): the GPU
 * matches the trace bit for bit when it is 0. Returns the error bits. */
unsigned skref_moe_nvfp4_trace(const skref_moe_weights *w, const skref_moe_routes *rt, const skref_moe_act_params *ap,
                               const uint16_t *x, uint16_t *out, long long *inexact);

/* route_topk over fp32 logits [m, E]: per token the k largest (ties to the highest id), mode
 * SK_MOE_TOPK_*; weights in fp32 with sk_moe_expf (the kernel's operations and order). */
void skref_moe_route_topk(const float *logits, int m, int e, int k, int mode, int32_t *ids, float *weights);

/* Random prepared weights: codes uniform bytes over the real rows / columns (zero padding),
 * block scales: NVFP4 scale_mode 0 uniform in [1/32, 0.28] (E4M3 RN), 1 from {0.25, 0.375, 0.5,
 * 0.75} (few significant bits: exact-trace tests); MXFP4 UE8M0 in [119, 127]. Padding scales 1.0.
 * Global scales (when the pointers are non-NULL): w*_gs uniform in [0.5, 2], a*_gs uniform in
 * [0.5, 2] x `a_gs_base`. */
void skref_moe_random_weights(skref_rng *rng, int wfmt, int act, int e, int n, int k, int scale_mode, uint8_t *w1c,
                              uint8_t *w1s, uint8_t *w2c, uint8_t *w2s, float *w1_gs, float *w2_gs, float *a1_gs,
                              float *a2_gs, float a_gs_base);

/* Row-mean cosine (rows of `cols`; two zero rows count 1) and max |a - b| of BF16 bits vs double. */
double skref_moe_cosine(const uint16_t *got, const double *ref, size_t rows, size_t cols, double *max_abs);

#ifdef __cplusplus
}
#endif
#endif
