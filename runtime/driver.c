/* runtime/driver.c - the CUDA driver, loaded with dlopen on first GPU use so that compiling,
 * caching and the tools work on machines with no GPU and no driver. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime.h"

sk_driver_api sk_cu;
_Static_assert(sizeof(sk_cu_ipc_handle) == sizeof(CUipcMemHandle), "sk_cu_ipc_handle mirrors CUipcMemHandle");

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static sk_status driver_status = SK_ERR_NO_DRIVER;
static char driver_message[512];
static int primary_ordinal = 0;

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void driver_load(void) {
  const char *path = sk_env_str("SPARKINFER_CUDA_DRIVER"); /* docs/env.md: another driver library (the stub) */
  if (!path) path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(driver_message, sizeof driver_message,
             "the CUDA driver (%.256s) could not be loaded: %s", path, dlerror());
    driver_status = SK_ERR_NO_DRIVER;
    return;
  }
  get_proc_fn get_proc = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
  if (!get_proc) {
    snprintf(driver_message, sizeof driver_message,
             "libcuda.so.1 lacks cuGetProcAddress_v2: the driver is older than CUDA 12; "
             "sparkinfer needs a CUDA 12.4+ driver");
    driver_status = SK_ERR_NO_DRIVER;
    return;
  }
  struct { const char *name; void **slot; int version; int required; } table[] = {
#define SK_ENTRY(n, v, req) {#n, (void **)&sk_cu.n, v, req}
      SK_ENTRY(cuInit, 2000, 1),
      SK_ENTRY(cuDriverGetVersion, 2020, 1),
      SK_ENTRY(cuDeviceGet, 2000, 1),
      SK_ENTRY(cuDeviceGetCount, 2000, 1),
      SK_ENTRY(cuDeviceGetAttribute, 2000, 1),
      SK_ENTRY(cuDevicePrimaryCtxRetain, 7000, 1),
      SK_ENTRY(cuCtxGetCurrent, 4000, 1),
      SK_ENTRY(cuCtxSetCurrent, 4000, 1),
      SK_ENTRY(cuCtxGetDevice, 2000, 1),
      SK_ENTRY(cuLibraryLoadData, 12000, 0),
      SK_ENTRY(cuLibraryGetKernel, 12000, 0),
      SK_ENTRY(cuKernelGetFunction, 12000, 0),
      SK_ENTRY(cuKernelSetAttribute, 12000, 0),
      SK_ENTRY(cuModuleLoadData, 2000, 1),
      SK_ENTRY(cuModuleGetFunction, 2000, 1),
      SK_ENTRY(cuFuncSetAttribute, 9000, 1),
      SK_ENTRY(cuLaunchKernel, 4000, 1),
      SK_ENTRY(cuLaunchKernelEx, 12000, 0),
      SK_ENTRY(cuGetErrorName, 6000, 1),
      SK_ENTRY(cuGetErrorString, 6000, 1),
      SK_ENTRY(cuEventCreate, 2000, 1),
      SK_ENTRY(cuEventRecord, 2000, 1),
      SK_ENTRY(cuEventSynchronize, 2000, 1),
      SK_ENTRY(cuEventElapsedTime, 2000, 1),
      SK_ENTRY(cuEventDestroy, 4000, 1),
      SK_ENTRY(cuStreamIsCapturing, 10000, 1),
      SK_ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, 0),
      SK_ENTRY(cuStreamSynchronize, 2000, 0),
      SK_ENTRY(cuMemcpyDtoH, 3020, 0),
      SK_ENTRY(cuMemAlloc, 3020, 0),
      SK_ENTRY(cuMemFree, 3020, 0),
      SK_ENTRY(cuMemsetD8, 3020, 0),
      SK_ENTRY(cuMemcpyHtoD, 3020, 0),
      SK_ENTRY(cuMemcpyDtoHAsync, 3020, 0),
      SK_ENTRY(cuMemcpyAsync, 4000, 0),
      SK_ENTRY(cuCtxSynchronize, 2000, 0),
      SK_ENTRY(cuIpcGetMemHandle, 4010, 0),
      SK_ENTRY(cuIpcOpenMemHandle, 11000, 0),
      SK_ENTRY(cuIpcCloseMemHandle, 4010, 0),
#undef SK_ENTRY
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    CUdriverProcAddressQueryResult found;
    void *fn = NULL;
    CUresult r = get_proc(table[i].name, &fn, table[i].version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (r != CUDA_SUCCESS || !fn) {
      if (!table[i].required) continue;
      snprintf(driver_message, sizeof driver_message,
               "the CUDA driver lacks %s (cuGetProcAddress error %d): driver too old", table[i].name,
               (int)r);
      driver_status = SK_ERR_NO_DRIVER;
      return;
    }
    *table[i].slot = fn;
  }
  CUresult r = (CUresult)sk_cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = "?";
    sk_cu.cuGetErrorName(r, &name);
    snprintf(driver_message, sizeof driver_message, "cuInit failed: %s (%d)%s", name, (int)r,
             r == CUDA_ERROR_NO_DEVICE ? ": no CUDA device is visible" : "");
    driver_status = r == CUDA_ERROR_NO_DEVICE ? SK_ERR_NO_DEVICE : SK_ERR_CUDA;
    return;
  }
  int count = 0;
  sk_cu.cuDeviceGetCount(&count);
  primary_ordinal = sk_config() ? sk_config()->device_ordinal : 0;
  if (count <= 0 || primary_ordinal >= count) {
    snprintf(driver_message, sizeof driver_message, "device ordinal %d requested, %d device(s) visible",
             primary_ordinal, count);
    driver_status = SK_ERR_NO_DEVICE;
    return;
  }
  driver_status = SK_OK;
}

sk_status sk_driver_ensure(void) {
  sk_runtime_ensure_init();
  pthread_once(&driver_once, driver_load);
  if (driver_status != SK_OK) return sk_set_error(driver_status, "%s", driver_message);
  return SK_OK;
}

sk_status sk_cuda_error(sk_cu_result r, const char *call) {
  const char *name = "CUDA_ERROR_UNKNOWN", *str = "";
  if (sk_cu.cuGetErrorName) sk_cu.cuGetErrorName(r, &name);
  if (sk_cu.cuGetErrorString) sk_cu.cuGetErrorString(r, &str);
  return sk_set_error(SK_ERR_CUDA, "%s failed: %s (%d): %s", call, name, r, str ? str : "");
}

sk_status sk_driver_ensure_context(void) {
  SK_TRY(sk_driver_ensure());
  CUcontext ctx = NULL;
  SK_CU(sk_cu.cuCtxGetCurrent((void **)&ctx), "cuCtxGetCurrent");
  if (ctx) return SK_OK;
  CUdevice dev;
  SK_CU(sk_cu.cuDeviceGet(&dev, primary_ordinal), "cuDeviceGet");
  SK_CU(sk_cu.cuDevicePrimaryCtxRetain((void **)&ctx, dev), "cuDevicePrimaryCtxRetain");
  SK_CU(sk_cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return SK_OK;
}

sk_status sk_driver_current_device(int *dev) {
  static _Thread_local void *memo_ctx;
  static _Thread_local int memo_dev;
  SK_TRY(sk_driver_ensure());
  CUcontext ctx = NULL;
  SK_CU(sk_cu.cuCtxGetCurrent((void **)&ctx), "cuCtxGetCurrent");
  if (!ctx) {
    SK_TRY(sk_driver_ensure_context());
    SK_CU(sk_cu.cuCtxGetCurrent((void **)&ctx), "cuCtxGetCurrent");
  }
  if (ctx != memo_ctx) {
    CUdevice d;
    SK_CU(sk_cu.cuCtxGetDevice(&d), "cuCtxGetDevice");
    memo_dev = d;
    memo_ctx = ctx;
  }
  *dev = memo_dev;
  return SK_OK;
}

void sk_arch_from_cc(int major, int minor, char *buf, size_t size) {
  /* Arch-specific targets ("a") unlock wgmma/TMA on sm_90 and block-scaled mma on sm_120. */
  snprintf(buf, size, "sm_%d%d%s", major, minor, major >= 9 ? "a" : "");
}

bool sk_arch_valid(const char *arch) {
  if (!arch || strncmp(arch, "sm_", 3) != 0) return false;
  const char *p = arch + 3;
  int digits = 0;
  while (*p >= '0' && *p <= '9') { p++; digits++; }
  if (digits < 2 || digits > 3) return false;
  if (*p == 'a' || *p == 'f') p++;
  return *p == '\0';
}

int sk_arch_number(const char *arch) {
  if (!sk_arch_valid(arch)) return 0;
  int n = 0;
  for (const char *p = arch + 3; *p >= '0' && *p <= '9'; p++) n = n * 10 + (*p - '0');
  return n;
}

unsigned sk_arch_block_smem_limit(const char *arch) {
  const int n = sk_arch_number(arch);
  if (n == 90 || n == 100 || n == 103) return 227 * 1024;
  if (n == 80 || n == 87) return 163 * 1024;
  return 99 * 1024;
}

SK_API sk_status sk_device_arch(int ordinal, char *buf, size_t size) {
  if (!buf || size < 8) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_device_arch: buf must hold >= 8 bytes");
  SK_TRY(sk_driver_ensure());
  CUdevice dev;
  if (ordinal < 0) {
    SK_TRY(sk_driver_ensure_context());
    SK_CU(sk_cu.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  } else {
    SK_CU(sk_cu.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  }
  int major = 0, minor = 0;
  SK_CU(sk_cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        "cuDeviceGetAttribute");
  SK_CU(sk_cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
        "cuDeviceGetAttribute");
  sk_arch_from_cc(major, minor, buf, size);
  return SK_OK;
}

sk_status sk_device_sm_count(int *out) {
  SK_TRY(sk_driver_ensure_context());
  CUdevice dev;
  SK_CU(sk_cu.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  SK_CU(sk_cu.cuDeviceGetAttribute(out, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  return SK_OK;
}
