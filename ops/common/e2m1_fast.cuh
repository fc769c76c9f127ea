// Fast exact fp32 -> E2M1 (FP4) encoding for targets without cvt.rn.satfinite.e2m1x2 (sm_90:
// the NVFP4 quantizer's software path). Written in the common subset of C11 and CUDA C++ so that
// the CPU tests include this very code (tests/test_quant_emulation.c checks it against the
// reference encoder over all 2^32 fp32 inputs); the kernels use it through common/numeric.cuh.
//
// Result: the code of float_to_e2m1_sw(q) (RNE, ties to even, satfinite, NaN -> +6 = 0x7) with
// -0 (0x8) stored as +0, i.e. the NVFP4 quantizer's canonical code.
//
// Why it is exact: on a = |q| <= 6 the E2M1 magnitude code is
//   rint(g(a)),  g(a) = min(2a, a + 2, a/2 + 4)
// g is the piecewise linear map of the E2M1 grid {0, .5, 1, 1.5, 2, 3, 4, 6} onto 0..7 (breaks
// at the grid points 2 and 4), so grid midpoints go to half-integers and RNE on g gives the
// even code on ties, which is E2M1's even mantissa. rint is monotone, so
// rint(min(..)) = min(rint(..)), and each line is rounded ONCE by adding 2^23 (ulp 1 in
// [2^23, 2^24)): s_k = m_k * a + (2^23 + c_k), with m_k * a exact (a power of two times a <= 6;
// a subnormal a/2 rounds but cannot move 2^23 + 4). The bits of min(s_k, 2^23 + 7) are
// 0x4B000000 + code (the 7 saturates a > 6, Inf and NaN).
// The sign: q < -0.25 (false for NaN, -0 and every negative that rounds to 0).
// Cost per value on sm_90: 2 FFMA + FADD (|q| folded in), two integer mins, the pack (LEA) and
// the sign (FSETP + add): about 8 instructions, versus ~25 for the compare ladder.
#pragma once

#ifdef __CUDACC__
#define SK_E2M1_FN __host__ __device__ __forceinline__
#else
#define SK_E2M1_FN static inline
#endif

// The three once-rounded lines of |q| as bits (2^23 + rint(line)).
SK_E2M1_FN void sk_e2m1_lines(float q, unsigned* b1, unsigned* b2, unsigned* b3) {
#ifdef __CUDA_ARCH__
  float a, s1, s2, s3;
  asm("abs.f32 %0, %1;" : "=f"(a) : "f"(q));
  asm("fma.rn.f32 %0, %1, 0f40000000, 0f4B000000;" : "=f"(s1) : "f"(a));  // 2a + 2^23
  asm("add.rn.f32 %0, %1, 0f4B000002;" : "=f"(s2) : "f"(a));              // a + 2 + 2^23
  asm("fma.rn.f32 %0, %1, 0f3F000000, 0f4B000004;" : "=f"(s3) : "f"(a));  // a/2 + 4 + 2^23
  *b1 = __float_as_uint(s1), *b2 = __float_as_uint(s2), *b3 = __float_as_uint(s3);
#else
  const float a = __builtin_fabsf(q);
  // a * 2 and a * 0.5 are exact (or, for a subnormal a * 0.5, too small to matter), so the
  // separate multiply and add round like the device's single-rounding fma.
  const float s1 = a * 2.0f + 0x1p23f, s2 = a + (0x1p23f + 2.0f), s3 = a * 0.5f + (0x1p23f + 4.0f);
  __builtin_memcpy(b1, &s1, 4);
  __builtin_memcpy(b2, &s2, 4);
  __builtin_memcpy(b3, &s3, 4);
#endif
}

SK_E2M1_FN unsigned sk_min_u32(unsigned a, unsigned b) { return a < b ? a : b; }

// Bits of 2^23 + the magnitude code (0..7) of q; the bias cancels in sk_pack_e2m1x8_fast.
SK_E2M1_FN unsigned sk_e2m1_biased_magnitude(float q) {
  unsigned b1, b2, b3;
  sk_e2m1_lines(q, &b1, &b2, &b3);
  // Saturation: above 6 (Inf included) every line exceeds 2^23 + 7, and NaN lines are positive
  // NaNs (a >= 0), whose bits are larger still; so the clamp is an integer min with no reliance
  // on how a float min treats (signalling) NaNs.
  return sk_min_u32(sk_min_u32(b1, b2), sk_min_u32(b3, 0x4B000007u));
}

// The same for finite |q| < 7 only, without the clamp (one 3-way integer min): a/2 + 4 < 7.5
// rounds to at most 7, which is also the saturated code of 6 < |q| < 7.
SK_E2M1_FN unsigned sk_e2m1_biased_magnitude_below7(float q) {
  unsigned b1, b2, b3;
  sk_e2m1_lines(q, &b1, &b2, &b3);
  return sk_min_u32(sk_min_u32(b1, b2), b3);
}

// 8 (the E2M1 sign bit) when q encodes as a negative nonzero code, else 0.
SK_E2M1_FN unsigned sk_e2m1_sign_bit(float q) { return q < -0.25f ? 8u : 0u; }

SK_E2M1_FN unsigned sk_float_to_e2m1_fast(float q) {
  return (sk_e2m1_biased_magnitude(q) - 0x4B000000u) | sk_e2m1_sign_bit(q);
}

// Eight values -> 32 bits, q[i] in bits 4i+3..4i. The biased magnitudes are shifted and summed
// (one LEA each) and the sum of the biases, (0x4B000000 + (0x4B000000 << 4)) mod 2^32 =
// 0xFB000000 (the others shift out), is subtracted once: exact modulo 2^32, no carries between
// nibbles since every code is <= 15.
SK_E2M1_FN unsigned sk_pack_e2m1x8_fast(const float q[8]) {
  unsigned acc = 0u - 0xFB000000u;
#ifdef __CUDACC__
#pragma unroll
#endif
  for (int i = 0; i < 8; i++)
    acc += (sk_e2m1_biased_magnitude(q[i]) << (4 * i)) + (sk_e2m1_sign_bit(q[i]) << (4 * i));
  return acc;
}

// ---- the NVFP4 kernel's block fast and middle paths (quantization/nvfp4.cuh) -------------------
// Fast: a block whose amax * eff < 7 (finite, so no NaN, Inf or non-finite eff; eff >= 0):
// every q = x * eff is finite with |q| < 7 and the sign of x (or is +-0). Magnitudes come from
// the unclamped lines, and the eight signs are applied at once from the input's 16-bit sign bits
// (BF16 and FP16 alike) instead of one compare and select per value.
// Middle: amax * eff finite and sign-clear but not below 7 (x finite, eff finite and >= +0):
// every q has the sign of x or is +-0, possibly beyond 6 or +-Inf, so the magnitudes take the
// clamped lines (one more integer min per value) and the signs come the same way.

// Eight magnitude codes, |q[i]| < 7, in bits 4i+2..4i (bit 4i+3 clear).
SK_E2M1_FN unsigned sk_pack_e2m1x8_magnitudes_below7(const float q[8]) {
  unsigned acc = 0u - 0xFB000000u;  // minus the biases, as in sk_pack_e2m1x8_fast
#ifdef __CUDACC__
#pragma unroll
#endif
  for (int i = 0; i < 8; i++) acc += sk_e2m1_biased_magnitude_below7(q[i]) << (4 * i);
  return acc;
}

// The same for any q (the clamped lines: |q| > 6, Inf and NaN give 7): the kernel's middle path,
// blocks whose amax * eff is finite but not below 7 (a saturated block scale), x and eff finite.
SK_E2M1_FN unsigned sk_pack_e2m1x8_magnitudes(const float q[8]) {
  unsigned acc = 0u - 0xFB000000u;
#ifdef __CUDACC__
#pragma unroll
#endif
  for (int i = 0; i < 8; i++) acc += sk_e2m1_biased_magnitude(q[i]) << (4 * i);
  return acc;
}

// PTX prmt.b32 (default mode): result byte k is byte (sel >> 4k) & 7 of {b, a} (a is bytes
// 0..3), or that byte's bit 7 replicated over the byte when (sel >> 4k) & 8.
SK_E2M1_FN unsigned sk_prmt(unsigned a, unsigned b, unsigned sel) {
#ifdef __CUDA_ARCH__
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
#else
  const unsigned long long ab = (unsigned long long)b << 32 | a;
  unsigned d = 0;
  for (int k = 0; k < 4; k++) {
    const unsigned s = (sel >> (4 * k)) & 15u, byte = (unsigned)(ab >> (8 * (s & 7u))) & 0xFFu;
    d |= (s & 8u ? (byte & 0x80u ? 0xFFu : 0u) : byte) << (8 * k);
  }
  return d;
#endif
}

// Eight 16-bit elements in x, y, z, w (element 2j in the low half of word j) -> bit 4i+3 set
// iff element i's sign bit is (other bits: don't care). Four byte permutes and a select: the
// high bytes of elements 0, 2, 1, 3 (and 4, 6, 5, 7), then the even ones' sign replicated over
// the low nibbles and the odd ones' high bytes (sign in bit 7) in the high nibbles.
SK_E2M1_FN unsigned sk_sign_nibbles8(unsigned x, unsigned y, unsigned z, unsigned w) {
  const unsigned h0 = sk_prmt(x, y, 0x7351u), h1 = sk_prmt(z, w, 0x7351u);
  const unsigned even = sk_prmt(h0, h1, 0xDC98u), odd = sk_prmt(h0, h1, 0x7632u);
  return (odd & 0xF0F0F0F0u) | (even & 0x0F0F0F0Fu);
}

// Codes with signs: bit 4i+3 (sign) set where the sign nibble says so and the magnitude is
// nonzero (a value that rounds to 0 is stored as +0). Per nibble, magnitude + 7 sets bit 3 iff
// the magnitude is nonzero, with no carry out of the nibble (7 + 7 < 16). The sign bits are
// added, not or-ed (they are clear in `magnitudes`), so that the compiler can fold the pack's
// bias into the same three-input add.
SK_E2M1_FN unsigned sk_e2m1x8_apply_signs(unsigned magnitudes, unsigned sign_nibbles) {
  return magnitudes + (sign_nibbles & (magnitudes + 0x77777777u) & 0x88888888u);
}

