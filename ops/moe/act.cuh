// MoE activations in fp32 with a fixed operation order: plain C11 as well as CUDA C++17, so that
// the kernels and the exact NVFP4 trace (ops/moe/ref.c) compute the same bits. Every operation
// is one IEEE fp32 operation, rounded to nearest (device: __fmul_rn & co., which the compiler
// never contracts into FMAs; host C: ISO C11 does not contract either, -ffp-contract=off).
//   silu        (g, u)  -> (g * sigmoid(g)) * u      g <= limit, -limit <= u <= limit (limit +inf: none)
//   swiglu_oai  (g, u)  -> (g * sigmoid(alpha * g)) * (u + beta), same clamps
//   relu2       (h)     -> r * r, r = h < 0 ? 0 : h  (NaN stays NaN)
//   sigmoid(x) = 1 / (1 + exp(-x)); exp: Cody-Waite reduction and a degree-7 Taylor polynomial,
//   within 2 ulp of exp on the finite range (checked in tests/test_moe_ref.c).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_MOE_ACT_FN SK_HOST_DEVICE
#else
#include <string.h>
#define SK_MOE_ACT_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define SK_MOE_FMUL(a, b) __fmul_rn(a, b)
#define SK_MOE_FADD(a, b) __fadd_rn(a, b)
#define SK_MOE_FSUB(a, b) __fsub_rn(a, b)
#define SK_MOE_FDIV(a, b) __fdiv_rn(a, b)
#else
#define SK_MOE_FMUL(a, b) ((float)(a) * (float)(b))
#define SK_MOE_FADD(a, b) ((float)(a) + (float)(b))
#define SK_MOE_FSUB(a, b) ((float)(a) - (float)(b))
#define SK_MOE_FDIV(a, b) ((float)(a) / (float)(b))
#endif

#ifdef __CUDA_ARCH__
#define sk_moe_bits_to_f32(u) __uint_as_float(u)
#else
static inline float sk_moe_bits_to_f32(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#endif

// exp(x) in fp32.
SK_MOE_ACT_FN float sk_moe_expf(float x) {
  if (x != x) return x;
  if (x > 88.75f) return sk_moe_bits_to_f32(0x7F800000u);
  if (x < -104.0f) return 0.0f;
  const float t = SK_MOE_FMUL(x, 1.44269502f);
  const float n = SK_MOE_FSUB(SK_MOE_FADD(t, 12582912.0f), 12582912.0f);  // rint(t), |t| < 2^22
  // n * LN2_HI is exact (LN2_HI has 12 trailing zero bits, |n| <= 151).
  const float r = SK_MOE_FSUB(SK_MOE_FSUB(x, SK_MOE_FMUL(n, 0.693145751953125f)), SK_MOE_FMUL(n, 1.42860677e-6f));
  float p = 1.98412698e-4f;  // 1/5040
  p = SK_MOE_FADD(SK_MOE_FMUL(p, r), 1.38888889e-3f);
  p = SK_MOE_FADD(SK_MOE_FMUL(p, r), 8.33333377e-3f);
  p = SK_MOE_FADD(SK_MOE_FMUL(p, r), 4.16666679e-2f);
  p = SK_MOE_FADD(SK_MOE_FMUL(p, r), 1.66666672e-1f);
  p = SK_MOE_FADD(SK_MOE_FMUL(p, r), 0.5f);
  p = SK_MOE_FADD(SK_MOE_FMUL(p, r), 1.0f);
  p = SK_MOE_FADD(SK_MOE_FMUL(p, r), 1.0f);
  const int ni = (int)n, h = ni / 2;  // 2^n as two normal powers (n in [-150, 128])
  p = SK_MOE_FMUL(p, sk_moe_bits_to_f32((unsigned)(h + 127) << 23));
  return SK_MOE_FMUL(p, sk_moe_bits_to_f32((unsigned)(ni - h + 127) << 23));
}

SK_MOE_ACT_FN float sk_moe_sigmoid(float x) { return SK_MOE_FDIV(1.0f, SK_MOE_FADD(1.0f, sk_moe_expf(-x))); }

SK_MOE_ACT_FN float sk_moe_clamp_gate(float g, float limit) { return g > limit ? limit : g; }
SK_MOE_ACT_FN float sk_moe_clamp_up(float u, float limit) { return u > limit ? limit : u < -limit ? -limit : u; }

// act: SK_MOE_ACT_SILU 0, SK_MOE_ACT_RELU2 1 (u unused), SK_MOE_ACT_SWIGLU_OAI 2.
SK_MOE_ACT_FN float sk_moe_act(int act, float g, float u, float limit, float alpha, float beta) {
  if (act == 1) {
    const float r = g < 0.0f ? 0.0f : g;
    return SK_MOE_FMUL(r, r);
  }
  g = sk_moe_clamp_gate(g, limit);
  u = sk_moe_clamp_up(u, limit);
  if (act == 2) return SK_MOE_FMUL(SK_MOE_FMUL(g, sk_moe_sigmoid(SK_MOE_FMUL(alpha, g))), SK_MOE_FADD(u, beta));
  return SK_MOE_FMUL(SK_MOE_FMUL(g, sk_moe_sigmoid(g)), u);
}
