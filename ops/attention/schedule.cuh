// attention.paged / attention.varlen: the device scheduler. Rebuilds the work list from the live
// lengths on every run (CUDA-graph replays included), so the host never synchronises.
// Contract: ops/attention/attention.md; index math: attention/layout.cuh (the CPU replay in
// ops/attention/ref.c runs the same functions).
//
// LAUNCH CONTRACT
//   template <int NT>  threads (SK_ATTN_SCHED_THREADS = 256)
//   __global__ void sk::attn::schedule<NT>(const __grid_constant__ sk_attn_params p)
//   grid = (1, 1, 1), block = (NT, 1, 1)
//   dynamic shared memory = sk_attn_sched_smem_bytes(p.max_batch) (4 * (max_batch + 1); > 48 KB,
//     i.e. max_batch > 12287, needs the opt-in)
//   reads   cu_seqlens_q[0..batch], cache_seqlens[0..batch) (paged) or cu_seqlens_k[0..batch]
//   writes  scratch regions 0-3 (header, items, requests, merge rows); the header's error flags
//           and unit counter are reset here, every run
//   Uses p: batch, num_heads_q/kv, paged, page_shift, max_pages, max_* budgets, tile_q, tile_kv,
//   attn_ctas, split, fixed_chunk_tiles, window_left. Nothing else is read.
//
// ALGORITHM (one CTA; thread i owns the requests [i * per, (i + 1) * per))
//   1. validate every request (sk_attn_make_request: clamps and error bits) and sum the items and
//      partial rows of every chunk candidate (sk_attn_accumulate);
//   2. reduce the sums over the CTA; one thread per candidate costs it (sk_attn_candidate_cost),
//      thread 0 picks the chunk (sk_attn_pick_chunk);
//   3. per request: chunks, items, partial rows, merge rows; exclusive scans over the CTA give
//      each request its item, partial-row and merge-row offsets; the requests are stored;
//   4. items and merge rows are written in parallel, one per thread, each finding its request by
//      a binary search over the offsets in shared memory.
#pragma once
#include "attention/device.cuh"
#include "attention/layout.cuh"
#include "common/defs.cuh"
#include "common/sync.cuh"

namespace sk {
namespace attn {

// Exclusive block scan of three ints (all NT threads); totals in tot[0..2].
template <int NT>
SK_DEVICE void block_scan3(int (&v)[3], int (&tot)[3], int (*s_warp)[3]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inc[3] = {v[0], v[1], v[2]};
#pragma unroll
  for (int d = 1; d < 32; d *= 2)
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      const int x = __shfl_up_sync(0xffffffffu, inc[k], d);
      if (lane >= d) inc[k] += x;
    }
  if (lane == 31)
#pragma unroll
    for (int k = 0; k < 3; ++k) s_warp[warp][k] = inc[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    int before = 0, all = 0;
    for (int w = 0; w < NT / 32; ++w) {
      if (w < warp) before += s_warp[w][k];
      all += s_warp[w][k];
    }
    v[k] = before + inc[k] - v[k];
    tot[k] = all;
  }
  __syncthreads();
}

// Largest b in [0, n] with off[b] <= x (off non-decreasing, off[0] <= x).
SK_DEVICE int upper_index(const int* off, int n, int x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (off[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <int NT>
__global__ void __launch_bounds__(NT) schedule(const __grid_constant__ sk_attn_params p) {
  static_assert(NT % 32 == 0 && NT <= 1024 && NT >= SK_ATTN_NCAND, "threads");
  extern __shared__ int s_off[];  // [max_batch + 1]: item offsets, then merge-row offsets
  __shared__ unsigned s_red[NT / 32][2 * SK_ATTN_NCAND];
  __shared__ long long s_cost[SK_ATTN_NCAND];
  __shared__ int s_scan[NT / 32][3];
  __shared__ int s_maxspan, s_chunk;
  __shared__ unsigned s_flags;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  pdl_enter();

  int* hdr = region<int>(p, SK_ATTN_R_HEADER, 0);
  sk_attn_item* items = region<sk_attn_item>(p, SK_ATTN_R_ITEMS, 0);
  sk_attn_req* reqs = region<sk_attn_req>(p, SK_ATTN_R_REQS, 0);
  sk_attn_merge* merges = region<sk_attn_merge>(p, SK_ATTN_R_MERGE, 0);

  if (tid == 0) s_maxspan = 0, s_flags = 0;
  __syncthreads();

  unsigned flags = 0;
  int batch = p.batch;
  if (batch < 0 || batch > p.max_batch) flags |= SK_ATTN_ERR_BATCH, batch = sk_attn_clamp(batch, 0, p.max_batch);
  const int hkv = p.num_heads_kv, group = p.num_heads_q / hkv;
  const long long cap = p.paged ? (long long)p.max_pages << p.page_shift : p.max_total_k;
  const int kv_cap = cap < 0x7fffffffLL ? (int)cap : 0x7fffffff;
  const int per = (batch + NT - 1) / NT, b0 = sk_attn_min(tid * per, batch), b1 = sk_attn_min(b0 + per, batch);
  // Request b validated (the inputs are re-read from L1 in each pass rather than kept).
  auto request = [&](int b, unsigned* f) {
    const int q0 = p.cu_seqlens_q[b], q1 = p.cu_seqlens_q[b + 1];
    const int k0 = p.paged ? 0 : p.cu_seqlens_k[b], k1 = p.paged ? p.cache_seqlens[b] : p.cu_seqlens_k[b + 1];
    sk_attn_req r = {0, 0, 0, 0, 0, 0, 0, 0};
    *f |= sk_attn_make_request(q0, q1, k0, k1, p.paged, p.max_total_q, kv_cap, p.window_left, group, p.tile_q,
                               p.tile_kv, &r);
    return r;
  };

  // 1. validate, sum the candidates
  unsigned cand_items[SK_ATTN_NCAND], cand_part[SK_ATTN_NCAND];
#pragma unroll
  for (int c = 0; c < SK_ATTN_NCAND; ++c) cand_items[c] = 0, cand_part[c] = 0;
  int maxspan = 0;
  for (int b = b0; b < b1; ++b) {
    const sk_attn_req r = request(b, &flags);
    sk_attn_accumulate(&r, p.tile_kv, p.fixed_chunk_tiles, cand_items, cand_part);
    maxspan = sk_attn_max(maxspan, sk_attn_span_tiles(&r, p.tile_kv));
  }

  // 2. reduce (warps without requests skip the shuffles), cost every candidate, pick the chunk
  if (warp * 32 * per < batch) {
#pragma unroll
    for (int c = 0; c < SK_ATTN_NCAND; ++c) {
      unsigned a = cand_items[c], q = cand_part[c];
#pragma unroll
      for (int d = 16; d >= 1; d /= 2)
        a = sk_attn_sat_add(a, __shfl_xor_sync(0xffffffffu, a, d)), q = sk_attn_sat_add(q, __shfl_xor_sync(0xffffffffu, q, d));
      if (lane == 0) s_red[warp][c] = a, s_red[warp][SK_ATTN_NCAND + c] = q;
    }
    atomicMax(&s_maxspan, maxspan);
  } else if (lane == 0) {
#pragma unroll
    for (int c = 0; c < 2 * SK_ATTN_NCAND; ++c) s_red[warp][c] = 0;
  }
  if (flags) atomicOr(&s_flags, flags);
  __syncthreads();
  if (tid < SK_ATTN_NCAND) {
    unsigned a = 0, q = 0;
    for (int w = 0; w < NT / 32; ++w) a = sk_attn_sat_add(a, s_red[w][tid]), q = sk_attn_sat_add(q, s_red[w][SK_ATTN_NCAND + tid]);
    s_cost[tid] = sk_attn_candidate_cost(tid, a, q, s_maxspan, hkv, p.attn_ctas, p.tile_kv, p.max_work_items,
                                         p.max_partial_rows, p.fixed_chunk_tiles);
  }
  __syncthreads();
  if (tid == 0) s_chunk = sk_attn_pick_chunk(s_cost, s_maxspan, p.split, p.fixed_chunk_tiles);
  __syncthreads();
  const int chunk = s_chunk;

  // 3. per-request counts and offsets; the requests are stored here, complete
  int cnt[3] = {0, 0, 0}, tot[3];
  for (int b = b0; b < b1; ++b) {
    const sk_attn_req r = request(b, &flags);
    const int n = sk_attn_chunks(sk_attn_span_tiles(&r, p.tile_kv), chunk);
    cnt[0] += r.q_tiles * n;
    if (n > 1) cnt[1] += r.q_len * n, cnt[2] += r.q_len;
  }
  block_scan3<NT>(cnt, tot, s_scan);
  const int merge_first = cnt[2];
  for (int b = b0; b < b1; ++b) {
    sk_attn_req r = request(b, &flags);
    r.n_chunks = sk_attn_chunks(sk_attn_span_tiles(&r, p.tile_kv), chunk);
    r.partial_off = r.n_chunks > 1 ? cnt[1] : 0;
    s_off[b] = cnt[0];
    cnt[0] += r.q_tiles * r.n_chunks;
    if (r.n_chunks > 1) cnt[1] += r.q_len * r.n_chunks;
    reqs[b] = r;
  }
  if (tid == 0) s_off[batch] = tot[0];
  __syncthreads();

  // 4. items, then merge rows
  const int n_items = sk_attn_min(tot[0], p.max_work_items);
  if (tot[0] > p.max_work_items) flags |= SK_ATTN_ERR_BUDGET;
  for (int i = tid; i < n_items; i += NT) {
    const int b = upper_index(s_off, batch, i);
    const sk_attn_req r = reqs[b];
    items[i] = sk_attn_request_item(&r, b, i - s_off[b]);
  }
  __syncthreads();
  int mo = merge_first;
  for (int b = b0; b < b1; ++b) {
    s_off[b] = mo;
    if (reqs[b].n_chunks > 1) mo += reqs[b].q_len;
  }
  if (tid == 0) s_off[batch] = tot[2];
  __syncthreads();
  const int n_merge = sk_attn_min(tot[2], p.max_total_q);
  for (int j = tid; j < n_merge; j += NT) {
    const int b = upper_index(s_off, batch, j);
    const sk_attn_req r = reqs[b];
    const int i = j - s_off[b];
    const sk_attn_merge e = {r.q_start + i, r.partial_off + i * r.n_chunks, r.n_chunks, b};
    merges[j] = e;
  }
  if (flags) atomicOr(&s_flags, flags);
  __syncthreads();
  if (tid == 0)
    sk_attn_write_header(hdr, n_items, chunk, n_merge, s_flags, hkv, sk_attn_clamp(p.cu_seqlens_q[batch], 0, p.max_total_q),
                         tot[1], batch);
}

}  // namespace attn
}  // namespace sk
