/* sk_plan_helper ARCH - a child process for the op tests: creates a plan (explicit arch, no GPU
 * needed: offline plans) for the first SKH_CPU case of every registered op's case table and prints
 * the resolution counters as JSON. With SPARKINFER_RECORD_WARMUP set, the exit writes the op-level
 * manifest. Exit 0 if every plan was created. */
#include <stdio.h>

#include "harness/harness.h"
#include "sparkinfer.h"

int main(int argc, char **argv) {
  const char *arch = argc > 1 ? argv[1] : "sm_120a";
  int bad = 0, plans = 0;
  for (size_t o = 0; o < skh_op_count(); o++) {
    const skh_op *op = skh_op_at(o);
    int supported = 0;
    if (sk_op_is_supported(op->op, arch, &supported) != SK_OK || !supported) continue;
    for (size_t i = 0; i < skh_case_count(op); i++) {
      skh_case c;
      skh_case_get(op, i, &c);
      if (!(c.flags & SKH_CPU)) continue;
      sk_plan *p;
      const sk_status s = skh_plan(op, &c, arch, &p);
      if (s == SK_ERR_UNSUPPORTED) continue; /* e.g. an SM120-only path */
      if (s != SK_OK) {
        fprintf(stderr, "%s [%s]: %s\n", op->op, c.name, sk_last_error_message());
        bad++;
      } else {
        sk_plan_destroy(p);
        plans++;
      }
      break;
    }
  }
  sk_counters c;
  sk_get_counters(&c);
  printf("{\"plans\":%d,\"compiles\":%llu,\"disk_hits\":%llu,\"failures\":%llu,\"errors\":%d}\n", plans,
         (unsigned long long)c.compiles, (unsigned long long)c.disk_hits, (unsigned long long)c.failures, bad);
  return bad ? 1 : 0;
}
