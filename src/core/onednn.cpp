// oneDNN matmul primitives, cached per problem (see onednn.h).
#include "core/onednn.h"

#include <omp.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <unordered_map>

#include "core/error.h"

#ifdef PLDR_WITH_DNNL
#include <dnnl.hpp>
#endif

namespace pldr::onednn {

namespace {
std::atomic<int64_t> g_f32_calls{0};
}  // namespace

int64_t f32_calls() {
    return g_f32_calls.load(std::memory_order_relaxed);
}

#ifdef PLDR_WITH_DNNL

namespace {

dnnl::engine& engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

// A primitive's blocking is chosen for the team it will run on: the thread count is in the key.
// The last flag: B in the panel layout (matmul_panels), its ldb unused.
using Key = std::tuple<Type, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       float, float, bool, int, bool>;
struct Prim {
    dnnl::matmul mm;
    dnnl::memory::desc a, b, c, bias, scratch;
    bool native = true;  // false: oneDNN has only its reference kernel for it
};
std::mutex g_mu;
// Shared by the threads (one JIT compilation per problem); each thread keeps the primitives it
// has run (bound() below), so a clear here drops none that is in use.
std::map<Key, std::shared_ptr<const Prim>> g_prims;
constexpr size_t kMaxPrims = 512;

std::shared_ptr<const Prim> prim(const Key& key) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_prims.find(key);
    if (it != g_prims.end()) return it->second;
    if (g_prims.size() >= kMaxPrims) g_prims.clear();
    const auto [type, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, has_bias, threads, panels] = key;
    (void)threads;
    const dt ab = type == Type::BF16 ? dt::bf16 : dt::f32;
    Prim p;
    p.a = dnnl::memory::desc(dims{M, K}, ab, ta ? dims{1, lda} : dims{lda, 1});
    p.b = panels ? dnnl::memory::desc(dims{K, N}, ab, dnnl::memory::format_tag::BA16a48b)
                 : dnnl::memory::desc(dims{K, N}, ab, tb ? dims{1, ldb} : dims{ldb, 1});
    p.c = dnnl::memory::desc(dims{M, N}, dt::f32, dims{ldc, 1});
    if (has_bias) p.bias = dnnl::memory::desc(dims{1, N}, dt::f32, dims{N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(beta);
        attr.set_post_ops(po);
    }
    try {
        const dnnl::matmul::desc md = has_bias ? dnnl::matmul::desc(p.a, p.b, p.bias, p.c)
                                               : dnnl::matmul::desc(p.a, p.b, p.c);
        dnnl::matmul::primitive_desc pd(md, attr, engine());
        p.native = std::strncmp(pd.impl_info_str(), "ref", 3) != 0;
        p.scratch = pd.scratchpad_desc();
        p.mm = dnnl::matmul(pd);
    } catch (const dnnl::error& e) {
        fail("oneDNN matmul ", M, "x", N, "x", K, ": ", e.what());
    }
    return g_prims.emplace(key, std::make_shared<const Prim>(std::move(p))).first->second;
}

// The scratchpad of this thread: its own pages (mapped outside the heap, so that a buffer that
// grows in the middle of a training step leaves no hole among the step's activations), grown to
// the largest problem the thread has run and kept.
struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
    ~Scratch() {
        if (p) munmap(p, bytes);
    }
    void* reserve(size_t want) {
        if (want <= bytes) return p;
        const size_t n = (want + 4095) / 4096 * 4096;
        void* q = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q == MAP_FAILED) throw std::bad_alloc();
        if (p) munmap(p, bytes);
        p = q;
        bytes = n;
        return p;
    }
};

// A primitive with its arguments as memory objects of this thread, bound once (the data handles
// are set per call): after the first call of a problem on a thread, a product allocates nothing
// and takes no lock.
struct Bound {
    std::shared_ptr<const Prim> prim;
    dnnl::memory a, b, c, bias;
    std::unordered_map<int, dnnl::memory> args;
};

Bound& bound(const Key& key) {
    thread_local Scratch scratch;
    thread_local std::map<Key, Bound> bound;
    auto it = bound.find(key);
    if (it != bound.end()) return it->second;
    if (bound.size() >= kMaxPrims) bound.clear();
    Bound b;
    b.prim = prim(key);
    const Prim& p = *b.prim;
    const size_t bytes = p.scratch.get_size();
    // Every primitive of the thread shares its one scratchpad: grow it first, and rebind the
    // primitives bound before to the new pages.
    if (bytes > scratch.bytes) {
        scratch.reserve(bytes);
        for (auto& [k, bk] : bound)
            if (bk.prim->scratch.get_size())
                bk.args[DNNL_ARG_SCRATCHPAD].set_data_handle(scratch.p);
    }
    if (p.native) {
        b.a = dnnl::memory(p.a, engine(), DNNL_MEMORY_NONE);
        b.b = dnnl::memory(p.b, engine(), DNNL_MEMORY_NONE);
        b.c = dnnl::memory(p.c, engine(), DNNL_MEMORY_NONE);
        b.args = {{DNNL_ARG_SRC, b.a}, {DNNL_ARG_WEIGHTS, b.b}, {DNNL_ARG_DST, b.c}};
        if (!p.bias.is_zero()) {
            b.bias = dnnl::memory(p.bias, engine(), DNNL_MEMORY_NONE);
            b.args.emplace(DNNL_ARG_BIAS, b.bias);
        }
        if (bytes)
            b.args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, engine(), scratch.p));
    }
    return bound.emplace(key, std::move(b)).first->second;
}

// The product of a primitive's key (its A, B, C and bias on this call); false where oneDNN
// has only its reference kernel for it.
bool run(const Key& key, const void* A, const void* B, float* C, const float* bias) {
    Bound& b = bound(key);
    const Prim& p = *b.prim;
    if (!p.native) return false;
    thread_local dnnl::stream s(engine());
    b.a.set_data_handle(const_cast<void*>(A));
    b.b.set_data_handle(const_cast<void*>(B));
    b.c.set_data_handle(C);
    if (bias) b.bias.set_data_handle(const_cast<float*>(bias));
    p.mm.execute(s, b.args);
    s.wait();
    if (std::get<0>(key) == Type::F32) g_f32_calls.fetch_add(1, std::memory_order_relaxed);
    return true;
}

int team() {
    return omp_in_parallel() ? 1 : omp_get_max_threads();
}

}  // namespace

bool built() {
    return true;
}

std::string isa() {
    using I = dnnl::cpu_isa;
    const auto have = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    for (const auto& [isa, name] : {std::pair{I::avx512_core_amx, "avx512_core_amx"},
                                    std::pair{I::avx512_core_bf16, "avx512_core_bf16"},
                                    std::pair{I::avx512_core, "avx512_core"},
                                    std::pair{I::avx2, "avx2"}, std::pair{I::sse41, "sse41"}}) {
        const auto need = static_cast<unsigned>(isa);
        if ((have & need) == need) return name;
    }
    return "any";
}

bool matmul(Type type, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C,
            int64_t ldc, const float* bias) {
    PLDR_CHECK(M > 0 && N > 0 && K > 0);
    PLDR_CHECK(!bias || (alpha == 1.0f && beta == 0.0f));
    return run(
        Key{type, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, bias != nullptr, team(), false}, A,
        B, C, bias);
}

// matmul_panels' split of rows over the team (below): from this many rows per thread, for a B of
// at most this many bytes.
constexpr int64_t kRowSplitMinRows = 32;
constexpr int64_t kRowSplitBytes = int64_t(1) << 20;

bool panels_split_rows(int64_t M, int64_t N, int64_t K) {
    const int team_size = team();
    return team_size > 1 && M >= team_size * kRowSplitMinRows &&
           K * N * int64_t(sizeof(float)) <= kRowSplitBytes;
}

bool matmul_panels(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                   float* C, int64_t ldc, const float* bias) {
    PLDR_CHECK(M > 0 && N > 0 && K > 0);
    // A prompt's products over small panels (the M config's projections: 256 × 256, 256 × 682),
    // rows split evenly over the team, each thread one one-thread product over the whole of B:
    // oneDNN's own split of 128 rows over panels of 48 columns left one thread idle for a fifth
    // of the product (a 256-column B is 5⅓ panels). Alternated rounds of the M config's prefill
    // (AMD EPYC family 26, 2 threads, 2026-12-07): 21,662 against 20,836 tokens/s, median of 5.
    // Where B is larger than kRowSplitBytes each thread reading all of it cost more than the
    // balance gained (the 110M config's 896-wide projections: 0.75 against 0.80 of SGEMM).
    const int team_size = team();
    if (panels_split_rows(M, N, K)) {
        std::atomic<bool> ok{true};
#pragma omp parallel num_threads(team_size)
        {
            const int t = omp_get_thread_num(), n = omp_get_num_threads();
            const int64_t r0 = M * t / n, r1 = M * (t + 1) / n;
            if (r1 > r0 && !run(Key{Type::F32, false, false, r1 - r0, N, K, lda, 0, ldc, 1.0f, 0.0f,
                                    bias != nullptr, 1, true},
                                A + r0 * lda, B, C + r0 * ldc, bias))
                ok = false;
        }
        return ok;
    }
    return run(Key{Type::F32, false, false, M, N, K, lda, 0, ldc, 1.0f, 0.0f, bias != nullptr,
                   team(), true},
               A, B, C, bias);
}

#else  // built without oneDNN

bool built() {
    return false;
}

std::string isa() {
    return "";
}

bool matmul(Type, bool, bool, int64_t, int64_t, int64_t, float, const void*, int64_t, const void*,
            int64_t, float, float*, int64_t, const float*) {
    return false;
}

bool panels_split_rows(int64_t, int64_t, int64_t) {
    return false;
}

bool matmul_panels(int64_t, int64_t, int64_t, const float*, int64_t, const float*, float*, int64_t,
                   const float*) {
    return false;
}

#endif

}  // namespace pldr::onednn
