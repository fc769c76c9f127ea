/* ops/gemm/linear.c - the linear-layer ops over the gemm kernels: gemm.mxfp8_linear (BF16 x
 * quantized to MXFP8 in the op), gemm.tensor_fp8_linear (E4M3 x, per-tensor scales in alpha) and
 * gemm.block_fp8_linear (BF16 x re-quantized to 1x128 E4M3 blocks, DeepSeek-V3). Each resolves
 * one GEMM configuration per range of M (select.c) and, where x is quantized in the op, the
 * activation quantizer. */
#include <stddef.h>
#include <string.h>

#include "gemm_host.h"
#include "quantization/quant_common.h" /* quant_rows_grid: the mxfp8 rows kernel's grid */

enum { L_MXFP8, L_TENSOR_FP8, L_BLOCK_FP8 };
static const char *const op_names[3] = {"gemm.mxfp8_linear", "gemm.tensor_fp8_linear", "gemm.block_fp8_linear"};
static const int mm_recipes[3] = {SK_GEMM_MXFP8, SK_GEMM_TENSOR_FP8, SK_GEMM_BLOCK_FP8};
#define QUANT_SLOT GEMM_MAX_REGIMES

typedef struct linear_state {
  int kind;
  gemm_tuning tuning;
  gemm_regimes regimes;
  int quantizes;              /* some regime runs the activation quantizer */
  int r_codes, r_scales, r_ws; /* scratch regions (-1: none) */
} linear_state;

typedef struct linear_bound {
  int regime;
  int quantize;               /* run the activation quantizer first */
  gemm_args args;
  decode_launch decode;
  unsigned grid_y;
  sk_dim3 quant_grid;
  const void *x;
} linear_bound;


/* Between fields (the spine checked each field against caps_fields). */
static sk_status check_caps(int kind, void *caps) {
  const sk_gemm_linear_caps *c = caps;
  const char *op = op_names[kind];
  if (!gemm_weight_shape_fits(c->n, c->k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: N = %lld, K = %lld: need " GEMM_WEIGHT_SHAPE_RULE, op,
                        (long long)c->n, (long long)c->k);
  if (c->max_m > ((int64_t)1 << 34) / c->k || c->max_m > ((int64_t)1 << 40) / c->n)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: max_m = %lld: need max_m x K <= 2^34 and max_m x N <= 2^40", op,
                        (long long)c->max_m);
  return SK_OK;
}

/* Tensor order of every linear entry: x, w_codes, w_scales, alpha, out (tensor_fp8 has no
 * w_scales, block_fp8 no alpha; the tables below list what each takes). */
static sk_status select_common(sk_plan *p, int kind) {
  const sk_gemm_linear_caps *c = SK_PLAN_CAPS(p, sk_gemm_linear_caps);
  linear_state *st = SK_PLAN_STATE(p, linear_state);
  st->kind = kind;
  st->r_codes = st->r_scales = st->r_ws = -1;
  SK_TRY(gemm_tuning_read(&p->props, &st->tuning));
  SK_TRY(gemm_plan_regimes(p, &st->tuning, mm_recipes[kind], c->out, c->n, c->k, c->max_m, kind == L_MXFP8, 0, &st->regimes));
  for (int i = 0; i < st->regimes.count; i++) st->quantizes |= st->regimes.cfg[i].path != PATH_FUSED;
  if (kind == L_TENSOR_FP8) st->quantizes = 0;
  if (st->quantizes) {
    if (kind == L_MXFP8)
      SK_TRY(sk_plan_set_kernel(p, QUANT_SLOT, "quantization/mxfp8.cuh", "sk::quant::mxfp8_rows<__nv_bfloat16, 1, 1>",
                                "in=bf16 scales=swizzled cvt=hw"));
    else
      SK_TRY(sk_plan_set_kernel(p, QUANT_SLOT, "gemm/act_quant.cuh", "sk::gemm::act_quant_block_fp8<1>", "cvt=hw"));
    const int64_t m = c->max_m, k = c->k;
    st->r_codes = sk_scratch_add(&p->scratch, (size_t)(m * k));
    st->r_scales = sk_scratch_add(&p->scratch, kind == L_MXFP8 ? sk_swizzled_scale_bytes(m, k / 32) : (size_t)(m * (k / 128)) * 4);
    if (st->r_codes < 0 || st->r_scales < 0) return SK_ERR_INTERNAL;
  }
  const int64_t decode_m = c->max_m < GEMM_DECODE_MAX_M ? c->max_m : GEMM_DECODE_MAX_M;
  const size_t ws = gemm_workspace_need(&st->tuning, mm_recipes[kind], decode_m, c->n, c->k);
  if (ws && (st->r_ws = sk_scratch_add_counters(&p->scratch, ws)) < 0) return SK_ERR_INTERNAL;
  SK_TRY(sk_plan_set_symbol(p, "K", c->k));
  SK_TRY(sk_plan_set_symbol(p, "N", c->n));
  SK_TRY(sk_plan_set_symbol(p, "MAX_M", c->max_m));
  const size_t out_index = kind == L_MXFP8 ? 4 : 3;
  sk_plan_tensor_dtypes(p, 0, out_index, sk_dt_of(c->out));
  return SK_OK;
}

static sk_status finish(sk_plan *p) {
  const linear_state *st = SK_PLAN_STATE(p, linear_state);
  for (int i = 0; i < st->regimes.count; i++) SK_TRY(sk_op_allow_dynamic_smem(sk_plan_k(p, (size_t)i), st->regimes.cfg[i].smem));
  return SK_OK;
}

static sk_status bind_common(sk_binding *b, const void *w_codes, const void *w_scales, const void *alpha, void *out) {
  const sk_gemm_linear_caps *c = SK_PLAN_CAPS(b->plan, sk_gemm_linear_caps);
  const linear_state *st = SK_PLAN_STATE(b->plan, linear_state);
  linear_bound *g = SK_BINDING_STATE(b, linear_bound);
  const int64_t m = sk_binding_get_symbol(b, "M");
  g->regime = gemm_regime_of(&st->regimes, m);
  const gemm_cfg *cfg = &st->regimes.cfg[g->regime];
  g->x = b->data[0];
  g->quantize = st->quantizes && cfg->path != PATH_FUSED;
  const void *ac = g->quantize ? b->scratch[st->r_codes] : g->x, *as = g->quantize ? b->scratch[st->r_scales] : NULL;
  g->args = (gemm_args){ac, as, w_codes, w_scales, alpha, out, m, c->n, c->k, c->n};
  if (g->quantize)
    g->quant_grid = st->kind == L_MXFP8 ? quant_rows_grid(m, c->k, 32, 0, st->tuning.sms)
                                        : (sk_dim3){(unsigned)sk_cdiv(m * c->k, 2048), 1, 1};
  if (gemm_path_is_decode(cfg->path)) {
    void *ws = st->r_ws >= 0 ? b->scratch[st->r_ws] : NULL;
    g->decode = gemm_decode_launch(&st->tuning, cfg, m, c->n, c->k, ws, ws ? b->plan->scratch.size[st->r_ws] : 0);
  } else {
    g->grid_y = (unsigned)sk_cdiv(m, cfg->bm);
  }
  SK_TRY(sk_binding_set_symbol(b, "QUANTIZE", g->quantize));
  return gemm_bind_symbols(b, cfg, g->regime, g->decode.ctas, g->grid_y);
}

static sk_status run_common(const sk_binding *b, void *stream) {
  const sk_plan *p = b->plan;
  const sk_gemm_linear_caps *c = SK_PLAN_CAPS(p, sk_gemm_linear_caps);
  const linear_state *st = SK_PLAN_STATE(p, linear_state);
  const linear_bound *g = SK_BINDING_STATE(b, linear_bound);
  if (g->quantize) {
    const void *x = g->x;
    void *codes = (void *)g->args.ac, *scales = (void *)g->args.as, *rows = NULL;
    int m = (int)g->args.m, k = (int)c->k, ld = k;
    if (st->kind == L_MXFP8) {
      void *args[] = {(void *)&x, &ld, &m, &k, &codes, &scales, &rows};
      SK_TRY(sk_kernel_launch_ex(sk_plan_k(p, QUANT_SLOT), g->quant_grid, (sk_dim3){256, 1, 1}, 0, stream, args,
                                 SK_LAUNCH_OVERLAP_PREVIOUS));
    } else {
      void *args[] = {(void *)&x, &m, &k, &codes, &scales};
      SK_TRY(sk_kernel_launch_ex(sk_plan_k(p, QUANT_SLOT), g->quant_grid, (sk_dim3){256, 1, 1}, 0, stream, args,
                                 SK_LAUNCH_OVERLAP_PREVIOUS));
    }
  }
  const gemm_cfg *cfg = &st->regimes.cfg[g->regime];
  sk_kernel *k = sk_plan_k(p, (size_t)g->regime);
  if (gemm_path_is_decode(cfg->path)) return gemm_launch_decode(k, cfg, &g->args, &g->decode, stream);
  return gemm_launch_tiled(k, cfg, &g->args, g->grid_y, stream);
}

/* ---- the three ops ------------------------------------------------------------------------------ */

#define OUT_RULE {"out", "[M, N]", SK_DT_BF16 | SK_DT_FP16 | SK_DT_FP32, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 4, 0, 0, "caps.out"}
#define ALPHA_RULE {"alpha", "[1]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_OPTIONAL, 4, 0, 0, "device scalar (absent: 1.0)"}
#define W_CODES_RULE {"w_codes", "[N, K]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "E4M3 weight codes"}
static const sk_symbol_rule symbols[] = {{"M", "1", "MAX_M"}};

static const sk_tensor_rule mxfp8_tensors[] = {
    {"x", "[M, K]", SK_DT_BF16, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "activations"},
    W_CODES_RULE,
    {"w_scales", "[pad(N, 128) * pad(K/32, 4)]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "UE8M0, swizzled"},
    ALPHA_RULE,
    OUT_RULE,
};
static const sk_tensor_rule tensor_fp8_tensors[] = {
    {"x_codes", "[M, K]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "E4M3 activations (static input scale)"},
    W_CODES_RULE,
    ALPHA_RULE,
    OUT_RULE,
};
static const sk_tensor_rule block_fp8_tensors[] = {
    {"x", "[M, K]", SK_DT_BF16, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "activations"},
    W_CODES_RULE,
    {"w_scales", "[cdiv(N, 128), K/128]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "128x128 block scales"},
    OUT_RULE,
};
static const sk_op_entry mxfp8_entries[] = {{"linear", mxfp8_tensors, 5, symbols, 1}};
static const sk_op_entry tensor_fp8_entries[] = {{"linear", tensor_fp8_tensors, 4, symbols, 1}};
static const sk_op_entry block_fp8_entries[] = {{"linear", block_fp8_tensors, 4, symbols, 1}};

static sk_status mxfp8_check(void *caps) { return check_caps(L_MXFP8, caps); }
static sk_status tensor_fp8_check(void *caps) { return check_caps(L_TENSOR_FP8, caps); }
static sk_status block_fp8_check(void *caps) { return check_caps(L_BLOCK_FP8, caps); }
static sk_status mxfp8_select(sk_plan *p) { return select_common(p, L_MXFP8); }
static sk_status tensor_fp8_select(sk_plan *p) { return select_common(p, L_TENSOR_FP8); }
static sk_status block_fp8_select(sk_plan *p) { return select_common(p, L_BLOCK_FP8); }
static sk_status mxfp8_bind(sk_binding *b) { return bind_common(b, b->data[1], b->data[2], b->data[3], b->data[4]); }
static sk_status tensor_fp8_bind(sk_binding *b) { return bind_common(b, b->data[1], NULL, b->data[2], b->data[3]); }
static sk_status block_fp8_bind(sk_binding *b) { return bind_common(b, b->data[1], b->data[2], NULL, b->data[3]); }


static const sk_caps_field caps_fields[] = {
    SK_CAPS_INT64(sk_gemm_linear_caps, n, 1, INT32_MAX, true),
    SK_CAPS_INT64(sk_gemm_linear_caps, k, 128, (int64_t)1 << 30, true),
    SK_CAPS_INT64(sk_gemm_linear_caps, max_m, 1, INT32_MAX, true),
    SK_CAPS_ENUM(sk_gemm_linear_caps, out, gemm_out_names, NULL),
};

static const sk_gemm_linear_caps caps_defaults = SK_GEMM_LINEAR_CAPS_INIT;

#define LINEAR_DEF(kind_, summary, entries_, check_, select_, bind_)                                                 \
  {                                                                                                                 \
    SK_OP_INFO(op_names_literal_##kind_, summary, 89),                     \
    SK_OP_CAPS(sk_gemm_linear_caps, caps_defaults), SK_OP_STATE(linear_state, linear_bound),                        \
    .num_kernels = GEMM_MAX_REGIMES + 1, .entries = entries_, .num_entries = 1,    \
    .check_caps = check_, SK_OP_FIELDS(caps_fields), .select = select_,         \
    .finish = finish, .bind = bind_, .run = run_common,                                                             \
  }
#define op_names_literal_L_MXFP8 "gemm.mxfp8_linear"
#define op_names_literal_L_TENSOR_FP8 "gemm.tensor_fp8_linear"
#define op_names_literal_L_BLOCK_FP8 "gemm.block_fp8_linear"

const sk_op_def sk_op_gemm_mxfp8_linear = LINEAR_DEF(L_MXFP8, "BF16 activations quantized to MXFP8 in the op x packed MXFP8 weight",
                                                     mxfp8_entries, mxfp8_check, mxfp8_select, mxfp8_bind);
const sk_op_def sk_op_gemm_tensor_fp8_linear = LINEAR_DEF(L_TENSOR_FP8, "E4M3 activations x E4M3 weight, per-tensor scales in alpha",
                                                          tensor_fp8_entries, tensor_fp8_check, tensor_fp8_select,
                                                          tensor_fp8_bind);
const sk_op_def sk_op_gemm_block_fp8_linear = LINEAR_DEF(L_BLOCK_FP8,
                                                         "DeepSeek-V3 FP8 linear: BF16 x re-quantized to 1x128 E4M3 blocks x "
                                                         "128x128-scaled E4M3 W",
                                                         block_fp8_entries, block_fp8_check, block_fp8_select, block_fp8_bind);
