// The API's side of the CUDA backend (api_cuda.h) over src/cuda_model/ and src/cuda/. Compiled
// into every build; PLDR_WITH_CUDA (set by CMake with PLDR_CUDA=ON) decides whether it reaches
// the backend or refuses in one line.
#include "api/api_cuda.h"

#include <algorithm>
#include <mutex>
#include <variant>

#include "core/error.h"
#include "perf/limits.h"

#if PLDR_WITH_CUDA
#include "cuda/limits.h"
#include "cuda/profile.h"
#include "cuda_model/forward.h"
#include "cuda_model/session.h"
#endif

namespace pldr::api::gpu {

namespace {

const DeviceSpec& require_cuda(const DeviceSpec& d) {
    PLDR_REQUIRE(d.kind == DeviceKind::CUDA, "internal: ", d.name(), " is not a CUDA device");
#if !PLDR_WITH_CUDA
    fail("--device ", d.name(), ": CUDA support was not built (PLDR_CUDA=OFF)");
#endif
    return d;
}

}  // namespace

std::string not_yet(const DeviceSpec& d) {
    return "--device " + d.name() +
           ": the CUDA backend runs the forward pass (Model::forward, pldr dump), the gradient "
           "(Model::loss_and_grads, pldr grad), generation, sessions (prefill, decode), scoring "
           "and perplexity, evaluation (pldr eval), pldr serve (--mode block), pldr train's "
           "steps and pldr bench's "
           "prefill, decode and training, but not yet this job; use --device cpu for it "
           "(docs/gpu.md)";
}

#if PLDR_WITH_CUDA

struct Copy {
    std::variant<std::unique_ptr<cuda::DeviceModel<float>>,
                 std::unique_ptr<cuda::DeviceModel<double>>>
        model;
    // One call at a time: a DeviceModel's plans and buffers are not shared between threads, and
    // the API's Model may be.
    mutable std::mutex mu;
};

// The copy's model of precision T, with the copy locked for the call.
template <class T, class F>
static auto with_model(const Copy& c, F&& f) {
    using Ptr = std::unique_ptr<cuda::DeviceModel<T>>;
    const Ptr* p = std::get_if<Ptr>(&c.model);
    PLDR_REQUIRE(p, "internal: the device copy is not of the asked precision");
    std::lock_guard<std::mutex> lock(c.mu);
    return f(**p);
}

template <class T>
static std::shared_ptr<const Copy> upload_t(const ::pldr::Model<T>& m, const DeviceSpec& d) {
    require_cuda(d);
    auto c = std::make_shared<Copy>();
    c->model = std::make_unique<cuda::DeviceModel<T>>(m, d.index);
    return c;
}
std::shared_ptr<const Copy> upload(const ::pldr::Model<float>& m, const DeviceSpec& d) {
    return upload_t(m, d);
}
std::shared_ptr<const Copy> upload(const ::pldr::Model<double>& m, const DeviceSpec& d) {
    return upload_t(m, d);
}

int64_t param_bytes(const Copy& c) {
    return std::visit([](const auto& p) { return p->param_bytes(); }, c.model);
}

template <class T>
static void forward_t(const Copy& c, const int64_t* ids, int64_t B, int64_t S,
                      ::pldr::Activations<T>& acts) {
    with_model<T>(c, [&](cuda::DeviceModel<T>& dm) {
        dm.forward(ids, B, S, acts, ::pldr::KeepActs::ALL);
        return 0;
    });
}
void forward(const Copy& c, const int64_t* ids, int64_t B, int64_t S,
             ::pldr::Activations<float>& acts) {
    forward_t(c, ids, B, S, acts);
}
void forward(const Copy& c, const int64_t* ids, int64_t B, int64_t S,
             ::pldr::Activations<double>& acts) {
    forward_t(c, ids, B, S, acts);
}

namespace {

// One generation sequence's session on the device, its calls under the copy's lock.
template <class T>
class GpuDecoder final : public ::pldr::DeviceDecoder<T> {
  public:
    GpuDecoder(const Copy& c, cuda::DeviceModel<T>& dm, ::pldr::CacheMode mode, int64_t len)
        : c_(c) {
        std::lock_guard<std::mutex> lock(c_.mu);
        s_ = std::make_unique<cuda::DeviceSession<T>>(dm, mode, len);
    }
    ~GpuDecoder() override {
        std::lock_guard<std::mutex> lock(c_.mu);
        s_.reset();
    }
    const std::vector<T>& prefill(const std::vector<int64_t>& ids) override {
        std::lock_guard<std::mutex> lock(c_.mu);
        return s_->prefill(ids);
    }
    const std::vector<T>& decode(int64_t id) override {
        std::lock_guard<std::mutex> lock(c_.mu);
        return s_->decode(id);
    }
    const std::vector<T>& logits() const override { return s_->logits(); }
    void set_g_cache(const ::pldr::GCache<T>& g) override {
        std::lock_guard<std::mutex> lock(c_.mu);
        s_->set_g_cache(g);
    }
    ::pldr::GCache<T> g_cache() const override {
        std::lock_guard<std::mutex> lock(c_.mu);
        return s_->g_cache();
    }
    // Every decoder of the group is a GpuDecoder of this copy (one DeviceDecoders made them).
    void decode_group(const std::vector<::pldr::DeviceDecoder<T>*>& group,
                      const std::vector<int64_t>& ids) override {
        std::vector<cuda::DeviceSession<T>*> ss;
        for (::pldr::DeviceDecoder<T>* d : group) {
            auto* g = dynamic_cast<GpuDecoder*>(d);
            PLDR_REQUIRE(g && &g->c_ == &c_,
                         "internal: a batched decode step mixes sessions of different models");
            ss.push_back(g->s_.get());
        }
        std::lock_guard<std::mutex> lock(c_.mu);
        cuda::DeviceSession<T>::decode_batch(ss, ids);
    }

  private:
    const Copy& c_;
    std::unique_ptr<cuda::DeviceSession<T>> s_;
};

template <class T>
void decoders_t(const Copy& c, ::pldr::DeviceDecoders<T>& out) {
    using Ptr = std::unique_ptr<cuda::DeviceModel<T>>;
    const Ptr* p = std::get_if<Ptr>(&c.model);
    PLDR_REQUIRE(p, "internal: the device copy is not of the asked precision");
    cuda::DeviceModel<T>* dm = p->get();
    out = [&c, dm](::pldr::CacheMode mode,
                   int64_t len) -> std::unique_ptr<::pldr::DeviceDecoder<T>> {
        return std::make_unique<GpuDecoder<T>>(c, *dm, mode, len);
    };
}

template <class T>
void scoring_t(const Copy& c, ::pldr::DeviceScoring<T>& out) {
    decoders_t(c, out.decoders);
    using Ptr = std::unique_ptr<cuda::DeviceModel<T>>;
    cuda::DeviceModel<T>* dm = std::get_if<Ptr>(&c.model)->get();
    out.logits = [&c, dm](const int64_t* ids, int64_t S, std::vector<T>& logits) {
        ::pldr::Activations<T> acts;
        {
            std::lock_guard<std::mutex> lock(c.mu);
            dm->forward(ids, 1, S, acts, ::pldr::KeepActs::INFERENCE);
        }
        logits.assign(acts.logits.ptr(), acts.logits.ptr() + acts.logits.numel());
    };
}

}  // namespace

void decoders(const Copy& c, ::pldr::DeviceDecoders<float>& out) {
    decoders_t(c, out);
}
void decoders(const Copy& c, ::pldr::DeviceDecoders<double>& out) {
    decoders_t(c, out);
}
void scoring(const Copy& c, ::pldr::DeviceScoring<float>& out) {
    scoring_t(c, out);
}
void scoring(const Copy& c, ::pldr::DeviceScoring<double>& out) {
    scoring_t(c, out);
}

::pldr::LossResult loss_and_grads(const Copy& c, const int64_t* tokens, int64_t B, int64_t S1,
                                  const ::pldr::DagCoeffs& dag, float* grads) {
    return with_model<float>(c, [&](cuda::DeviceModel<float>& dm) {
        return dm.loss_and_grads(tokens, B, S1, dag, grads);
    });
}
::pldr::LossResult loss_and_grads(const Copy& c, const int64_t* tokens, int64_t B, int64_t S1,
                                  const ::pldr::DagCoeffs& dag, double* grads) {
    return with_model<double>(c, [&](cuda::DeviceModel<double>& dm) {
        return dm.loss_and_grads(tokens, B, S1, dag, grads);
    });
}

std::vector<double> run_decode(const ::pldr::Model<float>& m, const DeviceSpec& d,
                               ::pldr::CacheMode mode, int64_t batch, int64_t prompt, int64_t n_new,
                               int64_t context, int reps, int warmup, const perf::RepHook& hook,
                               double min_seconds, std::vector<double>* batch1) {
    require_cuda(d);
    PLDR_REQUIRE(batch >= 1 && batch <= 1024, "decode batch ", batch, " is outside [1, 1024]");
    PLDR_REQUIRE(prompt >= 1 && n_new >= 1 && prompt + n_new <= context, "decode of ", prompt,
                 " + ", n_new, " tokens does not fit the context of ", context);
    cuda::DeviceModel<float> dm(m, d.index);
    const auto argmax = [](const std::vector<float>& v) {
        return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
    };
    // `n` sessions, each prompt its own random ids (perf's seeds: 100 + b), then n_new greedy
    // steps of all of them together; each step waits for its logits on the host, so the timing
    // is the whole loop. Tokens/s of the batch.
    const auto once = [&](int64_t n) {
        std::vector<std::unique_ptr<cuda::DeviceSession<float>>> own;
        std::vector<cuda::DeviceSession<float>*> ss;
        std::vector<int64_t> next(static_cast<size_t>(n));
        for (int64_t b = 0; b < n; ++b) {
            own.push_back(std::make_unique<cuda::DeviceSession<float>>(dm, mode, context));
            ss.push_back(own.back().get());
            next[size_t(b)] = argmax(
                ss.back()->prefill(perf::random_ids(prompt, m.cfg.vocab_size, 100 + uint64_t(b))));
        }
        const double t0 = perf::now_s();
        for (int64_t t = 0; t < n_new; ++t) {
            cuda::DeviceSession<float>::decode_batch(ss, next);
            for (int64_t b = 0; b < n; ++b) next[size_t(b)] = argmax(ss[size_t(b)]->logits());
        }
        return double(n * n_new) / (perf::now_s() - t0);
    };
    int calls = 0;  // the first `warmup` are the warm-up
    return perf::timed_reps(reps, warmup, min_seconds, hook, [&] {
        if (batch1) {  // a pair: batch 1, then the batch
            const double one = once(1);
            if (calls++ >= warmup) batch1->push_back(one);
        }
        return once(batch);
    });
}

std::shared_ptr<::pldr::StepBackend<float>> step_backend(::pldr::Model<float>& m,
                                                         const DeviceSpec& d) {
    return cuda::make_step_backend(m, require_cuda(d).index);
}
std::shared_ptr<::pldr::StepBackend<double>> step_backend(::pldr::Model<double>& m,
                                                          const DeviceSpec& d) {
    return cuda::make_step_backend(m, require_cuda(d).index);
}

std::vector<double> run_prefill(const ::pldr::Model<float>& m, const DeviceSpec& d, int64_t prompt,
                                int reps, int warmup, const perf::RepHook& hook, double min_seconds,
                                int64_t* param_bytes_out) {
    require_cuda(d);
    PLDR_REQUIRE(prompt >= 1 && prompt <= m.cfg.max_position, "prefill of ", prompt,
                 " tokens does not fit the context of ", m.cfg.max_position);
    cuda::DeviceModel<float> dm(m, d.index);
    if (param_bytes_out) *param_bytes_out = dm.param_bytes();
    const std::vector<int64_t> ids = perf::random_ids(prompt, m.cfg.vocab_size, 7);
    ::pldr::Tensor<float> logits;
    // last_logits waits for the device: each repetition is the whole pass, upload of the ids
    // and download of the logits included.
    return perf::timed_reps(reps, warmup, min_seconds, hook, [&] {
        const double t0 = perf::now_s();
        dm.last_logits(ids.data(), 1, prompt, logits);
        return double(prompt) / (perf::now_s() - t0);
    });
}

int64_t pool_peak_bytes(const DeviceSpec& d, bool reset) {
    return cuda::pool_peak_bytes(require_cuda(d).index, reset);
}

std::vector<BenchPhase> phase_times(const DeviceSpec& d, bool reset) {
    require_cuda(d);
    std::vector<BenchPhase> out;
    if (!cuda::profile_on()) return out;
    for (const cuda::PhaseTime& t : cuda::profile_take(reset))
        out.push_back({t.name, t.depth, t.calls, t.ms});
    return out;
}

double limit(const std::string& which, const DeviceSpec& d) {
    require_cuda(d);
    if (which == "read") return cuda::read_bandwidth_gbs(d.index);
    if (which == "sgemm") return cuda::gemm_gflops(d.index, "f32");
    if (which == "tf32") return cuda::gemm_gflops(d.index, "tf32");
    if (which == "bf16") return cuda::gemm_gflops(d.index, "bf16");
    fail("unknown limit '", which, "' (read, sgemm, tf32 or bf16)");
}

std::string limit_source(const DeviceSpec& d) {
    require_cuda(d);
    return "cuBLASLt on " + d.name() + " (" + cuda::device_info(d.index).name + ")";
}

#else  // without the backend: parse_device refuses CUDA first; these say the same

struct Copy {};
std::shared_ptr<const Copy> upload(const ::pldr::Model<float>&, const DeviceSpec& d) {
    require_cuda(d);
    return nullptr;
}
std::shared_ptr<const Copy> upload(const ::pldr::Model<double>&, const DeviceSpec& d) {
    require_cuda(d);
    return nullptr;
}
int64_t param_bytes(const Copy&) {
    return 0;
}
void forward(const Copy&, const int64_t*, int64_t, int64_t, ::pldr::Activations<float>&) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
void forward(const Copy&, const int64_t*, int64_t, int64_t, ::pldr::Activations<double>&) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
::pldr::LossResult loss_and_grads(const Copy&, const int64_t*, int64_t, int64_t,
                                  const ::pldr::DagCoeffs&, float*) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
::pldr::LossResult loss_and_grads(const Copy&, const int64_t*, int64_t, int64_t,
                                  const ::pldr::DagCoeffs&, double*) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
void scoring(const Copy&, ::pldr::DeviceScoring<float>&) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
void scoring(const Copy&, ::pldr::DeviceScoring<double>&) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
void decoders(const Copy&, ::pldr::DeviceDecoders<float>&) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
void decoders(const Copy&, ::pldr::DeviceDecoders<double>&) {
    fail("CUDA support was not built (PLDR_CUDA=OFF)");
}
std::vector<double> run_decode(const ::pldr::Model<float>&, const DeviceSpec& d, ::pldr::CacheMode,
                               int64_t, int64_t, int64_t, int64_t, int, int, const perf::RepHook&,
                               double, std::vector<double>*) {
    require_cuda(d);
    return {};
}
std::shared_ptr<::pldr::StepBackend<float>> step_backend(::pldr::Model<float>&,
                                                         const DeviceSpec& d) {
    require_cuda(d);
    return nullptr;
}
std::shared_ptr<::pldr::StepBackend<double>> step_backend(::pldr::Model<double>&,
                                                          const DeviceSpec& d) {
    require_cuda(d);
    return nullptr;
}
std::vector<double> run_prefill(const ::pldr::Model<float>&, const DeviceSpec& d, int64_t, int, int,
                                const perf::RepHook&, double, int64_t*) {
    require_cuda(d);
    return {};
}
int64_t pool_peak_bytes(const DeviceSpec& d, bool) {
    require_cuda(d);
    return 0;
}
std::vector<BenchPhase> phase_times(const DeviceSpec& d, bool) {
    require_cuda(d);
    return {};
}
double limit(const std::string&, const DeviceSpec& d) {
    require_cuda(d);
    return 0;
}
std::string limit_source(const DeviceSpec& d) {
    require_cuda(d);
    return {};
}

#endif

}  // namespace pldr::api::gpu
