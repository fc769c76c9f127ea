/* runtime/registry.c - the op registry: every op of the build, sorted by name. The list is
 * generated at build time from the `const sk_op_def sk_op_<group>_<op> = {...}` definitions in
 * ops/<group>/<op>.c files (Makefile: $(BUILD)/gen/op_list.h), so adding an op never edits this file. */
#include <stdlib.h>
#include <string.h>

#include "op.h"

#define SK_DECLARE_OP(d) extern const sk_op_def d;
#include "op_list.h"
SK_OP_LIST(SK_DECLARE_OP)

static const sk_op_def *op_defs[] = {
#define SK_LIST_OP(d) &d,
    SK_OP_LIST(SK_LIST_OP) NULL};
#define OP_COUNT (sizeof op_defs / sizeof op_defs[0] - 1)

static sk_op_info op_infos[OP_COUNT + 1];
static pthread_once_t sorted_once = PTHREAD_ONCE_INIT;

static int cmp_def(const void *a, const void *b) {
  return strcmp((*(const sk_op_def *const *)a)->info.name, (*(const sk_op_def *const *)b)->info.name);
}

static void sort_ops(void) {
  qsort(op_defs, OP_COUNT, sizeof op_defs[0], cmp_def);
  for (size_t i = 0; i < OP_COUNT; i++) op_infos[i] = op_defs[i]->info;
}

SK_API sk_status sk_list_ops(const sk_op_info **ops, size_t *count) {
  if (!ops || !count) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_list_ops: NULL argument");
  pthread_once(&sorted_once, sort_ops);
  *ops = op_infos;
  *count = OP_COUNT;
  return SK_OK;
}

size_t sk_op_count(void) { return OP_COUNT; }

const sk_op_def *sk_op_at(size_t i) {
  pthread_once(&sorted_once, sort_ops);
  return i < OP_COUNT ? op_defs[i] : NULL;
}

const sk_op_def *sk_find_op(const char *name) {
  if (!name) return NULL;
  pthread_once(&sorted_once, sort_ops);
  for (size_t i = 0; i < OP_COUNT; i++)
    if (!strcmp(op_defs[i]->info.name, name)) return op_defs[i];
  return NULL;
}

SK_API sk_status sk_op_is_supported(const char *name, const char *arch, int *supported) {
  if (!name || !supported) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_op_is_supported: NULL argument");
  *supported = 0;
  const sk_op_def *d = sk_find_op(name);
  if (!d) return sk_set_error(SK_ERR_NOT_FOUND, "no op named \"%.64s\" in this build (see sk_list_ops)", name);
  char buf[SK_MAX_ARCH];
  if (!arch) {
    SK_TRY(sk_device_arch(-1, buf, sizeof buf));
    arch = buf;
  }
  if (!sk_arch_valid(arch))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "arch \"%.32s\" is not of the form sm_NN[a|f]", arch);
  *supported = sk_op_def_supports(d, arch);
  return SK_OK;
}

bool sk_op_def_supports(const sk_op_def *def, const char *arch) {
  return sk_arch_valid(arch) && sk_arch_number(arch) >= def->min_sm && (!def->is_supported || def->is_supported(arch));
}
