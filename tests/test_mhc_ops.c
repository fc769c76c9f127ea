/* norm.mhc host side without a GPU: caps validation, an offline plan (explicit arch), bind
 * validation of every entry point, scratch size, manifest caps. Device pointers are fake. */
#include <criterion/criterion.h>

#include "sparkinfer/norm.h"
#include "testutil.h"

static char *dir;
static void setup(void) {
  dir = tu_tempdir("mhcops");
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
}
static void teardown(void) { tu_rmrf(dir); free(dir); }

#define BF ((DLDataType){kDLBfloat, 16, 1})
#define F32 ((DLDataType){kDLFloat, 32, 1})

Test(mhc_ops, caps_are_validated) {
  sk_mhc_plan *p;
  sk_mhc_caps c = {4096, 64, SK_MHC_NORM_BF16, 20, 1e-6f, 1e-6f, 1e-6f, "sm_120a"};
  sk_mhc_caps bad = c;
  bad.hidden = 4000;
  cr_assert_eq(sk_mhc_plan_create(&bad, &p), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "multiple of 256"), "%s", sk_last_error_message());
  bad = c; bad.max_tokens = 0;
  cr_assert_eq(sk_mhc_plan_create(&bad, &p), SK_ERR_INVALID_ARGUMENT);
  bad = c; bad.sinkhorn_iters = 0;
  cr_assert_eq(sk_mhc_plan_create(&bad, &p), SK_ERR_INVALID_ARGUMENT);
  bad = c; bad.rms_eps = -1;
  cr_assert_eq(sk_mhc_plan_create(&bad, &p), SK_ERR_INVALID_ARGUMENT);
  bad = c; bad.norm_eps = 0;
  cr_assert_eq(sk_mhc_plan_create(&bad, &p), SK_ERR_INVALID_ARGUMENT, "a fused norm needs norm_eps > 0");
  bad = c; bad.norm_weight = (sk_mhc_norm_weight)5;
  cr_assert_eq(sk_mhc_plan_create(&bad, &p), SK_ERR_INVALID_ARGUMENT);
  bad = c; bad.arch = "sm_75";
  cr_assert_eq(sk_mhc_plan_create(&bad, &p), SK_ERR_UNSUPPORTED);
  cr_assert_eq(sk_mhc_plan_create(NULL, &p), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_mhc_is_supported("sm_121a"), 1);
}

Test(mhc_ops, offline_plan_binds_every_entry_point_and_rejects_bad_tensors, .init = setup, .fini = teardown) {
  const int64_t h = 2048, tmax = 32, t = 5;
  sk_mhc_caps c = {h, tmax, SK_MHC_NORM_FP32, 20, 1e-6f, 1e-6f, 1e-6f, "sm_120a"};
  sk_mhc_plan *p;
  cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  sk_scratch_spec spec;
  cr_assert_eq(sk_mhc_scratch_spec(p, &spec), SK_OK);
  /* The partial rows, then (from the next 1024-byte boundary) one u32 counter per token, + slack. */
  cr_assert_eq(spec.bytes, (size_t)(((tmax * (h / 256) * 144 + 1023) & ~1023) + tmax * 4 + 768));
  cr_assert_eq(spec.zero_once, 1, "the fused decode kernels' arrival counters live in the scratch");
  int64_t sx[2] = {t, h}, sr[3] = {t, 4, h}, sp[2] = {t, 4}, sc[3] = {t, 4, 4}, sfn[2] = {24, 4 * h}, sfnp[2] = {24, h},
          s3[1] = {3}, s24[1] = {24}, sw[1] = {h};
  DLTensor x = tu_fake_device_tensor(0x100000, BF, 2, sx), res = tu_fake_device_tensor(0x200000, BF, 3, sr), pp = tu_fake_device_tensor(0x300000, F32, 2, sp),
           pc = tu_fake_device_tensor(0x310000, F32, 3, sc), fn = tu_fake_device_tensor(0x400000, F32, 2, sfn), fnp = tu_fake_device_tensor(0x500000, F32, 2, sfnp),
           hs = tu_fake_device_tensor(0x600000, F32, 1, s3), hb = tu_fake_device_tensor(0x610000, F32, 1, s24), w = tu_fake_device_tensor(0x620000, F32, 1, sw),
           ro = tu_fake_device_tensor(0x700000, BF, 3, sr), y = tu_fake_device_tensor(0x800000, BF, 2, sx), po = tu_fake_device_tensor(0x900000, F32, 2, sp),
           co = tu_fake_device_tensor(0x910000, F32, 3, sc);
  void *scratch = (void *)0xa00000;
  sk_binding b;
  cr_assert_eq(sk_mhc_bind_post(p, &x, &res, &pp, &pc, &ro, &b), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(sk_mhc_bind_pre(p, &x, &fnp, &hs, &hb, &w, &ro, &y, &po, &co, scratch, spec.bytes, &b), SK_OK, "%s",
               sk_last_error_message());
  cr_assert_eq(sk_mhc_bind_post_pre(p, &x, &res, &pp, &pc, &fn, &hs, &hb, &w, &ro, &y, &po, &co, scratch, spec.bytes, &b),
               SK_OK, "%s", sk_last_error_message());
  /* Wrong tensors: each refused with a message naming it. */
  DLTensor bad = fn;
  int64_t fn_bad[2] = {24, h};
  bad.shape = fn_bad;
  cr_assert_eq(sk_mhc_bind_post_pre(p, &x, &res, &pp, &pc, &bad, &hs, &hb, &w, &ro, &y, &po, &co, scratch, spec.bytes, &b),
               SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "fn"), "%s", sk_last_error_message());
  cr_assert_eq(sk_mhc_bind_pre(p, &x, &fnp, &hs, &hb, NULL, &ro, &y, &po, &co, scratch, spec.bytes, &b),
               SK_ERR_INVALID_ARGUMENT, "the plan fuses a norm weight");
  DLTensor wb = w;
  wb.dtype = BF;
  cr_assert_eq(sk_mhc_bind_pre(p, &x, &fnp, &hs, &hb, &wb, &ro, &y, &po, &co, scratch, spec.bytes, &b),
               SK_ERR_INVALID_ARGUMENT, "norm weight dtype is fp32 in this plan");
  int64_t too_many[2] = {tmax + 1, h};
  DLTensor xbig = x;
  xbig.shape = too_many;
  cr_assert_eq(sk_mhc_bind_post(p, &xbig, &res, &pp, &pc, &ro, &b), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "max_tokens"), "%s", sk_last_error_message());
  cr_assert_eq(sk_mhc_bind_pre(p, &x, &fnp, &hs, &hb, &w, &ro, &y, &po, &co, scratch, spec.bytes - 1, &b),
               SK_ERR_INVALID_ARGUMENT, "scratch too small");
  DLTensor xmis = x;
  xmis.byte_offset = 8;
  cr_assert_eq(sk_mhc_bind_post(p, &xmis, &res, &pp, &pc, &ro, &b), SK_ERR_INVALID_ARGUMENT, "16-byte alignment");
  cr_assert_neq(sk_mhc_run(p, &b, NULL), SK_OK, "no kernel is loaded without a GPU");
  sk_mhc_plan_destroy(p);
}

Test(mhc_ops, sk_warm_builds_mhc_entries_and_rejects_bad_caps, .init = setup, .fini = teardown) {
  char m[600], cache[700], warm[512];
  snprintf(m, sizeof m, "%s/m.json", dir);
  snprintf(cache, sizeof cache, "%s/c", dir);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":["
                   "{\"op\":\"norm.mhc\",\"caps\":{\"hidden\":1280,\"max_tokens\":16,\"norm_weight\":\"bf16\"}}]}");
  char *argv[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", cache, "--json", "--quiet", NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "kernels"), 10,
               "any multiple of 256 (here 1280) compiles, all three partial variants and the fused decode kernels: %s", out);
  free(out);
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"norm.mhc\",\"caps\":{\"hidden\":1000}}]}");
  char *argv2[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", cache, "--quiet", NULL};
  cr_assert_eq(tu_run(argv2, NULL, NULL), 2);
}

/* Binds run_pre of an offline plan (no norm weight) on fake device tensors of T tokens. */
/* Every value in bad[] of the plan-time knob `knob` makes sk_mhc_plan_create fail with
 * SK_ERR_INVALID_ARGUMENT and a message naming the knob; the knob is unset afterwards. */
static void assert_knob_rejected(const sk_mhc_caps *c, const char *knob, const char *const *bad, size_t n) {
  for (size_t i = 0; i < n; i++) {
    sk_mhc_plan *p = NULL;
    setenv(knob, bad[i], 1);
    cr_assert_eq(sk_mhc_plan_create(c, &p), SK_ERR_INVALID_ARGUMENT, "%s=%s accepted", knob, bad[i]);
    cr_assert_null(p, "a failed plan_create leaves *out NULL");
    cr_assert(strstr(sk_last_error_message(), knob), "%s", sk_last_error_message());
  }
  unsetenv(knob);
}

/* sk_mhc_plan_create for caps c on `arch` with SPARKINFER_MHC_STAGES=stages and `knob` = value
 * (NULL: unset), as the shared-memory knob tests need; both variables stay set for the caller. */
static sk_status plan_with_stages_and_knob(const sk_mhc_caps *c, const char *arch, const char *stages, const char *knob,
                                           const char *value, sk_mhc_plan **p) {
  setenv("SPARKINFER_MHC_STAGES", stages, 1);
  if (value) setenv(knob, value, 1);
  else unsetenv(knob);
  sk_mhc_caps ci = *c;
  ci.arch = arch;
  return sk_mhc_plan_create(&ci, p);
}

static void bind_pre_offline(const sk_mhc_plan *p, int64_t t, int64_t h, sk_binding *b) {
  sk_scratch_spec spec;
  cr_assert_eq(sk_mhc_scratch_spec(p, &spec), SK_OK);
  int64_t sx[2] = {t, h}, sr[3] = {t, 4, h}, sp[2] = {t, 4}, sc[3] = {t, 4, 4}, sfnp[2] = {24, h}, s3[1] = {3},
          s24[1] = {24};
  DLTensor x = tu_fake_device_tensor(0x100000, BF, 2, sx), fnp = tu_fake_device_tensor(0x500000, F32, 2, sfnp),
           hs = tu_fake_device_tensor(0x600000, F32, 1, s3), hb = tu_fake_device_tensor(0x610000, F32, 1, s24),
           ro = tu_fake_device_tensor(0x700000, BF, 3, sr), y = tu_fake_device_tensor(0x800000, BF, 2, sx),
           po = tu_fake_device_tensor(0x900000, F32, 2, sp), co = tu_fake_device_tensor(0x910000, F32, 3, sc);
  cr_assert_eq(sk_mhc_bind_pre(p, &x, &fnp, &hs, &hb, NULL, &ro, &y, &po, &co, (void *)0xa00000, spec.bytes, b), SK_OK,
               "%s", sk_last_error_message());
}

/* SPARKINFER_MHC_SCALAR_MAX_T (the T up to which pre / post_pre take the scalar partial kernels)
 * is validated and read when the plan is made: a bad value set after plan_create changes nothing. */
Test(mhc_ops, scalar_crossover_env_is_validated_at_plan_time, .init = setup, .fini = teardown) {
  const int64_t h = 256, t = 3;
  sk_mhc_caps c = {h, 32, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_120a"};
  sk_mhc_plan *p;
  static const char *const bad[] = {"-1", "abc", "8x", "4294967296"};
  assert_knob_rejected(&c, "SPARKINFER_MHC_SCALAR_MAX_T", bad, sizeof bad / sizeof bad[0]);
  /* 0 (tensor cores for every T), the default, and a crossover above max_tokens (scalar only). */
  static const char *const good[] = {"0", "", "8", "1K"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv("SPARKINFER_MHC_SCALAR_MAX_T", good[i], 1);
    cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "'%s': %s", good[i], sk_last_error_message());
    setenv("SPARKINFER_MHC_SCALAR_MAX_T", "junk", 1); /* not read again by bind or run */
    sk_binding b;
    bind_pre_offline(p, t, h, &b);
    cr_assert_neq(sk_mhc_run(p, &b, NULL), SK_OK, "no kernel is loaded without a GPU");
    cr_assert_null(strstr(sk_last_error_message(), "SPARKINFER_MHC_SCALAR_MAX_T"), "%s", sk_last_error_message());
    sk_mhc_plan_destroy(p);
  }
  unsetenv("SPARKINFER_MHC_SCALAR_MAX_T");
}

/* SPARKINFER_MHC_FUSED_DECODE (one launch for T <= the crossover) is validated at plan time. An
 * offline plan (no GPU: no CTA slots to count) binds the two-launch decode path (dim[5] = 0). */
Test(mhc_ops, fused_decode_env_is_validated_and_offline_plans_do_not_fuse, .init = setup, .fini = teardown) {
  const int64_t h = 256, t = 1;
  sk_mhc_caps c = {h, 8, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_90a"};
  sk_mhc_plan *p;
  setenv("SPARKINFER_MHC_FUSED_DECODE", "maybe", 1);
  cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "SPARKINFER_MHC_FUSED_DECODE"), "%s", sk_last_error_message());
  static const char *const good[] = {"0", "1", ""};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv("SPARKINFER_MHC_FUSED_DECODE", good[i], 1);
    cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "'%s': %s", good[i], sk_last_error_message());
    sk_binding b;
    bind_pre_offline(p, t, h, &b);
    cr_assert_eq(b.dim[5], 0, "an offline plan has no CTA slots to fuse into");
    sk_mhc_plan_destroy(p);
  }
  unsetenv("SPARKINFER_MHC_FUSED_DECODE");
}

/* SPARKINFER_MHC_SPLIT_MIN_T (the smallest T that takes the split schedule: projection-only
 * partial kernel) is validated at plan time, and bind picks the split for T >= it, never for a T
 * the scalar partials take, and never with 0. */
Test(mhc_ops, split_schedule_env_is_validated_and_chosen_by_tokens, .init = setup, .fini = teardown) {
  const int64_t h = 256;
  sk_mhc_caps c = {h, 4096, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_90a"};
  sk_mhc_plan *p;
  static const char *const bad[] = {"-1", "many", "4294967296"};
  assert_knob_rejected(&c, "SPARKINFER_MHC_SPLIT_MIN_T", bad, sizeof bad / sizeof bad[0]);
  /* {knob, T, expected dim[6]}; the scalar crossover set to 8 (its default for H > 4096). */
  setenv("SPARKINFER_MHC_SCALAR_MAX_T", "8", 1);
  static const struct { const char *knob; int64_t t; int64_t split; } cases[] = {
      {"0", 4096, 0}, {"0", 9, 0}, {"1", 8, 0}, {"1", 9, 1}, {"100", 99, 0}, {"100", 100, 1}, {"100", 4096, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("SPARKINFER_MHC_SPLIT_MIN_T", cases[i].knob, 1);
    cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "'%s': %s", cases[i].knob, sk_last_error_message());
    sk_binding b;
    bind_pre_offline(p, cases[i].t, h, &b);
    cr_assert_eq(b.dim[6], cases[i].split, "SPARKINFER_MHC_SPLIT_MIN_T=%s T=%lld", cases[i].knob, (long long)cases[i].t);
    /* Work per CTA: tokens, whole rounds of the projection kernel's 4 warps (sm_90a), at most 16,
     * when split; else groups of the tensor-core partial (partial_ranges_fill_one_wave). */
    if (b.dim[6])
      cr_assert(b.dim[3] >= 64 && b.dim[3] <= 16 * 64 && b.dim[3] % 64 == 0, "T=%lld: %lld tokens per CTA",
                (long long)cases[i].t, (long long)b.dim[3]);
    else
      cr_assert_geq(b.dim[3], 1, "T=%lld: %lld groups per CTA", (long long)cases[i].t, (long long)b.dim[3]);
    sk_mhc_plan_destroy(p);
  }
  unsetenv("SPARKINFER_MHC_SPLIT_MIN_T");
  unsetenv("SPARKINFER_MHC_SCALAR_MAX_T");
  /* The default scalar crossover for H <= 4096 is 16: with the split from T = 1, T = 16 still takes
   * the scalar partials, T = 17 the split schedule. */
  setenv("SPARKINFER_MHC_SPLIT_MIN_T", "1", 1);
  cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  unsetenv("SPARKINFER_MHC_SPLIT_MIN_T");
  sk_binding bs;
  bind_pre_offline(p, 16, h, &bs);
  cr_assert_eq(bs.dim[6], 0, "H = 256, T = 16: scalar partials by default");
  bind_pre_offline(p, 17, h, &bs);
  cr_assert_eq(bs.dim[6], 1, "H = 256, T = 17: above the default crossover");
  sk_mhc_plan_destroy(p);
  /* The default splits prefill-sized T. */
  cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  sk_binding b;
  bind_pre_offline(p, 4096, h, &b);
  cr_assert_eq(b.dim[6], 1, "T = 4096 takes the split schedule by default");
  sk_mhc_plan_destroy(p);
}

/* The tensor-core partial kernels take the tile-major items (tile, group of 16 tokens) in ranges
 * of groups_per_cta (binding dim[3]): the model's ranges fill at most one wave of the resident
 * CTA slots (offline: 128 SMs x 4 pre CTAs), at most 2 groups longer than the balanced range or
 * whole tiles; SPARKINFER_MHC_TOKENS_PER_CTA sets them (16 tokens a group). */
Test(mhc_ops, partial_ranges_fill_one_wave, .init = setup, .fini = teardown) {
  setenv("SPARKINFER_MHC_SPLIT_MIN_T", "0", 1);
  setenv("SPARKINFER_MHC_SCALAR_MAX_T", "0", 1);
  const int64_t hs[] = {256, 2048, 7168}, ts[] = {1, 17, 130, 1024, 4096, 4133, 8192}, slots = 128 * 4;
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
    sk_mhc_caps c = {hs[i], 8192, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_90a"};
    sk_mhc_plan *p;
    cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
    for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) {
      sk_binding b;
      bind_pre_offline(p, ts[j], hs[i], &b);
      const int64_t per_tile = (ts[j] + 15) / 16, items = per_tile * (hs[i] / 256), gpc = b.dim[3],
                    one_wave = (items + slots - 1) / slots, tiled = (one_wave + per_tile - 1) / per_tile * per_tile;
      cr_assert(gpc >= one_wave && (gpc <= one_wave + 2 || gpc == tiled),
                "H=%lld T=%lld: %lld groups per CTA (one wave: %lld, %lld groups a tile)", (long long)hs[i],
                (long long)ts[j], (long long)gpc, (long long)one_wave, (long long)per_tile);
      cr_assert_leq((items + gpc - 1) / gpc, slots, "H=%lld T=%lld: more CTAs than slots", (long long)hs[i],
                    (long long)ts[j]);
    }
    sk_mhc_plan_destroy(p);
  }
  setenv("SPARKINFER_MHC_TOKENS_PER_CTA", "48", 1);
  sk_mhc_caps c = {2048, 8192, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_90a"};
  sk_mhc_plan *p;
  cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  sk_binding b;
  bind_pre_offline(p, 4096, 2048, &b);
  cr_assert_eq(b.dim[3], 3, "SPARKINFER_MHC_TOKENS_PER_CTA=48: 3 groups a CTA, not %lld", (long long)b.dim[3]);
  sk_mhc_plan_destroy(p);
  unsetenv("SPARKINFER_MHC_TOKENS_PER_CTA");
  unsetenv("SPARKINFER_MHC_SCALAR_MAX_T");
  unsetenv("SPARKINFER_MHC_SPLIT_MIN_T");
}

/* SPARKINFER_MHC_PROJECTION_WARPS / _STAGES (the projection kernel's shape) are validated at plan
 * time, against the target's shared memory per block too (no GPU needed), and bind's tokens per
 * projection CTA are whole rounds of the chosen warps. */
Test(mhc_ops, projection_shape_env_is_validated, .init = setup, .fini = teardown) {
  const int64_t h = 256;
  sk_mhc_caps c = {h, 4096, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_90a"};
  sk_mhc_plan *p;
  static const struct { const char *knob, *value; } bad[] = {
      {"SPARKINFER_MHC_PROJECTION_WARPS", "0"}, {"SPARKINFER_MHC_PROJECTION_WARPS", "9"},
      {"SPARKINFER_MHC_PROJECTION_WARPS", "four"}, {"SPARKINFER_MHC_PROJECTION_STAGES", "0"},
      {"SPARKINFER_MHC_PROJECTION_STAGES", "3"}, {"SPARKINFER_MHC_PROJECTION_STAGES", "-1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i].knob, bad[i].value, 1);
    cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_ERR_INVALID_ARGUMENT, "%s=%s accepted", bad[i].knob, bad[i].value);
    cr_assert(strstr(sk_last_error_message(), bad[i].knob), "%s", sk_last_error_message());
    unsetenv(bad[i].knob);
  }
  /* 8 warps x 2 buffers = 168 KiB: an sm_90a block can have it, an sm_120a block cannot. */
  setenv("SPARKINFER_MHC_PROJECTION_WARPS", "8", 1);
  setenv("SPARKINFER_MHC_PROJECTION_STAGES", "2", 1);
  cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  sk_mhc_plan_destroy(p);
  sk_mhc_caps c120 = c;
  c120.arch = "sm_120a";
  cr_assert_eq(sk_mhc_plan_create(&c120, &p), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "shared memory"), "%s", sk_last_error_message());
  /* 8 x 1 (104 KiB) fits sm_90a, not sm_120a (99 KiB); 6 x 1 (88 KiB) and 3 x 2 do. */
  static const struct { const char *arch, *warps, *stages; sk_status want; int64_t step; } shapes[] = {
      {"sm_90a", "8", "1", SK_OK, 128}, {"sm_120a", "8", "1", SK_ERR_INVALID_ARGUMENT, 0},
      {"sm_120a", "6", "1", SK_OK, 96}, {"sm_121a", "3", "2", SK_OK, 48}, {"sm_90a", "1", "1", SK_OK, 16},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    setenv("SPARKINFER_MHC_PROJECTION_WARPS", shapes[i].warps, 1);
    setenv("SPARKINFER_MHC_PROJECTION_STAGES", shapes[i].stages, 1);
    sk_mhc_caps ci = c;
    ci.arch = shapes[i].arch;
    cr_assert_eq(sk_mhc_plan_create(&ci, &p), shapes[i].want, "%s %s x %s: %s", shapes[i].arch, shapes[i].warps,
                 shapes[i].stages, sk_last_error_message());
    if (shapes[i].want != SK_OK) continue;
    sk_binding b;
    bind_pre_offline(p, 4096, h, &b);
    cr_assert_eq(b.dim[6], 1);
    cr_assert(b.dim[3] >= shapes[i].step && b.dim[3] <= 16 * shapes[i].step && b.dim[3] % shapes[i].step == 0,
              "%s %s x %s: %lld tokens per CTA", shapes[i].arch, shapes[i].warps, shapes[i].stages,
              (long long)b.dim[3]);
    sk_mhc_plan_destroy(p);
  }
  unsetenv("SPARKINFER_MHC_PROJECTION_WARPS");
  unsetenv("SPARKINFER_MHC_PROJECTION_STAGES");
}

/* SPARKINFER_MHC_FN_SMEM_TERMS (post_pre partial: fn terms in shared memory) is validated at plan
 * time against the target's shared memory per block with the chosen stages; unset, it takes the
 * most terms (up to 2) that fit, so every stage count stays plannable. */
Test(mhc_ops, fn_smem_terms_env_is_validated_and_defaults_to_what_fits, .init = setup, .fini = teardown) {
  sk_mhc_caps c = {256, 64, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_90a"};
  sk_mhc_plan *p;
  static const char *const bad[] = {"4", "two", "-1"};
  assert_knob_rejected(&c, "SPARKINFER_MHC_FN_SMEM_TERMS", bad, sizeof bad / sizeof bad[0]);
  /* {arch, stages, terms (NULL: unset), expected}: 2 stages + 2 terms = 183 KiB fit sm_90a (208 KiB
   * with the default own sums buffer), not sm_120a (99 KiB); 3 stages (172 KiB) take at most 1
   * term, 4 stages (213 KiB) none. */
  static const struct { const char *arch, *stages, *terms; sk_status want; } cases[] = {
      {"sm_90a", "2", NULL, SK_OK},  {"sm_90a", "2", "2", SK_OK},   {"sm_90a", "2", "3", SK_ERR_INVALID_ARGUMENT},
      {"sm_90a", "3", NULL, SK_OK},  {"sm_90a", "3", "1", SK_OK},   {"sm_90a", "3", "2", SK_ERR_INVALID_ARGUMENT},
      {"sm_90a", "4", NULL, SK_OK},  {"sm_90a", "4", "1", SK_ERR_INVALID_ARGUMENT},
      {"sm_120a", "2", NULL, SK_OK}, {"sm_120a", "2", "0", SK_OK}, {"sm_120a", "2", "1", SK_ERR_INVALID_ARGUMENT},
      {"sm_120a", "3", NULL, SK_ERR_INVALID_ARGUMENT}, /* 172 KiB of stages alone */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const sk_status got = plan_with_stages_and_knob(&c, cases[i].arch, cases[i].stages, "SPARKINFER_MHC_FN_SMEM_TERMS",
                                                    cases[i].terms, &p);
    cr_assert_eq(got, cases[i].want, "%s, %s stages, terms %s: %s", cases[i].arch, cases[i].stages,
                 cases[i].terms ? cases[i].terms : "(default)", sk_last_error_message());
    if (got == SK_OK) sk_mhc_plan_destroy(p);
    else cr_assert(strstr(sk_last_error_message(), "shared memory"), "%s", sk_last_error_message());
  }
  unsetenv("SPARKINFER_MHC_STAGES");
  unsetenv("SPARKINFER_MHC_FN_SMEM_TERMS");
}

/* SPARKINFER_MHC_OWN_SUMS (the 2-stage lockstep loop with its own sums buffer) is validated at
 * plan time and defaults to on where the buffer fits next to the stages and the default fn terms
 * (sm_90a: 2 stages + 2 terms + 24 KiB = 208 KiB), off where it does not (sm_120a); the plan's
 * stage count carries the flag (binding dim[2] = 2 | 16). */
Test(mhc_ops, own_sums_env_is_validated_and_defaults_to_what_fits, .init = setup, .fini = teardown) {
  sk_mhc_caps c = {256, 64, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, "sm_90a"};
  sk_mhc_plan *p;
  static const char *const bad[] = {"2", "maybe", "-1"};
  assert_knob_rejected(&c, "SPARKINFER_MHC_OWN_SUMS", bad, sizeof bad / sizeof bad[0]);
  /* {arch, stages, own sums (NULL: unset), expected status, expected dim[2]} */
  static const struct { const char *arch, *stages, *own; sk_status want; int64_t dim2; } cases[] = {
      {"sm_90a", "2", NULL, SK_OK, 18},  {"sm_90a", "2", "0", SK_OK, 2},  {"sm_90a", "2", "1", SK_OK, 18},
      {"sm_90a", "3", NULL, SK_OK, 3},   {"sm_90a", "3", "0", SK_OK, 3},  {"sm_90a", "3", "1", SK_ERR_INVALID_ARGUMENT, 0},
      {"sm_120a", "2", NULL, SK_OK, 2},  {"sm_121a", "2", NULL, SK_OK, 2},
      {"sm_120a", "2", "1", SK_ERR_INVALID_ARGUMENT, 0}, /* 106.5 KiB > 99 KiB */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const sk_status got =
        plan_with_stages_and_knob(&c, cases[i].arch, cases[i].stages, "SPARKINFER_MHC_OWN_SUMS", cases[i].own, &p);
    cr_assert_eq(got, cases[i].want, "%s, %s stages, own sums %s: %s", cases[i].arch, cases[i].stages,
                 cases[i].own ? cases[i].own : "(default)", sk_last_error_message());
    if (got != SK_OK) {
      cr_assert(strstr(sk_last_error_message(), "SPARKINFER_MHC_OWN_SUMS") || strstr(sk_last_error_message(), "shared memory"),
                "%s", sk_last_error_message());
      continue;
    }
    sk_binding b;
    bind_pre_offline(p, 64, 256, &b);
    cr_assert_eq(b.dim[2], cases[i].dim2, "%s, %s stages, own sums %s: dim[2] %lld", cases[i].arch, cases[i].stages,
                 cases[i].own ? cases[i].own : "(default)", (long long)b.dim[2]);
    sk_mhc_plan_destroy(p);
  }
  unsetenv("SPARKINFER_MHC_STAGES");
  unsetenv("SPARKINFER_MHC_OWN_SUMS");
}

/* The variant knobs name other kernels, and sk-warm's op manifests read them as a plan does, so a
 * cache warmed under the same environment serves the frozen process (docs/env.md). */
Test(mhc_ops, sk_warm_prebuilds_the_variants_the_knobs_name, .init = setup, .fini = teardown) {
  char m[600], warm[512];
  snprintf(m, sizeof m, "%s/m.json", dir);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"norm.mhc\",\"caps\":{\"hidden\":1280}}]}");
  char *argv[] = {warm, "--manifest", m, "--arch", "sm_90a", "--dry-run", NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "%s", out);
  cr_assert(strstr(out, "post_pre_partial_kernel<1280, 2>") && strstr(out, "pre_projection_kernel<1280, 4, 2>"),
            "sm_90a defaults: %s", out);
  free(out);
  char fn_terms[] = "SPARKINFER_MHC_FN_SMEM_TERMS=0", warps[] = "SPARKINFER_MHC_PROJECTION_WARPS=2";
  char *env[] = {fn_terms, warps, NULL};
  out = NULL;
  cr_assert_eq(tu_run(argv, env, &out), 0, "%s", out);
  cr_assert(strstr(out, "post_pre_partial_kernel<1280, 0>") && strstr(out, "pre_projection_kernel<1280, 2, 2>"),
            "with the knobs: %s", out);
  cr_assert_null(strstr(out, "post_pre_partial_kernel<1280, 2>"), "%s", out);
  free(out);
  char bad[] = "SPARKINFER_MHC_FN_SMEM_TERMS=7";
  char *env_bad[] = {bad, NULL};
  cr_assert_eq(tu_run(argv, env_bad, NULL), 2, "a bad knob fails the manifest");
}
