// Column sums over many rows on the GPU, deterministic and parallel (device code; included by
// src/cuda/*.cu and src/cuda_model/*.cu): acc[c] += Σ_n term(n, c) for an N×C term.
//
// One thread per column over all the rows (the CPU's sequential order) leaves a GPU with C
// threads for N·C terms: at 32k rows of a bias or LayerNorm gradient, milliseconds per call.
// Here pass 1 sums chunks of rows per column (a thread per (chunk, column), each chunk's rows in
// order) and pass 2 adds acc[c] and then the chunks' sums in order (cuda/colsum_order.h, with
// the host's copy for the tests). The order is fixed, so every run gives the same bits; it is not
// the CPU's sequential order, which a float64 sum meets within a few units in the last place of its
// terms' magnitudes, and a float32 one with a smaller error than the sequential sum's.
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda/colsum_order.h"
#include "cuda/common.cuh"

namespace pldr::cuda {

// The term x[n·C + c] widened to A (a bias gradient: the plain column sum).
template <class T, class A>
struct PlainTerm {
    const T* x;
    int64_t C;
    __device__ A operator()(int64_t n, int64_t c) const { return A(x[n * C + c]); }
};

template <class A, class Term>
__global__ void __launch_bounds__(kThreads)
    colsum_chunks_kernel(A* part, int64_t N, int64_t C, int64_t chunk, Term term) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    const int64_t n0 = k * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
    A s = A(0);
    for (int64_t n = n0; n < n1; ++n) s += term(n, c);
    part[k * C + c] = s;
}

template <class A>
__global__ void __launch_bounds__(kThreads)
    colsum_finish_kernel(A* acc, const A* part, int64_t K, int64_t C) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    A s = acc[c];
    for (int64_t k = 0; k < K; ++k) s += part[k * C + c];
    acc[c] = s;
}

// acc[c] += Σ_n term(n, c), n in [0, N), c in [0, C): the two passes above.
template <class A, class Term>
void column_sums(A* acc, int64_t N, int64_t C, const Term& term, Stream s) {
    if (N <= 0 || C <= 0) return;
    const unsigned col_blocks = unsigned((C + kThreads - 1) / kThreads);
    const int64_t chunk = colsum_chunk(N);
    const int64_t K = (N + chunk - 1) / chunk;
    Scratch<A> part(K * C, s);
    colsum_chunks_kernel<A, Term>
        <<<dim3(col_blocks, unsigned(K)), kThreads, 0, s>>>(part.get(), N, C, chunk, term);
    PLDR_CUDA_LAUNCHED("column_sums (chunks)");
    colsum_finish_kernel<A><<<col_blocks, kThreads, 0, s>>>(acc, part.get(), K, C);
    PLDR_CUDA_LAUNCHED("column_sums");
}

}  // namespace pldr::cuda
