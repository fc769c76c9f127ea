/* ops/comm/cases.c - the harness's case table for comm.pcie (tests/harness/harness.h): every
 * entry at world sizes 2..8, edge sizes (the smallest N, H = 8, the ring's BF16 fallback) and each
 * codec x topology of the ring. CPU cases only: a collective needs its peers, so the harness plans
 * (without a communicator) and validates binds; the runs on a GPU are tests/gpu/test_comm_gpu.c's
 * (2 and 4 processes). The reference models every rank holding the same input: the one-shot sums
 * in fp32 in rank order, the ring goes through the CPU simulation of its program (ref_ring.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ring_plan.h"
#include "harness/harness.h"
#include "sparkinfer/comm.h"

typedef struct cspec {
  const char *entry;
  int world;
  sk_comm_codec codec;
  sk_comm_topology topology;
  int64_t n, m, h; /* n: allreduce / ring; m, h: add_rmsnorm */
} cspec;

static const cspec specs[] = {
    {"allreduce", 2, 0, 0, 8, 0, 0},
    {"allreduce", 4, 0, 0, 4 * 4096, 0, 0},
    {"allreduce", 8, 0, 0, (int64_t)1 << 20, 0, 0},
    {"add_rmsnorm", 2, 0, 0, 0, 1, 4096},
    {"add_rmsnorm", 4, 0, 0, 0, 7, 7168},
    {"add_rmsnorm", 8, 0, 0, 0, 64, 8},
    {"ring", 2, SK_COMM_CODEC_BF16, 0, 16, 0, 0},
    {"ring", 4, SK_COMM_CODEC_E4M3, SK_COMM_TOPO_RING, 4 * 128 * 3, 0, 0},
    {"ring", 2, SK_COMM_CODEC_INT8, SK_COMM_TOPO_AG, 2 * 128 * 5, 0, 0},
    {"ring", 8, SK_COMM_CODEC_MXFP8, SK_COMM_TOPO_A2A, 8 * 128 * 4, 0, 0},
    {"ring", 6, SK_COMM_CODEC_E4M3, SK_COMM_TOPO_AG, 6 * 8 * 3, 0, 0}, /* shard not blocks of 128: BF16 */
};
#define N_SPECS (sizeof specs / sizeof specs[0])

static size_t count(int variant) { return (void)variant, N_SPECS; }

static void get(int variant, size_t i, skh_case *c) {
  (void)variant;
  static const char *const codec_names[] = {"bf16", "e4m3", "int8", "mxfp8"}, *const topo_names[] = {"ag", "ring", "a2a"};
  const cspec *s = &specs[i];
  memset(c, 0, sizeof *c);
  sk_comm_caps caps = SK_COMM_CAPS_INIT;
  caps.world_size = s->world;
  caps.codec = s->codec;
  caps.topology = s->topology;
  caps.eps = s->world == 4 ? 1e-5f : 1e-6f;
  SKH_SET_CAPS(c, caps);
  c->entry = s->entry;
  if (s->n) {
    skh_case_sym(c, "N", s->n);
    snprintf(c->name, sizeof c->name, "%s w%d n=%lld %s/%s", s->entry, s->world, (long long)s->n, codec_names[s->codec],
             topo_names[s->topology]);
  } else {
    skh_case_sym(c, "M", s->m);
    skh_case_sym(c, "H", s->h);
    snprintf(c->name, sizeof c->name, "%s w%d m=%lld h=%lld", s->entry, s->world, (long long)s->m, (long long)s->h);
  }
  c->flags = SKH_CPU | SKH_NO_RUN;
}

static void fill(const skh_case *c, skh_tensor *t, size_t n, skref_rng *rng) {
  (void)c;
  for (size_t i = 0; i < n; i++)
    if (t[i].role != SK_TENSOR_OUT) skh_fill_normal(&t[i], rng, 1.0);
}

static float bf16_round(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&v, &u, 4);
  return v;
}

static void reference(const skh_case *c, skh_tensor *t, size_t n) {
  sk_comm_caps caps;
  memcpy(&caps, c->caps, sizeof caps);
  const int w = caps.world_size;
  if (!strcmp(c->entry, "allreduce") || !strcmp(c->entry, "add_rmsnorm")) {
    const int norm = n == 4;
    skh_tensor *x = &t[0], *out = &t[n - 1];
    const size_t numel = skh_numel(x), h = norm ? (size_t)x->shape[1] : numel;
    for (size_t row = 0; row < numel / h; row++) {
      double ss = 0;
      for (size_t j = 0; j < h; j++) {
        const size_t i = row * h + j;
        float s = 0; /* rank order, fp32 */
        for (int r = 0; r < w; r++) s += (float)skh_get(x, x->host, i);
        if (!norm) {
          skh_set(out, out->expect, i, s);
          continue;
        }
        const float y = bf16_round(s + (float)skh_get(&t[1], t[1].host, i));
        skh_set(&t[1], t[1].expect, i, y);
        ss += (double)y * y;
      }
      if (!norm) continue;
      const double inv = 1.0 / sqrt(ss / (double)h + caps.eps);
      for (size_t j = 0; j < h; j++)
        skh_set(out, out->expect, row * h + j, skh_get(&t[1], t[1].expect, row * h + j) * inv * skh_get(&t[2], t[2].host, j));
    }
    return;
  }
  /* ring: the CPU simulation of every rank's program, each rank holding this input */
  const int64_t values = (int64_t)skh_numel(&t[0]);
  sk_ring_plan plan;
  if (sk_ring_plan_make(w, (size_t)caps.max_bytes ? (size_t)caps.max_bytes : (size_t)8 << 20, values, caps.codec, caps.topology,
                        &plan) != SK_OK)
    return;
  const sk_ring_plan *plans[1] = {&plan};
  const uint16_t *in[SK_COMM_MAX_RANKS];
  uint16_t *outs[SK_COMM_MAX_RANKS];
  for (int r = 0; r < w; r++) {
    in[r] = t[0].host;
    outs[r] = malloc((size_t)values * 2);
  }
  if (sk_ring_simulate(plans, 1, in, outs, 7) == SK_OK) memcpy(t[1].expect, outs[0], (size_t)values * 2);
  for (int r = 0; r < w; r++) free(outs[r]);
}

/* The sums and the ring (its simulation is the kernels' arithmetic) bit for bit; the norm's out
 * within 2 bf16 ulps (fp32 rsqrt on the device). */
static void tolerance(const skh_case *c, const skh_tensor *t, size_t i, skh_tolerance *tol) {
  const int norm_out = !strcmp(c->entry, "add_rmsnorm") && !strcmp(t[i].name, "out");
  tol->check = norm_out ? SKH_CLOSE : SKH_EXACT;
  tol->ulps = norm_out ? 2 : 0;
}

static void cost(const skh_case *c, const skh_tensor *t, size_t n, double *bytes, double *flops, const char **metric) {
  (void)c;
  *bytes = 0;
  for (size_t i = 0; i < n; i++) *bytes += (double)t[i].bytes;
  *flops = 0;
  *metric = "GB/s";
}

const skh_op skh_op_comm_pcie = {"comm.pcie", count, get, NULL, fill, reference, tolerance, cost};
