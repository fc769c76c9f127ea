// SM120 block-scaled mma.sync emulation, driven as the SM120 kernel drives it, against the
// plain double reference over random data.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm/ref.h"
#include "common/ref_mma_emu.h"

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

// ---- the SM120 kernel's own index math (ops/gemm/sm120_layout.cuh, included as C) ------

#include "gemm/sm120_layout.cuh"

static const skref_sm120_cfg kSm120Cfgs[] = {
    {128, 128, 2, 4, 4},  // manifest: nvfp4 / mxfp4
    {128, 128, 2, 4, 3},  // manifest: mxfp8 (exactly 99 KB)
    {64, 128, 1, 4, 4},   // small-M
    {32, 32, 1, 1, 2},    // one warp, one 32x32 scale group
    {128, 64, 4, 2, 2},   // 32x32 warp tiles
};

// Runs the block-level simulation and compares with the double reference; C is [M, ldc] with
// ldc = N + 3, prefilled with a sentinel that must survive outside m < M, n < N.
static int sim_compare(const pair_t* p, const skref_sm120_cfg* cfg, int fault, double* worst, int* rc_out) {
  const size_t M = p->a.rows, N = p->b.rows, ldc = N + 3;
  double* ref = malloc(sizeof(double) * M * N);
  double* absv = malloc(sizeof(double) * M * N);
  double* sim = malloc(sizeof(double) * M * ldc);
  const double sentinel = -12345.678;
  for (size_t i = 0; i < M * ldc; ++i) sim[i] = sentinel;
  skref_gemm(&p->a, &p->b, 0.5, ref, absv);
  *rc_out = skref_sm120_sim_gemm(&p->a, &p->b, 0.5, sim, ldc, cfg, fault);
  int bad = 0;
  *worst = 0;
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < ldc; ++n) {
      const double v = sim[m * ldc + n];
      if (n >= N) {
        if (v != sentinel) ++bad;
        continue;
      }
      const double err = fabs(v - ref[m * N + n]) / (absv[m * N + n] + 1e-300);
      if (err > *worst || err != err) *worst = err;
      if (!(err <= 1e-12)) ++bad;
    }
  free(ref); free(absv); free(sim);
  return bad;
}

Test(mma_emulation, sm120_kernel_blocks_match_reference) {
  uint64_t rng = fresh_seed("sm120_kernel_blocks_match_reference");
  const skref_gemm_recipe recs[3] = {SKREF_GEMM_NVFP4, SKREF_GEMM_MXFP4, SKREF_GEMM_MXFP8};
  const size_t shapes[][3] = {{200, 136, 384}, {1, 40, 128}, {129, 257, 256}, {32, 32, 128}};
  for (size_t ci = 0; ci < sizeof kSm120Cfgs / sizeof kSm120Cfgs[0]; ++ci)
    for (int i = 0; i < 3; ++i)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        const skref_sm120_cfg* cfg = &kSm120Cfgs[ci];
        if (sk_sm120_smem_bytes((int)recs[i], cfg->bm, cfg->bn, cfg->stages) > 101376) continue;
        pair_t p;
        make_pair(&p, recs[i], shapes[s][0], shapes[s][1], shapes[s][2], &rng);
        double worst;
        int rc;
        int bad = sim_compare(&p, cfg, SKREF_SM120_FAULT_NONE, &worst, &rc);
        cr_assert_eq(rc, 0, "cfg %zu %s: sim rc %d", ci, skref_gemm_recipe_name(recs[i]), rc);
        cr_assert_eq(bad, 0, "cfg %d x %d warps %dx%d, %s M=%zu N=%zu K=%zu: %d mismatches (worst rel %g)", cfg->bm,
                     cfg->bn, cfg->warps_m, cfg->warps_n, skref_gemm_recipe_name(recs[i]), shapes[s][0], shapes[s][1],
                     shapes[s][2], bad, worst);
        free_pair(&p);
      }
}

// Each deliberate mistake in the kernel's index math must be caught by the comparison above.
Test(mma_emulation, sm120_kernel_faults_are_detected) {
  uint64_t rng = fresh_seed("sm120_kernel_faults_are_detected");
  const skref_gemm_recipe recs[3] = {SKREF_GEMM_NVFP4, SKREF_GEMM_MXFP4, SKREF_GEMM_MXFP8};
  const int faults[] = {SKREF_SM120_FAULT_TID_A, SKREF_SM120_FAULT_NO_SWIZZLE, SKREF_SM120_FAULT_SFB_ROW,
                        SKREF_SM120_FAULT_BID, SKREF_SM120_FAULT_LDSM_B, SKREF_SM120_FAULT_SLAB};
  for (int i = 0; i < 3; ++i)
    for (size_t f = 0; f < sizeof faults / sizeof faults[0]; ++f) {
      if (faults[f] == SKREF_SM120_FAULT_BID && recs[i] == SKREF_GEMM_NVFP4) continue;   // bid is always 0
      if (faults[f] == SKREF_SM120_FAULT_SLAB && recs[i] != SKREF_GEMM_NVFP4) continue;  // 1 slab per stage
      pair_t p;
      make_pair(&p, recs[i], 64, 64, 256, &rng);
      double worst;
      int rc;
      const int bad = sim_compare(&p, &kSm120Cfgs[0], faults[f], &worst, &rc);
      cr_assert(rc != 0 || bad > 0, "%s: fault %d went unnoticed", skref_gemm_recipe_name(recs[i]), faults[f]);
      free_pair(&p);
    }
}

// The scale lanes and ldmatrix fragments the header computes are the ones the instruction
// expects (ops/gemm/gemm.md 5.3), independently of any data.
Test(mma_emulation, sm120_layout_matches_instruction_lanes) {
  for (int tid_a = 0; tid_a < 2; ++tid_a)
    for (int m = 0; m < 16; ++m)  // row m of m tile tid_a is read from lane 4(m%8) + 2 tid_a + m/8
      cr_assert_eq(sk_sm120_sfa_row(4 * (m % 8) + 2 * tid_a + m / 8), 16 * tid_a + m);
  for (int tid_b = 0; tid_b < 4; ++tid_b)
    for (int n = 0; n < 8; ++n) cr_assert_eq(sk_sm120_sfb_row(4 * n + tid_b), 8 * tid_b + n);
  for (int mt = 0; mt < 4; ++mt) cr_assert_eq(16 * mt, 32 * sk_sm120_sfa_reg(mt) + 16 * sk_sm120_tid_a(mt));
  for (int nt = 0; nt < 8; ++nt) cr_assert_eq(8 * nt, 32 * sk_sm120_sfb_reg(nt) + 8 * sk_sm120_tid_b(nt));
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {  // A reg r: row g + 8(r&1), bytes 4t + 16(r>>1)
      const int src = 8 * r + g;
      cr_assert_eq(sk_sm120_ldsm_a_row(src), g + 8 * (r & 1));
      cr_assert_eq(sk_sm120_ldsm_a_byte(src) + 4 * t, 4 * t + 16 * (r >> 1));
    }
    for (int r = 0; r < 4; ++r) {  // B regs: tile r/2, reg r%2: col g, bytes 4t + 16(r%2)
      const int src = 8 * r + g;
      cr_assert_eq(sk_sm120_ldsm_b_row(src), 8 * (r / 2) + g);
      cr_assert_eq(sk_sm120_ldsm_b_byte(src), 16 * (r % 2));
    }
    for (int i = 0; i < 4; ++i) {
      cr_assert_eq(sk_sm120_acc_row(lane, i), g + 8 * (i >> 1));
      cr_assert_eq(sk_sm120_acc_col(lane, i), 2 * t + (i & 1));
    }
  }
  // Byte-ids: nvfp4 0; mxfp4 0, 2; mxfp8 0..3 -- and every slab covers 4 scale columns.
  cr_assert_eq(sk_sm120_mmas_per_slab(0) * sk_sm120_mma_k(0), 4 * 16);
  cr_assert_eq(sk_sm120_bid(1, 1), 2);
  cr_assert_eq(sk_sm120_bid(2, 3), 3);
  for (int r = 0; r < 3; ++r)
    cr_assert_eq(sk_sm120_slabs_per_stage(r) * sk_sm120_mmas_per_slab(r) * 32, sk_sm120_stage_row_bytes(r));
  // Global scale offsets agree with the reference layout.
  for (int rec = 0; rec < 3; ++rec)
    for (int K = 128; K <= 512; K += 128)
      for (int row = 0; row < 300; row += 7)
        for (int ks = 0; ks < K / 128; ++ks)
          for (int slab = 0; slab < sk_sm120_slabs_per_stage(rec); ++slab) {
            const size_t ksc = (size_t)K / (size_t)sk_sm120_scale_vec(rec);
            const size_t col = (size_t)(4 * (ks * sk_sm120_slabs_per_stage(rec) + slab));
            cr_assert_eq((size_t)sk_sm120_scale_gmem_offset(rec, row, ks, slab, K), skref_gemm_swizzled_offset((size_t)row, col, ksc));
          }
  cr_assert_eq(sk_sm120_smem_bytes(0, 128, 128, 4), 73728);
  cr_assert_eq(sk_sm120_smem_bytes(1, 128, 128, 4), 69632);
  cr_assert_eq(sk_sm120_smem_bytes(2, 128, 128, 3), 101376);
}

// Shared-memory properties the kernel relies on: the copy items tile the stage exactly once,
// the swizzle is a bijection, ldmatrix phases and scale reads are bank-conflict free.
Test(mma_emulation, sm120_shared_memory_properties) {
  for (int rec = 0; rec < 3; ++rec) {
    const int RB = sk_sm120_stage_row_bytes(rec), rows = 128, units = rows * RB / 16;
    char* seen = calloc((size_t)units, 1);
    for (int ci = 0; ci < rows * (RB / 16); ++ci) {
      const int r = sk_sm120_copy_row(ci, RB), byte = sk_sm120_copy_byte(ci, RB);
      const int off = sk_sm120_code_smem_offset(r, byte, RB);
      cr_assert(off % 16 == 0 && off >= 0 && off < rows * RB);
      cr_assert_eq(seen[off / 16]++, 0, "recipe %d: chunk %d written twice", rec, off / 16);
    }
    free(seen);
    // ldmatrix: each 8-lane phase reads 8 rows of 16 bytes; they must fall in 8 distinct
    // 16-byte bank groups (offset / 16 mod 8).
    for (int base = 0; base < rows; base += 16)
      for (int kb = 0; kb < RB; kb += 32)
        for (int which = 0; which < 2; ++which)
          for (int ph = 0; ph < 4; ++ph) {
            int groups = 0;
            for (int l = 8 * ph; l < 8 * ph + 8; ++l) {
              const int row = base + (which ? sk_sm120_ldsm_b_row(l) : sk_sm120_ldsm_a_row(l));
              const int byte = kb + (which ? sk_sm120_ldsm_b_byte(l) : sk_sm120_ldsm_a_byte(l));
              groups |= 1 << ((sk_sm120_code_smem_offset(row, byte, RB) / 16) % 8);
            }
            cr_assert_eq(groups, 0xFF, "recipe %d: ldmatrix phase conflicts (rows %d, byte %d)", rec, base, kb);
          }
  }
  unsigned banks = 0;
  for (int lane = 0; lane < 32; ++lane) banks |= 1u << (sk_sm120_scale_smem_word(1, 32 + sk_sm120_sfa_row(lane), 128) % 32);
  cr_assert_eq(banks, 0xFFFFFFFFu);
  banks = 0;
  for (int lane = 0; lane < 32; ++lane) banks |= 1u << (sk_sm120_scale_smem_word(0, 64 + sk_sm120_sfb_row(lane), 128) % 32);
  cr_assert_eq(banks, 0xFFFFFFFFu);
}
