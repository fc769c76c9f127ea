/* ops/comm/ring_plan.c - the ring all-reduce's plan, layout and per-rank program (pure host
 * logic; rules in ring_plan.h and comm.md). */
#include "comm/ring_plan.h"

#include <string.h>

#include "base.h"
#include "comm/codec.cuh"
#include "comm/layout.cuh"

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

void sk_ring_layout(int world, size_t max_bytes, sk_ring_plan *p) {
  memset(p, 0, sizeof *p);
  p->world = world;
  p->slot_bytes = align256((max_bytes + (size_t)world - 1) / (size_t)world);
  p->recv_offset = align256(SK_COMM_DATA_OFFSET + 2 * max_bytes);
  /* a2a slots hold coded shards: at most slot_bytes / 256 blocks of 132 bytes */
  p->a2a_offset = 2 * (size_t)(world - 1) * p->slot_bytes;
  p->a2a_slot_bytes = align256(p->slot_bytes / (2 * SK_CODEC_BLOCK) * SK_CODEC_CODED_BYTES + SK_CODEC_CODED_BYTES);
  p->stage_offset = p->recv_offset + p->a2a_offset + 2 * (size_t)world * p->a2a_slot_bytes;
  /* n * 2 <= max_bytes: at most max_bytes / 256 coded blocks */
  p->stage_bytes = align256(max_bytes / (2 * SK_CODEC_BLOCK) * SK_CODEC_CODED_BYTES + SK_CODEC_CODED_BYTES);
  p->buffer_bytes = p->stage_offset + p->stage_bytes;
}

sk_status sk_ring_plan_make(int world, size_t max_bytes, int64_t n, sk_comm_codec codec, sk_comm_topology topology,
                            sk_ring_plan *p) {
  static const char fn[] = "ring all-reduce";
  if (!p) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  if (world < 2 || world > SK_COMM_MAX_RANKS)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: world size %d (2..%d)", fn, world, SK_COMM_MAX_RANKS);
  if ((int)codec < 0 || (int)codec > (int)SK_COMM_CODEC_MXFP8)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: codec %d is not an sk_comm_codec", fn, (int)codec);
  if ((int)topology < 0 || (int)topology > (int)SK_COMM_TOPO_A2A)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: topology %d is not an sk_comm_topology", fn, (int)topology);
  if (n < 1 || n % (8 * world))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "%s: %lld values: the ring needs a multiple of 8 * world size = %d (16-byte shards); "
                        "use sk_comm_allreduce for other sizes",
                        fn, (long long)n, 8 * world);
  if ((uint64_t)n * 2 > max_bytes)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: %lld bytes exceed max_bytes %zu", fn, (long long)n * 2, max_bytes);
  sk_ring_layout(world, max_bytes, p);
  p->n = n;
  p->shard = n / world;
  p->shard_bf16_bytes = (size_t)p->shard * 2;
  p->codec = codec;
  p->topology = codec == SK_COMM_CODEC_BF16 ? SK_COMM_TOPO_AG : topology;
  if (codec != SK_COMM_CODEC_BF16 && p->shard % SK_CODEC_BLOCK) {
    p->codec = SK_COMM_CODEC_BF16;
    p->topology = SK_COMM_TOPO_AG;
    p->fallback = 1;
  }
  p->shard_wire_bytes = p->codec == SK_COMM_CODEC_BF16 ? p->shard_bf16_bytes
                                                       : (size_t)(p->shard / SK_CODEC_BLOCK) * SK_CODEC_CODED_BYTES;
  return SK_OK;
}

static int mod(int a, int w) { return ((a % w) + w) % w; }

void sk_ring_step(int world, int rank, int k, int *send_chunk, int *recv_chunk) {
  if (k < world - 1) {
    *send_chunk = mod(rank - k, world);
    *recv_chunk = mod(rank - k - 1, world);
  } else {
    const int j = k - (world - 1);
    *send_chunk = mod(rank + 1 - j, world);
    *recv_chunk = mod(rank - j, world);
  }
}

int sk_ring_owned_chunk(int world, int rank) { return mod(rank + 1, world); }

/* ---- program builder ------------------------------------------------------------------------- */

typedef struct {
  sk_ring_op *ops;
  int n;
} builder;

static sk_ring_ref ref(sk_ring_space s, int rank, size_t off) {
  sk_ring_ref r = {s, rank, off};
  return r;
}
static sk_ring_op *push(builder *b, sk_ring_op_kind kind) {
  sk_ring_op *o = &b->ops[b->n++];
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->wait_src = -1;
  return o;
}
static void copy(builder *b, sk_ring_ref dst, sk_ring_ref src, size_t bytes) {
  sk_ring_op *o = push(b, SK_RING_COPY);
  o->dst = dst, o->src = src, o->bytes = bytes;
}
static void emit_signal(builder *b, int target, int slot) {
  sk_ring_op *o = push(b, SK_RING_SIGNAL);
  o->target = target, o->slot = slot;
}
static sk_ring_op *kernel(builder *b, sk_ring_op_kind kind, const sk_ring_plan *p, int64_t values, int wait_slot, int wait_src) {
  sk_ring_op *o = push(b, kind);
  o->codec = p->codec, o->values = values, o->wait_slot = wait_slot, o->wait_src = wait_src;
  return o;
}

/* Reduce-scatter + all-gather around the ring (codecs: `0`, `ag`, `ring`). Receive slot k of every
 * rank holds step k's payload from rank - 1. */
static void ring_program(const sk_ring_plan *p, int rank, builder *b) {
  const int w = p->world, next = mod(rank + 1, w), prev = mod(rank - 1, w), own = sk_ring_owned_chunk(w, rank);
  const size_t B = p->shard_bf16_bytes, C = p->shard_wire_bytes, slot = p->slot_bytes;
  const int coded = p->codec != SK_COMM_CODEC_BF16, coded_rs = coded && p->topology == SK_COMM_TOPO_RING;
  for (int k = 0; k < 2 * (w - 1); k++) {
    int s, r;
    sk_ring_step(w, rank, k, &s, &r);
    const int rs = k < w - 1;
    sk_ring_op *o;
    if (rs && !coded_rs) { /* bf16 partial sums travel; the receiver adds its input */
      copy(b, ref(SK_RING_RECV, next, (size_t)k * slot), k == 0 ? ref(SK_RING_IN, 0, (size_t)s * B) : ref(SK_RING_OUT, 0, (size_t)s * B), B);
      emit_signal(b, next, k);
      o = kernel(b, SK_RING_ADD, p, p->shard, k, prev);
      o->codec = SK_COMM_CODEC_BF16;
      o->dst = ref(SK_RING_OUT, 0, (size_t)r * B), o->a = ref(SK_RING_IN, 0, (size_t)r * B), o->src = ref(SK_RING_RECV, rank, (size_t)k * slot);
      continue;
    }
    if (rs) { /* coded partial sums: decode, add the input, encode again (the last hop is the owner's payload) */
      if (k == 0) {
        o = kernel(b, SK_RING_ENCODE, p, p->shard, 0, -1);
        o->dst = ref(SK_RING_STAGE, 0, (size_t)s * C), o->src = ref(SK_RING_IN, 0, (size_t)s * B);
      }
      copy(b, ref(SK_RING_RECV, next, (size_t)k * slot), ref(SK_RING_STAGE, 0, (size_t)s * C), C);
      emit_signal(b, next, k);
      o = kernel(b, SK_RING_HOP, p, p->shard, k, prev);
      o->dst = ref(SK_RING_STAGE, 0, (size_t)r * C), o->src = ref(SK_RING_RECV, rank, (size_t)k * slot);
      o->a = ref(SK_RING_IN, 0, (size_t)r * B);
      if (k == w - 2) o->has_out2 = 1, o->out2 = ref(SK_RING_OUT, 0, (size_t)r * B);
      continue;
    }
    /* all-gather */
    if (!coded) {
      copy(b, ref(SK_RING_RECV, next, (size_t)k * slot), ref(SK_RING_OUT, 0, (size_t)s * B), B);
    } else {
      if (k == w - 1 && !coded_rs) { /* `ag`: the owner encodes its bf16 shard once and keeps the decoded copy */
        o = kernel(b, SK_RING_ENCODE, p, p->shard, 0, -1);
        o->dst = ref(SK_RING_STAGE, 0, (size_t)own * C), o->src = ref(SK_RING_OUT, 0, (size_t)own * B);
        o->has_out2 = 1, o->out2 = ref(SK_RING_OUT, 0, (size_t)own * B);
      }
      /* the owner's payload, then forwarded verbatim from the previous step's receive slot */
      copy(b, ref(SK_RING_RECV, next, (size_t)k * slot),
           k == w - 1 ? ref(SK_RING_STAGE, 0, (size_t)own * C) : ref(SK_RING_RECV, rank, (size_t)(k - 1) * slot), C);
    }
    emit_signal(b, next, k);
    o = kernel(b, SK_RING_STORE, p, p->shard, k, prev);
    o->dst = ref(SK_RING_OUT, 0, (size_t)r * B), o->src = ref(SK_RING_RECV, rank, (size_t)k * slot);
  }
  /* End handshake: this rank's next collective writes rank + 1's slots only after rank + 1 read
   * them all. On one stream the ring's own dependencies already imply it (a rank's step t needs
   * rank + 1 to have finished its step t - world); kept so that moving the copies onto a side
   * stream (pipelining, not done yet) stays correct. */
  emit_signal(b, prev, SK_RING_SLOT_DONE);
  kernel(b, SK_RING_END, p, 0, SK_RING_SLOT_DONE, next);
}

/* Quantise once, scatter each chunk to its owner (rank c owns chunk c), fp32 rank-order sum of
 * the decoded contributions, encode once, broadcast. Receive slot r (< world) holds rank r's
 * contribution, slot world + r owner r's payload (this rank's own payload sits in its own slot
 * world + rank, the source of its broadcast copies). */
static void a2a_program(const sk_ring_plan *p, int rank, builder *b) {
  const int w = p->world;
  const size_t B = p->shard_bf16_bytes, C = p->shard_wire_bytes, slot = p->a2a_slot_bytes, base = p->a2a_offset;
  sk_ring_op *o = kernel(b, SK_RING_ENCODE, p, p->n, 0, -1);
  o->dst = ref(SK_RING_STAGE, 0, 0), o->src = ref(SK_RING_IN, 0, 0);
  for (int j = 1; j < w; j++) { /* rank + 1 first: every rank sends to a different peer at a time */
    const int q = mod(rank + j, w);
    copy(b, ref(SK_RING_RECV, q, base + (size_t)rank * slot), ref(SK_RING_STAGE, 0, (size_t)q * C), C);
    emit_signal(b, q, SK_RING_SLOT_SCATTER);
  }
  o = kernel(b, SK_RING_ACCUM, p, p->shard, SK_RING_SLOT_SCATTER, rank);
  o->dst = ref(SK_RING_RECV, rank, base + (size_t)(w + rank) * slot), o->src = ref(SK_RING_RECV, rank, base);
  o->a = ref(SK_RING_STAGE, 0, (size_t)rank * C), o->bytes = slot; /* contribution q at src + q * slot */
  o->has_out2 = 1, o->out2 = ref(SK_RING_OUT, 0, (size_t)rank * B);
  for (int j = 1; j < w; j++) {
    const int q = mod(rank + j, w);
    copy(b, ref(SK_RING_RECV, q, base + (size_t)(w + rank) * slot), ref(SK_RING_RECV, rank, base + (size_t)(w + rank) * slot), C);
    emit_signal(b, q, SK_RING_SLOT_BCAST);
  }
  for (int j = 1; j < w; j++) {
    const int q = mod(rank - j, w);
    o = kernel(b, SK_RING_STORE, p, p->shard, SK_RING_SLOT_BCAST, q);
    o->dst = ref(SK_RING_OUT, 0, (size_t)q * B), o->src = ref(SK_RING_RECV, rank, base + (size_t)(w + q) * slot);
  }
  /* no handshake: this rank's next scatter into q follows its STORE of q's payload, which q sent
   * after its ACCUM read every contribution; its next broadcast into q follows q's next scatter */
  kernel(b, SK_RING_END, p, 0, 0, -1);
}

int sk_ring_program(const sk_ring_plan *p, int rank, sk_ring_op *ops) {
  builder b = {ops, 0};
  if (p->codec != SK_COMM_CODEC_BF16 && p->topology == SK_COMM_TOPO_A2A) a2a_program(p, rank, &b);
  else ring_program(p, rank, &b);
  return b.n;
}
