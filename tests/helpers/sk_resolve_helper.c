/* sk_resolve_helper - a child process for the runtime tests: prepares (compiles or loads from
 * the cache) `--count` test kernels from `--threads` threads and prints the counters as JSON.
 * Exit 0 if every resolution succeeded, 1 otherwise. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparkinfer.h"
#include "sparkinfer/jit.h"

static int count = 8, threads = 1, start = 0;
static const char *arch = "sm_120a", *salt = NULL;
static _Atomic int errors;

static void *run(void *arg) {
  (void)arg;
  for (int i = 0; i < count; i++) {
    int k = (start + i) % count;
    char name[96], opt[64];
    snprintf(name, sizeof name, "sk_test::scale<float, %d>", 32 * (k + 1));
    snprintf(opt, sizeof opt, "-DSK_TEST_SALT=%s", salt ? salt : "0");
    const char *opts[] = {opt};
    sk_kernel_request r = {"test.scale", "test/scale.cuh", name, "dtype=f32", arch, opts, 1, 0};
    if (sk_kernel_prepare(&r, NULL) != SK_OK) {
      fprintf(stderr, "helper: %s\n", sk_last_error_message());
      errors++;
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--count")) count = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--arch")) arch = argv[i + 1];
    else if (!strcmp(argv[i], "--salt")) salt = argv[i + 1];
    else if (!strcmp(argv[i], "--start")) start = atoi(argv[i + 1]);
  }
  if (count < 1 || count > 32 || threads < 1 || threads > 64) return 2;
  pthread_t t[64];
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, NULL);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  sk_counters c;
  sk_get_counters(&c);
  printf("{\"compiles\":%llu,\"disk_hits\":%llu,\"memory_hits\":%llu,\"failures\":%llu,\"corrupt\":%llu,"
         "\"peer_waits\":%llu,\"errors\":%d}\n",
         (unsigned long long)c.compiles, (unsigned long long)c.disk_hits, (unsigned long long)c.memory_hits,
         (unsigned long long)c.failures, (unsigned long long)c.corrupt_records, (unsigned long long)c.peer_waits,
         (int)errors);
  fflush(stdout);
  return errors ? 1 : 0;
}
