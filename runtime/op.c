/* runtime/op.c - the op spine (see op.h). */
#include <stdio.h>
#include <string.h>

#include "op.h"

static const char *dtype_name(DLDataType d, char *buf, size_t n) {
  const char *code = d.code == kDLBfloat ? "bfloat" : d.code == kDLFloat ? "float" : d.code == kDLInt ? "int"
                   : d.code == kDLUInt ? "uint" : "code";
  snprintf(buf, n, "%s%u%s", code, d.bits, d.lanes != 1 ? "xN" : "");
  return buf;
}

sk_status sk_check_tensor(const char *op, const DLTensor *t, const sk_tensor_spec *s, void **data) {
  char want[32], got[32];
  if (!t) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s is NULL", op, s->name);
  if (!t->data) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s has a NULL data pointer", op, s->name);
  if (t->device.device_type != kDLCUDA)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s must be CUDA device memory (kDLCUDA), got device type %d",
                        op, s->name, (int)t->device.device_type);
  if (t->dtype.code != s->dtype.code || t->dtype.bits != s->dtype.bits || t->dtype.lanes != 1)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s must be %s, got %s", op, s->name,
                        dtype_name(s->dtype, want, sizeof want), dtype_name(t->dtype, got, sizeof got));
  if (t->ndim != s->ndim)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s must have %d dimensions, got %d", op, s->name, s->ndim,
                        t->ndim);
  if (!t->shape) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s has no shape", op, s->name);
  /* Extents: non-negative, as specified, and a total size that cannot overflow. */
  unsigned __int128 elems = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0)
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s has negative extent %lld in dim %d", op, s->name,
                          (long long)t->shape[i], i);
    if (s->shape[i] >= 0 && t->shape[i] != s->shape[i])
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s dim %d must be %lld, got %lld", op, s->name, i,
                          (long long)s->shape[i], (long long)t->shape[i]);
    elems *= (unsigned __int128)t->shape[i];
    if (elems > ((unsigned __int128)1 << 56))
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s is too large (size overflows)", op, s->name);
  }
  /* Contiguous row-major: strides NULL (compact) or exactly the compact strides; extent-1 dims
   * may carry any stride. */
  if (t->strides) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
      if (t->shape[i] != 1 && t->strides[i] != expect)
        return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s must be contiguous row-major: dim %d has stride %lld, expected %lld", op,
                            s->name, i, (long long)t->strides[i], (long long)expect);
      expect *= t->shape[i];
    }
  }
  char *p = (char *)t->data + t->byte_offset;
  if (s->align > 1 && ((uintptr_t)p % s->align) != 0)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: tensor %s data (%p + byte_offset %llu) must be %zu-byte aligned", op,
                        s->name, t->data, (unsigned long long)t->byte_offset, s->align);
  *data = p;
  return SK_OK;
}

size_t sk_tensor_bytes(const DLTensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n * t->dtype.bits / 8;
}

int sk_scratch_add(sk_scratch_layout *l, size_t bytes) {
  if (l->count >= 8) {
    sk_set_error(SK_ERR_INTERNAL, "scratch layout: more than 8 regions");
    return -1;
  }
  size_t off = (l->total + SK_SCRATCH_ALIGN - 1) & ~(size_t)(SK_SCRATCH_ALIGN - 1);
  if (bytes > ((size_t)1 << 50) || off > ((size_t)1 << 50)) {
    sk_set_error(SK_ERR_INVALID_ARGUMENT, "scratch layout: region of %zu bytes is too large", bytes);
    return -1;
  }
  l->offset[l->count] = off;
  l->size[l->count] = bytes;
  l->total = off + bytes;
  return l->count++;
}

int sk_scratch_add_counters(sk_scratch_layout *l, size_t bytes) {
  const int r = sk_scratch_add(l, bytes);
  if (r >= 0 && bytes) l->zero_once = 1;
  return r;
}

/* Callers allocate with cudaMalloc, which guarantees 256-byte alignment: the spec asks for that
 * and adds the slack bind needs to start the views on a 1024-byte boundary. */
sk_scratch_spec sk_scratch_spec_of(const sk_scratch_layout *l) {
  sk_scratch_spec s = {l->total ? l->total + SK_SCRATCH_ALIGN - SK_SCRATCH_BASE_ALIGN : 0, SK_SCRATCH_BASE_ALIGN,
                       l->zero_once};
  return s;
}

sk_status sk_scratch_bind(const char *op, const sk_scratch_layout *l, void *scratch, size_t bytes, void **views) {
  if (l->total == 0) return SK_OK;
  if (!scratch) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: scratch is NULL; the plan needs %zu bytes", op, l->total);
  if ((uintptr_t)scratch % SK_SCRATCH_BASE_ALIGN)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: scratch %p must be %u-byte aligned", op, scratch,
                        SK_SCRATCH_BASE_ALIGN);
  const size_t skip = (size_t)(-(uintptr_t)scratch & (SK_SCRATCH_ALIGN - 1));
  const size_t needed = sk_scratch_spec_of(l).bytes;
  if (bytes < needed || bytes - skip < l->total)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: scratch has %zu bytes, the plan needs %zu (see scratch_spec)", op,
                        bytes, needed);
  for (int i = 0; i < l->count; i++) views[i] = (char *)scratch + skip + l->offset[i];
  return SK_OK;
}

bool sk_arch_is_sm120(const char *arch) {
  int n = sk_arch_number(arch);
  size_t len = strlen(arch);
  return (n == 120 || n == 121) && (arch[len - 1] == 'a' || arch[len - 1] == 'f');
}

sk_status sk_op_arch(const char *op, const char *caps_arch, char arch[SK_MAX_ARCH]) {
  if (caps_arch) {
    if (!sk_arch_valid(caps_arch))
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: arch \"%.32s\" is not of the form sm_NN[a|f]", op, caps_arch);
    sk_strlcpy(arch, caps_arch, SK_MAX_ARCH);
    return SK_OK;
  }
  sk_status s = sk_device_arch(-1, arch, SK_MAX_ARCH);
  if (s != SK_OK) return sk_wrap_error(s, "%s: finding the device arch", op);
  return SK_OK;
}

sk_status sk_op_resolve(const char *op, const char *source, const char *name_expr, const char *params,
                        const char *arch, sk_kernel **out) {
  sk_kernel_request r = {op, source, name_expr, params, arch, NULL, 0, 0};
  sk_status s = sk_kernel_resolve(&r, out);
  if ((s == SK_ERR_NO_DRIVER || s == SK_ERR_NO_DEVICE) && arch) {
    /* No GPU here: an offline plan (compiled and cached, validates and binds; run reports
     * that nothing is loaded). */
    s = sk_kernel_resolve_offline(&r, out);
  }
  if (s != SK_OK && s != SK_ERR_KERNEL_RESOLUTION_FROZEN) return sk_wrap_error(s, "%s plan", op);
  return s;
}

sk_status sk_op_allow_dynamic_smem(sk_kernel *k, unsigned bytes) {
  void *fn = NULL;
  if (!k || bytes == 0) return SK_OK;
  sk_kernel_get_info(k, &fn, NULL, NULL);
  if (!fn) return SK_OK;
  return sk_kernel_set_max_dynamic_shared(k, bytes);
}

int sk_op_resident_ctas_per_sm(const sk_kernel *k, int block_threads, unsigned dynamic_smem) {
  void *fn = NULL;
  if (!k || sk_kernel_get_info(k, &fn, NULL, NULL) != SK_OK || !fn) return 0;
  if (!sk_cu.cuOccupancyMaxActiveBlocksPerMultiprocessor) return 0;
  /* A library kernel (CUkernel) becomes this context's CUfunction first. */
  if (sk_cu.cuLibraryLoadData && sk_cu.cuLibraryGetKernel && sk_cu.cuKernelGetFunction &&
      sk_cu.cuKernelGetFunction(&fn, fn) != 0)
    return 0;
  int n = 0;
  if (sk_cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, block_threads, dynamic_smem) != 0) return 0;
  return n;
}

sk_status sk_binding_check(const char *op, const sk_binding *b, const void *plan) {
  if (SK_UNLIKELY(!b || b->magic != SK_BINDING_MAGIC))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s run: binding is NULL or was not made by bind", op);
  if (SK_UNLIKELY(b->plan != plan))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s run: binding was made for another plan", op);
  return SK_OK;
}
