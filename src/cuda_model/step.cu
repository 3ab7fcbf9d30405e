// The optimizer's step of a Trainer on the GPU (see forward.h, make_step_backend): the device
// gradient that backward.cu's accumulate fills, its statistics, the clipping and AdamW with the
// moments in device memory (cuda/kernels.h: the CPU's bits), and the resident StepBackend
// (train/step.h) that runs pldr train --device cuda over them.
#include <memory>
#include <string>
#include <type_traits>

#include "cuda_model/impl.cuh"

namespace pldr::cuda {

using namespace model_detail;

// ---- the optimizer's step on the device ------------------------------------------------------

template <class T>
T* DeviceModel<T>::Impl::grad_buffer() {
    if (!grads.get() || grads.size() != m.num_params()) {
        grads = Scratch<T>(m.num_params(), stream);
        zero(grads.get(), grads.size(), stream);
    }
    return grads.get();
}

template <class T>
void DeviceModel<T>::zero_grads() {
    impl_->on.select();
    zero(impl_->grad_buffer(), impl_->m.num_params(), impl_->stream);
}
template <class T>
LossResult DeviceModel<T>::accumulate(const int64_t* tokens, int64_t B, int64_t S1,
                                      const DagCoeffs& dag, double grad_scale,
                                      double ce_denominator) {
    return impl_->loss_and_grads(tokens, B, S1, dag, nullptr, grad_scale, ce_denominator, true);
}
template <class T>
GradPass DeviceModel<T>::grad_pass(T limit) {
    impl_->on.select();
    return cuda::grad_pass<T>(impl_->grad_buffer(), impl_->m.num_params(), limit, impl_->stream);
}
template <class T>
bool DeviceModel<T>::grads_finite() {
    impl_->on.select();
    return cuda::all_finite<T>(impl_->grad_buffer(), impl_->m.num_params(), impl_->stream);
}
template <class T>
void DeviceModel<T>::download_grads(T* host) {
    impl_->on.select();
    copy_to_host(host, impl_->grad_buffer(), impl_->m.num_params(), impl_->stream);
}
template <class T>
void DeviceModel<T>::clip_grads_by_value(T limit) {
    impl_->on.select();
    const cuda::Phase phase("clip", impl_->stream);
    cuda::clip_by_value<T>(impl_->grad_buffer(), impl_->m.num_params(), limit, impl_->stream);
}
template <class T>
void DeviceModel<T>::scale_grads_to_norm(double max_norm, double norm) {
    impl_->on.select();
    cuda::scale_to_norm<T>(impl_->grad_buffer(), impl_->m.num_params(), max_norm, norm,
                           impl_->stream);
}
template <class T>
void DeviceModel<T>::adamw(int64_t t, double lr, const AdamWConfig& cfg, T* host) {
    Impl& im = *impl_;
    im.on.select();
    const cuda::Phase phase("adamw", im.stream);
    const int64_t P = im.m.num_params();
    T* mm1 = sized(im.adam_m, P, im.stream);  // (zero when new: set_moments was never called)
    T* mm2 = sized(im.adam_v, P, im.stream);
    adamw_update<T>(im.params.get(), im.grad_buffer(), mm1, mm2, P, t, lr, cfg, im.stream);
    im.params16_fresh = false;  // the bf16 weights follow the new parameters
    // The float32 model's operator reads its parameters in float64 (op64): widened again.
    im.upload_op64();
    if (host) download_params(host);
}
template <class T>
void DeviceModel<T>::download_params(T* host) {
    Impl& im = *impl_;
    im.on.select();
    copy_to_host(host, im.params.get(), im.m.num_params(), im.stream);
}
template <class T>
void DeviceModel<T>::set_precision(Precision p) {
    PLDR_REQUIRE(p == Precision::FP32 || (std::is_same_v<T, float>),
                 "--precision bf16 trains a float32 model (mixed precision); this one is float64");
    impl_->precision = p;
}
template <class T>
void DeviceModel<T>::set_moments(const T* m1, const T* m2) {
    Impl& im = *impl_;
    im.on.select();
    const int64_t P = im.m.num_params();
    copy_to_device(sized(im.adam_m, P, im.stream), m1, P, im.stream);
    copy_to_device(sized(im.adam_v, P, im.stream), m2, P, im.stream);
    PLDR_CUDA_CALL(cudaStreamSynchronize(im.stream));  // before the host's go
}
template <class T>
void DeviceModel<T>::get_moments(T* m1, T* m2) {
    Impl& im = *impl_;
    im.on.select();
    const int64_t P = im.m.num_params();
    copy_to_host(m1, sized(im.adam_m, P, im.stream), P, im.stream);
    copy_to_host(m2, sized(im.adam_v, P, im.stream), P, im.stream);
}

// ---- a Trainer's steps on the device (train/step.h StepBackend) --------------------------------

namespace {

template <class T>
class DeviceStep final : public StepBackend<T> {
  public:
    DeviceStep(Model<T>& m, int device)
        : host_(m), dm_(m, device), name_("cuda:" + std::to_string(device)) {}
    LossResult loss_and_grads(const TokenBatch& b, const DagCoeffs& dag, T* grads,
                              double grad_scale, double ce_denominator) override {
        return dm_.loss_and_grads(b.tokens, b.B, b.S1, dag, grads, grad_scale, ce_denominator);
    }
    void parameters_changed() override { dm_.refresh_params(); }
    std::string name() const override { return name_; }

    void set_precision(Precision p) override { dm_.set_precision(p); }
    bool resident() const override { return true; }
    void zero_grads() override { dm_.zero_grads(); }
    LossResult accumulate(const TokenBatch& b, const DagCoeffs& dag, double grad_scale,
                          double ce_denominator) override {
        return dm_.accumulate(b.tokens, b.B, b.S1, dag, grad_scale, ce_denominator);
    }
    GradPass grad_pass(T limit) override { return dm_.grad_pass(limit); }
    bool grads_finite() override { return dm_.grads_finite(); }
    void download_grads(T* host) override { dm_.download_grads(host); }
    void clip_by_value(T limit) override { dm_.clip_grads_by_value(limit); }
    void scale_to_norm(double max_norm, double norm) override {
        dm_.scale_grads_to_norm(max_norm, norm);
    }
    // The parameters stay on the device after a step (440 MB at 110M: a download per step
    // would cost about as much as a tenth of the step); download_params brings them.
    void adamw(int64_t t, double lr, const AdamWConfig& cfg) override {
        dm_.adamw(t, lr, cfg, nullptr);
        stale_ = true;
    }
    void download_params() override {
        if (!stale_) return;
        dm_.download_params(host_.params.data());
        stale_ = false;
    }
    void set_moments(const AdamWState<T>& s) override {
        PLDR_REQUIRE(s.size() == host_.num_params(), "optimizer state has ", s.size(),
                     " elements, the model ", host_.num_params());
        dm_.set_moments(s.m.data(), s.v.data());
    }
    void get_moments(AdamWState<T>& s) override {
        if (s.size() != host_.num_params()) {
            const int64_t step = s.step;
            s = AdamWState<T>(host_.num_params());
            s.step = step;
        }
        dm_.get_moments(s.m.data(), s.v.data());
    }

  private:
    Model<T>& host_;
    DeviceModel<T> dm_;
    std::string name_;
    bool stale_ = false;  // a step changed the device's parameters since the last download
};

}  // namespace

template <class T>
std::shared_ptr<StepBackend<T>> make_step_backend(Model<T>& m, int device) {
    return std::make_shared<DeviceStep<T>>(m, device);
}
template std::shared_ptr<StepBackend<float>> make_step_backend(Model<float>&, int);
template std::shared_ptr<StepBackend<double>> make_step_backend(Model<double>&, int);

#define PLDR_STEP_MEMBERS(T)                                                          \
    template void DeviceModel<T>::zero_grads();                                       \
    template LossResult DeviceModel<T>::accumulate(const int64_t*, int64_t, int64_t,  \
                                                   const DagCoeffs&, double, double); \
    template GradPass DeviceModel<T>::grad_pass(T);                                   \
    template bool DeviceModel<T>::grads_finite();                                     \
    template void DeviceModel<T>::download_grads(T*);                                 \
    template void DeviceModel<T>::clip_grads_by_value(T);                             \
    template void DeviceModel<T>::scale_grads_to_norm(double, double);                \
    template void DeviceModel<T>::adamw(int64_t, double, const AdamWConfig&, T*);     \
    template void DeviceModel<T>::download_params(T*);                                \
    template void DeviceModel<T>::set_moments(const T*, const T*);                    \
    template void DeviceModel<T>::set_precision(Precision);                           \
    template void DeviceModel<T>::get_moments(T*, T*);
PLDR_STEP_MEMBERS(float)
PLDR_STEP_MEMBERS(double)
#undef PLDR_STEP_MEMBERS

}  // namespace pldr::cuda
