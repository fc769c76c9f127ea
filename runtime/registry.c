/* runtime/registry.c - the op registry: every op of the build, sorted by name. An op adds
 * itself by defining an sk_op_desc and listing it in SK_OP_LIST below. */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#define SK_OP_LIST(X) X(sk_op_desc_gemm_block_fp8_linear) X(sk_op_desc_gemm_blockscaled) X(sk_op_desc_gemm_mxfp8_linear) X(sk_op_desc_gemm_tensor_fp8_linear) X(sk_op_desc_norm_mhc) X(sk_op_desc_quantization_mxfp8) X(sk_op_desc_quantization_nvfp4)

#define SK_DECLARE_OP(d) extern const sk_op_desc d;
SK_OP_LIST(SK_DECLARE_OP)

static const sk_op_desc *const op_descs[] = {
#define SK_LIST_OP(d) &d,
    SK_OP_LIST(SK_LIST_OP) NULL};
#define OP_COUNT (sizeof op_descs / sizeof op_descs[0] - 1)

static sk_op_info op_infos[OP_COUNT + 1];
static pthread_once_t infos_once = PTHREAD_ONCE_INIT;

static int cmp_info(const void *a, const void *b) {
  return strcmp(((const sk_op_info *)a)->name, ((const sk_op_info *)b)->name);
}

static void build_infos(void) {
  for (size_t i = 0; op_descs[i]; i++) op_infos[i] = op_descs[i]->info;
  qsort(op_infos, OP_COUNT, sizeof op_infos[0], cmp_info);
}

SK_API sk_status sk_list_ops(const sk_op_info **ops, size_t *count) {
  if (!ops || !count) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_list_ops: NULL argument");
  pthread_once(&infos_once, build_infos);
  *ops = op_infos;
  *count = OP_COUNT;
  return SK_OK;
}

const sk_op_desc *sk_find_op(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; op_descs[i]; i++)
    if (!strcmp(op_descs[i]->info.name, name)) return op_descs[i];
  return NULL;
}

SK_API sk_status sk_op_is_supported(const char *name, const char *arch, int *supported) {
  if (!name || !supported) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_op_is_supported: NULL argument");
  *supported = 0;
  const sk_op_desc *d = sk_find_op(name);
  if (!d) return sk_set_error(SK_ERR_NOT_FOUND, "no op named \"%.64s\" in this build (see sk_list_ops)", name);
  char buf[SK_MAX_ARCH];
  if (!arch) {
    SK_TRY(sk_device_arch(-1, buf, sizeof buf));
    arch = buf;
  }
  if (!sk_arch_valid(arch))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "arch \"%.32s\" is not of the form sm_NN[a|f]", arch);
  *supported = d->is_supported ? d->is_supported(arch) : 0;
  return SK_OK;
}
