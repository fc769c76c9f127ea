/* comm.pcie's whole host path on the stub driver (tests/stub/libcuda_stub.c, loaded through
 * SPARKINFER_CUDA_DRIVER; no GPU): W communicators of one process play the ranks (create, export,
 * connect through each other's blobs, destroy), and every collective in every wire mode is issued
 * on each rank, through the direct calls and through a plan with sk_run. The stub counts what
 * reaches the driver: per call, exactly the copies and kernel launches of that rank's program
 * (ring_plan.c), and no call fails. Then the deployed shape: one forked process per rank meeting
 * through the Unix-socket rendezvous (sk_comm_connect_unix). What the launches compute is the GPU suite's
 * (tests/gpu/test_comm_gpu.c). The kernels compile for the stub's sm_90a into the build's
 * stub cache on the first run. */
#include "comm/comm_host.h"
#include "comm/ring_plan.h"
#include "sparkinfer/comm.h"
#include "stub/stub.h"

#include <sys/wait.h>
#include <unistd.h>

typedef struct world {
  int size;
  sk_comm *c[SK_COMM_MAX_RANKS];
} world;

static void open_world(world *w, int size) {
  w->size = size;
  unsigned char blobs[SK_COMM_MAX_RANKS][SK_COMM_HANDLE_BYTES];
  const void *ptrs[SK_COMM_MAX_RANKS];
  for (int r = 0; r < size; r++) {
    sk_comm_config cfg = SK_COMM_CONFIG_INIT;
    cfg.rank = r;
    cfg.world_size = size;
    cfg.max_bytes = (size_t)1 << 20;
    cr_assert_eq(sk_comm_create(&cfg, &w->c[r]), SK_OK, "rank %d: %s", r, sk_last_error_message());
    cr_assert_eq(sk_comm_export(w->c[r], blobs[r], sizeof blobs[r], NULL), SK_OK);
    ptrs[r] = blobs[r];
  }
  for (int r = 0; r < size; r++)
    cr_assert_eq(sk_comm_connect(w->c[r], ptrs, (size_t)size, SK_COMM_HANDLE_BYTES), SK_OK, "rank %d: %s", r,
                 sk_last_error_message());
}

static void close_world(world *w) {
  const unsigned long long closes = stub_calls("cuIpcCloseMemHandle"), frees = stub_calls("cuMemFree");
  for (int r = 0; r < w->size; r++) sk_comm_destroy(w->c[r]);
  cr_expect_eq(stub_calls("cuIpcCloseMemHandle") - closes, (unsigned long long)(w->size * (w->size - 1)), "every peer mapping closed");
  cr_expect_eq(stub_calls("cuMemFree") - frees, (unsigned long long)w->size, "every buffer freed");
}

/* The driver calls of one call: copies and launches. */
typedef struct issued {
  unsigned long long copies, launches;
} issued;
static issued snapshot(void) { return (issued){stub_calls("cuMemcpyAsync"), stub_calls("cuLaunchKernelEx") + stub_calls("cuLaunchKernel")}; }

static void expect_program(const char *what, int rank, const sk_ring_plan *p, issued before) {
  sk_ring_op ops[SK_RING_MAX_OPS];
  const int n = sk_ring_program(p, rank, ops);
  unsigned long long copies = 0;
  for (int i = 0; i < n; i++) copies += ops[i].kind == SK_RING_COPY;
  const issued after = snapshot();
  cr_expect_eq(after.copies - before.copies, copies, "%s rank %d: %llu copies, the program has %llu", what, rank,
               after.copies - before.copies, copies);
  cr_expect_eq(after.launches - before.launches, (unsigned long long)n - copies, "%s rank %d: %llu launches, the program has %llu",
               what, rank, after.launches - before.launches, (unsigned long long)n - copies);
}

Test(comm_stub, world_life_cycle_and_one_shot, .init = stub_setup, .timeout = 600) {
  for (int size = 2; size <= 8; size += 2) {
    world w;
    open_world(&w, size);
    int64_t n[1] = {4096}, mh[2] = {4, 1024}, h[1] = {1024};
    DLTensor in = tu_fake_device_tensor(0x7000000000, TU_BF16, 1, n), out = tu_fake_device_tensor(0x7000100000, TU_BF16, 1, n);
    DLTensor x = tu_fake_device_tensor(0x7000200000, TU_BF16, 2, mh), res = tu_fake_device_tensor(0x7000300000, TU_BF16, 2, mh),
             wt = tu_fake_device_tensor(0x7000400000, TU_BF16, 1, h), o = tu_fake_device_tensor(0x7000500000, TU_BF16, 2, mh);
    for (int r = 0; r < size; r++) {
      issued b = snapshot();
      cr_expect_eq(sk_comm_allreduce(w.c[r], &in, &out, NULL), SK_OK, "%s", sk_last_error_message());
      cr_expect_eq(sk_comm_allreduce_add_rmsnorm(w.c[r], &x, &res, &wt, 1e-6f, &o, NULL), SK_OK, "%s", sk_last_error_message());
      const issued a = snapshot();
      cr_expect_eq(a.launches - b.launches, 2, "one launch per one-shot call");
      cr_expect_eq(a.copies, b.copies);
      cr_expect_eq(sk_comm_poll_error(w.c[r], NULL), SK_OK, "%s", sk_last_error_message());
    }
    close_world(&w);
  }
}

Test(comm_stub, ring_programs_every_mode, .init = stub_setup, .timeout = 600) {
  for (int size = 2; size <= 8; size++) {
    world w;
    open_world(&w, size);
    const int64_t sizes[] = {8 * size, 128 * size * 3, 128 * size * 64 + 8 * size}; /* the last: coded modes fall back */
    for (int mode = 0; mode < SK_COMM_MODES; mode++) {
      const sk_comm_codec codec = mode ? (sk_comm_codec)(1 + (mode - 1) / 3) : SK_COMM_CODEC_BF16;
      const sk_comm_topology topo = mode ? (sk_comm_topology)((mode - 1) % 3) : SK_COMM_TOPO_AG;
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n[1] = {sizes[k]};
        DLTensor in = tu_fake_device_tensor(0x7000000000, TU_BF16, 1, n),
                 out = tu_fake_device_tensor(k == 1 ? 0x7000000000 : 0x7100000000, TU_BF16, 1, n);
        sk_ring_plan plan;
        cr_assert_eq(sk_ring_plan_make(size, (size_t)1 << 20, n[0], codec, topo, &plan), SK_OK, "%s", sk_last_error_message());
        char what[96];
        snprintf(what, sizeof what, "world %d mode %d n %lld", size, mode, (long long)n[0]);
        for (int r = 0; r < size; r++) {
          const issued b = snapshot();
          cr_expect_eq(sk_comm_allreduce_ring(w.c[r], &in, &out, codec, topo, NULL), SK_OK, "%s rank %d: %s", what, r,
                       sk_last_error_message());
          expect_program(what, r, &plan, b);
        }
      }
    }
    close_world(&w);
  }
}

/* The op API on a communicator: a plan per wire mode, bound once, run on every rank. */
Test(comm_stub, plans_on_a_communicator_run, .init = stub_setup, .timeout = 600) {
  world w;
  open_world(&w, 4);
  int64_t n[1] = {128 * 4 * 2};
  DLTensor in = tu_fake_device_tensor(0x7000000000, TU_BF16, 1, n), out = tu_fake_device_tensor(0x7100000000, TU_BF16, 1, n);
  const DLTensor *t[] = {&in, &out};
  for (int r = 0; r < 4; r++) {
    sk_comm_caps caps = SK_COMM_CAPS_INIT;
    caps.comm = w.c[r];
    caps.codec = SK_COMM_CODEC_MXFP8;
    caps.topology = SK_COMM_TOPO_A2A;
    sk_plan *p;
    sk_binding *b;
    cr_assert_eq(sk_comm_plan_create(&caps, &p), SK_OK, "%s", sk_last_error_message());
    cr_assert_eq(sk_binding_create(p, "ring", &b), SK_OK);
    cr_assert_eq(sk_bind(b, t, 2, NULL, 0), SK_OK, "%s", sk_last_error_message());
    sk_ring_plan plan;
    cr_assert_eq(sk_ring_plan_make(4, (size_t)1 << 20, n[0], caps.codec, caps.topology, &plan), SK_OK);
    for (int rep = 0; rep < 3; rep++) {
      const issued before = snapshot();
      cr_expect_eq(sk_run(b, NULL), SK_OK, "%s", sk_last_error_message());
      expect_program("plan ring mxfp8/a2a", r, &plan, before);
    }
    sk_binding_destroy(b);
    sk_plan_destroy(p);
  }
  close_world(&w);
}

/* One process per rank, as deployed: each forks after the stub is set up, creates its
 * communicator, connects through the built-in Unix-socket rendezvous, runs a one-shot and a ring
 * all-reduce and destroys it. Every rank must exit 0 within the bound. */
static int rank_process(const char *path, int rank, int world) {
  sk_comm_config cfg = SK_COMM_CONFIG_INIT;
  cfg.rank = rank;
  cfg.world_size = world;
  cfg.max_bytes = (size_t)1 << 20;
  cfg.timeout_s = 20;
  sk_comm *c = NULL;
  if (sk_comm_create(&cfg, &c) != SK_OK || sk_comm_connect_unix(c, path) != SK_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, sk_last_error_message());
    return 1;
  }
  int64_t n[1] = {128 * world * 4};
  DLTensor in = tu_fake_device_tensor(0x7000000000, TU_BF16, 1, n), out = tu_fake_device_tensor(0x7100000000, TU_BF16, 1, n);
  int bad = sk_comm_allreduce(c, &in, &out, NULL) != SK_OK ||
            sk_comm_allreduce_ring(c, &in, &out, SK_COMM_CODEC_INT8, SK_COMM_TOPO_A2A, NULL) != SK_OK ||
            sk_comm_poll_error(c, NULL) != SK_OK;
  if (bad) fprintf(stderr, "rank %d: %s\n", rank, sk_last_error_message());
  sk_comm_destroy(c);
  return bad;
}

Test(comm_stub, processes_meet_through_the_socket, .init = stub_setup, .timeout = 120) {
  for (int world = 2; world <= 8; world += 3) {
    char path[108];
    snprintf(path, sizeof path, "/tmp/sk-test-comm-stub-%d-%d.sock", world, (int)getpid());
    pid_t pids[SK_COMM_MAX_RANKS];
    for (int r = 0; r < world; r++) {
      pids[r] = fork();
      cr_assert_geq(pids[r], 0);
      if (pids[r] == 0) _exit(rank_process(path, r, world));
    }
    for (int r = 0; r < world; r++) {
      int st = 0;
      cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
      cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "world %d: rank %d exited with status %d", world, r, st);
    }
  }
}
