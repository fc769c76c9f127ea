/* ops/norm/ref_mhc.c - double-precision reference of norm.mhc; see ref_mhc.h and ops/norm/norm.mhc.md. */
#include "norm/ref_mhc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Local bf16 helpers (static, named mhc_bf16_*): this file builds alone as build/lib/libskref_mhc.so
 * for bench/peer_mhc_torch.py, so it does not link ops/common/ref_formats.c's. */

static double mhc_bf16_to_double(uint16_t bits) {
  uint32_t u = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return (double)f;
}

/* Round-to-nearest-even from double straight to bf16 (8 significant bits), without going through
 * float: a double -> float -> bf16 path could round twice. */
static uint16_t mhc_bf16_from_double(double v) {
  if (isnan(v)) return 0x7fc0;
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  if (a == 0.0) return sign;
  if (isinf(a)) return sign | 0x7f80;
  int e;
  (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  /* bf16 normals have exponent >= -125 in frexp terms (smallest normal 2^-126 = 0.5 * 2^-125);
   * below, the spacing is fixed at 2^-133. */
  int quantum_exp = (e >= -125 ? e : -125) - 8; /* 8 significant bits: spacing 2^(e-8) */
  double q = ldexp(a, -quantum_exp);            /* exact: scaling by a power of two */
  double r = nearbyint(q);                      /* default rounding mode: to nearest even */
  double rounded = ldexp(r, quantum_exp);
  if (rounded > 0x1.fep127) return sign | 0x7f80; /* past the largest bf16: rounds to infinity */
  float f = (float)rounded; /* exact: at most 8 significant bits, within float range */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16) | sign;
}

double skref_mhc_bf16_to_double(uint16_t bits) { return mhc_bf16_to_double(bits); }
uint16_t skref_mhc_double_to_bf16(double value) { return mhc_bf16_from_double(value); }

void skref_mhc_round_bf16(const double *in, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = mhc_bf16_from_double(in[i]);
}

double skref_mhc_bf16_ulp(double v) {
  double a = fabs(v);
  if (!(a > 0.0) || isinf(a)) return ldexp(1.0, -133);
  int e;
  (void)frexp(a, &e);
  return ldexp(1.0, (e >= -125 ? e : -125) - 8);
}

/* ---- coefficients ------------------------------------------------------------------------ */

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

void skref_mhc_split_sinkhorn(const double mixes[24], const float hc_scale[3], const float hc_base[24],
                              double hc_eps, int sinkhorn_iters, double pre[4], double post[4],
                              double comb[16]) {
  for (int i = 0; i < 4; i++) {
    pre[i] = sigmoid(mixes[i] * hc_scale[0] + hc_base[i]) + hc_eps;
    post[i] = 2.0 * sigmoid(mixes[4 + i] * hc_scale[1] + hc_base[4 + i]);
  }
  double c[4][4];
  for (int i = 0; i < 4; i++) {
    double logits[4], row_max = -INFINITY, row_sum = 0.0;
    for (int j = 0; j < 4; j++) {
      logits[j] = mixes[8 + 4 * i + j] * hc_scale[2] + hc_base[8 + 4 * i + j];
      if (logits[j] > row_max) row_max = logits[j];
    }
    for (int j = 0; j < 4; j++) row_sum += (c[i][j] = exp(logits[j] - row_max));
    for (int j = 0; j < 4; j++) c[i][j] = c[i][j] / row_sum + hc_eps;
  }
  for (int round = 0; round < (sinkhorn_iters > 1 ? sinkhorn_iters : 1); round++) {
    if (round > 0) { /* the softmax already normalised the rows of round 0 */
      for (int i = 0; i < 4; i++) {
        double s = c[i][0] + c[i][1] + c[i][2] + c[i][3] + hc_eps;
        for (int j = 0; j < 4; j++) c[i][j] /= s;
      }
    }
    for (int j = 0; j < 4; j++) {
      double s = c[0][j] + c[1][j] + c[2][j] + c[3][j] + hc_eps;
      for (int i = 0; i < 4; i++) c[i][j] /= s;
    }
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) comb[4 * i + j] = c[i][j];
}

static double norm_weight_at(const skref_mhc_config *cfg, int h) {
  switch (cfg->norm_kind) {
  case SKREF_MHC_NORM_BF16: return mhc_bf16_to_double(((const uint16_t *)cfg->norm_weight)[h]);
  case SKREF_MHC_NORM_F32: return ((const float *)cfg->norm_weight)[h];
  default: return 1.0;
  }
}

/* The pre half for one token on 4 bf16 streams r[s][h] (as doubles). fn has `proj_cols` columns:
 * 4H (one block per stream) or H (run_pre's stream-summed projection, applied to r[0]). */
static void pre_one_token(const skref_mhc_config *cfg, const double *r, const float *fn, int proj_cols,
                          double *post, double *comb, double *y, skref_mhc_coeffs *out_coeffs) {
  const int H = cfg->hidden;
  skref_mhc_coeffs k;
  double sumsq = 0.0;
  for (int i = 0; i < 4 * H; i++) sumsq += r[i] * r[i];
  k.inv_rms = 1.0 / sqrt(sumsq / (4.0 * H) + (double)cfg->rms_eps);
  for (int m = 0; m < 24; m++) {
    const float *row = fn + (size_t)m * proj_cols;
    double dot = 0.0;
    for (int i = 0; i < proj_cols; i++) dot += (double)row[i] * r[i];
    k.mixes[m] = dot * k.inv_rms;
  }
  skref_mhc_split_sinkhorn(k.mixes, cfg->hc_scale, cfg->hc_base, cfg->hc_eps, cfg->sinkhorn_iters, k.pre, k.post,
                           k.comb);
  /* y_raw in double; y_pre rounded to bf16; the norm's variance from the unrounded y_raw. */
  double *y_raw = malloc(sizeof(double) * (size_t)H);
  double y_sumsq = 0.0;
  for (int h = 0; h < H; h++) {
    double v = 0.0;
    for (int s = 0; s < 4; s++) v += k.pre[s] * r[(size_t)s * H + h];
    y_raw[h] = v;
    y_sumsq += v * v;
  }
  k.norm_scale = cfg->norm_kind == SKREF_MHC_NORM_NONE ? 1.0 : 1.0 / sqrt(y_sumsq / H + (double)cfg->norm_eps);
  if (y) {
    for (int h = 0; h < H; h++) {
      double y_pre = mhc_bf16_to_double(mhc_bf16_from_double(y_raw[h]));
      y[h] = cfg->norm_kind == SKREF_MHC_NORM_NONE ? y_raw[h] : y_pre * k.norm_scale * norm_weight_at(cfg, h);
    }
  }
  free(y_raw);
  if (post) memcpy(post, k.post, sizeof k.post);
  if (comb) memcpy(comb, k.comb, sizeof k.comb);
  if (out_coeffs) *out_coeffs = k;
}

void skref_mhc_pre_streams(const skref_mhc_config *cfg, int tokens, const uint16_t *streams, const float *fn,
                           double *post, double *comb, double *y, skref_mhc_coeffs *coeffs) {
  const size_t K = 4 * (size_t)cfg->hidden;
  double *r = malloc(sizeof(double) * K);
  for (int t = 0; t < tokens; t++) {
    for (size_t i = 0; i < K; i++) r[i] = mhc_bf16_to_double(streams[(size_t)t * K + i]);
    pre_one_token(cfg, r, fn, (int)K, post ? post + 4 * (size_t)t : NULL, comb ? comb + 16 * (size_t)t : NULL,
                  y ? y + (size_t)t * cfg->hidden : NULL, coeffs ? coeffs + t : NULL);
  }
  free(r);
}

void skref_mhc_pre(const skref_mhc_config *cfg, int tokens, const uint16_t *x, const float *fn_pre,
                   uint16_t *residual_out, double *post, double *comb, double *y, skref_mhc_coeffs *coeffs) {
  const size_t H = (size_t)cfg->hidden;
  double *r = malloc(sizeof(double) * 4 * H);
  for (int t = 0; t < tokens; t++) {
    for (size_t s = 0; s < 4; s++)
      for (size_t h = 0; h < H; h++) {
        r[s * H + h] = mhc_bf16_to_double(x[t * H + h]);
        if (residual_out) residual_out[(t * 4 + s) * H + h] = x[t * H + h];
      }
    /* The projection sees the stream-summed fn_pre against one copy (r[0..H)); the RMS, the
     * collapse and the norm see all four copies. */
    pre_one_token(cfg, r, fn_pre, (int)H, post ? post + 4 * (size_t)t : NULL, comb ? comb + 16 * (size_t)t : NULL,
                  y ? y + t * H : NULL, coeffs ? coeffs + t : NULL);
  }
  free(r);
}

void skref_mhc_post(int tokens, int hidden, const uint16_t *x, const uint16_t *residual, const float *post,
                    const float *comb, double *out) {
  const size_t H = (size_t)hidden;
  for (size_t t = 0; t < (size_t)tokens; t++) {
    const float *p = post + 4 * t, *c = comb + 16 * t;
    for (size_t j = 0; j < 4; j++)
      for (size_t h = 0; h < H; h++) {
        double v = (double)p[j] * mhc_bf16_to_double(x[t * H + h]);
        for (size_t i = 0; i < 4; i++) v += (double)c[4 * i + j] * mhc_bf16_to_double(residual[(t * 4 + i) * H + h]);
        out[(t * 4 + j) * H + h] = v;
      }
  }
}

void skref_mhc_post_pre(const skref_mhc_config *cfg, int tokens, const uint16_t *x, const uint16_t *residual,
                        const float *prev_post, const float *prev_comb, const float *fn,
                        double *residual_out_exact, uint16_t *residual_out, double *post, double *comb,
                        double *y, skref_mhc_coeffs *coeffs) {
  const size_t n = (size_t)(tokens > 0 ? tokens : 0) * 4 * (size_t)cfg->hidden;
  double *exact = malloc(sizeof(double) * (n ? n : 1));
  uint16_t *rounded = malloc(sizeof(uint16_t) * (n ? n : 1));
  skref_mhc_post(tokens, cfg->hidden, x, residual, prev_post, prev_comb, exact);
  skref_mhc_round_bf16(exact, rounded, n);
  skref_mhc_pre_streams(cfg, tokens, rounded, fn, post, comb, y, coeffs);
  if (residual_out_exact) memcpy(residual_out_exact, exact, sizeof(double) * n);
  if (residual_out) memcpy(residual_out, rounded, sizeof(uint16_t) * n);
  free(exact);
  free(rounded);
}

void skref_mhc_sum_fn_streams(int hidden, const float *fn, float *fn_pre) {
  const size_t H = (size_t)hidden;
  for (size_t m = 0; m < 24; m++)
    for (size_t h = 0; h < H; h++) {
      double s = 0.0;
      for (size_t st = 0; st < 4; st++) s += fn[m * 4 * H + st * H + h];
      fn_pre[m * H + h] = (float)s;
    }
}

void skref_mhc_post_magnitude(int tokens, int hidden, const uint16_t *x, const uint16_t *residual, const float *post,
                              const float *comb, double *magnitude) {
  const size_t H = (size_t)hidden;
  for (size_t t = 0; t < (size_t)tokens; t++) {
    const float *p = post + 4 * t, *c = comb + 16 * t;
    for (size_t j = 0; j < 4; j++)
      for (size_t h = 0; h < H; h++) {
        double m = fabs((double)p[j] * mhc_bf16_to_double(x[t * H + h]));
        for (size_t i = 0; i < 4; i++) m += fabs((double)c[4 * i + j] * mhc_bf16_to_double(residual[(t * 4 + i) * H + h]));
        magnitude[(t * 4 + j) * H + h] = m;
      }
  }
}

void skref_mhc_y_magnitude(const skref_mhc_config *cfg, int tokens, const uint16_t *streams,
                           const skref_mhc_coeffs *coeffs, double *magnitude) {
  const size_t H = (size_t)cfg->hidden;
  for (size_t t = 0; t < (size_t)tokens; t++)
    for (size_t h = 0; h < H; h++) {
      double m = 0.0;
      for (size_t s = 0; s < 4; s++) m += fabs(coeffs[t].pre[s] * mhc_bf16_to_double(streams[(t * 4 + s) * H + h]));
      if (cfg->norm_kind != SKREF_MHC_NORM_NONE) m *= coeffs[t].norm_scale * fabs(norm_weight_at(cfg, (int)h));
      magnitude[t * H + h] = m;
    }
}

int skref_mhc_bf16_close(uint16_t gpu, double ref, double magnitude, double ulps, double magnitude_rel) {
  double got = mhc_bf16_to_double(gpu);
  if (isnan(got) || isnan(ref)) return 0;
  if (isinf(got) || isinf(ref)) return got == ref || (isinf(got) && fabs(ref) >= 0x1.ffp127);
  return fabs(got - ref) <= ulps * skref_mhc_bf16_ulp(ref) + magnitude_rel * magnitude;
}

int skref_mhc_f32_close(float gpu, double ref) {
  return !isnan(gpu) && fabs((double)gpu - ref) <= 2e-6 + 1e-5 * fabs(ref);
}

size_t skref_mhc_scratch_bytes(int max_tokens, int hidden) {
  return (size_t)max_tokens * (size_t)(hidden / 256) * 36u * sizeof(float);
}
