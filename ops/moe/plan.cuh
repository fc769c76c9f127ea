// moe.fused_moe / moe.ep_moe planning math, shared by the kernels (ops/moe/*.cuh), the CPU tests
// (tests/test_moe_ref.c), the references (ops/moe/ref.c), the weight preparation (ops/moe/prep.c)
// and the host op code: plain C11 as well as CUDA C++17 (integer arithmetic only; no CUDA headers
// when compiled as C). Contract: ops/moe/moe.md.
//
// Terms. m tokens, k routes per token (top-k), R = m*k routes; route r = t*k + j. E local experts
// (the weight tensors' first dimension), E_global ids accepted in topk_ids (== E without an
// expert_map). K hidden size, N intermediate size per rank; Kp = roundup(K, 128) and
// Np = roundup(N, 128) are the prepared (padded) widths. W1 of an expert has R1p = 2*Np rows
// (gated: up rows [0, N), gate rows [Np, Np + N), the rest zero) or Np rows (relu2), Kp/2 code
// bytes per row; W2 has K rows and Np/2 code bytes per row.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common/defs.cuh"
#define SK_MOE_FN SK_HOST_DEVICE constexpr
#else
#include <stddef.h>
#define SK_MOE_FN static inline
#endif
#include "gemm/decode_schedule.cuh"  // stream-K split of the micro kernels (sk_decode_cta_*)

// ---- enums (numbers are part of the kernels' template arguments) ---------------------------
#define SK_MOE_W4A16 0      // BF16 activations x FP4 weights (dequantized to BF16), BF16 MMA
#define SK_MOE_W4A4 1       // NVFP4 activations x NVFP4 weights
#define SK_MOE_WFMT_NVFP4 0 // E2M1 + E4M3 per 16 (+ fp32 global scale per expert)
#define SK_MOE_WFMT_MXFP4 1 // E2M1 + UE8M0 per 32
#define SK_MOE_ACT_SILU 0       // gated: silu(g) * u, optional clamp limit
#define SK_MOE_ACT_RELU2 1      // ungated: relu(h)^2 (W1 has Np rows)
#define SK_MOE_ACT_SWIGLU_OAI 2 // gated: clamp; g * sigmoid(alpha g) * (u + beta)
#define SK_MOE_REGIME_MICRO 0
#define SK_MOE_REGIME_GROUPED 1
#define SK_MOE_COMBINE_ATOMIC 0 // grouped: fp32 red.add into [m, K], then a finalize pass
#define SK_MOE_COMBINE_DET 1    // grouped: down rows per route, then a fixed-order combine
// Bits of the int32 error word in scratch (written afresh by every run).
#define SK_MOE_ERR_EXPERT_ID 1  // a topk id outside [0, E_global): route skipped
#define SK_MOE_ERR_EXPERT_MAP 2 // expert_map[id] outside [-1, E): route skipped

// ---- limits ------------------------------------------------------------------------------
#define SK_MOE_MAX_EXPERTS 1024   // route_topk and route_pack (E_global and E)
#define SK_MOE_MAX_TOPK 32
#define SK_MOE_MICRO_MAX_TOKENS 8 // the micro regime: m <= 8
#define SK_MOE_MICRO_MAX_ROUTES (SK_MOE_MICRO_MAX_TOKENS * SK_MOE_MAX_TOPK)
#define SK_MOE_SLOT_COLS 8        // routes per micro slot (one n8 MMA tile)
#define SK_MOE_SMEM_LIMIT 101376  // SM120 opt-in shared memory per block (99 KB)
#define SK_MOE_SCRATCH_ALIGN 1024

SK_MOE_FN long long sk_moe_cdiv(long long a, long long b) { return (a + b - 1) / b; }
SK_MOE_FN long long sk_moe_round_up(long long a, long long b) { return sk_moe_cdiv(a, b) * b; }
SK_MOE_FN int sk_moe_gated(int act) { return act != SK_MOE_ACT_RELU2; }
SK_MOE_FN int sk_moe_scale_vec(int wfmt) { return wfmt == SK_MOE_WFMT_NVFP4 ? 16 : 32; }

// ---- prepared weight layout ----------------------------------------------------------------
SK_MOE_FN long long sk_moe_padded(long long n) { return sk_moe_round_up(n, 128); }
SK_MOE_FN long long sk_moe_w1_rows(int act, long long np) { return sk_moe_gated(act) ? 2 * np : np; }
// Weight row of intermediate column i: up (half 0) or gate (half 1); relu2 has one half.
SK_MOE_FN long long sk_moe_w1_row(int half, long long i, long long np) { return half * np + i; }
// Bytes of the 128x4 swizzled scales of a [rows, cols] weight (cols = K / vec scale columns).
SK_MOE_FN long long sk_moe_swizzled_bytes(long long rows, long long cols) {
  return sk_moe_round_up(rows, 128) * sk_moe_round_up(cols, 4);
}
SK_MOE_FN long long sk_moe_swizzled_offset(long long row, long long col, long long cols) {
  return (row >> 7) * (sk_moe_cdiv(cols, 4) * 512) + (col >> 2) * 512 + (row & 31) * 16 + ((row & 127) >> 5) * 4 +
         (col & 3);
}
// W1 row order of a checkpoint (ops/moe/prep.c turns any of them into [up; gate]):
#define SK_MOE_W1_UP_GATE 0     // [up; gate] (b12x "w13"): rows [0, N) up, [N, 2N) gate
#define SK_MOE_W1_GATE_UP 1     // [gate; up] (vLLM / FlashInfer checkpoints): flipped once
#define SK_MOE_W1_INTERLEAVED 2 // gate and up rows alternate, gate first (gpt-oss checkpoints)
// Source row of prepared (half, i): half 0 up, 1 gate; relu2 (ungated): row i whatever the order.
SK_MOE_FN long long sk_moe_w1_source_row(int order, int act, int half, long long i, long long n) {
  if (!sk_moe_gated(act)) return i;
  if (order == SK_MOE_W1_INTERLEAVED) return 2 * i + (half ? 0 : 1);
  return (order == SK_MOE_W1_GATE_UP ? 1 - half : half) * n + i;
}
// Per-expert strides of the prepared tensors (bytes).
SK_MOE_FN long long sk_moe_w1_code_bytes(int act, long long np, long long kp) { return sk_moe_w1_rows(act, np) * kp / 2; }
SK_MOE_FN long long sk_moe_w1_scale_bytes(int act, int wfmt, long long np, long long kp) {
  return sk_moe_swizzled_bytes(sk_moe_w1_rows(act, np), kp / sk_moe_scale_vec(wfmt));
}
SK_MOE_FN long long sk_moe_w2_code_bytes(long long k, long long np) { return k * np / 2; }
SK_MOE_FN long long sk_moe_w2_scale_bytes(int wfmt, long long k, long long np) {
  return sk_moe_swizzled_bytes(k, np / sk_moe_scale_vec(wfmt));
}

// ---- regime ---------------------------------------------------------------------------------
// micro for m <= 8 (every active expert's weights streamed once, routes of an expert in one
// 8-column MMA tile), grouped otherwise. The host may force either (both are correct for any m
// they accept: micro needs m <= 8).
SK_MOE_FN int sk_moe_regime(long long m) { return m <= SK_MOE_MICRO_MAX_TOKENS ? SK_MOE_REGIME_MICRO : SK_MOE_REGIME_GROUPED; }

// ---- micro regime ---------------------------------------------------------------------------
// A slot is (expert, up to 8 of its routes). Slots are the routes sorted by (local expert, route)
// cut into chunks of 8 per expert; slot s holds routes slot_route[s][0 .. slot_count[s]). Column
// c of slot s is its c-th route. Work: tiles of 32 weight rows (FC1 gated: 16 up rows + the 16
// gate rows of the same intermediate columns; relu2 and FC2: 32 consecutive rows) x 128-K steps,
// units = slots x tiles x steps in that order, split over the CTAs stream-K
// (gemm/decode_schedule.cuh: CTA c takes [begin(c), begin(c + 1)) with ctas = min(grid, units)).
#define SK_MOE_MICRO_WARPS 4
#define SK_MOE_MICRO_TILE_ROWS 32
#define SK_MOE_MICRO_STEP_K 128
// CTAs per SM of the micro kernels (their __launch_bounds__): W4A16 on sm_90 4 x 128 threads
// (128 registers); W4A4 (FC1 quantizes the tokens in registers) and every SM120 build 3 (168
// registers: the 128-register builds spill there; an SM120 part has ALU to spare per byte).
SK_MOE_FN int sk_moe_micro_ctas_per_sm(int recipe, int sm120) { return recipe == SK_MOE_W4A16 && !sm120 ? 4 : 3; }
SK_MOE_FN int sk_moe_micro_tiles_fc1(int act, int np) { return sk_moe_gated(act) ? np / 16 : np / 32; }
SK_MOE_FN int sk_moe_micro_tiles_fc2(int k) { return (int)sk_moe_cdiv(k, SK_MOE_MICRO_TILE_ROWS); }
SK_MOE_FN int sk_moe_micro_steps(int kdim_padded) { return kdim_padded / SK_MOE_MICRO_STEP_K; }
// Weight row of tile-local row r (0..31) of FC1 tile `tile`.
SK_MOE_FN int sk_moe_micro_fc1_row(int act, int np, int tile, int r) {
  return sk_moe_gated(act) ? (int)sk_moe_w1_row(r >> 4, 16 * tile + (r & 15), np) : 32 * tile + r;
}
// Upper bound of slots: every slot holds at least one route.
SK_MOE_FN int sk_moe_micro_max_slots(int m, int topk, int e) {
  const int r = m * topk;
  return r < e * (int)sk_moe_cdiv(r, SK_MOE_SLOT_COLS) ? r : e * (int)sk_moe_cdiv(r, SK_MOE_SLOT_COLS);
}
SK_MOE_FN int sk_moe_micro_grid(int recipe, int sm120, int sms) { return sk_moe_micro_ctas_per_sm(recipe, sm120) * sms; }

// The slot table (serial specification; the kernels build the same table in parallel and
// FC1's CTA 0 stores it in scratch). local[r] = local expert of route r or -1 (skipped).
// Writes slot_expert[s], slot_count[s], slot_route[s][c]; returns the number of slots.
// Deterministic: depends on local[] only.
SK_MOE_FN int sk_moe_micro_slots_serial(const int* local, int routes, int* slot_expert, int* slot_count,
                                        int (*slot_route)[SK_MOE_SLOT_COLS]) {
  int slots = 0, prev = -1, in_expert = 0;
  long long last = -1;
  for (;;) {  // next route in ascending (expert, route) order
    int best = -1;
    for (int r = 0; r < routes; ++r) {
      const long long key = (long long)local[r] * SK_MOE_MICRO_MAX_ROUTES + r;
      if (local[r] >= 0 && key > last && (best < 0 || key < (long long)local[best] * SK_MOE_MICRO_MAX_ROUTES + best)) best = r;
    }
    if (best < 0) return slots;
    last = (long long)local[best] * SK_MOE_MICRO_MAX_ROUTES + best;
    if (local[best] != prev) in_expert = 0;
    prev = local[best];
    if (in_expert++ % SK_MOE_SLOT_COLS == 0) {
      slot_expert[slots] = local[best];
      slot_count[slots++] = 0;
    }
    slot_route[slots - 1][slot_count[slots - 1]++] = best;
  }
}

// ---- grouped regime -------------------------------------------------------------------------
// Routes are counted per local expert and packed by expert into row segments padded to BM rows
// (segment of expert e: rows [offset[e], offset[e] + count[e]), offset[e+1] = offset[e] +
// roundup(count[e], BM)); an M tile is BM rows of one expert. FC1 and FC2 run on a grid of
// (N tiles, max M tiles); CTAs past the run's tile count return at once.
// Tile configs (BM x BN x BK, warps, stages) per kernel family, all within 99 KB:
//   W4A16 (portable, sm_90 / sm_120): BK 64, BN 128, 4 stages, BM 16/32 (1x2 warps), 64/128 (2x2)
//   W4A4 portable (sm_90):            BK 128, BN 128, 3 stages, BM 16/32 (1x4 warps), 64/128 (2x4)
//   W4A4 SM120 (block-scaled MMA):    BK 128, BN 128, 4 stages, BM 32 (1x4), 64 / 128 (2x4)
SK_MOE_FN int sk_moe_grouped_bm(long long routes, int e, int sm120_w4a4) {
  const long long active = routes < e ? routes : e;
  const long long avg = active > 0 ? sk_moe_cdiv(routes, active) : 1;
  const int bm = avg <= 16 ? 16 : avg <= 32 ? 32 : avg <= 64 ? 64 : 128;
  return sm120_w4a4 && bm < 32 ? 32 : bm;
}
#define SK_MOE_GROUPED_BN 128
// Warp grid of the portable kernels: W4A16 64-column warp tiles (8 n8 tiles: each BF16 A fragment
// from shared memory feeds 8 MMAs), W4A4 32-column ones (its FP4 A fragments are 4x smaller).
SK_MOE_FN int sk_moe_grouped_warps_n(int recipe, int bm) { return (void)bm, recipe == SK_MOE_W4A16 ? 2 : 4; }
SK_MOE_FN int sk_moe_grouped_warps_m(int recipe, int bm) { return recipe == SK_MOE_W4A16 ? (bm >= 64 ? 2 : 1) : (bm <= 32 ? 1 : 2); }
SK_MOE_FN int sk_moe_grouped_stages(int recipe, int sm120) { return recipe == SK_MOE_W4A16 ? 4 : sm120 ? 4 : 3; }
// Bound on M tiles: sum over active experts of ceil(count / BM).
SK_MOE_FN long long sk_moe_grouped_max_tiles(long long routes, int e, int bm) {
  const long long active = routes < e ? routes : e;
  return (routes + active * (bm - 1)) / bm;
}
SK_MOE_FN long long sk_moe_grouped_max_rows(long long routes, int e, int bm) { return sk_moe_grouped_max_tiles(routes, e, bm) * bm; }
// N tiles of FC1 (BN weight rows: gated tiles hold BN/2 up rows and their BN/2 gate rows,
// interleaved in shared memory so that a thread's accumulator pair is (up, gate)) and FC2.
SK_MOE_FN int sk_moe_grouped_fc1_ntiles(int act, int np) { return sk_moe_gated(act) ? np / (SK_MOE_GROUPED_BN / 2) : np / SK_MOE_GROUPED_BN; }
SK_MOE_FN int sk_moe_grouped_fc2_ntiles(int k) { return (int)sk_moe_cdiv(k, SK_MOE_GROUPED_BN); }
// Weight row of B-tile row r of FC1 N tile `nt`.
SK_MOE_FN int sk_moe_grouped_fc1_row(int act, int np, int nt, int r) {
  return sk_moe_gated(act) ? (int)sk_moe_w1_row(r & 1, nt * (SK_MOE_GROUPED_BN / 2) + (r >> 1), np)
                           : nt * SK_MOE_GROUPED_BN + r;
}
// Shared memory (bytes) of one block.
//   W4A16: per stage BM rows x 64 BF16 (128 B) + BN rows x 32 B of codes + BN u32 of scales.
SK_MOE_FN int sk_moe_w4a16_stage_bytes(int bm, int bn) { return bm * 128 + bn * 32 + bn * 4; }
SK_MOE_FN int sk_moe_w4a16_smem_bytes(int bm, int bn, int stages) { return stages * sk_moe_w4a16_stage_bytes(bm, bn); }
//   W4A4 portable: per stage (BM + BN) rows x 64 B of codes, A scales: the 1024-byte pair of
//   k-tiles of the tile's 128-row block, B scales: one such pair per 128-row block the tile's rows
//   come from (gated FC1: 2, else 1).
SK_MOE_FN int sk_moe_w4a4_stage_bytes(int bm, int bn, int b_blocks) { return (bm + bn) * 64 + 1024 + 1024 * b_blocks; }
SK_MOE_FN int sk_moe_w4a4_smem_bytes(int bm, int bn, int b_blocks, int stages) {
  return stages * sk_moe_w4a4_stage_bytes(bm, bn, b_blocks);
}
//   SM120: gemm/sm120_layout.cuh's nvfp4 stage ((BM + BN) x (64 + 2 x 4) bytes).
SK_MOE_FN int sk_moe_sm120_smem_bytes(int bm, int bn, int stages) { return stages * (bm + bn) * (64 + 8); }

// ---- routing ---------------------------------------------------------------------------------
#define SK_MOE_TOPK_RAW 0          // weights = the chosen logits
#define SK_MOE_TOPK_RENORM 1       // weights = softmax over the k chosen logits
#define SK_MOE_TOPK_SOFTMAX_ALL 2  // weights = softmax over all E logits, at the chosen ids
#define SK_MOE_TOPK_WARPS 8        // route_topk: one warp per token, 8 per block
#define SK_MOE_PACK_THREADS 1024   // route_pack: one block

// ---- scratch -----------------------------------------------------------------------------------
// One caller-owned buffer sized at plan time for max_tokens; regions start on 1024-byte
// boundaries. Regions marked counters hold u32 counters that every run leaves at zero (the
// caller zeroes the buffer once, before the first run); everything else is written before it
// is read within a run. Both regimes' regions are present (a plan serves m = 1 .. max_tokens).
typedef struct sk_moe_dims {
  long long max_tokens; // m bucket
  int topk, e, k, n;    // local experts; hidden; intermediate (unpadded)
  int act, recipe, wfmt;
  int sms;              // multiprocessors (grid of the micro kernels)
  int sm120;            // target is sm_120a / sm_121a: SM120 grouped W4A4 kernels, micro CTAs per SM
  int combine;          // SK_MOE_COMBINE_* of the grouped regime
  int bm;               // grouped M tile: 0 = sk_moe_grouped_bm (else 16, 32, 64 or 128)
} sk_moe_dims;

typedef struct sk_moe_scratch {
  // micro
  long long micro_counters;    // counters: tile counters (max of FC1/FC2 tiles x slots) + FC2 row tiles
  long long micro_tile_counters_words, micro_combine_counters_words;
  long long micro_table;       // int32: [0] slots, then slot_expert[S], slot_count[S], slot_route[S][8]
  long long micro_partials;    // fp32: 2 x grid x 32 x 8
  long long micro_inter;       // W4A16: bf16 [S][8][Np]; W4A4: E2M1 [S][8][Np/2]
  long long micro_inter_scales;// W4A4: E4M3 [S][8][Np/16] (row-major)
  long long micro_down;        // fp32 [m*k][K] (micro routes)
  // grouped
  long long flags;             // int32 error word (both regimes), then num_tiles, total rows
  long long expert_count;      // int32 [E]
  long long expert_offset;     // int32 [E + 1]
  long long tiles;             // int32x4 [max_tiles]: expert, first row, rows, 0
  long long route_of_row;      // int32 [max_rows]: route or -1 (padding)
  long long route_pos;         // int32 [max_tokens * k]: packed row of the route or -1
  long long packed_a;          // W4A4: E2M1 [max_rows][Kp/2]
  long long packed_a_scales;   // W4A4: swizzled [max_rows, Kp/16]
  long long inter;             // W4A16: bf16 [max_rows][Np]; W4A4: E2M1 [max_rows][Np/2]
  long long inter_scales;      // W4A4: swizzled [max_rows, Np/16]
  long long out_acc;           // atomic: fp32 [max_tokens][K]; det: fp32 [max_tokens * k][K]
  long long total;             // bytes
  // sizes the kernels need
  int micro_slots, micro_grid, bm;
  long long max_tiles, max_rows;
} sk_moe_scratch;

SK_MOE_FN long long sk_moe_scratch_take(long long* at, long long bytes) {
  const long long off = *at;
  *at = sk_moe_round_up(off + (bytes > 0 ? bytes : 0), SK_MOE_SCRATCH_ALIGN);
  return off;
}

// Fills *s for dims *d. Returns 0, or -1 for dims outside the contract.
SK_MOE_FN int sk_moe_scratch_layout(const sk_moe_dims* d, sk_moe_scratch* s) {
  if (d->max_tokens < 1 || d->topk < 1 || d->topk > SK_MOE_MAX_TOPK || d->e < 1 || d->e > SK_MOE_MAX_EXPERTS ||
      d->k < 32 || d->k % 32 || d->n < 16 || d->n % 16 || d->sms < 1)
    return -1;
  const long long np = sk_moe_padded(d->n), kp = sk_moe_padded(d->k);
  const long long micro_m = d->max_tokens < SK_MOE_MICRO_MAX_TOKENS ? d->max_tokens : SK_MOE_MICRO_MAX_TOKENS;
  const int slots = sk_moe_micro_max_slots((int)micro_m, d->topk, d->e);
  const int grid = sk_moe_micro_grid(d->recipe, d->sm120, d->sms);
  const long long tiles1 = sk_moe_micro_tiles_fc1(d->act, (int)np), tiles2 = sk_moe_micro_tiles_fc2(d->k);
  const long long routes = d->max_tokens * d->topk;
  const int bm = d->bm ? d->bm : sk_moe_grouped_bm(routes, d->e, d->sm120 && d->recipe == SK_MOE_W4A4);
  if (bm != 16 && bm != 32 && bm != 64 && bm != 128) return -1;
  const long long max_tiles = sk_moe_grouped_max_tiles(routes, d->e, bm), max_rows = max_tiles * bm;
  const int w4a4 = d->recipe == SK_MOE_W4A4;
  long long at = 0;
  s->micro_tile_counters_words = slots * (tiles1 > tiles2 ? tiles1 : tiles2);
  s->micro_combine_counters_words = tiles2;
  s->micro_counters = sk_moe_scratch_take(&at, 4 * (s->micro_tile_counters_words + s->micro_combine_counters_words));
  s->micro_table = sk_moe_scratch_take(&at, 4 * (1 + slots * (2 + SK_MOE_SLOT_COLS)));
  s->micro_partials = sk_moe_scratch_take(&at, 4LL * 2 * grid * SK_MOE_MICRO_TILE_ROWS * SK_MOE_SLOT_COLS);
  s->micro_inter = sk_moe_scratch_take(&at, (long long)slots * SK_MOE_SLOT_COLS * (w4a4 ? np / 2 : np * 2));
  s->micro_inter_scales = sk_moe_scratch_take(&at, w4a4 ? (long long)slots * SK_MOE_SLOT_COLS * (np / 16) : 0);
  s->micro_down = sk_moe_scratch_take(&at, 4 * micro_m * d->topk * d->k);
  s->flags = sk_moe_scratch_take(&at, 16);
  s->expert_count = sk_moe_scratch_take(&at, 4LL * d->e);
  s->expert_offset = sk_moe_scratch_take(&at, 4LL * (d->e + 1));
  s->tiles = sk_moe_scratch_take(&at, 16 * max_tiles);
  s->route_of_row = sk_moe_scratch_take(&at, 4 * max_rows);
  s->route_pos = sk_moe_scratch_take(&at, 4 * routes);
  s->packed_a = sk_moe_scratch_take(&at, w4a4 ? max_rows * kp / 2 : 0);
  s->packed_a_scales = sk_moe_scratch_take(&at, w4a4 ? sk_moe_swizzled_bytes(max_rows, kp / 16) : 0);
  s->inter = sk_moe_scratch_take(&at, w4a4 ? max_rows * np / 2 : max_rows * np * 2);
  s->inter_scales = sk_moe_scratch_take(&at, w4a4 ? sk_moe_swizzled_bytes(max_rows, np / 16) : 0);
  s->out_acc = sk_moe_scratch_take(&at, 4 * (d->combine == SK_MOE_COMBINE_DET ? routes : d->max_tokens) * d->k);
  s->total = at;
  s->micro_slots = slots;
  s->micro_grid = grid;
  s->bm = bm;
  s->max_tiles = max_tiles;
  s->max_rows = max_rows;
  return 0;
}

// ---- kernel arguments ------------------------------------------------------------------------
// Every moe kernel takes this one struct by value (cuLaunchKernel: args = {&params}); each uses
// the fields its launch contract names. Same layout in C and CUDA (pointers, 8-byte integers,
// then 4-byte ones).
typedef struct sk_moe_params {
  const void* x;                  // BF16 [m, K], rows of K elements (16-byte aligned)
  const void* topk_ids;           // int32 or int64 [m, topk]
  const float* topk_weights;      // fp32 [m, topk]
  const int* expert_map;          // int32 [e_global]: local id or -1; NULL = identity
  const unsigned char* w1_codes;  // prepared [E][R1p][Kp/2]
  const unsigned char* w1_scales; // [E][sk_moe_w1_scale_bytes]
  const unsigned char* w2_codes;  // [E][K][Np/2]
  const unsigned char* w2_scales; // [E][sk_moe_w2_scale_bytes]
  const float* w1_gs;             // [E] NVFP4 weight global scales (NULL = 1)
  const float* w2_gs;
  const float* a1_gs;             // [E] W4A4 activation global scales
  const float* a2_gs;
  const void* logits;             // route_topk: fp32 or BF16 [m, e_global]
  void* out;                      // BF16 [m, K]
  unsigned char* scratch;         // base of the scratch buffer
  sk_moe_scratch s;               // region offsets (sk_moe_scratch_layout)
  long long m;                    // tokens of this run
  int topk, ids_int64, e, e_global, k, n;  // n unpadded; Np, Kp derived
  int apply_on_input;             // router weight on the FC1 input instead of the output
  int topk_mode;                  // route_topk: SK_MOE_TOPK_*
  float limit, alpha, beta;       // activation parameters (limit +inf: no clamp)
  int combine;                    // grouped: SK_MOE_COMBINE_* (must match the layout's)
} sk_moe_params;

// CTAs of the grouped regime's combine for m tokens (the one launch whose grid depends on m).
SK_MOE_FN long long sk_moe_combine_ctas(long long m, int k) { return sk_moe_cdiv(m * k / 8, 256); }

// ---- launch sequence (host C only) -----------------------------------------------------------
#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#include <stdio.h>
// One kernel launch of a run: embedded source, name expression, grid, block, dynamic shared memory.
// Every moe kernel takes (sk_moe_params) by value and may be launched overlapped with the previous
// kernel (programmatic dependent launch: each waits first); smem > 48 KB needs the opt-in.
typedef struct sk_moe_launch {
  const char* source;
  char name[96];
  unsigned grid[3], block, smem;
} sk_moe_launch;

// The launches of one run of m tokens in `regime` (SK_MOE_REGIME_*), in order; returns their count
// (<= 6) or -1 (m outside the plan, micro with m > 8, W4A4 with MXFP4 weights).
static inline int sk_moe_launch_sequence(const sk_moe_dims* d, const sk_moe_scratch* s, long long m, int regime,
                                         sk_moe_launch* out) {
  if (m < 1 || m > d->max_tokens || (regime == SK_MOE_REGIME_MICRO && m > SK_MOE_MICRO_MAX_TOKENS) ||
      (d->recipe == SK_MOE_W4A4 && d->wfmt != SK_MOE_WFMT_NVFP4))
    return -1;
  const int np = (int)sk_moe_padded(d->n);
  int n = 0;
#define SK_MOE_L(src, gx, gy, blk, sm, ...)                                               \
  do {                                                                                    \
    out[n].source = src;                                                                  \
    snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__);                               \
    out[n].grid[0] = (unsigned)(gx), out[n].grid[1] = (unsigned)(gy), out[n].grid[2] = 1; \
    out[n].block = (unsigned)(blk), out[n].smem = (unsigned)(sm);                         \
    n++;                                                                                  \
  } while (0)
  if (regime == SK_MOE_REGIME_MICRO) {
    SK_MOE_L("moe/micro.cuh", s->micro_grid, 1, 32 * SK_MOE_MICRO_WARPS, 0, "sk::moe::micro_fc1<%d, %d, %d>", d->recipe,
             d->wfmt, d->act);
    SK_MOE_L("moe/micro.cuh", s->micro_grid, 1, 32 * SK_MOE_MICRO_WARPS, 0, "sk::moe::micro_fc2<%d, %d>", d->recipe, d->wfmt);
    return n;
  }
  const int bm = s->bm, wm = sk_moe_grouped_warps_m(d->recipe, bm), wn = sk_moe_grouped_warps_n(d->recipe, bm);
  const int threads = 32 * wm * wn;
  const int sm120 = d->sm120 && d->recipe == SK_MOE_W4A4;
  const int gated = sk_moe_gated(d->act);
  SK_MOE_L("moe/route.cuh", 1, 1, SK_MOE_PACK_THREADS, 0, "sk::moe::route_pack");
  if (d->recipe == SK_MOE_W4A4)
    SK_MOE_L("moe/route.cuh", sk_moe_cdiv(s->max_rows, 8), 1, 256, 0, "sk::moe::pack_quant");
  for (int phase = 1; phase <= 2; phase++) {
    const long long gx = phase == 1 ? sk_moe_grouped_fc1_ntiles(d->act, np) : sk_moe_grouped_fc2_ntiles(d->k);
    const int mode = phase == 1 ? 0 : d->combine, act = phase == 1 ? d->act : 0;
    if (sm120) {
      SK_MOE_L("moe/grouped_sm120.cuh", gx, s->max_tiles, 32 * (bm <= 32 ? 1 : 2) * 4,
               sk_moe_sm120_smem_bytes(bm, SK_MOE_GROUPED_BN, 4), "sk::moe::grouped_sm120<%d, %d, %d, %d, %d>", phase, act,
               bm, bm <= 32 ? 1 : 2, mode);
    } else {
      const unsigned smem = d->recipe == SK_MOE_W4A16
                                ? (unsigned)sk_moe_w4a16_smem_bytes(bm, SK_MOE_GROUPED_BN, 4)
                                : (unsigned)sk_moe_w4a4_smem_bytes(bm, SK_MOE_GROUPED_BN, phase == 1 && gated ? 2 : 1, 3);
      SK_MOE_L("moe/grouped.cuh", gx, s->max_tiles, threads, smem, "sk::moe::grouped_gemm<%d, %d, %d, %d, %d, %d, %d, %d>",
               phase, d->recipe, d->wfmt, act, bm, wm, wn, mode);
    }
  }
  SK_MOE_L("moe/grouped.cuh", sk_moe_combine_ctas(m, d->k), 1, 256, 0, "sk::moe::combine");
#undef SK_MOE_L
  return n;
}
#endif
