/* runtime/manifest.c - warm-up manifests (JSON, cJSON) -> owned kernel requests.
 * Format (docs/tools.md):
 *   {"format": "sparkinfer-manifest", "version": 1,
 *    "kernels": [{"op", "source", "name", "params"?, "options"?: [..], "link"?: bool,
 *                 "arch"?: "sm_90a", "archs"?: ["sm_120a", ...]}],
 *    "ops": [{"op": "group.op", "caps": {...}, "archs"?: [...]}]}
 * Parsing is all-or-nothing: any problem is SK_ERR_MANIFEST naming the entry and field. Strict
 * where cJSON is lenient: one document per file, no NUL characters, no duplicate fields, whole
 * numbers in caps. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

sk_status sk_request_list_add(sk_request_list *l, const sk_kernel_request *req) {
  if (l->count == l->capacity) {
    size_t cap = l->capacity ? l->capacity * 2 : 16;
    sk_owned_request *p = realloc(l->items, cap * sizeof *p);
    if (!p) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
    l->items = p;
    l->capacity = cap;
  }
  sk_owned_request *o = &l->items[l->count];
  memset(o, 0, sizeof *o);
  o->op = strdup(req->op ? req->op : "");
  o->source = dup_or_null(req->source);
  o->name_expr = dup_or_null(req->name_expr);
  o->params = strdup(req->params ? req->params : "");
  o->arch = dup_or_null(req->arch);
  o->num_options = req->num_options;
  o->options = calloc(req->num_options + 1, sizeof(char *));
  bool ok = o->op && o->params && o->options && (!req->source || o->source) && (!req->name_expr || o->name_expr) &&
            (!req->arch || o->arch);
  for (size_t i = 0; ok && i < req->num_options; i++) ok = (o->options[i] = strdup(req->options[i])) != NULL;
  o->req = (sk_kernel_request){o->op, o->source, o->name_expr, o->params, o->arch,
                               (const char *const *)o->options, o->num_options, req->link};
  l->count++;
  if (!ok) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  return SK_OK;
}

void sk_request_list_free(sk_request_list *l) {
  if (!l) return;
  for (size_t i = 0; i < l->count; i++) {
    sk_owned_request *o = &l->items[i];
    free(o->op); free(o->source); free(o->name_expr); free(o->params); free(o->arch);
    for (size_t j = 0; j < o->num_options; j++) free(o->options[j]);
    free(o->options);
  }
  free(l->items);
  memset(l, 0, sizeof *l);
}

static sk_status bad(const char *where, const char *what) {
  return sk_set_error(SK_ERR_MANIFEST, "manifest: %s: %s", where, what);
}

static bool in_list(const char *s, const char *const *list) {
  for (; list && *list; list++)
    if (!strcmp(s, *list)) return true;
  return false;
}

/* Collect an entry's archs: the command line's (restricted by the entry's "archs" when given),
 * else the entry's "archs", else its "arch". */
static sk_status entry_archs(const cJSON *entry, const char *where, const char *const *cli, const char **out,
                             size_t *n) {
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(entry, "arch");
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(entry, "archs");
  char w[160];
  const char *own[16];
  size_t nown = 0;
  if (arch) {
    snprintf(w, sizeof w, "%s.arch", where);
    if (!cJSON_IsString(arch) || !sk_arch_valid(arch->valuestring)) return bad(w, "expected an arch string like \"sm_120a\"");
  }
  if (archs) {
    snprintf(w, sizeof w, "%s.archs", where);
    if (!cJSON_IsArray(archs)) return bad(w, "expected an array of arch strings");
    const cJSON *a;
    cJSON_ArrayForEach(a, archs) {
      if (!cJSON_IsString(a) || !sk_arch_valid(a->valuestring)) return bad(w, "expected arch strings like \"sm_120a\"");
      if (nown == 16) return bad(w, "more than 16 archs");
      own[nown++] = a->valuestring;
    }
  }
  *n = 0;
  if (cli && *cli) {
    for (const char *const *c = cli; *c; c++) {
      if (nown) {
        bool listed = false;
        for (size_t i = 0; i < nown; i++) listed |= !strcmp(own[i], *c);
        if (!listed) continue;
      }
      if (*n < 16) out[(*n)++] = *c;
    }
    return SK_OK;
  }
  if (nown) {
    for (size_t i = 0; i < nown; i++) out[(*n)++] = own[i];
    return SK_OK;
  }
  if (arch) {
    out[(*n)++] = arch->valuestring;
    return SK_OK;
  }
  return bad(where, "no arch: give \"arch\"/\"archs\" in the entry or --arch on the command line");
}

sk_status sk_json_check_fields(const cJSON *obj, const char *where, const char *const *allowed) {
  const cJSON *c;
  cJSON_ArrayForEach(c, obj) {
    if (!c->string || !in_list(c->string, allowed))
      return sk_set_error(SK_ERR_MANIFEST, "%s: unknown field \"%.64s\"", where, c->string ? c->string : "?");
  }
  return SK_OK;
}

static sk_status check_keys(const cJSON *obj, const char *where, const char *const *allowed) {
  char w[96];
  snprintf(w, sizeof w, "manifest: %s", where);
  return sk_json_check_fields(obj, w, allowed);
}

static sk_status parse_kernel(const cJSON *k, size_t idx, const char *const *cli, sk_request_list *out) {
  char where[64], w[128];
  snprintf(where, sizeof where, "kernels[%zu]", idx);
  if (!cJSON_IsObject(k)) return bad(where, "expected an object");
  static const char *const allowed[] = {"op", "source", "name", "params", "options", "link", "arch", "archs", NULL};
  SK_TRY(check_keys(k, where, allowed));
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(k, "op");
  const cJSON *source = cJSON_GetObjectItemCaseSensitive(k, "source");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(k, "name");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(k, "params");
  const cJSON *options = cJSON_GetObjectItemCaseSensitive(k, "options");
  const cJSON *link = cJSON_GetObjectItemCaseSensitive(k, "link");
  snprintf(w, sizeof w, "%s.op", where);
  if (!cJSON_IsString(op) || !*op->valuestring) return bad(w, "expected a non-empty string");
  snprintf(w, sizeof w, "%s.source", where);
  if (!cJSON_IsString(source) || !*source->valuestring) return bad(w, "expected a non-empty string");
  snprintf(w, sizeof w, "%s.name", where);
  if (!cJSON_IsString(name) || !*name->valuestring) return bad(w, "expected a non-empty string");
  snprintf(w, sizeof w, "%s.params", where);
  if (params && !cJSON_IsString(params)) return bad(w, "expected a string");
  snprintf(w, sizeof w, "%s.link", where);
  if (link && !cJSON_IsBool(link)) return bad(w, "expected true or false");
  const char *opts[SK_MAX_OPTIONS];
  size_t nopts = 0;
  if (options) {
    snprintf(w, sizeof w, "%s.options", where);
    if (!cJSON_IsArray(options)) return bad(w, "expected an array of strings");
    const cJSON *o;
    cJSON_ArrayForEach(o, options) {
      if (!cJSON_IsString(o)) return bad(w, "expected an array of strings");
      if (nopts == SK_MAX_OPTIONS) return bad(w, "too many options");
      opts[nopts++] = o->valuestring;
    }
  }
  const char *archs[16];
  size_t narchs = 0;
  SK_TRY(entry_archs(k, where, cli, archs, &narchs));
  for (size_t a = 0; a < narchs; a++) {
    sk_kernel_request r = {op->valuestring, source->valuestring, name->valuestring,
                           params ? params->valuestring : "", archs[a], opts, nopts, cJSON_IsTrue(link)};
    sk_status s = sk_request_validate(&r, false, NULL);
    if (s != SK_OK) return sk_set_error(SK_ERR_MANIFEST, "manifest: %s: %s", where, sk_last_error_message());
    SK_TRY(sk_request_list_add(out, &r));
  }
  return SK_OK;
}

static sk_status parse_op(const cJSON *o, size_t idx, const char *const *cli, sk_request_list *out) {
  char where[64], w[128];
  snprintf(where, sizeof where, "ops[%zu]", idx);
  if (!cJSON_IsObject(o)) return bad(where, "expected an object");
  static const char *const allowed[] = {"op", "caps", "arch", "archs", NULL};
  SK_TRY(check_keys(o, where, allowed));
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "op");
  const cJSON *caps = cJSON_GetObjectItemCaseSensitive(o, "caps");
  snprintf(w, sizeof w, "%s.op", where);
  if (!cJSON_IsString(op)) return bad(w, "expected a string naming an op (see sk_list_ops)");
  const struct sk_op_def *d = sk_find_op(op->valuestring);
  if (!d) {
    char msg[200];
    snprintf(msg, sizeof msg, "unknown op \"%.64s\" (see sk_list_ops / sk-warm --list-ops)", op->valuestring);
    return bad(w, msg);
  }
  snprintf(w, sizeof w, "%s.caps", where);
  if (!cJSON_IsObject(caps)) return bad(w, "expected an object");
  const char *archs[16];
  size_t narchs = 0;
  SK_TRY(entry_archs(o, where, cli, archs, &narchs));
  for (size_t a = 0; a < narchs; a++) {
    if (!sk_op_def_supports(d, archs[a])) continue;
    sk_status s = sk_op_build_requests(d, caps, archs[a], out);
    if (s != SK_OK) return sk_set_error(SK_ERR_MANIFEST, "manifest: %s (%s, %s): %s", where, op->valuestring, archs[a],
                                        sk_last_error_message());
  }
  return SK_OK;
}

static size_t line_of(const char *text, size_t off) {
  size_t line = 1;
  for (size_t i = 0; i < off; i++) line += text[i] == '\n';
  return line;
}

/* Where `text` holds a NUL byte, raw or as the escape \u0000 inside a string (cJSON would cut
 * the string there and the rest would be silently lost); len when none. */
static size_t find_nul(const char *text, size_t len) {
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    const char c = text[i];
    if (c == '\0') return i;
    if (c == '"') in_string = !in_string;
    else if (c == '\\' && in_string && i + 1 < len) {
      if (text[i + 1] == 'u' && i + 5 < len && !memcmp(text + i + 2, "0000", 4)) return i;
      i++; /* the escaped character, which may be a quote */
    }
  }
  return len;
}

/* Duplicate object keys anywhere (cJSON keeps both and lookups see the first: the second would
 * be silently ignored). Caps values are each op's to check (sk_json_int refuses a fraction where a
 * count or size is due; alpha, eps and limits are real numbers). `path` names the node for the
 * message. */
static sk_status check_tree(const cJSON *node, char *path, size_t cap) {
  const size_t n = strlen(path);
  if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return SK_OK;
  size_t i = 0;
  for (const cJSON *c = node->child; c; c = c->next, i++) {
    if (cJSON_IsObject(node)) {
      for (const cJSON *d = node->child; d != c; d = d->next)
        if (c->string && d->string && !strcmp(c->string, d->string))
          return sk_set_error(SK_ERR_MANIFEST, "manifest: %s: duplicate field \"%.64s\"", n ? path : "top level",
                              c->string);
      snprintf(path + n, cap - n, "%s%.64s", n ? "." : "", c->string ? c->string : "?");
    } else {
      snprintf(path + n, cap - n, "[%zu]", i);
    }
    const sk_status s = check_tree(c, path, cap);
    path[n] = '\0';
    if (s != SK_OK) return s;
  }
  return SK_OK;
}

sk_status sk_manifest_parse(const char *text, size_t len, const char *const *archs, sk_request_list *out) {
  memset(out, 0, sizeof *out);
  if (!text) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "manifest text is NULL");
  SK_TRY(sk_runtime_ensure_init());
  const size_t nul = find_nul(text, len);
  if (nul < len)
    return sk_set_error(SK_ERR_MANIFEST, "manifest: a NUL character (%s) at byte %zu (line %zu)",
                        text[nul] ? "\\u0000" : "a zero byte", nul, line_of(text, nul));
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    size_t off = end && end >= text ? (size_t)(end - text) : 0;
    if (off > len) off = len;
    return sk_set_error(SK_ERR_MANIFEST, "manifest: invalid or truncated JSON near byte %zu (line %zu)", off,
                        line_of(text, off));
  }
  /* One document per file: anything but whitespace after it (a second document, garbage) is an
   * error rather than silently ignored. */
  size_t off = end && end >= text ? (size_t)(end - text) : len;
  while (off < len && (text[off] == ' ' || text[off] == '\t' || text[off] == '\n' || text[off] == '\r')) off++;
  if (off < len) {
    cJSON_Delete(root);
    return sk_set_error(SK_ERR_MANIFEST, "manifest: unexpected text after the JSON document at byte %zu (line %zu); "
                        "a manifest is one JSON object", off, line_of(text, off));
  }
  char path[256] = "";
  sk_status s = check_tree(root, path, sizeof path);
  static const char *const allowed[] = {"format", "version", "kernels", "ops", "comment", "recorded_by", NULL};
  const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
  const cJSON *kernels = cJSON_GetObjectItemCaseSensitive(root, "kernels");
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "ops");
  if (s != SK_OK) {}
  else if (!cJSON_IsObject(root)) s = bad("top level", "expected an object");
  else if ((s = check_keys(root, "top level", allowed)) != SK_OK) {}
  else if (!cJSON_IsString(format) || strcmp(format->valuestring, "sparkinfer-manifest"))
    s = bad("format", "expected \"sparkinfer-manifest\"");
  else if (!cJSON_IsNumber(version) || version->valuedouble != 1.0)
    s = bad("version", "expected 1 (the only manifest version this build reads)");
  else if (kernels && !cJSON_IsArray(kernels)) s = bad("kernels", "expected an array");
  else if (ops && !cJSON_IsArray(ops)) s = bad("ops", "expected an array");
  size_t i = 0;
  const cJSON *e;
  if (s == SK_OK && kernels) cJSON_ArrayForEach(e, kernels) {
      if ((s = parse_kernel(e, i++, archs, out)) != SK_OK) break;
    }
  i = 0;
  if (s == SK_OK && ops) cJSON_ArrayForEach(e, ops) {
      if ((s = parse_op(e, i++, archs, out)) != SK_OK) break;
    }
  cJSON_Delete(root);
  if (s != SK_OK) sk_request_list_free(out);
  return s;
}
