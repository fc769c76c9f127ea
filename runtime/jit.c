/* runtime/jit.c - NVRTC (and nvJitLink) compilation of one kernel request into a cubin. */
#include <cjson/cJSON.h>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "runtime.h"

/* Always passed first; part of the key. The toolkit include path is added after these and is
 * deliberately not part of the key (it differs between machines; the NVRTC version, which is in
 * the key, pins the toolkit headers' contents). -Xptxas=-v: ptxas reports every kernel's
 * registers, stack, spills and shared memory in the log (sk_parse_ptxas_resources); it changes
 * no code, but ptxas records its command line in the cubin, so it belongs to the key too. */
const char *const sk_base_options[] = {"-std=c++17", "-default-device", "-DSPARKINFER_JIT=1", "-Xptxas=-v"};
const size_t sk_base_option_count = sizeof sk_base_options / sizeof sk_base_options[0];

static pthread_once_t versions_once = PTHREAD_ONCE_INIT;
static int v_nvrtc_major, v_nvrtc_minor, v_link_major, v_link_minor;

static void versions_load(void) {
  nvrtcVersion(&v_nvrtc_major, &v_nvrtc_minor);
  unsigned major = 0, minor = 0;
  if (nvJitLinkVersion(&major, &minor) == NVJITLINK_SUCCESS) {
    v_link_major = (int)major;
    v_link_minor = (int)minor;
  }
}

void sk_jit_versions(int *nvrtc_major, int *nvrtc_minor, int *link_major, int *link_minor) {
  pthread_once(&versions_once, versions_load);
  if (nvrtc_major) *nvrtc_major = v_nvrtc_major;
  if (nvrtc_minor) *nvrtc_minor = v_nvrtc_minor;
  if (link_major) *link_major = v_link_major;
  if (link_minor) *link_minor = v_link_minor;
}

void sk_compiled_free(sk_compiled *c) {
  if (!c) return;
  free(c->cubin);
  free(c->lowered_name);
  free(c->log);
  memset(c, 0, sizeof *c);
}

static int str_ok(const char *s, size_t max) { return s && *s && strnlen(s, max) < max; }

sk_status sk_request_validate(const sk_kernel_request *req, bool allow_null_arch,
                              const sk_embedded_source **src_out) {
  if (!req) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request is NULL");
  if (!str_ok(req->source, 256))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request: source must be a non-empty path shorter than 256 bytes");
  if (!str_ok(req->name_expr, SK_MAX_NAME_EXPR))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request for %s: name_expr must be non-empty and shorter than %d bytes",
                        req->source, SK_MAX_NAME_EXPR);
  if (req->op && strnlen(req->op, 128) >= 128)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request: op name longer than 127 bytes");
  if (req->params && strnlen(req->params, 1024) >= 1024)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request: params longer than 1023 bytes");
  if (req->arch) {
    if (!sk_arch_valid(req->arch))
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request for %s: arch \"%.32s\" is not of the form sm_NN[a|f]",
                          req->name_expr, req->arch);
  } else if (!allow_null_arch) {
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request for %s: arch must be set", req->name_expr);
  }
  if (req->num_options > SK_MAX_OPTIONS)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request for %s: %zu options (max %d)", req->name_expr,
                        req->num_options, SK_MAX_OPTIONS);
  if (req->num_options && !req->options)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request for %s: num_options > 0 but options is NULL",
                        req->name_expr);
  for (size_t i = 0; i < req->num_options; i++) {
    if (!str_ok(req->options[i], SK_MAX_OPTION))
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request for %s: option %zu is NULL, empty or too long",
                          req->name_expr, i);
    if (!strncmp(req->options[i], "-arch", 5) || !strncmp(req->options[i], "--gpu-architecture", 18))
      return sk_set_error(SK_ERR_INVALID_ARGUMENT, "kernel request for %s: set the arch through req->arch, not option %s",
                          req->name_expr, req->options[i]);
  }
  /* One-entry memo per thread: a hot loop resolves the same few sources again and again. */
  static _Thread_local const sk_embedded_source *last_src;
  const sk_embedded_source *src =
      last_src && !strcmp(last_src->path, req->source) ? last_src : sk_find_embedded_source(req->source);
  if (src) last_src = src;
  if (src_out) *src_out = src;
  if (!src)
    return sk_set_error(SK_ERR_NOT_FOUND, "kernel source \"%s\" is not embedded in this build (see sk_list_kernel_sources)",
                        req->source);
  return SK_OK;
}

static char *nvrtc_log(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) return strdup("");
  char *log = malloc(n + 1);
  if (!log) return NULL;
  if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
  log[n] = 0;
  /* trim trailing whitespace */
  size_t len = strlen(log);
  while (len && (log[len - 1] == '\n' || log[len - 1] == ' ' || log[len - 1] == '\0')) log[--len] = 0;
  return log;
}

/* Append `text` to the malloc'd *log (NULL: empty), newline-separated; unchanged when out of memory. */
static void log_append(char **log, const char *text) {
  size_t have = *log ? strlen(*log) : 0, add = strlen(text);
  if (!add) return;
  char *merged = realloc(*log, have + add + 2);
  if (!merged) return;
  if (have) merged[have++] = '\n';
  memcpy(merged + have, text, add + 1);
  *log = merged;
}

/* Append one of nvJitLink's logs (its size and text getters) to *log. */
static void append_link_log(nvJitLinkHandle h, nvJitLinkResult (*get_size)(nvJitLinkHandle, size_t *),
                            nvJitLinkResult (*get)(nvJitLinkHandle, char *), char **log) {
  size_t n = 0;
  if (get_size(h, &n) != NVJITLINK_SUCCESS || n <= 1) return;
  char *text = malloc(n + 1);
  if (!text) return;
  if (get(h, text) != NVJITLINK_SUCCESS) text[0] = 0;
  text[n] = 0;
  log_append(log, text);
  free(text);
}

static sk_status link_ltoir(const sk_kernel_request *req, const void *ltoir, size_t ltoir_size,
                            sk_compiled *out, char **link_log) {
  char arch_opt[32];
  snprintf(arch_opt, sizeof arch_opt, "-arch=%s", req->arch);
  const char *opts[] = {arch_opt, "-lto", "-Xptxas=-v"}; /* -v: the resource report, as for NVRTC */
  nvJitLinkHandle h;
  nvJitLinkResult r = nvJitLinkCreate(&h, 3, opts);
  if (r != NVJITLINK_SUCCESS)
    return sk_set_error(SK_ERR_COMPILE, "nvJitLinkCreate failed (%d) for %s", (int)r, req->name_expr);
  r = nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, ltoir, ltoir_size, "sk_main");
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(h);
  *link_log = NULL;
  append_link_log(h, nvJitLinkGetInfoLogSize, nvJitLinkGetInfoLog, link_log);  /* ptxas -v lines */
  append_link_log(h, nvJitLinkGetErrorLogSize, nvJitLinkGetErrorLog, link_log);
  if (r != NVJITLINK_SUCCESS) {
    sk_status s = sk_set_error(SK_ERR_COMPILE, "nvJitLink failed (%d) for %s [%s]:\n%s", (int)r,
                               req->name_expr, req->arch, *link_log ? *link_log : "");
    nvJitLinkDestroy(&h);
    return s;
  }
  size_t size = 0;
  nvJitLinkGetLinkedCubinSize(h, &size);
  out->cubin = malloc(size ? size : 1);
  if (!out->cubin) { nvJitLinkDestroy(&h); return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory for cubin"); }
  nvJitLinkGetLinkedCubin(h, out->cubin);
  out->cubin_size = size;
  nvJitLinkDestroy(&h);
  return SK_OK;
}

sk_status sk_jit_compile(const sk_kernel_request *req, sk_compiled *out) {
  memset(out, 0, sizeof *out);
  const sk_embedded_source *src = NULL;
  SK_TRY(sk_request_validate(req, false, &src));

  /* Headers: the closure of the kernel's source, by their ops-relative paths. */
  const char *hdr_text[512], *hdr_name[512];
  size_t nh = src->closure_count < 512 ? src->closure_count : 512;
  for (size_t i = 0; i < nh; i++) {
    hdr_text[i] = sk_embedded_sources[src->closure[i]].text;
    hdr_name[i] = sk_embedded_sources[src->closure[i]].path;
  }
  char main_src[400];
  snprintf(main_src, sizeof main_src, "#include \"%s\"\n", req->source);

  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, main_src, "sk_main.cu", (int)nh, hdr_text, hdr_name);
  if (r != NVRTC_SUCCESS)
    return sk_set_error(SK_ERR_COMPILE, "nvrtcCreateProgram: %s", nvrtcGetErrorString(r));
  r = nvrtcAddNameExpression(prog, req->name_expr);
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    return sk_set_error(SK_ERR_COMPILE, "nvrtcAddNameExpression(%s): %s", req->name_expr, nvrtcGetErrorString(r));
  }
  const char *opts[SK_MAX_OPTIONS + 16];
  size_t no = 0;
  for (size_t i = 0; i < sk_base_option_count; i++) opts[no++] = sk_base_options[i];
  char arch_opt[40], inc_opt[1100];
  snprintf(arch_opt, sizeof arch_opt, "-arch=%s", req->arch);
  opts[no++] = arch_opt;
  snprintf(inc_opt, sizeof inc_opt, "-I%s/include", sk_config()->cuda_home);
  opts[no++] = inc_opt;
  if (req->link) opts[no++] = "-dlto";
  for (size_t i = 0; i < req->num_options; i++) opts[no++] = req->options[i];

  double t0 = sk_now_seconds();
  r = nvrtcCompileProgram(prog, (int)no, opts);
  out->nvrtc_ms = (sk_now_seconds() - t0) * 1e3;
  out->log = nvrtc_log(prog);
  if (r != NVRTC_SUCCESS) {
    sk_status s = sk_set_error(SK_ERR_COMPILE, "NVRTC failed to compile %s for %s (%s): %s\n%s",
                               req->name_expr, req->arch, req->source, nvrtcGetErrorString(r),
                               out->log ? out->log : "");
    nvrtcDestroyProgram(&prog);
    sk_compiled_free(out);
    return s;
  }
  const char *lowered = NULL;
  r = nvrtcGetLoweredName(prog, req->name_expr, &lowered);
  if (r != NVRTC_SUCCESS || !lowered) {
    nvrtcDestroyProgram(&prog);
    sk_compiled_free(out);
    return sk_set_error(SK_ERR_COMPILE, "nvrtcGetLoweredName(%s) failed: is it a __global__ function template instantiation?",
                        req->name_expr);
  }
  out->lowered_name = strdup(lowered);
  sk_status status = SK_OK;
  if (req->link) {
    size_t n = 0;
    nvrtcGetLTOIRSize(prog, &n);
    void *ir = malloc(n ? n : 1);
    if (!ir) status = sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory for LTO-IR");
    else {
      nvrtcGetLTOIR(prog, ir);
      char *link_log = NULL;
      double t1 = sk_now_seconds();
      status = link_ltoir(req, ir, n, out, &link_log);
      out->link_ms = (sk_now_seconds() - t1) * 1e3;
      if (link_log) log_append(&out->log, link_log);
      free(link_log);
      free(ir);
    }
  } else {
    size_t n = 0;
    nvrtcGetCUBINSize(prog, &n);
    out->cubin = malloc(n ? n : 1);
    if (!out->cubin) status = sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory for cubin");
    else {
      nvrtcGetCUBIN(prog, out->cubin);
      out->cubin_size = n;
    }
  }
  nvrtcDestroyProgram(&prog);
  if (status == SK_OK && (!out->lowered_name || !out->log)) status = sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  if (status == SK_OK) sk_parse_ptxas_resources(out->log, out->lowered_name, &out->resources);
  if (status != SK_OK) sk_compiled_free(out);
  return status;
}

/* The unsigned number just before `suffix` in [line, end), e.g. "160 bytes smem" -> 160. */
static bool number_before(const char *line, const char *end, const char *suffix, unsigned *out) {
  size_t ls = strlen(suffix);
  for (const char *p = line; p + ls <= end; p++) {
    if (memcmp(p, suffix, ls) != 0) continue;
    const char *d = p;
    while (d > line && d[-1] == ' ') d--;
    const char *digits_end = d;
    while (d > line && d[-1] >= '0' && d[-1] <= '9') d--;
    if (d == digits_end) continue;
    unsigned long v = strtoul(d, NULL, 10);
    *out = v > 0xffffffffUL ? 0xffffffffu : (unsigned)v;
    return true;
  }
  return false;
}

bool sk_parse_ptxas_resources(const char *log, const char *lowered_name, sk_kernel_resources *out) {
  memset(out, 0, sizeof *out);
  if (!log || !lowered_name || !*lowered_name) return false;
  static const char kEntry[] = "Compiling entry function '", kProps[] = "Function properties for ";
  const size_t name_len = strlen(lowered_name);
  const char *start = NULL;
  for (const char *e = strstr(log, kEntry); e && !start; e = strstr(e + 1, kEntry)) {
    const char *name = e + sizeof kEntry - 1;
    if (!strncmp(name, lowered_name, name_len) && name[name_len] == '\'') start = name + name_len;
  }
  if (!start) return false;
  const char *stop = strstr(start, kEntry);
  if (!stop) stop = start + strlen(start);
  /* "Function properties for <name>" precedes the stack/spill line of that function: the
   * entry's own, and those of non-inlined device functions it calls. */
  bool entry_props = false;
  for (const char *line = start; line < stop;) {
    const char *eol = memchr(line, '\n', (size_t)(stop - line));
    const char *end = eol ? eol : stop;
    const char *props = strstr(line, kProps);
    unsigned v;
    if (props && props < end) {
      const char *name = props + sizeof kProps - 1;
      entry_props = (size_t)(end - name) == name_len && !memcmp(name, lowered_name, name_len);
    } else if (number_before(line, end, " registers", &v)) {
      out->registers = v, out->known = true;
      if (number_before(line, end, " barriers", &v)) out->barriers = v;
      if (number_before(line, end, " bytes smem", &v)) out->static_smem_bytes = v;
    } else if (entry_props && number_before(line, end, " bytes stack frame", &v)) {
      out->stack_frame_bytes = v;
      if (number_before(line, end, " bytes spill stores", &v)) out->spill_store_bytes = v;
      if (number_before(line, end, " bytes spill loads", &v)) out->spill_load_bytes = v;
      entry_props = false;
    }
    line = eol ? eol + 1 : stop;
  }
  return out->known;
}

static const char **source_list;
static void source_list_build(void) {
  source_list = calloc(sk_embedded_source_count + 1, sizeof *source_list);
  if (!source_list) return;
  for (size_t i = 0; i < sk_embedded_source_count; i++) source_list[i] = sk_embedded_sources[i].path;
}

SK_API sk_status sk_list_kernel_sources(const char *const **paths, size_t *count) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (!paths || !count) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_list_kernel_sources: NULL argument");
  pthread_once(&once, source_list_build);
  if (!source_list) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  *paths = source_list;
  *count = sk_embedded_source_count;
  return SK_OK;
}

void sk_resources_add_json(cJSON *o, const sk_kernel_resources *r) {
  if (!o || !r || !r->known) return;
  cJSON *j = cJSON_AddObjectToObject(o, "resources");
  if (!j) return;
  cJSON_AddNumberToObject(j, "registers", r->registers);
  cJSON_AddNumberToObject(j, "barriers", r->barriers);
  cJSON_AddNumberToObject(j, "stack_frame_bytes", r->stack_frame_bytes);
  cJSON_AddNumberToObject(j, "spill_store_bytes", r->spill_store_bytes);
  cJSON_AddNumberToObject(j, "spill_load_bytes", r->spill_load_bytes);
  cJSON_AddNumberToObject(j, "static_smem_bytes", r->static_smem_bytes);
}
