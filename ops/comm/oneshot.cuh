// comm.pcie one-shot collectives: every rank reads every peer's copy through CUDA IPC mappings
// (PCIe peer reads, or local memory for ranks sharing a GPU) and reduces in rank order 0..W-1 in
// fp32, so all ranks compute bitwise identical results. Buffer layout and protocol:
// comm/layout.cuh; host: comm/comm.c; contract: comm/comm.md.
//
// Launch contract (both kernels):
//   template  W: world size (2..8)
//   grid      (G, 1, 1) with G = the communicator's block count, the same on every rank and call
//   block     (SK_COMM_THREADS = 256, 1, 1), no dynamic shared memory
//   args      unsigned long long own (this rank's buffer; its rank table names the peers'), int rank,
//             unsigned long long slot_bytes (max_bytes), unsigned long long timeout_ns, then:
//   allreduce<W>:      const uint4* in, uint4* out, unsigned long long chunks (16-byte chunks)
//                      reads in[0, chunks), writes out[0, chunks) (may alias in)
//   add_rmsnorm<W>:    const uint4* x, uint4* residual, const uint4* weight, uint4* out,
//                      int rows, int h8 (H / 8), float eps
//                      reads x, residual [rows, H], weight [H]; writes residual, out [rows, H]
//   Both read and write this rank's buffer (slot, seq, error) and write flags in every peer's.
#pragma once
#include "comm/codec.cuh"
#include "comm/layout.cuh"
#include "common/defs.cuh"
#include "common/sync.cuh"

namespace sk_comm {
using sk::u32;
using sk::u64;

// The rank table of this rank's buffer (layout.cuh: every rank's buffer as mapped in this
// process, written by the host at connect), read once per block into shared memory: indexing a
// kernel-parameter array by a run-time rank would copy it to the stack.
struct Peers {
  const unsigned long long* base;
  SK_DEVICE Peers(unsigned long long own, unsigned long long* table) : base(table) {
    if (threadIdx.x < SK_COMM_LAYOUT_MAX_RANKS)
      table[threadIdx.x] = ((const unsigned long long*)(own + SK_COMM_PEERS_OFFSET))[threadIdx.x];
    __syncthreads();
  }
};

SK_DEVICE void store_release_sys(u32* p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
SK_DEVICE u32 load_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One thread's bounded wait until *flag >= seq (wrap: 2^32 collectives per communicator),
// polling every sleep_ns. False after timeout_ns: the first timeout is recorded in the error word
// of the buffer at `own` as (SK_COMM_ERROR_TIMEOUT, peer).
SK_DEVICE bool wait_flag(const u32* flag, u32 seq, u64 timeout_ns, unsigned long long own, u32 peer, unsigned sleep_ns) {
  if (load_acquire_sys(flag) >= seq) return true;
  const u64 start = sk::global_timer_ns();
  while (load_acquire_sys(flag) < seq) {
    if (sk::global_timer_ns() - start > timeout_ns) {
      u32* err = (u32*)(own + SK_COMM_ERROR_OFFSET);
      if (atomicCAS(err, 0u, SK_COMM_ERROR_TIMEOUT) == 0u) err[1] = peer;
      return false;
    }
    __nanosleep(sleep_ns);
  }
  return true;
}

SK_DEVICE u32* flags_of(unsigned long long base) { return (u32*)(base + SK_COMM_FLAGS_OFFSET); }
SK_DEVICE char* slot_of(unsigned long long base, u32 seq, unsigned long long slot_bytes) {
  return (char*)(base + SK_COMM_DATA_OFFSET + (seq & 1u) * slot_bytes);
}

// This block's sequence number of the collective now starting (all threads get it).
SK_DEVICE u32 next_seq(const Peers& p, int rank) {
  __shared__ u32 s;
  if (threadIdx.x == 0) s = ((const u32*)(p.base[rank] + SK_COMM_SEQ_OFFSET))[blockIdx.x] + 1u;
  __syncthreads();
  return s;
}

// After the block wrote its part of the slot: publish arrival to every peer, wait (bounded) for
// theirs. Returns false (every thread) when a peer did not come within timeout_ns: the error word
// then names it.
template <int W>
SK_DEVICE bool barrier(const Peers& p, int rank, u32 seq, u64 timeout_ns) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();  // also orders the block's slot writes before the release below
  const int t = threadIdx.x;
  if (t < W) {
    __threadfence_system();
    store_release_sys(flags_of(p.base[t]) + blockIdx.x * SK_COMM_LAYOUT_MAX_RANKS + rank, seq);
    const u32* mine = flags_of(p.base[rank]) + blockIdx.x * SK_COMM_LAYOUT_MAX_RANKS + t;
    if (!wait_flag(mine, seq, timeout_ns, p.base[rank], (u32)t, 64)) failed = 1;
  }
  __syncthreads();
  return !failed;
}

SK_DEVICE void finish(const Peers& p, int rank, u32 seq) {
  if (threadIdx.x == 0) ((u32*)(p.base[rank] + SK_COMM_SEQ_OFFSET))[blockIdx.x] = seq;
}

// Eight bf16 (one 16-byte chunk) as fp32 and back (RNE, codec.cuh's rounding).
SK_DEVICE void unpack8(uint4 v, float (&f)[8]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    f[2 * j] = sk_codec_bf16_to_f32((unsigned short)(w[j] & 0xFFFFu));
    f[2 * j + 1] = sk_codec_bf16_to_f32((unsigned short)(w[j] >> 16));
  }
}
SK_DEVICE uint4 pack8(const float (&f)[8]) {
  u32 w[4];
#pragma unroll
  for (int j = 0; j < 4; j++) w[j] = (u32)sk_codec_bf16_rn(f[2 * j]) | ((u32)sk_codec_bf16_rn(f[2 * j + 1]) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// fp32 sum over ranks 0..W-1 (in that order) of chunk i of every rank's slot (L2 loads: the slot
// may hold an older collective's data in this SM's L1).
template <int W>
SK_DEVICE void sum_chunk(const Peers& p, u32 seq, unsigned long long slot_bytes, unsigned long long i, float (&acc)[8]) {
  uint4 v[W];
#pragma unroll
  for (int r = 0; r < W; r++) v[r] = __ldcg((const uint4*)slot_of(p.base[r], seq, slot_bytes) + i);
  unpack8(v[0], acc);
#pragma unroll
  for (int r = 1; r < W; r++) {
    float f[8];
    unpack8(v[r], f);
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = __fadd_rn(acc[j], f[j]);
  }
}

template <int W>
__global__ void __launch_bounds__(SK_COMM_THREADS) allreduce(unsigned long long own, int rank, unsigned long long slot_bytes,
                                                           unsigned long long timeout_ns, const uint4* in, uint4* out,
                                                           unsigned long long chunks) {
  sk::pdl_wait_for_previous();
  sk::pdl_launch_dependents();
  __shared__ unsigned long long table[SK_COMM_LAYOUT_MAX_RANKS];
  const Peers p(own, table);
  const u32 seq = next_seq(p, rank);
  uint4* mine = (uint4*)slot_of(p.base[rank], seq, slot_bytes);
  const unsigned long long stride = (unsigned long long)gridDim.x * SK_COMM_THREADS;
  for (unsigned long long i = (unsigned long long)blockIdx.x * SK_COMM_THREADS + threadIdx.x; i < chunks; i += stride)
    mine[i] = in[i];
  if (!barrier<W>(p, rank, seq, timeout_ns)) return;
  for (unsigned long long i = (unsigned long long)blockIdx.x * SK_COMM_THREADS + threadIdx.x; i < chunks; i += stride) {
    float acc[8];
    sum_chunk<W>(p, seq, slot_bytes, i, acc);
    out[i] = pack8(acc);
  }
  finish(p, rank, seq);
}

// Block-wide fp32 sum (fixed tree: the same on every rank).
SK_DEVICE float block_sum(float v) {
  __shared__ float part[SK_COMM_THREADS / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  __syncthreads();  // part[] may still be read by the previous call
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = part[0];
#pragma unroll
  for (int w = 1; w < SK_COMM_THREADS / 32; w++) s = __fadd_rn(s, part[w]);
  return s;
}

// y = bf16(fp32 rank-order sum of x + residual); residual <- y;
// out = bf16(y * rsqrt(mean(y^2) + eps) * weight). Row r is block r % G's.
template <int W>
__global__ void __launch_bounds__(SK_COMM_THREADS) add_rmsnorm(unsigned long long own, int rank, unsigned long long slot_bytes,
                                                             unsigned long long timeout_ns, const uint4* x, uint4* residual,
                                                             const uint4* weight, uint4* out, int rows, int h8, float eps) {
  sk::pdl_wait_for_previous();
  sk::pdl_launch_dependents();
  __shared__ unsigned long long table[SK_COMM_LAYOUT_MAX_RANKS];
  const Peers p(own, table);
  const u32 seq = next_seq(p, rank);
  uint4* mine = (uint4*)slot_of(p.base[rank], seq, slot_bytes);
  for (int r = blockIdx.x; r < rows; r += gridDim.x)
    for (int c = threadIdx.x; c < h8; c += SK_COMM_THREADS) mine[(size_t)r * h8 + c] = x[(size_t)r * h8 + c];
  if (!barrier<W>(p, rank, seq, timeout_ns)) return;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    float ss = 0.0f;
    for (int c = threadIdx.x; c < h8; c += SK_COMM_THREADS) {
      const size_t i = (size_t)r * h8 + c;
      float acc[8], res[8];
      sum_chunk<W>(p, seq, slot_bytes, i, acc);
      unpack8(residual[i], res);
#pragma unroll
      for (int j = 0; j < 8; j++) acc[j] = __fadd_rn(acc[j], res[j]);
      const uint4 y = pack8(acc);
      residual[i] = y;
      unpack8(y, acc);
#pragma unroll
      for (int j = 0; j < 8; j++) ss = __fmaf_rn(acc[j], acc[j], ss);
    }
    const float inv = rsqrtf(__fadd_rn(__fdiv_rn(block_sum(ss), (float)(h8 * 8)), eps));
    for (int c = threadIdx.x; c < h8; c += SK_COMM_THREADS) {
      const size_t i = (size_t)r * h8 + c;
      float y[8], w[8];
      unpack8(residual[i], y);
      unpack8(weight[c], w);
#pragma unroll
      for (int j = 0; j < 8; j++) y[j] = __fmul_rn(__fmul_rn(y[j], inv), w[j]);
      out[i] = pack8(y);
    }
  }
  finish(p, rank, seq);
}

}  // namespace sk_comm
