/* The row quantizers' work split (ops/quantization/split.cuh), checked on the CPU with the
 * kernels' own index functions: every thread of every CTA (ops/quantization/chunks.cuh
 * UnitWalk and the unit loops of nvfp4_rows / mxfp8_rows, mirrored step for step, including the
 * warp shuffles and byte permutes of the scale transpose) is replayed for many shapes and grids,
 * and
 *  - every chunk is loaded and its values stored exactly once, and a chunk exists iff the walk
 *    says so; a warp that skips a chunk step (warp_has) has no existing chunk in it;
 *  - the lanes of a scale block (2 for NVFP4, 4 for MXFP8: the kernels' shuffles) hold the chunks
 *    of one block, or all hold none;
 *  - every byte of the swizzled scale buffer (data and padding) is written exactly once, by the
 *    4-byte word stores, with the right scale (a distinct value per (row, column), 0 for padding),
 *    and every row-major scale byte exactly once, by word or by byte stores;
 *  - the host grid (quant_rows_grid) gives about the requested chunks per thread. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/e2m1_fast.cuh" /* sk_prmt: the PTX prmt.b32 emulation */
#include "quantization/split.cuh"
#include "quantization/quant_common.h"
#include "common/ref.h"

typedef struct {
  int m, cpr, ld_x, bc, value_bytes, cols, k_tiles, slabs, units, rows_words;
  uint8_t *chunk_loads, *value_writes, *row_scale_writes, *swz_writes;
  uint8_t *swz, *rows; /* contents written */
  size_t swz_bytes;
  int failures;
} run;

#define FAIL(r, ...)                                        \
  do {                                                      \
    if ((r)->failures++ < 10) fprintf(stderr, __VA_ARGS__); \
  } while (0)

/* The scale of (row, kcol) as the test's data: distinct nonzero bytes (a real scale can be 0 too;
 * here 0 marks padding). */
static uint32_t data_scale(long long row, long long kcol) { return (uint32_t)((row * 131 + kcol * 7) % 255 + 1); }

/* One unit of one CTA: all 256 threads. */
static void replay_unit(run *r, unsigned slab, unsigned kt) {
  const int tc = sk_qsplit_tile_chunks(r->bc);
  const unsigned unit = slab * (unsigned)r->k_tiles + kt; /* for the messages */
  const unsigned slab_row = sk_qsplit_slab_row(slab, r->bc);
  uint32_t p[SK_QSPLIT_THREADS];
  long long chunk_of[SK_QSPLIT_THREADS][SK_QSPLIT_PER_STEP];
  for (unsigned t = 0; t < SK_QSPLIT_THREADS; t++) {
    const unsigned row = slab_row + sk_qsplit_thread_row(t, r->bc);
    const unsigned col = kt * (unsigned)tc + sk_qsplit_thread_col(t, r->bc);
    const int col_exists = col < (unsigned)r->cpr;
    const unsigned warp_row = sk_qsplit_thread_row(t & ~31u, r->bc);
    p[t] = 0;
    for (int j = 0; j < SK_QSPLIT_PER_STEP; j++) {
      const unsigned rj = row + (unsigned)j * SK_QSPLIT_GROUP_ROWS;
      const int exists = col_exists && rj < (unsigned)r->m;
      const int warp_has = slab_row + warp_row + (unsigned)j * SK_QSPLIT_GROUP_ROWS < (unsigned)r->m;
      chunk_of[t][j] = -1;
      if (exists && !warp_has) FAIL(r, "unit %u thread %u chunk %d: exists but its warp skips it\n", unit, t, j);
      if (!exists) continue;
      /* Load (x offset, from the walk's pointer arithmetic) and value store. */
      const long long xo = (long long)row * r->ld_x + col * 8ll + (long long)j * SK_QSPLIT_GROUP_ROWS * r->ld_x;
      const long long xrow = xo / r->ld_x, xe = xo % r->ld_x;
      if (xe % 8 || xe / 8 >= r->cpr || xrow != rj) {
        FAIL(r, "unit %u thread %u chunk %d: x offset %lld is not row %u\n", unit, t, j, xo, rj);
        continue;
      }
      const long long c = xrow * r->cpr + xe / 8;
      chunk_of[t][j] = c;
      r->chunk_loads[c]++;
      const long long vo = ((long long)row * r->cpr + col) * r->value_bytes +
                           (long long)j * SK_QSPLIT_GROUP_ROWS * r->cpr * r->value_bytes;
      if (vo != c * r->value_bytes) FAIL(r, "chunk %lld: value offset %lld\n", c, vo);
      else
        for (int b = 0; b < r->value_bytes; b++) r->value_writes[vo + b]++;
      const unsigned kcol = col / (unsigned)r->bc;
      if (sk_qsplit_thread_block(t, r->bc) != kcol % 4)
        FAIL(r, "thread %u: block %u, column %u\n", t, sk_qsplit_thread_block(t, r->bc), kcol);
      p[t] |= data_scale(rj, kcol) << (8 * j); /* scale[j] = exists ? q.scale : 0 */
    }
  }
  /* The lanes of one scale block (aligned, within a warp) hold one block, or none. */
  for (unsigned t = 0; t < SK_QSPLIT_THREADS; t += (unsigned)r->bc)
    for (int j = 0; j < SK_QSPLIT_PER_STEP; j++)
      for (int i = 1; i < r->bc; i++)
        if ((chunk_of[t][j] < 0) != (chunk_of[t + i][j] < 0) ||
            (chunk_of[t][j] >= 0 && chunk_of[t + i][j] != chunk_of[t][j] + i))
          FAIL(r, "unit %u lanes %u, %u: chunks %lld, %lld (not one block)\n", unit, t, t + i, chunk_of[t][j],
               chunk_of[t + i][j]);
  /* store_scales: the two shuffle rounds (shfl.xor within the warp) and the leaders' stores. */
  uint32_t a[SK_QSPLIT_THREADS];
  for (unsigned t = 0; t < SK_QSPLIT_THREADS; t++)
    a[t] = sk_prmt(p[t], p[t ^ (2u * (unsigned)r->bc)], sk_qsplit_transpose_a(sk_qsplit_thread_block(t, r->bc)));
  for (unsigned t = 0; t < SK_QSPLIT_THREADS; t++) {
    const unsigned block = sk_qsplit_thread_block(t, r->bc);
    const uint32_t w = sk_prmt(a[t], a[t ^ (unsigned)r->bc], sk_qsplit_transpose_b(block));
    if (!sk_qsplit_block_leader(t, r->bc)) continue;
    const unsigned row = slab_row + sk_qsplit_thread_row(t, r->bc);
    const long long so = sk_qsplit_unit_scales(slab, kt, (unsigned)r->k_tiles, r->bc) + sk_qsplit_thread_scale_word(t, r->bc);
    const unsigned rr = row + block * SK_QSPLIT_GROUP_ROWS;
    for (unsigned i = 0; i < 4; i++) {
      const size_t want = skref_swizzled_scale_offset(rr, kt * 4 + i, (size_t)r->k_tiles);
      if (so < 0 || (size_t)so + i != want) {
        FAIL(r, "unit %u thread %u: swizzled word %lld byte %u, want %zu\n", unit, t, so, i, want);
        continue;
      }
      r->swz_writes[want]++;
      r->swz[want] = (uint8_t)(w >> (8 * i));
    }
    if (rr < (unsigned)r->m) { /* row-major */
      const long long dst = (long long)rr * r->cols + kt * 4ll;
      for (unsigned i = 0; i < 4; i++)
        if (r->rows_words || kt * 4 + i < (unsigned)r->cols) {
          r->row_scale_writes[dst + i]++;
          r->rows[dst + i] = (uint8_t)(w >> (8 * i));
        }
    }
  }
}

typedef struct {
  unsigned x, y;
} grid2;

/* Replays the whole grid; returns the number of failures. */
static int check_grid(int m, int k, int ld_x, int nvfp4, grid2 grid) {
  run r = {0};
  r.m = m;
  r.cpr = k / 8;
  r.ld_x = ld_x;
  r.bc = nvfp4 ? 2 : 4;
  r.value_bytes = nvfp4 ? 4 : 8;
  r.cols = r.cpr / r.bc;
  r.k_tiles = sk_qsplit_k_tiles(r.cpr, r.bc);
  r.slabs = sk_qsplit_slabs(m, r.bc);
  r.units = sk_qsplit_units(m, r.cpr, r.bc);
  cr_assert_eq(r.units, r.slabs * r.k_tiles);
  r.rows_words = r.cols % 4 == 0; /* the kernel's test with an aligned buffer */
  cr_assert_eq(r.k_tiles, (r.cols + 3) / 4);
  const size_t chunks = (size_t)m * (size_t)r.cpr, nscales = (size_t)m * (size_t)r.cols;
  r.swz_bytes = skref_swizzled_scale_bytes((size_t)m, (size_t)r.cols);
  /* Units tile the swizzled buffer: 16 bytes per unit row, R rows per unit. */
  cr_assert_eq((size_t)r.units * (size_t)sk_qsplit_unit_rows(r.bc) * 16, r.swz_bytes);
  r.chunk_loads = calloc(chunks, 1);
  r.value_writes = calloc(chunks * (size_t)r.value_bytes, 1);
  r.row_scale_writes = calloc(nscales, 1);
  r.rows = calloc(nscales, 1);
  r.swz_writes = calloc(r.swz_bytes, 1);
  r.swz = calloc(r.swz_bytes, 1);
  cr_assert(r.chunk_loads && r.value_writes && r.row_scale_writes && r.rows && r.swz_writes && r.swz);
  for (unsigned by = 0; by < grid.y && r.failures == 0; by++)
    for (unsigned bx = 0; bx < grid.x && r.failures == 0; bx++) {
      /* UnitWalk: (slab, kt) = (blockIdx.y, blockIdx.x), then next() while it finds one. */
      unsigned slab = by, kt = bx;
      if (!sk_qsplit_has_unit(slab, kt, (unsigned)r.slabs, (unsigned)r.k_tiles)) continue;
      do replay_unit(&r, slab, kt);
      while (sk_qsplit_next_unit(&slab, &kt, bx, grid.x, grid.y, (unsigned)r.slabs, (unsigned)r.k_tiles));
    }
  for (size_t c = 0; c < chunks && r.failures == 0; c++)
    if (r.chunk_loads[c] != 1) FAIL(&r, "chunk %zu loaded/stored %d times\n", c, r.chunk_loads[c]);
  for (size_t b = 0; b < chunks * (size_t)r.value_bytes && r.failures == 0; b++)
    if (r.value_writes[b] != 1) FAIL(&r, "value byte %zu written %d times\n", b, r.value_writes[b]);
  for (size_t b = 0; b < nscales && r.failures == 0; b++) {
    const long long row = (long long)(b / (size_t)r.cols), kcol = (long long)(b % (size_t)r.cols);
    if (r.row_scale_writes[b] != 1) FAIL(&r, "row scale %zu written %d times\n", b, r.row_scale_writes[b]);
    else if (r.rows[b] != data_scale(row, kcol)) FAIL(&r, "row scale (%lld, %lld) is %d\n", row, kcol, r.rows[b]);
  }
  /* Every swizzled byte exactly once; data bytes hold their scale, padding 0. */
  uint8_t *want = calloc(r.swz_bytes, 1);
  for (int row = 0; row < m; row++)
    for (int kc = 0; kc < r.cols; kc++)
      want[skref_swizzled_scale_offset((size_t)row, (size_t)kc, (size_t)r.k_tiles)] = (uint8_t)data_scale(row, kc);
  for (size_t b = 0; b < r.swz_bytes && r.failures == 0; b++) {
    if (r.swz_writes[b] != 1) FAIL(&r, "swizzled byte %zu written %d times\n", b, r.swz_writes[b]);
    else if (r.swz[b] != want[b]) FAIL(&r, "swizzled byte %zu is %d, want %d\n", b, r.swz[b], want[b]);
  }
  if (r.failures)
    fprintf(stderr, "  ^ %s M=%d K=%d ld_x=%d grid=(%u, %u)\n", nvfp4 ? "nvfp4" : "mxfp8", m, k, ld_x, grid.x, grid.y);
  free(want);
  free(r.chunk_loads);
  free(r.value_writes);
  free(r.row_scale_writes);
  free(r.rows);
  free(r.swz_writes);
  free(r.swz);
  return r.failures;
}

static const int ms[] = {1, 2, 3, 16, 31, 33, 127, 128, 129, 1000, 4097, 16384};

static grid2 host_grid(int m, int k, int block, int per, int sms) {
  const sk_dim3 g = quant_rows_grid(m, k, block, per, sms);
  cr_assert_eq(g.z, 1u);
  return (grid2){g.x, g.y};
}

/* Every shape with the host grids (chunks per thread 1, 4, 8, 16, the default; 132 SMs and an
 * offline plan) and arbitrary ones: fewer and more CTA columns than k-tiles (1, 2, 3, around
 * k_tiles, far above) and rows than slabs. */
static int check_shape(int m, int k, int nvfp4, int small) {
  const int block = nvfp4 ? 16 : 32, bc = nvfp4 ? 2 : 4;
  grid2 grids[24];
  int n = 0;
  static const int pers[] = {1, 4, 8, 16, 0};
  for (int p = 0; p < 5; p++) grids[n++] = host_grid(m, k, block, pers[p], 132);
  grids[n++] = host_grid(m, k, block, 16, 0);
  const unsigned kt = (unsigned)sk_qsplit_k_tiles(k / 8, bc), slabs = (unsigned)sk_qsplit_slabs(m, bc);
  if (small) {
    const grid2 extra[] = {{1, 1},          {2, 1},           {1, 3},         {3, 2},
                           {kt > 1 ? kt - 1 : 1, slabs},       {kt, slabs},    {kt + 1, slabs + 1},
                           {2 * kt + 1, 1}, {1000, 2},        {1, slabs > 1 ? slabs - 1 : 1}};
    for (int i = 0; i < 10; i++) grids[n++] = extra[i];
  } else {
    grids[n++] = (grid2){7, 3};
    grids[n++] = (grid2){kt / 3 + 1, slabs / 3 + 1};
  }
  int failures = 0;
  const int lds[] = {k, k + 8, k + 72};
  for (int l = 0; l < (small ? 3 : 1); l++)
    for (int g = 0; g < n; g++) failures += check_grid(m, k, lds[l], nvfp4, grids[g]);
  return failures;
}

/* Every M of ms against every K of ks (the small shapes also with padded rows and odd grids). */
static int check_shapes(const int *ks, size_t num_ks, int nvfp4) {
  int failures = 0;
  for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
    for (size_t b = 0; b < num_ks; b++)
      failures += check_shape(ms[a], ks[b], nvfp4, (long long)ms[a] * ks[b] <= (1ll << 20));
  return failures;
}

Test(quant_mapping, nvfp4_units_cover_every_byte_once, .timeout = 600) {
  /* K/16 = 1, 2, 3 (ragged k-tile), 129 (ragged), 448 (whole tiles). */
  static const int ks[] = {16, 32, 48, 2064, 7168};
  const int failures = check_shapes(ks, sizeof ks / sizeof ks[0], 1);
  cr_assert_eq(failures, 0, "%d mapping failures (above)", failures);
}

Test(quant_mapping, mxfp8_units_cover_every_byte_once, .timeout = 600) {
  static const int ks[] = {32, 64, 96, 2080, 7168};
  const int failures = check_shapes(ks, sizeof ks / sizeof ks[0], 0);
  cr_assert_eq(failures, 0, "%d mapping failures (above)", failures);
}

/* The transpose alone, by hand: the lanes of blocks 0..3 hold (group j, block c) in byte j. */
Test(quant_mapping, scale_transpose_selectors) {
  for (int bc = 2; bc <= 4; bc += 2) {
    uint32_t p[32], a[32];
    for (unsigned l = 0; l < 32; l++) {
      const unsigned c = sk_qsplit_thread_block(l, bc), r = sk_qsplit_thread_row(l, bc);
      p[l] = 0;
      for (unsigned j = 0; j < 4; j++) p[l] |= (r * 16 + j * 4 + c) << (8 * j);
    }
    for (unsigned l = 0; l < 32; l++)
      a[l] = sk_prmt(p[l], p[l ^ (2u * (unsigned)bc)], sk_qsplit_transpose_a(sk_qsplit_thread_block(l, bc)));
    for (unsigned l = 0; l < 32; l++) {
      const unsigned c = sk_qsplit_thread_block(l, bc), r = sk_qsplit_thread_row(l, bc);
      const uint32_t w = sk_prmt(a[l], a[l ^ (unsigned)bc], sk_qsplit_transpose_b(c));
      for (unsigned i = 0; i < 4; i++)
        cr_assert_eq((w >> (8 * i)) & 0xFFu, r * 16 + c * 4 + i, "bc %d lane %u byte %u", bc, l, i);
    }
  }
}

/* The host grid: one CTA column per k-tile; per / 4 units per CTA for large tensors, one unit per
 * CTA while that is at most 4 CTAs per SM. */
#define ASSERT_GRID(g, gx, gy) cr_assert((g).x == (gx) && (g).y == (gy) && (g).z == 1, "grid (%u, %u, %u)", (g).x, (g).y, (g).z)
Test(quant_mapping, host_grid_units_per_cta) {
  /* M = 16384, K = 4096 nvfp4: 128 slabs x 64 k-tiles = 8192 units; 16 per thread: 4 per CTA. */
  ASSERT_GRID(quant_rows_grid(16384, 4096, 16, 16, 132), 64u, 32u);
  /* mxfp8: 2 slabs per band x 128 bands x 32 k-tiles = 8192 units; 4 per thread: one each. */
  ASSERT_GRID(quant_rows_grid(16384, 4096, 32, 4, 132), 32u, 256u);
  /* M = 4096, K = 2048 nvfp4: 32 x 32 = 1024 units; 4 per CTA would be 256 CTAs < 528: one each. */
  ASSERT_GRID(quant_rows_grid(4096, 2048, 16, 16, 132), 32u, 32u);
  /* M = 4096, K = 7168 nvfp4: 32 x 112 = 3584 units; 4 per CTA = 896 CTAs. */
  ASSERT_GRID(quant_rows_grid(4096, 7168, 16, 16, 132), 112u, 8u);
  /* M = 16384, K = 7168 nvfp4, the default 8 per thread: 2 slabs per CTA. */
  ASSERT_GRID(quant_rows_grid(16384, 7168, 16, 8, 132), 112u, 64u);
  /* M = 1, K = 4096: one band, 64 k-tiles: 64 CTAs of one unit (the padding rows included). */
  ASSERT_GRID(quant_rows_grid(1, 4096, 16, 16, 132), 64u, 1u);
  /* Below 4 chunks per thread is one unit per CTA. */
  ASSERT_GRID(quant_rows_grid(16384, 4096, 16, 1, 132), 64u, 128u);
  /* The most slabs (M * K = 2^34, nvfp4 K = 16: 2^23 slabs, one k-tile): gy stops at the CUDA limit. */
  ASSERT_GRID(quant_rows_grid(1 << 30, 16, 16, 8, 132), 1u, 65535u);
  for (int m = 1; m <= 300; m += 7)
    for (int k = 16; k <= 8192; k *= 2) {
      const sk_dim3 g = quant_rows_grid(m, k, 16, 16, 132);
      const int64_t ctas = (int64_t)g.x * g.y, units = sk_qsplit_units(m, k / 8, 2);
      cr_assert(g.x == (unsigned)sk_qsplit_k_tiles(k / 8, 2) && ctas >= 1 && ctas <= units,
                "M=%d K=%d: grid (%u, %u) for %lld units", m, k, g.x, g.y, (long long)units);
    }
}

/* The largest shapes of the contract (M * K = 2^34) keep unit indices and rows in range, and
 * swizzled offsets are 64-bit (a short, very wide tensor's padded scale buffer passes 2^32 bytes:
 * M = 1, K = 2^31 - 16). */
Test(quant_mapping, arithmetic_limits) {
  /* NVFP4 K = 16 and MXFP8 K = 32 (one k-tile): the most slabs (units); the walk's slab + gridDim.y
   * and kt + gridDim.x (K = 2^31 - 16: the most k-tiles) stay below 2^32, and the last slab's last
   * row (+ 3 row groups) below 2^32. */
  const int m4 = 1 << 30, m8 = 1 << 29;
  cr_assert_eq(sk_qsplit_slabs(m4, 2), sk_qsplit_units(m4, 2, 2));
  cr_assert_lt((long long)sk_qsplit_slabs(m4, 2) + SK_QSPLIT_MAX_GRID_Y, 1ll << 32);
  cr_assert_lt((long long)sk_qsplit_slabs(m8, 4) + SK_QSPLIT_MAX_GRID_Y, 1ll << 32);
  cr_assert_lt((long long)sk_qsplit_k_tiles((int)(0x7FFFFFF0u / 8), 2) + 0x7FFFFFFFll, 1ll << 32);
  cr_assert_eq(sk_qsplit_slab_row((unsigned)sk_qsplit_units(m4, 2, 2) - 1, 2), (unsigned)m4 - 128);
  cr_assert_eq(sk_qsplit_slab_row((unsigned)sk_qsplit_units(m8, 4, 4) - 1, 4), (unsigned)m8 - 128 + 16);
  const unsigned cols = (0x7FFFFFF0u / 16), k_tiles = (cols + 3) / 4;
  cr_assert_eq(sk_qsplit_k_tiles((int)(0x7FFFFFF0u / 8), 2), (int)k_tiles);
  cr_assert_eq((size_t)sk_qsplit_unit_scales(0, k_tiles - 1, k_tiles, 2), skref_swizzled_scale_offset(0, (k_tiles - 1) * 4, k_tiles));
  cr_assert_gt(sk_qsplit_unit_scales(0, k_tiles - 1, k_tiles, 2), 0xFFFFFFFFll);
  /* the last band of the most units (NVFP4 K = 16, MXFP8 K = 32: one k-tile) */
  cr_assert_eq((size_t)sk_qsplit_unit_scales((unsigned)sk_qsplit_units(m4, 2, 2) - 1, 0, 1, 2),
               skref_swizzled_scale_offset((size_t)m4 - 128, 0, 1));
  cr_assert_eq((size_t)sk_qsplit_unit_scales((unsigned)sk_qsplit_units(m8, 4, 4) - 1, 0, 1, 4),
               skref_swizzled_scale_offset((size_t)m8 - 128 + 16, 0, 1));
  cr_assert_eq((size_t)sk_qsplit_swizzled_offset(0, cols - 1, k_tiles), skref_swizzled_scale_offset(0, cols - 1, k_tiles));
}
