/* The row quantizers' work split (kernel_src/quantization/split.cuh), checked on the CPU with the
 * kernels' own index functions: the walk of every thread of every CTA (kernel_src/quantization/
 * chunks.cuh ChunkWalk and the step loops of nvfp4_rows / mxfp8_rows, mirrored step for step) is
 * replayed for many shapes and grids, and
 *  - every chunk is loaded and stored exactly once, and a chunk exists iff the walk says so;
 *  - the running x, value, row-major scale and swizzled scale offsets equal the direct formulas
 *    (row * ld_x + 8 col, chunk * bytes, chunk / block, skref_swizzled_scale_offset);
 *  - the lanes of a scale block (2 for NVFP4, 4 for MXFP8: the kernels' shuffles) hold the chunks
 *    of one block, or all hold none;
 *  - every swizzled scale byte is written: data bytes by the walk (exactly once per storing lane),
 *    padding by the padding loop (zero_swizzled_padding's word / byte split, modelled here);
 *  - the host grid (quant_rows_grid) launches one chunk per thread for M <= 128 and about the
 *    requested chunks per thread for large tensors. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../kernel_src/quantization/split.cuh"
#include "ops/quantization/quant_common.h"
#include "ref/skref.h"

typedef struct {
  int blocks, bands, lanes, lane, block, block_stride;
} cta_split; /* CtaSplit */

static cta_split split_of(int m, int cpr, int grid, int cta) {
  cta_split s;
  s.blocks = sk_qsplit_offset_blocks(m, cpr);
  s.bands = sk_qsplit_bands(m);
  s.lanes = sk_qsplit_lanes(grid, s.blocks, s.bands);
  s.lane = sk_qsplit_lane(cta, s.blocks);
  s.block = sk_qsplit_first_block(cta, s.blocks);
  s.block_stride = sk_qsplit_block_stride(grid, s.blocks);
  return s;
}

typedef struct { /* ChunkWalk, with offsets for pointers */
  long long x, values, rows, swizzled;
  unsigned row;
  long long x_stride, chunk_stride, swizzled_stride;
  unsigned row_stride;
  long long loaded_x[SK_QSPLIT_PER_STEP];
  int loaded[SK_QSPLIT_PER_STEP];
} walk;

typedef struct {
  int m, cpr, ld_x, k_tiles, value_bytes, block_chunks;
  uint8_t *chunk_loads, *chunk_stores, *value_writes, *row_scale_writes, *swz_writes;
  size_t swz_bytes;
  int failures;
} run;

#define FAIL(r, ...)                              \
  do {                                            \
    if ((r)->failures++ < 10) fprintf(stderr, __VA_ARGS__); \
  } while (0)

static void walk_start(walk *w, const run *r, const cta_split *s, int block, int t) {
  const unsigned offset = sk_qsplit_offset(block, t);
  w->row = sk_qsplit_first_row(offset, (unsigned)r->cpr, s->lane);
  const unsigned col = offset % (unsigned)r->cpr;
  const long long chunk = (long long)w->row * r->cpr + col;
  w->x = (long long)w->row * r->ld_x + col * 8ll;
  w->values = chunk * r->value_bytes;
  w->rows = chunk / r->block_chunks;
  w->swizzled = sk_qsplit_swizzled_offset(w->row, col / (unsigned)r->block_chunks, (unsigned)r->k_tiles);
  w->x_stride = sk_qsplit_x_stride(s->lanes, r->ld_x);
  w->chunk_stride = sk_qsplit_chunk_stride(s->lanes, r->cpr);
  w->swizzled_stride = sk_qsplit_swizzled_stride(s->lanes, (unsigned)r->k_tiles);
  w->row_stride = sk_qsplit_row_stride(s->lanes);
}

static void walk_load(walk *w, const run *r) {
  for (int j = 0; j < SK_QSPLIT_PER_STEP; j++) {
    w->loaded[j] = w->row + (unsigned)j * w->row_stride < (unsigned)r->m; /* u32, as the kernel */
    w->loaded_x[j] = w->x;
    w->x += w->x_stride;
  }
}

/* Store chunk j of the step; returns the chunk index (-1: none). Checks it against the load. */
static long long walk_store(walk *w, run *r, int j, int scale_lane) {
  long long c = -1;
  if (w->row < (unsigned)r->m) {
    if (!w->loaded[j]) FAIL(r, "stored a chunk that was not loaded (row %u)\n", w->row);
    /* The chunk, from the x offset alone. */
    const long long xo = w->loaded_x[j], row = xo / r->ld_x, e = xo % r->ld_x;
    if (e % 8 || e / 8 >= r->cpr || row != w->row || row >= r->m) {
      FAIL(r, "x offset %lld is no chunk of row %u (ld %d)\n", xo, w->row, r->ld_x);
      return -1;
    }
    const long long col = e / 8;
    c = row * r->cpr + col;
    r->chunk_loads[c]++;
    r->chunk_stores[c]++;
    if (w->values != c * r->value_bytes) FAIL(r, "chunk %lld: value offset %lld\n", c, w->values);
    else
      for (int b = 0; b < r->value_bytes; b++) r->value_writes[w->values + b]++;
    if (scale_lane) {
      if (w->rows != c / r->block_chunks) FAIL(r, "chunk %lld: row-major scale %lld\n", c, w->rows);
      else r->row_scale_writes[w->rows]++;
      const size_t want = skref_swizzled_scale_offset((size_t)row, (size_t)(col / r->block_chunks), (size_t)r->k_tiles);
      if (w->swizzled != (long long)want) FAIL(r, "chunk %lld: swizzled offset %lld, want %zu\n", c, w->swizzled, want);
      else r->swz_writes[want]++;
    }
  } else if (w->loaded[j]) {
    FAIL(r, "loaded a chunk that is not stored (row %u)\n", w->row);
  }
  w->values += w->chunk_stride * r->value_bytes;
  w->rows += w->chunk_stride / r->block_chunks;
  w->swizzled += w->swizzled_stride;
  w->row += w->row_stride;
  return c;
}

/* zero_swizzled_padding (common/scale_layout.cuh): thread tid of nthreads takes padding words
 * (row M + q, k-tile t) i = tid, tid + nthreads, ... and padding bytes likewise. */
static void pad_writes(run *r, long long nthreads) {
  const int cols = r->cpr / r->block_chunks;
  const long long words = (long long)(sk_qsplit_bands(r->m) * 128 - r->m) * r->k_tiles;
  for (long long tid = 0; tid < nthreads; tid++) {
    for (long long i = tid; i < words; i += nthreads)
      for (int b = 0; b < 4; b++)
        r->swz_writes[skref_swizzled_scale_offset((size_t)(r->m + i / r->k_tiles), (size_t)(i % r->k_tiles) * 4 + b,
                                                  (size_t)r->k_tiles)]++;
    const int extra = r->k_tiles * 4 - cols;
    for (long long i = tid; extra && i < (long long)r->m * extra; i += nthreads)
      r->swz_writes[skref_swizzled_scale_offset((size_t)(i / extra), (size_t)(cols + i % extra), (size_t)r->k_tiles)]++;
  }
}

/* Replays the whole grid; returns the number of failures. */
static int check_grid(int m, int k, int ld_x, int nvfp4, int grid) {
  run r = {0};
  r.m = m;
  r.cpr = k / 8;
  r.ld_x = ld_x;
  r.block_chunks = nvfp4 ? 2 : 4;
  r.value_bytes = nvfp4 ? 4 : 8;
  r.k_tiles = (k / (nvfp4 ? 16 : 32) + 3) / 4;
  const size_t chunks = (size_t)m * (size_t)r.cpr;
  r.chunk_loads = calloc(chunks, 1);
  r.chunk_stores = calloc(chunks, 1);
  r.value_writes = calloc(chunks * (size_t)r.value_bytes, 1);
  r.row_scale_writes = calloc(chunks / (size_t)r.block_chunks, 1);
  r.swz_bytes = skref_swizzled_scale_bytes((size_t)m, (size_t)(k / (nvfp4 ? 16 : 32)));
  r.swz_writes = calloc(r.swz_bytes, 1);
  cr_assert(r.chunk_loads && r.chunk_stores && r.value_writes && r.row_scale_writes && r.swz_writes);
  walk *w = malloc(SK_QSPLIT_THREADS * sizeof *w);
  long long cs[SK_QSPLIT_THREADS];
  for (int cta = 0; cta < grid && r.failures == 0; cta++) {
    const cta_split s = split_of(m, r.cpr, grid, cta);
    if (s.lane >= s.lanes) continue; /* !has_chunks */
    int block = s.block, band = s.lane;
    for (int t = 0; t < SK_QSPLIT_THREADS; t++) walk_start(&w[t], &r, &s, block, t), walk_load(&w[t], &r);
    for (;;) {
      for (int j = 0; j < SK_QSPLIT_PER_STEP; j++) {
        for (int t = 0; t < SK_QSPLIT_THREADS; t++)
          cs[t] = walk_store(&w[t], &r, j, nvfp4 ? 1 : (t & 3) == 0);
        /* The lanes of one scale block (aligned, within a warp) hold one block, or none. */
        for (int t = 0; t < SK_QSPLIT_THREADS; t += r.block_chunks)
          for (int i = 1; i < r.block_chunks; i++)
            if ((cs[t] < 0) != (cs[t + i] < 0) || (cs[t] >= 0 && cs[t + i] != cs[t] + i))
              FAIL(&r, "cta %d lanes %d, %d: chunks %lld, %lld (not one block)\n", cta, t, t + i, cs[t], cs[t + i]);
      }
      band += SK_QSPLIT_PER_STEP * s.lanes;
      if (band >= s.bands) {
        block += s.block_stride;
        if (block >= s.blocks) break;
        band = s.lane;
        for (int t = 0; t < SK_QSPLIT_THREADS; t++) walk_start(&w[t], &r, &s, block, t);
      }
      for (int t = 0; t < SK_QSPLIT_THREADS; t++) walk_load(&w[t], &r);
    }
  }
  for (size_t c = 0; c < chunks && r.failures == 0; c++)
    if (r.chunk_loads[c] != 1 || r.chunk_stores[c] != 1)
      FAIL(&r, "chunk %zu loaded %d / stored %d times\n", c, r.chunk_loads[c], r.chunk_stores[c]);
  for (size_t b = 0; b < chunks * (size_t)r.value_bytes && r.failures == 0; b++)
    if (r.value_writes[b] != 1) FAIL(&r, "value byte %zu written %d times\n", b, r.value_writes[b]);
  /* NVFP4: both lanes of a pair store the block's scale; MXFP8: the quad's first lane. */
  const int per_scale = nvfp4 ? 2 : 1;
  for (size_t b = 0; b < chunks / (size_t)r.block_chunks && r.failures == 0; b++)
    if (r.row_scale_writes[b] != per_scale) FAIL(&r, "row scale %zu written %d times\n", b, r.row_scale_writes[b]);
  /* Data bytes once per storing lane, padding exactly once. */
  unsigned char *is_data = calloc(r.swz_bytes, 1);
  for (int row = 0; row < m; row++)
    for (int kc = 0; kc < r.cpr / r.block_chunks; kc++)
      is_data[skref_swizzled_scale_offset((size_t)row, (size_t)kc, (size_t)r.k_tiles)] = 1;
  pad_writes(&r, (long long)grid * SK_QSPLIT_THREADS);
  for (size_t b = 0; b < r.swz_bytes && r.failures == 0; b++)
    if (r.swz_writes[b] != (is_data[b] ? per_scale : 1))
      FAIL(&r, "swizzled byte %zu (%s) written %d times\n", b, is_data[b] ? "data" : "padding", r.swz_writes[b]);
  if (r.failures)
    fprintf(stderr, "  ^ %s M=%d K=%d ld_x=%d grid=%d\n", nvfp4 ? "nvfp4" : "mxfp8", m, k, ld_x, grid);
  free(is_data);
  free(w);
  free(r.chunk_loads);
  free(r.chunk_stores);
  free(r.value_writes);
  free(r.row_scale_writes);
  free(r.swz_writes);
  return r.failures;
}

static const int ms[] = {1, 2, 3, 127, 128, 129, 1000, 4097, 16384};

/* Every shape with the host grids (chunks per thread 1, 2, 4, 16, the default, 132 SMs; the
 * padding-covering and offline-plan cases included) and arbitrary ones: 1, 2, 3, around the
 * offset block count, and far above it. */
static int check_shape(int m, int k, int nvfp4, int small) {
  const int block = nvfp4 ? 16 : 32, cpr = k / 8;
  int grids[24], n = 0;
  static const int pers[] = {1, 2, 4, 16, 0};
  for (int p = 0; p < 5; p++) grids[n++] = (int)quant_rows_grid(m, k, block, 1, pers[p], 132);
  grids[n++] = (int)quant_rows_grid(m, k, block, 0, 16, 0);
  const int blocks = sk_qsplit_offset_blocks(m, cpr);
  if (small) {
    const int extra[] = {1, 2, 3, blocks > 1 ? blocks - 1 : 1, blocks, blocks + 1, 2 * blocks + 1, 3 * blocks,
                         5 * blocks + 3, 1000};
    for (int i = 0; i < 10; i++) grids[n++] = extra[i];
  } else {
    grids[n++] = 7;
    grids[n++] = 3 * blocks + 1;
  }
  int failures = 0;
  const int lds[] = {k, k + 8, k + 72};
  for (int l = 0; l < (small ? 3 : 1); l++)
    for (int g = 0; g < n; g++) failures += check_grid(m, k, lds[l], nvfp4, grids[g]);
  return failures;
}

Test(quant_mapping, nvfp4_walk_covers_every_chunk_once, .timeout = 600) {
  static const int ks[] = {16, 32, 48, 2064, 7168};
  int failures = 0;
  for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
    for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++) {
      failures += check_shape(ms[a], ks[b], 1, (long long)ms[a] * ks[b] <= (1ll << 20));
    }
  cr_assert_eq(failures, 0, "%d mapping failures (above)", failures);
}

Test(quant_mapping, mxfp8_walk_covers_every_chunk_once, .timeout = 600) {
  static const int ks[] = {32, 64, 96, 2080, 7168};
  int failures = 0;
  for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
    for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
      failures += check_shape(ms[a], ks[b], 0, (long long)ms[a] * ks[b] <= (1ll << 20));
  cr_assert_eq(failures, 0, "%d mapping failures (above)", failures);
}

/* The host grid: one chunk per thread for M <= 128 (the latency floor), and for large tensors
 * about the requested chunks per thread with no CTA lacking chunks. */
Test(quant_mapping, host_grid_chunks_per_thread) {
  for (int k = 16; k <= 8192; k *= 2) {
    for (int m = 1; m <= 128; m++) {
      const int64_t g = quant_rows_grid(m, k, 16, 0, 16, 132);
      cr_assert_eq(g, sk_qsplit_offset_blocks(m, k / 8), "M=%d K=%d: grid %lld", m, k, (long long)g);
    }
  }
  /* M = 16384, K = 4096, 16 per thread: 128 bands / 16 = 8 lanes of 256 blocks. */
  cr_assert_eq(quant_rows_grid(16384, 4096, 16, 1, 16, 132), 8 * 256);
  /* 4 per thread: 32 lanes, one step each. */
  cr_assert_eq(quant_rows_grid(16384, 4096, 32, 1, 4, 132), 32 * 256);
  /* M = 4096, K = 4096, 16 per thread: 2 lanes would be 512 CTAs, below 4 per SM: 3 lanes. */
  cr_assert_eq(quant_rows_grid(4096, 4096, 16, 1, 16, 132), 3 * 256);
  /* M = 1: the padding needs 127 * 64 words = 32 CTAs. */
  cr_assert_eq(quant_rows_grid(1, 4096, 16, 1, 16, 132), 32);
}

/* The largest shapes of the contract (M * K = 2^34, K = 16: M = 2^30) keep the u32 row compare
 * from wrapping, and 64-bit swizzled offsets are needed (a short, very wide tensor's padded
 * scale buffer passes 2^32 bytes: M = 1, K = 2^31 - 16). */
Test(quant_mapping, arithmetic_limits) {
  const int m = 1 << 30, cpr = 2;
  const int blocks = sk_qsplit_offset_blocks(m, cpr), bands = sk_qsplit_bands(m);
  const int lanes = sk_qsplit_lanes(0x7FFFFFFF, blocks, bands);
  cr_assert_leq(lanes, SK_QSPLIT_MAX_LANES);
  const unsigned long long last_row = (unsigned long long)(bands - 1) * 128 + 127;
  cr_assert_lt(last_row + 3ull * sk_qsplit_row_stride(lanes), 1ull << 32);
  const unsigned cols = (0x7FFFFFF0u / 16), k_tiles = (cols + 3) / 4;
  cr_assert_eq((size_t)sk_qsplit_swizzled_offset(0, cols - 1, k_tiles),
               skref_swizzled_scale_offset(0, cols - 1, k_tiles));
  cr_assert_gt(sk_qsplit_swizzled_offset(0, cols - 1, k_tiles), 0xFFFFFFFFll);
}
