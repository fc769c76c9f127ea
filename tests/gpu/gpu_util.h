/* tests/gpu/gpu_util.h - CUDA runtime helpers for the GPU suites: every call checked. */
#ifndef SK_GPU_UTIL_H
#define SK_GPU_UTIL_H
#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "sparkinfer.h"
#include "testutil.h"

#define CUDA_OK(call)                                                                            \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    cr_assert_eq(e_, cudaSuccess, "%s failed: %s", #call, cudaGetErrorString(e_));               \
  } while (0)

#define SK_OK_OR_FAIL(call)                                                                      \
  do {                                                                                           \
    sk_status s_ = (call);                                                                       \
    cr_assert_eq(s_, SK_OK, "%s: %s: %s", #call, sk_status_string(s_), sk_last_error_message()); \
  } while (0)

/* The device's arch string for sparkinfer ("sm_90a" on an H200). */
static inline const char *gpu_arch(void) {
  static char arch[16];
  if (!arch[0] && sk_device_arch(0, arch, sizeof arch) != SK_OK) arch[0] = 0;
  return arch;
}
/* Per-test setup: the kernel cache is SK_GPU_TEST_CACHE when set (prebuilt with sk-warm by
 * tools/gpu-run.sh, so a GPU run does not spend its minutes compiling), else a fresh temp dir
 * (returned; the caller removes it). The primary context is created before sparkinfer runs. */
static inline char *gpu_test_setup(const char *tag) {
  char *dir = tu_tempdir(tag);
  setenv("SPARKINFER_CACHE_DIR", getenv("SK_GPU_TEST_CACHE") ? getenv("SK_GPU_TEST_CACHE") : dir, 1);
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(0));
  return dir;
}
/* Device buffers for the suites. Each waits for the device before it returns: some tests run the
 * op on a non-blocking stream, which does not wait for the legacy stream's memset or for the DMA
 * that a pageable cudaMemcpy may still be doing. Without it a late poison could overwrite outputs
 * (a graph test once found its eager outputs differing from the replays) or the fused mhc decode
 * could find its counters not yet zero. The caller frees the buffer (cudaFree). */
static inline void *gpu_upload(const void *host, size_t n) {
  void *d;
  CUDA_OK(cudaMalloc(&d, n));
  CUDA_OK(cudaMemcpy(d, host, n, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());
  return d;
}
/* n bytes of `byte`: 0xff is NaN in bf16, fp16 and fp32, so an unwritten output never passes. */
static inline void *gpu_filled(size_t n, int byte) {
  void *d;
  CUDA_OK(cudaMalloc(&d, n));
  CUDA_OK(cudaMemset(d, byte, n));
  CUDA_OK(cudaDeviceSynchronize());
  return d;
}
static inline void *gpu_poisoned(size_t n) { return gpu_filled(n, 0xff); }
static inline void *gpu_zeroed(size_t n) { return gpu_filled(n, 0); }
/* A malloc'ed host copy of n device bytes (the caller frees it). */
static inline void *gpu_download(const void *d, size_t n) {
  void *h = malloc(n);
  cr_assert(h, "out of host memory (%zu bytes)", n);
  CUDA_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
  return h;
}
#include "sparkinfer/op.h"
/* A plan's device scratch: its sk_plan_scratch_spec bytes, zeroed (the zero_once rule; an op
 * whose scratch never matters does not mind), or NULL when it needs none. *bytes gets the size.
 * The caller frees it (cudaFree). */
static inline void *gpu_plan_scratch(const sk_plan *plan, size_t *bytes) {
  sk_scratch_spec spec;
  SK_OK_OR_FAIL(sk_plan_scratch_spec(plan, &spec));
  *bytes = spec.bytes;
  return spec.bytes ? gpu_zeroed(spec.bytes) : NULL;
}
/* Run `op` once: a plan from `caps`, its scratch, a binding of the `n` tensors (NULL for absent
 * ones), a run on `stream`, a wait; everything freed. Returns the first failing step's status
 * (the plan's, the bind's or the run's; the message says which); CUDA errors fail the test. */
static inline sk_status gpu_run_op(const char *op, const void *caps, const DLTensor *const *tensors, size_t n, void *stream) {
  sk_plan *plan;
  sk_status s = sk_plan_create(op, caps, &plan);
  if (s != SK_OK) return s;
  size_t bytes;
  void *scratch = gpu_plan_scratch(plan, &bytes);
  sk_binding *b = NULL;
  s = sk_binding_create(plan, NULL, &b);
  if (s == SK_OK) s = sk_bind(b, tensors, n, scratch, bytes);
  if (s == SK_OK) s = sk_run(b, stream);
  if (s == SK_OK) CUDA_OK(cudaStreamSynchronize((cudaStream_t)stream));
  sk_binding_destroy(b);
  sk_plan_destroy(plan);
  if (scratch) CUDA_OK(cudaFree(scratch));
  return s;
}
#endif
