/*
 * sk-cache - inspect and maintain a sparkinfer kernel cache (docs/cache.md).
 *
 *   sk-cache [--cache-dir DIR] [--json] COMMAND [ARGS]
 *
 * Exit status: 0 success, 1 failure (or bad records found by verify), 2 bad usage.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cache.h"

#define EXIT_USAGE 2

static const char USAGE[] =
    "usage: sk-cache [--cache-dir DIR] [--json] COMMAND [ARGS]\n"
    "\n"
    "Inspect and maintain a sparkinfer kernel cache (an LMDB directory of compiled cubins).\n"
    "\n"
    "commands:\n"
    "  ls                      list records: key prefix, arch, op, kernel, cubin size, registers,\n"
    "                          spilled bytes (ptxas), times\n"
    "  stat                    path, record and claim counts, data bytes, map and file size\n"
    "  verify                  check every record; lists bad ones, exit status 1 if any\n"
    "  prune [--max-bytes N] [--older-than-days D]\n"
    "                          remove least recently used records until the data is at most N\n"
    "                          bytes (K/M/G suffixes), and records unused for D days\n"
    "  rm KEYPREFIX...         remove records by unambiguous hex key prefix\n"
    "  cubin KEYPREFIX FILE    write one record's cubin to FILE (for cuobjdump -sass / nvdisasm)\n"
    "  export FILE             write a compacted copy of the cache to one file\n"
    "  import FILE [--overwrite]\n"
    "                          merge the valid records of an exported file (existing keys are\n"
    "                          kept unless --overwrite)\n"
    "\n"
    "options:\n"
    "  --cache-dir DIR         the cache (default: $SPARKINFER_CACHE_DIR, else\n"
    "                          $XDG_CACHE_HOME/sparkinfer, else ~/.cache/sparkinfer)\n"
    "  --json                  machine-readable output\n"
    "  -h, --help              this text\n"
    "\n"
    "examples:\n"
    "  sk-cache ls\n"
    "  sk-cache --json ls | jq '.[] | select(.op == \"test.scale\")'\n"
    "  sk-cache verify\n"
    "  sk-cache prune --max-bytes 2G --older-than-days 30\n"
    "  sk-cache rm 3fa9c1 77b0\n"
    "  sk-cache cubin 3fa9c1 kernel.cubin && cuobjdump -sass kernel.cubin\n"
    "  sk-cache --cache-dir /opt/models/kernels export kernels.mdb\n"
    "  SPARKINFER_CACHE_DIR=/srv/cache sk-cache import kernels.mdb\n"
    "\n"
    "Exit status: 0 success, 1 failure or bad records found, 2 bad usage.\n";

typedef struct options {
  const char *cache_dir;
  int json;
  const char *command;
  const char **args; /* positional arguments after the command */
  int nargs;
  int have_max_bytes, have_older_than, overwrite;
  uint64_t max_bytes;
  double older_than_days;
} options;

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("sk-cache: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n(sk-cache --help for usage)\n", stderr);
  return EXIT_USAGE;
}

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("sk-cache: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 1;
}

static int parse_size(const char *s, uint64_t *out) {
  if (!*s || *s == '-' || *s == '+') return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return 0;
  uint64_t mul = 1;
  switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mul = 1ull << 10; end++; break;
    case 'M': mul = 1ull << 20; end++; break;
    case 'G': mul = 1ull << 30; end++; break;
    case 'T': mul = 1ull << 40; end++; break;
    default: return 0;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end || v > UINT64_MAX / mul) return 0;
  *out = v * mul;
  return 1;
}

/* Returns -1 when parsed, else an exit status (0 for --help). */
static int parse_args(int argc, char **argv, options *o) {
  static const char *positional[64];
  memset(o, 0, sizeof *o);
  o->args = positional;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *value = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(USAGE, stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      o->json = 1;
    } else if (!strcmp(a, "--overwrite")) {
      o->overwrite = 1;
    } else if (!strncmp(a, "--cache-dir", 11) || !strncmp(a, "--max-bytes", 11) ||
               !strncmp(a, "--older-than-days", 17)) {
      const char *eq = strchr(a, '=');
      size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
      if (eq) value = eq + 1;
      else if (i + 1 < argc) value = argv[++i];
      else return usage_error("%s needs a value", a);
      if (name_len == 11 && !strncmp(a, "--cache-dir", 11)) {
        if (!*value) return usage_error("--cache-dir needs a directory");
        o->cache_dir = value;
      } else if (name_len == 11 && !strncmp(a, "--max-bytes", 11)) {
        if (!parse_size(value, &o->max_bytes))
          return usage_error("--max-bytes %s: expected a byte count such as 500M or 2G", value);
        o->have_max_bytes = 1;
      } else if (name_len == 17 && !strncmp(a, "--older-than-days", 17)) {
        char *end;
        o->older_than_days = strtod(value, &end);
        if (!*value || *end || !(o->older_than_days >= 0) || o->older_than_days > 1e6)
          return usage_error("--older-than-days %s: expected a number of days", value);
        o->have_older_than = 1;
      } else {
        return usage_error("unknown option %s", a);
      }
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option %s", a);
    } else if (!o->command) {
      o->command = a;
    } else {
      if (o->nargs == (int)(sizeof positional / sizeof positional[0]))
        return usage_error("too many arguments");
      positional[o->nargs++] = a;
    }
  }
  if (!o->command) return usage_error("no command given");
  return -1;
}

/* ---------------------------------------------------------------------------------------- */

static void key_hex(const uint8_t key[16], char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[key[i] >> 4];
    out[2 * i + 1] = digits[key[i] & 15];
  }
  out[32] = '\0';
}

static void format_time(uint64_t unix_ms, char *buf, size_t size) {
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  if (!unix_ms || !localtime_r(&t, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M", &tm))
    snprintf(buf, size, "-");
}

static void format_bytes(uint64_t n, char *buf, size_t size) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, size, "%llu B", (unsigned long long)n);
  else snprintf(buf, size, "%.1f %s", v, units[u]);
}

typedef struct row {
  uint8_t key[16];
  char arch[SK_RECORD_ARCH_LEN];
  char *op, *name, *lowered_name, *error;
  uint64_t cubin_bytes, record_bytes, created, last_used;
  uint32_t compile_ms;
  cJSON *resources; /* the metadata's ptxas report (a detached copy), or NULL */
} row;

typedef struct rows {
  row *v;
  size_t n, cap;
  int oom;
} rows;

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static int collect_row(void *ud, const uint8_t key[16], const sk_record *rec, size_t encoded_size,
                       const char *error) {
  rows *rs = ud;
  if (rs->n == rs->cap) {
    size_t ncap = rs->cap ? rs->cap * 2 : 64;
    row *n = realloc(rs->v, ncap * sizeof *n);
    if (!n) {
      rs->oom = 1;
      return 1;
    }
    rs->v = n;
    rs->cap = ncap;
  }
  row *r = &rs->v[rs->n++];
  memset(r, 0, sizeof *r);
  memcpy(r->key, key, 16);
  r->record_bytes = encoded_size;
  if (!rec) {
    r->error = strdup(error ? error : "invalid record");
    return 0;
  }
  memcpy(r->arch, rec->arch, sizeof r->arch);
  r->arch[sizeof r->arch - 1] = '\0';
  r->lowered_name = dup_or_null(rec->lowered_name);
  r->cubin_bytes = rec->cubin_size;
  r->created = rec->created_unix_ms;
  r->last_used = rec->last_used_unix_ms;
  r->compile_ms = rec->compile_ms;
  /* Metadata is whatever the runtime stored: tolerate anything that is not our object. */
  cJSON *meta = cJSON_Parse(rec->metadata_json ? rec->metadata_json : "");
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(meta, "op");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(meta, "name");
  r->op = dup_or_null(cJSON_IsString(op) ? op->valuestring : NULL);
  r->name = dup_or_null(cJSON_IsString(name) ? name->valuestring : NULL);
  cJSON *res = cJSON_GetObjectItemCaseSensitive(meta, "resources");
  if (cJSON_IsObject(res)) r->resources = cJSON_DetachItemViaPointer(meta, res);
  cJSON_Delete(meta);
  return 0;
}

static void free_rows(rows *rs) {
  for (size_t i = 0; i < rs->n; i++) {
    free(rs->v[i].op);
    free(rs->v[i].name);
    free(rs->v[i].lowered_name);
    free(rs->v[i].error);
    cJSON_Delete(rs->v[i].resources);
  }
  free(rs->v);
}

static int by_created(const void *a_, const void *b_) {
  const row *a = a_, *b = b_;
  if (a->created != b->created) return a->created < b->created ? -1 : 1;
  return memcmp(a->key, b->key, 16);
}

static int print_json(cJSON *j) {
  char *text = j ? cJSON_Print(j) : NULL;
  cJSON_Delete(j);
  if (!text) return fail("out of memory");
  puts(text);
  cJSON_free(text);
  return 0;
}

/* Open the cache. Commands that only read never create a missing directory. */
static int open_cache(const char *dir, int readonly, int may_create, sk_cache **c) {
  struct stat st;
  if (!may_create && stat(dir, &st) != 0 && errno == ENOENT) return fail("no cache at %s", dir);
  sk_cache_options opts = {.dir = dir, .readonly = readonly};
  if (sk_cache_open(&opts, c) != SK_OK) return fail("%s", sk_last_error_message());
  return 0;
}

static int collect(sk_cache *c, rows *rs) {
  memset(rs, 0, sizeof *rs);
  if (sk_cache_foreach(c, collect_row, rs) != SK_OK) return fail("%s", sk_last_error_message());
  if (rs->oom) return fail("out of memory");
  return 0;
}

static int cmd_ls(const options *o, sk_cache *c) {
  rows rs;
  int rc = collect(c, &rs);
  if (rc) {
    free_rows(&rs);
    return rc;
  }
  qsort(rs.v, rs.n, sizeof *rs.v, by_created);
  if (o->json) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < rs.n && arr; i++) {
      row *r = &rs.v[i];
      char hex[33];
      key_hex(r->key, hex);
      cJSON *obj = cJSON_CreateObject();
      cJSON_AddItemToArray(arr, obj);
      cJSON_AddStringToObject(obj, "key", hex);
      cJSON_AddBoolToObject(obj, "valid", !r->error);
      cJSON_AddNumberToObject(obj, "record_bytes", (double)r->record_bytes);
      if (r->error) {
        cJSON_AddStringToObject(obj, "error", r->error);
        continue;
      }
      cJSON_AddStringToObject(obj, "arch", r->arch);
      if (r->op) cJSON_AddStringToObject(obj, "op", r->op);
      else cJSON_AddNullToObject(obj, "op");
      if (r->name) cJSON_AddStringToObject(obj, "name", r->name);
      else cJSON_AddNullToObject(obj, "name");
      cJSON_AddStringToObject(obj, "lowered_name", r->lowered_name ? r->lowered_name : "");
      cJSON_AddNumberToObject(obj, "cubin_bytes", (double)r->cubin_bytes);
      cJSON_AddNumberToObject(obj, "created_unix_ms", (double)r->created);
      cJSON_AddNumberToObject(obj, "last_used_unix_ms", (double)r->last_used);
      cJSON_AddNumberToObject(obj, "compile_ms", r->compile_ms);
      if (r->resources) cJSON_AddItemReferenceToObject(obj, "resources", r->resources);
    }
    int rc_json = print_json(arr); /* before free_rows: the resources are referenced */
    free_rows(&rs);
    return rc_json;
  }
  /* Column widths from the data; the kernel name may be long, so it is padded too. */
  int w_arch = 4, w_op = 2, w_name = 6;
  for (size_t i = 0; i < rs.n; i++) {
    row *r = &rs.v[i];
    int la = (int)strlen(r->arch), lo = r->op ? (int)strlen(r->op) : 1;
    int ln = r->error ? 0 : (r->name ? (int)strlen(r->name) : 1);
    if (r->error) lo = 7; /* "CORRUPT" */
    if (la > w_arch) w_arch = la;
    if (lo > w_op) w_op = lo;
    if (ln > w_name) w_name = ln;
  }
  printf("%-12s  %-*s  %-*s  %-*s  %10s  %4s  %9s  %-16s  %-16s  %10s\n", "KEY", w_arch, "ARCH", w_op, "OP",
         w_name, "KERNEL", "CUBIN", "REGS", "SPILL", "CREATED", "LAST USED", "COMPILE");
  size_t bad = 0;
  for (size_t i = 0; i < rs.n; i++) {
    row *r = &rs.v[i];
    char hex[33], created[32], used[32], compile[32];
    key_hex(r->key, hex);
    hex[12] = '\0';
    if (r->error) {
      bad++;
      printf("%-12s  %-*s  %-*s  %s\n", hex, w_arch, "-", w_op, "CORRUPT", r->error);
      continue;
    }
    format_time(r->created, created, sizeof created);
    format_time(r->last_used, used, sizeof used);
    snprintf(compile, sizeof compile, "%u ms", r->compile_ms);
    /* ptxas's report (records written before it was kept show "-"): registers, spilled bytes */
    char regs[16] = "-", spill[24] = "-";
    const cJSON *nr = cJSON_GetObjectItemCaseSensitive(r->resources, "registers"),
                *ns = cJSON_GetObjectItemCaseSensitive(r->resources, "spill_store_bytes");
    if (cJSON_IsNumber(nr)) snprintf(regs, sizeof regs, "%d", nr->valueint);
    if (cJSON_IsNumber(ns)) snprintf(spill, sizeof spill, "%d B", ns->valueint);
    printf("%-12s  %-*s  %-*s  %-*s  %10llu  %4s  %9s  %-16s  %-16s  %10s\n", hex, w_arch, r->arch, w_op,
           r->op ? r->op : "-", w_name, r->name ? r->name : "-", (unsigned long long)r->cubin_bytes, regs, spill,
           created, used, compile);
  }
  printf("%zu record%s", rs.n, rs.n == 1 ? "" : "s");
  if (bad) printf(", %zu corrupt (sk-cache verify)", bad);
  putchar('\n');
  free_rows(&rs);
  return 0;
}

static int cmd_stat(const options *o, sk_cache *c) {
  sk_cache_stat st;
  if (sk_cache_get_stat(c, &st) != SK_OK) return fail("%s", sk_last_error_message());
  if (o->json) {
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "path", sk_cache_dir(c));
    cJSON_AddBoolToObject(obj, "readonly", sk_cache_is_readonly(c));
    cJSON_AddNumberToObject(obj, "records", (double)st.records);
    cJSON_AddNumberToObject(obj, "claims", (double)st.claims);
    cJSON_AddNumberToObject(obj, "data_bytes", (double)st.data_bytes);
    cJSON_AddNumberToObject(obj, "map_bytes", (double)st.map_bytes);
    cJSON_AddNumberToObject(obj, "file_bytes", (double)st.file_bytes);
    cJSON_AddNumberToObject(obj, "page_size", (double)st.page_size);
    return print_json(obj);
  }
  char data[32], map[32], file[32];
  format_bytes(st.data_bytes, data, sizeof data);
  format_bytes(st.map_bytes, map, sizeof map);
  format_bytes(st.file_bytes, file, sizeof file);
  printf("path        %s\n", sk_cache_dir(c));
  printf("records     %llu\n", (unsigned long long)st.records);
  printf("claims      %llu\n", (unsigned long long)st.claims);
  printf("data bytes  %llu (%s)\n", (unsigned long long)st.data_bytes, data);
  printf("map size    %llu (%s)\n", (unsigned long long)st.map_bytes, map);
  printf("file size   %llu (%s)\n", (unsigned long long)st.file_bytes, file);
  printf("page size   %llu\n", (unsigned long long)st.page_size);
  return 0;
}

static int cmd_verify(const options *o, sk_cache *c) {
  rows rs;
  int rc = collect(c, &rs);
  if (rc) {
    free_rows(&rs);
    return rc;
  }
  size_t bad = 0;
  cJSON *obj = o->json ? cJSON_CreateObject() : NULL;
  cJSON *arr = o->json ? cJSON_AddArrayToObject(obj, "bad") : NULL;
  for (size_t i = 0; i < rs.n; i++) {
    if (!rs.v[i].error) continue;
    char hex[33];
    key_hex(rs.v[i].key, hex);
    bad++;
    if (arr) {
      cJSON *b = cJSON_CreateObject();
      cJSON_AddItemToArray(arr, b);
      cJSON_AddStringToObject(b, "key", hex);
      cJSON_AddStringToObject(b, "error", rs.v[i].error);
    } else {
      printf("bad %s: %s\n", hex, rs.v[i].error);
    }
  }
  if (obj) {
    cJSON_AddStringToObject(obj, "path", sk_cache_dir(c));
    cJSON_AddNumberToObject(obj, "records", (double)rs.n);
    cJSON_AddNumberToObject(obj, "bad_count", (double)bad);
    print_json(obj);
  } else {
    printf("%zu record%s checked, %zu bad%s\n", rs.n, rs.n == 1 ? "" : "s", bad,
           bad ? " (sk-cache rm KEY, or let the runtime replace them)" : "");
  }
  free_rows(&rs);
  return bad ? 1 : 0;
}

static int cmd_prune(const options *o, sk_cache *c) {
  uint64_t cutoff = 0;
  if (o->have_older_than) {
    uint64_t now = sk_now_unix_ms();
    uint64_t age = (uint64_t)(o->older_than_days * 86400000.0);
    cutoff = age < now ? now - age : 1;
  }
  uint64_t removed = 0;
  if (sk_cache_prune(c, o->have_max_bytes ? o->max_bytes : 0, cutoff, &removed) != SK_OK)
    return fail("%s", sk_last_error_message());
  sk_cache_stat st;
  if (sk_cache_get_stat(c, &st) != SK_OK) return fail("%s", sk_last_error_message());
  if (o->json) {
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddNumberToObject(obj, "removed", (double)removed);
    cJSON_AddNumberToObject(obj, "records", (double)st.records);
    cJSON_AddNumberToObject(obj, "data_bytes", (double)st.data_bytes);
    return print_json(obj);
  }
  char data[32];
  format_bytes(st.data_bytes, data, sizeof data);
  printf("removed %llu record%s; %llu left, %s of data\n", (unsigned long long)removed,
         removed == 1 ? "" : "s", (unsigned long long)st.records, data);
  return 0;
}

/* The first `count` arguments are key prefixes. */
static int check_key_prefixes(const options *o, int count) {
  for (int i = 0; i < count; i++) {
    const char *p = o->args[i];
    size_t n = strlen(p);
    if (n == 0 || n > 32) return usage_error("key prefix '%s' must be 1 to 32 hex digits", p);
    for (size_t j = 0; j < n; j++)
      if (!isxdigit((unsigned char)p[j])) return usage_error("key prefix '%s' is not hex", p);
  }
  return 0;
}

/* The one record whose hex key starts with `prefix` (validated hex, case-insensitive): its index
 * in rs, or a failure naming the prefix when none or several match. */
static int find_prefix(const rows *rs, const char *prefix_arg, size_t *index) {
  char prefix[33];
  size_t n = strlen(prefix_arg), count = 0;
  for (size_t j = 0; j < n; j++) prefix[j] = (char)tolower((unsigned char)prefix_arg[j]);
  prefix[n] = '\0';
  for (size_t r = 0; r < rs->n; r++) {
    char hex[33];
    key_hex(rs->v[r].key, hex);
    if (!strncmp(hex, prefix, n) && count++ == 0) *index = r;
  }
  if (count == 0) return fail("no record matches key prefix %s", prefix_arg);
  if (count > 1)
    return fail("key prefix %s is ambiguous: it matches %zu records (sk-cache ls; use more digits)", prefix_arg,
                count);
  return 0;
}

static int cmd_rm(const options *o, sk_cache *c) {
  /* Resolve every prefix before removing anything: one bad prefix removes nothing. */
  rows rs;
  int rc = collect(c, &rs);
  if (rc) {
    free_rows(&rs);
    return rc;
  }
  size_t *match = calloc((size_t)o->nargs, sizeof *match);
  if (!match) {
    free_rows(&rs);
    return fail("out of memory");
  }
  for (int i = 0; i < o->nargs && rc == 0; i++) rc = find_prefix(&rs, o->args[i], &match[i]);
  cJSON *arr = o->json && rc == 0 ? cJSON_CreateArray() : NULL;
  for (int i = 0; i < o->nargs && rc == 0; i++) {
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= match[j] == match[i];
    if (dup) continue;
    char hex[33];
    key_hex(rs.v[match[i]].key, hex);
    if (sk_cache_remove(c, rs.v[match[i]].key) != SK_OK) {
      rc = fail("%s", sk_last_error_message());
      break;
    }
    if (arr) cJSON_AddItemToArray(arr, cJSON_CreateString(hex));
    else printf("removed %s\n", hex);
  }
  if (arr) {
    if (rc == 0) print_json(arr);
    else cJSON_Delete(arr);
  }
  free(match);
  free_rows(&rs);
  return rc;
}

static int cmd_cubin(const options *o, sk_cache *c) {
  rows rs;
  size_t index = 0;
  int rc = collect(c, &rs);
  if (rc == 0) rc = find_prefix(&rs, o->args[0], &index);
  sk_lookup hit = SK_LOOKUP_MISS;
  sk_record rec;
  void *owned = NULL;
  if (rc == 0 && sk_cache_get(c, rs.v[index].key, &hit, &rec, &owned) != SK_OK) rc = fail("%s", sk_last_error_message());
  if (rc == 0 && hit != SK_LOOKUP_HIT) rc = fail("record %s failed verification (sk-cache verify)", o->args[0]);
  if (rc == 0) {
    FILE *f = fopen(o->args[1], "wb");
    if (!f) {
      rc = fail("cannot create %s: %s", o->args[1], strerror(errno));
    } else {
      const int bad = fwrite(rec.cubin, 1, rec.cubin_size, f) != rec.cubin_size;
      if (fclose(f) != 0 || bad) {
        rc = fail("writing %s: %s", o->args[1], strerror(errno));
        remove(o->args[1]); /* no truncated cubin left behind */
      }
    }
  }
  if (rc == 0) {
    char hex[33];
    key_hex(rec.key, hex);
    if (o->json) {
      cJSON *obj = cJSON_CreateObject();
      cJSON_AddStringToObject(obj, "key", hex);
      cJSON_AddStringToObject(obj, "arch", rec.arch);
      cJSON_AddStringToObject(obj, "lowered_name", rec.lowered_name);
      cJSON_AddStringToObject(obj, "file", o->args[1]);
      cJSON_AddNumberToObject(obj, "bytes", (double)rec.cubin_size);
      rc = print_json(obj);
    } else {
      printf("wrote %zu bytes of %s (%s, %s) to %s\n", rec.cubin_size, hex, rec.arch, rec.lowered_name, o->args[1]);
    }
  }
  free(owned);
  free_rows(&rs);
  return rc;
}

static int cmd_export(const options *o, sk_cache *c) {
  if (sk_cache_export(c, o->args[0]) != SK_OK) return fail("%s", sk_last_error_message());
  sk_cache_stat st;
  if (sk_cache_get_stat(c, &st) != SK_OK) return fail("%s", sk_last_error_message());
  struct stat fst;
  uint64_t file_bytes = stat(o->args[0], &fst) == 0 ? (uint64_t)fst.st_size : 0;
  if (o->json) {
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "file", o->args[0]);
    cJSON_AddNumberToObject(obj, "records", (double)st.records);
    cJSON_AddNumberToObject(obj, "file_bytes", (double)file_bytes);
    return print_json(obj);
  }
  char size[32];
  format_bytes(file_bytes, size, sizeof size);
  printf("exported %llu record%s to %s (%s)\n", (unsigned long long)st.records,
         st.records == 1 ? "" : "s", o->args[0], size);
  return 0;
}

static int cmd_import(const options *o, sk_cache *c) {
  sk_cache_import_counts n;
  if (sk_cache_import(c, o->args[0], o->overwrite, &n) != SK_OK) return fail("%s", sk_last_error_message());
  if (o->json) {
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddNumberToObject(obj, "imported", (double)n.imported);
    cJSON_AddNumberToObject(obj, "kept", (double)n.kept);
    cJSON_AddNumberToObject(obj, "invalid", (double)n.invalid);
    return print_json(obj);
  }
  /* Kept and invalid records are different things: --overwrite replaces the first, never the
   * second. */
  printf("imported %llu record%s", (unsigned long long)n.imported, n.imported == 1 ? "" : "s");
  if (n.kept) printf(", kept %llu existing (--overwrite replaces them)", (unsigned long long)n.kept);
  if (n.invalid)
    printf(", %llu invalid record%s not imported (failed verification)", (unsigned long long)n.invalid,
           n.invalid == 1 ? "" : "s");
  putchar('\n');
  return 0;
}

typedef struct command {
  const char *name;
  int (*run)(const options *, sk_cache *);
  int min_args, max_args;
  int writes, may_create;
  const char *args_usage;
} command;

static const command COMMANDS[] = {
    {"ls", cmd_ls, 0, 0, 0, 0, ""},
    {"stat", cmd_stat, 0, 0, 0, 0, ""},
    {"verify", cmd_verify, 0, 0, 0, 0, ""},
    {"prune", cmd_prune, 0, 0, 1, 0, "[--max-bytes N] [--older-than-days D]"},
    {"rm", cmd_rm, 1, 64, 1, 0, "KEYPREFIX..."},
    {"cubin", cmd_cubin, 2, 2, 0, 0, "KEYPREFIX FILE"},
    {"export", cmd_export, 1, 1, 0, 0, "FILE"},
    {"import", cmd_import, 1, 1, 1, 1, "FILE [--overwrite]"},
};

int main(int argc, char **argv) {
  options o;
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  const command *cmd = NULL;
  for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
    if (!strcmp(COMMANDS[i].name, o.command)) cmd = &COMMANDS[i];
  if (!cmd) return usage_error("unknown command '%s'", o.command);
  if (o.nargs < cmd->min_args || o.nargs > cmd->max_args)
    return usage_error("usage: sk-cache %s %s", cmd->name, cmd->args_usage);
  if ((o.have_max_bytes || o.have_older_than) && strcmp(cmd->name, "prune"))
    return usage_error("--max-bytes and --older-than-days belong to prune");
  if (o.overwrite && strcmp(cmd->name, "import"))
    return usage_error("--overwrite belongs to import");
  if (!strcmp(cmd->name, "prune") && !o.have_max_bytes && !o.have_older_than)
    return usage_error("prune needs --max-bytes N and/or --older-than-days D");

  if (!strcmp(cmd->name, "rm") && (rc = check_key_prefixes(&o, o.nargs)) != 0) return rc;
  if (!strcmp(cmd->name, "cubin") && (rc = check_key_prefixes(&o, 1)) != 0) return rc;

  char dir[4096];
  if (o.cache_dir) {
    snprintf(dir, sizeof dir, "%s", o.cache_dir);
  } else if (sk_cache_default_dir(dir, sizeof dir) != SK_OK) {
    return fail("%s (use --cache-dir)", sk_last_error_message());
  }
  sk_cache *c = NULL;
  rc = open_cache(dir, !cmd->writes, cmd->may_create, &c);
  if (rc) return rc;
  rc = cmd->run(&o, c);
  sk_cache_close(c);
  if (fflush(stdout) != 0) rc = fail("writing output: %s", strerror(errno));
  return rc;
}
