/* bench_ops - the harness's benchmark (tests/harness/harness.h): every SKH_BENCH case of every op
 * (or those named: bench_ops [--op NAME]... [--filter TEXT]) is planned, bound to random inputs
 * and timed two ways: "graph" replays 20 runs captured in one CUDA graph (the GPU time a server
 * replaying graphs sees), "stream" launches 100 runs back to back (includes the host's launch cost
 * where it exceeds the GPU's). Medians of 7 rounds. The figure is the case's cost model over the
 * graph time: GB/s for bandwidth-bound cases, TFLOP/s otherwise. Rooflines:
 *   GB/s     the large-copy rate measured at start (a 512 MiB device-to-device copy, read + write),
 *            and for each case a same-size copy (bench_copy_us), whose ratio is "% of copy size";
 *   TFLOP/s  the GPU's dense tensor peak for the metric's type (spec sheet; Hopper has no FP4
 *            tensor cores, so "TFLOP/s fp4" takes the FP8 peak there).
 * SK_BENCH_JSON=FILE writes one JSON object per line (op, case, us, stream_us, metric, value,
 * roofline, pct, copy_us, gpu, date, commit) for bench/results.py. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "bench_util.h"
#include "harness/harness.h"
#include "sparkinfer/op.h"

#ifndef SK_GIT_COMMIT
#define SK_GIT_COMMIT "unknown"
#endif

typedef struct run_ctx {
  const sk_binding *b;
} run_ctx;
static int run_call(void *ctx, cudaStream_t s) { return sk_run(((run_ctx *)ctx)->b, s) != SK_OK; }

/* Dense tensor peaks (TFLOP/s, spec sheets) by GPU name and metric. */
static double tensor_peak(const char *gpu, const char *metric) {
  const bool fp8 = strstr(metric, "fp8") || strstr(metric, "fp4");
  static const struct {
    const char *name;
    double bf16, fp8;
  } peaks[] = {{"H200", 989.4, 1978.9}, {"H100", 989.4, 1978.9}, {"RTX 5090", 209.5, 419.0},
               {"RTX PRO 6000", 251.9, 503.8}, {"GB10", 62.5, 125.0}};
  for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
    if (strstr(gpu, peaks[i].name)) return fp8 ? peaks[i].fp8 : peaks[i].bf16;
  return 0;
}

static bool selected(const char *op, int argc, char **argv) {
  bool any = false;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--op")) {
      any = true;
      if (!strcmp(argv[i + 1], op)) return true;
    }
  return !any;
}

static const char *filter_of(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--filter")) return argv[i + 1];
  return getenv("SK_BENCH_FILTER");
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: bench_ops [--op NAME]... [--filter TEXT]\n"
             "Times every SKH_BENCH case of the op case tables (ops/<group>/cases.c) on GPU 0.\n"
             "SK_BENCH_JSON=FILE writes JSON lines for bench/results.py; SK_BENCH_FILTER=TEXT as --filter.\n");
      return 0;
    }
  bench_open_device();
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  char date[16];
  const time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  const char *json_path = getenv("SK_BENCH_JSON");
  FILE *json = json_path ? fopen(json_path, "w") : NULL;
  if (json) setvbuf(json, NULL, _IOLBF, 0); /* a row per line survives a timeout that kills the run */
  if (json_path && !json) fprintf(stderr, "SK_BENCH_JSON=%s: cannot write it; no JSON\n", json_path);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* The large-copy rate: the GB/s roofline. */
  const double big = 1024.0 * 1024 * 1024;
  bench_copy_ref copy = bench_copy_ref_open(big);
  const double copy_gbs = big / (bench_copy_us(&copy, big, s, 4, 7) * 1e-6) / 1e9;
  printf("GPU %s, copy %.0f GB/s (512 MiB device-to-device, read + write), commit %s\n\n", prop.name, copy_gbs, SK_GIT_COMMIT);
  printf("| op | case | graph us | stream us | figure | %% of roofline | %% of same-size copy |\n|---|---|---|---|---|---|---|\n");
  const char *filter = filter_of(argc, argv);
  int status = 0;
  for (size_t o = 0; o < skh_op_count(); o++) {
    const skh_op *op = skh_op_at(o);
    if (!selected(op->op, argc, argv) || !op->cost) continue;
    for (size_t i = 0; i < skh_case_count(op); i++) {
      skh_case c;
      skh_case_get(op, i, &c);
      if (!(c.flags & SKH_BENCH) || (filter && !strstr(c.name, filter))) continue;
      sk_plan *plan;
      skh_tensor t[SKH_MAX_TENSORS];
      size_t n = 0;
      char err[512];
      const sk_status ps = skh_case_open(op, &c, NULL, 0, &plan, t, &n, err, sizeof err);
      if (ps == SK_ERR_UNSUPPORTED) continue;
      if (ps != SK_OK) {
        fprintf(stderr, "%s\n", err);
        status = 1;
        continue;
      }
      skref_rng rng;
      skref_rng_seed(&rng, 0x5eed + i);
      op->fill(&c, t, n, &rng);
      void *d[SKH_MAX_TENSORS] = {0};
      DLTensor dl[SKH_MAX_TENSORS];
      const DLTensor *ptrs[SKH_MAX_TENSORS] = {0};
      for (size_t k = 0; k < n; k++) {
        if (!t[k].present) continue;
        CK(cudaMalloc(&d[k], t[k].bytes ? t[k].bytes : 1));
        if (t[k].role == SK_TENSOR_OUT) CK(cudaMemset(d[k], 0, t[k].bytes));
        else CK(cudaMemcpy(d[k], t[k].host, t[k].bytes, cudaMemcpyHostToDevice));
        dl[k] = (DLTensor){d[k], {kDLCUDA, 0}, t[k].ndim, t[k].dtype, t[k].shape, t[k].strided ? t[k].strides : NULL, 0};
        ptrs[k] = &dl[k];
      }
      sk_scratch_spec spec;
      SK(sk_plan_scratch_spec(plan, &spec));
      void *scratch = NULL;
      if (spec.bytes) {
        CK(cudaMalloc(&scratch, spec.bytes));
        CK(cudaMemset(scratch, 0, spec.bytes));
      }
      CK(cudaDeviceSynchronize());
      sk_binding *b;
      SK(sk_binding_create(plan, c.entry, &b));
      if (sk_bind(b, ptrs, n, scratch, spec.bytes) != SK_OK) {
        fprintf(stderr, "%s [%s]: bind: %s\n", op->op, c.name, sk_last_error_message());
        status = 1;
      } else {
        run_ctx ctx = {b};
        const double graph_us = bench_graph_us(run_call, &ctx, s, 20, 7);
        const double stream_us = bench_stream_us(run_call, &ctx, s, 100, 7);
        double bytes = 0, flops = 0;
        const char *metric = "GB/s";
        op->cost(&c, t, n, &bytes, &flops, &metric);
        const bool bw = !strncmp(metric, "GB/s", 4);
        const double value = bw ? bytes / (graph_us * 1e-6) / 1e9 : flops / (graph_us * 1e-6) / 1e12;
        const double roof = bw ? copy_gbs : tensor_peak(prop.name, metric);
        const double copy_us = bw && bytes <= big ? bench_copy_us(&copy, bytes, s, 20, 7) : 0;
        if (graph_us < 0 || stream_us < 0) {
          fprintf(stderr, "%s [%s]: run failed: %s\n", op->op, c.name, sk_last_error_message());
          status = 1;
        } else {
          char pct[32] = "-", cpct[32] = "-";
          if (roof > 0) snprintf(pct, sizeof pct, "%.0f%%", 100 * value / roof);
          if (copy_us > 0) snprintf(cpct, sizeof cpct, "%.0f%%", 100 * copy_us / graph_us);
          printf("| %s | %s | %.2f | %.2f | %.1f %s | %s | %s |\n", op->op, c.name, graph_us, stream_us, value, metric, pct, cpct);
          fflush(stdout);
          if (json)
            fprintf(json,
                    "{\"op\":\"%s\",\"case\":\"%s\",\"us\":%.3f,\"stream_us\":%.3f,\"metric\":\"%s\",\"value\":%.2f,"
                    "\"roofline\":%.1f,\"copy_us\":%.3f,\"gpu\":\"%s\",\"date\":\"%s\",\"commit\":\"%s\"}\n",
                    op->op, c.name, graph_us, stream_us, bw ? "GB/s" : "TFLOP/s", value, roof, copy_us, prop.name, date,
                    SK_GIT_COMMIT);
        }
      }
      sk_binding_destroy(b);
      for (size_t k = 0; k < n; k++)
        if (d[k]) CK(cudaFree(d[k]));
      if (scratch) CK(cudaFree(scratch));
      skh_tensors_free(t, n);
      sk_plan_destroy(plan);
    }
  }
  bench_copy_ref_close(&copy);
  CK(cudaStreamDestroy(s));
  if (json) fclose(json);
  return status;
}
