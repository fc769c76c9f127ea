/* runtime/arch.c - the arch table kernel selection reads (op.h, sk_arch_props). Figures are
 * vendor specifications: SM count, the largest shared memory one block can opt in to and one SM
 * holds (CUDA programming guide, compute capabilities), DRAM bandwidth. Only sm_90 (H200) has
 * been measured by this project; the rest are what selection derives its choices from. */
#include <string.h>

#include "op.h"

typedef struct arch_device {
  int cc;
  const char *device;
  int sm_count;
  unsigned smem_per_block, smem_per_sm;
  double dram_gbps;
} arch_device;

#define KIB 1024u
/* The first device of an arch is the one offline plans (an explicit arch, no such GPU present)
 * use; manifests build the union over all of an arch's devices. */
static const arch_device table[] = {
    {80, "A100", 108, 163 * KIB, 164 * KIB, 2039},
    {86, "RTX 3090", 82, 99 * KIB, 100 * KIB, 936},
    {89, "RTX 4090", 128, 99 * KIB, 100 * KIB, 1008},
    {90, "H200", 132, 227 * KIB, 228 * KIB, 4800},
    {90, "H100 SXM", 132, 227 * KIB, 228 * KIB, 3350},
    {100, "B200", 148, 227 * KIB, 228 * KIB, 8000},
    {120, "RTX 5090", 170, 99 * KIB, 100 * KIB, 1792},
    {120, "RTX PRO 6000", 188, 99 * KIB, 100 * KIB, 1792},
    {121, "DGX Spark", 48, 99 * KIB, 100 * KIB, 273},
};

static sk_arch_props props_of(const char *arch, const arch_device *d) {
  sk_arch_props p = {{0}, d->cc, d->device, d->sm_count, d->smem_per_block, d->smem_per_sm, d->dram_gbps, 0};
  sk_strlcpy(p.arch, arch, sizeof p.arch);
  return p;
}

size_t sk_arch_table_devices(const char *arch, sk_arch_props *out, size_t cap) {
  const int cc = sk_arch_number(arch);
  size_t n = 0;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].cc == cc && n < cap) out[n++] = props_of(arch, &table[i]);
  if (n == 0 && cap > 0) {
    const unsigned smem = sk_arch_block_smem_limit(arch);
    const arch_device generic = {cc, "generic", 128, smem, smem + KIB, 1000};
    out[n++] = props_of(arch, &generic);
  }
  return n;
}

sk_status sk_arch_props_for(const char *arch, sk_arch_props *out) {
  if (!sk_arch_valid(arch)) return sk_set_error(SK_ERR_INVALID_ARGUMENT, "arch \"%.32s\" is not of the form sm_NN[a|f]", arch);
  sk_arch_table_devices(arch, out, 1);
  /* The present device, when it is this arch: its own SM count (GPUs of one arch differ). */
  char dev[SK_MAX_ARCH];
  int sms = 0;
  if (sk_device_arch(-1, dev, sizeof dev) == SK_OK && sk_arch_number(dev) == sk_arch_number(arch) &&
      sk_device_sm_count(&sms) == SK_OK && sms > 0) {
    out->sm_count = sms;
    out->device = "this device";
    out->measured = 1;
  }
  sk_clear_error();
  return SK_OK;
}
