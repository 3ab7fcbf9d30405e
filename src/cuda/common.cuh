// What every kernel file of the backend shares (device code; included by src/cuda/*.cu only):
// error checks that throw pldr::Error, the element types' loads and stores, the launch shapes,
// and stream-ordered scratch memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "core/error.h"
#include "cuda/kernels.h"

namespace pldr::cuda {

// A failed runtime call: pldr::Error naming the call and the runtime's reason, one line.
[[noreturn]] inline void throw_cuda(const char* what, cudaError_t e) {
    fail("CUDA: ", what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}
#define PLDR_CUDA_CALL(call)                                                  \
    do {                                                                      \
        const cudaError_t pldr_e_ = (call);                                   \
        if (pldr_e_ != cudaSuccess) ::pldr::cuda::throw_cuda(#call, pldr_e_); \
    } while (0)
// After a launch: a bad configuration (or an earlier asynchronous fault) surfaces here.
#define PLDR_CUDA_LAUNCHED(name)                                             \
    do {                                                                     \
        const cudaError_t pldr_e_ = cudaGetLastError();                      \
        if (pldr_e_ != cudaSuccess) ::pldr::cuda::throw_cuda(name, pldr_e_); \
    } while (0)

// ---- element types: T in memory, Acc<T> in registers ------------------------------------------
template <class T>
__device__ __forceinline__ Acc<T> load(const T* p, int64_t i) {
    return p[i];
}
template <>
__device__ __forceinline__ float load<bf16>(const bf16* p, int64_t i) {
    return __bfloat162float(__ushort_as_bfloat16(p[i].bits));
}
template <class T>
__device__ __forceinline__ void store(T* p, int64_t i, Acc<T> v) {
    p[i] = v;
}
template <>
__device__ __forceinline__ void store<bf16>(bf16* p, int64_t i, float v) {
    p[i].bits = __bfloat16_as_ushort(__float2bfloat16_rn(v));  // nearest, ties to even
}

// ---- launch shapes ------------------------------------------------------------------------------
constexpr int kThreads = 256;
// Blocks of kThreads covering n elements with a grid-stride loop, capped (each thread then
// takes several elements).
inline unsigned grid_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return unsigned(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}
// Rows of a row-parallel kernel are on blockIdx.x (and y beyond 2^31 − 1: never at our sizes).
inline void require_grid_rows(int64_t rows, const char* what) {
    PLDR_REQUIRE(rows <= int64_t(0x7fffffff), what, ": ", rows, " rows exceed one launch");
}

// ---- stream-ordered device arrays: freed on the stream after the work that uses them --------
template <class U>
class Scratch {
  public:
    Scratch() = default;
    Scratch(int64_t n, Stream s) : n_(n), s_(s) {
        PLDR_CUDA_CALL(
            cudaMallocAsync(reinterpret_cast<void**>(&p_), size_t(n < 1 ? 1 : n) * sizeof(U), s_));
    }
    ~Scratch() { reset(); }
    Scratch(Scratch&& o) noexcept { *this = std::move(o); }
    Scratch& operator=(Scratch&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            n_ = std::exchange(o.n_, 0);
            s_ = o.s_;
        }
        return *this;
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    U* get() const { return p_; }
    int64_t size() const { return n_; }
    void reset() {
        if (p_) cudaFreeAsync(p_, s_);
        p_ = nullptr;
        n_ = 0;
    }

  private:
    U* p_ = nullptr;
    int64_t n_ = 0;
    Stream s_ = nullptr;
};

// Copies n values to the device (stream-ordered).
template <class U>
void copy_to_device(U* dev, const U* host, int64_t n, Stream s) {
    if (n > 0)
        PLDR_CUDA_CALL(
            cudaMemcpyAsync(dev, host, size_t(n) * sizeof(U), cudaMemcpyHostToDevice, s));
}

// Copies n values from one device buffer to another (stream-ordered).
template <class U>
void copy_on_device(U* dst, const U* src, int64_t n, Stream s) {
    if (n > 0)
        PLDR_CUDA_CALL(
            cudaMemcpyAsync(dst, src, size_t(n) * sizeof(U), cudaMemcpyDeviceToDevice, s));
}

// Copies n values back and waits for the stream.
template <class U>
void copy_to_host(U* host, const U* dev, int64_t n, Stream s) {
    PLDR_CUDA_CALL(cudaMemcpyAsync(host, dev, size_t(n) * sizeof(U), cudaMemcpyDeviceToHost, s));
    PLDR_CUDA_CALL(cudaStreamSynchronize(s));
}

// Page-locked host memory (cudaMallocHost), grown on demand: copies from the device into it run
// asynchronously (into pageable memory cudaMemcpyAsync returns only once the copy is done).
template <class U>
class PinnedHost {
  public:
    PinnedHost() = default;
    ~PinnedHost() {
        if (p_) cudaFreeHost(p_);
    }
    PinnedHost(const PinnedHost&) = delete;
    PinnedHost& operator=(const PinnedHost&) = delete;
    // Room for n values (the contents are not kept when it grows).
    U* sized(int64_t n) {
        if (n > n_) {
            if (p_) PLDR_CUDA_CALL(cudaFreeHost(p_));
            p_ = nullptr;
            n_ = 0;
            PLDR_CUDA_CALL(cudaMallocHost(reinterpret_cast<void**>(&p_), size_t(n) * sizeof(U)));
            n_ = n;
        }
        return p_;
    }

  private:
    U* p_ = nullptr;
    int64_t n_ = 0;
};

// Copies n values back without waiting (host: page-locked, see PinnedHost; read it after the
// stream, or an Event recorded after this, has been waited for).
template <class U>
void copy_to_host_async(U* host, const U* dev, int64_t n, Stream s) {
    if (n > 0)
        PLDR_CUDA_CALL(
            cudaMemcpyAsync(host, dev, size_t(n) * sizeof(U), cudaMemcpyDeviceToHost, s));
}

// An event without timing: recorded on a stream, waited for by any host thread.
class Event {
  public:
    Event() { PLDR_CUDA_CALL(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
    ~Event() { cudaEventDestroy(e_); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    void record(Stream s) { PLDR_CUDA_CALL(cudaEventRecord(e_, s)); }
    void wait() const { PLDR_CUDA_CALL(cudaEventSynchronize(e_)); }

  private:
    cudaEvent_t e_{};
};

}  // namespace pldr::cuda
