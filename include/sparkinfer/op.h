/*
 * sparkinfer/op.h - types shared by every op.
 *
 * Planned ops follow one life cycle:
 *
 *   caps  ->  plan_create   host side: validates caps, resolves every kernel the plan can need
 *                           through the JIT (may compile, may allocate host memory)
 *         ->  scratch_spec  bytes and alignment of the device scratch the caller provides
 *         ->  bind          DLPack views + scratch -> an sk_binding; validates dtype, shape,
 *                           strides, device and alignment; never allocates, never resolves
 *         ->  run           launches on a stream; no allocation, no sync, no compile; safe inside
 *                           CUDA graph capture and after sk_freeze_kernel_resolution
 *         ->  plan_destroy
 *
 * Tensors are DLPack DLTensor views (dlpack.h) of CUDA device memory (kDLCUDA), row-major and
 * contiguous unless an op says otherwise; `byte_offset` is honoured. Plans are immutable after
 * creation: one plan may be bound and run from several threads; a binding is a plain value.
 */
#ifndef SPARKINFER_OP_H
#define SPARKINFER_OP_H

#include <dlpack/dlpack.h>

#include "../sparkinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Device scratch a plan needs: the caller allocates at least `bytes` with `alignment` (256, which
 *  cudaMalloc/cuMemAlloc guarantee). Bind lays the op's regions out from the first 1024-byte
 *  boundary inside it (the slack is included in `bytes`). When `zero_once` is 1 the op keeps
 *  integer counters in the scratch between runs: the caller zeroes the whole scratch once after
 *  allocating it (cudaMemset 0), before the first run, and every run leaves the counters at zero,
 *  so the buffer is reused (and graph-replayed) without further zeroing. */
typedef struct sk_scratch_spec {
  size_t bytes;      /**< 0 when the op needs no scratch */
  size_t alignment;  /**< 256 */
  int zero_once;     /**< 1: zero the scratch once after allocating it; 0: its contents never matter */
} sk_scratch_spec;

/** The result of bind: device pointers and sizes an op's run needs, in an op-private order.
 *  A plain value: copy it, keep it, reuse it for every run with the same tensors. */
typedef struct sk_binding {
  uint32_t magic;        /**< set by bind; run refuses anything else */
  const void *plan;      /**< the plan that made it */
  void *ptr[16];
  int64_t dim[8];
} sk_binding;

/** Which kernel path a plan uses. */
typedef enum sk_path {
  SK_PATH_AUTO = 0,      /**< the fastest path the arch supports */
  SK_PATH_PORTABLE = 1,  /**< mma.sync / cp.async / software conversions: sm_89 and newer */
  SK_PATH_SM120 = 2,     /**< SM120/SM121-only instructions (sm_120a, sm_121a) */
} sk_path;

/** Activation/weight element types used in caps. */
typedef enum sk_dtype {
  SK_DTYPE_BF16 = 0,
  SK_DTYPE_FP16 = 1,
  SK_DTYPE_FP32 = 2,
} sk_dtype;

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_OP_H */
