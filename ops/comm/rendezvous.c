/* ops/comm/rendezvous.c - all-gather of one opaque blob per rank over a Unix-domain stream socket
 * (sk_rendezvous_allgather, sparkinfer/comm.h). Rank 0 binds and accepts; the others connect.
 *
 * Wire (host byte order: every rank is on this host):
 *   hello  (rank r -> 0):  u32 magic 'SKRV', u32 version, u32 rank, u32 world, u64 size, blob
 *   reply  (0 -> rank r):  u32 magic, u32 status (0 = ok, else an sk_status), char msg[200],
 *                          then, when ok, world * size bytes
 * Every read, write, accept and connect runs under one deadline (poll), so nothing blocks past
 * timeout_s; a failure on rank 0 is sent to every rank already connected, so they report rank 0's
 * reason rather than a bare timeout. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "sparkinfer/comm.h"

#define RV_MAGIC 0x56524B53u /* "SKRV" */
#define RV_VERSION 1u
#define RV_MAX_BLOB 65536u
#define RV_MSG 200

typedef struct rv_hello {
  uint32_t magic, version, rank, world;
  uint64_t size;
} rv_hello;

typedef struct rv_reply {
  uint32_t magic, status;
  char msg[RV_MSG];
} rv_reply;

/* Milliseconds left until `deadline` (sk_now_seconds), at least 0. */
static int ms_left(double deadline) {
  double left = deadline - sk_now_seconds();
  return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

/* 1: ready, 0: deadline passed, -1: poll failed (errno). */
static int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, ms_left(deadline));
    if (r > 0) return 1;
    if (r == 0) return sk_now_seconds() >= deadline ? 0 : wait_fd(fd, events, deadline);
    if (errno != EINTR) return -1;
  }
}

/* Read or write exactly n bytes before the deadline. 0: done; else a status with the message
 * "<what>: ..." set. */
static sk_status io_all(int fd, void *buf, size_t n, int writing, double deadline, const char *what) {
  char *p = buf;
  while (n) {
    int w = wait_fd(fd, writing ? POLLOUT : POLLIN, deadline);
    if (w == 0) return sk_set_error(SK_ERR_TIMEOUT, "%s: timed out", what);
    if (w < 0) return sk_set_error(SK_ERR_IO, "%s: poll: %s", what, strerror(errno));
    ssize_t r = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return sk_set_error(SK_ERR_IO, "%s: %s", what, strerror(errno));
    if (r == 0) return sk_set_error(SK_ERR_IO, "%s: the peer closed the connection (did it exit?)", what);
    p += r;
    n -= (size_t)r;
  }
  return SK_OK;
}

/* The socket address of `path` ("@name": the abstract namespace). */
static sk_status make_addr(const char *path, struct sockaddr_un *a, socklen_t *len) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof a->sun_path)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_rendezvous_allgather: path \"%s\" must have 1..%zu bytes", path,
                        sizeof a->sun_path - 1);
  memcpy(a->sun_path, path, n);
  if (path[0] == '@') a->sun_path[0] = 0;
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
  return SK_OK;
}

static void send_reply(int fd, sk_status status, const char *msg, const void *all, size_t bytes, double deadline) {
  rv_reply r = {RV_MAGIC, (uint32_t)status, {0}};
  if (msg) snprintf(r.msg, sizeof r.msg, "%s", msg);
  if (io_all(fd, &r, sizeof r, 1, deadline, "reply") == SK_OK && status == SK_OK)
    io_all(fd, (void *)all, bytes, 1, deadline, "reply blobs");
}

static sk_status root(const char *path, int world, const void *blob, size_t size, char *all, double timeout_s) {
  struct sockaddr_un addr;
  socklen_t alen;
  SK_TRY(make_addr(path, &addr, &alen));
  const double deadline = sk_now_seconds() + timeout_s;
  int fds[SK_COMM_MAX_RANKS] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (ls < 0) return sk_set_error(SK_ERR_IO, "rendezvous %s: socket: %s", path, strerror(errno));
  /* A stale socket file from a dead job would make bind fail: remove it (sockets only). */
  struct stat st;
  if (path[0] != '@' && stat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
  sk_status s = SK_OK;
  if (bind(ls, (struct sockaddr *)&addr, alen) || listen(ls, SK_COMM_MAX_RANKS)) {
    s = sk_set_error(SK_ERR_IO, "rendezvous %s: rank 0 cannot listen: %s", path, strerror(errno));
    close(ls);
    return s;
  }
  memcpy(all, blob, size);
  int arrived = 1;
  char msg[RV_MSG] = "";
  while (arrived < world && s == SK_OK) {
    int w = wait_fd(ls, POLLIN, deadline);
    if (w <= 0) {
      char missing[64] = "";
      size_t o = 0;
      for (int r = 1; r < world; r++)
        if (fds[r] < 0) o += (size_t)snprintf(missing + o, sizeof missing - o, "%s%d", o ? ", " : "", r);
      s = w == 0 ? sk_set_error(SK_ERR_TIMEOUT, "rendezvous %s: rank(s) %s of %d did not connect within %g s", path, missing, world,
                                timeout_s)
                 : sk_set_error(SK_ERR_IO, "rendezvous %s: poll: %s", path, strerror(errno));
      break;
    }
    int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      s = sk_set_error(SK_ERR_IO, "rendezvous %s: accept: %s", path, strerror(errno));
      break;
    }
    rv_hello h;
    s = io_all(fd, &h, sizeof h, 0, deadline, "hello");
    if (s != SK_OK) {
      s = sk_wrap_error(s, "rendezvous %s: a peer connected but its hello did not arrive", path);
      close(fd);
      break;
    }
    if (h.magic != RV_MAGIC || h.version != RV_VERSION) {
      close(fd); /* not one of ours: keep waiting for the real peers */
      continue;
    }
    if (h.world != (uint32_t)world || h.size != size || h.rank == 0 || h.rank >= (uint32_t)world || fds[h.rank] >= 0) {
      s = sk_set_error(SK_ERR_INVALID_ARGUMENT,
                       "rendezvous %s: rank %u says world %u, blob %llu bytes; rank 0 has world %d, blob %zu bytes%s", path,
                       h.rank, h.world, (unsigned long long)h.size, world, size,
                       h.rank < (uint32_t)world && h.rank && fds[h.rank] >= 0 ? " (rank already connected)" : "");
      snprintf(msg, sizeof msg, "%s", sk_last_error_message());
      send_reply(fd, s, msg, NULL, 0, deadline);
      close(fd);
      break;
    }
    s = io_all(fd, all + (size_t)h.rank * size, size, 0, deadline, "blob");
    if (s != SK_OK) {
      s = sk_wrap_error(s, "rendezvous %s: rank %u died or stalled mid-exchange", path, h.rank);
      close(fd);
      break;
    }
    fds[h.rank] = fd;
    arrived++;
  }
  if (s != SK_OK && !msg[0]) snprintf(msg, sizeof msg, "%s", sk_last_error_message());
  /* Tell every connected rank the outcome (a short grace period past the deadline for it). */
  const double reply_deadline = sk_now_seconds() + (s == SK_OK ? timeout_s : 1.0);
  for (int r = 1; r < world; r++) {
    if (fds[r] < 0) continue;
    send_reply(fds[r], s, msg, all, (size_t)world * size, reply_deadline);
    close(fds[r]);
  }
  close(ls);
  if (path[0] != '@') unlink(path);
  if (s != SK_OK) return sk_set_error(s, "%s", msg);
  return SK_OK;
}

static sk_status peer(const char *path, int rank, int world, const void *blob, size_t size, char *all, double timeout_s) {
  struct sockaddr_un addr;
  socklen_t alen;
  SK_TRY(make_addr(path, &addr, &alen));
  const double deadline = sk_now_seconds() + timeout_s;
  int fd = -1;
  for (;;) { /* rank 0 may not listen yet: retry until the deadline */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sk_set_error(SK_ERR_IO, "rendezvous %s: socket: %s", path, strerror(errno));
    if (connect(fd, (struct sockaddr *)&addr, alen) == 0) break;
    int e = errno;
    close(fd);
    if (e != ENOENT && e != ECONNREFUSED && e != EAGAIN && e != EINTR)
      return sk_set_error(SK_ERR_IO, "rendezvous %s: rank %d cannot connect: %s", path, rank, strerror(e));
    if (sk_now_seconds() >= deadline)
      return sk_set_error(SK_ERR_TIMEOUT, "rendezvous %s: rank %d found no rank 0 listening within %g s", path, rank, timeout_s);
    usleep(5000);
  }
  rv_hello h = {RV_MAGIC, RV_VERSION, (uint32_t)rank, (uint32_t)world, (uint64_t)size};
  rv_reply r;
  sk_status sent = io_all(fd, &h, sizeof h, 1, deadline, "hello");
  if (sent == SK_OK) sent = io_all(fd, (void *)blob, size, 1, deadline, "blob");
  char send_msg[RV_MSG + 64] = "";
  if (sent != SK_OK) snprintf(send_msg, sizeof send_msg, "%s", sk_last_error_message());
  /* Rank 0 answers by its own deadline, later than ours by up to the start skew: wait one more
   * timeout for the answer, as it always comes or the connection closes. A refusal can arrive
   * before our blob is sent (rank 0 replies to the hello and closes: the send then fails with
   * EPIPE), so the reply is read after a failed send too, briefly. */
  sk_status s = io_all(fd, &r, sizeof r, 0, sent == SK_OK ? deadline + timeout_s + 1.0 : sk_now_seconds() + 1.0,
                       "reply from rank 0");
  if (sent != SK_OK && !(s == SK_OK && r.magic == RV_MAGIC && r.status != 0)) {
    close(fd);
    return sk_set_error(sent, "rendezvous %s: rank %d: %s", path, rank, send_msg);
  }
  if (s == SK_OK && (r.magic != RV_MAGIC))
    s = sk_set_error(SK_ERR_IO, "rendezvous %s: rank %d got a malformed reply", path, rank);
  else if (s == SK_OK && r.status != 0) {
    r.msg[RV_MSG - 1] = 0;
    s = sk_set_error((sk_status)r.status, "rendezvous %s: rank 0 reports: %s", path, r.msg);
  } else if (s == SK_OK) s = io_all(fd, all, (size_t)world * size, 0, deadline + timeout_s + 1.0, "blobs from rank 0");
  else s = sk_wrap_error(s, "rendezvous %s: rank %d", path, rank);
  close(fd);
  return s;
}

SK_API sk_status sk_rendezvous_allgather(const char *path, int rank, int world_size, const void *blob, size_t size,
                                         void *all, double timeout_s) {
  if (!path || !blob || !all)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_rendezvous_allgather: path, blob and all must not be NULL");
  if (world_size < 1 || world_size > SK_COMM_MAX_RANKS || rank < 0 || rank >= world_size)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_rendezvous_allgather: rank %d of world %d (world 1..%d)", rank,
                        world_size, SK_COMM_MAX_RANKS);
  if (size == 0 || size > RV_MAX_BLOB)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_rendezvous_allgather: blob size %zu (1..%u)", size, RV_MAX_BLOB);
  if (!(timeout_s > 0 && timeout_s <= 3600))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_rendezvous_allgather: timeout %g s (0 < t <= 3600)", timeout_s);
  if (world_size == 1) {
    memcpy(all, blob, size);
    return SK_OK;
  }
  return rank == 0 ? root(path, world_size, blob, size, all, timeout_s)
                   : peer(path, rank, world_size, blob, size, all, timeout_s);
}
