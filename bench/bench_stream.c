/* bench_stream - measured DRAM ceilings for the read:write ratios the memory-bound ops move.
 * "% of copy" in the other benchmarks divides by one figure, the 1:1 copy rate (~4.3 TB/s on the
 * H200). A kernel that reads x once and writes it five times (run_pre's finalize) or reads four
 * streams and writes one (run_post_pre's) moves bytes in another ratio, whose ceiling can differ.
 * This bench streams READS input arrays into WRITES output arrays (kernel_src/test/stream_mix.cuh,
 * 16-byte vectors, grid-stride, every SM full) and reports GB/s counting each byte read or written
 * once, for each ratio; plus cudaMemcpy device to device. Median of 7 rounds of 5 launches.
 * SK_BENCH_MB: MiB per array (default 256: every ratio far beyond the 50 MB L2).
 * SK_BENCH_STREAM_UNROLL (4, 8, 16; default 4): vectors each thread loads before it stores them.
 * SK_BENCH_STREAM_MODE: bits of sk_test::StreamMixMode (default 0): 1 loads with the L2::256B
 * prefetch hint, 2 streaming (.cs) stores, 4 a contiguous slab per CTA instead of grid-stride. */
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
  unsigned grid;
  stream_mix_args a;
} mix_call;

static int launch_mix(void *ctx, cudaStream_t s) {
  mix_call *c = ctx;
  void *args[] = {&c->a};
  return sk_kernel_launch(c->k, (sk_dim3){c->grid, 1, 1}, (sk_dim3){kThreads, 1, 1}, 0, s, args) != SK_OK;
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
    sk_kernel_request req = {"test.stream_mix", "test/stream_mix.cuh", name, params, NULL, NULL, 0, 0};
    mix_call c = {0};
    SK(sk_kernel_resolve(&req, &c.k));
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
  bench_json_close(&json);
  for (int i = 0; i < 2 * kMaxArrays; i++) CK(cudaFree(arrays[i]));
  CK(cudaStreamDestroy(s));
  return 0;
}
