// Bandwidth probe for bench_stream: the DRAM rate of a pure streaming kernel with a given number
// of input and output arrays (READS:WRITES, 16-byte vectors). The mhc and quantizer kernels move
// bytes in fixed ratios (run_pre's finalize reads x once and writes it 5 times, post_pre's reads
// 4 streams and writes 1, ...); this kernel gives each ratio its own measured ceiling, to set
// next to the 1:1 copy figure the benchmarks quote.
#pragma once
#include "common/defs.cuh"

namespace sk_test {

constexpr int kStreamMixMaxArrays = 5;
constexpr int kStreamMixThreads = 256;

struct StreamMixArgs {
  const uint4* in[kStreamMixMaxArrays];
  uint4* out[kStreamMixMaxArrays];
  long long vectors;  // per array
};

// Access variants (which instruction forms and orders reach the DRAM's rate), MODE bits:
enum StreamMixMode : int {
  kStreamLoad256B = 1,   // loads ld.global.nc.L2::256B (the L2 fetches 256-byte blocks); else ld.global.nc
  kStreamStoreCs = 2,    // stores st.global.cs (streaming: evict first); else st.global
  kStreamCtaSlabs = 4,   // each CTA walks its own contiguous slab; else grid-stride over the whole arrays
};

template <int MODE>
SK_DEVICE uint4 stream_load(const uint4* p) {
  uint4 v;
  if (MODE & kStreamLoad256B)
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else
    v = __ldg(p);
  return v;
}

template <int MODE>
SK_DEVICE void stream_store(uint4* p, uint4 v) {
  if (MODE & kStreamStoreCs)
    asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// Vector i of every input is read once (read-only path) and the XOR of them is written as vector
// i of every output; UNROLL independent vectors per thread are loaded before any is stored.
// READS = 0 writes i; WRITES = 0 folds everything into one vector per thread of out[0] (a sink of
// gridDim.x * 256 vectors), so no load is dead.
template <int READS, int WRITES, int UNROLL = 4, int MODE = 0>
__global__ void __launch_bounds__(kStreamMixThreads) stream_mix(StreamMixArgs a) {
  static_assert(READS >= 0 && READS <= kStreamMixMaxArrays && WRITES >= 0 && WRITES <= kStreamMixMaxArrays &&
                    READS + WRITES > 0,
                "0..5 arrays each way");
  static_assert(UNROLL >= 1 && UNROLL <= 16 && MODE >= 0 && MODE <= 7, "1..16 vectors, mode bits 0..2");
  const long long per_round = static_cast<long long>(kStreamMixThreads) * UNROLL;
  long long begin, end, step;
  if (MODE & kStreamCtaSlabs) {  // whole rounds per CTA, the last CTA's slab short
    const long long rounds = (a.vectors + per_round - 1) / per_round,
                    rounds_per_cta = (rounds + gridDim.x - 1) / gridDim.x;
    begin = static_cast<long long>(blockIdx.x) * rounds_per_cta * per_round;
    end = begin + rounds_per_cta * per_round < a.vectors ? begin + rounds_per_cta * per_round : a.vectors;
    step = per_round;
  } else {
    begin = static_cast<long long>(blockIdx.x) * per_round;
    end = a.vectors;
    step = per_round * gridDim.x;
  }
  uint4 sink = make_uint4(0u, 0u, 0u, 0u);
  for (long long base = begin + threadIdx.x; base < end; base += step) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long i = base + u * kStreamMixThreads;
      const sk::u32 tag = static_cast<sk::u32>(i);
      v[u] = READS == 0 ? make_uint4(tag, tag, tag, tag) : make_uint4(0u, 0u, 0u, 0u);
      if (i < end) {
#pragma unroll
        for (int r = 0; r < READS; ++r) {
          const uint4 w = stream_load<MODE>(a.in[r] + i);
          v[u].x ^= w.x, v[u].y ^= w.y, v[u].z ^= w.z, v[u].w ^= w.w;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long i = base + u * kStreamMixThreads;
      if (i >= end) continue;
#pragma unroll
      for (int w = 0; w < WRITES; ++w) stream_store<MODE>(a.out[w] + i, v[u]);
      if (WRITES == 0) sink.x ^= v[u].x, sink.y ^= v[u].y, sink.z ^= v[u].z, sink.w ^= v[u].w;
    }
  }
  if (WRITES == 0) a.out[0][static_cast<long long>(blockIdx.x) * kStreamMixThreads + threadIdx.x] = sink;
}

// A load through L2 (not the read-only path: the kernel wrote these bytes), ordered after the
// thread's earlier stores like them (volatile, memory clobber).
SK_DEVICE uint4 reread_l2(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// The DRAM traffic of a one-pass run_post_pre, without its arithmetic: can the bytes a finalize
// re-reads come from L2 instead of DRAM if it reads them soon enough after they were written?
// in[0] is x and in[1..4] the 4 residual streams; out[0..3] the 4 residual_out streams, out[4] y
// (all arrays the same length, as per token x, each stream and y are H elements). Round k of a
// thread reads x and the streams at its vectors of round k and writes residual_out there
// (the mix-back); then it re-reads the residual_out it wrote LAG rounds earlier (ld.global.cg: L2,
// not the incoherent read-only path) and writes y there (the collapse, once the token's projection
// is known). LAG rounds of the whole grid are the window a persistent kernel would keep between
// writing a token group's streams and collapsing them: LAG x 4 x grid x 256 x 16 bytes pending.
// Each thread re-reads only what it wrote itself, so no synchronisation is needed.
template <int LAG>
__global__ void __launch_bounds__(kStreamMixThreads) stream_reread(StreamMixArgs a) {
  static_assert(LAG >= 0 && LAG <= 64, "lag in rounds");
  constexpr int kStreams = 4;
  const long long step = static_cast<long long>(kStreamMixThreads) * gridDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * kStreamMixThreads + threadIdx.x;
  const long long rounds = (a.vectors + step - 1) / step;
  for (long long k = 0; k < rounds + LAG; ++k) {
    const long long i = first + k * step, j = i - static_cast<long long>(LAG) * step;
    const bool mix = k < rounds && i < a.vectors, collapse = k >= LAG && j < a.vectors;
    uint4 streams[kStreams], again[kStreams];
    if (mix) {
      const uint4 x = __ldg(a.in[0] + i);
#pragma unroll
      for (int s = 0; s < kStreams; ++s) {
        streams[s] = __ldg(a.in[1 + s] + i);
        streams[s].x ^= x.x, streams[s].y ^= x.y, streams[s].z ^= x.z, streams[s].w ^= x.w;
      }
    }
    if (LAG > 0 && collapse)
#pragma unroll
      for (int s = 0; s < kStreams; ++s) again[s] = reread_l2(a.out[s] + j);
    if (mix)
#pragma unroll
      for (int s = 0; s < kStreams; ++s) stream_store<0>(a.out[s] + i, streams[s]);
    if (LAG == 0 && collapse)
#pragma unroll
      for (int s = 0; s < kStreams; ++s) again[s] = reread_l2(a.out[s] + j);
    if (collapse) {
      uint4 y = again[0];
#pragma unroll
      for (int s = 1; s < kStreams; ++s) y.x ^= again[s].x, y.y ^= again[s].y, y.z ^= again[s].z, y.w ^= again[s].w;
      stream_store<0>(a.out[kStreams] + j, y);
    }
  }
}

// The same streams moved by the bulk-copy engine (cp.async.bulk, sm_90+: the TMA unit, also on
// SM120): do write-heavy ratios, which plain stores stream slower than read-heavy ones,
// keep that gap when the stores leave shared memory as 16 KiB bulk copies? Each CTA takes whole
// chunks of 1024 vectors (16 KiB per array), grid-stride; the host sizes arrays in whole chunks.
constexpr int kBulkChunkVectors = kStreamMixThreads * 4;
constexpr unsigned kBulkChunkBytes = kBulkChunkVectors * 16;

SK_DEVICE void bulk_store(uint4* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(sk::smem_addr(src)),
               "r"(bytes)
               : "memory");
}
SK_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// At most N committed groups still reading shared memory / still in flight at all.
template <int N>
SK_DEVICE void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N>
SK_DEVICE void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// READS inputs loaded into registers (16-byte __ldg, 4 a thread), their XOR written to one of two
// shared-memory buffers, then one thread stores that buffer to each of the WRITES outputs as a
// 16 KiB bulk copy. A buffer is refilled only after the copies that read it two chunks ago are done
// reading it (wait_group.read 1: the previous chunk's copies may still run).
template <int READS, int WRITES>
__global__ void __launch_bounds__(kStreamMixThreads) stream_bulk_store(StreamMixArgs a) {
  static_assert(READS >= 1 && READS <= kStreamMixMaxArrays && WRITES >= 1 && WRITES <= kStreamMixMaxArrays,
                "1..5 arrays each way");
  __shared__ __align__(128) uint4 buffer[2][kBulkChunkVectors];
  const long long chunks = a.vectors / kBulkChunkVectors;
  int iteration = 0;
  for (long long c = blockIdx.x; c < chunks; c += gridDim.x, ++iteration) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const long long i = c * kBulkChunkVectors + u * kStreamMixThreads + threadIdx.x;
      v[u] = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
      for (int r = 0; r < READS; ++r) {
        const uint4 w = __ldg(a.in[r] + i);
        v[u].x ^= w.x, v[u].y ^= w.y, v[u].z ^= w.z, v[u].w ^= w.w;
      }
    }
    uint4* stage = buffer[iteration & 1];
    if (threadIdx.x == 0) bulk_wait_read<1>();
    __syncthreads();
#pragma unroll
    for (int u = 0; u < 4; ++u) stage[u * kStreamMixThreads + threadIdx.x] = v[u];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> the copy engine's reads
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
      for (int w = 0; w < WRITES; ++w) bulk_store(a.out[w] + c * kBulkChunkVectors, stage, kBulkChunkBytes);
      bulk_commit();
    }
  }
  if (threadIdx.x == 0) bulk_wait_all<0>();
}

// in[0] to each of WRITES outputs with the copy engine both ways: one thread per CTA loads chunks
// into two shared-memory buffers (cp.async.bulk with an mbarrier) and stores each buffer WRITES
// times; the next load into a buffer waits until its stores have read it.
template <int WRITES>
__global__ void __launch_bounds__(32) stream_bulk_copy(StreamMixArgs a) {
  static_assert(WRITES >= 1 && WRITES <= kStreamMixMaxArrays, "1..5 outputs");
  __shared__ __align__(128) uint4 buffer[2][kBulkChunkVectors];
  __shared__ __align__(8) unsigned long long loaded[2];
  if (threadIdx.x != 0) return;
  const long long chunks = a.vectors / kBulkChunkVectors;
  for (int b = 0; b < 2; ++b)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sk::smem_addr(&loaded[b])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto load = [&](int b, long long c) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sk::smem_addr(&loaded[b])),
                 "r"(kBulkChunkBytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            sk::smem_addr(buffer[b])),
        "l"(a.in[0] + c * kBulkChunkVectors), "r"(kBulkChunkBytes), "r"(sk::smem_addr(&loaded[b]))
        : "memory");
  };
  for (int b = 0; b < 2; ++b)
    if (blockIdx.x + b * static_cast<long long>(gridDim.x) < chunks) load(b, blockIdx.x + b * static_cast<long long>(gridDim.x));
  int k = 0;
  for (long long c = blockIdx.x; c < chunks; c += gridDim.x, ++k) {
    const int b = k & 1;
    const unsigned parity = (k >> 1) & 1;
    unsigned done = 0;
    while (!done)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(sk::smem_addr(&loaded[b])), "r"(parity)
          : "memory");
#pragma unroll
    for (int w = 0; w < WRITES; ++w) bulk_store(a.out[w] + c * kBulkChunkVectors, buffer[b], kBulkChunkBytes);
    bulk_commit();
    const long long next = c + 2 * static_cast<long long>(gridDim.x);
    if (next < chunks) {
      bulk_wait_read<0>();
      load(b, next);
    }
  }
  bulk_wait_all<0>();
}

}  // namespace sk_test
