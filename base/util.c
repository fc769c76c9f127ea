/* base/util.c - the warning line, the monotonic clock, a bounded string copy. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base.h"

void sk_warn(const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "sparkinfer: warning: %s\n", line);
}

double sk_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int sk_strlcpy(char *dst, const char *src, size_t size) {
  if (size == 0) return 1;
  size_t n = strlen(src);
  if (n >= size) {
    memcpy(dst, src, size - 1);
    dst[size - 1] = '\0';
    return 1;
  }
  memcpy(dst, src, n + 1);
  return 0;
}
