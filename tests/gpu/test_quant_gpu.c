/* quantization.nvfp4 / quantization.mxfp8 on a GPU, what the harness (tests/gpu/test_ops_gpu.c:
 * shapes, dtypes, layouts, global-scale modes, distributions, extreme scales, graphs) does not
 * cover: the work split under every SPARKINFER_QUANT_CHUNKS_PER_THREAD setting, and the rows
 * kernels launched directly with grids and row pitches the host never picks. Bit-exact against the
 * CPU reference (ops/common/ref.h); outputs poisoned. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "common/ref.h"
#include "sparkinfer/jit.h"
#include "sparkinfer/quantization.h"
#include "testutil.h"
#include "quantization/split.cuh" /* the kernels' unit count (plain C as well) */

static char *dir;
static void setup(void) { dir = gpu_test_setup("gpuq"); }
static void teardown(void) { tu_rmrf(dir); free(dir); }


typedef struct qcase {
  int nvfp4;
  skref_dtype dtype;
  int64_t m, k;
  sk_scale_layout scales;
  sk_global_scale_mode gs;
  int data_kind; /* 0 normal+outliers, 1 wide range, 2 normal + specials (NaN/Inf/0) */
  sk_path path;
  int gs_fixed;   /* GIVEN mode: use gs_value instead of a random ordinary global scale */
  float gs_value;
} qcase;

/* Mismatches are reported per case (first differing byte of each output) and counted, so one
 * run shows every failing configuration; the test fails at the end if any case did. */
static int case_failures;
#define CASE_FAIL(...)                                                                           \
  do {                                                                                           \
    fprintf(stderr, "MISMATCH " __VA_ARGS__);                                                    \
    fputc('\n', stderr);                                                                         \
    case_failures++;                                                                             \
  } while (0)

/* One case's device buffers: the input (copied from hx) and the outputs, poisoned with 0xA5 so
 * that a byte the kernel fails to write shows; ds / dr only for the layouts asked for (bit 1
 * swizzled, bit 2 row-major). dgs is poisoned too: a caller with a given global scale stores it
 * over the poison. quant_io_read copies the outputs back after the caller synchronised. */
typedef struct quant_io {
  void *dx, *dv, *ds, *dr, *dgs;
  size_t vbytes, swz, rowsz;
  uint8_t *gv, *gsw, *grr; /* host copies (quant_io_read) */
  float got_gs;
} quant_io;

static void quant_io_alloc(quant_io *io, const uint16_t *hx, size_t x_bytes, size_t vbytes, size_t swz, size_t rowsz,
                           int layout) {
  *io = (quant_io){.vbytes = vbytes, .swz = swz, .rowsz = rowsz};
  io->dx = gpu_upload(hx, x_bytes);
  io->dv = gpu_filled(vbytes, 0xA5);
  if (layout & 1) io->ds = gpu_filled(swz, 0xA5);
  if (layout & 2) io->dr = gpu_filled(rowsz, 0xA5);
  io->dgs = gpu_filled(4, 0xA5);
}

static void quant_io_read(quant_io *io) {
  io->gv = malloc(io->vbytes), io->gsw = malloc(io->swz), io->grr = malloc(io->rowsz);
  CUDA_OK(cudaMemcpy(io->gv, io->dv, io->vbytes, cudaMemcpyDeviceToHost));
  if (io->ds) CUDA_OK(cudaMemcpy(io->gsw, io->ds, io->swz, cudaMemcpyDeviceToHost));
  if (io->dr) CUDA_OK(cudaMemcpy(io->grr, io->dr, io->rowsz, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&io->got_gs, io->dgs, 4, cudaMemcpyDeviceToHost));
}

static void quant_io_free(quant_io *io) {
  CUDA_OK(cudaFree(io->dx));
  CUDA_OK(cudaFree(io->dv));
  CUDA_OK(cudaFree(io->dgs));
  if (io->ds) CUDA_OK(cudaFree(io->ds));
  if (io->dr) CUDA_OK(cudaFree(io->dr));
  free(io->gv), free(io->gsw), free(io->grr);
}

static void run_case(const qcase *c, skref_rng *rng, uint64_t seed) {
  const int64_t m = c->m, k = c->k, block = c->nvfp4 ? 16 : 32;
  const size_t n = (size_t)(m * k), vbytes = c->nvfp4 ? n / 2 : n, cols = (size_t)(k / block);
  const size_t swz = sk_swizzled_scale_bytes(m, (int64_t)cols), rowsz = (size_t)m * cols;
  uint16_t *hx = malloc(n * 2);
  if (c->data_kind == 1) skref_fill_wide_range(rng, hx, n, c->dtype);
  else skref_fill_normal(rng, hx, n, c->dtype, 1.0f, 0.001, 1000.0f);
  if (c->data_kind == 2) skref_sprinkle_specials(rng, hx, n, c->dtype, 0.01);
  float given_gs = c->gs == SK_GLOBAL_SCALE_GIVEN ? (float)(448.0 * 6.0 / (1.0 + 10.0 * skref_rng_uniform(rng))) : 0.0f;
  if (c->gs_fixed) given_gs = c->gs_value;

  uint8_t *rv = malloc(vbytes), *rs = malloc(swz), *rr = malloc(rowsz);
  float ref_gs = 0;
  int rc = c->nvfp4 ? skref_quantize_nvfp4(hx, c->dtype, (size_t)m, (size_t)k, (size_t)k,
                                           c->gs == SK_GLOBAL_SCALE_GIVEN ? &given_gs : NULL, &ref_gs, rv,
                                           (c->scales & 1) ? rs : NULL, (c->scales & 2) ? rr : NULL)
                    : skref_quantize_mxfp8(hx, c->dtype, (size_t)m, (size_t)k, (size_t)k, rv,
                                           (c->scales & 1) ? rs : NULL, (c->scales & 2) ? rr : NULL);
  cr_assert_eq(rc, 0);

  void *scratch = NULL;
  quant_io io;
  quant_io_alloc(&io, hx, n * 2, vbytes, swz, rowsz, (int)c->scales);
  if (c->gs == SK_GLOBAL_SCALE_GIVEN) CUDA_OK(cudaMemcpy(io.dgs, &given_gs, 4, cudaMemcpyHostToDevice));

  sk_quant_caps caps = SK_QUANT_CAPS_INIT;
  caps.dtype = c->dtype == SKREF_BF16 ? SK_DTYPE_BF16 : SK_DTYPE_FP16;
  caps.k = k;
  caps.max_m = m;
  caps.scales = c->scales;
  caps.global_scale = c->gs;
  caps.path = c->path;
  sk_plan *plan;
  SK_OK_OR_FAIL(c->nvfp4 ? sk_nvfp4_plan_create(&caps, &plan) : sk_mxfp8_plan_create(&caps, &plan));
  sk_scratch_spec spec;
  SK_OK_OR_FAIL(sk_plan_scratch_spec(plan, &spec));
  if (spec.bytes) CUDA_OK(cudaMalloc(&scratch, spec.bytes));
  int64_t xs[2] = {m, k}, vs[2] = {m, c->nvfp4 ? k / 2 : k}, ss[1] = {(int64_t)swz}, rs_shape[2] = {m, (int64_t)cols},
          gss[1] = {1};
  DLTensor tx = tu_device_tensor(io.dx, c->dtype == SKREF_BF16 ? (DLDataType){kDLBfloat, 16, 1} : (DLDataType){kDLFloat, 16, 1}, 2, xs);
  DLTensor tv = tu_device_tensor(io.dv, (DLDataType){kDLUInt, 8, 1}, 2, vs);
  DLTensor ts = tu_device_tensor(io.ds, (DLDataType){kDLUInt, 8, 1}, 1, ss);
  DLTensor tr = tu_device_tensor(io.dr, (DLDataType){kDLUInt, 8, 1}, 2, rs_shape);
  DLTensor tg = tu_device_tensor(io.dgs, (DLDataType){kDLFloat, 32, 1}, 1, gss);
  sk_binding *b;
  SK_OK_OR_FAIL(sk_binding_create(plan, NULL, &b));
  if (c->nvfp4)
    SK_OK_OR_FAIL(sk_nvfp4_bind(b, &tx, &tv, io.ds ? &ts : NULL, io.dr ? &tr : NULL, &tg, scratch, spec.bytes));
  else
    SK_OK_OR_FAIL(sk_mxfp8_bind(b, &tx, &tv, io.ds ? &ts : NULL, io.dr ? &tr : NULL));
  SK_OK_OR_FAIL(sk_run(b, NULL));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());

  quant_io_read(&io);
  const uint8_t *gv = io.gv, *gsw = io.gsw, *grr = io.grr;
  const float got_gs = io.got_gs;
  const char *name = c->nvfp4 ? "nvfp4" : "mxfp8";
  if (c->nvfp4 && skref_f32_bits(got_gs) != skref_f32_bits(ref_gs))
    CASE_FAIL("seed %llu %s M=%lld K=%lld gs mode %d data %d: global scale %a != %a", (unsigned long long)seed, name,
              (long long)m, (long long)k, c->gs, c->data_kind, got_gs, ref_gs);
  for (size_t i = 0; i < vbytes; i++)
    if (gv[i] != rv[i]) {
      CASE_FAIL("seed %llu %s dtype %d M=%lld K=%lld layout %d gs %d data %d: value byte %zu = 0x%02x, ref 0x%02x",
                     (unsigned long long)seed, name, c->dtype, (long long)m, (long long)k, c->scales, c->gs, c->data_kind,
                     i, gv[i], rv[i]);
      break;
    }
  if (io.ds)
    for (size_t i = 0; i < swz; i++)
      if (gsw[i] != rs[i]) {
        CASE_FAIL("seed %llu %s M=%lld K=%lld: swizzled scale byte %zu = 0x%02x, ref 0x%02x",
                       (unsigned long long)seed, name, (long long)m, (long long)k, i, gsw[i], rs[i]);
        break;
      }
  if (io.dr)
    for (size_t i = 0; i < rowsz; i++)
      if (grr[i] != rr[i]) {
        CASE_FAIL("seed %llu %s M=%lld K=%lld: row scale %zu = 0x%02x, ref 0x%02x", (unsigned long long)seed, name,
                       (long long)m, (long long)k, i, grr[i], rr[i]);
        break;
      }
  sk_binding_destroy(b);
  sk_plan_destroy(plan);
  quant_io_free(&io);
  if (scratch) CUDA_OK(cudaFree(scratch));
  free(hx); free(rv); free(rs); free(rr);
}

/* The unit work split (ops/quantization/split.cuh, chunks.cuh): ragged row tiles and
 * k-tiles (M = 1, odd M, K/16 or K/32 not a multiple of 4), the smallest K (16, 32, 48: one to three
 * scale columns of a k-tile), and several units per CTA (SPARKINFER_QUANT_CHUNKS_PER_THREAD, read at
 * plan creation: 1 and 4 = one unit per CTA, 8 = two, 16 = four units of the grid-stride loop). */
Test(gpu_quant, multi_chunk_tails_bit_exact, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed = skref_test_seed("gpu quant tails");
  skref_rng rng;
  skref_rng_seed(&rng, seed);
  static const int64_t tm[] = {1, 2, 3, 5, 127, 129, 1001, 4097};
  static const int64_t tk4[] = {16, 48, 80, 2064}, tk8[] = {32, 96, 2080};
  static const char *const per[] = {"1", "4", "8", "16"};
  int i = 0;
  for (size_t p = 0; p < sizeof per / sizeof per[0]; p++) {
    setenv("SPARKINFER_QUANT_CHUNKS_PER_THREAD", per[p], 1);
    for (size_t a = 0; a < sizeof tm / sizeof tm[0]; a++) {
      for (size_t b = 0; b < sizeof tk4 / sizeof tk4[0]; b++, i++) {
        qcase c = {1, i % 5 == 4 ? SKREF_FP16 : SKREF_BF16, tm[a], tk4[b], (sk_scale_layout)(1 + i % 3),
                   (sk_global_scale_mode)(i % 2), i % 3, i % 4 == 3 ? SK_PATH_PORTABLE : SK_PATH_AUTO};
        run_case(&c, &rng, seed);
      }
      for (size_t b = 0; b < sizeof tk8 / sizeof tk8[0]; b++, i++) {
        qcase c = {0, i % 5 == 4 ? SKREF_FP16 : SKREF_BF16, tm[a], tk8[b], (sk_scale_layout)(1 + i % 3),
                   SK_GLOBAL_SCALE_GIVEN, i % 3, i % 4 == 3 ? SK_PATH_PORTABLE : SK_PATH_AUTO};
        run_case(&c, &rng, seed);
      }
    }
    /* A large case per setting: many CTAs, several steps with "16". */
    qcase big4 = {1, SKREF_BF16, 4096, 7168, SK_SCALES_BOTH, SK_GLOBAL_SCALE_GIVEN, 2, SK_PATH_AUTO};
    qcase big8 = {0, SKREF_BF16, 4096, 7168, SK_SCALES_BOTH, SK_GLOBAL_SCALE_GIVEN, 2, SK_PATH_AUTO};
    run_case(&big4, &rng, seed);
    run_case(&big8, &rng, seed);
  }
  unsetenv("SPARKINFER_QUANT_CHUNKS_PER_THREAD");
  cr_assert_eq(case_failures, 0, "seed %llu: %d mismatching outputs (MISMATCH lines above)", (unsigned long long)seed,
               case_failures);
}

/* The rows kernels launched directly: 2-D grids the host never picks (fewer and more CTA columns
 * than k-tiles and rows than slabs of ops/quantization/split.cuh), ld_x > K, and the in-CTA
 * global scale mode (nvfp4_rows GS_MODE 2, grid 1 x 1), against the reference with the same ld. */
static void direct_case(int nvfp4, skref_dtype dt, int m, int k, int ld, int layout, int gs_mode, sk_dim3 grid,
                        skref_rng *rng, uint64_t seed) {
  const int block = nvfp4 ? 16 : 32;
  const size_t n = (size_t)m * (size_t)ld, vbytes = (size_t)m * (size_t)(nvfp4 ? k / 2 : k), cols = (size_t)(k / block);
  const size_t swz = sk_swizzled_scale_bytes(m, (int64_t)cols), rowsz = (size_t)m * cols;
  uint16_t *hx = malloc(n * 2);
  skref_fill_normal(rng, hx, n, dt, 1.0f, 0.001, 1000.0f);
  float gs = (float)(448.0 * 6.0 / (1.0 + 10.0 * skref_rng_uniform(rng))), ref_gs = 0;
  uint8_t *rv = malloc(vbytes), *rs = malloc(swz), *rr = malloc(rowsz);
  int rc = nvfp4 ? skref_quantize_nvfp4(hx, dt, (size_t)m, (size_t)k, (size_t)ld, gs_mode == 0 ? &gs : NULL, &ref_gs, rv,
                                        (layout & 1) ? rs : NULL, (layout & 2) ? rr : NULL)
                 : skref_quantize_mxfp8(hx, dt, (size_t)m, (size_t)k, (size_t)ld, rv, (layout & 1) ? rs : NULL,
                                        (layout & 2) ? rr : NULL);
  cr_assert_eq(rc, 0);
  quant_io io;
  quant_io_alloc(&io, hx, n * 2, vbytes, swz, rowsz, layout);
  CUDA_OK(cudaMemcpy(io.dgs, &gs, 4, cudaMemcpyHostToDevice));
  const char *t = dt == SKREF_BF16 ? "__nv_bfloat16" : "__half";
  char name[160];
  if (nvfp4) snprintf(name, sizeof name, "sk::quant::nvfp4_rows<%s, %d, %d, 1>", t, layout, gs_mode);
  else snprintf(name, sizeof name, "sk::quant::mxfp8_rows<%s, %d, 1>", t, layout);
  sk_kernel_request r = {nvfp4 ? "quantization.nvfp4" : "quantization.mxfp8",
                         nvfp4 ? "quantization/nvfp4.cuh" : "quantization/mxfp8.cuh", name, "direct", NULL, NULL, 0, 0};
  sk_kernel *kern;
  SK_OK_OR_FAIL(sk_kernel_resolve(&r, &kern));
  const void *px = io.dx, *partials = NULL;
  int np = 0;
  void *nargs[] = {(void *)&px, &ld, &m, &k, &io.dv, &io.ds, &io.dr, &io.dgs, (void *)&partials, &np};
  void *margs[] = {(void *)&px, &ld, &m, &k, &io.dv, &io.ds, &io.dr};
  SK_OK_OR_FAIL(sk_kernel_launch(kern, grid, (sk_dim3){256, 1, 1}, 0, NULL,
                                 nvfp4 ? nargs : margs));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  quant_io_read(&io);
  const char *what = memcmp(io.gv, rv, vbytes)                      ? "values"
                     : io.ds && memcmp(io.gsw, rs, swz)              ? "swizzled scales"
                     : io.dr && memcmp(io.grr, rr, rowsz)            ? "row scales"
                     : nvfp4 && gs_mode == 2 && skref_f32_bits(io.got_gs) != skref_f32_bits(ref_gs) ? "global scale"
                                                                     : NULL;
  if (what)
    CASE_FAIL("seed %llu %s direct M=%d K=%d ld=%d layout %d gs mode %d grid (%u, %u): %s differ",
              (unsigned long long)seed, nvfp4 ? "nvfp4" : "mxfp8", m, k, ld, layout, gs_mode, grid.x, grid.y, what);
  quant_io_free(&io);
  free(hx); free(rv); free(rs); free(rr);
}

Test(gpu_quant, direct_launch_any_grid_ld_and_in_cta, .init = setup, .fini = teardown, .timeout = 600) {
  uint64_t seed = skref_test_seed("gpu quant direct");
  skref_rng rng;
  skref_rng_seed(&rng, seed);
  static const int tm[] = {1, 3, 127, 129, 1000};
  static const int tk4[] = {16, 48, 2064}, tk8[] = {32, 96, 2080};
  int i = 0;
  for (size_t a = 0; a < sizeof tm / sizeof tm[0]; a++)
    for (int kind = 0; kind < 2; kind++)
      for (size_t b = 0; b < 3; b++, i++) {
        const int m = tm[a], k = kind ? tk4[b] : tk8[b], bc = kind ? 2 : 4;
        const unsigned kt = (unsigned)sk_qsplit_k_tiles(k / 8, bc), slabs = (unsigned)sk_qsplit_slabs(m, bc);
        const sk_dim3 grids[] = {{1, 1, 1},          {2, 3, 1},           {3, 1, 1},
                                 {kt > 1 ? kt - 1 : 1, slabs > 1 ? slabs - 1 : 1, 1},
                                 {kt + 1, 2, 1},     {kt, 3 * slabs + 1, 1}};
        for (int g = 0; g < 6; g++)
          direct_case(kind, i % 2 ? SKREF_FP16 : SKREF_BF16, m, k, k + (g % 2 ? 72 : 8), 1 + (i + g) % 3, 0, grids[g],
                      &rng, seed);
        if (kind)
          direct_case(1, i % 2 ? SKREF_BF16 : SKREF_FP16, m, k, k + 8, 1 + i % 3, 2, (sk_dim3){1, 1, 1}, &rng, seed);
      }
  cr_assert_eq(case_failures, 0, "seed %llu: %d mismatching outputs (MISMATCH lines above)", (unsigned long long)seed,
               case_failures);
}
