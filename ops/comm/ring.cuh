// comm.pcie copy-engine ring all-reduce: the SM side. Data moves by copy-engine copies that the
// host enqueues (cuMemcpyAsync into the peers' IPC-mapped receive slots); these kernels only
// publish and wait on monotonic flags and reduce / encode / decode. Each rank's program (which
// kernel, which slot, which chunk) is built on the host by ring_plan.c and is the same for every
// call of a shape, so a captured graph replays without patching: the collective's sequence
// number comes from ring_seq in device memory (layout.cuh), bumped by ring_end.
//
// Launch contract:
//   ring_signal, ring_end: grid (1), block (32)
//   ring_add, ring_store<C>, ring_encode<C>, ring_hop<C>, ring_accum<C>: grid (G), block
//     (SK_COMM_THREADS = 256); a warp handles one 128-value block (bf16 kernels: 16-byte chunks)
//   args as in each kernel's signature; pointers are device addresses (receive slots through
//   the IPC mappings); `values` is the bf16 value count (a multiple of 128 for coded kernels, of
//   8 for ring_add and ring_store<0>). A wait that times out records (1, peer) in the error word
//   and ends the kernel; every later kernel sees the error word and returns at once.
// Codecs C: 0 BF16, 1 E4M3, 2 INT8, 3 MXFP8 (sk_comm_codec), coded blocks of 132 bytes laid out
// as codec.cuh / codec.c define, so the device codes equal the C reference's bit for bit.
#pragma once
#include "comm/oneshot.cuh"

namespace sk_comm {

SK_DEVICE u32* ring_flags(unsigned long long base) { return (u32*)(base + SK_COMM_RING_FLAGS_OFFSET); }
SK_DEVICE u32 ring_next_seq(unsigned long long own) {
  return *(volatile const u32*)(own + SK_COMM_RING_SEQ_OFFSET) + 1u;
}
SK_DEVICE bool ring_failed(unsigned long long own) { return *(volatile const u32*)(own + SK_COMM_ERROR_OFFSET) != 0u; }

// Block-wide bounded wait: thread t < 8 with bit t of `mask` waits until this rank's
// ring flags[slot][t] >= seq. False (every thread) after a timeout, recorded in the error word,
// or when an earlier kernel already recorded one.
SK_DEVICE bool ring_wait(unsigned long long own, u32 mask, int slot, u32 seq, u64 timeout_ns) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = ring_failed(own) ? 1 : 0;
  __syncthreads();
  if (failed) return false;
  const int t = threadIdx.x;
  if (t < SK_COMM_LAYOUT_MAX_RANKS && (mask >> t & 1u)) {
    const u32* f = ring_flags(own) + slot * SK_COMM_LAYOUT_MAX_RANKS + t;
    if (!wait_flag(f, seq, timeout_ns, own, (u32)t, 128)) failed = 1;
  }
  __syncthreads();
  return !failed;
}

// flags[slot][rank] = this collective's sequence number in rank `target`'s buffer. The copy it
// announces was enqueued before this kernel on the same stream, so it has completed.
__global__ void __launch_bounds__(32) ring_signal(unsigned long long own, int target, int slot, int rank) {
  sk::pdl_enter();
  if (threadIdx.x != 0) return;
  const u32 seq = ring_next_seq(own);
  const unsigned long long peer = ((const unsigned long long*)(own + SK_COMM_PEERS_OFFSET))[target];
  __threadfence_system();
  store_release_sys(ring_flags(peer) + slot * SK_COMM_LAYOUT_MAX_RANKS + rank, seq);
}

// Optionally wait for flags[wait_slot][wait_src] (the end handshake), then count the collective.
__global__ void __launch_bounds__(32) ring_end(unsigned long long own, unsigned long long timeout_ns, int wait_slot,
                                               int wait_src) {
  sk::pdl_enter();
  const u32 seq = ring_next_seq(own);
  if (wait_src >= 0 && !ring_wait(own, 1u << wait_src, wait_slot, seq, timeout_ns)) return;
  if (threadIdx.x == 0) *(volatile u32*)(own + SK_COMM_RING_SEQ_OFFSET) = seq;
}

// ---- one 128-value block per warp: lane l holds values 4l .. 4l+3 -------------------------------

SK_DEVICE void bf16x4_load(const unsigned short* blk, float (&v)[4]) {
  const uint2 u = __ldcg((const uint2*)blk + (threadIdx.x & 31));
  v[0] = sk_codec_bf16_to_f32((unsigned short)(u.x & 0xFFFFu)), v[1] = sk_codec_bf16_to_f32((unsigned short)(u.x >> 16));
  v[2] = sk_codec_bf16_to_f32((unsigned short)(u.y & 0xFFFFu)), v[3] = sk_codec_bf16_to_f32((unsigned short)(u.y >> 16));
}
SK_DEVICE void bf16x4_store(unsigned short* blk, const float (&v)[4]) {
  uint2 u;
  u.x = (u32)sk_codec_bf16_rn(v[0]) | (u32)sk_codec_bf16_rn(v[1]) << 16;
  u.y = (u32)sk_codec_bf16_rn(v[2]) | (u32)sk_codec_bf16_rn(v[3]) << 16;
  ((uint2*)blk)[threadIdx.x & 31] = u;
}

// Decode one coded block (C = 1..3; the codes, then the scale bytes).
template <int C>
SK_DEVICE void block_decode(const unsigned char* blk, float (&v)[4]) {
  const int lane = threadIdx.x & 31;
  const u32 codes = __ldcg((const unsigned*)blk + lane), scales = __ldcg((const unsigned*)(blk + SK_CODEC_BLOCK));
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const unsigned char q = (unsigned char)(codes >> (8 * j));
    if (C == 1) v[j] = sk_codec_e4m3_value(q, sk_codec_float(scales));
    else if (C == 2) v[j] = sk_codec_int8_value((signed char)q, sk_codec_float(scales));
    else v[j] = sk_codec_mx_value(q, (unsigned char)(scales >> (8 * (lane >> 3))));
  }
}

// Encode one block: amax is an integer max of |x| bits over the block (E4M3 / INT8) or over each
// 32-value group of 8 lanes (MXFP8): exact, so it equals codec.c's sequential max.
template <int C>
SK_DEVICE void block_encode(unsigned char* blk, const float (&v)[4]) {
  const int lane = threadIdx.x & 31;
  u32 a = 0;
#pragma unroll
  for (int j = 0; j < 4; j++) a = max(a, sk_codec_bits(v[j]) & 0x7FFFFFFFu);
  u32 codes = 0;
  if (C == 3) {
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    const unsigned char s = sk_codec_mx_scale(a);
#pragma unroll
    for (int j = 0; j < 4; j++) codes |= (u32)sk_codec_mx_code(v[j], s) << (8 * j);
    if ((lane & 7) == 0) blk[SK_CODEC_BLOCK + (lane >> 3)] = s;
  } else {
    a = __reduce_max_sync(0xFFFFFFFFu, a);
    float inv;
    int zero;
    const float scale = sk_codec_block_scale(a, C == 1 ? 448.0f : 127.0f, &inv, &zero);
#pragma unroll
    for (int j = 0; j < 4; j++)
      codes |= (u32)(C == 1 ? sk_codec_e4m3_code(v[j], inv, zero) : (unsigned char)sk_codec_int8_code(v[j], inv, zero)) << (8 * j);
    if (lane == 0) *(unsigned*)(blk + SK_CODEC_BLOCK) = sk_codec_bits(scale);
  }
  ((unsigned*)blk)[lane] = codes;
}

// Warps of the grid, and this warp's index among them.
#define SK_RING_WARPS ((unsigned long long)gridDim.x * (SK_COMM_THREADS / 32))
#define SK_RING_WARP ((unsigned long long)blockIdx.x * (SK_COMM_THREADS / 32) + (threadIdx.x >> 5))

// BF16 reduce-scatter hop: wait for the slot, dst = bf16(a + src) per value.
__global__ void __launch_bounds__(SK_COMM_THREADS) ring_add(unsigned long long own, unsigned long long timeout_ns, int wait_slot,
                                                            int wait_src, const uint4* a, const uint4* src, uint4* dst,
                                                            unsigned long long values) {
  sk::pdl_enter();
  if (!ring_wait(own, 1u << wait_src, wait_slot, ring_next_seq(own), timeout_ns)) return;
  const unsigned long long chunks = values / 8, stride = (unsigned long long)gridDim.x * SK_COMM_THREADS;
  for (unsigned long long i = (unsigned long long)blockIdx.x * SK_COMM_THREADS + threadIdx.x; i < chunks; i += stride) {
    float x[8], y[8];
    unpack8(a[i], x);
    unpack8(__ldcg(src + i), y);
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] = __fadd_rn(x[j], y[j]);
    dst[i] = pack8(x);
  }
}

// All-gather hop: wait for the slot, dst = bf16(decode(src)).
template <int C>
__global__ void __launch_bounds__(SK_COMM_THREADS) ring_store(unsigned long long own, unsigned long long timeout_ns, int wait_slot,
                                                              int wait_src, const unsigned char* src, unsigned short* dst,
                                                              unsigned long long values) {
  sk::pdl_enter();
  if (!ring_wait(own, 1u << wait_src, wait_slot, ring_next_seq(own), timeout_ns)) return;
  if (C == 0) {  // bf16 rounded again: the identity but for NaN payloads, as the C reference
    const unsigned long long chunks = values / 8, stride = (unsigned long long)gridDim.x * SK_COMM_THREADS;
    for (unsigned long long i = (unsigned long long)blockIdx.x * SK_COMM_THREADS + threadIdx.x; i < chunks; i += stride) {
      float x[8];
      unpack8(__ldcg((const uint4*)src + i), x);
      ((uint4*)dst)[i] = pack8(x);
    }
    return;
  }
  for (unsigned long long b = SK_RING_WARP; b < values / SK_CODEC_BLOCK; b += SK_RING_WARPS) {
    float v[4];
    block_decode<C>(src + b * SK_CODEC_CODED_BYTES, v);
    bf16x4_store(dst + b * SK_CODEC_BLOCK, v);
  }
}

// Encode v into blk; with out2, store bf16(decode(blk)) there too: what every rank ends with,
// the encoding rank included (rank-identical results).
template <int C>
__device__ __forceinline__ void encode_keep(unsigned char* blk, float (&v)[4], unsigned short* out2) {
  block_encode<C>(blk, v);
  if (out2) {
    __syncwarp();
    block_decode<C>(blk, v);
    bf16x4_store(out2, v);
  }
}

// dst = encode(src); out2 (may be NULL, may alias src) = bf16(decode(dst)). No wait.
template <int C>
__global__ void __launch_bounds__(SK_COMM_THREADS) ring_encode(const unsigned short* src, unsigned char* dst, unsigned short* out2,
                                                               unsigned long long values) {
  sk::pdl_enter();
  for (unsigned long long b = SK_RING_WARP; b < values / SK_CODEC_BLOCK; b += SK_RING_WARPS) {
    float v[4];
    bf16x4_load(src + b * SK_CODEC_BLOCK, v);
    encode_keep<C>(dst + b * SK_CODEC_CODED_BYTES, v, out2 ? out2 + b * SK_CODEC_BLOCK : nullptr);
  }
}

// Coded reduce-scatter hop: wait for the slot, dst = encode(decode(src) + a); out2 as above.
template <int C>
__global__ void __launch_bounds__(SK_COMM_THREADS) ring_hop(unsigned long long own, unsigned long long timeout_ns, int wait_slot,
                                                            int wait_src, const unsigned char* src, const unsigned short* a,
                                                            unsigned char* dst, unsigned short* out2, unsigned long long values) {
  sk::pdl_enter();
  if (!ring_wait(own, 1u << wait_src, wait_slot, ring_next_seq(own), timeout_ns)) return;
  for (unsigned long long b = SK_RING_WARP; b < values / SK_CODEC_BLOCK; b += SK_RING_WARPS) {
    float v[4], x[4];
    block_decode<C>(src + b * SK_CODEC_CODED_BYTES, v);
    bf16x4_load(a + b * SK_CODEC_BLOCK, x);
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = __fadd_rn(v[j], x[j]);
    encode_keep<C>(dst + b * SK_CODEC_CODED_BYTES, v, out2 ? out2 + b * SK_CODEC_BLOCK : nullptr);
  }
}

// a2a owner: wait for every peer's contribution, sum the decoded contributions in rank order
// 0..world-1 in fp32 (rank q's at src + q * stride; this rank's own at `mine`), dst = encode(sum),
// out2 = bf16(decode(dst)).
template <int C>
__global__ void __launch_bounds__(SK_COMM_THREADS) ring_accum(unsigned long long own, unsigned long long timeout_ns, int rank,
                                                              int world, int wait_slot, const unsigned char* src,
                                                              unsigned long long stride, const unsigned char* mine,
                                                              unsigned char* dst, unsigned short* out2, unsigned long long values) {
  sk::pdl_enter();
  const u32 mask = ((1u << world) - 1u) & ~(1u << rank);
  if (!ring_wait(own, mask, wait_slot, ring_next_seq(own), timeout_ns)) return;
  for (unsigned long long b = SK_RING_WARP; b < values / SK_CODEC_BLOCK; b += SK_RING_WARPS) {
    float v[4], x[4];
    for (int q = 0; q < world; q++) {
      block_decode<C>((q == rank ? mine : src + q * stride) + b * SK_CODEC_CODED_BYTES, x);
#pragma unroll
      for (int j = 0; j < 4; j++) v[j] = q == 0 ? x[j] : __fadd_rn(v[j], x[j]);
    }
    encode_keep<C>(dst + b * SK_CODEC_CODED_BYTES, v, out2 + b * SK_CODEC_BLOCK);
  }
}

#undef SK_RING_WARPS
#undef SK_RING_WARP

}  // namespace sk_comm
