/* tests/harness/harness.c - the harness's shared engine (harness.h): the case-table registry,
 * tensors from an op's table, element access, comparison, plans. No CUDA here: the CPU suite,
 * the GPU suite and the bench all link it. */
#include "harness/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h" /* the spine's internals: plan symbols, shape rules, select-only plans */

#define SKH_DECLARE(d) extern const skh_op d;
#include "case_list.h"
SKH_CASE_LIST(SKH_DECLARE)
static const skh_op *const ops[] = {
#define SKH_LIST(d) &d,
    SKH_CASE_LIST(SKH_LIST) NULL};

size_t skh_op_count(void) { return sizeof ops / sizeof ops[0] - 1; }
const skh_op *skh_op_at(size_t i) { return i < skh_op_count() ? ops[i] : NULL; }
const skh_op *skh_find(const char *op) {
  for (size_t i = 0; i < skh_op_count(); i++)
    if (!strcmp(ops[i]->op, op)) return ops[i];
  return NULL;
}

void skh_case_sym(skh_case *c, const char *name, int64_t value) {
  for (int i = 0; i < c->nsym; i++)
    if (!strcmp(c->sym[i].name, name)) {
      c->sym[i].value = value;
      return;
    }
  if (c->nsym < (int)(sizeof c->sym / sizeof c->sym[0])) {
    snprintf(c->sym[c->nsym].name, sizeof c->sym[0].name, "%s", name);
    c->sym[c->nsym++].value = value;
  }
}

/* ---- element access --------------------------------------------------------------------------- */

size_t skh_numel(const skh_tensor *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

size_t skh_offset(const skh_tensor *t, size_t flat) {
  if (!t->strided) return flat * t->elem_bytes;
  size_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    const size_t i = flat % (size_t)t->shape[d];
    flat /= (size_t)t->shape[d];
    off += i * (size_t)t->strides[d];
  }
  return off * t->elem_bytes;
}

double skh_ulp(DLDataType dtype, double v) {
  int digits, emin; /* significand bits; frexp exponent of the smallest normal */
  if (dtype.code == kDLBfloat) digits = 8, emin = -125;
  else if (dtype.code == kDLFloat && dtype.bits == 16) digits = 11, emin = -13;
  else if (dtype.code == kDLFloat && dtype.bits == 32) digits = 24, emin = -125;
  else if (dtype.code == kDLFloat && dtype.bits == 64) digits = 53, emin = -1021;
  else return 1.0;
  const double a = fabs(v);
  int e = emin;
  if (a > 0.0 && !isinf(a)) (void)frexp(a, &e);
  return ldexp(1.0, (e >= emin ? e : emin) - digits);
}

double skh_get(const skh_tensor *t, const void *buf, size_t flat) {
  const unsigned char *p = (const unsigned char *)buf + skh_offset(t, flat);
  uint16_t h;
  float f;
  switch (t->dtype.code) {
  case kDLBfloat:
    memcpy(&h, p, 2);
    return skref_bf16_to_float(h);
  case kDLFloat:
    if (t->dtype.bits == 16) {
      memcpy(&h, p, 2);
      return skref_fp16_to_float(h);
    }
    memcpy(&f, p, 4);
    return f;
  case kDLUInt:
    return *p;
  case kDLInt:
    if (t->dtype.bits == 32) {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    } else {
      int64_t v;
      memcpy(&v, p, 8);
      return (double)v;
    }
  default:
    return NAN;
  }
}

void skh_set(const skh_tensor *t, void *buf, size_t flat, double v) {
  unsigned char *p = (unsigned char *)buf + skh_offset(t, flat);
  uint16_t h;
  float f;
  switch (t->dtype.code) {
  case kDLBfloat:
    h = skref_float_to_bf16((float)v);
    memcpy(p, &h, 2);
    break;
  case kDLFloat:
    if (t->dtype.bits == 16) {
      h = skref_float_to_fp16((float)v);
      memcpy(p, &h, 2);
    } else {
      f = (float)v;
      memcpy(p, &f, 4);
    }
    break;
  case kDLUInt:
    *p = (unsigned char)v;
    break;
  case kDLInt:
    if (t->dtype.bits == 32) {
      int32_t x = (int32_t)v;
      memcpy(p, &x, 4);
    } else {
      int64_t x = (int64_t)v;
      memcpy(p, &x, 8);
    }
    break;
  default:
    break;
  }
}

skh_tensor *skh_tensor_named(skh_tensor *t, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name)) return &t[i];
  return NULL;
}

void skh_fill_normal(skh_tensor *t, skref_rng *rng, double stddev) {
  const size_t n = skh_numel(t);
  for (size_t i = 0; i < n; i++) skh_set(t, t->host, i, skref_rng_normal(rng) * stddev);
}

/* ---- tensors from the table -------------------------------------------------------------------- */

static DLDataType first_dtype(const char *names) {
  static const struct {
    const char *name;
    DLDataType dt;
  } map[] = {{"bfloat16", {kDLBfloat, 16, 1}}, {"float16", {kDLFloat, 16, 1}}, {"float32", {kDLFloat, 32, 1}},
             {"uint8", {kDLUInt, 8, 1}},       {"int32", {kDLInt, 32, 1}},    {"int64", {kDLInt, 64, 1}}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strncmp(names, map[i].name, strlen(map[i].name))) return map[i].dt;
  return (DLDataType){kDLUInt, 8, 1};
}

int skh_tensors_for(const skh_op *op, const skh_case *c, const sk_plan *plan, skh_tensor *t, size_t *n, char *err,
                    size_t errlen) {
  size_t count;
  if (sk_plan_tensor_count(plan, c->entry, &count) != SK_OK || count > SKH_MAX_TENSORS) {
    snprintf(err, errlen, "%s: entry %s: %s", op->op, c->entry ? c->entry : "(first)", sk_last_error_message());
    return -1;
  }
  sk_symbol syms[SK_MAX_SYMBOLS];
  int nsyms = plan->num_symbols;
  memcpy(syms, plan->symbols, sizeof(sk_symbol) * (size_t)nsyms);
  for (int i = 0; i < c->nsym && nsyms < SK_MAX_SYMBOLS; i++) {
    snprintf(syms[nsyms].name, sizeof syms[nsyms].name, "%s", c->sym[i].name);
    syms[nsyms++].value = c->sym[i].value;
  }
  memset(t, 0, sizeof(skh_tensor) * count);
  for (size_t i = 0; i < count; i++) {
    sk_tensor_info info;
    if (sk_plan_tensor_info(plan, c->entry, i, &info) != SK_OK) {
      snprintf(err, errlen, "%s", sk_last_error_message());
      return -1;
    }
    t[i].name = info.name;
    t[i].role = info.role;
    t[i].present = info.presence != SK_TENSOR_UNUSED;
    t[i].dtype = first_dtype(info.dtypes);
    int64_t dims[SKH_MAX_DIMS];
    int nd = 0;
    if (sk_shape_dims(info.shape, syms, nsyms, dims, SKH_MAX_DIMS, &nd) != SK_OK) {
      snprintf(err, errlen, "%s: tensor %s: %s", op->op, info.name, sk_last_error_message());
      return -1;
    }
    t[i].ndim = nd;
    for (int d = 0; d < nd; d++) t[i].shape[d] = dims[d] < 0 ? 1 : dims[d];
  }
  if (op->layout) op->layout(c, t, count);
  for (size_t i = 0; i < count; i++) {
    t[i].elem_bytes = t[i].dtype.bits / 8;
    if (!t[i].strided) {
      int64_t s = 1;
      for (int d = t[i].ndim - 1; d >= 0; d--) {
        t[i].strides[d] = s;
        s *= t[i].shape[d];
      }
    }
    size_t extent = 1; /* the largest element offset + 1 */
    for (int d = 0; d < t[i].ndim; d++) extent += (size_t)(t[i].shape[d] - 1) * (size_t)t[i].strides[d];
    if (skh_numel(&t[i]) == 0) extent = 0;
    const size_t bytes = extent * t[i].elem_bytes;
    if (bytes > t[i].bytes) t[i].bytes = bytes;
    if (!t[i].present) continue;
    t[i].host = calloc(1, t[i].bytes ? t[i].bytes : 1);
    if (t[i].role != SK_TENSOR_IN) t[i].expect = calloc(1, t[i].bytes ? t[i].bytes : 1);
    if (!t[i].host || (t[i].role != SK_TENSOR_IN && !t[i].expect)) {
      snprintf(err, errlen, "out of host memory for tensor %s (%zu bytes)", t[i].name, t[i].bytes);
      return -1;
    }
  }
  *n = count;
  return 0;
}

void skh_tensors_free(skh_tensor *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(t[i].host);
    free(t[i].expect);
    free(t[i].exact);
    free(t[i].magnitude);
    t[i].host = t[i].expect = NULL;
    t[i].exact = t[i].magnitude = NULL;
  }
}

/* ---- comparison -------------------------------------------------------------------------------- */

int skh_compare(const skh_tensor *t, const skh_tolerance *tol, char *err, size_t errlen) {
  const size_t n = skh_numel(t);
  if (tol->check == SKH_SKIP) return 0;
  if (tol->check == SKH_EXACT) {
    for (size_t i = 0; i < n; i++) {
      const size_t off = skh_offset(t, i);
      if (memcmp((const char *)t->host + off, (const char *)t->expect + off, t->elem_bytes)) {
        snprintf(err, errlen, "tensor %s: element %zu of %zu differs: got %.9g, want %.9g (exact)", t->name, i, n,
                 skh_get(t, t->host, i), skh_get(t, t->expect, i));
        return -1;
      }
    }
    return 0;
  }
  double dot = 0, gg = 0, ww = 0, worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; i++) {
    const double g = skh_get(t, t->host, i), w = t->exact ? t->exact[i] : skh_get(t, t->expect, i);
    if (g == w) { /* equal values, infinities included (those stay out of the cosine) */
      if (isfinite(g)) dot += g * w, gg += g * g, ww += w * w;
      continue;
    }
    if (isnan(w) || isnan(g)) {
      if (isnan(w) && isnan(g) && tol->nan_equal) continue;
      snprintf(err, errlen, "tensor %s: element %zu: got %.9g, want %.9g", t->name, i, g, w);
      return -1;
    }
    const double e = fabs(g - w), ulp = tol->ulps ? tol->ulps * skh_ulp(t->dtype, w) : 0.0,
                 mag = t->magnitude ? tol->magnitude_rel * t->magnitude[i] : 0.0,
                 own = tol->elem_abs ? tol->elem_abs[i] : 0.0,
                 bound = tol->max_abs + tol->rel * fabs(w) + ulp + mag + own;
    if (!(e <= bound)) {
      snprintf(err, errlen,
               "tensor %s: element %zu of %zu: got %.9g, want %.9g (|err| %.3g > %.3g = %.3g + %.3g*|want| + %.3g (ulps) + "
               "%.3g (magnitude) + %.3g (its own bound))",
               t->name, i, n, g, w, e, bound, tol->max_abs, tol->rel, ulp, mag, own);
      return -1;
    }
    if (e > worst) worst = e, worst_i = i;
    dot += g * w, gg += g * g, ww += w * w;
  }
  (void)worst_i;
  if (tol->min_cosine > 0 && n) {
    const double cosine = gg > 0 && ww > 0 ? dot / sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
    if (!(cosine >= tol->min_cosine)) {
      snprintf(err, errlen, "tensor %s: cosine %.9f < %.9f (max |err| %.3g)", t->name, cosine, tol->min_cosine, worst);
      return -1;
    }
  }
  return 0;
}

/* ---- plans ------------------------------------------------------------------------------------- */

sk_status skh_plan_offline(const skh_op *op, const skh_case *c, const char *arch, sk_plan **plan) {
  const sk_op_def *def = sk_find_op(op->op);
  if (!def) return sk_set_error(SK_ERR_NOT_FOUND, "no op %s", op->op);
  unsigned char caps[SKH_MAX_CAPS];
  memcpy(caps, c->caps, sizeof caps);
  memcpy(caps + def->caps_arch_offset, &arch, sizeof arch);
  sk_arch_props props;
  sk_arch_table_devices(arch, &props, 1);
  return sk_plan_select_only(def, caps, &props, plan);
}

sk_status skh_case_open(const skh_op *op, const skh_case *c, const char *arch, int offline, sk_plan **plan, skh_tensor *t,
                        size_t *n, char *err, size_t errlen) {
  *plan = NULL;
  *n = 0;
  const sk_status ps = offline ? skh_plan_offline(op, c, arch, plan) : skh_plan(op, c, arch, plan);
  if (ps == SK_ERR_UNSUPPORTED) return ps;
  if (ps != SK_OK) {
    snprintf(err, errlen, "%s [%s]: plan: %s", op->op, c->name, sk_last_error_message());
    return ps;
  }
  char why[400];
  if (skh_tensors_for(op, c, *plan, t, n, why, sizeof why)) {
    snprintf(err, errlen, "%s [%s]: %s", op->op, c->name, why);
    sk_plan_destroy(*plan);
    *plan = NULL;
    return SK_ERR_INVALID_ARGUMENT;
  }
  return SK_OK;
}

void *skh_fake_views(const skh_tensor *t, size_t n, DLTensor *dl, const DLTensor **ptrs) {
  uintptr_t addr = (uintptr_t)1 << 40;
  for (size_t i = 0; i < n; i++) {
    dl[i] = (DLTensor){(void *)addr, {kDLCUDA, 0}, t[i].ndim, t[i].dtype, (int64_t *)t[i].shape,
                       t[i].strided ? (int64_t *)t[i].strides : NULL, 0};
    ptrs[i] = t[i].present ? &dl[i] : NULL;
    addr += (t[i].bytes + 4095) / 4096 * 4096 + 4096;
  }
  return (void *)addr;
}

sk_status skh_plan(const skh_op *op, const skh_case *c, const char *arch, sk_plan **plan) {
  const sk_op_def *def = sk_find_op(op->op);
  if (!def) return sk_set_error(SK_ERR_NOT_FOUND, "no op %s", op->op);
  unsigned char caps[SKH_MAX_CAPS];
  memcpy(caps, c->caps, sizeof caps);
  if (arch) memcpy(caps + def->caps_arch_offset, &arch, sizeof arch);
  return sk_plan_create(op->op, caps, plan);
}
