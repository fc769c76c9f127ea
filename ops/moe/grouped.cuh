// moe grouped regime (m > 8): tiled FC1 (+ activation, + NVFP4 re-quantization) and FC2 (+ combine)
// over the routes packed by expert (route.cuh's route_pack), the fixed-order combine and the
// atomic mode's finalize. Portable: sm_90a, sm_120a, sm_121a (mma.sync BF16 / FP16 only).
//
// LAUNCH CONTRACT
//   template <int PHASE, int RECIPE, int WFMT, int ACT, int BM, int WARPS_M, int WARPS_N, int MODE>
//   __global__ void sk::moe::grouped_gemm(sk_moe_params p)
//     PHASE 1 (FC1: x or packed_a -> inter) | 2 (FC2: inter -> out_acc); RECIPE SK_MOE_W4A16 |
//     SK_MOE_W4A4 (WFMT NVFP4 only); ACT (PHASE 1); MODE SK_MOE_COMBINE_ATOMIC | _DET (PHASE 2;
//     PHASE 1 instantiations use 0); BM in {16, 32, 64, 128} = p.s.bm; WARPS_M / WARPS_N =
//     sk_moe_grouped_warps_m / _n(RECIPE, BM) (W4A16 2 x 64-column warp tiles, W4A4 4 x 32);
//     BN = 128, warp tile (BM / WARPS_M) x (128 / WARPS_N), block 32 * WARPS_M * WARPS_N.
//     grid (sk_moe_grouped_fc1_ntiles(ACT, Np) or sk_moe_grouped_fc2_ntiles(K), p.s.max_tiles, 1);
//     CTAs with blockIdx.y >= flags[1] (route_pack's tile count) return after the wait.
//     dynamic shared memory: W4A16 sk_moe_w4a16_smem_bytes(BM, 128, 4) (BK 64, 4 stages);
//     W4A4 sk_moe_w4a4_smem_bytes(BM, 128, PHASE 1 gated ? 2 : 1, 3) (BK 128, 3 stages); needs the
//     >48 KB opt-in above 49152.
//     Reads tiles / route_of_row (route_pack); PHASE 1 reads x (W4A16, rows gathered by route) or
//     packed_a(_scales) (W4A4, pack_quant), W1, w1_gs, a1_gs, a2_gs, topk_weights (apply_on_input);
//     writes inter (W4A16: BF16 [rows][Np]; W4A4: E2M1 [rows][Np/2] + swizzled scales), rows of
//     the tile's expert only; with p.combine == ATOMIC every CTA also zeroes its share of out_acc
//     ([m][K] fp32) for FC2. PHASE 2 reads inter, W2, w2_gs, a2_gs, topk_weights and writes
//     DET: out_acc[route][K] = down (fp32); ATOMIC: red.add of w * down into out_acc[token][K].
//   __global__ void sk::moe::combine(sk_moe_params p)   (after FC2)
//     grid (ceil(m * K / 8 / 256), 1, 1), block 256. p.combine DET: out[t, c] = bf16 of the fp32
//     sum over j ascending of fp32(w_j * down_j[c]) (w = 1 with apply_on_input) over the kept
//     routes (route_pos >= 0); ATOMIC: out = bf16(out_acc[t, c]). Every output element written.
//   Launch sequence (grouped): route_pack, [pack_quant (W4A4)], grouped_gemm<1>, grouped_gemm<2>,
//   combine; each waits for the previous (programmatic dependent launch allowed).
//
// HOW IT WORKS
//   A CTA computes a BM x 128 tile of one expert's packed rows. W4A16: stages of 64 K; A (BF16 rows,
//   gathered from x by route in FC1) by cp.async into 128-byte rows, 16-byte chunks XOR-swizzled
//   by row, ldmatrix.x4 fragments; B (E2M1) 32 bytes per row and stage plus the u32 of block scales;
//   lane (g, t) of an n8 tile reads its column's 32 bytes and keeps byte t of each word (the
//   m16n8k16 B fragment's K pair 2t, 2t + 1 of each k16 half), decoded to BF16 times the scale's
//   S (common.cuh: exact, value * 2^-8). W4A4: gemm/mma_tiled.cuh's FP4 path (stages of 128 K, FP16
//   operands value * scale * 2^-14, exact; 1024-byte scale k-tile pairs per 128-row block).
//   FC1 B tiles hold 64 up rows and their 64 gate rows interleaved (sk_moe_grouped_fc1_row), so a
//   thread's accumulator pair is (up, gate) of one intermediate column; the epilogue applies the
//   activation, rounds to BF16 and stores, or (W4A4) quantizes each warp's 16 columns of a row as
//   one NVFP4 block (quad shuffles) with a2_gs of the expert.
#pragma once
#include <cuda_bf16.h>

#include "common/defs.cuh"
#include "common/mma.cuh"
#include "common/sync.cuh"
#include "gemm/mma_tiled.cuh"  // fp4_word_nvfp4, TiledLayout helpers (tiled_layout.cuh)
#include "moe/act.cuh"
#include "moe/common.cuh"
#include "moe/plan.cuh"

namespace sk {
namespace moe {

constexpr int kBN = SK_MOE_GROUPED_BN;

SK_DEVICE void red_add_f32x2(float* addr, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(addr), "f"(a), "f"(b) : "memory");
}

// Zero this CTA's share of out_acc ([m][K] fp32) before FC2's atomic adds (ATOMIC combine).
SK_DEVICE void zero_out_acc_share(const sk_moe_params& p, int threads) {
  if (p.combine != SK_MOE_COMBINE_ATOMIC) return;
  const long long n4 = p.m * p.k / 4, ctas = (long long)gridDim.x * gridDim.y;
  const long long cta = (long long)blockIdx.y * gridDim.x + blockIdx.x;
  float4* acc = reinterpret_cast<float4*>(p.scratch + p.s.out_acc);
  for (long long i = cta * threads + threadIdx.x; i < n4; i += ctas * threads) acc[i] = make_float4(0, 0, 0, 0);
}

// The CTA's M tile (route_pack's table), or false when blockIdx.y is past the run's tile count.
// Waits for the previous kernel first; FC1 CTAs also zero their share of out_acc (ATOMIC).
template <int PHASE>
SK_DEVICE bool enter_tile(const sk_moe_params& p, int threads, int4& tile) {
  pdl_enter();
  if (PHASE == 1) zero_out_acc_share(p, threads);
  if ((int)blockIdx.y >= reinterpret_cast<const int*>(p.scratch + p.s.flags)[1]) return false;
  tile = reinterpret_cast<const int4*>(p.scratch + p.s.tiles)[blockIdx.y];
  return true;
}

// The cp.async ring: the first STAGES - 1 stages, then per k stage: wait for it, barrier, refill
// the slot consumed in the previous iteration (load(slot, k stage)).
template <int STAGES, class Load>
SK_DEVICE void ring_prologue(int num_kb, Load load) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < num_kb) load(s, s);
    cp_async_commit();
  }
}
template <int STAGES, class Load>
SK_DEVICE void ring_advance(int kb, int num_kb, Load load) {
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  const int pf = kb + STAGES - 1;
  if (pf < num_kb) load(pf % STAGES, pf);
  cp_async_commit();
}

// ---- epilogue, shared by the portable and the SM120 kernels --------------------------------------
// acc[mt][nt][i]: tile row wm0 + 16 mt + g + 8 (i >> 1), tile column wn0 + 8 nt + 2 t + (i & 1);
// `unit` x acc is the dot product (2^8 W4A16, 2^28 portable W4A4, 1 SM120).
template <int PHASE, int RECIPE, int ACT, int MODE, int MT, int NT>
SK_DEVICE void grouped_epilogue(const sk_moe_params& p, const float (&acc)[MT][NT][4], int4 tile, int nt_cta, int wm0,
                                int wn0, float unit) {
  static_assert(NT % 4 == 0, "a warp holds whole NVFP4 blocks: 16 gated / 32 ungated intermediate columns per 4 n8 tiles");
  constexpr bool kW4a4 = RECIPE == SK_MOE_W4A4;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int e = tile.x, row0 = tile.y, rows = tile.z;
  const int np = padded(p.n), K = p.k;
  const int* route_of_row = reinterpret_cast<const int*>(p.scratch + p.s.route_of_row);
  if (PHASE == 1) {
    constexpr bool kGated = ACT != SK_MOE_ACT_RELU2;
    const float wgs = p.w1_gs ? __ldg(p.w1_gs + e) : 1.0f;
    const float alpha = kW4a4 ? div_rn(wgs, __ldg(p.a1_gs + e)) : wgs;
    const float gs2 = kW4a4 ? __ldg(p.a2_gs + e) : 0.0f, gs2_recip = kW4a4 ? gs_reciprocal(gs2) : 0.0f;
    // Intermediate column of (nt, pair): gated (8 nt + 2 t) / 2, ungated 8 nt + 2 t + e.
    const int ic0 = kGated ? nt_cta * (kBN / 2) + wn0 / 2 : nt_cta * kBN + wn0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm0 + 16 * mt + g + 8 * h;
        const bool live = r < rows;
        const long long prow = row0 + r;
        float wr = 1.0f;
        if (!kW4a4 && p.apply_on_input && live) wr = __ldg(p.topk_weights + route_of_row[prow]);
        float a[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float x0 = acc[mt][nt][2 * h] * unit * alpha, x1 = acc[mt][nt][2 * h + 1] * unit * alpha;
          if (kGated) {
            a[nt][0] = sk_moe_act(ACT, x1 * wr, x0 * wr, p.limit, p.alpha, p.beta);
            a[nt][1] = 0.0f;
          } else {
            a[nt][0] = sk_moe_act(ACT, x0 * wr, 0.0f, p.limit, p.alpha, p.beta);
            a[nt][1] = sk_moe_act(ACT, x1 * wr, 0.0f, p.limit, p.alpha, p.beta);
          }
        }
        if (!kW4a4) {
          u16* inter = reinterpret_cast<u16*>(p.scratch + p.s.inter) + prow * np + ic0;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if (!live) continue;
            if (kGated) inter[4 * nt + t] = to_bf16(a[nt][0]);
            else *reinterpret_cast<u32*>(inter + 8 * nt + 2 * t) = u32(to_bf16(a[nt][0])) | u32(to_bf16(a[nt][1])) << 16;
          }
        } else {
          // NVFP4 blocks of 16 intermediate columns: gated NT / 4 per warp row (block b: nt in
          // [4b, 4b + 4), lane t holds columns 4 (nt - 4b) + t), ungated NT / 2 (block b: nt in
          // {2b, 2b + 1}, columns 8 (nt - 2b) + 2 t + e).
          constexpr int kBlocks = kGated ? NT / 4 : NT / 2;
#pragma unroll
          for (int b = 0; b < kBlocks; ++b) {
            float v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float x = kGated ? a[4 * b + i][0] : a[2 * b + (i >> 1)][i & 1];
              v[i] = __uint_as_float(u32(to_bf16(x)) << 16);  // the BF16 rounding of the trace
            }
            u32 amax = 0;
#pragma unroll
            for (int i = 0; i < 4; ++i) amax = max(amax, magnitude_bits_skip_nan(v[i]));
            amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
            amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
            const u32 sc = nvfp4_scale_code(__uint_as_float(amax), gs2);
            const float eff = nvfp4_eff(sc, gs2_recip);
            float q[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) q[i] = i < 4 ? v[i] : 0.0f;
            const u32 codes = quant::nvfp4_quantize8<kCvtHardware>(q, eff);  // nibble i: v[i]
            unsigned long long word = 0;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int pos = kGated ? 4 * i + t : 8 * (i >> 1) + 2 * t + (i & 1);
              word |= (unsigned long long)((codes >> (4 * i)) & 15u) << (4 * pos);
            }
            word |= __shfl_xor_sync(0xFFFFFFFFu, word, 1);
            word |= __shfl_xor_sync(0xFFFFFFFFu, word, 2);
            const int blk = ic0 / 16 + b;
            if (live && t == 0) {
              *reinterpret_cast<unsigned long long*>(p.scratch + p.s.inter + prow * (np / 2) + 8 * blk) = word;
              p.scratch[p.s.inter_scales + sk_moe_swizzled_offset(prow, blk, np / 16)] = (u8)sc;
            }
          }
        }
      }
  } else {
    const float wgs = p.w2_gs ? __ldg(p.w2_gs + e) : 1.0f;
    const float alpha = kW4a4 ? div_rn(wgs, __ldg(p.a2_gs + e)) : wgs;
    float* out_acc = reinterpret_cast<float*>(p.scratch + p.s.out_acc);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm0 + 16 * mt + g + 8 * h;
        if (r >= rows) continue;
        const int route = route_of_row[row0 + r];
        const float w = p.apply_on_input ? 1.0f : __ldg(p.topk_weights + route);
        const long long base = MODE == SK_MOE_COMBINE_DET ? (long long)route * K : (long long)(route / p.topk) * K;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int c = nt_cta * kBN + wn0 + 8 * nt + 2 * t;
          if (c >= K) continue;
          const float d0 = acc[mt][nt][2 * h] * unit * alpha, d1 = acc[mt][nt][2 * h + 1] * unit * alpha;
          if (MODE == SK_MOE_COMBINE_DET) *reinterpret_cast<float2*>(out_acc + base + c) = make_float2(d0, d1);
          else red_add_f32x2(out_acc + base + c, __fmul_rn(w, d0), __fmul_rn(w, d1));
        }
      }
  }
}

// ---- the portable kernel --------------------------------------------------------------------------
template <int RECIPE, int BM>
struct GroupedLayout {
  static constexpr int kStages = RECIPE == SK_MOE_W4A16 ? 4 : 3;
  static constexpr int kBK = RECIPE == SK_MOE_W4A16 ? 64 : 128;
  // W4A16 stage: [A BM x 128][B 128 x 32][B scales 128 x 4]; W4A4: [A BM x 64][B 128 x 64][A scales
  // 1024][B scales 1024 x blocks].
  static constexpr int kOffB = RECIPE == SK_MOE_W4A16 ? BM * 128 : BM * 64;
  static constexpr int kOffSB = RECIPE == SK_MOE_W4A16 ? kOffB + kBN * 32 : kOffB + kBN * 64 + 1024;
  static constexpr int kOffSA = kOffB + kBN * 64;
  static SK_HOST_DEVICE int stage_bytes(int b_blocks) {
    return RECIPE == SK_MOE_W4A16 ? sk_moe_w4a16_stage_bytes(BM, kBN) : sk_moe_w4a4_stage_bytes(BM, kBN, b_blocks);
  }
};

template <int PHASE, int RECIPE, int WFMT, int ACT, int BM, int WARPS_M, int WARPS_N, int MODE>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, 1) grouped_gemm(const sk_moe_params p) {
  static_assert(RECIPE == SK_MOE_W4A16 || WFMT == SK_MOE_WFMT_NVFP4, "W4A4 needs NVFP4 weights");
  static_assert(BM == 16 || BM == 32 || BM == 64 || BM == 128, "BM");
  using L = GroupedLayout<RECIPE, BM>;
  constexpr int kThreads = 32 * WARPS_M * WARPS_N, WM = BM / WARPS_M, MT = WM / 16, WN = kBN / WARPS_N, NT = WN / 8;
  constexpr bool kW4a16 = RECIPE == SK_MOE_W4A16;
  constexpr bool kGatedB = PHASE == 1 && ACT != SK_MOE_ACT_RELU2;
  constexpr int kBBlocks = !kW4a16 && kGatedB ? 2 : 1;
  static_assert(WM % 16 == 0 && MT >= 1 && NT % 4 == 0 && (RECIPE != SK_MOE_W4A16 || kThreads <= kBN), "warp tile");
  extern __shared__ __align__(128) u8 smem[];

  int4 tile;
  if (!enter_tile<PHASE>(p, kThreads, tile)) return;
  const int e = tile.x, row0 = tile.y, rows = tile.z, nt_cta = blockIdx.x;
  const int np = padded(p.n), kp = padded(p.k), K = p.k;
  const int kdim = PHASE == 1 ? kp : np;  // padded K extent of this GEMM
  const int k_valid = PHASE == 1 ? K : np;
  const int num_kb = kdim / L::kBK;
  const int stage_bytes = L::stage_bytes(kBBlocks);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int* route_of_row = reinterpret_cast<const int*>(p.scratch + p.s.route_of_row);

  // B (weights) of this expert and N tile; tile row r -> weight row.
  const long long w_row_bytes = kdim / 2;
  const int w_scale_cols = kdim / (WFMT == SK_MOE_WFMT_NVFP4 ? 16 : 32);
  const u8* wc = PHASE == 1 ? p.w1_codes + e * sk_moe_w1_code_bytes(ACT, np, kp) : p.w2_codes + e * sk_moe_w2_code_bytes(K, np);
  const u8* ws = PHASE == 1 ? p.w1_scales + e * sk_moe_w1_scale_bytes(ACT, WFMT, np, kp)
                            : p.w2_scales + e * sk_moe_w2_scale_bytes(WFMT, K, np);
  auto b_row = [&](int r) -> int {
    return PHASE == 1 ? sk_moe_grouped_fc1_row(ACT, np, nt_cta, r) : min(nt_cta * kBN + r, K - 1);
  };

  float acc[MT][NT][4];
  zero_fragments(acc);

  if constexpr (kW4a16) {
    // ---- producer mapping: A chunk (tid % 8) of rows tid / 8 + i * (threads / 8); B chunk tid % 2
    // of rows tid / 2 + i * (threads / 2); B scale word of row tid (tid < 128).
    constexpr int kARowStep = kThreads / 8, kACopies = (BM + kARowStep - 1) / kARowStep;
    constexpr int kBRowStep = kThreads / 2, kBCopies = kBN / kBRowStep;
    const int a_chunk = tid & 7;
    const u8* a_src[kACopies];
    bool a_live[kACopies];
#pragma unroll
    for (int i = 0; i < kACopies; ++i) {
      const int r = tid / 8 + i * kARowStep;
      a_live[i] = r < BM && r < rows;
      const int route = a_live[i] ? route_of_row[row0 + r] : 0;
      a_src[i] = PHASE == 1 ? reinterpret_cast<const u8*>(p.x) + ((long long)(route / p.topk) * K + 8 * a_chunk) * 2
                            : p.scratch + p.s.inter + ((long long)(row0 + r) * np + 8 * a_chunk) * 2;
    }
    const u8* b_src[kBCopies];
#pragma unroll
    for (int i = 0; i < kBCopies; ++i) b_src[i] = wc + b_row(tid / 2 + i * kBRowStep) * w_row_bytes + 16 * (tid & 1);
    constexpr int kBScaleCopies = kBN / kThreads;
    const u8* bs_src[kBScaleCopies];
#pragma unroll
    for (int i = 0; i < kBScaleCopies; ++i) bs_src[i] = ws + sk_moe_swizzled_offset(b_row(tid + i * kThreads), 0, w_scale_cols);
    auto load_stage = [&](int stage, int kb) {
      u8* st = smem + stage * stage_bytes;
      const int k0 = kb * 64;
#pragma unroll
      for (int i = 0; i < kACopies; ++i) {
        const int r = tid / 8 + i * kARowStep;
        if (BM % kARowStep != 0 && r >= BM) break;
        const bool ok = a_live[i] && k0 + 8 * a_chunk < k_valid;
        cp_async_16(st + r * 128 + ((a_chunk ^ (r & 7)) << 4), ok ? a_src[i] + (long long)k0 * 2 : p.scratch, ok ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < kBCopies; ++i) {
        const int r = tid / 2 + i * kBRowStep;
        cp_async_16(st + L::kOffB + r * 32 + 16 * (tid & 1), b_src[i] + (long long)kb * 32);
      }
      // the u32 holding this stage's scale columns (NVFP4 4 kb .. + 3; MXFP4 2 kb, + 1)
      const int col = WFMT == SK_MOE_WFMT_NVFP4 ? 4 * kb : 2 * kb;
#pragma unroll
      for (int i = 0; i < kBScaleCopies; ++i) cp_async_4(st + L::kOffSB + 4 * (tid + i * kThreads), bs_src[i] + (col >> 2) * 512);
    };
    ring_prologue<L::kStages>(num_kb, load_stage);
    // byte t of words (2 i, 2 i + 1) of a 16-byte B chunk into the two low bytes
    const u32 sel_t = (u32)t | (u32)(4 + t) << 4;
#pragma unroll 1
    for (int kb = 0; kb < num_kb; ++kb) {
      ring_advance<L::kStages>(kb, num_kb, load_stage);
      const u8* st = smem + (kb % L::kStages) * stage_bytes;
      // Per n8 tile (B row wn * WN + 8 nt + g): the stage's scale word, and per half of the stage
      // byte t of each of the 4 words of the row's 16-byte chunk `half` (the K pairs 2t, 2t + 1 of
      // k16 2 half (words 0, 1) and 2 half + 1 (words 2, 3)).
      u32 sw[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) sw[nt] = *reinterpret_cast<const u32*>(st + L::kOffSB + 4 * (wn * WN + 8 * nt + g));
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k16 2 half, 2 half + 1
        u32 bf[NT][2][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          u32 s2[2];  // the scale multipliers {S, S} of the two k16
          if (WFMT == SK_MOE_WFMT_NVFP4) {
            nvfp4_scale_s2(half ? sw[nt] >> 16 : sw[nt] & 0xFFFFu, s2[0], s2[1]);
          } else {
            const u32 code = (sw[nt] >> (16 * (kb & 1) + 8 * half)) & 0xFFu;  // 32 K per UE8M0
            s2[0] = s2[1] = mxfp4_scale_s2(code);
          }
          const uint4 c = *reinterpret_cast<const uint4*>(st + L::kOffB + (wn * WN + 8 * nt + g) * 32 + 16 * half);
          u32 q[4];
          e2m1x8_to_bf16x2_raw(__byte_perm(__byte_perm(c.x, c.y, sel_t), __byte_perm(c.z, c.w, sel_t), 0x5410u), q);
#pragma unroll
          for (int i = 0; i < 2; ++i) bf[nt][i][0] = bf16x2_mul(q[2 * i], s2[i]), bf[nt][i][1] = bf16x2_mul(q[2 * i + 1], s2[i]);
        }
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const int r = wm * WM + 16 * mt + (lane & 15), ch = 2 * (2 * half + kk) + (lane >> 4);
            u32 af[4];
            ldmatrix_x4_at(af, smem_addr(st + r * 128 + ((ch ^ (r & 7)) << 4)));
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma_bf16_m16n8k16(acc[mt][nt], af, bf[nt][kk]);
          }
        }
      }
    }
    cp_async_wait<0>();
  } else {
    // ---- W4A4 portable: gemm/mma_tiled.cuh's FP4 path, rows mapped to packed rows / weight rows
    constexpr int kRowStep = kThreads / 4;  // 4 chunks of 16 bytes per 64-byte row
    constexpr int kCopiesA = (BM + kRowStep - 1) / kRowStep, kCopiesB = kBN / kRowStep;
    const int cp_row = tid / 4, cp_chunk = tid % 4;
    const u8* a_codes = p.scratch + (PHASE == 1 ? p.s.packed_a : p.s.inter);
    const u8* a_scales = p.scratch + (PHASE == 1 ? p.s.packed_a_scales : p.s.inter_scales);
    const int a_nkt = kdim / 64;  // swizzled k-tiles of the A scales (kdim / 16 columns / 4)
    const u8* b_src[kCopiesB];
#pragma unroll
    for (int i = 0; i < kCopiesB; ++i) b_src[i] = wc + b_row(cp_row + i * kRowStep) * w_row_bytes + 16 * cp_chunk;
    // B scale blocks: gated FC1 up rows (block 0) and gate rows (block 1); else the tile's block.
    const int b_blk0 = b_row(0) >> 7, b_blk1 = kGatedB ? b_row(1) >> 7 : 0;
    auto load_stage = [&](int stage, int kb) {
      u8* st = smem + stage * stage_bytes;
#pragma unroll
      for (int i = 0; i < kCopiesA; ++i) {
        const int r = cp_row + i * kRowStep;
        if (BM % kRowStep != 0 && r >= BM) break;
        cp_async_16(st + r * 64 + 16 * cp_chunk, a_codes + (long long)(row0 + r) * (kdim / 2) + kb * 64 + 16 * cp_chunk);
      }
#pragma unroll
      for (int i = 0; i < kCopiesB; ++i) cp_async_16(st + L::kOffB + (cp_row + i * kRowStep) * 64 + 16 * cp_chunk, b_src[i] + kb * 64);
      gemm::copy_block_async<kThreads>(st + L::kOffSA, a_scales + sk_tiled_scale_src_offset(0, row0, kb, a_nkt), 1024, true);
      gemm::copy_block_async<kThreads>(st + L::kOffSB, ws + sk_tiled_scale_src_offset(0, b_blk0 * 128, kb, w_scale_cols / 4), 1024, true);
      if (kBBlocks == 2)
        gemm::copy_block_async<kThreads>(st + L::kOffSB + 1024, ws + sk_tiled_scale_src_offset(0, b_blk1 * 128, kb, w_scale_cols / 4),
                                         1024, true);
    };
    ring_prologue<L::kStages>(num_kb, load_stage);
    const int a_row0 = wm * WM + g, b_row0 = wn * WN + g;
#pragma unroll 1
    for (int kb = 0; kb < num_kb; ++kb) {
      ring_advance<L::kStages>(kb, num_kb, load_stage);
      const u8* st = smem + (kb % L::kStages) * stage_bytes;
      uint4 ach[MT][2], bch[NT];
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) ach[i][h] = *reinterpret_cast<const uint4*>(st + (a_row0 + 16 * i + 8 * h) * 64 + 16 * t);
#pragma unroll
      for (int j = 0; j < NT; ++j) bch[j] = *reinterpret_cast<const uint4*>(st + L::kOffB + (b_row0 + 8 * j) * 64 + 16 * t);
      u32 sa[MT][2][2], sb[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r128 = (row0 & 127) + a_row0 + 16 * i + 8 * h;
          const u32 two = *reinterpret_cast<const u16*>(st + L::kOffSA + sk_tiled_nvfp4_scale_offset(r128, t));
          sa[i][h][0] = gemm::ue4m3_to_f16x2(two & 0xFFu);
          sa[i][h][1] = gemm::ue4m3_to_f16x2(two >> 8);
        }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int r = b_row0 + 8 * j, wr = b_row(r);
        const u8* sbase = st + L::kOffSB + (kGatedB ? (r & 1) * 1024 : 0);
        const u32 two = *reinterpret_cast<const u16*>(sbase + sk_tiled_nvfp4_scale_offset(wr & 127, t));
        sb[j][0] = gemm::ue4m3_to_f16x2(two & 0xFFu);
        sb[j][1] = gemm::ue4m3_to_f16x2(two >> 8);
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int hi16 = sk_tiled_nvfp4_scale_byte(w);
        u32 bp[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j) gemm::fp4_word_nvfp4(word_of(bch[j], w), sb[j][hi16], bp[j]);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          u32 ap[2][4];
#pragma unroll
          for (int h = 0; h < 2; ++h) gemm::fp4_word_nvfp4(word_of(ach[i][h], w), sa[i][h][hi16], ap[h]);
#pragma unroll
          for (int k2 = 0; k2 < 2; ++k2) {
            const u32 af[4] = {ap[sk_tiled_fp4_a_row_half(0)][sk_tiled_fp4_a_pair(k2, 0)], ap[sk_tiled_fp4_a_row_half(1)][sk_tiled_fp4_a_pair(k2, 1)],
                               ap[sk_tiled_fp4_a_row_half(2)][sk_tiled_fp4_a_pair(k2, 2)], ap[sk_tiled_fp4_a_row_half(3)][sk_tiled_fp4_a_pair(k2, 3)]};
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              const u32 bfr[2] = {bp[j][sk_tiled_fp4_b_pair(k2, 0)], bp[j][sk_tiled_fp4_b_pair(k2, 1)]};
              mma_f16_m16n8k16(acc[i][j], af, bfr);
            }
          }
        }
      }
    }
    cp_async_wait<0>();
  }
  grouped_epilogue<PHASE, RECIPE, ACT, MODE, MT, NT>(p, acc, tile, nt_cta, wm * WM, wn * WN, kW4a16 ? 256.0f : 268435456.0f);
}

// ---- combine / finalize ----------------------------------------------------------------------------
__global__ void __launch_bounds__(256) combine(const sk_moe_params p) {
  pdl_enter();
  const long long i8 = (long long)blockIdx.x * 256 + threadIdx.x, K8 = p.k / 8;
  if (i8 >= p.m * K8) return;
  const long long tok = i8 / K8, c = (i8 - tok * K8) * 8;
  const float* acc = reinterpret_cast<const float*>(p.scratch + p.s.out_acc);
  float s[8];
  if (p.combine == SK_MOE_COMBINE_ATOMIC) {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(acc + tok * p.k + c));
    const float4 b = __ldcg(reinterpret_cast<const float4*>(acc + tok * p.k + c + 4));
    s[0] = a.x, s[1] = a.y, s[2] = a.z, s[3] = a.w, s[4] = b.x, s[5] = b.y, s[6] = b.z, s[7] = b.w;
  } else {
    const int* route_pos = reinterpret_cast<const int*>(p.scratch + p.s.route_pos);
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i] = 0.0f;
    for (int j = 0; j < p.topk; ++j) {
      const long long route = tok * p.topk + j;
      if (route_pos[route] < 0) continue;
      const float w = p.apply_on_input ? 1.0f : __ldg(p.topk_weights + route);
      const float4 a = __ldcg(reinterpret_cast<const float4*>(acc + route * p.k + c));
      const float4 b = __ldcg(reinterpret_cast<const float4*>(acc + route * p.k + c + 4));
      const float d[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) s[i] = __fadd_rn(s[i], p.apply_on_input ? d[i] : __fmul_rn(w, d[i]));
    }
  }
  uint4 o;
  o.x = u32(to_bf16(s[0])) | u32(to_bf16(s[1])) << 16;
  o.y = u32(to_bf16(s[2])) | u32(to_bf16(s[3])) << 16;
  o.z = u32(to_bf16(s[4])) | u32(to_bf16(s[5])) << 16;
  o.w = u32(to_bf16(s[6])) | u32(to_bf16(s[7])) << 16;
  *reinterpret_cast<uint4*>(reinterpret_cast<u16*>(p.out) + tok * p.k + c) = o;
}

}  // namespace moe
}  // namespace sk
