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
constexpr int kStreamMixUnroll = 4;  // independent vectors per thread and iteration

struct StreamMixArgs {
  const uint4* in[kStreamMixMaxArrays];
  uint4* out[kStreamMixMaxArrays];
  long long vectors;  // per array
};

// Grid-stride over the arrays; vector i of every input is read once (read-only path) and the XOR
// of them is written as vector i of every output. READS = 0 writes i; WRITES = 0 folds everything
// into one vector per thread of out[0] (a sink of gridDim.x * 256 vectors), so no load is dead.
template <int READS, int WRITES>
__global__ void __launch_bounds__(kStreamMixThreads) stream_mix(StreamMixArgs a) {
  static_assert(READS >= 0 && READS <= kStreamMixMaxArrays && WRITES >= 0 && WRITES <= kStreamMixMaxArrays &&
                    READS + WRITES > 0,
                "0..5 arrays each way");
  const long long step = static_cast<long long>(gridDim.x) * kStreamMixThreads;
  uint4 sink = make_uint4(0u, 0u, 0u, 0u);
  for (long long base = static_cast<long long>(blockIdx.x) * kStreamMixThreads * kStreamMixUnroll + threadIdx.x;
       base < a.vectors; base += step * kStreamMixUnroll) {
    uint4 v[kStreamMixUnroll];
#pragma unroll
    for (int u = 0; u < kStreamMixUnroll; ++u) {
      const long long i = base + u * kStreamMixThreads;
      const sk::u32 tag = static_cast<sk::u32>(i);
      v[u] = READS == 0 ? make_uint4(tag, tag, tag, tag) : make_uint4(0u, 0u, 0u, 0u);
      if (i < a.vectors) {
#pragma unroll
        for (int r = 0; r < READS; ++r) {
          const uint4 w = __ldg(a.in[r] + i);
          v[u].x ^= w.x, v[u].y ^= w.y, v[u].z ^= w.z, v[u].w ^= w.w;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kStreamMixUnroll; ++u) {
      const long long i = base + u * kStreamMixThreads;
      if (i >= a.vectors) continue;
#pragma unroll
      for (int w = 0; w < WRITES; ++w)
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(a.out[w] + i), "r"(v[u].x), "r"(v[u].y),
                     "r"(v[u].z), "r"(v[u].w)
                     : "memory");
      if (WRITES == 0) sink.x ^= v[u].x, sink.y ^= v[u].y, sink.z ^= v[u].z, sink.w ^= v[u].w;
    }
  }
  if (WRITES == 0) a.out[0][static_cast<long long>(blockIdx.x) * kStreamMixThreads + threadIdx.x] = sink;
}

}  // namespace sk_test
