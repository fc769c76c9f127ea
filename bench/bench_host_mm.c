/* bench_host_mm - what the one-shot sk_gemm_mm costs on the host per call, with no driver time in
 * it: runs on the stub driver (tests/stub/libcuda_stub.c, `make bench-host`), whose launches do
 * nothing, so a machine without a GPU measures the library's own path (shape checks, plan cache,
 * bind, launch arguments) and two builds can be compared side by side on one CPU. The same calls
 * as bench_gemm's host table (tensor_fp8, M = 1, N = K = 128): sk_kernel_launch_ex of the kernel
 * mm picks, then sk_gemm_mm; median of 21 rounds of 20000 calls each. Uses only the public API of
 * the builds since the gemm planned ops existed in their one-shot form, so an older tree compiles
 * it too. Refuses to run on a real driver (its device pointers are fake).
 * SK_BENCH_JSON=FILE appends one bench/results.py row (op "host", metric "us"). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dlopen flags, when built alone against another tree */
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sparkinfer.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/jit.h"

#ifndef SK_GIT_COMMIT
#define SK_GIT_COMMIT "unknown"
#endif

#define ROUNDS 21
#define CALLS 20000

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void *drv; /* the driver library (the stub) */
typedef int (*calls_fn)(int, const char **, unsigned long long *);
#define MAX_ENTRIES 96

/* Driver calls per library call, by entry: the stub's counters around `calls` calls of way w. */
static void count_calls(calls_fn counts, const char *label, int (*call)(int), int w, int calls) {
  unsigned long long before[MAX_ENTRIES] = {0}, after;
  const char *name;
  for (int i = 0; i < MAX_ENTRIES && counts(i, &name, &before[i]); i++) {}
  for (int i = 0; i < calls; i++) call(w);
  printf("| %s | ", label);
  int any = 0;
  for (int i = 0; i < MAX_ENTRIES && counts(i, &name, &after); i++)
    if (after > before[i]) printf("%s%s %.2f", any++ ? ", " : "", name, (double)(after - before[i]) / calls);
  printf("%s | ", any ? "" : "none");
  typedef unsigned (*last_fn)(unsigned *, unsigned *, unsigned *, int *);
  const last_fn last = (last_fn)dlsym(drv, "sk_stub_last_launch");
  unsigned grid = 0, block = 0, smem = 0;
  int ids[8];
  const unsigned n = last ? last(&grid, &block, &smem, ids) : 0;
  printf("%u CTAs x %u threads, %u B smem, attributes", grid, block, smem);
  for (unsigned i = 0; i < n && i < 8; i++) printf(" %d", ids[i]);
  printf("%s |\n", n ? "" : " none");
}

static DLTensor view(uintptr_t addr, DLDataType dt, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)addr;
  t.device.device_type = kDLCUDA;
  t.ndim = 2;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

#define SK(x)                                                                                    \
  do {                                                                                           \
    if ((x) != SK_OK) { fprintf(stderr, "%s: %s\n", #x, sk_last_error_message()); return 1; }    \
  } while (0)

static DLTensor ta, tb, tc;
static sk_kernel *kern;
static sk_gemm_launch_info info;
static void **launch_args;
static void *stream = (void *)0x1000; /* any non-NULL handle: the stub never reads it */

/* Way 0: the kernel as mm launches it; way 1: the one-shot call. 0 on success. */
static int call(int w) {
  if (w == 0) return sk_kernel_launch_ex(kern, info.grid, info.block, info.smem_bytes, stream, launch_args, SK_LAUNCH_OVERLAP_PREVIOUS) != SK_OK;
  return sk_gemm_mm(SK_GEMM_TENSOR_FP8, &ta, NULL, &tb, NULL, NULL, &tc, NULL, 0, stream) != SK_OK;
}

int main(void) {
  drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!drv || !dlsym(drv, "sk_stub_driver")) {
    printf("bench_host_mm: skipped: it runs on the stub driver only (make bench-host)\n");
    return 0;
  }
  const int64_t m = 1, n = 128, k = 128;
  int64_t as[2] = {m, k}, bsh[2] = {n, k}, cs[2] = {m, n};
  DLDataType u8 = {kDLUInt, 8, 1}, bf = {kDLBfloat, 16, 1};
  ta = view(0x7f0000000000u, u8, as), tb = view(0x7f0000100000u, u8, bsh), tc = view(0x7f0000200000u, bf, cs);

  SK(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, m, n, k, NULL, &info));
  const sk_kernel_request req = {"gemm.blockscaled", info.source, info.name, info.params, NULL, NULL, 0, 0};
  SK(sk_kernel_resolve(&req, &kern));
  SK(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &ta, NULL, &tb, NULL, NULL, &tc, NULL, 0, stream)); /* its plan, cached */

  const void *ac = ta.data, *bc = tb.data, *nul = NULL;
  void *cp = tc.data, *partials = NULL, *counters = NULL;
  int mi = (int)m, ni = (int)n, ki = (int)k, ldc = (int)n;
  void *args[] = {(void *)&ac, (void *)&nul, (void *)&bc, (void *)&nul, (void *)&nul, &cp, &mi, &ni, &ki, &ldc, &partials, &counters};
  launch_args = args;
  double launch[ROUNDS], mm[ROUNDS];
  int bad = 0;
  for (int rep = 0; rep < ROUNDS; rep++) {
    double t0 = now_us();
    for (int i = 0; i < CALLS; i++) bad |= call(0);
    double t1 = now_us();
    for (int i = 0; i < CALLS; i++) bad |= call(1);
    double t2 = now_us();
    launch[rep] = (t1 - t0) / CALLS;
    mm[rep] = (t2 - t1) / CALLS;
  }
  if (bad) {
    fprintf(stderr, "bench_host_mm: a call failed: %s\n", sk_last_error_message());
    return 1;
  }
  qsort(launch, ROUNDS, sizeof(double), cmp);
  qsort(mm, ROUNDS, sizeof(double), cmp);
  const double l = launch[ROUNDS / 2], o = mm[ROUNDS / 2];
  printf("| host time per call on the stub driver (tensor_fp8, M = 1, 128x128, commit %s) | us |\n|---|---|\n", SK_GIT_COMMIT);
  printf("| sk_kernel_launch_ex | %.3f |\n| sk_gemm_mm (one-shot) | %.3f |\n| sk_gemm_mm over the launch | %+.3f |\n", l, o, o - l);
  printf("\n| driver calls per call | entry: calls | the launch |\n|---|---|---|\n");
  const calls_fn counts = (calls_fn)dlsym(drv, "sk_stub_driver_calls");
  if (counts) {
    count_calls(counts, "sk_kernel_launch_ex", call, 0, 1000);
    count_calls(counts, "sk_gemm_mm (one-shot)", call, 1, 1000);
  }
  const char *path = getenv("SK_BENCH_JSON");
  if (path && *path) {
    FILE *f = fopen(path, "a");
    if (!f) return fprintf(stderr, "bench_host_mm: cannot open %s\n", path), 1;
    char when[16];
    const time_t t = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d", gmtime(&t));
    fprintf(f,
            "{\"op\": \"host\", \"case\": \"sk_gemm_mm one-shot over sk_kernel_launch_ex (stub driver)\", \"gpu\": \"CPU, stub "
            "driver\", \"date\": \"%s\", \"commit\": \"%s\", \"metric\": \"us\", \"value\": %.3f}\n",
            when, SK_GIT_COMMIT, o - l);
    fclose(f);
  }
  return 0;
}
