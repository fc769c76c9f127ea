/* runtime/ops/quantization/mxfp8.c - quantization.mxfp8: bind, run, registry entry. Kernels and
 * their launch contract: ops/quantization/mxfp8.cuh. */
#include <cjson/cJSON.h>

#include "quant_common.h"

SK_API sk_status sk_mxfp8_plan_create(const sk_quant_caps *caps, sk_quant_plan **plan) {
  return quant_plan_create(QUANT_MXFP8, caps, plan);
}

/* Binding: ptr[0] x, [1] values, [2] swizzled scales, [3] row scales; dim[0] M, [2] / [4] grid
 * x / y (the same slots as nvfp4's). */
SK_API sk_status sk_mxfp8_bind(const sk_quant_plan *p, const DLTensor *x, const DLTensor *values,
                               const DLTensor *scales_swizzled, const DLTensor *scales_rows, void *scratch,
                               size_t scratch_bytes, sk_binding *out) {
  if (!p || !out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "quantization.mxfp8 bind: plan or out is NULL");
  if (p->kind != QUANT_MXFP8)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "quantization.mxfp8 bind: the plan is a %s plan", p->op);
  (void)scratch;
  (void)scratch_bytes; /* mxfp8 needs none */
  sk_binding b;
  int64_t m;
  SK_TRY(quant_bind_common(p, x, values, scales_swizzled, scales_rows, &b, &m));
  *out = b;
  return SK_OK;
}

sk_status quant_mxfp8_run(const sk_quant_plan *p, const sk_binding *b, void *stream) {
  const void *x = b->ptr[0];
  void *values = b->ptr[1], *sw = b->ptr[2], *rows = b->ptr[3];
  int ld = (int)p->caps.k, m = (int)b->dim[0], k = (int)p->caps.k;
  void *args[] = {(void *)&x, &ld, &m, &k, &values, &sw, &rows};
  return sk_kernel_launch_ex(p->kernels[QK_ROWS_GIVEN], quant_bound_grid(b),
                             (sk_dim3){QUANT_THREADS, 1, 1}, 0, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS);
}

static bool mxfp8_supported(const char *arch) { return quant_is_supported(QUANT_MXFP8, arch); }
static sk_status mxfp8_requests(const cJSON *caps, const char *arch, sk_request_list *out) {
  return quant_build_requests(QUANT_MXFP8, caps, arch, out);
}

const sk_op_desc sk_op_desc_quantization_mxfp8 = {
    {"quantization.mxfp8", SK_OP_PLANNED,
     "BF16/FP16 rows -> MXFP8 (E4M3 + UE8M0 per 32), swizzled and/or row-major scales",
     "sm_89+,sm_90a,sm_120a,sm_121a"},
    mxfp8_supported,
    mxfp8_requests,
};
