/* norm.mhc tensor-core partial kernels, emulated on the CPU: the index math of
 * ops/norm/mhc_layout.cuh (the functions the kernel calls) drives an independently written
 * model of ldmatrix and mma.sync m16n8k16 (PTX ISA fragment layouts), and one 16-token group of
 * both variants (run_pre: 1 stream in smem, run_post_pre: 4) is checked against direct sums:
 * the 24 projection dots, the 10 Gram entries, every slot written once, conflict-free ldmatrix.
 * Also: run_pre's one-warp projection kernel (2d) for one group, and the exact 3-term bf16 split
 * of fp32 fn. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "norm/mhc_layout.cuh"

#define G SK_MHC_GROUP
#define CH SK_MHC_CHUNKS

/* ---- models of the hardware (PTX ISA), written without the layout header ---------------------- */

/* ldmatrix .x{n}: lane 8m+r gives the element offset of row r of matrix m (16-byte rows);
 * lane i receives, in register m, elements (row i/4, columns 2(i%4), 2(i%4)+1) of matrix m. */
static void ldmatrix(const double *smem, const int addr[32], int n, double out[32][4][2]) {
  for (int i = 0; i < 32; i++)
    for (int m = 0; m < n; m++)
      for (int e = 0; e < 2; e++) out[i][m][e] = smem[addr[8 * m + i / 4] + 2 * (i % 4) + e];
}

/* mma.m16n8k16: a[lane][reg][pair], b[lane][reg][pair] -> d[lane][4] += A*B. */
static void mma(double d[32][4], double a[32][4][2], double b[32][4][2]) {
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; lane++) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 2; e++) {
      A[g][2 * t + e] = a[lane][0][e];
      A[g + 8][2 * t + e] = a[lane][1][e];
      A[g][2 * t + 8 + e] = a[lane][2][e];
      A[g + 8][2 * t + 8 + e] = a[lane][3][e];
      B[2 * t + e][g] = b[lane][0][e];
      B[2 * t + 8 + e][g] = b[lane][1][e];
    }
  }
  for (int lane = 0; lane < 32; lane++) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) {
      const int row = g + 8 * (i / 2), col = 2 * t + (i % 2);
      for (int k = 0; k < 16; k++) d[lane][i] += A[row][k] * B[k][col];
    }
  }
}

/* Every 8-row phase of an ldmatrix hits 8 distinct 16-byte bank groups. */
static void check_conflict_free(const int addr[32], int n) {
  for (int m = 0; m < n; m++) {
    int seen = 0;
    for (int r = 0; r < 8; r++) {
      const int group = (addr[8 * m + r] / 8) % 8;
      seen |= 1 << group;
    }
    cr_assert_eq(seen, 0xff, "ldmatrix matrix %d has bank conflicts", m);
  }
}

/* The projection's A fragments of k-step ks of quarter q, stream s (ldmatrix.x4, conflict-checked). */
static void load_a_fragments(const double *smem, int ns, int s, int q, int ks, double a[32][4][2]) {
  int addr[32];
  for (int lane = 0; lane < 32; lane++)
    addr[lane] = sk_mhc_chunk_index(ns, sk_mhc_a_row(lane), s, sk_mhc_a_chunk(q, ks, lane)) * 8;
  check_conflict_free(addr, 4);
  ldmatrix(smem, addr, 4, a);
}

/* One CTA group: streams r[token][stream][h] (h within the tile), fn [24][ns*H], tile index. */
static void emulate_group(int ns) {
  enum { H = 512, TILE = 1 };
  static double r[G][4][256], fn[24][4 * H], smem[4 * G * CH * 8];
  uint32_t seed = 12345u + (uint32_t)ns;
  for (int tk = 0; tk < G; tk++)
    for (int s = 0; s < ns; s++)
      for (int h = 0; h < 256; h++) {
        seed = seed * 1664525u + 1013904223u;
        r[tk][s][h] = (double)((int)(seed >> 24) - 128) / 16.0;
      }
  for (int m = 0; m < 24; m++)
    for (int c = 0; c < ns * H; c++) {
      seed = seed * 1664525u + 1013904223u;
      fn[m][c] = (double)((int)(seed >> 22) - 512) / 1024.0;
    }
  memset(smem, 0, sizeof smem);
  for (int tk = 0; tk < G; tk++)
    for (int s = 0; s < ns; s++)
      for (int c = 0; c < CH; c++)
        for (int e = 0; e < 8; e++) smem[sk_mhc_chunk_index(ns, tk, s, c) * 8 + e] = r[tk][s][c * 8 + e];

  const int warps = 4 * ns;
  static double proj[16][G][24];
  static double gram[4][G][10];
  static int gram_written[4][G][10];
  memset(gram_written, 0, sizeof gram_written);
  for (int w = 0; w < warps; w++) {
    const int s = w / 4, q = w % 4;
    double acc[3][32][4];
    memset(acc, 0, sizeof acc);
    for (int ks = 0; ks < SK_MHC_WARP_KSTEPS; ks++) {
      double a[32][4][2], b[32][4][2];
      load_a_fragments(smem, ns, s, q, ks, a);
      for (int nt = 0; nt < 3; nt++) {
        for (int lane = 0; lane < 32; lane++)
          for (int half = 0; half < 2; half++)
            for (int e = 0; e < 2; e++)
              b[lane][half][e] = fn[sk_mhc_b_mix(nt, lane)][s * H + TILE * 256 + sk_mhc_b_col(q, ks, half, lane) + e];
        mma(acc[nt], a, b);
      }
    }
    for (int nt = 0; nt < 3; nt++)
      for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) proj[w][sk_mhc_c_token(i, lane)][sk_mhc_c_mix(nt, i, lane)] = acc[nt][lane][i];
  }
  for (int unit = 0; unit < 16; unit++) {
    const int quad = unit / 4, gq = unit % 4;
    double acc[2][32][4];
    memset(acc, 0, sizeof acc);
    for (int ks = 0; ks < SK_MHC_WARP_KSTEPS; ks++) {
      int addr[32];
      for (int lane = 0; lane < 32; lane++) {
        const int ar = sk_mhc_a_row(lane);
        addr[lane] = sk_mhc_chunk_index(ns, 4 * quad + ar / 4, sk_mhc_gram_stream(ns, ar), sk_mhc_a_chunk(gq, ks, lane)) * 8;
      }
      if (ns == 4) check_conflict_free(addr, 4);
      double a[32][4][2];
      ldmatrix(smem, addr, 4, a);
      for (int j = 0; j < 2; j++) {
        int baddr[32];
        for (int lane = 0; lane < 32; lane++) {
          const int br = sk_mhc_gram_b_row(lane);
          baddr[lane] =
              sk_mhc_chunk_index(ns, 4 * quad + 2 * j + br / 4, sk_mhc_gram_stream(ns, br), sk_mhc_gram_b_chunk(gq, ks, lane)) * 8;
        }
        if (ns == 4) check_conflict_free(baddr, 2);
        double b[32][4][2];
        ldmatrix(smem, baddr, 2, b);
        mma(acc[j], a, b);
      }
    }
    for (int j = 0; j < 2; j++)
      for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
          const int ga = sk_mhc_gram_a(lane), gb = sk_mhc_gram_b(i, lane);
          if (sk_mhc_gram_useful(j, i, lane) && ga <= gb) {
            const int tk = 4 * quad + sk_mhc_gram_token(j, lane), pair = sk_mhc_gram_pair(ga, gb);
            gram[gq][tk][pair] = acc[j][lane][i];
            gram_written[gq][tk][pair]++;
          }
        }
  }
  static const int pa[10] = {0, 1, 2, 3, 0, 0, 0, 1, 1, 2}, pb[10] = {0, 1, 2, 3, 1, 2, 3, 2, 3, 3};
  for (int tk = 0; tk < G; tk++) {
    for (int m = 0; m < 24; m++) {
      double want = 0, got = 0;
      for (int s = 0; s < ns; s++)
        for (int h = 0; h < 256; h++) want += fn[m][s * H + TILE * 256 + h] * r[tk][s][h];
      for (int w = 0; w < warps; w++) got += proj[w][tk][m];
      cr_assert(fabs(got - want) <= 1e-9 * (1 + fabs(want)), "ns %d token %d mix %d: %g vs %g", ns, tk, m, got, want);
    }
    for (int p = 0; p < 10; p++) {
      const int sa = ns == 1 ? 0 : pa[p], sb = ns == 1 ? 0 : pb[p];
      double want = 0, got = 0;
      for (int h = 0; h < 256; h++) want += r[tk][sa][h] * r[tk][sb][h];
      for (int q = 0; q < 4; q++) {
        cr_assert_eq(gram_written[q][tk][p], 1, "gram slot q %d token %d pair %d written %d times", q, tk, p,
                     gram_written[q][tk][p]);
        got += gram[q][tk][p];
      }
      cr_assert(fabs(got - want) <= 1e-9 * (1 + fabs(want)), "ns %d token %d pair %d: %g vs %g", ns, tk, p, got, want);
    }
  }
}

Test(mhc_emulation, pre_group_projection_and_gram) { emulate_group(1); }
Test(mhc_emulation, post_pre_group_projection_and_gram) { emulate_group(4); }

/* ---- run_pre's projection kernel (2d): one warp, one group, the whole 256-wide tile -------------
 * fn_pre's tile is scattered row-major into per-lane B fragments with the inverse functions
 * (sk_mhc_b_kstep / _half / _lane), A comes by ldmatrix at sk_mhc_a_chunk for the tile's 16
 * k-steps, Sum x^2 is the diagonal of A A^T with B = {a0, a2} / {a1, a3}, and the partial row is
 * written through c_token / c_mix and the self-Gram holder: against direct sums, every slot once. */
Test(mhc_emulation, pre_projection_warp_group) {
  enum { KSTEPS = 16 };
  static double x[G][256], fn[24][256], smem[G * CH * 8], frag[KSTEPS][32][3][2][2];
  static int frag_written[KSTEPS][32][3][2];
  uint32_t seed = 4242u;
  for (int tk = 0; tk < G; tk++)
    for (int h = 0; h < 256; h++) {
      seed = seed * 1664525u + 1013904223u;
      x[tk][h] = (double)((int)(seed >> 24) - 128) / 16.0;
    }
  for (int m = 0; m < 24; m++)
    for (int c = 0; c < 256; c++) {
      seed = seed * 1664525u + 1013904223u;
      fn[m][c] = (double)((int)(seed >> 22) - 512) / 1024.0;
    }
  /* The fill: every even column pair of every mix lands in exactly one (k-step, lane, n-tile, half). */
  memset(frag_written, 0, sizeof frag_written);
  for (int mix = 0; mix < 24; mix++)
    for (int col = 0; col < 256; col += 2) {
      const int ks = sk_mhc_b_kstep(col), l = sk_mhc_b_lane(mix, col), nt = mix / 8, half = sk_mhc_b_half(col);
      cr_assert(ks >= 0 && ks < KSTEPS && l >= 0 && l < 32 && half >= 0 && half < 2, "mix %d col %d out of range", mix, col);
      cr_assert_eq(sk_mhc_b_col(ks / 4, ks % 4, half, l), col, "mix %d col %d: b_col does not invert", mix, col);
      cr_assert_eq(sk_mhc_b_mix(nt, l), mix, "mix %d col %d: b_mix does not invert", mix, col);
      frag[ks][l][nt][half][0] = fn[mix][col];
      frag[ks][l][nt][half][1] = fn[mix][col + 1];
      frag_written[ks][l][nt][half]++;
    }
  for (int ks = 0; ks < KSTEPS; ks++)
    for (int l = 0; l < 32; l++)
      for (int nt = 0; nt < 3; nt++)
        for (int half = 0; half < 2; half++)
          cr_assert_eq(frag_written[ks][l][nt][half], 1, "fragment ks %d lane %d nt %d half %d", ks, l, nt, half);
  memset(smem, 0, sizeof smem);
  for (int tk = 0; tk < G; tk++)
    for (int c = 0; c < CH; c++)
      for (int e = 0; e < 8; e++) smem[sk_mhc_chunk_index(1, tk, 0, c) * 8 + e] = x[tk][c * 8 + e];
  double acc[3][32][4], gram[2][32][4];
  memset(acc, 0, sizeof acc);
  memset(gram, 0, sizeof gram);
  for (int ks = 0; ks < KSTEPS; ks++) {
    double a[32][4][2], b[32][4][2];
    load_a_fragments(smem, 1, 0, ks / 4, ks % 4, a);
    for (int nt = 0; nt < 3; nt++) {
      for (int lane = 0; lane < 32; lane++)
        for (int half = 0; half < 2; half++)
          for (int e = 0; e < 2; e++) b[lane][half][e] = frag[ks][lane][nt][half][e];
      mma(acc[nt], a, b);
    }
    for (int j = 0; j < 2; j++) {
      for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 2; e++) {
          b[lane][0][e] = a[lane][j][e];     /* a0 / a1 */
          b[lane][1][e] = a[lane][2 + j][e]; /* a2 / a3 */
        }
      mma(gram[j], a, b);
    }
  }
  static double row[G][36];
  static int written[G][36];
  memset(written, 0, sizeof written);
  for (int lane = 0; lane < 32; lane++) {
    const int row0 = sk_mhc_c_token(0, lane), mix0 = sk_mhc_c_mix(0, 0, lane);
    for (int r = 0; r < 2; r++) {
      const int tk = row0 + 8 * r;
      for (int nt = 0; nt < 3; nt++)
        for (int e = 0; e < 2; e++) {
          row[tk][nt * 8 + mix0 + e] = acc[nt][lane][2 * r + e];
          written[tk][nt * 8 + mix0 + e]++;
        }
      if (sk_mhc_self_gram_holder(lane))
        for (int p = 24; p < 36; p++) {
          row[tk][p] = p < 34 ? gram[r][lane][sk_mhc_self_gram_acc(r, lane)] : 0.0;
          written[tk][p]++;
        }
    }
  }
  for (int tk = 0; tk < G; tk++) {
    double sumsq = 0;
    for (int h = 0; h < 256; h++) sumsq += x[tk][h] * x[tk][h];
    for (int p = 0; p < 36; p++) {
      cr_assert_eq(written[tk][p], 1, "token %d slot %d written %d times", tk, p, written[tk][p]);
      double want = p < 24 ? 0 : p < 34 ? sumsq : 0;
      if (p < 24)
        for (int h = 0; h < 256; h++) want += fn[p][h] * x[tk][h];
      cr_assert(fabs(row[tk][p] - want) <= 1e-9 * (1 + fabs(want)), "token %d slot %d: %g vs %g", tk, p, row[tk][p], want);
    }
  }
}

/* ---- fn = hi + mid + lo (bf16, round to nearest even) is exact ---------------------------------- */
static float bf16_rn(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

Test(mhc_emulation, three_term_bf16_split_of_fp32_is_exact) {
  uint32_t seed = 7;
  for (int i = 0; i < 1000000; i++) {
    seed = seed * 1664525u + 1013904223u;
    /* normal floats of either sign, exponents 2^-100 .. 2^27 */
    uint32_t bits = (seed & 0x807fffffu) | ((uint32_t)(27 + (seed >> 8) % 128) << 23);
    float f;
    memcpy(&f, &bits, 4);
    const float hi = bf16_rn(f), r1 = f - hi, mid = bf16_rn(r1), r2 = r1 - mid, lo = bf16_rn(r2);
    cr_assert_eq(lo, r2, "lo not exact for %a", (double)f);
    cr_assert_eq((double)hi + (double)mid + (double)lo, (double)f, "split of %a is not exact", (double)f);
  }
}

/* The kernels step a lane's ldmatrix row address from k-step 0 to k-step ks by one XOR
 * (sk_mhc_kstep_offset) instead of recomputing the swizzled chunk index: check that identity for
 * every row the projection and the Gram MMAs address (both NS), every quarter, k-step and lane. */
Test(mhc_emulation, kstep_offset_steps_every_ldmatrix_row) {
  int checked = 0;
  for (int ns = 1; ns <= 4; ns *= 4)
    for (int token = 0; token < SK_MHC_GROUP; token++)
      for (int stream = 0; stream < ns; stream++)
        for (int quarter = 0; quarter < 4; quarter++)
          for (int lane = 0; lane < 32; lane++)
            for (int ks = 0; ks < SK_MHC_WARP_KSTEPS; ks++) {
              const int a0 = 16 * sk_mhc_chunk_index(ns, token, stream, sk_mhc_a_chunk(quarter, 0, lane));
              const int a = 16 * sk_mhc_chunk_index(ns, token, stream, sk_mhc_a_chunk(quarter, ks, lane));
              cr_assert_eq(sk_mhc_kstep_offset(a0, ks), a, "A ns %d token %d stream %d q %d lane %d ks %d", ns, token,
                           stream, quarter, lane, ks);
              const int b0 = 16 * sk_mhc_chunk_index(ns, token, stream, sk_mhc_gram_b_chunk(quarter, 0, lane));
              const int b = 16 * sk_mhc_chunk_index(ns, token, stream, sk_mhc_gram_b_chunk(quarter, ks, lane));
              cr_assert_eq(sk_mhc_kstep_offset(b0, ks), b, "Gram B ns %d token %d stream %d q %d lane %d ks %d", ns,
                           token, stream, quarter, lane, ks);
              /* 128-byte aligned buffers keep it: the offsets never carry into bit 7. */
              cr_assert_eq((1024 + a0) ^ (ks << 5), 1024 + a);
              /* The projection kernel (2d, NS = 1, 16 k-steps): quarter q of the tile is 128 bytes
               * a step on top of quarter 0's rows, which the swizzle does not touch. */
              const int q0 = 16 * sk_mhc_chunk_index(ns, token, stream, sk_mhc_a_chunk(0, 0, lane));
              cr_assert_eq(sk_mhc_kstep_offset(q0, ks) + 128 * quarter, a, "2d A q %d ks %d", quarter, ks);
              checked++;
            }
  cr_assert_eq(checked, (1 * 16 + 4 * 16) * 4 * 32 * SK_MHC_WARP_KSTEPS);
}
