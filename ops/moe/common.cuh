// Device helpers shared by the moe kernels: routes and local experts, the E2M1 -> BF16 decode
// of the W4A16 kernels, the NVFP4 activation quantizer (quantization.nvfp4's rounding).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/defs.cuh"
#include "common/numeric.cuh"
#include "moe/e2m1_bf16.cuh"
#include "moe/plan.cuh"
#include "quantization/nvfp4.cuh"  // nvfp4_quantize8, kNvfp4Rcp6

namespace sk {
namespace moe {

SK_DEVICE int padded(int n) { return (n + 127) / 128 * 128; }

SK_DEVICE long long load_id(const sk_moe_params& p, long long r) {
  return p.ids_int64 ? __ldg(reinterpret_cast<const long long*>(p.topk_ids) + r)
                     : (long long)__ldg(reinterpret_cast<const int*>(p.topk_ids) + r);
}

// Local expert of route r, or -1 (skipped); SK_MOE_ERR_* bits into err. Never reads out of bounds.
SK_DEVICE int local_expert(const sk_moe_params& p, long long r, u32& err) {
  const long long id = load_id(p, r);
  if (id < 0 || id >= p.e_global) {
    err |= SK_MOE_ERR_EXPERT_ID;
    return -1;
  }
  if (!p.expert_map) return (int)id;
  const int l = __ldg(p.expert_map + id);
  if (l < -1 || l >= p.e) {
    err |= SK_MOE_ERR_EXPERT_MAP;
    return -1;
  }
  return l;
}

// ---- E2M1 -> BF16 (W4A16): moe/e2m1_bf16.cuh ------------------------------------------------
SK_DEVICE void e2m1x8_to_bf16x2_raw(u32 w, u32 (&p)[4]) { sk_moe_e2m1x8_to_bf16x2_raw(w, p); }

SK_DEVICE u32 bf16x2_mul(u32 a, u32 b) {
  u32 d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Scale multipliers {S, S} with raw * S = code value * block scale * 2^-8, exact in BF16 (the
// epilogue multiplies by 2^8): NVFP4 S = bf16(ue4m3 * 2^118) (<= 448 * 2^118 < 2^127; the
// product of 2^-127 .. 6 * 2^-126 with it is a normal BF16 with <= 6 significant bits);
// MXFP4 S = 2^(code - 9), needing code in [10, 136] (ops/moe/prep.c checks).
SK_DEVICE void nvfp4_scale_s2(u32 two_codes, u32& s0, u32& s1) {
  const u32 h = e4m3x2_to_f16x2<0>(two_codes & 0x7F7Fu);
  const float f0 = __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu))) * 0x1p118f;
  const float f1 = __half2float(__ushort_as_half((unsigned short)(h >> 16))) * 0x1p118f;
  const __nv_bfloat162 b0 = __floats2bfloat162_rn(f0, f0), b1 = __floats2bfloat162_rn(f1, f1);
  s0 = *reinterpret_cast<const u32*>(&b0);
  s1 = *reinterpret_cast<const u32*>(&b1);
}
SK_DEVICE u32 mxfp4_scale_s2(u32 code) { return (code + 118u) * 0x00800080u; }

// ---- NVFP4 activation quantizer (skref_nvfp4_quantize_block's operations) -------------------
SK_DEVICE u32 block_amax_bits(const float* v, int n) {
  u32 a = 0;
  for (int i = 0; i < n; ++i) a = max(a, magnitude_bits_skip_nan(v[i]));
  return a;
}
// E4M3 scale code of a block with amax `amax` under global scale gs.
SK_DEVICE u32 nvfp4_scale_code(float amax, float gs) {
  const float sf = min_f32(mul_rn(gs, mul_rn(amax, quant::kNvfp4Rcp6)), 448.0f);
  return float_to_e4m3_u32<kCvtHardware>(sf);
}
// The factor x -> E2M1 units: 1 / (e4m3(scale) * (1 / gs)), 0 for a zero scale.
SK_DEVICE float nvfp4_eff(u32 scale, float gs_recip) {
  return scale == 0 ? 0.0f : div_rn(1.0f, mul_rn(e4m3_to_float_cvt<kCvtHardware>(u8(scale)), gs_recip));
}
SK_DEVICE float gs_reciprocal(float gs) { return gs != 0.0f ? div_rn(1.0f, gs) : 0.0f; }
// One block of 16 values -> 8 code bytes (two u32) and the scale code.
SK_DEVICE u32 nvfp4_quantize16(const float (&v)[16], float gs, float gs_recip, u32& c0, u32& c1) {
  const u32 scale = nvfp4_scale_code(__uint_as_float(block_amax_bits(v, 16)), gs);
  const float eff = nvfp4_eff(scale, gs_recip);
  float a[8], b[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = v[i], b[i] = v[8 + i];
  c0 = quant::nvfp4_quantize8<kCvtHardware>(a, eff);
  c1 = quant::nvfp4_quantize8<kCvtHardware>(b, eff);
  return scale;
}

SK_DEVICE u32 word_of(const uint4& c, int w) { return w == 0 ? c.x : w == 1 ? c.y : w == 2 ? c.z : c.w; }

// BF16 bits <-> float.
SK_DEVICE float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
SK_DEVICE float bf16_hi(u32 w) { return __uint_as_float(w & 0xFFFF0000u); }
SK_DEVICE u16 to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

}  // namespace moe
}  // namespace sk
