/*
 * sparkinfer/attention.h - attention.paged (paged-KV decode and extend) and attention.varlen
 * (ragged self-attention over contiguous K/V), planned ops (sparkinfer/op.h). The math, masks,
 * layouts, scheduling and tolerances: ops/attention/attention.md.
 *
 * Every run is three launches on one stream: a one-CTA scheduler that rebuilds the work list
 * (request, q tile, KV chunk) from the live lengths on the device, the attention kernel (a
 * persistent grid; split requests write partials), and the merge of split partials. No host
 * synchronisation: a decode step captured in a CUDA graph replays while cache_seqlens change.
 * Lengths past what the plan or the page table allows are clamped (never read out of bounds) and
 * set bits in an error word read with sk_attn_error_flags.
 *
 * attention.paged, entry "run", tensors in order (1 <= B <= max_batch, 1 <= TQ <= max_total_q):
 *   q            [TQ, HQ, DQK] bf16|fp16 (caps.dtype); rows may be strided (token stride >= HQ*DQK,
 *                head and element strides compact): q may be a slice of a fused QKV
 *   k_cache      [NP, PS, HKV, DQK] q's dtype, or uint8 E4M3 (caps.kv_fp8); page and token strides
 *                free (K may be cache[:, 0] of vLLM's [blocks, 2, page, HKV, D]), head and element
 *                strides compact
 *   v_cache      [NP, PS, HKV, DVO], as k_cache
 *   page_table   [B, *] int32: logical page -> physical page id in [0, NP); the row stride is free,
 *                entries compact; the first min(width, caps.max_pages_per_seq) entries are usable
 *   cache_seqlens [B] int32: keys of each request including its new tokens
 *   cu_seqlens_q [B + 1] int32: token offsets of the requests in q
 *   k_scale      [B, 1] or [B, HKV] fp32, FP8 KV only (else NULL): dequant scale per request or per
 *                (request, KV head); a single scale is a stride-0 view; v_scale likewise
 *   v_scale
 *   sinks        [HQ] fp32, optional: a natural-log logit per head joining the softmax denominator
 *   out          [TQ, HQ, DVO], q's dtype, contiguous
 *   lse          [TQ, HQ] fp32, optional: base-2 log-sum-exp
 * attention.varlen, entry "run":
 *   q [TQ, HQ, DQK] (rows may be strided), k [TK, HKV, DQK], v [TK, HKV, DVO] (rows may be
 *   strided), cu_seqlens_q [B + 1], cu_seqlens_k [B + 1] int32, sinks [HQ] fp32 optional,
 *   out [TQ, HQ, DVO], lse [TQ, HQ] fp32 optional, natural log.
 * Token i of a request with q_len queries over kv_len keys sees the keys
 * [i + kv_len - q_len - window_left, i + kv_len - q_len + window_right] (bottom-right aligned;
 * paged is always causal, window_right = 0; -1 = unbounded). Scratch: the work list, partial
 * outputs and the error word; nothing needs zeroing.
 *
 * Entry "reuse_schedule" (both ops): the same tensors; the run launches only the attention and
 * merge kernels, over the work list already in the scratch. For the layers of one step: bind
 * layer 0 to "run" and layers 1..L-1 to "reuse_schedule", all of one plan and one scratch, with
 * the same cache_seqlens / cu_seqlens values (page tables, Q, K and V may differ), and run them in
 * order on one stream: one scheduler launch per step instead of one per layer. The caller
 * guarantees that order; a reusing run does not reset the error word. Not yet run on a GPU
 * (tests/gpu/test_attention_gpu.c, layers_reuse_the_schedule).
 */
#ifndef SPARKINFER_ATTENTION_H
#define SPARKINFER_ATTENTION_H

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sk_attn_mode {
  SK_ATTN_DECODE = 0, /**< every request has one new token (16-row q tiles, KV split across warps) */
  SK_ATTN_EXTEND = 1, /**< q_len >= 1 over a cached prefix: chunked prefill, speculative verify */
} sk_attn_mode;

/** Caps of attention.paged (versioned: SK_ATTN_PAGED_CAPS_INIT, then set fields). */
typedef struct sk_attn_paged_caps {
  size_t struct_size;      /**< sizeof(sk_attn_paged_caps) */
  sk_dtype dtype;          /**< q and out: SK_DTYPE_BF16 (default) or SK_DTYPE_FP16 */
  int kv_fp8;              /**< 0 (default): K/V in q's dtype; 1: E4M3 with fp32 scales */
  int num_heads_q;         /**< HQ, a multiple of num_heads_kv */
  int num_heads_kv;        /**< HKV */
  int head_dim_qk;         /**< DQK: 64, 128, 192 or 256 */
  int head_dim_vo;         /**< DVO: 64, 128 or 256 (192/128 as MiMo) */
  int page_size;           /**< tokens per page: a power of two, 16 (default) .. 128 */
  sk_attn_mode mode;       /**< SK_ATTN_DECODE (default) or SK_ATTN_EXTEND */
  int64_t max_batch;       /**< most requests per run (>= 1) */
  int64_t max_total_q;     /**< most query tokens per run (0: max_batch, i.e. decode) */
  int64_t max_pages_per_seq; /**< page-table entries a request may use (>= 1) */
  int window_left;         /**< sliding window: keys older than this many before the diagonal are
                                hidden; -1 (default): none */
  float sm_scale;          /**< softmax scale; 0 (default): DQK^-0.5 */
  int split_kv;            /**< 1 (default): the scheduler may split long KV across CTAs (merged
                                after); 0: one chunk per request */
  int64_t max_work_items;  /**< budget of (request, q tile, chunk) items; 0: derived */
  int64_t max_partial_rows; /**< budget of split partial rows (tokens x chunks); 0: derived */
  const char *arch;        /**< NULL = the current device's */
} sk_attn_paged_caps;
#define SK_ATTN_PAGED_CAPS_INIT                                                                    \
  { sizeof(sk_attn_paged_caps), SK_DTYPE_BF16, 0, 0, 0, 0, 0, 16, SK_ATTN_DECODE, 0, 0, 0, -1, 0.0f, 1, 0, 0, NULL }

/** Caps of attention.varlen (versioned: SK_ATTN_VARLEN_CAPS_INIT). */
typedef struct sk_attn_varlen_caps {
  size_t struct_size;      /**< sizeof(sk_attn_varlen_caps) */
  sk_dtype dtype;          /**< SK_DTYPE_BF16 (default) or SK_DTYPE_FP16 */
  int num_heads_q, num_heads_kv;
  int head_dim_qk;         /**< D: 64, 128, 192 or 256 */
  int head_dim_vo;         /**< Dv: 64, 128 or 256 */
  int window_left;         /**< -1 (default): unbounded */
  int window_right;        /**< 0 (default): causal; -1: unbounded (bidirectional) */
  float sm_scale;          /**< 0 (default): D^-0.5 */
  int64_t max_batch;       /**< most sequences per run */
  int64_t max_total_q;     /**< most query tokens per run */
  int64_t max_total_k;     /**< most key tokens per run (0: max_total_q) */
  int split_kv;            /**< 1 (default): long sequences may be split across CTAs */
  int64_t max_work_items, max_partial_rows; /**< budgets; 0: derived */
  const char *arch;
} sk_attn_varlen_caps;
#define SK_ATTN_VARLEN_CAPS_INIT                                                                   \
  { sizeof(sk_attn_varlen_caps), SK_DTYPE_BF16, 0, 0, 0, 0, -1, 0, 0.0f, 0, 0, 0, 1, 0, 0, NULL }

/** Error bits a run leaves (ops/attention/attention.md): a KV length negative or past the page
 *  table / max_total_k (clamped), cu_seqlens_q decreasing or past max_total_q (clamped), a paged
 *  request with fewer keys than queries, the q tiles alone past max_work_items, a page id outside
 *  [0, NP) for a live key (read as zeros), a batch outside [0, max_batch]. */
enum {
  SK_ATTN_FLAG_KV_LEN = 1,
  SK_ATTN_FLAG_Q_LEN = 2,
  SK_ATTN_FLAG_KV_SHORT = 4,
  SK_ATTN_FLAG_BUDGET = 8,
  SK_ATTN_FLAG_PAGE_ID = 16,
  SK_ATTN_FLAG_BATCH = 32,
};

/** The error bits of the last run of `binding` (either attention op): waits for `stream`, then
 *  reads the word from the binding's scratch (a 4-byte device-to-host copy). 0 when every length
 *  was valid. Not for use inside graph capture. Errors: SK_ERR_INVALID_ARGUMENT (not a bound
 *  attention binding), SK_ERR_CUDA. */
SK_API sk_status sk_attn_error_flags(const sk_binding *binding, void *stream, uint32_t *flags);

/* Typed wrappers. */
static inline sk_status sk_attn_paged_plan_create(const sk_attn_paged_caps *caps, sk_plan **plan) {
  return sk_plan_create("attention.paged", caps, plan);
}
static inline sk_status sk_attn_varlen_plan_create(const sk_attn_varlen_caps *caps, sk_plan **plan) {
  return sk_plan_create("attention.varlen", caps, plan);
}
static inline sk_status sk_attn_paged_bind(sk_binding *b, const DLTensor *q, const DLTensor *k_cache,
                                           const DLTensor *v_cache, const DLTensor *page_table,
                                           const DLTensor *cache_seqlens, const DLTensor *cu_seqlens_q,
                                           const DLTensor *k_scale, const DLTensor *v_scale, const DLTensor *sinks,
                                           const DLTensor *out, const DLTensor *lse, void *scratch,
                                           size_t scratch_bytes) {
  const DLTensor *t[11] = {q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, k_scale, v_scale, sinks, out, lse};
  return sk_bind(b, t, 11, scratch, scratch_bytes);
}
static inline sk_status sk_attn_varlen_bind(sk_binding *b, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                                            const DLTensor *cu_seqlens_q, const DLTensor *cu_seqlens_k,
                                            const DLTensor *sinks, const DLTensor *out, const DLTensor *lse,
                                            void *scratch, size_t scratch_bytes) {
  const DLTensor *t[8] = {q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, out, lse};
  return sk_bind(b, t, 8, scratch, scratch_bytes);
}

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_ATTENTION_H */
