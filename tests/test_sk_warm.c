/* sk-warm command-line tests: good manifests build, bad ones exit 2 and write nothing. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "testutil.h"

static int run_warm(const char *manifest_text, const char *cache, const char *extra, char **out) {
  char *dir = tu_tempdir("warm-m");
  char path[512], warm[512];
  snprintf(path, sizeof path, "%s/m.json", dir);
  tu_write_file(path, manifest_text);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  char *argv[12] = {warm, "--manifest", path, "--cache-dir", (char *)cache, "--quiet", "-j", "2"};
  int n = 8;
  if (extra) argv[n++] = (char *)extra;
  argv[n] = NULL;
  int rc = tu_run(argv, NULL, out);
  tu_rmrf(dir);
  free(dir);
  return rc;
}

/* sk-warm with `env` (NAME=VALUE entries) added: exit status, stdout in *out and stderr in *err
 * (both malloc'd). */
static int run_warm_env(const char *manifest_text, const char *cache, const char *extra, char *const env[], char **out,
                        char **err) {
  char *dir = tu_tempdir("warm-e");
  char path[512], errpath[512], warm[512];
  snprintf(path, sizeof path, "%s/m.json", dir);
  snprintf(errpath, sizeof errpath, "%s/stderr", dir);
  tu_write_file(path, manifest_text);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  char *argv[12] = {warm, "--manifest", path, "--cache-dir", (char *)cache, "-j", "1"};
  int n = 7;
  if (extra) argv[n++] = (char *)extra;
  argv[n] = NULL;
  /* tu_run keeps the test's stderr: send the tool's to a file for the duration. */
  fflush(stderr);
  const int saved = dup(2), fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  const int rc = tu_run(argv, env, out);
  dup2(saved, 2);
  close(saved);
  FILE *f = fopen(errpath, "r");
  *err = calloc(1, 1 << 16);
  if (f) {
    if (fread(*err, 1, (1 << 16) - 1, f) == 0) {}
    fclose(f);
  }
  tu_rmrf(dir);
  free(dir);
  return rc;
}

static const char *const scale_manifest =
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":["
    "{\"op\":\"test.scale\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::scale<float, 64>\","
    "\"archs\":[\"sm_120a\"]}]}";

/* docs/env.md: a malformed value makes sk_init fail; sk-warm says so, exits 1 and writes nothing. */
static const char *const bad_settings[] = {
    "SPARKINFER_CACHE_MAX_BYTES=10%",      "SPARKINFER_CACHE_INITIAL_MAP_BYTES=xyz",
    "SPARKINFER_CACHE_READONLY=maybe",     "SPARKINFER_CACHE_DISABLE=perhaps",
    "SPARKINFER_CACHE_MAX_BYTES=-5",       "SPARKINFER_CACHE_INITIAL_MAP_BYTES=99999999999999999999",
};

/* The parameters of a test run once per entry of `table`: the entry's index. */
#define INDEX_PARAMETERS(suite, test, table)                                                     \
  ParameterizedTestParameters(suite, test) {                                                     \
    static int idx[sizeof table / sizeof table[0]];                                              \
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) idx[i] = (int)i;                     \
    return cr_make_param_array(int, idx, sizeof idx / sizeof idx[0]);                            \
  }

INDEX_PARAMETERS(sk_warm, malformed_cache_setting_exits_1_and_writes_nothing, bad_settings)

ParameterizedTest(int *i, sk_warm, malformed_cache_setting_exits_1_and_writes_nothing) {
  char *dir = tu_tempdir("warm");
  char cache[600], setting[128], name[128];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  snprintf(setting, sizeof setting, "%s", bad_settings[*i]);
  snprintf(name, sizeof name, "%.*s", (int)(strchr(setting, '=') - setting), setting);
  char *env[] = {setting, NULL};
  char *out = NULL, *err = NULL;
  int rc = run_warm_env(scale_manifest, cache, NULL, env, &out, &err);
  cr_assert_eq(rc, 1, "%s: exit %d, stderr: %s", setting, rc, err);
  cr_assert(strstr(err, name), "%s: the message does not name the variable: %s", setting, err);
  cr_assert(!tu_exists(cache), "%s: the cache dir was created", setting);
  free(out);
  free(err);
  tu_rmrf(dir);
  free(dir);
}

static const char *const bad_manifests[] = {
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",",  /* truncated */
    "",                                                                              /* empty */
    "[1,2,3]",                                                                       /* not an object */
    "{\"format\":\"other\",\"version\":1}",                                          /* wrong format */
    "{\"format\":\"sparkinfer-manifest\",\"version\":2}",                            /* wrong version */
    "{\"format\":\"sparkinfer-manifest\",\"version\":-1}",                           /* negative */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1e308}",                        /* huge */
    "{\"format\":\"sparkinfer-manifest\",\"version\":\"1\"}",                        /* wrong type */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":{}}",             /* wrong type */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":7}]}",                                                                 /* wrong type */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"link\":5}]}",                                  /* wrong type */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"nope.cuh\","
    "\"name\":\"sk_test::empty<1>\"}]}",                                             /* unknown source */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"arch\":\"sm_12x\"}]}",                         /* bad arch */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"optoins\":[]}]}",                              /* unknown field */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"no.such_op\",\"caps\":{}}]}", /* unknown op */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"no.such_op\",\"caps\":{\"m\":-5,"
    "\"k\":1e300}}]}",                                                               /* unknown op, wild numbers */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"options\":[1]}]}",                             /* option not a string */
    /* cJSON accepts these; the manifest parser must not: */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"arch\":\"sm_120a\"}]} trailing",             /* trailing garbage */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1}"
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"arch\":\"sm_120a\"}]}",                      /* two documents */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"params\":\"a\\u0000b\",\"arch\":\"sm_120a\"}]}", /* \u0000 in a string */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":[{\"op\":\"t\",\"source\":\"test/scale.cuh\","
    "\"name\":\"sk_test::empty<1>\",\"name\":\"sk_test::empty<2>\",\"arch\":\"sm_120a\"}]}", /* duplicate key */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"format\":\"x\"}",               /* duplicate top-level key */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"gemm.blockscaled\",\"archs\":[\"sm_120a\"],"
    "\"caps\":{\"recipe\":\"mxfp8\",\"n\":128.5,\"k\":128,\"m\":[1]}}]}",                /* fractional caps.n */
    "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":[{\"op\":\"gemm.blockscaled\",\"archs\":[\"sm_120a\"],"
    "\"caps\":{\"recipe\":\"mxfp8\",\"n\":128,\"k\":128,\"m\":[1.5]}}]}",                /* fractional caps.m[0] */
};

INDEX_PARAMETERS(sk_warm, bad_manifest_exits_2_and_writes_nothing, bad_manifests)

ParameterizedTest(int *i, sk_warm, bad_manifest_exits_2_and_writes_nothing) {
  char *dir = tu_tempdir("warm");
  char cache[600];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  char *out = NULL;
  int rc = run_warm(bad_manifests[*i], cache, NULL, &out);
  cr_assert_eq(rc, 2, "manifest %d: exit %d", *i, rc);
  cr_assert(!tu_exists(cache), "manifest %d: the cache dir was created", *i);
  free(out);
  tu_rmrf(dir);
  free(dir);
}

Test(sk_warm, builds_then_reports_cached_then_json) {
  char *dir = tu_tempdir("warm");
  char cache[600];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  const char *m =
      "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":["
      "{\"op\":\"test.scale\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::scale<float, 128>\",\"params\":\"f32\"},"
      "{\"op\":\"test.scale\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::scale<float, 128>\",\"params\":\"dup\"},"
      "{\"op\":\"test.empty\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::empty<3>\",\"archs\":[\"sm_120a\"]}]}";
  char *out = NULL;
  /* No --arch: entries without archs go to sm_120a and sm_121a; duplicates are built once. */
  cr_assert_eq(run_warm(m, cache, "--json", &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "kernels"), 3, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiled"), 3, "%s", out);
  free(out);
  cr_assert_eq(run_warm(m, cache, "--json", &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "cached"), 3, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiled"), 0, "%s", out);
  free(out);
  tu_rmrf(dir);
  free(dir);
}

Test(sk_warm, compile_failure_exits_1) {
  char *dir = tu_tempdir("warm");
  char cache[600];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  const char *m = "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":["
                  "{\"op\":\"t\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::scale<bogus, 1>\"}]}";
  char *out = NULL;
  cr_assert_eq(run_warm(m, cache, NULL, &out), 1);
  free(out);
  tu_rmrf(dir);
  free(dir);
}

Test(sk_warm, quiet_still_prints_failures) {
  char *dir = tu_tempdir("warm");
  char cache[600];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  const char *m = "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"kernels\":["
                  "{\"op\":\"t\",\"source\":\"test/scale.cuh\",\"name\":\"sk_test::scale<bogus, 1>\","
                  "\"archs\":[\"sm_120a\"]}]}";
  char *out = NULL, *err = NULL;
  cr_assert_eq(run_warm_env(m, cache, "--quiet", NULL, &out, &err), 1, "%s", err);
  cr_assert(strstr(err, "FAILED") && strstr(err, "sk_test::scale<bogus, 1>") && strstr(err, "bogus"),
            "--quiet hid the failure: [%s]", err);
  free(out);
  free(err);
  tu_rmrf(dir);
  free(dir);
}

Test(sk_warm, usage_errors_exit_2_and_help_exits_0) {
  char warm[512];
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  char *a1[] = {warm, NULL};
  cr_assert_eq(tu_run(a1, NULL, NULL), 2);
  char *a2[] = {warm, "--manifest", "/nonexistent/m.json", NULL};
  cr_assert_eq(tu_run(a2, NULL, NULL), 2);
  char *a3[] = {warm, "--manifest", "x", "-j", "0", NULL};
  cr_assert_eq(tu_run(a3, NULL, NULL), 2);
  char *a4[] = {warm, "--manifest", "x", "--arch", "sm120", NULL};
  cr_assert_eq(tu_run(a4, NULL, NULL), 2);
  char *out = NULL;
  char *a5[] = {warm, "--help", NULL};
  cr_assert_eq(tu_run(a5, NULL, &out), 0);
  cr_assert(strstr(out, "--manifest"));
  free(out);
}
