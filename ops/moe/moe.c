/* ops/moe/moe.c - moe.fused_moe and moe.ep_moe on the op layer: caps, selection (the kernels of
 * both regimes and the scratch layout, ops/moe/plan.cuh), tensor table, bind (the kernels'
 * parameter block and the launch sequence for M), run. Kernels and contracts: the ops/moe kernel headers;
 * ops/moe/moe.md. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "op.h"
#include "plan.cuh" /* plain C11 as well: dims, scratch layout, launch sequences, parameter block */
#include "sparkinfer/moe.h"

_Static_assert(SK_MOE_RECIPE_W4A16 == SK_MOE_W4A16 && SK_MOE_RECIPE_NVFP4 == SK_MOE_W4A4, "recipe values");
_Static_assert(SK_MOE_WEIGHTS_NVFP4 == SK_MOE_WFMT_NVFP4 && SK_MOE_WEIGHTS_MXFP4 == SK_MOE_WFMT_MXFP4, "weight formats");
_Static_assert(SK_MOE_ACTIVATION_SILU == SK_MOE_ACT_SILU && SK_MOE_ACTIVATION_RELU2 == SK_MOE_ACT_RELU2 && SK_MOE_ACTIVATION_SWIGLU_OAI == SK_MOE_ACT_SWIGLU_OAI, "acts");
_Static_assert(SK_MOE_W1_ORDER_UP_GATE == SK_MOE_W1_UP_GATE && SK_MOE_W1_ORDER_GATE_UP == SK_MOE_W1_GATE_UP &&
                   SK_MOE_W1_ORDER_INTERLEAVED == SK_MOE_W1_INTERLEAVED, "W1 orders");
_Static_assert(SK_MOE_ROUTES_TOPK - 1 == SK_MOE_TOPK_RAW && SK_MOE_ROUTES_TOPK_RENORM - 1 == SK_MOE_TOPK_RENORM &&
                   SK_MOE_ROUTES_SOFTMAX_TOPK - 1 == SK_MOE_TOPK_SOFTMAX_ALL, "routing modes");

#define MAX_SLOTS 10
enum { T_X, T_IDS, T_WEIGHTS, T_LOGITS, T_W1C, T_W1S, T_W2C, T_W2S, T_W1GS, T_W2GS, T_A1GS, T_A2GS, T_MAP, T_OUT, T_COUNT };

/* One launch of a run, resolved to its kernel slot at plan time. */
typedef struct moe_launch {
  int slot;
  sk_dim3 grid;
  unsigned block, smem;
} moe_launch;

typedef struct moe_state {
  int ep;
  sk_moe_dims dims;
  sk_moe_scratch s;
  int e_global, routing;
  float limit, alpha, beta;
  char names[MAX_SLOTS][96]; /* the kernel of each slot (the launch sequences name them) */
  unsigned smem[MAX_SLOTS];
  int slots, topk_slot;
  moe_launch seq[2][8];      /* per regime (SK_MOE_REGIME_*): micro for any m <= 8, grouped for
                                max_tokens (bind sets the combine's grid for M) */
  int nseq[2];
} moe_state;

typedef struct moe_bound {
  sk_moe_params p;
  int n;                       /* launches */
  moe_launch launch[8];
  unsigned topk_grid;          /* route_topk's CTAs (routing) */
} moe_bound;


/* Between fields (the spine checked each field against caps_fields). */
static sk_status check(void *caps, int ep) {
  sk_moe_caps *c = caps;
  const char *op = ep ? "moe.ep_moe" : "moe.fused_moe";
  if (c->recipe == SK_MOE_RECIPE_NVFP4 && c->weights != SK_MOE_WEIGHTS_NVFP4)
    return sk_set_error(SK_ERR_UNSUPPORTED, "%s: the NVFP4 (W4A4) recipe takes NVFP4 weights", op);
  if (c->num_global_experts == 0) c->num_global_experts = c->num_experts;
  if (c->num_global_experts < c->num_experts)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: num_global_experts = %lld must be in [num_experts, %d]", op,
                        (long long)c->num_global_experts, SK_MOE_MAX_EXPERTS);
  if (!ep && c->num_global_experts != c->num_experts)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: num_global_experts must equal num_experts (moe.ep_moe maps them)", op);
  const int nmul = c->weights == SK_MOE_WEIGHTS_MXFP4 ? 32 : 16;
  if (c->hidden % 32)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: hidden = %lld must be a positive multiple of 32", op, (long long)c->hidden);
  if (c->intermediate % nmul)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: intermediate = %lld must be a positive multiple of %d", op,
                        (long long)c->intermediate, nmul);
  if (c->routing != SK_MOE_ROUTES_GIVEN && c->ids_int64)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: routing in the op writes int32 ids; set ids_int64 = 0", op);
  if (!(c->limit >= 0) || !isfinite(c->alpha) || !isfinite(c->beta))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: limit must be >= 0 (0: the default), alpha and beta finite", op);
  return SK_OK;
}
static sk_status fused_check(void *caps) { return check(caps, 0); }
static sk_status ep_check(void *caps) { return check(caps, 1); }

/* The slot of a kernel name (added when new). */
static int slot_of(moe_state *st, const char *name, unsigned smem) {
  for (int i = 0; i < st->slots; i++)
    if (!strcmp(st->names[i], name)) return i;
  if (st->slots == MAX_SLOTS) return -1;
  sk_strlcpy(st->names[st->slots], name, sizeof st->names[0]);
  st->smem[st->slots] = smem;
  return st->slots++;
}

static sk_status add_sequence(sk_plan *p, moe_state *st, long long m, int regime) {
  sk_moe_launch seq[8];
  const int n = sk_moe_launch_sequence(&st->dims, &st->s, m, regime, seq);
  if (n < 0) return sk_set_error(SK_ERR_INTERNAL, "%s: no launch sequence for m = %lld", p->def->info.name, m);
  for (int i = 0; i < n; i++) {
    const int slot = slot_of(st, seq[i].name, seq[i].smem);
    if (slot < 0) return sk_set_error(SK_ERR_INTERNAL, "%s: more than %d kernels", p->def->info.name, MAX_SLOTS);
    if (seq[i].smem > p->props.smem_per_block)
      return sk_set_error(SK_ERR_UNSUPPORTED, "%s: %s needs %u bytes of shared memory, more than %s allows",
                          p->def->info.name, seq[i].name, seq[i].smem, p->arch);
    SK_TRY(sk_plan_set_kernel(p, (size_t)slot, seq[i].source, seq[i].name, seq[i].name));
    st->seq[regime][i] = (moe_launch){slot, {seq[i].grid[0], seq[i].grid[1], seq[i].grid[2]}, seq[i].block, seq[i].smem};
  }
  st->nseq[regime] = n;
  return SK_OK;
}

static sk_status select_common(sk_plan *p, int ep) {
  const sk_moe_caps *c = SK_PLAN_CAPS(p, sk_moe_caps);
  moe_state *st = SK_PLAN_STATE(p, moe_state);
  memset(st, 0, sizeof *st);
  st->ep = ep;
  st->e_global = (int)c->num_global_experts;
  st->routing = c->routing;
  st->limit = c->limit > 0 ? c->limit : c->activation == SK_MOE_ACT_SWIGLU_OAI ? 7.0f : INFINITY;
  st->alpha = c->alpha, st->beta = c->beta;
  st->dims = (sk_moe_dims){c->max_tokens, c->topk, (int)c->num_experts, (int)c->hidden, (int)c->intermediate,
                           (int)c->activation, (int)c->recipe, (int)c->weights, p->props.sm_count,
                           sk_arch_is_sm120(p->arch), c->deterministic ? SK_MOE_COMBINE_DET : SK_MOE_COMBINE_ATOMIC, 0};
  if (sk_moe_scratch_layout(&st->dims, &st->s))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: no scratch layout for these caps", p->def->info.name);
  SK_TRY(add_sequence(p, st, 1, SK_MOE_REGIME_MICRO));
  if (c->max_tokens > SK_MOE_MICRO_MAX_TOKENS) SK_TRY(add_sequence(p, st, c->max_tokens, SK_MOE_REGIME_GROUPED));
  st->topk_slot = -1;
  if (c->routing != SK_MOE_ROUTES_GIVEN) {
    st->topk_slot = slot_of(st, "sk::moe::route_topk<0>", 0);
    if (st->topk_slot < 0) return sk_set_error(SK_ERR_INTERNAL, "%s: too many kernels", p->def->info.name);
    SK_TRY(sk_plan_set_kernel(p, (size_t)st->topk_slot, "moe/route.cuh", "sk::moe::route_topk<0>", "route_topk fp32 logits"));
  }
  /* The micro regime's counters must start at zero: the whole buffer is zeroed once. */
  if (sk_scratch_add_counters(&p->scratch, (size_t)st->s.total) < 0) return SK_ERR_INTERNAL;
  const long long np = sk_moe_padded(c->intermediate), kp = sk_moe_padded(c->hidden);
  SK_TRY(sk_plan_set_symbol(p, "E", c->num_experts));
  SK_TRY(sk_plan_set_symbol(p, "EG", c->num_global_experts));
  SK_TRY(sk_plan_set_symbol(p, "K", c->hidden));
  SK_TRY(sk_plan_set_symbol(p, "TOPK", c->topk));
  SK_TRY(sk_plan_set_symbol(p, "MAX_M", c->max_tokens));
  SK_TRY(sk_plan_set_symbol(p, "R1P", sk_moe_w1_rows((int)c->activation, np)));
  SK_TRY(sk_plan_set_symbol(p, "KP2", kp / 2));
  SK_TRY(sk_plan_set_symbol(p, "NP2", np / 2));
  SK_TRY(sk_plan_set_symbol(p, "W1SB", sk_moe_w1_scale_bytes((int)c->activation, (int)c->weights, np, kp)));
  SK_TRY(sk_plan_set_symbol(p, "W2SB", sk_moe_w2_scale_bytes((int)c->weights, c->hidden, np)));
  sk_plan_tensor_dtypes(p, 0, T_IDS, c->ids_int64 ? SK_DT_I64 : SK_DT_I32);
  if (c->routing == SK_MOE_ROUTES_GIVEN) sk_plan_tensor_presence(p, 0, T_LOGITS, SK_TENSOR_UNUSED);
  if (c->weights != SK_MOE_WEIGHTS_NVFP4) {
    sk_plan_tensor_presence(p, 0, T_W1GS, SK_TENSOR_UNUSED);
    sk_plan_tensor_presence(p, 0, T_W2GS, SK_TENSOR_UNUSED);
  }
  if (c->recipe != SK_MOE_RECIPE_NVFP4) {
    sk_plan_tensor_presence(p, 0, T_A1GS, SK_TENSOR_UNUSED);
    sk_plan_tensor_presence(p, 0, T_A2GS, SK_TENSOR_UNUSED);
  }
  if (!ep) sk_plan_tensor_presence(p, 0, T_MAP, SK_TENSOR_UNUSED);
  return SK_OK;
}
static sk_status fused_select(sk_plan *p) { return select_common(p, 0); }
static sk_status ep_select(sk_plan *p) { return select_common(p, 1); }

static sk_status finish(sk_plan *p) {
  const moe_state *st = SK_PLAN_STATE(p, moe_state);
  for (int i = 0; i < st->slots; i++) SK_TRY(sk_op_allow_dynamic_smem(sk_plan_k(p, (size_t)i), st->smem[i]));
  return SK_OK;
}

static sk_status bind(sk_binding *b) {
  moe_state *st = SK_PLAN_STATE(b->plan, moe_state);
  const sk_moe_caps *c = SK_PLAN_CAPS(b->plan, sk_moe_caps);
  moe_bound *g = SK_BINDING_STATE(b, moe_bound);
  const long long m = sk_binding_get_symbol(b, "M");
  const int regime = sk_moe_regime(m);
  g->n = st->nseq[regime];
  memcpy(g->launch, st->seq[regime], sizeof g->launch);
  if (regime == SK_MOE_REGIME_GROUPED) g->launch[g->n - 1].grid.x = (unsigned)sk_moe_combine_ctas(m, (int)c->hidden);
  g->topk_grid = (unsigned)sk_moe_cdiv(m, SK_MOE_TOPK_WARPS);
  sk_moe_params *p = &g->p;
  memset(p, 0, sizeof *p);
  p->x = b->data[T_X];
  p->topk_ids = b->data[T_IDS];
  p->topk_weights = b->data[T_WEIGHTS];
  p->expert_map = b->data[T_MAP];
  p->w1_codes = b->data[T_W1C];
  p->w1_scales = b->data[T_W1S];
  p->w2_codes = b->data[T_W2C];
  p->w2_scales = b->data[T_W2S];
  p->w1_gs = b->data[T_W1GS];
  p->w2_gs = b->data[T_W2GS];
  p->a1_gs = b->data[T_A1GS];
  p->a2_gs = b->data[T_A2GS];
  p->logits = b->data[T_LOGITS];
  p->out = b->data[T_OUT];
  p->scratch = b->scratch[0];
  p->s = st->s;
  p->m = m;
  p->topk = c->topk;
  p->ids_int64 = c->ids_int64;
  p->e = (int)c->num_experts;
  p->e_global = st->e_global;
  p->k = (int)c->hidden;
  p->n = (int)c->intermediate;
  p->apply_on_input = c->apply_router_weight_on_input;
  p->topk_mode = c->routing == SK_MOE_ROUTES_GIVEN ? 0 : (int)c->routing - 1;
  p->limit = st->limit, p->alpha = st->alpha, p->beta = st->beta;
  p->combine = st->dims.combine;
  return SK_OK;
}

/* Every moe kernel waits on the device for the previous kernel before touching memory, so each
 * launch may overlap the previous kernel's tail. */
static sk_status run(const sk_binding *b, void *stream) {
  const moe_state *st = SK_PLAN_STATE(b->plan, moe_state);
  const moe_bound *g = SK_BINDING_STATE(b, moe_bound);
  void *args[] = {(void *)&g->p};
  if (st->topk_slot >= 0)
    SK_TRY(sk_kernel_launch_ex(sk_plan_k(b->plan, (size_t)st->topk_slot), (sk_dim3){g->topk_grid, 1, 1},
                               (sk_dim3){32 * SK_MOE_TOPK_WARPS, 1, 1}, 0, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS));
  for (int i = 0; i < g->n; i++) {
    const moe_launch *l = &g->launch[i];
    SK_TRY(sk_kernel_launch_ex(sk_plan_k(b->plan, (size_t)l->slot), l->grid, (sk_dim3){l->block, 1, 1}, l->smem, stream, args,
                               SK_LAUNCH_OVERLAP_PREVIOUS));
  }
  return SK_OK;
}

SK_API sk_status sk_moe_error_flags(const sk_binding *b, void *stream, uint32_t *flags) {
  const int moe = b && b->bound && !strncmp(b->plan->def->info.name, "moe.", 4);
  const size_t at = moe ? (size_t)SK_PLAN_STATE(b->plan, moe_state)->s.flags : 0;
  return sk_binding_scratch_word(b, "moe.", at, stream, "sk_moe_error_flags", flags);
}

/* ---- table, caps JSON, definitions ------------------------------------------------------------ */

#define F32_E(n, doc) {n, "[E]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_OPTIONAL, 4, 0, 0, doc}
static const sk_tensor_rule tensors[] = {
    {"x", "[M, K]", SK_DT_BF16, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "activations"},
    {"topk_ids", "[M, TOPK]", SK_DT_I32 | SK_DT_I64, SK_TENSOR_INOUT, SK_TENSOR_REQUIRED, 8, 0, 0,
     "expert ids (written with routing)"},
    {"topk_weights", "[M, TOPK]", SK_DT_FP32, SK_TENSOR_INOUT, SK_TENSOR_REQUIRED, 4, 0, 0, "router weights (written with routing)"},
    {"router_logits", "[M, EG]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "routing in the op only"},
    {"w1_codes", "[E, R1P, KP2]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "prepared W1 (sk_moe_prepare_w1)"},
    {"w1_scales", "[E, W1SB]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "prepared W1 block scales"},
    {"w2_codes", "[E, K, NP2]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "prepared W2"},
    {"w2_scales", "[E, W2SB]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "prepared W2 block scales"},
    F32_E("w1_gs", "NVFP4 weight global scales of W1 (absent: 1)"),
    F32_E("w2_gs", "NVFP4 weight global scales of W2 (absent: 1)"),
    {"a1_gs", "[E]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "W4A4 activation global scales of FC1"},
    {"a2_gs", "[E]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "W4A4 activation global scales of FC2"},
    {"expert_map", "[EG]", SK_DT_I32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "ep_moe: global id -> local id or -1"},
    {"out", "[M, K]", SK_DT_BF16, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 16, 0, 0, "output (ep_moe: the rank's partial)"},
};
static const sk_symbol_rule symbols[] = {{"M", "1", "MAX_M"}};
static const sk_op_entry entries[] = {{"run", tensors, T_COUNT, symbols, 1}};

static const char *const recipe_names[] = {"w4a16", "nvfp4"};
static const char *const weight_names[] = {"nvfp4", "mxfp4"};
static const char *const act_names[] = {"silu", "relu2", "swiglu_oai"};
static const char *const routing_names[] = {"given", "topk", "topk_renorm", "softmax_topk"};


static const sk_caps_field caps_fields[] = {
    SK_CAPS_ENUM(sk_moe_caps, recipe, recipe_names, NULL),
    SK_CAPS_ENUM(sk_moe_caps, weights, weight_names, NULL),
    SK_CAPS_ENUM(sk_moe_caps, activation, act_names, NULL),
    SK_CAPS_INT64(sk_moe_caps, num_experts, 1, SK_MOE_MAX_EXPERTS, true),
    SK_CAPS_INT64(sk_moe_caps, num_global_experts, 0, SK_MOE_MAX_EXPERTS, false),
    SK_CAPS_INT64(sk_moe_caps, hidden, 1, 1 << 20, true),
    SK_CAPS_INT64(sk_moe_caps, intermediate, 1, 1 << 20, true),
    SK_CAPS_INT(sk_moe_caps, topk, 1, SK_MOE_MAX_TOPK, true),
    SK_CAPS_INT64(sk_moe_caps, max_tokens, 1, 1 << 24, true),
    SK_CAPS_FLAG(sk_moe_caps, ids_int64),
    SK_CAPS_ENUM(sk_moe_caps, routing, routing_names, NULL),
    SK_CAPS_FLAG(sk_moe_caps, apply_router_weight_on_input),
    SK_CAPS_FLAG(sk_moe_caps, deterministic),
    SK_CAPS_FLOAT(sk_moe_caps, limit),
    SK_CAPS_FLOAT(sk_moe_caps, alpha),
    SK_CAPS_FLOAT(sk_moe_caps, beta),
};

static const sk_moe_caps caps_defaults = SK_MOE_CAPS_INIT;

#define MOE_DEF(name, summary, check_, select_)                                                                      \
  {                                                                                                                  \
    SK_OP_INFO(name, summary, 89), SK_OP_CAPS(sk_moe_caps, caps_defaults),  \
    SK_OP_STATE(moe_state, moe_bound), .num_kernels = MAX_SLOTS, .entries = entries, .num_entries = 1,                \
    .check_caps = check_, SK_OP_FIELDS(caps_fields),                                \
    .select = select_, .finish = finish, .bind = bind, .run = run,                                                   \
  }

const sk_op_def sk_op_moe_fused_moe = MOE_DEF("moe.fused_moe", "routed-expert FFN over FP4 experts (W4A16, NVFP4 W4A4): micro decode and grouped regimes",
                                              fused_check, fused_select);
const sk_op_def sk_op_moe_ep_moe = MOE_DEF("moe.ep_moe", "expert-parallel routed-expert FFN: this rank's experts (expert_map), a partial output to sum across ranks",
                                           ep_check, ep_select);
