// Independent oracles for scoring and generation, built only from the plain forward pass:
// - rolling log-likelihood = a brute-force sum over the harness's rolling windows (lm-eval
//   get_rolling_token_windows + make_disjoint_window, prefix EOS, context_len 1), re-derived here;
// - left truncation at context − 1, context, context + 1 (and + 2) against hand-built inputs;
// - sequential scoring = one float64 forward per proper prefix, final row;
// - generation stops right after EOS, with the ids asserted.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "infer/generate.h"
#include "infer/score.h"
#include "model/init.h"

namespace {

// A learned-G model with a short context, so that texts span several windows. Its G depends on
// every input token, so any change of a window's context changes the scores.
pldr::Config cfg(int64_t max_position) {
    pldr::Config c;
    c.num_layers = 2;
    c.num_heads = 2;
    c.head_dim = 6;
    c.hidden_size = 12;
    c.intermediate_size = 32;
    c.vocab_size = 41;
    c.max_position = max_position;
    c.A_dff = 10;
    c.num_reslayerA = 2;
    c.num_denseA = 2;
    c.eos_token_id = 3;
    return c;
}

template <typename T>
pldr::Model<T> random_model(int64_t max_position, uint64_t seed) {
    pldr::Model<T> m(cfg(max_position));
    pldr::init_weights(m, seed);
    pldr::Rng r(seed + 7);
    for (auto& p : m.params) p += T(0.05 * r.normal());
    return m;
}

pldr::Model<float> to_float(const pldr::Model<double>& m) {
    pldr::Model<float> f(m.cfg);
    for (size_t i = 0; i < m.params.size(); ++i) f.params[i] = float(m.params[i]);
    return f;
}

// Random non-pad, non-EOS tokens (ids 4..40), so that no window is masked or ends early.
std::vector<int64_t> text(int64_t n, uint64_t seed) {
    pldr::Rng r(seed);
    std::vector<int64_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(4 + int64_t(r.below(37)));
    return t;
}

// log softmax(logits row)[id], in long double.
double logprob(const double* row, int64_t V, int64_t id) {
    long double mx = row[0], z = 0;
    for (int64_t v = 1; v < V; ++v) mx = std::max<long double>(mx, row[v]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
    return double(row[id] - mx - std::log(z));
}

// Σ log p(cont[k] | ctx + cont[:k]) from ONE forward pass over (ctx + cont)[:-1].
double score_window(const pldr::Model<double>& m, const std::vector<int64_t>& ctx,
                    const std::vector<int64_t>& cont) {
    std::vector<int64_t> inp = ctx;
    inp.insert(inp.end(), cont.begin(), cont.end());
    pldr::Activations<double> a;
    pldr::forward(m, inp.data(), 1, int64_t(inp.size()) - 1, a);
    long double s = 0;
    const int64_t V = m.cfg.vocab_size;
    for (size_t i = ctx.size(); i < inp.size(); ++i)
        s += logprob(a.logits.ptr() + int64_t(i - 1) * V, V, inp[i]);
    return double(s);
}

// lm-eval's loglikelihood_rolling windows, from the harness's definition (utils.py):
//   first: input [prefix] + t[:n1−1], predict t[:n1], n1 = min(W, N);
//   then, while tokens remain: p = min(N − predicted, W), end = predicted + p,
//        input t[end−W−1 : end−1], predict t[end−p : end];
// make_disjoint_window keeps the first len(input) − (p − 1) input tokens as the context.
struct Window {
    std::vector<int64_t> ctx, cont;
};
std::vector<Window> rolling_windows(const std::vector<int64_t>& t, int64_t prefix, int64_t W) {
    const int64_t N = int64_t(t.size());
    auto slice = [&](int64_t a, int64_t b) {
        return std::vector<int64_t>(t.begin() + a, t.begin() + b);
    };
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> raw;
    const int64_t n1 = std::min(W, N);
    std::vector<int64_t> first{prefix};
    const auto head = slice(0, n1 - 1);
    first.insert(first.end(), head.begin(), head.end());
    raw.push_back({first, slice(0, n1)});
    for (int64_t predicted = n1; predicted < N;) {
        const int64_t p = std::min(N - predicted, W), end = predicted + p;
        raw.push_back({slice(end - W - 1, end - 1), slice(end - p, end)});
        predicted += p;
    }
    std::vector<Window> out;
    for (auto& [in, pred] : raw) {
        in.resize(in.size() - (pred.size() - 1));
        out.push_back({in, pred});
    }
    return out;
}

TEST(InferOracle, RollingLoglikelihoodEqualsBruteForceOverTheHarnessWindows) {
    auto m = random_model<double>(16, 21);
    const int64_t eos = m.cfg.eos_token_id;
    // N: one short window, exactly two windows, several windows with a partial last one, and a
    // last window of one token; W: the model's context and a shorter window.
    for (int64_t W : {16, 7}) {
        for (int64_t N : {int64_t(5), 2 * W, 3 * W + 5, 2 * W + 1}) {
            const auto t = text(N, uint64_t(100 + N + W));
            const auto wins = rolling_windows(t, eos, W);
            // Sanity of the oracle: every token predicted exactly once, in order; the first
            // window starts from EOS; every input fits the window.
            std::vector<int64_t> predicted;
            for (const auto& w : wins) {
                predicted.insert(predicted.end(), w.cont.begin(), w.cont.end());
                ASSERT_LE(int64_t(w.ctx.size() + w.cont.size()) - 1, W);
                ASSERT_FALSE(w.ctx.empty());
            }
            ASSERT_EQ(predicted, t);
            ASSERT_EQ(wins[0].ctx, std::vector<int64_t>{eos});
            long double want = 0;
            for (const auto& w : wins) want += score_window(m, w.ctx, w.cont);
            const double got = pldr::rolling_loglikelihood(m, t, eos, W);
            // Measured: ≤ 3e-14 absolute on sums of −20 to −200 (summation order).
            EXPECT_NEAR(got, double(want), 1e-12 * std::abs(double(want)))
                << "W " << W << " N " << N << " windows " << wins.size();
        }
    }
}

TEST(InferOracle, RollingWindowsAreContextSensitive) {
    // The oracle can fail: with the previous token replaced by EOS in the second window, the
    // brute-force sum moves by far more than the 1e-12 tolerance above.
    auto m = random_model<double>(16, 22);
    const auto t = text(20, 5);
    auto wins = rolling_windows(t, m.cfg.eos_token_id, 8);
    ASSERT_GE(wins.size(), 2u);
    const double a = score_window(m, wins[1].ctx, wins[1].cont);
    wins[1].ctx = {m.cfg.eos_token_id};
    const double b = score_window(m, wins[1].ctx, wins[1].cont);
    EXPECT_GT(std::abs(a - b), 1e-4);
}

TEST(InferOracle, LeftTruncationAtTheContextBoundary) {
    const int64_t L = 12;
    auto m = random_model<double>(L, 23);
    const int64_t V = m.cfg.vocab_size;
    // Requests of L − 1, L, L + 1 and L + 2 tokens: a context of n − 3 tokens and a continuation
    // of 3. The harness keeps the last L tokens, and the context loses what was cut.
    for (int64_t n : {L - 1, L, L + 1, L + 2}) {
        std::vector<int64_t> all;
        for (int64_t i = 0; i < n; ++i) all.push_back(4 + i);  // distinct ids 4, 5, …
        pldr::ScoreRequest req;
        req.context.assign(all.begin(), all.end() - 3);
        req.continuation.assign(all.end() - 3, all.end());
        // Hand-built: the kept input is ids 4 + max(0, n − L) … 4 + n − 1.
        const int64_t cut = n > L ? n - L : 0;
        std::vector<int64_t> kept;
        for (int64_t i = cut; i < n; ++i) kept.push_back(4 + i);
        ASSERT_EQ(int64_t(kept.size()), std::min(n, L));
        pldr::Activations<double> a;
        pldr::forward(m, kept.data(), 1, int64_t(kept.size()) - 1, a);
        const int64_t ctxlen = int64_t(kept.size()) - 3;
        for (auto mode :
             {pldr::ScoreMode::BLOCK, pldr::ScoreMode::SEQUENTIAL, pldr::ScoreMode::CACHED}) {
            const auto r = pldr::score_request(m, req, mode);
            EXPECT_EQ(r.ctxlen, ctxlen) << "n " << n;
            ASSERT_EQ(r.token_logprobs.size(), 3u) << "n " << n;
            if (mode == pldr::ScoreMode::SEQUENTIAL) {
                // One forward per proper prefix of the kept input.
                for (int64_t k = 0; k < 3; ++k) {
                    pldr::Activations<double> p;
                    pldr::forward(m, kept.data(), 1, ctxlen + k, p);
                    const double want =
                        logprob(p.logits.ptr() + (ctxlen + k - 1) * V, V, kept[size_t(ctxlen + k)]);
                    EXPECT_NEAR(r.token_logprobs[size_t(k)], want, 1e-12) << "n " << n;
                }
            }
            if (mode != pldr::ScoreMode::BLOCK) continue;
            for (int64_t k = 0; k < 3; ++k) {
                const double want =
                    logprob(a.logits.ptr() + (ctxlen - 1 + k) * V, V, kept[size_t(ctxlen + k)]);
                // Measured: ≤ 9e-16 (the same forward over the same rows).
                EXPECT_NEAR(r.token_logprobs[size_t(k)], want, 1e-12) << "n " << n << " k " << k;
            }
        }
    }
    // A continuation of L − 1 tokens keeps one context token; one of L tokens cannot fit.
    pldr::ScoreRequest fits{{4, 5, 6}, text(L - 1, 9)}, too_long{{4, 5, 6}, text(L, 9)};
    EXPECT_EQ(pldr::score_request(m, fits, pldr::ScoreMode::BLOCK).ctxlen, 1);
    EXPECT_THROW(pldr::score_request(m, too_long, pldr::ScoreMode::BLOCK), pldr::Error);
}

TEST(InferOracle, SequentialScoringEqualsPrefixByPrefixFloat64) {
    auto m = random_model<double>(24, 24);
    const auto mf = to_float(m);
    const int64_t V = m.cfg.vocab_size;
    const pldr::ScoreRequest req{text(7, 11), text(6, 12)};
    std::vector<int64_t> inp = req.context;
    inp.insert(inp.end(), req.continuation.begin(), req.continuation.end());
    // Oracle: for each continuation token, a fresh float64 forward over its proper prefix; the
    // final row predicts it.
    std::vector<double> want;
    for (size_t i = req.context.size(); i < inp.size(); ++i) {
        pldr::Activations<double> a;
        pldr::forward(m, inp.data(), 1, int64_t(i), a);
        want.push_back(logprob(a.logits.ptr() + (int64_t(i) - 1) * V, V, inp[i]));
    }
    const auto seq = pldr::score_request(m, req, pldr::ScoreMode::SEQUENTIAL);
    const auto seqf = pldr::score_request(mf, req, pldr::ScoreMode::SEQUENTIAL);
    const auto block = pldr::score_request(m, req, pldr::ScoreMode::BLOCK);
    ASSERT_EQ(seq.token_logprobs.size(), want.size());
    ASSERT_EQ(seqf.token_logprobs.size(), want.size());
    double gap = 0;
    long double sum = 0;
    for (size_t k = 0; k < want.size(); ++k) {
        // Measured: float64 ≤ 9e-16; float32 ≤ 9.7e-6 (tolerance 5× that).
        EXPECT_NEAR(seq.token_logprobs[k], want[k], 1e-12) << k;
        EXPECT_NEAR(seqf.token_logprobs[k], want[k], 5e-5) << k;
        gap = std::max(gap, std::abs(block.token_logprobs[k] - want[k]));
        sum += want[k];
    }
    EXPECT_NEAR(seq.logprob, double(sum), 1e-12);
    // Block scoring sees the whole continuation through A and G: on this learned-G model it is a
    // different quantity (measured gap 0.32), so the oracle tells the two modes apart.
    EXPECT_GT(gap, 1e-4);
    // is_greedy: every continuation token is the argmax of its prefix's final row.
    bool greedy = true;
    for (size_t i = req.context.size(); i < inp.size(); ++i) {
        pldr::Activations<double> a;
        pldr::forward(m, inp.data(), 1, int64_t(i), a);
        const double* row = a.logits.ptr() + (int64_t(i) - 1) * V;
        int64_t am = 0;
        for (int64_t v = 1; v < V; ++v)
            if (row[v] > row[am]) am = v;
        greedy = greedy && am == inp[i];
    }
    EXPECT_EQ(seq.is_greedy, greedy);
}

TEST(InferOracle, GenerationStopsRightAfterEos) {
    auto m = random_model<double>(32, 25);
    pldr::GenerateOptions o;
    o.max_new = 14;
    o.sampler.greedy = true;
    o.stop_at_eos = false;
    o.cache = pldr::CacheMode::NONE;  // every step a full forward: the oracle below is exact
    const std::vector<int64_t> prompt{7, 19, 4, 33};
    const auto free_run = pldr::generate(m, prompt, o);
    ASSERT_EQ(free_run.ids.size(), 14u);
    // Greedy ids equal the argmax of a full forward over prompt + generated so far.
    std::vector<int64_t> seq = prompt;
    const int64_t V = m.cfg.vocab_size;
    for (int64_t id : free_run.ids) {
        pldr::Activations<double> a;
        pldr::forward(m, seq.data(), 1, int64_t(seq.size()), a);
        const double* row = a.logits.ptr() + (int64_t(seq.size()) - 1) * V;
        int64_t am = 0;
        for (int64_t v = 1; v < V; ++v)
            if (row[v] > row[am]) am = v;
        EXPECT_EQ(id, am) << "step " << seq.size() - prompt.size();
        seq.push_back(id);
    }
    // Make the k-th generated id the EOS (the model's maths do not depend on the EOS id): the
    // generation must end right after it, with the same ids up to there.
    size_t k = 2;
    auto seen_before = [&](size_t i) {
        for (size_t j = 0; j < i; ++j)
            if (free_run.ids[j] == free_run.ids[i]) return true;
        return false;
    };
    while (k < free_run.ids.size() && seen_before(k)) ++k;
    ASSERT_LT(k, free_run.ids.size()) << "no fresh id to use as EOS";
    auto me = m;
    me.cfg.eos_token_id = free_run.ids[k];
    o.stop_at_eos = true;
    const auto stopped = pldr::generate(me, prompt, o);
    EXPECT_EQ(stopped.ids,
              std::vector<int64_t>(free_run.ids.begin(), free_run.ids.begin() + int64_t(k) + 1));
    EXPECT_EQ(stopped.steps.size(), k + 1);
    // EOS as the very first token: one token out.
    me.cfg.eos_token_id = free_run.ids[0];
    EXPECT_EQ(pldr::generate(me, prompt, o).ids, std::vector<int64_t>{free_run.ids[0]});
    // stop_at_eos off: the full run whatever the EOS id.
    o.stop_at_eos = false;
    EXPECT_EQ(pldr::generate(me, prompt, o).ids, free_run.ids);
    // Batched generation stops per prompt.
    o.stop_at_eos = true;
    me.cfg.eos_token_id = free_run.ids[k];
    const auto batch = pldr::generate_batch(me, {prompt, prompt}, o);
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[0].ids, stopped.ids);
    EXPECT_EQ(batch[1].ids, stopped.ids);
}

}  // namespace
