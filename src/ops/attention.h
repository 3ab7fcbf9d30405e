// One head of PLGA attention (spec §1.4–1.8, docs/plga.md §2–3), forward and backward side by
// side (src/ops/attention.cpp), from the head's rotated queries q [S,D], keys k and values
// v [Tk,D] (strided rows of [B,S,H,D] tensors) and its operator G [D,D]:
//   QG = q·G;  Ep = QG·Kᵀ / scale;  E = softmax(Ep + mask·(−1e9));  O = E·V
// and the metric learner's input A0 = Qᵀ·Q. Which G a head uses, the caches, the batches and the
// threads are the model's (model/plga_attention.cpp, model/metric_learner.cpp).
//
// Unlike most backward kernels of ops/ (ops.h), head_attention_backward OVERWRITES dq and dG
// (the model sums them with other terms itself) and accumulates into dk and dv.
#pragma once
#include <cstdint>
#include <vector>

namespace pldr {

// The scores and the output of one head: qg = q·G [S,D]; the scores (q·G)·Kᵀ / scale [S,Tk]
// into ep, or into e alone when ep is null; e = softmax(scores + mask·(−1e9)) [S,Tk] with the
// causal mask (keys after Tp + i for query i) and the padding mask (key_ids[j] == pad; key_ids
// null: none), both only when `mask`; o = e·V [S,D] with row stride ldo. q has row stride ldq,
// k and v ldkv; the keys are Tp past ones followed by the S of this chunk (Tk = Tp + S with a
// cache). One query row (S = 1, a decode step) runs query_row_attention. The training backward
// recomputes E, QG and O with this code, so it gets the same bits as the forward.
template <typename T>
void head_attention_forward(const T* q, int64_t ldq, const T* G, const T* k, const T* v,
                            int64_t ldkv, int64_t S, int64_t D, int64_t Tk, int64_t Tp, T scale,
                            bool mask, const int64_t* key_ids, int64_t pad, T* qg, T* ep, T* e,
                            T* o, int64_t ldo);

// The same for one query row (S = 1), in plain loops: a GEMM library's call and packing cost more
// than products of one row (measured: 3 sgemm calls per head were a tenth of an M-config decode
// step). The batched decode step runs it per sequence, each over its own keys.
template <typename T>
void query_row_attention(const T* q, const T* G, const T* k, const T* v, int64_t ldkv, int64_t D,
                         int64_t Tk, int64_t Tp, T scale, bool mask, const int64_t* key_ids,
                         int64_t pad, T* qg, T* ep, T* e, T* o);

// A calling thread's buffers for head_attention_backward, reused from head to head.
template <typename T>
struct AttentionGradScratch {
    std::vector<T> dE, dEp, dQG;
    std::vector<int64_t> keys;
};

// The backward of a causal head whose keys are its queries (training: Tk = S, no past): from the
// forward's E [S,Tk] and QG [S,D] and dO [S,D], dq = dQG·Gᵀ and dG = Qᵀ·dQG (overwritten),
// dk += dEpᵀ·QG and dv += Eᵀ·dO, where dE = dO·Vᵀ, dEp = softmax'(dE) / scale, dQG = dEp·K.
// q, k, v, dO, dq, dk, dv have row stride ld; dG is [D,D]. The products skip the causal blocks'
// masked corner where E is exactly 0 there.
template <typename T>
void head_attention_backward(const T* q, const T* k, const T* v, int64_t ld, const T* G, const T* E,
                             const T* QG, const T* dO, int64_t S, int64_t D, T scale,
                             AttentionGradScratch<T>& scratch, T* dq, T* dk, T* dv, T* dG);

// The metric learner's input of one head, A0 = qᵀ·q [D,D] from q [S,D] (row stride ldq) ...
template <typename T>
void gram_forward(const T* q, int64_t ldq, int64_t S, int64_t D, T* A0);
// ... and its backward, dq += q·(dA0 + dA0ᵀ) (dq with row stride ldq).
template <typename T>
void gram_backward(T* dq, const T* q, int64_t ldq, const T* dA0, int64_t S, int64_t D);

}  // namespace pldr
