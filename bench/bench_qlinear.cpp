// The linear product of one decode step, out[N,O] = in[N,I]·Wᵀ, per weight format (f32 through
// OpenBLAS, bf16 and q8_0 through the streaming kernels of ops/qlinear.h), on the 110M shapes
// (d 896 → d, d → F 2389, F → d, head d → 32000), N = 1, 4 and 8 rows: GB/s of weights streamed
// against the read bandwidth of this run. The weights of all layers are cycled through so that
// they come from memory, as in decode (5 layers: 5× the per-layer matrices).
// Not part of ctest.  OMP_NUM_THREADS=2 bench_qlinear [--reps N] [--threads N] [--scalar]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/packed.h"
#include "ops/qlinear.h"
#include "perf/limits.h"

namespace {

using namespace pldr;

struct Mat {
    int64_t O, I;
    std::vector<float> f;
    PackedTensor bf, q8;
};

}  // namespace

int main(int argc, char** argv) {
    int reps = 20, threads = 2;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--reps" && i + 1 < argc)
            reps = std::atoi(argv[++i]);
        else if (a == "--threads" && i + 1 < argc)
            threads = std::atoi(argv[++i]);
        else if (a == "--scalar")
            qlinear::set_isa(qlinear::Isa::SCALAR);
        else {
            std::fprintf(stderr, "usage: bench_qlinear [--reps N] [--threads N] [--scalar]\n");
            return 1;
        }
    }
    perf::set_threads(threads);
    const int64_t d = 896, F = 2389, V = 32000, L = 5;
    std::vector<Mat> mats;
    uint32_t seed = 1;
    auto add = [&](int64_t O, int64_t I) {
        Mat m{O, I, std::vector<float>(size_t(O * I)), {}, {}};
        for (auto& x : m.f) {
            seed = seed * 1664525u + 1013904223u;
            x = float(int32_t(seed >> 8) - (1 << 23)) * 1e-9f;
        }
        m.bf = pack_tensor("w", m.f.data(), O, I, WeightFormat::BF16);
        m.q8 = pack_tensor("w", m.f.data(), O, I, WeightFormat::Q8_0);
        mats.push_back(std::move(m));
    };
    for (int64_t l = 0; l < L; ++l) {
        for (int k = 0; k < 4; ++k) add(d, d);
        add(F, d);
        add(F, d);
        add(d, F);
    }
    add(V, d);
    const double bw = perf::read_bandwidth_gbs(threads);
    std::printf("read bandwidth %.1f GB/s, %d threads, kernels %s\n", bw, threads,
                qlinear::isa_name(qlinear::isa()));
    std::printf("| N | format | ms per pass | GB/s of weights | fraction of read bandwidth |\n");
    std::printf("|---|---|---|---|---|\n");
    for (int64_t N : {1, 4, 8, 128}) {
        std::vector<float> in(size_t(N * F), 0.5f), out(size_t(N * V));
        for (int fmt = 0; fmt < 3; ++fmt) {
            double bytes = 0;
            auto pass = [&] {
                for (const Mat& m : mats) {
                    if (fmt == 0)
                        linear_forward(out.data(), in.data(), m.f.data(),
                                       static_cast<const float*>(nullptr), N, m.I, m.O);
                    else
                        linear_forward(out.data(), in.data(), (fmt == 1 ? m.bf : m.q8).view(),
                                       static_cast<const float*>(nullptr), N, m.I, m.O);
                }
            };
            for (const Mat& m : mats)
                bytes +=
                    fmt == 0 ? 4.0 * double(m.O * m.I) : double((fmt == 1 ? m.bf : m.q8).bytes());
            pass();
            double best = 1e30;
            for (int r = 0; r < reps; ++r) {
                const double t0 = perf::now_s();
                pass();
                best = std::min(best, perf::now_s() - t0);
            }
            const double gbs = bytes / best / 1e9;
            std::printf("| %lld | %s | %.2f | %.1f | %.2f |\n", (long long)N,
                        fmt == 0   ? "f32"
                        : fmt == 1 ? "bf16"
                                   : "q8_0",
                        best * 1e3, gbs, gbs / bw);
        }
    }
    return 0;
}
