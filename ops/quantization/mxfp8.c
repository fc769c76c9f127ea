/* ops/quantization/mxfp8.c - quantization.mxfp8: tensor table, run, definition. Kernels and their
 * launch contract: ops/quantization/mxfp8.cuh; shared host code: quant_common.c. */
#include <stddef.h>

#include "quant_common.h"

static const sk_tensor_rule tensors[] = {
    {"x", "[M, K]", SK_DT_HALF, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "rows to quantize (caps.dtype)"},
    {"values", "[M, K]", SK_DT_U8, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 8, 0, 0, "E4M3 codes"},
    {"scales_swizzled", "[pad(M, 128) * pad(K/32, 4)]", SK_DT_U8, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 4, 0, 0,
     "UE8M0 scales, 128x4 swizzled, padding 0"},
    {"scales_rows", "[M, K/32]", SK_DT_U8, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 1, 0, 0, "UE8M0 scales, row-major"},
};
static const sk_symbol_rule symbols[] = {{"M", "1", "MAX_M"}};
static const sk_op_entry entries[] = {{"quantize", tensors, 4, symbols, 1}};

static sk_status check(void *caps) { return quant_check_caps(QUANT_MXFP8, caps); }
static sk_status select_kernels(sk_plan *p) { return quant_select(QUANT_MXFP8, p); }

static sk_status run(const sk_binding *b, void *stream) {
  const quant_bound *q = SK_BINDING_STATE(b, quant_bound);
  const void *x = b->data[QT_X];
  void *values = b->data[QT_VALUES], *sw = b->data[QT_SCALES_SWIZZLED], *rows = b->data[QT_SCALES_ROWS];
  int k = (int)SK_PLAN_CAPS(b->plan, sk_quant_caps)->k, ld = k, m = q->m;
  void *args[] = {(void *)&x, &ld, &m, &k, &values, &sw, &rows};
  return sk_kernel_launch_ex(sk_plan_k(b->plan, QK_ROWS_GIVEN), q->grid, (sk_dim3){QUANT_THREADS, 1, 1}, 0, stream, args,
                             SK_LAUNCH_OVERLAP_PREVIOUS);
}

const sk_op_def sk_op_quantization_mxfp8 =
    QUANT_OP_DEF("quantization.mxfp8", "BF16/FP16 rows -> MXFP8 (E4M3 + UE8M0 per 32), swizzled and/or row-major scales", entries, check, select_kernels, run);
