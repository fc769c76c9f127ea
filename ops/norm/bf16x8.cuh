// 16-byte vectors of 8 bf16 (or 8 fp32 as two 16-byte halves): the unit every lane of the norm
// kernels loads and stores. Pointers must be 16-byte aligned.
#pragma once
#include <cuda_bf16.h>

#include "common/defs.cuh"

namespace sk {

constexpr int kBf16PerVector = 8;

// Read-only-path load (ld.global.nc): only for data nobody writes while the kernel runs.
SK_DEVICE uint4 load_readonly_16B(const void* ptr) { return __ldg(static_cast<const uint4*>(ptr)); }
SK_DEVICE float4 load_readonly_f32x4(const float* ptr) { return __ldg(reinterpret_cast<const float4*>(ptr)); }
// One st.global.v4: a plain uint4 assignment is at times split by ptxas into four 4-byte STGs
// (seen in the mhc finalize kernels), which quadruples the store instructions in flight.
SK_DEVICE void store_16B(void* ptr, uint4 bits) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(bits.x), "r"(bits.y), "r"(bits.z),
               "r"(bits.w)
               : "memory");
}

// The same with the streaming cache operator (st.global.cs: evict first), for outputs no kernel
// of the op reads back and the next ops read much later: run_pre's 4 copies of x, so that x stays
// in L2 for the op's second read (run_pre gains most at mid-sized T). Streaming every mhc store
// instead makes run_post_pre slower.
SK_DEVICE void store_16B_streaming(void* ptr, uint4 bits) {
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(bits.x), "r"(bits.y), "r"(bits.z),
               "r"(bits.w)
               : "memory");
}

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits. Element 2k sits in
// the low half of word k (little endian).
SK_DEVICE void unpack_bf16x8(uint4 bits, float (&out)[8]) {
  const u32 words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = __uint_as_float(words[k] << 16);
    out[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
  }
}

SK_DEVICE u32 pack_bf16x2_rn(float lo, float hi) {
  return static_cast<u32>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<u32>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// fp32 -> bf16, round to nearest even (one rounding per element).
SK_DEVICE uint4 pack_bf16x8_rn(const float (&in)[8]) {
  return make_uint4(pack_bf16x2_rn(in[0], in[1]), pack_bf16x2_rn(in[2], in[3]), pack_bf16x2_rn(in[4], in[5]),
                    pack_bf16x2_rn(in[6], in[7]));
}

SK_DEVICE void load_readonly_bf16x8(const __nv_bfloat16* ptr, float (&out)[8]) {
  unpack_bf16x8(load_readonly_16B(ptr), out);
}

SK_DEVICE void load_readonly_f32x8(const float* ptr, float (&out)[8]) {
  const float4 lo = load_readonly_f32x4(ptr), hi = load_readonly_f32x4(ptr + 4);
  out[0] = lo.x; out[1] = lo.y; out[2] = lo.z; out[3] = lo.w;
  out[4] = hi.x; out[5] = hi.y; out[6] = hi.z; out[7] = hi.w;
}

}  // namespace sk
