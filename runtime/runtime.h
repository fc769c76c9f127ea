/*
 * runtime/runtime.h - internal interfaces between the runtime's parts (driver, JIT, resolution,
 * logging, timing, warm-up record, registry, manifests). Not installed.
 */
#ifndef SK_RUNTIME_H
#define SK_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "internal.h"
#include "sparkinfer/jit.h"

struct cJSON;
struct sk_cache;

/* ---- process state (runtime/state.c) ----------------------------------------------------- */

typedef struct sk_runtime_config {
  int print_progress;          /* SPARKINFER_PRINT_COMPILE_PROGRESS */
  char *compile_log_path;      /* SPARKINFER_COMPILE_LOG */
  int timing;                  /* SPARKINFER_TIMING */
  int overlap_launches;        /* SPARKINFER_PDL: honour SK_LAUNCH_OVERLAP_PREVIOUS */
  char *record_warmup_path;    /* SPARKINFER_RECORD_WARMUP */
  char *cuda_home;             /* toolkit used for NVRTC includes */
  int device_ordinal;          /* SPARKINFER_DEVICE */
  double compile_wait_s;       /* SPARKINFER_COMPILE_WAIT_S */
  int cache_disable;           /* SPARKINFER_CACHE_DISABLE */
  int cache_readonly;          /* SPARKINFER_CACHE_READONLY */
  uint64_t cache_max_bytes;    /* SPARKINFER_CACHE_MAX_BYTES (0 = no cap) */
  uint64_t cache_initial_map;  /* SPARKINFER_CACHE_INITIAL_MAP_BYTES (0 = the store's default) */
} sk_runtime_config;

/* Lazily initialise everything that needs no GPU. Returns the init status (sticky). */
sk_status sk_runtime_ensure_init(void);
const sk_runtime_config *sk_config(void);
/* The process's cache, or NULL when memory-only. */
struct sk_cache *sk_runtime_cache(void);

/* Counters (relaxed atomics). */
typedef struct sk_atomic_counters {
  _Atomic uint64_t memory_hits, disk_hits, disk_misses, corrupt_records, compiles, failures,
      frozen_refusals, peer_waits;
  _Atomic uint64_t compile_ns;
} sk_atomic_counters;
extern sk_atomic_counters sk_counters_g;
#define SK_COUNT(field) atomic_fetch_add_explicit(&sk_counters_g.field, 1, memory_order_relaxed)

/* Freeze state (runtime/state.c). */
extern _Atomic int sk_frozen_g;
unsigned sk_freeze_flags(void);
const char *sk_freeze_reason(void);

/* ---- CUDA driver (runtime/driver.c) ---------------------------------------------------- */

/* Load libcuda.so.1 and its entry points once; SK_ERR_NO_DRIVER / SK_ERR_NO_DEVICE otherwise. */
sk_status sk_driver_ensure(void);
/* Make sure the calling thread has a current context (the device's primary one if none). */
sk_status sk_driver_ensure_context(void);
/* The current context's device ordinal (a context made current as sk_driver_ensure_context
 * does when the thread has none), remembered per thread and context: one cuCtxGetCurrent a
 * call once the thread has seen its context (as the per-thread arch of sk_kernel_resolve). */
sk_status sk_driver_current_device(int *dev);
/* Driver entry points used across the runtime; valid after sk_driver_ensure() == SK_OK. */
typedef int sk_cu_result; /* CUresult */
typedef struct sk_cu_ipc_handle { char reserved[64]; } sk_cu_ipc_handle; /* CUipcMemHandle */
typedef struct sk_driver_api {
  sk_cu_result (*cuInit)(unsigned);
  sk_cu_result (*cuDriverGetVersion)(int *);
  sk_cu_result (*cuDeviceGet)(int *, int);
  sk_cu_result (*cuDeviceGetCount)(int *);
  sk_cu_result (*cuDeviceGetAttribute)(int *, int, int);
  sk_cu_result (*cuDevicePrimaryCtxRetain)(void **, int);
  sk_cu_result (*cuCtxGetCurrent)(void **);
  sk_cu_result (*cuCtxSetCurrent)(void *);
  sk_cu_result (*cuCtxGetDevice)(int *);
  sk_cu_result (*cuLibraryLoadData)(void **, const void *, void *, void *, unsigned, void *,
                                    void *, unsigned);
  sk_cu_result (*cuLibraryGetKernel)(void **, void *, const char *);
  sk_cu_result (*cuModuleLoadData)(void **, const void *);
  sk_cu_result (*cuModuleGetFunction)(void **, void *, const char *);
  sk_cu_result (*cuKernelGetFunction)(void **, void *);
  sk_cu_result (*cuFuncSetAttribute)(void *, int, int);
  sk_cu_result (*cuKernelSetAttribute)(int, int, void *, int);
  sk_cu_result (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, void *, void **, void **);
  sk_cu_result (*cuLaunchKernelEx)(const void *, void *, void **, void **); /* optional (CUDA 12+) */
  sk_cu_result (*cuGetErrorName)(sk_cu_result, const char **);
  sk_cu_result (*cuGetErrorString)(sk_cu_result, const char **);
  sk_cu_result (*cuEventCreate)(void **, unsigned);
  sk_cu_result (*cuEventRecord)(void *, void *);
  sk_cu_result (*cuEventSynchronize)(void *);
  sk_cu_result (*cuEventElapsedTime)(float *, void *, void *);
  sk_cu_result (*cuEventDestroy)(void *);
  sk_cu_result (*cuStreamIsCapturing)(void *, int *);
  sk_cu_result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, void *, int, size_t);
  sk_cu_result (*cuStreamSynchronize)(void *);                            /* optional */
  sk_cu_result (*cuMemcpyDtoH)(void *, unsigned long long, size_t);      /* optional (v2) */
  /* comm.pcie (ops/comm/comm.c): device buffers shared through legacy CUDA IPC; all optional,
   * the communicator checks them */
  sk_cu_result (*cuMemAlloc)(unsigned long long *, size_t);                          /* v2 */
  sk_cu_result (*cuMemFree)(unsigned long long);                                     /* v2 */
  sk_cu_result (*cuMemsetD8)(unsigned long long, unsigned char, size_t);             /* v2 */
  sk_cu_result (*cuMemcpyHtoD)(unsigned long long, const void *, size_t);            /* v2 */
  sk_cu_result (*cuMemcpyDtoHAsync)(void *, unsigned long long, size_t, void *);     /* v2 */
  sk_cu_result (*cuMemcpyAsync)(unsigned long long, unsigned long long, size_t, void *); /* UVA, peers too */
  sk_cu_result (*cuCtxSynchronize)(void);
  sk_cu_result (*cuIpcGetMemHandle)(sk_cu_ipc_handle *, unsigned long long);
  sk_cu_result (*cuIpcOpenMemHandle)(unsigned long long *, sk_cu_ipc_handle, unsigned); /* v2 */
  sk_cu_result (*cuIpcCloseMemHandle)(unsigned long long);
} sk_driver_api;
extern sk_driver_api sk_cu;
/* Set an SK_ERR_CUDA error naming the call and the driver's error name/string. */
sk_status sk_cuda_error(sk_cu_result r, const char *call);
#define SK_CU(call, name)                                                                      \
  do {                                                                                         \
    sk_cu_result sk_cu_r_ = (call);                                                            \
    if (sk_cu_r_ != 0) return sk_cuda_error(sk_cu_r_, name);                                   \
  } while (0)

/* Multiprocessor count of the current context's device. */
sk_status sk_device_sm_count(int *out);
/* "sm_90a" for 9.0, "sm_120a" for 12.0, "sm_121a" for 12.1, ... */
void sk_arch_from_cc(int major, int minor, char *buf, size_t size);
/* Validate an arch string ("sm_" digits, optional 'a' or 'f'). */
bool sk_arch_valid(const char *arch);
/* Compute capability of an arch string ("sm_120a" -> 120); 0 if malformed. */
int sk_arch_number(const char *arch);
/* Largest shared memory one block can have on the arch (static + dynamic, CUDA programming guide,
 * compute capabilities): 227 KiB sm_90/sm_100/sm_103, 163 KiB sm_80/sm_87, else 99 KiB (sm_86,
 * sm_89, sm_120, sm_121, and any arch not listed). For checks that need no GPU. */
unsigned sk_arch_block_smem_limit(const char *arch);

/* ---- JIT (runtime/jit.c) ----------------------------------------------------------------- */

/* What ptxas reported for one kernel (its -v lines in the compile log). */
typedef struct sk_kernel_resources {
  bool known;                  /* false: the log had no report for this kernel */
  unsigned registers, barriers;
  unsigned stack_frame_bytes, spill_store_bytes, spill_load_bytes;
  unsigned static_smem_bytes;
} sk_kernel_resources;

typedef struct sk_compiled {
  void *cubin;            /* malloc'd */
  size_t cubin_size;
  char *lowered_name;     /* malloc'd */
  char *log;              /* malloc'd NVRTC + nvJitLink log ("" if none) */
  double nvrtc_ms, link_ms;
  sk_kernel_resources resources; /* parsed from log for lowered_name */
} sk_compiled;
void sk_compiled_free(sk_compiled *c);

/* The ptxas report of entry function `lowered_name` in a compile log: the lines after its
 * "Compiling entry function '<name>'" up to the next entry. Fields it does not state stay 0;
 * returns out->known. Pure text parsing (tests feed it canned logs). */
bool sk_parse_ptxas_resources(const char *log, const char *lowered_name, sk_kernel_resources *out);
/* Add them to `o` as "resources": {registers, barriers, stack_frame_bytes, spill_store_bytes,
 * spill_load_bytes, static_smem_bytes} when known (the cache metadata and the compile log). */
struct cJSON;
void sk_resources_add_json(struct cJSON *o, const sk_kernel_resources *r);

/* The options the runtime always passes first (part of the key), excluding include paths. */
extern const char *const sk_base_options[];
extern const size_t sk_base_option_count;

/* Compile a request (arch set). On SK_ERR_COMPILE the message holds the log. */
sk_status sk_jit_compile(const sk_kernel_request *req, sk_compiled *out);
/* NVRTC and nvJitLink versions (cached). */
void sk_jit_versions(int *nvrtc_major, int *nvrtc_minor, int *link_major, int *link_minor);

/* Validate a request's fields (arch may be NULL only if allow_null_arch); on success *src (if
 * not NULL) is the request's embedded source. */
struct sk_embedded_source;
sk_status sk_request_validate(const sk_kernel_request *req, bool allow_null_arch,
                              const struct sk_embedded_source **src);

/* ---- kernel table entries (runtime/resolve.c) ------------------------------------------ */

enum { SK_ENTRY_PENDING = 0, SK_ENTRY_READY = 1, SK_ENTRY_FAILED = 2 };

#define SK_KERNEL_SMEM_DEVICES 16
struct sk_kernel {
  sk_key key;
  _Atomic int state;
  _Atomic(void *) function;    /* CUfunction (or CUkernel cast), set once loaded */
  struct sk_kernel *_Atomic next;
  /* request copy (owned) */
  char *op, *source, *name_expr, *params;
  char arch[SK_MAX_ARCH];
  bool overlap_capable;        /* arch is sm_90+: griddepcontrol exists (SK_LAUNCH_OVERLAP_PREVIOUS) */
  char **options;
  size_t num_options;
  int link;
  /* result */
  void *cubin;
  size_t cubin_size;
  char *lowered_name;
  sk_resolve_source how;
  double compile_ms;
  sk_status fail_status;
  char *fail_message;
  void *library;               /* CUlibrary or CUmodule */
  int timing_slot;             /* index in the timing table, -1 if none yet */
  /* Largest MAX_DYNAMIC_SHARED_SIZE_BYTES set so far, per device ordinal (the attribute is per
   * device; ordinals past the array are set every time). */
  _Atomic unsigned dynamic_smem_allowed[SK_KERNEL_SMEM_DEVICES];
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

/* Resolve to a table entry holding the cubin without loading it (no GPU): plans made on a
 * machine without a GPU validate and bind, and their run fails with a clear status. */
sk_status sk_kernel_resolve_offline(const sk_kernel_request *req, sk_kernel **out);

/* Iterate every READY entry (for the warm-up record); cb returns nonzero to stop. */
void sk_table_foreach(int (*cb)(void *ud, const sk_kernel *k), void *ud);

/* ---- logging (runtime/log.c) --------------------------------------------------------- */

typedef enum sk_event_kind {
  SK_EVENT_COMPILE_START,
  SK_EVENT_COMPILE_DONE,
  SK_EVENT_COMPILE_FAIL,
  SK_EVENT_MEMORY_HIT,
  SK_EVENT_DISK_HIT,
  SK_EVENT_DISK_MISS,
  SK_EVENT_CORRUPT,
  SK_EVENT_PEER_WAIT,
  SK_EVENT_FROZEN,
} sk_event_kind;

typedef struct sk_event {
  sk_event_kind kind;
  const sk_kernel *kernel;     /* request + key */
  double nvrtc_ms, link_ms;
  size_t cubin_bytes;
  const sk_kernel_resources *resources; /* compile_done: ptxas's report (may be NULL) */
  const char *detail;          /* failure message or corruption reason */
} sk_event;
void sk_log_event(const sk_event *ev);

/* ---- timing (runtime/timing.c) ------------------------------------------------------- */
/* Wrap a launch with events; only called when sk_config()->timing. */
sk_status sk_timing_launch(sk_kernel *k, sk_dim3 grid, sk_dim3 block, unsigned smem, void *stream,
                           void **args);
void sk_timing_at_exit(void);

/* A kernel's request as a manifest-style JSON object: op, source, name, params, arch, options,
 * link. Shared by the cache record's metadata and the warm-up record; NULL when out of memory. */
struct cJSON *sk_kernel_request_json(const sk_kernel *k);

/* ---- warm-up record (runtime/warmup.c) -------------------------------------------- */
void sk_warmup_note_op(const char *op, const struct cJSON *caps); /* takes a copy */
void sk_warmup_at_exit(void);

/* ---- manifests (runtime/manifest.c) -------------------------------------------------- */

/* An owned kernel request (all strings malloc'd). */
typedef struct sk_owned_request {
  sk_kernel_request req;       /* points into the fields below */
  char *op, *source, *name_expr, *params, *arch;
  char **options;
  size_t num_options;
} sk_owned_request;

typedef struct sk_request_list {
  sk_owned_request *items;
  size_t count, capacity;
} sk_request_list;

sk_status sk_request_list_add(sk_request_list *l, const sk_kernel_request *req);
void sk_request_list_free(sk_request_list *l);

/* SK_ERR_MANIFEST "<where>: unknown field "x"" unless every key of `obj` is in `allowed`
 * (NULL-terminated). Manifests and every op's caps builder use it: unknown fields are typos. */
sk_status sk_json_check_fields(const struct cJSON *obj, const char *where, const char *const *allowed);

/* Parse a manifest's text into requests. `archs` (NULL-terminated list) overrides entry archs
 * and is required for entries without one; every request is produced once per arch.
 * SK_ERR_MANIFEST with a message naming the entry and field on any problem. */
sk_status sk_manifest_parse(const char *text, size_t len, const char *const *archs,
                            sk_request_list *out);

/* ---- op manifests (runtime/op.c) --------------------------------------------------- */

struct sk_op_def;
/* The kernel requests of one manifest "ops" entry for `arch` (the op's caps_from_json and
 * selection; the union over the arch table's devices). SK_ERR_MANIFEST on bad caps. */
sk_status sk_op_build_requests(const struct sk_op_def *def, const struct cJSON *caps, const char *arch,
                               sk_request_list *out);
const struct sk_op_def *sk_find_op(const char *name);
bool sk_op_def_supports(const struct sk_op_def *def, const char *arch);

#endif /* SK_RUNTIME_H */
