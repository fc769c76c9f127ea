/*
 * sparkinfer/jit.h - kernel requests, resolution and launch.
 *
 * Every kernel in sparkinfer is a CUDA C++ template embedded in the library (ops/),
 * instantiated per configuration through NVRTC (and nvJitLink for LTO), cached as a cubin in
 * LMDB and loaded with the CUDA driver. Ops use this API internally; it is public so that tools,
 * tests and advanced callers can prebuild, inspect and launch kernels directly.
 *
 * Resolution order for a request: (1) the in-process table (lock-free for hits), (2) the LMDB
 * cache, (3) a compile (one process compiles a key; concurrent processes wait and load its
 * cubin). After sk_freeze_kernel_resolution only (1) is consulted. See docs/architecture.md.
 *
 * Thread safety: every function may be called from any thread. Concurrent resolutions of one
 * key wait for a single compile.
 */
#ifndef SPARKINFER_JIT_H
#define SPARKINFER_JIT_H

#include "../sparkinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest accepted lengths (including the NUL); longer strings are SK_ERR_INVALID_ARGUMENT. */
#define SK_MAX_NAME_EXPR 512
#define SK_MAX_OPTION 256
#define SK_MAX_OPTIONS 32
#define SK_MAX_ARCH 16

/** One kernel instantiation. All strings are borrowed for the duration of the call only. */
typedef struct sk_kernel_request {
  const char *op;         /**< owning op ("quantization.nvfp4"); logs and metadata only */
  const char *source;     /**< embedded source path relative to ops ("test/scale.cuh") */
  const char *name_expr;  /**< __global__ template instantiation ("sk_test::scale<float, 256>") */
  const char *params;     /**< human-readable key params ("dtype=f32 block=256"); logs only */
  const char *arch;       /**< target ("sm_120a"); NULL = the current device's arch (needs GPU) */
  const char *const *options; /**< extra NVRTC options, in order, part of the key; may be NULL */
  size_t num_options;
  int link;               /**< nonzero: NVRTC emits LTO-IR (-dlto), nvJitLink makes the cubin */
} sk_kernel_request;

/** A resolved, loaded kernel. Owned by the library; valid until process exit. */
typedef struct sk_kernel sk_kernel;

/** A 128-bit cache key. */
typedef struct sk_key { uint8_t bytes[16]; } sk_key;

/** Compute the cache key of a request: XXH3-128 of the cache format version, the ABI version,
 *  the hashes of every embedded source the kernel includes, the name expression, the options,
 *  the arch, and the NVRTC (and, when linking, nvJitLink) versions. Nothing else (op, params)
 *  enters the key. req->arch must be set. Needs no GPU. */
SK_API sk_status sk_kernel_key(const sk_kernel_request *req, sk_key *key);

/** Format a key as 32 lowercase hex digits plus NUL into buf (size >= 33). */
SK_API sk_status sk_key_hex(const sk_key *key, char *buf, size_t size);

/** How a request was answered. */
typedef enum sk_resolve_source {
  SK_RESOLVED_MEMORY = 0,   /**< in-process table */
  SK_RESOLVED_DISK = 1,     /**< LMDB cache (this or another process compiled it earlier) */
  SK_RESOLVED_COMPILED = 2, /**< compiled by this call */
  SK_RESOLVED_PEER = 3,     /**< another process compiled it while we waited */
} sk_resolve_source;

typedef struct sk_prepare_info {
  sk_key key;
  sk_resolve_source source;
  size_t cubin_bytes;
  double compile_ms;        /**< NVRTC + link time, when compiled by this call */
} sk_prepare_info;

/** Make sure the request's cubin exists (memory, disk or compile) without loading it: needs no
 *  GPU and no driver. req->arch must be set. Used by sk-warm. `info` may be NULL. */
SK_API sk_status sk_kernel_prepare(const sk_kernel_request *req, sk_prepare_info *info);

/** Resolve a request and load it into the driver (needs a GPU). On success *out is a handle
 *  valid for the life of the process. A memory-table hit takes well under a microsecond.
 *  Errors: SK_ERR_INVALID_ARGUMENT, SK_ERR_NOT_FOUND (unknown source), SK_ERR_COMPILE,
 *  SK_ERR_KERNEL_RESOLUTION_FROZEN, SK_ERR_NO_DRIVER, SK_ERR_NO_DEVICE, SK_ERR_CUDA. */
SK_API sk_status sk_kernel_resolve(const sk_kernel_request *req, sk_kernel **out);

/** Launch geometry. */
typedef struct sk_dim3 { unsigned x, y, z; } sk_dim3;

/** Launch a resolved kernel on `stream` (a CUstream; NULL = the legacy default stream) in the
 *  current CUDA context (the library makes the device's primary context current on first GPU
 *  use if none is). `args` is the cuLaunchKernel argument array. No allocation, no sync, no
 *  compile: safe inside CUDA graph capture. With SPARKINFER_TIMING=1 (and the stream not
 *  capturing) the launch is bracketed by CUDA events. */
SK_API sk_status sk_kernel_launch(const sk_kernel *kernel, sk_dim3 grid, sk_dim3 block,
                                  unsigned shared_bytes, void *stream, void **args);

/** Flags of sk_kernel_launch_ex. */
enum {
  /** Programmatic dependent launch (sm_90+, CUDA 12 driver): the kernel may be scheduled before
   *  the previous kernel in `stream` has finished, so its launch latency overlaps that kernel's
   *  tail. Only for kernels that execute `griddepcontrol.wait` (ops/common/sync.cuh,
   *  pdl_wait_for_previous) before they read or write anything the previous work touches: every
   *  op kernel of the library but the tiled (M > 16) GEMM does. Ignored (a plain launch) below sm_90, without
   *  cuLaunchKernelEx, with SPARKINFER_PDL=0 and with SPARKINFER_TIMING=1; a driver that answers
   *  CUDA_ERROR_NOT_SUPPORTED gets a plain launch instead, and no overlap is asked for again in
   *  this process. Safe in graph capture (the edge becomes a programmatic dependency). */
  SK_LAUNCH_OVERLAP_PREVIOUS = 1u,
};

/** sk_kernel_launch with launch `flags` (SK_LAUNCH_*). Errors: those of sk_kernel_launch, and
 *  SK_ERR_INVALID_ARGUMENT for unknown flag bits. Thread safety: any thread. */
SK_API sk_status sk_kernel_launch_ex(const sk_kernel *kernel, sk_dim3 grid, sk_dim3 block,
                                     unsigned shared_bytes, void *stream, void **args, unsigned flags);

/** Allow up to `bytes` of dynamic shared memory per block (cuKernelSetAttribute /
 *  cuFuncSetAttribute) on the current context's device. Needed whenever static + dynamic shared
 *  memory exceeds 48 KiB. Remembered per kernel and device: a repeat with no more bytes is an
 *  atomic load (plus cuCtxGetDevice), so a one-shot op may call it per launch. Errors:
 *  SK_ERR_INVALID_ARGUMENT (NULL or not loaded, e.g. an offline kernel), SK_ERR_NO_DRIVER,
 *  SK_ERR_CUDA (the attribute call; e.g. more than the device's opt-in maximum). Thread safety:
 *  any thread. */
SK_API sk_status sk_kernel_set_max_dynamic_shared(sk_kernel *kernel, unsigned bytes);

/** The driver handle (a CUfunction, usable with cuLaunchKernel), the lowered (mangled) name,
 *  and the key of a resolved kernel. Any out pointer may be NULL. */
SK_API sk_status sk_kernel_get_info(const sk_kernel *kernel, void **cu_function,
                                    const char **lowered_name, sk_key *key);

/** Names of the kernel sources embedded in this build (sorted). Static. */
SK_API sk_status sk_list_kernel_sources(const char *const **paths, size_t *count);

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_JIT_H */
