/* bench_quant - achieved bandwidth of quantization.nvfp4 and quantization.mxfp8 (BF16 input,
 * swizzled scales) for M in {1, 16, 128, 4096, 16384}, K in {2048, 4096, 7168}.
 * Bytes = input read once + values + scales written. Times: CUDA events around 100 launches
 * after warm-up, median of 7 such rounds (GB/s from these); "graph" replays the same 100
 * launches from a CUDA graph, the GPU time without the host's launch cost. Inputs are random normal data (never zeros).
 * "% of copy": of the one 4300 GB/s figure (the goal's); "% of same-size copy": the graph time of
 * a cudaMemcpy moving the same bytes (bench_copy_us) over the op's graph time.
 * SK_BENCH_M=16384 SK_BENCH_K=7168 keep only those rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench_util.h"

#include "common/ref.h"
#include "sparkinfer/quantization.h"




typedef struct quant_call_ctx {
  const sk_quant_plan *plan;
  const sk_binding *binding;
} quant_call_ctx;
static int quant_call(void *ctx, cudaStream_t s) {
  const quant_call_ctx *c = ctx;
  return sk_quant_run(c->plan, c->binding, s) != SK_OK;
}

int main(void) {
  bench_json json = bench_json_open();
  bench_open_device();
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
  bench_copy_ref copy = bench_copy_ref_open((double)maxm * maxk * 2 + (double)n + (double)sk_swizzled_scale_bytes(maxm, maxk / 16));
  printf("| op | M | K | us/launch | graph us/launch | GB/s | %% of 4300 GB/s | copy graph us | %% of same-size copy (graph) |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
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
        quant_call_ctx ctx = {p, &b};
        const double us = bench_stream_us(quant_call, &ctx, s, 100, 7), graph_us = bench_graph_us(quant_call, &ctx, s, 100, 7);
        if (us < 0 || graph_us < 0) {
          fprintf(stderr, "sk_quant_run: %s\n", sk_last_error_message());
          return 1;
        }
        double bytes = (double)m * k * 2 + (op == 0 ? m * k / 2.0 : (double)m * k) + (double)ss[0];
        double gbs = bytes / (us * 1e-6) / 1e9;
        const double copy_us = bench_copy_us(&copy, bytes, s, 100, 7);
        const char *name = op == 0 ? "nvfp4" : "mxfp8";
        printf("| %s | %lld | %lld | %.2f | %.2f | %.0f | %.0f%% | %.2f | %.0f%% |\n", name, (long long)m, (long long)k, us,
               graph_us, gbs, gbs / 4300 * 100, copy_us, copy_us / graph_us * 100);
        bench_json_row(&json,
                       "{\"op\":\"%s\",\"m\":%lld,\"k\":%lld,\"us\":%.4f,\"graph_us\":%.4f,\"gbs\":%.1f,\"copy_graph_us\":%.4f}",
                       name, (long long)m, (long long)k, us, graph_us, gbs, copy_us);
        sk_quant_plan_destroy(p);
      }
  bench_copy_ref_close(&copy);
  bench_json_close(&json);
  return 0;
}
