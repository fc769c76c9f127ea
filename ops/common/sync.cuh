// Inter-CTA signalling through global memory at GPU scope (PTX memory model, sm_70+): a release
// add publishes the calling thread's earlier writes to whoever acquires the counter value it
// produced. Used by kernels whose CTAs hand partial results to each other within one launch.
#pragma once
#include "common/defs.cuh"

namespace sk {

// Atomic add with release semantics at GPU scope; returns the previous value.
SK_DEVICE u32 atomic_add_release_gpu(u32* counter, u32 value) {
  u32 previous;
  asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(previous) : "l"(counter), "r"(value) : "memory");
  return previous;
}

// Atomic add with acquire-release semantics at GPU scope; returns the previous value. The caller
// publishes its earlier writes (release) and, when it learns from the value that it arrived last,
// sees every write the earlier arrivals published before their adds (acquire).
SK_DEVICE u32 atomic_add_acq_rel_gpu(u32* counter, u32 value) {
  u32 previous;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], %2;" : "=r"(previous) : "l"(counter), "r"(value) : "memory");
  return previous;
}

// Load with acquire semantics at GPU scope: later loads of this thread see every write that a
// release (by any CTA) published before producing the value read.
SK_DEVICE u32 load_acquire_gpu(const u32* counter) {
  u32 value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// Nanoseconds of the GPU's global timer (for timeouts, not for measurements).
SK_DEVICE u64 global_timer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spin until *counter >= target (acquire), every calling thread loading for itself. Traps after
// `timeout_ns` so that a broken contract (a counter that can never reach target) fails the
// launch instead of hanging the GPU.
SK_DEVICE void wait_until_at_least(const u32* counter, u32 target, u64 timeout_ns) {
  if (load_acquire_gpu(counter) >= target) return;
  const u64 start = global_timer_ns();
  while (load_acquire_gpu(counter) < target)
    if (global_timer_ns() - start > timeout_ns) __trap();
}

// Programmatic dependent launch (sm_90+; the host's SK_LAUNCH_OVERLAP_PREVIOUS). A kernel
// launched that way may start while the previous kernel in the stream still runs:
// pdl_wait_for_previous() blocks until that kernel has completed and its writes are visible, and
// must come before anything the previous work touches is read or written.
// pdl_launch_dependents() lets the next (programmatically launched) kernel be scheduled as soon
// as every CTA of this one has executed it. Both are no-ops for a plain launch and below sm_90.
SK_DEVICE void pdl_wait_for_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
SK_DEVICE void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// The prologue of a kernel that reads nothing before waiting: both of the above, waiting FIRST.
// Triggering before the wait lets chains of small kernels launch ahead one after another, their
// waiting CTAs crowding the SMs (much slower graph replays of mhc at T = 128 and of quantizer +
// GEMM pairs); after the wait at most the next kernel is resident.
SK_DEVICE void pdl_enter() {
  pdl_wait_for_previous();
  pdl_launch_dependents();
}

}  // namespace sk
