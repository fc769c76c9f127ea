/* bench_stream - measured DRAM ceilings for the read:write ratios the memory-bound ops move.
 * "% of copy" in the other benchmarks divides by one figure, the 1:1 copy rate (~4.3 TB/s on the
 * H200). A kernel that reads x once and writes it five times (run_pre's finalize) or reads four
 * streams and writes one (run_post_pre's) moves bytes in another ratio, whose ceiling can differ.
 * This bench streams READS input arrays into WRITES output arrays (ops/test/stream_mix.cuh,
 * 16-byte vectors, grid-stride, every SM full) and reports GB/s counting each byte read or written
 * once, for each ratio; plus cudaMemcpy device to device. Median of 7 rounds of 5 launches.
 * SK_BENCH_MB: MiB per array (default 256: every ratio far beyond the 50 MB L2).
 * SK_BENCH_STREAM_UNROLL (4, 8, 16; default 4): vectors each thread loads before it stores them.
 * SK_BENCH_STREAM_MODE: bits of sk_test::StreamMixMode (default 0): 1 loads with the L2::256B
 * prefetch hint, 2 streaming (.cs) stores, 4 a contiguous slab per CTA instead of grid-stride.
 * Two more tables follow: run_post_pre's traffic as one pass whose collapse re-reads the streams
 * it wrote some rounds earlier (how long written bytes stay in L2), and the ratios moved by the
 * bulk-copy engine (cp.async.bulk) instead of 16-byte stores. */
#include <stdio.h>

#include "bench_util.h"
#include "sparkinfer/jit.h"

enum { kMaxArrays = 5, kThreads = 256, kCtasPerSm = 8 };

typedef struct { /* sk_test::StreamMixArgs */
  const void *in[kMaxArrays];
  void *out[kMaxArrays];
  long long vectors;
} stream_mix_args;

typedef struct {
  sk_kernel *k;
  unsigned grid, threads; /* threads 0: kThreads */
  stream_mix_args a;
} mix_call;

static int launch_mix(void *ctx, cudaStream_t s) {
  mix_call *c = ctx;
  void *args[] = {&c->a};
  const unsigned threads = c->threads ? c->threads : kThreads;
  return sk_kernel_launch(c->k, (sk_dim3){c->grid, 1, 1}, (sk_dim3){threads, 1, 1}, 0, s, args) != SK_OK;
}

/* Two kernels in one timed call: run_post_pre's two passes as pure streams. */
typedef struct {
  mix_call first, second;
} two_pass_call;

static int launch_two_pass(void *ctx, cudaStream_t s) {
  two_pass_call *c = ctx;
  return launch_mix(&c->first, s) || launch_mix(&c->second, s);
}

static int resolve_stream_kernel(const char *name, const char *params, sk_kernel **k) {
  sk_kernel_request req = {"test.stream_mix", "test/stream_mix.cuh", name, params, NULL, NULL, 0, 0};
  SK(sk_kernel_resolve(&req, k));
  return 0;
}

/* run_post_pre's traffic as one pass (sk_test::stream_reread): per token x and 4 streams in, 4
 * streams and y out (10 arrays counted), the 4 streams written re-read LAG grid rounds later for
 * the collapse. Against the two passes of today's kernels (5:4, then the finalize's 4:1: 14 arrays
 * moved for 10 counted) and against one pass with no re-read (5:5). The question it answers: can
 * a persistent post_pre that collapses a token group a few groups after writing its streams get
 * the re-read from L2, and what rate is left for its bytes? */
static int one_pass_table(bench_json *json, void **arrays, size_t bytes, int sms, cudaStream_t s) {
  enum { kCtasPerSmReread = 4 };
  const unsigned grid = (unsigned)(sms * kCtasPerSmReread);
  const double counted = 10.0 * (double)bytes, round_mb = (double)grid * kThreads * 16 * 4 / 1e6;
  printf("\n### run_post_pre as one pass: the streams re-read from L2\n\n"
         "%u CTAs x %d threads, one vector per thread per array a round; GB/s counts x, 4 streams, "
         "4 streams out and y once (10 arrays).\n\n| schedule | pending re-reads (MB) | GB/s |\n|---|---|---|\n",
         grid, kThreads);
  two_pass_call two = {{0}, {0}};
  if (resolve_stream_kernel("sk_test::stream_mix<5, 4, 4, 0>", "reads=5 writes=4 unroll=4 mode=0", &two.first.k) ||
      resolve_stream_kernel("sk_test::stream_mix<4, 1, 4, 0>", "reads=4 writes=1 unroll=4 mode=0", &two.second.k))
    return 1;
  two.first.grid = two.second.grid = (unsigned)(sms * kCtasPerSm);
  two.first.a.vectors = two.second.a.vectors = (long long)(bytes / 16);
  for (int r = 0; r < 5; r++) two.first.a.in[r] = arrays[r];
  for (int w = 0; w < 4; w++) two.first.a.out[w] = arrays[kMaxArrays + w], two.second.a.in[w] = arrays[kMaxArrays + w];
  two.second.a.out[0] = arrays[kMaxArrays + 4];
  double us = bench_stream_us(launch_two_pass, &two, s, 5, 7);
  if (us < 0) return 1;
  printf("| two passes (5:4, then 4:1) | all (DRAM) | %.0f |\n", counted / (us * 1e-6) / 1e9);
  bench_json_row(json, "{\"one_pass\":\"two_passes\",\"gbs\":%.1f,\"us\":%.2f}", counted / (us * 1e-6) / 1e9, us);

  mix_call flat = {0};
  if (resolve_stream_kernel("sk_test::stream_mix<5, 5, 4, 0>", "reads=5 writes=5 unroll=4 mode=0", &flat.k)) return 1;
  flat.grid = (unsigned)(sms * kCtasPerSm);
  flat.a.vectors = (long long)(bytes / 16);
  for (int i = 0; i < 5; i++) flat.a.in[i] = arrays[i], flat.a.out[i] = arrays[kMaxArrays + i];
  us = bench_stream_us(launch_mix, &flat, s, 5, 7);
  if (us < 0) return 1;
  printf("| one pass, no re-read (5:5) | - | %.0f |\n", counted / (us * 1e-6) / 1e9);
  bench_json_row(json, "{\"one_pass\":\"no_reread\",\"gbs\":%.1f,\"us\":%.2f}", counted / (us * 1e-6) / 1e9, us);

  static const int lags[] = {0, 1, 2, 3, 4, 6, 8, 16};
  for (size_t l = 0; l < sizeof lags / sizeof lags[0]; l++) {
    char name[64], params[32];
    snprintf(name, sizeof name, "sk_test::stream_reread<%d>", lags[l]);
    snprintf(params, sizeof params, "lag=%d", lags[l]);
    mix_call c = {0};
    if (resolve_stream_kernel(name, params, &c.k)) return 1;
    c.grid = grid;
    c.a.vectors = (long long)(bytes / 16);
    for (int i = 0; i < 5; i++) c.a.in[i] = arrays[i], c.a.out[i] = arrays[kMaxArrays + i];
    us = bench_stream_us(launch_mix, &c, s, 5, 7);
    if (us < 0) return 1;
    printf("| one pass, re-read %d rounds later | %.1f | %.0f |\n", lags[l], lags[l] * round_mb,
           counted / (us * 1e-6) / 1e9);
    bench_json_row(json, "{\"one_pass\":\"reread\",\"lag\":%d,\"pending_mb\":%.1f,\"gbs\":%.1f,\"us\":%.2f}",
                   lags[l], lags[l] * round_mb, counted / (us * 1e-6) / 1e9, us);
  }
  return 0;
}

/* The write-heavy ratios with the bulk-copy engine (sk_test::stream_bulk_store: loads into
 * registers, stores as 16 KiB cp.async.bulk copies from shared memory; sk_test::stream_bulk_copy:
 * bulk loads too, one thread per CTA). Does the gap between write-heavy and read-heavy ratios
 * belong to the DRAM or to the store instructions? */
static int bulk_table(bench_json *json, void **arrays, size_t bytes, int sms, cudaStream_t s) {
  enum { kCtasPerSmBulk = 6 }; /* 32 KiB of buffers each */
  static const struct { int reads, writes, copy_engine_loads; } rows[] = {
      {1, 1, 0}, {5, 4, 0}, {1, 5, 0}, {1, 4, 0}, {4, 1, 0}, {1, 1, 1}, {1, 4, 1}, {1, 5, 1},
  };
  printf("\n### The same ratios through the bulk-copy engine\n\n"
         "| reads:writes | loads | stores | GB/s |\n|---|---|---|---|\n");
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    char name[64], params[64];
    if (rows[r].copy_engine_loads) {
      snprintf(name, sizeof name, "sk_test::stream_bulk_copy<%d>", rows[r].writes);
      snprintf(params, sizeof params, "bulk_copy writes=%d", rows[r].writes);
    } else {
      snprintf(name, sizeof name, "sk_test::stream_bulk_store<%d, %d>", rows[r].reads, rows[r].writes);
      snprintf(params, sizeof params, "bulk_store reads=%d writes=%d", rows[r].reads, rows[r].writes);
    }
    mix_call c = {0};
    if (resolve_stream_kernel(name, params, &c.k)) return 1;
    c.grid = (unsigned)(sms * kCtasPerSmBulk);
    c.threads = rows[r].copy_engine_loads ? 32 : kThreads;
    c.a.vectors = (long long)(bytes / 16);
    for (int i = 0; i < rows[r].reads; i++) c.a.in[i] = arrays[i];
    for (int i = 0; i < rows[r].writes; i++) c.a.out[i] = arrays[kMaxArrays + i];
    const double us = bench_stream_us(launch_mix, &c, s, 5, 7);
    if (us < 0) return 1;
    const double gbs = (double)bytes * (rows[r].reads + rows[r].writes) / (us * 1e-6) / 1e9;
    printf("| %d:%d | %s | bulk, 16 KiB | %.0f |\n", rows[r].reads, rows[r].writes,
           rows[r].copy_engine_loads ? "bulk, 16 KiB" : "16 B per thread", gbs);
    bench_json_row(json, "{\"bulk\":%s,\"reads\":%d,\"writes\":%d,\"gbs\":%.1f,\"us\":%.2f}",
                   rows[r].copy_engine_loads ? "\"copy\"" : "\"store\"", rows[r].reads, rows[r].writes, gbs, us);
  }
  return 0;
}

int main(void) {
  bench_json json = bench_json_open();
  const int sms = bench_open_device();
  const char *mb_env = getenv("SK_BENCH_MB");
  const long long mib = mb_env && atoll(mb_env) > 0 ? atoll(mb_env) : 256;
  const size_t bytes = (size_t)mib << 20;
  void *arrays[2 * kMaxArrays];
  for (int i = 0; i < 2 * kMaxArrays; i++) {
    CK(cudaMalloc(&arrays[i], bytes));
    CK(cudaMemset(arrays[i], 0x5a + i, bytes)); /* inputs are not zeros; outputs get overwritten */
  }
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  static const struct { int reads, writes; const char *what; } mixes[] = {
      {1, 1, "copy"},
      {5, 4, "run_post, post_pre partial (x + 4 streams -> 4)"},
      {1, 5, "run_pre finalize, split schedule (x -> 4 copies + y)"},
      {1, 4, "pre partial, fused schedule (x -> 4 copies)"},
      {4, 1, "run_post_pre finalize (4 streams -> y); near the quantizers' ~4:1"},
      {1, 0, "run_pre projection (x, rows only)"},
      {0, 1, "write only"},
  };
  const char *mode_env = getenv("SK_BENCH_STREAM_MODE"), *unroll_env = getenv("SK_BENCH_STREAM_UNROLL");
  const int mode = mode_env ? atoi(mode_env) : 0, unroll = unroll_env ? atoi(unroll_env) : 4;
  if (mode < 0 || mode > 7 || (unroll != 4 && unroll != 8 && unroll != 16)) {
    fprintf(stderr, "SK_BENCH_STREAM_MODE=%s SK_BENCH_STREAM_UNROLL=%s: expected mode bits 0..7 (1 loads L2::256B, "
                    "2 stores .cs, 4 a slab per CTA) and 4, 8 or 16 vectors per thread\n",
            mode_env ? mode_env : "", unroll_env ? unroll_env : "");
    return 2;
  }
  printf("Access: %d vectors per thread, loads %s, stores %s, %s.\n\n", unroll,
         mode & 1 ? "L2::256B" : "plain", mode & 2 ? ".cs" : "plain", mode & 4 ? "a contiguous slab per CTA" : "grid-stride");
  printf("| reads:writes | GB/s | vs 1:1 | kernel of this ratio |\n|---|---|---|---|\n");
  double copy_gbs = 0;
  for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
    char name[64];
    snprintf(name, sizeof name, "sk_test::stream_mix<%d, %d, %d, %d>", mixes[m].reads, mixes[m].writes, unroll, mode);
    char params[64];
    snprintf(params, sizeof params, "reads=%d writes=%d unroll=%d mode=%d", mixes[m].reads, mixes[m].writes, unroll,
             mode);
    mix_call c = {0};
    if (resolve_stream_kernel(name, params, &c.k)) return 1;
    c.grid = (unsigned)(sms * kCtasPerSm);
    c.a.vectors = (long long)(bytes / 16);
    for (int r = 0; r < mixes[m].reads; r++) c.a.in[r] = arrays[r];
    for (int w = 0; w < (mixes[m].writes ? mixes[m].writes : 1); w++) c.a.out[w] = arrays[kMaxArrays + w];
    const double us = bench_stream_us(launch_mix, &c, s, 5, 7);
    if (us < 0) {
      fprintf(stderr, "%s failed\n", name);
      return 1;
    }
    const double moved = (double)bytes * (mixes[m].reads + mixes[m].writes), gbs = moved / (us * 1e-6) / 1e9;
    if (m == 0) copy_gbs = gbs;
    printf("| %d:%d | %.0f | %.0f%% | %s |\n", mixes[m].reads, mixes[m].writes, gbs, 100.0 * gbs / copy_gbs,
           mixes[m].what);
    bench_json_row(&json, "{\"reads\":%d,\"writes\":%d,\"gbs\":%.1f,\"us\":%.2f}", mixes[m].reads, mixes[m].writes, gbs,
                   us);
  }
  bench_copy_call cc = {arrays[kMaxArrays], arrays[0], bytes};
  const double us = bench_stream_us(bench_copy_launch, &cc, s, 5, 7);
  const double gbs = 2.0 * (double)bytes / (us * 1e-6) / 1e9;
  printf("| cudaMemcpy D2D | %.0f | %.0f%% | 1:1 by the driver |\n", gbs, 100.0 * gbs / copy_gbs);
  bench_json_row(&json, "{\"reads\":1,\"writes\":1,\"memcpy\":true,\"gbs\":%.1f,\"us\":%.2f}", gbs, us);
  printf("\n%lld MiB per array, grid %d x %d threads, 16-byte vectors.\n", mib, sms * kCtasPerSm, kThreads);
  if (one_pass_table(&json, arrays, bytes, sms, s) || bulk_table(&json, arrays, bytes, sms, s)) return 1;
  bench_json_close(&json);
  for (int i = 0; i < 2 * kMaxArrays; i++) CK(cudaFree(arrays[i]));
  CK(cudaStreamDestroy(s));
  return 0;
}
