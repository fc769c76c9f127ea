/* ops/gemm/pack.c - weight packing for the gemm ops (host memory only): K padded to a multiple
 * of 128, scales laid out as the kernels read them. */
#include <string.h>

#include "gemm_host.h"
#include "sparkinfer/quantization.h"

SK_API int64_t sk_gemm_padded_k(int64_t k) { return k <= 0 ? 0 : sk_cdiv(k, 128) * 128; }

/* ---- pack_weight ----------------------------------------------------------------------------- */

SK_API sk_status sk_gemm_packed_bytes(sk_gemm_recipe r, int64_t n, int64_t k, size_t *codes_bytes, size_t *scales_bytes) {
  /* scales_bytes may be NULL for TENSOR_FP8, which has no scales. */
  if (!gemm_recipe_valid(r) || n < 1 || k < 1 || (gemm_recipe_fp4(r) && k % 2) || k % (r == SK_GEMM_NVFP4 ? 16 : r <= SK_GEMM_MXFP8 ? 32 : 1) ||
      !codes_bytes || (!scales_bytes && r != SK_GEMM_TENSOR_FP8) || n > ((int64_t)1 << 31) || k > ((int64_t)1 << 30))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "gemm pack_weight: bad recipe, n, k or output pointers");
  const int64_t kp = sk_gemm_padded_k(k);
  *codes_bytes = (size_t)(n * (gemm_recipe_fp4(r) ? kp / 2 : kp));
  if (scales_bytes)
    *scales_bytes = r == SK_GEMM_TENSOR_FP8 ? 0
                    : r == SK_GEMM_BLOCK_FP8 ? (size_t)(sk_cdiv(n, 128) * (kp / 128)) * 4
                                             : sk_swizzled_scale_bytes(n, kp / gemm_scale_vec(r));
  return SK_OK;
}

static size_t swz_offset(int64_t row, int64_t col, int64_t cols) {
  const int64_t ktiles = sk_cdiv(cols, 4);
  return (size_t)((row / 128) * ktiles * 512 + (col / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + (col % 4));
}

SK_API sk_status sk_gemm_pack_weight(sk_gemm_recipe r, int64_t n, int64_t k, const void *codes, const void *scales,
                                     void *packed_codes, void *packed_scales) {
  size_t cb, sb;
  SK_TRY(sk_gemm_packed_bytes(r, n, k, &cb, &sb));
  if (!codes || !packed_codes || (r != SK_GEMM_TENSOR_FP8 && (!scales || !packed_scales)))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "gemm pack_weight: NULL buffer");
  const int64_t kp = sk_gemm_padded_k(k), rb = gemm_recipe_fp4(r) ? k / 2 : k, rbp = gemm_recipe_fp4(r) ? kp / 2 : kp;
  for (int64_t i = 0; i < n; i++) {
    memcpy((uint8_t *)packed_codes + i * rbp, (const uint8_t *)codes + i * rb, (size_t)rb);
    memset((uint8_t *)packed_codes + i * rbp + rb, 0, (size_t)(rbp - rb));
  }
  if (r == SK_GEMM_TENSOR_FP8) return SK_OK;
  if (r == SK_GEMM_BLOCK_FP8) {
    const int64_t rows = sk_cdiv(n, 128), cols = sk_cdiv(k, 128), colsp = kp / 128;
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < colsp; j++)
        ((float *)packed_scales)[i * colsp + j] = j < cols ? ((const float *)scales)[i * cols + j] : 1.0f;
    return SK_OK;
  }
  const int64_t cols = k / gemm_scale_vec(r), colsp = kp / gemm_scale_vec(r);
  const uint8_t one = r == SK_GEMM_NVFP4 ? 0x38 : 127; /* 1.0 in UE4M3 / UE8M0 */
  memset(packed_scales, one, sb); /* padding rows and columns read as 1.0 (never used) */
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < colsp; j++)
      ((uint8_t *)packed_scales)[swz_offset(i, j, colsp)] =
          j < cols ? ((const uint8_t *)scales)[swz_offset(i, j, cols)] : one;
  return SK_OK;
}

