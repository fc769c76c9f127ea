// quantization.nvfp4: BF16/FP16 rows [M, K] -> NVFP4 (packed E2M1 values, one E4M3 scale per
// 16 values, one fp32 global scale). Numerics, layouts and NaN/Inf policy:
// ops/quantization/quantization.md; CPU reference: skref_quantize_nvfp4() in tests/ref/skref.h.
//
// ---- Launch contract -----------------------------------------------------------------------
// Kernels (namespace sk::quant), all with blockDim = (kNvfp4Threads = 256, 1, 1), no dynamic
// shared memory, any stream:
//
//   nvfp4_rows<T, LAYOUT, GS_MODE, CVT>(
//       const T* x, int ld_x, int M, int K,
//       u8* values, u8* scales_swizzled, u8* scales_rows,
//       float* global_scale, const float* amax_partials, int num_partials)
//     T        __nv_bfloat16 | __half
//     LAYOUT   sk::kScalesSwizzled (1) | sk::kScalesRowMajor (2) | sk::kScalesBoth (3)
//     GS_MODE  kGlobalScaleGiven (0): read *global_scale;
//              kGlobalScaleFromPartials (1): gs from amax_partials[0..num_partials), written
//                to *global_scale (needs nvfp4_amax_partials first, same stream);
//              kGlobalScaleInCta (2): one CTA computes the tensor amax, then quantizes; gs
//                written to *global_scale. grid must be (1,1,1). One launch, but one SM:
//                slower than modes 1+0 even at M = 1, so prefer the two launches unless a
//                launch costs more than a one-SM pass over the tensor.
//     CVT      sk::kCvtSoftware (0) | sk::kCvtHardware (1) (cvt.e2m1x2 on sm_100a+/sm_12xa/f,
//              cvt.e4m3x2 on sm_89+, software elsewhere; bit-identical either way)
//     x        [M, ld_x] elements, row m at x + m*ld_x; 16-byte aligned, ld_x % 8 == 0, ld_x >= K
//     M, K     M >= 1, K >= 16, K % 16 == 0, M * K <= 2^34
//     values   [M, K/2] bytes, contiguous, 4-byte aligned; element 2j in the low nibble of byte j
//     scales_swizzled  LAYOUT & 1: sk::swizzled_scale_bytes(M, K/16) bytes, 4-byte aligned;
//                      padding rows/columns are written as 0 by this kernel. Else may be null.
//     scales_rows      LAYOUT & 2: [M, K/16] bytes, contiguous. Else may be null.
//     global_scale     fp32 [1] on the device: input (GS_MODE 0) or output (1, 2)
//     amax_partials, num_partials   GS_MODE 1 only (1 <= num_partials <= kMaxAmaxPartials):
//                      the array written by nvfp4_amax_partials with grid = num_partials.
//                      Ignored (may be null / 0) otherwise.
//     grid     (gx, gy, 1): any gx, gy >= 1 is correct. Work split (quantization/split.cuh):
//              units of 128 rows (a slab) x one k-tile (64 values per row: one 128x4 swizzled
//              scale tile); CTA (bx, by) takes k-tiles bx, bx + gx, ... of slabs by, by + gy, ...;
//              a unit is four 8-value chunks per thread (rows r, r+32, r+64, r+96 of one column),
//              loaded before any arithmetic. The host (quant_rows_grid -> sk_qsplit_grid_y)
//              launches gx = sk_qsplit_k_tiles(K/8, 2) and gy = about the slabs over the units
//              per CTA (8 chunks per thread for nvfp4: 2 units per CTA), at least min(units,
//              4 CTAs per SM) CTAs in all. GS_MODE 2: the grid must be (1, 1, 1) (else the
//              kernel traps).
//   nvfp4_amax_partials<T>(const T* x, int ld_x, int M, int K, float* amax_partials)
//     grid (num_partials, 1, 1) with 1 <= num_partials <= kMaxAmaxPartials, e.g.
//     min(ceil(M*K/8 / 256), 2 * SMs). CTA b writes amax_partials[b] = max |x| over the finite
//     elements it visited (NaN and +-Inf skipped). No initialisation of amax_partials needed
//     (every entry is overwritten), so no memset or zero kernel: "computed global scale" is two
//     launches, amax_partials then nvfp4_rows<..., kGlobalScaleFromPartials, ...>.
//
// No input may alias an output. Each x element is read once (twice with GS_MODE 1 and 2: amax
// pass, then quantize pass). 1 KiB of static shared memory (the eff table below), filled by
// threads 0..127: blockDim must be the 256 above; on sm_90 (GS_MODE 0 and 1) 32 KiB more, the
// two cp.async stage buffers of the loads (see kNvfp4AsyncLoads).
//
// Why this shape (on sm_90a bandwidth-bound at ~2.56 bytes per element, but close to the
// instruction issue limit): each load is a coalesced 16-byte chunk, four per thread in flight
// (a warp reads four whole 128-byte row pieces); a thread's four chunks are the rows of one
// 16-byte piece of the swizzled scale layout, so the unit's scales leave as whole 4-byte words
// after a two-shuffle transpose (512 contiguous bytes per unit, padding included: no byte
// stores, no partial sectors, no padding pass; a 1-byte scatter of the scales makes the kernel
// L2-bound); the E2M1 encoding is the
// exact fast software path of common/e2m1_fast.cuh, and blocks with amax * eff < 7 (all of
// them in ordinary data) take its cheapest form, see nvfp4_quantize_chunk: ~5 instructions per
// value (three fp32 lines, one 3-way integer min, the pack) plus one per 8 values for all
// signs; finite blocks whose scale saturated (outliers with a given gs) take the same with the
// clamp (one more min per value) instead of the per-value general path; the block amax is
// two-at-a-time max.NaN.bf16x2/f16x2 on the raw inputs; 1 / (e4m3(scale) / gs) is looked up in
// a per-CTA table of the 256 scale bytes (no division per block), filled by 128 threads with
// one division each (hardware E4M3 decode, the negative byte by exact negation).
// A thread whose four chunks all exist stores them without per-chunk tests: the kernel is bound by
// the SMs on sm_90, and this saves 14 instructions a unit.
// A full warp does a whole unit at once (nvfp4_quantize_unit_split): the two lanes of a block
// split its per-block work instead of both doing it, and one vote covers the four chunks.
#pragma once
#include "common/defs.cuh"
#include "common/sync.cuh"
#include "common/numeric.cuh"
#include "common/reduce.cuh"
#include "common/scale_layout.cuh"
#include "quantization/chunks.cuh"

namespace sk {
namespace quant {

constexpr int kNvfp4Threads = 256;
constexpr int kMaxAmaxPartials = 1024;
constexpr int kNvfp4Block = 16;

enum GlobalScaleMode : int {
  kGlobalScaleGiven = 0,
  kGlobalScaleFromPartials = 1,
  kGlobalScaleInCta = 2,
};

// Upstream's 1/6: rcp.approx.ftz.f32(6.0) = 0x3E2AAAAB (the correctly rounded value).
constexpr float kNvfp4Rcp6 = 0x1.555556p-3f;

// gs = 448 * 6 / amax over the finite elements; 1 for an all-zero (or all-NaN/Inf) tensor;
// FLT_MAX if the division overflows (bf16 amax below ~7.9e-36).
SK_DEVICE float nvfp4_global_scale_from_amax(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  return min_f32(div_rn(2688.0f, amax), 0x1.fffffep127f);
}

// The factor that maps x to E2M1 units for block scale `scale`, in upstream's operation order:
//   eff = scale == 0 ? 0 : 1 / (e4m3_value(scale) * (1 / gs)).
// It depends only on the scale byte, so each CTA tabulates it once and a block looks it up: no
// division or E4M3 decode per block. Threads 0..127 of the CTA (kNvfp4Threads of them; a
// __syncthreads must follow) each divide once, for the byte s = tid and its negative s | 0x80:
// e4m3(s | 0x80) = -e4m3(s) and mul.rn / div.rn are odd in each operand, so that entry is the
// exact negation (also for s = 0: 1 / (-0 * gsr) = -(1 / (+0 * gsr))). A NaN entry (byte 0x7F /
// 0xFF, or gs NaN) is a NaN either way; which NaN does not matter: eff only enters mul.rn
// (whose NaN result is the canonical one) and comparisons. 1 / gs is computed by these threads
// only, as it feeds nothing else.
template <int CVT>
SK_DEVICE void nvfp4_fill_eff_table(float (&eff_of_scale)[256], float gs) {
  const u32 s = threadIdx.x;
  if (s < 128) {
    const float gs_recip = gs != 0.0f ? div_rn(1.0f, gs) : 0.0f;
    const float d = div_rn(1.0f, mul_rn(e4m3_to_float_cvt<CVT>(u8(s)), gs_recip));
    eff_of_scale[s] = s == 0 ? 0.0f : d;
    eff_of_scale[s | 0x80u] = mul_rn(d, -1.0f);
  }
}

// Reads of the eff table through its shared-memory address, kept in one register: with plain
// array indexing the compiler rebuilt the generic-to-shared window base (S2R, MOV, LEA) for every
// chunk. Volatile loads: they stay after the barrier that publishes the table.
struct EffTable {
  u32 base;
  SK_DEVICE explicit EffTable(const float* table) : base(smem_addr(table)) {
    asm volatile("" : "+r"(base));
  }
  SK_DEVICE float operator[](u32 scale) const {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(base + scale * 4u));
    return v;
  }
};

// The target converts E2M1 in hardware (cvt.e2m1x2); else the software paths below.
template <int CVT>
SK_DEVICE constexpr bool nvfp4_hardware_e2m1() { return CVT == kCvtHardware && SK_HAS_CVT_E2M1X2; }

// The per-block conditions of the software fast and middle paths, on p = amax * eff (see
// nvfp4_quantize_chunk): every q of the block finite with |q| < 7 / finite and sign-clear p.
SK_DEVICE bool nvfp4_fast_block(float p) { return p < 7.0f; }
SK_DEVICE bool nvfp4_middle_block(float p) { return f32_bits(p) <= 0x7F7FFFFFu; }

// Eight values of one block -> eight E2M1 codes (v[i] in bits 4i+3..4i), -0 stored as +0.
// Hardware cvt.e2m1x2 where the target has it, else the exact fast software encoder
// (common/e2m1_fast.cuh); the two are bit-identical (tests/test_quant_emulation.c).
template <int CVT>
SK_DEVICE u32 nvfp4_quantize8(const float (&v)[8], float eff) {
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; i++) q[i] = mul_rn(v[i], eff);
  u32 packed;
  if constexpr (nvfp4_hardware_e2m1<CVT>())
    packed = e2m1x8_clear_negative_zeros(pack_e2m1x8<CVT>(q));
  else
    packed = sk_pack_e2m1x8_fast(q);
  return eff == 0.0f ? 0u : packed;  // zero scale: all codes 0 (NaN/Inf too, as the reference)
}

// Chunk c (8 elements) of the row-major [M, K] view: row c / (K/8). M*K <= 2^34 keeps chunk
// indices below 2^31, so 32-bit division (much cheaper than 64-bit) is exact.
struct ChunkCoord {
  int row, chunk_in_row;
};
SK_DEVICE ChunkCoord chunk_coord(i64 chunk, int chunks_per_row) {
  const u32 c = u32(chunk), cpr = u32(chunks_per_row);
  return {int(c / cpr), int(c % cpr)};
}

template <typename T>
SK_DEVICE uint4 load_chunk(const T* __restrict__ x, int ld_x, ChunkCoord cc) {
  return __ldg(reinterpret_cast<const uint4*>(x + i64(cc.row) * ld_x + cc.chunk_in_row * 8));
}

// max |x| (as bits) over the finite elements of the chunks tid, tid + stride, ...
template <typename T>
SK_DEVICE u32 strided_finite_amax_bits(const T* __restrict__ x, int ld_x, int M, int K, i64 tid,
                                       i64 stride) {
  const int chunks_per_row = K / 8;
  const i64 chunks = i64(M) * chunks_per_row;
  u32 amax = 0;
  for (i64 c = tid; c < chunks; c += stride) {
    float v[8];
    widen8<T>(load_chunk(x, ld_x, chunk_coord(c, chunks_per_row)), v);
#pragma unroll
    for (int i = 0; i < 8; i++) amax = max(amax, magnitude_bits_finite(v[i]));
  }
  return amax;
}

template <typename T>
__global__ void __launch_bounds__(kNvfp4Threads)
    nvfp4_amax_partials(const T* __restrict__ x, int ld_x, int M, int K,
                        float* __restrict__ amax_partials) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  const i64 tid = i64(blockIdx.x) * blockDim.x + threadIdx.x;
  const u32 amax =
      block_max_bits(strided_finite_amax_bits(x, ld_x, M, K, tid, i64(gridDim.x) * blockDim.x));
  if (threadIdx.x == 0) amax_partials[blockIdx.x] = f32_from_bits(amax);
}

// max(|a|, |b|) per 16-bit half (BF16 or FP16 pairs), NaN if either is NaN; the result's sign
// bits are the xor of the inputs' (ignored: every use takes magnitudes again).
template <typename T>
SK_DEVICE u32 absmax2_nan(u32 a, u32 b) {
  u32 d;
  if constexpr (HalfType<T>::kIsBf16)
    asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else
    asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The larger magnitude of the two halves of `m` as fp32; NaN if either is NaN.
template <typename T>
SK_DEVICE float absmax2_to_f32(u32 m) {
  const float lo = HalfType<T>::to_float(u16(m & 0xFFFFu)), hi = HalfType<T>::to_float(u16(m >> 16));
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(fabs_f32(lo)), "f"(fabs_f32(hi)));
  return r;
}

// Block scale byte from the block amax: sf = min(gs * (amax * (1/6)), 448); scale = e4m3(sf);
// 0 when gs == 0. The rule holds (gs, 448), or (+0, +0) when gs == 0: then sf is min(+0 or NaN,
// +0) = +0 for every amax (Inf and NaN included), whose code is 0x00: no mask or branch per block.
struct Nvfp4ScaleRule {
  float gs, cap;
};
SK_DEVICE Nvfp4ScaleRule nvfp4_scale_rule(float gs) {
  return gs != 0.0f ? Nvfp4ScaleRule{gs, 448.0f} : Nvfp4ScaleRule{0.0f, 0.0f};
}
template <int CVT>
SK_DEVICE u32 nvfp4_scale_bits(float amax, Nvfp4ScaleRule rule) {
  return float_to_e4m3_u32<CVT>(min_f32(mul_rn(rule.gs, mul_rn(amax, kNvfp4Rcp6)), rule.cap));
}

// One chunk's result: its eight E2M1 codes and its block's E4M3 scale.
struct Nvfp4Chunk {
  u32 packed, scale;
};

// Codes of a chunk whose q = v * eff all have the sign of their input x or are +-0 (x finite,
// eff finite and >= +0; the caller's warp vote): magnitudes from the fast encoder's lines,
// unclamped when every |q| < 7 (SATURATE false), clamped otherwise, then the eight signs at once
// from the inputs' sign bits (common/e2m1_fast.cuh).
template <bool SATURATE>
SK_DEVICE u32 nvfp4_encode_signed_by_input(const float (&v)[8], const uint4& raw, float eff) {
  float q[8];
#pragma unroll
  for (int i = 0; i < 8; i++) q[i] = mul_rn(v[i], eff);
  const u32 magnitudes = SATURATE ? sk_pack_e2m1x8_magnitudes(q) : sk_pack_e2m1x8_magnitudes_below7(q);
  return sk_e2m1x8_apply_signs(magnitudes, sk_sign_nibbles8(raw.x, raw.y, raw.z, raw.w));
}

// Quantize one chunk (8 values, half of a 16-value block) whose other half is held by the
// adjacent lane (lane ^ 1). All 32 lanes must call it together (full-mask shuffle); chunks that do
// not exist are zeros (their results are not stored).
//
// Software E2M1 (sm_90), three paths chosen per warp. The amax is two-at-a-time on the 16-bit
// inputs (NaN-propagating) and p = amax * eff:
//  * fast, every block p < 7 (false for NaN): magnitudes skip the saturating clamp and the signs
//    come from the inputs' sign bits, eight at a time;
//  * middle, every block p in [+0, FLT_MAX] (as bits: <= 0x7F7FFFFF; amax >= 0, so x finite,
//    eff finite and sign-clear): blocks whose scale saturated at 448 (outliers, a given gs),
//    the same with the clamp;
//  * general, the rest (a NaN or Inf in some block, or a non-finite eff from an extreme gs): the
//    same as the hardware path but for the encoder.
// eff == 0 needs no special case in the first two: x is finite, so every q is +-0 and encodes
// as 0. All are bit-exact to the reference (tests/test_quant_emulation.c).
template <typename T, int CVT>
SK_DEVICE Nvfp4Chunk nvfp4_quantize_chunk(const uint4& raw, Nvfp4ScaleRule rule, const EffTable& eff_of_scale) {
  float v[8];
  widen8<T>(raw, v);
  u32 scale, packed;
  bool general = true;
  if constexpr (!nvfp4_hardware_e2m1<CVT>()) {
    u32 m = absmax2_nan<T>(absmax2_nan<T>(raw.x, raw.y), absmax2_nan<T>(raw.z, raw.w));
    m = absmax2_nan<T>(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
    const float amax = absmax2_to_f32<T>(m);
    scale = nvfp4_scale_bits<CVT>(amax, rule);
    const float eff = eff_of_scale[scale];
    const float amax_eff = mul_rn(amax, eff);
    if (__all_sync(0xFFFFFFFFu, nvfp4_fast_block(amax_eff))) {
      packed = nvfp4_encode_signed_by_input<false>(v, raw, eff);
      general = false;
    } else if (__all_sync(0xFFFFFFFFu, nvfp4_middle_block(amax_eff))) {
      packed = nvfp4_encode_signed_by_input<true>(v, raw, eff);
      general = false;
    }
  }
  if (general) {
    // max.f32 drops NaN and keeps Inf: the reference's "max |x| over the non-NaN x" (signalling
    // NaNs included: the GPU tests sprinkle BF16 0x7F81 / 0xFFBF).
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = max_f32(amax, fabs_f32(v[i]));
    amax = max_f32(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    scale = nvfp4_scale_bits<CVT>(amax, rule);
    packed = nvfp4_quantize8<CVT>(v, eff_of_scale[scale]);
  }
  return {packed, scale};
}

// The four chunks of a unit through nvfp4_encode_signed_by_input (one branch for all four).
template <typename T, bool SATURATE>
SK_DEVICE void nvfp4_encode_unit_signed_by_input(const uint4 (&raw)[kQuantChunksPerThread],
                                                 const float (&eff)[kQuantChunksPerThread],
                                                 u32 (&packed)[kQuantChunksPerThread]) {
#pragma unroll
  for (int j = 0; j < kQuantChunksPerThread; j++) {
    float v[8];
    widen8<T>(raw[j], v);
    packed[j] = nvfp4_encode_signed_by_input<SATURATE>(v, raw[j], eff[j]);
  }
}

// Software E2M1, one whole unit of a full warp: the fast and middle paths of
// nvfp4_quantize_chunk for the thread's four chunks at once, with the per-block work (scale, eff
// lookup, the vote) done once per block instead of by both lanes of its pair. Chunk j of lanes l
// and l ^ 1 are the two halves of block j (j = the unit's row group); the even lane takes the
// scales of blocks 0 and 1, the odd lane those of blocks 2 and 3, and the partners swap results:
//   per lane: the four chunk maxima (three max.NaN per chunk), folded pairwise into
//   {block 0, block 1} and {block 2, block 3} half-maxima, one shuffle for the partner's halves,
//   two scales and lookups, one vote for all four chunks, two shuffles back (eff, scale bytes).
// Same operations on the same values as nvfp4_quantize_chunk's fast and middle paths, so the
// same bits; returns false (nothing written) when some block of the warp needs the general path,
// and the caller then runs nvfp4_quantize_chunk chunk by chunk. All 32 lanes must call it.
template <typename T, int CVT>
SK_DEVICE bool nvfp4_quantize_unit_split(const uint4 (&raw)[kQuantChunksPerThread], Nvfp4ScaleRule rule,
                                         const EffTable& eff_of_scale, u32 (&packed)[kQuantChunksPerThread],
                                         u32& scales) {
  static_assert(kQuantChunksPerThread == 4, "two blocks per lane of a pair");
  u32 m[kQuantChunksPerThread];
#pragma unroll
  for (int j = 0; j < kQuantChunksPerThread; j++)
    m[j] = absmax2_nan<T>(absmax2_nan<T>(raw[j].x, raw[j].y), absmax2_nan<T>(raw[j].z, raw[j].w));
  // {chunk 2i maximum, chunk 2i + 1 maximum} of this lane (signs: xor, ignored).
  const u32 pair01 = absmax2_nan<T>(__byte_perm(m[0], m[1], 0x5410u), __byte_perm(m[0], m[1], 0x7632u));
  const u32 pair23 = absmax2_nan<T>(__byte_perm(m[2], m[3], 0x5410u), __byte_perm(m[2], m[3], 0x7632u));
  const bool odd = (threadIdx.x & 1u) != 0;
  const u32 both = absmax2_nan<T>(odd ? pair23 : pair01, __shfl_xor_sync(0xFFFFFFFFu, odd ? pair01 : pair23, 1));
  // Blocks a = 2 * odd and a + 1: amax, scale byte, eff, amax * eff.
  const float amax_a = fabs_f32(HalfType<T>::to_float(u16(both & 0xFFFFu)));
  const float amax_b = fabs_f32(HalfType<T>::to_float(u16(both >> 16)));
  const u32 scale_a = nvfp4_scale_bits<CVT>(amax_a, rule), scale_b = nvfp4_scale_bits<CVT>(amax_b, rule);
  const float eff_a = eff_of_scale[scale_a], eff_b = eff_of_scale[scale_b];
  const float p_a = mul_rn(amax_a, eff_a), p_b = mul_rn(amax_b, eff_b);
  const bool fast = __all_sync(0xFFFFFFFFu, nvfp4_fast_block(p_a) && nvfp4_fast_block(p_b));
  if (!fast && !__all_sync(0xFFFFFFFFu, nvfp4_middle_block(p_a) && nvfp4_middle_block(p_b)))
    return false;
  const float other_a = __shfl_xor_sync(0xFFFFFFFFu, eff_a, 1), other_b = __shfl_xor_sync(0xFFFFFFFFu, eff_b, 1);
  const float eff[kQuantChunksPerThread] = {odd ? other_a : eff_a, odd ? other_b : eff_b, odd ? eff_a : other_a,
                                            odd ? eff_b : other_b};
  const u32 mine = (scale_a | (scale_b << 8)) << (odd ? 16 : 0);  // bytes 2 odd, 2 odd + 1
  scales = mine | __shfl_xor_sync(0xFFFFFFFFu, mine, 1);
  if (fast)
    nvfp4_encode_unit_signed_by_input<T, false>(raw, eff, packed);
  else
    nvfp4_encode_unit_signed_by_input<T, true>(raw, eff, packed);
  return true;
}

// Store chunk c of the row-major [M, K] view (c < M * cpr) by its index: the in-CTA mode, whose
// chunks have no fixed stride in the swizzled layout (one division per chunk; one CTA anyway).
template <int LAYOUT>
SK_DEVICE void nvfp4_store_chunk_at(u32 c, u32 cpr, Nvfp4Chunk q, u8* __restrict__ values,
                                    u8* __restrict__ scales_swizzled, u8* __restrict__ scales_rows) {
  *reinterpret_cast<u32*>(values + i64(c) * 4) = q.packed;
  if constexpr ((LAYOUT & kScalesRowMajor) != 0) scales_rows[c / 2] = u8(q.scale);
  if constexpr ((LAYOUT & kScalesSwizzled) != 0) {
    const u32 row = c / cpr;
    scales_swizzled[sk_qsplit_swizzled_offset(row, (c - row * cpr) / 2, (cpr / 2 + 3) / 4)] = u8(q.scale);
  }
}

// GS_MODE kGlobalScaleInCta keeps the first kInCtaCachedChunks chunks of every thread in
// registers between the amax pass and the quantize pass: up to 256*8*4 = 8192 elements (a
// decode row of K <= 8192) are read from memory once, with all loads in flight together.
constexpr int kInCtaCachedChunks = 4;

// Loads on sm_90 (software E2M1): cp.async into two shared-memory stage buffers, the next unit's
// copies issued before the current unit's arithmetic (UnitWalk::load_next_async), so every warp
// keeps a unit of loads in flight while it quantizes, without holding them in registers. 4 CTAs
// per SM (64 registers, 33 KiB of shared memory each): faster at large M than plain loads into
// registers at 5 CTAs per SM (48 registers), and than these copies at 5 CTAs per SM (where they
// spill) or with a third stage.
// Elsewhere (the hardware E2M1 path of SM120) plain loads into registers, one unit at a time, and
// the compiler's own register choice (also for the one-CTA in-CTA mode).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
constexpr bool kNvfp4AsyncLoads = true;
constexpr int kNvfp4MinCtasPerSm = 4;
#else
constexpr bool kNvfp4AsyncLoads = false;
constexpr int kNvfp4MinCtasPerSm = 1;
#endif

template <typename T, int LAYOUT, int GS_MODE, int CVT>
__global__ void __launch_bounds__(kNvfp4Threads, GS_MODE == kGlobalScaleInCta ? 1 : kNvfp4MinCtasPerSm)
    nvfp4_rows(const T* __restrict__ x, int ld_x, int M, int K, u8* __restrict__ values,
               u8* __restrict__ scales_swizzled, u8* __restrict__ scales_rows,
               float* __restrict__ global_scale, const float* __restrict__ amax_partials,
               int num_partials) {
  pdl_enter();  // launched overlapped with the previous kernel (docs/architecture.md, Launch)
  static_assert(LAYOUT >= kScalesSwizzled && LAYOUT <= kScalesBoth, "LAYOUT: 1, 2 or 3");
  static_assert(GS_MODE >= kGlobalScaleGiven && GS_MODE <= kGlobalScaleInCta, "GS_MODE: 0..2");
  // Two threads per 16-value block, 8 values (one 16-byte load) each: a block is a lane pair.
  __shared__ float eff_of_scale[256];

  if constexpr (GS_MODE != kGlobalScaleInCta) {
    // One unit (128 rows x one k-tile, quantization/split.cuh) per step: its loads first (the
    // global scale, its reduction and the eff table overlap the first ones), then the four
    // chunks, then the unit's scales as whole words (padding included: no padding pass).
    using Walk = UnitWalk<T, LAYOUT, 4, 2>;
    Walk walk(x, ld_x, M, K, values, scales_swizzled, scales_rows);
    constexpr bool kAsync = kNvfp4AsyncLoads;
    __shared__ __align__(16) unsigned char stages[kAsync ? 2 * Walk::kAsyncStageBytes : 16];  // 2 x 16 KiB
    // The current stage buffer's offset (0 or kAsyncStageBytes), one register: this thread's slot
    // in either buffer is recomputed from it (the array's address is a constant).
    u32 stage = 0;
    const auto slot_at = [&](u32 offset) { return Walk::async_slot(smem_addr(stages)) + offset; };
    bool more = walk.has_unit();  // CTA-uniform
    if (more) {
      if constexpr (kAsync)
        walk.load_async(slot_at(0));
      else
        walk.load();
    }
    float gs;
    if constexpr (GS_MODE == kGlobalScaleGiven) {
      gs = __ldg(global_scale);
    } else {
      u32 amax = 0;
      for (int i = threadIdx.x; i < num_partials; i += blockDim.x)
        amax = max(amax, magnitude_bits_finite(__ldg(amax_partials + i)));
      gs = nvfp4_global_scale_from_amax(f32_from_bits(block_max_bits(amax)));
      if (blockIdx.x == 0 && threadIdx.x == 0) *global_scale = gs;
    }
    const Nvfp4ScaleRule rule = nvfp4_scale_rule(gs);
    nvfp4_fill_eff_table<CVT>(eff_of_scale, gs);
    __syncthreads();
    const EffTable eff(eff_of_scale);
    while (more) {
      if constexpr (kAsync) {
        if (walk.load_next_async(slot_at(stage ^ Walk::kAsyncStageBytes)))
          cp_async_wait<1>();
        else
          cp_async_wait<0>();
        walk.read_async(slot_at(stage));
      }
      u32 scales = 0;  // byte j: chunk j's; 0 for padding (a zero chunk's scale is not 0 for every gs)
      u32 packed[kQuantChunksPerThread], unit_scales;
      // Software E2M1: a warp with rows in all four row groups (warp-uniform) tries the whole
      // unit at once; warps at the end of M, and units with a NaN, Inf or extreme eff, go chunk
      // by chunk.
      if (!nvfp4_hardware_e2m1<CVT>() && walk.warp_has(kQuantChunksPerThread - 1) &&
          nvfp4_quantize_unit_split<T, CVT>(walk.raw, rule, eff, packed, unit_scales)) {
        if (walk.all_exist()) {  // the whole unit (all but the end of M or K)
#pragma unroll
          for (int j = 0; j < kQuantChunksPerThread; j++) walk.store_values<true>(j, packed[j]);
          scales = unit_scales;
        } else {
#pragma unroll
          for (int j = 0; j < kQuantChunksPerThread; j++) {
            walk.store_values(j, packed[j]);
            if (walk.exists(j)) scales |= unit_scales & (0xFFu << (8 * j));
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kQuantChunksPerThread; j++) {
          if (walk.warp_has(j)) {  // warp-uniform: full-mask shuffles inside
            const Nvfp4Chunk q = nvfp4_quantize_chunk<T, CVT>(walk.raw[j], rule, eff);
            walk.store_values(j, q.packed);
            if (walk.exists(j)) scales |= q.scale << (8 * j);
          }
        }
      }
      walk.store_scales(scales);
      more = walk.next();
      if constexpr (kAsync) {
        stage ^= Walk::kAsyncStageBytes;
      } else if (more) {
        walk.load();
      }
    }
  } else {
    if (gridDim.x != 1 || gridDim.y != 1) __trap();  // the tensor amax must be seen by one CTA
    const int cpr = K / 8;
    const i64 chunks = i64(M) * cpr;
    uint4 cached[kInCtaCachedChunks];
    u32 amax = 0;
#pragma unroll
    for (int r = 0; r < kInCtaCachedChunks; r++) {
      const i64 c = threadIdx.x + i64(r) * blockDim.x;
      cached[r] = c < chunks ? load_chunk(x, ld_x, chunk_coord(c, cpr))
                             : make_uint4(0u, 0u, 0u, 0u);  // zeros do not change the amax
      float v[8];
      widen8<T>(cached[r], v);
#pragma unroll
      for (int i = 0; i < 8; i++) amax = max(amax, magnitude_bits_finite(v[i]));
    }
    const i64 first_chunk = threadIdx.x + i64(kInCtaCachedChunks) * blockDim.x;
    amax = max(amax, strided_finite_amax_bits(x, ld_x, M, K, first_chunk, blockDim.x));
    const float gs = nvfp4_global_scale_from_amax(f32_from_bits(block_max_bits(amax)));
    if (threadIdx.x == 0) *global_scale = gs;
    const Nvfp4ScaleRule rule = nvfp4_scale_rule(gs);
    nvfp4_fill_eff_table<CVT>(eff_of_scale, gs);
    __syncthreads();
    const EffTable eff(eff_of_scale);
#pragma unroll
    for (int r = 0; r < kInCtaCachedChunks; r++) {
      const i64 c = threadIdx.x + i64(r) * blockDim.x;
      const Nvfp4Chunk q = nvfp4_quantize_chunk<T, CVT>(cached[r], rule, eff);
      if (c < chunks)
        nvfp4_store_chunk_at<LAYOUT>(u32(c), u32(cpr), q, values, scales_swizzled, scales_rows);
    }
    // CTA-uniform loop condition (full-mask shuffles inside).
    for (i64 base = i64(kInCtaCachedChunks) * blockDim.x; base < chunks; base += blockDim.x) {
      const i64 c = base + threadIdx.x;
      const bool valid = c < chunks;
      const Nvfp4Chunk q = nvfp4_quantize_chunk<T, CVT>(
          valid ? load_chunk(x, ld_x, chunk_coord(c, cpr)) : make_uint4(0u, 0u, 0u, 0u), rule, eff);
      if (valid) nvfp4_store_chunk_at<LAYOUT>(u32(c), u32(cpr), q, values, scales_swizzled, scales_rows);
    }
    // Byte stores above: the padding needs its own pass here (one CTA).
    if constexpr ((LAYOUT & kScalesSwizzled) != 0)
      zero_swizzled_padding(scales_swizzled, M, K / kNvfp4Block, threadIdx.x, blockDim.x);
  }
}

}  // namespace quant
}  // namespace sk
