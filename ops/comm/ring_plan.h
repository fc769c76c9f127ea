/* ops/comm/ring_plan.h - the copy-engine ring all-reduce's host-side logic as pure functions (no
 * GPU): the wire mode after the fallback rule, the staging layout of the shared buffer, the chunk
 * a rank sends and receives at each ring step, and the whole per-rank program of one collective
 * (copies, flag signals, kernels) that comm.c issues into the stream and the CPU simulation
 * (ref_ring.c) interprets. Contract: ops/comm/comm.md, "Ring all-reduce". */
#ifndef SK_COMM_RING_PLAN_H
#define SK_COMM_RING_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "sparkinfer/comm.h"

/* Flag slots (layout.cuh SK_COMM_RING_FLAGS_OFFSET: [32 slots][8 sources]): ring step k uses
 * slot k (source = rank - 1); the a2a phases and the end handshake have their own. */
#define SK_RING_SLOT_SCATTER 16   /* a2a: coded contributions, source = sender */
#define SK_RING_SLOT_BCAST 17     /* a2a: reduced payloads, source = owner */
#define SK_RING_SLOT_DONE 31      /* ring end handshake, source = next rank */
#define SK_RING_MAX_OPS 64

typedef struct sk_ring_plan {
  int world;
  sk_comm_codec codec;        /* effective (BF16 after the fallback) */
  sk_comm_topology topology;  /* effective (ignored, reported as AG, for BF16) */
  int fallback;               /* 1: a compressed mode was asked for, the shard is not blocks of 128 */
  int64_t n, shard;           /* bf16 values in all and per rank (chunk c = [c * shard, +shard)) */
  size_t shard_bf16_bytes;    /* shard * 2 */
  size_t shard_wire_bytes;    /* one shard on the wire: shard * 2, or shard / 128 * 132 */
  /* the ring area of the shared buffer (offsets from the buffer's base): the ring's and the
   * a2a's receive slots are disjoint, so consecutive collectives of different modes never write
   * a slot a lagging peer still reads */
  size_t recv_offset, slot_bytes;  /* 2 * (world - 1) ring receive slots of slot_bytes */
  size_t a2a_offset, a2a_slot_bytes; /* 2 * world a2a receive slots (coded shards), from recv_offset */
  size_t stage_offset, stage_bytes;/* this rank's coded payloads: chunk c at c * shard_wire_bytes */
  size_t buffer_bytes;             /* the whole buffer: one-shot part + ring area */
} sk_ring_plan;

/* The ring area for a world and max_bytes (plan->n = 0): what sk_comm_create allocates. */
void sk_ring_layout(int world, size_t max_bytes, sk_ring_plan *plan);

/* The plan of one collective of n bf16 values. SK_ERR_INVALID_ARGUMENT (message names the rule)
 * for a world outside 2..8, an unknown codec or topology, n < 1, n not a multiple of 8 * world
 * (each shard 16-byte aligned) or n * 2 > max_bytes. A compressed codec with shard % 128 != 0
 * falls back to BF16 (plan->fallback = 1). */
sk_status sk_ring_plan_make(int world, size_t max_bytes, int64_t n, sk_comm_codec codec, sk_comm_topology topology,
                            sk_ring_plan *plan);

/* Ring step k (0 <= k < 2 (world - 1)) of `rank`: the chunk it sends to rank + 1 and the chunk it
 * receives from rank - 1. Reduce-scatter (k < world - 1): send (rank - k), receive (rank - k - 1);
 * all-gather (j = k - world + 1): send (rank + 1 - j), receive (rank - j), all mod world. After
 * the reduce-scatter rank r owns chunk (r + 1) mod world. */
void sk_ring_step(int world, int rank, int k, int *send_chunk, int *recv_chunk);
int sk_ring_owned_chunk(int world, int rank);

/* ---- the per-rank program -------------------------------------------------------------------- */

typedef enum sk_ring_space {
  SK_RING_IN = 0,   /* the caller's input (bf16) */
  SK_RING_OUT = 1,  /* the caller's output (bf16) */
  SK_RING_RECV = 2, /* rank `rank`'s receive slots (offset from its recv_offset; a2a slots
                       from a2a_offset on) */
  SK_RING_STAGE = 3 /* this rank's stage (offset from stage_offset) */
} sk_ring_space;

typedef struct sk_ring_ref {
  sk_ring_space space;
  int rank;         /* SK_RING_RECV: whose buffer */
  size_t offset;    /* bytes */
} sk_ring_ref;

typedef enum sk_ring_op_kind {
  SK_RING_COPY = 0,   /* copy-engine copy (cuMemcpyAsync): bytes from src to dst */
  SK_RING_SIGNAL,     /* flags[slot][this rank] = seq in rank `target`'s buffer (1-thread kernel) */
  SK_RING_ADD,        /* wait; dst(bf16) = bf16(a + src) (BF16 reduce-scatter hop) */
  SK_RING_STORE,      /* wait; dst(bf16) = bf16(decode(src)) (all-gather hop) */
  SK_RING_ENCODE,     /* dst(coded) = encode(src bf16); out2 (if set) = bf16(decode(dst)) */
  SK_RING_HOP,        /* wait; dst(coded) = encode(decode(src) + a); out2 (if set) = bf16(decode(dst)) */
  SK_RING_ACCUM,      /* wait for every peer; dst(coded) = encode(rank-order sum of decode(each
                         rank's contribution)); out2 = bf16(decode(dst)) */
  SK_RING_END         /* wait (if wait_src >= 0); this rank's ring sequence number = seq */
} sk_ring_op_kind;

typedef struct sk_ring_op {
  sk_ring_op_kind kind;
  sk_comm_codec codec;      /* kernels: the codec of coded operands */
  sk_ring_ref dst, src, a, out2;
  int has_out2;
  int64_t values;           /* kernels: bf16 values processed (a multiple of 8; of 128 if coded) */
  size_t bytes;             /* SK_RING_COPY; SK_RING_ACCUM: the receive slot stride */
  int target, slot;         /* SK_RING_SIGNAL */
  int wait_slot, wait_src;  /* kernels: wait for flags[wait_slot][wait_src] >= seq; wait_src -1:
                               no wait; SK_RING_ACCUM waits for every rank but this one */
} sk_ring_op;

/* Rank `rank`'s program for `plan`: the ops in stream order. Returns their number (at most
 * SK_RING_MAX_OPS). */
int sk_ring_program(const sk_ring_plan *plan, int rank, sk_ring_op *ops);

/* ---- CPU simulation (ops/comm/ref_ring.c, tests only) ------------------------------------------ */

/* Run `collectives` back-to-back collectives (collective c with plans[c]: one world and n, any
 * modes) for plan->world ranks over simulated
 * buffers, interleaving the ranks' programs in a pseudo-random order drawn from `seed` (a rank
 * blocked on a flag waits; copies land at once, as stream order makes them visible before the
 * next op). in[c * world + r] / out[c * world + r]: collective c's input / output of rank r (n bf16
 * values each; an output may be its input). Returns SK_OK, or SK_ERR_INTERNAL naming a deadlock. */
sk_status sk_ring_simulate(const sk_ring_plan *const *plans, int collectives, const uint16_t *const *in, uint16_t *const *out,
                           uint64_t seed);

#endif
