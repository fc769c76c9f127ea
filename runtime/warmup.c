/* runtime/warmup.c - SPARKINFER_RECORD_WARMUP=FILE: what this process resolved, written as an
 * sk-warm manifest (kernel entries from the table, op entries noted by ops' plans), so that a
 * warm-up run becomes a file that prebuilds the same kernels offline. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime.h"

static pthread_mutex_t ops_mu = PTHREAD_MUTEX_INITIALIZER;
static cJSON *op_entries; /* array of {"op", "caps"}; deduplicated by printed text */

void sk_warmup_note_op(const char *op, const cJSON *caps) {
  if (!sk_config()->record_warmup_path || !op || !caps) return;
  cJSON *entry = cJSON_CreateObject();
  if (!entry) return;
  cJSON_AddStringToObject(entry, "op", op);
  cJSON_AddItemToObject(entry, "caps", cJSON_Duplicate(caps, 1));
  pthread_mutex_lock(&ops_mu);
  if (!op_entries) op_entries = cJSON_CreateArray();
  bool dup = false;
  const cJSON *e;
  cJSON_ArrayForEach(e, op_entries) dup |= cJSON_Compare(e, entry, 1);
  if (!dup && op_entries) cJSON_AddItemToArray(op_entries, entry);
  else cJSON_Delete(entry);
  pthread_mutex_unlock(&ops_mu);
}

static int add_kernel(void *ud, const sk_kernel *k) {
  cJSON *arr = ud;
  cJSON *o = sk_kernel_request_json(k);
  if (!o) return 1;
  cJSON_AddItemToArray(arr, o);
  return 0;
}

SK_API sk_status sk_warmup_record_flush(void) {
  const char *path = sk_config()->record_warmup_path;
  if (!path) return SK_OK;
  cJSON *root = cJSON_CreateObject();
  if (!root) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  char who[64];
  snprintf(who, sizeof who, "sparkinfer %s pid %d", SPARKINFER_VERSION_STRING, (int)getpid());
  cJSON_AddStringToObject(root, "format", "sparkinfer-manifest");
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "recorded_by", who);
  cJSON *kernels = cJSON_AddArrayToObject(root, "kernels");
  sk_table_foreach(add_kernel, kernels);
  pthread_mutex_lock(&ops_mu);
  cJSON_AddItemToObject(root, "ops", op_entries ? cJSON_Duplicate(op_entries, 1) : cJSON_CreateArray());
  pthread_mutex_unlock(&ops_mu);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  /* Write beside the target, then rename: a reader never sees half a manifest. */
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  sk_status s = SK_OK;
  FILE *f = fopen(tmp, "w");
  if (!f) s = sk_set_error(SK_ERR_IO, "SPARKINFER_RECORD_WARMUP: cannot write %s", tmp);
  else {
    int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
      unlink(tmp);
      s = sk_set_error(SK_ERR_IO, "SPARKINFER_RECORD_WARMUP: cannot write %s", path);
    }
  }
  cJSON_free(text);
  return s;
}

void sk_warmup_at_exit(void) {
  if (!sk_config()->record_warmup_path) return;
  if (sk_warmup_record_flush() != SK_OK) sk_warn("%s", sk_last_error_message());
}
