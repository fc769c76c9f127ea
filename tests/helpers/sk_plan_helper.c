/* sk_plan_helper - a child process for the op tests: creates offline plans (explicit arch, no
 * GPU needed) for quantization.nvfp4, quantization.mxfp8, norm.mhc and gemm.block_fp8_linear and
 * prints the resolution counters as JSON. With SPARKINFER_RECORD_WARMUP set, the exit writes the
 * op-level manifest. Exit 0 if every plan was created. */
#include <stdio.h>

#include "sparkinfer.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/norm.h"
#include "sparkinfer/quantization.h"

int main(int argc, char **argv) {
  const char *arch = argc > 1 ? argv[1] : "sm_120a";
  int bad = 0;
  sk_quant_caps q = {SK_DTYPE_BF16, 4096, 512, SK_SCALES_SWIZZLED, SK_GLOBAL_SCALE_COMPUTED, SK_PATH_AUTO, arch};
  sk_quant_plan *qp;
  if (sk_nvfp4_plan_create(&q, &qp) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); bad++; }
  else sk_quant_plan_destroy(qp);
  q.global_scale = SK_GLOBAL_SCALE_GIVEN;
  q.scales = SK_SCALES_BOTH;
  if (sk_mxfp8_plan_create(&q, &qp) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); bad++; }
  else sk_quant_plan_destroy(qp);
  sk_mhc_caps m = {2048, 64, SK_MHC_NORM_BF16, 20, 1e-6f, 1e-6f, 1e-6f, arch};
  sk_mhc_plan *mp;
  if (sk_mhc_plan_create(&m, &mp) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); bad++; }
  else sk_mhc_plan_destroy(mp);
  sk_block_fp8_linear_caps b = {1024, 1024, 200, SK_DTYPE_BF16, arch};
  sk_block_fp8_linear_plan *bp;
  if (sk_block_fp8_linear_plan_create(&b, &bp) != SK_OK) { fprintf(stderr, "%s\n", sk_last_error_message()); bad++; }
  else sk_block_fp8_linear_plan_destroy(bp);
  sk_counters c;
  sk_get_counters(&c);
  printf("{\"compiles\":%llu,\"disk_hits\":%llu,\"failures\":%llu,\"errors\":%d}\n", (unsigned long long)c.compiles,
         (unsigned long long)c.disk_hits, (unsigned long long)c.failures, bad);
  return bad ? 1 : 0;
}
