/* The harness's run path on the stub driver (tests/stub/stub.h; no GPU), one test per registered
 * op and stub device: an H200-like sm_90 (132 SMs), an RTX 5090-like sm_120 (170 SMs, 99 KiB of
 * shared memory per block) and a DGX Spark-like sm_121 (48 SMs). Every SKH_CPU / SKH_GPU case of
 * the op's table gets a real plan for the device's arch (its kernels compile with NVRTC into the
 * build's stub cache and "load" on the stub; on sm_120a / sm_121a the SM120-only paths are picked,
 * whose host code runs nowhere else without SM120 hardware), binds fake views and the scratch,
 * and runs:
 *  - sk_run returns SK_OK and launches at least one kernel, each launch one the device accepts
 *    (the stub refuses grids and blocks out of range, and dynamic shared memory beyond the
 *    kernel's opt-in or an opt-in beyond the device's limit: 99 KiB a block on SM120);
 *  - a run makes no driver call but launches and stream-ordered memsets / copies (no allocation,
 *    no synchronisation, no module load: the op.h contract of run);
 *  - after sk_freeze_kernel_resolution the same plans are made again from the process table and
 *    run the same number of launches.
 *  - every kernel launched fits the device with its compiled resources (ptxas's report in the
 *    cache record): static + dynamic shared memory within the block limit (99 KiB on SM120), and
 *    its registers for the largest block launched within the 64K register file of a block.
 * What the kernels compute is the GPU suite's (tests/gpu/test_ops_gpu.c); this one finds host
 * bugs of the run callbacks (an unset kernel slot, a launch the driver would refuse for its
 * geometry, a run that synchronises) on every machine, under SAN=1 too. */
#include <cjson/cJSON.h>
#include <criterion/parameterized.h>

#include "harness/harness.h"
#include "runtime.h" /* sk_arch_block_smem_limit */
#include "sparkinfer/jit.h"
#include "stub/stub.h"

/* The kernels the op's plans used (process-lifetime entries of the runtime's table). */
#define MAX_SEEN 4096
static const struct sk_kernel *seen[MAX_SEEN];
static int nseen;
static void note_kernels(const sk_plan *p) {
  for (size_t i = 0; i < sk_plan_kernel_count(p); i++) {
    const struct sk_kernel *k = sk_plan_kernel(p, i);
    int known = !k;
    for (int j = 0; j < nseen && !known; j++) known = seen[j] == k;
    if (!known && nseen < MAX_SEEN) seen[nseen++] = k;
  }
}

/* Every launched kernel against its ptxas report in the stub cache's records (sk-cache --json ls). */
static void check_resources(const char *op) {
  char bin[512], cache[512], arch[16];
  snprintf(bin, sizeof bin, "%s/bin/sk-cache", tu_build_dir());
  snprintf(cache, sizeof cache, "%s/stub/cache", tu_build_dir());
  snprintf(arch, sizeof arch, "sm_%sa", getenv("SK_STUB_CC"));
  char *argv[] = {bin, "--cache-dir", cache, "--json", "ls", NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "sk-cache ls: %s", out ? out : "");
  cJSON *records = cJSON_Parse(out);
  cr_assert(cJSON_IsArray(records), "sk-cache --json ls: not a list");
  const unsigned smem_limit = sk_arch_block_smem_limit(arch);
  int launched = 0, checked = 0;
  for (int i = 0; i < nseen; i++) {
    void *fn = NULL;
    const char *lowered = NULL;
    sk_key key;
    cr_assert_eq(sk_kernel_get_info(seen[i], &fn, &lowered, &key), SK_OK);
    unsigned threads = 0, smem = 0;
    if (!stub_kernel_launched(fn, &threads, &smem)) continue;
    launched++;
    char hex[40];
    sk_key_hex(&key, hex, sizeof hex);
    const cJSON *r, *res = NULL;
    const char *name = lowered;
    cJSON_ArrayForEach(r, records) {
      const cJSON *k = cJSON_GetObjectItem(r, "key"), *n = cJSON_GetObjectItem(r, "name");
      if (!cJSON_IsString(k) || strcmp(k->valuestring, hex)) continue;
      res = cJSON_GetObjectItem(r, "resources");
      if (cJSON_IsString(n)) name = n->valuestring;
    }
    if (!cJSON_IsObject(res)) continue; /* a record without a ptxas report */
    const unsigned regs = (unsigned)cJSON_GetObjectItem(res, "registers")->valuedouble,
                   statics = (unsigned)cJSON_GetObjectItem(res, "static_smem_bytes")->valuedouble;
    /* registers are allocated per warp in units of 256 */
    const unsigned long long per_warp = (regs * 32ull + 255) / 256 * 256, warps = (threads + 31) / 32;
    cr_expect_leq(statics + smem, smem_limit, "%s [%s] %s: %u B static + %u B dynamic shared memory, the block limit is %u B", op,
                  arch, name, statics, smem, smem_limit);
    cr_expect_leq(per_warp * warps, 65536, "%s [%s] %s: %u registers x %u threads exceed a block's 64K registers", op, arch,
                  name, regs, threads);
    checked++;
  }
  cJSON_Delete(records);
  free(out);
  cr_expect(!launched || checked, "%s [%s]: no launched kernel has a ptxas report in %s", op, arch, cache);
  fprintf(stderr, "  %d kernels launched, %d checked against their resources\n", launched, checked);
}

/* Driver entries a run may use. */
static const char *const run_entries[] = {"cuLaunchKernelEx", "cuLaunchKernel", "cuMemsetD8Async", "cuMemsetD32Async",
                                          "cuMemcpyAsync", "cuStreamIsCapturing"};
#define N_RUN_ENTRIES (sizeof run_entries / sizeof run_entries[0])

static unsigned long long launches(void) { return stub_calls("cuLaunchKernelEx") + stub_calls("cuLaunchKernel"); }
static unsigned long long run_calls(void) {
  unsigned long long n = 0;
  for (size_t i = 0; i < N_RUN_ENTRIES; i++) n += stub_calls(run_entries[i]);
  return n;
}

/* Plan, bind and run case c once; the launches it made (0 with a failure reported). */
static unsigned long long run_case(const skh_op *op, const skh_case *c, const char *name) {
  sk_plan *plan = NULL;
  skh_tensor t[SKH_MAX_TENSORS];
  DLTensor dl[SKH_MAX_TENSORS];
  const DLTensor *ptrs[SKH_MAX_TENSORS];
  size_t n = 0;
  char err[512];
  const sk_status ps = skh_case_open(op, c, NULL, 0, &plan, t, &n, err, sizeof err);
  if (ps == SK_ERR_UNSUPPORTED) return (unsigned long long)-1; /* e.g. an SM120-only case on the sm_90 stub */
  cr_assert_eq(ps, SK_OK, "%s: %s", name, err);
  void *scratch = skh_fake_views(t, n, dl, ptrs);
  sk_scratch_spec spec;
  cr_assert_eq(sk_plan_scratch_spec(plan, &spec), SK_OK);
  sk_binding *b = NULL;
  note_kernels(plan);
  cr_assert_eq(sk_binding_create(plan, c->entry, &b), SK_OK, "%s: %s", name, sk_last_error_message());
  cr_assert_eq(sk_bind(b, ptrs, n, spec.bytes ? scratch : NULL, spec.bytes), SK_OK, "%s: bind: %s", name, sk_last_error_message());
  const unsigned long long total = stub_calls_total(), allowed = run_calls(), before = launches();
  const sk_status rs = sk_run(b, (void *)0x1000);
  cr_expect_eq(rs, SK_OK, "%s: run: %s", name, sk_last_error_message());
  const unsigned long long made = launches() - before;
  cr_expect_gt(made, 0, "%s: the run launched nothing", name);
  cr_expect_eq(stub_calls_total() - total, run_calls() - allowed, "%s: the run made driver calls besides launches, memsets and copies",
               name);
  sk_binding_destroy(b);
  skh_tensors_free(t, n);
  sk_plan_destroy(plan);
  return rs == SK_OK ? made : 0;
}

static void run_op(const skh_op *op) {
  const size_t count = skh_case_count(op);
  unsigned long long *made = calloc(count, sizeof *made);
  cr_assert(made);
  int ran = 0, skipped = 0, runnable = 0;
  unsigned long long total = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) cr_assert_eq(sk_freeze_kernel_resolution("test_ops_stub: the second pass"), SK_OK);
    for (size_t i = 0; i < count; i++) {
      skh_case c;
      skh_case_get(op, i, &c);
      if (!(c.flags & (SKH_CPU | SKH_GPU)) || (c.flags & SKH_NO_RUN)) continue;
      char name[200];
      snprintf(name, sizeof name, "%s [stub sm_%s%s] %s", op->op, getenv("SK_STUB_CC"), pass ? ", frozen" : "", c.name);
      const unsigned long long m = run_case(op, &c, name);
      if (pass == 1) {
        cr_expect_eq(m, made[i], "%s: %llu launches after the freeze, %llu before", name, m, made[i]);
        continue;
      }
      made[i] = m;
      runnable++;
      if (m == (unsigned long long)-1) skipped++;
      else ran++, total += m;
    }
  }
  free(made);
  fprintf(stderr, "  %d cases ran (%llu launches), %d not on this arch\n", ran, total, skipped);
  cr_expect(!runnable || ran > 0, "%s: no case runs on a stub sm_%s", op->op, getenv("SK_STUB_CC"));
  check_resources(op->op);
}

/* The stub devices: compute capability and SM count. */
static const struct { int cc, sms; } devices[] = {{90, 132}, {120, 170}, {121, 48}};
#define N_DEVICES (sizeof devices / sizeof devices[0])

ParameterizedTestParameters(ops_stub, runs) {
  static size_t idx[64 * N_DEVICES];
  const size_t n = skh_op_count() < 64 ? skh_op_count() : 64;
  for (size_t i = 0; i < n * N_DEVICES; i++) idx[i] = i;
  return cr_make_param_array(size_t, idx, n * N_DEVICES);
}

ParameterizedTest(size_t *i, ops_stub, runs, .init = stub_setup, .timeout = 900) {
  const skh_op *op = skh_op_at(*i / N_DEVICES);
  cr_assert(op);
  char cc[8], sms[8];
  snprintf(cc, sizeof cc, "%d", devices[*i % N_DEVICES].cc);
  snprintf(sms, sizeof sms, "%d", devices[*i % N_DEVICES].sms);
  setenv("SK_STUB_CC", cc, 1); /* read by the stub at each attribute query: before the first plan */
  setenv("SK_STUB_SMS", sms, 1);
  fprintf(stderr, "ops_stub.runs: %s on a stub sm_%s with %s SMs\n", op->op, cc, sms);
  run_op(op);
}
