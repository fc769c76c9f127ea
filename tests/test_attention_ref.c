/* tests/test_attention_ref.c - attention.paged / attention.varlen without a GPU: the double
 * reference against a brute-force softmax, its invariants (probabilities sum to one, masks,
 * windows, sinks, split-KV merge, FP8 dequant), the scheduler replayed on the CPU through the
 * kernels' own header (attention/layout.cuh): every (request, query row, visible key) covered
 * exactly once, budgets, clamping and error flags, and every tile configuration's shared memory. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/layout.cuh"
#include "attention/ref.h"
#include "common/ref.h"

static skref_rng rng;
static uint64_t seed;
static void seed_rng(const char *what) {
  seed = skref_test_seed(what);
  skref_rng_seed(&rng, seed);
}
static int rnd(int lo, int hi) { return lo + (int)skref_rng_below(&rng, (uint64_t)(hi - lo + 1)); } /* [lo, hi] */

/* ---- brute force: one row, every key scored, masks applied one by one --------------------------- */
static double brute_row(const skref_attn_problem *pr, int b, int i, int h, double *out) {
  const int group = pr->hq / pr->hkv, kvh = h / group, n = skref_attn_kv_len(pr, b);
  const int ql = pr->cu_seqlens_q[b + 1] - pr->cu_seqlens_q[b];
  double *k = malloc(sizeof(double) * ((size_t)n * pr->dqk + 1)), *v = malloc(sizeof(double) * ((size_t)n * pr->dvo + 1));
  double *p = malloc(sizeof(double) * ((size_t)n + 1));
  skref_attn_gather(pr, b, kvh, k, v);
  const uint16_t *qs = pr->q + (long long)(pr->cu_seqlens_q[b] + i) * pr->q_stride + (long long)h * pr->dqk;
  double total = 0.0;
  const double sink = pr->sinks ? exp((double)pr->sinks[h]) : 0.0;
  for (int j = 0; j < n; j++) {
    const int diag = i + n - ql;
    const int visible = !(pr->window_right >= 0 && j > diag + pr->window_right) &&
                        !(pr->window_left >= 0 && j < diag - pr->window_left);
    double dot = 0.0;
    for (int d = 0; d < pr->dqk; d++) dot += skref_half_to_float(qs[d], pr->q_dtype) * k[(size_t)j * pr->dqk + d];
    p[j] = visible ? exp(dot * pr->sm_scale) : 0.0;
    total += p[j];
  }
  for (int d = 0; d < pr->dvo; d++) {
    double acc = 0.0;
    for (int j = 0; j < n; j++) acc += p[j] * v[(size_t)j * pr->dvo + d];
    out[d] = total + sink > 0 ? acc / (total + sink) : 0.0;
  }
  free(k), free(v), free(p);
  return total + sink > 0 ? log2(total + sink) : -INFINITY;
}

static skref_attn_spec small_spec(int batch, const int *ql, const int *kl, int paged, skref_kv_format f) {
  skref_attn_spec s = {.batch = batch, .hq = 4, .hkv = 2, .dqk = 16, .dvo = 8, .q_dtype = SKREF_BF16,
                       .kv_format = f, .paged = paged, .page_size = 16, .pt_width = 8, .extra_pages = 3,
                       .scale_mode = 1, .window_left = -1, .window_right = 0, .q_lens = ql, .kv_lens = kl};
  return s;
}

static void compare_brute(const skref_attn_problem *pr, const char *what) {
  const int tq = pr->cu_seqlens_q[pr->batch];
  double *out = malloc(sizeof(double) * (size_t)tq * pr->hq * pr->dvo), *lse = malloc(sizeof(double) * (size_t)tq * pr->hq);
  double *bo = malloc(sizeof(double) * (size_t)pr->dvo);
  skref_attention(pr, out, lse);
  for (int b = 0; b < pr->batch; b++)
    for (int i = 0; i < pr->cu_seqlens_q[b + 1] - pr->cu_seqlens_q[b]; i++)
      for (int h = 0; h < pr->hq; h++) {
        const size_t row = (size_t)(pr->cu_seqlens_q[b] + i) * pr->hq + h;
        const double bl = brute_row(pr, b, i, h, bo);
        cr_assert(bl == lse[row] || fabs(bl - lse[row]) < 1e-12, "seed %llu %s: b %d i %d h %d lse %.17g brute %.17g",
                  (unsigned long long)seed, what, b, i, h, lse[row], bl);
        for (int d = 0; d < pr->dvo; d++)
          cr_assert(fabs(bo[d] - out[row * pr->dvo + d]) < 1e-12, "seed %llu %s: b %d i %d h %d d %d: %.17g vs %.17g",
                    (unsigned long long)seed, what, b, i, h, d, out[row * pr->dvo + d], bo[d]);
      }
  free(out), free(lse), free(bo);
}

Test(attention_ref, matches_brute_force_masks_windows_sinks) {
  seed_rng("attention ref brute force");
  /* Edge cases: one key, q_len > kv_len (rows without keys), exact pages, q_len == kv_len. */
  const int ql[] = {1, 5, 3, 16, 2, 7}, kl[] = {1, 3, 16, 16, 33, 40};
  for (int paged = 0; paged < 2; paged++)
    for (int wl = -1; wl <= 4; wl += (wl < 1 ? 1 : 3))
      for (int wr = -1; wr <= 1; wr++)
        for (int sinks = 0; sinks < 2; sinks++) {
          if (paged && wr != 0) continue;
          skref_attn_spec s = small_spec(6, ql, kl, paged, paged ? SKREF_KV_E4M3 : SKREF_KV_BF16);
          s.window_left = wl, s.window_right = wr, s.sinks = sinks;
          skref_attn_buffers bu;
          skref_attn_make(&rng, &s, &bu);
          char what[96];
          snprintf(what, sizeof what, "paged %d wl %d wr %d sinks %d", paged, wl, wr, sinks);
          compare_brute(&bu.pr, what);
          skref_attn_free(&bu);
        }
}

/* V = 1 everywhere: every output is the probability mass on the keys, 1 without a sink and
 * 1 - 2^(sink2 - lse2) with one; rows without keys give 0. */
Test(attention_ref, probabilities_sum_to_one) {
  seed_rng("attention ref sums");
  const int ql[] = {4, 1, 9}, kl[] = {20, 1, 9};
  for (int sinks = 0; sinks < 2; sinks++) {
    skref_attn_spec s = small_spec(3, ql, kl, 1, SKREF_KV_BF16);
    s.sinks = sinks, s.window_left = sinks ? 5 : -1;
    skref_attn_buffers bu;
    skref_attn_make(&rng, &s, &bu);
    uint16_t *v = (uint16_t *)bu.pr.v;
    const size_t v_elems = (size_t)bu.num_pages * s.page_size * s.hkv * s.dvo;
    for (size_t i = 0; i < v_elems; i++) v[i] = skref_float_to_bf16(1.0f);
    double *out = malloc(sizeof(double) * (size_t)bu.total_q * s.hq * s.dvo), *lse = malloc(sizeof(double) * (size_t)bu.total_q * s.hq);
    skref_attention(&bu.pr, out, lse);
    for (int r = 0; r < bu.total_q * s.hq; r++) {
      const double mass = sinks ? 1.0 - exp2(bu.sinks[r % s.hq] / log(2.0) - lse[r]) : 1.0;
      for (int d = 0; d < s.dvo; d++)
        cr_assert(fabs(out[(size_t)r * s.dvo + d] - mass) < 1e-12, "seed %llu row %d: %.17g, mass %.17g", (unsigned long long)seed,
                  r, out[(size_t)r * s.dvo + d], mass);
    }
    free(out), free(lse);
    skref_attn_free(&bu);
  }
}

/* Split-KV: partials over any chunking, merged with the base-2 rule, equal the unsplit result. */
Test(attention_ref, merge_of_split_partials_equals_unsplit) {
  seed_rng("attention ref merge");
  for (int trial = 0; trial < 12; trial++) {
    int ql[4], kl[4];
    for (int b = 0; b < 4; b++) kl[b] = rnd(1, 300), ql[b] = rnd(1, kl[b] < 12 ? kl[b] : 12);
    skref_attn_spec s = small_spec(4, ql, kl, trial & 1, trial % 3 == 0 ? SKREF_KV_E4M3 : SKREF_KV_BF16);
    s.pt_width = 20, s.sinks = trial % 4 < 2, s.window_left = trial % 5 == 0 ? rnd(0, 40) : -1;
    skref_attn_buffers bu;
    skref_attn_make(&rng, &s, &bu);
    const size_t no = (size_t)bu.total_q * s.hq * s.dvo, nl = (size_t)bu.total_q * s.hq;
    double *o1 = malloc(sizeof(double) * no), *l1 = malloc(sizeof(double) * nl), *o2 = malloc(sizeof(double) * no),
           *l2 = malloc(sizeof(double) * nl);
    skref_attention(&bu.pr, o1, l1);
    skref_attention_split(&bu.pr, rnd(1, 64), o2, l2);
    for (size_t i = 0; i < nl; i++)
      cr_assert(l1[i] == l2[i] || fabs(l1[i] - l2[i]) < 1e-12, "seed %llu trial %d lse %zu: %.17g vs %.17g",
                (unsigned long long)seed, trial, i, l1[i], l2[i]);
    for (size_t i = 0; i < no; i++)
      cr_assert(fabs(o1[i] - o2[i]) < 1e-12, "seed %llu trial %d out %zu: %.17g vs %.17g", (unsigned long long)seed, trial, i,
                o1[i], o2[i]);
    free(o1), free(l1), free(o2), free(l2);
    skref_attn_free(&bu);
  }
  /* The merge rule by hand: two partials, one empty (-inf) and a sink. */
  const double o[] = {1.0, 2.0, 5.0, 7.0, 3.0, 4.0}, l[] = {1.0, -INFINITY, 2.0};
  double out[2];
  const double lse = skref_attn_merge(3, o, l, 2, 1, log(2.0) * 0.5, out);
  const double w1 = exp2(1.0), w3 = exp2(2.0), ws = exp2(0.5);
  cr_assert(fabs(lse - log2(w1 + w3 + ws)) < 1e-12);
  cr_assert(fabs(out[0] - (w1 * 1.0 + w3 * 3.0) / (w1 + w3 + ws)) < 1e-12);
  cr_assert(fabs(out[1] - (w1 * 2.0 + w3 * 4.0) / (w1 + w3 + ws)) < 1e-12);
  const double none[] = {-INFINITY, -INFINITY};
  cr_assert(skref_attn_merge(2, o, none, 2, 0, 0.0, out) == -INFINITY && out[0] == 0.0 && out[1] == 0.0);
}

/* FP8 dequant: per request, per (request, head) and one (stride-0) scale; the vLLM combined
 * layout reads the same values as separate caches. */
Test(attention_ref, fp8_dequant_scales_and_combined_layout) {
  seed_rng("attention ref fp8");
  const int ql[] = {1, 2}, kl[] = {37, 64};
  for (int mode = 0; mode < 3; mode++)
    for (int combined = 0; combined < 2; combined++) {
      skref_attn_spec s = small_spec(2, ql, kl, 1, SKREF_KV_E4M3);
      s.dvo = s.dqk, s.scale_mode = mode, s.combined = combined;
      skref_attn_buffers bu;
      skref_attn_make(&rng, &s, &bu);
      cr_assert_eq(bu.scale_count, mode == 0 ? 2 : mode == 1 ? 4 : 1);
      for (int b = 0; b < 2; b++)
        for (int h = 0; h < s.hkv; h++) {
          double *k = malloc(sizeof(double) * (size_t)kl[b] * s.dqk), *v = malloc(sizeof(double) * (size_t)kl[b] * s.dvo);
          skref_attn_gather(&bu.pr, b, h, k, v);
          const float ks = bu.k_scale[mode == 0 ? b : mode == 1 ? b * s.hkv + h : 0];
          for (int pos = 0; pos < kl[b]; pos++) {
            const int page = bu.page_table[b * s.pt_width + pos / s.page_size];
            const size_t pitch = (size_t)(combined ? 2 : 1) * s.page_size * s.hkv * s.dqk;
            const size_t idx = (size_t)page * pitch + (size_t)(pos % s.page_size) * s.hkv * s.dqk + (size_t)h * s.dqk + 3;
            const uint8_t code = ((const uint8_t *)bu.kv)[bu.k_offset + idx];
            cr_assert_eq(k[(size_t)pos * s.dqk + 3], skref_e4m3_decode(code) * ks);
          }
          free(k), free(v);
        }
      compare_brute(&bu.pr, "fp8");
      skref_attn_free(&bu);
    }
}

/* ---- the scheduler, replayed -------------------------------------------------------------------- */
typedef struct sched_case {
  sk_attn_params p;
  int *cu_q, *cu_k, *seqlens;
  void *scratch;
  int dvo;
} sched_case;

static void sched_init(sched_case *c, int batch, int hq, int hkv, int paged, int kind, int dqk, int dvo) {
  memset(c, 0, sizeof *c);
  const sk_attn_config cfg = sk_attn_pick_config(kind, dqk, dvo, 0);
  c->cu_q = calloc((size_t)batch + 2, sizeof(int));
  c->cu_k = calloc((size_t)batch + 2, sizeof(int));
  c->seqlens = calloc((size_t)batch + 1, sizeof(int));
  c->dvo = dvo;
  c->p = (sk_attn_params){.cu_seqlens_q = c->cu_q, .cu_seqlens_k = c->cu_k, .cache_seqlens = c->seqlens,
                          .batch = batch, .num_heads_q = hq, .num_heads_kv = hkv, .paged = paged, .page_shift = 4,
                          .max_pages = 1 << 16, .pt_stride = 1 << 16, .num_pages = 1 << 20, .max_batch = batch,
                          .max_total_k = 1 << 24, .tile_q = cfg.tile_q, .tile_kv = cfg.tile_kv, .attn_ctas = 132 * 2,
                          .split = 1, .window_left = -1, .window_right = 0};
}
static void sched_set_lengths(sched_case *c, const int *ql, const int *kl) {
  sk_attn_params *p = &c->p;
  for (int b = 0; b < p->batch; b++) {
    c->cu_q[b + 1] = c->cu_q[b] + ql[b];
    c->cu_k[b + 1] = c->cu_k[b] + kl[b];
    c->seqlens[b] = kl[b];
  }
  const int group = p->num_heads_q / p->num_heads_kv;
  p->max_total_q = c->cu_q[p->batch] > 0 ? c->cu_q[p->batch] : 1;
  p->max_work_items = (int)sk_attn_min_work_items(p->max_total_q, p->batch, group, p->tile_q) + 4096;
  p->max_partial_rows = p->max_total_q * 64 + 4096;
}
static void sched_run(sched_case *c) {
  free(c->scratch);
  const long long bytes = sk_attn_scratch_bytes(c->p.max_batch, c->p.max_total_q, c->p.max_work_items,
                                                c->p.max_partial_rows, c->p.num_heads_q, c->dvo);
  c->scratch = calloc((size_t)bytes, 1);
  skref_attn_schedule(&c->p, c->dvo, c->scratch);
}
static void sched_free(sched_case *c) { free(c->cu_q), free(c->cu_k), free(c->seqlens), free(c->scratch); }
#define SCHED_REGION(c, type, r) ((type *)((char *)(c)->scratch + sk_attn_params_region(&(c)->p, r, (c)->dvo)))

/* Walks every unit as the kernel does (attention/attention.cuh) and checks: every (request,
 * packed row, key visible to it) is covered exactly once, nothing else is; no key at or past
 * the unit's load end (<= kv_len) is needed; partial rows are written once each; merge rows are
 * exactly the tokens of split requests. */
static void check_schedule(const sched_case *c, const char *what) {
  const sk_attn_params *p = &c->p;
  const int *hdr = SCHED_REGION(c, int, SK_ATTN_R_HEADER);
  const sk_attn_item *items = SCHED_REGION(c, sk_attn_item, SK_ATTN_R_ITEMS);
  const sk_attn_req *reqs = SCHED_REGION(c, sk_attn_req, SK_ATTN_R_REQS);
  const sk_attn_merge *merges = SCHED_REGION(c, sk_attn_merge, SK_ATTN_R_MERGE);
  const int batch = hdr[SK_ATTN_HDR_BATCH], group = p->num_heads_q / p->num_heads_kv, chunk = hdr[SK_ATTN_HDR_CHUNK_TILES];
  const int n_items = hdr[SK_ATTN_HDR_ITEMS], tk = p->tile_kv;
  cr_assert_leq(n_items, p->max_work_items, "%s", what);
  cr_assert_eq(hdr[SK_ATTN_HDR_UNITS], n_items * p->num_heads_kv, "%s", what);
  cr_assert_leq(hdr[SK_ATTN_HDR_PARTIAL_ROWS], chunk ? p->max_partial_rows : 0, "%s", what);
  /* coverage[b][row][key] */
  long long total_rows = 0, *row_off = calloc((size_t)batch + 1, sizeof(long long));
  for (int b = 0; b < batch; b++) row_off[b + 1] = row_off[b] + (long long)reqs[b].q_len * group * reqs[b].kv_len, total_rows += reqs[b].q_len;
  unsigned char *cov = calloc((size_t)row_off[batch] + 1, 1);
  unsigned char *pused = calloc((size_t)hdr[SK_ATTN_HDR_PARTIAL_ROWS] + 1, 1);
  unsigned char *seen = calloc((size_t)n_items + 1, 1);
  for (int i = 0; i < n_items; i++) {
    const sk_attn_item it = items[i];
    cr_assert(it.request >= 0 && it.request < batch, "%s: item %d request %d", what, i, it.request);
    const sk_attn_req *r = &reqs[it.request];
    cr_assert(it.q_tile >= 0 && it.q_tile < r->q_tiles && it.chunk >= 0 && it.chunk < r->n_chunks, "%s: item %d", what, i);
    /* (request, tile, chunk) at most once: items of a request are contiguous and ordered */
    for (int j = i + 1; j < n_items && items[j].request == it.request; j++)
      cr_assert(items[j].q_tile != it.q_tile || items[j].chunk != it.chunk, "%s: item %d twice", what, i);
    sk_attn_unit u;
    sk_attn_unit_ranges(r, it.q_tile, it.chunk, chunk, group, p->tile_q, tk, p->window_left, p->window_right, &u);
    cr_assert_leq(u.load_end, r->kv_len);
    for (int rr = 0; rr < u.rows; rr++) {
      const int R = u.row0 + rr, token = R / group;
      const int lo = sk_attn_unit_row_lo(&u, token, p->window_left), hi = sk_attn_unit_row_hi(&u, token, p->window_right, r->kv_len);
      for (int j = 0; j < u.n_tiles; j++) {
        const int t0 = u.t_begin + j * tk, masked = sk_attn_tile_masked(&u, t0, tk);
        for (int kv = t0; kv < t0 + tk; kv++) {
          const int vis = masked ? kv >= lo && kv < hi : 1;
          if (!vis) continue;
          cr_assert(kv >= 0 && kv < u.load_end, "%s: item %d row %d key %d visible but not loaded (end %d)", what, i, R, kv, u.load_end);
          cov[row_off[it.request] + (long long)R * r->kv_len + kv]++;
        }
      }
      if (r->n_chunks > 1) {
        const long long prow = (long long)r->partial_off + (long long)token * r->n_chunks + it.chunk;
        cr_assert(prow >= 0 && prow < hdr[SK_ATTN_HDR_PARTIAL_ROWS], "%s: partial row %lld", what, prow);
        if (R % group == 0) pused[prow]++;
      }
    }
    seen[i] = 1;
  }
  for (int b = 0; b < batch; b++) {
    const sk_attn_req *r = &reqs[b];
    for (int R = 0; R < r->q_len * group; R++) {
      const int token = R / group, shift = r->kv_len - r->q_len;
      const int lo = sk_attn_row_lo(token, shift, p->window_left), hi = sk_attn_row_hi(token, shift, p->window_right, r->kv_len);
      for (int kv = 0; kv < r->kv_len; kv++) {
        const int want = kv >= lo && kv < hi;
        cr_assert_eq(cov[row_off[b] + (long long)R * r->kv_len + kv], want, "%s: request %d row %d key %d covered %d times",
                     what, b, R, kv, cov[row_off[b] + (long long)R * r->kv_len + kv]);
      }
    }
  }
  for (int i = 0; i < hdr[SK_ATTN_HDR_PARTIAL_ROWS]; i++) cr_assert_eq(pused[i], 1, "%s: partial row %d written %d times", what, i, pused[i]);
  /* merge rows: the tokens of split requests, once each, in order (at most max_total_q: requests
   * whose clamped query ranges overlap can ask for more) */
  int m = 0;
  for (int b = 0; b < batch; b++)
    if (reqs[b].n_chunks > 1)
      for (int i = 0; i < reqs[b].q_len && m < p->max_total_q; i++, m++) {
        cr_assert_lt(m, hdr[SK_ATTN_HDR_MERGE_ROWS], "%s", what);
        cr_assert(merges[m].token == reqs[b].q_start + i && merges[m].partial_base == reqs[b].partial_off + i * reqs[b].n_chunks &&
                      merges[m].n_chunks == reqs[b].n_chunks && merges[m].request == b,
                  "%s: merge row %d", what, m);
      }
  cr_assert_eq(m, hdr[SK_ATTN_HDR_MERGE_ROWS], "%s", what);
  free(row_off), free(cov), free(pused), free(seen);
}

Test(attention_ref, scheduler_covers_every_key_once_over_random_batches) {
  seed_rng("attention scheduler replay");
  static const int kinds[] = {SK_ATTN_KIND_DECODE, SK_ATTN_KIND_EXTEND, SK_ATTN_KIND_WIDE};
  for (int trial = 0; trial < 60; trial++) {
    const int kind = kinds[trial % 3], batch = rnd(1, 9), hkv = rnd(1, 3), group = rnd(1, 9);
    const int dq = trial % 2 ? 128 : 64;
    sched_case c;
    sched_init(&c, batch, hkv * group, hkv, trial % 4 != 3, kind, dq, dq);
    int ql[16], kl[16];
    for (int b = 0; b < batch; b++) {
      const int mode = rnd(0, 3);
      kl[b] = mode == 0 ? rnd(0, 40) : mode == 1 ? rnd(1, 700) : rnd(60, 2000);
      ql[b] = kind == SK_ATTN_KIND_DECODE ? (kl[b] > 0 ? 1 : 0) : rnd(0, kl[b] < 80 ? kl[b] : 80);
      if (trial % 7 == 0 && b == 0) ql[b] = kl[b] + 3; /* paged: more queries than keys */
    }
    sched_set_lengths(&c, ql, kl);
    c.p.split = trial % 5 != 4;
    c.p.fixed_chunk_tiles = trial % 6 == 5 ? rnd(1, 5) : 0;
    c.p.attn_ctas = rnd(1, 300);
    if (trial % 4 == 1) c.p.window_left = rnd(0, 300);
    if (trial % 4 == 3) c.p.window_right = trial % 8 == 3 ? -1 : rnd(0, 5); /* varlen: non-causal / right window */
    sched_run(&c);
    char what[160];
    snprintf(what, sizeof what, "seed %llu trial %d kind %d batch %d group %d split %d fixed %d wl %d wr %d",
             (unsigned long long)seed, trial, kind, batch, group, c.p.split, c.p.fixed_chunk_tiles, c.p.window_left,
             c.p.window_right);
    check_schedule(&c, what);
    const int *hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
    if (!c.p.split) cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES], 0, "%s", what);
    cr_assert_eq(hdr[SK_ATTN_HDR_FLAGS] & ~SK_ATTN_ERR_KV_SHORT, 0, "%s: flags %d", what, hdr[SK_ATTN_HDR_FLAGS]);
    sched_free(&c);
  }
}

/* The chunk choice: one long decode request splits to fill the GPU, many requests do not split,
 * the budgets cap the split, a fixed chunk is honoured, split 0 never splits. */
Test(attention_ref, scheduler_chunk_choice_and_budgets) {
  sched_case c;
  sched_init(&c, 1, 32, 8, 1, SK_ATTN_KIND_DECODE, 128, 128);
  int ql[64], kl[64];
  ql[0] = 1, kl[0] = 32768;
  sched_set_lengths(&c, ql, kl);
  sched_run(&c);
  const int *hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_gt(hdr[SK_ATTN_HDR_CHUNK_TILES], 0);
  cr_assert_geq(hdr[SK_ATTN_HDR_UNITS], c.p.attn_ctas / 2, "units %d", hdr[SK_ATTN_HDR_UNITS]);
  cr_assert_leq(hdr[SK_ATTN_HDR_UNITS], c.p.attn_ctas, "units %d", hdr[SK_ATTN_HDR_UNITS]);
  check_schedule(&c, "long decode");
  c.p.max_partial_rows = 1; /* no room for two partials: no split */
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES], 0);
  c.p.max_partial_rows = 1 << 20, c.p.max_work_items = 5;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_leq(hdr[SK_ATTN_HDR_ITEMS], 5);
  check_schedule(&c, "5 items");
  c.p.max_work_items = 1 << 20, c.p.fixed_chunk_tiles = 7;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES], 7);
  cr_assert_eq(hdr[SK_ATTN_HDR_ITEMS], (32768 / c.p.tile_kv + 6) / 7, "items %d", hdr[SK_ATTN_HDR_ITEMS]);
  check_schedule(&c, "fixed 7");
  c.p.split = 0;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES], 0);
  cr_assert_eq(hdr[SK_ATTN_HDR_ITEMS], 1);
  sched_free(&c);

  /* 64 requests x 8 heads: 512 units fill 264 CTAs in two full waves (no split); with 396 CTAs
   * the second wave would be a third full, and chunks of 4096 keys make three full waves. */
  sched_init(&c, 64, 64, 8, 1, SK_ATTN_KIND_DECODE, 128, 128);
  for (int b = 0; b < 64; b++) ql[b] = 1, kl[b] = 8192;
  sched_set_lengths(&c, ql, kl);
  sched_run(&c);
  check_schedule(&c, "64 x 8k");
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES], 0);
  c.p.attn_ctas = 396;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES] * c.p.tile_kv, 4096);
  check_schedule(&c, "64 x 8k, 396 CTAs");
  sched_free(&c);

  /* A prefill whose q tiles fill many waves does not split; with split 0 nothing splits. */
  sched_init(&c, 2, 32, 8, 1, SK_ATTN_KIND_EXTEND, 128, 128);
  ql[0] = 4096, kl[0] = 4096;
  c.p.batch = 1;
  sched_set_lengths(&c, ql, kl);
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES], 0);
  check_schedule(&c, "prefill");
  c.p.batch = 2, ql[1] = 2000, kl[1] = 6000, c.p.split = 0;
  sched_set_lengths(&c, ql, kl);
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(hdr[SK_ATTN_HDR_CHUNK_TILES], 0);
  check_schedule(&c, "prefill, split 0");
  sched_free(&c);
}

/* Live lengths past the plan are clamped and flagged; nothing beyond the page table is needed. */
Test(attention_ref, scheduler_clamps_bad_lengths_and_sets_flags) {
  sched_case c;
  sched_init(&c, 3, 8, 2, 1, SK_ATTN_KIND_DECODE, 128, 128);
  int ql[] = {1, 1, 1}, kl[] = {100, 50, 70};
  sched_set_lengths(&c, ql, kl);
  c.p.max_pages = 4; /* 64 keys */
  sched_run(&c);
  const int *hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  const sk_attn_req *reqs = SCHED_REGION(&c, sk_attn_req, SK_ATTN_R_REQS);
  cr_assert(hdr[SK_ATTN_HDR_FLAGS] & SK_ATTN_ERR_KV_LEN);
  cr_assert_eq(reqs[0].kv_len, 64);
  cr_assert_eq(reqs[1].kv_len, 50);
  cr_assert_eq(reqs[2].kv_len, 64);
  check_schedule(&c, "clamped");
  c.seqlens[1] = -5;
  sched_run(&c);
  reqs = SCHED_REGION(&c, sk_attn_req, SK_ATTN_R_REQS);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert_eq(reqs[1].kv_len, 0);
  cr_assert(hdr[SK_ATTN_HDR_FLAGS] & SK_ATTN_ERR_KV_SHORT);
  check_schedule(&c, "negative");
  /* cu_seqlens_q decreasing and past max_total_q */
  c.seqlens[1] = 10, c.p.max_pages = 100;
  c.cu_q[1] = 5, c.cu_q[2] = 2, c.cu_q[3] = 9;
  c.p.max_total_q = 3;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  reqs = SCHED_REGION(&c, sk_attn_req, SK_ATTN_R_REQS);
  cr_assert(hdr[SK_ATTN_HDR_FLAGS] & SK_ATTN_ERR_Q_LEN);
  for (int b = 0; b < 3; b++) cr_assert(reqs[b].q_start + reqs[b].q_len <= 3 && reqs[b].q_len >= 0);
  check_schedule(&c, "bad cu_q");
  /* batch past max_batch */
  c.p.max_total_q = 9, c.cu_q[1] = 1, c.cu_q[2] = 2, c.cu_q[3] = 3, c.p.batch = 7;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert(hdr[SK_ATTN_HDR_FLAGS] & SK_ATTN_ERR_BATCH);
  cr_assert_eq(hdr[SK_ATTN_HDR_BATCH], 3);
  /* varlen: cu_seqlens_k past max_total_k */
  c.p.batch = 3, c.p.paged = 0, c.p.max_total_k = 100;
  c.cu_k[1] = 60, c.cu_k[2] = 120, c.cu_k[3] = 130;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  reqs = SCHED_REGION(&c, sk_attn_req, SK_ATTN_R_REQS);
  cr_assert(hdr[SK_ATTN_HDR_FLAGS] & SK_ATTN_ERR_KV_LEN);
  for (int b = 0; b < 3; b++) cr_assert_leq(reqs[b].kv_base + reqs[b].kv_len, 100);
  /* budget too small for the q tiles */
  c.p.paged = 1, c.p.max_work_items = 2, c.cu_q[1] = 3, c.cu_q[2] = 6, c.cu_q[3] = 9, c.p.max_total_q = 9;
  sched_run(&c);
  hdr = SCHED_REGION(&c, int, SK_ATTN_R_HEADER);
  cr_assert(hdr[SK_ATTN_HDR_FLAGS] & SK_ATTN_ERR_BUDGET);
  cr_assert_eq(hdr[SK_ATTN_HDR_ITEMS], 2);
  sched_free(&c);
}

/* Every configuration fits SM120's 99 KB; the layout's pieces do not overlap. */
Test(attention_ref, shared_memory_of_every_configuration_fits) {
  static const int dims[][2] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
  for (int kind = 0; kind < 3; kind++)
    for (int d = 0; d < 4; d++)
      for (int fp8 = 0; fp8 < 2; fp8++) {
        const sk_attn_config c = sk_attn_pick_config(kind, dims[d][0], dims[d][1], fp8);
        if (kind == SK_ATTN_KIND_WIDE && dims[d][0] > 128) {
          cr_assert_eq(c.tile_q, 0);
          continue;
        }
        const int bytes = sk_attn_smem_bytes(dims[d][0], dims[d][1], fp8, c);
        fprintf(stderr, "[attention] kind %d d %d/%d fp8 %d: TQ %d TK %d warps %dx%d stages %d smem %d\n", kind, dims[d][0],
                dims[d][1], fp8, c.tile_q, c.tile_kv, c.warps_q, c.warps_kv, c.stages, bytes);
        cr_assert_leq(bytes, SK_ATTN_MAX_SMEM, "kind %d d %d fp8 %d: %d bytes", kind, dims[d][0], fp8, bytes);
        cr_assert_eq(c.tile_kv % (16 * c.warps_kv), 0);
        cr_assert_eq(sk_attn_threads(c) % c.tile_kv, 0);
        cr_assert_geq(sk_attn_smem_stats_off(dims[d][0], dims[d][1], fp8, c) - sk_attn_smem_kv_off(c.tile_q, dims[d][0]),
                      sk_attn_red_bytes(c.tile_q, c.warps_kv, dims[d][1]));
      }
  cr_assert_eq(sk_attn_sched_smem_bytes(1024), 4100);
}

/* The swizzle is a permutation of each row's chunks and puts the 8 rows of every ldmatrix in 8
 * different 16-byte bank groups; the FP8 Q pair slots give lane t the K elements 4t..4t+3. */
Test(attention_ref, swizzle_is_conflict_free_and_q_slots_match_fragments) {
  static const int cprs[] = {4, 8, 12, 16, 24, 32};
  for (size_t i = 0; i < sizeof cprs / sizeof cprs[0]; i++) {
    const int cpr = cprs[i];
    for (int row = 0; row < 64; row++) {
      unsigned char hit[32] = {0};
      for (int c = 0; c < cpr; c++) {
        const int off = sk_attn_swz(row, c, cpr);
        cr_assert(off >= row * cpr * 16 && off < (row + 1) * cpr * 16);
        cr_assert_eq(hit[off / 16 - row * cpr]++, 0, "cpr %d row %d", cpr, row);
      }
    }
    for (int r0 = 0; r0 < 64; r0 += 8)
      for (int c = 0; c < cpr; c++) {
        unsigned groups = 0;
        for (int r = r0; r < r0 + 8; r++) groups |= 1u << ((sk_attn_swz(r, c, cpr) / 16) % 8);
        cr_assert_eq(groups, 0xffu, "cpr %d rows %d.. chunk %d: bank groups %x", cpr, r0, c, groups);
      }
  }
  for (int t = 0; t < 4; t++) {
    cr_assert_eq(sk_attn_q_pair_slot(2 * t), t);     /* a0/a1: slots 2t, 2t+1 = elements 4t, 4t+1 */
    cr_assert_eq(sk_attn_q_pair_slot(2 * t + 1), 4 + t); /* a2/a3: slots 2t+8.. = elements 4t+2, 4t+3 */
  }
}

/* The scratch layout: regions 1024-aligned, in order, disjoint, sized from the budgets. */
Test(attention_ref, scratch_layout) {
  const int mb = 7, mq = 33, mw = 100, mp = 55, hq = 12, dvo = 128;
  long long prev_end = 0;
  for (int r = 0; r < SK_ATTN_REGIONS; r++) {
    const long long off = sk_attn_region_offset(r, mb, mq, mw, mp, hq, dvo), n = sk_attn_region_bytes(r, mb, mq, mw, mp, hq, dvo);
    cr_assert_eq(off % SK_ATTN_SCRATCH_ALIGN, 0);
    cr_assert_geq(off, prev_end);
    prev_end = off + n;
  }
  cr_assert_eq(sk_attn_region_bytes(SK_ATTN_R_PART_O, mb, mq, mw, mp, hq, dvo), 4LL * mp * hq * dvo);
  cr_assert_eq(sk_attn_scratch_bytes(mb, mq, mw, mp, hq, dvo), sk_attn_align_up(prev_end));
}

/* ---- the op layer: bind fills the kernels' parameter block as the GPU suite's direct launches do --- */

#include "op.h"
#include "sparkinfer/attention.h"

/* A paged binding over fake device addresses (bind never reads them); returns the parameter block
 * bind made (the binding state starts with it). */
static sk_attn_params bind_paged(const sk_attn_paged_caps *caps, int64_t batch, int64_t pages, int pt_width,
                                 const int64_t *k_strides, int scale_heads, const int64_t *scale_strides) {
  const sk_op_def *def = sk_find_op("attention.paged");
  cr_assert(def);
  sk_arch_props props;
  sk_arch_table_devices("sm_120a", &props, 1);
  sk_plan *p;
  cr_assert_eq(sk_plan_select_only(def, caps, &props, &p), SK_OK, "%s", sk_last_error_message());
  const int64_t hq = caps->num_heads_q, hkv = caps->num_heads_kv, d = caps->head_dim_qk, ps = caps->page_size;
  int64_t qs[3] = {batch, hq, d}, ks[4] = {pages, ps, hkv, d}, pts[2] = {batch, pt_width}, ss[1] = {batch},
          cs[1] = {batch + 1}, sc[2] = {batch, scale_heads}, os[3] = {batch, hq, d};
  const DLDataType h = {kDLBfloat, 16, 1}, kv = caps->kv_fp8 ? (DLDataType){kDLUInt, 8, 1} : h, i32 = {kDLInt, 32, 1},
                   f32 = {kDLFloat, 32, 1};
  const DLDevice dev = {kDLCUDA, 0};
  DLTensor q = {(void *)0x100000, dev, 3, h, qs, NULL, 0}, k = {(void *)0x200000, dev, 4, kv, ks, (int64_t *)k_strides, 0},
           v = {(void *)0x300000, dev, 4, kv, ks, (int64_t *)k_strides, 0}, pt = {(void *)0x400000, dev, 2, i32, pts, NULL, 0},
           seq = {(void *)0x500000, dev, 1, i32, ss, NULL, 0}, cu = {(void *)0x600000, dev, 1, i32, cs, NULL, 0},
           ksc = {(void *)0x700000, dev, 2, f32, sc, (int64_t *)scale_strides, 0},
           vsc = {(void *)0x800000, dev, 2, f32, sc, (int64_t *)scale_strides, 0},
           out = {(void *)0x900000, dev, 3, h, os, NULL, 0};
  sk_scratch_spec spec;
  cr_assert_eq(sk_plan_scratch_spec(p, &spec), SK_OK);
  sk_binding *b;
  cr_assert_eq(sk_binding_create(p, NULL, &b), SK_OK);
  const sk_status s = sk_attn_paged_bind(b, &q, &k, &v, &pt, &seq, &cu, caps->kv_fp8 ? &ksc : NULL,
                                         caps->kv_fp8 ? &vsc : NULL, NULL, &out, NULL, (void *)0x10000000, spec.bytes);
  cr_assert_eq(s, SK_OK, "%s", sk_last_error_message());
  const sk_attn_params params = *(const sk_attn_params *)b->state;
  sk_binding_destroy(b);
  sk_plan_destroy(p);
  return params;
}

Test(attention_op, bind_fills_the_parameter_block) {
  sk_attn_paged_caps caps = SK_ATTN_PAGED_CAPS_INIT;
  caps.num_heads_q = 32, caps.num_heads_kv = 8, caps.head_dim_qk = caps.head_dim_vo = 128;
  caps.page_size = 16, caps.max_batch = 8, caps.max_pages_per_seq = 100;
  /* vLLM's combined cache: pages 2 x 16 x 8 x 128 elements apart */
  const int64_t combined[4] = {2 * 16 * 8 * 128, 8 * 128, 128, 1};
  sk_attn_params p = bind_paged(&caps, 4, 50, 128, combined, 1, NULL);
  const sk_attn_config c = sk_attn_pick_config(SK_ATTN_KIND_DECODE, 128, 128, 0);
  cr_expect_eq(p.batch, 4);
  cr_expect_eq(p.paged, 1);
  cr_expect_eq(p.page_shift, 4);
  cr_expect_eq(p.k_page_pitch, 2 * 16 * 8 * 128);
  cr_expect_eq(p.k_token_stride, 8 * 128);
  cr_expect_eq(p.q_stride, 32 * 128);
  cr_expect_eq(p.pt_stride, 128);
  cr_expect_eq(p.max_pages, 100, "min(table width, max_pages_per_seq)");
  cr_expect_eq(p.num_pages, 50);
  cr_expect_eq(p.tile_q, c.tile_q);
  cr_expect_eq(p.tile_kv, c.tile_kv);
  cr_expect_eq(p.split, 1);
  cr_expect_eq(p.max_batch, 8);
  cr_expect_eq(p.window_right, 0, "paged is causal");
  cr_expect_eq(p.lse_natural, 0);
  cr_expect_float_eq(p.sm_scale, 1.0f / sqrtf(128.0f), 1e-7);
  cr_expect_gt(p.attn_ctas, 0);
  cr_expect_geq(p.max_work_items, sk_attn_min_work_items(8, 8, 4, c.tile_q));
  cr_expect_null(p.k_scale);
  /* FP8 with one scale for all (a stride-0 [B, 1] view) and per (request, head) */
  caps.kv_fp8 = 1;
  const int64_t zero[2] = {0, 0};
  p = bind_paged(&caps, 4, 50, 100, NULL, 1, zero);
  cr_expect_eq(p.k_scale_sb, 0);
  cr_expect_eq(p.k_scale_sh, 0);
  cr_expect_eq(p.pt_stride, 100);
  p = bind_paged(&caps, 4, 50, 100, NULL, 8, NULL);
  cr_expect_eq(p.k_scale_sb, 8);
  cr_expect_eq(p.k_scale_sh, 1);
  cr_expect_eq(p.tile_kv, sk_attn_pick_config(SK_ATTN_KIND_DECODE, 128, 128, 1).tile_kv);
  /* Extend picks the wide tile where the average request fills it (D <= 128). */
  caps.kv_fp8 = 0;
  caps.mode = SK_ATTN_EXTEND;
  caps.max_total_q = 4096;
  const sk_op_def *def = sk_find_op("attention.paged");
  sk_arch_props props;
  sk_arch_table_devices("sm_90a", &props, 1);
  sk_plan *pl;
  cr_assert_eq(sk_plan_select_only(def, &caps, &props, &pl), SK_OK, "%s", sk_last_error_message());
  cr_expect_not_null(pl->requests[2].name, "an extend plan of D 128 resolves the wide tile too");
  sk_plan_destroy(pl);
}

Test(attention_op, caps_are_validated) {
  const sk_op_def *def = sk_find_op("attention.paged");
  sk_arch_props props;
  sk_arch_table_devices("sm_120a", &props, 1);
  sk_attn_paged_caps good = SK_ATTN_PAGED_CAPS_INIT;
  good.num_heads_q = 8, good.num_heads_kv = 2, good.head_dim_qk = good.head_dim_vo = 128;
  good.max_batch = 4, good.max_pages_per_seq = 10;
  sk_plan *p;
  cr_assert_eq(sk_plan_select_only(def, &good, &props, &p), SK_OK, "%s", sk_last_error_message());
  sk_plan_destroy(p);
  struct {
    const char *what;
    sk_status want;
    void (*edit)(sk_attn_paged_caps *);
  } bad[] = {
      {"GQA ratio", SK_ERR_INVALID_ARGUMENT, NULL}, {"head dims", SK_ERR_UNSUPPORTED, NULL}, {"page size", SK_ERR_INVALID_ARGUMENT, NULL},
      {"decode total q", SK_ERR_INVALID_ARGUMENT, NULL}, {"window", SK_ERR_INVALID_ARGUMENT, NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sk_attn_paged_caps c = good;
    if (i == 0) c.num_heads_q = 7;
    if (i == 1) c.head_dim_qk = 96;
    if (i == 2) c.page_size = 24;
    if (i == 3) c.max_total_q = 9;
    if (i == 4) c.window_left = -2;
    cr_expect_eq(sk_plan_select_only(def, &c, &props, &p), bad[i].want, "%s: %s", bad[i].what, sk_last_error_message());
  }
}
