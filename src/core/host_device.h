// SPDX-License-Identifier: Apache-2.0
// FI_HOST_DEVICE marks a function that the CPU backend, the reference and the CUDA kernels all
// call: __host__ __device__ (and forced inline, as the kernels' own helpers are) under nvcc,
// plain inline for a C++ compiler.
#pragma once

#if defined(__CUDACC__)
#define FI_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FI_HOST_DEVICE inline
#endif
