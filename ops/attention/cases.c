/* ops/attention/cases.c - the harness's case tables for attention.paged and attention.varlen
 * (tests/harness/harness.h). Problems come from skref_attn_make (ops/attention/ref.c: random
 * normal q/K/V, random page permutations, FP8 caches quantised per scale group); the reference is
 * skref_attention in double precision. Bounds (ops/attention/attention.md): bf16/fp16 KV max |err|
 * 0.02 and cosine >= 0.99999; FP8 KV 0.06 and 0.999 against the reference on the same FP8 cache;
 * LSE within 0.05. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention/ref.h"
#include "harness/harness.h"
#include "sparkinfer/attention.h"

/* One problem shape: every field of skref_attn_spec but the lengths, which follow a pattern. */
typedef struct attn_case {
  const char *label;
  int paged, batch, hq, hkv, dqk, dvo, fp16, fp8, page_size, combined, extra_pages, scale_mode, sinks;
  int window_left, window_right; /* varlen: right 0 causal, -1 bidirectional; paged: right is 0 */
  int q_len;                     /* per request (decode: 1) */
  int kv_len;                    /* longest request's keys; the pattern spreads the others */
  int pattern;                   /* 0 all equal, 1 spread over [kv_len / batch, kv_len], 2 one long among short */
  unsigned flags;
} attn_case;

enum { PAT_EQUAL, PAT_SPREAD, PAT_ONE_LONG };
#define T SKH_TEST
#define G SKH_GPU
#define BENCH SKH_BENCH
#define REUSE (1u << 16) /* bound to entry "reuse_schedule" (CPU validation only: alone it has no work list) */

/* label, paged, B, HQ, HKV, DQK, DVO, fp16, fp8, page, combined, extra pages, scale mode, sinks,
 * window (left, right), q_len, kv_len, pattern, flags */
static const attn_case paged_cases[] = {
    {"decode llama 32/8/128", 1, 4, 32, 8, 128, 128, 0, 0, 16, 0, 3, 0, 0, -1, 0, 1, 300, PAT_SPREAD, T},
    {"decode kv 1", 1, 3, 8, 8, 64, 64, 0, 0, 16, 0, 0, 0, 0, -1, 0, 1, 1, PAT_EQUAL, T},
    {"decode exact pages", 1, 2, 16, 4, 128, 128, 0, 0, 64, 0, 1, 0, 0, -1, 0, 1, 256, PAT_EQUAL, G},
    {"decode fp16 page 128", 1, 5, 8, 2, 128, 128, 1, 0, 128, 0, 2, 0, 0, -1, 0, 1, 1000, PAT_SPREAD, G},
    {"decode one long", 1, 6, 32, 4, 128, 128, 0, 0, 32, 0, 0, 0, 0, -1, 0, 1, 6000, PAT_ONE_LONG, G},
    {"decode gpt-oss sinks window", 1, 4, 64, 8, 64, 64, 0, 0, 16, 0, 1, 0, 1, 128, 0, 1, 700, PAT_SPREAD, G},
    {"decode qwen3.5 8/1/256", 1, 3, 8, 1, 256, 256, 0, 0, 64, 0, 0, 0, 0, -1, 0, 1, 900, PAT_SPREAD, G},
    {"decode mimo 192/128", 1, 3, 16, 2, 192, 128, 0, 0, 16, 0, 0, 0, 0, -1, 0, 1, 400, PAT_SPREAD, G},
    {"decode vllm combined", 1, 4, 16, 4, 128, 128, 0, 0, 16, 1, 2, 0, 0, -1, 0, 1, 333, PAT_SPREAD, T},
    {"decode fp8 per request", 1, 4, 32, 8, 128, 128, 0, 1, 16, 0, 0, 0, 0, -1, 0, 1, 448, PAT_SPREAD, T},
    {"decode fp8 per head", 1, 3, 16, 4, 128, 128, 0, 1, 64, 0, 0, 1, 0, -1, 0, 1, 300, PAT_SPREAD, G},
    {"decode fp8 one scale", 1, 2, 8, 1, 256, 256, 0, 1, 64, 0, 0, 2, 0, -1, 0, 1, 250, PAT_SPREAD, G},
    {"extend q 8 over 200", 1, 3, 32, 8, 128, 128, 0, 0, 16, 0, 1, 0, 0, -1, 0, 8, 200, PAT_SPREAD, T},
    {"decode reuse_schedule fp8", 1, 4, 32, 8, 128, 128, 0, 1, 16, 0, 0, 0, 0, -1, 0, 1, 448, PAT_SPREAD, SKH_CPU | REUSE},
    {"extend q 6 small k", 1, 2, 8, 2, 64, 64, 0, 0, 16, 0, 0, 0, 0, -1, 0, 6, 7, PAT_EQUAL, G},
    {"extend q 512 over 4096", 1, 2, 32, 8, 128, 128, 0, 0, 64, 0, 0, 0, 0, -1, 0, 512, 4096, PAT_SPREAD, G},
    {"extend window sinks", 1, 2, 64, 8, 64, 64, 0, 0, 16, 0, 0, 0, 1, 128, 0, 64, 1024, PAT_EQUAL, G},
    {"extend fp8", 1, 2, 16, 4, 128, 128, 0, 1, 64, 0, 0, 0, 0, -1, 0, 5, 2048, PAT_SPREAD, G},
    {"extend d256", 1, 2, 8, 1, 256, 256, 0, 0, 64, 0, 0, 0, 0, -1, 0, 100, 600, PAT_SPREAD, G},
    /* bench: decode at batch x context, prefill */
    {"bench decode llama-3.1-8b b8 8k", 1, 8, 32, 8, 128, 128, 0, 0, 16, 0, 0, 0, 0, -1, 0, 1, 8192, PAT_EQUAL, BENCH},
    {"bench decode llama-3.1-8b b8 8k fp8", 1, 8, 32, 8, 128, 128, 0, 1, 16, 0, 0, 0, 0, -1, 0, 1, 8192, PAT_EQUAL, BENCH},
    {"bench decode llama-3.1-8b b64 8k", 1, 64, 32, 8, 128, 128, 0, 0, 16, 0, 0, 0, 0, -1, 0, 1, 8192, PAT_EQUAL, BENCH},
    {"bench decode llama-3.1-8b b64 8k fp8", 1, 64, 32, 8, 128, 128, 0, 1, 16, 0, 0, 0, 0, -1, 0, 1, 8192, PAT_EQUAL, BENCH},
    {"bench decode llama-3.3-70b b8 16k", 1, 8, 64, 8, 128, 128, 0, 0, 16, 0, 0, 0, 0, -1, 0, 1, 16384, PAT_EQUAL, BENCH},
    {"bench decode llama-3.3-70b b8 16k fp8", 1, 8, 64, 8, 128, 128, 0, 1, 16, 0, 0, 0, 0, -1, 0, 1, 16384, PAT_EQUAL, BENCH},
    {"bench decode qwen3-30b b16 16k", 1, 16, 32, 4, 128, 128, 0, 0, 16, 0, 0, 0, 0, -1, 0, 1, 16384, PAT_EQUAL, BENCH},
    {"bench decode gpt-oss b16 8k", 1, 16, 64, 8, 64, 64, 0, 0, 16, 0, 0, 0, 1, 128, 0, 1, 8192, PAT_EQUAL, BENCH},
    {"bench decode qwen3.5 b8 32k", 1, 8, 8, 1, 256, 256, 0, 0, 64, 0, 0, 0, 0, -1, 0, 1, 32768, PAT_EQUAL, BENCH},
    {"bench decode llama-3.1-8b b1 128k", 1, 1, 32, 8, 128, 128, 0, 0, 16, 0, 0, 0, 0, -1, 0, 1, 131072, PAT_EQUAL, BENCH},
    {"bench prefill d128 q2048", 1, 1, 32, 8, 128, 128, 0, 0, 64, 0, 0, 0, 0, -1, 0, 2048, 2048, PAT_EQUAL, BENCH},
    {"bench prefill d128 q8192", 1, 1, 32, 8, 128, 128, 0, 0, 64, 0, 0, 0, 0, -1, 0, 8192, 8192, PAT_EQUAL, BENCH},
};

static const attn_case varlen_cases[] = {
    {"causal gqa", 0, 3, 16, 4, 128, 128, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 300, PAT_SPREAD, T},
    {"bidirectional", 0, 2, 8, 8, 64, 64, 0, 0, 0, 0, 0, 0, 0, -1, -1, 0, 200, PAT_SPREAD, T},
    {"causal reuse_schedule", 0, 3, 16, 4, 128, 128, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 300, PAT_SPREAD, SKH_CPU | REUSE},
    {"window sinks", 0, 3, 4, 2, 64, 64, 0, 0, 0, 0, 0, 0, 1, 64, 16, 0, 257, PAT_SPREAD, G},
    {"d256 dv128", 0, 2, 8, 1, 192, 128, 1, 0, 0, 0, 0, 0, 0, -1, 0, 0, 129, PAT_SPREAD, G},
    {"d256", 0, 2, 8, 4, 256, 256, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 500, PAT_ONE_LONG, G},
    {"length 1", 0, 4, 8, 2, 128, 128, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 1, PAT_EQUAL, G},
    {"bench causal d128 b4 4k", 0, 4, 32, 8, 128, 128, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 4096, PAT_EQUAL, BENCH},
};

#define N_PAGED (sizeof paged_cases / sizeof paged_cases[0])
#define N_VARLEN (sizeof varlen_cases / sizeof varlen_cases[0])

static const attn_case *case_of(const skh_case *c) {
  return c->param[0] ? &paged_cases[c->param[1]] : &varlen_cases[c->param[1]];
}

/* Request b's keys and queries under the case's pattern (varlen: q_len = kv_len). */
static int kv_len_of(const attn_case *a, int b) {
  switch (a->pattern) {
  case PAT_SPREAD: return a->kv_len / a->batch + (int)((long long)(a->kv_len - a->kv_len / a->batch) * b / (a->batch > 1 ? a->batch - 1 : 1));
  case PAT_ONE_LONG: return b == a->batch / 2 ? a->kv_len : 1 + (b * 37) % 64;
  default: return a->kv_len;
  }
}
static int q_len_of(const attn_case *a, int b) {
  if (!a->paged) return kv_len_of(a, b);
  const int kv = kv_len_of(a, b);
  return a->q_len < kv ? a->q_len : kv; /* never more queries than keys */
}

static void spec_of(const attn_case *a, int *q_lens, int *kv_lens, skref_attn_spec *s) {
  int longest = 1;
  for (int b = 0; b < a->batch; b++) {
    kv_lens[b] = kv_len_of(a, b);
    q_lens[b] = q_len_of(a, b);
    if (kv_lens[b] > longest) longest = kv_lens[b];
  }
  *s = (skref_attn_spec){.batch = a->batch, .hq = a->hq, .hkv = a->hkv, .dqk = a->dqk, .dvo = a->dvo,
                         .q_dtype = a->fp16 ? SKREF_FP16 : SKREF_BF16,
                         .kv_format = a->fp8 ? SKREF_KV_E4M3 : a->fp16 ? SKREF_KV_FP16 : SKREF_KV_BF16,
                         .paged = a->paged, .page_size = a->page_size ? a->page_size : 16, .combined = a->combined,
                         .pt_width = (longest + (a->page_size ? a->page_size : 16) - 1) / (a->page_size ? a->page_size : 16) + 1,
                         .extra_pages = a->extra_pages, .scale_mode = a->scale_mode, .sinks = a->sinks,
                         .window_left = a->window_left, .window_right = a->paged ? 0 : a->window_right,
                         .q_lens = q_lens, .kv_lens = kv_lens};
}

static void get(int paged, size_t i, skh_case *c) {
  const attn_case *a = paged ? &paged_cases[i] : &varlen_cases[i];
  memset(c, 0, sizeof *c);
  int *q = calloc((size_t)a->batch, sizeof(int)), *k = calloc((size_t)a->batch, sizeof(int));
  skref_attn_spec s;
  spec_of(a, q, k, &s);
  int64_t total_q = 0, total_k = 0, pages = s.extra_pages;
  for (int b = 0; b < a->batch; b++) total_q += q[b], total_k += k[b], pages += (k[b] + s.page_size - 1) / s.page_size;
  free(q);
  free(k);
  c->param[0] = paged;
  c->param[1] = (int64_t)i;
  c->flags = a->flags & ~REUSE;
  if (a->flags & REUSE) c->entry = "reuse_schedule";
  snprintf(c->name, sizeof c->name, "%s", a->label);
  skh_case_sym(c, "B", a->batch);
  skh_case_sym(c, "TQ", total_q);
  if (paged) {
    sk_attn_paged_caps caps = SK_ATTN_PAGED_CAPS_INIT;
    caps.dtype = a->fp16 ? SK_DTYPE_FP16 : SK_DTYPE_BF16;
    caps.kv_fp8 = a->fp8;
    caps.num_heads_q = a->hq, caps.num_heads_kv = a->hkv, caps.head_dim_qk = a->dqk, caps.head_dim_vo = a->dvo;
    caps.page_size = s.page_size;
    caps.mode = a->q_len == 1 ? SK_ATTN_DECODE : SK_ATTN_EXTEND;
    caps.max_batch = a->batch;
    caps.max_total_q = total_q;
    caps.max_pages_per_seq = s.pt_width;
    caps.window_left = a->window_left;
    SKH_SET_CAPS(c, caps);
    skh_case_sym(c, "NP", pages);
  } else {
    sk_attn_varlen_caps caps = SK_ATTN_VARLEN_CAPS_INIT;
    caps.dtype = a->fp16 ? SK_DTYPE_FP16 : SK_DTYPE_BF16;
    caps.num_heads_q = a->hq, caps.num_heads_kv = a->hkv, caps.head_dim_qk = a->dqk, caps.head_dim_vo = a->dvo;
    caps.window_left = a->window_left, caps.window_right = a->window_right;
    caps.max_batch = a->batch, caps.max_total_q = total_q, caps.max_total_k = total_k;
    SKH_SET_CAPS(c, caps);
    skh_case_sym(c, "TK", total_k);
  }
}

/* Tensor indices of the two tables (attention.h's order). */
enum { P_Q, P_K, P_V, P_PT, P_SEQ, P_CUQ, P_KS, P_VS, P_SINKS, P_OUT, P_LSE };
enum { V_Q, V_K, V_V, V_CUQ, V_CUK, V_SINKS, V_OUT, V_LSE };

static void layout(const skh_case *c, skh_tensor *t, size_t n) {
  (void)n;
  const attn_case *a = case_of(c);
  int *q = calloc((size_t)a->batch, sizeof(int)), *k = calloc((size_t)a->batch, sizeof(int));
  skref_attn_spec s;
  spec_of(a, q, k, &s);
  free(q);
  free(k);
  if (a->paged) {
    t[P_PT].shape[1] = s.pt_width;
    t[P_SINKS].present = a->sinks;
    if (a->combined) /* vLLM's [blocks, 2, page, Hkv, D]: K and V pages interleaved */
      for (int kv = 0; kv < 2; kv++) {
        skh_tensor *x = &t[kv ? P_V : P_K];
        const int64_t tok = (int64_t)a->hkv * (kv ? a->dvo : a->dqk);
        x->strided = 1;
        x->strides[3] = 1, x->strides[2] = kv ? a->dvo : a->dqk, x->strides[1] = tok, x->strides[0] = 2 * s.page_size * tok;
      }
    if (a->fp8)
      for (int kv = 0; kv < 2; kv++) {
        skh_tensor *x = &t[kv ? P_VS : P_KS];
        x->shape[1] = a->scale_mode == 1 ? a->hkv : 1;
        if (a->scale_mode == 2) x->strided = 1, x->strides[0] = 0, x->strides[1] = 0; /* one scale, a stride-0 view */
      }
  } else {
    t[V_SINKS].present = a->sinks;
  }
}

/* The problem as the harness's host tensors hold it. */
static skref_attn_problem problem_of(const attn_case *a, const skh_tensor *t) {
  skref_attn_problem pr;
  memset(&pr, 0, sizeof pr);
  pr.batch = a->batch, pr.hq = a->hq, pr.hkv = a->hkv, pr.dqk = a->dqk, pr.dvo = a->dvo;
  pr.q_dtype = a->fp16 ? SKREF_FP16 : SKREF_BF16;
  pr.kv_format = a->fp8 ? SKREF_KV_E4M3 : a->fp16 ? SKREF_KV_FP16 : SKREF_KV_BF16;
  pr.paged = a->paged;
  pr.sm_scale = 1.0 / sqrt((double)a->dqk);
  pr.window_left = a->window_left;
  pr.window_right = a->paged ? 0 : a->window_right;
  const int qi = a->paged ? P_Q : V_Q, ki = a->paged ? P_K : V_K, vi = a->paged ? P_V : V_V;
  pr.q = t[qi].host;
  pr.q_stride = (long long)a->hq * a->dqk;
  pr.k = t[ki].host, pr.v = t[vi].host;
  pr.k_token_stride = t[ki].strides[a->paged ? 1 : 0], pr.v_token_stride = t[vi].strides[a->paged ? 1 : 0];
  if (a->paged) {
    pr.k_page_pitch = t[P_K].strides[0], pr.v_page_pitch = t[P_V].strides[0];
    pr.page_size = (int)t[P_K].shape[1];
    pr.pt_stride = (int)t[P_PT].shape[1];
    pr.page_table = t[P_PT].host;
    pr.cache_seqlens = t[P_SEQ].host;
    pr.cu_seqlens_q = t[P_CUQ].host;
    if (a->fp8) {
      pr.k_scale = t[P_KS].host, pr.v_scale = t[P_VS].host;
      const int sb = a->scale_mode == 0 ? 1 : a->scale_mode == 1 ? a->hkv : 0, sh = a->scale_mode == 1;
      pr.k_scale_sb = pr.v_scale_sb = sb, pr.k_scale_sh = pr.v_scale_sh = sh;
    }
    pr.sinks = t[P_SINKS].present ? t[P_SINKS].host : NULL;
  } else {
    pr.cu_seqlens_q = t[V_CUQ].host;
    pr.cu_seqlens_k = t[V_CUK].host;
    pr.sinks = t[V_SINKS].present ? t[V_SINKS].host : NULL;
  }
  return pr;
}

static void fill(const skh_case *c, skh_tensor *t, size_t n, skref_rng *rng) {
  (void)n;
  const attn_case *a = case_of(c);
  int *q = calloc((size_t)a->batch, sizeof(int)), *k = calloc((size_t)a->batch, sizeof(int));
  skref_attn_spec s;
  spec_of(a, q, k, &s);
  skref_attn_buffers buf;
  skref_attn_make(rng, &s, &buf);
  const int qi = a->paged ? P_Q : V_Q, ki = a->paged ? P_K : V_K, vi = a->paged ? P_V : V_V;
  memcpy(t[qi].host, buf.q, t[qi].bytes < buf.q_bytes ? t[qi].bytes : buf.q_bytes);
  /* K and V: the windows of make's one allocation that the tensors' strides address */
  const size_t kb = buf.kv_bytes - buf.k_offset, vb = buf.kv_bytes - buf.v_offset;
  memcpy(t[ki].host, (char *)buf.kv + buf.k_offset, t[ki].bytes < kb ? t[ki].bytes : kb);
  memcpy(t[vi].host, (char *)buf.kv + buf.v_offset, t[vi].bytes < vb ? t[vi].bytes : vb);
  if (a->paged) {
    memcpy(t[P_PT].host, buf.page_table, sizeof(int) * (size_t)a->batch * (size_t)s.pt_width);
    memcpy(t[P_SEQ].host, buf.cache_seqlens, sizeof(int) * (size_t)a->batch);
    memcpy(t[P_CUQ].host, buf.cu_seqlens_q, sizeof(int) * (size_t)(a->batch + 1));
    if (a->fp8) {
      memcpy(t[P_KS].host, buf.k_scale, t[P_KS].bytes);
      memcpy(t[P_VS].host, buf.v_scale, t[P_VS].bytes);
    }
    if (a->sinks) memcpy(t[P_SINKS].host, buf.sinks, sizeof(float) * (size_t)a->hq);
  } else {
    memcpy(t[V_CUQ].host, buf.cu_seqlens_q, sizeof(int) * (size_t)(a->batch + 1));
    memcpy(t[V_CUK].host, buf.cu_seqlens_k, sizeof(int) * (size_t)(a->batch + 1));
    if (a->sinks) memcpy(t[V_SINKS].host, buf.sinks, sizeof(float) * (size_t)a->hq);
  }
  skref_attn_free(&buf);
  free(q);
  free(k);
}

static void reference(const skh_case *c, skh_tensor *t, size_t n) {
  (void)n;
  const attn_case *a = case_of(c);
  const skref_attn_problem pr = problem_of(a, t);
  skh_tensor *out = &t[a->paged ? P_OUT : V_OUT], *lse = &t[a->paged ? P_LSE : V_LSE];
  const size_t rows = (size_t)out->shape[0] * (size_t)a->hq;
  double *o = malloc(sizeof(double) * rows * (size_t)a->dvo), *l = malloc(sizeof(double) * rows);
  skref_attention(&pr, o, l);
  for (size_t i = 0; i < rows * (size_t)a->dvo; i++) skh_set(out, out->expect, i, o[i]);
  if (lse->present)
    for (size_t i = 0; i < rows; i++) skh_set(lse, lse->expect, i, a->paged ? l[i] : l[i] * log(2.0));
  free(o);
  free(l);
}

static void tolerance(const skh_case *c, const skh_tensor *t, size_t i, skh_tolerance *tol) {
  const attn_case *a = case_of(c);
  if (!strcmp(t[i].name, "lse")) *tol = (skh_tolerance){SKH_CLOSE, 0.05, 0, 0, 0};
  else *tol = (skh_tolerance){SKH_CLOSE, a->fp8 ? 0.06 : 0.02, 0, a->fp8 ? 0.999 : 0.99999, 0};
}

static void cost(const skh_case *c, const skh_tensor *t, size_t n, double *bytes, double *flops, const char **metric) {
  (void)t, (void)n;
  const attn_case *a = case_of(c);
  *bytes = 0;
  *flops = 0;
  for (int b = 0; b < a->batch; b++) {
    const double kv = kv_len_of(a, b), ql = q_len_of(a, b);
    /* causal: query i sees kv - ql + i + 1 keys, at most window_left + 1 of them */
    double seen = 0;
    for (double i = 0; i < ql; i++) {
      const double causal = kv - ql + i + 1;
      seen += a->window_left >= 0 && causal > a->window_left + 1 ? a->window_left + 1 : causal;
    }
    const double keys = a->window_left >= 0 && kv > a->window_left + ql ? a->window_left + ql : kv; /* keys read */
    *bytes += keys * a->hkv * (a->dqk + a->dvo) * (a->fp8 ? 1 : 2) + ql * a->hq * (a->dqk + a->dvo) * 2;
    *flops += 2.0 * seen * a->hq * (a->dqk + a->dvo);
  }
  *metric = a->q_len == 1 ? "GB/s" : "TFLOP/s";
}

static size_t count(int paged) { return paged ? N_PAGED : N_VARLEN; }

/* variant: 1 paged, 0 varlen */
const skh_op skh_op_attention_paged = {"attention.paged", count, get, layout, fill, reference, tolerance, cost, 1};
const skh_op skh_op_attention_varlen = {"attention.varlen", count, get, layout, fill, reference, tolerance, cost, 0};
