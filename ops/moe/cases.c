/* ops/moe/cases.c - the harness's case tables for moe.fused_moe and moe.ep_moe
 * (tests/harness/harness.h). Weights: skref_moe_random_weights (prepared layout); x normal BF16;
 * routes k distinct experts per token with weights in [0.1, 1), or routing in the op from normal
 * fp32 logits. References (ops/moe/ref.c): W4A16 in double (bound: row cosine >= 0.9999 and max
 * |err| <= 1% of the output peak, ops/moe/moe.md); NVFP4 W4A4 the kernels' exact trace, compared
 * byte for byte when every dot product of the case is exact in fp32, else with the W4A16 bound;
 * ids and weights written by the op's routing: bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "moe/plan.cuh"
#include "moe/ref.h"
#include "sparkinfer/moe.h"

typedef struct moe_case {
  const char *label;
  int ep, recipe, wfmt, act;
  int e, eg;     /* local experts; global ids (ep: > e; fused: 0 = e) */
  int k, n, topk;
  int m, max_m;  /* tokens of the run; the plan's max_tokens (0 = m) */
  int routing, ids64, on_input, det;
  int scale_mode; /* skref_moe_random_weights: 1 = few-bit scales (exact-trace cases) */
  unsigned flags;
} moe_case;

#define T SKH_TEST
#define G SKH_GPU
#define B SKH_BENCH
#define NG (SKH_GPU | SKH_NO_GRAPH) /* fp32 atomic combine: not bitwise repeatable */
enum { W16 = SK_MOE_RECIPE_W4A16, W4 = SK_MOE_RECIPE_NVFP4 };
enum { NV = SK_MOE_WEIGHTS_NVFP4, MX = SK_MOE_WEIGHTS_MXFP4 };
enum { SILU = SK_MOE_ACTIVATION_SILU, RELU2 = SK_MOE_ACTIVATION_RELU2, OAI = SK_MOE_ACTIVATION_SWIGLU_OAI };

/* label, ep, recipe, weights, act, E, EG, K, N, topk, m, max_m, routing, ids64, on_input, det,
 * scale_mode, flags */
static const moe_case fused_cases[] = {
    {"w4a16 micro m1 e8 k2", 0, W16, NV, SILU, 8, 0, 256, 128, 2, 1, 0, 0, 0, 0, 1, 0, T},
    {"w4a16 micro m3 of 64 relu2 int64", 0, W16, NV, RELU2, 16, 0, 512, 384, 4, 3, 64, 0, 1, 0, 1, 0, T},
    {"w4a16 micro m8 mxfp4 swiglu-oai", 0, W16, MX, OAI, 8, 0, 2880, 2880, 4, 8, 0, 0, 0, 0, 1, 0, G},
    {"w4a16 micro m2 e512 k10", 0, W16, NV, SILU, 512, 0, 512, 256, 10, 2, 0, 0, 0, 0, 1, 0, G},
    {"w4a16 grouped m64 det", 0, W16, NV, SILU, 8, 0, 512, 256, 2, 64, 0, 0, 0, 0, 1, 0, T},
    {"w4a16 grouped m40 of 512 atomic", 0, W16, NV, RELU2, 16, 0, 512, 384, 4, 40, 512, 0, 0, 0, 0, 0, NG},
    {"w4a16 grouped m512 mxfp4 det", 0, W16, MX, SILU, 32, 0, 1024, 512, 8, 512, 0, 0, 0, 0, 1, 0, G},
    {"w4a16 grouped weight on input", 0, W16, NV, SILU, 16, 0, 512, 256, 4, 96, 0, 0, 0, 1, 1, 0, G},
    {"w4a16 grouped m16384", 0, W16, NV, SILU, 8, 0, 256, 128, 1, 16384, 0, 0, 0, 0, 1, 0, G},
    {"routing topk renorm micro", 0, W16, NV, SILU, 64, 0, 512, 256, 8, 4, 0, SK_MOE_ROUTES_TOPK_RENORM, 0, 0, 1, 0, T},
    {"routing softmax topk grouped", 0, W16, NV, SILU, 32, 0, 512, 256, 4, 100, 0, SK_MOE_ROUTES_SOFTMAX_TOPK, 0, 0, 1, 0, G},
    {"routing raw topk", 0, W16, NV, SILU, 16, 0, 256, 128, 2, 6, 0, SK_MOE_ROUTES_TOPK, 0, 0, 1, 0, G},
    {"nvfp4 exact silu micro", 0, W4, NV, SILU, 2, 0, 128, 128, 1, 2, 0, 0, 0, 0, 1, 1, T},
    {"nvfp4 exact relu2 grouped", 0, W4, NV, RELU2, 2, 0, 128, 128, 1, 128, 0, 0, 0, 0, 1, 1, T},
    {"nvfp4 exact swiglu-oai grouped atomic", 0, W4, NV, OAI, 2, 0, 128, 128, 1, 768, 0, 0, 0, 0, 0, 1, NG},
    {"nvfp4 micro e64", 0, W4, NV, SILU, 64, 0, 1024, 512, 8, 4, 0, 0, 0, 0, 1, 0, G},
    {"nvfp4 grouped e64", 0, W4, NV, SILU, 64, 0, 1024, 512, 8, 256, 0, 0, 0, 0, 1, 0, G},
    /* bench: model shapes (K / N / E / k), decode and prefill */
    {"bench qwen3-30b-a3b m1", 0, W16, NV, SILU, 128, 0, 2048, 768, 8, 1, 0, 0, 0, 0, 0, 0, B},
    {"bench qwen3-30b-a3b m8", 0, W16, NV, SILU, 128, 0, 2048, 768, 8, 8, 0, 0, 0, 0, 0, 0, B},
    {"bench qwen3-30b-a3b m4096", 0, W16, NV, SILU, 128, 0, 2048, 768, 8, 4096, 0, 0, 0, 0, 0, 0, B},
    {"bench qwen3-30b-a3b nvfp4 m4096", 0, W4, NV, SILU, 128, 0, 2048, 768, 8, 4096, 0, 0, 0, 0, 0, 0, B},
    {"bench gpt-oss-120b m1", 0, W16, MX, OAI, 128, 0, 2880, 2880, 4, 1, 0, 0, 0, 0, 0, 0, B},
    {"bench gpt-oss-120b m8", 0, W16, MX, OAI, 128, 0, 2880, 2880, 4, 8, 0, 0, 0, 0, 0, 0, B},
    {"bench deepseek-v4-flash m1", 0, W16, MX, SILU, 256, 0, 6144, 2048, 8, 1, 0, 0, 0, 0, 0, 0, B},
    {"bench qwen3.5-397b tp4 m1", 0, W16, NV, SILU, 512, 0, 4096, 256, 10, 1, 0, 0, 0, 0, 0, 0, B},
};

static const moe_case ep_cases[] = {
    {"ep micro w4a16 16 of 32", 1, W16, NV, SILU, 16, 32, 512, 256, 4, 3, 0, 0, 0, 0, 1, 0, T},
    {"ep grouped w4a16 8 of 32", 1, W16, NV, SILU, 8, 32, 512, 256, 4, 80, 0, 0, 0, 0, 1, 0, T},
    {"ep micro nvfp4 16 of 32", 1, W4, NV, SILU, 16, 32, 512, 256, 4, 3, 0, 0, 0, 0, 1, 0, G},
    {"ep grouped routing 32 of 128", 1, W16, NV, SILU, 32, 128, 512, 256, 8, 64, 0, SK_MOE_ROUTES_TOPK_RENORM, 0, 0, 1, 0, G},
    {"bench ep qwen3-30b-a3b 32 of 128 m1", 1, W16, NV, SILU, 32, 128, 2048, 768, 8, 1, 0, 0, 0, 0, 0, 0, B},
};

#define N_FUSED (sizeof fused_cases / sizeof fused_cases[0])
#define N_EP (sizeof ep_cases / sizeof ep_cases[0])

static const moe_case *case_of(const skh_case *c) { return c->param[0] ? &ep_cases[c->param[1]] : &fused_cases[c->param[1]]; }
static int eg_of(const moe_case *a) { return a->eg ? a->eg : a->e; }

static void get(int ep, size_t i, skh_case *c) {
  const moe_case *a = ep ? &ep_cases[i] : &fused_cases[i];
  memset(c, 0, sizeof *c);
  c->param[0] = ep;
  c->param[1] = (int64_t)i;
  c->flags = a->flags;
  snprintf(c->name, sizeof c->name, "%s", a->label);
  sk_moe_caps caps = SK_MOE_CAPS_INIT;
  caps.recipe = (sk_moe_recipe)a->recipe;
  caps.weights = (sk_moe_weight_format)a->wfmt;
  caps.activation = (sk_moe_activation)a->act;
  caps.num_experts = a->e;
  caps.num_global_experts = eg_of(a);
  caps.hidden = a->k;
  caps.intermediate = a->n;
  caps.topk = a->topk;
  caps.max_tokens = a->max_m ? a->max_m : a->m;
  caps.ids_int64 = a->ids64;
  caps.routing = (sk_moe_routing)a->routing;
  caps.apply_router_weight_on_input = a->on_input;
  caps.deterministic = a->det;
  SKH_SET_CAPS(c, caps);
  skh_case_sym(c, "M", a->m);
}

/* Tensor indices (moe.h's order). */
enum { X, IDS, WTS, LOGITS, W1C, W1S, W2C, W2S, W1GS, W2GS, A1GS, A2GS, MAP, OUT };

static void *host_of(skh_tensor *t, int i) { return t[i].present ? t[i].host : NULL; }

static void fill(const skh_case *c, skh_tensor *t, size_t n, skref_rng *rng) {
  (void)n;
  const moe_case *a = case_of(c);
  const int eg = eg_of(a);
  skh_fill_normal(&t[X], rng, 1.0);
  /* Exact-trace cases: activation global scales large enough that NVFP4 codes use their range. */
  skref_moe_random_weights(rng, a->wfmt, a->act, a->e, a->n, a->k, a->scale_mode, t[W1C].host, t[W1S].host, t[W2C].host,
                           t[W2S].host, host_of(t, W1GS), host_of(t, W2GS), host_of(t, A1GS), host_of(t, A2GS), 64.0f);
  /* k distinct global ids per token, weights in [0.1, 1) (overwritten when the op routes) */
  int *perm = malloc(sizeof(int) * (size_t)eg);
  for (int tok = 0; tok < a->m; tok++) {
    for (int i = 0; i < eg; i++) perm[i] = i;
    for (int j = 0; j < a->topk; j++) {
      const int s = j + (int)skref_rng_below(rng, (uint64_t)(eg - j)), x = perm[j];
      perm[j] = perm[s], perm[s] = x;
      skh_set(&t[IDS], t[IDS].host, (size_t)tok * a->topk + j, perm[j]);
      skh_set(&t[WTS], t[WTS].host, (size_t)tok * a->topk + j, 0.1 + 0.9 * skref_rng_uniform(rng));
    }
  }
  /* Never all zeros (top-1 over few experts can draw expert 0 for every token) */
  size_t nonzero = 0;
  for (size_t r = 0; r < (size_t)a->m * a->topk; r++) nonzero += skh_get(&t[IDS], t[IDS].host, r) != 0;
  if (!nonzero && eg > 1) skh_set(&t[IDS], t[IDS].host, (size_t)a->m * a->topk - 1, 1);
  if (t[LOGITS].present) skh_fill_normal(&t[LOGITS], rng, 1.0);
  if (t[MAP].present) { /* a random E of the EG global experts live here, in random local order */
    for (int i = 0; i < eg; i++) perm[i] = i;
    for (int i = 0; i < eg; i++) {
      const int s = i + (int)skref_rng_below(rng, (uint64_t)(eg - i)), x = perm[i];
      perm[i] = perm[s], perm[s] = x;
    }
    int32_t *map = t[MAP].host;
    for (int i = 0; i < eg; i++) map[i] = -1;
    for (int l = 0; l < a->e; l++) map[perm[l]] = l;
  }
  free(perm);
}

/* The exact trace's inexact dot-product count of the case just referenced (tolerance reads it). */
static long long last_inexact;

static void reference(const skh_case *c, skh_tensor *t, size_t n) {
  (void)n;
  const moe_case *a = case_of(c);
  const int eg = eg_of(a);
  const size_t routes = (size_t)a->m * a->topk, nx = (size_t)a->m * a->k;
  int64_t *ids = malloc(sizeof(int64_t) * routes);
  float *wts = malloc(sizeof(float) * routes);
  if (a->routing != SK_MOE_ROUTES_GIVEN) {
    int32_t *ids32 = malloc(sizeof(int32_t) * routes);
    skref_moe_route_topk(t[LOGITS].host, a->m, eg, a->topk, a->routing - 1, ids32, wts);
    for (size_t r = 0; r < routes; r++) ids[r] = ids32[r];
    free(ids32);
  } else { /* given routes: the op leaves them as they are */
    for (size_t r = 0; r < routes; r++) ids[r] = (int64_t)skh_get(&t[IDS], t[IDS].host, r);
    memcpy(wts, t[WTS].host, sizeof(float) * routes);
  }
  for (size_t r = 0; r < routes; r++) {
    skh_set(&t[IDS], t[IDS].expect, r, (double)ids[r]);
    skh_set(&t[WTS], t[WTS].expect, r, wts[r]);
  }
  const skref_moe_weights w = {a->wfmt, a->act, a->e, a->k, a->n, t[W1C].host, t[W1S].host, t[W2C].host, t[W2S].host,
                               host_of(t, W1GS), host_of(t, W2GS), host_of(t, A1GS), host_of(t, A2GS)};
  const skref_moe_routes rt = {a->m, a->topk, ids, wts, eg, host_of(t, MAP), a->on_input};
  const skref_moe_act_params ap = {a->act == OAI ? 7.0f : INFINITY, 1.702f, 1.0f};
  if (a->recipe == W16) {
    double *o = malloc(sizeof(double) * nx);
    skref_moe_w4a16(&w, &rt, &ap, t[X].host, o, NULL);
    for (size_t i = 0; i < nx; i++) skh_set(&t[OUT], t[OUT].expect, i, o[i]);
    t[OUT].exact = o; /* compared before the output's BF16 rounding */
  } else {
    last_inexact = 0;
    skref_moe_nvfp4_trace(&w, &rt, &ap, t[X].host, t[OUT].expect, &last_inexact);
  }
  free(ids);
  free(wts);
}

static void tolerance(const skh_case *c, const skh_tensor *t, size_t i, skh_tolerance *tol) {
  const moe_case *a = case_of(c);
  if (i != OUT || (a->recipe == W4 && last_inexact == 0)) { /* ids, weights; the exact trace */
    *tol = (skh_tolerance){SKH_EXACT, 0, 0, 0, 0};
    return;
  }
  double peak = 0;
  for (size_t j = 0; j < skh_numel(&t[i]); j++) peak = fmax(peak, fabs(skh_get(&t[i], t[i].expect, j)));
  *tol = (skh_tolerance){SKH_CLOSE, 1e-2 * peak + 1e-6, 0, 0.9999, 0};
}

/* Bytes: the prepared weights of the experts a random routing touches (expected count), x and
 * out. Flops: two GEMMs per route. */
static void cost(const skh_case *c, const skh_tensor *t, size_t n, double *bytes, double *flops, const char **metric) {
  (void)t, (void)n;
  const moe_case *a = case_of(c);
  const double eg = eg_of(a), p_miss = pow(1.0 - a->topk / eg, a->m);
  const double active = a->e * (1.0 - p_miss);
  sk_moe_prepared_sizes sz;
  sk_moe_prepared_sizes_of(a->wfmt, a->act, a->n, a->k, &sz);
  *bytes = active * (double)(sz.w1_codes + sz.w1_scales + sz.w2_codes + sz.w2_scales) + 4.0 * a->m * a->k;
  const double r1 = a->act == RELU2 ? a->n : 2.0 * a->n;
  *flops = 2.0 * a->m * a->topk * (a->e / eg) * (r1 * a->k + (double)a->n * a->k);
  *metric = a->m <= SK_MOE_MICRO_MAX_TOKENS ? "GB/s" : "TFLOP/s";
}

static size_t count(int ep) { return ep ? N_EP : N_FUSED; }

/* variant: 0 fused_moe, 1 ep_moe */
const skh_op skh_op_moe_fused_moe = {"moe.fused_moe", count, get, NULL, fill, reference, tolerance, cost, 0};
const skh_op skh_op_moe_ep_moe = {"moe.ep_moe", count, get, NULL, fill, reference, tolerance, cost, 1};
