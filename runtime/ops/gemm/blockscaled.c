/* runtime/ops/gemm/blockscaled.c - gemm.blockscaled (mm, prewarm, pack_weight) and the linear
 * aliases. Kernels and launch contracts: kernel_src/gemm/gemv_decode.cuh (M <= 16) and
 * kernel_src/gemm/mma_tiled.cuh (M > 16). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "../../../kernel_src/gemm/decode_schedule.cuh" /* plain C11 as well: the decode grid */
#include "../../../kernel_src/gemm/sm120_layout.cuh" /* plain C11 as well: the SM120 smem formula */
#include "../../../kernel_src/gemm/tiled_layout.cuh"  /* plain C11 as well: the tiled smem formula */
#include "../../embedded.h"
#include "../../op.h"
#include "../quantization/quant_common.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/quantization.h"

#define OP "gemm.blockscaled"
#define DECODE_SOURCE "gemm/gemv_decode.cuh"
#define TILED_SOURCE "gemm/mma_tiled.cuh"
#define SM120_SOURCE "gemm/sm120_blockscaled.cuh"
#define DECODE_MAX_M 16
/* With SPARKINFER_GEMM_LINEAR_FUSED=1, gemm.mxfp8_linear quantizes the BF16 tokens inside the
 * decode kernel up to this M. Measured on the H200 (bench/RESULTS.md, fourteenth run): at M = 16
 * the fused kernel was 10-37% slower than quantize + mm (every CTA re-quantizes the tokens, and
 * the 16-token variant runs 2 CTAs per SM); at M = 1 it is now 7-13% slower too (forty-third run),
 * hence off by default (linear_fuses). */
#define LINEAR_FUSED_MAX_M 8
#define WS_ALIGN 256
#define MXFP8_QUANT_SOURCE "quantization/mxfp8.cuh"
#define MXFP8_QUANT_NAME "sk::quant::mxfp8_rows<__nv_bfloat16, 1, 1>"

static const char *const recipe_names[] = {"nvfp4", "mxfp4", "mxfp8", "block_fp8", "tensor_fp8"};
static const char *const out_names[] = {"bf16", "fp16", "fp32"};

static bool recipe_valid(sk_gemm_recipe r) { return r >= SK_GEMM_NVFP4 && r <= SK_GEMM_TENSOR_FP8; }
static bool recipe_fp4(sk_gemm_recipe r) { return r == SK_GEMM_NVFP4 || r == SK_GEMM_MXFP4; }
static int64_t scale_vec(sk_gemm_recipe r) { return r == SK_GEMM_NVFP4 ? 16 : r <= SK_GEMM_MXFP8 ? 32 : 128; }
static int64_t step_k(sk_gemm_recipe r) { (void)r; return 128; } /* gemv_decode DecodeStep::kStepK */

SK_API int sk_gemm_is_supported(sk_gemm_recipe recipe, const char *arch) {
  return recipe_valid(recipe) && sk_arch_valid(arch) && sk_arch_number(arch) >= 89;
}

SK_API int64_t sk_gemm_padded_k(int64_t k) { return k <= 0 ? 0 : sk_cdiv(k, 128) * 128; }

/* ---- configuration --------------------------------------------------------------------------- */

static _Atomic int cached_sms;
static int sm_count(void) {
  int s = atomic_load_explicit(&cached_sms, memory_order_relaxed);
  if (s > 0) return s;
  if (sk_device_sm_count(&s) != SK_OK || s <= 0) return 128;
  atomic_store(&cached_sms, s);
  return s;
}

/* Decode kernel configuration. SPARKINFER_GEMM_DECODE="ROW_TILES,WARPS,CTAS_PER_SM[,SCHEDULE[,ROW_GROUPS]]"
 * replaces the defaults (0, 4, 0, auto, 0): 16*ROW_TILES rows of B per warp (0: decode_row_tiles),
 * WARPS warps per CTA in ROW_GROUPS groups of rows (a divisor of WARPS; 0: decode_row_groups;
 * 1: the warps split the tile's K steps; block_fp8 takes 1 where a tile's rows would not divide
 * its 128-row scale blocks),
 * and the grid. streamk: CTAS_PER_SM CTAs per SM (0: what the kernel's
 * __launch_bounds__ guarantee, sk_decode_ctas_per_sm) sharing the (tile, step) units equally
 * (kernel_src/gemm/decode_schedule.cuh). splitk: one CTA per (tile, K split), splits until the
 * grid has CTAS_PER_SM (0: 2) CTAs per SM. auto: splitk, unless it splits K and its grid is more
 * than one wave of resident CTAs; then streamk. Measured on the H200 (bench/RESULTS.md,
 * nineteenth run): stream-K wins exactly there (mxfp8 / mxfp4 at M = 1 and every recipe at M = 16
 * on 8192x8192 and 8192x28672: up to 22% faster) and loses 2-20% on one-wave grids, small shapes
 * and unsplit multi-wave grids (28672x4096), where its fix-ups cost more than the tail. Tuning;
 * configs outside the prebuilt manifest compile on first use. */
/* A tuning variable parsed once per process (docs/env.md); a malformed value is remembered and
 * refused, naming the variable, by every call that depends on it. */
typedef struct env_override {
  pthread_once_t once;
  sk_status status;
  char message[384];
} env_override;

static void env_override_refuse(env_override *o, const char *var, const char *value, const char *expected) {
  o->status = SK_ERR_INVALID_ARGUMENT;
  snprintf(o->message, sizeof o->message, "%s=%.64s: expected %s", var, value, expected);
}

static sk_status env_override_check(env_override *o, void (*load)(void)) {
  pthread_once(&o->once, load);
  return o->status == SK_OK ? SK_OK : sk_set_error(o->status, "%s", o->message);
}

enum { SCHEDULE_AUTO, SCHEDULE_STREAMK, SCHEDULE_SPLITK };
typedef struct decode_cfg {
  int row_tiles, warps, ctas_per_sm, schedule, row_groups; /* row_tiles, row_groups 0: the heuristic */
} decode_cfg;
static decode_cfg decode_override;
static env_override decode_env = {PTHREAD_ONCE_INIT, SK_OK, ""};

static bool parse_int_field(const char *f, int lo, int hi, int *out) {
  char *end;
  const long x = strtol(f, &end, 10);
  if (!*f || *end || x < lo || x > hi) return false;
  *out = (int)x;
  return true;
}

static void decode_override_load(void) {
  decode_override = (decode_cfg){0, 4, 0, SCHEDULE_AUTO, 0};
  const char *v = sk_env_str("SPARKINFER_GEMM_DECODE");
  if (!v) return;
  decode_cfg d = {0, 0, 0, SCHEDULE_AUTO, 0};
  /* split at the commas, in place; absent optional fields keep their defaults */
  char buf[96];
  const char *f[5] = {"", "", "", "auto", "0"};
  int fields = 0;
  bool ok = !sk_strlcpy(buf, v, sizeof buf);
  for (char *p = buf; ok; fields++) {
    if (fields < 5) f[fields] = p;
    if (!(p = strchr(p, ','))) break;
    *p++ = 0;
  }
  fields++;
  ok = ok && fields >= 3 && fields <= 5 && parse_int_field(f[0], 0, 4, &d.row_tiles) && d.row_tiles != 3 &&
       parse_int_field(f[1], 1, 8, &d.warps) && parse_int_field(f[2], 0, 32, &d.ctas_per_sm);
  const char *schedule = f[3];
  ok = ok && (!strcmp(schedule, "auto") || !strcmp(schedule, "streamk") || !strcmp(schedule, "splitk"));
  ok = ok && parse_int_field(f[4], 0, 8, &d.row_groups) && (d.row_groups == 0 || d.warps % d.row_groups == 0);
  /* the kernel prefetches a tile's first steps with one thread per row */
  ok = ok && (d.row_groups <= 1 || (d.row_tiles ? d.row_tiles : 1) * 16 * d.row_groups <= 32 * d.warps);
  if (!ok) {
    env_override_refuse(&decode_env, "SPARKINFER_GEMM_DECODE", v,
                        "ROW_TILES,WARPS,CTAS_PER_SM[,auto|streamk|splitk[,ROW_GROUPS]]: ROW_TILES 0,1,2,4; "
                        "1..8 warps; 0..32 CTAs/SM; ROW_GROUPS 0 or a divisor of WARPS, <= 2 WARPS / ROW_TILES");
    return;
  }
  d.schedule = !strcmp(schedule, "splitk") ? SCHEDULE_SPLITK : !strcmp(schedule, "streamk") ? SCHEDULE_STREAMK : SCHEDULE_AUTO;
  decode_override = d;
}

static decode_cfg decode_config(void) {
  pthread_once(&decode_env.once, decode_override_load);
  return decode_override;
}
/* Weight rows per decode tile are 16 * this. 1 (16-row tiles) on small layers (N * K <= 2^24
 * weights, every recipe); for tensor_fp8 up to N = 16384, and beyond it at M > 8 (in two row
 * groups, decode_row_groups); for block_fp8 up to N = 16384 at M <= 8
 * (one token tile); for mxfp8 at M <= 8; for nvfp4 at M > 8 up to N * K = 2^26. Else 2. Measured
 * on the H200 (bench/RESULTS.md, thirty-seventh, thirty-eighth, forty-first and forty-third
 * runs), M = 1 unless stated: 16-row tiles are faster for tensor_fp8 by 8-24% (10-21% at M = 16)
 * on 8192x8192, 8192x28672 and 5120x2944, where the resident CTAs get whole 16-row tiles instead
 * of split 32-row ones, but not on 28672x4096 (enough 32-row tiles already); block_fp8 4-29%, but
 * 16-41% slower at M = 16 on the large shapes; mxfp8 5-9% on every shape at M = 1 and 4, but
 * 7-35% slower at M = 16 on the large ones; on 5120x2944 at M = 16 every recipe gains (mxfp8 and
 * block_fp8 -26%, nvfp4 -15%, mxfp4 -23%); nvfp4 8192x8192 at M = 16 -18%, but FP4 at M <= 8 is
 * 5-40% slower on every larger shape. With the wide FP8 lane map (fifty-fifth run) tensor_fp8 at
 * M = 16 on 28672x4096 takes 32.8 us in 16-row tiles x 2 groups against 36.2 in 32-row tiles.
 * A function of recipe, N, K and token tiles only: offline plans and manifests pick the same
 * kernels as a GPU does. */
#define DECODE_ONE_ROW_TILE_MAX_N 16384
#define DECODE_SMALL_LAYER_MAX_NK ((int64_t)1 << 24)
#define DECODE_NVFP4_16_TOKENS_ONE_ROW_TILE_MAX_NK ((int64_t)1 << 26)
static int decode_row_tiles(sk_gemm_recipe r, int token_tiles, int64_t n, int64_t k) {
  const decode_cfg d = decode_config();
  if (d.row_tiles) return d.row_tiles;
  if (n * k <= DECODE_SMALL_LAYER_MAX_NK) return 1;
  bool one = false;
  switch (r) {
  case SK_GEMM_TENSOR_FP8: one = n <= DECODE_ONE_ROW_TILE_MAX_N || token_tiles == 2; break;
  case SK_GEMM_BLOCK_FP8: one = token_tiles == 1 && n <= DECODE_ONE_ROW_TILE_MAX_N; break;
  case SK_GEMM_MXFP8: one = token_tiles == 1; break;
  case SK_GEMM_NVFP4: one = token_tiles == 2 && n * k <= DECODE_NVFP4_16_TOKENS_ONE_ROW_TILE_MAX_NK; break;
  default: break;
  }
  return one ? 1 : 2;
}

/* Row groups of a decode tile (gemv_decode's ROW_GROUPS), given its row tiles. 1: the warps of a CTA split the
 * tile's K steps; 2: two groups of 16 * row_tiles rows, each split between two warps. At M > 8
 * on 2^24 < N * K: 2 for mxfp8 and mxfp4 (32-row warp tiles) with N <= 16384, and for tensor_fp8
 * (16-row warp tiles) with N > 16384. The point is the token bytes: at 16 tokens a warp loads
 * as many of them as of weights, and the two warps of a group load the same ones. Measured on
 * the H200 against 1 group (bench/RESULTS.md): mxfp8 8192x8192 / 8192x28672 29.4 / 74.4 ->
 * 28.2 / 73.9 us, mxfp4 29.4 / 73.0 -> 27.9 / 72.8 (fiftieth run); tensor_fp8 28672x4096 34.9 ->
 * 32.8 (fifty-fifth run, wide FP8 lane map), but 8192x8192 18.0 -> 26.1. block_fp8 took 2 groups
 * until the wide lane map; with it one group is 2-3% faster (23.1 / 61.5 against 23.7 / 62.7 us).
 * Slower on the small layer, for nvfp4 and at M <= 8. All four warps on rows of their own
 * (4 groups) lost up to 1.7x (forty-ninth run), likely because those grids split tiles, which
 * keeps co-resident CTAs off each other's K steps (fifty-fourth run; docs/ops/gemm.md 5.1). */
#define DECODE_ROW_GROUPS_MAX_N 16384
static int decode_row_groups(sk_gemm_recipe r, int token_tiles, int64_t n, int64_t k, int row_tiles) {
  const decode_cfg d = decode_config();
  int groups = d.row_groups;
  if (!groups) {
    const bool mx = r == SK_GEMM_MXFP8 || r == SK_GEMM_MXFP4;
    const bool shared = mx ? n <= DECODE_ROW_GROUPS_MAX_N : r == SK_GEMM_TENSOR_FP8 && n > DECODE_ROW_GROUPS_MAX_N;
    groups = shared && token_tiles == 2 && d.warps % 2 == 0 && n * k > DECODE_SMALL_LAYER_MAX_NK ? 2 : 1;
  }
  /* block_fp8: a tile's rows must lie in one 128-row weight scale block (the kernel asserts it) */
  if (r == SK_GEMM_BLOCK_FP8 && 128 % sk_decode_tile_rows(row_tiles, groups)) groups = 1;
  return groups;
}

/* A decode tile: the gemv_decode template's ROW_TILES and ROW_GROUPS for one problem. */
typedef struct decode_tiling {
  int row_tiles, row_groups;
} decode_tiling;

static decode_tiling decode_tiling_for(sk_gemm_recipe r, int token_tiles, int64_t n, int64_t k) {
  const int row_tiles = decode_row_tiles(r, token_tiles, n, k);
  return (decode_tiling){row_tiles, decode_row_groups(r, token_tiles, n, k, row_tiles)};
}

/* The weight shapes every entry point accepts (one rule, so none of them can pass a shape another
 * refuses): n >= 1, k a positive multiple of 128 up to 2^30, and the kernels' 32-bit work counters
 * big enough: decode work units (tiles of at least 16 rows, sk_decode_tiles rounding up by at most
 * 3 more, x 128-K steps) below 2^31 and n with room for a tile's rounding. Any weight that fits in
 * memory passes the last two; absurd shapes are refused instead of overflowing. */
#define WEIGHT_SHAPE_RULE "N >= 1, K a positive multiple of 128 up to 2^30, N x K within 32-bit work counters"
static bool weight_shape_fits(int64_t n, int64_t k) {
  return n >= 1 && n <= INT32_MAX - 256 && k >= 128 && k % 128 == 0 && k <= ((int64_t)1 << 30) &&
         (n / 16 + 4) * (k / 128) < ((int64_t)1 << 31);
}

/* The decode grid: `ctas` CTAs over the tiles x steps work units (1 <= ctas <= units);
 * `may_split`: some tile may be shared by CTAs (then partials and counters are needed). */
typedef struct decode_grid {
  int64_t tiles, ctas;
  bool may_split;
  int64_t rows_per_tile; /* sk_decode_tile_rows */
} decode_grid;

static decode_grid decode_schedule(sk_gemm_recipe r, int token_tiles, int64_t n, int64_t k, decode_tiling t) {
  const decode_cfg d = decode_config();
  const int row_tiles = t.row_tiles, groups = t.row_groups;
  const int64_t rows = sk_decode_tile_rows(row_tiles, groups);
  const int64_t tiles = sk_decode_tiles((int)n, (int)r, row_tiles, groups), sms = sm_count(), steps = k / step_k(r);
  /* split-K: whole tiles, K split until the grid has the target CTAs per SM */
  const int64_t target = (d.ctas_per_sm && d.schedule == SCHEDULE_SPLITK ? d.ctas_per_sm : 2) * sms;
  int64_t splits = tiles >= target ? 1 : sk_cdiv(target, tiles);
  if (splits > 16) splits = 16;
  if (splits > steps / 4) splits = steps / 4; /* >= 4 steps per split (one per warp of a 4-warp block) */
  if (splits < 1) splits = 1;
  /* stream-K: the resident CTAs share the (tile, step) units equally */
  const int64_t per_sm = d.ctas_per_sm ? d.ctas_per_sm : sk_decode_ctas_per_sm((int)r, token_tiles, d.warps, row_tiles);
  const int64_t resident = per_sm * sms;
  const bool streamk = d.schedule == SCHEDULE_STREAMK ||
                       (d.schedule == SCHEDULE_AUTO && splits > 1 && tiles * splits > resident);
  int64_t ctas = tiles * splits;
  if (streamk) {
    const int64_t least = tiles < resident ? tiles : resident;
    ctas = resident;
    const int64_t per_step = d.warps / groups; /* CTAs with a step for every warp */
    if (ctas > tiles * steps / per_step) ctas = tiles * steps / per_step;
    if (ctas > 16 * tiles) ctas = 16 * tiles;                           /* <= 17 CTAs share a tile */
    if (ctas < least) ctas = least; /* fewer steps than warps: still a tile per CTA */
  }
  return (decode_grid){tiles, ctas, sk_decode_may_split_tiles((int)tiles, (int)steps, (int)ctas) != 0, rows};
}

static size_t decode_counters_bytes(int64_t tiles) { return ((size_t)tiles * 4 + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN; }

/* Workspace a grid of `ctas` CTAs uses at M tokens: tile counters, then 2 partial slots of
 * M x (rows per tile) floats per CTA. */
static size_t decode_workspace_need(int64_t tiles, int64_t ctas, int64_t m, int64_t rows_per_block) {
  return decode_counters_bytes(tiles) + (size_t)(2 * ctas * m * rows_per_block) * sizeof(float);
}

/* Sized for the larger grid of the two token-tile variants, so that it never shrinks as M grows
 * (a buffer sized for some M serves every smaller one). */
SK_API size_t sk_gemm_workspace_bytes(sk_gemm_recipe recipe, int64_t m, int64_t n, int64_t k) {
  if (!recipe_valid(recipe) || m < 1 || m > DECODE_MAX_M || !weight_shape_fits(n, k)) return 0;
  const decode_grid g1 = decode_schedule(recipe, 1, n, k, decode_tiling_for(recipe, 1, n, k)),
                    g2 = decode_schedule(recipe, 2, n, k, decode_tiling_for(recipe, 2, n, k));
  if (!g1.may_split && !g2.may_split) return 0;
  const size_t need1 = g1.may_split ? decode_workspace_need(g1.tiles, g1.ctas, m, g1.rows_per_tile) : 0,
               need2 = g2.may_split ? decode_workspace_need(g2.tiles, g2.ctas, m, g2.rows_per_tile) : 0;
  return need1 > need2 ? need1 : need2;
}

/* One decode launch: its CTAs and workspace views, for the tiling its kernel was configured with
 * (gemm_config's; not decided again). Without a (large enough, aligned) workspace a split grid
 * falls back to a whole tile per CTA (every weight byte still read once). */
typedef struct decode_launch {
  int64_t ctas;
  void *partials, *counters;
} decode_launch;

static decode_launch decode_launch_for(sk_gemm_recipe r, int64_t m, int64_t n, int64_t k, decode_tiling t,
                                       void *workspace, size_t ws_bytes) {
  const decode_grid g = decode_schedule(r, m <= 8 ? 1 : 2, n, k, t);
  if (!g.may_split) return (decode_launch){g.ctas, NULL, NULL};
  if (!workspace || ws_bytes < decode_workspace_need(g.tiles, g.ctas, m, g.rows_per_tile) || (uintptr_t)workspace % WS_ALIGN)
    return (decode_launch){g.tiles, NULL, NULL};
  return (decode_launch){g.ctas, (char *)workspace + decode_counters_bytes(g.tiles), workspace};
}

/* Tiled kernel configuration (docs/ops/gemm.md, "Prefill kernel"); SM120 kernel for the
 * block-scaled FP4/MXFP8 recipes on sm_120a/sm_121a (docs/ops/gemm.md, "SM120 kernel"). */
typedef struct tile_cfg { int bm, bn, bk, wm, wn, stages; } tile_cfg;
/* SPARKINFER_GEMM_PREFILL_TILE="BM,BN,WARPS_M,WARPS_N,STAGES" replaces the heuristic below for
 * every tiled launch (tuning; configs outside the prebuilt manifest compile on first use). */
static tile_cfg tile_override;
static env_override tile_env = {PTHREAD_ONCE_INIT, SK_OK, ""};

static void tile_override_load(void) {
  const char *v = sk_env_str("SPARKINFER_GEMM_PREFILL_TILE");
  if (!v) return;
  tile_cfg t = {0, 0, 128, 0, 0, 0};
  char extra;
  bool ok = sscanf(v, "%d,%d,%d,%d,%d%c", &t.bm, &t.bn, &t.wm, &t.wn, &t.stages, &extra) == 5;
  ok = ok && (t.bm == 32 || t.bm == 64 || t.bm == 128) && (t.bn == 32 || t.bn == 64 || t.bn == 128);
  ok = ok && t.wm >= 1 && t.wn >= 1 && t.bm % t.wm == 0 && t.bn % t.wn == 0 && (t.bm / t.wm) % 16 == 0 &&
       (t.bn / t.wn) % 8 == 0 && t.wm * t.wn <= 16 && t.stages >= 2 && t.stages <= 8;
  if (!ok) {
    env_override_refuse(&tile_env, "SPARKINFER_GEMM_PREFILL_TILE", v,
                        "BM,BN,WARPS_M,WARPS_N,STAGES with BM, BN in {32,64,128}, BM/WARPS_M a multiple of 16, "
                        "BN/WARPS_N of 8, 2..8 stages");
    return;
  }
  tile_override = t;
}

/* SPARKINFER_GEMM_LINEAR_FUSED (a flag: 0/1, true/false, ...): whether gemm.mxfp8_linear at M <= LINEAR_FUSED_MAX_M runs the
 * decode kernel with the activation quantizer fused in (1) or the quantization.mxfp8 kernel and
 * then mm (0, the default). Both give the same bits (the fused kernel keeps mm's geometry). The
 * default is measured: on the H200 (bench/RESULTS.md, forty-third run) quantize + mm was 7-13%
 * faster at M = 1 on 8192x8192, 28672x4096 and 8192x28672 (the fused kernel quantizes the tokens
 * again for every weight tile, and is 25-50% slower still at mm's 16-row tiles), while the extra
 * pass over memory is M x K x 3 bytes, about 3M / N of the weight bytes (0.6% at M = 8, N = 4096). */
static int linear_fused_override = 0;
static env_override linear_fused_env = {PTHREAD_ONCE_INIT, SK_OK, ""};

static void linear_fused_load(void) {
  if (sk_env_flag("SPARKINFER_GEMM_LINEAR_FUSED", 0, &linear_fused_override) == SK_OK) return;
  linear_fused_override = 0;
  linear_fused_env.status = SK_ERR_INVALID_ARGUMENT; /* the spine's message, remembered for every later call */
  snprintf(linear_fused_env.message, sizeof linear_fused_env.message, "%s", sk_last_error_message());
}

/* gemm.mxfp8_linear at M tokens quantizes its activations inside the decode kernel. */
static bool linear_fuses(int64_t m) {
  pthread_once(&linear_fused_env.once, linear_fused_load);
  return m <= LINEAR_FUSED_MAX_M && linear_fused_override;
}

static sk_status check_env_overrides(void) {
  SK_TRY(env_override_check(&tile_env, tile_override_load));
  SK_TRY(env_override_check(&linear_fused_env, linear_fused_load));
  return env_override_check(&decode_env, decode_override_load);
}

/* The heuristic of docs/ops/gemm.md (Prefill kernel, tile heuristic). Only these configs are
 * precompiled in tools/manifests/kernels-gemm-prefill.json. */
static tile_cfg tiled_config(sk_gemm_recipe r, int64_t m, int64_t n) {
  pthread_once(&tile_env.once, tile_override_load);
  if (tile_override.bm) return tile_override;
  const int64_t sms = sm_count();
  if (m <= 128) {
    if (sk_cdiv(n, 128) >= sms) return (tile_cfg){64, 128, 128, 1, 4, 3};
    return (tile_cfg){64, 64, 128, 2, 2, 4};
  }
  /* 128x128 tiles: 2x2 warps (64x64 warp tiles, half the fragment conversions per MMA) for
   * tensor_fp8 and the FP4 recipes, measured faster on the H200 (nineteenth run: 436 / 267 / 181
   * TFLOP/s against 379 / 244 / 156 with 2x4); block_fp8 and mxfp8 keep 2x4 (240 vs 289, 193 vs
   * 190: their per-block scale folds want the registers). */
  const bool wide_warps = r == SK_GEMM_TENSOR_FP8 || r == SK_GEMM_NVFP4 || r == SK_GEMM_MXFP4;
  if (sk_cdiv(m, 128) * sk_cdiv(n, 128) >= sms) return (tile_cfg){128, 128, 128, 2, wide_warps ? 2 : 4, 3};
  return (tile_cfg){128, 64, 128, 2, 2, 3};
}
/* BK is 128 (sk_tiled_smem_bytes assumes it; the kernel asserts it). */
static unsigned tiled_smem_bytes(sk_gemm_recipe r, tile_cfg t) {
  return (unsigned)sk_tiled_smem_bytes((int)r, t.bm, t.bn, t.stages);
}

enum { PATH_DECODE = 0, PATH_TILED = 1, PATH_SM120 = 2, PATH_FUSED = 3 };

/* Everything that decides which kernel runs and how it is launched. The kernel is named by path,
 * recipe, out and its template arguments (tmpl); cfg_id packs exactly those, so equal ids mean the
 * same kernel for one arch and the one-shot memo below can skip formatting and hashing requests. */
typedef struct gemm_cfg {
  int path, recipe, out;
  int tmpl[6];
  sk_dim3 grid, block;
  unsigned smem;
  int bm; /* rows of C per block (tiled and SM120 paths) */
} gemm_cfg;

static const char *const path_sources[] = {DECODE_SOURCE, TILED_SOURCE, SM120_SOURCE, DECODE_SOURCE};

/* The decode tiling a decode or fused configuration was built with (gemm_config: tmpl[2] row
 * tiles, tmpl[3] row groups). */
static decode_tiling cfg_decode_tiling(const gemm_cfg *c) { return (decode_tiling){c->tmpl[2], c->tmpl[3]}; }

static uint64_t cfg_id(const gemm_cfg *c) {
  uint64_t id = (uint64_t)1 << 63 | (uint64_t)c->path << 56 | (uint64_t)c->recipe << 52 | (uint64_t)c->out << 48;
  for (int i = 0; i < 6; i++) id |= (uint64_t)(c->tmpl[i] & 0xFF) << (8 * i); /* every argument is < 256 */
  return id;
}

/* The kernel request's name expression and params (what the cache key and compile logs see). */
static void cfg_strings(const gemm_cfg *c, char name[160], char params[128]) {
  const int *t = c->tmpl;
  const char *rn = recipe_names[c->recipe], *on = out_names[c->out];
  switch (c->path) {
  case PATH_DECODE:
    snprintf(name, 160, "sk::gemm::gemv_decode<%d, %d, %d, %d, %d, %d>", c->recipe, c->out, t[0], t[1], t[2], t[3]);
    snprintf(params, 128, "recipe=%s out=%s decode tokens<=%d row-groups=%d", rn, on, 8 * t[0], t[3]);
    break;
  case PATH_FUSED:
    snprintf(name, 160, "sk::gemm::gemv_decode_mxfp8_bf16<%d, %d, %d, %d>", c->out, t[0], t[1], t[2]);
    snprintf(params, 128, "recipe=mxfp8 out=%s decode tokens<=%d in=bf16 fused-quant", on, 8 * t[0]);
    break;
  case PATH_SM120:
    snprintf(name, 160, "sk::gemm::sm120_blockscaled<%d, %d, %d, 128, 128, %d, 4, %d>", c->recipe, c->out, t[0], t[1],
             t[2]);
    snprintf(params, 128, "recipe=%s out=%s sm120 tile=%dx128x128 stages=%d", rn, on, t[0], t[2]);
    break;
  default:
    snprintf(name, 160, "sk::gemm::mma_tiled<%d, %d, %d, %d, %d, %d, %d, %d>", c->recipe, c->out, t[0], t[1], t[2],
             t[3], t[4], t[5]);
    snprintf(params, 128, "recipe=%s out=%s tile=%dx%dx%d stages=%d", rn, on, t[0], t[1], t[2], t[5]);
  }
}

static void gemm_config(sk_gemm_recipe r, int out, int64_t m, int64_t n, int64_t k, const char *arch, gemm_cfg *c) {
  *c = (gemm_cfg){.recipe = (int)r, .out = out};
  if (m <= DECODE_MAX_M) {
    const decode_cfg d = decode_config();
    const int token_tiles = m <= 8 ? 1 : 2;
    const decode_tiling t = decode_tiling_for(r, token_tiles, n, k);
    c->path = PATH_DECODE;
    c->tmpl[0] = token_tiles; /* of 8 tokens */
    c->tmpl[1] = d.warps;
    c->tmpl[2] = t.row_tiles;
    c->tmpl[3] = t.row_groups;
    c->grid = (sk_dim3){(unsigned)sk_decode_tiles((int)n, (int)r, t.row_tiles, t.row_groups), 1, 1};
    c->block = (sk_dim3){32u * (unsigned)d.warps, 1, 1};
  } else if (r <= SK_GEMM_MXFP8 && sk_arch_is_sm120(arch)) {
    const int bm = m <= 128 ? 64 : 128, wm = bm == 64 ? 1 : 2, stages = r == SK_GEMM_MXFP8 ? 3 : 4;
    c->path = PATH_SM120;
    c->tmpl[0] = bm;
    c->tmpl[1] = wm;
    c->tmpl[2] = stages;
    c->grid = (sk_dim3){(unsigned)sk_cdiv(n, 128), (unsigned)sk_cdiv(m, bm), 1};
    c->block = (sk_dim3){32u * (unsigned)(wm * 4), 1, 1};
    c->smem = (unsigned)sk_sm120_smem_bytes((int)r, bm, 128, stages);
    c->bm = bm;
  } else {
    const tile_cfg t = tiled_config(r, m, n);
    c->path = PATH_TILED;
    memcpy(c->tmpl, (const int[6]){t.bm, t.bn, t.bk, t.wm, t.wn, t.stages}, sizeof c->tmpl);
    c->grid = (sk_dim3){(unsigned)sk_cdiv(n, t.bn), (unsigned)sk_cdiv(m, t.bm), 1};
    c->block = (sk_dim3){32u * (unsigned)(t.wm * t.wn), 1, 1};
    c->smem = tiled_smem_bytes(r, t);
    c->bm = t.bm;
  }
}

/* gemm.mxfp8_linear: quantizer launch + the mm kernel gemm_config picks; where linear_fuses(m), the
 * decode kernel with the activation quantizer fused in instead (gemv_decode_mxfp8_bf16: BF16
 * tokens quantized in the warp by quantization.mxfp8's device function; same geometry, grid and
 * MMA order as the mxfp8 decode kernel, so bitwise equal to quantize + mm). */
static void linear_config(int out, int64_t m, int64_t n, int64_t k, const char *arch, gemm_cfg *c) {
  gemm_config(SK_GEMM_MXFP8, out, m, n, k, arch, c);
  /* the fused kernel has mm's geometry only where mm's warps split K */
  if (c->path == PATH_DECODE && c->tmpl[3] == 1 && linear_fuses(m)) c->path = PATH_FUSED;
}

/* gemm.mxfp8_linear's activation quantizer when not fused (the quantization.mxfp8
 * kernel, the same rule as upstream's quantize_mxfp8_rows); arch NULL = the current device. */
static sk_kernel_request linear_quantizer_request(const char *arch) {
  return (sk_kernel_request){"gemm.mxfp8_linear", MXFP8_QUANT_SOURCE, MXFP8_QUANT_NAME, "in=bf16 scales=swizzled cvt=hw",
                             arch, NULL, 0, 0};
}

/* The arch one-shot calls target: the current device's, looked up once per process (a process
 * driving GPUs of different archs should use explicit archs with sk_gemm_prewarm). */
static char device_arch_cache[SK_MAX_ARCH];
static pthread_once_t device_arch_once = PTHREAD_ONCE_INIT;
static void device_arch_load(void) {
  if (sk_device_arch(-1, device_arch_cache, sizeof device_arch_cache) != SK_OK) device_arch_cache[0] = 0;
}
static sk_status device_arch(const char **arch) {
  pthread_once(&device_arch_once, device_arch_load);
  if (!device_arch_cache[0]) {
    char tmp[SK_MAX_ARCH];
    return sk_device_arch(-1, tmp, sizeof tmp); /* sets the error (no driver, no device, ...) */
  }
  *arch = device_arch_cache;
  return SK_OK;
}

static sk_status resolve_cfg(const char *op, const gemm_cfg *c, const char *arch, sk_kernel **k) {
  char name[160], params[128];
  cfg_strings(c, name, params);
  const char *source = path_sources[c->path];
  if (!sk_find_embedded_source(source))
    return sk_set_error(SK_ERR_UNSUPPORTED, OP ": this build lacks %s (needed for %s)", source, params);
  SK_TRY(sk_op_resolve(op, source, name, params, arch, k));
  return sk_op_allow_dynamic_smem(*k, (unsigned)c->smem); /* remembered per kernel: an atomic load after the first */
}

/* The request a config adds to a manifest's list (skipped when this build lacks its source). */
static sk_status add_cfg_request(const char *op, const gemm_cfg *c, const char *arch, sk_request_list *out) {
  char name[160], params[128];
  cfg_strings(c, name, params);
  if (!sk_find_embedded_source(path_sources[c->path])) return SK_OK;
  const sk_kernel_request req = {op, path_sources[c->path], name, params, arch, NULL, 0, 0};
  return sk_request_list_add(out, &req);
}

/* ---- validation ------------------------------------------------------------------------------ */

static sk_status check_operand(sk_gemm_recipe r, const char *side, const DLTensor *codes, const DLTensor *scales,
                               int64_t k, bool is_b, int64_t *rows, void **pc, void **ps) {
  char name[32];
  snprintf(name, sizeof name, "%s_codes", side);
  sk_tensor_spec cs = {name, SK_DL_U8, 2, {-1, recipe_fp4(r) ? k / 2 : k}, 16};
  SK_TRY(sk_check_tensor(OP, codes, &cs, pc));
  *rows = codes->shape[0];
  if (*rows < 1) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": %s has no rows", name);
  snprintf(name, sizeof name, "%s_scales", side);
  *ps = NULL;
  if (r == SK_GEMM_TENSOR_FP8) {
    if (scales) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": tensor_fp8 takes no %s (alpha carries the scales)", name);
    return SK_OK;
  }
  if (r == SK_GEMM_BLOCK_FP8) {
    sk_tensor_spec ss = {name, SK_DL_FP32, 2, {is_b ? sk_cdiv(*rows, 128) : *rows, k / 128}, 4};
    return sk_check_tensor(OP, scales, &ss, ps);
  }
  sk_tensor_spec ss = {name, SK_DL_U8, 1, {(int64_t)sk_swizzled_scale_bytes(*rows, k / scale_vec(r))}, 4};
  return sk_check_tensor(OP, scales, &ss, ps);
}

static sk_status out_type(const DLTensor *c, int *out) {
  if (!c) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": c is NULL");
  if (c->dtype.code == kDLBfloat && c->dtype.bits == 16) *out = 0;
  else if (c->dtype.code == kDLFloat && c->dtype.bits == 16) *out = 1;
  else if (c->dtype.code == kDLFloat && c->dtype.bits == 32) *out = 2;
  else return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": c must be bfloat16, float16 or float32");
  return SK_OK;
}

typedef struct mm_args {
  void *ac, *as, *bc, *bs, *alpha, *c;
  int64_t m, n, k;
  int out;
} mm_args;

static sk_status validate(sk_gemm_recipe r, const DLTensor *a_codes, const DLTensor *a_scales, const DLTensor *b_codes,
                          const DLTensor *b_scales, const DLTensor *alpha, const DLTensor *c, mm_args *x) {
  if (!recipe_valid(r)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": unknown recipe %d", (int)r);
  if (!a_codes || !b_codes) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": a_codes and b_codes are required");
  if (a_codes->ndim != 2 || !a_codes->shape)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": a_codes must be 2-D [M, K%s]", recipe_fp4(r) ? "/2" : "");
  const int64_t k = a_codes->shape[1] * (recipe_fp4(r) ? 2 : 1);
  if (k < 128 || k % 128)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": K = %lld must be a positive multiple of 128 (pad weights with "
                        "sk_gemm_pack_weight)", (long long)k);
  if (k > ((int64_t)1 << 30)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": K = %lld is too large", (long long)k);
  SK_TRY(check_operand(r, "a", a_codes, a_scales, k, false, &x->m, &x->ac, &x->as));
  SK_TRY(check_operand(r, "b", b_codes, b_scales, k, true, &x->n, &x->bc, &x->bs));
  if (x->m > INT32_MAX || x->n > INT32_MAX || x->m * x->n > ((int64_t)1 << 40))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": M x N = %lld x %lld is too large", (long long)x->m, (long long)x->n);
  if (!weight_shape_fits(x->n, k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": B [N, K] = [%lld, %lld]: need " WEIGHT_SHAPE_RULE, (long long)x->n,
                        (long long)k);
  x->k = k;
  x->alpha = NULL;
  if (alpha) {
    sk_tensor_spec as = {"alpha", SK_DL_FP32, 1, {1}, 4};
    SK_TRY(sk_check_tensor(OP, alpha, &as, &x->alpha));
  }
  SK_TRY(out_type(c, &x->out));
  sk_tensor_spec cs = {"c", c->dtype, 2, {x->m, x->n}, x->out == 2 ? 4 : 2};
  return sk_check_tensor(OP, c, &cs, &x->c);
}

/* ---- launch ---------------------------------------------------------------------------------- */

static sk_status launch_decode(sk_kernel *kern, const gemm_cfg *cfg, const mm_args *x, const decode_launch *d,
                              void *stream) {
  const void *ac = x->ac, *as = x->as, *bc = x->bc, *bs = x->bs, *alpha = x->alpha;
  void *c = x->c, *partials = d->partials, *counters = d->counters;
  int m = (int)x->m, n = (int)x->n, k = (int)x->k, ldc = (int)x->n;
  void *args[] = {(void *)&ac, (void *)&as, (void *)&bc, (void *)&bs, (void *)&alpha, &c, &m, &n, &k, &ldc,
                  &partials, &counters};
  sk_dim3 grid = cfg->grid;
  grid.x = (unsigned)d->ctas;
  /* Overlapped with the previous kernel's tail: the decode kernels wait for it on the device
   * (pdl_wait_for_previous) before touching anything (include/sparkinfer/jit.h). */
  return sk_kernel_launch_ex(kern, grid, cfg->block, 0, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS);
}

static sk_status launch_tiled(sk_kernel *kern, const gemm_cfg *cfg, const mm_args *x, void *stream) {
  const void *ac = x->ac, *as = x->as, *bc = x->bc, *bs = x->bs, *alpha = x->alpha;
  void *c = x->c;
  int m = (int)x->m, n = (int)x->n, k = (int)x->k, ldc = (int)x->n;
  void *args[] = {(void *)&ac, (void *)&as, (void *)&bc, (void *)&bs, (void *)&alpha, &c, &m, &n, &k, &ldc};
  return sk_kernel_launch(kern, cfg->grid, cfg->block, cfg->smem, stream, args);
}

static bool path_is_decode(int path) { return path == PATH_DECODE || path == PATH_FUSED; }

/* One-shot memo: cfg_id -> the kernel resolved for the current device's arch. A repeated call of a
 * shape skips formatting the request and hashing its key (about 1 us of host time per call), which
 * matters at decode where a launch is ~4.5 us. Kernels live as long as the process, so entries
 * never go stale; the table only grows (a few hundred configs exist) and a full table falls back to
 * resolving. Readers are lock-free: a slot's kernel is stored before its id (release/acquire). */
#define MEMO_SLOTS 1024
static struct {
  _Atomic uint64_t id;
  _Atomic(sk_kernel *) kernel;
} memo[MEMO_SLOTS];
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t memo_slot(uint64_t id) { return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 54); /* 10 bits */ }

static sk_kernel *memo_find(uint64_t id) {
  for (size_t i = memo_slot(id), n = 0; n < MEMO_SLOTS; i = (i + 1) % MEMO_SLOTS, n++) {
    const uint64_t at = atomic_load_explicit(&memo[i].id, memory_order_acquire);
    if (at == id) return atomic_load_explicit(&memo[i].kernel, memory_order_relaxed);
    if (!at) return NULL;
  }
  return NULL;
}

static void memo_add(uint64_t id, sk_kernel *k) {
  pthread_mutex_lock(&memo_lock);
  for (size_t i = memo_slot(id), n = 0; n < MEMO_SLOTS; i = (i + 1) % MEMO_SLOTS, n++) {
    const uint64_t at = atomic_load_explicit(&memo[i].id, memory_order_relaxed);
    if (at == id) break;
    if (!at) {
      atomic_store_explicit(&memo[i].kernel, k, memory_order_relaxed);
      atomic_store_explicit(&memo[i].id, id, memory_order_release);
      break;
    }
  }
  pthread_mutex_unlock(&memo_lock);
}

/* fused: gemm.mxfp8_linear's decode kernel (linear_config), x->ac holding BF16 tokens. The caller
 * has run check_env_overrides (once per API call). */
static sk_status launch(sk_gemm_recipe r, bool fused, const mm_args *x, void *workspace, size_t ws_bytes, void *stream) {
  const char *arch;
  SK_TRY(device_arch(&arch));
  gemm_cfg cfg;
  if (fused) linear_config(x->out, x->m, x->n, x->k, arch, &cfg);
  else gemm_config(r, x->out, x->m, x->n, x->k, arch, &cfg);
  const uint64_t id = cfg_id(&cfg);
  sk_kernel *kern = memo_find(id);
  if (!kern) {
    SK_TRY(resolve_cfg(OP, &cfg, arch, &kern));
    memo_add(id, kern);
  }
  if (!path_is_decode(cfg.path)) return launch_tiled(kern, &cfg, x, stream);
  const decode_launch d = decode_launch_for(r, x->m, x->n, x->k, cfg_decode_tiling(&cfg), workspace, ws_bytes);
  return launch_decode(kern, &cfg, x, &d, stream);
}

/* sk_gemm_mm after check_env_overrides. */
static sk_status mm_checked(sk_gemm_recipe recipe, const DLTensor *a_codes, const DLTensor *a_scales,
                            const DLTensor *b_codes, const DLTensor *b_scales, const DLTensor *alpha, const DLTensor *c,
                            void *workspace, size_t workspace_bytes, void *stream) {
  mm_args x;
  SK_TRY(validate(recipe, a_codes, a_scales, b_codes, b_scales, alpha, c, &x));
  return launch(recipe, false, &x, workspace, workspace_bytes, stream);
}

SK_API sk_status sk_gemm_mm(sk_gemm_recipe recipe, const DLTensor *a_codes, const DLTensor *a_scales,
                            const DLTensor *b_codes, const DLTensor *b_scales, const DLTensor *alpha,
                            const DLTensor *c, void *workspace, size_t workspace_bytes, void *stream) {
  SK_TRY(check_env_overrides());
  return mm_checked(recipe, a_codes, a_scales, b_codes, b_scales, alpha, c, workspace, workspace_bytes, stream);
}

/* The checks shared by prewarm and describe (`what` names the call in messages): recipe, output
 * type, N, K and the overrides; *arch NULL becomes the current device's (written to buf). */
static sk_status check_problem(const char *what, sk_gemm_recipe recipe, sk_dtype out, int64_t n, int64_t k,
                               const char **arch, char buf[SK_MAX_ARCH]) {
  if (!recipe_valid(recipe)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: unknown recipe", what);
  if (out < SK_DTYPE_BF16 || out > SK_DTYPE_FP32) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: bad out dtype", what);
  if (!weight_shape_fits(n, k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: N = %lld, K = %lld: need " WEIGHT_SHAPE_RULE, what, (long long)n,
                        (long long)k);
  SK_TRY(check_env_overrides());
  if (!*arch) {
    SK_TRY(sk_device_arch(-1, buf, SK_MAX_ARCH));
    *arch = buf;
  } else if (!sk_arch_valid(*arch)) {
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: \"%s\" is not an arch like sm_120a", what, *arch);
  }
  return SK_OK;
}

/* linear: gemm.mxfp8_linear's configurations (mm's plus the quantizer, or the fused decode kernel
 * where linear_fuses), else mm's for `recipe`. */
static sk_status prewarm(const char *what, sk_gemm_recipe recipe, bool linear, sk_dtype out, const int64_t *ms,
                         size_t num_ms, int64_t n, int64_t k, const char *arch) {
  char buf[SK_MAX_ARCH];
  SK_TRY(check_problem(what, recipe, out, n, k, &arch, buf));
  if (!ms || !num_ms) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: no M values", what);
  bool quantizer = false;
  for (size_t i = 0; i < num_ms; i++) {
    if (ms[i] < 1) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: M values must be >= 1", what);
    gemm_cfg cfg;
    if (linear) linear_config((int)out, ms[i], n, k, arch, &cfg);
    else gemm_config(recipe, (int)out, ms[i], n, k, arch, &cfg);
    quantizer = quantizer || (linear && !linear_fuses(ms[i]));
    sk_kernel *kern;
    SK_TRY(resolve_cfg(OP, &cfg, arch, &kern));
  }
  if (quantizer) { /* through the op spine like the configs: offline (no GPU) it compiles and caches */
    const sk_kernel_request q = linear_quantizer_request(arch);
    sk_kernel *kern;
    SK_TRY(sk_op_resolve(q.op, q.source, q.name_expr, q.params, arch, &kern));
  }
  return SK_OK;
}

SK_API sk_status sk_gemm_describe(sk_gemm_recipe recipe, sk_dtype out, int64_t m, int64_t n, int64_t k,
                                  const char *arch, sk_gemm_launch_info *info) {
  if (!info) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " describe: info is NULL");
  char buf[SK_MAX_ARCH];
  SK_TRY(check_problem(OP " describe", recipe, out, n, k, &arch, buf));
  if (m < 1 || m > INT32_MAX) return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " describe: M = %lld: need 1..2^31-1", (long long)m);
  gemm_cfg cfg;
  gemm_config(recipe, (int)out, m, n, k, arch, &cfg);
  memset(info, 0, sizeof *info);
  cfg_strings(&cfg, info->name, info->params);
  snprintf(info->source, sizeof info->source, "%s", path_sources[cfg.path]);
  info->grid = cfg.grid;
  if (path_is_decode(cfg.path))
    info->grid.x = (unsigned)decode_schedule(recipe, m <= 8 ? 1 : 2, n, k, cfg_decode_tiling(&cfg)).ctas;
  info->block = cfg.block;
  info->smem_bytes = cfg.smem;
  info->workspace_bytes = sk_gemm_workspace_bytes(recipe, m, n, k);
  info->sm_count = sm_count();
  return SK_OK;
}

SK_API sk_status sk_gemm_prewarm(sk_gemm_recipe recipe, sk_dtype out, const int64_t *ms, size_t num_ms, int64_t n,
                                 int64_t k, const char *arch) {
  return prewarm(OP " prewarm", recipe, false, out, ms, num_ms, n, k, arch);
}

SK_API sk_status sk_gemm_mxfp8_linear_prewarm(sk_dtype out, const int64_t *ms, size_t num_ms, int64_t n, int64_t k,
                                              const char *arch) {
  return prewarm("gemm.mxfp8_linear prewarm", SK_GEMM_MXFP8, true, out, ms, num_ms, n, k, arch);
}

/* ---- pack_weight ----------------------------------------------------------------------------- */

SK_API sk_status sk_gemm_packed_bytes(sk_gemm_recipe r, int64_t n, int64_t k, size_t *codes_bytes, size_t *scales_bytes) {
  /* scales_bytes may be NULL for TENSOR_FP8, which has no scales. */
  if (!recipe_valid(r) || n < 1 || k < 1 || (recipe_fp4(r) && k % 2) || k % (r == SK_GEMM_NVFP4 ? 16 : r <= SK_GEMM_MXFP8 ? 32 : 1) ||
      !codes_bytes || (!scales_bytes && r != SK_GEMM_TENSOR_FP8) || n > ((int64_t)1 << 31) || k > ((int64_t)1 << 30))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " pack_weight: bad recipe, n, k or output pointers");
  const int64_t kp = sk_gemm_padded_k(k);
  *codes_bytes = (size_t)(n * (recipe_fp4(r) ? kp / 2 : kp));
  if (scales_bytes)
    *scales_bytes = r == SK_GEMM_TENSOR_FP8 ? 0
                    : r == SK_GEMM_BLOCK_FP8 ? (size_t)(sk_cdiv(n, 128) * (kp / 128)) * 4
                                             : sk_swizzled_scale_bytes(n, kp / scale_vec(r));
  return SK_OK;
}

static size_t swz_offset(int64_t row, int64_t col, int64_t cols) {
  const int64_t ktiles = sk_cdiv(cols, 4);
  return (size_t)((row / 128) * ktiles * 512 + (col / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + (col % 4));
}

SK_API sk_status sk_gemm_pack_weight(sk_gemm_recipe r, int64_t n, int64_t k, const void *codes, const void *scales,
                                     void *packed_codes, void *packed_scales) {
  size_t cb, sb;
  SK_TRY(sk_gemm_packed_bytes(r, n, k, &cb, &sb));
  if (!codes || !packed_codes || (r != SK_GEMM_TENSOR_FP8 && (!scales || !packed_scales)))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP " pack_weight: NULL buffer");
  const int64_t kp = sk_gemm_padded_k(k), rb = recipe_fp4(r) ? k / 2 : k, rbp = recipe_fp4(r) ? kp / 2 : kp;
  for (int64_t i = 0; i < n; i++) {
    memcpy((uint8_t *)packed_codes + i * rbp, (const uint8_t *)codes + i * rb, (size_t)rb);
    memset((uint8_t *)packed_codes + i * rbp + rb, 0, (size_t)(rbp - rb));
  }
  if (r == SK_GEMM_TENSOR_FP8) return SK_OK;
  if (r == SK_GEMM_BLOCK_FP8) {
    const int64_t rows = sk_cdiv(n, 128), cols = sk_cdiv(k, 128), colsp = kp / 128;
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < colsp; j++)
        ((float *)packed_scales)[i * colsp + j] = j < cols ? ((const float *)scales)[i * cols + j] : 1.0f;
    return SK_OK;
  }
  const int64_t cols = k / scale_vec(r), colsp = kp / scale_vec(r);
  const uint8_t one = r == SK_GEMM_NVFP4 ? 0x38 : 127; /* 1.0 in UE4M3 / UE8M0 */
  memset(packed_scales, one, sb); /* padding rows and columns read as 1.0 (never used) */
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < colsp; j++)
      ((uint8_t *)packed_scales)[swz_offset(i, j, colsp)] =
          j < cols ? ((const uint8_t *)scales)[swz_offset(i, j, cols)] : one;
  return SK_OK;
}

/* ---- linear aliases -------------------------------------------------------------------------- */

static size_t mxfp8_act_bytes(int64_t m, int64_t k) {
  const size_t codes = (size_t)(m * k), scales = sk_swizzled_scale_bytes(m, k / 32);
  return (codes + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN + (scales + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
}

/* The quantized activations and mm's K-split partials; fused (linear_fuses), the partials only
 * (0 bytes when it does not split). */
SK_API size_t sk_gemm_mxfp8_linear_workspace_bytes(int64_t m, int64_t n, int64_t k) {
  if (m < 1 || !weight_shape_fits(n, k)) return 0;
  return (linear_fuses(m) ? 0 : mxfp8_act_bytes(m, k)) + sk_gemm_workspace_bytes(SK_GEMM_MXFP8, m, n, k);
}

SK_API sk_status sk_gemm_mxfp8_linear(const DLTensor *x, const DLTensor *w_codes, const DLTensor *w_scales,
                                      const DLTensor *alpha, const DLTensor *out, void *workspace, size_t workspace_bytes,
                                      void *stream) {
  SK_TRY(check_env_overrides()); /* SPARKINFER_GEMM_LINEAR_FUSED sets the workspace below */
  if (!x || x->ndim != 2 || !x->shape)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "gemm.mxfp8_linear: x must be bfloat16 [M, K]");
  const int64_t m = x->shape[0], k = x->shape[1];
  if (m < 1 || k < 128 || k % 128)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "gemm.mxfp8_linear: x is [%lld, %lld]; K must be a multiple of 128",
                        (long long)m, (long long)k);
  if (!w_codes || w_codes->ndim != 2 || !w_codes->shape)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "gemm.mxfp8_linear: w_codes must be uint8 [N, K]");
  const int64_t n = w_codes->shape[0];
  const size_t need = sk_gemm_mxfp8_linear_workspace_bytes(m, n, k);
  if (need && (!workspace || workspace_bytes < need || (uintptr_t)workspace % WS_ALIGN))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "gemm.mxfp8_linear: workspace must be %zu bytes, 256-byte aligned (%s)", need,
                        linear_fuses(m) ? "K-split partials" : "the quantized activations");
  sk_tensor_spec xs = {"x", SK_DL_BF16, 2, {m, k}, 16};
  void *px;
  SK_TRY(sk_check_tensor("gemm.mxfp8_linear", x, &xs, &px));
  if (linear_fuses(m)) {
    /* Fused: validated as mm with x standing in for the MXFP8 codes and scales (same rows, K and
     * alignment); the kernel reads the BF16 x and never the scales. */
    int64_t cshape[2] = {m, k}, sshape[1] = {(int64_t)sk_swizzled_scale_bytes(m, k / 32)};
    DLTensor tc = {px, x->device, 2, SK_DL_U8, cshape, NULL, 0}, ts = {px, x->device, 1, SK_DL_U8, sshape, NULL, 0};
    mm_args a;
    SK_TRY(validate(SK_GEMM_MXFP8, &tc, &ts, w_codes, w_scales, alpha, out, &a));
    a.as = NULL;
    return launch(SK_GEMM_MXFP8, true, &a, workspace, workspace_bytes, stream);
  }
  /* The activation quantizer is the quantization.mxfp8 kernel (the same rule as upstream's
   * quantize_mxfp8_rows), resolved like any one-shot kernel on first use. */
  const uint64_t quantizer_id = (uint64_t)1 << 63 | (uint64_t)0xFF << 56; /* no config's path is 0xFF */
  sk_kernel *qk = memo_find(quantizer_id);
  if (!qk) {
    const sk_kernel_request qr = linear_quantizer_request(NULL);
    SK_TRY(sk_kernel_resolve(&qr, &qk));
    memo_add(quantizer_id, qk);
  }
  uint8_t *codes = workspace, *scales = codes + (((size_t)(m * k) + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN);
  int64_t cshape[2] = {m, k}, sshape[1] = {(int64_t)sk_swizzled_scale_bytes(m, k / 32)};
  DLTensor tc = {codes, x->device, 2, SK_DL_U8, cshape, NULL, 0};
  DLTensor ts = {scales, x->device, 1, SK_DL_U8, sshape, NULL, 0};
  {
    const void *xp = px;
    void *cp = codes, *sp = scales, *rows = NULL;
    int ld = (int)k, mi = (int)m, ki = (int)k;
    const sk_dim3 grid = quant_rows_grid(m, k, 32, 0, sm_count()); /* the quantization.mxfp8 op's grid */
    void *args[] = {(void *)&xp, &ld, &mi, &ki, &cp, &sp, &rows};
    sk_status s = sk_kernel_launch_ex(qk, grid, (sk_dim3){256, 1, 1}, 0, stream, args,
                                      SK_LAUNCH_OVERLAP_PREVIOUS);
    if (s != SK_OK) return sk_wrap_error(s, "gemm.mxfp8_linear");
  }
  char *rest = (char *)workspace + mxfp8_act_bytes(m, k);
  return mm_checked(SK_GEMM_MXFP8, &tc, &ts, w_codes, w_scales, alpha, out, rest, workspace_bytes - mxfp8_act_bytes(m, k),
                    stream);
}

SK_API sk_status sk_gemm_tensor_fp8_linear(const DLTensor *x_codes, const DLTensor *w_codes, const DLTensor *alpha,
                                           const DLTensor *out, void *workspace, size_t workspace_bytes, void *stream) {
  return sk_gemm_mm(SK_GEMM_TENSOR_FP8, x_codes, NULL, w_codes, NULL, alpha, out, workspace, workspace_bytes, stream);
}

/* ---- registry -------------------------------------------------------------------------------- */

static bool gemm_supported(const char *arch) { return sk_arch_valid(arch) && sk_arch_number(arch) >= 89; }

/* caps: {"recipe": "nvfp4", "out": "bf16", "n": N, "k": K, "m": [1, 8, 16, 2048]}; the linear
 * aliases fix the recipe (forced >= 0) and mxfp8_linear adds its activation quantizer. K is
 * required: the decode kernel's row tiles depend on it (decode_row_tiles). */
static sk_status requests_for(const cJSON *j, const char *arch, int forced, sk_request_list *out) {
  static const char *const fields[] = {"recipe", "out", "n", "k", "m", NULL};
  SK_TRY(sk_json_check_fields(j, "caps", fields));
  SK_TRY(check_env_overrides()); /* they pick the kernels */
  const cJSON *it;
  const cJSON *rj = cJSON_GetObjectItemCaseSensitive(j, "recipe"), *oj = cJSON_GetObjectItemCaseSensitive(j, "out"),
              *nj = cJSON_GetObjectItemCaseSensitive(j, "n"), *kj = cJSON_GetObjectItemCaseSensitive(j, "k"),
              *mj = cJSON_GetObjectItemCaseSensitive(j, "m");
  int r = forced, o = 0;
  bool quantizer = false;
  if (forced >= 0 && rj) return sk_set_error(SK_ERR_MANIFEST, "caps.recipe: this op's recipe is fixed");
  for (int i = 0; forced < 0 && cJSON_IsString(rj) && i < 5; i++)
    if (!strcmp(rj->valuestring, recipe_names[i])) r = i;
  if (r < 0) return sk_set_error(SK_ERR_MANIFEST, "caps.recipe: expected nvfp4, mxfp4, mxfp8, block_fp8 or tensor_fp8");
  if (oj) {
    o = -1;
    for (int i = 0; cJSON_IsString(oj) && i < 3; i++)
      if (!strcmp(oj->valuestring, out_names[i])) o = i;
    if (o < 0) return sk_set_error(SK_ERR_MANIFEST, "caps.out: expected bf16, fp16 or fp32");
  }
  if (!cJSON_IsNumber(nj) || !(nj->valuedouble >= 1 && nj->valuedouble <= 2147483647.0))
    return sk_set_error(SK_ERR_MANIFEST, "caps.n: expected a whole number in [1, 2^31)");
  if (!cJSON_IsNumber(kj) || !(kj->valuedouble >= 128 && kj->valuedouble <= 1073741824.0) || fmod(kj->valuedouble, 128) != 0)
    return sk_set_error(SK_ERR_MANIFEST, "caps.k: expected a positive multiple of 128 (the padded K of the weight)");
  const int64_t k = (int64_t)kj->valuedouble;
  if (!weight_shape_fits((int64_t)nj->valuedouble, k))
    return sk_set_error(SK_ERR_MANIFEST, "caps: N = %.0f, K = %lld: need " WEIGHT_SHAPE_RULE, nj->valuedouble, (long long)k);
  if (!cJSON_IsArray(mj) || !cJSON_GetArraySize(mj)) return sk_set_error(SK_ERR_MANIFEST, "caps.m: expected an array of M values");
  cJSON_ArrayForEach(it, mj) {
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 1 && it->valuedouble <= 2147483647.0))
      return sk_set_error(SK_ERR_MANIFEST, "caps.m: M values must be whole numbers in [1, 2^31)");
    const int64_t m = (int64_t)it->valuedouble;
    gemm_cfg cfg;
    if (forced == SK_GEMM_MXFP8) linear_config(o, m, (int64_t)nj->valuedouble, k, arch, &cfg);
    else gemm_config((sk_gemm_recipe)r, o, m, (int64_t)nj->valuedouble, k, arch, &cfg);
    quantizer = quantizer || (forced == SK_GEMM_MXFP8 && !linear_fuses(m)); /* else quantized in the kernel */
    SK_TRY(add_cfg_request(OP, &cfg, arch, out));
  }
  if (quantizer) {
    const sk_kernel_request q = linear_quantizer_request(arch);
    SK_TRY(sk_request_list_add(out, &q));
  }
  return SK_OK;
}
static sk_status gemm_requests(const cJSON *j, const char *arch, sk_request_list *out) {
  return requests_for(j, arch, -1, out);
}
static sk_status mxfp8_linear_requests(const cJSON *j, const char *arch, sk_request_list *out) {
  return requests_for(j, arch, SK_GEMM_MXFP8, out);
}
static sk_status tensor_fp8_linear_requests(const cJSON *j, const char *arch, sk_request_list *out) {
  return requests_for(j, arch, SK_GEMM_TENSOR_FP8, out);
}

const sk_op_desc sk_op_desc_gemm_blockscaled = {
    {OP, SK_OP_ONE_SHOT, "C = alpha * A x B^T for NVFP4 / MXFP4 / MXFP8 / block-FP8 / tensor-FP8 operands",
     "sm_89+,sm_90a,sm_120a,sm_121a"},
    gemm_supported,
    gemm_requests,
};
const sk_op_desc sk_op_desc_gemm_mxfp8_linear = {
    {"gemm.mxfp8_linear", SK_OP_ONE_SHOT, "BF16 activations quantized to MXFP8 in the op x packed MXFP8 weight -> BF16",
     "sm_89+,sm_90a,sm_120a,sm_121a"},
    gemm_supported,
    mxfp8_linear_requests,
};
const sk_op_desc sk_op_desc_gemm_tensor_fp8_linear = {
    {"gemm.tensor_fp8_linear", SK_OP_ONE_SHOT, "E4M3 activations x E4M3 weight, per-tensor scales in alpha",
     "sm_89+,sm_90a,sm_120a,sm_121a"},
    gemm_supported,
    tensor_fp8_linear_requests,
};

/* ---- gemm.block_fp8_linear (planned) --------------------------------------------------------- */

#define BFP8_OP "gemm.block_fp8_linear"
#define ACTQ_SOURCE "gemm/act_quant.cuh"
#define ACTQ_NAME "sk::gemm::act_quant_block_fp8<1>"
enum { BFP8_DECODE8, BFP8_DECODE16, BFP8_TILED64, BFP8_TILED128, BFP8_CFGS };

struct sk_block_fp8_linear_plan {
  sk_block_fp8_linear_caps caps;
  char arch[SK_MAX_ARCH];
  sk_kernel *quant;
  gemm_cfg cfg[BFP8_CFGS];
  sk_kernel *kern[BFP8_CFGS]; /* NULL where max_m never reaches that regime */
  sk_scratch_layout scratch;
  int r_codes, r_scales, r_ws;
};

/* The M each regime is configured for (the configuration depends only on the regime). */
static const int64_t bfp8_regime_m[BFP8_CFGS] = {8, 16, 128, 129};
static int bfp8_regime(int64_t m) { return m <= 8 ? BFP8_DECODE8 : m <= 16 ? BFP8_DECODE16 : m <= 128 ? BFP8_TILED64 : BFP8_TILED128; }

SK_API int sk_block_fp8_linear_is_supported(const char *arch) { return sk_gemm_is_supported(SK_GEMM_BLOCK_FP8, arch); }

/* The caps rules of gemm.block_fp8_linear (plan_create and its manifest builder). */
static sk_status bfp8_caps_check(const sk_block_fp8_linear_caps *caps) {
  if (!weight_shape_fits(caps->n, caps->k))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP ": N = %lld, K = %lld: need " WEIGHT_SHAPE_RULE,
                        (long long)caps->n, (long long)caps->k);
  if (caps->max_m < 1 || caps->max_m > ((int64_t)1 << 34) / caps->k)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP ": max_m = %lld must be >= 1 with max_m*K <= 2^34",
                        (long long)caps->max_m);
  if (caps->out < SK_DTYPE_BF16 || caps->out > SK_DTYPE_FP32)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP ": out must be SK_DTYPE_BF16, _FP16 or _FP32");
  return check_env_overrides();
}

SK_API sk_status sk_block_fp8_linear_plan_create(const sk_block_fp8_linear_caps *caps, sk_block_fp8_linear_plan **out) {
  if (!caps || !out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP ": caps or plan out-pointer is NULL");
  *out = NULL;
  SK_TRY(bfp8_caps_check(caps));
  sk_block_fp8_linear_plan *p = calloc(1, sizeof *p);
  if (!p) return sk_set_error(SK_ERR_OUT_OF_MEMORY, BFP8_OP ": out of memory");
  p->caps = *caps;
  sk_status s = sk_op_arch(BFP8_OP, caps->arch, p->arch);
  if (s == SK_OK && !sk_block_fp8_linear_is_supported(p->arch))
    s = sk_set_error(SK_ERR_UNSUPPORTED, BFP8_OP ": arch %s is not supported (needs sm_89 or newer)", p->arch);
  p->caps.arch = p->arch;
  if (s == SK_OK) s = sk_op_resolve(BFP8_OP, ACTQ_SOURCE, ACTQ_NAME, "cvt=hw", p->arch, &p->quant);
  for (int i = 0; s == SK_OK && i < BFP8_CFGS; i++) {
    if (i > bfp8_regime(caps->max_m)) break;
    gemm_config(SK_GEMM_BLOCK_FP8, (int)caps->out, bfp8_regime_m[i], caps->n, caps->k, p->arch, &p->cfg[i]);
    s = resolve_cfg(BFP8_OP, &p->cfg[i], p->arch, &p->kern[i]);
  }
  if (s == SK_OK) {
    const int64_t m = caps->max_m, k = caps->k;
    p->r_codes = sk_scratch_add(&p->scratch, (size_t)(m * k));
    p->r_scales = sk_scratch_add(&p->scratch, (size_t)(m * (k / 128)) * 4);
    p->r_ws = sk_scratch_add_counters(&p->scratch, sk_gemm_workspace_bytes(SK_GEMM_BLOCK_FP8, m < 16 ? m : 16, caps->n, k));
    if (p->r_codes < 0 || p->r_scales < 0 || p->r_ws < 0) s = SK_ERR_INTERNAL;
  }
  if (s != SK_OK) {
    free(p);
    return s;
  }
  cJSON *j = cJSON_CreateObject();
  if (j) {
    cJSON_AddNumberToObject(j, "n", (double)caps->n);
    cJSON_AddNumberToObject(j, "k", (double)caps->k);
    cJSON_AddNumberToObject(j, "max_m", (double)caps->max_m);
    cJSON_AddStringToObject(j, "out", out_names[caps->out]);
    sk_warmup_note_op(BFP8_OP, j);
    cJSON_Delete(j);
  }
  *out = p;
  return SK_OK;
}

SK_API sk_status sk_block_fp8_linear_scratch_spec(const sk_block_fp8_linear_plan *p, sk_scratch_spec *spec) {
  if (!p || !spec) return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP " scratch_spec: NULL argument");
  *spec = sk_scratch_spec_of(&p->scratch);
  return SK_OK;
}

SK_API void sk_block_fp8_linear_plan_destroy(sk_block_fp8_linear_plan *p) { free(p); }

/* Binding: ptr 0 x, 1 codes, 2 scales, 3 w codes, 4 w scales, 5 out, 6 decode partials,
 * 7 decode tile counters (NULL when the grid does not split tiles);
 * dim 0 M, 1 regime, 2 decode CTAs or tiled M blocks. */
SK_API sk_status sk_block_fp8_linear_bind(const sk_block_fp8_linear_plan *p, const DLTensor *x, const DLTensor *w_codes,
                                          const DLTensor *w_scales, const DLTensor *out, void *scratch,
                                          size_t scratch_bytes, sk_binding *binding) {
  if (!p || !binding) return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP " bind: plan or binding is NULL");
  const int64_t n = p->caps.n, k = p->caps.k;
  sk_binding b;
  sk_binding_init(&b, p);
  sk_tensor_spec xs = {"x", SK_DL_BF16, 2, {-1, k}, 16};
  SK_TRY(sk_check_tensor(BFP8_OP " bind", x, &xs, &b.ptr[0]));
  const int64_t m = x->shape[0];
  if (m < 1 || m > p->caps.max_m)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP " bind: x has %lld rows; the plan takes 1..%lld (max_m)",
                        (long long)m, (long long)p->caps.max_m);
  sk_tensor_spec wc = {"w_codes", SK_DL_U8, 2, {n, k}, 16}, ws = {"w_scales", SK_DL_FP32, 2, {sk_cdiv(n, 128), k / 128}, 4};
  SK_TRY(sk_check_tensor(BFP8_OP " bind", w_codes, &wc, &b.ptr[3]));
  SK_TRY(sk_check_tensor(BFP8_OP " bind", w_scales, &ws, &b.ptr[4]));
  static const DLDataType outs[3] = {{kDLBfloat, 16, 1}, {kDLFloat, 16, 1}, {kDLFloat, 32, 1}};
  sk_tensor_spec os = {"out", outs[p->caps.out], 2, {m, n}, p->caps.out == SK_DTYPE_FP32 ? 4 : 2};
  SK_TRY(sk_check_tensor(BFP8_OP " bind", out, &os, &b.ptr[5]));
  void *views[8] = {0};
  SK_TRY(sk_scratch_bind(BFP8_OP " bind", &p->scratch, scratch, scratch_bytes, views));
  b.ptr[1] = views[p->r_codes];
  b.ptr[2] = views[p->r_scales];
  b.dim[0] = m;
  b.dim[1] = bfp8_regime(m);
  /* The GEMM's launch geometry is fixed by M: decode CTAs and workspace views, or the tiled grid's
   * M blocks, so run only launches. */
  const gemm_cfg *cfg = &p->cfg[b.dim[1]];
  if (path_is_decode(cfg->path)) {
    const decode_launch d =
        decode_launch_for(SK_GEMM_BLOCK_FP8, m, n, k, cfg_decode_tiling(cfg), views[p->r_ws], p->scratch.size[p->r_ws]);
    b.dim[2] = d.ctas;
    b.ptr[6] = d.partials;
    b.ptr[7] = d.counters;
  } else {
    b.dim[2] = sk_cdiv(m, cfg->bm);
  }
  *binding = b;
  return SK_OK;
}

SK_API sk_status sk_block_fp8_linear_run(const sk_block_fp8_linear_plan *p, const sk_binding *b, void *stream) {
  if (SK_UNLIKELY(!p)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, BFP8_OP " run: plan is NULL");
  SK_TRY(sk_binding_check(BFP8_OP, b, p));
  const void *x = b->ptr[0];
  void *codes = b->ptr[1], *scales = b->ptr[2];
  int m = (int)b->dim[0], k = (int)p->caps.k;
  void *qargs[] = {(void *)&x, &m, &k, &codes, &scales};
  SK_TRY(sk_kernel_launch_ex(p->quant, (sk_dim3){(unsigned)sk_cdiv((int64_t)m * k, 2048), 1, 1}, (sk_dim3){256, 1, 1},
                             0, stream, qargs, SK_LAUNCH_OVERLAP_PREVIOUS));
  mm_args a = {codes, scales, b->ptr[3], b->ptr[4], NULL, b->ptr[5], m, p->caps.n, k, (int)p->caps.out};
  const int regime = (int)b->dim[1];
  gemm_cfg cfg = p->cfg[regime];
  if (path_is_decode(cfg.path)) {
    const decode_launch d = {b->dim[2], b->ptr[6], b->ptr[7]};
    return launch_decode(p->kern[regime], &cfg, &a, &d, stream);
  }
  cfg.grid.y = (unsigned)b->dim[2];
  return launch_tiled(p->kern[regime], &cfg, &a, stream);
}

static sk_status bfp8_requests(const cJSON *j, const char *arch, sk_request_list *out) {
  static const char *const fields[] = {"n", "k", "max_m", "out", NULL};
  SK_TRY(sk_json_check_fields(j, "caps", fields));
  const cJSON *nj = cJSON_GetObjectItemCaseSensitive(j, "n"), *kj = cJSON_GetObjectItemCaseSensitive(j, "k"),
              *mj = cJSON_GetObjectItemCaseSensitive(j, "max_m"), *oj = cJSON_GetObjectItemCaseSensitive(j, "out");
  if (!cJSON_IsNumber(nj) || !(nj->valuedouble >= 1 && nj->valuedouble < 2147483648.0))
    return sk_set_error(SK_ERR_MANIFEST, "caps.n: expected a whole number in [1, 2^31)");
  if (!cJSON_IsNumber(kj) || !(kj->valuedouble >= 128 && kj->valuedouble <= 1073741824.0) || fmod(kj->valuedouble, 128) != 0)
    return sk_set_error(SK_ERR_MANIFEST, "caps.k: expected a positive multiple of 128");
  if (!cJSON_IsNumber(mj) || !(mj->valuedouble >= 1 && mj->valuedouble < 17179869184.0))
    return sk_set_error(SK_ERR_MANIFEST, "caps.max_m: expected a whole number >= 1");
  int o = 0;
  if (oj) {
    o = -1;
    for (int i = 0; cJSON_IsString(oj) && i < 3; i++)
      if (!strcmp(oj->valuestring, out_names[i])) o = i;
    if (o < 0) return sk_set_error(SK_ERR_MANIFEST, "caps.out: expected bf16, fp16 or fp32");
  }
  /* then plan_create's rules, refused as a manifest error (a bad override keeps its own status) */
  SK_TRY(check_env_overrides());
  const sk_block_fp8_linear_caps caps = {(int64_t)nj->valuedouble, (int64_t)kj->valuedouble, (int64_t)mj->valuedouble,
                                         (sk_dtype)o, arch};
  if (bfp8_caps_check(&caps) != SK_OK) return sk_set_error(SK_ERR_MANIFEST, "caps: %s", sk_last_error_message());
  sk_kernel_request q = {BFP8_OP, ACTQ_SOURCE, ACTQ_NAME, "cvt=hw", arch, NULL, 0, 0};
  SK_TRY(sk_request_list_add(out, &q));
  for (int i = 0; i <= bfp8_regime((int64_t)mj->valuedouble); i++) {
    gemm_cfg cfg;
    gemm_config(SK_GEMM_BLOCK_FP8, o, bfp8_regime_m[i], (int64_t)nj->valuedouble, (int64_t)kj->valuedouble, arch, &cfg);
    SK_TRY(add_cfg_request(BFP8_OP, &cfg, arch, out));
  }
  return SK_OK;
}

static bool bfp8_supported(const char *arch) { return sk_block_fp8_linear_is_supported(arch); }

const sk_op_desc sk_op_desc_gemm_block_fp8_linear = {
    {BFP8_OP, SK_OP_PLANNED, "DeepSeek-V3 FP8 linear: BF16 x re-quantized to 1x128 E4M3 blocks x 128x128-scaled E4M3 W",
     "sm_89+,sm_90a,sm_120a,sm_121a"},
    bfp8_supported,
    bfp8_requests,
};
