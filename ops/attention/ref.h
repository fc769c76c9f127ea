/* CPU references of attention.paged and attention.varlen (C11, double precision, tests only).
 * Contract: ops/attention/attention.md. The scheduling math comes from attention/layout.cuh, the
 * header the device scheduler uses, so skref_attn_schedule replays the device's work list. */
#ifndef SKREF_ATTENTION_H
#define SKREF_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "attention/layout.cuh"
#include "common/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum skref_kv_format { SKREF_KV_BF16 = 0, SKREF_KV_FP16 = 1, SKREF_KV_E4M3 = 2 } skref_kv_format;

/* One problem; the fields mirror sk_attn_params (host pointers). Paged: k/v [pages, page_size,
 * Hkv, D] with element strides k_token_stride inside a page and k_page_pitch between pages,
 * page_table [batch, pt_stride], cache_seqlens [batch]. Contiguous: k/v [total_k, Hkv, D] rows of
 * k_token_stride elements, cu_seqlens_k [batch + 1]. E4M3 KV: value = decode(code) * scale with
 * scale k_scale[b * k_scale_sb + kv_head * k_scale_sh] (NULL: 1). Lengths must be valid (the
 * reference does not clamp). */
typedef struct skref_attn_problem {
  int batch, hq, hkv, dqk, dvo;
  const int *cu_seqlens_q;
  const uint16_t *q;
  skref_dtype q_dtype;
  long long q_stride;
  int paged;
  const void *k, *v;
  skref_kv_format kv_format;
  long long k_token_stride, v_token_stride, k_page_pitch, v_page_pitch;
  int page_size, pt_stride;
  const int *page_table, *cache_seqlens, *cu_seqlens_k;
  const float *k_scale, *v_scale;
  int k_scale_sb, k_scale_sh, v_scale_sb, v_scale_sh;
  const float *sinks; /* [hq] natural-log logits or NULL */
  double sm_scale;
  int window_left, window_right; /* -1 unbounded; causal: window_right = 0 */
} skref_attn_problem;

/* Keys of request b (paged: cache_seqlens[b]; contiguous: cu_seqlens_k[b+1] - cu_seqlens_k[b]). */
int skref_attn_kv_len(const skref_attn_problem *pr, int b);
/* Request b's keys and values of one KV head, dequantised to double: k [kv_len, dqk], v [kv_len, dvo]. */
void skref_attn_gather(const skref_attn_problem *pr, int b, int kv_head, double *k, double *v);

/* One query row q [dqk] over keys [lo, hi) of k / v (n rows): out [dvo] = softmax-weighted values
 * (the sink, when has_sink, joins the denominator only); returns the base-2 LSE of the scores
 * (scaled by `scale`) and the sink. No key and no sink: out 0, -inf. */
double skref_attn_row(const double *q, const double *k, const double *v, int dqk, int dvo, int lo, int hi,
                      double scale, int has_sink, double sink, double *out);

/* Folds n partials (outputs o [n, dvo], each normalised by its own sum, base-2 LSEs lse2 [n];
 * -inf partials skipped) and an optional sink into out [dvo]; returns the base-2 LSE. */
double skref_attn_merge(int n, const double *o, const double *lse2, int dvo, int has_sink, double sink, double *out);

/* The whole problem: out [total_q, hq, dvo], lse2 [total_q, hq] base 2 (either may be NULL). Rows
 * [0, cu_seqlens_q[batch]) are written. */
void skref_attention(const skref_attn_problem *pr, double *out, double *lse2);

/* The same with every request's keys [kv_begin, kv_len) cut into chunks of chunk_keys (the
 * device's split-KV; <= 0: unsplit) and the partials merged with skref_attn_merge. */
void skref_attention_split(const skref_attn_problem *pr, int chunk_keys, double *out, double *lse2);

/* CPU replay of the device scheduler (attention/schedule.cuh): p's length pointers are host
 * pointers; writes scratch regions 0-3 of a host buffer of sk_attn_scratch_bytes(...) bytes (the
 * unit counter as 0, regions 4-5 untouched) exactly as the device does, and returns the flags. */
unsigned skref_attn_schedule(const sk_attn_params *p, int dvo, void *scratch);

/* ---- random test problems ------------------------------------------------------------------- */
typedef struct skref_attn_spec {
  int batch, hq, hkv, dqk, dvo;
  skref_dtype q_dtype;
  skref_kv_format kv_format;
  int paged;          /* 1 paged, 0 contiguous (varlen) */
  int page_size;      /* paged: power of two */
  int combined;       /* paged: K and V pages interleaved as vLLM's [blocks, 2, page, Hkv, D] (dqk == dvo) */
  int pt_width;       /* paged: page-table entries per request (>= the longest request's pages) */
  int extra_pages;    /* paged: pages beyond those in use (random ids spread over all) */
  int scale_mode;     /* E4M3: 0 per request [batch], 1 per (request, head) [batch, hkv], 2 one (stride 0) */
  int sinks;          /* 1: random sinks [hq] */
  int window_left, window_right;
  double sm_scale;    /* 0: dqk^-0.5 */
  const int *q_lens;  /* [batch] */
  const int *kv_lens; /* [batch] */
} skref_attn_spec;

/* Owned buffers of one problem; pr points into them. Page-table entries past a request's pages
 * are -1, so a kernel that reads one flags SK_ATTN_ERR_PAGE_ID. q, K, V: normal(0, 1) data
 * (E4M3: quantised with scale amax / 448 over the scale's group). */
typedef struct skref_attn_buffers {
  skref_attn_problem pr;
  uint16_t *q;
  void *kv;                  /* one allocation holding K and V */
  size_t q_bytes, kv_bytes;  /* sizes of q and kv */
  size_t k_offset, v_offset; /* bytes from kv to K and to V */
  int *page_table, *cache_seqlens, *cu_seqlens_q, *cu_seqlens_k;
  float *k_scale, *v_scale, *sinks;
  int num_pages, total_q, total_k, scale_count;
} skref_attn_buffers;

void skref_attn_make(skref_rng *rng, const skref_attn_spec *spec, skref_attn_buffers *out);
void skref_attn_free(skref_attn_buffers *b);

#ifdef __cplusplus
}
#endif
#endif
