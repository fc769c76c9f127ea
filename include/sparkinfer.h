/*
 * sparkinfer.h - core C API of sparkinfer, a JIT-compiled GPU kernel library for local LLM
 * inference on consumer Blackwell (SM120/SM121).
 *
 * Conventions (they hold for every function in this header and in <sparkinfer/...>):
 *  - Every function that can fail returns an sk_status. SK_OK is 0. On failure a human-readable
 *    message is stored for the calling thread; read it with sk_last_error_message().
 *  - No function aborts the process, prints on its own (except the documented log lines), or
 *    takes ownership of caller memory unless its documentation says so.
 *  - Thread safety: all functions are safe to call from any thread concurrently unless stated.
 *  - Initialisation is lazy: the first call that needs the runtime initialises it from the
 *    environment. sk_init() does the same explicitly. Nothing here needs a GPU unless stated;
 *    the CUDA driver (libcuda.so.1) is loaded with dlopen on the first call that needs it.
 *
 * Environment variables (read once, at initialisation):
 *  SPARKINFER_CACHE_DIR             cache directory (default $XDG_CACHE_HOME/sparkinfer, then
 *                                   ~/.cache/sparkinfer)
 *  SPARKINFER_CACHE_READONLY=1      open the cache read-only (a shipped, prebuilt cache)
 *  SPARKINFER_CACHE_MAX_BYTES=N     cap the cache; least recently used records are pruned
 *  SPARKINFER_CACHE_DISABLE=1       memory-only: never touch the disk
 *  SPARKINFER_PRINT_COMPILE_PROGRESS=1|2  one stderr line per compile (2: also cache hits/misses)
 *  SPARKINFER_COMPILE_LOG=FILE      the same events as JSON Lines appended to FILE
 *  SPARKINFER_TIMING=1              time every launch with CUDA events; summary at exit
 *  SPARKINFER_RECORD_WARMUP=FILE    write every kernel this process resolved as an sk-warm manifest
 *  SPARKINFER_CUDA_HOME             toolkit whose include/ NVRTC uses (default CUDA_HOME, then the
 *                                   build-time CUDA_HOME, then /usr/local/cuda)
 *  SPARKINFER_DEVICE=N              device ordinal used when no CUDA context is current (default 0)
 *  SPARKINFER_COMPILE_WAIT_S=N      longest wait for another process's compile of the same key
 *                                   before compiling ourselves (default 300)
 * See docs/env.md for the full list.
 */
#ifndef SPARKINFER_H
#define SPARKINFER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SK_BUILDING_LIBRARY)
#define SK_API __attribute__((visibility("default")))
#else
#define SK_API
#endif

#define SPARKINFER_VERSION_MAJOR 0
#define SPARKINFER_VERSION_MINOR 1
#define SPARKINFER_VERSION_PATCH 0
#define SPARKINFER_VERSION_STRING "0.1.0"
/** ABI version: bumped on any incompatible change of this API or of the kernels' calling
 *  contracts. It is part of every cache key, so a new ABI never loads an old cubin. */
#define SPARKINFER_ABI_VERSION 1

/** Status codes. Values are stable (they are part of the ABI). */
typedef enum sk_status {
  SK_OK = 0,
  SK_ERR_INVALID_ARGUMENT = 1,  /**< a NULL, out-of-range or inconsistent argument */
  SK_ERR_UNSUPPORTED = 2,       /**< valid request that this build, arch or op cannot serve */
  SK_ERR_OUT_OF_MEMORY = 3,     /**< host allocation failed */
  SK_ERR_NO_DRIVER = 4,         /**< libcuda.so.1 could not be loaded or is too old */
  SK_ERR_NO_DEVICE = 5,         /**< no CUDA device, or the requested ordinal does not exist */
  SK_ERR_CUDA = 6,              /**< a CUDA driver call failed; the message names it */
  SK_ERR_COMPILE = 7,           /**< NVRTC or nvJitLink failed; the message holds the log */
  SK_ERR_CACHE = 8,             /**< the on-disk cache could not be used for this operation */
  SK_ERR_KERNEL_RESOLUTION_FROZEN = 9, /**< resolution would compile or load after a freeze */
  SK_ERR_NOT_FOUND = 10,        /**< a named thing (op, source, record) does not exist */
  SK_ERR_MANIFEST = 11,         /**< a warm-up manifest is malformed */
  SK_ERR_INTERNAL = 12,         /**< a bug in sparkinfer; please report the message */
  SK_ERR_TIMEOUT = 13,          /**< a bounded wait ran out */
  SK_ERR_IO = 14,               /**< a file could not be read or written */
} sk_status;

/** Stable, static name of a status ("SK_ERR_COMPILE"). Never NULL, also for unknown values. */
SK_API const char *sk_status_string(sk_status status);

/** Message describing the last failure on the calling thread. Never NULL ("" if none). Owned
 *  by the library; valid until the next sparkinfer call on the same thread. */
SK_API const char *sk_last_error_message(void);

/** Library version string ("0.1.0"). Static. */
SK_API const char *sk_version(void);

/** ABI version the library was built with; compare with SPARKINFER_ABI_VERSION. */
SK_API int sk_abi_version(void);

/** Initialise the runtime from the environment (idempotent, thread-safe). Needs no GPU.
 *  Opening the cache never fails the call: an unusable cache directory degrades to memory-only
 *  with one warning line on stderr (see sk_get_cache_info).
 *  @return SK_OK, SK_ERR_OUT_OF_MEMORY, or SK_ERR_INVALID_ARGUMENT for a malformed env value. */
SK_API sk_status sk_init(void);

/* ---------------------------------------------------------------------------------------- */
/* Freeze                                                                                    */

/** Flags for sk_freeze_kernel_resolution_ex. */
enum {
  /** After the freeze, still allow loading kernels that are in the on-disk cache (never
   *  compiling). Off by default: a disk load can stall a request or break graph capture. */
  SK_FREEZE_ALLOW_DISK_HITS = 1u << 0,
};

/** Freeze kernel resolution for the rest of the process: from now on any kernel that is not
 *  already in this process's memory table is refused with SK_ERR_KERNEL_RESOLUTION_FROZEN (no
 *  compile, no disk load) and the cache takes no more writes. Call it after warm-up, before
 *  serving. Irreversible. A second call keeps the first reason and returns SK_OK.
 *  @param reason  short text echoed in every refusal message (copied); may be NULL. */
SK_API sk_status sk_freeze_kernel_resolution(const char *reason);

/** As sk_freeze_kernel_resolution, with SK_FREEZE_* flags. */
SK_API sk_status sk_freeze_kernel_resolution_ex(const char *reason, unsigned flags);

/** 1 if kernel resolution is frozen, else 0. Lock-free. */
SK_API int sk_kernel_resolution_frozen(void);

/* ---------------------------------------------------------------------------------------- */
/* Cache state and counters                                                                  */

typedef enum sk_cache_mode {
  SK_CACHE_MODE_READWRITE = 0,   /**< LMDB cache opened read-write */
  SK_CACHE_MODE_READONLY = 1,    /**< opened read-only (SPARKINFER_CACHE_READONLY=1) */
  SK_CACHE_MODE_MEMORY_ONLY = 2, /**< no disk cache: disabled, or the directory was unusable */
} sk_cache_mode;

typedef struct sk_cache_info {
  sk_cache_mode mode;
  char dir[1024];          /**< the cache directory ("" when memory-only by choice) */
  char reason[512];        /**< why memory-only, when it is ("" otherwise) */
} sk_cache_info;

/** Describe the cache this process uses. Initialises the runtime if needed. */
SK_API sk_status sk_get_cache_info(sk_cache_info *out);

/** Process-wide resolution counters (monotonic since start or sk_reset_counters). */
typedef struct sk_counters {
  uint64_t memory_hits;     /**< resolutions answered by the in-process table */
  uint64_t disk_hits;       /**< resolutions answered by the LMDB cache */
  uint64_t disk_misses;     /**< LMDB lookups that found nothing usable */
  uint64_t corrupt_records; /**< LMDB records that failed verification (then replaced) */
  uint64_t compiles;        /**< successful compiles done by this process */
  uint64_t failures;        /**< failed resolutions (compile errors, frozen refusals, ...) */
  uint64_t frozen_refusals; /**< resolutions refused because of a freeze */
  uint64_t peer_waits;      /**< times this process waited for another process's compile */
  double compile_seconds;   /**< wall seconds spent in compiles by this process */
} sk_counters;

/** Copy the counters into *out. */
SK_API sk_status sk_get_counters(sk_counters *out);

/** Reset the counters to zero (intended for tests and benchmarks). */
SK_API sk_status sk_reset_counters(void);

/* ---------------------------------------------------------------------------------------- */
/* Timing (SPARKINFER_TIMING=1)                                                              */

typedef struct sk_timing_entry {
  char kernel[160];         /**< op and kernel name expression */
  uint64_t count;
  double mean_us, p50_us, p99_us, total_us;
} sk_timing_entry;

/** Collect per-kernel GPU times measured so far (waits for the recorded events). Writes at
 *  most `capacity` entries, sets *count to the number of kernels timed (may exceed capacity).
 *  With timing disabled *count is 0. */
SK_API sk_status sk_timing_summary(sk_timing_entry *entries, size_t capacity, size_t *count);

/** Print the timing summary table to `out` (stderr if NULL). */
SK_API sk_status sk_timing_report(FILE *out);

/* ---------------------------------------------------------------------------------------- */
/* Warm-up record (SPARKINFER_RECORD_WARMUP=FILE)                                            */

/** Write the warm-up manifest now (it is also written at exit). No-op if recording is off. */
SK_API sk_status sk_warmup_record_flush(void);

/* ---------------------------------------------------------------------------------------- */
/* Op registry                                                                               */

typedef enum sk_op_style {
  SK_OP_PLANNED = 0,   /**< caps -> plan -> scratch specs -> bind -> run */
  SK_OP_ONE_SHOT = 1,  /**< a plain function that resolves its kernels on first use of a shape */
  SK_OP_STATEFUL = 2,  /**< an object with state across calls */
} sk_op_style;

typedef struct sk_op_info {
  const char *name;     /**< "group.op", e.g. "quantization.nvfp4" */
  sk_op_style style;
  const char *summary;  /**< one line */
  const char *archs;    /**< comma-separated archs it supports, e.g. "sm_90a,sm_120a,sm_121a" */
} sk_op_info;

/** Enumerate the ops of this build. *ops points at a static array of *count entries, sorted by
 *  name; valid for the life of the process. Never fails once the library is loaded. */
SK_API sk_status sk_list_ops(const sk_op_info **ops, size_t *count);

/** Whether op `name` supports `arch` ("sm_120a"; NULL = the current device's arch, which
 *  needs a GPU). Sets *supported to 1 or 0. SK_ERR_NOT_FOUND for an unknown op. */
SK_API sk_status sk_op_is_supported(const char *name, const char *arch, int *supported);

/** Arch string of a CUDA device ("sm_90a", "sm_120a", "sm_121a": the arch-specific target that
 *  sparkinfer compiles for). ordinal < 0 means the current context's device. Needs a GPU.
 *  @param buf receives a NUL-terminated string; size >= 16 is enough. */
SK_API sk_status sk_device_arch(int ordinal, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_H */
