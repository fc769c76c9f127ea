// CPU emulation of the SM120 block-scaled mma.sync; see mma_emu.h.
#include "ref/mma_emu.h"

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
