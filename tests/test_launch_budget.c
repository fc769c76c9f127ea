/* The driver calls of the hot paths, counted on the stub driver (tests/stub/stub.h; no GPU): a
 * serving loop's sk_run of a bound plan is one cuLaunchKernelEx and nothing else, the one-shot
 * sk_gemm_mm one launch plus one cuCtxGetCurrent (its plan cache is per device), and a rebind of
 * the same layouts touches no driver at all. Each driver call costs real time on a real driver, so
 * a new one on these paths is a regression this suite names. */
#include "sparkinfer/gemm.h"
#include "stub/stub.h"

Test(launch_budget, gemm_run_and_one_shot, .init = stub_setup) {
  int64_t as[2] = {1, 128}, bs[2] = {128, 128}, cs[2] = {1, 128};
  const DLDataType u8 = {kDLUInt, 8, 1}, bf = {kDLBfloat, 16, 1};
  DLTensor a = tu_fake_device_tensor(0x7000000000, u8, 2, as), b = tu_fake_device_tensor(0x7000100000, u8, 2, bs), c = tu_fake_device_tensor(0x7000200000, bf, 2, cs);
  void *stream = (void *)0x1000;
  sk_gemm_caps caps = SK_GEMM_CAPS_INIT;
  caps.recipe = SK_GEMM_TENSOR_FP8;
  caps.n = caps.k = 128;
  caps.max_m = 1;
  sk_plan *p;
  sk_binding *bind;
  cr_assert_eq(sk_plan_create("gemm.blockscaled", &caps, &p), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(sk_binding_create(p, "mm", &bind), SK_OK);
  const DLTensor *t[6] = {&a, NULL, &b, NULL, NULL, &c};
  cr_assert_eq(sk_bind(bind, t, 6, NULL, 0), SK_OK, "%s", sk_last_error_message());
  cr_assert_eq(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &a, NULL, &b, NULL, NULL, &c, NULL, 0, stream), SK_OK, "%s", sk_last_error_message());

  unsigned long long total = stub_calls_total(), launches = stub_calls("cuLaunchKernelEx");
  for (int i = 0; i < 10; i++) cr_assert_eq(sk_run(bind, stream), SK_OK);
  cr_expect_eq(stub_calls("cuLaunchKernelEx") - launches, 10, "sk_run: one cuLaunchKernelEx a call");
  cr_expect_eq(stub_calls_total() - total, 10, "sk_run: no driver call besides the launch");

  total = stub_calls_total();
  for (int i = 0; i < 10; i++) {
    c.data = (void *)(0x7000200000 + 4096 * (uintptr_t)i); /* new addresses, same layouts */
    cr_assert_eq(sk_bind(bind, t, 6, NULL, 0), SK_OK);
  }
  cr_expect_eq(stub_calls_total() - total, 0, "sk_bind touches no driver");

  total = stub_calls_total(), launches = stub_calls("cuLaunchKernelEx");
  const unsigned long long ctx = stub_calls("cuCtxGetCurrent");
  for (int i = 0; i < 10; i++)
    cr_assert_eq(sk_gemm_mm(SK_GEMM_TENSOR_FP8, &a, NULL, &b, NULL, NULL, &c, NULL, 0, stream), SK_OK);
  cr_expect_eq(stub_calls("cuLaunchKernelEx") - launches, 10, "sk_gemm_mm: one launch a call");
  cr_expect_eq(stub_calls("cuCtxGetCurrent") - ctx, 10, "sk_gemm_mm: one cuCtxGetCurrent a call");
  cr_expect_eq(stub_calls_total() - total, 20, "sk_gemm_mm: no other driver call");
  sk_binding_destroy(bind);
  sk_plan_destroy(p);
}
