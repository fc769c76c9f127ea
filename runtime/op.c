/* runtime/op.c - the op spine (see op.h): caps versioning, plans, tensor tables and bind,
 * scratch layout, resolution, manifests. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

#define PLAN_MAGIC 0x534b504cu    /* "SKPL" */
#define BINDING_MAGIC 0x534b4244u /* "SKBD" */

/* ---- shape expressions ------------------------------------------------------------------------ */

typedef struct expr_parser {
  const char *s;
  const sk_symbol *syms;
  int nsyms;
  const char *bad; /* NULL, or what went wrong */
  char badbuf[64];
} expr_parser;

static void skip_ws(expr_parser *p) {
  while (*p->s == ' ' || *p->s == '\t') p->s++;
}

static int64_t parse_sum(expr_parser *p);

static bool overflowed(expr_parser *p, bool overflow) {
  if (overflow && !p->bad) p->bad = "overflow";
  return overflow;
}

static int64_t parse_atom(expr_parser *p) {
  skip_ws(p);
  if (p->bad) return 0;
  if (*p->s == '(') {
    p->s++;
    int64_t v = parse_sum(p);
    skip_ws(p);
    if (*p->s != ')') { p->bad = "missing ')'"; return 0; }
    p->s++;
    return v;
  }
  if (*p->s == '-') {
    p->s++;
    return -parse_atom(p);
  }
  if (isdigit((unsigned char)*p->s)) {
    int64_t v = 0;
    while (isdigit((unsigned char)*p->s)) {
      int64_t t = 0;
      if (overflowed(p, __builtin_mul_overflow(v, 10, &t) || __builtin_add_overflow(t, *p->s - '0', &v))) return 0;
      p->s++;
    }
    return v;
  }
  if (isalpha((unsigned char)*p->s) || *p->s == '_') {
    char name[SK_MAX_SYMBOL_NAME];
    size_t n = 0;
    while (isalnum((unsigned char)*p->s) || *p->s == '_') {
      if (n + 1 < sizeof name) name[n++] = *p->s;
      p->s++;
    }
    name[n] = 0;
    skip_ws(p);
    if (*p->s == '(') { /* function of two arguments */
      p->s++;
      int64_t a = parse_sum(p);
      skip_ws(p);
      if (*p->s != ',') { p->bad = "expected ',' in a function call"; return 0; }
      p->s++;
      int64_t b = parse_sum(p);
      skip_ws(p);
      if (*p->s != ')') { p->bad = "missing ')'"; return 0; }
      p->s++;
      if (p->bad) return 0;
      if (!strcmp(name, "min")) return a < b ? a : b;
      if (!strcmp(name, "max")) return a > b ? a : b;
      if (!strcmp(name, "cdiv") || !strcmp(name, "pad")) {
        if (b <= 0) { p->bad = "cdiv/pad by a non-positive number"; return 0; }
        int64_t q = a / b + (a % b > 0), r = 0;
        if (!strcmp(name, "cdiv")) return q;
        return overflowed(p, __builtin_mul_overflow(q, b, &r)) ? 0 : r;
      }
      snprintf(p->badbuf, sizeof p->badbuf, "unknown function %s", name);
      p->bad = p->badbuf;
      return 0;
    }
    for (int i = p->nsyms - 1; i >= 0; i--)
      if (p->syms[i].name[0] == name[0] && !strcmp(p->syms[i].name, name)) return p->syms[i].value;
    snprintf(p->badbuf, sizeof p->badbuf, "unknown symbol %s", name);
    p->bad = p->badbuf;
    return 0;
  }
  p->bad = "unexpected character";
  return 0;
}

static int64_t parse_product(expr_parser *p) {
  int64_t v = parse_atom(p);
  for (;;) {
    skip_ws(p);
    const char op = *p->s;
    if (op != '*' && op != '/' && op != '%') return v;
    p->s++;
    int64_t r = parse_atom(p), t = 0;
    if (p->bad) return 0;
    if (op == '*') {
      if (overflowed(p, __builtin_mul_overflow(v, r, &t))) return 0;
      v = t;
    } else if (r == 0) { p->bad = "division by zero"; return 0; }
    else v = op == '/' ? v / r : v % r;
  }
}

static int64_t parse_sum(expr_parser *p) {
  int64_t v = parse_product(p);
  for (;;) {
    skip_ws(p);
    const char op = *p->s;
    if (op != '+' && op != '-') return v;
    p->s++;
    int64_t r = parse_product(p), t = 0;
    if (p->bad) return 0;
    if (overflowed(p, op == '+' ? __builtin_add_overflow(v, r, &t) : __builtin_sub_overflow(v, r, &t))) return 0;
    v = t;
  }
}

/* Evaluate `len` bytes of `expr`. */
static sk_status eval_span(const char *expr, size_t len, const sk_symbol *syms, int nsyms, int64_t *out) {
  char buf[128];
  if (len >= sizeof buf) return sk_set_error(SK_ERR_INTERNAL, "shape expression too long: %.*s", (int)len, expr);
  memcpy(buf, expr, len);
  buf[len] = 0;
  expr_parser p = {buf, syms, nsyms, NULL, ""};
  int64_t v = parse_sum(&p);
  skip_ws(&p);
  if (!p.bad && *p.s) p.bad = "trailing characters";
  if (p.bad) return sk_set_error(SK_ERR_INTERNAL, "shape expression \"%s\": %s", buf, p.bad);
  *out = v;
  return SK_OK;
}

sk_status sk_shape_eval(const char *expr, const sk_symbol *syms, int nsyms, int64_t *out) {
  if (!expr || !out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_shape_eval: NULL argument");
  return eval_span(expr, strlen(expr), syms, nsyms, out);
}

/* Split "[a, b, c]" into dims (spans into the string); returns the count or -1. */
typedef struct dim_span {
  const char *s;
  size_t len;
} dim_span;

static int split_shape(const char *shape, dim_span *dims, int cap) {
  const char *s = shape;
  while (*s == ' ') s++;
  if (*s++ != '[') return -1;
  int n = 0, depth = 0;
  const char *start = s;
  for (; *s; s++) {
    if (*s == '(') depth++;
    else if (*s == ')') depth--;
    else if ((*s == ',' && depth == 0) || (*s == ']' && depth == 0)) {
      const char *a = start, *e = s;
      while (a < e && *a == ' ') a++;
      while (e > a && e[-1] == ' ') e--;
      if (e > a) {
        if (n == cap) return -1;
        dims[n++] = (dim_span){a, (size_t)(e - a)};
      } else if (*s == ',' || n > 0) {
        return -1; /* empty dim */
      }
      if (*s == ']') return n;
      start = s + 1;
    }
  }
  return -1;
}

/* Whether a dim binds a free symbol: the bare symbol ("M"), or the symbol plus a constant
 * ("B + 1", the offsets of B requests); *offset receives the constant. */
static bool binds_symbol(const dim_span *d, const char *name, int64_t *offset) {
  const size_t n = strlen(name);
  *offset = 0;
  if (d->len < n || memcmp(d->s, name, n)) return false;
  if (d->len == n) return true;
  const char *p = d->s + n, *end = d->s + d->len;
  while (p < end && *p == ' ') p++;
  if (p == end || *p != '+') return false;
  p++;
  while (p < end && *p == ' ') p++;
  int64_t v = 0;
  if (p == end) return false;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9' || v > (1 << 20)) return false;
    v = v * 10 + (*p - '0');
  }
  *offset = v;
  return true;
}

sk_status sk_shape_dims(const char *shape, const sk_symbol *syms, int nsyms, int64_t *dims, int cap, int *ndim) {
  dim_span spans[8];
  const int n = split_shape(shape, spans, cap < 8 ? cap : 8);
  if (n < 0) return sk_set_error(SK_ERR_INTERNAL, "bad shape rule %s", shape);
  for (int d = 0; d < n; d++) {
    if (spans[d].len == 1 && spans[d].s[0] == '*') dims[d] = -1;
    else SK_TRY(eval_span(spans[d].s, spans[d].len, syms, nsyms, &dims[d]));
  }
  *ndim = n;
  return SK_OK;
}

/* ---- symbols ---------------------------------------------------------------------------------- */

/* One tensor's layout in the last full bind (rebinding the same layouts, sk_bind). */
struct sk_bind_sig {
  uint8_t present, ndim, code, bits, has_strides;
  uint16_t lanes;
  int32_t dev_type, dev_id;
  int64_t shape[8], strides[8];
};

/* A shape rule parsed once per plan: its dims, and per dim whether it is "*", a literal, or binds
 * one of the entry's free symbols (index, offset); other dims are evaluated at bind. */
enum { DIM_EXPR, DIM_ANY, DIM_LITERAL, DIM_CONST /* an expression over plan symbols only */ };
struct sk_rule_dims {
  int n;                 /* -1: the rule does not parse (bind reports it) */
  dim_span d[8];
  uint8_t kind[8];
  int8_t sym[8];         /* index into the entry's symbols, -1 none */
  int64_t value[8];      /* DIM_LITERAL: the extent; sym >= 0: the offset */
};

/* Whether a dim evaluates with the plan's symbols alone (then it is fixed for the plan). */
static bool const_value(const dim_span *x, const sk_plan *p, int64_t *out) {
  char buf[128];
  if (x->len >= sizeof buf) return false;
  memcpy(buf, x->s, x->len);
  buf[x->len] = 0;
  expr_parser e = {buf, p->symbols, p->num_symbols, NULL, ""};
  const int64_t v = parse_sum(&e);
  skip_ws(&e);
  if (e.bad || *e.s) return false;
  *out = v;
  return true;
}

static void parse_rule(const char *shape, const sk_plan *p, const sk_op_entry *en, struct sk_rule_dims *r) {
  r->n = split_shape(shape, r->d, 8);
  for (int d = 0; d < r->n; d++) {
    const dim_span *x = &r->d[d];
    r->sym[d] = -1;
    r->value[d] = 0;
    r->kind[d] = x->len == 1 && x->s[0] == '*' ? DIM_ANY : DIM_EXPR;
    if (r->kind[d] == DIM_EXPR && isdigit((unsigned char)x->s[0]) && strspn(x->s, "0123456789") >= x->len) {
      int64_t v = 0;
      for (size_t i = 0; i < x->len && v < ((int64_t)1 << 56); i++) v = v * 10 + (x->s[i] - '0');
      r->kind[d] = DIM_LITERAL;
      r->value[d] = v;
    }
    for (size_t s = 0; s < en->num_symbols && r->sym[d] < 0; s++) {
      int64_t offset;
      if (binds_symbol(x, en->symbols[s].name, &offset)) r->sym[d] = (int8_t)s, r->value[d] = offset;
    }
    if (r->kind[d] == DIM_EXPR && r->sym[d] < 0 && const_value(x, p, &r->value[d])) r->kind[d] = DIM_CONST;
  }
}

static sk_status put_symbol(sk_symbol *syms, int *n, const char *name, int64_t value) {
  for (int i = 0; i < *n; i++)
    if (syms[i].name[0] == name[0] && !strcmp(syms[i].name, name)) { /* first byte: bind's hot path */
      syms[i].value = value;
      return SK_OK;
    }
  if (*n >= SK_MAX_SYMBOLS || strlen(name) >= SK_MAX_SYMBOL_NAME)
    return sk_set_error(SK_ERR_INTERNAL, "symbol table: no room for %s", name);
  sk_strlcpy(syms[*n].name, name, SK_MAX_SYMBOL_NAME);
  syms[(*n)++].value = value;
  return SK_OK;
}

static const sk_symbol *find_symbol(const sk_symbol *syms, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (syms[i].name[0] == name[0] && !strcmp(syms[i].name, name)) return &syms[i];
  return NULL;
}

static void parse_rules(sk_plan *p) {
  for (size_t e = 0; e < p->def->num_entries; e++)
    for (size_t t = 0; t < p->def->entries[e].num_tensors; t++) {
      const size_t i = p->rule_base[e] + t;
      parse_rule(p->shapes[i], p, &p->def->entries[e], &p->dims[i]);
      /* "the dtype of tensor X": the plan's view narrows to what the plan allows X (what
       * sk_plan_tensor_info reports; bind still compares with the X it is given) */
      const int like = p->def->entries[e].tensors[t].dtype_like;
      if (like && (p->dtypes[i] & p->dtypes[p->rule_base[e] + (size_t)like - 1]))
        p->dtypes[i] &= p->dtypes[p->rule_base[e] + (size_t)like - 1];
    }
  p->dims_parsed = 1;
}

sk_status sk_plan_set_symbol(sk_plan *p, const char *name, int64_t value) {
  SK_TRY(put_symbol(p->symbols, &p->num_symbols, name, value));
  if (p->dims_parsed) parse_rules(p); /* a symbol set after selection: the fixed dims follow */
  return SK_OK;
}

int64_t sk_plan_get_symbol(const sk_plan *p, const char *name) {
  const sk_symbol *s = find_symbol(p->symbols, p->num_symbols, name);
  return s ? s->value : 0;
}

sk_status sk_binding_set_symbol(sk_binding *b, const char *name, int64_t value) {
  return put_symbol(b->symbols, &b->num_symbols, name, value);
}

int64_t sk_binding_get_symbol(const sk_binding *b, const char *name) {
  const sk_symbol *s = find_symbol(b->symbols, b->num_symbols, name);
  return s ? s->value : sk_plan_get_symbol(b->plan, name);
}

/* ---- dtypes ----------------------------------------------------------------------------------- */

static const struct {
  uint32_t bit;
  uint8_t code, bits;
  const char *name;
} dtype_names[] = {
    {SK_DT_BF16, kDLBfloat, 16, "bfloat16"}, {SK_DT_FP16, kDLFloat, 16, "float16"}, {SK_DT_FP32, kDLFloat, 32, "float32"},
    {SK_DT_U8, kDLUInt, 8, "uint8"},         {SK_DT_I32, kDLInt, 32, "int32"},      {SK_DT_I64, kDLInt, 64, "int64"},
};
#define NUM_DTYPES (sizeof dtype_names / sizeof dtype_names[0])

static uint32_t dtype_bit(DLDataType d) {
  if (d.lanes != 1) return 0;
  for (size_t i = 0; i < NUM_DTYPES; i++)
    if (dtype_names[i].code == d.code && dtype_names[i].bits == d.bits) return dtype_names[i].bit;
  return 0;
}

static const char *mask_names(uint32_t mask, char *buf, size_t n) {
  buf[0] = 0;
  size_t used = 0;
  for (size_t i = 0; i < NUM_DTYPES; i++)
    if (mask & dtype_names[i].bit) {
      int w = snprintf(buf + used, n - used, "%s%s", used ? "|" : "", dtype_names[i].name);
      if (w < 0 || (size_t)w >= n - used) break;
      used += (size_t)w;
    }
  return buf;
}

static const char *dl_name(DLDataType d, char *buf, size_t n) {
  const char *code = d.code == kDLBfloat ? "bfloat" : d.code == kDLFloat ? "float" : d.code == kDLInt ? "int"
                   : d.code == kDLUInt ? "uint" : "code";
  snprintf(buf, n, "%s%u%s", code, d.bits, d.lanes != 1 ? "xN" : "");
  return buf;
}

/* ---- scratch ----------------------------------------------------------------------------------- */

int sk_scratch_add(sk_scratch_layout *l, size_t bytes) {
  if (l->count >= SK_MAX_SCRATCH_REGIONS) {
    sk_set_error(SK_ERR_INTERNAL, "scratch layout: more than %d regions", SK_MAX_SCRATCH_REGIONS);
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

/* Callers allocate with cudaMalloc (256-byte aligned): the spec asks for that and adds the slack
 * bind needs to start the views on a 1024-byte boundary. */
sk_scratch_spec sk_scratch_spec_of(const sk_scratch_layout *l) {
  sk_scratch_spec s = {l->total ? l->total + SK_SCRATCH_ALIGN - SK_SCRATCH_BASE_ALIGN : 0, SK_SCRATCH_BASE_ALIGN,
                       l->zero_once};
  return s;
}

/* ---- arch ------------------------------------------------------------------------------------- */

bool sk_arch_is_sm120(const char *arch) {
  int n = sk_arch_number(arch);
  size_t len = strlen(arch);
  return (n == 120 || n == 121) && (arch[len - 1] == 'a' || arch[len - 1] == 'f');
}

static sk_status plan_arch(const char *op, const char *caps_arch, char arch[SK_MAX_ARCH]) {
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

/* ---- resolution -------------------------------------------------------------------------------- */

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

/* ---- tuning overrides -------------------------------------------------------------------------- */

sk_status sk_tune_int(const char *var, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
  const char *v = sk_env_str(var);
  *out = def;
  if (!v) return SK_OK;
  char *end;
  errno = 0;
  const long long x = strtoll(v, &end, 10); /* decimal: "010" is ten, not eight */
  if (errno || end == v || *end || x < lo || x > hi)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s=%.64s: expected a whole number in [%lld, %lld]", var, v,
                        (long long)lo, (long long)hi);
  *out = x;
  return SK_OK;
}

sk_status sk_tune_flag(const char *var, int def, int *out) { return sk_env_flag(var, def, out); }

const char *sk_tune_str(const char *var) { return sk_env_str(var); }

/* ---- caps -------------------------------------------------------------------------------------- */

sk_status sk_caps_read(const sk_op_def *def, const void *caps, void *out) {
  const char *op = def->info.name;
  if (!caps) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: caps is NULL", op);
  size_t n;
  memcpy(&n, caps, sizeof n);
  if (n < def->caps_min_size || n > ((size_t)1 << 16))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "%s: caps struct_size is %zu, expected %zu; initialise caps with the op's SK_..._CAPS_INIT", op, n,
                        def->caps_size);
  if (n > def->caps_size) {
    /* From a newer header: the fields this library does not know must be left at zero. */
    for (size_t i = def->caps_size; i < n; i++)
      if (((const unsigned char *)caps)[i])
        return sk_set_error(SK_ERR_UNSUPPORTED,
                            "%s: caps set fields this library (ABI %d) does not know (struct_size %zu > %zu)", op,
                            SPARKINFER_ABI_VERSION, n, def->caps_size);
    n = def->caps_size;
  }
  memcpy(out, def->caps_defaults, def->caps_size);
  memcpy(out, caps, n);
  memcpy(out, &def->caps_size, sizeof(size_t));
  return SK_OK;
}

static const char **caps_arch_slot(const sk_op_def *def, void *caps) {
  return (const char **)((char *)caps + def->caps_arch_offset);
}

/* ---- plans ------------------------------------------------------------------------------------ */

static size_t total_rules(const sk_op_def *def) {
  size_t n = 0;
  for (size_t e = 0; e < def->num_entries; e++) n += def->entries[e].num_tensors;
  return n;
}

static sk_plan *plan_alloc(const sk_op_def *def) {
  sk_plan *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  const size_t rules = total_rules(def), slots = def->num_kernels ? def->num_kernels : 1;
  p->magic = PLAN_MAGIC;
  p->def = def;
  p->caps = calloc(1, def->caps_size);
  p->requests = calloc(slots, sizeof *p->requests);
  p->kernels = calloc(slots, sizeof *p->kernels);
  p->presence = calloc(rules ? rules : 1, sizeof *p->presence);
  p->dtypes = calloc(rules ? rules : 1, sizeof *p->dtypes);
  p->shapes = calloc(rules ? rules : 1, sizeof *p->shapes);
  p->dims = calloc(rules ? rules : 1, sizeof *p->dims);
  p->rule_base = calloc(def->num_entries ? def->num_entries : 1, sizeof *p->rule_base);
  p->state = calloc(1, def->plan_state_size ? def->plan_state_size : 1);
  if (!p->caps || !p->requests || !p->kernels || !p->presence || !p->dtypes || !p->shapes || !p->dims || !p->rule_base || !p->state) {
    sk_plan_destroy(p);
    return NULL;
  }
  size_t base = 0;
  for (size_t e = 0; e < def->num_entries; e++) {
    p->rule_base[e] = base;
    for (size_t t = 0; t < def->entries[e].num_tensors; t++) {
      p->presence[base + t] = def->entries[e].tensors[t].presence;
      p->dtypes[base + t] = def->entries[e].tensors[t].dtypes;
      p->shapes[base + t] = def->entries[e].tensors[t].shape;
    }
    base += def->entries[e].num_tensors;
  }
  return p;
}

SK_API void sk_plan_destroy(sk_plan *p) {
  if (!p) return;
  if (p->requests)
    for (size_t i = 0; i < (p->def->num_kernels ? p->def->num_kernels : 1); i++) {
      free(p->requests[i].source);
      free(p->requests[i].name);
      free(p->requests[i].params);
    }
  free(p->requests);
  free(p->kernels);
  free(p->presence);
  free(p->dtypes);
  free(p->shapes);
  free(p->dims);
  free(p->rule_base);
  free(p->caps);
  free(p->state);
  p->magic = 0;
  free(p);
}

sk_status sk_plan_set_kernel(sk_plan *p, size_t slot, const char *source, const char *name, const char *params) {
  if (slot >= p->def->num_kernels) return sk_set_error(SK_ERR_INTERNAL, "%s: kernel slot %zu out of range", p->def->info.name, slot);
  sk_plan_request *r = &p->requests[slot];
  free(r->source);
  free(r->name);
  free(r->params);
  r->source = strdup(source);
  r->name = strdup(name);
  r->params = strdup(params ? params : "");
  if (!r->source || !r->name || !r->params) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  return SK_OK;
}

void sk_plan_tensor_presence(sk_plan *p, size_t entry, size_t tensor, sk_tensor_presence presence) {
  p->presence[p->rule_base[entry] + tensor] = presence;
}

void sk_plan_tensor_dtypes(sk_plan *p, size_t entry, size_t tensor, uint32_t dtypes) {
  p->dtypes[p->rule_base[entry] + tensor] = dtypes;
}

void sk_plan_tensor_shape(sk_plan *p, size_t entry, size_t tensor, const char *shape) {
  p->shapes[p->rule_base[entry] + tensor] = shape;
  parse_rule(shape, p, &p->def->entries[entry], &p->dims[p->rule_base[entry] + tensor]);
}

/* The field table's rules on a C caps struct (what the JSON codec enforces on manifests): counts
 * and sizes in their ranges, enums among their values, flags 0 or 1. An op's check_caps then
 * states only the rules between fields. */
static sk_status caps_check_fields(const sk_op_def *def, const void *caps) {
  const char *op = def->info.name;
  for (size_t i = 0; def->caps_fields && i < def->num_caps_fields; i++) {
    const sk_caps_field *f = &def->caps_fields[i];
    const char *at = (const char *)caps + f->offset;
    switch (f->type) {
    case SK_CAPS_I64:
    case SK_CAPS_I32: {
      const int64_t v = f->type == SK_CAPS_I64 ? *(const int64_t *)(const void *)at : *(const int *)(const void *)at;
      if (v < f->lo || v > f->hi) {
        if (f->required && v == 0)
          return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: caps.%s is required (at least %lld), got 0", op, f->name,
                              (long long)f->lo);
        return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: caps.%s = %lld must be in [%lld, %lld]", op, f->name,
                            (long long)v, (long long)f->lo, (long long)f->hi);
      }
      break;
    }
    case SK_CAPS_BOOL: {
      const int v = *(const int *)(const void *)at;
      if (v != 0 && v != 1) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: caps.%s = %d must be 0 or 1", op, f->name, v);
      break;
    }
    case SK_CAPS_ENUM: {
      const int v = *(const int *)(const void *)at;
      bool known = false;
      for (int e = 0; e < f->count && !known; e++) known = (f->values ? f->values[e] : e) == v;
      if (!known) {
        char list[256];
        size_t used = 0;
        list[0] = 0;
        for (int e = 0; e < f->count && used < sizeof list; e++) {
          const int w = snprintf(list + used, sizeof list - used, "%s%s", e ? ", " : "", f->names[e]);
          if (w < 0) break;
          used += (size_t)w;
        }
        return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: caps.%s = %d is not one of its values (%s)", op, f->name, v, list);
      }
      break;
    }
    case SK_CAPS_F32: break;
    }
  }
  return SK_OK;
}

/* Caps read + arch + check + selection with `props` (NULL: the arch's, from the device or the
 * table). */
static sk_status plan_build(const sk_op_def *def, const void *caps, const sk_arch_props *props, bool caps_normalised,
                            sk_plan **out) {
  const char *op = def->info.name;
  *out = NULL;
  sk_plan *p = plan_alloc(def);
  if (!p) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  sk_status s = caps_normalised ? (memcpy(p->caps, caps, def->caps_size), SK_OK) : sk_caps_read(def, caps, p->caps);
  const char **arch_slot = caps_arch_slot(def, p->caps);
  if (s == SK_OK) s = plan_arch(op, props ? props->arch : *arch_slot, p->arch);
  if (s == SK_OK) *arch_slot = p->arch;
  if (s == SK_OK && !sk_op_def_supports(def, p->arch))
    s = sk_set_error(SK_ERR_UNSUPPORTED, "%s: arch %s is not supported (supported: %s)", op, p->arch, def->info.archs);
  if (s == SK_OK) s = caps_check_fields(def, p->caps);
  if (s == SK_OK && def->check_caps) s = def->check_caps(p->caps);
  if (s == SK_OK) {
    if (props) p->props = *props;
    else s = sk_arch_props_for(p->arch, &p->props);
  }
  if (s == SK_OK && def->select) s = def->select(p);
  if (s == SK_OK) parse_rules(p);
  if (s != SK_OK) {
    sk_plan_destroy(p);
    return s;
  }
  *out = p;
  return SK_OK;
}

sk_status sk_plan_select_only(const sk_op_def *def, const void *caps, const sk_arch_props *props, sk_plan **out) {
  if (!def || !out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_select_only: NULL argument");
  return plan_build(def, caps, props, false, out);
}

static sk_status plan_resolve_and_finish(sk_plan *p) {
  const char *op = p->def->info.name;
  for (size_t i = 0; i < p->def->num_kernels; i++) {
    const sk_plan_request *r = &p->requests[i];
    if (!r->name) continue;
    SK_TRY(sk_op_resolve(op, r->source, r->name, r->params, p->arch, &p->kernels[i]));
    void *fn = NULL;
    sk_kernel_get_info(p->kernels[i], &fn, NULL, NULL);
    if (!fn) p->offline = 1;
  }
  if (p->def->finish) SK_TRY(p->def->finish(p));
  cJSON *j = p->def->caps_fields ? sk_op_caps_to_json(p->def, p->caps) : NULL;
  if (j) {
    sk_warmup_note_op(op, j);
    cJSON_Delete(j);
  }
  return SK_OK;
}

SK_API sk_status sk_plan_create(const char *op, const void *caps, sk_plan **plan) {
  if (!plan) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_create: plan out-pointer is NULL");
  *plan = NULL;
  if (!op) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_create: op name is NULL");
  SK_TRY(sk_runtime_ensure_init());
  const sk_op_def *def = sk_find_op(op);
  if (!def) return sk_set_error(SK_ERR_NOT_FOUND, "no op named \"%.64s\" in this build (see sk_list_ops)", op);
  sk_plan *p;
  SK_TRY(plan_build(def, caps, NULL, false, &p));
  sk_status s = plan_resolve_and_finish(p);
  if (s != SK_OK) {
    sk_plan_destroy(p);
    return s;
  }
  *plan = p;
  return SK_OK;
}

SK_API sk_status sk_plan_create_json(const char *op, const char *caps_json, const char *arch, sk_plan **plan) {
  if (!plan) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_create_json: plan out-pointer is NULL");
  *plan = NULL;
  if (!op || !caps_json) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_create_json: NULL argument");
  SK_TRY(sk_runtime_ensure_init());
  const sk_op_def *def = sk_find_op(op);
  if (!def) return sk_set_error(SK_ERR_NOT_FOUND, "no op named \"%.64s\" in this build (see sk_list_ops)", op);
  if (!def->caps_fields) return sk_set_error(SK_ERR_UNSUPPORTED, "%s: takes no JSON caps", op);
  cJSON *j = cJSON_Parse(caps_json);
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: caps JSON is not an object", op);
  }
  void *caps = malloc(def->caps_size);
  char archbuf[SK_MAX_ARCH] = "";
  sk_status s = caps ? SK_OK : sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  if (s == SK_OK) {
    memcpy(caps, def->caps_defaults, def->caps_size);
    s = sk_op_caps_from_json(def, j, caps);
    if (s != SK_OK) s = sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: %s", op, sk_last_error_message());
  }
  const cJSON *ja = cJSON_GetObjectItemCaseSensitive(j, "arch");
  if (s == SK_OK && (arch || cJSON_IsString(ja))) {
    sk_strlcpy(archbuf, arch ? arch : ja->valuestring, sizeof archbuf);
    *caps_arch_slot(def, caps) = archbuf;
  }
  cJSON_Delete(j);
  sk_plan *p = NULL;
  if (s == SK_OK) s = plan_build(def, caps, NULL, false, &p);
  free(caps);
  if (s == SK_OK && (s = plan_resolve_and_finish(p)) != SK_OK) sk_plan_destroy(p);
  if (s == SK_OK) *plan = p;
  return s;
}

static bool plan_ok(const sk_plan *p) { return p && p->magic == PLAN_MAGIC; }

SK_API sk_status sk_plan_scratch_spec(const sk_plan *p, sk_scratch_spec *spec) {
  if (!plan_ok(p) || !spec) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_scratch_spec: NULL or invalid argument");
  *spec = sk_scratch_spec_of(&p->scratch);
  return SK_OK;
}

SK_API const char *sk_plan_op(const sk_plan *p) { return plan_ok(p) ? p->def->info.name : ""; }
SK_API const char *sk_plan_arch(const sk_plan *p) { return plan_ok(p) ? p->arch : ""; }

SK_API sk_status sk_plan_caps_json(const sk_plan *p, char *buf, size_t size, size_t *needed) {
  if (!plan_ok(p) || (!buf && size)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_caps_json: invalid argument");
  cJSON *j = sk_op_caps_to_json(p->def, p->caps);
  char *text = j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  if (!text) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  const size_t len = strlen(text);
  if (needed) *needed = len + 1;
  if (size) sk_strlcpy(buf, text, size);
  cJSON_free(text);
  return SK_OK;
}

SK_API size_t sk_plan_kernel_count(const sk_plan *p) { return plan_ok(p) ? p->def->num_kernels : 0; }

SK_API const struct sk_kernel *sk_plan_kernel(const sk_plan *p, size_t i) {
  return plan_ok(p) && i < p->def->num_kernels ? p->kernels[i] : NULL;
}

SK_API size_t sk_plan_entry_count(const sk_plan *p) { return plan_ok(p) ? p->def->num_entries : 0; }

SK_API const char *sk_plan_entry_name(const sk_plan *p, size_t i) {
  return plan_ok(p) && i < p->def->num_entries ? p->def->entries[i].name : NULL;
}

static sk_status find_entry(const sk_plan *p, const char *entry, size_t *out) {
  if (!entry) {
    *out = 0;
    return p->def->num_entries ? SK_OK : sk_set_error(SK_ERR_NOT_FOUND, "%s: has no entry points", p->def->info.name);
  }
  for (size_t e = 0; e < p->def->num_entries; e++)
    if (!strcmp(p->def->entries[e].name, entry)) {
      *out = e;
      return SK_OK;
    }
  char names[256] = "";
  for (size_t e = 0, used = 0; e < p->def->num_entries; e++) {
    int w = snprintf(names + used, sizeof names - used, "%s%s", e ? ", " : "", p->def->entries[e].name);
    if (w < 0 || (size_t)w >= sizeof names - used) break;
    used += (size_t)w;
  }
  return sk_set_error(SK_ERR_NOT_FOUND, "%s: no entry \"%.32s\" (entries: %s)", p->def->info.name, entry, names);
}

/* The dtype-mask strings sk_plan_tensor_info hands out (static, one per 6-bit mask). */
static char dtype_combo_text[64][64];
static pthread_once_t combo_once = PTHREAD_ONCE_INIT;
static void build_combos(void) {
  for (uint32_t m = 0; m < 64; m++) mask_names(m, dtype_combo_text[m], sizeof dtype_combo_text[m]);
}

SK_API sk_status sk_plan_tensor_count(const sk_plan *p, const char *entry, size_t *count) {
  if (!plan_ok(p) || !count) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_tensor_count: NULL argument");
  size_t e;
  SK_TRY(find_entry(p, entry, &e));
  *count = p->def->entries[e].num_tensors;
  return SK_OK;
}

SK_API sk_status sk_plan_tensor_info(const sk_plan *p, const char *entry, size_t index, sk_tensor_info *info) {
  if (!plan_ok(p) || !info) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_tensor_info: NULL argument");
  size_t e;
  SK_TRY(find_entry(p, entry, &e));
  const sk_op_entry *en = &p->def->entries[e];
  if (index >= en->num_tensors)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s (%s): tensor index %zu past the table (%zu tensors)", p->def->info.name,
                        en->name, index, en->num_tensors);
  const sk_tensor_rule *r = &en->tensors[index];
  pthread_once(&combo_once, build_combos);
  const uint32_t mask = p->dtypes[p->rule_base[e] + index];
  *info = (sk_tensor_info){r->name, p->shapes[p->rule_base[e] + index], dtype_combo_text[mask & 63], r->role, p->presence[p->rule_base[e] + index],
                           r->align, r->strided, r->doc ? r->doc : ""};
  return SK_OK;
}

SK_API sk_status sk_plan_symbol(const sk_plan *p, const char *name, int64_t *value) {
  if (!plan_ok(p) || !name || !value) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_plan_symbol: NULL argument");
  const sk_symbol *s = find_symbol(p->symbols, p->num_symbols, name);
  if (!s) return sk_set_error(SK_ERR_NOT_FOUND, "%s: no plan symbol %.32s", p->def->info.name, name);
  *value = s->value;
  return SK_OK;
}

/* ---- bindings --------------------------------------------------------------------------------- */

SK_API sk_status sk_binding_create(const sk_plan *p, const char *entry, sk_binding **out) {
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_binding_create: binding out-pointer is NULL");
  *out = NULL;
  if (!plan_ok(p)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_binding_create: plan is NULL or not a plan");
  size_t e;
  SK_TRY(find_entry(p, entry, &e));
  const size_t n = p->def->entries[e].num_tensors;
  sk_binding *b = calloc(1, sizeof *b);
  if (b) {
    b->data = calloc(n ? n : 1, sizeof *b->data);
    b->seen = calloc(n ? n : 1, sizeof *b->seen);
    b->state = calloc(1, p->def->binding_state_size ? p->def->binding_state_size : 1);
    b->sig = calloc(n ? n : 1, sizeof *b->sig);
  }
  if (!b || !b->data || !b->seen || !b->state || !b->sig) {
    sk_binding_destroy(b);
    return sk_set_error(SK_ERR_OUT_OF_MEMORY, "%s: out of memory", p->def->info.name);
  }
  b->magic = BINDING_MAGIC;
  b->plan = p;
  b->entry = e;
  b->num_tensors = n;
  *out = b;
  return SK_OK;
}

void sk_binding_local(sk_binding *b, const sk_plan *p, size_t entry, void **data, const DLTensor **seen, void *state) {
  memset(b, 0, sizeof *b);
  b->magic = BINDING_MAGIC;
  b->plan = p;
  b->entry = entry;
  b->num_tensors = p->def->entries[entry].num_tensors;
  b->data = data;
  b->seen = seen;
  b->state = state;
}

SK_API void sk_binding_destroy(sk_binding *b) {
  if (!b) return;
  free(b->data);
  free(b->seen);
  free(b->state);
  free(b->sig);
  b->magic = 0;
  free(b);
}

/* "op bind" or "op bind (entry)" */
static void bind_prefix(const sk_binding *b, char *buf, size_t n) {
  const sk_op_def *d = b->plan->def;
  if (d->num_entries > 1) snprintf(buf, n, "%s bind (%s)", d->info.name, d->entries[b->entry].name);
  else snprintf(buf, n, "%s bind", d->info.name);
}

sk_status sk_bind_error(const sk_binding *b, const char *fmt, ...) {
  char prefix[96], msg[512];
  bind_prefix(b, prefix, sizeof prefix);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: %s", prefix, msg);
}

sk_status sk_binding_scratch_word(const sk_binding *b, const char *group, size_t offset, void *stream, const char *who,
                                  uint32_t *out) {
  if (!b || !out || !b->bound || strncmp(b->plan->def->info.name, group, strlen(group)) || !b->scratch[0])
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: not a bound %s binding with its scratch", who, group);
  SK_TRY(sk_driver_ensure());
  if (!sk_cu.cuStreamSynchronize || !sk_cu.cuMemcpyDtoH)
    return sk_set_error(SK_ERR_NO_DRIVER, "%s: the driver lacks cuStreamSynchronize / cuMemcpyDtoH", who);
  SK_TRY(sk_driver_ensure_context());
  SK_CU(sk_cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
  uint32_t word = 0;
  SK_CU(sk_cu.cuMemcpyDtoH(&word, (unsigned long long)(uintptr_t)((char *)b->scratch[0] + offset), 4), "cuMemcpyDtoH");
  *out = word;
  return SK_OK;
}

static sk_status tensor_error(const sk_binding *b, const sk_tensor_rule *r, const char *fmt, ...) SK_PRINTF(3, 4);
static sk_status tensor_error(const sk_binding *b, const sk_tensor_rule *r, const char *fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const sk_plan *p = b->plan;
  const size_t i = (size_t)(r - p->def->entries[b->entry].tensors);
  return sk_bind_error(b, "tensor %s %s: %s", r->name, p->shapes[p->rule_base[b->entry] + i], msg);
}

/* Pass 1: presence, device, dtype, rank, extents; bind the entry's free symbols. */
static sk_status check_basic(sk_binding *b, size_t i, const DLTensor *t, dim_span *dims, int *ndims) {
  const sk_plan *p = b->plan;
  const sk_op_entry *en = &p->def->entries[b->entry];
  const sk_tensor_rule *r = &en->tensors[i];
  const sk_tensor_presence presence = p->presence[p->rule_base[b->entry] + i];
  if (!t) {
    if (presence == SK_TENSOR_REQUIRED) return tensor_error(b, r, "is required, got NULL");
    return SK_OK;
  }
  if (presence == SK_TENSOR_UNUSED) return tensor_error(b, r, "this plan does not take it (its caps); pass NULL");
  if (!t->data) return tensor_error(b, r, "has a NULL data pointer");
  if (t->device.device_type != kDLCUDA)
    return tensor_error(b, r, "must be CUDA device memory (kDLCUDA), got device type %d", (int)t->device.device_type);
  char want[96], got[32];
  const uint32_t mask = p->dtypes[p->rule_base[b->entry] + i];
  if (!(dtype_bit(t->dtype) & mask))
    return tensor_error(b, r, "must be %s, got %s", mask_names(mask, want, sizeof want), dl_name(t->dtype, got, sizeof got));
  if (r->dtype_like) {
    const DLTensor *o = b->seen[r->dtype_like - 1];
    if (o && (o->dtype.code != t->dtype.code || o->dtype.bits != t->dtype.bits))
      return tensor_error(b, r, "must have the dtype of %s (%s), got %s", en->tensors[r->dtype_like - 1].name,
                          dl_name(o->dtype, want, sizeof want), dl_name(t->dtype, got, sizeof got));
  }
  const struct sk_rule_dims *rd = &p->dims[p->rule_base[b->entry] + i];
  *ndims = rd->n;
  if (*ndims < 0)
    return sk_set_error(SK_ERR_INTERNAL, "%s: bad shape rule %s for %s", p->def->info.name,
                        p->shapes[p->rule_base[b->entry] + i], r->name);
  memcpy(dims, rd->d, sizeof(dim_span) * (size_t)*ndims);
  if (t->ndim != *ndims) return tensor_error(b, r, "must have %d dimensions, got %d", *ndims, t->ndim);
  if (!t->shape) return tensor_error(b, r, "has no shape");
  unsigned __int128 elems = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0) return tensor_error(b, r, "has negative extent %lld in dim %d", (long long)t->shape[d], d);
    elems *= (unsigned __int128)t->shape[d];
    if (elems > ((unsigned __int128)1 << 56)) return tensor_error(b, r, "is too large (its size overflows)");
  }
  for (int d = 0; d < *ndims; d++)
    if (rd->sym[d] >= 0 && !find_symbol(b->symbols, b->num_symbols, en->symbols[rd->sym[d]].name))
      SK_TRY(put_symbol(b->symbols, &b->num_symbols, en->symbols[rd->sym[d]].name, t->shape[d] - rd->value[d]));
  return SK_OK;
}

/* Pass 3: every dim against its expression, strides, alignment. */
static sk_status check_dims(sk_binding *b, size_t i, const DLTensor *t, const dim_span *dims, int ndims) {
  const sk_tensor_rule *r = &b->plan->def->entries[b->entry].tensors[i];
  const struct sk_rule_dims *rd = &b->plan->dims[b->plan->rule_base[b->entry] + i];
  for (int d = 0; d < ndims; d++) {
    if (rd->kind[d] == DIM_ANY) continue;
    int64_t want = rd->value[d];
    if (rd->kind[d] == DIM_EXPR) SK_TRY(eval_span(dims[d].s, dims[d].len, b->symbols, b->num_symbols, &want));
    if (t->shape[d] != want) {
      if (rd->kind[d] == DIM_LITERAL) return tensor_error(b, r, "dim %d must be %lld, got %lld", d, (long long)want, (long long)t->shape[d]);
      return tensor_error(b, r, "dim %d must be %.*s = %lld, got %lld", d, (int)dims[d].len, dims[d].s, (long long)want,
                          (long long)t->shape[d]);
    }
  }
  if (r->strided != SK_STRIDES_ANY && t->strides) {
    const int free_dims = r->strided < t->ndim ? r->strided : t->ndim;
    int64_t inner = 1; /* the extent of the dims inside dim d */
    for (int d = t->ndim - 1; d >= free_dims; d--) {
      if (t->shape[d] != 1 && t->strides[d] != inner)
        return tensor_error(b, r, "must be contiguous row-major%s: dim %d has stride %lld, expected %lld",
                            free_dims ? " inside its strided dims" : "", d, (long long)t->strides[d], (long long)inner);
      inner *= t->shape[d];
    }
    for (int d = free_dims - 1; d >= 0; d--) {
      if (t->shape[d] == 1) continue;
      if (t->strides[d] < inner)
        return tensor_error(b, r, "dim %d has stride %lld: its entries would overlap (at least %lld)", d,
                            (long long)t->strides[d], (long long)inner);
      inner = t->strides[d] * t->shape[d];
    }
  }
  char *ptr = (char *)t->data + t->byte_offset;
  if (r->align > 1 && ((uintptr_t)ptr % r->align) != 0)
    return tensor_error(b, r, "data (%p + byte_offset %llu) must be %u-byte aligned", t->data,
                        (unsigned long long)t->byte_offset, r->align);
  b->data[i] = ptr;
  return SK_OK;
}

static sk_status bind_scratch(sk_binding *b, void *scratch, size_t bytes) {
  const sk_scratch_layout *l = &b->plan->scratch;
  for (int i = 0; i < SK_MAX_SCRATCH_REGIONS; i++) b->scratch[i] = NULL;
  b->scratch_base = scratch;
  b->scratch_bytes = scratch ? bytes : 0;
  if (l->total == 0) return SK_OK;
  const size_t needed = sk_scratch_spec_of(l).bytes;
  if (b->plan->scratch_optional &&
      (!scratch || bytes < needed || (uintptr_t)scratch % SK_SCRATCH_BASE_ALIGN))
    return SK_OK; /* the op runs without it */
  if (!scratch) return sk_bind_error(b, "scratch is NULL; the plan needs %zu bytes (sk_plan_scratch_spec)", needed);
  if ((uintptr_t)scratch % SK_SCRATCH_BASE_ALIGN)
    return sk_bind_error(b, "scratch %p must be %u-byte aligned", scratch, SK_SCRATCH_BASE_ALIGN);
  const size_t skip = (size_t)(-(uintptr_t)scratch & (SK_SCRATCH_ALIGN - 1));
  if (bytes < needed || bytes - skip < l->total)
    return sk_bind_error(b, "scratch has %zu bytes, the plan needs %zu (sk_plan_scratch_spec)", bytes, needed);
  for (int i = 0; i < l->count; i++) b->scratch[i] = (char *)scratch + skip + l->offset[i];
  return SK_OK;
}

static sk_status bind_all(sk_binding *b, const DLTensor *const *tensors, size_t n, void *scratch, size_t bytes) {
  const sk_plan *p = b->plan;
  const sk_op_entry *en = &p->def->entries[b->entry];
  if (n != en->num_tensors)
    return sk_bind_error(b, "got %zu tensors, the entry takes %zu (sk_plan_tensor_info lists them)", n, en->num_tensors);
  if (n && !tensors) return sk_bind_error(b, "the tensor array is NULL");
  b->num_symbols = 0;
  for (int i = 0; i < p->num_symbols; i++) b->symbols[b->num_symbols++] = p->symbols[i];
  const int plan_syms = b->num_symbols;
  dim_span dims[16][8];
  int ndims[16] = {0};
  if (n > 16) return sk_set_error(SK_ERR_INTERNAL, "%s: more than 16 tensors in an entry", p->def->info.name);
  for (size_t i = 0; i < n; i++) {
    b->seen[i] = tensors[i];
    b->data[i] = NULL;
  }
  for (size_t i = 0; i < n; i++) SK_TRY(check_basic(b, i, tensors[i], dims[i], &ndims[i]));
  for (size_t s = 0; s < en->num_symbols; s++) {
    const sk_symbol_rule *sr = &en->symbols[s];
    const sk_symbol *v = find_symbol(b->symbols + plan_syms, b->num_symbols - plan_syms, sr->name);
    if (!v) return sk_bind_error(b, "no tensor given fixes %s", sr->name);
    int64_t lo, hi;
    SK_TRY(sk_shape_eval(sr->lo, b->symbols, b->num_symbols, &lo));
    SK_TRY(sk_shape_eval(sr->hi, b->symbols, b->num_symbols, &hi));
    if (v->value < lo || v->value > hi) {
      const sk_tensor_rule *who = NULL;
      for (size_t i = 0; i < n && !who; i++)
        for (int d = 0; tensors[i] && d < ndims[i]; d++) {
          int64_t offset;
          if (binds_symbol(&dims[i][d], sr->name, &offset)) who = &en->tensors[i];
        }
      return sk_bind_error(b, "%s%s%s%s = %lld must be in [%s, %s] = [%lld, %lld] for this plan", who ? "tensor " : "",
                           who ? who->name : "", who ? ": its dim " : "", sr->name, (long long)v->value, sr->lo, sr->hi,
                           (long long)lo, (long long)hi);
    }
  }
  for (size_t i = 0; i < n; i++)
    if (tensors[i]) SK_TRY(check_dims(b, i, tensors[i], dims[i], ndims[i]));
  SK_TRY(bind_scratch(b, scratch, bytes));
  memset(b->state, 0, p->def->binding_state_size ? p->def->binding_state_size : 1);
  b->sig_symbols = b->num_symbols;
  if (p->def->bind) SK_TRY(p->def->bind(b));
  return SK_OK;
}

/* ---- rebinding the same layouts ------------------------------------------------------------------
 * A serving loop binds the same shapes every step with new pointers. A binding made by
 * sk_binding_create remembers the layouts of its last successful bind; a bind whose tensors have
 * the same presence, dtype, device, shape and strides only checks the pointers (non-NULL,
 * aligned) and the scratch, then runs the op's bind. Anything else, or any check failing there,
 * takes the full validation, which writes the message. */

static void sig_record(sk_binding *b, const DLTensor *const *tensors) {
  for (size_t i = 0; i < b->num_tensors; i++) {
    struct sk_bind_sig *g = &b->sig[i];
    const DLTensor *t = tensors[i];
    g->present = t != NULL;
    if (!t) continue;
    if (t->ndim > 8) { /* cannot be: the rules have at most 8 dims */
      b->sig_valid = 0;
      return;
    }
    g->ndim = (uint8_t)t->ndim, g->code = t->dtype.code, g->bits = t->dtype.bits, g->lanes = t->dtype.lanes;
    g->has_strides = t->strides != NULL;
    g->dev_type = (int32_t)t->device.device_type, g->dev_id = t->device.device_id;
    memcpy(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    if (t->strides) memcpy(g->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  }
  b->sig_valid = 1;
}

static bool sig_matches(const sk_binding *b, const DLTensor *const *tensors, size_t n) {
  if (!b->sig || !b->sig_valid || n != b->num_tensors || (n && !tensors)) return false;
  for (size_t i = 0; i < n; i++) {
    const struct sk_bind_sig *g = &b->sig[i];
    const DLTensor *t = tensors[i];
    if (!t) {
      if (g->present) return false;
      continue;
    }
    if (!g->present || t->ndim != g->ndim || t->dtype.code != g->code || t->dtype.bits != g->bits ||
        t->dtype.lanes != g->lanes || (int32_t)t->device.device_type != g->dev_type || t->device.device_id != g->dev_id ||
        (t->strides != NULL) != g->has_strides || !t->shape)
      return false;
    for (int d = 0; d < t->ndim; d++)
      if (t->shape[d] != g->shape[d] || (t->strides && t->strides[d] != g->strides[d])) return false;
  }
  return true;
}

/* SK_OK: bound; SK_ERR_NOT_FOUND: take the full path (nothing reported). */
static sk_status bind_fast(sk_binding *b, const DLTensor *const *tensors, size_t n, void *scratch, size_t bytes) {
  const sk_plan *p = b->plan;
  const sk_op_entry *en = &p->def->entries[b->entry];
  for (size_t i = 0; i < n; i++) {
    const DLTensor *t = tensors[i];
    b->seen[i] = t;
    b->data[i] = NULL;
    if (!t) continue;
    char *ptr = (char *)t->data + t->byte_offset;
    if (!t->data || (en->tensors[i].align > 1 && (uintptr_t)ptr % en->tensors[i].align)) return SK_ERR_NOT_FOUND;
    b->data[i] = ptr;
  }
  if (bind_scratch(b, scratch, bytes) != SK_OK) return SK_ERR_NOT_FOUND;
  memset(b->state, 0, p->def->binding_state_size ? p->def->binding_state_size : 1);
  b->num_symbols = b->sig_symbols;
  return p->def->bind ? p->def->bind(b) : SK_OK;
}

SK_API sk_status sk_bind(sk_binding *b, const DLTensor *const *tensors, size_t n, void *scratch, size_t bytes) {
  if (!b || b->magic != BINDING_MAGIC) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_bind: binding is NULL or not a binding");
  b->bound = 0;
  sk_status s = sig_matches(b, tensors, n) ? bind_fast(b, tensors, n, scratch, bytes) : SK_ERR_NOT_FOUND;
  if (s == SK_ERR_NOT_FOUND) {
    s = bind_all(b, tensors, n, scratch, bytes);
    if (s == SK_OK && b->sig) sig_record(b, tensors);
  }
  for (size_t i = 0; i < b->num_tensors; i++) b->seen[i] = NULL;
  if (s == SK_OK) b->bound = 1;
  else b->sig_valid = 0;
  return s;
}

SK_API sk_status sk_binding_symbol(const sk_binding *b, const char *name, int64_t *value) {
  if (!b || b->magic != BINDING_MAGIC || !name || !value)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_binding_symbol: NULL or invalid argument");
  const sk_symbol *s = b->bound ? find_symbol(b->symbols, b->num_symbols, name) : NULL;
  if (!s) s = find_symbol(b->plan->symbols, b->plan->num_symbols, name);
  if (!s) return sk_set_error(SK_ERR_NOT_FOUND, "%s: no symbol %.32s", b->plan->def->info.name, name);
  *value = s->value;
  return SK_OK;
}

SK_API sk_status sk_run(const sk_binding *b, void *stream) {
  if (SK_UNLIKELY(!b || b->magic != BINDING_MAGIC))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_run: binding is NULL or not a binding");
  if (SK_UNLIKELY(!b->bound))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s run: the binding is not bound (sk_bind failed or was not called)",
                        b->plan->def->info.name);
  if (SK_UNLIKELY(b->plan->offline))
    return sk_set_error(SK_ERR_NO_DEVICE, "%s run: the plan is offline (made for %s without a GPU): nothing is loaded",
                        b->plan->def->info.name, b->plan->arch);
  return b->plan->def->run(b, stream);
}

/* ---- manifests -------------------------------------------------------------------------------- */

/* The kernel requests of op entry {"op", "caps"} for `arch`: the union of the selections for
 * every device the arch table lists (a prebuilt cache then serves each of them). */
sk_status sk_op_build_requests(const sk_op_def *def, const cJSON *caps_json, const char *arch, sk_request_list *out) {
  if (!def->caps_fields) return sk_set_error(SK_ERR_MANIFEST, "this op has no manifest builder");
  void *caps = malloc(def->caps_size);
  if (!caps) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  memcpy(caps, def->caps_defaults, def->caps_size);
  sk_status s = sk_op_caps_from_json(def, caps_json, caps);
  if (s != SK_OK && s != SK_ERR_MANIFEST) s = sk_set_error(SK_ERR_MANIFEST, "%s", sk_last_error_message());
  sk_arch_props devices[8];
  const size_t nd = sk_arch_table_devices(arch, devices, 8);
  const size_t first = out->count;
  for (size_t d = 0; s == SK_OK && d < nd; d++) {
    *caps_arch_slot(def, caps) = NULL;
    sk_plan *p = NULL;
    s = plan_build(def, caps, &devices[d], false, &p);
    if (s != SK_OK) {
      if (s != SK_ERR_UNSUPPORTED && s != SK_ERR_MANIFEST) s = sk_set_error(SK_ERR_MANIFEST, "caps: %s", sk_last_error_message());
      break;
    }
    for (size_t k = 0; s == SK_OK && k < def->num_kernels; k++) {
      const sk_plan_request *r = &p->requests[k];
      if (!r->name) continue;
      bool dup = false;
      for (size_t i = first; i < out->count && !dup; i++)
        dup = !strcmp(out->items[i].name_expr, r->name) && !strcmp(out->items[i].source, r->source);
      if (dup) continue;
      sk_kernel_request req = {def->info.name, r->source, r->name, r->params, arch, NULL, 0, 0};
      s = sk_request_list_add(out, &req);
    }
    sk_plan_destroy(p);
  }
  free(caps);
  return s;
}

/* ---- JSON caps helpers ------------------------------------------------------------------------- */

static sk_status json_int(const cJSON *j, const char *field, int64_t lo, int64_t hi, bool required, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!v) return required ? sk_set_error(SK_ERR_MANIFEST, "caps.%s: required", field) : SK_OK;
  if (!cJSON_IsNumber(v)) return sk_set_error(SK_ERR_MANIFEST, "caps.%s: expected a number", field);
  const double d = v->valuedouble;
  if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
    return sk_set_error(SK_ERR_MANIFEST, "caps.%s: expected a whole number in [%lld, %lld], got %g", field, (long long)lo,
                        (long long)hi, d);
  *out = (int64_t)d;
  return SK_OK;
}

static sk_status json_enum(const cJSON *j, const char *field, const char *const *names, int n, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!v) return SK_OK;
  if (cJSON_IsString(v))
    for (int i = 0; i < n; i++)
      if (names[i] && !strcmp(v->valuestring, names[i])) {
        *out = i;
        return SK_OK;
      }
  char list[256] = "";
  for (int i = 0, used = 0; i < n; i++) {
    if (!names[i]) continue;
    int w = snprintf(list + used, sizeof list - (size_t)used, "%s\"%s\"", used ? ", " : "", names[i]);
    if (w < 0 || (size_t)w >= sizeof list - (size_t)used) break;
    used += w;
  }
  return sk_set_error(SK_ERR_MANIFEST, "caps.%s: expected one of %s", field, list);
}

static sk_status json_float(const cJSON *j, const char *field, float *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!v) return SK_OK;
  if (!cJSON_IsNumber(v)) return sk_set_error(SK_ERR_MANIFEST, "caps.%s: expected a number", field);
  *out = (float)v->valuedouble;
  return SK_OK;
}

static sk_status json_bool(const cJSON *j, const char *field, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!v) return SK_OK;
  if (!cJSON_IsBool(v)) return sk_set_error(SK_ERR_MANIFEST, "caps.%s: expected true or false", field);
  *out = cJSON_IsTrue(v);
  return SK_OK;
}

static bool caps_field_known(const sk_op_def *def, const char *name) {
  if (!strcmp(name, "arch")) return true;
  for (size_t i = 0; i < def->num_caps_fields; i++)
    if (!strcmp(def->caps_fields[i].name, name)) return true;
  return false;
}

sk_status sk_op_caps_from_json(const sk_op_def *def, const cJSON *j, void *caps) {
  if (!def->caps_fields) return sk_set_error(SK_ERR_MANIFEST, "%s takes no JSON caps", def->info.name);
  if (!cJSON_IsObject(j)) return sk_set_error(SK_ERR_MANIFEST, "caps: expected an object");
  const cJSON *c;
  cJSON_ArrayForEach(c, j) {
    if (!c->string || !caps_field_known(def, c->string))
      return sk_set_error(SK_ERR_MANIFEST, "caps: unknown field \"%.64s\"", c->string ? c->string : "?");
  }
  for (size_t i = 0; i < def->num_caps_fields; i++) {
    const sk_caps_field *f = &def->caps_fields[i];
    char *at = (char *)caps + f->offset;
    switch (f->type) {
    case SK_CAPS_I64:
      SK_TRY(json_int(j, f->name, f->lo, f->hi, f->required, (int64_t *)(void *)at));
      break;
    case SK_CAPS_I32: {
      int64_t v = *(int *)(void *)at;
      SK_TRY(json_int(j, f->name, f->lo, f->hi, f->required, &v));
      *(int *)(void *)at = (int)v;
      break;
    }
    case SK_CAPS_BOOL: SK_TRY(json_bool(j, f->name, (int *)(void *)at)); break;
    case SK_CAPS_F32: SK_TRY(json_float(j, f->name, (float *)(void *)at)); break;
    case SK_CAPS_ENUM: {
      int idx = -1;
      SK_TRY(json_enum(j, f->name, f->names, f->count, &idx));
      if (idx >= 0) *(int *)(void *)at = f->values ? f->values[idx] : idx;
      break;
    }
    }
  }
  return SK_OK;
}

cJSON *sk_op_caps_to_json(const sk_op_def *def, const void *caps) {
  cJSON *j = cJSON_CreateObject();
  for (size_t i = 0; j && i < def->num_caps_fields; i++) {
    const sk_caps_field *f = &def->caps_fields[i];
    const char *at = (const char *)caps + f->offset;
    cJSON *v = NULL;
    switch (f->type) {
    case SK_CAPS_I64: v = cJSON_CreateNumber((double)*(const int64_t *)(const void *)at); break;
    case SK_CAPS_I32: v = cJSON_CreateNumber(*(const int *)(const void *)at); break;
    case SK_CAPS_BOOL: v = cJSON_CreateBool(*(const int *)(const void *)at); break;
    case SK_CAPS_F32: v = cJSON_CreateNumber(*(const float *)(const void *)at); break;
    case SK_CAPS_ENUM: {
      const int x = *(const int *)(const void *)at;
      for (int e = 0; e < f->count && !v; e++)
        if ((f->values ? f->values[e] : e) == x) v = cJSON_CreateString(f->names[e]);
      if (!v) v = cJSON_CreateNumber(x); /* not a value of the table: refused when read back */
      break;
    }
    }
    if (!v || !cJSON_AddItemToObject(j, f->name, v)) {
      cJSON_Delete(v);
      cJSON_Delete(j);
      j = NULL;
    }
  }
  return j;
}
