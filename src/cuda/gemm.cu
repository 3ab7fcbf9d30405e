// Row-major products through cuBLASLt; see gemm.h. cuBLASLt is column-major: a row-major X with
// leading dimension ld is, read column-major, Xᵀ with the same ld. So C = op(A)·op(B) row-major
// is Cᵀ = op(B)ᵀ·op(A)ᵀ column-major: cuBLASLt's first operand is our B (transposed when tb), its
// second our A (transposed when ta), its m, n, k our N, M, K, and its bias (one per row of its
// D, i.e. per column of our C) is the linear layers' bias.
#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/common.cuh"
#include "cuda/gemm.h"

namespace pldr::cuda {

namespace {

// ---- cuBLASLt, loaded when the first Gemm is made ----------------------------------------------
// Not linked: linking libcublasLt.so costs every process 0.35 s and 200 MB of resident memory at
// start (measured on our build machine, its initialisers), in every pldr command whether it
// touches a GPU or not. dlopen finds it through LD_LIBRARY_PATH and the system's paths (the GPU
// machine: torch's nvidia-cublas wheel, scripts/gpu-check.sh), then in the toolkit that built
// pldr (PLDR_CUBLASLT_DIR, set by CMake).
struct LtApi {
// clang-format off
#define PLDR_LT_FUNCTIONS(X) \
    X(GetStatusName) \
    X(GetStatusString) \
    X(Create) \
    X(Destroy) \
    X(Matmul) \
    X(MatmulAlgoGetHeuristic) \
    X(MatmulDescCreate) \
    X(MatmulDescDestroy) \
    X(MatmulDescSetAttribute) \
    X(MatmulPreferenceCreate) \
    X(MatmulPreferenceDestroy) \
    X(MatmulPreferenceSetAttribute) \
    X(MatrixLayoutCreate) \
    X(MatrixLayoutDestroy) \
    X(MatrixLayoutSetAttribute)
// clang-format on
#define PLDR_LT_MEMBER(name) decltype(&cublasLt##name) name = nullptr;
    PLDR_LT_FUNCTIONS(PLDR_LT_MEMBER)
#undef PLDR_LT_MEMBER

    LtApi() {
        const std::string so = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
        void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
        std::string why = h ? "" : dlerror();
#ifdef PLDR_CUBLASLT_DIR
        if (!h)
            h = dlopen((std::string(PLDR_CUBLASLT_DIR) + "/" + so).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
        PLDR_REQUIRE(h, "CUDA: cannot load ", so, " (", why,
                     "): install the CUDA toolkit's cuBLAS, or add its folder to LD_LIBRARY_PATH");
#define PLDR_LT_LOAD(name)                                                                   \
    name = reinterpret_cast<decltype(name)>(dlsym(h, "cublasLt" #name));                     \
    PLDR_REQUIRE(name, "CUDA: ", so, " has no cublasLt" #name " (a cuBLAS older than CUDA ", \
                 CUBLAS_VER_MAJOR, "?)");
        PLDR_LT_FUNCTIONS(PLDR_LT_LOAD)
#undef PLDR_LT_LOAD
    }
#undef PLDR_LT_FUNCTIONS
};

// The loaded functions (thread-safe first use; a failed load throws, and the next call tries
// again).
const LtApi& lt_api() {
    static const LtApi api;
    return api;
}

[[noreturn]] void throw_lt(const char* what, cublasStatus_t s) {
    fail("cuBLASLt: ", what, ": ", lt_api().GetStatusName(s), ": ", lt_api().GetStatusString(s));
}
#define PLDR_LT_CALL(call)                                                            \
    do {                                                                              \
        const cublasStatus_t pldr_s_ = (call);                                        \
        if (pldr_s_ != CUBLAS_STATUS_SUCCESS) ::pldr::cuda::throw_lt(#call, pldr_s_); \
    } while (0)

enum class Kind : int { F32, BF16, F64 };

// The largest power of two (at most 256) dividing the address: cuBLASLt's kernels need their
// operands aligned, and its heuristic picks by the alignment it is told.
// In a strided batch every product's operand must be: the stride's bytes count too.
uint32_t alignment_of(const void* p, int64_t stride_bytes = 0) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 1 && ((a % al) != 0 || uint64_t(stride_bytes) % al != 0)) al /= 2;
    return al;
}

// C = beta·C + bias (every row), or bias alone when beta is 0 (C not read): the bias without
// the epilogue (float64, and shapes where no algorithm with the epilogue exists).
template <class T>
__global__ void __launch_bounds__(kThreads)
    bias_rows_kernel(T* C, int64_t ldc, const T* bias, int64_t M, int64_t N, T beta) {
    const int64_t total = M * N;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / N, c = i % N;
        T* p = C + r * ldc + c;
        const T b = bias ? bias[c] : T(0);
        *p = beta == T(0) ? b : beta * *p + b;
    }
}

struct Key {
    Kind kind;
    bool ta, tb, bias, tf32;
    int64_t M, N, K, lda, ldb, ldc;
    uint32_t align_a, align_b, align_c, align_bias;
    int64_t count, stride_a, stride_b, stride_c;
    auto tie() const {
        return std::tie(kind, ta, tb, bias, tf32, M, N, K, lda, ldb, ldc, align_a, align_b, align_c,
                        align_bias, count, stride_a, stride_b, stride_c);
    }
    bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// One shape's descriptors and algorithm. found = false: no algorithm with the bias epilogue
// (the call then adds the bias by bias_rows_kernel and multiplies without it).
struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;
    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
        if (c) lt_api().MatrixLayoutDestroy(c);
        if (b) lt_api().MatrixLayoutDestroy(b);
        if (a) lt_api().MatrixLayoutDestroy(a);
        if (op) lt_api().MatmulDescDestroy(op);
    }
};

}  // namespace

struct Gemm::Impl {
    cublasLtHandle_t lt = nullptr;
    Stream stream = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    bool tf32 = false;
    std::map<Key, std::unique_ptr<Plan>> plans;

    // The plan of a shape, built on first use. with_bias: the epilogue adds the bias.
    Plan& plan(const Key& k, bool with_bias) {
        Key key = k;
        key.bias = with_bias;
        auto it = plans.find(key);
        if (it != plans.end()) return *it->second;
        auto p = std::make_unique<Plan>();
        const bool f64 = k.kind == Kind::F64;
        const cublasComputeType_t compute =
            f64 ? CUBLAS_COMPUTE_64F
                : (k.kind == Kind::F32 && k.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F);
        const cudaDataType_t scale = f64 ? CUDA_R_64F : CUDA_R_32F;
        const cudaDataType_t ab = f64                    ? CUDA_R_64F
                                  : k.kind == Kind::BF16 ? CUDA_R_16BF
                                                         : CUDA_R_32F;
        const cudaDataType_t cd = scale;
        PLDR_LT_CALL(lt_api().MatmulDescCreate(&p->op, compute, scale));
        // cuBLASLt's operand 1 is our B, operand 2 our A (see the top of this file).
        const cublasOperation_t op1 = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t op2 = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        PLDR_LT_CALL(
            lt_api().MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1));
        PLDR_LT_CALL(
            lt_api().MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2));
        if (with_bias) {
            const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
            PLDR_LT_CALL(lt_api().MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                         sizeof epi));
            const int32_t bias_type = int32_t(cd);
            PLDR_LT_CALL(lt_api().MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                         &bias_type, sizeof bias_type));
        }
        // Stored shapes, column-major: operand 1 = B is [N,K] read as such (tb: [K,N]); operand 2
        // = A is [K,M] (ta: [M,K]); C is [N,M].
        PLDR_LT_CALL(lt_api().MatrixLayoutCreate(&p->a, ab, uint64_t(k.tb ? k.K : k.N),
                                                 uint64_t(k.tb ? k.N : k.K), k.ldb));
        PLDR_LT_CALL(lt_api().MatrixLayoutCreate(&p->b, ab, uint64_t(k.ta ? k.M : k.K),
                                                 uint64_t(k.ta ? k.K : k.M), k.lda));
        PLDR_LT_CALL(lt_api().MatrixLayoutCreate(&p->c, cd, uint64_t(k.N), uint64_t(k.M), k.ldc));
        if (k.count > 1) {  // a strided batch: each layout's count and stride
            const int32_t count = int32_t(k.count);
            const std::pair<cublasLtMatrixLayout_t, int64_t> strided[3] = {
                {p->a, k.stride_b}, {p->b, k.stride_a}, {p->c, k.stride_c}};
            for (const auto& [layout, stride] : strided) {
                PLDR_LT_CALL(lt_api().MatrixLayoutSetAttribute(
                    layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
                PLDR_LT_CALL(lt_api().MatrixLayoutSetAttribute(
                    layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
            }
        }
        cublasLtMatmulPreference_t pref = nullptr;
        PLDR_LT_CALL(lt_api().MatmulPreferenceCreate(&pref));
        cublasLtMatmulHeuristicResult_t result{};
        int returned = 0;
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        const uint64_t ws = workspace_bytes;
        const uint32_t al[4] = {k.align_b, k.align_a, k.align_c, k.align_c};  // operands 1, 2, C, D
        st = lt_api().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws);
        const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
            st = lt_api().MatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = lt_api().MatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->c, p->c, pref, 1,
                                                 &result, &returned);
        lt_api().MatmulPreferenceDestroy(pref);
        if (st == CUBLAS_STATUS_SUCCESS && returned > 0) {
            p->algo = result.algo;
            p->found = true;
        } else {  // with the epilogue the caller falls back; without it there must be one
            PLDR_REQUIRE(with_bias, "cuBLASLt: no algorithm for a ", k.M, "x", k.N, "x", k.K,
                         " product (", lt_api().GetStatusName(st), ")");
        }
        Plan& ref = *p;
        plans.emplace(key, std::move(p));
        return ref;
    }

    template <class T, class S>
    void run(Kind kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, S alpha, const void* A,
             int64_t lda, const void* B, int64_t ldb, S beta, T* C, int64_t ldc, const T* bias,
             const GemmBatch& batch) {
        PLDR_REQUIRE(M >= 0 && N >= 0 && K >= 0, "gemm: negative dimension (", M, ", ", N, ", ", K,
                     ")");
        PLDR_REQUIRE(batch.count >= 0 && batch.count <= INT32_MAX, "gemm: batch count ",
                     batch.count, " is outside [0, 2^31)");
        PLDR_REQUIRE(batch.stride_a >= 0 && batch.stride_b >= 0 && batch.stride_c >= 0,
                     "gemm: negative batch stride");
        PLDR_REQUIRE(batch.count <= 1 || !bias, "gemm: a strided batch takes no bias");
        if (batch.count == 0) return;
        PLDR_REQUIRE(lda >= (ta ? M : K) && lda >= 1, "gemm: lda ", lda, " is too small");
        PLDR_REQUIRE(ldb >= (tb ? K : N) && ldb >= 1, "gemm: ldb ", ldb, " is too small");
        PLDR_REQUIRE(ldc >= N && ldc >= 1, "gemm: ldc ", ldc, " is too small");
        if (M == 0 || N == 0) return;
        if (K == 0) {  // no products: C = beta·C + bias, for each product of a batch
            for (int64_t i = 0; i < batch.count; ++i) {
                bias_rows_kernel<T><<<grid_for(M * N), kThreads, 0, stream>>>(
                    C + i * batch.stride_c, ldc, bias, M, N, T(beta));
                PLDR_CUDA_LAUNCHED("gemm (K = 0)");
            }
            return;
        }
        const bool strided = batch.count > 1;
        const int64_t ab_size = kind == Kind::F64 ? 8 : kind == Kind::BF16 ? 2 : 4;
        Key k{kind,
              ta,
              tb,
              false,
              kind == Kind::F32 && tf32,
              M,
              N,
              K,
              lda,
              ldb,
              ldc,
              alignment_of(A, strided ? batch.stride_a * ab_size : 0),
              alignment_of(B, strided ? batch.stride_b * ab_size : 0),
              alignment_of(C, strided ? batch.stride_c * int64_t(sizeof(T)) : 0),
              bias ? alignment_of(bias) : 0u,
              strided ? batch.count : 1,
              strided ? batch.stride_a : 0,
              strided ? batch.stride_b : 0,
              strided ? batch.stride_c : 0};
        Plan* p = nullptr;
        bool epilogue =
            false;  // the bias in cuBLASLt's epilogue (float32 and bf16, where it has one)
        if (bias && kind != Kind::F64) {
            Plan& pb = plan(k, true);
            if (pb.found) p = &pb, epilogue = true;
        }
        S b = beta;
        if (bias && !epilogue) {  // the bias first, then C += alpha·op(A)·op(B)
            bias_rows_kernel<T>
                <<<grid_for(M * N), kThreads, 0, stream>>>(C, ldc, bias, M, N, T(beta));
            PLDR_CUDA_LAUNCHED("gemm (bias)");
            b = S(1);
        }
        if (!p) p = &plan(k, false);
        if (epilogue) {  // the plan is shared by every call of its shape: the pointer per call
            const void* bp = bias;
            PLDR_LT_CALL(lt_api().MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &bp, sizeof bp));
        }
        PLDR_LT_CALL(lt_api().Matmul(lt, p->op, &alpha, B, p->a, A, p->b, &b, C, p->c, C, p->c,
                                     &p->algo, workspace, workspace_bytes, stream));
    }
};

Gemm::Gemm(Stream stream, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
    impl_->stream = stream;
    impl_->workspace_bytes = workspace_bytes;
    PLDR_LT_CALL(lt_api().Create(&impl_->lt));
    if (workspace_bytes) {
        const cudaError_t e = cudaMalloc(&impl_->workspace, workspace_bytes);
        if (e != cudaSuccess) {
            lt_api().Destroy(impl_->lt);
            throw_cuda("cudaMalloc (cuBLASLt workspace)", e);
        }
    }
}

Gemm::~Gemm() {
    impl_->plans.clear();
    cudaFree(impl_->workspace);
    lt_api().Destroy(impl_->lt);
}

void Gemm::set_tf32(bool on) {
    impl_->tf32 = on;
}
bool Gemm::tf32() const {
    return impl_->tf32;
}
Stream Gemm::stream() const {
    return impl_->stream;
}
size_t Gemm::plans() const {
    return impl_->plans.size();
}

void Gemm::f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const float* bias, const GemmBatch& batch) {
    impl_->run<float, float>(Kind::F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias,
                             batch);
}

void Gemm::bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const cuda::bf16* A,
                int64_t lda, const cuda::bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
                const float* bias, const GemmBatch& batch) {
    impl_->run<float, float>(Kind::BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias,
                             batch);
}

void Gemm::f64(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
               int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc,
               const double* bias, const GemmBatch& batch) {
    impl_->run<double, double>(Kind::F64, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                               bias, batch);
}

}  // namespace pldr::cuda
