// The order of the GPU's column sums (cuda/colsum.cuh), for the host too: the rows in chunks of
// colsum_chunk(N) rows, each chunk summed in order from zero, then acc[c] plus the chunks' sums
// in order. The GPU tests rebuild a kernel's sums in this order on the host (bit for bit).
#pragma once
#include <algorithm>
#include <cstdint>

namespace pldr::cuda {

// The rows of a chunk: enough chunks to fill the device, short enough chains per thread; longer
// where more than 65535 chunks (a grid's y limit) would be needed.
constexpr int64_t kColsumChunk = 128;
inline int64_t colsum_chunk(int64_t N) {
    return std::max<int64_t>(kColsumChunk, (N + 65534) / 65535);
}

// acc[c] += Σ_n term(n, c) in that order, on the host: the oracle of cuda::column_sums.
template <class A, class Term>
void column_sums_host(A* acc, int64_t N, int64_t C, const Term& term) {
    const int64_t chunk = colsum_chunk(N);
    for (int64_t c = 0; c < C; ++c) {
        A s = acc[c];
        for (int64_t n0 = 0; n0 < N; n0 += chunk) {
            A part = A(0);
            for (int64_t n = n0; n < std::min(N, n0 + chunk); ++n) part += term(n, c);
            s += part;
        }
        acc[c] = s;
    }
}

}  // namespace pldr::cuda
