/* sk-warm - prebuild sparkinfer's kernel cache offline (no GPU needed) from a JSON manifest.
 * Exit status: 0 all built or cached, 1 some compile failed, the cache is unusable or a
 * SPARKINFER_* setting is malformed, 2 bad usage or a bad manifest (nothing is written then). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cache.h"
#include "runtime.h"
#include "sparkinfer.h"
#include "sparkinfer/jit.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: sk-warm --manifest FILE [--manifest FILE...] [--arch sm_120a,sm_121a,...]\n"
          "               [--cache-dir DIR] [-j N] [--dry-run] [--emit-kernels OUT] [--json] [--quiet]\n"
          "       sk-warm --list-ops | --list-sources | --help\n"
          "\n"
          "Compiles every kernel a manifest names, for every arch, into the kernel cache, in N\n"
          "parallel worker processes. Needs no GPU. Kernels already in the cache are not rebuilt.\n"
          "\n"
          "  --manifest FILE   JSON manifest: recorded with SPARKINFER_RECORD_WARMUP=FILE or written\n"
          "                    by hand (\"kernels\" and/or \"ops\" entries; see docs/tools.md)\n"
          "  --arch LIST       comma-separated targets; overrides the archs recorded in entries\n"
          "                    (default: each entry's own, else sm_120a,sm_121a)\n"
          "  --cache-dir DIR   cache to fill (default: SPARKINFER_CACHE_DIR, then\n"
          "                    $XDG_CACHE_HOME/sparkinfer, then ~/.cache/sparkinfer)\n"
          "  -j N              parallel compile processes (default: number of CPUs)\n"
          "  --dry-run         list what would be built and its cache key; compile nothing\n"
          "  --emit-kernels OUT  write the expanded, deduplicated kernel list as a manifest of\n"
          "                    \"kernels\" entries (what the op entries resolve per arch); compile nothing\n"
          "  --json            print the result as JSON on stdout\n"
          "  --quiet           no progress output (failures are still printed)\n"
          "\n"
          "Exit status: 0 success, 1 a compile failed, the cache is unusable or a SPARKINFER_*\n"
          "setting is malformed, 2 bad usage or bad manifest (nothing is written).\n"
          "\n"
          "Example:\n"
          "  sk-warm --manifest serving.json --arch sm_120a,sm_121a --cache-dir ./cache -j 8\n");
}

typedef struct job {
  const sk_kernel_request *req;
  sk_key key;
  sk_status status;
  sk_resolve_source how;
  double ms;
  char *error;
} job;

/* NVRTC serialises compiles inside one process (measured: 2 threads take twice as long for twice
 * the work), so parallelism comes from worker processes: each is this program run with --worker,
 * reads job indices on stdin, compiles, and answers one JSON line per job on stdout. The
 * kernel cache's cross-process claims keep their stores consistent. */

static job *jobs;
static size_t njobs;
static size_t n_compiled, n_cached, n_failed, done_jobs;
static int quiet, tty;
static double t_start;

static void progress(const job *j) {
  if (quiet) { /* no progress, but errors always print */
    if (j->status != SK_OK)
      fprintf(stderr, "sk-warm: FAILED %s %s [%s]: %s\n", j->req->arch, j->req->name_expr, j->req->params,
              j->error ? j->error : "(no message)");
    return;
  }
  size_t d = done_jobs;
  if (tty) {
    int width = 30, filled = njobs ? (int)((double)d / (double)njobs * width) : width;
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu  compiled %zu  cached %zu  failed %zu  %.1fs ", filled,
            "==============================", width - filled, "", d, njobs, n_compiled, n_cached, n_failed,
            sk_now_seconds() - t_start);
    if (j->status != SK_OK) fprintf(stderr, "\nFAILED %s [%s]: %s\n", j->req->name_expr, j->req->arch, j->error);
  } else {
    const char *what = j->status != SK_OK ? "FAILED" : j->how == SK_RESOLVED_COMPILED ? "compiled" : "cached";
    fprintf(stderr, "[%zu/%zu] %-8s %s %s [%s]", d, njobs, what, j->req->arch, j->req->name_expr, j->req->params);
    if (j->status == SK_OK && j->how == SK_RESOLVED_COMPILED) fprintf(stderr, " %.0f ms", j->ms);
    if (j->status != SK_OK) fprintf(stderr, ": %s", j->error);
    fputc('\n', stderr);
  }
}

/* Worker side: answer each index read from stdin. */
static int worker_loop(void) {
  sk_cache_info ci;
  sk_get_cache_info(&ci);
  if (ci.mode != SK_CACHE_MODE_READWRITE) {
    cJSON *o = cJSON_CreateObject();
    char msg[1700];
    snprintf(msg, sizeof msg, "the cache %s is not writable: %s", ci.dir, *ci.reason ? ci.reason : "opened read-only");
    cJSON_AddStringToObject(o, "fatal", msg);
    char *t = cJSON_PrintUnformatted(o);
    printf("%s\n", t);
    fflush(stdout);
    return 1;
  }
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    char *end;
    unsigned long i = strtoul(line, &end, 10);
    if (end == line || i >= njobs) return 2;
    sk_prepare_info info;
    double t0 = sk_now_seconds();
    sk_status st = sk_kernel_prepare(jobs[i].req, &info);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "i", (double)i);
    cJSON_AddNumberToObject(o, "status", st);
    cJSON_AddNumberToObject(o, "how", st == SK_OK ? info.source : 0);
    cJSON_AddNumberToObject(o, "ms", (sk_now_seconds() - t0) * 1e3);
    if (st != SK_OK) cJSON_AddStringToObject(o, "error", sk_last_error_message());
    char *t = cJSON_PrintUnformatted(o);
    printf("%s\n", t);
    fflush(stdout);
    cJSON_free(t);
    cJSON_Delete(o);
  }
  return 0;
}

typedef struct worker {
  pid_t pid;
  FILE *to, *from;
  int busy;
} worker;

static int spawn_worker(worker *w, char **argv) {
  int in[2], out[2];
  /* Close-on-exec: a later worker must not inherit an earlier one's pipe ends, or that one
   * never sees EOF on its stdin. dup2 onto 0 and 1 clears the flag for the child's own. */
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]); close(in[1]); close(out[0]); close(out[1]);
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  w->pid = pid;
  w->to = fdopen(in[1], "w");
  w->from = fdopen(out[0], "r");
  w->busy = 0;
  return 0;
}

/* Parent side: hand out jobs to idle workers, collect answers, draw progress. */
static int run_workers(int nworkers, char **worker_argv, char *fatal, size_t fatal_size) {
  worker *ws = calloc((size_t)nworkers, sizeof *ws);
  struct pollfd *pfd = calloc((size_t)nworkers, sizeof *pfd);
  size_t next = 0;
  int alive = 0;
  for (int w = 0; w < nworkers; w++) {
    if (spawn_worker(&ws[w], worker_argv) != 0) { snprintf(fatal, fatal_size, "cannot start a worker process"); break; }
    alive++;
  }
  for (int w = 0; w < alive; w++)
    if (next < njobs) { fprintf(ws[w].to, "%zu\n", next++); fflush(ws[w].to); ws[w].busy = 1; }
  while (done_jobs < njobs && !*fatal) {
    int nbusy = 0;
    for (int w = 0; w < alive; w++) { pfd[w].fd = fileno(ws[w].from); pfd[w].events = POLLIN; nbusy += ws[w].busy; }
    if (!nbusy) break;
    if (poll(pfd, (nfds_t)alive, -1) < 0) continue;
    for (int w = 0; w < alive && !*fatal; w++) {
      if (!(pfd[w].revents & (POLLIN | POLLHUP)) || !ws[w].busy) continue;
      char line[8192];
      if (!fgets(line, sizeof line, ws[w].from)) {
        snprintf(fatal, fatal_size, "a worker process exited unexpectedly");
        break;
      }
      cJSON *o = cJSON_Parse(line);
      const cJSON *f = o ? cJSON_GetObjectItem(o, "fatal") : NULL;
      const cJSON *ji = o ? cJSON_GetObjectItem(o, "i") : NULL;
      if (cJSON_IsString(f)) snprintf(fatal, fatal_size, "%s", f->valuestring);
      else if (!cJSON_IsNumber(ji) || ji->valuedouble < 0 || (size_t)ji->valuedouble >= njobs)
        snprintf(fatal, fatal_size, "bad answer from a worker process: %.200s", line);
      else {
        job *j = &jobs[(size_t)ji->valuedouble];
        j->status = (sk_status)cJSON_GetObjectItem(o, "status")->valuedouble;
        j->how = (sk_resolve_source)cJSON_GetObjectItem(o, "how")->valuedouble;
        j->ms = cJSON_GetObjectItem(o, "ms")->valuedouble;
        const cJSON *err = cJSON_GetObjectItem(o, "error");
        if (cJSON_IsString(err)) j->error = strdup(err->valuestring);
        if (j->status != SK_OK) n_failed++;
        else if (j->how == SK_RESOLVED_COMPILED) n_compiled++;
        else n_cached++;
        done_jobs++;
        progress(j);
        ws[w].busy = 0;
        if (next < njobs) { fprintf(ws[w].to, "%zu\n", next++); fflush(ws[w].to); ws[w].busy = 1; }
      }
      cJSON_Delete(o);
    }
  }
  for (int w = 0; w < alive; w++) {
    fclose(ws[w].to);
    fclose(ws[w].from);
    if (*fatal) kill(ws[w].pid, SIGTERM);
    waitpid(ws[w].pid, NULL, 0);
  }
  free(ws);
  free(pfd);
  return *fatal ? -1 : 0;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (n < cap) break;
    if (cap > (64u << 20)) { free(buf); buf = NULL; break; } /* manifests are small */
    char *nb = realloc(buf, cap *= 2);
    if (!nb) { free(buf); buf = NULL; }
    buf = nb;
  }
  fclose(f);
  *len = n;
  return buf;
}

static int split_archs(char *list, const char **out, int max) {
  int n = 0;
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    if (!sk_arch_valid(tok)) {
      fprintf(stderr, "sk-warm: --arch: \"%s\" is not an arch like sm_120a\n", tok);
      return -1;
    }
    if (n == max) {
      fprintf(stderr, "sk-warm: --arch: too many archs (max %d)\n", max);
      return -1;
    }
    out[n++] = tok;
  }
  out[n] = NULL;
  return n;
}

/* --emit-kernels: the jobs as a manifest of kernel entries, one per (kernel, arch). */
static int emit_kernels(const char *path, const job *jobs_, size_t n) {
  cJSON *root = cJSON_CreateObject(), *arr = root ? cJSON_CreateArray() : NULL;
  if (!arr) {
    fprintf(stderr, "sk-warm: out of memory\n");
    return 1;
  }
  cJSON_AddStringToObject(root, "format", "sparkinfer-manifest");
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "comment", "generated by sk-warm --emit-kernels from op manifests; do not edit");
  cJSON_AddItemToObject(root, "kernels", arr);
  for (size_t i = 0; i < n; i++) {
    const sk_kernel_request *r = jobs_[i].req;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "op", r->op);
    cJSON_AddStringToObject(e, "source", r->source);
    cJSON_AddStringToObject(e, "name", r->name_expr);
    cJSON_AddStringToObject(e, "params", r->params ? r->params : "");
    cJSON_AddStringToObject(e, "arch", r->arch);
    if (r->link) cJSON_AddBoolToObject(e, "link", 1);
    if (r->num_options) {
      cJSON *o = cJSON_AddArrayToObject(e, "options");
      for (size_t k = 0; k < r->num_options; k++) cJSON_AddItemToArray(o, cJSON_CreateString(r->options[k]));
    }
    cJSON_AddItemToArray(arr, e);
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  FILE *f = text ? fopen(path, "w") : NULL;
  const int bad = !f || fputs(text, f) < 0 || fputc('\n', f) == EOF;
  if (f && fclose(f)) {
    cJSON_free(text);
    fprintf(stderr, "sk-warm: cannot write %s\n", path);
    return 1;
  }
  cJSON_free(text);
  if (bad) {
    fprintf(stderr, "sk-warm: cannot write %s\n", path);
    return 1;
  }
  if (!quiet) fprintf(stderr, "sk-warm: %zu kernels written to %s\n", n, path);
  return 0;
}

int main(int argc, char **argv) {
  const char *manifests[64], *cache_dir = NULL, *emit = NULL;
  int nmanifests = 0;
  char *arch_arg = NULL;
  int nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN), dry_run = 0, worker_mode = 0, json = 0, list_ops = 0, list_sources = 0;
  static const struct option longopts[] = {{"manifest", required_argument, 0, 'm'},
                                           {"arch", required_argument, 0, 'a'},
                                           {"cache-dir", required_argument, 0, 'c'},
                                           {"jobs", required_argument, 0, 'j'},
                                           {"dry-run", no_argument, 0, 'n'},
                                           {"json", no_argument, 0, 'J'},
                                           {"quiet", no_argument, 0, 'q'},
                                           {"list-ops", no_argument, 0, 'L'},
                                           {"list-sources", no_argument, 0, 'S'},
                                           {"help", no_argument, 0, 'h'},
                                           {"worker", no_argument, 0, 'W'},
                                           {"emit-kernels", required_argument, 0, 'E'},
                                           {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "m:a:c:j:nJqhLS", longopts, NULL)) != -1) {
    switch (c) {
      case 'm':
        if (nmanifests == 64) {
          fprintf(stderr, "sk-warm: more than 64 --manifest files\n");
          return 2;
        }
        manifests[nmanifests++] = optarg;
        break;
      case 'E': emit = optarg; break;
      case 'a': arch_arg = optarg; break;
      case 'c': cache_dir = optarg; break;
      case 'j': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || v < 1 || v > 256) {
          fprintf(stderr, "sk-warm: -j: expected 1..256, got \"%s\"\n", optarg);
          return 2;
        }
        nthreads = (int)v;
        break;
      }
      case 'n': dry_run = 1; break;
      case 'J': json = 1; break;
      case 'q': quiet = 1; break;
      case 'L': list_ops = 1; break;
      case 'S': list_sources = 1; break;
      case 'h': usage(stdout); return 0;
      case 'W': worker_mode = 1; quiet = 1; break;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "sk-warm: unexpected argument \"%s\"\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (list_ops) {
    const sk_op_info *ops;
    size_t n;
    sk_list_ops(&ops, &n);
    for (size_t i = 0; i < n; i++) printf("%-32s %-9s %-28s %s\n", ops[i].name,
                                          ops[i].style == SK_OP_PLANNED ? "planned" : ops[i].style == SK_OP_ONE_SHOT ? "one-shot" : "stateful",
                                          ops[i].archs, ops[i].summary);
    return 0;
  }
  if (list_sources) {
    const char *const *paths;
    size_t n;
    sk_list_kernel_sources(&paths, &n);
    for (size_t i = 0; i < n; i++) printf("%s\n", paths[i]);
    return 0;
  }
  if (!nmanifests) {
    fprintf(stderr, "sk-warm: --manifest FILE is required\n");
    usage(stderr);
    return 2;
  }
  if (nthreads < 1) nthreads = 1;
  const char *archs[17];
  const char *default_archs[] = {"sm_120a", "sm_121a", NULL};
  int narchs = 0;
  /* strtok writes into its argument: split a copy, the workers need the original argv. */
  if (arch_arg && (narchs = split_archs(strdup(arch_arg), archs, 16)) <= 0) {
    if (narchs == 0) fprintf(stderr, "sk-warm: --arch: empty list\n");
    return 2;
  }
  if (cache_dir) setenv("SPARKINFER_CACHE_DIR", cache_dir, 1);
  if (sk_init() != SK_OK) { /* a malformed SPARKINFER_* setting: the environment is unusable */
    fprintf(stderr, "sk-warm: %s\n", sk_last_error_message());
    return 1;
  }
  sk_request_list list = {0};
  for (int mi = 0; mi < nmanifests; mi++) {
    const char *manifest = manifests[mi];
    size_t len = 0;
    char *text = read_file(manifest, &len);
    if (!text) {
      fprintf(stderr, "sk-warm: cannot read manifest %s\n", manifest);
      return 2;
    }
    sk_request_list one;
    sk_status s = sk_manifest_parse(text, len, narchs ? archs : NULL, &one);
    if (s != SK_OK && !narchs && strstr(sk_last_error_message(), "no arch")) {
      /* Entries without archs and no --arch: use the default targets. */
      s = sk_manifest_parse(text, len, default_archs, &one);
    }
    free(text);
    if (s != SK_OK) {
      fprintf(stderr, "sk-warm: %s: %s\n", manifest, sk_last_error_message());
      return 2;
    }
    for (size_t i = 0; i < one.count && s == SK_OK; i++) s = sk_request_list_add(&list, &one.items[i].req);
    sk_request_list_free(&one);
    if (s != SK_OK) {
      fprintf(stderr, "sk-warm: %s\n", sk_last_error_message());
      return 1;
    }
  }
  /* Deduplicate by key: the same kernel may appear under several entries. */
  jobs = calloc(list.count ? list.count : 1, sizeof *jobs);
  if (!jobs) { fprintf(stderr, "sk-warm: out of memory\n"); return 1; }
  for (size_t i = 0; i < list.count; i++) {
    sk_key k;
    if (sk_kernel_key(&list.items[i].req, &k) != SK_OK) {
      fprintf(stderr, "sk-warm: %s\n", sk_last_error_message());
      return 2;
    }
    bool dup = false;
    for (size_t j = 0; j < njobs && !dup; j++) dup = !memcmp(jobs[j].key.bytes, k.bytes, 16);
    if (!dup) jobs[njobs++] = (job){.req = &list.items[i].req, .key = k};
  }
  if (emit) return emit_kernels(emit, jobs, njobs);
  if (dry_run) {
    for (size_t i = 0; i < njobs; i++) {
      char hex[33];
      sk_key_hex(&jobs[i].key, hex, sizeof hex);
      printf("%s %-8s %s [%s]\n", hex, jobs[i].req->arch, jobs[i].req->name_expr, jobs[i].req->params);
    }
    fprintf(stderr, "sk-warm: %zu kernels (dry run, nothing compiled)\n", njobs);
    return 0;
  }
  if (worker_mode) {
    int rc = worker_loop();
    sk_request_list_free(&list);
    return rc;
  }
  /* The parent never opens the cache: workers do (an LMDB env must not cross a fork). */
  char dir_buf[1024] = "";
  if (cache_dir) sk_strlcpy(dir_buf, cache_dir, sizeof dir_buf);
  else if (sk_cache_default_dir(dir_buf, sizeof dir_buf) != SK_OK) sk_strlcpy(dir_buf, "(none)", sizeof dir_buf);
  tty = isatty(2);
  t_start = sk_now_seconds();
  if ((size_t)nthreads > njobs) nthreads = njobs ? (int)njobs : 1;
  if (!quiet) fprintf(stderr, "sk-warm: %zu kernels, %d worker processes, cache %s\n", njobs, nthreads, dir_buf);
  /* Workers rerun this command line with --worker and get the same deduplicated job list. */
  char **wargv = calloc((size_t)argc + 2, sizeof *wargv);
  wargv[0] = argv[0];
  wargv[1] = "--worker";
  for (int i = 1; i < argc; i++) wargv[i + 1] = argv[i];
  char fatal[2048] = "";
  if (njobs) run_workers(nthreads, wargv, fatal, sizeof fatal);
  free(wargv);
  double wall = sk_now_seconds() - t_start;
  struct rusage ru, rc;
  getrusage(RUSAGE_SELF, &ru);
  getrusage(RUSAGE_CHILDREN, &rc);
  double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + rc.ru_utime.tv_sec + rc.ru_stime.tv_sec) +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec + rc.ru_utime.tv_usec + rc.ru_stime.tv_usec) * 1e-6;
  if (tty && !quiet) fputc('\n', stderr);
  if (*fatal) {
    fprintf(stderr, "sk-warm: %s\n", fatal);
    return 1;
  }
  size_t failed = n_failed;
  sk_cache_info ci;
  sk_strlcpy(ci.dir, dir_buf, sizeof ci.dir);
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "kernels", (double)njobs);
    cJSON_AddNumberToObject(o, "compiled", (double)n_compiled);
    cJSON_AddNumberToObject(o, "cached", (double)n_cached);
    cJSON_AddNumberToObject(o, "failed", (double)failed);
    cJSON_AddNumberToObject(o, "wall_s", wall);
    cJSON_AddNumberToObject(o, "cpu_s", cpu);
    cJSON_AddNumberToObject(o, "workers", nthreads);
    cJSON_AddStringToObject(o, "cache_dir", ci.dir);
    cJSON *arr = cJSON_AddArrayToObject(o, "results");
    for (size_t i = 0; i < njobs; i++) {
      cJSON *r = cJSON_CreateObject();
      char hex[33];
      sk_key_hex(&jobs[i].key, hex, sizeof hex);
      cJSON_AddStringToObject(r, "key", hex);
      cJSON_AddStringToObject(r, "op", jobs[i].req->op);
      cJSON_AddStringToObject(r, "name", jobs[i].req->name_expr);
      cJSON_AddStringToObject(r, "arch", jobs[i].req->arch);
      cJSON_AddStringToObject(r, "result", jobs[i].status != SK_OK ? "failed"
                                           : jobs[i].how == SK_RESOLVED_COMPILED ? "compiled" : "cached");
      cJSON_AddNumberToObject(r, "ms", jobs[i].ms);
      if (jobs[i].error) cJSON_AddStringToObject(r, "error", jobs[i].error);
      cJSON_AddItemToArray(arr, r);
    }
    char *t = cJSON_Print(o);
    printf("%s\n", t);
    cJSON_free(t);
    cJSON_Delete(o);
  }
  if (!quiet)
    fprintf(stderr, "sk-warm: %zu kernels: %zu compiled, %zu already cached, %zu failed; wall %.2f s, CPU %.2f s\n",
            njobs, n_compiled, n_cached, failed, wall, cpu);
  for (size_t i = 0; i < njobs; i++) free(jobs[i].error);
  free(jobs);
  sk_request_list_free(&list);
  return failed ? 1 : 0;
}
