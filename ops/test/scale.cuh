// Test kernels for the runtime spine: tiny, fast to compile, easy to check on the host.
#pragma once
#include "common/defs.cuh"

namespace sk_test {

// y[i] = x[i] * a + b, one element per thread, BLOCK threads per block.
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK) scale(const T* __restrict__ x, T* __restrict__ y, T a, T b,
                                               int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = x[i] * a + b;
}

// An empty kernel for launch-overhead benchmarks.
template <int TAG>
__global__ void empty() {}

}  // namespace sk_test
