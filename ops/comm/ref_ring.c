/* ops/comm/ref_ring.c - CPU simulation of the ring all-reduce (tests only): every rank's program
 * (sk_ring_program, the one comm.c issues) interpreted over simulated buffers, the ranks
 * interleaved in a seeded pseudo-random order, each kernel computed with the codec reference
 * (codec.c over codec.cuh, the kernels' own arithmetic). What every rank ends with is what the
 * device must produce bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "comm/codec.cuh"
#include "comm/codec.h"
#include "comm/ring_plan.h"

typedef struct {
  uint8_t *recv, *stage;
  uint32_t flags[32][SK_COMM_MAX_RANKS];
  uint32_t seq;
  int coll, pc;
} sim_rank;

typedef struct {
  const sk_ring_plan *p;
  sim_rank r[SK_COMM_MAX_RANKS];
  const uint16_t *const *in;
  uint16_t *const *out;
  size_t recv_bytes;
  int bad; /* an access outside its area */
} sim;

/* The bytes a reference names for rank `me` in its current collective (NULL when out of range). */
static uint8_t *at(sim *s, int me, sk_ring_ref ref, size_t bytes) {
  const sim_rank *r = &s->r[me];
  const int w = s->p->world;
  size_t limit;
  uint8_t *base;
  switch (ref.space) {
  case SK_RING_IN: base = (uint8_t *)(uintptr_t)s->in[r->coll * w + me], limit = (size_t)s->p->n * 2; break;
  case SK_RING_OUT: base = (uint8_t *)s->out[r->coll * w + me], limit = (size_t)s->p->n * 2; break;
  case SK_RING_RECV: base = s->r[ref.rank].recv, limit = s->recv_bytes; break;
  default: base = r->stage, limit = s->p->stage_bytes; break;
  }
  if (ref.offset + bytes > limit) {
    s->bad = 1;
    return NULL;
  }
  return base + ref.offset;
}

static float bf16_at(const uint8_t *p, int64_t i) { return sk_codec_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); }
static void put_bf16(uint8_t *p, int64_t i, float v) {
  const uint16_t b = sk_codec_bf16_rn(v);
  p[2 * i] = (uint8_t)b, p[2 * i + 1] = (uint8_t)(b >> 8);
}

/* May `me` run op `o` now (its flag wait satisfied)? */
static int ready(const sim *s, int me, const sk_ring_op *o) {
  const sim_rank *r = &s->r[me];
  const uint32_t seq = r->seq + 1;
  if (o->kind == SK_RING_COPY || o->kind == SK_RING_SIGNAL || o->kind == SK_RING_ENCODE) return 1;
  if (o->kind == SK_RING_ACCUM) {
    for (int q = 0; q < s->p->world; q++)
      if (q != me && r->flags[o->wait_slot][q] < seq) return 0;
    return 1;
  }
  return o->wait_src < 0 || r->flags[o->wait_slot][o->wait_src] >= seq;
}

static void run_op(sim *s, int me, const sk_ring_op *o) {
  sim_rank *r = &s->r[me];
  const sk_comm_codec c = o->codec;
  const size_t cb = sk_codec_block_bytes(c);
  const int64_t blocks = o->values / SK_CODEC_BLOCK;
  float x[SK_CODEC_BLOCK], y[SK_CODEC_BLOCK];
  uint8_t *dst, *src, *a, *o2;
  switch (o->kind) {
  case SK_RING_COPY:
    dst = at(s, me, o->dst, o->bytes), src = at(s, me, o->src, o->bytes);
    if (dst && src) memmove(dst, src, o->bytes);
    return;
  case SK_RING_SIGNAL: s->r[o->target].flags[o->slot][me] = r->seq + 1; return;
  case SK_RING_END: r->seq++; return;
  case SK_RING_ADD:
    dst = at(s, me, o->dst, (size_t)o->values * 2), src = at(s, me, o->src, (size_t)o->values * 2), a = at(s, me, o->a, (size_t)o->values * 2);
    if (dst && src && a)
      for (int64_t i = 0; i < o->values; i++) put_bf16(dst, i, SK_CODEC_ADD(bf16_at(a, i), bf16_at(src, i)));
    return;
  case SK_RING_STORE:
    dst = at(s, me, o->dst, (size_t)o->values * 2);
    if (c == SK_COMM_CODEC_BF16) { /* any multiple of 8 values */
      src = at(s, me, o->src, (size_t)o->values * 2);
      if (dst && src)
        for (int64_t i = 0; i < o->values; i++) put_bf16(dst, i, bf16_at(src, i));
      return;
    }
    src = at(s, me, o->src, (size_t)blocks * cb);
    if (!dst || !src) return;
    for (int64_t b = 0; b < blocks; b++) {
      sk_codec_decode_block(c, src + b * cb, y);
      for (int i = 0; i < SK_CODEC_BLOCK; i++) put_bf16(dst, b * SK_CODEC_BLOCK + i, y[i]);
    }
    return;
  default: break;
  }
  /* ENCODE / HOP / ACCUM: coded, block by block */
  dst = at(s, me, o->dst, (size_t)blocks * cb);
  o2 = o->has_out2 ? at(s, me, o->out2, (size_t)o->values * 2) : NULL;
  if (!dst || (o->has_out2 && !o2)) return;
  for (int64_t b = 0; b < blocks; b++) {
    if (o->kind == SK_RING_ENCODE) {
      if (!(src = at(s, me, o->src, (size_t)o->values * 2))) return;
      for (int i = 0; i < SK_CODEC_BLOCK; i++) x[i] = bf16_at(src, b * SK_CODEC_BLOCK + i);
    } else if (o->kind == SK_RING_HOP) {
      if (!(src = at(s, me, o->src, (size_t)blocks * cb)) || !(a = at(s, me, o->a, (size_t)o->values * 2))) return;
      sk_codec_decode_block(c, src + b * cb, x);
      for (int i = 0; i < SK_CODEC_BLOCK; i++) x[i] = SK_CODEC_ADD(x[i], bf16_at(a, b * SK_CODEC_BLOCK + i));
    } else { /* ACCUM: rank order 0..world-1, this rank's own contribution from its stage */
      for (int q = 0; q < s->p->world; q++) {
        sk_ring_ref from = o->src;
        from.offset += (size_t)q * o->bytes;
        if (!(src = at(s, me, q == me ? o->a : from, (size_t)blocks * cb))) return;
        sk_codec_decode_block(c, src + b * cb, y);
        for (int i = 0; i < SK_CODEC_BLOCK; i++) x[i] = q == 0 ? y[i] : SK_CODEC_ADD(x[i], y[i]);
      }
    }
    sk_codec_encode_block(c, x, dst + b * cb);
    if (o2) {
      sk_codec_decode_block(c, dst + b * cb, y);
      for (int i = 0; i < SK_CODEC_BLOCK; i++) put_bf16(o2, b * SK_CODEC_BLOCK + i, y[i]);
    }
  }
}

sk_status sk_ring_simulate(const sk_ring_plan *const *plans, int collectives, const uint16_t *const *in, uint16_t *const *out,
                           uint64_t seed) {
  if (!plans || !plans[0] || !in || !out || collectives < 1)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_ring_simulate: bad arguments");
  const sk_ring_plan *plan = plans[0];
  for (int c = 1; c < collectives; c++)
    if (!plans[c] || plans[c]->world != plan->world || plans[c]->n != plan->n || plans[c]->stage_offset != plan->stage_offset)
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_ring_simulate: plan %d differs in world, n or layout", c);
  sk_ring_op (*ops)[SK_RING_MAX_OPS] = calloc(SK_COMM_MAX_RANKS, sizeof *ops); /* each rank's program (reentrant) */
  if (!ops) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "sk_ring_simulate: out of memory");
  int count[SK_COMM_MAX_RANKS];
  sim s;
  memset(&s, 0, sizeof s);
  s.p = plan, s.in = in, s.out = out;
  s.recv_bytes = plan->stage_offset - plan->recv_offset;
  const int w = plan->world;
  sk_status st = SK_OK;
  for (int r = 0; r < w; r++) {
    s.r[r].recv = calloc(1, s.recv_bytes);
    s.r[r].stage = calloc(1, plan->stage_bytes);
    if (!s.r[r].recv || !s.r[r].stage) st = sk_set_error(SK_ERR_OUT_OF_MEMORY, "sk_ring_simulate: out of memory");
  }
  for (int r = 0; r < w; r++) count[r] = sk_ring_program(plans[0], r, ops[r]);
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
  while (st == SK_OK) {
    int runnable[SK_COMM_MAX_RANKS], nr = 0, left = 0;
    for (int r = 0; r < w; r++) {
      if (s.r[r].coll >= collectives) continue;
      left++;
      if (ready(&s, r, &ops[r][s.r[r].pc])) runnable[nr++] = r;
    }
    if (!left) break;
    if (!nr) {
      st = sk_set_error(SK_ERR_INTERNAL, "sk_ring_simulate: deadlock (rank 0 at collective %d op %d)", s.r[0].coll, s.r[0].pc);
      break;
    }
    z ^= z >> 12, z ^= z << 25, z ^= z >> 27;
    const int me = runnable[(z * 0x2545F4914F6CDD1Dull >> 33) % (uint64_t)nr];
    run_op(&s, me, &ops[me][s.r[me].pc]);
    if (s.bad) st = sk_set_error(SK_ERR_INTERNAL, "sk_ring_simulate: rank %d op %d reaches outside its area", me, s.r[me].pc);
    if (++s.r[me].pc == count[me]) { /* this rank's next collective: its program */
      s.r[me].pc = 0;
      if (++s.r[me].coll < collectives) count[me] = sk_ring_program(plans[s.r[me].coll], me, ops[me]);
    }
  }
  for (int r = 0; r < w; r++) free(s.r[r].recv), free(s.r[r].stage);
  free(ops);
  return st;
}
