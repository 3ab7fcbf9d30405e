// The training step (see step.h).
#include "train/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/gemm_bf16.h"
#include "dist/dist.h"
#include "train/clip.h"

namespace pldr {

const char* recompute_name(Recompute r) {
    return r == Recompute::FULL ? "full" : r == Recompute::NONE ? "none" : "selective";
}

Recompute parse_recompute(const std::string& s) {
    if (s == "none") return Recompute::NONE;
    if (s == "selective") return Recompute::SELECTIVE;
    if (s == "full") return Recompute::FULL;
    throw Error(cat("recompute '", s, "' is not none, selective or full"));
}

KeepActs keep_of(Recompute r) {
    return r == Recompute::FULL   ? KeepActs::LAYER_INPUTS
           : r == Recompute::NONE ? KeepActs::ALL
                                  : KeepActs::TRAINING;
}

void TrainConfig::validate() const {
    adam.validate();
    schedule.validate();
    PLDR_REQUIRE(dag.A >= 0 && dag.Ap >= 0 && dag.G >= 0, "DAG coefficients must be >= 0 (got ",
                 dag.A, ",", dag.Ap, ",", dag.G, ")");
    PLDR_REQUIRE(std::isfinite(dag.A + dag.Ap + dag.G), "DAG coefficients must be finite");
    PLDR_REQUIRE(clip_value > 0 && std::isfinite(clip_value), "clip value must be > 0 (got ",
                 clip_value, ")");
    PLDR_REQUIRE(clip_norm > 0 && std::isfinite(clip_norm), "clip norm must be > 0 (got ",
                 clip_norm, ")");
}

void step_backend_not_resident(const std::string& name) {
    fail("internal: the step backend ", name, " holds no gradient (not resident)");
}

template <typename T>
Trainer<T>::Trainer(Model<T>& model, const TrainConfig& cfg, const DistOptions& dist,
                    std::shared_ptr<StepBackend<T>> backend)
    : model_(model), cfg_(cfg), backend_(std::move(backend)) {
    cfg_.validate();
    PLDR_REQUIRE(cfg_.precision == Precision::FP32 || (std::is_same_v<T, float>),
                 "--precision bf16 trains a float32 model (mixed precision); this one is float64");
    if (backend_) backend_->set_precision(cfg_.precision);
    PLDR_REQUIRE(!backend_ || dist::world().size == 1, "--device ",
                 backend_ ? backend_->name() : "",
                 ": data parallel training runs on the CPU only so far (one process per GPU "
                 "waits for a machine with several; docs/gpu.md)");
    const int64_t n = model.layout.total;
    grads_ = ZeroPages<T>(static_cast<size_t>(n));
    const dist::World& w = dist::world();
    distributed_ = w.size > 1;
    sharded_ = distributed_ && dist.zero1;
    lo_ = distributed_ ? dist::shard_begin(n, w.rank) : 0;
    shard_n_ = distributed_ ? dist::shard_begin(n, w.rank + 1) - lo_ : n;
    if (distributed_) gshard_.assign(size_t(shard_n_), T(0));
    opt_ = AdamWState<T>(sharded_ ? shard_n_ : n);
}

template <typename T>
const AdamWState<T>& Trainer<T>::full_optimizer(AdamWState<T>& scratch) {
    if (backend_ && backend_->resident()) backend_->get_moments(opt_);  // the moments live there
    if (!sharded_) return opt_;
    const int64_t n = model_.layout.total;
    scratch = AdamWState<T>(dist::is_root() ? n : 0);
    scratch.step = opt_.step;
    dist::gather_to_root(opt_.m.data(), scratch.m.data(), n, "gathering the AdamW moments m");
    dist::gather_to_root(opt_.v.data(), scratch.v.data(), n, "gathering the AdamW moments v");
    return scratch;
}

template <typename T>
void Trainer<T>::set_optimizer(AdamWState<T>&& full) {
    const int64_t n = model_.layout.total;
    if (!distributed_) {
        PLDR_REQUIRE(full.size() == n, "optimizer state has ", full.size(), " elements, the model ",
                     n);
        opt_ = std::move(full);
        if (backend_ && backend_->resident()) backend_->set_moments(opt_);
        return;
    }
    const bool root = dist::is_root();
    if (root)
        PLDR_REQUIRE(full.size() == n, "optimizer state has ", full.size(), " elements, the model ",
                     n);
    int64_t step = root ? full.step : 0;
    dist::broadcast(&step, sizeof step, 0, "broadcasting the step count");
    if (sharded_) {
        AdamWState<T> s(shard_n_);
        dist::scatter_from_root(root ? full.m.data() : nullptr, s.m.data(), n,
                                "scattering the AdamW moments m");
        dist::scatter_from_root(root ? full.v.data() : nullptr, s.v.data(), n,
                                "scattering the AdamW moments v");
        s.step = step;
        opt_ = std::move(s);
    } else {
        if (!root) full = AdamWState<T>(n);
        dist::broadcast(full.m.data(), n * int64_t(sizeof(T)), 0,
                        "broadcasting the AdamW moments m");
        dist::broadcast(full.v.data(), n * int64_t(sizeof(T)), 0,
                        "broadcasting the AdamW moments v");
        full.step = step;
        opt_ = std::move(full);
    }
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Data parallel: the global count of scored targets of each micro-batch (every rank gets every
// count and sums them in rank order, so all ranks hold the same bits).
std::vector<double> global_counts(const std::vector<TokenBatch>& micro, int64_t pad) {
    const int P = dist::world().size;
    const size_t k = micro.size();
    std::vector<double> mine(k), all(k * size_t(P));
    for (size_t j = 0; j < k; ++j) {
        const TokenBatch& b = micro[j];
        PLDR_REQUIRE(b.S1 >= 2, "a training sequence needs at least 2 tokens (got ", b.S1, ")");
        int64_t c = 0;
        for (int64_t i = 0; i < b.B; ++i)
            for (int64_t s = 1; s < b.S1; ++s) c += b.tokens[i * b.S1 + s] != pad;
        mine[j] = double(c);
    }
    dist::allgather_values(mine.data(), all.data(), int64_t(k), "counting the scored tokens");
    std::vector<double> N(k, 0.0);
    for (int r = 0; r < P; ++r)
        for (size_t j = 0; j < k; ++j) N[j] += all[size_t(r) * k + j];
    for (size_t j = 0; j < k; ++j)
        PLDR_REQUIRE(N[j] > 0, "no scored target tokens in the global batch (all are pad)");
    return N;
}

// What the step decides on: the loss, the gradient's sum of squares, its count over the clip
// limit, and whether it holds a non-finite element (over every rank when data parallel).
struct StepStats {
    LossResult loss;
    double sum_sq = 0;
    int64_t clipped = 0;
    bool non_finite_grad = false;
};

// One process: the mean of the micro-batch losses.
StepStats local_stats(const std::vector<LossResult>& losses, const GradPass& gp, bool non_finite) {
    StepStats s;
    const double w = 1.0 / double(losses.size());
    for (const LossResult& l : losses) {
        s.loss.value += w * l.value;
        s.loss.ce += w * l.ce;
        s.loss.accuracy += w * l.accuracy;
        s.loss.dagA += w * l.dagA;
        s.loss.dagAp += w * l.dagAp;
        s.loss.dagG += w * l.dagG;
        s.loss.dag_loss += w * l.dag_loss;
        s.loss.scored += l.scored;
        s.loss.correct += l.correct;
    }
    s.sum_sq = gp.sum_sq;
    s.clipped = gp.over;
    s.non_finite_grad = non_finite;
    return s;
}

// Data parallel: every rank's share of the global batch's loss (each micro-batch's CE over its
// global count N), its shard's sum of squares and clipped count, summed in rank order on every
// rank.
StepStats global_stats(const std::vector<LossResult>& losses, const std::vector<double>& N,
                       const GradPass& gp, bool non_finite) {
    const int P = dist::world().size;
    const double w_micro = 1.0 / double(losses.size());
    enum { CE, ACC, DAGA, DAGAP, DAGG, DAGL, SCORED, CORRECT, SUMSQ, NONFINITE, CLIPPED, NSTAT };
    double st[NSTAT] = {};
    for (size_t j = 0; j < losses.size(); ++j) {
        const LossResult& l = losses[j];
        st[CE] += w_micro * l.ce * double(l.scored) / N[j];
        st[ACC] += w_micro * double(l.correct) / N[j];
        st[DAGA] += w_micro * l.dagA / P;
        st[DAGAP] += w_micro * l.dagAp / P;
        st[DAGG] += w_micro * l.dagG / P;
        st[DAGL] += w_micro * l.dag_loss / P;
        st[SCORED] += double(l.scored);
        st[CORRECT] += double(l.correct);
    }
    st[SUMSQ] = gp.sum_sq;
    st[CLIPPED] = double(gp.over);
    st[NONFINITE] = non_finite ? 1.0 : 0.0;
    std::vector<double> stats(size_t(NSTAT) * size_t(P));
    dist::allgather_values(st, stats.data(), NSTAT, "gathering the step statistics");
    double sum[NSTAT] = {};
    for (int r = 0; r < P; ++r)
        for (int i = 0; i < NSTAT; ++i) sum[i] += stats[size_t(r) * NSTAT + size_t(i)];
    StepStats s;
    s.loss.ce = sum[CE];
    s.loss.accuracy = sum[ACC];
    s.loss.dagA = sum[DAGA];
    s.loss.dagAp = sum[DAGAP];
    s.loss.dagG = sum[DAGG];
    s.loss.dag_loss = sum[DAGL];
    s.loss.value = s.loss.ce + s.loss.dag_loss;
    s.loss.scored = int64_t(sum[SCORED]);
    s.loss.correct = int64_t(sum[CORRECT]);
    s.sum_sq = sum[SUMSQ];
    s.clipped = int64_t(sum[CLIPPED]);
    s.non_finite_grad = sum[NONFINITE] != 0;
    return s;
}

}  // namespace

template <typename T>
std::vector<LossResult> Trainer<T>::forward_backward(const std::vector<TokenBatch>& micro,
                                                     const std::vector<double>& counts) {
    // Each micro-batch weighs 1/k; data parallel, each rank's part of the global batch's mean
    // also weighs 1/P, and its CE gradient is divided by the global count of scored targets
    // (a count of 0: the micro-batch's own).
    const double P = counts.empty() ? 1.0 : double(dist::world().size);
    const double w = 1.0 / double(micro.size());
    grads_.zero();
    std::vector<LossResult> losses;
    const Bf16Autocast cast(cfg_.precision);  // bf16 products where chosen and available
    for (size_t j = 0; j < micro.size(); ++j) {
        const TokenBatch& b = micro[j];
        const double ce_den = counts.empty() ? 0 : counts[j] / P;
        if (backend_)
            losses.push_back(backend_->loss_and_grads(b, cfg_.dag, grads_.data(), w / P, ce_den));
        else
            losses.push_back(loss_and_grads(model_, b.tokens, b.B, b.S1, cfg_.dag, acts_,
                                            grads_.data(), w / P, ce_den, keep_of(cfg_.recompute),
                                            /*consume=*/true));
    }
    return losses;
}

template <typename T>
T* Trainer<T>::reduce(double& comm_s) {
    if (!distributed_) return grads_.data();
    const auto t0 = std::chrono::steady_clock::now();
    dist::reduce_scatter_sum(grads_.data(), gshard_.data(), int64_t(grads_.size()),
                             "the gradient reduce-scatter");
    comm_s += seconds_since(t0);
    return gshard_.data();
}

template <typename T>
void Trainer<T>::refuse_non_finite(const LossResult& loss, bool non_finite_grad,
                                   const std::vector<TokenBatch>& micro, const T* g) {
    if (!std::isfinite(loss.value)) {
        sync_params();  // (the forward below runs on the host model)
        // Where in this rank's forward passes (as the step ran them) the non-finite values
        // appear first.
        const Bf16Autocast cast(cfg_.precision);
        std::string bad;
        for (const TokenBatch& b : micro)
            if (bad.empty()) bad = non_finite_origin(model_, b.tokens, b.B, b.S1);
        fail("non-finite loss (", loss.value, ") at step ", opt_.step + 1,
             bad.empty() ? std::string() : "; non-finite values first appear in " + bad,
             ": step refused, parameters unchanged");
    }
    if (!non_finite_grad) return;
    // Backward order (head first): where the blow-up appears first, in this rank's gradient.
    std::string where;
    for (auto e = model_.layout.entries.rbegin(); e != model_.layout.entries.rend(); ++e) {
        const int64_t a = std::max(e->offset, lo_),
                      b = std::min(e->offset + e->numel, lo_ + shard_n_);
        if (a < b && !all_finite(g + (a - lo_), b - a)) {
            where = e->name;
            break;
        }
    }
    fail("non-finite gradient at step ", opt_.step + 1,
         where.empty() ? std::string() : " (first, in backward order, in grad." + where + ")",
         ": step refused, parameters unchanged");
}

template <typename T>
void Trainer<T>::update(T* g, double lr, double& comm_s) {
    T* params = model_.params.data();
    const int64_t n = model_.layout.total;
    if (sharded_) {
        // ZeRO-1: this rank's shard of the parameters with its shard of the moments, then every
        // shard to every rank.
        adamw_step(opt_, params + lo_, g, shard_n_, lr, cfg_.adam);
        const auto t0 = std::chrono::steady_clock::now();
        dist::allgather(params + lo_, params, n, "the parameter all-gather");
        comm_s += seconds_since(t0);
        return;
    }
    if (distributed_) {
        // Every rank gets the whole clipped gradient and takes the same full step.
        const auto t0 = std::chrono::steady_clock::now();
        dist::allgather(g, grads_.data(), n, "the gradient all-gather");
        comm_s += seconds_since(t0);
    }
    adamw_step(opt_, params, grads_.data(), n, lr, cfg_.adam);
}

template <typename T>
StepResult Trainer<T>::step_resident(const std::vector<TokenBatch>& micro) {
    StepResult r;
    // The steps of step() below, each where the gradient is.
    const double w = 1.0 / double(micro.size());
    backend_->zero_grads();
    std::vector<LossResult> losses;
    for (const TokenBatch& b : micro) losses.push_back(backend_->accumulate(b, cfg_.dag, w, 0));
    const bool by_value = cfg_.clip == ClipMode::VALUE;
    const T limit = by_value ? T(cfg_.clip_value) : std::numeric_limits<T>::infinity();
    const GradPass gp = backend_->grad_pass(limit);
    const bool non_finite = !std::isfinite(gp.sum_sq) && !backend_->grads_finite();
    const StepStats st = local_stats(losses, gp, non_finite);
    if (non_finite) backend_->download_grads(grads_.data());  // to name where
    refuse_non_finite(st.loss, st.non_finite_grad, micro, grads_.data());
    r.loss = st.loss;
    r.grad_norm = std::sqrt(st.sum_sq);
    if (cfg_.clip == ClipMode::NORM) {
        backend_->scale_to_norm(cfg_.clip_norm, r.grad_norm);
    } else if (by_value) {
        r.clipped = st.clipped;
        if (gp.over > 0) backend_->clip_by_value(limit);
    }
    r.lr = cfg_.schedule.lr(opt_.step);
    cfg_.adam.validate();
    PLDR_REQUIRE(std::isfinite(r.lr) && r.lr >= 0, "adamw: lr must be finite and >= 0, got ", r.lr);
    backend_->adamw(opt_.step + 1, r.lr, cfg_.adam);
    ++opt_.step;
    r.step = opt_.step;
    grads_.zero();  // (held only the refusal's copy)
    return r;
}

template <typename T>
StepResult Trainer<T>::step(const std::vector<TokenBatch>& micro) {
    PLDR_REQUIRE(!micro.empty(), "a training step needs at least one batch");
    // The step changes the parameters: inference's panels would go stale.
    drop_panel_weights(model_);
    if (backend_ && backend_->resident()) return step_resident(micro);
    StepResult r;
    // 1. Forward and backward over the micro-batches, the gradients summed into grads_ (data
    //    parallel: each micro-batch's loss over the global batch's count of scored targets).
    const std::vector<double> counts =
        distributed_ ? global_counts(micro, model_.cfg.pad_token_id) : std::vector<double>();
    const std::vector<LossResult> losses = forward_backward(micro, counts);

    // 2. Reduce: the gradient this rank clips (the whole buffer, or data parallel its shard of
    //    the ranks' sum).
    T* g = reduce(r.comm_s);

    // 3. One read of the gradient for the norm, the finiteness check and the clipped count; a
    //    second (writing) pass only where something is clipped. A finite sum of squares means
    //    every element is finite; all_finite decides otherwise (float64 squares can overflow).
    //    Data parallel, the statistics of every rank are summed in rank order.
    const bool by_value = cfg_.clip == ClipMode::VALUE;
    const T limit = by_value ? T(cfg_.clip_value) : std::numeric_limits<T>::infinity();
    const GradPass gp = grad_pass(g, shard_n_, limit);
    const bool non_finite = !std::isfinite(gp.sum_sq) && !all_finite(g, shard_n_);
    const StepStats st = distributed_ ? global_stats(losses, counts, gp, non_finite)
                                      : local_stats(losses, gp, non_finite);
    refuse_non_finite(st.loss, st.non_finite_grad, micro, g);
    r.loss = st.loss;
    r.grad_norm = std::sqrt(st.sum_sq);  // the global norm before clipping

    // 4. Clip: element-wise, or by the global norm.
    if (cfg_.clip == ClipMode::NORM) {
        scale_to_norm(g, shard_n_, cfg_.clip_norm, r.grad_norm);
    } else if (by_value) {
        r.clipped = st.clipped;
        if (gp.over > 0) clip_by_value(g, shard_n_, limit);
    }

    // 5. The AdamW update at lr = schedule(steps done).
    r.lr = cfg_.schedule.lr(opt_.step);
    update(g, r.lr, r.comm_s);
    if (backend_) backend_->parameters_changed();
    r.step = opt_.step;
    // 6. The gradient's pages go to the page cache now (PyTorch's zero_grad(set_to_none=True)):
    //    what runs before the next step (validation, the audit, a checkpoint) reuses them instead
    //    of growing the process (110M, batch 8: 2.41 -> 2.12 GB peak with validation).
    grads_.zero();
    return r;
}

template <typename T>
LossResult Trainer<T>::evaluate(const TokenBatch& b) {
    const Bf16Autocast cast(cfg_.precision);
    LossResult l = backend_ ? backend_->loss_and_grads(b, cfg_.dag, nullptr, 1.0, 0)
                            : loss_and_grads<T>(model_, b.tokens, b.B, b.S1, cfg_.dag, acts_,
                                                nullptr, 1.0, 0, keep_of(cfg_.recompute));
    if (!std::isfinite(l.value)) {
        sync_params();
        const std::string bad = non_finite_origin(model_, b.tokens, b.B, b.S1);
        fail("non-finite validation loss (", l.value, ")",
             bad.empty() ? std::string() : "; non-finite values first appear in " + bad);
    }
    return l;
}

template class Trainer<float>;
template class Trainer<double>;

}  // namespace pldr
