/*
 * sparkinfer/comm.h - comm.pcie: tensor-parallel collectives for 2..8 GPUs without NVLink (PCIe),
 * one process per rank. Contract, layouts and what ran where: ops/comm/comm.md.
 *
 * Two layers. A communicator (sk_comm) is the state: this rank's device buffer that the peers map
 * through CUDA IPC, the peers' mappings, the rank. The collectives are the op "comm.pcie"
 * (sparkinfer/op.h), a stateful op: its caps name the communicator (sk_comm_caps.comm), so a plan
 * runs on that communicator's buffers; a plan without one (JSON caps in manifests, sk-warm, the
 * warm-up record, sk_plan_create_json) resolves and caches the same kernels and binds, but does not
 * run. The direct calls below (sk_comm_allreduce, ...) bind and run on plans the communicator owns.
 *
 * Life cycle (every rank, same config except `rank`):
 *
 *   sk_comm_config cfg = SK_COMM_CONFIG_INIT;  cfg.rank = r;  cfg.world_size = n;
 *   sk_comm_create(&cfg, &c);              allocates this rank's shared buffer, resolves kernels
 *   sk_comm_export(c, blob, size, NULL);   SK_COMM_HANDLE_BYTES opaque bytes describing it
 *     ... the caller all-gathers the n blobs over anything (MPI, torch.distributed, a socket) ...
 *   sk_comm_connect(c, blobs, n, size);    maps every peer's buffer (cuIpcOpenMemHandle)
 *     or, instead of export + connect, sk_comm_connect_unix(c, "/tmp/job.sock") (built in)
 *   sk_comm_allreduce(c, in, out, stream)  ... any number of calls, graph capture allowed ...
 *     or a plan: caps.comm = c; sk_comm_plan_create(&caps, &p); bind once, sk_run every step
 *   sk_comm_poll_error(c, stream)          after a sync: SK_ERR_TIMEOUT if a peer never came
 *   sk_comm_destroy(c);                    unmaps the peers' buffers, frees this rank's
 *
 * Collectives are stream-ordered and collective: every rank issues the same sequence of calls
 * with the same shapes; a call returns once its work is enqueued (no host synchronisation, no
 * allocation, no compile, no host-side counters: a captured CUDA graph replays without any host
 * patching, because the kernels keep their own per-block sequence numbers in device memory).
 *
 * IPC: legacy CUDA IPC through the driver API (cuIpcGetMemHandle / cuIpcOpenMemHandle with
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS / cuIpcCloseMemHandle) on one cuMemAlloc per rank. It works
 * between processes on one GPU and between GPUs with peer access; it does not cross hosts.
 *
 * Timeouts, never hangs: every wait (the host rendezvous and every device-side flag wait) is
 * bounded by cfg.timeout_s. A device wait that runs out does not trap: it records the waiting
 * rank's missing peer in an error word and the kernel finishes early (its outputs are then
 * undefined); sk_comm_poll_error reports it as SK_ERR_TIMEOUT naming the peer. After a timeout the
 * communicator's sequence numbers disagree across ranks: destroy it (every call returns
 * SK_ERR_TIMEOUT until then).
 *
 * Thread safety: a communicator is used by one host thread at a time (its calls are enqueued on
 * the caller's streams in call order; issuing two collectives concurrently on different streams
 * of one communicator is undefined). Different communicators are independent.
 *
 * Errors: every function returns a status and sets the thread's message (sk_last_error_message):
 * SK_ERR_INVALID_ARGUMENT (NULL, a config field, a tensor: the message names it),
 * SK_ERR_UNSUPPORTED (a world size or shape this build cannot serve), SK_ERR_NO_DRIVER /
 * SK_ERR_NO_DEVICE / SK_ERR_CUDA (the driver call named), SK_ERR_TIMEOUT (a peer did not arrive),
 * SK_ERR_IO (a socket call failed; the message names it and errno).
 */
#ifndef SPARKINFER_COMM_H
#define SPARKINFER_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SK_COMM_MAX_RANKS 8        /**< largest world size */
#define SK_COMM_HANDLE_BYTES 128   /**< size of one exported handle blob */

/** Wire codec of the ring all-reduce (sk_comm_allreduce_ring): how a 128-value block travels
 *  (ops/comm/comm.md, Codecs). */
typedef enum sk_comm_codec {
  SK_COMM_CODEC_BF16 = 0,  /**< 256 bytes per 128 values, RNE from fp32 */
  SK_COMM_CODEC_E4M3 = 1,  /**< 128 E4M3 codes + one fp32 scale (amax / 448): 132 bytes */
  SK_COMM_CODEC_INT8 = 2,  /**< 128 symmetric int8 codes + one fp32 scale (amax / 127): 132 bytes */
  SK_COMM_CODEC_MXFP8 = 3, /**< 128 E4M3 codes + 4 E8M0 scales, one per 32 values: 132 bytes */
} sk_comm_codec;

/** Where the compressed codec is used (with SK_COMM_CODEC_BF16 the topology is ignored). */
typedef enum sk_comm_topology {
  SK_COMM_TOPO_AG = 0,   /**< BF16 reduce-scatter, coded all-gather */
  SK_COMM_TOPO_RING = 1, /**< coded in both phases, requantized at every hop */
  SK_COMM_TOPO_A2A = 2,  /**< quantize once, coded scatter with fp32 accumulation, coded broadcast */
} sk_comm_topology;

typedef struct sk_comm sk_comm;

typedef struct sk_comm_config {
  size_t struct_size;  /**< sizeof(sk_comm_config), set by SK_COMM_CONFIG_INIT */
  int rank;            /**< 0 <= rank < world_size */
  int world_size;      /**< 2, 4, 6 or 8 (3, 5 and 7 also work for the one-shot collectives) */
  int device;          /**< CUDA device ordinal of this rank; -1 = the current context's device */
  size_t max_bytes;    /**< largest payload of one collective, bytes per rank (default 8 MiB, at
                            most 1 GiB); sizes the shared buffer: about 5 * max_bytes + 64 KiB
                            (one-shot slots 2x, ring receive slots 2x + coded a2a slots ~1x,
                            coded stage ~0.5x) */
  double timeout_s;    /**< bound of every wait, host and device (default 30, > 0, <= 3600) */
  int max_blocks;      /**< CTAs of a one-shot kernel (default 0 = 36; 1..64) */
} sk_comm_config;

#define SK_COMM_CONFIG_INIT { sizeof(sk_comm_config), 0, 0, -1, (size_t)8 << 20, 30.0, 0 }

/** Create this rank's communicator: validates the config, allocates and zeroes the shared buffer
 *  on the device (cuMemAlloc; the config's device's primary context is made current if the thread
 *  has none) and resolves the kernels for the device's arch (may compile; after
 *  sk_freeze_kernel_resolution only kernels already resolved are found). Not connected yet.
 *  *comm is NULL on error. */
SK_API sk_status sk_comm_create(const sk_comm_config *config, sk_comm **comm);

/** Write this rank's handle blob (SK_COMM_HANDLE_BYTES bytes: a version tag, rank, world size,
 *  max_bytes, the process id and the CUipcMemHandle) to `blob`. `size` must be at least
 *  SK_COMM_HANDLE_BYTES; *needed (may be NULL) receives it. The bytes are opaque and position
 *  independent: send them to the peers any way you like. */
SK_API sk_status sk_comm_export(const sk_comm *comm, void *blob, size_t size, size_t *needed);

/** Connect: `blobs` holds world_size blobs of `blob_size` bytes each, indexed by rank (this rank's
 *  own included: it is checked to be the one it exported). Each blob is checked (tag, world size,
 *  max_bytes, rank = its index) and every peer's buffer is mapped. Fails with
 *  SK_ERR_INVALID_ARGUMENT naming the rank whose blob is wrong; on error nothing stays mapped and
 *  connect may be retried. Not collective in itself: no wait on the peers. */
SK_API sk_status sk_comm_connect(sk_comm *comm, const void *const *blobs, size_t num_blobs,
                                 size_t blob_size);

/** Export, all-gather the blobs through the Unix-domain socket `path` (rank 0 binds it and
 *  accepts the others; sk_rendezvous_allgather below), then sk_comm_connect. Bounded by
 *  cfg.timeout_s: SK_ERR_TIMEOUT naming the ranks that never arrived, SK_ERR_IO for a peer that
 *  died mid-exchange. */
SK_API sk_status sk_comm_connect_unix(sk_comm *comm, const char *path);

/** Unmap the peers' buffers, free this rank's buffer (NULL is a no-op). Synchronises the context
 *  first, so no enqueued collective still uses them. Peers may still have this rank's buffer
 *  mapped: destroy collectively (the memory is released when the last mapping goes). */
SK_API void sk_comm_destroy(sk_comm *comm);

/** One-shot all-reduce (sum): `in` and `out` are 1-D bf16 CUDA tensors [N] (view a [M, H] buffer
 *  as [M * H]), contiguous, 16-byte aligned, N a multiple of 8 with N * 2 <= max_bytes; `out` may
 *  alias `in`. The op's entry "allreduce"; bad tensors are refused by the op spine's validator
 *  (SK_ERR_INVALID_ARGUMENT naming the tensor and the rule). Every rank reads every peer's copy and sums in rank order 0..n-1 in fp32, then
 *  rounds to bf16 once: every rank's result is bitwise identical. For small messages (decode). */
SK_API sk_status sk_comm_allreduce(sk_comm *comm, const DLTensor *in, const DLTensor *out, void *stream);

/** One-shot all-reduce fused with the residual add and RMSNorm (per row of H):
 *    y = bf16(s + residual) with s the fp32 rank-order sum of x;  residual <- y;
 *    out = bf16(y * rsqrt(mean(y^2) + eps) * weight)   (fp32, from the bf16 y)
 *  x [M, H] bf16, residual [M, H] bf16 (read and written), weight [H] bf16, out [M, H] bf16, all
 *  contiguous and 16-byte aligned; H a multiple of 8 and at most 16384; M * H * 2 <= max_bytes;
 *  eps > 0. residual is bitwise identical on every rank, and so is out (every rank runs the same
 *  reduction tree). */
SK_API sk_status sk_comm_allreduce_add_rmsnorm(sk_comm *comm, const DLTensor *x, const DLTensor *residual,
                                               const DLTensor *weight, float eps, const DLTensor *out,
                                               void *stream);

/** Ring all-reduce (sum) for large messages (prefill): reduce-scatter + all-gather around the ring
 *  0 -> 1 -> ... -> n-1 -> 0 (or, for SK_COMM_TOPO_A2A, a quantise-once all-to-all), whose data
 *  moves by copy-engine copies (cuMemcpyAsync into the peers' mapped buffers, enqueued on
 *  `stream`) while small kernels wait on flags and reduce. `in`, `out`: 1-D bf16 CUDA tensors [n],
 *  contiguous, 16-byte aligned, n a multiple of 8 * world_size and n * 2 <= max_bytes; `out` may
 *  alias `in` (the op's entry "ring"). Wire modes (comm.md, "Ring all-reduce"):
 *  SK_COMM_CODEC_BF16 (topology ignored) or a compressed codec x topology. A compressed codec
 *  needs every shard (n / world_size values) to be a multiple of 128, else the call runs the BF16
 *  ring (same results as codec BF16). Every rank's `out` is bitwise identical in every mode.
 *  Graph capture allowed; the copies become memcpy nodes and nothing needs patching. A launch
 *  failure midway poisons the communicator (the peers then time out). */
SK_API sk_status sk_comm_allreduce_ring(sk_comm *comm, const DLTensor *in, const DLTensor *out, sk_comm_codec codec,
                                        sk_comm_topology topology, void *stream);

/* ---- the op: comm.pcie ------------------------------------------------------------------- */

/** Caps of a comm.pcie plan (sk_plan_create("comm.pcie", &caps, &plan)). JSON form (manifests):
 *  {"world_size": 4, "max_bytes": 8388608, "codec": "e4m3", "topology": "ring", "eps": 1e-6};
 *  codec "bf16" | "e4m3" | "int8" | "mxfp8", topology "ag" | "ring" | "a2a".
 *
 *  Entries (tensors in order; bf16 CUDA tensors, contiguous, 16-byte aligned):
 *   - "allreduce":   in [N], out [N]: the one-shot all-reduce (sk_comm_allreduce); N a multiple of
 *                    8, 8 <= N <= max_bytes / 2
 *   - "add_rmsnorm": x [M, H], residual [M, H] (read and written), weight [H], out [M, H]: the
 *                    fused one-shot all-reduce + add + RMSNorm with caps.eps
 *                    (sk_comm_allreduce_add_rmsnorm); H a multiple of 8 up to 16384, M * H <=
 *                    max_bytes / 2
 *   - "ring":        in [N], out [N]: the ring all-reduce in caps.codec x caps.topology
 *                    (sk_comm_allreduce_ring); N a multiple of 8 * world_size
 *  No scratch: the communicator's buffer is the op's memory. Run is collective: every rank runs the
 *  same entries with the same shapes in the same order (stream-ordered, graph capture allowed).
 *  Ownership: the plan keeps caps.comm; destroy its plans (and bindings) before the communicator.
 *  A plan's runs use the communicator, so the communicator's one-thread rule covers them too. */
typedef struct sk_comm_caps {
  size_t struct_size;        /**< sizeof(sk_comm_caps), set by SK_COMM_CAPS_INIT */
  int world_size;            /**< 2..8; 0 = caps.comm's (required without a communicator) */
  int64_t max_bytes;         /**< bound of one run's payload, bytes per rank; 0 = caps.comm's
                                  config.max_bytes (8 MiB without one); at most the communicator's */
  sk_comm_codec codec;       /**< "ring": the wire codec (default BF16) */
  sk_comm_topology topology; /**< "ring": where a compressed codec is used (default AG) */
  float eps;                 /**< "add_rmsnorm": > 0 (default 1e-6) */
  const char *arch;          /**< NULL = the current device's */
  sk_comm *comm;             /**< the communicator the plan runs on; NULL: compile and bind only
                                  (run returns SK_ERR_INVALID_ARGUMENT) */
} sk_comm_caps;

#define SK_COMM_CAPS_INIT { sizeof(sk_comm_caps), 0, 0, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, 1e-6f, NULL, NULL }

/** sk_plan_create("comm.pcie", caps, plan). Errors as sk_plan_create's, and
 *  SK_ERR_INVALID_ARGUMENT when caps disagree with caps.comm (world size, a larger max_bytes) or
 *  a field is out of range (the message names it). *plan is NULL on error. Any thread may create
 *  plans; runs of a plan on a communicator follow the communicator's one-thread rule. */
static inline sk_status sk_comm_plan_create(const sk_comm_caps *caps, sk_plan **plan) {
  return sk_plan_create("comm.pcie", caps, plan);
}

/** Read the communicator's device error word (a stream-ordered copy on `stream`, then a sync of
 *  that stream): SK_OK, or SK_ERR_TIMEOUT naming the peer a kernel waited for in vain. */
SK_API sk_status sk_comm_poll_error(sk_comm *comm, void *stream);

/** This rank and the world size (-1 for NULL). */
SK_API int sk_comm_rank(const sk_comm *comm);
SK_API int sk_comm_world_size(const sk_comm *comm);

/* ---- rendezvous ---------------------------------------------------------------------------- */

/** All-gather one opaque blob of `size` bytes (1..65536, the same on every rank) per rank through
 *  a Unix-domain socket at `path` (at most 107 bytes; a filesystem path, or "@name" for the Linux
 *  abstract namespace). Rank 0 binds (replacing a stale socket file), accepts world_size - 1
 *  connections, checks each hello (protocol tag, rank, world size, size; duplicates refused),
 *  and sends everyone the blobs in rank order; the others connect (retrying until rank 0 listens)
 *  and send theirs. `all` receives world_size * size bytes, rank r's blob at r * size. Bounded
 *  by timeout_s: SK_ERR_TIMEOUT names the ranks that never connected, SK_ERR_IO a peer that
 *  closed mid-exchange, SK_ERR_INVALID_ARGUMENT a mismatched hello. Rank 0 removes the socket
 *  file when done. Uses no GPU. Thread safety: any thread; distinct paths are independent. */
SK_API sk_status sk_rendezvous_allgather(const char *path, int rank, int world_size, const void *blob,
                                         size_t size, void *all, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_COMM_H */
