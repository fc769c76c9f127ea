/* ops/gemm/select.c - the gemm kernel configuration: decode tiling and grid, the tiled / SM120
 * tile heuristics, the per-arch constants, the SPARKINFER_GEMM_* overrides and the regimes a plan
 * resolves. A pure function of (recipe, output type, M, N, K, arch properties, overrides):
 * plans, manifests, sk_gemm_describe and the CPU tests all call it. Kernels and launch
 * contracts: ops/gemm/gemv_decode.cuh (M <= 16), mma_tiled.cuh (M > 16), sm120_blockscaled.cuh. */
#include <stdlib.h>
#include <string.h>

#include "decode_schedule.cuh" /* plain C11 as well: the decode grid */
#include "embedded.h"
#include "gemm_host.h"
#include "sm120_layout.cuh"    /* plain C11 as well: the SM120 smem formula */
#include "tiled_layout.cuh"    /* plain C11 as well: the tiled smem formula */

#define DECODE_SOURCE "gemm/gemv_decode.cuh"
#define TILED_SOURCE "gemm/mma_tiled.cuh"
#define SM120_SOURCE "gemm/sm120_blockscaled.cuh"
/* gemm.mxfp8_linear quantizes its BF16 tokens inside the decode kernel up to this M when
 * SPARKINFER_GEMM_LINEAR_FUSED is on (the arch table's default, or the variable). */
#define LINEAR_FUSED_MAX_M 8

/* ---- per-arch constants ---------------------------------------------------------------------
 * Everything selection takes from the arch besides sk_arch_props (SM count, shared memory per
 * block: runtime/arch.c). A plan uses the last row whose cc is at most its arch's. Each row says
 * whether its values were measured (on the H200, the one GPU this project measures on) or derived
 * from the vendor's specifications. Every configuration is also checked against the arch's shared
 * memory per block (gemm_cfg_check_smem), and the CPU test (tests/test_gemm_ops.c) pins the
 * kernels each arch table device gets. */
static const gemm_arch_row arch_rows[] = {
    /* sm_89 .. sm_100 - measured (H200): split-K grids aim at 2 CTAs per SM; no SM120
     * instructions; quantize + mm beats the fused mxfp8_linear decode kernel (that kernel
     * quantizes the tokens again for every weight tile), so fusion is off. */
    {89, 2, {0, 0, 0}, 0},
    /* sm_120 / sm_121 - derived (spec: 99 KB of shared memory per block): the SM120 kernel's
     * stages fill it (FP4 4 x 18 KB at 128-row tiles; MXFP8 3 x 33 KB, exactly 99 KB); the
     * split-K target and the fusion default are the H200's (no SM120 measurement). */
    {120, 2, {4, 4, 3}, 0},
};

const gemm_arch_row *gemm_arch_row_for(const char *arch) {
  const int cc = sk_arch_number(arch);
  const gemm_arch_row *row = &arch_rows[0];
  for (size_t i = 0; i < sizeof arch_rows / sizeof arch_rows[0]; i++)
    if (arch_rows[i].cc <= cc) row = &arch_rows[i];
  return row;
}

const char *const gemm_recipe_names[5] = {"nvfp4", "mxfp4", "mxfp8", "block_fp8", "tensor_fp8"};
const char *const gemm_out_names[3] = {"bf16", "fp16", "fp32"};

bool gemm_recipe_valid(int r) { return r >= SK_GEMM_NVFP4 && r <= SK_GEMM_TENSOR_FP8; }
bool gemm_recipe_fp4(int r) { return r == SK_GEMM_NVFP4 || r == SK_GEMM_MXFP4; }
int64_t gemm_scale_vec(int r) { return r == SK_GEMM_NVFP4 ? 16 : r <= SK_GEMM_MXFP8 ? 32 : 128; }
static int64_t step_k(void) { return 128; } /* gemv_decode DecodeStep::kStepK */

bool gemm_weight_shape_fits(int64_t n, int64_t k) {
  return n >= 1 && n <= INT32_MAX - 256 && k >= 128 && k % 128 == 0 && k <= ((int64_t)1 << 30) &&
         (n / 16 + 4) * (k / 128) < ((int64_t)1 << 31);
}

/* ---- overrides -------------------------------------------------------------------------------- */

static bool parse_int_field(const char *f, int lo, int hi, int *out) {
  char *end;
  const long x = strtol(f, &end, 10);
  if (!*f || *end || x < lo || x > hi) return false;
  *out = (int)x;
  return true;
}

/* SPARKINFER_GEMM_DECODE="ROW_TILES,WARPS,CTAS_PER_SM[,SCHEDULE[,ROW_GROUPS]]" (docs/env.md). */
static sk_status decode_override(decode_cfg *out) {
  *out = (decode_cfg){0, 4, 0, SCHEDULE_AUTO, 0};
  const char *v = sk_tune_str("SPARKINFER_GEMM_DECODE");
  if (!v) return SK_OK;
  decode_cfg d = {0, 0, 0, SCHEDULE_AUTO, 0};
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
  if (!ok)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "SPARKINFER_GEMM_DECODE=%.64s: expected ROW_TILES,WARPS,CTAS_PER_SM[,auto|streamk|splitk[,ROW_GROUPS]]:"
                        " ROW_TILES 0,1,2,4; 1..8 warps; 0..32 CTAs/SM; ROW_GROUPS 0 or a divisor of WARPS, <= 2 WARPS / "
                        "ROW_TILES",
                        v);
  d.schedule = !strcmp(schedule, "splitk") ? SCHEDULE_SPLITK : !strcmp(schedule, "streamk") ? SCHEDULE_STREAMK : SCHEDULE_AUTO;
  *out = d;
  return SK_OK;
}

/* SPARKINFER_GEMM_PREFILL_TILE="BM,BN,WARPS_M,WARPS_N,STAGES". */
static sk_status tile_override(tile_cfg *out) {
  *out = (tile_cfg){0};
  const char *v = sk_tune_str("SPARKINFER_GEMM_PREFILL_TILE");
  if (!v) return SK_OK;
  tile_cfg t = {0, 0, 128, 0, 0, 0};
  char extra;
  bool ok = sscanf(v, "%d,%d,%d,%d,%d%c", &t.bm, &t.bn, &t.wm, &t.wn, &t.stages, &extra) == 5;
  ok = ok && (t.bm == 32 || t.bm == 64 || t.bm == 128) && (t.bn == 32 || t.bn == 64 || t.bn == 128);
  ok = ok && t.wm >= 1 && t.wn >= 1 && t.bm % t.wm == 0 && t.bn % t.wn == 0 && (t.bm / t.wm) % 16 == 0 &&
       (t.bn / t.wn) % 8 == 0 && t.wm * t.wn <= 16 && t.stages >= 2 && t.stages <= 8;
  if (!ok)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "SPARKINFER_GEMM_PREFILL_TILE=%.64s: expected BM,BN,WARPS_M,WARPS_N,STAGES with BM, BN in "
                        "{32,64,128}, BM/WARPS_M a multiple of 16, BN/WARPS_N of 8, 2..8 stages",
                        v);
  *out = t;
  return SK_OK;
}

sk_status gemm_tuning_read(const sk_arch_props *props, gemm_tuning *t) {
  memset(t, 0, sizeof *t);
  const gemm_arch_row *row = gemm_arch_row_for(props->arch);
  t->sms = props->sm_count > 0 ? props->sm_count : 128;
  t->smem_per_block = props->smem_per_block;
  t->splitk_ctas_per_sm = row->splitk_ctas_per_sm;
  if (sk_arch_is_sm120(props->arch)) memcpy(t->sm120_stages, row->sm120_stages, sizeof t->sm120_stages);
  SK_TRY(decode_override(&t->decode));
  SK_TRY(tile_override(&t->tile));
  return sk_tune_flag("SPARKINFER_GEMM_LINEAR_FUSED", row->linear_fused, &t->linear_fused);
}

/* ---- decode ----------------------------------------------------------------------------------- */

/* Weight rows per decode tile are 16 * this. 1 (16-row tiles) on small layers (N * K <= 2^24
 * weights, every recipe); for tensor_fp8 up to N = 16384, and beyond it at M > 8; for block_fp8
 * up to N = 16384 at M <= 8; for mxfp8 at M <= 8; for nvfp4 at M > 8 up to N * K = 2^26. Else 2.
 * 16-row tiles win where the resident CTAs get whole 16-row tiles instead of split 32-row ones;
 * they lose where enough 32-row tiles exist already, and for FP4 at M <= 8 on large layers.
 * Chosen on the H200; a function of recipe, N, K and token tiles only. */
#define DECODE_ONE_ROW_TILE_MAX_N 16384
#define DECODE_SMALL_LAYER_MAX_NK ((int64_t)1 << 24)
#define DECODE_NVFP4_16_TOKENS_ONE_ROW_TILE_MAX_NK ((int64_t)1 << 26)
static int decode_row_tiles(const gemm_tuning *t, int r, int token_tiles, int64_t n, int64_t k) {
  if (t->decode.row_tiles) return t->decode.row_tiles;
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

/* Row groups of a decode tile (gemv_decode's ROW_GROUPS). 1: the warps of a CTA split the tile's
 * K steps; 2: two groups of 16 * row_tiles rows, each split between two warps. At M > 8 on
 * 2^24 < N * K: 2 for mxfp8 and mxfp4 with N <= 16384, and for tensor_fp8 with N > 16384: at 16
 * tokens a warp loads as many token bytes as weight bytes, and the two warps of a group load the
 * same ones (L1 serves the second). */
#define DECODE_ROW_GROUPS_MAX_N 16384
static int decode_row_groups(const gemm_tuning *t, int r, int token_tiles, int64_t n, int64_t k, int row_tiles) {
  int groups = t->decode.row_groups;
  if (!groups) {
    const bool mx = r == SK_GEMM_MXFP8 || r == SK_GEMM_MXFP4;
    const bool shared = mx ? n <= DECODE_ROW_GROUPS_MAX_N : r == SK_GEMM_TENSOR_FP8 && n > DECODE_ROW_GROUPS_MAX_N;
    groups = shared && token_tiles == 2 && t->decode.warps % 2 == 0 && n * k > DECODE_SMALL_LAYER_MAX_NK ? 2 : 1;
  }
  /* block_fp8: a tile's rows must lie in one 128-row weight scale block (the kernel asserts it) */
  if (r == SK_GEMM_BLOCK_FP8 && 128 % sk_decode_tile_rows(row_tiles, groups)) groups = 1;
  return groups;
}

/* The decode grid: `ctas` CTAs over the tiles x steps work units; `may_split`: some tile may be
 * shared by CTAs (then partials and counters are needed). */
typedef struct decode_grid {
  int64_t tiles, ctas;
  bool may_split;
  int64_t rows_per_tile;
} decode_grid;

static decode_grid decode_schedule(const gemm_tuning *t, int r, int token_tiles, int64_t n, int64_t k, int row_tiles,
                                   int groups) {
  const decode_cfg d = t->decode;
  const int64_t rows = sk_decode_tile_rows(row_tiles, groups);
  const int64_t tiles = sk_decode_tiles((int)n, r, row_tiles, groups), sms = t->sms, steps = k / step_k();
  /* split-K: whole tiles, K split until the grid has the target CTAs per SM */
  const int64_t target = (d.ctas_per_sm && d.schedule == SCHEDULE_SPLITK ? d.ctas_per_sm : t->splitk_ctas_per_sm) * sms;
  int64_t splits = tiles >= target ? 1 : sk_cdiv(target, tiles);
  if (splits > 16) splits = 16;
  if (splits > steps / 4) splits = steps / 4; /* >= 4 steps per split (one per warp of a 4-warp block) */
  if (splits < 1) splits = 1;
  /* stream-K: the resident CTAs share the (tile, step) units equally. auto: split-K, unless it
   * splits K and its grid is more than one wave of resident CTAs (there stream-K wins). */
  const int64_t per_sm = d.ctas_per_sm ? d.ctas_per_sm : sk_decode_ctas_per_sm(r, token_tiles, d.warps, row_tiles);
  const int64_t resident = per_sm * sms;
  const bool streamk = d.schedule == SCHEDULE_STREAMK || (d.schedule == SCHEDULE_AUTO && splits > 1 && tiles * splits > resident);
  int64_t ctas = tiles * splits;
  if (streamk) {
    const int64_t least = tiles < resident ? tiles : resident;
    ctas = resident;
    const int64_t per_step = d.warps / groups; /* CTAs with a step for every warp */
    if (ctas > tiles * steps / per_step) ctas = tiles * steps / per_step;
    if (ctas > 16 * tiles) ctas = 16 * tiles; /* <= 17 CTAs share a tile */
    if (ctas < least) ctas = least;           /* fewer steps than warps: still a tile per CTA */
  }
  return (decode_grid){tiles, ctas, sk_decode_may_split_tiles((int)tiles, (int)steps, (int)ctas) != 0, rows};
}

static size_t decode_counters_bytes(int64_t tiles) {
  return ((size_t)tiles * 4 + GEMM_WS_ALIGN - 1) / GEMM_WS_ALIGN * GEMM_WS_ALIGN;
}

/* Workspace of a grid of `ctas` CTAs at M tokens: tile counters, then 2 partial slots of
 * M x (rows per tile) floats per CTA. */
static size_t decode_workspace_need(int64_t tiles, int64_t ctas, int64_t m, int64_t rows_per_tile) {
  return decode_counters_bytes(tiles) + (size_t)(2 * ctas * m * rows_per_tile) * sizeof(float);
}

/* Sized for the larger grid of the two token-tile variants, so that it never shrinks as M grows
 * (a buffer sized for some M serves every smaller one). */
size_t gemm_workspace_need(const gemm_tuning *t, int r, int64_t m, int64_t n, int64_t k) {
  if (!gemm_recipe_valid(r) || m < 1 || m > GEMM_DECODE_MAX_M || !gemm_weight_shape_fits(n, k)) return 0;
  size_t need = 0;
  for (int tt = 1; tt <= 2; tt++) {
    const int rt = decode_row_tiles(t, r, tt, n, k), rg = decode_row_groups(t, r, tt, n, k, rt);
    const decode_grid g = decode_schedule(t, r, tt, n, k, rt, rg);
    const size_t w = g.may_split ? decode_workspace_need(g.tiles, g.ctas, m, g.rows_per_tile) : 0;
    if (w > need) need = w;
  }
  return need;
}

static decode_grid cfg_decode_grid(const gemm_tuning *t, const gemm_cfg *c, int64_t m, int64_t n, int64_t k) {
  return decode_schedule(t, c->recipe, m <= 8 ? 1 : 2, n, k, c->tmpl[2], c->tmpl[3]);
}

int64_t gemm_decode_ctas(const gemm_tuning *t, const gemm_cfg *c, int64_t m, int64_t n, int64_t k) {
  return cfg_decode_grid(t, c, m, n, k).ctas;
}

decode_launch gemm_decode_launch(const gemm_tuning *t, const gemm_cfg *c, int64_t m, int64_t n, int64_t k, void *workspace,
                                 size_t ws_bytes) {
  const decode_grid g = cfg_decode_grid(t, c, m, n, k);
  if (!g.may_split) return (decode_launch){g.ctas, NULL, NULL};
  if (!workspace || ws_bytes < decode_workspace_need(g.tiles, g.ctas, m, g.rows_per_tile) ||
      (uintptr_t)workspace % GEMM_WS_ALIGN)
    return (decode_launch){g.tiles, NULL, NULL};
  return (decode_launch){g.ctas, (char *)workspace + decode_counters_bytes(g.tiles), workspace};
}

/* ---- tiled ------------------------------------------------------------------------------------ */

/* The heuristic of ops/gemm/gemm.md (Prefill kernel, tile heuristic). 128x128 tiles take 2x2
 * warps (64x64 warp tiles, half the fragment conversions per MMA) for tensor_fp8 and the FP4
 * recipes; block_fp8 and mxfp8 keep 2x4 (their per-block scale folds want the registers). */
static tile_cfg tiled_config(const gemm_tuning *t, int r, int64_t m, int64_t n) {
  if (t->tile.bm) return t->tile;
  const int64_t sms = t->sms;
  if (m <= 128) {
    if (sk_cdiv(n, 128) >= sms) return (tile_cfg){64, 128, 128, 1, 4, 3};
    return (tile_cfg){64, 64, 128, 2, 2, 4};
  }
  const bool wide_warps = r == SK_GEMM_TENSOR_FP8 || r == SK_GEMM_NVFP4 || r == SK_GEMM_MXFP4;
  if (sk_cdiv(m, 128) * sk_cdiv(n, 128) >= sms) return (tile_cfg){128, 128, 128, 2, wide_warps ? 2 : 4, 3};
  return (tile_cfg){128, 64, 128, 2, 2, 3};
}

void gemm_config(const gemm_tuning *t, int r, int out, int64_t m, int64_t n, int64_t k, gemm_cfg *c) {
  *c = (gemm_cfg){.recipe = r, .out = out};
  if (m <= GEMM_DECODE_MAX_M) {
    const int token_tiles = m <= 8 ? 1 : 2;
    const int rt = decode_row_tiles(t, r, token_tiles, n, k), rg = decode_row_groups(t, r, token_tiles, n, k, rt);
    c->path = PATH_DECODE;
    c->tmpl[0] = token_tiles; /* of 8 tokens */
    c->tmpl[1] = t->decode.warps;
    c->tmpl[2] = rt;
    c->tmpl[3] = rg;
    c->grid = (sk_dim3){(unsigned)sk_decode_tiles((int)n, r, rt, rg), 1, 1};
    c->block = (sk_dim3){32u * (unsigned)t->decode.warps, 1, 1};
  } else if (r <= SK_GEMM_MXFP8 && t->sm120_stages[r]) {
    const int bm = m <= 128 ? 64 : 128, wm = bm == 64 ? 1 : 2, stages = t->sm120_stages[r];
    c->path = PATH_SM120;
    c->tmpl[0] = bm;
    c->tmpl[1] = wm;
    c->tmpl[2] = stages;
    c->grid = (sk_dim3){(unsigned)sk_cdiv(n, 128), (unsigned)sk_cdiv(m, bm), 1};
    c->block = (sk_dim3){32u * (unsigned)(wm * 4), 1, 1};
    c->smem = (unsigned)sk_sm120_smem_bytes(r, bm, 128, stages);
    c->bm = bm;
  } else {
    const tile_cfg tc = tiled_config(t, r, m, n);
    c->path = PATH_TILED;
    memcpy(c->tmpl, (const int[6]){tc.bm, tc.bn, tc.bk, tc.wm, tc.wn, tc.stages}, sizeof c->tmpl);
    c->grid = (sk_dim3){(unsigned)sk_cdiv(n, tc.bn), (unsigned)sk_cdiv(m, tc.bm), 1};
    c->block = (sk_dim3){32u * (unsigned)(tc.wm * tc.wn), 1, 1};
    c->smem = (unsigned)sk_tiled_smem_bytes(r, tc.bm, tc.bn, tc.stages); /* BK is 128 */
    c->bm = tc.bm;
  }
}

bool gemm_linear_fuses(const gemm_tuning *t, int64_t m) { return m <= LINEAR_FUSED_MAX_M && t->linear_fused; }

void gemm_linear_config(const gemm_tuning *t, int out, int64_t m, int64_t n, int64_t k, gemm_cfg *c) {
  gemm_config(t, SK_GEMM_MXFP8, out, m, n, k, c);
  /* the fused kernel has mm's geometry only where mm's warps split K */
  if (c->path == PATH_DECODE && c->tmpl[3] == 1 && gemm_linear_fuses(t, m)) c->path = PATH_FUSED;
}

sk_status gemm_cfg_check_smem(const gemm_tuning *t, const gemm_cfg *c, const char *op) {
  if (c->smem <= t->smem_per_block) return SK_OK;
  char name[160], params[128];
  gemm_cfg_strings(c, name, params);
  if (c->path == PATH_TILED && t->tile.bm)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "%s: SPARKINFER_GEMM_PREFILL_TILE=%d,%d,%d,%d,%d needs %u bytes of shared memory per block; the "
                        "arch allows %u",
                        op, t->tile.bm, t->tile.bn, t->tile.wm, t->tile.wn, t->tile.stages, c->smem, t->smem_per_block);
  return sk_set_error(SK_ERR_UNSUPPORTED, "%s: %s needs %u bytes of shared memory per block; the arch allows %u", op, params,
                      c->smem, t->smem_per_block);
}

static const char *const path_sources[] = {DECODE_SOURCE, TILED_SOURCE, SM120_SOURCE, DECODE_SOURCE};
const char *gemm_cfg_source(const gemm_cfg *c) { return path_sources[c->path]; }

void gemm_cfg_strings(const gemm_cfg *c, char name[160], char params[128]) {
  const int *t = c->tmpl;
  const char *rn = gemm_recipe_names[c->recipe], *on = gemm_out_names[c->out];
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
    snprintf(name, 160, "sk::gemm::mma_tiled<%d, %d, %d, %d, %d, %d, %d, %d>", c->recipe, c->out, t[0], t[1], t[2], t[3],
             t[4], t[5]);
    snprintf(params, 128, "recipe=%s out=%s tile=%dx%dx%d stages=%d", rn, on, t[0], t[1], t[2], t[5]);
  }
}

static bool cfg_equal(const gemm_cfg *a, const gemm_cfg *b) {
  return a->path == b->path && a->recipe == b->recipe && a->out == b->out && !memcmp(a->tmpl, b->tmpl, sizeof a->tmpl);
}

/* The breakpoints where a configuration may change: 8 and 16 (decode token tiles), 128 (64- to
 * 128-row tiles), and where the tiled grid of 128-row tiles reaches one wave. Regimes are the
 * ranges between them whose configurations differ. */
sk_status gemm_plan_regimes(sk_plan *p, const gemm_tuning *t, int recipe, int out, int64_t n, int64_t k, int64_t max_m,
                            bool linear, size_t first_slot, gemm_regimes *g) {
  const int64_t wave_m = (sk_cdiv(t->sms, sk_cdiv(n, 128)) - 1) * 128 + 1;
  int64_t starts[6] = {1, 9, 17, 129, wave_m > 129 ? wave_m : 129, 0};
  int64_t ends[6];
  int nstarts = 5;
  for (int i = 0; i < nstarts; i++) ends[i] = i + 1 < nstarts ? starts[i + 1] - 1 : INT32_MAX;
  memset(g, 0, sizeof *g);
  for (int i = 0; i < nstarts && starts[i] <= max_m; i++) {
    if (ends[i] < starts[i]) continue;
    gemm_cfg c;
    if (linear) gemm_linear_config(t, out, starts[i], n, k, &c);
    else gemm_config(t, recipe, out, starts[i], n, k, &c);
    SK_TRY(gemm_cfg_check_smem(t, &c, p->def->info.name));
    const int64_t hi = ends[i] < max_m ? ends[i] : max_m;
    if (g->count && cfg_equal(&g->cfg[g->count - 1], &c)) {
      g->hi[g->count - 1] = hi;
      continue;
    }
    g->cfg[g->count] = c;
    g->hi[g->count] = hi;
    g->count++;
  }
  for (int i = 0; i < g->count; i++) {
    char name[160], params[128];
    gemm_cfg_strings(&g->cfg[i], name, params);
    const char *src = gemm_cfg_source(&g->cfg[i]);
    if (!sk_find_embedded_source(src))
      return sk_set_error(SK_ERR_UNSUPPORTED, "%s: this build lacks %s (needed for %s)", p->def->info.name, src, params);
    SK_TRY(sk_plan_set_kernel(p, first_slot + (size_t)i, src, name, params));
  }
  return SK_OK;
}

/* ---- launches --------------------------------------------------------------------------------- */

sk_status gemm_bind_symbols(sk_binding *b, const gemm_cfg *cfg, int regime, int64_t decode_ctas, unsigned grid_y) {
  SK_TRY(sk_binding_set_symbol(b, "REGIME", regime));
  return sk_binding_set_symbol(b, "CTAS", gemm_path_is_decode(cfg->path) ? decode_ctas : (int64_t)cfg->grid.x * grid_y);
}

sk_status gemm_launch_decode(sk_kernel *kern, const gemm_cfg *cfg, const gemm_args *x, const decode_launch *d, void *stream) {
  const void *ac = x->ac, *as = x->as, *bc = x->bc, *bs = x->bs, *alpha = x->alpha;
  void *c = x->c, *partials = d->partials, *counters = d->counters;
  int m = (int)x->m, n = (int)x->n, k = (int)x->k, ldc = (int)x->ldc;
  void *args[] = {(void *)&ac, (void *)&as, (void *)&bc, (void *)&bs, (void *)&alpha, &c, &m, &n, &k, &ldc, &partials, &counters};
  sk_dim3 grid = cfg->grid;
  grid.x = (unsigned)d->ctas;
  /* Overlapped with the previous kernel's tail: the decode kernels wait for it on the device. */
  return sk_kernel_launch_ex(kern, grid, cfg->block, 0, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS);
}

sk_status gemm_launch_tiled(sk_kernel *kern, const gemm_cfg *cfg, const gemm_args *x, unsigned grid_y, void *stream) {
  const void *ac = x->ac, *as = x->as, *bc = x->bc, *bs = x->bs, *alpha = x->alpha;
  void *c = x->c;
  int m = (int)x->m, n = (int)x->n, k = (int)x->k, ldc = (int)x->ldc;
  void *args[] = {(void *)&ac, (void *)&as, (void *)&bc, (void *)&bs, (void *)&alpha, &c, &m, &n, &k, &ldc};
  sk_dim3 grid = cfg->grid;
  grid.y = grid_y;
  return sk_kernel_launch(kern, grid, cfg->block, cfg->smem, stream, args);
}
