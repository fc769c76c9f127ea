/* ops/gemm/cases.c - the harness's case tables for gemm.blockscaled, gemm.mxfp8_linear,
 * gemm.tensor_fp8_linear and gemm.block_fp8_linear (tests/harness/harness.h).
 *
 * Inputs: random BF16 activations and weights (roughly normal, a few outliers) quantized the way
 * a model's are: NVFP4 and MXFP8 by the quantizers' CPU references (ops/quantization/ref.c),
 * MXFP4 per 32 with a UE8M0 scale, block FP8 per 1x128 (activations) and 128x128 (weights) with
 * fp32 scales, tensor FP8 with one scale per tensor. Where alpha is given it undoes the per-tensor
 * scales (NVFP4's 1/(gsA*gsB), tensor FP8's sA*sB) times a random factor in [0.5, 1.5); where it
 * is absent (1.0) those operands are quantized with unit per-tensor scales. The linear ops take
 * BF16 x (mxfp8, block_fp8) or E4M3 codes (tensor_fp8).
 *
 * Reference: the double-precision product of the dequantized operands (ops/gemm/ref.h); the linear
 * ops quantize x with the references that equal their device quantizers bit for bit. Tolerance
 * per output element, as the gemm suites always had it (skref_gemm_tolerance): FP32 accumulation
 * of K products, bounded through that element's sum of |a*b|, plus one rounding to the output
 * type; plus the distance between the exact value and the expectation stored in the output type.
 * NaN never passes. FP16 outputs stay in range (overflow: tests/gpu/test_gemm_gpu.c).
 *
 * Cases: every recipe and output type at decode (M <= 16: both token tiles, N not a multiple of
 * the tiles, K of 1 to 64 steps) and tiled M (each tile configuration of the heuristic on the
 * H200, ragged M and N), alpha given and absent, plans whose max_m spans several regimes; the
 * bench shapes of the decode and prefill tables (layer shapes of 8B-70B models). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ref.h"
#include "gemm/ref.h"
#include "harness/harness.h"
#include "sparkinfer/gemm.h"

enum { OP_MM, OP_MXFP8_LINEAR, OP_TENSOR_FP8_LINEAR, OP_BLOCK_FP8_LINEAR, NUM_OPS };
enum { P_ALPHA }; /* param[P_ALPHA]: 1 = alpha given */

/* Tensor order of each op's entry (ops/gemm/mm.c, linear.c). */
enum { MM_AC, MM_AS, MM_BC, MM_BS, MM_ALPHA, MM_C };
static const int alpha_index[NUM_OPS] = {MM_ALPHA, 3, 2, -1};
static const int out_index[NUM_OPS] = {MM_C, 4, 3, 3};
static const int op_recipe[NUM_OPS] = {-1, SK_GEMM_MXFP8, SK_GEMM_TENSOR_FP8, SK_GEMM_BLOCK_FP8};
static const char *const recipe_names[5] = {"nvfp4", "mxfp4", "mxfp8", "block_fp8", "tensor_fp8"};
static const char *const out_names[3] = {"bf16", "fp16", "fp32"};

/* ---- the case lists ---------------------------------------------------------------------------- */

typedef struct gspec {
  int recipe;
  sk_dtype out;
  int64_t m, n, k, max_m;
  int alpha;
  unsigned flags;
} gspec;

#define MAX_CASES 512
static gspec specs[NUM_OPS][MAX_CASES];
static size_t nspecs[NUM_OPS];
static int built;

static void add(int op, int recipe, sk_dtype out, int64_t m, int64_t n, int64_t k, int64_t max_m, int alpha, unsigned flags) {
  if (nspecs[op] < MAX_CASES) specs[op][nspecs[op]++] = (gspec){recipe, out, m, n, k, max_m, alpha, flags};
}

/* The decode and prefill shapes of the bench tables: N x K of a 70B layer's projections and the
 * 8B ones' (5120 x 2944: a small layer). */
static const int64_t bench_shapes[4][2] = {{8192, 8192}, {28672, 4096}, {8192, 28672}, {5120, 2944}};
static const int64_t bench_decode_ms[] = {1, 4, 8, 16};
static const int64_t bench_prefill_ms[] = {2048, 4096, 8192};

static void build_mm(void) {
  const int op = OP_MM;
  /* CPU (and GPU): every recipe and output type on a small layer, decode and tiled M. */
  for (int r = 0; r < 5; r++)
    for (int o = 0; o < 3; o++) add(op, r, (sk_dtype)o, o == 0 ? 1 : o == 1 ? 16 : 64, 200, 256, 300, o != 1, SKH_TEST);
  /* Decode, every recipe and output type: M of both token tiles; N = 2880 (not a multiple of
   * 128); plans of exactly M, or of max_m 300 (decode and tiled regimes). */
  static const int64_t dms[] = {1, 2, 3, 8, 16};
  for (int r = 0; r < 5; r++)
    for (int o = 0; o < 3; o++)
      for (int i = 0; i < 5; i++) add(op, r, (sk_dtype)o, dms[i], 2880, 2048, i % 2 ? dms[i] : 300, (r + o + i) % 2, SKH_GPU);
  /* Layer widths, BF16 out: 896 tiles (several waves, unsplit; K cut to 8 steps to keep the
   * reference quick), split and stream-K grids, 23-step K (CTA ranges across tiles). */
  for (int r = 0; r < 5; r++) {
    add(op, r, SK_DTYPE_BF16, 1, 28672, 1024, 1, 1, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 16, 4096, 7168, 16, 1, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 4, 8192, 2048, 8, 0, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 16, 5120, 2944, 16, 1, SKH_GPU);
  }
  /* Every M 1..16; N = 200 (not a multiple of the 32-row tiles); K = 9 steps (uneven shares over
   * warps and splits; every 32-K and 128-K scale boundary). Then one step of K, and 64 steps. */
  for (int r = 0; r < 5; r++) {
    for (int64_t m = 1; m <= 16; m++) add(op, r, SK_DTYPE_BF16, m, 200, 1152, m % 2 ? 16 : m, m % 3 == 0, SKH_GPU);
    add(op, r, SK_DTYPE_FP32, 5, 77, 128, 5, 1, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 3, 512, 8192, 3, 0, SKH_GPU);
  }
  /* Tiled, every recipe and output type: M from 17 to 1000 (64- and 128-row tiles), ragged N;
   * then a tall M, and the H200's other two tile shapes (64x128 at N >= 132 x 128, 128x128 once
   * the 128-row grid fills 132 SMs). */
  static const int64_t pms[] = {17, 64, 128, 1000};
  for (int r = 0; r < 5; r++)
    for (int o = 0; o < 3; o++)
      for (int i = 0; i < 4; i++)
        add(op, r, (sk_dtype)o, pms[i], o == 0 ? 384 : 200, 512, i % 2 ? 4096 : pms[i], (r + o + i) % 2, SKH_GPU);
  for (int r = 0; r < 5; r++) {
    add(op, r, SK_DTYPE_BF16, 4096, 256, 512, 4096, 1, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 64, 17024, 256, 64, 1, SKH_GPU);
    add(op, r, SK_DTYPE_FP16, 600, 4096, 256, 600, 0, SKH_GPU);
  }
  /* Bench: BF16 out, alpha absent, plans of exactly M. */
  for (int r = 0; r < 5; r++)
    for (int s = 0; s < 4; s++) {
      for (size_t i = 0; i < sizeof bench_decode_ms / sizeof *bench_decode_ms; i++)
        add(op, r, SK_DTYPE_BF16, bench_decode_ms[i], bench_shapes[s][0], bench_shapes[s][1], bench_decode_ms[i], 0,
            SKH_BENCH);
      for (size_t i = 0; s == 0 && i < sizeof bench_prefill_ms / sizeof *bench_prefill_ms; i++)
        add(op, r, SK_DTYPE_BF16, bench_prefill_ms[i], bench_shapes[s][0], bench_shapes[s][1], bench_prefill_ms[i], 0,
            SKH_BENCH);
    }
}

static void build_linear(int op) {
  static const int64_t linear_ms[6] = {1, 2, 3, 8, 9, 16}, block_ms[4] = {1, 16, 100, 300};
  const int r = op_recipe[op];
  /* CPU (and GPU): every output type, decode and tiled M, alpha given and absent. */
  for (int o = 0; o < 3; o++) add(op, r, (sk_dtype)o, o == 0 ? 1 : o == 1 ? 16 : 100, 200, 1152, 300, o != 2, SKH_TEST);
  switch (op) {
  case OP_MXFP8_LINEAR:
    add(op, r, SK_DTYPE_BF16, 5, 3000, 2048, 5, 0, SKH_GPU);
    for (int i = 0; i < 6; i++) /* both token tiles */
      add(op, r, (sk_dtype)(i % 3), linear_ms[i], 200, 1152, 16, i % 2, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 1, 8192, 4096, 1, 1, SKH_GPU);
    add(op, r, SK_DTYPE_FP16, 4, 28672, 1024, 4, 0, SKH_GPU);
    add(op, r, SK_DTYPE_FP32, 7, 5120, 2944, 7, 1, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 300, 384, 1024, 300, 1, SKH_GPU);
    break;
  case OP_TENSOR_FP8_LINEAR:
    add(op, r, SK_DTYPE_BF16, 9, 640, 1024, 16, 1, SKH_GPU);
    add(op, r, SK_DTYPE_FP16, 64, 640, 1024, 300, 0, SKH_GPU);
    add(op, r, SK_DTYPE_FP32, 300, 640, 1024, 300, 1, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 16, 4096, 7168, 16, 1, SKH_GPU);
    break;
  default: /* block_fp8: M 1, 16, 100, 300 of one plan; N not a multiple of 128 */
    for (int i = 0; i < 4; i++) add(op, r, SK_DTYPE_BF16, block_ms[i], 640, 1024, 300, 0, SKH_GPU);
    add(op, r, SK_DTYPE_FP16, 7, 200, 1152, 200, 0, SKH_GPU);
    add(op, r, SK_DTYPE_FP32, 130, 200, 1152, 200, 0, SKH_GPU);
    add(op, r, SK_DTYPE_BF16, 16, 4096, 7168, 16, 0, SKH_GPU);
    break;
  }
  /* Bench: the three large decode shapes at M = 1 and 16, BF16 out. */
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < 2; i++) add(op, r, SK_DTYPE_BF16, i ? 16 : 1, bench_shapes[s][0], bench_shapes[s][1], i ? 16 : 1, 0, SKH_BENCH);
}

static void build(void) {
  if (built) return;
  build_mm();
  for (int op = OP_MXFP8_LINEAR; op < NUM_OPS; op++) build_linear(op);
  built = 1;
}

static void get(int op, size_t i, skh_case *c) {
  build();
  const gspec *s = &specs[op][i];
  memset(c, 0, sizeof *c);
  if (op == OP_MM) {
    sk_gemm_caps caps = SK_GEMM_CAPS_INIT;
    caps.recipe = (sk_gemm_recipe)s->recipe;
    caps.out = s->out;
    caps.n = s->n;
    caps.k = s->k;
    caps.max_m = s->max_m;
    SKH_SET_CAPS(c, caps);
  } else {
    sk_gemm_linear_caps caps = SK_GEMM_LINEAR_CAPS_INIT;
    caps.n = s->n;
    caps.k = s->k;
    caps.max_m = s->max_m;
    caps.out = s->out;
    SKH_SET_CAPS(c, caps);
  }
  skh_case_sym(c, "M", s->m);
  c->param[P_ALPHA] = alpha_index[op] >= 0 && s->alpha;
  c->flags = s->flags;
  snprintf(c->name, sizeof c->name, "%s%s%s m=%lld n=%lld k=%lld max_m=%lld%s", op == OP_MM ? recipe_names[s->recipe] : "",
           op == OP_MM ? " " : "", out_names[s->out], (long long)s->m, (long long)s->n, (long long)s->k,
           (long long)s->max_m, c->param[P_ALPHA] ? " alpha" : "");
}

/* ---- inputs ------------------------------------------------------------------------------------- */

/* The case's shape and recipe (M from the output tensor, the rest from the caps). */
typedef struct shape {
  int op, recipe, out;
  int64_t m, n, k;
} shape;

static shape shape_of(const skh_case *c, const skh_tensor *t) {
  const int op = c->variant;
  shape s = {op, op_recipe[op], 0, t[out_index[op]].shape[0], t[out_index[op]].shape[1], 0};
  if (op == OP_MM) {
    const sk_gemm_caps *caps = (const sk_gemm_caps *)(const void *)c->caps;
    s.recipe = caps->recipe;
    s.out = caps->out;
    s.k = caps->k;
  } else {
    const sk_gemm_linear_caps *caps = (const sk_gemm_linear_caps *)(const void *)c->caps;
    s.out = caps->out;
    s.k = caps->k;
  }
  return s;
}

/* Roughly normal BF16 values (a sum of four uniforms: one 64-bit draw per value, fast enough for
 * the 117M-element weights of the layer-width cases), with 0.1% outliers 8 times larger. */
static void fill_bf16(skref_rng *rng, uint16_t *x, size_t n, double stddev) {
  const double norm = stddev / (65536.0 * 0.5773502691896258); /* sum of 4 U(0, 65536): sd 2 * 65536 / sqrt(12) */
  for (size_t i = 0; i < n; i++) {
    const uint64_t u = skref_rng_u64(rng);
    double v = (double)(u & 0xFFFF) + (double)((u >> 16) & 0xFFFF) + (double)((u >> 32) & 0xFFFF) +
               (double)((u >> 48) & 0xFFFF) - 131070.0;
    v *= norm;
    if ((u * 0x9E3779B97F4A7C15ull) >> 54 == 0) v *= 8; /* 1 in 1024 */
    x[i] = skref_float_to_bf16((float)v);
  }
}

static float bf16f(uint16_t h) { return skref_bf16_to_float(h); }

/* MXFP4: UE8M0 scale 2^e >= amax/6 per 32 along K, E2M1 codes of x / 2^e, swizzled scales (padding
 * 0, as the quantizers write it). */
static void quantize_mxfp4(const uint16_t *x, size_t rows, size_t k, uint8_t *codes, uint8_t *scales) {
  const size_t cols = k / 32;
  memset(scales, 0, skref_swizzled_scale_bytes(rows, cols));
  for (size_t r = 0; r < rows; r++)
    for (size_t b = 0; b < cols; b++) {
      float amax = 0;
      for (size_t i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(bf16f(x[r * k + 32 * b + i])));
      const uint8_t e = amax > 0 ? skref_e8m0_ceil_pow2(amax / 6.0f) : 127;
      const float inv = skref_e8m0_reciprocal(e);
      scales[skref_swizzled_scale_offset(r, b, skref_swizzled_k_tiles(cols))] = e;
      for (size_t i = 0; i < 32; i += 2)
        codes[(r * k + 32 * b + i) / 2] =
            skref_e2m1_pack2(bf16f(x[r * k + 32 * b + i]) * inv, bf16f(x[r * k + 32 * b + i + 1]) * inv);
    }
}

/* Block FP8: one fp32 scale s = amax/448 per block of `block_rows` x 128 (1: activations [rows,
 * K/128]; 128: weights [ceil(rows/128), K/128]), E4M3 codes of x / s. */
static void quantize_block_fp8(const uint16_t *x, size_t rows, size_t k, size_t block_rows, uint8_t *codes, float *scales) {
  const size_t kb = k / 128;
  for (size_t r0 = 0; r0 < rows; r0 += block_rows)
    for (size_t b = 0; b < kb; b++) {
      const size_t r1 = r0 + block_rows < rows ? r0 + block_rows : rows;
      float amax = 0;
      for (size_t r = r0; r < r1; r++)
        for (size_t i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(bf16f(x[r * k + 128 * b + i])));
      const float s = amax > 0 ? amax / 448.0f : 1.0f;
      scales[(r0 / block_rows) * kb + b] = s;
      for (size_t r = r0; r < r1; r++)
        for (size_t i = 0; i < 128; i++) codes[r * k + 128 * b + i] = skref_e4m3_encode(bf16f(x[r * k + 128 * b + i]) / s);
    }
}

/* Quantize x [rows, K] into `recipe`'s codes and scales; returns the factor the per-tensor scale
 * puts into the dequantized values (NVFP4: gs; tensor FP8: 1/s; else 1), which alpha undoes.
 * `unit`: per-tensor scales of 1 (alpha absent). */
static double quantize(int recipe, int side_b, const uint16_t *x, size_t rows, size_t k, int unit, uint8_t *codes, void *scales) {
  switch (recipe) {
  case SK_GEMM_NVFP4: {
    const float one = 1.0f;
    float gs = 1.0f;
    skref_quantize_nvfp4(x, SKREF_BF16, rows, k, k, unit ? &one : NULL, &gs, codes, scales, NULL);
    return gs;
  }
  case SK_GEMM_MXFP4: quantize_mxfp4(x, rows, k, codes, scales); return 1;
  case SK_GEMM_MXFP8: skref_quantize_mxfp8(x, SKREF_BF16, rows, k, k, codes, scales, NULL); return 1;
  case SK_GEMM_BLOCK_FP8: quantize_block_fp8(x, rows, k, side_b ? 128 : 1, codes, scales); return 1;
  default: {
    float amax = 0;
    for (size_t i = 0; i < rows * k; i++)
      if (isfinite(bf16f(x[i]))) amax = fmaxf(amax, fabsf(bf16f(x[i])));
    const float s = unit || amax == 0 ? 1.0f : amax / 448.0f;
    for (size_t i = 0; i < rows * k; i++) codes[i] = skref_e4m3_encode(bf16f(x[i]) / s);
    return 1.0 / s;
  }
  }
}

/* Bench inputs: the values do not matter, only that they are finite and never all zero, and that
 * filling hundreds of MB takes no time: random bytes with E4M3 NaNs masked off, scales near 1. */
static void fill_fast(skh_tensor *t, skref_rng *rng, int scale_like) {
  uint8_t *p = t->host;
  if (t->dtype.code == kDLFloat && t->dtype.bits == 32) {
    for (size_t i = 0; i < skh_numel(t); i++) ((float *)p)[i] = 0.5f + (float)(i % 7) * 0.125f;
    return;
  }
  for (size_t i = 0; i < t->bytes; i += 8) {
    uint64_t u = skref_rng_u64(rng);
    for (size_t j = 0; j < 8 && i + j < t->bytes; j++, u >>= 8)
      p[i + j] = scale_like ? (uint8_t)(0x30 + (u & 0x0F)) : (uint8_t)(u & 0x77);
  }
}

static void fill(const skh_case *c, skh_tensor *t, size_t n, skref_rng *rng) {
  const int op = c->variant;
  const shape s = shape_of(c, t);
  const int given = (int)c->param[P_ALPHA];
  const size_t m = (size_t)s.m, nn = (size_t)s.n, k = (size_t)s.k;
  if (!(c->flags & SKH_TEST)) { /* bench only */
    for (size_t i = 0; i < n; i++) {
      if (!t[i].present || t[i].role != SK_TENSOR_IN) continue;
      const int bf16_x = t[i].dtype.code == kDLBfloat;
      fill_fast(&t[i], rng, bf16_x || strstr(t[i].name, "scales") != NULL);
      if ((int)i == alpha_index[op]) *(float *)t[i].host = 1.0f;
    }
    return;
  }
  uint16_t *w = malloc(nn * k * 2), *x = op == OP_MM || op == OP_TENSOR_FP8_LINEAR ? malloc(m * k * 2) : t[0].host;
  if (!w || !x) abort();
  fill_bf16(rng, w, nn * k, 1.0);
  fill_bf16(rng, x, m * k, 1.0);
  double fa = 1, fb;
  if (op == OP_MM) {
    fa = quantize(s.recipe, 0, x, m, k, !given, t[MM_AC].host, t[MM_AS].host);
    fb = quantize(s.recipe, 1, w, nn, k, !given, t[MM_BC].host, t[MM_BS].host);
  } else {
    if (op == OP_TENSOR_FP8_LINEAR) fa = quantize(s.recipe, 0, x, m, k, !given, t[0].host, NULL);
    fb = quantize(s.recipe, 1, w, nn, k, !given, t[1].host, op == OP_TENSOR_FP8_LINEAR ? NULL : t[2].host);
  }
  if (given) {
    const float alpha = (float)((0.5 + skref_rng_uniform(rng)) / (fa * fb));
    memcpy(t[alpha_index[op]].host, &alpha, 4);
  }
  free(w);
  if (x != t[0].host) free(x);
  (void)n;
}

/* alpha: bound as NULL unless the case gives it. */
static void layout(const skh_case *c, skh_tensor *t, size_t n) {
  const int op = c->variant;
  if (alpha_index[op] >= 0 && (size_t)alpha_index[op] < n && !c->param[P_ALPHA]) t[alpha_index[op]].present = 0;
}

/* ---- reference ---------------------------------------------------------------------------------- */

/* Per-element bounds of the last reference (skh_tolerance.elem_abs): the harness compares each
 * case's outputs right after computing its reference. */
static struct {
  double *v;
  size_t cap;
} bounds;

/* c = alpha * a x b^T into out->expect, and the element bounds. B is dequantized one row at a
 * time (the layer-width weights would take a GB as doubles). */
static void product(const skref_gemm_operand *a, const skref_gemm_operand *b, double alpha, skh_tensor *out, int out_type) {
  const size_t M = a->rows, N = b->rows, K = a->k;
  if (bounds.cap < M * N) {
    free(bounds.v);
    bounds.v = malloc(sizeof(double) * M * N);
    bounds.cap = bounds.v ? M * N : 0;
  }
  double *da = malloc(sizeof(double) * M * K), *row = malloc(sizeof(double) * K);
  if (!da || !row || !bounds.v) abort();
  skref_gemm_dequant_all(a, da);
  for (size_t n = 0; n < N; n++) {
    for (size_t kk = 0; kk < K; kk++) row[kk] = skref_gemm_dequant(b, n, kk);
    for (size_t m = 0; m < M; m++) {
      double sum = 0, sum_abs = 0;
      const double *xa = da + m * K;
      for (size_t kk = 0; kk < K; kk++) {
        const double p = xa[kk] * row[kk];
        sum += p;
        sum_abs += fabs(p);
      }
      const double ref = alpha * sum;
      skh_set(out, out->expect, m * N + n, ref);
      const double stored = skh_get(out, out->expect, m * N + n);
      bounds.v[m * N + n] = skref_gemm_tolerance((skref_gemm_out)out_type, ref, fabs(alpha) * sum_abs, K) + fabs(ref - stored);
    }
  }
  free(da);
  free(row);
}

static void reference(const skh_case *c, skh_tensor *t, size_t n) {
  const int op = c->variant;
  const shape s = shape_of(c, t);
  const size_t m = (size_t)s.m, nn = (size_t)s.n, k = (size_t)s.k;
  const int ai = alpha_index[op];
  float alpha = 1.0f;
  if (ai >= 0 && t[ai].present) memcpy(&alpha, t[ai].host, 4);
  const skref_gemm_recipe r = (skref_gemm_recipe)s.recipe;
  uint8_t *qc = NULL;
  void *qs = NULL;
  skref_gemm_operand a = {r, SKREF_GEMM_A, m, k, NULL, NULL}, b = {r, SKREF_GEMM_B, nn, k, NULL, NULL};
  switch (op) {
  case OP_MM:
    a.codes = t[MM_AC].host;
    a.scales = t[MM_AS].present ? t[MM_AS].host : NULL;
    b.codes = t[MM_BC].host;
    b.scales = t[MM_BS].present ? t[MM_BS].host : NULL;
    break;
  case OP_MXFP8_LINEAR: /* x as quantization.mxfp8 quantizes it (bit for bit) */
    qc = malloc(m * k);
    qs = malloc(skref_swizzled_scale_bytes(m, k / 32));
    if (!qc || !qs) abort();
    skref_quantize_mxfp8(t[0].host, SKREF_BF16, m, k, k, qc, qs, NULL);
    a.codes = qc, a.scales = qs, b.codes = t[1].host, b.scales = t[2].host;
    break;
  case OP_TENSOR_FP8_LINEAR:
    a.codes = t[0].host, b.codes = t[1].host;
    break;
  default: /* x as act_quant_block_fp8 quantizes it (bit for bit) */
    qc = malloc(m * k);
    qs = malloc(m * (k / 128) * sizeof(float));
    if (!qc || !qs) abort();
    skref_gemm_quantize_block_fp8_rows(t[0].host, m, k, qc, qs);
    a.codes = qc, a.scales = qs, b.codes = t[1].host, b.scales = t[2].host;
    break;
  }
  product(&a, &b, alpha, &t[out_index[op]], s.out);
  free(qc);
  free(qs);
  (void)n;
}

static void tolerance(const skh_case *c, const skh_tensor *t, size_t i, skh_tolerance *tol) {
  const int op = c->variant;
  (void)op, (void)c, (void)t, (void)i;
  *tol = (skh_tolerance){SKH_CLOSE, 0, 0, 0, 0, bounds.v};
}

/* Bench roofline: the bytes that must move (weight codes and scales, activations, output) and
 * 2 M N K flops; decode (M <= 16) is judged by bandwidth, prefill by TFLOP/s. */
static void cost(const skh_case *c, const skh_tensor *t, size_t n, double *bytes, double *flops, const char **metric) {
  const int op = c->variant;
  const shape s = shape_of(c, t);
  *bytes = 0;
  for (size_t i = 0; i < n; i++)
    if (t[i].present && (int)i != alpha_index[op]) *bytes += (double)t[i].bytes;
  *flops = 2.0 * (double)s.m * (double)s.n * (double)s.k;
  *metric = s.m <= 16 ? "GB/s" : "TFLOP/s";
}

/* ---- the tables --------------------------------------------------------------------------------- */

static size_t count(int op) { return build(), nspecs[op]; }

/* variant: the OP_* index of the op */
const skh_op skh_op_gemm_blockscaled = {"gemm.blockscaled", count, get, layout, fill, reference, tolerance, cost, OP_MM};
const skh_op skh_op_gemm_mxfp8_linear = {"gemm.mxfp8_linear", count, get, layout, fill, reference, tolerance, cost, OP_MXFP8_LINEAR};
const skh_op skh_op_gemm_tensor_fp8_linear = {"gemm.tensor_fp8_linear", count, get, layout, fill, reference, tolerance, cost,
                                              OP_TENSOR_FP8_LINEAR};
const skh_op skh_op_gemm_block_fp8_linear = {"gemm.block_fp8_linear", count, get, layout, fill, reference, tolerance, cost,
                                             OP_BLOCK_FP8_LINEAR};
