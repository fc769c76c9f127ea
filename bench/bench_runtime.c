/* bench_runtime - the runtime spine's speed goals (docs/architecture.md):
 *   memory-table hit < 100 ns; disk hit incl. module load <= 0.3 ms per kernel;
 *   cold compile median <= 1 s per kernel; launch path within 0.3 us of raw cuLaunchKernel;
 *   sk-warm speed-up with -j.
 * `bench_runtime --cpu-only` runs the parts that need no GPU (hit, cold compile, sk-warm -j).
 * Prints a Markdown table; with SK_BENCH_JSON=FILE also writes the numbers as JSON. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime.h"
#include "sparkinfer.h"
#include "sparkinfer/jit.h"
#include "bench_json.h"
#include "testutil.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static bench_json json;
static void report(const char *name, double value, const char *unit, const char *goal, const char *verdict) {
  printf("| %-44s | %12.3f %-3s | %-14s | %-4s |\n", name, value, unit, goal, verdict);
  bench_json_row(&json, "{\"name\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"goal\":\"%s\",\"verdict\":\"%s\"}", name,
                 value, unit, goal, verdict);
  fflush(stdout);
}

/* The sk-warm next to this build (SK_BUILD/bin), or 0 with a message saying what is missing:
 * on the device machine build/bin travels only when the run carries it. */
static int sk_warm_path(char *buf, size_t n) {
  snprintf(buf, n, "%s/bin/sk-warm", tu_build_dir());
  if (access(buf, X_OK) == 0) return 1;
  fprintf(stderr, "bench_runtime: no executable sk-warm at %s (build it with `make tools`; carry build/bin to the device)\n",
          buf);
  return 0;
}

static const char *salt_opt(char *buf, size_t n, const char *tag, int i) {
  snprintf(buf, n, "-DSK_BENCH_SALT=%s_%ld_%d_%d", tag, (long)time(NULL), (int)getpid(), i);
  return buf;
}

int main(int argc, char **argv) {
  int cpu_only = argc > 1 && !strcmp(argv[1], "--cpu-only");
  json = bench_json_open();
  char *dir = tu_tempdir("bench");
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
  if (sk_init() != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); return 1; }
  char arch[16] = "sm_120a";
  if (!cpu_only && sk_device_arch(0, arch, sizeof arch) != SK_OK) {
    fprintf(stderr, "bench_runtime: %s (use --cpu-only without a GPU)\n", sk_last_error_message());
    return 1;
  }
  printf("| metric (arch %-8s)                        | value            | goal           | ok?  |\n", arch);
  printf("|----------------------------------------------|------------------|----------------|------|\n");

  /* 1. memory-table hit: sk_kernel_prepare of a resolved request (explicit arch). */
  sk_kernel_request hit = {"test.empty", "test/scale.cuh", "sk_test::empty<1>", "", arch, NULL, 0, 0};
  if (sk_kernel_prepare(&hit, NULL) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); return 1; }
  double samples[64];
  for (int rep = 0; rep < 15; rep++) {
    const int n = 200000;
    double t0 = sk_now_seconds();
    for (int i = 0; i < n; i++) sk_kernel_prepare(&hit, NULL);
    samples[rep] = (sk_now_seconds() - t0) / n * 1e9;
  }
  double hit_ns = median(samples, 15);
  report("memory-table hit (sk_kernel_prepare)", hit_ns, "ns", "< 100 ns", hit_ns < 100 ? "yes" : "NO");

  /* 2. cold compile: distinct keys, NVRTC's own cache off (-no-cache). */
  double compile_ms[16];
  for (int i = 0; i < 9; i++) {
    char s[96];
    const char *opts[] = {salt_opt(s, sizeof s, "cold", i), "-no-cache"};
    sk_kernel_request r = {"test.scale", "test/scale.cuh", "sk_test::scale<float, 256>", "cold", arch, opts, 2, 0};
    double t0 = sk_now_seconds();
    if (sk_kernel_prepare(&r, NULL) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); return 1; }
    compile_ms[i] = (sk_now_seconds() - t0) * 1e3;
  }
  double cold = median(compile_ms, 9);
  report("cold compile, median of 9 (test kernel)", cold, "ms", "<= 1000 ms", cold <= 1000 ? "yes" : "NO");

  /* 3. sk-warm -j speed-up: 24 distinct kernels, -j1 vs -jN, fresh caches. */
  {
    char mpath[600];
    snprintf(mpath, sizeof mpath, "%s/warm.json", dir);
    FILE *m = fopen(mpath, "w");
    fprintf(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[");
    for (int i = 0; i < 24; i++) {
      char s[96];
      fprintf(m, "%s{\"op\":\"test.scale\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::scale<float, %d>\","
                 "\"options\":[\"%s\",\"-no-cache\"]}",
              i ? "," : "", 32 * (i % 8 + 1), salt_opt(s, sizeof s, "warm", i / 8));
    }
    fprintf(m, "]}\n");
    fclose(m);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double wall[2];
    for (int v = 0; v < 2; v++) {
      char cdir[700], jobs[16], warm[512];
      snprintf(cdir, sizeof cdir, "%s/warm%d", dir, v);
      snprintf(jobs, sizeof jobs, "%ld", v ? ncpu : 1L);
      if (!sk_warm_path(warm, sizeof warm)) return 1;
      char *wargv[] = {warm, "--manifest", mpath, "--arch", arch, "--cache-dir", cdir, "-j", jobs, "--json", "--quiet", NULL};
      char *out = NULL;
      if (tu_run(wargv, NULL, &out) != 0) { fprintf(stderr, "sk-warm failed: %s\n", out ? out : ""); return 1; }
      wall[v] = tu_json_num(out, "wall_s");
      free(out);
    }
    char name[80];
    snprintf(name, sizeof name, "sk-warm 24 kernels: -j1 %.2fs / -j%ld", wall[0], ncpu);
    report(name, wall[1], "s", "speed-up", "");
    report("sk-warm speed-up -j1 -> -jN", wall[0] / wall[1], "x", "> 1", wall[0] / wall[1] > 1.2 ? "yes" : "NO");
  }
  if (cpu_only) goto done;

  /* 4. disk hit including module load: kernels compiled by another process (sk-warm), then
   *    resolved here one by one (LMDB read + cuLibraryLoadData + cuLibraryGetKernel). */
  {
    char mpath[600], warm[512];
    snprintf(mpath, sizeof mpath, "%s/disk.json", dir);
    FILE *m = fopen(mpath, "w");
    fprintf(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[");
    char s[96];
    salt_opt(s, sizeof s, "disk", 0);
    for (int i = 0; i < 32; i++)
      fprintf(m, "%s{\"op\":\"test.scale\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::scale<float, %d>\","
                 "\"options\":[\"%s\"]}", i ? "," : "", 32 * (i + 1), s);
    fprintf(m, "]}\n");
    fclose(m);
    if (!sk_warm_path(warm, sizeof warm)) return 1;
    char *wargv[] = {warm, "--manifest", mpath, "--arch", arch, "--cache-dir", dir, "--quiet", NULL};
    if (tu_run(wargv, NULL, NULL) != 0) { fprintf(stderr, "sk-warm failed\n"); return 1; }
    /* First GPU touch outside the timed region. */
    sk_kernel *k0;
    if (sk_kernel_resolve(&hit, &k0) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); return 1; }
    double ms[32];
    sk_counters before, after;
    sk_get_counters(&before);
    for (int i = 0; i < 32; i++) {
      char name[64];
      snprintf(name, sizeof name, "sk_test::scale<float, %d>", 32 * (i + 1));
      const char *opts[] = {s};
      sk_kernel_request r = {"test.scale", "test/scale.cuh", name, "", arch, opts, 1, 0};
      sk_kernel *k;
      double t0 = sk_now_seconds();
      if (sk_kernel_resolve(&r, &k) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); return 1; }
      ms[i] = (sk_now_seconds() - t0) * 1e3;
    }
    sk_get_counters(&after);
    double d = median(ms, 32);
    report("disk hit + module load, median of 32", d, "ms", "<= 0.3 ms", d <= 0.3 ? "yes" : "NO");
    report("  (disk hits counted)", (double)(after.disk_hits - before.disk_hits), "", "32", "");
  }

  /* 5. launch path vs raw cuLaunchKernel on the same function, empty kernel, host time/launch. */
  {
    sk_kernel *k;
    if (sk_kernel_resolve(&hit, &k) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); return 1; }
    void *fn;
    sk_kernel_get_info(k, &fn, NULL, NULL);
    CUstream stream = NULL;
    double ours[21], raw[21];
    const int n = 2000;
    for (int rep = 0; rep < 21; rep++) {
      double t0 = sk_now_seconds();
      for (int i = 0; i < n; i++) sk_cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL);
      double t1 = sk_now_seconds();
      for (int i = 0; i < n; i++) sk_kernel_launch(k, (sk_dim3){1, 1, 1}, (sk_dim3){32, 1, 1}, 0, stream, NULL);
      double t2 = sk_now_seconds();
      raw[rep] = (t1 - t0) / n * 1e6;
      ours[rep] = (t2 - t1) / n * 1e6;
      /* drain the queue between rounds so neither side waits on the other's backlog */
      sk_cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL);
      void *ev;
      sk_cu.cuEventCreate(&ev, 0);
      sk_cu.cuEventRecord(ev, stream);
      sk_cu.cuEventSynchronize(ev);
      sk_cu.cuEventDestroy(ev);
    }
    double r = median(raw, 21), o = median(ours, 21);
    report("raw cuLaunchKernel, host time per launch", r, "us", "", "");
    report("sk_kernel_launch, host time per launch", o, "us", "", "");
    report("launch overhead over raw", o - r, "us", "<= 0.3 us", o - r <= 0.3 ? "yes" : "NO");
  }
done:
  bench_json_close(&json);
  tu_rmrf(dir);
  free(dir);
  return 0;
}
