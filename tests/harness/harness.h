/* tests/harness/harness.h - one test and bench harness over the op registry (in the spirit of
 * llama.cpp's test-backend-ops). Each op supplies a case table (ops/<group>/cases*.c): its cases
 * (caps, entry, the run-time symbols such as M), a filler for the input tensors, a double-
 * precision CPU reference for the outputs, tolerances, and a cost model for the benchmark. The
 * harness does the rest from the op's tensor table (sk_plan_tensor_info):
 *   - CPU (tests/test_ops.c, `make test`): offline plans for sm_90a and sm_120a of every case;
 *     binds with valid views succeed; every generic bad argument (NULL, wrong dtype, rank, each
 *     dim, misalignment, host memory, short or missing scratch, wrong tensor count) is refused
 *     with SK_ERR_INVALID_ARGUMENT and a message naming the tensor; caps JSON round trips; run of
 *     an unbound binding is refused.
 *   - GPU (tests/gpu/test_ops_gpu.c, `make gpu-test`): every case on the device against the
 *     reference, outputs poisoned with 0xff before each run; then, after
 *     sk_freeze_kernel_resolution, each case captured in a CUDA graph and replayed: bitwise equal
 *     to an eager run on the same inputs.
 *   - bench (bench/bench_ops.c): SKH_BENCH cases timed in graph replay; one JSON line per case.
 * Case tables register themselves by a `const skh_op skh_op_<group>_<op> = {...};` line (the
 * Makefile generates the list, as for ops). */
#ifndef SK_HARNESS_H
#define SK_HARNESS_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ref.h" /* skref_rng, number formats */
#include "sparkinfer/op.h"

#define SKH_MAX_TENSORS 16
#define SKH_MAX_DIMS 8
#define SKH_MAX_CAPS 512

enum {
  SKH_CPU = 1u << 0,        /* in the CPU validation suite */
  SKH_GPU = 1u << 1,        /* run on the GPU against the reference */
  SKH_BENCH = 1u << 2,      /* timed by bench_ops (the reference is not computed) */
  SKH_NO_GRAPH = 1u << 3,   /* skip the graph-replay check */
  SKH_NO_RUN = 1u << 4,     /* runs need state the harness cannot make (comm.pcie's peers): plan and bind only */
  SKH_TEST = SKH_CPU | SKH_GPU,
};

typedef struct skh_case {
  char name[128];                 /* "bf16 m=1 k=4096 swizzled" (unique within the op) */
  const char *entry;              /* NULL = the op's first entry */
  unsigned char caps[SKH_MAX_CAPS]; /* the op's caps struct (struct_size first, arch NULL) */
  struct {
    char name[16];
    int64_t value;
  } sym[6];                       /* the entry's bound symbols for this case ("M" = 16) */
  int nsym;
  int64_t param[8];               /* op-specific knobs (data distribution, ...) */
  double dparam[4];
  unsigned flags;                 /* SKH_* */
  int variant;                    /* the table's skh_op.variant (skh_case_get sets it) */
} skh_case;

/* Set a symbol of a case. */
void skh_case_sym(skh_case *c, const char *name, int64_t value);
/* Copy an op's caps struct into a case. */
#define SKH_SET_CAPS(c, caps_value)                                                              \
  do {                                                                                           \
    _Static_assert(sizeof(caps_value) <= SKH_MAX_CAPS, "caps too large for skh_case");           \
    memcpy((c)->caps, &(caps_value), sizeof(caps_value));                                        \
  } while (0)

/* One tensor of a case, in the entry's table order. The harness sets name, role, presence, dtype
 * (the table's only dtype, or the one the op's layout callback chooses), shape (from the table
 * and the symbols), contiguous strides and bytes; the op may change dtype, shape, strides and
 * bytes in its layout callback (strided views, absent optional tensors). */
typedef struct skh_tensor {
  const char *name;
  sk_tensor_role role;
  int present;                    /* 0: bound as NULL */
  DLDataType dtype;
  int ndim;
  int64_t shape[SKH_MAX_DIMS];
  int64_t strides[SKH_MAX_DIMS];  /* elements */
  int strided;                    /* 1: bind with these strides, else NULL strides */
  size_t bytes;                   /* allocation (covers the strided extent) */
  size_t elem_bytes;
  void *host;                     /* IN/INOUT: filled by fill; OUT/INOUT after a run: the GPU's */
  void *expect;                   /* OUT/INOUT: the reference's (zeroed before reference) */
  /* OUT/INOUT, optional, set by reference (numel doubles each, malloc'd by it, freed by
   * skh_tensors_free): `exact`, the reference's values before their final rounding, which SKH_CLOSE
   * then compares against instead of `expect`; `magnitude`, per element the magnitude of the terms
   * the value sums (an fp32 sum of them is off by a few 2^-24 of it when they cancel). */
  double *exact, *magnitude;
} skh_tensor;

typedef enum skh_check {
  SKH_EXACT = 0,   /* bytes equal (quantized codes, integer outputs) */
  SKH_CLOSE = 1,   /* decoded values: |got - want| <= max_abs + rel*|want| + ulps*ulp(want) +
                      magnitude_rel*magnitude (+ elem_abs[i]), and cosine >= min_cosine (want: exact if set) */
  SKH_SKIP = 2,    /* not compared (e.g. a buffer the op may leave partly unwritten) */
} skh_check;

typedef struct skh_tolerance {
  skh_check check;
  double max_abs, rel;
  double min_cosine;              /* 0: not checked */
  int nan_equal;                  /* CLOSE: NaN matches NaN */
  /* CLOSE, optional: a per-element absolute bound (flat index) added to max_abs, for errors that
   * scale with each element's own condition (a GEMM's sum of |a*b|). The op owns the array (e.g.
   * filled by its reference for the case just computed); it must stay valid until skh_compare
   * returns. */
  const double *elem_abs;
  double ulps;                    /* CLOSE: units in the last place of want, in the tensor's dtype */
  double magnitude_rel;           /* CLOSE: times the tensor's magnitude of the element (when set) */
} skh_tolerance;

typedef struct skh_op {
  const char *op;                                                     /* "quantization.nvfp4" */
  /* The cases of `variant` (the skh_op's own: one file may serve several ops, each its variant;
   * callers use skh_case_count / skh_case_get, which pass it and set c->variant, so the other
   * callbacks read it from the case). */
  size_t (*count)(int variant);
  void (*get)(int variant, size_t i, skh_case *c);
  /* Optional: adjust tensors before allocation (strides, presence, dtype, padding). */
  void (*layout)(const skh_case *c, skh_tensor *t, size_t n);
  /* Fill the IN/INOUT tensors' host buffers (random data from rng; never all zeros). */
  void (*fill)(const skh_case *c, skh_tensor *t, size_t n, skref_rng *rng);
  /* Write the expected OUT/INOUT contents into expect (inputs in host), double precision. The GPU
   * suite calls it after the run, so the OUT tensors' host holds the GPU's outputs: a later stage
   * may be referenced on an earlier stage's GPU output (stage by stage). */
  void (*reference)(const skh_case *c, skh_tensor *t, size_t n);
  /* Tolerance of output tensor i (default: SKH_EXACT). */
  void (*tolerance)(const skh_case *c, const skh_tensor *t, size_t i, skh_tolerance *tol);
  /* Bench: bytes moved and flops of one run (the roofline), and the metric to report
   * ("GB/s" or "TFLOP/s"). */
  void (*cost)(const skh_case *c, const skh_tensor *t, size_t n, double *bytes, double *flops, const char **metric);
  int variant;                                                        /* passed to count / get; 0 by default */
} skh_op;

/* The op's number of cases and case i (its variant set). */
static inline size_t skh_case_count(const skh_op *op) { return op->count(op->variant); }
static inline void skh_case_get(const skh_op *op, size_t i, skh_case *c) {
  op->get(op->variant, i, c);
  c->variant = op->variant;
}

/* The registered case tables (generated list). */
size_t skh_op_count(void);
const skh_op *skh_op_at(size_t i);
const skh_op *skh_find(const char *op);

/* ---- helpers for case tables --------------------------------------------------------------- */
/* Element access by flat index for bf16/fp16/fp32/u8/i32/i64 tensors (contiguous index space of
 * the tensor's shape; strides honoured). */
double skh_get(const skh_tensor *t, const void *buf, size_t flat);
void skh_set(const skh_tensor *t, void *buf, size_t flat, double v);
size_t skh_numel(const skh_tensor *t);
/* Byte offset of a flat index (strides honoured). */
size_t skh_offset(const skh_tensor *t, size_t flat);
/* One unit in the last place of v in a floating-point dtype (bf16, fp16, fp32; subnormal spacing
 * below the normal range); 1 for integer dtypes. */
double skh_ulp(DLDataType dtype, double v);
/* Find a tensor by name (NULL if absent). */
skh_tensor *skh_tensor_named(skh_tensor *t, size_t n, const char *name);
/* Random normal values (stddev) into every element of a bf16/fp16/fp32 tensor. */
void skh_fill_normal(skh_tensor *t, skref_rng *rng, double stddev);

/* ---- the engine (harness.c) ------------------------------------------------------------------ */
/* Build the tensors of case `c` for `plan` (shapes from the table and symbols, then layout). */
int skh_tensors_for(const skh_op *op, const skh_case *c, const sk_plan *plan, skh_tensor *t, size_t *n, char *err,
                    size_t errlen);
void skh_tensors_free(skh_tensor *t, size_t n);
/* Compare output i: 0 on success, else a message in err. */
int skh_compare(const skh_tensor *t, const skh_tolerance *tol, char *err, size_t errlen);
/* Plan case c for `arch` (offline: by the selection alone, skh_plan_offline; else skh_plan, which
 * resolves its kernels) and build its tensors (skh_tensors_for): SK_OK, SK_ERR_UNSUPPORTED (the
 * case does not exist on this arch: skip it; nothing to free), or another status with the reason,
 * naming the op and case, in err (nothing to free). */
sk_status skh_case_open(const skh_op *op, const skh_case *c, const char *arch, int offline, sk_plan **plan, skh_tensor *t,
                        size_t *n, char *err, size_t errlen);
/* Fake device views of a case's tensors at distinct 4 KiB-aligned addresses from 2^40 (never
 * dereferenced: for binds on the CPU and runs on the stub driver): dl[i] views t[i], ptrs[i] is
 * &dl[i] or NULL for an absent tensor; returns an address past them all for the scratch. */
void *skh_fake_views(const skh_tensor *t, size_t n, DLTensor *dl, const DLTensor **ptrs);
/* Create the plan of a case; arch NULL = the caps' (the device's). */
sk_status skh_plan(const skh_op *op, const skh_case *c, const char *arch, sk_plan **plan);
/* The case's plan for `arch` by selection alone (no kernels resolved, no GPU): the arch table's
 * first device's properties. For the CPU suite and bench_host. */
sk_status skh_plan_offline(const skh_op *op, const skh_case *c, const char *arch, sk_plan **plan);

#endif
