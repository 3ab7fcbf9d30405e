// PLDR_HD marks an inline function that both the CPU kernels and the CUDA kernels (src/cuda/)
// compile: `__host__ __device__` under nvcc, nothing under the host compiler. Such a function is
// the one definition of an element's arithmetic for both backends, so the CPU suite tests what
// the GPU runs (docs/gpu.md). It may call only what both sides have: the arithmetic operators,
// std::exp / log / log1p / pow / sqrt / fma / fabs (CUDA defines them for the device), and no
// constexpr host function such as std::max (nvcc refuses those in device code).
#pragma once

#if defined(__CUDACC__)
#define PLDR_HD __host__ __device__
#else
#define PLDR_HD
#endif
