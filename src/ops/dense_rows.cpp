// The float32 linear layer for a few rows (decode, batched decode): out[N,O] = in[N,I]·Wᵀ + b for
// 1 ≤ N ≤ kDenseRows, streaming each row of W once for all N input rows. A GEMM library packs
// (copies) W before multiplying, which for a handful of rows costs more than the product itself
// (measured: OpenBLAS's sgemm_incopy took a third of a batch-8 decode step); a matrix-vector
// product reads W once per input row. Here each row of W is read from memory once and from L1
// for the next group of input rows.
//
// The weights are float32, or bfloat16 bits (ops/linear.h WeightFormat::BF16) widened exactly
// into float32 as they are loaded (the bits shifted up by 16): the same tiles, prefetches and
// summation order, so a bf16 model's batched decoding also equals one-at-a-time, and it gets the
// AVX-512 tiles and the jobs' one parallel region (its own AVX2 kernel, one row of W and at most
// 4 input rows at a time, read a batch of 8 twice and ran at 0.86x the float32 batch of 8 on an
// AVX-512 machine).
//
// Every output is the same arithmetic whatever N and the row's position in the batch: two
// 8-lane FMA accumulators over the 16-wide part of the row, summed, reduced across lanes in a
// fixed order, then the ragged end in order and the bias. So a batch of B sequences gives the
// same bits as B batch-1 steps, with the AVX2 or the AVX-512 kernel. PLDR_KERNELS=scalar turns
// them off (the BLAS products instead), PLDR_KERNELS=avx2 picks the AVX2 one.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/blas.h"
#include "core/error.h"
#include "core/onednn.h"
#include "core/parallel.h"
#include "ops/linear.h"
#include "ops/qlinear.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "ops/simd_x86.h"
#endif

namespace pldr {

namespace {

#if defined(__x86_64__) || defined(__i386__)
#define PLDR_AVX2 __attribute__((target("avx2,fma")))

using simd::hsum8;

// Eight weights as float32: loaded, or widened from bf16 bits (exact).
PLDR_AVX2 inline __m256 load8(const float* w) {
    return _mm256_loadu_ps(w);
}
PLDR_AVX2 inline __m256 load8(const uint16_t* w) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float value(float w) {
    return w;
}
inline float value(uint16_t w) {
    return qlinear::bf16_value(w);
}

// out[r·O] for r < R: the dot products of one row w[I] with R input rows x (stride I).
template <int R, typename Wt>
PLDR_AVX2 inline void dot_rows(const Wt* w, const float* x, int64_t I, float bias, float* out,
                               int64_t O) {
    __m256 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    const int64_t full = I / 16 * 16;
    for (int64_t i = 0; i < full; i += 16) {
        const __m256 w0 = load8(w + i), w1 = load8(w + i + 8);
        for (int r = 0; r < R; ++r) {
            a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * I + i), a0[r]);
            a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + r * I + i + 8), a1[r]);
        }
    }
    for (int r = 0; r < R; ++r) {
        float s = hsum8(_mm256_add_ps(a0[r], a1[r]));
        for (int64_t i = full; i < I; ++i) s += value(w[i]) * x[r * I + i];
        out[r * O] = s + bias;
    }
}

template <typename Wt>
PLDR_AVX2 void rows_avx2(float* out, const float* in, const Wt* W, const float* b, int64_t N,
                         int64_t I, int64_t O, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
        const Wt* w = W + o * I;
        const float bias = b ? b[o] : 0.0f;
        for (int64_t n = 0; n < N; n += 4) {
            const float* x = in + n * I;
            float* y = out + n * O + o;
            switch (std::min<int64_t>(4, N - n)) {
                case 4:
                    dot_rows<4>(w, x, I, bias, y, O);
                    break;
                case 3:
                    dot_rows<3>(w, x, I, bias, y, O);
                    break;
                case 2:
                    dot_rows<2>(w, x, I, bias, y, O);
                    break;
                default:
                    dot_rows<1>(w, x, I, bias, y, O);
            }
        }
    }
}

// The AVX-512 kernel: a tile of P rows of W by R ≤ 8 input rows, one 16-lane accumulator per
// output. Up to 8 input rows share one pass over W, each vector of W loaded feeding R FMAs (a
// batch of 8 in two groups of 4 read W from memory, then again from L1, the second pass's
// arithmetic not overlapping the first's loads). P = 3 at R > 4 (24 accumulators, 3 vectors of
// W, one of x: 28 of the 32 registers), P = 4 at R ≤ 4. While a tile is computed, the next
// tile's P rows are prefetched into L2 at the same offset, one line of each per step: W arrives
// a whole tile ahead and the tile's arithmetic overlaps the next one's reads (a fixed distance of
// 1 KB ahead within the same rows left them adding up: measured 15.8 → 14.3 ms per pass of the
// 110M decode matrices at 8 rows, 19.9 → 13.9 ms at 4, interleaved in one process). L2, not L1:
// a tile of the 110M model's rows is 11–29 KB and the 8 input rows 28–76 KB, so lines prefetched
// into the 32 KB L1 were probably evicted before their turn, and each waiting prefetch held one
// of the L1's few miss buffers; into L2, the pass runs at the read bandwidth (110M, 8 rows, Zen 4:
// 15.5–15.9 → 10.7–12.0 ms, against 9.5–10.0 ms for one row, alternated). The prefetch
// past a thread's last tile reads rows it does not need, or nothing (it never faults). Lane k sums
// the inputs i ≡ k (mod 16), as the AVX2 kernel's two 8-lane accumulators do; the two halves are
// added and reduced by the same hsum8: the same bits as the AVX2 kernel, whatever P, R and the
// row's place in the batch.

#define PLDR_AVX512 __attribute__((target("avx512f,avx2,fma")))

// GCC 12's AVX-512 intrinsics leave a don't-care operand undefined (`__m512i __Y = __Y;`), which
// -W(maybe-)uninitialized reports where they are inlined (GCC bug 105593): the pragmas cover the
// AVX-512 code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The halves of a 16-lane vector, in registers (a store and two 8-lane loads of it, as before,
// stalled on store forwarding for every output).
PLDR_AVX512 inline __m256 lower256(__m512 v) {
    return _mm512_castps512_ps256(v);
}
PLDR_AVX512 inline __m256 upper256(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
PLDR_AVX512 inline __m512 load16(const float* w) {
    return _mm512_loadu_ps(w);
}
PLDR_AVX512 inline __m512 load16(const uint16_t* w) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int P, int R, typename Wt>
PLDR_AVX512 inline void dot_tile16(const Wt* w, const float* x, int64_t I, const float* bias,
                                   float* out, int64_t O) {
    __m512 acc[P][R];
    for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) acc[p][r] = _mm512_setzero_ps();
    const int64_t full = I / 16 * 16;
    for (int64_t i = 0; i < full; i += 16) {
        __m512 wv[P];
        for (int p = 0; p < P; ++p) {
            _mm_prefetch(reinterpret_cast<const char*>(w + (P + p) * I + i), _MM_HINT_T1);
            wv[p] = load16(w + p * I + i);
            asm("" : "+v"(wv[p]));  // keep it in a register (GCC would reload it for each FMA)
        }
        for (int r = 0; r < R; ++r) {
            __m512 xv = _mm512_loadu_ps(x + r * I + i);
            asm("" : "+v"(xv));
            for (int p = 0; p < P; ++p) acc[p][r] = _mm512_fmadd_ps(wv[p], xv, acc[p][r]);
        }
    }
    for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) {
            const __m256 lo = lower256(acc[p][r]), hi = upper256(acc[p][r]);
            float s = hsum8(_mm256_add_ps(lo, hi));
            for (int64_t i = full; i < I; ++i) s += value(w[p * I + i]) * x[r * I + i];
            out[r * O + p] = s + (bias ? bias[p] : 0.0f);
        }
}

// Output rows [o0, o1) for R input rows x: tiles of P rows of W, then the ragged rows one at a
// time.
template <int P, int R, typename Wt>
PLDR_AVX512 void tile16_rows(const Wt* W, const float* x, int64_t I, const float* b, float* y,
                             int64_t O, int64_t o0, int64_t o1) {
    int64_t o = o0;
    for (; o + P <= o1; o += P) dot_tile16<P, R>(W + o * I, x, I, b ? b + o : nullptr, y + o, O);
    for (; o < o1; ++o) dot_tile16<1, R>(W + o * I, x, I, b ? b + o : nullptr, y + o, O);
}

// tile16_rows for R = 1…8 input rows, with P = 4 rows of W at R ≤ 4 and P = 3 above.
template <typename Wt>
using TileRowsFn = void (*)(const Wt*, const float*, int64_t, const float*, float*, int64_t,
                            int64_t, int64_t);
template <typename Wt, size_t... k>
constexpr std::array<TileRowsFn<Wt>, sizeof...(k)> tile_rows_table(std::index_sequence<k...>) {
    return {&tile16_rows<(k + 1 > 4 ? 3 : 4), int(k + 1), Wt>...};
}
template <typename Wt>
constexpr auto kTileRows = tile_rows_table<Wt>(std::make_index_sequence<8>());

template <typename Wt>
PLDR_AVX512 void rows_avx512(float* out, const float* in, const Wt* W, const float* b, int64_t N,
                             int64_t I, int64_t O, int64_t o0, int64_t o1) {
    for (int64_t n = 0; n < N; n += 8)
        kTileRows<Wt>[size_t(std::min<int64_t>(8, N - n) - 1)](W, in + n * I, I, b, out + n * O, O,
                                                               o0, o1);
}

// The panel kernel (ops/linear.h: panels): one panel, 48 outputs in three 16-lane vectors, for
// R ≤ 8 input rows: per input i, the panel's 48 weights of i loaded once and each row's x[i]
// broadcast, 3·R accumulators (24 + 3 + 1 of the 32 registers at R = 8). Output o of row r is
// the FMA chain over i in order from zero, plus the bias: the same bits whatever R, the panel's
// task and the row's place in the batch. The panel is one contiguous stream; the next lines are
// asked into L2 a fixed distance ahead (kPanelAhead bytes). 8 KB ahead covers the memory's
// latency: a pass over the 110M decode weights (309 MB of panels, 2 threads, AMD EPYC) at 8 rows
// 8.4-8.9 -> 7.6-8.1 ms, at 1 row 6.8 -> 6.2 ms against 2 KB; 4 and 16 KB in between.
constexpr int64_t kPanelAhead = 8192;

template <int R>
PLDR_AVX512 void panel_tile(const float* w, const float* x, int64_t I, const float* bias, float* y,
                            int64_t O, int64_t o0) {
    __m512 acc[3][R];
    for (int j = 0; j < 3; ++j)
        for (int r = 0; r < R; ++r) acc[j][r] = _mm512_setzero_ps();
    const char* ahead = reinterpret_cast<const char*>(w) + kPanelAhead;
    for (int64_t i = 0; i < I; ++i) {
        const float* wi = w + i * kPanelWidth;
        _mm_prefetch(ahead + i * kPanelWidth * 4, _MM_HINT_T1);
        _mm_prefetch(ahead + i * kPanelWidth * 4 + 64, _MM_HINT_T1);
        _mm_prefetch(ahead + i * kPanelWidth * 4 + 128, _MM_HINT_T1);
        __m512 wv[3];
        for (int j = 0; j < 3; ++j) {
            wv[j] = _mm512_loadu_ps(wi + 16 * j);
            asm("" : "+v"(wv[j]));  // keep it in a register (GCC would reload it for each FMA)
        }
        for (int r = 0; r < R; ++r) {
            const __m512 xv = _mm512_set1_ps(x[r * I + i]);
            for (int j = 0; j < 3; ++j) acc[j][r] = _mm512_fmadd_ps(wv[j], xv, acc[j][r]);
        }
    }
    for (int j = 0; j < 3; ++j) {
        const int64_t o = o0 + 16 * j;
        if (o >= O) break;
        const __mmask16 m = o + 16 <= O ? __mmask16(0xFFFF) : __mmask16((1u << (O - o)) - 1);
        const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + o) : _mm512_setzero_ps();
        for (int r = 0; r < R; ++r)
            _mm512_mask_storeu_ps(y + r * O + o, m, _mm512_add_ps(acc[j][r], bv));
    }
}

using PanelTileFn = void (*)(const float*, const float*, int64_t, const float*, float*, int64_t,
                             int64_t);
template <size_t... k>
constexpr std::array<PanelTileFn, sizeof...(k)> panel_tile_table(std::index_sequence<k...>) {
    return {&panel_tile<int(k + 1)>...};
}
constexpr auto kPanelTiles = panel_tile_table(std::make_index_sequence<8>());

// Panels [p0, p1) of a weight for N input rows, each panel for all rows while it is in cache.
PLDR_AVX512 void panels_avx512(float* out, const float* in, const float* P, const float* b,
                               int64_t N, int64_t I, int64_t O, int64_t p0, int64_t p1) {
    const int64_t stride = (I + kPanelDepth - 1) / kPanelDepth * kPanelDepth * kPanelWidth;
    for (int64_t p = p0; p < p1; ++p)
        for (int64_t n = 0; n < N; n += 8)
            kPanelTiles[size_t(std::min<int64_t>(8, N - n) - 1)](P + p * stride, in + n * I, I, b,
                                                                 out + n * O, O, p * kPanelWidth);
}

#pragma GCC diagnostic pop

// One job's output rows [o0, o1): the AVX-512 tiles from 4 input rows on (below, one stream of W
// at a time reads faster), the AVX2 kernel otherwise.
template <typename Wt>
void job_rows(int level, float* out, const float* in, const Wt* W, const float* b, int64_t N,
              int64_t I, int64_t O, int64_t o0, int64_t o1) {
    if (level == 2 && N >= 4)
        rows_avx512(out, in, W, b, N, I, O, o0, o1);
    else
        rows_avx2(out, in, W, b, N, I, O, o0, o1);
}

// 0: the BLAS path; 1: AVX2 + FMA; 2: AVX-512. PLDR_KERNELS=scalar asks for the portable code
// (here: the BLAS path), PLDR_KERNELS=avx2 for the AVX2 kernel.
int kernel_level() {
    static const int level = [] {
        __builtin_cpu_init();
        const char* e = std::getenv("PLDR_KERNELS");
        const std::string k = e ? e : "";
        if (k == "scalar") return 0;
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
        if (k == "avx2" || !__builtin_cpu_supports("avx512f")) return 1;
        return 2;
    }();
    return level;
}

#endif

// Output rows per task, about: a few KB of W, so a thread's tasks form one stream.
constexpr int64_t kRowsPerTask = 24;

}  // namespace

bool dense_rows_forward(const DenseRowsJob* jobs, int n_jobs, const float* in, int64_t N,
                        int64_t I) {
#if defined(__x86_64__) || defined(__i386__)
    const int level = kernel_level();
    if (N < 1 || N > kDenseRows || level == 0 || n_jobs < 1) return false;
    constexpr int kMaxJobs = 4;
    PLDR_CHECK(n_jobs <= kMaxJobs);
    int64_t weights = 0, rows = 0;
    for (int j = 0; j < n_jobs; ++j) {
        weights += jobs[j].O * I;
        rows += jobs[j].O;
        if (jobs[j].panels && level < 2) return false;  // (panels_available() said no)
    }
    // Bandwidth-bound: threads from kDenseRowsParallelWeights on, and never a nested team.
    const bool par = weights >= kDenseRowsParallelWeights && rows > 1 && !omp_in_parallel();
    const int64_t nt = par ? omp_get_max_threads() : 1;
    // The jobs' tasks in one index space: job j owns tasks [first[j], first[j + 1]), a multiple
    // of the thread count of equal ranges (± 1) of its units, rows of W or panels, so that the
    // static schedule gives every thread the same number of units (a 256-row job in tasks of 24
    // left one thread a task more than the other). The tiles may split anywhere: an output's
    // arithmetic does not depend on the tile it is in.
    auto units = [](const DenseRowsJob& job) { return job.panels ? panel_count(job.O) : job.O; };
    auto per_task = [](const DenseRowsJob& job) { return job.panels ? 1 : kRowsPerTask; };
    int64_t first[kMaxJobs + 1] = {0};
    for (int j = 0; j < n_jobs; ++j)
        first[j + 1] =
            first[j] + nt * std::max<int64_t>(1, (units(jobs[j]) + per_task(jobs[j]) * nt - 1) /
                                                     (per_task(jobs[j]) * nt));
    const int64_t tasks = first[n_jobs];
    // Each thread streams its own tasks in order, then helps with the rest of the other's.
    parallel_for_balanced(tasks, par, [&](int64_t t) {
        int j = 0;
        while (t >= first[j + 1]) ++j;
        const DenseRowsJob& job = jobs[j];
        const int64_t n = first[j + 1] - first[j], k = t - first[j], u = units(job);
        const int64_t u0 = u * k / n, u1 = u * (k + 1) / n;
        if (job.panels)
            panels_avx512(job.out, in, job.panels, job.b, N, I, job.O, u0, u1);
        else if (job.Wb)
            job_rows(level, job.out, in, job.Wb, job.b, N, I, job.O, u0, u1);
        else
            job_rows(level, job.out, in, job.W, job.b, N, I, job.O, u0, u1);
    });
    return true;
#else
    (void)jobs, (void)n_jobs, (void)in, (void)N, (void)I;
    return false;
#endif
}

void to_panels(const float* W, int64_t O, int64_t I, float* p) {
    const int64_t I16 = (I + kPanelDepth - 1) / kPanelDepth * kPanelDepth;
    parallel_for(panel_count(O), O * I >= kDenseRowsParallelWeights && !omp_in_parallel(),
                 [&](int64_t q) {
                     float* d = p + q * I16 * kPanelWidth;
                     const int64_t rows = std::min(kPanelWidth, O - q * kPanelWidth);
                     const float* w = W + q * kPanelWidth * I;
                     // Blocks of 16 inputs: the panel's rows read a line each, and the block's
                     // 16 × 48 outputs stay in L1 until they are written.
                     for (int64_t i0 = 0; i0 < I; i0 += kPanelDepth) {
                         const int64_t i1 = std::min(I, i0 + kPanelDepth);
                         for (int64_t j = 0; j < rows; ++j)
                             for (int64_t i = i0; i < i1; ++i)
                                 d[i * kPanelWidth + j] = w[j * I + i];
                     }
                     for (int64_t i = 0; i < I16; ++i)  // zeros past O and I
                         for (int64_t j = i < I ? rows : 0; j < kPanelWidth; ++j)
                             d[i * kPanelWidth + j] = 0.0f;
                 });
}

bool panels_available() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool cpu =
        kernel_level() == 2 && onednn::built() && onednn::isa().compare(0, 6, "avx512") == 0;
    return cpu && sgemm_engine() == SgemmEngine::AUTO;
#else
    return false;
#endif
}

bool dense_rows_forward(float* out, const float* in, const float* W, const float* b, int64_t N,
                        int64_t I, int64_t O) {
    const DenseRowsJob job{out, W, b, O};
    return dense_rows_forward(&job, 1, in, N, I);
}

}  // namespace pldr
