/* ops/comm/pcie.c - comm.pcie as an op (sparkinfer/comm.h): the tensor tables of its three
 * entries, the caps (a communicator, or none for offline plans), the kernel selection by world
 * size and wire mode, bind (the ring program of this rank is fixed here), run (launches, copies), and
 * the direct calls (sk_comm_allreduce, ...), which bind and run the communicator's own bindings. The
 * communicator itself: comm.c; kernels: oneshot.cuh, ring.cuh; contract: comm.md. */
#include <math.h>
#include <string.h>

#include "comm/comm_host.h"
#include "comm/layout.cuh"
#include "comm/ring_plan.h"
#include "op.h"

#define OP "comm.pcie"

enum { E_ALLREDUCE, E_RMSNORM, E_RING };
enum { K_ALLREDUCE, K_RMSNORM, K_SIGNAL, K_END, K_ADD, K_STORE_BF16, K_STORE, K_ENCODE, K_HOP, K_ACCUM, K_COUNT };

static const sk_tensor_rule allreduce_tensors[] = {
    {"in", "[N]", SK_DT_BF16, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "this rank's values"},
    {"out", "[N]", SK_DT_BF16, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 16, 0, 0, "the sum over the ranks (may alias in)"},
};
static const sk_tensor_rule rmsnorm_tensors[] = {
    {"x", "[M, H]", SK_DT_BF16, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "this rank's partial rows"},
    {"residual", "[M, H]", SK_DT_BF16, SK_TENSOR_INOUT, SK_TENSOR_REQUIRED, 16, 0, 0, "residual in; y = sum + residual out"},
    {"weight", "[H]", SK_DT_BF16, SK_TENSOR_IN, SK_TENSOR_REQUIRED, 16, 0, 0, "RMSNorm weight"},
    {"out", "[M, H]", SK_DT_BF16, SK_TENSOR_OUT, SK_TENSOR_REQUIRED, 16, 0, 0, "rmsnorm(y) * weight"},
};
static const sk_symbol_rule n_symbol[] = {{"N", "8", "MAX_N"}};
static const sk_symbol_rule mh_symbols[] = {{"M", "1", "MAX_N / 8"}, {"H", "8", "16384"}};
static const sk_op_entry entries[] = {
    {"allreduce", allreduce_tensors, 2, n_symbol, 1},
    {"add_rmsnorm", rmsnorm_tensors, 4, mh_symbols, 2},
    {"ring", allreduce_tensors, 2, n_symbol, 1},
};

/* ---- caps ------------------------------------------------------------------------------------ */

static const sk_comm_caps caps_defaults = SK_COMM_CAPS_INIT;
static const char *const codec_names[] = {"bf16", "e4m3", "int8", "mxfp8"};
static const char *const topology_names[] = {"ag", "ring", "a2a"};
static const sk_caps_field caps_fields[] = {
    SK_CAPS_INT(sk_comm_caps, world_size, 0, SK_COMM_MAX_RANKS, true),
    SK_CAPS_INT64(sk_comm_caps, max_bytes, 0, (int64_t)SK_COMM_MAX_BYTES_LIMIT, false),
    SK_CAPS_ENUM(sk_comm_caps, codec, codec_names, NULL),
    SK_CAPS_ENUM(sk_comm_caps, topology, topology_names, NULL),
    SK_CAPS_FLOAT(sk_comm_caps, eps),
};

static sk_status check_caps(void *v) {
  sk_comm_caps *c = v;
  const sk_comm *comm = c->comm;
  if (comm) {
    if (c->world_size == 0) c->world_size = comm->cfg.world_size;
    if (c->max_bytes == 0) c->max_bytes = (int64_t)comm->cfg.max_bytes;
    if (c->world_size != comm->cfg.world_size)
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": caps.world_size %d, the communicator's is %d", c->world_size,
                          comm->cfg.world_size);
    if ((uint64_t)c->max_bytes > comm->cfg.max_bytes)
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": caps.max_bytes %lld exceeds the communicator's %zu", (long long)c->max_bytes,
                          comm->cfg.max_bytes);
  }
  if (c->max_bytes == 0) c->max_bytes = (int64_t)SK_COMM_DEFAULT_MAX_BYTES;
  if (c->world_size < 2)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": caps.world_size %d (2..%d; 0 takes caps.comm's)", c->world_size, SK_COMM_MAX_RANKS);
  if (c->max_bytes < 16 || c->max_bytes % 16)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": caps.max_bytes %lld (a multiple of 16)", (long long)c->max_bytes);
  if (!(c->eps > 0.0f) || !isfinite(c->eps))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, OP ": caps.eps %g must be finite and > 0", (double)c->eps);
  return SK_OK;
}

/* ---- selection ------------------------------------------------------------------------------- */

static sk_status kernel(sk_plan *p, size_t slot, const char *source, const char *fmt, int arg, const char *params_fmt) {
  char name[64], params[32];
  snprintf(name, sizeof name, fmt, arg);
  snprintf(params, sizeof params, params_fmt, arg);
  return sk_plan_set_kernel(p, slot, source, name, params);
}

static sk_status select_kernels(sk_plan *p) {
  const sk_comm_caps *c = SK_PLAN_CAPS(p, sk_comm_caps);
  const int w = c->world_size, k = (int)c->codec;
  SK_TRY(kernel(p, K_ALLREDUCE, "comm/oneshot.cuh", "sk_comm::allreduce<%d>", w, "world=%d"));
  SK_TRY(kernel(p, K_RMSNORM, "comm/oneshot.cuh", "sk_comm::add_rmsnorm<%d>", w, "world=%d"));
  SK_TRY(kernel(p, K_SIGNAL, "comm/ring.cuh", "sk_comm::ring_signal", 0, "ring"));
  SK_TRY(kernel(p, K_END, "comm/ring.cuh", "sk_comm::ring_end", 0, "ring"));
  SK_TRY(kernel(p, K_ADD, "comm/ring.cuh", "sk_comm::ring_add", 0, "ring"));
  SK_TRY(kernel(p, K_STORE_BF16, "comm/ring.cuh", "sk_comm::ring_store<%d>", 0, "codec=%d"));
  if (k != SK_COMM_CODEC_BF16) { /* the coded kernels of the plan's codec (a ring program uses BF16 and that one) */
    SK_TRY(kernel(p, K_STORE, "comm/ring.cuh", "sk_comm::ring_store<%d>", k, "codec=%d"));
    SK_TRY(kernel(p, K_ENCODE, "comm/ring.cuh", "sk_comm::ring_encode<%d>", k, "codec=%d"));
    SK_TRY(kernel(p, K_HOP, "comm/ring.cuh", "sk_comm::ring_hop<%d>", k, "codec=%d"));
    SK_TRY(kernel(p, K_ACCUM, "comm/ring.cuh", "sk_comm::ring_accum<%d>", k, "codec=%d"));
  }
  SK_TRY(sk_plan_set_symbol(p, "MAX_N", c->max_bytes / 2));
  return sk_plan_set_symbol(p, "WORLD", w);
}

/* ---- bind --------------------------------------------------------------------------------------- */

typedef struct comm_bound {
  int64_t n;           /* allreduce / ring: values; add_rmsnorm: M * H */
  int rows, h8;        /* add_rmsnorm */
  float eps;           /* add_rmsnorm: caps.eps (a direct call sets its own) */
  sk_ring_plan ring;   /* ring: the program's plan (mode after the fallback rule, layout) */
  int count;           /* ring on a communicator: this rank's program, fixed by the shapes */
  sk_ring_op ops[SK_RING_MAX_OPS];
} comm_bound;

static sk_status bind(sk_binding *b) {
  const sk_comm_caps *c = SK_PLAN_CAPS(b->plan, sk_comm_caps);
  comm_bound *s = SK_BINDING_STATE(b, comm_bound);
  memset(s, 0, sizeof *s);
  s->eps = c->eps;
  if (b->entry == E_RMSNORM) {
    const int64_t m = sk_binding_get_symbol(b, "M"), h = sk_binding_get_symbol(b, "H");
    if (h % 8) return sk_bind_error(b, "H = %lld must be a multiple of 8", (long long)h);
    if (m * h > c->max_bytes / 2)
      return sk_bind_error(b, "M x H = %lld values exceed caps.max_bytes %lld / 2", (long long)(m * h), (long long)c->max_bytes);
    s->n = m * h, s->rows = (int)m, s->h8 = (int)(h / 8);
    return SK_OK;
  }
  s->n = sk_binding_get_symbol(b, "N");
  if (s->n % 8) return sk_bind_error(b, "N = %lld must be a multiple of 8 (16-byte rows of bf16)", (long long)s->n);
  if (b->entry == E_RING) {
    /* the communicator's buffer layout when there is one, else the caps' bound */
    const size_t layout_bytes = c->comm ? c->comm->cfg.max_bytes : (size_t)c->max_bytes;
    sk_status st = sk_ring_plan_make(c->world_size, layout_bytes, s->n, c->codec, c->topology, &s->ring);
    if (st != SK_OK) return sk_bind_error(b, "%s", sk_last_error_message());
    if (c->comm) s->count = sk_ring_program(&s->ring, c->comm->cfg.rank, s->ops);
  }
  return SK_OK;
}

/* ---- run ---------------------------------------------------------------------------------------- */

static void *ptr(const sk_binding *b, size_t i) { return b->data[i]; }

static sk_status launch(const sk_kernel *k, sk_dim3 grid, sk_dim3 block, void *stream, void **args) {
  return sk_kernel_launch(k, grid, block, 0, stream, args);
}

static unsigned long long ring_addr(const sk_comm *c, const sk_ring_plan *p, sk_ring_ref r, void *in, void *out) {
  switch (r.space) {
  case SK_RING_IN: return (unsigned long long)(uintptr_t)in + r.offset;
  case SK_RING_OUT: return (unsigned long long)(uintptr_t)out + r.offset;
  case SK_RING_RECV: return c->peer[r.rank] + p->recv_offset + r.offset;
  default: return c->buf + p->stage_offset + r.offset;
  }
}

/* One op of the ring program: a copy-engine copy or a small kernel (ring.cuh's contracts). */
static sk_status ring_issue(const sk_plan *pl, const sk_comm *c, const sk_ring_plan *p, const sk_ring_op *o, void *in, void *out,
                            void *stream) {
  unsigned long long own = c->buf, timeout_ns = (unsigned long long)(c->cfg.timeout_s * 1e9), values = (unsigned long long)o->values;
  unsigned long long dst = ring_addr(c, p, o->dst, in, out), src = ring_addr(c, p, o->src, in, out), a = ring_addr(c, p, o->a, in, out);
  unsigned long long out2 = o->has_out2 ? ring_addr(c, p, o->out2, in, out) : 0, stride = o->bytes;
  int rank = c->cfg.rank, world = c->cfg.world_size, target = o->target, slot = o->slot, wslot = o->wait_slot, wsrc = o->wait_src;
  const sk_dim3 one = {1, 1, 1}, warp = {32, 1, 1}, grid = {(unsigned)c->cfg.max_blocks, 1, 1}, block = {SK_COMM_THREADS, 1, 1};
  const int coded = o->codec != SK_COMM_CODEC_BF16;
  switch (o->kind) {
  case SK_RING_COPY: SK_CU(sk_cu.cuMemcpyAsync(dst, src, o->bytes, stream), "cuMemcpyAsync (comm.pcie ring copy)"); return SK_OK;
  case SK_RING_SIGNAL: {
    void *args[] = {&own, &target, &slot, &rank};
    return launch(sk_plan_k(pl, K_SIGNAL), one, warp, stream, args);
  }
  case SK_RING_END: {
    void *args[] = {&own, &timeout_ns, &wslot, &wsrc};
    return launch(sk_plan_k(pl, K_END), one, warp, stream, args);
  }
  case SK_RING_ADD: {
    void *args[] = {&own, &timeout_ns, &wslot, &wsrc, &a, &src, &dst, &values};
    return launch(sk_plan_k(pl, K_ADD), grid, block, stream, args);
  }
  case SK_RING_STORE: {
    void *args[] = {&own, &timeout_ns, &wslot, &wsrc, &src, &dst, &values};
    return launch(sk_plan_k(pl, coded ? K_STORE : K_STORE_BF16), grid, block, stream, args);
  }
  case SK_RING_ENCODE: {
    void *args[] = {&src, &dst, &out2, &values};
    return launch(sk_plan_k(pl, K_ENCODE), grid, block, stream, args);
  }
  case SK_RING_HOP: {
    void *args[] = {&own, &timeout_ns, &wslot, &wsrc, &src, &a, &dst, &out2, &values};
    return launch(sk_plan_k(pl, K_HOP), grid, block, stream, args);
  }
  case SK_RING_ACCUM: {
    void *args[] = {&own, &timeout_ns, &rank, &world, &wslot, &src, &stride, &a, &dst, &out2, &values};
    return launch(sk_plan_k(pl, K_ACCUM), grid, block, stream, args);
  }
  }
  return sk_set_error(SK_ERR_INTERNAL, OP " ring: op kind %d", (int)o->kind);
}

/* The bound collective on `stream`. */
static sk_status run(const sk_binding *b, void *stream) {
  static const char fn[] = OP " run";
  const sk_comm_caps *caps = SK_PLAN_CAPS(b->plan, sk_comm_caps);
  const comm_bound *s = SK_BINDING_STATE(b, comm_bound);
  sk_comm *c = caps->comm;
  if (!c)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "%s: the plan has no communicator (caps.comm): a plan made from JSON caps or without one compiles "
                        "and binds but does not run",
                        fn);
  SK_TRY(sk_comm_ready(c, fn));
  const sk_dim3 grid = {(unsigned)c->cfg.max_blocks, 1, 1}, block = {SK_COMM_THREADS, 1, 1};
  unsigned long long own = c->buf, slot = c->cfg.max_bytes, timeout_ns = (unsigned long long)(c->cfg.timeout_s * 1e9);
  int rank = c->cfg.rank;
  if (b->entry == E_ALLREDUCE) {
    unsigned long long chunks = (unsigned long long)s->n / 8;
    void *pin = ptr(b, 0), *pout = ptr(b, 1);
    void *args[] = {&own, &rank, &slot, &timeout_ns, &pin, &pout, &chunks};
    return launch(sk_plan_k(b->plan, K_ALLREDUCE), grid, block, stream, args);
  }
  if (b->entry == E_RMSNORM) {
    int rows = s->rows, h8 = s->h8;
    float eps = s->eps;
    void *px = ptr(b, 0), *pr = ptr(b, 1), *pw = ptr(b, 2), *po = ptr(b, 3);
    void *args[] = {&own, &rank, &slot, &timeout_ns, &px, &pr, &pw, &po, &rows, &h8, &eps};
    return launch(sk_plan_k(b->plan, K_RMSNORM), grid, block, stream, args);
  }
  for (int i = 0; i < s->count; i++) {
    sk_status st = ring_issue(b->plan, c, &s->ring, &s->ops[i], ptr(b, 0), ptr(b, 1), stream);
    /* a failure mid-program leaves the peers waiting (they time out); this rank cannot continue */
    if (st != SK_OK) {
      c->poisoned = 1;
      return sk_wrap_error(st, "%s: rank %d, op %d of %d (the communicator is unusable now)", fn, rank, i, s->count);
    }
  }
  return SK_OK;
}


const sk_op_def sk_op_comm_pcie = {
    SK_OP_INFO(OP, "tensor-parallel collectives over PCIe, one process per GPU: one-shot all-reduce (+ add + RMSNorm), copy-engine ring all-reduce with ten wire modes", 80),
    SK_OP_CAPS(sk_comm_caps, caps_defaults),
    SK_OP_STATE(char, comm_bound),
    .num_kernels = K_COUNT,
    .entries = entries,
    .num_entries = 3,
    SK_OP_FIELDS(caps_fields),
    SK_OP_CALLBACKS(check_caps, select_kernels, NULL, bind, run),
};

/* ---- the direct calls: the communicator's own bindings (comm.c makes them with its plans) ---------- */

/* Bind `t` to `b` (the spine's validation; a rebind of the same layouts checks only the
 * pointers) and run it. */
static sk_status bind_run(sk_binding *b, float eps, const DLTensor *const *t, size_t n, void *stream) {
  SK_TRY(sk_bind(b, t, n, NULL, 0));
  if (b->entry == E_RMSNORM) SK_BINDING_STATE(b, comm_bound)->eps = eps;
  return sk_run(b, stream);
}

SK_API sk_status sk_comm_allreduce(sk_comm *comm, const DLTensor *in, const DLTensor *out, void *stream) {
  SK_TRY(sk_comm_ready(comm, "sk_comm_allreduce"));
  const DLTensor *t[] = {in, out};
  return bind_run(comm->allreduce, 0.0f, t, 2, stream);
}

SK_API sk_status sk_comm_allreduce_add_rmsnorm(sk_comm *comm, const DLTensor *x, const DLTensor *residual, const DLTensor *weight,
                                               float eps, const DLTensor *out, void *stream) {
  if (!(eps > 0.0f) || !isfinite(eps))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_allreduce_add_rmsnorm: eps %g must be finite and > 0", (double)eps);
  SK_TRY(sk_comm_ready(comm, "sk_comm_allreduce_add_rmsnorm"));
  const DLTensor *t[] = {x, residual, weight, out};
  return bind_run(comm->rmsnorm, eps, t, 4, stream);
}

SK_API sk_status sk_comm_allreduce_ring(sk_comm *comm, const DLTensor *in, const DLTensor *out, sk_comm_codec codec,
                                        sk_comm_topology topology, void *stream) {
  if ((unsigned)codec > SK_COMM_CODEC_MXFP8 || (unsigned)topology > SK_COMM_TOPO_A2A)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_allreduce_ring: codec %d / topology %d is not a wire mode", (int)codec,
                        (int)topology);
  SK_TRY(sk_comm_ready(comm, "sk_comm_allreduce_ring"));
  const DLTensor *t[] = {in, out};
  return bind_run(comm->ring[sk_comm_mode_index(codec, topology)], 0.0f, t, 2, stream);
}
