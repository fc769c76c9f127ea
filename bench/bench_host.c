/* bench_host - the host side of every op, no GPU needed: for the first SKH_BENCH case of each op
 * (or every bench case with --all), the time of the plan's selection (sk_plan_select_only: caps
 * checks, tile choice, scratch layout; a real sk_plan_create adds one memory-table hit per kernel,
 * which bench_runtime times) and of sk_bind over fake device views: the full validation
 * plus the op's launch geometry, and a rebind of the same layouts (pointers and scratch checked
 * only), for a plan of sm_90a (or --arch). Medians of 7 rounds.
 * SK_BENCH_JSON=FILE writes bench/results.py rows (op "host", metric "us").
 *   bench_host [--arch ARCH] [--all] [--op NAME] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h" /* sk_now_seconds */
#include "harness/harness.h"
#include "op.h" /* the spine (runtime/op.h): selection without kernels, fake views */

#ifndef SK_GIT_COMMIT
#define SK_GIT_COMMIT "unknown"
#endif

static double now_ns(void) { return sk_now_seconds() * 1e9; }

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}


/* The CPU's model name (Linux), for the rows' "gpu" column. */
static void cpu_name(char *buf, size_t n) {
  snprintf(buf, n, "host CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      const char *v = strchr(line, ':') + 1;
      while (*v == ' ') v++;
      snprintf(buf, n, "CPU %.*s", (int)strcspn(v, "\n"), v);
      break;
    }
  if (f) fclose(f);
}

int main(int argc, char **argv) {
  const char *arch = "sm_90a", *only = NULL;
  int all = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--arch") && i + 1 < argc) arch = argv[++i];
    else if (!strcmp(argv[i], "--op") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--all")) all = 1;
    else {
      printf("usage: bench_host [--arch ARCH] [--all] [--op NAME]\n"
             "Times each op's plan selection and sk_bind on the host (no GPU). SK_BENCH_JSON=FILE writes rows.\n");
      return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
    }
  }
  const char *json_path = getenv("SK_BENCH_JSON");
  FILE *json = json_path ? fopen(json_path, "w") : NULL;
  if (json_path && !json) fprintf(stderr, "SK_BENCH_JSON=%s: cannot write it; no JSON\n", json_path);
  char date[16];
  const time_t t0 = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&t0));
  printf("host times on %s (median of 7 rounds)\n\n| op | case | select us | bind us | rebind us (same layouts) |\n|---|---|---|---|---|\n", arch);
  char cpu[160];
  cpu_name(cpu, sizeof cpu);
  int status = 0;
  for (size_t o = 0; o < skh_op_count(); o++) {
    const skh_op *op = skh_op_at(o);
    if (only && strcmp(only, op->op)) continue;
    for (size_t i = 0; i < skh_case_count(op); i++) {
      skh_case c;
      skh_case_get(op, i, &c);
      if (!(c.flags & SKH_BENCH)) continue;
      sk_plan *plan;
      skh_tensor t[SKH_MAX_TENSORS];
      size_t n = 0;
      char err[512];
      const sk_status ps = skh_case_open(op, &c, arch, 1, &plan, t, &n, err, sizeof err);
      if (ps == SK_ERR_UNSUPPORTED) continue;
      if (ps != SK_OK) {
        fprintf(stderr, "%s\n", err);
        status = 1;
        continue;
      }
      /* the harness's tensors as views at fake device addresses, never read */
      DLTensor dl[SKH_MAX_TENSORS];
      const DLTensor *ptrs[SKH_MAX_TENSORS];
      void *scratch = skh_fake_views(t, n, dl, ptrs);
      sk_scratch_spec spec;
      sk_plan_scratch_spec(plan, &spec);
      sk_binding *b;
      sk_binding_create(plan, c.entry, &b);
      if (sk_bind(b, ptrs, n, scratch, spec.bytes) != SK_OK) {
        fprintf(stderr, "%s [%s]: bind: %s\n", op->op, c.name, sk_last_error_message());
        status = 1;
      } else {
        double sel[7], bnd[7], reb[7];
        for (int r = 0; r < 7; r++) {
          const int reps_sel = 200, reps_bind = 20000;
          double a = now_ns();
          for (int k = 0; k < reps_sel; k++) {
            sk_plan *p2;
            if (skh_plan_offline(op, &c, arch, &p2) == SK_OK) sk_plan_destroy(p2);
          }
          sel[r] = (now_ns() - a) / reps_sel / 1e3;
          a = now_ns();
          for (int k = 0; k < reps_bind; k++) {
            b->sig_valid = 0; /* the full validation, as for new layouts */
            sk_bind(b, ptrs, n, scratch, spec.bytes);
          }
          bnd[r] = (now_ns() - a) / reps_bind / 1e3;
          a = now_ns();
          for (int k = 0; k < reps_bind; k++) sk_bind(b, ptrs, n, scratch, spec.bytes);
          reb[r] = (now_ns() - a) / reps_bind / 1e3;
        }
        qsort(sel, 7, sizeof sel[0], cmp);
        qsort(bnd, 7, sizeof bnd[0], cmp);
        qsort(reb, 7, sizeof reb[0], cmp);
        printf("| %s | %s | %.3f | %.3f | %.3f |\n", op->op, c.name, sel[3], bnd[3], reb[3]);
        static const char *const what[3] = {"plan selection", "sk_bind", "sk_bind, same layouts"};
        const double *med[3] = {sel, bnd, reb};
        if (json)
          for (int w = 0; w < 3; w++)
            fprintf(json,
                    "{\"op\":\"host\",\"case\":\"%s %s: %s\",\"us\":%.4f,\"metric\":\"us\",\"value\":%.4f,"
                    "\"gpu\":\"%s\",\"date\":\"%s\",\"commit\":\"%s\"}\n",
                    op->op, c.name, what[w], med[w][3], med[w][3], cpu,
                    date, SK_GIT_COMMIT);
      }
      sk_binding_destroy(b);
      skh_tensors_free(t, n);
      sk_plan_destroy(plan);
      if (!all) break;
    }
  }
  if (json) fclose(json);
  return status;
}
