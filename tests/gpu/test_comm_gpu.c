/* comm.pcie on one GPU with 2 and 4 processes (each rank a forked child that initialises CUDA
 * itself; the parent never touches CUDA): the one-shot all-reduce and the fused all-reduce +
 * residual add + RMSNorm against the CPU (bitwise against the fp32 rank-order sum, and within
 * bf16 rounding of a double-precision sum), CUDA graph capture and replay with new inputs and no
 * host patching, and a killed peer reported as SK_ERR_TIMEOUT in bounded time. Written without a
 * GPU: never run yet (ops/comm/comm.md says what ran where). */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <string.h>

#include "base.h"
#include "comm/codec.cuh"
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

static DLTensor view(void *p, int64_t *shape, int ndim) {
  DLTensor t = {.data = p, .device = {kDLCUDA, 0}, .ndim = ndim, .dtype = {kDLBfloat, 16, 1}, .shape = shape};
  return t;
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
      waitpid(pids[r], &st, 0);
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
      for (int64_t i = 0; i < n; i++) h[i] = input_bf16(rank, i, salt);
      void *din, *dout;
      CUDA_CHILD(cudaMalloc(&din, (size_t)n * 2));
      CUDA_CHILD(cudaMalloc(&dout, (size_t)n * 2));
      CUDA_CHILD(cudaMemcpy(din, h, (size_t)n * 2, cudaMemcpyHostToDevice));
      CUDA_CHILD(cudaMemset(dout, 0xFF, (size_t)n * 2));
      CUDA_CHILD(cudaDeviceSynchronize());
      DLTensor in = view(din, shape, 1), out = view(round == 2 ? din : dout, shape, 1); /* round 2: in place */
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
  DLTensor t = view(d, big, 1);
  if (sk_comm_allreduce(c, &t, &t, s) != SK_ERR_INVALID_ARGUMENT) return 2;
  int64_t small[1] = {8};
  t = view((char *)d + 2, small, 1);
  if (sk_comm_allreduce(c, &t, &t, s) != SK_ERR_INVALID_ARGUMENT) return 3;
  t = view(d, small, 1);
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
  DLTensor tx = view(dx, shape, 2), tr = view(dr, shape, 2), tw = view(dw, wshape, 1), to = view(dout, shape, 2);
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
  DLTensor in = view(din, shape, 1), out = view(dout, shape, 1);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHILD(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CHILD_OK(sk_comm_allreduce(c, &in, &out, s));
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
  cudaFree(din), cudaFree(dout);
  return bad;
}

/* The last rank leaves after connecting; the others' collective must time out and say whom it
 * waited for, within about the timeout. */
static int dead_peer(sk_comm *c, int rank, int world, cudaStream_t s) {
  if (rank == world - 1) return 0; /* child() destroys and exits: this rank never arrives */
  int64_t shape[1] = {1024};
  void *d;
  CUDA_CHILD(cudaMalloc(&d, 2048));
  CUDA_CHILD(cudaMemset(d, 0, 2048));
  DLTensor t = view(d, shape, 1);
  const double t0 = sk_now_seconds();
  CHILD_OK(sk_comm_allreduce(c, &t, &t, s));
  sk_status st = sk_comm_poll_error(c, s);
  const double took = sk_now_seconds() - t0;
  char want[32];
  snprintf(want, sizeof want, "for rank %d", world - 1);
  if (st != SK_ERR_TIMEOUT || !strstr(sk_last_error_message(), want) || took > 10) {
    fprintf(stderr, "rank %d: %s after %.1f s: %s\n", rank, sk_status_string(st), took, sk_last_error_message());
    return 1;
  }
  if (sk_comm_allreduce(c, &t, &t, s) != SK_ERR_TIMEOUT) return 2; /* poisoned from now on */
  cudaFree(d);
  return 0;
}

Test(comm_gpu, allreduce_2_and_4_ranks, .timeout = 300) {
  run_world(2, 20, allreduce_sizes, "ar");
  run_world(4, 20, allreduce_sizes, "ar");
}
Test(comm_gpu, add_rmsnorm_2_and_4_ranks, .timeout = 300) {
  run_world(2, 20, fused_rmsnorm, "norm");
  run_world(4, 20, fused_rmsnorm, "norm");
}
Test(comm_gpu, graph_capture_and_replay, .timeout = 300) {
  run_world(2, 20, graph_replay, "graph");
  run_world(4, 20, graph_replay, "graph");
}
Test(comm_gpu, killed_peer_times_out, .timeout = 300) {
  run_world(2, 2.0, dead_peer, "dead");
  run_world(4, 2.0, dead_peer, "dead");
}
