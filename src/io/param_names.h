// The tensors a PLDR-LLM checkpoint holds for a given Config (spec §9.1, §3.7, §11.6), in the
// reference module order, and checks of a checkpoint against them.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace pldr {

class ModelFiles;

struct ParamSpec {
    std::string name;
    Shape shape;
    // true for decoder.past_G_values / decoder.past_G_values_status: persistent buffers of a
    // fixed-G model (custom_G_type non-null), saved in checkpoints but never trained.
    bool buffer = false;
};

// Order: decoder.embedding; for a fixed G the two past_G buffers (the decoder's own buffers come
// before its children in a PyTorch state_dict); per layer i: mha1.{wq,wk,wv}.{weight,bias},
// mha1.plgatt_layer.{Wlst,blst,pwlst,alst,balst}, mha1.dense, mha1.reslayerAs.{j}.denseAs.{n}.
// gluw{1,2,3}, mha1.reslayerAs.{j}.layernormA, mha1.layernorm1, ffn.gluw{1,2,3}, layernorm1,
// layernorm2; decoder.layernorm1; final_layer. Biases switched off by attention_bias / glu_bias /
// final_bias are left out; tie_word_embeddings leaves out final_layer.weight; a fixed G leaves
// out PLGA, metric learner and mha1.layernorm1.
std::vector<ParamSpec> expected_params(const Config& c);

// Number of trained parameters (buffers excluded).
int64_t count_params(const Config& c);

// Non-persistent RoPE buffers that may appear in a checkpoint and are ignored (spec §11.6):
// *.rotary_embedding.theta, *.rotary_embedding.cache, *.rotary_embedding.inv_freq.
bool is_ignored_buffer(const std::string& name);

// Compares tensors with expected_params(c). Each problem is one line:
//   "<file>: tensor '<n>' has shape [16,8] but config.json implies [16,16]"
//   "<file>: tensor '<n>' has dtype I64 but parameters are F32, F64, F16 or BF16"
//   "<missing_where>: missing tensor '<n>'"
//   "<file>: unexpected tensor '<n>' (not a parameter of this config)"
// With config.json "quantization" (q8_0) every packable weight NAME (model/packed.h) is expected
// as NAME.q8 (I8, NAME's shape) and NAME.q8_scale (F32 or F16, [O, ceil(I/32)]) instead; q8_0
// tensors without the config entry are one problem that says so.
// Returns them all, in expected order then extras (empty: all good). This overload names
// `where` in every message; the ModelFiles one names the shard holding a present tensor and
// mf.weights_path() for a missing one.
std::vector<std::string> param_problems(const Config& c, const std::vector<TensorInfo>& tensors,
                                        const std::string& where);
std::vector<std::string> param_problems(const ModelFiles& mf);

// len(expected_params(c)) computed without building the list (a double: a hostile config can
// claim more layers than an int64 count of tensors would hold).
double expected_tensor_count(const Config& c);

// Throws pldr::Error with the first problem (plus "(and N more problems)") if there is any.
void check_params_against_file(const ModelFiles& mf);

}  // namespace pldr

namespace pldr {

// The group a parameter belongs to, for summaries: "embedding", "attention" (q/k/v/dense),
// "plga operator" (W, b, P, a, b_a), "metric learner" (residual GLUs and their LayerNorms, and
// the LayerNorm on A), "ffn", "layernorm", "head", or "buffer".
std::string param_group(const std::string& name);

}  // namespace pldr
