/* bench_gemm - what the gemm ops add on the host per call. The kernels' device time is measured
 * by bench_ops (the harness's bench: every SKH_BENCH case of ops/gemm/cases.c, the shapes this
 * benchmark used to time, in graph replay and in a stream).
 *
 * Host microseconds per call of the same decode kernel (tensor_fp8, M = 1, N = K = 128: a kernel
 * far shorter than a host launch, so the queue never fills), launched three ways on one stream:
 *   sk_kernel_launch_ex   the kernel sk_gemm_describe names, its geometry, the flags mm uses
 *   sk_run                a bound gemm.blockscaled plan (what a server's decode loop calls)
 *   sk_gemm_mm            the one-shot convenience (shape checks, its plan cache, bind, run)
 * Median of 21 rounds of 2000 calls, the queue drained between rounds. One JSON row (SK_BENCH_JSON). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench_util.h"
#include "internal.h" /* sk_now_seconds: the runtime's monotonic clock, as bench_runtime uses */
#include "sparkinfer/gemm.h"
#include "sparkinfer/jit.h"

#define ROUNDS 21
#define CALLS 2000

static void *dev_random(size_t bytes, unsigned seed) {
  void *d;
  CK(cudaMalloc(&d, bytes));
  uint8_t *h = malloc(bytes);
  if (!h) exit(1);
  for (size_t i = 0; i < bytes; i++) h[i] = (uint8_t)((seed + i * 2654435761u) >> 13) & 0x77; /* finite E4M3 codes */
  CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

typedef struct way {
  const char *name;
  double us[ROUNDS];
} way;

int main(void) {
  bench_json json = bench_json_open();
  bench_open_device();
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t m = 1, n = 128, k = 128;
  void *a = dev_random((size_t)(m * k), 1), *b = dev_random((size_t)(n * k), 2), *c;
  CK(cudaMalloc(&c, (size_t)(m * n * 2)));
  int64_t as[2] = {m, k}, bsh[2] = {n, k}, cs[2] = {m, n};
  DLDataType u8 = {kDLUInt, 8, 1}, bf = {kDLBfloat, 16, 1};
  DLTensor ta = tu_device_tensor(a, u8, 2, as), tb = tu_device_tensor(b, u8, 2, bsh), tc = tu_device_tensor(c, bf, 2, cs);

  /* The kernel and grid mm launches here (a decode kernel; K = 128 is one step, so no tile is
   * split and no workspace is used). */
  sk_gemm_launch_info info;
  SK(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, m, n, k, NULL, &info));
  if (info.workspace_bytes != 0) {
    fprintf(stderr, "expected no workspace at K = 128\n");
    return 1;
  }
  const sk_kernel_request req = {"gemm.blockscaled", info.source, info.name, info.params, NULL, NULL, 0, 0};
  sk_kernel *kern;
  SK(sk_kernel_resolve(&req, &kern));

  /* The same kernel through a plan. */
  sk_gemm_caps caps = SK_GEMM_CAPS_INIT;
  caps.recipe = SK_GEMM_TENSOR_FP8;
  caps.n = n;
  caps.k = k;
  caps.max_m = m;
  sk_plan *plan;
  SK(sk_plan_create("gemm.blockscaled", &caps, &plan));
  sk_binding *binding;
  SK(sk_binding_create(plan, "mm", &binding));
  const DLTensor *tensors[6] = {&ta, NULL, &tb, NULL, NULL, &tc};
  SK(sk_bind(binding, tensors, 6, NULL, 0));
  int64_t regime = -1;
  SK(sk_binding_symbol(binding, "REGIME", &regime));
  if (sk_plan_kernel(plan, (size_t)regime) != kern) {
    fprintf(stderr, "the plan launches another kernel than describe names (%s)\n", info.name);
    return 1;
  }
  SK(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &ta, NULL, &tb, NULL, NULL, &tc, NULL, 0, s)); /* its plan, cached */
  CK(cudaStreamSynchronize(s));

  const void *ac = a, *bc = b, *nul = NULL;
  void *cp = c, *partials = NULL, *counters = NULL;
  int mi = (int)m, ni = (int)n, ki = (int)k, ldc = (int)n;
  void *args[] = {(void *)&ac, (void *)&nul, (void *)&bc, (void *)&nul, (void *)&nul, &cp, &mi, &ni, &ki, &ldc, &partials, &counters};
  way ways[3] = {{"sk_kernel_launch_ex", {0}}, {"sk_run (bound plan)", {0}}, {"sk_gemm_mm (one-shot)", {0}}};
  int bad = 0;
  for (int rep = 0; rep < ROUNDS; rep++) {
    for (int w = 0; w < 3; w++) {
      const double t0 = sk_now_seconds();
      for (int i = 0; i < CALLS; i++) {
        sk_status st;
        if (w == 0) /* launched as mm launches it: overlapped with the previous kernel */
          st = sk_kernel_launch_ex(kern, info.grid, info.block, info.smem_bytes, s, args, SK_LAUNCH_OVERLAP_PREVIOUS);
        else if (w == 1) st = sk_run(binding, s);
        else st = sk_gemm_mm(SK_GEMM_TENSOR_FP8, &ta, NULL, &tb, NULL, NULL, &tc, NULL, 0, s);
        bad |= st != SK_OK;
      }
      ways[w].us[rep] = (sk_now_seconds() - t0) * 1e6 / CALLS;
      CK(cudaStreamSynchronize(s));
    }
  }
  CK(cudaGetLastError());
  if (bad) {
    fprintf(stderr, "a call failed: %s\n", sk_last_error_message());
    return 1;
  }
  for (int w = 0; w < 3; w++) qsort(ways[w].us, ROUNDS, sizeof(double), bench_cmp_double);
  const double launch = ways[0].us[ROUNDS / 2], run = ways[1].us[ROUNDS / 2], mm = ways[2].us[ROUNDS / 2];
  printf("| host time per call (tensor_fp8, M = 1, 128x128: %s, %u CTAs) | us | over the launch |\n|---|---|---|\n", info.name,
         info.grid.x);
  for (int w = 0; w < 3; w++)
    printf("| %s | %.3f | %+.3f |\n", ways[w].name, ways[w].us[ROUNDS / 2], ways[w].us[ROUNDS / 2] - launch);
  bench_json_row(&json, "{\"kernel\":\"%s\",\"host_launch_us\":%.3f,\"host_run_us\":%.3f,\"host_mm_us\":%.3f}", info.name, launch,
                 run, mm);
  sk_binding_destroy(binding);
  sk_plan_destroy(plan);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
  CK(cudaStreamDestroy(s));
  bench_json_close(&json);
  return 0;
}
