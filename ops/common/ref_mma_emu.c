// CPU emulation of the SM120 block-scaled mma.sync; see mma_emu.h.
#include "common/ref_mma_emu.h"

#include <string.h>

int skref_mma_k(skref_mma_kind kind) { return kind == SKREF_MMA_MXF8_E4M3_K32 ? 32 : 64; }
int skref_mma_scale_vec(skref_mma_kind kind) { return kind == SKREF_MMA_NVF4_K64 ? 16 : 32; }

static double scale_of(skref_mma_kind kind, uint8_t code) {
  return kind == SKREF_MMA_NVF4_K64 ? gemm_tmp_e4m3_decode(code & 0x7F) : gemm_tmp_e8m0_decode(code);
}

static int selectors_valid(skref_mma_kind kind, int bid_a, int tid_a, int bid_b, int tid_b) {
  if (tid_a < 0 || tid_a > 1 || tid_b < 0 || tid_b > 3) return 0;
  for (int i = 0; i < 2; ++i) {
    int bid = i ? bid_b : bid_a;
    if (kind == SKREF_MMA_MXF8_E4M3_K32 && (bid < 0 || bid > 3)) return 0;
    if (kind == SKREF_MMA_MXF4_K64 && bid != 0 && bid != 2) return 0;
    if (kind == SKREF_MMA_NVF4_K64 && bid != 0) return 0;
  }
  return 1;
}

int skref_mma_emu(skref_mma_kind kind, const uint32_t a[32][4], const uint32_t b[32][2], const float c[32][4],
                  const uint32_t sfa[32], const uint32_t sfb[32], int bid_a, int tid_a, int bid_b, int tid_b,
                  double d[32][4]) {
  if (!selectors_valid(kind, bid_a, tid_a, bid_b, tid_b)) return -1;
  const int K = skref_mma_k(kind), vec = skref_mma_scale_vec(kind);
  const int fp4 = kind != SKREF_MMA_MXF8_E4M3_K32;
  double A[16][64], B[8][64];  // dequantized, scale applied
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < (fp4 ? 8 : 4); ++i) {
        int row = g + 8 * (r & 1);
        int k = fp4 ? 8 * t + 32 * (r >> 1) + i : 4 * t + 16 * (r >> 1) + i;
        A[row][k] = fp4 ? gemm_tmp_e2m1_decode((uint8_t)((a[lane][r] >> (4 * i)) & 15))
                        : gemm_tmp_e4m3_decode((uint8_t)(a[lane][r] >> (8 * i)));
      }
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < (fp4 ? 8 : 4); ++i) {
        int k = fp4 ? 8 * t + 32 * r + i : 4 * t + 16 * r + i;
        B[g][k] = fp4 ? gemm_tmp_e2m1_decode((uint8_t)((b[lane][r] >> (4 * i)) & 15))
                      : gemm_tmp_e4m3_decode((uint8_t)(b[lane][r] >> (8 * i)));
      }
  }
  for (int m = 0; m < 16; ++m) {
    const uint32_t s = sfa[4 * (m % 8) + 2 * tid_a + m / 8];
    for (int k = 0; k < K; ++k) A[m][k] *= scale_of(kind, (uint8_t)(s >> (8 * (bid_a + k / vec))));
  }
  for (int n = 0; n < 8; ++n) {
    const uint32_t s = sfb[4 * n + tid_b];
    for (int k = 0; k < K; ++k) B[n][k] *= scale_of(kind, (uint8_t)(s >> (8 * (bid_b + k / vec))));
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int row = lane / 4 + 8 * (i >> 1), col = 2 * (lane % 4) + (i & 1);
      double acc = c[lane][i];
      for (int k = 0; k < K; ++k) acc += A[row][k] * B[col][k];
      d[lane][i] = acc;
    }
  return 0;
}

// ---- the SM120 kernel's register-level driving scheme -------------------------------------

static uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

// Codes of `rows`-row operand, row r (clamped), packed into a register covering 4 bytes from
// byte offset `byte0` (rows beyond the operand read as zero codes, as the kernel's zero-fill).
static uint32_t code_reg(const skref_gemm_operand* op, size_t r, size_t byte0) {
  if (r >= op->rows) return 0;
  size_t row_bytes = skref_gemm_is_fp4(op->recipe) ? op->k / 2 : op->k;
  return load_u32(op->codes + r * row_bytes + byte0);
}

static uint32_t scale_reg(const skref_gemm_operand* op, size_t r, size_t slab) {
  // One aligned u32: scale columns 4*slab .. 4*slab+3 of row r (padding rows hold 1.0).
  size_t vec = skref_gemm_scale_vec(op->recipe), ks = op->k / vec;
  size_t rr = r < op->rows ? r : op->rows - 1;
  return load_u32((const uint8_t*)op->scales + skref_gemm_swizzled_offset(rr, 4 * slab, ks));
}

void skref_mma_emu_gemm(const skref_gemm_operand* a, const skref_gemm_operand* b, double alpha, double* c,
                        int fault_injection) {
  const skref_gemm_recipe rec = a->recipe;
  const skref_mma_kind kind = rec == SKREF_GEMM_NVFP4 ? SKREF_MMA_NVF4_K64
                              : rec == SKREF_GEMM_MXFP4 ? SKREF_MMA_MXF4_K64
                                                        : SKREF_MMA_MXF8_E4M3_K32;
  const int fp4 = kind != SKREF_MMA_MXF8_E4M3_K32;
  const size_t M = a->rows, N = b->rows, K = a->k;
  const int mma_k = skref_mma_k(kind);
  // K elements covered by one u32 of scales: 4 scale columns.
  const size_t slab_k = 4 * (size_t)skref_gemm_scale_vec(rec);
  for (size_t m0 = 0; m0 < M; m0 += 32)
    for (size_t n0 = 0; n0 < N; n0 += 32) {
      double acc[2][4][32][4];
      memset(acc, 0, sizeof acc);
      for (size_t slab = 0; slab * slab_k < K; ++slab) {
        uint32_t sfa[32], sfb[32];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          // A: lane 4*(m%8) + 2*tid + m/8 holds row m of m tile `tid`.
          const int mt = t / 2, m_in_tile = g + 8 * (t % 2);
          sfa[lane] = scale_reg(a, m0 + 16 * mt + m_in_tile, slab);
          // B: lane 4*n + tid holds column n of n tile `tid`.
          sfb[lane] = scale_reg(b, n0 + 8 * t + g, slab);
        }
        for (size_t k0 = slab * slab_k; k0 < (slab + 1) * slab_k && k0 < K; k0 += mma_k) {
          const int blocks_per_mma = mma_k / skref_gemm_scale_vec(rec);
          const int bid = (int)((k0 - slab * slab_k) / (size_t)mma_k) * blocks_per_mma;
          const size_t kbyte = fp4 ? k0 / 2 : k0;
          const size_t reg_k_step = 16;  // bytes between the two K halves of a fragment (k32 e4m3 and k64 e2m1 alike)
          for (int mt = 0; mt < 2; ++mt) {
            uint32_t ar[32][4];
            for (int lane = 0; lane < 32; ++lane) {
              const int g = lane / 4, t = lane % 4;
              for (int r = 0; r < 4; ++r)
                ar[lane][r] = code_reg(a, m0 + 16 * mt + g + 8 * (r & 1), kbyte + 4 * t + reg_k_step * (r >> 1));
            }
            for (int nt = 0; nt < 4; ++nt) {
              uint32_t br[32][2];
              float zero[32][4];
              memset(zero, 0, sizeof zero);
              for (int lane = 0; lane < 32; ++lane)
                for (int r = 0; r < 2; ++r)
                  br[lane][r] = code_reg(b, n0 + 8 * nt + lane / 4, kbyte + 4 * (lane % 4) + reg_k_step * r);
              double d[32][4];
              const int tid_a = fault_injection == 1 ? 1 - mt : mt;
              skref_mma_emu(kind, (const uint32_t(*)[4])ar, (const uint32_t(*)[2])br, (const float(*)[4])zero, sfa, sfb,
                            bid, tid_a, bid, nt, d);
              for (int lane = 0; lane < 32; ++lane)
                for (int i = 0; i < 4; ++i) acc[mt][nt][lane][i] += d[lane][i];
            }
          }
        }
      }
      for (int mt = 0; mt < 2; ++mt)
        for (int nt = 0; nt < 4; ++nt)
          for (int lane = 0; lane < 32; ++lane)
            for (int i = 0; i < 4; ++i) {
              size_t m = m0 + 16 * mt + lane / 4 + 8 * (i >> 1), n = n0 + 8 * nt + 2 * (lane % 4) + (i & 1);
              if (m < M && n < N) c[m * N + n] = alpha * acc[mt][nt][lane][i];
            }
    }
}

// ---- the SM120 kernel, block by block, through the kernel's own index functions -------------

#include <stdlib.h>

#include "gemm/sm120_layout.cuh"

// ldmatrix.x4 on a byte image: lane l supplies addr[l]; lane (g,t) register i <- 4 bytes at
// addr[8i + g] + 4t.
static void ldmatrix_x4_emu(const uint8_t* smem, const int addr[32], uint32_t out[32][4]) {
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) out[lane][i] = load_u32(smem + addr[8 * i + lane / 4] + 4 * (lane % 4));
}

int skref_sm120_sim_gemm(const skref_gemm_operand* a, const skref_gemm_operand* b, double alpha, double* c,
                         size_t ldc, const skref_sm120_cfg* cfg, int fault) {
  const int rec = (int)a->recipe;
  if (rec < 0 || rec > 2 || b->recipe != a->recipe || a->k != b->k) return -1;
  const int BM = cfg->bm, BN = cfg->bn, WMS = cfg->warps_m, WNS = cfg->warps_n;
  if (WMS < 1 || WNS < 1 || WMS * WNS > 16 || BM % (32 * WMS) || BN % (32 * WNS) || cfg->stages < 2) return -1;
  if (sk_sm120_smem_bytes(rec, BM, BN, cfg->stages) > 101376) return -1;
  const int M = (int)a->rows, N = (int)b->rows, K = (int)a->k;
  if (K % SK_SM120_BK || M < 1 || N < 1 || ldc < (size_t)N) return -1;
  const skref_mma_kind kind = rec == 0 ? SKREF_MMA_NVF4_K64 : rec == 1 ? SKREF_MMA_MXF4_K64 : SKREF_MMA_MXF8_E4M3_K32;

  const int RB = sk_sm120_stage_row_bytes(rec), CPR = RB / 16, SLABS = sk_sm120_slabs_per_stage(rec);
  const int MMAS = sk_sm120_mmas_per_slab(rec), THREADS = 32 * WMS * WNS;
  const int WM = BM / WMS, WN = BN / WNS, MT = WM / 16, NT = WN / 8, WARPS = WMS * WNS;
  const long long grow = sk_sm120_row_bytes(rec, K);
  const size_t sa_bytes = skref_gemm_scale_bytes(a->recipe, SKREF_GEMM_A, a->rows, a->k);
  const size_t sb_bytes = skref_gemm_scale_bytes(b->recipe, SKREF_GEMM_B, b->rows, b->k);
  const int stage_bytes = sk_sm120_stage_bytes(rec, BM, BN);
  uint8_t* stage = malloc((size_t)stage_bytes);
  double* acc = malloc(sizeof(double) * (size_t)WARPS * MT * NT * 32 * 4);
  uint32_t(*af)[32][4] = malloc(sizeof(uint32_t) * 32 * 4 * (size_t)MT);
  uint32_t(*bf)[32][2] = malloc(sizeof(uint32_t) * 32 * 2 * (size_t)NT);
  uint32_t(*sfa)[32] = malloc(sizeof(uint32_t) * 32 * (size_t)(MT / 2));
  uint32_t(*sfb)[32] = malloc(sizeof(uint32_t) * 32 * (size_t)(NT / 4));
  const float zero[32][4] = {{0}};
  int rc = 0;

  for (int by = 0; by * BM < M; ++by)
    for (int bx = 0; bx * BN < N; ++bx) {
      const int m0 = by * BM, n0 = bx * BN;
      memset(acc, 0, sizeof(double) * (size_t)WARPS * MT * NT * 32 * 4);
      for (int ks = 0; ks < K / SK_SM120_BK; ++ks) {
        // ---- sm120_load_stage: every thread's cp.async items ----
        memset(stage, 0xA5, (size_t)stage_bytes);
        uint8_t* s_a = stage;
        uint8_t* s_b = s_a + BM * RB;
        uint8_t* s_sa = s_b + BN * RB;
        uint8_t* s_sb = s_sa + 4 * SLABS * BM;
        for (int tid = 0; tid < THREADS; ++tid) {
          for (int it = 0; it < (BM * CPR + THREADS - 1) / THREADS; ++it) {
            const int ci = tid + it * THREADS;
            if (ci >= BM * CPR) break;
            const int r = sk_sm120_copy_row(ci, RB), byte = sk_sm120_copy_byte(ci, RB);
            uint8_t* dst = s_a + sk_sm120_code_smem_offset(r, byte, RB);
            if (m0 + r < M) memcpy(dst, a->codes + (long long)(m0 + r) * grow + (long long)ks * RB + byte, 16);
            else memset(dst, 0, 16);
          }
          for (int it = 0; it < (BN * CPR + THREADS - 1) / THREADS; ++it) {
            const int ci = tid + it * THREADS;
            if (ci >= BN * CPR) break;
            const int r = sk_sm120_copy_row(ci, RB), byte = sk_sm120_copy_byte(ci, RB);
            uint8_t* dst = s_b + sk_sm120_code_smem_offset(r, byte, RB);
            if (n0 + r < N) memcpy(dst, b->codes + (long long)(n0 + r) * grow + (long long)ks * RB + byte, 16);
            else memset(dst, 0, 16);
          }
          for (int it = 0; it < (SLABS * BM + THREADS - 1) / THREADS; ++it) {
            const int ci = tid + it * THREADS;
            if (ci >= SLABS * BM) break;
            const int slab = ci / BM, r = ci % BM;
            uint8_t* dst = s_sa + 4 * sk_sm120_scale_smem_word(slab, r, BM);
            if (m0 + r < M) {
              const long long off =
                  sk_sm120_scale_gmem_offset(rec, m0 + r, ks, fault == SKREF_SM120_FAULT_SLAB ? 0 : slab, K);
              if (off < 0 || (size_t)off + 4 > sa_bytes) { rc = -2; goto out; }
              memcpy(dst, (const uint8_t*)a->scales + off, 4);
            } else {
              memset(dst, 0, 4);
            }
          }
          for (int it = 0; it < (SLABS * BN + THREADS - 1) / THREADS; ++it) {
            const int ci = tid + it * THREADS;
            if (ci >= SLABS * BN) break;
            const int slab = ci / BN, r = ci % BN;
            uint8_t* dst = s_sb + 4 * sk_sm120_scale_smem_word(slab, r, BN);
            if (n0 + r < N) {
              const long long off =
                  sk_sm120_scale_gmem_offset(rec, n0 + r, ks, fault == SKREF_SM120_FAULT_SLAB ? 0 : slab, K);
              if (off < 0 || (size_t)off + 4 > sb_bytes) { rc = -2; goto out; }
              memcpy(dst, (const uint8_t*)b->scales + off, 4);
            } else {
              memset(dst, 0, 4);
            }
          }
        }
        // ---- sm120_compute_stage, warp by warp ----
        for (int warp = 0; warp < WARPS; ++warp) {
          const int wm0 = sk_sm120_warp_m(warp, WMS) * WM, wn0 = sk_sm120_warp_n(warp, WMS) * WN;
          double* wacc = acc + (size_t)warp * MT * NT * 32 * 4;
          for (int slab = 0; slab < SLABS; ++slab) {
            for (int i = 0; i < MT / 2; ++i)
              for (int lane = 0; lane < 32; ++lane)
                sfa[i][lane] = load_u32(s_sa + 4 * sk_sm120_scale_smem_word(slab, wm0 + 32 * i + sk_sm120_sfa_row(lane), BM));
            for (int i = 0; i < NT / 4; ++i)
              for (int lane = 0; lane < 32; ++lane) {
                const int row = fault == SKREF_SM120_FAULT_SFB_ROW ? lane : sk_sm120_sfb_row(lane);
                sfb[i][lane] = load_u32(s_sb + 4 * sk_sm120_scale_smem_word(slab, wn0 + 32 * i + row, BN));
              }
            for (int j = 0; j < MMAS; ++j) {
              const int kb = sk_sm120_mma_byte(rec, slab, j);
              int addr[32];
              for (int mt = 0; mt < MT; ++mt) {
                for (int lane = 0; lane < 32; ++lane) {
                  const int row = wm0 + 16 * mt + sk_sm120_ldsm_a_row(lane), byte = kb + sk_sm120_ldsm_a_byte(lane);
                  addr[lane] = fault == SKREF_SM120_FAULT_NO_SWIZZLE ? row * RB + byte
                                                                     : sk_sm120_code_smem_offset(row, byte, RB);
                }
                ldmatrix_x4_emu(s_a, addr, af[mt]);
              }
              for (int p = 0; p < NT / 2; ++p) {
                uint32_t r4[32][4];
                for (int lane = 0; lane < 32; ++lane) {
                  const int lrow = fault == SKREF_SM120_FAULT_LDSM_B ? sk_sm120_ldsm_a_row(lane) : sk_sm120_ldsm_b_row(lane);
                  const int lbyte = fault == SKREF_SM120_FAULT_LDSM_B ? sk_sm120_ldsm_a_byte(lane) : sk_sm120_ldsm_b_byte(lane);
                  addr[lane] = sk_sm120_code_smem_offset(wn0 + 16 * p + lrow, kb + lbyte, RB);
                }
                ldmatrix_x4_emu(s_b, addr, r4);
                for (int lane = 0; lane < 32; ++lane) {
                  bf[2 * p][lane][0] = r4[lane][0];
                  bf[2 * p][lane][1] = r4[lane][1];
                  bf[2 * p + 1][lane][0] = r4[lane][2];
                  bf[2 * p + 1][lane][1] = r4[lane][3];
                }
              }
              const int bid = fault == SKREF_SM120_FAULT_BID ? 0 : sk_sm120_bid(rec, j);
              for (int mt = 0; mt < MT; ++mt)
                for (int nt = 0; nt < NT; ++nt) {
                  double d[32][4];
                  const int tid_a = fault == SKREF_SM120_FAULT_TID_A ? 1 - sk_sm120_tid_a(mt) : sk_sm120_tid_a(mt);
                  if (skref_mma_emu(kind, (const uint32_t(*)[4])af[mt], (const uint32_t(*)[2])bf[nt], zero,
                                    sfa[sk_sm120_sfa_reg(mt)], sfb[sk_sm120_sfb_reg(nt)], bid, tid_a, bid,
                                    sk_sm120_tid_b(nt), d)) {
                    rc = -3;  // selector ptxas would refuse
                    goto out;
                  }
                  double* tacc = wacc + ((size_t)mt * NT + nt) * 32 * 4;
                  for (int lane = 0; lane < 32; ++lane)
                    for (int i = 0; i < 4; ++i) tacc[lane * 4 + i] += d[lane][i];
                }
            }
          }
        }
      }
      // ---- epilogue ----
      for (int warp = 0; warp < WARPS; ++warp) {
        const int wm0 = sk_sm120_warp_m(warp, WMS) * WM, wn0 = sk_sm120_warp_n(warp, WMS) * WN;
        const double* wacc = acc + (size_t)warp * MT * NT * 32 * 4;
        for (int mt = 0; mt < MT; ++mt)
          for (int nt = 0; nt < NT; ++nt)
            for (int lane = 0; lane < 32; ++lane)
              for (int i = 0; i < 4; ++i) {
                const int m = m0 + wm0 + 16 * mt + sk_sm120_acc_row(lane, i);
                const int n = n0 + wn0 + 8 * nt + sk_sm120_acc_col(lane, i);
                if (m < M && n < N) c[(size_t)m * ldc + (size_t)n] = alpha * wacc[((size_t)mt * NT + nt) * 128 + lane * 4 + i];
              }
      }
    }
out:
  free(stage); free(acc); free(af); free(bf); free(sfa); free(sfb);
  return rc;
}
