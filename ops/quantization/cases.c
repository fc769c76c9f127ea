/* ops/quantization/cases.c - the harness's case tables for quantization.nvfp4 and
 * quantization.mxfp8 (tests/harness/harness.h): shapes over M, K, dtypes, scale layouts,
 * global-scale modes, paths and input distributions (normal with outliers, the whole finite
 * range, NaN/Inf/zero specials), given global scales at the extremes, and the bench shapes.
 * Every output must equal the CPU reference bit for bit. */
#include <math.h>
#include <string.h>

#include "harness/harness.h"
#include "sparkinfer/quantization.h"

enum { P_DATA, P_GS_FIXED };
enum { DATA_NORMAL, DATA_WIDE, DATA_SPECIALS };

typedef struct qspec {
  int nvfp4;
  sk_dtype dtype;
  int64_t m, k;
  sk_scale_layout scales;
  sk_global_scale_mode gs;
  int data;
  sk_path path;
  int gs_fixed;
  float gs_value;
  unsigned flags;
} qspec;

static const int64_t test_ms[] = {1, 2, 3, 16, 127, 128, 129, 1000, 4096};
static const int64_t test_ks[] = {64, 2048, 4096, 7168};
static const float extreme_gs[] = {0.0f, -0.0f, -3.0f, 1e-30f, 5e-39f, 0x1p-140f, 1.0f, 1e30f, 1e38f,
                                   0x1.fffffep127f, INFINITY, -INFINITY, NAN};
static const int64_t bench_ms[] = {1, 16, 128, 4096, 16384};
static const int64_t bench_ks[] = {2048, 4096, 7168};
#define N_SHAPES (sizeof test_ms / sizeof test_ms[0] * sizeof test_ks / sizeof test_ks[0])
#define N_EXTREME (sizeof extreme_gs / sizeof extreme_gs[0] * 3)
#define N_BENCH (sizeof bench_ms / sizeof bench_ms[0] * sizeof bench_ks / sizeof bench_ks[0])

/* Case i of one quantizer: the shape grid (every combination varies dtype, layout, global-scale
 * mode, distribution and path with i), the extremes of M and K, then (nvfp4) the extreme given
 * global scales, then the bench shapes. */
static size_t count(int nvfp4) { return N_SHAPES + (nvfp4 ? 3 : 2) + (nvfp4 ? N_EXTREME : 0) + N_BENCH; }

static qspec spec_of(int nvfp4, size_t i) {
  qspec s = {nvfp4, SK_DTYPE_BF16, 1, 64, SK_SCALES_SWIZZLED, SK_GLOBAL_SCALE_GIVEN, DATA_NORMAL, SK_PATH_AUTO, 0, 0,
             SKH_TEST};
  if (i < N_SHAPES) {
    const size_t nk = sizeof test_ks / sizeof test_ks[0];
    s.m = test_ms[i / nk];
    s.k = test_ks[i % nk];
    s.dtype = i % 5 == 4 ? SK_DTYPE_FP16 : SK_DTYPE_BF16;
    s.scales = (sk_scale_layout)(1 + i % 3);
    s.gs = nvfp4 ? (sk_global_scale_mode)(i % 2) : SK_GLOBAL_SCALE_GIVEN;
    s.data = (int)(i % 3);
    s.path = i % 4 == 3 ? SK_PATH_PORTABLE : SK_PATH_AUTO;
    if (i % 7) s.flags = SKH_GPU; /* the CPU suite takes every seventh shape */
    return s;
  }
  i -= N_SHAPES;
  const size_t nbig = nvfp4 ? 3 : 2;
  if (i < nbig) {
    static const qspec big4[3] = {
        {1, SK_DTYPE_BF16, 16384, 2048, SK_SCALES_BOTH, SK_GLOBAL_SCALE_COMPUTED, DATA_SPECIALS, SK_PATH_AUTO, 0, 0, SKH_GPU},
        {1, SK_DTYPE_BF16, 1000, 16384, SK_SCALES_BOTH, SK_GLOBAL_SCALE_GIVEN, DATA_NORMAL, SK_PATH_AUTO, 0, 0, SKH_GPU},
        {1, SK_DTYPE_FP16, 16384, 4096, SK_SCALES_SWIZZLED, SK_GLOBAL_SCALE_COMPUTED, DATA_WIDE, SK_PATH_AUTO, 0, 0, SKH_GPU}};
    static const qspec big8[2] = {
        {0, SK_DTYPE_BF16, 16384, 2048, SK_SCALES_BOTH, SK_GLOBAL_SCALE_GIVEN, DATA_SPECIALS, SK_PATH_AUTO, 0, 0, SKH_GPU},
        {0, SK_DTYPE_FP16, 1000, 16384, SK_SCALES_BOTH, SK_GLOBAL_SCALE_GIVEN, DATA_WIDE, SK_PATH_AUTO, 0, 0, SKH_GPU}};
    return nvfp4 ? big4[i] : big8[i];
  }
  i -= nbig;
  if (nvfp4 && i < N_EXTREME) {
    s.gs_fixed = 1;
    s.gs_value = extreme_gs[i / 3];
    s.data = (int)(i % 3);
    s.dtype = i % 2 ? SK_DTYPE_FP16 : SK_DTYPE_BF16;
    s.m = i % 3 ? 129 : 4096;
    s.k = i % 3 ? 2048 : 64;
    s.scales = SK_SCALES_BOTH;
    s.path = i % 4 == 3 ? SK_PATH_PORTABLE : SK_PATH_AUTO;
    s.flags = SKH_GPU | SKH_NO_GRAPH;
    return s;
  }
  if (nvfp4) i -= N_EXTREME;
  const size_t nk = sizeof bench_ks / sizeof bench_ks[0];
  s.m = bench_ms[i / nk];
  s.k = bench_ks[i % nk];
  s.flags = SKH_BENCH;
  return s;
}

static void get(int nvfp4, size_t i, skh_case *c) {
  const qspec s = spec_of(nvfp4, i);
  static const char *const layouts[] = {"", "swizzled", "rows", "both"};
  memset(c, 0, sizeof *c);
  sk_quant_caps caps = SK_QUANT_CAPS_INIT;
  caps.dtype = s.dtype;
  caps.k = s.k;
  caps.max_m = s.m;
  caps.scales = s.scales;
  caps.global_scale = s.gs;
  caps.path = s.path;
  SKH_SET_CAPS(c, caps);
  skh_case_sym(c, "M", s.m);
  c->param[P_DATA] = s.data;
  c->param[P_GS_FIXED] = s.gs_fixed;
  c->dparam[0] = s.gs_value;
  c->flags = s.flags;
  if (s.gs_fixed)
    snprintf(c->name, sizeof c->name, "%s m=%lld k=%lld given gs=%g data=%d", s.dtype == SK_DTYPE_BF16 ? "bf16" : "fp16",
             (long long)s.m, (long long)s.k, (double)s.gs_value, s.data);
  else
    snprintf(c->name, sizeof c->name, "%s m=%lld k=%lld %s%s%s data=%d", s.dtype == SK_DTYPE_BF16 ? "bf16" : "fp16",
             (long long)s.m, (long long)s.k, layouts[s.scales],
             nvfp4 ? (s.gs == SK_GLOBAL_SCALE_GIVEN ? " gs=given" : " gs=computed") : "",
             s.path == SK_PATH_PORTABLE ? " portable" : "", s.data);
}

static const sk_quant_caps *caps_of(const skh_case *c) { return (const sk_quant_caps *)(const void *)c->caps; }

static void fill(const skh_case *c, skh_tensor *t, size_t n, skref_rng *rng) {
  const sk_quant_caps *caps = caps_of(c);
  const skref_dtype dt = caps->dtype == SK_DTYPE_BF16 ? SKREF_BF16 : SKREF_FP16;
  uint16_t *x = t[0].host;
  const size_t elems = skh_numel(&t[0]);
  if (c->param[P_DATA] == DATA_WIDE) skref_fill_wide_range(rng, x, elems, dt);
  else skref_fill_normal(rng, x, elems, dt, 1.0f, 0.001, 1000.0f);
  if (c->param[P_DATA] == DATA_SPECIALS) skref_sprinkle_specials(rng, x, elems, dt, 0.01);
  if (n > 4 && t[4].present) { /* nvfp4 global scale: the given one, or poison the op overwrites */
    float gs = c->param[P_GS_FIXED] ? (float)c->dparam[0] : (float)(448.0 * 6.0 / (1.0 + 10.0 * skref_rng_uniform(rng)));
    if (caps->global_scale == SK_GLOBAL_SCALE_COMPUTED) gs = NAN;
    memcpy(t[4].host, &gs, 4);
  }
}

static void reference(const skh_case *c, skh_tensor *t, size_t n) {
  const sk_quant_caps *caps = caps_of(c);
  const skref_dtype dt = caps->dtype == SK_DTYPE_BF16 ? SKREF_BF16 : SKREF_FP16;
  const size_t m = (size_t)t[0].shape[0], k = (size_t)caps->k;
  uint8_t *sw = t[2].present ? t[2].expect : NULL, *rows = t[3].present ? t[3].expect : NULL;
  if (n > 4) {
    float given, out = 0;
    memcpy(&given, t[4].host, 4);
    skref_quantize_nvfp4(t[0].host, dt, m, k, k, caps->global_scale == SK_GLOBAL_SCALE_GIVEN ? &given : NULL, &out,
                         t[1].expect, sw, rows);
    if (caps->global_scale == SK_GLOBAL_SCALE_GIVEN) out = given; /* the op leaves the input as it is */
    memcpy(t[4].expect, &out, 4);
  } else {
    skref_quantize_mxfp8(t[0].host, dt, m, k, k, t[1].expect, sw, rows);
  }
}

static void cost(const skh_case *c, const skh_tensor *t, size_t n, double *bytes, double *flops, const char **metric) {
  (void)c;
  *bytes = 0;
  for (size_t i = 0; i < n && i < 4; i++)
    if (t[i].present) *bytes += (double)t[i].bytes;
  *flops = 0;
  *metric = "GB/s";
}

/* variant: 1 nvfp4, 0 mxfp8 */
const skh_op skh_op_quantization_nvfp4 = {"quantization.nvfp4", count, get, NULL, fill, reference, NULL, cost, 1};
const skh_op skh_op_quantization_mxfp8 = {"quantization.mxfp8", count, get, NULL, fill, reference, NULL, cost, 0};
