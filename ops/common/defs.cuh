// Shared definitions for every sparkinfer kernel: fixed-width types without the C library
// (NVRTC has no <cstdint>) and small attribute macros.
#pragma once

namespace sk {
typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
}  // namespace sk

#define SK_DEVICE __device__ __forceinline__
#define SK_HOST_DEVICE __host__ __device__ __forceinline__

namespace sk {
// The shared-window address of a pointer into shared memory (ld/st.shared, ldmatrix, cp.async).
SK_DEVICE u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
}  // namespace sk
