/* CPU references of the moe ops (ref.h). Double precision where the kernels' rounding does not
 * matter (W4A16), the kernels' own fp32 / BF16 / NVFP4 rounding points where it does (the exact
 * NVFP4 trace, route_topk weights). */
#include "moe/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/act.cuh"
#include "moe/plan.cuh"

/* ---- weights ------------------------------------------------------------------------------- */
static double scale_value(int wfmt, uint8_t code) {
  return wfmt == SK_MOE_WFMT_NVFP4 ? skref_e4m3_decode((uint8_t)(code & 0x7F)) : skref_e8m0_decode(code);
}

static const double kE2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

/* Prepared [rows, cols] FP4 matrix -> double (code x block scale x gs), row-major; scale_codes
 * (optional): the block scale byte of every (row, block), row-major [rows][cols / vec]. */
static void dequant_matrix(const uint8_t *codes, const uint8_t *scales, int wfmt, long long rows, long long cols, double gs,
                           double *out, uint8_t *scale_codes) {
  const int vec = sk_moe_scale_vec(wfmt);
  for (long long r = 0; r < rows; r++)
    for (long long b = 0; b < cols / vec; b++) {
      const uint8_t sc = scales[sk_moe_swizzled_offset(r, b, cols / vec)];
      if (scale_codes) scale_codes[r * (cols / vec) + b] = sc;
      const double s = scale_value(wfmt, sc) * gs;
      for (int i = 0; i < vec; i += 2) {
        const uint8_t byte = codes[r * (cols / 2) + (b * vec + i) / 2];
        out[r * cols + b * vec + i] = kE2m1[byte & 15] * s;
        out[r * cols + b * vec + i + 1] = kE2m1[byte >> 4] * s;
      }
    }
}

void skref_moe_dequant_w1(const skref_moe_weights *w, int e, int with_gs, double *out) {
  const long long np = sk_moe_padded(w->n), kp = sk_moe_padded(w->k), rows = sk_moe_w1_rows(w->act, np);
  dequant_matrix(w->w1_codes + e * sk_moe_w1_code_bytes(w->act, np, kp), w->w1_scales + e * sk_moe_w1_scale_bytes(w->act, w->wfmt, np, kp),
                 w->wfmt, rows, kp, with_gs && w->w1_gs ? w->w1_gs[e] : 1.0, out, NULL);
}

void skref_moe_dequant_w2(const skref_moe_weights *w, int e, int with_gs, double *out) {
  const long long np = sk_moe_padded(w->n);
  dequant_matrix(w->w2_codes + e * sk_moe_w2_code_bytes(w->k, np), w->w2_scales + e * sk_moe_w2_scale_bytes(w->wfmt, w->k, np), w->wfmt,
                 w->k, np, with_gs && w->w2_gs ? w->w2_gs[e] : 1.0, out, NULL);
}

int skref_moe_local_expert(const skref_moe_routes *rt, int e_local, size_t r, unsigned *err) {
  const int64_t id = rt->ids[r];
  if (id < 0 || id >= rt->e_global) {
    *err |= SK_MOE_ERR_EXPERT_ID;
    return -1;
  }
  if (!rt->expert_map) return (int)id;
  const int32_t l = rt->expert_map[id];
  if (l < -1 || l >= e_local) {
    *err |= SK_MOE_ERR_EXPERT_MAP;
    return -1;
  }
  return l;
}

/* ---- W4A16 ------------------------------------------------------------------------------- */
static double act_double(int act, double g, double u, const skref_moe_act_params *ap) {
  if (act == SK_MOE_ACT_RELU2) {
    const double r = g < 0 ? 0 : g;
    return r * r;
  }
  const double lim = ap->limit;
  g = g > lim ? lim : g;
  u = u > lim ? lim : u < -lim ? -lim : u;
  if (act == SK_MOE_ACT_SWIGLU_OAI) return g / (1.0 + exp(-(double)ap->alpha * g)) * (u + ap->beta);
  return g / (1.0 + exp(-g)) * u;
}

unsigned skref_moe_w4a16(const skref_moe_weights *w, const skref_moe_routes *rt, const skref_moe_act_params *ap,
                         const uint16_t *x, double *out, uint16_t *inter_out) {
  const long long np = sk_moe_padded(w->n), kp = sk_moe_padded(w->k), rows = sk_moe_w1_rows(w->act, np);
  const size_t routes = (size_t)rt->m * rt->topk;
  unsigned err = 0;
  int *local = malloc(routes * sizeof *local);
  for (size_t r = 0; r < routes; r++) local[r] = skref_moe_local_expert(rt, w->e, r, &err);
  memset(out, 0, sizeof(double) * (size_t)rt->m * w->k);
  if (inter_out) memset(inter_out, 0, 2 * routes * (size_t)np);
  double *w1 = malloc(sizeof(double) * rows * kp), *w2 = malloc(sizeof(double) * w->k * np);
  double *xd = malloc(sizeof(double) * kp), *h = malloc(sizeof(double) * rows), *inter = malloc(sizeof(double) * np);
  for (int e = 0; e < w->e; e++) {
    int loaded = 0;
    for (size_t r = 0; r < routes; r++) {
      if (local[r] != e) continue;
      if (!loaded) skref_moe_dequant_w1(w, e, 1, w1), skref_moe_dequant_w2(w, e, 1, w2), loaded = 1;
      const size_t t = r / rt->topk;
      for (long long c = 0; c < kp; c++) xd[c] = c < w->k ? skref_bf16_to_float(x[t * w->k + c]) : 0.0;
      const double wr = rt->weights[r];
      for (long long i = 0; i < rows; i++) {
        double s = 0;
        for (long long c = 0; c < w->k; c++) s += w1[i * kp + c] * xd[c];
        h[i] = rt->apply_on_input ? s * wr : s;
      }
      for (long long i = 0; i < np; i++) {
        const double a = sk_moe_gated(w->act) ? act_double(w->act, h[np + i], h[i], ap) : act_double(w->act, h[i], 0, ap);
        const uint16_t b = skref_float_to_bf16((float)a);  // (float) is exact enough: RN twice differs only at ties
        inter[i] = skref_bf16_to_float(b);
        if (inter_out) inter_out[r * np + i] = b;
      }
      const double cw = rt->apply_on_input ? 1.0 : wr;
      for (long long c = 0; c < w->k; c++) {
        double s = 0;
        for (long long i = 0; i < w->n; i++) s += w2[c * np + i] * inter[i];
        out[t * w->k + c] += cw * s;
      }
    }
  }
  free(local), free(w1), free(w2), free(xd), free(h), free(inter);
  return err;
}

/* ---- exact NVFP4 trace ---------------------------------------------------------------------- */
/* Grid of E4M3 value `code` (sign ignored): 2^(e-10) for normal codes, 2^-9 for subnormal ones. */
static double e4m3_lsb(uint8_t code) {
  const int e = (code >> 3) & 15;
  return ldexp(1.0, e ? e - 10 : -9);
}

/* NVFP4-quantize n (multiple of 16) fp32 values with gs: codes and E4M3 scales (row-major). */
static void quantize_row(const float *v, long long n, float gs, uint8_t *codes, uint8_t *scales) {
  for (long long b = 0; b < n / 16; b++) scales[b] = skref_nvfp4_quantize_block(v + 16 * b, gs, codes + 8 * b);
}

/* fp32(sum_c Wq[row, c] * Aq[c]), Wq dequantized (code x block scale, wsc its scale codes) and Aq
 * (codes, row-major scales); counts a dot product the fp32 kernels could miss in *inexact. */
static float exact_dot(const double *wq, const uint8_t *wsc, long long row, long long cols, const uint8_t *ac, const uint8_t *as,
                       long long *inexact) {
  double sum = 0, abs_sum = 0, grid = INFINITY;
  const double *w = wq + row * cols;
  for (long long b = 0; b < cols / 16; b++) {
    double part = 0, part_abs = 0;
    const double sa = skref_e4m3_decode(as[b]);
    for (int i = 0; i < 16; i++) {
      const long long c = 16 * b + i;
      const uint8_t ab = ac[c / 2];
      const double p = w[c] * kE2m1[c & 1 ? ab >> 4 : ab & 15] * sa;
      part += p;
      part_abs += fabs(p);
    }
    if (part_abs > 0) grid = fmin(grid, 0.25 * e4m3_lsb(wsc[row * (cols / 16) + b]) * e4m3_lsb(as[b]));
    sum += part;
    abs_sum += part_abs;
  }
  if (inexact && abs_sum > 0 && abs_sum >= ldexp(grid, 24)) ++*inexact;
  return (float)sum;
}

unsigned skref_moe_nvfp4_trace(const skref_moe_weights *w, const skref_moe_routes *rt, const skref_moe_act_params *ap,
                               const uint16_t *x, uint16_t *out, long long *inexact) {
  const long long np = sk_moe_padded(w->n), kp = sk_moe_padded(w->k), K = w->k, rows1 = sk_moe_w1_rows(w->act, np);
  const size_t routes = (size_t)rt->m * rt->topk;
  unsigned err = 0;
  if (inexact) *inexact = 0;
  float *xv = malloc(sizeof(float) * kp), *iv = malloc(sizeof(float) * np), *down = malloc(sizeof(float) * routes * K);
  float *h = malloc(sizeof(float) * rows1);
  double *w1 = malloc(sizeof(double) * rows1 * kp), *w2 = malloc(sizeof(double) * K * np);
  uint8_t *w1sc = malloc((size_t)(rows1 * kp / 16)), *w2sc = malloc((size_t)(K * np / 16));
  uint8_t *xc = malloc(kp / 2), *xs = malloc(kp / 16), *ic = malloc(np / 2), *is = malloc(np / 16);
  int *local = malloc(routes * sizeof *local);
  for (size_t r = 0; r < routes; r++) local[r] = skref_moe_local_expert(rt, w->e, r, &err);
  for (int e = 0; e < w->e; e++) {
    int loaded = 0;
    for (size_t r = 0; r < routes; r++) {
      if (local[r] != e) continue;
      if (!loaded) {
        dequant_matrix(w->w1_codes + e * sk_moe_w1_code_bytes(w->act, np, kp),
                       w->w1_scales + e * sk_moe_w1_scale_bytes(w->act, SK_MOE_WFMT_NVFP4, np, kp), SK_MOE_WFMT_NVFP4, rows1, kp, 1.0,
                       w1, w1sc);
        dequant_matrix(w->w2_codes + e * sk_moe_w2_code_bytes(K, np), w->w2_scales + e * sk_moe_w2_scale_bytes(SK_MOE_WFMT_NVFP4, K, np),
                       SK_MOE_WFMT_NVFP4, K, np, 1.0, w2, w2sc);
        loaded = 1;
      }
      const size_t t = r / rt->topk;
      const float wr = rt->weights[r];
      for (long long c = 0; c < kp; c++) {
        const float v = c < K ? skref_bf16_to_float(x[t * K + c]) : 0.0f;
        xv[c] = rt->apply_on_input ? v * wr : v;
      }
      quantize_row(xv, kp, w->a1_gs[e], xc, xs);
      const float alpha1 = (w->w1_gs ? w->w1_gs[e] : 1.0f) / w->a1_gs[e];
      for (long long i = 0; i < rows1; i++) h[i] = exact_dot(w1, w1sc, i, kp, xc, xs, inexact) * alpha1;
      for (long long i = 0; i < np; i++) {
        const float a = sk_moe_gated(w->act) ? sk_moe_act(w->act, h[np + i], h[i], ap->limit, ap->alpha, ap->beta)
                                             : sk_moe_act(w->act, h[i], 0.0f, ap->limit, ap->alpha, ap->beta);
        iv[i] = skref_bf16_to_float(skref_float_to_bf16(a));
      }
      quantize_row(iv, np, w->a2_gs[e], ic, is);
      const float alpha2 = (w->w2_gs ? w->w2_gs[e] : 1.0f) / w->a2_gs[e];
      for (long long c = 0; c < K; c++) down[r * K + c] = exact_dot(w2, w2sc, c, np, ic, is, inexact) * alpha2;
    }
  }
  for (int t = 0; t < rt->m; t++)
    for (long long c = 0; c < K; c++) {
      float acc = 0.0f;
      for (int j = 0; j < rt->topk; j++) {
        const size_t r = (size_t)t * rt->topk + j;
        if (local[r] < 0) continue;
        const float term = rt->apply_on_input ? down[r * K + c] : rt->weights[r] * down[r * K + c];
        acc = acc + term;
      }
      out[t * K + c] = skref_float_to_bf16(acc);
    }
  free(xv), free(iv), free(down), free(h), free(w1), free(w2), free(w1sc), free(w2sc);
  free(xc), free(xs), free(ic), free(is), free(local);
  return err;
}

/* ---- routing -------------------------------------------------------------------------------- */
static float finite_or_minus_inf(float v) { return v != v ? -INFINITY : v; }

void skref_moe_route_topk(const float *logits, int m, int e, int k, int mode, int32_t *ids, float *weights) {
  char *taken = malloc((size_t)e);
  for (int t = 0; t < m; t++) {
    const float *l = logits + (size_t)t * e;
    memset(taken, 0, (size_t)e);
    for (int j = 0; j < k; j++) {
      int best = -1;
      float bv = 0;
      for (int i = 0; i < e; i++) {
        const float v = finite_or_minus_inf(l[i]);
        if (!taken[i] && (best < 0 || v > bv || (v == bv && i > best))) best = i, bv = v;
      }
      taken[best] = 1;
      ids[t * k + j] = best;
    }
    const float mx = finite_or_minus_inf(l[ids[t * k]]);
    if (mode == SK_MOE_TOPK_RAW) {
      for (int j = 0; j < k; j++) weights[t * k + j] = l[ids[t * k + j]];
    } else if (mode == SK_MOE_TOPK_RENORM) {
      float s = 0.0f;
      for (int j = 0; j < k; j++) s = s + sk_moe_expf(finite_or_minus_inf(l[ids[t * k + j]]) - mx);
      for (int j = 0; j < k; j++) weights[t * k + j] = sk_moe_expf(finite_or_minus_inf(l[ids[t * k + j]]) - mx) / s;
    } else {
      /* the kernel's order: lane L sums ids L, L + 32, ... ascending, then an xor butterfly */
      float p[32];
      for (int lane = 0; lane < 32; lane++) {
        p[lane] = 0.0f;
        for (int i = lane; i < e; i += 32) p[lane] = p[lane] + sk_moe_expf(finite_or_minus_inf(l[i]) - mx);
      }
      for (int mask = 16; mask >= 1; mask /= 2) {
        float q[32];
        for (int lane = 0; lane < 32; lane++) q[lane] = p[lane] + p[lane ^ mask];
        memcpy(p, q, sizeof p);
      }
      for (int j = 0; j < k; j++) weights[t * k + j] = sk_moe_expf(finite_or_minus_inf(l[ids[t * k + j]]) - mx) / p[0];
    }
  }
  free(taken);
}

/* ---- random weights and comparisons ------------------------------------------------------------ */
static uint8_t random_scale(skref_rng *rng, int wfmt, int mode) {
  if (wfmt == SK_MOE_WFMT_MXFP4) return (uint8_t)(119 + skref_rng_below(rng, 9));
  if (mode == 1) {
    static const float set[4] = {0.25f, 0.375f, 0.5f, 0.75f};
    return skref_e4m3_encode(set[skref_rng_below(rng, 4)]);
  }
  return skref_e4m3_encode((float)(skref_rng_uniform(rng) * 0.25 + 1.0 / 32));
}

static void random_matrix(skref_rng *rng, int wfmt, int mode, long long rows, long long cols, long long used_rows_a,
                          long long used_rows_b, long long gap, long long used_cols, uint8_t *codes, uint8_t *scales) {
  /* rows [0, used_rows_a) and [gap, gap + used_rows_b) are real, columns [0, used_cols) */
  const int vec = sk_moe_scale_vec(wfmt);
  memset(codes, 0, (size_t)(rows * cols / 2));
  memset(scales, wfmt == SK_MOE_WFMT_NVFP4 ? 0x38 : 127, (size_t)sk_moe_swizzled_bytes(rows, cols / vec));
  for (long long r = 0; r < rows; r++) {
    if (!(r < used_rows_a || (r >= gap && r < gap + used_rows_b))) continue;
    for (long long c = 0; c < used_cols / 2; c += 8) {
      const uint64_t v = skref_rng_u64(rng);
      for (int i = 0; i < 8 && c + i < used_cols / 2; i++) codes[r * (cols / 2) + c + i] = (uint8_t)(v >> (8 * i));
    }
    for (long long b = 0; b < used_cols / vec; b++) scales[sk_moe_swizzled_offset(r, b, cols / vec)] = random_scale(rng, wfmt, mode);
  }
}

void skref_moe_random_weights(skref_rng *rng, int wfmt, int act, int e, int n, int k, int scale_mode, uint8_t *w1c,
                              uint8_t *w1s, uint8_t *w2c, uint8_t *w2s, float *w1_gs, float *w2_gs, float *a1_gs,
                              float *a2_gs, float a_gs_base) {
  const long long np = sk_moe_padded(n), kp = sk_moe_padded(k), rows = sk_moe_w1_rows(act, np);
  for (int x = 0; x < e; x++) {
    random_matrix(rng, wfmt, scale_mode, rows, kp, n, sk_moe_gated(act) ? n : 0, np, k,
                  w1c + x * sk_moe_w1_code_bytes(act, np, kp), w1s + x * sk_moe_w1_scale_bytes(act, wfmt, np, kp));
    random_matrix(rng, wfmt, scale_mode, k, np, k, 0, k, n, w2c + x * sk_moe_w2_code_bytes(k, np),
                  w2s + x * sk_moe_w2_scale_bytes(wfmt, k, np));
    if (w1_gs) w1_gs[x] = (float)(0.5 + 1.5 * skref_rng_uniform(rng));
    if (w2_gs) w2_gs[x] = (float)(0.5 + 1.5 * skref_rng_uniform(rng));
    if (a1_gs) a1_gs[x] = (float)((0.5 + 1.5 * skref_rng_uniform(rng)) * a_gs_base);
    if (a2_gs) a2_gs[x] = (float)((0.5 + 1.5 * skref_rng_uniform(rng)) * a_gs_base);
  }
}

double skref_moe_cosine(const uint16_t *got, const double *ref, size_t rows, size_t cols, double *max_abs) {
  double cos_sum = 0, mx = 0;
  for (size_t r = 0; r < rows; r++) {
    double dot = 0, na = 0, nb = 0;
    for (size_t c = 0; c < cols; c++) {
      const double a = skref_bf16_to_float(got[r * cols + c]), b = ref[r * cols + c];
      dot += a * b, na += a * a, nb += b * b;
      const double d = fabs(a - b);
      mx = d > mx || d != d ? d : mx;
    }
    cos_sum += (na <= 1e-24 && nb <= 1e-24) ? 1.0 : (na * nb > 0 ? dot / sqrt(na * nb) : 0.0);
  }
  if (max_abs) *max_abs = mx;
  return rows ? cos_sum / (double)rows : 1.0;
}
