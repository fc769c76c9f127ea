/* runtime/ops/norm/mhc.c - norm.mhc host side: caps, plan, scratch, bind for the three entry
 * points, run, registry entry. Kernels and launch contract: ops/norm/mhc.cuh. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"
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
/* Defaults: 4 warps x 2 buffers (104 KiB, two CTAs per SM) where the shared memory allows, 3 x 2
 * (88 KiB) elsewhere (sm_120's 99 KiB per block). SPARKINFER_MHC_PROJECTION_WARPS (1..8) and
 * SPARKINFER_MHC_PROJECTION_STAGES (1, 2) override them, read at plan (and manifest) time. */
static sk_status projection_shape(const char *arch, int *warps, int *stages) {
  const int n = sk_arch_number(arch);
  uint64_t w, st;
  SK_TRY(sk_env_u64("SPARKINFER_MHC_PROJECTION_WARPS", n == 90 || n == 100 ? 4 : 3, &w));
  if (w < 1 || w > 8)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_PROJECTION_WARPS=%llu: expected 1 .. 8",
                        (unsigned long long)w);
  SK_TRY(sk_env_u64("SPARKINFER_MHC_PROJECTION_STAGES", 2, &st));
  if (st < 1 || st > 2)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_PROJECTION_STAGES=%llu: expected 1 or 2",
                        (unsigned long long)st);
  const unsigned bytes = projection_smem((int)w, (int)st);
  if (bytes > sk_arch_block_smem_limit(arch))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "norm.mhc projection kernel: %llu warps x %llu stages need %u bytes of shared memory, more "
                        "than the %u a block of %s can have (SPARKINFER_MHC_PROJECTION_WARPS / _STAGES)",
                        (unsigned long long)w, (unsigned long long)st, bytes, sk_arch_block_smem_limit(arch), arch);
  *warps = (int)w, *stages = (int)st;
  return SK_OK;
}
#define MAX_STAGES 4
/* sk::mhc::kOwnSumsFlag: or-ed into the partial kernels' num_stages with 2 stages, the lockstep
 * loop with its own sums buffer (partial_knobs). The plan's `stages` carries it. */
#define OWN_SUMS_FLAG 16
/* Decode partial kernels (scalar FMA): one warp per (token, tile, role), 6 roles of 4 mixes. */
#define SCALAR_ROLES 6
#define SCALAR_THREADS 32
/* Largest T that takes the scalar partials (6 * S * T one-warp CTAs, S = H / 256, so their cost
 * grows with H where the tensor-core partial's latency does not): on the H200 they beat the
 * tensor-core ones at T = 1 (post_pre 7.1 vs 12.3 us) and lose at T = 128; at T = 16 they win for
 * H <= 4096 (post_pre 6.1 / 8.0 against 10.3 us, pre 4.7 / 6.1 against 6.4 / 6.6 at H = 2048 /
 * 4096) and tie or lose at H = 7168 (post_pre 10.6 / 10.6, pre 9.2 against 6.8: bench/RESULTS.md,
 * eighty-first run). */
static int64_t default_scalar_max_t(int64_t hidden) { return hidden <= 4096 ? 16 : 8; }
#define MAX_SCALAR_MAX_T 2147483647ull
/* Smallest T for which run_pre takes the split schedule (pre_projection_kernel, then the finalize
 * writes the 4 copies of x); SPARKINFER_MHC_SPLIT_MIN_T, 0: never. From the H200 (bench/RESULTS.md,
 * sixty-ninth run): the split is faster from T = 256 (H = 4096: 11.6 against 14.4 us per call,
 * H = 7168: 15.7 against 17.7), even at T = 128 on plain launches and behind it in graphs. */
#define DEFAULT_SPLIT_MIN_T 256
/* Fused decode kernels (sk::mhc::*_fused_decode_kernel): the scalar partial grid plus the
 * finalize in one launch; S + 1 CTAs per token (kFusedYRole of every tile, kFusedCombRole of
 * tile 0) wait for the token's other CTAs, so the host launches them only while the waiters of
 * the grid use at most 1 / FUSED_SLOT_SHARE of the device's CTA slots (kernel comment 2c). */
#define FUSED_SLOT_SHARE 2

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
enum { ENTRY_POST = 1, ENTRY_PRE = 2, ENTRY_POST_PRE = 3 };

struct sk_mhc_plan {
  sk_mhc_caps caps;
  char arch[SK_MAX_ARCH];
  sk_kernel *k[K_COUNT];
  sk_scratch_layout scratch;
  int sm_count;
  int stages;          /* cp.async stage buffers of the partial kernels, | OWN_SUMS_FLAG (2 stages, own sums) */
  int fn_smem_terms;   /* post_pre partial: fn terms kept in shared memory instead of registers */
  int tokens_per_cta;  /* 0: the cost model in geometry(); else SPARKINFER_MHC_TOKENS_PER_CTA */
  int64_t scalar_max_t; /* T <= this: scalar partial kernels (SPARKINFER_MHC_SCALAR_MAX_T; 0: never) */
  int64_t split_min_t;  /* run_pre, T >= this (above scalar_max_t): the split schedule (SPARKINFER_MHC_SPLIT_MIN_T; 0: never) */
  int projection_warps;         /* pre_projection_kernel's WARPS for the plan's arch */
  int projection_stages;        /* its x buffers per warp (STAGES) */
  int projection_ctas_per_sm;   /* its resident CTAs per SM (occupancy API at plan time; 0 offline) */
  int fused_decode;     /* SPARKINFER_MHC_FUSED_DECODE: 0 keeps the two launches */
  /* Dynamic shared memory of the partial and projection kernels' launches, fixed at plan time
   * (indexed by K_*; 0 for the kernels that take none). */
  unsigned dynamic_smem[K_COUNT];
  /* T <= this (and <= scalar_max_t): one fused launch, per entry [0] pre, [1] post_pre; from the
   * device's CTA slots at plan time (0: no GPU, knob off, or too few slots). */
  int64_t fused_max_t[2];
};

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

/* Stage buffers: 2 (lockstep schedule) everywhere. Measured on the H200 (bench/RESULTS.md,
 * eleventh run) the pipelined schedule (3-4 stages, 172 / 213 KiB on post_pre, sm_90/sm_100 only)
 * is not faster: T = 4096 post_pre 380 us with 4 stages against 364 us with 2. It stays
 * selectable with SPARKINFER_MHC_STAGES (2..4) for tuning on other GPUs. Read at plan time, like the crossover to the scalar partials: run never consults
 * the environment. */
static sk_status partial_knobs(const char *arch, int64_t hidden, int *stages, int *tokens_per_cta, int64_t *scalar_max_t,
                               int64_t *split_min_t, int *fn_smem_terms) {
  uint64_t v;
  SK_TRY(sk_env_u64("SPARKINFER_MHC_STAGES", 2, &v));
  if (v < 2 || v > MAX_STAGES)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_STAGES=%llu: expected 2, 3 or 4", (unsigned long long)v);
  *stages = (int)v; /* whether the target's blocks hold them: the shared-memory check below */
  SK_TRY(sk_env_u64("SPARKINFER_MHC_TOKENS_PER_CTA", 0, &v));
  if (v % GROUP || v > MAX_TOKENS_PER_CTA)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_TOKENS_PER_CTA=%llu: expected a multiple of %d up to %d",
                        (unsigned long long)v, GROUP, MAX_TOKENS_PER_CTA);
  *tokens_per_cta = (int)v;
  SK_TRY(sk_env_u64("SPARKINFER_MHC_SCALAR_MAX_T", (uint64_t)default_scalar_max_t(hidden), &v));
  if (v > MAX_SCALAR_MAX_T)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_SCALAR_MAX_T=%llu: expected 0 (never) .. %llu tokens",
                        (unsigned long long)v, MAX_SCALAR_MAX_T);
  *scalar_max_t = (int64_t)v;
  SK_TRY(sk_env_u64("SPARKINFER_MHC_SPLIT_MIN_T", DEFAULT_SPLIT_MIN_T, &v));
  if (v > MAX_SCALAR_MAX_T)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_SPLIT_MIN_T=%llu: expected 0 (never) .. %llu tokens",
                        (unsigned long long)v, MAX_SCALAR_MAX_T);
  *split_min_t = (int64_t)v;
  /* post_pre's partial holds fn (3 bf16 terms, 72 registers a thread) for the whole CTA; its last
   * k terms can live in shared memory instead (48 KiB each), which frees the registers its spills
   * and recomputed addresses took: on the H200 k = 2 made the partial 6% faster and run_post_pre
   * 3-10% (bench/RESULTS.md, seventy-sixth run). Default: the most terms, up to 2, that fit the
   * block's shared memory with the chosen stages (sm_90/sm_100: 2 with 2 stages, 1 with 3, 0 with
   * 4; sm_120: 0). SPARKINFER_MHC_FN_SMEM_TERMS (0..3) sets k, checked against the same limit. */
  const unsigned limit = sk_arch_block_smem_limit(arch);
  unsigned fit = 2;
  while (fit > 0 && partial_smem(0, *stages, (int)fit) + PARTIAL_STATIC_SMEM > limit) fit--;
  SK_TRY(sk_env_u64("SPARKINFER_MHC_FN_SMEM_TERMS", fit, &v));
  if (v > 3)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_FN_SMEM_TERMS=%llu: expected 0 .. 3",
                        (unsigned long long)v);
  *fn_smem_terms = (int)v;
  /* The 2-stage lockstep loop with a sums buffer of its own (sk::mhc::kOwnSumsFlag): two barriers
   * a group instead of four, each group's reduce moved next to the next group's mix-back. On the
   * H200 the post_pre partial got 4% faster (T = 4096, H = 7168: 225.8 -> 216.1 us; run_post_pre
   * 2-3% at H 4096 / 7168; bench/RESULTS.md, eighty-sixth run). Default: on where the sums buffer
   * (24 KiB for post_pre) fits next to the stages and the fn terms chosen above (sm_90 / sm_100),
   * off elsewhere (sm_120's 99 KiB a block); SPARKINFER_MHC_OWN_SUMS=0 / 1 sets it (2 stages only). */
  int own_sums;
  SK_TRY(sk_env_flag("SPARKINFER_MHC_OWN_SUMS", -1, &own_sums));
  if (own_sums > 1)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "SPARKINFER_MHC_OWN_SUMS=%d: expected 0 or 1", own_sums);
  if (own_sums == 1 && *stages != 2)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "SPARKINFER_MHC_OWN_SUMS=1 applies to the 2-stage lockstep loop, not SPARKINFER_MHC_STAGES=%d",
                        *stages);
  if (own_sums < 0)
    own_sums = *stages == 2 && partial_smem(0, 2 | OWN_SUMS_FLAG, *fn_smem_terms) + PARTIAL_STATIC_SMEM <= limit;
  if (own_sums) *stages |= OWN_SUMS_FLAG;
  const unsigned bytes = partial_smem(0, *stages, *fn_smem_terms) + PARTIAL_STATIC_SMEM;
  if (bytes > limit)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "norm.mhc post_pre partial kernel: %d stages%s and %d fn terms in shared memory need %u bytes, "
                        "more than the %u a block of %s can have (SPARKINFER_MHC_STAGES / _FN_SMEM_TERMS / _OWN_SUMS)",
                        *stages & (OWN_SUMS_FLAG - 1), own_sums ? " with their own sums buffer" : "", *fn_smem_terms,
                        bytes, limit, arch);
  return SK_OK;
}

/* Largest T whose fused launch keeps its waiters ((S + 1) per token) within 1 / FUSED_SLOT_SHARE
 * of the device's CTA slots for that kernel: a launch that could not have all its waiters resident
 * might wait forever (kernel comment 2c). Capped by the scalar crossover. */
static int64_t fused_max_tokens(const sk_mhc_plan *p, int k) {
  if (!p->fused_decode || !p->k[k] || p->sm_count <= 0) return 0;
  const int64_t per_sm = sk_op_resident_ctas_per_sm(p->k[k], SCALAR_THREADS, 0),
                waiters_per_token = p->caps.hidden / TILE_H + 1,
                max_t = per_sm * p->sm_count / FUSED_SLOT_SHARE / waiters_per_token;
  return max_t < p->scalar_max_t ? max_t : p->scalar_max_t;
}

SK_API int sk_mhc_is_supported(const char *arch) { return sk_arch_valid(arch) && sk_arch_number(arch) >= 80; }

static sk_status check_caps(const sk_mhc_caps *c) {
  if (!c) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": caps is NULL");
  if (c->hidden < TILE_H || c->hidden % TILE_H || c->hidden > MAX_HIDDEN)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": hidden = %lld must be a multiple of 256 in [256, %d]",
                        (long long)c->hidden, MAX_HIDDEN);
  if (c->max_tokens < 1 || c->max_tokens > ((int64_t)1 << 31) - 1)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": max_tokens = %lld must be in [1, 2^31)", (long long)c->max_tokens);
  if (c->norm_weight < SK_MHC_NORM_NONE || c->norm_weight > SK_MHC_NORM_FP32)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": norm_weight must be SK_MHC_NORM_NONE, _BF16 or _FP32");
  if (c->sinkhorn_iters < 1 || c->sinkhorn_iters > 1000)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": sinkhorn_iters = %d must be in [1, 1000]", c->sinkhorn_iters);
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

static void kernel_names(const sk_mhc_caps *c, int projection_warps, int projection_stages, int fn_smem_terms,
                         char names[K_COUNT][128], char params[96]) {
  const long long h = (long long)c->hidden;
  const char *w = weight_type(c->norm_weight);
  snprintf(names[K_POST], 128, "sk::mhc::post_kernel<%lld>", h);
  snprintf(names[K_PRE_PARTIAL], 128, "sk::mhc::pre_partial_kernel<%lld>", h);
  snprintf(names[K_PRE_FINALIZE], 128, "sk::mhc::pre_finalize_kernel<%lld, %s>", h, w);
  snprintf(names[K_POST_PRE_PARTIAL], 128, "sk::mhc::post_pre_partial_kernel<%lld, %d>", h, fn_smem_terms);
  snprintf(names[K_POST_PRE_FINALIZE], 128, "sk::mhc::post_pre_finalize_kernel<%lld, %s>", h, w);
  snprintf(names[K_PRE_PARTIAL_SCALAR], 128, "sk::mhc::pre_partial_scalar_kernel<%lld>", h);
  snprintf(names[K_POST_PRE_PARTIAL_SCALAR], 128, "sk::mhc::post_pre_partial_scalar_kernel<%lld>", h);
  snprintf(names[K_PRE_FUSED_DECODE], 128, "sk::mhc::pre_fused_decode_kernel<%lld, %s>", h, w);
  snprintf(names[K_POST_PRE_FUSED_DECODE], 128, "sk::mhc::post_pre_fused_decode_kernel<%lld, %s>", h, w);
  snprintf(names[K_PRE_PROJECTION], 128, "sk::mhc::pre_projection_kernel<%lld, %d, %d>", h, projection_warps,
           projection_stages);
  static const char *const nw[] = {"none", "bf16", "fp32"};
  snprintf(params, 96, "hidden=%lld norm_weight=%s", h, nw[c->norm_weight]);
}

static cJSON *caps_json(const sk_mhc_caps *c) {
  static const char *const nw[] = {"none", "bf16", "fp32"};
  cJSON *j = cJSON_CreateObject();
  if (!j) return NULL;
  cJSON_AddNumberToObject(j, "hidden", (double)c->hidden);
  cJSON_AddNumberToObject(j, "max_tokens", (double)c->max_tokens);
  cJSON_AddStringToObject(j, "norm_weight", nw[c->norm_weight]);
  return j;
}

/* Kernels a plan can launch: a partial variant whose T range [1, max_tokens] misses is skipped
 * (e.g. the tensor-core partials of a decode-only plan), saving its compilation. */
static bool plan_uses(const sk_mhc_plan *p, int k) {
  if (k == K_PRE_FUSED_DECODE || k == K_POST_PRE_FUSED_DECODE) return p->scalar_max_t > 0 && p->fused_decode;
  if (k == K_PRE_PARTIAL_SCALAR || k == K_POST_PRE_PARTIAL_SCALAR) return p->scalar_max_t > 0;
  /* Tensor-core T range (scalar_max_t, max_tokens]; run_pre's split schedule takes [split_min_t, ...). */
  const int64_t first_tc = p->scalar_max_t + 1, first_split = p->split_min_t > first_tc ? p->split_min_t : first_tc;
  const bool split = p->split_min_t > 0 && p->caps.max_tokens >= first_split;
  if (k == K_PRE_PROJECTION) return split;
  if (k == K_PRE_PARTIAL) return p->caps.max_tokens >= first_tc && (!split || first_split > first_tc);
  if (k == K_POST_PRE_PARTIAL) return p->caps.max_tokens >= first_tc;
  return true;
}

SK_API sk_status sk_mhc_plan_create(const sk_mhc_caps *caps, sk_mhc_plan **out) {
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": plan out-pointer is NULL");
  *out = NULL;
  SK_TRY(check_caps(caps));
  sk_mhc_plan *p = calloc(1, sizeof *p);
  if (!p) return sk_set_error(SK_ERR_OUT_OF_MEMORY, OP ": out of memory");
  p->caps = *caps;
  sk_status s = sk_op_arch(OP, caps->arch, p->arch);
  if (s == SK_OK && !sk_mhc_is_supported(p->arch))
    s = sk_set_error(SK_ERR_UNSUPPORTED, OP ": arch %s is not supported (needs sm_80 or newer)", p->arch);
  p->caps.arch = p->arch;
  if (s == SK_OK && sk_device_sm_count(&p->sm_count) != SK_OK) p->sm_count = 0; /* offline plan */
  char names[K_COUNT][128], params[96];
  if (s == SK_OK) s = projection_shape(p->arch, &p->projection_warps, &p->projection_stages);
  if (s == SK_OK)
    s = partial_knobs(p->arch, caps->hidden, &p->stages, &p->tokens_per_cta, &p->scalar_max_t, &p->split_min_t,
                      &p->fn_smem_terms);
  if (s == SK_OK) kernel_names(&p->caps, p->projection_warps, p->projection_stages, p->fn_smem_terms, names, params);
  if (s == SK_OK) s = sk_env_flag("SPARKINFER_MHC_FUSED_DECODE", 1, &p->fused_decode);
  for (int i = 0; s == SK_OK && i < K_COUNT; i++)
    if (plan_uses(p, i)) s = sk_op_resolve(OP, SOURCE, names[i], params, p->arch, &p->k[i]);
  p->dynamic_smem[K_POST_PRE_PARTIAL] = partial_smem(0, p->stages, p->fn_smem_terms);
  p->dynamic_smem[K_PRE_PARTIAL] = partial_smem(1, p->stages, 0);
  p->dynamic_smem[K_PRE_PROJECTION] = projection_smem(p->projection_warps, p->projection_stages);
  for (int i = 0; s == SK_OK && i < K_COUNT; i++) s = sk_op_allow_dynamic_smem(p->k[i], p->dynamic_smem[i]);
  if (s == SK_OK && p->k[K_PRE_PROJECTION] && p->sm_count > 0)
    p->projection_ctas_per_sm = sk_op_resident_ctas_per_sm(p->k[K_PRE_PROJECTION], p->projection_warps * 32,
                                                           p->dynamic_smem[K_PRE_PROJECTION]);
  if (s == SK_OK) {
    p->fused_max_t[0] = fused_max_tokens(p, K_PRE_FUSED_DECODE);
    p->fused_max_t[1] = fused_max_tokens(p, K_POST_PRE_FUSED_DECODE);
  }
  /* Regions: 0 the partial rows, 1 the fused decode kernels' per-token arrival counters (u32). */
  if (s == SK_OK &&
      (sk_scratch_add(&p->scratch, (size_t)caps->max_tokens * (size_t)(caps->hidden / TILE_H) * PARTIAL_FLOATS * 4) < 0 ||
       sk_scratch_add_counters(&p->scratch, (size_t)caps->max_tokens * 4) < 0))
    s = SK_ERR_INTERNAL;
  if (s != SK_OK) {
    free(p);
    return s;
  }
  cJSON *j = caps_json(&p->caps);
  sk_warmup_note_op(OP, j);
  cJSON_Delete(j);
  *out = p;
  return SK_OK;
}

SK_API sk_status sk_mhc_scratch_spec(const sk_mhc_plan *p, sk_scratch_spec *spec) {
  if (!p || !spec) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " scratch_spec: NULL argument");
  *spec = sk_scratch_spec_of(&p->scratch);
  return SK_OK;
}

SK_API void sk_mhc_plan_destroy(sk_mhc_plan *p) { free(p); }

/* ---- bind -------------------------------------------------------------------------------- */

/* Binding layout. ptr: 0 x, 1 residual, 2 post(in), 3 comb(in), 4 fn, 5 residual_out/out,
 * 6 partials, 7 hc_scale, 8 hc_base, 9 norm_weight, 10 y, 11 post(out), 12 comb(out),
 * 13 token counters (fused decode).
 * dim: 0 entry, 1 T, 2 partial stage buffers, 3 tokens per partial CTA (both for the tensor-core
 * partials; run takes the scalar ones when T <= the plan's crossover), 4 hidden per finalize CTA,
 * 5 one fused decode launch (1) or partial + finalize (0), 6 run_pre's split schedule
 * (pre_projection_kernel, the copies written by the finalize); the GPU test reads 5 and 6. */
#define BF16_T SK_DL_BF16
#define F32_T SK_DL_FP32

static sk_status check(const char *what, const DLTensor *t, DLDataType dt, int nd, int64_t d0, int64_t d1, int64_t d2,
                       void **out) {
  sk_tensor_spec s = {what, dt, nd, {d0, d1, d2, 0}, 16};
  return sk_check_tensor(OP " bind", t, &s, out);
}

static sk_status tokens_of(const sk_mhc_plan *p, const DLTensor *x, int64_t *t) {
  void *unused;
  SK_TRY(check("x", x, BF16_T, 2, -1, p->caps.hidden, 0, &unused));
  *t = x->shape[0];
  if (*t < 1 || *t > p->caps.max_tokens)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " bind: x has %lld tokens; the plan takes 1..%lld (max_tokens)",
                        (long long)*t, (long long)p->caps.max_tokens);
  return SK_OK;
}

/* Launch geometry from the kernels' contract. Projection (2d): tokens per CTA, a multiple of 16,
 * from a wave model: time ~ waves x (tokens per CTA + 16), the 16 standing for the CTA's fixed
 * cost (its fn_pre fill, pipeline fill). Finalize: split the hidden size over several CTAs when T
 * is small. */
static int64_t wave_tokens_per_cta(const sk_mhc_plan *p, int64_t t, int ctas_per_sm, int64_t step) {
  if (p->tokens_per_cta > 0) return p->tokens_per_cta;
  const int64_t s = p->caps.hidden / TILE_H,
                slots = (int64_t)(p->sm_count > 0 ? p->sm_count : 128) * (ctas_per_sm > 0 ? ctas_per_sm : 1);
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
 * Model: time ~ waves x (groups per CTA + 5 x the most segments a CTA runs), a segment costing
 * about 5 groups: its fn load and pipeline fill were a quarter of the post_pre partial's time
 * when every CTA ran 8 groups (ninety-third run), and at T = 1024, H = 7168 ranges of 14 groups
 * (128 CTAs, half of them crossing a tile) were 9% slower than 16 (112 CTAs, none crossing;
 * hundredth run). Candidates: one balanced wave (`base` groups), base + 1 and base + 2, and
 * whole tiles. Resident CTAs per SM: 1 (post_pre, 512 threads x 128 registers), 4 (pre). Bind
 * cost: at most one step per CTA and candidate (max_segments stops at its bound). The grid
 * (items / groups per CTA) stays below 2^31. */
static int64_t partial_groups_per_cta(const sk_mhc_plan *p, int64_t t, int ctas_per_sm) {
  const int64_t per_tile = sk_cdiv(t, GROUP), items = per_tile * (p->caps.hidden / TILE_H),
                fewest = sk_cdiv(items, INT32_MAX);
  if (p->tokens_per_cta > 0) return p->tokens_per_cta / GROUP > fewest ? p->tokens_per_cta / GROUP : fewest;
  const int64_t slots = (int64_t)(p->sm_count > 0 ? p->sm_count : 128) * ctas_per_sm;
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

static void geometry(const sk_mhc_plan *p, int64_t t, int entry, sk_binding *b) {
  const int64_t h = p->caps.hidden, sms = p->sm_count > 0 ? p->sm_count : 128;
  b->dim[2] = p->stages;
  b->dim[3] = partial_groups_per_cta(p, t, entry == ENTRY_PRE ? 4 : 1); /* the projection's: below */
  int64_t hpc = h;
  if (t < 2 * sms / (h / 1024 > 0 ? h / 1024 : 1)) {
    hpc = h % 1024 == 0 ? 1024 : h % 512 == 0 ? 512 : 256;
  }
  b->dim[4] = hpc;
  b->dim[5] = t <= p->fused_max_t[entry == ENTRY_PRE ? 0 : 1];
  b->dim[6] = entry == ENTRY_PRE && t > p->scalar_max_t && p->split_min_t > 0 && t >= p->split_min_t;
  /* pre_projection_kernel's warps take a CTA's groups round-robin: whole rounds of 16 x warps
   * tokens (up to 16; every CTA fills its 40 KiB fn_pre tile once, so longer CTAs amortise it). */
  if (b->dim[6]) b->dim[3] = wave_tokens_per_cta(p, t, p->projection_ctas_per_sm, GROUP * p->projection_warps);
}

static sk_status bind_pre_outputs(const sk_mhc_plan *p, int64_t t, const DLTensor *hc_scale, const DLTensor *hc_base,
                                  const DLTensor *norm_weight, const DLTensor *residual_out, const DLTensor *y,
                                  const DLTensor *post, const DLTensor *comb, void *scratch, size_t scratch_bytes,
                                  sk_binding *b) {
  const int64_t h = p->caps.hidden;
  SK_TRY(check("hc_scale", hc_scale, F32_T, 1, 3, 0, 0, &b->ptr[7]));
  SK_TRY(check("hc_base", hc_base, F32_T, 1, 24, 0, 0, &b->ptr[8]));
  if (p->caps.norm_weight == SK_MHC_NORM_NONE) {
    if (norm_weight)
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " bind: the plan fuses no norm weight; pass NULL");
  } else {
    SK_TRY(check("norm_weight", norm_weight, p->caps.norm_weight == SK_MHC_NORM_BF16 ? BF16_T : F32_T, 1, h, 0, 0,
                 &b->ptr[9]));
  }
  SK_TRY(check("residual_out", residual_out, BF16_T, 3, t, 4, h, &b->ptr[5]));
  SK_TRY(check("y", y, BF16_T, 2, t, h, 0, &b->ptr[10]));
  SK_TRY(check("post", post, F32_T, 2, t, 4, 0, &b->ptr[11]));
  SK_TRY(check("comb", comb, F32_T, 3, t, 4, 4, &b->ptr[12]));
  void *views[8] = {0};
  SK_TRY(sk_scratch_bind(OP " bind", &p->scratch, scratch, scratch_bytes, views));
  b->ptr[6] = views[0];
  b->ptr[13] = views[1];
  return SK_OK;
}

/* The mix-back inputs post and post_pre share: x (already checked), residual, post, comb. */
static sk_status bind_mix_back_inputs(const sk_mhc_plan *p, int64_t t, const DLTensor *x, const DLTensor *residual,
                                      const DLTensor *post, const DLTensor *comb, const char *post_name,
                                      const char *comb_name, sk_binding *b) {
  b->ptr[0] = (char *)x->data + x->byte_offset;
  SK_TRY(check("residual", residual, BF16_T, 3, t, 4, p->caps.hidden, &b->ptr[1]));
  SK_TRY(check(post_name, post, F32_T, 2, t, 4, 0, &b->ptr[2]));
  return check(comb_name, comb, F32_T, 3, t, 4, 4, &b->ptr[3]);
}

SK_API sk_status sk_mhc_bind_post(const sk_mhc_plan *p, const DLTensor *x, const DLTensor *residual,
                                  const DLTensor *post, const DLTensor *comb, const DLTensor *out, sk_binding *binding) {
  if (!p || !binding) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " bind: plan or binding is NULL");
  sk_binding b;
  sk_binding_init(&b, p);
  int64_t t;
  SK_TRY(tokens_of(p, x, &t));
  SK_TRY(bind_mix_back_inputs(p, t, x, residual, post, comb, "post", "comb", &b));
  SK_TRY(check("out", out, BF16_T, 3, t, 4, p->caps.hidden, &b.ptr[5]));
  b.dim[0] = ENTRY_POST;
  b.dim[1] = t;
  *binding = b;
  return SK_OK;
}

SK_API sk_status sk_mhc_bind_pre(const sk_mhc_plan *p, const DLTensor *x, const DLTensor *fn_pre,
                                 const DLTensor *hc_scale, const DLTensor *hc_base, const DLTensor *norm_weight,
                                 const DLTensor *residual_out, const DLTensor *y, const DLTensor *post,
                                 const DLTensor *comb, void *scratch, size_t scratch_bytes, sk_binding *binding) {
  if (!p || !binding) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " bind: plan or binding is NULL");
  sk_binding b;
  sk_binding_init(&b, p);
  int64_t t;
  SK_TRY(tokens_of(p, x, &t));
  b.ptr[0] = (char *)x->data + x->byte_offset;
  SK_TRY(check("fn_pre", fn_pre, F32_T, 2, 24, p->caps.hidden, 0, &b.ptr[4]));
  SK_TRY(bind_pre_outputs(p, t, hc_scale, hc_base, norm_weight, residual_out, y, post, comb, scratch, scratch_bytes, &b));
  b.dim[0] = ENTRY_PRE;
  b.dim[1] = t;
  geometry(p, t, ENTRY_PRE, &b);
  *binding = b;
  return SK_OK;
}

SK_API sk_status sk_mhc_bind_post_pre(const sk_mhc_plan *p, const DLTensor *x, const DLTensor *residual,
                                      const DLTensor *prev_post, const DLTensor *prev_comb, const DLTensor *fn,
                                      const DLTensor *hc_scale, const DLTensor *hc_base, const DLTensor *norm_weight,
                                      const DLTensor *residual_out, const DLTensor *y, const DLTensor *post,
                                      const DLTensor *comb, void *scratch, size_t scratch_bytes, sk_binding *binding) {
  if (!p || !binding) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " bind: plan or binding is NULL");
  sk_binding b;
  sk_binding_init(&b, p);
  int64_t t;
  SK_TRY(tokens_of(p, x, &t));
  SK_TRY(bind_mix_back_inputs(p, t, x, residual, prev_post, prev_comb, "prev_post", "prev_comb", &b));
  SK_TRY(check("fn", fn, F32_T, 2, 24, 4 * p->caps.hidden, 0, &b.ptr[4]));
  SK_TRY(bind_pre_outputs(p, t, hc_scale, hc_base, norm_weight, residual_out, y, post, comb, scratch, scratch_bytes, &b));
  b.dim[0] = ENTRY_POST_PRE;
  b.dim[1] = t;
  geometry(p, t, ENTRY_POST_PRE, &b);
  *binding = b;
  return SK_OK;
}

/* ---- run ---------------------------------------------------------------------------------- */

/* Every norm.mhc kernel waits for the previous kernel before touching memory (pdl_enter or
 * pdl_wait_for_previous, ops/common/sync.cuh), so each launch may overlap the previous
 * kernel's tail (SK_LAUNCH_OVERLAP_PREVIOUS, include/sparkinfer/jit.h). */
SK_API sk_status sk_mhc_run(const sk_mhc_plan *p, const sk_binding *b, void *stream) {
  if (SK_UNLIKELY(!p)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " run: plan is NULL");
  SK_TRY(sk_binding_check(OP, b, p));
  void *const *ptr = b->ptr;
  int t = (int)b->dim[1];
  const unsigned s = (unsigned)(p->caps.hidden / TILE_H);
  if (b->dim[0] == ENTRY_POST) {
    void *args[] = {(void *)&ptr[0], (void *)&ptr[1], (void *)&ptr[2], (void *)&ptr[3], (void *)&ptr[5], &t};
    return sk_kernel_launch_ex(p->k[K_POST], (sk_dim3){(unsigned)sk_cdiv((int64_t)t * s, 4), 1, 1},
                               (sk_dim3){POST_THREADS, 1, 1}, 0, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS);
  }
  int work_per_cta = (int)b->dim[3], hpc = (int)b->dim[4], iters = p->caps.sinkhorn_iters, stages = (int)b->dim[2];
  float rms_eps = p->caps.rms_eps, hc_eps = p->caps.hc_eps, norm_eps = p->caps.norm_eps;
  const int pre = b->dim[0] == ENTRY_PRE;
  if (b->dim[5]) { /* decode, one launch: scalar partials + finalize (2c) */
    const sk_dim3 grid = {(unsigned)t, s, SCALAR_ROLES}, block = {SCALAR_THREADS, 1, 1};
    void *pre_args[] = {(void *)&ptr[0], (void *)&ptr[4], (void *)&ptr[7], (void *)&ptr[8], (void *)&ptr[9],
                        (void *)&ptr[5], (void *)&ptr[6], (void *)&ptr[13], (void *)&ptr[10], (void *)&ptr[11],
                        (void *)&ptr[12], &iters, &rms_eps, &hc_eps, &norm_eps};
    void *post_pre_args[] = {(void *)&ptr[0], (void *)&ptr[1], (void *)&ptr[2], (void *)&ptr[3], (void *)&ptr[4],
                             (void *)&ptr[7], (void *)&ptr[8], (void *)&ptr[9], (void *)&ptr[5], (void *)&ptr[6],
                             (void *)&ptr[13], (void *)&ptr[10], (void *)&ptr[11], (void *)&ptr[12], &iters,
                             &rms_eps, &hc_eps, &norm_eps};
    return sk_kernel_launch_ex(p->k[pre ? K_PRE_FUSED_DECODE : K_POST_PRE_FUSED_DECODE], grid, block, 0, stream,
                               pre ? pre_args : post_pre_args, SK_LAUNCH_OVERLAP_PREVIOUS);
  }
  if (t <= p->scalar_max_t) { /* decode: scalar partials, one warp per (token, tile, role) */
    const sk_dim3 grid = {(unsigned)t, s, SCALAR_ROLES}, block = {SCALAR_THREADS, 1, 1};
    void *pre_args[] = {(void *)&ptr[0], (void *)&ptr[4], (void *)&ptr[5], (void *)&ptr[6]};
    void *post_pre_args[] = {(void *)&ptr[0], (void *)&ptr[1], (void *)&ptr[2], (void *)&ptr[3],
                             (void *)&ptr[4], (void *)&ptr[5], (void *)&ptr[6]};
    SK_TRY(sk_kernel_launch_ex(p->k[pre ? K_PRE_PARTIAL_SCALAR : K_POST_PRE_PARTIAL_SCALAR], grid, block, 0, stream,
                               pre ? pre_args : post_pre_args, SK_LAUNCH_OVERLAP_PREVIOUS));
  } else if (b->dim[6]) { /* run_pre, split: the projection; the finalize writes the copies */
    void *args[] = {(void *)&ptr[0], (void *)&ptr[4], (void *)&ptr[6], &t, &work_per_cta}; /* tokens per CTA */
    SK_TRY(sk_kernel_launch_ex(p->k[K_PRE_PROJECTION], (sk_dim3){(unsigned)sk_cdiv(t, work_per_cta), s, 1},
                               (sk_dim3){(unsigned)p->projection_warps * 32, 1, 1},
                               p->dynamic_smem[K_PRE_PROJECTION], stream, args, SK_LAUNCH_OVERLAP_PREVIOUS));
  } else {
    /* groups of 16 tokens per CTA over the tile-major items (tile, group) */
    const sk_dim3 grid = {(unsigned)sk_cdiv(sk_cdiv(t, GROUP) * s, work_per_cta), 1, 1},
                  block = {pre ? PRE_PARTIAL_THREADS : POST_PRE_PARTIAL_THREADS, 1, 1};
    const unsigned smem = p->dynamic_smem[pre ? K_PRE_PARTIAL : K_POST_PRE_PARTIAL];
    void *pre_args[] = {(void *)&ptr[0], (void *)&ptr[4], (void *)&ptr[5], (void *)&ptr[6], &t, &work_per_cta, &stages};
    void *post_pre_args[] = {(void *)&ptr[0], (void *)&ptr[1], (void *)&ptr[2], (void *)&ptr[3],
                             (void *)&ptr[4], (void *)&ptr[5], (void *)&ptr[6], &t, &work_per_cta, &stages};
    SK_TRY(sk_kernel_launch_ex(p->k[pre ? K_PRE_PARTIAL : K_POST_PRE_PARTIAL], grid, block, smem, stream,
                               pre ? pre_args : post_pre_args, SK_LAUNCH_OVERLAP_PREVIOUS));
  }
  /* Every partial variant leaves the same rows: one finalize. It reads the streams: x for pre
   * (4 copies; after the split schedule's projection it also writes them to residual_out),
   * residual_out for post_pre. */
  const sk_dim3 fgrid = {(unsigned)t, (unsigned)(p->caps.hidden / hpc), 1}, fblock = {FINALIZE_THREADS, 1, 1};
  void *copies = pre && b->dim[6] ? ptr[5] : NULL;
  void *pre_fin_args[] = {(void *)&ptr[0], &copies, (void *)&ptr[6], (void *)&ptr[7], (void *)&ptr[8], (void *)&ptr[9],
                          (void *)&ptr[10], (void *)&ptr[11], (void *)&ptr[12], &t, &hpc, &iters, &rms_eps, &hc_eps,
                          &norm_eps};
  void *fin_args[] = {(void *)&ptr[5],
                      (void *)&ptr[6], (void *)&ptr[7], (void *)&ptr[8], (void *)&ptr[9], (void *)&ptr[10],
                      (void *)&ptr[11], (void *)&ptr[12], &t, &hpc, &iters, &rms_eps, &hc_eps, &norm_eps};
  return sk_kernel_launch_ex(p->k[pre ? K_PRE_FINALIZE : K_POST_PRE_FINALIZE], fgrid, fblock, 0, stream,
                             pre ? pre_fin_args : fin_args, SK_LAUNCH_OVERLAP_PREVIOUS);
}

/* ---- registry and manifests --------------------------------------------------------------- */

static bool mhc_supported(const char *arch) { return sk_mhc_is_supported(arch); }

static sk_status mhc_requests(const cJSON *j, const char *arch, sk_request_list *out) {
  static const char *const fields[] = {"hidden", "max_tokens", "norm_weight", NULL};
  SK_TRY(sk_json_check_fields(j, "caps", fields));
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "hidden");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "norm_weight");
  if (!cJSON_IsNumber(h) || h->valuedouble != (double)(int64_t)h->valuedouble || h->valuedouble < 0 || h->valuedouble > MAX_HIDDEN)
    return sk_set_error(SK_ERR_MANIFEST, "caps.hidden: expected a whole number in [256, %d]", MAX_HIDDEN);
  if (t && (!cJSON_IsNumber(t) || !(t->valuedouble >= 1 && t->valuedouble < 2147483648.0)))
    return sk_set_error(SK_ERR_MANIFEST, "caps.max_tokens: expected a whole number in [1, 2^31)");
  sk_mhc_caps c = {(int64_t)h->valuedouble, t ? (int64_t)t->valuedouble : 1, SK_MHC_NORM_NONE, 20, 1e-6f, 1e-6f, 1e-6f, arch};
  if (w) {
    if (!cJSON_IsString(w)) return sk_set_error(SK_ERR_MANIFEST, "caps.norm_weight: expected \"none\", \"bf16\" or \"fp32\"");
    if (!strcmp(w->valuestring, "bf16")) c.norm_weight = SK_MHC_NORM_BF16;
    else if (!strcmp(w->valuestring, "fp32")) c.norm_weight = SK_MHC_NORM_FP32;
    else if (strcmp(w->valuestring, "none")) return sk_set_error(SK_ERR_MANIFEST, "caps.norm_weight: unknown value");
  }
  if (check_caps(&c) != SK_OK) return sk_set_error(SK_ERR_MANIFEST, "%s", sk_last_error_message());
  char names[K_COUNT][128], params[96];
  int warps, stages, partial_stages, tokens_per_cta, fn_smem_terms;
  int64_t scalar_max_t, split_min_t;
  SK_TRY(projection_shape(arch, &warps, &stages));
  SK_TRY(partial_knobs(arch, c.hidden, &partial_stages, &tokens_per_cta, &scalar_max_t, &split_min_t, &fn_smem_terms));
  kernel_names(&c, warps, stages, fn_smem_terms, names, params);
  for (int i = 0; i < K_COUNT; i++) {
    sk_kernel_request r = {OP, SOURCE, names[i], params, arch, NULL, 0, 0};
    SK_TRY(sk_request_list_add(out, &r));
  }
  return SK_OK;
}

const sk_op_desc sk_op_desc_norm_mhc = {
    {OP, SK_OP_PLANNED, "fused RMSNorm + hyper-connection residual (DeepSeek-V4 mHC): pre, post, post_pre; BF16",
     "sm_80+,sm_90a,sm_120a,sm_121a"},
    mhc_supported,
    mhc_requests,
};
