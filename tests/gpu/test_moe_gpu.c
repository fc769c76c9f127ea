/* moe.fused_moe / moe.ep_moe kernels on a GPU through the JIT API (sk_kernel_resolve +
 * sk_kernel_launch_ex), with the launch sequence of ops/moe/plan.cuh, against the CPU references
 * of ops/moe/ref.h: the exact NVFP4 trace (bit for bit), W4A16 in double (row-mean cosine and
 * max |diff|), route_topk (bit for bit), the micro slot table (sk_moe_micro_slots_serial) and the
 * error word. Fresh seed per test (printed; SK_SEED replays), outputs poisoned with 0xff before
 * every run, guard bytes around the output and the scratch, every CUDA call checked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "common/ref.h"
#include "moe/plan.cuh"
#include "moe/prep.h"
#include "moe/ref.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/jit.h"

static char *dir;
static void setup(void) { dir = gpu_test_setup("gpumoe"); }
static void teardown(void) { tu_rmrf(dir); free(dir); }

#define GUARD 4096
#define GUARD_BYTE 0xA5

static int sm_count(void) {
  int n = 0;
  CUDA_OK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

/* A device buffer with GUARD bytes of GUARD_BYTE on each side; returns the inner pointer. */
static void *guarded_alloc(size_t n) {
  uint8_t *d;
  CUDA_OK(cudaMalloc((void **)&d, n + 2 * GUARD));
  CUDA_OK(cudaMemset(d, GUARD_BYTE, n + 2 * GUARD));
  CUDA_OK(cudaDeviceSynchronize());
  return d + GUARD;
}
static void guarded_check_free(void *inner, size_t n, const char *what) {
  uint8_t *d = (uint8_t *)inner - GUARD, *h = gpu_download(d, n + 2 * GUARD);
  for (size_t i = 0; i < GUARD; i++) {
    cr_expect_eq(h[i], GUARD_BYTE, "%s: guard byte %zu before the buffer overwritten", what, GUARD - i);
    cr_expect_eq(h[GUARD + n + i], GUARD_BYTE, "%s: guard byte %zu after the buffer overwritten", what, i);
    if (h[i] != GUARD_BYTE || h[GUARD + n + i] != GUARD_BYTE) break;
  }
  free(h);
  CUDA_OK(cudaFree(d));
}

/* ---- one problem -------------------------------------------------------------------------- */
typedef struct moe_case {
  int recipe, wfmt, act, e, e_global, k, n, topk, m, regime, combine, ids64, apply_on_input, bm;
  int scale_mode;
  float a_gs_base, limit, alpha, beta;
} moe_case;

typedef struct host_weights {
  uint8_t *w1c, *w1s, *w2c, *w2s;
  float *w1gs, *w2gs, *a1gs, *a2gs;
  sk_moe_prepared_sizes sz;
} host_weights;

static void weights_alloc(host_weights *w, const moe_case *c, int e) {
  cr_assert_eq(sk_moe_prepared_sizes_of(c->wfmt, c->act, c->n, c->k, &w->sz), SK_OK);
  w->w1c = malloc(w->sz.w1_codes * e), w->w1s = malloc(w->sz.w1_scales * e);
  w->w2c = malloc(w->sz.w2_codes * e), w->w2s = malloc(w->sz.w2_scales * e);
  w->w1gs = malloc(4 * e), w->w2gs = malloc(4 * e), w->a1gs = malloc(4 * e), w->a2gs = malloc(4 * e);
}
static void weights_free(host_weights *w) {
  free(w->w1c), free(w->w1s), free(w->w2c), free(w->w2s), free(w->w1gs), free(w->w2gs), free(w->a1gs), free(w->a2gs);
}
static void weights_random(host_weights *w, const moe_case *c, skref_rng *rng) {
  weights_alloc(w, c, c->e_global);
  skref_moe_random_weights(rng, c->wfmt, c->act, c->e_global, c->n, c->k, c->scale_mode, w->w1c, w->w1s, w->w2c, w->w2s,
                           c->wfmt == SK_MOE_WFMT_NVFP4 ? w->w1gs : NULL, c->wfmt == SK_MOE_WFMT_NVFP4 ? w->w2gs : NULL,
                           w->a1gs, w->a2gs, c->a_gs_base);
  if (c->wfmt != SK_MOE_WFMT_NVFP4)
    for (int i = 0; i < c->e_global; i++) w->w1gs[i] = w->w2gs[i] = 1.0f;
}
/* Experts [sel[0..e)] of `src` as a local weight set. */
static void weights_select(host_weights *dst, const host_weights *src, const moe_case *c, const int *sel, int e) {
  weights_alloc(dst, c, e);
  for (int i = 0; i < e; i++) {
    const int g = sel[i];
    memcpy(dst->w1c + i * dst->sz.w1_codes, src->w1c + g * src->sz.w1_codes, src->sz.w1_codes);
    memcpy(dst->w1s + i * dst->sz.w1_scales, src->w1s + g * src->sz.w1_scales, src->sz.w1_scales);
    memcpy(dst->w2c + i * dst->sz.w2_codes, src->w2c + g * src->sz.w2_codes, src->sz.w2_codes);
    memcpy(dst->w2s + i * dst->sz.w2_scales, src->w2s + g * src->sz.w2_scales, src->sz.w2_scales);
    dst->w1gs[i] = src->w1gs[g], dst->w2gs[i] = src->w2gs[g], dst->a1gs[i] = src->a1gs[g], dst->a2gs[i] = src->a2gs[g];
  }
}

typedef struct dev_weights {
  void *w1c, *w1s, *w2c, *w2s, *w1gs, *w2gs, *a1gs, *a2gs;
} dev_weights;
static void weights_upload(dev_weights *d, const host_weights *w, int e) {
  d->w1c = gpu_upload(w->w1c, w->sz.w1_codes * e), d->w1s = gpu_upload(w->w1s, w->sz.w1_scales * e);
  d->w2c = gpu_upload(w->w2c, w->sz.w2_codes * e), d->w2s = gpu_upload(w->w2s, w->sz.w2_scales * e);
  d->w1gs = gpu_upload(w->w1gs, 4 * e), d->w2gs = gpu_upload(w->w2gs, 4 * e);
  d->a1gs = gpu_upload(w->a1gs, 4 * e), d->a2gs = gpu_upload(w->a2gs, 4 * e);
}
static void weights_dev_free(dev_weights *d) {
  void *p[] = {d->w1c, d->w1s, d->w2c, d->w2s, d->w1gs, d->w2gs, d->a1gs, d->a2gs};
  for (int i = 0; i < 8; i++) CUDA_OK(cudaFree(p[i]));
}
static skref_moe_weights ref_weights(const host_weights *w, const moe_case *c, int e) {
  skref_moe_weights r = {c->wfmt, c->act, e, c->k, c->n, w->w1c, w->w1s, w->w2c, w->w2s,
                         c->wfmt == SK_MOE_WFMT_NVFP4 ? w->w1gs : NULL, c->wfmt == SK_MOE_WFMT_NVFP4 ? w->w2gs : NULL,
                         w->a1gs, w->a2gs};
  return r;
}

/* Random routes: k distinct experts per token, weights uniform in [0.1, 1). */
static void random_routes(skref_rng *rng, int m, int k, int e_global, int64_t *ids, float *wts) {
  int *perm = malloc(sizeof(int) * e_global);
  for (int t = 0; t < m; t++) {
    for (int i = 0; i < e_global; i++) perm[i] = i;
    for (int j = 0; j < k; j++) {
      const int s = j + (int)skref_rng_below(rng, (uint64_t)(e_global - j));
      const int x = perm[j];
      perm[j] = perm[s], perm[s] = x;
      ids[t * k + j] = perm[j];
      wts[t * k + j] = (float)(0.1 + 0.9 * skref_rng_uniform(rng));
    }
  }
  free(perm);
}

/* Host inputs of a case: x [m, K] normal BF16, routes (int64 and int32 copies), weights; the
 * device copies come from inputs_upload (after any edit of the host arrays). */
typedef struct inputs {
  size_t nx, nr;
  uint16_t *x;
  int64_t *ids;
  int32_t *ids32;
  float *wts;
  void *dx, *d64, *d32, *dwt;
} inputs;
static void inputs_make(inputs *in, const moe_case *c, skref_rng *rng) {
  memset(in, 0, sizeof *in);
  in->nx = (size_t)c->m * c->k, in->nr = (size_t)c->m * c->topk;
  in->x = malloc(2 * in->nx), in->ids = malloc(8 * in->nr), in->ids32 = malloc(4 * in->nr), in->wts = malloc(4 * in->nr);
  skref_fill_normal(rng, in->x, in->nx, SKREF_BF16, 1.0f, 0.0, 1.0f);
  random_routes(rng, c->m, c->topk, c->e_global ? c->e_global : c->e, in->ids, in->wts);
}
static void inputs_upload(inputs *in) {
  for (size_t i = 0; i < in->nr; i++) in->ids32[i] = (int32_t)in->ids[i];
  in->dx = gpu_upload(in->x, 2 * in->nx), in->d64 = gpu_upload(in->ids, 8 * in->nr);
  in->d32 = gpu_upload(in->ids32, 4 * in->nr), in->dwt = gpu_upload(in->wts, 4 * in->nr);
}
static skref_rng test_rng(const char *what, uint64_t *seed) {
  skref_rng rng;
  skref_rng_seed(&rng, *seed = skref_test_seed(what));
  return rng;
}

static void inputs_free(inputs *in) {
  void *d[] = {in->dx, in->d64, in->d32, in->dwt};
  for (int i = 0; i < 4; i++)
    if (d[i]) CUDA_OK(cudaFree(d[i]));
  free(in->x), free(in->ids), free(in->ids32), free(in->wts);
}

static void case_make(host_weights *hw, inputs *in, const moe_case *c, skref_rng *rng) {
  weights_random(hw, c, rng);
  inputs_make(in, c, rng);
}
static void case_free(dev_weights *dw, host_weights *hw, inputs *in) {
  weights_dev_free(dw);
  weights_free(hw);
  inputs_free(in);
}

/* ---- running the kernels ---------------------------------------------------------------------- */
typedef struct run_out {
  uint16_t *out;   /* [m, K] BF16 bits (malloc'ed) */
  int flags;       /* the error word */
  int *table;      /* micro: the slot table (malloc'ed), else NULL */
} run_out;

static sk_kernel *resolve(const char *source, const char *name) {
  sk_kernel_request req = {.op = "moe.fused_moe", .source = source, .name_expr = name, .params = name, .arch = NULL};
  sk_kernel *k = NULL;
  SK_OK_OR_FAIL(sk_kernel_resolve(&req, &k));
  return k;
}

/* Runs the plan's launch sequence `runs` times (poisoning the output before each) on the given
 * device inputs; returns the last run's output, flags and micro table. */
static run_out run_moe(const moe_case *c, const dev_weights *dw, const void *dx, const void *dids, const void *dwts,
                       const void *dmap, int runs) {
  sk_moe_dims dims = {c->m, c->topk, c->e, c->k, c->n, c->act, c->recipe, c->wfmt, sm_count(), 0, c->combine, c->bm};
  sk_moe_scratch s;
  cr_assert_eq(sk_moe_scratch_layout(&dims, &s), 0, "scratch layout");
  sk_moe_launch seq[8];
  const int nl = sk_moe_launch_sequence(&dims, &s, c->m, c->regime, seq);
  cr_assert_gt(nl, 0, "launch sequence");
  uint8_t *scratch = guarded_alloc((size_t)s.total);
  CUDA_OK(cudaMemset(scratch, 0, (size_t)s.total)); /* zeroed once: the counters */
  const size_t out_bytes = (size_t)c->m * c->k * 2;
  uint16_t *dout = guarded_alloc(out_bytes);
  sk_moe_params p = {0};
  p.x = dx, p.topk_ids = dids, p.topk_weights = dwts, p.expert_map = dmap;
  p.w1_codes = dw->w1c, p.w1_scales = dw->w1s, p.w2_codes = dw->w2c, p.w2_scales = dw->w2s;
  p.w1_gs = c->wfmt == SK_MOE_WFMT_NVFP4 ? dw->w1gs : NULL, p.w2_gs = c->wfmt == SK_MOE_WFMT_NVFP4 ? dw->w2gs : NULL;
  p.a1_gs = dw->a1gs, p.a2_gs = dw->a2gs;
  p.out = dout, p.scratch = scratch, p.s = s, p.m = c->m;
  p.topk = c->topk, p.ids_int64 = c->ids64, p.e = c->e, p.e_global = c->e_global, p.k = c->k, p.n = c->n;
  p.apply_on_input = c->apply_on_input, p.limit = c->limit, p.alpha = c->alpha, p.beta = c->beta, p.combine = c->combine;
  sk_kernel *kern[8];
  for (int i = 0; i < nl; i++) {
    kern[i] = resolve(seq[i].source, seq[i].name);
    if (seq[i].smem > 48 * 1024) SK_OK_OR_FAIL(sk_kernel_set_max_dynamic_shared(kern[i], seq[i].smem));
  }
  for (int r = 0; r < runs; r++) {
    CUDA_OK(cudaMemset(dout, 0xff, out_bytes));
    for (int i = 0; i < nl; i++) {
      void *args[] = {&p};
      SK_OK_OR_FAIL(sk_kernel_launch_ex(kern[i], (sk_dim3){seq[i].grid[0], seq[i].grid[1], seq[i].grid[2]},
                                        (sk_dim3){seq[i].block, 1, 1}, seq[i].smem, NULL, args, SK_LAUNCH_OVERLAP_PREVIOUS));
    }
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
  }
  run_out o = {gpu_download(dout, out_bytes), 0, NULL};
  CUDA_OK(cudaMemcpy(&o.flags, scratch + s.flags, 4, cudaMemcpyDeviceToHost));
  if (c->regime == SK_MOE_REGIME_MICRO) {
    const size_t tb = 4 * (1 + (size_t)s.micro_slots * (2 + SK_MOE_SLOT_COLS));
    o.table = gpu_download(scratch + s.micro_table, tb);
    /* counters left at zero (graph replay) */
    uint32_t *cnt = gpu_download(scratch + s.micro_counters, 4 * (size_t)(s.micro_tile_counters_words + s.micro_combine_counters_words));
    for (long long i = 0; i < s.micro_tile_counters_words + s.micro_combine_counters_words; i++)
      if (cnt[i]) {
        cr_expect_eq(cnt[i], 0, "micro counter %lld left at %u", i, cnt[i]);
        break;
      }
    free(cnt);
  }
  guarded_check_free(dout, out_bytes, "output");
  guarded_check_free(scratch, (size_t)s.total, "scratch");
  return o;
}

/* ---- comparisons -------------------------------------------------------------------------------- */
static void expect_w4a16_close(const moe_case *c, const uint16_t *got, const double *ref, const char *what, uint64_t seed) {
  double max_abs, peak = 0;
  for (size_t i = 0; i < (size_t)c->m * c->k; i++) peak = fmax(peak, fabs(ref[i]));
  const double cos = skref_moe_cosine(got, ref, (size_t)c->m, (size_t)c->k, &max_abs);
  /* bound: BF16 output rounding (2^-8 relative) plus a few BF16 flips of the intermediate */
  const double bound = 1e-2 * peak + 1e-6;
  fprintf(stderr, "  %s: m %d E %d k %d K %d N %d: cosine %.7f max_abs %.4g (peak %.4g)\n", what, c->m, c->e, c->topk, c->k,
          c->n, cos, max_abs, peak);
  cr_expect(cos >= 0.9999 && max_abs <= bound, "seed %llu %s: cosine %.7f (>= 0.9999), max_abs %.5g (<= %.5g)",
            (unsigned long long)seed, what, cos, max_abs, bound);
}

static void expect_slot_table(const moe_case *c, const int64_t *ids, const int32_t *map, const int *table, uint64_t seed) {
  const int routes = c->m * c->topk;
  int local[SK_MOE_MICRO_MAX_ROUTES], se[SK_MOE_MICRO_MAX_ROUTES], sc[SK_MOE_MICRO_MAX_ROUTES];
  int (*sr)[SK_MOE_SLOT_COLS] = malloc(sizeof(int) * SK_MOE_MICRO_MAX_ROUTES * SK_MOE_SLOT_COLS);
  skref_moe_routes rt = {c->m, c->topk, ids, NULL, c->e_global, map, 0};
  unsigned err = 0;
  for (int r = 0; r < routes; r++) local[r] = skref_moe_local_expert(&rt, c->e, (size_t)r, &err);
  const int slots = sk_moe_micro_slots_serial(local, routes, se, sc, sr);
  const int S = sk_moe_micro_max_slots(c->m < 8 ? c->m : 8, c->topk, c->e);
  cr_expect_eq(table[0], slots, "seed %llu: slots %d, expected %d", (unsigned long long)seed, table[0], slots);
  for (int s = 0; s < slots && s < table[0]; s++) {
    cr_expect_eq(table[1 + s], se[s], "seed %llu: slot %d expert", (unsigned long long)seed, s);
    cr_expect_eq(table[1 + S + s], sc[s], "seed %llu: slot %d count", (unsigned long long)seed, s);
    for (int j = 0; j < sc[s]; j++)
      cr_expect_eq(table[1 + 2 * S + s * SK_MOE_SLOT_COLS + j], sr[s][j], "seed %llu: slot %d route %d", (unsigned long long)seed, s, j);
  }
  free(sr);
}

/* Full case: random weights, x, routes; GPU vs reference; two runs bitwise equal. */
static void check_case(moe_case c, skref_rng *rng, uint64_t seed, const char *what) {
  if (c.e_global == 0) c.e_global = c.e;
  host_weights hw;
  weights_random(&hw, &c, rng);
  dev_weights dw;
  weights_upload(&dw, &hw, c.e);
  inputs in;
  inputs_make(&in, &c, rng);
  inputs_upload(&in);
  const size_t nx = in.nx;
  uint16_t *x = in.x;
  int64_t *ids = in.ids;
  float *wts = in.wts;
  void *dx = in.dx, *dids = c.ids64 ? in.d64 : in.d32, *dwt = in.dwt;
  run_out o = run_moe(&c, &dw, dx, dids, dwt, NULL, 2);
  run_out o2 = run_moe(&c, &dw, dx, dids, dwt, NULL, 1);
  if (c.regime == SK_MOE_REGIME_MICRO || c.combine == SK_MOE_COMBINE_DET)
    cr_expect(!memcmp(o.out, o2.out, nx * 2), "seed %llu %s: two runs differ (deterministic mode)", (unsigned long long)seed, what);
  skref_moe_weights rw = ref_weights(&hw, &c, c.e);
  skref_moe_routes rt = {c.m, c.topk, ids, wts, c.e_global, NULL, c.apply_on_input};
  skref_moe_act_params ap = {c.limit, c.alpha, c.beta};
  if (c.recipe == SK_MOE_W4A16) {
    double *ref = malloc(8 * nx);
    skref_moe_w4a16(&rw, &rt, &ap, x, ref, NULL);
    expect_w4a16_close(&c, o.out, ref, what, seed);
    free(ref);
  } else {
    uint16_t *ref = malloc(2 * nx);
    long long inexact = 0;
    skref_moe_nvfp4_trace(&rw, &rt, &ap, x, ref, &inexact);
    size_t diff = 0, first = 0;
    double max_abs = 0;
    for (size_t i = 0; i < nx; i++)
      if (o.out[i] != ref[i]) {
        if (!diff++) first = i;
        max_abs = fmax(max_abs, fabs(skref_bf16_to_float(o.out[i]) - skref_bf16_to_float(ref[i])));
      }
    fprintf(stderr, "  %s: m %d: %zu of %zu outputs differ from the trace (max_abs %.4g), %lld inexact dots\n", what, c.m, diff,
            nx, max_abs, inexact);
    if (inexact > 0) {
      double *refd = malloc(8 * nx);
      for (size_t i = 0; i < nx; i++) refd[i] = skref_bf16_to_float(ref[i]);
      expect_w4a16_close(&c, o.out, refd, what, seed);
      free(refd);
    } else
      cr_expect_eq(diff, 0, "seed %llu %s: %zu outputs differ from the exact trace, first [%zu] %a vs %a", (unsigned long long)seed,
                   what, diff, first, skref_bf16_to_float(o.out[first]), skref_bf16_to_float(ref[first]));
    free(ref);
  }
  if (o.table) expect_slot_table(&c, ids, NULL, o.table, seed);
  cr_expect_eq(o.flags, 0, "seed %llu %s: error word %d", (unsigned long long)seed, what, o.flags);
  free(o.out), free(o.table), free(o2.out), free(o2.table);
  case_free(&dw, &hw, &in);
}

static moe_case base_case(int recipe, int wfmt, int act, int e, int k, int n, int topk, int m, int regime) {
  moe_case c = {recipe, wfmt, act, e, e, k, n, topk, m, regime, SK_MOE_COMBINE_DET, 0, 0, 0, 0, 1.0f, INFINITY, 1.702f, 1.0f};
  if (act == SK_MOE_ACT_SWIGLU_OAI) c.limit = 7.0f;
  return c;
}

/* ---- tests -------------------------------------------------------------------------------------- */
Test(gpu_moe, nvfp4_exact_trace_e1_k128, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed;
  skref_rng rng = test_rng("gpu moe exact", &seed);
  const int acts[3] = {SK_MOE_ACT_SILU, SK_MOE_ACT_RELU2, SK_MOE_ACT_SWIGLU_OAI};
  for (int a = 0; a < 3; a++) {
    const int ms[4] = {1, 2, 128, 768};
    for (int mi = 0; mi < 4; mi++) {
      moe_case c = base_case(SK_MOE_W4A4, SK_MOE_WFMT_NVFP4, acts[a], 1, 128, 128, 1, ms[mi],
                             ms[mi] <= 8 ? SK_MOE_REGIME_MICRO : SK_MOE_REGIME_GROUPED);
      c.scale_mode = 1, c.a_gs_base = 64.0f;
      c.combine = mi == 3 ? SK_MOE_COMBINE_ATOMIC : SK_MOE_COMBINE_DET;
      check_case(c, &rng, seed, a == 0 ? "exact silu" : a == 1 ? "exact relu2" : "exact swiglu_oai");
    }
  }
}

Test(gpu_moe, w4a16_micro_and_grouped, .init = setup, .fini = teardown, .timeout = 900) {
  uint64_t seed;
  skref_rng rng = test_rng("gpu moe w4a16", &seed);
  /* micro: m = 1, 2, 8; E from 1 to 512; top-k 1 .. 10; both weight formats, every activation */
  const struct { int wfmt, act, e, k, n, topk, m; } micro[] = {
      {0, 0, 1, 256, 128, 1, 1},     {0, 0, 512, 512, 256, 10, 1}, {0, 0, 128, 1024, 256, 8, 2},
      {1, 2, 8, 2880, 2880, 4, 1}, {0, 1, 64, 768, 384, 6, 8},   {1, 0, 32, 512, 768, 8, 8},
      {0, 2, 16, 2880, 256, 4, 3},
  };
  for (size_t i = 0; i < sizeof micro / sizeof micro[0]; i++)
    check_case(base_case(SK_MOE_W4A16, micro[i].wfmt, micro[i].act, micro[i].e, micro[i].k, micro[i].n, micro[i].topk, micro[i].m,
                         SK_MOE_REGIME_MICRO),
               &rng, seed, "w4a16 micro");
  /* grouped: m = 64, 512, 4096; every BM; both combine modes */
  const struct { int wfmt, act, e, k, n, topk, m, bm, comb; } grouped[] = {
      {0, 0, 8, 512, 256, 2, 64, 16, 1},     {1, 0, 512, 512, 256, 10, 64, 0, 0}, {0, 1, 16, 512, 384, 4, 512, 32, 1},
      {0, 2, 32, 2880, 256, 4, 128, 64, 0},  {1, 0, 8, 256, 128, 2, 4096, 128, 1}, {0, 0, 128, 2048, 256, 8, 128, 0, 1},
  };
  for (size_t i = 0; i < sizeof grouped / sizeof grouped[0]; i++) {
    moe_case c = base_case(SK_MOE_W4A16, grouped[i].wfmt, grouped[i].act, grouped[i].e, grouped[i].k, grouped[i].n, grouped[i].topk,
                           grouped[i].m, SK_MOE_REGIME_GROUPED);
    c.bm = grouped[i].bm, c.combine = grouped[i].comb;
    check_case(c, &rng, seed, "w4a16 grouped");
  }
  /* the micro shapes through the grouped kernels too (any m is valid there) */
  check_case(base_case(SK_MOE_W4A16, 0, 0, 64, 512, 256, 8, 8, SK_MOE_REGIME_GROUPED), &rng, seed, "w4a16 grouped m=8");
}

Test(gpu_moe, w4a4_fast_paths, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed;
  skref_rng rng = test_rng("gpu moe w4a4", &seed);
  moe_case c = base_case(SK_MOE_W4A4, 0, 0, 64, 1024, 512, 8, 4, SK_MOE_REGIME_MICRO);
  c.a_gs_base = 64.0f;
  check_case(c, &rng, seed, "w4a4 micro");
  c.m = 256, c.regime = SK_MOE_REGIME_GROUPED, c.bm = 32;
  check_case(c, &rng, seed, "w4a4 grouped");
}

/* int32 and int64 ids, the three W1 orders through sk_moe_prepare_w1: bitwise the same output. */
Test(gpu_moe, ids_width_and_w1_orders, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed;
  skref_rng rng = test_rng("gpu moe ids/w1", &seed);
  for (int regime = 0; regime < 2; regime++) {
    moe_case c = base_case(SK_MOE_W4A16, SK_MOE_WFMT_NVFP4, SK_MOE_ACT_SILU, 16, 512, 256, 4, regime ? 40 : 5, regime);
    host_weights hw;
    inputs in;
    case_make(&hw, &in, &c, &rng);
    inputs_upload(&in);
    const size_t nx = in.nx;
    void *dx = in.dx, *d64 = in.d64, *d32 = in.d32, *dwt = in.dwt;
    dev_weights dw;
    weights_upload(&dw, &hw, c.e);
    c.ids64 = 0;
    run_out a = run_moe(&c, &dw, dx, d32, dwt, NULL, 1);
    c.ids64 = 1;
    run_out b = run_moe(&c, &dw, dx, d64, dwt, NULL, 1);
    cr_expect(!memcmp(a.out, b.out, nx * 2), "seed %llu: int32 and int64 ids differ", (unsigned long long)seed);
    /* checkpoint layouts: W1 unprepared into each order (row-major scales), prepared again */
    for (int order = 0; order < 3; order++) {
      host_weights h2 = hw;
      const size_t rows = 2 * (size_t)c.n, cb = rows * c.k / 2, sb = rows * c.k / 16;
      uint8_t *ck = malloc(cb * c.e), *cs = malloc(sb * c.e);
      h2.w1c = malloc(hw.sz.w1_codes * c.e), h2.w1s = malloc(hw.sz.w1_scales * c.e);
      for (int x2 = 0; x2 < c.e; x2++)
        cr_assert_eq(sk_moe_unprepare_w1(c.wfmt, c.act, order, c.n, c.k, hw.w1c + x2 * hw.sz.w1_codes, hw.w1s + x2 * hw.sz.w1_scales,
                                         ck + x2 * cb, cs + x2 * sb), SK_OK);
      cr_assert_eq(sk_moe_prepare_w1(c.wfmt, c.act, order, SK_MOE_SRC_SCALES_ROWS, c.e, c.n, c.k, ck, cs, h2.w1c, h2.w1s), SK_OK);
      dev_weights dw2 = dw;
      dw2.w1c = gpu_upload(h2.w1c, hw.sz.w1_codes * c.e), dw2.w1s = gpu_upload(h2.w1s, hw.sz.w1_scales * c.e);
      run_out o = run_moe(&c, &dw2, dx, d64, dwt, NULL, 1);
      cr_expect(!memcmp(o.out, b.out, nx * 2), "seed %llu: W1 order %d through prepare_w1 differs", (unsigned long long)seed, order);
      free(o.out), free(o.table);
      CUDA_OK(cudaFree(dw2.w1c));
      CUDA_OK(cudaFree(dw2.w1s));
      free(ck), free(cs), free(h2.w1c), free(h2.w1s);
    }
    free(a.out), free(a.table), free(b.out), free(b.table);
    case_free(&dw, &hw, &in);
  }
}

/* Out-of-range ids (and a bad expert_map entry): flagged, skipped, no out-of-bounds access (the
 * guard bytes of output and scratch); experts with no routes and all tokens on one expert. */
Test(gpu_moe, bad_ids_empty_and_hot_experts, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed;
  skref_rng rng = test_rng("gpu moe bad ids", &seed);
  for (int regime = 0; regime < 2; regime++)
    for (int variant = 0; variant < 3; variant++) {
      moe_case c = base_case(SK_MOE_W4A16, SK_MOE_WFMT_NVFP4, SK_MOE_ACT_SILU, 24, 512, 256, 4, regime ? 96 : 6, regime);
      c.ids64 = 1;
      host_weights hw;
      inputs in;
      case_make(&hw, &in, &c, &rng);
      const size_t nx = in.nx, nr = in.nr;
      uint16_t *x = in.x;
      int64_t *ids = in.ids;
      float *wts = in.wts;
      int32_t *map = NULL;
      unsigned want = 0;
      if (variant == 0) { /* ids outside [0, E) */
        ids[1] = -1, ids[nr - 1] = c.e + 3, ids[nr / 2] = (int64_t)1 << 40;
        want = SK_MOE_ERR_EXPERT_ID;
      } else if (variant == 1) { /* every token on expert 5 (top-1 of each token), the rest unused */
        for (size_t t = 0; t < (size_t)c.m; t++) ids[t * c.topk] = 5;
        for (size_t t = 0; t < (size_t)c.m; t++)
          for (int j = 1; j < c.topk; j++) ids[t * c.topk + j] = 6 + j;
      } else { /* an expert_map with one entry out of range */
        map = malloc(4 * c.e);
        for (int i = 0; i < c.e; i++) map[i] = i;
        map[ids[0]] = c.e + 7;
        want = SK_MOE_ERR_EXPERT_MAP;
      }
      inputs_upload(&in);
      void *dx = in.dx, *dids = in.d64, *dwt = in.dwt;
      void *dmap = map ? gpu_upload(map, 4 * c.e) : NULL;
      dev_weights dw;
      weights_upload(&dw, &hw, c.e);
      run_out o = run_moe(&c, &dw, dx, dids, dwt, dmap, 1);
      cr_expect_eq((unsigned)o.flags, want, "seed %llu variant %d regime %d: error word %d, expected %u", (unsigned long long)seed,
                   variant, regime, o.flags, want);
      skref_moe_weights rw = ref_weights(&hw, &c, c.e);
      skref_moe_routes rt = {c.m, c.topk, ids, wts, c.e_global, map, 0};
      skref_moe_act_params ap = {c.limit, c.alpha, c.beta};
      double *ref = malloc(8 * nx);
      cr_expect_eq(skref_moe_w4a16(&rw, &rt, &ap, x, ref, NULL), want);
      expect_w4a16_close(&c, o.out, ref, variant == 0 ? "bad ids" : variant == 1 ? "hot expert" : "bad map", seed);
      if (o.table) expect_slot_table(&c, ids, map, o.table, seed);
      free(o.out), free(o.table), free(ref), free(map);
      case_free(&dw, &hw, &in);
      if (dmap) CUDA_OK(cudaFree(dmap));
    }
}

/* moe.ep_moe: 2 and 4 ranks, each with its experts (a random assignment) and an expert_map; the
 * partials (zero where a token has no local route) sum to the fused output. */
Test(gpu_moe, ep_partials_sum_to_fused, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed;
  skref_rng rng = test_rng("gpu moe ep", &seed);
  for (int v = 0; v < 4; v++) { /* (regime, recipe): micro / grouped x W4A16 / W4A4 */
    const int regime = v / 2, recipe = v % 2;
    moe_case c = base_case(recipe, SK_MOE_WFMT_NVFP4, SK_MOE_ACT_SILU, 32, 512, 256, 4, regime ? 80 : 3, regime);
    c.a_gs_base = 64.0f;
    host_weights hw;
    inputs in;
    case_make(&hw, &in, &c, &rng);
    inputs_upload(&in);
    const size_t nx = in.nx;
    void *dx = in.dx, *dids = in.d32, *dwt = in.dwt;
    dev_weights dw;
    weights_upload(&dw, &hw, c.e);
    run_out fused = run_moe(&c, &dw, dx, dids, dwt, NULL, 1);
    for (int ranks = 2; ranks <= 4; ranks += 2) {
      int *owner = malloc(sizeof(int) * c.e);
      for (int g = 0; g < c.e; g++) owner[g] = (int)skref_rng_below(&rng, (uint64_t)ranks);
      double *sum = calloc(nx, sizeof(double));
      for (int r = 0; r < ranks; r++) {
        int32_t *map = malloc(4 * c.e);
        int *sel = malloc(sizeof(int) * c.e), el = 0;
        for (int g = 0; g < c.e; g++) map[g] = owner[g] == r ? (sel[el] = g, el++) : -1;
        if (el == 0) map[0] = 0, sel[el++] = 0, owner[0] = r; /* every rank holds an expert */
        host_weights lw;
        weights_select(&lw, &hw, &c, sel, el);
        dev_weights ldw;
        weights_upload(&ldw, &lw, el);
        void *dmap = gpu_upload(map, 4 * c.e);
        moe_case cr = c;
        cr.e = el, cr.e_global = c.e;
        run_out part = run_moe(&cr, &ldw, dx, dids, dwt, dmap, 1);
        cr_expect_eq(part.flags, 0, "seed %llu: rank %d/%d error word %d", (unsigned long long)seed, r, ranks, part.flags);
        for (size_t i = 0; i < nx; i++) sum[i] += skref_bf16_to_float(part.out[i]);
        free(part.out), free(part.table), free(map), free(sel);
        weights_dev_free(&ldw);
        weights_free(&lw);
        CUDA_OK(cudaFree(dmap));
      }
      double peak = 0, max_abs = 0;
      for (size_t i = 0; i < nx; i++) peak = fmax(peak, fabs(skref_bf16_to_float(fused.out[i])));
      const double cos = skref_moe_cosine(fused.out, sum, (size_t)c.m, (size_t)c.k, &max_abs);
      fprintf(stderr, "  ep %s %d ranks regime %d: cosine %.6f max_abs %.4g (peak %.4g)\n", recipe ? "w4a4" : "w4a16", ranks,
              regime, cos, max_abs, peak);
      cr_expect(cos >= 0.999 && max_abs <= 0.03 * peak, "seed %llu: %d ranks: cosine %.6f max_abs %.4g (peak %.4g)",
                (unsigned long long)seed, ranks, cos, max_abs, peak);
      free(owner), free(sum);
    }
    free(fused.out), free(fused.table);
    case_free(&dw, &hw, &in);
  }
}

/* route_topk: ids and weights bit for bit against the reference (fp32 and BF16 logits, ties). */
Test(gpu_moe, route_topk_matches_reference, .init = setup, .fini = teardown, .timeout = 300) {
  uint64_t seed;
  skref_rng rng = test_rng("gpu moe topk", &seed);
  const int es[4] = {8, 128, 1000, 1024}, ks[4] = {1, 4, 8, 10};
  for (int ei = 0; ei < 4; ei++)
    for (int mode = 0; mode < 3; mode++)
      for (int bf = 0; bf < 2; bf++) {
        const int m = 37, e = es[ei], k = ks[(ei + mode) % 4];
        float *lg = malloc(4 * (size_t)m * e);
        uint16_t *lb = malloc(2 * (size_t)m * e);
        for (size_t i = 0; i < (size_t)m * e; i++) {
          /* coarse values: many ties */
          const float v = (float)((int)skref_rng_below(&rng, 64) - 32) * 0.125f;
          lb[i] = skref_float_to_bf16(v), lg[i] = bf ? skref_bf16_to_float(lb[i]) : v + (float)(skref_rng_uniform(&rng) * 1e-3 * (i % 3 == 0));
        }
        int32_t *ids = malloc(4 * (size_t)m * k), *rid = malloc(4 * (size_t)m * k);
        float *w = malloc(4 * (size_t)m * k), *rw = malloc(4 * (size_t)m * k);
        skref_moe_route_topk(lg, m, e, k, mode, rid, rw);
        void *dl = bf ? gpu_upload(lb, 2 * (size_t)m * e) : gpu_upload(lg, 4 * (size_t)m * e);
        void *dids = gpu_poisoned(4 * (size_t)m * k), *dw = gpu_poisoned(4 * (size_t)m * k);
        sk_moe_params p = {0};
        p.logits = dl, p.topk_ids = dids, p.topk_weights = dw, p.m = m, p.topk = k, p.e_global = e, p.topk_mode = mode;
        char name[64];
        snprintf(name, sizeof name, "sk::moe::route_topk<%d>", bf);
        sk_kernel *kern = resolve("moe/route.cuh", name);
        void *args[] = {&p};
        SK_OK_OR_FAIL(sk_kernel_launch_ex(kern, (sk_dim3){(unsigned)((m + 7) / 8), 1, 1}, (sk_dim3){256, 1, 1}, 0, NULL, args,
                                          SK_LAUNCH_OVERLAP_PREVIOUS));
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(ids, dids, 4 * (size_t)m * k, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(w, dw, 4 * (size_t)m * k, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < (size_t)m * k; i++) {
          cr_expect_eq(ids[i], rid[i], "seed %llu E %d k %d mode %d bf16 %d: id [%zu] %d vs %d", (unsigned long long)seed, e, k, mode, bf,
                       i, ids[i], rid[i]);
          cr_expect(!memcmp(&w[i], &rw[i], 4), "seed %llu E %d k %d mode %d bf16 %d: weight [%zu] %a vs %a", (unsigned long long)seed,
                    e, k, mode, bf, i, w[i], rw[i]);
          if (ids[i] != rid[i] || memcmp(&w[i], &rw[i], 4)) break;
        }
        free(lg), free(lb), free(ids), free(rid), free(w), free(rw);
        CUDA_OK(cudaFree(dl));
        CUDA_OK(cudaFree(dids));
        CUDA_OK(cudaFree(dw));
      }
}

/* ---- timing (SK_MOE_BENCH=1 only) -------------------------------------------------------------- */
/* Average µs of `iters` runs of the launch sequence, cycling over `sets` routings. */
static double time_seq(const sk_moe_launch *seq, int nl, sk_moe_params *ps, int sets, int iters) {
  sk_kernel *kern[8];
  for (int i = 0; i < nl; i++) {
    kern[i] = resolve(seq[i].source, seq[i].name);
    if (seq[i].smem > 48 * 1024) SK_OK_OR_FAIL(sk_kernel_set_max_dynamic_shared(kern[i], seq[i].smem));
  }
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  for (int it = -3; it < iters; it++) {
    if (it == 0) CUDA_OK(cudaEventRecord(a, NULL));
    for (int i = 0; i < nl; i++) {
      void *args[] = {&ps[(it + 3) % sets]};
      SK_OK_OR_FAIL(sk_kernel_launch_ex(kern[i], (sk_dim3){seq[i].grid[0], seq[i].grid[1], 1}, (sk_dim3){seq[i].block, 1, 1}, seq[i].smem,
                                        NULL, args, SK_LAUNCH_OVERLAP_PREVIOUS));
    }
  }
  CUDA_OK(cudaEventRecord(b, NULL));
  CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  return 1000.0 * ms / iters;
}

/* One model shape: E experts of random weights (never read back), `sets` random routings. */
static void bench_shape(const char *name, int recipe, int wfmt, int act, int e, int k, int n, int topk, int m, skref_rng *rng) {
  moe_case c = base_case(recipe, wfmt, act, e, k, n, topk, m, sk_moe_regime(m));
  c.a_gs_base = 64.0f, c.combine = SK_MOE_COMBINE_ATOMIC;
  sk_moe_prepared_sizes sz;
  cr_assert_eq(sk_moe_prepared_sizes_of(wfmt, act, n, k, &sz), SK_OK);
  const size_t per_expert = sz.w1_codes + sz.w1_scales + sz.w2_codes + sz.w2_scales;
  dev_weights dw;
  void **slots[4] = {&dw.w1c, &dw.w1s, &dw.w2c, &dw.w2s};
  const size_t bytes[4] = {sz.w1_codes, sz.w1_scales, sz.w2_codes, sz.w2_scales};
  for (int i = 0; i < 4; i++) {
    CUDA_OK(cudaMalloc(slots[i], bytes[i] * e));
    CUDA_OK(cudaMemset(*slots[i], wfmt == SK_MOE_WFMT_NVFP4 && (i & 1) ? 0x38 : 0x77, bytes[i] * e));
  }
  float *gs = malloc(4 * e);
  for (int i = 0; i < e; i++) gs[i] = i & 1 ? 64.0f : 1.0f;
  dw.w1gs = gpu_upload(gs, 4 * e), dw.w2gs = gpu_upload(gs, 4 * e), dw.a1gs = gpu_upload(gs, 4 * e), dw.a2gs = gpu_upload(gs, 4 * e);
  const int sets = 8;
  const size_t nx = (size_t)m * k, nr = (size_t)m * topk;
  uint16_t *x = malloc(2 * nx);
  skref_fill_normal(rng, x, nx, SKREF_BF16, 1.0f, 0.0, 1.0f);
  void *dx = gpu_upload(x, 2 * nx);
  int64_t *ids = malloc(8 * nr);
  int32_t *ids32 = malloc(4 * nr);
  float *wts = malloc(4 * nr);
  sk_moe_dims dims = {m, topk, e, k, n, act, recipe, wfmt, sm_count(), 0, c.combine, 0};
  sk_moe_scratch s;
  cr_assert_eq(sk_moe_scratch_layout(&dims, &s), 0);
  sk_moe_launch seq[8];
  const int nl = sk_moe_launch_sequence(&dims, &s, m, c.regime, seq);
  void *scratch = gpu_zeroed((size_t)s.total), *dout = gpu_zeroed(nx * 2);
  sk_moe_params ps[8];
  void *dids[8], *dwts[8];
  double active_bytes = 0;
  for (int i = 0; i < sets; i++) {
    random_routes(rng, m, topk, e, ids, wts);
    char *used = calloc((size_t)e, 1);
    for (size_t r = 0; r < nr; r++) ids32[r] = (int32_t)ids[r], used[ids[r]] = 1;
    for (int x2 = 0; x2 < e; x2++) active_bytes += used[x2] ? (double)per_expert / sets : 0;
    free(used);
    dids[i] = gpu_upload(ids32, 4 * nr), dwts[i] = gpu_upload(wts, 4 * nr);
    sk_moe_params p = {0};
    p.x = dx, p.topk_ids = dids[i], p.topk_weights = dwts[i];
    p.w1_codes = dw.w1c, p.w1_scales = dw.w1s, p.w2_codes = dw.w2c, p.w2_scales = dw.w2s;
    p.w1_gs = wfmt == SK_MOE_WFMT_NVFP4 ? dw.w1gs : NULL, p.w2_gs = wfmt == SK_MOE_WFMT_NVFP4 ? dw.w2gs : NULL;
    p.a1_gs = dw.a1gs, p.a2_gs = dw.a2gs, p.out = dout, p.scratch = scratch, p.s = s, p.m = m;
    p.topk = topk, p.e = e, p.e_global = e, p.k = k, p.n = n, p.limit = c.limit, p.alpha = c.alpha, p.beta = c.beta;
    p.combine = c.combine;
    ps[i] = p;
  }
  const double us = time_seq(seq, nl, ps, sets, 40);
  const double flops = 2.0 * (double)nr * ((double)sk_moe_w1_rows(act, sk_moe_padded(n)) * k + (double)k * n);
  fprintf(stderr, "BENCH %-28s %s m %5d: %8.2f us  active weights %7.2f MB -> %6.0f GB/s  %6.1f TFLOP/s\n", name,
          recipe ? "w4a4 " : "w4a16", m, us, active_bytes / 1e6, active_bytes / us / 1e3, flops / us / 1e6);
  for (int i = 0; i < sets; i++) {
    CUDA_OK(cudaFree(dids[i]));
    CUDA_OK(cudaFree(dwts[i]));
  }
  weights_dev_free(&dw);
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(scratch));
  CUDA_OK(cudaFree(dout));
  free(gs), free(x), free(ids), free(ids32), free(wts);
}

/* gemm.blockscaled nvfp4 through sk_gemm_mm at M x N x K (its own kernel choice), µs per call. */
static void bench_gemm(int64_t m, int64_t n, int64_t k) {
  const size_t ac = (size_t)(m * k / 2), bc = (size_t)(n * k / 2);
  const size_t as = (size_t)(((m + 127) / 128 * 128) * (k / 16)), bs = (size_t)(((n + 127) / 128 * 128) * (k / 16));
  void *da = gpu_filled(ac, 0x35), *db = gpu_filled(bc, 0x53), *dsa = gpu_filled(as, 0x38), *dsb = gpu_filled(bs, 0x38);
  void *dc = gpu_zeroed((size_t)(m * n * 2));
  const size_t wsb = sk_gemm_workspace_bytes(SK_GEMM_NVFP4, m, n, k);
  void *ws = wsb ? gpu_zeroed(wsb) : NULL;
  int64_t sa[2] = {m, k / 2}, sb[2] = {n, k / 2}, ssa[1] = {(int64_t)as}, ssb[1] = {(int64_t)bs}, scs[2] = {m, n};
  const DLDataType u8 = {kDLUInt, 8, 1}, bf = {kDLBfloat, 16, 1};
  DLTensor ta = tu_device_tensor(da, u8, 2, sa), tb = tu_device_tensor(db, u8, 2, sb), tsa = tu_device_tensor(dsa, u8, 1, ssa),
           tsb = tu_device_tensor(dsb, u8, 1, ssb), tc = tu_device_tensor(dc, bf, 2, scs);
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  const int iters = 40;
  for (int it = -3; it < iters; it++) {
    if (it == 0) CUDA_OK(cudaEventRecord(a, NULL));
    SK_OK_OR_FAIL(sk_gemm_mm(SK_GEMM_NVFP4, &ta, &tsa, &tb, &tsb, NULL, &tc, ws, wsb, NULL));
  }
  CUDA_OK(cudaEventRecord(b, NULL));
  CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  const double us = 1000.0 * ms / iters, bytes = (double)(bc + bs);
  fprintf(stderr, "BENCH gemm nvfp4 %lldx%lldx%lld: %8.2f us  B %7.2f MB -> %6.0f GB/s  %6.1f TFLOP/s (L2-resident when B < 50 MB)\n",
          (long long)m, (long long)n, (long long)k, us, bytes / 1e6, bytes / us / 1e3, 2.0 * m * n * k / us / 1e6);
  CUDA_OK(cudaFree(da));
  CUDA_OK(cudaFree(db));
  CUDA_OK(cudaFree(dsa));
  CUDA_OK(cudaFree(dsb));
  CUDA_OK(cudaFree(dc));
  if (ws) CUDA_OK(cudaFree(ws));
}

Test(gpu_moe, bench, .init = setup, .fini = teardown, .timeout = 600) {
  if (!getenv("SK_MOE_BENCH")) cr_skip_test("SK_MOE_BENCH=1 to time the four model shapes");
  skref_rng rng;
  skref_rng_seed(&rng, 7);
  const struct { const char *name; int wfmt, act, e, k, n, topk; } shapes[] = {
      {"qwen3.5-397b tp4", 0, 0, 512, 4096, 256, 10}, {"deepseek-v4-flash", 1, 0, 256, 6144, 2048, 8},
      {"gpt-oss-120b", 1, 2, 128, 2880, 2880, 4},      {"qwen3-30b-a3b", 0, 0, 128, 2048, 768, 8},
  };
  for (int i = 0; i < 4; i++) {
    bench_shape(shapes[i].name, 0, shapes[i].wfmt, shapes[i].act, shapes[i].e, shapes[i].k, shapes[i].n, shapes[i].topk, 1, &rng);
    bench_shape(shapes[i].name, 0, shapes[i].wfmt, shapes[i].act, shapes[i].e, shapes[i].k, shapes[i].n, shapes[i].topk, 8, &rng);
  }
  bench_shape("qwen3.5-397b tp4", 1, 0, 0, 512, 4096, 256, 10, 1, &rng);
  bench_shape("qwen3-30b-a3b", 0, 0, 0, 128, 2048, 768, 8, 512, &rng);
  bench_shape("qwen3-30b-a3b", 0, 0, 0, 128, 2048, 768, 8, 4096, &rng);
  bench_shape("qwen3-30b-a3b", 1, 0, 0, 128, 2048, 768, 8, 4096, &rng);
  bench_shape("qwen3.5-397b tp4", 0, 0, 0, 512, 4096, 256, 10, 4096, &rng);
  /* the gemm decode kernel reading ~ the same bytes as the micro runs, and the tiled kernel */
  bench_gemm(1, 7168, 4096);
  bench_gemm(1, 28672, 4096);
  bench_gemm(8, 28672, 4096);
  bench_gemm(4096, 8192, 8192);
}
