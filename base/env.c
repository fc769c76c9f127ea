/* base/env.c - validated getters for environment variables (SK_ERR_INVALID_ARGUMENT naming the
 * variable on a malformed value). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"

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
