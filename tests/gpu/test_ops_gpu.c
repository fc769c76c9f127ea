/* The harness's GPU suite (tests/harness/harness.h), one test per registered op (each in its own
 * process, Criterion's default): every SKH_GPU case of the op's table runs on the device against
 * its double-precision CPU reference, outputs poisoned (0xff: NaN in bf16/fp16/fp32) before the
 * run. Then, as a server would, the process freezes kernel resolution, and every case that allows
 * it is run eagerly, captured in a CUDA graph and replayed twice (outputs poisoned before each):
 * every replay must equal the eager run byte for byte. Inputs are fresh random data from a printed
 * seed (SK_SEED replays one); a case's mismatches are reported as MISMATCH lines and counted, so
 * one run shows every failing case. SK_OPS_FILTER=substring runs only the cases whose name has it. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness/harness.h"
#include "sparkinfer/op.h"

static char *dir;
static void setup(void) { dir = gpu_test_setup("gpuops"); }
static void teardown(void) {
  tu_rmrf(dir);
  free(dir);
}

/* One case on the device: its plan (kept for the graph phase), tensors and device buffers. */
typedef struct dev_case {
  skh_case c;
  sk_plan *plan;
  skh_tensor t[SKH_MAX_TENSORS];
  size_t n;
  void *dptr[SKH_MAX_TENSORS];
  DLTensor dl[SKH_MAX_TENSORS];
  const DLTensor *ptrs[SKH_MAX_TENSORS];
  void *scratch;
  sk_scratch_spec spec;
  sk_binding *binding;
  uint64_t seed;
  int filled;                      /* t[] holds the inputs (kept from the first phase) */
  void *saved[SKH_MAX_TENSORS];    /* INOUT inputs (the run overwrites t->host with outputs) */
} dev_case;

static int failures;
#define CASE_FAIL(...)                                                                           \
  do {                                                                                           \
    fprintf(stderr, "MISMATCH " __VA_ARGS__);                                                    \
    fputc('\n', stderr);                                                                         \
    failures++;                                                                                  \
  } while (0)

static bool wanted(const skh_case *c) {
  const char *f = getenv("SK_OPS_FILTER");
  return !f || !*f || strstr(c->name, f);
}

/* Tensors, inputs (seeded), device buffers, scratch (zeroed once when the plan says so), bind. */
static void prepare(const skh_op *op, dev_case *d) {
  if (!d->filled) {
    char err[512];
    cr_assert_eq(skh_tensors_for(op, &d->c, d->plan, d->t, &d->n, err, sizeof err), 0, "%s %s: %s", op->op, d->c.name, err);
    skref_rng rng;
    skref_rng_seed(&rng, d->seed);
    op->fill(&d->c, d->t, d->n, &rng);
    for (size_t i = 0; i < d->n; i++)
      if (d->t[i].present && d->t[i].role == SK_TENSOR_INOUT) {
        d->saved[i] = malloc(d->t[i].bytes ? d->t[i].bytes : 1);
        cr_assert(d->saved[i]);
        memcpy(d->saved[i], d->t[i].host, d->t[i].bytes);
      }
    d->filled = 1;
  }
  for (size_t i = 0; i < d->n; i++)
    if (d->saved[i]) memcpy(d->t[i].host, d->saved[i], d->t[i].bytes);
  for (size_t i = 0; i < d->n; i++) {
    skh_tensor *t = &d->t[i];
    d->dptr[i] = NULL;
    d->ptrs[i] = NULL;
    if (!t->present) continue;
    d->dptr[i] = t->role == SK_TENSOR_OUT ? gpu_poisoned(t->bytes ? t->bytes : 1) : gpu_upload(t->host, t->bytes ? t->bytes : 1);
    d->dl[i] = (DLTensor){d->dptr[i], {kDLCUDA, 0}, t->ndim, t->dtype, t->shape, t->strided ? t->strides : NULL, 0};
    d->ptrs[i] = &d->dl[i];
  }
  SK_OK_OR_FAIL(sk_plan_scratch_spec(d->plan, &d->spec));
  d->scratch = d->spec.bytes ? (d->spec.zero_once ? gpu_zeroed(d->spec.bytes) : gpu_poisoned(d->spec.bytes)) : NULL;
  SK_OK_OR_FAIL(sk_binding_create(d->plan, d->c.entry, &d->binding));
  const sk_status s = sk_bind(d->binding, d->ptrs, d->n, d->scratch, d->spec.bytes);
  cr_assert_eq(s, SK_OK, "%s %s: bind: %s", op->op, d->c.name, sk_last_error_message());
}

/* Poison the outputs (INOUT tensors get their inputs back). */
static void reset_outputs(dev_case *d, cudaStream_t s) {
  for (size_t i = 0; i < d->n; i++) {
    const skh_tensor *t = &d->t[i];
    if (!t->present || t->role == SK_TENSOR_IN) continue;
    if (t->role == SK_TENSOR_OUT) CUDA_OK(cudaMemsetAsync(d->dptr[i], 0xff, t->bytes, s));
    else CUDA_OK(cudaMemcpyAsync(d->dptr[i], t->host, t->bytes, cudaMemcpyHostToDevice, s));
  }
  CUDA_OK(cudaStreamSynchronize(s));
}

/* Copy every output back into `into[i]` (malloc'd by the caller, t->bytes each). */
static void read_outputs(dev_case *d, void **into) {
  for (size_t i = 0; i < d->n; i++) {
    const skh_tensor *t = &d->t[i];
    if (!t->present || t->role == SK_TENSOR_IN) continue;
    CUDA_OK(cudaMemcpy(into[i], d->dptr[i], t->bytes, cudaMemcpyDeviceToHost));
  }
}

/* Device buffers and the binding go; the host inputs stay for the graph phase (keep_inputs). */
static void release(dev_case *d, int keep_inputs) {
  for (size_t i = 0; i < d->n; i++) {
    if (d->dptr[i]) CUDA_OK(cudaFree(d->dptr[i]));
    d->dptr[i] = NULL;
  }
  if (d->scratch) CUDA_OK(cudaFree(d->scratch));
  sk_binding_destroy(d->binding);
  d->binding = NULL;
  d->scratch = NULL;
  if (keep_inputs) return;
  skh_tensors_free(d->t, d->n);
  for (size_t i = 0; i < d->n; i++) {
    free(d->saved[i]);
    d->saved[i] = NULL;
  }
  d->n = 0;
  d->filled = 0;
}

/* Phase 1: one case against the reference. */
static void check_case(const skh_op *op, dev_case *d, cudaStream_t s) {
  prepare(op, d);
  reset_outputs(d, s);
  SK_OK_OR_FAIL(sk_run(d->binding, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaGetLastError());
  void *got[SKH_MAX_TENSORS] = {0};
  for (size_t i = 0; i < d->n; i++) got[i] = d->t[i].host;
  read_outputs(d, got); /* outputs land in t->host */
  op->reference(&d->c, d->t, d->n);
  for (size_t i = 0; i < d->n; i++) {
    const skh_tensor *t = &d->t[i];
    if (!t->present || t->role == SK_TENSOR_IN) continue;
    skh_tolerance tol = {SKH_EXACT, 0, 0, 0, 0};
    if (op->tolerance) op->tolerance(&d->c, d->t, i, &tol);
    char err[512];
    if (skh_compare(t, &tol, err, sizeof err))
      CASE_FAIL("%s [%s] seed 0x%llx: %s", op->op, d->c.name, (unsigned long long)d->seed, err);
  }
  release(d, !(d->c.flags & SKH_NO_GRAPH));
}

/* Phase 2 (after the freeze): eager vs two graph replays, byte for byte. */
static void check_graph(const skh_op *op, dev_case *d, cudaStream_t s) {
  prepare(op, d);
  void *eager[SKH_MAX_TENSORS] = {0}, *replay[SKH_MAX_TENSORS] = {0};
  for (size_t i = 0; i < d->n; i++)
    if (d->t[i].present && d->t[i].role != SK_TENSOR_IN) {
      eager[i] = malloc(d->t[i].bytes ? d->t[i].bytes : 1);
      replay[i] = malloc(d->t[i].bytes ? d->t[i].bytes : 1);
      cr_assert(eager[i] && replay[i]);
    }
  reset_outputs(d, s);
  SK_OK_OR_FAIL(sk_run(d->binding, s));
  CUDA_OK(cudaStreamSynchronize(s));
  read_outputs(d, eager);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const sk_status rs = sk_run(d->binding, s);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  cr_assert_eq(rs, SK_OK, "%s %s: run in capture: %s", op->op, d->c.name, sk_last_error_message());
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 2; rep++) {
    reset_outputs(d, s);
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    read_outputs(d, replay);
    for (size_t i = 0; i < d->n; i++)
      if (eager[i] && memcmp(eager[i], replay[i], d->t[i].bytes))
        CASE_FAIL("%s [%s] seed 0x%llx: graph replay %d: tensor %s differs from the eager run", op->op, d->c.name,
                  (unsigned long long)d->seed, rep, d->t[i].name);
  }
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
  for (size_t i = 0; i < d->n; i++) {
    free(eager[i]);
    free(replay[i]);
  }
  release(d, 0);
}

static void run_op(const skh_op *op) {
  const uint64_t seed = skref_test_seed(op->op);
  const size_t count = skh_case_count(op);
  dev_case *cases = calloc(count ? count : 1, sizeof *cases);
  cr_assert(cases);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  size_t ran = 0;
  for (size_t i = 0; i < count; i++) {
    dev_case *d = &cases[i];
    skh_case_get(op, i, &d->c);
    if (!(d->c.flags & SKH_GPU) || !wanted(&d->c)) continue;
    d->seed = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    const sk_status ps = skh_plan(op, &d->c, NULL, &d->plan);
    if (ps == SK_ERR_UNSUPPORTED) continue; /* e.g. an SM120-only path on this GPU */
    cr_assert_eq(ps, SK_OK, "%s %s: plan: %s", op->op, d->c.name, sk_last_error_message());
    check_case(op, d, s);
    ran++;
  }
  fprintf(stderr, "%s: %zu cases against the reference, %d mismatching\n", op->op, ran, failures);
  SK_OK_OR_FAIL(sk_freeze_kernel_resolution("harness graph phase"));
  size_t graphs = 0;
  for (size_t i = 0; i < count; i++) {
    dev_case *d = &cases[i];
    if (!d->plan) continue;
    if (!(d->c.flags & SKH_NO_GRAPH)) {
      check_graph(op, d, s);
      graphs++;
    }
    sk_plan_destroy(d->plan);
  }
  fprintf(stderr, "%s: %zu cases replayed from graphs after the freeze\n", op->op, graphs);
  CUDA_OK(cudaStreamDestroy(s));
  free(cases);
  cr_expect_gt(ran, 0, "%s: no GPU case ran", op->op);
  cr_assert_eq(failures, 0, "%s: seed 0x%llx: %d mismatches (MISMATCH lines above)", op->op, (unsigned long long)seed,
               failures);
}

ParameterizedTestParameters(ops_gpu, against_reference_then_graphs) {
  static size_t idx[64];
  const size_t n = skh_op_count();
  for (size_t i = 0; i < n && i < 64; i++) idx[i] = i;
  return cr_make_param_array(size_t, idx, n < 64 ? n : 64);
}

ParameterizedTest(size_t *i, ops_gpu, against_reference_then_graphs, .init = setup, .fini = teardown, .timeout = 900) {
  const skh_op *op = skh_op_at(*i);
  cr_assert(op);
  fprintf(stderr, "ops_gpu: %s\n", op->op);
  run_op(op);
}
