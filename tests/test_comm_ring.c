/* comm.pcie ring all-reduce without a GPU: the chunk schedule (ops/comm/ring_plan.c), the plan's
 * rules and fallback, the per-rank programs' bounds, and the whole collective simulated for 2..8
 * ranks (ops/comm/ref_ring.c) in every wire mode: every rank ends bitwise identical, the BF16
 * ring equals its reduction chain computed directly, interleavings do not change a bit, and the
 * compressed modes stay within their quantisation bounds of a double-precision sum. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/codec.cuh"
#include "comm/ring_plan.h"

#define MAX_BYTES ((size_t)1 << 20)

static uint16_t value(int rank, int64_t i, int salt) {
  uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 48) ^ ((uint64_t)salt << 56);
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 29;
  /* values of a few magnitudes, so blocks have different scales */
  double v = ((double)(z >> 11) * 0x1p-53 * 2 - 1) * ldexp(1.0, (int)(z & 7) - 3 + (int)((i / 128) % 5) * 3);
  return sk_codec_bf16_rn((float)v);
}

Test(comm_ring, step_schedule) {
  for (int w = 2; w <= 8; w++) {
    for (int r = 0; r < w; r++) {
      int seen_rs[8] = {0}, seen_ag[8] = {0};
      for (int k = 0; k < 2 * (w - 1); k++) {
        int s, c, s_next, c_next;
        sk_ring_step(w, r, k, &s, &c);
        sk_ring_step(w, (r + 1) % w, k, &s_next, &c_next);
        cr_assert_eq(c_next, s, "w %d rank %d step %d: rank + 1 receives %d, rank sends %d", w, r, k, c_next, s);
        if (k > 0 && k != w - 1) { /* a rank forwards what it received at the previous step */
          int s_prev, c_prev;
          sk_ring_step(w, r, k - 1, &s_prev, &c_prev);
          cr_assert_eq(s, c_prev, "w %d rank %d step %d", w, r, k);
        }
        if (k < w - 1) seen_rs[c]++;
        else seen_ag[c]++;
        if (k == w - 2) cr_assert_eq(c, sk_ring_owned_chunk(w, r), "the last reduce-scatter hop completes the owned chunk");
        if (k == w - 1) cr_assert_eq(s, sk_ring_owned_chunk(w, r), "the all-gather starts with the owned chunk");
      }
      for (int c = 0; c < w; c++) {
        cr_assert_eq(seen_rs[c], c == r ? 0 : 1, "w %d rank %d: chunk %d received %d times in the reduce-scatter", w, r, c, seen_rs[c]);
        cr_assert_eq(seen_ag[c], c == sk_ring_owned_chunk(w, r) ? 0 : 1, "w %d rank %d: chunk %d in the all-gather", w, r, c);
      }
    }
  }
}

#define EXPECT_REFUSED(call, needle)                                                                          \
  do {                                                                                                      \
    sk_status s_ = (call);                                                                                  \
    cr_expect_eq(s_, SK_ERR_INVALID_ARGUMENT, "%s: %s", #call, sk_status_string(s_));                       \
    cr_expect(strstr(sk_last_error_message(), needle), "%s: \"%s\" lacks \"%s\"", #call, sk_last_error_message(), needle); \
  } while (0)

Test(comm_ring, plan_rules_layout_and_fallback) {
  sk_ring_plan p;
  EXPECT_REFUSED(sk_ring_plan_make(1, MAX_BYTES, 1024, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, &p), "world size 1");
  EXPECT_REFUSED(sk_ring_plan_make(9, MAX_BYTES, 1024, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, &p), "world size 9");
  EXPECT_REFUSED(sk_ring_plan_make(4, MAX_BYTES, 1024, (sk_comm_codec)4, SK_COMM_TOPO_AG, &p), "codec 4");
  EXPECT_REFUSED(sk_ring_plan_make(4, MAX_BYTES, 1024, SK_COMM_CODEC_E4M3, (sk_comm_topology)-1, &p), "topology -1");
  EXPECT_REFUSED(sk_ring_plan_make(4, MAX_BYTES, 1000, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, &p), "multiple of 8 * world size = 32");
  EXPECT_REFUSED(sk_ring_plan_make(3, MAX_BYTES, 0, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, &p), "0 values");
  EXPECT_REFUSED(sk_ring_plan_make(2, MAX_BYTES, (int64_t)MAX_BYTES, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, &p), "max_bytes");
  EXPECT_REFUSED(sk_ring_plan_make(2, MAX_BYTES, 64, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, NULL), "NULL");
  /* shard of 128 * 3 values: coded as asked; topology ignored for BF16 */
  cr_assert_eq(sk_ring_plan_make(4, MAX_BYTES, 4 * 384, SK_COMM_CODEC_INT8, SK_COMM_TOPO_A2A, &p), SK_OK);
  cr_expect(p.codec == SK_COMM_CODEC_INT8 && p.topology == SK_COMM_TOPO_A2A && !p.fallback);
  cr_expect_eq(p.shard_wire_bytes, (size_t)3 * 132);
  cr_assert_eq(sk_ring_plan_make(4, MAX_BYTES, 4 * 384, SK_COMM_CODEC_BF16, SK_COMM_TOPO_A2A, &p), SK_OK);
  cr_expect(p.codec == SK_COMM_CODEC_BF16 && p.topology == SK_COMM_TOPO_AG && !p.fallback);
  cr_expect_eq(p.shard_wire_bytes, (size_t)384 * 2);
  /* shard of 136 values: every compressed mode falls back to BF16 */
  cr_assert_eq(sk_ring_plan_make(4, MAX_BYTES, 4 * 136, SK_COMM_CODEC_MXFP8, SK_COMM_TOPO_RING, &p), SK_OK);
  cr_expect(p.codec == SK_COMM_CODEC_BF16 && p.fallback);
  /* the layout holds the largest collective of every world and mode */
  for (int w = 2; w <= 8; w++) {
    const int64_t n = (int64_t)(MAX_BYTES / 2) / (128 * w) * (128 * w);
    for (int c = 0; c < 4; c++) {
      cr_assert_eq(sk_ring_plan_make(w, MAX_BYTES, n, (sk_comm_codec)c, SK_COMM_TOPO_A2A, &p), SK_OK);
      cr_expect_geq(p.slot_bytes, p.shard_wire_bytes);
      cr_expect_geq(p.stage_bytes, (size_t)n / 128 * 132);
      cr_expect_eq(p.recv_offset % 256, 0);
      cr_expect_eq(p.stage_offset, p.recv_offset + p.a2a_offset + 2 * (size_t)w * p.a2a_slot_bytes);
      cr_expect_eq(p.a2a_offset, 2 * (size_t)(w - 1) * p.slot_bytes);
      cr_expect_geq(p.a2a_slot_bytes, (size_t)n / w / 128 * 132);
      cr_expect_eq(p.buffer_bytes, p.stage_offset + p.stage_bytes);
      sk_ring_op ops[SK_RING_MAX_OPS];
      for (int topo = 0; topo < 3; topo++) {
        sk_ring_plan q;
        sk_ring_plan_make(w, MAX_BYTES, n, (sk_comm_codec)c, (sk_comm_topology)topo, &q);
        for (int r = 0; r < w; r++) {
          const int count = sk_ring_program(&q, r, ops);
          cr_expect(count > 0 && count <= SK_RING_MAX_OPS);
          cr_expect_eq(ops[count - 1].kind, SK_RING_END, "a program ends with the sequence number's update");
          for (int i = 0; i < count; i++)
            if (ops[i].kind == SK_RING_COPY) cr_expect_leq(ops[i].bytes, q.slot_bytes);
        }
      }
    }
  }
}

/* Simulate `colls` collectives (the last in place), collective c with plans[c]; collective c's
 * inputs are value(rank, i, salt + c). Returns outputs[c * world + rank]. */
static uint16_t **simulate_modes(const sk_ring_plan *const *plans, int colls, uint64_t seed, int salt) {
  const sk_ring_plan *p = plans[0];
  const int w = p->world;
  uint16_t **buf = calloc((size_t)colls * w, sizeof *buf), **out = calloc((size_t)colls * w, sizeof *out);
  for (int c = 0; c < colls; c++)
    for (int r = 0; r < w; r++) {
      uint16_t *x = malloc((size_t)p->n * 2);
      for (int64_t i = 0; i < p->n; i++) x[i] = value(r, i, salt + c);
      buf[c * w + r] = x;
      out[c * w + r] = c == colls - 1 ? x : malloc((size_t)p->n * 2);
    }
  sk_status s = sk_ring_simulate(plans, colls, (const uint16_t *const *)buf, out, seed);
  cr_assert_eq(s, SK_OK, "%s", sk_last_error_message());
  for (int c = 0; c < colls - 1; c++)
    for (int r = 0; r < w; r++) free(buf[c * w + r]);
  free(buf);
  return out;
}
static uint16_t **simulate(const sk_ring_plan *p, int colls, uint64_t seed, int salt) {
  const sk_ring_plan *plans[16];
  for (int c = 0; c < colls; c++) plans[c] = p;
  return simulate_modes(plans, colls, seed, salt);
}
static void release(uint16_t **out, int n) {
  for (int i = 0; i < n; i++) free(out[i]);
  free(out);
}

Test(comm_ring, bf16_ring_is_the_reduction_chain) {
  for (int w = 2; w <= 8; w++) {
    sk_ring_plan p;
    cr_assert_eq(sk_ring_plan_make(w, MAX_BYTES, (int64_t)8 * w * 37, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, &p), SK_OK);
    const int colls = 3;
    uint16_t **out = simulate(&p, colls, (uint64_t)w, 7);
    for (int c = 0; c < colls; c++)
      for (int64_t i = 0; i < p.n; i++) {
        /* chunk k starts at rank k; rank k + j adds its value to the bf16 partial sum */
        const int k = (int)(i / p.shard);
        float acc = sk_codec_bf16_to_f32(value(k, i, 7 + c));
        for (int j = 1; j < w; j++) acc = sk_codec_bf16_to_f32(sk_codec_bf16_rn(acc + sk_codec_bf16_to_f32(value((k + j) % w, i, 7 + c))));
        const uint16_t want = sk_codec_bf16_rn(acc);
        for (int r = 0; r < w; r++)
          cr_assert_eq(out[c * w + r][i], want, "w %d collective %d rank %d value %lld: %04x, want %04x", w, c, r, (long long)i,
                       out[c * w + r][i], want);
      }
    release(out, colls * w);
  }
}

/* Quantisation error bound of one encode relative to the block's amax. */
static double codec_rel(sk_comm_codec c) {
  return c == SK_COMM_CODEC_E4M3 ? 1.0 / 16 : c == SK_COMM_CODEC_INT8 ? 1.0 / 254 : c == SK_COMM_CODEC_MXFP8 ? 1.0 / 8 : 0;
}

Test(comm_ring, every_wire_mode_is_rank_identical_and_bounded, .timeout = 120) {
  static const int worlds[] = {2, 3, 4, 8};
  for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++) {
    const int w = worlds[wi];
    for (int c = 0; c < 4; c++)
      for (int topo = 0; topo < 3; topo++) {
        if (c == 0 && topo) continue;
        sk_ring_plan p;
        cr_assert_eq(sk_ring_plan_make(w, MAX_BYTES, (int64_t)w * 128 * 5, (sk_comm_codec)c, (sk_comm_topology)topo, &p), SK_OK);
        cr_assert(!p.fallback);
        const int colls = 2;
        uint16_t **out = simulate(&p, colls, 11, 3), **again = simulate(&p, colls, 12345, 3);
        /* quantisations on a value's way: ag 1, ring one per hop, a2a 2; plus bf16 roundings */
        const int nq = c == 0 ? 0 : topo == SK_COMM_TOPO_AG ? 1 : topo == SK_COMM_TOPO_RING ? w : 2;
        for (int k = 0; k < colls; k++)
          for (int64_t b = 0; b < p.n / 128; b++) {
            double scale = 0; /* sum over ranks of the block's amax: bounds every partial sum */
            for (int r = 0; r < w; r++) {
              double m = 0;
              for (int i = 0; i < 128; i++) m = fmax(m, fabs(sk_codec_bf16_to_f32(value(r, b * 128 + i, 3 + k))));
              scale += m;
            }
            const double tol = (nq * codec_rel((sk_comm_codec)c) + (w + 2) * 0x1p-8) * scale;
            for (int i = 0; i < 128; i++) {
              const int64_t e = b * 128 + i;
              double exact = 0;
              for (int r = 0; r < w; r++) exact += sk_codec_bf16_to_f32(value(r, e, 3 + k));
              const uint16_t got = out[k * w][e];
              for (int r = 0; r < w; r++) {
                cr_assert_eq(out[k * w + r][e], got, "w %d codec %d topo %d: rank %d differs from rank 0 at %lld", w, c, topo, r,
                             (long long)e);
                cr_assert_eq(again[k * w + r][e], got, "w %d codec %d topo %d: another interleaving changed value %lld", w, c, topo,
                             (long long)e);
              }
              const double err = fabs(sk_codec_bf16_to_f32(got) - exact);
              cr_assert(err <= tol, "w %d codec %d topo %d value %lld: %g vs exact %g (tolerance %g)", w, c, topo, (long long)e,
                        (double)sk_codec_bf16_to_f32(got), exact, tol);
            }
          }
        release(out, colls * w);
        release(again, colls * w);
      }
  }
}

/* A compressed mode whose shard is not blocks of 128 runs the BF16 ring: the same bits. */
Test(comm_ring, fallback_equals_bf16_ring) {
  sk_ring_plan p, q;
  cr_assert_eq(sk_ring_plan_make(4, MAX_BYTES, 4 * 200, SK_COMM_CODEC_E4M3, SK_COMM_TOPO_A2A, &p), SK_OK);
  cr_assert_eq(sk_ring_plan_make(4, MAX_BYTES, 4 * 200, SK_COMM_CODEC_BF16, SK_COMM_TOPO_AG, &q), SK_OK);
  cr_assert(p.fallback);
  uint16_t **a = simulate(&p, 1, 1, 9), **b = simulate(&q, 1, 2, 9);
  for (int r = 0; r < 4; r++) cr_assert(!memcmp(a[r], b[r], (size_t)p.n * 2));
  release(a, 4);
  release(b, 4);
}

/* Back-to-back collectives cycling through the ten wire modes (ring and a2a slots, flags and the
 * stage shared across calls) end exactly as each mode alone: no call disturbs its neighbours. */
Test(comm_ring, mixed_mode_sequences, .timeout = 60) {
  for (int w = 2; w <= 5; w++) {
    sk_ring_plan modes[10];
    const sk_ring_plan *seq[16];
    int m = 0;
    for (int c = 0; c < 4; c++)
      for (int topo = 0; topo < (c ? 3 : 1); topo++)
        cr_assert_eq(sk_ring_plan_make(w, MAX_BYTES, (int64_t)w * 256, (sk_comm_codec)c, (sk_comm_topology)topo, &modes[m++]), SK_OK);
    const int colls = 13;
    for (int c = 0; c < colls; c++) seq[c] = &modes[(c * 7 + w) % 10];
    for (uint64_t seed = 1; seed <= 4; seed++) {
      uint16_t **mixed = simulate_modes(seq, colls, seed, 20);
      for (int c = 0; c < colls; c++) {
        uint16_t **alone = simulate(seq[c], 1, seed + 100, 20 + c);
        for (int r = 0; r < w; r++)
          cr_assert(!memcmp(mixed[c * w + r], alone[r], (size_t)seq[c]->n * 2), "w %d seed %d collective %d (codec %d topo %d) rank %d",
                    w, (int)seed, c, seq[c]->codec, seq[c]->topology, r);
        release(alone, w);
      }
      release(mixed, colls * w);
    }
  }
}
