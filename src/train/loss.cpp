// Training objective (see loss.h).
#include "train/loss.h"

#include <vector>

namespace pldr {

template <typename T>
LossResult loss_and_grads(const Model<T>& m, const int64_t* tokens, int64_t B, int64_t S1,
                          const DagCoeffs& dag, Activations<T>& acts, T* grads, double grad_scale) {
    PLDR_REQUIRE(S1 >= 2, "a training sequence needs at least 2 tokens (got ", S1, ")");
    PLDR_REQUIRE(dag.A >= 0 && dag.Ap >= 0 && dag.G >= 0, "DAG coefficients must be >= 0 (got ",
                 dag.A, ",", dag.Ap, ",", dag.G, ")");
    const int64_t S = S1 - 1, N = B * S, V = m.cfg.vocab_size;
    std::vector<int64_t> in(static_cast<size_t>(N)), tgt(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
            in[size_t(b * S + s)] = tokens[b * S1 + s];
            tgt[size_t(b * S + s)] = tokens[b * S1 + s + 1];
        }
    check_inputs(m, tgt.data(), B, S);
    forward(m, in.data(), B, S, acts);
    LossResult r;
    const double total = cross_entropy_forward<T>(nullptr, &r.scored, &r.correct, acts.logits.ptr(),
                                                  tgt.data(), N, V, m.cfg.pad_token_id);
    PLDR_REQUIRE(r.scored > 0, "no scored target tokens in the batch (all are pad)");
    r.ce = total / double(r.scored);
    r.accuracy = double(r.correct) / double(r.scored);
    r.value = r.ce;
    if (!grads) return r;
    Tensor<T> dlogits({B, S, V});
    cross_entropy_backward(dlogits.ptr(), acts.logits.ptr(), tgt.data(), N, V, m.cfg.pad_token_id,
                           T(grad_scale / double(r.scored)));
    backward<T>(m, acts, dlogits, nullptr, grads);
    return r;
}

template LossResult loss_and_grads<float>(const Model<float>&, const int64_t*, int64_t, int64_t,
                                          const DagCoeffs&, Activations<float>&, float*, double);
template LossResult loss_and_grads<double>(const Model<double>&, const int64_t*, int64_t, int64_t,
                                           const DagCoeffs&, Activations<double>&, double*, double);

}  // namespace pldr
