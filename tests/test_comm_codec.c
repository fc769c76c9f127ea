/* comm.pcie wire codecs (ops/comm/codec.cuh, codec.c): the scalar conversions against the
 * independent references of ops/common/ref_formats.c (themselves checked against code-table
 * searches), and each block codec's rules: error bounds on random blocks of many magnitudes,
 * zero / tiny / subnormal / NaN / Inf blocks, the largest magnitudes, and the byte layout. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "comm/codec.cuh"
#include "comm/codec.h"
#include "common/ref.h"

static uint64_t rng_state = 0x1234567ull;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* Uniform in [-1, 1) times 2^e. */
static float rnd_val(int e) { return ldexpf((float)((double)(rnd() >> 11) * 0x1p-52 - 1.0), e); }

static const sk_comm_codec codecs[] = {SK_COMM_CODEC_BF16, SK_COMM_CODEC_E4M3, SK_COMM_CODEC_INT8, SK_COMM_CODEC_MXFP8};

Test(comm_codec, e4m3_matches_reference_encoder) {
  int bad = 0;
  for (uint64_t i = 0; i < (1u << 22); i++) {
    /* random bit patterns, and every pattern near the E4M3 range's exponents */
    uint32_t bits = i < (1u << 21) ? (uint32_t)rnd() : (uint32_t)((rnd() & 0x807FFFFFu) | ((uint32_t)(110 + i % 40) << 23));
    float f = skref_f32_from_bits(bits);
    uint8_t want = skref_e4m3_encode(f), got = sk_codec_e4m3_rn(f);
    if (want != got && bad++ < 8) cr_log_error("e4m3(%a bits %08x): got %02x want %02x", f, bits, got, want);
  }
  cr_expect_eq(bad, 0, "%d mismatches", bad);
  for (int c = 0; c < 256; c++) {
    double want = skref_e4m3_decode((uint8_t)c);
    float got = sk_codec_e4m3_to_f32((uint8_t)c);
    if (isnan(want)) cr_expect(isnan(got), "code %02x", c);
    else cr_expect(got == want && !signbit(got) == !signbit(want), "code %02x: %a vs %a", c, got, want);
  }
}

Test(comm_codec, bf16_and_e8m0_match_references) {
  for (int i = 0; i < (1 << 20); i++) {
    float f = skref_f32_from_bits((uint32_t)rnd());
    cr_assert_eq(sk_codec_bf16_rn(f), skref_float_to_bf16(f), "bf16(%a)", f);
    float s = fabsf(f);
    if (!isnan(s)) cr_assert_eq(sk_codec_e8m0_ceil(s), skref_e8m0_ceil_pow2(s), "e8m0(%a)", s);
  }
  for (int c = 0; c < 256; c++) {
    cr_assert_eq(skref_f32_bits(sk_codec_e8m0_reciprocal((uint8_t)c)), skref_f32_bits(skref_e8m0_reciprocal((uint8_t)c)));
    if (c != 255) cr_assert_eq((double)sk_codec_e8m0_to_f32((uint8_t)c), skref_e8m0_decode((uint8_t)c));
  }
  for (float y = -130.0f; y <= 130.0f; y += 0.25f) cr_assert_eq(sk_codec_rint(y), (int)rintf(y), "rint(%g)", y);
}

/* Every decoded value within the codec's rounding of x, given the block's decoded scale. */
static void check_block(sk_comm_codec codec, const float *x, const char *what) {
  uint8_t wire[256];
  float y[128];
  cr_assert_eq(sk_codec_encode_block(codec, x, wire), SK_OK);
  cr_assert_eq(sk_codec_decode_block(codec, wire, y), SK_OK);
  double amax = 0;
  for (int i = 0; i < 128; i++) amax = fmax(amax, fabs(x[i]));
  for (int i = 0; i < 128; i++) {
    double err = fabs((double)y[i] - x[i]), bound;
    switch (codec) {
    case SK_COMM_CODEC_BF16: bound = fabs(x[i]) * 0x1p-8 + 0x1p-133; break;
    case SK_COMM_CODEC_E4M3:
      if (amax < 0x1p-64) { bound = 0x1p-64; break; }
      bound = fabs(x[i]) * (0x1p-4 + 1e-6) + amax / 448 * 0x1p-10 * (1 + 1e-6);
      break;
    case SK_COMM_CODEC_INT8:
      if (amax < 0x1p-64) { bound = 0x1p-64; break; }
      bound = amax / 127 * 0.5 * (1 + 1e-5) + fabs(x[i]) * 1e-6;
      break;
    default: {
      double gmax = 0;
      for (int j = i & ~31; j < (i & ~31) + 32; j++) gmax = fmax(gmax, fabs(x[j]));
      bound = fabs(x[i]) * 0x1p-4 + gmax / 448 * 2 * 0x1p-10 + 0x1p-136;
    }
    }
    cr_assert(err <= bound, "%s codec %d value %d: x %a decoded %a (err %g > %g)", what, (int)codec, i, x[i], y[i], err, bound);
  }
}

Test(comm_codec, random_blocks_within_bounds) {
  float x[128];
  for (int rep = 0; rep < 4000; rep++) {
    int e = (int)(rnd() % 200) - 100, mode = rep % 4;
    for (int i = 0; i < 128; i++) {
      x[i] = rnd_val(e);
      if (mode == 1) x[i] = ldexpf(x[i], (int)(rnd() % 40) - 20); /* a wide spread inside the block */
      if (mode == 2 && i % 7 == 0) x[i] = 0.0f;
      if (mode == 3) x[i] = skref_bf16_to_float(skref_float_to_bf16(x[i])); /* bf16 inputs */
    }
    for (int c = 0; c < 4; c++) check_block(codecs[c], x, "random");
  }
}

Test(comm_codec, largest_magnitudes_stay_finite) {
  float x[128];
  for (int c = 0; c < 4; c++) {
    /* BF16 inputs top out at 0x7F7F (FLT_MAX itself rounds to Inf in bf16, as it should) */
    /* MXFP8's range ends at 2^127 * 1.875 (larger values round to 2^128 = Inf: the format's
     * limit, documented); E4M3 / INT8 carry FLT_MAX itself */
    const float big = codecs[c] == SK_COMM_CODEC_BF16    ? skref_bf16_to_float(0x7F7F)
                      : codecs[c] == SK_COMM_CODEC_MXFP8 ? 0x1.ep127f
                                                        : FLT_MAX;
    for (int i = 0; i < 128; i++) x[i] = (i & 1 ? -big : big) * (i < 64 ? 1.0f : 0.5f);
    uint8_t wire[256];
    float y[128];
    sk_codec_encode_block(codecs[c], x, wire);
    sk_codec_decode_block(codecs[c], wire, y);
    for (int i = 0; i < 128; i++) cr_assert(isfinite(y[i]), "codec %d value %d: %a decodes to %a", (int)codecs[c], i, x[i], y[i]);
    check_block(codecs[c], x, "max");
  }
  x[0] = FLT_MAX;
  uint8_t wire[256];
  float y[128];
  sk_codec_encode_block(SK_COMM_CODEC_MXFP8, x, wire);
  sk_codec_decode_block(SK_COMM_CODEC_MXFP8, wire, y);
  cr_assert(y[0] == INFINITY, "MXFP8 FLT_MAX: %a", y[0]);
}

Test(comm_codec, special_blocks) {
  float x[128], y[128];
  uint8_t wire[256];
  for (int c = 1; c < 4; c++) {
    /* zeros (signed too): every code 0, decodes to +0 */
    for (int i = 0; i < 128; i++) x[i] = i & 1 ? -0.0f : 0.0f;
    sk_codec_encode_block(codecs[c], x, wire);
    sk_codec_decode_block(codecs[c], wire, y);
    for (int i = 0; i < 128; i++) {
      if (codecs[c] != SK_COMM_CODEC_MXFP8) cr_assert_eq(wire[i], 0, "codec %d zero block code %d", c, i);
      cr_assert(y[i] == 0.0f, "codec %d zero block", c);
    }
    /* fp32 subnormals and values below 2^-64: encoded as zeros by the scaled codecs */
    for (int i = 0; i < 128; i++) x[i] = skref_f32_from_bits((uint32_t)(rnd() & 0x807FFFFFu));
    check_block(codecs[c], x, "subnormal");
    for (int i = 0; i < 128; i++) x[i] = rnd_val(-70);
    check_block(codecs[c], x, "tiny");
    /* one NaN or Inf: the block (MXFP8: its 32-group) decodes to NaN, the codes are 0 */
    for (int poison = 0; poison < 3; poison++) {
      for (int i = 0; i < 128; i++) x[i] = rnd_val(0);
      x[37] = poison == 0 ? NAN : poison == 1 ? INFINITY : -INFINITY;
      sk_codec_encode_block(codecs[c], x, wire);
      sk_codec_decode_block(codecs[c], wire, y);
      for (int i = 0; i < 128; i++) {
        int poisoned = codecs[c] == SK_COMM_CODEC_MXFP8 ? i / 32 == 1 : 1;
        cr_assert_eq(isnan(y[i]) != 0, poisoned, "codec %d poison %d value %d: %a", c, poison, i, y[i]);
        if (poisoned) cr_assert_eq(wire[i], 0);
      }
    }
  }
  /* BF16 passes NaN (canonical 0x7FFF) and Inf through */
  for (int i = 0; i < 128; i++) x[i] = i == 3 ? NAN : i == 4 ? -INFINITY : rnd_val(3);
  sk_codec_encode_block(SK_COMM_CODEC_BF16, x, wire);
  sk_codec_decode_block(SK_COMM_CODEC_BF16, wire, y);
  cr_assert(isnan(y[3]) && y[4] == -INFINITY && wire[6] == 0xFF && wire[7] == 0x7F);
}

/* The layout: codes first, then the scale bytes (fp32 little-endian; MX: one E8M0 per 32). */
Test(comm_codec, byte_layout) {
  float x[128];
  uint8_t wire[256];
  for (int i = 0; i < 128; i++) x[i] = (float)(i - 64) / 64.0f * 448.0f; /* amax 448: scale 1 */
  x[0] = -448.0f;
  cr_assert_eq(sk_codec_block_bytes(SK_COMM_CODEC_E4M3), 132);
  cr_assert_eq(sk_codec_block_bytes(SK_COMM_CODEC_BF16), 256);
  cr_assert_eq(sk_codec_block_bytes((sk_comm_codec)9), 0);
  sk_codec_encode_block(SK_COMM_CODEC_E4M3, x, wire);
  cr_assert_eq(wire[0], 0xFE);                   /* -448 */
  cr_assert_eq(wire[64], 0x00);                  /* 0 */
  cr_assert(!memcmp(wire + 128, "\x00\x00\x80\x3f", 4)); /* 1.0f */
  sk_codec_encode_block(SK_COMM_CODEC_INT8, x, wire);
  cr_assert_eq((int8_t)wire[0], -127);
  cr_assert_eq((int8_t)wire[96], 64);            /* 224 * 127/448 = 63.5 -> 64 (even) */
  sk_codec_encode_block(SK_COMM_CODEC_MXFP8, x, wire);
  cr_assert_eq(wire[128], 127 + 0);              /* group 0: amax 448 -> 2^0 */
  cr_assert_eq(wire[0], 0xFE);
  cr_assert_eq(sk_codec_encode_block((sk_comm_codec)9, x, wire), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_codec_encode_block(SK_COMM_CODEC_E4M3, NULL, wire), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_codec_decode_block(SK_COMM_CODEC_E4M3, wire, NULL), SK_ERR_INVALID_ARGUMENT);
}
