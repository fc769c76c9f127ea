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

#endif
