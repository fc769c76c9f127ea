/* ops/comm/codec.h - the portable C reference of comm.pcie's wire codecs (one 128-value block at
 * a time). Its arithmetic is ops/comm/codec.cuh's, which the kernels include too, so the device
 * codes and decoded values equal these bit for bit. Rules: codec.cuh's header and comm.md. */
#ifndef SK_COMM_CODEC_H
#define SK_COMM_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "sparkinfer/comm.h"

/* Bytes one 128-value block takes on the wire: 256 for BF16, 132 for the others; 0 for an
 * unknown codec. */
size_t sk_codec_block_bytes(sk_comm_codec codec);

/* Encode x[0..127] into out[0..block_bytes): the 128 codes (BF16: 128 little-endian bf16), then
 * for E4M3 / INT8 the fp32 scale (little-endian), for MXFP8 the 4 E8M0 bytes of values 0-31,
 * 32-63, 64-95, 96-127. Returns SK_ERR_INVALID_ARGUMENT for NULL or an unknown codec. */
sk_status sk_codec_encode_block(sk_comm_codec codec, const float *x, uint8_t *out);

/* Decode one block into y[0..127] (fp32, exact as codec.cuh defines it). */
sk_status sk_codec_decode_block(sk_comm_codec codec, const uint8_t *in, float *y);

#endif
