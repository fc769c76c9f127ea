/* ops/norm/mhc_host.h - norm.mhc's host-side internals (ops/norm/mhc.c): the kernel slots, the
 * per-arch tuning row, the plan state the selection fills and the binding state bind fills. For
 * mhc.c and the op's CPU tests (tests/test_mhc_ops.c), which check the selection and the launch
 * geometry against their models; not part of any API. */
#ifndef SK_OPS_NORM_MHC_HOST_H
#define SK_OPS_NORM_MHC_HOST_H

#include "op.h"

/* sk::mhc::kOwnSumsFlag: or-ed into the partial kernels' num_stages with 2 stages, the lockstep
 * loop with its own sums buffer. The plan's `stages` carries it. */
#define OWN_SUMS_FLAG 16

enum {
  K_POST,
  K_PRE_PARTIAL,
  K_PRE_FINALIZE,
  K_POST_PRE_PARTIAL,
  K_POST_PRE_FINALIZE,
  K_PRE_PARTIAL_SCALAR,
  K_POST_PRE_PARTIAL_SCALAR,
  K_PRE_FUSED_DECODE,
  K_POST_PRE_FUSED_DECODE,
  K_PRE_PROJECTION,
  K_COUNT
};
enum { ENTRY_POST = 0, ENTRY_PRE = 1, ENTRY_POST_PRE = 2 }; /* entry indices */

typedef struct mhc_state {
  int sm_count;
  int stages;          /* cp.async stage buffers of the partial kernels, | OWN_SUMS_FLAG */
  int fn_smem_terms;   /* post_pre partial: fn terms kept in shared memory instead of registers */
  int tokens_per_cta;  /* 0: the cost models in bind; else SPARKINFER_MHC_TOKENS_PER_CTA */
  int64_t scalar_max_t; /* T <= this: scalar partial kernels (0: never) */
  int64_t split_min_t;  /* run_pre, T >= this (above scalar_max_t): the split schedule (0: never) */
  int projection_warps, projection_stages;
  int projection_ctas_per_sm;   /* occupancy at plan time (0 offline) */
  int fused_decode;             /* SPARKINFER_MHC_FUSED_DECODE */
  unsigned dynamic_smem[K_COUNT];
  int64_t fused_max_t[2];       /* [0] pre, [1] post_pre: T <= this takes the one fused launch */
} mhc_state;

/* One row of the per-arch tuning table (mhc.c: which values were measured, which derived). */
typedef struct mhc_tuning {
  int cc;
  int projection_warps;  /* run_pre's projection kernel (split schedule) */
  int scalar_max_t_small; /* largest T on the scalar partials, H <= 4096 */
  int scalar_max_t_large; /* the same, H > 4096 (their 6 * S * T CTAs grow with H) */
  int split_min_t;        /* smallest T on run_pre's split schedule */
  const char *source;
} mhc_tuning;

/* The row the selection uses for an arch (the nearest shared-memory class for one the table lacks). */
mhc_tuning sk_mhc_tuning_for(const sk_arch_props *a);

/* The launch geometry bind fixes (launch contract: ops/norm/mhc.cuh). */
typedef struct mhc_bound {
  int t;
  int stages;          /* partial stage buffers */
  int work_per_cta;    /* tensor-core partials: 16-token groups per CTA; split projection: tokens per CTA */
  int hpc;             /* hidden per finalize CTA */
  int fused;           /* one fused decode launch */
  int split;           /* run_pre's split schedule */
} mhc_bound;

/* Every tuning override the selection reads (docs/env.md), NULL-terminated. */
extern const char *const sk_mhc_knobs[];

/* The largest T of the one fused decode launch for a kernel with `ctas_per_sm` resident CTAs on
 * `sm_count` SMs (kernel comment 2c): its waiters, (H/256 + 1) per token, use at most half the
 * CTA slots; capped by the scalar crossover. 0 when ctas_per_sm is 0 (no device). */
int64_t sk_mhc_fused_max_t(int64_t ctas_per_sm, int64_t sm_count, int64_t hidden, int64_t scalar_max_t);

#endif
