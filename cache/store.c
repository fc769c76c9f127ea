/*
 * cache/store.c - the LMDB cubin store: directory policy, environment sharing, map growth,
 * get/put with coarse LRU, size-capped pruning, cross-process compile claims, export/import.
 * docs/cache.md describes the on-disk format and the protocols.
 */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cache_internal.h"
#include "base.h"

#define DEFAULT_MAP_BYTES (256ull << 20)
#define MAX_MAP_BYTES (1ull << 40) /* growth stops here: a runaway cache is a bug, not a need */
#define DEFAULT_CLAIM_TIMEOUT_S 300.0
#define LRU_TOUCH_INTERVAL_MS (3600ull * 1000) /* coarse LRU: rewrite last-used at most hourly */
#define PRUNE_TARGET_PERCENT 90                /* auto-prune goes below the cap, not just to it */
#define MAX_TXN_RETRIES 64                     /* map resizes and growths per operation */
#define CLAIM_BACKOFF_START_S 0.002
#define CLAIM_BACKOFF_MAX_S 0.050
#define BATCH_BYTES (16u << 20) /* foreach/import move at most this much per transaction */
#define MAX_READERS 256
#define HOSTNAME_MAX 256
#define MAX_KEY_BYTES 511        /* LMDB's default (mdb_env_get_maxkeysize); longer is damage */

/* A write callback returns 0 to commit, TXN_DISCARD to abort without error, else an LMDB or
 * errno code (abort and fail). LMDB codes are <= -30600 and errno codes positive. */
#define TXN_DISCARD (-1)

static const char META_DATA_BYTES_KEY[] = "data_bytes";

/* ---------------------------------------------------------------------------------------- */
/* Damage guard                                                                              */

/* LMDB does not checksum its pages. A damaged leaf node hands out a key or value whose size or
 * address lies outside the data file, and touching those bytes faults: SIGBUS past the end of
 * the file, SIGSEGV outside the map. So every key and value the store touches is first checked
 * against the mapping of the data file that holds it and the file's size. LMDB's own map
 * address is not exported: the mapping is found in /proc/self/maps, by the address. */
typedef struct guard {
  pthread_mutex_t mu;
  int fd;                 /* the data file (LMDB's descriptor) */
  dev_t dev;
  ino_t ino;
  uint64_t map_size;      /* the environment's map size: how its mapping is recognised when the
                             kernel reports another device (stacking filesystems) */
  uintptr_t start, end;   /* the mapping that held the last address checked */
  uint64_t offset;        /* file offset of start */
  uint64_t file_size;     /* refreshed when an address seems to lie past it */
  int no_maps;            /* /proc/self/maps unreadable: addresses cannot be checked */
  atomic_int damaged;     /* set once; why[] is written before it */
  char why[400];
} guard;

static int guard_init(guard *g, MDB_env *env) {
  memset(g, 0, sizeof *g);
  pthread_mutex_init(&g->mu, NULL);
  atomic_init(&g->damaged, 0);
  struct stat st;
  MDB_envinfo info;
  int rc = mdb_env_get_fd(env, &g->fd);
  if (rc) return rc;
  if (fstat(g->fd, &st) != 0) return errno;
  if ((rc = mdb_env_info(env, &info)) != 0) return rc;
  g->dev = st.st_dev;
  g->ino = st.st_ino;
  g->file_size = (uint64_t)st.st_size;
  g->map_size = info.me_mapsize;
  return 0;
}

static void guard_destroy(guard *g) { pthread_mutex_destroy(&g->mu); }

/* After mdb_env_set_mapsize (LMDB unmaps and maps again, maybe elsewhere); the caller holds the
 * environment's map lock exclusive. */
static void guard_remapped(guard *g, MDB_env *env) {
  MDB_envinfo info;
  pthread_mutex_lock(&g->mu);
  g->start = g->end = 0;
  if (mdb_env_info(env, &info) == 0) g->map_size = info.me_mapsize;
  pthread_mutex_unlock(&g->mu);
}

/* Record the mapping of the data file that contains address a (g->start == g->end == 0 when
 * none does). Called with g->mu held. */
static void guard_find_mapping(guard *g, uintptr_t a) {
  g->start = g->end = 0;
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) {
    g->no_maps = 1;
    return;
  }
  char line[512];
  while (fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    int whole = n && line[n - 1] == '\n';
    unsigned long long lo, hi, off, inode;
    unsigned maj, min;
    char perms[8];
    if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &lo, &hi, perms, &off, &maj, &min, &inode) == 7 &&
        a >= lo && a < hi && strlen(perms) == 4 && perms[3] == 's') {
      int ours = (maj == major(g->dev) && min == minor(g->dev) && inode == (unsigned long long)g->ino) ||
                 (off == 0 && hi - lo == g->map_size);
      if (ours) {
        g->start = (uintptr_t)lo;
        g->end = (uintptr_t)hi;
        g->offset = off;
      }
      break;
    }
    while (!whole && fgets(line, sizeof line, f)) { /* the rest of a long line (a long path) */
      n = strlen(line);
      whole = n && line[n - 1] == '\n';
    }
  }
  fclose(f);
}

static int guard_in_file(const guard *g, uintptr_t a, size_t n) {
  return a >= g->start && a < g->end && n <= g->end - a && g->offset + (a - g->start) + n <= g->file_size;
}

/* Whether the n bytes at p lie inside the mapped data file. */
static int guard_check(guard *g, const void *p, size_t n) {
  const uintptr_t a = (uintptr_t)p;
  if (n == 0) return 1;
  if (a + n < a) return 0;
  pthread_mutex_lock(&g->mu);
  int ok = 1;
  if (!g->no_maps) {
    if (!(a >= g->start && a < g->end)) guard_find_mapping(g, a);
    ok = g->no_maps || guard_in_file(g, a, n);
    if (!ok && g->end) { /* maybe the file grew since we looked */
      struct stat st;
      if (fstat(g->fd, &st) == 0) g->file_size = (uint64_t)st.st_size;
      ok = guard_in_file(g, a, n);
    }
  }
  pthread_mutex_unlock(&g->mu);
  return ok;
}

/* Mark the file damaged (the first reason is kept) and return MDB_CORRUPTED, which every caller
 * passes up like an LMDB error. */
static int guard_damage(guard *g, const char *fmt, ...) SK_PRINTF(2, 3);
static int guard_damage(guard *g, const char *fmt, ...) {
  pthread_mutex_lock(&g->mu);
  if (!atomic_load(&g->damaged)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->why, sizeof g->why, fmt, ap);
    va_end(ap);
    atomic_store(&g->damaged, 1);
  }
  pthread_mutex_unlock(&g->mu);
  return MDB_CORRUPTED;
}

/* 0 when a key or value from the file may be read, else MDB_CORRUPTED with the reason. */
static int guard_key(guard *g, const MDB_val *k) {
  if (k->mv_size > MAX_KEY_BYTES)
    return guard_damage(g, "a key of %zu bytes (LMDB keys are at most %d)", k->mv_size, MAX_KEY_BYTES);
  if (!guard_check(g, k->mv_data, k->mv_size))
    return guard_damage(g, "a key of %zu bytes lies outside the file", k->mv_size);
  return 0;
}

static int guard_value(guard *g, const MDB_val *v, const char *what) {
  if (!guard_check(g, v->mv_data, v->mv_size))
    return guard_damage(g, "%s of %zu bytes lies outside the file", what, v->mv_size);
  return 0;
}

/* Keys must come in strictly increasing order (LMDB's default: memcmp, then the shorter first);
 * anything else is a damaged tree, and a walk that trusted it might never end. */
static int key_after(const MDB_val *k, const uint8_t *prev, size_t prev_size) {
  size_t n = k->mv_size < prev_size ? k->mv_size : prev_size;
  int c = memcmp(k->mv_data, prev, n);
  return c > 0 || (c == 0 && k->mv_size > prev_size);
}

/* ---------------------------------------------------------------------------------------- */
/* Shared environments                                                                       */

/* LMDB forbids opening one environment twice in a process (closing the second handle's lock
 * file would drop the first one's fcntl locks), so every sk_cache on the same directory shares
 * one shared_env, found in a process-wide registry. This registry is the only global mutable
 * state of the cache. Entries are keyed by pid too: after fork() a child must open its own. */
typedef struct shared_env {
  struct shared_env *next;
  dev_t dev;
  ino_t ino;
  pid_t pid;
  int refs;
  MDB_env *env;
  MDB_dbi records, claims, meta;
  int have_records, have_claims, have_meta; /* a read-only env may lack our databases */
  int env_readonly, nolock;
  /* Transactions hold it shared; resizing the map (which needs no live transaction in this
   * process) holds it exclusive. */
  pthread_rwlock_t map_lock;
  guard guard; /* what is read from the file is checked first; damage stops all use */
} shared_env;

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static shared_env *registry;

struct sk_cache {
  shared_env *shared;
  char *dir;
  int readonly;
  atomic_int writes_disabled;
  uint64_t max_bytes;
  double claim_timeout_s;
  /* identity written into our claims */
  uint64_t self_start_ticks;
  uint64_t self_pidns;
  char hostname[HOSTNAME_MAX];
};

uint64_t sk_now_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_seconds(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

static int is_damaged(const sk_cache *c) { return atomic_load(&c->shared->guard.damaged); }

/* Once the file is known to be damaged, every call fails with this (nothing more is read from it
 * and nothing written: LMDB would follow the same damaged pages). */
static sk_status damaged_error(const sk_cache *c) {
  return sk_set_error(SK_ERR_CACHE,
                      "cache %s: %s/data.mdb is damaged (%s); it is not used any more: remove the directory to "
                      "start a new cache",
                      c->dir, c->dir, c->shared->guard.why);
}

static int writable(const sk_cache *c) {
  return !c->readonly && !c->shared->env_readonly && !atomic_load(&c->writes_disabled) && !is_damaged(c);
}

static sk_status refuse_write(const sk_cache *c, const char *what) {
  if (is_damaged(c)) return damaged_error(c);
  if (c->readonly || c->shared->env_readonly)
    return sk_set_error(SK_ERR_CACHE, "cache %s: %s: the cache is open read-only", c->dir, what);
  return sk_set_error(SK_ERR_CACHE, "cache %s: %s: writes are disabled (kernel resolution frozen)",
                      c->dir, what);
}

static sk_status lmdb_error(const sk_cache *c, const char *what, int rc) {
  if (rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND) { /* ours (the guard) or LMDB's own finding */
    guard_damage(&c->shared->guard, "%s: %s", what, mdb_strerror(rc));
    return damaged_error(c);
  }
  return sk_set_error(rc == ENOMEM ? SK_ERR_OUT_OF_MEMORY : SK_ERR_CACHE, "cache %s: %s: %s",
                      c->dir, what, mdb_strerror(rc));
}

/* ---------------------------------------------------------------------------------------- */
/* Transactions, map resizing                                                                */

static size_t current_map_size(MDB_env *env) {
  MDB_envinfo info;
  return mdb_env_info(env, &info) == 0 ? info.me_mapsize : 0;
}

/* Another process grew the map past ours: adopt its size. */
static int adopt_map_size(shared_env *s) {
  pthread_rwlock_wrlock(&s->map_lock);
  int rc = mdb_env_set_mapsize(s->env, 0);
  guard_remapped(&s->guard, s->env);
  pthread_rwlock_unlock(&s->map_lock);
  return rc;
}

/* MDB_MAP_FULL with a map of seen_size bytes: double it, unless another thread already did. */
static int grow_map(shared_env *s, size_t seen_size) {
  int rc = 0;
  pthread_rwlock_wrlock(&s->map_lock);
  size_t now_size = current_map_size(s->env);
  if (now_size <= seen_size) {
    if (seen_size >= MAX_MAP_BYTES) rc = MDB_MAP_FULL;
    else rc = mdb_env_set_mapsize(s->env, seen_size * 2);
    guard_remapped(&s->guard, s->env);
  }
  pthread_rwlock_unlock(&s->map_lock);
  return rc;
}

/* Begin a transaction with map_lock held shared; on success the caller ends it with txn_end. */
static int txn_begin(shared_env *s, unsigned flags, MDB_txn **txn) {
  for (int attempt = 0;; attempt++) {
    pthread_rwlock_rdlock(&s->map_lock);
    int rc = mdb_txn_begin(s->env, NULL, flags, txn);
    if (rc == 0) return 0;
    pthread_rwlock_unlock(&s->map_lock);
    if (rc != MDB_MAP_RESIZED || attempt >= MAX_TXN_RETRIES) return rc;
    rc = adopt_map_size(s);
    if (rc) return rc;
  }
}

static int txn_end(shared_env *s, MDB_txn *txn, int commit) {
  int rc = 0;
  if (commit) rc = mdb_txn_commit(txn);
  else mdb_txn_abort(txn);
  pthread_rwlock_unlock(&s->map_lock);
  return rc;
}

typedef int (*write_fn)(sk_cache *c, MDB_txn *txn, void *ctx);

/* Run fn in a write transaction and commit, growing the map and rerunning fn (from scratch:
 * it must reset its outputs) on MDB_MAP_FULL. Returns 0 (committed, or discarded by fn) or the
 * LMDB/errno code. */
static int run_write(sk_cache *c, write_fn fn, void *ctx) {
  shared_env *s = c->shared;
  for (int attempt = 0;; attempt++) {
    MDB_txn *txn;
    int rc = txn_begin(s, 0, &txn);
    if (rc) return rc;
    size_t map_size = current_map_size(s->env);
    rc = fn(c, txn, ctx);
    if (rc == 0) rc = txn_end(s, txn, 1);
    else txn_end(s, txn, 0);
    if (rc == TXN_DISCARD) return 0;
    if (rc != MDB_MAP_FULL || attempt >= MAX_TXN_RETRIES) return rc;
    rc = grow_map(s, map_size);
    if (rc) return rc;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Running total of encoded record bytes ("meta" database, updated in every write txn that adds
 * or removes records; recomputed by a scan when absent or malformed).                        */

static int scan_data_bytes(const shared_env *s, MDB_txn *txn, uint64_t *total) {
  *total = 0;
  if (!s->have_records) return 0;
  MDB_cursor *cur;
  int rc = mdb_cursor_open(txn, s->records, &cur);
  if (rc) return rc;
  MDB_val k, v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
    *total += v.mv_size;
  mdb_cursor_close(cur);
  return rc == MDB_NOTFOUND ? 0 : rc;
}

static int data_bytes_get(shared_env *s, MDB_txn *txn, uint64_t *total) {
  if (s->have_meta) {
    MDB_val k = {sizeof META_DATA_BYTES_KEY - 1, (void *)META_DATA_BYTES_KEY}, v;
    int rc = mdb_get(txn, s->meta, &k, &v);
    /* Callers read the total before their first write, so v is in the map, never a dirty copy. */
    if (rc == 0 && v.mv_size == 8) {
      if ((rc = guard_value(&s->guard, &v, "the data_bytes value")) != 0) return rc;
      *total = sk_le64_load(v.mv_data);
      return 0;
    }
    if (rc && rc != MDB_NOTFOUND) return rc;
  }
  return scan_data_bytes(s, txn, total);
}

static int data_bytes_set(const shared_env *s, MDB_txn *txn, uint64_t total) {
  uint8_t buf[8];
  sk_le64_store(buf, total);
  MDB_val k = {sizeof META_DATA_BYTES_KEY - 1, (void *)META_DATA_BYTES_KEY}, v = {8, buf};
  return mdb_put(txn, s->meta, &k, &v, 0);
}

/* Callers read the total before changing any record: a missing counter is rebuilt by a scan,
 * which must not see the transaction's own changes. */
static int delete_record(shared_env *s, MDB_txn *txn, const uint8_t key[16], size_t size) {
  uint64_t total;
  int rc = data_bytes_get(s, txn, &total);
  if (rc) return rc;
  MDB_val k = {16, (void *)key};
  if ((rc = mdb_del(txn, s->records, &k, NULL)) != 0) return rc;
  return data_bytes_set(s, txn, total >= size ? total - size : 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Directory policy                                                                          */

const char *sk_cache_network_fs_name(unsigned long long f_type) {
  /* Magic numbers from linux/magic.h and the filesystems' sources. */
  switch (f_type) {
    case 0x6969ull: return "NFS";
    case 0x517Bull: return "SMB";
    case 0xFF534D42ull: return "CIFS";
    case 0xFE534D42ull: return "SMB2";
    case 0x5346414Full: return "AFS";
    case 0x6B414653ull: return "kAFS";
    case 0x00C36400ull: return "CephFS";
    case 0x0BD00BD0ull: return "Lustre";
    case 0x47504653ull: return "GPFS";
    case 0x01021997ull: return "9P";
    case 0x73757245ull: return "Coda";
    case 0x564Cull: return "NCP";
    case 0x19830326ull: return "BeeGFS";
    case 0x01161970ull: return "GFS2";
    case 0x7461636Full: return "OCFS2";
    default: return NULL;
  }
}

/* mkdir -p with mode 0700 for every directory it creates. */
static sk_status make_dirs(const char *dir, int *created) {
  size_t n = strlen(dir);
  char *path = malloc(n + 1);
  if (!path) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "cache %s: out of memory", dir);
  memcpy(path, dir, n + 1);
  *created = 0;
  for (size_t i = 1; i <= n; i++) {
    if (path[i] != '/' && path[i] != '\0') continue;
    if (path[i - 1] == '/') continue; /* "a//b" */
    char saved = path[i];
    path[i] = '\0';
    if (mkdir(path, 0700) == 0) {
      if (saved == '\0') *created = 1;
    } else if (errno != EEXIST) {
      int e = errno;
      sk_status st = sk_set_error(SK_ERR_CACHE, "cannot create cache directory %s: mkdir %s: %s",
                                  dir, path, strerror(e));
      free(path);
      return st;
    }
    path[i] = saved;
  }
  free(path);
  return SK_OK;
}

/* Open dir (creating it unless readonly) and check that it is safe to load code from. Returns
 * the directory's identity in *st. */
static sk_status check_directory(const char *dir, int readonly, struct stat *st) {
  int created = 0;
  if (!readonly) SK_TRY(make_dirs(dir, &created));
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (readonly && e == ENOENT) return sk_set_error(SK_ERR_CACHE, "no cache at %s", dir);
    return sk_set_error(SK_ERR_CACHE, "cannot open cache directory %s: %s", dir, strerror(e));
  }
  sk_status status = SK_OK;
  struct statfs fs;
  if (created) (void)fchmod(fd, 0700); /* undo an odd umask; mkdir already asked for 0700 */
  if (fstat(fd, st) != 0) {
    status = sk_set_error(SK_ERR_CACHE, "cannot stat cache directory %s: %s", dir, strerror(errno));
  } else if (st->st_uid != geteuid() && !(readonly && st->st_uid == 0)) {
    /* A root-owned directory is trusted for read-only use: that is how caches are shipped. */
    status = sk_set_error(SK_ERR_CACHE,
                          "refusing cache directory %s: it is owned by uid %u, not by this user "
                          "(uid %u), and a cache holds code that runs in this process",
                          dir, (unsigned)st->st_uid, (unsigned)geteuid());
  } else if (st->st_mode & (S_IWGRP | S_IWOTH)) {
    status = sk_set_error(SK_ERR_CACHE,
                          "refusing cache directory %s: it is writable by %s (mode %04o), and a "
                          "cache holds code that runs in this process; chmod 700 it",
                          dir, (st->st_mode & S_IWOTH) ? "others" : "group",
                          (unsigned)(st->st_mode & 07777));
  } else if (fstatfs(fd, &fs) != 0) {
    status = sk_set_error(SK_ERR_CACHE, "cannot statfs cache directory %s: %s", dir, strerror(errno));
  } else {
    const char *net = sk_cache_network_fs_name((unsigned long long)fs.f_type);
    if (net)
      status = sk_set_error(SK_ERR_CACHE,
                            "refusing cache directory %s: it is on a network filesystem (%s) "
                            "where LMDB's locking is unsafe; use a local directory",
                            dir, net);
  }
  close(fd);
  return status;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                   */

static int open_dbis_rw(shared_env *s) {
  for (int attempt = 0;; attempt++) {
    MDB_txn *txn;
    int rc = txn_begin(s, 0, &txn);
    if (rc) return rc;
    size_t map_size = current_map_size(s->env);
    rc = mdb_dbi_open(txn, "records", MDB_CREATE, &s->records);
    if (!rc) rc = mdb_dbi_open(txn, "claims", MDB_CREATE, &s->claims);
    if (!rc) rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta);
    if (!rc) {
      /* Make sure the running total exists, so that writers never need to rebuild it. */
      s->have_records = s->have_meta = 1;
      MDB_val k = {sizeof META_DATA_BYTES_KEY - 1, (void *)META_DATA_BYTES_KEY}, v;
      rc = mdb_get(txn, s->meta, &k, &v);
      if (rc == MDB_NOTFOUND || (rc == 0 && v.mv_size != 8)) {
        uint64_t total;
        rc = scan_data_bytes(s, txn, &total);
        if (!rc) rc = data_bytes_set(s, txn, total);
      }
    }
    if (!rc) rc = txn_end(s, txn, 1);
    else txn_end(s, txn, 0);
    if (rc == 0) {
      s->have_records = s->have_claims = s->have_meta = 1;
      return 0;
    }
    s->have_records = s->have_meta = 0;
    if (rc != MDB_MAP_FULL || attempt >= MAX_TXN_RETRIES) return rc;
    rc = grow_map(s, map_size);
    if (rc) return rc;
  }
}

static int open_dbis_ro(shared_env *s) {
  MDB_txn *txn;
  int rc = txn_begin(s, MDB_RDONLY, &txn);
  if (rc) return rc;
  struct {
    const char *name;
    MDB_dbi *dbi;
    int *have;
  } dbs[] = {{"records", &s->records, &s->have_records},
             {"claims", &s->claims, &s->have_claims},
             {"meta", &s->meta, &s->have_meta}};
  for (size_t i = 0; i < sizeof dbs / sizeof dbs[0] && rc == 0; i++) {
    rc = mdb_dbi_open(txn, dbs[i].name, 0, dbs[i].dbi);
    if (rc == 0) *dbs[i].have = 1;
    else if (rc == MDB_NOTFOUND) rc = 0; /* an empty cache: lookups miss */
  }
  if (rc == 0) rc = txn_end(s, txn, 1); /* commit keeps the dbi handles */
  else txn_end(s, txn, 0);
  return rc;
}

/* A data file shorter than its last committed page (e.g. a truncated copy of a shipped cache)
 * would make LMDB fault when it touches the missing pages: refuse it up front. */
static sk_status check_not_truncated(MDB_env *env, const char *data_path, const char *what) {
  MDB_envinfo info;
  MDB_stat mst;
  struct stat st;
  if (mdb_env_info(env, &info) || mdb_env_stat(env, &mst) || stat(data_path, &st)) return SK_OK;
  uint64_t needed = ((uint64_t)info.me_last_pgno + 1) * mst.ms_psize;
  if ((uint64_t)st.st_size < needed)
    return sk_set_error(SK_ERR_CACHE, "%s: %s is truncated (%llu bytes, its pages need %llu)", what,
                        data_path, (unsigned long long)st.st_size, (unsigned long long)needed);
  return SK_OK;
}

/* The structure check (check.c) of the snapshot a read transaction sees, before any database is
 * opened: a damaged file is refused, so LMDB never walks its pages. */
static sk_status check_structure(shared_env *s, const char *dir, const char *data_path) {
  MDB_txn *txn;
  int rc = txn_begin(s, MDB_RDONLY, &txn);
  if (rc) return sk_set_error(SK_ERR_CACHE, "cache %s: mdb_txn_begin: %s", dir, mdb_strerror(rc));
  char why[400];
  int damage = sk_lmdb_check(s->env, txn, why, sizeof why);
  txn_end(s, txn, 0);
  if (damage > 0)
    return sk_set_error(SK_ERR_CACHE, "cache %s: %s is damaged (%s); remove the directory to start a new cache", dir,
                        data_path, why);
  return SK_OK;
}

static sk_status open_shared_env(const char *dir, int readonly, uint64_t initial_map,
                                 shared_env **out) {
  shared_env *s = calloc(1, sizeof *s);
  if (!s) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "cache %s: out of memory", dir);
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  /* No thread ever nests transactions, so writer preference is safe and keeps a resize from
   * starving behind a stream of readers. */
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&s->map_lock, &attr);
  pthread_rwlockattr_destroy(&attr);
  s->env_readonly = readonly;
  sk_status status = SK_OK;
  char data_path[4096];
  snprintf(data_path, sizeof data_path, "%s/data.mdb", dir);
  int have_guard = 0;

  /* An empty data.mdb (a writer created it and was killed before LMDB wrote to it) is a new
   * cache to a writer; read-only, LMDB fails on it with a misleading errno: say what it is. */
  struct stat dst;
  char why[400];
  if (stat(data_path, &dst) == 0 && S_ISREG(dst.st_mode)) {
    if (dst.st_size == 0 && readonly) {
      status = sk_set_error(SK_ERR_CACHE, "no cache at %s: its data.mdb is empty (0 bytes; a writer created it and "
                            "stored nothing, or was killed first); sk-warm or sk-cache import initialise it",
                            dir);
      goto fail;
    }
    /* LMDB trusts the meta pages' page size and roots as soon as it opens the file. */
    if (dst.st_size > 0 && sk_lmdb_check_meta(data_path, why, sizeof why) > 0) {
      status = sk_set_error(SK_ERR_CACHE, "cache %s: %s is damaged (%s); remove the directory to start a new cache",
                            dir, data_path, why);
      goto fail;
    }
  }

  unsigned base_flags = MDB_NOTLS | MDB_NOMETASYNC | (readonly ? MDB_RDONLY : 0);
  int rc = 0;
  for (int nolock = 0; nolock <= 1; nolock++) {
    if ((rc = mdb_env_create(&s->env)) != 0) break;
    mdb_env_set_maxdbs(s->env, 4);
    mdb_env_set_maxreaders(s->env, MAX_READERS);
    mdb_env_set_mapsize(s->env, (size_t)initial_map);
    rc = mdb_env_open(s->env, dir, base_flags | (nolock ? MDB_NOLOCK : 0), 0600);
    if (rc == 0) {
      s->nolock = nolock;
      break;
    }
    mdb_env_close(s->env);
    s->env = NULL;
    /* A shipped cache on a read-only filesystem: lock.mdb cannot be created or written. Without
     * locks we cannot see writers, but nobody can write there either. */
    if (!(readonly && (rc == EACCES || rc == EROFS || rc == EPERM))) break;
  }
  if (rc) {
    if (readonly && rc == ENOENT)
      status = sk_set_error(SK_ERR_CACHE, "no cache at %s (no data.mdb)", dir);
    else
      status = sk_set_error(SK_ERR_CACHE, "cannot open cache %s: mdb_env_open: %s%s", dir,
                            mdb_strerror(rc),
                            (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_VERSION_MISMATCH)
                                ? " (remove the directory to start a new cache)" : "");
    goto fail;
  }
  if (!readonly) {
    int dead = 0;
    mdb_reader_check(s->env, &dead); /* free reader slots of killed processes */
  }
  /* Use the larger of the recorded map size (grown by us or others earlier) and the initial. */
  if ((rc = mdb_env_set_mapsize(s->env, 0)) == 0 && current_map_size(s->env) < initial_map)
    rc = mdb_env_set_mapsize(s->env, (size_t)initial_map);
  if (rc) {
    status = sk_set_error(SK_ERR_CACHE, "cache %s: mdb_env_set_mapsize: %s", dir, mdb_strerror(rc));
    goto fail;
  }
  if ((rc = guard_init(&s->guard, s->env)) != 0) {
    status = sk_set_error(SK_ERR_CACHE, "cache %s: %s: %s", dir, data_path, mdb_strerror(rc));
    goto fail;
  }
  have_guard = 1;
  if ((status = check_not_truncated(s->env, data_path, "cache")) != SK_OK) goto fail;
  if ((status = check_structure(s, dir, data_path)) != SK_OK) goto fail;
  rc = readonly ? open_dbis_ro(s) : open_dbis_rw(s);
  if (rc) {
    status = sk_set_error(SK_ERR_CACHE, "cache %s: opening its databases: %s", dir, mdb_strerror(rc));
    goto fail;
  }
  *out = s;
  return SK_OK;
fail:
  if (s->env) mdb_env_close(s->env);
  if (have_guard) guard_destroy(&s->guard);
  pthread_rwlock_destroy(&s->map_lock);
  free(s);
  return status;
}

/* Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat) and its state
 * letter (field 3). Returns 0 on success. */
static int read_proc_stat(pid_t pid, uint64_t *start_ticks, char *state) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* Field 2 is "(comm)" and comm may hold spaces and parentheses: start after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return -1;
  p += 2;
  if (state) *state = *p;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  if (end == p) return -1;
  *start_ticks = v;
  return 0;
}

static uint64_t own_pid_namespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

sk_status sk_cache_open(const sk_cache_options *opts, sk_cache **out) {
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_open: NULL output");
  *out = NULL;
  if (!opts || !opts->dir || !opts->dir[0])
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_open: no cache directory given");
  if (opts->claim_timeout_s < 0 || opts->claim_timeout_s != opts->claim_timeout_s)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_open: negative claim timeout");
  const char *dir = opts->dir;
  int readonly = opts->readonly != 0;
  uint64_t initial_map = opts->initial_map_bytes ? opts->initial_map_bytes : DEFAULT_MAP_BYTES;
  if (initial_map > MAX_MAP_BYTES) initial_map = MAX_MAP_BYTES;
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) initial_map = (initial_map + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;

  struct stat st;
  SK_TRY(check_directory(dir, readonly, &st));

  sk_cache *c = calloc(1, sizeof *c);
  if (c) c->dir = strdup(dir);
  if (!c || !c->dir) {
    free(c);
    return sk_set_error(SK_ERR_OUT_OF_MEMORY, "cache %s: out of memory", dir);
  }
  c->readonly = readonly;
  atomic_init(&c->writes_disabled, 0);
  c->max_bytes = opts->max_bytes;
  c->claim_timeout_s = opts->claim_timeout_s > 0 ? opts->claim_timeout_s : DEFAULT_CLAIM_TIMEOUT_S;
  if (read_proc_stat(getpid(), &c->self_start_ticks, NULL) != 0) c->self_start_ticks = 0;
  c->self_pidns = own_pid_namespace();
  if (gethostname(c->hostname, sizeof c->hostname) != 0) c->hostname[0] = '\0';
  c->hostname[sizeof c->hostname - 1] = '\0';

  pthread_mutex_lock(&registry_mutex);
  shared_env *s = registry;
  pid_t pid = getpid();
  while (s && !(s->dev == st.st_dev && s->ino == st.st_ino && s->pid == pid)) s = s->next;
  sk_status status = SK_OK;
  if (s) {
    if (s->env_readonly && !readonly)
      status = sk_set_error(SK_ERR_CACHE,
                            "cache %s is already open read-only in this process; close it before "
                            "opening it for writing", dir);
    else s->refs++;
  } else {
    status = open_shared_env(dir, readonly, initial_map, &s);
    if (status == SK_OK) {
      s->dev = st.st_dev;
      s->ino = st.st_ino;
      s->pid = pid;
      s->refs = 1;
      s->next = registry;
      registry = s;
    }
  }
  pthread_mutex_unlock(&registry_mutex);
  if (status != SK_OK) {
    free(c->dir);
    free(c);
    return status;
  }
  c->shared = s;
  *out = c;
  return SK_OK;
}

void sk_cache_close(sk_cache *c) {
  if (!c) return;
  shared_env *s = c->shared;
  pthread_mutex_lock(&registry_mutex);
  if (--s->refs == 0) {
    for (shared_env **pp = &registry; *pp; pp = &(*pp)->next)
      if (*pp == s) {
        *pp = s->next;
        break;
      }
    mdb_env_close(s->env);
    guard_destroy(&s->guard);
    pthread_rwlock_destroy(&s->map_lock);
    free(s);
  }
  pthread_mutex_unlock(&registry_mutex);
  free(c->dir);
  free(c);
}

const char *sk_cache_dir(const sk_cache *c) { return c ? c->dir : ""; }

int sk_cache_is_readonly(const sk_cache *c) {
  return c ? (c->readonly || c->shared->env_readonly) : 0;
}

int sk_cache_is_damaged(const sk_cache *c) {
  if (!c || !is_damaged(c)) return 0;
  damaged_error(c);
  return 1;
}

void sk_cache_disable_writes(sk_cache *c) {
  if (c) atomic_store(&c->writes_disabled, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Lookup                                                                                    */

/* Delete the record at key if it still fails verification (a peer may have replaced it). */
typedef struct {
  const uint8_t *key;
} delete_corrupt_ctx;

static int delete_corrupt_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  delete_corrupt_ctx *ctx = ctx_;
  MDB_val k = {16, (void *)ctx->key}, v;
  int rc = mdb_get(txn, c->shared->records, &k, &v);
  if (rc == MDB_NOTFOUND) return TXN_DISCARD;
  if (rc || (rc = guard_value(&c->shared->guard, &v, "a record"))) return rc;
  sk_record scratch;
  if (sk_record_decode(v.mv_data, v.mv_size, ctx->key, &scratch) == SK_OK) return TXN_DISCARD;
  return delete_record(c->shared, txn, ctx->key, v.mv_size);
}

/* Coarse LRU: rewrite last_used of the record we just read, if it is still that record. */
typedef struct {
  const uint8_t *key;
  uint64_t cubin_hash, now_ms;
} touch_ctx;

static int touch_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  touch_ctx *ctx = ctx_;
  MDB_val k = {16, (void *)ctx->key}, v;
  int rc = mdb_get(txn, c->shared->records, &k, &v);
  if (rc == MDB_NOTFOUND) return TXN_DISCARD;
  if (rc || (rc = guard_value(&c->shared->guard, &v, "a record"))) return rc;
  sk_record r;
  if (sk_record_decode(v.mv_data, v.mv_size, ctx->key, &r) != SK_OK ||
      sk_le64_load((const uint8_t *)v.mv_data + SK_RECORD_OFF_CUBIN_HASH) != ctx->cubin_hash ||
      r.last_used_unix_ms + LRU_TOUCH_INTERVAL_MS >= ctx->now_ms)
    return TXN_DISCARD;
  /* Copy first: the value points into a page that mdb_put may rewrite. */
  void *copy = malloc(v.mv_size);
  if (!copy) return ENOMEM;
  memcpy(copy, v.mv_data, v.mv_size);
  sk_record_set_last_used(copy, v.mv_size, ctx->now_ms);
  MDB_val nv = {v.mv_size, copy};
  rc = mdb_put(txn, c->shared->records, &k, &nv, 0);
  free(copy);
  return rc;
}

/* Copy a verified record out of a transaction into one malloc'd buffer. Returns 0 (*corrupt
 * says whether it verified), ENOMEM, or MDB_CORRUPTED when the value lies outside the file. */
static int copy_out_record(sk_cache *c, const uint8_t key[16], const MDB_val *v, sk_record *rec,
                           void **owned, int *corrupt) {
  *corrupt = 0;
  int rc = guard_value(&c->shared->guard, v, "a record");
  if (rc) return rc;
  void *buf = malloc(v->mv_size ? v->mv_size : 1);
  if (!buf) return ENOMEM;
  memcpy(buf, v->mv_data, v->mv_size);
  /* Verify the copy, not the map: what we hand out is exactly what we checked. */
  if (sk_record_decode(buf, v->mv_size, key, rec) != SK_OK) {
    free(buf);
    *corrupt = 1;
    return 0;
  }
  *owned = buf;
  return 0;
}

sk_status sk_cache_get(sk_cache *c, const uint8_t key[16], sk_lookup *result, sk_record *rec,
                       void **owned) {
  if (!c || !key || !result || !rec || !owned)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_get: NULL argument");
  *result = SK_LOOKUP_MISS;
  *owned = NULL;
  memset(rec, 0, sizeof *rec);
  shared_env *s = c->shared;
  if (is_damaged(c)) return damaged_error(c);
  if (!s->have_records) return SK_OK;

  MDB_txn *txn;
  int rc = txn_begin(s, MDB_RDONLY, &txn);
  if (rc) return lmdb_error(c, "get: mdb_txn_begin", rc);
  MDB_val k = {16, (void *)key}, v;
  rc = mdb_get(txn, s->records, &k, &v);
  if (rc == MDB_NOTFOUND) {
    txn_end(s, txn, 0);
    return SK_OK;
  }
  if (rc) {
    txn_end(s, txn, 0);
    return lmdb_error(c, "get: mdb_get", rc);
  }
  int corrupt;
  rc = copy_out_record(c, key, &v, rec, owned, &corrupt);
  txn_end(s, txn, 0);
  if (rc) return lmdb_error(c, "get", rc);

  char hex[33];
  sk_cache_key_hex(key, hex);
  if (corrupt) {
    char why[1024];
    snprintf(why, sizeof why, "%s", sk_last_error_message());
    *result = SK_LOOKUP_CORRUPT;
    int deleted = 0;
    if (writable(c)) {
      delete_corrupt_ctx ctx = {key};
      deleted = run_write(c, delete_corrupt_fn, &ctx) == 0;
    }
    /* SK_OK with CORRUPT: the message says what was wrong, for the caller's warning. */
    sk_set_error(SK_ERR_CACHE, "cache %s: record %s: %s%s", c->dir, hex, why,
                 deleted ? " (deleted)" : "");
    return SK_OK;
  }
  *result = SK_LOOKUP_HIT;
  uint64_t now = sk_now_unix_ms();
  if (writable(c) && rec->last_used_unix_ms + LRU_TOUCH_INTERVAL_MS < now) {
    touch_ctx ctx = {key, sk_le64_load((const uint8_t *)*owned + SK_RECORD_OFF_CUBIN_HASH), now};
    /* Best effort: a failed touch only makes the record look older to the pruner. */
    if (run_write(c, touch_fn, &ctx) == 0) rec->last_used_unix_ms = now;
    sk_clear_error();
  }
  return SK_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Pruning                                                                                   */

typedef struct {
  uint8_t key[16];
  size_t size;
  uint64_t last_used;
} prune_entry;

typedef struct {
  uint64_t max_bytes;        /* 0 = no size limit */
  uint64_t older_than_ms;    /* 0 = no age limit */
  const uint8_t *protect;    /* a key never pruned (the record a put just stored), or NULL */
  int clean_claims;          /* also drop stale claims */
  uint64_t removed;          /* out */
} prune_ctx;

static int claim_is_stale(const sk_cache *c, const void *val, size_t size, uint64_t now_ms);

static int by_last_used(const void *a_, const void *b_) {
  const prune_entry *a = a_, *b = b_;
  if (a->last_used != b->last_used) return a->last_used < b->last_used ? -1 : 1;
  return memcmp(a->key, b->key, 16);
}

/* A key to delete once a scan is over: deleting during the scan would leave the cursor on pages
 * copied into the transaction, which the guard does not know (keys of up to MAX_KEY_BYTES). */
typedef struct doomed_keys {
  uint8_t (*v)[MAX_KEY_BYTES];
  size_t *size;
  size_t n, cap;
} doomed_keys;

static int doom(doomed_keys *d, const MDB_val *k) {
  if (d->n == d->cap) {
    size_t ncap = d->cap ? d->cap * 2 : 16;
    uint8_t(*nv)[MAX_KEY_BYTES] = realloc(d->v, ncap * sizeof *nv);
    if (nv) d->v = nv;
    size_t *ns = nv ? realloc(d->size, ncap * sizeof *ns) : NULL;
    if (!ns) return ENOMEM;
    d->size = ns;
    d->cap = ncap;
  }
  memcpy(d->v[d->n], k->mv_data, k->mv_size);
  d->size[d->n++] = k->mv_size;
  return 0;
}

static void free_doomed(doomed_keys *d) {
  free(d->v);
  free(d->size);
  memset(d, 0, sizeof *d);
}

static int delete_doomed(MDB_txn *txn, MDB_dbi dbi, doomed_keys *d) {
  int rc = 0;
  for (size_t i = 0; i < d->n && (rc == 0 || rc == MDB_NOTFOUND); i++) {
    MDB_val k = {d->size[i], d->v[i]};
    rc = mdb_del(txn, dbi, &k, NULL);
  }
  free_doomed(d);
  return rc == MDB_NOTFOUND ? 0 : rc;
}

static int prune_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  prune_ctx *ctx = ctx_;
  shared_env *s = c->shared;
  ctx->removed = 0;
  prune_entry *entries = NULL;
  size_t count = 0, capacity = 0;
  uint64_t total = 0;
  doomed_keys odd = {0};
  MDB_cursor *cur;
  int rc = mdb_cursor_open(txn, s->records, &cur);
  if (rc) return rc;
  MDB_val k, v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if ((rc = guard_key(&s->guard, &k)) != 0 || (rc = guard_value(&s->guard, &v, "a record")) != 0) break;
    if (k.mv_size != 16) {
      /* Not ours (no record has another key size): drop it after the scan. */
      if ((rc = doom(&odd, &k)) != 0) break;
      ctx->removed++;
      continue;
    }
    total += v.mv_size;
    if (count == capacity) {
      size_t ncap = capacity ? capacity * 2 : 256;
      prune_entry *n = realloc(entries, ncap * sizeof *n);
      if (!n) {
        rc = ENOMEM;
        break;
      }
      entries = n;
      capacity = ncap;
    }
    prune_entry *e = &entries[count++];
    memcpy(e->key, k.mv_data, 16);
    e->size = v.mv_size;
    /* An unreadable header sorts first: broken records are the first to go. */
    if (!sk_record_peek_last_used(v.mv_data, v.mv_size, &e->last_used)) e->last_used = 0;
  }
  mdb_cursor_close(cur);
  if (rc == MDB_NOTFOUND) rc = delete_doomed(txn, s->records, &odd);
  else free_doomed(&odd);
  if (rc) {
    free(entries);
    return rc;
  }
  if (count) qsort(entries, count, sizeof *entries, by_last_used);
  for (size_t i = 0; i < count && rc == 0; i++) {
    prune_entry *e = &entries[i];
    if (ctx->protect && memcmp(ctx->protect, e->key, 16) == 0) continue;
    int too_old = ctx->older_than_ms && e->last_used < ctx->older_than_ms;
    int too_big = ctx->max_bytes && total > ctx->max_bytes;
    if (!too_old && !too_big) continue;
    MDB_val dk = {16, e->key};
    rc = mdb_del(txn, s->records, &dk, NULL);
    if (rc == 0) {
      total -= e->size;
      ctx->removed++;
    }
  }
  free(entries);
  if (rc) return rc;
  /* The scan gave the exact total: store it (this also repairs a counter gone wrong). */
  rc = data_bytes_set(s, txn, total);
  if (rc || !ctx->clean_claims) return rc;

  uint64_t now = sk_now_unix_ms();
  doomed_keys stale = {0};
  if ((rc = mdb_cursor_open(txn, s->claims, &cur)) != 0) return rc;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if ((rc = guard_key(&s->guard, &k)) != 0 || (rc = guard_value(&s->guard, &v, "a claim")) != 0) break;
    if (claim_is_stale(c, v.mv_data, v.mv_size, now) && (rc = doom(&stale, &k)) != 0) break;
  }
  mdb_cursor_close(cur);
  if (rc == MDB_NOTFOUND) return delete_doomed(txn, s->claims, &stale);
  free_doomed(&stale);
  return rc;
}

static sk_status prune_internal(sk_cache *c, prune_ctx *ctx) {
  int rc = run_write(c, prune_fn, ctx);
  if (rc) return lmdb_error(c, "prune", rc);
  return SK_OK;
}

sk_status sk_cache_prune(sk_cache *c, uint64_t max_bytes, uint64_t older_than_unix_ms,
                         uint64_t *removed) {
  if (removed) *removed = 0;
  if (!c) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_prune: NULL cache");
  if (!writable(c)) return refuse_write(c, "prune");
  prune_ctx ctx = {max_bytes, older_than_unix_ms, NULL, 1, 0};
  SK_TRY(prune_internal(c, &ctx));
  if (removed) *removed = ctx.removed;
  return SK_OK;
}

/* After a put or import: over the cap, prune the least recently used records down to 90% of it
 * so that the next puts do not prune again right away. */
static void auto_prune(sk_cache *c, uint64_t data_bytes, const uint8_t *protect) {
  if (!c->max_bytes || data_bytes <= c->max_bytes || !writable(c)) return;
  prune_ctx ctx = {c->max_bytes / 100 * PRUNE_TARGET_PERCENT, 0, protect, 0, 0};
  if (prune_internal(c, &ctx) != SK_OK)
    sk_warn("%s", sk_last_error_message()); /* the put itself succeeded */
}

/* ---------------------------------------------------------------------------------------- */
/* Put, remove                                                                               */

typedef struct {
  const uint8_t *key;
  const void *buf;
  size_t size;
  uint64_t data_bytes_after; /* out */
} put_ctx;

static int put_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  put_ctx *ctx = ctx_;
  shared_env *s = c->shared;
  MDB_val k = {16, (void *)ctx->key}, v;
  size_t old_size = 0;
  uint64_t total;
  int rc = data_bytes_get(s, txn, &total);
  if (rc) return rc;
  rc = mdb_get(txn, s->records, &k, &v);
  if (rc == 0) old_size = v.mv_size;
  else if (rc != MDB_NOTFOUND) return rc;
  v.mv_size = ctx->size;
  v.mv_data = (void *)ctx->buf;
  if ((rc = mdb_put(txn, s->records, &k, &v, 0)) != 0) return rc;
  rc = mdb_del(txn, s->claims, &k, NULL); /* the claim is fulfilled */
  if (rc && rc != MDB_NOTFOUND) return rc;
  ctx->data_bytes_after = (total >= old_size ? total - old_size : 0) + ctx->size;
  return data_bytes_set(s, txn, ctx->data_bytes_after);
}

sk_status sk_cache_put(sk_cache *c, const sk_record *rec) {
  if (!c || !rec) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_put: NULL argument");
  if (!writable(c)) return refuse_write(c, "put");
  sk_record r = *rec;
  uint64_t now = sk_now_unix_ms();
  if (!r.created_unix_ms) r.created_unix_ms = now;
  if (!r.last_used_unix_ms) r.last_used_unix_ms = now;
  void *buf;
  size_t size;
  char hex[33];
  sk_cache_key_hex(rec->key, hex);
  sk_status status = sk_record_encode(&r, &buf, &size);
  if (status != SK_OK) return sk_wrap_error(status, "cache %s: put %s", c->dir, hex);
  put_ctx ctx = {rec->key, buf, size, 0};
  int rc = run_write(c, put_fn, &ctx);
  free(buf);
  if (rc) {
    char what[64];
    snprintf(what, sizeof what, "put %s", hex);
    return lmdb_error(c, what, rc);
  }
  auto_prune(c, ctx.data_bytes_after, rec->key);
  return SK_OK;
}

typedef struct {
  const uint8_t *key;
  int found;
} remove_ctx;

static int remove_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  remove_ctx *ctx = ctx_;
  MDB_val k = {16, (void *)ctx->key}, v;
  int rc = mdb_get(txn, c->shared->records, &k, &v);
  ctx->found = rc == 0;
  if (rc == MDB_NOTFOUND) return TXN_DISCARD;
  if (rc) return rc;
  return delete_record(c->shared, txn, ctx->key, v.mv_size);
}

sk_status sk_cache_remove(sk_cache *c, const uint8_t key[16]) {
  if (!c || !key) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_remove: NULL argument");
  if (!writable(c)) return refuse_write(c, "remove");
  char hex[33];
  sk_cache_key_hex(key, hex);
  remove_ctx ctx = {key, 0};
  int rc = run_write(c, remove_fn, &ctx);
  if (rc) {
    char what[64];
    snprintf(what, sizeof what, "remove %s", hex);
    return lmdb_error(c, what, rc);
  }
  if (!ctx.found) return sk_set_error(SK_ERR_NOT_FOUND, "cache %s: no record %s", c->dir, hex);
  return SK_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Claims: cross-process single flight                                                       */

/* Claim value: u32 magic, u32 pid, u64 process start (ticks since boot), u64 claim unix ms,
 * u64 pid-namespace inode, hostname NUL-terminated. */
#define CLAIM_MAGIC 0x4d4c434bu /* "KCLM" */
#define CLAIM_FIXED_SIZE 32u

static size_t encode_claim(const sk_cache *c, uint8_t *buf, size_t cap) {
  size_t host_len = strlen(c->hostname) + 1;
  if (CLAIM_FIXED_SIZE + host_len > cap) host_len = cap - CLAIM_FIXED_SIZE;
  sk_le32_store(buf, CLAIM_MAGIC);
  sk_le32_store(buf + 4, (uint32_t)getpid());
  sk_le64_store(buf + 8, c->self_start_ticks);
  sk_le64_store(buf + 16, sk_now_unix_ms());
  sk_le64_store(buf + 24, c->self_pidns);
  memcpy(buf + CLAIM_FIXED_SIZE, c->hostname, host_len);
  buf[CLAIM_FIXED_SIZE + host_len - 1] = '\0';
  return CLAIM_FIXED_SIZE + host_len;
}

/* Is the claim ours (this process)? */
static int claim_is_own(const sk_cache *c, const uint8_t *v, size_t size) {
  return size > CLAIM_FIXED_SIZE && sk_le32_load(v) == CLAIM_MAGIC &&
         sk_le32_load(v + 4) == (uint32_t)getpid() && sk_le64_load(v + 8) == c->self_start_ticks &&
         sk_le64_load(v + 24) == c->self_pidns && v[size - 1] == '\0' &&
         strcmp((const char *)v + CLAIM_FIXED_SIZE, c->hostname) == 0;
}

/* A claim is stale when it is malformed, older than the timeout, or - when it comes from a
 * process we can see (same host and pid namespace) - that process is gone: dead, a zombie, or
 * its pid now belongs to a process with another start time. */
static int claim_is_stale(const sk_cache *c, const void *val, size_t size, uint64_t now_ms) {
  const uint8_t *v = val;
  if (size <= CLAIM_FIXED_SIZE || sk_le32_load(v) != CLAIM_MAGIC || v[size - 1] != '\0') return 1;
  uint64_t claimed_ms = sk_le64_load(v + 16);
  uint64_t timeout_ms = (uint64_t)(c->claim_timeout_s * 1000.0);
  if (claimed_ms > now_ms + timeout_ms) return 1; /* from the far future: a bogus clock */
  if (now_ms > claimed_ms && now_ms - claimed_ms > timeout_ms) return 1;
  if (strcmp((const char *)v + CLAIM_FIXED_SIZE, c->hostname) != 0 ||
      sk_le64_load(v + 24) != c->self_pidns)
    return 0; /* another machine or container: only age tells */
  pid_t pid = (pid_t)sk_le32_load(v + 4);
  if (pid <= 0) return 1;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  uint64_t start;
  char state;
  if (read_proc_stat(pid, &start, &state) != 0) return kill(pid, 0) != 0 && errno == ESRCH;
  if (state == 'Z' || state == 'X') return 1; /* killed, not yet reaped */
  uint64_t claimed_start = sk_le64_load(v + 8);
  return claimed_start != 0 && start != claimed_start;
}

typedef struct {
  const uint8_t *key;
  int take_over;      /* the wait is over: claim even a live peer's key */
  sk_acquire outcome; /* out; SK_ACQUIRE_UNCLAIMED here means "wait" */
  sk_record *rec;
  void **owned;
} acquire_ctx;

static int acquire_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  acquire_ctx *ctx = ctx_;
  shared_env *s = c->shared;
  free(*ctx->owned); /* a rerun after map growth starts over */
  *ctx->owned = NULL;
  ctx->outcome = SK_ACQUIRE_UNCLAIMED;
  int changed = 0;
  MDB_val k = {16, (void *)ctx->key}, v;
  int rc = mdb_get(txn, s->records, &k, &v);
  if (rc == 0) {
    int corrupt;
    if ((rc = copy_out_record(c, ctx->key, &v, ctx->rec, ctx->owned, &corrupt)) != 0) return rc;
    if (!corrupt) {
      ctx->outcome = SK_ACQUIRE_HIT;
      return TXN_DISCARD;
    }
    /* A corrupt record counts as absent; drop it so that our put replaces it cleanly. */
    if ((rc = delete_record(s, txn, ctx->key, v.mv_size)) != 0) return rc;
    changed = 1;
  } else if (rc != MDB_NOTFOUND) {
    return rc;
  }
  rc = mdb_get(txn, s->claims, &k, &v);
  if (rc && rc != MDB_NOTFOUND) return rc;
  if (rc == 0 && (rc = guard_value(&s->guard, &v, "a claim")) != 0) return rc;
  if (rc == MDB_NOTFOUND || ctx->take_over || claim_is_stale(c, v.mv_data, v.mv_size, sk_now_unix_ms())) {
    uint8_t buf[CLAIM_FIXED_SIZE + HOSTNAME_MAX];
    MDB_val nv = {encode_claim(c, buf, sizeof buf), buf};
    if ((rc = mdb_put(txn, s->claims, &k, &nv, 0)) != 0) return rc;
    ctx->outcome = SK_ACQUIRE_CLAIMED;
    return 0;
  }
  return changed ? 0 : TXN_DISCARD; /* a live peer compiles it: wait */
}

sk_status sk_cache_acquire(sk_cache *c, const uint8_t key[16], double max_wait_s,
                           sk_acquire *result, int *waited, sk_record *rec, void **owned) {
  if (!c || !key || !result || !waited || !rec || !owned)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_acquire: NULL argument");
  *waited = 0;
  *owned = NULL;
  *result = SK_ACQUIRE_UNCLAIMED;
  memset(rec, 0, sizeof *rec);
  if (!(max_wait_s > 0)) max_wait_s = 0; /* also NaN */
  char hex[33];
  sk_cache_key_hex(key, hex);
  double deadline = sk_now_seconds() + max_wait_s;
  double backoff = CLAIM_BACKOFF_START_S;
  for (;;) {
    if (!writable(c)) {
      /* Nobody to coordinate with: a hit is still a hit, else compile without a claim. */
      sk_lookup lookup;
      SK_TRY(sk_cache_get(c, key, &lookup, rec, owned));
      *result = lookup == SK_LOOKUP_HIT ? SK_ACQUIRE_HIT : SK_ACQUIRE_UNCLAIMED;
      sk_clear_error();
      return SK_OK;
    }
    acquire_ctx ctx = {key, sk_now_seconds() >= deadline, SK_ACQUIRE_UNCLAIMED, rec, owned};
    int rc = run_write(c, acquire_fn, &ctx);
    if (rc) {
      free(*owned);
      *owned = NULL;
      char what[64];
      snprintf(what, sizeof what, "acquire %s", hex);
      return lmdb_error(c, what, rc);
    }
    if (ctx.outcome != SK_ACQUIRE_UNCLAIMED) {
      *result = ctx.outcome;
      return SK_OK;
    }
    *waited = 1;
    double left = deadline - sk_now_seconds();
    if (left <= 0) continue; /* the next round takes the claim over */
    sleep_seconds(left < backoff ? left : backoff);
    backoff = backoff * 2 < CLAIM_BACKOFF_MAX_S ? backoff * 2 : CLAIM_BACKOFF_MAX_S;
  }
}

static int release_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  MDB_val k = {16, ctx_}, v;
  int rc = mdb_get(txn, c->shared->claims, &k, &v);
  if (rc == MDB_NOTFOUND) return TXN_DISCARD;
  if (rc || (rc = guard_value(&c->shared->guard, &v, "a claim"))) return rc;
  /* Only our own claim: after a take-over the key belongs to the peer that took it. */
  if (!claim_is_own(c, v.mv_data, v.mv_size)) return TXN_DISCARD;
  return mdb_del(txn, c->shared->claims, &k, NULL);
}

sk_status sk_cache_release(sk_cache *c, const uint8_t key[16]) {
  if (!c || !key) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_release: NULL argument");
  if (!writable(c)) return SK_OK; /* we could not have claimed anything */
  int rc = run_write(c, release_fn, (void *)key);
  if (rc) {
    char hex[33], what[64];
    sk_cache_key_hex(key, hex);
    snprintf(what, sizeof what, "release %s", hex);
    return lmdb_error(c, what, rc);
  }
  return SK_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Iteration, statistics                                                                     */

typedef struct {
  uint8_t key[16];
  size_t key_size;
  size_t size;
  void *data;
} batch_item;

sk_status sk_cache_foreach(sk_cache *c, sk_cache_visit_fn cb, void *ud) {
  if (!c || !cb) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_foreach: NULL argument");
  shared_env *s = c->shared;
  if (is_damaged(c)) return damaged_error(c);
  if (!s->have_records) return SK_OK;
  /* Records are copied out in batches and visited with no transaction open, so that the
   * callback may call anything (even writes that grow the map) and no snapshot is pinned. Each
   * batch resumes after the last key of the one before; keys must come in increasing order, so
   * the walk ends even on a damaged file. */
  uint8_t last_key[MAX_KEY_BYTES];
  size_t last_key_size = 0;
  int started = 0, done = 0, stop = 0;
  batch_item *items = NULL;
  size_t capacity = 0;
  sk_status status = SK_OK;
  while (!done && !stop && status == SK_OK) {
    size_t count = 0, bytes = 0;
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    int rc = txn_begin(s, MDB_RDONLY, &txn);
    if (rc) {
      status = lmdb_error(c, "foreach: mdb_txn_begin", rc);
      break;
    }
    rc = mdb_cursor_open(txn, s->records, &cur);
    MDB_val k = {last_key_size, last_key}, v;
    if (rc == 0) {
      if (!started) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
      } else {
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc == 0 && (rc = guard_key(&s->guard, &k)) == 0 && k.mv_size == last_key_size &&
            memcmp(k.mv_data, last_key, last_key_size) == 0)
          rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
      }
    }
    while (rc == 0 && (count == 0 || bytes < BATCH_BYTES)) {
      if ((rc = guard_key(&s->guard, &k)) != 0 || (rc = guard_value(&s->guard, &v, "a record")) != 0) break;
      if (started && !key_after(&k, last_key, last_key_size)) {
        rc = guard_damage(&s->guard, "records out of key order");
        break;
      }
      started = 1;
      if (count == capacity) {
        size_t ncap = capacity ? capacity * 2 : 64;
        batch_item *n = realloc(items, ncap * sizeof *n);
        if (!n) {
          rc = ENOMEM;
          break;
        }
        items = n;
        capacity = ncap;
      }
      batch_item *it = &items[count];
      it->data = malloc(v.mv_size ? v.mv_size : 1);
      if (!it->data) {
        rc = ENOMEM;
        break;
      }
      memcpy(it->data, v.mv_data, v.mv_size);
      it->size = v.mv_size;
      it->key_size = k.mv_size;
      memset(it->key, 0, 16);
      memcpy(it->key, k.mv_data, k.mv_size < 16 ? k.mv_size : 16);
      last_key_size = k.mv_size; /* at most MAX_KEY_BYTES: guard_key */
      memcpy(last_key, k.mv_data, last_key_size);
      count++;
      bytes += v.mv_size;
      rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (cur) mdb_cursor_close(cur);
    txn_end(s, txn, 0);
    if (rc == MDB_NOTFOUND) done = 1;
    else if (rc) status = lmdb_error(c, "foreach", rc);
    for (size_t i = 0; i < count; i++) {
      batch_item *it = &items[i];
      if (!stop && status == SK_OK) {
        sk_record r;
        char why[1024] = "";
        const sk_record *rp = &r;
        if (it->key_size != 16) {
          snprintf(why, sizeof why, "key is %zu bytes, expected 16", it->key_size);
          rp = NULL;
        } else if (sk_record_decode(it->data, it->size, it->key, &r) != SK_OK) {
          snprintf(why, sizeof why, "%s", sk_last_error_message());
          rp = NULL;
        }
        stop = cb(ud, it->key, rp, it->size, rp ? NULL : why) != 0;
      }
      free(it->data);
    }
  }
  free(items);
  return status;
}

sk_status sk_cache_get_stat(sk_cache *c, sk_cache_stat *st) {
  if (!c || !st) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_get_stat: NULL argument");
  memset(st, 0, sizeof *st);
  shared_env *s = c->shared;
  if (is_damaged(c)) return damaged_error(c);
  MDB_txn *txn;
  int rc = txn_begin(s, MDB_RDONLY, &txn);
  if (rc) return lmdb_error(c, "stat: mdb_txn_begin", rc);
  MDB_stat ms;
  if (s->have_records && (rc = mdb_stat(txn, s->records, &ms)) == 0) st->records = ms.ms_entries;
  if (!rc && s->have_claims && (rc = mdb_stat(txn, s->claims, &ms)) == 0) st->claims = ms.ms_entries;
  if (!rc) rc = data_bytes_get(s, txn, &st->data_bytes);
  MDB_envinfo info;
  if (!rc && (rc = mdb_env_info(s->env, &info)) == 0) st->map_bytes = info.me_mapsize;
  if (!rc && (rc = mdb_env_stat(s->env, &ms)) == 0) st->page_size = ms.ms_psize;
  txn_end(s, txn, 0);
  if (rc) return lmdb_error(c, "stat", rc);
  char path[4096];
  struct stat fst;
  snprintf(path, sizeof path, "%s/data.mdb", c->dir);
  if (stat(path, &fst) == 0) st->file_bytes = (uint64_t)fst.st_size;
  return SK_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Export, import                                                                            */

sk_status sk_cache_export(sk_cache *c, const char *path) {
  if (!c || !path || !*path)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_export: NULL argument");
  shared_env *s = c->shared;
  if (is_damaged(c)) return damaged_error(c);
  size_t n = strlen(path);
  char *tmp = malloc(n + 16);
  if (!tmp) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "export %s: out of memory", path);
  /* Write beside the target and rename: a failed export leaves nothing behind. */
  snprintf(tmp, n + 16, "%s.tmp-XXXXXX", path);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    sk_status st = sk_set_error(SK_ERR_CACHE, "export %s: cannot create %s: %s", path, tmp,
                                strerror(errno));
    free(tmp);
    return st;
  }
  int rc = 0;
  for (int attempt = 0; attempt < MAX_TXN_RETRIES; attempt++) {
    if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
      rc = errno;
      break;
    }
    pthread_rwlock_rdlock(&s->map_lock); /* mdb_env_copyfd2 runs a read transaction */
    rc = mdb_env_copyfd2(s->env, fd, MDB_CP_COMPACT);
    pthread_rwlock_unlock(&s->map_lock);
    if (rc != MDB_MAP_RESIZED) break;
    if ((rc = adopt_map_size(s)) != 0) break;
  }
  if (rc == 0 && fsync(fd) != 0) rc = errno;
  if (close(fd) != 0 && rc == 0) rc = errno;
  if (rc == 0 && rename(tmp, path) != 0) rc = errno;
  sk_status status = SK_OK;
  if (rc) {
    unlink(tmp);
    status = sk_set_error(SK_ERR_CACHE, "export of cache %s to %s failed: %s", c->dir, path,
                          mdb_strerror(rc));
  }
  free(tmp);
  return status;
}

typedef struct {
  MDB_txn *src_txn;
  MDB_dbi src_records;
  guard *src_guard;                /* the export's mapping and its damage */
  int overwrite;
  uint8_t next_key[MAX_KEY_BYTES]; /* the batch resumes after this key (the whole key: records of
                                      other sizes are not ours, but they are in the order) */
  size_t next_key_size;
  int started, done;
  /* Out of each batch, taken by the caller once it is committed (a batch redone after the map
   * grew starts from the same place). */
  sk_cache_import_counts batch;
  uint8_t batch_last[MAX_KEY_BYTES];
  size_t batch_last_size;
  int batch_done;
  uint64_t data_bytes_after;
} import_ctx;

static int import_fn(sk_cache *c, MDB_txn *txn, void *ctx_) {
  import_ctx *ctx = ctx_;
  shared_env *s = c->shared;
  memset(&ctx->batch, 0, sizeof ctx->batch);
  ctx->batch_done = 0;
  uint64_t total;
  int rc = data_bytes_get(s, txn, &total);
  if (rc) return rc;
  MDB_cursor *cur;
  if ((rc = mdb_cursor_open(ctx->src_txn, ctx->src_records, &cur)) != 0) return rc;
  MDB_val k = {ctx->next_key_size, ctx->next_key}, v;
  uint8_t last[MAX_KEY_BYTES];
  size_t last_size = ctx->next_key_size;
  memcpy(last, ctx->next_key, last_size);
  if (!ctx->started) {
    rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
  } else {
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && (rc = guard_key(ctx->src_guard, &k)) == 0 && k.mv_size == last_size &&
        memcmp(k.mv_data, last, last_size) == 0)
      rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  }
  int have_last = ctx->started;
  uint64_t added = 0, removed = 0, bytes = 0;
  while (rc == 0 && bytes < BATCH_BYTES) {
    if ((rc = guard_key(ctx->src_guard, &k)) != 0 || (rc = guard_value(ctx->src_guard, &v, "a record")) != 0) break;
    /* Each record must come after the last one, or a batch could restart where it began. */
    if (have_last && !key_after(&k, last, last_size)) {
      rc = guard_damage(ctx->src_guard, "records out of key order");
      break;
    }
    have_last = 1;
    memcpy(last, k.mv_data, k.mv_size);
    last_size = k.mv_size;
    sk_record r;
    MDB_val old;
    int valid = k.mv_size == 16 && sk_record_decode(v.mv_data, v.mv_size, k.mv_data, &r) == SK_OK;
    int exists = 0;
    if (valid) {
      rc = mdb_get(txn, s->records, &k, &old);
      if (rc && rc != MDB_NOTFOUND) break;
      exists = rc == 0;
      rc = 0;
    }
    if (!valid) {
      ctx->batch.invalid++;
    } else if (exists && !ctx->overwrite) {
      ctx->batch.kept++;
    } else {
      size_t old_size = exists ? old.mv_size : 0;
      MDB_val nv = v;
      if ((rc = mdb_put(txn, s->records, &k, &nv, 0)) != 0) break;
      added += v.mv_size;
      removed += old_size;
      ctx->batch.imported++;
    }
    bytes += v.mv_size;
    rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  }
  mdb_cursor_close(cur);
  if (rc == MDB_NOTFOUND) {
    ctx->batch_done = 1;
    rc = 0;
  }
  if (rc) return rc;
  memcpy(ctx->batch_last, last, last_size);
  ctx->batch_last_size = last_size;
  ctx->data_bytes_after = (total >= removed ? total - removed : 0) + added;
  return data_bytes_set(s, txn, ctx->data_bytes_after);
}

sk_status sk_cache_import(sk_cache *c, const char *path, int overwrite, sk_cache_import_counts *counts) {
  if (counts) memset(counts, 0, sizeof *counts);
  if (!c || !path || !*path)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_import: NULL argument");
  if (!writable(c)) return refuse_write(c, "import");
  struct stat st;
  if (stat(path, &st) != 0)
    return sk_set_error(SK_ERR_CACHE, "import %s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return sk_set_error(SK_ERR_CACHE, "import %s: not a regular file (expected a file written by "
                        "sk-cache export)", path);
  if (st.st_size == 0)
    return sk_set_error(SK_ERR_CACHE, "import %s: the file is empty (expected a file written by sk-cache export)",
                        path);
  char why[400];
  if (sk_lmdb_check_meta(path, why, sizeof why) > 0)
    return sk_set_error(SK_ERR_CACHE, "import %s: the file is damaged (%s); nothing was imported", path, why);
  MDB_env *src = NULL;
  int rc = mdb_env_create(&src);
  if (rc == 0) {
    mdb_env_set_maxdbs(src, 4);
    rc = mdb_env_open(src, path, MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0);
  }
  if (rc) {
    if (src) mdb_env_close(src);
    return sk_set_error(SK_ERR_CACHE, "import %s: not a readable cache export: %s", path,
                        mdb_strerror(rc));
  }
  sk_status status = check_not_truncated(src, path, "import");
  guard src_guard;
  int have_guard = 0;
  if (status == SK_OK) {
    if ((rc = guard_init(&src_guard, src)) != 0)
      status = sk_set_error(SK_ERR_CACHE, "import %s: %s", path, mdb_strerror(rc));
    else have_guard = 1;
  }
  MDB_txn *src_txn = NULL;
  import_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  sk_cache_import_counts total = {0, 0, 0};
  uint64_t data_bytes = 0;
  if (status == SK_OK && (rc = mdb_txn_begin(src, NULL, MDB_RDONLY, &src_txn)) != 0)
    status = sk_set_error(SK_ERR_CACHE, "import %s: %s", path, mdb_strerror(rc));
  if (status == SK_OK && sk_lmdb_check(src, src_txn, why, sizeof why) > 0)
    status = sk_set_error(SK_ERR_CACHE, "import %s: the file is damaged (%s); nothing was imported", path, why);
  if (status == SK_OK && (rc = mdb_dbi_open(src_txn, "records", 0, &ctx.src_records)) != 0)
    status = sk_set_error(SK_ERR_CACHE, "import %s: %s", path,
                          rc == MDB_NOTFOUND ? "no records database (not an sk-cache export?)"
                                             : mdb_strerror(rc));
  ctx.src_txn = src_txn;
  ctx.src_guard = &src_guard;
  ctx.overwrite = overwrite;
  /* One write transaction per batch keeps a huge import from needing a huge dirty list. Every
   * batch takes at least one record and resumes after the last one, so this ends. */
  while (status == SK_OK && !ctx.done) {
    rc = run_write(c, import_fn, &ctx);
    if (rc) {
      if (have_guard && atomic_load(&src_guard.damaged))
        status = sk_set_error(SK_ERR_CACHE, "import %s: the file is damaged (%s); %llu records were imported before it "
                              "was found", path, src_guard.why, (unsigned long long)total.imported);
      else if (rc == MDB_CORRUPTED && is_damaged(c)) status = damaged_error(c);
      else status = sk_set_error(SK_ERR_CACHE, "import %s into cache %s: %s", path, c->dir, mdb_strerror(rc));
      break;
    }
    total.imported += ctx.batch.imported;
    total.kept += ctx.batch.kept;
    total.invalid += ctx.batch.invalid;
    data_bytes = ctx.data_bytes_after;
    memcpy(ctx.next_key, ctx.batch_last, ctx.batch_last_size);
    ctx.next_key_size = ctx.batch_last_size;
    ctx.started = 1;
    ctx.done = ctx.batch_done;
  }
  if (src_txn) mdb_txn_abort(src_txn);
  mdb_env_close(src);
  if (have_guard) guard_destroy(&src_guard);
  if (counts) *counts = total;
  if (status == SK_OK) auto_prune(c, data_bytes, NULL);
  return status;
}

/* ---------------------------------------------------------------------------------------- */
/* Default directory                                                                         */

static sk_status format_dir(char *buf, size_t size, const char *base, const char *suffix) {
  int n = snprintf(buf, size, "%s%s", base, suffix);
  if (n < 0 || (size_t)n >= size)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "cache directory %s%s is longer than %zu bytes",
                        base, suffix, size ? size - 1 : 0);
  return SK_OK;
}

sk_status sk_cache_default_dir(char *buf, size_t size) {
  if (!buf || size == 0)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_cache_default_dir: no buffer");
  buf[0] = '\0';
  const char *v = sk_env_str("SPARKINFER_CACHE_DIR");
  if (v) return format_dir(buf, size, v, "");
  v = sk_env_str("XDG_CACHE_HOME");
  if (v && v[0] == '/') return format_dir(buf, size, v, "/sparkinfer"); /* XDG: relative = unset */
  v = sk_env_str("HOME");
  if (v) return format_dir(buf, size, v, "/.cache/sparkinfer");
  struct passwd pw, *res = NULL;
  char pwbuf[4096];
  if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res && res->pw_dir &&
      res->pw_dir[0])
    return format_dir(buf, size, res->pw_dir, "/.cache/sparkinfer");
  return sk_set_error(SK_ERR_NOT_FOUND,
                      "no cache directory: SPARKINFER_CACHE_DIR, XDG_CACHE_HOME and HOME are unset "
                      "and the user has no home directory");
}
