/* norm.mhc on a GPU: what the harness's GPU suite (tests/gpu/test_ops_gpu.c, the case table
 * ops/norm/cases.c) does not do, all with SPARKINFER_MHC_* overrides, which the selection reads at
 * plan time:
 *  - each partial variant forced onto the other side of its crossover (tensor cores for decode
 *    sizes, the scalar kernels for 16-token groups and prefill, run_pre's split schedule down to
 *    T = 9) against the double reference, with the case table's inputs and tolerances;
 *  - the knobs that must not change the bits (ops/norm/norm.mhc.md): stage buffers, fn terms in
 *    shared memory, the own sums buffer, tokens per CTA of the partials and of the projection,
 *    the projection's warps and buffers: byte-identical outputs to the default plan;
 *  - the fused decode launch byte-identical to scalar partial + finalize (FUSED_DECODE=0) on
 *    repeated launches, its counters back at zero after every run, and a launch that finds a
 *    counter not at zero failing instead of returning results;
 *  - one plan resolved before a freeze serving every path (fused decode, tensor-core partial,
 *    split schedule) by re-binding, replayed from CUDA graphs byte-identical to eager runs.
 * Inputs are fresh random data from a printed seed (SK_SEED replays); outputs are poisoned (0xff)
 * before every run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness/harness.h"
#include "norm/cases.h"
#include "norm/mhc_host.h"
#include "sparkinfer/norm.h"

static char *dir;
static void setup(void) { dir = gpu_test_setup("gpumhc"); }
static void teardown(void) {
  tu_rmrf(dir);
  free(dir);
}


/* Set the knobs of `env` ("NAME=VALUE" pairs, NULL-terminated; NULL: none), every other one unset. */
static void use_knobs(const char *const *env) {
  for (const char *const *k = sk_mhc_knobs; *k; k++) unsetenv(*k);
  for (; env && *env; env++) {
    char name[64];
    const char *eq = strchr(*env, '=');
    cr_assert(eq && (size_t)(eq - *env) < sizeof name, "bad knob %s", *env);
    memcpy(name, *env, (size_t)(eq - *env));
    name[eq - *env] = 0;
    setenv(name, eq + 1, 1);
  }
}

/* A NULL-terminated list of knobs for use_knobs. */
#define KNOBS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int failures;
#define MHC_FAIL(...)                                                                            \
  do {                                                                                           \
    if (failures++ < 30) {                                                                       \
      fprintf(stderr, "MISMATCH " __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                                       \
    }                                                                                            \
  } while (0)

/* ---- one case of the table on the device ------------------------------------------------------- */

typedef struct dev_case {
  const skh_op *op;
  skh_case c;
  skh_tensor t[SKH_MAX_TENSORS];
  size_t n;
  void *dptr[SKH_MAX_TENSORS];
  DLTensor dl[SKH_MAX_TENSORS];
  const DLTensor *ptrs[SKH_MAX_TENSORS];
} dev_case;

/* The case's tensors for `plan` (its shapes), random inputs from `seed` on the device, outputs
 * allocated (poisoned by run_plan). */
static void open_case(const skh_mhc_spec *s, const sk_plan *plan, uint64_t seed, dev_case *d) {
  memset(d, 0, sizeof *d);
  d->op = skh_find("norm.mhc");
  cr_assert(d->op, "norm.mhc has no case table");
  skh_mhc_case(s, &d->c);
  char err[512];
  cr_assert_eq(skh_tensors_for(d->op, &d->c, plan, d->t, &d->n, err, sizeof err), 0, "%s: %s", d->c.name, err);
  skref_rng rng;
  skref_rng_seed(&rng, seed);
  d->op->fill(&d->c, d->t, d->n, &rng);
  for (size_t i = 0; i < d->n; i++) {
    const skh_tensor *t = &d->t[i];
    if (!t->present) continue;
    d->dptr[i] = t->role == SK_TENSOR_IN ? gpu_upload(t->host, t->bytes) : gpu_poisoned(t->bytes);
    d->dl[i] = tu_device_tensor(d->dptr[i], d->t[i].dtype, d->t[i].ndim, d->t[i].shape);
    d->ptrs[i] = &d->dl[i];
  }
}

static void close_case(dev_case *d) {
  for (size_t i = 0; i < d->n; i++)
    if (d->dptr[i]) CUDA_OK(cudaFree(d->dptr[i]));
  skh_tensors_free(d->t, d->n);
}

static size_t outputs_bytes(const dev_case *d) {
  size_t n = 0;
  for (size_t i = 0; i < d->n; i++)
    if (d->t[i].present && d->t[i].role != SK_TENSOR_IN) n += d->t[i].bytes;
  return n;
}

/* Poison the outputs, run `b` on `s`, and return every output's bytes back to back (malloc'd). */
static uint8_t *run_binding(dev_case *d, const sk_binding *b, cudaStream_t s) {
  for (size_t i = 0; i < d->n; i++)
    if (d->t[i].present && d->t[i].role != SK_TENSOR_IN) CUDA_OK(cudaMemsetAsync(d->dptr[i], 0xff, d->t[i].bytes, s));
  SK_OK_OR_FAIL(sk_run(b, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaGetLastError());
  uint8_t *out = malloc(outputs_bytes(d) + 1), *at = out;
  cr_assert(out);
  for (size_t i = 0; i < d->n; i++)
    if (d->t[i].present && d->t[i].role != SK_TENSOR_IN) {
      CUDA_OK(cudaMemcpy(at, d->dptr[i], d->t[i].bytes, cudaMemcpyDeviceToHost));
      at += d->t[i].bytes;
    }
  return out;
}

/* The plan of a case under the knobs `env` (read now, at plan time). */
static sk_plan *make_plan(const skh_case *c, const char *const *env) {
  sk_plan *p = NULL;
  use_knobs(env);
  const sk_status s = skh_plan(skh_find("norm.mhc"), c, NULL, &p);
  use_knobs(NULL);
  cr_assert_eq(s, SK_OK, "%s: plan: %s", c->name, sk_last_error_message());
  return p;
}

/* A plan bound to the case's tensors with its own scratch, zeroed once (the fused decode counters). */
typedef struct bound_plan {
  sk_plan *plan;
  sk_binding *b;
  void *scratch;
  sk_scratch_spec spec;
} bound_plan;

static void bind_plan(dev_case *d, sk_plan *plan, bound_plan *bp) {
  bp->plan = plan;
  SK_OK_OR_FAIL(sk_plan_scratch_spec(plan, &bp->spec));
  bp->scratch = bp->spec.bytes ? gpu_zeroed(bp->spec.bytes) : NULL;
  SK_OK_OR_FAIL(sk_binding_create(plan, d->c.entry, &bp->b));
  const sk_status bs = sk_bind(bp->b, d->ptrs, d->n, bp->scratch, bp->spec.bytes);
  cr_assert_eq(bs, SK_OK, "%s: bind: %s", d->c.name, sk_last_error_message());
}

static void unbind_plan(bound_plan *bp) {
  sk_binding_destroy(bp->b);
  sk_plan_destroy(bp->plan);
  if (bp->scratch) CUDA_OK(cudaFree(bp->scratch));
  memset(bp, 0, sizeof *bp);
}

/* The spec's case, its plan under the knobs `env` and its tensors on the device (inputs from
 * `seed`); the caller binds the plan (bind_plan) or another one. */
static sk_plan *open_planned(const skh_mhc_spec *s, const char *const *env, uint64_t seed, dev_case *d) {
  skh_case c;
  skh_mhc_case(s, &c);
  sk_plan *plan = make_plan(&c, env);
  open_case(s, plan, seed, d);
  return plan;
}

static int64_t binding_symbol(const sk_binding *b, const char *name) {
  int64_t v = -1;
  SK_OK_OR_FAIL(sk_binding_symbol(b, name, &v));
  return v;
}

/* The spec's case under `env` against the reference (the table's fill, reference and tolerances). */
static void check_against_reference(const skh_mhc_spec *s, const char *const *env, uint64_t seed, cudaStream_t st) {
  dev_case d;
  bound_plan bp;
  bind_plan(&d, open_planned(s, env, seed, &d), &bp);
  uint8_t *out = run_binding(&d, bp.b, st), *at = out;
  for (size_t i = 0; i < d.n; i++)
    if (d.t[i].present && d.t[i].role != SK_TENSOR_IN) {
      memcpy(d.t[i].host, at, d.t[i].bytes);
      at += d.t[i].bytes;
    }
  free(out);
  d.op->reference(&d.c, d.t, d.n);
  for (size_t i = 0; i < d.n; i++) {
    if (!d.t[i].present || d.t[i].role == SK_TENSOR_IN) continue;
    skh_tolerance tol = {SKH_EXACT, 0, 0, 0, 0};
    d.op->tolerance(&d.c, d.t, i, &tol);
    char err[512];
    if (skh_compare(&d.t[i], &tol, err, sizeof err))
      MHC_FAIL("%s [%s %s] seed 0x%llx: %s", d.c.name, env && env[0] ? env[0] : "", env && env[0] && env[1] ? env[1] : "",
               (unsigned long long)seed, err);
  }
  unbind_plan(&bp);
  close_case(&d);
}

/* ---- each partial variant on the other side of its crossover ---------------------------------- */

Test(gpu_mhc, forced_partial_variants_match_reference, .init = setup, .fini = teardown, .timeout = 600) {
  const uint64_t seed = skref_test_seed("gpu mhc forced");
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const char *const *tensor_cores = KNOBS("SPARKINFER_MHC_SCALAR_MAX_T=0");
  const char *const *scalar = KNOBS("SPARKINFER_MHC_SCALAR_MAX_T=2147483647");
  const char *const *split_early = KNOBS("SPARKINFER_MHC_SPLIT_MIN_T=9");
  const char *const *two_launch_decode = KNOBS("SPARKINFER_MHC_FUSED_DECODE=0");
  static const char *const entries[] = {"pre", "post_pre"};
  static const int64_t hs[] = {256, 4096, 7168};
  uint64_t k = 0;
  for (size_t e = 0; e < 2; e++)
    for (size_t h = 0; h < 3; h++) {
      static const int64_t decode_ts[] = {1, 3, 8}, group_ts[] = {9, 17, 130};
      for (size_t i = 0; i < 3; i++, k++) {
        const skh_mhc_spec tc = {entries[e], hs[h], decode_ts[i], 0, (sk_mhc_norm_weight)(k % 3), 0, SKH_MHC_EPS_DEFAULT,
                                 (skh_mhc_data)(k % 3), SKH_GPU};
        check_against_reference(&tc, tensor_cores, seed + k, st);
        const skh_mhc_spec sc = {entries[e], hs[h], group_ts[i], 0, (sk_mhc_norm_weight)((k + 1) % 3), 0,
                                 SKH_MHC_EPS_DEFAULT, (skh_mhc_data)((k + 1) % 3), SKH_GPU};
        check_against_reference(&sc, scalar, seed + 1000 + k, st);
        const skh_mhc_spec two = {entries[e], hs[h], decode_ts[i], 0, (sk_mhc_norm_weight)((k + 2) % 3), 0,
                                  SKH_MHC_EPS_LARGE, SKH_MHC_DATA_MAIN, SKH_GPU};
        check_against_reference(&two, two_launch_decode, seed + 2000 + k, st);
      }
    }
  /* Prefill on the scalar kernels; run_pre's split schedule below its crossover, where a CTA has
   * fewer groups than warps. */
  const skh_mhc_spec big = {"post_pre", 2048, 4133, 0, SK_MHC_NORM_FP32, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU};
  check_against_reference(&big, scalar, seed + 3000, st);
  static const int64_t split_ts[] = {9, 17, 49, 130};
  for (size_t i = 0; i < 4; i++) {
    const skh_mhc_spec sp = {"pre", 4096, split_ts[i], 0, (sk_mhc_norm_weight)(i % 3), 0, SKH_MHC_EPS_DEFAULT,
                             (skh_mhc_data)(i % 3), SKH_GPU};
    check_against_reference(&sp, split_early, seed + 4000 + i, st);
  }
  CUDA_OK(cudaStreamDestroy(st));
  cr_assert_eq(failures, 0, "seed 0x%llx: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* ---- knobs that must not change the bits ------------------------------------------------------- */

/* Every variant's outputs byte-identical to the default plan's on the same inputs. */
static void variants_are_identical(const skh_mhc_spec *s, const char *const *const *variants, size_t nv, uint64_t seed,
                                   cudaStream_t st) {
  dev_case d;
  bound_plan base;
  bind_plan(&d, open_planned(s, NULL, seed, &d), &base);
  uint8_t *want = run_binding(&d, base.b, st);
  /* The default wrote every output: no poison (NaN) left in y. */
  const skh_tensor *y = skh_tensor_named(d.t, d.n, "y");
  if (y) {
    size_t off = 0;
    for (size_t i = 0; i < d.n && &d.t[i] != y; i++)
      if (d.t[i].present && d.t[i].role != SK_TENSOR_IN) off += d.t[i].bytes;
    const uint16_t *yb = (const uint16_t *)(want + off);
    for (size_t i = 0; i < skh_numel(y); i++)
      if ((yb[i] & 0x7f80) == 0x7f80) {
        MHC_FAIL("%s: y[%zu] not written or not finite", d.c.name, i);
        break;
      }
  }
  const size_t bytes = outputs_bytes(&d);
  for (size_t v = 0; v < nv; v++) {
    bound_plan bp;
    bind_plan(&d, make_plan(&d.c, variants[v]), &bp);
    uint8_t *got = run_binding(&d, bp.b, st);
    size_t at = 0;
    while (at < bytes && got[at] == want[at]) at++;
    if (at < bytes) {
      const char *name = "?";
      size_t end = 0;
      for (size_t i = 0; i < d.n; i++)
        if (d.t[i].present && d.t[i].role != SK_TENSOR_IN && at >= end && at < (end += d.t[i].bytes)) name = d.t[i].name;
      MHC_FAIL("%s seed 0x%llx: %s %s %s differs from the default plan in %s (byte %zu)", d.c.name,
               (unsigned long long)seed, variants[v][0], variants[v][1] ? variants[v][1] : "",
               variants[v][1] && variants[v][2] ? variants[v][2] : "", name, at);
    }
    free(got);
    unbind_plan(&bp);
  }
  free(want);
  unbind_plan(&base);
  close_case(&d);
}

Test(gpu_mhc, tiling_knobs_do_not_change_the_bits, .init = setup, .fini = teardown, .timeout = 600) {
  const uint64_t seed = skref_test_seed("gpu mhc tiling knobs");
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  /* The tensor-core partials: schedules (lockstep, with its own sums buffer, pipelined), fn terms
   * in shared memory, ranges of 1, 3, 4 groups (the ring wraps; ranges cross tiles). The knobs the
   * device's shared memory cannot hold are left out below. */
  const char *const *const partial[] = {
      KNOBS("SPARKINFER_MHC_STAGES=2", "SPARKINFER_MHC_OWN_SUMS=0"),
      KNOBS("SPARKINFER_MHC_STAGES=2", "SPARKINFER_MHC_OWN_SUMS=0", "SPARKINFER_MHC_FN_SMEM_TERMS=0"),
      KNOBS("SPARKINFER_MHC_TOKENS_PER_CTA=16"),
      KNOBS("SPARKINFER_MHC_TOKENS_PER_CTA=48"),
      KNOBS("SPARKINFER_MHC_TOKENS_PER_CTA=64", "SPARKINFER_MHC_OWN_SUMS=0"),
      KNOBS("SPARKINFER_MHC_STAGES=2", "SPARKINFER_MHC_OWN_SUMS=1", "SPARKINFER_MHC_FN_SMEM_TERMS=1"),
      KNOBS("SPARKINFER_MHC_STAGES=2", "SPARKINFER_MHC_OWN_SUMS=1", "SPARKINFER_MHC_FN_SMEM_TERMS=0"),
      KNOBS("SPARKINFER_MHC_STAGES=3", "SPARKINFER_MHC_FN_SMEM_TERMS=0"),
      KNOBS("SPARKINFER_MHC_STAGES=3", "SPARKINFER_MHC_FN_SMEM_TERMS=1", "SPARKINFER_MHC_TOKENS_PER_CTA=48"),
      KNOBS("SPARKINFER_MHC_STAGES=4", "SPARKINFER_MHC_TOKENS_PER_CTA=64"),
  };
  /* sm_120's 99 KiB a block: only the first five. */
  const size_t n_partial = strncmp(gpu_arch(), "sm_12", 5) ? sizeof partial / sizeof partial[0] : 5;
  static const int64_t hs[] = {2048, 7168}, ts[] = {17, 130, 1000};
  for (size_t h = 0; h < 2; h++)
    for (size_t t = 0; t < 3; t++) {
      const skh_mhc_spec pp = {"post_pre", hs[h], ts[t], 0, (sk_mhc_norm_weight)((h + t) % 3), 0, SKH_MHC_EPS_DEFAULT,
                               SKH_MHC_DATA_MAIN, SKH_GPU};
      variants_are_identical(&pp, partial, n_partial, seed + 10 * h + t, st);
      const skh_mhc_spec pr = {"pre", hs[h], ts[t] == 1000 ? 200 : ts[t], 0, (sk_mhc_norm_weight)((h + t + 1) % 3), 0,
                               SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU};
      variants_are_identical(&pr, partial, n_partial, seed + 100 + 10 * h + t, st);
    }
  /* run_pre's split schedule: warps and buffers of the projection, tokens per projection CTA. */
  const char *const *const projection[] = {
      KNOBS("SPARKINFER_MHC_PROJECTION_WARPS=1", "SPARKINFER_MHC_PROJECTION_STAGES=1"),
      KNOBS("SPARKINFER_MHC_PROJECTION_WARPS=2"),
      KNOBS("SPARKINFER_MHC_PROJECTION_WARPS=3", "SPARKINFER_MHC_PROJECTION_STAGES=1"),
      KNOBS("SPARKINFER_MHC_TOKENS_PER_CTA=16"),
      KNOBS("SPARKINFER_MHC_TOKENS_PER_CTA=1024"),
      KNOBS("SPARKINFER_MHC_PROJECTION_WARPS=6", "SPARKINFER_MHC_PROJECTION_STAGES=1"),
  };
  static const int64_t split_ts[] = {256, 777, 4133};
  for (size_t h = 0; h < 2; h++)
    for (size_t t = 0; t < 3; t++) {
      const skh_mhc_spec pr = {"pre", hs[h], split_ts[t], 0, (sk_mhc_norm_weight)(t % 3), 0, SKH_MHC_EPS_DEFAULT,
                               SKH_MHC_DATA_MAIN, SKH_GPU};
      variants_are_identical(&pr, projection, sizeof projection / sizeof projection[0], seed + 200 + 10 * h + t, st);
    }
  CUDA_OK(cudaStreamDestroy(st));
  cr_assert_eq(failures, 0, "seed 0x%llx: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* ---- the fused decode launch --------------------------------------------------------------------- */

/* The plan takes the fused launch (FUSED = 1) and, with SPARKINFER_MHC_FUSED_DECODE=0, the scalar
 * partial + finalize (FUSED = 0); every output byte-identical, on three launches each (the counters
 * go back to zero after each), and the counters zero at the end. */
Test(gpu_mhc, fused_decode_is_bit_identical_to_two_launches, .init = setup, .fini = teardown, .timeout = 600) {
  const uint64_t seed = skref_test_seed("gpu mhc fused");
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  static const char *const entries[] = {"pre", "post_pre"};
  static const int64_t hs[] = {256, 2048, 4096, 7168}, ts[] = {1, 2, 5, 8, 16};
  int fused_configs = 0;
  uint64_t k = 0;
  for (size_t e = 0; e < 2; e++)
    for (size_t h = 0; h < 4; h++)
      for (size_t t = 0; t < 5; t++, k++) {
        if (hs[h] > 4096 && ts[t] > 8) continue; /* above the crossover: no decode kernels */
        const skh_mhc_spec s = {entries[e], hs[h], ts[t], 0, (sk_mhc_norm_weight)(k % 3), 0, SKH_MHC_EPS_DEFAULT,
                                (skh_mhc_data)(k % 3), SKH_GPU};
        dev_case d;
        bound_plan fused, two;
        bind_plan(&d, open_planned(&s, NULL, seed + k, &d), &fused);
        bind_plan(&d, make_plan(&d.c, KNOBS("SPARKINFER_MHC_FUSED_DECODE=0")), &two);
        cr_expect_eq(binding_symbol(two.b, "FUSED"), 0, "%s: SPARKINFER_MHC_FUSED_DECODE=0 still fuses", d.c.name);
        if (!binding_symbol(fused.b, "FUSED")) {
          fprintf(stderr, "note: %s does not fuse on this GPU (CTA slots)\n", d.c.name);
        } else {
          fused_configs++;
          uint8_t *outs[2][3];
          for (int rep = 0; rep < 3; rep++) {
            outs[0][rep] = run_binding(&d, fused.b, st);
            outs[1][rep] = run_binding(&d, two.b, st);
          }
          const size_t bytes = outputs_bytes(&d);
          for (int rep = 0; rep < 3; rep++)
            for (int p = 0; p < 2; p++)
              if (memcmp(outs[p][rep], outs[0][0], bytes))
                MHC_FAIL("%s seed 0x%llx: %s launch %d differs from the first fused launch", d.c.name,
                         (unsigned long long)(seed + k), p ? "two-launch" : "fused", rep);
          for (int rep = 0; rep < 3; rep++) free(outs[0][rep]), free(outs[1][rep]);
          /* The counters: a u32 per token from the first 1024-byte boundary after the partial rows. */
          uint8_t *scr = gpu_download(fused.scratch, fused.spec.bytes);
          const size_t base = (size_t)(-(uintptr_t)fused.scratch & 1023),
                       counters = base + (((size_t)ts[t] * (size_t)(hs[h] / 256) * 144 + 1023) & ~(size_t)1023);
          for (int64_t i = 0; i < ts[t]; i++) {
            uint32_t v;
            memcpy(&v, scr + counters + 4 * (size_t)i, 4);
            if (v) MHC_FAIL("%s: the counter of token %lld is %u after the runs", d.c.name, (long long)i, v);
          }
          free(scr);
        }
        unbind_plan(&fused);
        unbind_plan(&two);
        close_case(&d);
      }
  CUDA_OK(cudaStreamDestroy(st));
  cr_assert_gt(fused_configs, 0, "no configuration took the fused launch");
  cr_assert_eq(failures, 0, "seed 0x%llx: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}

/* A scratch whose counters were never zeroed: the fused launch traps (the launch fails) rather
 * than letting a waiter read partials that are not there yet (ops/norm/norm.mhc.md, 2c). The trap
 * spoils this process's context: this test runs alone in its process (Criterion's default). */
Test(gpu_mhc, fused_decode_refuses_counters_not_at_zero, .init = setup, .fini = teardown, .timeout = 120) {
  const uint64_t seed = skref_test_seed("gpu mhc counters");
  const skh_mhc_spec s = {"post_pre", 2048, 4, 0, SK_MHC_NORM_BF16, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU};
  dev_case d;
  sk_plan *plan = open_planned(&s, NULL, seed, &d);
  sk_scratch_spec spec;
  SK_OK_OR_FAIL(sk_plan_scratch_spec(plan, &spec));
  void *scratch = gpu_filled(spec.bytes, 0x5a);
  sk_binding *b;
  SK_OK_OR_FAIL(sk_binding_create(plan, d.c.entry, &b));
  SK_OK_OR_FAIL(sk_bind(b, d.ptrs, d.n, scratch, spec.bytes));
  if (!binding_symbol(b, "FUSED")) cr_skip_test("%s does not fuse on this GPU", d.c.name);
  const sk_status rs = sk_run(b, NULL);
  const cudaError_t e = rs == SK_OK ? cudaDeviceSynchronize() : cudaSuccess;
  cr_assert(rs != SK_OK || e != cudaSuccess, "a fused launch on counters not at zero completed (run %s, sync %s)",
            sk_status_string(rs), cudaGetErrorString(e));
  fprintf(stderr, "note: the launch failed as it must: %s\n", rs != SK_OK ? sk_last_error_message() : cudaGetErrorString(e));
  /* The context is gone: nothing more to free here. */
}

/* ---- one plan, every path, after a freeze ------------------------------------------------------- */

/* One plan (max_tokens 600) resolved before sk_freeze_kernel_resolution serves post_pre at T = 5
 * (fused decode where the device has the CTA slots), post_pre at T = 40 (tensor-core partial) and
 * pre at T = 600 (split schedule) by re-binding; each run replayed from a CUDA graph is
 * byte-identical to the eager run; a plan for another hidden size is refused after the freeze. */
Test(gpu_mhc, one_plan_serves_every_path_after_a_freeze, .init = setup, .fini = teardown, .timeout = 300) {
  const uint64_t seed = skref_test_seed("gpu mhc one plan");
  use_knobs(NULL);
  sk_mhc_caps caps = SK_MHC_CAPS_INIT;
  caps.hidden = 4096;
  caps.max_tokens = 600;
  caps.norm_weight = SK_MHC_NORM_BF16;
  sk_plan *plan;
  SK_OK_OR_FAIL(sk_mhc_plan_create(&caps, &plan));
  SK_OK_OR_FAIL(sk_freeze_kernel_resolution("mhc one-plan test"));
  sk_mhc_caps cold = caps;
  cold.hidden = 3072;
  sk_plan *cp = NULL;
  cr_assert_eq(sk_mhc_plan_create(&cold, &cp), SK_ERR_KERNEL_RESOLUTION_FROZEN);
  sk_scratch_spec spec;
  SK_OK_OR_FAIL(sk_plan_scratch_spec(plan, &spec));
  void *scratch = gpu_zeroed(spec.bytes);
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  static const struct {
    const char *entry;
    int64_t t;
    const char *symbol;
  } runs[] = {{"post_pre", 5, "FUSED"}, {"post_pre", 40, NULL}, {"pre", 600, "SPLIT"}};
  for (size_t r = 0; r < 3; r++) {
    const skh_mhc_spec s = {runs[r].entry, 4096, runs[r].t, 600, SK_MHC_NORM_BF16, 0, SKH_MHC_EPS_DEFAULT,
                            SKH_MHC_DATA_SMALL_FN, SKH_GPU};
    dev_case d;
    open_case(&s, plan, seed + r, &d);
    sk_binding *b;
    SK_OK_OR_FAIL(sk_binding_create(plan, runs[r].entry, &b));
    SK_OK_OR_FAIL(sk_bind(b, d.ptrs, d.n, scratch, spec.bytes));
    if (runs[r].symbol && !strcmp(runs[r].symbol, "SPLIT"))
      cr_expect_eq(binding_symbol(b, "SPLIT"), 1, "run_pre at T = %lld takes the split schedule", (long long)runs[r].t);
    uint8_t *eager = run_binding(&d, b, st);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const sk_status cs = sk_run(b, st);
    CUDA_OK(cudaStreamEndCapture(st, &g));
    cr_assert_eq(cs, SK_OK, "run in capture: %s", sk_last_error_message());
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    const size_t bytes = outputs_bytes(&d);
    for (int rep = 0; rep < 3; rep++) {
      for (size_t i = 0; i < d.n; i++)
        if (d.t[i].present && d.t[i].role != SK_TENSOR_IN) CUDA_OK(cudaMemsetAsync(d.dptr[i], 0xff, d.t[i].bytes, st));
      CUDA_OK(cudaGraphLaunch(ge, st));
      CUDA_OK(cudaStreamSynchronize(st));
      uint8_t *replay = malloc(bytes), *at = replay;
      cr_assert(replay);
      for (size_t i = 0; i < d.n; i++)
        if (d.t[i].present && d.t[i].role != SK_TENSOR_IN) {
          CUDA_OK(cudaMemcpy(at, d.dptr[i], d.t[i].bytes, cudaMemcpyDeviceToHost));
          at += d.t[i].bytes;
        }
      if (memcmp(replay, eager, bytes))
        MHC_FAIL("%s seed 0x%llx: graph replay %d differs from the eager run", d.c.name, (unsigned long long)(seed + r), rep);
      free(replay);
    }
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    free(eager);
    sk_binding_destroy(b);
    close_case(&d);
  }
  CUDA_OK(cudaStreamDestroy(st));
  CUDA_OK(cudaFree(scratch));
  sk_plan_destroy(plan);
  cr_assert_eq(failures, 0, "seed 0x%llx: %d mismatches (MISMATCH lines above)", (unsigned long long)seed, failures);
}
