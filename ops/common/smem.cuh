// Shared-memory loads and stores through 32-bit shared-window addresses (smem_addr).
// Why: NVRTC 13.0 addresses shared memory through 64-bit registers wherever C++ pointers reach it
// (nvcc keeps them 32-bit; no NVRTC option changes it), so every index computation on a
// shared-memory pointer costs 64-bit arithmetic. Kernels that index shared memory heavily keep
// u32 addresses and go through these. Like CUTLASS's shared-memory wrappers they are
// `asm volatile` without a memory clobber: their order among themselves, cp.async, ldmatrix and
// the barriers (__syncthreads / __syncwarp) is kept; do not mix them with C++ accesses to the
// same bytes without a barrier in between.
#pragma once
#include "common/defs.cuh"

namespace sk {

SK_DEVICE uint4 lds_16B(u32 address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(address));
  return v;
}
SK_DEVICE uint2 lds_8B(u32 address) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(address));
  return v;
}
SK_DEVICE float4 lds_f32x4(u32 address) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(address));
  return v;
}
SK_DEVICE float lds_f32(u32 address) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(address));
  return v;
}
SK_DEVICE void sts_16B(u32 address, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(address), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
SK_DEVICE void sts_u32(u32 address, u32 v) { asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(v)); }
SK_DEVICE void sts_f32x2(u32 address, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1,%2};\n" ::"r"(address), "f"(x), "f"(y));
}
SK_DEVICE void sts_f32(u32 address, float v) { asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(address), "f"(v)); }

}  // namespace sk
