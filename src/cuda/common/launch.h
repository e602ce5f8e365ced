// SPDX-License-Identifier: Apache-2.0
// Kernel launches as programmatic dependents of the work before them on the stream.
//
// An indexer call is a chain of kernels (scoring, then top-k; the fused path's sample, gate,
// scan, fallback and select), several of them a few microseconds long at decode batch sizes.
// Launched with programmatic stream serialization, a kernel is launched as the one before it
// drains instead of after it has completed, and each of its CTAs waits in
// ptx::wait_prior_grids() for that completion: so every kernel launched here calls
// wait_prior_grids() before it reads or writes global memory. Graph capture keeps these as
// programmatic edges. No kernel asks for an earlier launch (griddepcontrol.launch_dependents):
// measured on an H200 (graphs of 10 indexer calls), triggering at each kernel's start took
// another 0.5-3 us off decode at batch 1 but made the fused decode at batch 64 x 131072 keys
// 3-5 % slower; without it, batch 1 gains 0.5 us (dense) to 1.3 us (fused) and batch 64 is
// unchanged.
#pragma once

#include <cuda_runtime.h>

namespace flashindexer::cuda {

// Launches kernel<<<grid, block, shared_bytes, stream>>>(args...) as a programmatic dependent;
// cluster_y > 0 adds a (1, cluster_y, 1) thread-block cluster.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                             cudaStream_t stream, unsigned cluster_y, const Args&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attributes;
  config.numAttrs = 1;
  if (cluster_y > 0) {
    attributes[1].id = cudaLaunchAttributeClusterDimension;
    attributes[1].val.clusterDim.x = 1;
    attributes[1].val.clusterDim.y = cluster_y;
    attributes[1].val.clusterDim.z = 1;
    config.numAttrs = 2;
  }
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace flashindexer::cuda
