/* runtime/resolve.c - cache keys, the in-process kernel table, resolution (memory -> LMDB ->
 * compile, with cross-process single flight), loading and launching. */
#include <cjson/cJSON.h>
#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#define XXH_INLINE_ALL /* the key hash is on the hit path: let it inline */
#include <xxhash.h>

#include "cache.h"
#include "embedded.h"
#include "runtime.h"

/* ---- key ------------------------------------------------------------------------------------ */

typedef struct key_writer {
  uint8_t *p, *end;
  bool overflow;
} key_writer;

static inline void kw_bytes(key_writer *w, const void *data, size_t n) {
  if ((size_t)(w->end - w->p) < n) { w->overflow = true; return; }
  memcpy(w->p, data, n);
  w->p += n;
}
static inline void kw_u32(key_writer *w, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  kw_bytes(w, b, 4);
}
static inline void kw_u64(key_writer *w, uint64_t v) {
  kw_u32(w, (uint32_t)v);
  kw_u32(w, (uint32_t)(v >> 32));
}
/* Length-prefixed, so that no two different field sequences serialise alike. */
static inline void kw_str(key_writer *w, const char *s) {
  size_t n = strlen(s);
  kw_u32(w, (uint32_t)n);
  kw_bytes(w, s, n);
}

/* The part of every key's preimage that is the same for all requests of this process, hashed
 * once: a key is XXH3-128 over (XXH3-64 of this constant part, the request's own fields), so a
 * memory-table hit hashes ~60 bytes instead of ~160. */
static uint64_t key_prefix_digest;
static int key_link_major, key_link_minor;
static pthread_once_t key_prefix_once = PTHREAD_ONCE_INIT;

static void key_prefix_build(void) {
  uint8_t key_prefix[512];
  key_writer w = {key_prefix, key_prefix + sizeof key_prefix, false};
  static const char tag[] = "sparkinfer-kernel-key";
  kw_bytes(&w, tag, sizeof tag);
  kw_u32(&w, SK_CACHE_FORMAT_VERSION);
  kw_u32(&w, SPARKINFER_ABI_VERSION);
  kw_u32(&w, (uint32_t)sk_base_option_count);
  for (size_t i = 0; i < sk_base_option_count; i++) kw_str(&w, sk_base_options[i]);
  int nv_major, nv_minor;
  sk_jit_versions(&nv_major, &nv_minor, &key_link_major, &key_link_minor);
  kw_u32(&w, (uint32_t)nv_major);
  kw_u32(&w, (uint32_t)nv_minor);
  key_prefix_digest = XXH3_64bits(key_prefix, (size_t)(w.p - key_prefix));
}

/* The key's preimage (docs/architecture.md, "Cache key"). `req` is validated, arch set. */
static sk_key compute_key(const sk_kernel_request *req, const sk_embedded_source *src) {
  uint8_t buf[SK_MAX_NAME_EXPR + (SK_MAX_OPTIONS + 8) * (SK_MAX_OPTION + 4) + 768];
  pthread_once(&key_prefix_once, key_prefix_build);
  key_writer w = {buf, buf + sizeof buf, false};
  kw_u64(&w, key_prefix_digest);
  kw_u64(&w, src->closure_hash);
  kw_str(&w, req->name_expr);
  kw_u32(&w, (uint32_t)req->num_options);
  for (size_t i = 0; i < req->num_options; i++) kw_str(&w, req->options[i]);
  kw_str(&w, req->arch);
  kw_u32(&w, req->link ? 1u : 0u);
  if (req->link) {
    kw_u32(&w, (uint32_t)key_link_major);
    kw_u32(&w, (uint32_t)key_link_minor);
  }
  /* Bounds of every field are validated, so the buffer cannot overflow; stay safe anyway. */
  XXH128_hash_t h = XXH3_128bits(buf, (size_t)(w.p - buf));
  sk_key key;
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  memcpy(key.bytes, c.digest, 16);
  if (w.overflow) key.bytes[0] ^= 0xff; /* unreachable given validation */
  return key;
}

SK_API sk_status sk_kernel_key(const sk_kernel_request *req, sk_key *key) {
  if (!key) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_kernel_key: key is NULL");
  SK_TRY(sk_runtime_ensure_init());
  const sk_embedded_source *src;
  SK_TRY(sk_request_validate(req, false, &src));
  *key = compute_key(req, src);
  return SK_OK;
}

SK_API sk_status sk_key_hex(const sk_key *key, char *buf, size_t size) {
  if (!key || !buf || size < 33) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_key_hex: needs a key and a 33-byte buffer");
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    buf[2 * i] = hex[key->bytes[i] >> 4];
    buf[2 * i + 1] = hex[key->bytes[i] & 15];
  }
  buf[32] = 0;
  return SK_OK;
}

/* ---- the in-process table ------------------------------------------------------------------ */

/* Insert-only hash table: fixed bucket array of atomic list heads. Readers never lock: entries
 * are published with a release CAS and never freed, so a hit is a hash, an index and a short
 * list walk. */
#define TABLE_BUCKETS 4096
static sk_kernel *_Atomic table[TABLE_BUCKETS];

static inline size_t bucket_of(const sk_key *k) {
  uint64_t v;
  memcpy(&v, k->bytes, 8);
  return (size_t)(v & (TABLE_BUCKETS - 1));
}

static sk_kernel *table_find(const sk_key *k) {
  sk_kernel *e = atomic_load_explicit(&table[bucket_of(k)], memory_order_acquire);
  for (; e; e = atomic_load_explicit(&e->next, memory_order_acquire))
    if (!memcmp(e->key.bytes, k->bytes, 16)) return e;
  return NULL;
}

/* Insert `fresh` unless the key is already present; returns the entry that is in the table. */
static sk_kernel *table_insert(sk_kernel *fresh) {
  sk_kernel *_Atomic *head = &table[bucket_of(&fresh->key)];
  sk_kernel *old = atomic_load_explicit(head, memory_order_acquire);
  for (;;) {
    for (sk_kernel *e = old; e; e = atomic_load_explicit(&e->next, memory_order_acquire))
      if (!memcmp(e->key.bytes, fresh->key.bytes, 16)) return e;
    atomic_store_explicit(&fresh->next, old, memory_order_relaxed);
    if (atomic_compare_exchange_weak_explicit(head, &old, fresh, memory_order_acq_rel, memory_order_acquire))
      return fresh;
  }
}

void sk_table_foreach(int (*cb)(void *ud, const sk_kernel *k), void *ud) {
  for (size_t b = 0; b < TABLE_BUCKETS; b++)
    for (sk_kernel *e = atomic_load_explicit(&table[b], memory_order_acquire); e;
         e = atomic_load_explicit(&e->next, memory_order_acquire))
      if (atomic_load_explicit(&e->state, memory_order_acquire) == SK_ENTRY_READY && cb(ud, e)) return;
}

static void entry_free(sk_kernel *e) {
  if (!e) return;
  free(e->op); free(e->source); free(e->name_expr); free(e->params);
  for (size_t i = 0; i < e->num_options; i++) free(e->options[i]);
  free(e->options);
  free(e->cubin); free(e->lowered_name); free(e->fail_message);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

static sk_kernel *entry_new(const sk_kernel_request *req, const sk_key *key) {
  sk_kernel *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->key = *key;
  e->timing_slot = -1;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->op = strdup(req->op ? req->op : "");
  e->source = strdup(req->source);
  e->name_expr = strdup(req->name_expr);
  e->params = strdup(req->params ? req->params : "");
  sk_strlcpy(e->arch, req->arch, sizeof e->arch);
  /* Decided once here, not per launch: programmatic dependent launch needs sm_90+. */
  e->overlap_capable = sk_arch_number(e->arch) >= 90;
  e->link = req->link ? 1 : 0;
  e->num_options = req->num_options;
  e->options = calloc(req->num_options + 1, sizeof(char *));
  bool ok = e->op && e->source && e->name_expr && e->params && e->options;
  for (size_t i = 0; ok && i < req->num_options; i++) ok = (e->options[i] = strdup(req->options[i])) != NULL;
  if (!ok) { entry_free(e); return NULL; }
  return e;
}

static sk_kernel_request entry_request(const sk_kernel *e) {
  sk_kernel_request r = {e->op, e->source, e->name_expr, e->params, e->arch,
                         (const char *const *)e->options, e->num_options, e->link};
  return r;
}

static void key_hex_prefix(const sk_key *k, char out[13]) {
  char hex[33];
  sk_key_hex(k, hex, sizeof hex);
  memcpy(out, hex, 12);
  out[12] = 0;
}

/* ---- producing the cubin ------------------------------------------------------------------- */

cJSON *sk_kernel_request_json(const sk_kernel *k) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "op", k->op);
  cJSON_AddStringToObject(o, "source", k->source);
  cJSON_AddStringToObject(o, "name", k->name_expr);
  cJSON_AddStringToObject(o, "params", k->params);
  cJSON_AddStringToObject(o, "arch", k->arch);
  cJSON *opts = cJSON_AddArrayToObject(o, "options");
  for (size_t i = 0; opts && i < k->num_options; i++) cJSON_AddItemToArray(opts, cJSON_CreateString(k->options[i]));
  cJSON_AddBoolToObject(o, "link", k->link);
  return o;
}

static char *metadata_json(const sk_kernel *e, const char *log, const sk_kernel_resources *resources) {
  cJSON *o = sk_kernel_request_json(e);
  if (!o) return NULL;
  int nv_major, nv_minor, ln_major, ln_minor;
  sk_jit_versions(&nv_major, &nv_minor, &ln_major, &ln_minor);
  char ver[32];
  snprintf(ver, sizeof ver, "%d.%d", nv_major, nv_minor);
  cJSON_AddStringToObject(o, "nvrtc", ver);
  if (e->link) {
    snprintf(ver, sizeof ver, "%d.%d", ln_major, ln_minor);
    cJSON_AddStringToObject(o, "nvjitlink", ver);
  }
  cJSON_AddStringToObject(o, "library", SPARKINFER_VERSION_STRING);
  cJSON_AddStringToObject(o, "log", log ? log : "");
  sk_resources_add_json(o, resources);
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

static sk_status take_record(sk_kernel *e, const sk_record *rec, void *owned) {
  e->cubin = malloc(rec->cubin_size ? rec->cubin_size : 1);
  e->lowered_name = strdup(rec->lowered_name);
  if (!e->cubin || !e->lowered_name) {
    free(owned);
    return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory copying a cached cubin");
  }
  memcpy(e->cubin, rec->cubin, rec->cubin_size);
  e->cubin_size = rec->cubin_size;
  free(owned);
  return SK_OK;
}

static _Atomic uint64_t compile_sequence;

static sk_status compile_entry(sk_kernel *e, sk_cache *cache, bool store) {
  sk_kernel_request req = entry_request(e);
  sk_event ev = {.kind = SK_EVENT_COMPILE_START, .kernel = e};
  sk_log_event(&ev);
  double t0 = sk_now_seconds();
  sk_compiled c;
  sk_status s = sk_jit_compile(&req, &c);
  double secs = sk_now_seconds() - t0;
  if (s != SK_OK) {
    ev.kind = SK_EVENT_COMPILE_FAIL;
    ev.detail = sk_last_error_message();
    sk_log_event(&ev);
    return s;
  }
  atomic_fetch_add(&sk_counters_g.compile_ns, (uint64_t)(secs * 1e9));
  SK_COUNT(compiles);
  atomic_fetch_add(&compile_sequence, 1);
  e->cubin = c.cubin;
  e->cubin_size = c.cubin_size;
  e->lowered_name = c.lowered_name;
  e->compile_ms = c.nvrtc_ms + c.link_ms;
  c.cubin = NULL;
  c.lowered_name = NULL;
  ev.kind = SK_EVENT_COMPILE_DONE;
  ev.nvrtc_ms = c.nvrtc_ms;
  ev.link_ms = c.link_ms;
  ev.cubin_bytes = e->cubin_size;
  ev.resources = &c.resources;
  sk_log_event(&ev);
  if (store && cache) {
    char *meta = metadata_json(e, c.log, &c.resources);
    sk_record rec = {.format_version = SK_CACHE_FORMAT_VERSION,
                     .compile_ms = (uint32_t)(e->compile_ms + 0.5),
                     .lowered_name = e->lowered_name,
                     .metadata_json = meta ? meta : "{}",
                     .cubin = e->cubin,
                     .cubin_size = e->cubin_size};
    memcpy(rec.key, e->key.bytes, 16);
    sk_strlcpy(rec.arch, e->arch, sizeof rec.arch);
    if (sk_cache_put(cache, &rec) != SK_OK)
      sk_warn("could not store %s [%s] in the kernel cache: %s", e->name_expr, e->arch, sk_last_error_message());
    free(meta);
  }
  sk_compiled_free(&c);
  return SK_OK;
}

/* Memory miss, not frozen: LMDB, then a single-flight compile. */
static sk_status produce_cubin(sk_kernel *e) {
  sk_cache *cache = sk_runtime_cache();
  if (!cache) {
    e->how = SK_RESOLVED_COMPILED;
    return compile_entry(e, NULL, false);
  }
  sk_lookup lk;
  sk_record rec;
  void *owned = NULL;
  sk_event ev = {.kernel = e};
  if (sk_cache_get(cache, e->key.bytes, &lk, &rec, &owned) != SK_OK) {
    if (!sk_runtime_cache()) { /* the file is damaged: memory-only from now on (warned once) */
      e->how = SK_RESOLVED_COMPILED;
      return compile_entry(e, NULL, false);
    }
    sk_warn("kernel cache read failed for %s [%s], treating as a miss: %s", e->name_expr, e->arch,
            sk_last_error_message());
  } else {
    if (lk == SK_LOOKUP_HIT) {
      SK_COUNT(disk_hits);
      ev.kind = SK_EVENT_DISK_HIT;
      sk_log_event(&ev);
      e->how = SK_RESOLVED_DISK;
      return take_record(e, &rec, owned);
    }
    if (lk == SK_LOOKUP_CORRUPT) {
      SK_COUNT(corrupt_records);
      ev.kind = SK_EVENT_CORRUPT;
      ev.detail = sk_last_error_message();
      sk_log_event(&ev);
    }
  }
  SK_COUNT(disk_misses);
  ev.kind = SK_EVENT_DISK_MISS;
  ev.detail = NULL;
  sk_log_event(&ev);
  if (sk_kernel_resolution_frozen()) {
    /* Frozen while we were looking: never compile after a freeze. */
    return SK_ERR_KERNEL_RESOLUTION_FROZEN;
  }
  sk_acquire acq;
  int waited = 0;
  owned = NULL;
  if (sk_cache_acquire(cache, e->key.bytes, sk_config()->compile_wait_s, &acq, &waited, &rec, &owned) != SK_OK) {
    sk_warn("kernel cache claim for %s failed, compiling without it: %s", e->name_expr, sk_last_error_message());
    acq = SK_ACQUIRE_UNCLAIMED;
  }
  if (waited) {
    SK_COUNT(peer_waits);
    ev.kind = SK_EVENT_PEER_WAIT;
    sk_log_event(&ev);
  }
  if (acq == SK_ACQUIRE_HIT) {
    SK_COUNT(disk_hits);
    ev.kind = SK_EVENT_DISK_HIT;
    sk_log_event(&ev);
    e->how = waited ? SK_RESOLVED_PEER : SK_RESOLVED_DISK;
    return take_record(e, &rec, owned);
  }
  e->how = SK_RESOLVED_COMPILED;
  sk_status s = compile_entry(e, cache, acq == SK_ACQUIRE_CLAIMED);
  if (s != SK_OK && acq == SK_ACQUIRE_CLAIMED) sk_cache_release(cache, e->key.bytes);
  return s;
}

static sk_status frozen_error(const sk_kernel_request *req, const sk_key *key) {
  char prefix[13];
  key_hex_prefix(key, prefix);
  SK_COUNT(frozen_refusals);
  SK_COUNT(failures);
  return sk_set_error(SK_ERR_KERNEL_RESOLUTION_FROZEN,
                      "kernel resolution is frozen (reason: %s): op %s kernel %s params [%s] arch %s key %s is "
                      "not in this process's memory table, and after a freeze sparkinfer neither compiles nor %s. "
                      "Warm this shape up (plan it, or sk_kernel_resolve it) before calling "
                      "sk_freeze_kernel_resolution, or prebuild it with sk-warm",
                      sk_freeze_reason(), req->op && *req->op ? req->op : "-", req->name_expr,
                      req->params ? req->params : "", req->arch, prefix,
                      (sk_freeze_flags() & SK_FREEZE_ALLOW_DISK_HITS) ? "loads kernels missing from the disk cache"
                                                                     : "loads from the disk cache");
}

static sk_status wait_entry(sk_kernel *e) {
  if (atomic_load_explicit(&e->state, memory_order_acquire) == SK_ENTRY_PENDING) {
    pthread_mutex_lock(&e->mu);
    while (atomic_load_explicit(&e->state, memory_order_acquire) == SK_ENTRY_PENDING)
      pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
  }
  if (atomic_load_explicit(&e->state, memory_order_acquire) == SK_ENTRY_FAILED) {
    SK_COUNT(failures);
    return sk_set_error(e->fail_status, "%s", e->fail_message ? e->fail_message : "kernel resolution failed");
  }
  return SK_OK;
}

static void entry_finish(sk_kernel *e, sk_status s) {
  pthread_mutex_lock(&e->mu);
  if (s != SK_OK) {
    e->fail_status = s;
    e->fail_message = strdup(sk_last_error_message());
  }
  atomic_store_explicit(&e->state, s == SK_OK ? SK_ENTRY_READY : SK_ENTRY_FAILED, memory_order_release);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

/* Frozen with SK_FREEZE_ALLOW_DISK_HITS: a disk hit may become a table entry; nothing else. */
static sk_status frozen_disk_only(const sk_kernel_request *req, const sk_key *key, sk_kernel **out) {
  sk_cache *cache = sk_runtime_cache();
  sk_lookup lk = SK_LOOKUP_MISS;
  sk_record rec;
  void *owned = NULL;
  if (!cache || sk_cache_get(cache, key->bytes, &lk, &rec, &owned) != SK_OK || lk != SK_LOOKUP_HIT)
    return frozen_error(req, key);
  sk_kernel *e = entry_new(req, key);
  if (!e) { free(owned); return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory"); }
  sk_status s = take_record(e, &rec, owned);
  if (s != SK_OK) { entry_free(e); return s; }
  e->how = SK_RESOLVED_DISK;
  atomic_store_explicit(&e->state, SK_ENTRY_READY, memory_order_release);
  sk_kernel *in = table_insert(e);
  if (in != e) entry_free(e);
  else SK_COUNT(disk_hits);
  *out = in;
  return wait_entry(in);
}

/* Resolve to a table entry holding the cubin (no driver). */
static sk_status resolve_entry(const sk_kernel_request *req, const sk_embedded_source *src, sk_kernel **out,
                               sk_resolve_source *how) {
  sk_key key = compute_key(req, src);
  sk_kernel *e = table_find(&key);
  if (SK_LIKELY(e != NULL)) {
    SK_TRY(wait_entry(e));
    SK_COUNT(memory_hits);
    if (sk_config()->print_progress >= 2) {
      sk_event ev = {.kind = SK_EVENT_MEMORY_HIT, .kernel = e};
      sk_log_event(&ev);
    }
    *out = e;
    if (how) *how = SK_RESOLVED_MEMORY;
    return SK_OK;
  }
  if (sk_kernel_resolution_frozen()) {
    if (sk_freeze_flags() & SK_FREEZE_ALLOW_DISK_HITS) {
      SK_TRY(frozen_disk_only(req, &key, out));
      if (how) *how = SK_RESOLVED_DISK;
      return SK_OK;
    }
    return frozen_error(req, &key);
  }
  sk_kernel *fresh = entry_new(req, &key);
  if (!fresh) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory creating a kernel table entry");
  e = table_insert(fresh);
  if (e != fresh) {
    entry_free(fresh);
    SK_TRY(wait_entry(e));
    SK_COUNT(memory_hits);
    *out = e;
    if (how) *how = SK_RESOLVED_MEMORY;
    return SK_OK;
  }
  sk_status s = produce_cubin(e);
  if (s == SK_ERR_KERNEL_RESOLUTION_FROZEN) s = frozen_error(req, &key);
  else if (s != SK_OK) SK_COUNT(failures);
  if (s == SK_ERR_KERNEL_RESOLUTION_FROZEN) {
    /* Not a property of the kernel: leave a failed entry so waiters wake, with the message. */
  }
  entry_finish(e, s);
  if (s != SK_OK) return s;
  *out = e;
  if (how) *how = e->how;
  return SK_OK;
}

SK_API sk_status sk_kernel_prepare(const sk_kernel_request *req, sk_prepare_info *info) {
  SK_TRY(sk_runtime_ensure_init());
  const sk_embedded_source *src;
  SK_TRY(sk_request_validate(req, false, &src));
  sk_kernel *e = NULL;
  sk_resolve_source how;
  SK_TRY(resolve_entry(req, src, &e, &how));
  if (info) {
    info->key = e->key;
    info->source = how;
    info->cubin_bytes = e->cubin_size;
    info->compile_ms = how == SK_RESOLVED_COMPILED ? e->compile_ms : 0.0;
  }
  return SK_OK;
}

/* ---- loading and launching ----------------------------------------------------------------- */

/* SPARKINFER_TIMING and SPARKINFER_PDL, read once (racing first launches store the same value). */
static _Atomic int timing_enabled = -1, overlap_enabled = -1;

static int cached_flag(_Atomic int *cache, int (*read)(void)) {
  int v = atomic_load_explicit(cache, memory_order_relaxed);
  if (SK_UNLIKELY(v < 0)) atomic_store_explicit(cache, v = read() ? 1 : 0, memory_order_relaxed);
  return v;
}
static int config_timing(void) { return sk_config()->timing; }
static int config_overlap(void) { return sk_config()->overlap_launches; }

static sk_status load_entry(sk_kernel *e) {
  SK_TRY(sk_driver_ensure_context());
  pthread_mutex_lock(&e->mu);
  sk_status s = SK_OK;
  if (!atomic_load_explicit(&e->function, memory_order_acquire)) {
    void *fn = NULL;
    sk_cu_result r;
    if (sk_cu.cuLibraryLoadData && sk_cu.cuLibraryGetKernel) {
      /* A CUlibrary is context-independent: one load serves every context and device. */
      r = sk_cu.cuLibraryLoadData(&e->library, e->cubin, NULL, NULL, 0, NULL, NULL, 0);
      if (r) s = sk_cuda_error(r, "cuLibraryLoadData");
      else if ((r = sk_cu.cuLibraryGetKernel(&fn, e->library, e->lowered_name)) != 0)
        s = sk_cuda_error(r, "cuLibraryGetKernel");
    } else {
      r = sk_cu.cuModuleLoadData(&e->library, e->cubin);
      if (r) s = sk_cuda_error(r, "cuModuleLoadData");
      else if ((r = sk_cu.cuModuleGetFunction(&fn, e->library, e->lowered_name)) != 0)
        s = sk_cuda_error(r, "cuModuleGetFunction");
    }
    if (s != SK_OK) s = sk_wrap_error(s, "loading %s [%s]", e->name_expr, e->arch);
    else atomic_store_explicit(&e->function, fn, memory_order_release);
  }
  pthread_mutex_unlock(&e->mu);
  return s;
}

SK_API sk_status sk_kernel_resolve(const sk_kernel_request *req, sk_kernel **out) {
  if (SK_UNLIKELY(!out)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_kernel_resolve: out is NULL");
  *out = NULL;
  SK_TRY(sk_runtime_ensure_init());
  const sk_embedded_source *src;
  SK_TRY(sk_request_validate(req, true, &src));
  sk_kernel_request r = *req;
  if (!r.arch) {
    /* The current context's arch, cached per thread and context: the hit path stays cheap. */
    static _Thread_local void *arch_ctx;
    static _Thread_local char arch[SK_MAX_ARCH];
    void *ctx = NULL;
    SK_TRY(sk_driver_ensure_context());
    SK_CU(sk_cu.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    if (ctx != arch_ctx || !arch[0]) {
      SK_TRY(sk_device_arch(-1, arch, sizeof arch));
      arch_ctx = ctx;
    }
    r.arch = arch;
  }
  sk_kernel *e = NULL;
  SK_TRY(resolve_entry(&r, src, &e, NULL));
  if (SK_UNLIKELY(!atomic_load_explicit(&e->function, memory_order_acquire))) SK_TRY(load_entry(e));
  *out = e;
  return SK_OK;
}

sk_status sk_kernel_resolve_offline(const sk_kernel_request *req, sk_kernel **out) {
  *out = NULL;
  SK_TRY(sk_runtime_ensure_init());
  const sk_embedded_source *src;
  SK_TRY(sk_request_validate(req, false, &src));
  return resolve_entry(req, src, out, NULL);
}

static sk_cu_result launch_with_overlap(void *fn, sk_dim3 grid, sk_dim3 block, unsigned shared_bytes, void *stream,
                                        void **args) {
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config;
  memset(&config, 0, sizeof config);
  config.gridDimX = grid.x, config.gridDimY = grid.y, config.gridDimZ = grid.z;
  config.blockDimX = block.x, config.blockDimY = block.y, config.blockDimZ = block.z;
  config.sharedMemBytes = shared_bytes;
  config.hStream = (CUstream)stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return sk_cu.cuLaunchKernelEx(&config, fn, args, NULL);
}

SK_API sk_status sk_kernel_launch_ex(const sk_kernel *kernel, sk_dim3 grid, sk_dim3 block, unsigned shared_bytes,
                                     void *stream, void **args, unsigned flags) {
  if (SK_UNLIKELY(!kernel || !atomic_load_explicit(&kernel->function, memory_order_relaxed)))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_kernel_launch: kernel is NULL or not loaded (use sk_kernel_resolve)");
  if (SK_UNLIKELY(flags & ~(unsigned)SK_LAUNCH_OVERLAP_PREVIOUS))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_kernel_launch_ex: unknown flags 0x%x", flags);
  /* Timed launches stay plain: the events bracket one kernel (its griddepcontrol.wait is then a no-op). */
  if (SK_UNLIKELY(cached_flag(&timing_enabled, config_timing)))
    return sk_timing_launch((sk_kernel *)kernel, grid, block, shared_bytes, stream, args);
  void *fn = atomic_load_explicit(&kernel->function, memory_order_relaxed);
  const bool overlap = (flags & SK_LAUNCH_OVERLAP_PREVIOUS) && cached_flag(&overlap_enabled, config_overlap) &&
                       sk_cu.cuLaunchKernelEx && kernel->overlap_capable;
  const char *call = overlap ? "cuLaunchKernelEx" : "cuLaunchKernel";  /* named in the error */
  sk_cu_result r = overlap ? launch_with_overlap(fn, grid, block, shared_bytes, stream, args)
                           : sk_cu.cuLaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                                  shared_bytes, stream, args, NULL);
  if (SK_LIKELY(r == 0)) return SK_OK;
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    /* A thread that never touched CUDA: adopt the primary context once, then retry. */
    SK_TRY(sk_driver_ensure_context());
    r = overlap ? launch_with_overlap(fn, grid, block, shared_bytes, stream, args)
                : sk_cu.cuLaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream,
                                       args, NULL);
    if (r == 0) return SK_OK;
  }
  if (overlap && r == CUDA_ERROR_NOT_SUPPORTED) {
    /* A driver or setup (e.g. some MPS configurations) without programmatic dependent launch: a
     * plain launch is always correct for these kernels; stop asking for the overlap. */
    atomic_store_explicit(&overlap_enabled, 0, memory_order_relaxed);
    call = "cuLaunchKernel";
    r = sk_cu.cuLaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream, args, NULL);
    if (r == 0) return SK_OK;
  }
  sk_cuda_error(r, call);
  return sk_wrap_error(SK_ERR_CUDA, "launching %s [%s] grid (%u,%u,%u) block (%u,%u,%u) smem %u", kernel->name_expr,
                       kernel->arch, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes);
}

SK_API sk_status sk_kernel_launch(const sk_kernel *kernel, sk_dim3 grid, sk_dim3 block, unsigned shared_bytes,
                                  void *stream, void **args) {
  return sk_kernel_launch_ex(kernel, grid, block, shared_bytes, stream, args, 0);
}

SK_API sk_status sk_kernel_set_max_dynamic_shared(sk_kernel *kernel, unsigned bytes) {
  if (!kernel || !atomic_load(&kernel->function))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_kernel_set_max_dynamic_shared: kernel is NULL or not loaded");
  SK_TRY(sk_driver_ensure_context());
  CUdevice dev;
  SK_CU(sk_cu.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  /* Remembered per kernel and device: callers may ask on every launch and pay an atomic load, not
   * an attribute call (racing first callers both set it; harmless). */
  _Atomic unsigned *allowed = dev >= 0 && dev < SK_KERNEL_SMEM_DEVICES ? &kernel->dynamic_smem_allowed[dev] : NULL;
  if (allowed && bytes <= atomic_load_explicit(allowed, memory_order_acquire)) return SK_OK;
  void *fn = atomic_load(&kernel->function);
  if (sk_cu.cuLibraryLoadData && sk_cu.cuKernelSetAttribute) {
    SK_CU(sk_cu.cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes, fn, dev),
          "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  } else {
    SK_CU(sk_cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  unsigned seen = allowed ? atomic_load(allowed) : bytes;
  while (seen < bytes && !atomic_compare_exchange_weak(allowed, &seen, bytes)) {
  }
  return SK_OK;
}

SK_API sk_status sk_kernel_get_info(const sk_kernel *kernel, void **cu_function, const char **lowered_name,
                                    sk_key *key) {
  if (!kernel) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_kernel_get_info: kernel is NULL");
  if (cu_function) *cu_function = atomic_load(&((sk_kernel *)kernel)->function);
  if (lowered_name) *lowered_name = kernel->lowered_name;
  if (key) *key = kernel->key;
  return SK_OK;
}
