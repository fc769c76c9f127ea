/* bench_gemm - gemm.blockscaled on the GPU.
 * Decode (M = 1, 4, 8, 16) at real layer shapes: achieved bandwidth over the bytes that must move
 * (weight codes + scales + activations + output), goal >= 90% of the measured copy bandwidth.
 * Prefill (M = 2048, 4096, 8192; only when the tiled kernel is in the build): TFLOP/s.
 * Weights rotate over 3 copies so the 60 MB L2 cannot serve them. Random operands (never zeros).
 * CUDA events around 50 calls after warm-up (10 for prefill), median of 5 rounds; decode rows
 * also replay the same 50 calls from a CUDA graph ("graph us": GPU time without the host's launch
 * cost and the gaps between stream launches, what a server replaying graphs sees).
 * Also times gemm.mxfp8_linear (BF16 activations, fused quantization) at M = 1 and 16.
 * Last, host time per sk_gemm_mm call against sk_kernel_launch_ex of the same kernel with the same flags (what the
 * one-shot API adds: validation, config choice, the memo lookup).
 * SK_BENCH_DECODE_ONLY=1 skips the prefill rows; SK_BENCH_M=1,16 keeps only those M values;
 * SK_BENCH_RECIPE=2,4 only those recipes (sk_gemm_recipe: 0 nvfp4 .. 4 tensor_fp8). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench_util.h"
#include "internal.h" /* sk_now_seconds: the runtime's monotonic clock, as bench_runtime uses */

#include "gemm/ref.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/jit.h"
#include "sparkinfer/quantization.h"


static void *dev_random(size_t bytes, uint64_t *rng, int scale_like) {
  void *d;
  CK(cudaMalloc(&d, bytes));
  uint8_t *h = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) {
    uint8_t b = (uint8_t)skref_gemm_rand_u64(rng);
    h[i] = scale_like ? (uint8_t)(0x30 + (b & 0x0f)) : (uint8_t)(b & 0x77); /* finite codes, sane scales */
  }
  CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

/* One table row (and JSON row): stream time, graph time (0: not measured), bandwidth and TFLOP/s. */
static void print_row(bench_json *json, const char *label, int64_t m, int64_t n, int64_t k, double bytes, double us,
                      double graph_us) {
  const double gbs = bytes / (us * 1e-6) / 1e9, tflops = 2.0 * m * n * k / (us * 1e-6) / 1e12;
  char graph_col[32] = "-", graph_pct[32] = "-";
  if (graph_us > 0) {
    snprintf(graph_col, sizeof graph_col, "%.2f", graph_us);
    snprintf(graph_pct, sizeof graph_pct, "%.0f%%", bytes / (graph_us * 1e-6) / 1e9 / 43);
  }
  printf("| %s | %lld | %lld | %lld | %.2f | %s | %.0f | %.0f%% | %s | %.1f |\n", label, (long long)m, (long long)n,
         (long long)k, us, graph_col, gbs, gbs / 43, graph_pct, tflops);
  bench_json_row(json,
                 "{\"recipe\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"us\":%.3f,\"graph_us\":%.3f,\"gbs\":%.1f,"
                 "\"tflops\":%.2f}",
                 label, (long long)m, (long long)n, (long long)k, us, graph_us, gbs, tflops);
  fflush(stdout);
}

/* One sk_gemm_mxfp8_linear call; successive calls rotate over the 3 weight copies. */
typedef struct linear_call_ctx {
  const DLTensor *x, *w, *ws, *c; /* w, ws: 3 each */
  void *work;
  size_t wsb;
  int next;
} linear_call_ctx;
static int linear_call(void *ctx, cudaStream_t s) {
  linear_call_ctx *l = ctx;
  const int i = l->next;
  l->next = (i + 1) % 3;
  return sk_gemm_mxfp8_linear(l->x, &l->w[i], &l->ws[i], NULL, l->c, l->work, l->wsb, s) != SK_OK;
}

/* gemm.mxfp8_linear (BF16 activations quantized inside the op) at decode sizes: by default the
 * quantizer launch + mm (SPARKINFER_GEMM_LINEAR_FUSED=1: one fused launch for M <= 8). Bytes = BF16
 * activations + weight codes + scales + output. */
static void bench_mxfp8_linear(cudaStream_t s, uint64_t *rng, bench_json *json) {
  const int64_t shapes[][2] = {{8192, 8192}, {28672, 4096}, {8192, 28672}};
  const int64_t ms[] = {1, 16};
  for (int si = 0; si < 3; si++)
    for (int mi = 0; mi < 2; mi++) {
      const int64_t n = shapes[si][0], k = shapes[si][1], m = ms[mi];
      if (!bench_keep("SK_BENCH_M", m)) continue;
      const size_t bscales = sk_swizzled_scale_bytes(n, k / 32);
      void *w[3], *ws[3], *x = dev_random((size_t)(m * k * 2), rng, 1) /* bf16 bit patterns 0x3?3?: finite, O(1) */,
                         *c, *work = NULL;
      for (int i = 0; i < 3; i++) {
        w[i] = dev_random((size_t)(n * k), rng, 0);
        ws[i] = dev_random(bscales, rng, 1);
      }
      CK(cudaMalloc(&c, (size_t)(m * n * 2)));
      const size_t wsb = sk_gemm_mxfp8_linear_workspace_bytes(m, n, k);
      if (wsb) {
        CK(cudaMalloc(&work, wsb));
        CK(cudaMemset(work, 0, wsb));
      }
      int64_t xs[2] = {m, k}, wcs[2] = {n, k}, wss[1] = {(int64_t)bscales}, cs[2] = {m, n};
      DLDataType u8 = {kDLUInt, 8, 1}, bf = {kDLBfloat, 16, 1};
      DLTensor tx = tu_device_tensor(x, bf, 2, xs), tc = tu_device_tensor(c, bf, 2, cs), tw[3], tws[3];
      for (int i = 0; i < 3; i++) {
        tw[i] = tu_device_tensor(w[i], u8, 2, wcs);
        tws[i] = tu_device_tensor(ws[i], u8, 1, wss);
      }
      linear_call_ctx ctx = {&tx, tw, tws, &tc, work, wsb, 0};
      int bad = 0;
      for (int i = 0; i < 6 && !bad; i++) bad = linear_call(&ctx, s);
      const double us = bad ? -1 : bench_stream_us(linear_call, &ctx, s, 50, 5);
      const double graph_us = bad ? -1 : bench_graph_us(linear_call, &ctx, s, 50, 5);
      if (us < 0 || graph_us < 0)
        printf("| mxfp8_linear | %lld | %lld | %lld | error: %s |\n", (long long)m, (long long)n, (long long)k,
               sk_last_error_message());
      else
        print_row(json, "mxfp8_linear (bf16 x)", m, n, k,
                  (double)(n * k) + (double)bscales + (double)(m * k * 2) + (double)(m * n * 2), us, graph_us);
      fflush(stdout);
      CK(cudaFree(x));
      CK(cudaFree(c));
      if (work) CK(cudaFree(work));
      for (int i = 0; i < 3; i++) {
        CK(cudaFree(w[i]));
        CK(cudaFree(ws[i]));
      }
    }
}

/* Host microseconds per call, sk_gemm_mm (tensor_fp8, M = 1, N = K = 128: a kernel far shorter
 * than a host launch, so the queue never fills) against sk_kernel_launch of the kernel it picks.
 * Median of 21 rounds of 2000 calls, the queue drained between rounds. */
static void bench_host_overhead(cudaStream_t s, uint64_t *rng, bench_json *json) {
  const int64_t m = 1, n = 128, k = 128;
  void *a = dev_random((size_t)(m * k), rng, 0), *b = dev_random((size_t)(n * k), rng, 0), *c;
  CK(cudaMalloc(&c, (size_t)(m * n * 2)));
  int64_t as[2] = {m, k}, bsh[2] = {n, k}, cs[2] = {m, n};
  DLDataType u8 = {kDLUInt, 8, 1}, bf = {kDLBfloat, 16, 1};
  DLTensor ta = tu_device_tensor(a, u8, 2, as), tb = tu_device_tensor(b, u8, 2, bsh), tc = tu_device_tensor(c, bf, 2, cs);
  /* The kernel and grid sk_gemm_mm launches here, as mm picks them (a decode kernel; K = 128 is one
   * step, so no tile is split and no workspace is used). */
  sk_gemm_launch_info info;
  sk_kernel *kern = NULL;
  sk_status st = sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, m, n, k, NULL, &info);
  if (st == SK_OK && info.workspace_bytes != 0) {
    printf("host overhead: error: expected no workspace at K = 128\n");
    return;
  }
  if (st == SK_OK) {
    const sk_kernel_request req = {"gemm.blockscaled", info.source, info.name, info.params, NULL, NULL, 0, 0};
    st = sk_kernel_resolve(&req, &kern);
  }
  if (st != SK_OK || sk_gemm_mm(SK_GEMM_TENSOR_FP8, &ta, NULL, &tb, NULL, NULL, &tc, NULL, 0, s)) {
    printf("host overhead: error: %s\n", sk_last_error_message());
    return;
  }
  const void *ac = a, *bc = b, *nul = NULL;
  void *cp = c, *partials = NULL, *counters = NULL;
  int mi = (int)m, ni = (int)n, ki = (int)k, ldc = (int)n;
  void *args[] = {(void *)&ac, (void *)&nul, (void *)&bc, (void *)&nul, (void *)&nul, &cp, &mi, &ni, &ki, &ldc,
                  &partials, &counters};
  double mm[21], raw[21];
  const int calls = 2000;
  for (int rep = 0; rep < 21; rep++) {
    const double t0 = sk_now_seconds();
    for (int i = 0; i < calls; i++) /* launched as sk_gemm_mm launches it (overlapped with the previous kernel) */
      sk_kernel_launch_ex(kern, info.grid, info.block, info.smem_bytes, s, args, SK_LAUNCH_OVERLAP_PREVIOUS);
    const double t1 = sk_now_seconds();
    for (int i = 0; i < calls; i++) sk_gemm_mm(SK_GEMM_TENSOR_FP8, &ta, NULL, &tb, NULL, NULL, &tc, NULL, 0, s);
    const double t2 = sk_now_seconds();
    raw[rep] = (t1 - t0) * 1e6 / calls;
    mm[rep] = (t2 - t1) * 1e6 / calls;
    CK(cudaStreamSynchronize(s));
  }
  CK(cudaGetLastError());
  qsort(raw, 21, sizeof(double), bench_cmp_double);
  qsort(mm, 21, sizeof(double), bench_cmp_double);
  printf("\n| host time per call (tensor_fp8, M = 1, 128x128: %s, %u CTAs) | us |\n|---|---|\n", info.name, info.grid.x);
  printf("| sk_kernel_launch_ex of the decode kernel | %.3f |\n| sk_gemm_mm | %.3f |\n| sk_gemm_mm overhead | %.3f |\n",
         raw[10], mm[10], mm[10] - raw[10]);
  bench_json_row(json, "{\"host_launch_us\":%.3f,\"host_mm_us\":%.3f}", raw[10], mm[10]);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
}

static const char *names[] = {"nvfp4", "mxfp4", "mxfp8", "block_fp8", "tensor_fp8"};

/* One sk_gemm_mm call; successive calls rotate over the 3 weight copies. */
typedef struct mm_call_ctx {
  sk_gemm_recipe recipe;
  const DLTensor *a, *as, *b, *bs, *c; /* b, bs: 3 each */
  void *ws;
  size_t wsb;
  int next;
} mm_call_ctx;
static int mm_call(void *ctx, cudaStream_t s) {
  mm_call_ctx *x = ctx;
  const int i = x->next;
  x->next = (i + 1) % 3;
  return sk_gemm_mm(x->recipe, x->a, x->as, &x->b[i], x->bs ? &x->bs[i] : NULL, NULL, x->c, x->ws, x->wsb, s) != SK_OK;
}

int main(void) {
  bench_json json = bench_json_open();
  bench_open_device();
  uint64_t rng = 42;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t shapes[][2] = {{8192, 8192}, {28672, 4096}, {8192, 28672}, {5120, 2944}};
  const int64_t ms[] = {1, 4, 8, 16, 2048, 4096, 8192};
  /* SK_BENCH_DECODE_ONLY=1: skip the prefill rows (quick sweeps of decode configurations). */
  const int decode_only = getenv("SK_BENCH_DECODE_ONLY") && atoi(getenv("SK_BENCH_DECODE_ONLY")) != 0;
  int tiled = 0;
  {
    const char *const *paths;
    size_t n;
    sk_list_kernel_sources(&paths, &n);
    for (size_t i = 0; i < n; i++) tiled |= !strcmp(paths[i], "gemm/mma_tiled.cuh");
  }
  printf("| recipe | M | N | K | us | graph us | GB/s | %% of 4300 | graph %% | TFLOP/s |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int r = 0; r < 5; r++)
    for (int si = 0; si < 4; si++)
      for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
        const int64_t n = shapes[si][0], k = shapes[si][1], m = ms[mi];
        if (m > 16 && (!tiled || si != 0 || decode_only)) continue; /* prefill: one shape */
        if (!bench_keep("SK_BENCH_M", m) || !bench_keep("SK_BENCH_RECIPE", r)) continue;
        const int fp4 = r <= 1;
        const size_t bcodes = (size_t)(n * (fp4 ? k / 2 : k)), acodes = (size_t)(m * (fp4 ? k / 2 : k));
        const size_t bscales = r == 4 ? 0 : r == 3 ? (size_t)(((n + 127) / 128) * (k / 128) * 4) : sk_swizzled_scale_bytes(n, k / (r == 0 ? 16 : 32));
        const size_t ascales = r == 4 ? 0 : r == 3 ? (size_t)(m * (k / 128) * 4) : sk_swizzled_scale_bytes(m, k / (r == 0 ? 16 : 32));
        void *b[3], *bs[3], *a = dev_random(acodes, &rng, 0), *as = ascales ? dev_random(ascales, &rng, 1) : NULL, *c, *ws = NULL;
        for (int i = 0; i < 3; i++) {
          b[i] = dev_random(bcodes, &rng, 0);
          bs[i] = bscales ? dev_random(bscales, &rng, 1) : NULL;
        }
        if (r == 3) { /* fp32 block scales: overwrite with 1.0-ish floats */
          float *h = malloc(bscales > ascales ? bscales : ascales);
          for (size_t i = 0; i < (bscales > ascales ? bscales : ascales) / 4; i++) h[i] = 0.5f + (float)(i % 7) * 0.125f;
          for (int i = 0; i < 3; i++) CK(cudaMemcpy(bs[i], h, bscales, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(as, h, ascales, cudaMemcpyHostToDevice));
          free(h);
        }
        CK(cudaMalloc(&c, (size_t)(m * n * 2)));
        size_t wsb = sk_gemm_workspace_bytes((sk_gemm_recipe)r, m, n, k);
        if (wsb) {
          CK(cudaMalloc(&ws, wsb));
          CK(cudaMemset(ws, 0, wsb));
        }
        int64_t acs[2] = {m, fp4 ? k / 2 : k}, bcs[2] = {n, fp4 ? k / 2 : k}, cs[2] = {m, n};
        int64_t ass[2] = {r == 3 ? m : (int64_t)ascales, k / 128}, bss[2] = {r == 3 ? (n + 127) / 128 : (int64_t)bscales, k / 128};
        DLDataType u8 = {kDLUInt, 8, 1}, f32 = {kDLFloat, 32, 1}, bf = {kDLBfloat, 16, 1};
        DLTensor ta = tu_device_tensor(a, u8, 2, acs), tas = tu_device_tensor(as, r == 3 ? f32 : u8, r == 3 ? 2 : 1, ass), tc = tu_device_tensor(c, bf, 2, cs);
        DLTensor tb[3], tbs[3];
        for (int i = 0; i < 3; i++) {
          tb[i] = tu_device_tensor(b[i], u8, 2, bcs);
          tbs[i] = tu_device_tensor(bs[i], r == 3 ? f32 : u8, r == 3 ? 2 : 1, bss);
        }
        mm_call_ctx ctx = {(sk_gemm_recipe)r, &ta, r == 4 ? NULL : &tas, tb, r == 4 ? NULL : tbs, &tc, ws, wsb, 0};
        int bad = 0;
        for (int i = 0; i < 6 && !bad; i++) bad = mm_call(&ctx, s);
        const double us = bad ? -1 : bench_stream_us(mm_call, &ctx, s, m > 16 ? 10 : 50, 5);
        const double graph_us = bad || m > 16 ? 0 : bench_graph_us(mm_call, &ctx, s, 50, 5);
        if (us < 0 || graph_us < 0)
          printf("| %s | %lld | %lld | %lld | error: %s |\n", names[r], (long long)m, (long long)n, (long long)k,
                 sk_last_error_message());
        else
          print_row(&json, names[r], m, n, k, (double)(bcodes + bscales + acodes + ascales) + (double)(m * n * 2), us,
                    graph_us);
        CK(cudaFree(a));
        if (as) CK(cudaFree(as));
        for (int i = 0; i < 3; i++) {
          CK(cudaFree(b[i]));
          if (bs[i]) CK(cudaFree(bs[i]));
        }
        CK(cudaFree(c));
        if (ws) CK(cudaFree(ws));
      }
  bench_mxfp8_linear(s, &rng, &json);
  bench_host_overhead(s, &rng, &json);
  bench_json_close(&json);
  return 0;
}
