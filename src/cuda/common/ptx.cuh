// SPDX-License-Identifier: Apache-2.0
// Thin wrappers over the Hopper (sm_90a) instructions the scoring and top-k kernels use: a
// predicated shared store, mbarriers, TMA bulk tensor copies and L2 prefetches, wgmma fences and
// shared-memory matrix descriptors, a relaxed cluster barrier, setmaxnreg, and the
// programmatic-dependent-launch controls every kernel launched by launch.h uses.
//
// Each wrapper is one PTX instruction (or a try-wait loop around one); the semantics are the
// PTX ISA's. Shared-memory addresses are 32-bit `shared::cta` addresses (`smem_address`).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace flashindexer::cuda::ptx {

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Stores `value` at a shared address when `take` holds: a predicated store, with no branch
// around it for the compiler to build.
__device__ __forceinline__ void store_shared_if(bool take, uint32_t address, uint64_t value) {
  asm volatile(
      "{\n"
      ".reg .pred take;\n"
      "setp.ne.b32 take, %0, 0;\n"
      "@take st.shared.u64 [%1], %2;\n"
      "}\n" ::"r"(static_cast<uint32_t>(take)),
      "r"(address), "l"(value)
      : "memory");
}

// ---- mbarrier -------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(barrier)),
               "r"(arrivals));
}

// Makes the initialised barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_address(barrier))
               : "memory");
}

// Orders this thread's earlier shared-memory accesses through the generic proxy (ld.shared) before
// the async-proxy accesses (TMA writes) that synchronise with its later barrier arrivals: without
// it a stage released right after an ld.shared may be refilled by TMA before the load has read it.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Arrives and announces `bytes` of TMA transactions that must land before the phase completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(
                   smem_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Blocks until the phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_address(barrier)),
      "r"(parity)
      : "memory");
}

// ---- TMA ------------------------------------------------------------------------------------

// Asks L2 for `bytes` (a multiple of 16) of global memory from `global` (16-byte aligned): one
// bulk request, no destination, no completion to wait for.
__device__ __forceinline__ void prefetch_l2_bulk(const void* global, uint32_t bytes) {
  const uint64_t address = reinterpret_cast<uint64_t>(global);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(address), "r"(bytes) : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

__device__ __forceinline__ void tma_load_1d(void* dst, const CUtensorMap* map, uint64_t* barrier,
                                            int32_t c0) {
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3}], [%2];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0)
      : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* barrier,
                                            int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* barrier,
                                            int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* barrier,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3)
      : "memory");
}

// An L2 policy for data read once (a decode call's K cache): its lines are the first evicted, so
// that what the call writes and reads back stays in L2 rather than the stream pushing it out.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void tma_load_2d_hinted(void* dst, const CUtensorMap* map,
                                                   uint64_t* barrier, int32_t c0, int32_t c1,
                                                   uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0), "r"(c1),
      "l"(policy)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d_hinted(void* dst, const CUtensorMap* map,
                                                   uint64_t* barrier, int32_t c0, int32_t c1,
                                                   int32_t c2, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0), "r"(c1), "r"(c2),
      "l"(policy)
      : "memory");
}

// ---- wgmma ----------------------------------------------------------------------------------

// Orders register accesses to the accumulators before the wgmma that follows.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
__device__ __forceinline__ void fence_operand(float& value) {
  asm volatile("" : "+f"(value)::"memory");
}
__device__ __forceinline__ void fence_operand(uint32_t& value) {
  asm volatile("" : "+r"(value)::"memory");
}

// Shared-memory matrix descriptor for a K-major tile whose rows are 128 bytes, written by TMA
// with the 128-byte swizzle: 8-row groups 1024 bytes apart (stride byte offset), leading byte
// offset unused, layout type 1 (128B swizzle). The tile base must be 1024-byte aligned; a
// k-step of 32 e4m3 values advances the start address by 32 bytes inside the swizzled row.
constexpr uint64_t kDescriptorLeadingByteOffset = 1;         // unused by swizzled K-major layouts
constexpr uint64_t kDescriptorStrideByteOffset = 1024 >> 4;  // 8 rows x 128 bytes
constexpr uint64_t kDescriptorSwizzle128 = 1;
constexpr uint32_t kDescriptorHighWord = static_cast<uint32_t>(
    ((kDescriptorStrideByteOffset << 32) | (kDescriptorSwizzle128 << 62)) >> 32);
__device__ __forceinline__ uint64_t smem_descriptor_k128_swizzle128(const void* tile,
                                                                    uint32_t byte_offset) {
  const uint64_t start = (smem_address(tile) + byte_offset) >> 4;
  return (uint64_t{kDescriptorHighWord} << 32) | (start & 0x3FFF) |
         (kDescriptorLeadingByteOffset << 16);
}

// The descriptor of the same layout `bytes` further on (a multiple of 16). The start address
// field holds address >> 4 in the low 14 bits: every shared-memory address (< 256 KiB) fits, so
// the sum never carries out of the low word, and the high word (the constant stride and swizzle
// fields) is rebuilt as a constant: a 32-bit add, not a 64-bit one with a carry. The consumer
// loop of the scoring kernel issues 16 descriptors per key tile.
__device__ __forceinline__ uint64_t smem_descriptor_advance(uint64_t descriptor, uint32_t bytes) {
  return (uint64_t{kDescriptorHighWord} << 32) | (static_cast<uint32_t>(descriptor) + (bytes >> 4));
}

// ---- cluster barrier ------------------------------------------------------------------------

// Arrives at the cluster barrier without ordering this thread's earlier memory accesses: no
// release fence (the default arrive's MEMBAR.ALL.GPU). Only for an arrival that tells the other
// CTAs they may exit, once every value this CTA read from their shared memory has been used.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait;" ::: "memory");
}

// ---- registers ------------------------------------------------------------------------------

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// ---- byte permute ---------------------------------------------------------------------------

// prmt.b32: byte k of the result is byte (selector >> 4k) & 7 of the eight bytes {high, low}
// (low's are 0-3), or that byte's sign bit replicated when bit 3 of the nibble is set. Unlike
// __byte_perm, the selector is passed as is: callers whose selectors never set bit 3 (the MXFP4
// conversion, sm90_scoring/format_mxfp4.cuh) save the mask the intrinsic adds before each one.
__device__ __forceinline__ uint32_t byte_permute(uint32_t low, uint32_t high, uint32_t selector) {
  uint32_t result;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(result) : "r"(low), "r"(high), "r"(selector));
  return result;
}

// ---- asynchronous copies to shared memory ---------------------------------------------------

// Copies 8 bytes from global to shared memory without holding them in a register (LDGSTS):
// a thread can have all its copies in flight at once. Complete with cp_async_wait_all().
__device__ __forceinline__ void cp_async_8(void* shared, const void* global) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_address(shared)), "l"(global)
               : "memory");
}

// The same for 16 bytes (both addresses 16-byte aligned); L2 only (.cg): the data is read once.
__device__ __forceinline__ void cp_async_16(void* shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_address(shared)), "l"(global)
               : "memory");
}

// The same for 4 bytes (both addresses 4-byte aligned).
__device__ __forceinline__ void cp_async_4(void* shared, const void* global) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_address(shared)), "l"(global)
               : "memory");
}

// Arrives on `barrier` once every cp.async this thread issued before it has landed, without
// raising the barrier's expected count (.noinc): the barrier is initialised to count these.
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(barrier))
               : "memory");
}

// Waits for this thread's cp_async_8 / cp_async_16 copies; a barrier then makes them visible to
// the CTA.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// ---- programmatic dependent launch (launch.h) ------------------------------------------------

// Waits until the grid this one was launched after has completed and its writes are visible.
// A no-op in a kernel not launched as a programmatic dependent.
__device__ __forceinline__ void wait_prior_grids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace flashindexer::cuda::ptx
