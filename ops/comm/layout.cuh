// The shared buffer of one comm.pcie rank (one cuMemAlloc, exported through CUDA IPC), in one
// place that the host (comm/comm.c), the kernels and the CPU tests include: plain C11 as well as
// CUDA C++17 (integer constants only).
//
//   [0, 2 KiB)       flags[64 blocks][8 ranks] u32: flags[b][src] = the sequence number of the
//                    last collective whose block b rank `src` has entered (written by the peers,
//                    st.release.sys; monotonic, never reset)
//   [2 KiB, 3 KiB)   ring flags[32 slots][8 ranks] u32: the ring all-reduce's (ring.cuh): slot k
//                    = ring step k, 16/17 = a2a scatter/broadcast, 31 = end handshake; value = the
//                    ring sequence number of the collective whose payload arrived (monotonic)
//   [4 KiB, +256)    seq[64] u32: this rank's sequence number per block (local only)
//   [4 KiB + 256, +8) error[2] u32: 0, or (1 = timeout, the peer waited for) (local only)
//   [4 KiB + 1 KiB, +4) ring_seq u32: ring collectives this rank completed (local only)
//   [4 KiB + 512, +64) peers[8] u64: every rank's buffer as mapped in this process (own included;
//                    written by the host at connect, read by the kernels)
//   [64 KiB, ...)    data[2][max_bytes]: slot seq & 1 holds this rank's input of collective seq
//   then             the ring area: receive slots and the coded stage (ring_plan.h sk_ring_layout)
//
// Protocol of a one-shot collective (every kernel launches exactly SK_COMM_BLOCKS(max_blocks)
// CTAs, the same on every rank and for every collective kind): block b copies its part of the
// input into its slot, publishes flags[b][rank] = seq in every peer's buffer, waits until its own
// flags[b][p] >= seq for every peer p (bounded: on timeout it records the error word and returns),
// then reads every rank's slot and reduces. Slot seq & 1 is written again at seq + 2, and that
// kernel starts only after this rank's collective seq + 1 completed, every block of which waited
// for every peer's same block to enter seq + 1, which each peer's stream starts only after its
// collective seq finished reading: no overwrite while a peer still reads, for any partition.
#pragma once

#define SK_COMM_LAYOUT_MAX_BLOCKS 64
#define SK_COMM_LAYOUT_MAX_RANKS 8
#define SK_COMM_FLAGS_OFFSET 0u
#define SK_COMM_SEQ_OFFSET 4096u
#define SK_COMM_ERROR_OFFSET (4096u + 256u)
#define SK_COMM_PEERS_OFFSET (4096u + 512u)
#define SK_COMM_DATA_OFFSET 65536u
#define SK_COMM_RING_FLAGS_OFFSET 2048u
#define SK_COMM_RING_SEQ_OFFSET (4096u + 1024u)
#define SK_COMM_RING_SLOTS 32
#define SK_COMM_ERROR_TIMEOUT 1u
#define SK_COMM_THREADS 256 /* threads per CTA of the one-shot kernels */
