/* bench/bench_json.h - the JSON every benchmark writes when SK_BENCH_JSON names a file:
 * {"results":[row, row, ...]}, one object per printed table row. No CUDA needed (bench_runtime
 * --cpu-only uses it too). */
#ifndef SK_BENCH_JSON_H
#define SK_BENCH_JSON_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct bench_json {
  FILE *f; /* NULL: SK_BENCH_JSON unset or not writable; every call is then a no-op */
  int rows;
} bench_json;

static inline bench_json bench_json_open(void) {
  const char *path = getenv("SK_BENCH_JSON");
  bench_json j = {path ? fopen(path, "w") : NULL, 0};
  if (path && !j.f) fprintf(stderr, "SK_BENCH_JSON=%s: cannot write it; no JSON\n", path);
  if (j.f) fputs("{\"results\":[", j.f);
  return j;
}

/* One row: `fmt` formats the object ("{\"m\":%lld,...}"). */
static inline void bench_json_row(bench_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void bench_json_row(bench_json *j, const char *fmt, ...) {
  if (!j->f) return;
  fputs(j->rows++ ? ",\n " : "\n ", j->f);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(j->f, fmt, ap);
  va_end(ap);
}

static inline void bench_json_close(bench_json *j) {
  if (!j->f) return;
  fputs("\n]}\n", j->f);
  fclose(j->f);
  j->f = NULL;
}

#endif
