// moe micro regime (m <= 8): FC1 (+ activation, + NVFP4 re-quantization) and FC2 (+ combine),
// streaming each active expert's weight bytes once. Portable: sm_90a, sm_120a, sm_121a.
//
// LAUNCH CONTRACT
//   template <int RECIPE, int WFMT, int ACT> __global__ void sk::moe::micro_fc1(sk_moe_params p)
//   template <int RECIPE, int WFMT>          __global__ void sk::moe::micro_fc2(sk_moe_params p)
//     RECIPE SK_MOE_W4A16 (0) | SK_MOE_W4A4 (1, needs WFMT NVFP4); WFMT SK_MOE_WFMT_NVFP4 (0) |
//     SK_MOE_WFMT_MXFP4 (1); ACT SK_MOE_ACT_SILU (0) | RELU2 (1) | SWIGLU_OAI (2).
//   grid (sk_moe_micro_grid(RECIPE, sm120, SMs), 1, 1): sk_moe_micro_ctas_per_sm CTAs per SM (4 for
//   W4A16 on sm_90, else 3; any grid >= 1 is correct), block 128,
//   no dynamic shared memory (static 11.3 KB: the slot table, 6 KB, and the reduction buffers).
//   Launch order: micro_fc1 then micro_fc2 on one stream (programmatic dependent launch allowed:
//   both wait for the previous kernel before touching memory). 1 <= p.m <= 8, p.m * p.topk <= 256.
//   Reads: p.x, p.topk_ids, p.topk_weights, p.expert_map, weights and global scales (w*_gs NVFP4,
//   a*_gs W4A4). Scratch (p.s): micro_counters (zero before the first run; every run leaves them
//   zero), micro_partials, micro_inter(_scales) (FC1 writes, FC2 reads), micro_down, micro_table
//   and flags (FC1's CTA 0 writes the slot table and the error word). FC2 writes p.out [m, K]
//   (BF16) entirely, zeros for tokens with no kept route.
//
// HOW IT WORKS
//   Every CTA builds the slot table (plan.cuh, sk_moe_micro_slots_serial is the specification) from
//   topk_ids in shared memory: routes sorted by (local expert, route) with one rank loop per
//   route, slots of up to 8 routes. Work units (slot, 32-row tile, 128-K step), stream-K over the
//   CTAs as the decode GEMM (gemm/decode_schedule.cuh): a CTA's 4 warps share its tile and take
//   its steps round-robin, sum in shared memory in warp order; a tile split between CTAs goes
//   through partial slots and a counter, the last arriver sums them in CTA (= K) order. Swap-AB
//   mma.sync: 16 weight rows x 8 route columns, lane (g, t) holds the 32-K block t of each 128-K
//   step of its rows g, g + 8 and of column g.
//   W4A16: E2M1 -> BF16 (value * 2^-126, common.cuh), times the block scale's S (value * scale *
//   2^-8, exact), m16n8k16 BF16 against the BF16 tokens / intermediate, fp32 accumulators; the
//   epilogue multiplies by 2^8 and the global scale.
//   W4A4 (portable): the decode GEMM's NVFP4 stage (gemm/gemv_decode.cuh: FP16 operands value x
//   scale x 2^-14, exact); FC1 quantizes the tokens' BF16 in registers per 16-block with a1_gs of
//   the slot's expert (quantization.nvfp4's rounding). With products exact, every MMA and every
//   fp32 sum is exact whenever a dot product's terms fit 24 bits of a common grid (ref.h), and
//   then the result is the trace's fp32(exact dot).
//   FC1's finisher of a tile applies the activation to (up, gate) rows 16 apart, rounds to BF16
//   and stores (W4A4: quantizes each 16-column block with a2_gs) the slot's intermediate columns.
//   FC2's finisher stores fp32 down rows per route, then counts the tile's slots; the last one
//   combines the tile's 32 output columns for every token in j order (fp32, no atomics).
#pragma once
#include "common/defs.cuh"
#include "common/mma.cuh"
#include "common/sync.cuh"
#include "gemm/gemv_decode.cuh"  // Nvfp4Stage, nvfp4_compute_stage, ld_stream_u4, ld_ro_u4, pin_in_register
#include "moe/act.cuh"
#include "moe/common.cuh"
#include "moe/plan.cuh"

namespace sk {
namespace moe {

constexpr int kMicroThreads = 32 * SK_MOE_MICRO_WARPS;
constexpr int kMaxRoutes = SK_MOE_MICRO_MAX_ROUTES;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr int kMicroSm120Build = 1;
#else
constexpr int kMicroSm120Build = 0;
#endif

struct __align__(16) SlotTable {
  u32 keys[kMaxRoutes];  // (local expert << 8 | route), 0xFFFFFFFF for skipped routes
  int route_local[kMaxRoutes];
  int sorted[kMaxRoutes];  // routes in (expert, route) order
  int slot_expert[kMaxRoutes], slot_start[kMaxRoutes], slot_count[kMaxRoutes];
  u32 chunk_bits[kMaxRoutes / 32];  // sorted positions that start a slot
  u32 err;
  int num_slots;
};

// The slot table of sk_moe_micro_slots_serial, built by all threads of the CTA.
SK_DEVICE void build_slots(const sk_moe_params& p, SlotTable& tab) {
  const int routes = (int)p.m * p.topk, tid = threadIdx.x;
  if (tid < kMaxRoutes / 32) tab.chunk_bits[tid] = 0;
  if (tid == 0) tab.err = 0;
  u32 err = 0;
  for (int r = tid; r < kMaxRoutes; r += kMicroThreads) {
    const int l = r < routes ? local_expert(p, r, err) : -1;
    tab.route_local[r] = l;
    tab.keys[r] = l >= 0 ? (u32(l) << 8 | u32(r)) : 0xFFFFFFFFu;
    tab.slot_count[r] = 0;
  }
  __syncthreads();
  if (err) atomicOr(&tab.err, err);
  constexpr int kPer = kMaxRoutes / kMicroThreads;
  int rank[kPer], rank_e[kPer];
  const int n4 = (routes + 3) / 4;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int r = tid + i * kMicroThreads;
    rank[i] = -1;
    if (r >= routes || tab.keys[r] == 0xFFFFFFFFu) continue;
    const u32 key = tab.keys[r], ebase = key & ~0xFFu;
    int a = 0, b = 0;
    for (int q = 0; q < n4; ++q) {
      const uint4 k4 = *reinterpret_cast<const uint4*>(&tab.keys[4 * q]);
      a += (k4.x < key) + (k4.y < key) + (k4.z < key) + (k4.w < key);
      b += (k4.x < key && k4.x >= ebase) + (k4.y < key && k4.y >= ebase) + (k4.z < key && k4.z >= ebase) +
           (k4.w < key && k4.w >= ebase);
    }
    rank[i] = a, rank_e[i] = b;
    tab.sorted[a] = r;
    if (b % SK_MOE_SLOT_COLS == 0) atomicOr(&tab.chunk_bits[a >> 5], 1u << (a & 31));
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (rank[i] < 0) continue;
    const int a = rank[i], w = a >> 5;
    int s = __popc(tab.chunk_bits[w] & (0xFFFFFFFFu >> (31 - (a & 31))));
    for (int j = 0; j < w; ++j) s += __popc(tab.chunk_bits[j]);
    --s;
    const int col = rank_e[i] % SK_MOE_SLOT_COLS;
    if (col == 0) tab.slot_expert[s] = tab.route_local[tid + i * kMicroThreads], tab.slot_start[s] = a;
    atomicMax(&tab.slot_count[s], col + 1);
  }
  if (tid == 0) {
    int s = 0;
    for (int j = 0; j < kMaxRoutes / 32; ++j) s += __popc(tab.chunk_bits[j]);
    tab.num_slots = s;
  }
  __syncthreads();
}

// Stores the slot table and the error word (FC1's CTA 0): table [0] = slots, then slot_expert[S],
// slot_count[S], slot_route[S][8] with S = p.s.micro_slots.
SK_DEVICE void store_table(const sk_moe_params& p, const SlotTable& tab) {
  int* t = reinterpret_cast<int*>(p.scratch + p.s.micro_table);
  const int S = p.s.micro_slots;
  if (threadIdx.x == 0) {
    t[0] = tab.num_slots;
    *reinterpret_cast<int*>(p.scratch + p.s.flags) = (int)tab.err;
  }
  for (int s = threadIdx.x; s < tab.num_slots; s += kMicroThreads) {
    t[1 + s] = tab.slot_expert[s];
    t[1 + S + s] = tab.slot_count[s];
    for (int c = 0; c < SK_MOE_SLOT_COLS; ++c)
      t[1 + 2 * S + s * SK_MOE_SLOT_COLS + c] = c < tab.slot_count[s] ? tab.sorted[tab.slot_start[s] + c] : -1;
  }
}

// ---- W4A16 step: 2 row tiles (rows g, g + 8 of each), 32-K block t of a 128-K step ---------------
struct W4a16Stage {
  uint4 w[2][2];  // [row tile][row g / g + 8]: 32 E2M1 codes
  u32 sf[2][2];   // NVFP4: the two UE4M3 of the block's 16-K halves (u16); MXFP4: the UE8M0
  uint4 x[4];     // column g: 32 BF16 (x[q] = elements 8q .. 8q + 7)
};

// The 2 x 2 weight rows' 16-byte code chunks of a step and their scale bytes (NVFP4: the u16 of the
// chunk's two 16-K blocks, one 128x4 k-tile pair = 1024 bytes per step; MXFP4: one byte, 512).
template <int WFMT>
SK_DEVICE void load_weight_step(uint4 (&w)[2][2], u32 (&sf)[2][2], int step, const u8* const (&w_ptr)[2][2], const u8* sbase,
                                const u32 (&w_sfo)[2][2]) {
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      w[rt][h] = gemm::ld_stream_u4<0>(w_ptr[rt][h] + (long long)step * 64);
      if (WFMT == SK_MOE_WFMT_NVFP4) sf[rt][h] = __ldg(reinterpret_cast<const u16*>(sbase + w_sfo[rt][h] + step * 1024u));
      else sf[rt][h] = __ldg(sbase + w_sfo[rt][h] + step * 512u);
    }
}

template <int WFMT>
SK_DEVICE void w4a16_compute(const W4a16Stage& st, float (&acc)[2][4]) {
  u32 s2[2][2][2];  // [row tile][half][16-K half of the block]
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (WFMT == SK_MOE_WFMT_NVFP4) nvfp4_scale_s2(st.sf[rt][h], s2[rt][h][0], s2[rt][h][1]);
      else s2[rt][h][0] = s2[rt][h][1] = mxfp4_scale_s2(st.sf[rt][h]);
    }
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // code word q: elements 8q .. 8q + 7 (16-K half q / 2)
    const uint4& xq = st.x[q];
#pragma unroll
    for (int rt = 0; rt < 2; ++rt) {
      u32 p0[4], p1[4];
      e2m1x8_to_bf16x2_raw(word_of(st.w[rt][0], q), p0);
      e2m1x8_to_bf16x2_raw(word_of(st.w[rt][1], q), p1);
#pragma unroll
      for (int j = 0; j < 4; ++j) p0[j] = bf16x2_mul(p0[j], s2[rt][0][q >> 1]), p1[j] = bf16x2_mul(p1[j], s2[rt][1][q >> 1]);
      const u32 a0[4] = {p0[0], p1[0], p0[1], p1[1]}, b0[2] = {xq.x, xq.y};
      const u32 a1[4] = {p0[2], p1[2], p0[3], p1[3]}, b1[2] = {xq.z, xq.w};
      mma_bf16_m16n8k16(acc[rt], a0, b0);
      mma_bf16_m16n8k16(acc[rt], a1, b1);
    }
  }
}

// One 32-row tile's share [s_begin, s_end) of a CTA. PHASE 1: FC1, 2: FC2.
template <int PHASE, int RECIPE, int WFMT, int ACT>
SK_DEVICE void micro_tile(const sk_moe_params& p, const SlotTable& tab, float (&red)[SK_MOE_MICRO_WARPS][256],
                          float (&fin)[256], int gtile, int tiles, int s_begin, int s_end, int steps, bool first_of_cta,
                          int units, int ctas) {
  constexpr bool kW4a4 = RECIPE == SK_MOE_W4A4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int slot = gtile / tiles, tile = gtile - slot * tiles;
  const int e = tab.slot_expert[slot], start = tab.slot_start[slot], cnt = tab.slot_count[slot];
  const int np = padded(p.n), kp = padded(p.k), K = p.k;
  const int vec = WFMT == SK_MOE_WFMT_NVFP4 ? 16 : 32;
  // Weight rows of this lane (tile-local 16 rt + 8 h + g) and their scale offsets at step 0.
  const long long row_bytes = PHASE == 1 ? kp / 2 : np / 2;
  const int scale_cols = (PHASE == 1 ? kp : np) / vec;
  const u8* wbase = PHASE == 1 ? p.w1_codes + e * sk_moe_w1_code_bytes(ACT, np, kp) : p.w2_codes + e * sk_moe_w2_code_bytes(K, np);
  const u8* sbase = PHASE == 1 ? p.w1_scales + e * sk_moe_w1_scale_bytes(ACT, WFMT, np, kp)
                               : p.w2_scales + e * sk_moe_w2_scale_bytes(WFMT, K, np);
  const u8* w_ptr[2][2];
  u32 w_sfo[2][2];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * rt + 8 * h + g;
      const int row = PHASE == 1 ? sk_moe_micro_fc1_row(ACT, np, tile, r) : min(32 * tile + r, K - 1);
      w_ptr[rt][h] = wbase + row * row_bytes + 16 * t;
      w_sfo[rt][h] = (u32)sk_moe_swizzled_offset(row, WFMT == SK_MOE_WFMT_NVFP4 ? 2 * t : t, scale_cols);
    }
  // Column g of the slot (columns past its count repeat column 0: computed, never stored).
  const int col_route = tab.sorted[start + min(g, cnt - 1)];
  const int col = min(g, cnt - 1);
  const int token = col_route / p.topk;
  const int phase = warp, first_step = s_begin + phase;
  float acc[2][4];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[rt][i] = 0.0f;

  if constexpr (!kW4a4) {
    // B operand: BF16 tokens (FC1) or the slot's BF16 intermediate column (FC2), 32 elements at
    // 128 step + 32 t (FC1: zero past K, which is a multiple of 32).
    const u8* x_ptr = PHASE == 1 ? reinterpret_cast<const u8*>(p.x) + ((long long)token * K + 32 * t) * 2
                                 : p.scratch + p.s.micro_inter + ((long long)(slot * SK_MOE_SLOT_COLS + col) * np + 32 * t) * 2;
    const int x_limit = PHASE == 1 ? K : np;
    gemm::pin_in_register(w_ptr, w_sfo, x_ptr);
    auto load = [&](W4a16Stage& st, int step) {
      load_weight_step<WFMT>(st.w, st.sf, step, w_ptr, sbase, w_sfo);
      if (128 * step + 32 * t < x_limit) {
        const u8* xp = x_ptr + (long long)step * 256;
        st.x[0] = gemm::ld_ro_u4<0>(xp), st.x[1] = gemm::ld_ro_u4<16>(xp);
        st.x[2] = gemm::ld_ro_u4<32>(xp), st.x[3] = gemm::ld_ro_u4<48>(xp);
      } else {
        st.x[0] = st.x[1] = st.x[2] = st.x[3] = make_uint4(0, 0, 0, 0);
      }
    };
    W4a16Stage st0, st1;
    gemm::pipelined_steps<SK_MOE_MICRO_WARPS>(first_step, s_end, st0, st1, load,
                                              [&](const W4a16Stage& st) { w4a16_compute<WFMT>(st, acc); });
  } else {
    // The decode GEMM's NVFP4 stage; FC1 quantizes the token's 32 BF16 of the block here.
    using Stage = gemm::Nvfp4Stage<1, 2>;
    const float a_gs = __ldg(p.a1_gs + e), a_gs_recip = gs_reciprocal(a_gs);
    const float w_route = p.apply_on_input ? __ldg(p.topk_weights + col_route) : 1.0f;
    const u8* x_ptr = PHASE == 1 ? reinterpret_cast<const u8*>(p.x) + ((long long)token * K + 32 * t) * 2
                                 : p.scratch + p.s.micro_inter + (long long)(slot * SK_MOE_SLOT_COLS + col) * (np / 2) + 16 * t;
    const u8* xs_ptr = p.scratch + p.s.micro_inter_scales + (long long)(slot * SK_MOE_SLOT_COLS + col) * (np / 16) + 2 * t;
    gemm::pin_in_register(w_ptr, w_sfo, x_ptr);
    auto load = [&](Stage& st, int step) {
      load_weight_step<SK_MOE_WFMT_NVFP4>(st.w, st.w_sf, step, w_ptr, sbase, w_sfo);
      if (PHASE == 2) {
        st.x[0] = gemm::ld_ro_u4<0>(x_ptr + (long long)step * 64);
        st.x_sf[0] = __ldg(reinterpret_cast<const u16*>(xs_ptr + step * 8));
      } else {
        float v[32];
        if (128 * step + 32 * t < K) {
          const u8* xp = x_ptr + (long long)step * 256;
          const uint4 r[4] = {gemm::ld_ro_u4<0>(xp), gemm::ld_ro_u4<16>(xp), gemm::ld_ro_u4<32>(xp), gemm::ld_ro_u4<48>(xp)};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const u32 wq[4] = {r[q].x, r[q].y, r[q].z, r[q].w};
#pragma unroll
            for (int i = 0; i < 4; ++i) v[8 * q + 2 * i] = bf16_lo(wq[i]), v[8 * q + 2 * i + 1] = bf16_hi(wq[i]);
          }
        } else {
#pragma unroll
          for (int i = 0; i < 32; ++i) v[i] = 0.0f;
        }
        if (p.apply_on_input) {
#pragma unroll
          for (int i = 0; i < 32; ++i) v[i] = mul_rn(v[i], w_route);
        }
        u32 c[4], sc[2];
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          float blk[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) blk[i] = v[16 * b + i];
          sc[b] = nvfp4_quantize16(blk, a_gs, a_gs_recip, c[2 * b], c[2 * b + 1]);
        }
        st.x[0] = make_uint4(c[0], c[1], c[2], c[3]);
        st.x_sf[0] = sc[0] | sc[1] << 8;
      }
    };
    float acc3[2][1][4];
#pragma unroll
    for (int rt = 0; rt < 2; ++rt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc3[rt][0][i] = 0.0f;
    Stage st0, st1;
    gemm::pipelined_steps<SK_MOE_MICRO_WARPS>(first_step, s_end, st0, st1, load,
                                              [&](const Stage& st) { gemm::nvfp4_compute_stage(st, acc3); });
#pragma unroll
    for (int rt = 0; rt < 2; ++rt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][i] = acc3[rt][0][i];
  }

  // ---- reduction: warps in order, then the CTAs of a split tile in CTA order -------------------
  __syncthreads();  // the previous tile's readers of red / fin are done
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][(16 * rt + g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = acc[rt][i];
  __syncthreads();
  __shared__ int is_last;
  const bool whole = s_begin == 0 && s_end == steps;
  float v[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int idx = tid + i * kMicroThreads;
    v[i] = red[0][idx];
#pragma unroll
    for (int w = 1; w < SK_MOE_MICRO_WARPS; ++w) v[i] += red[w][idx];
  }
  if (!whole) {
    float* partials = reinterpret_cast<float*>(p.scratch + p.s.micro_partials);
    u32* counters = reinterpret_cast<u32*>(p.scratch + p.s.micro_counters);
    const int slot_id = 2 * (int)blockIdx.x + (first_of_cta ? 0 : 1);
#pragma unroll
    for (int i = 0; i < 2; ++i) partials[slot_id * 256 + tid + i * kMicroThreads] = v[i];
    __syncthreads();
    const int cta_first = sk_decode_cta_of_unit(gtile * steps, units, ctas);
    const int cta_last = sk_decode_cta_of_unit(gtile * steps + steps - 1, units, ctas);
    if (tid == 0) {
      const u32 arrived = atomic_add_acq_rel_gpu(counters + gtile, 1u);
      is_last = arrived == (u32)(cta_last - cta_first);
      if (is_last) counters[gtile] = 0;
    }
    __syncthreads();
    if (!is_last) return;
    const int first_slot = sk_decode_partial_slot(cta_first, gtile, steps, units, ctas);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = tid + i * kMicroThreads;
      float s = __ldcg(partials + first_slot * 256 + idx);
      for (int c = cta_first + 1; c <= cta_last; ++c) s += __ldcg(partials + 2 * c * 256 + idx);
      v[i] = s;
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) fin[tid + i * kMicroThreads] = v[i];
  __syncthreads();

  // ---- epilogues (fin[r * 8 + c]: tile row r, slot column c) -----------------------------------
  const float wgs = PHASE == 1 ? (p.w1_gs ? __ldg(p.w1_gs + e) : 1.0f) : (p.w2_gs ? __ldg(p.w2_gs + e) : 1.0f);
  const float alpha = kW4a4 ? div_rn(wgs, __ldg((PHASE == 1 ? p.a1_gs : p.a2_gs) + e)) : wgs;
  const float unit = kW4a4 ? 268435456.0f : 256.0f;  // 2^28 (FP16 operands) / 2^8 (BF16 S)
  if (PHASE == 1) {
    constexpr bool kGated = ACT != SK_MOE_ACT_RELU2;
    constexpr int kCols = kGated ? 16 : 32;  // intermediate columns of the tile
    float* qbuf = red[0];                    // W4A4: BF16-rounded activations [col][kCols]
    for (int idx = tid; idx < kCols * SK_MOE_SLOT_COLS; idx += kMicroThreads) {
      const int i = idx % kCols, c = idx / kCols;
      float hu = fin[i * 8 + c] * unit * alpha, hg = kGated ? fin[(16 + i) * 8 + c] * unit * alpha : 0.0f;
      if (!kW4a4 && p.apply_on_input && c < cnt) {
        const float wr = __ldg(p.topk_weights + tab.sorted[start + c]);
        hu = hu * wr, hg = hg * wr;
      }
      const float a = kGated ? sk_moe_act(ACT, hg, hu, p.limit, p.alpha, p.beta) : sk_moe_act(ACT, hu, 0.0f, p.limit, p.alpha, p.beta);
      const u16 b = to_bf16(a);
      const int icol = kCols * tile + i;
      if (!kW4a4) {
        if (c < cnt)
          reinterpret_cast<u16*>(p.scratch + p.s.micro_inter)[(long long)(slot * SK_MOE_SLOT_COLS + c) * np + icol] = b;
      } else {
        qbuf[c * kCols + i] = __uint_as_float(u32(b) << 16);
      }
    }
    if (kW4a4) {
      __syncthreads();
      const float gs = __ldg(p.a2_gs + e), gs_recip = gs_reciprocal(gs);
      if (tid < SK_MOE_SLOT_COLS * (kCols / 16)) {
        const int c = tid / (kCols / 16), b = tid % (kCols / 16);
        if (c < cnt) {
          float blk[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) blk[i] = qbuf[c * kCols + 16 * b + i];
          u32 c0, c1;
          const u32 sc = nvfp4_quantize16(blk, gs, gs_recip, c0, c1);
          const long long row = slot * SK_MOE_SLOT_COLS + c, blk_col = (kCols * tile) / 16 + b;
          *reinterpret_cast<uint2*>(p.scratch + p.s.micro_inter + row * (np / 2) + 8 * blk_col) = make_uint2(c0, c1);
          p.scratch[p.s.micro_inter_scales + row * (np / 16) + blk_col] = (u8)sc;
        }
      }
    }
  } else {
    float* down = reinterpret_cast<float*>(p.scratch + p.s.micro_down);
    for (int idx = tid; idx < 256; idx += kMicroThreads) {
      const int r = idx >> 3, c = idx & 7, row = 32 * tile + r;
      if (c < cnt && row < K) down[(long long)tab.sorted[start + c] * K + row] = fin[idx] * unit * alpha;
    }
    __syncthreads();
    u32* comb = reinterpret_cast<u32*>(p.scratch + p.s.micro_counters) + p.s.micro_tile_counters_words;
    if (tid == 0) {
      const u32 arrived = atomic_add_acq_rel_gpu(comb + tile, 1u);
      is_last = arrived == (u32)(tab.num_slots - 1);
      if (is_last) comb[tile] = 0;
    }
    __syncthreads();
    if (!is_last) return;
    for (int idx = tid; idx < 32 * (int)p.m; idx += kMicroThreads) {
      const int r = idx & 31, tok = idx >> 5, row = 32 * tile + r;
      if (row >= K) continue;
      float s = 0.0f;
      for (int j = 0; j < p.topk; ++j) {
        const int route = tok * p.topk + j;
        if (tab.route_local[route] < 0) continue;
        const float d = __ldcg(down + (long long)route * K + row);
        s = __fadd_rn(s, p.apply_on_input ? d : __fmul_rn(__ldg(p.topk_weights + route), d));
      }
      reinterpret_cast<u16*>(p.out)[(long long)tok * K + row] = to_bf16(s);
    }
  }
}

template <int PHASE, int RECIPE, int WFMT, int ACT>
SK_DEVICE void micro_body(const sk_moe_params& p) {
  static_assert(RECIPE == SK_MOE_W4A16 || WFMT == SK_MOE_WFMT_NVFP4, "W4A4 needs NVFP4 weights");
  __shared__ SlotTable tab;
  __shared__ float red[SK_MOE_MICRO_WARPS][256];
  __shared__ float fin[256];
  pdl_enter();
  build_slots(p, tab);
  if (PHASE == 1 && blockIdx.x == 0) store_table(p, tab);
  const int np = padded(p.n), kp = padded(p.k);
  const int tiles = PHASE == 1 ? sk_moe_micro_tiles_fc1(ACT, np) : sk_moe_micro_tiles_fc2(p.k);
  const int steps = (PHASE == 1 ? kp : np) / SK_MOE_MICRO_STEP_K;
  const int units = tab.num_slots * tiles * steps;
  if (PHASE == 2 && units == 0) {  // no route kept: the output is all zeros
    for (long long i = blockIdx.x * (long long)kMicroThreads + threadIdx.x; i < p.m * p.k; i += (long long)gridDim.x * kMicroThreads)
      reinterpret_cast<u16*>(p.out)[i] = 0;
    return;
  }
  const int ctas = min((int)gridDim.x, units);
  if ((int)blockIdx.x >= ctas) return;
  const int u_begin = sk_decode_cta_begin((int)blockIdx.x, units, ctas);
  const int u_end = sk_decode_cta_begin((int)blockIdx.x + 1, units, ctas);
#pragma unroll 1
  for (int u = u_begin; u < u_end;) {
    const int gtile = u / steps, s_begin = u - gtile * steps;
    const int s_end = min(steps, s_begin + (u_end - u));
    micro_tile<PHASE, RECIPE, WFMT, ACT>(p, tab, red, fin, gtile, tiles, s_begin, s_end, steps, u == u_begin, units, ctas);
    u += s_end - s_begin;
  }
}

template <int RECIPE, int WFMT, int ACT>
__global__ void __launch_bounds__(kMicroThreads, sk_moe_micro_ctas_per_sm(RECIPE, kMicroSm120Build)) micro_fc1(const sk_moe_params p) {
  micro_body<1, RECIPE, WFMT, ACT>(p);
}

template <int RECIPE, int WFMT>
__global__ void __launch_bounds__(kMicroThreads, sk_moe_micro_ctas_per_sm(RECIPE, kMicroSm120Build)) micro_fc2(const sk_moe_params p) {
  micro_body<2, RECIPE, WFMT, SK_MOE_ACT_SILU>(p);
}

}  // namespace moe
}  // namespace sk
