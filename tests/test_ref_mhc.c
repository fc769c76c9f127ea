/* tests/test_ref_mhc.c - the double-precision norm.mhc reference (ops/norm/ref_mhc.c) against
 * hand-worked cases, invariants of the math and the relations between the entry points. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "norm/ref_mhc.h"

/* ---- random inputs (seed printed; SK_TEST_SEED=N replays a run) -------------------------- */

static uint64_t rng_state;

static uint64_t seed_once(void) {
  static uint64_t seed;
  static int have_seed;
  if (!have_seed) {
    const char *env = getenv("SK_TEST_SEED");
    seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    have_seed = 1;
  }
  return seed;
}

static void rng_init(const char *test_name) {
  uint64_t seed = seed_once();
  fprintf(stderr, "[%s] seed %llu (SK_TEST_SEED=%llu replays)\n", test_name, (unsigned long long)seed,
          (unsigned long long)seed);
  rng_state = seed ^ 0x9e3779b97f4a7c15ull;
}

static uint64_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double rng_uniform(void) { return ((double)(rng_next() >> 11) + 0.5) * 0x1p-53; }

static double rng_normal(void) {
  return sqrt(-2.0 * log(rng_uniform())) * cos(6.283185307179586 * rng_uniform());
}

static void fill_bf16_normal(uint16_t *v, size_t n, double stddev) {
  for (size_t i = 0; i < n; i++) v[i] = skref_mhc_double_to_bf16(rng_normal() * stddev);
}

static void fill_f32_normal(float *v, size_t n, double stddev) {
  for (size_t i = 0; i < n; i++) v[i] = (float)(rng_normal() * stddev);
}

/* Upstream's test distribution: streams N(0,1/3), x N(0,1/4), fn N(0,1/64), scale N(0,1/3),
 * base N(0,1/5). */
typedef struct inputs {
  int tokens, hidden;
  uint16_t *x, *residual, *norm_w;
  float *fn, *fn_pre, *scale, *base, *prev_post, *prev_comb;
} inputs;

static inputs make_inputs(int tokens, int hidden) {
  inputs in = {.tokens = tokens, .hidden = hidden};
  size_t T = (size_t)tokens, H = (size_t)hidden;
  in.x = malloc(2 * T * H);
  in.residual = malloc(2 * T * 4 * H);
  in.norm_w = malloc(2 * H);
  in.fn = malloc(4 * 24 * 4 * H);
  in.fn_pre = malloc(4 * 24 * H);
  in.scale = malloc(4 * 3);
  in.base = malloc(4 * 24);
  in.prev_post = malloc(4 * T * 4);
  in.prev_comb = malloc(4 * T * 16);
  fill_bf16_normal(in.residual, T * 4 * H, 1.0 / 3);
  fill_bf16_normal(in.x, T * H, 1.0 / 4);
  fill_f32_normal(in.fn, 24 * 4 * H, 1.0 / 64);
  fill_f32_normal(in.scale, 3, 1.0 / 3);
  fill_f32_normal(in.base, 24, 1.0 / 5);
  fill_bf16_normal(in.norm_w, H, 1.0);
  skref_mhc_sum_fn_streams(hidden, in.fn, in.fn_pre);
  /* prev_post/prev_comb: what a previous pre produces (gates in (0,2), Sinkhorn matrices). */
  for (size_t t = 0; t < T; t++) {
    double mixes[24], pre[4], post[4], comb[16];
    for (int m = 0; m < 24; m++) mixes[m] = rng_normal();
    skref_mhc_split_sinkhorn(mixes, in.scale, in.base, 1e-6, 20, pre, post, comb);
    for (int i = 0; i < 4; i++) in.prev_post[4 * t + i] = (float)post[i];
    for (int i = 0; i < 16; i++) in.prev_comb[16 * t + i] = (float)comb[i];
  }
  return in;
}

static void free_inputs(inputs *in) {
  free(in->x); free(in->residual); free(in->norm_w); free(in->fn); free(in->fn_pre);
  free(in->scale); free(in->base); free(in->prev_post); free(in->prev_comb);
}

static skref_mhc_config default_config(const inputs *in, skref_mhc_norm_kind norm) {
  return (skref_mhc_config){.hidden = in->hidden, .rms_eps = 1e-6f, .hc_eps = 1e-6f, .sinkhorn_iters = 20,
                            .hc_scale = in->scale, .hc_base = in->base, .norm_kind = norm,
                            .norm_weight = norm == SKREF_MHC_NORM_NONE ? NULL : in->norm_w, .norm_eps = 1e-6f};
}

static uint16_t bf16(double v) { return skref_mhc_double_to_bf16(v); }

#define EXPECT_NEAR(a, b, tol, ...)                                                                     \
  cr_expect(fabs((double)(a) - (double)(b)) <= (tol), __VA_ARGS__)

/* ---- bf16 helpers ------------------------------------------------------------------------ */

Test(mhc_ref_bf16, rounds_to_nearest_even_and_saturates_to_inf) {
  cr_expect_eq(bf16(1.0), 0x3f80);
  cr_expect_eq(bf16(-2.0), 0xc000);
  cr_expect_eq(bf16(1.0 + 0x1p-8), 0x3f80, "a tie rounds to the even 1.0");
  cr_expect_eq(bf16(1.0 + 3 * 0x1p-8), 0x3f82, "a tie rounds to the even 1+2^-6");
  cr_expect_eq(bf16(1.0 + 0x1p-8 + 0x1p-30), 0x3f81, "just above a tie rounds up");
  cr_expect_eq(bf16(0x1.fep127), 0x7f7f, "largest finite bf16");
  cr_expect_eq(bf16(0x1.ffp127), 0x7f80, "max + half ulp ties to even: infinity");
  cr_expect_eq(bf16(-1e300), 0xff80);
  cr_expect_eq(bf16(0x1p-133), 0x0001, "smallest subnormal");
  cr_expect_eq(bf16(0x1p-134), 0x0000, "half the smallest subnormal ties to zero");
  cr_expect_eq(bf16(-0.0), 0x8000);
  cr_expect_eq(bf16(NAN) & 0x7fc0, 0x7fc0);
  cr_expect_eq(skref_mhc_bf16_to_double(0x3fc0), 1.5);
  cr_expect_eq(skref_mhc_bf16_ulp(1.0), 0x1p-7);
  cr_expect_eq(skref_mhc_bf16_ulp(-3.0), 0x1p-6);
  for (uint32_t bits = 0; bits < 0x10000; bits++) { /* every finite bf16 survives the round trip */
    if ((bits & 0x7f80) == 0x7f80) continue;
    uint16_t back = bf16(skref_mhc_bf16_to_double((uint16_t)bits));
    if (back != bits) cr_expect_fail("bf16 %#06x -> %#06x", bits, back);
  }
}

/* ---- gates and Sinkhorn ------------------------------------------------------------------ */

Test(mhc_ref_sinkhorn, zero_logits_give_half_gates_and_a_uniform_comb) {
  const float scale[3] = {0.7f, -1.3f, 2.0f}, base[24] = {0};
  double mixes[24] = {0}, pre[4], post[4], comb[16];
  skref_mhc_split_sinkhorn(mixes, scale, base, 0.0, 20, pre, post, comb);
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(pre[i], 0.5);
    cr_expect_eq(post[i], 1.0);
  }
  for (int i = 0; i < 16; i++) cr_expect_eq(comb[i], 0.25);

  /* With hc_eps the uniform matrix stays uniform: v0 = 1/4 + eps, then v <- v / (4v + eps) for
   * the first column step and for both steps of every further round. */
  const double eps = 1e-3;
  skref_mhc_split_sinkhorn(mixes, scale, base, eps, 3, pre, post, comb);
  double v = 0.25 + eps;
  v = v / (4 * v + eps);
  for (int round = 1; round < 3; round++) {
    v = v / (4 * v + eps);
    v = v / (4 * v + eps);
  }
  for (int i = 0; i < 4; i++) EXPECT_NEAR(pre[i], 0.5 + eps, 1e-15);
  for (int i = 0; i < 16; i++) EXPECT_NEAR(comb[i], v, 1e-15, "comb[%d] = %.17g, expected %.17g", i, comb[i], v);
}

Test(mhc_ref_sinkhorn, gates_use_their_own_scale_and_base) {
  /* sigmoid(ln 3) = 3/4: pre_0 = 3/4 from the mix, pre_1 from the base; post = 2*sigmoid. */
  const float scale[3] = {2.0f, 0.5f, 1.0f};
  float base[24] = {0};
  double mixes[24] = {0}, pre[4], post[4], comb[16];
  mixes[0] = log(3.0) / 2;  /* * scale[0] */
  base[1] = (float)log(3.0);
  mixes[4] = -2 * log(3.0); /* * scale[1] -> sigmoid(-ln 3) = 1/4 */
  base[7] = (float)log(3.0);
  skref_mhc_split_sinkhorn(mixes, scale, base, 0.0, 1, pre, post, comb);
  EXPECT_NEAR(pre[0], 0.75, 1e-15);
  EXPECT_NEAR(pre[1], 0.75, 1e-7); /* base rounded to float */
  EXPECT_NEAR(pre[2], 0.5, 0);
  EXPECT_NEAR(post[0], 0.5, 1e-15);
  EXPECT_NEAR(post[3], 1.5, 1e-7);
  EXPECT_NEAR(post[1], 1.0, 0);
}

Test(mhc_ref_sinkhorn, doubly_stochastic_softmax_is_a_fixed_point) {
  /* Circulant logits ln p[(j-i) mod 4]: the softmax is already doubly stochastic, so with
   * hc_eps = 0 Sinkhorn leaves it alone; comb[i][j] (source i, destination j) = p[(j-i) mod 4]. */
  const double p[4] = {0.4, 0.3, 0.2, 0.1};
  const float scale[3] = {1, 1, 1}, base[24] = {0};
  double mixes[24] = {0}, pre[4], post[4], comb[16];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) mixes[8 + 4 * i + j] = log(p[(j - i + 4) % 4]) + 5.0 * i; /* row shift: no-op */
  skref_mhc_split_sinkhorn(mixes, scale, base, 0.0, 20, pre, post, comb);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) EXPECT_NEAR(comb[4 * i + j], p[(j - i + 4) % 4], 1e-14, "comb[%d][%d]", i, j);
}

Test(mhc_ref_sinkhorn, random_logits_converge_to_doubly_stochastic) {
  rng_init("random_logits_converge_to_doubly_stochastic");
  float scale[3], base[24];
  fill_f32_normal(scale, 3, 1.0 / 3);
  fill_f32_normal(base, 24, 1.0 / 5);
  for (int trial = 0; trial < 200; trial++) {
    double mixes[24], pre[4], post[4], comb[16];
    /* Logit spreads of a few units (as trained models produce): Sinkhorn converges geometrically
     * at a rate set by the spread, and near-degenerate matrices (spreads of 10+) can take
     * thousands of rounds, which is a property of the algorithm, not of this code. */
    for (int m = 0; m < 24; m++) mixes[m] = 1.0 * rng_normal();
    const double eps = 1e-6;
    skref_mhc_split_sinkhorn(mixes, scale, base, eps, 20, pre, post, comb);
    for (int i = 0; i < 4; i++) {
      cr_expect(pre[i] > eps && pre[i] < 1 + eps, "pre in (eps, 1+eps)");
      cr_expect(post[i] > 0 && post[i] < 2, "post in (0, 2)");
    }
    for (int k = 0; k < 4; k++) {
      double row = 0, col = 0;
      for (int l = 0; l < 4; l++) {
        cr_expect(comb[4 * k + l] > 0);
        row += comb[4 * k + l];
        col += comb[4 * l + k];
      }
      /* Every round ends on a column step: columns sum to S/(S+eps), about 1 - eps. */
      EXPECT_NEAR(col, 1.0, 2e-6, "trial %d column %d sums to %.12f", trial, k, col);
      /* Rows after 20 rounds are close, not exact (convergence depends on the logits; deviations
       * up to ~4e-3 were seen on random data); the 400-round check below is the tight one. */
      EXPECT_NEAR(row, 1.0, 5e-2, "trial %d row %d sums to %.12f", trial, k, row);
    }
    /* More rounds: the rows converge too. */
    skref_mhc_split_sinkhorn(mixes, scale, base, eps, 400, pre, post, comb);
    for (int k = 0; k < 4; k++) {
      double row = comb[4 * k] + comb[4 * k + 1] + comb[4 * k + 2] + comb[4 * k + 3];
      EXPECT_NEAR(row, 1.0, 1e-5, "trial %d row %d after 400 rounds: %.12f", trial, k, row);
    }
  }
}

Test(mhc_ref_sinkhorn, one_round_is_softmax_plus_eps_then_columns) {
  rng_init("one_round_is_softmax_plus_eps_then_columns");
  const float scale[3] = {1, 1, 1}, base[24] = {0};
  double mixes[24], pre[4], post[4], comb[16], zero_rounds[16];
  for (int m = 0; m < 24; m++) mixes[m] = rng_normal();
  const double eps = 1e-2;
  skref_mhc_split_sinkhorn(mixes, scale, base, eps, 1, pre, post, comb);
  skref_mhc_split_sinkhorn(mixes, scale, base, eps, 0, pre, post, zero_rounds);
  double c[16];
  for (int i = 0; i < 4; i++) {
    double z = 0;
    for (int j = 0; j < 4; j++) z += exp(mixes[8 + 4 * i + j]);
    for (int j = 0; j < 4; j++) c[4 * i + j] = exp(mixes[8 + 4 * i + j]) / z + eps;
  }
  for (int j = 0; j < 4; j++) {
    double s = c[j] + c[4 + j] + c[8 + j] + c[12 + j] + eps;
    for (int i = 0; i < 4; i++) EXPECT_NEAR(comb[4 * i + j], c[4 * i + j] / s, 1e-15);
  }
  cr_expect(memcmp(comb, zero_rounds, sizeof comb) == 0, "sinkhorn_iters < 1 acts as 1");
}

/* ---- run_post ---------------------------------------------------------------------------- */

Test(mhc_ref_post, comb_moves_source_i_into_destination_j) {
  enum { H = 256 };
  uint16_t x[H], residual[4 * H];
  for (int h = 0; h < H; h++) {
    x[h] = bf16(0.5 + h / 64.0);
    for (int s = 0; s < 4; s++) residual[s * H + h] = bf16((s + 1) * (h % 7 - 3));
  }
  /* comb[i][j] = 1 when j = (i+1) mod 4: stream i goes to stream i+1. */
  float post[4] = {1.0f, 0.5f, 0.0f, 2.0f}, comb[16] = {0};
  for (int i = 0; i < 4; i++) comb[4 * i + (i + 1) % 4] = 1.0f;
  double out[4 * H];
  skref_mhc_post(1, H, x, residual, post, comb, out);
  for (int j = 0; j < 4; j++)
    for (int h = 0; h < H; h++) {
      int src = (j + 3) % 4;
      double want = post[j] * skref_mhc_bf16_to_double(x[h]) + (src + 1) * (h % 7 - 3);
      cr_expect_eq(out[j * H + h], want, "out[%d][%d] = %g, want %g", j, h, out[j * H + h], want);
    }
}

Test(mhc_ref_post, random_tokens_are_independent) {
  rng_init("random_tokens_are_independent");
  inputs in = make_inputs(3, 512);
  const size_t H = 512;
  double *all = malloc(sizeof(double) * 3 * 4 * H), *one = malloc(sizeof(double) * 4 * H);
  skref_mhc_post(3, (int)H, in.x, in.residual, in.prev_post, in.prev_comb, all);
  for (size_t t = 0; t < 3; t++) {
    skref_mhc_post(1, (int)H, in.x + t * H, in.residual + t * 4 * H, in.prev_post + 4 * t, in.prev_comb + 16 * t,
                   one);
    cr_expect(memcmp(one, all + t * 4 * H, sizeof(double) * 4 * H) == 0, "token %zu", t);
  }
  double nonzero = 0;
  for (size_t i = 0; i < 3 * 4 * H; i++) nonzero += fabs(all[i]);
  cr_expect(nonzero > 0);
  free(all); free(one);
  free_inputs(&in);
}

/* ---- pre: hand-worked -------------------------------------------------------------------- */

Test(mhc_ref_pre, hand_worked_streams_with_fused_norm) {
  /* H = 256, streams r[s][h] = s+1. mean(r^2) over 4H = (1+4+9+16)/4 = 7.5, so with rms_eps = 0
   * inv_rms = 1/sqrt(7.5). fn reads stream 0 only: a row of value a*sqrt(7.5)/H gives mix a.
   * mix0 = ln 3 -> pre0 = 3/4; pre1..3 = 1/2. mix4 = -ln 3 -> post0 = 2/4. Comb: circulant. */
  enum { H = 256 };
  static uint16_t streams[4 * H], norm_w[H];
  static float fn[24 * 4 * H];
  const double p[4] = {0.4, 0.3, 0.2, 0.1};
  float scale[3] = {1, 1, 1}, base[24] = {0};
  for (int s = 0; s < 4; s++)
    for (int h = 0; h < H; h++) streams[s * H + h] = bf16(s + 1);
  const double to_mix = sqrt(7.5) / H;
  for (int h = 0; h < H; h++) {
    fn[0 * 4 * H + h] = (float)(log(3.0) * to_mix);
    fn[4 * 4 * H + h] = (float)(-log(3.0) * to_mix);
    norm_w[h] = bf16(1.0 + h / 128.0);
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) base[8 + 4 * i + j] = (float)log(p[(j - i + 4) % 4]);
  skref_mhc_config cfg = {.hidden = H, .rms_eps = 0, .hc_eps = 0, .sinkhorn_iters = 20, .hc_scale = scale,
                          .hc_base = base, .norm_kind = SKREF_MHC_NORM_NONE};
  double post[4], comb[16], y[H];
  skref_mhc_coeffs k;
  skref_mhc_pre_streams(&cfg, 1, streams, fn, post, comb, y, &k);
  EXPECT_NEAR(k.inv_rms, 1 / sqrt(7.5), 1e-15);
  EXPECT_NEAR(k.pre[0], 0.75, 1e-6);
  EXPECT_NEAR(k.pre[1], 0.5, 0);
  EXPECT_NEAR(post[0], 0.5, 1e-6);
  EXPECT_NEAR(post[1], 1.0, 0);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) EXPECT_NEAR(comb[4 * i + j], p[(j - i + 4) % 4], 1e-6);
  /* y = 0.75*1 + 0.5*(2+3+4) = 5.25 */
  for (int h = 0; h < H; h++) EXPECT_NEAR(y[h], 5.25, 1e-5);
  cr_expect_eq(k.norm_scale, 1.0);

  /* Fused RMSNorm: y_raw is constant, so its RMS is |y_raw| and y = y_pre/|y_raw| * w; y_pre is
   * bf16(5.25 + O(1e-6)) = 5.25 exactly. */
  cfg.norm_kind = SKREF_MHC_NORM_BF16;
  cfg.norm_weight = norm_w;
  skref_mhc_pre_streams(&cfg, 1, streams, fn, post, comb, y, &k);
  for (int h = 0; h < H; h++)
    EXPECT_NEAR(y[h], skref_mhc_bf16_to_double(norm_w[h]) * 5.25 / (5.25 + (k.pre[0] - 0.75)), 1e-12,
                "y[%d]", h);
  EXPECT_NEAR(k.norm_scale, 1 / 5.25, 1e-6);

  /* fp32 weights and norm_eps: scale = 1/sqrt(y_raw^2 + norm_eps). */
  float norm_w32[H];
  for (int h = 0; h < H; h++) norm_w32[h] = 0.25f * (float)h;
  cfg.norm_kind = SKREF_MHC_NORM_F32;
  cfg.norm_weight = norm_w32;
  cfg.norm_eps = 0.75f;
  skref_mhc_pre_streams(&cfg, 1, streams, fn, post, comb, y, &k);
  double y_raw = 0.5 * 9 + k.pre[0];
  for (int h = 0; h < H; h++) EXPECT_NEAR(y[h], 5.25 * 0.25 * h / sqrt(y_raw * y_raw + 0.75), 1e-12);
}

Test(mhc_ref_pre, hand_worked_broadcast_first_layer) {
  /* run_pre: x = 2 everywhere, mean(x^2) = 4 -> inv_rms = 1/2 (rms_eps 0). fn_pre = a/H gives a
   * dot of 2a and a mix of a. pre = (3/4, 1/2, 1/2, 1/2) -> y = 2 * 2.25 = 4.5. */
  enum { H = 512 };
  static uint16_t x[2 * H], residual_out[2 * 4 * H];
  static float fn_pre[24 * H];
  float scale[3] = {1, 1, 1}, base[24] = {0};
  for (int i = 0; i < 2 * H; i++) x[i] = bf16(i < H ? 2.0 : -2.0);
  for (int h = 0; h < H; h++) fn_pre[h] = (float)(log(3.0) / H);
  skref_mhc_config cfg = {.hidden = H, .rms_eps = 0, .hc_eps = 0, .sinkhorn_iters = 20, .hc_scale = scale,
                          .hc_base = base, .norm_kind = SKREF_MHC_NORM_NONE};
  double post[8], comb[32], y[2 * H];
  skref_mhc_coeffs k[2];
  memset(residual_out, 0xff, sizeof residual_out);
  skref_mhc_pre(&cfg, 2, x, fn_pre, residual_out, post, comb, y, k);
  for (int t = 0; t < 2; t++)
    for (int s = 0; s < 4; s++)
      cr_expect(memcmp(residual_out + (t * 4 + s) * H, x + t * H, 2 * H) == 0, "residual_out copies x");
  EXPECT_NEAR(k[0].inv_rms, 0.5, 1e-15);
  EXPECT_NEAR(k[0].pre[0], 0.75, 1e-6);
  EXPECT_NEAR(k[1].pre[0], 0.25, 1e-6, "x = -2 flips the dot: sigmoid(-ln 3)");
  for (int h = 0; h < H; h++) {
    EXPECT_NEAR(y[h], 2 * (1.5 + k[0].pre[0]), 1e-12);
    EXPECT_NEAR(y[H + h], -2 * (1.5 + k[1].pre[0]), 1e-12);
  }
  for (int i = 0; i < 16; i++) EXPECT_NEAR(comb[i], 0.25, 1e-15);
  for (int i = 0; i < 4; i++) cr_expect_eq(post[i], 1.0);
}

/* ---- pre: invariants and relations ------------------------------------------------------- */

Test(mhc_ref_pre, coefficients_are_invariant_to_the_scale_of_the_streams) {
  /* With rms_eps = 0 the RMS cancels any scale of the streams. Scaling by 2 is exact in bf16 and
   * in every double step, so the coefficients match bit for bit; y doubles without a norm and is
   * unchanged with one. */
  rng_init("coefficients_are_invariant_to_the_scale_of_the_streams");
  inputs in = make_inputs(2, 768);
  const size_t n = 2 * 4 * 768;
  uint16_t *doubled = malloc(2 * n);
  for (size_t i = 0; i < n; i++) doubled[i] = bf16(2 * skref_mhc_bf16_to_double(in.residual[i]));
  for (int norm = 0; norm < 2; norm++) {
    skref_mhc_config cfg = default_config(&in, norm ? SKREF_MHC_NORM_BF16 : SKREF_MHC_NORM_NONE);
    cfg.rms_eps = 0;
    cfg.norm_eps = 0;
    double y1[2 * 768], y2[2 * 768];
    skref_mhc_coeffs k1[2], k2[2];
    skref_mhc_pre_streams(&cfg, 2, in.residual, in.fn, NULL, NULL, y1, k1);
    skref_mhc_pre_streams(&cfg, 2, doubled, in.fn, NULL, NULL, y2, k2);
    for (int t = 0; t < 2; t++) {
      cr_expect(memcmp(k1[t].mixes, k2[t].mixes, sizeof k1[t].mixes) == 0);
      cr_expect(memcmp(k1[t].comb, k2[t].comb, sizeof k1[t].comb) == 0);
      cr_expect(memcmp(k1[t].pre, k2[t].pre, sizeof k1[t].pre) == 0);
    }
    for (int i = 0; i < 2 * 768; i++) cr_expect_eq(y2[i], norm ? y1[i] : 2 * y1[i], "norm %d y[%d]", norm, i);
  }
  free(doubled);
  free_inputs(&in);
}

Test(mhc_ref_pre, random_gates_are_in_range_and_comb_near_doubly_stochastic) {
  rng_init("random_gates_are_in_range_and_comb_near_doubly_stochastic");
  inputs in = make_inputs(3, 1024);
  skref_mhc_config cfg = default_config(&in, SKREF_MHC_NORM_BF16);
  double post[12], comb[48], *y = malloc(sizeof(double) * 3 * 1024);
  skref_mhc_coeffs k[3];
  skref_mhc_pre_streams(&cfg, 3, in.residual, in.fn, post, comb, y, k);
  for (int t = 0; t < 3; t++) {
    for (int i = 0; i < 4; i++) {
      cr_expect(k[t].pre[i] > 1e-6 && k[t].pre[i] < 1 + 1e-6);
      cr_expect(post[4 * t + i] > 0 && post[4 * t + i] < 2);
    }
    for (int a = 0; a < 4; a++) {
      double row = 0, col = 0;
      for (int b = 0; b < 4; b++) {
        row += comb[16 * t + 4 * a + b];
        col += comb[16 * t + 4 * b + a];
      }
      EXPECT_NEAR(col, 1.0, 2e-6);
      EXPECT_NEAR(row, 1.0, 1e-3);
    }
    /* The fused norm makes y's RMS the RMS of the weights up to the bf16 rounding of y_pre. */
    double ss = 0, ww = 0;
    for (int h = 0; h < 1024; h++) {
      double w = skref_mhc_bf16_to_double(in.norm_w[h]);
      ss += y[t * 1024 + h] * y[t * 1024 + h] / (w * w + 1e-30) * (w != 0);
      ww += w != 0;
    }
    EXPECT_NEAR(ss / ww, 1.0, 1e-2, "token %d: mean (y/w)^2 = %g", t, ss / ww);
  }
  free(y);
  free_inputs(&in);
}

Test(mhc_ref_relations, post_pre_is_post_then_pre_on_the_rounded_streams) {
  rng_init("post_pre_is_post_then_pre_on_the_rounded_streams");
  enum { T = 3, H = 512 };
  inputs in = make_inputs(T, H);
  skref_mhc_config cfg = default_config(&in, SKREF_MHC_NORM_F32);
  float w32[H];
  for (int h = 0; h < H; h++) w32[h] = (float)rng_normal();
  cfg.norm_weight = w32;
  static double exact[T * 4 * H], post_out[T * 4 * H], y1[T * H], y2[T * H];
  static uint16_t rounded[T * 4 * H], rounded2[T * 4 * H];
  double post1[4 * T], comb1[16 * T], post2[4 * T], comb2[16 * T];
  skref_mhc_post_pre(&cfg, T, in.x, in.residual, in.prev_post, in.prev_comb, in.fn, exact, rounded, post1, comb1,
                     y1, NULL);
  skref_mhc_post(T, H, in.x, in.residual, in.prev_post, in.prev_comb, post_out);
  skref_mhc_round_bf16(post_out, rounded2, T * 4 * H);
  skref_mhc_pre_streams(&cfg, T, rounded2, in.fn, post2, comb2, y2, NULL);
  cr_expect(memcmp(exact, post_out, sizeof exact) == 0);
  cr_expect(memcmp(rounded, rounded2, sizeof rounded) == 0);
  cr_expect(memcmp(post1, post2, sizeof post1) == 0);
  cr_expect(memcmp(comb1, comb2, sizeof comb1) == 0);
  cr_expect(memcmp(y1, y2, sizeof y1) == 0);
  /* The pre half saw the rounded streams, not the exact ones: they differ. */
  int differ = 0;
  for (size_t i = 0; i < T * 4 * H; i++) differ += exact[i] != skref_mhc_bf16_to_double(rounded[i]);
  cr_expect(differ > 0);
  free_inputs(&in);
}

Test(mhc_ref_relations, first_layer_pre_is_pre_of_the_broadcast_streams) {
  /* run_pre(x, fn_pre) against the 4-stream pre of [x, x, x, x] with the full fn: the same math,
   * up to fn_pre's fp32 rounding (relative ~6e-8 per entry). */
  rng_init("first_layer_pre_is_pre_of_the_broadcast_streams");
  enum { T = 2, H = 1024 };
  inputs in = make_inputs(T, H);
  static uint16_t broadcast[T * 4 * H], residual_out[T * 4 * H];
  for (int t = 0; t < T; t++)
    for (int s = 0; s < 4; s++) memcpy(broadcast + (t * 4 + s) * H, in.x + t * H, 2 * H);
  for (int norm = 0; norm < 3; norm++) {
    skref_mhc_config cfg = default_config(&in, (skref_mhc_norm_kind)norm);
    float w32[H];
    if (norm == SKREF_MHC_NORM_F32) {
      for (int h = 0; h < H; h++) w32[h] = (float)rng_normal();
      cfg.norm_weight = w32;
    }
    static double y1[T * H], y2[T * H];
    double post1[4 * T], comb1[16 * T], post2[4 * T], comb2[16 * T];
    skref_mhc_coeffs k1[T], k2[T];
    skref_mhc_pre(&cfg, T, in.x, in.fn_pre, residual_out, post1, comb1, y1, k1);
    skref_mhc_pre_streams(&cfg, T, broadcast, in.fn, post2, comb2, y2, k2);
    cr_expect(memcmp(residual_out, broadcast, sizeof broadcast) == 0);
    for (int t = 0; t < T; t++) {
      cr_expect_eq(k1[t].inv_rms, k2[t].inv_rms);
      for (int m = 0; m < 24; m++) EXPECT_NEAR(k1[t].mixes[m], k2[t].mixes[m], 1e-5);
    }
    for (int i = 0; i < 4 * T; i++) EXPECT_NEAR(post1[i], post2[i], 1e-6);
    for (int i = 0; i < 16 * T; i++) EXPECT_NEAR(comb1[i], comb2[i], 1e-6);
    for (int i = 0; i < T * H; i++) {
      /* y_pre may round differently when y_raw sits on a bf16 rounding boundary: one ulp. */
      double tol = norm ? 1.01 * skref_mhc_bf16_ulp(y2[i]) + 1e-9 : 1e-5 * fabs(y2[i]) + 1e-9;
      EXPECT_NEAR(y1[i], y2[i], tol, "norm %d y[%d]: %.9g vs %.9g", norm, i, y1[i], y2[i]);
    }
  }
  free_inputs(&in);
}

Test(mhc_ref_relations, tokens_are_independent_and_zero_tokens_touch_nothing) {
  rng_init("tokens_are_independent_and_zero_tokens_touch_nothing");
  enum { T = 3, H = 256 };
  inputs in = make_inputs(T, H);
  skref_mhc_config cfg = default_config(&in, SKREF_MHC_NORM_BF16);
  double post[4 * T], comb[16 * T], y[T * H];
  skref_mhc_pre_streams(&cfg, T, in.residual, in.fn, post, comb, y, NULL);
  for (int t = 0; t < T; t++) {
    double p1[4], c1[16], y1[H];
    skref_mhc_pre_streams(&cfg, 1, in.residual + t * 4 * H, in.fn, p1, c1, y1, NULL);
    cr_expect(memcmp(p1, post + 4 * t, sizeof p1) == 0);
    cr_expect(memcmp(c1, comb + 16 * t, sizeof c1) == 0);
    cr_expect(memcmp(y1, y + t * H, sizeof y1) == 0);
  }
  double sentinel[4] = {-7, -7, -7, -7};
  skref_mhc_post_pre(&cfg, 0, in.x, in.residual, in.prev_post, in.prev_comb, in.fn, NULL, NULL, sentinel, NULL,
                     NULL, NULL);
  skref_mhc_pre(&cfg, 0, in.x, in.fn_pre, NULL, sentinel, NULL, NULL, NULL);
  for (int i = 0; i < 4; i++) cr_expect_eq(sentinel[i], -7);
  free_inputs(&in);
}

Test(mhc_ref_tolerance, closeness_helpers) {
  /* bf16: 1 ulp at 1.0 is 2^-7; the magnitude term widens the band where terms cancel. */
  cr_expect(skref_mhc_bf16_close(bf16(1.0), 1.0 + 0x1p-8, 0, 1, 0));
  cr_expect(skref_mhc_bf16_close(bf16(1.0), 1.0 + 0x1p-7, 0, 1, 0));
  cr_expect(!skref_mhc_bf16_close(bf16(1.0), 1.0 + 0x1p-6, 0, 1, 0));
  cr_expect(!skref_mhc_bf16_close(bf16(1e-6), 2e-6, 0, 1, 0));
  cr_expect(skref_mhc_bf16_close(bf16(1e-6), 2e-6, 1.0, 1, 2e-6), "cancellation: allowed by the magnitude term");
  cr_expect(!skref_mhc_bf16_close(0x7fc0, 1.0, 1e9, 1e9, 1), "NaN never passes");
  cr_expect(skref_mhc_bf16_close(0x7f80, 1e39, 0, 1, 0), "overflow to +inf matches a reference past the range");
  cr_expect(!skref_mhc_bf16_close(0x7f80, 1.0, 0, 1, 0));
  cr_expect(skref_mhc_f32_close(1.0f, 1.0 + 1e-5));
  cr_expect(!skref_mhc_f32_close(1.0f, 1.0 + 2e-5));
  cr_expect(skref_mhc_f32_close(0.0f, 1.5e-6));
  cr_expect(!skref_mhc_f32_close(NAN, 0.0));
}

Test(mhc_ref_tolerance, magnitudes_bound_the_values) {
  rng_init("magnitudes_bound_the_values");
  enum { T = 2, H = 256 };
  inputs in = make_inputs(T, H);
  static double out[T * 4 * H], mag[T * 4 * H], y[T * H], ymag[T * H];
  skref_mhc_post(T, H, in.x, in.residual, in.prev_post, in.prev_comb, out);
  skref_mhc_post_magnitude(T, H, in.x, in.residual, in.prev_post, in.prev_comb, mag);
  for (int i = 0; i < T * 4 * H; i++) cr_expect(fabs(out[i]) <= mag[i] * (1 + 1e-15) && mag[i] > 0);
  for (int norm = 0; norm < 2; norm++) {
    skref_mhc_config cfg = default_config(&in, norm ? SKREF_MHC_NORM_BF16 : SKREF_MHC_NORM_NONE);
    skref_mhc_coeffs k[T];
    skref_mhc_pre_streams(&cfg, T, in.residual, in.fn, NULL, NULL, y, k);
    skref_mhc_y_magnitude(&cfg, T, in.residual, k, ymag);
    for (int i = 0; i < T * H; i++) {
      /* With a norm, y is built from the bf16-rounded y_pre: allow its half ulp. */
      double slack = norm ? 0x1p-8 * ymag[i] : 1e-15 * ymag[i];
      cr_expect(fabs(y[i]) <= ymag[i] + slack, "norm %d y[%d] %g > magnitude %g", norm, i, y[i], ymag[i]);
    }
  }
  free_inputs(&in);
}

Test(mhc_ref_scratch, partials_formula) {
  cr_expect_eq(skref_mhc_scratch_bytes(1, 4096), 2304u);
  cr_expect_eq(skref_mhc_scratch_bytes(1, 7168), 4032u);
  cr_expect_eq(skref_mhc_scratch_bytes(2048, 4096), 2048u * 16 * 36 * 4);
  cr_expect_eq(skref_mhc_scratch_bytes(0, 4096), 0u);
}
