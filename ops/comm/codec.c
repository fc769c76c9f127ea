/* ops/comm/codec.c - the C reference of the wire codecs over codec.cuh's shared arithmetic. */
#include "comm/codec.h"

#include <string.h>

#include "base.h"
#include "comm/codec.cuh"

size_t sk_codec_block_bytes(sk_comm_codec codec) {
  switch (codec) {
  case SK_COMM_CODEC_BF16: return 2 * SK_CODEC_BLOCK;
  case SK_COMM_CODEC_E4M3:
  case SK_COMM_CODEC_INT8:
  case SK_COMM_CODEC_MXFP8: return SK_CODEC_CODED_BYTES;
  }
  return 0;
}

/* Largest |x| bits of n values (an integer max over the sign-cleared bits). */
static unsigned amax_bits(const float *x, int n) {
  unsigned m = 0;
  for (int i = 0; i < n; i++) {
    unsigned a = sk_codec_bits(x[i]) & 0x7FFFFFFFu;
    if (a > m) m = a;
  }
  return m;
}

static void put_u32(uint8_t *p, unsigned v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static unsigned get_u32(const uint8_t *p) {
  return (unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
}

sk_status sk_codec_encode_block(sk_comm_codec codec, const float *x, uint8_t *out) {
  if (!x || !out) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_codec_encode_block: NULL argument");
  float inv = 0.0f, scale;
  int zero = 0;
  switch (codec) {
  case SK_COMM_CODEC_BF16:
    for (int i = 0; i < SK_CODEC_BLOCK; i++) {
      unsigned short b = sk_codec_bf16_rn(x[i]);
      out[2 * i] = (uint8_t)b;
      out[2 * i + 1] = (uint8_t)(b >> 8);
    }
    return SK_OK;
  case SK_COMM_CODEC_E4M3:
    scale = sk_codec_block_scale(amax_bits(x, SK_CODEC_BLOCK), 448.0f, &inv, &zero);
    for (int i = 0; i < SK_CODEC_BLOCK; i++) out[i] = sk_codec_e4m3_code(x[i], inv, zero);
    put_u32(out + SK_CODEC_BLOCK, sk_codec_bits(scale));
    return SK_OK;
  case SK_COMM_CODEC_INT8:
    scale = sk_codec_block_scale(amax_bits(x, SK_CODEC_BLOCK), 127.0f, &inv, &zero);
    for (int i = 0; i < SK_CODEC_BLOCK; i++) out[i] = (uint8_t)sk_codec_int8_code(x[i], inv, zero);
    put_u32(out + SK_CODEC_BLOCK, sk_codec_bits(scale));
    return SK_OK;
  case SK_COMM_CODEC_MXFP8:
    for (int g = 0; g < SK_CODEC_BLOCK / SK_CODEC_MX_GROUP; g++) {
      const float *xg = x + g * SK_CODEC_MX_GROUP;
      unsigned char s = sk_codec_mx_scale(amax_bits(xg, SK_CODEC_MX_GROUP));
      for (int i = 0; i < SK_CODEC_MX_GROUP; i++) out[g * SK_CODEC_MX_GROUP + i] = sk_codec_mx_code(xg[i], s);
      out[SK_CODEC_BLOCK + g] = s;
    }
    return SK_OK;
  }
  return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_codec_encode_block: unknown codec %d", (int)codec);
}

sk_status sk_codec_decode_block(sk_comm_codec codec, const uint8_t *in, float *y) {
  if (!in || !y) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_codec_decode_block: NULL argument");
  float scale;
  switch (codec) {
  case SK_COMM_CODEC_BF16:
    for (int i = 0; i < SK_CODEC_BLOCK; i++)
      y[i] = sk_codec_bf16_to_f32((unsigned short)(in[2 * i] | in[2 * i + 1] << 8));
    return SK_OK;
  case SK_COMM_CODEC_E4M3:
    scale = sk_codec_float(get_u32(in + SK_CODEC_BLOCK));
    for (int i = 0; i < SK_CODEC_BLOCK; i++) y[i] = sk_codec_e4m3_value(in[i], scale);
    return SK_OK;
  case SK_COMM_CODEC_INT8:
    scale = sk_codec_float(get_u32(in + SK_CODEC_BLOCK));
    for (int i = 0; i < SK_CODEC_BLOCK; i++) y[i] = sk_codec_int8_value((signed char)in[i], scale);
    return SK_OK;
  case SK_COMM_CODEC_MXFP8:
    for (int i = 0; i < SK_CODEC_BLOCK; i++) y[i] = sk_codec_mx_value(in[i], in[SK_CODEC_BLOCK + i / SK_CODEC_MX_GROUP]);
    return SK_OK;
  }
  return sk_set_error(SK_ERR_INVALID_ARGUMENT, "sk_codec_decode_block: unknown codec %d", (int)codec);
}
