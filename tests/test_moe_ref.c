/* moe.fused_moe / moe.ep_moe without a GPU: the weight preparation (W1 orders, padding), the
 * planning math of ops/moe/plan.cuh replayed on the CPU (slots, stream-K units, route packing,
 * tiles, row maps, scratch regions, shared memory), the fp32 activations and the E2M1 -> BF16
 * decode the kernels share with the trace, reference properties (EP partials, skipped ids, top-k
 * ties), and the SM120 block-scaled path emulated fragment by fragment (ops/common/ref_mma_emu.c)
 * against the exact NVFP4 trace. Fresh seeds (printed; SK_SEED replays). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ref.h"
#include "common/ref_mma_emu.h"
#include "gemm/ref.h"
#include "gemm/sm120_layout.cuh"
#include "moe/act.cuh"
#include "moe/e2m1_bf16.cuh"
#include "moe/plan.cuh"
#include "moe/prep.h"
#include "moe/ref.h"

static skref_rng seeded(const char *what) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed(what));
  return rng;
}

/* ---- weight preparation ------------------------------------------------------------------------ */
Test(moe_ref, prepare_w1_orders_round_trip_and_padding) {
  skref_rng rng = seeded("moe prep");
  const int shapes[3][2] = {{128, 256}, {2880, 2880}, {48, 96}}; /* N, K: padded and unpadded */
  for (int s = 0; s < 3; s++)
    for (int wfmt = 0; wfmt < 2; wfmt++)
      for (int act = 0; act < 3; act++) {
        const int n = shapes[s][0], k = shapes[s][1], e = 2;
        if (n % sk_moe_scale_vec(wfmt)) continue;
        const int rows = sk_moe_gated(act) ? 2 * n : n, vec = sk_moe_scale_vec(wfmt);
        const size_t cb = (size_t)rows * k / 2, sb = (size_t)rows * (k / vec);
        uint8_t *codes = malloc(cb * e), *scales = malloc(sb * e);
        for (size_t i = 0; i < cb * e; i++) codes[i] = (uint8_t)skref_rng_u32(&rng);
        for (size_t i = 0; i < sb * e; i++) scales[i] = (uint8_t)(wfmt ? 10 + skref_rng_below(&rng, 127) : skref_rng_below(&rng, 0x7F));
        sk_moe_prepared_sizes sz;
        cr_assert_eq(sk_moe_prepared_sizes_of(wfmt, act, n, k, &sz), SK_OK);
        uint8_t *pc[3], *ps[3];
        for (int order = 0; order < 3; order++) {
          pc[order] = malloc(sz.w1_codes * e), ps[order] = malloc(sz.w1_scales * e);
          cr_assert_eq(sk_moe_prepare_w1(wfmt, act, order, SK_MOE_SRC_SCALES_ROWS, e, n, k, codes, scales, pc[order], ps[order]), SK_OK);
          /* round trip per expert */
          uint8_t *back_c = malloc(cb), *back_s = malloc(sb);
          for (int x = 0; x < e; x++) {
            cr_assert_eq(sk_moe_unprepare_w1(wfmt, act, order, n, k, pc[order] + x * sz.w1_codes, ps[order] + x * sz.w1_scales, back_c,
                                             back_s), SK_OK);
            cr_expect(!memcmp(back_c, codes + x * cb, cb) && !memcmp(back_s, scales + x * sb, sb),
                      "order %d wfmt %d act %d N %d K %d expert %d: round trip differs", order, wfmt, act, n, k, x);
          }
          free(back_c), free(back_s);
          /* the prepared layout: row (half, i) of expert x is source row sk_moe_w1_source_row */
          const long long np = sk_moe_padded(n), kp = sk_moe_padded(k);
          for (int x = 0; x < e; x++)
            for (long long r = 0; r < sk_moe_w1_rows(act, np); r++) {
              const int half = (int)(r / np);
              const long long i = r % np;
              const uint8_t *row = pc[order] + x * sz.w1_codes + r * (kp / 2);
              for (long long c = 0; c < kp / 2; c++) {
                const uint8_t want = i < n && c < k / 2 ? codes[x * cb + sk_moe_w1_source_row(order, act, half, i, n) * (k / 2) + c] : 0;
                if (row[c] != want) {
                  cr_expect_eq(row[c], want, "order %d: expert %d row %lld byte %lld", order, x, r, c);
                  r = 1 << 30;
                  break;
                }
              }
              for (long long b = 0; b < kp / vec && r < (1 << 30); b++) {
                const uint8_t got = ps[order][x * sz.w1_scales + sk_moe_swizzled_offset(r, b, kp / vec)];
                const uint8_t want = i < n && b < k / vec ? scales[x * sb + sk_moe_w1_source_row(order, act, half, i, n) * (k / vec) + b]
                                                          : (wfmt ? 127 : 0x38);
                if (got != want) {
                  cr_expect_eq(got, want, "order %d: expert %d row %lld scale %lld", order, x, r, b);
                  break;
                }
              }
            }
        }
        /* the same expert matrix given in two orders prepares to the same bytes */
        if (sk_moe_gated(act)) {
          uint8_t *flip_c = malloc(cb * e), *flip_s = malloc(sb * e), *fc = malloc(sz.w1_codes * e), *fs = malloc(sz.w1_scales * e);
          for (int x = 0; x < e; x++)
            cr_assert_eq(sk_moe_unprepare_w1(wfmt, act, SK_MOE_W1_GATE_UP, n, k, pc[0] + x * sz.w1_codes, ps[0] + x * sz.w1_scales,
                                             flip_c + x * cb, flip_s + x * sb), SK_OK);
          cr_assert_eq(sk_moe_prepare_w1(wfmt, act, SK_MOE_W1_GATE_UP, SK_MOE_SRC_SCALES_ROWS, e, n, k, flip_c, flip_s, fc, fs), SK_OK);
          cr_expect(!memcmp(fc, pc[0], sz.w1_codes * e) && !memcmp(fs, ps[0], sz.w1_scales * e), "gate-first flip differs");
          free(flip_c), free(flip_s), free(fc), free(fs);
        }
        for (int order = 0; order < 3; order++) free(pc[order]), free(ps[order]);
        free(codes), free(scales);
      }
}

Test(moe_ref, prepare_swizzled_source_w2_and_rejections) {
  skref_rng rng = seeded("moe prep w2");
  const int n = 96, k = 160, e = 3; /* N -> 128, K -> 256 */
  for (int wfmt = 0; wfmt < 2; wfmt++) {
    if (n % sk_moe_scale_vec(wfmt)) continue;
    const int vec = sk_moe_scale_vec(wfmt);
    const size_t cb = (size_t)k * n / 2, sbr = (size_t)k * (n / vec), sbs = (size_t)sk_moe_swizzled_bytes(k, n / vec);
    uint8_t *codes = malloc(cb * e), *rows = malloc(sbr * e), *swz = calloc(sbs * e, 1);
    for (size_t i = 0; i < cb * e; i++) codes[i] = (uint8_t)skref_rng_u32(&rng);
    for (int x = 0; x < e; x++)
      for (int r = 0; r < k; r++)
        for (int b = 0; b < n / vec; b++) {
          const uint8_t v = (uint8_t)(wfmt ? 100 + skref_rng_below(&rng, 30) : 0x30 + skref_rng_below(&rng, 30));
          rows[x * sbr + r * (n / vec) + b] = v;
          swz[x * sbs + sk_moe_swizzled_offset(r, b, n / vec)] = v;
        }
    sk_moe_prepared_sizes sz;
    cr_assert_eq(sk_moe_prepared_sizes_of(wfmt, SK_MOE_ACT_SILU, n, k, &sz), SK_OK);
    uint8_t *c1 = malloc(sz.w2_codes * e), *s1 = malloc(sz.w2_scales * e), *c2 = malloc(sz.w2_codes * e), *s2 = malloc(sz.w2_scales * e);
    cr_assert_eq(sk_moe_prepare_w2(wfmt, SK_MOE_SRC_SCALES_ROWS, e, n, k, codes, rows, c1, s1), SK_OK);
    cr_assert_eq(sk_moe_prepare_w2(wfmt, SK_MOE_SRC_SCALES_SWIZZLED, e, n, k, codes, swz, c2, s2), SK_OK);
    cr_expect(!memcmp(c1, c2, sz.w2_codes * e) && !memcmp(s1, s2, sz.w2_scales * e), "row-major and swizzled sources differ");
    const long long np = sk_moe_padded(n);
    for (int x = 0; x < e; x++)
      for (int r = 0; r < k; r++) {
        cr_expect(!memcmp(c1 + x * sz.w2_codes + r * (np / 2), codes + x * cb + r * (n / 2), n / 2), "W2 row %d", r);
        for (long long b = n / 2; b < np / 2; b++) cr_expect_eq(c1[x * sz.w2_codes + r * (np / 2) + b], 0);
      }
    if (wfmt == SK_MOE_WFMT_MXFP4) { /* UE8M0 outside [10, 136]: the W4A16 dequantization would not be exact */
      rows[5] = 137;
      cr_expect_eq(sk_moe_prepare_w2(wfmt, SK_MOE_SRC_SCALES_ROWS, e, n, k, codes, rows, c1, s1), SK_ERR_UNSUPPORTED);
      cr_expect(strstr(sk_last_error_message(), "UE8M0 scale code 137"), "message: %s", sk_last_error_message());
      rows[5] = 9;
      cr_expect_eq(sk_moe_prepare_w2(wfmt, SK_MOE_SRC_SCALES_ROWS, e, n, k, codes, rows, c1, s1), SK_ERR_UNSUPPORTED);
    }
    free(codes), free(rows), free(swz), free(c1), free(s1), free(c2), free(s2);
  }
  sk_moe_prepared_sizes sz;
  cr_expect_eq(sk_moe_prepared_sizes_of(SK_MOE_WFMT_NVFP4, SK_MOE_ACT_SILU, 100, 256, &sz), SK_ERR_INVALID_ARGUMENT); /* N % 16 */
  cr_expect(strstr(sk_last_error_message(), "n = 100"), "message: %s", sk_last_error_message());
  cr_expect_eq(sk_moe_prepared_sizes_of(SK_MOE_WFMT_MXFP4, SK_MOE_ACT_SILU, 48, 256, &sz), SK_ERR_INVALID_ARGUMENT);  /* N % 32 */
  cr_expect_eq(sk_moe_prepared_sizes_of(SK_MOE_WFMT_NVFP4, SK_MOE_ACT_SILU, 128, 200, &sz), SK_ERR_INVALID_ARGUMENT); /* K % 32 */
  cr_expect_eq(sk_moe_prepare_w1(0, 0, 7, 0, 1, 128, 128, (uint8_t *)&sz, (uint8_t *)&sz, (uint8_t *)&sz, (uint8_t *)&sz),
               SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "sk_moe_prepare_w1: unknown W1 order 7"), "message: %s", sk_last_error_message());
}

/* ---- planning math --------------------------------------------------------------------------- */
static const struct { const char *name; int k, n, e, topk, wfmt, act; } kShapes[] = {
    {"qwen3.5-397b tp4", 4096, 256, 512, 10, 0, 0}, {"deepseek-v4-flash", 6144, 2048, 256, 8, 1, 0},
    {"gpt-oss-120b", 2880, 2880, 128, 4, 1, 2},      {"qwen3-30b-a3b", 2048, 768, 128, 8, 0, 0},
};

Test(moe_ref, scratch_regions_smem_and_launches) {
  const long long tokens[] = {1, 2, 8, 9, 64, 512, 4096, 16384};
  for (int s = 0; s < 4; s++)
    for (int recipe = 0; recipe < 2; recipe++)
      for (int sm120 = 0; sm120 < 2; sm120++)
        for (int comb = 0; comb < 2; comb++)
          for (size_t ti = 0; ti < sizeof tokens / sizeof tokens[0]; ti++) {
            const int wfmt = recipe == SK_MOE_W4A4 ? SK_MOE_WFMT_NVFP4 : kShapes[s].wfmt;
            sk_moe_dims d = {tokens[ti], kShapes[s].topk, kShapes[s].e, kShapes[s].k, kShapes[s].n, kShapes[s].act, recipe, wfmt, 170, sm120, comb, 0};
            sk_moe_scratch x;
            cr_assert_eq(sk_moe_scratch_layout(&d, &x), 0, "%s", kShapes[s].name);
            const long long offs[] = {x.micro_counters, x.micro_table, x.micro_partials, x.micro_inter, x.micro_inter_scales, x.micro_down,
                                      x.flags, x.expert_count, x.expert_offset, x.tiles, x.route_of_row, x.route_pos, x.packed_a,
                                      x.packed_a_scales, x.inter, x.inter_scales, x.out_acc, x.total};
            for (size_t i = 0; i + 1 < sizeof offs / sizeof offs[0]; i++) {
              cr_expect_eq(offs[i] % SK_MOE_SCRATCH_ALIGN, 0, "region %zu misaligned", i);
              cr_expect_leq(offs[i], offs[i + 1], "region %zu overlaps", i);
            }
            /* sizes the kernels rely on */
            const long long routes = d.max_tokens * d.topk, np = sk_moe_padded(d.n);
            cr_expect_geq(x.max_rows, routes);
            cr_expect_geq(x.out_acc + 4LL * d.k * (comb == SK_MOE_COMBINE_DET ? routes : d.max_tokens), x.out_acc);
            cr_expect_geq(x.inter_scales - x.inter, recipe ? x.max_rows * np / 2 : x.max_rows * np * 2);
            /* shared memory of every launch within 99 KB; the launch list of both regimes */
            for (int regime = 0; regime < 2; regime++) {
              sk_moe_launch seq[8];
              const int nl = sk_moe_launch_sequence(&d, &x, d.max_tokens, regime, seq);
              if (regime == SK_MOE_REGIME_MICRO && d.max_tokens > 8) {
                cr_expect_eq(nl, -1);
                continue;
              }
              cr_assert_gt(nl, 0);
              cr_expect_eq(nl, regime == SK_MOE_REGIME_MICRO ? 2 : (recipe ? 5 : 4));
              for (int i = 0; i < nl; i++) {
                cr_expect_leq(seq[i].smem, SK_MOE_SMEM_LIMIT, "%s: %s smem %u", kShapes[s].name, seq[i].name, seq[i].smem);
                cr_expect(seq[i].grid[0] >= 1 && seq[i].grid[1] >= 1 && seq[i].block >= 32 && seq[i].block <= 1024, "%s", seq[i].name);
              }
            }
          }
  /* the shared-memory formulas at every tile config */
  for (int bm = 16; bm <= 128; bm *= 2) {
    cr_expect_leq(sk_moe_w4a16_smem_bytes(bm, SK_MOE_GROUPED_BN, 4), SK_MOE_SMEM_LIMIT);
    cr_expect_leq(sk_moe_w4a4_smem_bytes(bm, SK_MOE_GROUPED_BN, 2, 3), SK_MOE_SMEM_LIMIT);
    if (bm >= 32) cr_expect_leq(sk_moe_sm120_smem_bytes(bm, SK_MOE_GROUPED_BN, 4), SK_MOE_SMEM_LIMIT);
  }
  cr_expect_eq(sk_moe_sm120_smem_bytes(128, 128, 4), sk_sm120_smem_bytes(0, 128, 128, 4), "SM120 stage = the gemm kernel's");
}

/* The slot table: every kept route exactly once, in (expert, route) order, <= 8 per slot. */
Test(moe_ref, micro_slots_take_every_route_once) {
  skref_rng rng = seeded("moe slots");
  for (int iter = 0; iter < 300; iter++) {
    const int routes = 1 + (int)skref_rng_below(&rng, SK_MOE_MICRO_MAX_ROUTES), e = 1 + (int)skref_rng_below(&rng, 40);
    int local[SK_MOE_MICRO_MAX_ROUTES], se[SK_MOE_MICRO_MAX_ROUTES], sc[SK_MOE_MICRO_MAX_ROUTES], seen[SK_MOE_MICRO_MAX_ROUTES] = {0};
    int (*sr)[SK_MOE_SLOT_COLS] = malloc(sizeof(int) * SK_MOE_MICRO_MAX_ROUTES * SK_MOE_SLOT_COLS);
    for (int r = 0; r < routes; r++) local[r] = skref_rng_below(&rng, 8) == 0 ? -1 : (int)skref_rng_below(&rng, (uint64_t)e);
    const int slots = sk_moe_micro_slots_serial(local, routes, se, sc, sr);
    cr_assert_leq(slots, sk_moe_micro_max_slots(routes, 1, e));
    int prev_e = -1, prev_r = -1;
    for (int s = 0; s < slots; s++) {
      cr_assert(sc[s] >= 1 && sc[s] <= SK_MOE_SLOT_COLS);
      for (int c = 0; c < sc[s]; c++) {
        const int r = sr[s][c];
        cr_assert_eq(local[r], se[s]);
        cr_assert(se[s] > prev_e || (se[s] == prev_e && r > prev_r), "order");
        if (se[s] == prev_e && c == 0) cr_assert_eq(sc[s - 1], SK_MOE_SLOT_COLS, "a slot is cut only when full");
        prev_e = se[s], prev_r = r;
        seen[r]++;
      }
    }
    for (int r = 0; r < routes; r++) cr_assert_eq(seen[r], local[r] >= 0 ? 1 : 0, "route %d taken %d times", r, seen[r]);
    free(sr);
  }
}

/* Micro stream-K: every (slot, tile, step) unit taken by exactly one CTA, tiles' CTA spans agree. */
Test(moe_ref, micro_units_split_once) {
  for (int s = 0; s < 4; s++)
    for (int slots = 1; slots <= 80; slots += 13)
      for (int phase = 1; phase <= 2; phase++) {
        const int np = (int)sk_moe_padded(kShapes[s].n), kp = (int)sk_moe_padded(kShapes[s].k);
        const int tiles = phase == 1 ? sk_moe_micro_tiles_fc1(kShapes[s].act, np) : sk_moe_micro_tiles_fc2(kShapes[s].k);
        const int steps = sk_moe_micro_steps(phase == 1 ? kp : np), units = slots * tiles * steps;
        const int grid = sk_moe_micro_grid(0, 0, 132), ctas = grid < units ? grid : units;
        char *taken = calloc((size_t)units, 1);
        for (int c = 0; c < ctas; c++)
          for (int u = sk_decode_cta_begin(c, units, ctas); u < sk_decode_cta_begin(c + 1, units, ctas); u++) {
            taken[u]++;
            cr_assert_eq(sk_decode_cta_of_unit(u, units, ctas), c);
          }
        for (int u = 0; u < units; u++) cr_assert_eq(taken[u], 1, "unit %d", u);
        free(taken);
      }
  /* FC1 tiles cover every W1 row once; up and gate rows of a column share the tile */
  for (int act = 0; act < 3; act++) {
    const int np = 384, rows = (int)sk_moe_w1_rows(act, np);
    char *seen = calloc((size_t)rows, 1);
    for (int t = 0; t < sk_moe_micro_tiles_fc1(act, np); t++)
      for (int r = 0; r < SK_MOE_MICRO_TILE_ROWS; r++) {
        const int row = sk_moe_micro_fc1_row(act, np, t, r);
        seen[row]++;
        if (sk_moe_gated(act) && r < 16) cr_expect_eq(sk_moe_micro_fc1_row(act, np, t, r + 16), row + np);
      }
    for (int i = 0; i < rows; i++) cr_expect_eq(seen[i], 1, "act %d row %d", act, i);
    free(seen);
    seen = calloc((size_t)rows, 1);
    for (int t = 0; t < sk_moe_grouped_fc1_ntiles(act, np); t++)
      for (int r = 0; r < SK_MOE_GROUPED_BN; r++) {
        const int row = sk_moe_grouped_fc1_row(act, np, t, r);
        seen[row]++;
        if (sk_moe_gated(act) && !(r & 1)) cr_expect_eq(sk_moe_grouped_fc1_row(act, np, t, r + 1), row + np);
      }
    for (int i = 0; i < rows; i++) cr_expect_eq(seen[i], 1, "grouped act %d row %d", act, i);
    free(seen);
  }
}

/* route_pack's model: counts, padded segments, tiles of BM rows, every kept route once. */
Test(moe_ref, grouped_packing_covers_routes) {
  skref_rng rng = seeded("moe pack");
  for (int iter = 0; iter < 60; iter++) {
    const int e = 1 + (int)skref_rng_below(&rng, 300), topk = 1 + (int)skref_rng_below(&rng, 10);
    const long long m = 9 + (long long)skref_rng_below(&rng, 3000), routes = m * topk;
    const int variant = iter % 3; /* random, all on one expert, half the experts empty */
    int *cnt = calloc((size_t)e, sizeof(int)), *local = malloc(sizeof(int) * routes);
    for (long long r = 0; r < routes; r++) {
      local[r] = variant == 1 ? e / 2 : variant == 2 ? 2 * (int)skref_rng_below(&rng, (uint64_t)(e + 1) / 2) % e : (int)skref_rng_below(&rng, (uint64_t)e);
      if (skref_rng_below(&rng, 50) == 0) local[r] = -1;
      if (local[r] >= 0) cnt[local[r]]++;
    }
    const int bm = sk_moe_grouped_bm(routes, e, iter & 1);
    long long rows = 0, tiles = 0;
    for (int x = 0; x < e; x++) rows += sk_moe_round_up(cnt[x], bm), tiles += sk_moe_cdiv(cnt[x], bm);
    cr_expect_leq(tiles, sk_moe_grouped_max_tiles(routes, e, bm), "tiles %lld", tiles);
    cr_expect_leq(rows, sk_moe_grouped_max_rows(routes, e, bm));
    cr_expect_eq(rows, tiles * bm, "tile t covers rows [t BM, (t + 1) BM)");
    free(cnt), free(local);
  }
}

/* ---- shared device code ------------------------------------------------------------------------ */
Test(moe_ref, e2m1_to_bf16_decode_is_exact) {
  for (unsigned a = 0; a < 65536; a++) {
    const unsigned w = a | (a * 2654435761u & 0xFFFF0000u);
    unsigned p[4];
    sk_moe_e2m1x8_to_bf16x2_raw(w, p);
    for (int j = 0; j < 4; j++) {
      const uint8_t b = (uint8_t)(w >> (8 * j));
      const double lo = skref_bf16_to_float((uint16_t)(p[j] & 0xFFFF)) * ldexp(1, 126);
      const double hi = skref_bf16_to_float((uint16_t)(p[j] >> 16)) * ldexp(1, 126);
      cr_assert(lo == skref_e2m1_decode(b & 15) && hi == skref_e2m1_decode(b >> 4), "word %08x pair %d", w, j);
      cr_assert_eq(p[j] >> 15 & 1, (b >> 3) & 1u, "sign of -0 kept");
    }
  }
}

static double ulp_f32(double x) { return ldexp(1.0, (x == 0 ? -149 : ilogb(x)) - 23); }

Test(moe_ref, activations_against_double) {
  double worst = 0;
  for (double x = -103.5; x < 88.7; x += 0.0137) {
    const float xf = (float)x;
    const double ref = exp((double)xf), got = sk_moe_expf(xf);
    if (ref > 1e-37) worst = fmax(worst, fabs(got - ref) / ulp_f32(ref));
  }
  cr_expect_leq(worst, 2.0, "sk_moe_expf: %.2f ulp", worst);
  cr_expect(isinf(sk_moe_expf(100.0f)) && sk_moe_expf(-200.0f) == 0.0f && isnan(sk_moe_expf(NAN)));
  for (double g = -30; g < 30; g += 0.071)
    for (double u = -9; u < 9; u += 1.37) {
      const float gf = (float)g, uf = (float)u;
      const double s = gf / (1 + exp(-(double)gf)) * uf;
      cr_expect_leq(fabs(sk_moe_act(SK_MOE_ACT_SILU, gf, uf, INFINITY, 0, 0) - s), 1e-6 * (1.0 + 0.2 * fabs(g)) * fabs(s) + 1e-30);
      const double gc = fmin(gf, 7.0), uc = fmin(fmax(uf, -7.0), 7.0), gs = gc / (1 + exp(-1.702 * gc));
      /* bound: fp32 rounding of u + beta (cancellation), of alpha g (times |alpha g| through exp)
       * and of the products */
      const double o = gs * (uc + 1.0);
      cr_expect_leq(fabs(sk_moe_act(SK_MOE_ACT_SWIGLU_OAI, gf, uf, 7.0f, 1.702f, 1.0f) - o),
                    1e-6 * (1.0 + 0.2 * fabs(gc)) * fabs(gs) * (fabs(uc) + 1.0) + 1e-30);
    }
  cr_expect_eq(sk_moe_act(SK_MOE_ACT_RELU2, -3.0f, 0, INFINITY, 0, 0), 0.0f);
  cr_expect_eq(sk_moe_act(SK_MOE_ACT_RELU2, 3.0f, 0, INFINITY, 0, 0), 9.0f);
  cr_expect(isnan(sk_moe_act(SK_MOE_ACT_RELU2, NAN, 0, INFINITY, 0, 0)));
  /* the SiLU clamp (DeepSeek-V4: 10): gate clamped from above, up to [-10, 10] */
  cr_expect_eq(sk_moe_act(SK_MOE_ACT_SILU, 50.0f, -40.0f, 10.0f, 0, 0), sk_moe_act(SK_MOE_ACT_SILU, 10.0f, -10.0f, INFINITY, 0, 0));
}

/* ---- reference properties ------------------------------------------------------------------------ */
typedef struct {
  uint8_t *w1c, *w1s, *w2c, *w2s;
  float *g1, *g2, *a1, *a2;
  sk_moe_prepared_sizes sz;
} ws_t;
static void ws_make(ws_t *w, skref_rng *rng, int wfmt, int act, int e, int n, int k, int scale_mode) {
  sk_moe_prepared_sizes_of(wfmt, act, n, k, &w->sz);
  w->w1c = malloc(w->sz.w1_codes * e), w->w1s = malloc(w->sz.w1_scales * e);
  w->w2c = malloc(w->sz.w2_codes * e), w->w2s = malloc(w->sz.w2_scales * e);
  w->g1 = malloc(4 * e), w->g2 = malloc(4 * e), w->a1 = malloc(4 * e), w->a2 = malloc(4 * e);
  skref_moe_random_weights(rng, wfmt, act, e, n, k, scale_mode, w->w1c, w->w1s, w->w2c, w->w2s, w->g1, w->g2, w->a1, w->a2, 64.0f);
}
static void ws_free(ws_t *w) {
  free(w->w1c), free(w->w1s), free(w->w2c), free(w->w2s), free(w->g1), free(w->g2), free(w->a1), free(w->a2);
}

Test(moe_ref, ep_partials_skipped_ids_and_apply_on_input) {
  skref_rng rng = seeded("moe ref props");
  const int e = 12, n = 128, k = 256, m = 5, topk = 3;
  ws_t w;
  ws_make(&w, &rng, SK_MOE_WFMT_NVFP4, SK_MOE_ACT_SILU, e, n, k, 0);
  skref_moe_weights rw = {0, 0, e, k, n, w.w1c, w.w1s, w.w2c, w.w2s, w.g1, w.g2, w.a1, w.a2};
  uint16_t *x = malloc(2 * m * k);
  skref_fill_normal(&rng, x, (size_t)m * k, SKREF_BF16, 1.0f, 0, 1);
  int64_t ids[m * topk];
  float wts[m * topk];
  for (int i = 0; i < m * topk; i++) ids[i] = (i * 5 + i / topk) % e, wts[i] = 0.25f + 0.05f * (float)i;
  skref_moe_act_params ap = {INFINITY, 0, 0};
  double *fused = malloc(8 * m * k), *part = malloc(8 * m * k), *sum = calloc((size_t)m * k, 8);
  skref_moe_routes rt = {m, topk, ids, wts, e, NULL, 0};
  cr_expect_eq(skref_moe_w4a16(&rw, &rt, &ap, x, fused, NULL), 0);
  /* two ranks: experts split by parity; a rank's weights are its experts in ascending order */
  for (int rank = 0; rank < 2; rank++) {
    int32_t map[e];
    int el = 0;
    ws_t lw = w;
    lw.w1c = malloc(w.sz.w1_codes * e), lw.w1s = malloc(w.sz.w1_scales * e), lw.w2c = malloc(w.sz.w2_codes * e);
    lw.w2s = malloc(w.sz.w2_scales * e), lw.g1 = malloc(4 * e), lw.g2 = malloc(4 * e);
    for (int g = 0; g < e; g++) {
      map[g] = g % 2 == rank ? el : -1;
      if (map[g] < 0) continue;
      memcpy(lw.w1c + el * w.sz.w1_codes, w.w1c + g * w.sz.w1_codes, w.sz.w1_codes);
      memcpy(lw.w1s + el * w.sz.w1_scales, w.w1s + g * w.sz.w1_scales, w.sz.w1_scales);
      memcpy(lw.w2c + el * w.sz.w2_codes, w.w2c + g * w.sz.w2_codes, w.sz.w2_codes);
      memcpy(lw.w2s + el * w.sz.w2_scales, w.w2s + g * w.sz.w2_scales, w.sz.w2_scales);
      lw.g1[el] = w.g1[g], lw.g2[el] = w.g2[g], el++;
    }
    skref_moe_weights lrw = {0, 0, el, k, n, lw.w1c, lw.w1s, lw.w2c, lw.w2s, lw.g1, lw.g2, NULL, NULL};
    skref_moe_routes lrt = {m, topk, ids, wts, e, map, 0};
    cr_expect_eq(skref_moe_w4a16(&lrw, &lrt, &ap, x, part, NULL), 0);
    for (int i = 0; i < m * k; i++) sum[i] += part[i];
    free(lw.w1c), free(lw.w1s), free(lw.w2c), free(lw.w2s), free(lw.g1), free(lw.g2);
  }
  for (int i = 0; i < m * k; i++) cr_assert_leq(fabs(sum[i] - fused[i]), 1e-9 * (fabs(fused[i]) + 1), "EP sum [%d]", i);
  /* skipped ids: flagged, and the output equals the routes kept */
  int64_t bad[m * topk];
  memcpy(bad, ids, sizeof bad);
  bad[4] = -2, bad[7] = e;
  float wts0[m * topk];
  memcpy(wts0, wts, sizeof wts0);
  wts0[4] = wts0[7] = 0.0f;
  skref_moe_routes rb = {m, topk, bad, wts, e, NULL, 0}, r0 = {m, topk, ids, wts0, e, NULL, 0};
  cr_expect_eq(skref_moe_w4a16(&rw, &rb, &ap, x, part, NULL), SK_MOE_ERR_EXPERT_ID);
  cr_expect_eq(skref_moe_w4a16(&rw, &r0, &ap, x, sum, NULL), 0);
  for (int i = 0; i < m * k; i++) cr_assert_leq(fabs(part[i] - sum[i]), 1e-9 * (fabs(sum[i]) + 1));
  /* apply_on_input with weight 1 is the plain op */
  float ones[m * topk];
  for (int i = 0; i < m * topk; i++) ones[i] = 1.0f;
  skref_moe_routes ra = {m, topk, ids, ones, e, NULL, 1}, rp = {m, topk, ids, ones, e, NULL, 0};
  skref_moe_w4a16(&rw, &ra, &ap, x, part, NULL);
  skref_moe_w4a16(&rw, &rp, &ap, x, sum, NULL);
  for (int i = 0; i < m * k; i++) cr_assert_leq(fabs(part[i] - sum[i]), 1e-9 * (fabs(sum[i]) + 1));
  /* the trace (FP4 activations) tracks the W4A16 reference with calibrated global scales
   * (gs = 448 * 6 / amax of the tensor it quantizes) */
  uint16_t *tr = malloc(2 * m * k), *inter = malloc(2 * (size_t)m * topk * (size_t)sk_moe_padded(n));
  skref_moe_w4a16(&rw, &rt, &ap, x, fused, inter);
  double ax = 0, ai = 0;
  for (int i = 0; i < m * k; i++) ax = fmax(ax, fabs(skref_bf16_to_float(x[i])));
  for (long long i = 0; i < m * topk * sk_moe_padded(n); i++) ai = fmax(ai, fabs(skref_bf16_to_float(inter[i])));
  for (int i = 0; i < e; i++) w.a1[i] = (float)(2688.0 / ax), w.a2[i] = (float)(2688.0 / ai);
  free(inter);
  skref_moe_routes rt2 = {m, topk, ids, wts, e, NULL, 0};
  skref_moe_nvfp4_trace(&rw, &rt2, &ap, x, tr, NULL);
  double max_abs;
  cr_expect_geq(skref_moe_cosine(tr, fused, m, k, &max_abs), 0.98, "trace vs W4A16");
  free(tr), free(x), free(fused), free(part), free(sum);
  ws_free(&w);
}

Test(moe_ref, route_topk_ties_and_weights) {
  const int e = 70, m = 3, k = 5;
  float lg[m * e];
  for (int i = 0; i < m * e; i++) lg[i] = (float)((i * 7) % 5);  /* many ties at 4 */
  lg[e + 3] = NAN;
  int32_t ids[m * k];
  float w[m * k];
  for (int mode = 0; mode < 3; mode++) {
    skref_moe_route_topk(lg, m, e, k, mode, ids, w);
    for (int t = 0; t < m; t++) {
      float sum = 0;
      for (int j = 0; j < k; j++) {
        const int id = ids[t * k + j];
        cr_assert_eq(lg[t * e + id], 4.0f, "token %d pick %d: a max", t, j);
        if (j) cr_assert_lt(id, ids[t * k + j - 1], "ties go to the highest id first");
        sum += w[t * k + j];
      }
      if (mode == SK_MOE_TOPK_RENORM) cr_expect_leq(fabsf(sum - 1.0f), 1e-6f);
      if (mode == SK_MOE_TOPK_RAW) cr_expect_eq(w[t * k], 4.0f);
    }
  }
}

/* ---- SM120: the block-scaled fragment path against the exact trace ---------------------------------
 * One expert, K = N = 128: the packed NVFP4 activations (A) and the FC1 B tile in the kernel's row
 * order (sk_moe_grouped_fc1_row) run through skref_sm120_sim_gemm (the SM120 kernel's stage
 * layout, ldmatrix and scale-register driving, ops/gemm/sm120_layout.cuh, with the emulated
 * mma.sync), then grouped_sm120's epilogue math in C; FC2 likewise; the combine; compared bit for
 * bit with skref_moe_nvfp4_trace. */
static void quantize_rows_swizzled(const float *v, size_t rows, size_t cols, const float *gs, uint8_t *codes, uint8_t *scales) {
  memset(scales, 0, skref_swizzled_scale_bytes(rows, cols / 16));
  for (size_t r = 0; r < rows; r++)
    for (size_t b = 0; b < cols / 16; b++)
      scales[skref_swizzled_scale_offset(r, b, skref_swizzled_k_tiles(cols / 16))] =
          skref_nvfp4_quantize_block(v + r * cols + 16 * b, gs[r], codes + r * (cols / 2) + 8 * b);
}

Test(moe_ref, sm120_fragment_path_matches_exact_trace) {
  skref_rng rng = seeded("moe sm120 emu");
  const int n = 128, k = 128, m = 40, act_list[3] = {SK_MOE_ACT_SILU, SK_MOE_ACT_RELU2, SK_MOE_ACT_SWIGLU_OAI};
  for (int ai = 0; ai < 3; ai++) {
    const int act = act_list[ai];
    ws_t w;
    ws_make(&w, &rng, SK_MOE_WFMT_NVFP4, act, 1, n, k, 1);
    skref_moe_weights rw = {0, act, 1, k, n, w.w1c, w.w1s, w.w2c, w.w2s, w.g1, w.g2, w.a1, w.a2};
    uint16_t *x = malloc(2 * m * k), *trace = malloc(2 * m * k), *emu = malloc(2 * m * k);
    int64_t ids[m];
    float wts[m];
    for (int t = 0; t < m; t++) ids[t] = 0, wts[t] = (float)(0.5 + skref_rng_uniform(&rng));
    skref_moe_routes rt = {m, 1, ids, wts, 1, NULL, 0};
    skref_moe_act_params ap = {act == SK_MOE_ACT_SWIGLU_OAI ? 7.0f : INFINITY, 1.702f, 1.0f};
    /* The comparison is bit for bit only where every dot product is exact in fp32: an x whose
     * intermediate spans too many binades (about 1 draw in 100) is drawn again. */
    long long inexact = 1;
    for (int draw = 0; draw < 16 && inexact; draw++) {
      skref_fill_normal(&rng, x, (size_t)m * k, SKREF_BF16, 1.0f, 0, 1);
      inexact = 0;
      skref_moe_nvfp4_trace(&rw, &rt, &ap, x, trace, &inexact);
    }
    const int np = 128, rows1 = (int)sk_moe_w1_rows(act, np), gated = sk_moe_gated(act);
    /* A: the packed rows (pack_quant) */
    float *xv = malloc(sizeof(float) * m * k), gs1[m], gs2[m];
    for (int i = 0; i < m * k; i++) xv[i] = skref_bf16_to_float(x[i]);
    for (int t = 0; t < m; t++) gs1[t] = w.a1[0], gs2[t] = w.a2[0];
    uint8_t *ac = malloc((size_t)m * k / 2), *as = malloc(skref_swizzled_scale_bytes(m, k / 16));
    quantize_rows_swizzled(xv, m, k, gs1, ac, as);
    /* B: W1 rows in the FC1 tile order of N tile 0..ntiles-1 */
    const int ntiles = sk_moe_grouped_fc1_ntiles(act, np);
    uint8_t *bc = malloc((size_t)rows1 * k / 2), *bs = malloc(skref_swizzled_scale_bytes(rows1, k / 16));
    memset(bs, 0x38, skref_swizzled_scale_bytes(rows1, k / 16));
    for (int nt = 0; nt < ntiles; nt++)
      for (int r = 0; r < SK_MOE_GROUPED_BN; r++) {
        const int dst = nt * SK_MOE_GROUPED_BN + r, src = sk_moe_grouped_fc1_row(act, np, nt, r);
        memcpy(bc + (size_t)dst * (k / 2), w.w1c + (size_t)src * (k / 2), k / 2);
        for (int b = 0; b < k / 16; b++)
          bs[skref_swizzled_scale_offset(dst, b, skref_swizzled_k_tiles(k / 16))] = w.w1s[sk_moe_swizzled_offset(src, b, k / 16)];
      }
    skref_gemm_operand A = {SKREF_GEMM_NVFP4, SKREF_GEMM_A, (size_t)m, (size_t)k, ac, as};
    skref_gemm_operand B = {SKREF_GEMM_NVFP4, SKREF_GEMM_B, (size_t)rows1, (size_t)k, bc, bs};
    double *h = malloc(sizeof(double) * m * rows1);
    const skref_sm120_cfg cfg = {32, 128, 1, 4, 4}; /* grouped_sm120<., ., 32, 1, .>: BM 32, 1 x 4 warps */
    cr_assert_eq(skref_sm120_sim_gemm(&A, &B, 1.0, h, (size_t)rows1, &cfg, SKREF_SM120_FAULT_NONE), 0);
    /* epilogue (grouped_epilogue, unit 1): alpha, activation, BF16, NVFP4 with a2_gs */
    const float alpha1 = w.g1[0] / w.a1[0], alpha2 = w.g2[0] / w.a2[0];
    float *iv = malloc(sizeof(float) * m * np);
    for (int t = 0; t < m; t++)
      for (int i = 0; i < np; i++) {
        float a;
        if (gated) {
          const int col_up = (i / 64) * 128 + 2 * (i % 64); /* tile row 2 j: up, 2 j + 1: gate */
          a = sk_moe_act(act, (float)h[t * rows1 + col_up + 1] * alpha1, (float)h[t * rows1 + col_up] * alpha1, ap.limit, ap.alpha, ap.beta);
        } else {
          a = sk_moe_act(act, (float)h[t * rows1 + i] * alpha1, 0.0f, ap.limit, ap.alpha, ap.beta);
        }
        iv[t * np + i] = skref_bf16_to_float(skref_float_to_bf16(a));
      }
    uint8_t *ic = malloc((size_t)m * np / 2), *is = malloc(skref_swizzled_scale_bytes(m, np / 16));
    quantize_rows_swizzled(iv, m, np, gs2, ic, is);
    skref_gemm_operand A2 = {SKREF_GEMM_NVFP4, SKREF_GEMM_A, (size_t)m, (size_t)np, ic, is};
    skref_gemm_operand B2 = {SKREF_GEMM_NVFP4, SKREF_GEMM_B, (size_t)k, (size_t)np, w.w2c, w.w2s};
    double *down = malloc(sizeof(double) * m * k);
    cr_assert_eq(skref_sm120_sim_gemm(&A2, &B2, 1.0, down, (size_t)k, &cfg, SKREF_SM120_FAULT_NONE), 0);
    for (int t = 0; t < m; t++)
      for (int c = 0; c < k; c++) emu[t * k + c] = skref_float_to_bf16(0.0f + wts[t] * ((float)down[t * k + c] * alpha2));
    cr_expect_eq(inexact, 0, "the test data must keep every dot product exact in fp32");
    size_t diff = 0;
    for (int i = 0; i < m * k; i++) diff += emu[i] != trace[i];
    cr_expect_eq(diff, 0, "act %d: %zu of %d outputs differ between the SM120 emulation and the trace", act, diff, m * k);
    /* the check can fail: a swapped thread-id selector of FC2's MMA */
    cr_assert_eq(skref_sm120_sim_gemm(&A2, &B2, 1.0, down, (size_t)k, &cfg, SKREF_SM120_FAULT_TID_A), 0);
    size_t faulty = 0;
    for (int t = 0; t < m; t++)
      for (int c = 0; c < k; c++) faulty += skref_float_to_bf16(0.0f + wts[t] * ((float)down[t * k + c] * alpha2)) != trace[t * k + c];
    cr_expect_gt(faulty, 0, "an injected fault went unnoticed");
    free(x), free(trace), free(emu), free(xv), free(ac), free(as), free(bc), free(bs), free(h), free(iv), free(ic), free(is), free(down);
    ws_free(&w);
  }
}
