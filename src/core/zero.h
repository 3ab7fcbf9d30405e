// Zero-filled buffers over the team: a training step's [tokens, d] and [tokens, F] gradient
// buffers, zeroed by one thread's memset, left the other thread waiting (3 % of an M-config step
// in a timeline of both threads' samples, 2026-12-07).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/parallel.h"
#include "core/tensor.h"

namespace pldr {

// From this many elements the team zeroes a buffer, in chunks of kZeroChunk elements.
inline constexpr int64_t kZeroParallelElems = int64_t(1) << 17;
inline constexpr int64_t kZeroChunk = int64_t(1) << 14;

// p[0, n) = 0 (+0.0: all bits clear, as a value-initialized vector).
template <typename T>
void zero_on_team(T* p, int64_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    parallel_for((n + kZeroChunk - 1) / kZeroChunk, n >= kZeroParallelElems, [&](int64_t c) {
        const int64_t i0 = c * kZeroChunk, i1 = std::min(n, i0 + kZeroChunk);
        std::memset(static_cast<void*>(p + i0), 0, size_t(i1 - i0) * sizeof(T));
    });
}

// A tensor of shape s, all zeros (Tensor(s) zeroed on the team).
template <typename T>
Tensor<T> zeros_on_team(Shape s) {
    Tensor<T> t;
    t.resize_for_overwrite(std::move(s));
    zero_on_team(t.ptr(), t.numel());
    return t;
}

}  // namespace pldr
