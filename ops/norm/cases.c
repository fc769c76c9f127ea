/* ops/norm/cases.c - the harness's case table for norm.mhc (tests/harness/harness.h): the three
 * entries over hidden sizes (256 .. 7168, odd tile counts too), T on every path (fused decode,
 * tensor-core partials, run_pre's split schedule; both sides of each default crossover), every
 * norm weight, Sinkhorn rounds, epsilons and three input distributions (cases.h), plans whose
 * max_tokens exceeds T, and the bench shapes. References: ops/norm/ref_mhc.c, compared stage by
 * stage with the tolerances of ops/norm/norm.mhc.md ("Tolerances"): post_pre's pre half is
 * referenced on the GPU's own residual_out (the GPU suite calls reference after the run). */
#include "norm/cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "norm/ref_mhc.h"

static const char *const weight_names[] = {"none", "bf16", "fp32"};
static const char *const data_names[] = {"", " data=upstream", " data=small_fn"};
static const char *const eps_names[] = {"", " eps=large", " eps=no_hc"};
static const float eps_sets[3][3] = {{1e-6f, 1e-6f, 1e-6f}, {0.3f, 0.02f, 0.7f}, {1e-5f, 0.0f, 1e-5f}};

void skh_mhc_case(const skh_mhc_spec *s, skh_case *c) {
  memset(c, 0, sizeof *c);
  sk_mhc_caps caps = SK_MHC_CAPS_INIT;
  caps.hidden = s->hidden;
  caps.max_tokens = s->max_tokens > 0 ? s->max_tokens : s->tokens;
  caps.norm_weight = s->norm_weight;
  caps.sinkhorn_iters = s->sinkhorn_iters > 0 ? s->sinkhorn_iters : 20;
  caps.rms_eps = eps_sets[s->eps][0];
  caps.hc_eps = eps_sets[s->eps][1];
  caps.norm_eps = eps_sets[s->eps][2];
  SKH_SET_CAPS(c, caps);
  c->entry = s->entry;
  skh_case_sym(c, "T", s->tokens);
  c->param[SKH_MHC_P_DATA] = s->data;
  c->param[SKH_MHC_P_EPS] = s->eps;
  c->flags = s->flags;
  char extra[64] = "";
  if (caps.max_tokens != s->tokens) snprintf(extra, sizeof extra, " max_t=%lld", (long long)caps.max_tokens);
  if (caps.sinkhorn_iters != 20)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " iters=%d", caps.sinkhorn_iters);
  snprintf(c->name, sizeof c->name, "%s H=%lld T=%lld w=%s%s%s%s", s->entry, (long long)s->hidden, (long long)s->tokens,
           weight_names[s->norm_weight], extra, eps_names[s->eps], data_names[s->data]);
}

/* ---- the table ---------------------------------------------------------------------------------
 * 1. CPU: a few small plans per entry (with the harness's offline plans for sm_90a / sm_120a /
 *    sm_121a), also run on the GPU.
 * 2. GPU grid: every entry x H {256, 1024, 2048, 4096, 7168} x T {1, 2, 8, 16, 17, 33, 100, 130,
 *    255, 256}: T <= 16 (H <= 4096) / 8 (H = 7168) the fused decode launch, above it the
 *    tensor-core partials, run_pre's split schedule from 256; weights, distributions, epsilons and
 *    Sinkhorn rounds vary along the grid.
 * 3. GPU specials: prefill sizes (T = 4133: a partial last group), the split schedule's partial
 *    last rounds (777), odd tile counts (1280: finalize slices of 256; 1536: 512), one plan
 *    serving a smaller T (max_tokens 4096 at T = 1, 5, 100), 1 and 100 Sinkhorn rounds.
 * 4. Bench: bench_mhc's shapes (H 2048 / 4096 / 7168, T 1 .. 4096, bf16 weight, 20 rounds). */

static const char *const entries[] = {"post", "pre", "post_pre"};
static const int64_t grid_h[] = {256, 1024, 2048, 4096, 7168};
static const int64_t grid_t[] = {1, 2, 8, 16, 17, 33, 100, 130, 255, 256};
static const int64_t bench_h[] = {2048, 4096, 7168};
static const int64_t bench_t[] = {1, 8, 16, 128, 256, 512, 1024, 4096};
#define LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Per entry: {H, T, max_tokens, weight, iters, eps, data, flags}. */
typedef struct row {
  int64_t h, t, max_t;
  sk_mhc_norm_weight w;
  int iters;
  skh_mhc_eps eps;
  skh_mhc_data data;
  unsigned flags;
} row;

static const row cpu_rows[] = {
    {256, 1, 0, SK_MHC_NORM_NONE, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_TEST},
    {1536, 33, 0, SK_MHC_NORM_BF16, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_UPSTREAM, SKH_TEST},
    {7168, 300, 4096, SK_MHC_NORM_FP32, 0, SKH_MHC_EPS_LARGE, SKH_MHC_DATA_MAIN, SKH_TEST},
};

static const row special_rows[] = {
    {2048, 4133, 0, SK_MHC_NORM_BF16, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU},
    {1024, 4096, 0, SK_MHC_NORM_FP32, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_UPSTREAM, SKH_GPU},
    {7168, 1024, 0, SK_MHC_NORM_NONE, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_SMALL_FN, SKH_GPU},
    {4096, 777, 0, SK_MHC_NORM_BF16, 0, SKH_MHC_EPS_NO_HC, SKH_MHC_DATA_MAIN, SKH_GPU},
    {1280, 513, 0, SK_MHC_NORM_NONE, 1, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU},
    {1536, 600, 0, SK_MHC_NORM_FP32, 0, SKH_MHC_EPS_LARGE, SKH_MHC_DATA_UPSTREAM, SKH_GPU},
    {1280, 3, 0, SK_MHC_NORM_BF16, 100, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_UPSTREAM, SKH_GPU},
    {4096, 1, 4096, SK_MHC_NORM_BF16, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU},
    {7168, 5, 4096, SK_MHC_NORM_FP32, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU},
    {2048, 100, 4096, SK_MHC_NORM_NONE, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_SMALL_FN, SKH_GPU},
};

#define N_CPU (LEN(entries) * LEN(cpu_rows))
#define N_GRID (LEN(entries) * LEN(grid_h) * LEN(grid_t))
#define N_SPECIAL (LEN(entries) * LEN(special_rows))
#define N_BENCH (LEN(entries) * LEN(bench_h) * LEN(bench_t))

static size_t count(int variant) { return (void)variant, N_CPU + N_GRID + N_SPECIAL + N_BENCH; }

static skh_mhc_spec spec_of_row(const char *entry, const row *r) {
  return (skh_mhc_spec){entry, r->h, r->t, r->max_t, r->w, r->iters, r->eps, r->data, r->flags};
}

static skh_mhc_spec spec_of(size_t i) {
  if (i < N_CPU) return spec_of_row(entries[i / LEN(cpu_rows)], &cpu_rows[i % LEN(cpu_rows)]);
  i -= N_CPU;
  if (i < N_GRID) {
    const size_t per_entry = LEN(grid_h) * LEN(grid_t), k = i % per_entry;
    skh_mhc_spec s = {entries[i / per_entry], grid_h[k / LEN(grid_t)], grid_t[k % LEN(grid_t)], 0,
                      (sk_mhc_norm_weight)(i % 3), 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_GPU};
    if (i % 5 == 3) s.data = SKH_MHC_DATA_UPSTREAM;
    else if (i % 5 == 4) s.data = SKH_MHC_DATA_SMALL_FN;
    if (i % 7 == 2) s.eps = SKH_MHC_EPS_LARGE;
    else if (i % 7 == 5) s.eps = SKH_MHC_EPS_NO_HC;
    if (i % 11 == 6) s.sinkhorn_iters = 1;
    else if (i % 13 == 9) s.sinkhorn_iters = 3;
    return s;
  }
  i -= N_GRID;
  if (i < N_SPECIAL) return spec_of_row(entries[i / LEN(special_rows)], &special_rows[i % LEN(special_rows)]);
  i -= N_SPECIAL;
  const size_t per_entry = LEN(bench_h) * LEN(bench_t), k = i % per_entry;
  return (skh_mhc_spec){entries[i / per_entry], bench_h[k / LEN(bench_t)], bench_t[k % LEN(bench_t)], 0,
                        SK_MHC_NORM_BF16, 0, SKH_MHC_EPS_DEFAULT, SKH_MHC_DATA_MAIN, SKH_BENCH};
}

static void get(int variant, size_t i, skh_case *c) {
  (void)variant;
  const skh_mhc_spec s = spec_of(i);
  skh_mhc_case(&s, c);
}

/* ---- inputs ---------------------------------------------------------------------------------- */

static const sk_mhc_caps *caps_of(const skh_case *c) { return (const sk_mhc_caps *)(const void *)c->caps; }

static skh_tensor *named(skh_tensor *t, size_t n, const char *name) { return skh_tensor_named(t, n, name); }
static const skh_tensor *named_const(const skh_tensor *t, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name)) return &t[i];
  return NULL;
}

static void fill_uniform(skh_tensor *t, skref_rng *rng, double lo, double hi) {
  const size_t n = skh_numel(t);
  for (size_t i = 0; i < n; i++) skh_set(t, t->host, i, lo + (hi - lo) * skref_rng_uniform(rng));
}

/* post / comb as a previous pre leaves them: gates in (0, 2) and Sinkhorn matrices of random
 * mixes (upstream's distribution), else uniform. */
static void fill_mix_back_coefficients(skh_tensor *post, skh_tensor *comb, skh_mhc_data data, skref_rng *rng) {
  if (data != SKH_MHC_DATA_UPSTREAM) {
    fill_uniform(post, rng, 0.1, 1.9);
    fill_uniform(comb, rng, 0.0, 0.5);
    return;
  }
  float scale[3], base[24];
  for (int i = 0; i < 3; i++) scale[i] = (float)(skref_rng_normal(rng) / 3);
  for (int i = 0; i < 24; i++) base[i] = (float)(skref_rng_normal(rng) / 5);
  const size_t tokens = (size_t)post->shape[0];
  for (size_t t = 0; t < tokens; t++) {
    double mixes[24], pre[4], p[4], cm[16];
    for (int m = 0; m < 24; m++) mixes[m] = skref_rng_normal(rng);
    skref_mhc_split_sinkhorn(mixes, scale, base, 1e-6, 20, pre, p, cm);
    for (size_t k = 0; k < 4; k++) skh_set(post, post->host, 4 * t + k, p[k]);
    for (size_t k = 0; k < 16; k++) skh_set(comb, comb->host, 16 * t + k, cm[k]);
  }
}

static void fill(const skh_case *c, skh_tensor *t, size_t n, skref_rng *rng) {
  const skh_mhc_data data = (skh_mhc_data)c->param[SKH_MHC_P_DATA];
  const int upstream = data == SKH_MHC_DATA_UPSTREAM;
  const int64_t h = caps_of(c)->hidden;
  skh_tensor *x = named(t, n, "x"), *res = named(t, n, "residual");
  skh_fill_normal(x, rng, upstream ? 0.25 : 1.0);
  if (res) skh_fill_normal(res, rng, upstream ? 1.0 / 3 : 1.0);
  if (!strcmp(c->entry, "post")) {
    fill_mix_back_coefficients(named(t, n, "post"), named(t, n, "comb"), data, rng);
    return;
  }
  if (res) fill_mix_back_coefficients(named(t, n, "prev_post"), named(t, n, "prev_comb"), data, rng);
  /* fn [24, 4H]; run_pre takes it summed over its 4 stream blocks (in double, rounded to fp32). */
  const size_t fn_elems = (size_t)24 * 4 * (size_t)h;
  float *fn = malloc(fn_elems * sizeof(float));
  if (!fn) return; /* the reference and the comparison then fail on the zero inputs */
  const double bound = data == SKH_MHC_DATA_SMALL_FN ? 0.01 : 1.0 / sqrt(4.0 * (double)h);
  for (size_t i = 0; i < fn_elems; i++)
    fn[i] = (float)(upstream ? skref_rng_normal(rng) / 64 : (2 * skref_rng_uniform(rng) - 1) * bound);
  skh_tensor *fn_t = named(t, n, "fn");
  if (fn_t) memcpy(fn_t->host, fn, fn_elems * sizeof(float));
  else skref_mhc_sum_fn_streams((int)h, fn, named(t, n, "fn_pre")->host);
  free(fn);
  skh_tensor *scale = named(t, n, "hc_scale"), *base = named(t, n, "hc_base"), *w = named(t, n, "norm_weight");
  if (upstream) {
    skh_fill_normal(scale, rng, 1.0 / 3);
    skh_fill_normal(base, rng, 1.0 / 5);
  } else {
    fill_uniform(scale, rng, 0.5, 1.5);
    fill_uniform(base, rng, -0.5, 0.5);
  }
  if (!w->present) return;
  if (data != SKH_MHC_DATA_MAIN) skh_fill_normal(w, rng, 1.0);
  else if (w->dtype.code == kDLBfloat)
    for (int64_t i = 0; i < h; i++) skh_set(w, w->host, (size_t)i, 1.0 + 0.3 * skref_rng_normal(rng));
  else fill_uniform(w, rng, 0.5, 1.5);
}

/* ---- reference ------------------------------------------------------------------------------- */

static double *doubles(size_t n) { return malloc((n ? n : 1) * sizeof(double)); }

/* Give an output its exact values (taking `exact`) and magnitudes, and its expected bytes. */
static void expect_values(skh_tensor *o, double *exact, double *magnitude) {
  const size_t n = skh_numel(o);
  for (size_t i = 0; i < n; i++) skh_set(o, o->expect, i, exact[i]);
  free(o->exact);
  free(o->magnitude);
  o->exact = exact;
  o->magnitude = magnitude;
}

/* The mix-back of x, residual, post, comb into `o` (post's out, post_pre's residual_out). */
static void reference_mix_back(int tokens, int h, const skh_tensor *x, const skh_tensor *res, const skh_tensor *post,
                               const skh_tensor *comb, skh_tensor *o) {
  const size_t n = skh_numel(o);
  double *exact = doubles(n), *magnitude = doubles(n);
  if (!exact || !magnitude) {
    free(exact);
    free(magnitude);
    return; /* expect stays zero: the comparison fails */
  }
  skref_mhc_post(tokens, h, x->host, res->host, post->host, comb->host, exact);
  skref_mhc_post_magnitude(tokens, h, x->host, res->host, post->host, comb->host, magnitude);
  expect_values(o, exact, magnitude);
}

static void reference(const skh_case *c, skh_tensor *t, size_t n) {
  const sk_mhc_caps *caps = caps_of(c);
  const int h = (int)caps->hidden, tokens = (int)named(t, n, "x")->shape[0];
  if (!strcmp(c->entry, "post")) {
    reference_mix_back(tokens, h, named(t, n, "x"), named(t, n, "residual"), named(t, n, "post"), named(t, n, "comb"),
                       named(t, n, "out"));
    return;
  }
  const skh_tensor *w = named(t, n, "norm_weight");
  const skref_mhc_config cfg = {h,
                                caps->rms_eps,
                                caps->hc_eps,
                                caps->sinkhorn_iters,
                                named(t, n, "hc_scale")->host,
                                named(t, n, "hc_base")->host,
                                !w->present ? SKREF_MHC_NORM_NONE
                                : w->dtype.code == kDLBfloat ? SKREF_MHC_NORM_BF16
                                                             : SKREF_MHC_NORM_F32,
                                w->present ? w->host : NULL,
                                caps->norm_eps};
  skh_tensor *ro = named(t, n, "residual_out"), *y = named(t, n, "y"), *post = named(t, n, "post"),
             *comb = named(t, n, "comb");
  const size_t th = (size_t)tokens * (size_t)h;
  double *py = doubles(th), *ymag = doubles(th), *ppost = doubles((size_t)tokens * 4), *pcomb = doubles((size_t)tokens * 16);
  skref_mhc_coeffs *co = malloc((tokens ? (size_t)tokens : 1) * sizeof *co);
  if (!py || !ymag || !ppost || !pcomb || !co) {
    free(py), free(ymag), free(ppost), free(pcomb), free(co);
    return;
  }
  const uint16_t *streams; /* what the pre half read */
  if (!strcmp(c->entry, "pre")) {
    /* residual_out: exact copies of x (compared bytewise) */
    skref_mhc_pre(&cfg, tokens, named(t, n, "x")->host, named(t, n, "fn_pre")->host, ro->expect, ppost, pcomb, py, co);
    streams = ro->expect;
  } else {
    reference_mix_back(tokens, h, named(t, n, "x"), named(t, n, "residual"), named(t, n, "prev_post"),
                       named(t, n, "prev_comb"), ro);
    /* Stage by stage: the pre half on the GPU's own bf16 streams (a stream element rounding the
     * other way moves a mix by ~1e-4, past the post / comb tolerance). */
    streams = ro->host;
    skref_mhc_pre_streams(&cfg, tokens, streams, named(t, n, "fn")->host, ppost, pcomb, py, co);
  }
  skref_mhc_y_magnitude(&cfg, tokens, streams, co, ymag);
  free(co);
  expect_values(y, py, ymag);
  expect_values(post, ppost, NULL);
  expect_values(comb, pcomb, NULL);
}

/* ---- tolerances (norm.mhc.md, "Tolerances") -------------------------------------------------- */

static void tolerance(const skh_case *c, const skh_tensor *t, size_t i, skh_tolerance *tol) {
  const char *name = t[i].name;
  if (!strcmp(name, "residual_out") && !strcmp(c->entry, "pre")) {
    tol->check = SKH_EXACT; /* 4 bit copies of x */
  } else if (!strcmp(name, "out") || !strcmp(name, "residual_out")) {
    *tol = (skh_tolerance){.check = SKH_CLOSE, .ulps = 1, .magnitude_rel = 0x1p-21};
  } else if (!strcmp(name, "y")) {
    const int normed = caps_of(c)->norm_weight != SK_MHC_NORM_NONE;
    *tol = (skh_tolerance){.check = SKH_CLOSE, .ulps = normed ? 3 : 1, .magnitude_rel = 4e-6};
  } else { /* post, comb (fp32) */
    *tol = (skh_tolerance){.check = SKH_CLOSE, .max_abs = 2e-6, .rel = 1e-5};
  }
}

/* ---- cost: every input read once, every output written once (bench_mhc's count) -------------- */

static void cost(const skh_case *c, const skh_tensor *t, size_t n, double *bytes, double *flops, const char **metric) {
  const double h = (double)caps_of(c)->hidden, tokens = (double)named_const(t, n, "x")->shape[0];
  const skh_tensor *w = named_const(t, n, "norm_weight");
  const double weight = w && w->present ? (double)w->bytes : 0.0;
  if (!strcmp(c->entry, "post")) *bytes = tokens * h * 2 + 2 * 4 * tokens * h * 2 + tokens * 80;
  else if (!strcmp(c->entry, "pre"))
    *bytes = tokens * h * 2 + 24 * h * 4 + weight + 4 * tokens * h * 2 + tokens * h * 2 + tokens * 80;
  else *bytes = tokens * h * 2 + 4 * tokens * h * 2 + 96 * h * 4 + weight + 4 * tokens * h * 2 + tokens * h * 2 + tokens * 160;
  *flops = 0;
  *metric = "GB/s";
}

const skh_op skh_op_norm_mhc = {"norm.mhc", count, get, NULL, fill, reference, tolerance, cost};
