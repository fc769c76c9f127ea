/* comm.pcie host code without a GPU (ops/comm/comm.c): config rules, the handle blob's format and
 * every mismatch connect refuses, and every entry point's answer to NULL / no device: a status
 * and a message, never a crash. The collectives themselves: tests/gpu/test_comm_gpu.c. */
#include <criterion/criterion.h>
#include <string.h>

#include "comm/comm_host.h"
#include "sparkinfer/comm.h"

static sk_comm_config cfg(int rank, int world) {
  sk_comm_config c = SK_COMM_CONFIG_INIT;
  c.rank = rank;
  c.world_size = world;
  return c;
}

#define EXPECT_REFUSED(call, status, needle)                                                          \
  do {                                                                                              \
    sk_status s_ = (call);                                                                          \
    cr_expect_eq(s_, status, "%s: %s (%s)", #call, sk_status_string(s_), sk_last_error_message());   \
    cr_expect(strstr(sk_last_error_message(), needle), "%s: message \"%s\" lacks \"%s\"", #call,     \
              sk_last_error_message(), needle);                                                     \
  } while (0)

Test(comm_host, config_rules) {
  sk_comm_config out, c = cfg(0, 2);
  cr_expect_eq(sk_comm_config_check(&c, &out), SK_OK);
  cr_expect_eq(out.max_blocks, 36);
  cr_expect_eq(out.max_bytes, (size_t)8 << 20);
  c = cfg(0, 1);
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "world_size 1");
  c = cfg(0, 9);
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "world_size 9");
  c = cfg(4, 4);
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "rank 4 of world 4");
  c = cfg(0, 2), c.max_bytes = 100;
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "max_bytes 100");
  c = cfg(0, 2), c.timeout_s = 0;
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "timeout_s");
  c = cfg(0, 2), c.max_blocks = 65;
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "max_blocks 65");
  c = cfg(0, 2), c.device = -2;
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "device -2");
  c = cfg(0, 2), c.struct_size = 0;
  EXPECT_REFUSED(sk_comm_config_check(&c, &out), SK_ERR_INVALID_ARGUMENT, "struct_size");
  EXPECT_REFUSED(sk_comm_config_check(NULL, &out), SK_ERR_INVALID_ARGUMENT, "NULL");
  /* an older caller (a shorter struct) gets the defaults of the fields it lacks */
  c = cfg(1, 4);
  c.struct_size = offsetof(sk_comm_config, max_blocks);
  c.max_blocks = 99; /* beyond its struct: ignored */
  cr_expect_eq(sk_comm_config_check(&c, &out), SK_OK, "%s", sk_last_error_message());
  cr_expect_eq(out.max_blocks, 36);
  /* a newer caller's unknown fields must be zero */
  struct { sk_comm_config c; int extra; } newer = {cfg(0, 2), 1};
  newer.c.struct_size = sizeof newer;
  EXPECT_REFUSED(sk_comm_config_check(&newer.c, &out), SK_ERR_UNSUPPORTED, "does not know");
  newer.extra = 0;
  cr_expect_eq(sk_comm_config_check(&newer.c, &out), SK_OK);
}

Test(comm_host, blob_round_trip_and_mismatches) {
  sk_comm_blob b = {2, 4, 1234, 36, (uint64_t)5 << 32 | 16, {0}}, r;
  for (int i = 0; i < 64; i++) b.ipc[i] = (unsigned char)(i * 3 + 1);
  unsigned char blob[SK_COMM_HANDLE_BYTES];
  sk_comm_blob_write(&b, blob);
  cr_assert_eq(sk_comm_blob_read(blob, sizeof blob, 2, 4, b.max_bytes, 36, &r), SK_OK, "%s", sk_last_error_message());
  cr_expect(r.rank == 2 && r.world == 4 && r.pid == 1234 && r.blocks == 36 && r.max_bytes == b.max_bytes);
  cr_expect(!memcmp(r.ipc, b.ipc, 64));
  EXPECT_REFUSED(sk_comm_blob_read(blob, sizeof blob, 1, 4, b.max_bytes, 36, &r), SK_ERR_INVALID_ARGUMENT, "blob 1 holds rank 2");
  EXPECT_REFUSED(sk_comm_blob_read(blob, sizeof blob, 2, 8, b.max_bytes, 36, &r), SK_ERR_INVALID_ARGUMENT, "world size 4");
  EXPECT_REFUSED(sk_comm_blob_read(blob, sizeof blob, 2, 4, 1024, 36, &r), SK_ERR_INVALID_ARGUMENT, "same config");
  EXPECT_REFUSED(sk_comm_blob_read(blob, sizeof blob, 2, 4, b.max_bytes, 8, &r), SK_ERR_INVALID_ARGUMENT, "same config");
  EXPECT_REFUSED(sk_comm_blob_read(blob, 64, 2, 4, b.max_bytes, 36, &r), SK_ERR_INVALID_ARGUMENT, "SK_COMM_HANDLE_BYTES");
  EXPECT_REFUSED(sk_comm_blob_read(NULL, sizeof blob, 3, 4, b.max_bytes, 36, &r), SK_ERR_INVALID_ARGUMENT, "rank 3 is NULL");
  blob[3] ^= 1;
  EXPECT_REFUSED(sk_comm_blob_read(blob, sizeof blob, 2, 4, b.max_bytes, 36, &r), SK_ERR_INVALID_ARGUMENT, "not a comm.pcie handle");
}

/* No GPU here: create fails with a driver/device status; every other entry refuses NULL. */
Test(comm_host, entry_points_without_gpu) {
  sk_comm *c = (sk_comm *)0x1;
  sk_comm_config k = cfg(0, 2);
  sk_status s = sk_comm_create(&k, &c);
  cr_expect(s == SK_ERR_NO_DRIVER || s == SK_ERR_NO_DEVICE || s == SK_OK, "create: %s: %s", sk_status_string(s), sk_last_error_message());
  if (s != SK_OK) cr_expect_null(c);
  else sk_comm_destroy(c); /* a machine with a GPU: nothing more to check here */
  k.world_size = 0;
  EXPECT_REFUSED(sk_comm_create(&k, &c), SK_ERR_INVALID_ARGUMENT, "world_size 0");
  EXPECT_REFUSED(sk_comm_create(&k, NULL), SK_ERR_INVALID_ARGUMENT, "comm is NULL");
  unsigned char blob[SK_COMM_HANDLE_BYTES];
  size_t needed = 0;
  EXPECT_REFUSED(sk_comm_export(NULL, blob, sizeof blob, &needed), SK_ERR_INVALID_ARGUMENT, "must not be NULL");
  cr_expect_eq(needed, SK_COMM_HANDLE_BYTES);
  EXPECT_REFUSED(sk_comm_connect(NULL, NULL, 0, 0), SK_ERR_INVALID_ARGUMENT, "must not be NULL");
  EXPECT_REFUSED(sk_comm_connect_unix(NULL, "/tmp/x"), SK_ERR_INVALID_ARGUMENT, "comm is NULL");
  EXPECT_REFUSED(sk_comm_allreduce(NULL, NULL, NULL, NULL), SK_ERR_INVALID_ARGUMENT, "comm is NULL");
  EXPECT_REFUSED(sk_comm_allreduce_add_rmsnorm(NULL, NULL, NULL, NULL, 1e-6f, NULL, NULL), SK_ERR_INVALID_ARGUMENT, "comm is NULL");
  EXPECT_REFUSED(sk_comm_allreduce_ring(NULL, NULL, NULL, SK_COMM_CODEC_E4M3, SK_COMM_TOPO_RING, NULL), SK_ERR_INVALID_ARGUMENT,
                 "comm is NULL");
  EXPECT_REFUSED(sk_comm_poll_error(NULL, NULL), SK_ERR_INVALID_ARGUMENT, "comm is NULL");
  cr_expect_eq(sk_comm_rank(NULL), -1);
  cr_expect_eq(sk_comm_world_size(NULL), -1);
  sk_comm_destroy(NULL);
}
