// SM120 block-scaled mma.sync emulation, driven as the SM120 kernel drives it, against the
// plain double reference over random data.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref/gemm.h"
#include "ref/mma_emu.h"

static uint64_t fresh_seed(const char* what) {
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20) ^ (uint64_t)(uintptr_t)what;
  printf("[%s] seed=%llu\n", what, (unsigned long long)seed);
  return seed;
}

typedef struct {
  uint8_t *ca, *cb;
  void *sa, *sb;
  skref_gemm_operand a, b;
} pair_t;

static void make_pair(pair_t* p, skref_gemm_recipe r, size_t M, size_t N, size_t K, uint64_t* rng) {
  p->ca = malloc(skref_gemm_code_bytes(r, M, K));
  p->cb = malloc(skref_gemm_code_bytes(r, N, K));
  p->sa = malloc(skref_gemm_scale_bytes(r, SKREF_GEMM_A, M, K));
  p->sb = malloc(skref_gemm_scale_bytes(r, SKREF_GEMM_B, N, K));
  skref_gemm_random_operand(r, SKREF_GEMM_A, M, K, rng, p->ca, p->sa);
  skref_gemm_random_operand(r, SKREF_GEMM_B, N, K, rng, p->cb, p->sb);
  p->a = (skref_gemm_operand){r, SKREF_GEMM_A, M, K, p->ca, p->sa};
  p->b = (skref_gemm_operand){r, SKREF_GEMM_B, N, K, p->cb, p->sb};
}

static void free_pair(pair_t* p) {
  free(p->ca); free(p->cb); free(p->sa); free(p->sb);
}

static int compare(const pair_t* p, int fault, double* worst) {
  const size_t M = p->a.rows, N = p->b.rows;
  double* ref = malloc(sizeof(double) * M * N);
  double* absv = malloc(sizeof(double) * M * N);
  double* emu = malloc(sizeof(double) * M * N);
  skref_gemm(&p->a, &p->b, 0.5, ref, absv);
  skref_mma_emu_gemm(&p->a, &p->b, 0.5, emu, fault);
  int bad = 0;
  *worst = 0;
  for (size_t i = 0; i < M * N; ++i) {
    double err = fabs(emu[i] - ref[i]) / (absv[i] + 1e-300);
    if (err > *worst) *worst = err;
    if (!(err <= 1e-12)) ++bad;
  }
  free(ref); free(absv); free(emu);
  return bad;
}

Test(mma_emulation, sm120_driving_scheme_matches_reference) {
  uint64_t rng = fresh_seed("sm120_driving_scheme_matches_reference");
  const skref_gemm_recipe recs[3] = {SKREF_GEMM_NVFP4, SKREF_GEMM_MXFP4, SKREF_GEMM_MXFP8};
  for (int i = 0; i < 3; ++i)
    for (int shape = 0; shape < 2; ++shape) {
      size_t M = shape ? 37 : 32, N = shape ? 45 : 32, K = shape ? 384 : 128;
      pair_t p;
      make_pair(&p, recs[i], M, N, K, &rng);
      double worst;
      int bad = compare(&p, 0, &worst);
      cr_assert_eq(bad, 0, "%s M=%zu N=%zu K=%zu: %d mismatches (worst rel %g)", skref_gemm_recipe_name(recs[i]), M, N,
                   K, bad, worst);
      free_pair(&p);
    }
}

Test(mma_emulation, wrong_thread_id_is_detected) {
  uint64_t rng = fresh_seed("wrong_thread_id_is_detected");
  const skref_gemm_recipe recs[3] = {SKREF_GEMM_NVFP4, SKREF_GEMM_MXFP4, SKREF_GEMM_MXFP8};
  for (int i = 0; i < 3; ++i) {
    pair_t p;
    make_pair(&p, recs[i], 32, 32, 128, &rng);
    double worst;
    cr_assert_gt(compare(&p, 1, &worst), 0, "%s: swapped tid_a went unnoticed", skref_gemm_recipe_name(recs[i]));
    free_pair(&p);
  }
}

Test(mma_emulation, selector_ranges) {
  uint32_t a[32][4] = {{0}}, b[32][2] = {{0}}, sfa[32] = {0}, sfb[32] = {0};
  float c[32][4] = {{0}};
  double d[32][4];
  cr_assert_eq(skref_mma_emu(SKREF_MMA_MXF8_E4M3_K32, a, b, c, sfa, sfb, 3, 1, 3, 3, d), 0);
  cr_assert_eq(skref_mma_emu(SKREF_MMA_MXF8_E4M3_K32, a, b, c, sfa, sfb, 0, 2, 0, 0, d), -1);
  cr_assert_eq(skref_mma_emu(SKREF_MMA_MXF4_K64, a, b, c, sfa, sfb, 1, 0, 0, 0, d), -1);
  cr_assert_eq(skref_mma_emu(SKREF_MMA_MXF4_K64, a, b, c, sfa, sfb, 2, 0, 2, 0, d), 0);
  cr_assert_eq(skref_mma_emu(SKREF_MMA_NVF4_K64, a, b, c, sfa, sfb, 0, 0, 0, 4, d), -1);
}

// One MMA, all codes 1.0 and all scales 1.0 except one A scale byte: exactly the row that the
// documented lane mapping names changes.
Test(mma_emulation, scale_lane_mapping) {
  uint32_t a[32][4], b[32][2], sfa[32], sfb[32];
  float c[32][4] = {{0}};
  double d[32][4];
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) a[l][r] = 0x38383838u;  // e4m3 1.0
    b[l][0] = b[l][1] = 0x38383838u;
    sfa[l] = sfb[l] = 0x7F7F7F7Fu;  // 2^0
  }
  const int m = 11, tid_a = 1, bid = 2;
  sfa[4 * (m % 8) + 2 * tid_a + m / 8] = 0x7F807F7Fu;  // byte 2 = 2^1
  cr_assert_eq(skref_mma_emu(SKREF_MMA_MXF8_E4M3_K32, a, b, c, sfa, sfb, bid, tid_a, bid, 0, d), 0);
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      int row = l / 4 + 8 * (i >> 1);
      cr_assert_eq(d[l][i], row == m ? 64.0 : 32.0, "lane %d reg %d row %d", l, i, row);
    }
  // Column 5 of B from lane 4*5 + tid_b.
  sfa[4 * (m % 8) + 2 * tid_a + m / 8] = 0x7F7F7F7Fu;
  sfb[4 * 5 + 3] = 0x7E7F7F7Fu;  // byte 3 = 2^-1
  cr_assert_eq(skref_mma_emu(SKREF_MMA_MXF8_E4M3_K32, a, b, c, sfa, sfb, 3, 0, 3, 3, d), 0);
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      int col = 2 * (l % 4) + (i & 1);
      cr_assert_eq(d[l][i], col == 5 ? 16.0 : 32.0);
    }
}
