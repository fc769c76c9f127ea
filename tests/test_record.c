/* tests/test_record.c - encoding and verification of cache records (cache/record.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "cache_internal.h"

static unsigned seed_random(void) {
  unsigned seed = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
  srand(seed);
  fprintf(stderr, "test_record: random seed %u\n", seed);
  return seed;
}

static void random_bytes(void *p, size_t n) {
  for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)rand();
}

typedef struct sample {
  sk_record rec;
  uint8_t *cubin;
  char name[64];
  char meta[160];
} sample;

static void make_sample(sample *s, size_t cubin_size) {
  memset(s, 0, sizeof *s);
  random_bytes(s->rec.key, 16);
  snprintf(s->rec.arch, sizeof s->rec.arch, "sm_%da", 90 + rand() % 32);
  s->cubin = malloc(cubin_size);
  cr_assert_not_null(s->cubin);
  random_bytes(s->cubin, cubin_size);
  snprintf(s->name, sizeof s->name, "_ZN7sk_test5scaleIfLi%dEEEvPfS1_f", rand() % 1024);
  snprintf(s->meta, sizeof s->meta,
           "{\"op\":\"test.scale\",\"name\":\"sk_test::scale<float, %d>\",\"params\":\"dtype=f32\"}",
           rand() % 1024);
  s->rec.lowered_name = s->name;
  s->rec.metadata_json = s->meta;
  s->rec.cubin = s->cubin;
  s->rec.cubin_size = cubin_size;
  s->rec.created_unix_ms = 1700000000000ull + (uint64_t)rand();
  s->rec.last_used_unix_ms = s->rec.created_unix_ms + (uint64_t)rand();
  s->rec.compile_ms = (uint32_t)rand();
}

Test(record, round_trip) {
  seed_random();
  for (int iter = 0; iter < 50; iter++) {
    sample s;
    make_sample(&s, 1 + (size_t)(rand() % 5000));
    void *buf;
    size_t size;
    cr_assert_eq(sk_record_encode(&s.rec, &buf, &size), SK_OK, "%s", sk_last_error_message());
    sk_record d;
    cr_assert_eq(sk_record_decode(buf, size, s.rec.key, &d), SK_OK, "%s", sk_last_error_message());
    cr_assert_eq(d.format_version, SK_CACHE_FORMAT_VERSION);
    cr_assert_arr_eq(d.key, s.rec.key, 16);
    cr_assert_str_eq(d.arch, s.rec.arch);
    cr_assert_eq(d.created_unix_ms, s.rec.created_unix_ms);
    cr_assert_eq(d.last_used_unix_ms, s.rec.last_used_unix_ms);
    cr_assert_eq(d.compile_ms, s.rec.compile_ms);
    cr_assert_str_eq(d.lowered_name, s.name);
    cr_assert_str_eq(d.metadata_json, s.meta);
    cr_assert_eq(d.cubin_size, s.rec.cubin_size);
    cr_assert_arr_eq(d.cubin, s.cubin, s.rec.cubin_size);
    /* The cubin is aligned within the record, so a malloc'd copy hands out an aligned cubin. */
    cr_assert_eq(((const uint8_t *)d.cubin - (const uint8_t *)buf) % SK_RECORD_CUBIN_ALIGN, 0);
    cr_assert_eq(sk_le32_load(buf), SK_RECORD_MAGIC);
    cr_assert_eq(memcmp(buf, "K_CB", 4), 0, "magic bytes spell K_CB");
    /* Decoding without a key check also works. */
    cr_assert_eq(sk_record_decode(buf, size, NULL, &d), SK_OK);
    free(buf);
    free(s.cubin);
  }
}

Test(record, null_strings_encode_as_empty) {
  seed_random();
  sample s;
  make_sample(&s, 10);
  s.rec.lowered_name = NULL;
  s.rec.metadata_json = NULL;
  void *buf;
  size_t size;
  cr_assert_eq(sk_record_encode(&s.rec, &buf, &size), SK_OK);
  sk_record d;
  cr_assert_eq(sk_record_decode(buf, size, s.rec.key, &d), SK_OK);
  cr_assert_str_eq(d.lowered_name, "");
  cr_assert_str_eq(d.metadata_json, "");
  free(buf);
  free(s.cubin);
}

Test(record, encode_rejects_bad_input) {
  seed_random();
  sample s;
  make_sample(&s, 16);
  void *buf = (void *)1;
  size_t size = 1;
  sk_record r = s.rec;
  memset(r.arch, 'x', sizeof r.arch); /* no terminator */
  cr_assert_eq(sk_record_encode(&r, &buf, &size), SK_ERR_INVALID_ARGUMENT);
  cr_assert_null(buf);
  cr_assert(strstr(sk_last_error_message(), "arch"), "%s", sk_last_error_message());
  r = s.rec;
  r.arch[0] = '\0';
  cr_assert_eq(sk_record_encode(&r, &buf, &size), SK_ERR_INVALID_ARGUMENT);
  r = s.rec;
  r.cubin = NULL;
  cr_assert_eq(sk_record_encode(&r, &buf, &size), SK_ERR_INVALID_ARGUMENT);
  r = s.rec;
  r.cubin_size = 0;
  cr_assert_eq(sk_record_encode(&r, &buf, &size), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "cubin"), "%s", sk_last_error_message());
  cr_assert_eq(sk_record_encode(NULL, &buf, &size), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_record_encode(&s.rec, NULL, &size), SK_ERR_INVALID_ARGUMENT);
  free(s.cubin);
}

/* Flip every byte of an encoded record, several ways each: decode must refuse every one. */
Test(record, every_single_byte_corruption_is_rejected) {
  seed_random();
  sample s;
  make_sample(&s, 300 + (size_t)(rand() % 200));
  void *buf;
  size_t size;
  cr_assert_eq(sk_record_encode(&s.rec, &buf, &size), SK_OK);
  uint8_t *copy = malloc(size);
  const uint8_t flips[] = {0x01, 0x80, 0xff};
  for (size_t pos = 0; pos < size; pos++) {
    for (size_t f = 0; f < sizeof flips + 1; f++) {
      uint8_t x = f < sizeof flips ? flips[f] : (uint8_t)(1 + rand() % 255);
      memcpy(copy, buf, size);
      copy[pos] ^= x;
      sk_record d;
      sk_status st = sk_record_decode(copy, size, s.rec.key, &d);
      cr_assert_eq(st, SK_ERR_CACHE, "flipping byte %zu with 0x%02x was accepted", pos, x);
      cr_assert(strncmp(sk_last_error_message(), "corrupt record: ", 16) == 0, "%s",
                sk_last_error_message());
    }
  }
  /* Setting a byte to each other value at the positions of lengths and the magic. */
  const size_t fields[] = {SK_RECORD_OFF_MAGIC, SK_RECORD_OFF_VERSION, SK_RECORD_OFF_NAME_LEN,
                           SK_RECORD_OFF_META_LEN, SK_RECORD_OFF_CUBIN_SIZE,
                           SK_RECORD_OFF_CUBIN_SIZE + 7};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    for (int v = 0; v < 256; v++) {
      memcpy(copy, buf, size);
      if (copy[fields[i]] == v) continue;
      copy[fields[i]] = (uint8_t)v;
      sk_record d;
      cr_assert_eq(sk_record_decode(copy, size, s.rec.key, &d), SK_ERR_CACHE, "offset %zu = %d",
                   fields[i], v);
    }
  }
  free(copy);
  free(buf);
  free(s.cubin);
}

Test(record, every_truncation_and_extension_is_rejected) {
  seed_random();
  sample s;
  make_sample(&s, 200 + (size_t)(rand() % 100));
  void *buf;
  size_t size;
  cr_assert_eq(sk_record_encode(&s.rec, &buf, &size), SK_OK);
  for (size_t n = 0; n < size; n++) {
    /* A separate exact-size copy, so that ASan catches any read past the given size. */
    uint8_t *t = malloc(n ? n : 1);
    memcpy(t, buf, n);
    sk_record d;
    cr_assert_eq(sk_record_decode(t, n, s.rec.key, &d), SK_ERR_CACHE, "truncated to %zu accepted", n);
    free(t);
  }
  for (size_t extra = 1; extra <= 32; extra++) {
    uint8_t *t = calloc(1, size + extra);
    memcpy(t, buf, size);
    sk_record d;
    cr_assert_eq(sk_record_decode(t, size + extra, s.rec.key, &d), SK_ERR_CACHE,
                 "%zu trailing bytes accepted", extra);
    free(t);
  }
  free(buf);
  free(s.cubin);
}

Test(record, precise_messages) {
  seed_random();
  sample s;
  make_sample(&s, 64);
  void *buf;
  size_t size;
  cr_assert_eq(sk_record_encode(&s.rec, &buf, &size), SK_OK);
  uint8_t *b = buf;
  sk_record d;
  struct {
    size_t offset;
    uint8_t xor_value;
    const char *expect;
  } cases[] = {
      {SK_RECORD_OFF_MAGIC, 1, "bad magic"},
      {SK_RECORD_OFF_VERSION, 2, "format version"},
      {SK_RECORD_OFF_FLAGS, 1, "unknown flags"},
      {SK_RECORD_OFF_CREATED, 1, "header checksum mismatch"},
      {SK_RECORD_OFF_NAME_LEN + 3, 0x10, "run past the end"},
      {SK_RECORD_OFF_CUBIN_SIZE, 1, "header describes"},
      {size - 1, 0x40, "cubin hash mismatch"},
      {SK_RECORD_HEADER_SIZE + 2, 0xff, "header checksum mismatch"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    b[cases[i].offset] ^= cases[i].xor_value;
    cr_assert_eq(sk_record_decode(buf, size, s.rec.key, &d), SK_ERR_CACHE);
    cr_assert(strstr(sk_last_error_message(), cases[i].expect), "case %zu: %s", i,
              sk_last_error_message());
    b[cases[i].offset] ^= cases[i].xor_value;
  }
  cr_assert_eq(sk_record_decode(buf, size, s.rec.key, &d), SK_OK);
  /* A valid record under another key: the key echo catches it. */
  uint8_t other[16];
  memcpy(other, s.rec.key, 16);
  other[5] ^= 1;
  cr_assert_eq(sk_record_decode(buf, size, other, &d), SK_ERR_CACHE);
  cr_assert(strstr(sk_last_error_message(), "key echo"), "%s", sk_last_error_message());
  /* Terminators and padding are checked before the checksum, each with its own message. */
  size_t name_len = sk_le32_load(b + SK_RECORD_OFF_NAME_LEN);
  size_t meta_len = sk_le32_load(b + SK_RECORD_OFF_META_LEN);
  size_t vars_end = SK_RECORD_HEADER_SIZE + name_len + meta_len;
  struct {
    size_t offset;
    const char *expect;
  } strings[] = {
      {SK_RECORD_HEADER_SIZE + name_len - 1, "lowered name is not"},
      {SK_RECORD_HEADER_SIZE + 1, "lowered name is not"}, /* an embedded NUL */
      {vars_end - 1, "metadata is not"},
      {vars_end, "padding"},
  };
  size_t ncases = sizeof strings / sizeof strings[0];
  if (vars_end % SK_RECORD_CUBIN_ALIGN == 0) ncases--; /* no padding in this sample */
  for (size_t i = 0; i < ncases; i++) {
    uint8_t saved = b[strings[i].offset];
    b[strings[i].offset] = saved ? 0 : 'x';
    cr_assert_eq(sk_record_decode(buf, size, s.rec.key, &d), SK_ERR_CACHE);
    cr_assert(strstr(sk_last_error_message(), strings[i].expect), "string case %zu: %s", i,
              sk_last_error_message());
    b[strings[i].offset] = saved;
  }
  cr_assert_eq(sk_record_decode(NULL, 100, NULL, &d), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_record_decode(buf, size, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  free(buf);
  free(s.cubin);
}

Test(record, random_garbage_never_decodes) {
  seed_random();
  for (int i = 0; i < 2000; i++) {
    size_t n = (size_t)(rand() % 600);
    uint8_t *g = malloc(n ? n : 1);
    random_bytes(g, n);
    if (n >= 8 && rand() % 2) { /* often give it a plausible start */
      sk_le32_store(g, SK_RECORD_MAGIC);
      sk_le32_store(g + 4, SK_CACHE_FORMAT_VERSION);
    }
    sk_record d;
    cr_assert_eq(sk_record_decode(g, n, NULL, &d), SK_ERR_CACHE);
    free(g);
  }
}

Test(record, set_last_used_keeps_record_valid) {
  seed_random();
  sample s;
  make_sample(&s, 1000);
  void *buf;
  size_t size;
  cr_assert_eq(sk_record_encode(&s.rec, &buf, &size), SK_OK);
  uint64_t t = 0;
  cr_assert(sk_record_peek_last_used(buf, size, &t));
  cr_assert_eq(t, s.rec.last_used_unix_ms);
  sk_record_set_last_used(buf, size, 1234567890123ull);
  sk_record d;
  cr_assert_eq(sk_record_decode(buf, size, s.rec.key, &d), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(d.last_used_unix_ms, 1234567890123ull);
  cr_assert_eq(d.created_unix_ms, s.rec.created_unix_ms);
  cr_assert_not(sk_record_peek_last_used(buf, 10, &t));
  free(buf);
  free(s.cubin);
}
