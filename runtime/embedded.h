/* runtime/embedded.h - the kernel sources embedded at build time by tools/embed.c. */
#ifndef SK_EMBEDDED_H
#define SK_EMBEDDED_H
#include <stddef.h>
#include <stdint.h>

typedef struct sk_embedded_source {
  const char *path;        /* relative to ops/, e.g. "common/fp8.cuh" */
  const char *text;        /* NUL-terminated source text */
  size_t length;
  uint64_t hash;           /* XXH3-64 of the normalised text (tools/source_norm.h) */
  const uint16_t *closure; /* indices of every embedded source it includes, transitively, and
                              itself; sorted by path */
  size_t closure_count;
  uint64_t closure_hash;   /* XXH3-64 over (path, NUL, hash as 8 LE bytes) of the closure */
} sk_embedded_source;

extern const sk_embedded_source sk_embedded_sources[]; /* sorted by path */
extern const size_t sk_embedded_source_count;

/* Binary search by path; NULL if absent. */
const sk_embedded_source *sk_find_embedded_source(const char *path);
#endif
