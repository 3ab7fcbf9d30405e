// The collapse audit's measurements against independent computations (spec §8.1, §7, §4.5).
#include <gtest/gtest.h>

#include <cmath>

#include "audit/measure.h"
#include "audit/report.h"
#include "audit/runner.h"
#include "core/rng.h"
#include "io/model_load.h"
#include "ops/dag.h"

namespace {

using namespace pldr;
using namespace pldr::audit;

std::string model_dir(const std::string& name) {
    return std::string(PLDR_SOURCE_DIR) + "/tests/golden/models/" + name;
}

const std::vector<int64_t> kPrompt1 = {5, 17, 3, 22, 9, 31};
const std::vector<int64_t> kPrompt2 = {40, 2, 19, 7, 25, 11, 13, 29};

// Batch-0 G_LM of layer l of an uncached forward, in double.
std::vector<double> forward_G(const Model<double>& m, const std::vector<int64_t>& ids, int64_t l,
                              int q = 3) {
    Activations<double> a;
    forward(m, ids.data(), 1, int64_t(ids.size()), a);
    const auto& la = a.layers[size_t(l)];
    const Tensor<double>* t[4] = {&la.A, &la.A_LM, &la.A_P, &la.G};
    return {t[q]->data.begin(), t[q]->data.end()};
}

double oracle_rms(const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v * v;
    return std::sqrt(s / double(x.size()));
}

TEST(AuditStats, RankOfHandMadeMatrices) {
    const int64_t n = 10;
    Rng r(3);
    std::vector<double> u(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (auto& x : u) x = r.normal();
    for (auto& x : v) x = r.normal();
    std::vector<double> M(static_cast<size_t>(n * n));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) M[size_t(i * n + j)] = u[size_t(i)] * v[size_t(j)];
    EXPECT_EQ(numerical_rank(singular_values(M.data(), n, n)), 1);
    // Rank 3: a sum of three random outer products.
    std::vector<double> R3(M.size(), 0.0);
    for (int k = 0; k < 3; ++k) {
        for (auto& x : u) x = r.normal();
        for (auto& x : v) x = r.normal();
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) R3[size_t(i * n + j)] += u[size_t(i)] * v[size_t(j)];
    }
    EXPECT_EQ(numerical_rank(singular_values(R3.data(), n, n)), 3);
    // Full rank: random Gaussian.
    std::vector<double> F(M.size());
    for (auto& x : F) x = r.normal();
    EXPECT_EQ(numerical_rank(singular_values(F.data(), n, n)), n);
    // Known singular values: diag(5, −3, 2, 1e-9) → 5, 3, 2, 1e-9; rank 3 at 64·eps_f32·5.
    std::vector<double> D(16, 0.0);
    D[0] = 5, D[5] = -3, D[10] = 2, D[15] = 1e-9;
    auto sv = singular_values(D.data(), 4, 4);
    ASSERT_EQ(sv.size(), 4u);
    EXPECT_NEAR(sv[0], 5, 1e-14);
    EXPECT_NEAR(sv[1], 3, 1e-14);
    EXPECT_NEAR(sv[2], 2, 1e-14);
    EXPECT_NEAR(sv[3], 1e-9, 1e-22);
    EXPECT_EQ(numerical_rank(sv), 3);
    std::vector<double> Z(16, 0.0);
    EXPECT_EQ(numerical_rank(singular_values(Z.data(), 4, 4)), 0);
    // Rectangular (wide) matrix of rank 2.
    std::vector<double> W = {1, 2, 3, 4, 2, 4, 6, 8, 0, 1, 0, 1};
    EXPECT_EQ(numerical_rank(singular_values(W.data(), 3, 4)), 2);
}

TEST(AuditStats, OrderParamForms) {
    const std::vector<double> a = {1, 2, 3, 4}, b = {1, 2, 3, 6};
    OrderParam o = order_param(a.data(), b.data(), 4);
    const double num = std::sqrt(4.0 / 4);  // RMS of (0,0,0,−2)
    const double rms_a = std::sqrt(30.0 / 4), rms_b = std::sqrt(50.0 / 4);
    EXPECT_DOUBLE_EQ(o.rms, num / (0.5 * (rms_a + rms_b)));
    EXPECT_DOUBLE_EQ(o.signed_, num / (0.5 * (2.5 + 3.0)));
    o = order_param(a.data(), a.data(), 4);
    EXPECT_EQ(o.rms, 0.0);
    EXPECT_EQ(o.signed_, 0.0);
}

TEST(AuditFixedG, EpsGAndFluctuationsAreExactlyZero) {
    for (const char* name : {"c_tiny_v510G_identity.f64", "d_tiny_v510G_random.f32"}) {
        SCOPED_TRACE(name);
        if (std::string(name).find("f32") != std::string::npos) {
            Model<float> m = load_model<float>(model_dir(name));
            for (const auto& s : eps_g_steps(m, kPrompt1, 6))
                for (size_t l = 0; l < s.eps_G.size(); ++l) {
                    EXPECT_EQ(s.eps_G[l], 0.0);
                    EXPECT_EQ(s.max_dG[l], 0.0);
                }
            auto c = continuation_order(m, kPrompt1, 8);
            EXPECT_NE(c.cont1, c.cont2);
            EXPECT_FALSE(c.table.present[0]);
            EXPECT_TRUE(c.table.present[3]);
            EXPECT_EQ(c.table.max(3, 0), 0.0);
            EXPECT_EQ(c.table.max(3, 1), 0.0);
            auto t = order_between(deductive_outputs(m, kPrompt1), deductive_outputs(m, kPrompt2));
            EXPECT_EQ(t.max(3, 0), 0.0);
            EXPECT_EQ(t.max(3, 1), 0.0);
        } else {
            Model<double> m = load_model<double>(model_dir(name));
            auto steps = eps_g_steps(m, kPrompt1, 6);
            ASSERT_EQ(steps.size(), 6u);
            for (const auto& s : steps)
                for (size_t l = 0; l < s.eps_G.size(); ++l) {
                    EXPECT_EQ(s.eps_G[l], 0.0);
                    EXPECT_EQ(s.max_dG[l], 0.0);
                }
            auto c = continuation_order(m, kPrompt1, 8);
            EXPECT_EQ(c.table.max(3, 0), 0.0);
            auto t = order_between(deductive_outputs(m, kPrompt1), deductive_outputs(m, kPrompt2));
            EXPECT_EQ(t.max(3, 0), 0.0);
            EXPECT_EQ(t.max(3, 1), 0.0);
            // Spectral: G = I in every head → rank dk, DAG value |log(tr e^I / dk)| = 1.
            for (const auto& r : spectral(deductive_outputs(m, kPrompt1), 0)) {
                EXPECT_EQ(r.rank_G, m.cfg.head_dim);
                EXPECT_EQ(r.rank_A, -1);
                EXPECT_NEAR(r.dag_G, 1.0, 1e-14);
            }
        }
    }
}

TEST(AuditV510, EpsGEqualsIndependentComputation) {
    Model<double> m = load_model<double>(model_dir("a_tiny_v510.f64"));
    const int64_t steps = 5;
    auto rec = eps_g_steps(m, kPrompt1, steps);
    ASSERT_EQ(int64_t(rec.size()), steps);
    double max_eps = 0;
    std::vector<int64_t> seq = kPrompt1;
    for (const auto& s : rec) {
        seq.push_back(s.token);
        for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
            auto gc = forward_G(m, kPrompt1, l);  // the prefill's G = the prompt's forward G
            auto gu = forward_G(m, seq, l);
            std::vector<double> d(gc.size());
            double mx = 0;
            for (size_t i = 0; i < d.size(); ++i) {
                d[i] = gu[i] - gc[i];
                mx = std::max(mx, std::abs(d[i]));
            }
            const double eps = oracle_rms(d) / oracle_rms(gu);
            EXPECT_NEAR(s.eps_G[size_t(l)], eps, 1e-12 * eps + 1e-300);
            EXPECT_DOUBLE_EQ(s.max_dG[size_t(l)], mx);
            max_eps = std::max(max_eps, eps);
        }
        // dlogit: cached logits (KV+G from the prompt) vs the uncached forward's last row.
        EXPECT_GT(s.dlogit, 0.0);
        EXPECT_EQ(s.criterion, 2 * s.dlogit < s.margin);
    }
    EXPECT_GT(max_eps, 1e-6);
}

TEST(AuditV510, OrderParametersEqualIndependentComputation) {
    Model<double> m = load_model<double>(model_dir("a_tiny_v510.f64"));
    auto check = [&](const OrderTable& t, const std::vector<int64_t>& s1,
                     const std::vector<int64_t>& s2) {
        double any = 0;
        for (int q = 0; q < 4; ++q) {
            ASSERT_TRUE(t.present[size_t(q)]);
            for (int64_t l = 0; l < m.cfg.num_layers; ++l) {
                auto x = forward_G(m, s1, l, q), y = forward_G(m, s2, l, q);
                std::vector<double> d(x.size());
                double mx = 0, my = 0;
                for (size_t i = 0; i < d.size(); ++i) {
                    d[i] = x[i] - y[i];
                    mx += x[i];
                    my += y[i];
                }
                mx /= double(x.size());
                my /= double(y.size());
                const double rms = oracle_rms(d) / (0.5 * (oracle_rms(x) + oracle_rms(y)));
                const double sg = oracle_rms(d) / (0.5 * (std::abs(mx) + std::abs(my)));
                EXPECT_NEAR(t.layers[size_t(l)][size_t(q)].rms, rms, 1e-12 * rms);
                EXPECT_NEAR(t.layers[size_t(l)][size_t(q)].signed_, sg, 1e-12 * sg);
                any = std::max(any, rms);
            }
        }
        EXPECT_GT(any, 1e-6);
    };
    check(order_between(deductive_outputs(m, kPrompt1), deductive_outputs(m, kPrompt2)), kPrompt1,
          kPrompt2);
    auto c = continuation_order(m, kPrompt1, 10);
    ASSERT_EQ(c.cont1.size(), 10u);
    EXPECT_NE(c.cont1, c.cont2);
    std::vector<int64_t> s1 = kPrompt1, s2 = kPrompt1;
    s1.insert(s1.end(), c.cont1.begin(), c.cont1.end());
    s2.insert(s2.end(), c.cont2.begin(), c.cont2.end());
    check(c.table, s1, s2);
}

TEST(AuditIdentity, AbsorptionAndSdpaResiduals) {
    for (const char* name : {"a_tiny_v510.f64", "c_tiny_v510G_identity.f64",
                             "d_tiny_v510G_random.f64", "b_small_v510.f64"}) {
        SCOPED_TRACE(name);
        Model<double> m = load_model<double>(model_dir(name));
        EXPECT_LE(absorption_residual(m, kPrompt2), 1e-12);
        EXPECT_LE(sdpa_identity_residual(m, kPrompt2), 1e-13);
    }
}

TEST(AuditPadding, V510SeesPadsFixedGDoesNot) {
    Model<double> a = load_model<double>(model_dir("a_tiny_v510.f64"));
    PaddingResult p = padding_sensitivity(a, kPrompt1, 4);
    EXPECT_EQ(p.pad, 4);
    double mx = 0;
    for (double x : p.max_dG) mx = std::max(mx, x);
    EXPECT_GT(mx, 1e-8);  // pad rows enter the Gram matrix A (§4.5)
    EXPECT_GT(p.max_dlogit, 0.0);
    Model<double> c = load_model<double>(model_dir("c_tiny_v510G_identity.f64"));
    PaddingResult q = padding_sensitivity(c, kPrompt1, 4);
    for (double x : q.max_dG) EXPECT_EQ(x, 0.0);
    EXPECT_LE(q.max_dlogit, 1e-12);  // keys masked, causal: the last real row cannot see pads
}

TEST(AuditLoss, UnigramEntropyAndLoss) {
    Model<double> m = load_model<double>(model_dir("a_tiny_v510.f64"));
    const std::vector<int64_t> t = {1, 2, 2, 3, 3, 3, 3};
    LossVsUnigram r = loss_vs_unigram(m, t);
    EXPECT_EQ(r.tokens, 6);
    EXPECT_NEAR(r.unigram_entropy, std::log(3.0) - 2.0 / 3.0 * std::log(2.0), 1e-15);
    Activations<double> a;
    forward(m, t.data(), 1, int64_t(t.size()), a);
    double nll = 0;
    const int64_t V = m.cfg.vocab_size;
    for (int64_t s = 0; s + 1 < 7; ++s) {
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(a.logits[s * V + v]);
        nll += std::log(z) - a.logits[s * V + t[size_t(s + 1)]];
    }
    EXPECT_NEAR(r.loss, nll / 6, 1e-12);
    // An untrained tiny model is far from its text: the loss exceeds the unigram entropy.
    EXPECT_TRUE(r.degenerate);
}

TEST(AuditReport, JsonAndHtmlHaveEverySection) {
    Model<float> m = load_model<float>(model_dir("a_tiny_v510.f32"));
    AuditInputs in;
    in.prompts = {{"", kPrompt1}, {"", kPrompt2}};
    in.heldout = kPrompt2;
    in.heldout_source = "ids";
    AuditConfig cfg;
    cfg.steps = 3;
    cfg.cont_len = 6;
    AuditReport r = run_audit(m, in, cfg);
    auto j = report_json(r);
    for (const char* k : {"model", "config", "prompts", "eps_G", "order_parameter",
                          "block_vs_sequential", "spectral", "sdpa_identity_residual",
                          "absorption_residual", "padding", "loss_vs_unigram", "paper"})
        EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["eps_G"]["per_prompt"].size(), 2u);
    EXPECT_EQ(j["eps_G"]["per_prompt"][0]["steps"].size(), 3u);
    EXPECT_EQ(j["order_parameter"]["prompts"]["pairs"], 1);
    EXPECT_EQ(j["spectral"]["instances"].size(), size_t(2 * m.cfg.num_layers * m.cfg.num_heads));
    EXPECT_GT(j["block_vs_sequential"]["max_token_gap"].get<double>(), 0.0);
    const std::string h = report_html(r);
    EXPECT_NE(h.find("<svg"), std::string::npos);
    EXPECT_NE(h.find("<polyline"), std::string::npos);
    EXPECT_EQ(h.find("http"), std::string::npos);  // self-contained
    EXPECT_NE(h.find(kDegenerateNote), std::string::npos);
}

}  // namespace
