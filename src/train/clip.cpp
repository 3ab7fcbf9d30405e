#include "train/clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace pldr {

namespace {
constexpr int64_t kParallelMin = int64_t(1) << 16;
// Elements per block of sum_of_squares: the blocks, not the threads, fix the summation order.
constexpr int64_t kSumBlock = int64_t(1) << 15;
}  // namespace

template <class T>
double sum_of_squares(const T* g, int64_t n) {
    PLDR_REQUIRE(n >= 0, "sum_of_squares: negative element count ", n);
    if (n == 0) return 0.0;
    PLDR_REQUIRE(g != nullptr, "sum_of_squares: null buffer");
    const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
    std::vector<double> part(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t k = 0; k < blocks; ++k) {
        const int64_t i1 = std::min(n, (k + 1) * kSumBlock);
        double s = 0.0;
        for (int64_t i = k * kSumBlock; i < i1; ++i) s += double(g[i]) * double(g[i]);
        part[size_t(k)] = s;
    }
    double sum = 0.0;
    for (const double s : part) sum += s;
    return sum;
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
#pragma omp parallel for reduction(+ : count) schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const T x = g[i];
        if (x > limit) {
            g[i] = limit;
            ++count;
        } else if (x < lo) {
            g[i] = lo;
            ++count;
        }
    }
    return count;
}

template <class T>
double clip_by_global_norm(T* g, int64_t n, double max_norm) {
    PLDR_REQUIRE(n >= 0, "clip_by_global_norm: negative element count ", n);
    PLDR_REQUIRE(std::isfinite(max_norm) && max_norm > 0,
                 "clip_by_global_norm: max_norm must be finite and > 0, got ", max_norm);
    if (n == 0) return 0.0;
    PLDR_REQUIRE(g != nullptr, "clip_by_global_norm: null buffer");
    const double norm = std::sqrt(sum_of_squares(g, n));  // the same bits on any thread count
    if (!std::isfinite(norm)) return norm;
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        const T c = T(coef);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
        for (int64_t i = 0; i < n; ++i) g[i] = g[i] * c;
    }
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
template double sum_of_squares<float>(const float*, int64_t);
template double sum_of_squares<double>(const double*, int64_t);
template double clip_by_global_norm<float>(float*, int64_t, double);
template double clip_by_global_norm<double>(double*, int64_t, double);
template bool all_finite<float>(const float*, int64_t);
template bool all_finite<double>(const double*, int64_t);

}  // namespace pldr
