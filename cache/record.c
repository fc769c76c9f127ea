/*
 * cache/record.c - the encoded form of a cache record (layout in docs/cache.md).
 *
 * A record is a fixed 96-byte little-endian header, the lowered name and the metadata JSON
 * (both NUL-terminated), zero padding up to a 16-byte boundary, then the cubin. Two hashes make
 * any corruption detectable: XXH3-64 of the cubin, and a header checksum (XXH3-64 over every
 * other byte: header minus the checksum field, names, padding). The checksum is separate from
 * the cubin hash so that the last-used time can be rewritten without rehashing the cubin.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cache_internal.h"
#include "base.h"

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Checksum over everything except the checksum field and the cubin. The header part seeds the
 * hash of the variable part so that both are covered without a streaming state. */
static uint64_t header_checksum(const uint8_t *buf, size_t cubin_offset) {
  uint64_t seed = XXH3_64bits(buf, SK_RECORD_OFF_CHECKSUM);
  return XXH3_64bits_withSeed(buf + SK_RECORD_HEADER_SIZE, cubin_offset - SK_RECORD_HEADER_SIZE,
                              seed);
}

sk_status sk_record_encode(const sk_record *rec, void **out, size_t *out_size) {
  if (!rec || !out || !out_size)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_record_encode: NULL argument");
  *out = NULL;
  *out_size = 0;
  size_t arch_len = strnlen(rec->arch, SK_RECORD_ARCH_LEN);
  if (arch_len == SK_RECORD_ARCH_LEN)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "sk_record_encode: arch is not NUL-terminated within %d bytes",
                        SK_RECORD_ARCH_LEN);
  if (arch_len == 0) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_record_encode: empty arch");
  if (!rec->cubin || rec->cubin_size == 0)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_record_encode: empty cubin");
  const char *name = rec->lowered_name ? rec->lowered_name : "";
  const char *meta = rec->metadata_json ? rec->metadata_json : "";
  size_t name_len = strlen(name) + 1, meta_len = strlen(meta) + 1;
  if (name_len > UINT32_MAX || meta_len > UINT32_MAX)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_record_encode: name or metadata over 4 GiB");
  size_t cubin_offset = align_up(SK_RECORD_HEADER_SIZE + name_len + meta_len, SK_RECORD_CUBIN_ALIGN);
  if (rec->cubin_size > SIZE_MAX - cubin_offset)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_record_encode: cubin too large");
  size_t total = cubin_offset + rec->cubin_size;

  uint8_t *buf = calloc(1, total); /* zeroed: arch padding and alignment padding */
  if (!buf)
    return sk_set_error(SK_ERR_OUT_OF_MEMORY, "sk_record_encode: cannot allocate %zu bytes", total);
  sk_le32_store(buf + SK_RECORD_OFF_MAGIC, SK_RECORD_MAGIC);
  sk_le32_store(buf + SK_RECORD_OFF_VERSION, SK_CACHE_FORMAT_VERSION);
  sk_le32_store(buf + SK_RECORD_OFF_FLAGS, 0);
  sk_le32_store(buf + SK_RECORD_OFF_COMPILE_MS, rec->compile_ms);
  memcpy(buf + SK_RECORD_OFF_KEY, rec->key, 16);
  memcpy(buf + SK_RECORD_OFF_ARCH, rec->arch, arch_len);
  sk_le64_store(buf + SK_RECORD_OFF_CREATED, rec->created_unix_ms);
  sk_le64_store(buf + SK_RECORD_OFF_LAST_USED, rec->last_used_unix_ms);
  sk_le32_store(buf + SK_RECORD_OFF_NAME_LEN, (uint32_t)name_len);
  sk_le32_store(buf + SK_RECORD_OFF_META_LEN, (uint32_t)meta_len);
  sk_le64_store(buf + SK_RECORD_OFF_CUBIN_SIZE, (uint64_t)rec->cubin_size);
  sk_le64_store(buf + SK_RECORD_OFF_CUBIN_HASH, XXH3_64bits(rec->cubin, rec->cubin_size));
  memcpy(buf + SK_RECORD_HEADER_SIZE, name, name_len);
  memcpy(buf + SK_RECORD_HEADER_SIZE + name_len, meta, meta_len);
  memcpy(buf + cubin_offset, rec->cubin, rec->cubin_size);
  sk_le64_store(buf + SK_RECORD_OFF_CHECKSUM, header_checksum(buf, cubin_offset));
  *out = buf;
  *out_size = total;
  return SK_OK;
}

/* A NUL-terminated string of exactly `len` bytes (terminator included, no NUL before it). */
static int is_exact_cstring(const uint8_t *p, size_t len) {
  return len >= 1 && p[len - 1] == 0 && memchr(p, 0, len - 1) == NULL;
}

static void hex16(const uint8_t *key, char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[key[i] >> 4];
    out[2 * i + 1] = digits[key[i] & 15];
  }
  out[32] = '\0';
}

void sk_cache_key_hex(const uint8_t key[16], char out[33]) { hex16(key, out); }

#define BAD(...) sk_set_error(SK_ERR_CACHE, "corrupt record: " __VA_ARGS__)

sk_status sk_record_decode(const void *buf_, size_t size, const uint8_t *expect_key,
                           sk_record *out) {
  const uint8_t *buf = buf_;
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_record_decode: NULL output");
  memset(out, 0, sizeof *out);
  if (!buf) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_record_decode: NULL buffer");
  if (size < SK_RECORD_HEADER_SIZE)
    return BAD("%zu bytes, shorter than the %u-byte header", size, SK_RECORD_HEADER_SIZE);
  uint32_t magic = sk_le32_load(buf + SK_RECORD_OFF_MAGIC);
  if (magic != SK_RECORD_MAGIC)
    return BAD("bad magic 0x%08x (expected 0x%08x)", magic, SK_RECORD_MAGIC);
  uint32_t version = sk_le32_load(buf + SK_RECORD_OFF_VERSION);
  if (version != SK_CACHE_FORMAT_VERSION)
    return BAD("format version %u, this build reads version %u", version, SK_CACHE_FORMAT_VERSION);
  uint32_t flags = sk_le32_load(buf + SK_RECORD_OFF_FLAGS);
  if (flags != 0) return BAD("unknown flags 0x%08x", flags);

  const uint8_t *arch = buf + SK_RECORD_OFF_ARCH;
  size_t arch_len = strnlen((const char *)arch, SK_RECORD_ARCH_LEN);
  if (arch_len == 0) return BAD("empty arch");
  if (arch_len == SK_RECORD_ARCH_LEN) return BAD("arch is not NUL-terminated");
  for (size_t i = arch_len; i < SK_RECORD_ARCH_LEN; i++)
    if (arch[i] != 0) return BAD("arch padding byte %zu is not zero", i);

  uint64_t name_len = sk_le32_load(buf + SK_RECORD_OFF_NAME_LEN);
  uint64_t meta_len = sk_le32_load(buf + SK_RECORD_OFF_META_LEN);
  uint64_t cubin_size = sk_le64_load(buf + SK_RECORD_OFF_CUBIN_SIZE);
  if (name_len == 0) return BAD("lowered-name length is 0 (the NUL terminator is counted)");
  if (meta_len == 0) return BAD("metadata length is 0 (the NUL terminator is counted)");
  if (cubin_size == 0) return BAD("empty cubin");
  uint64_t vars_end = SK_RECORD_HEADER_SIZE + name_len + meta_len; /* < 2^34: no overflow */
  if (vars_end > size)
    return BAD("name (%llu bytes) and metadata (%llu bytes) run past the end of the %zu-byte record",
               (unsigned long long)name_len, (unsigned long long)meta_len, size);
  uint64_t cubin_offset = align_up((size_t)vars_end, SK_RECORD_CUBIN_ALIGN);
  if (cubin_offset > size || cubin_size != size - cubin_offset)
    return BAD("record is %zu bytes but its header describes %llu + %llu cubin bytes", size,
               (unsigned long long)cubin_offset, (unsigned long long)cubin_size);

  const uint8_t *name = buf + SK_RECORD_HEADER_SIZE;
  const uint8_t *meta = name + name_len;
  if (!is_exact_cstring(name, name_len)) return BAD("lowered name is not a NUL-terminated string");
  if (!is_exact_cstring(meta, meta_len)) return BAD("metadata is not a NUL-terminated string");
  for (uint64_t i = vars_end; i < cubin_offset; i++)
    if (buf[i] != 0) return BAD("alignment padding byte at offset %llu is not zero", (unsigned long long)i);

  uint64_t stored_checksum = sk_le64_load(buf + SK_RECORD_OFF_CHECKSUM);
  uint64_t checksum = header_checksum(buf, (size_t)cubin_offset);
  if (stored_checksum != checksum)
    return BAD("header checksum mismatch (stored %016llx, computed %016llx)",
               (unsigned long long)stored_checksum, (unsigned long long)checksum);
  const uint8_t *cubin = buf + cubin_offset;
  uint64_t stored_hash = sk_le64_load(buf + SK_RECORD_OFF_CUBIN_HASH);
  uint64_t hash = XXH3_64bits(cubin, (size_t)cubin_size);
  if (stored_hash != hash)
    return BAD("cubin hash mismatch (stored %016llx, computed %016llx)",
               (unsigned long long)stored_hash, (unsigned long long)hash);
  if (expect_key && memcmp(expect_key, buf + SK_RECORD_OFF_KEY, 16) != 0) {
    char want[33], got[33];
    hex16(expect_key, want);
    hex16(buf + SK_RECORD_OFF_KEY, got);
    return BAD("key echo %s does not match its key %s", got, want);
  }

  out->format_version = version;
  memcpy(out->key, buf + SK_RECORD_OFF_KEY, 16);
  memcpy(out->arch, arch, SK_RECORD_ARCH_LEN);
  out->created_unix_ms = sk_le64_load(buf + SK_RECORD_OFF_CREATED);
  out->last_used_unix_ms = sk_le64_load(buf + SK_RECORD_OFF_LAST_USED);
  out->compile_ms = sk_le32_load(buf + SK_RECORD_OFF_COMPILE_MS);
  out->lowered_name = (const char *)name;
  out->metadata_json = (const char *)meta;
  out->cubin = cubin;
  out->cubin_size = (size_t)cubin_size;
  return SK_OK;
}

int sk_record_peek_last_used(const void *buf, size_t size, uint64_t *last_used_unix_ms) {
  if (!buf || size < SK_RECORD_HEADER_SIZE ||
      sk_le32_load((const uint8_t *)buf + SK_RECORD_OFF_MAGIC) != SK_RECORD_MAGIC)
    return 0;
  *last_used_unix_ms = sk_le64_load((const uint8_t *)buf + SK_RECORD_OFF_LAST_USED);
  return 1;
}

void sk_record_set_last_used(void *buf_, size_t size, uint64_t last_used_unix_ms) {
  uint8_t *buf = buf_;
  size_t cubin_offset = size - (size_t)sk_le64_load(buf + SK_RECORD_OFF_CUBIN_SIZE);
  sk_le64_store(buf + SK_RECORD_OFF_LAST_USED, last_used_unix_ms);
  sk_le64_store(buf + SK_RECORD_OFF_CHECKSUM, header_checksum(buf, cubin_offset));
}
