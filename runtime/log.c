/* runtime/log.c - compile progress on stderr (SPARKINFER_PRINT_COMPILE_PROGRESS) and the JSON
 * Lines compile log (SPARKINFER_COMPILE_LOG). One line per event, written with one write so
 * lines from threads and processes do not interleave. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "runtime.h"

static _Atomic uint64_t compile_starts;
static _Atomic uint64_t compile_ends;

static const char *event_name(sk_event_kind k) {
  switch (k) {
    case SK_EVENT_COMPILE_START: return "compile_start";
    case SK_EVENT_COMPILE_DONE: return "compile_done";
    case SK_EVENT_COMPILE_FAIL: return "compile_fail";
    case SK_EVENT_MEMORY_HIT: return "memory_hit";
    case SK_EVENT_DISK_HIT: return "disk_hit";
    case SK_EVENT_DISK_MISS: return "disk_miss";
    case SK_EVENT_CORRUPT: return "corrupt_record";
    case SK_EVENT_PEER_WAIT: return "peer_wait";
    case SK_EVENT_FROZEN: return "frozen";
  }
  return "unknown";
}

static void write_all(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

void sk_log_event(const sk_event *ev) {
  const sk_runtime_config *cfg = sk_config();
  bool is_compile = ev->kind == SK_EVENT_COMPILE_START || ev->kind == SK_EVENT_COMPILE_DONE ||
                    ev->kind == SK_EVENT_COMPILE_FAIL;
  uint64_t seq = 0;
  if (ev->kind == SK_EVENT_COMPILE_START) seq = atomic_fetch_add(&compile_starts, 1) + 1;
  else if (is_compile) seq = atomic_fetch_add(&compile_ends, 1) + 1;
  bool to_stderr = cfg->print_progress >= 2 || (cfg->print_progress == 1 && is_compile);
  if (!to_stderr && !cfg->compile_log_path) return;

  const sk_kernel *k = ev->kernel;
  char hex[33];
  sk_key_hex(&k->key, hex, sizeof hex);
  double total_s = (double)atomic_load(&sk_counters_g.compile_ns) * 1e-9;
  if (to_stderr) {
    char line[2048];
    int n;
    if (ev->kind == SK_EVENT_COMPILE_START)
      n = snprintf(line, sizeof line, "sparkinfer: compile start #%llu key %.12s op %s kernel %s [%s] arch %s\n",
                   (unsigned long long)seq, hex, *k->op ? k->op : "-", k->name_expr, k->params, k->arch);
    else if (ev->kind == SK_EVENT_COMPILE_DONE) {
      /* ptxas's report: registers and spilled bytes (stores / loads), the first things to check
       * when a kernel is slower than it should be. */
      char res[96] = "";
      const sk_kernel_resources *r = ev->resources;
      if (r && r->known)
        snprintf(res, sizeof res, " regs %u spill %u/%u B", r->registers, r->spill_store_bytes, r->spill_load_bytes);
      n = snprintf(line, sizeof line,
                   "sparkinfer: compile done  #%llu key %.12s op %s kernel %s [%s] arch %s nvrtc %.1f ms link %.1f ms "
                   "cubin %zu B%s total %.2f s\n",
                   (unsigned long long)seq, hex, *k->op ? k->op : "-", k->name_expr, k->params, k->arch, ev->nvrtc_ms,
                   ev->link_ms, ev->cubin_bytes, res, total_s);
    }
    else if (ev->kind == SK_EVENT_COMPILE_FAIL) {
      const char *d = ev->detail ? ev->detail : "";
      const char *nl = strchr(d, '\n');
      n = snprintf(line, sizeof line, "sparkinfer: compile FAILED #%llu key %.12s op %s kernel %s [%s] arch %s: %.*s\n",
                   (unsigned long long)seq, hex, *k->op ? k->op : "-", k->name_expr, k->params, k->arch,
                   nl ? (int)(nl - d) : (int)strlen(d), d);
    } else
      n = snprintf(line, sizeof line, "sparkinfer: %s key %.12s op %s kernel %s [%s] arch %s%s%s\n", event_name(ev->kind),
                   hex, *k->op ? k->op : "-", k->name_expr, k->params, k->arch, ev->detail ? ": " : "",
                   ev->detail ? ev->detail : "");
    if (n > 0) write_all(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
  }
  if (cfg->compile_log_path) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "event", event_name(ev->kind));
    cJSON_AddNumberToObject(o, "time_ms", (double)sk_now_unix_ms());
    cJSON_AddNumberToObject(o, "pid", (double)getpid());
    if (is_compile) cJSON_AddNumberToObject(o, "seq", (double)seq);
    cJSON_AddStringToObject(o, "key", hex);
    cJSON_AddStringToObject(o, "op", k->op);
    cJSON_AddStringToObject(o, "kernel", k->name_expr);
    cJSON_AddStringToObject(o, "params", k->params);
    cJSON_AddStringToObject(o, "arch", k->arch);
    if (ev->kind == SK_EVENT_COMPILE_DONE) {
      cJSON_AddNumberToObject(o, "nvrtc_ms", ev->nvrtc_ms);
      cJSON_AddNumberToObject(o, "link_ms", ev->link_ms);
      cJSON_AddNumberToObject(o, "cubin_bytes", (double)ev->cubin_bytes);
      cJSON_AddNumberToObject(o, "total_compile_s", total_s);
      sk_resources_add_json(o, ev->resources);
    }
    if (ev->detail) cJSON_AddStringToObject(o, "detail", ev->detail);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    int fd = open(cfg->compile_log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      size_t n = strlen(s);
      s[n] = '\n'; /* cJSON allocates n+1; replace the NUL, write n+1 bytes */
      write_all(fd, s, n + 1);
      close(fd);
    }
    cJSON_free(s);
  }
}
