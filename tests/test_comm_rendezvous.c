/* sk_rendezvous_allgather (ops/comm/rendezvous.c) across forked processes: 2-4 ranks exchange
 * blobs (filesystem and abstract socket names, ranks starting in any order), and every failure
 * ends in bounded time with a status and a message naming the cause: a rank that never arrives,
 * no rank 0, a peer that dies mid-exchange, mismatched world sizes or blob sizes, bad arguments. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "base.h"
#include "sparkinfer/comm.h"
#include "testutil.h"

#define BLOB 100

static void fill_blob(unsigned char *b, int rank, size_t n) {
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(rank * 37 + i * 7 + 1);
}

/* Child body: run one rank; exit code 0 when the result is as expected. `want` is the expected
 * status; for SK_OK every blob is checked, otherwise the message must contain `needle`. */
static int run_rank(const char *path, int rank, int world, size_t size, int delay_ms, double timeout, sk_status want,
                    const char *needle) {
  if (delay_ms) usleep((useconds_t)delay_ms * 1000);
  unsigned char blob[4096], all[8 * 4096];
  fill_blob(blob, rank, size);
  double t0 = sk_now_seconds();
  sk_status s = sk_rendezvous_allgather(path, rank, world, blob, size, all, timeout);
  double took = sk_now_seconds() - t0;
  if (s != want) {
    fprintf(stderr, "rank %d: status %s (want %s): %s\n", rank, sk_status_string(s), sk_status_string(want), sk_last_error_message());
    return 1;
  }
  if (took > 2 * timeout + 2.0) {
    fprintf(stderr, "rank %d: took %.2f s with a %.2f s timeout\n", rank, took, timeout);
    return 2;
  }
  if (s != SK_OK) {
    if (needle && !strstr(sk_last_error_message(), needle)) {
      fprintf(stderr, "rank %d: message lacks \"%s\": %s\n", rank, needle, sk_last_error_message());
      return 3;
    }
    return 0;
  }
  for (int r = 0; r < world; r++) {
    unsigned char want_blob[4096];
    fill_blob(want_blob, r, size);
    if (memcmp(all + (size_t)r * size, want_blob, size)) {
      fprintf(stderr, "rank %d: blob of rank %d differs\n", rank, r);
      return 4;
    }
  }
  return 0;
}

typedef struct {
  int rank, world, delay_ms;
  size_t size;
  sk_status want;
  const char *needle;
} rank_spec;

/* Fork one child per spec, wait for all (killing them after 30 s), expect every exit code 0. */
static void run_ranks(const char *path, const rank_spec *specs, int n, double timeout) {
  pid_t pids[8];
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    cr_assert_geq(pids[i], 0);
    if (pids[i] == 0)
      _exit(run_rank(path, specs[i].rank, specs[i].world, specs[i].size ? specs[i].size : BLOB, specs[i].delay_ms, timeout,
                     specs[i].want, specs[i].needle));
  }
  double deadline = sk_now_seconds() + 30;
  for (int i = 0; i < n; i++) {
    int st = 0;
    pid_t r;
    while ((r = waitpid(pids[i], &st, WNOHANG)) == 0 && sk_now_seconds() < deadline) usleep(2000);
    if (r == 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], &st, 0);
      cr_assert_fail("rank spec %d hung", i);
    }
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank spec %d (rank %d) failed: status %d", i, specs[i].rank, st);
  }
}

static char *sock_path(char *buf, size_t n, const char *tag) {
  snprintf(buf, n, "/tmp/sk-test-rv-%s-%d.sock", tag, (int)getpid());
  return buf;
}

Test(comm_rendezvous, exchanges_2_3_4_ranks) {
  char path[108];
  for (int world = 2; world <= 4; world++) {
    rank_spec specs[4];
    for (int r = 0; r < world; r++) /* rank 0 starts last: the others retry their connect */
      specs[r] = (rank_spec){r, world, r == 0 ? 50 : 0, 0, SK_OK, NULL};
    run_ranks(sock_path(path, sizeof path, "ok"), specs, world, 5.0);
  }
  /* abstract namespace, large blobs, 8 ranks */
  rank_spec specs[8];
  for (int r = 0; r < 8; r++) specs[r] = (rank_spec){r, 8, (7 - r) * 5, 4096, SK_OK, NULL};
  snprintf(path, sizeof path, "@sk-test-rv-abstract-%d", (int)getpid());
  run_ranks(path, specs, 8, 5.0);
}

Test(comm_rendezvous, absent_rank_times_out_and_everyone_hears_it) {
  char path[108];
  rank_spec specs[] = {{0, 3, 0, 0, SK_ERR_TIMEOUT, "rank(s) 2 of 3 did not connect"},
                       {1, 3, 0, 0, SK_ERR_TIMEOUT, "rank(s) 2 of 3 did not connect"}};
  run_ranks(sock_path(path, sizeof path, "absent"), specs, 2, 0.5);
}

Test(comm_rendezvous, no_rank_0_times_out) {
  char path[108];
  rank_spec specs[] = {{1, 2, 0, 0, SK_ERR_TIMEOUT, "found no rank 0 listening"}};
  run_ranks(sock_path(path, sizeof path, "norank0"), specs, 1, 0.3);
}

Test(comm_rendezvous, mismatched_world_or_size_refused) {
  char path[108];
  rank_spec w[] = {{0, 2, 0, 0, SK_ERR_INVALID_ARGUMENT, "says world 3"}, {1, 3, 0, 0, SK_ERR_INVALID_ARGUMENT, "says world 3"}};
  run_ranks(sock_path(path, sizeof path, "world"), w, 2, 3.0);
  rank_spec s[] = {{0, 2, 0, 64, SK_ERR_INVALID_ARGUMENT, "blob 32 bytes"}, {1, 2, 0, 32, SK_ERR_INVALID_ARGUMENT, "blob 32 bytes"}};
  run_ranks(sock_path(path, sizeof path, "size"), s, 2, 3.0);
}

/* A peer that sends half its hello and dies: rank 0 reports it at once (not at the timeout). */
Test(comm_rendezvous, peer_dying_mid_exchange) {
  char path[108];
  sock_path(path, sizeof path, "dies");
  pid_t p = fork();
  cr_assert_geq(p, 0);
  if (p == 0) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    for (int i = 0; i < 2000; i++) {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        uint32_t half[3] = {0x56524B53u, 1u, 1u};
        if (write(fd, half, sizeof half) != sizeof half) _exit(3);
        _exit(0); /* dies holding an incomplete hello */
      }
      close(fd);
      usleep(2000);
    }
    _exit(2);
  }
  unsigned char blob[BLOB] = {0}, all[2 * BLOB];
  double t0 = sk_now_seconds();
  sk_status s = sk_rendezvous_allgather(path, 0, 2, blob, BLOB, all, 10.0);
  double took = sk_now_seconds() - t0;
  int st;
  waitpid(p, &st, 0);
  cr_expect_eq(s, SK_ERR_IO, "%s: %s", sk_status_string(s), sk_last_error_message());
  cr_expect(strstr(sk_last_error_message(), "closed the connection"), "%s", sk_last_error_message());
  cr_expect_lt(took, 5.0, "took %.2f s", took);
}

Test(comm_rendezvous, bad_arguments) {
  unsigned char b[8] = {0}, all[64];
  char longp[200];
  memset(longp, 'x', sizeof longp - 1);
  longp[199] = 0;
  cr_expect_eq(sk_rendezvous_allgather(NULL, 0, 2, b, 8, all, 1), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_rendezvous_allgather("/tmp/x", 2, 2, b, 8, all, 1), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "rank 2 of world 2"), "%s", sk_last_error_message());
  cr_expect_eq(sk_rendezvous_allgather("/tmp/x", 0, 9, b, 8, all, 1), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_rendezvous_allgather("/tmp/x", 0, 2, b, 0, all, 1), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_rendezvous_allgather("/tmp/x", 0, 2, b, 8, all, 0), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_rendezvous_allgather(longp, 1, 2, b, 8, all, 1), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_last_error_message(), "must have 1..107 bytes"), "%s", sk_last_error_message());
  cr_expect_eq(sk_rendezvous_allgather("/tmp/x", 0, 1, b, 8, all, 1), SK_OK); /* world 1: a copy */
}
