// Lookup-free E2M1 (FP4) decode of the GEMM kernels (mma_tiled, gemv_decode), written in the
// common subset of C11 and CUDA C++ so that the CPU model of the tiled kernel
// (tests/test_gemm_tiled_model.c) runs this very code and so checks its element map and values.
// The device path uses funnel shifts and one LOP3 per select; the host path the same operations
// in plain C.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define SK_E2M1D_FN __host__ __device__ __forceinline__
#else
#define SK_E2M1D_FN static inline
#endif

SK_E2M1D_FN unsigned sk_rotl32(unsigned x, int n) {
#ifdef __CUDA_ARCH__
  return __funnelshift_l(x, x, n);
#else
  return (x << (n & 31)) | (x >> ((32 - n) & 31));
#endif
}
SK_E2M1D_FN unsigned sk_rotr32(unsigned x, int n) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(x, x, n);
#else
  return (x >> (n & 31)) | (x << ((32 - n) & 31));
#endif
}

// Eight E2M1 codes (nibble i = element i) -> four f16x2 equal to the E2M1 values times 2^-14,
// exactly: p[j] = {element j, element j + 4}. With the magnitude bits (e1 e0 m) at f16 bits 9..11
// and the sign at 15, exponent field e and mantissa MSB m give 2^(e-15) (1 + m/2) for e >= 1 and
// the subnormal (m/2) 2^-14 for e = 0: value * 2^-14 in both cases. The sign must move 3 bits
// further than the magnitude, so r = rotl(w, 3) brings each sign 6 above its magnitude and one
// LOP3 merges them into a word holding every other nibble (fe: even, fo: odd nibbles, whose
// neighbours' bits are free); each pair is then one shift (rotate for j = 3, whose sign wrapped)
// and one mask. 11 integer ops per 8 weights (the old byte-permute LUT took ~20).
SK_E2M1D_FN void sk_e2m1x8_to_f16x2_2m14(unsigned w, unsigned p[4]) {
  const unsigned kKeep = 0x8E008E00u;  // f16 sign and magnitude bits of both halves
  const unsigned r = sk_rotl32(w, 3);
  unsigned fe, fo;  // mask ? w : r, bitwise
#ifdef __CUDA_ARCH__
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(fe) : "r"(w), "r"(r), "n"(0x07070707));
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(fo) : "r"(w), "r"(r), "n"(0x70707070));
#else
  fe = (w & 0x07070707u) | (r & ~0x07070707u);
  fo = (w & 0x70707070u) | (r & ~0x70707070u);
#endif
  p[0] = (fe << 9) & kKeep;
  p[1] = (fo << 5) & kKeep;
  p[2] = (fe << 1) & kKeep;
  p[3] = sk_rotr32(fo, 3) & kKeep;
}
