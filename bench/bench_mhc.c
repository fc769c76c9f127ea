/* bench_mhc - norm.mhc achieved bandwidth for run_post, run_pre, run_post_pre at hidden 2048,
 * 4096, 7168 and T in {1, 8, 16, 128, 256, 512, 1024, 4096} (8: the largest T on the scalar partial kernels by
 * default; SPARKINFER_MHC_SCALAR_MAX_T=0 / =16 move the crossover to compare both variants).
 * Bytes = every input read once + every output written once. CUDA events around 100 runs after
 * warm-up, median of 7 rounds (GB/s from these; "graph": the same 100 runs replayed from a CUDA
 * graph, GPU time without the host's launch cost); random data. SK_BENCH_H=7168 SK_BENCH_T=1,4096 keep only those rows.
 * For T <= 8, "pre/2-launch" and "post_pre/2-launch" rows time the same entry points with
 * SPARKINFER_MHC_FUSED_DECODE=0 (scalar partial + finalize) next to the fused decode launch.
 * SK_BENCH_SINKHORN=N plans N Sinkhorn rounds instead of 20 (how much the finalize's comb costs).
 * "% of same-size copy": a cudaMemcpy moving the same bytes (bench_copy_us), its graph time over
 * the entry's graph time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench_util.h"

#include "sparkinfer/norm.h"


static void *rand_dev(size_t bytes, unsigned seed, int bf16) {
  void *d;
  CK(cudaMalloc(&d, bytes));
  unsigned short *h = malloc(bytes);
  for (size_t i = 0; i < bytes / 2; i++) {
    seed = seed * 1664525u + 1013904223u;
    /* bf16: random values in about [-2, 2]; fp32 (pairs of halves): small positives */
    h[i] = bf16 ? (unsigned short)(0x3c00 + (seed >> 23) % 0x180) ^ (unsigned short)((seed >> 8) & 0x8000)
                : (unsigned short)((i & 1) ? 0x3c00 + (seed >> 24) % 0x80 : seed >> 16);
  }
  CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

typedef struct mhc_call_ctx {
  const sk_mhc_plan *plan;
  const sk_binding *binding;
} mhc_call_ctx;
static int mhc_call(void *ctx, cudaStream_t s) {
  const mhc_call_ctx *c = ctx;
  return sk_mhc_run(c->plan, c->binding, s) != SK_OK;
}

int main(void) {
  bench_json json = bench_json_open();
  bench_open_device();
  const int hs[] = {2048, 4096, 7168}, ts[] = {1, 8, 16, 128, 256, 512, 1024, 4096};
  DLDataType bf = {kDLBfloat, 16, 1}, f32 = {kDLFloat, 32, 1};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* The largest call moves what post_pre moves at the largest H and T. */
  bench_copy_ref copy = bench_copy_ref_open(4096.0 * 7168 * 2 * 10 + 96.0 * 7168 * 4 + 7168 * 2.0 + 4096 * 160.0);
  printf("| entry | H | T | us/run | graph us/run | GB/s | %% of 4300 GB/s | copy graph us | %% of same-size copy (graph) |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  for (int hi = 0; hi < 3; hi++)
    for (int ti = 0; ti < (int)(sizeof ts / sizeof ts[0]); ti++) {
      const int64_t h = hs[hi], t = ts[ti];
      if (!bench_keep("SK_BENCH_H", h) || !bench_keep("SK_BENCH_T", t)) continue; /* quick sweeps */
      const char *iters_env = getenv("SK_BENCH_SINKHORN");
      const int iters = iters_env && atoi(iters_env) > 0 ? atoi(iters_env) : 20;
      sk_mhc_caps caps = {h, t, SK_MHC_NORM_BF16, iters, 1e-6f, 1e-6f, 1e-6f, NULL};
      sk_mhc_plan *p, *two_launch = NULL;
      SK(sk_mhc_plan_create(&caps, &p));
      if (t <= 8) { /* the knob is read at plan time */
        setenv("SPARKINFER_MHC_FUSED_DECODE", "0", 1);
        SK(sk_mhc_plan_create(&caps, &two_launch));
        unsetenv("SPARKINFER_MHC_FUSED_DECODE");
      }
      sk_scratch_spec spec;
      SK(sk_mhc_scratch_spec(p, &spec));
      void *scratch, *x = rand_dev(t * h * 2, 1, 1), *res = rand_dev(4 * t * h * 2, 2, 1), *w = rand_dev(h * 2, 3, 1),
           *fn = rand_dev(96 * h * 4, 4, 0), *fnp = rand_dev(24 * h * 4, 5, 0), *pp = rand_dev(t * 16, 6, 0),
           *pc = rand_dev(t * 64, 7, 0), *sc = rand_dev(16, 8, 0), *ba = rand_dev(96, 9, 0), *ro, *y, *po, *co;
      CK(cudaMalloc(&scratch, spec.bytes));
      CK(cudaMemset(scratch, 0, spec.bytes)); /* once: the fused decode counters start at zero */
      CK(cudaMalloc(&ro, 4 * t * h * 2));
      CK(cudaMalloc(&y, t * h * 2));
      CK(cudaMalloc(&po, t * 16));
      CK(cudaMalloc(&co, t * 64));
      int64_t sx[2] = {t, h}, sr[3] = {t, 4, h}, sp[2] = {t, 4}, scb[3] = {t, 4, 4}, sfn[2] = {24, 4 * h}, sfnp[2] = {24, h},
              s3[1] = {3}, s24[1] = {24}, sw[1] = {h};
      DLTensor tx = tu_device_tensor(x, bf, 2, sx), tres = tu_device_tensor(res, bf, 3, sr), tw = tu_device_tensor(w, bf, 1, sw), tfn = tu_device_tensor(fn, f32, 2, sfn),
               tfnp = tu_device_tensor(fnp, f32, 2, sfnp), tpp = tu_device_tensor(pp, f32, 2, sp), tpc = tu_device_tensor(pc, f32, 3, scb), tsc = tu_device_tensor(sc, f32, 1, s3),
               tba = tu_device_tensor(ba, f32, 1, s24), tro = tu_device_tensor(ro, bf, 3, sr), ty = tu_device_tensor(y, bf, 2, sx), tpo = tu_device_tensor(po, f32, 2, sp),
               tco = tu_device_tensor(co, f32, 3, scb);
      for (int row = 0; row < (two_launch ? 5 : 3); row++) {
        const int entry = row < 3 ? row : row - 2; /* rows 3, 4: pre, post_pre on two_launch */
        const sk_mhc_plan *plan = row < 3 ? p : two_launch;
        sk_binding b;
        double bytes;
        const char *name;
        if (entry == 0) {
          SK(sk_mhc_bind_post(p, &tx, &tres, &tpp, &tpc, &tro, &b));
          bytes = t * h * 2.0 + 2 * 4.0 * t * h * 2 + t * 80.0;
          name = "post";
        } else if (entry == 1) {
          SK(sk_mhc_bind_pre(plan, &tx, &tfnp, &tsc, &tba, &tw, &tro, &ty, &tpo, &tco, scratch, spec.bytes, &b));
          bytes = t * h * 2.0 + 24.0 * h * 4 + h * 2.0 + 4.0 * t * h * 2 + t * h * 2.0 + t * 80.0;
          name = row < 3 ? "pre" : "pre/2-launch";
        } else {
          SK(sk_mhc_bind_post_pre(plan, &tx, &tres, &tpp, &tpc, &tfn, &tsc, &tba, &tw, &tro, &ty, &tpo, &tco, scratch,
                                  spec.bytes, &b));
          bytes = t * h * 2.0 + 4.0 * t * h * 2 + 96.0 * h * 4 + h * 2.0 + 4.0 * t * h * 2 + t * h * 2.0 + t * 160.0;
          name = row < 3 ? "post_pre" : "post_pre/2-launch";
        }
        mhc_call_ctx ctx = {plan, &b};
        const double us = bench_stream_us(mhc_call, &ctx, s, 100, 7), graph_us = bench_graph_us(mhc_call, &ctx, s, 100, 7);
        if (us < 0 || graph_us < 0) {
          fprintf(stderr, "sk_mhc_run: %s\n", sk_last_error_message());
          return 1;
        }
        const double gbs = bytes / (us * 1e-6) / 1e9;
        const double copy_us = bench_copy_us(&copy, bytes, s, 100, 7);
        printf("| %s | %lld | %lld | %.2f | %.2f | %.0f | %.0f%% | %.2f | %.0f%% |\n", name, (long long)h, (long long)t, us,
               graph_us, gbs, gbs / 43, copy_us, copy_us / graph_us * 100);
        bench_json_row(&json,
                       "{\"entry\":\"%s\",\"h\":%lld,\"t\":%lld,\"us\":%.4f,\"graph_us\":%.4f,\"gbs\":%.1f,\"copy_graph_us\":%.4f}",
                       name, (long long)h, (long long)t, us, graph_us, gbs, copy_us);
      }
      void *all[] = {scratch, x, res, w, fn, fnp, pp, pc, sc, ba, ro, y, po, co};
      for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CK(cudaFree(all[i]));
      sk_mhc_plan_destroy(p);
      sk_mhc_plan_destroy(two_launch);
    }
  bench_copy_ref_close(&copy);
  bench_json_close(&json);
  return 0;
}
