/* quantization.nvfp4 / quantization.mxfp8 host side without a GPU, beyond the harness's generic
 * checks (tests/test_ops.c): each caps rule, versioned caps, the registry, manifest builders. */
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
  sk_quant_caps c = SK_QUANT_CAPS_INIT;
  c.k = 4096;
  c.max_m = 256;
  c.scales = SK_SCALES_BOTH;
  c.global_scale = SK_GLOBAL_SCALE_COMPUTED;
  c.arch = "sm_120a";
  return c;
}

Test(quant_ops, caps_are_validated, .init = setup, .fini = teardown) {
  sk_plan *p = (sk_plan *)0x1;
  cr_assert_eq(sk_nvfp4_plan_create(NULL, &p), SK_ERR_INVALID_ARGUMENT);
  cr_assert_null(p);
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

/* Versioned caps: a struct from an older header (smaller struct_size) is refused below the first
 * released size; one from a newer header passes when its unknown tail is zero and is refused
 * otherwise; garbage sizes are refused with a message that names the initialiser. */
Test(quant_ops, caps_struct_size_is_checked, .init = setup, .fini = teardown) {
  struct {
    sk_quant_caps caps;
    uint64_t newer_field;
  } bigger = {caps_nvfp4(), 0};
  sk_plan *p = NULL;
  bigger.caps.struct_size = sizeof bigger;
  bigger.caps.global_scale = SK_GLOBAL_SCALE_GIVEN;
  bigger.caps.scales = SK_SCALES_SWIZZLED;
  bigger.caps.path = SK_PATH_PORTABLE;
  bigger.caps.arch = "sm_89"; /* not compiled for elsewhere in the suite; a plan compiles here */
  cr_assert_eq(sk_nvfp4_plan_create(&bigger.caps, &p), SK_OK, "%s", sk_last_error_message());
  sk_plan_destroy(p);
  bigger.newer_field = 7;
  cr_assert_eq(sk_nvfp4_plan_create(&bigger.caps, &p), SK_ERR_UNSUPPORTED);
  cr_assert(strstr(sk_last_error_message(), "does not know"), "%s", sk_last_error_message());
  sk_quant_caps c = caps_nvfp4();
  c.struct_size = 8;
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "SK_..._CAPS_INIT"), "%s", sk_last_error_message());
  c.struct_size = 0;
  cr_assert_eq(sk_nvfp4_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
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
  cr_assert_eq(sk_op_is_supported("quantization.mxfp8", "sm_121a", &sup), SK_OK);
  cr_assert_eq(sup, 1);
  cr_assert_eq(sk_op_is_supported("quantization.mxfp8", "garbage", &sup), SK_ERR_INVALID_ARGUMENT);
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
