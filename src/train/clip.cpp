#include "train/clip.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "train/clip_order.h"

namespace pldr {

namespace {
constexpr int64_t kParallelMin = int64_t(1) << 16;
// Elements per block of sum_of_squares: the blocks, not the threads, fix the summation order
// (train/clip_order.h, which the GPU's sum follows too).
constexpr int64_t kSumBlock = kGradSumBlock;

// One block of elements: Σ x² in kLanes interleaved double lanes (lane k sums the elements
// k, k + kLanes, ... of the block, in order; the lanes are then added in order, lane 0 first),
// so that the compiler can keep the lanes in vector registers: one chain of dependent adds per
// element (the plain running sum) held a 110M model's step for 57 ms, a vectorised pass over
// the same 440 MB reads at the memory's pace. Then, from the block in cache, the elements with
// |x| > limit (NaN is not counted).
constexpr int kLanes = kGradSumLanes;

template <class T>
double block_sum_sq(const T* g, int64_t len, T limit, int64_t& over) {
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes)
        for (int k = 0; k < kLanes; ++k) {
            const double x = double(g[i + k]);
            lane[k] += x * x;
        }
    for (int k = 0; i < len; ++i, ++k) {
        const double x = double(g[i]);
        lane[k] += x * x;
    }
    double s = 0.0;
    for (int k = 0; k < kLanes; ++k) s += lane[k];
    int64_t count = 0;
    for (int64_t j = 0; j < len; ++j) count += grad_over(g[j], limit);
    over += count;
    return s;
}

}  // namespace

template <class T>
GradPass grad_pass(const T* g, int64_t n, T limit) {
    PLDR_REQUIRE(n >= 0, "grad_pass: negative element count ", n);
    PLDR_REQUIRE(!(limit < T(0)), "grad_pass: negative limit ", limit);
    GradPass r;
    if (n == 0) return r;
    PLDR_REQUIRE(g != nullptr, "grad_pass: null buffer");
    const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
    std::vector<double> part(static_cast<size_t>(blocks));
    int64_t over = 0;
#pragma omp parallel for schedule(static) reduction(+ : over) if (n >= kParallelMin)
    for (int64_t k = 0; k < blocks; ++k) {
        const int64_t i0 = k * kSumBlock, i1 = std::min(n, i0 + kSumBlock);
        part[size_t(k)] = block_sum_sq(g + i0, i1 - i0, limit, over);
    }
    for (const double s : part) r.sum_sq += s;
    r.over = over;
    return r;
}

template <class T>
double sum_of_squares(const T* g, int64_t n) {
    PLDR_REQUIRE(n >= 0, "sum_of_squares: negative element count ", n);
    return grad_pass(g, n, std::numeric_limits<T>::infinity()).sum_sq;
}

template <class T>
int64_t clip_by_value(T* g, int64_t n, T limit) {
    PLDR_REQUIRE(n >= 0, "clip_by_value: negative element count ", n);
    PLDR_REQUIRE(std::isfinite(double(limit)) && limit >= T(0),
                 "clip_by_value: limit must be finite and >= 0, got ", limit);
    if (n == 0) return 0;
    PLDR_REQUIRE(g != nullptr, "clip_by_value: null buffer");
    int64_t count = 0;
    const T lo = -limit;
    // Branch-free (the compiler vectorises it); NaN compares false both ways and stays NaN.
#pragma omp parallel for reduction(+ : count) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const T x = g[i];
        count += int64_t(x > limit) + int64_t(x < lo);
        g[i] = clip_value_element(x, limit, lo);
    }
    return count;
}

template <class T>
void scale_to_norm(T* g, int64_t n, double max_norm, double norm) {
    PLDR_REQUIRE(std::isfinite(max_norm) && max_norm > 0,
                 "clip_by_global_norm: max_norm must be finite and > 0, got ", max_norm);
    if (n == 0 || !std::isfinite(norm)) return;
    PLDR_REQUIRE(g != nullptr, "clip_by_global_norm: null buffer");
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        const T c = T(coef);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
        for (int64_t i = 0; i < n; ++i) g[i] = g[i] * c;
    }
}

template <class T>
double clip_by_global_norm(T* g, int64_t n, double max_norm) {
    PLDR_REQUIRE(n >= 0, "clip_by_global_norm: negative element count ", n);
    PLDR_REQUIRE(std::isfinite(max_norm) && max_norm > 0,
                 "clip_by_global_norm: max_norm must be finite and > 0, got ", max_norm);
    if (n == 0) return 0.0;
    const double norm = std::sqrt(sum_of_squares(g, n));  // the same bits on any thread count
    scale_to_norm(g, n, max_norm, norm);
    return norm;
}

template <class T>
bool all_finite(const T* g, int64_t n) {
    PLDR_REQUIRE(n >= 0, "all_finite: negative element count ", n);
    if (n == 0) return true;
    PLDR_REQUIRE(g != nullptr, "all_finite: null buffer");
    // x - x is 0 for finite x and NaN for inf/NaN; a NaN sum flags any non-finite element.
    T acc = T(0);
#pragma omp parallel for simd reduction(+ : acc) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) acc += g[i] - g[i];
    return acc == T(0);
}

template int64_t clip_by_value<float>(float*, int64_t, float);
template int64_t clip_by_value<double>(double*, int64_t, double);
template GradPass grad_pass<float>(const float*, int64_t, float);
template GradPass grad_pass<double>(const double*, int64_t, double);
template void scale_to_norm<float>(float*, int64_t, double, double);
template void scale_to_norm<double>(double*, int64_t, double, double);
template double sum_of_squares<float>(const float*, int64_t);
template double sum_of_squares<double>(const double*, int64_t);
template double clip_by_global_norm<float>(float*, int64_t, double);
template double clip_by_global_norm<double>(double*, int64_t, double);
template bool all_finite<float>(const float*, int64_t);
template bool all_finite<double>(const double*, int64_t);

}  // namespace pldr
