/* ops/gemm/mm.c - gemm.blockscaled: caps, selection (one configuration per range of M), tensor
 * table, bind, run; and the one-shot convenience sk_gemm_mm over a cache of its plans. The
 * configuration itself: select.c. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "gemm_host.h"
#include "sparkinfer/quantization.h"

#define OP "gemm.blockscaled"

extern const sk_op_def sk_op_gemm_blockscaled;
SK_API int sk_gemm_is_supported(sk_gemm_recipe recipe, const char *arch) {
  return gemm_recipe_valid(recipe) && arch && sk_op_def_supports(&sk_op_gemm_blockscaled, arch);
}


/* Tensor order of the "mm" entry. */
enum { T_A_CODES, T_A_SCALES, T_B_CODES, T_B_SCALES, T_ALPHA, T_C };

static const sk_tensor_rule tensors[] = {
    {"a_codes", "[M, KC]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "A codes: E2M1 pairs (K/2 bytes) or E4M3 (K)"},
    {"a_scales", "[pad(M, 128) * pad(K/VEC, 4)]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0,
     "A block scales: swizzled u8, or fp32 [M, K/128] (block_fp8); absent for tensor_fp8"},
    {"b_codes", "[N, KC]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "B (weight) codes"},
    {"b_scales", "[pad(N, 128) * pad(K/VEC, 4)]", SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0,
     "B block scales: swizzled u8, or fp32 [ceil(N/128), K/128] (block_fp8); absent for tensor_fp8"},
    {"alpha", "[1]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_OPTIONAL, 4, 0, 0, "device scalar (absent: 1.0)"},
    {"c", "[M, N]", SK_DT_BF16 | SK_DT_FP16 | SK_DT_FP32, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 4, 0, 0, "C (caps.out)"},
};
static const sk_symbol_rule symbols[] = {{"M", "1", "MAX_M"}};
static const sk_op_entry entries[] = {{"mm", tensors, 6, symbols, 1}};

typedef struct mm_state {
  gemm_tuning tuning;
  gemm_regimes regimes;
} mm_state;

typedef struct mm_bound {
  int regime;
  gemm_args args;
  decode_launch decode;
  unsigned grid_y;
} mm_bound;

/* Between fields (the spine checked each field against caps_fields). */
static sk_status check_caps(void *caps) {
  const sk_gemm_caps *c = caps;
  if (!gemm_weight_shape_fits(c->n, c->k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": B [N, K] = [%lld, %lld]: need " GEMM_WEIGHT_SHAPE_RULE,
                        (long long)c->n, (long long)c->k);
  if (c->max_m > ((int64_t)1 << 40) / c->n)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": max_m = %lld: need max_m x N <= 2^40", (long long)c->max_m);
  return SK_OK;
}

/* The symbols and scale-tensor rules of a recipe (shared by the linear ops' tables through
 * gemm_host.h users that bind a/b the same way). */
static sk_status recipe_symbols(sk_plan *p, int recipe, int64_t n, int64_t k, int64_t max_m) {
  SK_TRY(sk_plan_set_symbol(p, "K", k));
  SK_TRY(sk_plan_set_symbol(p, "KC", gemm_recipe_fp4(recipe) ? k / 2 : k));
  SK_TRY(sk_plan_set_symbol(p, "N", n));
  SK_TRY(sk_plan_set_symbol(p, "MAX_M", max_m));
  return sk_plan_set_symbol(p, "VEC", gemm_scale_vec(recipe));
}

static sk_status select_kernels(sk_plan *p) {
  const sk_gemm_caps *c = SK_PLAN_CAPS(p, sk_gemm_caps);
  mm_state *st = SK_PLAN_STATE(p, mm_state);
  SK_TRY(gemm_tuning_read(&p->props, &st->tuning));
  SK_TRY(gemm_plan_regimes(p, &st->tuning, c->recipe, c->out, c->n, c->k, c->max_m, false, 0, &st->regimes));
  SK_TRY(recipe_symbols(p, c->recipe, c->n, c->k, c->max_m));
  if (c->recipe == SK_GEMM_TENSOR_FP8) {
    sk_plan_tensor_presence(p, 0, T_A_SCALES, SK_TENSOR_UNUSED);
    sk_plan_tensor_presence(p, 0, T_B_SCALES, SK_TENSOR_UNUSED);
  } else if (c->recipe == SK_GEMM_BLOCK_FP8) {
    sk_plan_tensor_shape(p, 0, T_A_SCALES, "[M, K/128]");
    sk_plan_tensor_shape(p, 0, T_B_SCALES, "[cdiv(N, 128), K/128]");
    sk_plan_tensor_dtypes(p, 0, T_A_SCALES, SK_DT_FP32);
    sk_plan_tensor_dtypes(p, 0, T_B_SCALES, SK_DT_FP32);
  }
  sk_plan_tensor_dtypes(p, 0, T_C, sk_dt_of(c->out));
  /* The decode workspace (tile counters that every run leaves at zero, then partials); optional:
   * without it the decode grid takes whole tiles. */
  const int64_t decode_m = c->max_m < GEMM_DECODE_MAX_M ? c->max_m : GEMM_DECODE_MAX_M;
  const size_t ws = gemm_workspace_need(&st->tuning, c->recipe, decode_m, c->n, c->k);
  if (ws && sk_scratch_add_counters(&p->scratch, ws) < 0) return SK_ERR_INTERNAL;
  p->scratch_optional = 1;
  return SK_OK;
}

static sk_status finish(sk_plan *p) {
  const mm_state *st = SK_PLAN_STATE(p, mm_state);
  for (int i = 0; i < st->regimes.count; i++) SK_TRY(sk_op_allow_dynamic_smem(sk_plan_k(p, (size_t)i), st->regimes.cfg[i].smem));
  return SK_OK;
}

/* The launch for M rows: the regime's configuration, the decode grid and workspace views (the
 * caller's scratch from its start, 256-byte aligned) or the tiled grid's rows. */
static void bind_launch(const mm_state *st, int64_t m, void *ws, size_t ws_bytes, mm_bound *g) {
  g->regime = gemm_regime_of(&st->regimes, m);
  const gemm_cfg *cfg = &st->regimes.cfg[g->regime];
  if (gemm_path_is_decode(cfg->path)) g->decode = gemm_decode_launch(&st->tuning, cfg, m, g->args.n, g->args.k, ws, ws_bytes);
  else g->grid_y = (unsigned)sk_cdiv(m, cfg->bm);
}

static sk_status bind(sk_binding *b) {
  const sk_gemm_caps *c = SK_PLAN_CAPS(b->plan, sk_gemm_caps);
  const mm_state *st = SK_PLAN_STATE(b->plan, mm_state);
  mm_bound *g = SK_BINDING_STATE(b, mm_bound);
  const int64_t m = sk_binding_get_symbol(b, "M");
  g->args = (gemm_args){b->data[T_A_CODES], b->data[T_A_SCALES], b->data[T_B_CODES], b->data[T_B_SCALES],
                        b->data[T_ALPHA], b->data[T_C], m, c->n, c->k, c->n};
  bind_launch(st, m, b->scratch_base, b->scratch_bytes, g);
  return gemm_bind_symbols(b, &st->regimes.cfg[g->regime], g->regime, g->decode.ctas, g->grid_y);
}

static sk_status run(const sk_binding *b, void *stream) {
  const mm_state *st = SK_PLAN_STATE(b->plan, mm_state);
  const mm_bound *g = SK_BINDING_STATE(b, mm_bound);
  const gemm_cfg *cfg = &st->regimes.cfg[g->regime];
  sk_kernel *k = sk_plan_k(b->plan, (size_t)g->regime);
  if (gemm_path_is_decode(cfg->path)) return gemm_launch_decode(k, cfg, &g->args, &g->decode, stream);
  return gemm_launch_tiled(k, cfg, &g->args, g->grid_y, stream);
}


static const sk_caps_field caps_fields[] = {
    SK_CAPS_ENUM(sk_gemm_caps, recipe, gemm_recipe_names, NULL),
    SK_CAPS_ENUM(sk_gemm_caps, out, gemm_out_names, NULL),
    SK_CAPS_INT64(sk_gemm_caps, n, 1, INT32_MAX, true),
    SK_CAPS_INT64(sk_gemm_caps, k, 128, (int64_t)1 << 30, true),
    SK_CAPS_INT64(sk_gemm_caps, max_m, 1, INT32_MAX, true),
};

static const sk_gemm_caps caps_defaults = SK_GEMM_CAPS_INIT;

const sk_op_def sk_op_gemm_blockscaled = {
    SK_OP_INFO(OP, "C = alpha * A x B^T for NVFP4 / MXFP4 / MXFP8 / block-FP8 / tensor-FP8 operands", 89),
    SK_OP_CAPS(sk_gemm_caps, caps_defaults),
    SK_OP_STATE(mm_state, mm_bound),
    .num_kernels = GEMM_MAX_REGIMES,
    .entries = entries,
    .num_entries = 1,
    SK_OP_FIELDS(caps_fields),
    SK_OP_CALLBACKS(check_caps, select_kernels, finish, bind, run),
};

/* ---- one-shot convenience ------------------------------------------------------------------------
 * Plans cached per (recipe, out, N, K, range of M, device). The ranges: M <= 8, <= 16, <= 128 and
 * the rest (each plan resolves its range's configurations). Readers are lock-free: a slot's plan is
 * stored before its key (release/acquire); the table only grows. A full table creates a plan per
 * call (slow, still correct). */

#define PLAN_SLOTS 1024
typedef struct plan_key {
  uint64_t a, b; /* recipe, out, bucket, device | n << 32 | k ... packed */
} plan_key;
static struct {
  _Atomic uint64_t ka, kb;
  _Atomic(sk_plan *) plan;
} plan_cache[PLAN_SLOTS];
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
static const int64_t bucket_max_m[4] = {8, 16, 128, INT32_MAX};

static int bucket_of(int64_t m) { return m <= 8 ? 0 : m <= 16 ? 1 : m <= 128 ? 2 : 3; }

static plan_key make_key(int recipe, int out, int bucket, int device, int64_t n, int64_t k) {
  return (plan_key){(uint64_t)1 << 63 | (uint64_t)recipe << 56 | (uint64_t)out << 48 | (uint64_t)bucket << 40 |
                        (uint64_t)(device & 0xFF) << 32 | (uint64_t)(n & 0xFFFFFFFF),
                    (uint64_t)k};
}

static size_t key_slot(plan_key key) { return (size_t)(((key.a ^ key.b * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull) >> 54); }

static sk_plan *cache_find(plan_key key) {
  for (size_t i = key_slot(key), n = 0; n < PLAN_SLOTS; i = (i + 1) % PLAN_SLOTS, n++) {
    const uint64_t a = atomic_load_explicit(&plan_cache[i].ka, memory_order_acquire);
    if (!a) return NULL;
    if (a == key.a && atomic_load_explicit(&plan_cache[i].kb, memory_order_relaxed) == key.b)
      return atomic_load_explicit(&plan_cache[i].plan, memory_order_relaxed);
  }
  return NULL;
}

/* Insert; returns the plan now cached under the key (another thread's if it won: p is then
 * destroyed), or NULL when the table is full (p stays the caller's). */
static sk_plan *cache_add(plan_key key, sk_plan *p) {
  sk_plan *winner = NULL;
  pthread_mutex_lock(&plan_lock);
  for (size_t i = key_slot(key), n = 0; n < PLAN_SLOTS; i = (i + 1) % PLAN_SLOTS, n++) {
    const uint64_t a = atomic_load_explicit(&plan_cache[i].ka, memory_order_relaxed);
    if (a == key.a && atomic_load_explicit(&plan_cache[i].kb, memory_order_relaxed) == key.b) {
      winner = atomic_load_explicit(&plan_cache[i].plan, memory_order_relaxed);
      break;
    }
    if (!a) {
      atomic_store_explicit(&plan_cache[i].plan, p, memory_order_relaxed);
      atomic_store_explicit(&plan_cache[i].kb, key.b, memory_order_relaxed);
      atomic_store_explicit(&plan_cache[i].ka, key.a, memory_order_release);
      winner = p;
      break;
    }
  }
  pthread_mutex_unlock(&plan_lock);
  if (winner && winner != p) sk_plan_destroy(p);
  return winner;
}

/* The plan for a problem on the current device (created on first use), or *owned when it could
 * not be cached (the caller destroys it). */
static sk_status plan_for(int recipe, int out, int64_t m, int64_t n, int64_t k, const char *arch, sk_plan **plan,
                          sk_plan **owned) {
  *owned = NULL;
  int device = 0;
  if (!arch) SK_TRY(sk_driver_current_device(&device)); /* the context's, or SPARKINFER_DEVICE's when none is current */
  const int bucket = bucket_of(m);
  const plan_key key = make_key(recipe, out, bucket, arch ? 0xFF : device, n, k);
  sk_plan *p = arch ? NULL : cache_find(key);
  if (p) {
    *plan = p;
    return SK_OK;
  }
  sk_gemm_caps caps = SK_GEMM_CAPS_INIT;
  caps.recipe = (sk_gemm_recipe)recipe;
  caps.out = (sk_dtype)out;
  caps.n = n;
  caps.k = k;
  caps.max_m = bucket_max_m[bucket] < ((int64_t)1 << 40) / n ? bucket_max_m[bucket] : ((int64_t)1 << 40) / n;
  caps.arch = arch;
  SK_TRY(sk_plan_create(OP, &caps, &p));
  if (arch) { /* an explicit arch (prewarm of another arch): not cached */
    *plan = *owned = p;
    return SK_OK;
  }
  sk_plan *cached = cache_add(key, p);
  *plan = cached ? cached : p;
  if (!cached) *owned = p; /* full table: this call's own plan */
  return SK_OK;
}

/* Each thread's bindings of the cached plans it ran last (cached plans live as long as the
 * process): a repeated call with the same layouts rebinds only the pointers (sk_bind's fast path).
 * Freed at thread exit. NULL when none can be had (the call then binds a local binding). */
#define TL_BINDINGS 4
typedef struct tl_bindings {
  const sk_plan *plan[TL_BINDINGS];
  sk_binding *b[TL_BINDINGS];
  unsigned next;
} tl_bindings;
static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static int tl_ok;

static void tl_free(void *v) {
  tl_bindings *t = v;
  for (int i = 0; i < TL_BINDINGS; i++) sk_binding_destroy(t->b[i]);
  free(t);
}

static void tl_init(void) { tl_ok = pthread_key_create(&tl_key, tl_free) == 0; }

static sk_binding *tl_binding(const sk_plan *p) {
  pthread_once(&tl_once, tl_init);
  if (!tl_ok) return NULL;
  tl_bindings *t = pthread_getspecific(tl_key);
  if (!t) {
    t = calloc(1, sizeof *t);
    if (!t || pthread_setspecific(tl_key, t)) {
      free(t);
      return NULL;
    }
  }
  for (int i = 0; i < TL_BINDINGS; i++)
    if (t->plan[i] == p) return t->b[i];
  const unsigned slot = t->next++ % TL_BINDINGS;
  sk_binding_destroy(t->b[slot]);
  t->b[slot] = NULL;
  t->plan[slot] = NULL;
  if (sk_binding_create(p, NULL, &t->b[slot]) != SK_OK) return NULL;
  t->plan[slot] = p;
  return t->b[slot];
}

static sk_status out_type(const DLTensor *c, int *out) {
  if (!c) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": c is NULL");
  if (c->dtype.code == kDLBfloat && c->dtype.bits == 16) *out = 0;
  else if (c->dtype.code == kDLFloat && c->dtype.bits == 16) *out = 1;
  else if (c->dtype.code == kDLFloat && c->dtype.bits == 32) *out = 2;
  else return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": c must be bfloat16, float16 or float32");
  return SK_OK;
}

SK_API sk_status sk_gemm_mm(sk_gemm_recipe recipe, const DLTensor *a_codes, const DLTensor *a_scales,
                            const DLTensor *b_codes, const DLTensor *b_scales, const DLTensor *alpha, const DLTensor *c,
                            void *workspace, size_t workspace_bytes, void *stream) {
  if (!gemm_recipe_valid(recipe)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": unknown recipe %d", (int)recipe);
  if (!a_codes || !b_codes || a_codes->ndim != 2 || b_codes->ndim != 2 || !a_codes->shape || !b_codes->shape)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": a_codes and b_codes must be 2-D uint8 tensors");
  int out = 0;
  SK_TRY(out_type(c, &out));
  const int64_t m = a_codes->shape[0], n = b_codes->shape[0], k = a_codes->shape[1] * (gemm_recipe_fp4(recipe) ? 2 : 1);
  if (m < 1 || m > INT32_MAX) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": M = %lld must be in [1, 2^31)", (long long)m);
  if (!gemm_weight_shape_fits(n, k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": B [N, K] = [%lld, %lld]: need " GEMM_WEIGHT_SHAPE_RULE
                        " (pad weights with sk_gemm_pack_weight)", (long long)n, (long long)k);
  sk_plan *p, *owned;
  SK_TRY(plan_for(recipe, out, m, n, k, NULL, &p, &owned));
  const DLTensor *t[6] = {a_codes, a_scales, b_codes, b_scales, alpha, c};
  sk_binding *tb = owned ? NULL : tl_binding(p);
  if (tb) {
    const sk_status s = sk_bind(tb, t, 6, workspace, workspace_bytes);
    return s == SK_OK ? sk_run(tb, stream) : s;
  }
  void *data[6];
  const DLTensor *seen[6];
  mm_bound state;
  sk_binding b;
  sk_binding_local(&b, p, 0, data, seen, &state);
  sk_status s = sk_bind(&b, t, 6, workspace, workspace_bytes);
  if (s == SK_OK) s = sk_run(&b, stream);
  sk_plan_destroy(owned);
  return s;
}

SK_API sk_status sk_gemm_prewarm(sk_gemm_recipe recipe, sk_dtype out, const int64_t *ms, size_t num_ms, int64_t n,
                                 int64_t k, const char *arch) {
  if (!gemm_recipe_valid(recipe)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " prewarm: unknown recipe");
  if (out < SK_DTYPE_BF16 || out > SK_DTYPE_FP32) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " prewarm: bad out dtype");
  if (!gemm_weight_shape_fits(n, k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " prewarm: N = %lld, K = %lld: need " GEMM_WEIGHT_SHAPE_RULE,
                        (long long)n, (long long)k);
  if (arch && !sk_arch_valid(arch))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " prewarm: \"%.32s\" is not an arch like sm_120a", arch);
  if (!ms || !num_ms) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " prewarm: no M values");
  for (size_t i = 0; i < num_ms; i++) {
    if (ms[i] < 1 || ms[i] > INT32_MAX) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " prewarm: M values must be in [1, 2^31)");
    sk_plan *p, *owned;
    SK_TRY(plan_for(recipe, out, ms[i], n, k, arch, &p, &owned));
    sk_plan_destroy(owned);
  }
  return SK_OK;
}

/* The tuning a one-shot call uses for `arch` (NULL: the current device's). */
static sk_status tuning_for(const char **arch, char buf[SK_MAX_ARCH], gemm_tuning *t) {
  if (!*arch) {
    SK_TRY(sk_device_arch(-1, buf, SK_MAX_ARCH));
    *arch = buf;
  } else if (!sk_arch_valid(*arch)) {
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": \"%.32s\" is not an arch like sm_120a", *arch);
  }
  sk_arch_props props;
  SK_TRY(sk_arch_props_for(*arch, &props));
  return gemm_tuning_read(&props, t);
}

SK_API size_t sk_gemm_workspace_bytes(sk_gemm_recipe recipe, int64_t m, int64_t n, int64_t k) {
  const char *arch = NULL;
  char buf[SK_MAX_ARCH];
  gemm_tuning t;
  if (tuning_for(&arch, buf, &t) != SK_OK) {
    sk_arch_props generic;
    sk_arch_table_devices("sm_90a", &generic, 1);
    generic.sm_count = 128; /* no device: the generic grid */
    if (gemm_tuning_read(&generic, &t) != SK_OK) return 0;
  }
  return gemm_workspace_need(&t, recipe, m, n, k);
}

SK_API sk_status sk_gemm_describe(sk_gemm_recipe recipe, sk_dtype out, int64_t m, int64_t n, int64_t k, const char *arch,
                                  sk_gemm_launch_info *info) {
  if (!info) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " describe: info is NULL");
  if (!gemm_recipe_valid(recipe)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " describe: unknown recipe");
  if (out < SK_DTYPE_BF16 || out > SK_DTYPE_FP32) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " describe: bad out dtype");
  if (!gemm_weight_shape_fits(n, k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " describe: N = %lld, K = %lld: need " GEMM_WEIGHT_SHAPE_RULE,
                        (long long)n, (long long)k);
  if (m < 1 || m > INT32_MAX) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " describe: M = %lld: need 1..2^31-1", (long long)m);
  char buf[SK_MAX_ARCH];
  gemm_tuning t;
  SK_TRY(tuning_for(&arch, buf, &t));
  gemm_cfg cfg;
  gemm_config(&t, recipe, (int)out, m, n, k, &cfg);
  SK_TRY(gemm_cfg_check_smem(&t, &cfg, OP " describe"));
  memset(info, 0, sizeof *info);
  gemm_cfg_strings(&cfg, info->name, info->params);
  snprintf(info->source, sizeof info->source, "%s", gemm_cfg_source(&cfg));
  info->grid = cfg.grid;
  if (gemm_path_is_decode(cfg.path)) info->grid.x = (unsigned)gemm_decode_ctas(&t, &cfg, m, n, k);
  info->block = cfg.block;
  info->smem_bytes = cfg.smem;
  info->workspace_bytes = gemm_workspace_need(&t, recipe, m, n, k);
  info->sm_count = t.sms;
  return SK_OK;
}
