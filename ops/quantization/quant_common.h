/* ops/quantization/quant_common.h - what quantization.nvfp4 and quantization.mxfp8 share: caps
 * rules, caps <-> JSON, the kernel selection, the tensor tables, bind. Each op's file adds its
 * definition and run. */
#ifndef SK_QUANT_COMMON_H
#define SK_QUANT_COMMON_H

#include "op.h"
#include "sparkinfer/quantization.h"

typedef enum quant_kind { QUANT_NVFP4 = 0, QUANT_MXFP8 = 1 } quant_kind;

/* Kernel slots of a plan. */
enum {
  QK_ROWS_GIVEN = 0,   /* nvfp4_rows<..., given> / mxfp8_rows<...> */
  QK_ROWS_PARTIALS,    /* nvfp4_rows<..., from partials> */
  QK_AMAX_PARTIALS,    /* nvfp4_amax_partials<T> */
  QK_COUNT
};

/* Tensor order of the "quantize" entry (nvfp4 has all five; mxfp8 the first four). */
enum { QT_X, QT_VALUES, QT_SCALES_SWIZZLED, QT_SCALES_ROWS, QT_GLOBAL_SCALE };

typedef struct quant_plan_state {
  quant_kind kind;
  int sm_count;                  /* the selection's (props) */
  int chunks_per_thread;         /* 1..64, see quant_rows_grid */
  int amax_region;               /* scratch region of the amax partials, -1 if none */
} quant_plan_state;

typedef struct quant_bound {
  int m;
  sk_dim3 grid;                  /* the rows kernel's */
  int partials;                  /* nvfp4 computed global scale: amax partial CTAs (0: given) */
} quant_bound;

#define QUANT_THREADS 256       /* kNvfp4Threads / kMxfp8Threads (SK_QSPLIT_THREADS) */
#define QUANT_MAX_PARTIALS 1024 /* kMaxAmaxPartials */
#define QUANT_CHUNKS_PER_STEP 4 /* SK_QSPLIT_PER_STEP (ops/quantization/split.cuh): one unit */

extern const sk_quant_caps quant_caps_defaults;
sk_status quant_check_caps(quant_kind kind, sk_quant_caps *caps);
#define QUANT_CAPS_FIELDS 6
extern const sk_caps_field quant_caps_fields[QUANT_CAPS_FIELDS]; /* both quantizers' caps JSON */
sk_status quant_select(quant_kind kind, sk_plan *p);
sk_status quant_bind(sk_binding *b);

/* Grid of the rows kernels (sk_qsplit_grid_y, ops/quantization/split.cuh): units of 128 rows x
 * one k-tile (QUANT_CHUNKS_PER_STEP chunks per thread each); x = the k-tiles, y = the slabs over
 * about chunks_per_thread / 4 units per CTA; never fewer than min(units, 4 per SM) CTAs in all.
 * block = values per scale (16 nvfp4, 32 mxfp8), chunks_per_thread <= 0 = the step default,
 * sm_count <= 0 = 128. gemm.mxfp8_linear launches the mxfp8 rows kernel with it too. */
sk_dim3 quant_rows_grid(int64_t m, int64_t k, int block, int chunks_per_thread, int sm_count);

/* The definition of one quantizer (nvfp4.c, mxfp8.c): what differs is named. */
#define QUANT_OP_DEF(name, summary, entries_, check_, select_, run_)                                \
  {                                                                                                \
    SK_OP_INFO(name, summary, 89), SK_OP_CAPS(sk_quant_caps, quant_caps_defaults),                 \
    SK_OP_STATE(quant_plan_state, quant_bound), .num_kernels = QK_COUNT, .entries = entries_,       \
    .num_entries = 1, SK_OP_FIELDS(quant_caps_fields), .check_caps = check_, .select = select_,     \
    .bind = quant_bind, .run = run_,                                                                \
  }

#endif
