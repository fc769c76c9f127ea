/* CPU references of attention.paged / attention.varlen. See attention/ref.h. */
#include "attention/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int skref_attn_kv_len(const skref_attn_problem *pr, int b) {
  return pr->paged ? pr->cache_seqlens[b] : pr->cu_seqlens_k[b + 1] - pr->cu_seqlens_k[b];
}

static double kv_value(const void *base, skref_kv_format f, long long idx) {
  if (f == SKREF_KV_E4M3) return skref_e4m3_decode(((const uint8_t *)base)[idx]);
  const uint16_t bits = ((const uint16_t *)base)[idx];
  return f == SKREF_KV_BF16 ? skref_bf16_to_float(bits) : skref_fp16_to_float(bits);
}

/* Element index of key `pos`, element `d` of head kv_head. */
static long long kv_index(const skref_attn_problem *pr, int b, int pos, int kv_head, int dim, int d, int is_v) {
  const long long tok = is_v ? pr->v_token_stride : pr->k_token_stride;
  if (!pr->paged) return (long long)(pr->cu_seqlens_k[b] + pos) * tok + (long long)kv_head * dim + d;
  const int page = pr->page_table[(long long)b * pr->pt_stride + pos / pr->page_size];
  const long long pitch = is_v ? pr->v_page_pitch : pr->k_page_pitch;
  return (long long)page * pitch + (long long)(pos % pr->page_size) * tok + (long long)kv_head * dim + d;
}

void skref_attn_gather(const skref_attn_problem *pr, int b, int kv_head, double *k, double *v) {
  const int n = skref_attn_kv_len(pr, b);
  double ks = 1.0, vs = 1.0;
  if (pr->kv_format == SKREF_KV_E4M3) {
    if (pr->k_scale) ks = pr->k_scale[(long long)b * pr->k_scale_sb + (long long)kv_head * pr->k_scale_sh];
    if (pr->v_scale) vs = pr->v_scale[(long long)b * pr->v_scale_sb + (long long)kv_head * pr->v_scale_sh];
  }
  for (int pos = 0; pos < n; pos++) {
    for (int d = 0; d < pr->dqk; d++)
      k[(size_t)pos * pr->dqk + d] = kv_value(pr->k, pr->kv_format, kv_index(pr, b, pos, kv_head, pr->dqk, d, 0)) * ks;
    for (int d = 0; d < pr->dvo; d++)
      v[(size_t)pos * pr->dvo + d] = kv_value(pr->v, pr->kv_format, kv_index(pr, b, pos, kv_head, pr->dvo, d, 1)) * vs;
  }
}

double skref_attn_row(const double *q, const double *k, const double *v, int dqk, int dvo, int lo, int hi,
                      double scale, int has_sink, double sink, double *out) {
  for (int d = 0; d < dvo; d++) out[d] = 0.0;
  double mx = has_sink ? sink : -INFINITY;
  double *s = hi > lo ? malloc(sizeof(double) * (size_t)(hi - lo)) : NULL;
  for (int j = lo; j < hi; j++) {
    double dot = 0.0;
    for (int d = 0; d < dqk; d++) dot += q[d] * k[(size_t)j * dqk + d];
    s[j - lo] = dot * scale;
    if (s[j - lo] > mx) mx = s[j - lo];
  }
  if (mx == -INFINITY) {
    free(s);
    return -INFINITY;
  }
  double den = has_sink ? exp(sink - mx) : 0.0;
  for (int j = lo; j < hi; j++) {
    const double w = exp(s[j - lo] - mx);
    den += w;
    for (int d = 0; d < dvo; d++) out[d] += w * v[(size_t)j * dvo + d];
  }
  for (int d = 0; d < dvo; d++) out[d] /= den;
  free(s);
  return (mx + log(den)) / log(2.0);
}

double skref_attn_merge(int n, const double *o, const double *lse2, int dvo, int has_sink, double sink, double *out) {
  const double sink2 = has_sink ? sink / log(2.0) : -INFINITY;
  double mx = sink2;
  for (int c = 0; c < n; c++)
    if (lse2[c] > mx) mx = lse2[c];
  for (int d = 0; d < dvo; d++) out[d] = 0.0;
  if (mx == -INFINITY) return -INFINITY;
  double den = has_sink ? exp2(sink2 - mx) : 0.0;
  for (int c = 0; c < n; c++) {
    if (lse2[c] == -INFINITY) continue;
    const double w = exp2(lse2[c] - mx);
    den += w;
    for (int d = 0; d < dvo; d++) out[d] += w * o[(size_t)c * dvo + d];
  }
  for (int d = 0; d < dvo; d++) out[d] /= den;
  return mx + log2(den);
}

/* Shared driver: chunk_keys <= 0 is the unsplit reference. */
static void attention_driver(const skref_attn_problem *pr, int chunk_keys, double *out, double *lse2) {
  const int group = pr->hq / pr->hkv;
  double *qv = malloc(sizeof(double) * (size_t)pr->dqk), *ov = malloc(sizeof(double) * (size_t)pr->dvo);
  for (int b = 0; b < pr->batch; b++) {
    const int q0 = pr->cu_seqlens_q[b], ql = pr->cu_seqlens_q[b + 1] - q0, n = skref_attn_kv_len(pr, b);
    if (ql <= 0) continue;
    double *k = malloc(sizeof(double) * ((size_t)n * pr->dqk + 1)), *v = malloc(sizeof(double) * ((size_t)n * pr->dvo + 1));
    const int kv_begin = sk_attn_row_lo(0, n - ql, pr->window_left);
    const int chunks = chunk_keys > 0 && n > kv_begin ? (n - kv_begin + chunk_keys - 1) / chunk_keys : 1;
    double *po = malloc(sizeof(double) * (size_t)chunks * pr->dvo), *pl = malloc(sizeof(double) * (size_t)chunks);
    for (int kvh = 0; kvh < pr->hkv; kvh++) {
      skref_attn_gather(pr, b, kvh, k, v);
      for (int i = 0; i < ql; i++) {
        const int lo = sk_attn_row_lo(i, n - ql, pr->window_left), hi = sk_attn_row_hi(i, n - ql, pr->window_right, n);
        for (int hg = 0; hg < group; hg++) {
          const int h = kvh * group + hg;
          const uint16_t *qs = pr->q + (long long)(q0 + i) * pr->q_stride + (long long)h * pr->dqk;
          for (int d = 0; d < pr->dqk; d++) qv[d] = skref_half_to_float(qs[d], pr->q_dtype);
          const int has_sink = pr->sinks != NULL;
          const double sink = has_sink ? pr->sinks[h] : 0.0;
          double l2;
          if (chunk_keys <= 0) {
            l2 = skref_attn_row(qv, k, v, pr->dqk, pr->dvo, lo, hi > lo ? hi : lo, pr->sm_scale, has_sink, sink, ov);
          } else {
            for (int c = 0; c < chunks; c++) {
              const int clo = kv_begin + c * chunk_keys, chi = clo + chunk_keys < n ? clo + chunk_keys : n;
              const int a = lo > clo ? lo : clo, e = hi < chi ? hi : chi;
              pl[c] = skref_attn_row(qv, k, v, pr->dqk, pr->dvo, a, e > a ? e : a, pr->sm_scale, 0, 0.0,
                                     po + (size_t)c * pr->dvo);
            }
            l2 = skref_attn_merge(chunks, po, pl, pr->dvo, has_sink, sink, ov);
          }
          const size_t row = (size_t)(q0 + i) * pr->hq + h;
          if (out) memcpy(out + row * pr->dvo, ov, sizeof(double) * (size_t)pr->dvo);
          if (lse2) lse2[row] = l2;
        }
      }
    }
    free(k), free(v), free(po), free(pl);
  }
  free(qv), free(ov);
}

void skref_attention(const skref_attn_problem *pr, double *out, double *lse2) { attention_driver(pr, 0, out, lse2); }

void skref_attention_split(const skref_attn_problem *pr, int chunk_keys, double *out, double *lse2) {
  attention_driver(pr, chunk_keys, out, lse2);
}

/* ---- scheduler replay ------------------------------------------------------------------------ */
unsigned skref_attn_schedule(const sk_attn_params *p, int dvo, void *scratch) {
  char *base = scratch;
  int *hdr = (int *)(base + sk_attn_params_region(p, SK_ATTN_R_HEADER, dvo));
  sk_attn_item *items = (sk_attn_item *)(base + sk_attn_params_region(p, SK_ATTN_R_ITEMS, dvo));
  sk_attn_req *reqs = (sk_attn_req *)(base + sk_attn_params_region(p, SK_ATTN_R_REQS, dvo));
  sk_attn_merge *merges = (sk_attn_merge *)(base + sk_attn_params_region(p, SK_ATTN_R_MERGE, dvo));
  unsigned flags = 0;
  int batch = p->batch;
  if (batch < 0 || batch > p->max_batch) flags |= SK_ATTN_ERR_BATCH, batch = sk_attn_clamp(batch, 0, p->max_batch);
  const int hkv = p->num_heads_kv, group = p->num_heads_q / hkv;
  const long long cap = p->paged ? (long long)p->max_pages << p->page_shift : p->max_total_k;
  const int kv_cap = cap < 0x7fffffffLL ? (int)cap : 0x7fffffff;
  unsigned cand_items[SK_ATTN_NCAND] = {0}, cand_part[SK_ATTN_NCAND] = {0};
  int maxspan = 0;
  for (int b = 0; b < batch; b++) {
    const int q0 = p->cu_seqlens_q[b], q1 = p->cu_seqlens_q[b + 1];
    const int k0 = p->paged ? 0 : p->cu_seqlens_k[b], k1 = p->paged ? p->cache_seqlens[b] : p->cu_seqlens_k[b + 1];
    sk_attn_req r = {0, 0, 0, 0, 0, 0, 0, 0};
    flags |= sk_attn_make_request(q0, q1, k0, k1, p->paged, p->max_total_q, kv_cap, p->window_left, group, p->tile_q,
                                  p->tile_kv, &r);
    sk_attn_accumulate(&r, p->tile_kv, p->fixed_chunk_tiles, cand_items, cand_part);
    maxspan = sk_attn_max(maxspan, sk_attn_span_tiles(&r, p->tile_kv));
    reqs[b] = r;
  }
  long long cost[SK_ATTN_NCAND];
  for (int c = 0; c < SK_ATTN_NCAND; c++)
    cost[c] = sk_attn_candidate_cost(c, cand_items[c], cand_part[c], maxspan, hkv, p->attn_ctas, p->tile_kv,
                                     p->max_work_items, p->max_partial_rows, p->fixed_chunk_tiles);
  const int chunk = sk_attn_pick_chunk(cost, maxspan, p->split, p->fixed_chunk_tiles);
  int n_items = 0, n_part = 0, n_merge = 0;
  for (int b = 0; b < batch; b++) {
    sk_attn_req *r = &reqs[b];
    r->n_chunks = sk_attn_chunks(sk_attn_span_tiles(r, p->tile_kv), chunk);
    r->partial_off = r->n_chunks > 1 ? n_part : 0;
    for (int k = 0; k < r->q_tiles * r->n_chunks; k++, n_items++)
      if (n_items < p->max_work_items) items[n_items] = sk_attn_request_item(r, b, k);
    if (r->n_chunks > 1) {
      for (int i = 0; i < r->q_len; i++, n_merge++)
        if (n_merge < p->max_total_q) {
          const sk_attn_merge e = {r->q_start + i, r->partial_off + i * r->n_chunks, r->n_chunks, b};
          merges[n_merge] = e;
        }
      n_part += r->q_len * r->n_chunks;
    }
  }
  if (n_items > p->max_work_items) flags |= SK_ATTN_ERR_BUDGET, n_items = p->max_work_items;
  if (n_merge > p->max_total_q) n_merge = p->max_total_q;
  sk_attn_write_header(hdr, n_items, chunk, n_merge, flags, hkv, sk_attn_clamp(p->cu_seqlens_q[batch], 0, p->max_total_q),
                       n_part, batch);
  return flags;
}

/* ---- random test problems ------------------------------------------------------------------- */
static void fill_half(skref_rng *rng, uint16_t *dst, size_t n, skref_kv_format f) {
  for (size_t i = 0; i < n; i++) {
    const float x = (float)skref_rng_normal(rng);
    dst[i] = f == SKREF_KV_FP16 ? skref_float_to_fp16(x) : skref_float_to_bf16(x);
  }
}

void skref_attn_make(skref_rng *rng, const skref_attn_spec *s, skref_attn_buffers *o) {
  memset(o, 0, sizeof *o);
  const int B = s->batch, e4m3 = s->kv_format == SKREF_KV_E4M3, eb = e4m3 ? 1 : 2;
  o->cu_seqlens_q = calloc((size_t)B + 1, sizeof(int));
  o->cu_seqlens_k = calloc((size_t)B + 1, sizeof(int));
  o->cache_seqlens = calloc((size_t)B + 1, sizeof(int));
  for (int b = 0; b < B; b++) {
    o->cu_seqlens_q[b + 1] = o->cu_seqlens_q[b] + s->q_lens[b];
    o->cu_seqlens_k[b + 1] = o->cu_seqlens_k[b] + s->kv_lens[b];
    o->cache_seqlens[b] = s->kv_lens[b];
  }
  o->total_q = o->cu_seqlens_q[B];
  o->total_k = o->cu_seqlens_k[B];
  o->q_bytes = (size_t)o->total_q * s->hq * s->dqk * 2;
  o->q = malloc(o->q_bytes + 2);
  fill_half(rng, o->q, (size_t)o->total_q * s->hq * s->dqk, s->q_dtype == SKREF_FP16 ? SKREF_KV_FP16 : SKREF_KV_BF16);

  /* Rows of K / V (token rows of one head set): paged pages * page_size, contiguous total_k. */
  long long k_tok = (long long)s->hkv * s->dqk, v_tok = (long long)s->hkv * s->dvo, k_pitch = 0, v_pitch = 0;
  size_t rows;
  if (s->paged) {
    int used = 0;
    for (int b = 0; b < B; b++) used += (s->kv_lens[b] + s->page_size - 1) / s->page_size;
    o->num_pages = used + s->extra_pages;
    rows = (size_t)o->num_pages * s->page_size;
    if (s->combined) {
      k_pitch = v_pitch = 2LL * s->page_size * k_tok;
      o->kv_bytes = rows * (size_t)(k_tok + v_tok) * eb;
      o->k_offset = 0;
      o->v_offset = (size_t)s->page_size * k_tok * eb;
    } else {
      k_pitch = s->page_size * k_tok, v_pitch = s->page_size * v_tok;
      o->kv_bytes = rows * (size_t)(k_tok + v_tok) * eb;
      o->k_offset = 0;
      o->v_offset = rows * (size_t)k_tok * eb;
    }
    /* A random permutation of all page ids, handed out in order. */
    int *perm = malloc(sizeof(int) * (size_t)(o->num_pages + 1));
    for (int i = 0; i < o->num_pages; i++) perm[i] = i;
    for (int i = o->num_pages - 1; i > 0; i--) {
      const int j = (int)skref_rng_below(rng, (uint64_t)i + 1), t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    o->page_table = malloc(sizeof(int) * ((size_t)B * s->pt_width + 1));
    int next = 0;
    for (int b = 0; b < B; b++)
      for (int e = 0; e < s->pt_width; e++)
        o->page_table[(size_t)b * s->pt_width + e] = e * s->page_size < s->kv_lens[b] ? perm[next++] : -1;
    free(perm);
  } else {
    rows = (size_t)o->total_k;
    o->kv_bytes = rows * (size_t)(k_tok + v_tok) * eb;
    o->k_offset = 0;
    o->v_offset = rows * (size_t)k_tok * eb;
  }
  o->kv = calloc(o->kv_bytes + 16, 1);

  /* Values: normal(0, 1), rounded to the format; E4M3 per scale group (amax / 448). */
  const int groups = s->scale_mode == 0 ? B : s->scale_mode == 1 ? B * s->hkv : 1;
  o->scale_count = groups;
  if (e4m3) {
    o->k_scale = malloc(sizeof(float) * (size_t)groups);
    o->v_scale = malloc(sizeof(float) * (size_t)groups);
    for (int g = 0; g < groups; g++) /* amax of normal data grows slowly; vary it per group */
      o->k_scale[g] = (float)((3.0 + skref_rng_uniform(rng)) / 448.0), o->v_scale[g] = (float)((3.0 + skref_rng_uniform(rng)) / 448.0);
  }
  skref_attn_problem *pr = &o->pr;
  *pr = (skref_attn_problem){.batch = B, .hq = s->hq, .hkv = s->hkv, .dqk = s->dqk, .dvo = s->dvo,
                             .cu_seqlens_q = o->cu_seqlens_q, .q = o->q, .q_dtype = s->q_dtype,
                             .q_stride = (long long)s->hq * s->dqk, .paged = s->paged,
                             .k = (char *)o->kv + o->k_offset, .v = (char *)o->kv + o->v_offset,
                             .kv_format = s->kv_format, .k_token_stride = k_tok, .v_token_stride = v_tok,
                             .k_page_pitch = k_pitch, .v_page_pitch = v_pitch, .page_size = s->page_size,
                             .pt_stride = s->pt_width, .page_table = o->page_table,
                             .cache_seqlens = o->cache_seqlens, .cu_seqlens_k = o->cu_seqlens_k,
                             .k_scale = o->k_scale, .v_scale = o->v_scale,
                             .k_scale_sb = s->scale_mode == 0 ? 1 : s->scale_mode == 1 ? s->hkv : 0,
                             .k_scale_sh = s->scale_mode == 1 ? 1 : 0,
                             .v_scale_sb = s->scale_mode == 0 ? 1 : s->scale_mode == 1 ? s->hkv : 0,
                             .v_scale_sh = s->scale_mode == 1 ? 1 : 0,
                             .sm_scale = s->sm_scale > 0 ? s->sm_scale : 1.0 / sqrt((double)s->dqk),
                             .window_left = s->window_left, .window_right = s->window_right};
  /* Every key row of every request and head, through the problem's own addressing. */
  for (int b = 0; b < B; b++)
    for (int pos = 0; pos < s->kv_lens[b]; pos++)
      for (int h = 0; h < s->hkv; h++)
        for (int is_v = 0; is_v < 2; is_v++) {
          const int dim = is_v ? s->dvo : s->dqk;
          const double sc = !e4m3 ? 1.0 : is_v ? pr->v_scale[(long long)b * pr->v_scale_sb + (long long)h * pr->v_scale_sh]
                                              : pr->k_scale[(long long)b * pr->k_scale_sb + (long long)h * pr->k_scale_sh];
          for (int d = 0; d < dim; d++) {
            const long long idx = kv_index(pr, b, pos, h, dim, d, is_v);
            const float x = (float)skref_rng_normal(rng);
            if (e4m3) ((uint8_t *)(is_v ? pr->v : pr->k))[idx] = skref_e4m3_encode((float)(x / sc));
            else ((uint16_t *)(is_v ? pr->v : pr->k))[idx] =
                s->kv_format == SKREF_KV_FP16 ? skref_float_to_fp16(x) : skref_float_to_bf16(x);
          }
        }
  if (s->sinks) {
    o->sinks = malloc(sizeof(float) * (size_t)s->hq);
    for (int h = 0; h < s->hq; h++) o->sinks[h] = (float)(2.0 * skref_rng_normal(rng));
    pr->sinks = o->sinks;
  }
}

void skref_attn_free(skref_attn_buffers *b) {
  free(b->q), free(b->kv), free(b->page_table), free(b->cache_seqlens), free(b->cu_seqlens_q), free(b->cu_seqlens_k);
  free(b->k_scale), free(b->v_scale), free(b->sinks);
  memset(b, 0, sizeof *b);
}
