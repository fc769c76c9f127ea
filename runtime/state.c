/* runtime/state.c - process-wide state: configuration from the environment, the cache, the
 * freeze, counters and the version/info entry points. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "runtime.h"

#ifndef SK_DEFAULT_CUDA_HOME
#define SK_DEFAULT_CUDA_HOME "/usr/local/cuda"
#endif

sk_atomic_counters sk_counters_g;
_Atomic int sk_frozen_g;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static sk_status init_status = SK_OK;
static char init_message[1024];
static sk_runtime_config config;
static sk_cache *cache;
static sk_cache_info cache_info;

static pthread_mutex_t freeze_mu = PTHREAD_MUTEX_INITIALIZER;
static char freeze_reason[256];
static unsigned freeze_flags_v;

static void at_exit(void) {
  sk_timing_at_exit();
  sk_warmup_at_exit();
}

static char *dup_env(const char *name) {
  const char *v = sk_env_str(name);
  return v ? strdup(v) : NULL;
}

/* Opened on first need, not at init, so that parsing a manifest or a failed sk-warm run never
 * creates a cache directory. The settings were read (and validated) at init. */
static void init_once_fn(void);
static void open_cache(void) {
  pthread_once(&init_once, init_once_fn);
  cache_info.mode = SK_CACHE_MODE_MEMORY_ONLY;
  if (init_status != SK_OK) {
    /* sk_init reports it; a cache opened with half-read settings would be a guess. */
    sk_strlcpy(cache_info.reason, init_message, sizeof cache_info.reason);
    return;
  }
  const int readonly = config.cache_readonly;
  const uint64_t max_bytes = config.cache_max_bytes, initial_map = config.cache_initial_map;
  if (config.cache_disable) {
    sk_strlcpy(cache_info.reason, "disabled by SPARKINFER_CACHE_DISABLE", sizeof cache_info.reason);
    return;
  }
  char dir[1024];
  if (sk_cache_default_dir(dir, sizeof dir) != SK_OK) {
    snprintf(cache_info.reason, sizeof cache_info.reason, "%s", sk_last_error_message());
    sk_warn("kernel cache disabled (memory-only): %s", cache_info.reason);
    return;
  }
  sk_strlcpy(cache_info.dir, dir, sizeof cache_info.dir);
  sk_cache_options o = {.dir = dir, .readonly = readonly, .max_bytes = max_bytes,
                        .initial_map_bytes = initial_map, .claim_timeout_s = config.compile_wait_s};
  if (sk_cache_open(&o, &cache) != SK_OK) {
    cache = NULL;
    snprintf(cache_info.reason, sizeof cache_info.reason, "%s", sk_last_error_message());
    sk_warn("kernel cache disabled (memory-only): %s", cache_info.reason);
    return;
  }
  cache_info.mode = readonly ? SK_CACHE_MODE_READONLY : SK_CACHE_MODE_READWRITE;
  pthread_mutex_lock(&freeze_mu);
  if (atomic_load(&sk_frozen_g)) sk_cache_disable_writes(cache);
  pthread_mutex_unlock(&freeze_mu);
}

static void init_once_fn(void) {
  sk_status s = SK_OK;
  uint64_t dev = 0;
  if (s == SK_OK) s = sk_env_flag("SPARKINFER_PRINT_COMPILE_PROGRESS", 0, &config.print_progress);
  if (s == SK_OK) s = sk_env_flag("SPARKINFER_TIMING", 0, &config.timing);
  if (s == SK_OK) s = sk_env_flag("SPARKINFER_PDL", 1, &config.overlap_launches);
  if (s == SK_OK) s = sk_env_u64("SPARKINFER_DEVICE", 0, &dev);
  if (s == SK_OK) s = sk_env_double("SPARKINFER_COMPILE_WAIT_S", 300.0, &config.compile_wait_s);
  if (s == SK_OK) s = sk_env_flag("SPARKINFER_CACHE_DISABLE", 0, &config.cache_disable);
  if (s == SK_OK) s = sk_env_flag("SPARKINFER_CACHE_READONLY", 0, &config.cache_readonly);
  if (s == SK_OK) s = sk_env_u64("SPARKINFER_CACHE_MAX_BYTES", 0, &config.cache_max_bytes);
  if (s == SK_OK) s = sk_env_u64("SPARKINFER_CACHE_INITIAL_MAP_BYTES", 0, &config.cache_initial_map);
  if (s != SK_OK) {
    snprintf(init_message, sizeof init_message, "%s", sk_last_error_message());
    init_status = s;
  }
  config.device_ordinal = dev > 1024 ? 0 : (int)dev;
  config.compile_log_path = dup_env("SPARKINFER_COMPILE_LOG");
  config.record_warmup_path = dup_env("SPARKINFER_RECORD_WARMUP");
  const char *home = sk_env_str("SPARKINFER_CUDA_HOME");
  if (!home) home = sk_env_str("CUDA_HOME");
  if (!home) home = SK_DEFAULT_CUDA_HOME;
  config.cuda_home = strdup(home);
  atexit(at_exit);
}

sk_status sk_runtime_ensure_init(void) {
  pthread_once(&init_once, init_once_fn);
  if (init_status != SK_OK) return sk_set_error(init_status, "%s", init_message);
  return SK_OK;
}

const sk_runtime_config *sk_config(void) {
  pthread_once(&init_once, init_once_fn);
  return &config;
}

/* The cache file turned out damaged while in use: memory-only from now on, said once. The handle
 * stays open (other threads may be inside a call); it fails every call anyway. */
static atomic_int cache_lost;
static void lose_cache(void) {
  if (atomic_exchange(&cache_lost, 1)) return;
  pthread_mutex_lock(&freeze_mu);
  cache_info.mode = SK_CACHE_MODE_MEMORY_ONLY;
  snprintf(cache_info.reason, sizeof cache_info.reason, "%s", sk_last_error_message());
  pthread_mutex_unlock(&freeze_mu);
  sk_warn("kernel cache disabled (memory-only) from now on: %s", cache_info.reason);
}

sk_cache *sk_runtime_cache(void) {
  pthread_once(&cache_once, open_cache);
  if (SK_UNLIKELY(cache && sk_cache_is_damaged(cache))) { /* the message names the file */
    lose_cache();
    return NULL;
  }
  return cache;
}

SK_API sk_status sk_init(void) { return sk_runtime_ensure_init(); }

SK_API const char *sk_version(void) { return SPARKINFER_VERSION_STRING; }
SK_API int sk_abi_version(void) { return SPARKINFER_ABI_VERSION; }

SK_API sk_status sk_get_cache_info(sk_cache_info *out) {
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_get_cache_info: out is NULL");
  sk_runtime_cache(); /* opens it, and notices a damaged one */
  pthread_mutex_lock(&freeze_mu);
  *out = cache_info;
  pthread_mutex_unlock(&freeze_mu);
  return SK_OK;
}

SK_API sk_status sk_freeze_kernel_resolution_ex(const char *reason, unsigned flags) {
  if (flags & ~(unsigned)SK_FREEZE_ALLOW_DISK_HITS)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_freeze_kernel_resolution_ex: unknown flags 0x%x", flags);
  pthread_once(&init_once, init_once_fn);
  pthread_mutex_lock(&freeze_mu);
  if (!atomic_load(&sk_frozen_g)) {
    sk_strlcpy(freeze_reason, reason && *reason ? reason : "(no reason given)", sizeof freeze_reason);
    freeze_flags_v = flags;
    if (cache) sk_cache_disable_writes(cache);
    atomic_store(&sk_frozen_g, 1);
  }
  pthread_mutex_unlock(&freeze_mu);
  return SK_OK;
}

SK_API sk_status sk_freeze_kernel_resolution(const char *reason) {
  return sk_freeze_kernel_resolution_ex(reason, 0);
}

SK_API int sk_kernel_resolution_frozen(void) { return atomic_load_explicit(&sk_frozen_g, memory_order_acquire); }

/* Reason and flags are written before the flag is set and never change after. */
unsigned sk_freeze_flags(void) { return freeze_flags_v; }
const char *sk_freeze_reason(void) { return freeze_reason; }

SK_API sk_status sk_get_counters(sk_counters *out) {
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_get_counters: out is NULL");
#define LOAD(f) out->f = atomic_load_explicit(&sk_counters_g.f, memory_order_relaxed)
  LOAD(memory_hits); LOAD(disk_hits); LOAD(disk_misses); LOAD(corrupt_records); LOAD(compiles);
  LOAD(failures); LOAD(frozen_refusals); LOAD(peer_waits);
#undef LOAD
  out->compile_seconds = (double)atomic_load(&sk_counters_g.compile_ns) * 1e-9;
  return SK_OK;
}

SK_API sk_status sk_reset_counters(void) {
#define ZERO(f) atomic_store_explicit(&sk_counters_g.f, 0, memory_order_relaxed)
  ZERO(memory_hits); ZERO(disk_hits); ZERO(disk_misses); ZERO(corrupt_records); ZERO(compiles);
  ZERO(failures); ZERO(frozen_refusals); ZERO(peer_waits); ZERO(compile_ns);
#undef ZERO
  return SK_OK;
}
