/* quantization.nvfp4 / quantization.mxfp8 host side without a GPU: caps validation, offline
 * plans (explicit arch), bind validation (null, dtype, shape, strides, device, alignment,
 * overflow), registry and manifest builders. Device pointers here are fake: bind never
 * dereferences them. */
#include <criterion/criterion.h>

#include "sparkinfer/quantization.h"
#include "testutil.h"

static char *dir;
static void setup(void) {
  dir = tu_tempdir("qops");
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
}
static void teardown(void) { tu_rmrf(dir); free(dir); }

static sk_quant_caps caps_nvfp4(void) {
  sk_quant_caps c = {SK_DTYPE_BF16, 4096, 256, SK_SCALES_BOTH, SK_GLOBAL_SCALE_COMPUTED, SK_PATH_AUTO, "sm_120a"};
  return c;
}

Test(quant_ops, caps_are_validated, .init = setup, .fini = teardown) {
  sk_quant_plan *p = (sk_quant_plan *)0x1;
  cr_assert_eq(sk_nvfp4_plan_create(NULL, &p), SK_ERR_INVALID_ARGUMENT);
  sk_quant_caps c = caps_nvfp4();
  c.k = 4100; /* not a multiple of 16 */
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "multiple of 16"), "%s", sk_last_error_message());
  c = caps_nvfp4();
  c.k = 4096 + 16; /* fine for nvfp4, not for mxfp8 */
  c.global_scale = SK_GLOBAL_SCALE_GIVEN;
  cr_assert_eq(sk_mxfp8_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  c = caps_nvfp4();
  cr_assert_eq(sk_mxfp8_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT, "mxfp8 has no global scale");
  c = caps_nvfp4();
  c.max_m = 0;
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  c.max_m = (int64_t)1 << 40; /* max_m*K overflows the 2^34 element limit */
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  c = caps_nvfp4();
  c.dtype = SK_DTYPE_FP32;
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  c = caps_nvfp4();
  c.scales = (sk_scale_layout)7;
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  c = caps_nvfp4();
  c.arch = "sm_80";
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_UNSUPPORTED);
  c.arch = "sm_90a";
  c.path = SK_PATH_SM120;
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_UNSUPPORTED);
  c.arch = "bogus";
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
}


#define BF16 ((DLDataType){kDLBfloat, 16, 1})
#define U8 ((DLDataType){kDLUInt, 8, 1})
#define F32 ((DLDataType){kDLFloat, 32, 1})

typedef struct bad_bind {
  const char *what;
  DLTensor x, v, s, r, g;
  void *scratch;
  size_t sb;
  const char *needle;
} bad_bind;

Test(quant_ops, offline_plan_binds_and_rejects_bad_tensors, .init = setup, .fini = teardown) {
  sk_quant_caps c = caps_nvfp4();
  sk_quant_plan *p;
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  sk_scratch_spec spec;
  cr_assert_eq(sk_quant_scratch_spec(p, &spec), SK_OK);
  cr_assert_eq(spec.bytes, 4096u + 768u, "1024 fp32 amax partials + slack to a 1024-byte boundary");
  cr_assert_eq(spec.alignment, 256u);
  cr_assert_eq(spec.zero_once, 0, "amax partials are rewritten by every run");
  const int64_t m = 200, k = 4096;
  int64_t xs[2] = {m, k}, vs[2] = {m, k / 2}, ss[1] = {(int64_t)sk_swizzled_scale_bytes(m, k / 16)}, rs[2] = {m, k / 16},
          gs[1] = {1};
  cr_assert_eq(ss[0], 256 * 256, "ceil(200/128)*128 rows x 256 scale columns");
  DLTensor x = tu_fake_device_tensor(0x100000, BF16, 2, xs), v = tu_fake_device_tensor(0x200000, U8, 2, vs), s = tu_fake_device_tensor(0x300000, U8, 1, ss),
           r = tu_fake_device_tensor(0x400000, U8, 2, rs), g = tu_fake_device_tensor(0x500000, F32, 1, gs);
  void *scratch = (void *)0x600000;
  sk_binding b;
  cr_assert_eq(sk_nvfp4_bind(p, &x, &v, &s, &r, &g, scratch, spec.bytes, &b), SK_OK, "%s", sk_last_error_message());
  /* The rows kernel's 2-D grid (ops/quantization/split.cuh): 64 k-tiles of 64 values, and
   * 2 slabs of 128 rows at one unit per CTA (128 units, fewer than 4 CTAs per SM). */
  cr_assert(b.dim[2] == 64 && b.dim[4] == 2, "grid (%lld, %lld)", (long long)b.dim[2], (long long)b.dim[4]);

  /* Each bad input is refused with a status and a message naming the tensor. */
  bad_bind bad[12];
  int nb = 0;
  DLTensor t;
  t = x; t.dtype = F32; bad[nb++] = (bad_bind){"x dtype", t, v, s, r, g, scratch, spec.bytes, "x must be bfloat16"};
  t = x; t.data = NULL; bad[nb++] = (bad_bind){"x null", t, v, s, r, g, scratch, spec.bytes, "NULL data"};
  t = x; t.device.device_type = kDLCPU; bad[nb++] = (bad_bind){"x on cpu", t, v, s, r, g, scratch, spec.bytes, "kDLCUDA"};
  t = x; t.byte_offset = 2; bad[nb++] = (bad_bind){"x misaligned", t, v, s, r, g, scratch, spec.bytes, "aligned"};
  int64_t wrong_k[2] = {m, 4080};
  t = x; t.shape = wrong_k; bad[nb++] = (bad_bind){"x K", t, v, s, r, g, scratch, spec.bytes, "dim 1 must be 4096"};
  int64_t too_many[2] = {257, k};
  t = x; t.shape = too_many; bad[nb++] = (bad_bind){"M > max_m", t, v, s, r, g, scratch, spec.bytes, "max_m"};
  int64_t strides[2] = {8192, 1};
  t = x; t.strides = strides; bad[nb++] = (bad_bind){"x strided", t, v, s, r, g, scratch, spec.bytes, "contiguous"};
  int64_t short_scales[1] = {ss[0] - 4};
  t = s; t.shape = short_scales; bad[nb++] = (bad_bind){"scales short", x, v, t, r, g, scratch, spec.bytes, "scales_swizzled"};
  int64_t wrong_v[2] = {m + 1, k / 2};
  t = v; t.shape = wrong_v; bad[nb++] = (bad_bind){"values M", x, t, s, r, g, scratch, spec.bytes, "values dim 0"};
  bad[nb++] = (bad_bind){"scratch small", x, v, s, r, g, scratch, 100, "scratch"};
  bad[nb++] = (bad_bind){"scratch misaligned", x, v, s, r, g, (void *)0x600010, spec.bytes, "aligned"};
  /* A 256-aligned scratch that is not 1024-aligned is fine: bind skips to the boundary. */
  cr_assert_eq(sk_nvfp4_bind(p, &x, &v, &s, &r, &g, (void *)0x600100, spec.bytes, &b), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(sk_nvfp4_bind(p, &x, &v, &s, &r, &g, (void *)0x600100, spec.bytes - 1, &b), SK_ERR_INVALID_ARGUMENT);
  int64_t neg[2] = {-1, k};
  t = x; t.shape = neg; bad[nb++] = (bad_bind){"negative extent", t, v, s, r, g, scratch, spec.bytes, "negative"};
  for (int i = 0; i < nb; i++) {
    sk_status st = sk_nvfp4_bind(p, &bad[i].x, &bad[i].v, &bad[i].s, &bad[i].r, &bad[i].g, bad[i].scratch, bad[i].sb, &b);
    cr_assert_eq(st, SK_ERR_INVALID_ARGUMENT, "%s: accepted", bad[i].what);
    cr_assert(strstr(sk_last_error_message(), bad[i].needle), "%s: message \"%s\" lacks \"%s\"", bad[i].what,
              sk_last_error_message(), bad[i].needle);
  }
  cr_assert_eq(sk_nvfp4_bind(p, NULL, &v, &s, &r, &g, scratch, spec.bytes, &b), SK_ERR_INVALID_ARGUMENT);
  /* A binding from bind() runs only with its plan; without a GPU run fails with a status. */
  cr_assert_eq(sk_nvfp4_bind(p, &x, &v, &s, &r, &g, scratch, spec.bytes, &b), SK_OK);
  sk_binding forged = b;
  forged.magic = 0;
  cr_assert_eq(sk_quant_run(p, &forged, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_neq(sk_quant_run(p, &b, NULL), SK_OK, "no kernel is loaded without a GPU");
  sk_quant_plan_destroy(p);
}

Test(quant_ops, mxfp8_offline_plan_and_bind, .init = setup, .fini = teardown) {
  sk_quant_caps c = {SK_DTYPE_FP16, 7168, 16, SK_SCALES_ROW_MAJOR, SK_GLOBAL_SCALE_GIVEN, SK_PATH_PORTABLE, "sm_121a"};
  sk_quant_plan *p;
  cr_assert_eq(sk_mxfp8_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  int64_t xs[2] = {3, 7168}, vs[2] = {3, 7168}, rs[2] = {3, 224};
  DLTensor x = tu_fake_device_tensor(0x100000, (DLDataType){kDLFloat, 16, 1}, 2, xs), v = tu_fake_device_tensor(0x200000, U8, 2, vs),
           r = tu_fake_device_tensor(0x300000, U8, 2, rs);
  sk_binding b;
  cr_assert_eq(sk_mxfp8_bind(p, &x, &v, NULL, &r, NULL, 0, &b), SK_OK, "%s", sk_last_error_message());
  /* 56 k-tiles of 128 values; M = 3 is one band, 2 slabs of 16 row-group rows (mxfp8 units). */
  cr_assert(b.dim[2] == 56 && b.dim[4] == 2, "grid (%lld, %lld)", (long long)b.dim[2], (long long)b.dim[4]);
  cr_assert_eq(sk_mxfp8_bind(p, &x, &v, &r, &r, NULL, 0, &b), SK_ERR_INVALID_ARGUMENT, "swizzled scales not in plan");
  sk_quant_plan *np;
  sk_quant_caps nc = caps_nvfp4();
  cr_assert_eq(sk_nvfp4_plan_create(&nc, &np), SK_OK);
  cr_assert_eq(sk_mxfp8_bind(np, &x, &v, NULL, &r, NULL, 0, &b), SK_ERR_INVALID_ARGUMENT, "wrong plan kind");
  sk_quant_plan_destroy(p);
  sk_quant_plan_destroy(np);
}

Test(quant_ops, registry_lists_both_ops) {
  const sk_op_info *ops;
  size_t n;
  cr_assert_eq(sk_list_ops(&ops, &n), SK_OK);
  int found = 0;
  for (size_t i = 0; i < n; i++) found += !strcmp(ops[i].name, "quantization.nvfp4") || !strcmp(ops[i].name, "quantization.mxfp8");
  cr_assert_eq(found, 2);
  int sup;
  cr_assert_eq(sk_op_is_supported("quantization.nvfp4", "sm_120a", &sup), SK_OK);
  cr_assert_eq(sup, 1);
  cr_assert_eq(sk_op_is_supported("quantization.nvfp4", "sm_80", &sup), SK_OK);
  cr_assert_eq(sup, 0);
  cr_assert_eq(sk_op_is_supported("quantization.nope", "sm_120a", &sup), SK_ERR_NOT_FOUND);
  cr_assert_eq(sk_nvfp4_is_supported("sm_121a"), 1);
  cr_assert_eq(sk_mxfp8_is_supported("garbage"), 0);
}

Test(quant_ops, sk_warm_builds_op_entries_and_rejects_bad_caps, .init = setup, .fini = teardown) {
  char m[600], warm[512];
  snprintf(m, sizeof m, "%s/m.json", dir);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":["
                   "{\"op\":\"quantization.nvfp4\",\"caps\":{\"dtype\":\"bf16\",\"k\":4096,\"max_m\":8192,"
                   "\"scales\":\"swizzled\",\"global_scale\":\"computed\"}},"
                   "{\"op\":\"quantization.mxfp8\",\"caps\":{\"k\":7168,\"max_m\":1}}]}");
  char cache[700];
  snprintf(cache, sizeof cache, "%s/c", dir);
  char *argv[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", cache, "--json", "--quiet", NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "kernels"), 3, "nvfp4 computed: 2 kernels, mxfp8: 1; %s", out);
  free(out);
  const char *bad[] = {
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"quantization.nvfp4\",\"caps\":{\"k\":-16,\"max_m\":1}}]}",
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"quantization.nvfp4\",\"caps\":{\"k\":1e300,\"max_m\":1}}]}",
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"quantization.nvfp4\",\"caps\":{\"k\":4100,\"max_m\":1}}]}",
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"quantization.nvfp4\",\"caps\":{\"k\":4096,\"max_m\":\"8\"}}]}",
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"quantization.nvfp4\",\"caps\":{\"k\":4096,\"max_m\":1,\"dtype\":\"f32\"}}]}",
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"quantization.nvfp4\",\"caps\":{\"k\":4096,\"max_m\":1,\"colour\":1}}]}",
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"quantization.mxfp8\",\"caps\":{\"k\":4096,\"max_m\":99999999999}}]}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char bdir[700];
    snprintf(bdir, sizeof bdir, "%s/bad%zu", dir, i);
    tu_write_file(m, bad[i]);
    char *bargv[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", bdir, "--quiet", NULL};
    cr_assert_eq(tu_run(bargv, NULL, NULL), 2, "bad caps %zu accepted", i);
    cr_assert(!tu_exists(bdir), "bad caps %zu: cache dir created", i);
  }
}
