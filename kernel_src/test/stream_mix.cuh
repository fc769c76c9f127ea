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

}  // namespace sk_test
