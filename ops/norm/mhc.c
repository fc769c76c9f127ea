/* ops/norm/mhc.c - norm.mhc host side: caps, selection (per-arch tuning), tensor tables of the
 * three entries, bind (launch geometry), run, definition. Kernels and launch contract:
 * ops/norm/mhc.cuh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"
#include "norm/mhc_host.h"
#include "sparkinfer/norm.h"

#define OP "norm.mhc"
#define SOURCE "norm/mhc.cuh"
#define TILE_H 256
#define PARTIAL_FLOATS 36   /* kPartialStride */
#define POST_THREADS 128    /* kPostThreads */
#define FINALIZE_THREADS 128
#define MAX_HIDDEN 65536
#define GROUP 16             /* SK_MHC_GROUP: tokens per MMA group; tokens per partial CTA are a multiple */
#define MAX_TOKENS_PER_CTA 1024
/* Partial kernels: threads, bytes of one cp.async stage buffer (sk::mhc::partial_stage_bytes: the
 * streams, post_pre also x and 16 x 80 B of mix-back coefficients) and of one group's projection
 * sums (partial_sums_bytes), which the pipelined schedule (3-4 stages) double-buffers. */
#define PRE_PARTIAL_THREADS 128
#define POST_PRE_PARTIAL_THREADS 512
#define PRE_STAGE_BYTES (1 * GROUP * 32 * 16)
#define POST_PRE_STAGE_BYTES (5 * GROUP * 32 * 16 + GROUP * 20 * 4)
#define PRE_SUMS_BYTES (4 * GROUP * 24 * 4)
#define POST_PRE_SUMS_BYTES (16 * GROUP * 24 * 4)
/* sk::mhc::kPartialSmemAlign (the stage buffers start on a 128-byte boundary: slack in every
 * launch), partial_fn_term_bytes (one fn term of every warp, [warp][4 k-steps][3 n-tiles][32
 * lanes] x 8 B) and the partial kernels' static shared memory (the Gram sums). */
#define PARTIAL_SMEM_ALIGN 128
#define PRE_FN_TERM_BYTES (4 * 4 * 3 * 32 * 8)
#define POST_PRE_FN_TERM_BYTES (16 * 4 * 3 * 32 * 8)
#define PARTIAL_STATIC_SMEM (2 * 4 * GROUP * 10 * 4)
/* run_pre's projection kernel (sk::mhc::pre_projection_kernel<H, WARPS, STAGES>, 2d): WARPS warps,
 * each owning whole 16-token groups; shared memory = pre_projection_smem_bytes(WARPS, STAGES): the
 * fn_pre tile as B fragments (16 x 32 x 80 B), then STAGES 8 KiB x buffers per warp. */
#define PROJECTION_FN_BYTES (16 * 32 * 80)
#define PROJECTION_GROUP_BYTES (GROUP * 32 * 16)
static unsigned projection_smem(int warps, int stages) { /* + 128 B of alignment slack, as the partials */
  return 128 + PROJECTION_FN_BYTES + (unsigned)(warps * stages) * PROJECTION_GROUP_BYTES;
}
#define MAX_STAGES 4
/* Decode partial kernels (scalar FMA): one warp per (token, tile, role), 6 roles of 4 mixes. */
#define SCALAR_ROLES 6
#define SCALAR_THREADS 32
#define MAX_SCALAR_MAX_T 2147483647ll
/* Fused decode kernels (sk::mhc::*_fused_decode_kernel): the scalar partial grid plus the
 * finalize in one launch; S + 1 CTAs per token wait for the token's other CTAs, so the host
 * launches them only while the waiters of the grid use at most 1 / FUSED_SLOT_SHARE of the
 * device's CTA slots (kernel comment 2c). */
#define FUSED_SLOT_SHARE 2

/* ---- per-arch tuning ------------------------------------------------------------------------
 * What the selection reads besides the caps. sm_90 values were measured on the H200; the rest are
 * derived: sm_100 shares sm_90's 227 KiB per block; SM120 / SM121 have 99 KiB per block, which
 * holds 3 projection warps x 2 buffers (88 KiB) but not 4, and their decode crossovers follow
 * sm_90's (the scalar kernels' advantage is latency, which does not depend on bandwidth). The
 * stage count, fn terms in shared memory and the own-sums loop follow from smem_per_block. */
static const mhc_tuning tunings[] = {
    {90, 4, 16, 8, 256, "measured (H200)"},
    {100, 4, 16, 8, 256, "derived (sm_90's shared memory per block)"},
    {120, 3, 16, 8, 256, "derived (99 KiB per block: 3 projection warps; crossovers as sm_90)"},
    {121, 3, 16, 8, 256, "derived (as sm_120)"},
};

mhc_tuning sk_mhc_tuning_for(const sk_arch_props *a) {
  for (size_t i = 0; i < sizeof tunings / sizeof tunings[0]; i++)
    if (tunings[i].cc == a->cc) return tunings[i];
  /* Any other arch: the sm_120 row when a block holds 99 KiB or less, else sm_90's. */
  mhc_tuning t = a->smem_per_block >= 200 * 1024 ? tunings[0] : tunings[2];
  t.cc = a->cc;
  t.source = "derived (nearest shared-memory class)";
  return t;
}

/* Dynamic shared memory of a partial kernel (sk::mhc::partial_dynamic_smem_bytes): 2 stages run
 * the lockstep schedule (| OWN_SUMS_FLAG: with one sums buffer), 3-4 the pipelined one with two
 * sums buffers; then fn_smem fn terms. */
static unsigned partial_smem(int pre, int stages, int fn_smem) {
  const unsigned stage = pre ? PRE_STAGE_BYTES : POST_PRE_STAGE_BYTES, sums = pre ? PRE_SUMS_BYTES : POST_PRE_SUMS_BYTES;
  const int own_sums = (stages & OWN_SUMS_FLAG) != 0;
  stages &= OWN_SUMS_FLAG - 1;
  return PARTIAL_SMEM_ALIGN + (unsigned)stages * stage + (stages >= 3 ? 2 * sums : own_sums ? sums : 0) +
         (unsigned)fn_smem * (pre ? PRE_FN_TERM_BYTES : POST_PRE_FN_TERM_BYTES);
}

const char *const sk_mhc_knobs[] = {
    "SPARKINFER_MHC_PROJECTION_WARPS", "SPARKINFER_MHC_PROJECTION_STAGES", "SPARKINFER_MHC_STAGES",
    "SPARKINFER_MHC_TOKENS_PER_CTA",   "SPARKINFER_MHC_SCALAR_MAX_T",      "SPARKINFER_MHC_SPLIT_MIN_T",
    "SPARKINFER_MHC_FN_SMEM_TERMS",    "SPARKINFER_MHC_OWN_SUMS",          "SPARKINFER_MHC_FUSED_DECODE",
    NULL};

/* The tuning knobs (docs/env.md; read by the selection, never at run). Stage buffers: 2 (the
 * lockstep schedule, ops/norm/norm.mhc.md). fn terms in shared
 * memory: the most, up to 2, that fit the block with the chosen stages (freeing the registers the
 * post_pre partial would spill). The own-sums loop: on where its sums buffer fits too. */
static sk_status mhc_knobs(const sk_plan *p, mhc_state *st) {
  const sk_mhc_caps *c = SK_PLAN_CAPS(p, sk_mhc_caps);
  const mhc_tuning t = sk_mhc_tuning_for(&p->props);
  const unsigned limit = p->props.smem_per_block;
  int64_t v;
  SK_TRY(sk_tune_int("SPARKINFER_MHC_PROJECTION_WARPS", t.projection_warps, 1, 8, &v));
  st->projection_warps = (int)v;
  SK_TRY(sk_tune_int("SPARKINFER_MHC_PROJECTION_STAGES", 2, 1, 2, &v));
  st->projection_stages = (int)v;
  const unsigned proj = projection_smem(st->projection_warps, st->projection_stages);
  if (proj > limit)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        OP " projection kernel: %d warps x %d stages need %u bytes of shared memory, more than the %u a "
                        "block of %s can have (SPARKINFER_MHC_PROJECTION_WARPS, SPARKINFER_MHC_PROJECTION_STAGES)",
                        st->projection_warps, st->projection_stages, proj, limit, p->arch);
  SK_TRY(sk_tune_int("SPARKINFER_MHC_STAGES", 2, 2, MAX_STAGES, &v));
  st->stages = (int)v;
  SK_TRY(sk_tune_int("SPARKINFER_MHC_TOKENS_PER_CTA", 0, 0, MAX_TOKENS_PER_CTA, &v));
  if (v % GROUP)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_TOKENS_PER_CTA=%lld: expected a multiple of %d up to %d",
                        (long long)v, GROUP, MAX_TOKENS_PER_CTA);
  st->tokens_per_cta = (int)v;
  SK_TRY(sk_tune_int("SPARKINFER_MHC_SCALAR_MAX_T", c->hidden <= 4096 ? t.scalar_max_t_small : t.scalar_max_t_large, 0,
                     MAX_SCALAR_MAX_T, &st->scalar_max_t));
  SK_TRY(sk_tune_int("SPARKINFER_MHC_SPLIT_MIN_T", t.split_min_t, 0, MAX_SCALAR_MAX_T, &st->split_min_t));
  unsigned fit = 2;
  while (fit > 0 && partial_smem(0, st->stages, (int)fit) + PARTIAL_STATIC_SMEM > limit) fit--;
  SK_TRY(sk_tune_int("SPARKINFER_MHC_FN_SMEM_TERMS", fit, 0, 3, &v));
  st->fn_smem_terms = (int)v;
  int own_sums;
  SK_TRY(sk_tune_flag("SPARKINFER_MHC_OWN_SUMS", -1, &own_sums));
  if (own_sums > 1)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_OWN_SUMS=%d: expected 0 or 1", own_sums);
  if (own_sums == 1 && st->stages != 2)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "SPARKINFER_MHC_OWN_SUMS=1 applies to the 2-stage lockstep loop, not SPARKINFER_MHC_STAGES=%d",
                        st->stages);
  if (own_sums < 0)
    own_sums = st->stages == 2 && partial_smem(0, 2 | OWN_SUMS_FLAG, st->fn_smem_terms) + PARTIAL_STATIC_SMEM <= limit;
  if (own_sums) st->stages |= OWN_SUMS_FLAG;
  const unsigned bytes = partial_smem(0, st->stages, st->fn_smem_terms) + PARTIAL_STATIC_SMEM;
  if (bytes > limit)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        OP " post_pre partial kernel: %d stages%s and %d fn terms in shared memory need %u bytes, more "
                        "than the %u a block of %s can have (SPARKINFER_MHC_STAGES, SPARKINFER_MHC_FN_SMEM_TERMS, "
                        "SPARKINFER_MHC_OWN_SUMS)",
                        st->stages & (OWN_SUMS_FLAG - 1), own_sums ? " with their own sums buffer" : "",
                        st->fn_smem_terms, bytes, limit, p->arch);
  int fused;
  SK_TRY(sk_tune_flag("SPARKINFER_MHC_FUSED_DECODE", 1, &fused));
  st->fused_decode = fused != 0;
  return SK_OK;
}


/* Between fields and the floats (the spine checked the other fields against caps_fields). */
static sk_status check_caps(void *caps) {
  const sk_mhc_caps *c = caps;
  if (c->hidden % TILE_H)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": hidden = %lld must be a multiple of 256 in [256, %d]",
                        (long long)c->hidden, MAX_HIDDEN);
  if (!(c->rms_eps > 0.0f) || !isfinite(c->rms_eps))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": rms_eps must be a positive finite number");
  if (!(c->hc_eps >= 0.0f) || !isfinite(c->hc_eps))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": hc_eps must be a non-negative finite number");
  if (c->norm_weight != SK_MHC_NORM_NONE && (!(c->norm_eps > 0.0f) || !isfinite(c->norm_eps)))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": norm_eps must be a positive finite number with a norm weight");
  /* Scratch must stay addressable: T_max * S * 144 bytes. */
  if (c->max_tokens > ((int64_t)1 << 40) / (c->hidden / TILE_H * PARTIAL_FLOATS * 4))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": max_tokens x hidden is too large for the scratch");
  return SK_OK;
}

static const char *weight_type(sk_mhc_norm_weight w) {
  return w == SK_MHC_NORM_BF16 ? "__nv_bfloat16" : w == SK_MHC_NORM_FP32 ? "float" : "sk::mhc::NoNormWeight";
}

/* Kernels a plan can launch: a partial variant whose T range [1, max_tokens] misses is skipped
 * (e.g. the tensor-core partials of a decode-only plan). */
static bool plan_uses(const sk_mhc_caps *c, const mhc_state *st, int k) {
  if (k == K_PRE_FUSED_DECODE || k == K_POST_PRE_FUSED_DECODE) return st->scalar_max_t > 0 && st->fused_decode;
  if (k == K_PRE_PARTIAL_SCALAR || k == K_POST_PRE_PARTIAL_SCALAR) return st->scalar_max_t > 0;
  /* Tensor-core T range (scalar_max_t, max_tokens]; run_pre's split schedule takes [split_min_t, ...). */
  const int64_t first_tc = st->scalar_max_t + 1, first_split = st->split_min_t > first_tc ? st->split_min_t : first_tc;
  const bool split = st->split_min_t > 0 && c->max_tokens >= first_split;
  if (k == K_PRE_PROJECTION) return split;
  if (k == K_PRE_PARTIAL) return c->max_tokens >= first_tc && (!split || first_split > first_tc);
  if (k == K_POST_PRE_PARTIAL) return c->max_tokens >= first_tc;
  return true;
}

/* Entries' tensor indices. */
enum { PO_X, PO_RESIDUAL, PO_POST, PO_COMB, PO_OUT };
enum { PR_X, PR_FN, PR_HC_SCALE, PR_HC_BASE, PR_NORM_WEIGHT, PR_RESIDUAL_OUT, PR_Y, PR_POST, PR_COMB };
enum {
  PP_X, PP_RESIDUAL, PP_PREV_POST, PP_PREV_COMB, PP_FN, PP_HC_SCALE, PP_HC_BASE, PP_NORM_WEIGHT,
  PP_RESIDUAL_OUT, PP_Y, PP_POST, PP_COMB
};

static sk_status select_kernels(sk_plan *p) {
  const sk_mhc_caps *c = SK_PLAN_CAPS(p, sk_mhc_caps);
  mhc_state *st = SK_PLAN_STATE(p, mhc_state);
  st->sm_count = p->props.sm_count;
  SK_TRY(mhc_knobs(p, st));
  const long long h = (long long)c->hidden;
  const char *w = weight_type(c->norm_weight);
  char names[K_COUNT][128], params[96];
  snprintf(names[K_POST], 128, "sk::mhc::post_kernel<%lld>", h);
  snprintf(names[K_PRE_PARTIAL], 128, "sk::mhc::pre_partial_kernel<%lld>", h);
  snprintf(names[K_PRE_FINALIZE], 128, "sk::mhc::pre_finalize_kernel<%lld, %s>", h, w);
  snprintf(names[K_POST_PRE_PARTIAL], 128, "sk::mhc::post_pre_partial_kernel<%lld, %d>", h, st->fn_smem_terms);
  snprintf(names[K_POST_PRE_FINALIZE], 128, "sk::mhc::post_pre_finalize_kernel<%lld, %s>", h, w);
  snprintf(names[K_PRE_PARTIAL_SCALAR], 128, "sk::mhc::pre_partial_scalar_kernel<%lld>", h);
  snprintf(names[K_POST_PRE_PARTIAL_SCALAR], 128, "sk::mhc::post_pre_partial_scalar_kernel<%lld>", h);
  snprintf(names[K_PRE_FUSED_DECODE], 128, "sk::mhc::pre_fused_decode_kernel<%lld, %s>", h, w);
  snprintf(names[K_POST_PRE_FUSED_DECODE], 128, "sk::mhc::post_pre_fused_decode_kernel<%lld, %s>", h, w);
  snprintf(names[K_PRE_PROJECTION], 128, "sk::mhc::pre_projection_kernel<%lld, %d, %d>", h, st->projection_warps,
           st->projection_stages);
  static const char *const nw[] = {"none", "bf16", "fp32"};
  snprintf(params, sizeof params, "hidden=%lld norm_weight=%s", h, nw[c->norm_weight]);
  for (int k = 0; k < K_COUNT; k++)
    if (plan_uses(c, st, k)) SK_TRY(sk_plan_set_kernel(p, (size_t)k, SOURCE, names[k], params));
  st->dynamic_smem[K_POST_PRE_PARTIAL] = partial_smem(0, st->stages, st->fn_smem_terms);
  st->dynamic_smem[K_PRE_PARTIAL] = partial_smem(1, st->stages, 0);
  st->dynamic_smem[K_PRE_PROJECTION] = projection_smem(st->projection_warps, st->projection_stages);
  SK_TRY(sk_plan_set_symbol(p, "H", c->hidden));
  SK_TRY(sk_plan_set_symbol(p, "MAX_T", c->max_tokens));
  const uint32_t wt = c->norm_weight == SK_MHC_NORM_BF16 ? SK_DT_BF16 : SK_DT_FP32;
  sk_plan_tensor_dtypes(p, ENTRY_PRE, PR_NORM_WEIGHT, wt);
  sk_plan_tensor_dtypes(p, ENTRY_POST_PRE, PP_NORM_WEIGHT, wt);
  if (c->norm_weight == SK_MHC_NORM_NONE) {
    sk_plan_tensor_presence(p, ENTRY_PRE, PR_NORM_WEIGHT, SK_TENSOR_UNUSED);
    sk_plan_tensor_presence(p, ENTRY_POST_PRE, PP_NORM_WEIGHT, SK_TENSOR_UNUSED);
  }
  /* Regions: 0 the partial rows, 1 the fused decode kernels' per-token arrival counters (u32). */
  if (sk_scratch_add(&p->scratch, (size_t)c->max_tokens * (size_t)(c->hidden / TILE_H) * PARTIAL_FLOATS * 4) < 0 ||
      sk_scratch_add_counters(&p->scratch, (size_t)c->max_tokens * 4) < 0)
    return SK_ERR_INTERNAL;
  return SK_OK;
}

int64_t sk_mhc_fused_max_t(int64_t ctas_per_sm, int64_t sm_count, int64_t hidden, int64_t scalar_max_t) {
  const int64_t waiters_per_token = hidden / TILE_H + 1, max_t = ctas_per_sm * sm_count / FUSED_SLOT_SHARE / waiters_per_token;
  return max_t < scalar_max_t ? max_t : scalar_max_t;
}

/* The fused launch's T range for kernel slot k: a launch that could not have all its waiters
 * resident might wait forever (kernel comment 2c). 0 offline or with SPARKINFER_MHC_FUSED_DECODE=0. */
static int64_t fused_max_tokens(const sk_plan *p, const mhc_state *st, int k) {
  const sk_kernel *kern = sk_plan_k(p, (size_t)k);
  if (!st->fused_decode || !kern || !p->props.measured) return 0;
  return sk_mhc_fused_max_t(sk_op_resident_ctas_per_sm(kern, SCALAR_THREADS, 0), p->props.sm_count,
                            SK_PLAN_CAPS(p, sk_mhc_caps)->hidden, st->scalar_max_t);
}

static sk_status finish(sk_plan *p) {
  mhc_state *st = SK_PLAN_STATE(p, mhc_state);
  for (int i = 0; i < K_COUNT; i++) SK_TRY(sk_op_allow_dynamic_smem(sk_plan_k(p, (size_t)i), st->dynamic_smem[i]));
  if (sk_plan_k(p, K_PRE_PROJECTION) && p->props.measured)
    st->projection_ctas_per_sm = sk_op_resident_ctas_per_sm(sk_plan_k(p, K_PRE_PROJECTION), st->projection_warps * 32,
                                                            st->dynamic_smem[K_PRE_PROJECTION]);
  st->fused_max_t[0] = fused_max_tokens(p, st, K_PRE_FUSED_DECODE);
  st->fused_max_t[1] = fused_max_tokens(p, st, K_POST_PRE_FUSED_DECODE);
  return SK_OK;
}

/* ---- tensor tables ------------------------------------------------------------------------------ */

#define BF16_IN(n, s, d) {n, s, SK_DT_BF16, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, d}
#define F32_IN(n, s, d) {n, s, SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, d}
#define BF16_OUT(n, s, d) {n, s, SK_DT_BF16, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 16, 0, 0, d}
#define F32_OUT(n, s, d) {n, s, SK_DT_FP32, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 16, 0, 0, d}
#define NORM_WEIGHT {"norm_weight", "[H]", SK_DT_BF16 | SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, \
                     "RMSNorm weight of y (caps.norm_weight's dtype; absent for SK_MHC_NORM_NONE)"}

static const sk_tensor_rule post_tensors[] = {
    BF16_IN("x", "[T, H]", "the sublayer output"),
    BF16_IN("residual", "[T, 4, H]", "the 4 streams before the mix-back"),
    F32_IN("post", "[T, 4]", "post mix of the previous pre"),
    F32_IN("comb", "[T, 4, 4]", "comb mix of the previous pre"),
    BF16_OUT("out", "[T, 4, H]", "bf16(post[j]*x + sum_i comb[i][j]*residual[i])"),
};
static const sk_tensor_rule pre_tensors[] = {
    BF16_IN("x", "[T, H]", "the input (4 identical streams)"),
    F32_IN("fn_pre", "[24, H]", "fn summed over its 4 stream blocks"),
    F32_IN("hc_scale", "[3]", ""),
    F32_IN("hc_base", "[24]", ""),
    NORM_WEIGHT,
    BF16_OUT("residual_out", "[T, 4, H]", "the 4 streams"),
    BF16_OUT("y", "[T, H]", "the sublayer input"),
    F32_OUT("post", "[T, 4]", ""),
    F32_OUT("comb", "[T, 4, 4]", ""),
};
static const sk_tensor_rule post_pre_tensors[] = {
    BF16_IN("x", "[T, H]", "the previous sublayer's output"),
    BF16_IN("residual", "[T, 4, H]", "the 4 streams before the mix-back"),
    F32_IN("prev_post", "[T, 4]", ""),
    F32_IN("prev_comb", "[T, 4, 4]", ""),
    F32_IN("fn", "[24, 4*H]", ""),
    F32_IN("hc_scale", "[3]", ""),
    F32_IN("hc_base", "[24]", ""),
    NORM_WEIGHT,
    BF16_OUT("residual_out", "[T, 4, H]", "the mixed-back streams"),
    BF16_OUT("y", "[T, H]", "the next sublayer's input"),
    F32_OUT("post", "[T, 4]", ""),
    F32_OUT("comb", "[T, 4, 4]", ""),
};
static const sk_symbol_rule tokens[] = {{"T", "1", "MAX_T"}};
static const sk_op_entry entries[] = {
    {"post", post_tensors, 5, tokens, 1},
    {"pre", pre_tensors, 9, tokens, 1},
    {"post_pre", post_pre_tensors, 12, tokens, 1},
};

/* ---- bind: launch geometry --------------------------------------------------------------------- */


/* Projection (2d): tokens per CTA, a multiple of `step`, from a wave model: time ~ waves x
 * (tokens per CTA + 16), the 16 standing for the CTA's fixed cost (its fn_pre fill, pipeline
 * fill). */
static int64_t wave_tokens_per_cta(const sk_plan *p, const mhc_state *st, int64_t t, int ctas_per_sm, int64_t step) {
  if (st->tokens_per_cta > 0) return st->tokens_per_cta;
  const int64_t s = SK_PLAN_CAPS(p, sk_mhc_caps)->hidden / TILE_H,
                slots = (int64_t)st->sm_count * (ctas_per_sm > 0 ? ctas_per_sm : 1);
  int64_t best = step, best_cost = -1;
  for (int64_t tpc = step; tpc <= 16 * step; tpc += step) {
    const int64_t ctas = sk_cdiv(t, tpc) * s, cost = sk_cdiv(ctas, slots) * (tpc + GROUP);
    if (best_cost < 0 || cost < best_cost) best = tpc, best_cost = cost;
    if (tpc >= t) break; /* larger blocks only add empty groups */
  }
  return best;
}

/* The most segments (stretches within one tile) a CTA of the partial kernels runs when the
 * tile-major items (tile, group) go to CTAs in ranges of groups_per_cta. */
static int64_t max_segments(int64_t items, int64_t groups_per_tile, int64_t groups_per_cta) {
  const int64_t bound = (groups_per_cta - 1) / groups_per_tile + 2; /* tiles a range can touch */
  int64_t most = 1;
  for (int64_t first = 0; first < items && most < bound; first += groups_per_cta) {
    const int64_t last = (first + groups_per_cta < items ? first + groups_per_cta : items) - 1;
    const int64_t segments = last / groups_per_tile - first / groups_per_tile + 1;
    if (segments > most) most = segments;
  }
  return most;
}

/* Tensor-core partials (2): groups of 16 tokens per CTA over the tile-major items (tile, group).
 * Model: time ~ waves x (groups per CTA + 5 x the most segments a CTA runs), a segment (its fn
 * load and pipeline fill) costing about 5 groups. Candidates: one balanced wave (`base` groups),
 * base + 1 and base + 2, and whole tiles. Resident CTAs per SM: 1 (post_pre, 512 threads x 128
 * registers), 4 (pre). The grid (items / groups per CTA) stays below 2^31. */
static int64_t partial_groups_per_cta(const sk_plan *p, const mhc_state *st, int64_t t, int ctas_per_sm) {
  const int64_t per_tile = sk_cdiv(t, GROUP), items = per_tile * (SK_PLAN_CAPS(p, sk_mhc_caps)->hidden / TILE_H),
                fewest = sk_cdiv(items, INT32_MAX);
  if (st->tokens_per_cta > 0) return st->tokens_per_cta / GROUP > fewest ? st->tokens_per_cta / GROUP : fewest;
  const int64_t slots = (int64_t)st->sm_count * ctas_per_sm;
  const int64_t base = sk_cdiv(items, slots) > fewest ? sk_cdiv(items, slots) : fewest;
  const int64_t candidates[4] = {base, base + 1, base + 2, sk_cdiv(base, per_tile) * per_tile};
  int64_t best = base, best_cost = -1;
  for (int i = 0; i < 4; i++) {
    const int64_t gpc = candidates[i],
                  cost = sk_cdiv(sk_cdiv(items, gpc), slots) * (gpc + 5 * max_segments(items, per_tile, gpc));
    if (best_cost < 0 || cost < best_cost) best = gpc, best_cost = cost;
  }
  return best;
}

static sk_status bind(sk_binding *b) {
  const sk_plan *p = b->plan;
  const mhc_state *st = SK_PLAN_STATE(p, mhc_state);
  mhc_bound *g = SK_BINDING_STATE(b, mhc_bound);
  const int64_t t = sk_binding_get_symbol(b, "T"), h = SK_PLAN_CAPS(p, sk_mhc_caps)->hidden, sms = st->sm_count;
  const int entry = (int)b->entry;
  g->t = (int)t;
  if (entry == ENTRY_POST) { /* one kernel: neither fused decode nor split */
    SK_TRY(sk_binding_set_symbol(b, "FUSED", 0));
    return sk_binding_set_symbol(b, "SPLIT", 0);
  }
  g->stages = st->stages;
  g->work_per_cta = (int)partial_groups_per_cta(p, st, t, entry == ENTRY_PRE ? 4 : 1);
  int64_t hpc = h;
  if (t < 2 * sms / (h / 1024 > 0 ? h / 1024 : 1)) hpc = h % 1024 == 0 ? 1024 : h % 512 == 0 ? 512 : 256;
  g->hpc = (int)hpc;
  g->fused = t <= st->fused_max_t[entry == ENTRY_PRE ? 0 : 1];
  g->split = entry == ENTRY_PRE && t > st->scalar_max_t && st->split_min_t > 0 && t >= st->split_min_t;
  /* pre_projection_kernel's warps take a CTA's groups round-robin: whole rounds of 16 x warps
   * tokens (every CTA fills its 40 KiB fn_pre tile once, so longer CTAs amortise it). */
  if (g->split)
    g->work_per_cta = (int)wave_tokens_per_cta(p, st, t, st->projection_ctas_per_sm, GROUP * st->projection_warps);
  SK_TRY(sk_binding_set_symbol(b, "FUSED", g->fused));
  return sk_binding_set_symbol(b, "SPLIT", g->split);
}

/* ---- run ---------------------------------------------------------------------------------------- */

/* Every norm.mhc kernel waits for the previous kernel before touching memory (pdl_enter or
 * pdl_wait_for_previous, ops/common/sync.cuh), so each launch may overlap the previous kernel's
 * tail (SK_LAUNCH_OVERLAP_PREVIOUS). */
static sk_status run(const sk_binding *b, void *stream) {
  const sk_plan *p = b->plan;
  const sk_mhc_caps *c = SK_PLAN_CAPS(p, sk_mhc_caps);
  const mhc_state *st = SK_PLAN_STATE(p, mhc_state);
  const mhc_bound *g = SK_BINDING_STATE(b, mhc_bound);
  void *const *d = b->data;
  int t = g->t;
  const unsigned s = (unsigned)(c->hidden / TILE_H);
  if (b->entry == ENTRY_POST) {
    void *args[] = {(void *)&d[PO_X], (void *)&d[PO_RESIDUAL], (void *)&d[PO_POST], (void *)&d[PO_COMB], (void *)&d[PO_OUT], &t};
    return sk_kernel_launch_ex(sk_plan_k(p, K_POST), (sk_dim3){(unsigned)sk_cdiv((int64_t)t * s, 4), 1, 1},
                               (sk_dim3){POST_THREADS, 1, 1}, 0, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS);
  }
  const int pre = b->entry == ENTRY_PRE;
  /* The pointers in the kernels' argument order: x, residual, post, comb (mix-back inputs; pre:
   * unused), fn, residual_out, partials, hc_scale, hc_base, norm_weight, y, post out, comb out,
   * counters. */
  void *x = d[0], *residual = pre ? NULL : d[PP_RESIDUAL], *ppost = pre ? NULL : d[PP_PREV_POST],
       *pcomb = pre ? NULL : d[PP_PREV_COMB], *fn = d[pre ? PR_FN : PP_FN], *res_out = d[pre ? PR_RESIDUAL_OUT : PP_RESIDUAL_OUT],
       *partials = b->scratch[0], *hc_scale = d[pre ? PR_HC_SCALE : PP_HC_SCALE], *hc_base = d[pre ? PR_HC_BASE : PP_HC_BASE],
       *norm_weight = d[pre ? PR_NORM_WEIGHT : PP_NORM_WEIGHT], *y = d[pre ? PR_Y : PP_Y], *post = d[pre ? PR_POST : PP_POST],
       *comb = d[pre ? PR_COMB : PP_COMB], *counters = b->scratch[1];
  int work_per_cta = g->work_per_cta, hpc = g->hpc, iters = c->sinkhorn_iters, stages = g->stages;
  float rms_eps = c->rms_eps, hc_eps = c->hc_eps, norm_eps = c->norm_eps;
  if (g->fused) { /* decode, one launch: scalar partials + finalize (2c) */
    const sk_dim3 grid = {(unsigned)t, s, SCALAR_ROLES}, block = {SCALAR_THREADS, 1, 1};
    void *pre_args[] = {&x, &fn, &hc_scale, &hc_base, &norm_weight, &res_out, &partials, &counters, &y, &post, &comb,
                        &iters, &rms_eps, &hc_eps, &norm_eps};
    void *post_pre_args[] = {&x, &residual, &ppost, &pcomb, &fn, &hc_scale, &hc_base, &norm_weight, &res_out, &partials,
                             &counters, &y, &post, &comb, &iters, &rms_eps, &hc_eps, &norm_eps};
    return sk_kernel_launch_ex(sk_plan_k(p, pre ? K_PRE_FUSED_DECODE : K_POST_PRE_FUSED_DECODE), grid, block, 0, stream,
                               pre ? pre_args : post_pre_args, SK_LAUNCH_OVERLAP_PREVIOUS);
  }
  if (t <= st->scalar_max_t) { /* decode: scalar partials, one warp per (token, tile, role) */
    const sk_dim3 grid = {(unsigned)t, s, SCALAR_ROLES}, block = {SCALAR_THREADS, 1, 1};
    void *pre_args[] = {&x, &fn, &res_out, &partials};
    void *post_pre_args[] = {&x, &residual, &ppost, &pcomb, &fn, &res_out, &partials};
    SK_TRY(sk_kernel_launch_ex(sk_plan_k(p, pre ? K_PRE_PARTIAL_SCALAR : K_POST_PRE_PARTIAL_SCALAR), grid, block, 0, stream,
                               pre ? pre_args : post_pre_args, SK_LAUNCH_OVERLAP_PREVIOUS));
  } else if (g->split) { /* run_pre, split: the projection; the finalize writes the copies */
    void *args[] = {&x, &fn, &partials, &t, &work_per_cta}; /* tokens per CTA */
    SK_TRY(sk_kernel_launch_ex(sk_plan_k(p, K_PRE_PROJECTION), (sk_dim3){(unsigned)sk_cdiv(t, work_per_cta), s, 1},
                               (sk_dim3){(unsigned)st->projection_warps * 32, 1, 1}, st->dynamic_smem[K_PRE_PROJECTION],
                               stream, args, SK_LAUNCH_OVERLAP_PREVIOUS));
  } else {
    /* groups of 16 tokens per CTA over the tile-major items (tile, group) */
    const sk_dim3 grid = {(unsigned)sk_cdiv(sk_cdiv(t, GROUP) * s, work_per_cta), 1, 1},
                  block = {pre ? PRE_PARTIAL_THREADS : POST_PRE_PARTIAL_THREADS, 1, 1};
    const unsigned smem = st->dynamic_smem[pre ? K_PRE_PARTIAL : K_POST_PRE_PARTIAL];
    void *pre_args[] = {&x, &fn, &res_out, &partials, &t, &work_per_cta, &stages};
    void *post_pre_args[] = {&x, &residual, &ppost, &pcomb, &fn, &res_out, &partials, &t, &work_per_cta, &stages};
    SK_TRY(sk_kernel_launch_ex(sk_plan_k(p, pre ? K_PRE_PARTIAL : K_POST_PRE_PARTIAL), grid, block, smem, stream,
                               pre ? pre_args : post_pre_args, SK_LAUNCH_OVERLAP_PREVIOUS));
  }
  /* Every partial variant leaves the same rows: one finalize. It reads the streams: x for pre
   * (4 copies; after the split schedule's projection it also writes them to residual_out),
   * residual_out for post_pre. */
  const sk_dim3 fgrid = {(unsigned)t, (unsigned)(c->hidden / hpc), 1}, fblock = {FINALIZE_THREADS, 1, 1};
  void *copies = pre && g->split ? res_out : NULL;
  void *pre_fin_args[] = {&x, &copies, &partials, &hc_scale, &hc_base, &norm_weight, &y, &post, &comb, &t, &hpc, &iters,
                          &rms_eps, &hc_eps, &norm_eps};
  void *fin_args[] = {&res_out, &partials, &hc_scale, &hc_base, &norm_weight, &y, &post, &comb, &t, &hpc, &iters,
                      &rms_eps, &hc_eps, &norm_eps};
  return sk_kernel_launch_ex(sk_plan_k(p, pre ? K_PRE_FINALIZE : K_POST_PRE_FINALIZE), fgrid, fblock, 0, stream,
                             pre ? pre_fin_args : fin_args, SK_LAUNCH_OVERLAP_PREVIOUS);
}

/* ---- caps JSON and the definition -------------------------------------------------------------- */


static const char *const norm_weight_names[] = {"none", "bf16", "fp32"};
static const sk_caps_field caps_fields[] = {
    SK_CAPS_INT64(sk_mhc_caps, hidden, 256, MAX_HIDDEN, true),
    SK_CAPS_INT64(sk_mhc_caps, max_tokens, 1, ((int64_t)1 << 31) - 1, false),
    SK_CAPS_ENUM(sk_mhc_caps, norm_weight, norm_weight_names, NULL),
    SK_CAPS_INT(sk_mhc_caps, sinkhorn_iters, 1, 1000, false),
    SK_CAPS_FLOAT(sk_mhc_caps, rms_eps),
    SK_CAPS_FLOAT(sk_mhc_caps, hc_eps),
    SK_CAPS_FLOAT(sk_mhc_caps, norm_eps),
};

static const sk_mhc_caps caps_defaults = SK_MHC_CAPS_INIT;

const sk_op_def sk_op_norm_mhc = {
    SK_OP_INFO(OP, "fused RMSNorm + hyper-connection residual (DeepSeek-V4 mHC): pre, post, post_pre; BF16", 80),
    SK_OP_CAPS(sk_mhc_caps, caps_defaults),
    SK_OP_STATE(mhc_state, mhc_bound),
    .num_kernels = K_COUNT,
    .entries = entries,
    .num_entries = 3,
    SK_OP_FIELDS(caps_fields),
    SK_OP_CALLBACKS(check_caps, select_kernels, finish, bind, run),
};
