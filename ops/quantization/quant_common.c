/* runtime/ops/quantization/quant_common.c - shared host code of the two row quantizers. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "quant_common.h"
#include "split.cuh" /* plain C11 as well: the kernels' work split */

static const char *kind_op(quant_kind kind) { return kind == QUANT_NVFP4 ? "quantization.nvfp4" : "quantization.mxfp8"; }
static int kind_block(quant_kind kind) { return kind == QUANT_NVFP4 ? 16 : 32; }

SK_API size_t sk_swizzled_scale_bytes(int64_t m, int64_t scale_cols) {
  if (m < 1 || scale_cols < 1 || m > ((int64_t)1 << 40) || scale_cols > ((int64_t)1 << 30)) return 0;
  return (size_t)(sk_cdiv(m, 128) * 128) * (size_t)(sk_cdiv(scale_cols, 4) * 4);
}

bool quant_is_supported(quant_kind kind, const char *arch) {
  (void)kind;
  /* Portable path: sm_89+ (cvt.e4m3x2 exists there; software elsewhere would work too, but
   * nothing older is a target). */
  return sk_arch_valid(arch) && sk_arch_number(arch) >= 89;
}

SK_API int sk_nvfp4_is_supported(const char *arch) { return quant_is_supported(QUANT_NVFP4, arch); }
SK_API int sk_mxfp8_is_supported(const char *arch) { return quant_is_supported(QUANT_MXFP8, arch); }

sk_status quant_check_caps(quant_kind kind, const sk_quant_caps *caps, sk_quant_caps *out) {
  const char *op = kind_op(kind);
  int block = kind_block(kind);
  if (!caps) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: caps is NULL", op);
  if (caps->dtype != SK_DTYPE_BF16 && caps->dtype != SK_DTYPE_FP16)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: dtype must be SK_DTYPE_BF16 or SK_DTYPE_FP16", op);
  if (caps->k < block || caps->k % block)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: K = %lld must be a positive multiple of %d", op,
                        (long long)caps->k, block);
  if (caps->max_m < 1)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: max_m = %lld must be >= 1", op, (long long)caps->max_m);
  if (caps->k > ((int64_t)1 << 34) || caps->max_m > ((int64_t)1 << 34) / caps->k)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: max_m x K = %lld x %lld exceeds 2^34 elements", op,
                        (long long)caps->max_m, (long long)caps->k);
  if (caps->scales < SK_SCALES_SWIZZLED || caps->scales > SK_SCALES_BOTH)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: scales must be SK_SCALES_SWIZZLED, _ROW_MAJOR or _BOTH", op);
  if (caps->global_scale != SK_GLOBAL_SCALE_GIVEN && caps->global_scale != SK_GLOBAL_SCALE_COMPUTED)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: global_scale must be GIVEN or COMPUTED", op);
  if (kind == QUANT_MXFP8 && caps->global_scale != SK_GLOBAL_SCALE_GIVEN)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: has no global scale; leave global_scale at SK_GLOBAL_SCALE_GIVEN", op);
  if (caps->path < SK_PATH_AUTO || caps->path > SK_PATH_SM120)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: path must be SK_PATH_AUTO, _PORTABLE or _SM120", op);
  *out = *caps;
  return SK_OK;
}

void quant_kernel_names(quant_kind kind, const sk_quant_caps *c, const char *arch, char names[QK_COUNT][160],
                        char params[160]) {
  const char *t = c->dtype == SK_DTYPE_BF16 ? "__nv_bfloat16" : "__half";
  /* Hardware conversion where the arch has it (bit-identical to software by construction and
   * by tests/test_quant_emulation.c); PORTABLE forces software. */
  int cvt = c->path == SK_PATH_PORTABLE ? 0 : 1;
  (void)arch;
  for (int i = 0; i < QK_COUNT; i++) names[i][0] = 0;
  static const char *const layouts[] = {"", "swizzled", "row_major", "both"};
  if (kind == QUANT_MXFP8) {
    snprintf(names[QK_ROWS_GIVEN], 160, "sk::quant::mxfp8_rows<%s, %d, %d>", t, (int)c->scales, cvt);
  } else if (c->global_scale == SK_GLOBAL_SCALE_GIVEN) {
    snprintf(names[QK_ROWS_GIVEN], 160, "sk::quant::nvfp4_rows<%s, %d, 0, %d>", t, (int)c->scales, cvt);
  } else {
    snprintf(names[QK_ROWS_PARTIALS], 160, "sk::quant::nvfp4_rows<%s, %d, 1, %d>", t, (int)c->scales, cvt);
    snprintf(names[QK_AMAX_PARTIALS], 160, "sk::quant::nvfp4_amax_partials<%s>", t);
  }
  snprintf(params, 160, "in=%s scales=%s%s cvt=%s", c->dtype == SK_DTYPE_BF16 ? "bf16" : "fp16", layouts[c->scales],
           kind == QUANT_MXFP8 ? "" : c->global_scale == SK_GLOBAL_SCALE_GIVEN ? " global_scale=given" : " global_scale=computed",
           cvt ? "hw" : "sw");
}

static const char *kind_source(quant_kind kind) {
  return kind == QUANT_NVFP4 ? "quantization/nvfp4.cuh" : "quantization/mxfp8.cuh";
}

sk_status quant_plan_create(quant_kind kind, const sk_quant_caps *caps, sk_quant_plan **out) {
  const char *op = kind_op(kind);
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: plan out-pointer is NULL", op);
  *out = NULL;
  sk_quant_caps c;
  SK_TRY(quant_check_caps(kind, caps, &c));
  sk_quant_plan *p = calloc(1, sizeof *p);
  if (!p) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  p->kind = kind;
  p->op = op;
  p->amax_region = -1;
  sk_status s = sk_op_arch(op, c.arch, p->arch);
  if (s == SK_OK && !quant_is_supported(kind, p->arch))
    s = sk_set_error(SK_ERR_UNSUPPORTED, "%s: arch %s is not supported (needs sm_89 or newer)", op, p->arch);
  if (s == SK_OK && c.path == SK_PATH_SM120 && !sk_arch_is_sm120(p->arch))
    s = sk_set_error(SK_ERR_UNSUPPORTED, "%s: SK_PATH_SM120 needs sm_120a/sm_121a, the target is %s", op, p->arch);
  c.arch = p->arch;
  p->caps = c;
  if (s == SK_OK && sk_device_sm_count(&p->sm_count) != SK_OK) p->sm_count = 0; /* offline plan */
  /* Defaults measured on the H200 (bench/RESULTS.md, eighteenth run; 4, 8, 16, 32 compared):
   * mxfp8 one unit per CTA (4 chunks per thread: 94-96% of copy at M = 16384, K >= 4096), nvfp4
   * two units (8; 16 and 32 were 1-3 points slower, 4 up to 7). The variable overrides both for
   * benchmarks; bits never change. */
  const uint64_t default_per = kind == QUANT_NVFP4 ? 2 * QUANT_CHUNKS_PER_STEP : QUANT_CHUNKS_PER_STEP;
  uint64_t per = default_per;
  if (s == SK_OK) s = sk_env_u64("SPARKINFER_QUANT_CHUNKS_PER_THREAD", default_per, &per);
  if (s == SK_OK && (per < 1 || per > 64))
    s = sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: SPARKINFER_QUANT_CHUNKS_PER_THREAD=%llu: expected 1..64", op,
                     (unsigned long long)per);
  p->chunks_per_thread = (int)per;
  char names[QK_COUNT][160], params[160];
  quant_kernel_names(kind, &c, p->arch, names, params);
  for (int i = 0; s == SK_OK && i < QK_COUNT; i++)
    if (names[i][0]) s = sk_op_resolve(op, kind_source(kind), names[i], params, p->arch, &p->kernels[i]);
  if (s == SK_OK && kind == QUANT_NVFP4 && c.global_scale == SK_GLOBAL_SCALE_COMPUTED) {
    p->amax_region = sk_scratch_add(&p->scratch, QUANT_MAX_PARTIALS * sizeof(float));
    if (p->amax_region < 0) s = SK_ERR_INTERNAL;
  }
  if (s != SK_OK) {
    free(p);
    return s;
  }
  cJSON *j = quant_caps_to_json(&c);
  sk_warmup_note_op(op, j);
  cJSON_Delete(j);
  *out = p;
  return SK_OK;
}

SK_API sk_status sk_quant_scratch_spec(const sk_quant_plan *p, sk_scratch_spec *spec) {
  if (!p || !spec) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "quantization scratch_spec: NULL argument");
  *spec = sk_scratch_spec_of(&p->scratch);
  return SK_OK;
}

SK_API void sk_quant_plan_destroy(sk_quant_plan *p) { free(p); }

sk_status quant_bind_common(const sk_quant_plan *p, const DLTensor *x, const DLTensor *values,
                            const DLTensor *scales_swizzled, const DLTensor *scales_rows, sk_binding *b,
                            int64_t *m_out) {
  const char *op = p->op;
  const int64_t k = p->caps.k, block = kind_block(p->kind);
  sk_tensor_spec xs = {"x", p->caps.dtype == SK_DTYPE_BF16 ? SK_DL_BF16 : SK_DL_FP16, 2, {-1, k}, 16};
  void *px, *pv, *psw = NULL, *prow = NULL;
  SK_TRY(sk_check_tensor(op, x, &xs, &px));
  const int64_t m = x->shape[0];
  if (m < 1 || m > p->caps.max_m)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s bind: x has %lld rows; the plan takes 1..%lld (max_m)", op,
                        (long long)m, (long long)p->caps.max_m);
  sk_tensor_spec vs = {"values", SK_DL_U8, 2, {m, p->kind == QUANT_NVFP4 ? k / 2 : k}, p->kind == QUANT_NVFP4 ? 4 : 8};
  SK_TRY(sk_check_tensor(op, values, &vs, &pv));
  if (p->caps.scales & SK_SCALES_SWIZZLED) {
    sk_tensor_spec ss = {"scales_swizzled", SK_DL_U8, 1, {(int64_t)sk_swizzled_scale_bytes(m, k / block)}, 4};
    SK_TRY(sk_check_tensor(op, scales_swizzled, &ss, &psw));
  } else if (scales_swizzled) {
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s bind: the plan writes no swizzled scales; pass NULL", op);
  }
  if (p->caps.scales & SK_SCALES_ROW_MAJOR) {
    sk_tensor_spec rs = {"scales_rows", SK_DL_U8, 2, {m, k / block}, 1};
    SK_TRY(sk_check_tensor(op, scales_rows, &rs, &prow));
  } else if (scales_rows) {
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s bind: the plan writes no row-major scales; pass NULL", op);
  }
  sk_binding_init(b, p);
  b->ptr[0] = px;
  b->ptr[1] = pv;
  b->ptr[2] = psw;
  b->ptr[3] = prow;
  b->dim[0] = m;
  const sk_dim3 grid = quant_grid(p, m); /* the rows kernel's: x in dim[2], y in dim[4] */
  b->dim[2] = grid.x;
  b->dim[4] = grid.y;
  *m_out = m;
  return SK_OK;
}

cJSON *quant_caps_to_json(const sk_quant_caps *c) {
  static const char *const layouts[] = {"", "swizzled", "row_major", "both"};
  static const char *const paths[] = {"auto", "portable", "sm120"};
  cJSON *j = cJSON_CreateObject();
  if (!j) return NULL;
  cJSON_AddStringToObject(j, "dtype", c->dtype == SK_DTYPE_BF16 ? "bf16" : "fp16");
  cJSON_AddNumberToObject(j, "k", (double)c->k);
  cJSON_AddNumberToObject(j, "max_m", (double)c->max_m);
  cJSON_AddStringToObject(j, "scales", layouts[c->scales]);
  cJSON_AddStringToObject(j, "global_scale", c->global_scale == SK_GLOBAL_SCALE_GIVEN ? "given" : "computed");
  cJSON_AddStringToObject(j, "path", paths[c->path]);
  return j;
}

/* Integers in caps JSON: whole numbers in [lo, hi]. */
static sk_status json_int(const cJSON *j, const char *field, int64_t lo, int64_t hi, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!cJSON_IsNumber(v)) return sk_set_error(SK_ERR_MANIFEST, "caps.%s: expected a number", field);
  double d = v->valuedouble;
  if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
    return sk_set_error(SK_ERR_MANIFEST, "caps.%s: expected a whole number in [%lld, %lld], got %g", field,
                        (long long)lo, (long long)hi, d);
  *out = (int64_t)d;
  return SK_OK;
}

static sk_status json_enum(const cJSON *j, const char *field, const char *const *names, int n, int def, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!v) { *out = def; return SK_OK; }
  if (cJSON_IsString(v))
    for (int i = 0; i < n; i++)
      if (names[i] && !strcmp(v->valuestring, names[i])) { *out = i; return SK_OK; }
  return sk_set_error(SK_ERR_MANIFEST, "caps.%s: unknown value", field);
}

sk_status quant_caps_from_json(const cJSON *j, sk_quant_caps *c) {
  static const char *const allowed[] = {"dtype", "k", "max_m", "scales", "global_scale", "path", NULL};
  SK_TRY(sk_json_check_fields(j, "caps", allowed));
  memset(c, 0, sizeof *c);
  static const char *const dtypes[] = {"bf16", "fp16"};
  static const char *const layouts[] = {NULL, "swizzled", "row_major", "both"};
  static const char *const gs[] = {"given", "computed"};
  static const char *const paths[] = {"auto", "portable", "sm120"};
  int dt = 0, lay = 1, g = 0, path = 0;
  SK_TRY(json_enum(j, "dtype", dtypes, 2, 0, &dt));
  SK_TRY(json_int(j, "k", 16, (int64_t)1 << 30, &c->k));
  SK_TRY(json_int(j, "max_m", 1, (int64_t)1 << 34, &c->max_m));
  SK_TRY(json_enum(j, "scales", layouts, 4, 1, &lay));
  SK_TRY(json_enum(j, "global_scale", gs, 2, 0, &g));
  SK_TRY(json_enum(j, "path", paths, 3, 0, &path));
  c->dtype = dt ? SK_DTYPE_FP16 : SK_DTYPE_BF16;
  c->scales = (sk_scale_layout)lay;
  c->global_scale = (sk_global_scale_mode)g;
  c->path = (sk_path)path;
  return SK_OK;
}

sk_status quant_build_requests(quant_kind kind, const cJSON *caps_json, const char *arch, sk_request_list *out) {
  sk_quant_caps raw, c;
  SK_TRY(quant_caps_from_json(caps_json, &raw));
  raw.arch = arch;
  if (quant_check_caps(kind, &raw, &c) != SK_OK) return sk_set_error(SK_ERR_MANIFEST, "%s", sk_last_error_message());
  if (c.path == SK_PATH_SM120 && !sk_arch_is_sm120(arch)) return SK_OK; /* nothing for this arch */
  char names[QK_COUNT][160], params[160];
  quant_kernel_names(kind, &c, arch, names, params);
  for (int i = 0; i < QK_COUNT; i++) {
    if (!names[i][0]) continue;
    sk_kernel_request r = {kind_op(kind), kind_source(kind), names[i], params, arch, NULL, 0, 0};
    SK_TRY(sk_request_list_add(out, &r));
  }
  return SK_OK;
}

SK_API sk_status sk_quant_run(const sk_quant_plan *p, const sk_binding *b, void *stream) {
  if (SK_UNLIKELY(!p)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "quantization run: plan is NULL");
  SK_TRY(sk_binding_check(p->op, b, p));
  return p->kind == QUANT_NVFP4 ? quant_nvfp4_run(p, b, stream) : quant_mxfp8_run(p, b, stream);
}


_Static_assert(QUANT_THREADS == SK_QSPLIT_THREADS && QUANT_CHUNKS_PER_STEP == SK_QSPLIT_PER_STEP,
               "the host grid and the kernels' split agree");

sk_dim3 quant_rows_grid(int64_t m, int64_t k, int block, int chunks_per_thread, int sm_count) {
  /* The kernels' work split (ops/quantization/split.cuh): units of 128 rows x one k-tile
   * (4 chunks per thread each, all loaded before any arithmetic), one CTA column per k-tile;
   * large tensors get about chunks_per_thread / 4 units per CTA (fewer CTAs, the per-CTA setup
   * amortised), and every tensor at least min(units, 4 per SM) CTAs (small ones: one unit per
   * CTA, one round trip). */
  const int64_t sms = sm_count > 0 ? sm_count : 128; /* offline plans know no SM count */
  const int64_t per = chunks_per_thread > 0 ? chunks_per_thread : QUANT_CHUNKS_PER_STEP;
  const int bc = block / 8, k_tiles = sk_qsplit_k_tiles((int)(k / 8), bc);
  const int64_t gy = sk_qsplit_grid_y(sk_qsplit_slabs((int)m, bc), k_tiles, per, sms);
  return (sk_dim3){(unsigned)k_tiles, (unsigned)gy, 1};
}

sk_dim3 quant_grid(const sk_quant_plan *p, int64_t m) {
  return quant_rows_grid(m, p->caps.k, kind_block(p->kind), p->chunks_per_thread, p->sm_count);
}
