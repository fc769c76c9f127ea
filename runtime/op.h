/*
 * runtime/op.h - the op spine: what every op states (an sk_op_def: caps, entries with their
 * tensor tables, kernel selection, bind and run callbacks) and the shared machinery that does
 * the rest (caps versioning, plan life cycle, tensor validation, scratch layout, resolution,
 * manifests, warm-up record). An op's file states only what differs; docs/adding-an-op.md.
 */
#ifndef SK_OP_INTERNAL_H
#define SK_OP_INTERNAL_H

#include <stdalign.h>
#include <stddef.h>

#include "runtime.h"
#include "sparkinfer/op.h"

#define SK_SCRATCH_ALIGN 1024u     /* every scratch view starts on this boundary */
#define SK_SCRATCH_BASE_ALIGN 256u /* what the caller's allocation must have (cudaMalloc gives it) */
#define SK_MAX_SCRATCH_REGIONS 16
#define SK_MAX_SYMBOLS 32          /* plan + bound symbols of one binding */
#define SK_MAX_SYMBOL_NAME 16

/* ---- arch properties (runtime/arch.c) ------------------------------------------------------ */

/* What kernel selection may depend on. A plan for the current device's arch takes the SM count
 * from the device; otherwise (an explicit arch, offline plans, manifests) from the table below,
 * where each arch lists the devices it is tuned for. */
typedef struct sk_arch_props {
  char arch[SK_MAX_ARCH];  /* "sm_120a" */
  int cc;                  /* 120 */
  const char *device;      /* "RTX 5090"; "this device" when measured */
  int sm_count;
  unsigned smem_per_block; /* bytes one block can opt in to (static + dynamic) */
  unsigned smem_per_sm;
  double dram_gbps;        /* DRAM bandwidth class, GB/s (spec sheet) */
  int measured;            /* 1: sm_count read from the present device */
} sk_arch_props;

/* The devices of the table for `arch` (its compute capability; the 'a'/'f' suffix is kept from
 * `arch`): *count entries written to out (at most cap). An arch the table lacks gets one
 * generic entry (128 SMs, the arch's shared-memory limit, 1000 GB/s). */
size_t sk_arch_table_devices(const char *arch, sk_arch_props *out, size_t cap);
/* Properties a plan for `arch` uses: the present device's SM count when its arch is `arch`
 * (and a GPU is reachable), else the table's first device for the arch. */
sk_status sk_arch_props_for(const char *arch, sk_arch_props *out);
/* True for the SM120 family targets that have block-scaled mma and e2m1 cvt. */
bool sk_arch_is_sm120(const char *arch);

/* ---- tuning overrides -------------------------------------------------------------------------
 * One rule (docs/env.md): an op's SPARKINFER_<GROUP>_* variables are developer overrides, read
 * by its select callback, i.e. when a plan is created or a manifest expanded, never at run. A
 * malformed or out-of-range value fails that plan or manifest with SK_ERR_INVALID_ARGUMENT
 * naming the variable. Overrides that change a kernel change its template arguments, so they
 * are part of its name expression and hence of its cache key. */
sk_status sk_tune_int(const char *var, int64_t def, int64_t lo, int64_t hi, int64_t *out);
sk_status sk_tune_flag(const char *var, int def, int *out);
/* A string override (NULL when unset). */
const char *sk_tune_str(const char *var);

/* ---- tensor tables --------------------------------------------------------------------------- */

enum {
  SK_DT_BF16 = 1u << 0,
  SK_DT_FP16 = 1u << 1,
  SK_DT_FP32 = 1u << 2,
  SK_DT_U8 = 1u << 3,
  SK_DT_I32 = 1u << 4,
  SK_DT_I64 = 1u << 5,
  SK_DT_HALF = SK_DT_BF16 | SK_DT_FP16,
};

/* One row of an entry's table. `shape`: "[d0, d1, ...]" where each dim is "*" (any extent) or an
 * integer expression over symbols (+ - * / %, parentheses, cdiv(a,b), pad(a,b) = cdiv(a,b)*b,
 * min, max); a dim that is a bare free symbol of the entry binds it. */
#define SK_STRIDES_ANY (-1)
typedef struct sk_tensor_rule {
  const char *name;
  const char *shape;
  uint32_t dtypes;               /* SK_DT_* mask */
  sk_tensor_role role;
  sk_tensor_presence presence;   /* the default; a plan may change it (sk_plan_tensor_presence) */
  unsigned align;                /* bytes */
  int dtype_like;                /* index of a tensor whose dtype this one must have + 1; 0: none */
  int strided;                   /* 0: row-major; k > 0: the first k dims free but not overlapping
                                    (each stride at least the extent of the dims inside it), the
                                    rest row-major; SK_STRIDES_ANY: the op's bind checks them */
  const char *doc;
} sk_tensor_rule;

/* A symbol the entry's tensors bind at bind time, with its inclusive range (expressions over
 * the plan's symbols). */
typedef struct sk_symbol_rule {
  const char *name;
  const char *lo, *hi;
} sk_symbol_rule;

typedef struct sk_op_entry {
  const char *name;
  const sk_tensor_rule *tensors;
  size_t num_tensors;
  const sk_symbol_rule *symbols;
  size_t num_symbols;
} sk_op_entry;

/* ---- plans ------------------------------------------------------------------------------------ */

typedef struct sk_symbol {
  char name[SK_MAX_SYMBOL_NAME];
  int64_t value;
} sk_symbol;

/* Scratch: regions laid out back to back, each 1024-byte aligned. */
typedef struct sk_scratch_layout {
  size_t offset[SK_MAX_SCRATCH_REGIONS], size[SK_MAX_SCRATCH_REGIONS];
  int count;
  size_t total;
  int zero_once; /* some region holds counters that must start at zero (sk_scratch_spec.zero_once) */
} sk_scratch_layout;

typedef struct sk_op_def sk_op_def;

/* A kernel the plan's selection asked for (owned strings). */
typedef struct sk_plan_request {
  char *source, *name, *params;
} sk_plan_request;

struct sk_plan {
  uint32_t magic;
  const sk_op_def *def;
  char arch[SK_MAX_ARCH];
  sk_arch_props props;
  void *caps;                    /* normalised copy; its arch pointer points at `arch` */
  sk_plan_request *requests;     /* def->num_kernels slots; name NULL = unused */
  sk_kernel **kernels;           /* resolved (NULL where unused or before resolution) */
  sk_tensor_presence *presence;  /* per entry, per tensor: the plan's view of the table */
  uint32_t *dtypes;              /* same, allowed dtypes */
  const char **shapes;           /* same, shape rules (static strings) */
  struct sk_rule_dims *dims;     /* same, the shape rules parsed once after selection (bind's fast path) */
  int dims_parsed;
  size_t *rule_base;             /* index of entry e's first tensor in presence/dtypes */
  sk_symbol symbols[SK_MAX_SYMBOLS];
  int num_symbols;
  sk_scratch_layout scratch;
  int offline;                   /* kernels compiled but not loaded (no GPU) */
  int scratch_optional;          /* bind accepts a missing or short scratch (views NULL) */
  void *state;                   /* def->plan_state_size bytes, zeroed */
};

/* Accessors for op code. */
#define SK_PLAN_CAPS(p, type) ((const type *)(p)->caps)
#define SK_PLAN_STATE(p, type) ((type *)(p)->state)

/* Selection helpers (callable from an op's select). */
sk_status sk_plan_set_kernel(sk_plan *p, size_t slot, const char *source, const char *name, const char *params);
sk_status sk_plan_set_symbol(sk_plan *p, const char *name, int64_t value);
int64_t sk_plan_get_symbol(const sk_plan *p, const char *name); /* 0 when absent */
void sk_plan_tensor_presence(sk_plan *p, size_t entry, size_t tensor, sk_tensor_presence presence);
void sk_plan_tensor_dtypes(sk_plan *p, size_t entry, size_t tensor, uint32_t dtypes);
/* Another shape rule for this plan (a static string), e.g. a recipe's scale layout. */
void sk_plan_tensor_shape(sk_plan *p, size_t entry, size_t tensor, const char *shape);
/* The kernel of a slot after resolution (NULL when unused). */
static inline sk_kernel *sk_plan_k(const sk_plan *p, size_t slot) { return p->kernels[slot]; }

/* Scratch layout helpers: add a region and return its index (or -1 with an error set). */
int sk_scratch_add(sk_scratch_layout *l, size_t bytes);
/* A region of integer counters that runs leave at zero: the caller zeroes the scratch once. */
int sk_scratch_add_counters(sk_scratch_layout *l, size_t bytes);
sk_scratch_spec sk_scratch_spec_of(const sk_scratch_layout *l);

/* ---- bindings -------------------------------------------------------------------------------- */

struct sk_binding {
  uint32_t magic;
  int bound;
  const sk_plan *plan;
  size_t entry;
  size_t num_tensors;
  void **data;                                /* element pointers (data + byte_offset); NULL if absent */
  const DLTensor **seen;                      /* the caller's tensors during bind only */
  void *scratch[SK_MAX_SCRATCH_REGIONS];      /* region views (NULL: an optional scratch not given) */
  void *scratch_base;                         /* what the caller passed */
  size_t scratch_bytes;
  sk_symbol symbols[SK_MAX_SYMBOLS];          /* the entry's bound symbols */
  int num_symbols;
  void *state;                                /* def->binding_state_size bytes */
  struct sk_bind_sig *sig;                    /* the last full bind's tensor layouts (NULL: no fast path) */
  int sig_valid, sig_symbols;                 /* sig holds a bind that passed; symbols before the op's bind */
};

#define SK_BINDING_STATE(b, type) ((type *)(b)->state)
/* A binding in the caller's storage (one-shot wrappers inside the library): `data` and `seen`
 * hold the entry's tensor count, `state` the op's binding state. Not to be destroyed. */
void sk_binding_local(sk_binding *b, const sk_plan *p, size_t entry, void **data, const DLTensor **seen, void *state);
/* A bound symbol's value (0 when absent). */
int64_t sk_binding_get_symbol(const sk_binding *b, const char *name);
/* Publish a fact of the binding as a symbol (sk_binding_symbol), e.g. which path a run takes. */
sk_status sk_binding_set_symbol(sk_binding *b, const char *name, int64_t value);
/* The caller's tensor `i` (valid inside the op's bind callback only; NULL when absent). */
static inline const DLTensor *sk_bind_tensor(const sk_binding *b, size_t i) { return b->seen[i]; }
/* An error from an op's bind callback, with the spine's prefix ("op bind (entry): ..."). */
sk_status sk_bind_error(const sk_binding *b, const char *fmt, ...) SK_PRINTF(2, 3);
/* The ops' error-word readers (sk_attn_error_flags, sk_moe_error_flags): `b` must be a bound
 * binding of an op whose name starts with `group` ("moe."); waits for `stream`, then copies the
 * 4 bytes at `offset` of the binding's first scratch region. `who` names the caller in messages. */
sk_status sk_binding_scratch_word(const sk_binding *b, const char *group, size_t offset, void *stream, const char *who,
                                  uint32_t *out);

/* ---- caps fields: one table per op, one JSON codec --------------------------------------------- */

typedef enum sk_caps_type { SK_CAPS_I64, SK_CAPS_I32, SK_CAPS_BOOL, SK_CAPS_F32, SK_CAPS_ENUM } sk_caps_type;
typedef struct sk_caps_field {
  const char *name;          /* the JSON field: the C member's name */
  sk_caps_type type;
  size_t offset;
  int64_t lo, hi;            /* I64 / I32: the accepted whole numbers */
  bool required;             /* I64 / I32: absent is an error (else the default stays) */
  const char *const *names;  /* ENUM: the JSON names */
  const int *values;         /* ENUM: the C value of names[i] (NULL: i) */
  int count;                 /* ENUM: entries of names */
} sk_caps_field;
/* The member's offset, refusing to compile when its size is not `size` (the codec's store width). */
#define SK_CAPS_AT_(T, f, size) (offsetof(T, f) + 0 * sizeof(char[sizeof(((T *)0)->f) == (size) ? 1 : -1]))
#define SK_CAPS_INT64(T, f, lo, hi, req) {#f, SK_CAPS_I64, SK_CAPS_AT_(T, f, 8), lo, hi, req, NULL, NULL, 0}
#define SK_CAPS_INT(T, f, lo, hi, req) {#f, SK_CAPS_I32, SK_CAPS_AT_(T, f, 4), lo, hi, req, NULL, NULL, 0}
#define SK_CAPS_FLAG(T, f) {#f, SK_CAPS_BOOL, SK_CAPS_AT_(T, f, sizeof(int)), 0, 1, false, NULL, NULL, 0}
#define SK_CAPS_FLOAT(T, f) {#f, SK_CAPS_F32, SK_CAPS_AT_(T, f, sizeof(float)), 0, 0, false, NULL, NULL, 0}
/* names: an array (its length is taken); values: NULL or an array of as many C values. */
#define SK_CAPS_ENUM(T, f, names_, values_)                                                        \
  {#f, SK_CAPS_ENUM, SK_CAPS_AT_(T, f, sizeof(int)), 0, 0, false, names_, values_,                 \
   (int)(sizeof(names_) / sizeof((names_)[0]))}

/* JSON -> caps: `caps` holds the defaults (or the values so far); fields the object lacks keep
 * them. Unknown fields, wrong types, fractions or out-of-range numbers for counts and sizes and
 * unknown enum names are SK_ERR_MANIFEST naming the field; "arch" is accepted and left to the
 * caller. caps -> JSON: every field of the table (NULL when out of memory). */
sk_status sk_op_caps_from_json(const sk_op_def *def, const struct cJSON *j, void *caps);
struct cJSON *sk_op_caps_to_json(const sk_op_def *def, const void *caps);

/* ---- the op definition ---------------------------------------------------------------------- */

struct sk_op_def {
  sk_op_info info;               /* name, style, summary, archs */
  size_t caps_size;              /* sizeof the op's caps struct */
  size_t caps_min_size;          /* struct_size of the first released version of it */
  const void *caps_defaults;     /* the op's SK_..._CAPS_INIT value */
  size_t caps_arch_offset;       /* offsetof(caps, arch) (a const char *) */
  size_t plan_state_size, binding_state_size;
  size_t num_kernels;            /* kernel slots */
  const sk_op_entry *entries;
  size_t num_entries;
  int min_sm;                    /* archs from sm_<min_sm> (SK_OP_INFO) */
  bool (*is_supported)(const char *arch); /* optional: a further restriction */
  /* Validate and normalise a writable caps copy (arch already set); SK_ERR_INVALID_ARGUMENT. */
  sk_status (*check_caps)(void *caps);
  /* caps <-> JSON (manifests, the warm-up record, sk_plan_create_json, sk_plan_caps_json): the
   * spine's codec over this table of the caps fields, in JSON order (sk_op_caps_from_json). */
  const struct sk_caps_field *caps_fields;
  size_t num_caps_fields;
  /* The selection, a pure function of (caps, props, overrides): kernel requests (by slot),
   * symbols, the plan's view of the tensor tables, scratch layout and the op's plan state.
   * Manifests run it with the table's props (no GPU); plans with the device's. */
  sk_status (*select)(sk_plan *p);
  /* After resolution (plans only; kernels may be offline): dynamic smem opt-ins, occupancy. */
  sk_status (*finish)(sk_plan *p);
  /* After the spine validated the tensors: the op's own checks and the launch geometry. */
  sk_status (*bind)(sk_binding *b);
  sk_status (*run)(const sk_binding *b, void *stream);
};

/* Designated initialisers every definition fills alike: SK_OP_CAPS(caps type, its defaults)
 * and SK_OP_STATE(plan state type, binding state type). */
#define SK_OP_CAPS(type, defaults)                                                                 \
  .caps_size = sizeof(type), .caps_min_size = sizeof(type), .caps_defaults = &(defaults),          \
  .caps_arch_offset = offsetof(type, arch)
#define SK_OP_STATE(plan_type, binding_type)                                                       \
  .plan_state_size = sizeof(plan_type), .binding_state_size = sizeof(binding_type)
/* Name, summary and the archs: every arch from sm_<min> (a literal number), listing the targets
 * the manifests build for. */
#define SK_OP_INFO(name, summary, min)                                                             \
  .info = {name, SK_OP_PLANNED, summary, "sm_" #min "+,sm_90a,sm_120a,sm_121a"}, .min_sm = (min)
/* The caps field table (an array) and the callbacks; finish may be NULL. */
#define SK_OP_FIELDS(table) .caps_fields = (table), .num_caps_fields = sizeof(table) / sizeof((table)[0])
#define SK_OP_CALLBACKS(check, select_, finish_, bind_, run_)                                       \
  .check_caps = (check), .select = (select_), .finish = (finish_), .bind = (bind_), .run = (run_)

/* The registry (runtime/registry.c; the list is generated from ops/<group>/<op>.c). */
const sk_op_def *sk_find_op(const char *name);
size_t sk_op_count(void);
const sk_op_def *sk_op_at(size_t i);

/* Build a plan without resolving its kernels: caps checked, selection run with `props`. For
 * manifests and CPU tests of the selection. Free with sk_plan_destroy. */
sk_status sk_plan_select_only(const sk_op_def *def, const void *caps, const sk_arch_props *props, sk_plan **out);
/* Read a caller's versioned caps struct into a full-size copy (defaults for missing fields). */
sk_status sk_caps_read(const sk_op_def *def, const void *caps, void *out);

/* Resolve one kernel of an op at plan time (compiles if needed; loads on the GPU; without one,
 * an explicit arch gives an offline kernel). */
sk_status sk_op_resolve(const char *op, const char *source, const char *name_expr, const char *params,
                        const char *arch, sk_kernel **out);
/* Opt `k` in to `bytes` of dynamic shared memory (remembered per kernel and device; a no-op for
 * NULL, 0 bytes or an offline kernel). */
sk_status sk_op_allow_dynamic_smem(sk_kernel *k, unsigned bytes);
/* CTAs of `k` resident per SM of the current device; 0 when unknown (offline, no driver call). */
int sk_op_resident_ctas_per_sm(const sk_kernel *k, int block_threads, unsigned dynamic_smem);

/* Integer expression over symbols (the tensor-table shape language); for ops and tests. */
sk_status sk_shape_eval(const char *expr, const sk_symbol *syms, int nsyms, int64_t *out);
/* The extents of a shape rule under `syms` ("*" gives -1); *ndim receives the rank (<= cap). */
sk_status sk_shape_dims(const char *shape, const sk_symbol *syms, int nsyms, int64_t *dims, int cap, int *ndim);

/* Ceil division for sizes. */
static inline int64_t sk_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* DLPack dtype of an sk_dtype (bf16, fp16, fp32) as an SK_DT_* bit. */
static inline uint32_t sk_dt_of(sk_dtype d) { return d == SK_DTYPE_BF16 ? SK_DT_BF16 : d == SK_DTYPE_FP16 ? SK_DT_FP16 : SK_DT_FP32; }


#endif
