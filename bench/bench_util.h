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
 * GPU time. Returns -1 if a call fails. */
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

/* The comparator for "% of same-size copy": cudaMemcpyAsync device to device of half the bytes an
 * op moves (so the copy reads and writes the op's total), replayed from a CUDA graph like
 * bench_graph_us (a stream of small copies is bound by the host's cost per call, so only graph
 * times compare at small sizes). A copy pays its own fixed cost per call (ramp, drain), which the
 * one 4300 GB/s figure leaves out; this is the rate a copy of that size reaches. The size is
 * rounded up to 4 KiB: a copy whose size is not a multiple of 4 KiB runs much slower from a graph,
 * not a fair comparator; the rounding adds at most 4 KiB. */
typedef struct bench_copy_ref {
  void *src, *dst;
  size_t capacity; /* bytes per buffer */
} bench_copy_ref;

/* Buffers for copies of up to max_bytes_moved (read + write); the source is filled (not zeros). */
static inline bench_copy_ref bench_copy_ref_open(double max_bytes_moved) {
  bench_copy_ref r;
  r.capacity = ((size_t)(max_bytes_moved / 2) + 4095) & ~(size_t)4095;
  CK(cudaMalloc(&r.src, r.capacity));
  CK(cudaMalloc(&r.dst, r.capacity));
  CK(cudaMemset(r.src, 0x5a, r.capacity));
  return r;
}

/* One device-to-device cudaMemcpyAsync, as a bench_call_fn. */
typedef struct bench_copy_call {
  void *dst;
  const void *src;
  size_t bytes;
} bench_copy_call;
static inline int bench_copy_launch(void *ctx, cudaStream_t s) {
  const bench_copy_call *c = ctx;
  return cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess;
}

/* Median graph microseconds per copy moving `bytes_moved` in all (<= the capacity opened), `calls`
 * back-to-back copies per graph. Exits on failure. */
static inline double bench_copy_us(const bench_copy_ref *ref, double bytes_moved, cudaStream_t s, int calls, int rounds) {
  bench_copy_call c = {ref->dst, ref->src, ((size_t)(bytes_moved / 2) + 4095) & ~(size_t)4095};
  if (c.bytes > ref->capacity) c.bytes = ref->capacity;
  const double us = bench_graph_us(bench_copy_launch, &c, s, calls, rounds);
  if (us < 0) {
    fprintf(stderr, "cudaMemcpyAsync failed\n");
    exit(1);
  }
  return us;
}

static inline void bench_copy_ref_close(bench_copy_ref *r) {
  CK(cudaFree(r->src));
  CK(cudaFree(r->dst));
}

#endif
