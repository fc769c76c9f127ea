/* bench_mma_peak - the tensor-core ceiling of warp-level mma.sync on the GPU at hand.
 * A register-only kernel (ops/test/mma_peak.cuh) issues independent MMAs from every warp;
 * TFLOP/s = 2*M*N*K per MMA. This is the denominator for the portable prefill GEMM: on sm_90 it
 * is what mma.sync can reach at best (cuBLASLt uses wgmma, which mma.sync cannot issue), and it
 * shows that ptxas emulates e4m3 mma.sync on sm_90. Median of 5 rounds (CUDA events). */
#include <stdio.h>

#include "bench_util.h"
#include "sparkinfer/jit.h"

int main(void) {
  bench_json json = bench_json_open();
  const int sms = bench_open_device();
  const char *kinds[] = {"f16 m16n8k16", "bf16 m16n8k16", "e4m3 m16n8k32"};
  const double flop_per_mma[] = {2.0 * 16 * 8 * 16, 2.0 * 16 * 8 * 16, 2.0 * 16 * 8 * 32};
  enum { kIters = 4096, kChains = 8, kThreads = 256, kBlocksPerSm = 4 };
  const unsigned blocks = (unsigned)(sms * kBlocksPerSm);
  float *out;
  CK(cudaMalloc((void **)&out, (size_t)blocks * kThreads * sizeof(float)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("| mma.sync kind | TFLOP/s (median of 5) | grid |\n|---|---|---|\n");
  for (int kind = 0; kind < 3; kind++) {
    char name[64];
    snprintf(name, sizeof name, "sk_test::mma_peak<%d, %d>", kind, kIters);
    sk_kernel_request req = {"test.mma_peak", "test/mma_peak.cuh", name, kinds[kind], NULL, NULL, 0, 0};
    sk_kernel *k;
    SK(sk_kernel_resolve(&req, &k));
    unsigned seed = 0x9e3779b9u;
    void *args[] = {&out, &seed};
    SK(sk_kernel_launch(k, (sk_dim3){blocks, 1, 1}, (sk_dim3){kThreads, 1, 1}, 0, NULL, args)); /* warm-up */
    CK(cudaDeviceSynchronize());
    float ms[5];
    for (int r = 0; r < 5; r++) {
      CK(cudaEventRecord(e0, NULL));
      SK(sk_kernel_launch(k, (sk_dim3){blocks, 1, 1}, (sk_dim3){kThreads, 1, 1}, 0, NULL, args));
      CK(cudaEventRecord(e1, NULL));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    CK(cudaGetLastError());
    qsort(ms, 5, sizeof(float), bench_cmp_float);
    const double mmas = (double)blocks * (kThreads / 32) * kIters * kChains;
    const double tflops = mmas * flop_per_mma[kind] / (ms[2] * 1e-3) / 1e12;
    printf("| %s | %.1f | %u x %d |\n", kinds[kind], tflops, blocks, kThreads);
    bench_json_row(&json, "{\"kind\":\"%s\",\"tflops\":%.2f}", kinds[kind], tflops);
  }
  bench_json_close(&json);
  CK(cudaFree(out));
  return 0;
}
