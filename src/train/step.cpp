// The training step (see step.h).
#include "train/step.h"

#include <cmath>

#include "audit/dump.h"
#include "train/clip.h"

namespace pldr {

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
Trainer<T>::Trainer(Model<T>& model, const TrainConfig& cfg)
    : model_(model), cfg_(cfg), opt_(model.layout.total) {
    cfg_.validate();
    grads_.assign(static_cast<size_t>(model.layout.total), T(0));
}

template <typename T>
StepResult Trainer<T>::step(const std::vector<TokenBatch>& micro) {
    PLDR_REQUIRE(!micro.empty(), "a training step needs at least one batch");
    std::fill(grads_.begin(), grads_.end(), T(0));
    StepResult r;
    const double w = 1.0 / double(micro.size());
    for (const TokenBatch& b : micro) {
        LossResult l =
            loss_and_grads(model_, b.tokens, b.B, b.S1, cfg_.dag, acts_, grads_.data(), w);
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
        const std::string bad = first_non_finite(forward_tensors(model_, acts_));
        fail("non-finite loss (", r.loss.value, ") at step ", opt_.step + 1,
             bad.empty() ? std::string() : "; non-finite values first appear in " + bad,
             ": step refused, parameters unchanged");
    }
    if (!all_finite(grads_.data(), n)) {
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
    double ss = 0;
    for (T g : grads_) ss += double(g) * double(g);
    r.grad_norm = std::sqrt(ss);
    if (cfg_.clip == ClipMode::VALUE)
        r.clipped = clip_by_value(grads_.data(), n, T(cfg_.clip_value));
    else if (cfg_.clip == ClipMode::NORM)
        clip_by_global_norm(grads_.data(), n, cfg_.clip_norm);
    r.lr = cfg_.schedule.lr(opt_.step);
    adamw_step(opt_, model_.params.data(), grads_.data(), n, r.lr, cfg_.adam);
    r.step = opt_.step;
    return r;
}

template <typename T>
LossResult Trainer<T>::evaluate(const TokenBatch& b) {
    LossResult l = loss_and_grads<T>(model_, b.tokens, b.B, b.S1, cfg_.dag, acts_, nullptr);
    if (!std::isfinite(l.value)) {
        const std::string bad = first_non_finite(forward_tensors(model_, acts_));
        fail("non-finite validation loss (", l.value, ")",
             bad.empty() ? std::string() : "; non-finite values first appear in " + bad);
    }
    return l;
}

template class Trainer<float>;
template class Trainer<double>;

}  // namespace pldr
