/* tests/stub/libcuda_stub.c - a stand-in CUDA driver (built as $(BUILD)/stub/libcuda.so.1) that
 * does no device work: it reports one device (compute capability SK_STUB_CC, default 90, with
 * SK_STUB_SMS SMs, default 132), hands out fake contexts, modules and functions, and accepts every
 * launch, copy and allocation as a no-op. Put its folder first on LD_LIBRARY_PATH to measure what
 * the library itself costs on the host per call with no driver time in it (bench_host_mm), on a
 * machine without a GPU. Device memory is never real: nothing may read results.
 *
 * The runtime resolves every driver entry through cuGetProcAddress_v2; names the stub does not
 * model get a function that returns CUDA_SUCCESS and writes nothing. Every call is counted per
 * entry: sk_stub_driver_calls() reports them, so a benchmark also shows how many driver calls a
 * library call makes (each costs real time on a real driver).
 *
 * Launches are checked as a real driver would refuse them, with CUDA_ERROR_INVALID_VALUE: a grid
 * or block out of range (grid y, z <= 65535; 1..1024 threads, block z <= 64), and dynamic shared
 * memory above 48 KiB that the kernel was not opted in to (cuFuncSetAttribute /
 * cuKernelSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES), or an opt-in above the device's per-block
 * limit (227 KiB on sm_90, 99 KiB on sm_120 / sm_121). Each kernel handle is distinct, so the
 * opt-ins are tracked per kernel. Static shared memory is not known here (it is in the cubin). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;

/* Exported so a program can check that this is the driver it runs on (dlsym). */
EXPORT const int sk_stub_driver = 1;

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

static char fake_ctx, fake_module;

/* Call counts, per entry name handed out (the first MAX_ENTRIES names). */
#define MAX_ENTRIES 96
static const char *entry_name[MAX_ENTRIES];
static unsigned long long entry_calls[MAX_ENTRIES];
static int num_entries;

EXPORT int sk_stub_driver_calls(int index, const char **name, unsigned long long *calls) {
  if (index < 0 || index >= num_entries) return 0;
  *name = entry_name[index];
  *calls = __atomic_load_n(&entry_calls[index], __ATOMIC_RELAXED);
  return 1;
}
#define COUNT(i) __atomic_fetch_add(&entry_calls[i], 1, __ATOMIC_RELAXED)
static void *current_ctx;

static CUresult ok(void) { return 0; }
static CUresult cu_init(unsigned flags) { return (void)flags, 0; }
static CUresult cu_driver_version(int *v) { return *v = 13000, 0; }
static CUresult cu_device_get(int *dev, int ordinal) { return *dev = ordinal, ordinal == 0 ? 0 : 101 /* invalid device */; }
static CUresult cu_device_count(int *n) { return *n = 1, 0; }
static CUresult cu_device_attribute(int *v, int attr, int dev) {
  (void)dev;
  const int cc = env_int("SK_STUB_CC", 90);
  switch (attr) {
  case 75: *v = cc / 10; break;                          /* compute capability major */
  case 76: *v = cc % 10; break;                          /* minor */
  case 16: *v = env_int("SK_STUB_SMS", 132); break;      /* multiprocessor count */
  case 97: *v = cc == 90 ? 227 * 1024 : 99 * 1024; break; /* max shared memory per block (opt-in) */
  case 81: *v = cc == 90 ? 228 * 1024 : 100 * 1024; break; /* max shared memory per SM */
  case 8: *v = 48 * 1024; break;                          /* shared memory per block */
  case 1: *v = 1024; break;                               /* max threads per block */
  case 10: *v = 32; break;                                /* warp size */
  default: *v = 1; break;
  }
  return 0;
}
static CUresult cu_retain(void **ctx, int dev) { return (void)dev, *ctx = &fake_ctx, 0; }
static CUresult cu_ctx_get(void **ctx) { return *ctx = current_ctx, 0; }
static CUresult cu_ctx_set(void *ctx) { return current_ctx = ctx, 0; }
static CUresult cu_ctx_device(int *dev) { return *dev = 0, 0; }
static CUresult cu_load(void **out) { return *out = &fake_module, 0; }

/* Kernel handles: distinct entries of a table, each with its dynamic shared memory opt-in. */
#define MAX_KERNELS 8192
typedef struct stub_kernel {
  int max_dynamic_smem;                      /* the opt-in (48 KiB without one) */
  unsigned long long launches;               /* accepted launches */
  unsigned max_threads, max_launched_smem;   /* the largest block and dynamic shared memory launched */
} stub_kernel;
static stub_kernel kernels[MAX_KERNELS];
static int num_kernels;
static pthread_mutex_t kernel_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult cu_get(void **out) {
  pthread_mutex_lock(&kernel_lock);
  const int i = num_kernels < MAX_KERNELS ? num_kernels++ : MAX_KERNELS - 1;
  memset(&kernels[i], 0, sizeof kernels[i]);
  kernels[i].max_dynamic_smem = 48 * 1024;
  pthread_mutex_unlock(&kernel_lock);
  return *out = &kernels[i], 0;
}
static CUresult cu_kernel_function(void **f, void *kernel) { return *f = kernel, 0; }
static stub_kernel *kernel_of(const void *h) {
  const stub_kernel *k = h;
  return k >= kernels && k < kernels + MAX_KERNELS ? (stub_kernel *)k : NULL;
}
#define INVALID_VALUE 1
#define MAX_DYNAMIC_SHARED_ATTR 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
static CUresult set_attribute(void *h, int attr, int value) {
  stub_kernel *k = kernel_of(h);
  if (!k) return INVALID_VALUE;
  if (attr == MAX_DYNAMIC_SHARED_ATTR) {
    const int cc = env_int("SK_STUB_CC", 90), optin = cc == 90 ? 227 * 1024 : 99 * 1024;
    if (value < 0 || value > optin) return INVALID_VALUE;
    k->max_dynamic_smem = value > 48 * 1024 ? value : 48 * 1024;
  }
  return 0;
}
static CUresult cu_func_set_attribute(void *f, int attr, int value) { return set_attribute(f, attr, value); }
static CUresult cu_kernel_set_attribute(int attr, int value, void *kernel, int dev) { return (void)dev, set_attribute(kernel, attr, value); }

/* What a driver refuses at launch. */
static CUresult check_launch(const void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned smem) {
  const stub_kernel *k = kernel_of(f);
  if (!k) return 400; /* CUDA_ERROR_INVALID_HANDLE */
  if (!gx || !gy || !gz || gx > 0x7FFFFFFFu || gy > 65535 || gz > 65535) return INVALID_VALUE;
  if (!bx || !by || !bz || bz > 64 || (unsigned long long)bx * by * bz > 1024) return INVALID_VALUE;
  if (smem > (unsigned)k->max_dynamic_smem) return INVALID_VALUE;
  stub_kernel *w = (stub_kernel *)k;
  pthread_mutex_lock(&kernel_lock);
  w->launches++;
  if (bx * by * bz > w->max_threads) w->max_threads = bx * by * bz;
  if (smem > w->max_launched_smem) w->max_launched_smem = smem;
  pthread_mutex_unlock(&kernel_lock);
  return 0;
}

/* What kernel handle `h` (a CUfunction / CUkernel the stub handed out) was launched with: the
 * number of launches (0 for an unknown handle), its largest block and dynamic shared memory. */
EXPORT unsigned long long sk_stub_kernel_launched(const void *h, unsigned *max_threads, unsigned *max_smem) {
  const stub_kernel *k = kernel_of(h);
  if (!k) return 0;
  pthread_mutex_lock(&kernel_lock);
  *max_threads = k->max_threads, *max_smem = k->max_launched_smem;
  const unsigned long long n = k->launches;
  pthread_mutex_unlock(&kernel_lock);
  return n;
}
static CUresult cu_error_name(CUresult r, const char **s) {
  *s = r == 1 ? "CUDA_ERROR_INVALID_VALUE (stub)" : r == 400 ? "CUDA_ERROR_INVALID_HANDLE (stub)" : "CUDA_ERROR (stub)";
  return 0;
}
static CUresult cu_capturing(void *stream, int *status) { return (void)stream, *status = 0, 0; }
static CUresult cu_occupancy(int *n) { return *n = 1, 0; }
static CUresult cu_elapsed(float *ms) { return *ms = 0.0f, 0; }
static CUresult cu_mem_alloc(unsigned long long *p, size_t bytes) {
  static unsigned long long next = 0x100000000ull;
  *p = next;
  next += (bytes + 0xFFFFF) & ~0xFFFFFull;
  return 0;
}

/* The last cuLaunchKernelEx's configuration (CUlaunchConfig / CUlaunchAttribute, mirrored):
 * which attributes a launch sets shows in sk_stub_last_launch. */
typedef struct stub_attr { int id; char pad[4]; unsigned char value[64]; } stub_attr;
typedef struct stub_config {
  unsigned grid[3], block[3], smem;
  void *stream;
  const stub_attr *attrs;
  unsigned num_attrs;
} stub_config;
static __thread int last_attr_ids[8];
static __thread unsigned last_num_attrs;
static __thread unsigned last_grid, last_block, last_smem;
static CUresult cu_launch_ex(const stub_config *c, const void *f) {
  const CUresult r = check_launch(f, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2], c->smem);
  if (r) return r;
  last_num_attrs = c->num_attrs;
  for (unsigned i = 0; i < c->num_attrs && i < 8; i++) last_attr_ids[i] = c->attrs[i].id;
  last_grid = c->grid[0] * c->grid[1] * c->grid[2], last_block = c->block[0] * c->block[1] * c->block[2], last_smem = c->smem;
  return 0;
}
static CUresult cu_launch(const void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned smem) {
  return check_launch(f, gx, gy, gz, bx, by, bz, smem);
}
/* The calling thread's last cuLaunchKernelEx: grid and block sizes, dynamic shared memory and
 * its attribute ids (up to 8 written; the count is returned). */
EXPORT unsigned sk_stub_last_launch(unsigned *grid, unsigned *block, unsigned *smem, int ids[8]) {
  *grid = last_grid, *block = last_block, *smem = last_smem;
  for (unsigned i = 0; i < last_num_attrs && i < 8; i++) ids[i] = last_attr_ids[i];
  return last_num_attrs;
}

/* cuIpcOpenMemHandle(CUdeviceptr *, CUipcMemHandle (64 bytes, by value: on the stack), flags):
 * a fresh fake address per mapping. */
static CUresult cu_ipc_open(unsigned long long *p) { return cu_mem_alloc(p, 1); }

static const struct { const char *name; void *fn; } table[] = {
    {"cuIpcOpenMemHandle", (void *)cu_ipc_open},
    {"cuLaunchKernelEx", (void *)cu_launch_ex},
    {"cuLaunchKernel", (void *)cu_launch},
    {"cuFuncSetAttribute", (void *)cu_func_set_attribute},
    {"cuKernelSetAttribute", (void *)cu_kernel_set_attribute},
    {"cuInit", (void *)cu_init},
    {"cuDriverGetVersion", (void *)cu_driver_version},
    {"cuDeviceGet", (void *)cu_device_get},
    {"cuDeviceGetCount", (void *)cu_device_count},
    {"cuDeviceGetAttribute", (void *)cu_device_attribute},
    {"cuDevicePrimaryCtxRetain", (void *)cu_retain},
    {"cuCtxGetCurrent", (void *)cu_ctx_get},
    {"cuCtxSetCurrent", (void *)cu_ctx_set},
    {"cuCtxGetDevice", (void *)cu_ctx_device},
    {"cuLibraryLoadData", (void *)cu_load},
    {"cuModuleLoadData", (void *)cu_load},
    {"cuLibraryGetKernel", (void *)cu_get},
    {"cuKernelGetFunction", (void *)cu_kernel_function},
    {"cuModuleGetFunction", (void *)cu_get},
    {"cuGetErrorName", (void *)cu_error_name},
    {"cuGetErrorString", (void *)cu_error_name},
    {"cuStreamIsCapturing", (void *)cu_capturing},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void *)cu_occupancy},
    {"cuEventElapsedTime", (void *)cu_elapsed},
    {"cuMemAlloc", (void *)cu_mem_alloc},
};

/* Each name handed out gets a trampoline of its own that counts the call and forwards the first
 * eight integer arguments to the modelled function or to ok(): every driver entry the runtime
 * uses passes integers and pointers only, and the modelled ones read at most eight (cuLaunchKernel:
 * up to its shared memory size; the SysV x86-64 and AAPCS64 conventions pass the first six / eight
 * in registers and the rest in the caller's outgoing stack area, which a trampoline with more
 * parameters than its caller passed only reads). */
typedef CUresult (*impl_fn)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t);
static impl_fn entry_impl[MAX_ENTRIES];
#define T(b, j)                                                                                    \
  static CUresult t##b##_##j(uintptr_t a, uintptr_t b_, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f, uintptr_t g, \
                              uintptr_t h) {                                                        \
    COUNT(b * 8 + j);                                                                              \
    return entry_impl[b * 8 + j](a, b_, c, d, e, f, g, h);                                         \
  }
#define T8(b) T(b, 0) T(b, 1) T(b, 2) T(b, 3) T(b, 4) T(b, 5) T(b, 6) T(b, 7)
T8(0) T8(1) T8(2) T8(3) T8(4) T8(5) T8(6) T8(7) T8(8) T8(9) T8(10) T8(11)
#define A8(b) (void *)t##b##_0, (void *)t##b##_1, (void *)t##b##_2, (void *)t##b##_3, (void *)t##b##_4, (void *)t##b##_5, \
              (void *)t##b##_6, (void *)t##b##_7
static void *const trampolines[MAX_ENTRIES] = {A8(0), A8(1), A8(2), A8(3), A8(4), A8(5), A8(6), A8(7), A8(8), A8(9), A8(10), A8(11)};
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
  (void)version, (void)flags;
  if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
  void *impl = (void *)ok; /* launches, copies, attributes, syncs, frees: accepted, nothing done */
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(table[i].name, symbol)) impl = table[i].fn;
  pthread_mutex_lock(&table_lock);
  int slot = -1;
  for (int i = 0; i < num_entries; i++)
    if (!strcmp(entry_name[i], symbol)) slot = i;
  if (slot < 0 && num_entries < MAX_ENTRIES) {
    slot = num_entries++;
    entry_name[slot] = strdup(symbol);
    entry_impl[slot] = (impl_fn)impl;
  }
  pthread_mutex_unlock(&table_lock);
  *pfn = slot < 0 ? impl : trampolines[slot];
  return 0;
}
