/* gemm.blockscaled and its linear aliases on a GPU against the double-precision reference on the
 * dequantized operands (tests/ref/gemm.h). Tolerance: skref_gemm_tolerance = FP32 accumulation of
 * K products (bounded by the sum of |a||b|) plus the final rounding to the output type; NaN never
 * passes. Poisoned outputs; two runs bit-identical; graph replay after a freeze bit-identical. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "gemm/ref.h"
#include "common/ref.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/jit.h"
#include "sparkinfer/quantization.h"
#include "testutil.h"

static char *dir;
static void setup(void) { dir = gpu_test_setup("gpugemm"); }
static void teardown(void) { tu_rmrf(dir); free(dir); }

static const DLDataType out_dt[3] = {{kDLBfloat, 16, 1}, {kDLFloat, 16, 1}, {kDLFloat, 32, 1}};
#define U8 ((DLDataType){kDLUInt, 8, 1})
#define F32 ((DLDataType){kDLFloat, 32, 1})

static int failures;
#define GEMM_FAIL(...)                                                                           \
  do {                                                                                           \
    if (failures++ < 30) { fprintf(stderr, "MISMATCH " __VA_ARGS__); fputc('\n', stderr); }      \
  } while (0)

typedef struct dev_operand {
  void *codes, *scales;
  int64_t cshape[2], sshape[2];
  DLTensor tc, ts;
} dev_operand;

static void upload_operand(skref_gemm_recipe r, skref_gemm_side side, size_t rows, size_t k, const uint8_t *codes,
                           const void *scales, dev_operand *d) {
  size_t cb = skref_gemm_code_bytes(r, rows, k), sb = skref_gemm_scale_bytes(r, side, rows, k);
  d->codes = gpu_upload(codes, cb);
  d->cshape[0] = (int64_t)rows;
  d->cshape[1] = (int64_t)(skref_gemm_is_fp4(r) ? k / 2 : k);
  d->tc = tu_device_tensor(d->codes, U8, 2, d->cshape);
  d->scales = NULL;
  if (sb) {
    d->scales = gpu_upload(scales, sb);
  }
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

/* |got - ref| <= tol, where an FP16 result beyond the largest finite value (65504; RN sends
 * |x| >= 65520 to infinity) must be the infinity of the reference's sign. NaN never passes. */
static int out_close(skref_gemm_out t, double got, double ref, double tol) {
  if (t == SKREF_GEMM_OUT_FP16 && fabs(ref) - tol >= 65520.0) return isinf(got) && (got > 0) == (ref > 0);
  if (t == SKREF_GEMM_OUT_FP16 && fabs(ref) + tol >= 65520.0 && isinf(got)) return (got > 0) == (ref > 0);
  return fabs(got - ref) <= tol;
}

/* One mm call vs the reference. */
static void check_mm(skref_gemm_recipe r, int out, size_t m, size_t n, size_t k, int use_ws, uint64_t *rng, uint64_t seed) {
  uint8_t *ac = malloc(skref_gemm_code_bytes(r, m, k)), *bc = malloc(skref_gemm_code_bytes(r, n, k));
  void *as = malloc(skref_gemm_scale_bytes(r, SKREF_GEMM_A, m, k) + 4), *bs = malloc(skref_gemm_scale_bytes(r, SKREF_GEMM_B, n, k) + 4);
  skref_gemm_random_operand(r, SKREF_GEMM_A, m, k, rng, ac, as);
  skref_gemm_random_operand(r, SKREF_GEMM_B, n, k, rng, bc, bs);
  skref_gemm_operand oa = {r, SKREF_GEMM_A, m, k, ac, r == SKREF_GEMM_TENSOR_FP8 ? NULL : as};
  skref_gemm_operand ob = {r, SKREF_GEMM_B, n, k, bc, r == SKREF_GEMM_TENSOR_FP8 ? NULL : bs};
  float alpha = (float)(0.5 + skref_gemm_rand_uniform(rng));
  double *ref = malloc(m * n * 8), *abs_sum = malloc(m * n * 8);
  skref_gemm(&oa, &ob, alpha, ref, abs_sum);
  if (out == SKREF_GEMM_OUT_FP16) {
    /* FP8 products reach 2e5 and beyond: keep most of the FP16 range in use without overflowing,
     * so every element is checked against a finite value (overflow has its own case below). */
    double peak = 0;
    for (size_t i = 0; i < m * n; i++) peak = fmax(peak, fabs(ref[i]));
    if (peak > 30000) {
      alpha = (float)(alpha * (30000 / peak));
      skref_gemm(&oa, &ob, alpha, ref, abs_sum);
    }
  }
  dev_operand da, db;
  upload_operand(r, SKREF_GEMM_A, m, k, ac, as, &da);
  upload_operand(r, SKREF_GEMM_B, n, k, bc, bs, &db);
  void *dalpha, *dc, *ws = NULL;
  dalpha = gpu_upload(&alpha, 4);
  const size_t ob_bytes = skref_gemm_out_bytes((skref_gemm_out)out);
  CUDA_OK(cudaMalloc(&dc, m * n * ob_bytes));
  size_t wsb = use_ws ? sk_gemm_workspace_bytes((sk_gemm_recipe)r, (int64_t)m, (int64_t)n, (int64_t)k) : 0;
  if (wsb) {
    ws = gpu_zeroed(wsb);
  }
  int64_t cshape[2] = {(int64_t)m, (int64_t)n}, ashape[1] = {1};
  DLTensor tcout = tu_device_tensor(dc, out_dt[out], 2, cshape), talpha = tu_device_tensor(dalpha, F32, 1, ashape);
  void *host[2];
  for (int run = 0; run < 2; run++) {
    CUDA_OK(cudaMemset(dc, 0xff, m * n * ob_bytes)); /* NaN poison */
    SK_OK_OR_FAIL(sk_gemm_mm((sk_gemm_recipe)r, &da.tc, r == SKREF_GEMM_TENSOR_FP8 ? NULL : &da.ts, &db.tc,
                             r == SKREF_GEMM_TENSOR_FP8 ? NULL : &db.ts, &talpha, &tcout, ws, wsb, NULL));
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    host[run] = malloc(m * n * ob_bytes);
    CUDA_OK(cudaMemcpy(host[run], dc, m * n * ob_bytes, cudaMemcpyDeviceToHost));
  }
  if (memcmp(host[0], host[1], m * n * ob_bytes))
    GEMM_FAIL("seed %llu %s out %d M=%zu N=%zu K=%zu: two runs differ", (unsigned long long)seed,
              skref_gemm_recipe_name(r), out, m, n, k);
  for (size_t i = 0; i < m * n; i++) {
    double got = skref_gemm_load_out((skref_gemm_out)out, host[0], i);
    double tol = skref_gemm_tolerance((skref_gemm_out)out, ref[i], abs_sum[i], k);
    if (!out_close((skref_gemm_out)out, got, ref[i], tol)) {
      GEMM_FAIL("seed %llu %s out %d M=%zu N=%zu K=%zu ws %d: C[%zu,%zu] = %.9g, ref %.9g, tol %.3g",
                (unsigned long long)seed, skref_gemm_recipe_name(r), out, m, n, k, (int)(wsb > 0), i / n, i % n, got,
                ref[i], tol);
      break;
    }
  }
  free(host[0]); free(host[1]);
  free_operand(&da); free_operand(&db);
  CUDA_OK(cudaFree(dalpha)); CUDA_OK(cudaFree(dc));
  if (ws) CUDA_OK(cudaFree(ws));
  free(ac); free(bc); free(as); free(bs); free(ref); free(abs_sum);
}

/* tensor_fp8 with FP16 output and alpha 1: outputs past 65504 must be the right infinities. */
static void check_mm_overflow(uint64_t *rng, uint64_t seed) {
  const size_t m = 2, n = 512, k = 2048;
  uint8_t *ac = malloc(m * k), *bc = malloc(n * k);
  skref_gemm_random_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_A, m, k, rng, ac, NULL);
  skref_gemm_random_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_B, n, k, rng, bc, NULL);
  skref_gemm_operand oa = {SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_A, m, k, ac, NULL}, ob = {SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_B, n, k, bc, NULL};
  double *ref = malloc(m * n * 8), *abs_sum = malloc(m * n * 8);
  skref_gemm(&oa, &ob, 1.0, ref, abs_sum);
  dev_operand da, db;
  upload_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_A, m, k, ac, NULL, &da);
  upload_operand(SKREF_GEMM_TENSOR_FP8, SKREF_GEMM_B, n, k, bc, NULL, &db);
  void *dc;
  dc = gpu_poisoned(m * n * 2);
  int64_t cs[2] = {(int64_t)m, (int64_t)n};
  DLTensor tc = tu_device_tensor(dc, out_dt[1], 2, cs);
  SK_OK_OR_FAIL(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &da.tc, NULL, &db.tc, NULL, NULL, &tc, NULL, 0, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  uint16_t *got = malloc(m * n * 2);
  CUDA_OK(cudaMemcpy(got, dc, m * n * 2, cudaMemcpyDeviceToHost));
  int overflowed = 0;
  for (size_t i = 0; i < m * n; i++) {
    double g = skref_gemm_load_out(SKREF_GEMM_OUT_FP16, got, i);
    double tol = skref_gemm_tolerance(SKREF_GEMM_OUT_FP16, ref[i], abs_sum[i], k);
    overflowed += fabs(ref[i]) >= 65520.0;
    if (!out_close(SKREF_GEMM_OUT_FP16, g, ref[i], tol)) {
      GEMM_FAIL("seed %llu fp16 overflow case: C[%zu] = %g, ref %.9g", (unsigned long long)seed, i, g, ref[i]);
      break;
    }
  }
  cr_expect_gt(overflowed, 0, "seed %llu: the overflow case produced no overflow", (unsigned long long)seed);
  free_operand(&da); free_operand(&db);
  CUDA_OK(cudaFree(dc));
  free(ac); free(bc); free(ref); free(abs_sum); free(got);
}

static int have_tiled(void) {
  const char *const *paths;
  size_t n;
  sk_list_kernel_sources(&paths, &n);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(paths[i], "gemm/mma_tiled.cuh")) return 1;
  return 0;
}

Test(gpu_gemm, decode_every_recipe_and_output, .init = setup, .fini = teardown, .timeout = 900) {
  uint64_t seed = skref_test_seed("gpu gemm decode"), rng = seed;
  const size_t ms[] = {1, 2, 3, 8, 16};
  for (int r = 0; r < 5; r++)
    for (int o = 0; o < 3; o++)
      for (size_t mi = 0; mi < 5; mi++) check_mm((skref_gemm_recipe)r, o, ms[mi], 2880, 2048, (int)(mi % 2), &rng, seed);
  /* Real widths, BF16 out, with the workspace (stream-K: tiles shared by CTAs). */
  /* FP16 overflow: no alpha scaling for this one, FP8 products overflow and must give +-inf. */
  check_mm_overflow(&rng, seed);
  for (int r = 0; r < 5; r++) {
    check_mm((skref_gemm_recipe)r, 0, 1, 28672, 4096, 1, &rng, seed);
    check_mm((skref_gemm_recipe)r, 0, 16, 4096, 7168, 1, &rng, seed);
    check_mm((skref_gemm_recipe)r, 0, 4, 8192, 2048, 0, &rng, seed);
    check_mm((skref_gemm_recipe)r, 0, 16, 5120, 2944, 1, &rng, seed); /* 23 steps: CTA ranges across tiles */
  }
  /* Every M (1..16) with every recipe; N not a multiple of the 32-row block; K = 9 steps of 128
   * (uneven shares over warps and splits; every 32-K MXFP8 / 128-K block_fp8 scale boundary);
   * odd M with the workspace. Then 1-step K (fewer steps than warps) and 16 CTAs per tile. */
  for (int r = 0; r < 5; r++) {
    for (size_t m = 1; m <= 16; m++) check_mm((skref_gemm_recipe)r, 0, m, 200, 1152, (int)(m % 2), &rng, seed);
    check_mm((skref_gemm_recipe)r, 2, 5, 77, 128, 1, &rng, seed);
    check_mm((skref_gemm_recipe)r, 0, 3, 512, 8192, 1, &rng, seed);
  }
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* The decode grid's other shapes (the override is read once per process; each Test is its own
 * process): the previous split-K grid, and a stream-K grid far past one wave (32 CTAs per SM: many
 * CTAs per tile, CTAs not co-resident) - same tolerance, run-to-run bitwise. */
static void decode_grid_cases(void) {
  uint64_t seed = skref_test_seed("gpu gemm decode grid"), rng = seed;
  for (int r = 0; r < 5; r++) {
    check_mm((skref_gemm_recipe)r, 0, 1, 8192, 2048, 1, &rng, seed);
    check_mm((skref_gemm_recipe)r, 0, 16, 5120, 2944, 1, &rng, seed);
    check_mm((skref_gemm_recipe)r, 1, 7, 200, 1152, 1, &rng, seed);
    check_mm((skref_gemm_recipe)r, 0, 3, 512, 8192, 1, &rng, seed);
  }
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* Row groups (gemv_decode's ROW_GROUPS) beyond the defaults, at every recipe and output and at
 * M up to 16, before the grid cases (split tiles on real shapes). */
static void decode_row_group_cases(void) {
  uint64_t seed = skref_test_seed("gpu gemm decode row groups"), rng = seed;
  for (int r = 0; r < 5; r++)
    for (size_t m = 1; m <= 16; m += 3) check_mm((skref_gemm_recipe)r, (int)(m % 3), m, 200, 1152, (int)(m % 2), &rng, seed);
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* One decode configuration per Test (SPARKINFER_GEMM_DECODE is read once per process). */
static void decode_cases_with(const char *decode_config, bool row_groups) {
  setenv("SPARKINFER_GEMM_DECODE", decode_config, 1);
  if (row_groups) decode_row_group_cases();
  decode_grid_cases();
}

Test(gpu_gemm, decode_splitk_grid, .init = setup, .fini = teardown, .timeout = 600) { decode_cases_with("2,4,2,splitk", false); }

Test(gpu_gemm, decode_streamk_grid_beyond_one_wave, .init = setup, .fini = teardown, .timeout = 600) {
  decode_cases_with("2,4,32", false);
}

/* every warp on rows of its own: 4 groups of 16 rows */
Test(gpu_gemm, decode_four_row_groups, .init = setup, .fini = teardown, .timeout = 600) { decode_cases_with("1,4,0,auto,4", true); }

/* 2 groups of 32 rows on a stream-K grid far past one wave */
Test(gpu_gemm, decode_two_row_groups_32_row_tiles_streamk, .init = setup, .fini = teardown, .timeout = 600) {
  decode_cases_with("2,4,32,streamk,2", true);
}

Test(gpu_gemm, prefill_every_recipe, .init = setup, .fini = teardown, .timeout = 900) {
  if (!have_tiled()) cr_skip_test("this build has no tiled prefill kernel");
  uint64_t seed = skref_test_seed("gpu gemm prefill"), rng = seed;
  const size_t ms[] = {17, 64, 128, 1000};
  for (int r = 0; r < 5; r++)
    for (int o = 0; o < 3; o++)
      for (size_t mi = 0; mi < 4; mi++) check_mm((skref_gemm_recipe)r, o, ms[mi], o == 0 ? 384 : 200, 512, 0, &rng, seed);
  for (int r = 0; r < 5; r++) check_mm((skref_gemm_recipe)r, 0, 4096, 256, 512, 0, &rng, seed);
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

Test(gpu_gemm, mxfp8_linear_matches_quantize_then_reference, .init = setup, .fini = teardown) {
  uint64_t seed = skref_test_seed("gpu mxfp8_linear"), rng = seed;
  skref_rng qr;
  skref_rng_seed(&qr, seed);
  const size_t m = 5, n = 3000, k = 2048;
  uint16_t *x = malloc(m * k * 2);
  skref_fill_normal(&qr, x, m * k, SKREF_BF16, 1.0f, 0.001, 30.0f);
  uint8_t *xc = malloc(m * k), *xs = malloc(skref_swizzled_scale_bytes(m, k / 32));
  cr_assert_eq(skref_quantize_mxfp8(x, SKREF_BF16, m, k, k, xc, xs, NULL), 0);
  uint8_t *wc = malloc(n * k);
  void *wsc = malloc(skref_gemm_scale_bytes(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k));
  skref_gemm_random_operand(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, &rng, wc, wsc);
  skref_gemm_operand oa = {SKREF_GEMM_MXFP8, SKREF_GEMM_A, m, k, xc, xs}, ob = {SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, wc, wsc};
  double *ref = malloc(m * n * 8), *abs_sum = malloc(m * n * 8);
  skref_gemm(&oa, &ob, 1.0, ref, abs_sum);
  void *dx, *dout, *ws;
  dx = gpu_upload(x, m * k * 2);
  dev_operand dw;
  upload_operand(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, wc, wsc, &dw);
  dout = gpu_poisoned(m * n * 2);
  size_t wsb = sk_gemm_mxfp8_linear_workspace_bytes(m, n, k);
  ws = gpu_zeroed(wsb);
  int64_t xs_shape[2] = {m, k}, os[2] = {m, n};
  DLTensor tx = tu_device_tensor(dx, out_dt[0], 2, xs_shape), to = tu_device_tensor(dout, out_dt[0], 2, os);
  SK_OK_OR_FAIL(sk_gemm_mxfp8_linear(&tx, &dw.tc, &dw.ts, NULL, &to, ws, wsb, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  uint16_t *got = malloc(m * n * 2);
  CUDA_OK(cudaMemcpy(got, dout, m * n * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < m * n; i++) {
    double g = skref_gemm_load_out(SKREF_GEMM_OUT_BF16, got, i), tol = skref_gemm_tolerance(SKREF_GEMM_OUT_BF16, ref[i], abs_sum[i], k);
    cr_assert(fabs(g - ref[i]) <= tol, "seed %llu: out[%zu] = %.9g, ref %.9g", (unsigned long long)seed, i, g, ref[i]);
  }
  free_operand(&dw);
  CUDA_OK(cudaFree(dx)); CUDA_OK(cudaFree(dout)); CUDA_OK(cudaFree(ws));
  free(x); free(xc); free(xs); free(wc); free(wsc); free(ref); free(abs_sum); free(got);
}

/* gemm.mxfp8_linear (fused: SPARKINFER_GEMM_LINEAR_FUSED=1 in this process) at M <= 8 quantizes
 * the BF16 tokens inside the decode kernel (the quantization.mxfp8 op's device function on the
 * same 32-element blocks); otherwise, and at M 9..16, it launches quantize + mm itself, which this
 * also checks end to end: its output must equal the quantization.mxfp8 op + sk_gemm_mm (same
 * workspace rule, hence the same grid) bit for bit, and the double reference on the quantized
 * operands within tolerance. Rows: Gaussian with outliers, an all-zero row, a row with one zero
 * block and one huge outlier. */
static void check_linear_fused(bool fused, size_t m, size_t n, size_t k, int o, skref_rng *qr, uint64_t *rng,
                               uint64_t seed) {
  uint16_t *x = malloc(m * k * 2);
  skref_fill_normal(qr, x, m * k, SKREF_BF16, 1.0f, 0.002, 100.0f);
  if (m > 2) {
    memset(x + k, 0, k * 2);                          /* row 1: zeros (scale 127) */
    memset(x + 2 * k + 32, 0, 64);                    /* row 2: block 1 zero */
    x[2 * k + 100] = 0x4B80;                          /* row 2: 2^24, an outlier in block 3 */
  }
  uint8_t *xc = malloc(m * k), *xs = malloc(skref_swizzled_scale_bytes(m, k / 32));
  cr_assert_eq(skref_quantize_mxfp8(x, SKREF_BF16, m, k, k, xc, xs, NULL), 0);
  uint8_t *wc = malloc(n * k);
  void *wsc = malloc(skref_gemm_scale_bytes(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k));
  skref_gemm_random_operand(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, rng, wc, wsc);
  skref_gemm_operand oa = {SKREF_GEMM_MXFP8, SKREF_GEMM_A, m, k, xc, xs}, ob = {SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, wc, wsc};
  double *ref = malloc(m * n * 8), *abs_sum = malloc(m * n * 8);
  skref_gemm(&oa, &ob, 1.0, ref, abs_sum);
  dev_operand dw;
  upload_operand(SKREF_GEMM_MXFP8, SKREF_GEMM_B, n, k, wc, wsc, &dw);
  const size_t ob_sz = o == 2 ? 4 : 2, swz = sk_swizzled_scale_bytes((int64_t)m, (int64_t)k / 32);
  void *dx, *dq, *dqs, *d1, *d2, *ws1, *ws2;
  dx = gpu_upload(x, m * k * 2);
  CUDA_OK(cudaMalloc(&dq, m * k));
  CUDA_OK(cudaMalloc(&dqs, swz));
  CUDA_OK(cudaMalloc(&d1, m * n * ob_sz));
  CUDA_OK(cudaMalloc(&d2, m * n * ob_sz));
  CUDA_OK(cudaMemset(d1, 0xff, m * n * ob_sz));
  CUDA_OK(cudaMemset(d2, 0xfe, m * n * ob_sz));
  /* Fused path (M <= 8): the linear op's workspace is mm's partials only, maybe 0 bytes.
   * Otherwise it runs quantize + mm inside the op: the activations are in its workspace too. */
  const size_t wsb1 = sk_gemm_mxfp8_linear_workspace_bytes(m, n, k), wsb2 = sk_gemm_workspace_bytes(SK_GEMM_MXFP8, m, n, k);
  if (fused && m <= 8) cr_assert_eq(wsb1, wsb2, "fused, M <= 8: the linear op needs exactly mm's workspace");
  else cr_assert_gt(wsb1, wsb2, "M > 8: the linear op's workspace also holds the quantized activations");
  CUDA_OK(cudaMalloc(&ws1, wsb1 ? wsb1 : 256));
  CUDA_OK(cudaMalloc(&ws2, wsb2 ? wsb2 : 256));
  CUDA_OK(cudaMemset(ws1, 0, wsb1 ? wsb1 : 256));
  CUDA_OK(cudaMemset(ws2, 0, wsb2 ? wsb2 : 256));
  int64_t xshape[2] = {(int64_t)m, (int64_t)k}, os[2] = {(int64_t)m, (int64_t)n}, sshape[1] = {(int64_t)swz};
  DLTensor tx = tu_device_tensor(dx, out_dt[0], 2, xshape), t1 = tu_device_tensor(d1, out_dt[o], 2, os),
           t2 = tu_device_tensor(d2, out_dt[o], 2, os), tq = tu_device_tensor(dq, U8, 2, xshape),
           tqs = tu_device_tensor(dqs, U8, 1, sshape);
  SK_OK_OR_FAIL(sk_gemm_mxfp8_linear(&tx, &dw.tc, &dw.ts, NULL, &t1, wsb1 ? ws1 : NULL, wsb1, NULL));
  /* Two launches: quantization.mxfp8 (the op) then mm. */
  sk_quant_caps caps = {SK_DTYPE_BF16, (int64_t)k, (int64_t)m, SK_SCALES_SWIZZLED, SK_GLOBAL_SCALE_GIVEN, SK_PATH_AUTO, NULL};
  sk_quant_plan *plan;
  SK_OK_OR_FAIL(sk_mxfp8_plan_create(&caps, &plan));
  sk_binding b;
  SK_OK_OR_FAIL(sk_mxfp8_bind(plan, &tx, &tq, &tqs, NULL, NULL, 0, &b));
  SK_OK_OR_FAIL(sk_quant_run(plan, &b, NULL));
  sk_quant_plan_destroy(plan);
  SK_OK_OR_FAIL(sk_gemm_mm(SK_GEMM_MXFP8, &tq, &tqs, &dw.tc, &dw.ts, NULL, &t2, wsb2 ? ws2 : NULL, wsb2, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  uint8_t *g1 = malloc(m * n * ob_sz), *g2 = malloc(m * n * ob_sz);
  CUDA_OK(cudaMemcpy(g1, d1, m * n * ob_sz, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(g2, d2, m * n * ob_sz, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < m * n; i++) {
    if (memcmp(g1 + i * ob_sz, g2 + i * ob_sz, ob_sz)) {
      GEMM_FAIL("mxfp8_linear M=%zu N=%zu K=%zu out=%d: out[%zu] fused != quantize+mm", m, n, k, o, i);
      continue;
    }
    const double g = skref_gemm_load_out((skref_gemm_out)o, g1, i),
                 tol = skref_gemm_tolerance((skref_gemm_out)o, ref[i], abs_sum[i], k);
    if (!out_close((skref_gemm_out)o, g, ref[i], tol)) /* FP16 past 65520 must be the right infinity */
      GEMM_FAIL("mxfp8_linear M=%zu N=%zu K=%zu out=%d: out[%zu] = %.9g, ref %.9g", m, n, k, o, i, g, ref[i]);
  }
  (void)seed;
  free_operand(&dw);
  CUDA_OK(cudaFree(dx)); CUDA_OK(cudaFree(dq)); CUDA_OK(cudaFree(dqs)); CUDA_OK(cudaFree(d1)); CUDA_OK(cudaFree(d2));
  CUDA_OK(cudaFree(ws1)); CUDA_OK(cudaFree(ws2));
  free(x); free(xc); free(xs); free(wc); free(wsc); free(ref); free(abs_sum); free(g1); free(g2);
}

Test(gpu_gemm, mxfp8_linear_fused_decode_bitwise_equals_quantize_then_mm, .init = setup, .fini = teardown, .timeout = 900) {
  setenv("SPARKINFER_GEMM_LINEAR_FUSED", "1", 1); /* before the first gemm call of this process */
  uint64_t seed = skref_test_seed("gpu mxfp8_linear fused"), rng = seed;
  skref_rng qr;
  skref_rng_seed(&qr, seed);
  /* Every M; K = 9 steps (uneven warp/split shares, every 32-K block boundary); N not a multiple
   * of the 32-row block. Then real shapes (tiles shared by CTAs), every output type, a 1-step K. */
  for (size_t m = 1; m <= 16; m++) check_linear_fused(true, m, 200, 1152, 0, &qr, &rng, seed);
  check_linear_fused(true, 3, 4096, 7168, 0, &qr, &rng, seed);
  check_linear_fused(true, 9, 5120, 2944, 0, &qr, &rng, seed);
  check_linear_fused(true, 16, 4096, 7168, 0, &qr, &rng, seed);
  check_linear_fused(true, 1, 28672, 4096, 0, &qr, &rng, seed);
  check_linear_fused(true, 8, 8192, 4096, 0, &qr, &rng, seed); /* 16-row tiles, split (2^25 weights) */
  check_linear_fused(true, 5, 77, 128, 1, &qr, &rng, seed);
  check_linear_fused(true, 16, 300, 1024, 2, &qr, &rng, seed);
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* The default gemm.mxfp8_linear (quantize + mm at every M): the same checks. */
Test(gpu_gemm, mxfp8_linear_default_bitwise_equals_quantize_then_mm, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed = skref_test_seed("gpu mxfp8_linear default"), rng = seed;
  skref_rng qr;
  skref_rng_seed(&qr, seed);
  const size_t ms[] = {1, 2, 3, 8, 9, 16};
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) check_linear_fused(false, ms[i], 200, 1152, 0, &qr, &rng, seed);
  check_linear_fused(false, 1, 8192, 4096, 0, &qr, &rng, seed);
  check_linear_fused(false, 4, 28672, 4096, 1, &qr, &rng, seed);
  check_linear_fused(false, 7, 5120, 2944, 2, &qr, &rng, seed);
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

Test(gpu_gemm, graph_replay_after_prewarm_and_freeze, .init = setup, .fini = teardown) {
  uint64_t seed = skref_test_seed("gpu gemm graph"), rng = seed;
  const size_t m = 1, n = 4096, k = 4096;
  int64_t ms[] = {1};
  SK_OK_OR_FAIL(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, ms, 1, n, k, NULL));
  SK_OK_OR_FAIL(sk_freeze_kernel_resolution("gemm graph test"));
  uint8_t *ac = malloc(skref_gemm_code_bytes(SKREF_GEMM_NVFP4, m, k)), *bc = malloc(skref_gemm_code_bytes(SKREF_GEMM_NVFP4, n, k));
  void *as = malloc(skref_gemm_scale_bytes(SKREF_GEMM_NVFP4, SKREF_GEMM_A, m, k)),
       *bs = malloc(skref_gemm_scale_bytes(SKREF_GEMM_NVFP4, SKREF_GEMM_B, n, k));
  skref_gemm_random_operand(SKREF_GEMM_NVFP4, SKREF_GEMM_A, m, k, &rng, ac, as);
  skref_gemm_random_operand(SKREF_GEMM_NVFP4, SKREF_GEMM_B, n, k, &rng, bc, bs);
  dev_operand da, db;
  upload_operand(SKREF_GEMM_NVFP4, SKREF_GEMM_A, m, k, ac, as, &da);
  upload_operand(SKREF_GEMM_NVFP4, SKREF_GEMM_B, n, k, bc, bs, &db);
  void *dc, *ws;
  size_t wsb = sk_gemm_workspace_bytes(SK_GEMM_NVFP4, m, n, k);
  CUDA_OK(cudaMalloc(&dc, m * n * 2));
  ws = gpu_zeroed(wsb ? wsb : 256);
  CUDA_OK(cudaDeviceSynchronize()); /* the runs below use a non-blocking stream */
  int64_t cs[2] = {m, n};
  DLTensor tc = tu_device_tensor(dc, out_dt[0], 2, cs);
  /* An unwarmed configuration is refused after the freeze. */
  DLTensor tc32 = tu_device_tensor(dc, out_dt[2], 2, cs);
  cr_assert_eq(sk_gemm_mm(SK_GEMM_NVFP4, &da.tc, &da.ts, &db.tc, &db.ts, NULL, &tc32, ws, wsb, NULL),
               SK_ERR_KERNEL_RESOLUTION_FROZEN);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  SK_OK_OR_FAIL(sk_gemm_mm(SK_GEMM_NVFP4, &da.tc, &da.ts, &db.tc, &db.ts, NULL, &tc, ws, wsb, s));
  CUDA_OK(cudaStreamSynchronize(s));
  uint16_t *eager = malloc(n * 2), *rep = malloc(n * 2);
  CUDA_OK(cudaMemcpy(eager, dc, n * 2, cudaMemcpyDeviceToHost));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  SK_OK_OR_FAIL(sk_gemm_mm(SK_GEMM_NVFP4, &da.tc, &da.ts, &db.tc, &db.ts, NULL, &tc, ws, wsb, s));
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; i++) {
    CUDA_OK(cudaMemsetAsync(dc, 0xff, n * 2, s));
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(rep, dc, n * 2, cudaMemcpyDeviceToHost));
    cr_assert_eq(memcmp(eager, rep, n * 2), 0, "seed %llu: replay %d differs", (unsigned long long)seed, i);
  }
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamDestroy(s));
  free_operand(&da); free_operand(&db);
  CUDA_OK(cudaFree(dc)); CUDA_OK(cudaFree(ws));
  free(ac); free(bc); free(as); free(bs); free(eager); free(rep);
}

Test(gpu_gemm, block_fp8_linear_matches_quantize_then_reference, .init = setup, .fini = teardown, .timeout = 300) {
  uint64_t seed = skref_test_seed("gpu block_fp8_linear"), rng = seed;
  skref_rng qr;
  skref_rng_seed(&qr, seed);
  const size_t n = 640, k = 1024, max_m = 300;
  sk_block_fp8_linear_caps caps = {n, k, max_m, SK_DTYPE_BF16, NULL};
  sk_block_fp8_linear_plan *plan;
  SK_OK_OR_FAIL(sk_block_fp8_linear_plan_create(&caps, &plan));
  sk_scratch_spec spec;
  SK_OK_OR_FAIL(sk_block_fp8_linear_scratch_spec(plan, &spec));
  void *scratch;
  scratch = gpu_zeroed(spec.bytes);
  uint8_t *wc = malloc(n * k);
  void *wsc = malloc(skref_gemm_scale_bytes(SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, n, k));
  skref_gemm_random_operand(SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, n, k, &rng, wc, wsc);
  dev_operand dw;
  upload_operand(SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, n, k, wc, wsc, &dw);
  const size_t ms[] = {1, 16, 100, 300};
  for (size_t mi = 0; mi < 4; mi++) {
    const size_t m = ms[mi];
    uint16_t *x = malloc(m * k * 2);
    skref_fill_normal(&qr, x, m * k, SKREF_BF16, 1.0f, 0.002, 40.0f);
    uint8_t *xc = malloc(m * k);
    float *xs = malloc(m * (k / 128) * 4);
    skref_gemm_quantize_block_fp8_rows(x, m, k, xc, xs);
    skref_gemm_operand oa = {SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_A, m, k, xc, xs}, ob = {SKREF_GEMM_BLOCK_FP8, SKREF_GEMM_B, n, k, wc, wsc};
    double *ref = malloc(m * n * 8), *abs_sum = malloc(m * n * 8);
    skref_gemm(&oa, &ob, 1.0, ref, abs_sum);
    void *dx, *dout;
    dx = gpu_upload(x, m * k * 2);
    dout = gpu_poisoned(m * n * 2);
    int64_t xs_shape[2] = {(int64_t)m, (int64_t)k}, os[2] = {(int64_t)m, (int64_t)n};
    DLTensor tx = tu_device_tensor(dx, out_dt[0], 2, xs_shape), to = tu_device_tensor(dout, out_dt[0], 2, os);
    sk_binding b;
    SK_OK_OR_FAIL(sk_block_fp8_linear_bind(plan, &tx, &dw.tc, &dw.ts, &to, scratch, spec.bytes, &b));
    SK_OK_OR_FAIL(sk_block_fp8_linear_run(plan, &b, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    uint16_t *got = malloc(m * n * 2);
    CUDA_OK(cudaMemcpy(got, dout, m * n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < m * n; i++) {
      double g = skref_gemm_load_out(SKREF_GEMM_OUT_BF16, got, i), tol = skref_gemm_tolerance(SKREF_GEMM_OUT_BF16, ref[i], abs_sum[i], k);
      if (!(fabs(g - ref[i]) <= tol)) {
        GEMM_FAIL("seed %llu block_fp8_linear M=%zu: out[%zu] = %.9g, ref %.9g", (unsigned long long)seed, m, i, g, ref[i]);
        break;
      }
    }
    CUDA_OK(cudaFree(dx)); CUDA_OK(cudaFree(dout));
    free(x); free(xc); free(xs); free(ref); free(abs_sum); free(got);
  }
  free_operand(&dw);
  CUDA_OK(cudaFree(scratch));
  free(wc); free(wsc);
  sk_block_fp8_linear_plan_destroy(plan);
  cr_assert_eq(failures, 0, "seed %llu: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* One-shot calls from several threads at once, starting with an empty memo of resolved kernels:
 * every thread races to resolve and publish the same configurations (decode for M = 3, tiled for
 * M = 64 where the build has it, every recipe). Each thread's outputs must equal, bit for bit, a single-threaded run done
 * afterwards (the kernels are deterministic, so any kernel mix-up or torn memo entry shows). */
enum { MEMO_THREADS = 4, MEMO_RECIPES = 5, MEMO_MS = 2 };
typedef struct memo_case {
  dev_operand a[MEMO_MS], b;
  size_t m[MEMO_MS];
} memo_case;
typedef struct memo_thread {
  memo_case *cases;
  void *out[MEMO_RECIPES][MEMO_MS];
  int64_t shape[MEMO_MS][2];
  sk_status status;
  int order;
} memo_thread;

static void memo_run_all(memo_thread *t, cudaStream_t s) {
  for (int i = 0; i < MEMO_RECIPES * MEMO_MS && t->status == SK_OK; i++) {
    const int j = (i * 3 + t->order) % (MEMO_RECIPES * MEMO_MS), r = j / MEMO_MS, mi = j % MEMO_MS;
    memo_case *c = &t->cases[r];
    DLTensor tc = tu_device_tensor(t->out[r][mi], out_dt[0], 2, t->shape[mi]);
    const int scaled = r != SKREF_GEMM_TENSOR_FP8;
    t->status = sk_gemm_mm((sk_gemm_recipe)r, &c->a[mi].tc, scaled ? &c->a[mi].ts : NULL, &c->b.tc,
                           scaled ? &c->b.ts : NULL, NULL, &tc, NULL, 0, s);
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

Test(gpu_gemm, one_shot_memo_is_thread_safe, .init = setup, .fini = teardown, .timeout = 300) {
  uint64_t seed = skref_test_seed("gpu gemm memo threads"), rng = seed;
  const size_t n = 256, k = 512, ms[MEMO_MS] = {3, have_tiled() ? 64 : 16}; /* 16: the 2-token-tile decode kernel */
  memo_case cases[MEMO_RECIPES];
  for (int r = 0; r < MEMO_RECIPES; r++) {
    const skref_gemm_recipe rr = (skref_gemm_recipe)r;
    for (int mi = 0; mi < MEMO_MS; mi++) {
      const size_t m = ms[mi];
      uint8_t *ac = malloc(skref_gemm_code_bytes(rr, m, k));
      void *as = malloc(skref_gemm_scale_bytes(rr, SKREF_GEMM_A, m, k) + 4);
      skref_gemm_random_operand(rr, SKREF_GEMM_A, m, k, &rng, ac, as);
      upload_operand(rr, SKREF_GEMM_A, m, k, ac, as, &cases[r].a[mi]);
      free(ac);
      free(as);
    }
    uint8_t *bc = malloc(skref_gemm_code_bytes(rr, n, k));
    void *bs = malloc(skref_gemm_scale_bytes(rr, SKREF_GEMM_B, n, k) + 4);
    skref_gemm_random_operand(rr, SKREF_GEMM_B, n, k, &rng, bc, bs);
    upload_operand(rr, SKREF_GEMM_B, n, k, bc, bs, &cases[r].b);
    free(bc);
    free(bs);
  }
  memo_thread th[MEMO_THREADS + 1];
  for (int t = 0; t <= MEMO_THREADS; t++) {
    th[t] = (memo_thread){.cases = cases, .status = SK_OK, .order = t};
    for (int mi = 0; mi < MEMO_MS; mi++) {
      th[t].shape[mi][0] = (int64_t)ms[mi];
      th[t].shape[mi][1] = (int64_t)n;
      for (int r = 0; r < MEMO_RECIPES; r++) {
        th[t].out[r][mi] = gpu_poisoned(ms[mi] * n * 2); /* NaN poison */
      }
    }
  }
  CUDA_OK(cudaDeviceSynchronize()); /* the threads' non-blocking streams do not wait for the poison */
  pthread_t ids[MEMO_THREADS];
  for (int t = 0; t < MEMO_THREADS; t++) cr_assert_eq(pthread_create(&ids[t], NULL, memo_thread_main, &th[t]), 0);
  for (int t = 0; t < MEMO_THREADS; t++) pthread_join(ids[t], NULL);
  memo_thread_main(&th[MEMO_THREADS]); /* the single-threaded run, memo now full */
  for (int t = 0; t <= MEMO_THREADS; t++) cr_assert_eq(th[t].status, SK_OK, "thread %d: %s", t, sk_last_error_message());
  for (int r = 0; r < MEMO_RECIPES; r++)
    for (int mi = 0; mi < MEMO_MS; mi++) {
      const size_t bytes = ms[mi] * n * 2;
      uint16_t *want = malloc(bytes), *got = malloc(bytes);
      CUDA_OK(cudaMemcpy(want, th[MEMO_THREADS].out[r][mi], bytes, cudaMemcpyDeviceToHost));
      size_t nan = 0;
      for (size_t i = 0; i < bytes / 2; i++) nan += (want[i] & 0x7f80) == 0x7f80 && (want[i] & 0x7f);
      cr_assert_eq(nan, 0, "seed %llu %s M=%zu: %zu outputs unwritten or NaN", (unsigned long long)seed,
                   skref_gemm_recipe_name((skref_gemm_recipe)r), ms[mi], nan);
      for (int t = 0; t < MEMO_THREADS; t++) {
        CUDA_OK(cudaMemcpy(got, th[t].out[r][mi], bytes, cudaMemcpyDeviceToHost));
        cr_assert_eq(memcmp(want, got, bytes), 0, "seed %llu %s M=%zu: thread %d differs from the serial run",
                     (unsigned long long)seed, skref_gemm_recipe_name((skref_gemm_recipe)r), ms[mi], t);
      }
      free(want);
      free(got);
    }
  for (int t = 0; t <= MEMO_THREADS; t++)
    for (int r = 0; r < MEMO_RECIPES; r++)
      for (int mi = 0; mi < MEMO_MS; mi++) CUDA_OK(cudaFree(th[t].out[r][mi]));
  for (int r = 0; r < MEMO_RECIPES; r++) {
    for (int mi = 0; mi < MEMO_MS; mi++) free_operand(&cases[r].a[mi]);
    free_operand(&cases[r].b);
  }
}
