/* runtime/timing.c - SPARKINFER_TIMING=1: every launch bracketed by CUDA events; per-kernel
 * count/mean/p50/p99 on request and at exit. Diagnostic mode: it allocates events and takes a
 * lock per launch, which the normal launch path never does. */
#include <cuda.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

typedef struct timed_launch {
  sk_kernel *kernel;
  void *start, *stop;
} timed_launch;

typedef struct kernel_times {
  sk_kernel *kernel;
  double *us;
  size_t n, cap;
} kernel_times;

static pthread_mutex_t timing_mu = PTHREAD_MUTEX_INITIALIZER;
static timed_launch *pending;
static size_t pending_n, pending_cap;
static kernel_times *per_kernel;
static size_t per_kernel_n, per_kernel_cap;

sk_status sk_timing_launch(sk_kernel *k, sk_dim3 grid, sk_dim3 block, unsigned smem, void *stream, void **args) {
  void *fn = atomic_load(&k->function);
  int capturing = 0;
  if (sk_cu.cuStreamIsCapturing(stream, &capturing) != 0) capturing = 1;
  void *start = NULL, *stop = NULL;
  if (!capturing) {
    /* Events in a capturing stream would become graph nodes; time eager launches only. */
    if (sk_cu.cuEventCreate(&start, CU_EVENT_DEFAULT) || sk_cu.cuEventCreate(&stop, CU_EVENT_DEFAULT)) start = stop = NULL;
    if (start) sk_cu.cuEventRecord(start, stream);
  }
  sk_cu_result r = sk_cu.cuLaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, stream, args, NULL);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    SK_TRY(sk_driver_ensure_context());
    r = sk_cu.cuLaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, stream, args, NULL);
  }
  if (r != 0) {
    if (start) sk_cu.cuEventDestroy(start);
    if (stop) sk_cu.cuEventDestroy(stop);
    return sk_cuda_error(r, "cuLaunchKernel");
  }
  if (start && stop) {
    sk_cu.cuEventRecord(stop, stream);
    pthread_mutex_lock(&timing_mu);
    if (pending_n == pending_cap) {
      size_t cap = pending_cap ? pending_cap * 2 : 1024;
      timed_launch *p = realloc(pending, cap * sizeof *p);
      if (p) { pending = p; pending_cap = cap; }
    }
    if (pending_n < pending_cap) pending[pending_n++] = (timed_launch){k, start, stop};
    else { sk_cu.cuEventDestroy(start); sk_cu.cuEventDestroy(stop); }
    pthread_mutex_unlock(&timing_mu);
  }
  return SK_OK;
}

static kernel_times *times_for(sk_kernel *k) {
  for (size_t i = 0; i < per_kernel_n; i++)
    if (per_kernel[i].kernel == k) return &per_kernel[i];
  if (per_kernel_n == per_kernel_cap) {
    size_t cap = per_kernel_cap ? per_kernel_cap * 2 : 64;
    kernel_times *p = realloc(per_kernel, cap * sizeof *p);
    if (!p) return NULL;
    per_kernel = p;
    per_kernel_cap = cap;
  }
  per_kernel[per_kernel_n] = (kernel_times){k, NULL, 0, 0};
  return &per_kernel[per_kernel_n++];
}

/* Fold completed event pairs into per-kernel samples. Caller holds timing_mu. */
static void drain_pending(void) {
  for (size_t i = 0; i < pending_n; i++) {
    timed_launch *t = &pending[i];
    float ms = 0;
    if (sk_cu.cuEventSynchronize(t->stop) == 0 && sk_cu.cuEventElapsedTime(&ms, t->start, t->stop) == 0) {
      kernel_times *kt = times_for(t->kernel);
      if (kt) {
        if (kt->n == kt->cap) {
          size_t cap = kt->cap ? kt->cap * 2 : 256;
          double *p = realloc(kt->us, cap * sizeof *p);
          if (p) { kt->us = p; kt->cap = cap; }
        }
        if (kt->n < kt->cap) kt->us[kt->n++] = ms * 1e3;
      }
    }
    sk_cu.cuEventDestroy(t->start);
    sk_cu.cuEventDestroy(t->stop);
  }
  pending_n = 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

SK_API sk_status sk_timing_summary(sk_timing_entry *entries, size_t capacity, size_t *count) {
  if (!count || (capacity && !entries)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_timing_summary: NULL argument");
  *count = 0;
  if (!sk_config()->timing) return SK_OK;
  pthread_mutex_lock(&timing_mu);
  if (pending_n) drain_pending();
  for (size_t i = 0; i < per_kernel_n; i++) {
    kernel_times *kt = &per_kernel[i];
    if (!kt->n) continue;
    if (*count < capacity) {
      sk_timing_entry *e = &entries[*count];
      memset(e, 0, sizeof *e);
      snprintf(e->kernel, sizeof e->kernel, "%s %s", *kt->kernel->op ? kt->kernel->op : "-", kt->kernel->name_expr);
      double *sorted = malloc(kt->n * sizeof *sorted);
      double total = 0;
      for (size_t j = 0; j < kt->n; j++) total += kt->us[j];
      e->count = kt->n;
      e->total_us = total;
      e->mean_us = total / (double)kt->n;
      if (sorted) {
        memcpy(sorted, kt->us, kt->n * sizeof *sorted);
        qsort(sorted, kt->n, sizeof *sorted, cmp_double);
        e->p50_us = sorted[(kt->n - 1) / 2];
        e->p99_us = sorted[(size_t)ceil(0.99 * (double)kt->n) - 1];
        free(sorted);
      }
    }
    (*count)++;
  }
  pthread_mutex_unlock(&timing_mu);
  return SK_OK;
}

SK_API sk_status sk_timing_report(FILE *out) {
  if (!out) out = stderr;
  size_t n = 0;
  SK_TRY(sk_timing_summary(NULL, 0, &n));
  if (!n) return SK_OK;
  sk_timing_entry *e = calloc(n, sizeof *e);
  if (!e) return sk_set_error(SK_ERR_OUT_OF_MEMORY, "out of memory");
  size_t got = 0;
  sk_status s = sk_timing_summary(e, n, &got);
  if (s == SK_OK) {
    fprintf(out, "sparkinfer timing (GPU time per launch, CUDA events)\n");
    fprintf(out, "%-80s %10s %10s %10s %10s\n", "kernel", "count", "mean_us", "p50_us", "p99_us");
    for (size_t i = 0; i < got && i < n; i++)
      fprintf(out, "%-80.80s %10llu %10.2f %10.2f %10.2f\n", e[i].kernel, (unsigned long long)e[i].count, e[i].mean_us,
              e[i].p50_us, e[i].p99_us);
  }
  free(e);
  return s;
}

void sk_timing_at_exit(void) {
  if (!sk_config()->timing) return;
  sk_timing_report(stderr);
}
