/* bench_mhc - what bench_ops (every SKH_BENCH case of ops/norm/cases.c, timed in graph replay and
 * in a stream) does not measure for norm.mhc:
 *  - "% of same-size copy": each bench shape (post, pre, post_pre at H 2048 / 4096 / 7168, T 1 ..
 *    4096, bf16 norm weight) next to a cudaMemcpy moving the same bytes (bench_copy_us), graph time
 *    over graph time; bytes = every input read once + every output written once (the cases' cost);
 *  - "pre/2-launch", "post_pre/2-launch" rows for the T the fused decode launch takes by default:
 *    the same plan with SPARKINFER_MHC_FUSED_DECODE=0 (scalar partial + finalize);
 *  - SK_BENCH_SINKHORN=N: plans with N Sinkhorn rounds instead of 20 (what the finalize's comb
 *    costs).
 * Other knobs (SPARKINFER_MHC_SCALAR_MAX_T=0 / =16, _SPLIT_MIN_T, _STAGES ...) are read by the
 * plans: set them in the environment to compare variants. CUDA events around 100 calls after
 * warm-up, median of 7 rounds; random data. SK_BENCH_H=7168 SK_BENCH_T=1,4096 keep only those rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench_util.h"
#include "harness/harness.h"
#include "sparkinfer/norm.h"

/* Random device contents for a tensor: bf16 values in about [-2, 2]; fp32 small positives. */
static void *upload_random(const skh_tensor *t, unsigned seed) {
  const size_t n = t->bytes / 2;
  unsigned short *h = malloc(n * 2 + 2);
  if (!h) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  const int bf16 = t->dtype.code == kDLBfloat;
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    h[i] = bf16 ? (unsigned short)(0x3c00 + (seed >> 23) % 0x180) ^ (unsigned short)((seed >> 8) & 0x8000)
                : (unsigned short)((i & 1) ? 0x3c00 + (seed >> 24) % 0x80 : seed >> 16);
  }
  void *d;
  CK(cudaMalloc(&d, t->bytes ? t->bytes : 1));
  CK(cudaMemcpy(d, h, t->bytes, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static int mhc_call(void *ctx, cudaStream_t s) { return sk_run((const sk_binding *)ctx, s) != SK_OK; }

/* A plan of the case (under the environment's knobs), bound to the device tensors. */
static sk_plan *plan_of(const skh_op *op, const skh_case *c) {
  sk_plan *p;
  SK(skh_plan(op, c, NULL, &p));
  return p;
}

int main(void) {
  bench_json json = bench_json_open();
  bench_open_device();
  const skh_op *op = skh_find("norm.mhc");
  if (!op) {
    fprintf(stderr, "no norm.mhc case table\n");
    return 1;
  }
  const char *iters_env = getenv("SK_BENCH_SINKHORN");
  const int iters = iters_env && atoi(iters_env) > 0 ? atoi(iters_env) : 20;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* The largest call moves what post_pre moves at the largest H and T. */
  bench_copy_ref copy = bench_copy_ref_open(4096.0 * 7168 * 2 * 10 + 96.0 * 7168 * 4 + 7168 * 2.0 + 4096 * 160.0);
  printf("| entry | H | T | us/run | graph us/run | GB/s | %% of 4300 GB/s | copy graph us | %% of same-size copy (graph) |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < skh_case_count(op); i++) {
    skh_case c;
    skh_case_get(op, i, &c);
    if (!(c.flags & SKH_BENCH)) continue;
    sk_mhc_caps *caps = (sk_mhc_caps *)(void *)c.caps;
    const long long h = (long long)caps->hidden, t = (long long)c.sym[0].value;
    if (!bench_keep("SK_BENCH_H", h) || !bench_keep("SK_BENCH_T", t)) continue; /* quick sweeps */
    caps->sinkhorn_iters = iters;
    sk_plan *plan = plan_of(op, &c), *two_launch = NULL;
    skh_tensor ts[SKH_MAX_TENSORS];
    size_t n;
    char err[512];
    if (skh_tensors_for(op, &c, plan, ts, &n, err, sizeof err)) {
      fprintf(stderr, "%s: %s\n", c.name, err);
      return 1;
    }
    void *dev[SKH_MAX_TENSORS] = {0};
    DLTensor dl[SKH_MAX_TENSORS];
    const DLTensor *ptrs[SKH_MAX_TENSORS] = {0};
    for (size_t k = 0; k < n; k++) {
      if (!ts[k].present) continue;
      dev[k] = upload_random(&ts[k], 1 + (unsigned)k);
      dl[k] = tu_device_tensor(dev[k], ts[k].dtype, ts[k].ndim, ts[k].shape);
      ptrs[k] = &dl[k];
    }
    double bytes, flops;
    const char *metric;
    op->cost(&c, ts, n, &bytes, &flops, &metric);
    sk_scratch_spec spec;
    SK(sk_plan_scratch_spec(plan, &spec));
    void *scratch = NULL;
    if (spec.bytes) {
      CK(cudaMalloc(&scratch, spec.bytes));
      CK(cudaMemset(scratch, 0, spec.bytes)); /* once: the fused decode counters start at zero */
    }
    sk_binding *b;
    SK(sk_binding_create(plan, c.entry, &b));
    SK(sk_bind(b, ptrs, n, scratch, spec.bytes));
    int64_t fused = 0;
    SK(sk_binding_symbol(b, "FUSED", &fused));
    sk_binding *b2 = NULL;
    if (fused) { /* the same call in two launches; the knob is read at plan time */
      setenv("SPARKINFER_MHC_FUSED_DECODE", "0", 1);
      two_launch = plan_of(op, &c);
      unsetenv("SPARKINFER_MHC_FUSED_DECODE");
      SK(sk_binding_create(two_launch, c.entry, &b2));
      SK(sk_bind(b2, ptrs, n, scratch, spec.bytes));
    }
    for (int row = 0; row < (b2 ? 2 : 1); row++) {
      sk_binding *rb = row ? b2 : b;
      char name[32];
      snprintf(name, sizeof name, "%s%s", c.entry, row ? "/2-launch" : "");
      const double us = bench_stream_us(mhc_call, rb, s, 100, 7), graph_us = bench_graph_us(mhc_call, rb, s, 100, 7);
      if (us < 0 || graph_us < 0) {
        fprintf(stderr, "sk_run: %s\n", sk_last_error_message());
        return 1;
      }
      const double gbs = bytes / (us * 1e-6) / 1e9, copy_us = bench_copy_us(&copy, bytes, s, 100, 7);
      printf("| %s | %lld | %lld | %.2f | %.2f | %.0f | %.0f%% | %.2f | %.0f%% |\n", name, h, t, us, graph_us, gbs, gbs / 43,
             copy_us, copy_us / graph_us * 100);
      bench_json_row(&json,
                     "{\"entry\":\"%s\",\"h\":%lld,\"t\":%lld,\"sinkhorn_iters\":%d,\"us\":%.4f,\"graph_us\":%.4f,"
                     "\"gbs\":%.1f,\"copy_graph_us\":%.4f}",
                     name, h, t, iters, us, graph_us, gbs, copy_us);
    }
    sk_binding_destroy(b);
    sk_binding_destroy(b2);
    for (size_t k = 0; k < n; k++)
      if (dev[k]) CK(cudaFree(dev[k]));
    if (scratch) CK(cudaFree(scratch));
    skh_tensors_free(ts, n);
    sk_plan_destroy(plan);
    sk_plan_destroy(two_launch);
  }
  bench_copy_ref_close(&copy);
  bench_json_close(&json);
  return 0;
}
