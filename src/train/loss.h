// The training objective (spec §5.1, §3.2): masked cross-entropy over tokens[:,1:] given
// tokens[:,:-1], plus the optional DAG regularizer, with its gradient.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/backward.h"
#include "ops/dag.h"

namespace pldr {

struct DagCoeffs {
    double A = 0, Ap = 0, G = 0;  // c_A, c_Ap, c_G (each ≥ 0)
    bool any() const { return A > 0 || Ap > 0 || G > 0; }
};

struct LossResult {
    double value = 0;                      // ce + Σ c·dag
    double ce = 0;                         // masked mean cross-entropy
    double accuracy = 0;                   // masked top-1 accuracy
    double dagA = 0, dagAp = 0, dagG = 0;  // unweighted DAG metrics (learned-G models)
    double dag_loss = 0;                   // Σ c·dag as added to the loss
    int64_t scored = 0, correct = 0;
};

// tokens [B, S1]: input tokens[:, :-1], targets tokens[:, 1:] (pad id 0 never scored).
// Runs the forward into `acts`; when grads != null also runs the backward and ACCUMULATES
// d value / d params · grad_scale into grads. The DAG metrics are computed whenever the model
// has a learned G, and enter the loss only for positive coefficients.
// ce_denominator > 0 replaces this batch's scored-token count as the divisor of the CE
// gradient (data parallel: the gradient of Σ CE / N_global, train/step.h); the batch may then
// have no scored token at all. The reported ce and accuracy stay this batch's own means.
// consume: the training step's memory plan. Each layer's activations are freed as soon as its
// backward is done (acts.layers is empty afterwards), and a gradient buffer whose pages are
// mapped as the backward writes them (ZeroPages) takes their pages from the page cache (or, with
// the cache off, the freed memory goes back to the system first: core/alloc.h), so that the
// gradients take the place of the activations rather than adding to them.
// Rows of logits the loss holds at once (the head runs over chunks of rows; the result does not
// depend on it beyond the rounding of the head's gradient sum). 0 = automatic (about 8 M logits
// per chunk); tests set a small count to run several chunks.
int64_t& loss_head_chunk_rows();
// The rows of each chunk of the head for N rows of width d and V logits (loss_head_chunk_rows, or
// the automatic choice); every backend's loss uses it, so that the head's gradient sums alike.
int64_t loss_head_rows(int64_t N, int64_t d, int64_t V);

// One DAG term (spec §3.2) over X: `count` D×D instances back to back (the layers' A_LM, A_P or
// G_LM). Returns its metric, the mean of dag over them; for coeff > 0 adds what enters the loss
// to *loss_part (float32(coeff · dag) with reference numerics, as the reference adds it); when dX
// is not null, ACCUMULATES coeff · grad_scale · d(mean)/dX. Reference numerics run the
// reference's float32 algorithm, and the exact one where it overflows (ops/dag.h); every
// backend's loss calls this.
template <typename T>
double dag_loss_term(const T* X, int64_t count, int64_t D, bool reference, double coeff,
                     double grad_scale, T* dX, double* loss_part);

// dag_loss_term's choice of mode and its loss part, for any backend's DAG term:
// mean_in(mode, clear) runs the term in the mode (with its gradient where the backend asked for
// one; clear: zero first what an overflowed reference pass left in the gradient) and returns the
// mean. Reference numerics run the reference's float32 algorithm, and the exact one where it
// overflows.
template <class MeanIn>
double dag_term_with_fallback(bool reference, double coeff, double* loss_part, MeanIn mean_in) {
    DagMode md = reference ? DagMode::REFERENCE_F32 : DagMode::EXACT;
    double v = mean_in(md, false);
    if (!std::isfinite(v) && md == DagMode::REFERENCE_F32) {  // reference overflow
        md = DagMode::EXACT;
        v = mean_in(md, true);
    }
    if (coeff > 0) {
        // The reference adds float32(coeff · dag) (a float32 tensor times a Python float).
        *loss_part += md == DagMode::REFERENCE_F32 ? double(float(coeff) * float(v)) : coeff * v;
    }
    return v;
}

// A batch of B rows of S1 tokens as the model's inputs (all but the last token of each row) and
// their targets (all but the first).
void split_training_batch(const int64_t* tokens, int64_t B, int64_t S1, std::vector<int64_t>& in,
                          std::vector<int64_t>& tgt);

template <typename T>
LossResult loss_and_grads(const Model<T>& m, const int64_t* tokens, int64_t B, int64_t S1,
                          const DagCoeffs& dag, Activations<T>& acts, T* grads,
                          double grad_scale = 1.0, double ce_denominator = 0,
                          KeepActs keep = KeepActs::TRAINING,  // ALL, TRAINING or LAYER_INPUTS
                          bool consume = false);

// Where a non-finite loss of these tokens first appears: the name of the first activation (in
// forward order, "fwd.layer1.E (nan at element 3)") that holds a NaN or +-inf, or "" if none
// does. The training forward keeps only what its backward needs (KeepActs::TRAINING), so this
// runs the forward again keeping everything; for error messages.
template <typename T>
std::string non_finite_origin(const Model<T>& m, const int64_t* tokens, int64_t B, int64_t S1);

}  // namespace pldr
