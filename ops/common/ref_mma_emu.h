// CPU emulation of the SM120 block-scaled warp MMAs (mma.sync ... .block_scale), lane by lane:
// the same per-lane A/B/C registers, scale registers and (byte-id, thread-id) selectors a kernel
// passes to the instruction. Semantics emulated (ops/gemm/gemm.md s5.3):
//   lane = 4*g + t
//   m16n8k32 e4m3 (kind::mxf8f6f4, scale_vec::1X, ue8m0): A reg r: row g + 8*(r&1), K 4t + 16*(r>>1) + byte
//                                                        B reg r: col g, K 4t + 16*r + byte
//   m16n8k64 e2m1 (kind::mxf4 2X ue8m0 / kind::mxf4nvf4 4X ue4m3): A reg r: row g + 8*(r&1),
//                 K 8t + 32*(r>>1) + nibble;  B reg r: col g, K 8t + 32*r + nibble
//   C/D reg i: row g + 8*(i>>1), col 2t + (i&1)
//   scales: row m of A from lane 4*(m%8) + 2*tid_a + m/8, col n of B from lane 4*n + tid_b;
//           K block j (of K/scale_vec blocks) uses byte (bid + j) of that lane's register.
// Products are exact in double; accumulation is in double (the hardware accumulates in FP32:
// callers compare with FP32-accumulation tolerances).
#pragma once
#include <stdint.h>

#include "gemm/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SKREF_MMA_MXF8_E4M3_K32 = 0,  // kind::mxf8f6f4 .scale_vec::1X e4m3 x e4m3, ue8m0 (MXFP8)
  SKREF_MMA_MXF4_K64 = 1,       // kind::mxf4 .scale_vec::2X e2m1, ue8m0 (MXFP4)
  SKREF_MMA_NVF4_K64 = 2,       // kind::mxf4nvf4 .scale_vec::4X e2m1, ue4m3 (NVFP4)
} skref_mma_kind;

int skref_mma_k(skref_mma_kind kind);          // 32 or 64
int skref_mma_scale_vec(skref_mma_kind kind);  // 32, 32, 16
// Returns 0, or -1 when a selector is outside what ptxas accepts (then d is untouched).
int skref_mma_emu(skref_mma_kind kind, const uint32_t a[32][4], const uint32_t b[32][2], const float c[32][4],
                  const uint32_t sfa[32], const uint32_t sfb[32], int bid_a, int tid_a, int bid_b, int tid_b,
                  double d[32][4]);

// Drives the emulated MMA the way ops/gemm/sm120_blockscaled.cuh does: a warp tile of
// 32 rows x 32 cols (2 m16 tiles x 4 n8 tiles); per 128-K slab each lane loads one u32 of A
// scales (m tile = (lane%4)/2, picked by tid_a) and one u32 of B scales (n tile = lane%4, picked
// by tid_b) straight from the 128x4 swizzled layout; byte-id walks the K blocks of the slab.
// recipe: SKREF_GEMM_NVFP4, _MXFP4 or _MXFP8. Writes c[m*N+n] = alpha * sum (double).
// fault_injection: 0 none; 1 swaps the tid_a of the two m tiles (a test that must fail).
void skref_mma_emu_gemm(const skref_gemm_operand* a, const skref_gemm_operand* b, double alpha, double* c,
                        int fault_injection);

// ---- the SM120 kernel itself, block by block (ops/gemm/sm120_blockscaled.cuh) --------
// Runs the kernel's data movement on the CPU with the SAME index functions the kernel calls
// (ops/gemm/sm120_layout.cuh is included by both): per block and 128-K stage, the
// cp.async work items fill a shared-memory image (XOR-swizzled codes, zero-filled rows >= M / N,
// scale words; untouched bytes hold garbage 0xA5); per warp, ldmatrix.x4 is emulated from the
// addresses each lane supplies (lane (g,t), register i <- 4 bytes at lane 8i+g's address + 4t),
// scale registers are read from the image, and skref_mma_emu runs with the kernel's byte-id /
// thread-id selectors; the epilogue writes c[m*ldc + n] = alpha * acc for m < M, n < N only.
// Not modelled: the cp.async ring (wait_group / barrier order), FP32 accumulation order, the
// output rounding (c is double).
typedef struct {
  int bm, bn, warps_m, warps_n, stages;
} skref_sm120_cfg;

enum {
  SKREF_SM120_FAULT_NONE = 0,
  SKREF_SM120_FAULT_TID_A = 1,        // thread-id of the two m tiles swapped
  SKREF_SM120_FAULT_NO_SWIZZLE = 2,   // ldmatrix reads the code tile unswizzled
  SKREF_SM120_FAULT_SFB_ROW = 3,      // B scale register of lane l taken from tile column l
  SKREF_SM120_FAULT_BID = 4,          // byte-id stuck at 0 (mxfp4 / mxfp8 only)
  SKREF_SM120_FAULT_LDSM_B = 5,       // B ldmatrix matrices in A order
  SKREF_SM120_FAULT_SLAB = 6,         // scale slab index dropped in the global offset (nvfp4 only)
};

// Returns 0, or -1 for a configuration the kernel's static_asserts reject (recipe, tile shape,
// 99 KB of shared memory) or K % 128 != 0 (the kernel traps). ldc >= N.
int skref_sm120_sim_gemm(const skref_gemm_operand* a, const skref_gemm_operand* b, double alpha, double* c,
                         size_t ldc, const skref_sm120_cfg* cfg, int fault);

#ifdef __cplusplus
}
#endif
