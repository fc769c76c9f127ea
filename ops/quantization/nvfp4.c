/* runtime/ops/quantization/nvfp4.c - quantization.nvfp4: bind, run, registry entry. Kernels and
 * their launch contract: ops/quantization/nvfp4.cuh. */
#include <cjson/cJSON.h>

#include "quant_common.h"

SK_API sk_status sk_nvfp4_plan_create(const sk_quant_caps *caps, sk_quant_plan **plan) {
  return quant_plan_create(QUANT_NVFP4, caps, plan);
}

/* Binding: ptr[0] x, [1] values, [2] swizzled scales, [3] row scales, [4] global scale,
 * [5] amax partials; dim[0] M, [1] launch mode, [2] / [4] grid x / y of the rows kernel,
 * [3] partials. */
enum { MODE_GIVEN = 0, MODE_PARTIALS = 1 };

SK_API sk_status sk_nvfp4_bind(const sk_quant_plan *p, const DLTensor *x, const DLTensor *values,
                               const DLTensor *scales_swizzled, const DLTensor *scales_rows,
                               const DLTensor *global_scale, void *scratch, size_t scratch_bytes, sk_binding *out) {
  if (!p || !out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "quantization.nvfp4 bind: plan or out is NULL");
  if (p->kind != QUANT_NVFP4)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "quantization.nvfp4 bind: the plan is a %s plan", p->op);
  sk_binding b;
  int64_t m;
  SK_TRY(quant_bind_common(p, x, values, scales_swizzled, scales_rows, &b, &m));
  sk_tensor_spec gs = {"global_scale", SK_DL_FP32, 1, {1}, 4};
  SK_TRY(sk_check_tensor(p->op, global_scale, &gs, &b.ptr[4]));
  void *views[8] = {0};
  SK_TRY(sk_scratch_bind(p->op, &p->scratch, scratch, scratch_bytes, views));
  if (p->caps.global_scale == SK_GLOBAL_SCALE_GIVEN) {
    b.dim[1] = MODE_GIVEN;
  } else {
    /* Two launches (amax partials, then quantize) even at M = 1: the one-CTA variant was
     * slower on the H200 (15 us vs 8 us at K = 4096; ops/quantization/nvfp4.cuh). */
    b.dim[1] = MODE_PARTIALS;
    const int64_t sms = p->sm_count > 0 ? p->sm_count : 128; /* offline plans know no SM count */
    const int64_t chunk_blocks = sk_cdiv(m * p->caps.k / 8, QUANT_THREADS);
    int64_t partials = chunk_blocks < 2 * sms ? chunk_blocks : 2 * sms;
    b.dim[3] = partials < 1 ? 1 : partials > QUANT_MAX_PARTIALS ? QUANT_MAX_PARTIALS : partials;
    b.ptr[5] = views[p->amax_region];
  }
  *out = b;
  return SK_OK;
}

sk_status quant_nvfp4_run(const sk_quant_plan *p, const sk_binding *b, void *stream) {
  const void *x = b->ptr[0];
  void *values = b->ptr[1], *sw = b->ptr[2], *rows = b->ptr[3], *gs = b->ptr[4], *partials = b->ptr[5];
  int ld = (int)p->caps.k, m = (int)b->dim[0], k = (int)p->caps.k, np = (int)b->dim[3];
  const sk_dim3 block = {QUANT_THREADS, 1, 1};
  sk_kernel *rows_kernel = p->kernels[b->dim[1] == MODE_GIVEN ? QK_ROWS_GIVEN : QK_ROWS_PARTIALS];
  if (b->dim[1] == MODE_PARTIALS) {
    void *aargs[] = {(void *)&x, &ld, &m, &k, &partials};
    SK_TRY(sk_kernel_launch_ex(p->kernels[QK_AMAX_PARTIALS], (sk_dim3){(unsigned)np, 1, 1}, block, 0, stream, aargs,
                               SK_LAUNCH_OVERLAP_PREVIOUS));
  }
  void *args[] = {(void *)&x, &ld, &m, &k, &values, &sw, &rows, &gs, &partials, &np};
  return sk_kernel_launch_ex(rows_kernel, quant_bound_grid(b), block, 0, stream, args,
                             SK_LAUNCH_OVERLAP_PREVIOUS);
}

static bool nvfp4_supported(const char *arch) { return quant_is_supported(QUANT_NVFP4, arch); }
static sk_status nvfp4_requests(const cJSON *caps, const char *arch, sk_request_list *out) {
  return quant_build_requests(QUANT_NVFP4, caps, arch, out);
}

const sk_op_desc sk_op_desc_quantization_nvfp4 = {
    {"quantization.nvfp4", SK_OP_PLANNED,
     "BF16/FP16 rows -> NVFP4 (E2M1 + E4M3 per 16 + fp32 global scale), swizzled or row-major scales",
     "sm_89+,sm_90a,sm_120a,sm_121a"},
    nvfp4_supported,
    nvfp4_requests,
};
