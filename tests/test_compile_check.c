/* Every kernel the model manifests (tools/manifests/models/ (every file)) and tools/manifests/direct.json
 * expand to compiles for sm_90a, sm_120a and sm_121a (entries may restrict themselves with "archs"), and spills no more than
 * tests/known-spills.txt says. Runs sk-warm, so it also checks the manifests themselves. Also: every kernel the ops launch overlapped with the
 * previous kernel waits for it first (a source check on the embedded sources). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <glob.h>
#include <string.h>

#include "../runtime/embedded.h"
#include "testutil.h"

/* tests/known-spills.txt: "arch store_bytes load_bytes kernel name" lines (# comments). */
typedef struct {
  char arch[16], name[200];
  double store, load;
} known_spill;

static size_t read_known_spills(known_spill *out, size_t cap) {
  FILE *f = fopen("tests/known-spills.txt", "r");
  cr_assert(f, "tests/known-spills.txt is missing (run from the repo root)");
  char line[300];
  size_t n = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    cr_assert_lt(n, cap, "tests/known-spills.txt: more than %zu entries", cap);
    int used = 0;
    cr_assert_eq(sscanf(line, "%15s %lf %lf %n", out[n].arch, &out[n].store, &out[n].load, &used), 3, "bad line: %s", line);
    snprintf(out[n].name, sizeof out[n].name, "%s", line + used);
    out[n].name[strcspn(out[n].name, "\n")] = 0;
    n++;
  }
  fclose(f);
  return n;
}

/* Every compiled kernel carries ptxas's report (registers > 0), and none spills beyond
 * tests/known-spills.txt: a new spill, or more bytes, is a performance regression to look at. */
static void check_resources(const char *cache_dir) {
  static known_spill known[256];
  const size_t n_known = read_known_spills(known, 256);
  char cache[512];
  snprintf(cache, sizeof cache, "%s/bin/sk-cache", tu_build_dir());
  char *argv[] = {cache, "--cache-dir", (char *)cache_dir, "--json", "ls", NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "sk-cache ls: %s", out);
  cJSON *records = cJSON_Parse(out);
  cr_assert(cJSON_IsArray(records), "sk-cache --json ls: %s", out);
  int checked = 0, regressions = 0;
  const cJSON *r;
  cJSON_ArrayForEach(r, records) {
    const char *name = cJSON_GetObjectItem(r, "name")->valuestring, *arch = cJSON_GetObjectItem(r, "arch")->valuestring;
    const cJSON *res = cJSON_GetObjectItem(r, "resources");
    cr_expect(cJSON_IsObject(res) && cJSON_GetObjectItem(res, "registers")->valuedouble > 0,
              "%s [%s]: no ptxas resource report in the record", name, arch);
    if (!cJSON_IsObject(res)) continue;
    const double store = cJSON_GetObjectItem(res, "spill_store_bytes")->valuedouble,
                 load = cJSON_GetObjectItem(res, "spill_load_bytes")->valuedouble;
    checked++;
    if (store == 0 && load == 0) continue;
    const known_spill *k = NULL;
    for (size_t i = 0; i < n_known && !k; i++)
      if (!strcmp(known[i].arch, arch) && !strcmp(known[i].name, name)) k = &known[i];
    if (!k || store > k->store || load > k->load) {
      fprintf(stderr, "SPILL %s %g %g %s (known: %g %g)\n", arch, store, load, name, k ? k->store : 0, k ? k->load : 0);
      regressions++;
    }
  }
  cJSON_Delete(records);
  free(out);
  cr_expect_gt(checked, 0, "no records checked");
  cr_expect_eq(regressions, 0, "%d kernel(s) spill beyond tests/known-spills.txt (SPILL lines above)", regressions);
}

/* The tuning overrides whose kernels CI also compiles (over the coverage manifest): each names
 * template arguments the default selection never picks. */
static const struct {
  const char *env, *archs;
} knob_passes[] = {
    {"SPARKINFER_GEMM_DECODE=2,4,0", "sm_90a,sm_120a,sm_121a"},   /* 32-row decode tiles for every recipe */
    {"SPARKINFER_GEMM_LINEAR_FUSED=1", "sm_90a,sm_120a,sm_121a"}, /* gemm.mxfp8_linear's fused decode kernel */
    {"SPARKINFER_MHC_FN_SMEM_TERMS=1", "sm_90a"},                 /* fits sm_90's 227 KiB blocks only */
};

static void warm(const char *dir, char *const *manifests, size_t n, char *env, const char *archs) {
  char warm_bin[512];
  snprintf(warm_bin, sizeof warm_bin, "%s/bin/sk-warm", tu_build_dir());
  char *argv[160];
  size_t a = 0;
  argv[a++] = warm_bin;
  for (size_t i = 0; i < n && a < 140; i++) {
    argv[a++] = "--manifest";
    argv[a++] = manifests[i];
  }
  char *tail[] = {"--arch", (char *)archs, "--cache-dir", (char *)dir, "--json", "--quiet", "-j", "2", NULL};
  memcpy(argv + a, tail, sizeof tail);
  char *envv[] = {env, NULL};
  char *out = NULL;
  const int rc = tu_run(argv, env ? envv : NULL, &out);
  cr_expect_eq(rc, 0, "%s sk-warm exit %d: %s", env ? env : "", rc, out);
  cr_expect_eq(tu_json_num(out, "failed"), 0, "%s: %s", env ? env : "", out);
  cr_expect_gt(tu_json_num(out, "kernels"), 0, "no kernels");
  free(out);
}

/* The kernel lists come from the op manifests (tools/manifests/models/: what the plans of
 * those models resolve, through the ops' own selection) and tools/manifests/direct.json (kernels
 * tests launch directly); nothing lists op kernels by hand. */
Test(compile_check, every_listed_kernel_compiles_for_every_target_arch, .timeout = 1800) {
  glob_t g;
  cr_assert_eq(glob("tools/manifests/models/*.json", 0, NULL, &g), 0, "no model manifests (run from the repo root)");
  cr_assert_lt(g.gl_pathc, 60);
  char *manifests[64];
  size_t n = 0;
  for (size_t i = 0; i < g.gl_pathc; i++) manifests[n++] = g.gl_pathv[i];
  manifests[n++] = "tools/manifests/direct.json";
  char *dir = tu_tempdir("compile");
  warm(dir, manifests, n, NULL, "sm_90a,sm_120a,sm_121a");
  char *coverage = "tools/manifests/models/coverage.json";
  for (size_t k = 0; k < sizeof knob_passes / sizeof knob_passes[0]; k++)
    warm(dir, &coverage, 1, (char *)knob_passes[k].env, knob_passes[k].archs);
  globfree(&g);
  check_resources(dir);
  tu_rmrf(dir);
  free(dir);
}

/* The sources whose every kernel the ops launch with SK_LAUNCH_OVERLAP_PREVIOUS (docs/architecture.md,
 * Launch). Such a kernel must wait for the previous one (pdl_enter or pdl_wait_for_previous) before it
 * touches memory. The check, on the embedded text: each __global__ definition's body calls a wait
 * before the next definition, or calls a device function of an embedded source (`SK_DEVICE <type>
 * f(`) whose definition does (a `*_body` the kernel forwards to, a tile-entry helper). (What comes before
 * the wait is left to review: today only the decode GEMM's weight prefetch, which reads weights no
 * kernel writes.) */
static int body_waits(const char *body, const char *end) {
  const char *w = strstr(body, "pdl_enter();"), *w2 = strstr(body, "pdl_wait_for_previous();");
  return (w && (!end || w < end)) || (w2 && (!end || w2 < end));
}

static int waits_within(const char *body, const char *end, int depth);

/* Does [body, end) call a device function defined in `text` that waits (within depth calls)? */
static int calls_waiting_helper_of(const char *text, const char *body, const char *end, int depth) {
  for (const char *d = strstr(text, "SK_DEVICE "); d; d = strstr(d + 1, "SK_DEVICE ")) {
    const char *paren = strchr(d, '('), *nl = strchr(d, '\n');
    if (!paren || (nl && nl < paren)) continue;
    const char *name = paren;
    while (name > d && (name[-1] == '_' || (name[-1] >= 'a' && name[-1] <= 'z') || (name[-1] >= '0' && name[-1] <= '9'))) name--;
    const char *dbody = strstr(paren, ") {\n");
    if (name == paren || !dbody) continue;
    char call[96];
    int called = 0;
    for (int form = 0; form < 2 && !called; form++) { /* f( and f<...>( */
      snprintf(call, sizeof call, "%.*s%c", (int)(paren - name), name, form ? '<' : '(');
      for (const char *c = strstr(body, call); c && (!end || c < end) && !called; c = strstr(c + 1, call))
        called = c[-1] == ' ' || c[-1] == '(' || c[-1] == '!' || c[-1] == '=' || c[-1] == ':';
    }
    if (called && waits_within(dbody, strstr(dbody, "\n}\n"), depth - 1)) return 1;
  }
  return 0;
}

/* [body, end) waits itself or through device functions of the embedded sources, 3 calls deep. */
static int waits_within(const char *body, const char *end, int depth) {
  if (body_waits(body, end)) return 1;
  for (size_t f = 0; f < sk_embedded_source_count && depth > 0; f++)
    if (calls_waiting_helper_of(sk_embedded_sources[f].text, body, end, depth)) return 1;
  return 0;
}

/* Sources whose kernels the ops launch plainly (no overlap): the tiled GEMMs; and the test probes. */
static bool launched_plainly(const char *path) {
  return !strncmp(path, "test/", 5) || !strcmp(path, "gemm/mma_tiled.cuh") || !strcmp(path, "gemm/sm120_blockscaled.cuh");
}

Test(compile_check, overlapped_kernels_wait_for_the_previous_kernel) {
  int files = 0;
  for (size_t f = 0; f < sk_embedded_source_count; f++) {
    const sk_embedded_source *src = &sk_embedded_sources[f];
    const char *const path = src->path;
    if (launched_plainly(path)) continue;
    int kernels = 0;
    for (const char *p = strstr(src->text, "__global__"); p; p = strstr(p + 1, "__global__")) {
      const char *line = p;
      while (line > src->text && line[-1] != '\n') line--;
      while (*line == ' ') line++;
      if (line[0] == '/' && line[1] == '/') continue; /* a comment (the launch contracts) */
      const char *body = strstr(p, ") {\n"), *next = strstr(p + 1, "__global__");
      cr_assert(body && (!next || body < next), "%s: a __global__ without a body", path);
      const int waits = waits_within(body, next, 3);
      cr_assert(waits, "%s: the kernel at byte %ld never waits for the previous kernel", path,
                (long)(p - src->text));
      kernels++;
    }
    files += kernels > 0; /* headers that only mention __global__ in comments have none */
  }
  cr_assert_gt(files, 4, "found too few op kernel sources");
}
