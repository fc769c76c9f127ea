/*
 * cache/cache.h - the LMDB cubin store (internal to sparkinfer; used by the runtime, sk-warm and
 * sk-cache). See docs/cache.md for the on-disk format.
 *
 * One LMDB environment per cache directory (files data.mdb and lock.mdb), two named databases:
 *   "records": 16-byte key -> encoded record (sk_record_encode)
 *   "claims" : 16-byte key -> compile claim of a process (cross-process single flight)
 *
 * Every function sets the thread's error message (sk_set_error) when it returns a failure.
 * Thread safety: an sk_cache may be used from many threads at once (MDB_NOTLS; LMDB serialises
 * writers across threads and processes).
 */
#ifndef SK_CACHE_H
#define SK_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "sparkinfer.h"

#define SK_RECORD_MAGIC 0x42435f4bu /* "K_CB" little-endian bytes: 'K','_','C','B' */
#define SK_CACHE_FORMAT_VERSION 1u
#define SK_RECORD_ARCH_LEN 16

/* Decoded record. For sk_record_decode the pointers point into the encoded buffer. */
typedef struct sk_record {
  uint32_t format_version;
  uint8_t key[16];                    /* echo of the LMDB key */
  char arch[SK_RECORD_ARCH_LEN];      /* NUL-padded, e.g. "sm_120a" */
  uint64_t created_unix_ms;
  uint64_t last_used_unix_ms;
  uint32_t compile_ms;
  const char *lowered_name;           /* NUL-terminated */
  const char *metadata_json;          /* NUL-terminated cJSON text: op, params, options, log */
  const void *cubin;
  size_t cubin_size;
} sk_record;

/* Encode into a malloc'd buffer (*out, *out_size); the caller frees. Computes the cubin hash. */
sk_status sk_record_encode(const sk_record *rec, void **out, size_t *out_size);
/* Decode and verify (magic, version, lengths, cubin XXH3-64, key echo when expect_key != NULL).
 * Returns SK_OK or SK_ERR_CACHE with a message saying what failed. */
sk_status sk_record_decode(const void *buf, size_t size, const uint8_t *expect_key, sk_record *out);

typedef struct sk_cache sk_cache;

typedef struct sk_cache_options {
  const char *dir;              /* required */
  int readonly;                 /* open MDB_RDONLY (and MDB_NOLOCK if lock.mdb is not writable) */
  uint64_t max_bytes;           /* 0 = unlimited; else LRU-prune after puts to stay under it */
  uint64_t initial_map_bytes;   /* 0 = default (256 MiB); grows on MDB_MAP_FULL */
  double claim_timeout_s;       /* 0 = default 300: a claim older than this is stale */
} sk_cache_options;

/* Open (creating the directory 0700 when missing and not readonly). Refuses, with
 * SK_ERR_CACHE and a message that says why: a directory owned by another user, a directory
 * writable by group or others, a network filesystem (NFS, CIFS/SMB, ...), a path that cannot be
 * created or opened, a data file that is not LMDB's, truncated, damaged (the structure check of
 * check.c walks every B-tree page first) or, read-only, empty. The caller decides to degrade to
 * memory-only. */
sk_status sk_cache_open(const sk_cache_options *opts, sk_cache **out);
void sk_cache_close(sk_cache *c);
const char *sk_cache_dir(const sk_cache *c);
int sk_cache_is_readonly(const sk_cache *c);

/* Whether the data file turned out to be damaged while in use (a key or value outside the file,
 * or LMDB reporting corruption); when it did, the thread's message says so, naming the file.
 * From then on every call fails with SK_ERR_CACHE and that message, and nothing is read from the
 * file or written to it. Thread-safe. */
int sk_cache_is_damaged(const sk_cache *c);

/* After this no call writes (puts, claims, last-used updates, prunes return SK_OK doing
 * nothing or SK_ERR_CACHE for explicit writes). Used by the freeze. Thread-safe. */
void sk_cache_disable_writes(sk_cache *c);

/* Result of a lookup. */
typedef enum sk_lookup {
  SK_LOOKUP_HIT = 0,
  SK_LOOKUP_MISS = 1,
  SK_LOOKUP_CORRUPT = 2,   /* a record existed but failed verification (it is deleted when
                              writes are allowed); treat as a miss */
} sk_lookup;

/* Look a key up. On HIT, *rec is filled and its pointers point into *owned (malloc'd, caller
 * frees). Updates the record's last-used time at most once per hour per record (coarse LRU),
 * unless writes are disabled. */
sk_status sk_cache_get(sk_cache *c, const uint8_t key[16], sk_lookup *result, sk_record *rec,
                       void **owned);

/* Store a record (rec->key is the key; created/last-used default to now when 0). Grows the map
 * on MDB_MAP_FULL; prunes LRU records when over max_bytes; deletes any claim on the key in the
 * same transaction. */
sk_status sk_cache_put(sk_cache *c, const sk_record *rec);

/* Cross-process single flight. The outcome of sk_cache_acquire: */
typedef enum sk_acquire {
  SK_ACQUIRE_HIT = 0,      /* a valid record exists (maybe a peer just stored it): *rec filled */
  SK_ACQUIRE_CLAIMED = 1,  /* we hold the claim: compile, then sk_cache_put (releases it) or
                              sk_cache_release on failure */
  SK_ACQUIRE_UNCLAIMED = 2,/* no claim possible (read-only, writes disabled): compile anyway */
} sk_acquire;

/* Acquire the right to compile `key`. If another live process holds a fresh claim, waits
 * (polling with backoff) until its record appears, its claim disappears or goes stale (process
 * dead, or older than claim_timeout_s), or max_wait_s passes; then claims itself. *waited is set
 * to 1 if it had to wait for a peer. On HIT, *rec and *owned as in sk_cache_get. */
sk_status sk_cache_acquire(sk_cache *c, const uint8_t key[16], double max_wait_s,
                           sk_acquire *result, int *waited, sk_record *rec, void **owned);
/* Drop our claim on key (after a failed compile). */
sk_status sk_cache_release(sk_cache *c, const uint8_t key[16]);

/* Iterate over every record, verifying each. cb gets the key, the decoded record (NULL when it
 * failed verification, with `error` saying why) and the encoded size; return nonzero to stop. */
typedef int (*sk_cache_visit_fn)(void *ud, const uint8_t key[16], const sk_record *rec,
                                 size_t encoded_size, const char *error);
sk_status sk_cache_foreach(sk_cache *c, sk_cache_visit_fn cb, void *ud);

typedef struct sk_cache_stat {
  uint64_t records;
  uint64_t claims;
  uint64_t data_bytes;      /* sum of encoded record sizes */
  uint64_t map_bytes;       /* current LMDB map size */
  uint64_t file_bytes;      /* size of data.mdb */
  uint64_t page_size;
} sk_cache_stat;
sk_status sk_cache_get_stat(sk_cache *c, sk_cache_stat *st);

/* Remove one record. SK_ERR_NOT_FOUND if absent. */
sk_status sk_cache_remove(sk_cache *c, const uint8_t key[16]);

/* Remove records until data_bytes <= max_bytes (oldest last-used first; 0 = no size limit) and
 * every record last used before older_than_unix_ms (0 = no age limit). *removed = count. */
sk_status sk_cache_prune(sk_cache *c, uint64_t max_bytes, uint64_t older_than_unix_ms,
                         uint64_t *removed);

/* Write a compacted copy of the whole cache to `path` (a single LMDB file, MDB_NOSUBDIR). */
sk_status sk_cache_export(sk_cache *c, const char *path);

/* What an import did with the export's records. */
typedef struct sk_cache_import_counts {
  uint64_t imported; /* stored */
  uint64_t kept;     /* valid, but the key exists and overwrite is off: the cache's record stays */
  uint64_t invalid;  /* failed verification (or a key that is not 16 bytes): never stored */
} sk_cache_import_counts;

/* Merge the valid records of an exported file into this cache (records whose key exists are
 * kept unless `overwrite`). counts may be NULL. The file's structure is checked first (as at
 * open): a damaged one is refused, SK_ERR_CACHE naming it, before anything is imported. Every
 * batch resumes after the whole key of the last record it took, so the import ends for any
 * input. */
sk_status sk_cache_import(sk_cache *c, const char *path, int overwrite, sk_cache_import_counts *counts);

uint64_t sk_now_unix_ms(void);

/* The default cache directory: $SPARKINFER_CACHE_DIR, else $XDG_CACHE_HOME/sparkinfer, else
 * $HOME/.cache/sparkinfer (else the passwd entry's home). SK_ERR_NOT_FOUND if none can be formed. */
sk_status sk_cache_default_dir(char *buf, size_t size);

#endif /* SK_CACHE_H */
