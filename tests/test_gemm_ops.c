/* The gemm ops' host side without a GPU, where the harness's generic CPU suite (tests/test_ops.c)
 * does not reach: the kernel selection per arch (a pure function of caps, shape and the arch's
 * properties: literal expectations for every device of the arch table, sm_90a's H200 measured,
 * the SM120 devices derived from specs), the regimes a plan resolves (every M of 1..max_m binds
 * the kernel gemm_config picks for that M, with the overrides too), sk_gemm_describe,
 * sk_gemm_workspace_bytes, weight packing, the caps rules and the overrides' parsing (each refused
 * with a message), the manifest expansion, the decode work split (decode_schedule.cuh), and
 * offline plans (compiled for an explicit arch, run refused). Device pointers are fake: bind never
 * dereferences them. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/ref.h"
#include "gemm/gemm_host.h"
#include "gemm/ref.h"
#include "op.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/quantization.h"
#include "testutil.h"

#include "gemm/decode_schedule.cuh" /* plain C11: the decode kernel's work split */

#define U8 ((DLDataType){kDLUInt, 8, 1})
#define F32 ((DLDataType){kDLFloat, 32, 1})
#define BF16 ((DLDataType){kDLBfloat, 16, 1})
static const DLDataType out_dt[3] = {{kDLBfloat, 16, 1}, {kDLFloat, 16, 1}, {kDLFloat, 32, 1}};
static const char *const archs[] = {"sm_90a", "sm_120a", "sm_121a"};

/* ---- helpers --------------------------------------------------------------------------------- */

/* The tuning a plan for device `d` reads (overrides included). */
static gemm_tuning tuning_of(const sk_arch_props *d) {
  gemm_tuning t;
  cr_assert_eq(gemm_tuning_read(d, &t), SK_OK, "%s", sk_last_error_message());
  return t;
}

static sk_gemm_caps mm_caps(int recipe, int out, int64_t n, int64_t k, int64_t max_m) {
  sk_gemm_caps c = SK_GEMM_CAPS_INIT;
  c.recipe = (sk_gemm_recipe)recipe;
  c.out = (sk_dtype)out;
  c.n = n;
  c.k = k;
  c.max_m = max_m;
  return c;
}

static sk_gemm_linear_caps linear_caps(int64_t n, int64_t k, int64_t max_m, int out) {
  sk_gemm_linear_caps c = SK_GEMM_LINEAR_CAPS_INIT;
  c.n = n;
  c.k = k;
  c.max_m = max_m;
  c.out = (sk_dtype)out;
  return c;
}

static sk_status select_plan(const char *op, const void *caps, const sk_arch_props *props, sk_plan **p) {
  const sk_op_def *def = sk_find_op(op);
  cr_assert(def, "no op %s", op);
  return sk_plan_select_only(def, caps, props, p);
}

/* Fake device views of one bind: up to 6 tensors at distinct addresses (the views point into
 * the struct: fill it in place, never copy it). */
typedef struct views {
  int64_t shape[6][2];
  DLTensor t[6];
  const DLTensor *p[6];
  size_t n;
} views;

static void view(views *v, size_t i, DLDataType dt, int ndim, int64_t d0, int64_t d1) {
  v->shape[i][0] = d0;
  v->shape[i][1] = d1;
  v->t[i] = tu_fake_device_tensor(((uintptr_t)1 << 40) + (uintptr_t)i * ((uintptr_t)1 << 36), dt, ndim, v->shape[i]);
  v->p[i] = &v->t[i];
}

static int64_t scale_vec(int r) { return r == SK_GEMM_NVFP4 ? 16 : r <= SK_GEMM_MXFP8 ? 32 : 128; }
static int64_t code_cols(int r, int64_t k) { return r <= SK_GEMM_MXFP4 ? k / 2 : k; }

/* gemm.blockscaled's "mm" tensors for M x N x K (alpha absent). */
static void mm_views(views *v, int r, int out, int64_t m, int64_t n, int64_t k) {
  memset(v, 0, sizeof *v);
  v->n = 6;
  view(v, 0, U8, 2, m, code_cols(r, k));
  view(v, 2, U8, 2, n, code_cols(r, k));
  if (r == SK_GEMM_BLOCK_FP8) {
    view(v, 1, F32, 2, m, k / 128);
    view(v, 3, F32, 2, sk_cdiv(n, 128), k / 128);
  } else if (r != SK_GEMM_TENSOR_FP8) {
    view(v, 1, U8, 1, (int64_t)sk_swizzled_scale_bytes(m, k / scale_vec(r)), 0);
    view(v, 3, U8, 1, (int64_t)sk_swizzled_scale_bytes(n, k / scale_vec(r)), 0);
  }
  view(v, 5, out_dt[out], 2, m, n);
}

enum { L_MXFP8, L_TENSOR_FP8, L_BLOCK_FP8 };
static const char *const linear_ops[3] = {"gemm.mxfp8_linear", "gemm.tensor_fp8_linear", "gemm.block_fp8_linear"};
static const int linear_recipe[3] = {SK_GEMM_MXFP8, SK_GEMM_TENSOR_FP8, SK_GEMM_BLOCK_FP8};

/* A linear op's tensors for M tokens (alpha absent). */
static void linear_views(views *v, int kind, int out, int64_t m, int64_t n, int64_t k) {
  memset(v, 0, sizeof *v);
  view(v, 0, kind == L_TENSOR_FP8 ? U8 : BF16, 2, m, k);
  view(v, 1, U8, 2, n, k);
  if (kind == L_MXFP8) {
    view(v, 2, U8, 1, (int64_t)sk_swizzled_scale_bytes(n, k / 32), 0);
    view(v, 4, out_dt[out], 2, m, n);
    v->n = 5;
  } else if (kind == L_TENSOR_FP8) {
    view(v, 3, out_dt[out], 2, m, n);
    v->n = 4;
  } else {
    view(v, 2, F32, 2, sk_cdiv(n, 128), k / 128);
    view(v, 3, out_dt[out], 2, m, n);
    v->n = 4;
  }
}

static int64_t symbol(const sk_binding *b, const char *name) {
  int64_t v = -1;
  cr_assert_eq(sk_binding_symbol(b, name, &v), SK_OK, "%s", sk_last_error_message());
  return v;
}

static void cfg_name(const gemm_cfg *c, char name[160]) {
  char params[128];
  gemm_cfg_strings(c, name, params);
}

/* A fake scratch of the plan's size, or none. */
static void *fake_scratch(const sk_plan *p, size_t *bytes) {
  sk_scratch_spec s;
  cr_assert_eq(sk_plan_scratch_spec(p, &s), SK_OK);
  *bytes = s.bytes;
  return s.bytes ? (void *)((uintptr_t)1 << 46) : NULL;
}

/* ---- the selection per arch -------------------------------------------------------------------- */

/* What each device of the arch table gets for a few shapes: kernel, CTAs of the launch (decode:
 * the split-K / stream-K grid with a workspace), dynamic shared memory. The decode kernels
 * (row tiles, row groups) depend on recipe, N, K and M only; their grids on the SM count: split-K
 * aims at 2 CTAs per SM and becomes stream-K where that grid splits K beyond the resident CTAs
 * (launch bounds x SMs); the tiled tiles on one wave of SMs; the SM120 block-scaled kernel (FP4,
 * MXFP8 at M > 16 on sm_120a / sm_121a) has 99 KB-derived stages. */
typedef struct pick {
  const char *name;
  int64_t ctas;
  unsigned smem;
} pick;
typedef struct sel_case {
  int recipe, out;
  int64_t m, n, k;
  pick h200, rtx5090, rtx_pro_6000, spark; /* sm_90a's H200, sm_120a's RTX 5090 and RTX PRO 6000, sm_121a's DGX Spark */
} sel_case;

static const sel_case sel_cases[] = {
    /* nvfp4 M = 1 on 8192 x 8192: 256 tiles of 32 rows, 64 steps; split in 2 up to 256 >= 2 x SMs */
    {0, 0, 1, 8192, 8192, {"sk::gemm::gemv_decode<0, 0, 1, 4, 2, 1>", 512, 0}, {"sk::gemm::gemv_decode<0, 0, 1, 4, 2, 1>", 512, 0},
     {"sk::gemm::gemv_decode<0, 0, 1, 4, 2, 1>", 512, 0}, {"sk::gemm::gemv_decode<0, 0, 1, 4, 2, 1>", 256, 0}},
    /* mxfp8 M = 16: 2 row groups of 32 rows, 128 interleaved tiles, 3 splits */
    {2, 0, 16, 8192, 8192, {"sk::gemm::gemv_decode<2, 0, 2, 4, 2, 2>", 384, 0}, {"sk::gemm::gemv_decode<2, 0, 2, 4, 2, 2>", 384, 0},
     {"sk::gemm::gemv_decode<2, 0, 2, 4, 2, 2>", 384, 0}, {"sk::gemm::gemv_decode<2, 0, 2, 4, 2, 2>", 128, 0}},
    /* tensor_fp8 fp16 M = 4 on 28672 x 4096: 896 tiles, never split */
    {4, 1, 4, 28672, 4096, {"sk::gemm::gemv_decode<4, 1, 1, 4, 2, 1>", 896, 0}, {"sk::gemm::gemv_decode<4, 1, 1, 4, 2, 1>", 896, 0},
     {"sk::gemm::gemv_decode<4, 1, 1, 4, 2, 1>", 896, 0}, {"sk::gemm::gemv_decode<4, 1, 1, 4, 2, 1>", 896, 0}},
    /* block_fp8 M = 1 on a small layer: 64 tiles of 16 rows, ceil(2 x SMs / 64) splits */
    {3, 0, 1, 1024, 8192, {"sk::gemm::gemv_decode<3, 0, 1, 4, 1, 1>", 320, 0}, {"sk::gemm::gemv_decode<3, 0, 1, 4, 1, 1>", 384, 0},
     {"sk::gemm::gemv_decode<3, 0, 1, 4, 1, 1>", 384, 0}, {"sk::gemm::gemv_decode<3, 0, 1, 4, 1, 1>", 128, 0}},
    /* block_fp8 M = 16: 256 tiles x 2 splits = 512 CTAs; stream-K over the resident 3 per SM where
     * 512 exceeds them (H200 396, RTX 5090 510), split-K on the RTX PRO 6000 (564), whole tiles
     * on the Spark (256 >= 96) */
    {3, 0, 16, 8192, 8192, {"sk::gemm::gemv_decode<3, 0, 2, 4, 2, 1>", 396, 0}, {"sk::gemm::gemv_decode<3, 0, 2, 4, 2, 1>", 510, 0},
     {"sk::gemm::gemv_decode<3, 0, 2, 4, 2, 1>", 512, 0}, {"sk::gemm::gemv_decode<3, 0, 2, 4, 2, 1>", 256, 0}},
    /* tensor_fp8 M = 64: 64 column tiles fill the Spark's 48 SMs (64x128), not the others (64x64) */
    {4, 0, 64, 8192, 4096, {"sk::gemm::mma_tiled<4, 0, 64, 64, 128, 2, 2, 4>", 128, 65536},
     {"sk::gemm::mma_tiled<4, 0, 64, 64, 128, 2, 2, 4>", 128, 65536}, {"sk::gemm::mma_tiled<4, 0, 64, 64, 128, 2, 2, 4>", 128, 65536},
     {"sk::gemm::mma_tiled<4, 0, 64, 128, 128, 1, 4, 3>", 64, 73728}},
    /* tensor_fp8 M = 640: 5 x 32 = 160 tiles of 128 x 128 fill 132 and 48 SMs, not 170 or 188 */
    {4, 0, 640, 4096, 4096, {"sk::gemm::mma_tiled<4, 0, 128, 128, 128, 2, 2, 3>", 160, 98304},
     {"sk::gemm::mma_tiled<4, 0, 128, 64, 128, 2, 2, 3>", 320, 73728}, {"sk::gemm::mma_tiled<4, 0, 128, 64, 128, 2, 2, 3>", 320, 73728},
     {"sk::gemm::mma_tiled<4, 0, 128, 128, 128, 2, 2, 3>", 160, 98304}},
    /* block_fp8 prefill: the portable kernel everywhere (99888 bytes fit the SM120 99 KB) */
    {3, 0, 4096, 8192, 8192, {"sk::gemm::mma_tiled<3, 0, 128, 128, 128, 2, 4, 3>", 2048, 99888},
     {"sk::gemm::mma_tiled<3, 0, 128, 128, 128, 2, 4, 3>", 2048, 99888}, {"sk::gemm::mma_tiled<3, 0, 128, 128, 128, 2, 4, 3>", 2048, 99888},
     {"sk::gemm::mma_tiled<3, 0, 128, 128, 128, 2, 4, 3>", 2048, 99888}},
    /* nvfp4 prefill: the SM120 block-scaled kernel on sm_120a / sm_121a, 4 stages */
    {0, 0, 4096, 8192, 8192, {"sk::gemm::mma_tiled<0, 0, 128, 128, 128, 2, 2, 3>", 2048, 55296},
     {"sk::gemm::sm120_blockscaled<0, 0, 128, 128, 128, 2, 4, 4>", 2048, 73728},
     {"sk::gemm::sm120_blockscaled<0, 0, 128, 128, 128, 2, 4, 4>", 2048, 73728},
     {"sk::gemm::sm120_blockscaled<0, 0, 128, 128, 128, 2, 4, 4>", 2048, 73728}},
    /* tensor_fp8 M = 64 on exactly 132 column tiles: 64x128 where they fill the SMs (H200: 132 >= 132) */
    {4, 0, 64, 16896, 4096, {"sk::gemm::mma_tiled<4, 0, 64, 128, 128, 1, 4, 3>", 132, 73728},
     {"sk::gemm::mma_tiled<4, 0, 64, 64, 128, 2, 2, 4>", 264, 65536}, {"sk::gemm::mma_tiled<4, 0, 64, 64, 128, 2, 2, 4>", 264, 65536},
     {"sk::gemm::mma_tiled<4, 0, 64, 128, 128, 1, 4, 3>", 132, 73728}},
    /* tensor_fp8 M = 512: 4 x 32 = 128 tiles of 128 x 128, one short of the H200's 132 */
    {4, 0, 512, 4096, 4096, {"sk::gemm::mma_tiled<4, 0, 128, 64, 128, 2, 2, 3>", 256, 73728},
     {"sk::gemm::mma_tiled<4, 0, 128, 64, 128, 2, 2, 3>", 256, 73728}, {"sk::gemm::mma_tiled<4, 0, 128, 64, 128, 2, 2, 3>", 256, 73728},
     {"sk::gemm::mma_tiled<4, 0, 128, 128, 128, 2, 2, 3>", 128, 98304}},
    /* mxfp4 prefill: 2x2 warps on the portable kernel, 4 stages on the SM120 one */
    {1, 0, 2048, 4096, 4096, {"sk::gemm::mma_tiled<1, 0, 128, 128, 128, 2, 2, 3>", 512, 52224},
     {"sk::gemm::sm120_blockscaled<1, 0, 128, 128, 128, 2, 4, 4>", 512, 69632},
     {"sk::gemm::sm120_blockscaled<1, 0, 128, 128, 128, 2, 4, 4>", 512, 69632},
     {"sk::gemm::sm120_blockscaled<1, 0, 128, 128, 128, 2, 4, 4>", 512, 69632}},
    /* mxfp8 fp32 M = 100: SM120 64-row tiles, 3 stages */
    {2, 2, 100, 4096, 4096, {"sk::gemm::mma_tiled<2, 2, 64, 64, 128, 2, 2, 4>", 128, 69632},
     {"sk::gemm::sm120_blockscaled<2, 2, 64, 128, 128, 1, 4, 3>", 64, 76032},
     {"sk::gemm::sm120_blockscaled<2, 2, 64, 128, 128, 1, 4, 3>", 64, 76032},
     {"sk::gemm::sm120_blockscaled<2, 2, 64, 128, 128, 1, 4, 3>", 64, 76032}},
};

static const pick *pick_for(const sel_case *c, const char *device) {
  if (!strcmp(device, "H200")) return &c->h200;
  if (!strcmp(device, "RTX 5090")) return &c->rtx5090;
  if (!strcmp(device, "RTX PRO 6000")) return &c->rtx_pro_6000;
  if (!strcmp(device, "DGX Spark")) return &c->spark;
  return NULL;
}

Test(gemm_ops, selection_per_arch_device) {
  const char *const want_devices[] = {"H200", "RTX 5090", "RTX PRO 6000", "DGX Spark"};
  const int want_sms[] = {132, 170, 188, 48};
  int seen[4] = {0};
  for (size_t a = 0; a < 3; a++) {
    sk_arch_props devs[8];
    const size_t nd = sk_arch_table_devices(archs[a], devs, 8);
    for (size_t d = 0; d < nd; d++) {
      for (int w = 0; w < 4; w++)
        if (!strcmp(devs[d].device, want_devices[w])) {
          seen[w] = 1;
          cr_expect_eq(devs[d].sm_count, want_sms[w], "%s: %d SMs", devs[d].device, devs[d].sm_count);
          cr_expect_eq(devs[d].smem_per_block, w == 0 ? 227u * 1024 : 99u * 1024, "%s", devs[d].device);
        }
      const gemm_tuning t = tuning_of(&devs[d]);
      /* the arch row: split-K target 2 everywhere, SM120 stages only on the SM120 targets */
      cr_expect_eq(t.splitk_ctas_per_sm, 2);
      cr_expect_eq(t.sm120_stages[0], a ? 4 : 0, "%s", archs[a]);
      cr_expect_eq(t.sm120_stages[1], a ? 4 : 0, "%s", archs[a]);
      cr_expect_eq(t.sm120_stages[2], a ? 3 : 0, "%s", archs[a]);
      cr_expect_eq(t.linear_fused, 0);
      for (size_t i = 0; i < sizeof sel_cases / sizeof *sel_cases; i++) {
        const sel_case *c = &sel_cases[i];
        const pick *want = pick_for(c, devs[d].device);
        if (!want) continue;
        gemm_cfg cfg;
        gemm_config(&t, c->recipe, c->out, c->m, c->n, c->k, &cfg);
        char name[160];
        cfg_name(&cfg, name);
        const int64_t ctas = gemm_path_is_decode(cfg.path) ? gemm_decode_ctas(&t, &cfg, c->m, c->n, c->k)
                                                           : (int64_t)cfg.grid.x * cfg.grid.y;
        cr_expect_str_eq(name, want->name, "%s %s case %zu", archs[a], devs[d].device, i);
        cr_expect_eq(ctas, want->ctas, "%s %s case %zu (%s): %lld CTAs", archs[a], devs[d].device, i, name, (long long)ctas);
        cr_expect_eq(cfg.smem, want->smem, "%s %s case %zu", archs[a], devs[d].device, i);
        cr_expect_leq(cfg.smem, devs[d].smem_per_block, "%s %s case %zu", archs[a], devs[d].device, i);
      }
    }
  }
  for (int w = 0; w < 4; w++) cr_expect(seen[w], "the arch table lists no %s", want_devices[w]);
  /* sm_120 without the 'a' suffix has no SM120 instructions: the portable kernel */
  sk_arch_props plain;
  sk_arch_table_devices("sm_120", &plain, 1);
  const gemm_tuning t = tuning_of(&plain);
  gemm_cfg cfg;
  gemm_config(&t, SK_GEMM_NVFP4, 0, 4096, 8192, 8192, &cfg);
  cr_expect_eq(cfg.path, PATH_TILED);
  cr_expect_eq(gemm_arch_row_for("sm_121a"), gemm_arch_row_for("sm_120"));
  cr_expect_neq(gemm_arch_row_for("sm_100a"), gemm_arch_row_for("sm_120a"));
  cr_expect_eq(gemm_arch_row_for("sm_89"), gemm_arch_row_for("sm_90a"));
}

/* The heuristic's configurations fit every arch table device's shared memory per block; an
 * override that does not is refused when the plan is made, naming the variable. */
Test(gemm_ops, configurations_fit_shared_memory) {
  const int64_t ms[] = {1, 9, 17, 128, 129, 4096}, ns[] = {128, 2880, 8192, 28672};
  for (size_t a = 0; a < 3; a++) {
    sk_arch_props devs[8];
    const size_t nd = sk_arch_table_devices(archs[a], devs, 8);
    for (size_t d = 0; d < nd; d++) {
      const gemm_tuning t = tuning_of(&devs[d]);
      for (int r = 0; r < 5; r++)
        for (int o = 0; o < 3; o++)
          for (size_t i = 0; i < 6; i++)
            for (size_t j = 0; j < 4; j++) {
              gemm_cfg cfg;
              gemm_config(&t, r, o, ms[i], ns[j], 4096, &cfg);
              cr_expect_eq(gemm_cfg_check_smem(&t, &cfg, "test"), SK_OK, "%s: %s", devs[d].device, sk_last_error_message());
            }
    }
  }
  /* 128 x 128 with 4 stages: 131 KB of FP8 stages fit the H200 (227 KB), not SM120's 99 KB */
  setenv("SPARKINFER_GEMM_PREFILL_TILE", "128,128,2,4,4", 1);
  const sk_gemm_caps caps = mm_caps(SK_GEMM_TENSOR_FP8, 0, 4096, 4096, 4096);
  sk_arch_props h200, rtx;
  sk_arch_table_devices("sm_90a", &h200, 1);
  sk_arch_table_devices("sm_120a", &rtx, 1);
  sk_plan *p;
  cr_assert_eq(select_plan("gemm.blockscaled", &caps, &h200, &p), SK_OK, "%s", sk_last_error_message());
  sk_plan_destroy(p);
  cr_assert_eq(select_plan("gemm.blockscaled", &caps, &rtx, &p), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "SPARKINFER_GEMM_PREFILL_TILE=128,128,2,4,4") &&
                strstr(sk_last_error_message(), "131072 bytes"),
            "%s", sk_last_error_message());
  sk_gemm_launch_info info;
  cr_expect_eq(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, 4096, 4096, 4096, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, 16, 4096, 4096, "sm_120a", &info), SK_OK,
               "decode does not use the tile: %s", sk_last_error_message());
  unsetenv("SPARKINFER_GEMM_PREFILL_TILE");
}

/* ---- regimes ------------------------------------------------------------------------------------- */

/* Every M of 1..max_m (sampled above 300) binds the kernel gemm_config (or gemm_linear_config)
 * picks for that M, in the plan's slot the binding names (REGIME), with the launch's CTAs (CTAS:
 * the decode grid with the plan's scratch, a tile per CTA without it; the tiled grid). */
static void check_mm_regimes(const sk_arch_props *dev, int r, int o, int64_t n, int64_t k, int64_t max_m) {
  const sk_gemm_caps caps = mm_caps(r, o, n, k, max_m);
  sk_plan *p;
  cr_assert_eq(select_plan("gemm.blockscaled", &caps, dev, &p), SK_OK, "%s", sk_last_error_message());
  const gemm_tuning t = tuning_of(dev);
  sk_binding *b;
  cr_assert_eq(sk_binding_create(p, NULL, &b), SK_OK);
  size_t ws_bytes;
  void *ws = fake_scratch(p, &ws_bytes);
  int used[GEMM_MAX_REGIMES] = {0};
  for (int64_t m = 1; m <= max_m; m += m < 300 ? 1 : 97) {
    views v;
    mm_views(&v, r, o, m, n, k);
    for (int with_ws = 0; with_ws < 2; with_ws++) {
      cr_assert_eq(sk_bind(b, v.p, v.n, with_ws ? ws : NULL, with_ws ? ws_bytes : 0), SK_OK, "%s M %lld: %s", dev->device,
                   (long long)m, sk_last_error_message());
      gemm_cfg cfg;
      gemm_config(&t, r, o, m, n, k, &cfg);
      char want[160];
      cfg_name(&cfg, want);
      const int64_t slot = symbol(b, "REGIME");
      cr_assert(slot >= 0 && slot < GEMM_MAX_REGIMES && p->requests[slot].name, "slot %lld", (long long)slot);
      cr_assert_str_eq(p->requests[slot].name, want, "%s %s N %lld K %lld max_m %lld: M %lld", dev->device,
                       gemm_recipe_names[r], (long long)n, (long long)k, (long long)max_m, (long long)m);
      used[slot] = 1;
      int64_t ctas = (int64_t)cfg.grid.x * cfg.grid.y;
      if (gemm_path_is_decode(cfg.path)) {
        const decode_launch d = gemm_decode_launch(&t, &cfg, m, n, k, with_ws ? ws : NULL, with_ws ? ws_bytes : 0);
        ctas = d.ctas;
        cr_assert_eq(ctas, with_ws ? gemm_decode_ctas(&t, &cfg, m, n, k) : cfg.grid.x, "a tile per CTA without scratch");
      }
      cr_assert_eq(symbol(b, "CTAS"), ctas, "%s M %lld", want, (long long)m);
      cr_assert_eq(symbol(b, "M"), m);
    }
  }
  for (int i = 0; i < GEMM_MAX_REGIMES; i++)
    if (p->requests[i].name) cr_expect(used[i], "slot %d (%s) is resolved but no M uses it", i, p->requests[i].name);
  sk_binding_destroy(b);
  sk_plan_destroy(p);
}

static void check_linear_regimes(const sk_arch_props *dev, int kind, int o, int64_t n, int64_t k, int64_t max_m) {
  const sk_gemm_linear_caps caps = linear_caps(n, k, max_m, o);
  sk_plan *p;
  cr_assert_eq(select_plan(linear_ops[kind], &caps, dev, &p), SK_OK, "%s", sk_last_error_message());
  const gemm_tuning t = tuning_of(dev);
  sk_binding *b;
  cr_assert_eq(sk_binding_create(p, NULL, &b), SK_OK);
  size_t bytes;
  void *scratch = fake_scratch(p, &bytes);
  for (int64_t m = 1; m <= max_m; m += m < 300 ? 1 : 97) {
    views v;
    linear_views(&v, kind, o, m, n, k);
    cr_assert_eq(sk_bind(b, v.p, v.n, scratch, bytes), SK_OK, "%s M %lld: %s", linear_ops[kind], (long long)m,
                 sk_last_error_message());
    gemm_cfg cfg;
    if (kind == L_MXFP8) gemm_linear_config(&t, o, m, n, k, &cfg);
    else gemm_config(&t, linear_recipe[kind], o, m, n, k, &cfg);
    char want[160];
    cfg_name(&cfg, want);
    const int64_t slot = symbol(b, "REGIME");
    cr_assert(slot >= 0 && slot < GEMM_MAX_REGIMES && p->requests[slot].name);
    cr_assert_str_eq(p->requests[slot].name, want, "%s %s N %lld K %lld: M %lld", dev->device, linear_ops[kind], (long long)n,
                     (long long)k, (long long)m);
    cr_assert_eq(symbol(b, "QUANTIZE"), kind != L_TENSOR_FP8 && cfg.path != PATH_FUSED, "M %lld", (long long)m);
    if (gemm_path_is_decode(cfg.path)) cr_assert_eq(symbol(b, "CTAS"), gemm_decode_ctas(&t, &cfg, m, n, k));
  }
  /* the quantizer's slot: requested iff some regime quantizes */
  const char *q = p->requests[GEMM_MAX_REGIMES].name;
  if (kind == L_TENSOR_FP8) cr_expect_null(q);
  else if (kind == L_BLOCK_FP8) cr_expect_str_eq(q, "sk::gemm::act_quant_block_fp8<1>");
  else if (!t.linear_fused || max_m > 8) cr_expect_str_eq(q, "sk::quant::mxfp8_rows<__nv_bfloat16, 1, 1>");
  else cr_expect_null(q, "fused up to max_m = %lld: no quantizer", (long long)max_m);
  sk_binding_destroy(b);
  sk_plan_destroy(p);
}

static void check_all_regimes(int quick) {
  const int64_t shapes[][3] = {{200, 1152, 5000}, {2880, 2048, 700}, {8192, 4096, 2300}, {17024, 256, 300}, {28672, 4096, 12},
                               {77, 128, 20}};
  for (size_t a = 0; a < 3; a++) {
    sk_arch_props devs[8];
    const size_t nd = sk_arch_table_devices(archs[a], devs, 8);
    for (size_t d = 0; d < nd; d++)
      for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        for (int r = 0; r < 5; r++) {
          if (quick && r % 2) continue;
          check_mm_regimes(&devs[d], r, (r + (int)s) % 3, shapes[s][0], shapes[s][1], shapes[s][2]);
        }
        for (int kind = 0; kind < 3 && !quick; kind++)
          check_linear_regimes(&devs[d], kind, (kind + (int)s) % 3, shapes[s][0], shapes[s][1], shapes[s][2]);
      }
  }
}

Test(gemm_ops, regimes_bind_the_configuration_of_each_m, .timeout = 300) { check_all_regimes(0); }

/* The overrides change the configurations; the regimes still follow gemm_config at every M. */
Test(gemm_ops, regimes_follow_the_tile_override, .timeout = 300) {
  setenv("SPARKINFER_GEMM_PREFILL_TILE", "64,64,2,2,4", 1);
  check_all_regimes(1);
}

Test(gemm_ops, regimes_follow_the_decode_override, .timeout = 300) {
  setenv("SPARKINFER_GEMM_DECODE", "1,4,0,auto,2", 1);
  check_all_regimes(1);
  setenv("SPARKINFER_GEMM_DECODE", "2,4,3,splitk", 1);
  check_all_regimes(1);
  setenv("SPARKINFER_GEMM_DECODE", "0,8,0,streamk", 1);
  check_all_regimes(1);
}

Test(gemm_ops, regimes_follow_the_linear_fusion_flag, .timeout = 300) {
  setenv("SPARKINFER_GEMM_LINEAR_FUSED", "1", 1);
  sk_arch_props dev;
  sk_arch_table_devices("sm_120a", &dev, 1);
  for (int o = 0; o < 3; o++) {
    check_linear_regimes(&dev, L_MXFP8, o, 200, 1152, 8);
    check_linear_regimes(&dev, L_MXFP8, o, 8192, 4096, 300);
  }
}

/* Regime boundaries: the plan resolves each distinct configuration once, in increasing M. */
Test(gemm_ops, regimes_are_the_distinct_configurations) {
  sk_arch_props h200;
  sk_arch_table_devices("sm_90a", &h200, 1);
  /* nvfp4 N = 4096 (32 column tiles) on 132 SMs: decode 8 / 16 tokens, 64x64 up to M = 128,
   * 128x64 up to 5 x 128 = 640, then 128x128 (ceil(M/128) x 32 >= 132) */
  const sk_gemm_caps caps = mm_caps(SK_GEMM_NVFP4, 0, 4096, 4096, 100000);
  sk_plan *p;
  cr_assert_eq(select_plan("gemm.blockscaled", &caps, &h200, &p), SK_OK, "%s", sk_last_error_message());
  static const char *const want[] = {"sk::gemm::gemv_decode<0, 0, 1, 4, 1, 1>", "sk::gemm::gemv_decode<0, 0, 2, 4, 1, 1>",
                                     "sk::gemm::mma_tiled<0, 0, 64, 64, 128, 2, 2, 4>",
                                     "sk::gemm::mma_tiled<0, 0, 128, 64, 128, 2, 2, 3>",
                                     "sk::gemm::mma_tiled<0, 0, 128, 128, 128, 2, 2, 3>"};
  for (int i = 0; i < 5; i++) cr_expect_str_eq(p->requests[i].name, want[i], "slot %d", i);
  cr_expect_null(p->requests[5].name);
  int64_t v;
  cr_expect_eq(sk_plan_symbol(p, "MAX_M", &v), SK_OK);
  cr_expect_eq(v, 100000);
  sk_plan_destroy(p);
  /* max_m = 8: one decode kernel */
  const sk_gemm_caps small = mm_caps(SK_GEMM_NVFP4, 0, 4096, 4096, 8);
  cr_assert_eq(select_plan("gemm.blockscaled", &small, &h200, &p), SK_OK);
  cr_expect_str_eq(p->requests[0].name, want[0]);
  cr_expect_null(p->requests[1].name);
  sk_plan_destroy(p);
}

/* ---- describe, workspace ------------------------------------------------------------------------- */

/* sk_gemm_describe names the kernel a plan binds for that M (with an explicit arch and no GPU, the
 * grids use the arch table's first device: the H200 for sm_90a, the RTX 5090 for sm_120a). */
Test(gemm_ops, describe_names_what_a_plan_launches) {
  sk_gemm_launch_info info;
  cr_assert_eq(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, 1, 128, 128, "sm_120a", &info), SK_OK, "%s",
               sk_last_error_message());
  cr_expect_str_eq(info.source, "gemm/gemv_decode.cuh");
  cr_expect_str_eq(info.name, "sk::gemm::gemv_decode<4, 0, 1, 4, 1, 1>");
  cr_expect_eq(info.grid.x, 8u, "128 rows in 16-row tiles, one 128-K step each: 8 CTAs");
  cr_expect(info.block.x == 128 && info.smem_bytes == 0 && info.workspace_bytes == 0);
  cr_expect_eq(info.sm_count, 170, "no GPU: the RTX 5090 of the arch table");
  cr_assert_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_FP16, 4096, 8192, 8192, "sm_90a", &info), SK_OK);
  cr_expect_str_eq(info.source, "gemm/mma_tiled.cuh");
  cr_expect_str_eq(info.name, "sk::gemm::mma_tiled<0, 1, 128, 128, 128, 2, 2, 3>");
  cr_expect(info.grid.x == 64 && info.grid.y == 32 && info.smem_bytes == 55296 && info.sm_count == 132);
  cr_assert_eq(sk_gemm_describe(SK_GEMM_BLOCK_FP8, SK_DTYPE_BF16, 16, 8192, 8192, "sm_121a", &info), SK_OK);
  cr_expect(info.grid.x == 256 && info.sm_count == 48, "the Spark: whole tiles, %u CTAs", info.grid.x);
  /* The same names as the plans' requests for every recipe, arch and a few shapes. */
  static const int64_t shapes[][2] = {{5120, 2944}, {8192, 8192}, {28672, 4096}};
  static const int64_t ms[] = {1, 16, 100, 2048};
  for (int a = 0; a < 3; a++)
    for (int r = 0; r < 5; r++)
      for (int sh = 0; sh < 3; sh++) {
        sk_arch_props dev;
        sk_arch_table_devices(archs[a], &dev, 1);
        const sk_gemm_caps caps = mm_caps(r, 0, shapes[sh][0], shapes[sh][1], 2048);
        sk_plan *p;
        cr_assert_eq(select_plan("gemm.blockscaled", &caps, &dev, &p), SK_OK, "%s", sk_last_error_message());
        for (int i = 0; i < 4; i++) {
          cr_assert_eq(sk_gemm_describe((sk_gemm_recipe)r, SK_DTYPE_BF16, ms[i], shapes[sh][0], shapes[sh][1], archs[a], &info),
                       SK_OK, "%s", sk_last_error_message());
          int found = 0;
          for (int s = 0; s < GEMM_MAX_REGIMES; s++) found |= p->requests[s].name && !strcmp(p->requests[s].name, info.name);
          cr_expect(found, "%s %s M %lld: describe says %s; the plan lacks it", archs[a], gemm_recipe_names[r], (long long)ms[i],
                    info.name);
          const gemm_tuning t = tuning_of(&dev);
          cr_expect_eq(info.workspace_bytes, gemm_workspace_need(&t, r, ms[i], shapes[sh][0], shapes[sh][1]));
          cr_expect_eq(info.sm_count, dev.sm_count);
        }
        sk_plan_destroy(p);
      }
  /* Refusals. */
  cr_expect_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 1, 128, 128, "sm_120a", NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_describe((sk_gemm_recipe)7, SK_DTYPE_BF16, 1, 128, 128, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_describe(SK_GEMM_NVFP4, (sk_dtype)3, 1, 128, 128, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 0, 128, 128, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 1, 128, 100, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "K = 100"), "%s", sk_last_error_message());
  cr_expect_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 1, 128, 128, "sm120", &info), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "sm120"), "%s", sk_last_error_message());
  /* The largest accepted decode problems still describe (no compile: describe only names them). */
  cr_expect_eq(sk_gemm_describe(SK_GEMM_MXFP8, SK_DTYPE_BF16, 16, INT32_MAX - 256, 128, "sm_120a", &info), SK_OK, "%s",
               sk_last_error_message());
}

/* Weights past the kernels' 32-bit work counters: refused everywhere, never wrapped. */
Test(gemm_ops, oversized_weights_are_refused_everywhere) {
  const int64_t big[][2] = {{INT32_MAX - 100, 128}, {(int64_t)1 << 24, (int64_t)1 << 30}, {(int64_t)1 << 28, 1 << 17}};
  sk_arch_props dev;
  sk_arch_table_devices("sm_120a", &dev, 1);
  for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
    sk_gemm_launch_info info;
    cr_expect_eq(sk_gemm_describe(SK_GEMM_MXFP8, SK_DTYPE_BF16, 1, big[i][0], big[i][1], "sm_120a", &info), SK_ERR_INVALID_ARGUMENT,
                 "N %lld K %lld", (long long)big[i][0], (long long)big[i][1]);
    cr_expect(strstr(sk_last_error_message(), "32-bit work counters"), "%s", sk_last_error_message());
    const int64_t one = 1;
    cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, &one, 1, big[i][0], big[i][1], "sm_120a"), SK_ERR_INVALID_ARGUMENT);
    cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, big[i][0], big[i][1]), 0u);
    const sk_gemm_caps mc = mm_caps(SK_GEMM_NVFP4, 0, big[i][0], big[i][1], 1);
    sk_plan *p = (sk_plan *)1;
    cr_expect_eq(select_plan("gemm.blockscaled", &mc, &dev, &p), SK_ERR_INVALID_ARGUMENT);
    cr_expect_null(p);
    for (int kind = 0; kind < 3; kind++) {
      const sk_gemm_linear_caps lc = linear_caps(big[i][0], big[i][1], 1, 0);
      p = (sk_plan *)1;
      cr_expect_eq(select_plan(linear_ops[kind], &lc, &dev, &p), SK_ERR_INVALID_ARGUMENT, "%s", linear_ops[kind]);
      cr_expect(strstr(sk_last_error_message(), "32-bit work counters"), "%s", sk_last_error_message());
      cr_expect_null(p);
    }
  }
}

/* Workspace (no GPU here: the generic 128 SMs): 0 when no tile is split (K = 128, beyond decode);
 * the split-K grid aims at 2 CTAs per SM, and "auto" switches to stream-K when that grid splits K
 * and exceeds the resident CTAs (4 per SM for nvfp4 / tensor_fp8 at M <= 8, 3 otherwise); the
 * larger need of the two token-tile variants, each with its own tiles. */
Test(gemm_ops, decode_workspace_follows_the_schedule) {
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 8192, 128), 0u, "one step per tile: never split");
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 1, 8192, 8192), 0u, "256 tiles >= 2 x 128 SMs: no split");
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 4096, 8192), 0u, "256 16-row tiles: no split");
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 17, 4096, 4096), 0u, "no split-K beyond the decode regime");
  /* tensor_fp8, 128 16-row tiles: 2 splits = 256 CTAs, one wave for both token-tile variants */
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 2048, 8192), (size_t)(2 * 256 * 16 * 4 + 128 * 4));
  /* block_fp8: 256 16-row tiles at 8 tokens (no split); at 16 tokens 128 tiles of 32 rows, split in 2 */
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_BLOCK_FP8, 1, 4096, 8192), (size_t)(2 * 256 * 32 * 4 + 128 * 4));
  /* mxfp8 at 16 tokens: 112 tiles of 64 rows, 3 splits = 336 CTAs (<= 384 resident): split-K */
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_MXFP8, 16, 7168, 8192), (size_t)(2 * 336 * 16 * 64 * 4 + 512));
  /* one row group beyond N = 16384: 896 32-row tiles, no split */
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_MXFP8, 16, 28672, 4096), 0u);
  /* nvfp4: 448 split-K CTAs fit 512 at 8 tokens, the 16-token variant (384) streams: the larger */
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 1, 7168, 8192), (size_t)(2 * 448 * 32 * 4 + 1024));
  /* Never shrinking as M grows (plans size it for their largest M), across the token-tile switch. */
  const int64_t shapes[][2] = {{8192, 8192}, {25344, 4096}, {5120, 2944}, {200, 1152}, {77, 128}};
  for (int r = 0; r < 5; r++)
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
      for (int64_t m = 1; m < 16; m++)
        cr_expect_leq(sk_gemm_workspace_bytes((sk_gemm_recipe)r, m, shapes[i][0], shapes[i][1]),
                      sk_gemm_workspace_bytes((sk_gemm_recipe)r, m + 1, shapes[i][0], shapes[i][1]), "recipe %d shape %zu m %lld", r,
                      i, (long long)m);
  cr_expect_eq(sk_gemm_workspace_bytes((sk_gemm_recipe)9, 1, 4096, 4096), 0u);
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 0, 4096, 4096), 0u);
}

/* A plan's scratch is the decode workspace of its largest decode M (zeroed once: counters), plus,
 * for the linear ops that quantize, the quantized activations of max_m rows; each region starts
 * on 1024 bytes, and the caller's 256-byte alignment costs 768 bytes of slack. */
static size_t up1024(size_t x) { return (x + 1023) / 1024 * 1024; }

Test(gemm_ops, scratch_holds_the_workspace_and_the_activations) {
  sk_arch_props dev;
  sk_arch_table_devices("sm_90a", &dev, 1);
  const gemm_tuning t = tuning_of(&dev);
  const int64_t shapes[][2] = {{8192, 8192}, {200, 1152}, {28672, 4096}, {2048, 8192}};
  for (size_t i = 0; i < 4; i++)
    for (int64_t max_m = 1; max_m <= 40; max_m += max_m < 16 ? 1 : 12) {
      const int64_t n = shapes[i][0], k = shapes[i][1], dm = max_m < 16 ? max_m : 16;
      for (int r = 0; r < 5; r++) {
        const sk_gemm_caps caps = mm_caps(r, 0, n, k, max_m);
        sk_plan *p;
        cr_assert_eq(select_plan("gemm.blockscaled", &caps, &dev, &p), SK_OK);
        sk_scratch_spec s;
        cr_assert_eq(sk_plan_scratch_spec(p, &s), SK_OK);
        const size_t ws = gemm_workspace_need(&t, r, dm, n, k);
        cr_expect_eq(s.bytes, ws ? ws + 768 : 0, "recipe %d %lld x %lld max_m %lld", r, (long long)n, (long long)k, (long long)max_m);
        cr_expect_eq(s.zero_once, ws > 0);
        cr_expect_eq(s.alignment, 256u);
        sk_plan_destroy(p);
      }
      for (int kind = 0; kind < 3; kind++) {
        const sk_gemm_linear_caps caps = linear_caps(n, k, max_m, 0);
        sk_plan *p;
        cr_assert_eq(select_plan(linear_ops[kind], &caps, &dev, &p), SK_OK);
        sk_scratch_spec s;
        cr_assert_eq(sk_plan_scratch_spec(p, &s), SK_OK);
        const size_t ws = gemm_workspace_need(&t, linear_recipe[kind], dm, n, k);
        size_t total = 0;
        if (kind != L_TENSOR_FP8) {
          const size_t scales = kind == L_MXFP8 ? sk_swizzled_scale_bytes(max_m, k / 32) : (size_t)(max_m * (k / 128)) * 4;
          total = up1024((size_t)(max_m * k)) + scales;
        }
        if (ws) total = up1024(total) + ws;
        cr_expect_eq(s.bytes, total ? total + 768 : 0, "%s %lld x %lld max_m %lld", linear_ops[kind], (long long)n, (long long)k,
                     (long long)max_m);
        cr_expect_eq(s.zero_once, ws > 0);
        sk_plan_destroy(p);
      }
    }
}

/* SPARKINFER_GEMM_LINEAR_FUSED=1: up to max_m = 8 gemm.mxfp8_linear quantizes inside the decode
 * kernel and its scratch is mm's workspace alone; beyond it the quantizer comes back. */
Test(gemm_ops, mxfp8_linear_scratch_when_fused) {
  setenv("SPARKINFER_GEMM_LINEAR_FUSED", "1", 1);
  sk_arch_props dev;
  sk_arch_table_devices("sm_90a", &dev, 1);
  const gemm_tuning t = tuning_of(&dev);
  cr_assert_eq(t.linear_fused, 1);
  for (int64_t max_m = 1; max_m <= 16; max_m++) {
    const sk_gemm_linear_caps caps = linear_caps(8192, 8192, max_m, 0);
    sk_plan *p;
    cr_assert_eq(select_plan("gemm.mxfp8_linear", &caps, &dev, &p), SK_OK);
    sk_scratch_spec s;
    cr_assert_eq(sk_plan_scratch_spec(p, &s), SK_OK);
    const size_t ws = gemm_workspace_need(&t, SK_GEMM_MXFP8, max_m, 8192, 8192);
    const size_t quant = max_m <= 8 ? 0 : up1024(up1024((size_t)max_m * 8192) + sk_swizzled_scale_bytes(max_m, 8192 / 32));
    cr_expect_eq(s.bytes, quant + ws ? quant + ws + 768 : 0, "max_m %lld", (long long)max_m);
    cr_expect_eq(p->requests[0].name && strstr(p->requests[0].name, "gemv_decode_mxfp8_bf16") != NULL, 1,
                 "M <= 8 fused: %s", p->requests[0].name);
    sk_plan_destroy(p);
  }
}

/* ---- caps and overrides --------------------------------------------------------------------------- */

static void expect_refused(const char *op, const void *caps, sk_status want, const char *needle) {
  sk_arch_props dev;
  sk_arch_table_devices("sm_120a", &dev, 1);
  sk_plan *p = (sk_plan *)1;
  const sk_status s = select_plan(op, caps, &dev, &p);
  cr_expect_eq(s, want, "%s (%s): got %s: %s", op, needle, sk_status_string(s), sk_last_error_message());
  cr_expect_null(p);
  cr_expect(strstr(sk_last_error_message(), needle) != NULL, "%s: \"%s\" lacks \"%s\"", op, sk_last_error_message(), needle);
}

Test(gemm_ops, bad_caps_are_refused_with_a_message) {
  sk_gemm_caps c = mm_caps(SK_GEMM_NVFP4, 0, 4096, 4096, 16);
  c.recipe = (sk_gemm_recipe)5;
  expect_refused("gemm.blockscaled", &c, SK_ERR_INVALID_ARGUMENT, "caps.recipe = 5 is not one of its values");
  c = mm_caps(SK_GEMM_NVFP4, 3, 4096, 4096, 16);
  expect_refused("gemm.blockscaled", &c, SK_ERR_INVALID_ARGUMENT, "caps.out = 3");
  /* ranges are the field table's (the spine's message), the multiple of 128 the op's */
  static const struct {
    int64_t n, k;
    const char *needle;
  } bad_nk[] = {{0, 4096, "caps.n is required"}, {4096, 0, "caps.k is required"}, {4096, 4000, "K a positive multiple of 128"},
                {4096, 64, "caps.k = 64 must be in [128, "}, {4096, ((int64_t)1 << 30) + 128, "caps.k = 1073741952"}};
  for (size_t i = 0; i < sizeof bad_nk / sizeof *bad_nk; i++) {
    c = mm_caps(SK_GEMM_NVFP4, 0, bad_nk[i].n, bad_nk[i].k, 16);
    expect_refused("gemm.blockscaled", &c, SK_ERR_INVALID_ARGUMENT, bad_nk[i].needle);
    for (int kind = 0; kind < 3; kind++) {
      const sk_gemm_linear_caps lc = linear_caps(bad_nk[i].n, bad_nk[i].k, 16, 0);
      expect_refused(linear_ops[kind], &lc, SK_ERR_INVALID_ARGUMENT, bad_nk[i].needle);
    }
  }
  static const int64_t bad_m[] = {0, -1, (int64_t)INT32_MAX + 1};
  for (size_t i = 0; i < 3; i++) {
    c = mm_caps(SK_GEMM_NVFP4, 0, 4096, 4096, bad_m[i]);
    expect_refused("gemm.blockscaled", &c, SK_ERR_INVALID_ARGUMENT, "max_m");
    for (int kind = 0; kind < 3; kind++) {
      const sk_gemm_linear_caps lc = linear_caps(4096, 4096, bad_m[i], 0);
      expect_refused(linear_ops[kind], &lc, SK_ERR_INVALID_ARGUMENT, "max_m");
    }
  }
  /* max_m x N within 2^40 (mm), and max_m x K within 2^34 (the linear ops' activations) */
  c = mm_caps(SK_GEMM_NVFP4, 0, (int64_t)1 << 20, 128, (int64_t)1 << 21);
  expect_refused("gemm.blockscaled", &c, SK_ERR_INVALID_ARGUMENT, "max_m x N <= 2^40");
  sk_gemm_linear_caps lc = linear_caps(128, (int64_t)1 << 20, (int64_t)1 << 15, 0);
  expect_refused("gemm.block_fp8_linear", &lc, SK_ERR_INVALID_ARGUMENT, "max_m x K <= 2^34");
  lc = linear_caps(4096, 4096, 16, 7);
  expect_refused("gemm.mxfp8_linear", &lc, SK_ERR_INVALID_ARGUMENT, "caps.out = 7");
  /* the spine's rules: struct_size, arch form, arch support */
  c = mm_caps(SK_GEMM_NVFP4, 0, 4096, 4096, 16);
  c.struct_size = 8;
  expect_refused("gemm.blockscaled", &c, SK_ERR_INVALID_ARGUMENT, "struct_size");
  c = mm_caps(SK_GEMM_NVFP4, 0, 4096, 4096, 16);
  c.arch = "sm_80";
  sk_plan *p = (sk_plan *)1;
  cr_expect_eq(sk_plan_create("gemm.blockscaled", &c, &p), SK_ERR_UNSUPPORTED, "%s", sk_last_error_message());
  cr_expect_null(p);
  c.arch = "sm120";
  cr_expect_eq(sk_plan_create("gemm.blockscaled", &c, &p), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "sm120"), "%s", sk_last_error_message());
  cr_expect_eq(sk_gemm_is_supported(SK_GEMM_NVFP4, "sm_120a"), 1);
  cr_expect_eq(sk_gemm_is_supported(SK_GEMM_TENSOR_FP8, "sm_89"), 1);
  cr_expect_eq(sk_gemm_is_supported(SK_GEMM_NVFP4, "sm_80"), 0);
  cr_expect_eq(sk_gemm_is_supported((sk_gemm_recipe)5, "sm_120a"), 0);
}

/* A malformed override is refused, naming the variable, by every entry point that reads it: plan
 * creation (select-only and real), describe, prewarm; and the manifest expansion. */
static void expect_env_refused(const char *var, const char *value) {
  setenv(var, value, 1);
  const sk_gemm_caps caps = mm_caps(SK_GEMM_TENSOR_FP8, 0, 256, 512, 64);
  expect_refused("gemm.blockscaled", &caps, SK_ERR_INVALID_ARGUMENT, var);
  const sk_gemm_linear_caps lc = linear_caps(256, 512, 64, 0);
  for (int kind = 0; kind < 3; kind++) expect_refused(linear_ops[kind], &lc, SK_ERR_INVALID_ARGUMENT, var);
  sk_gemm_launch_info info;
  cr_expect_eq(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, 1, 256, 512, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), var), "%s", sk_last_error_message());
  const int64_t ms[] = {1};
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, ms, 1, 256, 512, "sm_120a"), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), var), "%s", sk_last_error_message());
  cJSON *j = cJSON_Parse("{\"recipe\":\"tensor_fp8\",\"n\":256,\"k\":512,\"max_m\":64}");
  sk_request_list list = {0};
  cr_expect_neq(sk_op_build_requests(sk_find_op("gemm.blockscaled"), j, "sm_120a", &list), SK_OK);
  cr_expect(strstr(sk_last_error_message(), var), "%s", sk_last_error_message());
  sk_request_list_free(&list);
  cJSON_Delete(j);
  unsetenv(var);
}

Test(gemm_ops, malformed_overrides_are_refused_naming_the_variable) {
  static const char *const decode[] = {
      "3,4,2",             /* ROW_TILES 3 */
      "2,4,3,roundrobin",  /* schedule */
      "1,4,0,auto,3",      /* row groups not dividing the warps */
      "1,4,0,auto,2,1",    /* a sixth field */
      "1,4,0,",            /* an empty field */
      "1,4",               /* too few */
      "1,9,0",             /* 9 warps */
      "1,4,33",            /* 33 CTAs per SM */
      "4,4,0,auto,4",      /* 4 groups of 64 rows: more rows than threads prefetch */
      "x,4,0",             /* not a number */
  };
  for (size_t i = 0; i < sizeof decode / sizeof *decode; i++) expect_env_refused("SPARKINFER_GEMM_DECODE", decode[i]);
  static const char *const tile[] = {"128,100,2,4,3", "128,128,2,4", "128,128,2,4,3,1", "128,128,4,8,3", "128,128,2,4,1",
                                     "128,128,2,4,9",  "64,64,8,2,4",  "64,64,2,16,4", "a,b,c,d,e"};
  for (size_t i = 0; i < sizeof tile / sizeof *tile; i++) expect_env_refused("SPARKINFER_GEMM_PREFILL_TILE", tile[i]);
  expect_env_refused("SPARKINFER_GEMM_LINEAR_FUSED", "maybe");
}

/* Well-formed overrides take effect (and are read when a plan is made: no per-process caching). */
Test(gemm_ops, overrides_take_effect_per_plan) {
  sk_gemm_launch_info info;
  setenv("SPARKINFER_GEMM_DECODE", "1,6,0,auto,3", 1);
  /* 3 row groups of 16 rows (48-row tiles), which block_fp8 cannot take (a tile's rows must lie in
   * one 128-row scale block): it keeps one group, the other recipes take three */
  cr_assert_eq(sk_gemm_describe(SK_GEMM_BLOCK_FP8, SK_DTYPE_BF16, 16, 4096, 4096, "sm_120a", &info), SK_OK, "%s",
               sk_last_error_message());
  cr_expect_str_eq(info.name, "sk::gemm::gemv_decode<3, 0, 2, 6, 1, 1>");
  cr_assert_eq(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, 16, 4096, 4096, "sm_120a", &info), SK_OK);
  cr_expect_str_eq(info.name, "sk::gemm::gemv_decode<4, 0, 2, 6, 1, 3>");
  setenv("SPARKINFER_GEMM_DECODE", "2,4,2,splitk", 1);
  /* no GPU: 128 SMs; split-K to 2 CTAs per SM: 2 splits of each of the 128 tiles; none for 896 */
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 4096, 8192), (size_t)(2 * 256 * 32 * 4 + 128 * 4));
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 28672, 4096), 0u, "896 tiles >= 256: no split");
  setenv("SPARKINFER_GEMM_DECODE", "2,4,3,streamk", 1);
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 8192, 8192), (size_t)(2 * 384 * 32 * 4 + 256 * 4));
  /* 4 groups of 32 rows = 128-row tiles, 64 of them split in 4 (256 CTAs) for both token tiles */
  setenv("SPARKINFER_GEMM_DECODE", "2,4,0,auto,4", 1);
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 8192, 8192), (size_t)(2 * 256 * 128 * 4 + 256));
  unsetenv("SPARKINFER_GEMM_DECODE");
  cr_expect_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 8192, 8192), 0u, "the default again: 512 16-row tiles");
  setenv("SPARKINFER_GEMM_PREFILL_TILE", "128,32,4,1,2", 1);
  cr_assert_eq(sk_gemm_describe(SK_GEMM_MXFP8, SK_DTYPE_FP32, 1000, 4096, 4096, "sm_90a", &info), SK_OK);
  cr_expect_str_eq(info.name, "sk::gemm::mma_tiled<2, 2, 128, 32, 128, 4, 1, 2>");
  cr_assert_eq(sk_gemm_describe(SK_GEMM_MXFP8, SK_DTYPE_FP32, 1000, 4096, 4096, "sm_120a", &info), SK_OK);
  cr_expect_str_eq(info.name, "sk::gemm::sm120_blockscaled<2, 2, 128, 128, 128, 2, 4, 3>", "the SM120 kernel takes no tile override");
  unsetenv("SPARKINFER_GEMM_PREFILL_TILE");
}

/* ---- manifests -------------------------------------------------------------------------------------- */

/* The kernels a manifest entry expands to for `arch` (the union over its arch table devices). */
static char *expand(const char *op, const char *caps_json, const char *arch, size_t *count) {
  cJSON *j = cJSON_Parse(caps_json);
  cr_assert(j, "%s", caps_json);
  sk_request_list list = {0};
  const sk_status s = sk_op_build_requests(sk_find_op(op), j, arch, &list);
  cJSON_Delete(j);
  cr_assert_eq(s, SK_OK, "%s %s: %s", op, caps_json, sk_last_error_message());
  size_t len = 1;
  for (size_t i = 0; i < list.count; i++) len += strlen(list.items[i].name_expr) + 1;
  char *out = malloc(len);
  out[0] = 0;
  for (size_t i = 0; i < list.count; i++) strcat(strcat(out, list.items[i].name_expr), "\n");
  *count = list.count;
  sk_request_list_free(&list);
  return out;
}

Test(gemm_ops, manifests_expand_to_the_plans_kernels) {
  size_t n;
  /* nvfp4 4096 x 4096 (2^24: 16-row tiles) up to M = 16: the two token tiles */
  char *out = expand("gemm.blockscaled", "{\"recipe\":\"nvfp4\",\"n\":4096,\"k\":4096,\"max_m\":16}", "sm_120a", &n);
  cr_expect_eq(n, 2, "%s", out);
  cr_expect(strstr(out, "gemv_decode<0, 0, 1, 4, 1, 1>") && strstr(out, "gemv_decode<0, 0, 2, 4, 1, 1>"), "%s", out);
  free(out);
  /* prefill: the SM120 kernel on sm_120a / sm_121a, the portable one on sm_90a */
  for (int a = 0; a < 3; a++) {
    out = expand("gemm.blockscaled", "{\"recipe\":\"nvfp4\",\"n\":4096,\"k\":4096,\"max_m\":2048}", archs[a], &n);
    cr_expect(strstr(out, "sk::gemm::gemv_decode<0, 0, 1, 4, 1, 1>"), "%s: %s", archs[a], out);
    if (a) cr_expect(strstr(out, "sk::gemm::sm120_blockscaled<0, 0, 128") && !strstr(out, "mma_tiled"), "%s: %s", archs[a], out);
    else cr_expect(strstr(out, "sk::gemm::mma_tiled<0, 0, 128") && !strstr(out, "sm120"), "%s: %s", archs[a], out);
    free(out);
  }
  /* sm_120a's two devices (170, 188 SMs) differ where a wave does: tensor_fp8 N = 4096 at M = 640
   * takes 128x64 on both, but 128x128 from 6 x 32 = 192 tiles on; the union lists each once */
  out = expand("gemm.blockscaled", "{\"recipe\":\"tensor_fp8\",\"n\":4096,\"k\":4096,\"max_m\":1000}", "sm_120a", &n);
  cr_expect(strstr(out, "mma_tiled<4, 0, 128, 64, 128, 2, 2, 3>") && strstr(out, "mma_tiled<4, 0, 128, 128, 128, 2, 2, 3>"), "%s", out);
  cr_expect_eq(n, 5, "decode x 2, 64x64, 128x64, 128x128: %s", out);
  free(out);
  /* mxfp8_linear: the quantization.mxfp8 kernel and mm's decode kernels (fusion is opt-in) */
  out = expand("gemm.mxfp8_linear", "{\"n\":4096,\"k\":4096,\"max_m\":16}", "sm_120a", &n);
  cr_expect_eq(n, 3, "%s", out);
  cr_expect(strstr(out, "gemv_decode<2, 0, 1, 4, 1, 1>") && strstr(out, "gemv_decode<2, 0, 2, 4, 1, 1>") &&
                strstr(out, "sk::quant::mxfp8_rows") && !strstr(out, "gemv_decode_mxfp8_bf16"),
            "%s", out);
  free(out);
  setenv("SPARKINFER_GEMM_LINEAR_FUSED", "1", 1);
  out = expand("gemm.mxfp8_linear", "{\"n\":4096,\"k\":4096,\"max_m\":16}", "sm_120a", &n);
  cr_expect(strstr(out, "gemv_decode_mxfp8_bf16<0, 1, 4, 1>") && strstr(out, "gemv_decode<2, 0, 2, 4, 1, 1>") &&
                !strstr(out, "gemv_decode<2, 0, 1, 4, 1, 1>") && strstr(out, "mxfp8_rows"),
            "%s", out);
  free(out);
  out = expand("gemm.mxfp8_linear", "{\"n\":4096,\"k\":4096,\"max_m\":8}", "sm_120a", &n);
  cr_expect(n == 1 && strstr(out, "gemv_decode_mxfp8_bf16<0, 1, 4, 1>"), "fused only: %s", out);
  free(out);
  unsetenv("SPARKINFER_GEMM_LINEAR_FUSED");
  /* block_fp8_linear: its activation quantizer and every regime up to max_m */
  out = expand("gemm.block_fp8_linear", "{\"n\":640,\"k\":1024,\"max_m\":300,\"out\":\"fp16\"}", "sm_90a", &n);
  cr_expect(strstr(out, "act_quant_block_fp8<1>") && strstr(out, "gemv_decode<3, 1, 1, 4, 1, 1>") &&
                strstr(out, "mma_tiled<3, 1, 64, 64, 128, 2, 2, 4>") && strstr(out, "mma_tiled<3, 1, 128, 64, 128, 2, 2, 3>"),
            "%s", out);
  free(out);
  /* bad caps: a manifest error naming the field */
  static const char *const bad[][2] = {
      {"{\"recipe\":\"fp3\",\"n\":4096,\"k\":4096,\"max_m\":1}", "caps.recipe"},
      {"{\"recipe\":\"nvfp4\",\"n\":-4,\"k\":4096,\"max_m\":1}", "caps.n"},
      {"{\"recipe\":\"nvfp4\",\"n\":4096,\"max_m\":1}", "caps.k: required"},
      {"{\"recipe\":\"nvfp4\",\"n\":4096,\"k\":\"4096\",\"max_m\":1}", "caps.k"},
      {"{\"recipe\":\"nvfp4\",\"n\":4096,\"k\":4000,\"max_m\":1}", "K a positive multiple of 128"},
      {"{\"recipe\":\"nvfp4\",\"n\":4096,\"k\":4096,\"m\":[1]}", "\"m\""},
      {"{\"recipe\":\"nvfp4\",\"n\":2147483600,\"k\":128,\"max_m\":1}", "32-bit work counters"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    cJSON *j = cJSON_Parse(bad[i][0]);
    sk_request_list list = {0};
    cr_expect_eq(sk_op_build_requests(sk_find_op("gemm.blockscaled"), j, "sm_120a", &list), SK_ERR_MANIFEST, "%s", bad[i][0]);
    cr_expect(strstr(sk_last_error_message(), bad[i][1]), "%s: %s", bad[i][0], sk_last_error_message());
    sk_request_list_free(&list);
    cJSON_Delete(j);
  }
}

/* Decode row tiles (decode_row_tiles): 16-row tiles for every recipe at N * K <= 2^24, for
 * tensor_fp8 at N <= 16384 and at M > 8, for block_fp8 at N <= 16384 and M <= 8 only, for mxfp8 at
 * M <= 8 and for nvfp4 at M > 8 up to N * K = 2^26; 32-row tiles otherwise. Two row groups at 16
 * tokens on 2^24 < N x K for mxfp8 and mxfp4 with N <= 16384 and for tensor_fp8 with N > 16384.
 * tools/manifests/kernels-gemm.json (the prebuilt caches, CI's compile check) lists every one. */
Test(gemm_ops, decode_row_tiles_follow_recipe_shape_and_tokens) {
  static const struct {
    const char *caps;
  } entries[] = {{"{\"recipe\":\"tensor_fp8\",\"n\":8192,\"k\":4096,\"max_m\":16}"},
                 {"{\"recipe\":\"tensor_fp8\",\"n\":28672,\"k\":4096,\"max_m\":16}"},
                 {"{\"recipe\":\"block_fp8\",\"n\":16384,\"k\":4096,\"max_m\":16}"},
                 {"{\"recipe\":\"mxfp8\",\"n\":8192,\"k\":4096,\"max_m\":16}"},
                 {"{\"recipe\":\"mxfp8\",\"n\":28672,\"k\":4096,\"max_m\":16}"},
                 {"{\"recipe\":\"block_fp8\",\"n\":2048,\"k\":4096,\"max_m\":16,\"out\":\"fp16\"}"},
                 {"{\"recipe\":\"nvfp4\",\"n\":8192,\"k\":4096,\"max_m\":16}"},
                 {"{\"recipe\":\"mxfp4\",\"n\":8192,\"k\":4096,\"max_m\":16}"},
                 {"{\"recipe\":\"mxfp4\",\"n\":5120,\"k\":2944,\"max_m\":16,\"out\":\"fp32\"}"}};
  static char all[8192];
  all[0] = 0;
  for (size_t i = 0; i < sizeof entries / sizeof *entries; i++) {
    size_t n;
    char *out = expand("gemm.blockscaled", entries[i].caps, "sm_120a", &n);
    cr_assert_lt(strlen(all) + strlen(out), sizeof all);
    strcat(all, out);
    free(out);
  }
  static const char *const picked[] = {"gemv_decode<4, 0, 1, 4, 1, 1>", "gemv_decode<4, 0, 2, 4, 1, 1>", "gemv_decode<4, 0, 1, 4, 2, 1>",
                                       "gemv_decode<3, 0, 1, 4, 1, 1>", "gemv_decode<3, 0, 2, 4, 2, 1>", "gemv_decode<2, 0, 1, 4, 1, 1>",
                                       "gemv_decode<2, 0, 2, 4, 2, 2>", "gemv_decode<2, 0, 2, 4, 2, 1>", "gemv_decode<3, 1, 2, 4, 1, 1>",
                                       "gemv_decode<0, 0, 1, 4, 2, 1>", "gemv_decode<0, 0, 2, 4, 1, 1>", "gemv_decode<1, 0, 1, 4, 2, 1>",
                                       "gemv_decode<1, 0, 2, 4, 2, 2>", "gemv_decode<1, 2, 1, 4, 1, 1>", "gemv_decode<1, 2, 2, 4, 1, 1>",
                                       "gemv_decode<4, 0, 2, 4, 1, 2>"};
  static const char *const not_picked[] = {"gemv_decode<3, 0, 2, 4, 1, 1>", "gemv_decode<2, 0, 1, 4, 2, 1>",
                                           "gemv_decode<2, 0, 2, 4, 1, 1>", "gemv_decode<3, 0, 2, 4, 2, 2>",
                                           "gemv_decode<1, 0, 2, 4, 2, 1>", "gemv_decode<4, 0, 2, 4, 2, 1>",
                                           "gemv_decode<0, 0, 1, 4, 1, 1>", "gemv_decode<0, 0, 2, 4, 2, 1>",
                                           "gemv_decode<1, 0, 1, 4, 1, 1>", "gemv_decode<1, 0, 2, 4, 1, 1>",
                                           "gemv_decode<1, 2, 1, 4, 2, 1>"};
  /* What CI compiles: the coverage manifest's expansion (sk-warm --dry-run). */
  char warm[512];
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  char *argv[] = {warm, "--manifest", "tools/manifests/models/coverage.json", "--arch", "sm_120a", "--dry-run", NULL};
  char *listed = NULL;
  cr_assert_eq(tu_run(argv, NULL, &listed), 0, "sk-warm --dry-run of the coverage manifest (run from the repo root)");
  for (size_t i = 0; i < sizeof picked / sizeof *picked; i++) {
    cr_expect(strstr(all, picked[i]), "not picked: %s\n%s", picked[i], all);
    cr_expect(strstr(listed, picked[i]), "picked but not in tools/manifests/models/coverage.json's kernels: %s", picked[i]);
  }
  free(listed);
  for (size_t i = 0; i < sizeof not_picked / sizeof *not_picked; i++)
    cr_expect_null(strstr(all, not_picked[i]), "picked: %s\n%s", not_picked[i], all);
}

/* ---- binds the harness cannot phrase generically ------------------------------------------------------ */

/* Recipe-specific operand rules of gemm.blockscaled's bind (each message names the tensor). */
Test(gemm_ops, mm_bind_refuses_mismatched_operands) {
  sk_arch_props dev;
  sk_arch_table_devices("sm_120a", &dev, 1);
  const int64_t m = 4, n = 256, k = 512;
  for (int r = 0; r < 5; r++) {
    const sk_gemm_caps caps = mm_caps(r, 0, n, k, 16);
    sk_plan *p;
    cr_assert_eq(select_plan("gemm.blockscaled", &caps, &dev, &p), SK_OK);
    sk_binding *b;
    cr_assert_eq(sk_binding_create(p, "mm", &b), SK_OK);
    views v;
    mm_views(&v, r, 0, m, n, k);
    cr_assert_eq(sk_bind(b, v.p, v.n, NULL, 0), SK_OK, "%s: %s", gemm_recipe_names[r], sk_last_error_message());
    /* another recipe's A scales (tensor_fp8 takes none at all) */
    const int other = r == SK_GEMM_NVFP4 ? SK_GEMM_MXFP4 : r == SK_GEMM_TENSOR_FP8 ? SK_GEMM_MXFP8 : SK_GEMM_NVFP4;
    views w;
    mm_views(&w, other, 0, m, n, k);
    view(&v, 1, w.t[1].dtype, w.t[1].ndim, w.shape[1][0], w.shape[1][1]);
    cr_expect_eq(sk_bind(b, v.p, v.n, NULL, 0), SK_ERR_INVALID_ARGUMENT, "%s with %s's a_scales", gemm_recipe_names[r],
                 gemm_recipe_names[other]);
    cr_expect(strstr(sk_last_error_message(), "a_scales"), "%s", sk_last_error_message());
    /* B's K differs from A's */
    mm_views(&v, r, 0, m, n, k);
    v.shape[2][1] = code_cols(r, 128);
    cr_expect_eq(sk_bind(b, v.p, v.n, NULL, 0), SK_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(sk_last_error_message(), "b_codes") && strstr(sk_last_error_message(), "dim 1"), "%s",
              sk_last_error_message());
    /* M beyond max_m */
    mm_views(&v, r, 0, 17, n, k);
    cr_expect_eq(sk_bind(b, v.p, v.n, NULL, 0), SK_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(sk_last_error_message(), "MAX_M"), "%s", sk_last_error_message());
    cr_expect_eq(sk_run(b, NULL), SK_ERR_INVALID_ARGUMENT, "a refused bind leaves the binding unbound");
    sk_binding_destroy(b);
    sk_plan_destroy(p);
  }
  /* block_fp8_linear: per-row weight scales (it needs one per 128 rows) */
  const sk_gemm_linear_caps lc = linear_caps(640, 1024, 300, 0);
  sk_plan *p;
  cr_assert_eq(select_plan("gemm.block_fp8_linear", &lc, &dev, &p), SK_OK);
  sk_binding *b;
  cr_assert_eq(sk_binding_create(p, NULL, &b), SK_OK);
  size_t bytes;
  void *scratch = fake_scratch(p, &bytes);
  views v;
  linear_views(&v, L_BLOCK_FP8, 0, 100, 640, 1024);
  cr_assert_eq(sk_bind(b, v.p, v.n, scratch, bytes), SK_OK, "%s", sk_last_error_message());
  v.shape[2][0] = 640;
  cr_expect_eq(sk_bind(b, v.p, v.n, scratch, bytes), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "w_scales"), "%s", sk_last_error_message());
  sk_binding_destroy(b);
  sk_plan_destroy(p);
}

/* sk_gemm_mm's own checks come before any device is touched. */
Test(gemm_ops, mm_one_shot_refuses_bad_arguments_before_the_device) {
  const int64_t m = 4, n = 256, k = 512;
  views v;
  mm_views(&v, SK_GEMM_NVFP4, 0, m, n, k);
  const DLTensor *ac = v.p[0], *as = v.p[1], *bc = v.p[2], *bs = v.p[3], *c = v.p[5];
  cr_expect_eq(sk_gemm_mm((sk_gemm_recipe)7, ac, as, bc, bs, NULL, c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "unknown recipe"), "%s", sk_last_error_message());
  cr_expect_eq(sk_gemm_mm(SK_GEMM_NVFP4, NULL, as, bc, bs, NULL, c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  DLTensor bad = *c;
  bad.dtype = U8;
  cr_expect_eq(sk_gemm_mm(SK_GEMM_NVFP4, ac, as, bc, bs, NULL, &bad, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "bfloat16, float16 or float32"), "%s", sk_last_error_message());
  int64_t k_bad[2] = {m, 50};
  DLTensor a2 = *ac;
  a2.shape = k_bad;
  cr_expect_eq(sk_gemm_mm(SK_GEMM_NVFP4, &a2, as, bc, bs, NULL, c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "multiple of 128"), "%s", sk_last_error_message());
  int64_t m_bad[2] = {0, k / 2};
  a2.shape = m_bad;
  cr_expect_eq(sk_gemm_mm(SK_GEMM_NVFP4, &a2, as, bc, bs, NULL, c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  /* A valid call without a GPU fails cleanly at the device. */
  const sk_status s = sk_gemm_mm(SK_GEMM_NVFP4, ac, as, bc, bs, NULL, c, NULL, 0, NULL);
  if (!tu_exists("/dev/nvidia0"))
    cr_expect(s == SK_ERR_NO_DRIVER || s == SK_ERR_NO_DEVICE, "got %s: %s", sk_status_string(s), sk_last_error_message());
  const int64_t none[] = {0};
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, none, 1, 4096, 4096, "sm_120a"), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, NULL, 0, 4096, 4096, "sm_120a"), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, (sk_dtype)4, none, 1, 4096, 4096, "sm_120a"), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, none, 1, 4096, 4096, "sm120"), SK_ERR_INVALID_ARGUMENT);
}

/* ---- offline plans ------------------------------------------------------------------------------------ */

/* With an explicit arch and no GPU, plans compile their kernels into the cache; once resolved they
 * are found after a freeze; run is refused (nothing is loaded). */
Test(gemm_ops, offline_plans_compile_every_kernel_then_survive_a_freeze, .timeout = 300) {
  char *dir = tu_tempdir("gemmoff");
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
  sk_reset_counters();
  sk_gemm_linear_caps lc = linear_caps(4096, 1024, 9, 0);
  lc.arch = "sm_120a";
  sk_plan *p;
  cr_assert_eq(sk_plan_create("gemm.mxfp8_linear", &lc, &p), SK_OK, "%s", sk_last_error_message());
  sk_counters cnt;
  sk_get_counters(&cnt);
  cr_expect_eq(cnt.compiles, 3, "decode 8 and 16 tokens, the quantizer: %llu compiles", (unsigned long long)cnt.compiles);
  cr_expect_eq(sk_plan_kernel_count(p), GEMM_MAX_REGIMES + 1);
  cr_expect(sk_plan_kernel(p, 0) && sk_plan_kernel(p, 1) && !sk_plan_kernel(p, 2) && sk_plan_kernel(p, GEMM_MAX_REGIMES));
  cr_expect_str_eq(sk_plan_arch(p), "sm_120a");
  sk_scratch_spec spec;
  cr_assert_eq(sk_plan_scratch_spec(p, &spec), SK_OK);
  sk_binding *b;
  cr_assert_eq(sk_binding_create(p, NULL, &b), SK_OK);
  views v;
  linear_views(&v, L_MXFP8, 0, 9, 4096, 1024);
  cr_assert_eq(sk_bind(b, v.p, v.n, spec.bytes ? (void *)((uintptr_t)1 << 46) : NULL, spec.bytes), SK_OK, "%s",
               sk_last_error_message());
  const sk_status rs = sk_run(b, NULL);
  cr_expect(rs == SK_ERR_NO_DEVICE || tu_exists("/dev/nvidia0"), "offline run: %s", sk_status_string(rs));
  sk_binding_destroy(b);
  sk_plan_destroy(p);
  /* one-shot prewarm for an explicit arch: sk_gemm_mm's plan for M <= 8 (its one decode kernel) */
  const int64_t m1[] = {1};
  cr_assert_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, m1, 1, 4096, 4096, "sm_120a"), SK_OK, "%s", sk_last_error_message());
  sk_freeze_kernel_resolution("test");
  cr_expect_eq(sk_plan_create("gemm.mxfp8_linear", &lc, &p), SK_OK, "resolved before the freeze: %s", sk_last_error_message());
  sk_plan_destroy(p);
  const int64_t m8[] = {8, 3};
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, m8, 2, 4096, 4096, "sm_120a"), SK_OK, "%s", sk_last_error_message());
  /* M = 9 and 100 need the 16-token decode kernel (and the SM120 64-row kernel): never resolved */
  const int64_t m9[] = {9}, m100[] = {100};
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, m9, 1, 4096, 4096, "sm_120a"), SK_ERR_KERNEL_RESOLUTION_FROZEN);
  cr_expect_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, m100, 1, 4096, 4096, "sm_120a"), SK_ERR_KERNEL_RESOLUTION_FROZEN);
  lc.max_m = 16;
  lc.out = SK_DTYPE_FP32;
  cr_expect_eq(sk_plan_create("gemm.mxfp8_linear", &lc, &p), SK_ERR_KERNEL_RESOLUTION_FROZEN);
  cr_expect_null(p);
  tu_rmrf(dir);
  free(dir);
}

/* ---- weight packing ----------------------------------------------------------------------------------- */

Test(gemm_ops, pack_weight_matches_reference_for_every_recipe) {
  uint64_t seed = skref_test_seed("gemm pack_weight"), rng = seed;
  const size_t n = 300, ks[] = {64, 96, 640};
  for (int r = 0; r < 5; r++)
    for (size_t ki = 0; ki < 3; ki++) {
      size_t k = ks[ki];
      if (r == SKREF_GEMM_BLOCK_FP8 || r == SKREF_GEMM_TENSOR_FP8) k = ks[ki] * 2;
      const size_t cb = skref_gemm_code_bytes((skref_gemm_recipe)r, n, k),
                   sb = skref_gemm_scale_bytes((skref_gemm_recipe)r, SKREF_GEMM_B, n, k);
      uint8_t *codes = malloc(cb);
      uint8_t *scales = malloc(sb + 8);
      /* K not a multiple of 128: random codes and scale bytes */
      for (size_t i = 0; i < cb; i++) codes[i] = (uint8_t)skref_gemm_rand_u64(&rng);
      for (size_t i = 0; i < sb; i++) scales[i] = (uint8_t)(skref_gemm_rand_u64(&rng) & 0x3f);
      size_t pcb, psb;
      cr_assert_eq(sk_gemm_packed_bytes((sk_gemm_recipe)r, n, k, &pcb, &psb), SK_OK, "%s", sk_last_error_message());
      const size_t kp = skref_gemm_padded_k(k);
      cr_assert_eq((int64_t)kp, sk_gemm_padded_k((int64_t)k));
      cr_assert_eq(pcb, skref_gemm_code_bytes((skref_gemm_recipe)r, n, kp));
      cr_assert_eq(psb, skref_gemm_scale_bytes((skref_gemm_recipe)r, SKREF_GEMM_B, n, kp));
      uint8_t *ours_c = malloc(pcb), *ref_c = malloc(pcb), *ours_s = malloc(psb + 8), *ref_s = malloc(psb + 8);
      cr_assert_eq(sk_gemm_pack_weight((sk_gemm_recipe)r, n, k, codes, scales, ours_c, ours_s), SK_OK, "%s",
                   sk_last_error_message());
      skref_gemm_pack_weight((skref_gemm_recipe)r, n, k, codes, scales, ref_c, ref_s);
      cr_assert_eq(memcmp(ours_c, ref_c, pcb), 0, "seed %llu recipe %d k %zu: packed codes differ", (unsigned long long)seed, r, k);
      if (psb)
        cr_assert_eq(memcmp(ours_s, ref_s, psb), 0, "seed %llu recipe %d k %zu: packed scales differ", (unsigned long long)seed, r, k);
      free(codes), free(scales), free(ours_c), free(ref_c), free(ours_s), free(ref_s);
    }
  cr_expect_eq(sk_gemm_padded_k(0), 0);
  cr_expect_eq(sk_gemm_padded_k(1), 128);
  cr_expect_eq(sk_gemm_padded_k(128), 128);
  cr_expect_eq(sk_gemm_padded_k(129), 256);
  size_t cb, sb;
  cr_expect_eq(sk_gemm_packed_bytes(SK_GEMM_NVFP4, 4, 24, &cb, &sb), SK_ERR_INVALID_ARGUMENT, "nvfp4 K % 16");
  cr_expect_eq(sk_gemm_packed_bytes(SK_GEMM_MXFP8, 4, 48, &cb, &sb), SK_ERR_INVALID_ARGUMENT, "mxfp8 K % 32");
  cr_expect_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, 0, 128, &cb, &sb), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, 1, 128, NULL, &sb), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_gemm_pack_weight((sk_gemm_recipe)9, 1, 128, "", "", (void *)1, (void *)1), SK_ERR_INVALID_ARGUMENT);
  uint8_t one[128];
  cr_expect_eq(sk_gemm_pack_weight(SK_GEMM_MXFP8, 1, 128, one, NULL, one, one), SK_ERR_INVALID_ARGUMENT, "scales NULL");
}

/* ---- the decode work split (ops/gemm/decode_schedule.cuh) ------------------------------------------------ */

/* The stream-K split, walked as the kernel walks it: every unit is taken exactly once; only a
 * CTA's first and last tile can be partial; a split tile's CTAs are cta_of_unit(first unit) ..
 * cta_of_unit(last unit), and the slot each of them writes is the one the fixup reads (distinct
 * slots); "no split" is never claimed wrongly. */
Test(gemm_ops, decode_schedule_takes_every_unit_once) {
  const int tiles_set[] = {1, 7, 16, 160, 256, 896}, steps_set[] = {1, 2, 9, 23, 64}, ctas_set[] = {1, 3, 5, 7, 16, 132, 396, 528, 600};
  for (size_t a = 0; a < sizeof tiles_set / sizeof *tiles_set; a++)
    for (size_t b = 0; b < sizeof steps_set / sizeof *steps_set; b++)
      for (size_t cc = 0; cc < sizeof ctas_set / sizeof *ctas_set; cc++) {
        const int tiles = tiles_set[a], steps = steps_set[b], ctas = ctas_set[cc], units = tiles * steps;
        if (ctas > units) continue; /* the contract: every CTA has work (the host never launches more) */
        int *owner = malloc(sizeof(int) * (size_t)units), *slot_of = malloc(sizeof(int) * (size_t)units);
        int *slot_used = calloc(2 * (size_t)ctas, sizeof(int));
        int split_tiles = 0;
        for (int i = 0; i < units; i++) owner[i] = -1;
        for (int c = 0; c < ctas; c++) {
          const int u_begin = sk_decode_cta_begin(c, units, ctas), u_end = sk_decode_cta_begin(c + 1, units, ctas);
          cr_assert(u_end - u_begin == units / ctas || u_end - u_begin == units / ctas + 1, "balanced to one unit");
          int partial_tiles = 0;
          for (int u = u_begin; u < u_end;) { /* the kernel's tile loop */
            const int tile = u / steps, s_begin = u - tile * steps;
            const int s_end = s_begin + (u_end - u) < steps ? s_begin + (u_end - u) : steps;
            const int slot = 2 * c + (u == u_begin ? 0 : 1);
            if (s_begin > 0 || s_end < steps) {
              partial_tiles++;
              cr_assert(u == u_begin || s_end == u_end - tile * steps, "a partial tile is the CTA's first or last");
              cr_assert_eq(slot, sk_decode_partial_slot(c, tile, steps, units, ctas));
              cr_assert_eq(slot_used[slot]++, 0, "slot %d written twice", slot);
            }
            for (int s = s_begin; s < s_end; s++) {
              cr_assert_eq(owner[tile * steps + s], -1, "unit taken twice");
              owner[tile * steps + s] = c;
              slot_of[tile * steps + s] = slot;
            }
            u += s_end - s_begin;
          }
          cr_assert_leq(partial_tiles, 2);
          for (int u = u_begin; u < u_end; u++) cr_assert_eq(sk_decode_cta_of_unit(u, units, ctas), c);
        }
        for (int tile = 0; tile < tiles; tile++) {
          const int first = sk_decode_cta_of_unit(tile * steps, units, ctas);
          const int last = sk_decode_cta_of_unit(tile * steps + steps - 1, units, ctas);
          cr_assert_eq(owner[tile * steps], first);
          cr_assert_eq(owner[tile * steps + steps - 1], last);
          if (first == last) continue;
          split_tiles++;
          /* The fixup's order: slot of `first` (maybe its last tile), then 2c: each CTA once, in K order. */
          int s = 0;
          for (int c = first; c <= last; c++) {
            const int want = c == first ? sk_decode_partial_slot(first, tile, steps, units, ctas) : 2 * c;
            while (s < steps && owner[tile * steps + s] != c) s++;
            cr_assert_lt(s, steps, "CTA %d takes part in tile %d", c, tile);
            cr_assert_eq(slot_of[tile * steps + s], want, "tiles %d steps %d ctas %d tile %d cta %d", tiles, steps, ctas, tile, c);
          }
        }
        for (int i = 0; i < units; i++) cr_assert_neq(owner[i], -1, "unit %d not taken", i);
        if (!sk_decode_may_split_tiles(tiles, steps, ctas))
          cr_assert_eq(split_tiles, 0, "tiles %d steps %d ctas %d: claimed unsplit", tiles, steps, ctas);
        free(owner), free(slot_of), free(slot_used);
      }
}

/* Decode tile rows (sk_decode_row): every weight row below N belongs to exactly one (tile, local
 * row), for every recipe, row tiles and groups, including N that is not a multiple of a span.
 * Interleaved tiles (mxfp4, mxfp8 at 1-2 row tiles, groups dividing 4): a lane's 2*row_tiles
 * rows lie 32 apart from its first row, whose 128x4-swizzled scale word starts an aligned 8- or
 * 16-byte piece of one 16-byte chunk (first row % 128 < 32 for 2 row tiles, < 32 or in [64, 96)
 * for 1), so the kernel loads them all at once. */
Test(gemm_ops, decode_tile_rows_cover_every_row_once) {
  static const int ns[] = {1, 31, 77, 200, 2880, 4096, 5120};
  static unsigned char hits[5120];
  for (int recipe = 0; recipe < 5; recipe++)
    for (int row_tiles = 1; row_tiles <= 4; row_tiles *= 2)
      for (int groups = 1; groups <= 4; groups++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
          const int n = ns[ni], rows = sk_decode_tile_rows(row_tiles, groups);
          const int tiles = sk_decode_tiles(n, recipe, row_tiles, groups);
          const int interleaved = sk_decode_interleaved(recipe, row_tiles, groups);
          cr_assert_eq(interleaved, (recipe == 1 || recipe == 2) && row_tiles <= 2 && 4 % groups == 0);
          memset(hits, 0, sizeof hits);
          for (int tile = 0; tile < tiles; tile++)
            for (int r = 0; r < rows; r++) {
              const int row = sk_decode_row(tile, r, recipe, row_tiles, groups);
              cr_assert_geq(row, 0);
              cr_assert_lt(row, tiles * rows, "recipe %d rt %d g %d n %d: row %d past the tiles", recipe, row_tiles, groups, n, row);
              if (row < n) {
                cr_assert_eq(hits[row], 0, "recipe %d rt %d g %d n %d: row %d twice", recipe, row_tiles, groups, n, row);
                hits[row] = 1;
              }
              if (interleaved && r % (16 * row_tiles) < 8) { /* a lane's first row: slot 0 */
                const int group = r / (16 * row_tiles), g = r % 8, pos = row % 128 / 32;
                cr_assert(row_tiles == 2 ? pos == 0 : pos == 0 || pos == 2, "row %d: chunk position %d", row, pos);
                for (int slot = 1; slot < 2 * row_tiles; slot++)
                  cr_assert_eq(sk_decode_row(tile, 16 * row_tiles * group + 8 * slot + g, recipe, row_tiles, groups), row + 32 * slot);
              }
            }
          for (int row = 0; row < n; row++)
            cr_assert_eq(hits[row], 1, "recipe %d rt %d g %d n %d: row %d missed", recipe, row_tiles, groups, n, row);
          /* interleaved tiles may overshoot N by less than a span; contiguous ones by less than a tile */
          cr_assert_lt((int64_t)(tiles - 1) * rows, interleaved ? n + 64 * row_tiles : n);
        }
}

/* gemm.h: BLOCK_FP8 raw weight scales are [ceil(n/128), ceil(k/128)] fp32, so a K that is not a
 * multiple of 128 has a last partial block. The raw scales end right at a PROT_NONE page: reading
 * one float past the documented size crashes the test. packed_bytes takes a NULL scales size
 * for TENSOR_FP8, which has no scales. */
Test(gemm_ops, pack_weight_block_fp8_partial_k_and_packed_bytes_without_scales) {
  const int64_t n = 200, k = 300, rows = 2, cols = 3; /* ceil(200/128), ceil(300/128) */
  const long page = sysconf(_SC_PAGESIZE);
  const size_t raw = (size_t)(rows * cols) * sizeof(float);
  uint8_t *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(map, MAP_FAILED);
  cr_assert_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
  float *scales = (float *)(map + page - raw);
  for (int64_t i = 0; i < rows * cols; i++) scales[i] = 0.5f + (float)i;
  uint8_t *codes = malloc((size_t)(n * k));
  for (int64_t i = 0; i < n * k; i++) codes[i] = (uint8_t)(i * 7 + 1);
  size_t cb = 0, sb = 0;
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_BLOCK_FP8, n, k, &cb, &sb), SK_OK, "%s", sk_last_error_message());
  const int64_t kp = sk_gemm_padded_k(k);
  cr_assert_eq(kp, 384);
  cr_assert_eq(cb, (size_t)(n * kp));
  cr_assert_eq(sb, raw, "the packed scales keep ceil(k/128) = kp/128 columns");
  uint8_t *pc = malloc(cb);
  float *ps = malloc(sb);
  cr_assert_eq(sk_gemm_pack_weight(SK_GEMM_BLOCK_FP8, n, k, codes, scales, pc, ps), SK_OK, "%s", sk_last_error_message());
  for (int64_t i = 0; i < rows * cols; i++) cr_assert_eq(ps[i], scales[i], "scale %lld", (long long)i);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < kp; c++)
      cr_assert_eq(pc[r * kp + c], c < k ? codes[r * k + c] : 0, "code [%lld, %lld]", (long long)r, (long long)c);
  free(codes);
  free(pc);
  free(ps);
  munmap(map, 2 * (size_t)page);

  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, n, k, &cb, NULL), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(cb, (size_t)(n * kp));
  sb = 7;
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, n, k, &cb, &sb), SK_OK);
  cr_assert_eq(sb, 0);
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_MXFP8, n, 320, &cb, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, n, k, NULL, &sb), SK_ERR_INVALID_ARGUMENT);
}
