/* ops/quantization/quant_common.c - host code the two row quantizers share (quant_common.h). */
#include <stdlib.h>
#include <string.h>

#include "quant_common.h"
#include "split.cuh" /* plain C11 as well: the kernels' work split */

const sk_quant_caps quant_caps_defaults = SK_QUANT_CAPS_INIT;

static const char *kind_op(quant_kind kind) { return kind == QUANT_NVFP4 ? "quantization.nvfp4" : "quantization.mxfp8"; }
static int kind_block(quant_kind kind) { return kind == QUANT_NVFP4 ? 16 : 32; }
static const char *kind_source(quant_kind kind) {
  return kind == QUANT_NVFP4 ? "quantization/nvfp4.cuh" : "quantization/mxfp8.cuh";
}

SK_API size_t sk_swizzled_scale_bytes(int64_t m, int64_t scale_cols) {
  if (m < 1 || scale_cols < 1 || m > ((int64_t)1 << 40) || scale_cols > ((int64_t)1 << 30)) return 0;
  return (size_t)(sk_cdiv(m, 128) * 128) * (size_t)(sk_cdiv(scale_cols, 4) * 4);
}

/* sm_89+: cvt.e4m3x2 exists there; nothing older is a target. */

/* Between fields and per kind (the spine checked each field against caps_fields). */
sk_status quant_check_caps(quant_kind kind, sk_quant_caps *c) {
  const char *op = kind_op(kind);
  const int block = kind_block(kind);
  if (c->k % block)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: K = %lld must be a positive multiple of %d", op, (long long)c->k, block);
  if (c->max_m > ((int64_t)1 << 34) / c->k)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: max_m x K = %lld x %lld exceeds 2^34 elements", op,
                        (long long)c->max_m, (long long)c->k);
  if (kind == QUANT_MXFP8 && c->global_scale != SK_GLOBAL_SCALE_GIVEN)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: has no global scale; leave global_scale at SK_GLOBAL_SCALE_GIVEN", op);
  if (c->path == SK_PATH_SM120 && !sk_arch_is_sm120(c->arch))
    return sk_set_error(SK_ERR_UNSUPPORTED, "%s: SK_PATH_SM120 needs sm_120a/sm_121a, the target is %s", op, c->arch);
  return SK_OK;
}

/* The selection. Hardware conversion where the arch has it (bit-identical to software by
 * construction and by tests/test_quant_emulation.c); PORTABLE forces software. Chunks per
 * thread: mxfp8 one unit per CTA (4), nvfp4 two units (8) (quantization.md, the work split);
 * SPARKINFER_QUANT_CHUNKS_PER_THREAD overrides both (bits never change). */
sk_status quant_select(quant_kind kind, sk_plan *p) {
  const sk_quant_caps *c = SK_PLAN_CAPS(p, sk_quant_caps);
  quant_plan_state *st = SK_PLAN_STATE(p, quant_plan_state);
  const char *op = kind_op(kind), *t = c->dtype == SK_DTYPE_BF16 ? "__nv_bfloat16" : "__half";
  const int cvt = c->path == SK_PATH_PORTABLE ? 0 : 1, block = kind_block(kind);
  st->kind = kind;
  st->sm_count = p->props.sm_count;
  st->amax_region = -1;
  int64_t per;
  SK_TRY(sk_tune_int("SPARKINFER_QUANT_CHUNKS_PER_THREAD", kind == QUANT_NVFP4 ? 2 * QUANT_CHUNKS_PER_STEP : QUANT_CHUNKS_PER_STEP,
                     1, 64, &per));
  st->chunks_per_thread = (int)per;
  static const char *const layouts[] = {"", "swizzled", "row_major", "both"};
  char name[160], params[160];
  snprintf(params, sizeof params, "in=%s scales=%s%s cvt=%s", c->dtype == SK_DTYPE_BF16 ? "bf16" : "fp16",
           layouts[c->scales],
           kind == QUANT_MXFP8 ? "" : c->global_scale == SK_GLOBAL_SCALE_GIVEN ? " global_scale=given" : " global_scale=computed",
           cvt ? "hw" : "sw");
  const char *src = kind_source(kind);
  if (kind == QUANT_MXFP8) {
    snprintf(name, sizeof name, "sk::quant::mxfp8_rows<%s, %d, %d>", t, (int)c->scales, cvt);
    SK_TRY(sk_plan_set_kernel(p, QK_ROWS_GIVEN, src, name, params));
  } else if (c->global_scale == SK_GLOBAL_SCALE_GIVEN) {
    snprintf(name, sizeof name, "sk::quant::nvfp4_rows<%s, %d, 0, %d>", t, (int)c->scales, cvt);
    SK_TRY(sk_plan_set_kernel(p, QK_ROWS_GIVEN, src, name, params));
  } else {
    snprintf(name, sizeof name, "sk::quant::nvfp4_rows<%s, %d, 1, %d>", t, (int)c->scales, cvt);
    SK_TRY(sk_plan_set_kernel(p, QK_ROWS_PARTIALS, src, name, params));
    snprintf(name, sizeof name, "sk::quant::nvfp4_amax_partials<%s>", t);
    SK_TRY(sk_plan_set_kernel(p, QK_AMAX_PARTIALS, src, name, params));
    st->amax_region = sk_scratch_add(&p->scratch, QUANT_MAX_PARTIALS * sizeof(float));
    if (st->amax_region < 0) return SK_ERR_INTERNAL;
  }
  (void)op;
  SK_TRY(sk_plan_set_symbol(p, "K", c->k));
  SK_TRY(sk_plan_set_symbol(p, "MAX_M", c->max_m));
  SK_TRY(sk_plan_set_symbol(p, "BLOCK", block));
  const uint32_t x_dtype = sk_dt_of(c->dtype);
  sk_plan_tensor_dtypes(p, 0, QT_X, x_dtype);
  if (!(c->scales & SK_SCALES_SWIZZLED)) sk_plan_tensor_presence(p, 0, QT_SCALES_SWIZZLED, SK_TENSOR_UNUSED);
  if (!(c->scales & SK_SCALES_ROW_MAJOR)) sk_plan_tensor_presence(p, 0, QT_SCALES_ROWS, SK_TENSOR_UNUSED);
  return SK_OK;
}

sk_status quant_bind(sk_binding *b) {
  const quant_plan_state *st = SK_PLAN_STATE(b->plan, quant_plan_state);
  const sk_quant_caps *c = SK_PLAN_CAPS(b->plan, sk_quant_caps);
  quant_bound *q = SK_BINDING_STATE(b, quant_bound);
  const int64_t m = sk_binding_get_symbol(b, "M");
  q->m = (int)m;
  q->grid = quant_rows_grid(m, c->k, kind_block(st->kind), st->chunks_per_thread, st->sm_count);
  if (st->kind == QUANT_NVFP4 && c->global_scale == SK_GLOBAL_SCALE_COMPUTED) {
    /* Two launches (amax partials, then quantize) even at M = 1: one CTA reducing the amax alone
     * serialises the read of x (ops/quantization/nvfp4.cuh). */
    const int64_t sms = st->sm_count > 0 ? st->sm_count : 128;
    const int64_t chunk_blocks = sk_cdiv(m * c->k / 8, QUANT_THREADS);
    const int64_t partials = chunk_blocks < 2 * sms ? chunk_blocks : 2 * sms;
    q->partials = partials < 1 ? 1 : partials > QUANT_MAX_PARTIALS ? QUANT_MAX_PARTIALS : (int)partials;
  }
  return SK_OK;
}


static const char *const dtype_names[] = {"bf16", "fp16"};
static const char *const layout_names[] = {"swizzled", "row_major", "both"};
static const int layout_values[] = {SK_SCALES_SWIZZLED, SK_SCALES_ROW_MAJOR, SK_SCALES_BOTH};
static const char *const gs_names[] = {"given", "computed"};
static const char *const path_names[] = {"auto", "portable", "sm120"};
_Static_assert(SK_DTYPE_FP16 == 1 && SK_GLOBAL_SCALE_COMPUTED == 1 && SK_PATH_SM120 == 2, "enum values are the name indices");
const sk_caps_field quant_caps_fields[QUANT_CAPS_FIELDS] = {
    SK_CAPS_ENUM(sk_quant_caps, dtype, dtype_names, NULL),
    SK_CAPS_INT64(sk_quant_caps, k, 16, (int64_t)1 << 30, true),
    SK_CAPS_INT64(sk_quant_caps, max_m, 1, (int64_t)1 << 34, true),
    SK_CAPS_ENUM(sk_quant_caps, scales, layout_names, layout_values),
    SK_CAPS_ENUM(sk_quant_caps, global_scale, gs_names, NULL),
    SK_CAPS_ENUM(sk_quant_caps, path, path_names, NULL),
};

_Static_assert(QUANT_THREADS == SK_QSPLIT_THREADS && QUANT_CHUNKS_PER_STEP == SK_QSPLIT_PER_STEP,
               "the host grid and the kernels' split agree");

sk_dim3 quant_rows_grid(int64_t m, int64_t k, int block, int chunks_per_thread, int sm_count) {
  const int64_t sms = sm_count > 0 ? sm_count : 128;
  const int64_t per = chunks_per_thread > 0 ? chunks_per_thread : QUANT_CHUNKS_PER_STEP;
  const int bc = block / 8, k_tiles = sk_qsplit_k_tiles((int)(k / 8), bc);
  const int64_t gy = sk_qsplit_grid_y(sk_qsplit_slabs((int)m, bc), k_tiles, per, sms);
  return (sk_dim3){(unsigned)k_tiles, (unsigned)gy, 1};
}
