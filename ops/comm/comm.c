/* ops/comm/comm.c - the comm.pcie communicator (sparkinfer/comm.h): one device buffer per rank
 * (layout: comm/layout.cuh) shared through legacy CUDA IPC, the handle blob, its plans and the
 * device error word. The collectives (the op and its direct calls): pcie.c. */
#include <dlpack/dlpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_host.h"
#include "comm/layout.cuh"
#include "comm/ring_plan.h"
#include "runtime.h"

#define DEFAULT_BLOCKS 36  /* upstream's one-shot needs 36 SMs */
#define MAX_BYTES_LIMIT SK_COMM_MAX_BYTES_LIMIT


/* ---- config and blob (no GPU) --------------------------------------------------------------- */

sk_status sk_comm_config_check(const sk_comm_config *in, sk_comm_config *out) {
  if (!in || !out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config is NULL");
  if (in->struct_size < sizeof(size_t) || in->struct_size > 4096)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config.struct_size %zu (initialise with SK_COMM_CONFIG_INIT)",
                        in->struct_size);
  const sk_comm_config defaults = SK_COMM_CONFIG_INIT;
  *out = defaults;
  memcpy(out, in, in->struct_size < sizeof *out ? in->struct_size : sizeof *out);
  for (size_t i = sizeof *out; i < in->struct_size; i++)
    if (((const unsigned char *)in)[i])
      return sk_set_error(SK_ERR_UNSUPPORTED, "comm.pcie: config has fields this library does not know (struct_size %zu > %zu)",
                          in->struct_size, sizeof *out);
  out->struct_size = sizeof *out;
  if (out->world_size < 2 || out->world_size > SK_COMM_MAX_RANKS)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config.world_size %d (2..%d)", out->world_size, SK_COMM_MAX_RANKS);
  if (out->rank < 0 || out->rank >= out->world_size)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config.rank %d of world %d", out->rank, out->world_size);
  if (out->device < -1) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config.device %d (-1 or an ordinal)", out->device);
  if (out->max_bytes < 16 || out->max_bytes > MAX_BYTES_LIMIT || out->max_bytes % 16)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config.max_bytes %zu (a multiple of 16 in 16..%zu)", out->max_bytes,
                        MAX_BYTES_LIMIT);
  if (!(out->timeout_s > 0 && out->timeout_s <= 3600))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config.timeout_s %g (0 < t <= 3600)", out->timeout_s);
  if (out->max_blocks == 0) out->max_blocks = DEFAULT_BLOCKS;
  if (out->max_blocks < 1 || out->max_blocks > SK_COMM_LAYOUT_MAX_BLOCKS)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: config.max_blocks %d (0 = %d, or 1..%d)", out->max_blocks,
                        DEFAULT_BLOCKS, SK_COMM_LAYOUT_MAX_BLOCKS);
  return SK_OK;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static const char blob_tag[8] = {'S', 'K', 'C', 'O', 'M', 'M', '0', '1'};

void sk_comm_blob_write(const sk_comm_blob *b, unsigned char out[SK_COMM_HANDLE_BYTES]) {
  memset(out, 0, SK_COMM_HANDLE_BYTES);
  memcpy(out, blob_tag, 8);
  put32(out + 8, SK_COMM_BLOB_VERSION);
  put32(out + 12, (uint32_t)b->rank);
  put32(out + 16, (uint32_t)b->world);
  put32(out + 20, (uint32_t)b->pid);
  put32(out + 24, (uint32_t)b->max_bytes);
  put32(out + 28, (uint32_t)(b->max_bytes >> 32));
  put32(out + 32, (uint32_t)b->blocks);
  memcpy(out + 40, b->ipc, 64);
}

sk_status sk_comm_blob_read(const unsigned char *blob, size_t size, int index, int world, uint64_t max_bytes, int blocks,
                            sk_comm_blob *out) {
  if (!blob) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: blob of rank %d is NULL", index);
  if (size < SK_COMM_HANDLE_BYTES)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: blobs of %zu bytes (SK_COMM_HANDLE_BYTES = %d)", size,
                        SK_COMM_HANDLE_BYTES);
  if (memcmp(blob, blob_tag, 8) || get32(blob + 8) != SK_COMM_BLOB_VERSION)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: blob %d is not a comm.pcie handle of version %u (from sk_comm_export?)",
                        index, SK_COMM_BLOB_VERSION);
  out->rank = (int)get32(blob + 12);
  out->world = (int)get32(blob + 16);
  out->pid = (int)get32(blob + 20);
  out->max_bytes = get32(blob + 24) | (uint64_t)get32(blob + 28) << 32;
  out->blocks = (int)get32(blob + 32);
  memcpy(out->ipc, blob + 40, 64);
  if (out->rank != index)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: blob %d holds rank %d's handle (blobs go in rank order)", index, out->rank);
  if (out->world != world)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "comm.pcie: rank %d has world size %d, this rank %d", index, out->world, world);
  if (out->max_bytes != max_bytes || out->blocks != blocks)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT,
                        "comm.pcie: rank %d has max_bytes %llu and %d blocks, this rank %llu and %d (every rank needs the same config)",
                        index, (unsigned long long)out->max_bytes, out->blocks, (unsigned long long)max_bytes, blocks);
  return SK_OK;
}

/* ---- life cycle -------------------------------------------------------------------------------- */

static sk_status need(void *fn, const char *name) {
  if (!fn) return sk_set_error(SK_ERR_NO_DRIVER, "comm.pcie: the CUDA driver lacks %s", name);
  return SK_OK;
}

static sk_status make_current(int device) {
  if (device < 0) return sk_driver_ensure_context();
  int dev = 0;
  void *ctx = NULL;
  SK_CU(sk_cu.cuDeviceGet(&dev, device), "cuDeviceGet");
  SK_CU(sk_cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  SK_CU(sk_cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return SK_OK;
}

sk_status sk_comm_plans_create(sk_comm *c, const char *arch) {
  for (int k = 0; k < 4; k++)
    for (int t = 0; t < (k ? 3 : 1); t++) {
      sk_comm_caps caps = SK_COMM_CAPS_INIT;
      caps.comm = c;
      caps.arch = arch;
      caps.codec = (sk_comm_codec)k;
      caps.topology = (sk_comm_topology)t;
      const int m = sk_comm_mode_index(caps.codec, caps.topology);
      SK_TRY(sk_comm_plan_create(&caps, &c->plan[m]));
      SK_TRY(sk_binding_create(c->plan[m], "ring", &c->ring[m]));
    }
  SK_TRY(sk_binding_create(c->plan[0], "allreduce", &c->allreduce));
  return sk_binding_create(c->plan[0], "add_rmsnorm", &c->rmsnorm);
}

void sk_comm_plans_destroy(sk_comm *c) {
  sk_binding_destroy(c->allreduce), sk_binding_destroy(c->rmsnorm);
  c->allreduce = c->rmsnorm = NULL;
  for (int k = 0; k < SK_COMM_MODES; k++) {
    sk_binding_destroy(c->ring[k]), sk_plan_destroy(c->plan[k]);
    c->ring[k] = NULL, c->plan[k] = NULL;
  }
}

SK_API sk_status sk_comm_create(const sk_comm_config *config, sk_comm **comm) {
  if (!comm) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_create: comm is NULL");
  *comm = NULL;
  sk_comm_config cfg;
  SK_TRY(sk_comm_config_check(config, &cfg));
  SK_TRY(sk_driver_ensure());
  SK_TRY(need((void *)sk_cu.cuMemAlloc, "cuMemAlloc"));
  SK_TRY(need((void *)sk_cu.cuIpcOpenMemHandle, "cuIpcOpenMemHandle"));
  SK_TRY(need((void *)sk_cu.cuIpcGetMemHandle, "cuIpcGetMemHandle"));
  SK_TRY(need((void *)sk_cu.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync"));
  SK_TRY(need((void *)sk_cu.cuIpcCloseMemHandle, "cuIpcCloseMemHandle"));
  SK_TRY(need((void *)sk_cu.cuMemFree, "cuMemFree"));
  SK_TRY(need((void *)sk_cu.cuMemsetD8, "cuMemsetD8"));
  SK_TRY(need((void *)sk_cu.cuMemcpyHtoD, "cuMemcpyHtoD"));
  SK_TRY(need((void *)sk_cu.cuStreamSynchronize, "cuStreamSynchronize"));
  SK_TRY(need((void *)sk_cu.cuMemcpyAsync, "cuMemcpyAsync"));
  SK_TRY(make_current(cfg.device));
  sk_comm *c = calloc(1, sizeof *c);
  if (!c) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "sk_comm_create: out of host memory");
  c->cfg = cfg;
  sk_ring_plan layout;
  sk_ring_layout(cfg.world_size, cfg.max_bytes, &layout); /* one-shot slots, then the ring area */
  c->buf_bytes = layout.buffer_bytes;
  sk_status s = sk_comm_plans_create(c, NULL);
  sk_cu_result r = 0;
  if (s == SK_OK && (r = sk_cu.cuMemAlloc(&c->buf, c->buf_bytes)) != 0) s = sk_cuda_error(r, "cuMemAlloc (comm.pcie buffer)");
  if (s == SK_OK && (r = sk_cu.cuMemsetD8(c->buf, 0, c->buf_bytes)) != 0) s = sk_cuda_error(r, "cuMemsetD8");
  if (s == SK_OK && (r = sk_cu.cuIpcGetMemHandle(&c->ipc, c->buf)) != 0) s = sk_cuda_error(r, "cuIpcGetMemHandle");
  if (s != SK_OK) {
    s = sk_wrap_error(s, "sk_comm_create (rank %d of %d)", cfg.rank, cfg.world_size);
    if (c->buf) sk_cu.cuMemFree(c->buf);
    sk_comm_plans_destroy(c);
    free(c);
    return s;
  }
  *comm = c;
  return SK_OK;
}

SK_API sk_status sk_comm_export(const sk_comm *comm, void *blob, size_t size, size_t *needed) {
  if (needed) *needed = SK_COMM_HANDLE_BYTES;
  if (!comm || !blob) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_export: comm and blob must not be NULL");
  if (size < SK_COMM_HANDLE_BYTES)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_export: %zu bytes, need SK_COMM_HANDLE_BYTES = %d", size, SK_COMM_HANDLE_BYTES);
  sk_comm_blob b = {comm->cfg.rank, comm->cfg.world_size, (int)getpid(), comm->cfg.max_blocks, comm->cfg.max_bytes, {0}};
  memcpy(b.ipc, comm->ipc.reserved, 64);
  sk_comm_blob_write(&b, blob);
  return SK_OK;
}

static void unmap_peers(sk_comm *c) {
  for (int r = 0; r < c->cfg.world_size; r++) {
    if (r != c->cfg.rank && c->peer[r]) sk_cu.cuIpcCloseMemHandle(c->peer[r]);
    c->peer[r] = 0;
  }
  c->connected = 0;
}

SK_API sk_status sk_comm_connect(sk_comm *comm, const void *const *blobs, size_t num_blobs, size_t blob_size) {
  if (!comm || !blobs) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_connect: comm and blobs must not be NULL");
  const int world = comm->cfg.world_size, rank = comm->cfg.rank;
  if (comm->connected) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_connect: rank %d is already connected", rank);
  if (num_blobs != (size_t)world)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_connect: %zu blobs for world size %d", num_blobs, world);
  sk_comm_blob b[SK_COMM_MAX_RANKS];
  for (int r = 0; r < world; r++)
    SK_TRY(sk_comm_blob_read(blobs[r], blob_size, r, world, comm->cfg.max_bytes, comm->cfg.max_blocks, &b[r]));
  if (memcmp(b[rank].ipc, comm->ipc.reserved, 64) || b[rank].pid != (int)getpid())
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_connect: blob %d is not the one this rank exported", rank);
  SK_TRY(make_current(comm->cfg.device));
  sk_status s = SK_OK;
  for (int r = 0; r < world && s == SK_OK; r++) {
    if (r == rank) {
      comm->peer[r] = comm->buf;
      continue;
    }
    sk_cu_ipc_handle h;
    memcpy(h.reserved, b[r].ipc, 64);
    sk_cu_result e = sk_cu.cuIpcOpenMemHandle(&comm->peer[r], h, 1u /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */);
    if (e != 0) {
      comm->peer[r] = 0;
      s = sk_wrap_error(sk_cuda_error(e, "cuIpcOpenMemHandle"), "sk_comm_connect: rank %d cannot map rank %d's buffer (pid %d)", rank,
                        r, b[r].pid);
    }
  }
  sk_cu_result e;
  if (s == SK_OK && (e = sk_cu.cuMemcpyHtoD(comm->buf + SK_COMM_PEERS_OFFSET, comm->peer, sizeof comm->peer)) != 0)
    s = sk_cuda_error(e, "cuMemcpyHtoD (comm.pcie rank table)");
  if (s != SK_OK) {
    unmap_peers(comm);
    return s;
  }
  comm->connected = 1;
  return SK_OK;
}

SK_API sk_status sk_comm_connect_unix(sk_comm *comm, const char *path) {
  if (!comm) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_connect_unix: comm is NULL");
  unsigned char mine[SK_COMM_HANDLE_BYTES], all[SK_COMM_MAX_RANKS * SK_COMM_HANDLE_BYTES];
  SK_TRY(sk_comm_export(comm, mine, sizeof mine, NULL));
  SK_TRY(sk_rendezvous_allgather(path, comm->cfg.rank, comm->cfg.world_size, mine, sizeof mine, all, comm->cfg.timeout_s));
  const void *blobs[SK_COMM_MAX_RANKS];
  for (int r = 0; r < comm->cfg.world_size; r++) blobs[r] = all + (size_t)r * SK_COMM_HANDLE_BYTES;
  return sk_comm_connect(comm, blobs, (size_t)comm->cfg.world_size, SK_COMM_HANDLE_BYTES);
}

SK_API void sk_comm_destroy(sk_comm *comm) {
  if (!comm) return;
  if (make_current(comm->cfg.device) == SK_OK && sk_cu.cuCtxSynchronize) sk_cu.cuCtxSynchronize();
  unmap_peers(comm);
  if (comm->buf) sk_cu.cuMemFree(comm->buf);
  sk_comm_plans_destroy(comm);
  free(comm);
}

sk_status sk_comm_ready(const sk_comm *c, const char *fn) {
  if (!c) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
  if (c->poisoned)
    return sk_set_error(SK_ERR_TIMEOUT, "%s: rank %d's communicator timed out earlier; destroy it", fn, c->cfg.rank);
  if (!c->connected) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: rank %d is not connected (sk_comm_connect)", fn, c->cfg.rank);
  return SK_OK;
}

SK_API sk_status sk_comm_poll_error(sk_comm *comm, void *stream) {
  if (!comm) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_comm_poll_error: comm is NULL");
  if (comm->poisoned) return sk_set_error(SK_ERR_TIMEOUT, "sk_comm_poll_error: rank %d's communicator timed out earlier", comm->cfg.rank);
  SK_CU(sk_cu.cuMemcpyDtoHAsync(comm->err_host, comm->buf + SK_COMM_ERROR_OFFSET, sizeof comm->err_host, stream), "cuMemcpyDtoHAsync");
  SK_CU(sk_cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
  if (comm->err_host[0] == 0) return SK_OK;
  comm->poisoned = 1;
  return sk_set_error(SK_ERR_TIMEOUT,
                      "comm.pcie: rank %d waited more than %g s for rank %u in a collective (dead, absent, or not issuing the "
                      "same collectives); the communicator is unusable, destroy it",
                      comm->cfg.rank, comm->cfg.timeout_s, comm->err_host[1]);
}

SK_API int sk_comm_rank(const sk_comm *comm) { return comm ? comm->cfg.rank : -1; }
SK_API int sk_comm_world_size(const sk_comm *comm) { return comm ? comm->cfg.world_size : -1; }

