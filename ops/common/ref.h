/* skref: CPU reference implementations shared by every sparkinfer test (C11, no GPU).
 *
 * Number formats (formats.c):
 *   E2M1  (FP4, OCP MX "FP4"): 1 sign, 2 exponent (bias 1), 1 mantissa bit; no Inf/NaN;
 *         magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
 *   E4M3  (FP8 "e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no Inf; NaN = 0x7F/0xFF;
 *         max normal 448, min subnormal 2^-9.
 *   E8M0  (UE8M0, OCP MX scale): unsigned exponent byte, value 2^(b-127); b = 255 is NaN.
 *   BF16 / FP16: IEEE-style 16-bit floats, handled as raw uint16_t bits.
 *
 * Encoders mirror the PTX `cvt.rn.satfinite` semantics bit for bit (see ops/quantization/quantization.md):
 * round to nearest, ties to even; finite or infinite magnitudes past the largest finite code
 * saturate to it with the input's sign; zero results keep the input's sign (-0 stays -0);
 * NaN gives E4M3 0x7F and E2M1 0x7 (+6, PTX: "NaN results are converted to positive MAX_NORM").
 *
 * Scale layouts (quant.c): row-major [M, cols] and the 128x4 swizzled MMA layout
 * ([ceil(M/128), ceil(cols/4), 32, 4, 4] bytes) used by CUTLASS / cuBLASLt / FlashInfer.
 *
 * Quantizers (quant.c) reproduce the device kernels in ops/quantization/ bit for bit:
 * every fp32 operation is done in fp32 in the kernel's order (this file must be compiled
 * without -ffast-math and without x87 excess precision, which is the default on x86-64 and
 * aarch64). Dequantizers compute in double for later GEMM tests.
 *
 * Test helpers (formats.c): a seeded xoshiro256** RNG and fillers for random BF16/FP16 data with
 * outliers and special values. */
#ifndef SKREF_H
#define SKREF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- raw float bits --------------------------------------------------------------------- */
uint32_t skref_f32_bits(float f);
float skref_f32_from_bits(uint32_t u);

/* ---- BF16 / FP16 ------------------------------------------------------------------------- */
/* Exact widening. NaN payloads are kept (bf16) or widened (fp16). */
float skref_bf16_to_float(uint16_t bits);
float skref_fp16_to_float(uint16_t bits);
/* Round to nearest even. Overflow gives +-Inf (IEEE, not saturating); NaN gives 0x7FFF (the
 * canonical NaN that the GPU's cvt.rn.{bf16,f16}.f32 produces, sign dropped). */
uint16_t skref_float_to_bf16(float f);
uint16_t skref_float_to_fp16(float f);

typedef enum skref_dtype { SKREF_BF16 = 0, SKREF_FP16 = 1 } skref_dtype;
float skref_half_to_float(uint16_t bits, skref_dtype dtype);
uint16_t skref_float_to_half(float f, skref_dtype dtype);

/* ---- E2M1 (one code in the low 4 bits) ---------------------------------------------------- */
double skref_e2m1_decode(uint8_t nibble); /* bits above the low 4 are ignored */
uint8_t skref_e2m1_encode(float f);       /* RNE, satfinite to +-6, NaN -> 0x7, -0 kept */
/* Two values into one byte: `even` (element 2j) in bits 3..0, `odd` (element 2j+1) in 7..4. */
uint8_t skref_e2m1_pack2(float even, float odd);

/* ---- E4M3 --------------------------------------------------------------------------------- */
double skref_e4m3_decode(uint8_t code); /* 0x7F / 0xFF decode to NaN */
uint8_t skref_e4m3_encode(float f);     /* RNE, satfinite to +-448, NaN -> 0x7F, -0 kept */

/* ---- E8M0 --------------------------------------------------------------------------------- */
double skref_e8m0_decode(uint8_t code); /* 2^(code-127); 0xFF decodes to NaN */
/* MX scale byte for a non-negative fp32 `s` (= amax * fp32(1/448)): the exponent of the least
 * power of two >= s (integer ceiling on the bits, as upstream does). s = +Inf gives 0xFF;
 * s = 0 gives 0 (the quantizer replaces an all-zero block's byte with 127). */
uint8_t skref_e8m0_ceil_pow2(float s);
/* 1 / 2^(code-127) as fp32, exact for code 0..254; 0 for 0xFF (a NaN scale). */
float skref_e8m0_reciprocal(uint8_t code);

/* ---- 128x4 swizzled scale layout ------------------------------------------------------------
 * Byte offset of scale (row m, scale column kcol) in a buffer of [ceil(M/128), num_k_tiles, 32,
 * 4, 4] with num_k_tiles = ceil(num_scale_cols / 4):
 *   (m/128)*num_k_tiles*512 + (kcol/4)*512 + (m%32)*16 + ((m%128)/32)*4 + kcol%4. */
size_t skref_swizzled_scale_offset(size_t m, size_t kcol, size_t num_k_tiles);
size_t skref_swizzled_k_tiles(size_t num_scale_cols); /* ceil(num_scale_cols / 4) */
/* Bytes of the swizzled buffer: ceil(M/128)*128 * ceil(num_scale_cols/4)*4. */
size_t skref_swizzled_scale_bytes(size_t M, size_t num_scale_cols);

/* ---- NVFP4 quantizer ------------------------------------------------------------------------
 * x: [M, K] rows of BF16/FP16 bits with row stride ld_x (elements, >= K); K % 16 == 0, M >= 1.
 * Global scale: if global_scale_in is non-NULL it is used as is (must be finite and > 0 for
 * meaningful output; 0 gives all-zero output); else it is computed with
 * skref_nvfp4_global_scale(). It is stored to *global_scale_out when that is non-NULL.
 * Outputs (each may be NULL except values):
 *   values           [M, K/2]  packed E2M1, element 2j in the low nibble of byte j
 *   scales_swizzled  skref_swizzled_scale_bytes(M, K/16) bytes, padding written as 0
 *   scales_rows      [M, K/16] row-major E4M3 block scales
 * Per block of 16 (see ops/quantization/quantization.md for the rationale of each step):
 *   amax   = max |x| over the non-NaN elements (0 if none)
 *   sf     = min(gs * (amax * SKREF_NVFP4_RCP6), 448)      (fp32, in this order)
 *   scale  = e4m3(sf)
 *   eff    = scale == 0 ? 0 : 1 / (e4m3_value(scale) * (1 / gs))
 *   code_i = eff == 0 ? 0 : e2m1(x_i * eff), with -0 (0x8) replaced by +0
 * gs == 0 makes every scale and value 0. Returns 0, or -1 on invalid arguments. */
#define SKREF_NVFP4_BLOCK 16
extern const float SKREF_NVFP4_RCP6; /* 0x3E2AAAAB: upstream's rcp.approx(6), see quant.c */
int skref_quantize_nvfp4(const uint16_t *x, skref_dtype dtype, size_t M, size_t K, size_t ld_x,
                         const float *global_scale_in, float *global_scale_out, uint8_t *values,
                         uint8_t *scales_swizzled, uint8_t *scales_rows);
/* Tensor amax over finite elements only (NaN and +-Inf skipped), then
 * gs = amax > 0 ? min(2688 / amax, FLT_MAX) : 1   (2688 = 448 * 6, one fp32 division). */
float skref_nvfp4_tensor_amax(const uint16_t *x, skref_dtype dtype, size_t M, size_t K,
                              size_t ld_x);
float skref_nvfp4_global_scale_from_amax(float amax);
float skref_nvfp4_global_scale(const uint16_t *x, skref_dtype dtype, size_t M, size_t K,
                               size_t ld_x);
/* One block of 16 values (fp32, already widened): writes 8 packed bytes, returns the scale. */
uint8_t skref_nvfp4_quantize_block(const float x[16], float global_scale, uint8_t packed[8]);
/* out[m*K + k] = e2m1(code) * e4m3(scale) / gs (double). Scales from the swizzled buffer if
 * `swizzled`, else row-major [M, K/16]. */
void skref_dequantize_nvfp4(const uint8_t *values, const uint8_t *scales, int swizzled, size_t M,
                            size_t K, float global_scale, double *out);

/* ---- MXFP8 quantizer ------------------------------------------------------------------------
 * x: [M, K] with row stride ld_x, K % 32 == 0. Outputs (values required, scales may be NULL):
 *   values           [M, K]    E4M3
 *   scales_swizzled  skref_swizzled_scale_bytes(M, K/32) bytes, padding written as 0
 *   scales_rows      [M, K/32] UE8M0
 * Per block of 32:
 *   amax  = max |x| over the non-NaN elements (0 if none)
 *   scale = amax == 0 ? 127 : e8m0_ceil_pow2(amax * fp32(1/448))     (+Inf amax gives 0xFF)
 *   v_i   = e4m3(x_i * e8m0_reciprocal(scale))                       (exact power-of-2 product)
 * Returns 0, or -1 on invalid arguments. */
#define SKREF_MXFP8_BLOCK 32
extern const float SKREF_MXFP8_INV_E4M3_MAX; /* fp32(1/448) = 0x1.24924ap-9 */
int skref_quantize_mxfp8(const uint16_t *x, skref_dtype dtype, size_t M, size_t K, size_t ld_x,
                         uint8_t *values, uint8_t *scales_swizzled, uint8_t *scales_rows);
uint8_t skref_mxfp8_quantize_block(const float x[32], uint8_t values[32]);
/* out[m*K + k] = e4m3(v) * 2^(scale-127) (double; NaN for NaN codes or a 0xFF scale). */
void skref_dequantize_mxfp8(const uint8_t *values, const uint8_t *scales, int swizzled, size_t M,
                            size_t K, double *out);

/* ---- random numbers ------------------------------------------------------------------------ */
typedef struct skref_rng {
  uint64_t s[4];
  double spare; /* skref_rng_normal's second value of its last pair */
  int has_spare;
} skref_rng;
void skref_rng_seed(skref_rng *rng, uint64_t seed); /* splitmix64 expands the seed */
uint64_t skref_rng_u64(skref_rng *rng);             /* xoshiro256** */
uint32_t skref_rng_u32(skref_rng *rng);
uint64_t skref_rng_below(skref_rng *rng, uint64_t n); /* uniform in [0, n), n > 0 */
double skref_rng_uniform(skref_rng *rng);             /* [0, 1) with 53 random bits */
double skref_rng_normal(skref_rng *rng);              /* standard normal (Box-Muller) */
/* A test seed: $SK_SEED if set (decimal or 0x-hex), else derived from the clock and pid.
 * Prints "[seed] <what>: SK_SEED=<seed>" to stderr so any failure can be replayed. */
uint64_t skref_test_seed(const char *what);

/* Fill n values (BF16/FP16 bits) with normal(0, stddev) data; a fraction `outlier_frac` of them
 * is multiplied by `outlier_scale` (values past the format's range round to +-Inf). */
void skref_fill_normal(skref_rng *rng, uint16_t *dst, size_t n, skref_dtype dtype, float stddev,
                       double outlier_frac, float outlier_scale);
/* Values whose magnitudes span the whole finite range of the format (random sign, exponent
 * and mantissa bits, subnormals included; never NaN/Inf). */
void skref_fill_wide_range(skref_rng *rng, uint16_t *dst, size_t n, skref_dtype dtype);
/* Overwrite a fraction `frac` of the n values with specials drawn from: +-0, +-Inf, quiet and
 * signalling NaNs of both signs, +-max finite, +-min subnormal. */
void skref_sprinkle_specials(skref_rng *rng, uint16_t *dst, size_t n, skref_dtype dtype,
                             double frac);

#ifdef __cplusplus
}
#endif
#endif /* SKREF_H */
