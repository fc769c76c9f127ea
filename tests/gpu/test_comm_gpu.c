/* comm.pcie on one GPU with 2 and 4 processes (each rank a forked child that initialises CUDA
 * itself; the parent never touches CUDA): the one-shot all-reduce and the fused all-reduce +
 * residual add + RMSNorm against the CPU (bitwise against the fp32 rank-order sum, and within
 * bf16 rounding of a double-precision sum), CUDA graph capture and replay with new inputs and no
 * host patching, and a killed peer reported as SK_ERR_TIMEOUT in bounded time; the copy-engine
 * ring all-reduce in its ten wire modes bit for bit against the CPU simulation of the whole
 * collective (ops/comm/ref_ring.c), in graphs, interleaved with the one-shot, and with a dead peer. Written without a
 * GPU: never run yet (ops/comm/comm.md says what ran where). */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <string.h>

#include "base.h"
#include "comm/codec.cuh"
#include "comm/ring_plan.h"
#include "sparkinfer/comm.h"
#include "testutil.h"

/* Child helpers return nonzero (and print why) instead of asserting: they run outside Criterion's
 * test process. */
#define CHILD_OK(call)                                                                                   \
  do {                                                                                                   \
    sk_status s_ = (call);                                                                               \
    if (s_ != SK_OK) {                                                                                   \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, sk_status_string(s_), sk_last_error_message()); \
      return 10;                                                                                         \
    }                                                                                                    \
  } while (0)
#define CUDA_CHILD(call)                                                                                 \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_));                         \
      return 11;                                                                                         \
    }                                                                                                    \
  } while (0)

static uint16_t input_bf16(int rank, int64_t i, int salt) {
  uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 48) ^ ((uint64_t)salt << 56);
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  double v = ((double)(z >> 11) * 0x1p-53 * 2 - 1) * (1 + (int)(z & 7));
  return sk_codec_bf16_rn((float)v);
}

/* out[i] must equal bf16(fp32 rank-order sum), and lie within bf16 rounding of the double sum. */
static int check_sum(int rank, int world, const uint16_t *out, int64_t n, int salt) {
  for (int64_t i = 0; i < n; i++) {
    float acc = sk_codec_bf16_to_f32(input_bf16(0, i, salt));
    double exact = acc;
    for (int r = 1; r < world; r++) {
      float v = sk_codec_bf16_to_f32(input_bf16(r, i, salt));
      acc = acc + v;
      exact += v;
    }
    const float got = sk_codec_bf16_to_f32(out[i]);
    if (out[i] != sk_codec_bf16_rn(acc) || fabs(got - exact) > fabs(exact) * 0x1p-7 + 1e-6 * world) {
      fprintf(stderr, "rank %d: element %lld: got %a, fp32 sum %a, exact %a\n", rank, (long long)i, got, acc, exact);
      return 1;
    }
  }
  return 0;
}

/* Rank `rank`'s n inputs of `salt` into h (the caller's n values) and onto the device (*din),
 * and a poisoned output (*dout, 0xFF bytes): both cudaMalloc'd. 0, or CUDA_CHILD's status. */
static int stage_io(int rank, int64_t n, int salt, uint16_t *h, void **din, void **dout) {
  for (int64_t i = 0; i < n; i++) h[i] = input_bf16(rank, i, salt);
  CUDA_CHILD(cudaMalloc(din, (size_t)n * 2));
  CUDA_CHILD(cudaMalloc(dout, (size_t)n * 2));
  CUDA_CHILD(cudaMemcpy(*din, h, (size_t)n * 2, cudaMemcpyHostToDevice));
  CUDA_CHILD(cudaMemset(*dout, 0xFF, (size_t)n * 2));
  CUDA_CHILD(cudaDeviceSynchronize());
  return 0;
}

typedef int (*rank_body)(sk_comm *c, int rank, int world, cudaStream_t s);

static int child(const char *path, int rank, int world, double timeout, rank_body body) {
  /* the kernels prebuilt by tools/gpu-run.sh (sk-warm over the manifests), as gpu_test_setup does */
  if (getenv("SK_GPU_TEST_CACHE")) setenv("SPARKINFER_CACHE_DIR", getenv("SK_GPU_TEST_CACHE"), 1);
  CUDA_CHILD(cudaSetDevice(0));
  CUDA_CHILD(cudaFree(0));
  sk_comm_config cfg = SK_COMM_CONFIG_INIT;
  cfg.rank = rank;
  cfg.world_size = world;
  cfg.device = 0;
  cfg.max_bytes = (size_t)4 << 20;
  cfg.timeout_s = timeout;
  sk_comm *c = NULL;
  CHILD_OK(sk_comm_create(&cfg, &c));
  CHILD_OK(sk_comm_connect_unix(c, path));
  cudaStream_t s;
  CUDA_CHILD(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int rc = body(c, rank, world, s);
  cudaStreamSynchronize(s);
  sk_comm_destroy(c);
  return rc;
}

static void run_world(int world, double timeout, rank_body body, const char *tag) {
  char path[108];
  snprintf(path, sizeof path, "/tmp/sk-test-comm-%s-%d-%d.sock", tag, world, (int)getpid());
  pid_t pids[8];
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    cr_assert_geq(pids[r], 0);
    if (pids[r] == 0) _exit(child(path, r, world, timeout, body));
  }
  const double deadline = sk_now_seconds() + 120;
  for (int r = 0; r < world; r++) {
    int st = 0;
    pid_t w;
    while ((w = waitpid(pids[r], &st, WNOHANG)) == 0 && sk_now_seconds() < deadline) usleep(5000);
    if (w == 0) {
      for (int k = r; k < world; k++) kill(pids[k], SIGKILL);
      for (int k = r; k < world; k++) waitpid(pids[k], &st, 0); /* reap them all: no zombies */
      cr_assert_fail("%s world %d: rank %d hung", tag, world, r);
    }
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s world %d: rank %d exited with status %d", tag, world, r, st);
  }
}

/* ---- bodies --------------------------------------------------------------------------------- */

static int allreduce_sizes(sk_comm *c, int rank, int world, cudaStream_t s) {
  static const int64_t sizes[] = {8, 64, 4096, 65536 + 8, (int64_t)1 << 20, (int64_t)2 << 20};
  for (int round = 0; round < 3; round++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      int64_t n = sizes[k], shape[1] = {n};
      const int salt = (int)(round * 16 + k);
      uint16_t *h = malloc((size_t)n * 2);
      void *din, *dout;
      const int st = stage_io(rank, n, salt, h, &din, &dout);
      if (st) return st;
      DLTensor in = tu_device_tensor(din, TU_BF16, 1, shape),
               out = tu_device_tensor(round == 2 ? din : dout, TU_BF16, 1, shape); /* round 2: in place */
      CHILD_OK(sk_comm_allreduce(c, &in, &out, s));
      CHILD_OK(sk_comm_poll_error(c, s));
      CUDA_CHILD(cudaMemcpy(h, round == 2 ? din : dout, (size_t)n * 2, cudaMemcpyDeviceToHost));
      int bad = check_sum(rank, world, h, n, salt);
      free(h);
      cudaFree(din);
      cudaFree(dout);
      if (bad) return 1;
    }
  /* refusals: too large, misaligned, wrong dtype */
  int64_t big[1] = {(int64_t)4 << 20};
  void *d;
  CUDA_CHILD(cudaMalloc(&d, (size_t)8 << 20));
  DLTensor t = tu_device_tensor(d, TU_BF16, 1, big);
  if (sk_comm_allreduce(c, &t, &t, s) != SK_ERR_INVALID_ARGUMENT) return 2;
  int64_t small[1] = {8};
  t = tu_device_tensor((char *)d + 2, TU_BF16, 1, small);
  if (sk_comm_allreduce(c, &t, &t, s) != SK_ERR_INVALID_ARGUMENT) return 3;
  t = tu_device_tensor(d, TU_BF16, 1, small);
  t.dtype.code = kDLFloat;
  if (sk_comm_allreduce(c, &t, &t, s) != SK_ERR_INVALID_ARGUMENT) return 4;
  cudaFree(d);
  return 0;
}

static int fused_rmsnorm(sk_comm *c, int rank, int world, cudaStream_t s) {
  const int64_t m = 5, h = 4096;
  int64_t shape[2] = {m, h}, wshape[1] = {h};
  const size_t n = (size_t)(m * h);
  uint16_t *x = malloc(n * 2), *res = malloc(n * 2), *w = malloc((size_t)h * 2), *out = malloc(n * 2), *res_out = malloc(n * 2);
  for (size_t i = 0; i < n; i++) x[i] = input_bf16(rank, (int64_t)i, 1), res[i] = input_bf16(99, (int64_t)i, 2);
  for (int64_t i = 0; i < h; i++) w[i] = input_bf16(98, i, 3);
  void *dx, *dr, *dw, *dout;
  CUDA_CHILD(cudaMalloc(&dx, n * 2));
  CUDA_CHILD(cudaMalloc(&dr, n * 2));
  CUDA_CHILD(cudaMalloc(&dw, (size_t)h * 2));
  CUDA_CHILD(cudaMalloc(&dout, n * 2));
  CUDA_CHILD(cudaMemcpy(dx, x, n * 2, cudaMemcpyHostToDevice));
  CUDA_CHILD(cudaMemcpy(dr, res, n * 2, cudaMemcpyHostToDevice));
  CUDA_CHILD(cudaMemcpy(dw, w, (size_t)h * 2, cudaMemcpyHostToDevice));
  DLTensor tx = tu_device_tensor(dx, TU_BF16, 2, shape), tr = tu_device_tensor(dr, TU_BF16, 2, shape),
           tw = tu_device_tensor(dw, TU_BF16, 1, wshape), to = tu_device_tensor(dout, TU_BF16, 2, shape);
  CHILD_OK(sk_comm_allreduce_add_rmsnorm(c, &tx, &tr, &tw, 1e-6f, &to, s));
  CHILD_OK(sk_comm_poll_error(c, s));
  CUDA_CHILD(cudaMemcpy(out, dout, n * 2, cudaMemcpyDeviceToHost));
  CUDA_CHILD(cudaMemcpy(res_out, dr, n * 2, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int64_t r = 0; r < m && !bad; r++) {
    double ss = 0;
    float y[4096];
    for (int64_t k = 0; k < h; k++) {
      const size_t i = (size_t)(r * h + k);
      float acc = sk_codec_bf16_to_f32(input_bf16(0, (int64_t)i, 1));
      for (int q = 1; q < world; q++) acc = acc + sk_codec_bf16_to_f32(input_bf16(q, (int64_t)i, 1));
      acc = acc + sk_codec_bf16_to_f32(res[i]);
      const uint16_t yb = sk_codec_bf16_rn(acc);
      if (res_out[i] != yb) {
        fprintf(stderr, "rank %d: residual [%lld, %lld]: %04x, want %04x\n", rank, (long long)r, (long long)k, res_out[i], yb);
        bad = 1;
        break;
      }
      y[k] = sk_codec_bf16_to_f32(yb);
      ss += (double)y[k] * y[k];
    }
    const double inv = 1.0 / sqrt(ss / (double)h + 1e-6);
    for (int64_t k = 0; k < h && !bad; k++) {
      const double want = y[k] * inv * sk_codec_bf16_to_f32(w[k]);
      const double got = sk_codec_bf16_to_f32(out[r * h + k]);
      if (fabs(got - want) > fabs(want) * 0x1p-7 + 1e-3) {
        fprintf(stderr, "rank %d: out [%lld, %lld]: %g, want %g\n", rank, (long long)r, (long long)k, got, want);
        bad = 1;
      }
    }
  }
  free(x), free(res), free(w), free(out), free(res_out);
  cudaFree(dx), cudaFree(dr), cudaFree(dw), cudaFree(dout);
  return bad;
}

/* Capture one all-reduce, replay it with new inputs written between replays: no host patching. */
static int graph_replay(sk_comm *c, int rank, int world, cudaStream_t s) {
  const int64_t n = 8192;
  int64_t shape[1] = {n};
  void *din, *dout;
  CUDA_CHILD(cudaMalloc(&din, (size_t)n * 2));
  CUDA_CHILD(cudaMalloc(&dout, (size_t)n * 2));
  DLTensor in = tu_device_tensor(din, TU_BF16, 1, shape), out = tu_device_tensor(dout, TU_BF16, 1, shape);
  /* the captured call through the op API (a plan on this communicator, bound once), the eager
   * one below through the direct call */
  sk_comm_caps caps = SK_COMM_CAPS_INIT;
  caps.comm = c;
  sk_plan *plan = NULL;
  sk_binding *b = NULL;
  CHILD_OK(sk_comm_plan_create(&caps, &plan));
  CHILD_OK(sk_binding_create(plan, "allreduce", &b));
  const DLTensor *tensors[] = {&in, &out};
  CHILD_OK(sk_bind(b, tensors, 2, NULL, 0));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHILD(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CHILD_OK(sk_run(b, s));
  CUDA_CHILD(cudaStreamEndCapture(s, &g));
  CUDA_CHILD(cudaGraphInstantiate(&ge, g, 0));
  uint16_t *h = malloc((size_t)n * 2);
  int bad = 0;
  for (int rep = 0; rep < 6 && !bad; rep++) {
    for (int64_t i = 0; i < n; i++) h[i] = input_bf16(rank, i, 40 + rep);
    CUDA_CHILD(cudaMemcpyAsync(din, h, (size_t)n * 2, cudaMemcpyHostToDevice, s));
    CUDA_CHILD(cudaGraphLaunch(ge, s));
    CHILD_OK(sk_comm_poll_error(c, s));
    CUDA_CHILD(cudaMemcpy(h, dout, (size_t)n * 2, cudaMemcpyDeviceToHost));
    bad = check_sum(rank, world, h, n, 40 + rep);
    /* interleave an eager call: graph and eager calls share the sequence numbers */
    if (!bad && rep == 2) {
      for (int64_t i = 0; i < n; i++) h[i] = input_bf16(rank, i, 50);
      CUDA_CHILD(cudaMemcpyAsync(din, h, (size_t)n * 2, cudaMemcpyHostToDevice, s));
      CHILD_OK(sk_comm_allreduce(c, &in, &out, s));
      CUDA_CHILD(cudaMemcpy(h, dout, (size_t)n * 2, cudaMemcpyDeviceToHost));
      bad = check_sum(rank, world, h, n, 50);
    }
  }
  free(h);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  sk_binding_destroy(b);
  sk_plan_destroy(plan);
  cudaFree(din), cudaFree(dout);
  return bad;
}

/* The last rank leaves after connecting; the others' collective (the one-shot, or the ring in
 * E4M3 / ring) must time out within about the timeout and say whom it waited for; after that the
 * communicator refuses every call. */
static int peer_never_arrives(sk_comm *c, int rank, int world, cudaStream_t s, int ring) {
  if (rank == world - 1) return 0; /* child() destroys and exits: this rank never arrives */
  int64_t shape[1] = {(int64_t)world * 1024};
  void *d;
  CUDA_CHILD(cudaMalloc(&d, (size_t)world * 2048));
  CUDA_CHILD(cudaMemset(d, 0, (size_t)world * 2048)); /* what it sums does not matter here */
  DLTensor t = tu_device_tensor(d, TU_BF16, 1, shape);
  const double t0 = sk_now_seconds();
  CHILD_OK(ring ? sk_comm_allreduce_ring(c, &t, &t, SK_COMM_CODEC_E4M3, SK_COMM_TOPO_RING, s) : sk_comm_allreduce(c, &t, &t, s));
  sk_status st = sk_comm_poll_error(c, s);
  const double took = sk_now_seconds() - t0;
  char want[32];
  snprintf(want, sizeof want, "for rank %d", world - 1);
  if (st != SK_ERR_TIMEOUT || !strstr(sk_last_error_message(), want) || took > 10) {
    fprintf(stderr, "rank %d (%s): %s after %.1f s: %s\n", rank, ring ? "ring" : "one-shot", sk_status_string(st), took,
            sk_last_error_message());
    return 1;
  }
  if (sk_comm_allreduce(c, &t, &t, s) != SK_ERR_TIMEOUT) return 2; /* poisoned from now on */
  cudaFree(d);
  return 0;
}
static int dead_peer(sk_comm *c, int rank, int world, cudaStream_t s) { return peer_never_arrives(c, rank, world, s, 0); }
static int ring_dead_peer(sk_comm *c, int rank, int world, cudaStream_t s) { return peer_never_arrives(c, rank, world, s, 1); }

/* ---- ring all-reduce: device results against the CPU simulation (ops/comm/ref_ring.c) ------ */

/* What every rank must end with: the simulation of one collective over every rank's inputs. */
static uint16_t *ring_expected(const sk_ring_plan *p, int rank, int salt) {
  const int w = p->world;
  uint16_t *ins[8] = {0}, *outs[8] = {0};
  for (int r = 0; r < w; r++) {
    ins[r] = malloc((size_t)p->n * 2), outs[r] = malloc((size_t)p->n * 2);
    for (int64_t i = 0; i < p->n; i++) ins[r][i] = input_bf16(r, i, salt);
  }
  const sk_ring_plan *plans[1] = {p};
  if (sk_ring_simulate(plans, 1, (const uint16_t *const *)ins, outs, 1) != SK_OK) {
    fprintf(stderr, "rank %d: simulation: %s\n", rank, sk_last_error_message());
    exit(20);
  }
  uint16_t *mine = outs[rank];
  for (int r = 0; r < w; r++) {
    free(ins[r]);
    if (r != rank) free(outs[r]);
  }
  return mine;
}

static int ring_compare(int rank, const char *what, const uint16_t *got, const uint16_t *want, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      fprintf(stderr, "rank %d: %s: value %lld is %04x, the simulation %04x\n", rank, what, (long long)i, got[i], want[i]);
      return 1;
    }
  return 0;
}

/* One ring call of n values in a mode (in place when asked) checked bit for bit. */
static int ring_once(sk_comm *c, int rank, int world, cudaStream_t s, int64_t n, int codec, int topo, int in_place, int salt) {
  int64_t shape[1] = {n};
  sk_ring_plan p;
  CHILD_OK(sk_ring_plan_make(world, (size_t)4 << 20, n, (sk_comm_codec)codec, (sk_comm_topology)topo, &p));
  uint16_t *h = malloc((size_t)n * 2), *want = ring_expected(&p, rank, salt);
  void *din, *dout;
  const int st = stage_io(rank, n, salt, h, &din, &dout);
  if (st) return st;
  DLTensor in = tu_device_tensor(din, TU_BF16, 1, shape),
           out = tu_device_tensor(in_place ? din : dout, TU_BF16, 1, shape);
  CHILD_OK(sk_comm_allreduce_ring(c, &in, &out, (sk_comm_codec)codec, (sk_comm_topology)topo, s));
  CHILD_OK(sk_comm_poll_error(c, s));
  CUDA_CHILD(cudaMemcpy(h, in_place ? din : dout, (size_t)n * 2, cudaMemcpyDeviceToHost));
  char what[64];
  snprintf(what, sizeof what, "ring codec %d topology %d n %lld", codec, topo, (long long)n);
  const int bad = ring_compare(rank, what, h, want, n);
  free(h), free(want);
  cudaFree(din), cudaFree(dout);
  return bad;
}

/* The ten wire modes (BF16; E4M3 / INT8 / MXFP8 x ag / ring / a2a), sizes from one block per
 * shard to the capacity, in place, the BF16 fallback (shard of 8 * 17 values) and refusals. */
static int ring_modes(sk_comm *c, int rank, int world, cudaStream_t s) {
  const int64_t sizes[] = {(int64_t)world * 128, (int64_t)world * 128 * 37, ((int64_t)2 << 20) / (128 * world) * (128 * world)};
  int salt = 60;
  for (int codec = 0; codec < 4; codec++)
    for (int topo = 0; topo < (codec ? 3 : 1); topo++)
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        if (ring_once(c, rank, world, s, sizes[k], codec, topo, k == 1, salt++)) return 1;
  if (ring_once(c, rank, world, s, (int64_t)world * 8 * 17, SK_COMM_CODEC_MXFP8, SK_COMM_TOPO_A2A, 0, salt++)) return 2;
  /* interleaved with the one-shot all-reduce: separate buffers, flags and sequence numbers */
  if (allreduce_sizes(c, rank, world, s)) return 3;
  if (ring_once(c, rank, world, s, (int64_t)world * 1024, SK_COMM_CODEC_INT8, SK_COMM_TOPO_RING, 0, salt++)) return 4;
  int64_t odd[1] = {(int64_t)world * 8 + 8};
  void *d;
  CUDA_CHILD(cudaMalloc(&d, (size_t)8 << 20));
  DLTensor t = tu_device_tensor(d, TU_BF16, 1, odd);
  if (sk_comm_allreduce_ring(c, &t, &t, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, s) != SK_ERR_INVALID_ARGUMENT) return 5;
  int64_t big[1] = {(int64_t)4 << 20};
  t = tu_device_tensor(d, TU_BF16, 1, big);
  if (sk_comm_allreduce_ring(c, &t, &t, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, s) != SK_ERR_INVALID_ARGUMENT) return 6;
  int64_t ok[1] = {(int64_t)world * 128};
  t = tu_device_tensor(d, TU_BF16, 1, ok);
  if (sk_comm_allreduce_ring(c, &t, &t, (sk_comm_codec)7, SK_COMM_TOPO_AG, s) != SK_ERR_INVALID_ARGUMENT) return 7;
  cudaFree(d);
  return 0;
}

/* Capture one ring call per topology of MXFP8 (and BF16), replay with new inputs: no patching. */
static int ring_graph(sk_comm *c, int rank, int world, cudaStream_t s) {
  const int64_t n = (int64_t)world * 128 * 16;
  int64_t shape[1] = {n};
  void *din, *dout;
  CUDA_CHILD(cudaMalloc(&din, (size_t)n * 2));
  CUDA_CHILD(cudaMalloc(&dout, (size_t)n * 2));
  DLTensor in = tu_device_tensor(din, TU_BF16, 1, shape), out = tu_device_tensor(dout, TU_BF16, 1, shape);
  uint16_t *h = malloc((size_t)n * 2);
  int bad = 0;
  for (int mode = 0; mode < 4 && !bad; mode++) {
    const int codec = mode ? SK_COMM_CODEC_MXFP8 : SK_COMM_CODEC_BF16, topo = mode ? mode - 1 : 0;
    sk_ring_plan p;
    CHILD_OK(sk_ring_plan_make(world, (size_t)4 << 20, n, (sk_comm_codec)codec, (sk_comm_topology)topo, &p));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_CHILD(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHILD_OK(sk_comm_allreduce_ring(c, &in, &out, (sk_comm_codec)codec, (sk_comm_topology)topo, s));
    CUDA_CHILD(cudaStreamEndCapture(s, &g));
    CUDA_CHILD(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 4 && !bad; rep++) {
      const int salt = 90 + mode * 8 + rep;
      for (int64_t i = 0; i < n; i++) h[i] = input_bf16(rank, i, salt);
      CUDA_CHILD(cudaMemcpyAsync(din, h, (size_t)n * 2, cudaMemcpyHostToDevice, s));
      CUDA_CHILD(cudaGraphLaunch(ge, s));
      CHILD_OK(sk_comm_poll_error(c, s));
      CUDA_CHILD(cudaMemcpy(h, dout, (size_t)n * 2, cudaMemcpyDeviceToHost));
      uint16_t *want = ring_expected(&p, rank, salt);
      bad = ring_compare(rank, "ring graph replay", h, want, n);
      free(want);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  free(h);
  cudaFree(din), cudaFree(dout);
  return bad;
}

/* Every collective runs with 2 and then 4 processes on GPU 0. */
static void worlds_2_and_4(double timeout, rank_body body, const char *tag) {
  run_world(2, timeout, body, tag);
  run_world(4, timeout, body, tag);
}

Test(comm_gpu, ring_modes_2_and_4_ranks, .timeout = 600) { worlds_2_and_4(20, ring_modes, "ring"); }
Test(comm_gpu, ring_graph_capture_and_replay, .timeout = 300) { worlds_2_and_4(20, ring_graph, "ringgraph"); }
Test(comm_gpu, ring_killed_peer_times_out, .timeout = 300) { worlds_2_and_4(2.0, ring_dead_peer, "ringdead"); }
Test(comm_gpu, allreduce_2_and_4_ranks, .timeout = 300) { worlds_2_and_4(20, allreduce_sizes, "ar"); }
Test(comm_gpu, add_rmsnorm_2_and_4_ranks, .timeout = 300) { worlds_2_and_4(20, fused_rmsnorm, "norm"); }
Test(comm_gpu, graph_capture_and_replay, .timeout = 300) { worlds_2_and_4(20, graph_replay, "graph"); }
Test(comm_gpu, killed_peer_times_out, .timeout = 300) { worlds_2_and_4(2.0, dead_peer, "dead"); }
