/*
 * sparkinfer/op.h - the one API every op follows (in the spirit of sqlite3's prepare -> bind ->
 * step -> finalize and NCCL's versioned config structs).
 *
 *   caps      an op's caps struct (sparkinfer/<group>.h), initialised with its SK_..._CAPS_INIT
 *             and then edited: the first member is its size, so later versions can append fields
 *   plan      sk_plan_create(op, &caps, &plan): validates the caps, picks the kernels for the
 *             target arch (a pure function of caps and the arch's properties) and resolves them
 *             through the JIT (may compile; after sk_freeze_kernel_resolution only kernels
 *             already resolved in this process are found); immutable afterwards
 *   scratch   sk_plan_scratch_spec: bytes of device scratch the caller allocates (once)
 *   binding   sk_binding_create(plan, entry, &b) allocates a binding (host memory, once);
 *             sk_bind(b, tensors, n, scratch, bytes) checks DLPack views against the entry's
 *             tensor table and computes the launch geometry: never allocates, never resolves,
 *             never touches device memory; a binding may be re-bound any number of times
 *   run       sk_run(b, stream): launches only (no allocation, no sync, no compile); safe inside
 *             CUDA graph capture and after a freeze
 *   destroy   sk_binding_destroy, sk_plan_destroy
 *
 * Entries: an op has one or more entry points (norm.mhc: "post", "pre", "post_pre"); each has its
 * own tensor table. NULL names the op's first entry.
 *
 * Tensor tables: every entry lists its tensors in a fixed order with a name, a role, allowed
 * dtypes, a symbolic shape over the plan's symbols ("[M, K/2]": K is fixed by the caps, M is bound
 * by the tensors at bind time within the range the plan allows) and an alignment; sk_bind takes
 * the tensors in that order (NULL for an absent optional one). sk_plan_tensor_info describes the
 * table at run time, and every bad tensor is refused by one validator with a message naming the
 * op, the tensor, the rule and the value that broke it. The group headers give typed inline
 * wrappers (sk_nvfp4_bind(b, x, values, ...)) over sk_bind.
 *
 * Tensors are DLPack DLTensor views (dlpack.h) of CUDA device memory (kDLCUDA); row-major and
 * contiguous unless the table says a tensor may be strided; `byte_offset` is honoured. FP8 / FP4
 * codes and scale bytes travel as uint8 tensors.
 *
 * Thread safety: a plan is immutable after creation; any number of threads may create bindings
 * for it and run them. A binding must not be bound and run concurrently from two threads (bind
 * writes it); run is read-only, so one bound binding may be run from several threads/streams
 * (their scratch is the same buffer, though: give concurrent runs separate bindings and scratch).
 * sk_plan_destroy / sk_binding_destroy must not race with other uses of the object; destroy a
 * plan's bindings before the plan.
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

/** An immutable plan of any op. */
typedef struct sk_plan sk_plan;
/** A set of bound tensors for one entry of a plan (opaque, host memory). */
typedef struct sk_binding sk_binding;

/* ---- plans ---------------------------------------------------------------------------------- */

/** Create a plan for op `op` ("quantization.nvfp4", see sk_list_ops) from `caps`, a pointer to
 *  that op's caps struct (its first member, struct_size, set by the op's SK_..._CAPS_INIT). A
 *  caps struct from an older header (smaller struct_size) gets the defaults for the fields it
 *  lacks; one from a newer header is accepted when the fields this library does not know are 0.
 *  Reads the op's SPARKINFER_<GROUP>_* tuning overrides (docs/env.md) here, never at run.
 *  Errors: SK_ERR_INVALID_ARGUMENT (NULL, caps, struct_size, a malformed override),
 *  SK_ERR_NOT_FOUND (unknown op), SK_ERR_UNSUPPORTED (arch or path), resolution errors
 *  (SK_ERR_COMPILE, SK_ERR_KERNEL_RESOLUTION_FROZEN, SK_ERR_NO_DEVICE, ...). *plan is NULL on
 *  error. With an explicit caps arch and no GPU the plan is "offline": its kernels are compiled
 *  and cached, bind works, run returns SK_ERR_NO_DEVICE / SK_ERR_NO_DRIVER.
 *  Thread safety: any thread. */
SK_API sk_status sk_plan_create(const char *op, const void *caps, sk_plan **plan);

/** As sk_plan_create with the caps given as JSON text, in the form manifests use (docs/tools.md;
 *  the op's contract doc lists the fields). `arch` NULL = the caps' "arch" field, else the
 *  current device's. */
SK_API sk_status sk_plan_create_json(const char *op, const char *caps_json, const char *arch, sk_plan **plan);

/** Free a plan (NULL is a no-op). Its kernels stay resolved in the process table. */
SK_API void sk_plan_destroy(sk_plan *plan);

/** Device scratch the plan needs. */
SK_API sk_status sk_plan_scratch_spec(const sk_plan *plan, sk_scratch_spec *spec);

/** The plan's op name ("quantization.nvfp4") and target arch ("sm_120a"); static / plan-owned
 *  strings, "" for NULL. */
SK_API const char *sk_plan_op(const sk_plan *plan);
SK_API const char *sk_plan_arch(const sk_plan *plan);

/** The plan's normalised caps as JSON (the manifest form), written to buf (NUL-terminated,
 *  truncated to size); *needed (may be NULL) receives the full length + 1. */
SK_API sk_status sk_plan_caps_json(const sk_plan *plan, char *buf, size_t size, size_t *needed);

struct sk_kernel;
/** Kernels the plan resolved, in a fixed order: the count, and for index i the kernel handle
 *  (sparkinfer/jit.h, owned by the runtime: valid for the process) or NULL where the plan's caps
 *  never launch that slot, or i is past the count or plan is NULL. For tools and tests. */
SK_API size_t sk_plan_kernel_count(const sk_plan *plan);
SK_API const struct sk_kernel *sk_plan_kernel(const sk_plan *plan, size_t index);

/* ---- tensor tables -------------------------------------------------------------------------- */

typedef enum sk_tensor_role {
  SK_TENSOR_IN = 0,     /**< read by run */
  SK_TENSOR_OUT = 1,    /**< written by run */
  SK_TENSOR_INOUT = 2,  /**< read and written */
} sk_tensor_role;

typedef enum sk_tensor_presence {
  SK_TENSOR_REQUIRED = 0, /**< must be given */
  SK_TENSOR_OPTIONAL = 1, /**< may be NULL */
  SK_TENSOR_UNUSED = 2,   /**< this plan does not take it: must be NULL */
} sk_tensor_presence;

/** One row of an entry's tensor table (all strings static or plan-owned). */
typedef struct sk_tensor_info {
  const char *name;           /**< "x" */
  const char *shape;          /**< symbolic shape, e.g. "[M, K/2]"; "*" = any extent */
  const char *dtypes;         /**< allowed DLPack dtypes, e.g. "bfloat16|float16" */
  sk_tensor_role role;
  sk_tensor_presence presence;
  size_t alignment;           /**< required byte alignment of data + byte_offset */
  int strided;                /**< 0: contiguous row-major; k > 0: the first k dims may have any
                                   strides that do not overlap (each at least the extent of the
                                   dims inside it: padded rows, pages), the rest row-major;
                                   -1: any strides, checked by the op (its header says how) */
  const char *doc;            /**< one line */
} sk_tensor_info;

/** Number of entries of the plan's op and the name of entry `index` (NULL past the end). */
SK_API size_t sk_plan_entry_count(const sk_plan *plan);
SK_API const char *sk_plan_entry_name(const sk_plan *plan, size_t index);

/** Tensors of entry `entry` (NULL = the first): their number, and row `index` (as the plan sees
 *  it: presence reflects the caps). Errors: SK_ERR_INVALID_ARGUMENT (NULL plan or info, index
 *  past the table), SK_ERR_NOT_FOUND (no such entry). */
SK_API sk_status sk_plan_tensor_count(const sk_plan *plan, const char *entry, size_t *count);
SK_API sk_status sk_plan_tensor_info(const sk_plan *plan, const char *entry, size_t index, sk_tensor_info *info);

/** Value of a plan symbol used in the tensor shapes ("K", "MAX_M", ...). SK_ERR_NOT_FOUND when the
 *  plan has no such symbol. */
SK_API sk_status sk_plan_symbol(const sk_plan *plan, const char *name, int64_t *value);

/* ---- bindings ------------------------------------------------------------------------------- */

/** Allocate a binding for entry `entry` of `plan` (NULL = the first entry). It holds nothing bound
 *  until sk_bind succeeds. Errors: SK_ERR_INVALID_ARGUMENT, SK_ERR_NOT_FOUND (entry),
 *  SK_ERR_OUT_OF_MEMORY. The plan must outlive it. */
SK_API sk_status sk_binding_create(const sk_plan *plan, const char *entry, sk_binding **binding);

/** Bind `num_tensors` tensors in the entry's table order (NULL for an absent optional tensor)
 *  and the scratch (NULL and 0 when the plan needs none). Validates every tensor against its
 *  table row (presence, device, dtype, rank, shape, strides, alignment, total size) and the
 *  entry's cross-tensor rules, then the op's own checks, and fixes the launch geometry. On
 *  error the binding is left unbound (run refuses it) and nothing else changes. Views only: no
 *  allocation, no device access, no resolution. Rebinding the same layouts (every tensor's
 *  presence, dtype, device, shape and strides as in the binding's last successful bind) at new
 *  addresses checks only the pointers and the scratch: the cheap call a serving loop makes each
 *  step. Errors: SK_ERR_INVALID_ARGUMENT with a message naming the op, entry, tensor and rule. */
SK_API sk_status sk_bind(sk_binding *binding, const DLTensor *const *tensors, size_t num_tensors, void *scratch,
                         size_t scratch_bytes);

/** A symbol bound by the last successful sk_bind ("M"), or a plan symbol. */
SK_API sk_status sk_binding_symbol(const sk_binding *binding, const char *name, int64_t *value);

/** Launch the bound entry on `stream` (a CUstream / cudaStream_t; NULL = the legacy default
 *  stream). No allocation, no sync, no compile: safe inside CUDA graph capture and after a
 *  freeze. Errors: SK_ERR_INVALID_ARGUMENT (NULL or unbound binding), SK_ERR_CUDA (a launch
 *  failed), SK_ERR_NO_DEVICE / SK_ERR_NO_DRIVER (an offline plan). */
SK_API sk_status sk_run(const sk_binding *binding, void *stream);

/** Free a binding (NULL is a no-op). */
SK_API void sk_binding_destroy(sk_binding *binding);

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_OP_H */
