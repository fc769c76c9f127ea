/* ops/norm/cases.h - norm.mhc's harness cases (cases.c) as a builder, for the op's own GPU
 * suite (tests/gpu/test_mhc_gpu.c), which runs them under tuning overrides. */
#ifndef SK_OPS_NORM_CASES_H
#define SK_OPS_NORM_CASES_H

#include "harness/harness.h"
#include "sparkinfer/norm.h"

/* Input distributions (skh_case.param[SKH_MHC_P_DATA]). */
typedef enum skh_mhc_data {
  SKH_MHC_DATA_MAIN = 0,     /* streams N(0,1), post U[0.1,1.9], comb U[0,0.5], fn U(+-1/sqrt(4H)),
                                hc_scale U[0.5,1.5], hc_base U[-0.5,0.5], weight U[0.5,1.5] / 1+N(0,0.3) */
  SKH_MHC_DATA_UPSTREAM = 1, /* upstream b12x's test: residual N(0,1/3), x N(0,1/4), fn N(0,1/64),
                                hc_scale N(0,1/3), hc_base N(0,1/5), weight N(0,1), post / comb
                                from a pre of random mixes */
  SKH_MHC_DATA_SMALL_FN = 2, /* streams N(0,1), fn U(+-0.01), weight N(0,1) */
} skh_mhc_data;

/* Epsilon sets (skh_case.param[SKH_MHC_P_EPS]): all 1e-6; rms 0.3, hc 0.02, norm 0.7 (each
 * visible in the outputs, so a swapped argument shows); hc_eps 0, rms / norm 1e-5. */
typedef enum skh_mhc_eps { SKH_MHC_EPS_DEFAULT = 0, SKH_MHC_EPS_LARGE = 1, SKH_MHC_EPS_NO_HC = 2 } skh_mhc_eps;

enum { SKH_MHC_P_DATA = 0, SKH_MHC_P_EPS = 1 };

typedef struct skh_mhc_spec {
  const char *entry; /* "post", "pre", "post_pre" */
  int64_t hidden, tokens, max_tokens; /* max_tokens 0: tokens */
  sk_mhc_norm_weight norm_weight;
  int sinkhorn_iters;                 /* 0: 20 */
  skh_mhc_eps eps;
  skh_mhc_data data;
  unsigned flags;                     /* SKH_* */
} skh_mhc_spec;

/* The case of a spec (name, caps with arch NULL, symbol T, params). */
void skh_mhc_case(const skh_mhc_spec *s, skh_case *c);

#endif
