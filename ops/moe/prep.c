/* ops/moe/prep.c - MoE expert weight preparation (see prep.h and ops/moe/moe.md "Weights"). */
#include "moe/prep.h"

#include <string.h>

#include "base.h"
#include "moe/plan.cuh"

static int fmt_ok(int wfmt) { return wfmt == SK_MOE_WFMT_NVFP4 || wfmt == SK_MOE_WFMT_MXFP4; }
static int act_ok(int act) { return act >= SK_MOE_ACT_SILU && act <= SK_MOE_ACT_SWIGLU_OAI; }
static uint8_t one_code(int wfmt) { return wfmt == SK_MOE_WFMT_NVFP4 ? 0x38 : 127; }

/* The shared argument checks, with a message naming the function and the argument. */
static sk_status check_dims(const char *who, int wfmt, int act, int64_t n, int64_t k) {
  if (!fmt_ok(wfmt)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: weights = %d is not SK_MOE_WEIGHTS_NVFP4 or _MXFP4", who, wfmt);
  if (!act_ok(act)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: unknown activation %d", who, act);
  const int vec = sk_moe_scale_vec(wfmt);
  if (n < vec || n % vec || n > (1 << 20))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: n = %lld must be a positive multiple of %d, at most 2^20", who, (long long)n, vec);
  if (k < 32 || k % 32 || k > (1 << 20))
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: k = %lld must be a positive multiple of 32, at most 2^20", who, (long long)k);
  return SK_OK;
}
static sk_status check_layouts(const char *who, int order, int src) {
  if (order < SK_MOE_W1_UP_GATE || order > SK_MOE_W1_INTERLEAVED)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: unknown W1 order %d", who, order);
  if (src != SK_MOE_SRC_SCALES_SWIZZLED && src != SK_MOE_SRC_SCALES_ROWS)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: unknown source scale layout %d", who, src);
  return SK_OK;
}

sk_status sk_moe_prepared_sizes_of(int wfmt, int act, int64_t n, int64_t k, sk_moe_prepared_sizes *out) {
  if (!out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_moe_prepared_sizes_of: out is NULL");
  SK_TRY(check_dims("sk_moe_prepared_sizes_of", wfmt, act, n, k));
  const long long np = sk_moe_padded(n), kp = sk_moe_padded(k);
  out->w1_codes = (size_t)sk_moe_w1_code_bytes(act, np, kp);
  out->w1_scales = (size_t)sk_moe_w1_scale_bytes(act, wfmt, np, kp);
  out->w2_codes = (size_t)sk_moe_w2_code_bytes(k, np);
  out->w2_scales = (size_t)sk_moe_w2_scale_bytes(wfmt, k, np);
  return SK_OK;
}

/* Scale byte of (row, col) of a [rows, cols] source in layout `src`. */
static uint8_t src_scale(const uint8_t *s, int src, int64_t row, int64_t col, int64_t cols) {
  return src == SK_MOE_SRC_SCALES_ROWS ? s[row * cols + col] : s[sk_moe_swizzled_offset(row, col, cols)];
}

/* Bytes per expert of a [rows, cols] source scale tensor in layout `src`. */
static int64_t src_scale_bytes(int src, int64_t rows, int64_t cols) {
  return src == SK_MOE_SRC_SCALES_ROWS ? rows * cols : sk_moe_swizzled_bytes(rows, cols);
}

/* Expert x's prepared buffers, cleared to zero codes and 1.0 scales. */
static void clear_expert(int wfmt, int64_t x, size_t code_bytes, size_t scale_bytes, uint8_t *codes, uint8_t *scales,
                         uint8_t **dc, uint8_t **ds) {
  *dc = codes + (size_t)x * code_bytes, *ds = scales + (size_t)x * scale_bytes;
  memset(*dc, 0, code_bytes);
  memset(*ds, one_code(wfmt), scale_bytes);
}

/* MXFP4 codes the W4A16 kernels dequantize exactly (moe.md): 2^-117 .. 2^9. */
static int ue8m0_ok(uint8_t c) { return c >= 10 && c <= 136; }

/* Copy source row `srow` (k codes, kc scale columns) to prepared row `drow` (kp, kpc) of expert x. */
static sk_status copy_row(const char *who, int wfmt, int src, const uint8_t *codes, const uint8_t *scales, int64_t x, int64_t srow,
                          int64_t k, uint8_t *dcodes, uint8_t *dscales, int64_t drow, int64_t kp) {
  const int vec = sk_moe_scale_vec(wfmt);
  const int64_t kc = k / vec, kpc = kp / vec;
  memcpy(dcodes + drow * (kp / 2), codes + srow * (k / 2), (size_t)(k / 2));
  for (int64_t c = 0; c < kc; c++) {
    const uint8_t v = src_scale(scales, src, srow, c, kc);
    if (wfmt == SK_MOE_WFMT_MXFP4 && !ue8m0_ok(v))
      return sk_set_error(SK_ERR_UNSUPPORTED,
                          "%s: expert %lld row %lld block %lld: UE8M0 scale code %u is outside [10, 136] (2^-117 .. 2^9, "
                          "what the W4A16 kernels dequantize exactly)", who, (long long)x, (long long)srow, (long long)c, v);
    dscales[sk_moe_swizzled_offset(drow, c, kpc)] = v;
  }
  return SK_OK;
}

sk_status sk_moe_prepare_w1(int wfmt, int act, int order, int src_scales, int64_t e, int64_t n, int64_t k,
                            const uint8_t *codes, const uint8_t *scales, uint8_t *out_codes, uint8_t *out_scales) {
  static const char who[] = "sk_moe_prepare_w1";
  sk_moe_prepared_sizes sz;
  SK_TRY(check_dims(who, wfmt, act, n, k));
  SK_TRY(check_layouts(who, order, src_scales));
  if (e < 1 || !codes || !scales || !out_codes || !out_scales)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: e = %lld must be >= 1 and no buffer NULL", who, (long long)e);
  SK_TRY(sk_moe_prepared_sizes_of(wfmt, act, n, k, &sz));
  const int64_t np = sk_moe_padded(n), kp = sk_moe_padded(k), rows = sk_moe_gated(act) ? 2 * n : n;
  const int64_t ssb = src_scale_bytes(src_scales, rows, k / sk_moe_scale_vec(wfmt));
  for (int64_t x = 0; x < e; x++) {
    uint8_t *dc, *ds;
    clear_expert(wfmt, x, sz.w1_codes, sz.w1_scales, out_codes, out_scales, &dc, &ds);
    const uint8_t *sc = codes + x * rows * (k / 2), *ss = scales + x * ssb;
    for (int half = 0; half < (sk_moe_gated(act) ? 2 : 1); half++)
      for (int64_t i = 0; i < n; i++) {
        SK_TRY(copy_row(who, wfmt, src_scales, sc, ss, x, sk_moe_w1_source_row(order, act, half, i, n), k, dc, ds,
                        sk_moe_w1_row(half, i, np), kp));
      }
  }
  return SK_OK;
}

sk_status sk_moe_prepare_w2(int wfmt, int src_scales, int64_t e, int64_t n, int64_t k, const uint8_t *codes,
                            const uint8_t *scales, uint8_t *out_codes, uint8_t *out_scales) {
  static const char who[] = "sk_moe_prepare_w2";
  sk_moe_prepared_sizes sz;
  SK_TRY(check_dims(who, wfmt, SK_MOE_ACT_SILU, n, k));
  SK_TRY(check_layouts(who, SK_MOE_W1_UP_GATE, src_scales));
  if (e < 1 || !codes || !scales || !out_codes || !out_scales)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: e = %lld must be >= 1 and no buffer NULL", who, (long long)e);
  SK_TRY(sk_moe_prepared_sizes_of(wfmt, SK_MOE_ACT_SILU, n, k, &sz));
  const int64_t np = sk_moe_padded(n), ssb = src_scale_bytes(src_scales, k, n / sk_moe_scale_vec(wfmt));
  for (int64_t x = 0; x < e; x++) {
    uint8_t *dc, *ds;
    clear_expert(wfmt, x, sz.w2_codes, sz.w2_scales, out_codes, out_scales, &dc, &ds);
    for (int64_t r = 0; r < k; r++) {
      SK_TRY(copy_row(who, wfmt, src_scales, codes + x * k * (n / 2), scales + x * ssb, x, r, n, dc, ds, r, np));
    }
  }
  return SK_OK;
}

sk_status sk_moe_unprepare_w1(int wfmt, int act, int order, int64_t n, int64_t k, const uint8_t *prep_codes,
                              const uint8_t *prep_scales, uint8_t *codes, uint8_t *scales_rows) {
  static const char who[] = "sk_moe_unprepare_w1";
  SK_TRY(check_dims(who, wfmt, act, n, k));
  SK_TRY(check_layouts(who, order, SK_MOE_SRC_SCALES_ROWS));
  if (!prep_codes || !prep_scales || !codes || !scales_rows)
    return sk_set_error(SK_ERR_INVALID_ARGUMENT, "%s: a buffer is NULL", who);
  const int64_t np = sk_moe_padded(n), kp = sk_moe_padded(k), kc = k / sk_moe_scale_vec(wfmt),
                kpc = kp / sk_moe_scale_vec(wfmt);
  for (int half = 0; half < (sk_moe_gated(act) ? 2 : 1); half++)
    for (int64_t i = 0; i < n; i++) {
      const int64_t s = sk_moe_w1_source_row(order, act, half, i, n), d = sk_moe_w1_row(half, i, np);
      memcpy(codes + s * (k / 2), prep_codes + d * (kp / 2), (size_t)(k / 2));
      for (int64_t c = 0; c < kc; c++) scales_rows[s * kc + c] = prep_scales[sk_moe_swizzled_offset(d, c, kpc)];
    }
  return SK_OK;
}
