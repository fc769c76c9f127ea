/*
 * base/base.h - the layer below everything else (cache/, runtime/, the tools): the thread's error
 * message, environment parsing and small utilities. It depends on the public sparkinfer.h only.
 * Not installed.
 */
#ifndef SK_BASE_H
#define SK_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "sparkinfer.h"

#if defined(__GNUC__)
#define SK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define SK_LIKELY(x) __builtin_expect(!!(x), 1)
#define SK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SK_PRINTF(a, b)
#define SK_LIKELY(x) (x)
#define SK_UNLIKELY(x) (x)
#endif

/* Record `status` and a printf-formatted message for the calling thread; returns `status` so
 * that failures read `return sk_set_error(SK_ERR_..., "...", ...);`. */
sk_status sk_set_error(sk_status status, const char *fmt, ...) SK_PRINTF(2, 3);
/* Prefix the thread's current message with more context ("plan nvfp4: " + old message). */
sk_status sk_wrap_error(sk_status status, const char *fmt, ...) SK_PRINTF(2, 3);
void sk_clear_error(void);

/* Return-on-failure helper. */
#define SK_TRY(expr)                                                                           \
  do {                                                                                         \
    sk_status sk_try_status_ = (expr);                                                         \
    if (sk_try_status_ != SK_OK) return sk_try_status_;                                        \
  } while (0)

/* Environment: each getter validates and returns SK_ERR_INVALID_ARGUMENT naming the variable
 * on a malformed value; an unset or empty variable leaves *out = default. */
sk_status sk_env_u64(const char *name, uint64_t def, uint64_t *out);
sk_status sk_env_double(const char *name, double def, double *out);
sk_status sk_env_flag(const char *name, int def, int *out);   /* 0/1/2..., "true"/"false" */
const char *sk_env_str(const char *name);                     /* NULL when unset or empty */

/* One warning line on stderr: "sparkinfer: warning: ...". */
void sk_warn(const char *fmt, ...) SK_PRINTF(1, 2);

/* Monotonic clock in seconds. */
double sk_now_seconds(void);

/* Safe string copy that always NUL-terminates; returns nonzero if it truncated. */
int sk_strlcpy(char *dst, const char *src, size_t size);

#endif /* SK_BASE_H */
