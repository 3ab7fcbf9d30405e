// Training objective (see loss.h).
#include "train/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/alloc.h"
#include "core/zero.h"
#include "model/named_outputs.h"
#include "ops/cross_entropy.h"
#include "ops/dag.h"
#include "ops/linear.h"

namespace pldr {

template <typename T>
double dag_loss_term(const T* X, int64_t count, int64_t D, bool reference, double coeff,
                     double grad_scale, T* dX, double* loss_part) {
    return dag_term_with_fallback(reference, coeff, loss_part, [&](DagMode md, bool clear) {
        if (dX && clear) std::fill(dX, dX + count * D * D, T(0));
        return dag_mean(X, count, D, md, dX, coeff * grad_scale);
    });
}
template double dag_loss_term<float>(const float*, int64_t, int64_t, bool, double, double, float*,
                                     double*);
template double dag_loss_term<double>(const double*, int64_t, int64_t, bool, double, double,
                                      double*, double*);

namespace {

// The DAG regularizer over all layers (spec §3.2): for X ∈ {A_LM, A_P, G_LM}, the mean over
// (layer, batch, head) of |log(tr(expm(X∘X))/dk)|. Always computed (as metrics); enters the loss
// and the gradient only for positive coefficients. With reference numerics the float32 algorithm
// of the reference is used (golden parity); where it overflows, and in pure mode, the exact
// overflow-safe evaluation (ops/dag.h).
template <typename T>
std::vector<DeductiveGrads<T>> dag_terms(const Model<T>& m, const Activations<T>& a,
                                         const DagCoeffs& dag, double grad_scale, LossResult& r) {
    const Config& c = m.cfg;
    const int64_t L = c.num_layers, D = c.head_dim, per = a.B * c.num_heads * D * D;
    const int64_t count = L * a.B * c.num_heads;
    const bool want_grad = grad_scale != 0.0 && dag.any();
    std::vector<DeductiveGrads<T>> extra(want_grad ? size_t(L) : 0);
    auto term = [&](Tensor<T> LayerActs<T>::*field, Tensor<T> DeductiveGrads<T>::*gfield,
                    double coeff, double* metric) {
        std::vector<T> X(static_cast<size_t>(L * per));
        for (int64_t l = 0; l < L; ++l) {
            const Tensor<T>& t = a.layers[size_t(l)].*field;
            std::copy(t.data.begin(), t.data.end(), X.begin() + l * per);
        }
        const bool g = want_grad && coeff > 0;
        std::vector<T> dX(g ? X.size() : 0, T(0));
        *metric = dag_loss_term(X.data(), count, D, m.reference_numerics(), coeff, grad_scale,
                                g ? dX.data() : nullptr, &r.dag_loss);
        if (g)
            for (int64_t l = 0; l < L; ++l) {
                Tensor<T>& dst = extra[size_t(l)].*gfield;
                dst = Tensor<T>({a.B, c.num_heads, D, D},
                                Storage<T>(dX.begin() + l * per, dX.begin() + (l + 1) * per));
            }
    };
    term(&LayerActs<T>::A_LM, &DeductiveGrads<T>::dA_LM, dag.A, &r.dagA);
    term(&LayerActs<T>::A_P, &DeductiveGrads<T>::dA_P, dag.Ap, &r.dagAp);
    term(&LayerActs<T>::G, &DeductiveGrads<T>::dG, dag.G, &r.dagG);
    return extra;
}

}  // namespace

int64_t& loss_head_chunk_rows() {
    static int64_t rows = 0;
    return rows;
}

int64_t loss_head_rows(int64_t N, int64_t d, int64_t V) {
    // Rows per chunk: about 8M logits (32 MB of float32), large products for the GEMM library;
    // 1M (4 MB, which stays in cache) for a head of d ≤ 64. Such a head does only d
    // multiply-adds per logit, and the library copies (packs) the chunk for each product, so
    // copies of a chunk out of cache cost as much as the products (S config, 2048 rows through
    // the head forward and backward, standalone: 25.8 / 28.7 ms in one chunk, 21.3 / 26.1 ms in
    // chunks of 256 rows; M's d = 256 ran 3–5 % slower in chunks of 512 rows than of 1024).
    // The rows are a multiple of 64: at 110M, 8M logits are 262 rows, and training steps ran
    // 2.5–7 % faster in chunks of 256 (the head's three products over 262 rows, 131 per thread,
    // leave the GEMM libraries' row blocks a ragged tail).
    const int64_t chunk_logits = d <= 64 ? int64_t(1) << 20 : int64_t(1) << 23;
    const int64_t want = loss_head_chunk_rows() > 0
                             ? loss_head_chunk_rows()
                             : std::max<int64_t>(64, chunk_logits / V / 64 * 64);
    return std::max<int64_t>(1, std::min(N, want));
}

void split_training_batch(const int64_t* tokens, int64_t B, int64_t S1, std::vector<int64_t>& in,
                          std::vector<int64_t>& tgt) {
    const int64_t S = S1 - 1;
    in.resize(static_cast<size_t>(B * S));
    tgt.resize(static_cast<size_t>(B * S));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
            in[size_t(b * S + s)] = tokens[b * S1 + s];
            tgt[size_t(b * S + s)] = tokens[b * S1 + s + 1];
        }
}

template <typename T>
std::string non_finite_origin(const Model<T>& m, const int64_t* tokens, int64_t B, int64_t S1) {
    if (S1 < 2) return "";
    std::vector<int64_t> in, tgt;
    split_training_batch(tokens, B, S1, in, tgt);
    Activations<T> a;
    forward_layers(m, in.data(), B, S1 - 1, a, KeepActs::ALL);
    return first_non_finite(forward_tensors(m, a));
}

template <typename T>
LossResult loss_and_grads(const Model<T>& m, const int64_t* tokens, int64_t B, int64_t S1,
                          const DagCoeffs& dag, Activations<T>& acts, T* grads, double grad_scale,
                          double ce_denominator, KeepActs keep, bool consume) {
    PLDR_REQUIRE(S1 >= 2, "a training sequence needs at least 2 tokens (got ", S1, ")");
    PLDR_REQUIRE(dag.A >= 0 && dag.Ap >= 0 && dag.G >= 0, "DAG coefficients must be >= 0 (got ",
                 dag.A, ",", dag.Ap, ",", dag.G, ")");
    const int64_t S = S1 - 1, N = B * S, V = m.cfg.vocab_size;
    std::vector<int64_t> in, tgt;
    split_training_batch(tokens, B, S1, in, tgt);
    check_inputs(m, tgt.data(), B, S);
    PLDR_REQUIRE(keep != KeepActs::INFERENCE,
                 "loss_and_grads: KeepActs::INFERENCE keeps too little for a backward");
    forward_layers(m, in.data(), B, S, acts, keep);
    acts.logits = Tensor<T>();  // the head runs in chunks below: no [B,S,V] logits are kept
    LossResult r;
    for (int64_t n = 0; n < N; ++n) r.scored += tgt[size_t(n)] != m.cfg.pad_token_id;
    PLDR_REQUIRE(r.scored > 0 || (grads && ce_denominator > 0),
                 "no scored target tokens in the batch (all are pad)");
    const double denominator = ce_denominator > 0 ? ce_denominator : double(r.scored);
    // The head and the cross-entropy over chunks of rows: logits (and their gradient) exist for
    // one chunk at a time, d(final hidden) and the head's gradient accumulate chunk by chunk.
    // Per-row CE and hits land in row order, and are summed as the one-pass version did.
    const int64_t d = m.cfg.hidden_size;
    const int64_t rows = loss_head_rows(N, d, V);
    const Tensor<T>& h = acts.final_hidden();
    std::vector<T> ce(static_cast<size_t>(N));
    std::vector<char> hit(static_cast<size_t>(N));
    Tensor<T> dhidden;
    ModelView<T> g;
    if (grads) {
        dhidden = zeros_on_team<T>({B, S, d});
        g = bind_view(m.layout, m.cfg, grads);
        if (consume) {  // the head's gradient in pages from the cache (core/alloc.h)
            fill_zero_pages(g.head_w, size_t(V * d) * sizeof(T));
            if (g.head_b) fill_zero_pages(g.head_b, size_t(V) * sizeof(T));
        }
    }
    Tensor<T>& chunk = acts.head_chunk;
    chunk.resize_for_overwrite({rows, V});
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        const int64_t nr = std::min(rows, N - n0);
        linear_forward(chunk.ptr(), h.ptr() + n0 * d, m.lw.head, m.w.head_b, nr, d, V);
        if (grads) {
            // the logits' gradient overwrites the logits (one buffer per chunk)
            cross_entropy_fused_rows<T>(chunk.ptr(), ce.data() + n0, hit.data() + n0, chunk.ptr(),
                                        tgt.data() + n0, nr, V, m.cfg.pad_token_id,
                                        T(grad_scale / denominator));
            linear_backward(dhidden.ptr() + n0 * d, g.head_w, g.head_b, chunk.ptr(),
                            h.ptr() + n0 * d, m.w.head_w, nr, d, V);
        } else {
            int64_t scored = 0, correct = 0;
            cross_entropy_forward<T>(ce.data() + n0, &scored, &correct, chunk.ptr(),
                                     tgt.data() + n0, nr, V, m.cfg.pad_token_id);
            r.correct += correct;
        }
    }
    // The head's buffers go back to the allocator before the layers' backward, which reuses them
    // (they stay in the process: the allocator is tuned to keep freed memory, core/alloc.h).
    acts.head_chunk = Tensor<T>();
    // The last layer's output was the head's input only (its backward starts from LN2's input).
    if (consume && grads && !acts.layers.empty()) acts.layers.back().hidden = Tensor<T>();
    double total = 0;
    for (int64_t n = 0; n < N; ++n)
        if (tgt[size_t(n)] != m.cfg.pad_token_id) {
            total += double(ce[size_t(n)]);
            if (grads && hit[size_t(n)]) ++r.correct;
        }
    r.ce = r.scored > 0 ? total / double(r.scored) : 0.0;
    r.accuracy = r.scored > 0 ? double(r.correct) / double(r.scored) : 0.0;
    r.value = r.ce;
    std::vector<DeductiveGrads<T>> extra;
    if (m.cfg.learned_g()) {
        extra = dag_terms(m, acts, dag, grads ? grad_scale : 0.0, r);
        r.value += r.dag_loss;
    }
    if (!grads) return r;
    backward_below_head<T>(m, acts, dhidden, extra.empty() ? nullptr : &extra, grads,
                           consume ? &acts : nullptr);
    if (consume) acts.layers.clear();
    return r;
}

template LossResult loss_and_grads<float>(const Model<float>&, const int64_t*, int64_t, int64_t,
                                          const DagCoeffs&, Activations<float>&, float*, double,
                                          double, KeepActs, bool);
template LossResult loss_and_grads<double>(const Model<double>&, const int64_t*, int64_t, int64_t,
                                           const DagCoeffs&, Activations<double>&, double*, double,
                                           double, KeepActs, bool);

template std::string non_finite_origin<float>(const Model<float>&, const int64_t*, int64_t,
                                              int64_t);
template std::string non_finite_origin<double>(const Model<double>&, const int64_t*, int64_t,
                                               int64_t);

}  // namespace pldr
