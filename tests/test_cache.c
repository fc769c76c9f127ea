/* tests/test_cache.c - the LMDB cubin store (cache/store.c) and the sk-cache tool. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "cache_internal.h"
#include "base.h"
#include "sparkinfer/jit.h"

/* ---------------------------------------------------------------------------------------- */
/* Fixture: a fresh temporary root per test, removed afterwards.                             */

static char root_dir[256];
static char cache_dir[320];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  chmod(path, 0700); /* a test may have left it unreadable */
  remove(path);
  return 0;
}

static void setup(void) {
  unsigned seed = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
  srand(seed);
  fprintf(stderr, "test_cache: random seed %u\n", seed);
  snprintf(root_dir, sizeof root_dir, "/tmp/sk-cache-test-XXXXXX");
  cr_assert_not_null(mkdtemp(root_dir), "mkdtemp: %s", strerror(errno));
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", root_dir);
}

/* chattr +i / -i: the one way to make a file unwritable even for root. Returns 0 on success. */
static int set_immutable(const char *path, int on) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int flags = 0, rc = ioctl(fd, FS_IOC_GETFLAGS, &flags);
  if (rc == 0) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    rc = ioctl(fd, FS_IOC_SETFLAGS, &flags);
  }
  close(fd);
  return rc;
}

static char immutable_path[400];

static char scan_root[64]; /* the page scan's directory on tmpfs, outside root_dir */

static void teardown(void) {
  if (scan_root[0]) nftw(scan_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (immutable_path[0]) set_immutable(immutable_path, 0);
  if (root_dir[0]) nftw(root_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(cache, .init = setup, .fini = teardown);

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                   */

typedef struct test_rec {
  sk_record rec;
  uint8_t *cubin;
  char meta[256];
  char name[64];
} test_rec;

static void random_bytes(void *p, size_t n) {
  for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)rand();
}

static void make_rec(test_rec *t, size_t cubin_size) {
  memset(t, 0, sizeof *t);
  random_bytes(t->rec.key, 16);
  snprintf(t->rec.arch, sizeof t->rec.arch, "sm_120a");
  t->cubin = malloc(cubin_size);
  cr_assert_not_null(t->cubin);
  random_bytes(t->cubin, cubin_size);
  int block = 32 << (rand() % 4);
  snprintf(t->name, sizeof t->name, "_ZN7sk_test5scaleIfLi%dEEEvPfS1_f", block);
  snprintf(t->meta, sizeof t->meta,
           "{\"op\":\"test.scale\",\"name\":\"sk_test::scale<float, %d>\",\"params\":\"dtype=f32\","
           "\"options\":[\"-std=c++17\"],\"log\":\"\"}",
           block);
  t->rec.lowered_name = t->name;
  t->rec.metadata_json = t->meta;
  t->rec.cubin = t->cubin;
  t->rec.cubin_size = cubin_size;
  t->rec.compile_ms = (uint32_t)(rand() % 5000);
}

static void free_rec(test_rec *t) { free(t->cubin); }

static sk_cache *open_cache_opts(const sk_cache_options *o) {
  sk_cache *c = NULL;
  sk_status st = sk_cache_open(o, &c);
  cr_assert_eq(st, SK_OK, "sk_cache_open %s: %s", o->dir, sk_last_error_message());
  return c;
}

static sk_cache *open_cache(void) {
  sk_cache_options o = {.dir = cache_dir};
  return open_cache_opts(&o);
}

static void put_ok(sk_cache *c, const test_rec *t) {
  cr_assert_eq(sk_cache_put(c, &t->rec), SK_OK, "put: %s", sk_last_error_message());
}

/* Assert that key is a hit with exactly t's contents. */
static void expect_hit(sk_cache *c, const test_rec *t) {
  sk_lookup res;
  sk_record r;
  void *owned = NULL;
  cr_assert_eq(sk_cache_get(c, t->rec.key, &res, &r, &owned), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(res, SK_LOOKUP_HIT, "lookup result %d: %s", res, sk_last_error_message());
  cr_assert_not_null(owned);
  cr_assert_eq(r.cubin_size, t->rec.cubin_size);
  cr_assert_arr_eq(r.cubin, t->cubin, t->rec.cubin_size);
  cr_assert_str_eq(r.metadata_json, t->meta);
  cr_assert_str_eq(r.lowered_name, t->name);
  cr_assert_str_eq(r.arch, t->rec.arch);
  cr_assert_arr_eq(r.key, t->rec.key, 16);
  cr_assert_eq(((uintptr_t)r.cubin) % SK_RECORD_CUBIN_ALIGN, 0, "cubin is aligned");
  free(owned);
}

static sk_lookup lookup(sk_cache *c, const uint8_t key[16]) {
  sk_lookup res;
  sk_record r;
  void *owned = NULL;
  cr_assert_eq(sk_cache_get(c, key, &res, &r, &owned), SK_OK, "%s", sk_last_error_message());
  free(owned);
  return res;
}

typedef struct verify_counts {
  uint64_t good, bad, bytes;
} verify_counts;

static int count_visit(void *ud, const uint8_t key[16], const sk_record *rec, size_t size,
                       const char *error) {
  verify_counts *v = ud;
  (void)key;
  if (rec) v->good++;
  else {
    v->bad++;
    fprintf(stderr, "bad record: %s\n", error);
  }
  v->bytes += size;
  return 0;
}

static verify_counts verify_all(sk_cache *c) {
  verify_counts v = {0, 0, 0};
  cr_assert_eq(sk_cache_foreach(c, count_visit, &v), SK_OK, "%s", sk_last_error_message());
  return v;
}

static sk_cache_stat stat_of(sk_cache *c) {
  sk_cache_stat st;
  cr_assert_eq(sk_cache_get_stat(c, &st), SK_OK, "%s", sk_last_error_message());
  return st;
}

/* Flip one byte of a stored record behind the cache's back (no sk_cache may be open here: LMDB
 * forbids a second handle on one environment in a process). offset < 0 counts from the end. */
static void corrupt_stored(const char *dir, const uint8_t key[16], long offset) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_val k = {16, (void *)key}, v;
  cr_assert_eq(mdb_env_create(&env), 0);
  mdb_env_set_maxdbs(env, 4);
  cr_assert_eq(mdb_env_open(env, dir, 0, 0600), 0);
  cr_assert_eq(mdb_env_set_mapsize(env, 0), 0);
  cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
  cr_assert_eq(mdb_dbi_open(txn, "records", 0, &dbi), 0);
  cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
  uint8_t *copy = malloc(v.mv_size);
  memcpy(copy, v.mv_data, v.mv_size);
  size_t pos = offset < 0 ? v.mv_size - (size_t)(-offset) : (size_t)offset;
  copy[pos] ^= 0x5a;
  MDB_val nv = {v.mv_size, copy};
  cr_assert_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
  cr_assert_eq(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  free(copy);
}

static double now_s(void) { return sk_now_seconds(); }

/* ---------------------------------------------------------------------------------------- */
/* Basics                                                                                    */

Test(cache, open_creates_directory_0700) {
  char nested[400];
  snprintf(nested, sizeof nested, "%s/a/b/c", root_dir);
  mode_t old = umask(0);
  sk_cache_options o = {.dir = nested};
  sk_cache *c = open_cache_opts(&o);
  umask(old);
  struct stat st;
  cr_assert_eq(stat(nested, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0700, "mode %o", st.st_mode & 07777);
  char parent[400];
  snprintf(parent, sizeof parent, "%s/a", root_dir);
  cr_assert_eq(stat(parent, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0700, "created parents are private too");
  char path[512];
  snprintf(path, sizeof path, "%s/data.mdb", nested);
  cr_assert_eq(access(path, F_OK), 0);
  snprintf(path, sizeof path, "%s/lock.mdb", nested);
  cr_assert_eq(access(path, F_OK), 0);
  cr_assert_str_eq(sk_cache_dir(c), nested);
  cr_assert_not(sk_cache_is_readonly(c));
  sk_cache_close(c);
  /* An existing private-enough directory (0755) is accepted as it is. */
  cr_assert_eq(chmod(nested, 0755), 0);
  c = open_cache_opts(&o);
  sk_cache_close(c);
  cr_assert_eq(stat(nested, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0755);
}

Test(cache, put_get_round_trip_and_stat) {
  sk_cache *c = open_cache();
  test_rec recs[20];
  uint64_t bytes = 0;
  for (int i = 0; i < 20; i++) {
    make_rec(&recs[i], 1 + (size_t)(rand() % 20000));
    put_ok(c, &recs[i]);
  }
  for (int i = 0; i < 20; i++) expect_hit(c, &recs[i]);
  uint8_t absent[16];
  random_bytes(absent, 16);
  cr_assert_eq(lookup(c, absent), SK_LOOKUP_MISS);
  verify_counts v = verify_all(c);
  cr_assert_eq(v.good, 20);
  cr_assert_eq(v.bad, 0);
  bytes = v.bytes;
  sk_cache_stat st = stat_of(c);
  cr_assert_eq(st.records, 20);
  cr_assert_eq(st.claims, 0);
  cr_assert_eq(st.data_bytes, bytes, "running total %llu, scan %llu",
               (unsigned long long)st.data_bytes, (unsigned long long)bytes);
  cr_assert_geq(st.map_bytes, 256ull << 20, "default map is 256 MiB");
  cr_assert_gt(st.file_bytes, 0);
  cr_assert_gt(st.page_size, 0);
  /* Replacing a record keeps the total right. */
  test_rec bigger;
  make_rec(&bigger, 30000);
  memcpy(bigger.rec.key, recs[0].rec.key, 16);
  put_ok(c, &bigger);
  expect_hit(c, &bigger);
  st = stat_of(c);
  cr_assert_eq(st.records, 20);
  cr_assert_eq(st.data_bytes, verify_all(c).bytes);
  /* created/last-used default to now */
  sk_lookup res;
  sk_record r;
  void *owned;
  uint64_t t0 = sk_now_unix_ms();
  cr_assert_eq(sk_cache_get(c, bigger.rec.key, &res, &r, &owned), SK_OK);
  cr_assert(r.created_unix_ms <= t0 && r.created_unix_ms + 60000 > t0);
  cr_assert_eq(r.compile_ms, bigger.rec.compile_ms);
  free(owned);
  /* remove */
  cr_assert_eq(sk_cache_remove(c, bigger.rec.key), SK_OK);
  cr_assert_eq(lookup(c, bigger.rec.key), SK_LOOKUP_MISS);
  cr_assert_eq(sk_cache_remove(c, bigger.rec.key), SK_ERR_NOT_FOUND);
  cr_assert(strstr(sk_last_error_message(), "no record"), "%s", sk_last_error_message());
  st = stat_of(c);
  cr_assert_eq(st.records, 19);
  cr_assert_eq(st.data_bytes, verify_all(c).bytes);
  sk_cache_close(c);
  /* Everything is still there after reopening. */
  c = open_cache();
  for (int i = 1; i < 20; i++) expect_hit(c, &recs[i]);
  sk_cache_close(c);
  for (int i = 0; i < 20; i++) free_rec(&recs[i]);
  free_rec(&bigger);
}

static int stop_after_three(void *ud, const uint8_t key[16], const sk_record *rec, size_t size,
                            const char *error) {
  (void)key, (void)rec, (void)size, (void)error;
  return ++*(int *)ud == 3;
}

/* A callback may write (even remove what it is visiting): no transaction is open during it. */
static int remove_visited(void *ud, const uint8_t key[16], const sk_record *rec, size_t size,
                          const char *error) {
  (void)rec, (void)size, (void)error;
  cr_assert_eq(sk_cache_remove(ud, key), SK_OK, "%s", sk_last_error_message());
  return 0;
}

Test(cache, foreach_stops_and_allows_writes) {
  sk_cache *c = open_cache();
  test_rec t;
  for (int i = 0; i < 10; i++) {
    make_rec(&t, 100);
    put_ok(c, &t);
    free_rec(&t);
  }
  int n = 0;
  cr_assert_eq(sk_cache_foreach(c, stop_after_three, &n), SK_OK);
  cr_assert_eq(n, 3);
  cr_assert_eq(sk_cache_foreach(c, remove_visited, c), SK_OK);
  cr_assert_eq(stat_of(c).records, 0);
  cr_assert_eq(stat_of(c).data_bytes, 0);
  sk_cache_close(c);
}

Test(cache, invalid_arguments_do_not_crash) {
  sk_cache *c = NULL;
  cr_assert_eq(sk_cache_open(NULL, &c), SK_ERR_INVALID_ARGUMENT);
  sk_cache_options o = {.dir = ""};
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_INVALID_ARGUMENT);
  o.dir = cache_dir;
  o.claim_timeout_s = -1;
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_INVALID_ARGUMENT);
  c = open_cache();
  sk_lookup res;
  sk_record r;
  void *owned;
  uint8_t key[16] = {0};
  cr_assert_eq(sk_cache_get(c, NULL, &res, &r, &owned), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_cache_put(c, NULL), SK_ERR_INVALID_ARGUMENT);
  sk_record empty;
  memset(&empty, 0, sizeof empty);
  cr_assert_eq(sk_cache_put(c, &empty), SK_ERR_INVALID_ARGUMENT, "no arch, no cubin");
  cr_assert(strstr(sk_last_error_message(), cache_dir), "%s", sk_last_error_message());
  cr_assert_eq(sk_cache_foreach(c, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_cache_export(c, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_cache_import(c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  sk_acquire a;
  cr_assert_eq(sk_cache_acquire(c, key, 1, &a, NULL, &r, &owned), SK_ERR_INVALID_ARGUMENT);
  sk_cache_close(c);
  sk_cache_close(NULL);
}

Test(cache, two_handles_share_one_environment) {
  sk_cache *a = open_cache();
  sk_cache *b = open_cache();
  test_rec t;
  make_rec(&t, 5000);
  put_ok(a, &t);
  expect_hit(b, &t);
  sk_cache_close(a);
  expect_hit(b, &t); /* closing one handle leaves the environment to the other */
  sk_cache_options ro = {.dir = cache_dir, .readonly = 1};
  sk_cache *r = open_cache_opts(&ro);
  expect_hit(r, &t);
  cr_assert_eq(sk_cache_put(r, &t.rec), SK_ERR_CACHE, "the read-only handle refuses writes");
  put_ok(b, &t);
  sk_cache_close(r);
  sk_cache_close(b);
  /* A read-only environment cannot be shared with a writer. */
  r = open_cache_opts(&ro);
  sk_cache_options rw = {.dir = cache_dir};
  sk_cache *w = NULL;
  cr_assert_eq(sk_cache_open(&rw, &w), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), "read-only"), "%s", sk_last_error_message());
  sk_cache_close(r);
  free_rec(&t);
}

Test(cache, default_dir) {
  char buf[512];
  setenv("SPARKINFER_CACHE_DIR", "/x/y", 1);
  cr_assert_eq(sk_cache_default_dir(buf, sizeof buf), SK_OK);
  cr_assert_str_eq(buf, "/x/y");
  unsetenv("SPARKINFER_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  cr_assert_eq(sk_cache_default_dir(buf, sizeof buf), SK_OK);
  cr_assert_str_eq(buf, "/xdg/sparkinfer");
  setenv("XDG_CACHE_HOME", "relative", 1); /* the XDG spec says: ignore */
  setenv("HOME", "/home/u", 1);
  cr_assert_eq(sk_cache_default_dir(buf, sizeof buf), SK_OK);
  cr_assert_str_eq(buf, "/home/u/.cache/sparkinfer");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  sk_status st = sk_cache_default_dir(buf, sizeof buf); /* the passwd entry, if any */
  cr_assert(st == SK_OK || st == SK_ERR_NOT_FOUND);
  if (st == SK_OK) cr_assert(strstr(buf, "/.cache/sparkinfer"), "%s", buf);
  setenv("HOME", "/home/u", 1);
  cr_assert_eq(sk_cache_default_dir(buf, 8), SK_ERR_INVALID_ARGUMENT, "too small a buffer");
  cr_assert_eq(sk_cache_default_dir(NULL, 0), SK_ERR_INVALID_ARGUMENT);
}

/* ---------------------------------------------------------------------------------------- */
/* Corruption                                                                                */

Test(cache, corrupt_record_is_reported_deleted_and_replaced) {
  sk_cache *c = open_cache();
  test_rec t, other;
  make_rec(&t, 3000);
  make_rec(&other, 3000);
  put_ok(c, &t);
  put_ok(c, &other);
  sk_cache_close(c);
  corrupt_stored(cache_dir, t.rec.key, -100); /* inside the cubin */

  /* Read-only: reported, never deleted. */
  sk_cache_options ro = {.dir = cache_dir, .readonly = 1};
  c = open_cache_opts(&ro);
  cr_assert_eq(lookup(c, t.rec.key), SK_LOOKUP_CORRUPT);
  cr_assert(strstr(sk_last_error_message(), "cubin hash mismatch"), "%s", sk_last_error_message());
  cr_assert_eq(lookup(c, t.rec.key), SK_LOOKUP_CORRUPT);
  cr_assert_eq(verify_all(c).bad, 1);
  sk_cache_close(c);

  c = open_cache();
  sk_cache_disable_writes(c); /* frozen: not deleted either */
  cr_assert_eq(lookup(c, t.rec.key), SK_LOOKUP_CORRUPT);
  sk_cache_close(c);

  c = open_cache();
  cr_assert_eq(lookup(c, t.rec.key), SK_LOOKUP_CORRUPT);
  cr_assert(strstr(sk_last_error_message(), cache_dir), "%s", sk_last_error_message());
  cr_assert(strstr(sk_last_error_message(), "(deleted)"), "%s", sk_last_error_message());
  cr_assert_eq(lookup(c, t.rec.key), SK_LOOKUP_MISS, "the corrupt record is gone");
  sk_cache_stat st = stat_of(c);
  cr_assert_eq(st.records, 1);
  cr_assert_eq(st.data_bytes, verify_all(c).bytes);
  put_ok(c, &t);
  expect_hit(c, &t);
  expect_hit(c, &other);
  sk_cache_close(c);

  /* A header corruption, met by acquire: counts as absent, so we get the claim. */
  corrupt_stored(cache_dir, other.rec.key, SK_RECORD_OFF_COMPILE_MS);
  c = open_cache();
  sk_acquire a;
  int waited;
  sk_record r;
  void *owned;
  cr_assert_eq(sk_cache_acquire(c, other.rec.key, 1, &a, &waited, &r, &owned), SK_OK);
  cr_assert_eq(a, SK_ACQUIRE_CLAIMED);
  cr_assert_null(owned);
  put_ok(c, &other);
  expect_hit(c, &other);
  cr_assert_eq(verify_all(c).bad, 0);
  sk_cache_close(c);
  free_rec(&t);
  free_rec(&other);
}

Test(cache, garbage_and_truncated_data_files_are_refused) {
  /* data.mdb full of garbage */
  cr_assert_eq(mkdir(cache_dir, 0700), 0);
  char path[512];
  snprintf(path, sizeof path, "%s/data.mdb", cache_dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 20000; i++) fputc(rand(), f);
  fclose(f);
  sk_cache *c = NULL;
  sk_cache_options o = {.dir = cache_dir};
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), cache_dir), "%s", sk_last_error_message());
  o.readonly = 1;
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  nftw(cache_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);

  /* a truncated copy */
  o.readonly = 0;
  c = open_cache_opts(&o);
  test_rec t;
  for (int i = 0; i < 10; i++) {
    make_rec(&t, 50000);
    put_ok(c, &t);
    free_rec(&t);
  }
  sk_cache_close(c);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(truncate(path, st.st_size / 2), 0);
  o.readonly = 1;
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), "truncated"), "%s", sk_last_error_message());
}

/* ---------------------------------------------------------------------------------------- */
/* Damaged LMDB pages: LMDB does not checksum its pages, so a flipped byte in a B-tree page can
 * give the store a key or value that points past the file. Every single-byte change of a live
 * leaf page must leave the store's callers running: each probe runs in a child, and a child
 * that dies by a signal (or hangs, or trips a sanitizer) fails the test.                     */

/* LMDB's page header (lmdb's mdb.c, stable across 0.9): pgno u64, pad u16, flags u16,
 * lower u16, upper u16, then the node offsets. */
#define LMDB_PAGE_FLAGS 10
#define LMDB_PAGE_LOWER 12
#define LMDB_PAGE_UPPER 14
#define LMDB_PAGE_PTRS 16
#define LMDB_P_LEAF 0x02

static uint16_t le16_at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* The leaf page of the "records" database in a compacted file of one small cache: the leaf
 * whose first node has a 16-byte key (the claims database is empty). Returns its offset. */
static size_t find_records_leaf(const uint8_t *file, size_t size, size_t psize) {
  for (size_t off = 2 * psize; off + psize <= size; off += psize) {
    const uint8_t *pg = file + off;
    const uint16_t flags = le16_at(pg + LMDB_PAGE_FLAGS), lower = le16_at(pg + LMDB_PAGE_LOWER);
    if (!(flags & LMDB_P_LEAF) || (flags & ~0x12u) || lower <= LMDB_PAGE_PTRS) continue;
    const uint16_t node = le16_at(pg + LMDB_PAGE_PTRS);
    if (node + 8u <= psize && le16_at(pg + node + 6) == 16) return off;
  }
  return 0;
}

static uint8_t *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(*size);
  cr_assert_eq(fread(buf, 1, *size, f), *size);
  fclose(f);
  return buf;
}

static void write_all(const char *path, const uint8_t *buf, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, buf, size), (ssize_t)size);
  close(fd);
}

enum { PROBE_OK = 20, PROBE_DETECTED = 21 }; /* any other exit, or a signal, is a failure */

/* 1 unless every key is a hit. */
static int any_key_missing(sk_cache *c, const uint8_t (*keys)[16], int nkeys) {
  int missing = 0;
  for (int i = 0; i < nkeys; i++) {
    sk_lookup res;
    sk_record r;
    void *owned = NULL;
    if (sk_cache_get(c, keys[i], &res, &r, &owned) != SK_OK || res != SK_LOOKUP_HIT) missing = 1;
    free(owned);
  }
  return missing;
}

/* What the runtime and the tools do with a cache: read-only walk and lookups (sk-cache ls /
 * verify), an import of the file as an export, then read-write lookups, a put and a removal.
 * Errors are fine; crashing, hanging or a sanitizer report is not. */
static void damaged_probe(const char *dir, const char *fresh, const uint8_t (*keys)[16], int nkeys) {
  alarm(20);
  int fd = open("/dev/null", O_WRONLY);
  if (fd >= 0) dup2(fd, 2); /* the store's warnings */
  int detected = 0;
  sk_cache *c = NULL;
  sk_cache_options ro = {.dir = dir, .readonly = 1};
  if (sk_cache_open(&ro, &c) != SK_OK) {
    detected = 1;
  } else {
    verify_counts v = {0, 0, 0};
    if (sk_cache_foreach(c, count_visit, &v) != SK_OK || v.bad) detected = 1;
    detected |= any_key_missing(c, keys, nkeys);
    sk_cache_close(c);
  }
  char file[512];
  snprintf(file, sizeof file, "%s/data.mdb", dir);
  sk_cache_options fo = {.dir = fresh};
  if (sk_cache_open(&fo, &c) == SK_OK) {
    sk_cache_import_counts n;
    if (sk_cache_import(c, file, 0, &n) != SK_OK || n.imported != (uint64_t)nkeys) detected = 1;
    sk_cache_close(c);
  }
  sk_cache_options rw = {.dir = dir};
  if (sk_cache_open(&rw, &c) != SK_OK) _exit(PROBE_DETECTED);
  detected |= any_key_missing(c, keys, nkeys);
  test_rec t;
  make_rec(&t, 200);
  if (sk_cache_put(c, &t.rec) != SK_OK) detected = 1;
  if (sk_cache_remove(c, keys[0]) != SK_OK) detected = 1;
  sk_cache_close(c);
  _exit(detected ? PROBE_DETECTED : PROBE_OK);
}

Test(cache, damaged_leaf_page_scan_never_crashes) { /* each probe has its own alarm */
  /* A real cache: records small enough to live in the leaf and large ones on overflow pages. */
  enum { N = 12 };
  test_rec recs[N];
  uint8_t keys[N][16];
  sk_cache *c = open_cache();
  for (int i = 0; i < N; i++) {
    make_rec(&recs[i], i % 2 ? 6000 + (size_t)i * 100 : 40 + (size_t)i * 10);
    memcpy(keys[i], recs[i].rec.key, 16);
    put_ok(c, &recs[i]);
  }
  char pristine_path[400];
  snprintf(pristine_path, sizeof pristine_path, "%s/pristine.mdb", root_dir);
  cr_assert_eq(sk_cache_export(c, pristine_path), SK_OK, "%s", sk_last_error_message()); /* live pages only */
  sk_cache_close(c);
  size_t size;
  uint8_t *pristine = read_all(pristine_path, &size);
  const size_t psize = (size_t)sysconf(_SC_PAGESIZE);
  const size_t leaf = find_records_leaf(pristine, size, psize);
  cr_assert_neq(leaf, 0, "no leaf page of the records database in %s", pristine_path);

  /* The probes commit (fdatasync) several times each: on tmpfs when there is one, so that the
   * scan takes seconds, not minutes. */
  char dir[400], fresh[400], data[480], lock[480];
  snprintf(scan_root, sizeof scan_root, "%s/sk-cache-scan-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  cr_assert_not_null(mkdtemp(scan_root), "mkdtemp: %s", strerror(errno));
  snprintf(dir, sizeof dir, "%s/flip", scan_root);
  snprintf(data, sizeof data, "%s/data.mdb", dir);
  snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
  cr_assert_eq(mkdir(dir, 0700), 0);
  uint8_t *damaged = malloc(size);
  int failures = 0, detected = 0, tried = 0;
  char first_failures[1024] = "";
  for (long off = -1; off < (long)psize; off++) { /* -1: the undamaged file */
    memcpy(damaged, pristine, size);
    if (off >= 0) damaged[leaf + (size_t)off] ^= 0xff;
    write_all(data, damaged, size);
    unlink(lock);
    snprintf(fresh, sizeof fresh, "%s/fresh-%ld", scan_root, off);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) damaged_probe(dir, fresh, (const uint8_t(*)[16])keys, N);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    nftw(fresh, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    tried++;
    const int ok = WIFEXITED(status) && (WEXITSTATUS(status) == PROBE_OK || WEXITSTATUS(status) == PROBE_DETECTED);
    if (off < 0) {
      cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == PROBE_OK, "the undamaged cache failed the probe (status 0x%x)",
                status);
      continue;
    }
    if (!ok) {
      if (failures++ < 8) {
        size_t n = strlen(first_failures);
        snprintf(first_failures + n, sizeof first_failures - n, " byte %ld: %s %d;", off,
                 WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      }
    } else if (WEXITSTATUS(status) == PROBE_DETECTED) {
      detected++;
    }
  }
  fprintf(stderr, "damaged leaf scan: %d flips, %d detected as damage, %d failed\n", tried - 1, detected, failures);
  cr_assert_eq(failures, 0, "%d of %d single-byte flips of the records leaf page (file offset %zu) took the probe "
               "down:%s", failures, tried - 1, leaf, first_failures);
  cr_assert_gt(detected, 0, "no flip was noticed: the scan did not hit the live page");
  free(damaged);
  free(pristine);
  for (int i = 0; i < N; i++) free_rec(&recs[i]);
}

/* A compacted copy of the cache at cache_dir (live pages only, so the records database is one
 * leaf whose place is known) installed as `dir`/data.mdb. Returns the leaf's file offset. */
static size_t install_compact_copy(const char *dir) {
  sk_cache *c = open_cache();
  char copy[400];
  snprintf(copy, sizeof copy, "%s/compact.mdb", root_dir);
  cr_assert_eq(sk_cache_export(c, copy), SK_OK, "%s", sk_last_error_message());
  sk_cache_close(c);
  size_t size;
  uint8_t *file = read_all(copy, &size);
  const size_t leaf = find_records_leaf(file, size, (size_t)sysconf(_SC_PAGESIZE));
  cr_assert_neq(leaf, 0);
  char data[480];
  cr_assert(mkdir(dir, 0700) == 0 || errno == EEXIST);
  snprintf(data, sizeof data, "%s/data.mdb", dir);
  write_all(data, file, size);
  free(file);
  return leaf;
}

/* Flip the high half of the data size of the leaf node holding `key` (what the tester
 * did): the value then seems to run megabytes past the end of the file. */
static void damage_value_size(const char *dir, size_t leaf, const uint8_t key[16]) {
  char data[480];
  snprintf(data, sizeof data, "%s/data.mdb", dir);
  const size_t psize = (size_t)sysconf(_SC_PAGESIZE);
  int fd = open(data, O_RDWR | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  uint8_t *page = malloc(psize);
  cr_assert_eq(pread(fd, page, psize, (off_t)leaf), (ssize_t)psize);
  const unsigned nkeys = (le16_at(page + LMDB_PAGE_LOWER) - LMDB_PAGE_PTRS) / 2;
  size_t node = 0;
  for (unsigned i = 0; i < nkeys && !node; i++) {
    const uint16_t off = le16_at(page + LMDB_PAGE_PTRS + 2 * i);
    if (le16_at(page + off + 6) == 16 && !memcmp(page + off + 8, key, 16)) node = off;
  }
  cr_assert_neq(node, 0, "the key is not in the leaf");
  uint8_t hi = page[node + 3] ^ 0x7f; /* mn_hi's high byte: + ~2 GiB */
  cr_assert_eq(pwrite(fd, &hi, 1, (off_t)(leaf + node + 3)), 1);
  close(fd);
  free(page);
}

Test(cache, empty_data_file_is_named_by_readers_and_initialised_by_writers) {
  /* A writer that created data.mdb and was killed before LMDB wrote its first pages. */
  cr_assert_eq(mkdir(cache_dir, 0700), 0);
  char path[512];
  snprintf(path, sizeof path, "%s/data.mdb", cache_dir);
  write_all(path, (const uint8_t *)"", 0);
  sk_cache *c = NULL;
  sk_cache_options ro = {.dir = cache_dir, .readonly = 1};
  cr_assert_eq(sk_cache_open(&ro, &c), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), "data.mdb is empty (0 bytes"), "%s", sk_last_error_message());
  c = open_cache(); /* a writer starts a new cache in it */
  test_rec t;
  make_rec(&t, 500);
  put_ok(c, &t);
  sk_cache_close(c);
  c = open_cache_opts(&ro);
  expect_hit(c, &t);
  sk_cache_close(c);
  free_rec(&t);
}

Test(cache, damage_found_in_use_stops_the_cache) {
  /* The file passes the check at open and is damaged afterwards (another process, the disk):
   * the lookup that meets the damaged node fails cleanly, and so does everything after it. */
  test_rec small, big;
  make_rec(&small, 100); /* inline in the leaf */
  make_rec(&big, 20000); /* on overflow pages */
  sk_cache *c = open_cache();
  put_ok(c, &small);
  put_ok(c, &big);
  sk_cache_close(c);
  char dir[400];
  snprintf(dir, sizeof dir, "%s/compact", root_dir);
  const size_t leaf = install_compact_copy(dir);
  for (int which = 0; which < 2; which++) {
    const test_rec *t = which ? &big : &small;
    sk_cache_options o = {.dir = dir};
    if (which) { /* a fresh copy for the second round */
      nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
      install_compact_copy(dir);
    }
    c = open_cache_opts(&o);
    expect_hit(c, t);
    damage_value_size(dir, leaf, t->rec.key);
    sk_lookup res;
    sk_record r;
    void *owned = NULL;
    cr_assert_eq(sk_cache_get(c, t->rec.key, &res, &r, &owned), SK_ERR_CACHE);
    cr_assert(strstr(sk_last_error_message(), "data.mdb is damaged") && strstr(sk_last_error_message(), dir),
              "%s", sk_last_error_message());
    cr_assert_null(owned);
    cr_assert(sk_cache_is_damaged(c));
    cr_assert_eq(sk_cache_foreach(c, count_visit, &(verify_counts){0, 0, 0}), SK_ERR_CACHE);
    cr_assert_eq(sk_cache_put(c, &small.rec), SK_ERR_CACHE, "no writes to a damaged file");
    cr_assert(strstr(sk_last_error_message(), "damaged"), "%s", sk_last_error_message());
    sk_cache_close(c);
    /* The next open finds it in the structure check. */
    sk_cache *again = NULL;
    cr_assert_eq(sk_cache_open(&o, &again), SK_ERR_CACHE);
    cr_assert(strstr(sk_last_error_message(), "is damaged"), "%s", sk_last_error_message());
  }
  free_rec(&small);
  free_rec(&big);
}

/* A cache of one small record, compacted into root_dir/compact (dir): returns the leaf offset. */
static size_t compact_cache_of_one(test_rec *t, char *dir, size_t dir_size) {
  make_rec(t, 100);
  sk_cache *c = open_cache();
  put_ok(c, t);
  sk_cache_close(c);
  snprintf(dir, dir_size, "%s/compact", root_dir);
  return install_compact_copy(dir);
}

Test(cache, damaged_meta_page_is_refused) {
  /* LMDB takes the page size, flags and roots of its meta pages on trust: a wrong page size made
   * it read its second meta page, and every page after, at the wrong place (SIGBUS). */
  test_rec t;
  char dir[400], data[480];
  compact_cache_of_one(&t, dir, sizeof dir);
  snprintf(data, sizeof data, "%s/data.mdb", dir);
  sk_cache *c = NULL;
  size_t size;
  uint8_t *pristine = read_all(data, &size);
  const size_t psize = (size_t)sysconf(_SC_PAGESIZE);
  /* in each meta page: the page size's high bytes, the free list's flags, the main root */
  const size_t fields[] = {16 + 24 + 2, 16 + 24 + 3, 16 + 24 + 4, 16 + 72 + 40 + 3};
  for (size_t m = 0; m < 2; m++)
    for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
      uint8_t *bad = malloc(size);
      memcpy(bad, pristine, size);
      bad[m * psize + fields[f]] ^= 0x40;
      write_all(data, bad, size);
      free(bad);
      for (int ro = 0; ro <= 1; ro++) {
        sk_cache_options o = {.dir = dir, .readonly = ro};
        cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE, "meta %zu byte %zu", m, fields[f]);
        cr_assert(strstr(sk_last_error_message(), "is damaged (meta page"), "%s", sk_last_error_message());
      }
    }
  free(pristine);
  free_rec(&t);
}

static int run_tool(char *out, size_t size, const char *fmt, ...) SK_PRINTF(3, 4);
static const char *tool_path(void);

Test(cache, damaged_file_is_refused_by_the_runtime_and_the_tools) {
  test_rec t;
  char dir[400];
  const size_t leaf = compact_cache_of_one(&t, dir, sizeof dir);
  damage_value_size(dir, leaf, t.rec.key);

  /* The runtime: memory-only, with the reason, and it still compiles. */
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
  sk_cache_info ci;
  cr_assert_eq(sk_get_cache_info(&ci), SK_OK);
  cr_assert_eq(ci.mode, SK_CACHE_MODE_MEMORY_ONLY);
  cr_assert(strstr(ci.reason, "data.mdb is damaged"), "%s", ci.reason);
  if (tool_path()) {
    static char out[1 << 14];
    const char *cmds[] = {"verify", "ls", "stat", "export x.mdb", "prune --max-bytes 1"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
      cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' %s", dir, cmds[i]), 1, "%s: %s", cmds[i], out);
      cr_assert(strstr(out, "is damaged"), "%s: %s", cmds[i], out);
    }
    /* sk-cache import of a damaged export refuses it whole. */
    char file[480];
    snprintf(file, sizeof file, "%s/data.mdb", dir);
    cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s/other' import '%s'", root_dir, file), 1, "%s", out);
    cr_assert(strstr(out, "the file is damaged") && strstr(out, "nothing was imported"), "%s", out);
  }
  free_rec(&t);
}

Test(cache, runtime_goes_memory_only_when_damage_appears_in_use) {
  /* A kernel the runtime stored, found damaged after the runtime opened the cache: the lookup
   * fails cleanly, the kernel is compiled instead, the cache is dropped (memory-only) once. */
  const char *opts[] = {"-DSK_TEST_SALT=damage"};
  sk_kernel_request a = {"test.scale", "test/scale.cuh", "sk_test::scale<float, 32>", "", "sm_120a", opts, 1, 0};
  sk_key ka;
  cr_assert_eq(sk_kernel_key(&a, &ka), SK_OK);
  pid_t pid = fork();
  if (pid == 0) { /* store kernel a with the runtime of another process */
    setenv("SPARKINFER_CACHE_DIR", cache_dir, 1);
    _exit(sk_kernel_prepare(&a, NULL) == SK_OK ? 0 : 1);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char dir[400];
  snprintf(dir, sizeof dir, "%s/compact", root_dir);
  const size_t leaf = install_compact_copy(dir);
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
  sk_cache_info ci;
  cr_assert_eq(sk_get_cache_info(&ci), SK_OK); /* opens it (and writes nothing: the leaf stays put) */
  cr_assert_eq(ci.mode, SK_CACHE_MODE_READWRITE, "%s", ci.reason);
  damage_value_size(dir, leaf, ka.bytes);
  sk_prepare_info info;
  cr_assert_eq(sk_kernel_prepare(&a, &info), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(info.source, SK_RESOLVED_COMPILED);
  cr_assert_eq(sk_get_cache_info(&ci), SK_OK);
  cr_assert_eq(ci.mode, SK_CACHE_MODE_MEMORY_ONLY);
  cr_assert(strstr(ci.reason, "data.mdb is damaged"), "%s", ci.reason);
}

/* ---------------------------------------------------------------------------------------- */
/* Map growth                                                                                */

Test(cache, tiny_map_grows_on_map_full) {
  sk_cache_options o = {.dir = cache_dir, .initial_map_bytes = 64 << 10};
  sk_cache *c = open_cache_opts(&o);
  enum { N = 40 };
  test_rec recs[N];
  for (int i = 0; i < N; i++) {
    make_rec(&recs[i], 90000 + (size_t)(rand() % 20000));
    put_ok(c, &recs[i]);
  }
  for (int i = 0; i < N; i++) expect_hit(c, &recs[i]);
  sk_cache_stat st = stat_of(c);
  cr_assert_eq(st.records, N);
  cr_assert_gt(st.map_bytes, st.data_bytes);
  cr_assert_gt(st.data_bytes, 3u << 20);
  sk_cache_close(c);
  /* Reopening with a tiny map adopts the grown size recorded in the file. */
  c = open_cache_opts(&o);
  for (int i = 0; i < N; i++) expect_hit(c, &recs[i]);
  cr_assert_eq(verify_all(c).bad, 0);
  sk_cache_close(c);
  for (int i = 0; i < N; i++) free_rec(&recs[i]);
}

/* Another process grows the map past ours: our next transaction sees MDB_MAP_RESIZED. */
Test(cache, map_grown_by_another_process) {
  sk_cache_options o = {.dir = cache_dir, .initial_map_bytes = 64 << 10};
  sk_cache *c = open_cache_opts(&o);
  test_rec first;
  make_rec(&first, 1000);
  put_ok(c, &first);
  enum { N = 30 };
  test_rec recs[N];
  for (int i = 0; i < N; i++) make_rec(&recs[i], 100000);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    sk_cache *cc = NULL;
    if (sk_cache_open(&o, &cc) != SK_OK) _exit(10);
    for (int i = 0; i < N; i++)
      if (sk_cache_put(cc, &recs[i].rec) != SK_OK) _exit(11);
    sk_cache_close(cc);
    _exit(0);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  for (int i = 0; i < N; i++) expect_hit(c, &recs[i]);
  expect_hit(c, &first);
  test_rec more;
  make_rec(&more, 200000);
  put_ok(c, &more);
  expect_hit(c, &more);
  sk_cache_close(c);
  for (int i = 0; i < N; i++) free_rec(&recs[i]);
  free_rec(&first);
  free_rec(&more);
}

typedef struct thread_arg {
  sk_cache *c;
  unsigned seed;
  int failures;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  for (int i = 0; i < 25; i++) {
    size_t size = 10000 + rand_r(&a->seed) % 50000;
    uint8_t *cubin = malloc(size);
    for (size_t j = 0; j < size; j++) cubin[j] = (uint8_t)rand_r(&a->seed);
    sk_record r;
    memset(&r, 0, sizeof r);
    for (int j = 0; j < 16; j++) r.key[j] = (uint8_t)rand_r(&a->seed);
    strcpy(r.arch, "sm_120a");
    r.cubin = cubin;
    r.cubin_size = size;
    r.metadata_json = "{}";
    if (sk_cache_put(a->c, &r) != SK_OK) a->failures++;
    sk_lookup res;
    sk_record got;
    void *owned = NULL;
    if (sk_cache_get(a->c, r.key, &res, &got, &owned) != SK_OK || res != SK_LOOKUP_HIT ||
        got.cubin_size != size || memcmp(got.cubin, cubin, size) != 0)
      a->failures++;
    free(owned);
    free(cubin);
  }
  return NULL;
}

/* Threads share the handle while the map keeps growing under them. */
Test(cache, threads_share_a_growing_map) {
  sk_cache_options o = {.dir = cache_dir, .initial_map_bytes = 64 << 10};
  sk_cache *c = open_cache_opts(&o);
  enum { T = 4 };
  pthread_t th[T];
  thread_arg args[T];
  for (int i = 0; i < T; i++) {
    args[i] = (thread_arg){c, (unsigned)rand(), 0};
    cr_assert_eq(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
  }
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < T; i++) cr_assert_eq(args[i].failures, 0, "thread %d failed", i);
  sk_cache_stat st = stat_of(c);
  cr_assert_eq(st.records, T * 25);
  verify_counts v = verify_all(c);
  cr_assert_eq(v.good, T * 25);
  cr_assert_eq(st.data_bytes, v.bytes);
  sk_cache_close(c);
}

/* ---------------------------------------------------------------------------------------- */
/* LRU, size cap, pruning                                                                    */

Test(cache, coarse_lru_touch) {
  sk_cache *c = open_cache();
  uint64_t now = sk_now_unix_ms();
  test_rec old, recent;
  make_rec(&old, 500);
  make_rec(&recent, 500);
  old.rec.created_unix_ms = old.rec.last_used_unix_ms = now - 2 * 3600 * 1000;
  recent.rec.created_unix_ms = recent.rec.last_used_unix_ms = now - 10 * 60 * 1000;
  put_ok(c, &old);
  put_ok(c, &recent);
  sk_lookup res;
  sk_record r;
  void *owned;
  cr_assert_eq(sk_cache_get(c, old.rec.key, &res, &r, &owned), SK_OK);
  cr_assert_geq(r.last_used_unix_ms, now, "an hour-old last-used is refreshed");
  free(owned);
  cr_assert_eq(sk_cache_get(c, old.rec.key, &res, &r, &owned), SK_OK);
  cr_assert_geq(r.last_used_unix_ms, now, "and stored");
  cr_assert_eq(r.created_unix_ms, old.rec.created_unix_ms);
  free(owned);
  cr_assert_eq(sk_cache_get(c, recent.rec.key, &res, &r, &owned), SK_OK);
  cr_assert_eq(r.last_used_unix_ms, recent.rec.last_used_unix_ms, "10 minutes: left alone");
  free(owned);
  cr_assert_eq(verify_all(c).bad, 0);
  sk_cache_close(c);
  free_rec(&old);
  free_rec(&recent);
}

Test(cache, max_bytes_prunes_least_recently_used) {
  const uint64_t max = 1 << 20;
  sk_cache_options o = {.dir = cache_dir, .max_bytes = max};
  sk_cache *c = open_cache_opts(&o);
  enum { N = 30 };
  test_rec recs[N];
  uint64_t base = sk_now_unix_ms() - 20 * 60 * 1000; /* recent: no LRU touch on get */
  for (int i = 0; i < N; i++) {
    make_rec(&recs[i], 100000);
    recs[i].rec.created_unix_ms = recs[i].rec.last_used_unix_ms = base + (uint64_t)i * 1000;
    put_ok(c, &recs[i]);
    cr_assert_leq(stat_of(c).data_bytes, max, "over the cap after put %d", i);
  }
  int first_present = -1, present = 0;
  for (int i = 0; i < N; i++) {
    sk_lookup res = lookup(c, recs[i].rec.key);
    if (res == SK_LOOKUP_HIT) {
      if (first_present < 0) first_present = i;
      present++;
    } else {
      cr_assert_lt(first_present, 0, "record %d is gone but an older one (%d) stayed", i,
                   first_present);
    }
  }
  cr_assert_eq(first_present + present, N, "the newest records are kept");
  cr_assert_geq(present, 5);
  cr_assert_lt(present, N);
  expect_hit(c, &recs[N - 1]);
  sk_cache_stat st = stat_of(c);
  cr_assert_eq(st.data_bytes, verify_all(c).bytes);

  /* A record bigger than the cap is still kept right after its put. */
  test_rec huge;
  make_rec(&huge, 2 * max);
  put_ok(c, &huge);
  expect_hit(c, &huge);
  sk_cache_close(c);
  for (int i = 0; i < N; i++) free_rec(&recs[i]);
  free_rec(&huge);
}

Test(cache, explicit_prune_by_age_and_size) {
  sk_cache *c = open_cache();
  uint64_t now = sk_now_unix_ms(), day = 86400000ull;
  test_rec recs[10];
  for (int i = 0; i < 10; i++) {
    make_rec(&recs[i], 10000);
    recs[i].rec.created_unix_ms = recs[i].rec.last_used_unix_ms = now - (uint64_t)(10 - i) * day;
    put_ok(c, &recs[i]);
  }
  uint64_t removed = 99;
  /* last used 10..1 days ago: older than 5.5 days removes 5 */
  cr_assert_eq(sk_cache_prune(c, 0, now - 5 * day - day / 2, &removed), SK_OK);
  cr_assert_eq(removed, 5);
  for (int i = 0; i < 5; i++) cr_assert_eq(lookup(c, recs[i].rec.key), SK_LOOKUP_MISS);
  size_t one = (size_t)verify_all(c).bytes / 5;
  /* metadata lengths differ by a few bytes: leave less slack than one record */
  cr_assert_eq(sk_cache_prune(c, 2 * one + one / 2, 0, &removed), SK_OK);
  cr_assert_eq(removed, 3);
  cr_assert_eq(lookup(c, recs[7].rec.key), SK_LOOKUP_MISS);
  expect_hit(c, &recs[8]);
  expect_hit(c, &recs[9]);
  cr_assert_eq(sk_cache_prune(c, 0, 0, &removed), SK_OK);
  cr_assert_eq(removed, 0);
  sk_cache_stat st = stat_of(c);
  cr_assert_eq(st.records, 2);
  cr_assert_eq(st.data_bytes, verify_all(c).bytes);
  sk_cache_close(c);
  for (int i = 0; i < 10; i++) free_rec(&recs[i]);
}

/* ---------------------------------------------------------------------------------------- */
/* Read-only, disabled writes                                                                */

Test(cache, readonly_refuses_writes) {
  sk_cache_options ro = {.dir = cache_dir, .readonly = 1};
  sk_cache *c = NULL;
  cr_assert_eq(sk_cache_open(&ro, &c), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), "no cache at"), "%s", sk_last_error_message());
  cr_assert_neq(access(cache_dir, F_OK), 0, "read-only open creates nothing");

  c = open_cache();
  test_rec t, u;
  make_rec(&t, 4000);
  make_rec(&u, 4000);
  t.rec.last_used_unix_ms = t.rec.created_unix_ms = sk_now_unix_ms() - 5 * 3600 * 1000;
  put_ok(c, &t);
  sk_cache_close(c);
  char export_path[512];
  snprintf(export_path, sizeof export_path, "%s/export.mdb", root_dir);

  c = open_cache_opts(&ro);
  cr_assert(sk_cache_is_readonly(c));
  expect_hit(c, &t);
  sk_lookup res;
  sk_record r;
  void *owned;
  cr_assert_eq(sk_cache_get(c, t.rec.key, &res, &r, &owned), SK_OK);
  cr_assert_eq(r.last_used_unix_ms, t.rec.last_used_unix_ms, "no LRU write when read-only");
  free(owned);
  cr_assert_eq(sk_cache_put(c, &u.rec), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), "read-only"), "%s", sk_last_error_message());
  cr_assert(strstr(sk_last_error_message(), cache_dir), "%s", sk_last_error_message());
  cr_assert_eq(sk_cache_remove(c, t.rec.key), SK_ERR_CACHE);
  uint64_t n;
  cr_assert_eq(sk_cache_prune(c, 1, 0, &n), SK_ERR_CACHE);
  cr_assert_eq(sk_cache_export(c, export_path), SK_OK, "export only reads");
  cr_assert_eq(sk_cache_import(c, export_path, 1, NULL), SK_ERR_CACHE);
  cr_assert_eq(sk_cache_release(c, t.rec.key), SK_OK);
  sk_acquire a;
  int waited;
  cr_assert_eq(sk_cache_acquire(c, t.rec.key, 1, &a, &waited, &r, &owned), SK_OK);
  cr_assert_eq(a, SK_ACQUIRE_HIT);
  free(owned);
  cr_assert_eq(sk_cache_acquire(c, u.rec.key, 1, &a, &waited, &r, &owned), SK_OK);
  cr_assert_eq(a, SK_ACQUIRE_UNCLAIMED);
  cr_assert_eq(waited, 0);
  sk_cache_stat st = stat_of(c);
  cr_assert_eq(st.records, 1);
  cr_assert_eq(st.claims, 0);
  sk_cache_close(c);
  free_rec(&t);
  free_rec(&u);
}

/* A shipped cache whose lock file cannot be written (read-only filesystem): read without locks. */
Test(cache, readonly_without_a_writable_lock_file) {
  sk_cache *c = open_cache();
  test_rec t;
  make_rec(&t, 3000);
  put_ok(c, &t);
  sk_cache_close(c);
  snprintf(immutable_path, sizeof immutable_path, "%s/lock.mdb", cache_dir);
  if (set_immutable(immutable_path, 1) != 0) {
    immutable_path[0] = '\0';
    teardown(); /* a skipped test does not run .fini */
    cr_skip_test("cannot make lock.mdb immutable here: %s", strerror(errno));
  }
  sk_cache_options ro = {.dir = cache_dir, .readonly = 1};
  c = open_cache_opts(&ro);
  cr_assert(sk_cache_is_readonly(c));
  expect_hit(c, &t);
  cr_assert_eq(verify_all(c).good, 1);
  cr_assert_eq(sk_cache_put(c, &t.rec), SK_ERR_CACHE);
  sk_cache_close(c);
  sk_cache_options rw = {.dir = cache_dir};
  cr_assert_eq(sk_cache_open(&rw, &c), SK_ERR_CACHE, "a writer needs the lock file");
  cr_assert(strstr(sk_last_error_message(), cache_dir), "%s", sk_last_error_message());
  set_immutable(immutable_path, 0);
  free_rec(&t);
}

Test(cache, readonly_open_of_an_empty_environment) {
  sk_cache *c = open_cache(); /* creates the databases */
  sk_cache_close(c);
  sk_cache_options ro = {.dir = cache_dir, .readonly = 1};
  c = open_cache_opts(&ro);
  uint8_t key[16] = {1};
  cr_assert_eq(lookup(c, key), SK_LOOKUP_MISS);
  cr_assert_eq(verify_all(c).good, 0);
  cr_assert_eq(stat_of(c).records, 0);
  sk_cache_close(c);
}

Test(cache, disable_writes) {
  sk_cache *c = open_cache();
  test_rec t, u;
  make_rec(&t, 1000);
  make_rec(&u, 1000);
  t.rec.last_used_unix_ms = t.rec.created_unix_ms = sk_now_unix_ms() - 5 * 3600 * 1000;
  put_ok(c, &t);
  sk_cache_disable_writes(c);
  cr_assert_eq(sk_cache_put(c, &u.rec), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), "disabled"), "%s", sk_last_error_message());
  sk_lookup res;
  sk_record r;
  void *owned;
  cr_assert_eq(sk_cache_get(c, t.rec.key, &res, &r, &owned), SK_OK);
  cr_assert_eq(res, SK_LOOKUP_HIT);
  free(owned);
  cr_assert_eq(sk_cache_get(c, t.rec.key, &res, &r, &owned), SK_OK);
  cr_assert_eq(r.last_used_unix_ms, t.rec.last_used_unix_ms, "no LRU write after the freeze");
  free(owned);
  sk_acquire a;
  int waited;
  cr_assert_eq(sk_cache_acquire(c, u.rec.key, 1, &a, &waited, &r, &owned), SK_OK);
  cr_assert_eq(a, SK_ACQUIRE_UNCLAIMED);
  cr_assert_eq(stat_of(c).claims, 0);
  uint64_t n;
  cr_assert_eq(sk_cache_prune(c, 1, 0, &n), SK_ERR_CACHE);
  cr_assert_eq(sk_cache_remove(c, t.rec.key), SK_ERR_CACHE);
  sk_cache_close(c);
  free_rec(&t);
  free_rec(&u);
}

/* ---------------------------------------------------------------------------------------- */
/* Directory policy                                                                          */

Test(cache, refuses_foreign_owned_directory) {
  cr_assert_eq(mkdir(cache_dir, 0700), 0);
  const char *dir = cache_dir;
  unsigned foreign = 65534;
  if (geteuid() == 0) {
    cr_assert_eq(chown(cache_dir, 65534, 65534), 0, "%s", strerror(errno));
  } else {
    dir = "/"; /* owned by root, not by us */
    foreign = 0;
  }
  sk_cache *c = NULL;
  sk_cache_options o = {.dir = dir};
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  cr_assert_null(c);
  char expect[64];
  snprintf(expect, sizeof expect, "owned by uid %u", foreign);
  cr_assert(strstr(sk_last_error_message(), expect), "%s", sk_last_error_message());
  cr_assert(strstr(sk_last_error_message(), dir), "%s", sk_last_error_message());
  if (foreign != 0) {
    o.readonly = 1;
    cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE, "read-only too (not root-owned)");
    char path[512];
    snprintf(path, sizeof path, "%s/data.mdb", cache_dir);
    cr_assert_neq(access(path, F_OK), 0, "nothing created in a refused directory");
  }
}

Test(cache, refuses_group_or_other_writable_directory) {
  cr_assert_eq(mkdir(cache_dir, 0700), 0);
  const struct {
    mode_t mode;
    const char *who;
  } cases[] = {{0770, "group"}, {0720, "group"}, {0707, "others"}, {0777, "others"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_assert_eq(chmod(cache_dir, cases[i].mode), 0);
    sk_cache *c = NULL;
    sk_cache_options o = {.dir = cache_dir};
    cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE, "mode %o accepted", cases[i].mode);
    char expect[64];
    snprintf(expect, sizeof expect, "writable by %s", cases[i].who);
    cr_assert(strstr(sk_last_error_message(), expect), "%s", sk_last_error_message());
    cr_assert(strstr(sk_last_error_message(), cache_dir), "%s", sk_last_error_message());
    o.readonly = 1;
    cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  }
  cr_assert_eq(chmod(cache_dir, 0750), 0);
  sk_cache *c = open_cache();
  sk_cache_close(c);
}

Test(cache, refuses_uncreatable_paths) {
  char file[400], under[480];
  snprintf(file, sizeof file, "%s/regular-file", root_dir);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  snprintf(under, sizeof under, "%s/sub/cache", file);
  sk_cache *c = NULL;
  sk_cache_options o = {.dir = under};
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), under), "%s", sk_last_error_message());
  cr_assert(strstr(sk_last_error_message(), strerror(ENOTDIR)), "%s", sk_last_error_message());
  o.readonly = 1;
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  /* the path itself a regular file */
  o.dir = file;
  o.readonly = 0;
  cr_assert_eq(sk_cache_open(&o, &c), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), file), "%s", sk_last_error_message());
  cr_assert_null(c);
}

Test(cache, network_filesystems_are_recognised) {
  cr_assert_str_eq(sk_cache_network_fs_name(0x6969), "NFS");
  cr_assert_str_eq(sk_cache_network_fs_name(0xFF534D42), "CIFS");
  cr_assert_str_eq(sk_cache_network_fs_name(0xFE534D42), "SMB2");
  cr_assert_str_eq(sk_cache_network_fs_name(0x517B), "SMB");
  cr_assert_str_eq(sk_cache_network_fs_name(0x00C36400), "CephFS");
  cr_assert_str_eq(sk_cache_network_fs_name(0x01021997), "9P");
  cr_assert_str_eq(sk_cache_network_fs_name(0x0BD00BD0), "Lustre");
  cr_assert_null(sk_cache_network_fs_name(0xEF53), "ext4 is local");
  cr_assert_null(sk_cache_network_fs_name(0x9123683E), "btrfs is local");
  cr_assert_null(sk_cache_network_fs_name(0x01021994), "tmpfs is local");
  cr_assert_null(sk_cache_network_fs_name(0x58465342), "xfs is local");
}

/* ---------------------------------------------------------------------------------------- */
/* Claims                                                                                    */

Test(cache, claim_put_release_basics) {
  sk_cache *c = open_cache();
  test_rec t;
  make_rec(&t, 2000);
  sk_acquire a;
  int waited = 7;
  sk_record r;
  void *owned = (void *)1;
  cr_assert_eq(sk_cache_acquire(c, t.rec.key, 5, &a, &waited, &r, &owned), SK_OK,
               "%s", sk_last_error_message());
  cr_assert_eq(a, SK_ACQUIRE_CLAIMED);
  cr_assert_eq(waited, 0);
  cr_assert_null(owned);
  cr_assert_eq(stat_of(c).claims, 1);
  put_ok(c, &t);
  cr_assert_eq(stat_of(c).claims, 0, "the put fulfils the claim");
  cr_assert_eq(sk_cache_acquire(c, t.rec.key, 5, &a, &waited, &r, &owned), SK_OK);
  cr_assert_eq(a, SK_ACQUIRE_HIT);
  cr_assert_eq(r.cubin_size, t.rec.cubin_size);
  cr_assert_arr_eq(r.cubin, t.cubin, t.rec.cubin_size);
  free(owned);
  test_rec u;
  make_rec(&u, 100);
  cr_assert_eq(sk_cache_acquire(c, u.rec.key, 5, &a, &waited, &r, &owned), SK_OK);
  cr_assert_eq(a, SK_ACQUIRE_CLAIMED);
  cr_assert_eq(sk_cache_release(c, u.rec.key), SK_OK);
  cr_assert_eq(stat_of(c).claims, 0);
  cr_assert_eq(sk_cache_release(c, u.rec.key), SK_OK, "releasing nothing is fine");
  /* A claim of our own process is live: a second acquire waits, then takes over at max_wait. */
  cr_assert_eq(sk_cache_acquire(c, u.rec.key, 5, &a, &waited, &r, &owned), SK_OK);
  double t0 = now_s();
  cr_assert_eq(sk_cache_acquire(c, u.rec.key, 0.2, &a, &waited, &r, &owned), SK_OK);
  cr_assert_eq(a, SK_ACQUIRE_CLAIMED);
  cr_assert_eq(waited, 1);
  cr_assert_geq(now_s() - t0, 0.19);
  sk_cache_close(c);
  free_rec(&t);
  free_rec(&u);
}

/* Child side of the claim tests: claim key, tell the parent, then obey one command byte:
 * 'p' put the record, 'r' release (a claim we may no longer own), 's' sleep until killed. */
static void claiming_child(const test_rec *t, int to_parent, int from_parent, double timeout_s) {
  sk_cache *c = NULL;
  sk_cache_options o = {.dir = cache_dir, .claim_timeout_s = timeout_s};
  if (sk_cache_open(&o, &c) != SK_OK) _exit(20);
  sk_acquire a;
  int waited;
  sk_record r;
  void *owned;
  if (sk_cache_acquire(c, t->rec.key, 5, &a, &waited, &r, &owned) != SK_OK) _exit(21);
  if (a != SK_ACQUIRE_CLAIMED) _exit(22);
  if (write(to_parent, "c", 1) != 1) _exit(23);
  char cmd;
  if (read(from_parent, &cmd, 1) != 1) _exit(24);
  if (cmd == 'p' && sk_cache_put(c, &t->rec) != SK_OK) _exit(25);
  if (cmd == 'r' && sk_cache_release(c, t->rec.key) != SK_OK) _exit(26);
  if (cmd == 's') for (;;) pause();
  if (write(to_parent, "d", 1) != 1) _exit(27);
  sk_cache_close(c);
  _exit(0);
}

typedef struct child {
  pid_t pid;
  int to_child, from_child;
} child;

static child start_claiming_child(const test_rec *t, double timeout_s) {
  int up[2], down[2];
  cr_assert_eq(pipe(up), 0);
  cr_assert_eq(pipe(down), 0);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    claiming_child(t, up[1], down[0], timeout_s);
  }
  close(up[1]);
  close(down[0]);
  char ack;
  cr_assert_eq(read(up[0], &ack, 1), 1, "the child did not claim");
  cr_assert_eq(ack, 'c');
  return (child){pid, down[1], up[0]};
}

static void finish_child(child *ch) {
  int status;
  cr_assert_eq(waitpid(ch->pid, &status, 0), ch->pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
  close(ch->to_child);
  close(ch->from_child);
}

/* Tell the child to put after a delay, from a thread, while this thread waits in acquire. */
typedef struct delayed_cmd {
  int fd;
  char cmd;
  double delay_s;
} delayed_cmd;

static void *send_later(void *p) {
  delayed_cmd *d = p;
  struct timespec ts = {0, (long)(d->delay_s * 1e9)};
  nanosleep(&ts, NULL);
  if (write(d->fd, &d->cmd, 1) != 1) abort();
  return NULL;
}

Test(cache, acquire_waits_for_a_live_peer_then_hits) {
  test_rec t;
  make_rec(&t, 30000);
  sk_cache *c = open_cache();
  child ch = start_claiming_child(&t, 0);
  cr_assert_eq(stat_of(c).claims, 1);
  pthread_t th;
  delayed_cmd d = {ch.to_child, 'p', 0.3};
  cr_assert_eq(pthread_create(&th, NULL, send_later, &d), 0);
  sk_acquire a;
  int waited = 0;
  sk_record r;
  void *owned = NULL;
  double t0 = now_s();
  cr_assert_eq(sk_cache_acquire(c, t.rec.key, 20, &a, &waited, &r, &owned), SK_OK,
               "%s", sk_last_error_message());
  double elapsed = now_s() - t0;
  pthread_join(th, NULL);
  cr_assert_eq(a, SK_ACQUIRE_HIT, "outcome %d", a);
  cr_assert_eq(waited, 1);
  cr_assert_geq(elapsed, 0.25, "returned after %.3f s, before the peer's put", elapsed);
  cr_assert_lt(elapsed, 5.0);
  cr_assert_eq(r.cubin_size, t.rec.cubin_size);
  cr_assert_arr_eq(r.cubin, t.cubin, t.rec.cubin_size);
  free(owned);
  char done;
  cr_assert_eq(read(ch.from_child, &done, 1), 1);
  finish_child(&ch);
  cr_assert_eq(stat_of(c).claims, 0);
  sk_cache_close(c);
  free_rec(&t);
}

Test(cache, claim_of_a_killed_peer_is_taken_promptly) {
  test_rec t;
  make_rec(&t, 1000);
  sk_cache *c = open_cache();
  for (int reap_first = 0; reap_first <= 1; reap_first++) {
    child ch = start_claiming_child(&t, 0);
    cr_assert_eq(kill(ch.pid, SIGKILL), 0);
    if (reap_first) waitpid(ch.pid, NULL, 0); /* else a zombie: dead, not yet reaped */
    sk_acquire a;
    int waited;
    sk_record r;
    void *owned;
    double t0 = now_s();
    cr_assert_eq(sk_cache_acquire(c, t.rec.key, 30, &a, &waited, &r, &owned), SK_OK);
    cr_assert_eq(a, SK_ACQUIRE_CLAIMED);
    cr_assert_lt(now_s() - t0, 2.0, "took %.3f s", now_s() - t0);
    if (!reap_first) waitpid(ch.pid, NULL, 0);
    close(ch.to_child);
    close(ch.from_child);
    cr_assert_eq(sk_cache_release(c, t.rec.key), SK_OK);
  }
  sk_cache_close(c);
  free_rec(&t);
}

Test(cache, stale_claim_by_timeout_and_take_over_after_max_wait) {
  test_rec t;
  make_rec(&t, 1000);
  /* claim_timeout 0.3 s: the live child's claim goes stale by age */
  sk_cache_options o = {.dir = cache_dir, .claim_timeout_s = 0.3};
  sk_cache *c = open_cache_opts(&o);
  child ch = start_claiming_child(&t, 0);
  sk_acquire a;
  int waited;
  sk_record r;
  void *owned;
  double t0 = now_s();
  cr_assert_eq(sk_cache_acquire(c, t.rec.key, 30, &a, &waited, &r, &owned), SK_OK);
  double elapsed = now_s() - t0;
  cr_assert_eq(a, SK_ACQUIRE_CLAIMED);
  cr_assert_eq(waited, 1);
  cr_assert(elapsed >= 0.2 && elapsed < 5, "took %.3f s", elapsed);
  /* The child's release must not drop the claim that is now ours. */
  cr_assert_eq(write(ch.to_child, "r", 1), 1);
  char done;
  cr_assert_eq(read(ch.from_child, &done, 1), 1);
  finish_child(&ch);
  cr_assert_eq(stat_of(c).claims, 1, "our claim survived the former holder's release");
  cr_assert_eq(sk_cache_release(c, t.rec.key), SK_OK);
  cr_assert_eq(stat_of(c).claims, 0);
  sk_cache_close(c);

  /* default timeout (300 s), live holder: max_wait_s bounds the wait, then we take over */
  c = open_cache();
  ch = start_claiming_child(&t, 0);
  t0 = now_s();
  cr_assert_eq(sk_cache_acquire(c, t.rec.key, 0.3, &a, &waited, &r, &owned), SK_OK);
  elapsed = now_s() - t0;
  cr_assert_eq(a, SK_ACQUIRE_CLAIMED);
  cr_assert_eq(waited, 1);
  cr_assert(elapsed >= 0.29 && elapsed < 5, "took %.3f s", elapsed);
  cr_assert_eq(kill(ch.pid, SIGKILL), 0);
  waitpid(ch.pid, NULL, 0);
  close(ch.to_child);
  close(ch.from_child);
  /* prune drops the dead peer's (now overwritten: ours, live) claims only when stale */
  uint64_t removed;
  cr_assert_eq(sk_cache_prune(c, 0, 0, &removed), SK_OK);
  cr_assert_eq(stat_of(c).claims, 1, "our live claim is not stale");
  sk_cache_close(c);
  free_rec(&t);
}

Test(cache, prune_drops_claims_of_dead_processes) {
  test_rec t;
  make_rec(&t, 100);
  sk_cache *c = open_cache();
  child ch = start_claiming_child(&t, 0);
  kill(ch.pid, SIGKILL);
  waitpid(ch.pid, NULL, 0);
  close(ch.to_child);
  close(ch.from_child);
  cr_assert_eq(stat_of(c).claims, 1);
  uint64_t removed;
  cr_assert_eq(sk_cache_prune(c, 0, 0, &removed), SK_OK);
  cr_assert_eq(stat_of(c).claims, 0);
  sk_cache_close(c);
  free_rec(&t);
}

/* ---------------------------------------------------------------------------------------- */
/* Export, import                                                                            */

static int count_tmp_files(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c tmp-", dir);
  FILE *p = popen(cmd, "r");
  int n = 0;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = 0;
    pclose(p);
  }
  return n;
}

Test(cache, export_import_round_trip) {
  enum { N = 25 };
  test_rec recs[N];
  sk_cache *c = open_cache();
  for (int i = 0; i < N; i++) {
    make_rec(&recs[i], 1 + (size_t)(rand() % 60000));
    put_ok(c, &recs[i]);
  }
  char file[400];
  snprintf(file, sizeof file, "%s/kernels.mdb", root_dir);
  cr_assert_eq(sk_cache_export(c, file), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(count_tmp_files(root_dir), 0);
  struct stat st;
  cr_assert_eq(stat(file, &st), 0);
  cr_assert(S_ISREG(st.st_mode));
  /* A failed export leaves nothing. */
  char bad[480];
  snprintf(bad, sizeof bad, "%s/no/such/dir/x.mdb", root_dir);
  cr_assert_eq(sk_cache_export(c, bad), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), bad), "%s", sk_last_error_message());
  sk_cache_close(c);

  char other[400];
  snprintf(other, sizeof other, "%s/other", root_dir);
  sk_cache_options o = {.dir = other};
  sk_cache *d = open_cache_opts(&o);
  sk_cache_import_counts n;
  cr_assert_eq(sk_cache_import(d, file, 0, &n), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(n.imported, N);
  cr_assert_eq(n.kept + n.invalid, 0);
  for (int i = 0; i < N; i++) expect_hit(d, &recs[i]);
  sk_cache_stat s = stat_of(d);
  cr_assert_eq(s.records, N);
  cr_assert_eq(s.data_bytes, verify_all(d).bytes);
  cr_assert_eq(sk_cache_import(d, file, 0, &n), SK_OK);
  cr_assert_eq(n.imported, 0);
  cr_assert_eq(n.kept, N, "existing keys are kept");
  cr_assert_eq(n.invalid, 0);
  cr_assert_eq(sk_cache_import(d, file, 1, &n), SK_OK);
  cr_assert_eq(n.imported, N, "--overwrite replaces them");
  cr_assert_eq(stat_of(d).data_bytes, verify_all(d).bytes);

  /* Not an export: refused with a message naming the file. */
  char junk[400];
  snprintf(junk, sizeof junk, "%s/junk.mdb", root_dir);
  FILE *f = fopen(junk, "w");
  for (int i = 0; i < 10000; i++) fputc(rand(), f);
  fclose(f);
  cr_assert_eq(sk_cache_import(d, junk, 0, &n), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), junk), "%s", sk_last_error_message());
  cr_assert_eq(sk_cache_import(d, root_dir, 0, &n), SK_ERR_CACHE);
  cr_assert_eq(sk_cache_import(d, bad, 0, &n), SK_ERR_CACHE);
  sk_cache_close(d);
  for (int i = 0; i < N; i++) free_rec(&recs[i]);
}

Test(cache, import_skips_invalid_records) {
  test_rec good, broken;
  make_rec(&good, 5000);
  make_rec(&broken, 5000);
  sk_cache *c = open_cache();
  put_ok(c, &good);
  put_ok(c, &broken);
  sk_cache_close(c);
  corrupt_stored(cache_dir, broken.rec.key, -1);
  c = open_cache();
  sk_cache_disable_writes(c); /* keep the corrupt record for the export */
  char file[400];
  snprintf(file, sizeof file, "%s/e.mdb", root_dir);
  cr_assert_eq(sk_cache_export(c, file), SK_OK);
  sk_cache_close(c);
  char other[400];
  snprintf(other, sizeof other, "%s/other", root_dir);
  sk_cache_options o = {.dir = other};
  sk_cache *d = open_cache_opts(&o);
  sk_cache_import_counts n;
  cr_assert_eq(sk_cache_import(d, file, 0, &n), SK_OK);
  cr_assert_eq(n.imported, 1);
  cr_assert_eq(n.invalid, 1, "the corrupt record is counted as invalid");
  cr_assert_eq(n.kept, 0, "and not as a kept key");
  cr_assert_eq(sk_cache_import(d, file, 0, &n), SK_OK);
  cr_assert_eq(n.imported, 0);
  cr_assert_eq(n.kept, 1);
  cr_assert_eq(n.invalid, 1);
  expect_hit(d, &good);
  cr_assert_eq(lookup(d, broken.rec.key), SK_LOOKUP_MISS);
  sk_cache_close(d);
  free_rec(&good);
  free_rec(&broken);
}

/* An export (written with LMDB directly) whose records have keys longer than 16 bytes, the first
 * with a value past the 16 MiB import batch: the next batch must resume after that whole key
 * (it used to keep 16 bytes of it, land on the same record again and loop for ever). */
Test(cache, import_of_long_keys_past_a_batch_ends) {
  char file[400];
  snprintf(file, sizeof file, "%s/long-keys.mdb", root_dir);
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  cr_assert_eq(mdb_env_create(&env), 0);
  mdb_env_set_maxdbs(env, 4);
  mdb_env_set_mapsize(env, 256u << 20);
  cr_assert_eq(mdb_env_open(env, file, MDB_NOSUBDIR, 0600), 0);
  cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
  cr_assert_eq(mdb_dbi_open(txn, "records", MDB_CREATE, &dbi), 0);
  const size_t big = (17u << 20);
  uint8_t *value = calloc(1, big);
  for (int i = 0; i < 3; i++) {
    uint8_t key[20];
    memset(key, 'a' + i, sizeof key);
    MDB_val k = {sizeof key, key}, v = {i == 0 ? big : 100, value};
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
  }
  test_rec good; /* a valid record after them */
  make_rec(&good, 3000);
  memset(good.rec.key, 0xff, 4);
  void *enc;
  size_t enc_size;
  cr_assert_eq(sk_record_encode(&good.rec, &enc, &enc_size), SK_OK);
  MDB_val gk = {16, good.rec.key}, gv = {enc_size, enc};
  cr_assert_eq(mdb_put(txn, dbi, &gk, &gv, 0), 0);
  cr_assert_eq(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  free(enc);
  free(value);

  /* In a child with an alarm: an import that never ends fails the test instead of hanging it. */
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    alarm(30);
    sk_cache *c = NULL;
    sk_cache_options o = {.dir = cache_dir};
    sk_cache_import_counts n;
    if (sk_cache_open(&o, &c) != SK_OK || sk_cache_import(c, file, 0, &n) != SK_OK) _exit(10);
    sk_cache_close(c);
    _exit(n.imported == 1 && n.invalid == 3 && n.kept == 0 ? 0 : 11);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(!WIFSIGNALED(status), "the import did not end (killed by signal %d)", WTERMSIG(status));
  cr_assert_eq(WEXITSTATUS(status), 0, "the import failed (10) or miscounted (11): %d", WEXITSTATUS(status));
  sk_cache *c = open_cache();
  expect_hit(c, &good);
  sk_cache_close(c);
  free_rec(&good);
}

/* ---------------------------------------------------------------------------------------- */
/* Crash safety                                                                              */

#define STRESS_KEYS 12

static void stress_key(int i, uint8_t key[16]) {
  memset(key, 0, 16);
  key[0] = 0xc0;
  key[1] = (uint8_t)i;
}

/* Loops put/acquire/get/release/remove on random records until killed. */
static void stress_child(unsigned seed) {
  srand(seed);
  sk_cache *c = NULL;
  sk_cache_options o = {.dir = cache_dir, .initial_map_bytes = 128 << 10, .max_bytes = 3 << 20};
  if (sk_cache_open(&o, &c) != SK_OK) _exit(30);
  static uint8_t cubin[64 << 10];
  for (;;) {
    sk_record r;
    memset(&r, 0, sizeof r);
    stress_key(rand() % STRESS_KEYS, r.key);
    strcpy(r.arch, "sm_120a");
    r.cubin_size = 1 + (size_t)(rand() % (int)sizeof cubin);
    for (size_t j = 0; j < r.cubin_size; j += 64) cubin[j] = (uint8_t)rand();
    r.cubin = cubin;
    r.metadata_json = "{\"op\":\"stress\",\"name\":\"k\"}";
    r.lowered_name = "k";
    sk_acquire a;
    int waited;
    sk_record got;
    void *owned = NULL;
    sk_lookup res;
    switch (rand() % 5) {
      case 0:
      case 1:
        if (sk_cache_acquire(c, r.key, 0.01, &a, &waited, &got, &owned) != SK_OK) _exit(31);
        if (a == SK_ACQUIRE_CLAIMED && sk_cache_put(c, &r) != SK_OK) _exit(32);
        break;
      case 2:
        if (sk_cache_put(c, &r) != SK_OK) _exit(33);
        break;
      case 3:
        if (sk_cache_get(c, r.key, &res, &got, &owned) != SK_OK) _exit(34);
        if (res == SK_LOOKUP_CORRUPT) _exit(35);
        break;
      default:
        if (sk_cache_acquire(c, r.key, 0.01, &a, &waited, &got, &owned) != SK_OK) _exit(36);
        if (a == SK_ACQUIRE_CLAIMED && sk_cache_release(c, r.key) != SK_OK) _exit(37);
        break;
    }
    free(owned);
  }
}

Test(cache, sigkill_during_writes_leaves_a_valid_cache) {
  enum { ITERATIONS = 30 };
  int killed_while_running = 0;
  for (int it = 0; it < ITERATIONS; it++) {
    unsigned child_seed = (unsigned)rand();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) stress_child(child_seed);
    struct timespec ts = {0, (long)(rand() % 31) * 1000000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status))
      cr_assert_fail("iteration %d: the child failed on its own with exit status %d", it,
              WEXITSTATUS(status));
    killed_while_running++;

    /* After every kill: the cache opens, every record verifies, the counter is exact, and the
     * dead child's claims do not block anyone. */
    sk_cache *c = open_cache();
    verify_counts v = verify_all(c);
    cr_assert_eq(v.bad, 0, "iteration %d: %llu bad records", it, (unsigned long long)v.bad);
    sk_cache_stat st = stat_of(c);
    cr_assert_eq(st.records, v.good);
    cr_assert_eq(st.data_bytes, v.bytes, "iteration %d: counter %llu, scan %llu", it,
                 (unsigned long long)st.data_bytes, (unsigned long long)v.bytes);
    if (it % 10 == 9) {
      double t0 = now_s();
      for (int k = 0; k < STRESS_KEYS; k++) {
        uint8_t key[16];
        stress_key(k, key);
        sk_acquire a;
        int waited;
        sk_record r;
        void *owned = NULL;
        cr_assert_eq(sk_cache_acquire(c, key, 30, &a, &waited, &r, &owned), SK_OK);
        if (a == SK_ACQUIRE_CLAIMED) cr_assert_eq(sk_cache_release(c, key), SK_OK);
        free(owned);
      }
      cr_assert_lt(now_s() - t0, 2.0, "a dead child's claim blocked acquire");
    }
    if (it == ITERATIONS - 1) cr_assert_gt(st.records, 0, "the children never wrote anything");
    sk_cache_close(c);
  }
  cr_assert_eq(killed_while_running, ITERATIONS);
}

/* ---------------------------------------------------------------------------------------- */
/* sk-cache tool (skipped when the binary is not built)                                     */

static const char *tool_path(void) {
  static char path[512];
  const char *env = getenv("SK_CACHE_TOOL");
  if (env && access(env, X_OK) == 0) return env;
  const char *build = getenv("SK_BUILD");
  snprintf(path, sizeof path, "%s/bin/sk-cache", build ? build : "build");
  return access(path, X_OK) == 0 ? path : NULL;
}

/* Run the tool with args, capture stdout+stderr into out; returns the exit status. */
static int run_tool(char *out, size_t size, const char *fmt, ...) SK_PRINTF(3, 4);
static int run_tool(char *out, size_t size, const char *fmt, ...) {
  char args[2048], cmd[2600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", tool_path(), args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(cache, sk_cache_tool) {
  if (!tool_path()) {
    teardown(); /* a skipped test does not run .fini */
    cr_skip_test("sk-cache not built (set SK_CACHE_TOOL or SK_BUILD)");
  }
  static char out[1 << 16];
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' ls", cache_dir), 1);
  cr_assert(strstr(out, "no cache at"), "%s", out);
  cr_assert_neq(access(cache_dir, F_OK), 0, "ls created nothing");
  cr_assert_eq(run_tool(out, sizeof out, "--help"), 0);
  cr_assert(strstr(out, "usage: sk-cache") && strstr(out, "examples:"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "frobnicate"), 2);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' prune", cache_dir), 2);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' rm", cache_dir), 2);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' rm xyz", cache_dir), 2);
  cr_assert_eq(run_tool(out, sizeof out, "--bogus ls"), 2);

  sk_cache *c = open_cache();
  test_rec recs[3];
  for (int i = 0; i < 3; i++) {
    make_rec(&recs[i], 1000 * (size_t)(i + 1));
    recs[i].rec.key[0] = 0xab; /* a shared prefix: "ab" is ambiguous */
    recs[i].rec.key[1] = (uint8_t)(0x10 * (i + 1));
    put_ok(c, &recs[i]);
  }
  sk_cache_close(c);

  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' ls", cache_dir), 0, "%s", out);
  cr_assert(strstr(out, "test.scale") && strstr(out, "sk_test::scale<float,") &&
            strstr(out, "sm_120a") && strstr(out, "ab10"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--json --cache-dir '%s' ls", cache_dir), 0, "%s", out);
  cJSON *j = cJSON_Parse(out);
  cr_assert(cJSON_IsArray(j), "%s", out);
  cr_assert_eq(cJSON_GetArraySize(j), 3);
  cJSON *first = cJSON_GetArrayItem(j, 0);
  cr_assert_str_eq(cJSON_GetObjectItem(first, "op")->valuestring, "test.scale");
  cr_assert_eq(strlen(cJSON_GetObjectItem(first, "key")->valuestring), 32);
  cJSON_Delete(j);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' stat", cache_dir), 0, "%s", out);
  cr_assert(strstr(out, "records     3"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' --json stat", cache_dir), 0);
  j = cJSON_Parse(out);
  cr_assert_eq(cJSON_GetObjectItem(j, "records")->valuedouble, 3);
  cJSON_Delete(j);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' verify", cache_dir), 0, "%s", out);

  corrupt_stored(cache_dir, recs[2].rec.key, -3);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' verify", cache_dir), 1, "%s", out);
  cr_assert(strstr(out, "bad ab30") && strstr(out, "cubin hash mismatch"), "%s", out);

  /* cubin: one record's cubin, byte for byte; a corrupt, ambiguous or unknown record writes nothing. */
  char cubin_file[400];
  snprintf(cubin_file, sizeof cubin_file, "%s/k.cubin", root_dir);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' cubin AB10 '%s'", cache_dir, cubin_file), 0, "%s", out);
  FILE *cf = fopen(cubin_file, "rb");
  cr_assert_not_null(cf);
  char *got = malloc(recs[0].rec.cubin_size + 1);
  const size_t got_n = fread(got, 1, recs[0].rec.cubin_size + 1, cf);
  fclose(cf);
  cr_assert_eq(got_n, recs[0].rec.cubin_size);
  cr_assert_eq(memcmp(got, recs[0].rec.cubin, got_n), 0, "the written cubin differs from the stored one");
  free(got);
  remove(cubin_file);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' cubin ab30 '%s'", cache_dir, cubin_file), 1, "%s", out);
  cr_assert(strstr(out, "failed verification"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' cubin ab '%s'", cache_dir, cubin_file), 1, "%s", out);
  cr_assert(strstr(out, "ambiguous"), "%s", out);
  cr_assert_neq(access(cubin_file, F_OK), 0, "a failed cubin command wrote a file");
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' cubin xyz '%s'", cache_dir, cubin_file), 2);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' cubin ab10", cache_dir), 2);

  char file[400];
  snprintf(file, sizeof file, "%s/k.mdb", root_dir);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' export '%s'", cache_dir, file), 0, "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' rm ab", cache_dir), 1);
  cr_assert(strstr(out, "ambiguous"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' rm ab10 ffff", cache_dir), 1);
  cr_assert(strstr(out, "no record matches"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' rm AB10 ab30", cache_dir), 0, "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' verify", cache_dir), 0, "%s", out);
  cr_assert(strstr(out, "1 record checked, 0 bad"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' import '%s'", cache_dir, file), 0, "%s", out);
  /* ab20 is kept, ab30 was exported corrupt: two counts, and --overwrite is offered only for
   * the first. */
  cr_assert(strstr(out, "imported 1 record, kept 1 existing (--overwrite replaces them), 1 invalid record not imported"),
            "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' prune --max-bytes 1", cache_dir), 0, "%s", out);
  cr_assert(strstr(out, "removed 2 records"), "%s", out);
  cr_assert_eq(run_tool(out, sizeof out, "--cache-dir '%s' prune --older-than-days x", cache_dir), 2);
  for (int i = 0; i < 3; i++) free_rec(&recs[i]);
}
