/* gemm host side without a GPU: pack_weight equals the reference's for every recipe; mm
 * validation (bad shapes, K not a multiple of 128, mismatched recipe scales, misaligned
 * pointers, wrong dtypes) fails with a status and a message; manifest builders and the decode
 * row tiles they pick. Device pointers are fake: validation never dereferences them. */
#include <criterion/criterion.h>

#include "ref/gemm.h"
#include "ref/skref.h"
#include "sparkinfer/gemm.h"
#include "sparkinfer/quantization.h"
#include "testutil.h"

#include "../kernel_src/gemm/decode_schedule.cuh" /* plain C11: the decode kernel's work split */

Test(gemm_ops, pack_weight_matches_reference_for_every_recipe) {
  uint64_t seed = skref_test_seed("gemm pack_weight"), rng = seed;
  const size_t n = 300, ks[] = {64, 96, 640};
  for (int r = 0; r < 5; r++)
    for (size_t ki = 0; ki < 3; ki++) {
      size_t k = ks[ki];
      if (r == SKREF_GEMM_BLOCK_FP8 || r == SKREF_GEMM_TENSOR_FP8) k = ks[ki] * 2; /* any k; multiples keep it simple */
      uint8_t *codes = malloc(skref_gemm_code_bytes((skref_gemm_recipe)r, n, k));
      size_t sb = skref_gemm_scale_bytes((skref_gemm_recipe)r, SKREF_GEMM_B, n, k);
      void *scales = malloc(sb + 8);
      /* random operand for k that is not a multiple of 128: fill codes and scales directly */
      for (size_t i = 0; i < skref_gemm_code_bytes((skref_gemm_recipe)r, n, k); i++) codes[i] = (uint8_t)skref_gemm_rand_u64(&rng);
      for (size_t i = 0; i < sb; i++) ((uint8_t *)scales)[i] = (uint8_t)(skref_gemm_rand_u64(&rng) & 0x3f);
      size_t pcb, psb;
      cr_assert_eq(sk_gemm_packed_bytes((sk_gemm_recipe)r, n, k, &pcb, &psb), SK_OK, "%s", sk_last_error_message());
      size_t kp = skref_gemm_padded_k(k);
      cr_assert_eq(pcb, skref_gemm_code_bytes((skref_gemm_recipe)r, n, kp));
      cr_assert_eq(psb, skref_gemm_scale_bytes((skref_gemm_recipe)r, SKREF_GEMM_B, n, kp));
      uint8_t *ours_c = malloc(pcb), *ref_c = malloc(pcb), *ours_s = malloc(psb + 8), *ref_s = malloc(psb + 8);
      cr_assert_eq(sk_gemm_pack_weight((sk_gemm_recipe)r, n, k, codes, scales, ours_c, ours_s), SK_OK, "%s",
                   sk_last_error_message());
      skref_gemm_pack_weight((skref_gemm_recipe)r, n, k, codes, scales, ref_c, ref_s);
      cr_assert_eq(memcmp(ours_c, ref_c, pcb), 0, "seed %llu recipe %d k %zu: packed codes differ", (unsigned long long)seed, r, k);
      if (psb) cr_assert_eq(memcmp(ours_s, ref_s, psb), 0, "seed %llu recipe %d k %zu: packed scales differ", (unsigned long long)seed, r, k);
      free(codes); free(scales); free(ours_c); free(ref_c); free(ours_s); free(ref_s);
    }
  cr_assert_eq(sk_gemm_pack_weight((sk_gemm_recipe)9, 1, 128, "", "", (void *)1, (void *)1), SK_ERR_INVALID_ARGUMENT);
}

#define U8 ((DLDataType){kDLUInt, 8, 1})
#define F32 ((DLDataType){kDLFloat, 32, 1})
#define BF16 ((DLDataType){kDLBfloat, 16, 1})

Test(gemm_ops, mm_rejects_bad_inputs_with_a_message) {
  setenv("SPARKINFER_CACHE_DISABLE", "1", 1);
  const int64_t m = 4, n = 256, k = 512;
  int64_t ac_s[2] = {m, k / 2}, bc_s[2] = {n, k / 2}, as_s[1] = {(int64_t)sk_swizzled_scale_bytes(m, k / 16)},
          bs_s[1] = {(int64_t)sk_swizzled_scale_bytes(n, k / 16)}, c_s[2] = {m, n};
  DLTensor ac = tu_fake_device_tensor(0x100000, U8, 2, ac_s), bc = tu_fake_device_tensor(0x200000, U8, 2, bc_s), as = tu_fake_device_tensor(0x300000, U8, 1, as_s),
           bs = tu_fake_device_tensor(0x400000, U8, 1, bs_s), c = tu_fake_device_tensor(0x500000, BF16, 2, c_s);
  struct { const char *what; sk_gemm_recipe r; DLTensor ac, as, bc, bs, c; const char *needle; } bad[10];
  int nb = 0;
  DLTensor t;
  int64_t k_bad[2] = {m, 100};
  t = ac; t.shape = k_bad;
  bad[nb++] = (__typeof__(bad[0])){"K not a multiple of 128", SK_GEMM_NVFP4, t, as, bc, bs, c, "multiple of 128"};
  int64_t bk_bad[2] = {n, 128};
  t = bc; t.shape = bk_bad;
  bad[nb++] = (__typeof__(bad[0])){"B's K differs", SK_GEMM_NVFP4, ac, as, t, bs, c, "b_codes dim 1"};
  bad[nb++] = (__typeof__(bad[0])){"mxfp4 scales sized for nvfp4", SK_GEMM_MXFP4, ac, as, bc, bs, c, "a_scales"};
  t = ac; t.byte_offset = 4;
  bad[nb++] = (__typeof__(bad[0])){"misaligned codes", SK_GEMM_NVFP4, t, as, bc, bs, c, "aligned"};
  int64_t c_bad[2] = {m, n + 1};
  t = c; t.shape = c_bad;
  bad[nb++] = (__typeof__(bad[0])){"C shape", SK_GEMM_NVFP4, ac, as, bc, bs, t, "c dim 1"};
  t = c; t.dtype = U8;
  bad[nb++] = (__typeof__(bad[0])){"C dtype", SK_GEMM_NVFP4, ac, as, bc, bs, t, "bfloat16, float16 or float32"};
  t = as; t.dtype = F32;
  bad[nb++] = (__typeof__(bad[0])){"scale dtype", SK_GEMM_NVFP4, ac, t, bc, bs, c, "a_scales must be uint8"};
  for (int i = 0; i < nb; i++) {
    sk_status s = sk_gemm_mm(bad[i].r, &bad[i].ac, &bad[i].as, &bad[i].bc, &bad[i].bs, NULL, &bad[i].c, NULL, 0, NULL);
    cr_assert_eq(s, SK_ERR_INVALID_ARGUMENT, "%s: got %s", bad[i].what, sk_status_string(s));
    cr_assert(strstr(sk_last_error_message(), bad[i].needle), "%s: \"%s\" lacks \"%s\"", bad[i].what,
              sk_last_error_message(), bad[i].needle);
  }
  /* tensor_fp8 takes no block scales; block_fp8 wants fp32 scales. */
  int64_t f8a[2] = {m, k}, f8b[2] = {n, k};
  DLTensor a8 = tu_fake_device_tensor(0x100000, U8, 2, f8a), b8 = tu_fake_device_tensor(0x200000, U8, 2, f8b);
  cr_assert_eq(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &a8, &as, &b8, NULL, NULL, &c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_mm(SK_GEMM_BLOCK_FP8, &a8, &as, &b8, &bs, NULL, &c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_mm((sk_gemm_recipe)7, &a8, NULL, &b8, NULL, NULL, &c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_mm(SK_GEMM_NVFP4, NULL, &as, &bc, &bs, NULL, &c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  /* A valid call without a GPU fails cleanly at resolution. */
  sk_status s = sk_gemm_mm(SK_GEMM_NVFP4, &ac, &as, &bc, &bs, NULL, &c, NULL, 0, NULL);
  if (!tu_exists("/dev/nvidia0"))
    cr_assert(s == SK_ERR_NO_DRIVER || s == SK_ERR_NO_DEVICE, "got %s: %s", sk_status_string(s), sk_last_error_message());
  cr_assert_eq(sk_gemm_is_supported(SK_GEMM_NVFP4, "sm_120a"), 1);
  cr_assert_eq(sk_gemm_is_supported(SK_GEMM_NVFP4, "sm_80"), 0);
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 17, 4096, 4096), 0u, "no split-K beyond the decode regime");
}

/* sk-warm --dry-run of `manifest` for sm_120a with stderr in *out too (where refusals are). */
static int warm_dry_run_all_output(const char *warm, const char *manifest, char *const env[], char **out) {
  char cmd[1600];
  snprintf(cmd, sizeof cmd, "'%s' --manifest '%s' --arch sm_120a --dry-run 2>&1", warm, manifest);
  char *sh[] = {"/bin/sh", "-c", cmd, NULL};
  return tu_run(sh, env, out);
}

Test(gemm_ops, sk_warm_builds_gemm_entries) {
  char *dir = tu_tempdir("gemmwarm");
  char m[600], cache[700], warm[512];
  snprintf(m, sizeof m, "%s/m.json", dir);
  snprintf(cache, sizeof cache, "%s/c", dir);
  snprintf(warm, sizeof warm, "%s/bin/sk-warm", tu_build_dir());
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":["
                   "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"nvfp4\",\"out\":\"bf16\",\"n\":4096,\"k\":4096,\"m\":[1,4,8,16]}},"
                   "{\"op\":\"gemm.mxfp8_linear\",\"caps\":{\"n\":4096,\"k\":4096,\"m\":[1,2048]}}]}");
  char *argv[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", cache, "--json", "--quiet", NULL};
  char *out = NULL;
  cr_assert_eq(tu_run(argv, NULL, &out), 0, "%s", out);
  /* nvfp4: TOKEN_TILES 1 (M<=8) and 2 (M<=16) = 2 kernels; mxfp8_linear: the quantizer and mm's
   * decode kernel (M=1) + the SM120 kernel (M=2048, the same quantizer) */
  cr_assert_eq(tu_json_num(out, "kernels"), 5, "%s", out);
  free(out);
  /* mxfp8_linear quantizes with the quantization.mxfp8 kernel, then runs mm's decode kernel (8 and
   * 16 tokens; 16-row tiles on this small layer): the fused kernel is opt-in
   * (SPARKINFER_GEMM_LINEAR_FUSED=1). */
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":["
                   "{\"op\":\"gemm.mxfp8_linear\",\"caps\":{\"n\":4096,\"k\":4096,\"m\":[8,9]}}]}");
  char *argv_dry[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", cache, "--dry-run", "--quiet", NULL};
  cr_assert_eq(tu_run(argv_dry, NULL, &out), 0, "%s", out);
  int listed = 0;
  for (const char *p = out; (p = strstr(p, " sm_120a ")) != NULL; p++) listed++;
  cr_assert_eq(listed, 3, "%s", out);
  cr_assert(strstr(out, "gemv_decode<2, 0, 1, 4, 1, 1>") && strstr(out, "gemv_decode<2, 0, 2, 4, 1, 1>") && strstr(out, "mxfp8_rows") &&
                !strstr(out, "gemv_decode_mxfp8_bf16"),
            "%s", out);
  free(out);
  /* SPARKINFER_GEMM_LINEAR_FUSED=1: M = 8 is the fused kernel (mm's 16-row geometry), M = 9
   * quantizer + mm; a malformed value is refused with its name. */
  char fused_on[] = "SPARKINFER_GEMM_LINEAR_FUSED=1", fused_bad[] = "SPARKINFER_GEMM_LINEAR_FUSED=maybe";
  char *env_on[] = {fused_on, NULL}, *env_bad[] = {fused_bad, NULL};
  cr_assert_eq(tu_run(argv_dry, env_on, &out), 0, "%s", out);
  cr_assert(strstr(out, "gemv_decode_mxfp8_bf16<0, 1, 4, 1>") && strstr(out, "gemv_decode<2, 0, 2, 4, 1, 1>") &&
                !strstr(out, "gemv_decode<2, 0, 1, 4, 1, 1>"),
            "%s", out);
  free(out);
  cr_assert_eq(warm_dry_run_all_output(warm, m, env_bad, &out), 2, "%s", out);
  cr_assert(strstr(out, "SPARKINFER_GEMM_LINEAR_FUSED=maybe: expected 0..9, true or false"), "%s", out);
  free(out);
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":["
                   "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"fp3\",\"n\":4096,\"k\":4096,\"m\":[1]}}]}");
  char *argv2[] = {warm, "--manifest", m, "--arch", "sm_120a", "--cache-dir", cache, "--quiet", NULL};
  cr_assert_eq(tu_run(argv2, NULL, NULL), 2);
  tu_write_file(m, "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":["
                   "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"nvfp4\",\"n\":-4,\"k\":4096,\"m\":[1]}}]}");
  cr_assert_eq(tu_run(argv2, NULL, NULL), 2);
  /* K picks the decode kernel's row tiles: a manifest must give it, a multiple of 128. */
  static const char *const bad_k[] = {"", ",\"k\":4000", ",\"k\":0", ",\"k\":\"4096\""};
  for (size_t i = 0; i < sizeof bad_k / sizeof *bad_k; i++) {
    char text[256];
    snprintf(text, sizeof text,
             "{\"format\":\"sparkinfer-manifest\",\"version\":1,\"ops\":["
             "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"nvfp4\",\"n\":4096%s,\"m\":[1]}}]}",
             bad_k[i]);
    tu_write_file(m, text);
    cr_assert_eq(warm_dry_run_all_output(warm, m, NULL, &out), 2, "k case %zu", i);
    cr_assert(strstr(out, "caps.k: expected a positive multiple of 128"), "k case %zu: %s", i, out);
    free(out);
  }
  tu_rmrf(dir);
  free(dir);
}

/* A malformed tuning variable makes sk_gemm_mm (tensor_fp8, M x 256 x 512) fail with
 * SK_ERR_INVALID_ARGUMENT naming it, before anything is resolved or launched. */
static void expect_env_refused(const char *var, const char *value, int64_t m) {
  setenv("SPARKINFER_CACHE_DISABLE", "1", 1);
  setenv(var, value, 1);
  const int64_t n = 256, k = 512;
  int64_t a_s[2] = {m, k}, b_s[2] = {n, k}, c_s[2] = {m, n};
  DLTensor a = tu_fake_device_tensor(0x100000, U8, 2, a_s), b = tu_fake_device_tensor(0x200000, U8, 2, b_s),
           c = tu_fake_device_tensor(0x300000, BF16, 2, c_s);
  cr_assert_eq(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &a, NULL, &b, NULL, NULL, &c, NULL, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), var), "%s", sk_last_error_message());
}

Test(gemm_ops, prefill_tile_override_is_validated) {
  expect_env_refused("SPARKINFER_GEMM_PREFILL_TILE", "128,100,2,4,3", 64);
}

Test(gemm_ops, mxfp8_linear_prewarm_resolves_every_kernel_offline) {
  /* M = 1 (fused decode kernel), M = 9 (mm's decode kernel + the quantizer): 3 compiles for an
   * explicit arch with no GPU; bad arguments are refused before anything compiles. */
  setenv("SPARKINFER_CACHE_DISABLE", "1", 1);
  const int64_t ms[] = {1, 9}, bad_m[] = {0};
  cr_assert_eq(sk_gemm_mxfp8_linear_prewarm(SK_DTYPE_BF16, ms, 2, 4096, 1000, "sm_120a"), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_mxfp8_linear_prewarm(SK_DTYPE_BF16, bad_m, 1, 4096, 1024, "sm_120a"), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "gemm.mxfp8_linear prewarm"), "%s", sk_last_error_message());
  sk_reset_counters();
  cr_assert_eq(sk_gemm_mxfp8_linear_prewarm(SK_DTYPE_BF16, ms, 2, 4096, 1024, "sm_120a"), SK_OK, "%s",
               sk_last_error_message());
  sk_counters c;
  sk_get_counters(&c);
  cr_assert_eq(c.compiles, 3, "fused kernel, decode kernel, quantizer: %llu compiles", (unsigned long long)c.compiles);
  sk_freeze_kernel_resolution("test");
  cr_assert_eq(sk_gemm_mxfp8_linear_prewarm(SK_DTYPE_BF16, ms, 2, 4096, 1024, "sm_120a"), SK_OK,
               "everything is in memory after the prewarm: %s", sk_last_error_message());
}

Test(gemm_ops, decode_override_is_validated) {
  /* ROW_TILES must be 1, 2 or 4: 3 is refused with the variable named, nothing launched. */
  expect_env_refused("SPARKINFER_GEMM_DECODE", "3,4,2", 1);
}

/* The stream-K split of gemm/decode_schedule.cuh, walked as the kernel walks it: every unit is
 * taken exactly once; only a CTA's first and last tile can be partial; a split tile's CTAs are
 * cta_of_unit(first unit) .. cta_of_unit(last unit), and the slot each of them writes is the one
 * the fixup reads (distinct slots); "no split" is never claimed wrongly. */
Test(gemm_ops, decode_schedule_takes_every_unit_once) {
  const int tiles_set[] = {1, 7, 16, 160, 256, 896}, steps_set[] = {1, 2, 9, 23, 64}, ctas_set[] = {1, 3, 5, 7, 16, 132, 396, 528, 600};
  for (size_t a = 0; a < sizeof tiles_set / sizeof *tiles_set; a++)
    for (size_t b = 0; b < sizeof steps_set / sizeof *steps_set; b++)
      for (size_t cc = 0; cc < sizeof ctas_set / sizeof *ctas_set; cc++) {
        const int tiles = tiles_set[a], steps = steps_set[b], ctas = ctas_set[cc], units = tiles * steps;
        if (ctas > units) continue; /* the contract: every CTA has work (the host never launches more) */
        int *owner = malloc(sizeof(int) * (size_t)units), *slot_of = malloc(sizeof(int) * (size_t)units);
        int *slot_used = calloc(2 * (size_t)ctas, sizeof(int));
        int split_tiles = 0;
        for (int i = 0; i < units; i++) owner[i] = -1;
        for (int c = 0; c < ctas; c++) {
          const int u_begin = sk_decode_cta_begin(c, units, ctas), u_end = sk_decode_cta_begin(c + 1, units, ctas);
          cr_assert(u_end - u_begin == units / ctas || u_end - u_begin == units / ctas + 1, "balanced to one unit");
          int partial_tiles = 0;
          for (int u = u_begin; u < u_end;) { /* the kernel's tile loop */
            const int tile = u / steps, s_begin = u - tile * steps;
            const int s_end = s_begin + (u_end - u) < steps ? s_begin + (u_end - u) : steps;
            const int slot = 2 * c + (u == u_begin ? 0 : 1);
            if (s_begin > 0 || s_end < steps) {
              partial_tiles++;
              cr_assert(u == u_begin || s_end == u_end - tile * steps, "a partial tile is the CTA's first or last");
              cr_assert_eq(slot, sk_decode_partial_slot(c, tile, steps, units, ctas));
              cr_assert_eq(slot_used[slot]++, 0, "slot %d written twice", slot);
            }
            for (int s = s_begin; s < s_end; s++) {
              cr_assert_eq(owner[tile * steps + s], -1, "unit taken twice");
              owner[tile * steps + s] = c;
              slot_of[tile * steps + s] = slot;
            }
            u += s_end - s_begin;
          }
          cr_assert_leq(partial_tiles, 2);
          for (int u = u_begin; u < u_end; u++) cr_assert_eq(sk_decode_cta_of_unit(u, units, ctas), c);
        }
        for (int tile = 0; tile < tiles; tile++) {
          const int first = sk_decode_cta_of_unit(tile * steps, units, ctas);
          const int last = sk_decode_cta_of_unit(tile * steps + steps - 1, units, ctas);
          cr_assert_eq(owner[tile * steps], first);
          cr_assert_eq(owner[tile * steps + steps - 1], last);
          if (first == last) continue;
          split_tiles++;
          /* The fixup's order: slot of `first` (maybe its last tile), then 2c: each CTA once, in K order. */
          int s = 0;
          for (int c = first; c <= last; c++) {
            const int want = c == first ? sk_decode_partial_slot(first, tile, steps, units, ctas) : 2 * c;
            while (s < steps && owner[tile * steps + s] != c) s++;
            cr_assert_lt(s, steps, "CTA %d takes part in tile %d", c, tile);
            cr_assert_eq(slot_of[tile * steps + s], want, "tiles %d steps %d ctas %d tile %d cta %d", tiles, steps, ctas, tile, c);
          }
        }
        for (int i = 0; i < units; i++) cr_assert_neq(owner[i], -1, "unit %d not taken", i);
        if (!sk_decode_may_split_tiles(tiles, steps, ctas))
          cr_assert_eq(split_tiles, 0, "tiles %d steps %d ctas %d: claimed unsplit", tiles, steps, ctas);
        free(owner); free(slot_of); free(slot_used);
      }
}

/* Decode tile rows (sk_decode_row): every weight row below N belongs to exactly one (tile, local
 * row), for every recipe, row tiles and groups, including N that is not a multiple of a span.
 * Interleaved tiles (mxfp4, mxfp8 at 1-2 row tiles, groups dividing 4): a lane's 2*row_tiles
 * rows lie 32 apart from its first row, whose 128x4-swizzled scale word starts an aligned 8- or
 * 16-byte piece of one 16-byte chunk (first row % 128 < 32 for 2 row tiles, < 32 or in [64, 96)
 * for 1), so the kernel loads them all at once. */
Test(gemm_ops, decode_tile_rows_cover_every_row_once) {
  static const int ns[] = {1, 31, 77, 200, 2880, 4096, 5120};
  static unsigned char hits[5120];
  for (int recipe = 0; recipe < 5; recipe++)
    for (int row_tiles = 1; row_tiles <= 4; row_tiles *= 2)
      for (int groups = 1; groups <= 4; groups++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
          const int n = ns[ni], rows = sk_decode_tile_rows(row_tiles, groups);
          const int tiles = sk_decode_tiles(n, recipe, row_tiles, groups);
          const int interleaved = sk_decode_interleaved(recipe, row_tiles, groups);
          cr_assert_eq(interleaved, (recipe == 1 || recipe == 2) && row_tiles <= 2 && 4 % groups == 0);
          memset(hits, 0, sizeof hits);
          for (int tile = 0; tile < tiles; tile++)
            for (int r = 0; r < rows; r++) {
              const int row = sk_decode_row(tile, r, recipe, row_tiles, groups);
              cr_assert_geq(row, 0);
              cr_assert_lt(row, tiles * rows, "recipe %d rt %d g %d n %d: row %d past the tiles", recipe, row_tiles, groups, n, row);
              if (row < n) {
                cr_assert_eq(hits[row], 0, "recipe %d rt %d g %d n %d: row %d twice", recipe, row_tiles, groups, n, row);
                hits[row] = 1;
              }
              if (interleaved && r % (16 * row_tiles) < 8) { /* a lane's first row: slot 0 */
                const int group = r / (16 * row_tiles), g = r % 8, pos = row % 128 / 32;
                cr_assert(row_tiles == 2 ? pos == 0 : pos == 0 || pos == 2, "row %d: chunk position %d", row, pos);
                for (int slot = 1; slot < 2 * row_tiles; slot++)
                  cr_assert_eq(sk_decode_row(tile, 16 * row_tiles * group + 8 * slot + g, recipe, row_tiles, groups), row + 32 * slot);
              }
            }
          for (int row = 0; row < n; row++)
            cr_assert_eq(hits[row], 1, "recipe %d rt %d g %d n %d: row %d missed", recipe, row_tiles, groups, n, row);
          /* interleaved tiles may overshoot N by less than a span; contiguous ones by less than a tile */
          cr_assert_lt((int64_t)(tiles - 1) * rows, interleaved ? n + 64 * row_tiles : n);
        }
}

/* Workspace: 0 when no tile is split (K = 128, beyond decode); the fourth override field picks the
 * schedule (no GPU here: 128 SMs assumed; the default target of the split-K grid is 2 CTAs per SM,
 * and "auto" switches to stream-K when that grid splits K and exceeds the resident CTAs:
 * 4 per SM for nvfp4 / tensor_fp8 at M <= 8, 3 otherwise). Tiles are 32 rows, 16 for tensor_fp8 at
 * N <= 16384 and for block_fp8 there at M <= 8 (decode_row_tiles), 64 for mxfp8 and mxfp4 in two
 * row groups at M > 8 and N <= 16384 (decode_row_groups); the workspace is the larger
 * need of the two token-tile variants, each with its own tiles. */
Test(gemm_ops, decode_workspace_follows_the_schedule) {
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 8192, 128), 0u, "one step per tile: never split");
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 1, 8192, 8192), 0u, "256 tiles >= 2 x 128 SMs: no split");
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 4096, 8192), 0u, "256 16-row tiles: no split");
  /* tensor_fp8, 128 16-row tiles: 2 splits = 256 CTAs, one wave for both token-tile variants: split-K */
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 2048, 8192), (size_t)(2 * 256 * 16 * 4 + 128 * 4));
  /* block_fp8: 256 16-row tiles at 8 tokens (no split); at 16 tokens 128 tiles of 32 rows in one
   * row group (decode_row_groups), split in 2 */
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_BLOCK_FP8, 1, 4096, 8192), (size_t)(2 * 256 * 32 * 4 + 128 * 4));
  /* mxfp8 at 16 tokens: 112 tiles of 64 rows, 3 splits = 336 CTAs (<= 384 resident): split-K */
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_MXFP8, 16, 7168, 8192), (size_t)(2 * 336 * 16 * 64 * 4 + 512));
  /* one row group beyond N = 16384: 896 32-row tiles, no split */
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_MXFP8, 16, 28672, 4096), 0u);
  /* nvfp4: 448 split-K CTAs fit 512 at 8 tokens, the 16-token variant (384) streams: the larger */
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_NVFP4, 1, 7168, 8192), (size_t)(2 * 448 * 32 * 4 + 1024));
  /* Never shrinking as M grows (plans size it for their largest M), across the token-tile switch. */
  const int64_t shapes[][2] = {{8192, 8192}, {25344, 4096}, {5120, 2944}, {200, 1152}, {77, 128}};
  for (int r = 0; r < 5; r++)
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
      for (int64_t m = 1; m < 16; m++)
        cr_assert_leq(sk_gemm_workspace_bytes((sk_gemm_recipe)r, m, shapes[i][0], shapes[i][1]),
                      sk_gemm_workspace_bytes((sk_gemm_recipe)r, m + 1, shapes[i][0], shapes[i][1]), "recipe %d shape %zu m %lld", r,
                      i, (long long)m);
}

Test(gemm_ops, decode_override_splitk_schedule) {
  setenv("SPARKINFER_GEMM_DECODE", "2,4,2,splitk", 1);
  /* the previous heuristic: 2 splits of each of the 128 tiles (2 x 128 SMs), none for 896 tiles */
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 4096, 8192), (size_t)(2 * 256 * 32 * 4 + 128 * 4));
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 28672, 4096), 0u, "896 tiles >= 256: no split");
}

Test(gemm_ops, decode_override_streamk_ctas_per_sm) {
  setenv("SPARKINFER_GEMM_DECODE", "2,4,3,streamk", 1);
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 8192, 8192), (size_t)(2 * 384 * 32 * 4 + 256 * 4));
}

/* The fifth field sets the row groups: 4 groups of 32 rows = 128-row tiles, 64 of them split in 4
 * (256 CTAs) for both token tiles. */
Test(gemm_ops, decode_override_row_groups) {
  setenv("SPARKINFER_GEMM_DECODE", "2,4,0,auto,4", 1);
  cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, 8192, 8192), (size_t)(2 * 256 * 128 * 4 + 256));
}

/* 3 row groups of 16 rows (6 warps): 48-row tiles, which block_fp8 cannot take (a tile's rows
 * must lie in one 128-row scale block): it keeps one group, the other recipes take three. */
Test(gemm_ops, decode_override_row_groups_block_fp8_keeps_its_scale_blocks) {
  setenv("SPARKINFER_GEMM_DECODE", "1,6,0,auto,3", 1);
  sk_gemm_launch_info info;
  cr_assert_eq(sk_gemm_describe(SK_GEMM_BLOCK_FP8, SK_DTYPE_BF16, 16, 4096, 4096, "sm_120a", &info), SK_OK, "%s",
               sk_last_error_message());
  cr_assert_str_eq(info.name, "sk::gemm::gemv_decode<3, 0, 2, 6, 1, 1>");
  cr_assert_eq(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, 16, 4096, 4096, "sm_120a", &info), SK_OK);
  cr_assert_str_eq(info.name, "sk::gemm::gemv_decode<4, 0, 2, 6, 1, 3>");
}

Test(gemm_ops, decode_override_bad_schedule_is_refused) {
  expect_env_refused("SPARKINFER_GEMM_DECODE", "2,4,3,roundrobin", 1);
}

Test(gemm_ops, decode_override_row_groups_must_divide_the_warps) {
  expect_env_refused("SPARKINFER_GEMM_DECODE", "1,4,0,auto,3", 1);
}

Test(gemm_ops, decode_override_extra_field_is_refused) {
  expect_env_refused("SPARKINFER_GEMM_DECODE", "1,4,0,auto,2,1", 1);
}

Test(gemm_ops, decode_override_empty_field_is_refused) {
  expect_env_refused("SPARKINFER_GEMM_DECODE", "1,4,0,", 1);
}

Test(gemm_ops, block_fp8_linear_offline_plan_and_bind) {
  char *dir = tu_tempdir("bfp8");
  setenv("SPARKINFER_CACHE_DIR", dir, 1);
  sk_block_fp8_linear_plan *p;
  sk_block_fp8_linear_caps bad = {4096, 1000, 64, SK_DTYPE_BF16, "sm_120a"};
  cr_assert_eq(sk_block_fp8_linear_plan_create(&bad, &p), SK_ERR_INVALID_ARGUMENT, "K must be a multiple of 128");
  sk_block_fp8_linear_caps caps = {640, 1024, 300, SK_DTYPE_BF16, "sm_120a"};
  cr_assert_eq(sk_block_fp8_linear_plan_create(&caps, &p), SK_OK, "%s", sk_last_error_message());
  sk_scratch_spec spec;
  cr_assert_eq(sk_block_fp8_linear_scratch_spec(p, &spec), SK_OK);
  cr_assert_geq(spec.bytes, (size_t)(300 * 1024 + 300 * 8 * 4));
  cr_assert_eq(spec.zero_once, 1, "the decode GEMM's split-K counters live in the scratch");
  int64_t xs[2] = {100, 1024}, wc[2] = {640, 1024}, wsc[2] = {5, 8}, os[2] = {100, 640};
  DLTensor x = tu_fake_device_tensor(0x100000, BF16, 2, xs), w = tu_fake_device_tensor(0x200000, U8, 2, wc), ws = tu_fake_device_tensor(0x300000, F32, 2, wsc),
           o = tu_fake_device_tensor(0x400000, BF16, 2, os);
  sk_binding b;
  cr_assert_eq(sk_block_fp8_linear_bind(p, &x, &w, &ws, &o, (void *)0x500000, spec.bytes, &b), SK_OK, "%s",
               sk_last_error_message());
  int64_t wsc_bad[2] = {640, 8}; /* per-row scales: the weight needs one per 128 rows */
  DLTensor wsb = ws;
  wsb.shape = wsc_bad;
  cr_assert_eq(sk_block_fp8_linear_bind(p, &x, &w, &wsb, &o, (void *)0x500000, spec.bytes, &b), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "w_scales"), "%s", sk_last_error_message());
  int64_t xs_big[2] = {301, 1024};
  DLTensor xb = x;
  xb.shape = xs_big;
  cr_assert_eq(sk_block_fp8_linear_bind(p, &xb, &w, &ws, &o, (void *)0x500000, spec.bytes, &b), SK_ERR_INVALID_ARGUMENT);
  cr_assert_neq(sk_block_fp8_linear_run(p, &b, NULL), SK_OK, "no kernel is loaded without a GPU");
  sk_block_fp8_linear_plan_destroy(p);
  tu_rmrf(dir);
  free(dir);
}

/* The manifest builder picks each arch's kernels: the SM120 block-scaled kernel for FP4/MXFP8
 * prefill on sm_120a/sm_121a, the portable tiled kernel on sm_90a, decode for M <= 16 on all. */
Test(gemm_ops, manifest_builder_picks_the_arch_path) {
  const char *archs[] = {"sm_120a", "sm_121a", "sm_90a"};
  for (int a = 0; a < 3; a++) {
    char *out = NULL;
    cr_assert_eq(tu_warm_dry_run("{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"nvfp4\",\"n\":4096,\"k\":4096,"
                                 "\"m\":[1,2048]}}",
                                 archs[a], &out),
                 0, "%s", out);
    cr_assert(strstr(out, "sk::gemm::gemv_decode<0, 0, 1, 4, 1, 1>"), "%s: %s", archs[a], out); /* N*K = 2^24: small */
    if (a < 2) cr_assert(strstr(out, "sk::gemm::sm120_blockscaled<0, 0, 128"), "%s: %s", archs[a], out);
    else cr_assert(strstr(out, "sk::gemm::mma_tiled<0, 0, 128"), "%s: %s", archs[a], out);
    free(out);
  }
}

/* sk_gemm_describe names the kernel mm launches: the same one the manifest builder lists for
 * those caps, with mm's geometry; bad arguments are refused with a message. No GPU here: the
 * grids assume 128 SMs. */
Test(gemm_ops, describe_names_what_mm_launches) {
  sk_gemm_launch_info info;
  cr_assert_eq(sk_gemm_describe(SK_GEMM_TENSOR_FP8, SK_DTYPE_BF16, 1, 128, 128, "sm_120a", &info), SK_OK, "%s",
               sk_last_error_message());
  cr_assert_str_eq(info.source, "gemm/gemv_decode.cuh");
  cr_assert_str_eq(info.name, "sk::gemm::gemv_decode<4, 0, 1, 4, 1, 1>");
  cr_assert_eq(info.grid.x, 8u, "128 rows in 16-row tiles, one 128-K step each: 8 CTAs");
  cr_assert(info.block.x == 128 && info.smem_bytes == 0 && info.workspace_bytes == 0 && info.sm_count == 128);
  cr_assert_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_FP16, 4096, 8192, 8192, "sm_90a", &info), SK_OK);
  cr_assert_str_eq(info.source, "gemm/mma_tiled.cuh");
  cr_assert(info.smem_bytes > 0 && info.grid.x * info.grid.y >= 128, "tiles cover C: %u x %u", info.grid.x, info.grid.y);
  /* The manifest builder requests the same names. */
  static const char *const archs[] = {"sm_90a", "sm_120a"};
  static const char *const recipes[] = {"nvfp4", "mxfp4", "mxfp8", "block_fp8", "tensor_fp8"};
  static const int64_t shapes[][2] = {{5120, 2944}, {8192, 8192}, {28672, 4096}};
  for (int a = 0; a < 2; a++)
    for (int r = 0; r < 5; r++)
      for (int sh = 0; sh < 3; sh++) {
        char caps[256], *out = NULL;
        snprintf(caps, sizeof caps,
                 "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"%s\",\"n\":%lld,\"k\":%lld,\"m\":[1,16,2048]}}",
                 recipes[r], (long long)shapes[sh][0], (long long)shapes[sh][1]);
        cr_assert_eq(tu_warm_dry_run(caps, archs[a], &out), 0, "%s", out);
        const int64_t ms[] = {1, 16, 2048};
        for (int i = 0; i < 3; i++) {
          cr_assert_eq(sk_gemm_describe((sk_gemm_recipe)r, SK_DTYPE_BF16, ms[i], shapes[sh][0], shapes[sh][1], archs[a], &info),
                       SK_OK, "%s", sk_last_error_message());
          cr_assert(strstr(out, info.name), "%s %s M %lld: describe says %s, the manifest builder:\n%s", archs[a],
                    recipes[r], (long long)ms[i], info.name, out);
        }
        free(out);
      }
  /* Refusals. */
  cr_assert_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 1, 128, 128, "sm_120a", NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_describe((sk_gemm_recipe)7, SK_DTYPE_BF16, 1, 128, 128, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_describe(SK_GEMM_NVFP4, (sk_dtype)3, 1, 128, 128, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 0, 128, 128, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 1, 128, 100, "sm_120a", &info), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "K = 100"), "%s", sk_last_error_message());
  cr_assert_eq(sk_gemm_describe(SK_GEMM_NVFP4, SK_DTYPE_BF16, 1, 128, 128, "sm120", &info), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(sk_last_error_message(), "sm120"), "%s", sk_last_error_message());
  /* Weights past the kernels' 32-bit work counters: refused everywhere, never wrapped. */
  const int64_t big[][2] = {{INT32_MAX - 100, 128}, {(int64_t)1 << 24, (int64_t)1 << 30}, {(int64_t)1 << 28, 1 << 17}};
  for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
    cr_assert_eq(sk_gemm_describe(SK_GEMM_MXFP8, SK_DTYPE_BF16, 1, big[i][0], big[i][1], "sm_120a", &info),
                 SK_ERR_INVALID_ARGUMENT, "N %lld K %lld", (long long)big[i][0], (long long)big[i][1]);
    cr_assert(strstr(sk_last_error_message(), "32-bit work counters"), "%s", sk_last_error_message());
    const int64_t one = 1;
    cr_assert_eq(sk_gemm_prewarm(SK_GEMM_NVFP4, SK_DTYPE_BF16, &one, 1, big[i][0], big[i][1], "sm_120a"), SK_ERR_INVALID_ARGUMENT);
    cr_assert_eq(sk_gemm_workspace_bytes(SK_GEMM_TENSOR_FP8, 1, big[i][0], big[i][1]), 0u);
    sk_block_fp8_linear_caps caps = {big[i][0], big[i][1], 1, SK_DTYPE_BF16, "sm_120a"};
    sk_block_fp8_linear_plan *plan = (sk_block_fp8_linear_plan *)1;
    cr_assert_eq(sk_block_fp8_linear_plan_create(&caps, &plan), SK_ERR_INVALID_ARGUMENT);
    cr_assert_null(plan);
  }
  /* The manifest builders apply the same rule (sk-warm: a bad manifest, exit status 2). */
  char *warm_out = NULL;
  cr_assert_eq(tu_warm_dry_run("{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"nvfp4\",\"n\":2147483600,\"k\":128,"
                               "\"m\":[1]}}",
                               "sm_120a", &warm_out),
               2, "%s", warm_out);
  free(warm_out);
  cr_assert_eq(tu_warm_dry_run("{\"op\":\"gemm.block_fp8_linear\",\"caps\":{\"n\":16777216,\"k\":1073741824,\"max_m\":1}}",
                               "sm_120a", &warm_out),
               2, "%s", warm_out);
  free(warm_out);
  /* The largest accepted decode problems still describe (no compile: describe only names them). */
  cr_assert_eq(sk_gemm_describe(SK_GEMM_MXFP8, SK_DTYPE_BF16, 16, INT32_MAX - 256, 128, "sm_120a", &info), SK_OK, "%s",
               sk_last_error_message());
}

/* gemm.mxfp8_linear's workspace: by default (quantize + mm) the MXFP8 activations (codes and
 * swizzled scales, each rounded up to 256 bytes) before mm's workspace, at every M. */
static size_t linear_act_bytes(int64_t m, int64_t k) {
  const size_t codes = (size_t)(m * k), scales = sk_swizzled_scale_bytes(m, k / 32);
  return (codes + 255) / 256 * 256 + (scales + 255) / 256 * 256;
}

Test(gemm_ops, mxfp8_linear_workspace_holds_the_activations) {
  const int64_t shapes[][2] = {{8192, 8192}, {200, 1152}, {28672, 4096}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    for (int64_t m = 1; m <= 16; m++) {
      const int64_t n = shapes[i][0], k = shapes[i][1];
      cr_assert_eq(sk_gemm_mxfp8_linear_workspace_bytes(m, n, k),
                   linear_act_bytes(m, k) + sk_gemm_workspace_bytes(SK_GEMM_MXFP8, m, n, k), "M %lld, %lld x %lld",
                   (long long)m, (long long)n, (long long)k);
    }
  cr_assert_eq(sk_gemm_mxfp8_linear_workspace_bytes(1, 4096, 4000), 0u, "K not a multiple of 128");
}

/* SPARKINFER_GEMM_LINEAR_FUSED=1 (read once per process; Criterion runs each test in its own):
 * M <= 8 quantizes inside the decode kernel and needs exactly mm's workspace; M > 8 as before. */
Test(gemm_ops, mxfp8_linear_workspace_when_fused) {
  setenv("SPARKINFER_GEMM_LINEAR_FUSED", "1", 1);
  for (int64_t m = 1; m <= 16; m++) {
    const size_t mm = sk_gemm_workspace_bytes(SK_GEMM_MXFP8, m, 8192, 8192);
    cr_assert_eq(sk_gemm_mxfp8_linear_workspace_bytes(m, 8192, 8192), m <= 8 ? mm : linear_act_bytes(m, 8192) + mm,
                 "M %lld", (long long)m);
  }
}

/* Decode row tiles (decode_row_tiles): 16-row tiles for every recipe at N * K <= 2^24, for
 * tensor_fp8 at N <= 16384 and at M > 8, for block_fp8 at N <= 16384 and M <= 8 only, for mxfp8 at
 * M <= 8 and for nvfp4 at M > 8 up to N * K = 2^26; 32-row tiles otherwise. The manifest builder picks exactly those
 * kernels, and tools/manifests/kernels-gemm.json (CI's compile check, the prebuilt caches) lists
 * every one of them. */
Test(gemm_ops, decode_row_tiles_follow_recipe_shape_and_tokens) {
  char *out = NULL;
  cr_assert_eq(tu_warm_dry_run("{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"tensor_fp8\",\"n\":8192,\"k\":4096,\"m\":[1,16]}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"tensor_fp8\",\"n\":28672,\"k\":4096,\"m\":[1,16]}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"block_fp8\",\"n\":16384,\"k\":4096,\"m\":[1,16]}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"mxfp8\",\"n\":8192,\"k\":4096,\"m\":[1,16]}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"mxfp8\",\"n\":28672,\"k\":4096,\"m\":[16]}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"block_fp8\",\"n\":2048,\"k\":4096,\"m\":[16],"
                               "\"out\":\"fp16\"}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"nvfp4\",\"n\":8192,\"k\":4096,\"m\":[1,16]}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"mxfp4\",\"n\":8192,\"k\":4096,\"m\":[1,16]}},"
                               "{\"op\":\"gemm.blockscaled\",\"caps\":{\"recipe\":\"mxfp4\",\"n\":5120,\"k\":2944,\"m\":[1,16],"
                               "\"out\":\"fp32\"}}",
                               "sm_120a", &out),
               0, "%s", out);
  /* mxfp8 8192 x 4096 (2^25): 16-row tiles at 8 tokens, 32-row at 16; block_fp8 2048 x 4096
   * (2^23): 16-row at 16 tokens; nvfp4 8192 x 4096: 32-row tiles at 8 tokens, 16-row at 16; mxfp4
   * 32-row on that shape, 16-row on 5120 x 2944 (below 2^24); tensor_fp8 28672 x 4096: 32-row at 8
   * tokens, 16-row at 16. Two row groups (the last template argument) at 16 tokens on
   * 2^24 < N x K for mxfp8 and mxfp4 with N <= 16384 (not on mxfp8 28672 x 4096) and for
   * tensor_fp8 with N > 16384; one for every other pick, block_fp8 included (decode_row_groups). */
  static const char *const picked[] = {"gemv_decode<4, 0, 1, 4, 1, 1>", "gemv_decode<4, 0, 2, 4, 1, 1>", "gemv_decode<4, 0, 1, 4, 2, 1>",
                                       "gemv_decode<3, 0, 1, 4, 1, 1>", "gemv_decode<3, 0, 2, 4, 2, 1>", "gemv_decode<2, 0, 1, 4, 1, 1>",
                                       "gemv_decode<2, 0, 2, 4, 2, 2>", "gemv_decode<2, 0, 2, 4, 2, 1>", "gemv_decode<3, 1, 2, 4, 1, 1>",
                                       "gemv_decode<0, 0, 1, 4, 2, 1>", "gemv_decode<0, 0, 2, 4, 1, 1>", "gemv_decode<1, 0, 1, 4, 2, 1>",
                                       "gemv_decode<1, 0, 2, 4, 2, 2>", "gemv_decode<1, 2, 1, 4, 1, 1>", "gemv_decode<1, 2, 2, 4, 1, 1>",
                                       "gemv_decode<4, 0, 2, 4, 1, 2>"};
  static const char *const not_picked[] = {"gemv_decode<3, 0, 2, 4, 1, 1>", "gemv_decode<2, 0, 1, 4, 2, 1>",
                                           "gemv_decode<2, 0, 2, 4, 1, 1>", "gemv_decode<3, 0, 2, 4, 2, 2>",
                                           "gemv_decode<1, 0, 2, 4, 2, 1>", "gemv_decode<4, 0, 2, 4, 2, 1>",
                                           "gemv_decode<0, 0, 1, 4, 1, 1>", "gemv_decode<0, 0, 2, 4, 2, 1>",
                                           "gemv_decode<1, 0, 1, 4, 1, 1>", "gemv_decode<1, 0, 2, 4, 1, 1>",
                                           "gemv_decode<1, 2, 1, 4, 2, 1>"};
  FILE *f = fopen("tools/manifests/kernels-gemm.json", "rb");
  cr_assert(f, "tools/manifests/kernels-gemm.json (run from the repo root)");
  static char listed[1 << 16];
  const size_t len = fread(listed, 1, sizeof listed - 1, f);
  fclose(f);
  cr_assert_lt(len, sizeof listed - 1, "kernels-gemm.json grew past the test's buffer");
  listed[len] = 0;
  for (size_t i = 0; i < sizeof picked / sizeof *picked; i++) {
    cr_assert(strstr(out, picked[i]), "not picked: %s\n%s", picked[i], out);
    cr_assert(strstr(listed, picked[i]), "picked but not in kernels-gemm.json: %s", picked[i]);
  }
  for (size_t i = 0; i < sizeof not_picked / sizeof *not_picked; i++)
    cr_assert_null(strstr(out, not_picked[i]), "picked: %s\n%s", not_picked[i], out);
  free(out);
}

/* gemm.h: BLOCK_FP8 raw weight scales are [ceil(n/128), ceil(k/128)] fp32, so a K that is not a
 * multiple of 128 has a last partial block. The raw scales end right at a PROT_NONE page: reading
 * one float past the documented size crashes the test. packed_bytes takes a NULL scales size
 * for TENSOR_FP8, which has no scales. */
#include <sys/mman.h>
Test(gemm_ops, pack_weight_block_fp8_partial_k_and_packed_bytes_without_scales) {
  const int64_t n = 200, k = 300, rows = 2, cols = 3; /* ceil(200/128), ceil(300/128) */
  const long page = sysconf(_SC_PAGESIZE);
  const size_t raw = (size_t)(rows * cols) * sizeof(float);
  uint8_t *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(map, MAP_FAILED);
  cr_assert_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
  float *scales = (float *)(map + page - raw);
  for (int64_t i = 0; i < rows * cols; i++) scales[i] = 0.5f + (float)i;
  uint8_t *codes = malloc((size_t)(n * k));
  for (int64_t i = 0; i < n * k; i++) codes[i] = (uint8_t)(i * 7 + 1);
  size_t cb = 0, sb = 0;
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_BLOCK_FP8, n, k, &cb, &sb), SK_OK, "%s", sk_last_error_message());
  const int64_t kp = sk_gemm_padded_k(k);
  cr_assert_eq(kp, 384);
  cr_assert_eq(cb, (size_t)(n * kp));
  cr_assert_eq(sb, raw, "the packed scales keep ceil(k/128) = kp/128 columns");
  uint8_t *pc = malloc(cb);
  float *ps = malloc(sb);
  cr_assert_eq(sk_gemm_pack_weight(SK_GEMM_BLOCK_FP8, n, k, codes, scales, pc, ps), SK_OK, "%s", sk_last_error_message());
  for (int64_t i = 0; i < rows * cols; i++) cr_assert_eq(ps[i], scales[i], "scale %lld", (long long)i);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < kp; c++)
      cr_assert_eq(pc[r * kp + c], c < k ? codes[r * k + c] : 0, "code [%lld, %lld]", (long long)r, (long long)c);
  free(codes);
  free(pc);
  free(ps);
  munmap(map, 2 * (size_t)page);

  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, n, k, &cb, NULL), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(cb, (size_t)(n * kp));
  sb = 7;
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, n, k, &cb, &sb), SK_OK);
  cr_assert_eq(sb, 0);
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_MXFP8, n, 320, &cb, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_packed_bytes(SK_GEMM_TENSOR_FP8, n, k, NULL, &sb), SK_ERR_INVALID_ARGUMENT);
}
