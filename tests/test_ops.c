/* The harness's CPU suite (tests/harness/harness.h), one test per registered op: for every case
 * flagged SKH_CPU and each arch the op supports of sm_90a / sm_120a / sm_121a, a plan made by the
 * selection alone (no compile, no GPU; the arch table's properties) must
 *  - describe its entries' tensors (every shape rule evaluates for the case's symbols),
 *  - bind valid views (fake device addresses: bind never touches memory),
 *  - refuse every generic bad argument with SK_ERR_INVALID_ARGUMENT and a message naming the
 *    tensor: NULL for a required tensor, a tensor the plan does not take, host memory, a NULL
 *    data pointer, another dtype, another rank, each fixed dim off by one, a misaligned pointer,
 *    strides the row's rule refuses (non-contiguous, overlapping) while a padded free dim binds;
 *    the wrong tensor count; a missing or short scratch;
 *  - refuse to run while unbound;
 *  - round-trip its caps through JSON (sk_op_caps_to_json -> sk_op_caps_from_json -> the same JSON);
 * and (sm_90a's plan) the case table's filler and reference run on the host: no input left all
 * zeros, no reference output all zeros, a tolerance for every output. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "op.h"

static const char *const archs[] = {"sm_90a", "sm_120a", "sm_121a"};

/* A plan from the selection alone, for `arch` with the table's first device. */
static sk_status cpu_plan(const skh_op *op, const skh_case *c, const char *arch, sk_plan **plan) {
  cr_assert(sk_find_op(op->op), "case table %s names no registered op", op->op);
  return skh_plan_offline(op, c, arch, plan);
}

typedef struct bound_case {
  skh_tensor t[SKH_MAX_TENSORS];
  DLTensor dl[SKH_MAX_TENSORS];
  const DLTensor *ptrs[SKH_MAX_TENSORS];
  size_t n;
  void *scratch;
  size_t scratch_bytes;
} bound_case;

/* Fake device views (never dereferenced). */
static void make_views(bound_case *bc) { bc->scratch = skh_fake_views(bc->t, bc->n, bc->dl, bc->ptrs); }

static void expect_refusal(sk_binding *b, bound_case *bc, const char *tensor, const char *what, const char *case_name) {
  const sk_status s = sk_bind(b, bc->ptrs, bc->n, bc->scratch, bc->scratch_bytes);
  cr_expect_eq(s, SK_ERR_INVALID_ARGUMENT, "%s: %s: bind with %s returned %s (%s)", case_name, tensor ? tensor : "-", what,
               sk_status_string(s), sk_last_error_message());
  if (s == SK_ERR_INVALID_ARGUMENT && tensor)
    cr_expect(strstr(sk_last_error_message(), tensor) != NULL, "%s: the message for %s of %s does not name it: %s",
              case_name, what, tensor, sk_last_error_message());
  cr_expect_eq(sk_run(b, NULL), SK_ERR_INVALID_ARGUMENT, "%s: a failed bind left the binding runnable", case_name);
}

/* The same layouts at other addresses (the rebind fast path): every element pointer follows, the
 * bound symbols stay; then back. */
static void rebind_moved(sk_binding *b, bound_case *bc, const char *name) {
  int64_t before[SK_MAX_SYMBOLS];
  const int nsyms = b->num_symbols;
  for (int i = 0; i < nsyms; i++) before[i] = b->symbols[i].value;
  for (int pass = 0; pass < 2; pass++) {
    const ptrdiff_t shift = pass ? -(ptrdiff_t)(1 << 20) : (ptrdiff_t)(1 << 20);
    for (size_t i = 0; i < bc->n; i++) bc->dl[i].data = (char *)bc->dl[i].data + shift;
    bc->scratch = (char *)bc->scratch + shift;
    cr_assert_eq(sk_bind(b, bc->ptrs, bc->n, bc->scratch, bc->scratch_bytes), SK_OK, "%s: rebind moved: %s", name,
                 sk_last_error_message());
    for (size_t i = 0; i < bc->n; i++)
      if (bc->ptrs[i]) cr_expect_eq(b->data[i], bc->dl[i].data, "%s: rebind kept the old pointer of tensor %zu", name, i);
    cr_expect_eq(b->num_symbols, nsyms, "%s: rebind changed the symbol count", name);
    for (int i = 0; i < nsyms && i < b->num_symbols; i++)
      cr_expect_eq(b->symbols[i].value, before[i], "%s: rebind changed symbol %s", name, b->symbols[i].name);
  }
}

/* Every generic mutation of one valid case. */
static void check_refusals(const sk_plan *plan, sk_binding *b, bound_case *bc, const char *name) {
  sk_symbol syms[SK_MAX_SYMBOLS]; /* the valid bind's (a refused bind leaves none bound) */
  const int nsyms = b->num_symbols;
  memcpy(syms, b->symbols, sizeof(sk_symbol) * (size_t)nsyms);
  for (size_t i = 0; i < bc->n; i++) {
    sk_tensor_info info;
    cr_assert_eq(sk_plan_tensor_info(plan, sk_plan_entry_name(plan, b->entry), i, &info), SK_OK);
    DLTensor saved = bc->dl[i];
    const DLTensor *saved_ptr = bc->ptrs[i];
    if (!bc->t[i].present) {
      if (info.presence == SK_TENSOR_UNUSED) {
        bc->ptrs[i] = &bc->dl[i];
        expect_refusal(b, bc, info.name, "a tensor the plan does not take", name);
        bc->ptrs[i] = saved_ptr;
      }
      continue;
    }
    if (info.presence == SK_TENSOR_REQUIRED) {
      bc->ptrs[i] = NULL;
      expect_refusal(b, bc, info.name, "NULL", name);
      bc->ptrs[i] = saved_ptr;
    }
    bc->dl[i].device.device_type = kDLCPU;
    expect_refusal(b, bc, info.name, "host memory", name);
    bc->dl[i] = saved;
    bc->dl[i].data = NULL;
    expect_refusal(b, bc, info.name, "a NULL data pointer", name);
    bc->dl[i] = saved;
    bc->dl[i].dtype = saved.dtype.code == kDLInt ? (DLDataType){kDLFloat, 64, 1} : (DLDataType){kDLInt, 16, 1};
    expect_refusal(b, bc, info.name, "another dtype", name);
    bc->dl[i] = saved;
    int64_t shape[SKH_MAX_DIMS + 1];
    memcpy(shape, saved.shape, sizeof(int64_t) * (size_t)saved.ndim);
    shape[saved.ndim] = 1;
    bc->dl[i].shape = shape;
    bc->dl[i].ndim = saved.ndim + 1;
    bc->dl[i].strides = NULL;
    expect_refusal(b, bc, info.name, "another rank", name);
    bc->dl[i] = saved;
    /* each dim off by one (a "*" dim accepts anything: skipped; a dim that binds a symbol may
     * then fail on another tensor, so only the status is checked for those) */
    int64_t dims[SKH_MAX_DIMS];
    int nd = 0;
    cr_assert_eq(sk_shape_dims(info.shape, syms, nsyms, dims, SKH_MAX_DIMS, &nd), SK_OK, "%s", info.shape);
    for (int d = 0; d < saved.ndim; d++) {
      if (dims[d] < 0) continue;
      memcpy(shape, saved.shape, sizeof(int64_t) * (size_t)saved.ndim);
      shape[d] += 1;
      bc->dl[i].shape = shape;
      bc->dl[i].strides = NULL;
      const sk_status s = sk_bind(b, bc->ptrs, bc->n, bc->scratch, bc->scratch_bytes);
      cr_expect_eq(s, SK_ERR_INVALID_ARGUMENT, "%s: %s dim %d + 1 was accepted", name, info.name, d);
      bc->dl[i] = saved;
    }
    if (info.alignment > 1) {
      bc->dl[i].byte_offset = info.alignment / 2 ? info.alignment / 2 : 1;
      expect_refusal(b, bc, info.name, "a misaligned pointer", name);
      bc->dl[i] = saved;
    }
    if (info.strided >= 0) { /* the spine's stride rule: the first `strided` dims free, not overlapping */
      const int free_dims = info.strided < saved.ndim ? info.strided : saved.ndim;
      int64_t strides[SKH_MAX_DIMS], st = 1;
      for (int d = saved.ndim - 1; d >= 0; d--) {
        strides[d] = st;
        st *= saved.shape[d];
      }
      bc->dl[i].strides = strides;
      const int row = saved.ndim - 2; /* padding the last row-major row breaks contiguity */
      if (row >= free_dims && saved.shape[row] > 1 && saved.shape[row + 1] > 1) {
        strides[row] += 1;
        expect_refusal(b, bc, info.name, "non-contiguous strides", name);
        strides[row] -= 1;
      }
      const int outer = free_dims - 1; /* a free dim: padded is fine, overlapping is not */
      if (outer >= 0 && saved.shape[outer] > 1 && (outer + 1 == saved.ndim || saved.shape[outer + 1] > 1)) {
        const int64_t inner = outer + 1 < saved.ndim ? strides[outer + 1] * saved.shape[outer + 1] : 1;
        strides[outer] = inner + 8;
        for (int d = outer - 1; d >= 0; d--) strides[d] = strides[d + 1] * saved.shape[d + 1];
        cr_expect_eq(sk_bind(b, bc->ptrs, bc->n, bc->scratch, bc->scratch_bytes), SK_OK, "%s: %s with padded dim %d refused: %s",
                     name, info.name, outer, sk_last_error_message());
        strides[outer] = inner - 1;
        expect_refusal(b, bc, info.name, "overlapping strides", name);
      }
      bc->dl[i] = saved;
    }
  }
  if (bc->n > 0) {
    const sk_status s = sk_bind(b, bc->ptrs, bc->n - 1, bc->scratch, bc->scratch_bytes);
    cr_expect_eq(s, SK_ERR_INVALID_ARGUMENT, "%s: one tensor too few was accepted", name);
  }
  sk_scratch_spec spec;
  cr_assert_eq(sk_plan_scratch_spec(plan, &spec), SK_OK);
  if (spec.bytes && !plan->scratch_optional) {
    cr_expect_eq(sk_bind(b, bc->ptrs, bc->n, NULL, 0), SK_ERR_INVALID_ARGUMENT, "%s: no scratch was accepted", name);
    cr_expect_eq(sk_bind(b, bc->ptrs, bc->n, bc->scratch, spec.bytes - 1), SK_ERR_INVALID_ARGUMENT,
                 "%s: a short scratch was accepted", name);
    cr_expect_eq(sk_bind(b, bc->ptrs, bc->n, (char *)bc->scratch + 8, spec.bytes), SK_ERR_INVALID_ARGUMENT,
                 "%s: a misaligned scratch was accepted", name);
  }
}

static void caps_round_trip(const sk_plan *plan, const char *name) {
  char json[2048];
  size_t need = 0;
  cr_assert_eq(sk_plan_caps_json(plan, json, sizeof json, &need), SK_OK, "%s", sk_last_error_message());
  cr_assert_lt(need, sizeof json);
  const sk_op_def *def = plan->def;
  cJSON *j = cJSON_Parse(json);
  cr_assert(j, "%s: caps JSON does not parse: %s", name, json);
  unsigned char caps[SKH_MAX_CAPS];
  memcpy(caps, def->caps_defaults, def->caps_size);
  cr_assert_eq(sk_op_caps_from_json(def, j, caps), SK_OK, "%s: %s: %s", name, json, sk_last_error_message());
  cJSON_Delete(j);
  const char *arch = plan->arch;
  memcpy(caps + def->caps_arch_offset, &arch, sizeof arch);
  sk_arch_props props = plan->props;
  sk_plan *again;
  cr_assert_eq(sk_plan_select_only(def, caps, &props, &again), SK_OK, "%s: %s", name, sk_last_error_message());
  char json2[2048];
  cr_assert_eq(sk_plan_caps_json(again, json2, sizeof json2, NULL), SK_OK);
  cr_expect_str_eq(json, json2, "%s: caps JSON does not round-trip", name);
  sk_plan_destroy(again);
}

/* Fill and reference on the host: the GPU suite's inputs and expectations are never all zeros. */
static void reference_smoke(const skh_op *op, const skh_case *c, skh_tensor *t, size_t n, const char *name) {
  skref_rng rng;
  skref_rng_seed(&rng, skref_test_seed(name));
  op->fill(c, t, n, &rng);
  for (size_t i = 0; i < n; i++) {
    if (!t[i].present || t[i].role == SK_TENSOR_OUT || !t[i].bytes) continue;
    size_t j = 0;
    while (j < t[i].bytes && !((unsigned char *)t[i].host)[j]) j++;
    cr_expect_lt(j, t[i].bytes, "%s: fill left input %s all zeros", name, t[i].name);
  }
  /* A staged reference reads earlier stages from the GPU's outputs (t->host): run it once, put
   * its outputs there as a matching GPU would, and run it again. */
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < n; i++) {
      free(t[i].exact), free(t[i].magnitude);
      t[i].exact = t[i].magnitude = NULL;
    }
    op->reference(c, t, n);
    for (size_t i = 0; i < n && pass == 0; i++)
      if (t[i].present && t[i].role != SK_TENSOR_IN) memcpy(t[i].host, t[i].expect, t[i].bytes);
  }
  for (size_t i = 0; i < n; i++) {
    if (!t[i].present || t[i].role == SK_TENSOR_IN || !t[i].bytes) continue;
    size_t j = 0;
    while (j < t[i].bytes && !((unsigned char *)t[i].expect)[j]) j++;
    cr_expect_lt(j, t[i].bytes, "%s: the reference of %s is all zeros", name, t[i].name);
    skh_tolerance tol = {SKH_EXACT, 0, 0, 0, 0};
    if (op->tolerance) op->tolerance(c, t, i, &tol);
    cr_expect(tol.check == SKH_EXACT || tol.check == SKH_CLOSE || tol.check == SKH_SKIP, "%s: tolerance of %s", name, t[i].name);
  }
}

static void run_cpu_cases(const skh_op *op) {
  int checked = 0;
  for (size_t i = 0; i < skh_case_count(op); i++) {
    skh_case c;
    skh_case_get(op, i, &c);
    /* GPU-only cases are planned and bound here too (their inputs are not computed): a table
     * that the GPU engine would fill with the wrong dtype or shape fails here first. */
    if (!(c.flags & (SKH_CPU | SKH_GPU))) continue;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
      int supported = 0;
      cr_assert_eq(sk_op_is_supported(op->op, archs[a], &supported), SK_OK);
      if (!supported) continue;
      char name[200];
      snprintf(name, sizeof name, "%s [%s] %s", op->op, archs[a], c.name);
      sk_plan *plan;
      const sk_status ps = cpu_plan(op, &c, archs[a], &plan);
      if (ps == SK_ERR_UNSUPPORTED) continue; /* e.g. an SM120-only path on sm_90a */
      cr_assert_eq(ps, SK_OK, "%s: plan: %s", name, sk_last_error_message());
      bound_case bc;
      memset(&bc, 0, sizeof bc);
      char err[512];
      cr_assert_eq(skh_tensors_for(op, &c, plan, bc.t, &bc.n, err, sizeof err), 0, "%s: %s", name, err);
      make_views(&bc);
      sk_scratch_spec spec;
      cr_assert_eq(sk_plan_scratch_spec(plan, &spec), SK_OK);
      bc.scratch_bytes = spec.bytes;
      if (!spec.bytes) bc.scratch = NULL;
      sk_binding *b;
      cr_assert_eq(sk_binding_create(plan, c.entry, &b), SK_OK, "%s: %s", name, sk_last_error_message());
      cr_expect_eq(sk_run(b, NULL), SK_ERR_INVALID_ARGUMENT, "%s: an unbound binding ran", name);
      const sk_status bs = sk_bind(b, bc.ptrs, bc.n, bc.scratch, bc.scratch_bytes);
      cr_assert_eq(bs, SK_OK, "%s: valid bind: %s", name, sk_last_error_message());
      for (int s = 0; s < c.nsym; s++) {
        int64_t v = 0;
        cr_expect_eq(sk_binding_symbol(b, c.sym[s].name, &v), SK_OK);
        cr_expect_eq(v, c.sym[s].value, "%s: symbol %s bound %lld, case says %lld", name, c.sym[s].name, (long long)v,
                     (long long)c.sym[s].value);
      }
      rebind_moved(b, &bc, name);
      check_refusals(plan, b, &bc, name);
      caps_round_trip(plan, name);
      if (a == 0 && (c.flags & SKH_CPU)) reference_smoke(op, &c, bc.t, bc.n, name);
      sk_binding_destroy(b);
      skh_tensors_free(bc.t, bc.n);
      sk_plan_destroy(plan);
      checked++;
    }
  }
  cr_expect_gt(checked, 0, "%s: no CPU case ran", op->op);
}

ParameterizedTestParameters(ops, cpu_validation) {
  static size_t idx[64];
  const size_t n = skh_op_count();
  for (size_t i = 0; i < n && i < 64; i++) idx[i] = i;
  return cr_make_param_array(size_t, idx, n < 64 ? n : 64);
}

ParameterizedTest(size_t *i, ops, cpu_validation, .timeout = 300) {
  const skh_op *op = skh_op_at(*i);
  cr_assert(op);
  fprintf(stderr, "ops.cpu_validation: %s\n", op->op);
  run_cpu_cases(op);
}

/* Every registered op has a case table, and every case table names a registered op. */
Test(ops, every_op_has_cases) {
  const sk_op_info *infos;
  size_t n;
  cr_assert_eq(sk_list_ops(&infos, &n), SK_OK);
  for (size_t i = 0; i < n; i++)
    cr_expect(skh_find(infos[i].name) != NULL, "op %s has no case table (ops/<group>/cases.c)", infos[i].name);
  for (size_t i = 0; i < skh_op_count(); i++)
    cr_expect(sk_find_op(skh_op_at(i)->op) != NULL, "case table %s names no op", skh_op_at(i)->op);
}
