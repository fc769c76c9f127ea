/* bench_quant - achieved bandwidth of quantization.nvfp4 and quantization.mxfp8 (BF16 input,
 * swizzled scales) for M in {1, 16, 128, 4096, 16384}, K in {2048, 4096, 7168}.
 * Bytes = input read once + values + scales written. Times: CUDA events around 100 launches
 * after warm-up, median of 7 such rounds. Inputs are random normal data (never zeros).
 * SK_BENCH_M=16384 SK_BENCH_K=7168 keep only those rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench_util.h"

#include "ref/skref.h"
#include "sparkinfer/quantization.h"




int main(void) {
  bench_json json = bench_json_open();
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  const int64_t msz[] = {1, 16, 128, 4096, 16384}, ksz[] = {2048, 4096, 7168};
  const int64_t maxm = 16384, maxk = 7168;
  void *dx, *dv, *ds, *dg, *scratch;
  size_t n = (size_t)(maxm * maxk);
  CK(cudaMalloc(&dx, n * 2));
  CK(cudaMalloc(&dv, n));
  CK(cudaMalloc(&ds, sk_swizzled_scale_bytes(maxm, maxk / 16)));
  CK(cudaMalloc(&dg, 4));
  CK(cudaMalloc(&scratch, 1 << 16));
  uint16_t *hx = malloc(n * 2);
  skref_rng rng;
  skref_rng_seed(&rng, 1234);
  skref_fill_normal(&rng, hx, n, SKREF_BF16, 1.0f, 0.001, 50.0f);
  CK(cudaMemcpy(dx, hx, n * 2, cudaMemcpyHostToDevice));
  float gs = 100.0f;
  CK(cudaMemcpy(dg, &gs, 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("| op | M | K | us/launch | GB/s | %% of 4300 GB/s |\n|---|---|---|---|---|---|\n");
  for (int op = 0; op < 2; op++)
    for (size_t ki = 0; ki < 3; ki++)
      for (size_t mi = 0; mi < 5; mi++) {
        int64_t m = msz[mi], k = ksz[ki];
        if (!bench_keep("SK_BENCH_M", m) || !bench_keep("SK_BENCH_K", k)) continue; /* quick sweeps */
        sk_quant_caps caps = {SK_DTYPE_BF16, k, m, SK_SCALES_SWIZZLED, SK_GLOBAL_SCALE_GIVEN, SK_PATH_AUTO, NULL};
        sk_quant_plan *p;
        SK(op == 0 ? sk_nvfp4_plan_create(&caps, &p) : sk_mxfp8_plan_create(&caps, &p));
        int64_t xs[2] = {m, k}, vs[2] = {m, op == 0 ? k / 2 : k}, ss[1] = {(int64_t)sk_swizzled_scale_bytes(m, k / (op ? 32 : 16))},
                gss[1] = {1};
        DLTensor tx = tu_device_tensor(dx, (DLDataType){kDLBfloat, 16, 1}, 2, xs), tv = tu_device_tensor(dv, (DLDataType){kDLUInt, 8, 1}, 2, vs),
                 ts = tu_device_tensor(ds, (DLDataType){kDLUInt, 8, 1}, 1, ss), tg = tu_device_tensor(dg, (DLDataType){kDLFloat, 32, 1}, 1, gss);
        sk_binding b;
        if (op == 0) SK(sk_nvfp4_bind(p, &tx, &tv, &ts, NULL, &tg, scratch, 1 << 16, &b));
        else SK(sk_mxfp8_bind(p, &tx, &tv, &ts, NULL, NULL, 0, &b));
        for (int i = 0; i < 20; i++) SK(sk_quant_run(p, &b, s));
        float rounds[7];
        const int reps = 100;
        for (int r = 0; r < 7; r++) {
          CK(cudaEventRecord(e0, s));
          for (int i = 0; i < reps; i++) SK(sk_quant_run(p, &b, s));
          CK(cudaEventRecord(e1, s));
          CK(cudaEventSynchronize(e1));
          CK(cudaEventElapsedTime(&rounds[r], e0, e1));
        }
        CK(cudaGetLastError());
        qsort(rounds, 7, sizeof(float), bench_cmp_float);
        double us = rounds[3] * 1e3 / reps;
        double bytes = (double)m * k * 2 + (op == 0 ? m * k / 2.0 : (double)m * k) + (double)ss[0];
        double gbs = bytes / (us * 1e-6) / 1e9;
        const char *name = op == 0 ? "nvfp4" : "mxfp8";
        printf("| %s | %lld | %lld | %.2f | %.0f | %.0f%% |\n", name, (long long)m, (long long)k, us, gbs, gbs / 4300 * 100);
        bench_json_row(&json, "{\"op\":\"%s\",\"m\":%lld,\"k\":%lld,\"us\":%.4f,\"gbs\":%.1f}", name, (long long)m,
                       (long long)k, us, gbs);
        sk_quant_plan_destroy(p);
      }
  bench_json_close(&json);
  return 0;
}
