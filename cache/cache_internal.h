/*
 * cache/cache_internal.h - helpers shared by the files of cache/ (and their tests). Not part of
 * the interface the runtime uses; that is cache.h.
 */
#ifndef SK_CACHE_INTERNAL_H
#define SK_CACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "cache.h"

/* Fixed header of an encoded record (docs/cache.md has the table). */
#define SK_RECORD_HEADER_SIZE 96u
#define SK_RECORD_OFF_MAGIC 0u
#define SK_RECORD_OFF_VERSION 4u
#define SK_RECORD_OFF_FLAGS 8u
#define SK_RECORD_OFF_COMPILE_MS 12u
#define SK_RECORD_OFF_KEY 16u
#define SK_RECORD_OFF_ARCH 32u
#define SK_RECORD_OFF_CREATED 48u
#define SK_RECORD_OFF_LAST_USED 56u
#define SK_RECORD_OFF_NAME_LEN 64u
#define SK_RECORD_OFF_META_LEN 68u
#define SK_RECORD_OFF_CUBIN_SIZE 72u
#define SK_RECORD_OFF_CUBIN_HASH 80u
#define SK_RECORD_OFF_CHECKSUM 88u
/* The cubin starts at a multiple of this offset so that it is aligned in a malloc'd copy. */
#define SK_RECORD_CUBIN_ALIGN 16u

static inline uint32_t sk_le32_load(const void *p) {
  const uint8_t *b = p;
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t sk_le64_load(const void *p) {
  const uint8_t *b = p;
  return (uint64_t)sk_le32_load(b) | (uint64_t)sk_le32_load(b + 4) << 32;
}
static inline void sk_le32_store(void *p, uint32_t v) {
  uint8_t *b = p;
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline void sk_le64_store(void *p, uint64_t v) {
  uint8_t *b = p;
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* Read last_used from an encoded record after checking only its size and magic (prune uses it to
 * order records without hashing every cubin). Returns 0 when the header is unreadable. */
int sk_record_peek_last_used(const void *buf, size_t size, uint64_t *last_used_unix_ms);

/* Rewrite last_used in an encoded record in place and refresh its header checksum. The buffer
 * must have passed sk_record_decode. */
void sk_record_set_last_used(void *buf, size_t size, uint64_t last_used_unix_ms);

/* Name of a network filesystem type (statfs f_type) on which LMDB locking is unsafe, or NULL
 * for a local one. */
const char *sk_cache_network_fs_name(unsigned long long f_type);

/* The structure check (cache/check.c): walk every B-tree of the snapshot of read transaction
 * `txn` in the data file with pread and check what LMDB's code relies on (page headers, node
 * extents, key order, child and overflow page numbers, the free list). 0: sound; 1: damaged, why
 * says where; -1: could not check (why says why). Reads nothing through LMDB's map. */
struct MDB_env;
struct MDB_txn;
int sk_lmdb_check(struct MDB_env *env, struct MDB_txn *txn, char *why, size_t why_size);
/* The two meta pages of a data file, before LMDB reads them (it trusts their page size, flags and
 * roots): magic and version, one page size (a power of two, 512..64 KiB), the free list's and the
 * main database's flags, roots inside the file. Same return values. */
int sk_lmdb_check_meta(const char *path, char *why, size_t why_size);

/* "0123abcd..." (32 hex digits + NUL) */
void sk_cache_key_hex(const uint8_t key[16], char out[33]);

#endif /* SK_CACHE_INTERNAL_H */
