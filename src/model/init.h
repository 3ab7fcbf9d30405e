// Random initialisation of a fresh model with the reference's laws (spec §2.1): Xavier-uniform
// linear weights, zero biases, Xavier-normal PLGA W/P/a, N(0,1) embeddings, LayerNorm γ=1 β=0.
#pragma once
#include <cstdint>

#include "model/model.h"

namespace pldr {

enum class InitLaw {
    REFERENCE,  // KVG v510 code, including its wv bug (PyTorch default Linear init for wv)
    HF,         // HF port _init_weights: every Linear Xavier-uniform; PLGA Xavier-uniform
};

template <typename T>
void init_weights(Model<T>& m, uint64_t seed, InitLaw law = InitLaw::REFERENCE);

}  // namespace pldr
