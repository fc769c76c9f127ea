/* ops/comm/comm_host.h - comm.pcie host internals: the communicator (comm.c) as the op (pcie.c)
 * sees it, and what the CPU tests reach: the handle blob's format (written by sk_comm_export,
 * checked by sk_comm_connect) and the config rules. */
#ifndef SK_COMM_HOST_H
#define SK_COMM_HOST_H

#include <stdint.h>

#include "runtime.h" /* sk_cu_ipc_handle */
#include "sparkinfer/comm.h"

#define SK_COMM_MAX_BYTES_LIMIT ((size_t)1 << 30)
#define SK_COMM_DEFAULT_MAX_BYTES ((size_t)8 << 20) /* sk_comm_config's and an offline plan's */
#define SK_COMM_MAX_HIDDEN 16384

/* The ten wire modes: BF16, then codec x topology for the three coded codecs. */
#define SK_COMM_MODES 10
static inline int sk_comm_mode_index(sk_comm_codec codec, sk_comm_topology topology) {
  return codec == SK_COMM_CODEC_BF16 ? 0 : 1 + ((int)codec - 1) * 3 + (int)topology;
}

struct sk_comm {
  sk_comm_config cfg;
  unsigned long long buf;                       /* this rank's buffer (cuMemAlloc) */
  size_t buf_bytes;
  sk_cu_ipc_handle ipc;
  unsigned long long peer[SK_COMM_MAX_RANKS];   /* every rank's buffer as mapped here */
  int connected, poisoned;
  /* the direct calls' comm.pcie plans, one per wire mode, and their bindings (made at create) */
  sk_plan *plan[SK_COMM_MODES];
  sk_binding *allreduce, *rmsnorm;              /* on plan[0] */
  sk_binding *ring[SK_COMM_MODES];              /* entry "ring" of plan[m] */
  uint32_t err_host[2];
};

/* The plans of the direct calls, one per wire mode for arch (NULL: the device's), and their
 * bindings (sk_comm_create makes them: kernels resolve and host memory is allocated there, so the
 * calls allocate nothing and a freeze after create leaves every call working); destroy frees
 * them (any of them may be NULL). */
sk_status sk_comm_plans_create(sk_comm *c, const char *arch);
void sk_comm_plans_destroy(sk_comm *c);

/* Ready for a collective: connected, not poisoned. `fn` names the caller in the message. */
sk_status sk_comm_ready(const sk_comm *c, const char *fn);

/* The blob, little-endian on this host: "SKCOMM01", u32 version, u32 rank, u32 world, u32 pid,
 * u64 max_bytes, u32 blocks, u32 0, 64 bytes CUipcMemHandle; zero padding to
 * SK_COMM_HANDLE_BYTES. */
#define SK_COMM_BLOB_VERSION 1u
typedef struct sk_comm_blob {
  int rank, world, pid, blocks;
  uint64_t max_bytes;
  unsigned char ipc[64];
} sk_comm_blob;

void sk_comm_blob_write(const sk_comm_blob *b, unsigned char out[SK_COMM_HANDLE_BYTES]);
/* Parse and check blob number `index` against this communicator's world, max_bytes and blocks.
 * SK_ERR_INVALID_ARGUMENT naming the rank and the field that disagrees. */
sk_status sk_comm_blob_read(const unsigned char *blob, size_t size, int index, int world, uint64_t max_bytes,
                            int blocks, sk_comm_blob *out);

/* Check a config and fill the defaults (max_blocks 0 -> 36) into *out. */
sk_status sk_comm_config_check(const sk_comm_config *in, sk_comm_config *out);

#endif
