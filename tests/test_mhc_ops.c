/* norm.mhc's host side without a GPU, what the harness's generic CPU suite (tests/test_ops.c)
 * does not check: the selection as a pure function of caps, tuning overrides and the arch table's
 * properties (runtime/arch.c) - the per-arch tuning rows (sm_90: measured on the H200; sm_100,
 * sm_120 (RTX 5090 / RTX PRO 6000: 99 KiB a block, 170 / 188 SMs), sm_121 (DGX Spark: 48 SMs) and
 * archs the table lacks: derived), every SPARKINFER_MHC_* knob (its default per arch, malformed and
 * out-of-range values refused naming it, shapes a block's shared memory cannot hold refused),
 * which kernels a plan resolves for its T range, the fused decode slot rule; bind's launch
 * geometry against its models (groups per partial CTA, tokens per projection CTA, hidden per
 * finalize CTA, the FUSED / SPLIT symbols); caps validation, the scratch size, an offline plan,
 * and sk-warm's norm.mhc manifest entries. Plans come from sk_plan_select_only (runtime/op.h)
 * with a device of the arch table; device pointers are fake. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "norm/mhc_host.h"
#include "op.h"
#include "sparkinfer/norm.h"
#include "testutil.h"

static char *dir;
static void setup(void) {
  dir = tu_tempdir("mhcops");
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
}
static void teardown(void) {
  tu_rmrf(dir);
  free(dir);
}

/* Every test starts from the defaults (a knob left set by a failed assertion must not leak). */
static void clear_knobs(void) {
  for (const char *const *k = sk_mhc_knobs; *k; k++) unsetenv(*k);
}

static sk_mhc_caps caps_of(int64_t hidden, int64_t max_tokens, sk_mhc_norm_weight w) {
  sk_mhc_caps c = SK_MHC_CAPS_INIT;
  c.hidden = hidden;
  c.max_tokens = max_tokens;
  c.norm_weight = w;
  return c;
}

/* Device `device` of the arch table for `arch`. */
static sk_arch_props props_of(const char *arch, size_t device) {
  sk_arch_props devs[8];
  const size_t n = sk_arch_table_devices(arch, devs, 8);
  cr_assert_lt(device, n, "%s has %zu devices in the arch table", arch, n);
  return devs[device];
}

/* The selection alone (no compile, no GPU) for `caps` on device `device` of `arch`. */
static sk_status select_plan(sk_mhc_caps caps, const char *arch, size_t device, sk_plan **p) {
  const sk_arch_props props = props_of(arch, device);
  caps.arch = arch;
  return sk_plan_select_only(sk_find_op("norm.mhc"), &caps, &props, p);
}

static sk_plan *must_select(sk_mhc_caps caps, const char *arch, size_t device) {
  sk_plan *p = NULL;
  const sk_status s = select_plan(caps, arch, device, &p);
  cr_assert_eq(s, SK_OK, "%s H=%lld: %s", arch, (long long)caps.hidden, sk_last_error_message());
  return p;
}

static const mhc_state *state_of(const sk_plan *p) { return SK_PLAN_STATE(p, mhc_state); }
static const char *kernel_name(const sk_plan *p, int slot) { return p->requests[slot].name; }

/* ---- fake bindings ----------------------------------------------------------------------------- */

/* Views of entry `entry` for T tokens at fake 4 KiB-aligned device addresses, shapes from the
 * plan's table (sk_plan_tensor_info), absent where the plan takes no tensor. */
typedef struct fake_bind {
  DLTensor dl[16];
  const DLTensor *ptrs[16];
  int64_t shapes[16][4];
  size_t n;
  void *scratch;
  size_t scratch_bytes;
} fake_bind;

static void fake_views(const sk_plan *p, const char *entry, int64_t t, fake_bind *f) {
  memset(f, 0, sizeof *f);
  cr_assert_eq(sk_plan_tensor_count(p, entry, &f->n), SK_OK);
  sk_symbol syms[SK_MAX_SYMBOLS];
  int nsyms = p->num_symbols;
  memcpy(syms, p->symbols, sizeof(sk_symbol) * (size_t)nsyms);
  snprintf(syms[nsyms].name, sizeof syms[nsyms].name, "T");
  syms[nsyms++].value = t;
  uintptr_t addr = (uintptr_t)1 << 40;
  for (size_t i = 0; i < f->n; i++) {
    sk_tensor_info info;
    cr_assert_eq(sk_plan_tensor_info(p, entry, i, &info), SK_OK);
    int nd = 0;
    cr_assert_eq(sk_shape_dims(info.shape, syms, nsyms, f->shapes[i], 4, &nd), SK_OK, "%s", info.shape);
    const DLDataType dt = !strncmp(info.dtypes, "bfloat16", 8) ? (DLDataType){kDLBfloat, 16, 1} : (DLDataType){kDLFloat, 32, 1};
    f->dl[i] = tu_fake_device_tensor(addr, dt, nd, f->shapes[i]);
    f->ptrs[i] = info.presence == SK_TENSOR_UNUSED ? NULL : &f->dl[i];
    addr += (uintptr_t)1 << 32;
  }
  sk_scratch_spec spec;
  cr_assert_eq(sk_plan_scratch_spec(p, &spec), SK_OK);
  f->scratch = (void *)addr;
  f->scratch_bytes = spec.bytes;
}

/* Bind entry `entry` of `p` at T tokens (must succeed) into *b (created here). */
static sk_binding *bind_at(const sk_plan *p, const char *entry, int64_t t) {
  fake_bind f;
  fake_views(p, entry, t, &f);
  sk_binding *b = NULL;
  cr_assert_eq(sk_binding_create(p, entry, &b), SK_OK, "%s", sk_last_error_message());
  const sk_status s = sk_bind(b, f.ptrs, f.n, f.scratch, f.scratch_bytes);
  cr_assert_eq(s, SK_OK, "%s T=%lld: %s", entry, (long long)t, sk_last_error_message());
  return b;
}

static const mhc_bound *bound_of(const sk_binding *b) { return SK_BINDING_STATE(b, mhc_bound); }

static int64_t symbol(const sk_binding *b, const char *name) {
  int64_t v = -1;
  cr_assert_eq(sk_binding_symbol(b, name, &v), SK_OK, "symbol %s: %s", name, sk_last_error_message());
  return v;
}

/* ---- caps, scratch, an offline plan ---------------------------------------------------------- */

Test(mhc_ops, caps_are_validated) {
  const sk_mhc_caps c = caps_of(4096, 64, SK_MHC_NORM_BF16);
  static const struct {
    const char *what, *message;
  } bad[] = {
      {"hidden 4000", "multiple of 256"}, {"max_tokens 0", "max_tokens"}, {"sinkhorn_iters 0", "sinkhorn_iters"},
      {"rms_eps -1", "rms_eps"},          {"norm_eps 0 with a weight", "norm_eps"},
      {"norm_weight 5", "norm_weight"},   {"hc_eps -1", "hc_eps"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sk_mhc_caps b = c;
    switch (i) {
    case 0: b.hidden = 4000; break;
    case 1: b.max_tokens = 0; break;
    case 2: b.sinkhorn_iters = 0; break;
    case 3: b.rms_eps = -1; break;
    case 4: b.norm_eps = 0; break;
    case 5: b.norm_weight = (sk_mhc_norm_weight)5; break;
    default: b.hc_eps = -1; break;
    }
    sk_plan *p = (sk_plan *)1;
    cr_expect_eq(select_plan(b, "sm_120a", 0, &p), SK_ERR_INVALID_ARGUMENT, "%s accepted", bad[i].what);
    cr_expect_null(p, "a failed plan leaves *plan NULL");
    cr_expect(strstr(sk_last_error_message(), bad[i].message), "%s: %s", bad[i].what, sk_last_error_message());
  }
  sk_mhc_caps no_weight = c;
  no_weight.norm_weight = SK_MHC_NORM_NONE;
  no_weight.norm_eps = 0; /* not used without a weight */
  sk_plan *p;
  cr_expect_eq(select_plan(no_weight, "sm_120a", 0, &p), SK_OK, "%s", sk_last_error_message());
  sk_plan_destroy(p);
  sk_mhc_caps old = c;
  old.arch = "sm_75";
  cr_expect_eq(sk_mhc_plan_create(&old, &p), SK_ERR_UNSUPPORTED);
  cr_expect_eq(sk_mhc_plan_create(NULL, &p), SK_ERR_INVALID_ARGUMENT);
  int supported = 0;
  cr_expect_eq(sk_op_is_supported("norm.mhc", "sm_121a", &supported), SK_OK);
  cr_expect_eq(supported, 1);
}

/* One scratch for the plan (every entry binds it): the partial rows, then from the next 1024-byte
 * boundary one u32 arrival counter per token, + the slack bind needs to align the views; zeroed
 * once (the fused decode kernels' counters). */
Test(mhc_ops, scratch_holds_partials_then_counters) {
  const int64_t hs[] = {256, 1280, 7168}, ts[] = {1, 32, 4133};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < 3; j++) {
      sk_plan *p = must_select(caps_of(hs[i], ts[j], SK_MHC_NORM_NONE), "sm_90a", 0);
      sk_scratch_spec spec;
      cr_assert_eq(sk_plan_scratch_spec(p, &spec), SK_OK);
      const size_t partials = (size_t)ts[j] * (size_t)(hs[i] / 256) * 144;
      cr_expect_eq(spec.bytes, ((partials + 1023) & ~(size_t)1023) + (size_t)ts[j] * 4 + 768, "H=%lld T=%lld: %zu",
                   (long long)hs[i], (long long)ts[j], spec.bytes);
      cr_expect_eq(spec.alignment, 256);
      cr_expect_eq(spec.zero_once, 1, "the fused decode kernels' arrival counters live in the scratch");
      sk_plan_destroy(p);
    }
}

/* An offline plan (explicit arch, no GPU): kernels compiled into the cache; bind takes each
 * entry, refuses the norm weight's other dtype and T past max_tokens; run has nothing loaded. */
Test(mhc_ops, offline_plan_binds_and_refuses_to_run, .init = setup, .fini = teardown) {
  clear_knobs();
  sk_mhc_caps c = caps_of(2048, 32, SK_MHC_NORM_FP32);
  c.arch = "sm_120a";
  sk_plan *p;
  cr_assert_eq(sk_mhc_plan_create(&c, &p), SK_OK, "%s", sk_last_error_message());
  cr_expect_str_eq(sk_plan_arch(p), "sm_120a");
  static const char *const entries[] = {"post", "pre", "post_pre"};
  for (int e = 0; e < 3; e++) {
    sk_binding *b = bind_at(p, entries[e], 5);
    const sk_status rs = sk_run(b, NULL);
    cr_expect(rs == SK_ERR_NO_DEVICE || rs == SK_ERR_NO_DRIVER, "%s: run of an offline plan returned %s", entries[e],
              sk_status_string(rs));
    fake_bind f;
    fake_views(p, entries[e], 5, &f);
    if (e > 0) { /* the norm weight (index 4 of pre, 7 of post_pre) in bf16: this plan takes fp32 */
      const size_t w = e == 1 ? 4 : 7;
      f.dl[w].dtype = (DLDataType){kDLBfloat, 16, 1};
      cr_expect_eq(sk_bind(b, f.ptrs, f.n, f.scratch, f.scratch_bytes), SK_ERR_INVALID_ARGUMENT);
      cr_expect(strstr(sk_last_error_message(), "norm_weight") && strstr(sk_last_error_message(), "float32"), "%s",
                sk_last_error_message());
    }
    fake_bind big;
    fake_views(p, entries[e], 33, &big);
    cr_expect_eq(sk_bind(b, big.ptrs, big.n, big.scratch, f.scratch_bytes), SK_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(sk_last_error_message(), "T = 33") && strstr(sk_last_error_message(), "MAX_T"), "%s",
              sk_last_error_message());
    sk_binding_destroy(b);
  }
  sk_plan_destroy(p);
}

/* ---- the per-arch tuning table ------------------------------------------------------------------
 * Defaults per arch table device: SM count, projection warps, stage buffers of the partials (| 16:
 * the lockstep loop with its own sums buffer), fn terms in shared memory, the dynamic shared memory
 * of the post_pre / pre partials and the projection (pre 16 / 22 KiB and post_pre 82.5 / 106.5 KiB
 * for 2 stages / 2 with own sums, + 48 KiB a fn term, + 128 B of alignment slack; projection 40 KiB
 * + warps x 2 x 8 KiB + 128 B), crossovers (scalar partials up to 16 tokens for H <= 4096, 8 above;
 * run_pre's split from 256), and whether the row was measured. */
typedef struct arch_row {
  const char *arch;
  size_t device;
  int sms, warps, stages, fn_terms;
  unsigned post_pre_smem, pre_smem, projection_smem;
  int measured;
} arch_row;

static const arch_row arch_rows[] = {
    {"sm_90a", 0, 132, 4, 2 | OWN_SUMS_FLAG, 2, 207488, 22656, 106624, 1},  /* H200 */
    {"sm_90a", 1, 132, 4, 2 | OWN_SUMS_FLAG, 2, 207488, 22656, 106624, 1},  /* H100 SXM */
    {"sm_100a", 0, 148, 4, 2 | OWN_SUMS_FLAG, 2, 207488, 22656, 106624, 0}, /* B200 */
    {"sm_120a", 0, 170, 3, 2, 0, 84608, 16512, 90240, 0},                   /* RTX 5090 */
    {"sm_120a", 1, 188, 3, 2, 0, 84608, 16512, 90240, 0},                   /* RTX PRO 6000 */
    {"sm_121a", 0, 48, 3, 2, 0, 84608, 16512, 90240, 0},                    /* DGX Spark */
    {"sm_80", 0, 108, 3, 2 | OWN_SUMS_FLAG, 1, 158336, 22656, 90240, 0},    /* A100: 163 KiB a block */
    {"sm_89", 0, 128, 3, 2, 0, 84608, 16512, 90240, 0},                     /* RTX 4090 */
    {"sm_103a", 0, 128, 4, 2 | OWN_SUMS_FLAG, 2, 207488, 22656, 106624, 0}, /* not in the table: generic */
};

Test(mhc_ops, tuning_table_defaults_per_arch) {
  clear_knobs();
  for (size_t i = 0; i < sizeof arch_rows / sizeof arch_rows[0]; i++) {
    const arch_row *r = &arch_rows[i];
    const sk_arch_props props = props_of(r->arch, r->device);
    const mhc_tuning t = sk_mhc_tuning_for(&props);
    cr_expect_eq(!strncmp(t.source, "measured", 8), r->measured, "%s (%s): tuning %s", r->arch, props.device, t.source);
    for (int64_t h = 256; h <= 8192; h *= 2) {
      const int64_t hidden = h == 8192 ? 7168 : h;
      sk_plan *p = must_select(caps_of(hidden, 4096, SK_MHC_NORM_BF16), r->arch, r->device);
      const mhc_state *st = state_of(p);
      const char *name = props.device;
      cr_expect_eq(st->sm_count, r->sms, "%s %s", r->arch, name);
      cr_expect_eq(st->projection_warps, r->warps, "%s %s", r->arch, name);
      cr_expect_eq(st->projection_stages, 2, "%s %s", r->arch, name);
      cr_expect_eq(st->stages, r->stages, "%s %s: stages %d", r->arch, name, st->stages);
      cr_expect_eq(st->fn_smem_terms, r->fn_terms, "%s %s", r->arch, name);
      cr_expect_eq(st->tokens_per_cta, 0);
      cr_expect_eq(st->scalar_max_t, hidden <= 4096 ? 16 : 8, "%s %s H=%lld", r->arch, name, (long long)hidden);
      cr_expect_eq(st->split_min_t, 256);
      cr_expect_eq(st->fused_decode, 1);
      cr_expect_eq(st->fused_max_t[0] + st->fused_max_t[1], 0, "no fused launch without the device's CTA slots");
      cr_expect_eq(st->dynamic_smem[K_POST_PRE_PARTIAL], r->post_pre_smem, "%s %s: %u", r->arch, name,
                   st->dynamic_smem[K_POST_PRE_PARTIAL]);
      cr_expect_eq(st->dynamic_smem[K_PRE_PARTIAL], r->pre_smem, "%s %s: %u", r->arch, name, st->dynamic_smem[K_PRE_PARTIAL]);
      cr_expect_eq(st->dynamic_smem[K_PRE_PROJECTION], r->projection_smem, "%s %s", r->arch, name);
      /* The static 5 KiB of the partials included, every launch fits the block. */
      cr_expect_leq(st->dynamic_smem[K_POST_PRE_PARTIAL] + 5120, props.smem_per_block, "%s %s", r->arch, name);
      char want[96];
      snprintf(want, sizeof want, "sk::mhc::post_pre_partial_kernel<%lld, %d>", (long long)hidden, r->fn_terms);
      cr_expect_str_eq(kernel_name(p, K_POST_PRE_PARTIAL), want);
      snprintf(want, sizeof want, "sk::mhc::pre_projection_kernel<%lld, %d, 2>", (long long)hidden, r->warps);
      cr_expect_str_eq(kernel_name(p, K_PRE_PROJECTION), want);
      snprintf(want, sizeof want, "sk::mhc::post_pre_fused_decode_kernel<%lld, __nv_bfloat16>", (long long)hidden);
      cr_expect_str_eq(kernel_name(p, K_POST_PRE_FUSED_DECODE), want);
      sk_plan_destroy(p);
    }
  }
}

/* Kernels a plan resolves: the variants its T range [1, max_tokens] can take, by the crossovers
 * and the knobs (no scalar kernels with SPARKINFER_MHC_SCALAR_MAX_T=0, no fused ones with
 * SPARKINFER_MHC_FUSED_DECODE=0, no projection with SPARKINFER_MHC_SPLIT_MIN_T=0, no fused
 * tensor-core pre partial when the split takes every T above the scalar crossover). */
Test(mhc_ops, plan_uses_the_kernels_of_its_token_range) {
  clear_knobs();
  enum { POST = 1 << K_POST, PP = 1 << K_PRE_PARTIAL, PF = 1 << K_PRE_FINALIZE, QP = 1 << K_POST_PRE_PARTIAL,
         QF = 1 << K_POST_PRE_FINALIZE, PS = 1 << K_PRE_PARTIAL_SCALAR, QS = 1 << K_POST_PRE_PARTIAL_SCALAR,
         PD = 1 << K_PRE_FUSED_DECODE, QD = 1 << K_POST_PRE_FUSED_DECODE, PJ = 1 << K_PRE_PROJECTION };
  enum { ALWAYS = POST | PF | QF, DECODE = PS | QS | PD | QD };
  static const struct {
    int64_t h, max_t;
    const char *knob, *value;
    unsigned want;
  } rows[] = {
      {4096, 1, NULL, NULL, ALWAYS | DECODE},
      {4096, 16, NULL, NULL, ALWAYS | DECODE},
      {4096, 17, NULL, NULL, ALWAYS | DECODE | PP | QP},
      {4096, 255, NULL, NULL, ALWAYS | DECODE | PP | QP},
      {4096, 256, NULL, NULL, ALWAYS | DECODE | PP | QP | PJ},
      {7168, 8, NULL, NULL, ALWAYS | DECODE},
      {7168, 9, NULL, NULL, ALWAYS | DECODE | PP | QP},
      {4096, 4096, "SPARKINFER_MHC_SCALAR_MAX_T", "0", ALWAYS | PP | QP | PJ},
      {4096, 16, "SPARKINFER_MHC_SCALAR_MAX_T", "0", ALWAYS | PP | QP},
      {4096, 4096, "SPARKINFER_MHC_SCALAR_MAX_T", "4096", ALWAYS | DECODE},
      {4096, 4096, "SPARKINFER_MHC_FUSED_DECODE", "0", ALWAYS | PS | QS | PP | QP | PJ},
      {4096, 4096, "SPARKINFER_MHC_SPLIT_MIN_T", "0", ALWAYS | DECODE | PP | QP},
      {4096, 4096, "SPARKINFER_MHC_SPLIT_MIN_T", "17", ALWAYS | DECODE | QP | PJ},
      {4096, 4096, "SPARKINFER_MHC_SPLIT_MIN_T", "1", ALWAYS | DECODE | QP | PJ},
      {4096, 100, "SPARKINFER_MHC_SPLIT_MIN_T", "101", ALWAYS | DECODE | PP | QP},
  };
  static const char *const archs[] = {"sm_90a", "sm_120a", "sm_121a"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    for (size_t a = 0; a < 3; a++) {
      if (rows[i].knob) setenv(rows[i].knob, rows[i].value, 1);
      sk_plan *p = must_select(caps_of(rows[i].h, rows[i].max_t, SK_MHC_NORM_NONE), archs[a], 0);
      if (rows[i].knob) unsetenv(rows[i].knob);
      unsigned got = 0;
      for (int k = 0; k < K_COUNT; k++) got |= kernel_name(p, k) ? 1u << k : 0;
      cr_expect_eq(got, rows[i].want, "%s H=%lld max_tokens=%lld %s=%s: kernels 0x%x, want 0x%x", archs[a],
                   (long long)rows[i].h, (long long)rows[i].max_t, rows[i].knob ? rows[i].knob : "",
                   rows[i].value ? rows[i].value : "", got, rows[i].want);
      sk_plan_destroy(p);
    }
}

/* The fused decode launch's T range (kernel comment 2c): the waiters, S + 1 per token, within half
 * the device's CTA slots, capped by the scalar crossover. H200, H = 7168: post_pre takes 10 CTAs
 * an SM (200 registers), 1320 slots, 29 waiters a token: T <= 22, the crossover 8 binds; DGX Spark
 * (48 SMs, ~9 CTAs an SM): T <= 7, so T = 8 keeps two launches. */
Test(mhc_ops, fused_decode_keeps_its_waiters_within_half_the_slots) {
  cr_expect_eq(sk_mhc_fused_max_t(10, 132, 7168, 8), 8);
  cr_expect_eq(sk_mhc_fused_max_t(10, 132, 7168, 1000), 22);
  cr_expect_eq(sk_mhc_fused_max_t(9, 48, 7168, 8), 7);
  cr_expect_eq(sk_mhc_fused_max_t(9, 48, 256, 16), 16);  /* 216 slots, 2 waiters a token: 108 */
  cr_expect_eq(sk_mhc_fused_max_t(1, 48, 65536, 16), 0); /* 257 waiters a token: no T fits */
  cr_expect_eq(sk_mhc_fused_max_t(0, 132, 256, 16), 0);  /* no occupancy figure (offline) */
  for (int64_t per_sm = 1; per_sm <= 32; per_sm++)
    for (int64_t h = 256; h <= 16384; h += 1280) {
      const int64_t t = sk_mhc_fused_max_t(per_sm, 170, h, 1 << 30);
      cr_expect_leq(t * (h / 256 + 1), per_sm * 170 / 2, "per_sm %lld H %lld: T %lld", (long long)per_sm, (long long)h,
                    (long long)t);
      cr_expect_gt((t + 1) * (h / 256 + 1), per_sm * 170 / 2);
    }
}

/* ---- the knobs ---------------------------------------------------------------------------------- */

/* Each value of `bad` for `knob` fails the selection on `arch` with SK_ERR_INVALID_ARGUMENT and a
 * message naming the knob (or, with `smem`, the shared memory it would need). */
static void expect_refused(const char *arch, const char *knob, const char *const *bad, size_t n, int smem) {
  for (size_t i = 0; i < n; i++) {
    setenv(knob, bad[i], 1);
    sk_plan *p = NULL;
    const sk_status s = select_plan(caps_of(2048, 4096, SK_MHC_NORM_NONE), arch, 0, &p);
    unsetenv(knob);
    cr_expect_eq(s, SK_ERR_INVALID_ARGUMENT, "%s %s=%s accepted", arch, knob, bad[i]);
    cr_expect_null(p);
    cr_expect(strstr(sk_last_error_message(), knob), "%s=%s: %s", knob, bad[i], sk_last_error_message());
    if (smem) cr_expect(strstr(sk_last_error_message(), "shared memory"), "%s", sk_last_error_message());
    sk_plan_destroy(p);
  }
}
#define REFUSED(arch, knob, smem, ...)                                                            \
  do {                                                                                            \
    static const char *const bad_[] = {__VA_ARGS__};                                              \
    expect_refused(arch, knob, bad_, sizeof bad_ / sizeof bad_[0], smem);                        \
  } while (0)

Test(mhc_ops, malformed_and_out_of_range_knobs_are_refused_naming_them) {
  clear_knobs();
  for (const char *const *k = sk_mhc_knobs; *k; k++) /* the list is what the selection reads */
    expect_refused("sm_90a", *k, (const char *const[]){"junk"}, 1, 0);
  REFUSED("sm_90a", "SPARKINFER_MHC_PROJECTION_WARPS", 0, "0", "9", "four", "-1", "4x", "0x4");
  REFUSED("sm_90a", "SPARKINFER_MHC_PROJECTION_STAGES", 0, "0", "3", "-1", "two");
  REFUSED("sm_90a", "SPARKINFER_MHC_STAGES", 0, "1", "5", "-2", "x", "2.5");
  REFUSED("sm_90a", "SPARKINFER_MHC_TOKENS_PER_CTA", 0, "8", "24", "1040", "-16", "abc");
  REFUSED("sm_90a", "SPARKINFER_MHC_SCALAR_MAX_T", 0, "-1", "abc", "8x", "4294967296", "2147483648", "1K");
  REFUSED("sm_90a", "SPARKINFER_MHC_SPLIT_MIN_T", 0, "-1", "many", "4294967296");
  REFUSED("sm_90a", "SPARKINFER_MHC_FN_SMEM_TERMS", 0, "4", "two", "-1");
  REFUSED("sm_90a", "SPARKINFER_MHC_OWN_SUMS", 0, "2", "maybe", "-1");
  REFUSED("sm_90a", "SPARKINFER_MHC_FUSED_DECODE", 0, "maybe", "-1", "10");
  /* Shapes a block of the target cannot hold: 8 projection warps x 2 buffers (168 KiB) on
   * sm_120's 99 KiB; 3 stages of the post_pre partial (172 KiB); 1 fn term beside 2 stages;
   * the own sums buffer beside 2 stages (106.5 KiB). */
  setenv("SPARKINFER_MHC_PROJECTION_STAGES", "2", 1);
  REFUSED("sm_120a", "SPARKINFER_MHC_PROJECTION_WARPS", 1, "8", "5");
  unsetenv("SPARKINFER_MHC_PROJECTION_STAGES");
  REFUSED("sm_121a", "SPARKINFER_MHC_STAGES", 1, "3", "4");
  REFUSED("sm_120a", "SPARKINFER_MHC_FN_SMEM_TERMS", 1, "1", "2", "3");
  REFUSED("sm_120a", "SPARKINFER_MHC_OWN_SUMS", 1, "1");
  REFUSED("sm_90a", "SPARKINFER_MHC_FN_SMEM_TERMS", 1, "3");
}

/* Knobs are read by the selection, never by bind or run: a bad value set after the plan changes
 * nothing. An empty value is unset. */
Test(mhc_ops, knobs_are_read_at_plan_time_only) {
  clear_knobs();
  setenv("SPARKINFER_MHC_SCALAR_MAX_T", "", 1);
  sk_plan *p = must_select(caps_of(256, 32, SK_MHC_NORM_NONE), "sm_120a", 0);
  cr_expect_eq(state_of(p)->scalar_max_t, 16, "an empty value is the default");
  for (const char *const *k = sk_mhc_knobs; *k; k++) setenv(*k, "junk", 1);
  sk_binding *b = bind_at(p, "post_pre", 3);
  cr_expect_eq(bound_of(b)->t, 3);
  cr_expect_neq(sk_run(b, NULL), SK_OK, "nothing is loaded for a select-only plan");
  cr_expect_null(strstr(sk_last_error_message(), "SPARKINFER_MHC"), "%s", sk_last_error_message());
  clear_knobs();
  sk_binding_destroy(b);
  sk_plan_destroy(p);
}

/* Projection shapes: which fit which block, and bind's tokens per projection CTA are whole
 * rounds of the chosen warps (16 x warps tokens, 1 to 16 rounds). */
Test(mhc_ops, projection_shape_knobs_and_rounds) {
  clear_knobs();
  static const struct {
    const char *arch, *warps, *stages;
    sk_status want;
    unsigned smem;
  } shapes[] = {
      {"sm_90a", "8", "2", SK_OK, 172160},  {"sm_90a", "8", "1", SK_OK, 106624},
      {"sm_120a", "8", "1", SK_ERR_INVALID_ARGUMENT, 0}, {"sm_120a", "6", "1", SK_OK, 90240},
      {"sm_121a", "3", "2", SK_OK, 90240},  {"sm_90a", "1", "1", SK_OK, 49280},
      {"sm_120a", "7", "1", SK_OK, 98432},  {"sm_121a", "4", "2", SK_ERR_INVALID_ARGUMENT, 0},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    setenv("SPARKINFER_MHC_PROJECTION_WARPS", shapes[i].warps, 1);
    setenv("SPARKINFER_MHC_PROJECTION_STAGES", shapes[i].stages, 1);
    sk_plan *p = NULL;
    const sk_status s = select_plan(caps_of(256, 4096, SK_MHC_NORM_NONE), shapes[i].arch, 0, &p);
    clear_knobs();
    cr_expect_eq(s, shapes[i].want, "%s %s x %s: %s", shapes[i].arch, shapes[i].warps, shapes[i].stages,
                 sk_last_error_message());
    if (s != SK_OK) continue;
    const int warps = atoi(shapes[i].warps);
    cr_expect_eq(state_of(p)->dynamic_smem[K_PRE_PROJECTION], shapes[i].smem);
    char want[64];
    snprintf(want, sizeof want, "sk::mhc::pre_projection_kernel<256, %d, %s>", warps, shapes[i].stages);
    cr_expect_str_eq(kernel_name(p, K_PRE_PROJECTION), want);
    sk_binding *b = bind_at(p, "pre", 4096);
    const int64_t tpc = bound_of(b)->work_per_cta, step = 16 * warps;
    cr_expect_eq(symbol(b, "SPLIT"), 1);
    cr_expect(tpc >= step && tpc <= 16 * step && tpc % step == 0, "%s %d warps: %lld tokens per CTA", shapes[i].arch,
              warps, (long long)tpc);
    sk_binding_destroy(b);
    sk_plan_destroy(p);
  }
}

/* The post_pre partial's shared memory: fn terms default to the most (up to 2) that fit with the
 * chosen stages; the own sums buffer defaults to on where it fits beside them (2 stages only). */
Test(mhc_ops, partial_shared_memory_knobs) {
  clear_knobs();
  static const struct {
    const char *arch, *stages, *terms, *own;
    sk_status want;
    int stages_flag, fn_terms;
    unsigned smem;
  } rows[] = {
      {"sm_90a", "2", NULL, NULL, SK_OK, 18, 2, 207488},  {"sm_90a", "2", "2", "0", SK_OK, 2, 2, 182912},
      {"sm_90a", "2", "0", "1", SK_OK, 18, 0, 109184},    {"sm_90a", "2", "0", "0", SK_OK, 2, 0, 84608},
      {"sm_90a", "3", NULL, NULL, SK_OK, 3, 1, 225152},   {"sm_90a", "3", "0", "0", SK_OK, 3, 0, 176000},
      {"sm_90a", "3", "1", "1", SK_ERR_INVALID_ARGUMENT}, {"sm_90a", "3", "2", NULL, SK_ERR_INVALID_ARGUMENT},
      {"sm_90a", "4", NULL, NULL, SK_OK, 4, 0, 218240},   {"sm_90a", "4", "1", NULL, SK_ERR_INVALID_ARGUMENT},
      {"sm_120a", "2", NULL, NULL, SK_OK, 2, 0, 84608},   {"sm_121a", "2", "0", "0", SK_OK, 2, 0, 84608},
      {"sm_120a", "3", NULL, NULL, SK_ERR_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    setenv("SPARKINFER_MHC_STAGES", rows[i].stages, 1);
    if (rows[i].terms) setenv("SPARKINFER_MHC_FN_SMEM_TERMS", rows[i].terms, 1);
    if (rows[i].own) setenv("SPARKINFER_MHC_OWN_SUMS", rows[i].own, 1);
    sk_plan *p = NULL;
    const sk_status s = select_plan(caps_of(256, 64, SK_MHC_NORM_NONE), rows[i].arch, 0, &p);
    clear_knobs();
    cr_expect_eq(s, rows[i].want, "%s stages %s terms %s own %s: %s", rows[i].arch, rows[i].stages,
                 rows[i].terms ? rows[i].terms : "-", rows[i].own ? rows[i].own : "-", sk_last_error_message());
    if (s != SK_OK) {
      cr_expect(strstr(sk_last_error_message(), "SPARKINFER_MHC_"), "%s", sk_last_error_message());
      continue;
    }
    const mhc_state *st = state_of(p);
    cr_expect_eq(st->stages, rows[i].stages_flag, "row %zu: stages %d", i, st->stages);
    cr_expect_eq(st->fn_smem_terms, rows[i].fn_terms, "row %zu", i);
    cr_expect_eq(st->dynamic_smem[K_POST_PRE_PARTIAL], rows[i].smem, "row %zu: %u", i, st->dynamic_smem[K_POST_PRE_PARTIAL]);
    sk_binding *b = bind_at(p, "post_pre", 64);
    cr_expect_eq(bound_of(b)->stages, rows[i].stages_flag, "bind passes the plan's stages (with the own-sums flag)");
    sk_binding_destroy(b);
    sk_plan_destroy(p);
  }
}

/* ---- bind's launch geometry against its models -------------------------------------------------- */

/* The most segments (stretches within one tile) any CTA runs when items go to CTAs in ranges of
 * gpc: every CTA walked. */
static int64_t most_segments(int64_t items, int64_t per_tile, int64_t gpc) {
  int64_t most = 0;
  for (int64_t first = 0; first < items; first += gpc) {
    const int64_t last = (first + gpc < items ? first + gpc : items) - 1;
    const int64_t seg = last / per_tile - first / per_tile + 1;
    if (seg > most) most = seg;
  }
  return most;
}

/* Tensor-core partials: waves x (groups per CTA + 5 x the most segments). */
static int64_t partial_cost(int64_t items, int64_t per_tile, int64_t gpc, int64_t slots) {
  return sk_cdiv(sk_cdiv(items, gpc), slots) * (gpc + 5 * most_segments(items, per_tile, gpc));
}

/* Projection: waves x (tokens per CTA + 16). */
static int64_t projection_cost(int64_t t, int64_t tiles, int64_t tpc, int64_t slots) {
  return sk_cdiv(sk_cdiv(t, tpc) * tiles, slots) * (tpc + 16);
}

/* For every arch table device, entry, H and T: the finalize's hidden per CTA, the SPLIT / FUSED
 * symbols, the partials' groups per CTA (a candidate of the model - one balanced wave of the
 * resident CTA slots, 1 or 2 groups more, or whole tiles - at the model's least cost, never more
 * CTAs than slots; pre 4 CTAs an SM, post_pre 1) and the projection's tokens per CTA (whole rounds
 * of its warps, the least cost over all of them). */
Test(mhc_ops, bind_geometry_follows_the_models, .timeout = 120) {
  clear_knobs();
  static const int64_t hs[] = {256, 1280, 2048, 4096, 7168}, ts[] = {1, 2, 8, 9, 16, 17, 100, 130, 255, 256, 777, 1024, 4096, 4133, 8192};
  static const struct {
    const char *arch;
    size_t device;
  } devs[] = {{"sm_90a", 0}, {"sm_120a", 0}, {"sm_120a", 1}, {"sm_121a", 0}};
  int checked = 0;
  for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++)
    for (size_t hi = 0; hi < sizeof hs / sizeof hs[0]; hi++) {
      const int64_t h = hs[hi], tiles = h / 256;
      sk_plan *p = must_select(caps_of(h, 8192, SK_MHC_NORM_NONE), devs[d].arch, devs[d].device);
      const mhc_state *st = state_of(p);
      const int64_t sms = st->sm_count;
      for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        const int64_t t = ts[ti];
        sk_binding *post = bind_at(p, "post", t);
        cr_expect_eq(symbol(post, "FUSED") + symbol(post, "SPLIT"), 0, "post is one kernel");
        sk_binding_destroy(post);
        for (int pre = 0; pre < 2; pre++) {
          sk_binding *b = bind_at(p, pre ? "pre" : "post_pre", t);
          const mhc_bound *g = bound_of(b);
          const char *what = pre ? "pre" : "post_pre";
          cr_expect_eq(g->t, t);
          cr_expect_eq(g->stages, st->stages);
          /* Finalize: the whole row per CTA unless T is small against the SMs. */
          const int64_t want_hpc = t < 2 * sms / (h / 1024 > 0 ? h / 1024 : 1) ? (h % 1024 == 0 ? 1024 : h % 512 == 0 ? 512 : 256) : h;
          cr_expect_eq(g->hpc, want_hpc, "%s %s H=%lld T=%lld: hidden per finalize CTA %d", devs[d].arch, what,
                       (long long)h, (long long)t, g->hpc);
          cr_expect_eq(h % g->hpc, 0);
          const int split = pre && t > st->scalar_max_t && t >= 256;
          cr_expect_eq(symbol(b, "SPLIT"), split, "%s %s H=%lld T=%lld", devs[d].arch, what, (long long)h, (long long)t);
          cr_expect_eq(symbol(b, "FUSED"), 0, "offline plans never fuse (no CTA slots counted)");
          cr_expect_eq(g->fused, 0);
          if (split) {
            const int64_t step = 16 * st->projection_warps, tpc = g->work_per_cta, slots = sms;
            cr_expect(tpc >= step && tpc <= 16 * step && tpc % step == 0, "%s H=%lld T=%lld: tpc %lld", devs[d].arch,
                      (long long)h, (long long)t, (long long)tpc);
            for (int64_t c = step; c <= 16 * step; c += step) {
              cr_expect_leq(projection_cost(t, tiles, tpc, slots), projection_cost(t, tiles, c, slots),
                            "%s H=%lld T=%lld: %lld tokens per CTA cost more than %lld", devs[d].arch, (long long)h,
                            (long long)t, (long long)tpc, (long long)c);
              if (c >= t) break;
            }
          } else {
            const int64_t per_tile = sk_cdiv(t, 16), items = per_tile * tiles, slots = sms * (pre ? 4 : 1),
                          gpc = g->work_per_cta, base = sk_cdiv(items, slots), tiled = sk_cdiv(base, per_tile) * per_tile;
            cr_expect(gpc == base || gpc == base + 1 || gpc == base + 2 || gpc == tiled,
                      "%s %s H=%lld T=%lld: %lld groups per CTA (balanced %lld, tiled %lld)", devs[d].arch, what,
                      (long long)h, (long long)t, (long long)gpc, (long long)base, (long long)tiled);
            cr_expect_leq(sk_cdiv(items, gpc), slots, "more CTAs than slots");
            const int64_t cands[4] = {base, base + 1, base + 2, tiled};
            for (int c = 0; c < 4; c++)
              cr_expect_leq(partial_cost(items, per_tile, gpc, slots), partial_cost(items, per_tile, cands[c], slots),
                            "%s %s H=%lld T=%lld: %lld groups per CTA cost more than %lld", devs[d].arch, what,
                            (long long)h, (long long)t, (long long)gpc, (long long)cands[c]);
          }
          sk_binding_destroy(b);
          checked++;
        }
      }
      sk_plan_destroy(p);
    }
  cr_expect_eq(checked, 4 * 5 * 15 * 2);
}

/* SPARKINFER_MHC_SPLIT_MIN_T / _SCALAR_MAX_T move the split: T at or below the scalar crossover
 * never splits; 0 never splits. SPARKINFER_MHC_TOKENS_PER_CTA sets the groups per partial CTA and
 * the tokens per projection CTA. */
Test(mhc_ops, crossover_and_work_knobs_steer_bind) {
  clear_knobs();
  setenv("SPARKINFER_MHC_SCALAR_MAX_T", "8", 1);
  static const struct {
    const char *knob;
    int64_t t, split;
  } rows[] = {{"0", 4096, 0}, {"0", 9, 0}, {"1", 8, 0}, {"1", 9, 1}, {"100", 99, 0}, {"100", 100, 1}, {"100", 4096, 1}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    setenv("SPARKINFER_MHC_SPLIT_MIN_T", rows[i].knob, 1);
    sk_plan *p = must_select(caps_of(256, 4096, SK_MHC_NORM_NONE), "sm_90a", 0);
    sk_binding *b = bind_at(p, "pre", rows[i].t);
    cr_expect_eq(symbol(b, "SPLIT"), rows[i].split, "SPLIT_MIN_T=%s T=%lld", rows[i].knob, (long long)rows[i].t);
    sk_binding_destroy(b);
    sk_plan_destroy(p);
  }
  clear_knobs();
  setenv("SPARKINFER_MHC_SPLIT_MIN_T", "1", 1);
  sk_plan *p = must_select(caps_of(256, 4096, SK_MHC_NORM_NONE), "sm_90a", 0);
  clear_knobs();
  sk_binding *b16 = bind_at(p, "pre", 16), *b17 = bind_at(p, "pre", 17);
  cr_expect_eq(symbol(b16, "SPLIT"), 0, "H = 256, T = 16: the scalar partials by default");
  cr_expect_eq(symbol(b17, "SPLIT"), 1, "H = 256, T = 17: above the default crossover");
  sk_binding_destroy(b16);
  sk_binding_destroy(b17);
  sk_plan_destroy(p);
  setenv("SPARKINFER_MHC_TOKENS_PER_CTA", "48", 1);
  p = must_select(caps_of(2048, 8192, SK_MHC_NORM_NONE), "sm_90a", 0);
  clear_knobs();
  sk_binding *pp = bind_at(p, "post_pre", 4096), *pr = bind_at(p, "pre", 4096), *small = bind_at(p, "pre", 100);
  cr_expect_eq(bound_of(pp)->work_per_cta, 3, "48 tokens: 3 groups per partial CTA");
  cr_expect_eq(bound_of(small)->work_per_cta, 3);
  cr_expect_eq(bound_of(pr)->work_per_cta, 48, "48 tokens per projection CTA");
  sk_binding_destroy(pp);
  sk_binding_destroy(pr);
  sk_binding_destroy(small);
  sk_plan_destroy(p);
}

/* ---- manifests ------------------------------------------------------------------------------------ */

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *s = text; (s = strstr(s, needle)) != NULL; s += strlen(needle)) n++;
  return n;
}

/* A manifest's norm.mhc entry builds what the plans of its caps use, for every device of the arch
 * (any multiple of 256: 1280 here); bad caps fail the manifest. */
Test(mhc_ops, sk_warm_builds_what_the_plans_use, .init = setup, .fini = teardown, .timeout = 240) {
  clear_knobs();
  char *out = NULL;
  cr_assert_eq(tu_warm_dry_run("{\"op\":\"norm.mhc\",\"caps\":{\"hidden\":1280,\"max_tokens\":16,\"norm_weight\":\"bf16\"}}",
                               "sm_120a", &out),
               0, "%s", out);
  cr_expect_eq(count_lines_with(out, "sk::mhc::"), 7, "decode sizes: post, 2 finalizes, 2 scalar partials, 2 fused: %s", out);
  cr_expect_null(strstr(out, "partial_kernel<1280"), "no tensor-core partial below the crossover: %s", out);
  free(out);
  char m[600], cache[700], warm[512];
  snprintf(m, sizeof m, "%s/m.json", dir);
  snprintf(cache, sizeof cache, "%s/c", dir);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"norm.mhc\",\"caps\":"
                   "{\"hidden\":1280,\"max_tokens\":4096,\"norm_weight\":\"bf16\"}}]}");
  char *argv[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", cache, "--json", "--quiet", NULL};
  out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "%s", out);
  cr_expect_eq(tu_json_num(out, "kernels"), 10, "every variant (three partials, fused decode, projection) compiles: %s", out);
  free(out);
  out = NULL;
  cr_expect_eq(tu_warm_dry_run("{\"op\":\"norm.mhc\",\"caps\":{\"hidden\":1000}}", "sm_120a", &out), 2);
  free(out);
  out = NULL;
  cr_expect_eq(tu_warm_dry_run("{\"op\":\"norm.mhc\",\"caps\":{\"hidden\":1024,\"colour\":1}}", "sm_120a", &out), 2);
  free(out);
}

/* The variant knobs name other kernels, and sk-warm's op manifests read them as a plan does, so a
 * cache warmed under the same environment serves the frozen process (docs/env.md). */
Test(mhc_ops, sk_warm_prebuilds_the_variants_the_knobs_name, .init = setup, .fini = teardown) {
  clear_knobs();
  char m[600], warm[512];
  snprintf(m, sizeof m, "%s/m.json", dir);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"norm.mhc\",\"caps\":"
                   "{\"hidden\":1280,\"max_tokens\":4096}}]}");
  char *argv[] = {warm, "--manifest", m, "--arch", "sm_90a", "--dry-run", NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "%s", out);
  cr_expect(strstr(out, "post_pre_partial_kernel<1280, 2>") && strstr(out, "pre_projection_kernel<1280, 4, 2>"),
            "sm_90a defaults: %s", out);
  free(out);
  char fn_terms[] = "SPARKINFER_MHC_FN_SMEM_TERMS=0", warps[] = "SPARKINFER_MHC_PROJECTION_WARPS=2";
  char *env[] = {fn_terms, warps, NULL};
  out = NULL;
  cr_assert_eq(tu_run(argv, env, &out), 0, "%s", out);
  cr_expect(strstr(out, "post_pre_partial_kernel<1280, 0>") && strstr(out, "pre_projection_kernel<1280, 2, 2>"),
            "with the knobs: %s", out);
  cr_expect_null(strstr(out, "post_pre_partial_kernel<1280, 2>"), "%s", out);
  free(out);
  char bad[] = "SPARKINFER_MHC_FN_SMEM_TERMS=7";
  char *env_bad[] = {bad, NULL};
  cr_expect_eq(tu_run(argv, env_bad, NULL), 2, "a bad knob fails the manifest");
}
