/*
 * runtime/op.h - the op spine: tensor validation, scratch layout, kernel resolution and
 * launching helpers that every op uses, so that an op's file states only what differs.
 */
#ifndef SK_OP_INTERNAL_H
#define SK_OP_INTERNAL_H

#include "runtime.h"
#include "sparkinfer/op.h"

#define SK_BINDING_MAGIC 0x534b4244u /* "SKBD" */
#define SK_SCRATCH_ALIGN 1024u     /* every scratch view starts on this boundary */
#define SK_SCRATCH_BASE_ALIGN 256u /* what the caller's allocation must have (cudaMalloc gives it) */

/* What a bound tensor must look like. shape[i] < 0 accepts any extent (the actual one is
 * returned through the tensor itself). Contiguous row-major is always required. */
typedef struct sk_tensor_spec {
  const char *name;       /* "x", "scales", ... for messages */
  DLDataType dtype;       /* code, bits, lanes=1 */
  int ndim;
  int64_t shape[4];
  size_t align;           /* required byte alignment of the data pointer */
} sk_tensor_spec;

static inline DLDataType sk_dl_dtype(uint8_t code, uint8_t bits) {
  DLDataType d = {code, bits, 1};
  return d;
}
#define SK_DL_BF16 sk_dl_dtype(kDLBfloat, 16)
#define SK_DL_FP16 sk_dl_dtype(kDLFloat, 16)
#define SK_DL_FP32 sk_dl_dtype(kDLFloat, 32)
#define SK_DL_U8 sk_dl_dtype(kDLUInt, 8)
/* FP8/FP4 codes and scale bytes travel as uint8 (the DLPack this targets has no FP8 codes). */

/* Validate `t` against `spec` for op `op`; on success *data is the element pointer (data +
 * byte_offset). Errors: SK_ERR_INVALID_ARGUMENT naming op, tensor and what is wrong. */
sk_status sk_check_tensor(const char *op, const DLTensor *t, const sk_tensor_spec *spec, void **data);

/* Total bytes of a validated tensor (elements x bits / 8, overflow-checked by sk_check_tensor). */
size_t sk_tensor_bytes(const DLTensor *t);

/* Scratch: regions laid out back to back, each 1024-byte aligned. */
typedef struct sk_scratch_layout {
  size_t offset[8], size[8];
  int count;
  size_t total;
  int zero_once; /* some region holds counters that must start at zero (sk_scratch_spec.zero_once) */
} sk_scratch_layout;
/* Add a region; returns its index (or -1 and sets an error on overflow). */
int sk_scratch_add(sk_scratch_layout *l, size_t bytes);
/* Add a region of integer counters that runs leave at zero: the caller zeroes the scratch once. */
int sk_scratch_add_counters(sk_scratch_layout *l, size_t bytes);
sk_scratch_spec sk_scratch_spec_of(const sk_scratch_layout *l);
/* Slice the caller's scratch into the layout's regions (views only). */
sk_status sk_scratch_bind(const char *op, const sk_scratch_layout *l, void *scratch, size_t bytes, void **views);

/* The arch a plan targets: caps_arch if given (validated), else the current device's. */
sk_status sk_op_arch(const char *op, const char *caps_arch, char arch[SK_MAX_ARCH]);
/* True for the SM120 family targets that have block-scaled mma and e2m1 cvt. */
bool sk_arch_is_sm120(const char *arch);

/* Resolve one kernel of an op at plan time (compiles if needed; loads on the GPU). */
sk_status sk_op_resolve(const char *op, const char *source, const char *name_expr, const char *params,
                        const char *arch, sk_kernel **out);

/* Opt `k` in to `bytes` of dynamic shared memory: always, not only above 48 KiB (static + dynamic
 * above 48 KiB needs the opt-in too). Remembered per kernel (sk_kernel_set_max_dynamic_shared), so
 * it is cheap to repeat; a no-op for NULL, 0 bytes or an offline kernel (no GPU: nothing loaded,
 * launching reports it). */
sk_status sk_op_allow_dynamic_smem(sk_kernel *k, unsigned bytes);

/* CTAs of `k` (blocks of `block_threads` threads, `dynamic_smem` bytes) that fit on one SM of the
 * current device at once (cuOccupancyMaxActiveBlocksPerMultiprocessor); 0 when unknown: an
 * offline kernel (no GPU), a driver without the call, or an error (which is not reported). */
int sk_op_resident_ctas_per_sm(const sk_kernel *k, int block_threads, unsigned dynamic_smem);

/* Start a binding for `plan`. */
static inline void sk_binding_init(sk_binding *b, const void *plan) {
  for (int i = 0; i < 16; i++) b->ptr[i] = 0;
  for (int i = 0; i < 8; i++) b->dim[i] = 0;
  b->plan = plan;
  b->magic = SK_BINDING_MAGIC;
}
/* Check that a binding came from bind() of this plan. */
sk_status sk_binding_check(const char *op, const sk_binding *b, const void *plan);

/* Ceil division for sizes. */
static inline int64_t sk_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif
