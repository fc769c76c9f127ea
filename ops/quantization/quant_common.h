/* runtime/ops/quantization/quant_common.h - what quantization.nvfp4 and quantization.mxfp8 share:
 * caps checking, caps <-> JSON, kernel names, the plan object. */
#ifndef SK_QUANT_COMMON_H
#define SK_QUANT_COMMON_H

#include "op.h"
#include "sparkinfer/quantization.h"

typedef enum quant_kind { QUANT_NVFP4 = 0, QUANT_MXFP8 = 1 } quant_kind;

/* Kernel indices inside a plan. */
enum {
  QK_ROWS_GIVEN = 0,   /* nvfp4_rows<..., given> / mxfp8_rows<...> */
  QK_ROWS_PARTIALS,    /* nvfp4_rows<..., from partials> */
  QK_AMAX_PARTIALS,    /* nvfp4_amax_partials<T> */
  QK_COUNT
};

struct sk_quant_plan {
  quant_kind kind;
  const char *op;
  sk_quant_caps caps;            /* arch points at `arch` below */
  char arch[SK_MAX_ARCH];
  sk_kernel *kernels[QK_COUNT];  /* NULL where the plan's mode never launches it */
  sk_scratch_layout scratch;
  int amax_region;               /* scratch region of the amax partials, -1 if none */
  int sm_count;
  int chunks_per_thread;         /* 1..64, see quant_grid */
};

#define QUANT_THREADS 256       /* kNvfp4Threads / kMxfp8Threads (SK_QSPLIT_THREADS) */
#define QUANT_MAX_PARTIALS 1024 /* kMaxAmaxPartials */
#define QUANT_CHUNKS_PER_STEP 4 /* SK_QSPLIT_PER_STEP (ops/quantization/split.cuh): one unit */

/* Caps check for `kind` (fills a normalised copy). */
sk_status quant_check_caps(quant_kind kind, const sk_quant_caps *caps, sk_quant_caps *out);
/* The kernel name expressions a plan with `caps` needs, for `arch`: names[i] for QK_* (empty
 * string when unused). */
void quant_kernel_names(quant_kind kind, const sk_quant_caps *caps, const char *arch, char names[QK_COUNT][160],
                        char params[160]);
/* Create a plan: check, resolve, lay out scratch. */
sk_status quant_plan_create(quant_kind kind, const sk_quant_caps *caps, sk_quant_plan **out);
/* caps <-> JSON for manifests and the warm-up record. */
struct cJSON *quant_caps_to_json(const sk_quant_caps *caps);
sk_status quant_caps_from_json(const struct cJSON *j, sk_quant_caps *caps);
sk_status quant_build_requests(quant_kind kind, const struct cJSON *caps, const char *arch, sk_request_list *out);
bool quant_is_supported(quant_kind kind, const char *arch);
/* Bind the parts both ops share (x, values, scales); returns M and fills ptr[0..3], dim[0] (M)
 * and dim[2] / dim[4] (the rows kernel's grid x / y, quant_grid). */
sk_status quant_bind_common(const sk_quant_plan *p, const DLTensor *x, const DLTensor *values,
                            const DLTensor *scales_swizzled, const DLTensor *scales_rows, sk_binding *b,
                            int64_t *m_out);

/* The rows kernel's grid that quant_bind_common stored in a binding. */
static inline sk_dim3 quant_bound_grid(const sk_binding *b) {
  return (sk_dim3){(unsigned)b->dim[2], (unsigned)b->dim[4], 1};
}
/* Grid of the rows kernels (sk_qsplit_grid_y, ops/quantization/split.cuh): units of 128
 * rows x one k-tile (QUANT_CHUNKS_PER_STEP chunks per thread each); x = the k-tiles, y = the slabs
 * over about chunks_per_thread / 4 units per CTA (SPARKINFER_QUANT_CHUNKS_PER_THREAD; never fewer
 * than min(units, 4 per SM) CTAs in all). See the kernels' launch contracts. */
sk_dim3 quant_grid(const sk_quant_plan *p, int64_t m);
/* The same grid without a plan (gemm.mxfp8_linear launches the mxfp8 rows kernel directly):
 * block = values per scale (16 nvfp4, 32 mxfp8), chunks_per_thread <= 0 = the step default,
 * sm_count <= 0 = unknown. */
sk_dim3 quant_rows_grid(int64_t m, int64_t k, int block, int chunks_per_thread, int sm_count);
/* Each op's launches (binding already checked). */
sk_status quant_nvfp4_run(const sk_quant_plan *p, const sk_binding *b, void *stream);
sk_status quant_mxfp8_run(const sk_quant_plan *p, const sk_binding *b, void *stream);

#endif
