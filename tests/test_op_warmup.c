/* The op-level warm-up loop without a GPU: plans record their caps (SPARKINFER_RECORD_WARMUP);
 * sk-warm replays that manifest into a fresh cache; a process creating the same plans against
 * that cache then compiles nothing. This also proves each op's manifest builder yields exactly
 * the kernel requests its plan resolves. */
#include <criterion/criterion.h>

#include "testutil.h"

Test(op_warmup, recorded_op_manifest_prebuilds_exactly_what_plans_resolve, .timeout = 600) {
  char *dir = tu_tempdir("opwarm");
  char helper[512], warm[512], manifest[600], env_rec[700], env_a[700], env_b[800], cache_b[700];
  snprintf(helper, sizeof helper, "%s/tests/helpers/sk_plan_helper", tu_build_dir());
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  snprintf(manifest, sizeof manifest, "%s/warm.json", dir);
  snprintf(env_rec, sizeof env_rec, "SPARKINFER_RECORD_WARMUP=%s", manifest);
  snprintf(env_a, sizeof env_a, "SPARKINFER_CACHE_DIR=%s/a", dir);
  snprintf(cache_b, sizeof cache_b, "%s/b", dir);
  snprintf(env_b, sizeof env_b, "SPARKINFER_CACHE_DIR=%s", cache_b);
  char *argv[] = {helper, "sm_120a", NULL};
  char *env1[] = {env_a, env_rec, NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, env1, &out), 0, "%s", out);
  cr_assert_gt(tu_json_num(out, "compiles"), 0, "%s", out);
  cr_assert_gt(tu_json_num(out, "plans"), 5, "a plan per op: %s", out);
  char *out_plans = out;
  /* The recorded manifest has op entries; replay only those (drop the kernel entries). */
  FILE *f = fopen(manifest, "r");
  cr_assert_not_null(f, "no manifest recorded");
  char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root);
  cJSON *ops = cJSON_GetObjectItem(root, "ops");
  cr_assert_eq(cJSON_GetArraySize(ops), tu_json_num(out_plans, "plans"), "one op entry per plan: %s", text);
  cJSON_DeleteItemFromObject(root, "kernels");
  char *only_ops = cJSON_Print(root);
  char ops_manifest[700];
  snprintf(ops_manifest, sizeof ops_manifest, "%s/ops.json", dir);
  tu_write_file(ops_manifest, only_ops);
  cJSON_free(only_ops);
  cJSON_Delete(root);
  free(out_plans);
  char *wargv[] = {warm, "--manifest", ops_manifest, "--arch", "sm_120a", "--cache-dir", cache_b, "--json", "--quiet", NULL};
  cr_assert_eq(tu_run(wargv, NULL, &out), 0, "%s", out);
  cr_assert_gt(tu_json_num(out, "compiled"), 0, "%s", out);
  free(out);
  char *env2[] = {env_b, NULL};
  cr_assert_eq(tu_run(argv, env2, &out), 0, "%s", out);
  cr_assert_eq(tu_json_num(out, "compiles"), 0, "plans against the sk-warm cache must compile nothing: %s", out);
  cr_assert_gt(tu_json_num(out, "disk_hits"), 0, "%s", out);
  free(out);
  tu_rmrf(dir);
  free(dir);
}
