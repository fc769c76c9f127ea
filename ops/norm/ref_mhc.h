/*
 * ops/norm/ref_mhc.h - double-precision CPU reference of norm.mhc (DeepSeek-V4 hyper-connection
 * residual: mix-back "post", collapse "pre" with Sinkhorn mixing and an optional fused RMSNorm).
 * The math, shapes and rounding points are specified in ops/norm/norm.mhc.md.
 *
 * Conventions: bf16 tensors are passed as their uint16_t bit patterns; fp32 parameters as float;
 * every result is returned in double, *before* its final bf16 rounding, so a test can measure the
 * GPU's error exactly; skref_mhc_round_bf16() rounds such a result the way the kernels store it.
 * Intermediate rounding points that the contract defines (the bf16 residual_out feeding the pre,
 * y_pre before the norm) are reproduced. All tensors are dense row-major. T = 0 is allowed.
 */
#ifndef SK_TESTS_REF_MHC_H
#define SK_TESTS_REF_MHC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  SKREF_MHC_STREAMS = 4,     /* residual streams (hc_mult) */
  SKREF_MHC_MIXES = 24,      /* (2 + streams) * streams: pre [0,4), post [4,8), comb [8,24) */
  SKREF_MHC_HIDDEN_ALIGN = 256,
};

/** Which RMSNorm weight, if any, is fused into y. */
typedef enum skref_mhc_norm_kind {
  SKREF_MHC_NORM_NONE = 0,
  SKREF_MHC_NORM_BF16 = 1, /* norm_weight points to uint16_t[hidden] (bf16 bits) */
  SKREF_MHC_NORM_F32 = 2,  /* norm_weight points to float[hidden] */
} skref_mhc_norm_kind;

/** Scalars and parameters shared by the pre half of every entry point. */
typedef struct skref_mhc_config {
  int hidden;          /* H, > 0 (the kernels need a multiple of 256; the reference does not) */
  float rms_eps;       /* eps of the RMS over the 4H flattened streams */
  float hc_eps;        /* eps of the pre gate and of every Sinkhorn denominator */
  int sinkhorn_iters;  /* >= 1; values < 1 act as 1 (first column step only) */
  const float *hc_scale; /* [3] */
  const float *hc_base;  /* [24] */
  skref_mhc_norm_kind norm_kind;
  const void *norm_weight; /* [hidden], type per norm_kind; ignored for SKREF_MHC_NORM_NONE */
  float norm_eps;
} skref_mhc_config;

/** Per-token coefficients of the pre half (all double, unrounded). */
typedef struct skref_mhc_coeffs {
  double inv_rms;     /* 1/sqrt(mean over 4H of r^2 + rms_eps) */
  double mixes[24];   /* projection * inv_rms */
  double pre[4];      /* sigmoid(...) + hc_eps */
  double post[4];     /* 2 * sigmoid(...) */
  double comb[16];    /* row-major comb[i][j], after Sinkhorn */
  double norm_scale;  /* 1/sqrt(mean_h y_raw^2 + norm_eps); 1 when no norm is fused */
} skref_mhc_coeffs;

/* ---- bf16 helpers ------------------------------------------------------------------------ */

/** bf16 bits -> double (exact). */
double skref_mhc_bf16_to_double(uint16_t bits);
/** double -> bf16 bits, round to nearest even (NaN stays NaN, overflow goes to +-inf). */
uint16_t skref_mhc_double_to_bf16(double value);
/** Round n doubles to bf16 bits (the kernels' store). */
void skref_mhc_round_bf16(const double *in, uint16_t *out, size_t n);
/** One bf16 ulp at the magnitude of v (spacing of bf16 numbers around v; 2^-133 below the
 *  normal range). Used to state tolerances. */
double skref_mhc_bf16_ulp(double v);

/* ---- building blocks --------------------------------------------------------------------- */

/** Gates and Sinkhorn from the 24 scaled mixes (steps 3-4 of the contract): pre, post, comb. */
void skref_mhc_split_sinkhorn(const double mixes[24], const float hc_scale[3], const float hc_base[24],
                              double hc_eps, int sinkhorn_iters, double pre[4], double post[4],
                              double comb[16]);

/* ---- entry points ------------------------------------------------------------------------ */

/** run_post (mix-back): out[t][j][h] = post[t][j]*x[t][h] + sum_i comb[t][i][j]*residual[t][i][h].
 *  x: bf16 [T,H]; residual: bf16 [T,4,H]; post: fp32 [T,4]; comb: fp32 [T,4,4];
 *  out: double [T,4,H] (unrounded). */
void skref_mhc_post(int tokens, int hidden, const uint16_t *x, const uint16_t *residual, const float *post,
                    const float *comb, double *out);

/** The pre half on 4 given bf16 streams (what run_post_pre does after its mix-back).
 *  streams: bf16 [T,4,H]; fn: fp32 [24, 4H].
 *  Outputs (any may be NULL): post double [T,4], comb double [T,4,4], y double [T,H] (the final
 *  value before its bf16 rounding), coeffs [T]. */
void skref_mhc_pre_streams(const skref_mhc_config *cfg, int tokens, const uint16_t *streams, const float *fn,
                           double *post, double *comb, double *y, skref_mhc_coeffs *coeffs);

/** run_pre (first layer): the pre half on the broadcast streams r[s] = x, with the stream-summed
 *  projection fn_pre [24, H] (fn_pre[m][h] = sum_s fn[m][s*H + h]).
 *  residual_out: bf16 [T,4,H] (exact copies of x; may be NULL); other outputs as above. */
void skref_mhc_pre(const skref_mhc_config *cfg, int tokens, const uint16_t *x, const float *fn_pre,
                   uint16_t *residual_out, double *post, double *comb, double *y, skref_mhc_coeffs *coeffs);

/** run_post_pre: residual_out = post(x, residual, prev_post, prev_comb), then the pre half on the
 *  bf16-rounded residual_out.
 *  residual_out_exact: double [T,4,H] (unrounded mix-back; may be NULL);
 *  residual_out: bf16 [T,4,H] (the rounded streams the pre half used; may be NULL);
 *  other outputs as skref_mhc_pre_streams. */
void skref_mhc_post_pre(const skref_mhc_config *cfg, int tokens, const uint16_t *x, const uint16_t *residual,
                        const float *prev_post, const float *prev_comb, const float *fn,
                        double *residual_out_exact, uint16_t *residual_out, double *post, double *comb,
                        double *y, skref_mhc_coeffs *coeffs);

/** fn [24, 4H] -> fn_pre [24, H], summing the 4 stream blocks in double and rounding to fp32
 *  (what a caller does once at load time for run_pre). */
void skref_mhc_sum_fn_streams(int hidden, const float *fn, float *fn_pre);

/* ---- tolerances (ops/norm/norm.mhc.md, "Tolerances") -------------------------------------- */

/** Magnitude of the terms of each mix-back output: |post_j*x| + sum_i |comb_ij*residual_i|,
 *  double [T,4,H]. An fp32 sum of these terms is off by a few 2^-24 of this, which is many bf16
 *  ulps of the result when the terms cancel. */
void skref_mhc_post_magnitude(int tokens, int hidden, const uint16_t *x, const uint16_t *residual, const float *post,
                              const float *comb, double *magnitude);

/** Magnitude of the terms of each y element: sum_i |pre_i * r_i[h]|, times norm_scale*|w[h]| when
 *  a norm is fused. streams: the bf16 [T,4,H] the pre half read (run_pre: 4 copies of x);
 *  coeffs: from the same reference call. double [T,H]. */
void skref_mhc_y_magnitude(const skref_mhc_config *cfg, int tokens, const uint16_t *streams,
                           const skref_mhc_coeffs *coeffs, double *magnitude);

/** |value(gpu) - ref| <= ulps * ulp_bf16(ref) + magnitude_rel * magnitude (NaN never passes).
 *  Recommended: residual_out/out: ulps 1, magnitude_rel 2^-21 with skref_mhc_post_magnitude;
 *  y: ulps 1 (no norm) or 3 (norm), magnitude_rel 4e-6 with skref_mhc_y_magnitude. */
int skref_mhc_bf16_close(uint16_t gpu, double ref, double magnitude, double ulps, double magnitude_rel);

/** post/comb (fp32): |gpu - ref| <= 2e-6 + 1e-5*|ref|. */
int skref_mhc_f32_close(float gpu, double ref);

/** Scratch bytes of the kernels' split-K partials: max_tokens * (hidden/256) * 36 * 4. */
size_t skref_mhc_scratch_bytes(int max_tokens, int hidden);

#ifdef __cplusplus
}
#endif
#endif /* SK_TESTS_REF_MHC_H */
