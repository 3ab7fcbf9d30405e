// The DAG terms of the training objective on the GPU (DeviceModel::Impl::dag_terms, called by
// backward.cu's loss_and_grads): train/loss.cpp dag_terms over the layers' A_LM, A_P and G_LM.
// With their gradient on the device (cuda/dag.cu: ops/dag_expm.h's per-instance steps, the
// reference mode's overflow falling back to the exact one as on the CPU); the metrics alone
// (zero coefficients, validation), or everything with PLDR_CUDA_DAG=host, on the host from a
// page-locked copy made while the device goes on.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "cuda_model/impl.cuh"
#include "ops/dag.h"
#include "ops/dag_expm.h"
#include "train/loss.h"

namespace pldr::cuda {

using namespace model_detail;

namespace {

// PLDR_CUDA_DAG=host: the DAG terms with their gradient on the host, as before the device
// kernel (for comparisons; the device's are the default).
bool dag_on_host() {
    static const bool host = [] {
        const char* v = std::getenv("PLDR_CUDA_DAG");
        return v && std::string(v) == "host";
    }();
    return host;
}

}  // namespace

// ---- the DAG terms (train/loss.cpp dag_terms): with their gradient on the device (cuda/dag.cu);
// the metrics alone on a host thread while the device runs the backward ------------------------

template <class T>
std::future<void> DeviceModel<T>::Impl::dag_terms(DevActs<T>& da, int64_t B, const DagCoeffs& dag,
                                                  double grad_scale, LossResult& r, DagGrads& out) {
    const Config& c = m.cfg;
    const int64_t L = c.num_layers, D = c.head_dim, per = B * c.num_heads * D * D;
    const int64_t count = L * B * c.num_heads;
    const bool want_grad = grad_scale != 0.0 && dag.any();
    using Field = Scratch<T> DevLayer<T>::*;
    const std::array<Field, 3> fields = {&DevLayer<T>::A_LM, &DevLayer<T>::A_P, &DevLayer<T>::G};
    const double coeffs[3] = {dag.A, dag.Ap, dag.G};
    double* metrics[3] = {&r.dagA, &r.dagAp, &r.dagG};
    // [L,B,H,D,D] each: layer l's at l·per, as the CPU's DeductiveGrads per layer
    Scratch<T>* grads[3] = {&out.dA_LM, &out.dA_P, &out.dG};
    const bool reference = m.reference_numerics();
    if (want_grad && D <= kDagMaxSide && !dag_on_host()) {
        // With their gradient, on the device (cuda/dag.cu): each term's instances back to back,
        // the CPU's per-instance steps, the mean and the mode's fallback as the CPU's.
        Scratch<T> Xd(L * per, stream);
        Scratch<double> vals(count, stream);
        std::vector<double> vh(static_cast<size_t>(count));
        for (int t = 0; t < 3; ++t) {
            for (int64_t l = 0; l < L; ++l)
                copy_on_device(Xd.get() + l * per, (da.layer(l).*fields[size_t(t)]).get(), per,
                               stream);
            const bool g = coeffs[t] > 0;
            if (g) {
                *grads[t] = Scratch<T>(L * per, stream);
                zero(grads[t]->get(), L * per, stream);
            }
            const double scale = coeffs[t] * grad_scale;
            *metrics[t] = dag_term_with_fallback(
                reference, coeffs[t], &r.dag_loss, [&](DagMode md, bool clear) {
                    if (g && clear) zero(grads[t]->get(), L * per, stream);
                    dag_instances<T>(Xd.get(), count, D, md == DagMode::REFERENCE_F32,
                                     g ? grads[t]->get() : nullptr, float(scale) / float(count),
                                     scale / double(count), vals.get(), stream);
                    copy_to_host(vh.data(), vals.get(), count, stream);
                    if (md == DagMode::REFERENCE_F32)  // y per instance (kernels.h)
                        for (double& v : vh) v = double(dag_detail::dag_ref_value(float(v)));
                    return dag_mean_of(vh.data(), count, md);
                });
        }
        return {};
    }
    // A_LM, A_P and G_LM of every layer, [L,B,H,D,D] each, copied into page-locked memory while
    // the device goes on with the backward (a pageable copy would stall it: 110 MB at 110M,
    // 32 x 1024)
    const int64_t term = L * per;
    T* X = dag_stage.sized(3 * term);
    for (int t = 0; t < 3; ++t)
        for (int64_t l = 0; l < L; ++l)
            copy_to_host_async(X + t * term + l * per, (da.layer(l).*fields[size_t(t)]).get(), per,
                               stream);
    if (!dag_staged) dag_staged = std::make_unique<Event>();
    dag_staged->record(stream);
    const Event* staged = dag_staged.get();
    if (!want_grad) {  // the metrics (and the loss's parts) alone: on a thread of their own
        // with the cores this process may use but the one that launches the device's work
        // (--threads sizes the CPU's own work; the host is otherwise idle while the device
        // trains: 6,720 instances a step at 110M, 32 x 1024, about 30 us each on one core), on
        // the model's device (a thread's first CUDA call would otherwise make device 0 current)
        const int device = on.device;
        return std::async(std::launch::async, [X, term, staged, coeffs, metrics, reference, count,
                                               D, device, &r] {
            PLDR_CUDA_CALL(cudaSetDevice(device));
            const int procs = omp_get_num_procs();  // (the process's CPU affinity)
            omp_set_num_threads(procs > 1 ? procs - 1 : 1);
            staged->wait();
            for (int t = 0; t < 3; ++t)
                *metrics[t] = dag_loss_term(X + t * term, count, D, reference, coeffs[t], 0.0,
                                            static_cast<T*>(nullptr), &r.dag_loss);
        });
    }
    staged->wait();
    for (int t = 0; t < 3; ++t) {
        const bool g = coeffs[t] > 0;
        std::vector<T> dX(g ? size_t(term) : 0, T(0));
        *metrics[t] = dag_loss_term(X + t * term, count, D, reference, coeffs[t], grad_scale,
                                    g ? dX.data() : nullptr, &r.dag_loss);
        if (g) {
            *grads[t] = Scratch<T>(term, stream);
            copy_to_device(grads[t]->get(), dX.data(), term, stream);
            PLDR_CUDA_CALL(cudaStreamSynchronize(stream));  // before dX goes
        }
    }
    return {};
}

#define PLDR_DAG_TERMS(T)                                            \
    template std::future<void> DeviceModel<T>::Impl::dag_terms(      \
        DevActs<T>&, int64_t, const DagCoeffs&, double, LossResult&, \
        DeviceModel<T>::Impl::DagGrads&);
PLDR_DAG_TERMS(float)
PLDR_DAG_TERMS(double)
#undef PLDR_DAG_TERMS

}  // namespace pldr::cuda
