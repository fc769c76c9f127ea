/* runtime/error.c - status names, the thread-local error message, env parsing, small utils. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "internal.h"

#define SK_ERROR_MESSAGE_MAX 4096

static _Thread_local char tls_message[SK_ERROR_MESSAGE_MAX];

SK_API const char *sk_status_string(sk_status status) {
  switch (status) {
    case SK_OK: return "SK_OK";
    case SK_ERR_INVALID_ARGUMENT: return "SK_ERR_INVALID_ARGUMENT";
    case SK_ERR_UNSUPPORTED: return "SK_ERR_UNSUPPORTED";
    case SK_ERR_OUT_OF_MEMORY: return "SK_ERR_OUT_OF_MEMORY";
    case SK_ERR_NO_DRIVER: return "SK_ERR_NO_DRIVER";
    case SK_ERR_NO_DEVICE: return "SK_ERR_NO_DEVICE";
    case SK_ERR_CUDA: return "SK_ERR_CUDA";
    case SK_ERR_COMPILE: return "SK_ERR_COMPILE";
    case SK_ERR_CACHE: return "SK_ERR_CACHE";
    case SK_ERR_KERNEL_RESOLUTION_FROZEN: return "SK_ERR_KERNEL_RESOLUTION_FROZEN";
    case SK_ERR_NOT_FOUND: return "SK_ERR_NOT_FOUND";
    case SK_ERR_MANIFEST: return "SK_ERR_MANIFEST";
    case SK_ERR_INTERNAL: return "SK_ERR_INTERNAL";
    case SK_ERR_TIMEOUT: return "SK_ERR_TIMEOUT";
    case SK_ERR_IO: return "SK_ERR_IO";
  }
  return "SK_ERR_UNKNOWN";
}

SK_API const char *sk_last_error_message(void) { return tls_message; }

sk_status sk_set_error(sk_status status, const char *fmt, ...) {
  /* Format into a scratch buffer first: callers may pass sk_last_error_message() itself as an
   * argument (to add context), which must not overlap the destination. */
  char buf[SK_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(tls_message, buf, sizeof tls_message);
  return status;
}

sk_status sk_wrap_error(sk_status status, const char *fmt, ...) {
  char prefix[1024];
  char old[SK_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, tls_message, sizeof old);
  size_t n = strlen(prefix);
  if (n > sizeof tls_message - 3) n = sizeof tls_message - 3;
  memcpy(tls_message, prefix, n);
  memcpy(tls_message + n, ": ", 2);
  sk_strlcpy(tls_message + n + 2, old, sizeof tls_message - n - 2);
  return status;
}

void sk_clear_error(void) { tls_message[0] = '\0'; }

const char *sk_env_str(const char *name) {
  const char *v = getenv(name);
  return (v && *v) ? v : NULL;
}

sk_status sk_env_u64(const char *name, uint64_t def, uint64_t *out) {
  const char *v = sk_env_str(name);
  *out = def;
  if (!v) return SK_OK;
  const char *p = v;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '-' || *p == '+')
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%s: expected a non-negative integer", name, v);
  errno = 0;
  char *end = NULL;
  unsigned long long x = strtoull(p, &end, 10);
  if (errno || end == p)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%s: expected a non-negative integer", name, v);
  /* Optional binary suffix: K, M, G, T (powers of 1024). */
  uint64_t mul = 1;
  if (*end) {
    switch (toupper((unsigned char)*end)) {
      case 'K': mul = 1ull << 10; break;
      case 'M': mul = 1ull << 20; break;
      case 'G': mul = 1ull << 30; break;
      case 'T': mul = 1ull << 40; break;
      default:
        return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%s: expected an integer with optional K/M/G/T suffix", name, v);
    }
    end++;
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end)
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%s: trailing characters", name, v);
  }
  if (x > UINT64_MAX / mul)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%s: value too large", name, v);
  *out = (uint64_t)x * mul;
  return SK_OK;
}

sk_status sk_env_double(const char *name, double def, double *out) {
  const char *v = sk_env_str(name);
  *out = def;
  if (!v) return SK_OK;
  errno = 0;
  char *end = NULL;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= 0.0) || x > 1e12)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%s: expected a non-negative number", name, v);
  *out = x;
  return SK_OK;
}

sk_status sk_env_flag(const char *name, int def, int *out) {
  const char *v = sk_env_str(name);
  *out = def;
  if (!v) return SK_OK;
  if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on")) { *out = 1; return SK_OK; }
  if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off")) { *out = 0; return SK_OK; }
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (end == v || *end || x < 0 || x > 9)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%s: expected 0..9, true or false", name, v);
  *out = (int)x;
  return SK_OK;
}

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
