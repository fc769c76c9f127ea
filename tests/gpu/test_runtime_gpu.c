/* Runtime spine on a GPU: resolve + launch with correct output; launch inside CUDA graph capture
 * after a freeze; replays equal eager results. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "gpu_util.h"
#include "sparkinfer.h"
#include "sparkinfer/jit.h"
#include "testutil.h"

static char *dir;
static void setup(void) {
  dir = tu_tempdir("gpu");
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(0)); /* create the primary context so sparkinfer shares it */
}
static void teardown(void) { tu_rmrf(dir); free(dir); }

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return ((float)(*s >> 8) / 16777216.0f) * 4.0f - 2.0f;
}

Test(gpu_runtime, resolve_and_launch_scale_kernel, .init = setup, .fini = teardown) {
  const int n = 1 << 20 | 123; /* not a multiple of the block */
  unsigned seed = (unsigned)time(NULL);
  float *hx = malloc(n * sizeof(float)), *hy = malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) hx[i] = frand(&seed);
  float *dx = gpu_upload(hx, n * sizeof(float)), *dy = gpu_poisoned(n * sizeof(float)); /* NaN everywhere */
  sk_kernel_request r = {"test.scale", "test/scale.cuh", "sk_test::scale<float, 256>", "dtype=f32", NULL, NULL, 0, 0};
  sk_kernel *k;
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &k));
  float a = 1.5f, b = -0.25f;
  void *args[] = {&dx, &dy, &a, &b, (void *)&n};
  SK_OK_OR_FAIL(sk_kernel_launch(k, (sk_dim3){(n + 255) / 256, 1, 1}, (sk_dim3){256, 1, 1}, 0, NULL, args));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    double ref = (double)hx[i] * a + b;
    cr_assert(fabs(hy[i] - ref) <= 1e-6 * (1 + fabs(ref)), "seed %u: y[%d] = %g, want %g", seed, i, hy[i], ref);
  }
  /* Unknown launch flags are refused before anything is launched. */
  cr_assert_eq(sk_kernel_launch_ex(k, (sk_dim3){1, 1, 1}, (sk_dim3){32, 1, 1}, 0, NULL, args, 0x80u),
               SK_ERR_INVALID_ARGUMENT);
  /* A memory hit returns the same handle. */
  sk_kernel *k2;
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &k2));
  cr_assert_eq(k, k2);
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(dy));
  free(hx);
  free(hy);
}

Test(gpu_runtime, graph_capture_after_freeze, .init = setup, .fini = teardown) {
  const int n = 4096 * 33;
  unsigned seed = (unsigned)time(NULL) ^ 77u;
  float *hx = malloc(n * sizeof(float)), *eager = malloc(n * sizeof(float)), *replay = malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) hx[i] = frand(&seed);
  float *dx = gpu_upload(hx, n * sizeof(float)), *dy; /* gpu_upload waits: the stream below is non-blocking */
  CUDA_OK(cudaMalloc((void **)&dy, n * sizeof(float)));
  sk_kernel_request r = {"test.scale", "test/scale.cuh", "sk_test::scale<float, 128>", "dtype=f32", NULL, NULL, 0, 0};
  sk_kernel *k;
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &k)); /* warm-up */
  SK_OK_OR_FAIL(sk_freeze_kernel_resolution("graph test"));
  /* Frozen: a new shape is refused; the warmed one resolves from memory. */
  sk_kernel_request cold = r;
  cold.name_expr = "sk_test::scale<float, 64>";
  sk_kernel *kc;
  cr_assert_eq(sk_kernel_resolve(&cold, &kc), SK_ERR_KERNEL_RESOLUTION_FROZEN);
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &k));
  float a = -0.75f, b = 3.0f;
  void *args[] = {&dx, &dy, &a, &b, (void *)&n};
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMemsetAsync(dy, 0xff, n * sizeof(float), s));
  SK_OK_OR_FAIL(sk_kernel_launch(k, (sk_dim3){(n + 127) / 128, 1, 1}, (sk_dim3){128, 1, 1}, 0, s, args));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpy(eager, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &k)); /* a memory hit is legal during capture */
  SK_OK_OR_FAIL(sk_kernel_launch(k, (sk_dim3){(n + 127) / 128, 1, 1}, (sk_dim3){128, 1, 1}, 0, s, args));
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 3; rep++) {
    CUDA_OK(cudaMemsetAsync(dy, 0xff, n * sizeof(float), s));
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(replay, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    cr_assert_eq(memcmp(eager, replay, n * sizeof(float)), 0, "replay %d differs from eager", rep);
  }
  for (int i = 0; i < n; i++) cr_assert(fabs(eager[i] - ((double)hx[i] * a + b)) < 1e-5, "y[%d]", i);
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(dy));
  free(hx); free(eager); free(replay);
}

Test(gpu_runtime, timing_summary_counts_launches, .init = setup, .fini = teardown) {
  setenv("SPARKINFER_TIMING", "1", 1);
  sk_kernel_request r = {"test.empty", "test/scale.cuh", "sk_test::empty<5>", "", NULL, NULL, 0, 0};
  sk_kernel *k;
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &k));
  for (int i = 0; i < 50; i++) SK_OK_OR_FAIL(sk_kernel_launch(k, (sk_dim3){1, 1, 1}, (sk_dim3){32, 1, 1}, 0, NULL, NULL));
  sk_timing_entry e[4];
  size_t n = 0;
  SK_OK_OR_FAIL(sk_timing_summary(e, 4, &n));
  cr_assert_eq(n, 1u);
  cr_assert_eq(e[0].count, 50u);
  cr_assert(e[0].p50_us > 0 && e[0].p99_us >= e[0].p50_us);
}
