// moe routing kernels: top-k over router logits, and the grouped regime's route count / sort /
// pack (plus the W4A4 activation quantizer of the packed rows). Portable: sm_90a, sm_120a, sm_121a.
//
// LAUNCH CONTRACT
//   template <int LOGITS> __global__ void sk::moe::route_topk(sk_moe_params p)
//     LOGITS 0: fp32, 1: BF16 logits p.logits [m, e_global] (row stride e_global), e_global <= 1024,
//     1 <= topk <= min(32, e_global). Writes int32 ids to p.topk_ids and fp32 weights to
//     p.topk_weights ([m, topk], these two pointers are outputs here). p.topk_mode SK_MOE_TOPK_*.
//     grid (ceil(m / 8), 1, 1), block 256 (a warp per token), no shared memory.
//     Per token: k rounds of a warp argmax, larger value first, ties to the higher id; NaN counts
//     as -inf. Weights with sk_moe_expf in a fixed order (ops/moe/ref.c replays it bit for bit):
//     RENORM w_j = e_j / (((e_0 + e_1) + ...) + e_{k-1}), e_j = exp(l_j - l_max); SOFTMAX_ALL the
//     denominator is lane L's ascending sum over ids L + 32 i, then an xor butterfly 16 .. 1.
//   __global__ void sk::moe::route_pack(sk_moe_params p)
//     grid (1, 1, 1), block 1024, no dynamic shared memory (static 8.3 KB). Grouped regime, before
//     FC1. Reads topk_ids [m, topk] (int32 or int64, p.ids_int64) and p.expert_map. Writes (scratch):
//     flags[0] the error word, flags[1] the M-tile count, flags[2] the packed rows; expert_count[E],
//     expert_offset[E + 1] (segments padded to BM = p.s.bm rows); tiles[t] = {expert, first row,
//     rows, 0} for t < flags[1] (tile t covers rows [t BM, (t + 1) BM)); route_of_row[row] = route
//     (-1 for padding rows); route_pos[route] = packed row or -1 (skipped route). The row order
//     inside a segment is not fixed (shared-memory atomics); no result depends on it.
//   __global__ void sk::moe::pack_quant(sk_moe_params p)       (W4A4 grouped, after route_pack)
//     grid (ceil(max_rows / 8), 1, 1), block 256 (a warp per packed row; rows past flags[2] return).
//     Row r of route (t, j), expert e: NVFP4 of x_t (apply_on_input: fp32(x_t * w)) with
//     gs = a1_gs[e] over Kp (zero past K), quantization.nvfp4's rounding, into packed_a [rows][Kp/2]
//     and packed_a_scales (swizzled [max_rows, Kp/16]); padding rows get zero codes and scales.
#pragma once
#include "common/defs.cuh"
#include "common/reduce.cuh"
#include "common/sync.cuh"
#include "moe/act.cuh"
#include "moe/common.cuh"
#include "moe/plan.cuh"

namespace sk {
namespace moe {

template <int LOGITS>
SK_DEVICE float load_logit(const void* logits, long long i) {
  if (LOGITS == 0) return __ldg(reinterpret_cast<const float*>(logits) + i);
  return __uint_as_float(u32(__ldg(reinterpret_cast<const u16*>(logits) + i)) << 16);
}

template <int LOGITS>
__global__ void __launch_bounds__(32 * SK_MOE_TOPK_WARPS) route_topk(const sk_moe_params p) {
  pdl_enter();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * SK_MOE_TOPK_WARPS + warp;
  if (t >= p.m) return;
  const int E = p.e_global, k = p.topk;
  float v[32];
  u32 taken = 0;  // bit i: id lane + 32 i is no candidate (taken or past E)
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int id = lane + 32 * i;
    float x = id < E ? load_logit<LOGITS>(p.logits, t * E + id) : 0.0f;
    v[i] = x != x ? -__int_as_float(0x7F800000) : x;
    if (id >= E) taken |= 1u << i;
  }
  int my_id = 0;
  float my_v = 0.0f;
  for (int j = 0; j < k; ++j) {
    float bv = 0.0f;
    int bid = -1;
#pragma unroll
    for (int i = 0; i < 32; ++i)
      if (!(taken >> i & 1u) && (bid < 0 || v[i] >= bv)) bv = v[i], bid = lane + 32 * i;
#pragma unroll
    for (int mask = 16; mask >= 1; mask >>= 1) {
      const float ov = __shfl_xor_sync(kFullWarpMask, bv, mask);
      const int oid = __shfl_xor_sync(kFullWarpMask, bid, mask);
      if (oid >= 0 && (bid < 0 || ov > bv || (ov == bv && oid > bid))) bv = ov, bid = oid;
    }
    if ((bid & 31) == lane) taken |= 1u << (bid >> 5);
    if (lane == j) my_id = bid, my_v = bv;
  }
  float w = 0.0f;
  if (p.topk_mode == SK_MOE_TOPK_RAW) {
    w = load_logit<LOGITS>(p.logits, t * E + my_id);
  } else {
    const float mx = __shfl_sync(kFullWarpMask, my_v, 0);
    const float ej = sk_moe_expf(__fsub_rn(my_v, mx));
    float s = 0.0f;
    if (p.topk_mode == SK_MOE_TOPK_RENORM) {
      for (int j = 0; j < k; ++j) s = __fadd_rn(s, __shfl_sync(kFullWarpMask, ej, j));
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i)
        if (lane + 32 * i < E) s = __fadd_rn(s, sk_moe_expf(__fsub_rn(v[i], mx)));
#pragma unroll
      for (int mask = 16; mask >= 1; mask >>= 1) s = __fadd_rn(s, __shfl_xor_sync(kFullWarpMask, s, mask));
    }
    w = __fdiv_rn(ej, s);
  }
  if (lane < k) {
    reinterpret_cast<int*>(const_cast<void*>(p.topk_ids))[t * k + lane] = my_id;
    const_cast<float*>(p.topk_weights)[t * k + lane] = w;
  }
}

__global__ void __launch_bounds__(SK_MOE_PACK_THREADS) route_pack(const sk_moe_params p) {
  __shared__ int cnt[SK_MOE_MAX_EXPERTS], off[SK_MOE_MAX_EXPERTS + 1], tbase[SK_MOE_MAX_EXPERTS + 1];
  __shared__ int warp_sums[2][32];
  __shared__ u32 err_all;
  pdl_enter();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, E = p.e, BM = p.s.bm;
  const long long routes = p.m * p.topk;
  int* route_pos = reinterpret_cast<int*>(p.scratch + p.s.route_pos);
  int* route_of_row = reinterpret_cast<int*>(p.scratch + p.s.route_of_row);
  if (tid < E) cnt[tid] = 0;
  if (tid == 0) err_all = 0;
  __syncthreads();
  u32 err = 0;
  for (long long r = tid; r < routes; r += SK_MOE_PACK_THREADS) {
    const int l = local_expert(p, r, err);
    route_pos[r] = l;  // the local expert until the scatter below
    if (l >= 0) atomicAdd(&cnt[l], 1);
  }
  if (err) atomicOr(&err_all, err);
  __syncthreads();
  // Exclusive scans of padded rows and tiles over the experts (one per thread).
  const int c = tid < E ? cnt[tid] : 0, tl = (c + BM - 1) / BM;
  int rows_incl = tl * BM, tiles_incl = tl;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int a = __shfl_up_sync(kFullWarpMask, rows_incl, d), b = __shfl_up_sync(kFullWarpMask, tiles_incl, d);
    if (lane >= d) rows_incl += a, tiles_incl += b;
  }
  if (lane == 31) warp_sums[0][warp] = rows_incl, warp_sums[1][warp] = tiles_incl;
  __syncthreads();
  if (warp == 0) {
    int a = warp_sums[0][lane], b = warp_sums[1][lane];
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int x = __shfl_up_sync(kFullWarpMask, a, d), y = __shfl_up_sync(kFullWarpMask, b, d);
      if (lane >= d) a += x, b += y;
    }
    warp_sums[0][lane] = a, warp_sums[1][lane] = b;
  }
  __syncthreads();
  const int row0 = rows_incl - tl * BM + (warp ? warp_sums[0][warp - 1] : 0);
  const int tile0 = tiles_incl - tl + (warp ? warp_sums[1][warp - 1] : 0);
  int* flags = reinterpret_cast<int*>(p.scratch + p.s.flags);
  int* ecount = reinterpret_cast<int*>(p.scratch + p.s.expert_count);
  int* eoff = reinterpret_cast<int*>(p.scratch + p.s.expert_offset);
  int4* tiles = reinterpret_cast<int4*>(p.scratch + p.s.tiles);
  if (tid < E) {
    off[tid] = row0;
    ecount[tid] = c;
    eoff[tid] = row0;
    for (int i = 0; i < tl; ++i) tiles[tile0 + i] = make_int4(tid, row0 + i * BM, min(BM, c - i * BM), 0);
    for (int r = row0 + c; r < row0 + tl * BM; ++r) route_of_row[r] = -1;
    cnt[tid] = 0;
    if (tid == E - 1) {
      eoff[E] = row0 + tl * BM;
      flags[0] = (int)err_all;
      flags[1] = tile0 + tl;
      flags[2] = row0 + tl * BM;
    }
  }
  __syncthreads();
  for (long long r = tid; r < routes; r += SK_MOE_PACK_THREADS) {
    const int l = route_pos[r];
    int pos = -1;
    if (l >= 0) {
      pos = off[l] + atomicAdd(&cnt[l], 1);
      route_of_row[pos] = (int)r;
    }
    route_pos[r] = pos;
  }
}

__global__ void __launch_bounds__(256) pack_quant(const sk_moe_params p) {
  pdl_enter();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int* flags = reinterpret_cast<const int*>(p.scratch + p.s.flags);
  const long long row = (long long)blockIdx.x * 8 + warp;
  if (row >= flags[2]) return;
  const int kp = padded(p.k), K = p.k, blocks = kp / 16;
  const int route = reinterpret_cast<const int*>(p.scratch + p.s.route_of_row)[row];
  const int e = reinterpret_cast<const int4*>(p.scratch + p.s.tiles)[row / p.s.bm].x;
  u8* codes = p.scratch + p.s.packed_a + row * (kp / 2);
  u8* scales = p.scratch + p.s.packed_a_scales;
  const float gs = route >= 0 ? __ldg(p.a1_gs + e) : 0.0f, gs_recip = gs_reciprocal(gs);
  const float w = route >= 0 && p.apply_on_input ? __ldg(p.topk_weights + route) : 1.0f;
  const u16* x = reinterpret_cast<const u16*>(p.x) + (route >= 0 ? (long long)(route / p.topk) * K : 0);
  for (int b = lane; b < blocks; b += 32) {
    float v[16];
    if (route >= 0 && 16 * b < K) {
      const uint4 r0 = __ldg(reinterpret_cast<const uint4*>(x + 16 * b)), r1 = __ldg(reinterpret_cast<const uint4*>(x + 16 * b + 8));
      const u32 wd[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) v[2 * i] = bf16_lo(wd[i]), v[2 * i + 1] = bf16_hi(wd[i]);
      if (p.apply_on_input) {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = mul_rn(v[i], w);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = 0.0f;
    }
    u32 c0, c1;
    const u32 sc = nvfp4_quantize16(v, gs, gs_recip, c0, c1);
    *reinterpret_cast<uint2*>(codes + 8 * b) = make_uint2(c0, c1);
    scales[sk_moe_swizzled_offset(row, b, blocks)] = (u8)sc;
  }
}

}  // namespace moe
}  // namespace sk
