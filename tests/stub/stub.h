/* tests/stub/stub.h - CPU suites that run host paths end to end on the stub driver
 * (libcuda_stub.c, built as $(BUILD)/stub/libcuda.so.1 by `make test`): stub_setup() points
 * SPARKINFER_CUDA_DRIVER at it (call it before the first GPU-touching call: Criterion's .init) and
 * a build-local kernel cache; stub_calls("cuLaunchKernelEx") reads the stub's call counter. */
#ifndef SK_TEST_STUB_H
#define SK_TEST_STUB_H

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef int (*stub_calls_fn)(int, const char **, unsigned long long *);
static stub_calls_fn stub_counter;

static inline void stub_setup(void) {
  static char driver[512], cache[512];
  snprintf(driver, sizeof driver, "%s/stub/libcuda.so.1", tu_build_dir());
  snprintf(cache, sizeof cache, "%s/stub/cache", tu_build_dir());
  setenv("SPARKINFER_CUDA_DRIVER", driver, 1);
  setenv("SPARKINFER_CACHE_DIR", cache, 1);
  void *h = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
  cr_assert(h, "the stub driver %s is missing (make test builds it): %s", driver, dlerror());
  stub_counter = (stub_calls_fn)dlsym(h, "sk_stub_driver_calls");
  cr_assert(stub_counter);
}

/* Calls of driver entry `name` so far (0 before the runtime first asked for it). */
static inline unsigned long long stub_calls(const char *name) {
  const char *n;
  unsigned long long c;
  for (int i = 0; stub_counter(i, &n, &c); i++)
    if (!strcmp(n, name)) return c;
  return 0;
}

/* What the stub saw launched of kernel handle `fn`: the launch count, the largest block and the
 * largest dynamic shared memory. */
static inline unsigned long long stub_kernel_launched(const void *fn, unsigned *max_threads, unsigned *max_smem) {
  typedef unsigned long long (*launched_fn)(const void *, unsigned *, unsigned *);
  static launched_fn f;
  if (!f) {
    void *h = dlopen(getenv("SPARKINFER_CUDA_DRIVER"), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    f = h ? (launched_fn)dlsym(h, "sk_stub_kernel_launched") : NULL;
  }
  return f ? f(fn, max_threads, max_smem) : 0;
}

/* Calls of every driver entry so far. */
static inline unsigned long long stub_calls_total(void) {
  const char *n;
  unsigned long long c, total = 0;
  for (int i = 0; stub_counter(i, &n, &c); i++) total += c;
  return total;
}

#endif
