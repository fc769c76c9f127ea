/* Every kernel configuration listed in tools/manifests/kernels-*.json compiles for sm_90a,
 * sm_120a and sm_121a (entries may restrict themselves with "archs"). Runs sk-warm, so it also
 * checks the manifests themselves. */
#include <criterion/criterion.h>
#include <glob.h>

#include "testutil.h"

Test(compile_check, every_listed_kernel_compiles_for_every_target_arch, .timeout = 1800) {
  glob_t g;
  cr_assert_eq(glob("tools/manifests/kernels-*.json", 0, NULL, &g), 0, "no kernel manifests found (run from the repo root)");
  char *dir = tu_tempdir("compile");
  char warm[512];
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  for (size_t i = 0; i < g.gl_pathc; i++) {
    char *argv[] = {warm, "--manifest", g.gl_pathv[i], "--arch", "sm_90a,sm_120a,sm_121a", "--cache-dir", dir,
                    "--json", "--quiet", "-j", "2", NULL};
    char *out = NULL;
    int rc = tu_run(argv, NULL, &out);
    cr_expect_eq(rc, 0, "%s: sk-warm exit %d: %s", g.gl_pathv[i], rc, out);
    cr_expect_eq(tu_json_num(out, "failed"), 0, "%s: %s", g.gl_pathv[i], out);
    cr_expect_gt(tu_json_num(out, "kernels"), 0, "%s lists no kernels", g.gl_pathv[i]);
    free(out);
  }
  globfree(&g);
  tu_rmrf(dir);
  free(dir);
}
