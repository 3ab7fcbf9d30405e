// `pldr audit`: every measurement of measure.h over a prompt set, collected into one report
// (written as audit.json and report.html by report.h).
#pragma once
#include <string>
#include <vector>

#include "audit/measure.h"

namespace pldr::audit {

struct AuditPrompt {
    std::string text;  // empty for token-id prompts
    std::vector<int64_t> ids;
};

struct AuditConfig {
    int64_t steps = 16;     // greedy decode steps for eps_G
    int64_t cont_len = 64;  // sampled continuation length (order parameter (a))
    uint64_t seed1 = 100, seed2 = 101;
    int64_t pad = 4;  // pad tokens appended for the padding sensitivity
};

struct AuditInputs {
    std::vector<AuditPrompt> prompts;  // ≥ 1
    std::vector<int64_t> heldout;      // held-out tokens for loss vs unigram entropy (may be empty)
    std::string heldout_source;
    const Tokenizer* tok = nullptr;  // for TruthfulQA
    std::vector<McItem> mc2;         // TruthfulQA MC2 items (may be empty)
    int64_t mc2_items = 0;
};

struct AuditReport {
    std::string model_dir, dtype, variant;
    // The stored linear weights (model/packed.h stored_weights): "f32", "f64", "f16", "bf16" or
    // "q8_0"; quantized for bf16, f16 and q8_0; packed when the products read them packed.
    std::string weights;
    bool quantized = false, packed = false;
    std::string weights_text() const;  // one line for the reports
    int64_t params = 0, layers = 0, heads = 0, head_dim = 0, vocab = 0, context = 0;
    AuditConfig cfg;
    std::vector<AuditPrompt> prompts;
    std::vector<std::vector<StepRecord>> eps;  // per prompt
    std::vector<ContinuationOrder> cont;       // per prompt
    OrderTable cont_max;                       // max over prompts of (a)
    OrderTable prompts_max;                    // (b): max over prompt pairs
    int64_t prompt_pairs = 0;
    BlockSeqGaps gaps;
    int64_t block_seq_requests = 0;
    std::vector<SpectralRecord> spectral;  // every (prompt, layer, head)
    double sdpa_identity = 0, absorption = 0;
    std::vector<PaddingResult> padding;  // per prompt
    bool has_loss = false;
    LossVsUnigram loss;
    std::string loss_source;
    std::vector<Tensor<double>> g_heat;  // G_LM of prompt 0's prefill, per layer [H,dk,dk]
    double seconds = 0;
};

template <typename T>
AuditReport run_audit(const Model<T>& m, const AuditInputs& in, const AuditConfig& cfg);

// The built-in prompt sets: a few sentences for text models, fixed id sequences (inside the
// vocabulary, never the pad id) for id-only models.
std::vector<std::string> default_text_prompts();
std::vector<std::vector<int64_t>> default_id_prompts(int64_t vocab, int64_t pad_id);
// A short built-in English paragraph: the default held-out text of text models.
const char* default_heldout_text();

}  // namespace pldr::audit
