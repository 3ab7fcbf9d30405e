// Log-likelihood scoring (see score.h).
#include "infer/score.h"

#include <algorithm>
#include <cmath>

#include "infer/sampler.h"
#include "infer/session.h"
#include "io/tokenizer.h"
#include "ops/linear.h"

namespace pldr {

ScoreMode score_mode_from_name(const std::string& s) {
    if (s == "block") return ScoreMode::BLOCK;
    if (s == "sequential") return ScoreMode::SEQUENTIAL;
    if (s == "cached") return ScoreMode::CACHED;
    fail("--mode must be block, sequential or cached (got '", s, "')");
}

ScoreRequest encode_request(const Tokenizer& tok, const std::string& context,
                            const std::string& continuation, int64_t eos_id) {
    ScoreRequest r;
    if (context.empty()) {
        r.context = {eos_id};
        r.continuation = tok.encode(continuation);
        return r;
    }
    size_t keep = context.size();
    while (keep > 0 && std::isspace(static_cast<unsigned char>(context[keep - 1]))) --keep;
    const std::string ctx = context.substr(0, keep);
    const std::string cont = context.substr(keep) + continuation;
    const std::vector<int64_t> whole = tok.encode(ctx + cont);
    r.context = tok.encode(ctx);
    const size_t n = std::min(r.context.size(), whole.size());
    r.continuation.assign(whole.begin() + int64_t(n), whole.end());
    return r;
}

namespace {

// log_softmax(row)[id] and argmax(row), in double.
template <typename T>
std::pair<double, int64_t> row_logprob(const T* row, int64_t V, int64_t id) {
    // A numerical blow-up (NaN or inf logits) is an error, never a score.
    for (int64_t v = 0; v < V; ++v)
        if (!std::isfinite(double(row[v])))
            fail("non-finite logits (", double(row[v]), " at token id ", v,
                 "): the model's forward pass blew up; no score is returned");
    int64_t am = 0;
    for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[am]) am = v;
    const double mx = double(row[am]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - mx);
    return {double(row[id]) - mx - std::log(s), am};
}

// Appends the score of `id` at one position (its log-probability, the row's argmax and, for
// top_n > 0, the row's best alternatives; lp: scratch) to r.
template <typename T>
void take_row(const T* row, int64_t V, int64_t id, int64_t top_n, std::vector<double>& lp,
              ScoreResult& r) {
    auto [l, am] = row_logprob(row, V, id);
    r.token_logprobs.push_back(l);
    r.argmax_ids.push_back(am);
    if (top_n > 0) {
        Sampler::log_softmax(row, V, lp);
        r.top.push_back(Sampler::top_n(lp, top_n));
    }
}

// The scores of tokens[first..n-1] from the final hidden rows [n-1, d] of a pass over tokens
// (row i − 1 predicts token i): the head over rows first−1 … n−2 only, then each row's
// log-probability of its token, its argmax and (top_n > 0) its best alternatives.
template <typename T>
void score_rows(const Model<T>& m, const T* hidden, const std::vector<int64_t>& tokens,
                int64_t first, int64_t top_n, ScoreResult& r) {
    const int64_t n = int64_t(tokens.size()), rows = n - first, V = m.cfg.vocab_size;
    const int64_t d = m.cfg.hidden_size;
    std::vector<T> logits(static_cast<size_t>(rows * V));
    linear_forward(logits.data(), hidden + (first - 1) * d, m.lw.head, m.w.head_b, rows, d, V);
    std::vector<double> lp;
    for (int64_t i = first; i < n; ++i)
        take_row(logits.data() + (i - first) * V, V, tokens[size_t(i)], top_n, lp, r);
}

// logprob and is_greedy from token_logprobs and argmax_ids (continuation = inp[ctxlen:]).
void sum_up(ScoreResult& r, const std::vector<int64_t>& inp) {
    r.is_greedy = true;
    for (size_t k = 0; k < r.token_logprobs.size(); ++k) {
        r.logprob += r.token_logprobs[k];
        r.is_greedy = r.is_greedy && r.argmax_ids[k] == inp[size_t(r.ctxlen) + k];
    }
}

}  // namespace

template <typename T>
ScoreResult score_request(const Model<T>& m, const ScoreRequest& req, ScoreMode mode, int64_t top_n,
                          const DeviceScoring<T>* device) {
    const int64_t L = m.cfg.max_position, V = m.cfg.vocab_size;
    PLDR_REQUIRE(!req.continuation.empty(), "empty continuation: nothing to score");
    PLDR_REQUIRE(!req.context.empty(), "empty context: the first continuation token needs one");
    std::vector<int64_t> inp = req.context;
    inp.insert(inp.end(), req.continuation.begin(), req.continuation.end());
    const int64_t whole = int64_t(inp.size());
    const int64_t cut = std::max<int64_t>(0, whole - L);
    ScoreResult r;
    r.ctxlen = int64_t(req.context.size()) - cut;
    PLDR_REQUIRE(r.ctxlen >= 1, "request does not fit the context: its continuation of ",
                 req.continuation.size(), " tokens needs at least ", req.continuation.size() + 1,
                 " positions, max_position_embeddings is ", L);
    inp.erase(inp.begin(), inp.begin() + cut);
    const int64_t n = int64_t(inp.size());
    check_inputs(m, inp.data(), 1, n);
    PLDR_REQUIRE(top_n >= 0, "top_logprobs must be >= 0 (got ", top_n, ")");
    std::vector<double> lp;
    auto take = [&](const T* row, int64_t pos) {
        take_row(row, V, inp[size_t(pos)], top_n, lp, r);
    };
    if (mode == ScoreMode::BLOCK) {
        // One pass over inp[:-1]; the head only on the rows that predict the continuation (on a
        // device: every row's logits come back, the same rows are read).
        if (device) {
            std::vector<T> logits;
            device->logits(inp.data(), n - 1, logits);
            for (int64_t i = r.ctxlen; i < n; ++i) take(logits.data() + (i - 1) * V, i);
        } else {
            Activations<T> a;
            forward_layers(m, inp.data(), 1, n - 1, a);
            score_rows(m, a.final_hidden().ptr(), inp, r.ctxlen, top_n, r);
        }
    } else if (device) {  // the sessions below, on the device
        const bool seq = mode == ScoreMode::SEQUENTIAL;
        auto s = device->decoders(seq ? CacheMode::NONE : CacheMode::KVG, n);
        const std::vector<int64_t> ctx(inp.begin(), inp.begin() + r.ctxlen);
        const std::vector<T>* lg = &s->prefill(ctx);
        for (int64_t i = r.ctxlen; i < n; ++i) {
            take(lg->data(), i);
            if (i + 1 < n) lg = &s->decode(inp[size_t(i)]);
        }
    } else if (mode == ScoreMode::SEQUENTIAL) {
        Session<T> s(m, CacheMode::NONE);
        for (int64_t i = r.ctxlen; i < n; ++i) {
            const std::vector<int64_t> prefix(inp.begin(), inp.begin() + i);
            take(s.prefill(prefix).data(), i);
        }
    } else {
        Session<T> s(m, CacheMode::KVG, n);
        const std::vector<int64_t> ctx(inp.begin(), inp.begin() + r.ctxlen);
        const std::vector<T>* lg = &s.prefill(ctx);
        for (int64_t i = r.ctxlen; i < n; ++i) {
            take(lg->data(), i);
            if (i + 1 < n) lg = &s.decode(inp[size_t(i)]);
        }
    }
    sum_up(r, inp);
    return r;
}

template <typename T>
ScoreResult score_prefill(const Session<T>& s, int64_t top_n) {
    const std::vector<int64_t>& ids = s.tokens();
    const int64_t n = int64_t(ids.size());
    const Activations<T>& a = s.last();
    PLDR_REQUIRE(n >= 2, "scoring a prompt needs at least two tokens (got ", n, ")");
    PLDR_REQUIRE(
        a.S == n && !a.layers.empty() && a.final_hidden().numel() >= n * s.model().cfg.hidden_size,
        "scoring a prompt reads the activations of its prefill: the session's last call "
        "must be the prefill, with activations kept");
    PLDR_REQUIRE(top_n >= 0, "top_logprobs must be >= 0 (got ", top_n, ")");
    ScoreResult r;
    r.ctxlen = 1;
    score_rows(s.model(), a.final_hidden().ptr(), ids, 1, top_n, r);
    sum_up(r, ids);
    return r;
}

template <typename T>
double rolling_loglikelihood(const Model<T>& m, const std::vector<int64_t>& tokens, int64_t eos_id,
                             int64_t window, const DeviceScoring<T>* device) {
    const int64_t L = window > 0 ? std::min(window, m.cfg.max_position) : m.cfg.max_position;
    const int64_t V = m.cfg.vocab_size, N = int64_t(tokens.size());
    double total = 0;
    Activations<T> a;
    std::vector<T> dev_logits;
    std::vector<int64_t> inp;
    for (int64_t start = 0; start < N; start += L) {
        const int64_t len = std::min(L, N - start);  // tokens predicted by this window
        // The window's input ends just before its last prediction. The first window is
        // [EOS] + tokens[:len-1]; a later one is the L tokens before its end
        // (get_rolling_token_windows + make_disjoint_window): the previous token for a full
        // window, more context for a shorter last one. Token index −1 is the EOS prefix.
        const int64_t S = start == 0 ? len : L;
        inp.resize(size_t(S));
        for (int64_t j = 0; j < S; ++j) {
            const int64_t t = start + len - 1 - S + j;
            inp[size_t(j)] = t < 0 ? eos_id : tokens[size_t(t)];
        }
        const T* logits = nullptr;
        if (device) {
            device->logits(inp.data(), S, dev_logits);
            logits = dev_logits.data();
        } else {
            forward(m, inp.data(), 1, S, a);
            logits = a.logits.ptr();
        }
        for (int64_t i = 0; i < len; ++i)
            total += row_logprob(logits + (S - len + i) * V, V, tokens[size_t(start + i)]).first;
    }
    return total;
}

template ScoreResult score_request<float>(const Model<float>&, const ScoreRequest&, ScoreMode,
                                          int64_t, const DeviceScoring<float>*);
template ScoreResult score_request<double>(const Model<double>&, const ScoreRequest&, ScoreMode,
                                           int64_t, const DeviceScoring<double>*);
template ScoreResult score_prefill<float>(const Session<float>&, int64_t);
template ScoreResult score_prefill<double>(const Session<double>&, int64_t);
template double rolling_loglikelihood<float>(const Model<float>&, const std::vector<int64_t>&,
                                             int64_t, int64_t, const DeviceScoring<float>*);
template double rolling_loglikelihood<double>(const Model<double>&, const std::vector<int64_t>&,
                                              int64_t, int64_t, const DeviceScoring<double>*);

}  // namespace pldr
