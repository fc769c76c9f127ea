/* ops/gemm/gemm_host.h - what the gemm ops' host files share: the kernel configuration (a pure
 * function of recipe, output type, shape, arch properties and the SPARKINFER_GEMM_* overrides;
 * select.c), the regimes a plan resolves (one configuration per range of M), and the launches. */
#ifndef SK_GEMM_HOST_H
#define SK_GEMM_HOST_H

#include "op.h"
#include "sparkinfer/gemm.h"

#define GEMM_DECODE_MAX_M 16
#define GEMM_WS_ALIGN 256

/* Decode kernel configuration (SPARKINFER_GEMM_DECODE, docs/env.md); 0 fields: the heuristics. */
enum { SCHEDULE_AUTO, SCHEDULE_STREAMK, SCHEDULE_SPLITK };
typedef struct decode_cfg {
  int row_tiles, warps, ctas_per_sm, schedule, row_groups;
} decode_cfg;
/* Tiled kernel tile (SPARKINFER_GEMM_PREFILL_TILE); bm == 0: the heuristic. */
typedef struct tile_cfg {
  int bm, bn, bk, wm, wn, stages;
} tile_cfg;

/* The arch-dependent constants of the selection: one row of select.c's table per arch family. */
typedef struct gemm_arch_row {
  int cc;                 /* first compute capability of the row */
  int splitk_ctas_per_sm; /* decode split-K grid: CTAs per SM it aims at */
  int sm120_stages[3];    /* SM120 block-scaled kernel stages for nvfp4, mxfp4, mxfp8; 0: no such path */
  int linear_fused;       /* SPARKINFER_GEMM_LINEAR_FUSED's default */
} gemm_arch_row;
/* The row for `arch` (the last one whose cc is at most the arch's). */
const gemm_arch_row *gemm_arch_row_for(const char *arch);

/* Everything selection reads besides the problem: the arch's properties and constants, and the
 * overrides. */
typedef struct gemm_tuning {
  decode_cfg decode;
  tile_cfg tile;
  int linear_fused;        /* gemm.mxfp8_linear quantizes inside the decode kernel at M <= 8 */
  int sms;                 /* SM count (sk_arch_props) */
  unsigned smem_per_block; /* shared memory one block may opt in to (sk_arch_props) */
  int splitk_ctas_per_sm;  /* the arch row's */
  int sm120_stages[3];     /* the arch row's where the target has the SM120 instructions, else 0 */
} gemm_tuning;
/* Read the arch row and the overrides (SK_ERR_INVALID_ARGUMENT naming a malformed one) for
 * `props`. */
sk_status gemm_tuning_read(const sk_arch_props *props, gemm_tuning *t);

enum { PATH_DECODE = 0, PATH_TILED = 1, PATH_SM120 = 2, PATH_FUSED = 3 };

/* One kernel configuration: path, recipe, output type, template arguments and launch geometry. */
typedef struct gemm_cfg {
  int path, recipe, out;
  int tmpl[6];
  sk_dim3 grid, block;
  unsigned smem;
  int bm; /* rows of C per block (tiled and SM120 paths) */
} gemm_cfg;

bool gemm_recipe_valid(int r);
bool gemm_recipe_fp4(int r);
int64_t gemm_scale_vec(int r);
extern const char *const gemm_recipe_names[5];
extern const char *const gemm_out_names[3];

/* Weight shapes every entry point accepts: n >= 1, k a positive multiple of 128 up to 2^30, and
 * the kernels' 32-bit work counters big enough. */
#define GEMM_WEIGHT_SHAPE_RULE "N >= 1, K a positive multiple of 128 up to 2^30, N x K within 32-bit work counters"
bool gemm_weight_shape_fits(int64_t n, int64_t k);

/* The configuration for one problem (a pure function of its arguments). */
void gemm_config(const gemm_tuning *t, int recipe, int out, int64_t m, int64_t n, int64_t k, gemm_cfg *c);
/* gemm.mxfp8_linear's: mm's MXFP8 configuration, or the fused decode kernel where it applies. */
void gemm_linear_config(const gemm_tuning *t, int out, int64_t m, int64_t n, int64_t k, gemm_cfg *c);
/* SK_OK when the configuration's shared memory fits the arch (t->smem_per_block); else
 * SK_ERR_INVALID_ARGUMENT naming SPARKINFER_GEMM_PREFILL_TILE when that override chose the tile,
 * SK_ERR_UNSUPPORTED otherwise. `op` prefixes the message. */
sk_status gemm_cfg_check_smem(const gemm_tuning *t, const gemm_cfg *c, const char *op);
bool gemm_linear_fuses(const gemm_tuning *t, int64_t m);
void gemm_cfg_strings(const gemm_cfg *c, char name[160], char params[128]);
const char *gemm_cfg_source(const gemm_cfg *c);
static inline bool gemm_path_is_decode(int path) { return path == PATH_DECODE || path == PATH_FUSED; }

/* Decode launches: the grid of CTAs and the workspace views for M tokens; without a (large
 * enough, aligned) workspace a split grid falls back to a whole tile per CTA. */
typedef struct decode_launch {
  int64_t ctas;
  void *partials, *counters;
} decode_launch;
decode_launch gemm_decode_launch(const gemm_tuning *t, const gemm_cfg *c, int64_t m, int64_t n, int64_t k, void *workspace,
                                 size_t ws_bytes);
/* The CTAs the decode grid uses at M (what describe reports). */
int64_t gemm_decode_ctas(const gemm_tuning *t, const gemm_cfg *c, int64_t m, int64_t n, int64_t k);
/* Workspace bytes for M x N x K (0 when the decode grid never splits tiles or M > 16). */
size_t gemm_workspace_need(const gemm_tuning *t, int recipe, int64_t m, int64_t n, int64_t k);

/* Regimes: ranges of M with one configuration each, in increasing M. */
#define GEMM_MAX_REGIMES 6
typedef struct gemm_regimes {
  int count;
  int64_t hi[GEMM_MAX_REGIMES]; /* regime i takes M in (hi[i-1], hi[i]] */
  gemm_cfg cfg[GEMM_MAX_REGIMES];
} gemm_regimes;
/* The configurations M in 1..max_m can use (linear: gemm.mxfp8_linear's), each requested in
 * kernel slot first_slot + i. */
sk_status gemm_plan_regimes(sk_plan *p, const gemm_tuning *t, int recipe, int out, int64_t n, int64_t k, int64_t max_m,
                            bool linear, size_t first_slot, gemm_regimes *g);
static inline int gemm_regime_of(const gemm_regimes *g, int64_t m) {
  int i = 0;
  while (i + 1 < g->count && m > g->hi[i]) i++;
  return i;
}

/* The operands of one launch. */
typedef struct gemm_args {
  const void *ac, *as, *bc, *bs, *alpha;
  void *c;
  int64_t m, n, k, ldc;
} gemm_args;
/* What a bind fixed, published as binding symbols (sk_binding_symbol) for tools and tests:
 * REGIME (the kernel slot the run launches), CTAS (CTAs of the GEMM launch: the decode grid, or
 * the tiled grid's x * y). */
sk_status gemm_bind_symbols(sk_binding *b, const gemm_cfg *cfg, int regime, int64_t decode_ctas, unsigned grid_y);
sk_status gemm_launch_decode(sk_kernel *kern, const gemm_cfg *cfg, const gemm_args *x, const decode_launch *d, void *stream);
sk_status gemm_launch_tiled(sk_kernel *kern, const gemm_cfg *cfg, const gemm_args *x, unsigned grid_y, void *stream);

#endif
