// `pldr audit` driver (see runner.h).
#include "audit/runner.h"

#include <chrono>

#include "io/tokenizer.h"

namespace pldr::audit {

std::vector<std::string> default_text_prompts() {
    return {"The capital of France is", "Once upon a time, there was a little girl who",
            "Water boils at a temperature of", "In mathematics, a prime number is"};
}

std::vector<std::vector<int64_t>> default_id_prompts(int64_t vocab, int64_t pad_id) {
    const std::vector<std::vector<int64_t>> raw = {
        {5, 17, 3, 22, 9, 31, 12, 8}, {40, 2, 19, 7, 25, 11}, {13, 29, 6, 44, 18, 21, 35, 10, 27}};
    std::vector<std::vector<int64_t>> out;
    for (const auto& r : raw) {
        std::vector<int64_t> p;
        for (int64_t id : r) {
            int64_t v = id % vocab;
            if (v == pad_id) v = (v + 1) % vocab;
            p.push_back(v);
        }
        out.push_back(p);
    }
    return out;
}

const char* default_heldout_text() {
    return "The river runs through the middle of the old town, and in the spring the water rises "
           "over the stone steps by the market. People come down in the morning to buy bread, "
           "fish and vegetables, and the children play by the bridge until their parents call "
           "them home. In the summer the town is quiet. Most families leave for the mountains, "
           "where the air is cooler and the days are long. When they return in the autumn, the "
           "streets fill again with voices, the schools open, and the market is busy from dawn "
           "to noon. The winters are cold but short, and the first warm day of the year is "
           "always celebrated with music in the square.";
}

std::string AuditReport::weights_text() const {
    if (!quantized) return "weights " + weights;
    std::string s = "weights QUANTIZED: " + weights;
    if (weights == "q8_0") s += " (int8 in blocks of 32 inputs, one float32 scale per block)";
    if (weights == "bf16") s += " (bfloat16)";
    s += packed ? ", read packed by the matrix products" : ", dequantized to " + dtype + " at load";
    return s;
}

template <typename T>
AuditReport run_audit(const Model<T>& m, const AuditInputs& in, const AuditConfig& cfg) {
    PLDR_REQUIRE(!in.prompts.empty(), "the prompt set is empty");
    const auto t0 = std::chrono::steady_clock::now();
    const Config& c = m.cfg;
    AuditReport r;
    r.dtype = type_name<T>();
    r.variant = c.learned_g()
                    ? "v510 (learned G_LM)"
                    : std::string("fixed G_LM (custom_G_type ") + g_type_name(c.g_type) + ")";
    r.weights = stored_weights(c);
    r.quantized = r.weights == "q8_0" || r.weights == "bf16" || r.weights == "f16";
    r.packed = m.packed != nullptr;
    r.params = m.num_params();
    r.layers = c.num_layers;
    r.heads = c.num_heads;
    r.head_dim = c.head_dim;
    r.vocab = c.vocab_size;
    r.context = c.max_position;
    r.cfg = cfg;
    r.prompts = in.prompts;
    for (const auto& p : in.prompts) {
        PLDR_REQUIRE(!p.ids.empty(), "a prompt encodes to no tokens");
        check_inputs(m, p.ids.data(), 1, int64_t(p.ids.size()));
    }

    std::vector<Deductive> ded;
    std::vector<OrderTable> cont_tables;
    std::vector<ScoreRequest> reqs;
    for (size_t i = 0; i < in.prompts.size(); ++i) {
        const auto& ids = in.prompts[i].ids;
        r.eps.push_back(eps_g_steps(m, ids, cfg.steps));
        r.cont.push_back(continuation_order(m, ids, cfg.cont_len, cfg.seed1, cfg.seed2));
        cont_tables.push_back(r.cont.back().table);
        ded.push_back(deductive_outputs(m, ids));
        auto sp = spectral(ded.back(), int64_t(i));
        r.spectral.insert(r.spectral.end(), sp.begin(), sp.end());
        r.padding.push_back(padding_sensitivity(m, ids, cfg.pad));
        // Block vs sequential requests: the prompt's second half given its first half, and the
        // first 16 tokens of its first sampled continuation given the prompt.
        if (ids.size() >= 2) {
            const size_t h = ids.size() / 2;
            reqs.push_back(
                {{ids.begin(), ids.begin() + int64_t(h)}, {ids.begin() + int64_t(h), ids.end()}});
        }
        const auto& c1 = r.cont.back().cont1;
        if (!c1.empty())
            reqs.push_back(
                {ids, {c1.begin(), c1.begin() + std::min<int64_t>(16, int64_t(c1.size()))}});
    }
    r.cont_max = order_max(cont_tables);
    std::vector<OrderTable> pair_tables;
    for (size_t i = 0; i < ded.size(); ++i)
        for (size_t j = i + 1; j < ded.size(); ++j)
            pair_tables.push_back(order_between(ded[i], ded[j]));
    r.prompt_pairs = int64_t(pair_tables.size());
    if (!pair_tables.empty()) r.prompts_max = order_max(pair_tables);
    for (const auto& L : ded[0].layers) r.g_heat.push_back(L[3]);

    block_vs_sequential(m, reqs, r.gaps);
    r.block_seq_requests = int64_t(reqs.size());
    if (in.tok && !in.mc2.empty() && in.mc2_items > 0)
        truthfulqa_gaps(m, *in.tok, in.mc2, in.mc2_items, r.gaps);

    r.sdpa_identity = sdpa_identity_residual(m, in.prompts[0].ids);
    r.absorption = absorption_residual(m, in.prompts[0].ids);
    if (in.heldout.size() >= 2) {
        r.has_loss = true;
        r.loss = loss_vs_unigram(m, in.heldout);
        r.loss_source = in.heldout_source;
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

template AuditReport run_audit<float>(const Model<float>&, const AuditInputs&, const AuditConfig&);
template AuditReport run_audit<double>(const Model<double>&, const AuditInputs&,
                                       const AuditConfig&);

}  // namespace pldr::audit
