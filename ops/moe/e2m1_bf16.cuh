// E2M1 (FP4) -> BF16 decode of the W4A16 kernels, in the common subset of C11 and CUDA C++ so
// that tests/test_moe_ref.c checks this very code against the E2M1 table over every code pair.
//
// Eight codes (byte j = elements 2j (low nibble), 2j + 1) -> four bf16x2 p[j] = {elem 2j, elem
// 2j + 1}, each value * 2^-126 exactly: the magnitude bits (e1 e0 m) land on BF16 bits 8..6 (the
// exponent's two low bits and the mantissa's top bit; e = 0 is a BF16 subnormal, m/2 * 2^-126),
// the sign on bit 15. z_j = {low nibble, 0, high nibble, 0} is one byte permute of the nibble
// splits (prmt's sign-replicating selectors give the 0 bytes: the masked bytes' top bits are 0);
// z * (2^6 + 2^12) puts copies of each nibble at +6 and +12 without overlap, and the mask keeps
// bits 6..8 of the first copy and bit 15 (the nibble's sign) of the second. 15 integer ops.
#pragma once
#include "common/e2m1_fast.cuh"  // sk_prmt, SK_E2M1_FN

SK_E2M1_FN void sk_moe_e2m1x8_to_bf16x2_raw(unsigned w, unsigned p[4]) {
  const unsigned lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
  p[0] = (sk_prmt(lo, hi, 0xC480u) * 0x1040u) & 0x81C081C0u;
  p[1] = (sk_prmt(lo, hi, 0xD591u) * 0x1040u) & 0x81C081C0u;
  p[2] = (sk_prmt(lo, hi, 0xE6A2u) * 0x1040u) & 0x81C081C0u;
  p[3] = (sk_prmt(lo, hi, 0xF7B3u) * 0x1040u) & 0x81C081C0u;
}
