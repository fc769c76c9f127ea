/* base/error.c - status names and the thread-local error message (sk_set_error and friends). */
#include <stdio.h>
#include <string.h>

#include "base.h"

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
