// Checks of the GEMM CPU reference itself: layouts, dequantization, quantizers, pack_weight.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm/ref.h"

static uint64_t fresh_seed(const char* what) {
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20) ^ (uint64_t)(uintptr_t)what;
  printf("[%s] seed=%llu\n", what, (unsigned long long)seed);
  return seed;
}

Test(ref_gemm, decoders) {
  cr_assert_eq(gemm_tmp_e2m1_decode(0x7), 6.0);
  cr_assert_eq(gemm_tmp_e2m1_decode(0x9), -0.5);
  cr_assert_eq(gemm_tmp_e4m3_decode(0x7E), 448.0);
  cr_assert_eq(gemm_tmp_e4m3_decode(0x01), ldexp(1, -9));
  cr_assert_eq(gemm_tmp_e4m3_decode(0x38), 1.0);
  cr_assert(isnan(gemm_tmp_e4m3_decode(0xFF)));
  cr_assert_eq(gemm_tmp_e8m0_decode(127), 1.0);
  cr_assert_eq(gemm_tmp_e8m0_decode(0), ldexp(1, -127));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    float v = (float)gemm_tmp_e4m3_decode((uint8_t)c);
    uint8_t back = gemm_tmp_float_to_e4m3(v);
    cr_assert(back == c || (v == 0 && (back & 0x7F) == 0), "e4m3 round trip %02x -> %02x", c, back);
  }
  cr_assert_eq(gemm_tmp_float_to_e4m3(1000.f), 0x7E);
  cr_assert_eq(gemm_tmp_float_to_e4m3(1.0625f), 0x38);  // tie between 1 and 1.125 -> even
  cr_assert_eq(gemm_tmp_float_to_bf16(1.00390625f), 0x3F80);  // tie -> even
}

Test(ref_gemm, swizzled_layout_is_a_bijection) {
  const size_t rows = 300, ks = 10;  // padded to 384 x 12
  size_t total = skref_gemm_scale_bytes(SKREF_GEMM_MXFP8, SKREF_GEMM_A, rows, ks * 32);
  cr_assert_eq(total, 384 * 12);
  unsigned char* seen = calloc(total, 1);
  for (size_t r = 0; r < 384; ++r)
    for (size_t c = 0; c < 12; ++c) {
      size_t o = skref_gemm_swizzled_offset(r, c, ks);
      cr_assert_lt(o, total);
      cr_assert_eq(seen[o], 0, "offset %zu hit twice", o);
      seen[o] = 1;
    }
  free(seen);
  // Four consecutive scale columns of one row are one aligned u32.
  cr_assert_eq(skref_gemm_swizzled_offset(77, 8, ks) % 4, 0);
  cr_assert_eq(skref_gemm_swizzled_offset(77, 11, ks), skref_gemm_swizzled_offset(77, 8, ks) + 3);
  // Spot value from the formula: row 130, col 5 with 3 k-tiles.
  cr_assert_eq(skref_gemm_swizzled_offset(130, 5, 10), 1 * 3 * 512 + 1 * 512 + 2 * 16 + 0 * 4 + 1);
}

Test(ref_gemm, dequant_hand_values) {
  // NVFP4 row 1, k=16..31 scaled by UE4M3 2.0 (0x40); element 17 = code 0xF (-6) -> -12.
  uint8_t codes[2 * 32] = {0};
  codes[32 + 8] = 0xF0;  // row 1, byte 8 holds elements 16 (low) and 17 (high)
  size_t sb = skref_gemm_scale_bytes(SKREF_GEMM_NVFP4, SKREF_GEMM_B, 2, 64);
  uint8_t* sc = malloc(sb);
  memset(sc, 0x38, sb);
  sc[skref_gemm_swizzled_offset(1, 1, 4)] = 0x40;
  skref_gemm_operand op = {SKREF_GEMM_NVFP4, SKREF_GEMM_B, 2, 64, codes, sc};
  cr_assert_eq(skref_gemm_dequant(&op, 1, 17), -12.0);
  cr_assert_eq(skref_gemm_dequant(&op, 1, 16), 0.0);
  free(sc);
  // Block-FP8 weights: the 128x128 block of row 130, k 200 is sfb[1 * 2 + 1].
  uint8_t c8[256 * 256];
  memset(c8, 0x38, sizeof c8);  // 1.0
  float sfb[4] = {1, 2, 3, 4}, sfa[2 * 2] = {5, 6, 7, 8};
  skref_gemm_operand w = {SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, 256, 256, c8, sfb};
  skref_gemm_operand x = {SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_A, 2, 256, c8, sfa};
  cr_assert_eq(skref_gemm_dequant(&w, 130, 200), 4.0);
  cr_assert_eq(skref_gemm_dequant(&x, 1, 200), 8.0);
  double c[2 * 256];
  skref_gemm(&x, &w, 0.5, c, NULL);
  cr_assert_eq(c[1 * 256 + 130], 0.5 * 128 * (7 * 3 + 8 * 4));
}

Test(ref_gemm, gemm_matches_explicit_sum) {
  uint64_t rng = fresh_seed("gemm_matches_explicit_sum");
  for (int r = 0; r < 5; ++r) {
    const size_t M = 3, N = 5, K = 256;
    skref_gemm_recipe rec = (skref_gemm_recipe)r;
    uint8_t* ca = malloc(skref_gemm_code_bytes(rec, M, K));
    uint8_t* cb = malloc(skref_gemm_code_bytes(rec, N, K));
    void* sa = malloc(skref_gemm_scale_bytes(rec, SKREF_GEMM_A, M, K) + 1);
    void* sbv = malloc(skref_gemm_scale_bytes(rec, SKREF_GEMM_B, N, K) + 1);
    skref_gemm_random_operand(rec, SKREF_GEMM_A, M, K, &rng, ca, sa);
    skref_gemm_random_operand(rec, SKREF_GEMM_B, N, K, &rng, cb, sbv);
    skref_gemm_operand a = {rec, SKREF_GEMM_A, M, K, ca, sa}, b = {rec, SKREF_GEMM_B, N, K, cb, sbv};
    double c[M * N], absv[M * N];
    skref_gemm(&a, &b, 1.5, c, absv);
    for (size_t m = 0; m < M; ++m)
      for (size_t n = 0; n < N; ++n) {
        double s = 0;
        for (size_t k = 0; k < K; ++k) s += skref_gemm_dequant(&a, m, k) * skref_gemm_dequant(&b, n, k);
        cr_assert(fabs(1.5 * s - c[m * N + n]) <= 1e-12 * absv[m * N + n], "%s", skref_gemm_recipe_name(rec));
        cr_assert(absv[m * N + n] > 0);
      }
    free(ca); free(cb); free(sa); free(sbv);
  }
}

Test(ref_gemm, quantize_mxfp8_rows) {
  uint64_t rng = fresh_seed("quantize_mxfp8_rows");
  const size_t rows = 5, k = 256;
  uint16_t x[5 * 256];
  for (size_t i = 0; i < rows * k; ++i)
    x[i] = gemm_tmp_float_to_bf16((float)((skref_gemm_rand_uniform(&rng) - 0.5) * ldexp(1, (int)(i / 32 % 9) - 4)));
  for (size_t i = 0; i < 32; ++i) x[64 + i] = 0;  // one all-zero block -> scale 1.0
  uint8_t codes[5 * 256], sc[128 * 8];
  skref_gemm_quantize_mxfp8_rows(x, rows, k, codes, sc);
  skref_gemm_operand op = {SKREF_GEMM_MXFP8, SKREF_GEMM_A, rows, k, codes, sc};
  cr_assert_eq(sc[skref_gemm_swizzled_offset(0, 2, 8)], 127);
  for (size_t r = 0; r < rows; ++r)
    for (size_t kk = 0; kk < k; ++kk) {
      double v = gemm_tmp_bf16_to_float(x[r * k + kk]), q = skref_gemm_dequant(&op, r, kk);
      double s = gemm_tmp_e8m0_decode(sc[skref_gemm_swizzled_offset(r, kk / 32, 8)]);
      // E4M3 half-ulp (2^-4 relative) or subnormal step 2^-10 * scale.
      cr_assert(fabs(v - q) <= fmax(fabs(v) * 0.0625, ldexp(s, -10)), "r%zu k%zu %g vs %g", r, kk, v, q);
    }
}

Test(ref_gemm, quantize_block_fp8_rows) {
  uint64_t rng = fresh_seed("quantize_block_fp8_rows");
  const size_t rows = 3, k = 256;
  uint16_t x[3 * 256];
  for (size_t i = 0; i < rows * k; ++i) x[i] = gemm_tmp_float_to_bf16((float)(skref_gemm_rand_uniform(&rng) * 8 - 4));
  uint8_t codes[3 * 256];
  float sc[3 * 2];
  skref_gemm_quantize_block_fp8_rows(x, rows, k, codes, sc);
  skref_gemm_operand op = {SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_A, rows, k, codes, sc};
  for (size_t i = 0; i < rows * k; ++i) {
    double v = gemm_tmp_bf16_to_float(x[i]), q = skref_gemm_dequant(&op, i / k, i % k);
    cr_assert(fabs(v - q) <= fabs(v) * 0.0625 + ldexp(sc[i / k * 2 + i % k / 128], -10));
  }
}

Test(ref_gemm, pack_weight_keeps_the_product) {
  uint64_t rng = fresh_seed("pack_weight_keeps_the_product");
  for (int r = 0; r < 5; ++r) {
    skref_gemm_recipe rec = (skref_gemm_recipe)r;
    const size_t M = 2, N = 131, K = r == SKREF_GEMM_NVFP4 ? 80 : 96, KP = skref_gemm_padded_k(K);
    if (rec == SKREF_GEMM_BLOCK_FP8) continue;  // block-FP8 needs K % 128 == 0 by contract
    uint8_t* ca = malloc(skref_gemm_code_bytes(rec, M, K));
    uint8_t* cb = malloc(skref_gemm_code_bytes(rec, N, K));
    void* sa = malloc(skref_gemm_scale_bytes(rec, SKREF_GEMM_A, M, K) + 1);
    void* sbv = malloc(skref_gemm_scale_bytes(rec, SKREF_GEMM_B, N, K) + 1);
    skref_gemm_random_operand(rec, SKREF_GEMM_A, M, K, &rng, ca, sa);
    skref_gemm_random_operand(rec, SKREF_GEMM_B, N, K, &rng, cb, sbv);
    uint8_t* pa = malloc(skref_gemm_code_bytes(rec, M, KP));
    uint8_t* pb = malloc(skref_gemm_code_bytes(rec, N, KP));
    void* psa = malloc(skref_gemm_scale_bytes(rec, SKREF_GEMM_A, M, KP) + 1);
    void* psb = malloc(skref_gemm_scale_bytes(rec, SKREF_GEMM_B, N, KP) + 1);
    skref_gemm_pack_weight(rec, M, K, ca, sa, pa, psa);
    skref_gemm_pack_weight(rec, N, K, cb, sbv, pb, psb);
    skref_gemm_operand a = {rec, SKREF_GEMM_A, M, K, ca, sa}, b = {rec, SKREF_GEMM_B, N, K, cb, sbv};
    skref_gemm_operand a2 = {rec, SKREF_GEMM_A, M, KP, pa, psa}, b2 = {rec, SKREF_GEMM_B, N, KP, pb, psb};
    double c1[2 * 131], c2[2 * 131];
    skref_gemm(&a, &b, 1.0, c1, NULL);
    skref_gemm(&a2, &b2, 1.0, c2, NULL);
    for (size_t i = 0; i < M * N; ++i) cr_assert_eq(c1[i], c2[i], "%s %zu", skref_gemm_recipe_name(rec), i);
    free(ca); free(cb); free(sa); free(sbv); free(pa); free(pb); free(psa); free(psb);
  }
}

Test(ref_gemm, output_rounding) {
  cr_assert_eq(skref_gemm_round_out(SKREF_GEMM_OUT_BF16, 1.00390625), 1.0);
  cr_assert_eq(skref_gemm_round_out(SKREF_GEMM_OUT_BF16, 1.01171875), 1.015625);
  cr_assert_eq(skref_gemm_round_out(SKREF_GEMM_OUT_FP16, 1.0 + ldexp(1, -11)), 1.0);
  cr_assert_eq(skref_gemm_round_out(SKREF_GEMM_OUT_FP16, ldexp(3, -26)), ldexp(1, -24));
  uint64_t rng = fresh_seed("output_rounding");
  for (int i = 0; i < 10000; ++i) {
    float f = (float)((skref_gemm_rand_uniform(&rng) - 0.5) * 1e4);
    cr_assert_eq(skref_gemm_round_out(SKREF_GEMM_OUT_BF16, f), gemm_tmp_bf16_to_float(gemm_tmp_float_to_bf16(f)));
  }
}
