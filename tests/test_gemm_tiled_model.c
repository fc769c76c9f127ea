// CPU model of the prefill kernel kernel_src/gemm/mma_tiled.cuh: replays its grouped raster,
// its producer (cp.async of codes into the swizzled stage layout, zero fill past M / N, the
// whole-512-byte swizzled scale k-tiles, block-FP8 scale rows), its per-lane fragment loads and
// scale reads, and its per-32 / per-128 folds, with MMAs emulated from the PTX ISA fragment
// layouts (independent of the loading code). The result must match skref_gemm within the
// FP32-accumulation tolerance, and every output must be written exactly once.
// Fragment registers carry decoded values (not bit patterns): the bit-level decoders are the
// decode kernel's, already checked on the GPU; this test checks the indexing.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/gemm.h"

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

// ---- the kernel's layout (TiledLayout) ----
typedef struct {
  int fp4, row_bytes, chunks, ktiles, scale_a, scale_b, off_b, off_sa, off_sb, stage;
} layout_t;

static layout_t layout_of(const cfg_t* c) {
  layout_t L;
  L.fp4 = c->recipe <= 1;
  L.row_bytes = L.fp4 ? 64 : 128;
  L.chunks = L.row_bytes / 16;
  L.ktiles = c->recipe == 0 ? 2 : 1;
  L.scale_a = c->recipe == 0 ? 1024 : c->recipe <= 2 ? 512 : c->recipe == 3 ? 4 * c->bm : 0;
  L.scale_b = c->recipe == 0 ? 1024 : c->recipe <= 2 ? 512 : c->recipe == 3 ? 16 : 0;
  L.off_b = c->bm * L.row_bytes;
  L.off_sa = (c->bm + c->bn) * L.row_bytes;
  L.off_sb = L.off_sa + L.scale_a;
  L.stage = L.off_sb + L.scale_b;
  return L;
}
static int code_offset(const layout_t* L, int row, int chunk) {
  return row * L->row_bytes + (L->fp4 ? chunk : (chunk ^ ((row & 3) << 1))) * 16;
}
static int swz_in_tile(int r128, int col4) { return (r128 & 31) * 16 + (r128 >> 5) * 4 + col4; }
static uint32_t rd32(const uint8_t* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static double e2m1_of(const uint8_t* chunk, int elem) { return gemm_tmp_e2m1_decode((chunk[elem >> 1] >> (4 * (elem & 1))) & 0xF); }
static double blk_scale(int recipe, unsigned code) {
  return recipe == 0 ? gemm_tmp_e4m3_decode((uint8_t)(code & 0x7F)) : gemm_tmp_e8m0_decode((uint8_t)code);
}

static void run_model(const cfg_t* c, int M, int N, int K, const uint8_t* ac, const void* as, const uint8_t* bc,
                      const void* bs, double* C, int* hits) {
  const layout_t L = layout_of(c);
  const int WM = c->bm / c->wm_, WN = c->bn / c->wn_, MT = WM / 16, NT = WN / 8, warps = c->wm_ * c->wn_;
  const int gx = (N + c->bn - 1) / c->bn, gy = (M + c->bm - 1) / c->bm;
  const long long row_bytes = L.fp4 ? K / 2 : K;
  const int num_kb = K / 128, num_k_tiles = c->recipe == 0 ? K / 64 : K / 128;
  uint8_t* st = malloc((size_t)L.stage);
  float(*acc)[MT][NT][32][4] = malloc(sizeof(float) * (size_t)warps * MT * NT * 32 * 4);
  float(*tmp)[NT][32][4] = malloc(sizeof(float) * (size_t)MT * NT * 32 * 4);
  frag_t* f = malloc(sizeof(frag_t));
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) {
      const int pid = by * gx + bx, per_group = 8 * gx, first_m = (pid / per_group) * 8;
      const int group_m = gy - first_m < 8 ? gy - first_m : 8;
      const int tile_m = first_m + (pid % per_group) % group_m, tile_n = (pid % per_group) / group_m;
      const int m0 = tile_m * c->bm, n0 = tile_n * c->bn;
      memset(acc, 0, sizeof(float) * (size_t)warps * MT * NT * 32 * 4);
      for (int kb = 0; kb < num_kb; ++kb) {
        // producer
        memset(st, 0xA5, (size_t)L.stage);
        for (int r = 0; r < c->bm; ++r)
          for (int ch = 0; ch < L.chunks; ++ch) {
            uint8_t* dst = st + code_offset(&L, r, ch);
            if (m0 + r < M) memcpy(dst, ac + (m0 + r) * row_bytes + (long long)kb * L.row_bytes + ch * 16, 16);
            else memset(dst, 0, 16);
          }
        for (int r = 0; r < c->bn; ++r)
          for (int ch = 0; ch < L.chunks; ++ch) {
            uint8_t* dst = st + L.off_b + code_offset(&L, r, ch);
            if (n0 + r < N) memcpy(dst, bc + (n0 + r) * row_bytes + (long long)kb * L.row_bytes + ch * 16, 16);
            else memset(dst, 0, 16);
          }
        if (c->recipe <= 2) {
          memcpy(st + L.off_sa, (const uint8_t*)as + ((long long)(m0 >> 7) * num_k_tiles + (long long)kb * L.ktiles) * 512, (size_t)L.scale_a);
          memcpy(st + L.off_sb, (const uint8_t*)bs + ((long long)(n0 >> 7) * num_k_tiles + (long long)kb * L.ktiles) * 512, (size_t)L.scale_b);
        } else if (c->recipe == 3) {
          for (int r = 0; r < c->bm; ++r) {
            float v = m0 + r < M ? ((const float*)as)[(long long)(m0 + r) * num_kb + kb] : 0.0f;
            memcpy(st + L.off_sa + 4 * r, &v, 4);
          }
          memcpy(st + L.off_sb, (const float*)bs + (long long)(n0 >> 7) * num_kb + kb, 4);
        }
        // consumers
        for (int warp = 0; warp < warps; ++warp) {
          const int wm = warp / c->wn_, wn = warp % c->wn_;
          const uint8_t *sA = st, *sB = st + L.off_b, *scA = st + L.off_sa, *scB = st + L.off_sb;
          if (L.fp4) {
            for (int q = 0; q < 8; ++q)
              for (int i = 0; i < MT; ++i)
                for (int j = 0; j < NT; ++j) {
                  for (int lane = 0; lane < 32; ++lane) {
                    const int g = lane >> 2, t = lane & 3, hi16 = q >> 2;
                    for (int h = 0; h < 2; ++h) {
                      const int row = wm * WM + g + 16 * i + 8 * h, r128 = (m0 & 127) + row;
                      const uint8_t* chunk = sA + code_offset(&L, row, t);
                      double s;
                      if (c->recipe == 0) {
                        const uint8_t* p = scA + (t >> 1) * 512 + swz_in_tile(r128, 2 * (t & 1));
                        s = blk_scale(0, p[hi16]);
                      } else {
                        s = blk_scale(1, scA[swz_in_tile(r128, t)]);
                      }
                      for (int e = 0; e < 2; ++e) {
                        f->a[lane][h][e] = e2m1_of(chunk, 4 * q + e) * s;
                        f->a[lane][2 + h][e] = e2m1_of(chunk, 4 * q + 2 + e) * s;
                      }
                    }
                    const int brow = wn * WN + g + 8 * j, r128 = (n0 & 127) + brow;
                    const uint8_t* chunk = sB + code_offset(&L, brow, t);
                    double s;
                    if (c->recipe == 0) s = blk_scale(0, (scB + (t >> 1) * 512 + swz_in_tile(r128, 2 * (t & 1)))[hi16]);
                    else s = blk_scale(1, scB[swz_in_tile(r128, t)]);
                    for (int e = 0; e < 2; ++e) {
                      f->b[lane][0][e] = e2m1_of(chunk, 4 * q + e) * s;
                      f->b[lane][1][e] = e2m1_of(chunk, 4 * q + 2 + e) * s;
                    }
                  }
                  mma_emu(0, f, acc[warp][i][j]);
                }
          } else {
            const int use_tmp = c->recipe != 4;
            for (int blk = 0; blk < 4; ++blk) {
              if (use_tmp && (c->recipe == 2 || blk == 0)) memset(tmp, 0, sizeof(float) * (size_t)MT * NT * 32 * 4);
              for (int i = 0; i < MT; ++i)
                for (int j = 0; j < NT; ++j)
                  for (int kh = 0; kh < (c->f16_fp8 ? 2 : 1); ++kh) {
                    for (int lane = 0; lane < 32; ++lane) {
                      const int g = lane >> 2, t = lane & 3, ch = 2 * blk + (t >> 1), half = (t & 1) * 8;
                      for (int h = 0; h < 2; ++h) {
                        const uint8_t* v = sA + code_offset(&L, wm * WM + g + 16 * i + 8 * h, ch) + half;
                        if (!c->f16_fp8) {
                          for (int e = 0; e < 4; ++e) {
                            f->a[lane][h][e] = gemm_tmp_e4m3_decode(v[e]);
                            f->a[lane][2 + h][e] = gemm_tmp_e4m3_decode(v[4 + e]);
                          }
                        } else {  // word kh: bytes 0,1 -> a[h], bytes 2,3 -> a[2+h]
                          for (int e = 0; e < 2; ++e) {
                            f->a[lane][h][e] = gemm_tmp_e4m3_decode(v[4 * kh + e]);
                            f->a[lane][2 + h][e] = gemm_tmp_e4m3_decode(v[4 * kh + 2 + e]);
                          }
                        }
                      }
                      const uint8_t* v = sB + code_offset(&L, wn * WN + g + 8 * j, ch) + half;
                      if (!c->f16_fp8) {
                        for (int e = 0; e < 4; ++e) {
                          f->b[lane][0][e] = gemm_tmp_e4m3_decode(v[e]);
                          f->b[lane][1][e] = gemm_tmp_e4m3_decode(v[4 + e]);
                        }
                      } else {
                        for (int e = 0; e < 2; ++e) {
                          f->b[lane][0][e] = gemm_tmp_e4m3_decode(v[4 * kh + e]);
                          f->b[lane][1][e] = gemm_tmp_e4m3_decode(v[4 * kh + 2 + e]);
                        }
                      }
                    }
                    mma_emu(!c->f16_fp8, f, use_tmp ? tmp[i][j] : acc[warp][i][j]);
                  }
              if (c->recipe == 2) {
                for (int lane = 0; lane < 32; ++lane) {
                  const int g = lane >> 2, t = lane & 3;
                  for (int i = 0; i < MT; ++i)
                    for (int j = 0; j < NT; ++j)
                      for (int e = 0; e < 4; ++e) {
                        const int row = wm * WM + g + 16 * i + 8 * (e >> 1);
                        const int col = wn * WN + 8 * j + 2 * t + (e & 1);
                        const uint32_t wa = rd32(scA + swz_in_tile((m0 & 127) + row, 0));
                        const uint32_t wb = rd32(scB + swz_in_tile((n0 & 127) + col, 0));
                        const float sa = (float)blk_scale(2, (wa >> (8 * blk)) & 0xFF);
                        const float sb = (float)blk_scale(2, (wb >> (8 * blk)) & 0xFF);
                        acc[warp][i][j][lane][e] += tmp[i][j][lane][e] * (sa * sb);
                      }
                }
              }
            }
            if (c->recipe == 3) {
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
      // epilogue (alpha = 1, FP32 output)
      for (int warp = 0; warp < warps; ++warp) {
        const int wm = warp / c->wn_, wn = warp % c->wn_;
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < MT; ++i)
            for (int j = 0; j < NT; ++j)
              for (int e = 0; e < 4; ++e) {
                const int m = m0 + wm * WM + (lane >> 2) + 16 * i + 8 * (e >> 1);
                const int n = n0 + wn * WN + 8 * j + 2 * (lane & 3) + (e & 1);
                if (m < M && n < N) {
                  C[(size_t)m * N + n] = acc[warp][i][j][lane][e];
                  hits[(size_t)m * N + n]++;
                }
              }
      }
    }
  free(st);
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
