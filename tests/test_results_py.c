/* bench/results.py, the RESULTS.md generator, on the fixtures in tests/fixtures/results/: the
 * latest row per case and GPU, the fastest peer joined, the derived columns, the goals, the
 * 400-line cap, bad input. Skipped where python3 is missing (it needs only the standard library). */
#include <criterion/criterion.h>

#include "testutil.h"

#define FIXTURES "tests/fixtures/results/"

static void need_python3(void) {
  char *argv[] = {"/bin/sh", "-c", "command -v python3 >/dev/null", NULL};
  if (tu_run(argv, NULL, NULL) != 0) cr_skip_test("python3 is not installed");
}

/* Run bench/results.py with up to 4 arguments; its stdout in *out. */
static int results_py(char **out, const char *a, const char *b, const char *c, const char *d) {
  char *argv[] = {"/usr/bin/env", "python3", "bench/results.py", (char *)a, (char *)b, (char *)c, (char *)d, NULL};
  return tu_run(argv, NULL, out);
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

Test(results_py, tables_join_the_fastest_peer_and_keep_the_latest_row, .init = need_python3) {
  char *out = NULL;
  cr_assert_eq(results_py(&out, "--goals", FIXTURES "goals.json", FIXTURES "ours.jsonl", FIXTURES "peers.json"), 0,
               "%s", out);
  const char *gemm = strstr(out, "\n## gemm.blockscaled\n"), *quant = strstr(out, "\n## quantization.nvfp4\n");
  cr_assert(gemm && quant && gemm < quant, "one table per op, sorted by op:\n%s", out);
  cr_expect(strstr(out, "sh bench/make-results.sh"), "how it was produced");
  cr_expect(strstr(out, "| case | us | figure | % of roofline | peer | peer figure | speed-up vs peer | GPU | date | commit |"));
  /* the 2026-12-01 row replaces the 2026-11-01 one; torch.compile (200 us) beats eager (400 us) */
  cr_expect(strstr(out, "| m=16384 k=4096 bf16 (portable) | 120 | 3500 GB/s | 81% | torch.compile | 2100 GB/s | 1.66x "
                        "| NVIDIA H200 | 2026-12-01 | abc1234 |\n"), "%s", out);
  cr_expect(!strstr(out, "0ld0ld0") && !strstr(out, "eager torch"), "%s", out);
  /* the same case on another GPU is its own row, without the H200's peer */
  cr_expect(strstr(out, "| m=16384 k=4096 bf16 (sm120) | 95.0 | 1500 GB/s | 84% | — | — | — | NVIDIA GeForce RTX 5090 |"),
            "%s", out);
  /* a time's roofline is a floor: 2.1 us of 4.2 us is 50% */
  cr_expect(strstr(out, "| m=1 k=4096 bf16; launch-bound | 4.20 | 4.20 us | 50% |"), "%s", out);
  cr_expect(strstr(out, "| 440 TFLOP/s | — | cuBLASLt | 550 TFLOP/s | 0.80x |"), "%s", out);
  const char *goals = strstr(out, "\n## Goals\n");
  cr_expect(goals && goals < gemm && strstr(goals, "  - prefill: >= 70% of the mma.sync peak\n"), "%s", out);
  free(out);
}

/* --exclude leaves matching "op case" rows out; --tail is appended as it is, within the cap. */
Test(results_py, exclude_and_tail, .init = need_python3) {
  char *dir = tu_tempdir("results");
  cr_assert_not_null(dir);
  char tail[512];
  snprintf(tail, sizeof tail, "%s/tail.md", dir);
  cr_assert_eq(tu_write_file(tail, "## Tried, not kept\n\n- a line of the tail\n"), 0);
  char *out = NULL;
  cr_assert_eq(results_py(&out, "--exclude=^quantization\\.nvfp4 m=1 ", "--tail", tail, FIXTURES "ours.jsonl"), 0, "%s", out);
  cr_expect(strstr(out, "| m=16384 k=4096 bf16 (portable) |"), "%s", out);
  cr_expect(!strstr(out, "| m=1 k=4096 bf16"), "the excluded row is left out:\n%s", out);
  const char *t = strstr(out, "\n## Tried, not kept\n\n- a line of the tail\n");
  cr_expect(t && !strstr(t + 1, "\n## quantization"), "the tail comes last:\n%s", out);
  free(out);
  cr_expect_eq(results_py(&out, "--exclude=(", FIXTURES "ours.jsonl", NULL, NULL), 2, "a bad pattern is refused");
  free(out);
  tu_rmrf(dir);
  free(dir);
}

Test(results_py, stays_within_400_lines, .init = need_python3) {
  char *dir = tu_tempdir("results");
  cr_assert_not_null(dir);
  char path[512];
  snprintf(path, sizeof path, "%s/many.jsonl", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  for (int op = 0; op < 3; op++)
    for (int i = 0; i < 300; i++)
      fprintf(f, "{\"op\": \"op%d\", \"case\": \"m=%d\", \"us\": %d, \"metric\": \"GB/s\", \"value\": 100, "
                 "\"gpu\": \"NVIDIA H200\", \"date\": \"2026-12-01\", \"commit\": \"abc1234\"}\n", op, i, i + 1);
  fclose(f);
  char *out = NULL;
  cr_assert_eq(results_py(&out, path, NULL, NULL, NULL), 0, "%s", out);
  cr_expect_leq(count_lines(out), 400);
  cr_expect(strstr(out, "\n## op2\n") && strstr(out, "more rows in the input"), "%s", out);
  free(out);
  tu_rmrf(dir);
  free(dir);
}

Test(results_py, help_and_bad_input, .init = need_python3) {
  char *out = NULL;
  cr_assert_eq(results_py(&out, "--help", NULL, NULL, NULL), 0);
  cr_expect(strstr(out, "--goals") && strstr(out, "FILE"), "%s", out);
  free(out);
  /* a row without "case", a file that is not JSON, a missing file: exit 2, nothing written */
  cr_expect_eq(results_py(&out, FIXTURES "goals.json", NULL, NULL, NULL), 2, "%s", out);
  cr_expect_str_empty(out);
  free(out);
  cr_expect_eq(results_py(&out, "tests/test_results_py.c", NULL, NULL, NULL), 2);
  free(out);
  cr_expect_eq(results_py(&out, FIXTURES "no-such-file.json", NULL, NULL, NULL), 2);
  free(out);
}
