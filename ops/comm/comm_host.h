/* ops/comm/comm_host.h - comm.pcie host internals that the CPU tests reach: the handle blob's
 * format (written by sk_comm_export, checked by sk_comm_connect) and the config rules. */
#ifndef SK_COMM_HOST_H
#define SK_COMM_HOST_H

#include <stdint.h>

#include "sparkinfer/comm.h"

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
