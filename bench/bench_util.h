/* bench/bench_util.h - what every GPU benchmark shares: checked calls, DLPack views, medians. */
#ifndef SK_BENCH_UTIL_H
#define SK_BENCH_UTIL_H
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_json.h"
#include "sparkinfer.h"
#include "testutil.h" /* tu_device_tensor */

/* Exit with the call and the CUDA / sparkinfer message on any failure: a benchmark that measured
 * a failed launch must not print a number. */
#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
  } while (0)
#define SK(x)                                                                                    \
  do {                                                                                           \
    if ((x) != SK_OK) { fprintf(stderr, "%s: %s\n", #x, sk_last_error_message()); exit(1); }     \
  } while (0)

/* Device 0 with its primary context created (so the first timed call pays no setup); returns
 * its SM count. Exits like CK on failure. */
static inline int bench_open_device(void) {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

/* Row filters for quick sweeps: bench_keep("SK_BENCH_M", m) is 1 when the variable is unset or
 * its comma-separated list contains v (e.g. SK_BENCH_M=1,16). */
static inline int bench_keep(const char *var, long long v) {
  const char *list = getenv(var);
  if (!list || !*list) return 1;
  char padded[256], token[32];
  snprintf(padded, sizeof padded, ",%s,", list);
  snprintf(token, sizeof token, ",%lld,", v);
  return strstr(padded, token) != NULL;
}

static inline int bench_cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}
static inline int bench_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}


/* One call of the op under test, enqueued on stream s; returns nonzero on failure. */
typedef int (*bench_call_fn)(void *ctx, cudaStream_t s);

/* Median microseconds per call: `rounds` rounds (<= 15) of `calls` back-to-back calls between two
 * CUDA events, after 10 warm-up calls. Includes the host's launch cost wherever that exceeds the
 * GPU time (about 4.5 us per launch on the H200 host). Returns -1 if a call fails. */
static inline double bench_stream_us(bench_call_fn call, void *ctx, cudaStream_t s, int calls, int rounds) {
  float t[15];
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 10; i++)
    if (call(ctx, s)) return -1;
  for (int r = 0; r < rounds; r++) {
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < calls; i++)
      if (call(ctx, s)) return -1;
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t[r], e0, e1));
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  qsort(t, (size_t)rounds, sizeof(float), bench_cmp_float);
  return t[rounds / 2] * 1e3 / calls;
}

static inline int bench_graph_launch(void *graph_exec, cudaStream_t s) {
  return cudaGraphLaunch((cudaGraphExec_t)graph_exec, s) != cudaSuccess;
}

/* The same `calls` calls captured once into a CUDA graph, then timed like bench_stream_us with one
 * graph launch per call: median microseconds per captured call on the GPU without host launch
 * cost, which is what a server that replays graphs sees. Returns -1 if a call fails. */
static inline double bench_graph_us(bench_call_fn call, void *ctx, cudaStream_t s, int calls, int rounds) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  int bad = 0;
  for (int i = 0; i < calls && !bad; i++) bad = call(ctx, s);
  CK(cudaStreamEndCapture(s, &g));
  if (bad) {
    CK(cudaGraphDestroy(g));
    return -1;
  }
  CK(cudaGraphInstantiate(&ge, g, 0));
  const double us = bench_stream_us(bench_graph_launch, ge, s, 1, rounds);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return us < 0 ? -1 : us / calls;
}

#endif
