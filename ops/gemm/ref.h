// CPU double-precision reference for the GEMM family (ops/gemm/gemm.md).
// Operands are given as codes + scales in the exact device layouts; the reference dequantizes
// them element by element and multiplies in double. Helpers make random quantized operands.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Same numbering as sk::gemm::Recipe in ops/gemm/gemm_common.cuh.
typedef enum {
  SKREF_GEMM_NVFP4 = 0,
  SKREF_GEMM_MXFP4 = 1,
  SKREF_GEMM_MXFP8 = 2,
  SKREF_GEMM_BLOCK_FP8 = 3,
  SKREF_GEMM_TENSOR_FP8 = 4,
} skref_gemm_recipe;

// Same numbering as sk::gemm::OutType.
typedef enum { SKREF_GEMM_OUT_BF16 = 0, SKREF_GEMM_OUT_FP16 = 1, SKREF_GEMM_OUT_FP32 = 2 } skref_gemm_out;

// Which side of the product: block-FP8 scales differ (A: 1x128, B: 128x128).
typedef enum { SKREF_GEMM_A = 0, SKREF_GEMM_B = 1 } skref_gemm_side;

// One quantized operand: rows x k logical elements.
typedef struct {
  skref_gemm_recipe recipe;
  skref_gemm_side side;
  size_t rows, k;
  const uint8_t* codes;  // row-major, k/2 bytes per row (FP4) or k (FP8)
  const void* scales;    // u8 swizzled (nvfp4/mxfp4/mxfp8), float (block_fp8), NULL (tensor_fp8)
} skref_gemm_operand;

const char* skref_gemm_recipe_name(skref_gemm_recipe r);
int skref_gemm_is_fp4(skref_gemm_recipe r);
size_t skref_gemm_scale_vec(skref_gemm_recipe r);  // 16, 32, 32, 128, 0
size_t skref_gemm_code_bytes(skref_gemm_recipe r, size_t rows, size_t k);
// Bytes of the scale array (swizzled: padded to 128 rows x 4 scale columns).
size_t skref_gemm_scale_bytes(skref_gemm_recipe r, skref_gemm_side side, size_t rows, size_t k);
// Byte offset of scale (row, scale column) in the 128x4 swizzled layout.
size_t skref_gemm_swizzled_offset(size_t row, size_t scale_col, size_t k_scales);

// Element (r, kk) of the dequantized operand (without alpha).
double skref_gemm_dequant(const skref_gemm_operand* op, size_t r, size_t kk);
// Whole operand, row-major rows x k.
void skref_gemm_dequant_all(const skref_gemm_operand* op, double* out);

// C[m*N+n] = alpha * sum_k deqA[m,k]*deqB[n,k]; abs_out (optional) = |alpha| * sum |a||b|, for
// error bounds.
void skref_gemm(const skref_gemm_operand* a, const skref_gemm_operand* b, double alpha, double* c,
                double* abs_out);

// Round to the output type (RN-even), returned as double.
double skref_gemm_round_out(skref_gemm_out t, double v);
// Decode one stored output element (u16 bits for bf16/fp16, float for fp32) at index i.
double skref_gemm_load_out(skref_gemm_out t, const void* c, size_t i);
size_t skref_gemm_out_bytes(skref_gemm_out t);
// Tolerance for one output element: FP32 accumulation of K products + final rounding.
double skref_gemm_tolerance(skref_gemm_out t, double ref, double abs_sum, size_t k);

// Deterministic RNG (splitmix64) for tests; seed printed by the caller.
uint64_t skref_gemm_rand_u64(uint64_t* state);
double skref_gemm_rand_uniform(uint64_t* state);  // [0, 1)

// Fill codes (and scales) of a random operand. Scales stay in a range where the device's
// exact dequantization holds (UE8M0 2^-12..2^4, UE4M3 normal codes, fp32 block scales
// 2^-10..2^2 with random mantissas). Padding of the swizzled layout is filled with 1.0.
// codes: skref_gemm_code_bytes; scales: skref_gemm_scale_bytes (NULL for tensor_fp8).
void skref_gemm_random_operand(skref_gemm_recipe r, skref_gemm_side side, size_t rows, size_t k,
                               uint64_t* rng, uint8_t* codes, void* scales);

// MXFP8 activation quantizer (mxfp8_linear): bf16 [rows, k] -> E4M3 codes + swizzled UE8M0.
void skref_gemm_quantize_mxfp8_rows(const uint16_t* x_bf16, size_t rows, size_t k, uint8_t* codes,
                                    uint8_t* scales_swizzled);
// Block-FP8 activation quantizer (block_fp8_linear): bf16 -> E4M3 + fp32 [rows, k/128].
void skref_gemm_quantize_block_fp8_rows(const uint16_t* x_bf16, size_t rows, size_t k,
                                        uint8_t* codes, float* scales);
// Tensor-FP8 activation quantizer (tensor_fp8_linear, dynamic per-tensor scale): bf16
// [rows, k] -> E4M3 codes [rows, k] + one fp32 scale. amax = max |x| over the finite elements
// (NaN and +-Inf skipped); *scale = amax > 0 ? amax / 448 : 1 (fp32, RN); codes =
// E4M3(RN, saturating to +-448, NaN -> 0x7F)(x / *scale) with an IEEE fp32 division. The GEMM's
// alpha must include *scale (alpha = scale_a * scale_b). Device: sk::gemm::act_quant_tensor_fp8.
void skref_gemm_quantize_tensor_fp8(const uint16_t* x_bf16, size_t rows, size_t k, uint8_t* codes,
                                    float* scale);

// pack_weight (ops/gemm/gemm.md s3): pad K up to kp = roundup(k, 128). Input in the device
// layouts with k, output with kp (zero codes, 1.0 scales in the padding).
size_t skref_gemm_padded_k(size_t k);
void skref_gemm_pack_weight(skref_gemm_recipe r, size_t rows, size_t k, const uint8_t* codes,
                            const void* scales, uint8_t* packed_codes, void* packed_scales);

// Temporary decoders until tests/ref/skref.h lands (swap for skref_e2m1_decode, etc.).
double gemm_tmp_e2m1_decode(uint8_t nibble);
double gemm_tmp_e4m3_decode(uint8_t code);
double gemm_tmp_e8m0_decode(uint8_t code);
float gemm_tmp_bf16_to_float(uint16_t h);
uint16_t gemm_tmp_float_to_bf16(float f);
uint8_t gemm_tmp_float_to_e4m3(float f);  // RN-even, saturating to +-448

#ifdef __cplusplus
}
#endif
