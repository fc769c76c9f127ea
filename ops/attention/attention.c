/* ops/attention/attention.c - attention.paged and attention.varlen on the op layer: caps,
 * selection (tile configurations, persistent grids, budgets, scratch), tensor tables, bind (the
 * kernels' parameter block) and run (scheduler, attention, merge). Kernels and contracts:
 * attention/{schedule,attention,merge}.cuh, the shared math attention/layout.cuh;
 * ops/attention/attention.md. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "layout.cuh" /* plain C11 as well: the parameter block, scratch, configurations */
#include "op.h"
#include "sparkinfer/attention.h"

enum { K_SCHED, K_ATTN, K_ATTN_WIDE, K_MERGE, K_COUNT };
enum { P_Q, P_K, P_V, P_PT, P_SEQ, P_CUQ, P_KS, P_VS, P_SINKS, P_OUT, P_LSE, P_COUNT };
enum { V_Q, V_K, V_V, V_CUQ, V_CUK, V_SINKS, V_OUT, V_LSE, V_COUNT };
enum { ENTRY_RUN, ENTRY_REUSE }; /* "run", "reuse_schedule" */

/* Per-arch choices. The configurations come from attention/layout.cuh (chosen on an H100; every
 * one fits SM120's 99 KB per block). The persistent grid is what the occupancy API reports for the
 * device (measured); offline, resident CTAs per SM are estimated from shared memory (derived). */
#define MERGE_CTAS_PER_SM 2
#define MAX_CTAS_PER_SM 8

typedef struct attn_state {
  int paged, kv_fp8, dqk, dvo, hq, hkv, page_shift;
  sk_attn_config cfg[2];  /* [0] decode or extend, [1] the wide extend tile (tile_q 0: none) */
  unsigned smem[2];
  int ctas[2];            /* the attention kernel's persistent grid per configuration */
  int merge_ctas;
  int max_batch, max_total_q, max_total_k, max_work_items, max_partial_rows, max_pages_per_seq;
  int window_left, window_right, split;
  float sm_scale;
  unsigned sched_smem;
} attn_state;

typedef struct attn_bound {
  sk_attn_params p;
  int which; /* configuration: 0 or 1 (wide) */
} attn_bound;

static const char *type_name(sk_dtype d) { return d == SK_DTYPE_FP16 ? "__half" : "__nv_bfloat16"; }


static bool dims_supported(int dqk, int dvo) {
  return (dqk == dvo && (dqk == 64 || dqk == 128 || dqk == 256)) || (dqk == 192 && dvo == 128);
}

/* The checks both ops share. */
/* Between fields (the spine checked each field against the caps field tables below). */
static sk_status check_common(const char *op, int hq, int hkv, int dqk, int dvo, float sm_scale) {
  if (hq % hkv)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: num_heads_q = %d must be a multiple of num_heads_kv = %d", op, hq, hkv);
  if (!dims_supported(dqk, dvo))
    return sk_set_error(SK_ERR_UNSUPPORTED, "%s: head dims (%d, %d): supported (64, 64), (128, 128), (256, 256), (192, 128)",
                        op, dqk, dvo);
  if (!(sm_scale >= 0.0f) || !isfinite(sm_scale))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: sm_scale must be 0 (the default) or a positive finite number", op);
  return SK_OK;
}

static sk_status paged_check(void *caps) {
  sk_attn_paged_caps *c = caps;
  if (c->max_total_q == 0) c->max_total_q = c->max_batch;
  SK_TRY(check_common("attention.paged", c->num_heads_q, c->num_heads_kv, c->head_dim_qk, c->head_dim_vo, c->sm_scale));
  if (c->page_size < 16 || c->page_size > 128 || (c->page_size & (c->page_size - 1)))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "attention.paged: page_size = %d must be a power of two in [16, 128]",
                        c->page_size);
  if (c->mode == SK_ATTN_DECODE && c->max_total_q != c->max_batch)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "attention.paged: decode takes one token per request: max_total_q = %lld "
                        "must equal max_batch = %lld", (long long)c->max_total_q, (long long)c->max_batch);
  if (c->max_pages_per_seq * c->page_size > INT32_MAX)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "attention.paged: max_pages_per_seq = %lld must be >= 1 with at most 2^31 "
                        "keys per request", (long long)c->max_pages_per_seq);
  return SK_OK;
}

static sk_status varlen_check(void *caps) {
  sk_attn_varlen_caps *c = caps;
  if (c->max_total_k == 0) c->max_total_k = c->max_total_q;
  return check_common("attention.varlen", c->num_heads_q, c->num_heads_kv, c->head_dim_qk, c->head_dim_vo, c->sm_scale);
}

/* Resident CTAs per SM of a configuration without a GPU: what shared memory and threads allow. */
static int estimate_per_sm(const sk_arch_props *a, unsigned smem, int threads) {
  int by_smem = (int)(a->smem_per_sm / (smem + 1024u)), by_threads = 2048 / threads;
  int n = by_smem < by_threads ? by_smem : by_threads;
  return n < 1 ? 1 : n > MAX_CTAS_PER_SM ? MAX_CTAS_PER_SM : n;
}

/* Shared selection: configurations, kernels, budgets, scratch, symbols. */
static sk_status select_common(sk_plan *p, attn_state *st, sk_dtype dtype, int kind, int64_t max_items,
                               int64_t max_partial) {
  const char *op = p->def->info.name, *t = type_name(dtype);
  st->cfg[0] = sk_attn_pick_config(kind, st->dqk, st->dvo, st->kv_fp8);
  st->cfg[1] = kind == SK_ATTN_KIND_EXTEND ? sk_attn_pick_config(SK_ATTN_KIND_WIDE, st->dqk, st->dvo, st->kv_fp8)
                                           : (sk_attn_config){0, 0, 0, 0, 0};
  if (!st->cfg[0].tile_q) return sk_set_error(SK_ERR_UNSUPPORTED, "%s: no tile configuration for these head dims", op);
  char name[200], params[160];
  for (int w = 0; w < 2; w++) {
    const sk_attn_config c = st->cfg[w];
    if (!c.tile_q) continue;
    st->smem[w] = (unsigned)sk_attn_smem_bytes(st->dqk, st->dvo, st->kv_fp8, c);
    if (st->smem[w] > p->props.smem_per_block)
      return sk_set_error(SK_ERR_UNSUPPORTED, "%s: the %dx%d tile needs %u bytes of shared memory, more than %s allows", op,
                          c.tile_q, c.tile_kv, st->smem[w], p->arch);
    snprintf(name, sizeof name, "sk::attn::attention<%s, %d, %d, %d, %d, %d, %d, %d, %d, %d>", t, st->kv_fp8, st->dqk,
             st->dvo, c.tile_q, c.tile_kv, c.warps_q, c.warps_kv, c.stages, st->paged);
    snprintf(params, sizeof params, "%s q=%s kv=%s d=%d/%d tile=%dx%d", kind == SK_ATTN_KIND_DECODE ? "decode" : w ? "wide" : "extend",
             dtype == SK_DTYPE_FP16 ? "fp16" : "bf16", st->kv_fp8 ? "e4m3" : dtype == SK_DTYPE_FP16 ? "fp16" : "bf16", st->dqk,
             st->dvo, c.tile_q, c.tile_kv);
    SK_TRY(sk_plan_set_kernel(p, w ? K_ATTN_WIDE : K_ATTN, "attention/attention.cuh", name, params));
    st->ctas[w] = estimate_per_sm(&p->props, st->smem[w], sk_attn_threads(c)) * p->props.sm_count;
  }
  snprintf(name, sizeof name, "sk::attn::schedule<%d>", SK_ATTN_SCHED_THREADS);
  SK_TRY(sk_plan_set_kernel(p, K_SCHED, "attention/schedule.cuh", name, "scheduler"));
  snprintf(name, sizeof name, "sk::attn::merge<%s, %d>", t, st->dvo);
  SK_TRY(sk_plan_set_kernel(p, K_MERGE, "attention/merge.cuh", name, "split-KV merge"));
  st->merge_ctas = MERGE_CTAS_PER_SM * p->props.sm_count;
  st->sched_smem = (unsigned)sk_attn_sched_smem_bytes(st->max_batch);
  /* Budgets: every q tile of the smallest tile is an item; room for about 8 waves of splits. */
  const int group = st->hq / st->hkv, most_ctas = st->ctas[0] > st->ctas[1] ? st->ctas[0] : st->ctas[1];
  const int64_t min_items = sk_attn_min_work_items(st->max_total_q, st->max_batch, group, st->cfg[0].tile_q);
  if (max_items && max_items < min_items)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: max_work_items = %lld is below the %lld q tiles the budgets can need",
                        op, (long long)max_items, (long long)min_items);
  const int64_t split_rows = 8 * (int64_t)most_ctas / st->hkv + 64;
  st->max_work_items = (int)(max_items ? max_items : min_items + (st->split ? split_rows : 0));
  st->max_partial_rows = (int)(max_partial ? max_partial : st->split ? split_rows : 0);
  if (st->max_work_items > (1 << 26)) st->max_work_items = 1 << 26;
  const int64_t scratch = sk_attn_scratch_bytes(st->max_batch, st->max_total_q, st->max_work_items, st->max_partial_rows,
                                                st->hq, st->dvo);
  if (sk_scratch_add(&p->scratch, (size_t)scratch) < 0) return SK_ERR_INTERNAL;
  SK_TRY(sk_plan_set_symbol(p, "HQ", st->hq));
  SK_TRY(sk_plan_set_symbol(p, "HKV", st->hkv));
  SK_TRY(sk_plan_set_symbol(p, "DQK", st->dqk));
  SK_TRY(sk_plan_set_symbol(p, "DVO", st->dvo));
  SK_TRY(sk_plan_set_symbol(p, "MAX_B", st->max_batch));
  return sk_plan_set_symbol(p, "MAX_TQ", st->max_total_q);
}

static sk_status paged_select(sk_plan *p) {
  const sk_attn_paged_caps *c = SK_PLAN_CAPS(p, sk_attn_paged_caps);
  attn_state *st = SK_PLAN_STATE(p, attn_state);
  *st = (attn_state){.paged = 1, .kv_fp8 = c->kv_fp8, .dqk = c->head_dim_qk, .dvo = c->head_dim_vo, .hq = c->num_heads_q,
                     .hkv = c->num_heads_kv, .max_batch = (int)c->max_batch, .max_total_q = (int)c->max_total_q,
                     .max_pages_per_seq = (int)c->max_pages_per_seq, .window_left = c->window_left, .window_right = 0,
                     .split = c->split_kv, .sm_scale = c->sm_scale > 0 ? c->sm_scale : 1.0f / sqrtf((float)c->head_dim_qk)};
  while ((1 << st->page_shift) < c->page_size) st->page_shift++;
  SK_TRY(select_common(p, st, c->dtype, c->mode == SK_ATTN_DECODE ? SK_ATTN_KIND_DECODE : SK_ATTN_KIND_EXTEND,
                       c->max_work_items, c->max_partial_rows));
  SK_TRY(sk_plan_set_symbol(p, "PS", c->page_size));
  const uint32_t q = sk_dt_of(c->dtype);
  for (size_t e = ENTRY_RUN; e <= ENTRY_REUSE; e++) { /* both entries take the same tensors */
    sk_plan_tensor_dtypes(p, e, P_Q, q);
    sk_plan_tensor_dtypes(p, e, P_K, c->kv_fp8 ? SK_DT_U8 : q);
    sk_plan_tensor_dtypes(p, e, P_V, c->kv_fp8 ? SK_DT_U8 : q);
    if (!c->kv_fp8) {
      sk_plan_tensor_presence(p, e, P_KS, SK_TENSOR_UNUSED);
      sk_plan_tensor_presence(p, e, P_VS, SK_TENSOR_UNUSED);
    }
  }
  return SK_OK;
}

static sk_status varlen_select(sk_plan *p) {
  const sk_attn_varlen_caps *c = SK_PLAN_CAPS(p, sk_attn_varlen_caps);
  attn_state *st = SK_PLAN_STATE(p, attn_state);
  *st = (attn_state){.paged = 0, .dqk = c->head_dim_qk, .dvo = c->head_dim_vo, .hq = c->num_heads_q,
                     .hkv = c->num_heads_kv, .max_batch = (int)c->max_batch, .max_total_q = (int)c->max_total_q,
                     .max_total_k = (int)c->max_total_k, .window_left = c->window_left, .window_right = c->window_right,
                     .split = c->split_kv, .sm_scale = c->sm_scale > 0 ? c->sm_scale : 1.0f / sqrtf((float)c->head_dim_qk)};
  SK_TRY(select_common(p, st, c->dtype, SK_ATTN_KIND_EXTEND, c->max_work_items, c->max_partial_rows));
  SK_TRY(sk_plan_set_symbol(p, "MAX_TK", c->max_total_k));
  const uint32_t q = sk_dt_of(c->dtype);
  for (size_t e = ENTRY_RUN; e <= ENTRY_REUSE; e++) {
    sk_plan_tensor_dtypes(p, e, V_Q, q);
    sk_plan_tensor_dtypes(p, e, V_K, q);
    sk_plan_tensor_dtypes(p, e, V_V, q);
  }
  return SK_OK;
}

static sk_status finish(sk_plan *p) {
  attn_state *st = SK_PLAN_STATE(p, attn_state);
  for (int w = 0; w < 2; w++) {
    sk_kernel *k = sk_plan_k(p, w ? K_ATTN_WIDE : K_ATTN);
    if (!k) continue;
    SK_TRY(sk_op_allow_dynamic_smem(k, st->smem[w]));
    const int per_sm = p->props.measured ? sk_op_resident_ctas_per_sm(k, sk_attn_threads(st->cfg[w]), st->smem[w]) : 0;
    if (per_sm > 0) st->ctas[w] = (per_sm > MAX_CTAS_PER_SM ? MAX_CTAS_PER_SM : per_sm) * p->props.sm_count;
  }
  return sk_op_allow_dynamic_smem(sk_plan_k(p, K_SCHED), st->sched_smem);
}

/* ---- bind ---------------------------------------------------------------------------------------- */

/* Row strides of a [rows, heads, dim] view: heads and elements compact, rows at least heads*dim
 * apart. */
/* Elements between rows of dim 0 (the spine checked the rule: rows apart, the rest compact). */
static long long rows_apart(const DLTensor *t, int64_t compact) {
  return t->strides && t->shape[0] > 1 ? t->strides[0] : compact;
}

static sk_status fill_common(sk_binding *b, const attn_state *st, sk_attn_params *p, int64_t batch, int64_t total_q) {
  const int group = st->hq / st->hkv;
  /* The wide tile where the average request fills it (extend). */
  attn_bound *g = SK_BINDING_STATE(b, attn_bound);
  g->which = st->cfg[1].tile_q && total_q * group >= (int64_t)st->cfg[1].tile_q * batch;
  const sk_attn_config c = st->cfg[g->which];
  p->batch = (int)batch;
  p->num_heads_q = st->hq;
  p->num_heads_kv = st->hkv;
  p->max_batch = st->max_batch;
  p->max_total_q = st->max_total_q;
  p->max_work_items = st->max_work_items;
  p->max_partial_rows = st->max_partial_rows;
  p->tile_q = c.tile_q;
  p->tile_kv = c.tile_kv;
  p->attn_ctas = st->ctas[g->which];
  p->split = st->split;
  p->window_left = st->window_left;
  p->window_right = st->window_right;
  p->sm_scale = st->sm_scale;
  p->scratch = b->scratch[0];
  return SK_OK;
}

static sk_status paged_bind(sk_binding *b) {
  const attn_state *st = SK_PLAN_STATE(b->plan, attn_state);
  const sk_attn_paged_caps *c = SK_PLAN_CAPS(b->plan, sk_attn_paged_caps);
  attn_bound *g = SK_BINDING_STATE(b, attn_bound);
  sk_attn_params *p = &g->p;
  const int64_t batch = sk_binding_get_symbol(b, "B"), total_q = sk_binding_get_symbol(b, "TQ"),
                pages = sk_binding_get_symbol(b, "NP");
  if (c->mode == SK_ATTN_DECODE && total_q != batch)
    return sk_bind_error(b, "decode takes one token per request: q has %lld tokens for %lld requests", (long long)total_q,
                         (long long)batch);
  if (pages > INT32_MAX) return sk_bind_error(b, "tensor k_cache: %lld pages, at most 2^31 - 1", (long long)pages);
  SK_TRY(fill_common(b, st, p, batch, total_q));
  p->q_stride = rows_apart(sk_bind_tensor(b, P_Q), st->hq * st->dqk);
  /* K / V: [pages, page, heads, dim]: pages and token rows free (the table's rule), the rest compact. */
  const int64_t ps = 1 << st->page_shift;
  for (int kv = 0; kv < 2; kv++) {
    const DLTensor *t = sk_bind_tensor(b, kv ? P_V : P_K);
    const long long token = t->strides && ps > 1 ? t->strides[1] : st->hkv * (kv ? st->dvo : st->dqk);
    const long long pitch = rows_apart(t, ps * token);
    if (kv) p->v_token_stride = token, p->v_page_pitch = pitch;
    else p->k_token_stride = token, p->k_page_pitch = pitch;
  }
  const DLTensor *pt = sk_bind_tensor(b, P_PT);
  const int64_t width = pt->shape[1];
  if (width < 1) return sk_bind_error(b, "tensor page_table: no entries per request");
  p->pt_stride = (int)rows_apart(pt, width);
  p->max_pages = (int)(width < st->max_pages_per_seq ? width : st->max_pages_per_seq);
  p->num_pages = (int)pages;
  p->paged = 1;
  p->page_shift = st->page_shift;
  p->q = b->data[P_Q];
  p->k = b->data[P_K];
  p->v = b->data[P_V];
  p->page_table = b->data[P_PT];
  p->cache_seqlens = b->data[P_SEQ];
  p->cu_seqlens_q = b->data[P_CUQ];
  p->sinks = b->data[P_SINKS];
  p->out = b->data[P_OUT];
  p->lse = b->data[P_LSE];
  if (st->kv_fp8) {
    for (int kv = 0; kv < 2; kv++) {
      const DLTensor *t = sk_bind_tensor(b, kv ? P_VS : P_KS);
      const int64_t heads = t->shape[1];
      if (heads != 1 && heads != st->hkv)
        return sk_bind_error(b, "tensor %s: [B, %lld]: one scale per request ([B, 1]) or per KV head ([B, %d])",
                             kv ? "v_scale" : "k_scale", (long long)heads, st->hkv);
      const int sb = (int)(t->strides ? t->strides[0] : heads), sh = heads == 1 ? 0 : (int)(t->strides ? t->strides[1] : 1);
      if (sb < 0 || sh < 0) return sk_bind_error(b, "tensor %s: negative strides", kv ? "v_scale" : "k_scale");
      if (kv) p->v_scale = b->data[P_VS], p->v_scale_sb = sb, p->v_scale_sh = sh;
      else p->k_scale = b->data[P_KS], p->k_scale_sb = sb, p->k_scale_sh = sh;
    }
  }
  return SK_OK;
}

static sk_status varlen_bind(sk_binding *b) {
  const attn_state *st = SK_PLAN_STATE(b->plan, attn_state);
  attn_bound *g = SK_BINDING_STATE(b, attn_bound);
  sk_attn_params *p = &g->p;
  const int64_t batch = sk_binding_get_symbol(b, "B"), total_q = sk_binding_get_symbol(b, "TQ");
  SK_TRY(fill_common(b, st, p, batch, total_q));
  p->q_stride = rows_apart(sk_bind_tensor(b, V_Q), st->hq * st->dqk);
  p->k_token_stride = rows_apart(sk_bind_tensor(b, V_K), st->hkv * st->dqk);
  p->v_token_stride = rows_apart(sk_bind_tensor(b, V_V), st->hkv * st->dvo);
  p->paged = 0;
  p->max_total_k = st->max_total_k;
  p->lse_natural = 1;
  p->q = b->data[V_Q];
  p->k = b->data[V_K];
  p->v = b->data[V_V];
  p->cu_seqlens_q = b->data[V_CUQ];
  p->cu_seqlens_k = b->data[V_CUK];
  p->sinks = b->data[V_SINKS];
  p->out = b->data[V_OUT];
  p->lse = b->data[V_LSE];
  return SK_OK;
}

/* ---- run ----------------------------------------------------------------------------------------- */

/* Scheduler, attention, merge; each waits on the device for the previous kernel (PDL), so each may
 * be launched overlapped with it. Entry "reuse_schedule" (ENTRY_REUSE) skips the scheduler: the
 * scratch already holds the work list an earlier "run" of this plan built from the same lengths
 * (the merge leaves the unit counter zeroed for the next attention launch). */
static sk_status run(const sk_binding *b, void *stream) {
  const sk_plan *pl = b->plan;
  const attn_state *st = SK_PLAN_STATE(pl, attn_state);
  const attn_bound *g = SK_BINDING_STATE(b, attn_bound);
  void *args[] = {(void *)&g->p};
  if (b->entry != ENTRY_REUSE)
    SK_TRY(sk_kernel_launch_ex(sk_plan_k(pl, K_SCHED), (sk_dim3){1, 1, 1}, (sk_dim3){SK_ATTN_SCHED_THREADS, 1, 1},
                               st->sched_smem, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS));
  SK_TRY(sk_kernel_launch_ex(sk_plan_k(pl, g->which ? K_ATTN_WIDE : K_ATTN), (sk_dim3){(unsigned)g->p.attn_ctas, 1, 1},
                             (sk_dim3){(unsigned)sk_attn_threads(st->cfg[g->which]), 1, 1}, st->smem[g->which], stream,
                             args, SK_LAUNCH_OVERLAP_PREVIOUS));
  return sk_kernel_launch_ex(sk_plan_k(pl, K_MERGE), (sk_dim3){(unsigned)st->merge_ctas, 1, 1},
                             (sk_dim3){SK_ATTN_MERGE_THREADS, 1, 1}, 0, stream, args, SK_LAUNCH_OVERLAP_PREVIOUS);
}

SK_API sk_status sk_attn_error_flags(const sk_binding *b, void *stream, uint32_t *flags) {
  return sk_binding_scratch_word(b, "attention.", 4 * SK_ATTN_HDR_FLAGS, stream, "sk_attn_error_flags", flags);
}

/* ---- tables, caps JSON, definitions ------------------------------------------------------------ */

#define Q_RULE {"q", "[TQ, HQ, DQK]", SK_DT_HALF, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 1, "queries (rows may be strided)"}
#define SINKS_RULE {"sinks", "[HQ]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_OPTIONAL, 4, 0, 0, "per-head sink logits"}
#define OUT_RULE {"out", "[TQ, HQ, DVO]", SK_DT_HALF, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 16, 1, 0, "q's dtype"}
#define CU_Q_RULE {"cu_seqlens_q", "[B + 1]", SK_DT_I32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "token offsets"}

static const sk_tensor_rule paged_tensors[] = {
    Q_RULE,
    {"k_cache", "[NP, PS, HKV, DQK]", SK_DT_HALF | SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 2, "paged keys (pages and token rows may be strided)"},
    {"v_cache", "[NP, PS, HKV, DVO]", SK_DT_HALF | SK_DT_U8, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 2, "paged values (pages and token rows may be strided)"},
    {"page_table", "[B, *]", SK_DT_I32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 1, "logical -> physical page"},
    {"cache_seqlens", "[B]", SK_DT_I32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "keys per request, new tokens included"},
    CU_Q_RULE,
    {"k_scale", "[B, *]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, SK_STRIDES_ANY, "FP8 K scale per request or (request, head)"},
    {"v_scale", "[B, *]", SK_DT_FP32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, SK_STRIDES_ANY, "FP8 V scale"},
    SINKS_RULE,
    OUT_RULE,
    {"lse", "[TQ, HQ]", SK_DT_FP32, SK_TENSOR_OUT, SK_TENSOR_OPTIONAL, 4, 0, 0, "base-2 log-sum-exp"},
};
static const sk_symbol_rule paged_symbols[] = {{"B", "1", "MAX_B"}, {"TQ", "1", "MAX_TQ"}, {"NP", "1", "2147483647"}};
static const sk_op_entry paged_entries[] = {{"run", paged_tensors, P_COUNT, paged_symbols, 3},
                                            {"reuse_schedule", paged_tensors, P_COUNT, paged_symbols, 3}};

static const sk_tensor_rule varlen_tensors[] = {
    Q_RULE,
    {"k", "[TK, HKV, DQK]", SK_DT_HALF, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 1, "keys (rows may be strided)"},
    {"v", "[TK, HKV, DVO]", SK_DT_HALF, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 1, "values (rows may be strided)"},
    CU_Q_RULE,
    {"cu_seqlens_k", "[B + 1]", SK_DT_I32, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 4, 0, 0, "key offsets"},
    SINKS_RULE,
    OUT_RULE,
    {"lse", "[TQ, HQ]", SK_DT_FP32, SK_TENSOR_OUT, SK_TENSOR_OPTIONAL, 4, 0, 0, "natural-log log-sum-exp"},
};
static const sk_symbol_rule varlen_symbols[] = {{"B", "1", "MAX_B"}, {"TQ", "1", "MAX_TQ"}, {"TK", "1", "MAX_TK"}};
static const sk_op_entry varlen_entries[] = {{"run", varlen_tensors, V_COUNT, varlen_symbols, 3},
                                             {"reuse_schedule", varlen_tensors, V_COUNT, varlen_symbols, 3}};

static const char *const dtype_names[] = {"bf16", "fp16"};
static const char *const mode_names[] = {"decode", "extend"};




#define PC sk_attn_paged_caps
static const sk_caps_field paged_fields[] = {
    SK_CAPS_ENUM(PC, dtype, dtype_names, NULL), SK_CAPS_FLAG(PC, kv_fp8),
    SK_CAPS_INT(PC, num_heads_q, 1, 4096, true), SK_CAPS_INT(PC, num_heads_kv, 1, 4096, true),
    SK_CAPS_INT(PC, head_dim_qk, 1, 1024, true), SK_CAPS_INT(PC, head_dim_vo, 1, 1024, true),
    SK_CAPS_INT(PC, page_size, 1, 1024, false), SK_CAPS_ENUM(PC, mode, mode_names, NULL),
    SK_CAPS_INT64(PC, max_batch, 1, 1 << 20, true), SK_CAPS_INT64(PC, max_total_q, 0, 1 << 24, false),
    SK_CAPS_INT64(PC, max_pages_per_seq, 1, INT32_MAX, true), SK_CAPS_INT(PC, window_left, -1, INT32_MAX, false),
    SK_CAPS_FLOAT(PC, sm_scale), SK_CAPS_FLAG(PC, split_kv),
    SK_CAPS_INT64(PC, max_work_items, 0, 1 << 26, false), SK_CAPS_INT64(PC, max_partial_rows, 0, 1 << 26, false),
};
#undef PC
#define VC sk_attn_varlen_caps
static const sk_caps_field varlen_fields[] = {
    SK_CAPS_ENUM(VC, dtype, dtype_names, NULL),
    SK_CAPS_INT(VC, num_heads_q, 1, 4096, true), SK_CAPS_INT(VC, num_heads_kv, 1, 4096, true),
    SK_CAPS_INT(VC, head_dim_qk, 1, 1024, true), SK_CAPS_INT(VC, head_dim_vo, 1, 1024, true),
    SK_CAPS_INT(VC, window_left, -1, INT32_MAX, false), SK_CAPS_INT(VC, window_right, -1, INT32_MAX, false),
    SK_CAPS_FLOAT(VC, sm_scale), SK_CAPS_INT64(VC, max_batch, 1, 1 << 20, true),
    SK_CAPS_INT64(VC, max_total_q, 1, 1 << 24, true), SK_CAPS_INT64(VC, max_total_k, 0, INT32_MAX, false),
    SK_CAPS_FLAG(VC, split_kv), SK_CAPS_INT64(VC, max_work_items, 0, 1 << 26, false),
    SK_CAPS_INT64(VC, max_partial_rows, 0, 1 << 26, false),
};
#undef VC
_Static_assert(SK_DTYPE_FP16 == 1 && SK_ATTN_EXTEND == 1, "enum values are the name indices");

static const sk_attn_paged_caps paged_defaults = SK_ATTN_PAGED_CAPS_INIT;
static const sk_attn_varlen_caps varlen_defaults = SK_ATTN_VARLEN_CAPS_INIT;

/* The two ops differ in caps, tensors and their select / bind; kernels, run and limits are shared. */
#define ATTN_DEF(name, summary, caps_type, kind)                                                                 \
  {                                                                                                            \
    SK_OP_INFO(name, summary, 89),                                                                             \
    SK_OP_CAPS(caps_type, kind##_defaults), SK_OP_STATE(attn_state, attn_bound), .num_kernels = K_COUNT,        \
    .entries = kind##_entries, .num_entries = 2, .check_caps = kind##_check,     \
    SK_OP_FIELDS(kind##_fields), .select = kind##_select, .finish = finish,                                       \
    .bind = kind##_bind, .run = run,                                                                           \
  }

const sk_op_def sk_op_attention_paged =
    ATTN_DEF("attention.paged", "paged-KV attention, decode and extend: GQA, bf16/fp16/FP8 KV, causal, sliding window, sinks, split-KV",
             sk_attn_paged_caps, paged);
const sk_op_def sk_op_attention_varlen =
    ATTN_DEF("attention.varlen", "ragged self-attention over contiguous K/V: GQA, causal or (left, right) windows, sinks, natural-log LSE",
             sk_attn_varlen_caps, varlen);
