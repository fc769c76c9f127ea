/* Runtime spine tests that need no GPU: keys, NVRTC compiles for every target arch, the
 * resolution order across processes, corruption, crash safety, cross-process single flight,
 * freeze, degraded caches, errors. Each Criterion test runs in its own process, so each sets its
 * environment before the runtime initialises. */
#include <criterion/criterion.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "cache.h"
#include "runtime.h"
#include "sparkinfer.h"
#include "sparkinfer/jit.h"
#include "testutil.h"

static char *cache_dir;

static void setup_cache(void) {
  cache_dir = tu_tempdir("rt");
  cr_assert_not_null(cache_dir);
  setenv("SPARKINFER_CACHE_DIR", cache_dir, 1);
}
static void teardown_cache(void) {
  tu_rmrf(cache_dir);
  free(cache_dir);
}

static sk_kernel_request scale_request(const char *name, const char *arch, const char *const *opts, size_t nopts) {
  sk_kernel_request r = {"test.scale", "test/scale.cuh", name, "dtype=f32", arch, opts, nopts, 0};
  return r;
}

static sk_key key_of(sk_kernel_request r) {
  sk_key k;
  cr_assert_eq(sk_kernel_key(&r, &k), SK_OK, "%s", sk_last_error_message());
  return k;
}

Test(key, stable_and_sensitive_to_every_component, .init = setup_cache, .fini = teardown_cache) {
  const char *o1[] = {"-DA=1", "-DB=2"}, *o2[] = {"-DB=2", "-DA=1"}, *o3[] = {"-DA=1"};
  sk_key base = key_of(scale_request("sk_test::scale<float, 256>", "sm_120a", o1, 2));
  sk_key again = key_of(scale_request("sk_test::scale<float, 256>", "sm_120a", o1, 2));
  cr_assert(!memcmp(base.bytes, again.bytes, 16), "same request, different key");

  /* Things that must change the key. */
  sk_key diff[] = {
      key_of(scale_request("sk_test::scale<float, 128>", "sm_120a", o1, 2)), /* name expression */
      key_of(scale_request("sk_test::scale<float, 256>", "sm_121a", o1, 2)), /* arch */
      key_of(scale_request("sk_test::scale<float, 256>", "sm_120a", o2, 2)), /* option order */
      key_of(scale_request("sk_test::scale<float, 256>", "sm_120a", o3, 1)), /* option set */
  };
  for (size_t i = 0; i < sizeof diff / sizeof diff[0]; i++)
    cr_assert(memcmp(base.bytes, diff[i].bytes, 16), "component %zu did not change the key", i);
  sk_kernel_request linked = scale_request("sk_test::scale<float, 256>", "sm_120a", o1, 2);
  linked.link = 1;
  sk_key kl = key_of(linked);
  cr_assert(memcmp(base.bytes, kl.bytes, 16), "link flag did not change the key");
  sk_kernel_request other_src = {"test.scale", "common/defs.cuh", "sk_test::scale<float, 256>", "", "sm_120a", o1, 2, 0};
  sk_key ks = key_of(other_src);
  cr_assert(memcmp(base.bytes, ks.bytes, 16), "source did not change the key");

  /* Things that must not. */
  sk_kernel_request relabelled = scale_request("sk_test::scale<float, 256>", "sm_120a", o1, 2);
  relabelled.op = "another.op";
  relabelled.params = "something else";
  sk_key kr = key_of(relabelled);
  cr_assert(!memcmp(base.bytes, kr.bytes, 16), "op/params changed the key");
}

Test(key, embedded_source_hash_follows_content) {
  /* The embedder hashes content and the include closure: editing an included header changes
   * the closure hash of every source that includes it. */
  char *dir = tu_tempdir("embed");
  char path[512], out1[512], out2[512];
  snprintf(path, sizeof path, "%s/common", dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/common/a.cuh", dir);
  tu_write_file(path, "#pragma once\nint a;\n");
  snprintf(path, sizeof path, "%s/b.cuh", dir);
  tu_write_file(path, "#include \"common/a.cuh\"\nint b;\n");
  snprintf(out1, sizeof out1, "%s/o1.c", dir);
  snprintf(out2, sizeof out2, "%s/o2.c", dir);
  char embed[512];
  snprintf(embed, sizeof embed, "%s/bin/sk-embed", tu_build_dir());
  char *argv1[] = {embed, dir, out1, "b.cuh", "common/a.cuh", NULL};
  cr_assert_eq(tu_run(argv1, NULL, NULL), 0);
  snprintf(path, sizeof path, "%s/common/a.cuh", dir);
  tu_write_file(path, "#pragma once\nint a2;\n");
  char *argv2[] = {embed, dir, out2, "b.cuh", "common/a.cuh", NULL};
  cr_assert_eq(tu_run(argv2, NULL, NULL), 0);
  char *t1 = NULL, *t2 = NULL;
  char cmd1[600];
  snprintf(cmd1, sizeof cmd1, "/bin/sh");
  char *g1[] = {cmd1, "-c", NULL, NULL};
  char s1[700], s2[700];
  /* Sources are sorted by path: b.cuh is index 0; its closure hash is SK_CLOSURE_HASH_0. */
  snprintf(s1, sizeof s1, "grep 'define SK_CLOSURE_HASH_0 ' %s", out1);
  snprintf(s2, sizeof s2, "grep 'define SK_CLOSURE_HASH_0 ' %s", out2);
  g1[2] = s1;
  tu_run(g1, NULL, &t1);
  g1[2] = s2;
  tu_run(g1, NULL, &t2);
  cr_assert(t1 && t2 && *t1 && *t2, "embedder output lacks the closure hash of b.cuh");
  cr_assert_str_neq(t1, t2, "editing an included header did not change the includer's closure hash");
  /* An include that is not an embedded source is a build error. */
  snprintf(path, sizeof path, "%s/c.cuh", dir);
  tu_write_file(path, "#include \"missing.cuh\"\n");
  char *argv3[] = {embed, dir, out1, "c.cuh", NULL};
  cr_assert_neq(tu_run(argv3, NULL, NULL), 0);
  free(t1);
  free(t2);
  tu_rmrf(dir);
  free(dir);
}

Test(jit, compiles_test_kernels_for_every_target_arch, .init = setup_cache, .fini = teardown_cache) {
  const char *archs[] = {"sm_90a", "sm_120a", "sm_121a"};
  for (size_t a = 0; a < 3; a++) {
    sk_kernel_request r = scale_request("sk_test::scale<float, 256>", archs[a], NULL, 0);
    sk_prepare_info info;
    cr_assert_eq(sk_kernel_prepare(&r, &info), SK_OK, "%s: %s", archs[a], sk_last_error_message());
    cr_assert_eq(info.source, SK_RESOLVED_COMPILED);
    cr_assert_gt(info.cubin_bytes, 1000u);
    sk_kernel_request e = {"test.empty", "test/scale.cuh", "sk_test::empty<7>", "", archs[a], NULL, 0, 0};
    cr_assert_eq(sk_kernel_prepare(&e, NULL), SK_OK, "%s: %s", archs[a], sk_last_error_message());
  }
  /* The LTO path: NVRTC -dlto, then nvJitLink. */
  sk_kernel_request l = scale_request("sk_test::scale<float, 128>", "sm_120a", NULL, 0);
  l.link = 1;
  cr_assert_eq(sk_kernel_prepare(&l, NULL), SK_OK, "%s", sk_last_error_message());
  /* Second call: memory hit. */
  sk_prepare_info info;
  sk_kernel_request r = scale_request("sk_test::scale<float, 256>", "sm_120a", NULL, 0);
  cr_assert_eq(sk_kernel_prepare(&r, &info), SK_OK);
  cr_assert_eq(info.source, SK_RESOLVED_MEMORY);
  sk_counters c;
  sk_get_counters(&c);
  cr_assert_eq(c.compiles, 7u);
  cr_assert_eq(c.memory_hits, 1u);
}

/* ptxas's -v report (every compile passes -Xptxas=-v): the entry's own lines are picked, not a
 * callee's properties nor another entry whose name starts the same. */
Test(jit, ptxas_resource_report_is_parsed) {
  static const char log[] =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z1kILi1EEvPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kILi1EEvPf\n"
      "ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 160 bytes smem\n"
      "ptxas info    : Compiling entry function '_Z1kILi1EEvPfi' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z6calleev\n"
      "ptxas         .     48 bytes stack frame, 44 bytes spill stores, 44 bytes spill loads\n"
      "ptxas info    : Function properties for _Z1kILi1EEvPfi\n"
      "ptxas         .     72 bytes stack frame, 56 bytes spill stores, 64 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 2 barriers, 256 bytes cumulative stack size\n"
      "ptxas info    : Compile time = 25.570 ms\n";
  sk_kernel_resources r;
  cr_assert(sk_parse_ptxas_resources(log, "_Z1kILi1EEvPf", &r));
  cr_assert(r.registers == 40 && r.barriers == 1 && r.stack_frame_bytes == 8 && r.spill_store_bytes == 0 &&
                r.spill_load_bytes == 0 && r.static_smem_bytes == 160,
            "%u %u %u %u %u %u", r.registers, r.barriers, r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes,
            r.static_smem_bytes);
  cr_assert(sk_parse_ptxas_resources(log, "_Z1kILi1EEvPfi", &r));
  cr_assert(r.registers == 255 && r.barriers == 2 && r.stack_frame_bytes == 72 && r.spill_store_bytes == 56 &&
                r.spill_load_bytes == 64 && r.static_smem_bytes == 0,
            "%u %u %u %u %u %u", r.registers, r.barriers, r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes,
            r.static_smem_bytes);
  cr_assert_not(sk_parse_ptxas_resources(log, "_Z1kILi2EEvPf", &r));
  cr_assert_not(r.known);
  cr_assert_not(sk_parse_ptxas_resources("", "_Z1kILi1EEvPf", &r));
  cr_assert_not(sk_parse_ptxas_resources(NULL, "_Z1kILi1EEvPf", &r));
  /* A real compile reports them too (the scale kernel: a few registers, no spills). */
  sk_kernel_request req = scale_request("sk_test::scale<float, 256>", "sm_120a", NULL, 0);
  sk_compiled c;
  cr_assert_eq(sk_jit_compile(&req, &c), SK_OK, "%s", sk_last_error_message());
  cr_assert(c.resources.known && c.resources.registers > 0 && c.resources.spill_store_bytes == 0, "log: %s", c.log);
  sk_compiled_free(&c);
}

Test(jit, compile_error_is_reported_with_the_log, .init = setup_cache, .fini = teardown_cache) {
  sk_kernel_request r = scale_request("sk_test::scale<no_such_type, 256>", "sm_120a", NULL, 0);
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_COMPILE);
  cr_assert(strstr(sk_last_error_message(), "no_such_type"), "%s", sk_last_error_message());
  /* The failure is remembered: the second call fails the same way without recompiling. */
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_COMPILE);
  sk_counters c;
  sk_get_counters(&c);
  cr_assert_eq(c.compiles, 0u);
  cr_assert_eq(c.failures, 2u);
}

Test(jit, rejects_bad_requests_with_a_status) {
  setenv("SPARKINFER_CACHE_DISABLE", "1", 1);
  sk_kernel_request r = scale_request("sk_test::scale<float, 256>", "sm_120a", NULL, 0);
  cr_assert_eq(sk_kernel_prepare(NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  r.arch = "sm120";
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "sm120"));
  r.arch = NULL;
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_INVALID_ARGUMENT);
  r.arch = "sm_120a";
  r.source = "no/such.cuh";
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_NOT_FOUND);
  r.source = "test/scale.cuh";
  r.name_expr = "";
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_INVALID_ARGUMENT);
  r.name_expr = "sk_test::scale<float, 256>";
  const char *arch_opt[] = {"-arch=sm_90"};
  r.options = arch_opt;
  r.num_options = 1;
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_INVALID_ARGUMENT);
  r.options = NULL;
  r.num_options = 3;
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_INVALID_ARGUMENT);
  char long_name[SK_MAX_NAME_EXPR + 10];
  memset(long_name, 'x', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = 0;
  r.num_options = 0;
  r.name_expr = long_name;
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_ERR_INVALID_ARGUMENT);
  /* Launching or resolving without a driver fails with a status, not a crash. */
  cr_assert_eq(sk_kernel_launch(NULL, (sk_dim3){1, 1, 1}, (sk_dim3){1, 1, 1}, 0, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_kernel_launch_ex(NULL, (sk_dim3){1, 1, 1}, (sk_dim3){1, 1, 1}, 0, NULL, NULL, SK_LAUNCH_OVERLAP_PREVIOUS),
               SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(sk_status_string(SK_ERR_KERNEL_RESOLUTION_FROZEN), "SK_ERR_KERNEL_RESOLUTION_FROZEN");
  cr_assert_str_eq(sk_status_string((sk_status)999), "SK_ERR_UNKNOWN");
}

Test(jit, resolve_without_a_gpu_fails_cleanly) {
  setenv("SPARKINFER_CACHE_DISABLE", "1", 1);
  if (tu_exists("/dev/nvidia0")) cr_skip_test("a GPU is present");
  sk_kernel_request r = scale_request("sk_test::scale<float, 256>", "sm_120a", NULL, 0);
  sk_kernel *k = (sk_kernel *)0x1;
  sk_status s = sk_kernel_resolve(&r, &k);
  cr_assert(s == SK_ERR_NO_DRIVER || s == SK_ERR_NO_DEVICE, "got %s: %s", sk_status_string(s), sk_last_error_message());
  cr_assert_null(k);
  cr_assert_neq(sk_last_error_message()[0], 0);
  char arch[16];
  cr_assert_neq(sk_device_arch(0, arch, sizeof arch), SK_OK);
}

/* ---- across processes ------------------------------------------------------------------- */

static char helper_path[512];
static int run_helper(const char *dir, int count, int threads, const char *salt, char **out) {
  snprintf(helper_path, sizeof helper_path, "%s/tests/helpers/sk_resolve_helper", tu_build_dir());
  char env_dir[600], c[16], t[16];
  snprintf(env_dir, sizeof env_dir, "SPARKINFER_CACHE_DIR=%s", dir);
  snprintf(c, sizeof c, "%d", count);
  snprintf(t, sizeof t, "%d", threads);
  char *argv[] = {helper_path, "--count", c, "--threads", t, "--salt", (char *)salt, NULL};
  char *env[] = {env_dir, NULL};
  return tu_run(argv, env, out);
}

Test(cache, second_process_gets_disk_hits_and_compiles_nothing, .init = setup_cache, .fini = teardown_cache) {
  char *out = NULL;
  cr_assert_eq(run_helper(cache_dir, 6, 1, "disk", &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiles"), 6, "%s", out);
  free(out);
  cr_assert_eq(run_helper(cache_dir, 6, 1, "disk", &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiles"), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "disk_hits"), 6, "%s", out);
  free(out);
}

/* Flip one byte of the cubin of every stored record, straight through LMDB. Keys are copied
 * out first: a cursor's key pointer is not valid across a put. */
static int corrupt_all_records(const char *dir) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_cursor *cur;
  MDB_val k, v;
  unsigned char keys[64][16];
  int n = 0;
  if (mdb_env_create(&env)) return -1;
  mdb_env_set_maxdbs(env, 8);
  if (mdb_env_open(env, dir, 0, 0600)) return -1;
  if (mdb_txn_begin(env, NULL, 0, &txn)) return -1;
  if (mdb_dbi_open(txn, "records", 0, &dbi)) return -1;
  mdb_cursor_open(txn, dbi, &cur);
  while (n < 64 && mdb_cursor_get(cur, &k, &v, n ? MDB_NEXT : MDB_FIRST) == 0 && k.mv_size == 16)
    memcpy(keys[n++], k.mv_data, 16);
  mdb_cursor_close(cur);
  for (int i = 0; i < n; i++) {
    MDB_val key = {16, keys[i]};
    if (mdb_get(txn, dbi, &key, &v)) return -1;
    unsigned char *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 7] ^= 0x5a; /* inside the cubin, the last part of a record */
    MDB_val nv = {v.mv_size, copy};
    int rc = mdb_put(txn, dbi, &key, &nv, 0);
    free(copy);
    if (rc) return -1;
  }
  if (mdb_txn_commit(txn)) return -1;
  mdb_env_close(env);
  return n;
}

Test(cache, corrupted_record_is_detected_and_recompiled, .init = setup_cache, .fini = teardown_cache) {
  char *out = NULL;
  cr_assert_eq(run_helper(cache_dir, 3, 1, "corrupt", &out), 0, "%s", out);
  free(out);
  cr_assert_eq(corrupt_all_records(cache_dir), 3);
  cr_assert_eq(run_helper(cache_dir, 3, 1, "corrupt", &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "corrupt"), 3, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiles"), 3, "%s", out);
  free(out);
  cr_assert_eq(run_helper(cache_dir, 3, 1, "corrupt", &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "disk_hits"), 3, "replaced records should be valid: %s", out);
  free(out);
}

static int count_bad(void *ud, const uint8_t key[16], const sk_record *rec, size_t sz, const char *err) {
  (void)key; (void)sz; (void)err;
  int *counts = ud;
  counts[rec ? 0 : 1]++;
  return 0;
}

Test(cache, kill_9_during_compile_and_store_leaves_a_valid_cache, .init = setup_cache, .fini = teardown_cache,
     .timeout = 240) {
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  srand(seed);
  snprintf(helper_path, sizeof helper_path, "%s/tests/helpers/sk_resolve_helper", tu_build_dir());
  char env_dir[600];
  snprintf(env_dir, sizeof env_dir, "SPARKINFER_CACHE_DIR=%s", cache_dir);
  for (int iter = 0; iter < 24; iter++) {
    char salt[32], start[16];
    snprintf(salt, sizeof salt, "kill%d", iter % 6); /* some keys repeat: exercise claims too */
    snprintf(start, sizeof start, "%d", rand() % 8);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
      putenv(env_dir);
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execl(helper_path, helper_path, "--count", "8", "--threads", "2", "--salt", salt, "--start", start, (char *)NULL);
      _exit(127);
    }
    struct timespec ts = {0, (long)(rand() % 250) * 1000000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  /* The cache opens and every record verifies. */
  sk_cache *c;
  sk_cache_options o = {.dir = cache_dir};
  cr_assert_eq(sk_cache_open(&o, &c), SK_OK, "seed %u: %s", seed, sk_last_error_message());
  int counts[2] = {0, 0};
  cr_assert_eq(sk_cache_foreach(c, count_bad, counts), SK_OK);
  cr_assert_eq(counts[1], 0, "seed %u: %d bad records", seed, counts[1]);
  sk_cache_close(c);
  /* And a normal run afterwards completes, never hanging on a dead process's claim. */
  char *out = NULL;
  cr_assert_eq(run_helper(cache_dir, 8, 2, "kill0", &out), 0, "seed %u: %s", seed, out);
  free(out);
}

Test(cache, eight_processes_four_threads_compile_each_key_once, .init = setup_cache, .fini = teardown_cache,
     .timeout = 240) {
  enum { PROCS = 8, KEYS = 32 };
  snprintf(helper_path, sizeof helper_path, "%s/tests/helpers/sk_resolve_helper", tu_build_dir());
  char env_dir[600];
  snprintf(env_dir, sizeof env_dir, "SPARKINFER_CACHE_DIR=%s", cache_dir);
  int fds[PROCS];
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    pids[p] = fork();
    cr_assert_geq(pids[p], 0);
    if (pids[p] == 0) {
      dup2(pipefd[1], 1);
      close(pipefd[0]);
      putenv(env_dir);
      char start[16];
      snprintf(start, sizeof start, "%d", p * 4);
      execl(helper_path, helper_path, "--count", "32", "--threads", "4", "--salt", "flight", "--start", start,
            (char *)NULL);
      _exit(127);
    }
    close(pipefd[1]);
    fds[p] = pipefd[0];
  }
  int total_compiles = 0;
  for (int p = 0; p < PROCS; p++) {
    char buf[1024];
    ssize_t n = read(fds[p], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    close(fds[p]);
    int st;
    waitpid(pids[p], &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d failed: %s", p, buf);
    cr_assert_eq(tu_json_num(buf, "errors"), 0, "%s", buf);
    total_compiles += (int)tu_json_num(buf, "compiles");
  }
  cr_assert_eq(total_compiles, KEYS, "each of %d keys must be compiled exactly once across processes, got %d compiles",
               KEYS, total_compiles);
}

/* ---- freeze -------------------------------------------------------------------------------- */

typedef struct { sk_kernel_request req; sk_status status; char message[2048]; } freeze_probe;

static void *probe_thread(void *arg) {
  freeze_probe *p = arg;
  p->status = sk_kernel_prepare(&p->req, NULL);
  snprintf(p->message, sizeof p->message, "%s", sk_last_error_message());
  return NULL;
}

Test(freeze, refuses_compiles_and_disk_loads_from_any_thread, .init = setup_cache, .fini = teardown_cache) {
  /* A kernel on disk from an earlier process, one warmed in memory, one never seen. */
  char *out = NULL;
  cr_assert_eq(run_helper(cache_dir, 2, 1, "0", &out), 0, "%s", out);
  free(out);
  const char *salt[] = {"-DSK_TEST_SALT=0"};
  sk_kernel_request warmed = scale_request("sk_test::scale<float, 512>", "sm_120a", salt, 1);
  cr_assert_eq(sk_kernel_prepare(&warmed, NULL), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(sk_kernel_resolution_frozen(), 0);
  cr_assert_eq(sk_freeze_kernel_resolution("serving"), SK_OK);
  cr_assert_eq(sk_kernel_resolution_frozen(), 1);
  cr_assert_eq(sk_freeze_kernel_resolution("again"), SK_OK); /* keeps the first reason */
  cr_assert_eq(sk_kernel_prepare(&warmed, NULL), SK_OK, "memory hits still work: %s", sk_last_error_message());

  freeze_probe probes[4] = {
      {scale_request("sk_test::scale<float, 32>", "sm_120a", salt, 1)},  /* on disk */
      {scale_request("sk_test::scale<float, 64>", "sm_120a", salt, 1)},  /* on disk */
      {scale_request("sk_test::scale<float, 96>", "sm_120a", salt, 1)},  /* nowhere */
      {scale_request("sk_test::scale<float, 32>", "sm_121a", salt, 1)},  /* nowhere */
  };
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, probe_thread, &probes[i]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(probes[i].status, SK_ERR_KERNEL_RESOLUTION_FROZEN, "probe %d: %s", i, probes[i].message);
    const char *m = probes[i].message;
    cr_assert(strstr(m, "frozen") && strstr(m, "reason: serving") && strstr(m, "test.scale") &&
                  strstr(m, probes[i].req.name_expr) && strstr(m, "dtype=f32") && strstr(m, probes[i].req.arch) &&
                  strstr(m, "key ") && strstr(m, "Warm this shape up"),
              "message lacks a documented part: %s", m);
  }
  sk_counters c;
  sk_get_counters(&c);
  cr_assert_eq(c.disk_hits, 0u, "a frozen process must not load from disk");
  cr_assert_eq(c.frozen_refusals, 4u);
  cr_assert_eq(sk_freeze_kernel_resolution_ex("x", 0x80), SK_ERR_INVALID_ARGUMENT);
}

Test(freeze, allow_disk_hits_option_loads_but_never_compiles, .init = setup_cache, .fini = teardown_cache) {
  char *out = NULL;
  cr_assert_eq(run_helper(cache_dir, 2, 1, "0", &out), 0, "%s", out);
  free(out);
  cr_assert_eq(sk_freeze_kernel_resolution_ex("serving", SK_FREEZE_ALLOW_DISK_HITS), SK_OK);
  const char *salt[] = {"-DSK_TEST_SALT=0"};
  sk_kernel_request on_disk = scale_request("sk_test::scale<float, 64>", "sm_120a", salt, 1);
  sk_prepare_info info;
  cr_assert_eq(sk_kernel_prepare(&on_disk, &info), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(info.source, SK_RESOLVED_DISK);
  sk_kernel_request nowhere = scale_request("sk_test::scale<float, 160>", "sm_120a", salt, 1);
  cr_assert_eq(sk_kernel_prepare(&nowhere, NULL), SK_ERR_KERNEL_RESOLUTION_FROZEN);
  sk_counters c;
  sk_get_counters(&c);
  cr_assert_eq(c.compiles, 0u);
}

/* ---- degraded caches ---------------------------------------------------------------------- */

Test(cache, unwritable_dir_degrades_to_memory_only) {
  char *dir = tu_tempdir("unwritable");
  char file[600], sub[700];
  snprintf(file, sizeof file, "%s/a-file", dir);
  tu_write_file(file, "x");
  snprintf(sub, sizeof sub, "%s/cache", file); /* a directory under a regular file cannot exist */
  setenv("SPARKINFER_CACHE_DIR", sub, 1);
  sk_cache_info ci;
  cr_assert_eq(sk_get_cache_info(&ci), SK_OK);
  cr_assert_eq(ci.mode, SK_CACHE_MODE_MEMORY_ONLY);
  cr_assert_neq(ci.reason[0], 0);
  sk_kernel_request r = scale_request("sk_test::scale<float, 256>", "sm_120a", NULL, 0);
  cr_assert_eq(sk_kernel_prepare(&r, NULL), SK_OK, "memory-only still compiles: %s", sk_last_error_message());
  tu_rmrf(dir);
  free(dir);
}

Test(cache, foreign_owned_or_shared_dir_is_refused) {
  if (geteuid() != 0) cr_skip_test("needs root to chown");
  char *dir = tu_tempdir("foreign");
  char sub[600];
  snprintf(sub, sizeof sub, "%s/cache", dir);
  mkdir(sub, 0700);
  cr_assert_eq(chown(sub, 65534, 65534), 0);
  setenv("SPARKINFER_CACHE_DIR", sub, 1);
  sk_cache_info ci;
  cr_assert_eq(sk_get_cache_info(&ci), SK_OK);
  cr_assert_eq(ci.mode, SK_CACHE_MODE_MEMORY_ONLY);
  cr_assert(strstr(ci.reason, sub), "reason should name the directory: %s", ci.reason);
  cr_assert(!tu_exists("/tmp/none"));
  tu_rmrf(dir);
  free(dir);
}

Test(cache, world_writable_dir_is_refused) {
  char *dir = tu_tempdir("shared");
  chmod(dir, 0777);
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
  sk_cache_info ci;
  cr_assert_eq(sk_get_cache_info(&ci), SK_OK);
  cr_assert_eq(ci.mode, SK_CACHE_MODE_MEMORY_ONLY, "a group/world-writable cache dir must be refused");
  tu_rmrf(dir);
  free(dir);
}

Test(cache, map_grows_when_full, .init = setup_cache, .fini = teardown_cache) {
  setenv("SPARKINFER_CACHE_INITIAL_MAP_BYTES", "65536", 1);
  char *out = NULL;
  char env_dir[600];
  snprintf(env_dir, sizeof env_dir, "SPARKINFER_CACHE_DIR=%s", cache_dir);
  snprintf(helper_path, sizeof helper_path, "%s/tests/helpers/sk_resolve_helper", tu_build_dir());
  char *argv[] = {helper_path, "--count", "16", "--threads", "2", "--salt", "grow", NULL};
  char *env[] = {env_dir, "SPARKINFER_CACHE_INITIAL_MAP_BYTES=65536", NULL};
  cr_assert_eq(tu_run(argv, env, &out), 0, "%s", out);
  free(out);
  cr_assert_eq(tu_run(argv, env, &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "disk_hits"), 16, "all records readable after growth: %s", out);
  free(out);
}

Test(env, malformed_values_are_reported) {
  setenv("SPARKINFER_PRINT_COMPILE_PROGRESS", "lots", 1);
  cr_assert_eq(sk_init(), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "SPARKINFER_PRINT_COMPILE_PROGRESS"), "%s", sk_last_error_message());
}

/* The cache's settings are read at init too: a malformed one fails sk_init, and the cache does
 * not pass itself off as read-write (it is memory-only, with that message). */
Test(env, malformed_cache_setting_fails_init_and_leaves_no_cache) {
  char *dir = tu_tempdir("badenv");
  char sub[600];
  snprintf(sub, sizeof sub, "%s/cache", dir);
  setenv("SPARKINFER_CACHE_DIR", sub, 1);
  setenv("SPARKINFER_CACHE_MAX_BYTES", "10%", 1);
  cr_assert_eq(sk_init(), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "SPARKINFER_CACHE_MAX_BYTES=10%"), "%s", sk_last_error_message());
  sk_cache_info ci;
  cr_assert_eq(sk_get_cache_info(&ci), SK_OK);
  cr_assert_eq(ci.mode, SK_CACHE_MODE_MEMORY_ONLY);
  cr_assert(strstr(ci.reason, "SPARKINFER_CACHE_MAX_BYTES"), "%s", ci.reason);
  cr_assert(!tu_exists(sub), "no cache directory is created");
  tu_rmrf(dir);
  free(dir);
}

Test(log, compile_progress_and_jsonl_log, .init = setup_cache, .fini = teardown_cache) {
  char log[600];
  snprintf(log, sizeof log, "%s/compile.jsonl", cache_dir);
  char *out = NULL;
  char env_dir[700], env_log[700];
  snprintf(env_dir, sizeof env_dir, "SPARKINFER_CACHE_DIR=%s/c", cache_dir);
  snprintf(env_log, sizeof env_log, "SPARKINFER_COMPILE_LOG=%s", log);
  snprintf(helper_path, sizeof helper_path, "%s/tests/helpers/sk_resolve_helper", tu_build_dir());
  char *argv[] = {helper_path, "--count", "3", "--threads", "1", "--salt", "log", NULL};
  char *env[] = {env_dir, env_log, NULL};
  cr_assert_eq(tu_run(argv, env, &out), 0, "%s", out);
  free(out);
  FILE *f = fopen(log, "r");
  cr_assert_not_null(f);
  char line[4096];
  int starts = 0, dones = 0;
  while (fgets(line, sizeof line, f)) {
    cJSON *o = cJSON_Parse(line);
    cr_assert_not_null(o, "not JSON: %s", line);
    const char *ev = cJSON_GetObjectItem(o, "event")->valuestring;
    if (!strcmp(ev, "compile_start")) starts++;
    if (!strcmp(ev, "compile_done")) {
      dones++;
      cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "nvrtc_ms")));
      cr_assert(cJSON_GetObjectItem(o, "cubin_bytes")->valuedouble > 0);
      cr_assert_str_eq(cJSON_GetObjectItem(o, "op")->valuestring, "test.scale");
      const cJSON *res = cJSON_GetObjectItem(o, "resources"); /* ptxas's report */
      cr_assert(cJSON_IsObject(res) && cJSON_GetObjectItem(res, "registers")->valuedouble > 0, "%s", line);
    }
    cJSON_Delete(o);
  }
  fclose(f);
  cr_assert_eq(starts, 3);
  cr_assert_eq(dones, 3);
}

Test(warmup, record_then_replay_with_sk_warm, .init = setup_cache, .fini = teardown_cache) {
  char manifest[600], env_rec[700], env_dir[700], other[700];
  snprintf(manifest, sizeof manifest, "%s/warm.json", cache_dir);
  snprintf(env_rec, sizeof env_rec, "SPARKINFER_RECORD_WARMUP=%s", manifest);
  snprintf(env_dir, sizeof env_dir, "SPARKINFER_CACHE_DIR=%s/a", cache_dir);
  snprintf(helper_path, sizeof helper_path, "%s/tests/helpers/sk_resolve_helper", tu_build_dir());
  char *argv[] = {helper_path, "--count", "4", "--threads", "1", "--salt", "rec", NULL};
  char *env[] = {env_dir, env_rec, NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, env, &out), 0, "%s", out);
  free(out);
  cr_assert(tu_exists(manifest), "no manifest recorded");
  /* Replay offline into another cache: 4 compiles; a process using that cache compiles nothing. */
  snprintf(other, sizeof other, "%s/b", cache_dir);
  char warm[512];
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  char *wargv[] = {warm, "--manifest", manifest, "--cache-dir", other, "--json", "--quiet", NULL};
  cr_assert_eq(tu_run(wargv, NULL, &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiled"), 4, "%s", out);
  free(out);
  char env_other[800];
  snprintf(env_other, sizeof env_other, "SPARKINFER_CACHE_DIR=%s", other);
  char *env2[] = {env_other, NULL};
  cr_assert_eq(tu_run(argv, env2, &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiles"), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "disk_hits"), 4, "%s", out);
  free(out);
}
