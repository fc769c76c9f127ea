/* attention.paged / attention.varlen on a GPU, through the JIT API directly: the device scheduler,
 * the attention kernel and the split-KV merge on fresh random problems (seed printed) against the
 * double CPU reference (ops/attention/ref.h). Decode and extend, bf16 / fp16 / FP8 KV, every
 * head-dim pair, GQA ratios, page sizes 16..128, random page permutations, vLLM's combined
 * layout, edge cases, windows, sinks, split vs unsplit, varlen, clamped lengths with a NaN guard
 * after the cache, a CUDA graph replayed over changing lengths. Outputs and scratch are
 * poisoned (0xff) before every run; the device scheduler's work list must equal the CPU replay
 * byte for byte. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/layout.cuh"
#include "attention/ref.h"
#include "common/ref.h"
#include "gpu_util.h"
#include "sparkinfer/jit.h"
#include "testutil.h"

static char *dir;
static void setup(void) { dir = gpu_test_setup("gpuattn"); }
static void teardown(void) { tu_rmrf(dir); free(dir); }

/* Failing cases are reported and counted; each test fails at its end if any did. */
static int case_failures;
static void case_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void case_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("MISMATCH ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  case_failures++;
}
#define CASE_FAIL case_fail

static int sm_count(void) {
  int n = 0;
  CUDA_OK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

static sk_kernel *resolve(const char *op, const char *source, const char *name, unsigned smem) {
  sk_kernel_request r = {op, source, name, "test", NULL, NULL, 0, 0};
  sk_kernel *k;
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &k));
  if (smem > 48 * 1024) SK_OK_OR_FAIL(sk_kernel_set_max_dynamic_shared(k, smem));
  return k;
}

/* One run's configuration. */
typedef struct run_cfg {
  int kind;          /* SK_ATTN_KIND_* */
  int split;         /* p.split */
  int fixed_chunk;   /* p.fixed_chunk_tiles */
  int ctas;          /* attention grid; 0 = 2 per SM */
  int merge_ctas;    /* 0 = 2 per SM */
  int max_pages_cut; /* > 0: p.max_pages smaller than the table (clamping test) */
} run_cfg;

/* The three kernels of a configuration. */
typedef struct kernels {
  sk_kernel *sched, *attn, *merge;
  sk_attn_config cfg;
  unsigned smem;
} kernels;

static kernels get_kernels(const skref_attn_spec *s, int kind) {
  kernels k;
  const int fp8 = s->kv_format == SKREF_KV_E4M3;
  k.cfg = sk_attn_pick_config(kind, s->dqk, s->dvo, fp8);
  cr_assert_gt(k.cfg.tile_q, 0, "no configuration for kind %d d %d/%d", kind, s->dqk, s->dvo);
  k.smem = (unsigned)sk_attn_smem_bytes(s->dqk, s->dvo, fp8, k.cfg);
  const char *t = s->q_dtype == SKREF_FP16 ? "__half" : "__nv_bfloat16";
  const char *op = s->paged ? "attention.paged" : "attention.varlen";
  char name[200];
  snprintf(name, sizeof name, "sk::attn::attention<%s, %d, %d, %d, %d, %d, %d, %d, %d, %d>", t, fp8, s->dqk, s->dvo,
           k.cfg.tile_q, k.cfg.tile_kv, k.cfg.warps_q, k.cfg.warps_kv, k.cfg.stages, s->paged);
  k.attn = resolve(op, "attention/attention.cuh", name, k.smem);
  snprintf(name, sizeof name, "sk::attn::merge<%s, %d>", t, s->dvo);
  k.merge = resolve(op, "attention/merge.cuh", name, 0);
  snprintf(name, sizeof name, "sk::attn::schedule<%d>", SK_ATTN_SCHED_THREADS);
  k.sched = resolve(op, "attention/schedule.cuh", name, 0);
  return k;
}

/* Device copies of a problem plus outputs and scratch. */
typedef struct dev_problem {
  void *q, *kv, *out, *scratch;
  int *page_table, *seqlens, *cu_q, *cu_k;
  float *k_scale, *v_scale, *sinks, *lse;
  size_t out_bytes, lse_bytes, scratch_bytes, kv_alloc, pt_entries;
  sk_attn_params p;
} dev_problem;

#define GUARD_BYTES (1u << 20) /* 0xff (NaN in bf16, fp16 and E4M3) after the cache */

static void dev_upload(dev_problem *d, const skref_attn_spec *s, const skref_attn_buffers *h, const kernels *k,
                       const run_cfg *rc, int pt_guard_page) {
  memset(d, 0, sizeof *d);
  const int B = s->batch, group = s->hq / s->hkv;
  d->q = gpu_upload(h->q, h->q_bytes);
  d->kv_alloc = h->kv_bytes + GUARD_BYTES;
  d->kv = gpu_filled(d->kv_alloc, 0xff);
  CUDA_OK(cudaMemcpy(d->kv, h->kv, h->kv_bytes, cudaMemcpyHostToDevice));
  d->cu_q = gpu_upload(h->cu_seqlens_q, sizeof(int) * (size_t)(B + 1));
  d->cu_k = gpu_upload(h->cu_seqlens_k, sizeof(int) * (size_t)(B + 1));
  d->seqlens = gpu_upload(h->cache_seqlens, sizeof(int) * (size_t)(B + 1));
  if (s->paged) {
    /* The table, then a guard of entries naming pt_guard_page (a NaN page) or -1. */
    d->pt_entries = (size_t)B * s->pt_width + 4096;
    int *pt = malloc(sizeof(int) * d->pt_entries);
    for (size_t i = 0; i < d->pt_entries; i++) pt[i] = i < (size_t)B * s->pt_width ? h->page_table[i] : pt_guard_page;
    d->page_table = gpu_upload(pt, sizeof(int) * d->pt_entries);
    free(pt);
  }
  if (h->k_scale) {
    d->k_scale = gpu_upload(h->k_scale, sizeof(float) * (size_t)h->scale_count);
    d->v_scale = gpu_upload(h->v_scale, sizeof(float) * (size_t)h->scale_count);
  }
  if (h->sinks) d->sinks = gpu_upload(h->sinks, sizeof(float) * (size_t)s->hq);
  d->out_bytes = (size_t)(h->total_q > 0 ? h->total_q : 1) * s->hq * s->dvo * 2;
  d->lse_bytes = (size_t)(h->total_q > 0 ? h->total_q : 1) * s->hq * 4;
  d->out = gpu_poisoned(d->out_bytes);
  d->lse = gpu_poisoned(d->lse_bytes);
  const int max_total_q = h->total_q > 0 ? h->total_q : 1;
  const int max_work_items = (int)sk_attn_min_work_items(max_total_q, B, group, k->cfg.tile_q) + 2048;
  const int max_partial_rows = max_total_q * 64 + 1024;
  d->scratch_bytes = (size_t)sk_attn_scratch_bytes(B, max_total_q, max_work_items, max_partial_rows, s->hq, s->dvo);
  d->scratch = gpu_poisoned(d->scratch_bytes);
  const skref_attn_problem *pr = &h->pr;
  int shift = 0;
  while ((1 << shift) < s->page_size) shift++;
  d->p = (sk_attn_params){
      .q = d->q, .k = (char *)d->kv + h->k_offset, .v = (char *)d->kv + h->v_offset, .page_table = d->page_table,
      .cache_seqlens = d->seqlens, .cu_seqlens_q = d->cu_q, .cu_seqlens_k = d->cu_k, .k_scale = d->k_scale,
      .v_scale = d->v_scale, .sinks = d->sinks, .out = d->out, .lse = d->lse, .scratch = d->scratch,
      .q_stride = pr->q_stride, .k_token_stride = pr->k_token_stride, .v_token_stride = pr->v_token_stride,
      .k_page_pitch = pr->k_page_pitch, .v_page_pitch = pr->v_page_pitch, .batch = B, .num_heads_q = s->hq,
      .num_heads_kv = s->hkv, .paged = s->paged, .page_shift = shift, .pt_stride = s->pt_width,
      .max_pages = rc->max_pages_cut > 0 ? rc->max_pages_cut : s->pt_width, .num_pages = h->num_pages, .max_batch = B,
      .max_total_q = max_total_q, .max_total_k = h->total_k, .max_work_items = max_work_items,
      .max_partial_rows = max_partial_rows, .tile_q = k->cfg.tile_q, .tile_kv = k->cfg.tile_kv,
      .attn_ctas = rc->ctas > 0 ? rc->ctas : 2 * sm_count(), .split = rc->split, .fixed_chunk_tiles = rc->fixed_chunk,
      .window_left = s->window_left, .window_right = s->window_right, .lse_natural = !s->paged,
      .k_scale_sb = pr->k_scale_sb, .k_scale_sh = pr->k_scale_sh, .v_scale_sb = pr->v_scale_sb,
      .v_scale_sh = pr->v_scale_sh, .sm_scale = (float)pr->sm_scale};
}

static void dev_free(dev_problem *d) {
  void *ptrs[] = {d->q, d->kv, d->out, d->scratch, d->page_table, d->seqlens, d->cu_q, d->cu_k, d->k_scale, d->v_scale,
                  d->sinks, d->lse};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    if (ptrs[i]) CUDA_OK(cudaFree(ptrs[i]));
}

/* Scheduler, attention, merge: each launched overlapped with the previous (PDL). */
static void launch_all(const kernels *k, sk_attn_params *p, const run_cfg *rc, cudaStream_t stream) {
  void *args[] = {p};
  const unsigned overlap = SK_LAUNCH_OVERLAP_PREVIOUS;
  SK_OK_OR_FAIL(sk_kernel_launch_ex(k->sched, (sk_dim3){1, 1, 1}, (sk_dim3){SK_ATTN_SCHED_THREADS, 1, 1},
                                    (unsigned)sk_attn_sched_smem_bytes(p->max_batch), stream, args, overlap));
  SK_OK_OR_FAIL(sk_kernel_launch_ex(k->attn, (sk_dim3){(unsigned)p->attn_ctas, 1, 1},
                                    (sk_dim3){(unsigned)sk_attn_threads(k->cfg), 1, 1}, k->smem, stream, args, overlap));
  const unsigned mg = rc->merge_ctas > 0 ? (unsigned)rc->merge_ctas : 2u * (unsigned)sm_count();
  SK_OK_OR_FAIL(sk_kernel_launch_ex(k->merge, (sk_dim3){mg, 1, 1}, (sk_dim3){SK_ATTN_MERGE_THREADS, 1, 1}, 0, stream,
                                    args, overlap));
}

/* The device's work list equals the CPU replay (regions 0-3, the defined header words). */
static void check_scheduler(const dev_problem *d, int dvo, const char *what) {
  const sk_attn_params *p = &d->p;
  const size_t end = (size_t)sk_attn_params_region(p, SK_ATTN_R_PART_O, dvo);
  char *host = calloc(end, 1), *dev = gpu_download(d->scratch, end);
  sk_attn_params hp = *p;
  int *cu_q = malloc(sizeof(int) * (size_t)(p->batch + 1)), *cu_k = malloc(sizeof(int) * (size_t)(p->batch + 1)),
      *sl = malloc(sizeof(int) * (size_t)(p->batch + 1));
  CUDA_OK(cudaMemcpy(cu_q, d->cu_q, sizeof(int) * (size_t)(p->batch + 1), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(cu_k, d->cu_k, sizeof(int) * (size_t)(p->batch + 1), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(sl, d->seqlens, sizeof(int) * (size_t)(p->batch + 1), cudaMemcpyDeviceToHost));
  hp.cu_seqlens_q = cu_q, hp.cu_seqlens_k = cu_k, hp.cache_seqlens = sl;
  skref_attn_schedule(&hp, dvo, host);
  const int *hh = (const int *)host, *dh = (const int *)dev;
  for (int i = 0; i <= SK_ATTN_HDR_BATCH; i++) {
    if (i == SK_ATTN_HDR_COUNTER || i == SK_ATTN_HDR_FLAGS) continue; /* the run advanced / may add PAGE_ID */
    if (hh[i] != dh[i]) CASE_FAIL("%s: scheduler header word %d: device %d, replay %d", what, i, dh[i], hh[i]);
  }
  if ((dh[SK_ATTN_HDR_FLAGS] & ~(int)SK_ATTN_ERR_PAGE_ID) != hh[SK_ATTN_HDR_FLAGS])
    CASE_FAIL("%s: flags device %d, replay %d", what, dh[SK_ATTN_HDR_FLAGS], hh[SK_ATTN_HDR_FLAGS]);
  const int regions[][2] = {{SK_ATTN_R_ITEMS, 16 * hh[SK_ATTN_HDR_ITEMS]},
                            {SK_ATTN_R_REQS, 32 * hh[SK_ATTN_HDR_BATCH]},
                            {SK_ATTN_R_MERGE, 16 * hh[SK_ATTN_HDR_MERGE_ROWS]}};
  for (int r = 0; r < 3; r++) {
    const size_t off = (size_t)sk_attn_params_region(p, regions[r][0], dvo);
    if (memcmp(host + off, dev + off, (size_t)regions[r][1]))
      CASE_FAIL("%s: scheduler region %d differs from the CPU replay", what, regions[r][0]);
  }
  free(host), free(dev), free(cu_q), free(cu_k), free(sl);
}

typedef struct result {
  double max_abs, cosine, max_lse;
  int nonfinite;
  int flags;
} result;

/* Device output (bits) against the reference; rows [0, total_q). */
static result compare(const skref_attn_spec *s, const skref_attn_buffers *h, const dev_problem *d, const double *ref_out,
                      const double *ref_lse2) {
  result r = {0, 0, 0, 0, 0};
  const size_t n = (size_t)h->total_q * s->hq * s->dvo, nl = (size_t)h->total_q * s->hq;
  uint16_t *go = gpu_download(d->out, d->out_bytes);
  float *gl = gpu_download(d->lse, d->lse_bytes);
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < n; i++) {
    const double g = skref_half_to_float(go[i], s->q_dtype), e = ref_out[i];
    if (!isfinite(g)) {
      r.nonfinite++;
      continue;
    }
    if (fabs(g - e) > r.max_abs) r.max_abs = fabs(g - e);
    dot += g * e, na += g * g, nb += e * e;
  }
  r.cosine = na > 0 && nb > 0 ? dot / sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
  const double to_ref = s->paged ? 1.0 : log(2.0); /* varlen: natural log */
  for (size_t i = 0; i < nl; i++) {
    const double e = ref_lse2[i] * to_ref, g = gl[i];
    if (e == -INFINITY && g == -INFINITY) continue;
    if (!isfinite(g)) {
      r.nonfinite++;
      continue;
    }
    if (fabs(g - e) > r.max_lse) r.max_lse = fabs(g - e);
  }
  int hdr[SK_ATTN_HDR_INTS];
  CUDA_OK(cudaMemcpy(hdr, d->scratch, sizeof hdr, cudaMemcpyDeviceToHost));
  r.flags = hdr[SK_ATTN_HDR_FLAGS];
  free(go), free(gl);
  return r;
}

static double bound_abs(const skref_attn_spec *s) { return s->kv_format == SKREF_KV_E4M3 ? 0.06 : 0.02; }
static double bound_cos(const skref_attn_spec *s) { return s->kv_format == SKREF_KV_E4M3 ? 0.999 : 0.99999; }

/* Builds, runs and checks one case; returns the device output (host bits, caller frees) when
 * keep_out is set. */
static uint16_t *run_case(skref_rng *rng, uint64_t seed, const skref_attn_spec *s, const run_cfg *rc, const char *label,
                          int keep_out, int expect_flags) {
  skref_attn_buffers h;
  skref_attn_make(rng, s, &h);
  const kernels k = get_kernels(s, rc->kind);
  dev_problem d;
  dev_upload(&d, s, &h, &k, rc, -1);
  launch_all(&k, &d.p, rc, NULL);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  char what[320];
  snprintf(what, sizeof what,
           "seed %llu %s: kind %d hq %d hkv %d d %d/%d q %s kv %d page %d combined %d batch %d wl %d wr %d sinks %d split "
           "%d fixed %d ctas %d",
           (unsigned long long)seed, label, rc->kind, s->hq, s->hkv, s->dqk, s->dvo, s->q_dtype == SKREF_FP16 ? "fp16" : "bf16",
           s->kv_format, s->page_size, s->combined, s->batch, s->window_left, s->window_right, s->sinks, rc->split,
           rc->fixed_chunk, d.p.attn_ctas);
  check_scheduler(&d, s->dvo, what);
  const size_t n = (size_t)h.total_q * s->hq * s->dvo, nl = (size_t)h.total_q * s->hq;
  double *ro = malloc(sizeof(double) * (n + 1)), *rl = malloc(sizeof(double) * (nl + 1));
  skref_attention(&h.pr, ro, rl);
  const result r = compare(s, &h, &d, ro, rl);
  if (r.nonfinite || r.max_abs > bound_abs(s) || r.cosine < bound_cos(s) || r.max_lse > 0.05 || r.flags != expect_flags)
    CASE_FAIL("%s: max_abs %.4g cos %.7f lse %.4g nonfinite %d flags %d (want %d)", what, r.max_abs, r.cosine, r.max_lse,
              r.nonfinite, r.flags, expect_flags);
  uint16_t *out = keep_out ? gpu_download(d.out, d.out_bytes) : NULL;
  if (keep_out) {
    /* The merge zeroed the unit counter: attention + merge again on the same work list (no
     * scheduler run) give the same bits. */
    CUDA_OK(cudaMemset(d.out, 0xff, d.out_bytes));
    void *args[] = {&d.p};
    SK_OK_OR_FAIL(sk_kernel_launch_ex(k.attn, (sk_dim3){(unsigned)d.p.attn_ctas, 1, 1},
                                      (sk_dim3){(unsigned)sk_attn_threads(k.cfg), 1, 1}, k.smem, NULL, args, 0));
    SK_OK_OR_FAIL(sk_kernel_launch_ex(k.merge, (sk_dim3){3, 1, 1}, (sk_dim3){SK_ATTN_MERGE_THREADS, 1, 1}, 0, NULL, args, 0));
    CUDA_OK(cudaDeviceSynchronize());
    uint16_t *again = gpu_download(d.out, d.out_bytes);
    if (memcmp(again, out, (size_t)h.total_q * s->hq * s->dvo * 2)) CASE_FAIL("%s: a second attention launch differs", what);
    free(again);
  }
  free(ro), free(rl);
  dev_free(&d);
  skref_attn_free(&h);
  return out;
}

static int rnd(skref_rng *rng, int lo, int hi) { return lo + (int)skref_rng_below(rng, (uint64_t)(hi - lo + 1)); }
/* A fresh seed (printed; SK_SEED replays it) and the generator seeded with it. */
static uint64_t seeded(skref_rng *rng, const char *what) {
  const uint64_t seed = skref_test_seed(what);
  skref_rng_seed(rng, seed);
  return seed;
}

static skref_attn_spec spec_of(int batch, int hq, int hkv, int dqk, int dvo, skref_kv_format f, int page, const int *ql,
                               const int *kl) {
  int width = 1;
  for (int b = 0; b < batch; b++) width = width > (kl[b] + page - 1) / page ? width : (kl[b] + page - 1) / page;
  skref_attn_spec s = {.batch = batch, .hq = hq, .hkv = hkv, .dqk = dqk, .dvo = dvo, .q_dtype = SKREF_BF16,
                       .kv_format = f, .paged = 1, .page_size = page, .pt_width = width + 1, .extra_pages = 7,
                       .scale_mode = 1, .window_left = -1, .window_right = 0, .q_lens = ql, .kv_lens = kl};
  return s;
}

static const int dims[][2] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
static const int heads[][2] = {{32, 8}, {8, 1}, {64, 8}, {32, 4}, {12, 2}, {16, 16}};

/* Decode: every head-dim pair, bf16 and FP8 KV, GQA ratios, page sizes, edge-case lengths. */
Test(gpu_attention, decode_bf16_and_fp8_over_shapes, .init = setup, .fini = teardown, .timeout = 600) {
  skref_rng rng;
  const uint64_t seed = seeded(&rng, "gpu attention decode");
  static const int pages[] = {16, 64, 128};
  int i = 0;
  for (int d = 0; d < 4; d++)
    for (int fp8 = 0; fp8 < 2; fp8++)
      for (int v = 0; v < 3; v++, i++) {
        const int page = pages[(i + v) % 3], batch = rnd(&rng, 3, 9);
        int ql[16], kl[16];
        for (int b = 0; b < batch; b++) ql[b] = 1, kl[b] = rnd(&rng, 1, 1500);
        kl[0] = 1;                               /* one key */
        kl[1] = page * rnd(&rng, 1, 4);          /* exact page multiple */
        if (v == 2) kl[2] = rnd(&rng, 5000, 9000); /* one long request among short ones */
        skref_attn_spec s = spec_of(batch, heads[i % 6][0], heads[i % 6][1], dims[d][0], dims[d][1],
                                    fp8 ? SKREF_KV_E4M3 : SKREF_KV_BF16, page, ql, kl);
        s.pt_width -= 1; /* the longest request fills its table row */
        s.scale_mode = i % 3;
        s.combined = dims[d][0] == dims[d][1] && v == 1;
        const run_cfg rc = {SK_ATTN_KIND_DECODE, 1, 0, i % 5 == 4 ? 5 : 0, 0, 0};
        run_case(&rng, seed, &s, &rc, "decode", 0, 0);
      }
  cr_assert_eq(case_failures, 0, "seed %llu: %d failing cases (MISMATCH lines above)", (unsigned long long)seed, case_failures);
}

/* Split and unsplit decode agree (and both match the reference); forced chunk sizes, tiny grids. */
Test(gpu_attention, split_equals_unsplit_decode, .init = setup, .fini = teardown, .timeout = 600) {
  const uint64_t seed = skref_test_seed("gpu attention split");
  skref_rng rng;
  for (int fp8 = 0; fp8 < 2; fp8++)
    for (int d = 0; d < 2; d++) {
      int ql[6], kl[6];
      for (int b = 0; b < 6; b++) ql[b] = 1, kl[b] = 100 + 1000 * b + (int)(seed % 97);
      skref_attn_spec s = spec_of(6, 32, 8, dims[d + 1][0], dims[d + 1][1], fp8 ? SKREF_KV_E4M3 : SKREF_KV_BF16, 64, ql, kl);
      s.sinks = d;
      uint16_t *outs[4];
      const run_cfg cfgs[4] = {{SK_ATTN_KIND_DECODE, 0, 0, 0, 0, 0},
                               {SK_ATTN_KIND_DECODE, 1, 1, 0, 0, 0},
                               {SK_ATTN_KIND_DECODE, 1, 3, 7, 1, 0},
                               {SK_ATTN_KIND_DECODE, 1, 0, 1, 3, 0}};
      for (int c = 0; c < 4; c++) {
        skref_rng_seed(&rng, seed); /* the same problem each time */
        outs[c] = run_case(&rng, seed, &s, &cfgs[c], c ? "split" : "unsplit", 1, 0);
      }
      const size_t n = (size_t)6 * 32 * s.dvo;
      for (int c = 1; c < 4; c++) {
        double m = 0;
        for (size_t e = 0; e < n; e++) m = fmax(m, fabs(skref_bf16_to_float(outs[c][e]) - skref_bf16_to_float(outs[0][e])));
        if (!(m <= 1e-2)) CASE_FAIL("seed %llu fp8 %d d %d: split config %d differs from unsplit by %g", (unsigned long long)seed, fp8, d, c, m);
      }
      for (int c = 0; c < 4; c++) free(outs[c]);
    }
  cr_assert_eq(case_failures, 0, "seed %llu: %d failing cases", (unsigned long long)seed, case_failures);
}

/* Windows and sinks (gpt-oss: 64/8, D 64, window 128), fp16 q, Q > 1 with small K. */
Test(gpu_attention, window_sinks_fp16_and_short_kv, .init = setup, .fini = teardown, .timeout = 600) {
  skref_rng rng;
  const uint64_t seed = seeded(&rng, "gpu attention window sinks");
  for (int c = 0; c < 8; c++) {
    int ql[5], kl[5];
    for (int b = 0; b < 5; b++) kl[b] = rnd(&rng, 1, 3000), ql[b] = c < 4 ? 1 : rnd(&rng, 1, kl[b] < 24 ? kl[b] : 24);
    if (c >= 4) kl[0] = 20, ql[0] = 8;    /* speculative verify over a short cache */
    if (c == 7) kl[1] = 3, ql[1] = 6;     /* fewer keys than queries: leading rows see none */
    skref_attn_spec s = spec_of(5, 64, 8, 64, 64, c % 2 ? SKREF_KV_E4M3 : SKREF_KV_BF16, c % 3 == 0 ? 16 : 64, ql, kl);
    s.window_left = c % 4 == 3 ? 0 : 128, s.sinks = c != 5;
    if (c == 6) s.q_dtype = SKREF_FP16, s.kv_format = SKREF_KV_FP16;
    const run_cfg rc = {c >= 4 && c % 2 ? SK_ATTN_KIND_EXTEND : SK_ATTN_KIND_DECODE, 1, 0, 0, 0, 0};
    run_case(&rng, seed, &s, &rc, "window/sinks", 0, c == 7 ? (int)SK_ATTN_ERR_KV_SHORT : 0);
  }
  cr_assert_eq(case_failures, 0, "seed %llu: %d failing cases", (unsigned long long)seed, case_failures);
}

/* Extend: q_len 8..512 over prefixes up to 4096, 64- and 128-row tiles, bf16 and FP8 KV. */
Test(gpu_attention, extend_over_prefixes, .init = setup, .fini = teardown, .timeout = 600) {
  skref_rng rng;
  const uint64_t seed = seeded(&rng, "gpu attention extend");
  int i = 0;
  for (int d = 0; d < 4; d++)
    for (int fp8 = 0; fp8 < 2; fp8++)
      for (int kind = SK_ATTN_KIND_EXTEND; kind <= SK_ATTN_KIND_WIDE; kind++, i++) {
        if (kind == SK_ATTN_KIND_WIDE && dims[d][0] > 128) continue;
        /* a long extend over a short prefix, a short one over a long prefix, a verify-sized one */
        const int batch = 3;
        int ql[3], kl[3];
        ql[0] = rnd(&rng, 8, 512), kl[0] = ql[0] + rnd(&rng, 0, 512);
        ql[1] = rnd(&rng, 8, 64), kl[1] = ql[1] + rnd(&rng, 0, 4096 - ql[1]);
        ql[2] = rnd(&rng, 1, 32), kl[2] = ql[2] + rnd(&rng, 0, 2048);
        skref_attn_spec s = spec_of(batch, i % 2 ? 8 : 6, 2, dims[d][0], dims[d][1],
                                    fp8 ? SKREF_KV_E4M3 : SKREF_KV_BF16, i % 3 == 0 ? 128 : 32, ql, kl);
        if (i % 4 == 1) s.window_left = rnd(&rng, 16, 300);
        s.sinks = i % 3 == 1;
        const run_cfg rc = {kind, i % 2, 0, 0, 0, 0};
        run_case(&rng, seed, &s, &rc, "extend", 0, 0);
      }
  cr_assert_eq(case_failures, 0, "seed %llu: %d failing cases", (unsigned long long)seed, case_failures);
}

/* Varlen: contiguous K/V, causal / non-causal / windows, GQA, Dv != D, natural-log LSE. */
Test(gpu_attention, varlen_contiguous, .init = setup, .fini = teardown, .timeout = 600) {
  skref_rng rng;
  const uint64_t seed = seeded(&rng, "gpu attention varlen");
  for (int c = 0; c < 8; c++) {
    const int d = c % 4, batch = rnd(&rng, 1, 4);
    int ql[4], kl[4];
    for (int b = 0; b < batch; b++) ql[b] = rnd(&rng, 1, 300), kl[b] = c % 2 ? ql[b] : rnd(&rng, 1, 400);
    skref_attn_spec s = {.batch = batch, .hq = c < 4 ? 8 : 6, .hkv = c < 4 ? 2 : 6, .dqk = dims[d][0], .dvo = dims[d][1],
                         .q_dtype = SKREF_BF16, .kv_format = SKREF_KV_BF16, .paged = 0, .window_left = -1,
                         .window_right = c % 3 == 0 ? -1 : 0, .sinks = c == 5, .q_lens = ql, .kv_lens = kl};
    if (c == 2 || c == 6) s.window_left = rnd(&rng, 0, 64), s.window_right = rnd(&rng, 0, 16);
    const run_cfg rc = {c % 2 && dims[d][0] <= 128 ? SK_ATTN_KIND_WIDE : SK_ATTN_KIND_EXTEND, 0, 0, 0, 0, 0};
    run_case(&rng, seed, &s, &rc, "varlen", 0, 0);
  }
  cr_assert_eq(case_failures, 0, "seed %llu: %d failing cases", (unsigned long long)seed, case_failures);
}

/* Lengths past the page table are clamped, flagged and read nothing beyond it: the table is
 * followed by entries naming a NaN page and the cache by NaN bytes, so any read past them
 * poisons the output. Out-of-range page ids are flagged and read as zeros. */
Test(gpu_attention, clamped_lengths_set_the_flag_and_read_nothing_out_of_bounds, .init = setup, .fini = teardown) {
  skref_rng rng;
  const uint64_t seed = seeded(&rng, "gpu attention clamp");
  for (int fp8 = 0; fp8 < 2; fp8++) {
    int ql[3] = {1, 1, 1}, kl[3] = {300, 64, 256};
    skref_attn_spec s = spec_of(3, 16, 4, 128, 128, fp8 ? SKREF_KV_E4M3 : SKREF_KV_BF16, 64, ql, kl);
    s.pt_width = 4; /* exactly 256 keys per request */
    kl[0] = 256;    /* the data: 256 keys */
    skref_attn_buffers h;
    skref_attn_make(&rng, &s, &h);
    const kernels k = get_kernels(&s, SK_ATTN_KIND_DECODE);
    /* A NaN page past the real ones: the guard entries after the table name it. */
    const int nan_page = h.num_pages; /* its V page lies in the guard */
    const run_cfg rc = {SK_ATTN_KIND_DECODE, 1, 0, 0, 0, 0};
    dev_problem d;
    dev_upload(&d, &s, &h, &k, &rc, nan_page);
    d.p.num_pages = h.num_pages + 1; /* the NaN page is a legal id */
    const int live[3] = {1000, 64, 100000}; /* request 0 and 2 past their rows */
    CUDA_OK(cudaMemcpy(d.seqlens, live, sizeof live, cudaMemcpyHostToDevice));
    launch_all(&k, &d.p, &rc, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    h.cache_seqlens[0] = 256, h.cache_seqlens[2] = 256; /* the reference over the clamped lengths */
    const size_t n = (size_t)3 * 16 * 128;
    double *ro = malloc(sizeof(double) * n), *rl = malloc(sizeof(double) * 48);
    skref_attention(&h.pr, ro, rl);
    result r = compare(&s, &h, &d, ro, rl);
    if (r.nonfinite || r.max_abs > bound_abs(&s) || r.cosine < bound_cos(&s) || r.flags != (int)SK_ATTN_ERR_KV_LEN)
      CASE_FAIL("seed %llu fp8 %d clamp: max_abs %g cos %f nonfinite %d flags %d", (unsigned long long)seed, fp8, r.max_abs,
                r.cosine, r.nonfinite, r.flags);
    /* A live entry with an id past the cache: flagged, read as zeros, no NaN. */
    const int bad = h.num_pages + 1000;
    CUDA_OK(cudaMemcpy(d.page_table + 1, &bad, sizeof bad, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d.out, 0xff, d.out_bytes));
    launch_all(&k, &d.p, &rc, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    r = compare(&s, &h, &d, ro, rl);
    if (r.nonfinite || !(r.flags & SK_ATTN_ERR_PAGE_ID))
      CASE_FAIL("seed %llu fp8 %d bad page id: nonfinite %d flags %d", (unsigned long long)seed, fp8, r.nonfinite, r.flags);
    free(ro), free(rl);
    dev_free(&d);
    skref_attn_free(&h);
  }
  cr_assert_eq(case_failures, 0, "seed %llu: %d failing cases", (unsigned long long)seed, case_failures);
}

/* A decode bucket captured once in a CUDA graph, replayed while cache_seqlens change in place:
 * the device scheduler rebuilds the work list every replay. */
Test(gpu_attention, graph_replay_follows_live_lengths, .init = setup, .fini = teardown) {
  skref_rng rng;
  const uint64_t seed = seeded(&rng, "gpu attention graph");
  int ql[8], kl[8];
  for (int b = 0; b < 8; b++) ql[b] = 1, kl[b] = 4096;
  skref_attn_spec s = spec_of(8, 32, 8, 128, 128, SKREF_KV_BF16, 64, ql, kl);
  skref_attn_buffers h;
  skref_attn_make(&rng, &s, &h);
  const kernels k = get_kernels(&s, SK_ATTN_KIND_DECODE);
  const run_cfg rc = {SK_ATTN_KIND_DECODE, 1, 0, 0, 0, 0};
  dev_problem d;
  dev_upload(&d, &s, &h, &k, &rc, -1);
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  launch_all(&k, &d.p, &rc, st); /* warm-up (resolution happened in get_kernels) */
  CUDA_OK(cudaStreamSynchronize(st));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  launch_all(&k, &d.p, &rc, st);
  CUDA_OK(cudaStreamEndCapture(st, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 4; rep++) {
    for (int b = 0; b < 8; b++) h.cache_seqlens[b] = rep == 0 ? 4096 : rnd(&rng, 1, 4096);
    CUDA_OK(cudaMemcpyAsync(d.seqlens, h.cache_seqlens, sizeof(int) * 8, cudaMemcpyHostToDevice, st));
    CUDA_OK(cudaMemsetAsync(d.out, 0xff, d.out_bytes, st));
    CUDA_OK(cudaGraphLaunch(ge, st));
    CUDA_OK(cudaStreamSynchronize(st));
    const size_t n = (size_t)8 * 32 * 128;
    double *ro = malloc(sizeof(double) * n), *rl = malloc(sizeof(double) * 256);
    skref_attention(&h.pr, ro, rl);
    const result r = compare(&s, &h, &d, ro, rl);
    if (r.nonfinite || r.max_abs > 0.02 || r.cosine < 0.99999 || r.max_lse > 0.05 || r.flags)
      CASE_FAIL("seed %llu replay %d: max_abs %g cos %f lse %g nonfinite %d flags %d", (unsigned long long)seed, rep, r.max_abs,
                r.cosine, r.max_lse, r.nonfinite, r.flags);
    char what[64];
    snprintf(what, sizeof what, "seed %llu replay %d", (unsigned long long)seed, rep);
    check_scheduler(&d, s.dvo, what);
    free(ro), free(rl);
  }
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamDestroy(st));
  dev_free(&d);
  skref_attn_free(&h);
  cr_assert_eq(case_failures, 0, "seed %llu: %d failing cases", (unsigned long long)seed, case_failures);
}

/* ---- layers sharing one schedule (entry "reuse_schedule", through the op API) ---------------- */

#include "harness/harness.h"
#include "sparkinfer/attention.h"

/* Two layers of one plan with the same lengths but their own Q, K/V and page tables (two fills
 * of one case): layer 0 binds "run" (scheduler, attention, merge), layer 1 "reuse_schedule"
 * (attention and merge over layer 0's work list, same scratch). Layer 1's outputs must equal a
 * full "run" of layer 1 bit for bit. Cases with split requests (the merge) and without. */
Test(gpu_attention, layers_reuse_the_schedule, .init = setup, .fini = teardown, .timeout = 300) {
  static const char *const cases[] = {"decode one long", "decode llama 32/8/128", "extend q 512 over 4096"};
  const skh_op *op = skh_find("attention.paged");
  cr_assert(op);
  int checked = 0;
  for (size_t i = 0; i < skh_case_count(op); i++) {
    skh_case c;
    skh_case_get(op, i, &c);
    int wanted = 0;
    for (size_t w = 0; w < sizeof cases / sizeof cases[0]; w++) wanted |= !strcmp(c.name, cases[w]);
    if (!wanted) continue;
    sk_plan *plan;
    SK_OK_OR_FAIL(skh_plan(op, &c, NULL, &plan));
    size_t scratch_bytes;
    void *scratch = gpu_plan_scratch(plan, &scratch_bytes);
    skh_tensor t[2][SKH_MAX_TENSORS];
    size_t n = 0;
    void *dptr[2][SKH_MAX_TENSORS] = {{0}};
    DLTensor dl[2][SKH_MAX_TENSORS];
    const DLTensor *views[2][SKH_MAX_TENSORS];
    for (int layer = 0; layer < 2; layer++) {
      char err[512];
      cr_assert_eq(skh_tensors_for(op, &c, plan, t[layer], &n, err, sizeof err), 0, "%s", err);
      skref_rng rng;
      skref_rng_seed(&rng, skref_test_seed(c.name) + (uint64_t)layer);
      op->fill(&c, t[layer], n, &rng);
      for (size_t k = 0; k < n; k++) {
        views[layer][k] = NULL;
        if (!t[layer][k].present) continue;
        const size_t bytes = t[layer][k].bytes ? t[layer][k].bytes : 1;
        dptr[layer][k] = t[layer][k].role == SK_TENSOR_OUT ? gpu_poisoned(bytes) : gpu_upload(t[layer][k].host, bytes);
        dl[layer][k] = (DLTensor){dptr[layer][k], {kDLCUDA, 0}, t[layer][k].ndim, t[layer][k].dtype, t[layer][k].shape,
                                  t[layer][k].strided ? t[layer][k].strides : NULL, 0};
        views[layer][k] = &dl[layer][k];
      }
    }
    sk_binding *first, *reuse, *full;
    SK_OK_OR_FAIL(sk_binding_create(plan, "run", &first));
    SK_OK_OR_FAIL(sk_binding_create(plan, "reuse_schedule", &reuse));
    SK_OK_OR_FAIL(sk_binding_create(plan, "run", &full));
    SK_OK_OR_FAIL(sk_bind(first, views[0], n, scratch, scratch_bytes));
    SK_OK_OR_FAIL(sk_bind(reuse, views[1], n, scratch, scratch_bytes));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    SK_OK_OR_FAIL(sk_run(first, s));
    SK_OK_OR_FAIL(sk_run(reuse, s));
    CUDA_OK(cudaStreamSynchronize(s));
    void *got[SKH_MAX_TENSORS] = {0};
    for (size_t k = 0; k < n; k++)
      if (views[1][k] && t[1][k].role == SK_TENSOR_OUT) got[k] = gpu_download(dptr[1][k], t[1][k].bytes);
    /* layer 1 on its own: the full run into poisoned outputs */
    for (size_t k = 0; k < n; k++)
      if (views[1][k] && t[1][k].role == SK_TENSOR_OUT) CUDA_OK(cudaMemset(dptr[1][k], 0xff, t[1][k].bytes));
    SK_OK_OR_FAIL(sk_bind(full, views[1], n, scratch, scratch_bytes));
    SK_OK_OR_FAIL(sk_run(full, s));
    CUDA_OK(cudaStreamSynchronize(s));
    for (size_t k = 0; k < n; k++) {
      if (!got[k]) continue;
      void *want = gpu_download(dptr[1][k], t[1][k].bytes);
      if (memcmp(got[k], want, t[1][k].bytes))
        CASE_FAIL("%s: tensor %s of the reusing layer differs from its own full run", c.name, t[1][k].name);
      free(want);
      free(got[k]);
    }
    uint32_t flags = 0;
    SK_OK_OR_FAIL(sk_attn_error_flags(full, s, &flags));
    cr_expect_eq(flags, 0u, "%s: error flags 0x%x", c.name, flags);
    CUDA_OK(cudaStreamDestroy(s));
    sk_binding_destroy(first);
    sk_binding_destroy(reuse);
    sk_binding_destroy(full);
    for (int layer = 0; layer < 2; layer++) {
      for (size_t k = 0; k < n; k++)
        if (dptr[layer][k]) CUDA_OK(cudaFree(dptr[layer][k]));
      skh_tensors_free(t[layer], n);
    }
    if (scratch) CUDA_OK(cudaFree(scratch));
    sk_plan_destroy(plan);
    checked++;
  }
  cr_expect_eq(checked, 3, "the three cases were found");
  cr_expect_eq(case_failures, 0, "%d cases mismatched", case_failures);
}
