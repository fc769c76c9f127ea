/* ops/quantization/nvfp4.c - quantization.nvfp4: tensor table, run, definition. Kernels and their
 * launch contract: ops/quantization/nvfp4.cuh; shared host code: quant_common.c. */
#include <stddef.h>

#include "quant_common.h"

static const sk_tensor_rule tensors[] = {
    {"x", "[M, K]", SK_DT_HALF, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "rows to quantize (caps.dtype)"},
    {"values", "[M, K/2]", SK_DT_U8, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 4, 0, 0, "E2M1 pairs, element 2j in the low nibble"},
    {"scales_swizzled", "[pad(M, 128) * pad(K/16, 4)]", SK_DT_U8, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 4, 0, 0,
     "E4M3 scales, 128x4 swizzled, padding 0"},
    {"scales_rows", "[M, K/16]", SK_DT_U8, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 1, 0, 0, "E4M3 scales, row-major"},
    {"global_scale", "[1]", SK_DT_FP32, SK_TENSOR_INOUT, SK_TENSOR_REQUIRED, 4, 0, 0,
     "input (GIVEN) or output (COMPUTED: 448*6/amax(x))"},
};
static const sk_symbol_rule symbols[] = {{"M", "1", "MAX_M"}};
static const sk_op_entry entries[] = {{"quantize", tensors, 5, symbols, 1}};

static sk_status check(void *caps) { return quant_check_caps(QUANT_NVFP4, caps); }
static sk_status select_kernels(sk_plan *p) { return quant_select(QUANT_NVFP4, p); }

static sk_status run(const sk_binding *b, void *stream) {
  const sk_plan *p = b->plan;
  const quant_plan_state *st = SK_PLAN_STATE(p, quant_plan_state);
  const quant_bound *q = SK_BINDING_STATE(b, quant_bound);
  const void *x = b->data[QT_X];
  void *values = b->data[QT_VALUES], *sw = b->data[QT_SCALES_SWIZZLED], *rows = b->data[QT_SCALES_ROWS],
       *gs = b->data[QT_GLOBAL_SCALE], *partials = st->amax_region >= 0 ? b->scratch[st->amax_region] : NULL;
  int k = (int)SK_PLAN_CAPS(p, sk_quant_caps)->k, ld = k, m = q->m, np = q->partials;
  const sk_dim3 block = {QUANT_THREADS, 1, 1};
  if (np) {
    void *aargs[] = {(void *)&x, &ld, &m, &k, &partials};
    SK_TRY(sk_kernel_launch_ex(sk_plan_k(p, QK_AMAX_PARTIALS), (sk_dim3){(unsigned)np, 1, 1}, block, 0, stream, aargs,
                               SK_LAUNCH_OVERLAP_PREVIOUS));
  }
  void *args[] = {(void *)&x, &ld, &m, &k, &values, &sw, &rows, &gs, &partials, &np};
  return sk_kernel_launch_ex(sk_plan_k(p, np ? QK_ROWS_PARTIALS : QK_ROWS_GIVEN), q->grid, block, 0, stream, args,
                             SK_LAUNCH_OVERLAP_PREVIOUS);
}

const sk_op_def sk_op_quantization_nvfp4 =
    QUANT_OP_DEF("quantization.nvfp4", "BF16/FP16 rows -> NVFP4 (E2M1 + E4M3 per 16 + fp32 global scale), swizzled or row-major scales", entries, check, select_kernels, run);
