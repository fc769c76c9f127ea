// attention.paged / attention.varlen: the attention kernel (portable: mma.sync m16n8k16 with FP32
// accumulation, ldmatrix, cp.async; sm_90 and sm_120/sm_121). Contract: ops/attention/attention.md.
//
// LAUNCH CONTRACT
//   template <typename T, int KVF, int DQK, int DVO, int TQ, int TK, int WQ, int WK, int STAGES, int PAGED>
//     T        q / output type: __nv_bfloat16 or __half
//     KVF      0: K/V in T; 1: K/V FP8 E4M3 (uint8), dequantised by k_scale / v_scale (fp32)
//     DQK, DVO head dims (multiples of 16 / 32; tested (64,64), (128,128), (256,256), (192,128))
//     TQ       packed query rows per CTA (token * group + head_in_group), WQ warps of TQ / WQ rows
//     TK       keys per KV tile, split over WK warps (TK / WK keys each, a multiple of 16)
//     STAGES   cp.async stages (>= 2), each one K tile and one V tile
//     PAGED    1: K/V pages through page_table; 0: contiguous K/V rows (varlen)
//   Configurations: sk_attn_pick_config (attention/layout.cuh).
//   __global__ void sk::attn::attention<...>(const __grid_constant__ sk_attn_params p)
//   grid  = (any >= 1, 1, 1): persistent CTAs; CTA i takes unit i, then units from the scratch
//           counter (zeroed by the scheduler) until the units (items x Hkv) are done
//   block = (32 * WQ * WK, 1, 1)
//   dynamic shared memory = sk_attn_smem_bytes(DQK, DVO, KVF, {TQ, TK, WQ, WK, STAGES})
//     (<= 99 KB for every configuration of sk_attn_pick_config; > 48 KB needs the opt-in)
//   reads   the scheduler's scratch (header, items, requests), q, K/V (only keys < the request's
//           validated kv_len, through page-table entries < max_pages), page_table, scales, sinks
//   writes  unsplit requests: out rows and lse; split requests: the partial rows (fp32 output
//           normalised by its own sum, base-2 LSE); the header's unit counter and error flags
//   Must run after attention/schedule.cuh's kernel on the same scratch (stream order or PDL).
//
// HOW IT WORKS
//   A unit is (request, q tile, KV chunk, KV head). Its TQ packed rows are staged in shared memory
//   (zero rows past the request), then the KV tiles of the chunk stream through STAGES cp.async
//   buffers. Warp (wq, wk) computes S = Q K^T for its 16 MQ rows and TK / WK keys (A from Q by
//   ldmatrix, B from K by ldmatrix), masks the tile if it crosses a boundary (chunk, causal,
//   window, kv_len), runs the online softmax in the log2 domain (exp2 with the scale folded into
//   log2 e), and adds P V (P re-packed from the S accumulators, V by ldmatrix.trans). With WK > 1
//   the warps of one row band merge their (m, l, O) through shared memory at the end
//   (FlashDecoding). FP8 KV: the tiles stay E4M3 in shared memory (half the bytes); Q is scaled by
//   sm_scale * log2 e and stored as f16 with the pair permutation of sk_attn_q_pair_slot, so a
//   plain ldmatrix of K bytes gives each lane K elements matching its A slots; V bytes come by
//   ldmatrix.trans, each register holding two keys x two columns, split into even / odd columns
//   (two n8 tiles); both MMAs run in f16 (E4M3 is exact in f16, P in [0, 1]); k_scale multiplies
//   S, v_scale the output.
#pragma once
#include "attention/device.cuh"
#include "attention/layout.cuh"
#include "common/defs.cuh"
#include "common/mma.cuh"
#include "common/numeric.cuh"
#include "common/smem.cuh"
#include "common/sync.cuh"

namespace sk {
namespace attn {

template <bool C, typename A, typename B>
struct Select {
  using type = A;
};
template <typename A, typename B>
struct Select<false, A, B> {
  using type = B;
};

template <typename T, int KVF, int DQK, int DVO, int TQ, int TK, int WQ, int WK, int STAGES, int PAGED>
__global__ void __launch_bounds__(32 * WQ * WK) attention(const __grid_constant__ sk_attn_params p) {
  using M = typename Select<KVF != 0, __half, T>::type;  // MMA operand type
  constexpr int NT = 32 * WQ * WK;
  constexpr int MQ = TQ / (16 * WQ);        // m16 tiles per warp
  constexpr int KVW = TK / WK;              // keys per warp per tile
  constexpr int NKV = KVW / 8, KSP = KVW / 16;
  constexpr int NDV = DVO / 8;
  constexpr int EB = KVF ? 1 : 2;           // bytes per KV element
  constexpr int CPR_Q = DQK / 8, CPR_K = DQK * EB / 16, CPR_V = DVO * EB / 16;
  constexpr int K_TILE = TK * DQK * EB, STAGE = TK * (DQK + DVO) * EB;
  constexpr int TPR = NT / TK;              // loader threads per key row
  constexpr int RED_STRIDE = DVO + SK_ATTN_RED_PAD;
  constexpr sk_attn_config kCfg = {TQ, TK, WQ, WK, STAGES};
  constexpr int kStatsOff = sk_attn_smem_stats_off(DQK, DVO, KVF, kCfg);
  static_assert(TQ % (16 * WQ) == 0 && MQ >= 1, "TQ");
  static_assert(KVW % 16 == 0, "keys per warp must be a multiple of 16");
  static_assert(NT % TK == 0 && CPR_K % TPR == 0 && CPR_V % TPR == 0, "loader mapping");
  static_assert(DQK % 16 == 0 && DVO % 32 == 0, "head dims");
  static_assert(STAGES >= 2, "stages");

  extern __shared__ __align__(128) u8 smem[];
  const u32 s_q = smem_addr(smem);
  const u32 s_kv = s_q + sk_attn_smem_kv_off(TQ, DQK);
  const u32 s_m = s_q + kStatsOff, s_l = s_m + 4 * WK * TQ, s_next = s_l + 4 * WK * TQ;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int wq = warp / WK, wk = warp % WK;

  pdl_wait_for_previous();
  pdl_launch_dependents();

  int* hdr = region<int>(p, SK_ATTN_R_HEADER, DVO);
  const sk_attn_item* items = region<const sk_attn_item>(p, SK_ATTN_R_ITEMS, DVO);
  const sk_attn_req* reqs = region<const sk_attn_req>(p, SK_ATTN_R_REQS, DVO);
  float* part_o = region<float>(p, SK_ATTN_R_PART_O, DVO);
  float* part_lse = region<float>(p, SK_ATTN_R_PART_LSE, DVO);
  const int units = hdr[SK_ATTN_HDR_UNITS], chunk_tiles = hdr[SK_ATTN_HDR_CHUNK_TILES];
  const int hkv = p.num_heads_kv, hq = p.num_heads_q, group = hq / hkv;
  const T* qg = static_cast<const T*>(p.q);

  int u = blockIdx.x;
  for (int iter = 0; u < units; ++iter) {
    int next = 0;
    if (tid == 0) next = atomicAdd(&hdr[SK_ATTN_HDR_COUNTER], 1) + (int)gridDim.x;  // used at the end

    const int item = u / hkv, kvh = u - item * hkv;
    const int4 iv = *reinterpret_cast<const int4*>(items + item);
    const int4 ra = *reinterpret_cast<const int4*>(reqs + iv.x);
    const int4 rb = *reinterpret_cast<const int4*>(reinterpret_cast<const int*>(reqs + iv.x) + 4);
    const sk_attn_req rq = {ra.x, ra.y, ra.z, ra.w, rb.x, rb.y, rb.z, rb.w};
    sk_attn_unit un;
    sk_attn_unit_ranges(&rq, iv.y, iv.z, chunk_tiles, group, TQ, TK, p.window_left, p.window_right, &un);

    // This thread's rows: key range [lo, hi) inside the chunk (empty for padding rows).
    int lo[MQ][2], hi[MQ][2];
#pragma unroll
    for (int mq = 0; mq < MQ; ++mq)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wq * 16 * MQ + 16 * mq + 8 * h + g, token = (un.row0 + r) / group;
        const bool ok = r < un.rows;
        lo[mq][h] = ok ? sk_attn_unit_row_lo(&un, token, p.window_left) : 0;
        hi[mq][h] = ok ? sk_attn_unit_row_hi(&un, token, p.window_right, rq.kv_len) : 0;
      }

    float s_mul = p.sm_scale * kLog2e, v_mul = 1.0f;
    if constexpr (KVF != 0) {
      s_mul = p.k_scale ? p.k_scale[(long long)iv.x * p.k_scale_sb + (long long)kvh * p.k_scale_sh] : 1.0f;
      v_mul = p.v_scale ? p.v_scale[(long long)iv.x * p.v_scale_sb + (long long)kvh * p.v_scale_sh] : 1.0f;
    }
    s_mul = fmaxf(s_mul, 1e-30f);  // > 0: the max is taken on raw scores and -inf * s_mul stays -inf

    // ---- Q tile ----
    for (int i = tid; i < TQ * CPR_Q; i += NT) {
      const int r = i / CPR_Q, c = i - r * CPR_Q;
      const bool ok = r < un.rows;
      const int R = un.row0 + r, token = R / group, head = kvh * group + (R - token * group);
      const T* src = ok ? qg + (long long)(rq.q_start + token) * p.q_stride + (long long)head * DQK + c * 8 : qg;
      if constexpr (KVF == 0) {
        cp_async_16_at(s_q + sk_attn_swz(r, c, CPR_Q), src, ok ? 16 : 0);
      } else {
        const uint4 raw = ok ? *reinterpret_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
        float v[8];
        widen8<T>(raw, v);
        const float qs = p.sm_scale * kLog2e;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int slot = sk_attn_q_pair_slot(4 * (c & 1) + j);
          sts_u32(s_q + sk_attn_swz(r, (c & ~1) + (slot >> 2), CPR_Q) + 4 * (slot & 3),
                  pack2<__half>(v[2 * j] * qs, v[2 * j + 1] * qs));
        }
      }
    }

    // ---- KV tile loader: thread -> (key row, chunks c0, c0 + TPR, ...) ----
    const int ld_row = tid / TPR, ld_c0 = tid - ld_row * TPR;
    const char* kbase = static_cast<const char*>(p.k) + (long long)kvh * DQK * EB;
    const char* vbase = static_cast<const char*>(p.v) + (long long)kvh * DVO * EB;
    const int* pt = PAGED ? p.page_table + (long long)iv.x * p.pt_stride : nullptr;
    auto load_tile = [&](int j) {
      const int pos = un.t_begin + j * TK + ld_row;
      bool ok = pos < un.load_end;
      long long koff = 0, voff = 0;
      if constexpr (PAGED) {
        const int page = ok ? __ldg(pt + (pos >> p.page_shift)) : 0;
        if (ok && (unsigned)page >= (unsigned)p.num_pages) {
          atomicOr(&hdr[SK_ATTN_HDR_FLAGS], (int)SK_ATTN_ERR_PAGE_ID);
          ok = false;
        }
        const long long in_page = pos & ((1 << p.page_shift) - 1);
        koff = ((long long)page * p.k_page_pitch + in_page * p.k_token_stride) * EB;
        voff = ((long long)page * p.v_page_pitch + in_page * p.v_token_stride) * EB;
      } else {
        koff = (long long)(rq.kv_base + pos) * p.k_token_stride * EB;
        voff = (long long)(rq.kv_base + pos) * p.v_token_stride * EB;
      }
      const u32 dst = s_kv + (j % STAGES) * STAGE;
#pragma unroll
      for (int k = 0; k < CPR_K / TPR; ++k) {
        const int c = ld_c0 + k * TPR;
        cp_async_16_at(dst + sk_attn_swz(ld_row, c, CPR_K), ok ? kbase + koff + 16 * c : kbase, ok ? 16 : 0);
      }
#pragma unroll
      for (int k = 0; k < CPR_V / TPR; ++k) {
        const int c = ld_c0 + k * TPR;
        cp_async_16_at(dst + K_TILE + sk_attn_swz(ld_row, c, CPR_V), ok ? vbase + voff + 16 * c : vbase, ok ? 16 : 0);
      }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < un.n_tiles) load_tile(s);
      cp_async_commit();  // the Q copies join the first group
    }

    float o[MQ][NDV][4], m[MQ][2], l[MQ][2];
    zero_fragments(o);
#pragma unroll
    for (int mq = 0; mq < MQ; ++mq) m[mq][0] = m[mq][1] = SK_ATTN_NEG_INF, l[mq][0] = l[mq][1] = 0.0f;

#pragma unroll 1
    for (int j = 0; j < un.n_tiles; ++j) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      {
        const int pf = j + STAGES - 1;  // refills the stage read in iteration j - 1
        if (pf < un.n_tiles) load_tile(pf);
        cp_async_commit();
      }
      const u32 sk = s_kv + (j % STAGES) * STAGE, sv = sk + K_TILE;

      // S = Q K^T for this warp's rows and keys.
      float s[MQ][NKV][4];
      zero_fragments(s);
#pragma unroll
      for (int kk = 0; kk < DQK / 16; ++kk) {
        u32 a[MQ][4];
#pragma unroll
        for (int mq = 0; mq < MQ; ++mq)
          ldmatrix_x4_at(a[mq], s_q + sk_attn_swz(wq * 16 * MQ + 16 * mq + (lane & 15), 2 * kk + (lane >> 4), CPR_Q));
        if constexpr (KVF == 0) {
#pragma unroll
          for (int np = 0; np < NKV / 2; ++np) {
            u32 bb[4];
            ldmatrix_x4_at(bb, sk + sk_attn_swz(wk * KVW + 16 * np + (lane & 7) + ((lane >> 4) << 3),
                                                2 * kk + ((lane >> 3) & 1), CPR_K));
            mma_tile_pair<M>(s, 2 * np, a, bb);
          }
        } else {
#pragma unroll
          for (int np = 0; np < NKV / 2; ++np) {
            u32 bb[2];
            ldmatrix_x2_at(bb, sk + sk_attn_swz(wk * KVW + 16 * np + (lane & 7) + (((lane >> 3) & 1) << 3), kk, CPR_K));
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const u32 b[2] = {e4m3x2_to_f16x2<0>(bb[e]), e4m3x2_to_f16x2<1>(bb[e])};
#pragma unroll
              for (int mq = 0; mq < MQ; ++mq) mma16<M>(s[mq][2 * np + e], a[mq], b);
            }
          }
        }
      }

      // Mask, online softmax in the log2 domain: p = 2^(s * s_mul - m), one FFMA per score.
      const int t0 = un.t_begin + j * TK;
      if (sk_attn_tile_masked(&un, t0, TK)) {
        const int col0 = t0 + wk * KVW + 2 * t;
#pragma unroll
        for (int i = 0; i < MQ * NKV * 4; ++i) {  // accumulator i: m tile, n tile, element
          const int mq = i / (NKV * 4), n = i / 4 % NKV, e = i % 4, kv = col0 + 8 * n + (e & 1);
          if (kv < lo[mq][e >> 1] || kv >= hi[mq][e >> 1]) s[mq][n][e] = SK_ATTN_NEG_INF;
        }
      }
#pragma unroll
      for (int mq = 0; mq < MQ; ++mq)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = SK_ATTN_NEG_INF;
#pragma unroll
          for (int n = 0; n < NKV; ++n) mx = fmaxf(mx, fmaxf(s[mq][n][2 * h], s[mq][n][2 * h + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float mnew = fmaxf(m[mq][h], mx * s_mul);
          const float mu = mnew == SK_ATTN_NEG_INF ? 0.0f : mnew;
          const float corr = fast_exp2(m[mq][h] - mu);
          m[mq][h] = mnew;
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < NKV; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pe = fast_exp2(fmaf(s[mq][n][2 * h + e], s_mul, -mu));
              s[mq][n][2 * h + e] = pe;
              sum += pe;
            }
          l[mq][h] = l[mq][h] * corr + sum;
#pragma unroll
          for (int n = 0; n < NDV; ++n) o[mq][n][2 * h] *= corr, o[mq][n][2 * h + 1] *= corr;
        }

      // O += P V.
#pragma unroll
      for (int ks = 0; ks < KSP; ++ks) {
        u32 a[MQ][4];
#pragma unroll
        for (int mq = 0; mq < MQ; ++mq) {
          a[mq][0] = pack2<M>(s[mq][2 * ks][0], s[mq][2 * ks][1]);
          a[mq][1] = pack2<M>(s[mq][2 * ks][2], s[mq][2 * ks][3]);
          a[mq][2] = pack2<M>(s[mq][2 * ks + 1][0], s[mq][2 * ks + 1][1]);
          a[mq][3] = pack2<M>(s[mq][2 * ks + 1][2], s[mq][2 * ks + 1][3]);
        }
        const int vr = wk * KVW + 16 * ks + (lane & 7) + (((lane >> 3) & 1) << 3);
        if constexpr (KVF == 0) {
#pragma unroll
          for (int jp = 0; jp < NDV / 2; ++jp) {
            u32 bb[4];
            ldmatrix_x4_trans_at(bb, sv + sk_attn_swz(vr, 2 * jp + (lane >> 4), CPR_V));
            mma_tile_pair<M>(o, 2 * jp, a, bb);
          }
        } else {
          // Register r of chunk c holds keys (2t, 2t+1) x columns (2g, 2g+1): n8 tile 2c takes
          // the even columns, 2c + 1 the odd ones.
#pragma unroll
          for (int cp = 0; cp < DVO / 32; ++cp) {
            u32 bb[4];
            ldmatrix_x4_trans_at(bb, sv + sk_attn_swz(vr, 2 * cp + (lane >> 4), CPR_V));
#pragma unroll
            for (int hc = 0; hc < 2; ++hc) {
              const u32 eo[4] = {e4m3_even_f16x2(bb[2 * hc]), e4m3_even_f16x2(bb[2 * hc + 1]),
                                 e4m3_odd_f16x2(bb[2 * hc]), e4m3_odd_f16x2(bb[2 * hc + 1])};
              mma_tile_pair<M>(o, 4 * cp + 2 * hc, a, eo);
            }
          }
        }
      }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mq = 0; mq < MQ; ++mq)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l[mq][h] += __shfl_xor_sync(0xffffffffu, l[mq][h], 1);
        l[mq][h] += __shfl_xor_sync(0xffffffffu, l[mq][h], 2);
      }

    // ---- merge the WK warps of one row band (shared memory aliases the KV stages) ----
    if constexpr (WK > 1) {
      if (t == 0)
#pragma unroll
        for (int mq = 0; mq < MQ; ++mq)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = wq * 16 * MQ + 16 * mq + 8 * h + g;
            sts_f32(s_m + 4 * (wk * TQ + r), m[mq][h]);
            sts_f32(s_l + 4 * (wk * TQ + r), l[mq][h]);
          }
      __syncthreads();
#pragma unroll
      for (int mq = 0; mq < MQ; ++mq)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wq * 16 * MQ + 16 * mq + 8 * h + g;
          float mw[WK], mx = SK_ATTN_NEG_INF;
#pragma unroll
          for (int w = 0; w < WK; ++w) mw[w] = lds_f32(s_m + 4 * (w * TQ + r)), mx = fmaxf(mx, mw[w]);
          const float mu = mx == SK_ATTN_NEG_INF ? 0.0f : mx;
          float lsum = 0.0f;
#pragma unroll
          for (int w = 0; w < WK; ++w) lsum += lds_f32(s_l + 4 * (w * TQ + r)) * fast_exp2(mw[w] - mu);
          const float f = fast_exp2(m[mq][h] - mu);
#pragma unroll
          for (int n = 0; n < NDV; ++n) o[mq][n][2 * h] *= f, o[mq][n][2 * h + 1] *= f;
          m[mq][h] = mx;
          l[mq][h] = lsum;
          if (wk > 0)
#pragma unroll
            for (int n = 0; n < NDV; ++n)
              sts_f32x2(s_kv + 4 * (((wk - 1) * TQ + r) * RED_STRIDE + 8 * n + 2 * t), o[mq][n][2 * h], o[mq][n][2 * h + 1]);
        }
      __syncthreads();
      if (wk == 0)
#pragma unroll
        for (int w = 1; w < WK; ++w)
#pragma unroll
          for (int mq = 0; mq < MQ; ++mq)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = wq * 16 * MQ + 16 * mq + 8 * h + g;
#pragma unroll
              for (int n = 0; n < NDV; ++n) {
                const uint2 v = lds_8B(s_kv + 4 * (((w - 1) * TQ + r) * RED_STRIDE + 8 * n + 2 * t));
                o[mq][n][2 * h] += __uint_as_float(v.x);
                o[mq][n][2 * h + 1] += __uint_as_float(v.y);
              }
            }
    }

    // ---- epilogue (warps wk == 0): final rows or partial rows ----
    if (wk == 0) {
      const bool final_rows = rq.n_chunks == 1;
#pragma unroll
      for (int mq = 0; mq < MQ; ++mq)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wq * 16 * MQ + 16 * mq + 8 * h + g;
          if (r >= un.rows) continue;
          const int R = un.row0 + r, token = R / group, head = kvh * group + (R - token * group);
          const float mx = m[mq][h], ls = l[mq][h];
          float inv, lse2;
          if (final_rows) {
            float mf = mx, lf = ls, f = 1.0f;
            if (p.sinks) {
              const float s2 = p.sinks[head] * kLog2e;
              mf = fmaxf(mx, s2);
              f = fast_exp2(mx - mf);
              lf = ls * f + fast_exp2(s2 - mf);
            }
            inv = lf > 0.0f ? __fdividef(v_mul * f, lf) : 0.0f;
            lse2 = lf > 0.0f ? mf + fast_log2(lf) : SK_ATTN_NEG_INF;
          } else {
            inv = ls > 0.0f ? __fdividef(v_mul, ls) : 0.0f;
            lse2 = ls > 0.0f ? mx + fast_log2(ls) : SK_ATTN_NEG_INF;
          }
          if (final_rows) {
            T* dst = static_cast<T*>(p.out) + ((long long)(rq.q_start + token) * hq + head) * DVO;
            if constexpr (KVF == 0) {
#pragma unroll
              for (int n = 0; n < NDV; ++n) store2<T>(dst + 8 * n + 2 * t, o[mq][n][2 * h] * inv, o[mq][n][2 * h + 1] * inv);
            } else {
#pragma unroll
              for (int c = 0; c < DVO / 16; ++c)
                store4<T>(dst + 16 * c + 4 * t, o[mq][2 * c][2 * h] * inv, o[mq][2 * c + 1][2 * h] * inv,
                          o[mq][2 * c][2 * h + 1] * inv, o[mq][2 * c + 1][2 * h + 1] * inv);
            }
            if (p.lse && t == 0) p.lse[(long long)(rq.q_start + token) * hq + head] = p.lse_natural ? lse2 * kLn2 : lse2;
          } else {
            const long long prow = (long long)rq.partial_off + (long long)token * rq.n_chunks + iv.z;
            float* dst = part_o + (prow * hq + head) * DVO;
            if constexpr (KVF == 0) {
#pragma unroll
              for (int n = 0; n < NDV; ++n)
                *reinterpret_cast<float2*>(dst + 8 * n + 2 * t) = make_float2(o[mq][n][2 * h] * inv, o[mq][n][2 * h + 1] * inv);
            } else {
#pragma unroll
              for (int c = 0; c < DVO / 16; ++c)
                *reinterpret_cast<float4*>(dst + 16 * c + 4 * t) =
                    make_float4(o[mq][2 * c][2 * h] * inv, o[mq][2 * c + 1][2 * h] * inv, o[mq][2 * c][2 * h + 1] * inv,
                                o[mq][2 * c + 1][2 * h + 1] * inv);
            }
            if (t == 0) part_lse[prow * hq + head] = lse2;
          }
        }
    }

    // Next unit; two slots so that a slow reader never sees the following write.
    if (tid == 0) sts_u32(s_next + 4 * (iter & 1), (u32)next);
    __syncthreads();
    u = (int)lds_u32(s_next + 4 * (iter & 1));
  }
}

}  // namespace attn
}  // namespace sk
