// Shared index math of attention.paged and attention.varlen: the kernel parameter block, the
// scratch layout, the per-request validation, the work-item and KV-chunk scheduling, the per-unit
// KV ranges and masks, the shared-memory layout and the tile configurations. Plain C11 as well as
// CUDA C++17 (integer arithmetic only, no CUDA headers when compiled as C), so the device
// scheduler (attention/schedule.cuh), the kernels (attention/attention.cuh, attention/merge.cuh),
// the host op and the CPU tests (ops/attention/ref.c, tests/test_attention_ref.c) use the same
// functions. Contract: ops/attention/attention.md.
//
// Terms. A request b has q_len query tokens and kv_len keys. Query token i (0-based inside the
// request) sees the keys [row_lo(i), row_hi(i)) with
//   row_lo(i) = window_left  >= 0 ? i + kv_len - q_len - window_left      : 0        (clamped >= 0)
//   row_hi(i) = window_right >= 0 ? i + kv_len - q_len + window_right + 1 : kv_len   (clamped <= kv_len)
// (bottom-right aligned; causal is window_right = 0). The query rows of one KV head are packed
// into the MMA M dimension: packed row R = token * group + head_in_group (group = Hq / Hkv). A q
// tile is tile_q consecutive packed rows. A request's keys from kv_begin (row 0's row_lo rounded
// down to a KV tile) to kv_len are cut into chunks of chunk_tiles KV tiles (chunk_tiles 0: one
// chunk). A work item is (request, q tile, chunk); a unit is (item, KV head) and is one CTA's job.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_ATTN_FN SK_HOST_DEVICE constexpr
#define SK_ATTN_UNROLL _Pragma("unroll")
#else
#define SK_ATTN_FN static inline
#define SK_ATTN_UNROLL
#endif

// ---- error flags (int32 word in the scratch header, written by every run) ---------------------
#define SK_ATTN_ERR_KV_LEN 1u    /* a KV length < 0, past the page table (max_pages << page_shift) or past max_total_k: clamped */
#define SK_ATTN_ERR_Q_LEN 2u     /* cu_seqlens_q negative, decreasing or past max_total_q: clamped */
#define SK_ATTN_ERR_KV_SHORT 4u  /* paged: cache_seqlens[b] < q_len (rows before the keys see none: output 0) */
#define SK_ATTN_ERR_BUDGET 8u    /* the q tiles alone exceed max_work_items: items past the budget dropped */
#define SK_ATTN_ERR_PAGE_ID 16u  /* a page-table entry outside [0, num_pages) for a live key: read as zeros */
#define SK_ATTN_ERR_BATCH 32u    /* batch < 0 or > max_batch: clamped */

// ---- kernel parameter block: the one argument of every attention kernel ------------------------
// Element strides count elements of the tensor's own type (KV: bytes for FP8).
typedef struct sk_attn_params {
  const void *q;             /* [total_q, Hq, Dqk] bf16/fp16, token stride q_stride, head stride Dqk */
  const void *k;             /* paged: [pages, page_size, Hkv, Dqk]; contiguous: [total_k, Hkv, Dqk] */
  const void *v;             /* the same with Dvo */
  const int *page_table;     /* paged: [batch, pt_stride] int32 */
  const int *cache_seqlens;  /* paged: [batch] int32, keys including the new tokens */
  const int *cu_seqlens_q;   /* [batch + 1] int32 */
  const int *cu_seqlens_k;   /* contiguous: [batch + 1] int32 */
  const float *k_scale;      /* FP8 KV: dequant scales, element b * k_scale_sb + kv_head * k_scale_sh; NULL = 1 */
  const float *v_scale;
  const float *sinks;        /* [Hq] fp32 natural-log sink logits, or NULL */
  void *out;                 /* [>= total_q, Hq, Dvo] in q's dtype, contiguous */
  float *lse;                /* [>= total_q, Hq] fp32 or NULL: base 2 (paged) or natural (lse_natural) */
  void *scratch;             /* sk_attn_scratch_bytes(...) bytes, 1024-byte aligned */
  long long q_stride;        /* elements between consecutive tokens of q (>= Hq * Dqk) */
  long long k_token_stride;  /* elements between consecutive tokens of K (inside a page when paged) */
  long long v_token_stride;
  long long k_page_pitch;    /* paged: elements between consecutive pages of K */
  long long v_page_pitch;
  int batch;                 /* requests this run (<= max_batch) */
  int num_heads_q, num_heads_kv;
  int paged;                 /* 1: paged KV (cache_seqlens, page_table); 0: contiguous (cu_seqlens_k) */
  int page_shift;            /* log2(page_size) */
  int pt_stride;             /* page-table row stride (entries) */
  int max_pages;             /* usable entries per page-table row (<= pt_stride) */
  int num_pages;             /* pages in the cache: ids outside [0, num_pages) are refused */
  int max_batch, max_total_q, max_total_k, max_work_items, max_partial_rows; /* plan budgets */
  int tile_q, tile_kv;       /* the attention kernel's TQ and TK (the scheduler needs them) */
  int attn_ctas;             /* gridDim.x of the attention kernel (cost model) */
  int split;                 /* 0: one chunk per request; 1: the scheduler may split KV */
  int fixed_chunk_tiles;     /* > 0: split with exactly this chunk (KV tiles) where the budgets allow */
  int window_left, window_right; /* -1 = unbounded; causal = window_right 0 */
  int lse_natural;           /* 1: natural-log LSE (varlen); 0: base 2 (paged) */
  int k_scale_sb, k_scale_sh, v_scale_sb, v_scale_sh; /* scale strides: per request (1,0), per head (Hkv,1), one (0,0) */
  float sm_scale;            /* softmax scale (default Dqk^-0.5, chosen by the host) */
  int reserved;
} sk_attn_params;

// ---- scratch --------------------------------------------------------------------------------------
// Regions, each starting on a 1024-byte boundary of the scratch base:
//   0 header       int32[64]                          (SK_ATTN_HDR_*)
//   1 items        sk_attn_item[max_work_items]       (request, q tile, chunk)
//   2 requests     sk_attn_req[max_batch]             validated lengths and chunking
//   3 merge rows   sk_attn_merge[max_total_q]         tokens whose partials the merge kernel folds
//   4 partial out  fp32[max_partial_rows, Hq, Dvo]    normalised partial outputs
//   5 partial lse  fp32[max_partial_rows, Hq]         base-2 LSE of each partial (-inf: no key)
#define SK_ATTN_SCRATCH_ALIGN 1024
#define SK_ATTN_REGIONS 6
#define SK_ATTN_R_HEADER 0
#define SK_ATTN_R_ITEMS 1
#define SK_ATTN_R_REQS 2
#define SK_ATTN_R_MERGE 3
#define SK_ATTN_R_PART_O 4
#define SK_ATTN_R_PART_LSE 5
#define SK_ATTN_HDR_INTS 64
#define SK_ATTN_HDR_ITEMS 0        /* live work items */
#define SK_ATTN_HDR_CHUNK_TILES 1  /* chunk size in KV tiles (0: one chunk per request) */
#define SK_ATTN_HDR_MERGE_ROWS 2   /* live merge rows */
#define SK_ATTN_HDR_FLAGS 3        /* SK_ATTN_ERR_* bits of this run */
#define SK_ATTN_HDR_COUNTER 4      /* the attention kernel's unit counter (zeroed by the scheduler) */
#define SK_ATTN_HDR_UNITS 5        /* items * Hkv */
#define SK_ATTN_HDR_TOTAL_Q 6      /* validated cu_seqlens_q[batch] */
#define SK_ATTN_HDR_PARTIAL_ROWS 7 /* partial rows in use */
#define SK_ATTN_HDR_BATCH 8        /* validated batch */

typedef struct sk_attn_item {
  int request, q_tile, chunk, pad;
} sk_attn_item;

typedef struct sk_attn_req {
  int q_start;     /* first token row of the request in q / out */
  int q_len;
  int kv_len;      /* keys (validated) */
  int kv_base;     /* contiguous KV: first key row (cu_seqlens_k[b]); paged: 0 */
  int kv_begin;    /* first key of the chunked span: row 0's row_lo rounded down to a KV tile */
  int n_chunks;    /* chunks of this request (>= 1) */
  int partial_off; /* first partial row (n_chunks > 1): token i, chunk c -> partial_off + i * n_chunks + c */
  int q_tiles;     /* q tiles of this request */
} sk_attn_req;

typedef struct sk_attn_merge {
  int token, partial_base, n_chunks, request;
} sk_attn_merge;

SK_ATTN_FN long long sk_attn_align_up(long long x) {
  return (x + SK_ATTN_SCRATCH_ALIGN - 1) / SK_ATTN_SCRATCH_ALIGN * SK_ATTN_SCRATCH_ALIGN;
}
SK_ATTN_FN long long sk_attn_region_bytes(int region, int max_batch, int max_total_q, int max_work_items,
                                          int max_partial_rows, int hq, int dvo) {
  return region == SK_ATTN_R_HEADER     ? 4LL * SK_ATTN_HDR_INTS
         : region == SK_ATTN_R_ITEMS    ? 16LL * max_work_items
         : region == SK_ATTN_R_REQS     ? 32LL * max_batch
         : region == SK_ATTN_R_MERGE    ? 16LL * max_total_q
         : region == SK_ATTN_R_PART_O   ? 4LL * max_partial_rows * hq * dvo
         : region == SK_ATTN_R_PART_LSE ? 4LL * max_partial_rows * hq
                                        : 0;
}
// Byte offset of a region from the (1024-aligned) scratch base; region SK_ATTN_REGIONS gives the
// total size. (Straight-line: the kernels compute it with a few multiply-adds.)
SK_ATTN_FN long long sk_attn_region_offset(int region, int max_batch, int max_total_q, int max_work_items,
                                           int max_partial_rows, int hq, int dvo) {
  long long off = 0;
  if (region > SK_ATTN_R_HEADER) off += sk_attn_align_up(4LL * SK_ATTN_HDR_INTS);
  if (region > SK_ATTN_R_ITEMS) off += sk_attn_align_up(16LL * max_work_items);
  if (region > SK_ATTN_R_REQS) off += sk_attn_align_up(32LL * max_batch);
  if (region > SK_ATTN_R_MERGE) off += sk_attn_align_up(16LL * max_total_q);
  if (region > SK_ATTN_R_PART_O) off += sk_attn_align_up(4LL * max_partial_rows * hq * dvo);
  if (region > SK_ATTN_R_PART_LSE) off += sk_attn_align_up(4LL * max_partial_rows * hq);
  return off;
}
SK_ATTN_FN long long sk_attn_scratch_bytes(int max_batch, int max_total_q, int max_work_items, int max_partial_rows,
                                           int hq, int dvo) {
  return sk_attn_region_offset(SK_ATTN_REGIONS, max_batch, max_total_q, max_work_items, max_partial_rows, hq, dvo);
}
// The same from a parameter block (Dvo is not in it: the kernels pass their template's).
SK_ATTN_FN long long sk_attn_params_region(const sk_attn_params *p, int region, int dvo) {
  return sk_attn_region_offset(region, p->max_batch, p->max_total_q, p->max_work_items, p->max_partial_rows,
                               p->num_heads_q, dvo);
}

// Budgets a plan needs at the least: every q tile of max_total_q tokens in max_batch requests is an
// item even without a split (each request adds at most one partial tile).
SK_ATTN_FN long long sk_attn_min_work_items(int max_total_q, int max_batch, int group, int tile_q) {
  return ((long long)max_total_q * group + tile_q - 1) / tile_q + max_batch;
}

// ---- per request ----------------------------------------------------------------------------------
SK_ATTN_FN int sk_attn_clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

SK_ATTN_FN int sk_attn_row_lo(int token, int shift, int window_left) {
  const int lo = window_left >= 0 ? token + shift - window_left : 0;
  return lo > 0 ? lo : 0;
}
SK_ATTN_FN int sk_attn_row_hi(int token, int shift, int window_right, int kv_len) {
  const int hi = window_right >= 0 ? token + shift + window_right + 1 : kv_len;
  return hi < kv_len ? hi : kv_len;
}

// Validates request b's raw lengths into *r (q_start, q_len, kv_len, kv_base, kv_begin, q_tiles;
// n_chunks 1, partial_off 0) and returns its SK_ATTN_ERR_* bits. q0, q1 = cu_seqlens_q[b], [b+1];
// paged: k0 = 0, k1 = cache_seqlens[b], kv_cap = max_pages << page_shift; contiguous: k0, k1 =
// cu_seqlens_k[b], [b+1], kv_cap = max_total_k.
SK_ATTN_FN unsigned sk_attn_make_request(int q0, int q1, int k0, int k1, int paged, int max_total_q, int kv_cap,
                                         int window_left, int group, int tile_q, int tile_kv, sk_attn_req *r) {
  unsigned flags = 0;
  const int qs = sk_attn_clamp(q0, 0, max_total_q), qe = sk_attn_clamp(q1, qs, max_total_q);
  if (qs != q0 || qe != q1) flags |= SK_ATTN_ERR_Q_LEN;
  int ks = 0, ke = 0;
  if (paged) {
    ke = sk_attn_clamp(k1, 0, kv_cap);
    if (ke != k1) flags |= SK_ATTN_ERR_KV_LEN;
  } else {
    ks = sk_attn_clamp(k0, 0, kv_cap);
    ke = sk_attn_clamp(k1, ks, kv_cap);
    if (ks != k0 || ke != k1) flags |= SK_ATTN_ERR_KV_LEN;
  }
  r->q_start = qs;
  r->q_len = qe - qs;
  r->kv_len = ke - ks;
  r->kv_base = ks;
  if (paged && r->kv_len < r->q_len) flags |= SK_ATTN_ERR_KV_SHORT;
  r->kv_begin = sk_attn_row_lo(0, r->kv_len - r->q_len, window_left) / tile_kv * tile_kv;
  if (r->kv_begin > r->kv_len) r->kv_begin = r->kv_len;
  r->q_tiles = (int)(((long long)r->q_len * group + tile_q - 1) / tile_q);
  r->n_chunks = 1;
  r->partial_off = 0;
  return flags;
}

// KV tiles of the request's chunked span [kv_begin, kv_len).
SK_ATTN_FN int sk_attn_span_tiles(const sk_attn_req *r, int tile_kv) {
  return r->kv_len > r->kv_begin ? (r->kv_len - r->kv_begin + tile_kv - 1) / tile_kv : 0;
}
SK_ATTN_FN int sk_attn_chunks(int span_tiles, int chunk_tiles) {
  return chunk_tiles <= 0 || span_tiles <= chunk_tiles ? 1 : (span_tiles + chunk_tiles - 1) / chunk_tiles;
}

// ---- chunk choice ---------------------------------------------------------------------------------
// Candidates: k < 32: 2^(k/2) KV tiles for even k, 1.5 * 2^(k/2) for odd k (1, 1, 2, 3, 4, 6, 8,
// 12, ...: a chunk that fills the grid is at most a third off); 32: fixed_chunk_tiles; 33: no
// split. The scheduler sums, per candidate, items = sum q_tiles * n_chunks and partial rows = sum
// over split requests of q_len * n_chunks, then picks the cheapest feasible candidate.
#define SK_ATTN_GRID_CANDS 32
#define SK_ATTN_CAND_FIXED 32
#define SK_ATTN_CAND_NONE 33
#define SK_ATTN_NCAND 34
#define SK_ATTN_UNIT_OVERHEAD_KEYS 512 /* a unit's fixed cost (pipeline fill, epilogue, merge) in keys */
#define SK_ATTN_COST_NONE (-1LL)       /* an infeasible candidate */

SK_ATTN_FN int sk_attn_candidate_tiles(int cand, int fixed_chunk_tiles) {
  return cand < SK_ATTN_GRID_CANDS ? (1 << (cand >> 1)) + ((cand & 1) ? (1 << (cand >> 1)) >> 1 : 0)
         : cand == SK_ATTN_CAND_FIXED ? fixed_chunk_tiles
                                      : 0;
}
// Counts saturate at SK_ATTN_SAT (far past any budget): 32-bit sums keep the scheduler's
// per-thread candidate sums in registers.
#define SK_ATTN_SAT 0x7fffffffu
SK_ATTN_FN unsigned sk_attn_sat_add(unsigned a, unsigned b) { return a > SK_ATTN_SAT - b ? SK_ATTN_SAT : a + b; }
SK_ATTN_FN unsigned sk_attn_sat_mul(int a, int b) {
  const long long x = (long long)a * b;
  return x > (long long)SK_ATTN_SAT ? SK_ATTN_SAT : (unsigned)x;
}
// Adds request r's items and partial rows under every candidate (saturating).
SK_ATTN_FN void sk_attn_accumulate(const sk_attn_req *r, int tile_kv, int fixed_chunk_tiles, unsigned *items,
                                   unsigned *partial) {
  const int span = sk_attn_span_tiles(r, tile_kv);
  SK_ATTN_UNROLL
  for (int c = 0; c < SK_ATTN_NCAND; c++) {
    const int n = sk_attn_chunks(span, sk_attn_candidate_tiles(c, fixed_chunk_tiles));
    items[c] = sk_attn_sat_add(items[c], sk_attn_sat_mul(r->q_tiles, n));
    if (n > 1) partial[c] = sk_attn_sat_add(partial[c], sk_attn_sat_mul(r->q_len, n));
  }
}
// Estimated time of candidate `cand` in KV tiles: waves of attn_ctas units, each as long as the
// longest chunk plus the per-unit overhead (a unit's first tile waits a full loaded memory
// latency, so many short units lose to fewer long ones); SK_ATTN_COST_NONE when the
// candidate breaks a budget or is no split in disguise (a chunk as long as the longest span).
SK_ATTN_FN long long sk_attn_candidate_cost(int cand, long long items, long long partial, int max_span, int hkv,
                                            int ctas, int tile_kv, int max_work_items, int max_partial_rows,
                                            int fixed_chunk_tiles) {
  const int tiles = sk_attn_candidate_tiles(cand, fixed_chunk_tiles);
  if (cand != SK_ATTN_CAND_NONE && (tiles <= 0 || tiles >= max_span || items > max_work_items || partial > max_partial_rows))
    return SK_ATTN_COST_NONE;
  const long long units = items * hkv, waves = (units + ctas - 1) / (ctas > 0 ? ctas : 1);
  const int len = cand != SK_ATTN_CAND_NONE ? tiles : max_span;
  return waves * (len + SK_ATTN_UNIT_OVERHEAD_KEYS / tile_kv);
}
// Chunk size (KV tiles, 0 = no split) from the candidates' costs. No split is the fallback; ties
// keep the larger chunk (fewer partials); split 0 never splits; a fixed chunk is used where the
// budgets allow it, else no split.
SK_ATTN_FN int sk_attn_pick_chunk(const long long *cost, int max_span, int split, int fixed_chunk_tiles) {
  if (!split || max_span <= 1) return 0;
  if (fixed_chunk_tiles > 0) return cost[SK_ATTN_CAND_FIXED] != SK_ATTN_COST_NONE ? fixed_chunk_tiles : 0;
  int best = 0;
  long long best_cost = cost[SK_ATTN_CAND_NONE];
  for (int c = SK_ATTN_GRID_CANDS - 1; c >= 0; c--)
    if (cost[c] != SK_ATTN_COST_NONE && cost[c] < best_cost) best = sk_attn_candidate_tiles(c, 0), best_cost = cost[c];
  return best;
}

// Item k (0-based) of a request: the request's q tiles last first (causal: the longest first),
// the chunks of one tile in order.
SK_ATTN_FN sk_attn_item sk_attn_request_item(const sk_attn_req *r, int request, int k) {
  sk_attn_item it = {request, r->q_tiles - 1 - k / r->n_chunks, k % r->n_chunks, 0};
  return it;
}

// The header a scheduler run leaves (attention/schedule.cuh and its CPU replay).
SK_ATTN_FN void sk_attn_write_header(int *hdr, int n_items, int chunk_tiles, int n_merge, unsigned flags, int hkv,
                                     int total_q, int partial_rows, int batch) {
  hdr[SK_ATTN_HDR_ITEMS] = n_items;
  hdr[SK_ATTN_HDR_CHUNK_TILES] = chunk_tiles;
  hdr[SK_ATTN_HDR_MERGE_ROWS] = n_merge;
  hdr[SK_ATTN_HDR_FLAGS] = (int)flags;
  hdr[SK_ATTN_HDR_COUNTER] = 0;
  hdr[SK_ATTN_HDR_UNITS] = n_items * hkv;
  hdr[SK_ATTN_HDR_TOTAL_Q] = total_q;
  hdr[SK_ATTN_HDR_PARTIAL_ROWS] = partial_rows;
  hdr[SK_ATTN_HDR_BATCH] = batch;
}

// ---- one unit: KV ranges and masks -------------------------------------------------------------------
typedef struct sk_attn_unit {
  int row0;        /* first packed row of the q tile */
  int rows;        /* valid packed rows in the tile (the rest are padding) */
  int shift;       /* kv_len - q_len: token i's diagonal key is i + shift */
  int clo, chi;    /* the chunk's keys [clo, chi) */
  int t_begin;     /* first KV tile start (a multiple of tile_kv) */
  int n_tiles;     /* KV tiles to walk (0: no key visible to any row) */
  int full_lo, full_hi; /* a tile inside [full_lo, full_hi) needs no mask */
  int load_end;    /* keys >= load_end are zero-filled, never read */
} sk_attn_unit;

SK_ATTN_FN int sk_attn_min(int a, int b) { return a < b ? a : b; }
SK_ATTN_FN int sk_attn_max(int a, int b) { return a > b ? a : b; }

SK_ATTN_FN void sk_attn_unit_ranges(const sk_attn_req *r, int q_tile, int chunk, int chunk_tiles, int group,
                                    int tile_q, int tile_kv, int window_left, int window_right, sk_attn_unit *u) {
  u->row0 = q_tile * tile_q;
  u->rows = sk_attn_min(tile_q, r->q_len * group - u->row0);
  u->shift = r->kv_len - r->q_len;
  u->clo = r->kv_begin + (chunk_tiles > 0 ? chunk * chunk_tiles * tile_kv : 0);
  u->chi = r->n_chunks == 1 ? r->kv_len : sk_attn_min(r->kv_len, u->clo + chunk_tiles * tile_kv);
  u->load_end = u->chi;
  const int i0 = u->row0 / group, i1 = (u->row0 + u->rows - 1) / group;
  const int first = sk_attn_max(u->clo, sk_attn_row_lo(i0, u->shift, window_left));
  const int last = sk_attn_min(u->chi, sk_attn_row_hi(i1, u->shift, window_right, r->kv_len));
  u->full_lo = sk_attn_max(u->clo, sk_attn_row_lo(i1, u->shift, window_left));
  u->full_hi = sk_attn_min(u->chi, sk_attn_row_hi(i0, u->shift, window_right, r->kv_len));
  u->t_begin = first / tile_kv * tile_kv;
  u->n_tiles = u->rows > 0 && last > first ? (last - u->t_begin + tile_kv - 1) / tile_kv : 0;
}
// Keys [lo, hi) of packed row R (valid) inside the unit's chunk.
SK_ATTN_FN int sk_attn_unit_row_lo(const sk_attn_unit *u, int token, int window_left) {
  return sk_attn_max(u->clo, sk_attn_row_lo(token, u->shift, window_left));
}
SK_ATTN_FN int sk_attn_unit_row_hi(const sk_attn_unit *u, int token, int window_right, int kv_len) {
  return sk_attn_min(u->chi, sk_attn_row_hi(token, u->shift, window_right, kv_len));
}
// Whether KV tile [t0, t0 + tile_kv) needs the per-element mask.
SK_ATTN_FN int sk_attn_tile_masked(const sk_attn_unit *u, int t0, int tile_kv) {
  return !(t0 >= u->full_lo && t0 + tile_kv <= u->full_hi);
}

// ---- tile configurations and shared memory ------------------------------------------------------
// A configuration: TQ packed rows per CTA (WQ warps of TQ / WQ rows, MQ = TQ / (16 WQ) m16 tiles
// each), TK keys per KV tile split over WK warps (FlashDecoding: TK / WK keys each, merged at the
// end), STAGES cp.async stages of one K and one V tile.
#define SK_ATTN_MAX_SMEM 101376 /* SM120's opt-in maximum per block (99 KB) */
#define SK_ATTN_RED_PAD 8       /* floats of padding per row of the cross-warp reduction buffer */

typedef struct sk_attn_config {
  int tile_q, tile_kv, warps_q, warps_kv, stages;
} sk_attn_config;

#define SK_ATTN_KIND_DECODE 0 /* 16 packed rows, 4 (D 256: 2) warps split each KV tile */
#define SK_ATTN_KIND_EXTEND 1 /* 64 rows, 4 warps of 16 rows (FlashAttention-2) */
#define SK_ATTN_KIND_WIDE 2   /* 128 rows, 8 warps of 16 rows (Dqk, Dvo <= 128) */

SK_ATTN_FN int sk_attn_q_bytes(int tile_q, int dqk) { return tile_q * dqk * 2; }
SK_ATTN_FN int sk_attn_stage_bytes(int tile_kv, int dqk, int dvo, int kv_fp8) {
  return tile_kv * (dqk + dvo) * (kv_fp8 ? 1 : 2);
}
SK_ATTN_FN int sk_attn_red_bytes(int tile_q, int warps_kv, int dvo) {
  return warps_kv > 1 ? (warps_kv - 1) * tile_q * (dvo + SK_ATTN_RED_PAD) * 4 : 0;
}
// Offsets inside the dynamic shared memory: Q tile, then the stages (aliased by the cross-warp
// reduction buffer after the KV loop), then the row statistics (m, l per warp column) and the
// next unit's index.
SK_ATTN_FN int sk_attn_smem_kv_off(int tile_q, int dqk) { return sk_attn_q_bytes(tile_q, dqk); }
SK_ATTN_FN int sk_attn_smem_stats_off(int dqk, int dvo, int kv_fp8, sk_attn_config c) {
  const int kv = c.stages * sk_attn_stage_bytes(c.tile_kv, dqk, dvo, kv_fp8);
  const int red = sk_attn_red_bytes(c.tile_q, c.warps_kv, dvo);
  return sk_attn_q_bytes(c.tile_q, dqk) + (kv > red ? kv : red);
}
SK_ATTN_FN int sk_attn_smem_bytes(int dqk, int dvo, int kv_fp8, sk_attn_config c) {
  return sk_attn_smem_stats_off(dqk, dvo, kv_fp8, c) + 2 * 4 * c.warps_kv * c.tile_q + 16;
}
SK_ATTN_FN int sk_attn_threads(sk_attn_config c) { return 32 * c.warps_q * c.warps_kv; }

// The configuration per kind, head dims and KV format; tile_q 0 = not available (wide for D > 128).
SK_ATTN_FN sk_attn_config sk_attn_pick_config(int kind, int dqk, int dvo, int kv_fp8) {
  sk_attn_config c = {0, 0, 0, 0, 0};
  const int big = dqk + dvo > 256;
  if (kind == SK_ATTN_KIND_DECODE) {
    /* 16-bit KV: 32-key tiles over 2 warps, 3 stages; FP8: 64-key tiles over 4 warps, 3 stages
     * (an FP8 tile of 64 keys moves as many bytes per stage as a 16-bit tile of 32; attention.md) */
    c.tile_q = 16, c.warps_q = 1, c.stages = 3;
    c.tile_kv = kv_fp8 ? 64 : 32, c.warps_kv = kv_fp8 ? 4 : 2;
    while (c.stages > 2 && sk_attn_smem_bytes(dqk, dvo, kv_fp8, c) > SK_ATTN_MAX_SMEM) c.stages--;
  } else if (kind == SK_ATTN_KIND_EXTEND) {
    c.tile_q = 64, c.warps_q = 4, c.warps_kv = 1, c.stages = 2, c.tile_kv = !kv_fp8 && big ? 32 : 64;
  } else if (kind == SK_ATTN_KIND_WIDE && dqk <= 128 && dvo <= 128) {
    c.tile_q = 128, c.warps_q = 8, c.warps_kv = 1, c.stages = 2, c.tile_kv = 64;
  }
  return c;
}

// Dynamic shared memory of the scheduler kernel: one int per request + 1.
SK_ATTN_FN int sk_attn_sched_smem_bytes(int max_batch) { return 4 * (max_batch + 1); }
#define SK_ATTN_SCHED_THREADS 256
#define SK_ATTN_MERGE_THREADS 128

// ---- shared-memory swizzle ----------------------------------------------------------------------
// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `cpr` chunks per row: the chunk
// index is XORed with (row % 8) when cpr % 8 == 0, with (row / 2) % 4 when cpr % 8 == 4 (rows of
// 64 or 192 bytes), so that the 8 row addresses of every ldmatrix fall in 8 different 16-byte
// bank groups.
SK_ATTN_FN int sk_attn_swz(int row, int chunk, int cpr) {
  const int x = (cpr & 7) == 0 ? (row & 7) : ((row >> 1) & 3);
  return (row * cpr + (chunk ^ x)) * 16;
}
// FP8 KV: the MMA runs in f16 with the Q columns of every 16-column block permuted so that one
// ldmatrix of raw E4M3 bytes gives each lane its K elements 4t..4t+3: 32-bit pair p (elements 2p,
// 2p+1) of a block is stored at pair slot sk_attn_q_pair_slot(p).
SK_ATTN_FN int sk_attn_q_pair_slot(int p) { return (p & 1) * 4 + (p >> 1); }
