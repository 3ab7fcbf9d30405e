// The training step (see step.h).
#include "train/step.h"

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

template <typename T>
Trainer<T>::Trainer(Model<T>& model, const TrainConfig& cfg, const DistOptions& dist)
    : model_(model), cfg_(cfg) {
    cfg_.validate();
    PLDR_REQUIRE(cfg_.precision == Precision::FP32 || (std::is_same_v<T, float>),
                 "--precision bf16 trains a float32 model (mixed precision); this one is float64");
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

template <typename T>
StepResult Trainer<T>::step_distributed(const std::vector<TokenBatch>& micro) {
    const dist::World& w = dist::world();
    const int P = w.size;
    const size_t k = micro.size();
    const int64_t pad = model_.cfg.pad_token_id;
    // 1. The global count of scored targets of each micro-batch (every rank gets every count
    //    and sums them in rank order, so all ranks hold the same bits).
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

    // 2. Local forward and backward: rank r's part of d(mean over the global batch)/dθ.
    grads_.zero();
    const double w_micro = 1.0 / double(k);
    enum { CE, ACC, DAGA, DAGAP, DAGG, DAGL, SCORED, CORRECT, SUMSQ, NONFINITE, CLIPPED, NSTAT };
    double st[NSTAT] = {};
    for (size_t j = 0; j < k; ++j) {
        const TokenBatch& b = micro[j];
        const Bf16Autocast cast(cfg_.precision);  // bf16 products where chosen and available
        const LossResult l =
            loss_and_grads(model_, b.tokens, b.B, b.S1, cfg_.dag, acts_, grads_.data(), w_micro / P,
                           N[j] / P, keep_of(cfg_.recompute), /*consume=*/true);
        st[CE] += w_micro * l.ce * double(l.scored) / N[j];
        st[ACC] += w_micro * double(l.correct) / N[j];
        st[DAGA] += w_micro * l.dagA / P;
        st[DAGAP] += w_micro * l.dagAp / P;
        st[DAGG] += w_micro * l.dagG / P;
        st[DAGL] += w_micro * l.dag_loss / P;
        st[SCORED] += double(l.scored);
        st[CORRECT] += double(l.correct);
    }

    // 3. Reduce-scatter: this rank's shard of the summed gradient.
    const int64_t n = int64_t(grads_.size());
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    dist::reduce_scatter_sum(grads_.data(), gshard_.data(), n, "the gradient reduce-scatter");
    double comm_s = std::chrono::duration<double>(clock::now() - t0).count();
    T* g = gshard_.data();
    const T limit = T(cfg_.clip_value);
    const GradPass gp = grad_pass(
        g, shard_n_, cfg_.clip == ClipMode::VALUE ? limit : std::numeric_limits<T>::infinity());
    st[SUMSQ] = gp.sum_sq;
    st[CLIPPED] = double(gp.over);
    st[NONFINITE] = std::isfinite(gp.sum_sq) || all_finite(g, shard_n_) ? 0.0 : 1.0;

    // 4. The step's statistics, summed in rank order on every rank.
    std::vector<double> stats(size_t(NSTAT) * size_t(P));
    dist::allgather_values(st, stats.data(), NSTAT, "gathering the step statistics");
    double sum[NSTAT] = {};
    for (int r = 0; r < P; ++r)
        for (int i = 0; i < NSTAT; ++i) sum[i] += stats[size_t(r) * NSTAT + size_t(i)];
    StepResult r;
    r.loss.ce = sum[CE];
    r.loss.accuracy = sum[ACC];
    r.loss.dagA = sum[DAGA];
    r.loss.dagAp = sum[DAGAP];
    r.loss.dagG = sum[DAGG];
    r.loss.dag_loss = sum[DAGL];
    r.loss.value = r.loss.ce + r.loss.dag_loss;
    r.loss.scored = int64_t(sum[SCORED]);
    r.loss.correct = int64_t(sum[CORRECT]);
    PLDR_REQUIRE(std::isfinite(r.loss.value), "non-finite loss (", r.loss.value, ") at step ",
                 opt_.step + 1, ": step refused, parameters unchanged");
    PLDR_REQUIRE(sum[NONFINITE] == 0, "non-finite gradient at step ", opt_.step + 1,
                 ": step refused, parameters unchanged");
    r.grad_norm = std::sqrt(sum[SUMSQ]);

    // 5. Clip the shard (element-wise, or by the global norm), then the AdamW step.
    if (cfg_.clip == ClipMode::VALUE) {
        if (gp.over > 0) clip_by_value(g, shard_n_, limit);
        r.clipped = int64_t(sum[CLIPPED]);
    } else if (cfg_.clip == ClipMode::NORM) {
        scale_to_norm(g, shard_n_, cfg_.clip_norm, r.grad_norm);  // by the global norm
    }
    r.lr = cfg_.schedule.lr(opt_.step);
    T* params = model_.params.data();
    if (sharded_) {
        ++opt_.step;
        adamw_update(params + lo_, g, opt_.m.data(), opt_.v.data(), shard_n_, opt_.step, r.lr,
                     cfg_.adam);
        t0 = clock::now();
        dist::allgather(params + lo_, params, n, "the parameter all-gather");
    } else {
        t0 = clock::now();
        dist::allgather(g, grads_.data(), n, "the gradient all-gather");
    }
    comm_s += std::chrono::duration<double>(clock::now() - t0).count();
    if (!sharded_) adamw_step(opt_, params, grads_.data(), n, r.lr, cfg_.adam);
    r.step = opt_.step;
    r.comm_s = comm_s;
    return r;
}

template <typename T>
StepResult Trainer<T>::step(const std::vector<TokenBatch>& micro) {
    PLDR_REQUIRE(!micro.empty(), "a training step needs at least one batch");
    // The step changes the parameters: inference's transposed copies would go stale.
    drop_transposed_weights(model_);
    if (distributed_) return step_distributed(micro);
    grads_.zero();
    StepResult r;
    const double w = 1.0 / double(micro.size());
    const Bf16Autocast cast(cfg_.precision);  // bf16 products where chosen and available
    for (const TokenBatch& b : micro) {
        LossResult l = loss_and_grads(model_, b.tokens, b.B, b.S1, cfg_.dag, acts_, grads_.data(),
                                      w, 0, keep_of(cfg_.recompute), /*consume=*/true);
        r.loss.value += w * l.value;
        r.loss.ce += w * l.ce;
        r.loss.accuracy += w * l.accuracy;
        r.loss.dagA += w * l.dagA;
        r.loss.dagAp += w * l.dagAp;
        r.loss.dagG += w * l.dagG;
        r.loss.dag_loss += w * l.dag_loss;
        r.loss.scored += l.scored;
        r.loss.correct += l.correct;
    }
    const int64_t n = int64_t(grads_.size());
    if (!std::isfinite(r.loss.value)) {
        std::string bad;
        for (const TokenBatch& b : micro)
            if (bad.empty()) bad = non_finite_origin(model_, b.tokens, b.B, b.S1);
        fail("non-finite loss (", r.loss.value, ") at step ", opt_.step + 1,
             bad.empty() ? std::string() : "; non-finite values first appear in " + bad,
             ": step refused, parameters unchanged");
    }
    // One read of the gradients for the norm, the finiteness check and the clipped count; a
    // second (writing) pass only where something is clipped. A finite sum of squares means
    // every element is finite; all_finite decides otherwise (float64 squares can overflow).
    const bool by_value = cfg_.clip == ClipMode::VALUE;
    const T limit = by_value ? T(cfg_.clip_value) : std::numeric_limits<T>::infinity();
    const GradPass gp = grad_pass(grads_.data(), n, limit);
    if (!std::isfinite(gp.sum_sq) && !all_finite(grads_.data(), n)) {
        std::string where = "?";
        // Backward order (head first): where the blow-up appears first.
        for (auto e = model_.layout.entries.rbegin(); e != model_.layout.entries.rend(); ++e)
            if (!all_finite(grads_.data() + e->offset, e->numel)) {
                where = e->name;
                break;
            }
        fail("non-finite gradient at step ", opt_.step + 1, " (first, in backward order, in grad.",
             where, "): step refused, parameters unchanged");
    }
    r.grad_norm = std::sqrt(gp.sum_sq);  // the norm before clipping
    if (cfg_.clip == ClipMode::NORM) {
        scale_to_norm(grads_.data(), n, cfg_.clip_norm, r.grad_norm);
    } else if (by_value) {
        r.clipped = gp.over;
        if (gp.over > 0) clip_by_value(grads_.data(), n, limit);
    }
    r.lr = cfg_.schedule.lr(opt_.step);
    adamw_step(opt_, model_.params.data(), grads_.data(), n, r.lr, cfg_.adam);
    r.step = opt_.step;
    return r;
}

template <typename T>
LossResult Trainer<T>::evaluate(const TokenBatch& b) {
    const Bf16Autocast cast(cfg_.precision);
    LossResult l = loss_and_grads<T>(model_, b.tokens, b.B, b.S1, cfg_.dag, acts_, nullptr, 1.0, 0,
                                     keep_of(cfg_.recompute));
    if (!std::isfinite(l.value)) {
        const std::string bad = non_finite_origin(model_, b.tokens, b.B, b.S1);
        fail("non-finite validation loss (", l.value, ")",
             bad.empty() ? std::string() : "; non-finite values first appear in " + bad);
    }
    return l;
}

template class Trainer<float>;
template class Trainer<double>;

}  // namespace pldr
