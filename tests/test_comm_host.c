/* comm.pcie host code without a GPU (ops/comm/comm.c): config rules, the handle blob's format and
 * every mismatch connect refuses, and every entry point's answer to NULL / no device: a status
 * and a message, never a crash. The collectives themselves: tests/gpu/test_comm_gpu.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_host.h"
#include "sparkinfer/comm.h"
#include "testutil.h"

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
  struct { sk_comm_config c; int extra; } newer;
  memset(&newer, 0, sizeof newer); /* the padding after extra too: it is part of the unknown tail */
  newer.c = cfg(0, 2);
  newer.extra = 1;
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

/* The op without a communicator (what manifests and sk-warm make): caps rules, the entries' own
 * bind rules, and run refused with a message. */
Test(comm_host, op_caps_and_bind_rules) {
  sk_comm_caps caps = SK_COMM_CAPS_INIT;
  caps.arch = "sm_120a";
  sk_plan *p = NULL;
  EXPECT_REFUSED(sk_comm_plan_create(&caps, &p), SK_ERR_INVALID_ARGUMENT, "caps.world_size 0");
  caps.world_size = 4;
  caps.eps = 0.0f;
  EXPECT_REFUSED(sk_comm_plan_create(&caps, &p), SK_ERR_INVALID_ARGUMENT, "caps.eps");
  caps.eps = 1e-6f;
  caps.max_bytes = 24;
  EXPECT_REFUSED(sk_comm_plan_create(&caps, &p), SK_ERR_INVALID_ARGUMENT, "caps.max_bytes 24");
  caps.max_bytes = 0;
  caps.codec = SK_COMM_CODEC_INT8;
  caps.topology = SK_COMM_TOPO_A2A;
  cr_assert_eq(sk_comm_plan_create(&caps, &p), SK_OK, "%s", sk_last_error_message());
  int64_t max_n = 0;
  cr_expect_eq(sk_plan_symbol(p, "MAX_N", &max_n), SK_OK);
  cr_expect_eq(max_n, 4 << 20, "8 MiB of bf16 without a communicator");

  sk_binding *b = NULL;
  int64_t n12[1] = {12}, n40[1] = {4 * 8 + 8}, n_big[1] = {(4 << 20) + 8};
  DLTensor in = tu_fake_device_tensor(0x10000, TU_BF16, 1, n12), out = tu_fake_device_tensor(0x20000, TU_BF16, 1, n12);
  const DLTensor *t[] = {&in, &out};
  cr_assert_eq(sk_binding_create(p, "allreduce", &b), SK_OK);
  EXPECT_REFUSED(sk_bind(b, t, 2, NULL, 0), SK_ERR_INVALID_ARGUMENT, "multiple of 8");
  in.shape = out.shape = n_big;
  EXPECT_REFUSED(sk_bind(b, t, 2, NULL, 0), SK_ERR_INVALID_ARGUMENT, "N");
  sk_binding_destroy(b);
  cr_assert_eq(sk_binding_create(p, "ring", &b), SK_OK);
  in.shape = out.shape = n40;
  EXPECT_REFUSED(sk_bind(b, t, 2, NULL, 0), SK_ERR_INVALID_ARGUMENT, "multiple of 8 * world size = 32");
  int64_t n_ok[1] = {4 * 128 * 2};
  in.shape = out.shape = n_ok;
  cr_expect_eq(sk_bind(b, t, 2, NULL, 0), SK_OK, "%s", sk_last_error_message());
  cr_expect_neq(sk_run(b, NULL), SK_OK, "a plan without a communicator ran");
  sk_binding_destroy(b);

  int64_t mh[2] = {3, 20}, h[1] = {20};
  DLTensor x = tu_fake_device_tensor(0x10000, TU_BF16, 2, mh), r = tu_fake_device_tensor(0x20000, TU_BF16, 2, mh), w = tu_fake_device_tensor(0x30000, TU_BF16, 1, h), o = tu_fake_device_tensor(0x40000, TU_BF16, 2, mh);
  const DLTensor *tn[] = {&x, &r, &w, &o};
  cr_assert_eq(sk_binding_create(p, "add_rmsnorm", &b), SK_OK);
  EXPECT_REFUSED(sk_bind(b, tn, 4, NULL, 0), SK_ERR_INVALID_ARGUMENT, "multiple of 8");
  mh[1] = h[0] = 24;
  cr_expect_eq(sk_bind(b, tn, 4, NULL, 0), SK_OK, "%s", sk_last_error_message());
  sk_binding_destroy(b);
  sk_plan_destroy(p);
}

/* A communicator's plans and the direct calls, on a communicator built by hand (no GPU): caps
 * checked against it, the direct calls refuse bad tensors through the op's validator. */
Test(comm_host, op_on_a_communicator) {
  sk_comm *c = calloc(1, sizeof *c);
  cr_assert(c);
  sk_comm_config k = cfg(1, 4);
  k.max_bytes = 1 << 20;
  cr_assert_eq(sk_comm_config_check(&k, &c->cfg), SK_OK);
  sk_comm_caps caps = SK_COMM_CAPS_INIT;
  caps.arch = "sm_90a";
  caps.comm = c;
  caps.world_size = 2;
  sk_plan *p = NULL;
  EXPECT_REFUSED(sk_comm_plan_create(&caps, &p), SK_ERR_INVALID_ARGUMENT, "the communicator's is 4");
  caps.world_size = 0;
  caps.max_bytes = 2 << 20;
  EXPECT_REFUSED(sk_comm_plan_create(&caps, &p), SK_ERR_INVALID_ARGUMENT, "exceeds the communicator's");
  cr_assert_eq(sk_comm_plans_create(c, "sm_90a"), SK_OK, "%s", sk_last_error_message());
  for (int m = 0; m < SK_COMM_MODES; m++) {
    const sk_comm_codec codec = m ? (sk_comm_codec)(1 + (m - 1) / 3) : SK_COMM_CODEC_BF16;
    const sk_comm_topology topo = m ? (sk_comm_topology)((m - 1) % 3) : SK_COMM_TOPO_AG;
    cr_assert_eq(sk_comm_mode_index(codec, topo), m);
    static const char *const codecs[] = {"bf16", "e4m3", "int8", "mxfp8"}, *const topos[] = {"ag", "ring", "a2a"};
    char json[512], want[64];
    cr_assert(c->plan[m] && c->ring[m], "mode %d: no plan or binding", m);
    cr_assert_eq(sk_plan_caps_json(c->plan[m], json, sizeof json, NULL), SK_OK);
    snprintf(want, sizeof want, "\"codec\":\"%s\"", codecs[codec]);
    cr_expect(strstr(json, want), "mode %d: %s", m, json);
    snprintf(want, sizeof want, "\"topology\":\"%s\"", topos[topo]);
    cr_expect(!m || strstr(json, want), "mode %d: %s", m, json);
  }
  int64_t max_n = 0;
  cr_expect_eq(sk_plan_symbol(c->plan[0], "MAX_N", &max_n), SK_OK);
  cr_expect_eq(max_n, 1 << 19, "the communicator's max_bytes");

  int64_t n[1] = {4 * 8 * 3}, bad[1] = {12};
  DLTensor in = tu_fake_device_tensor(0x10000, TU_BF16, 1, n), out = tu_fake_device_tensor(0x20000, TU_BF16, 1, n);
  EXPECT_REFUSED(sk_comm_allreduce(c, &in, &out, NULL), SK_ERR_INVALID_ARGUMENT, "not connected");
  c->connected = 1;
  EXPECT_REFUSED(sk_comm_allreduce(c, NULL, &out, NULL), SK_ERR_INVALID_ARGUMENT, "tensor in [N]: is required");
  out.dtype.code = kDLFloat;
  EXPECT_REFUSED(sk_comm_allreduce(c, &in, &out, NULL), SK_ERR_INVALID_ARGUMENT, "tensor out [N]: must be bfloat16");
  out.dtype.code = kDLBfloat;
  in.shape = out.shape = bad;
  EXPECT_REFUSED(sk_comm_allreduce(c, &in, &out, NULL), SK_ERR_INVALID_ARGUMENT, "multiple of 8");
  in.shape = out.shape = n;
  EXPECT_REFUSED(sk_comm_allreduce_ring(c, &in, &out, (sk_comm_codec)7, SK_COMM_TOPO_AG, NULL), SK_ERR_INVALID_ARGUMENT,
                 "not a wire mode");
  EXPECT_REFUSED(sk_comm_allreduce_add_rmsnorm(c, &in, &in, &in, -1.0f, &out, NULL), SK_ERR_INVALID_ARGUMENT, "eps");
  EXPECT_REFUSED(sk_comm_allreduce_add_rmsnorm(c, &in, &in, &in, 1e-6f, &out, NULL), SK_ERR_INVALID_ARGUMENT, "tensor x [M, H]");
  /* valid tensors: the plans are offline here, so the call stops before any driver call */
  cr_expect_eq(sk_comm_allreduce_ring(c, &in, &out, SK_COMM_CODEC_E4M3, SK_COMM_TOPO_RING, NULL), SK_ERR_NO_DEVICE, "%s",
               sk_last_error_message());
  c->poisoned = 1;
  EXPECT_REFUSED(sk_comm_allreduce(c, &in, &out, NULL), SK_ERR_TIMEOUT, "timed out earlier");
  sk_comm_plans_destroy(c);
  free(c);
}
