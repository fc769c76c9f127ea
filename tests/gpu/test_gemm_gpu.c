/* The gemm ops on a GPU, where the harness's GPU suite (tests/gpu/test_ops_gpu.c, with the case
 * tables of ops/gemm/cases.c: every recipe, output, regime against the double reference, graph
 * replay) does not reach:
 *  - sk_gemm_mm, the one-shot path: equal bit for bit to a gemm.blockscaled plan bound with the
 *    same workspace, with and without one (the fallback grid: a tile per CTA), within the
 *    reference's tolerance either way; run twice, bit for bit; its bad tensors refused on the
 *    device path; its plan cache (a second call of a range resolves nothing) and that cache under
 *    racing threads; prewarm, freeze, then an unwarmed range refused and a warmed one accepted,
 *    and graph replay of a one-shot call;
 *  - sk_gemm_describe: its kernel launched directly with its geometry equals sk_gemm_mm's output;
 *  - the decode grids the overrides select (split-K, stream-K far past a wave, 2 and 4 row
 *    groups), read per plan;
 *  - the linear ops against their parts, bit for bit: gemm.mxfp8_linear = quantization.mxfp8 +
 *    gemm.blockscaled (default, and the fused decode kernel of SPARKINFER_GEMM_LINEAR_FUSED=1),
 *    gemm.block_fp8_linear = the CPU quantizer (bit-exact with its kernel) + gemm.blockscaled,
 *    gemm.tensor_fp8_linear = gemm.blockscaled;
 *  - FP16 outputs past 65504: infinities of the reference's sign.
 * Operands are random codes and scales (ops/gemm/ref.h); tolerance skref_gemm_tolerance (FP32
 * accumulation of K products bounded by the sum of |a*b|, one rounding of the output); outputs
 * poisoned (0xff: NaN) before every run. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/ref.h"
#include "gemm/ref.h"
#include "gpu_util.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/jit.h"
#include "sparkinfer/quantization.h"
#include "testutil.h"

static char *dir;
static void setup(void) { dir = gpu_test_setup("gpugemm"); }
static void teardown(void) {
  tu_rmrf(dir);
  free(dir);
}

static const DLDataType out_dt[3] = {{kDLBfloat, 16, 1}, {kDLFloat, 16, 1}, {kDLFloat, 32, 1}};
#define U8 ((DLDataType){kDLUInt, 8, 1})
#define F32 ((DLDataType){kDLFloat, 32, 1})
#define BF16 ((DLDataType){kDLBfloat, 16, 1})

static int failures;
#define GEMM_FAIL(...)                                                                           \
  do {                                                                                           \
    if (failures++ < 30) {                                                                       \
      fprintf(stderr, "MISMATCH " __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                                       \
    }                                                                                            \
  } while (0)

/* ---- operands ------------------------------------------------------------------------------------ */

typedef struct dev_operand {
  void *codes, *scales;
  int64_t cshape[2], sshape[2];
  DLTensor tc, ts;
} dev_operand;

static void upload_operand(skref_gemm_recipe r, skref_gemm_side side, size_t rows, size_t k, const uint8_t *codes,
                           const void *scales, dev_operand *d) {
  const size_t cb = skref_gemm_code_bytes(r, rows, k), sb = skref_gemm_scale_bytes(r, side, rows, k);
  d->codes = gpu_upload(codes, cb);
  d->cshape[0] = (int64_t)rows;
  d->cshape[1] = (int64_t)(skref_gemm_is_fp4(r) ? k / 2 : k);
  d->tc = tu_device_tensor(d->codes, U8, 2, d->cshape);
  d->scales = sb ? gpu_upload(scales, sb) : NULL;
  if (r == SKREF_GEMM_BLOCK_FP8) {
    d->sshape[0] = side == SKREF_GEMM_A ? (int64_t)rows : (int64_t)((rows + 127) / 128);
    d->sshape[1] = (int64_t)(k / 128);
    d->ts = tu_device_tensor(d->scales, F32, 2, d->sshape);
  } else {
    d->sshape[0] = (int64_t)sb;
    d->ts = tu_device_tensor(d->scales, U8, 1, d->sshape);
  }
}

static void free_operand(dev_operand *d) {
  CUDA_OK(cudaFree(d->codes));
  if (d->scales) CUDA_OK(cudaFree(d->scales));
}

/* One random problem: host operands, the double reference, device operands, alpha, C. */
typedef struct problem {
  skref_gemm_recipe r;
  int out;
  size_t m, n, k;
  uint8_t *ac, *bc;
  void *as, *bs;
  float alpha;
  double *ref, *abs_sum;
  dev_operand da, db;
  void *dalpha, *dc;
  int64_t alpha_shape[1], c_shape[2];
  DLTensor talpha, tcout;
  size_t c_bytes;
} problem;

static void problem_make(problem *p, skref_gemm_recipe r, int out, size_t m, size_t n, size_t k, uint64_t *rng) {
  memset(p, 0, sizeof *p);
  p->r = r, p->out = out, p->m = m, p->n = n, p->k = k;
  p->ac = malloc(skref_gemm_code_bytes(r, m, k));
  p->bc = malloc(skref_gemm_code_bytes(r, n, k));
  p->as = malloc(skref_gemm_scale_bytes(r, SKREF_GEMM_A, m, k) + 4);
  p->bs = malloc(skref_gemm_scale_bytes(r, SKREF_GEMM_B, n, k) + 4);
  p->ref = malloc(m * n * sizeof(double));
  p->abs_sum = malloc(m * n * sizeof(double));
  cr_assert(p->ac && p->bc && p->as && p->bs && p->ref && p->abs_sum);
  skref_gemm_random_operand(r, SKREF_GEMM_A, m, k, rng, p->ac, p->as);
  skref_gemm_random_operand(r, SKREF_GEMM_B, n, k, rng, p->bc, p->bs);
  const skref_gemm_operand oa = {r, SKREF_GEMM_A, m, k, p->ac, r == SKREF_GEMM_TENSOR_FP8 ? NULL : p->as};
  const skref_gemm_operand ob = {r, SKREF_GEMM_B, n, k, p->bc, r == SKREF_GEMM_TENSOR_FP8 ? NULL : p->bs};
  p->alpha = (float)(0.5 + skref_gemm_rand_uniform(rng));
  skref_gemm(&oa, &ob, p->alpha, p->ref, p->abs_sum);
  if (out == SKREF_GEMM_OUT_FP16) {
    /* FP8 products reach 2e5 and beyond: keep most of the FP16 range in use without overflowing
     * (overflow has its own test) */
    double peak = 0;
    for (size_t i = 0; i < m * n; i++) peak = fmax(peak, fabs(p->ref[i]));
    if (peak > 30000) {
      p->alpha = (float)(p->alpha * (30000 / peak));
      skref_gemm(&oa, &ob, p->alpha, p->ref, p->abs_sum);
    }
  }
  upload_operand(r, SKREF_GEMM_A, m, k, p->ac, p->as, &p->da);
  upload_operand(r, SKREF_GEMM_B, n, k, p->bc, p->bs, &p->db);
  p->dalpha = gpu_upload(&p->alpha, 4);
  p->alpha_shape[0] = 1;
  p->talpha = tu_device_tensor(p->dalpha, F32, 1, p->alpha_shape);
  p->c_bytes = m * n * skref_gemm_out_bytes((skref_gemm_out)out);
  p->dc = gpu_poisoned(p->c_bytes);
  p->c_shape[0] = (int64_t)m;
  p->c_shape[1] = (int64_t)n;
  p->tcout = tu_device_tensor(p->dc, out_dt[out], 2, p->c_shape);
}

static void problem_free(problem *p) {
  free_operand(&p->da);
  free_operand(&p->db);
  CUDA_OK(cudaFree(p->dalpha));
  CUDA_OK(cudaFree(p->dc));
  free(p->ac), free(p->bc), free(p->as), free(p->bs), free(p->ref), free(p->abs_sum);
}

static const DLTensor *a_scales(const problem *p) { return p->r == SKREF_GEMM_TENSOR_FP8 ? NULL : &p->da.ts; }
static const DLTensor *b_scales(const problem *p) { return p->r == SKREF_GEMM_TENSOR_FP8 ? NULL : &p->db.ts; }

/* |got - ref| <= tol, where an FP16 result beyond the largest finite value (65504; RN sends
 * |x| >= 65520 to infinity) must be the infinity of the reference's sign. NaN never passes. */
static int out_close(skref_gemm_out t, double got, double ref, double tol) {
  if (t == SKREF_GEMM_OUT_FP16 && fabs(ref) - tol >= 65520.0) return isinf(got) && (got > 0) == (ref > 0);
  if (t == SKREF_GEMM_OUT_FP16 && fabs(ref) + tol >= 65520.0 && isinf(got)) return (got > 0) == (ref > 0);
  return fabs(got - ref) <= tol;
}

/* The first element off the reference, reported; 1 if any. */
static int check_ref(const problem *p, const void *host, const char *what) {
  for (size_t i = 0; i < p->m * p->n; i++) {
    const double got = skref_gemm_load_out((skref_gemm_out)p->out, host, i);
    const double tol = skref_gemm_tolerance((skref_gemm_out)p->out, p->ref[i], p->abs_sum[i], p->k);
    if (!out_close((skref_gemm_out)p->out, got, p->ref[i], tol)) {
      GEMM_FAIL("%s: %s out %d M=%zu N=%zu K=%zu: C[%zu,%zu] = %.9g, ref %.9g, tol %.3g", what, skref_gemm_recipe_name(p->r),
                p->out, p->m, p->n, p->k, i / p->n, i % p->n, got, p->ref[i], tol);
      return 1;
    }
  }
  return 0;
}

/* Poison C, run `call`, return C's bytes (malloc'ed). */
typedef sk_status (*run_fn)(problem *p, void *ctx, cudaStream_t s);
static void *run_poisoned(problem *p, run_fn fn, void *ctx, cudaStream_t s) {
  CUDA_OK(cudaMemsetAsync(p->dc, 0xff, p->c_bytes, s));
  SK_OK_OR_FAIL(fn(p, ctx, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaGetLastError());
  return gpu_download(p->dc, p->c_bytes);
}

typedef struct ws_ctx {
  void *ws;
  size_t bytes;
} ws_ctx;

static sk_status run_one_shot(problem *p, void *ctx, cudaStream_t s) {
  const ws_ctx *w = ctx;
  return sk_gemm_mm((sk_gemm_recipe)p->r, &p->da.tc, a_scales(p), &p->db.tc, b_scales(p), &p->talpha, &p->tcout, w->ws, w->bytes, s);
}

/* A gemm.blockscaled plan of max_m = M bound with the given scratch. */
static sk_status run_plan(problem *p, void *ctx, cudaStream_t s) {
  const ws_ctx *w = ctx;
  sk_gemm_caps caps = SK_GEMM_CAPS_INIT;
  caps.recipe = (sk_gemm_recipe)p->r;
  caps.out = (sk_dtype)p->out;
  caps.n = (int64_t)p->n;
  caps.k = (int64_t)p->k;
  caps.max_m = (int64_t)p->m;
  const DLTensor *t[6] = {&p->da.tc, a_scales(p), &p->db.tc, b_scales(p), &p->talpha, &p->tcout};
  sk_plan *plan;
  sk_status st = sk_plan_create("gemm.blockscaled", &caps, &plan);
  if (st != SK_OK) return st;
  sk_binding *b = NULL;
  st = sk_binding_create(plan, "mm", &b);
  if (st == SK_OK) st = sk_bind(b, t, 6, w->ws, w->bytes);
  if (st == SK_OK) st = sk_run(b, s);
  sk_binding_destroy(b);
  sk_plan_destroy(plan);
  return st;
}

/* ---- the one-shot path ------------------------------------------------------------------------------ */

/* sk_gemm_mm with its workspace (sk_gemm_workspace_bytes, zeroed once) and without: each within
 * the tolerance, twice bit for bit, and equal bit for bit to a plan bound the same way. */
static void check_one_shot(skref_gemm_recipe r, int out, size_t m, size_t n, size_t k, uint64_t *rng, cudaStream_t s) {
  problem p;
  problem_make(&p, r, out, m, n, k, rng);
  const size_t wsb = sk_gemm_workspace_bytes((sk_gemm_recipe)r, (int64_t)m, (int64_t)n, (int64_t)k);
  ws_ctx with = {wsb ? gpu_zeroed(wsb) : NULL, wsb}, without = {NULL, 0};
  for (int w = 0; w < 2; w++) {
    ws_ctx *ctx = w ? &without : &with;
    char what[64];
    snprintf(what, sizeof what, "sk_gemm_mm %s workspace", w ? "without" : "with");
    void *first = run_poisoned(&p, run_one_shot, ctx, s), *again = run_poisoned(&p, run_one_shot, ctx, s);
    void *planned = run_poisoned(&p, run_plan, ctx, s);
    if (!check_ref(&p, first, what)) {
      if (memcmp(first, again, p.c_bytes)) GEMM_FAIL("%s %s M=%zu N=%zu K=%zu: two runs differ", what, skref_gemm_recipe_name(r), m, n, k);
      if (memcmp(first, planned, p.c_bytes))
        GEMM_FAIL("%s %s out %d M=%zu N=%zu K=%zu: differs from the plan's run", what, skref_gemm_recipe_name(r), out, m, n, k);
    }
    free(first), free(again), free(planned);
  }
  if (with.ws) CUDA_OK(cudaFree(with.ws));
  problem_free(&p);
}

Test(gpu_gemm, one_shot_equals_the_plan_with_and_without_workspace, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed = skref_test_seed("gpu gemm one-shot"), rng = seed;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  static const size_t ms[] = {1, 3, 9, 16, 17, 300};
  for (int r = 0; r < 5; r++)
    for (int o = 0; o < 3; o++)
      for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) check_one_shot((skref_gemm_recipe)r, o, ms[i], 200, 1152, &rng, s);
  /* split grids (the workspace's partials and counters; the fallback takes whole tiles) */
  for (int r = 0; r < 5; r++) {
    check_one_shot((skref_gemm_recipe)r, 0, 1, 8192, 2048, &rng, s);
    check_one_shot((skref_gemm_recipe)r, 0, 16, 5120, 2944, &rng, s);
    check_one_shot((skref_gemm_recipe)r, 1, 3, 512, 8192, &rng, s);
  }
  CUDA_OK(cudaStreamDestroy(s));
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* A workspace too small or misaligned for the split grid is not used: the fallback grid, the
 * same bits as no workspace. */
Test(gpu_gemm, one_shot_falls_back_without_a_usable_workspace, .init = setup, .fini = teardown) {
  uint64_t seed = skref_test_seed("gpu gemm workspace fallback"), rng = seed;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  problem p;
  problem_make(&p, SKREF_GEMM_TENSOR_FP8, 0, 1, 2048, 8192, &rng);
  const size_t wsb = sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 2048, 8192);
  cr_assert_gt(wsb, 0, "the shape splits its tiles");
  char *ws = gpu_zeroed(wsb + 256);
  ws_ctx none = {NULL, 0}, full = {ws, wsb}, shorter = {ws, wsb - 4}, misaligned = {ws + 16, wsb};
  void *want = run_poisoned(&p, run_one_shot, &none, s), *split = run_poisoned(&p, run_one_shot, &full, s);
  void *got_short = run_poisoned(&p, run_one_shot, &shorter, s), *got_mis = run_poisoned(&p, run_one_shot, &misaligned, s);
  check_ref(&p, want, "no workspace");
  check_ref(&p, split, "workspace");
  cr_expect_eq(memcmp(want, got_short, p.c_bytes), 0, "seed %llu: a short workspace is not used", (unsigned long long)seed);
  cr_expect_eq(memcmp(want, got_mis, p.c_bytes), 0, "seed %llu: a misaligned workspace is not used", (unsigned long long)seed);
  /* every launch left the counters at zero: the workspace is reusable as is */
  uint32_t *counters = gpu_download(ws, 512);
  for (int i = 0; i < 128; i++) cr_expect_eq(counters[i], 0u, "tile counter %d", i);
  free(counters);
  free(want), free(split), free(got_short), free(got_mis);
  CUDA_OK(cudaFree(ws));
  problem_free(&p);
  CUDA_OK(cudaStreamDestroy(s));
  cr_assert_eq(failures, 0, "seed %llu", (unsigned long long)seed);
}

/* On the device path the bind's checks refuse bad tensors, naming them. */
Test(gpu_gemm, one_shot_refuses_bad_tensors, .init = setup, .fini = teardown) {
  uint64_t rng = skref_test_seed("gpu gemm bad tensors");
  problem p;
  problem_make(&p, SKREF_GEMM_NVFP4, 0, 4, 256, 512, &rng);
  const DLTensor *ac = &p.da.tc, *as = &p.da.ts, *bc = &p.db.tc, *bs = &p.db.ts, *c = &p.tcout;
  struct {
    const char *what;
    sk_gemm_recipe r;
    DLTensor ac, as, bc, bs, c;
    const char *needle;
  } bad[8];
  int nb = 0;
  DLTensor t;
  int64_t bk_bad[2] = {256, 64};
  t = *bc, t.shape = bk_bad;
  bad[nb++] = (__typeof__(bad[0])){"B's K differs", SK_GEMM_NVFP4, *ac, *as, t, *bs, *c, "b_codes"};
  bad[nb++] = (__typeof__(bad[0])){"mxfp4 with nvfp4's scales", SK_GEMM_MXFP4, *ac, *as, *bc, *bs, *c, "a_scales"};
  t = *ac, t.byte_offset = 4;
  bad[nb++] = (__typeof__(bad[0])){"misaligned codes", SK_GEMM_NVFP4, t, *as, *bc, *bs, *c, "aligned"};
  int64_t c_bad[2] = {4, 257};
  t = *c, t.shape = c_bad;
  bad[nb++] = (__typeof__(bad[0])){"C's shape", SK_GEMM_NVFP4, *ac, *as, *bc, *bs, t, "tensor c"};
  t = *as, t.dtype = F32;
  bad[nb++] = (__typeof__(bad[0])){"scale dtype", SK_GEMM_NVFP4, *ac, t, *bc, *bs, *c, "a_scales"};
  t = *c, t.device.device_type = kDLCPU;
  bad[nb++] = (__typeof__(bad[0])){"host C", SK_GEMM_NVFP4, *ac, *as, *bc, *bs, t, "kDLCUDA"};
  for (int i = 0; i < nb; i++) {
    const sk_status s = sk_gemm_mm(bad[i].r, &bad[i].ac, &bad[i].as, &bad[i].bc, &bad[i].bs, NULL, &bad[i].c, NULL, 0, NULL);
    cr_expect_eq(s, SK_ERR_INVALID_ARGUMENT, "%s: got %s", bad[i].what, sk_status_string(s));
    cr_expect(strstr(sk_last_error_message(), bad[i].needle), "%s: \"%s\" lacks \"%s\"", bad[i].what, sk_last_error_message(),
              bad[i].needle);
  }
  /* tensor_fp8 takes no block scales; block_fp8 wants fp32 ones */
  int64_t f8a[2] = {4, 512}, f8b[2] = {256, 512};
  DLTensor a8 = tu_device_tensor(p.da.codes, U8, 2, f8a), b8 = tu_device_tensor(p.db.codes, U8, 2, f8b);
  cr_expect_eq(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &a8, as, &b8, NULL, NULL, c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "a_scales"), "%s", sk_last_error_message());
  cr_expect_eq(sk_gemm_mm(SK_GEMM_BLOCK_FP8, &a8, as, &b8, bs, NULL, c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  uint8_t *nothing = gpu_download(p.dc, p.c_bytes);
  for (size_t i = 0; i < p.c_bytes; i++) cr_assert_eq(nothing[i], 0xff, "a refused call wrote C");
  free(nothing);
  problem_free(&p);
}

/* FP16 output, alpha 1, FP8 products: outputs past 65504 must be the right infinities. */
Test(gpu_gemm, fp16_overflow_gives_signed_infinities, .init = setup, .fini = teardown) {
  uint64_t seed = skref_test_seed("gpu gemm fp16 overflow"), rng = seed;
  const size_t m = 2, n = 512, k = 2048;
  uint8_t *ac = malloc(m * k), *bc = malloc(n * k);
  skref_gemm_random_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_A, m, k, &rng, ac, NULL);
  skref_gemm_random_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_B, n, k, &rng, bc, NULL);
  const skref_gemm_operand oa = {SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_A, m, k, ac, NULL}, ob = {SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_B, n, k, bc, NULL};
  double *ref = malloc(m * n * 8), *abs_sum = malloc(m * n * 8);
  skref_gemm(&oa, &ob, 1.0, ref, abs_sum);
  dev_operand da, db;
  upload_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_A, m, k, ac, NULL, &da);
  upload_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_B, n, k, bc, NULL, &db);
  void *dc = gpu_poisoned(m * n * 2);
  int64_t cs[2] = {(int64_t)m, (int64_t)n};
  DLTensor tc = tu_device_tensor(dc, out_dt[1], 2, cs);
  SK_OK_OR_FAIL(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &da.tc, NULL, &db.tc, NULL, NULL, &tc, NULL, 0, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  uint16_t *got = gpu_download(dc, m * n * 2);
  int overflowed = 0;
  for (size_t i = 0; i < m * n; i++) {
    const double g = skref_gemm_load_out(SKREF_GEMM_OUT_FP16, got, i);
    const double tol = skref_gemm_tolerance(SKREF_GEMM_OUT_FP16, ref[i], abs_sum[i], k);
    overflowed += fabs(ref[i]) >= 65520.0;
    cr_expect(out_close(SKREF_GEMM_OUT_FP16, g, ref[i], tol), "seed %llu: C[%zu] = %g, ref %.9g", (unsigned long long)seed, i, g,
              ref[i]);
  }
  cr_expect_gt(overflowed, 0, "seed %llu: the case produced no overflow", (unsigned long long)seed);
  free_operand(&da), free_operand(&db);
  CUDA_OK(cudaFree(dc));
  free(ac), free(bc), free(ref), free(abs_sum), free(got);
}

/* The plan cache: the first call of a range of M makes its plan, later calls of that range
 * resolve nothing; after sk_gemm_prewarm and a freeze an M of a warmed range runs (an M that was
 * not listed included), an unwarmed range and an unwarmed output type are refused, and a captured
 * one-shot call replays bit for bit. */
Test(gpu_gemm, prewarm_freeze_then_graph_replay, .init = setup, .fini = teardown) {
  uint64_t seed = skref_test_seed("gpu gemm graph"), rng = seed;
  const int64_t warm[] = {1};
  SK_OK_OR_FAIL(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, warm, 1, 4096, 4096, NULL));
  sk_counters before, after;
  SK_OK_OR_FAIL(sk_get_counters(&before));
  problem p;
  problem_make(&p, SKREF_GEMM_NVFP4, 0, 5, 4096, 4096, &rng); /* M = 5: the warmed range M <= 8 */
  const size_t wsb = sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 5, 4096, 4096);
  void *ws = gpu_zeroed(wsb ? wsb : 256);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ws_ctx w = {ws, wsb};
  void *eager = run_poisoned(&p, run_one_shot, &w, s);
  SK_OK_OR_FAIL(sk_get_counters(&after));
  cr_expect_eq(after.memory_hits + after.disk_hits + after.compiles, before.memory_hits + before.disk_hits + before.compiles,
               "a warmed range resolves nothing");
  check_ref(&p, eager, "after prewarm");
  SK_OK_OR_FAIL(sk_freeze_kernel_resolution("gemm graph test"));
  /* unwarmed: M = 9 (the 16-token kernel), FP32 output */
  problem q;
  problem_make(&q, SKREF_GEMM_NVFP4, 0, 9, 4096, 4096, &rng);
  cr_expect_eq(sk_gemm_mm(SK_GEMM_NVFP4, &q.da.tc, &q.da.ts, &q.db.tc, &q.db.ts, NULL, &q.tcout, NULL, 0, s),
               SK_ERR_KERNEL_RESOLUTION_FROZEN);
  DLTensor c32 = tu_device_tensor(p.dc, out_dt[2], 2, p.c_shape);
  cr_expect_eq(sk_gemm_mm(SK_GEMM_NVFP4, &p.da.tc, &p.da.ts, &p.db.tc, &p.db.ts, NULL, &c32, NULL, 0, s),
               SK_ERR_KERNEL_RESOLUTION_FROZEN);
  problem_free(&q);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const sk_status cs = run_one_shot(&p, &w, s);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  SK_OK_OR_FAIL(cs);
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; i++) {
    CUDA_OK(cudaMemsetAsync(p.dc, 0xff, p.c_bytes, s));
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    void *rep = gpu_download(p.dc, p.c_bytes);
    cr_expect_eq(memcmp(eager, rep, p.c_bytes), 0, "seed %llu: replay %d differs", (unsigned long long)seed, i);
    free(rep);
  }
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFree(ws));
  free(eager);
  problem_free(&p);
  cr_assert_eq(failures, 0, "seed %llu", (unsigned long long)seed);
}

/* sk_gemm_describe's kernel, resolved and launched directly with its geometry, writes what
 * sk_gemm_mm writes (decode without a split, and tiled). */
Test(gpu_gemm, describe_launches_what_mm_launches, .init = setup, .fini = teardown) {
  uint64_t seed = skref_test_seed("gpu gemm describe"), rng = seed;
  static const struct {
    skref_gemm_recipe r;
    size_t m, n, k;
  } shapes[] = {{SKREF_GEMM_TENSOR_FP8, 1, 128, 128}, {SKREF_GEMM_MXFP8, 8, 28672, 1024}, {SKREF_GEMM_NVFP4, 100, 1024, 512},
                {SKREF_GEMM_BLOCK_FP8, 300, 640, 1024}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    problem p;
    problem_make(&p, shapes[i].r, 0, shapes[i].m, shapes[i].n, shapes[i].k, &rng);
    sk_gemm_launch_info info;
    SK_OK_OR_FAIL(sk_gemm_describe((sk_gemm_recipe)p.r, SK_DTYPE_BF16, (int64_t)p.m, (int64_t)p.n, (int64_t)p.k, NULL, &info));
    cr_assert_eq(info.workspace_bytes, 0u, "case %zu: a shape without a split", i);
    const sk_kernel_request req = {"gemm.blockscaled", info.source, info.name, info.params, NULL, NULL, 0, 0};
    sk_kernel *kern;
    SK_OK_OR_FAIL(sk_kernel_resolve(&req, &kern));
    if (info.smem_bytes > 48 * 1024) SK_OK_OR_FAIL(sk_kernel_set_max_dynamic_shared(kern, info.smem_bytes));
    ws_ctx none = {NULL, 0};
    void *want = run_poisoned(&p, run_one_shot, &none, NULL);
    CUDA_OK(cudaMemset(p.dc, 0xff, p.c_bytes));
    const void *ac = p.da.codes, *as = p.da.scales, *bc = p.db.codes, *bs = p.db.scales, *alpha = p.dalpha;
    void *c = p.dc, *partials = NULL, *counters = NULL;
    int m = (int)p.m, n = (int)p.n, k = (int)p.k, ldc = (int)p.n;
    void *args[] = {(void *)&ac, (void *)&as, (void *)&bc, (void *)&bs, (void *)&alpha, &c, &m, &n, &k, &ldc, &partials, &counters};
    SK_OK_OR_FAIL(sk_kernel_launch(kern, info.grid, info.block, info.smem_bytes, NULL, args));
    CUDA_OK(cudaDeviceSynchronize());
    void *got = gpu_download(p.dc, p.c_bytes);
    cr_expect_eq(memcmp(want, got, p.c_bytes), 0, "seed %llu case %zu (%s): the direct launch differs from sk_gemm_mm",
                 (unsigned long long)seed, i, info.name);
    check_ref(&p, got, "direct launch");
    free(want), free(got);
    problem_free(&p);
  }
  cr_assert_eq(failures, 0, "seed %llu", (unsigned long long)seed);
}

/* ---- decode grids from the overrides (read per plan) -------------------------------------------------- */

static void check_planned(skref_gemm_recipe r, int out, size_t m, size_t n, size_t k, uint64_t *rng, cudaStream_t s) {
  problem p;
  problem_make(&p, r, out, m, n, k, rng);
  sk_gemm_caps caps = SK_GEMM_CAPS_INIT;
  caps.recipe = (sk_gemm_recipe)r;
  caps.out = (sk_dtype)out;
  caps.n = (int64_t)n;
  caps.k = (int64_t)k;
  caps.max_m = 16;
  sk_plan *plan;
  SK_OK_OR_FAIL(sk_plan_create("gemm.blockscaled", &caps, &plan));
  size_t bytes;
  void *scratch = gpu_plan_scratch(plan, &bytes);
  sk_binding *b;
  SK_OK_OR_FAIL(sk_binding_create(plan, NULL, &b));
  const DLTensor *t[6] = {&p.da.tc, a_scales(&p), &p.db.tc, b_scales(&p), &p.talpha, &p.tcout};
  SK_OK_OR_FAIL(sk_bind(b, t, 6, scratch, bytes));
  void *host[2];
  for (int run = 0; run < 2; run++) {
    CUDA_OK(cudaMemsetAsync(p.dc, 0xff, p.c_bytes, s));
    SK_OK_OR_FAIL(sk_run(b, s));
    CUDA_OK(cudaStreamSynchronize(s));
    host[run] = gpu_download(p.dc, p.c_bytes);
  }
  const char *decode = getenv("SPARKINFER_GEMM_DECODE");
  char what[96];
  snprintf(what, sizeof what, "SPARKINFER_GEMM_DECODE=%s", decode ? decode : "");
  if (!check_ref(&p, host[0], what) && memcmp(host[0], host[1], p.c_bytes))
    GEMM_FAIL("%s %s M=%zu N=%zu K=%zu: two runs differ", what, skref_gemm_recipe_name(r), m, n, k);
  free(host[0]), free(host[1]);
  sk_binding_destroy(b);
  sk_plan_destroy(plan);
  if (scratch) CUDA_OK(cudaFree(scratch));
  problem_free(&p);
}

Test(gpu_gemm, decode_grids_of_the_overrides, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed = skref_test_seed("gpu gemm decode grids"), rng = seed;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* the split-K grid; stream-K far past one wave (32 CTAs per SM: many CTAs per tile, not
   * co-resident); every warp on rows of its own (4 groups of 16 rows); 2 groups of 32 rows on a
   * stream-K grid */
  static const char *const configs[] = {"2,4,2,splitk", "2,4,32", "1,4,0,auto,4", "2,4,32,streamk,2"};
  for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
    setenv("SPARKINFER_GEMM_DECODE", configs[c], 1);
    for (int r = 0; r < 5; r++) {
      if (c >= 2)
        for (size_t m = 1; m <= 16; m += 3) check_planned((skref_gemm_recipe)r, (int)(m % 3), m, 200, 1152, &rng, s);
      check_planned((skref_gemm_recipe)r, 0, 1, 8192, 2048, &rng, s);
      check_planned((skref_gemm_recipe)r, 0, 16, 5120, 2944, &rng, s);
      check_planned((skref_gemm_recipe)r, 1, 7, 200, 1152, &rng, s);
      check_planned((skref_gemm_recipe)r, 0, 3, 512, 8192, &rng, s);
    }
  }
  unsetenv("SPARKINFER_GEMM_DECODE");
  CUDA_OK(cudaStreamDestroy(s));
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* ---- the linear ops against their parts ----------------------------------------------------------------- */

/* gemm.mxfp8_linear on BF16 x (Gaussian with outliers, an all-zero row, a row with a zero block
 * and a 2^24 outlier) equals quantization.mxfp8 then gemm.blockscaled bit for bit, each plan of
 * max_m = M (so the same decode grid), and the reference on the quantized operands. */
static void check_mxfp8_linear(size_t m, size_t n, size_t k, int out, skref_rng *qr, uint64_t *rng, cudaStream_t s) {
  uint16_t *x = malloc(m * k * 2);
  skref_fill_normal(qr, x, m * k, SKREF_BF16, 1.0f, 0.002, 100.0f);
  if (m > 2) {
    memset(x + k, 0, k * 2);       /* row 1: zeros (scale 127) */
    memset(x + 2 * k + 32, 0, 64); /* row 2: block 1 zero */
    x[2 * k + 100] = 0x4B80;       /* row 2: 2^24, an outlier in block 3 */
  }
  uint8_t *xc = malloc(m * k), *xs = malloc(skref_swizzled_scale_bytes(m, k / 32));
  cr_assert_eq(skref_quantize_mxfp8(x, SKREF_BF16, m, k, k, xc, xs, NULL), 0);
  uint8_t *wc = malloc(n * k);
  void *wsc = malloc(skref_gemm_scale_bytes(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k));
  skref_gemm_random_operand(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, rng, wc, wsc);
  const skref_gemm_operand oa = {SKREF_GEMM_MXFP8, SKREF_GEMM_A, m, k, xc, xs}, ob = {SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, wc, wsc};
  double *ref = malloc(m * n * 8), *abs_sum = malloc(m * n * 8);
  skref_gemm(&oa, &ob, 1.0, ref, abs_sum);
  dev_operand dw;
  upload_operand(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, wc, wsc, &dw);
  const size_t ob_sz = out == 2 ? 4 : 2, swz = sk_swizzled_scale_bytes((int64_t)m, (int64_t)k / 32);
  void *dx = gpu_upload(x, m * k * 2), *dq = gpu_poisoned(m * k), *dqs = gpu_poisoned(swz);
  void *d1 = gpu_poisoned(m * n * ob_sz), *d2 = gpu_filled(m * n * ob_sz, 0xfe);
  int64_t xshape[2] = {(int64_t)m, (int64_t)k}, os[2] = {(int64_t)m, (int64_t)n}, sshape[1] = {(int64_t)swz};
  DLTensor tx = tu_device_tensor(dx, BF16, 2, xshape), t1 = tu_device_tensor(d1, out_dt[out], 2, os),
           t2 = tu_device_tensor(d2, out_dt[out], 2, os), tq = tu_device_tensor(dq, U8, 2, xshape),
           tqs = tu_device_tensor(dqs, U8, 1, sshape);
  sk_gemm_linear_caps lc = SK_GEMM_LINEAR_CAPS_INIT;
  lc.n = (int64_t)n, lc.k = (int64_t)k, lc.max_m = (int64_t)m, lc.out = (sk_dtype)out;
  const DLTensor *lt[5] = {&tx, &dw.tc, &dw.ts, NULL, &t1};
  SK_OK_OR_FAIL(gpu_run_op("gemm.mxfp8_linear", &lc, lt, 5, s));
  sk_quant_caps qc = SK_QUANT_CAPS_INIT;
  qc.k = (int64_t)k, qc.max_m = (int64_t)m;
  const DLTensor *qt[4] = {&tx, &tq, &tqs, NULL};
  SK_OK_OR_FAIL(gpu_run_op("quantization.mxfp8", &qc, qt, 4, s));
  sk_gemm_caps mc = SK_GEMM_CAPS_INIT;
  mc.recipe = SK_GEMM_MXFP8, mc.out = (sk_dtype)out, mc.n = (int64_t)n, mc.k = (int64_t)k, mc.max_m = (int64_t)m;
  const DLTensor *mt[6] = {&tq, &tqs, &dw.tc, &dw.ts, NULL, &t2};
  SK_OK_OR_FAIL(gpu_run_op("gemm.blockscaled", &mc, mt, 6, s));
  uint8_t *g1 = gpu_download(d1, m * n * ob_sz), *g2 = gpu_download(d2, m * n * ob_sz);
  const char *fused = getenv("SPARKINFER_GEMM_LINEAR_FUSED");
  for (size_t i = 0; i < m * n; i++) {
    if (memcmp(g1 + i * ob_sz, g2 + i * ob_sz, ob_sz)) {
      GEMM_FAIL("mxfp8_linear%s M=%zu N=%zu K=%zu out=%d: out[%zu] != quantize + mm", fused ? " (fused)" : "", m, n, k, out, i);
      break;
    }
    const double g = skref_gemm_load_out((skref_gemm_out)out, g1, i), tol = skref_gemm_tolerance((skref_gemm_out)out, ref[i], abs_sum[i], k);
    if (!out_close((skref_gemm_out)out, g, ref[i], tol)) {
      GEMM_FAIL("mxfp8_linear M=%zu N=%zu K=%zu out=%d: out[%zu] = %.9g, ref %.9g", m, n, k, out, i, g, ref[i]);
      break;
    }
  }
  free_operand(&dw);
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(dq));
  CUDA_OK(cudaFree(dqs));
  CUDA_OK(cudaFree(d1));
  CUDA_OK(cudaFree(d2));
  free(x), free(xc), free(xs), free(wc), free(wsc), free(ref), free(abs_sum), free(g1), free(g2);
}

static void mxfp8_linear_cases(void) {
  uint64_t seed = skref_test_seed("gpu mxfp8_linear"), rng = seed;
  skref_rng qr;
  skref_rng_seed(&qr, seed);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* every M: K = 9 steps, N not a multiple of the 32-row tiles; then layer widths (tiles shared
   * by CTAs), every output type, a one-step K, and a tiled M */
  for (size_t m = 1; m <= 16; m++) check_mxfp8_linear(m, 200, 1152, 0, &qr, &rng, s);
  check_mxfp8_linear(3, 4096, 7168, 0, &qr, &rng, s);
  check_mxfp8_linear(9, 5120, 2944, 0, &qr, &rng, s);
  check_mxfp8_linear(1, 28672, 4096, 0, &qr, &rng, s);
  check_mxfp8_linear(8, 8192, 4096, 0, &qr, &rng, s); /* 16-row tiles, split (2^25 weights) */
  check_mxfp8_linear(5, 77, 128, 1, &qr, &rng, s);
  check_mxfp8_linear(16, 300, 1024, 2, &qr, &rng, s);
  check_mxfp8_linear(100, 384, 1024, 0, &qr, &rng, s);
  CUDA_OK(cudaStreamDestroy(s));
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

Test(gpu_gemm, mxfp8_linear_equals_quantize_then_mm, .init = setup, .fini = teardown, .timeout = 600) { mxfp8_linear_cases(); }

/* The fused decode kernel (M <= 8) and its plans' quantizer beyond: the same bits. */
Test(gpu_gemm, mxfp8_linear_fused_equals_quantize_then_mm, .init = setup, .fini = teardown, .timeout = 600) {
  setenv("SPARKINFER_GEMM_LINEAR_FUSED", "1", 1);
  mxfp8_linear_cases();
}

/* gemm.block_fp8_linear equals the CPU block quantizer (bit-exact with act_quant_block_fp8) then
 * gemm.blockscaled, bit for bit, at M of every regime of one plan; gemm.tensor_fp8_linear equals
 * gemm.blockscaled's tensor_fp8. */
Test(gpu_gemm, block_and_tensor_fp8_linear_equal_their_parts, .init = setup, .fini = teardown, .timeout = 300) {
  uint64_t seed = skref_test_seed("gpu block_fp8_linear"), rng = seed;
  skref_rng qr;
  skref_rng_seed(&qr, seed);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t n = 640, k = 1024, ms[] = {1, 16, 100, 300};
  uint8_t *wc = malloc(n * k);
  void *wsc = malloc(skref_gemm_scale_bytes(SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, n, k));
  skref_gemm_random_operand(SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, n, k, &rng, wc, wsc);
  dev_operand dw;
  upload_operand(SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, n, k, wc, wsc, &dw);
  for (size_t i = 0; i < 4; i++) {
    const size_t m = ms[i];
    uint16_t *x = malloc(m * k * 2);
    skref_fill_normal(&qr, x, m * k, SKREF_BF16, 1.0f, 0.002, 40.0f);
    uint8_t *xc = malloc(m * k);
    float *xs = malloc(m * (k / 128) * 4);
    skref_gemm_quantize_block_fp8_rows(x, m, k, xc, xs);
    dev_operand dq;
    upload_operand(SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_A, m, k, xc, xs, &dq);
    void *dx = gpu_upload(x, m * k * 2), *d1 = gpu_poisoned(m * n * 2), *d2 = gpu_filled(m * n * 2, 0xfe);
    int64_t xshape[2] = {(int64_t)m, (int64_t)k}, os[2] = {(int64_t)m, (int64_t)n};
    DLTensor tx = tu_device_tensor(dx, BF16, 2, xshape), t1 = tu_device_tensor(d1, BF16, 2, os), t2 = tu_device_tensor(d2, BF16, 2, os);
    sk_gemm_linear_caps lc = SK_GEMM_LINEAR_CAPS_INIT;
    lc.n = (int64_t)n, lc.k = (int64_t)k, lc.max_m = 300;
    const DLTensor *lt[4] = {&tx, &dw.tc, &dw.ts, &t1};
    SK_OK_OR_FAIL(gpu_run_op("gemm.block_fp8_linear", &lc, lt, 4, s));
    sk_gemm_caps mc = SK_GEMM_CAPS_INIT;
    mc.recipe = SK_GEMM_BLOCK_FP8, mc.n = (int64_t)n, mc.k = (int64_t)k, mc.max_m = 300;
    const DLTensor *mt[6] = {&dq.tc, &dq.ts, &dw.tc, &dw.ts, NULL, &t2};
    SK_OK_OR_FAIL(gpu_run_op("gemm.blockscaled", &mc, mt, 6, s));
    uint8_t *g1 = gpu_download(d1, m * n * 2), *g2 = gpu_download(d2, m * n * 2);
    cr_expect_eq(memcmp(g1, g2, m * n * 2), 0, "seed %llu block_fp8_linear M=%zu: differs from quantize + mm",
                 (unsigned long long)seed, m);
    free(g1), free(g2), free(x), free(xc), free(xs);
    free_operand(&dq);
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(d1));
    CUDA_OK(cudaFree(d2));
  }
  free_operand(&dw);
  free(wc), free(wsc);
  /* tensor_fp8_linear: the same kernels as mm's tensor_fp8 */
  for (size_t i = 0; i < 4; i++) {
    problem p;
    problem_make(&p, SKREF_GEMM_TENSOR_FP8, (int)(i % 3), ms[i], n, k, &rng);
    void *d2 = gpu_filled(p.c_bytes, 0xfe);
    DLTensor t2 = tu_device_tensor(d2, out_dt[p.out], 2, p.c_shape);
    sk_gemm_linear_caps lc = SK_GEMM_LINEAR_CAPS_INIT;
    lc.n = (int64_t)n, lc.k = (int64_t)k, lc.max_m = 300, lc.out = (sk_dtype)p.out;
    const DLTensor *lt[4] = {&p.da.tc, &p.db.tc, &p.talpha, &t2};
    SK_OK_OR_FAIL(gpu_run_op("gemm.tensor_fp8_linear", &lc, lt, 4, s));
    sk_gemm_caps mc = SK_GEMM_CAPS_INIT;
    mc.recipe = SK_GEMM_TENSOR_FP8, mc.out = (sk_dtype)p.out, mc.n = (int64_t)n, mc.k = (int64_t)k, mc.max_m = 300;
    const DLTensor *mt[6] = {&p.da.tc, NULL, &p.db.tc, NULL, &p.talpha, &p.tcout};
    SK_OK_OR_FAIL(gpu_run_op("gemm.blockscaled", &mc, mt, 6, s));
    uint8_t *g1 = gpu_download(p.dc, p.c_bytes), *g2 = gpu_download(d2, p.c_bytes);
    cr_expect_eq(memcmp(g1, g2, p.c_bytes), 0, "seed %llu tensor_fp8_linear M=%zu: differs from mm", (unsigned long long)seed, ms[i]);
    check_ref(&p, g2, "tensor_fp8_linear");
    free(g1), free(g2);
    CUDA_OK(cudaFree(d2));
    problem_free(&p);
  }
  CUDA_OK(cudaStreamDestroy(s));
  cr_assert_eq(failures, 0, "seed %llu", (unsigned long long)seed);
}

/* ---- the plan cache under racing threads ------------------------------------------------------------------ */

/* One-shot calls from several threads at once, starting from an empty plan cache: every thread
 * races to create and publish the same plans (decode for M = 3, tiled for M = 64, every recipe).
 * Each thread's outputs must equal, bit for bit, a single-threaded run done afterwards (the kernels
 * are deterministic, so any mix-up of plans shows); then a call resolves nothing. */
enum { MEMO_THREADS = 4, MEMO_RECIPES = 5, MEMO_MS = 2 };
typedef struct memo_case {
  dev_operand a[MEMO_MS], b;
} memo_case;
typedef struct memo_thread {
  memo_case *cases;
  void *out[MEMO_RECIPES][MEMO_MS];
  int64_t shape[MEMO_MS][2];
  sk_status status;
  char message[256];
  int order;
} memo_thread;

static void memo_run_all(memo_thread *t, cudaStream_t s) {
  for (int i = 0; i < MEMO_RECIPES * MEMO_MS && t->status == SK_OK; i++) {
    const int j = (i * 3 + t->order) % (MEMO_RECIPES * MEMO_MS), r = j / MEMO_MS, mi = j % MEMO_MS;
    memo_case *c = &t->cases[r];
    DLTensor tc = tu_device_tensor(t->out[r][mi], out_dt[0], 2, t->shape[mi]);
    const int scaled = r != SKREF_GEMM_TENSOR_FP8;
    t->status = sk_gemm_mm((sk_gemm_recipe)r, &c->a[mi].tc, scaled ? &c->a[mi].ts : NULL, &c->b.tc, scaled ? &c->b.ts : NULL, NULL,
                           &tc, NULL, 0, s);
    if (t->status != SK_OK) snprintf(t->message, sizeof t->message, "%s", sk_last_error_message());
  }
}

static void *memo_thread_main(void *arg) {
  memo_thread *t = arg;
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    t->status = SK_ERR_CUDA;
    return NULL;
  }
  for (int rep = 0; rep < 10 && t->status == SK_OK; rep++) memo_run_all(t, s);
  if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) t->status = SK_ERR_CUDA;
  return NULL;
}

Test(gpu_gemm, one_shot_plan_cache_is_thread_safe, .init = setup, .fini = teardown, .timeout = 300) {
  uint64_t seed = skref_test_seed("gpu gemm plan cache threads"), rng = seed;
  const size_t n = 256, k = 512, ms[MEMO_MS] = {3, 64};
  memo_case cases[MEMO_RECIPES];
  for (int r = 0; r < MEMO_RECIPES; r++) {
    const skref_gemm_recipe rr = (skref_gemm_recipe)r;
    for (int mi = 0; mi < MEMO_MS; mi++) {
      const size_t m = ms[mi];
      uint8_t *ac = malloc(skref_gemm_code_bytes(rr, m, k));
      void *as = malloc(skref_gemm_scale_bytes(rr, SKREF_GEMM_A, m, k) + 4);
      skref_gemm_random_operand(rr, SKREF_GEMM_A, m, k, &rng, ac, as);
      upload_operand(rr, SKREF_GEMM_A, m, k, ac, as, &cases[r].a[mi]);
      free(ac), free(as);
    }
    uint8_t *bc = malloc(skref_gemm_code_bytes(rr, n, k));
    void *bs = malloc(skref_gemm_scale_bytes(rr, SKREF_GEMM_B, n, k) + 4);
    skref_gemm_random_operand(rr, SKREF_GEMM_B, n, k, &rng, bc, bs);
    upload_operand(rr, SKREF_GEMM_B, n, k, bc, bs, &cases[r].b);
    free(bc), free(bs);
  }
  memo_thread th[MEMO_THREADS + 1];
  for (int t = 0; t <= MEMO_THREADS; t++) {
    th[t] = (memo_thread){.cases = cases, .status = SK_OK, .order = t};
    for (int mi = 0; mi < MEMO_MS; mi++) {
      th[t].shape[mi][0] = (int64_t)ms[mi];
      th[t].shape[mi][1] = (int64_t)n;
      for (int r = 0; r < MEMO_RECIPES; r++) th[t].out[r][mi] = gpu_poisoned(ms[mi] * n * 2);
    }
  }
  pthread_t ids[MEMO_THREADS];
  for (int t = 0; t < MEMO_THREADS; t++) cr_assert_eq(pthread_create(&ids[t], NULL, memo_thread_main, &th[t]), 0);
  for (int t = 0; t < MEMO_THREADS; t++) cr_assert_eq(pthread_join(ids[t], NULL), 0);
  sk_counters before, after;
  SK_OK_OR_FAIL(sk_get_counters(&before));
  memo_thread_main(&th[MEMO_THREADS]); /* the single-threaded run, every plan cached */
  SK_OK_OR_FAIL(sk_get_counters(&after));
  cr_expect_eq(after.memory_hits + after.disk_hits + after.compiles, before.memory_hits + before.disk_hits + before.compiles,
               "cached plans resolve nothing");
  for (int t = 0; t <= MEMO_THREADS; t++) cr_assert_eq(th[t].status, SK_OK, "thread %d: %s", t, th[t].message);
  for (int r = 0; r < MEMO_RECIPES; r++)
    for (int mi = 0; mi < MEMO_MS; mi++) {
      const size_t bytes = ms[mi] * n * 2;
      uint16_t *want = gpu_download(th[MEMO_THREADS].out[r][mi], bytes);
      size_t nan = 0;
      for (size_t i = 0; i < bytes / 2; i++) nan += (want[i] & 0x7f80) == 0x7f80 && (want[i] & 0x7f);
      cr_assert_eq(nan, 0, "seed %llu %s M=%zu: %zu outputs unwritten or NaN", (unsigned long long)seed,
                   skref_gemm_recipe_name((skref_gemm_recipe)r), ms[mi], nan);
      for (int t = 0; t < MEMO_THREADS; t++) {
        uint16_t *got = gpu_download(th[t].out[r][mi], bytes);
        cr_assert_eq(memcmp(want, got, bytes), 0, "seed %llu %s M=%zu: thread %d differs from the serial run",
                     (unsigned long long)seed, skref_gemm_recipe_name((skref_gemm_recipe)r), ms[mi], t);
        free(got);
      }
      free(want);
    }
  for (int t = 0; t <= MEMO_THREADS; t++)
    for (int r = 0; r < MEMO_RECIPES; r++)
      for (int mi = 0; mi < MEMO_MS; mi++) CUDA_OK(cudaFree(th[t].out[r][mi]));
  for (int r = 0; r < MEMO_RECIPES; r++) {
    for (int mi = 0; mi < MEMO_MS; mi++) free_operand(&cases[r].a[mi]);
    free_operand(&cases[r].b);
  }
}
