// CPU model of the prefill kernel ops/gemm/mma_tiled.cuh: replays its grouped raster,
// its producer (each thread's 16-byte cp.async of one chunk column of rows row + c * row_step into
// the swizzled stage layout at base + c * step, zero fill past M / N, the whole-512-byte swizzled
// scale k-tiles, block-FP8 scale rows), its per-lane fragment loads and scale reads, its FP4
// decode (sk_e2m1x8_to_f16x2_2m14 itself, then nvfp4's FP16 multiply by the UE4M3 scale with
// 2^28 in the epilogue, or mxfp4's FP16 2^14, FP32 UE8M0 scale and BF16), the FP8 recipes' raw
// bytes (m16n8k32) or sm_90 halves (two m16n8k16) and the per-32 / per-128 folds. The index math
// and the FP4 decoder are the kernel's own (gemm/tiled_layout.cuh, gemm/e2m1_decode.cuh: plain C
// as well); the MMAs are emulated from the PTX ISA fragment layouts, independently. The result
// must match skref_gemm within the FP32-accumulation tolerance, every code chunk of a stage must
// be copied exactly once, the FP16 / BF16 steps must be exact, and every output written once.
// Note: the dot product is invariant under a K permutation shared by A and B within one scale
// block, so the test checks that A and B agree, not one particular order.
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm/e2m1_decode.cuh"
#include "gemm/tiled_layout.cuh"
#include "gemm/ref.h"

typedef struct {
  int recipe, bm, bn, wm_, wn_;  // tile and warp grid (BK = 128)
  int f16_fp8;                   // 1: sm_90 flavour of the FP8 path (two k16 MMAs per block)
} cfg_t;

// ---- MMA emulation from the PTX fragment layouts (lane = 4g + t) ----
// k32 e4m3: A reg r, byte i: row g + 8(r&1), k 4t + 16(r>>1) + i;  B reg r byte i: col g, k 4t + 16r + i
// k16 f16/bf16: A reg r, half i: row g + 8(r&1), k 2t + 8(r>>1) + i;  B reg r: col g, k 2t + 8r + i
// D reg e: row g + 8(e>>1), col 2t + (e&1)
typedef struct {
  double a[32][4][4];  // [lane][reg][element]
  double b[32][2][4];
} frag_t;

static void mma_emu(int k32, const frag_t* f, float d[32][4]) {
  double A[16][32] = {{0}}, B[8][32] = {{0}};
  const int per = k32 ? 4 : 2, kk = k32 ? 32 : 16;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < per; ++i) A[g + 8 * (r & 1)][per * t + (k32 ? 16 : 8) * (r >> 1) + i] = f->a[lane][r][i];
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < per; ++i) B[g][per * t + (k32 ? 16 : 8) * r + i] = f->b[lane][r][i];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
      double s = 0;
      for (int k = 0; k < kk; ++k) s += A[row][k] * B[col][k];
      d[lane][e] = (float)((double)d[lane][e] + s);
    }
  }
}

// ---- number formats (independent of the kernel) ----
static uint32_t rd32(const uint8_t* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static double f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  cr_assert(e != 31, "f16 Inf/NaN 0x%04x", h);
  const double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return (h & 0x8000) ? -v : v;
}
// x exactly representable with `sig` significand bits, minimum normal exponent emin, |x| <= max.
static bool representable(double x, int sig, int emin, double max) {
  if (x == 0) return true;
  int e;
  frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double n = ldexp(x, (sig - 1) - (e - 1 < emin ? emin : e - 1));
  return fabs(x) <= max && n == nearbyint(n);
}
static bool f16_exact(double x) { return representable(x, 11, -14, 65504.0); }
static bool bf16_exact(double x) { return representable(x, 8, -126, 0x1.fep127); }

// One lane's FP4 word (8 codes) of one row -> the 4 decoded pairs as the kernel's registers hold
// them (fp4_word_nvfp4 / fp4_word_mxfp4): v[pair][half].
static void fp4_word_values(int recipe, uint32_t word, const uint8_t* scales, int r128, int t, int w, double v[4][2]) {
  unsigned p[4];
  sk_e2m1x8_to_f16x2_2m14(word, p);
  if (recipe == 0) {  // value * 2^-14 times the UE4M3 scale, one FP16 multiply (must be exact)
    const uint8_t code = scales[sk_tiled_nvfp4_scale_offset(r128, t) + sk_tiled_nvfp4_scale_byte(w)];
    const double s = gemm_tmp_e4m3_decode((uint8_t)(code & 0x7F));
    cr_assert(f16_exact(s), "UE4M3 scale %g not FP16", s);
    for (int k = 0; k < 4; ++k)
      for (int e = 0; e < 2; ++e) {
        v[k][e] = f16_value((uint16_t)(p[k] >> (16 * e))) * s;
        cr_assert(f16_exact(v[k][e]), "nvfp4 FP16 product %.9g inexact", v[k][e]);
      }
  } else {  // back to the value in FP16, FP32 times the UE8M0 scale, RN to BF16 (both exact)
    const double s = gemm_tmp_e8m0_decode(scales[sk_tiled_mxfp4_scale_offset(r128, t)]);
    for (int k = 0; k < 4; ++k)
      for (int e = 0; e < 2; ++e) {
        const double x = f16_value((uint16_t)(p[k] >> (16 * e))) * 16384.0;
        cr_assert(f16_exact(x), "mxfp4 2^14 product %.9g inexact", x);
        v[k][e] = (double)(float)(x * s);
        cr_assert(v[k][e] == x * s && bf16_exact(v[k][e]), "mxfp4 scaled value %.9g inexact", x * s);
      }
  }
}

static void run_model(const cfg_t* c, int M, int N, int K, const uint8_t* ac, const void* as, const uint8_t* bc,
                      const void* bs, double* C, int* hits) {
  const int R = c->recipe, fp4 = sk_tiled_is_fp4(R), RB = sk_tiled_row_bytes(R);
  const int off_b = sk_tiled_off_b(R, c->bm), off_sa = sk_tiled_off_scale_a(R, c->bm, c->bn);
  const int off_sb = sk_tiled_off_scale_b(R, c->bm, c->bn), stage = sk_tiled_stage_bytes(R, c->bm, c->bn);
  const int WM = c->bm / c->wm_, WN = c->bn / c->wn_, MT = WM / 16, NT = WN / 8, warps = c->wm_ * c->wn_;
  const int threads = 32 * warps;
  const int gx = (N + c->bn - 1) / c->bn, gy = (M + c->bm - 1) / c->bm;
  const long long row_bytes = fp4 ? K / 2 : K;
  const int num_kb = K / SK_TILED_BK;
  // producer geometry (the kernel's static_assert)
  const int row_step = sk_tiled_copy_row_step(R, threads), dst_step = sk_tiled_copy_dst_step(R, row_step);
  cr_assert(threads % sk_tiled_chunks(R) == 0 && row_step % 4 == 0, "producer row step %d", row_step);
  uint8_t* st = malloc((size_t)stage);
  uint8_t* copied = malloc((size_t)off_sa / 16);  // copies per 16-byte code chunk of the stage
  float(*acc)[MT][NT][32][4] = malloc(sizeof(float) * (size_t)warps * MT * NT * 32 * 4);
  float(*tmp)[NT][32][4] = malloc(sizeof(float) * (size_t)MT * NT * 32 * 4);
  frag_t* f = malloc(sizeof(frag_t));
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) {
      const int tile_m = sk_tiled_tile_m(by * gx + bx, gx, gy), tile_n = sk_tiled_tile_n(by * gx + bx, gx, gy);
      cr_assert(tile_m >= 0 && tile_m < gy && tile_n >= 0 && tile_n < gx, "raster (%d, %d) -> (%d, %d)", bx, by, tile_m, tile_n);
      const int m0 = tile_m * c->bm, n0 = tile_n * c->bn;
      memset(acc, 0, sizeof(float) * (size_t)warps * MT * NT * 32 * 4);
      for (int kb = 0; kb < num_kb; ++kb) {
        // ---- producer ----
        memset(st, 0xA5, (size_t)stage);
        memset(copied, 0, (size_t)off_sa / 16);
        const long long kbyte = (long long)kb * RB;
        for (unsigned tid = 0; tid < (unsigned)threads; ++tid) {
          const int cp_row = sk_tiled_copy_row(R, tid), cp_chunk = sk_tiled_copy_chunk(R, tid);
          const int cp_dst = sk_tiled_copy_dst(R, tid);
          for (int op = 0; op < 2; ++op) {  // A, then B
            const int rows = op ? c->bn : c->bm, base = op ? off_b : 0, live_rows = op ? N - n0 : M - m0;
            const uint8_t* codes = op ? bc : ac;
            const uint8_t* row_src = codes + (long long)((op ? n0 : m0) + cp_row) * row_bytes + cp_chunk * 16;
            for (int cc = 0; cc < sk_tiled_copies(rows, row_step); ++cc) {
              const int r = cp_row + cc * row_step;
              if (rows % row_step != 0 && r >= rows) break;
              const int dst = base + cp_dst + cc * dst_step;
              cr_assert(dst >= base && dst + 16 <= base + rows * RB, "copy of row %d lands outside its tile", r);
              copied[dst / 16]++;
              if (r < live_rows) memcpy(st + dst, row_src + (long long)cc * row_step * row_bytes + kbyte, 16);
              else memset(st + dst, 0, 16);  // cp.async with src-size 0
            }
          }
        }
        for (int i = 0; i < off_sa / 16; ++i) cr_assert_eq(copied[i], 1, "code chunk %d of the stage copied %d times", i, copied[i]);
        if (R <= 2) {
          memcpy(st + off_sa, (const uint8_t*)as + sk_tiled_scale_src_offset(R, m0, kb, sk_tiled_num_scale_k_tiles(R, K)), (size_t)sk_tiled_scale_a_bytes(R, c->bm));
          memcpy(st + off_sb, (const uint8_t*)bs + sk_tiled_scale_src_offset(R, n0, kb, sk_tiled_num_scale_k_tiles(R, K)), (size_t)sk_tiled_scale_b_bytes(R));
        } else if (R == 3) {
          for (int r = 0; r < c->bm; ++r) {
            float v = m0 + r < M ? ((const float*)as)[(long long)(m0 + r) * num_kb + kb] : 0.0f;
            memcpy(st + off_sa + 4 * r, &v, 4);
          }
          memcpy(st + off_sb, (const float*)bs + (long long)(n0 >> 7) * num_kb + kb, 4);
        }
        // ---- consumers ----
        for (int warp = 0; warp < warps; ++warp) {
          const int wm = warp / c->wn_, wn = warp % c->wn_;
          const uint8_t *sA = st, *sB = st + off_b, *scA = st + off_sa, *scB = st + off_sb;
          if (fp4) {
            for (int w = 0; w < 4; ++w)
              for (int i = 0; i < MT; ++i)
                for (int k2 = 0; k2 < 2; ++k2)
                  for (int j = 0; j < NT; ++j) {
                    for (int lane = 0; lane < 32; ++lane) {
                      const int g = lane >> 2, t = lane & 3;
                      double av[2][4][2], bv[4][2];  // [row g / g+8][pair][half]
                      for (int h = 0; h < 2; ++h) {
                        const int row = wm * WM + g + 16 * i + 8 * h;
                        fp4_word_values(R, rd32(sA + sk_tiled_code_offset(R, row, t) + 4 * w), scA, (m0 & 127) + row, t, w, av[h]);
                      }
                      const int brow = wn * WN + g + 8 * j;
                      fp4_word_values(R, rd32(sB + sk_tiled_code_offset(R, brow, t) + 4 * w), scB, (n0 & 127) + brow, t, w, bv);
                      for (int e = 0; e < 2; ++e) {
                        for (int reg = 0; reg < 4; ++reg)
                          f->a[lane][reg][e] = av[sk_tiled_fp4_a_row_half(reg)][sk_tiled_fp4_a_pair(k2, reg)][e];
                        for (int reg = 0; reg < 2; ++reg) f->b[lane][reg][e] = bv[sk_tiled_fp4_b_pair(k2, reg)][e];
                      }
                    }
                    mma_emu(0, f, acc[warp][i][j]);
                  }
          } else {
            const int use_tmp = R != 4;
            for (int blk = 0; blk < 4; ++blk) {
              if (use_tmp && (R == 2 || blk == 0)) memset(tmp, 0, sizeof(float) * (size_t)MT * NT * 32 * 4);
              for (int i = 0; i < MT; ++i)
                for (int j = 0; j < NT; ++j)
                  for (int kh = 0; kh < (c->f16_fp8 ? 2 : 1); ++kh) {
                    for (int lane = 0; lane < 32; ++lane) {
                      const int g = lane >> 2, t = lane & 3, ch = sk_tiled_fp8_chunk(blk, t), half = sk_tiled_fp8_half(t);
                      // native: low word -> a[h] / b0 (k32 slots 4t..), high word -> a[2+h] / b1.
                      // sm_90: word kh -> the kh-th k16 MMA; cvt.rn.f16x2.e4m3x2 on each 16-bit half in
                      // place: bytes 0, 1 -> a[h] / b0 (low, high half), bytes 2, 3 -> a[2+h] / b1.
                      for (int h = 0; h < 2; ++h) {
                        const uint8_t* v = sA + sk_tiled_code_offset(R, wm * WM + g + 16 * i + 8 * h, ch) + half;
                        for (int e = 0; e < (c->f16_fp8 ? 2 : 4); ++e) {
                          const int b0 = c->f16_fp8 ? 4 * kh + e : e, b1 = c->f16_fp8 ? 4 * kh + 2 + e : 4 + e;
                          f->a[lane][h][e] = gemm_tmp_e4m3_decode(v[b0]);
                          f->a[lane][2 + h][e] = gemm_tmp_e4m3_decode(v[b1]);
                        }
                      }
                      const uint8_t* v = sB + sk_tiled_code_offset(R, wn * WN + g + 8 * j, ch) + half;
                      for (int e = 0; e < (c->f16_fp8 ? 2 : 4); ++e) {
                        const int b0 = c->f16_fp8 ? 4 * kh + e : e, b1 = c->f16_fp8 ? 4 * kh + 2 + e : 4 + e;
                        f->b[lane][0][e] = gemm_tmp_e4m3_decode(v[b0]);
                        f->b[lane][1][e] = gemm_tmp_e4m3_decode(v[b1]);
                      }
                    }
                    mma_emu(!c->f16_fp8, f, use_tmp ? tmp[i][j] : acc[warp][i][j]);
                  }
              if (R == 2) {
                for (int lane = 0; lane < 32; ++lane) {
                  const int g = lane >> 2, t = lane & 3;
                  for (int i = 0; i < MT; ++i)
                    for (int j = 0; j < NT; ++j)
                      for (int e = 0; e < 4; ++e) {
                        const int row = wm * WM + g + 16 * i + 8 * (e >> 1);
                        const int col = wn * WN + 8 * j + 2 * t + (e & 1);
                        const uint32_t wa = rd32(scA + sk_tiled_swz_in_tile((m0 & 127) + row, 0));
                        const uint32_t wb = rd32(scB + sk_tiled_swz_in_tile((n0 & 127) + col, 0));
                        const float sa = (float)gemm_tmp_e8m0_decode((uint8_t)(wa >> (8 * blk)));
                        const float sb = (float)gemm_tmp_e8m0_decode((uint8_t)(wb >> (8 * blk)));
                        acc[warp][i][j][lane][e] += tmp[i][j][lane][e] * (sa * sb);
                      }
                }
              }
            }
            if (R == 3) {
              float sfb;
              memcpy(&sfb, scB, 4);
              for (int lane = 0; lane < 32; ++lane)
                for (int i = 0; i < MT; ++i)
                  for (int j = 0; j < NT; ++j)
                    for (int e = 0; e < 4; ++e) {
                      float sfa;
                      memcpy(&sfa, scA + 4 * (wm * WM + (lane >> 2) + 16 * i + 8 * (e >> 1)), 4);
                      acc[warp][i][j][lane][e] += tmp[i][j][lane][e] * (sfa * sfb);
                    }
            }
          }
        }
      }
      // epilogue (alpha = 1, FP32 output): nvfp4 operands carry 2^-14 each, undone here
      const float out_scale = 1.0f * (R == 0 ? 268435456.0f : 1.0f);
      for (int warp = 0; warp < warps; ++warp) {
        const int wm = warp / c->wn_, wn = warp % c->wn_;
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < MT; ++i)
            for (int j = 0; j < NT; ++j)
              for (int e = 0; e < 4; ++e) {
                const int m = m0 + wm * WM + (lane >> 2) + 16 * i + 8 * (e >> 1);
                const int n = n0 + wn * WN + 8 * j + 2 * (lane & 3) + (e & 1);
                if (m < M && n < N) {
                  C[(size_t)m * N + n] = acc[warp][i][j][lane][e] * out_scale;
                  hits[(size_t)m * N + n]++;
                }
              }
      }
    }
  free(st);
  free(copied);
  free(acc);
  free(tmp);
  free(f);
}

static void check(int recipe, int bm, int bn, int wm, int wn, int f16_fp8, int M, int N, int K, uint64_t seed) {
  cfg_t c = {recipe, bm, bn, wm, wn, f16_fp8};
  uint64_t rng = seed;
  const skref_gemm_recipe r = (skref_gemm_recipe)recipe;
  uint8_t* ac = malloc(skref_gemm_code_bytes(r, (size_t)M, (size_t)K));
  uint8_t* bc = malloc(skref_gemm_code_bytes(r, (size_t)N, (size_t)K));
  size_t sab = skref_gemm_scale_bytes(r, SKREF_GEMM_A, (size_t)M, (size_t)K);
  size_t sbb = skref_gemm_scale_bytes(r, SKREF_GEMM_B, (size_t)N, (size_t)K);
  void* as = sab ? malloc(sab) : NULL;
  void* bs = sbb ? malloc(sbb) : NULL;
  skref_gemm_random_operand(r, SKREF_GEMM_A, (size_t)M, (size_t)K, &rng, ac, as);
  skref_gemm_random_operand(r, SKREF_GEMM_B, (size_t)N, (size_t)K, &rng, bc, bs);
  skref_gemm_operand A = {r, SKREF_GEMM_A, (size_t)M, (size_t)K, ac, as};
  skref_gemm_operand B = {r, SKREF_GEMM_B, (size_t)N, (size_t)K, bc, bs};
  double* ref = malloc(sizeof(double) * (size_t)M * N);
  double* abs_sum = malloc(sizeof(double) * (size_t)M * N);
  double* got = calloc((size_t)M * N, sizeof(double));
  int* hits = calloc((size_t)M * N, sizeof(int));
  skref_gemm(&A, &B, 1.0, ref, abs_sum);
  run_model(&c, M, N, K, ac, as, bc, bs, got, hits);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const size_t i = (size_t)m * N + n;
      cr_assert_eq(hits[i], 1, "recipe %d tile %dx%d: C[%d,%d] written %d times", recipe, bm, bn, m, n, hits[i]);
      const double tol = skref_gemm_tolerance(SKREF_GEMM_OUT_FP32, ref[i], abs_sum[i], (size_t)K);
      cr_assert(fabs(got[i] - ref[i]) <= tol, "recipe %d tile %dx%d f16fp8=%d M=%d N=%d K=%d seed=%llu: C[%d,%d] = %.9g, ref %.9g (tol %.3g)",
                recipe, bm, bn, f16_fp8, M, N, K, (unsigned long long)seed, m, n, got[i], ref[i], tol);
    }
  free(ac); free(bc); free(as); free(bs); free(ref); free(abs_sum); free(got); free(hits);
}

Test(gemm_tiled_model, all_recipes_default_tile) {
  for (int recipe = 0; recipe < 5; ++recipe) check(recipe, 128, 128, 2, 4, 0, 140, 136, 256, 1000 + recipe);
}

Test(gemm_tiled_model, fp8_sm90_flavour) {
  for (int recipe = 2; recipe < 5; ++recipe) check(recipe, 128, 128, 2, 4, 1, 140, 136, 256, 2000 + recipe);
}

Test(gemm_tiled_model, heuristic_tiles_ragged) {
  const int cfgs[3][4] = {{128, 64, 2, 2}, {64, 128, 1, 4}, {64, 64, 2, 2}};
  for (int k = 0; k < 3; ++k)
    for (int recipe = 0; recipe < 5; ++recipe) {
      check(recipe, cfgs[k][0], cfgs[k][1], cfgs[k][2], cfgs[k][3], 0, 67, 200, 384, 3000 + 10 * k + recipe);
      check(recipe, cfgs[k][0], cfgs[k][1], cfgs[k][2], cfgs[k][3], 0, 17, 1, 128, 4000 + 10 * k + recipe);
    }
}

Test(gemm_tiled_model, many_m_tiles_grouped_raster) {
  check(4, 32 * 2, 64, 2, 2, 0, 64 * 19 + 5, 64 * 3 - 7, 128, 5000);  // 20 M tiles: a ragged last group
  check(2, 64, 64, 2, 2, 1, 64 * 9 + 1, 64 * 2 + 3, 128, 5001);
}

// 256 threads and 32-row tiles: the producer's row step (64 FP4 / 32 FP8 rows) exceeds or equals
// the tile's rows, so threads past the last row stop (the kernel's `r >= BM` break).
Test(gemm_tiled_model, producer_step_beyond_tile) {
  for (int recipe = 0; recipe < 5; ++recipe) {
    check(recipe, 32, 128, 2, 4, 0, 45, 130, 256, 6000 + recipe);
    check(recipe, 128, 32, 4, 2, recipe >= 2, 131, 70, 128, 6100 + recipe);
  }
}
